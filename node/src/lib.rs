//! The code gpushare runs on GPU nodes as root: what `gpu-mps-prolog`,
//! `gpu-mps-epilog` (in `prolog/` and `epilog/`) and the node timer
//! (`gpu-mps metrics --write`, in `admin/`) share. Each module runs commands or
//! loads libraries the core decides on; the decisions are the core's
//! (`gpushare::mps`), or pure functions here with their unit tests.
//!
//! - [`node_program`]: the prolog's and epilog's command lines and start
//!   (configuration found, logging, the node's ledger opened);
//! - [`node_log`]: syslog under the program's name;
//! - [`nvml`], [`nvml_usage`]: NVML loaded at run time, asked in a child
//!   process of the program's own within a deadline;
//! - [`gpu_facts`]: NVML's facts as the prolog takes them for a share;
//! - [`cuda_probe`]: the CUDA client of SelfTest=daemon-start and of
//!   `gpu-mps selftest`, in a child process;
//! - [`acl`]: the ACL that lets a job's user reach the MPS pipes;
//! - [`requeue`]: a share refused here sent elsewhere, and the exclusions
//!   taken back (Slurm's commands the core's `mps::node::requeue` orders);
//! - [`usage_record`]: an ended job's GPU figures recorded in Slurm;
//! - [`worst_case`]: the longest a prolog and an epilog can run;
//! - [`node_setup`]: the node's facts `gpu-mps config` makes its lines
//!   from;
//! - [`node_status`]: `gpu-mps status`'s view, with what NVML adds;
//!   [`health_check`]: `gpu-mps health`, that view's verdict and Slurm's
//!   drain or resume;
//! - [`timer`]: the node timer's pass (`gpu-mps metrics --write`), its
//!   steps in order;
//! - [`sharing_off`]: `gpu-mps disable` and `enable`, in the order that
//!   leaves nothing of gpushare's behind;
//! - [`step_guard`]: `gpu-mps-epilog step-guard`, started by the SPANK
//!   plugin beside each share's step: its signals and waits.
//!
//! A crate of its own, apart from the admin commands (`gpushare-admin`),
//! so that what runs in slurmd's prolog and epilog is one short list of
//! code; no Slurm plugin links it.

pub mod acl;
pub mod cuda_probe;
pub mod gpu_facts;
pub mod health_check;
pub mod node_log;
pub mod node_program;
pub mod node_setup;
pub mod node_status;
pub mod nvml;
pub mod nvml_usage;
pub mod requeue;
pub mod sharing_off;
pub mod step_guard;
pub mod timer;
pub mod usage_record;
pub mod worst_case;

/// The uid this process acts as: the owner the node's state must have.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}
