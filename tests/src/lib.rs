//! A real, throwaway Slurm cluster for gpushare's integration tests and demo.
//!
//! [`ClusterSpec`] describes it (GPUs, accounting, plugins, cgroups);
//! [`ClusterSpec::start`] brings up munged, MariaDB, slurmdbd, slurmctld and
//! slurmd as child processes on free loopback ports, everything under one
//! temporary directory, and returns a [`Cluster`] whose `Drop` stops and reaps
//! every process it started — daemons, slurmstepds and job processes alike —
//! even when a test panics. [`suite`] is the small test runner each
//! integration test binary uses: one cluster per binary, tests run in order,
//! daemon logs printed for every failure.
//!
//! Everything here needs root (daemons, `mknod`, cgroups), like the daemons
//! it runs. Nothing is mocked.

pub mod bench_figures;
pub mod cluster;
pub mod elf;
pub mod freshness;
pub mod hosts;
pub mod monitor;
pub mod process;
pub mod standin;
pub mod suite;
pub mod time;
pub mod users;

#[cfg(test)]
mod node_advice;

pub use cluster::{Cluster, ClusterSpec, GpuSpec, JobInfo, NodeSpec, Qos};
pub use suite::{ensure, Suite, TestResult};

/// The text of a panic payload.
pub fn guard_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// The error type of harness helpers: a message for the failure report.
pub type Error = String;
/// Result of harness helpers.
pub type Result<T> = std::result::Result<T, Error>;

/// Replaces a configuration file the way config tools do (a new file, then
/// a rename), so a node program reading it meanwhile sees the old text or
/// the new one, never a half-written file (which it rightly calls unfit).
pub fn replace_conf(path: &std::path::Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("gpushare-new");
    std::fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}
