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

#[test]
fn a_user_association_limit_refuses_untyped_requests_and_names_the_user() {
    let limits = vec![TypedLimit {
        level: LimitLevel::User {
            user: "alice".into(),
            account: "lab".into(),
            partition: None,
        },
        types: vec!["a40".into()],
    }];
    let job = JobDescription {
        tres_per_node: Some("gres:gpu:2"),
        per_node_spelling: PerNodeSpelling::Gres,
        resolved: Resolved {
            typed_limits: &limits,
            user: Some("alice"),
            ..Resolved::default()
        },
        ..JobDescription::default()
    };
    let r = rejection(judge_submit(&cfg_from(""), &job));
    assert_eq!(r.kind, RejectionKind::UnlistedTypedLimit);
    assert_eq!(
        r.message,
        "User alice has a GPU limit by type in Slurm's accounting (a40), which counts only \
         GPU requests that name their type, but --gres=gpu:2 does not name one. Submit with \
         --gres=gpu:a40:2 instead."
    );
    assert_eq!(
        limits[0].level.rule_line(&limits[0].types),
        "Account=lab User=alice GPUTypes=a40"
    );
    let typed = JobDescription {
        tres_per_node: Some("gres:gpu:a40:2"),
        ..job
    };
    assert!(changes(judge_submit(&cfg_from(""), &typed)).is_empty());
    // A rule for the user (or the whole account) judges it instead.
    for rule in ["User=alice GPUTypes=a40", "Account=lab GPUTypes=a40"] {
        assert!(unruled(&cfg_from(rule), &job).next().is_none(), "{rule}");
    }
    assert!(unruled(&cfg_from("User=bob GPUTypes=a40"), &job)
        .next()
        .is_some());
}

#[test]
fn gpus_slurm_adds_for_ntasks_per_gpu_are_untyped_and_refused_under_a_typed_limit() {
    let limits = limits();
    // `sbatch -n 2 --ntasks-per-gpu=1` under a partition with a typed limit.
    let job = JobDescription {
        qos: Some("normal"),
        num_tasks: Some(2),
        ntasks_per_gpu: Some(1),
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
        "Partition grp_a40's QOS has a GPU limit by type in Slurm's accounting (a40), which \
         counts only GPU requests that name their type, but --ntasks-per-gpu=1 without a GPU \
         request (Slurm adds 2 GPUs for it, without a type) does not name one. Submit with \
         --gpus=a40:2 --ntasks-per-gpu=1 instead."
    );
    // The line it offers is typed: Slurm counts the tasks from its GPUs.
    let typed = JobDescription {
        tres_per_job: Some("gres/gpu:a40:2"),
        ..job
    };
    assert!(changes(judge_submit(&cfg(), &typed)).is_empty());
    // Any GPU request, even an untyped one, stops Slurm adding its own:
    // then that request is what is judged.
    let untyped = JobDescription {
        tres_per_node: Some("gres:gpu:1"),
        per_node_spelling: PerNodeSpelling::Gres,
        ..job
    };
    assert!(rejection(judge_submit(&cfg(), &untyped))
        .message
        .contains("but --gres=gpu:1 does not name one"));
    // A share request is no GPU request: Slurm adds untyped GPUs beside it.
    let mps = JobDescription {
        tres_per_node: Some("gres:mps:50"),
        ..job
    };
    assert_eq!(
        rejection(judge_submit(&cfg(), &mps)).kind,
        RejectionKind::UnlistedTypedLimit
    );
    // No task count and a fixed node count: one GPU per node.
    let per_node = JobDescription {
        num_tasks: None,
        min_nodes: Some(3),
        max_nodes: Some(3),
        ntasks_per_gpu: Some(2),
        ..job
    };
    assert!(rejection(judge_submit(&cfg(), &per_node))
        .message
        .contains("Submit with --gpus=a40:3 --ntasks-per-gpu=2 instead."));
    // Outside any typed scope it is Slurm's business.
    let free = JobDescription {
        partition: Some("cpu"),
        resolved: Resolved::default(),
        ..job
    };
    assert!(changes(judge_submit(&cfg(), &free)).is_empty());
}

#[test]
fn a_gpu_qos_tells_a_job_with_derived_gpus_to_type_them_not_that_it_asks_for_none() {
    // `sbatch --qos=qos_lafferty -n 4 --ntasks-per-gpu=2`
    let job = JobDescription {
        qos: Some("qos_lafferty"),
        num_tasks: Some(4),
        ntasks_per_gpu: Some(2),
        ..JobDescription::default()
    };
    let r = rejection(judge_submit(&cfg(), &job));
    assert_eq!(r.kind, RejectionKind::UntypedGpu);
    assert_eq!(
        r.message,
        "QOS qos_lafferty requires a GPU type, but --ntasks-per-gpu=2 without a GPU request \
         (Slurm adds 2 GPUs for it, without a type) does not name one; qos_lafferty may use \
         a40. Submit with --gpus=a40:2 --ntasks-per-gpu=2 instead."
    );
    assert!(!r.message.contains("asks for no GPU"));
    // A --gpus-per-task line needs no derived GPUs: judged as typed.
    let typed = JobDescription {
        tres_per_task: Some("gres/gpu:a40:1"),
        ..job
    };
    assert!(changes(judge_submit(&cfg(), &typed)).is_empty());
    // `RequireGPUType=all`: refused anywhere, with the same words.
    let everywhere = cfg_from("RequireGPUType=all\nQOS=qos_x GPUTypes=h100\n");
    let normal = JobDescription {
        qos: Some("normal"),
        ..job
    };
    assert!(rejection(judge_submit(&everywhere, &normal))
        .message
        .contains("Submit with e.g. --gpus=h100:2 --ntasks-per-gpu=2 instead."));
    // In an update (through libslurm: scontrol has no such key), the
    // QOS unseen: refused where anything is protected.
    let update = JobDescription {
        job_id_for_messages: Some(5),
        ..JobDescription { qos: None, ..job }
    };
    let r = rejection(judge_modify(&cfg(), &update));
    assert_eq!(r.kind, RejectionKind::UpdateNeedsTypedGpu);
    assert!(
        r.message
            .contains("scontrol update job=5 TresPerJob=gres:gpu:a40:2"),
        "{}",
        r.message
    );
}
