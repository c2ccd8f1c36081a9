//! The SPANK side: what each task of a share job gets (its GPU, its
//! environment, its device rules, the line its output starts with), read
//! from the ledger the prolog wrote.

use std::path::PathBuf;

use super::notes::{refusal, unserved};
use super::serve::names;
use super::setup::{gpu_devices, hides_users};
use crate::mps::config::{Banner, GpuMpsConfig};
use crate::mps::daemon;
use crate::mps::ledger::{Ledger, LedgerState, ShareRecord};
use crate::mps::state_dir;
use crate::mps::status::StatusCopy;
use crate::shared::spank_env;

/// The records of the published status copy, if its directory can be
/// trusted (owned by `owner`, writable by nobody else) and it reads.
fn published_records(cfg: &GpuMpsConfig, owner: u32) -> Option<LedgerState> {
    let dir = daemon::public_dir(cfg);
    state_dir::check(&dir, owner, state_dir::Access::WorldReadable).ok()?;
    StatusCopy {
        dir,
        gpu_count: 0,
        units_per_gpu: cfg.units_per_gpu,
        private: None,
    }
    .read_records()
}

/// What each task of a share job gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskPlan {
    pub gpu: u32,
    pub units: u32,
    /// gpushare placed the share, so it confines the tasks to its GPU;
    /// where Slurm placed it, Slurm's own device rules already do.
    pub confine: bool,
    /// The chosen GPU's device file (allowed).
    pub device: PathBuf,
    /// Every other GPU's device file (denied).
    pub other_devices: Vec<PathBuf>,
    /// Environment to set, replacing what Slurm set.
    pub env: Vec<(String, String)>,
    /// Hints for frameworks that size themselves from the whole GPU's
    /// memory ([`framework_hints`]): set only where the job has not set
    /// them itself.
    pub hints: Vec<(String, String)>,
    /// The line the job's output starts with (its limits, see [`banner`]),
    /// where `Banner=stderr`; empty where it goes elsewhere or a step
    /// before this one told it ([`TaskPlan::route_banner`]).
    pub banner: String,
    /// Where the banner goes (`Banner=` in gpu_mps.conf).
    pub banner_to: Banner,
    /// The MPS clients the ledger counted for the job when the plan was
    /// read: a step with no more tasks changes nothing, so it need not take
    /// the ledger's lock (the count only grows while the job runs).
    pub clients: u32,
    /// The GPU's MPS directory (its pipes inside), which every task must
    /// see, where this node runs MPS daemons ([`unreachable_pipes`]).
    pub pipes: Option<PathBuf>,
}

/// The refusal of a task that cannot see its GPU's MPS directory
/// (`plan.pipes`), `None` where it can or the node runs no daemons. Call
/// it in the task (SPANK task_init): a job container or namespace plugin
/// (`job_container/tmpfs`, `namespace/linux`) whose `Dirs=` covers
/// `StateDir` gives the job its own empty directory there, and the task's
/// CUDA work could then never reach the GPU's MPS server.
pub fn unreachable_pipes(plan: &TaskPlan, job: u32) -> Option<String> {
    let dir = plan.pipes.as_ref()?;
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(format!(
            "gpu_mps: job {job}: this task cannot see its GPU's MPS directory {}: the job's \
             namespace hides it, so its CUDA work could not reach the GPU's MPS server. \
             An administrator must keep StateDir= of gpu_mps.conf out of every directory \
             in Dirs= of job_container.conf (dirs: or dir_confs: of namespace.yaml); the default \
             /run/gpu-mps is",
            dir.display()
        )),
        _ => None,
    }
}

