//! Waiting for a lock file, never without end.
//!
//! Every `flock` a prolog, epilog or SPANK step waits for (the ledger's,
//! a GPU's daemon lock, the configuration pointer's, the records of GPUs
//! set aside and of requeues) ends by a deadline: slurmd kills a prolog or
//! epilog that outruns `PrologEpilogTimeout`, and drains its node. A
//! prolog and an epilog share one budget, [`LOCK_WAIT`], over all their
//! waits ([`LockWait::budget`]); other callers give each wait that long
//! ([`LockWait::each`]). What a caller does when a wait runs out is its
//! own: a prolog refuses the share, an epilog leaves its release to the
//! ledger's next change (see `ledger`).
//!
//! A lock that is free is taken at once (`LOCK_NB`). One that is held is
//! waited for in the kernel, by a thread of the waiter's that blocks in
//! `flock` while the caller waits on it up to the deadline: no polling,
//! and Linux queues the waiters for one lock in the order they came (a
//! waiter that conflicts with an earlier one waits behind it), so a burst
//! of prologs takes the ledger in turn. A thread given up on still holds
//! the file: once it gets the lock it finds its caller gone and closes the
//! file, which releases it; a program that exits first releases it too.
//!
//! Each lock taken is tallied (how often, how long waited and held), for
//! the one line a node program logs at its end ([`summary`]).

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a prolog or an epilog waits for locks, all of them together;
/// any other caller, for each lock. Far above any hold in normal work (a
/// ledger transaction takes about a millisecond, a GPU's daemon start a
/// few control-program calls) and short beside `PrologEpilogTimeout`: a
/// wait this long means a hung holder, not a queue.
pub const LOCK_WAIT: Duration = Duration::from_secs(30);

/// How long the waits of one caller may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockWait {
    /// The end of a budget shared by every wait.
    until: Option<Instant>,
    /// The most any one wait takes.
    each: Duration,
}

impl LockWait {
    /// Each wait up to `limit`, on its own.
    pub const fn each(limit: Duration) -> Self {
        Self {
            until: None,
            each: limit,
        }
    }

    /// Every wait from now on, together, up to `limit`.
    pub fn budget(limit: Duration) -> Self {
        Self {
            until: Instant::now().checked_add(limit),
            each: limit,
        }
    }

    /// The same, no wait longer than `limit`.
    pub fn at_most(self, limit: Duration) -> Self {
        Self {
            each: self.each.min(limit),
            ..self
        }
    }

    /// When a wait that starts at `start` gives up.
    fn deadline(self, start: Instant) -> Instant {
        let each = start.checked_add(self.each).unwrap_or(start);
        self.until.map_or(each, |until| until.min(each))
    }
}

impl Default for LockWait {
    fn default() -> Self {
        Self::each(LOCK_WAIT)
    }
}

/// How a lock is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Shared,
    Exclusive,
}

/// A lock another process held for the whole of the wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Busy {
    /// Which lock, in words: `the node's share ledger lock`.
    pub what: String,
    pub path: PathBuf,
    pub waited: Duration,
}

impl fmt::Display for Busy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}) stayed held by another process for the {:.1} s this program waited for it",
            self.what,
            self.path.display(),
            self.waited.as_secs_f64()
        )
    }
}

/// Why a lock was not taken.
#[derive(Debug)]
pub enum LockError {
    Busy(Busy),
    Io { path: PathBuf, source: io::Error },
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Busy(busy) => busy.fmt(f),
            Self::Io { path, source } => write!(f, "lock {}: {source}", path.display()),
        }
    }
}

impl std::error::Error for LockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Busy(_) => None,
            Self::Io { source, .. } => Some(source),
        }
    }
}

