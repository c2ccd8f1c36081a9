//! `gpu-qos audit`: the whole chain a typed-GPU QOS design depends on,
//! checked link by link. A group's `GrpTRES=gres/gpu:a40=4` only holds if
//! accounting enforces limits and QOS, tracks that TRES, and
//! `job_submit/gpu_qos` closes the untyped-request hole; its right to take
//! GPUs back from `lowprio` only holds if preemption is by QOS, in a mode
//! that frees the GPUs, with requeue on; its jobs only start first if QOS
//! priority weighs. Any one missing link and the design silently does
//! something else. Each check cites the Slurm page it follows.
//!
//! Pure: [`Site`] is what the admin command gathered (see [`super::site`]
//! for the readers), [`audit`] returns findings, [`AuditReport`] is what
//! `--json` prints. `gpu-qos check`'s findings are part of it, unchanged.
//!
//! The checks, by the link of the chain they audit:
//! - `accounting`: enforcement, tracked TRES, `gpu_qos.conf` and the
//!   plugin, the group QOS flags.
//! - `preemption`: low-priority QOS preempted by QOS, in a mode that
//!   frees the GPUs.
//! - `priority`: QOS priority weighed, and GPUs billed by type.
//! - `nodes`: mps nodes and the node half of the product, and job
//!   namespaces that would hide their MPS pipes.
//!
//! `finding` is what each check reports, `gathered` what it reads,
//! `report` the table and the `--json` of the whole.

mod accounting;
mod finding;
mod gathered;
mod nodes;
mod preemption;
mod priority;
mod report;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod fixtures;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;

use super::check::Severity;

use accounting::{
    accounting, gpu_qos_conf, group_flags, grp_tres_types_on_nodes, qos_lists, tracked_tres,
};
use finding::DOC_SLURM_CONF;
use nodes::{mps_nodes, slurmd_connections};
use preemption::preemption;
use priority::{billing, priority};

pub use finding::AuditFinding;
pub use gathered::{GpuQosConf, Site};
pub use preemption::effective_preempt_mode;
pub use priority::gpu_cost;
pub use report::{AuditReport, FailOn};

/// Runs every check. Findings come in the order of the chain: accounting,
/// gpu_qos.conf, preemption, priority, billing, MPS nodes, then what could
/// not be read.
pub fn audit(site: &Site) -> Vec<AuditFinding> {
    let mut out = Vec::new();
    accounting(site, &mut out);
    tracked_tres(site, &mut out);
    grp_tres_types_on_nodes(site, &mut out);
    gpu_qos_conf(site, &mut out);
    preemption(site, &mut out);
    priority(site, &mut out);
    billing(site, &mut out);
    group_flags(site, &mut out);
    qos_lists(site, &mut out);
    mps_nodes(site, &mut out);
    slurmd_connections(site, &mut out);
    for u in &site.unread {
        out.push(
            AuditFinding::new(Severity::Note, "unread", u.source.clone(), DOC_SLURM_CONF)
                .what(format!("could not be read: {}", u.reason))
                .why("the audit checked what it could read; this part was left out"),
        );
    }
    out
}
