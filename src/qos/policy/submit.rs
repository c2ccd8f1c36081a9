//! The decision for a new job (`job_submit`).

use crate::qos::config::{GpuQosConfig, RequireGpuType};
use crate::shared::spank_env::MPS_UNITS as MPS_UNITS_ENV;

use super::job::JobDescription;
use super::limits::judge_unruled_limits;
use super::lowprio::{apply_exclusive_user, apply_requeue, throttled_array};
use super::requests::first_untyped_gpu;
use super::rules::{collect_requests, judge_partitions_and_associations, judge_under_rule};
use super::shares::{judge_mps_share, judge_shared_reservation};
use super::verdict::{JobChanges, Rejection, SpankEnvVar, Verdict};
use super::wording::{untyped_anywhere, Context, Level, Syntax};

/// Judges a new job (`job_submit`).
pub fn judge_submit(cfg: &GpuQosConfig, job: &JobDescription<'_>) -> Verdict {
    match submit(cfg, job) {
        Ok(changes) => Verdict::Accept(changes),
        Err(rejection) => Verdict::Reject(rejection),
    }
}

fn submit(cfg: &GpuQosConfig, job: &JobDescription<'_>) -> Result<JobChanges, Rejection> {
    let requests = collect_requests(cfg, job)?;
    let ctx = Context {
        job,
        syntax: Syntax::Sbatch,
    };
    // A job with several QOS may run under any of them, so each must agree.
    for qos in job.qos_names() {
        if let Some(rule) = cfg.rule_for(qos) {
            judge_under_rule(&ctx, &requests, Level::Qos(qos), rule)?;
        }
    }
    // Naming none, it runs under its association's default QOS.
    if job.qos_names().next().is_none() {
        for qos in job.resolved.default_qos {
            if let Some(rule) = cfg.rule_for(qos) {
                judge_under_rule(&ctx, &requests, Level::DefaultQos(qos), rule)?;
            }
        }
    }
    judge_partitions_and_associations(cfg, &ctx, &requests)?;
    judge_unruled_limits(cfg, &ctx, &requests)?;
    if cfg.require_gpu_type() == RequireGpuType::All {
        if let Some(untyped) = first_untyped_gpu(&requests) {
            return Err(untyped_anywhere(cfg, &ctx, untyped));
        }
    }
    judge_shared_reservation(cfg, job, &requests)?;

    let mut changes = JobChanges::default();
    if let Some(units) = judge_mps_share(cfg, job, &requests)? {
        changes.spank_env.push(SpankEnvVar {
            name: MPS_UNITS_ENV,
            value: units.to_string(),
        });
    }
    if let Some(low_qos) = job.qos_names().find(|q| cfg.is_low_priority(q)) {
        apply_requeue(job, low_qos, &mut changes);
        apply_exclusive_user(cfg, job, low_qos, &mut changes);
        if !job.open_mode_set {
            changes.set_open_mode_append = true;
        }
        if let (Some(max), Some(inx)) = (
            cfg.low_priority_max_array_tasks(),
            job.array_inx.filter(|s| !s.trim().is_empty()),
        ) {
            changes.array_inx = throttled_array(inx.trim(), max)?;
        }
    }
    Ok(changes)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
