//! What the prolog did ([`PrologReport`]): its outcome for the job, what
//! it noticed on the way, what the metrics count of it; and the refusal
//! note a share that cannot run here leaves for the SPANK plugin.

use super::notes::refusal_name;
use super::trust::JobEnv;
use crate::mps::daemon::MpsDaemon;
use crate::mps::ledger::{Ledger, Record, ShareRecord};
use crate::mps::metrics::Event;
use crate::mps::private::PrivateRecord;
use crate::mps::state_dir;

/// What the prolog did, for its log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrologOutcome {
    /// Not a GPU job: nothing recorded.
    Untouched,
    /// A share placed (or found placed by an earlier prolog run).
    Placed {
        share: ShareRecord,
        already: bool,
        mps: MpsDaemon,
    },
    /// A share that cannot run here; the SPANK plugin fails the job with
    /// `text`. `reason` is what the metrics count it as (see
    /// [`PlacementError::reason`](crate::mps::placement::PlacementError::reason)).
    Refused { reason: &'static str, text: String },
    /// A whole-GPU job recorded; shares already on its GPUs are listed (an overlap Slurm created).
    Whole {
        gpus: Vec<u32>,
        overlapping: Vec<ShareRecord>,
        /// `--gpu-mps=private`: the record of the job's own MPS daemon.
        private: Option<PrivateRecord>,
    },
}

/// The refusal reason of a job whose `--gpu-mps=private` cannot be had.
pub const PRIVATE_REFUSAL: &str = "private";

/// The refusal reason of a `--gpu-mps=private` job given a GPU a share
/// holds: the node's state, which another node, or this one later, may
/// not have (`Elsewhere::SharedGpu`).
pub const PRIVATE_SHARED_REFUSAL: &str = "private_shared";

/// The refusal reason of a share whose GPU's MPS daemon could not serve it.
pub const MPS_DAEMON_REFUSAL: &str = "mps_daemon";

/// The refusal reason of a job whose prolog's wait for a lock ran out.
pub const BUSY_REFUSAL: &str = "busy";

/// The refusal of a job whose prolog waited for `busy` in vain: it is
/// never placed or recorded without the lock.
pub fn busy_refusal(busy: &crate::mps::lock_wait::Busy) -> String {
    format!(
        "{busy}, so the job is refused rather than started without the node's share records \
         in order (a gpushare program or an admin hung holding it); a batch job is requeued \
         to run elsewhere"
    )
}

/// What the counters see of such a refusal.
static DAEMON_FAILED: MpsDaemon = MpsDaemon::Failed(String::new());

/// Result of the prolog: the outcome, plus what it noticed on the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrologReport {
    pub outcome: PrologOutcome,
    /// Records dropped by reconciliation (jobs no longer running here).
    pub dropped: Vec<Record>,
    /// Anything an admin should know (a repaired state, a count mismatch).
    pub notes: Vec<String>,
}

impl PrologReport {
    /// What the metrics count of this prolog (see [`publish_metrics`](super::publish_metrics)).
    pub fn events(&self) -> Vec<Event<'_>> {
        let mut events = Vec::new();
        if !self.dropped.is_empty() {
            events.push(Event::Dropped(self.dropped.len()));
        }
        match &self.outcome {
            PrologOutcome::Placed {
                share,
                already: false,
                mps,
            } => {
                events.push(Event::Placed {
                    by_slurm: share.placed_by_slurm,
                });
                events.push(Event::Daemon(mps));
            }
            PrologOutcome::Placed { mps, .. } => events.push(Event::Daemon(mps)),
            PrologOutcome::Refused { reason, .. } => {
                events.push(Event::Refused(reason));
                // Its GPU's daemon failed: counted as such too.
                if *reason == MPS_DAEMON_REFUSAL {
                    events.push(Event::Daemon(&DAEMON_FAILED));
                }
            }
            PrologOutcome::Untouched | PrologOutcome::Whole { .. } => {}
        }
        events
    }
}

/// What a user whose share this node refused can ask for instead: `count`
/// whole GPUs of this node's type (`types`: [`MpsBooking::gpu_types`]),
/// always typed, since an untyped request is refused under a group QOS.
///
/// [`MpsBooking::gpu_types`]: crate::shared::booking::MpsBooking::gpu_types
pub fn whole_gpus(types: &[String], count: u32, node: &str) -> String {
    match types {
        [] => format!(
            "--gres=gpu:TYPE:{count}, TYPE this node's GPU type (`scontrol show node {node}` \
             shows it in Gres=)"
        ),
        types => types
            .iter()
            .map(|t| format!("--gres=gpu:{t}:{count}"))
            .collect::<Vec<_>>()
            .join(" or "),
    }
}

/// Leaves the refusal note the SPANK plugin fails `env`'s job with: the
/// job, the node (a job on several nodes must say which one refused) and why.
pub(super) fn refuse(
    ledger: &Ledger,
    env: &JobEnv,
    reason: &'static str,
    why: impl std::fmt::Display,
) -> PrologOutcome {
    let text = format!("gpu_mps: job {} on node {}: {why}", env.job, env.node);
    let text =
        match state_dir::replace_file(ledger.dir(), &refusal_name(env.job), text.as_bytes(), 0o600)
        {
            Ok(()) => text,
            Err(e) => format!("{text} (and the refusal note could not be written: {e})"),
        };
    PrologOutcome::Refused { reason, text }
}
