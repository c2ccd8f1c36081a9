//! `gpu-mps-epilog step-guard`: the process slurmstepd starts beside a
//! share's step (`gpushare::mps::node::step_guard` says why and what it
//! decides). Here only its signals, its waits and its log.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use gpushare::mps::config::locate;
use gpushare::mps::in_force::{self, Role, NODE_RECORDS_DIR};
use gpushare::mps::node::step_end::StepCgroup;
use gpushare::mps::node::step_guard::{
    ask_slurmctld, end_at, end_clients, ending, Answers, GuardArgs, NAME, SETTLE,
};

use gpushare::shared::exit_status::node as exit;

use crate::node_log;

/// Every signal blocked, to be taken by [`next_signal`]: only SIGKILL
/// (Slurm's, with the tasks) ends the guard.
fn block_all() -> libc::sigset_t {
    // SAFETY: a zeroed sigset_t is filled before use; plain system calls.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// The next signal within `wait` (`None`: none came).
fn next_signal(set: &libc::sigset_t, wait: Duration) -> Option<i32> {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(wait.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(wait.subsec_nanos()),
    };
    // SAFETY: set and ts are valid; no siginfo asked for.
    let sig = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
    (sig > 0).then_some(sig)
}

/// Waits until `at`, taking (and dropping) the signals that come.
fn wait_until(set: &libc::sigset_t, at: Instant) {
    loop {
        let left = at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let _ = next_signal(set, left);
    }
}

/// Whether slurmstepd, which started the guard, is gone.
fn orphaned() -> bool {
    std::os::unix::process::parent_id() == 1
}

/// The guard: waits for Slurm's SIGTERM, then ends the step's clients
/// before Slurm's SIGKILL where the job is ending.
pub fn run(args: &GuardArgs) -> ExitCode {
    let set = block_all();
    // SAFETY: PR_SET_NAME takes a NUL-terminated name of up to 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"gpu-mps-guard".as_ptr()) };
    let node = std::env::var("SLURMD_NODENAME").unwrap_or_default();
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let cfg = locate(args.conf.as_deref()).ok().and_then(|path| {
        let records = std::path::Path::new(NODE_RECORDS_DIR);
        in_force::resolve(&path, &node, records, euid, Role::Reader).cfg
    });
    node_log::init(
        NAME,
        Some(args.job),
        cfg.as_ref().and_then(|c| c.syslog_socket.as_deref()),
    );
    let Some(cfg) = cfg else {
        log::error!("no configuration in force: this step's MPS clients are not guarded");
        return exit::MISUSED.into();
    };
    let me = std::process::id();
    let step = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|t| StepCgroup::of_task(&t));
    let Some(step) = step else {
        log::error!("not in a step's cgroup: this step's MPS clients are not guarded");
        return exit::MISUSED.into();
    };
    loop {
        let Some(sig) = next_signal(&set, Duration::from_secs(10)) else {
            if orphaned() {
                return exit::EPILOG_DONE.into();
            }
            continue;
        };
        if sig != libc::SIGTERM {
            continue;
        }
        let term_at = Instant::now();
        wait_until(&set, term_at + SETTLE);
        let Answers { state, kill_wait } = ask_slurmctld(args.job, end_at(term_at, None));
        if !ending(state.as_deref()) {
            log::info!(
                "SIGTERM while the job is {}: its MPS clients are left to it",
                state.as_deref().unwrap_or("?")
            );
            continue;
        }
        let at = end_at(term_at, kill_wait);
        wait_until(&set, at);
        let done = end_clients(&cfg, args.gpu, &step, me);
        let job_is = state.map_or_else(
            || "in a state squeue did not tell".to_owned(),
            |s| s.to_lowercase(),
        );
        if !done.clients.is_empty() {
            log::info!(
                "job {job_is}, its task(s) outlived SIGTERM: {} MPS client(s) ended through \
                 GPU {}'s daemon before Slurm's SIGKILL (KillWait {}): {}",
                done.clients.len(),
                args.gpu,
                kill_wait.map_or_else(|| "unknown".to_owned(), |k| format!("{k} s")),
                done.clients
                    .iter()
                    .map(|(_, c)| c.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        for problem in &done.problems {
            log::error!(
                "ending this step's MPS clients on GPU {}: {problem}",
                args.gpu
            );
        }
        return exit::EPILOG_DONE.into();
    }
}
