//! The ledger in its state directory: opened (created with its first
//! state when missing), read without the lock, changed in a transaction
//! under an exclusive `flock` that publishes the views before it writes
//! the state file (see the ledger's docs, "Crash and race safety").

use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::format::{newer_version, ParseError};
use super::outcome::{LedgerError, Outcome, Repair};
use super::pending;
use super::per_gpu::Snapshot;
use super::records::{unix_now, LedgerState};
use crate::mps::lock_wait::{self, Held, LockError, LockWait, Mode};
use crate::mps::placement::{PlacementError, ServerRule};
use crate::mps::state_dir::{self, io_error, Access};

const STATE_FILE: &str = "state";
pub(super) const LOCK_FILE: &str = "lock";
pub(crate) const SET_ASIDE_PREFIX: &str = "state.corrupt-";

/// A file (or files) published from the state by every transaction that
/// changes it, under the ledger's lock, before the state file is written:
/// the world-readable status copy (`status::StatusCopy`), the DCGM job
/// mapping (`dcgm::JobMapping`). Views know the ledger; the ledger knows
/// them only through this trait.
pub trait View: fmt::Debug + Send + Sync {
    /// Publishes `state`.
    fn publish(&self, state: &LedgerState) -> Result<(), LedgerError>;
    /// Whether a failed publication fails the transaction (the status copy,
    /// which a lost state is rebuilt from, must never know less than the
    /// ledger); for the others it becomes a note of the outcome, and the
    /// next transaction publishes again.
    fn required(&self) -> bool {
        false
    }
    /// The records this view gives back for a lost state, and from where.
    fn recover(&self) -> Option<(LedgerState, PathBuf)> {
        None
    }
}

/// The node's ledger in its state directory.
#[derive(Debug, Clone)]
pub struct Ledger {
    dir: PathBuf,
    owner: u32,
    created: bool,
    views: Vec<Arc<dyn View>>,
    pub(super) rule: ServerRule,
    pub(super) share_memory: Option<ShareMemory>,
    lock_wait: LockWait,
}

/// The ledger's lock in words, as a refusal or the node's log names it.
pub const LOCK_WHAT: &str = "the node's share ledger lock";

/// The device memory limit (MiB) a new share of so many units gets,
/// recorded with it in its placing transaction.
#[derive(Clone)]
pub struct ShareMemory(pub Arc<dyn Fn(u32) -> Option<u64> + Send + Sync>);

impl fmt::Debug for ShareMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ShareMemory")
    }
}

