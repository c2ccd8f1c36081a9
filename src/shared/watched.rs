//! A configuration file read as a changing thing: [`read_settled`] never
//! takes a half-written file for a whole one, and [`WatchedFile`] re-reads
//! one when it changes, keeping the last good version in force when an edit
//! is invalid, and its text for whoever keeps a copy of it
//! ([`WatchedFile::text_in_force`]).
//!
//! A file rewritten in place (`cat >`, an editor, a config tool that
//! truncates first) is, for a moment, empty or cut mid-line, and both can
//! parse (missing keys take defaults). So a read is taken as whole only
//! when the file's size, inode and times are the same before and after it,
//! it ends with a newline, and (where the caller asks) it holds a key; a
//! read that is not is tried again a few times, a few tens of ms in all.
//! What a caller falls back to when the file stays so is its own: the
//! watcher keeps the version in force, the node programs the last good copy
//! they recorded (`mps::in_force`).
//!
//! slurmctld must not do file I/O for every job, so the plugin never reads
//! the file on the submit path: a watcher thread calls [`WatchedFile::poll`]
//! every few seconds (one `stat`), and the submit path only clones the
//! current `Arc` (see [`Current`]).

use std::fmt;
use std::fs::{self, File, Metadata};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use super::syntax;
use super::ConfigError;

/// A parser of a whole file: `(text, file name)` to the value or a
/// `file:line: reason` error.
pub type Parser<T> = fn(&str, &str) -> Result<T, ConfigError>;

/// What identifies one version of a file on disk, cheaply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
    device: u64,
    ctime_ns: i64,
    born: Option<SystemTime>,
}

/// Which file a path named, told apart from one that replaced it: its inode
/// and, where the filesystem records it, its birth time (an inode number is
/// reused as soon as it is freed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileId {
    pub inode: u64,
    /// Nanoseconds since the epoch.
    pub born_ns: Option<u128>,
}

impl Stamp {
    /// The stamp of what `path` names now (links followed).
    pub fn of(path: &Path) -> io::Result<Self> {
        fs::metadata(path).map(|m| Self::of_meta(&m))
    }

    fn of_meta(m: &Metadata) -> Self {
        Self {
            modified: m.modified().ok(),
            len: m.len(),
            inode: m.ino(),
            device: m.dev(),
            born: m.created().ok(),
            ctime_ns: m
                .ctime()
                .saturating_mul(1_000_000_000)
                .saturating_add(m.ctime_nsec()),
        }
    }

    /// The file read: the same while it is rewritten in place, another
    /// once it is replaced by a rename.
    pub fn file(&self) -> FileId {
        FileId {
            inode: self.inode,
            born_ns: self
                .born
                .and_then(|b| b.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map(|d| d.as_nanos()),
        }
    }

    /// Whether the file was modified less than `quiet` before `now` (a
    /// modification time in the future counts as recent).
    pub fn modified_within(&self, quiet: Duration, now: SystemTime) -> bool {
        self.modified
            .is_some_and(|m| now.duration_since(m).map_or(true, |age| age < quiet))
    }
}

/// Why a read did not give a whole file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsettled {
    /// Its size, inode or times differ before and after the read.
    Changed,
    /// Its last line has no newline: cut off, as while it is written.
    NoFinalNewline,
    /// It holds no `Key=Value` line: truncated, the rest not written yet.
    NoKeys,
}

impl fmt::Display for Unsettled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Unsettled::Changed => "it changed while it was read (being written?)",
            Unsettled::NoFinalNewline => {
                "its last line has no newline, as a file cut off while it is written \
                 (end the last line with a newline)"
            }
            Unsettled::NoKeys => {
                "it holds no Key=Value line, as a file truncated while it is rewritten \
                 (set at least one key)"
            }
        })
    }
}

/// What a read must find for the file to count as whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Any text (an empty file is a valid one).
    AnyText,
    /// At least one `Key=Value` line (an empty file is never a valid one).
    SomeKey,
}

/// A file read whole, and the version read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    pub text: String,
    pub stamp: Stamp,
}

/// The pauses between the tries of [`read_settled`]: 30 ms in all, longer
/// than a config tool or editor takes to write a small file.
pub const SETTLE_PAUSES: [Duration; 3] = [
    Duration::from_millis(5),
    Duration::from_millis(10),
    Duration::from_millis(15),
];

/// Reads `path` once: `Ok(Err(_))` when what was read is not a whole file.
/// The file's stamp is taken on the open file before and after the read,
/// and of the path after it (a rename meanwhile), so a settled read costs
/// two `fstat`s and a `stat` beside the read itself.
pub fn read_once(path: &Path, expect: Expect) -> io::Result<Result<Settled, Unsettled>> {
    read_once_with(path, expect, || {})
}

