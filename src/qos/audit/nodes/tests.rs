use crate::qos::audit::audit;
use crate::qos::audit::fixtures::*;

#[test]
fn mps_nodes_need_the_node_half() {
    let mut site = site_with(|c, _, _, _| {
        replace(
            c,
            "Epilog                  = /usr/libexec/gpushare/gpu-mps-epilog\n",
            "",
        );
    });
    site.plugstack = Some("# nothing\n".into());
    site.cgroup_conf = None;
    let k: Vec<String> = audit(&site).into_iter().map(|f| f.kind).collect();
    assert_eq!(
        k,
        [
            "mps_epilog_missing",
            "spank_gpu_mps_missing",
            "devices_unconstrained"
        ]
    );
    let site = site_with(|c, _, _, _| replace(c, "task/cgroup,task/affinity", "task/none"));
    let found = audit(&site);
    assert_eq!(found.len(), 1);
    assert_eq!(
        (found[0].object.as_str(), found[0].what.as_str()),
        (
            "slurm.conf",
            "node node1 offers mps, but TaskPlugin lacks task/cgroup"
        )
    );
}
