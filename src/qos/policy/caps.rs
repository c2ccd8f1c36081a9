//! The per-type caps of what goes with a GPU: `MaxGPUsPerJob=`,
//! `MaxCPUsPerGPU=`, `MaxTasksPerGPU=` and `MaxMemPerGPU=`, each a list
//! of `type:value`, cluster-wide.
//!
//! A job is judged on what Slurm will hold for it, at each node count
//! Slurm may give it: from `--nodes`' least (1 where none is given) to
//! its most, which without `--nodes` is one node per task (Slurm may
//! spread `-n 4 --gres=gpu:a40:2` over four nodes, eight GPUs). Its GPUs
//! are the largest total of its GPU fields (fields constrain one
//! allocation); its tasks `-n`, else `--ntasks-per-node` × nodes, else
//! one per node (`--ntasks-per-gpu` × GPUs where only that is given); its
//! CPUs the largest of tasks × `-c`, the client's count, `--mincpus` ×
//! nodes and `--cpus-per-gpu` × GPUs; its memory `--mem` × nodes,
//! `--mem-per-cpu` × CPUs or `--mem-per-gpu` × GPUs. A ratio is worst at
//! one end of the range, so both ends are judged. Memory a job does not
//! ask for is Slurm's default (`DefMemPerGPU=`, the site's); `--exclusive`
//! and `--mem=0` hold every CPU or all the memory of their nodes, which
//! no cap can judge at submission: under a CPU or memory cap they are
//! refused with the amounts to ask for instead. Where a job holds GPUs of
//! several types, its CPUs, tasks and memory per GPU count against each
//! type's cap (the smallest binds). Untyped GPUs have no type to cap
//! (`RequireGPUType=all` makes every request name one).

use crate::qos::config::{mem_text, Cap, GpuQosConfig, TypeCaps};
use crate::qos::gres::TresField;

use super::job::{JobDescription, Memory};
use super::requests::FieldRequest;
use super::verdict::{reject, Rejection, RejectionKind};
use super::wording::{Context, Syntax};

mod record;
pub use record::over_type_caps;
use record::per_gpu_value;

/// An amount Slurm will hold, or one no cap can judge before the job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Amount {
    Known(u64),
    /// Every CPU or all the memory of the job's nodes.
    WholeNode,
    /// Not asked for: Slurm's default applies.
    Default,
    /// A field the plugin cannot read in full.
    Unreadable,
}

/// The job at one node count.
#[derive(Debug, Clone, Copy)]
struct Shape {
    nodes: u64,
    gpus: u64,
    tasks: u64,
    cpus: Amount,
    mem: Amount,
}

/// The least and most nodes Slurm may give the job.
fn node_range(job: &JobDescription<'_>) -> (u64, u64) {
    let least = u64::from(job.min_nodes.unwrap_or(1).max(1));
    let most = match (job.max_nodes, job.num_tasks, job.ntasks_per_node) {
        (Some(max), _, _) => u64::from(max),
        (None, Some(tasks), Some(per)) if per > 0 => u64::from(tasks).div_ceil(u64::from(per)),
        (None, Some(tasks), _) => u64::from(tasks),
        (None, None, _) => least,
    };
    (least, most.max(least))
}

/// Tasks at `nodes` before `--ntasks-per-gpu` is counted.
fn base_tasks(job: &JobDescription<'_>, nodes: u64) -> u64 {
    match (job.num_tasks, job.ntasks_per_node) {
        (Some(tasks), _) => u64::from(tasks),
        (None, Some(per)) if per > 0 => u64::from(per).saturating_mul(nodes),
        _ => nodes,
    }
}

