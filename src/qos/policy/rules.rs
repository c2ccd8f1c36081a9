//! One rule of `gpu_qos.conf` applied to a job, and the rules that cover
//! a job: the QOS it names, its partitions, its accounts and user.

use crate::qos::config::{GpuQosConfig, QosRule, RuleScope};
use crate::qos::gres::{tres_entries, TresField};
use crate::qos::tres_read;

use super::job::JobDescription;
use super::requests::{derived_gpus, least_total, FieldRequest};
use super::verdict::{reject, Rejection, RejectionKind};
use super::wording::{bad_gres, hidden_gres, no_gpu_request, over_limit, Context, Level, Syntax};

/// Every GRES request of the job, field by field, entry by entry; a field
/// where slurmctld would read a GPU that no entry says at its head
/// (`cpu=gres:gpu:2`, [`tres_read::hidden_gpu`]) is refused, so that what
/// is judged is all slurmctld will hold.
pub(super) fn collect_requests<'a>(
    cfg: &GpuQosConfig,
    job: &JobDescription<'a>,
    syntax: Syntax,
) -> Result<Vec<FieldRequest<'a>>, Rejection> {
    let mut requests = Vec::new();
    for field in TresField::ALL {
        let Some(text) = job.tres(field) else {
            continue;
        };
        for entry in tres_entries(text) {
            let request = entry.map_err(|e| bad_gres(cfg, job, field, &e))?;
            requests.push(FieldRequest {
                field,
                request,
                tasks_per_gpu: None,
            });
        }
        let at_head = |entry: &str| {
            let request = tres_entries(entry).next()?.ok()?;
            Some(tres_read::Found {
                name: request.name.to_owned(),
                gres_type: request.gres_type.map(str::to_owned),
                count: request.count,
            })
        };
        if let Some(hidden) = tres_read::hidden_gpu(text, at_head) {
            return Err(hidden_gres(cfg, job, field, syntax, &hidden));
        }
    }
    let asked_gpu = requests.iter().any(|r| r.request.is_gpu());
    requests.extend(derived_gpus(job, asked_gpu));
    Ok(requests)
}

/// Every rule that covers the job: its QOS's (those it names, else its
/// association's default), its partitions', its association's.
pub(super) fn covering_rules<'c, 'a: 'c>(
    cfg: &'c GpuQosConfig,
    job: &JobDescription<'a>,
) -> impl Iterator<Item = &'c QosRule> {
    let named: Vec<&str> = job.qos_names().collect();
    let qos: Vec<&'c QosRule> = if named.is_empty() {
        job.resolved
            .default_qos
            .iter()
            .filter_map(|q| cfg.rule_for(q))
            .collect()
    } else {
        named.iter().filter_map(|q| cfg.rule_for(q)).collect()
    };
    let others: Vec<&'c QosRule> = other_levels(cfg, job).map(|(_, rule)| rule).collect();
    qos.into_iter().chain(others)
}

/// The partition and association rules that cover the job, each with the
/// level it is told as. An association rule names the nearest of the job's
/// accounts it covers; a rule limited to users covers the job when its user
/// is one of them, or is unknown (an update), which fails closed.
pub(super) fn other_levels<'c, 'a>(
    cfg: &'c GpuQosConfig,
    job: &JobDescription<'a>,
) -> impl Iterator<Item = (Level<'a>, &'c QosRule)> + 'c
where
    'a: 'c,
{
    let partitions = job.partitions().filter_map(|p| {
        cfg.partition_rule(p)
            .map(|rule| (Level::Partition(p), rule))
    });
    let resolved = job.resolved;
    let associations = cfg.association_rules().filter_map(move |rule| {
        let RuleScope::Association { accounts, users } = rule.scope() else {
            return None;
        };
        let user_matches = users.is_empty()
            || resolved
                .user
                .is_none_or(|u| users.iter().any(|x| x.eq_ignore_ascii_case(u)));
        if !user_matches {
            return None;
        }
        if accounts.is_empty() {
            return resolved.user.map(|u| (Level::User(u), rule));
        }
        resolved
            .accounts
            .iter()
            .find(|a| accounts.iter().any(|x| x.eq_ignore_ascii_case(a)))
            .map(|a| (Level::Account(a.as_str()), rule))
    });
    partitions.chain(associations)
}

/// Rules 1, 3, 5 and 6 for one rule that covers the job.
pub(super) fn judge_under_rule(
    ctx: &Context<'_, '_>,
    requests: &[FieldRequest<'_>],
    level: Level<'_>,
    rule: &QosRule,
) -> Result<(), Rejection> {
    // Joined only on the way to a rejection: the accept path stays allocation-light.
    let permitted = || rule.gpu_types().join(", ");
    let first_type = rule.first_gpu_type();
    let gpus = requests.iter().filter(|r| r.request.is_gpu());

    if gpus.clone().next().is_none() {
        // Only a QOS the user chose is "for GPU jobs": a CPU job that falls
        // back to a GPU QOS, or runs in a GPU partition, counts no GPU.
        return match level {
            Level::Qos(_) => Err(no_gpu_request(ctx, requests, level, rule)),
            _ => Ok(()),
        };
    }
    if let Some(untyped) = gpus.clone().find(|r| r.request.gres_type.is_none()) {
        let asked = ctx.asked(untyped);
        let instead = ctx.instead(untyped, first_type);
        let permitted = permitted();
        let (subject, name) = (level.subject(), level.name());
        return Err(match ctx.syntax {
            Syntax::Sbatch => reject(
                RejectionKind::UntypedGpu,
                format!(
                    "{subject} requires a GPU type, but {asked} does not name one; \
                     {name} may use {permitted}. Submit with {instead} instead."
                ),
            ),
            Syntax::Scontrol => reject(
                RejectionKind::UpdateNeedsTypedGpu,
                format!(
                    "{subject} requires a GPU type, but {asked} does not name one; \
                     {name} may use {permitted}. Use: {instead}"
                ),
            ),
        });
    }
    for r in gpus.clone() {
        let Some(ty) = r.request.gres_type else {
            continue;
        };
        if !rule.permits(ty) {
            let asked = ctx.gpu_request(r.field, Some(ty), r.request.count);
            let instead = ctx.suggest(r.field, first_type, r.request.count);
            let how = match ctx.syntax {
                Syntax::Sbatch => format!("Submit with {instead} instead"),
                Syntax::Scontrol => format!("Use: {instead}"),
            };
            let permitted = permitted();
            let (subject, name, elsewhere) = (level.subject(), level.name(), level.elsewhere(ty));
            return Err(reject(
                RejectionKind::TypeNotPermitted,
                format!(
                    "{subject} does not cover GPU type {ty} (asked with {asked}); \
                     {name} may use {permitted}. {how}, or {elsewhere}."
                ),
            ));
        }
    }
    // Each type against its own limit, as accounting counts each type name.
    for r in gpus {
        let Some(ty) = r.request.gres_type else {
            continue;
        };
        let Some(limit) = rule.limit_for(ty) else {
            continue;
        };
        let least = least_total(ctx.job, requests, ty);
        if least.total > limit {
            return Err(over_limit(ctx, level, ty, limit, least));
        }
    }
    Ok(())
}
