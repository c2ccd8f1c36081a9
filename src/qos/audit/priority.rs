//! The priority link: QOS priority weighed, the periods that matter
//! set, and GPUs billed by type.

use crate::qos::check::Severity;
use crate::qos::site::{conf_value, partition_gpu_types, PartitionInfo, SlurmSettings};

use super::finding::*;
use super::gathered::Site;

/// https://slurm.schedmd.com/priority_multifactor.html: QOS priority counts
/// only under priority/multifactor with PriorityWeightQOS > 0; fair share
/// balances the groups' use of the shared GPUs.
pub(super) fn priority(site: &Site, out: &mut Vec<AuditFinding>) {
    let s = &site.settings;
    let ptype = s.get("PriorityType").unwrap_or("priority/basic");
    if !ptype.eq_ignore_ascii_case("priority/multifactor") {
        out.push(
            AuditFinding::new(
                Severity::Warning,
                "priority_not_multifactor",
                "slurm.conf",
                DOC_PRIORITY,
            )
            .what(format!("PriorityType is {ptype}, not priority/multifactor"))
            .why("QOS priority and fair share do not order jobs: group jobs queue behind the rest")
            .fix("PriorityType=priority/multifactor (then restart slurmctld)"),
        );
        return;
    }
    for (key, kind, why, fix) in [
        (
            "PriorityWeightQOS",
            "priority_weight_qos_zero",
            "the QOS Priority is multiplied by 0: group jobs do not start before low-priority ones",
            "PriorityWeightQOS=10000 (then scontrol reconfigure)",
        ),
        (
            "PriorityWeightFairshare",
            "priority_weight_fairshare_zero",
            "past use does not lower priority: one busy user can keep the shared GPUs",
            "PriorityWeightFairshare=1000 (then scontrol reconfigure)",
        ),
    ] {
        if s.number(key).unwrap_or(0) == 0 {
            out.push(
                AuditFinding::new(Severity::Warning, kind, "slurm.conf", DOC_PRIORITY)
                    .what(format!("{key} is 0 or unset"))
                    .why(why)
                    .fix(fix),
            );
        }
    }
    priority_defaults(site, out);
}

/// https://slurm.schedmd.com/slurm.conf.html (PriorityDecayHalfLife,
/// PriorityMaxAge, both 7-0 by default): the two periods users are told
/// when they ask why they wait (how long their GPU use counts against
/// them, how long before waiting stops raising a job). A site that weighs
/// fair share or age should have chosen them; `scontrol show config`
/// prints the default as if set, so only slurm.conf's text tells.
pub(super) fn priority_defaults(site: &Site, out: &mut Vec<AuditFinding>) {
    let Some(text) = &site.slurm_conf else {
        return;
    };
    let s = &site.settings;
    for (key, weight, kind, why, fix) in [
        (
            "PriorityDecayHalfLife",
            "PriorityWeightFairshare",
            "decay_half_life_default",
            "fair share forgets GPU use at this half-life (a GPU-hour used one half-life ago \
             counts half): it decides how long a group's heavy use keeps its jobs behind, and \
             users are told it (gpu-qos why)",
            "PriorityDecayHalfLife=14-0 (the period GPU use should weigh on priority; then \
             scontrol reconfigure)",
        ),
        (
            "PriorityMaxAge",
            "PriorityWeightAge",
            "max_age_default",
            "a pending job's age factor grows to its full weight over this period: it decides \
             how long a job waits before age alone lifts it past others",
            "PriorityMaxAge=1-0 (the wait after which age weighs fully; then scontrol \
             reconfigure)",
        ),
    ] {
        if s.number(weight).unwrap_or(0) > 0 && conf_value(text, key).is_none() {
            out.push(
                AuditFinding::new(Severity::Note, kind, "slurm.conf", DOC_SLURM_CONF)
                    .what(format!(
                        "{key} is not set in slurm.conf: Slurm's default {} applies",
                        s.get(key).unwrap_or("7-00:00:00")
                    ))
                    .why(why)
                    .fix(fix),
            );
        }
    }
}

/// The partitions holding GPU nodes, with the GPU types on them.
pub(super) fn gpu_partitions(site: &Site) -> Vec<(&PartitionInfo, Vec<String>)> {
    site.partitions
        .iter()
        .filter(|p| {
            site.nodes
                .iter()
                .any(|n| n.has_gpus() && n.partitions.contains(&p.name))
        })
        .map(|p| (p, partition_gpu_types(&site.nodes, &p.name)))
        .collect()
}

