//! A node taken off GPU sharing by its admin (`gpu-mps disable`), until
//! `gpu-mps enable`.
//!
//! While the mark is there the prolog refuses every new share with reason
//! `disabled` (a batch job is requeued elsewhere, as for the other
//! refusals another node may serve); shares already running run on, and
//! CPU-only and whole-GPU jobs are not touched. Once no share runs,
//! `gpu-mps disable` stops every MPS daemon, gives every GPU its compute
//! mode back and takes back every exclusion gpushare put on jobs, so that
//! the node can leave gpushare with nothing of it left behind.
//!
//! The mark outlives a reboot (an admin's decision must not end with one):
//! `/var/lib/gpushare/disabled-of-<path of gpu_mps.conf>`, root's,
//! readable by everyone so that `gpu-mps status` shows it to users too.

use std::fs;
use std::path::{Path, PathBuf};

use super::in_force::named_for;
use super::state_dir::{self, Access};

/// Where the marks live on a node: kept across reboots.
pub const DISABLED_DIR: &str = "/var/lib/gpushare";

const FORMAT: &str = "gpushare-disabled";

/// A node's mark: when (seconds since the epoch) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disabled {
    pub since: u64,
    pub reason: String,
}

impl Disabled {
    /// What a refused share's user and `gpu-mps status` read.
    pub fn refusal(&self) -> String {
        format!(
            "GPU sharing is disabled on this node by its admin (gpu-mps disable: {}); the job \
             goes to a node that shares",
            self.reason
        )
    }
}

/// The mark's file name for `gpu_mps.conf` at `conf`.
fn mark_name(conf: &Path) -> String {
    named_for("disabled-of", conf)
}

/// The mark's file for `gpu_mps.conf` at `conf`, under `dir`.
pub fn mark_path(dir: &Path, conf: &Path) -> PathBuf {
    dir.join(mark_name(conf))
}

/// The mark for `conf` under `dir`, if one is there and `owner` (root on a
/// node) owns the directory; one that does not read is a mark with its
/// text for a reason (taking a node off is never undone by a bad file).
pub fn read(dir: &Path, conf: &Path, owner: u32) -> Option<Disabled> {
    state_dir::check(dir, owner, Access::WorldReadable).ok()?;
    let text = fs::read_to_string(mark_path(dir, conf)).ok()?;
    let mut fields = text.splitn(3, '\t');
    let parsed = (fields.next() == Some(FORMAT))
        .then(|| {
            let since = fields.next()?.parse().ok()?;
            let reason = fields.next()?.trim_end_matches('\n').to_owned();
            Some(Disabled { since, reason })
        })
        .flatten();
    Some(parsed.unwrap_or_else(|| Disabled {
        since: 0,
        reason: text.trim().chars().take(200).collect(),
    }))
}

/// Marks the node of `conf` disabled since `now` for `reason` (one line:
/// tabs and line breaks become blanks).
pub fn disable(dir: &Path, conf: &Path, owner: u32, reason: &str, now: u64) -> Result<(), String> {
    let reason: String = reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let text = format!("{FORMAT}\t{now}\t{}\n", reason.trim());
    state_dir::ensure(dir, owner, Access::WorldReadable)
        .and_then(|_| state_dir::replace_file(dir, &mark_name(conf), text.as_bytes(), 0o644))
        .map_err(|e| e.to_string())
}

/// Removes the mark for `conf`; whether there was one.
pub fn enable(dir: &Path, conf: &Path) -> Result<bool, String> {
    let path = mark_path(dir, conf);
    match fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_mark_reads_back_until_enabled_and_names_its_conf() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let dir = tmp.path().join("lib");
        let owner = fs::metadata(tmp.path())
            .map(|m| m.uid())
            .unwrap_or(u32::MAX);
        let conf = Path::new("/etc/slurm/gpu_mps.conf");
        assert_eq!(read(&dir, conf, owner), None);
        disable(&dir, conf, owner, "moving to\tMIG\n", 42).unwrap_or_else(|e| panic!("{e}"));
        let mark = read(&dir, conf, owner);
        assert_eq!(
            mark,
            Some(Disabled {
                since: 42,
                reason: "moving to MIG".to_owned()
            })
        );
        assert!(mark
            .map(|m| m.refusal())
            .is_some_and(|r| r.contains("disabled on this node by its admin")));
        assert_eq!(
            mark_path(&dir, conf).file_name().and_then(|n| n.to_str()),
            Some("disabled-of-etc-slurm-gpu_mps.conf")
        );
        // Another gpu_mps.conf is another node's.
        assert_eq!(read(&dir, Path::new("/etc/slurm/other.conf"), owner), None);
        // Written badly by hand: still disabled.
        fs::write(mark_path(&dir, conf), "off for now").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            read(&dir, conf, owner).map(|m| m.reason),
            Some("off for now".to_owned())
        );
        assert_eq!(enable(&dir, conf), Ok(true));
        assert_eq!(enable(&dir, conf), Ok(false));
        assert_eq!(read(&dir, conf, owner), None);
    }
}
