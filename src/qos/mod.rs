//! The typed-GPU QOS half: Slurm's typed `GrpTRES` limits are enforced only
//! when a job names the GPU type, so `job_submit/gpu_qos` refuses GPU jobs
//! under a group QOS that do not, and says what to type instead.
//!
//! - [`gres`]: the GPU requests in a job description, in every spelling
//!   Slurm releases use (`gres:gpu:a40:2`, `gres/gpu:a40=1`, ...), and
//!   the GPUs of a TRES string by type, in words.
//! - [`config`]: `gpu_qos.conf`, which QOS may use which types.
//! - [`policy`]: the decision for a submission or an update, and the words
//!   the user reads.
//! - [`replay`]: the policy run over the jobs accounting recorded
//!   (`gpu-qos replay`).
//! - [`advise`]: what ended jobs used of their GPUs or shares, and the
//!   size each should ask for (`gpu-qos advise`).
//! - [`submit_line`]: what a user typed (a `SubmitLine`, a batch script's
//!   `#SBATCH` lines) read as options: for replay, and for the plugin to
//!   echo a request in the user's own spelling.
//! - [`check`]: `gpu_qos.conf` compared with the accounting database
//!   (`gpu-qos check`).
//! - [`site`]: what Slurm says about the site (`scontrol show config`,
//!   `sacctmgr`, nodes, partitions), read leniently for the audit.
//! - [`audit`]: the whole QOS/preemption/priority chain, link by link
//!   (`gpu-qos audit`).
//! - [`explain`]: the same site told in plain words and as the users' QOS
//!   table (`gpu-qos audit --explain`, `--markdown`).
//! - [`metrics`]: group QOS usage and the plugin's decisions for Prometheus.
//! - [`usage`]: a user's group QOS, the GPUs held against the limit and why
//!   the group's jobs wait (`gpu-qos usage`).
//! - [`slurm`]: every read of Slurm, a typed query with its parser;
//!   [`slurm::Live`] runs them, [`slurm::Recorded`] answers from recorded
//!   fixtures.
//! - [`gather`]: what each `gpu-qos` command reads, through a
//!   [`slurm::SlurmRead`].
//! - [`why`]: one pending job explained: priority and fair share, free
//!   GPUs, preemption under way (`gpu-qos why`).

pub mod advise;
pub mod audit;
pub mod check;
pub mod config;
pub mod explain;
pub mod gather;
pub mod gres;
pub mod metrics;
pub mod policy;
pub mod replay;
pub mod site;
pub mod slurm;
pub mod submit_line;
pub mod tres_read;
pub mod usage;
pub mod why;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod advice_accepted;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod words_agree;
