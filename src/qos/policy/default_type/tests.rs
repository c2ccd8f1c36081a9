use super::super::fixtures::{cfg_from, changes, job, rejection};
use super::super::submit::judge_submit;
use super::super::verdict::{RejectionKind, Verdict, WarningReason};
use super::*;

const CONF: &str = "\
QOS=qos_lafferty GPUTypes=a40 GPULimit=4 DefaultGPUType=a40
QOS=qos_pair GPUTypes=a40,h100 GPULimit=a40:4,h100:2 DefaultGPUType=h100
QOS=qos_plain GPUTypes=a40
QOS=qos_watch GPUTypes=a40 DefaultGPUType=a40 Enforce=warn
Partition=gpu GPUTypes=a40,h100
Partition=h100only GPUTypes=h100
";

fn given(conf: &str, j: &JobDescription<'_>) -> TypeGiven {
    changes(judge_submit(&cfg_from(conf), j))
        .gpu_type_given
        .map(|g| *g)
        .expect("a type given")
}

#[test]
fn an_untyped_request_is_given_the_rules_type_in_every_field() {
    let g = given(CONF, &job(Some("qos_lafferty"), Some("gres:gpu:2")));
    assert_eq!(g.gpu_type, "a40");
    assert_eq!(
        g.fields,
        vec![(TresField::PerNode, "gres:gpu:a40:2".to_owned())]
    );
    assert_eq!(
        g.message,
        "--gres=gpu:2 names no GPU type, so the job was given type a40 (DefaultGPUType=a40): \
         it runs as if submitted with --gres=gpu:a40:2."
    );
    // Each field, in its own spelling; a typed entry beside it kept.
    let many = JobDescription {
        tres_per_job: Some("gres/gpu:2"),
        tres_per_task: Some("cpu=4,gres/gpu=1"),
        ..job(Some("qos_pair"), Some("gres:gpu:a40:1,gres:gpu:1"))
    };
    let g = given(CONF, &many);
    assert_eq!(
        g.fields,
        vec![
            (
                TresField::PerNode,
                "gres:gpu:a40:1,gres:gpu:h100:1".to_owned()
            ),
            (TresField::PerJob, "gres/gpu:h100:2".to_owned()),
            (TresField::PerTask, "cpu=4,gres/gpu:h100=1".to_owned()),
        ]
    );
}

#[test]
fn gpus_slurm_adds_for_ntasks_per_gpu_are_asked_for_with_the_type() {
    for (slash, field) in [(false, "gres:gpu:a40:2"), (true, "gres/gpu:a40:2")] {
        let j = JobDescription {
            num_tasks: Some(4),
            ntasks_per_gpu: Some(2),
            gres_slash: slash,
            ..job(Some("qos_lafferty"), None)
        };
        let g = given(CONF, &j);
        assert_eq!(g.fields, vec![(TresField::PerJob, field.to_owned())]);
        assert!(
            g.message.ends_with("--gpus=a40:2 --ntasks-per-gpu=2."),
            "{}",
            g.message
        );
    }
}

#[test]
fn the_typed_request_is_judged_as_any_other() {
    // Over the rule's limit once typed: refused, saying it was typed.
    let r = rejection(judge_submit(
        &cfg_from(CONF),
        &job(Some("qos_lafferty"), Some("gres:gpu:8")),
    ));
    assert_eq!(r.kind, RejectionKind::OverLimit);
    assert!(
        r.message
            .starts_with("--gres=gpu:8 names no GPU type, so it was given type a40"),
        "{}",
        r.message
    );
    // Typed already, or no GPU: nothing given.
    let c = changes(judge_submit(
        &cfg_from(CONF),
        &job(Some("qos_lafferty"), Some("gres:gpu:a40:2")),
    ));
    assert_eq!(c.gpu_type_given, None);
}

#[test]
fn no_type_is_given_where_a_rule_covering_the_job_says_otherwise() {
    let cfg = cfg_from(CONF);
    let refused = |j: &JobDescription<'_>| rejection(judge_submit(&cfg, j)).kind;
    // A rule without a default: refused as before.
    assert_eq!(
        refused(&job(Some("qos_plain"), Some("gres:gpu:1"))),
        RejectionKind::UntypedGpu
    );
    // Its partition's rule does not permit the QOS's default type.
    let in_h100 = JobDescription {
        partition: Some("h100only"),
        ..job(Some("qos_lafferty"), Some("gres:gpu:1"))
    };
    assert_eq!(refused(&in_h100), RejectionKind::UntypedGpu);
    // A partition's rule that permits it: given.
    let in_gpu = JobDescription {
        partition: Some("gpu"),
        ..job(Some("qos_lafferty"), Some("gres:gpu:1"))
    };
    assert!(changes(judge_submit(&cfg, &in_gpu))
        .gpu_type_given
        .is_some());
    // Two QOS with different defaults: neither is chosen.
    let both = job(Some("qos_lafferty,qos_pair"), Some("gres:gpu:1"));
    assert!(matches!(judge_submit(&cfg, &both), Verdict::Reject(_)));
    // GPU text hidden in another entry is refused, never rewritten.
    let hidden = JobDescription {
        tres_per_job: Some("cpu=gres:gpu:2"),
        ..job(Some("qos_lafferty"), None)
    };
    assert_eq!(refused(&hidden), RejectionKind::BadRequest);
}

#[test]
fn under_enforce_warn_the_job_runs_as_sent_and_is_told_what_it_would_become() {
    let c = changes(judge_submit(
        &cfg_from(CONF),
        &job(Some("qos_watch"), Some("gres:gpu:2")),
    ));
    assert_eq!(c.gpu_type_given, None);
    let reasons: Vec<WarningReason> = c.warnings.iter().map(|w| w.reason).collect();
    assert_eq!(
        reasons,
        vec![
            WarningReason::TypeGiven,
            WarningReason::Refusal(RejectionKind::UntypedGpu)
        ]
    );
    let told = c.user_message().unwrap_or_default();
    assert!(
        told.contains("the job would run as if submitted with --gres=gpu:a40:2.")
            && told.contains("[GQ204]"),
        "{told}"
    );
}

#[test]
fn a_default_type_must_be_one_the_rule_permits() {
    for bad in [
        "QOS=q GPUTypes=a40 DefaultGPUType=h100\n",
        "QOS=q GPUTypes=a100_* DefaultGPUType=a100_*\n",
        "DefaultGPUType=a40\n",
    ] {
        assert!(
            crate::qos::config::parse(bad, "gpu_qos.conf").is_err(),
            "{bad}"
        );
    }
    let slice = cfg_from("QOS=q GPUTypes=a100_* DefaultGPUType=a100_1g.10gb\n");
    assert!(slice.rule_for("q").is_some());
}
