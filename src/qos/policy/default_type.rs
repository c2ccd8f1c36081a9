//! `DefaultGPUType=`: a new job's GPU request without a type, under rules
//! that name a default type, is given that type in the fields Slurm will
//! hold, instead of being refused; the typed request is then judged as
//! any other.

use crate::qos::config::{Enforce, GpuQosConfig, QosRule};
use crate::qos::gres::{with_gpu_type, TresField};

use super::job::JobDescription;
use super::requests::FieldRequest;
use super::rules::{collect_requests, covering_rules};
use super::verdict::{JobChanges, PolicyWarning, Rejection, TypeGiven, WarningReason};
use super::wording::{not_yet_enforced, Context, Syntax};

/// The default type of the rules covering `job`: where one or more name
/// one, all name the same and every rule covering the job permits it;
/// with whether every rule that names it enforces (`Enforce=yes`).
pub(super) fn default_for<'c, 'a: 'c>(
    cfg: &'c GpuQosConfig,
    job: &JobDescription<'a>,
) -> Option<(&'c str, bool)> {
    let rules: Vec<&QosRule> = covering_rules(cfg, job).collect();
    let mut defaults = rules.iter().filter_map(|r| r.default_gpu_type());
    let ty = defaults.next()?;
    if defaults.any(|other| other != ty) || !rules.iter().all(|r| r.permits(ty)) {
        return None;
    }
    let enforced = rules
        .iter()
        .filter(|r| r.default_gpu_type().is_some())
        .all(|r| cfg.rule_enforce(r) == Enforce::Yes);
    Some((ty, enforced))
}

/// A job's untyped GPU requests with a type.
struct Rewrite {
    /// Each field that changes, with its new text.
    fields: Vec<(TresField, String)>,
    /// The first untyped request, as the user asked it.
    asked: String,
    /// The options it becomes, as a user would type them.
    line: String,
}

/// The fields of `job` with its untyped GPU requests given `ty`, and what
/// to tell: `None` where it asks for no untyped GPU or its request does
/// not read whole (refused as it is).
fn rewrite(cfg: &GpuQosConfig, job: &JobDescription<'_>, ty: &str) -> Option<Rewrite> {
    let requests = collect_requests(cfg, job, Syntax::Sbatch).ok()?;
    let untyped: Vec<&FieldRequest<'_>> = requests
        .iter()
        .filter(|r| r.request.is_gpu() && r.request.gres_type.is_none())
        .collect();
    let first = untyped.first()?;
    let mut fields: Vec<(TresField, String)> = TresField::ALL
        .into_iter()
        .filter_map(|f| Some((f, with_gpu_type(job.tres(f)?, ty)?)))
        .collect();
    // The GPUs Slurm adds for --ntasks-per-gpu where no option asks for
    // any, asked for with the type (as the refusal's advice says).
    if let Some(derived) = untyped.iter().find(|r| r.tasks_per_gpu.is_some()) {
        let prefix = if job.gres_slash { "gres/" } else { "gres:" };
        let count = derived.request.count;
        fields.push((TresField::PerJob, format!("{prefix}gpu:{ty}:{count}")));
    }
    let ctx = Context {
        job,
        syntax: Syntax::Sbatch,
    };
    let mut lines: Vec<String> = untyped.iter().map(|r| ctx.instead(r, ty)).collect();
    lines.dedup();
    Some(Rewrite {
        fields,
        asked: ctx.asked(first),
        line: lines.join(" "),
    })
}

/// A new job whose untyped GPU requests its rules give a type: judged as
/// the typed request (`judge`), its fields rewritten where that is
/// accepted; where a rule only warns, judged as sent with a warning of
/// what it would become. `None`: no default applies.
pub(super) fn with_default_type(
    cfg: &GpuQosConfig,
    job: &JobDescription<'_>,
    judge: impl Fn(&GpuQosConfig, &JobDescription<'_>) -> Result<JobChanges, Rejection>,
) -> Option<Result<JobChanges, Rejection>> {
    // Most sites name no default: nothing more to look at.
    if !cfg.has_default_gpu_types() {
        return None;
    }
    let (ty, enforced) = default_for(cfg, job)?;
    let Rewrite {
        fields,
        asked,
        line,
    } = rewrite(cfg, job, ty)?;
    if !enforced {
        let mut changes = judge(cfg, job);
        if let Ok(changes) = &mut changes {
            changes.warnings.insert(
                0,
                PolicyWarning {
                    reason: WarningReason::TypeGiven,
                    qos: job.qos_label(),
                    message: not_yet_enforced(
                        &format!(
                            "{asked} names no GPU type; DefaultGPUType={ty} gives it that \
                             type: the job would run as if submitted with {line}."
                        ),
                        Syntax::Sbatch,
                    ),
                },
            );
        }
        return Some(changes);
    }
    let mut typed: JobDescription<'_> = *job;
    for (field, text) in &fields {
        match field {
            TresField::PerNode => typed.tres_per_node = Some(text),
            TresField::PerJob => typed.tres_per_job = Some(text),
            TresField::PerSocket => typed.tres_per_socket = Some(text),
            TresField::PerTask => typed.tres_per_task = Some(text),
        }
    }
    Some(match judge(cfg, &typed) {
        Ok(mut changes) => {
            changes.gpu_type_given = Some(Box::new(TypeGiven {
                gpu_type: ty.to_owned(),
                qos: job.qos_label(),
                fields,
                message: format!(
                    "{asked} names no GPU type, so the job was given type {ty} \
                     (DefaultGPUType={ty}): it runs as if submitted with {line}."
                ),
            }));
            Ok(changes)
        }
        Err(mut refusal) => {
            refusal.message = format!(
                "{asked} names no GPU type, so it was given type {ty} (DefaultGPUType={ty}), \
                 as if submitted with {line}; then: {}",
                refusal.message
            );
            Err(refusal)
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
