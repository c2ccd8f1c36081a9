//! The decision for a new job (`job_submit`).

use crate::qos::config::{GpuQosConfig, RequireGpuType};
use crate::shared::spank_env::MPS_UNITS as MPS_UNITS_ENV;

use super::caps::judge_type_caps;
use super::default_type::with_default_type;
use super::enforce::{strictest_covering, Told};
use super::job::JobDescription;
use super::limits::judge_unruled_limits;
use super::lowprio::apply_low_priority;
use super::requests::first_untyped_gpu;
use super::rules::{collect_requests, judge_under_rule, other_levels};
use super::shares::{judge_mps_share, judge_shared_reservation};
use super::verdict::{JobChanges, Rejection, SpankEnvVar, Verdict};
use super::wording::{untyped_anywhere, Context, Level, Syntax};

/// Judges a new job (`job_submit`): where its rules give an untyped GPU
/// request a type (`DefaultGPUType=`), as that typed request.
pub fn judge_submit(cfg: &GpuQosConfig, job: &JobDescription<'_>) -> Verdict {
    let outcome = with_default_type(cfg, job, submit).unwrap_or_else(|| submit(cfg, job));
    match outcome {
        Ok(changes) => Verdict::Accept(changes),
        Err(rejection) => Verdict::Reject(rejection),
    }
}

/// Each refusal under the `Enforce=` of what makes it: a rule's own, the
/// file's for what no single rule says.
fn submit(cfg: &GpuQosConfig, job: &JobDescription<'_>) -> Result<JobChanges, Rejection> {
    let mut told = Told::new(job, Syntax::Sbatch);
    let Some(requests) = told.judge(
        strictest_covering(cfg, job),
        collect_requests(cfg, job, Syntax::Sbatch),
    )?
    else {
        // Nothing more can be judged of a request that does not parse.
        return Ok(told.into_changes(JobChanges::default()));
    };
    let ctx = Context {
        job,
        syntax: Syntax::Sbatch,
    };
    // A job with several QOS may run under any of them, so each must agree.
    for qos in job.qos_names() {
        if let Some(rule) = cfg.rule_for(qos) {
            let outcome = judge_under_rule(&ctx, &requests, Level::Qos(qos), rule);
            told.judge(cfg.rule_enforce(rule), outcome)?;
        }
    }
    // Naming none, it runs under its association's default QOS.
    if job.qos_names().next().is_none() {
        for qos in job.resolved.default_qos {
            if let Some(rule) = cfg.rule_for(qos) {
                let outcome = judge_under_rule(&ctx, &requests, Level::DefaultQos(qos), rule);
                told.judge(cfg.rule_enforce(rule), outcome)?;
            }
        }
    }
    // Its partitions' rules, its association's and its parents'.
    for (level, rule) in other_levels(cfg, job) {
        let outcome = judge_under_rule(&ctx, &requests, level, rule);
        told.judge(cfg.rule_enforce(rule), outcome)?;
    }
    told.judge(cfg.enforce(), judge_unruled_limits(cfg, &ctx, &requests))?;
    told.judge(cfg.enforce(), judge_type_caps(cfg, &ctx, &requests))?;
    if cfg.require_gpu_type() == RequireGpuType::All {
        if let Some(untyped) = first_untyped_gpu(&requests) {
            told.judge(
                cfg.enforce(),
                Err::<(), _>(untyped_anywhere(cfg, &ctx, untyped)),
            )?;
        }
    }
    told.judge(cfg.enforce(), judge_shared_reservation(cfg, job, &requests))?;

    let mut changes = JobChanges::default();
    let (units, share) = judge_mps_share(cfg, job, &requests);
    told.judge(cfg.enforce(), share)?;
    if let Some(units) = units {
        changes.spank_env.push(SpankEnvVar {
            name: MPS_UNITS_ENV,
            value: units.to_string(),
        });
    }
    if let Some(low_qos) = job.qos_names().find(|q| cfg.is_low_priority(q)) {
        apply_low_priority(cfg, job, low_qos, true, &mut told, &mut changes)?;
    }
    Ok(told.into_changes(changes))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