/// GPUs (of `ty`, or of every kind where `None`) at `nodes`: the largest
/// field total.
fn gpus(
    job: &JobDescription<'_>,
    requests: &[FieldRequest<'_>],
    ty: Option<&str>,
    nodes: u64,
) -> u64 {
    TresField::ALL
        .into_iter()
        .map(|field| {
            let per_unit = requests
                .iter()
                .filter(|r| r.field == field && r.request.is_gpu())
                .filter(|r| ty.is_none_or(|t| r.request.gres_type == Some(t)))
                .fold(0u64, |sum, r| sum.saturating_add(r.request.count));
            let units = match field {
                TresField::PerJob => 1,
                TresField::PerNode => nodes,
                TresField::PerTask => base_tasks(job, nodes),
                TresField::PerSocket => {
                    u64::from(job.sockets_per_node.unwrap_or(1).max(1)).saturating_mul(nodes)
                }
            };
            per_unit.saturating_mul(units)
        })
        .max()
        .unwrap_or(0)
}

fn per_gpu_amount(text: Option<&str>, mem: bool) -> Option<Amount> {
    match per_gpu_value(text?, mem) {
        Ok(Some(n)) => Some(Amount::Known(n)),
        Ok(None) => None,
        Err(()) => Some(Amount::Unreadable),
    }
}

fn larger(a: Amount, b: Amount) -> Amount {
    match (a, b) {
        (Amount::Known(x), Amount::Known(y)) => Amount::Known(x.max(y)),
        (Amount::Default, other) | (other, Amount::Default) => other,
        (Amount::WholeNode, _) | (_, Amount::WholeNode) => Amount::WholeNode,
        _ => Amount::Unreadable,
    }
}

fn times(a: Amount, n: u64) -> Amount {
    match a {
        Amount::Known(x) => Amount::Known(x.saturating_mul(n)),
        other => other,
    }
}

fn shape(job: &JobDescription<'_>, requests: &[FieldRequest<'_>], nodes: u64) -> Shape {
    let all = gpus(job, requests, None, nodes);
    let tasks = match (job.num_tasks, job.ntasks_per_gpu) {
        (None, Some(per)) if job.ntasks_per_node.is_none() => u64::from(per).saturating_mul(all),
        _ => base_tasks(job, nodes),
    };
    let cpus = if job.whole_node {
        Amount::WholeNode
    } else {
        let per_task = u64::from(job.cpus_per_task.unwrap_or(1).max(1));
        let mut cpus = Amount::Known(tasks.saturating_mul(per_task));
        cpus = larger(cpus, Amount::Known(u64::from(job.min_cpus.unwrap_or(0))));
        cpus = larger(
            cpus,
            Amount::Known(u64::from(job.pn_min_cpus.unwrap_or(0)).saturating_mul(nodes)),
        );
        if let Some(per_gpu) = per_gpu_amount(job.cpus_per_tres, false) {
            cpus = larger(cpus, times(per_gpu, all));
        }
        cpus
    };
    let mut mem = match job.memory {
        _ if job.whole_node => Amount::WholeNode,
        Some(Memory::PerNode(0)) => Amount::WholeNode,
        Some(Memory::PerNode(mb)) => Amount::Known(mb.saturating_mul(nodes)),
        Some(Memory::PerCpu(mb)) => match cpus {
            Amount::Known(c) => Amount::Known(mb.saturating_mul(c)),
            other => other,
        },
        None => Amount::Default,
    };
    if let Some(per_gpu) = per_gpu_amount(job.mem_per_tres, true) {
        mem = larger(mem, times(per_gpu, all));
    }
    Shape {
        nodes,
        gpus: all,
        tasks,
        cpus,
        mem,
    }
}

/// Whether an update changes what the caps judge (its GPUs, CPUs, tasks,
/// memory or nodes): the job is then read back once it is done.
pub(super) fn update_changes_shape(cfg: &GpuQosConfig, update: &JobDescription<'_>) -> bool {
    !cfg.type_caps().is_empty()
        && (update.tres_per_node.is_some()
            || update.tres_per_job.is_some()
            || update.tres_per_task.is_some()
            || update.tres_per_socket.is_some()
            || update.min_nodes.is_some()
            || update.max_nodes.is_some()
            || update.num_tasks.is_some()
            || update.ntasks_per_node.is_some()
            || update.ntasks_per_gpu.is_some()
            || update.cpus_per_task.is_some()
            || update.pn_min_cpus.is_some()
            || update.min_cpus.is_some()
            || update.memory.is_some()
            || update.cpus_per_tres.is_some()
            || update.mem_per_tres.is_some()
            || update.whole_node)
}

