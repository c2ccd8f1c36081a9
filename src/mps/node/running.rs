//! The jobs slurmctld runs on this node, as `squeue` tells: asked only
//! where records of jobs that ended without an epilog may be in the way.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::mps::in_force::NODE_RECORDS_DIR;
use crate::mps::state_dir::{self, Access};
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
/// else `$SLURMD_NODENAME`, else the name slurmd gave the node's last
/// prolog or epilog ([`record_node_name`]), else the short hostname. The
/// node timer and an admin's shell have no `SLURMD_NODENAME`, and a host
/// need not be named as its `NodeName=` (`NodeHostname=`): without the
/// record they would ask Slurm about, and scope `gpu_mps.conf` for, a
/// node that is not this one.
pub fn node_name(given: Option<String>) -> String {
    node_name_from(given, Path::new(NODE_RECORDS_DIR))
}

fn node_name_from(given: Option<String>, records: &Path) -> String {
    given
        .or_else(|| std::env::var("SLURMD_NODENAME").ok())
        .or_else(|| recorded_node_name(records))
        .or_else(crate::shared::locations::short_hostname)
        .unwrap_or_default()
}

/// The file in [`NODE_RECORDS_DIR`] holding the node's name as slurmd
/// gave it to its last prolog or epilog.
pub const NODE_NAME_FILE: &str = "node-name";

/// Whether `name` can be a Slurm node name as gpushare writes and reads
/// it back (letters, digits, `-`, `_`, `.`; at most 255 bytes).
fn is_node_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The name [`record_node_name`] left in `records`, if it is one.
pub fn recorded_node_name(records: &Path) -> Option<String> {
    let text = fs::read_to_string(records.join(NODE_NAME_FILE)).ok()?;
    let name = text.trim();
    is_node_name(name).then(|| name.to_owned())
}

/// Records `name` (slurmd's `SLURMD_NODENAME` of the job at hand) in
/// `records`, root's directory, where it is not already: written whole or
/// not at all.
pub fn record_node_name(records: &Path, owner: u32, name: &str) -> Result<(), String> {
    if !is_node_name(name) || recorded_node_name(records).as_deref() == Some(name) {
        return Ok(());
    }
    state_dir::ensure(records, owner, Access::Private)
        .and_then(|_| {
            state_dir::replace_file(
                records,
                NODE_NAME_FILE,
                format!("{name}\n").as_bytes(),
                0o644,
            )
        })
        .map_err(|e| format!("{}: {e}", records.join(NODE_NAME_FILE).display()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_slurmd_gave_is_recorded_and_read_back_before_the_hostname() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let records = dir.path().join("records");
        let owner = rustix::process::geteuid().as_raw();
        assert_eq!(recorded_node_name(&records), None);
        record_node_name(&records, owner, "gpu07").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(recorded_node_name(&records).as_deref(), Some("gpu07"));
        if std::env::var_os("SLURMD_NODENAME").is_none() {
            assert_eq!(node_name_from(None, &records), "gpu07");
        }
        assert_eq!(node_name_from(Some("gpu01".into()), &records), "gpu01");
        // Not a name: never written, never read.
        record_node_name(&records, owner, "gpu 07/../x").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(recorded_node_name(&records).as_deref(), Some("gpu07"));
        fs::write(records.join(NODE_NAME_FILE), "a b\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(recorded_node_name(&records), None);
    }
}
