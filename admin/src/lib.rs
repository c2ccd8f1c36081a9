//! gpushare's admin commands: `gpu-qos` (users' and admins' questions to
//! the QOS half), `gpu-mps` (a GPU node's sharing state, its self-test
//! and the node timer's `metrics --write`) and `gpushare-man` (the man
//! pages, completions and example node setups made from the command
//! lines).
//!
//! What runs on a GPU node as root and is shared with `gpu-mps-prolog` /
//! `gpu-mps-epilog` (start-up, syslog logging, NVML, CUDA probes,
//! requeues) is the `gpushare-node` crate's (`node/`): the prolog and
//! epilog never link this crate. This crate holds the dependencies a
//! daemon must not load (argument parsing, error reporting); the Slurm
//! plugins link only the core `gpushare` crate.

#![forbid(unsafe_code)]

#[cfg(test)]
mod exit_docs;
pub mod manual;
pub mod mps_cli;
pub mod qos_cli;
pub mod selftest_cli;

/// `--version` text: the program, gpushare's version.
pub fn version_line(program: &str) -> String {
    format!("{program} {} (gpushare)", env!("CARGO_PKG_VERSION"))
}
