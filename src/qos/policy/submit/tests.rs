use super::judge_submit;
use crate::qos::config::GpuQosConfig;
use crate::qos::gres::PerNodeSpelling;
use crate::qos::policy::fixtures::*;
use crate::qos::policy::job::{JobDescription, Resolved};
use crate::qos::policy::update::judge_modify;
use crate::qos::policy::verdict::RejectionKind;

// Rule 1
#[test]
fn untyped_gres_under_gpu_qos_is_rejected_with_the_typed_option() {
    let r = rejection(submit(&job(Some("qos_lafferty"), Some("gres:gpu:2"))));
    assert_eq!(r.kind, RejectionKind::UntypedGpu);
    assert_eq!(
        r.message,
        "QOS qos_lafferty requires a GPU type, but --gres=gpu:2 does not name one; \
         qos_lafferty may use a40. Submit with --gres=gpu:a40:2 instead."
    );
    assert_eq!(r.to_string(), r.message);
}

#[test]
fn untyped_suggestion_follows_the_field_used() {
    let per_job = JobDescription {
        qos: Some("qos_ying_rex"),
        tres_per_job: Some("gres/gpu:3"),
        ..JobDescription::default()
    };
    let r = rejection(submit(&per_job));
    assert!(
        r.message.contains("but --gpus=3 does not name one"),
        "{}",
        r.message
    );
    assert!(
        r.message.ends_with("Submit with --gpus=a40:3 instead."),
        "{}",
        r.message
    );

    let per_task = JobDescription {
        qos: Some("qos_lafferty"),
        tres_per_task: Some("cpu=4,gres/gpu=1"),
        ..JobDescription::default()
    };
    let r = rejection(submit(&per_task));
    assert!(r
        .message
        .ends_with("Submit with --gpus-per-task=a40:1 instead."));

    let per_socket = JobDescription {
        qos: Some("qos_lafferty"),
        tres_per_socket: Some("gres:gpu:1"),
        ..JobDescription::default()
    };
    let r = rejection(submit(&per_socket));
    assert!(r
        .message
        .ends_with("Submit with --gpus-per-socket=a40:1 instead."));
}

#[test]
fn untyped_without_count_means_one() {
    let r = rejection(submit(&job(Some("qos_lafferty"), Some("gres:gpu"))));
    assert!(r.message.contains("--gres=gpu:1 does not name one"));
    assert!(r.message.ends_with("Submit with --gres=gpu:a40:1 instead."));
}

#[test]
fn several_permitted_types_suggest_the_first_and_list_all() {
    let r = rejection(submit(&job(Some("qos_saxena"), Some("gres:gpu:2"))));
    assert_eq!(
        r.message,
        "QOS qos_saxena requires a GPU type, but --gres=gpu:2 does not name one; \
         qos_saxena may use a100, h100. Submit with --gres=gpu:a100:2 instead."
    );
}

#[test]
fn qos_spelling_does_not_dodge_the_rule() {
    let r = rejection(submit(&job(Some("QOS_Lafferty"), Some("gres:GPU:2"))));
    assert_eq!(r.kind, RejectionKind::UntypedGpu);
    assert!(r
        .message
        .starts_with("QOS QOS_Lafferty requires a GPU type"));
}

// Rule 2
#[test]
fn typed_permitted_requests_are_accepted_unchanged() {
    for gres in [
        "gres:gpu:a40:2",
        "gres/gpu:a40:4",
        "gpu:a40",
        "gres:gpu:a40:2,gres:gpu:a40:0",
    ] {
        assert!(changes(submit(&job(Some("qos_lafferty"), Some(gres)))).is_empty());
    }
    let per_task = JobDescription {
        qos: Some("qos_saxena"),
        tres_per_task: Some("cpu=4,gres/gpu:h100=1"),
        num_tasks: Some(4),
        ..JobDescription::default()
    };
    assert!(changes(submit(&per_task)).is_empty());
}

