//! Typed GPU limits of the accounting database at levels `gpu_qos.conf`
//! has no rule for. A site that adds `GrpTRES=gres/gpu:a40=4` with
//! `sacctmgr` and forgets `gpu-qos generate` must not have the untyped
//! hole back: an untyped request under such a level is refused all the
//! same, with the types the limit names as the ones to type. Only the
//! hole is closed here: which types a level permits, how many GPUs fit
//! and whether it is for GPU jobs at all are a rule's to say.

use crate::qos::config::{GpuQosConfig, RuleScope};

use super::job::{JobDescription, LimitLevel, TypedLimit};
use super::requests::{first_untyped_gpu, FieldRequest};
use super::rules::collect_requests;
use super::verdict::{reject, Rejection, RejectionKind};
use super::wording::{Context, Level, Syntax};

/// The typed limits that cover the job and that no rule of `cfg` judges,
/// each with the level it is told as.
pub(super) fn unruled<'j, 'a>(
    cfg: &'j GpuQosConfig,
    job: &'j JobDescription<'a>,
) -> impl Iterator<Item = (Level<'a>, &'a TypedLimit)> + 'j {
    job.resolved.typed_limits.iter().filter_map(move |limit| {
        let level = match &limit.level {
            LimitLevel::Qos(q) if cfg.rule_for(q).is_none() => {
                if job.qos_names().any(|n| n.eq_ignore_ascii_case(q)) {
                    Level::Qos(q.as_str())
                } else {
                    Level::DefaultQos(q.as_str())
                }
            }
            LimitLevel::Partition { partition, .. } if cfg.partition_rule(partition).is_none() => {
                Level::Partition(partition.as_str())
            }
            LimitLevel::Account(a) if !account_ruled(cfg, a) => Level::Account(a.as_str()),
            LimitLevel::User { user, account, .. } if !user_ruled(cfg, user, account) => {
                Level::User(user.as_str())
            }
            _ => return None,
        };
        (!limit.types.is_empty()).then_some((level, limit))
    })
}

/// Whether the job asks for GPUs without a type anywhere (or writes a
/// request that does not parse, which the decision then refuses): only
/// then can a typed limit without a rule matter at submission, so only
/// then does the plugin look the limits up in slurmctld.
pub fn asks_untyped_gpu(job: &JobDescription<'_>) -> bool {
    collect_requests(&GpuQosConfig::default(), job, Syntax::Sbatch)
        .map_or(true, |requests| first_untyped_gpu(&requests).is_some())
}

/// The typed limits covering `job` that no rule of `cfg` judges: what
/// the plugin logs once each, with the rule to add.
pub fn limits_without_rule<'a>(
    cfg: &GpuQosConfig,
    job: &JobDescription<'a>,
) -> Vec<&'a TypedLimit> {
    unruled(cfg, job).map(|(_, limit)| limit).collect()
}

/// Whether a rule covers every job of `account` (a rule limited to some
/// users leaves the others to the database's limit).
fn account_ruled(cfg: &GpuQosConfig, account: &str) -> bool {
    cfg.association_rules().any(|rule| match rule.scope() {
        RuleScope::Association { accounts, users } => {
            users.is_empty() && accounts.iter().any(|a| a.eq_ignore_ascii_case(account))
        }
        _ => false,
    })
}

/// Whether a rule covers the jobs of `user` under `account`: one naming
/// the user (under that account, or any), or one for the whole account.
fn user_ruled(cfg: &GpuQosConfig, user: &str, account: &str) -> bool {
    let named = |list: &[String], name: &str| list.iter().any(|x| x.eq_ignore_ascii_case(name));
    cfg.association_rules().any(|rule| match rule.scope() {
        RuleScope::Association { accounts, users } => {
            let user_ok = users.is_empty() || named(users, user);
            let account_ok = accounts.is_empty() || named(accounts, account);
            user_ok && account_ok && !(users.is_empty() && accounts.is_empty())
        }
        _ => false,
    })
}

/// Refuses an untyped GPU request under a level whose database limit is
/// typed and has no rule; in an update (whose levels are those it moves
/// the job to), refuses a move without a typed GPU request, since the
/// job's own request is not visible then.
pub(super) fn judge_unruled_limits(
    cfg: &GpuQosConfig,
    ctx: &Context<'_, '_>,
    requests: &[FieldRequest<'_>],
) -> Result<(), Rejection> {
    for (level, limit) in unruled(cfg, ctx.job) {
        let first = limit.types.first().map_or("", String::as_str);
        let named = limit.types.join(", ");
        let name = level.name();
        let subject = match level {
            Level::Account(a) => format!("Account {a}"),
            Level::User(u) => format!("User {u}"),
            _ => level.subject(),
        };
        if let Some(untyped) = first_untyped_gpu(requests) {
            let asked = ctx.asked(untyped);
            let instead = ctx.instead(untyped, first);
            let how = match ctx.syntax {
                Syntax::Sbatch => format!("Submit with {instead} instead."),
                Syntax::Scontrol => format!("Use: {instead}"),
            };
            return Err(reject(
                RejectionKind::UnlistedTypedLimit,
                format!(
                    "{subject} has a GPU limit by type in Slurm's accounting ({named}), which \
                     counts only GPU requests that name their type, but {asked} does not name \
                     one. {how}"
                ),
            ));
        }
        if ctx.syntax == Syntax::Scontrol && !requests.iter().any(|r| r.request.is_gpu()) {
            let instead = ctx.suggest(crate::qos::gres::TresField::PerNode, first, 1);
            return Err(reject(
                RejectionKind::UnlistedTypedLimit,
                format!(
                    "Moving a job to {name} needs a typed GPU request in the same update \
                     ({name} has a GPU limit by type in Slurm's accounting: {named}), since \
                     the job's own request is not visible to this check: {instead}\n\
                     If the job was submitted with an untyped GPU request, Slurm cannot add \
                     a type to it: cancel it and submit again with --gres=gpu:{first}:1."
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
