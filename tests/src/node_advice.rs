//! The whole-GPU request a node's refusal of a share suggests
//! (`gpushare::mps::node::whole_gpus`) is one the controller's
//! policy accepts: fed back in place of the refused `--gres=mps:N`, under
//! a group QOS whose limit is typed, it is judged by the plugin's own core
//! (`judge_submit`). The two halves never import each other; this crate
//! sees both.

use gpushare::mps::node::whole_gpus;
use gpushare::qos::policy::{judge_submit, JobDescription, Resolved, Verdict};
use gpushare::qos::submit_line::parse as parse_line;

const CONF: &str = "QOS=qos_lafferty GPUTypes=a40 GPULimit=4\n\
                    QOS=qos_saxena GPUTypes=a100,h100 GPULimit=a100:20,h100:2\n";

/// The policy's verdict on `line`, as slurmctld would resolve it for a
/// user of account `physics` whose default QOS is `qos_lafferty`.
fn verdict(line: &str) -> Verdict {
    let cfg = gpushare::qos::config::parse(CONF, "gpu_qos.conf").unwrap_or_else(|e| panic!("{e}"));
    let o = parse_line(line);
    let per_node = o.per_node.join(",");
    let accounts = ["physics".to_owned(), "root".to_owned()];
    let default_qos = ["qos_lafferty".to_owned()];
    let job = JobDescription {
        qos: o.qos.as_deref(),
        tres_per_node: (!per_node.is_empty()).then_some(per_node.as_str()),
        partition: o.partition.as_deref(),
        per_node_spelling: o.per_node_spelling(),
        resolved: Resolved {
            default_qos: if o.qos.is_some() { &[] } else { &default_qos },
            default_partition: Some("gpu"),
            accounts: &accounts,
            user: Some("alice"),
            typed_limits: &[],
            typed_limits_anywhere: true,
        },
        ..JobDescription::default()
    };
    judge_submit(&cfg, &job)
}

#[test]
fn a_nodes_whole_gpu_advice_is_accepted_by_the_policy() {
    for (qos, types) in [
        ("--qos=qos_lafferty", vec!["a40".to_owned()]),
        ("", vec!["a40".to_owned()]),
        (
            "--qos=qos_saxena",
            vec!["a100".to_owned(), "h100".to_owned()],
        ),
    ] {
        let advice = whole_gpus(&types, 1, "node1");
        let options: Vec<&str> = advice.split(" or ").collect();
        assert_eq!(options.len(), types.len(), "{advice}");
        for option in options {
            let line = format!("sbatch {qos} {option} job.sh");
            assert!(
                matches!(verdict(&line), Verdict::Accept(_)),
                "`{line}` (the node's advice: {advice}) is refused"
            );
        }
        // The line the node refused is one the policy passes too (a share),
        // and an untyped whole GPU is not: the advice had to be typed.
        let untyped = format!("sbatch {qos} --gres=gpu:1 job.sh");
        if !qos.is_empty() || types == ["a40"] {
            assert!(
                matches!(verdict(&untyped), Verdict::Reject(_)),
                "`{untyped}` accepted: the test's policy does not tell typed from untyped"
            );
        }
    }
}
