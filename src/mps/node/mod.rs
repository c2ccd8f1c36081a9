//! What happens on a GPU node for MPS shares, between the slurmd prolog,
//! the SPANK plugin in slurmstepd and the epilog.
//!
//! - `gpu-mps-prolog` ([`prolog`](fn@prolog)): classify the job from what Slurm put in
//!   its Prolog environment ([`JobEnv`]), place a share on the least-loaded
//!   GPU (or record a whole-GPU holder), start that GPU's MPS daemon. A
//!   share that cannot be placed is *refused*, not failed: a failing prolog
//!   drains the node, so the prolog writes a refusal note and the SPANK
//!   plugin fails the job with its text.
//! - SPANK `gpu_mps` ([`task_plan`]): read the placement, set each task's
//!   environment, confine its devices.
//! - `gpu-mps-epilog` ([`epilog`](fn@epilog)): release the job; stop a GPU's MPS
//!   daemon when its last share ends.
//!
//! # What a job holds, and who says so
//!
//! Only slurmd's own variables decide: `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`
//! (an mps allocation) and `SLURM_JOB_GPUS` (GPUs held whole) come from the
//! job's credential, which slurmctld signed. A job without the percentage
//! holds no share, whatever its SPANK environment says. The exact units the
//! job_submit plugin recorded (`SPANK_GPUSHARE_MPS_UNITS`) are used only
//! where they agree with Slurm's percentage: Slurm rounds it down, and on
//! 22.05 a unit is less than 1 %, so the percentage alone cannot tell 48
//! from 50 units.
//!
//! # Where each part lives
//!
//! - `setup`: the [`Node`] the programs open: the configuration in force,
//!   its GPU devices, its ledger with the views each transaction publishes.
//! - `trust`: what a job holds, from what slurmd vouches for ([`JobEnv`]).
//! - `running`: the jobs slurmctld runs here (`squeue`).
//! - `prolog`: a share placed (by gpushare or where Slurm put it), a
//!   whole-GPU holder recorded; `report`: what the prolog did, and the
//!   refusal it leaves; `serve`: the placed share's MPS daemon started and
//!   given its limits.
//! - `notes`: what the prolog and SPANK plugin leave beside the ledger for
//!   the job's steps (refusal, banner marker, running without MPS).
//! - `unconfigured`: a share refused where no configuration can be
//!   trusted (no StateDir known): its note beside the node's ledger
//!   pointer, its epilog that has nothing to release.
//! - `task`: what the SPANK plugin sets for each task.
//! - `epilog`: the job released, idle daemons stopped.
//! - `metrics_file`: the node's metrics file, rewritten under the ledger's
//!   lock; `share_usage`: each share's use of its GPU, sampled by the
//!   node timer (NVML through a child it runs), kept for that file.
//! - `modes`: a shared GPU's compute mode following its holders (given
//!   back to a job Slurm gave it whole, retried by the node timer).
//! - `mains`: what the prolog's and epilog's mains once decided (which
//!   of NVML's facts to ask, a refusal's mark, a mark's requeue, the
//!   exclusions taken back, a drain), for them only to order the calls;
//!   `facts_keys`: whether NVML's kept facts are fresh (boot, driver,
//!   GPUs and MIG instances as kept) or the prolog asks NVML again.
//! - `requeue`: a share refused here sent elsewhere by its epilog: the
//!   decisions (requeue or not, what to give back), on what `scontrol`
//!   showed and the node's record of what gpushare added.

mod epilog;
pub mod facts_keys;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod guide_words;
pub mod mains;
mod metrics_file;
mod modes;
mod notes;
mod prolog;
mod report;
pub mod requeue;
mod running;
mod selftest;
mod serve;
mod setup;
mod share_usage;
mod sick;
pub mod step_end;
pub mod step_guard;
mod task;
mod trust;
mod unconfigured;

pub use epilog::{
    epilog, epilog_with_cgroup, finish_deferred, stop_idle_daemons, stop_lingered_daemons,
    EpilogReport,
};
pub use metrics_file::{metrics_text, publish_metrics};
pub use modes::{follow_whole, retry_modes, wanted};
pub use notes::{claim_banner, private_record, refusal, unserved};
pub use prolog::prolog;
pub use report::{
    whole_gpus, PrologOutcome, PrologReport, BUSY_REFUSAL, MPS_DAEMON_REFUSAL, PRIVATE_REFUSAL,
    PRIVATE_SHARED_REFUSAL,
};
pub use running::{
    node_name, record_node_name, recorded_node_name, running_jobs, RunningJob, NODE_NAME_FILE,
    SQUEUE_TIMEOUT,
};
pub use selftest::{
    after_daemon_start, keep as keep_selftest, on_idle_gpu, Outcome as SelfTestOutcome,
    PROLOG_TIMEOUT as SELFTEST_PROLOG_TIMEOUT,
};
#[cfg(test)]
pub(crate) use setup::test_node;
pub use setup::{gpu_devices, hides_users, node_ledger, server_rule, Node, PipeGuard, Unfit};
pub use share_usage::{
    kept_usage, record_ended, sample_share_usage, share_figures, with_usage_lock, Accounting,
    Asked, KEPT_FILE as SHARE_USAGE_FILE,
};
pub use task::{
    framework_hints, memory_fraction, task_plan, unreachable_pipes, TaskMemory, TaskPlan,
    JAX_PREALLOCATION,
};
pub use trust::{count_mismatch, share_units, slurm_per_gpu, slurm_places, units_mismatch, JobEnv};
pub use unconfigured::{
    refuse_unconfigured, release_unconfigured, take_unconfigured_refusal, unconfigured_refusal,
};
