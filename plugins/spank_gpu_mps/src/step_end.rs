//! A share's step ending: the MPS clients its tasks left running are
//! ended through the GPU's control daemon before slurmstepd kills them
//! (`gpushare::mps::node::step_end` says why and when). Kept per step in
//! slurmstepd: what the step needs at its end is set in `init` (the
//! configuration, the GPU, the local tasks) and `task_post_fork` (the
//! step's cgroup, read from its first task's, and the step's guard
//! started, `step_guard`); `task_exit` counts the exits and acts after
//! the last: the guard stopped, then the clients left ended.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};

use gpushare::mps::config::GpuMpsConfig;
use gpushare::mps::node::step_end::{terminate_left, StepCgroup};
use slurm_plugin::log;

use crate::step_guard::{self, Guard};

/// What a share's step needs at its end.
struct StepEnd {
    cfg: GpuMpsConfig,
    job: u32,
    gpu: u32,
    tasks: u32,
    cgroup: Option<StepCgroup>,
    /// The gpu_mps.conf read, for the guard.
    conf: Option<PathBuf>,
    guard: Option<Guard>,
}

static STEP: Mutex<Option<StepEnd>> = Mutex::new(None);
static EXITED: AtomicU32 = AtomicU32::new(0);

fn step() -> std::sync::MutexGuard<'static, Option<StepEnd>> {
    STEP.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `init` of a share's step that runs `tasks` local tasks on `gpu`.
pub fn share_step(cfg: &GpuMpsConfig, conf: Option<PathBuf>, job: u32, gpu: u32, tasks: u32) {
    if tasks > 0 {
        *step() = Some(StepEnd {
            cfg: cfg.clone(),
            job,
            gpu,
            tasks,
            cgroup: None,
            conf,
            guard: None,
        });
    }
}

/// `task_post_fork` of task `pid`: the step's cgroup, from the first
/// task's (every task of a step is in it).
pub fn task_started(pid: libc::pid_t) {
    let mut guard = step();
    let Some(end) = guard.as_mut().filter(|e| e.cgroup.is_none()) else {
        return;
    };
    match std::fs::read_to_string(format!("/proc/{pid}/cgroup")) {
        Ok(text) => end.cgroup = StepCgroup::of_task(&text),
        Err(e) => log::error(&format!(
            "gpu_mps: job {}: /proc/{pid}/cgroup: {e}: its MPS clients will not be ended \
             before Slurm kills them",
            end.job
        )),
    }
    // A step whose clients are found is guarded; never failed for want
    // of a guard (its clients are then ended only after its tasks).
    let Some(program) = end.cgroup.as_ref().and(end.cfg.step_guard.program()) else {
        return;
    };
    match step_guard::start(&program, end.conf.as_deref(), end.job, end.gpu, pid) {
        Ok(guard) => end.guard = Some(guard),
        Err(e) => log::error(&format!(
            "gpu_mps: job {}: its step guard did not start ({e}): a task that outlives \
             Slurm's SIGTERM is killed with its MPS work in flight",
            end.job
        )),
    }
}

/// The step's guard stopped (after its last task, or at its end).
fn stop_guard(end: &mut StepEnd) {
    if let Some(guard) = end.guard.take() {
        if let Err(e) = step_guard::stop(guard) {
            log::error(&format!(
                "gpu_mps: job {}: stopping its step guard: {e}",
                end.job
            ));
        }
    }
}

/// `exit`: a guard no task exit stopped is stopped now.
pub fn step_exit() {
    if let Some(end) = step().as_mut() {
        stop_guard(end);
    }
}

/// `task_exit`: after the step's last local task, the clients left in
/// the step are ended through the daemon, before slurmstepd's SIGKILL.
pub fn task_exited() {
    let mut held = step();
    let Some(end) = held.as_mut() else {
        return;
    };
    if EXITED.fetch_add(1, Ordering::SeqCst) + 1 < end.tasks {
        return;
    }
    stop_guard(end);
    let Some(cgroup) = &end.cgroup else {
        return;
    };
    let done = terminate_left(&end.cfg, end.gpu, cgroup, std::process::id());
    if !done.clients.is_empty() {
        log::info(&format!(
            "gpu_mps: job {}: its step's last task ended; {} MPS client(s) still running were \
             ended through GPU {}'s daemon before Slurm kills them: {}",
            end.job,
            done.clients.len(),
            end.gpu,
            done.clients
                .iter()
                .map(|(_, client)| client.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    for problem in done.problems {
        log::error(&format!(
            "gpu_mps: job {}: ending its step's MPS clients on GPU {}: {problem}",
            end.job, end.gpu
        ));
    }
}
