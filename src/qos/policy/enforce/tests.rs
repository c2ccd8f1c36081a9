//! `Enforce=warn`: what is refused or changed under `yes` is accepted
//! unchanged and told under `warn`, rule by rule.

use super::*;
use crate::qos::policy::fixtures::*;
use crate::qos::policy::job::Resolved;
use crate::qos::policy::submit::judge_submit;
use crate::qos::policy::update::judge_modify;
use crate::qos::policy::verdict::{RejectionKind, SpankEnvVar, Verdict};
use crate::qos::policy::wording::NOT_YET_ENFORCED;

const WARN_ONE: &str = "\
QOS=qos_warn GPUTypes=a40 GPULimit=4 Enforce=warn
QOS=qos_enforced GPUTypes=a40 GPULimit=4
Partition=gpu GPUTypes=a40,h100
";

fn warnings(verdict: Verdict) -> Vec<PolicyWarning> {
    changes(verdict).warnings
}

#[test]
fn a_rule_that_warns_accepts_unchanged_and_tells_the_refusal_and_the_line_to_type() {
    let cfg = cfg_from(WARN_ONE);
    let untyped = job(Some("qos_warn"), Some("gres:gpu:2"));
    let c = changes(judge_submit(&cfg, &untyped));
    assert_eq!(c.warnings.len(), 1, "{c:?}");
    let w = &c.warnings[0];
    assert_eq!(w.reason, WarningReason::Refusal(RejectionKind::UntypedGpu));
    assert_eq!(w.qos, "qos_warn");
    assert_eq!(
        w.message,
        "NOT YET ENFORCED: QOS qos_warn requires a GPU type, but --gres=gpu:2 does not name \
         one; qos_warn may use a40. Submit with --gres=gpu:a40:2 instead.\nThe job was \
         accepted as submitted: this GPU policy only warns for now. Once it is enforced, a job \
         like this is refused or changed as said above."
    );
    // The user reads it with the refusal's code.
    assert_eq!(
        c.user_message(),
        Some(crate::qos::policy::codes::coded(&w.message, "GQ101"))
    );
    // Nothing else changes: the job runs as submitted.
    assert_eq!(
        JobChanges {
            warnings: Vec::new(),
            ..c
        },
        JobChanges::default()
    );
    // The same job under the rule that enforces: refused with the same words.
    let enforced = job(Some("qos_enforced"), Some("gres:gpu:2"));
    let r = rejection(judge_submit(&cfg, &enforced));
    assert_eq!(r.kind, RejectionKind::UntypedGpu);
    assert!(r
        .message
        .starts_with("QOS qos_enforced requires a GPU type"));
    // A typed job that fits is told nothing.
    let typed = job(Some("qos_warn"), Some("gres:gpu:a40:2"));
    assert!(changes(judge_submit(&cfg, &typed)).is_empty());
    // Every kind of refusal the rule makes: over its limit too.
    let over = job(Some("qos_warn"), Some("gres:gpu:a40:9"));
    assert_eq!(
        warnings(judge_submit(&cfg, &over))[0].reason,
        WarningReason::Refusal(RejectionKind::OverLimit)
    );
}

#[test]
fn the_files_enforce_is_every_rules_without_its_own() {
    let cfg = cfg_from(
        "Enforce=warn\n\
         QOS=qos_a GPUTypes=a40\n\
         QOS=qos_b GPUTypes=a40 Enforce=yes\n",
    );
    let a = job(Some("qos_a"), Some("gres:gpu:1"));
    assert_eq!(warnings(judge_submit(&cfg, &a)).len(), 1);
    let b = job(Some("qos_b"), Some("gres:gpu:1"));
    assert_eq!(
        rejection(judge_submit(&cfg, &b)).kind,
        RejectionKind::UntypedGpu
    );
    // A default QOS falls under its rule's Enforce= as a named one does.
    let default = names(&["qos_a"]);
    let falls_back = JobDescription {
        resolved: Resolved {
            default_qos: &default,
            ..Resolved::default()
        },
        ..job(None, Some("gres:gpu:1"))
    };
    assert_eq!(
        warnings(judge_submit(&cfg, &falls_back))[0].qos,
        "qos_a",
        "counted under the QOS it runs under"
    );
}

