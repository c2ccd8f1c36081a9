//! A share's step guard: its MPS clients ended through the control daemon
//! before Slurm's SIGKILL reaches a task that outlived its SIGTERM.
//!
//! Slurm ends a job (`scancel`, a time limit, a preemption, a requeue) by
//! sending each step SIGCONT and SIGTERM, waiting `max(KillWait, 5)`
//! seconds, then SIGKILL to everything left (slurmd `_rpc_terminate_job`,
//! 22.05 to 26.05). No plugin hook runs in between. A task that ignores or
//! outlives SIGTERM is killed with its kernels in flight, and on a real GPU
//! that fails every other client of its MPS server (see `step_end`).
//!
//! The guard is a process slurmstepd starts (SPANK `task_post_fork` of a
//! share's step, as root) in the cgroups of the step's first task, with
//! slurmstepd as its parent: Slurm's proctrack/cgroup signals it as it
//! signals the tasks, and kills it with them. It blocks every signal and
//! waits. On SIGTERM it waits a second (a task that ends on SIGTERM ends
//! the step, and `task_exit` stops the guard: nothing is asked of
//! slurmctld), then asks, at once, `squeue` whether the job is ending (a
//! user's own `scancel -s TERM`, `--signal` and a preemption's grace time
//! leave it running: nothing is ended) and `scontrol` for `KillWait`.
//! Shortly before Slurm's SIGKILL is due ([`LEAD`]), the step's clients
//! still alive are ended through the daemon (`terminate_client`), and the
//! SIGKILL finds no work in flight. Where the job's state cannot be read,
//! the clients are ended as for an ending job: the neighbours' kernels are
//! worth more than a job's last seconds of a signal it chose to ignore.
//! slurmd's SIGKILL needs no controller, so a controller too loaded to
//! answer must not hold the guard: only the answers that have come by the
//! time Slurm's least wait would have the clients ended count
//! ([`ask_slurmctld`]); a `KillWait` not known by then is taken as that
//! least wait.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::mps::config::GpuMpsConfig;
use crate::mps::daemon::Terminated;
use crate::mps::node::step_end::{terminate_in_step, StepCgroup};
use crate::shared::bounded;

/// Slurm's least wait between SIGTERM and SIGKILL (`MAX(KillWait, 5)`).
pub const LEAST_KILL_WAIT: u64 = 5;
/// How long before Slurm's SIGKILL the guard ends the clients.
pub const LEAD: Duration = Duration::from_millis(2500);
/// How long the ending may take (the control program's calls).
pub const END_BUDGET: Duration = Duration::from_secs(2);
/// How long after a SIGTERM the guard waits before it asks slurmctld
/// anything: a task that ends on SIGTERM has ended by then.
pub const SETTLE: Duration = Duration::from_secs(1);
/// How long one `squeue` or `scontrol` call may take.
pub const ASK_TIMEOUT: Duration = Duration::from_millis(1500);

/// The guard's name in `ps` and in the node's log.
pub const NAME: &str = "gpu-mps-guard";
/// The word that makes `gpu-mps-epilog` a guard (its first argument).
pub const WORD: &str = "step-guard";

/// The guard's command line: `step-guard JOB GPU [CONF]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardArgs {
    pub job: u32,
    pub gpu: u32,
    pub conf: Option<PathBuf>,
}

impl GuardArgs {
    /// The arguments after [`WORD`].
    pub fn parse(args: &[String]) -> Option<Self> {
        let job = args.first()?.parse().ok()?;
        let gpu = args.get(1)?.parse().ok()?;
        let conf = args.get(2).map(PathBuf::from);
        (args.len() <= 3).then_some(Self { job, gpu, conf })
    }

    /// The arguments after [`WORD`], as [`parse`](Self::parse) reads them.
    pub fn to_args(&self) -> Vec<String> {
        let mut v = vec![self.job.to_string(), self.gpu.to_string()];
        v.extend(self.conf.iter().map(|c| c.display().to_string()));
        v
    }
}

/// Whether a job whose state `squeue -o %T` prints as `state` is ending
/// (its tasks will be killed). `None` (no answer): ending.
pub fn ending(state: Option<&str>) -> bool {
    let Some(state) = state.map(str::trim).filter(|s| !s.is_empty()) else {
        return true;
    };
    !matches!(
        state,
        "RUNNING" | "CONFIGURING" | "SUSPENDED" | "RESIZING" | "SIGNALING"
    )
}

/// `KillWait` from `scontrol show config` (`KillWait = 30 sec`).
pub fn kill_wait_of(config: &str) -> Option<u64> {
    config.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        if key.trim() != "KillWait" {
            return None;
        }
        value.split_whitespace().next()?.parse().ok()
    })
}

/// When the clients are ended: [`LEAD`] before Slurm's SIGKILL, due
/// `max(kill_wait, 5)` seconds after the SIGTERM seen at `term_at`
/// (`None`: KillWait unknown, the least Slurm waits).
pub fn end_at(term_at: Instant, kill_wait: Option<u64>) -> Instant {
    let wait = Duration::from_secs(kill_wait.unwrap_or(0).max(LEAST_KILL_WAIT));
    term_at + wait.saturating_sub(LEAD)
}

/// The job's state as `squeue` prints it, `None` where it answers nothing.
pub fn job_state(job: u32) -> Option<String> {
    let out = bounded::slurm(
        "squeue",
        &["-h", "-j", &job.to_string(), "-o", "%T"],
        ASK_TIMEOUT,
    );
    let state = out.ok()?.lines().next()?.trim().to_owned();
    (!state.is_empty()).then_some(state)
}

/// `KillWait` as slurmctld has it, `None` where it does not answer.
pub fn kill_wait() -> Option<u64> {
    kill_wait_of(&bounded::slurm("scontrol", &["show", "config"], ASK_TIMEOUT).ok()?)
}

