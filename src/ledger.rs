//! The node's MPS sharing state on disk: which job holds how many units on
//! which GPU and for whom, and which jobs hold GPUs whole.
//!
//! Who uses it: the slurmd prolog (`gpu-mps-prolog`) reconciles it and
//! records whole-GPU holders; the prolog or the SPANK plugin in slurmstepd
//! places a job's share (once per job: every later step gets the same GPU
//! back); the epilog (`gpu-mps-epilog`) releases the job; the `gpu-mps`
//! admin command shows a [`Snapshot`] and runs `gc` ([`Ledger::reconcile`]).
//!
//! # Crash and race safety
//!
//! Every change is one transaction: an exclusive `flock` on `lock`, read
//! `state`, apply the change, write `state.new`, fsync it, rename it over
//! `state`, fsync the directory, unlock. Concurrent job starts therefore see
//! each other's placements and never over-fill a GPU, and a crash at any
//! point leaves either the old or the new `state` in place; readers
//! ([`Ledger::snapshot`]) take no lock and always see a whole file. A leftover
//! `state.new` is never read and is replaced by the next write. The lock file
//! is never removed: removing a file others may hold a `flock` on would let
//! two writers each lock a different inode.
//!
//! The directory must be owned by the caller's uid and closed to group and
//! others (it is created so when missing, as after a reboot wiped `/run`);
//! then nobody else can plant links or files in it, which is why the files
//! inside are opened without further checks.
//!
//! # State file format (`state`)
//!
//! Plain text, one record per line, fields `key=value` separated by spaces,
//! every line ending in a newline (a missing final newline means the file
//! was cut short):
//!
//! ```text
//! gpushare-mps-ledger version=1
//! share job=123 uid=1000 user=alice gpu=2 units=50 since=1700000000
//! whole job=124 gpus=1,3 since=1700000005
//! ```
//!
//! - Line 1 is the header; another version is refused, not guessed at.
//! - `share`: job `job` of user `user` (uid `uid`) holds `units` (≥ 1) MPS
//!   units on GPU `gpu` (its index on the node) since `since` (Unix seconds).
//! - `whole`: job `job` holds the listed GPUs whole (gpu GRES), so no share
//!   goes there; the list is non-empty, comma separated, without repeats.
//! - A job has at most one record of each kind. Keys may come in any order;
//!   each must appear exactly once and no other key is allowed. Numbers are
//!   plain decimal digits. In `user`, `%`, spaces, control and non-ASCII
//!   bytes are written as `%XX` (UTF-8 bytes), so any name fits one field.
//! - Blank lines and lines starting with `#` are ignored (the writer emits
//!   neither).
//!
//! Parsing is strict and errors name `file:line`. A state file that cannot be
//! parsed is never dropped silently: the next transaction moves it to
//! `state.corrupt-<unixtime>`, reports that in its [`Outcome`], and starts
//! from an empty state; [`Snapshot::set_aside_files`] keeps listing such
//! files until an admin removes them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::placement::{self, GpuLoad, PlacementError, MAX_GPUS_PER_NODE};

/// Where the state lives unless `StateDir=` in `gpu_mps.conf` says otherwise.
pub const DEFAULT_STATE_DIR: &str = "/run/gpu-mps";

const STATE_FILE: &str = "state";
const TEMP_FILE: &str = "state.new";
const LOCK_FILE: &str = "lock";
const SET_ASIDE_PREFIX: &str = "state.corrupt-";
const HEADER_KEYWORD: &str = "gpushare-mps-ledger";
const FORMAT_VERSION: u32 = 1;

/// One job's MPS share on one GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareRecord {
    pub job: u32,
    pub uid: u32,
    pub user: String,
    /// The GPU's index on the node.
    pub gpu: u32,
    pub units: u32,
    /// When the share was placed, in Unix seconds.
    pub since: u64,
}

/// A job holding GPUs whole (gpu GRES), as named by its Prolog environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WholeRecord {
    pub job: u32,
    /// Indices on the node, ascending, without repeats, never empty.
    pub gpus: Vec<u32>,
    /// When the holder was recorded, in Unix seconds.
    pub since: u64,
}

/// Either kind of record, as released or reconciled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Share(ShareRecord),
    Whole(WholeRecord),
}

impl Record {
    pub fn job(&self) -> u32 {
        match self {
            Self::Share(share) => share.job,
            Self::Whole(whole) => whole.job,
        }
    }
}

/// The line of the state file, without its newline; also what the prolog
/// and `gpu-mps gc` log for a dropped record.
impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Share(s) => write!(
                f,
                "share job={} uid={} user={} gpu={} units={} since={}",
                s.job,
                s.uid,
                encode_user(&s.user),
                s.gpu,
                s.units,
                s.since
            ),
            Self::Whole(w) => {
                let gpus: Vec<String> = w.gpus.iter().map(u32::to_string).collect();
                write!(
                    f,
                    "whole job={} gpus={} since={}",
                    w.job,
                    gpus.join(","),
                    w.since
                )
            }
        }
    }
}

/// The whole sharing state of the node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerState {
    shares: BTreeMap<u32, ShareRecord>,
    whole: BTreeMap<u32, WholeRecord>,
}