/// [`read_once`], running `meanwhile` between the first stamp and the read
/// (what a writer may do then; tests make it happen there).
fn read_once_with(
    path: &Path,
    expect: Expect,
    meanwhile: impl FnOnce(),
) -> io::Result<Result<Settled, Unsettled>> {
    let mut file = File::open(path)?;
    let before = Stamp::of_meta(&file.metadata()?);
    meanwhile();
    let mut bytes = Vec::with_capacity(usize::try_from(before.len).unwrap_or(0) + 1);
    file.read_to_end(&mut bytes)?;
    let after = Stamp::of_meta(&file.metadata()?);
    let named = Stamp::of(path).ok();
    if before != after || named != Some(after) || bytes.len() as u64 != after.len {
        return Ok(Err(Unsettled::Changed));
    }
    let text =
        String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    if !text.is_empty() && !text.ends_with('\n') {
        return Ok(Err(Unsettled::NoFinalNewline));
    }
    if expect == Expect::SomeKey && syntax::lines(&text).next().is_none() {
        return Ok(Err(Unsettled::NoKeys));
    }
    Ok(Ok(Settled { text, stamp: after }))
}

/// Reads `path` as a whole file, trying again after each of
/// [`SETTLE_PAUSES`] while it is not one; the last try's verdict.
/// Nothing is slept where the first read is whole.
pub fn read_settled(path: &Path, expect: Expect) -> io::Result<Result<Settled, Unsettled>> {
    settle(|| read_once(path, expect))
}

/// Calls `read` until it gives a whole file, pausing [`SETTLE_PAUSES`]
/// between the tries.
fn settle(
    mut read: impl FnMut() -> io::Result<Result<Settled, Unsettled>>,
) -> io::Result<Result<Settled, Unsettled>> {
    let mut result = read()?;
    for pause in SETTLE_PAUSES {
        if result.is_ok() {
            break;
        }
        std::thread::sleep(pause);
        result = read()?;
    }
    Ok(result)
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
    /// The text of the version in force, while it is the file's (not a
    /// fallback): what a caller keeps a copy of.
    text: Option<String>,
}

impl<T> WatchedFile<T> {
    /// Loads `path` now; fails if it is missing or invalid, so a daemon can
    /// refuse to start without a policy. `parse(text, file_name)` returns
    /// the value or a `file:line: reason` message.
    pub fn load(path: &Path, parse: Parser<T>) -> Result<Self, ConfigError> {
        let name = path.to_string_lossy();
        let settled = read_settled(path, Expect::AnyText)
            .map_err(|e| ConfigError::new(&name, 0, e))?
            .map_err(|why| ConfigError::new(&name, 0, why))?;
        let value = parse(&settled.text, &name)?;
        Ok(Self {
            path: path.to_path_buf(),
            parse,
            seen: Some(settled.stamp),
            current: Arc::new(Current::new(value)),
            text: Some(settled.text),
        })
    }

    /// Loads `path` now; where it is missing, unreadable or invalid,
    /// `fallback(text)` is in force instead (`text`: what was read, empty
    /// where nothing could be) and the error comes back beside it, and the
    /// watcher takes the file once a valid version of it appears (a daemon
    /// that must run without its file).
    pub fn load_or(
        path: &Path,
        parse: Parser<T>,
        fallback: impl FnOnce(&str) -> T,
    ) -> (Self, Option<ConfigError>) {
        let name = path.to_string_lossy();
        let (seen, text, outcome) = match read_settled(path, Expect::AnyText) {
            Err(e) => (None, String::new(), Err(ConfigError::new(&name, 0, e))),
            // Read again at the next poll: it may be being written.
            Ok(Err(why)) => (None, String::new(), Err(ConfigError::new(&name, 0, why))),
            Ok(Ok(settled)) => {
                let outcome = parse(&settled.text, &name);
                (Some(settled.stamp), settled.text, outcome)
            }
        };
        let (value, error, text) = match outcome {
            Ok(value) => (value, None, Some(text)),
            Err(e) => (fallback(&text), Some(e), None),
        };
        let file = Self {
            path: path.to_path_buf(),
            parse,
            seen,
            current: Arc::new(Current::new(value)),
            text,
        };
        (file, error)
    }

