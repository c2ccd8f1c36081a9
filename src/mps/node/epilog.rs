//! The epilog's logic for a job: its MPS clients ended, its records
//! released, its GPUs' daemons stopped or their limits lowered; and the
//! daemons of GPUs left without a share stopped (`gpu-mps gc`).

use super::modes::follow_whole;
use super::notes::forget_notes;
use super::setup::{guard_pipes, Node};
use crate::mps::config;
use crate::mps::daemon::{self, MpsDaemon};
use crate::mps::ledger::{LedgerError, Record};
use crate::mps::private;

/// What the epilog did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpilogReport {
    /// The job's MPS clients its GPU's daemon was asked to terminate:
    /// `(gpu, server, client)`.
    pub terminated: Vec<(u32, u32, u32)>,
    pub released: Vec<Record>,
    /// MPS daemons stopped because their GPU has no share left.
    pub stopped: Vec<(u32, MpsDaemon)>,
    /// A repaired state, worth a log line.
    pub notes: Vec<String>,
    /// The ledger stayed locked for the whole wait: the release is left to
    /// its next change (this marker, see `ledger`), nothing is released yet.
    pub deferred: Option<std::path::PathBuf>,
}

/// Releases `job` (idempotent: a second run releases nothing).
pub fn epilog(node: &Node, job: u32) -> Result<EpilogReport, LedgerError> {
    epilog_with_cgroup(node, job, None)
}

/// [`epilog`], where the job's cgroup may also be named by its SLUID
/// (`SLURM_JOB_SLUID`: Slurm 26.05's cgroup/v2 names it so by default),
/// so that its MPS clients are found there. A ledger still locked when
/// the program's wait runs out loses no release: it is left to the
/// ledger's next change ([`EpilogReport::deferred`]); only a marker that
/// cannot be written is an error (the node then drains).
pub fn epilog_with_cgroup(
    node: &Node,
    job: u32,
    sluid: Option<&str>,
) -> Result<EpilogReport, LedgerError> {
    let mut report = EpilogReport::default();
    let wait = node.ledger.lock_wait();
    // The state as the job's prolog left it: only this epilog takes the
    // job's records away, so one read without the lock that shows none
    // means there is nothing to release (a CPU job, a share refused
    // unplaced), and no lock to wait for.
    let seen = node.ledger.snapshot().ok().map(|s| s.state);
    if let Some(state) = &seen {
        if state.share(job).is_none() && state.whole_holder(job).is_none() {
            forget_notes(&node.ledger, job);
            return Ok(report);
        }
    }
    // A job's own MPS daemons (--gpu-mps=private) end with it: each step
    // stopped its own; whatever is left is killed here.
    if let Some(record) = private::read_record(node.ledger.dir(), job) {
        report
            .notes
            .extend(private::clean_up(&node.cfg, job, record.uid));
    }
    // What MPS still runs for the job ends before its units are released
    // (nothing to ask where the site runs MPS itself).
    let gpu = (node.cfg.mps_control != config::MpsControl::Disabled)
        .then(|| seen.as_ref()?.share(job).map(|share| share.gpu))
        .flatten();
    if let Some(gpu) = gpu {
        let ended = daemon::with_gpu_lock(&node.cfg, gpu, wait, || {
            daemon::terminate_clients(&node.cfg, gpu, job, sluid)
        });
        match ended {
            Ok(done) => {
                report.notes.extend(done.problems.into_iter().map(|p| {
                    format!("GPU {gpu}: job {job}'s MPS clients not all terminated: {p}")
                }));
                let clients = done.clients.into_iter().map(|(s, c)| (gpu, s, c));
                report.terminated.extend(clients);
            }
            Err(e) => report.notes.push(format!(
                "GPU {gpu}: job {job}'s MPS clients not terminated: {e}"
            )),
        }
    }
    let out = match node.ledger.release(job) {
        Ok(out) => out,
        Err(LedgerError::Busy(busy)) => {
            let marker = node.ledger.defer_release(job, seen.as_ref())?;
            forget_notes(&node.ledger, job);
            report.notes.push(format!(
                "{busy}: job {job}'s release is left to the ledger's next change ({}), which \
                 makes it before its own: by the next job that starts or ends here, the node \
                 timer or `gpu-mps gc`",
                marker.display()
            ));
            report.deferred = Some(marker);
            return Ok(report);
        }
        Err(e) => return Err(e),
    };
    forget_notes(&node.ledger, job);
    // Records other epilogs left to this change are released too (the
    // remarks say so); their GPUs are left to the next share's end there
    // or the node timer (stop_idle_daemons), so that this epilog's time
    // stays its own job's.
    report.notes.extend(out.remarks());
    report.stopped = after_release(node, &out.value, &mut report.notes)?;
    report.released = out.value;
    Ok(report)
}