impl LedgerState {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.shares.is_empty() && self.whole.is_empty()
    }

    /// The share of `job`, if it has one: how a later step finds its GPU.
    pub fn share(&self, job: u32) -> Option<&ShareRecord> {
        self.shares.get(&job)
    }

    pub fn whole_holder(&self, job: u32) -> Option<&WholeRecord> {
        self.whole.get(&job)
    }

    /// Shares in job order.
    pub fn shares(&self) -> impl Iterator<Item = &ShareRecord> {
        self.shares.values()
    }

    /// Whole-GPU holders in job order.
    pub fn whole_holders(&self) -> impl Iterator<Item = &WholeRecord> {
        self.whole.values()
    }

    /// Adds or replaces the share of `share.job`; returns the one replaced.
    pub fn insert_share(&mut self, share: ShareRecord) -> Option<ShareRecord> {
        self.shares.insert(share.job, share)
    }

    /// Adds or replaces the whole-GPU record of `whole.job`, keeping its GPU
    /// list ascending and without repeats; returns the one replaced.
    pub fn insert_whole(&mut self, mut whole: WholeRecord) -> Option<WholeRecord> {
        whole.gpus.sort_unstable();
        whole.gpus.dedup();
        self.whole.insert(whole.job, whole)
    }

    /// Removes every record of `job` (share first, then whole).
    pub fn remove_job(&mut self, job: u32) -> Vec<Record> {
        let share = self.shares.remove(&job).map(Record::Share);
        let whole = self.whole.remove(&job).map(Record::Whole);
        share.into_iter().chain(whole).collect()
    }

    /// The load of GPUs `0..gpu_count` (at most [`MAX_GPUS_PER_NODE`]) for
    /// [`placement::choose_gpu`]. Records on GPUs beyond the count (the
    /// configuration shrank) are ignored: no share can be placed there anyway.
    pub fn gpu_loads(&self, gpu_count: u32) -> Vec<GpuLoad> {
        let mut loads = vec![GpuLoad::default(); index(gpu_count.min(MAX_GPUS_PER_NODE))];
        for share in self.shares.values() {
            if let Some(load) = loads.get_mut(index(share.gpu)) {
                load.used_units = load.used_units.saturating_add(share.units);
                load.share_jobs = load.share_jobs.saturating_add(1);
            }
        }
        for gpu in self.whole.values().flat_map(|whole| &whole.gpus) {
            if let Some(load) = loads.get_mut(index(*gpu)) {
                load.held_whole = true;
            }
        }
        loads
    }

    /// One entry per GPU for display: GPUs `0..gpu_count`, plus any GPU a
    /// record names beyond that (marked not configured), in index order.
    pub fn per_gpu(&self, gpu_count: u32, units_per_gpu: u32) -> Vec<GpuView> {
        let mut views: BTreeMap<u32, GpuView> = BTreeMap::new();
        // Capped so a bad count cannot build a huge table; GPUs that records
        // name are added below whatever the cap.
        for gpu in 0..gpu_count.min(MAX_GPUS_PER_NODE) {
            views.insert(gpu, GpuView::empty(gpu, true));
        }
        for share in self.shares.values() {
            let view = views
                .entry(share.gpu)
                .or_insert_with(|| GpuView::empty(share.gpu, false));
            view.used_units = view.used_units.saturating_add(share.units);
            view.shares.push(share.clone());
        }
        for whole in self.whole.values() {
            for gpu in &whole.gpus {
                views
                    .entry(*gpu)
                    .or_insert_with(|| GpuView::empty(*gpu, false))
                    .whole_jobs
                    .push(whole.job);
            }
        }
        views
            .into_values()
            .map(|mut view| {
                view.free_units = units_per_gpu.saturating_sub(view.used_units);
                view.over_capacity = view.used_units > units_per_gpu;
                view.overlap = !view.shares.is_empty() && !view.whole_jobs.is_empty();
                view
            })
            .collect()
    }

    /// Parses the text of a state file; `file` only names it in errors.
    pub fn parse(text: &str, file: &Path) -> Result<Self, ParseError> {
        let error = |line: usize, problem: String| ParseError {
            file: file.to_path_buf(),
            line,
            problem,
        };
        if text.is_empty() {
            return Err(error(
                1,
                format!(
                    "empty file: expected the header `{HEADER_KEYWORD} version={FORMAT_VERSION}`"
                ),
            ));
        }
        let lines: Vec<&str> = text.split('\n').collect();
        if !text.ends_with('\n') {
            return Err(error(
                lines.len(),
                "the last line has no newline: the file was cut short".to_string(),
            ));
        }
        let mut state = Self::new();
        // Where each job's record was, to name both lines of a duplicate.
        let mut share_lines: BTreeMap<u32, usize> = BTreeMap::new();
        let mut whole_lines: BTreeMap<u32, usize> = BTreeMap::new();
        // The split leaves an empty piece after the final newline.
        let body = lines.len().saturating_sub(1);
        for (number, line) in lines
            .iter()
            .take(body)
            .enumerate()
            .map(|(i, l)| (i + 1, *l))
        {
            if number == 1 {
                parse_header(line).map_err(|problem| error(number, problem))?;
                continue;
            }
            let trimmed = line.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            match parse_record(trimmed).map_err(|problem| error(number, problem))? {
                Record::Share(share) => {
                    if let Some(first) = share_lines.insert(share.job, number) {
                        return Err(error(
                            number,
                            format!(
                                "job {} already has a share record on line {first}",
                                share.job
                            ),
                        ));
                    }
                    state.insert_share(share);
                }
                Record::Whole(whole) => {
                    if let Some(first) = whole_lines.insert(whole.job, number) {
                        return Err(error(
                            number,
                            format!(
                                "job {} already has a whole record on line {first}",
                                whole.job
                            ),
                        ));
                    }
                    state.insert_whole(whole);
                }
            }
        }
        Ok(state)
    }

    /// The text of a state file holding this state (see the module docs).
    pub fn to_text(&self) -> String {
        let mut text = format!("{HEADER_KEYWORD} version={FORMAT_VERSION}\n");
        let shares = self.shares.values().cloned().map(Record::Share);
        let whole = self.whole.values().cloned().map(Record::Whole);
        for record in shares.chain(whole) {
            text.push_str(&record.to_string());
            text.push('\n');
        }
        text
    }
}

/// One GPU as `gpu-mps status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuView {
    pub index: u32,
    pub used_units: u32,
    /// `UnitsPerGPU` minus used, never below 0.
    pub free_units: u32,
    /// Shares on this GPU, in job order.
    pub shares: Vec<ShareRecord>,
    /// Jobs holding this GPU whole.
    pub whole_jobs: Vec<u32>,
    /// Shares and a whole holder at once: Slurm 22.05's books put every
    /// share on GPU 0, so it can hand this GPU whole to a job anyway.
    pub overlap: bool,
    /// More units than `UnitsPerGPU` (it was lowered while jobs ran).
    pub over_capacity: bool,
    /// Within the configured GPU count; `false` for a GPU only a record
    /// names (the configuration shrank, or the state is from another setup).
    pub configured: bool,
}

impl GpuView {
    fn empty(index: u32, configured: bool) -> Self {
        Self {
            index,
            used_units: 0,
            free_units: 0,
            shares: Vec::new(),
            whole_jobs: Vec::new(),
            overlap: false,
            over_capacity: false,
            configured,
        }
    }
}

/// The state as a reader saw it, for display.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub state: LedgerState,
    /// Unreadable state files moved aside earlier, waiting for an admin.
    pub set_aside_files: Vec<PathBuf>,
}

impl Snapshot {
    /// The per-GPU view (see [`LedgerState::per_gpu`]).
    pub fn gpus(&self, gpu_count: u32, units_per_gpu: u32) -> Vec<GpuView> {
        self.state.per_gpu(gpu_count, units_per_gpu)
    }
}

/// A state file that did not parse: `file:line: problem`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub file: PathBuf,
    /// 1-based.
    pub line: usize,
    pub problem: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file.display(), self.line, self.problem)
    }
}

impl std::error::Error for ParseError {}

/// An unreadable state file that a transaction moved aside before starting
/// from an empty state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAside {
    pub moved_to: PathBuf,
    pub reason: ParseError,
}

impl fmt::Display for SetAside {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the MPS state file was unreadable ({}); it was moved to {} and the state \
             started empty, so shares placed before are no longer counted",
            self.reason,
            self.moved_to.display()
        )
    }
}

/// What a transaction returned, and whether it had to set a corrupt state
/// file aside first (callers log that).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome<T> {
    pub value: T,
    pub set_aside: Option<SetAside>,
}

/// The result of [`Ledger::place`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// The job's record; `share.gpu` is its GPU.
    pub share: ShareRecord,
    /// The job already had a share (a later step, or a repeated call), which
    /// is returned unchanged.
    pub already_recorded: bool,
}

/// Why the ledger could not be used or changed.
#[derive(Debug)]
pub enum LedgerError {
    /// The state directory is a symbolic link.
    DirIsSymlink { dir: PathBuf },
    /// The state directory path names something else than a directory.
    NotADirectory { dir: PathBuf },
    /// The state directory belongs to another user.
    DirWrongOwner {
        dir: PathBuf,
        owner: u32,
        expected: u32,
    },
    /// The state directory grants group or other users access.
    DirOpenToOthers { dir: PathBuf, mode: u32 },
    /// A file system call failed.
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// A reader found a state file it cannot parse (readers never move it).
    Corrupt(ParseError),
    /// No GPU could take the share; the state is unchanged, except that an
    /// unreadable state file may have been set aside first.
    Placement {
        error: PlacementError,
        set_aside: Option<SetAside>,
    },
    /// [`Ledger::record_whole`] was given no GPUs.
    NoWholeGpus { job: u32 },
}