impl Ledger {
    /// Opens the state directory, creating it (mode 0700, with an empty
    /// state) when missing, as after a reboot wiped `/run`. `owner` is the
    /// uid that must own it: the binaries pass their effective uid.
    pub fn open(dir: &Path, owner: u32) -> Result<Self, LedgerError> {
        let created = match fs::symlink_metadata(dir) {
            Ok(_) => false,
            Err(e) if e.kind() == io::ErrorKind::NotFound => create_with_state(dir, owner)?,
            Err(e) => return Err(io_error("inspect state directory", dir, e).into()),
        };
        if !created {
            state_dir::check_parents(dir, owner)?;
        }
        state_dir::check(dir, owner, Access::Private)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            owner,
            created,
            views: Vec::new(),
            rule: ServerRule::NONE,
            share_memory: None,
            lock_wait: LockWait::default(),
        })
    }

    /// Places shares under `rule` (one user per MPS server, clients per
    /// GPU) from now on; without it, the plain least-loaded choice.
    /// New shares get their memory limit from `limit` in the transaction
    /// that places them (one transaction per share start, not two).
    pub fn set_share_memory(&mut self, limit: ShareMemory) {
        self.share_memory = Some(limit);
    }

    /// Waits for the lock as `wait` allows from now on (a node program's
    /// budget); a wait that runs out is [`LedgerError::Busy`].
    pub fn set_lock_wait(&mut self, wait: LockWait) {
        self.lock_wait = wait;
    }

    /// How this ledger's callers wait for locks (the GPUs' daemon locks
    /// too): within the budget of the program that opened it.
    pub fn lock_wait(&self) -> LockWait {
        self.lock_wait
    }

    pub fn with_server_rule(mut self, rule: ServerRule) -> Self {
        self.rule = rule;
        self
    }

    /// Publishes `view` in every transaction that changes the state (a
    /// lost state is rebuilt from the first view that can give it back).
    pub fn with_view(mut self, view: Arc<dyn View>) -> Self {
        self.views.push(view);
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn state_path(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    /// The uid that owns the state.
    pub fn owner(&self) -> u32 {
        self.owner
    }

    /// The directory did not exist and [`Ledger::open`] created it; normal
    /// after a reboot, worth a log line.
    pub fn created(&self) -> bool {
        self.created
    }

    /// The state as it is now, without the lock: the file is only ever
    /// replaced by rename, so this sees a whole old or new version.
    pub fn snapshot(&self) -> Result<Snapshot, LedgerError> {
        let path = self.state_path();
        let state = match read_state(&path)? {
            None => return Err(LedgerError::Missing(path)),
            Some(Ok(state)) => state,
            Some(Err(reason)) => return Err(LedgerError::Corrupt(reason)),
        };
        let entries =
            fs::read_dir(&self.dir).map_err(|source| io_error("list", &self.dir, source))?;
        let mut set_aside_files = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| io_error("list", &self.dir, source))?;
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with(SET_ASIDE_PREFIX)
            {
                set_aside_files.push(entry.path());
            }
        }
        set_aside_files.sort();
        Ok(Snapshot {
            state,
            set_aside_files,
        })
    }

    /// Runs `f` on a [`Ledger::snapshot`] taken under the exclusive lock:
    /// what `f` publishes from it (the metrics file) is never overtaken by
    /// a change published before it. `f` may write files of its own in the
    /// state directory, never the state.
    pub fn with_lock<T>(
        &self,
        f: impl FnOnce(Result<Snapshot, LedgerError>) -> T,
    ) -> Result<T, LedgerError> {
        let lock = self.lock()?;
        let value = f(self.snapshot());
        self.unlock(lock)?;
        Ok(value)
    }

    /// Runs `change` on the state under the exclusive lock and writes the
    /// result back durably when it differs (or had to be repaired).
    pub(super) fn transact<T>(
        &self,
        change: impl FnOnce(&mut LedgerState) -> Result<T, PlacementError>,
    ) -> Result<Outcome<T>, LedgerError> {
        let lock = self.lock()?;
        let (mut state, repair) = match read_state(&self.state_path())? {
            Some(Ok(state)) => (state, None),
            Some(Err(reason)) => {
                let moved_to = self.set_aside_corrupt_state()?;
                self.rebuilt(format!("was unreadable ({reason})"), Some(moved_to))
            }
            None => self.rebuilt("was missing".to_owned(), None),
        };
        let before = state.clone();
        // Releases epilogs left to this transaction come first (pending.rs).
        let deferred = pending::read_all(&self.dir);
        let released = pending::apply_all(&deferred, &mut state);
        let value = match change(&mut state) {
            Ok(value) => value,
            Err(error) => {
                if repair.is_some() || !released.is_empty() {
                    self.write(&state)?;
                    pending::remove_all(&deferred);
                }
                return Err(LedgerError::Placement { error, repair });
            }
        };
        // Skipping the write keeps repeated calls (every step of a job, a
        // second epilog) cheap and leaves the file untouched.
        let notes = if state != before || repair.is_some() {
            self.write(&state)?
        } else {
            Vec::new()
        };
        pending::remove_all(&deferred);
        self.unlock(lock)?;
        Ok(Outcome {
            value,
            repair,
            notes,
            released,
        })
    }

    /// The state that replaces a lost one: the status copy's records, or an
    /// empty state marked lost.
    fn rebuilt(&self, reason: String, moved_to: Option<PathBuf>) -> (LedgerState, Option<Repair>) {
        let from_copy = self.views.iter().find_map(|v| v.recover());
        let (state, rebuilt_from) = match from_copy {
            Some((state, path)) => (state, Some(path)),
            None => (LedgerState::lost(format!("the state file {reason}")), None),
        };
        let repair = Repair {
            moved_to,
            reason,
            rebuilt_from,
        };
        (state, Some(repair))
    }

    /// Publishes the views, then the state: the status copy never knows
    /// less than the ledger, so a state rebuilt from it never under-counts a
    /// GPU. Returns what the optional views could not publish.
    fn write(&self, state: &LedgerState) -> Result<Vec<String>, LedgerError> {
        let mut notes = Vec::new();
        for view in &self.views {
            match view.publish(state) {
                Ok(()) => {}
                Err(e) if view.required() => return Err(e),
                Err(e) => notes.push(e.to_string()),
            }
        }
        state_dir::replace_file(&self.dir, STATE_FILE, state.to_json().as_bytes(), 0o600)?;
        Ok(notes)
    }

    /// The exclusive lock, waited for as [`Ledger::set_lock_wait`] says.
    fn lock(&self) -> Result<Held, LedgerError> {
        let path = self.dir.join(LOCK_FILE);
        lock_wait::lock(&path, LOCK_WHAT, Mode::Exclusive, self.lock_wait).map_err(|e| match e {
            LockError::Busy(busy) => LedgerError::Busy(busy),
            LockError::Io { path, source } => io_error("lock", &path, source).into(),
        })
    }

    fn unlock(&self, lock: Held) -> Result<(), LedgerError> {
        lock.release()
            .map_err(|e| io_error("unlock", &self.dir.join(LOCK_FILE), e).into())
    }

    /// Moves the unreadable state file to a fresh `state.corrupt-<unixtime>`
    /// name (with `-N` added when that exists) so an admin can inspect it.
    fn set_aside_corrupt_state(&self) -> Result<PathBuf, LedgerError> {
        let stem = format!("{SET_ASIDE_PREFIX}{}", unix_now());
        let mut target = self.dir.join(&stem);
        let mut attempt: u32 = 0;
        // Under the lock no other writer names files here, so a free name
        // stays free until the rename.
        while fs::symlink_metadata(&target).is_ok() {
            attempt = attempt.saturating_add(1);
            target = self.dir.join(format!("{stem}-{attempt}"));
        }
        let path = self.state_path();
        fs::rename(&path, &target)
            .map_err(|source| io_error("move aside unreadable state file", &path, source))?;
        state_dir::sync_dir(&self.dir)?;
        Ok(target)
    }
}

