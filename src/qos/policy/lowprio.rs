//! What changes for a job under the low-priority QOS: requeue on, no
//! `--exclusive=user`, arrays throttled.

use crate::qos::config::GpuQosConfig;

use super::job::JobDescription;
use super::verdict::{reject, JobChanges, Rejection, RejectionKind};

pub(super) fn apply_requeue(job: &JobDescription<'_>, low_qos: &str, changes: &mut JobChanges) {
    match job.requeue {
        None => changes.set_requeue = true,
        Some(false) => {
            changes.user_warning = Some(format!(
                "Jobs under QOS {low_qos} can be preempted; because of --no-requeue this job \
                 will be cancelled instead of requeued when that happens. Submit without \
                 --no-requeue to have it requeued."
            ));
        }
        Some(true) => {}
    }
}

/// A low-priority job with `--exclusive=user` would keep every other user
/// off its node, idle GPUs included, until preempted: it loses the option
/// (unless `LowPriorityExclusiveUser=keep`) and its user is told.
pub(super) fn apply_exclusive_user(
    cfg: &GpuQosConfig,
    job: &JobDescription<'_>,
    low_qos: &str,
    changes: &mut JobChanges,
) {
    if !job.exclusive_user || !cfg.low_priority_clears_exclusive_user() {
        return;
    }
    changes.clear_exclusive_user = true;
    let warning = format!(
        "Jobs under QOS {low_qos} may not use --exclusive=user: it would keep other users \
         off the node's idle GPUs. The job was accepted without it."
    );
    changes.user_warning = Some(match changes.user_warning.take() {
        Some(earlier) => format!("{earlier}\n{warning}"),
        None => warning,
    });
}

/// Rule 9's array cap: `Some(new)` when `array_inx` must change. A throttle
/// of 0 is treated as "no throttle", which is what Slurm makes of it.
pub(super) fn throttled_array(inx: &str, max: u32) -> Result<Option<String>, Rejection> {
    let Some((range, throttle)) = inx.rsplit_once('%') else {
        return Ok(Some(format!("{inx}%{max}")));
    };
    if throttle.is_empty() || !throttle.bytes().all(|b| b.is_ascii_digit()) {
        return Err(reject(
            RejectionKind::BadRequest,
            format!(
                "Invalid --array={inx}: what follows % must be the number of tasks to run at \
                 once, e.g. --array={range}%{max}."
            ),
        ));
    }
    // All digits, so a parse failure can only be an overflow: a huge throttle.
    let asked = throttle.parse::<u64>().unwrap_or(u64::MAX);
    if asked == 0 || asked > u64::from(max) {
        Ok(Some(format!("{range}%{max}")))
    } else {
        Ok(None)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
