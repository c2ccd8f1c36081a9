//! gpushare's core: everything with logic, in safe Rust, testable without
//! Slurm.
//!
//! The Slurm plugins (`plugins/`) and the prolog/epilog executables are thin
//! layers that turn Slurm's C structures into the plain types here and back.

#![forbid(unsafe_code)]

pub mod devcgroup;
pub mod gres;
pub mod kv;
pub mod ledger;
pub mod mps_conf;
pub mod mps_node;
pub mod mps_status;
pub mod placement;
pub mod policy;
pub mod qos_check;
pub mod qos_conf;
pub mod reload;

/// The Slurm release this build targets, e.g. "22.05.8".
pub const SLURM_VERSION: &str = slurm_sys::SLURM_VERSION;
