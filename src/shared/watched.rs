//! A configuration file that is re-read when it changes, keeping the last
//! good version in force when an edit is invalid.
//!
//! slurmctld must not do file I/O for every job, so the plugin never reads
//! the file on the submit path: a watcher thread calls [`WatchedFile::poll`]
//! every few seconds (one `stat`), and the submit path only clones the
//! current `Arc` (see [`Current`]).

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::SystemTime;

use super::ConfigError;

/// A parser of a whole file: `(text, file name)` to the value or a
/// `file:line: reason` error.
pub type Parser<T> = fn(&str, &str) -> Result<T, ConfigError>;

/// What identifies one version of a file on disk, cheaply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
    ctime_ns: i64,
}

impl Stamp {
    fn of(path: &Path) -> io::Result<Self> {
        let m = fs::metadata(path)?;
        Ok(Self {
            modified: m.modified().ok(),
            len: m.len(),
            inode: m.ino(),
            ctime_ns: m
                .ctime()
                .saturating_mul(1_000_000_000)
                .saturating_add(m.ctime_nsec()),
        })
    }
}

/// The value most recently loaded, shared between the watcher and readers.
///
/// Readers take a clone of the `Arc` under a read lock held for nanoseconds;
/// a poisoned lock is ignored on purpose: the value behind it is always a
/// complete `Arc`, since it is replaced in a single assignment.
#[derive(Debug)]
pub struct Current<T>(RwLock<Arc<T>>);

impl<T> Current<T> {
    pub fn new(value: T) -> Self {
        Self(RwLock::new(Arc::new(value)))
    }

    /// The value in force now.
    pub fn get(&self) -> Arc<T> {
        Arc::clone(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }

    fn set(&self, value: T) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(value);
    }
}

/// What a poll found.
#[derive(Debug, PartialEq, Eq)]
pub enum PollOutcome {
    /// The file did not change.
    Unchanged,
    /// The file changed and the new version is now in force.
    Reloaded,
    /// The file changed but is invalid (or unreadable); the message says why
    /// and the previous version stays in force. Reported once per change.
    Rejected(String),
}

/// A file parsed into `T`, re-parsed when its stamp changes.
#[derive(Debug)]
pub struct WatchedFile<T> {
    path: PathBuf,
    parse: Parser<T>,
    seen: Option<Stamp>,
    current: Arc<Current<T>>,
}

impl<T> WatchedFile<T> {
    /// Loads `path` now; fails if it is missing or invalid, so a daemon can
    /// refuse to start without a policy. `parse(text, file_name)` returns
    /// the value or a `file:line: reason` message.
    pub fn load(path: &Path, parse: Parser<T>) -> Result<Self, ConfigError> {
        let stamp = Stamp::of(path).map_err(|e| ConfigError::new(&path.to_string_lossy(), 0, e))?;
        let value = read_and_parse(path, parse)?;
        Ok(Self {
            path: path.to_path_buf(),
            parse,
            seen: Some(stamp),
            current: Arc::new(Current::new(value)),
        })
    }

    /// The shared handle readers use.
    pub fn current(&self) -> Arc<Current<T>> {
        Arc::clone(&self.current)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Re-reads the file if it changed since the last poll.
    pub fn poll(&mut self) -> PollOutcome {
        let stamp = Stamp::of(&self.path).ok();
        if stamp == self.seen {
            return PollOutcome::Unchanged;
        }
        self.seen = stamp;
        if stamp.is_none() {
            return PollOutcome::Rejected(format!(
                "{}: cannot be read; keeping the policy loaded before",
                self.path.display()
            ));
        }
        match read_and_parse(&self.path, self.parse) {
            Ok(value) => {
                self.current.set(value);
                PollOutcome::Reloaded
            }
            Err(e) => PollOutcome::Rejected(format!("{e}; keeping the policy loaded before")),
        }
    }
}

fn read_and_parse<T>(path: &Path, parse: Parser<T>) -> Result<T, ConfigError> {
    let name = path.to_string_lossy();
    let text = fs::read_to_string(path).map_err(|e| ConfigError::new(&name, 0, e))?;
    parse(&text, &name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_number(text: &str, file: &str) -> Result<u32, ConfigError> {
        text.trim()
            .parse()
            .map_err(|_| ConfigError::new(file, 1, format!("not a number: {:?}", text.trim())))
    }

    /// A file in a directory removed when the returned guard drops.
    fn temp_file(text: &str) -> (PathBuf, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("value.conf");
        fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
        (path, dir)
    }

    /// Writes through a temp file + rename, as editors and config tools do,
    /// so the inode changes even when size and mtime would not.
    fn replace(path: &Path, text: &str) {
        let tmp = path.with_extension("tmp");
        fs::write(&tmp, text).unwrap_or_else(|e| panic!("{e}"));
        fs::rename(&tmp, path).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn missing_or_invalid_file_fails_load_with_its_reason() {
        let missing = Path::new("/nonexistent/gpu_qos.conf");
        let e = WatchedFile::load(missing, parse_number)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.starts_with("/nonexistent/gpu_qos.conf: "), "{e}");
        let (bad, _dir) = temp_file("four\n");
        let e = WatchedFile::load(&bad, parse_number)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(e, format!("{}:1: not a number: \"four\"", bad.display()));
    }

    #[test]
    fn edit_is_picked_up_and_bad_edit_keeps_last_good() {
        let (path, _dir) = temp_file("4\n");
        let mut w = WatchedFile::load(&path, parse_number).unwrap_or_else(|e| panic!("{e}"));
        let cur = w.current();
        assert_eq!(*cur.get(), 4);
        assert_eq!(w.poll(), PollOutcome::Unchanged);

        replace(&path, "20\n");
        assert_eq!(w.poll(), PollOutcome::Reloaded);
        assert_eq!(*cur.get(), 20);

        replace(&path, "twenty\n");
        match w.poll() {
            PollOutcome::Rejected(m) => assert!(
                m.contains(":1: not a number") && m.contains("keeping"),
                "{m}"
            ),
            other => panic!("expected Rejected, got {other:?}"),
        }
        assert_eq!(*cur.get(), 20, "last good value stays in force");
        assert_eq!(
            w.poll(),
            PollOutcome::Unchanged,
            "a bad version is reported once"
        );

        fs::remove_file(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(w.poll(), PollOutcome::Rejected(_)));
        assert_eq!(*cur.get(), 20);
        replace(&path, "8\n");
        assert_eq!(w.poll(), PollOutcome::Reloaded);
        assert_eq!(*cur.get(), 8);
    }
}