/// https://slurm.schedmd.com/slurm.conf.html (TRESBillingWeights) and
/// priority_multifactor.html: fair share charges what billing counts; a
/// typed request counts against `gres/gpu` and `gres/gpu:TYPE`, an untyped
/// one only against `gres/gpu`.
pub(super) fn billing(site: &Site, out: &mut Vec<AuditFinding>) {
    for (p, types) in gpu_partitions(site) {
        let object = format!("PartitionName={}", p.name);
        let untyped = p.billing_weight("gres/gpu").is_some();
        let typed: Vec<&String> = types
            .iter()
            .filter(|t| p.billing_weight(&format!("gres/gpu:{t}")).is_some())
            .collect();
        let suggestion = || {
            let mut w: Vec<String> = p.billing.iter().map(|(k, v)| format!("{k}={v}")).collect();
            if w.is_empty() {
                w.push("CPU=1.0".into());
            }
            if !untyped {
                w.push("GRES/gpu=1.0".into());
            }
            format!(
                "PartitionName={} ... TRESBillingWeights={}",
                p.name,
                w.join(",")
            )
        };
        if untyped {
            billed_alike(&site.settings, p, &types, out);
            continue;
        }
        if typed.is_empty() {
            out.push(
                AuditFinding::new(Severity::Note, "billing_ignores_gpus", object, DOC_PRIORITY)
                    .what(format!(
                        "{} bills no GPU (no GRES/gpu in TRESBillingWeights)",
                        p.name
                    ))
                    .why("fair share charges GPU jobs for their CPUs only")
                    .fix(suggestion()),
            );
        } else {
            out.push(
                AuditFinding::new(Severity::Warning, "billing_typed_only", object, DOC_PRIORITY)
                    .what(format!(
                        "{} bills typed GPUs ({}) but not GRES/gpu",
                        p.name,
                        typed.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(",")
                    ))
                    .why("an untyped request (--gres=gpu:2, allowed outside group QOS) is billed nothing for its GPUs")
                    .fix(suggestion()),
            );
        }
    }
}

/// What one GPU of `gpu_type` adds to a job's billing in `p`: a typed
/// request counts against `gres/gpu` and `gres/gpu:TYPE` both.
pub fn gpu_cost(p: &PartitionInfo, gpu_type: &str) -> f64 {
    let weight = |k: &str| {
        p.billing_weight(k)
            .and_then(|w| w.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    weight("gres/gpu") + weight(&format!("gres/gpu:{gpu_type}"))
}

/// Partitions whose GPU types all cost the same in fair share: an hour of
/// the site's dearest GPU lowers a group's priority no more than one of
/// its cheapest. Only types accounting tracks count: slurmctld refuses to
/// start with a weight for an untracked one (seen on 22.05: "TRES weight
/// 'GRES:gpu:h100' is not a configured TRES type"), and `tres_untracked`
/// reports those first.
pub(super) fn billed_alike(
    settings: &SlurmSettings,
    p: &PartitionInfo,
    types: &[String],
    out: &mut Vec<AuditFinding>,
) {
    let types: Vec<String> = types
        .iter()
        .filter(|t| settings.list_has("AccountingStorageTRES", &format!("gres/gpu:{t}")))
        .cloned()
        .collect();
    if types.len() < 2 {
        return;
    }
    let cost = gpu_cost(p, &types[0]);
    if types.iter().any(|t| gpu_cost(p, t) != cost) {
        return;
    }
    let dearest = &types[types.len() - 1];
    let w: Vec<String> = p.billing.iter().map(|(k, v)| format!("{k}={v}")).collect();
    out.push(
        AuditFinding::new(
            Severity::Note,
            "billing_types_alike",
            format!("PartitionName={}", p.name),
            DOC_PRIORITY,
        )
        .what(format!(
            "{} bills its GPU types {} alike ({cost} per GPU; no GRES/gpu:TYPE weight tells them apart)",
            p.name,
            types.join(", ")
        ))
        .why(
            "fair share charges an hour of every type the same: a group on the dearest GPUs \
             loses no more priority than one on the cheapest",
        )
        .fix(format!(
            "PartitionName={} ... TRESBillingWeights={},GRES/gpu:{}=W (W: what one {}-hour \
             costs beyond GRES/gpu; then scontrol reconfigure)",
            p.name,
            w.join(","),
            dearest,
            dearest
        )),
    );
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
