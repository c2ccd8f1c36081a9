//! Everything the explanation works from, as the gatherer read it.

use serde::{Deserialize, Serialize};

use crate::qos::gres::AccountUse;
use crate::qos::site::{AuditQos, NodeInfo, PartitionInfo};
use crate::qos::slurm::jobs::Job;
use crate::qos::slurm::priority::{Factors, Ranked};
use crate::qos::slurm::runs::Run;
use crate::qos::slurm::shares::ShareRow;

/// A running job being preempted for the pending one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Preempting {
    pub job: Job,
    /// Its QOS's grace time, seconds.
    pub grace_s: Option<u64>,
}

/// Everything [`explain`](fn@super::explain) works from.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// This job's factors and the site's weights (`sprio`).
    pub factors: Option<Factors>,
    pub weights: Option<Factors>,
    /// The job's account and association (`sshare`).
    pub shares: Vec<ShareRow>,
    /// Running jobs of the QOS the job's QOS may preempt.
    pub preemptable: Vec<Job>,
    /// Every QOS (for `Preempt` lists and grace times).
    pub qos: Vec<AuditQos>,
    /// The pending jobs of the job's partition with their factors.
    pub ranked: Vec<Ranked>,
    /// The same jobs as `squeue` shows them (their QOS and GPUs).
    pub pending: Vec<Job>,
    /// `PriorityMaxAge`, `PriorityDecayHalfLife` as Slurm prints them.
    pub max_age: Option<String>,
    pub half_life: Option<String>,
    /// For a group-limit wait: `gpu-qos usage`'s sentence for the job.
    pub group_words: Option<String>,
    /// Earlier runs of a requeued job (`sacct -D`).
    pub runs: Vec<Run>,
    /// `JobFileAppend` (`scontrol show config`): whether a requeued job's
    /// output file is appended to (else each run truncates it, unless the
    /// job was submitted with `--open-mode=append`).
    pub file_append: Option<bool>,
    /// gpu_qos.conf's `LowPriorityQOS` (whose jobs gpu_qos submits in
    /// append mode); `None` where the file could not be read.
    pub low_priority_qos: Option<Vec<String>>,
    /// The cluster's nodes (`scontrol show node -o`): those of the job's
    /// partition with its GPU type are the ones that could run it.
    pub nodes: Vec<NodeInfo>,
    /// The job's partition (`scontrol show partition`): its billing weights.
    pub partition: Option<PartitionInfo>,
    /// Running jobs of the job's own group QOS (whose GPUs free up for it).
    pub group_running: Vec<Job>,
    /// For an account-limit wait: the typed GPU limits of the job's account
    /// and its parents, with what every job under each holds.
    pub account_limits: Vec<AccountUse>,
    /// For a wait on free GPUs: the running jobs on the nodes described
    /// ([`super::candidate_nodes`]) that Slurm shows the caller; `None`
    /// where they were not read.
    pub running_on_nodes: Option<Vec<Job>>,
    /// Whether `PrivateData` hides other users' jobs from the caller.
    pub jobs_private: bool,
}

/// The QOS `qos` may preempt (its `Preempt` list).
pub fn preempt_list(all: &[AuditQos], qos: &str) -> Vec<String> {
    all.iter()
        .find(|q| q.name().eq_ignore_ascii_case(qos))
        .map(|q| q.record.preempt.clone())
        .unwrap_or_default()
}