/// The plan for `job`'s tasks: `Ok(None)` when the job holds no share
/// here, `Err(text)` when it must fail (refused by the prolog, or a share
/// Slurm granted that the prolog never placed). `slurm_says_share` only
/// sharpens that message: a share is given by the ledger's record alone,
/// which only the prolog writes, from the credential's facts.
///
/// `tasks`: the step's tasks on this node. MPS limits a share's device
/// memory per client process, so the share's memory is divided over them:
/// the step's tasks together hold at most the share.
pub fn task_plan(
    cfg: &GpuMpsConfig,
    ledger: &Ledger,
    job: u32,
    slurm_says_share: bool,
    tasks: u32,
) -> Result<Option<TaskPlan>, String> {
    if let Some(text) = refusal(ledger, job) {
        return Err(text);
    }
    let state = match ledger.snapshot() {
        Ok(snapshot) => snapshot.state,
        // Found damaged (the next transaction repairs it): the published
        // copy, never behind the ledger, still says where the job is.
        Err(e) => match published_records(cfg, ledger.owner()) {
            Some(state) => state,
            // A job Slurm gave no share is left as Slurm made it, whatever
            // the state of the ledger.
            None if !slurm_says_share => return Ok(None),
            None => {
                return Err(format!(
                    "gpu_mps: job {job}: cannot read the node's share ledger: {e}"
                ))
            }
        },
    };
    let Some(share) = state.share(job) else {
        if slurm_says_share {
            return Err(format!(
                "gpu_mps: job {job} holds an MPS share but no GPU was chosen for it: the node's \
                 Prolog did not run for this job. Either Prolog=gpu-mps-prolog is not configured \
                 on this node, or Slurm skipped it (Slurm 22.05 can start a requeued job again on \
                 the same node without its Prolog); the share is refused rather than run \
                 unplaced: resubmit the job"
            ));
        }
        return Ok(None);
    };
    let devices = gpu_devices(cfg);
    let device = devices.get(share.gpu as usize).cloned().ok_or_else(|| {
        format!(
            "gpu_mps: job {job} was placed on GPU {} but the node lists only {} GPU devices",
            share.gpu,
            devices.len()
        )
    })?;
    let other_devices = devices
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != share.gpu as usize)
        .map(|(_, p)| p.clone())
        .collect();
    let dir = daemon::gpu_dir(cfg, share.gpu);
    let percent = cfg.thread_percentage(share.units);
    let memory_mib = share
        .memory_mib
        .or_else(|| cfg.memory_limit_mib(share.units, None));
    let tasks = tasks.max(1);
    let memory = memory_mib.map(|mib| TaskMemory {
        share_mib: mib,
        task_mib: (mib / u64::from(tasks)).max(1),
        tasks,
    });
    let mut env = Vec::new();
    if !share.placed_by_slurm {
        env.extend([
            // The MPS server of this GPU exposes exactly one device to clients.
            ("CUDA_VISIBLE_DEVICES".to_owned(), "0".to_owned()),
            (
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_owned(),
                percent.to_string(),
            ),
        ]);
    }
    // Where Slurm placed the share, its own CUDA_VISIBLE_DEVICES and
    // percentage already match its device rules and the share.
    env.extend([
        (
            "CUDA_MPS_PIPE_DIRECTORY".to_owned(),
            dir.join("pipe").to_string_lossy().into_owned(),
        ),
        (
            "CUDA_MPS_LOG_DIRECTORY".to_owned(),
            dir.join("log").to_string_lossy().into_owned(),
        ),
        ("GPUSHARE_GPU".to_owned(), share.gpu.to_string()),
        (spank_env::MPS_UNITS.to_owned(), share.units.to_string()),
    ]);
    if let Some(m) = &memory {
        // The server sees one GPU, so the client's device 0 is this GPU.
        env.push((
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_owned(),
            format!("0={}M", m.task_mib),
        ));
        env.push(("GPUSHARE_MEMORY_MIB".to_owned(), m.task_mib.to_string()));
    }
    let hints = framework_hints(memory_fraction(
        cfg,
        share.units,
        memory.as_ref().map(|m| m.task_mib),
        tasks,
    ));
    let others = if cfg.multi_user {
        Default::default()
    } else {
        state.other_users_on(share.gpu, share.uid)
    };
    // Read only where another user is there to name.
    let show_users = !others.is_empty() && hides_users(cfg) == Some(false);
    let others = Others {
        names: &others,
        shown: show_users,
    };
    let mut banner = banner(cfg, job, share, percent, memory.as_ref(), others);
    if let Some(why) = unserved(ledger, job) {
        banner = format!("gpu_mps: job {job}: WARNING: this job {why}");
    }
    Ok(Some(TaskPlan {
        gpu: share.gpu,
        units: share.units,
        confine: !share.placed_by_slurm,
        device,
        other_devices,
        env,
        hints,
        banner,
        banner_to: cfg.banner,
        clients: share.client_count(),
        pipes: crate::mps::programs::program(cfg).map(|_| dir.clone()),
    }))
}

impl TaskPlan {
    /// Where this step's banner goes, once per job on a node: `first` is
    /// whether this step is the job's first here to run tasks (it claimed
    /// the banner, see [`super::claim_banner`]). Leaves in `self.banner`
    /// only a line for the job's stderr (`Banner=stderr`), and returns the
    /// line for slurmstepd's log (`Banner=log`): a script that reads
    /// `srun ... 2>&1` then gets only its own output.
    pub fn route_banner(&mut self, first: bool) -> Option<String> {
        let line = std::mem::take(&mut self.banner);
        if !first || line.is_empty() {
            return None;
        }
        match self.banner_to {
            Banner::Stderr => {
                self.banner = line;
                None
            }
            Banner::Log => Some(line),
            Banner::Off => None,
        }
    }

    /// Whether a step must claim the job's banner: not where it goes
    /// nowhere (no marker left to clean up for nothing).
    pub fn banner_wanted(&self) -> bool {
        self.banner_to != Banner::Off && !self.banner.is_empty()
    }
}

/// A share's device memory as its step's tasks hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskMemory {
    /// The share's limit.
    pub share_mib: u64,
    /// Each task's (each MPS client's): the share over the tasks.
    pub task_mib: u64,
    pub tasks: u32,
}

