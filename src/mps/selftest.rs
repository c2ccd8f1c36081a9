//! The MPS self-test's judgement: what a CUDA client on a GPU that shares
//! saw (the probe, `node/src/cuda_probe.rs`, which loads the driver's
//! library in a process of its own), held against what the share it stood
//! for should get.
//!
//! Two clients run on each GPU, as the same unprivileged user:
//!
//! - the *bypass* client, without any `CUDA_MPS_*` variable: it reads the
//!   GPU's own SM count and memory (device attributes need no context),
//!   then tries a context, which the driver must refuse while the GPU is
//!   `EXCLUSIVE_PROCESS` and its MPS server holds it;
//! - the *share* client, with exactly a share's environment: the SMs CUDA
//!   gives it and those its kernel really runs on (the distinct `%smid` of
//!   its blocks) must match the share's thread percentage, an allocation of
//!   half its memory limit must succeed and one over it fail.
//!
//! SMs are handed out by TPC (two SMs) on the GPUs MPS limits, so a count
//! within [`SM_SLACK`] of the percentage's share passes: a 25 % client of a
//! 132-SM GPU gets 32, not 33.

mod judge;
pub mod record;
mod run;

pub use judge::{
    allocations, judge, ptx, report_rows, Allocation, Expected, Seen, Verdict, KERNEL, PTX_TARGETS,
    PTX_TEMPLATE, SM_SLACK,
};
pub use run::{
    bypass_env, check_gpu, run_client, share_env, user, GpuCheck, ProbeUser, CLIENT_TIMEOUT,
    PROBE_OPTION,
};
