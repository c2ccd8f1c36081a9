//! The decision for an `scontrol update` of a pending job (`job_modify`).

use crate::qos::config::{GpuQosConfig, RequireGpuType};

use super::caps::update_changes_shape;
use super::enforce::Told;
use super::job::JobDescription;
use super::limits::{judge_unruled_limits, unruled};
use super::lowprio::{apply_low_priority, throttle_lifted, throttle_warning};
use super::requests::first_untyped_gpu;
use super::rules::{collect_requests, judge_under_rule, other_levels};
use super::shares::judge_mps_share;
use super::type_recheck::types_to_recheck;
use super::verdict::{JobChanges, Rejection, Verdict};
use super::wording::{blank_qos, no_gpu_request, untyped_anywhere, Context, Level, Syntax};

/// Judges an `scontrol update` of a pending job (`job_modify`). `update`
/// holds only the fields the update changes; the job's current values are
/// not visible to the plugin.
pub fn judge_modify(cfg: &GpuQosConfig, update: &JobDescription<'_>) -> Verdict {
    match modify(cfg, update) {
        Ok(changes) => Verdict::Accept(changes),
        Err(rejection) => Verdict::Reject(rejection),
    }
}

/// As a submission: each refusal under the `Enforce=` of its rule, the
/// file's for what no single rule says; where the rule cannot be known
/// (the landing QOS is not in the update), enforced if any rule enforces.
fn modify(cfg: &GpuQosConfig, update: &JobDescription<'_>) -> Result<JobChanges, Rejection> {
    let mut told = Told::new(update, Syntax::Scontrol);
    let unknown_rule = cfg.enforce_anywhere();
    let Some(requests) = told.judge(
        unknown_rule,
        collect_requests(cfg, update, Syntax::Scontrol),
    )?
    else {
        return Ok(told.into_changes(JobChanges::default()));
    };
    let ctx = Context {
        job: update,
        syntax: Syntax::Scontrol,
    };
    // `QOS=` (blank) moves the job to its association's default QOS
    // (`_update_job`: "If the qos is blank that means we want the
    // default"), which depends on the job's account, not visible here:
    // where anything is enforced, the QOS must be named.
    let protected = cfg.require_gpu_type() == RequireGpuType::All
        || !cfg.rules().is_empty()
        || update.resolved.typed_limits_anywhere;
    if update.qos_is_blank() && protected {
        let refusal = blank_qos(cfg, &ctx, &requests);
        told.judge(unknown_rule, Err::<(), _>(refusal))?;
    }
    let mut to_gpu_qos = unruled(cfg, update).next().is_some();
    told.judge(cfg.enforce(), judge_unruled_limits(cfg, &ctx, &requests))?;
    for qos in update.qos_names() {
        if let Some(rule) = cfg.rule_for(qos) {
            to_gpu_qos = true;
            let outcome = judge_under_rule(&ctx, &requests, Level::Qos(qos), rule);
            told.judge(cfg.rule_enforce(rule), outcome)?;
        }
    }
    // Moving the job to a partition or account with a rule: the job's own
    // GPU request is not visible here, so the update must carry one.
    for (level, rule) in other_levels(cfg, update) {
        to_gpu_qos = true;
        let outcome = if requests.iter().any(|r| r.request.is_gpu()) {
            judge_under_rule(&ctx, &requests, level, rule)
        } else {
            Err(no_gpu_request(&ctx, &requests, level, rule))
        };
        told.judge(cfg.rule_enforce(rule), outcome)?;
    }
    if !to_gpu_qos {
        if let Some(untyped) = first_untyped_gpu(&requests) {
            // Without a QOS in the update the job's QOS is unknown here, so an
            // untyped request could be landing under a GPU QOS.
            let qos_unknown = update.qos_names().next().is_none();
            let everywhere = cfg.require_gpu_type() == RequireGpuType::All;
            let enforce = match (everywhere, qos_unknown && protected) {
                (true, true) => Some(cfg.enforce().or_stricter(unknown_rule)),
                (true, false) => Some(cfg.enforce()),
                (false, true) => Some(unknown_rule),
                (false, false) => None,
            };
            if let Some(enforce) = enforce {
                let refusal = untyped_anywhere(cfg, &ctx, untyped);
                told.judge(enforce, Err::<(), _>(refusal))?;
            }
        }
    }
    told.judge(cfg.enforce(), judge_mps_share(cfg, update, &requests).1)?;

    let mut changes = JobChanges::default();
    if let Some(low_qos) = update.qos_names().find(|q| cfg.is_low_priority(q)) {
        apply_low_priority(cfg, update, low_qos, false, &mut told, &mut changes)?;
    }
    if let Some(recheck) = throttle_lifted(cfg, update) {
        let warning = throttle_warning(cfg, recheck.max);
        changes.user_warning = Some(match changes.user_warning.take() {
            Some(earlier) => format!("{earlier}\n{warning}"),
            None => warning,
        });
        changes.recheck_array_throttle = Some(recheck);
    }
    changes.recheck_gpu_types =
        types_to_recheck(cfg, update, &requests, update_changes_shape(cfg, update));
    Ok(told.into_changes(changes))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::qos::policy::fixtures::*;
    use crate::qos::policy::job::Resolved;
    use crate::qos::policy::verdict::RejectionKind;

    // Rule 12
    #[test]
    fn update_to_gpu_qos_without_gpus_shows_the_working_update() {
        let update = JobDescription {
            job_id_for_messages: Some(4242),
            ..job(Some("qos_lafferty"), None)
        };
        let r = rejection(judge_modify(&cfg(), &update));
        assert_eq!(r.kind, RejectionKind::UpdateNeedsTypedGpu);
        assert_eq!(
            r.message,
            "Moving a job to QOS qos_lafferty needs a typed GPU request in the same update \
             (qos_lafferty may use a40): scontrol update job=4242 QOS=qos_lafferty \
             Gres=gpu:a40:1\nIf the job was submitted with an untyped GPU request, Slurm \
             cannot add a type to it: cancel it and submit again with --gres=gpu:a40:1."
        );
        let r = rejection(judge_modify(&cfg(), &job(Some("qos_lafferty"), None)));
        assert!(r
            .message
            .contains("scontrol update job=<jobid> QOS=qos_lafferty Gres=gpu:a40:1"));
    }

    #[test]
    fn untyped_update_with_qos_change_names_the_type() {
        let update = JobDescription {
            job_id_for_messages: Some(7),
            ..job(Some("qos_lafferty"), Some("gres:gpu:2"))
        };
        let r = rejection(judge_modify(&cfg(), &update));
        assert_eq!(r.kind, RejectionKind::UpdateNeedsTypedGpu);
        assert_eq!(
            r.message,
            "QOS qos_lafferty requires a GPU type, but Gres=gpu:2 does not name one; \
             qos_lafferty may use a40. Use: scontrol update job=7 QOS=qos_lafferty Gres=gpu:a40:2"
        );
    }

    #[test]
    fn updates_into_a_partition_or_account_with_a_rule_need_a_typed_request() {
        let cfg = cfg_from(LEVELS);
        let none = names(&[]);
        let to_gpu = JobDescription {
            partition: Some("gpu"),
            job_id_for_messages: Some(42),
            ..JobDescription::default()
        };
        let r = rejection(judge_modify(&cfg, &to_gpu));
        assert_eq!(r.kind, RejectionKind::UpdateNeedsTypedGpu);
        assert!(
            r.message.starts_with(
                "Moving a job to partition gpu needs a typed GPU request in the same update"
            ),
            "{}",
            r.message
        );
        let typed = JobDescription {
            tres_per_node: Some("gres/gpu:a40:1"),
            ..to_gpu
        };
        // Accepted; its job read back afterwards for its types.
        let c = changes(judge_modify(&cfg, &typed));
        assert!(c.recheck_gpu_types.is_some());
        assert!(JobChanges {
            recheck_gpu_types: None,
            ..c
        }
        .is_empty());
        let chain = names(&["lafferty"]);
        let to_lafferty = JobDescription {
            resolved: Resolved {
                accounts: &chain,
                ..Resolved::default()
            },
            ..JobDescription::default()
        };
        assert!(rejection(judge_modify(&cfg, &to_lafferty))
            .message
            .starts_with("Moving a job to account lafferty needs a typed GPU request"));
        // An update's default partition is not a move: nothing to judge.
        let unrelated = JobDescription {
            resolved: resolved(&none, &none),
            ..JobDescription::default()
        };
        assert!(changes(judge_modify(&cfg, &unrelated)).is_empty());
    }

    #[test]
    fn untyped_update_without_qos_is_rejected_because_the_qos_is_unknown() {
        let update = JobDescription {
            job_id_for_messages: Some(7),
            tres_per_job: Some("gres/gpu:3"),
            ..JobDescription::default()
        };
        let r = rejection(judge_modify(&cfg(), &update));
        assert_eq!(r.kind, RejectionKind::UpdateNeedsTypedGpu);
        assert_eq!(
            r.message,
            "An update cannot take an untyped GPU request (TresPerJob=gres/gpu:3): during an \
             update this plugin cannot see the job's QOS, so the request must name a GPU type \
             (known types: a40, a100, h100). Use e.g.: scontrol update job=7 \
             TresPerJob=gres/gpu:a40:3"
        );
        // With no rules there is nothing to protect.
        assert!(changes(judge_modify(&cfg_from(""), &update)).is_empty());
        // A move to a known, unlisted QOS settles the question.
        let to_normal = job(Some("normal"), Some("gres:gpu:2"));
        assert!(changes(judge_modify(&cfg(), &to_normal)).is_empty());
    }

    #[test]
    fn typed_updates_are_judged_when_the_qos_is_in_the_update() {
        let wrong = JobDescription {
            job_id_for_messages: Some(9),
            ..job(Some("qos_lafferty"), Some("gres:gpu:a100:1"))
        };
        let r = rejection(judge_modify(&cfg(), &wrong));
        assert_eq!(r.kind, RejectionKind::TypeNotPermitted);
        assert_eq!(
            r.message,
            "QOS qos_lafferty does not cover GPU type a100 (asked with Gres=gpu:a100:1); \
             qos_lafferty may use a40. Use: scontrol update job=9 QOS=qos_lafferty \
             Gres=gpu:a40:1, or use a QOS that covers a100."
        );
        let too_many = JobDescription {
            job_id_for_messages: Some(9),
            ..job(Some("qos_lafferty"), Some("gres:gpu:a40:5"))
        };
        let r = rejection(judge_modify(&cfg(), &too_many));
        assert_eq!(r.kind, RejectionKind::OverLimit);
        assert!(r.message.ends_with(
            "Ask for at most 4: scontrol update job=9 QOS=qos_lafferty Gres=gpu:a40:4, or use \
             a QOS with a larger limit."
        ));
        let fine = job(Some("qos_lafferty"), Some("gres:gpu:a40:2"));
        assert!(changes(judge_modify(&cfg(), &fine)).is_empty());
        // Without the QOS the type cannot be judged: Slurm's own limits apply.
        let typed_only = job(None, Some("gres:gpu:a100:64"));
        assert!(changes(judge_modify(&cfg(), &typed_only)).is_empty());
    }

    #[test]
    fn a_blank_qos_is_a_move_to_an_unseen_default_and_must_be_named() {
        let default = vec!["qos_lafferty".to_owned()];
        let blank = JobDescription {
            job_id_for_messages: Some(12),
            resolved: Resolved {
                default_qos: &default,
                ..Resolved::default()
            },
            ..job(Some(""), None)
        };
        let r = rejection(judge_modify(&cfg(), &blank));
        assert_eq!(r.kind, RejectionKind::UpdateNeedsTypedGpu);
        assert!(
            r.message.starts_with(
                "QOS= (blank) moves a job to its default QOS, which depends on the job's \
                 account and cannot be judged during an update: name the QOS instead (the \
                 user's default QOS is qos_lafferty): scontrol update job=12 QOS=qos_lafferty\n"
            ),
            "{}",
            r.message
        );
        // With a GPU request in the same update, the fix keeps it, typed.
        let with_gpus = JobDescription {
            tres_per_node: Some("gres:gpu:2"),
            ..blank
        };
        assert!(rejection(judge_modify(&cfg(), &with_gpus))
            .message
            .contains("scontrol update job=12 QOS=qos_lafferty Gres=gpu:a40:2\n"));
        // 24.11+ lists: a list of nothing is as blank.
        let commas = JobDescription {
            qos: Some(" , "),
            ..blank
        };
        assert!(rejection(judge_modify(&cfg(), &commas))
            .message
            .starts_with("QOS= (blank)"));
        // Nothing enforced anywhere: nothing to protect.
        assert!(changes(judge_modify(&cfg_from(""), &blank)).is_empty());
        // A typed limit in the database is enough to protect it.
        let anywhere = JobDescription {
            resolved: Resolved {
                typed_limits_anywhere: true,
                ..blank.resolved
            },
            ..blank
        };
        assert!(rejection(judge_modify(&cfg_from(""), &anywhere))
            .message
            .starts_with("QOS= (blank)"));
    }

    #[test]
    fn an_untyped_update_of_unknown_qos_is_refused_where_the_database_limits_types() {
        let update = JobDescription {
            job_id_for_messages: Some(7),
            tres_per_job: Some("gres/gpu:3"),
            resolved: Resolved {
                typed_limits_anywhere: true,
                ..Resolved::default()
            },
            ..JobDescription::default()
        };
        assert_eq!(
            rejection(judge_modify(&cfg_from(""), &update)).kind,
            RejectionKind::UpdateNeedsTypedGpu
        );
    }

    #[test]
    fn updates_touching_neither_qos_nor_gpus_are_accepted() {
        let update = JobDescription {
            min_nodes: Some(2),
            array_inx: Some("0-999"),
            ..JobDescription::default()
        };
        assert!(changes(judge_modify(&cfg(), &update)).is_empty());
        let to_normal = job(Some("normal"), None);
        assert!(changes(judge_modify(&cfg(), &to_normal)).is_empty());
    }
}
