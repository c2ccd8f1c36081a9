//! The per-job decision of the `job_submit/gpu_qos` plugin: given what a
//! client sent (before Slurm applies defaults) and `gpu_qos.conf`, accept the
//! job, possibly with changes, or reject it with a message that says what was
//! wrong and exactly what to type instead.
//!
//! slurmctld calls this with its own locks held, once per submission and
//! update, so it must be fast and must not block: it borrows everything from
//! the job, and a job asking for no GRES is judged without allocating.
//!
//! - `job`: what the plugin sees of a job.
//! - `verdict`: what it answers: the changes to an accepted job, or the
//!   rejection and its kind.
//! - `submit` and `update`: the decision for a submission and for an
//!   `scontrol update`.
//! - `rules`: one rule of `gpu_qos.conf` applied to a job, and the rules
//!   that cover it (its QOS, partitions, accounts).
//! - `limits`: typed GPU limits of the accounting database at levels no
//!   rule covers: the untyped hole closed there all the same.
//! - `requests`: the GPUs a job asks for, field by field, and the fewest
//!   it can end up with.
//! - `shares`: GPU shares (mps/shard): the shared-GPU reservations and
//!   the share cap.
//! - `caps`: the per-type caps of what goes with a GPU (`MaxGPUsPerJob=`,
//!   `MaxCPUsPerGPU=`, `MaxTasksPerGPU=`, `MaxMemPerGPU=`).
//! - `lowprio`: what changes for a job under the low-priority QOS.
//! - `wording`: how a rejection is told, and what to type instead.
//! - `exempt`: `ExemptUsers=` and `ExemptAdmins=`: refusals not made for
//!   exempt requesters, carried on the accepted job to be logged and counted.
//! - `type_recheck`: GPU types an update gave a job, judged by its own
//!   QOS's and partition's rules once the update is done.
//! - `enforce`: `Enforce=warn`: refusals kept as warnings, changes
//!   described instead of made.

mod caps;
pub mod codes;
mod default_type;
mod enforce;
mod exempt;
mod job;
mod limits;
mod lowprio;
mod requests;
mod rules;
mod shares;
mod submit;
mod type_recheck;
mod update;
mod verdict;
mod wording;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod fixtures;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;

pub use caps::over_type_caps;
pub use exempt::{
    apply_exemptions, exempt_reason, foreign_throttle, may_be_foreign_throttle, Action, Requester,
};
pub use job::{JobDescription, LimitLevel, Memory, Resolved, TypedLimit};
pub use limits::{asks_untyped_gpu, limits_without_rule};
pub use lowprio::{requeued_output_words, throttle_to_restore};
pub use submit::judge_submit;
pub use type_recheck::{
    held_by_gpushare, held_types, not_permitted, record_accounts, HeldType, HOLD_MARK,
};
pub use update::judge_modify;
pub use verdict::{
    ExemptReason, Exemption, JobChanges, LowPriorityChange, PolicyWarning, Rejection,
    RejectionKind, SpankEnvVar, ThrottleRecheck, TypeGiven, TypesRecheck, Verdict, WarningReason,
};
pub use wording::NOT_YET_ENFORCED;