/// Opens (creating, mode 0600) the lock file `path` in a checked
/// directory, never through a link: a file only ever `flock`ed, never
/// removed (see `ledger`'s module doc).
pub fn open_lock(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// A lock taken: released when dropped, its hold tallied.
#[derive(Debug)]
pub struct Held {
    file: File,
    what: String,
    since: Instant,
}

impl Held {
    /// Releases the lock now, saying whether the release failed.
    pub fn release(self) -> io::Result<()> {
        self.file.unlock()
    }

    /// The locked file, for [`relock`].
    pub fn file(&self) -> &File {
        &self.file
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.file.unlock();
        tally(&self.what, None, Some(self.since.elapsed()));
    }
}

/// Takes the lock of the file `path` (opened with [`open_lock`]) in
/// `mode`, waiting as `wait` allows; `what` names it in [`Busy`] and in the
/// tally.
pub fn lock(path: &Path, what: &str, mode: Mode, wait: LockWait) -> Result<Held, LockError> {
    let io = |source| LockError::Io {
        path: path.to_path_buf(),
        source,
    };
    let start = Instant::now();
    let file = open_lock(path).map_err(io)?;
    let file = match try_take(&file, mode) {
        Ok(true) => file,
        Ok(false) => wait_in_kernel(file, mode, wait.deadline(start)).map_err(|e| match e {
            Waited::Busy => {
                let waited = start.elapsed();
                tally(what, Some((waited, false)), None);
                LockError::Busy(Busy {
                    what: what.to_owned(),
                    path: path.to_path_buf(),
                    waited,
                })
            }
            Waited::Failed(source) => io(source),
        })?,
        Err(source) => return Err(io(source)),
    };
    let now = Instant::now();
    tally(what, Some((now.duration_since(start), true)), None);
    Ok(Held {
        file,
        what: what.to_owned(),
        since: now,
    })
}

/// Takes `file`'s lock in `mode` (converting the one it holds, which
/// Linux may drop while it converts), trying every few milliseconds until
/// `wait` runs out: for a file whose handle the caller keeps (the
/// configuration pointer's, held for a whole prolog). `false`: not taken.
pub fn relock(file: &File, mode: Mode, wait: LockWait) -> io::Result<bool> {
    let deadline = wait.deadline(Instant::now());
    let mut pause = Duration::from_millis(1);
    loop {
        if try_take(file, mode)? {
            return Ok(true);
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(false);
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// `Ok(false)`: another holds it.
fn try_take(file: &File, mode: Mode) -> io::Result<bool> {
    let tried = match mode {
        Mode::Shared => file.try_lock_shared(),
        Mode::Exclusive => file.try_lock(),
    };
    match tried {
        Ok(()) => Ok(true),
        Err(TryLockError::WouldBlock) => Ok(false),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

enum Waited {
    Busy,
    Failed(io::Error),
}

/// Waits for `file`'s lock in a thread blocked in `flock` (see the module
/// doc), up to `deadline`; where no thread can be started, by
/// [`relock`]'s tries.
fn wait_in_kernel(file: File, mode: Mode, deadline: Instant) -> Result<File, Waited> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(Waited::Busy);
    }
    let (tx, rx) = mpsc::channel();
    let spare = file.try_clone().map_err(Waited::Failed)?;
    let started = std::thread::Builder::new()
        .name("gpushare-lock".into())
        .spawn(move || {
            let locked = loop {
                let taken = match mode {
                    Mode::Shared => spare.lock_shared(),
                    Mode::Exclusive => spare.lock(),
                };
                match taken {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    other => break other,
                }
            };
            // The lock is the open file description's: a caller waiting
            // keeps it through its own handle; one that gave up has closed
            // that, so closing `spare`, the last, releases it.
            drop(spare);
            let _ = tx.send(locked);
        });
    if started.is_err() {
        return match relock(&file, mode, LockWait::each(left)) {
            Ok(true) => Ok(file),
            Ok(false) => Err(Waited::Busy),
            Err(e) => Err(Waited::Failed(e)),
        };
    }
    match rx.recv_timeout(left) {
        Ok(Ok(())) => Ok(file),
        Ok(Err(e)) => Err(Waited::Failed(e)),
        Err(mpsc::RecvTimeoutError::Timeout) => Err(Waited::Busy),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(Waited::Failed(io::Error::other(
            "the thread waiting for the lock ended",
        ))),
    }
}

/// What one lock cost this process so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Tally {
    taken: u32,
    gave_up: u32,
    waited: Duration,
    held: Duration,
    longest_wait: Duration,
}

/// Per lock, in words; a handful of names per process (the GPUs' locks
/// are one each), so it stays small in a long-lived slurmstepd too.
static TALLIES: Mutex<BTreeMap<String, Tally>> = Mutex::new(BTreeMap::new());

/// Counts a wait (`true`: the lock was taken) or a hold.
fn tally(what: &str, waited: Option<(Duration, bool)>, held: Option<Duration>) {
    let mut all = TALLIES.lock().unwrap_or_else(PoisonError::into_inner);
    let t = all.entry(what.to_owned()).or_default();
    if let Some((waited, taken)) = waited {
        if taken {
            t.taken = t.taken.saturating_add(1);
        } else {
            t.gave_up = t.gave_up.saturating_add(1);
        }
        t.waited = t.waited.saturating_add(waited);
        t.longest_wait = t.longest_wait.max(waited);
    }
    if let Some(held) = held {
        t.held = t.held.saturating_add(held);
    }
}

/// The locks this process waited for, one clause each: `the node's share
/// ledger lock taken 2 times, waited 0.120 ms (at most 0.100 ms), held
/// 1.532 ms`, and `, given up 1 time` where a wait ran out; `None` where
/// it waited for none.
pub fn summary() -> Option<String> {
    let all = TALLIES.lock().unwrap_or_else(PoisonError::into_inner);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let times = |n: u32| format!("{n} time{}", if n == 1 { "" } else { "s" });
    let clauses: Vec<String> = all
        .iter()
        .filter(|(_, t)| t.taken > 0 || t.gave_up > 0)
        .map(|(what, t)| {
            let mut clause = format!(
                "{what} taken {}, waited {:.3} ms (at most {:.3} ms), held {:.3} ms",
                times(t.taken),
                ms(t.waited),
                ms(t.longest_wait),
                ms(t.held)
            );
            if t.gave_up > 0 {
                clause.push_str(&format!(", given up {}", times(t.gave_up)));
            }
            clause
        })
        .collect();
    (!clauses.is_empty()).then(|| format!("locks: {}", clauses.join("; ")))
}

#[cfg(test)]
mod tests;