    /// The shared handle readers use.
    pub fn current(&self) -> Arc<Current<T>> {
        Arc::clone(&self.current)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The text of the version in force, if it is the file's: none while
    /// the fallback of [`WatchedFile::load_or`] is. A rejected edit keeps
    /// the text of the version it left in force.
    pub fn text_in_force(&self) -> Option<&str> {
        self.text.as_deref()
    }

    /// Re-reads the file if it changed since the last poll. A file that
    /// changes while it is read is read again at the next poll.
    pub fn poll(&mut self) -> PollOutcome {
        let stamp = Stamp::of(&self.path).ok();
        if stamp == self.seen {
            return PollOutcome::Unchanged;
        }
        let keeping = "keeping the policy loaded before";
        let name = self.path.to_string_lossy().into_owned();
        let settled = match read_once(&self.path, Expect::AnyText) {
            Ok(Ok(settled)) => settled,
            Ok(Err(Unsettled::Changed)) => return PollOutcome::Unchanged,
            Ok(Err(why)) => {
                self.seen = stamp;
                return PollOutcome::Rejected(format!("{name}: {why}; {keeping}"));
            }
            Err(e) => {
                self.seen = stamp;
                return PollOutcome::Rejected(format!("{name}: cannot be read ({e}); {keeping}"));
            }
        };
        self.seen = Some(settled.stamp);
        match (self.parse)(&settled.text, &name) {
            Ok(value) => {
                self.current.set(value);
                self.text = Some(settled.text);
                PollOutcome::Reloaded
            }
            Err(e) => PollOutcome::Rejected(format!("{e}; {keeping}")),
        }
    }
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
    fn a_missing_or_invalid_file_leaves_the_fallback_in_force_until_a_good_one_comes() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("value.conf");
        let (mut file, error) = WatchedFile::load_or(&path, parse_number, |_| 7);
        assert!(error.is_some_and(|e| e.to_string().contains("value.conf")));
        assert_eq!(*file.current().get(), 7);
        assert_eq!(file.text_in_force(), None, "the fallback is not the file's");
        // Still missing: nothing to do.
        assert_eq!(file.poll(), PollOutcome::Unchanged);
        // An invalid version: told, the fallback kept.
        replace(&path, "seven\n");
        assert!(matches!(file.poll(), PollOutcome::Rejected(_)));
        assert_eq!(*file.current().get(), 7);
        // A good one: taken.
        replace(&path, "42\n");
        assert_eq!(file.poll(), PollOutcome::Reloaded);
        assert_eq!(*file.current().get(), 42);
        assert_eq!(file.text_in_force(), Some("42\n"));
        // A bad edit keeps the good version's text with its value.
        replace(&path, "forty\n");
        assert!(matches!(file.poll(), PollOutcome::Rejected(_)));
        assert_eq!(file.text_in_force(), Some("42\n"));
        replace(&path, "42\n");
        assert_eq!(file.poll(), PollOutcome::Reloaded);
        // Invalid from the start: the fallback, then the good file.
        let (mut file, error) = WatchedFile::load_or(&path, parse_number, |_| 7);
        assert!(error.is_none());
        assert_eq!(*file.current().get(), 42);
        assert_eq!(file.text_in_force(), Some("42\n"));
        replace(&path, "x\n");
        let (mut bad, error) = WatchedFile::load_or(&path, parse_number, |text| {
            assert_eq!(text, "x\n", "the fallback sees what was read");
            7
        });
        assert!(error.is_some_and(|e| e.to_string().contains("not a number")));
        assert_eq!(*bad.current().get(), 7);
        replace(&path, "8\n");
        assert_eq!(bad.poll(), PollOutcome::Reloaded);
        assert_eq!(*bad.current().get(), 8);
        assert_eq!(file.poll(), PollOutcome::Reloaded);
    }

    fn verdict(path: &Path, expect: Expect) -> Result<String, Unsettled> {
        read_once(path, expect)
            .unwrap_or_else(|e| panic!("{e}"))
            .map(|s| s.text)
    }

    #[test]
    fn a_whole_file_is_read_as_it_is() {
        let (path, _dir) = temp_file("UnitsPerGPU=100\nStateDir=/run/gpu-mps\n");
        assert_eq!(
            verdict(&path, Expect::SomeKey),
            Ok("UnitsPerGPU=100\nStateDir=/run/gpu-mps\n".to_owned())
        );
        // Comments and blank lines around one key are a whole file.
        fs::write(&path, "# node a\n\nUnitsPerGPU=50 # half\n").unwrap_or_else(|e| panic!("{e}"));
        assert!(verdict(&path, Expect::SomeKey).is_ok());
    }

