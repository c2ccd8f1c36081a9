//! The records of the ledger (a job's share, a job holding GPUs whole)
//! and the state they make up, with what every reader and writer asks of
//! it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// One job's MPS share on one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShareRecord {
    pub job: u32,
    pub uid: u32,
    pub user: String,
    /// The GPU's index on the node.
    pub gpu: u32,
    pub units: u32,
    /// When the share was placed, in Unix seconds.
    pub since: u64,
    /// Slurm chose the GPU (and confines the job to it), not gpushare.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub placed_by_slurm: bool,
    /// The share's device memory limit in MiB, set by the prolog after
    /// placement (`None`: none, or not known yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// MPS clients the job runs on its GPU: its largest step's tasks on
    /// this node, set by the SPANK plugin when a step starts (`None`: no
    /// step yet, counted as 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients: Option<u32>,
    /// The job's SLUID as slurmd gave it to the prolog (`SLURM_JOB_SLUID`,
    /// Slurm 26.05 and later): how cgroup/v2 names the job's cgroup there,
    /// which the node timer maps the share's processes by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sluid: Option<String>,
}

impl ShareRecord {
    /// The MPS clients this share counts for.
    pub fn client_count(&self) -> u32 {
        self.clients.unwrap_or(1).max(1)
    }
}

/// A job holding GPUs whole (gpu GRES), as named by its Prolog environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WholeRecord {
    pub job: u32,
    /// Indices on the node, ascending, without repeats, never empty.
    pub gpus: Vec<u32>,
    /// When the holder was recorded, in Unix seconds.
    pub since: u64,
}

/// Why the GPU loads of the node are unknown, and since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lost {
    pub since: u64,
    pub reason: String,
}

/// Either kind of record, as released or reconciled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Share(ShareRecord),
    Whole(WholeRecord),
}

impl Record {
    pub fn job(&self) -> u32 {
        match self {
            Self::Share(share) => share.job,
            Self::Whole(whole) => whole.job,
        }
    }
}

/// One line per record, for the prolog's, epilog's and `gc`'s logs.
impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Share(s) => write!(
                f,
                "share job={} user={} (uid {}) gpu={} units={} since={}",
                s.job, s.user, s.uid, s.gpu, s.units, s.since
            ),
            Self::Whole(w) => write!(f, "whole job={} gpus={:?} since={}", w.job, w.gpus, w.since),
        }
    }
}

/// The whole sharing state of the node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerState {
    pub(super) shares: BTreeMap<u32, ShareRecord>,
    pub(super) whole: BTreeMap<u32, WholeRecord>,
    pub(super) lost: Option<Lost>,
}

impl LedgerState {
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty state whose GPU loads are unknown.
    pub fn lost(reason: String) -> Self {
        Self {
            lost: Some(Lost {
                since: unix_now(),
                reason,
            }),
            ..Self::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.shares.is_empty() && self.whole.is_empty() && self.lost.is_none()
    }

    /// Why the GPU loads are unknown, while they are.
    pub fn lost_reason(&self) -> Option<&Lost> {
        self.lost.as_ref()
    }

    /// The share of `job`, if it has one: how a later step finds its GPU.
    pub fn share(&self, job: u32) -> Option<&ShareRecord> {
        self.shares.get(&job)
    }

    pub fn whole_holder(&self, job: u32) -> Option<&WholeRecord> {
        self.whole.get(&job)
    }

    /// Shares in job order.
    pub fn shares(&self) -> impl Iterator<Item = &ShareRecord> {
        self.shares.values()
    }

    /// Whole-GPU holders in job order.
    pub fn whole_holders(&self) -> impl Iterator<Item = &WholeRecord> {
        self.whole.values()
    }

    /// Every job with a record, ascending.
    pub fn jobs(&self) -> BTreeSet<u32> {
        self.shares
            .keys()
            .chain(self.whole.keys())
            .copied()
            .collect()
    }

    /// Adds or replaces the share of `share.job`; returns the one replaced.
    pub fn insert_share(&mut self, share: ShareRecord) -> Option<ShareRecord> {
        self.shares.insert(share.job, share)
    }

    /// Adds or replaces the whole-GPU record of `whole.job`, keeping its GPU
    /// list ascending and without repeats; returns the one replaced.
    pub fn insert_whole(&mut self, mut whole: WholeRecord) -> Option<WholeRecord> {
        whole.gpus.sort_unstable();
        whole.gpus.dedup();
        self.whole.insert(whole.job, whole)
    }

    /// Removes every record of `job` (share first, then whole).
    pub fn remove_job(&mut self, job: u32) -> Vec<Record> {
        let share = self.shares.remove(&job).map(Record::Share);
        let whole = self.whole.remove(&job).map(Record::Whole);
        share.into_iter().chain(whole).collect()
    }
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

/// A GPU index as a position in a per-GPU table. `u32` always fits `usize`
/// on the 64-bit targets Slurm runs on; saturating keeps other targets safe.
pub(super) fn index(gpu: u32) -> usize {
    usize::try_from(gpu).unwrap_or(usize::MAX)
}
