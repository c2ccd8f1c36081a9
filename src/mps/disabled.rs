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
//!
//! The path is the file's own, its links and `..` resolved
//! (`fs::canonicalize`; the path as given where it does not resolve): an
//! admin's `gpu-mps disable --conf /etc/slurm/../slurm/gpu_mps.conf`, or
//! one through a link to a shared `/etc/slurm`, writes the mark the
//! prolog reads with slurmd's spelling, and `status` reads the same one.
//! A mark written under another spelling of the same file (by a gpushare
//! that keyed marks by the path as given) counts too, and `enable` takes
//! every one away.

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

const PREFIX: &str = "disabled-of";

/// The path marks of `conf` are named by: the file's own (links and `..`
/// resolved), or `conf` as given where it does not resolve.
fn key_of(conf: &Path) -> PathBuf {
    fs::canonicalize(conf).unwrap_or_else(|_| conf.to_path_buf())
}

/// The mark's file name for `gpu_mps.conf` at `conf`.
fn mark_name(conf: &Path) -> String {
    named_for(PREFIX, &key_of(conf))
}

/// The mark's file for `gpu_mps.conf` at `conf`, under `dir` (the one
/// [`disable`] writes).
pub fn mark_path(dir: &Path, conf: &Path) -> PathBuf {
    dir.join(mark_name(conf))
}

/// The path a mark's file `name` was written for ([`named_for`] read
/// back: `-` a `/`, `%xx` a byte); `None`: not a mark's name.
fn marked_conf(name: &str) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let rest = name.strip_prefix(PREFIX)?;
    let mut bytes = Vec::with_capacity(rest.len());
    let mut chars = rest.bytes();
    while let Some(b) = chars.next() {
        bytes.push(match b {
            b'-' => b'/',
            b'%' => {
                let hex = [chars.next()?, chars.next()?];
                u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?
            }
            b => b,
        });
    }
    Some(std::ffi::OsString::from_vec(bytes).into())
}

/// Every mark under `dir` for the file `conf` names, the one [`disable`]
/// writes first; then those of other spellings of the same file.
fn marks_of(dir: &Path, conf: &Path) -> Vec<PathBuf> {
    let key = key_of(conf);
    let own = named_for(PREFIX, &key);
    let mut found: Vec<PathBuf> = Some(dir.join(&own))
        .filter(|p| p.exists())
        .into_iter()
        .collect();
    let others = fs::read_dir(dir).into_iter().flatten().flatten();
    for entry in others {
        let name = entry.file_name();
        let Some(name) = name.to_str().filter(|n| *n != own) else {
            continue;
        };
        if marked_conf(name).is_some_and(|p| p == conf || key_of(&p) == key) {
            found.push(entry.path());
        }
    }
    found
}

