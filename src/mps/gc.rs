//! `gpu-mps gc`: the node's ledger brought back in line with what
//! slurmctld runs. Records of jobs that ended without an epilog are
//! dropped, a lost state ends once every running share is in the ledger
//! again, and daemons left without a share are stopped (the node timer
//! stops those too: [`idle_daemons`]).

use std::collections::HashSet;
use std::fmt;

use super::daemon::MpsDaemon;
use super::ledger::{LedgerError, Record};
use super::node::{stop_idle_daemons, Node, RunningJob};

/// One thing gc did or found, as the admin reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GcNote {
    /// What the ledger's transaction says about itself (a repair, a view
    /// not published).
    Remark(String),
    Dropped(Record),
    /// Every record belongs to a job running on this node (its name).
    NothingToDrop(String),
    DaemonStopped(u32, MpsDaemon),
    LoadsKnownAgain,
    /// Running share jobs the ledger does not hold: the loads stay unknown.
    LoadsUnknown(Vec<u32>),
}

impl fmt::Display for GcNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Remark(remark) => write!(f, "note: {remark}"),
            Self::Dropped(record) => write!(f, "dropped: {record}"),
            Self::NothingToDrop(node) => write!(
                f,
                "nothing to drop: every record belongs to a job running on {node}"
            ),
            Self::DaemonStopped(gpu, outcome) => {
                write!(f, "GPU {gpu}: MPS daemon without a share: {outcome}")
            }
            Self::LoadsKnownAgain => {
                f.write_str("the GPU loads are known again: every running share is in the ledger")
            }
            Self::LoadsUnknown(jobs) => write!(
                f,
                "the GPU loads stay unknown: running share jobs {jobs:?} are not in the ledger; \
                 run gc again once they have ended"
            ),
        }
    }
}

/// Why gc stopped.
#[derive(Debug)]
pub enum GcError {
    /// slurmctld could not say which jobs run on the node: nothing dropped.
    Slurm {
        node: String,
        why: String,
    },
    Ledger(LedgerError),
}

impl fmt::Display for GcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Slurm { node, why } => write!(
                f,
                "cannot ask slurmctld which jobs run on {node:?}: nothing dropped: {why}"
            ),
            Self::Ledger(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for GcError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Slurm { .. } => None,
            // The ledger's error stands in for this one: its causes follow it.
            Self::Ledger(e) => e.source(),
        }
    }
}

impl From<LedgerError> for GcError {
    fn from(e: LedgerError) -> Self {
        Self::Ledger(e)
    }
}

/// Brings `node`'s ledger in line with the jobs `running` says run on the
/// node named `name` (the caller passes [`super::node::running_jobs`]),
/// telling `say` each step as it happens. Whether the GPU loads are known
/// at the end (`false`: a lost state some running share keeps unknown).
pub fn gc(
    node: &Node,
    name: &str,
    running: impl FnOnce(&str) -> Result<Vec<RunningJob>, String>,
    mut say: impl FnMut(GcNote),
) -> Result<bool, GcError> {
    let running = running(name).map_err(|why| GcError::Slurm {
        node: name.to_owned(),
        why,
    })?;
    let ids: HashSet<u32> = running.iter().map(|j| j.job).collect();
    let dropped = node.ledger.reconcile(|job| ids.contains(&job))?;
    for remark in dropped.remarks() {
        say(GcNote::Remark(remark));
    }
    let nothing = dropped.value.is_empty();
    for r in dropped.value {
        say(GcNote::Dropped(r));
    }
    if nothing {
        say(GcNote::NothingToDrop(name.to_owned()));
    }
    let rebuilt = node.ledger.rebuild(|state| {
        running
            .iter()
            .filter(|j| j.holds_mps && state.share(j.job).is_none())
            .map(|j| j.job)
            .collect()
    })?;
    let known = match rebuilt.value {
        Ok(false) => true,
        Ok(true) => {
            say(GcNote::LoadsKnownAgain);
            true
        }
        Err(jobs) => {
            say(GcNote::LoadsUnknown(jobs));
            false
        }
    };
    // After the rebuild: while the state stays lost, a daemon without a
    // record may serve a running share, and is kept.
    for (gpu, outcome) in stop_idle_daemons(node)? {
        say(GcNote::DaemonStopped(gpu, outcome));
    }
    Ok(known)
}

