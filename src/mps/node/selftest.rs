//! The MPS self-test on a node's GPUs (`crate::mps::selftest`): on an
//! idle GPU for `gpu-mps selftest`, and on a GPU whose daemon a prolog has
//! just started (`SelfTest=daemon-start`).

use std::path::Path;
use std::time::Duration;

use super::setup::Node;
use crate::mps::config::SelfTest;
use crate::mps::daemon::{self, Limits, MpsDaemon};
use crate::mps::ledger::LedgerError;
use crate::mps::lock_wait::LockError;
use crate::mps::selftest::{self, check_gpu, Expected, GpuCheck, ProbeUser, Verdict};
use crate::mps::under_test;

/// What `gpu-mps selftest` did on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Both clients ran; the check says how it went.
    Checked(Box<GpuCheck>),
    /// Not tested, and why (shares run there, its lock is held).
    Skipped(String),
    /// The GPU's daemon could not be started or given the limits.
    DaemonFailed(String),
}

/// What a share of `units` expects of the server on this node.
pub fn expected(node: &Node, units: u32) -> Expected {
    let cfg = &node.cfg;
    Expected {
        thread_percentage: cfg.thread_percentage(units),
        memory_mib: cfg.memory_limit_mib(units, node.gpu_memory_mib),
        exclusive: cfg.exclusive_while_shared,
    }
}

/// Tests GPU `gpu` where nothing runs on it: its daemon started as a
/// share's prolog starts it, given the limits of a share of `units`, both
/// clients run as `user` (the program `exe` answers the probe option),
/// then the daemon stopped again (with the GPU's compute mode) unless a
/// share was placed there meanwhile.
///
/// The GPU is marked under test ([`under_test`]) under its daemon lock
/// before it is found idle, and the clients run with no lock held (up to
/// `timeout` each): meanwhile placement passes the GPU by, and a share
/// that reaches its daemon anyway is refused `busy` and requeued, where
/// it used to wait for the lock and be refused at the end of its wait.
pub fn on_idle_gpu(
    node: &Node,
    gpu: u32,
    exe: &Path,
    user: &ProbeUser,
    units: u32,
    timeout: Duration,
) -> Outcome {
    let cfg = &node.cfg;
    let wait = node.ledger.lock_wait();
    let expected = expected(node, units);
    // Both clients, and the daemon's start and stop beside them.
    let longest = timeout.saturating_mul(2) + Duration::from_secs(30);
    let mut marked = None;
    let started = daemon::with_gpu_lock(cfg, gpu, wait, || {
        if let Err(e) = under_test::mark(&cfg.state_dir, gpu, longest, wait) {
            return Ok(Err(Outcome::Skipped(format!(
                "its mark as under test: {e}"
            ))));
        }
        marked = Some(Marked { node, gpu });
        let state = node.ledger.snapshot()?.state;
        let shares = state.shares().filter(|s| s.gpu == gpu).count();
        if shares > 0 {
            return Ok(Err(Outcome::Skipped(format!(
                "{shares} share(s) run on it: the test's client would wait for their \
                 server, or they for its"
            ))));
        }
        if state.whole_holders().any(|w| w.gpus.contains(&gpu)) {
            return Ok(Err(Outcome::Skipped("a job holds it whole".into())));
        }
        let ensured = daemon::ensure(cfg, gpu, node.owner, true);
        let failed = match &ensured.daemon {
            MpsDaemon::Failed(why) => Some(format!("its MPS daemon: {why}")),
            MpsDaemon::NotAvailable => {
                Some("no MPS control program runs its daemon (MPSControl=)".to_owned())
            }
            _ => {
                let limits = Limits {
                    thread_percentage: expected.thread_percentage,
                    memory_mib: expected.memory_mib,
                };
                // Its bypass client is tried while a server holds the GPU, as
                // it is where shares run (daemon::start_server_line).
                let hold = (!cfg.multi_user).then_some(user.uid);
                daemon::apply_limits(cfg, gpu, limits, ensured.servers, hold)
                    .err()
                    .map(|e| format!("its MPS daemon's limits: {e}"))
            }
        };
        match failed {
            Some(why) => {
                let _ = daemon::stop_if_idle(cfg, &state, gpu);
                Ok(Err(Outcome::DaemonFailed(why)))
            }
            None => Ok::<_, LedgerError>(Ok(())),
        }
    });
    match started {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(outcome))) => return outcome,
        Ok(Err(e)) => return Outcome::Skipped(format!("the node's ledger: {e}")),
        Err(LockError::Busy(busy)) => return Outcome::Skipped(format!("its daemon lock: {busy}")),
        Err(e) => return Outcome::Skipped(format!("its daemon lock: {e}")),
    }
    let check = through_guard(node, gpu, &[], user, || {
        check_gpu(cfg, gpu, exe, user, expected, timeout)
    });
    // Read again: a share placed meanwhile keeps the daemon.
    let _ = daemon::with_gpu_lock(cfg, gpu, wait, || {
        let state = node.ledger.snapshot()?.state;
        let _ = daemon::stop_if_idle(cfg, &state, gpu);
        Ok::<_, LedgerError>(())
    });
    drop(marked);
    Outcome::Checked(Box::new(check))
}