impl fmt::Display for LedgerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DirIsSymlink { dir } => write!(
                f,
                "MPS state directory {} is a symbolic link; refusing to use it \
                 (it must be a real directory with mode 0700; remove the link and \
                 gpushare creates the directory)",
                dir.display()
            ),
            Self::NotADirectory { dir } => write!(
                f,
                "MPS state directory {} exists but is not a directory; refusing to use it \
                 (remove it, or point StateDir in gpu_mps.conf elsewhere)",
                dir.display()
            ),
            Self::DirWrongOwner {
                dir,
                owner,
                expected,
            } => write!(
                f,
                "MPS state directory {} is owned by uid {owner}, not uid {expected}; \
                 refusing to use it (another user could change the sharing state: \
                 chown {expected} it, or remove it and gpushare recreates it)",
                dir.display()
            ),
            Self::DirOpenToOthers { dir, mode } => write!(
                f,
                "MPS state directory {} has mode {mode:04o}, which gives group or other \
                 users access; refusing to use it (run: chmod 0700 {})",
                dir.display(),
                dir.display()
            ),
            Self::Io {
                action,
                path,
                source,
            } => write!(f, "cannot {action} {}: {source}", path.display()),
            Self::Corrupt(reason) => write!(
                f,
                "MPS state file is unreadable: {reason} (the next prolog, epilog or \
                 `gpu-mps gc` moves it aside and starts empty)"
            ),
            Self::Placement { error, set_aside } => {
                write!(f, "{error}")?;
                if let Some(set_aside) = set_aside {
                    write!(f, "; also, {set_aside}")?;
                }
                Ok(())
            }
            Self::NoWholeGpus { job } => write!(
                f,
                "job {job} was to be recorded as holding GPUs whole, but no GPU was named"
            ),
        }
    }
}

impl std::error::Error for LedgerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            Self::Corrupt(reason) => Some(reason),
            Self::Placement { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// The node's ledger in its state directory.
#[derive(Debug, Clone)]
pub struct Ledger {
    dir: PathBuf,
    created: bool,
}

impl Ledger {
    /// Opens the state directory, creating it (mode 0700) when missing, as
    /// after a reboot wiped `/run`. `expected_owner` is the uid that must own
    /// it: the binaries pass their effective uid.
    pub fn open(dir: &Path, expected_owner: u32) -> Result<Self, LedgerError> {
        let created = match fs::symlink_metadata(dir) {
            Ok(_) => false,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                create_private_dir(dir)?;
                true
            }
            Err(source) => return Err(io_error("inspect state directory", dir, source)),
        };
        let meta = fs::symlink_metadata(dir)
            .map_err(|source| io_error("inspect state directory", dir, source))?;
        let dir_buf = dir.to_path_buf();
        if meta.file_type().is_symlink() {
            return Err(LedgerError::DirIsSymlink { dir: dir_buf });
        }
        if !meta.is_dir() {
            return Err(LedgerError::NotADirectory { dir: dir_buf });
        }
        if meta.uid() != expected_owner {
            return Err(LedgerError::DirWrongOwner {
                dir: dir_buf,
                owner: meta.uid(),
                expected: expected_owner,
            });
        }
        let mode = meta.mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(LedgerError::DirOpenToOthers { dir: dir_buf, mode });
        }
        Ok(Self {
            dir: dir_buf,
            created,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn state_path(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    /// The directory did not exist and [`Ledger::open`] created it; normal
    /// after a reboot, worth a log line.
    pub fn created(&self) -> bool {
        self.created
    }

    /// Places `job`'s share of `units` on the least-loaded GPU among
    /// `0..gpu_count` that no job holds whole, and records it. A job that
    /// already has a share gets it back unchanged, whatever it asks now.
    pub fn place(
        &self,
        job: u32,
        uid: u32,
        user: &str,
        units: u32,
        gpu_count: u32,
        units_per_gpu: u32,
    ) -> Result<Outcome<Placed>, LedgerError> {
        self.transact(|state| {
            if let Some(share) = state.share(job) {
                return Ok(Placed {
                    share: share.clone(),
                    already_recorded: true,
                });
            }
            if gpu_count > MAX_GPUS_PER_NODE {
                return Err(PlacementError::TooManyGpus { gpu_count });
            }
            let chosen = placement::choose_gpu(&state.gpu_loads(gpu_count), units_per_gpu, units)?;
            let gpu =
                u32::try_from(chosen).map_err(|_| PlacementError::TooManyGpus { gpu_count })?;
            let share = ShareRecord {
                job,
                uid,
                user: user.to_string(),
                gpu,
                units,
                since: unix_now(),
            };
            state.insert_share(share.clone());
            Ok(Placed {
                share,
                already_recorded: false,
            })
        })
    }

    /// Removes every record of `job` and returns them; releasing a job that
    /// has none (a second epilog) changes nothing.
    pub fn release(&self, job: u32) -> Result<Outcome<Vec<Record>>, LedgerError> {
        self.transact(|state| Ok(state.remove_job(job)))
    }

    /// Records that `job` holds `gpus` whole, so no share goes there while
    /// it runs. Returns the shares already on those GPUs (an overlap Slurm
    /// created; callers log it). Recording again replaces the GPU list and
    /// keeps the first time.
    pub fn record_whole(
        &self,
        job: u32,
        gpus: &[u32],
    ) -> Result<Outcome<Vec<ShareRecord>>, LedgerError> {
        if gpus.is_empty() {
            return Err(LedgerError::NoWholeGpus { job });
        }
        self.transact(|state| {
            let since = state
                .whole_holder(job)
                .map_or_else(unix_now, |earlier| earlier.since);
            state.insert_whole(WholeRecord {
                job,
                gpus: gpus.to_vec(),
                since,
            });
            let held: BTreeSet<u32> = gpus.iter().copied().collect();
            Ok(state
                .shares()
                .filter(|share| share.job != job && held.contains(&share.gpu))
                .cloned()
                .collect())
        })
    }

    /// Drops the records of every job for which `is_running` says no, and
    /// returns them. It runs under the lock: pass a lookup in a list taken
    /// beforehand, not a query to slurmctld. The prolog must answer yes for
    /// its own job.
    pub fn reconcile(
        &self,
        mut is_running: impl FnMut(u32) -> bool,
    ) -> Result<Outcome<Vec<Record>>, LedgerError> {
        self.transact(|state| {
            let jobs: BTreeSet<u32> = state
                .shares
                .keys()
                .chain(state.whole.keys())
                .copied()
                .collect();
            Ok(jobs
                .into_iter()
                .filter(|job| !is_running(*job))
                .flat_map(|job| state.remove_job(job))
                .collect())
        })
    }

    /// The state as it is now, without the lock: the file is only ever
    /// replaced by rename, so this sees a whole old or new version.
    pub fn snapshot(&self) -> Result<Snapshot, LedgerError> {
        let path = self.state_path();
        let state = match read_state(&path)? {
            None => LedgerState::new(),
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

    /// Runs `change` on the state under the exclusive lock and writes the
    /// result back durably when it differs.
    fn transact<T>(
        &self,
        change: impl FnOnce(&mut LedgerState) -> Result<T, PlacementError>,
    ) -> Result<Outcome<T>, LedgerError> {
        let lock = self.lock()?;
        let path = self.state_path();
        let (mut state, set_aside) = match read_state(&path)? {
            None => (LedgerState::new(), None),
            Some(Ok(state)) => (state, None),
            Some(Err(reason)) => {
                let moved_to = self.set_aside_corrupt_state()?;
                (LedgerState::new(), Some(SetAside { moved_to, reason }))
            }
        };
        let before = state.clone();
        let value = match change(&mut state) {
            Ok(value) => value,
            Err(error) => return Err(LedgerError::Placement { error, set_aside }),
        };
        // Skipping the write keeps repeated calls (every step of a job, a
        // second epilog) cheap and leaves the file untouched.
        if state != before {
            self.write_state(&state)?;
        }
        unlock(&lock, &self.dir.join(LOCK_FILE))?;
        Ok(Outcome { value, set_aside })
    }

    fn lock(&self) -> Result<File, LedgerError> {
        let path = self.dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|source| io_error("open lock file", &path, source))?;
        loop {
            match file.lock() {
                Ok(()) => return Ok(file),
                // A signal to slurmstepd must not fail the job's placement.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => return Err(io_error("lock", &path, source)),
            }
        }
    }

    fn write_state(&self, state: &LedgerState) -> Result<(), LedgerError> {
        let temp = self.dir.join(TEMP_FILE);
        // A leftover from a write cut short by a crash; never read, replaced here.
        remove_if_present(&temp)?;
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .map_err(|source| io_error("create", &temp, source))?;
        file.write_all(state.to_text().as_bytes())
            .map_err(|source| io_error("write", &temp, source))?;
        file.sync_all()
            .map_err(|source| io_error("fsync", &temp, source))?;
        drop(file);
        let path = self.state_path();
        fs::rename(&temp, &path).map_err(|source| io_error("rename into place", &path, source))?;
        sync_dir(&self.dir)
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
        sync_dir(&self.dir)?;
        Ok(target)
    }
}

/// `None` when there is no state file (a fresh node or one just rebooted).
fn read_state(path: &Path) -> Result<Option<Result<LedgerState, ParseError>>, LedgerError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(io_error("read", path, source)),
    };
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

fn parse_header(line: &str) -> Result<(), String> {
    let expected = format!("expected the header `{HEADER_KEYWORD} version={FORMAT_VERSION}`");
    let mut words = line.split_ascii_whitespace();
    if words.next() != Some(HEADER_KEYWORD) {
        return Err(format!("{expected}, found `{line}`"));
    }
    let version = match (words.next(), words.next()) {
        (Some(word), None) => word.strip_prefix("version=").map(parse_number::<u32>),
        _ => None,
    };
    match version {
        Some(Ok(FORMAT_VERSION)) => Ok(()),
        Some(Ok(other)) => Err(format!(
            "state format version {other} is not supported by this gpushare (it reads version {FORMAT_VERSION})"
        )),
        _ => Err(format!("{expected}, found `{line}`")),
    }
}

/// The `key=value` fields of one record, each to be taken exactly once.
struct Fields<'a> {
    fields: Vec<(&'a str, &'a str)>,
}

impl<'a> Fields<'a> {
    fn parse(words: impl Iterator<Item = &'a str>) -> Result<Self, String> {
        let mut fields: Vec<(&str, &str)> = Vec::new();
        for word in words {
            let (key, value) = word
                .split_once('=')
                .ok_or_else(|| format!("`{word}` is not key=value"))?;
            if fields.iter().any(|(seen, _)| *seen == key) {
                return Err(format!("`{key}` appears twice"));
            }
            fields.push((key, value));
        }
        Ok(Self { fields })
    }

    fn take(&mut self, key: &str) -> Result<&'a str, String> {
        let position = self
            .fields
            .iter()
            .position(|(seen, _)| *seen == key)
            .ok_or_else(|| format!("`{key}=` is missing"))?;
        Ok(self.fields.remove(position).1)
    }

    fn take_number<N: std::str::FromStr>(&mut self, key: &str) -> Result<N, String> {
        let value = self.take(key)?;
        parse_number(value).map_err(|problem| format!("`{key}={value}`: {problem}"))
    }

    fn finish(self) -> Result<(), String> {
        match self.fields.first() {
            None => Ok(()),
            Some((key, _)) => Err(format!("unknown key `{key}`")),
        }
    }
}

/// Plain decimal digits only: `str::parse` would also take a sign.
fn parse_number<N: std::str::FromStr>(text: &str) -> Result<N, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err("not a number".to_string());
    }
    text.parse().map_err(|_| "number too large".to_string())
}