// Rule 3
#[test]
fn typed_request_outside_the_qos_types_is_rejected() {
    let r = rejection(submit(&job(Some("qos_lafferty"), Some("gres:gpu:a100:2"))));
    assert_eq!(r.kind, RejectionKind::TypeNotPermitted);
    assert_eq!(
        r.message,
        "QOS qos_lafferty does not cover GPU type a100 (asked with --gres=gpu:a100:2); \
         qos_lafferty may use a40. Submit with --gres=gpu:a40:2 instead, or use a QOS \
         that covers a100."
    );
}

#[test]
fn type_comparison_is_exact() {
    let r = rejection(submit(&job(Some("qos_lafferty"), Some("gres:gpu:A40:1"))));
    assert_eq!(r.kind, RejectionKind::TypeNotPermitted);
}

// Rule 4
#[test]
fn every_field_is_judged() {
    let mixed = JobDescription {
        qos: Some("qos_lafferty"),
        tres_per_node: Some("gres:gpu:a40:1"),
        tres_per_task: Some("gres/gpu=1"),
        ..JobDescription::default()
    };
    let r = rejection(submit(&mixed));
    assert_eq!(r.kind, RejectionKind::UntypedGpu);
    assert!(r
        .message
        .ends_with("Submit with --gpus-per-task=a40:1 instead."));

    let wrong_socket = JobDescription {
        qos: Some("qos_lafferty"),
        tres_per_node: Some("gres:gpu:a40:1"),
        tres_per_socket: Some("gres:gpu:a100:1"),
        ..JobDescription::default()
    };
    assert_eq!(
        rejection(submit(&wrong_socket)).kind,
        RejectionKind::TypeNotPermitted
    );

    let gpu_only_in_per_job = JobDescription {
        qos: Some("qos_lafferty"),
        tres_per_node: Some("gres:mps:0"),
        tres_per_job: Some("gres:gpu:a40:1"),
        ..JobDescription::default()
    };
    assert!(changes(submit(&gpu_only_in_per_job)).is_empty());
}

// Rule 5
#[test]
fn per_job_over_limit_can_never_start() {
    let j = JobDescription {
        qos: Some("qos_lafferty"),
        tres_per_job: Some("gres:gpu:a40:8"),
        ..JobDescription::default()
    };
    let r = rejection(submit(&j));
    assert_eq!(r.kind, RejectionKind::OverLimit);
    assert_eq!(
        r.message,
        "This job can never start: asks 8 a40, qos_lafferty allows at most 4 (the QOS's \
         GrpTRES). Ask for at most 4: --gpus=a40:4, or use a QOS with a larger limit."
    );
}

#[test]
fn per_node_counts_multiply_by_nodes() {
    let j = JobDescription {
        min_nodes: Some(3),
        ..job(Some("qos_lafferty"), Some("gres:gpu:a40:2"))
    };
    let r = rejection(submit(&j));
    assert_eq!(
        r.message,
        "This job can never start: asks 6 a40, qos_lafferty allows at most 4 (the QOS's \
         GrpTRES). With 3 nodes that is at most --gres=gpu:a40:1; or ask for fewer nodes, or use \
         a QOS with a larger limit."
    );
    let fits = JobDescription {
        min_nodes: Some(2),
        ..job(Some("qos_lafferty"), Some("gres:gpu:a40:2"))
    };
    assert!(changes(submit(&fits)).is_empty());
}

#[test]
fn per_task_and_per_socket_counts_multiply() {
    let tasks = JobDescription {
        qos: Some("qos_lafferty"),
        tres_per_task: Some("gres/gpu:a40=1"),
        num_tasks: Some(5),
        ..JobDescription::default()
    };
    let r = rejection(submit(&tasks));
    assert_eq!(
        r.message,
        "This job can never start: asks 5 a40, qos_lafferty allows at most 4 (the QOS's \
         GrpTRES). Even one a40 per task is too many with 5 tasks: ask for fewer tasks, or use a \
         QOS with a larger limit."
    );
    let sockets = JobDescription {
        qos: Some("qos_lafferty"),
        tres_per_socket: Some("gres:gpu:a40:1"),
        sockets_per_node: Some(2),
        min_nodes: Some(3),
        ..JobDescription::default()
    };
    let r = rejection(submit(&sockets));
    assert!(r
        .message
        .starts_with("This job can never start: asks 6 a40"));
    assert!(r.message.contains("with 2 sockets per node on 3 nodes"));
}