#[test]
fn a_rule_that_enforces_still_refuses_a_job_another_rule_only_warns_of() {
    let cfg = cfg_from(WARN_ONE);
    // Partition gpu (enforcing) does not cover a100; qos_warn only warns.
    let both = JobDescription {
        partition: Some("gpu"),
        ..job(Some("qos_warn"), Some("gres:gpu:a100:1"))
    };
    let r = rejection(judge_submit(&cfg, &both));
    assert_eq!(r.kind, RejectionKind::TypeNotPermitted);
    assert!(
        r.message.starts_with("Partition gpu's QOS"),
        "{}",
        r.message
    );
    // Untyped under both: the partition refuses it.
    let untyped = JobDescription {
        partition: Some("gpu"),
        ..job(Some("qos_warn"), Some("gres:gpu:1"))
    };
    assert!(rejection(judge_submit(&cfg, &untyped))
        .message
        .starts_with("Partition gpu's QOS requires a GPU type"));
}

#[test]
fn a_job_refused_by_two_rules_that_warn_is_told_once() {
    let cfg = cfg_from(
        "QOS=qos_warn GPUTypes=a40 Enforce=warn\n\
         Partition=gpu GPUTypes=a40 Enforce=warn\n",
    );
    let both = JobDescription {
        partition: Some("gpu"),
        ..job(Some("qos_warn"), Some("gres:gpu:1"))
    };
    let told = warnings(judge_submit(&cfg, &both));
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(told[0].message.contains("QOS qos_warn requires a GPU type"));
}

#[test]
fn refusals_of_no_single_rule_follow_the_files_enforce() {
    let warn = cfg_from(
        "Enforce=warn\nRequireGPUType=all\nMaxMPSPerJob=50\n\
         SharedGPUReservations=course_*\n",
    );
    let untyped = job(Some("normal"), Some("gres:gpu:1"));
    assert_eq!(
        warnings(judge_submit(&warn, &untyped))[0].reason,
        WarningReason::Refusal(RejectionKind::UntypedGpu)
    );
    // A share too large runs as asked: its node still needs its size.
    let share = JobDescription {
        reservation: Some("course_ml"),
        ..job(None, Some("gres:mps:80"))
    };
    let c = changes(judge_submit(&warn, &share));
    assert_eq!(
        c.warnings[0].reason,
        WarningReason::Refusal(RejectionKind::ShareTooLarge)
    );
    assert_eq!(
        c.spank_env,
        [SpankEnvVar {
            name: crate::shared::spank_env::MPS_UNITS,
            value: "80".into()
        }]
    );
    let outside = job(None, Some("gres:mps:10"));
    assert_eq!(
        warnings(judge_submit(&warn, &outside))[0].reason,
        WarningReason::Refusal(RejectionKind::SharedOutsideReservation)
    );
    let enforced = cfg_from("RequireGPUType=all\nQOS=q GPUTypes=a40 Enforce=warn");
    assert_eq!(
        rejection(judge_submit(&enforced, &untyped)).kind,
        RejectionKind::UntypedGpu
    );
}

#[test]
fn a_request_that_does_not_parse_is_refused_where_any_covering_rule_enforces() {
    let cfg = cfg_from(WARN_ONE);
    let bad = job(Some("qos_warn"), Some("gres:gpu:a40:x"));
    assert_eq!(
        warnings(judge_submit(&cfg, &bad))[0].reason,
        WarningReason::Refusal(RejectionKind::BadRequest)
    );
    let in_gpu = JobDescription {
        partition: Some("gpu"),
        ..bad
    };
    assert_eq!(
        rejection(judge_submit(&cfg, &in_gpu)).kind,
        RejectionKind::BadRequest
    );
}

const LOW: &str = "\
Enforce=warn
LowPriorityQOS=lowprio
LowPriorityMaxArrayTasks=8
";

