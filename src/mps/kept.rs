//! What a node keeps across reboots for one state directory: the records
//! that must outlive a boot (the exclusions gpushare added to jobs, the
//! owners of the requeue marks, the kernel log's cursor with its boot)
//! live in `/var/lib/gpushare/kept-of-<StateDir>`, root's alone, not in
//! the state directory, which is on tmpfs by default (`/run/gpu-mps`)
//! and empty after every boot.
//!
//! One directory per state directory (named after its path, as the
//! ledger's pointer is named after its configuration): two
//! configurations on one host never share records.

use std::path::{Path, PathBuf};

use super::in_force::named_for;
use super::state_dir::{self, Access};

/// Where a node keeps what outlives a reboot (with `gpu-mps disable`'s
/// marks and the path of the `gpu_mps.conf` in use).
pub const KEPT_ROOT: &str = "/var/lib/gpushare";

/// This boot's id, as the kernel gives it (empty where it cannot be
/// read): what tells a record kept across reboots which boot wrote it.
pub fn this_boot() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// The kept directory of state directory `state_dir` under `root`
/// ([`KEPT_ROOT`] on a node).
pub fn kept_dir(root: &Path, state_dir: &Path) -> PathBuf {
    root.join(named_for("kept-of", state_dir))
}

/// The kept directory of `state_dir` under `root`, made where missing
/// (root's, mode 0700) and checked: nobody but `owner` can write in it
/// or above it.
pub fn ensure(root: &Path, state_dir: &Path, owner: u32) -> Result<PathBuf, String> {
    let dir = kept_dir(root, state_dir);
    state_dir::ensure(root, owner, Access::WorldReadable)
        .and_then(|_| state_dir::ensure(&dir, owner, Access::Private))
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// The kept directory of `state_dir` under `root` where it exists and
/// `owner` owns it; `None` otherwise (nothing kept yet, or a directory
/// someone else could have written: not read).
pub fn existing(root: &Path, state_dir: &Path, owner: u32) -> Option<PathBuf> {
    let dir = kept_dir(root, state_dir);
    state_dir::check(&dir, owner, Access::Private).ok()?;
    Some(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn each_state_dir_keeps_its_own_and_only_its_owner_reads_it() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let owner = std::fs::metadata(root.path()).map_or(0, |m| m.uid());
        let kept = root.path().join("kept");
        let a = ensure(&kept, Path::new("/run/gpu-mps"), owner).unwrap_or_else(|e| panic!("{e}"));
        let b = ensure(&kept, Path::new("/run/gpu-mps-b"), owner).unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(a, b);
        assert_eq!(a, kept.join("kept-of-run-gpu%2dmps"));
        assert_eq!(existing(&kept, Path::new("/run/gpu-mps"), owner), Some(a));
        assert_eq!(existing(&kept, Path::new("/run/other"), owner), None);
        assert_eq!(existing(&kept, Path::new("/run/gpu-mps"), owner + 1), None);
    }
}
