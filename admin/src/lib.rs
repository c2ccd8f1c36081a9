//! What gpushare's command-line programs share: the `gpu-qos` and `gpu-mps`
//! admin commands here, and `gpu-mps-prolog` / `gpu-mps-epilog` in
//! `prolog/` and `epilog/`.
//!
//! This crate holds the dependencies a daemon must not load (argument
//! parsing, the syslog backend, error reporting); the Slurm plugins link
//! only the core `gpushare` crate.

pub mod acl;
pub mod cuda_probe;
pub mod manual;
pub mod mps_cli;
pub mod node_log;
pub mod node_program;
pub mod nvml;
pub mod nvml_usage;
pub mod qos_cli;
pub mod requeue;
pub mod selftest_cli;
pub mod usage_record;
pub mod worst_case;

/// `--version` text: the program, gpushare's version.
pub fn version_line(program: &str) -> String {
    format!("{program} {} (gpushare)", env!("CARGO_PKG_VERSION"))
}

/// The uid this process acts as: the owner the node's state must have.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}
