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

#[test]
fn nodes_whose_mps_slurm_stacks_are_named_with_the_lines_to_add() {
    let gres = "Name=gpu Type=a40 File=/dev/nvidia[0-3]\n\
                Name=gpu Type=h100 File=/dev/nvidia[4-5]\n\
                Name=mps Count=400 File=/dev/nvidia[0-3] Flags=all_sharing\n";
    let mut site = site_with(|c, _, _, _| {
        c.push_str("SelectTypeParameters    = CR_CORE,LL_SHARED_GRES\n");
    });
    site.gres_conf = Some(gres.into());
    let found: Vec<_> = audit(&site)
        .into_iter()
        .filter(|f| f.kind == "mps_shares_stack")
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].what.starts_with("node node1 books mps per GPU"),
        "{:?}",
        found[0].what
    );
    assert!(
        found[0]
            .fix
            .contains("Name=mps Count=0 File=/dev/nvidia4 Flags=all_sharing"),
        "{:?}",
        found[0].fix
    );
    // With the h100s' Count=0 lines first: nothing to say.
    site.gres_conf = Some(format!(
        "Name=mps Count=0 File=/dev/nvidia[4-5] Flags=all_sharing\n{gres}"
    ));
    assert!(audit(&site).iter().all(|f| f.kind != "mps_shares_stack"));
    // LL_SHARED_GRES in slurm.conf but not in show config (23.11): read.
    let mut site = site_with(|_, _, _, _| {});
    site.slurm_conf = Some("SelectTypeParameters=CR_Core,LL_SHARED_GRES\n".into());
    site.gres_conf = Some(format!(
        "Name=mps Count=0 File=/dev/nvidia[4-5] Flags=all_sharing\n{gres}"
    ));
    assert!(audit(&site).iter().all(|f| f.kind != "mps_shares_stack"));
    // No gres.conf beside slurm.conf (nodes keep their own): no finding.
    site.gres_conf = None;
    assert!(audit(&site).iter().all(|f| f.kind != "mps_shares_stack"));
}