    #[test]
    fn a_file_cut_mid_line_is_not_whole() {
        let (path, _dir) = temp_file("UnitsPerGPU=100\nStateDir=/run/gp");
        assert_eq!(
            verdict(&path, Expect::SomeKey),
            Err(Unsettled::NoFinalNewline)
        );
        assert_eq!(
            verdict(&path, Expect::AnyText),
            Err(Unsettled::NoFinalNewline)
        );
        // Cut inside the first key: no newline either.
        fs::write(&path, "Units").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            verdict(&path, Expect::SomeKey),
            Err(Unsettled::NoFinalNewline)
        );
    }

    #[test]
    fn an_empty_or_keyless_file_is_not_whole_where_a_key_is_expected() {
        let (path, _dir) = temp_file("");
        assert_eq!(verdict(&path, Expect::SomeKey), Err(Unsettled::NoKeys));
        assert_eq!(verdict(&path, Expect::AnyText), Ok(String::new()));
        fs::write(&path, "# gpushare\n\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(verdict(&path, Expect::SomeKey), Err(Unsettled::NoKeys));
    }

    #[test]
    fn a_file_changing_during_the_read_is_not_whole() {
        let (path, _dir) = temp_file("UnitsPerGPU=100\n");
        // Written in place between the first stamp and the read.
        let appended = read_once_with(&path, Expect::SomeKey, || {
            let mut f = fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap_or_else(|e| panic!("{e}"));
            std::io::Write::write_all(&mut f, b"StateDir=/run/x\n")
                .unwrap_or_else(|e| panic!("{e}"));
        });
        assert_eq!(appended.ok(), Some(Err(Unsettled::Changed)));
        // Truncated in place (`cat >` starts so): same inode, other size.
        let truncated = read_once_with(&path, Expect::SomeKey, || {
            fs::write(&path, "").unwrap_or_else(|e| panic!("{e}"));
        });
        assert_eq!(truncated.ok(), Some(Err(Unsettled::Changed)));
        // Replaced by a rename meanwhile: the open file is whole but no
        // longer the one the path names.
        fs::write(&path, "UnitsPerGPU=100\n").unwrap_or_else(|e| panic!("{e}"));
        let renamed = read_once_with(&path, Expect::SomeKey, || {
            replace(&path, "UnitsPerGPU=50\n")
        });
        assert_eq!(renamed.ok(), Some(Err(Unsettled::Changed)));
        assert_eq!(
            verdict(&path, Expect::SomeKey),
            Ok("UnitsPerGPU=50\n".to_owned())
        );
    }

    #[test]
    fn a_read_that_is_not_whole_is_tried_again_a_bounded_number_of_times() {
        let whole = Settled {
            text: "A=1\n".to_owned(),
            stamp: Stamp {
                modified: None,
                len: 4,
                inode: 1,
                device: 1,
                ctime_ns: 0,
                born: None,
            },
        };
        // Whole at the third try: taken, after two pauses.
        let mut tries = 0;
        let got = settle(|| {
            tries += 1;
            Ok(if tries < 3 {
                Err(Unsettled::Changed)
            } else {
                Ok(whole.clone())
            })
        });
        assert_eq!(got.ok(), Some(Ok(whole.clone())));
        assert_eq!(tries, 3);
        // Never whole: the last verdict, after one try per pause and one more.
        let mut tries = 0;
        let got = settle(|| {
            tries += 1;
            Ok(Err(Unsettled::NoFinalNewline))
        });
        assert_eq!(got.ok(), Some(Err(Unsettled::NoFinalNewline)));
        assert_eq!(tries, SETTLE_PAUSES.len() + 1);
        let total: Duration = SETTLE_PAUSES.iter().sum();
        assert!(total <= Duration::from_millis(50), "{total:?}");
        // Whole at once: one read, no pause.
        let mut tries = 0;
        let _ = settle(|| {
            tries += 1;
            Ok(Ok(whole.clone()))
        });
        assert_eq!(tries, 1);
    }

    #[test]
    fn the_watcher_never_loads_a_half_written_policy() {
        let (path, _dir) = temp_file("4\n");
        let mut w = WatchedFile::load(&path, parse_number).unwrap_or_else(|e| panic!("{e}"));
        let cur = w.current();
        // Cut mid-line ("20" being written as "2"): rejected, 4 stays.
        fs::write(&path, "2").unwrap_or_else(|e| panic!("{e}"));
        match w.poll() {
            PollOutcome::Rejected(m) => assert!(m.contains("no newline"), "{m}"),
            other => panic!("expected Rejected, got {other:?}"),
        }
        assert_eq!(*cur.get(), 4);
        // The rest written: the file changed, so it is read again.
        fs::write(&path, "20\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(w.poll(), PollOutcome::Reloaded);
        assert_eq!(*cur.get(), 20);
        let e = WatchedFile::load(
            &{
                fs::write(&path, "7").unwrap_or_else(|e| panic!("{e}"));
                path.clone()
            },
            parse_number,
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(e.contains("no newline"), "{e}");
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