/// gc's stop of the daemons left without a share, as the node timer
/// (`gpu-mps metrics --write`) runs it each minute, a daemon kept for the
/// next share (`DaemonLinger=`) once its time is up: a daemon left idle (a
/// failed stop, a GPU's lock busy at its last share's end, a release left
/// to the ledger's next change) would keep its GPU in EXCLUSIVE_PROCESS,
/// where a job Slurm gives the GPU whole fails at CUDA start. Each stop
/// gives its GPU its earlier compute mode back. What happened, a line
/// each, for the log.
pub fn idle_daemons(node: &Node) -> Vec<String> {
    match super::node::stop_lingered_daemons(node) {
        Ok(stopped) => stopped
            .into_iter()
            .map(|(gpu, outcome)| GcNote::DaemonStopped(gpu, outcome).to_string())
            .collect(),
        Err(e) => vec![format!("MPS daemons without a share not stopped: {e}")],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mps::daemon::tests::daemon_left;
    use crate::mps::node::test_node;

    fn two_gpu_node() -> (Node, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let node = test_node(dir.path(), &["/dev/fake0", "/dev/fake1"]);
        (node, dir)
    }

    fn gc_said(node: &Node, running: Vec<RunningJob>) -> (Result<bool, String>, Vec<String>) {
        let mut said = Vec::new();
        let known = gc(node, "gpu01", |_| Ok(running), |n| said.push(n.to_string()));
        (known.map_err(|e| e.to_string()), said)
    }

    #[test]
    fn records_of_jobs_slurmctld_no_longer_runs_are_dropped() {
        let (node, _dir) = two_gpu_node();
        for job in [5, 6] {
            node.ledger
                .place(job, 1000, "alice", 50, 2, 100)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let running = vec![RunningJob {
            job: 5,
            holds_mps: true,
        }];
        let (known, said) = gc_said(&node, running.clone());
        assert_eq!(known, Ok(true));
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].starts_with("dropped: ") && said[0].contains('6'),
            "{said:?}"
        );
        let (known, said) = gc_said(&node, running);
        assert_eq!(known, Ok(true));
        assert_eq!(
            said,
            vec!["nothing to drop: every record belongs to a job running on gpu01"]
        );
    }

    #[test]
    fn nothing_is_dropped_when_slurmctld_cannot_be_asked() {
        let (node, _dir) = two_gpu_node();
        node.ledger
            .place(7, 1000, "alice", 50, 2, 100)
            .unwrap_or_else(|e| panic!("{e}"));
        let known = gc(&node, "gpu01", |_| Err("timed out".into()), |_| {});
        assert_eq!(
            known.map_err(|e| e.to_string()),
            Err(
                "cannot ask slurmctld which jobs run on \"gpu01\": nothing dropped: timed out"
                    .into()
            )
        );
        let kept = node.ledger.snapshot().map(|s| s.state.jobs().len());
        assert_eq!(kept.ok(), Some(1));
    }

    /// The node timer's run: the daemon left idle on GPU 1 is stopped and
    /// the GPU has its earlier mode back; GPU 0's, serving a share, is
    /// kept, exclusive; a second run finds nothing to do.
    #[test]
    fn the_timer_stops_idle_daemons_and_gives_their_modes_back() {
        let (mut node, dir) = two_gpu_node();
        let smi = crate::mps::compute_mode::tests::fake_smi(dir.path());
        node.cfg.mps_control = crate::mps::config::MpsControl::Program(smi);
        let placed = node.ledger.place(5, 1000, "alice", 50, 2, 100);
        assert_eq!(placed.ok().map(|p| p.value.share.gpu), Some(0));
        daemon_left(&node.cfg, 0);
        daemon_left(&node.cfg, 1);
        let mode = |gpu: u32| std::fs::read_to_string(dir.path().join(format!("mode-{gpu}")));
        let control = |gpu: u32| crate::mps::daemon::pipe_dir(&node.cfg, gpu).join("control");
        assert_eq!(
            idle_daemons(&node),
            vec!["GPU 1: MPS daemon without a share: stopped"]
        );
        assert_eq!(mode(1).ok().as_deref(), Some("DEFAULT\n"));
        assert_eq!(crate::mps::compute_mode::recorded(&node.cfg, 1), None);
        assert!(!control(1).exists() && control(0).exists());
        assert_eq!(mode(0).ok().as_deref(), Some("EXCLUSIVE_PROCESS\n"));
        assert!(idle_daemons(&node).is_empty());
    }
}