#[test]
fn fields_bound_the_total_together_not_as_a_sum() {
    let j = JobDescription {
        qos: Some("qos_lafferty"),
        tres_per_job: Some("gres:gpu:a40:4"),
        tres_per_node: Some("gres:gpu:a40:2"),
        min_nodes: Some(2),
        ..JobDescription::default()
    };
    assert!(changes(submit(&j)).is_empty());
}

#[test]
fn no_limit_means_no_never_fits_check_and_huge_counts_saturate() {
    let j = JobDescription {
        min_nodes: Some(u32::MAX),
        sockets_per_node: Some(u16::MAX),
        tres_per_socket: Some("gres:gpu:a40:16G"),
        ..job(Some("qos_open"), Some("gres:gpu:a40:16G"))
    };
    assert!(changes(submit(&j)).is_empty());
    let j = JobDescription {
        qos: Some("qos_lafferty"),
        ..j
    };
    let r = rejection(submit(&j));
    assert!(
        r.message.contains(&format!("asks {} a40", u64::MAX)),
        "{}",
        r.message
    );
}

// Rule 6
#[test]
fn gpu_qos_without_gpu_request_is_rejected() {
    let r = rejection(submit(&job(Some("qos_lafferty"), None)));
    assert_eq!(r.kind, RejectionKind::NoGpuRequest);
    assert_eq!(
        r.message,
        "QOS qos_lafferty is for GPU jobs, and this job asks for no GPU. Ask for a GPU \
         with --gres=gpu:a40:1 (qos_lafferty may use a40), or submit under another QOS."
    );
    let r = rejection(submit(&job(Some("qos_lafferty"), Some("gres:gpu:a40:0"))));
    assert_eq!(r.kind, RejectionKind::NoGpuRequest);
}

#[test]
fn gpu_qos_with_only_shares_is_told_why() {
    let j = JobDescription {
        reservation: Some("jhl_homework_gpu"),
        ..job(Some("qos_lafferty"), Some("gres:mps:50"))
    };
    let r = rejection(submit(&j));
    assert_eq!(r.kind, RejectionKind::NoGpuRequest);
    assert!(r.message.contains("asks only for GPU shares (mps/shard)"));
}

// Rule 7
#[test]
fn unlisted_or_no_qos_is_untouched() {
    for qos in [None, Some("normal"), Some("")] {
        assert!(changes(submit(&job(qos, Some("gres:gpu:2")))).is_empty());
        assert!(changes(submit(&job(qos, Some("gres:gpu:v100:200")))).is_empty());
        assert!(changes(submit(&job(qos, None))).is_empty());
    }
}

#[test]
fn require_gpu_type_all_rejects_untyped_everywhere() {
    let cfg = cfg_from("QOS=q GPUTypes=a40\nQOS=r GPUTypes=a100,a40\nRequireGPUType=all");
    let r = rejection(judge_submit(&cfg, &job(None, Some("gres:gpu:2"))));
    assert_eq!(r.kind, RejectionKind::UntypedGpu);
    assert_eq!(
        r.message,
        "GPU requests must name a GPU type, but --gres=gpu:2 does not name one \
         (known types: a40, a100). Submit with e.g. --gres=gpu:a40:2 instead."
    );
    assert!(changes(judge_submit(
        &cfg,
        &job(Some("normal"), Some("gres:gpu:v100:2"))
    ))
    .is_empty());

    let no_rules = cfg_from("RequireGPUType=all");
    let r = rejection(judge_submit(
        &no_rules,
        &job(Some("normal"), Some("gres:gpu:2")),
    ));
    assert_eq!(
        r.message,
        "GPU requests must name a GPU type, but --gres=gpu:2 does not name one. \
         Submit with e.g. --gres=gpu:<type>:2 instead."
    );
}