fn parse_record(line: &str) -> Result<Record, String> {
    let mut words = line.split_ascii_whitespace();
    let kind = words.next().unwrap_or_default();
    let mut fields = Fields::parse(words)?;
    let record = match kind {
        "share" => {
            let share = ShareRecord {
                job: fields.take_number("job")?,
                uid: fields.take_number("uid")?,
                user: decode_user(fields.take("user")?)?,
                gpu: fields.take_number("gpu")?,
                units: fields.take_number("units")?,
                since: fields.take_number("since")?,
            };
            if share.units == 0 {
                return Err("`units=0`: a share holds at least 1 unit".to_string());
            }
            Record::Share(share)
        }
        "whole" => {
            let job = fields.take_number("job")?;
            let list = fields.take("gpus")?;
            let mut gpus = Vec::new();
            for item in list.split(',') {
                let gpu: u32 =
                    parse_number(item).map_err(|problem| format!("`gpus={list}`: {problem}"))?;
                if gpus.contains(&gpu) {
                    return Err(format!("`gpus={list}`: GPU {gpu} is listed twice"));
                }
                gpus.push(gpu);
            }
            gpus.sort_unstable();
            Record::Whole(WholeRecord {
                job,
                gpus,
                since: fields.take_number("since")?,
            })
        }
        other => {
            return Err(format!(
                "unknown record kind `{other}` (expected `share` or `whole`)"
            ))
        }
    };
    fields.finish()?;
    Ok(record)
}

/// Keeps a user name in one field whatever it holds (directory-service
/// names can have spaces or non-ASCII letters).
fn encode_user(user: &str) -> String {
    let mut encoded = String::with_capacity(user.len());
    for byte in user.bytes() {
        if byte.is_ascii_graphic() && byte != b'%' {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

fn decode_user(encoded: &str) -> Result<String, String> {
    let problem = || format!("`user={encoded}`: bad %XX escape");
    let mut bytes = Vec::with_capacity(encoded.len());
    let mut rest = encoded.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let hex = tail.get(..2).ok_or_else(problem)?;
            let hex = std::str::from_utf8(hex).map_err(|_| problem())?;
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(problem());
            }
            bytes.push(u8::from_str_radix(hex, 16).map_err(|_| problem())?);
            rest = tail.get(2..).unwrap_or_default();
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    String::from_utf8(bytes).map_err(|_| format!("`user={encoded}`: not UTF-8 once decoded"))
}

fn create_private_dir(dir: &Path) -> Result<(), LedgerError> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| io_error("create state directory", dir, source))?;
    let meta = fs::symlink_metadata(dir)
        .map_err(|source| io_error("inspect state directory", dir, source))?;
    // The umask may have taken bits the owner needs; only fix a directory
    // that is really one (the checks in `open` refuse anything else).
    if meta.is_dir() && !meta.file_type().is_symlink() {
        fs::set_permissions(dir, Permissions::from_mode(0o700))
            .map_err(|source| io_error("set mode 0700 on state directory", dir, source))?;
    }
    Ok(())
}

fn remove_if_present(path: &Path) -> Result<(), LedgerError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(io_error("remove leftover", path, source)),
    }
}

/// Makes a rename in `dir` durable: without it a crash can bring back the
/// old directory entry.
fn sync_dir(dir: &Path) -> Result<(), LedgerError> {
    File::open(dir)
        .and_then(|handle| handle.sync_all())
        .map_err(|source| io_error("fsync directory", dir, source))
}

fn unlock(lock: &File, path: &Path) -> Result<(), LedgerError> {
    lock.unlock()
        .map_err(|source| io_error("unlock", path, source))
}

