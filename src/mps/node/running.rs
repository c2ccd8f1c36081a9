//! The jobs slurmctld runs on this node, as `squeue` tells: asked only
//! where records of jobs that ended without an epilog may be in the way.

use std::process::Command;
use std::time::Duration;

use crate::shared::bounded;

/// How long the prolog waits for `squeue` (asked only when a share finds
/// no room, to drop records of jobs that ended without an epilog).
pub const SQUEUE_TIMEOUT: Duration = Duration::from_secs(10);

/// A job that runs on this node now, as slurmctld tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningJob {
    pub job: u32,
    /// Its GRES request names mps.
    pub holds_mps: bool,
}

/// This node as Slurm names it for an admin command: `given` (`--node`),
/// else `$SLURMD_NODENAME`, else the short hostname.
pub fn node_name(given: Option<String>) -> String {
    given
        .or_else(|| std::env::var("SLURMD_NODENAME").ok())
        .or_else(crate::shared::locations::short_hostname)
        .unwrap_or_default()
}

/// The jobs slurmctld says run on `node` (None when it cannot be asked in
/// [`SQUEUE_TIMEOUT`]: callers must then not drop anything).
pub fn running_jobs(node: &str) -> Result<Vec<RunningJob>, String> {
    let mut cmd = Command::new(crate::shared::locations::slurm_command("squeue"));
    cmd.args([
        "--noheader",
        "--nodelist",
        node,
        "--states=RUNNING,COMPLETING,CONFIGURING,SUSPENDED,STOPPED",
        "--format=%A|%b",
    ]);
    let ran = bounded::run(cmd, None, SQUEUE_TIMEOUT).map_err(|e| e.to_string())?;
    if !ran.status.success() {
        return Err(format!("squeue: {} {}", ran.status, ran.stderr.trim()));
    }
    ran.stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let (job, gres) = line.split_once('|').unwrap_or((line, ""));
            let job = job
                .trim()
                .parse()
                .map_err(|_| format!("squeue printed {line:?}, not a job id"))?;
            Ok(RunningJob {
                job,
                holds_mps: gres.contains("mps"),
            })
        })
        .collect()
}