/// What slurmctld says once a SIGTERM came: the job's state and
/// `KillWait`, each `None` where no answer came in time.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Answers {
    pub state: Option<String>,
    pub kill_wait: Option<u64>,
}

/// Asks `squeue` for the job's state and `scontrol` for `KillWait` at
/// once, and takes what has come by `by` (the earliest time the clients
/// may have to be ended, [`end_at`] with no `KillWait` known): a
/// controller too loaded to answer never delays the ending past Slurm's
/// least wait, and a question unanswered counts as no answer.
pub fn ask_slurmctld(job: u32, by: Instant) -> Answers {
    let (state, kill_wait) = both_by(by, move || job_state(job), kill_wait);
    Answers {
        state: state.flatten(),
        kill_wait: kill_wait.flatten(),
    }
}

/// Runs `a` and `b` on threads of their own and returns what each
/// returned by `by` (`None` for one still running then, left to end on
/// its own: every question the guard asks is bounded).
pub fn both_by<A, B>(
    by: Instant,
    a: impl FnOnce() -> A + Send + 'static,
    b: impl FnOnce() -> B + Send + 'static,
) -> (Option<A>, Option<B>)
where
    A: Send + 'static,
    B: Send + 'static,
{
    enum Either<A, B> {
        A(A),
        B(B),
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let tx_b = tx.clone();
    let spawned_a = std::thread::Builder::new()
        .spawn(move || {
            let _ = tx.send(Either::A(a()));
        })
        .is_ok();
    let spawned_b = std::thread::Builder::new()
        .spawn(move || {
            let _ = tx_b.send(Either::B(b()));
        })
        .is_ok();
    let mut waiting = usize::from(spawned_a) + usize::from(spawned_b);
    let (mut got_a, mut got_b) = (None, None);
    while waiting > 0 {
        let left = by.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Either::A(v)) => got_a = Some(v),
            Ok(Either::B(v)) => got_b = Some(v),
            Err(_) => break,
        }
        waiting -= 1;
    }
    (got_a, got_b)
}

/// Ends, through GPU `gpu`'s daemon, the MPS clients in `step` but the
/// guard itself (`me`), within [`END_BUDGET`].
pub fn end_clients(cfg: &GpuMpsConfig, gpu: u32, step: &StepCgroup, me: u32) -> Terminated {
    terminate_in_step(cfg, gpu, step, me, END_BUDGET)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_job_is_not_ending_an_ended_or_unknown_one_is() {
        for running in ["RUNNING", "CONFIGURING", "SUSPENDED", " RUNNING \n"] {
            assert!(!ending(Some(running)), "{running}");
        }
        for ended in [
            "CANCELLED",
            "COMPLETING",
            "TIMEOUT",
            "PREEMPTED",
            "REQUEUED",
            "PENDING",
            "NODE_FAIL",
            "FAILED",
        ] {
            assert!(ending(Some(ended)), "{ended}");
        }
        assert!(ending(None));
        assert!(ending(Some("")));
    }

    #[test]
    fn kill_wait_is_read_from_slurms_configuration() {
        let config = "KeepAliveTime           = (null)\n\
                      KillOnBadExit           = 0\n\
                      KillWait                = 30 sec\n\
                      LaunchParameters        = (null)\n";
        assert_eq!(kill_wait_of(config), Some(30));
        assert_eq!(kill_wait_of("KillWait = 2 sec\n"), Some(2));
        assert_eq!(kill_wait_of("KillOnBadExit = 0\n"), None);
        assert_eq!(kill_wait_of("KillWait = soon\n"), None);
    }

    #[test]
    fn the_clients_end_a_lead_before_slurms_sigkill() {
        let t = Instant::now();
        assert_eq!(end_at(t, Some(30)), t + Duration::from_millis(27_500));
        // Slurm waits at least 5 s, whatever KillWait says.
        assert_eq!(end_at(t, Some(2)), t + Duration::from_millis(2_500));
        assert_eq!(end_at(t, Some(0)), t + Duration::from_millis(2_500));
        assert_eq!(end_at(t, None), t + Duration::from_millis(2_500));
    }

    #[test]
    fn an_answer_that_comes_late_is_no_answer() {
        let start = Instant::now();
        let by = start + Duration::from_millis(300);
        let (fast, slow) = both_by(
            by,
            || 7,
            || {
                std::thread::sleep(Duration::from_secs(5));
                "late"
            },
        );
        assert_eq!((fast, slow), (Some(7), None));
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(300) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        let (a, b) = both_by(Instant::now() + Duration::from_secs(5), || 1, || 2);
        assert_eq!((a, b), (Some(1), Some(2)));
        // A deadline already past takes only what has already come.
        let (a, b) = both_by(start, || std::thread::sleep(Duration::from_secs(5)), || ());
        assert_eq!(a, None);
        assert!(b.is_none() || b == Some(()));
    }

    #[test]
    fn the_guards_arguments_read_back_as_written() {
        let args = GuardArgs {
            job: 42,
            gpu: 3,
            conf: Some(PathBuf::from("/etc/slurm/gpu_mps.conf")),
        };
        assert_eq!(GuardArgs::parse(&args.to_args()), Some(args));
        let bare = GuardArgs {
            job: 7,
            gpu: 0,
            conf: None,
        };
        assert_eq!(GuardArgs::parse(&bare.to_args()), Some(bare));
        for bad in [&["x", "1"][..], &["1"], &[], &["1", "2", "c", "extra"]] {
            let bad: Vec<String> = bad.iter().map(|s| (*s).to_owned()).collect();
            assert_eq!(GuardArgs::parse(&bad), None, "{bad:?}");
        }
    }
}