fn io_error(action: &'static str, path: &Path, source: io::Error) -> LedgerError {
    LedgerError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

/// A GPU index as a position in a per-GPU table. `u32` always fits `usize`
/// on the 64-bit targets Slurm runs on; saturating keeps other targets safe.
fn index(gpu: u32) -> usize {
    usize::try_from(gpu).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    /// A directory of its own per test, removed even when the test fails.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = std::env::temp_dir()
                .join(format!("gpushare-ledger-{}-{n}-{name}", std::process::id()));
            let _ = fs::remove_dir_all(&path);
            fs::create_dir_all(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            Self(path)
        }

        fn owner(&self) -> u32 {
            fs::metadata(&self.0)
                .map(|m| m.uid())
                .unwrap_or_else(|e| panic!("{e}"))
        }

        /// A ledger in `<temp>/gpu-mps`, created by `open` as on a fresh boot.
        fn ledger(&self) -> Ledger {
            Ledger::open(&self.0.join("gpu-mps"), self.owner()).unwrap_or_else(|e| panic!("{e}"))
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn ok<T>(result: Result<T, LedgerError>) -> T {
        result.unwrap_or_else(|e| panic!("{e}"))
    }

    fn place(ledger: &Ledger, job: u32, units: u32) -> u32 {
        ok(ledger.place(job, 1000 + job, &format!("user{job}"), units, 4, 100))
            .value
            .share
            .gpu
    }

    fn used_per_gpu(ledger: &Ledger) -> Vec<u32> {
        ok(ledger.snapshot())
            .gpus(4, 100)
            .iter()
            .map(|gpu| gpu.used_units)
            .collect()
    }

    fn read(path: &Path) -> String {
        fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn write(path: &Path, text: &str) {
        fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }

    fn mode_of(path: &Path) -> u32 {
        fs::symlink_metadata(path)
            .map(|m| m.mode() & 0o7777)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn open_creates_a_missing_directory_private_with_its_parents() {
        let temp = TempDir::new("create");
        // After a reboot /run is empty: neither level exists.
        let dir = temp.0.join("run").join("gpu-mps");
        let ledger = ok(Ledger::open(&dir, temp.owner()));
        assert!(ledger.created());
        assert_eq!(mode_of(&dir), 0o700);
        assert_eq!(ledger.dir(), dir.as_path());
        let again = ok(Ledger::open(&dir, temp.owner()));
        assert!(!again.created());
        let snapshot = ok(again.snapshot());
        assert!(snapshot.state.is_empty() && snapshot.set_aside_files.is_empty());
    }

    #[test]
    fn open_refuses_a_symlink_even_to_a_good_directory() {
        let temp = TempDir::new("symlink");
        let real = temp.0.join("real");
        ok(Ledger::open(&real, temp.owner()));
        let link = temp.0.join("gpu-mps");
        std::os::unix::fs::symlink(&real, &link).unwrap_or_else(|e| panic!("{e}"));
        let error = Ledger::open(&link, temp.owner()).err();
        assert!(
            matches!(&error, Some(LedgerError::DirIsSymlink { dir }) if *dir == link),
            "{error:?}"
        );
        let text = error.map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains("is a symbolic link"), "{text}");
        // A dangling link is refused too, not followed to create a directory.
        let dangling = temp.0.join("dangling");
        std::os::unix::fs::symlink(temp.0.join("nowhere"), &dangling)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            Ledger::open(&dangling, temp.owner()),
            Err(LedgerError::DirIsSymlink { .. })
        ));
        assert!(!temp.0.join("nowhere").exists());
    }

    #[test]
    fn open_refuses_a_file_in_place_of_the_directory() {
        let temp = TempDir::new("notdir");
        let path = temp.0.join("gpu-mps");
        write(&path, "");
        let error = Ledger::open(&path, temp.owner()).err();
        assert!(
            matches!(error, Some(LedgerError::NotADirectory { .. })),
            "{error:?}"
        );
    }

    #[test]
    fn open_refuses_a_foreign_owner() {
        let temp = TempDir::new("owner");
        let dir = temp.0.join("gpu-mps");
        ok(Ledger::open(&dir, temp.owner()));
        let stranger = temp.owner().wrapping_add(1);
        let error = Ledger::open(&dir, stranger).err();
        let text = error.as_ref().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            matches!(error, Some(LedgerError::DirWrongOwner { owner, expected, .. })
                if owner == temp.owner() && expected == stranger),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "owned by uid {}, not uid {stranger}",
                temp.owner()
            )),
            "{text}"
        );
    }

    #[test]
    fn open_refuses_group_or_other_permissions() {
        let temp = TempDir::new("mode");
        let dir = temp.0.join("gpu-mps");
        ok(Ledger::open(&dir, temp.owner()));
        for mode in [0o750, 0o701, 0o755, 0o1777] {
            fs::set_permissions(&dir, Permissions::from_mode(mode))
                .unwrap_or_else(|e| panic!("{e}"));
            let error = Ledger::open(&dir, temp.owner()).err();
            let text = error.as_ref().map(|e| e.to_string()).unwrap_or_default();
            assert!(
                matches!(error, Some(LedgerError::DirOpenToOthers { mode: m, .. }) if m == mode),
                "{mode:o}: {text}"
            );
            assert!(
                text.contains(&format!("mode {mode:04o}")) && text.contains("chmod 0700"),
                "{text}"
            );
        }
        fs::set_permissions(&dir, Permissions::from_mode(0o700)).unwrap_or_else(|e| panic!("{e}"));
        ok(Ledger::open(&dir, temp.owner()));
    }

    #[test]
    fn a_placement_is_written_in_the_documented_format() {
        let temp = TempDir::new("format");
        let ledger = temp.ledger();
        let outcome = ok(ledger.place(123, 1000, "alice", 50, 4, 100));
        assert_eq!(outcome.set_aside, None);
        let share = outcome.value.share;
        assert!(!outcome.value.already_recorded);
        assert_eq!(
            (
                share.job,
                share.uid,
                share.user.as_str(),
                share.gpu,
                share.units
            ),
            (123, 1000, "alice", 0, 50)
        );
        assert!(share.since > 1_600_000_000);
        ok(ledger.record_whole(124, &[3, 1]));
        let text = read(&ledger.state_path());
        let whole_since = ok(ledger.snapshot())
            .state
            .whole_holder(124)
            .map(|w| w.since)
            .unwrap_or_default();
        assert_eq!(
            text,
            format!(
                "gpushare-mps-ledger version=1\n\
                 share job=123 uid=1000 user=alice gpu=0 units=50 since={}\n\
                 whole job=124 gpus=1,3 since={whole_since}\n",
                share.since
            )
        );
        assert_eq!(mode_of(&ledger.state_path()), 0o600);
        assert_eq!(mode_of(&ledger.dir().join(LOCK_FILE)), 0o600);
        assert!(!ledger.dir().join(TEMP_FILE).exists());
    }

    #[test]
    fn placing_a_job_again_returns_its_gpu_unchanged_without_writing() {
        let temp = TempDir::new("idempotent");
        let ledger = temp.ledger();
        assert_eq!(place(&ledger, 1, 50), 0);
        assert_eq!(place(&ledger, 2, 50), 1);
        let before = read(&ledger.state_path());
        let inode = fs::metadata(ledger.state_path())
            .map(|m| m.ino())
            .unwrap_or_default();
        // A later step of job 1, even one that states other units.
        let again = ok(ledger.place(1, 1001, "user1", 10, 4, 100)).value;
        assert!(again.already_recorded);
        assert_eq!((again.share.gpu, again.share.units), (0, 50));
        assert_eq!(read(&ledger.state_path()), before);
        assert_eq!(
            fs::metadata(ledger.state_path())
                .map(|m| m.ino())
                .unwrap_or_default(),
            inode
        );
    }

    #[test]
    fn halves_spread_one_per_gpu_then_two_per_gpu_then_are_refused() {
        let temp = TempDir::new("halves");
        let ledger = temp.ledger();
        let first: Vec<u32> = (1..=4).map(|job| place(&ledger, job, 50)).collect();
        assert_eq!(first, vec![0, 1, 2, 3]);
        let second: Vec<u32> = (5..=8).map(|job| place(&ledger, job, 50)).collect();
        assert_eq!(second, vec![0, 1, 2, 3]);
        let before = read(&ledger.state_path());
        let error = ledger.place(9, 1009, "user9", 50, 4, 100).err();
        let text = error.as_ref().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            matches!(
                error,
                Some(LedgerError::Placement {
                    error: PlacementError::NoGpuHasRoom {
                        units: 50,
                        most_free_on_one_gpu: 0,
                        ..
                    },
                    set_aside: None,
                })
            ),
            "{text}"
        );
        assert!(
            text.starts_with("no single GPU on this node has room for 50 MPS units"),
            "{text}"
        );
        assert_eq!(
            read(&ledger.state_path()),
            before,
            "a refusal must not change the state"
        );
    }

    #[test]
    fn bad_unit_counts_are_refused_before_any_change() {
        let temp = TempDir::new("units");
        let ledger = temp.ledger();
        assert!(matches!(
            ledger.place(1, 1, "u", 0, 4, 100),
            Err(LedgerError::Placement {
                error: PlacementError::ZeroUnits,
                ..
            })
        ));
        assert!(matches!(
            ledger.place(1, 1, "u", 101, 4, 100),
            Err(LedgerError::Placement {
                error: PlacementError::MoreThanOneGpu {
                    units: 101,
                    units_per_gpu: 100
                },
                ..
            })
        ));
        assert!(matches!(
            ledger.place(1, 1, "u", 10, 0, 100),
            Err(LedgerError::Placement {
                error: PlacementError::NoGpus,
                ..
            })
        ));
        assert!(matches!(
            ledger.place(1, 1, "u", 10, u32::MAX, 100),
            Err(LedgerError::Placement {
                error: PlacementError::TooManyGpus { .. },
                ..
            })
        ));
        assert!(!ledger.state_path().exists());
    }

    #[test]
    fn shares_avoid_gpus_held_whole() {
        let temp = TempDir::new("whole");
        let ledger = temp.ledger();
        let overlap = ok(ledger.record_whole(500, &[0])).value;
        assert!(overlap.is_empty());
        let placed: Vec<u32> = (1..=6).map(|job| place(&ledger, job, 50)).collect();
        assert_eq!(placed, vec![1, 2, 3, 1, 2, 3]);
        assert!(matches!(
            ledger.place(7, 1, "u", 10, 4, 100),
            Err(LedgerError::Placement {
                error: PlacementError::NoGpuHasRoom {
                    whole_gpus: 1,
                    shareable_gpus: 3,
                    ..
                },
                ..
            })
        ));
        // Once the whole holder ends, GPU 0 is the emptiest.
        let released = ok(ledger.release(500)).value;
        assert_eq!(
            released.iter().map(Record::job).collect::<Vec<_>>(),
            vec![500]
        );
        assert_eq!(place(&ledger, 7, 10), 0);
    }

    #[test]
    fn a_whole_holder_on_shared_gpus_is_reported_as_overlap() {
        let temp = TempDir::new("overlap");
        let ledger = temp.ledger();
        assert_eq!(place(&ledger, 1, 30), 0);
        assert_eq!(place(&ledger, 2, 30), 1);
        let overlap = ok(ledger.record_whole(9, &[1, 2])).value;
        assert_eq!(
            overlap.iter().map(|s| (s.job, s.gpu)).collect::<Vec<_>>(),
            vec![(2, 1)]
        );
        let gpus = ok(ledger.snapshot()).gpus(4, 100);
        let flags: Vec<(u32, bool, Vec<u32>)> = gpus
            .iter()
            .map(|g| (g.index, g.overlap, g.whole_jobs.clone()))
            .collect();
        assert_eq!(
            flags,
            vec![
                (0, false, vec![]),
                (1, true, vec![9]),
                (2, false, vec![9]),
                (3, false, vec![])
            ]
        );
        assert_eq!((gpus[1].used_units, gpus[1].free_units), (30, 70));
    }

    #[test]
    fn record_whole_is_idempotent_and_needs_gpus() {
        let temp = TempDir::new("whole-again");
        let ledger = temp.ledger();
        ok(ledger.record_whole(7, &[2, 2, 1]));
        let first = read(&ledger.state_path());
        ok(ledger.record_whole(7, &[1, 2]));
        assert_eq!(read(&ledger.state_path()), first);
        let holder = ok(ledger.snapshot()).state.whole_holder(7).cloned();
        assert_eq!(holder.map(|w| w.gpus), Some(vec![1, 2]));
        let error = ledger.record_whole(8, &[]).err();
        assert!(
            matches!(error, Some(LedgerError::NoWholeGpus { job: 8 })),
            "{error:?}"
        );
    }

    #[test]
    fn release_removes_the_job_and_a_second_release_is_a_no_op() {
        let temp = TempDir::new("release");
        let ledger = temp.ledger();
        place(&ledger, 1, 40);
        place(&ledger, 2, 40);
        let released = ok(ledger.release(1)).value;
        assert!(matches!(
            released.as_slice(),
            [Record::Share(ShareRecord {
                job: 1,
                units: 40,
                ..
            })]
        ));
        assert!(ok(ledger.release(1)).value.is_empty());
        assert!(ok(ledger.release(77)).value.is_empty());
        let state = ok(ledger.snapshot()).state;
        assert_eq!(state.shares().map(|s| s.job).collect::<Vec<_>>(), vec![2]);
        // A job with both kinds loses both.
        ok(ledger.record_whole(2, &[3]));
        assert_eq!(ok(ledger.release(2)).value.len(), 2);
        assert!(ok(ledger.snapshot()).state.is_empty());
        assert_eq!(
            read(&ledger.state_path()),
            "gpushare-mps-ledger version=1\n"
        );
    }

    #[test]
    fn release_on_a_fresh_node_creates_nothing_but_the_lock() {
        let temp = TempDir::new("fresh-release");
        let ledger = temp.ledger();
        assert!(ok(ledger.release(5)).value.is_empty());
        assert!(!ledger.state_path().exists());
    }

    #[test]
    fn reconcile_drops_the_records_of_jobs_no_longer_running() {
        let temp = TempDir::new("reconcile");
        let ledger = temp.ledger();
        for job in 1..=4 {
            place(&ledger, job, 20);
        }
        ok(ledger.record_whole(10, &[3]));
        ok(ledger.record_whole(11, &[2]));
        let running = [2, 4, 11];
        let dropped = ok(ledger.reconcile(|job| running.contains(&job))).value;
        let mut dropped_jobs: Vec<u32> = dropped.iter().map(Record::job).collect();
        dropped_jobs.sort_unstable();
        assert_eq!(dropped_jobs, vec![1, 3, 10]);
        let state = ok(ledger.snapshot()).state;
        assert_eq!(
            state.shares().map(|s| s.job).collect::<Vec<_>>(),
            vec![2, 4]
        );
        assert_eq!(
            state.whole_holders().map(|w| w.job).collect::<Vec<_>>(),
            vec![11]
        );
        assert!(ok(ledger.reconcile(|job| running.contains(&job)))
            .value
            .is_empty());
        let dropped_lines: Vec<String> = dropped.iter().map(Record::to_string).collect();
        assert!(
            dropped_lines
                .iter()
                .any(|l| l.starts_with("whole job=10 gpus=3 since=")),
            "{dropped_lines:?}"
        );
    }

    #[test]
    fn an_unreadable_state_is_set_aside_reported_and_replaced() {
        let temp = TempDir::new("corrupt");
        let ledger = temp.ledger();
        let garbage = "gpushare-mps-ledger version=1\nshare job=1 uid=5 gpu=0 units=10 since=1\n";
        write(&ledger.state_path(), garbage);
        // Readers report it and leave it where it is.
        let error = ledger.snapshot().err();
        let text = error.as_ref().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            matches!(
                &error,
                Some(LedgerError::Corrupt(ParseError { line: 2, .. }))
            ),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "{}:2: `user=` is missing",
                ledger.state_path().display()
            )),
            "{text}"
        );
        assert_eq!(read(&ledger.state_path()), garbage);

        let outcome = ok(ledger.place(2, 1000, "bob", 30, 4, 100));
        let set_aside = outcome
            .set_aside
            .unwrap_or_else(|| panic!("no set-aside reported"));
        assert_eq!(set_aside.reason.line, 2);
        assert_eq!(
            read(&set_aside.moved_to),
            garbage,
            "the bad file is kept for the admin"
        );
        let name = set_aside
            .moved_to
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        assert!(name.is_some_and(|n| n.starts_with("state.corrupt-")));
        assert!(set_aside.to_string().contains("moved to"), "{set_aside}");
        assert_eq!(outcome.value.share.gpu, 0);
        let snapshot = ok(ledger.snapshot());
        assert_eq!(
            snapshot.state.shares().map(|s| s.job).collect::<Vec<_>>(),
            vec![2]
        );
        assert_eq!(snapshot.set_aside_files, vec![set_aside.moved_to.clone()]);

        // Two corruptions within one second get distinct names.
        write(&ledger.state_path(), "nonsense\n");
        let second = ok(ledger.release(2))
            .set_aside
            .unwrap_or_else(|| panic!("no set-aside"));
        assert_ne!(second.moved_to, set_aside.moved_to);
        assert_eq!(read(&second.moved_to), "nonsense\n");
        assert_eq!(ok(ledger.snapshot()).set_aside_files.len(), 2);
        assert!(ok(ledger.snapshot()).state.is_empty());
    }

    #[test]
    fn a_refusal_after_setting_aside_still_reports_the_set_aside() {
        let temp = TempDir::new("corrupt-refused");
        let ledger = temp.ledger();
        write(&ledger.state_path(), "\u{0}\u{1}");
        match ledger.place(1, 1, "u", 10, 0, 100) {
            Err(LedgerError::Placement {
                error: PlacementError::NoGpus,
                set_aside: Some(set_aside),
            }) => {
                assert_eq!(set_aside.reason.line, 1);
            }
            other => panic!("expected a refusal with set_aside, got {other:?}"),
        }
        assert!(!ledger.state_path().exists());
        assert!(ok(ledger.snapshot()).state.is_empty());
    }

    #[test]
    fn non_utf8_state_names_the_line() {
        let temp = TempDir::new("utf8");
        let ledger = temp.ledger();
        fs::write(
            ledger.state_path(),
            b"gpushare-mps-ledger version=1\nshare \xff\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let error = ledger.snapshot().err();
        assert!(
            matches!(&error, Some(LedgerError::Corrupt(ParseError { line: 2, problem, .. })) if problem == "not UTF-8 text"),
            "{error:?}"
        );
    }

    #[test]
    fn a_leftover_temp_file_is_ignored_and_replaced() {
        let temp = TempDir::new("leftover");
        let ledger = temp.ledger();
        place(&ledger, 1, 50);
        let good = read(&ledger.state_path());
        // A crash between creating the temp file and the rename.
        let leftover = ledger.dir().join(TEMP_FILE);
        write(
            &leftover,
            "gpushare-mps-ledger version=1\nshare job=99 uid=1 user=x gpu=3 un",
        );
        assert_eq!(read(&ledger.state_path()), good);
        let state = ok(ledger.snapshot()).state;
        assert_eq!(state.shares().map(|s| s.job).collect::<Vec<_>>(), vec![1]);
        // A no-op leaves it (it is harmless); the next write replaces it.
        ok(ledger.release(42));
        assert_eq!(place(&ledger, 2, 50), 1);
        assert!(!leftover.exists());
        let state = ok(ledger.snapshot()).state;
        assert_eq!(
            state.shares().map(|s| s.job).collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert!(ok(ledger.snapshot()).set_aside_files.is_empty());
    }

    #[test]
    fn the_state_survives_the_directory_being_wiped_as_by_a_reboot() {
        let temp = TempDir::new("reboot");
        let ledger = temp.ledger();
        place(&ledger, 1, 50);
        fs::remove_dir_all(ledger.dir()).unwrap_or_else(|e| panic!("{e}"));
        let fresh = temp.ledger();
        assert!(fresh.created());
        assert!(ok(fresh.snapshot()).state.is_empty());
        assert_eq!(place(&fresh, 2, 50), 0);
    }

    #[test]
    fn per_gpu_view_shows_unconfigured_and_over_capacity_gpus() {
        let mut state = LedgerState::new();
        for (job, gpu, units) in [(1, 0, 60), (2, 0, 60), (3, 6, 10)] {
            state.insert_share(ShareRecord {
                job,
                uid: 1,
                user: "u".into(),
                gpu,
                units,
                since: 0,
            });
        }
        state.insert_whole(WholeRecord {
            job: 9,
            gpus: vec![1, 5],
            since: 0,
        });
        let view = Snapshot {
            state,
            set_aside_files: Vec::new(),
        }
        .gpus(2, 100);
        let summary: Vec<(u32, u32, u32, bool, bool)> = view
            .iter()
            .map(|g| {
                (
                    g.index,
                    g.used_units,
                    g.free_units,
                    g.over_capacity,
                    g.configured,
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (0, 120, 0, true, true),
                (1, 0, 100, false, true),
                (5, 0, 100, false, false),
                (6, 10, 90, false, false),
            ]
        );
        assert_eq!(
            view[0].shares.iter().map(|s| s.job).collect::<Vec<_>>(),
            vec![1, 2]
        );
    }

    #[test]
    fn records_beyond_the_gpu_count_do_not_disturb_placement() {
        let mut state = LedgerState::new();
        state.insert_share(ShareRecord {
            job: 1,
            uid: 1,
            user: "u".into(),
            gpu: 7,
            units: 90,
            since: 0,
        });
        state.insert_whole(WholeRecord {
            job: 2,
            gpus: vec![4_000_000_000],
            since: 0,
        });
        assert_eq!(state.gpu_loads(2), vec![GpuLoad::default(); 2]);
        assert_eq!(state.gpu_loads(u32::MAX).len(), MAX_GPUS_PER_NODE as usize);
        assert_eq!(state.per_gpu(1, 100).len(), 3);
    }

    #[test]
    fn parse_accepts_comments_blank_lines_and_any_key_order() {
        let text = "gpushare-mps-ledger version=1\n\n# hand note\n  \
                    share since=5 units=10 gpu=1 user=a%20b uid=7 job=3\nwhole gpus=3,1 job=4 since=6\n";
        let state = LedgerState::parse(text, Path::new("state"));
        let state = state.unwrap_or_else(|e| panic!("{e}"));
        let share = state.share(3).cloned();
        assert_eq!(
            share.map(|s| (s.user, s.uid, s.gpu, s.units, s.since)),
            Some(("a b".to_string(), 7, 1, 10, 5))
        );
        assert_eq!(
            state.whole_holder(4).map(|w| w.gpus.clone()),
            Some(vec![1, 3])
        );
    }

    #[test]
    fn parse_errors_name_the_line_and_the_problem() {
        let header = "gpushare-mps-ledger version=1\n";
        let share = "share job=1 uid=2 user=a gpu=0 units=10 since=3";
        let cases: Vec<(String, usize, &str)> = vec![
            (String::new(), 1, "empty file"),
            ("gpushare-mps-ledger version=1".into(), 1, "no newline"),
            (
                format!("{header}{share}"),
                2,
                "no newline: the file was cut short",
            ),
            ("something else\n".into(), 1, "expected the header"),
            (
                "gpushare-mps-ledger version=2\n".into(),
                1,
                "version 2 is not supported",
            ),
            (
                "gpushare-mps-ledger version=x\n".into(),
                1,
                "expected the header",
            ),
            (
                "gpushare-mps-ledger version=1 extra\n".into(),
                1,
                "expected the header",
            ),
            (
                format!("{header}lease job=1\n"),
                2,
                "unknown record kind `lease`",
            ),
            (
                format!("{header}share job=1 uid=2 user=a gpu=0 units=10\n"),
                2,
                "`since=` is missing",
            ),
            (format!("{header}{share} gpu=1\n"), 2, "`gpu` appears twice"),
            (
                format!("{header}{share} colour=red\n"),
                2,
                "unknown key `colour`",
            ),
            (
                format!("{header}{share} loose\n"),
                2,
                "`loose` is not key=value",
            ),
            (
                format!("{header}share job=1 uid=+2 user=a gpu=0 units=10 since=3\n"),
                2,
                "`uid=+2`: not a number",
            ),
            (
                format!("{header}share job=1 uid=2 user=a gpu=0 units=10 since=\n"),
                2,
                "`since=`: not a number",
            ),
            (
                format!("{header}share job=99999999999 uid=2 user=a gpu=0 units=1 since=3\n"),
                2,
                "number too large",
            ),
            (
                format!("{header}share job=1 uid=2 user=a gpu=0 units=0 since=3\n"),
                2,
                "at least 1 unit",
            ),
            (
                format!("{header}share job=1 uid=2 user=a%2 gpu=0 units=1 since=3\n"),
                2,
                "bad %XX escape",
            ),
            (
                format!("{header}share job=1 uid=2 user=a%zz gpu=0 units=1 since=3\n"),
                2,
                "bad %XX escape",
            ),
            (
                format!("{header}share job=1 uid=2 user=%FF gpu=0 units=1 since=3\n"),
                2,
                "not UTF-8 once decoded",
            ),
            (
                format!("{header}{share}\n# ok\n{share}\n"),
                4,
                "job 1 already has a share record on line 2",
            ),
            (
                format!("{header}whole job=1 gpus=1 since=1\nwhole job=1 gpus=2 since=1\n"),
                3,
                "already has a whole record on line 2",
            ),
            (
                format!("{header}whole job=1 gpus= since=1\n"),
                2,
                "`gpus=`: not a number",
            ),
            (
                format!("{header}whole job=1 gpus=1,,2 since=1\n"),
                2,
                "not a number",
            ),
            (
                format!("{header}whole job=1 gpus=2,1,2 since=1\n"),
                2,
                "GPU 2 is listed twice",
            ),
        ];
        for (text, line, problem) in cases {
            match LedgerState::parse(&text, Path::new("/run/gpu-mps/state")) {
                Ok(state) => panic!("{text:?} parsed as {state:?}"),
                Err(error) => {
                    assert_eq!(error.line, line, "{text:?}: {error}");
                    assert!(error.problem.contains(problem), "{text:?}: {error}");
                    assert!(
                        error
                            .to_string()
                            .starts_with(&format!("/run/gpu-mps/state:{line}: ")),
                        "{error}"
                    );
                }
            }
        }
    }

    fn any_share() -> impl Strategy<Value = ShareRecord> {
        (
            any::<u32>(),
            any::<u32>(),
            any::<String>(),
            0u32..16,
            1u32..=100,
            any::<u64>(),
        )
            .prop_map(|(job, uid, user, gpu, units, since)| ShareRecord {
                job,
                uid,
                user,
                gpu,
                units,
                since,
            })
    }

    fn any_whole() -> impl Strategy<Value = WholeRecord> {
        (
            any::<u32>(),
            proptest::collection::btree_set(0u32..16, 1..5),
            any::<u64>(),
        )
            .prop_map(|(job, gpus, since)| WholeRecord {
                job,
                gpus: gpus.into_iter().collect(),
                since,
            })
    }

    proptest! {
        #[test]
        fn every_state_survives_writing_and_reading_back(
            shares in proptest::collection::vec(any_share(), 0..8),
            wholes in proptest::collection::vec(any_whole(), 0..4),
        ) {
            let mut state = LedgerState::new();
            for share in shares {
                state.insert_share(share);
            }
            for whole in wholes {
                state.insert_whole(whole);
            }
            let text = state.to_text();
            let parsed = LedgerState::parse(&text, Path::new("state"));
            prop_assert_eq!(parsed, Ok(state));
            // One record per line, whatever the user names hold.
            let records = text.lines().count() - 1;
            prop_assert_eq!(records, text.lines().skip(1).filter(|l| l.starts_with("share ") || l.starts_with("whole ")).count());
        }
    }

    /// Places `jobs` on 4 GPUs of 100, each job opening the ledger itself
    /// as separate prologs would, and checks after every placement that no
    /// GPU is over 100 in what a lock-free reader sees.
    fn place_concurrently(dir: &Path, owner: u32, jobs: impl Iterator<Item = u32>) {
        for job in jobs {
            let ledger = ok(Ledger::open(dir, owner));
            let placed = ok(ledger.place(job, 1000, "load", 10, 4, 100));
            assert!(placed.value.share.gpu < 4);
            let gpus = ok(ledger.snapshot()).gpus(4, 100);
            assert!(gpus.iter().all(|g| g.used_units <= 100), "{gpus:?}");
        }
    }

    fn assert_balanced_full_house(ledger: &Ledger, jobs: usize) {
        let state = ok(ledger.snapshot()).state;
        assert_eq!(state.shares().count(), jobs);
        assert_eq!(used_per_gpu(ledger), vec![80, 80, 80, 80]);
    }

    #[test]
    fn concurrent_threads_never_over_fill_and_stay_balanced() {
        let temp = TempDir::new("threads");
        let dir = Arc::new(temp.0.join("gpu-mps"));
        let owner = temp.owner();
        let threads: Vec<_> = (0..8u32)
            .map(|thread| {
                let dir = Arc::clone(&dir);
                std::thread::spawn(move || {
                    place_concurrently(&dir, owner, (0..4).map(|i| 100 + thread * 4 + i));
                })
            })
            .collect();
        for thread in threads {
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        }
        assert_balanced_full_house(&temp.ledger(), 32);
    }

    const WORKER_DIR: &str = "GPUSHARE_LEDGER_TEST_WORKER_DIR";
    const WORKER_ID: &str = "GPUSHARE_LEDGER_TEST_WORKER_ID";

    /// Does nothing in a normal run; the multi-process test re-runs this
    /// binary with only this test selected and the variables set.
    #[test]
    fn process_worker() {
        let (Some(dir), Some(id)) = (std::env::var_os(WORKER_DIR), std::env::var_os(WORKER_ID))
        else {
            return;
        };
        let id: u32 = id
            .to_string_lossy()
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        let dir = PathBuf::from(dir);
        let owner = fs::metadata(dir.parent().unwrap_or(Path::new("/")))
            .map(|m| m.uid())
            .unwrap_or_else(|e| panic!("{e}"));
        let threads: Vec<_> = (0..2u32)
            .map(|thread| {
                let dir = dir.clone();
                std::thread::spawn(move || {
                    place_concurrently(&dir, owner, (0..4).map(|i| 1000 + id * 8 + thread * 4 + i));
                })
            })
            .collect();
        for thread in threads {
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        }
    }

    #[test]
    fn concurrent_processes_never_over_fill_and_stay_balanced() {
        let temp = TempDir::new("processes");
        let dir = temp.0.join("gpu-mps");
        let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
        let test_name = format!(
            "{}::process_worker",
            module_path!().split_once("::").map_or("", |(_, rest)| rest)
        );
        let workers: Vec<_> = (0..4u32)
            .map(|id| {
                std::process::Command::new(&exe)
                    .args([test_name.as_str(), "--exact", "--test-threads=1", "--quiet"])
                    .env(WORKER_DIR, &dir)
                    .env(WORKER_ID, id.to_string())
                    .output()
            })
            .collect();
        for worker in workers {
            let output = worker.unwrap_or_else(|e| panic!("{e}"));
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(
                output.status.success(),
                "worker failed: {}\n{stdout}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
            assert!(
                stdout.contains("1 passed"),
                "the worker test did not run: {stdout}"
            );
        }
        assert_balanced_full_house(&temp.ledger(), 32);
    }
}