/// The mark for `conf` under `dir` (whatever spelling of the file it was
/// written for), if one is there and `owner` (root on a node) owns the
/// directory; one that does not read is a mark with its text for a reason
/// (taking a node off is never undone by a bad file).
pub fn read(dir: &Path, conf: &Path, owner: u32) -> Option<Disabled> {
    state_dir::check(dir, owner, Access::WorldReadable).ok()?;
    let text = marks_of(dir, conf)
        .iter()
        .find_map(|p| fs::read_to_string(p).ok())?;
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

/// Removes every mark for `conf` (whatever spelling each was written
/// for); whether there was one.
pub fn enable(dir: &Path, conf: &Path) -> Result<bool, String> {
    let mut removed = false;
    for path in marks_of(dir, conf) {
        match fs::remove_file(&path) {
            Ok(()) => removed = true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
    }
    Ok(removed)
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

    /// A shared configuration directory reached through a link, as a site
    /// mounts it: `real/gpu_mps.conf`, and `etc/slurm` a link to `real`.
    fn linked_conf() -> (tempfile::TempDir, PathBuf, u32) {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let real = tmp.path().join("real");
        fs::create_dir_all(&real).unwrap_or_else(|e| panic!("{e}"));
        fs::write(real.join("gpu_mps.conf"), "UnitsPerGPU=100\n").unwrap_or_else(|e| panic!("{e}"));
        fs::create_dir_all(tmp.path().join("etc")).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(&real, tmp.path().join("etc/slurm"))
            .unwrap_or_else(|e| panic!("{e}"));
        let owner = fs::metadata(tmp.path())
            .map(|m| m.uid())
            .unwrap_or(u32::MAX);
        let dir = tmp.path().join("lib");
        (tmp, dir, owner)
    }

    #[test]
    fn a_mark_is_the_files_whatever_the_spelling_of_its_path() {
        let (tmp, dir, owner) = linked_conf();
        let slurmd = tmp.path().join("etc/slurm/gpu_mps.conf");
        let spellings = [
            tmp.path().join("etc/../etc/slurm/gpu_mps.conf"),
            tmp.path().join("real/../real/gpu_mps.conf"),
            tmp.path().join("real/gpu_mps.conf"),
            tmp.path().join("etc/./slurm//gpu_mps.conf"),
        ];
        for admin in &spellings {
            disable(&dir, admin, owner, "by hand", 7).unwrap_or_else(|e| panic!("{e}"));
            // What the prolog reads (slurmd's spelling) and what status
            // shows (the admin's) are the same mark.
            for conf in spellings.iter().chain([&slurmd]) {
                assert_eq!(
                    read(&dir, conf, owner).map(|m| m.reason),
                    Some("by hand".to_owned()),
                    "disabled as {}, read as {}",
                    admin.display(),
                    conf.display()
                );
            }
            assert_eq!(enable(&dir, &slurmd), Ok(true), "{}", admin.display());
            for conf in spellings.iter().chain([&slurmd]) {
                assert_eq!(read(&dir, conf, owner), None, "{}", conf.display());
            }
        }
        // Another file of the same directory is not disabled.
        disable(&dir, &slurmd, owner, "x", 1).unwrap_or_else(|e| panic!("{e}"));
        let other = tmp.path().join("etc/slurm/other.conf");
        fs::write(&other, "").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read(&dir, &other, owner), None);
    }

    #[test]
    fn a_mark_an_earlier_gpushare_wrote_under_the_path_as_given_still_counts() {
        let (tmp, dir, owner) = linked_conf();
        let slurmd = tmp.path().join("etc/slurm/gpu_mps.conf");
        let dotted = tmp.path().join("etc/../etc/slurm/gpu_mps.conf");
        // Keyed by the path as given, as the marks were before.
        state_dir::ensure(&dir, owner, Access::WorldReadable).unwrap_or_else(|e| panic!("{e}"));
        for (conf, reason) in [(&slurmd, "old-slurmd"), (&dotted, "old-dotted")] {
            let old = dir.join(named_for(PREFIX, conf));
            fs::write(&old, format!("{FORMAT}\t5\t{reason}\n")).unwrap_or_else(|e| panic!("{e}"));
            for read_as in [&slurmd, &dotted] {
                assert_eq!(
                    read(&dir, read_as, owner).map(|m| m.reason),
                    Some(reason.to_owned()),
                    "written as {}, read as {}",
                    conf.display(),
                    read_as.display()
                );
            }
            assert_eq!(enable(&dir, &dotted), Ok(true));
            assert_eq!(read(&dir, &slurmd, owner), None);
            assert!(!old.exists());
        }
        // A path with bytes named_for writes as %xx reads back.
        let odd = Path::new("/etc/slurm-x/gpu mps.conf");
        assert_eq!(marked_conf(&named_for(PREFIX, odd)).as_deref(), Some(odd));
        assert_eq!(marked_conf("ledger-of-etc"), None);
        assert_eq!(marked_conf("disabled-of-x%4"), None);
    }
}
