//! Exemptions: `ExemptUsers=`, whose submissions and updates are never
//! refused, and `ExemptAdmins=yes`, Slurm's operators and administrators
//! updating other users' jobs. An exempted refusal is not dropped: the
//! accepted job carries it (`Exemption`) so that slurmctld logs what
//! would have been refused and the metrics count it.

use crate::qos::config::GpuQosConfig;

use super::job::JobDescription;
use super::verdict::{ExemptReason, Exemption, JobChanges, Rejection, RejectionKind, Verdict};

/// Which call the decision answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Submit,
    /// An `scontrol update`; `owner` is the job's owner's uid as
    /// slurmctld gives it (`job_desc->user_id`), `None` where unknown.
    Update {
        owner: Option<u32>,
    },
}

/// Who submits or updates, as slurmctld knows them: the uid slurmctld
/// authenticated (for an update, the updater's, not the job owner's), the
/// name and admin level its association manager holds for it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requester<'a> {
    pub uid: u32,
    /// `None` where the association manager has no user of that uid.
    pub name: Option<&'a str>,
    /// `AdminLevel=Operator` or `Administrator`, or root or SlurmUser
    /// (Slurm's own test for an operator, `validate_operator`).
    pub operator: bool,
    /// A coordinator of some account: Slurm lets a coordinator update the
    /// jobs of its accounts' users.
    pub coordinator: bool,
}

/// Why `requester` is exempt from refusals of `action`, if they are.
pub fn exempt_reason(
    cfg: &GpuQosConfig,
    action: Action,
    requester: &Requester<'_>,
) -> Option<ExemptReason> {
    if cfg.exempts_user(requester.uid, requester.name) {
        return Some(ExemptReason::User);
    }
    match action {
        Action::Update { owner: Some(owner) }
            if cfg.exempt_admins() && requester.operator && owner != requester.uid =>
        {
            Some(ExemptReason::Admin)
        }
        _ => None,
    }
}

/// Whether the update must be looked at as another user's throttle change
/// ([`foreign_throttle`]): it sets `ArrayTaskThrottle` on a job whose
/// owner slurmctld names and the requester is not.
pub fn may_be_foreign_throttle(job: &JobDescription<'_>, action: Action, uid: u32) -> bool {
    matches!(action, Action::Update { owner: Some(owner) } if owner != uid)
        && job.array_inx.is_some()
}

/// Another user's `ArrayTaskThrottle=` refused. Slurm 22.05 applies an
/// update's throttle before it checks who asks (`_update_job`: the
/// ownership test comes after `job_submit`'s modify; 23.02 moved it
/// first), so anyone could throttle anyone's array and be answered only
/// "Invalid user id". The throttle is already set when gpu_qos sees the
/// update: the refusal cannot undo it, it says so to the requester and
/// puts it in slurmctld's log with who asked. An operator or a
/// coordinator (whom Slurm lets update the jobs of their accounts) is
/// left to Slurm; from 23.02 only they get here.
pub fn foreign_throttle(
    job: &JobDescription<'_>,
    action: Action,
    requester: &Requester<'_>,
) -> Option<Rejection> {
    let Action::Update { owner: Some(owner) } = action else {
        return None;
    };
    let asked = job.array_inx?;
    if owner == requester.uid || requester.operator || requester.coordinator {
        return None;
    }
    let job_id = job
        .job_id_for_messages
        .map_or_else(|| "this job".to_owned(), |id| format!("job {id}"));
    let value = super::lowprio::throttle_value(asked);
    Some(super::verdict::reject(
        RejectionKind::ForeignArrayThrottle,
        format!(
            "{job_id} belongs to another user (uid {owner}): its ArrayTaskThrottle is theirs \
             to change. Slurm 22.05 has nevertheless set it to {value} before checking who \
             asked; this is in slurmctld's log with your uid, and the job's owner or an \
             administrator can set it back"
        ),
    ))
}

/// The decision once exemptions are applied: a refusal of an exempt
/// requester becomes an acceptance of the job as sent, carrying the
/// refusal; anything else is left as it is.
pub fn apply_exemptions(
    cfg: &GpuQosConfig,
    job: &JobDescription<'_>,
    action: Action,
    requester: &Requester<'_>,
    verdict: Verdict,
) -> Verdict {
    let verdict = match verdict {
        Verdict::Accept(mut changes)
            if changes.recheck_gpu_types.is_some() || changes.recheck_array_throttle.is_some() =>
        {
            let exempt = exempt_reason(cfg, action, requester).is_some();
            // An exempt requester's update may give a job any type: it is
            // read back only to release a job gpushare held.
            if let Some(r) = changes.recheck_gpu_types.as_mut() {
                r.may_hold &= !exempt;
            }
            // An operator's throttle (root, SlurmUser, AdminLevel=Operator
            // or Administrator), or an exempt user's, stands: the cap is
            // not set back over a change made on purpose.
            if requester.operator || exempt {
                if let Some(recheck) = changes.recheck_array_throttle.take() {
                    let said = super::lowprio::throttle_warning(cfg, recheck.max);
                    changes.user_warning = changes.user_warning.take().and_then(|w| {
                        let kept: Vec<&str> = w.lines().filter(|l| *l != said).collect();
                        (!kept.is_empty()).then(|| kept.join("\n"))
                    });
                }
            }
            return Verdict::Accept(changes);
        }
        verdict => verdict,
    };
    let Verdict::Reject(refusal) = verdict else {
        return verdict;
    };
    match exempt_reason(cfg, action, requester) {
        Some(reason) => Verdict::Accept(JobChanges {
            exemption: Some(Exemption {
                reason,
                kind: refusal.kind,
                message: refusal.message,
                qos: job.qos_label(),
            }),
            ..JobChanges::default()
        }),
        None => Verdict::Reject(refusal),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