/// Creates `dir` with an empty state already inside, by building it under
/// a temporary name beside it and renaming it into place. Returns whether
/// this call made it (false: another process did at the same time).
fn create_with_state(dir: &Path, owner: u32) -> Result<bool, LedgerError> {
    let parent = dir.parent().unwrap_or(Path::new("/"));
    fs::create_dir_all(parent).map_err(|e| io_error("create", parent, e))?;
    state_dir::check_parents(dir, owner)?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // A fresh random name (mode 0700) per attempt: concurrent first prologs
    // each build their own and one rename wins.
    let temp = tempfile::Builder::new()
        .prefix(&format!(".{name}.new-"))
        .tempdir_in(parent)
        .map_err(|e| io_error("create a directory in", parent, e))?;
    fs::set_permissions(temp.path(), fs::Permissions::from_mode(0o700))
        .map_err(|e| io_error("set the mode of", temp.path(), e))?;
    state_dir::check(temp.path(), owner, Access::Private)?;
    state_dir::replace_file(
        temp.path(),
        STATE_FILE,
        LedgerState::new().to_json().as_bytes(),
        0o600,
    )?;
    match fs::rename(temp.path(), dir) {
        Ok(()) => {
            // Renamed away: nothing left for the guard to remove.
            let _ = temp.keep();
            state_dir::sync_dir(parent)?;
            Ok(true)
        }
        Err(_) if fs::symlink_metadata(dir).is_ok() => Ok(false),
        Err(e) => Err(io_error("create state directory", dir, e).into()),
    }
}

/// `None` when there is no state file.
fn read_state(path: &Path) -> Result<Option<Result<LedgerState, ParseError>>, LedgerError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(io_error("read", path, source).into()),
    };
    if let Some(version) = newer_version(&bytes) {
        return Err(LedgerError::TooNew {
            path: path.to_path_buf(),
            version,
        });
    }
    Ok(Some(match String::from_utf8(bytes) {
        Ok(text) => LedgerState::parse(&text, path),
        Err(e) => {
            let valid = e
                .as_bytes()
                .get(..e.utf8_error().valid_up_to())
                .unwrap_or_default();
            let line = 1 + valid.iter().filter(|b| **b == b'\n').count();
            Err(ParseError {
                file: path.to_path_buf(),
                line,
                problem: "not UTF-8 text".to_string(),
            })
        }
    }))
}

#[cfg(test)]
pub(crate) mod tests;