/// Judges a new job against the per-type caps.
pub(super) fn judge_type_caps(
    cfg: &GpuQosConfig,
    ctx: &Context<'_, '_>,
    requests: &[FieldRequest<'_>],
) -> Result<(), Rejection> {
    let caps = cfg.type_caps();
    if caps.is_empty() {
        return Ok(());
    }
    let job = ctx.job;
    let mut types: Vec<&str> = Vec::new();
    for r in requests.iter().filter(|r| r.request.is_gpu()) {
        if let Some(ty) = r.request.gres_type {
            if !types.contains(&ty) {
                types.push(ty);
            }
        }
    }
    if types.is_empty() {
        return Ok(());
    }
    let (least, most) = node_range(job);
    let ends = [shape(job, requests, least), shape(job, requests, most)];
    for ty in types {
        if let Some(cap) = caps.of(Cap::GpusPerJob, ty) {
            let held = gpus(job, requests, Some(ty), most);
            if held > cap {
                let at_least = gpus(job, requests, Some(ty), least);
                return Err(too_many_gpus(
                    ctx,
                    caps,
                    ty,
                    cap,
                    held,
                    at_least,
                    (least, most),
                ));
            }
        }
        for end in &ends {
            for cap in [Cap::CpusPerGpu, Cap::TasksPerGpu, Cap::MemPerGpu] {
                let Some(limit) = caps.of(cap, ty) else {
                    continue;
                };
                let amount = match cap {
                    Cap::CpusPerGpu => end.cpus,
                    Cap::TasksPerGpu => Amount::Known(end.tasks),
                    _ => end.mem,
                };
                let over = match amount {
                    Amount::Known(n) => n > limit.saturating_mul(end.gpus.max(1)),
                    Amount::WholeNode | Amount::Unreadable => true,
                    Amount::Default => false,
                };
                if over {
                    return Err(too_much_per_gpu(ctx, caps, cap, ty, limit, amount, end));
                }
            }
        }
    }
    Ok(())
}

fn refusal(message: String) -> Rejection {
    reject(RejectionKind::OverTypeCap, message)
}

fn too_many_gpus(
    ctx: &Context<'_, '_>,
    caps: &TypeCaps,
    ty: &str,
    cap: u64,
    held: u64,
    at_least: u64,
    (least, most): (u64, u64),
) -> Rejection {
    let item = caps.item(Cap::GpusPerJob, ty).unwrap_or_default();
    let spread = if most > least && at_least <= cap {
        format!(
            " (Slurm may give it up to {most} nodes; on {least} it holds {at_least}): fix its \
             node count, {}",
            nodes_option(ctx, least)
        )
    } else {
        format!(
            ": ask for at most {cap}, e.g. {}",
            ctx.suggest(TresField::PerJob, ty, cap)
        )
    };
    refusal(format!(
        "This job can hold {held} {ty}, more than the {cap} {ty} one job may hold \
         (MaxGPUsPerJob={item}){spread}."
    ))
}

fn nodes_option(ctx: &Context<'_, '_>, nodes: u64) -> String {
    match ctx.syntax {
        Syntax::Sbatch => format!("--nodes={nodes}"),
        Syntax::Scontrol => format!("NumNodes={nodes}"),
    }
}

fn too_much_per_gpu(
    ctx: &Context<'_, '_>,
    caps: &TypeCaps,
    cap: Cap,
    ty: &str,
    limit: u64,
    amount: Amount,
    end: &Shape,
) -> Rejection {
    let item = caps.item(cap, ty).unwrap_or_default();
    let key = cap.key();
    let gpus = end.gpus.max(1);
    let on = if end.nodes > 1 {
        format!(" on {} nodes", end.nodes)
    } else {
        String::new()
    };
    let (what, fits) = match cap {
        Cap::CpusPerGpu => ("CPUs", format!("--cpus-per-gpu={limit}")),
        Cap::TasksPerGpu => ("tasks", format!("--ntasks-per-gpu={limit}")),
        _ => ("memory", format!("--mem-per-gpu={}", mem_text(limit))),
    };
    let message = match amount {
        Amount::WholeNode => {
            let how = if ctx.job.whole_node {
                "--exclusive holds every CPU and all the memory"
            } else {
                "--mem=0 holds all the memory"
            };
            format!(
                "{how} of its nodes, which {key}={item} cannot judge before the job runs. Ask \
                 for amounts instead, e.g. {fits}."
            )
        }
        Amount::Unreadable => format!(
            "This job's {what} per GPU (\"{}\") could not be read in full, so {key}={item} \
             cannot judge it. Ask with {fits} or less.",
            if cap == Cap::CpusPerGpu {
                ctx.job.cpus_per_tres.unwrap_or_default()
            } else {
                ctx.job.mem_per_tres.unwrap_or_default()
            }
        ),
        Amount::Known(n) => {
            let shown = |v: u64| match cap {
                Cap::MemPerGpu => mem_text(v),
                _ => v.to_string(),
            };
            format!(
                "This job holds {} {}{what} with {gpus} GPU(s){on}: {} per GPU, more than \
                 {key}={item} allows. Ask for at most {} per {ty}, e.g. {fits}, or for more \
                 GPUs.",
                shown(n),
                if cap == Cap::MemPerGpu { "of " } else { "" },
                shown(n.div_ceil(gpus)),
                shown(limit),
            )
        }
        Amount::Default => String::new(),
    };
    refusal(message)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
