//! `gpu-qos why JOB`: one pending job explained in words and numbers.
//!
//! What it reads, all of it what any user may read, in a number of calls
//! that does not grow with the site's jobs: the job (`squeue -j`, one job
//! packed), its priority factors and the site's weights (`sprio -j`,
//! `sprio -w`), its association's fair share (`sshare -A -u`, filtered by
//! slurmctld),
//! `PriorityMaxAge` and `PriorityDecayHalfLife` (`scontrol show config`),
//! for a job behind others the QOS and GPUs of the partition's pending
//! jobs (`squeue -p -t PENDING`, one call), for a wait on free GPUs the
//! running jobs on the nodes it describes (`squeue -t RUNNING -w`, one
//! call; squeue reads every job for it),
//! and, for a job its QOS may preempt others for, the running jobs of the
//! QOS it may preempt (the users `scontrol show assoc_mgr` names, then
//! `squeue -u` each, as `gpu-qos usage` reads a group).
//!
//! Each of these reads is a query of [`super::slurm`], where its
//! arguments and its parser live; what is read for which job is decided
//! in [`super::gather`].
//!
//! What a preempted job's end means: when a job's QOS preempts another, the
//! victim gets `PreemptTime` (when it was signalled) and an `EndTime` of
//! `PreemptTime` plus its QOS's `GraceTime` (seen on 22.05, 24.11 and
//! 26.05); the waiting job can start once the victims on the nodes Slurm
//! chose for it (`SchedNodes`) are gone.
//!
//! - `facts`: everything the explanation works from.
//! - `explain`: the decision: which wait it is, and its one-line answer.
//! - `nodes`, `priority`, `reasons`: the details told for a wait on
//!   free GPUs, on priority and fair share, and for the other reasons
//!   Slurm gives (limits, requeues, holds).
//! - `words`: how times, factors and jobs are said.
//! - `report`: what `--json` prints, and the text.

mod explain;
mod facts;
mod nodes;
mod priority;
mod reasons;
mod report;
mod words;

#[cfg(test)]
mod fixtures;

pub use super::slurm::jobs::Job;
pub use super::slurm::priority::{Factors, Ranked};
pub use super::slurm::runs::Run;
pub use super::slurm::shares::ShareRow;

pub use explain::explain;
pub use facts::{preempt_list, Facts, Preempting};
pub use nodes::{candidate_nodes, NODES_SHOWN};
pub use priority::jobs_ahead;
pub use report::{render, WhyReport};
