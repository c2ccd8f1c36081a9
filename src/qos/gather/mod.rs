//! What each `gpu-qos` command reads, and in which order, through a
//! [`SlurmRead`](crate::qos::slurm::SlurmRead): Slurm itself when run,
//! recorded answers of each release in tests. The binary parses its
//! arguments, calls one of these and prints.
//!
//! - [`why`]: one job explained (`gpu-qos why`).
//! - [`usage`]: a user's group QOS (`gpu-qos usage`).
//! - [`accounts`]: the typed limits above a user, by account and
//!   partition.
//! - [`site`]: the site for `audit`, `check`, `generate` and `metrics`.

pub mod accounts;
pub mod site;
pub mod usage;
pub mod why;

#[cfg(test)]
mod scenes;