/// The part of its GPU's memory one task of a share may use: the share's
/// part of the GPU (`units` / UnitsPerGPU), or less where its memory limit
/// is smaller than that part of a GPU of known memory (`GPUMemory=`),
/// divided over the step's `tasks`.
pub fn memory_fraction(cfg: &GpuMpsConfig, units: u32, task_mib: Option<u64>, tasks: u32) -> f64 {
    let share = f64::from(units) / f64::from(cfg.units_per_gpu.max(1));
    let per_task = share / f64::from(tasks.max(1));
    match (task_mib, cfg.gpu_memory_mib) {
        (Some(mib), Some(gpu)) if gpu > 0 => per_task.min(mib as f64 / gpu as f64),
        _ => per_task,
    }
    .clamp(0.0, 1.0)
}

/// What JAX preallocates of the memory a task may use, as JAX's own
/// default is of a whole GPU (75 %): the rest is for the CUDA libraries'
/// own allocations, which also count against the task's MPS limit.
pub const JAX_PREALLOCATION: f64 = 0.75;

/// The environment that makes the common frameworks stop at a task's part
/// of the GPU (`fraction`, see [`memory_fraction`]) instead of sizing
/// themselves from the whole GPU, which CUDA still reports under MPS:
/// JAX preallocates `XLA_PYTHON_CLIENT_MEM_FRACTION` of the GPU,
/// TensorFlow maps almost all of it unless `TF_FORCE_GPU_ALLOW_GROWTH`;
/// PyTorch allocates as it goes, and `GPUSHARE_MEMORY_FRACTION` is what to
/// give `torch.cuda.set_per_process_memory_fraction`. Fractions are
/// rounded down to 4 decimals, never past the share.
pub fn framework_hints(fraction: f64) -> Vec<(String, String)> {
    // Down, past the float error of a product such as 0.25 / 3 * 0.75.
    let shown = |f: f64| format!("{:.4}", (f * 10_000.0 + 1e-6).floor() / 10_000.0);
    vec![
        ("GPUSHARE_MEMORY_FRACTION".to_owned(), shown(fraction)),
        (
            "XLA_PYTHON_CLIENT_MEM_FRACTION".to_owned(),
            shown(fraction * JAX_PREALLOCATION),
        ),
        ("TF_FORCE_GPU_ALLOW_GROWTH".to_owned(), "true".to_owned()),
    ]
}

/// The other users with shares on a share's GPU, as its banner tells of
/// them.
#[derive(Clone, Copy)]
struct Others<'a> {
    names: &'a std::collections::BTreeSet<String>,
    /// Their names may be said: the node shows who runs what
    /// ([`hides_users`] is `Some(false)`). Where `PrivateData` hides it,
    /// or slurm.conf cannot be read, the banner says only that another
    /// user's server is there: the job's output is the user's to read,
    /// and no `squeue` would have told them who.
    shown: bool,
}

/// The one line a share job's output starts with: its GPU, its limits and
/// who enforces them, and any other user's server its work waits for.
fn banner(
    cfg: &GpuMpsConfig,
    job: u32,
    share: &ShareRecord,
    percent: u32,
    memory: Option<&TaskMemory>,
    others: Others<'_>,
) -> String {
    let memory = match memory {
        Some(m) if m.tasks > 1 => format!(
            "{} MiB of device memory, {} MiB for each of this step's {} tasks (MPS limits \
             each CUDA process: a process a task starts gets its own; CUDA still reports the \
             whole GPU's memory)",
            m.share_mib, m.task_mib, m.tasks
        ),
        Some(m) => format!(
            "{} MiB of device memory (CUDA still reports the whole GPU's memory: stay \
             under {} MiB)",
            m.share_mib, m.share_mib
        ),
        None => "no device memory limit".to_owned(),
    };
    let mut line = format!(
        "gpu_mps: job {job}: MPS share of {} units on GPU {}: {percent} % of its threads, {memory}",
        share.units, share.gpu
    );
    if cfg.multi_user {
        line.push_str("; the GPU's MPS server is shared by all users");
    } else if others.shown {
        // NVIDIA documents such a client as queued until every client of
        // the other user's server has exited (or, in its troubleshooting
        // guide, refused): never as running beside them.
        line.push_str(&format!(
            "; this GPU also runs the MPS server of {0}, and MPS serves one user at a time: \
             your job's CUDA work will wait until the jobs of {0} on this GPU end",
            names(others.names)
        ));
    } else if !others.names.is_empty() {
        // Neither their names nor how many: one user or several, the
        // wait is the same.
        line.push_str(
            "; another user's MPS server runs on this GPU, and MPS serves one user at a \
             time: your job's CUDA work will wait until that user's jobs on this GPU end",
        );
    }
    line
}

#[cfg(test)]
pub(crate) mod tests;
