//! gpushare's core: everything with logic, in safe Rust, testable without
//! Slurm (no Slurm headers, no libclang, no libslurm).
//!
//! Two halves and a small shared room:
//!
//! - [`qos`]: the typed-GPU QOS half, used inside slurmctld by
//!   `job_submit/gpu_qos` and by the `gpu-qos` admin command: request
//!   parsing, `gpu_qos.conf`, the decision, the wording of its messages,
//!   the comparison with the accounting database.
//! - [`mps`]: the node's MPS half, used by `gpu-mps-prolog`,
//!   `gpu-mps-epilog`, the SPANK plugin `gpu_mps` and the `gpu-mps` admin
//!   command: `gpu_mps.conf`, the share ledger, placement, the
//!   prolog/epilog/task flows, the MPS daemons, device confinement and the
//!   status view.
//! - [`shared`]: Slurm's `Key=Value` syntax and its one error type, file
//!   locations, the watched configuration file, the SPANK variables that
//!   carry facts from the controller to the node, and the one way to do
//!   each common thing: a durable file replace, a bounded command run,
//!   Slurm's calendar.
//!
//! `qos` and `mps` import only `shared`, never each other; no file imports
//! a file that imports it back (the unit tests in `house.rs` check both).
//! The Slurm plugins (`plugins/`), the node programs (`prolog/`,
//! `epilog/`) and the admin commands (`admin/`) are thin layers that turn
//! Slurm's structures, the environment and command lines into the plain
//! types here and back.

#![forbid(unsafe_code)]

pub mod mps;
pub mod qos;
pub mod shared;

#[cfg(test)]
mod house;
