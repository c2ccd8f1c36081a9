use super::fixtures::*;
use super::*;

#[test]
fn the_correct_site_has_no_finding() {
    assert_eq!(audit(&site_with(|_, _, _, _| {})), []);
}

/// Changes the show-config text, QOS, partitions and gpu_qos.conf.
type Edit = dyn Fn(&mut String, &mut String, &mut String, &mut String);

#[test]
fn each_broken_link_is_one_finding() {
    use Severity::*;
    let cases: Vec<(Box<Edit>, Severity, &str)> = vec![
        (
            Box::new(|c, _, _, _| replace(c, "associations,limits,qos,safe", "associations")),
            Error,
            "enforce_incomplete",
        ),
        (
            Box::new(|c, _, _, _| replace(c, ",gres/gpu:h100", "")),
            Error,
            "tres_untracked",
        ),
        (
            Box::new(|c, _, _, _| replace(c, "= gpu_qos", "= lua")),
            Error,
            "plugin_not_loaded",
        ),
        (
            Box::new(|c, _, _, _| replace(c, "preempt/qos", "preempt/none")),
            Error,
            "preempt_type",
        ),
        (
            Box::new(|c, _, _, _| replace(c, "JobRequeue              = 1", "JobRequeue = 0")),
            Note,
            "job_requeue_off",
        ),
        (
            Box::new(|c, _, _, _| {
                replace(
                    c,
                    "PriorityWeightQOS       = 10000",
                    "PriorityWeightQOS = 0",
                )
            }),
            Warning,
            "priority_weight_qos_zero",
        ),
        (
            Box::new(|c, _, _, _| replace(c, "PriorityWeightFairShare = 1000", "")),
            Warning,
            "priority_weight_fairshare_zero",
        ),
        (
            Box::new(|c, _, _, _| replace(c, "priority/multifactor", "priority/basic")),
            Warning,
            "priority_not_multifactor",
        ),
        (
            Box::new(|c, _, _, _| replace(c, "gpu-mps-prolog", "site-prolog")),
            Error,
            "mps_prolog_missing",
        ),
        (
            Box::new(|_, q, _, _| {
                replace(
                    q,
                    "|lowprio|cluster|00:00:00|1.000000|DenyOnLimit|100\nqos_dijk",
                    "||cluster|00:00:00|1.000000|DenyOnLimit|100\nqos_dijk",
                )
            }),
            Error,
            "group_cannot_preempt",
        ),
        (
            Box::new(|_, q, _, _| replace(q, "requeue|00:02:00", "requeue|00:00:00")),
            Warning,
            "no_grace_time",
        ),
        (
            Box::new(|_, q, _, _| {
                replace(q, "requeue|00:02:00|0.000000", "cancel|00:02:00|0.000000")
            }),
            Note,
            "preempt_cancels",
        ),
        (
            Box::new(|_, q, _, _| replace(q, "requeue|00:02:00|0.000000", "off|00:02:00|0.000000")),
            Error,
            "preempt_mode_off",
        ),
        (
            Box::new(|_, q, _, _| replace(q, "00:02:00|0.000000", "00:02:00|1.000000")),
            Note,
            "low_priority_usage_factor",
        ),
        (
            Box::new(|_, q, _, _| {
                replace(
                    q,
                    "1.000000|DenyOnLimit|100\nqos_dijk",
                    "1.000000||100\nqos_dijk",
                )
            }),
            Note,
            "no_deny_on_limit",
        ),
        (
            Box::new(|_, q, _, _| replace(q, "gres/gpu:a40=4", "gres/gpu:a40=8")),
            Error,
            "limit_differs",
        ),
        (
            Box::new(|_, _, p, _| replace(p, ",GRES/gpu:h100=2.0", "")),
            Note,
            "billing_types_alike",
        ),
        (
            Box::new(|c, _, _, _| c.push_str("PriorityWeightAge = 100\n")),
            Note,
            "max_age_default",
        ),
        (
            Box::new(|_, _, p, _| replace(p, "GRES/gpu=1.0,", "")),
            Warning,
            "billing_typed_only",
        ),
        (
            Box::new(|_, _, p, _| {
                replace(
                    p,
                    " TRESBillingWeights=CPU=1.0,GRES/gpu=1.0,GRES/gpu:h100=2.0",
                    "",
                )
            }),
            Note,
            "billing_ignores_gpus",
        ),
        (
            Box::new(|_, _, _, f| replace(f, "QOS=qos_dijk GPUTypes=h100 GPULimit=2\n", "")),
            Error,
            "unlisted_typed_qos",
        ),
        (
            Box::new(|_, _, p, _| replace(p, "Nodes=node1 ", "Nodes=node1 QOS=qos_dijk ")),
            Error,
            "partition_qos_unenforced",
        ),
        (
            Box::new(|_, _, _, f| f.push_str("Account=lafferty GPUTypes=a4O\n")),
            Warning,
            "rule_type_on_no_node",
        ),
        (
            Box::new(|_, _, _, f| replace(f, "GPULimit=2\n", "GPULimit=2 Enforce=warn\n")),
            Warning,
            "only_warns",
        ),
    ];
    for (edit, severity, kind) in cases {
        let site = site_with(|c, q, p, f| edit(c, q, p, f));
        assert_eq!(kinds(&site), [(severity, kind.to_owned())], "{kind}");
    }
}

#[test]
fn fixes_are_exact() {
    let site = site_with(|c, q, _, _| {
        replace(c, "associations,limits,qos,safe", "associations");
        replace(c, ",gres/gpu:h100", "");
        replace(
            q,
            "|lowprio|cluster|00:00:00|1.000000|DenyOnLimit|100\nqos_dijk",
            "||cluster|00:00:00|1.000000||100\nqos_dijk",
        );
    });
    let fixes: Vec<String> = audit(&site).into_iter().map(|f| f.fix).collect();
    assert_eq!(
        fixes,
        [
            "AccountingStorageEnforce=associations,limits,qos (then restart slurmctld)",
            "AccountingStorageTRES=cpu,mem,energy,node,billing,fs/disk,vmem,pages,gres/gpu,\
             gres/gpu:a40,gres/mps,gres/gpu:h100 (then restart slurmctld)",
            "sacctmgr -i modify qos qos_lafferty set Preempt+=lowprio",
            "sacctmgr -i modify qos qos_lafferty set Flags+=DenyOnLimit",
        ]
    );
}

#[test]
fn unreadable_parts_become_notes() {
    let site = site_with(|_, q, _, _| q.push_str("broken|line\n"));
    let found = audit(&site);
    assert_eq!(found.len(), 1);
    assert_eq!(
        (found[0].severity, found[0].kind.as_str()),
        (Severity::Note, "unread")
    );
    assert!(found[0].what.contains("2 fields"));
}
