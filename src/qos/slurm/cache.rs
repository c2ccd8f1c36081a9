//! The answers of slurmdbd that the users' commands reuse for a while.
//!
//! Every `sacctmgr` call costs about 0.2 s whatever it asks (the client
//! connects to slurmdbd, and each request and answer waits out TCP's
//! delayed acknowledgement), while what `usage` and `why` ask of it
//! changes when an admin runs `sacctmgr modify`: each QOS's `Preempt`
//! list, `GraceTime` and flags, and which QOS a user may use. Everything
//! that changes with the jobs (limits in use, jobs, nodes) is read from
//! slurmctld on every run.
//!
//! One file per question and cluster in the caller's own cache directory
//! (`$XDG_CACHE_HOME/gpushare`, else `~/.cache/gpushare`), written
//! atomically: an answer younger than [`MAX_AGE`] is used as it is; an
//! older one is replaced by a fresh answer, or, when slurmdbd does not
//! answer, used with a note that says its age. A link, or a file or
//! directory the caller does not own, is never used: the cache only ever
//! speeds up or keeps up what the caller could read themselves.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::shared::durable;

/// How long an answer is used without asking slurmdbd again.
pub const MAX_AGE: Duration = Duration::from_secs(60);

/// Where [`crate::qos::slurm::Live`] keeps slurmdbd's answers.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
    /// Which cluster: the `SLURM_CONF` in effect (a user may reach two).
    cluster: String,
    max_age: Duration,
    uid: u32,
}

/// An answer found in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cached {
    pub text: String,
    pub age: Duration,
}

impl Cache {
    /// The caller's cache from the environment (`XDG_CACHE_HOME`, `HOME`,
    /// `SLURM_CONF`); `None` where there is no home to keep it in.
    pub fn from_env() -> Option<Cache> {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| Path::new(v).is_absolute())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|v| Path::new(v).is_absolute())
                    .map(|h| Path::new(&h).join(".cache"))
            })?;
        let conf = std::env::var("SLURM_CONF").unwrap_or_default();
        Some(Cache::new(base.join("gpushare"), &conf, MAX_AGE))
    }

    /// A cache in `dir` for the cluster whose slurm.conf is `conf`.
    pub fn new(dir: PathBuf, conf: &str, max_age: Duration) -> Cache {
        Cache {
            dir,
            cluster: format!("{:016x}", fnv1a(conf.as_bytes())),
            max_age,
            uid: rustix::process::geteuid().as_raw(),
        }
    }

    fn file(&self, key: &str) -> String {
        format!("{}-{key}.txt", self.cluster)
    }

    /// The answer kept for `key`, whatever its age, if it is the caller's.
    pub fn get(&self, key: &str) -> Option<Cached> {
        let path = self.dir.join(self.file(key));
        let meta = fs::symlink_metadata(&path).ok()?;
        let dir_meta = fs::symlink_metadata(&self.dir).ok()?;
        if !meta.is_file() || meta.uid() != self.uid || dir_meta.uid() != self.uid {
            return None;
        }
        let age = SystemTime::now()
            .duration_since(meta.modified().ok()?)
            .unwrap_or_default();
        let text = fs::read_to_string(&path).ok()?;
        Some(Cached { text, age })
    }

    /// Whether an answer of that age is used without asking again.
    pub fn fresh(&self, cached: &Cached) -> bool {
        cached.age < self.max_age
    }

    /// Keeps `text` as the answer for `key`; a cache that cannot be
    /// written is no cache (nothing is said: the command goes on).
    pub fn put(&self, key: &str, text: &str) {
        let made = fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir);
        let ours = fs::symlink_metadata(&self.dir).is_ok_and(|m| m.is_dir() && m.uid() == self.uid);
        if made.is_ok() && ours {
            let _ = durable::replace(&self.dir, &self.file(key), text.as_bytes(), 0o600);
        }
    }
}

/// FNV-1a, 64 bits: a stable name for a cluster's files.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// An age in words: `40 s`, `12 min`, `3 h`, `2 days`.
pub fn age_words(age: Duration) -> String {
    let s = age.as_secs();
    match s {
        0..=119 => format!("{s} s"),
        120..=7199 => format!("{} min", s / 60),
        7200..=172_799 => format!("{} h", s / 3600),
        _ => format!("{} days", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_kept_per_cluster_and_aged() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let base = dir.path().join("gpushare");
        let a = Cache::new(base.clone(), "/etc/slurm/slurm.conf", MAX_AGE);
        let b = Cache::new(base.clone(), "/etc/other/slurm.conf", MAX_AGE);
        assert_eq!(a.get("sacctmgr-show-qos"), None);
        a.put("sacctmgr-show-qos", "qos_lafferty|...\n");
        let got = a.get("sacctmgr-show-qos").unwrap_or_else(|| panic!("kept"));
        assert_eq!(got.text, "qos_lafferty|...\n");
        assert!(a.fresh(&got));
        assert_eq!(b.get("sacctmgr-show-qos"), None, "another cluster's");
        let mode = fs::metadata(&base).map(|m| m.mode() & 0o777).ok();
        assert_eq!(mode, Some(0o700));
        let stale = Cache::new(base, "/etc/slurm/slurm.conf", Duration::ZERO);
        let old = stale
            .get("sacctmgr-show-qos")
            .unwrap_or_else(|| panic!("kept"));
        assert!(!stale.fresh(&old));
    }

    #[test]
    fn a_link_or_an_unwritable_place_is_no_cache() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let base = dir.path().join("gpushare");
        let c = Cache::new(base.clone(), "", MAX_AGE);
        c.put("k", "real");
        let name = c.file("k");
        fs::remove_file(base.join(&name)).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink("/etc/hostname", base.join(&name))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.get("k"), None, "a link is never followed");
        let nowhere = Cache::new(PathBuf::from("/proc/gpushare-cache"), "", MAX_AGE);
        nowhere.put("k", "text");
        assert_eq!(nowhere.get("k"), None);
    }

    #[test]
    fn ages_in_words() {
        assert_eq!(age_words(Duration::from_secs(40)), "40 s");
        assert_eq!(age_words(Duration::from_secs(720)), "12 min");
        assert_eq!(age_words(Duration::from_secs(3 * 3600)), "3 h");
        assert_eq!(age_words(Duration::from_secs(2 * 86_400)), "2 days");
    }
}
