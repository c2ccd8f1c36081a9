//! A share's step ending: the MPS clients its tasks left running are
//! ended through the GPU's control daemon before slurmstepd kills them
//! (`gpushare::mps::node::step_end` says why and when). Kept per step in
//! slurmstepd: what the step needs at its end is set in `init` (the
//! configuration, the GPU, the local tasks) and `task_post_fork` (the
//! step's cgroup, read from its first task's); `task_exit` counts the
//! exits and acts after the last.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};

use gpushare::mps::config::GpuMpsConfig;
use gpushare::mps::node::step_end::{terminate_left, StepCgroup};
use slurm_plugin::log;

/// What a share's step needs at its end.
struct StepEnd {
    cfg: GpuMpsConfig,
    job: u32,
    gpu: u32,
    tasks: u32,
    cgroup: Option<StepCgroup>,
}

static STEP: Mutex<Option<StepEnd>> = Mutex::new(None);
static EXITED: AtomicU32 = AtomicU32::new(0);

fn step() -> std::sync::MutexGuard<'static, Option<StepEnd>> {
    STEP.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `init` of a share's step that runs `tasks` local tasks on `gpu`.
pub fn share_step(cfg: &GpuMpsConfig, job: u32, gpu: u32, tasks: u32) {
    if tasks > 0 {
        *step() = Some(StepEnd {
            cfg: cfg.clone(),
            job,
            gpu,
            tasks,
            cgroup: None,
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
}

/// `task_exit`: after the step's last local task, the clients left in
/// the step are ended through the daemon, before slurmstepd's SIGKILL.
pub fn task_exited() {
    let guard = step();
    let Some(end) = guard.as_ref() else {
        return;
    };
    if EXITED.fetch_add(1, Ordering::SeqCst) + 1 < end.tasks {
        return;
    }
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