/// What follows the release of `records`: each GPU that lost a share has
/// its daemon stopped (no share left) or its limits lowered, each GPU held
/// whole its mode settled; the daemons stopped.
fn after_release(
    node: &Node,
    records: &[Record],
    notes: &mut Vec<String>,
) -> Result<Vec<(u32, MpsDaemon)>, LedgerError> {
    let wait = node.ledger.lock_wait();
    let mut stopped = Vec::new();
    let gpus: std::collections::BTreeSet<u32> = records
        .iter()
        .filter_map(|r| match r {
            Record::Share(s) => Some(s.gpu),
            _ => None,
        })
        .collect();
    for gpu in gpus {
        // Under the GPU's daemon lock, from the ledger as it is then: a
        // share placed meanwhile keeps its daemon.
        let locked = daemon::with_gpu_lock(&node.cfg, gpu, wait, || -> Result<(), LedgerError> {
            let state = node.ledger.snapshot()?.state;
            if crate::mps::programs::program(&node.cfg).is_some() {
                guard_pipes(node, &state, gpu, notes);
            }
            let left = state.shares().filter(|o| o.gpu == gpu);
            match daemon::server_limits(&node.cfg, node.gpu_memory_mib, left) {
                None => stopped.push((
                    gpu,
                    daemon::stop_or_keep(&node.cfg, gpu, super::share_usage::unix_now()),
                )),
                // The largest share may have left: the server's limits follow.
                Some(limits) => {
                    if let Err(e) = daemon::apply_limits(&node.cfg, gpu, limits, None, None) {
                        notes.push(format!(
                            "GPU {gpu}'s MPS limits could not be lowered on its daemon: {e}"
                        ));
                    }
                }
            }
            Ok(())
        });
        match locked {
            Ok(result) => result?,
            Err(e) => notes.push(format!(
                "GPU {gpu}'s MPS daemon left as it is (the node timer, gpu-mps metrics \
                 --write, stops it once idle): {e}"
            )),
        }
    }
    // A GPU Slurm gave a job whole beside shares: exclusive again for the
    // shares still there (node/modes.rs).
    let held: Vec<u32> = records
        .iter()
        .filter_map(|r| match r {
            Record::Whole(w) => Some(w.gpus.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    notes.extend(follow_whole(node, &held));
    Ok(stopped)
}

/// The releases epilogs left to the ledger's next change, made now, and
/// followed up as an epilog does (the node timer: a node where no job
/// starts or ends would keep them). What happened, a line each.
pub fn finish_deferred(node: &Node) -> Result<Vec<String>, LedgerError> {
    let released = node.ledger.finish_deferred()?;
    let mut lines: Vec<String> = released
        .iter()
        .map(|r| format!("released, for its epilog that found the ledger locked: {r}"))
        .collect();
    for (gpu, outcome) in after_release(node, &released, &mut lines)? {
        lines.push(format!(
            "GPU {gpu} has no share left; MPS daemon: {outcome}"
        ));
    }
    Ok(lines)
}

/// Stops the daemons of GPUs without a share (left by a crash, a node
/// whose epilog never ran, a release left to the ledger's next change, a
/// GPU's lock busy at its last share's end), which gives each GPU its
/// earlier compute mode back; their GPUs and outcomes. Each GPU is decided
/// as the epilog decides, under its daemon lock and from the ledger as it
/// is then ([`daemon::stop_if_idle`]): a share placed meanwhile keeps its
/// daemon. Run by `gpu-mps gc`, `disable` and the node timer.
pub fn stop_idle_daemons(node: &Node) -> Result<Vec<(u32, MpsDaemon)>, LedgerError> {
    stop_idle_daemons_when(node, |_| true)
}

/// [`stop_idle_daemons`] as the node timer runs it: a daemon kept after
/// its GPU's last share stays until its `DaemonLinger=` time is up.
pub fn stop_lingered_daemons(node: &Node) -> Result<Vec<(u32, MpsDaemon)>, LedgerError> {
    let now = super::share_usage::unix_now();
    stop_idle_daemons_when(node, |gpu| daemon::linger_over(&node.cfg, gpu, now))
}

fn stop_idle_daemons_when(
    node: &Node,
    due: impl Fn(u32) -> bool,
) -> Result<Vec<(u32, MpsDaemon)>, LedgerError> {
    let cfg = &node.cfg;
    let mut stopped = Vec::new();
    // A cheap first look, without a lock: a GPU with shares keeps its
    // daemon, and most GPUs have none at all (one look through /proc for
    // a daemon whose control pipe is gone, made only where one ran).
    let seen = node.ledger.snapshot().ok().map(|s| s.state);
    let strays = !daemon::processes_under(&daemon::public_dir(cfg)).is_empty();
    for gpu in 0..node.gpu_count {
        let pipe = daemon::pipe_dir(cfg, gpu);
        if seen.as_ref().is_some_and(|state| !daemon::idle(state, gpu))
            || !(pipe.join("control").exists() || strays && daemon::present(cfg, gpu))
            || !due(gpu)
        {
            continue;
        }
        let wait = node.ledger.lock_wait();
        let locked = daemon::with_gpu_lock(cfg, gpu, wait, || -> Result<_, LedgerError> {
            Ok(daemon::stop_if_idle(
                cfg,
                &node.ledger.snapshot()?.state,
                gpu,
            ))
        });
        match locked {
            Ok(result) => stopped.extend(result?.map(|outcome| (gpu, outcome))),
            Err(e) => stopped.push((gpu, MpsDaemon::Failed(format!("left as it is: {e}")))),
        }
    }
    Ok(stopped)
}

#[cfg(test)]
mod tests {
    use super::super::setup::tests::temp_node;
    use super::*;
    use crate::mps::config::MpsControl;
    use crate::mps::lock_wait::LockWait;
    use std::fs;
    use std::path::PathBuf;
    use std::time::Duration;

    #[test]
    fn an_idle_daemon_is_stopped_only_under_its_lock_from_a_fresh_ledger() {
        let (mut node, dir) = temp_node(Some(1600));
        // A control program that answers every call (`quit` included).
        node.cfg.mps_control = MpsControl::Program(PathBuf::from("/bin/true"));
        let control = |gpu: u32| daemon::pipe_dir(&node.cfg, gpu).join("control");
        for gpu in [0, 1] {
            let pipe = daemon::pipe_dir(&node.cfg, gpu);
            fs::create_dir_all(&pipe).unwrap_or_else(|e| panic!("{e}"));
            fs::write(control(gpu), "").unwrap_or_else(|e| panic!("{e}"));
        }
        // A prolog holds GPU 0's lock while it places a share there (the
        // least-loaded GPU of an empty node): the cleanup waits for it and
        // then sees the share.
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let stopped = std::thread::scope(|scope| {
            let prolog = scope.spawn(|| {
                daemon::with_gpu_lock(&node.cfg, 0, LockWait::default(), || {
                    let _ = held_tx.send(());
                    std::thread::sleep(Duration::from_millis(300));
                    node.ledger.place(7, 1000, "alice", 100, 4, 100)
                })
            });
            let _ = held_rx.recv();
            let stopped = stop_idle_daemons(&node).unwrap_or_else(|e| panic!("{e}"));
            let placed = prolog.join().ok().and_then(Result::ok).and_then(Result::ok);
            assert_eq!(placed.map(|p| p.value.share.gpu), Some(0));
            stopped
        });
        assert_eq!(
            stopped.iter().map(|(gpu, _)| *gpu).collect::<Vec<_>>(),
            vec![1],
            "only the idle GPU's daemon is stopped: {stopped:?}"
        );
        assert!(control(0).exists() && !control(1).exists());
        drop(dir);
    }
}