// Rule 8
#[test]
fn every_gpu_qos_of_a_list_must_accept() {
    let r = rejection(submit(&job(
        Some("normal,qos_lafferty"),
        Some("gres:gpu:2"),
    )));
    assert_eq!(r.kind, RejectionKind::UntypedGpu);
    let r = rejection(submit(&job(
        Some("qos_lafferty, qos_saxena"),
        Some("gres:gpu:a40:1"),
    )));
    assert_eq!(r.kind, RejectionKind::TypeNotPermitted);
    assert!(r
        .message
        .starts_with("QOS qos_saxena does not cover GPU type a40"));
    assert!(changes(submit(&job(
        Some("qos_lafferty,qos_open"),
        Some("gres:gpu:a40:1")
    )))
    .is_empty());
}

#[test]
fn the_default_qos_is_judged_when_the_job_names_none() {
    let cfg = cfg_from(LEVELS);
    let (lafferty, none) = (names(&["qos_lafferty"]), names(&[]));
    let j = JobDescription {
        resolved: resolved(&lafferty, &none),
        ..job(None, Some("gres/gpu:2"))
    };
    let r = rejection(judge_submit(&cfg, &j));
    assert_eq!(r.kind, RejectionKind::UntypedGpu);
    assert_eq!(
        r.message,
        "Your default QOS qos_lafferty (the job names no --qos, so it runs under it) \
         requires a GPU type, but --gres=gpu:2 does not name one; qos_lafferty may use \
         a40. Submit with --gres=gpu:a40:2 instead."
    );
    let typed = JobDescription {
        tres_per_node: Some("gres/gpu:a40:2"),
        ..j
    };
    assert!(changes(judge_submit(&cfg, &typed)).is_empty());
    // A CPU job that falls back to the group QOS is not refused: the
    // user did not choose a GPU QOS.
    let cpu = JobDescription {
        tres_per_node: None,
        ..j
    };
    assert!(changes(judge_submit(&cfg, &cpu)).is_empty());
    // A job naming a QOS is judged by that QOS only.
    let named = JobDescription {
        qos: Some("normal"),
        ..j
    };
    assert!(changes(judge_submit(&cfg, &named)).is_empty());
    // Over the default QOS's limit.
    let big = JobDescription {
        tres_per_node: Some("gres/gpu:a40:5"),
        ..j
    };
    let told = rejection(judge_submit(&cfg, &big)).message;
    assert!(
        told.starts_with(
            "This job can never start: asks 5 a40, qos_lafferty allows at most 4 (its \
             GrpTRES: your default QOS, as the job names no --qos)."
        ) && told.ends_with("or name a QOS with a larger limit with --qos."),
        "{told}"
    );
}

#[test]
fn the_partition_qos_is_judged_for_named_and_default_partitions() {
    let cfg = cfg_from(LEVELS);
    let none = names(&[]);
    let in_gpu = JobDescription {
        partition: Some("cpu,gpu"),
        ..job(None, Some("gres/gpu:1"))
    };
    assert_eq!(
        rejection(judge_submit(&cfg, &in_gpu)).message,
        "Partition gpu's QOS requires a GPU type, but --gres=gpu:1 does not name one; \
         partition gpu may use a40, h100. Submit with --gres=gpu:a40:1 instead."
    );
    let default_gpu = JobDescription {
        resolved: Resolved {
            default_partition: Some("gpu"),
            ..resolved(&none, &none)
        },
        ..job(None, Some("gres/gpu:a100:1"))
    };
    let r = rejection(judge_submit(&cfg, &default_gpu));
    assert_eq!(r.kind, RejectionKind::TypeNotPermitted);
    assert!(
        r.message.ends_with("or use a partition that has a100."),
        "{}",
        r.message
    );
    // The default partition does not count when the job names one.
    let elsewhere = JobDescription {
        partition: Some("cpu"),
        ..default_gpu
    };
    assert!(changes(judge_submit(&cfg, &elsewhere)).is_empty());
    // A CPU job in a GPU partition counts no GPU.
    let cpu = JobDescription {
        tres_per_node: None,
        ..in_gpu
    };
    assert!(changes(judge_submit(&cfg, &cpu)).is_empty());
}