#[test]
fn under_warn_the_low_priority_changes_are_described_not_made() {
    let low = JobDescription {
        exclusive_user: true,
        array_inx: Some("0-99"),
        ..job(Some("lowprio"), Some("gres:gpu:a40:1"))
    };
    let c = changes(judge_submit(&cfg_from(LOW), &low));
    assert!(!c.set_requeue && !c.set_open_mode_append && !c.clear_exclusive_user);
    assert_eq!(c.array_inx, None);
    let told: Vec<(WarningReason, &str)> = c
        .warnings
        .iter()
        .map(|w| (w.reason, w.message.as_str()))
        .collect();
    assert_eq!(told.len(), 3, "{told:?}");
    assert_eq!(
        told[0],
        (
            WarningReason::LowPriority(LowPriorityChange::Requeue),
            "NOT YET ENFORCED: Jobs under QOS lowprio can be preempted, and are given \
             --requeue and --open-mode=append so that a preempted job is requeued and keeps \
             its earlier output; this job was left as submitted.\nThe job was accepted as \
             submitted: this GPU policy only warns for now. Once it is enforced, a job like \
             this is refused or changed as said above."
        )
    );
    assert_eq!(
        told[1].0,
        WarningReason::LowPriority(LowPriorityChange::ExclusiveUser)
    );
    assert!(told[1].1.contains("This job keeps it for now."));
    assert_eq!(
        told[2].0,
        WarningReason::LowPriority(LowPriorityChange::ArrayThrottle)
    );
    assert!(told[2].1.starts_with(
        "NOT YET ENFORCED: Arrays under QOS lowprio run at most 8 tasks at once (--array=0-99%8)"
    ));
    // Enforced, the same job is changed.
    let enforced = LOW.replace("Enforce=warn\n", "");
    let c = changes(judge_submit(&cfg_from(&enforced), &low));
    assert!(c.set_requeue && c.set_open_mode_append && c.clear_exclusive_user);
    assert_eq!(c.array_inx.as_deref(), Some("0-99%8"));
    assert!(c.warnings.is_empty());
    // A rule of the low-priority QOS itself decides for it.
    let own_rule = format!("{enforced}QOS=lowprio GPUTypes=a40 Enforce=warn\n");
    let c = changes(judge_submit(&cfg_from(&own_rule), &low));
    assert!(!c.set_requeue && c.array_inx.is_none());
    // The note on --no-requeue says what will happen, not a change.
    let no_requeue = JobDescription {
        requeue: Some(false),
        open_mode_set: true,
        ..job(Some("lowprio"), None)
    };
    let c = changes(judge_submit(&cfg_from(LOW), &no_requeue));
    assert!(c.warnings.is_empty());
    assert!(c.user_warning.is_some_and(|w| w.contains("--no-requeue")));
}

#[test]
fn updates_follow_the_same_rule_as_submissions() {
    let cfg = cfg_from(WARN_ONE);
    let update = JobDescription {
        job_id_for_messages: Some(7),
        ..job(Some("qos_warn"), Some("gres:gpu:2"))
    };
    let told = warnings(judge_modify(&cfg, &update));
    assert_eq!(
        told[0].reason,
        WarningReason::Refusal(RejectionKind::UpdateNeedsTypedGpu)
    );
    assert!(told[0].message.starts_with(&format!(
        "{NOT_YET_ENFORCED} QOS qos_warn requires a GPU type, but Gres=gpu:2 does not name \
         one; qos_warn may use a40. Use: scontrol update job=7 QOS=qos_warn Gres=gpu:a40:2\n\
         The update was made as asked"
    )));
    let enforced = JobDescription {
        qos: Some("qos_enforced"),
        ..update
    };
    assert_eq!(
        rejection(judge_modify(&cfg, &enforced)).kind,
        RejectionKind::UpdateNeedsTypedGpu
    );
    // The landing QOS unseen: refused while any rule enforces, told
    // where every rule only warns.
    let unseen = JobDescription {
        qos: Some(""),
        ..update
    };
    assert!(matches!(judge_modify(&cfg, &unseen), Verdict::Reject(_)));
    let all_warn = cfg_from("Enforce=warn\nQOS=qos_warn GPUTypes=a40");
    assert_eq!(warnings(judge_modify(&all_warn, &unseen)).len(), 1);
    let low = job(Some("lowprio"), None);
    let c = changes(judge_modify(&cfg_from(LOW), &low));
    assert!(!c.set_requeue);
    assert_eq!(
        c.warnings[0].reason,
        WarningReason::LowPriority(LowPriorityChange::Requeue)
    );
}
