//! The GPUs a job asks for, field by field, and the fewest of one type
//! it can end up with.

use crate::qos::gres::{GresRequest, TresField};

use super::job::JobDescription;

/// A GRES entry and the field it came from.
#[derive(Debug, Clone, Copy)]
pub(super) struct FieldRequest<'a> {
    pub(super) field: TresField,
    pub(super) request: GresRequest<'a>,
    /// `Some(n)`: no field asked for a GPU, and these are the untyped GPUs
    /// slurmctld will add for `--ntasks-per-gpu=n` (as a per-job request,
    /// which is how Slurm counts them) after the plugin ran.
    pub(super) tasks_per_gpu: Option<u16>,
}

/// The untyped GPUs slurmctld adds to a job that asks for none but gives
/// `--ntasks-per-gpu` (`gres_job_state_validate`, 22.05 to 26.05): one per
/// that many of its tasks (`-n`), or, its task count unset and its node
/// count fixed (`-N 2`), one per node (Slurm then sets the task count to
/// nodes × tasks per GPU). Neither known: Slurm refuses the job itself;
/// it is counted as one untyped GPU, so a typed scope refuses it with the
/// line to type.
pub(super) fn derived_gpus(
    job: &JobDescription<'_>,
    asked_gpu: bool,
) -> Option<FieldRequest<'static>> {
    let per_gpu = job.ntasks_per_gpu.filter(|n| *n > 0 && *n != u16::MAX)?;
    if asked_gpu {
        return None;
    }
    let fixed_nodes = match (job.min_nodes, job.max_nodes) {
        (Some(min), Some(max)) if min == max => Some(u64::from(min)),
        _ => None,
    };
    let count = job
        .num_tasks
        .map(|tasks| u64::from(tasks) / u64::from(per_gpu))
        .or(fixed_nodes)
        .unwrap_or(1)
        .max(1);
    Some(FieldRequest {
        field: TresField::PerJob,
        request: GresRequest {
            name: "gpu",
            gres_type: None,
            count,
        },
        tasks_per_gpu: Some(per_gpu),
    })
}

pub(super) fn first_untyped_gpu<'r, 'a>(
    requests: &'r [FieldRequest<'a>],
) -> Option<&'r FieldRequest<'a>> {
    requests
        .iter()
        .find(|r| r.request.is_gpu() && r.request.gres_type.is_none())
}

/// The fewest GPUs of one type a job can end up with, and the field that
/// forces it. Fields constrain one allocation rather than add up
/// (`--gpus=4 --gpus-per-node=2` is 4 GPUs on 2 nodes), so the bound is the
/// largest field total, not their sum.
#[derive(Debug, Clone, Copy)]
pub(super) struct LeastTotal {
    pub(super) total: u64,
    pub(super) field: TresField,
    pub(super) multiplier: u64,
}

pub(super) fn least_total(
    job: &JobDescription<'_>,
    requests: &[FieldRequest<'_>],
    ty: &str,
) -> LeastTotal {
    let mut least = LeastTotal {
        total: 0,
        field: TresField::PerJob,
        multiplier: 1,
    };
    for field in TresField::ALL {
        let per_unit = requests
            .iter()
            .filter(|r| r.field == field && r.request.is_gpu() && r.request.gres_type == Some(ty))
            .fold(0u64, |sum, r| sum.saturating_add(r.request.count));
        let multiplier = multiplier(job, field);
        let total = per_unit.saturating_mul(multiplier);
        if total > least.total {
            least = LeastTotal {
                total,
                field,
                multiplier,
            };
        }
    }
    least
}

pub(super) fn nodes(job: &JobDescription<'_>) -> u64 {
    u64::from(job.min_nodes.unwrap_or(1).max(1))
}

fn multiplier(job: &JobDescription<'_>, field: TresField) -> u64 {
    match field {
        TresField::PerJob => 1,
        TresField::PerNode => nodes(job),
        TresField::PerTask => u64::from(job.num_tasks.unwrap_or(1).max(1)),
        TresField::PerSocket => {
            u64::from(job.sockets_per_node.unwrap_or(1).max(1)).saturating_mul(nodes(job))
        }
    }
}