/// GPU `gpu` marked under test by this process: the mark is cleared when
/// this is dropped, whatever ended the test.
struct Marked<'a> {
    node: &'a Node,
    gpu: u32,
}

impl Drop for Marked<'_> {
    fn drop(&mut self) {
        let _ = under_test::clear(
            &self.node.cfg.state_dir,
            self.gpu,
            self.node.ledger.lock_wait(),
        );
    }
}

/// Keeps the result of a test of GPU `gpu` (the metrics and `status` read
/// it): a failure sets the GPU aside, a pass gives back a GPU only a
/// self-test had set aside. What changed, in words.
pub fn keep(node: &Node, gpu: u32, verdict: &Verdict) -> Result<Option<String>, String> {
    selftest::record::keep(&node.cfg.state_dir, gpu, verdict, node.ledger.lock_wait())
}

/// `SelfTest=daemon-start`: in the prolog that just started GPU `gpu`'s
/// daemon (holding its lock, the server's `limits` set), both clients run
/// as the self-test's user; `Some(reason)` where the GPU failed, which
/// refuses the share and sets the GPU aside. Where the test cannot run at
/// all (its user unknown, this program not found) the share is refused
/// too: a check that was asked for and did not happen is not a pass.
pub fn after_daemon_start(
    node: &Node,
    gpu: u32,
    limits: Limits,
    share_uids: &[u32],
    notes: &mut Vec<String>,
) -> Option<String> {
    if node.cfg.self_test != SelfTest::DaemonStart {
        return None;
    }
    let expected = Expected {
        thread_percentage: limits.thread_percentage,
        memory_mib: limits.memory_mib,
        exclusive: node.cfg.exclusive_while_shared,
    };
    let verdict = match (
        selftest::user(&node.cfg.self_test_user),
        std::env::current_exe(),
    ) {
        (Ok(user), Ok(exe)) => {
            let check = through_guard(node, gpu, share_uids, &user, || {
                check_gpu(&node.cfg, gpu, &exe, &user, expected, PROLOG_TIMEOUT)
            });
            notes.push(format!(
                "GPU {gpu}'s MPS self-test after its daemon's start: {} in {} ms",
                if check.verdict.passed() {
                    "passed"
                } else {
                    "FAILED"
                },
                check.ms
            ));
            check.verdict
        }
        (Err(e), _) => Verdict {
            failures: vec![e],
            notes: Vec::new(),
        },
        (_, Err(e)) => Verdict {
            failures: vec![format!("the prolog's own program: {e}")],
            notes: Vec::new(),
        },
    };
    match keep(node, gpu, &verdict) {
        Ok(Some(changed)) => notes.push(changed),
        Ok(None) => {}
        Err(e) => notes.push(e),
    }
    verdict.failures.first().map(|why| {
        format!(
            "GPU {gpu}'s MPS self-test failed after its daemon started: {why}; the GPU takes \
             no new share until `gpu-mps selftest` passes there"
        )
    })
}

/// How long each client may take in a prolog: less than the CLI's, since
/// a job waits, more than a cold CUDA start.
pub const PROLOG_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `f` with the self-test's user let through GPU `gpu`'s pipe guard
/// (where the node keeps one: only the users of its shares may reach its
/// MPS pipes), then the guard set back to `share_uids`. A guard that
/// cannot be set leaves the directory as it was: the client then says it
/// could not reach the daemon.
fn through_guard<T>(
    node: &Node,
    gpu: u32,
    share_uids: &[u32],
    user: &ProbeUser,
    f: impl FnOnce() -> T,
) -> T {
    let Some(guard) = node.pipe_guard else {
        return f();
    };
    let dir = daemon::gpu_dir(&node.cfg, gpu);
    let mut with_probe = share_uids.to_vec();
    with_probe.push(user.uid);
    let _ = guard(&dir, &with_probe);
    let out = f();
    let _ = guard(&dir, share_uids);
    out
}
