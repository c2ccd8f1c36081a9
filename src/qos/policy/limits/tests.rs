//! The typed limits of the database at levels without a rule.
use super::super::job::{JobDescription, LimitLevel, TypedLimit};
use super::super::verdict::RejectionKind;
use super::unruled;
use crate::qos::gres::PerNodeSpelling;
use crate::qos::policy::fixtures::*;
use crate::qos::policy::job::Resolved;
use crate::qos::policy::{judge_modify, judge_submit};

fn limits() -> Vec<TypedLimit> {
    vec![
        TypedLimit {
            level: LimitLevel::Partition {
                partition: "grp_a40".into(),
                qos: "part_a40".into(),
            },
            types: vec!["a40".into()],
        },
        TypedLimit {
            level: LimitLevel::Account("lafferty".into()),
            types: vec!["a40".into(), "h100".into()],
        },
    ]
}

#[test]
fn an_untyped_request_under_a_typed_limit_without_a_rule_is_refused() {
    let limits = limits();
    let job = JobDescription {
        qos: Some("normal"),
        tres_per_node: Some("gres:gpu:1"),
        per_node_spelling: PerNodeSpelling::Gres,
        partition: Some("grp_a40"),
        resolved: Resolved {
            typed_limits: &limits[..1],
            ..Resolved::default()
        },
        ..JobDescription::default()
    };
    let r = rejection(judge_submit(&cfg(), &job));
    assert_eq!(r.kind, RejectionKind::UnlistedTypedLimit);
    assert_eq!(
        r.message,
        "Partition grp_a40's QOS has a GPU limit by type in Slurm's accounting (a40), \
         which counts only GPU requests that name their type, but --gres=gpu:1 does not \
         name one. Submit with --gres=gpu:a40:1 instead."
    );
    let typed = JobDescription {
        tres_per_node: Some("gres:gpu:a40:1"),
        ..job
    };
    assert!(changes(judge_submit(&cfg(), &typed)).is_empty());
    // Only the hole is closed: a type the limit does not name, or no
    // GPU at all, is the site's business until a rule says otherwise.
    let other = JobDescription {
        tres_per_node: Some("gres:gpu:h100:1"),
        ..job
    };
    assert!(changes(judge_submit(&cfg(), &other)).is_empty());
    let cpu = JobDescription {
        tres_per_node: None,
        ..job
    };
    assert!(changes(judge_submit(&cfg(), &cpu)).is_empty());
}

#[test]
fn a_rule_for_the_level_judges_instead() {
    let limits = limits();
    let cfg = cfg_from(LEVELS);
    let job = JobDescription {
        tres_per_node: Some("gres:gpu:h100:1"),
        resolved: Resolved {
            typed_limits: &limits[1..],
            accounts: &[],
            ..Resolved::default()
        },
        ..JobDescription::default()
    };
    // LEVELS has an Account=lafferty rule: the limit is left to it.
    assert!(unruled(&cfg, &job).next().is_none());
    assert!(unruled(&cfg_from(""), &job).next().is_some());
}

#[test]
fn the_default_qos_and_the_account_are_told_as_such() {
    let limits = vec![
        TypedLimit {
            level: LimitLevel::Qos("qos_group".into()),
            types: vec!["l40s".into()],
        },
        TypedLimit {
            level: LimitLevel::Account("lafferty".into()),
            types: vec!["a40".into()],
        },
    ];
    let job = JobDescription {
        tres_per_job: Some("gres/gpu:2"),
        resolved: Resolved {
            typed_limits: &limits,
            ..Resolved::default()
        },
        ..JobDescription::default()
    };
    let r = rejection(judge_submit(&cfg_from(""), &job));
    assert!(
        r.message.starts_with(
            "Your default QOS qos_group (the job names no --qos, so it runs under it) has \
             a GPU limit by type"
        ),
        "{}",
        r.message
    );
    assert!(
        r.message.ends_with("Submit with --gpus=l40s:2 instead."),
        "{}",
        r.message
    );
    let accounts_only = JobDescription {
        resolved: Resolved {
            typed_limits: &limits[1..],
            ..Resolved::default()
        },
        ..job
    };
    let r = rejection(judge_submit(&cfg_from(""), &accounts_only));
    assert!(
        r.message
            .starts_with("Account lafferty has a GPU limit by type"),
        "{}",
        r.message
    );
}

#[test]
fn an_update_into_a_level_with_a_typed_limit_needs_a_typed_request() {
    let limits = limits();
    let to_lafferty = JobDescription {
        job_id_for_messages: Some(42),
        resolved: Resolved {
            typed_limits: &limits[1..],
            ..Resolved::default()
        },
        ..JobDescription::default()
    };
    let r = rejection(judge_modify(&cfg_from(""), &to_lafferty));
    assert_eq!(r.kind, RejectionKind::UnlistedTypedLimit);
    assert!(
        r.message.starts_with(
            "Moving a job to account lafferty needs a typed GPU request in the same update"
        ),
        "{}",
        r.message
    );
    assert!(
        r.message.contains("scontrol update job=42 Gres=gpu:a40:1"),
        "{}",
        r.message
    );
    let untyped = JobDescription {
        tres_per_node: Some("gres:gpu:1"),
        ..to_lafferty
    };
    let r = rejection(judge_modify(&cfg_from(""), &untyped));
    assert!(
        r.message
            .ends_with("Use: scontrol update job=42 Gres=gpu:a40:1"),
        "{}",
        r.message
    );
    let typed = JobDescription {
        tres_per_node: Some("gres:gpu:a40:1"),
        ..to_lafferty
    };
    assert!(changes(judge_modify(&cfg_from(""), &typed)).is_empty());
}

#[test]
fn only_untyped_or_unreadable_gpu_requests_need_the_limits_looked_up() {
    use crate::qos::policy::asks_untyped_gpu;
    let job = |node, per_job| JobDescription {
        tres_per_node: node,
        tres_per_job: per_job,
        ..JobDescription::default()
    };
    assert!(!asks_untyped_gpu(&job(None, None)));
    assert!(!asks_untyped_gpu(&job(Some("gres:gpu:a40:2"), None)));
    assert!(!asks_untyped_gpu(&job(Some("gres:mps:25"), None)));
    assert!(asks_untyped_gpu(&job(Some("gres:gpu:2"), None)));
    assert!(asks_untyped_gpu(&job(None, Some("gres/gpu:4"))));
    assert!(asks_untyped_gpu(&job(
        Some("gres:gpu:a40:1"),
        Some("gres/gpu")
    )));
    assert!(asks_untyped_gpu(&job(Some("gres:gpu:a40:x"), None)));
}
