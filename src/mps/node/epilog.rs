//! The epilog's logic for a job: its MPS clients ended, its records
//! released, its GPUs' daemons stopped or their limits lowered; and the
//! daemons of GPUs left without a share stopped (`gpu-mps gc`).

use super::modes::follow_whole;
use super::notes::forget_notes;
use super::setup::{guard_pipes, Node};
use crate::mps::config;
use crate::mps::daemon::{self, MpsDaemon};
use crate::mps::ledger::{LedgerError, Record};

/// What the epilog did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpilogReport {
    /// The job's MPS clients its GPU's daemon was asked to terminate:
    /// `(gpu, server, client)`.
    pub terminated: Vec<(u32, u32, u32)>,
    pub released: Vec<Record>,
    /// MPS daemons stopped because their GPU has no share left.
    pub stopped: Vec<(u32, MpsDaemon)>,
    /// A repaired state, worth a log line.
    pub notes: Vec<String>,
}

/// Releases `job` (idempotent: a second run releases nothing).
pub fn epilog(node: &Node, job: u32) -> Result<EpilogReport, LedgerError> {
    epilog_with_cgroup(node, job, None)
}

/// [`epilog`], where the job's cgroup may also be named by its SLUID
/// (`SLURM_JOB_SLUID`: Slurm 26.05's cgroup/v2 names it so by default),
/// so that its MPS clients are found there.
pub fn epilog_with_cgroup(
    node: &Node,
    job: u32,
    sluid: Option<&str>,
) -> Result<EpilogReport, LedgerError> {
    let mut notes = Vec::new();
    let mut terminated = Vec::new();
    // What MPS still runs for the job ends before its units are released
    // (nothing to ask where the site runs MPS itself).
    let gpu = (node.cfg.mps_control != config::MpsControl::Disabled)
        .then(|| node.ledger.snapshot().ok())
        .flatten()
        .and_then(|s| s.state.share(job).map(|share| share.gpu));
    if let Some(gpu) = gpu {
        let ended = daemon::with_gpu_lock(&node.cfg, gpu, || {
            daemon::terminate_clients(&node.cfg, gpu, job, sluid)
        });
        match ended {
            Ok(done) => {
                notes.extend(done.problems.into_iter().map(|p| {
                    format!("GPU {gpu}: job {job}'s MPS clients not all terminated: {p}")
                }));
                terminated.extend(done.clients.into_iter().map(|(s, c)| (gpu, s, c)));
            }
            Err(e) => notes.push(format!(
                "GPU {gpu}: job {job}'s MPS clients not terminated: {e}"
            )),
        }
    }
    let out = node.ledger.release(job)?;
    forget_notes(&node.ledger, job);
    let mut stopped = Vec::new();
    notes.extend(out.remarks());
    let gpus: std::collections::BTreeSet<u32> = out
        .value
        .iter()
        .filter_map(|r| match r {
            Record::Share(s) => Some(s.gpu),
            _ => None,
        })
        .collect();
    for gpu in gpus {
        // Under the GPU's daemon lock, from the ledger as it is then: a
        // share placed meanwhile keeps its daemon.
        let locked = daemon::with_gpu_lock(&node.cfg, gpu, || -> Result<(), LedgerError> {
            let state = node.ledger.snapshot()?.state;
            if crate::mps::programs::program(&node.cfg).is_some() {
                guard_pipes(node, &state, gpu, &mut notes);
            }
            let left = state.shares().filter(|o| o.gpu == gpu);
            match daemon::server_limits(&node.cfg, node.gpu_memory_mib, left) {
                None => stopped.push((gpu, daemon::stop(&node.cfg, gpu))),
                // The largest share may have left: the server's limits follow.
                Some(limits) => {
                    if let Err(e) = daemon::apply_limits(&node.cfg, gpu, limits, None) {
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
            Err(e) => notes.push(format!("GPU {gpu}'s MPS daemon left as it is: {e}")),
        }
    }
    // A GPU Slurm gave this job whole beside shares: exclusive again for
    // the shares still there (node/modes.rs).
    let held: Vec<u32> = out
        .value
        .iter()
        .filter_map(|r| match r {
            Record::Whole(w) => Some(w.gpus.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    notes.extend(follow_whole(node, &held));
    Ok(EpilogReport {
        terminated,
        released: out.value,
        stopped,
        notes,
    })
}

/// Stops the daemons of GPUs without a share (left by a crash, or by a
/// node whose epilog never ran); their GPUs and outcomes. Each GPU is
/// decided as the epilog decides, under its daemon lock and from the
/// ledger as it is then: a share placed meanwhile keeps its daemon.
pub fn stop_idle_daemons(node: &Node) -> Result<Vec<(u32, MpsDaemon)>, LedgerError> {
    let mut stopped = Vec::new();
    for gpu in 0..node.gpu_count {
        let pipe = daemon::pipe_dir(&node.cfg, gpu);
        // A cheap first look: most GPUs have no daemon at all.
        if !pipe.join("control").exists() && daemon::processes(&pipe).is_empty() {
            continue;
        }
        let locked = daemon::with_gpu_lock(&node.cfg, gpu, || -> Result<_, LedgerError> {
            let state = node.ledger.snapshot()?.state;
            Ok(if state.shares().any(|s| s.gpu == gpu) {
                None
            } else {
                Some(daemon::stop(&node.cfg, gpu))
            })
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
                daemon::with_gpu_lock(&node.cfg, 0, || {
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
