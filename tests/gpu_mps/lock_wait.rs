//! A ledger lock held outside Slurm (an admin's `flock`, a hung gpushare
//! program) while a share starts: the prolog waits its bounded time
//! (`mps::lock_wait`), then refuses the share with the lock's name and its
//! wait; the job is requeued off the node, nothing is placed, the node is
//! not drained; once the lock is free the next share runs.

use gpushare::mps::ledger::Ledger;
use gpushare::mps::lock_wait::{open_lock, LOCK_WAIT};
use testcluster::cluster::NODE;

use super::*;

/// The prolog's wait, its refusal, the epilog's requeue.
const SENT_OFF_WITHIN: Timeout = Timeout::secs(LOCK_WAIT.as_secs() + 120);

pub(super) fn ledger_locked(c: &mut Cluster) -> TestResult {
    let state_dir = c.dir.join("run/gpu-mps");
    // The ledger as the first prolog would make it (a fresh cluster's
    // node has none yet), then its lock held by root, as `flock` would.
    Ledger::open(&state_dir, 0).map_err(|e| e.to_string())?;
    let lock = state_dir.join("lock");
    let held = open_lock(&lock).map_err(|e| format!("{}: {e}", lock.display()))?;
    held.lock()
        .map_err(|e| format!("flock {}: {e}", lock.display()))?;
    let id = c.sbatch_ok(&["--gres=mps:50", SCRIPT])?;
    c.wait_sent_off(id, NODE, SENT_OFF_WITHIN)?;
    let out = c.job_output(id);
    let shown = c.run_ok("scontrol", &["show", "job", &id.to_string()])?;
    // Its wait: what was left of the prolog's budget when it came to it.
    let waited = format!(
        "job {id} on node {NODE}: the node's share ledger lock ({}) stayed held by another \
         process for the ",
        lock.display()
    );
    ensure(
        out.contains(&waited)
            && out.contains(" s this program waited for it, so the job is refused")
            && out.contains("a batch job is requeued to run elsewhere")
            && !out.contains("GPU=")
            && shown.contains(&format!(
                "AdminComment=gpushare: requeued from {NODE} (not counted toward the 3)"
            ))
            && shown.contains("stayed held past the wait of the prolog"),
        format!("job {id}, refused while the ledger was locked:\n{out}\n{shown}"),
    )?;
    // Nothing placed: the lock-free view holds no record of it.
    ensure(
        ledger(c).share(id).is_none() && ledger(c).shares().next().is_none(),
        format!("a share was recorded:\n{}", state_text(c)),
    )?;
    let log = c.syslog();
    ensure(
        log.lines().any(|l| {
            l.contains("gpu-mps-prolog")
                && l.contains(&format!("job {id}: locks: "))
                && l.contains("the node's share ledger lock taken 0 times, waited ")
                && l.contains("given up 1 time")
        }),
        format!("syslog lacks the prolog's lock line for job {id}:\n{log}"),
    )?;
    not_drained(c)?;
    // The lock let go: the next share runs, placed in the ledger.
    drop(held);
    let next = start_shares(c, 1, 50)?;
    ensure(
        next.iter().all(|&j| ledger(c).share(j).is_some()),
        format!("share {next:?} runs unrecorded:\n{}", state_text(c)),
    )?;
    c.cancel_all()
}
