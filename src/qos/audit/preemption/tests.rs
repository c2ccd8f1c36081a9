use crate::qos::audit::audit;
use crate::qos::audit::fixtures::*;

#[test]
fn a_queue_mode_inherited_from_the_cluster_counts() {
    let site = site_with(|c, q, _, _| {
        replace(q, "requeue|00:02:00", "cluster|00:02:00");
        replace(c, "PreemptMode             = REQUEUE", "PreemptMode = OFF");
    });
    let found = audit(&site);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].kind, "preempt_mode_off");
    assert!(
        found[0].what.contains("the cluster's PreemptMode is off"),
        "{}",
        found[0].what
    );
    assert_eq!(
        found[0].fix,
        "sacctmgr -i modify qos lowprio set PreemptMode=requeue"
    );
}