#[test]
fn account_limits_cover_sub_accounts_and_user_limits_their_user() {
    let cfg = cfg_from(LEVELS);
    let (none, chain) = (
        names(&[]),
        names(&["lafferty_students", "lafferty", "root"]),
    );
    let j = JobDescription {
        resolved: resolved(&none, &chain),
        ..job(None, Some("gres/gpu:2"))
    };
    assert_eq!(
        rejection(judge_submit(&cfg, &j)).message,
        "Account lafferty's GPU limit requires a GPU type, but --gres=gpu:2 does not name \
         one; account lafferty may use a40. Submit with --gres=gpu:a40:2 instead."
    );
    let over = JobDescription {
        tres_per_job: Some("gres/gpu:a40:7"),
        tres_per_node: None,
        ..j
    };
    let told = rejection(judge_submit(&cfg, &over)).message;
    // The account's limit, not a QOS's: another QOS would not help.
    assert!(
        told.contains(
            "asks 7 a40, account lafferty allows at most 6 (its GrpTRES, shared by every job \
             of the account and its sub-accounts)."
        ) && told.ends_with(
            "Ask for at most 6: --gpus=a40:6, or submit under an account with a larger \
             limit (--account=), or ask your sysadmin to raise account lafferty's: another \
             QOS does not lift it."
        ) && !told.contains("QOS with a larger limit"),
        "{told}"
    );
    let carol = JobDescription {
        resolved: Resolved {
            user: Some("carol"),
            ..resolved(&none, &none)
        },
        ..job(None, Some("gres/gpu:a40:1"))
    };
    let r = rejection(judge_submit(&cfg, &carol));
    assert!(
        r.message
            .starts_with("User carol's GPU limit does not cover GPU type a40"),
        "{}",
        r.message
    );
}

#[test]
fn several_types_of_one_qos_have_their_own_limits() {
    let cfg = cfg_from(LEVELS);
    let three_h100 = job(Some("qos_saxena"), Some("gres/gpu:h100:3"));
    assert!(rejection(judge_submit(&cfg, &three_h100))
        .message
        .contains("asks 3 h100, qos_saxena allows at most 2 (the QOS's GrpTRES)."));
    let many_a100 = job(Some("qos_saxena"), Some("gres/gpu:a100:16"));
    assert!(changes(judge_submit(&cfg, &many_a100)).is_empty());
}

// Rule 13
#[test]
fn unparsable_gres_is_a_bad_request_with_the_parser_message() {
    let r = rejection(submit(&job(Some("normal"), Some("gres:gpu:a40:two"))));
    assert_eq!(r.kind, RejectionKind::BadRequest);
    assert_eq!(
        r.message,
        "invalid GRES request \"gres:gpu:a40:two\": count \"two\" is not a number \
         (from --gres). Write GPU requests as type:count, e.g. --gres=gpu:a40:2."
    );
    // Where the option is not known, both are named.
    let unknown = JobDescription {
        per_node_spelling: PerNodeSpelling::Unknown,
        ..job(Some("normal"), Some("gres:gpu:a40:two"))
    };
    assert!(rejection(submit(&unknown)).message.contains(
        "(from --gres/--gpus-per-node). Write GPU requests as type:count, e.g. \
         --gres=gpu:a40:2 (or --gpus-per-node=a40:2)."
    ));
    let update = JobDescription {
        tres_per_job: Some("gres/gpu:99999999999999999999999"),
        ..JobDescription::default()
    };
    assert_eq!(
        rejection(judge_modify(&cfg(), &update)).kind,
        RejectionKind::BadRequest
    );
}

#[test]
fn a_plain_cpu_job_is_accepted_unchanged() {
    let j = JobDescription {
        tres_per_task: Some("cpu=4"),
        num_tasks: Some(8),
        ..job(Some("normal"), None)
    };
    assert!(changes(submit(&j)).is_empty());
    assert!(changes(judge_submit(&GpuQosConfig::default(), &j)).is_empty());
}
