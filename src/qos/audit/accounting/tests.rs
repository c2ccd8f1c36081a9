use super::*;
use crate::qos::audit::audit;
use crate::qos::audit::fixtures::*;

#[test]
fn a_partition_rule_covers_the_partitions_qos() {
    // qos_part is used only as the partition's QOS: its Partition= rule
    // covers it, and it is no unlisted QOS.
    let site = site_with(|_, q, p, f| {
        q.push_str("qos_part|gres/gpu:a40=8,gres/gpu:h100=1|lowprio|cluster|00:00:00|1.000000|DenyOnLimit|100\n");
        replace(p, "Nodes=node1 ", "Nodes=node1 QOS=qos_part ");
        f.push_str("Partition=gpu GPUTypes=a40,h100 GPULimit=a40:8,h100:1\n");
    });
    assert_eq!(kinds(&site), []);
    let uncovered = site_with(|_, q, p, _| {
        q.push_str("qos_part|gres/gpu:a40=8,gres/gpu:h100=1|lowprio|cluster|00:00:00|1.000000|DenyOnLimit|100\n");
        replace(p, "Nodes=node1 ", "Nodes=node1 QOS=qos_part ");
    });
    let findings = audit(&uncovered);
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(
        findings[0].fix,
        "add to /etc/slurm/gpu_qos.conf: Partition=gpu GPUTypes=a40,h100 GPULimit=a40:8,h100:1"
    );
}

#[test]
fn no_gpu_qos_conf_with_typed_limits_is_an_error() {
    let mut site = site_with(|_, _, _, _| {});
    site.gpu_qos_conf = GpuQosConf::Missing;
    assert_eq!(
        kinds(&site),
        [(Severity::Error, "gpu_qos_conf_missing".to_owned())]
    );
    // Without the plugin nothing makes lowprio jobs requeueable.
    let mut site =
        site_with(|c, _, _, _| replace(c, "JobRequeue              = 1", "JobRequeue = 0"));
    site.gpu_qos_conf = GpuQosConf::Missing;
    assert_eq!(
        kinds(&site),
        [
            (Severity::Error, "gpu_qos_conf_missing".to_owned()),
            (Severity::Warning, "job_requeue_off".to_owned())
        ]
    );
    // Without LowPriorityQOS the preempted QOS are found from Preempt lists.
    let found = audit(&site_with(|_, q, _, _| {
        replace(q, "requeue|00:02:00", "requeue|00:00:00")
    }));
    assert_eq!(found[0].object, "QOS lowprio");
}
