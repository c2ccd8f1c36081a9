//! The node's MPS sharing state on disk: which job holds how many units on
//! which GPU and for whom, and which jobs hold GPUs whole.
//!
//! Who uses it: the slurmd prolog (`gpu-mps-prolog`) places a job's share
//! (once per job: every later step finds the same GPU) and records
//! whole-GPU holders; the SPANK plugin in slurmstepd reads the placement;
//! the epilog (`gpu-mps-epilog`) releases the job; the `gpu-mps` admin
//! command shows a [`Snapshot`] and runs `gc` ([`Ledger::reconcile`],
//! [`Ledger::rebuild`]).
//!
//! # Crash and race safety
//!
//! Every change is one transaction: an exclusive `flock` on `lock`, read
//! `state`, apply the change, publish the world-readable status copy, write
//! the new `state` ([`state_dir::replace_file`]), unlock. Concurrent job
//! starts therefore see each other's placements and never over-fill a GPU,
//! and a crash at any point leaves either the old or the new `state` in
//! place; readers ([`Ledger::snapshot`]) take no lock and always see a whole
//! file. The lock file is never removed: removing a file others may hold a
//! `flock` on would let two writers each lock a different inode.
//!
//! The directory is created with its first (empty) state file already in
//! it, by renaming a finished directory into place; so a state directory
//! without a state file means the state was lost, never that it is new.
//!
//! # Lost state fails safe
//!
//! A state file that cannot be parsed is moved to `state.corrupt-<time>`
//! (kept until an admin removes it) and a missing one is noticed. The
//! transaction then rebuilds the state from the published status copy,
//! which is written before `state` in every transaction and so never knows
//! less than the ledger did. Where there is no readable copy either, the
//! state is marked *lost*: the GPU loads are unknown, no share is placed
//! until `gpu-mps gc` rebuilds it, and `gpu-mps status` says so.
//!
//! # State file format (`state`)
//!
//! One JSON object, `{"format":"gpushare-mps-ledger","version":2,
//! "shares":[...],"whole":[...]}` plus `"lost":{"since":..,"reason":..}`
//! while the state is lost. A share is `{"job","uid","user","gpu","units",
//! "since"}` (`units` ≥ 1, `gpu` the index on the node, `since` Unix
//! seconds); a whole-GPU holder `{"job","gpus","since"}` with a non-empty
//! list of GPUs without repeats. A job has at most one record of each kind.
//! Unknown fields, another format or version are refused, not guessed at;
//! the text format of gpushare 0.1 is recognised and named in the error.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::placement::{self, GpuLoad, PlacementError, ServerRule, MAX_GPUS_PER_NODE};
use super::state_dir::{self, io_error, Access, DirError};

const STATE_FILE: &str = "state";
const LOCK_FILE: &str = "lock";
pub(crate) const SET_ASIDE_PREFIX: &str = "state.corrupt-";
const FORMAT_NAME: &str = "gpushare-mps-ledger";
const FORMAT_VERSION: u32 = 2;

/// One job's MPS share on one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShareRecord {
    pub job: u32,
    pub uid: u32,
    pub user: String,
    /// The GPU's index on the node.
    pub gpu: u32,
    pub units: u32,
    /// When the share was placed, in Unix seconds.
    pub since: u64,
    /// Slurm chose the GPU (and confines the job to it), not gpushare.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub placed_by_slurm: bool,
    /// The share's device memory limit in MiB, set by the prolog after
    /// placement (`None`: none, or not known yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// MPS clients the job runs on its GPU: its largest step's tasks on
    /// this node, set by the SPANK plugin when a step starts (`None`: no
    /// step yet, counted as 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients: Option<u32>,
}

impl ShareRecord {
    /// The MPS clients this share counts for.
    pub fn client_count(&self) -> u32 {
        self.clients.unwrap_or(1).max(1)
    }
}

/// A job holding GPUs whole (gpu GRES), as named by its Prolog environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WholeRecord {
    pub job: u32,
    /// Indices on the node, ascending, without repeats, never empty.
    pub gpus: Vec<u32>,
    /// When the holder was recorded, in Unix seconds.
    pub since: u64,
}

/// Why the GPU loads of the node are unknown, and since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lost {
    pub since: u64,
    pub reason: String,
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

/// One line per record, for the prolog's, epilog's and `gc`'s logs.
impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Share(s) => write!(
                f,
                "share job={} user={} (uid {}) gpu={} units={} since={}",
                s.job, s.user, s.uid, s.gpu, s.units, s.since
            ),
            Self::Whole(w) => write!(f, "whole job={} gpus={:?} since={}", w.job, w.gpus, w.since),
        }
    }
}

/// The state file as it is written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StateFile {
    format: String,
    version: u32,
    shares: Vec<ShareRecord>,
    whole: Vec<WholeRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lost: Option<Lost>,
}

/// The whole sharing state of the node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerState {
    shares: BTreeMap<u32, ShareRecord>,
    whole: BTreeMap<u32, WholeRecord>,
    lost: Option<Lost>,
}

impl LedgerState {
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty state whose GPU loads are unknown.
    pub fn lost(reason: String) -> Self {
        Self {
            lost: Some(Lost {
                since: unix_now(),
                reason,
            }),
            ..Self::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.shares.is_empty() && self.whole.is_empty() && self.lost.is_none()
    }

    /// Why the GPU loads are unknown, while they are.
    pub fn lost_reason(&self) -> Option<&Lost> {
        self.lost.as_ref()
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

    /// Every job with a record, ascending.
    pub fn jobs(&self) -> BTreeSet<u32> {
        self.shares
            .keys()
            .chain(self.whole.keys())
            .copied()
            .collect()
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
                load.clients = load.clients.saturating_add(share.client_count());
            }
        }
        for gpu in self.whole.values().flat_map(|whole| &whole.gpus) {
            if let Some(load) = loads.get_mut(index(*gpu)) {
                load.held_whole = true;
            }
        }
        loads
    }

    /// [`Self::gpu_loads`] as seen by a share of user `uid`: GPUs with
    /// another user's shares are marked (their MPS server is not `uid`'s).
    pub fn gpu_loads_for(&self, gpu_count: u32, uid: u32) -> Vec<GpuLoad> {
        let mut loads = self.gpu_loads(gpu_count);
        for share in self.shares.values().filter(|s| s.uid != uid) {
            if let Some(load) = loads.get_mut(index(share.gpu)) {
                load.other_user = true;
            }
        }
        loads
    }

    /// The users with shares on `gpu`, other than `uid`, by name.
    pub fn other_users_on(&self, gpu: u32, uid: u32) -> BTreeSet<String> {
        self.shares
            .values()
            .filter(|s| s.gpu == gpu && s.uid != uid)
            .map(|s| s.user.clone())
            .collect()
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

    /// The records a per-GPU view shows (how a state is rebuilt from the
    /// published status copy). Whole-GPU holders get the GPUs they are
    /// listed on, and the time of the rebuild.
    pub fn from_views(gpus: &[GpuView], lost: Option<Lost>) -> Self {
        let mut state = Self {
            lost,
            ..Self::default()
        };
        for view in gpus {
            for share in &view.shares {
                state.insert_share(share.clone());
            }
            for job in &view.whole_jobs {
                let record = state.whole.entry(*job).or_insert_with(|| WholeRecord {
                    job: *job,
                    gpus: Vec::new(),
                    since: unix_now(),
                });
                record.gpus.push(view.index);
            }
        }
        for record in state.whole.values_mut() {
            record.gpus.sort_unstable();
            record.gpus.dedup();
        }
        state
    }

    /// Parses the text of a state file; `file` only names it in errors.
    pub fn parse(text: &str, file: &Path) -> Result<Self, ParseError> {
        let error = |line: usize, problem: String| ParseError {
            file: file.to_path_buf(),
            line,
            problem,
        };
        if text.starts_with("gpushare-mps-ledger version=1") {
            return Err(error(
                1,
                format!(
                    "written in the text format of gpushare 0.1; this gpushare reads \
                     {FORMAT_NAME} version {FORMAT_VERSION} (JSON)"
                ),
            ));
        }
        let raw: StateFile =
            serde_json::from_str(text).map_err(|e| error(e.line(), e.to_string()))?;
        if raw.format != FORMAT_NAME || raw.version != FORMAT_VERSION {
            return Err(error(
                1,
                format!(
                    "this is {} version {}; this gpushare reads {FORMAT_NAME} version {FORMAT_VERSION}",
                    raw.format, raw.version
                ),
            ));
        }
        let mut state = Self {
            lost: raw.lost,
            ..Self::default()
        };
        for share in raw.shares {
            if share.units == 0 {
                return Err(error(
                    0,
                    format!("job {}: a share holds at least 1 unit", share.job),
                ));
            }
            let job = share.job;
            if state.insert_share(share).is_some() {
                return Err(error(0, format!("job {job} has two share records")));
            }
        }
        for whole in raw.whole {
            let mut gpus = whole.gpus.clone();
            gpus.sort_unstable();
            gpus.dedup();
            if gpus.is_empty() || gpus.len() != whole.gpus.len() {
                return Err(error(
                    0,
                    format!(
                        "job {}: whole GPUs {:?} must be a non-empty list without repeats",
                        whole.job, whole.gpus
                    ),
                ));
            }
            let job = whole.job;
            if state.insert_whole(whole).is_some() {
                return Err(error(0, format!("job {job} has two whole records")));
            }
        }
        Ok(state)
    }

    /// The text of a state file holding this state (see the module docs).
    pub fn to_json(&self) -> String {
        let file = StateFile {
            format: FORMAT_NAME.to_owned(),
            version: FORMAT_VERSION,
            shares: self.shares.values().cloned().collect(),
            whole: self.whole.values().cloned().collect(),
            lost: self.lost.clone(),
        };
        let mut text = serde_json::to_string_pretty(&file).unwrap_or_default();
        text.push('\n');
        text
    }
}

/// One GPU as `gpu-mps status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuView {
    #[serde(rename = "gpu")]
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

/// A state file that did not parse: `file:line: problem` (`file: problem`
/// when the problem is not on one line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub file: PathBuf,
    /// 1-based; 0 for the file as a whole.
    pub line: usize,
    pub problem: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            0 => write!(f, "{}: {}", self.file.display(), self.problem),
            line => write!(f, "{}:{line}: {}", self.file.display(), self.problem),
        }
    }
}

impl std::error::Error for ParseError {}

/// What a transaction had to repair before it could run: the state file
/// was unreadable (and moved aside) or missing, and the state was rebuilt
/// from the published copy or marked lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    /// Where the unreadable file went (`None`: it was missing).
    pub moved_to: Option<PathBuf>,
    /// What was wrong with it.
    pub reason: String,
    /// The published copy the records were taken from (`None`: none was
    /// readable, so the state is now lost).
    pub rebuilt_from: Option<PathBuf>,
}

impl fmt::Display for Repair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the MPS state file {}", self.reason)?;
        if let Some(moved_to) = &self.moved_to {
            write!(f, "; it was moved to {}", moved_to.display())?;
        }
        match &self.rebuilt_from {
            Some(copy) => write!(f, "; the records were rebuilt from {}", copy.display()),
            None => f.write_str(
                "; no readable status copy was left, so the GPU loads are unknown and no share \
                 is placed until an admin runs `gpu-mps gc`",
            ),
        }
    }
}

/// What a transaction returned, and whether it had to repair the state
/// first (callers log that).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome<T> {
    pub value: T,
    pub repair: Option<Repair>,
    /// What the optional views could not publish (see [`View::required`]).
    pub notes: Vec<String>,
}

impl<T> Outcome<T> {
    /// What callers log: the repair, then what the views could not publish.
    pub fn remarks(&self) -> Vec<String> {
        let repair = self.repair.as_ref().map(|r| r.to_string());
        repair
            .into_iter()
            .chain(self.notes.iter().cloned())
            .collect()
    }
}

/// The result of [`Ledger::place`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// The job's record; `share.gpu` is its GPU.
    pub share: ShareRecord,
    /// The job already had a share (a later step, or a repeated call), which
    /// is returned unchanged.
    pub already_recorded: bool,
    /// With this share its GPU holds more units than it has, or another job
    /// holds it whole: only where Slurm chose the GPU, and then a sign of
    /// records whose jobs ended without an epilog.
    pub crowded: bool,
}

/// The GPU Slurm chose for a share, and the node it is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlurmChoice {
    pub gpu: u32,
    pub gpu_count: u32,
    pub units_per_gpu: u32,
}

/// Why the ledger could not be used or changed.
#[derive(Debug)]
pub enum LedgerError {
    /// The state directory (or the status copy's) cannot be trusted or used.
    Dir(DirError),
    /// A reader found a state file it cannot parse (readers never move it).
    Corrupt(ParseError),
    /// A reader found no state file in an existing state directory.
    Missing(PathBuf),
    /// No GPU could take the share; the state is unchanged, except that it
    /// may have been repaired first.
    Placement {
        error: PlacementError,
        repair: Option<Repair>,
    },
    /// [`Ledger::record_whole`] was given no GPUs.
    NoWholeGpus { job: u32 },
    /// A [`View`] could not publish (the text says which and why).
    View(String),
    /// The state file was written by a newer gpushare (a downgrade): it is
    /// left as it is, never set aside as unreadable.
    TooNew { path: PathBuf, version: u32 },
}

impl From<DirError> for LedgerError {
    fn from(e: DirError) -> Self {
        LedgerError::Dir(e)
    }
}

impl fmt::Display for LedgerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dir(e) => write!(f, "MPS {e}"),
            Self::Corrupt(reason) => write!(
                f,
                "MPS state file is unreadable: {reason} (the next prolog, epilog or \
                 `gpu-mps gc` sets it aside and rebuilds the state)"
            ),
            Self::Missing(path) => write!(
                f,
                "MPS state file {} is missing (the next prolog, epilog or `gpu-mps gc` \
                 rebuilds the state)",
                path.display()
            ),
            Self::Placement { error, repair } => {
                write!(f, "{error}")?;
                if let Some(repair) = repair {
                    write!(f, "; also, {repair}")?;
                }
                Ok(())
            }
            Self::NoWholeGpus { job } => write!(
                f,
                "job {job} was to be recorded as holding GPUs whole, but no GPU was named"
            ),
            Self::View(text) => write!(f, "{text}"),
            Self::TooNew { path, version } => write!(
                f,
                "MPS state file {} was written by a newer gpushare (ledger version {version}; \
                 this gpushare reads version {FORMAT_VERSION}): it is left as it is, and no \
                 share is placed or released here until the newer gpushare is back, or until \
                 the node's jobs have ended and the directory {} is removed (downgrade a \
                 node only while it is drained)",
                path.display(),
                path.parent().unwrap_or(Path::new("/")).display()
            ),
        }
    }
}

impl std::error::Error for LedgerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Dir(e) => Some(e),
            Self::Corrupt(reason) => Some(reason),
            Self::Placement { error, .. } => Some(error),
            _ => None,
        }
    }
}

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
    rule: ServerRule,
    share_memory: Option<ShareMemory>,
}

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
        })
    }

    /// Places shares under `rule` (one user per MPS server, clients per
    /// GPU) from now on; without it, the plain least-loaded choice.
    /// New shares get their memory limit from `limit` in the transaction
    /// that places them (one transaction per share start, not two).
    pub fn set_share_memory(&mut self, limit: ShareMemory) {
        self.share_memory = Some(limit);
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
        self.place_beside(job, uid, user, units, (gpu_count, units_per_gpu), &[], &[])
    }

    /// [`Self::place`] on a node where the GPUs `single_user` have a daemon
    /// that serves one user at a time although the rule says several (it
    /// started before `MultiUser=yes`): no second user is placed there
    /// while another GPU can take the share; and where the GPUs `failed`
    /// are set aside ([`super::health`]): nothing goes there.
    #[allow(clippy::too_many_arguments)]
    pub fn place_beside(
        &self,
        job: u32,
        uid: u32,
        user: &str,
        units: u32,
        (gpu_count, units_per_gpu): (u32, u32),
        single_user: &[u32],
        failed: &[u32],
    ) -> Result<Outcome<Placed>, LedgerError> {
        self.record_share(job, uid, user, units, None, |state| {
            if let Some(lost) = &state.lost {
                return Err(PlacementError::LoadsUnknown {
                    reason: lost.reason.clone(),
                });
            }
            if gpu_count > MAX_GPUS_PER_NODE {
                return Err(PlacementError::TooManyGpus { gpu_count });
            }
            let mut loads = state.gpu_loads_for(gpu_count, uid);
            for &gpu in single_user {
                if let Some(load) = loads.get_mut(index(gpu)) {
                    load.single_user_server = true;
                }
            }
            for &gpu in failed {
                if let Some(load) = loads.get_mut(index(gpu)) {
                    load.failed = true;
                }
            }
            let chosen = placement::choose_gpu_for_user(&loads, units_per_gpu, units, self.rule)?;
            u32::try_from(chosen).map_err(|_| PlacementError::TooManyGpus { gpu_count })
        })
    }

    /// Records `job`'s share of `units` on `gpu`, the GPU Slurm chose: Slurm
    /// booked it there, so no room is checked and lost loads do not matter
    /// (a share that overfills a GPU shows as such in `gpu-mps status`, and
    /// is reported as [`Placed::crowded`]). A job that already has a share
    /// gets it back unchanged.
    pub fn record_slurm_share(
        &self,
        job: u32,
        uid: u32,
        user: &str,
        units: u32,
        choice: SlurmChoice,
    ) -> Result<Outcome<Placed>, LedgerError> {
        let SlurmChoice { gpu, gpu_count, .. } = choice;
        let max_clients = self.rule.max_clients;
        self.record_share(job, uid, user, units, Some(choice), |state| {
            if gpu >= gpu_count {
                return Err(PlacementError::SlurmGpuUnknown { gpu, gpu_count });
            }
            // Slurm booked the units, but the GPU's server takes only so
            // many clients: refused before anything is recorded.
            if state
                .gpu_loads(gpu_count)
                .get(index(gpu))
                .is_some_and(|l| l.clients >= max_clients)
            {
                return Err(PlacementError::TooManyClients { max_clients });
            }
            Ok(gpu)
        })
    }

    /// Records a new share on the GPU `choose` names, under the lock; a job
    /// already recorded keeps its share. `slurm`: Slurm chose the GPU.
    fn record_share(
        &self,
        job: u32,
        uid: u32,
        user: &str,
        units: u32,
        slurm: Option<SlurmChoice>,
        choose: impl FnOnce(&LedgerState) -> Result<u32, PlacementError>,
    ) -> Result<Outcome<Placed>, LedgerError> {
        self.transact(|state| {
            if let Some(share) = state.share(job) {
                return Ok(Placed {
                    share: share.clone(),
                    already_recorded: true,
                    crowded: false,
                });
            }
            let share = ShareRecord {
                job,
                uid,
                user: user.to_string(),
                gpu: choose(state)?,
                units,
                since: unix_now(),
                placed_by_slurm: slurm.is_some(),
                memory_mib: self
                    .share_memory
                    .as_ref()
                    .and_then(|limit| (limit.0)(units)),
                clients: None,
            };
            state.insert_share(share.clone());
            let crowded = slurm.is_some_and(|s| {
                state
                    .gpu_loads(s.gpu_count)
                    .get(share.gpu as usize)
                    .is_some_and(|l| l.held_whole || l.used_units > s.units_per_gpu)
            });
            Ok(Placed {
                share,
                already_recorded: false,
                crowded,
            })
        })
    }

    /// Records that a step of `job` runs `tasks` MPS clients on its GPU:
    /// the job counts for its largest step. `Ok(Err(text))`: the GPU would
    /// then have more than `max_clients` (the step must fail with `text`).
    pub fn note_step_clients(
        &self,
        job: u32,
        tasks: u32,
        max_clients: u32,
    ) -> Result<Outcome<Result<(), String>>, LedgerError> {
        self.transact(|state| {
            let Some(share) = state.shares.get(&job).cloned() else {
                return Ok(Ok(()));
            };
            if tasks <= share.client_count() {
                return Ok(Ok(()));
            }
            let others: u32 = state
                .shares
                .values()
                .filter(|s| s.gpu == share.gpu && s.job != job)
                .map(ShareRecord::client_count)
                .sum();
            if others.saturating_add(tasks) > max_clients {
                return Ok(Err(format!(
                    "gpu_mps: job {job}: this step runs {tasks} tasks on GPU {}, each an MPS \
                     client, and the GPU's MPS server already serves {others} clients of other \
                     jobs; it takes at most {max_clients} (MaxClientsPerGPU): run fewer tasks \
                     per share, or ask for whole GPUs",
                    share.gpu
                )));
            }
            if let Some(s) = state.shares.get_mut(&job) {
                s.clients = Some(tasks);
            }
            Ok(Ok(()))
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
    /// beforehand, not a query to slurmctld.
    pub fn reconcile(
        &self,
        mut is_running: impl FnMut(u32) -> bool,
    ) -> Result<Outcome<Vec<Record>>, LedgerError> {
        self.transact(|state| {
            Ok(state
                .jobs()
                .into_iter()
                .filter(|job| !is_running(*job))
                .flat_map(|job| state.remove_job(job))
                .collect())
        })
    }

    /// Ends a lost state once `unaccounted` (given the records the ledger
    /// holds) says no running job holds a share the ledger does not know:
    /// `Err(jobs)` names those that do, and the state stays lost. Returns
    /// whether the state was lost.
    pub fn rebuild(
        &self,
        unaccounted: impl FnOnce(&LedgerState) -> Vec<u32>,
    ) -> Result<Outcome<Result<bool, Vec<u32>>>, LedgerError> {
        self.transact(|state| {
            if state.lost.is_none() {
                return Ok(Ok(false));
            }
            let missing = unaccounted(state);
            if missing.is_empty() {
                state.lost = None;
                Ok(Ok(true))
            } else {
                Ok(Err(missing))
            }
        })
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
        lock.unlock()
            .map_err(|e| io_error("unlock", &self.dir.join(LOCK_FILE), e))?;
        Ok(value)
    }

    /// Runs `change` on the state under the exclusive lock and writes the
    /// result back durably when it differs (or had to be repaired).
    fn transact<T>(
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
        let value = match change(&mut state) {
            Ok(value) => value,
            Err(error) => {
                if repair.is_some() {
                    self.write(&state)?;
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
        lock.unlock()
            .map_err(|e| io_error("unlock", &self.dir.join(LOCK_FILE), e))?;
        Ok(Outcome {
            value,
            repair,
            notes,
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
                Err(source) => return Err(io_error("lock", &path, source).into()),
            }
        }
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

/// The version of a state file of this format newer than this gpushare
/// reads, if `bytes` is one (only its `format` and `version` are read).
fn newer_version(bytes: &[u8]) -> Option<u32> {
    #[derive(Deserialize)]
    struct Head {
        format: String,
        version: u32,
    }
    let head: Head = serde_json::from_slice(bytes).ok()?;
    (head.format == FORMAT_NAME && head.version > FORMAT_VERSION).then_some(head.version)
}

pub(crate) fn unix_now() -> u64 {
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
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// A directory of its own per test, removed even when the test fails.
    struct TempDir(tempfile::TempDir);

    impl TempDir {
        fn new() -> Self {
            Self(tempfile::tempdir().unwrap_or_else(|e| panic!("{e}")))
        }

        fn path(&self) -> &Path {
            self.0.path()
        }

        fn owner(&self) -> u32 {
            fs::metadata(self.path())
                .map(|m| m.uid())
                .unwrap_or_else(|e| panic!("{e}"))
        }

        /// A ledger in `<temp>/gpu-mps`, created by `open` as on a fresh boot.
        fn ledger(&self) -> Ledger {
            ok(Ledger::open(&self.path().join("gpu-mps"), self.owner()))
        }
    }

    #[test]
    fn a_slurm_chosen_gpu_at_its_client_limit_is_refused_unrecorded() {
        let temp = TempDir::new();
        let ledger = temp.ledger().with_server_rule(ServerRule {
            multi_user: false,
            refuse_other_users: false,
            max_clients: 1,
        });
        let choice = SlurmChoice {
            gpu: 1,
            gpu_count: 2,
            units_per_gpu: 100,
        };
        ok(ledger.record_slurm_share(1, 1000, "a", 10, choice));
        match ledger.record_slurm_share(2, 1000, "a", 10, choice) {
            Err(LedgerError::Placement {
                error: PlacementError::TooManyClients { max_clients: 1 },
                ..
            }) => {}
            other => panic!("expected TooManyClients, got {other:?}"),
        }
        let state = ok(ledger.snapshot()).state;
        assert!(state.share(2).is_none());
        // The other GPU still takes it.
        ok(ledger.record_slurm_share(2, 1000, "a", 10, SlurmChoice { gpu: 0, ..choice }));
    }

    pub(crate) fn ok<T>(result: Result<T, LedgerError>) -> T {
        result.unwrap_or_else(|e| panic!("{e}"))
    }

    pub(crate) fn place(ledger: &Ledger, job: u32, units: u32) -> u32 {
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

    fn jobs(state: &LedgerState) -> Vec<u32> {
        state.shares().map(|s| s.job).collect()
    }

    #[test]
    fn open_creates_a_missing_directory_private_with_an_empty_state() {
        let temp = TempDir::new();
        // After a reboot /run is empty: neither level exists.
        let dir = temp.path().join("run").join("gpu-mps");
        let ledger = ok(Ledger::open(&dir, temp.owner()));
        assert!(ledger.created());
        assert_eq!(mode_of(&dir), 0o700);
        assert_eq!(mode_of(&ledger.state_path()), 0o600);
        assert_eq!(ledger.dir(), dir.as_path());
        let again = ok(Ledger::open(&dir, temp.owner()));
        assert!(!again.created());
        let snapshot = ok(again.snapshot());
        assert!(snapshot.state.is_empty() && snapshot.set_aside_files.is_empty());
        // Nothing but the directory itself is left beside it.
        let names: Vec<String> = fs::read_dir(temp.path().join("run"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(names, vec!["gpu-mps".to_string()]);
    }

    #[test]
    fn open_refuses_a_symlink_even_to_a_good_directory() {
        let temp = TempDir::new();
        let real = temp.path().join("real");
        ok(Ledger::open(&real, temp.owner()));
        let link = temp.path().join("gpu-mps");
        std::os::unix::fs::symlink(&real, &link).unwrap_or_else(|e| panic!("{e}"));
        let error = Ledger::open(&link, temp.owner()).err();
        assert!(
            matches!(&error, Some(LedgerError::Dir(DirError::IsSymlink(dir))) if *dir == link),
            "{error:?}"
        );
        let text = error.map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains("is a symbolic link"), "{text}");
        // A dangling link is refused too, not followed to create a directory.
        let dangling = temp.path().join("dangling");
        std::os::unix::fs::symlink(temp.path().join("nowhere"), &dangling)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            Ledger::open(&dangling, temp.owner()),
            Err(LedgerError::Dir(DirError::IsSymlink(_)))
        ));
        assert!(!temp.path().join("nowhere").exists());
    }

    #[test]
    fn open_refuses_a_file_in_place_of_the_directory() {
        let temp = TempDir::new();
        let path = temp.path().join("gpu-mps");
        write(&path, "");
        let error = Ledger::open(&path, temp.owner()).err();
        assert!(
            matches!(error, Some(LedgerError::Dir(DirError::NotADirectory(_)))),
            "{error:?}"
        );
    }

    #[test]
    fn open_refuses_a_foreign_owner() {
        let temp = TempDir::new();
        let dir = temp.path().join("gpu-mps");
        ok(Ledger::open(&dir, temp.owner()));
        let stranger = temp.owner().wrapping_add(1);
        let error = Ledger::open(&dir, stranger).err();
        let text = error.as_ref().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            matches!(error, Some(LedgerError::Dir(DirError::WrongOwner { owner, expected, .. }))
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
        let temp = TempDir::new();
        let dir = temp.path().join("gpu-mps");
        ok(Ledger::open(&dir, temp.owner()));
        for mode in [0o750, 0o701, 0o755, 0o1777] {
            fs::set_permissions(&dir, fs::Permissions::from_mode(mode))
                .unwrap_or_else(|e| panic!("{e}"));
            let error = Ledger::open(&dir, temp.owner()).err();
            let text = error.as_ref().map(|e| e.to_string()).unwrap_or_default();
            assert!(
                matches!(error, Some(LedgerError::Dir(DirError::TooOpen { mode: m, .. })) if m == mode),
                "{mode:o}: {text}"
            );
            assert!(
                text.contains(&format!("mode {mode:04o}")) && text.contains("chmod 0700"),
                "{text}"
            );
        }
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
            .unwrap_or_else(|e| panic!("{e}"));
        ok(Ledger::open(&dir, temp.owner()));
    }

    #[test]
    fn a_share_is_placed_with_its_memory_limit_in_one_transaction() {
        let temp = TempDir::new();
        let mut ledger = temp.ledger();
        ledger.set_share_memory(ShareMemory(Arc::new(|units| Some(u64::from(units) * 480))));
        let placed = ok(ledger.place(7, 1000, "alice", 25, 4, 100)).value;
        assert_eq!(placed.share.memory_mib, Some(12000));
        // Written so: a reader sees the limit with the share, never without.
        let state = ok(ledger.snapshot()).state;
        assert_eq!(state.share(7).and_then(|s| s.memory_mib), Some(12000));
        let slurm = SlurmChoice {
            gpu: 2,
            gpu_count: 4,
            units_per_gpu: 100,
        };
        let placed = ok(ledger.record_slurm_share(8, 1000, "alice", 50, slurm)).value;
        assert_eq!(placed.share.memory_mib, Some(24000));
    }

    #[test]
    fn a_placement_is_written_as_versioned_json() {
        let temp = TempDir::new();
        let ledger = temp.ledger();
        let outcome = ok(ledger.place(123, 1000, "alice", 50, 4, 100));
        assert_eq!(outcome.repair, None);
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
        let json: serde_json::Value =
            serde_json::from_str(&read(&ledger.state_path())).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(json["format"], "gpushare-mps-ledger");
        assert_eq!(json["version"], 2);
        assert_eq!(json["shares"][0]["job"], 123);
        assert_eq!(json["shares"][0]["user"], "alice");
        assert_eq!(json["shares"][0]["units"], 50);
        assert_eq!(json["whole"][0]["gpus"], serde_json::json!([1, 3]));
        assert!(json.get("lost").is_none());
        assert_eq!(mode_of(&ledger.state_path()), 0o600);
        assert_eq!(mode_of(&ledger.dir().join(LOCK_FILE)), 0o600);
        assert!(!ledger.dir().join("state.new").exists());
    }

    #[test]
    fn placing_a_job_again_returns_its_gpu_unchanged_without_writing() {
        let temp = TempDir::new();
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
        let temp = TempDir::new();
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
                    repair: None,
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
        let temp = TempDir::new();
        let ledger = temp.ledger();
        let empty = read(&ledger.state_path());
        let refused = |units, gpus| match ledger.place(1, 1, "u", units, gpus, 100) {
            Err(LedgerError::Placement { error, .. }) => error,
            other => panic!("{other:?}"),
        };
        assert_eq!(refused(0, 4), PlacementError::ZeroUnits);
        assert_eq!(
            refused(101, 4),
            PlacementError::MoreThanOneGpu {
                units: 101,
                units_per_gpu: 100
            }
        );
        assert_eq!(refused(10, 0), PlacementError::NoGpus);
        assert!(matches!(
            refused(10, u32::MAX),
            PlacementError::TooManyGpus { .. }
        ));
        assert_eq!(read(&ledger.state_path()), empty);
    }

    #[test]
    fn shares_avoid_gpus_held_whole() {
        let temp = TempDir::new();
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
        let temp = TempDir::new();
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
        let temp = TempDir::new();
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
        let temp = TempDir::new();
        let ledger = temp.ledger();
        let empty = read(&ledger.state_path());
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
        assert_eq!(jobs(&ok(ledger.snapshot()).state), vec![2]);
        // A job with both kinds loses both.
        ok(ledger.record_whole(2, &[3]));
        assert_eq!(ok(ledger.release(2)).value.len(), 2);
        assert!(ok(ledger.snapshot()).state.is_empty());
        assert_eq!(read(&ledger.state_path()), empty);
    }

    #[test]
    fn reconcile_drops_the_records_of_jobs_no_longer_running() {
        let temp = TempDir::new();
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
        assert_eq!(jobs(&state), vec![2, 4]);
        assert_eq!(
            state.whole_holders().map(|w| w.job).collect::<Vec<_>>(),
            vec![11]
        );
        assert!(ok(ledger.reconcile(|job| running.contains(&job)))
            .value
            .is_empty());
        let lines: Vec<String> = dropped.iter().map(Record::to_string).collect();
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("whole job=10 gpus=[3] since=")),
            "{lines:?}"
        );
    }

    #[test]
    fn an_unreadable_state_without_a_copy_is_set_aside_and_the_node_stops_placing() {
        let temp = TempDir::new();
        let ledger = temp.ledger();
        place(&ledger, 1, 100);
        let garbage = "{\"format\":\"gpushare-mps-ledger\",\"version\":2,\"shares\":[{\"job\":1}";
        write(&ledger.state_path(), garbage);
        // Readers report it and leave it where it is.
        let error = ledger.snapshot().err();
        let text = error.as_ref().map(|e| e.to_string()).unwrap_or_default();
        assert!(matches!(&error, Some(LedgerError::Corrupt(_))), "{text}");
        assert!(
            text.contains(&ledger.state_path().display().to_string()),
            "{text}"
        );
        assert_eq!(read(&ledger.state_path()), garbage);

        // GPU 0 may be full: placing anywhere would be a guess.
        let refused = ledger.place(2, 1000, "bob", 30, 4, 100);
        let Err(LedgerError::Placement {
            error: PlacementError::LoadsUnknown { reason },
            repair: Some(repair),
        }) = refused
        else {
            panic!("expected a refusal with a repair, got {refused:?}");
        };
        assert!(reason.contains("unreadable"), "{reason}");
        let moved_to = repair.moved_to.clone().unwrap_or_default();
        assert_eq!(
            read(&moved_to),
            garbage,
            "the bad file is kept for the admin"
        );
        assert!(repair.rebuilt_from.is_none());
        assert!(repair.to_string().contains("gpu-mps gc"), "{repair}");
        let snapshot = ok(ledger.snapshot());
        assert!(snapshot.state.lost_reason().is_some());
        assert_eq!(snapshot.set_aside_files, vec![moved_to]);
        // Whole-GPU holders are still recorded, releases still work.
        ok(ledger.record_whole(5, &[1]));
        assert_eq!(ok(ledger.release(5)).value.len(), 1);
        // Until an admin's rebuild finds every running share accounted for.
        let still = ok(ledger.rebuild(|_| vec![1])).value;
        assert_eq!(still, Err(vec![1]));
        assert!(ledger.place(2, 1000, "bob", 30, 4, 100).is_err());
        assert_eq!(ok(ledger.rebuild(|_| Vec::new())).value, Ok(true));
        assert_eq!(place(&ledger, 2, 30), 0);
        assert_eq!(ok(ledger.rebuild(|_| Vec::new())).value, Ok(false));
    }

    #[test]
    fn the_text_format_of_gpushare_0_1_is_named_and_set_aside() {
        let temp = TempDir::new();
        let ledger = temp.ledger();
        let old =
            "gpushare-mps-ledger version=1\nshare job=1 uid=5 user=a gpu=0 units=10 since=1\n";
        write(&ledger.state_path(), old);
        let text = ledger
            .snapshot()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(text.contains("text format of gpushare 0.1"), "{text}");
        let repair = ok(ledger.release(1))
            .repair
            .unwrap_or_else(|| panic!("no repair"));
        assert_eq!(read(&repair.moved_to.unwrap_or_default()), old);
    }

    #[test]
    fn non_utf8_state_names_the_line() {
        let temp = TempDir::new();
        let ledger = temp.ledger();
        fs::write(ledger.state_path(), b"{\n\"format\": \"\xff\"}")
            .unwrap_or_else(|e| panic!("{e}"));
        let error = ledger.snapshot().err();
        assert!(
            matches!(&error, Some(LedgerError::Corrupt(ParseError { line: 2, problem, .. })) if problem == "not UTF-8 text"),
            "{error:?}"
        );
    }

    #[test]
    fn a_leftover_temp_file_is_ignored_and_replaced() {
        let temp = TempDir::new();
        let ledger = temp.ledger();
        place(&ledger, 1, 50);
        let good = read(&ledger.state_path());
        // A crash between creating the temp file and the rename.
        let leftover = ledger.dir().join("state.new");
        write(&leftover, "{\"format\":\"gpushare-mps-ledger\",\"vers");
        assert_eq!(read(&ledger.state_path()), good);
        assert_eq!(jobs(&ok(ledger.snapshot()).state), vec![1]);
        // A no-op leaves it (it is harmless); the next write replaces it.
        ok(ledger.release(42));
        assert_eq!(place(&ledger, 2, 50), 1);
        assert!(!leftover.exists());
        assert_eq!(jobs(&ok(ledger.snapshot()).state), vec![1, 2]);
        assert!(ok(ledger.snapshot()).set_aside_files.is_empty());
    }

    #[test]
    fn the_state_survives_the_directory_being_wiped_as_by_a_reboot() {
        let temp = TempDir::new();
        let ledger = temp.ledger();
        place(&ledger, 1, 50);
        fs::remove_dir_all(ledger.dir()).unwrap_or_else(|e| panic!("{e}"));
        let fresh = temp.ledger();
        assert!(fresh.created());
        assert!(ok(fresh.snapshot()).state.is_empty());
        assert_eq!(place(&fresh, 2, 50), 0);
    }

    #[test]
    fn parse_refuses_what_it_cannot_trust() {
        let share = r#"{"job":1,"uid":2,"user":"a","gpu":0,"units":10,"since":3}"#;
        let file = |shares: &str, whole: &str, extra: &str| {
            format!(
                r#"{{"format":"gpushare-mps-ledger","version":2,"shares":[{shares}],"whole":[{whole}]{extra}}}"#
            )
        };
        let cases: Vec<(String, &str)> = vec![
            (String::new(), "EOF"),
            (file(share, "", ",\"colour\":1"), "unknown field `colour`"),
            (
                file(&share.replace("\"units\":10", "\"units\":0"), "", ""),
                "at least 1 unit",
            ),
            (
                file(&format!("{share},{share}"), "", ""),
                "two share records",
            ),
            (
                file("", r#"{"job":4,"gpus":[],"since":1}"#, ""),
                "non-empty list",
            ),
            (
                file("", r#"{"job":4,"gpus":[1,1],"since":1}"#, ""),
                "without repeats",
            ),
            (
                file(&share.replace("\"units\":10", "\"units\":-1"), "", ""),
                "invalid value",
            ),
            (
                file(share, "", "").replace("\"version\":2", "\"version\":3"),
                "version 3",
            ),
        ];
        for (text, want) in cases {
            match LedgerState::parse(&text, Path::new("/run/gpu-mps/state")) {
                Ok(state) => panic!("{text:?} parsed as {state:?}"),
                Err(e) => assert!(
                    e.to_string().contains(want),
                    "{text:?}: {e} (wanted {want:?})"
                ),
            }
        }
        let good = LedgerState::parse(
            &file(share, r#"{"job":4,"gpus":[3,1],"since":1}"#, ""),
            Path::new("s"),
        );
        let good = good.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            good.whole_holder(4).map(|w| w.gpus.clone()),
            Some(vec![1, 3])
        );
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
                placed_by_slurm: false,
                memory_mib: None,
                clients: None,
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
            placed_by_slurm: true,
            memory_mib: None,
            clients: None,
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

    fn any_share() -> impl Strategy<Value = ShareRecord> {
        (
            any::<u32>(),
            any::<u32>(),
            any::<String>(),
            0u32..16,
            1u32..=100,
            any::<u64>(),
            any::<bool>(),
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<u32>()),
        )
            .prop_map(
                |(job, uid, user, gpu, units, since, placed_by_slurm, memory_mib, clients)| {
                    ShareRecord {
                        job,
                        uid,
                        user,
                        gpu,
                        units,
                        since,
                        placed_by_slurm,
                        memory_mib,
                        clients,
                    }
                },
            )
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
            lost in proptest::option::of(any::<String>()),
        ) {
            let mut state = lost.map_or_else(LedgerState::new, LedgerState::lost);
            for share in shares {
                state.insert_share(share);
            }
            for whole in wholes {
                state.insert_whole(whole);
            }
            let parsed = LedgerState::parse(&state.to_json(), Path::new("state"));
            prop_assert_eq!(parsed, Ok(state));
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
        let temp = TempDir::new();
        let dir = Arc::new(temp.path().join("gpu-mps"));
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
    const WORKER_GATE: &str = "GPUSHARE_LEDGER_TEST_WORKER_GATE";

    fn now_ns() -> u128 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    }

    /// Does nothing in a normal run; the multi-process test re-runs this
    /// binary with only this test selected and the variables set. It waits
    /// at the gate so all workers start placing together, and prints when
    /// it started and ended placing.
    #[test]
    fn process_worker() {
        let (Some(dir), Some(id), Some(gate)) = (
            std::env::var_os(WORKER_DIR),
            std::env::var_os(WORKER_ID),
            std::env::var_os(WORKER_GATE),
        ) else {
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
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !Path::new(&gate).exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "the gate never opened"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let start = now_ns();
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
        println!("worker-interval {start} {}", now_ns());
    }

    #[test]
    fn concurrent_processes_never_over_fill_and_stay_balanced() {
        let temp = TempDir::new();
        let dir = temp.path().join("gpu-mps");
        // Created once up front, as the first prolog after a boot would.
        ok(Ledger::open(&dir, temp.owner()));
        let gate = temp.path().join("gate");
        let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
        let test_name = format!(
            "{}::process_worker",
            module_path!().split_once("::").map_or("", |(_, rest)| rest)
        );
        // All spawned before any is waited for: they run at the same time.
        let workers: Vec<_> = (0..4u32)
            .map(|id| {
                std::process::Command::new(&exe)
                    .args([
                        test_name.as_str(),
                        "--exact",
                        "--test-threads=1",
                        "--nocapture",
                    ])
                    .env(WORKER_DIR, &dir)
                    .env(WORKER_ID, id.to_string())
                    .env(WORKER_GATE, &gate)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap_or_else(|e| panic!("{e}"))
            })
            .collect();
        write(&gate, "");
        let mut intervals = Vec::new();
        for worker in workers {
            let output = worker.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(
                output.status.success(),
                "worker failed: {}\n{stdout}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
            let interval = stdout
                .lines()
                .find_map(|l| l.split("worker-interval ").nth(1))
                .and_then(|l| l.split_once(' '))
                .and_then(|(a, b)| Some((a.parse::<u128>().ok()?, b.parse::<u128>().ok()?)))
                .unwrap_or_else(|| panic!("the worker test did not run: {stdout}"));
            intervals.push(interval);
        }
        // The property under test needs the workers to overlap in time.
        let latest_start = intervals.iter().map(|i| i.0).max().unwrap_or(0);
        let earliest_end = intervals.iter().map(|i| i.1).min().unwrap_or(0);
        assert!(
            latest_start < earliest_end,
            "the workers ran one after another, not at once: {intervals:?}"
        );
        assert_balanced_full_house(&temp.ledger(), 32);
    }

    #[test]
    fn a_ledger_under_a_directory_others_can_change_is_never_opened() {
        let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let me = fs::metadata(temp.path()).map(|m| m.uid()).unwrap_or(0);
        let run = temp.path().join("run");
        let dir = run.join("gpu-mps");
        assert!(Ledger::open(&dir, me).is_ok());
        fs::set_permissions(&run, fs::Permissions::from_mode(0o777))
            .unwrap_or_else(|e| panic!("{e}"));
        let err = Ledger::open(&dir, me).err().map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("writable by group or others")),
            "{err:?}"
        );
        let fresh = Ledger::open(&run.join("other"), me).err();
        assert!(fresh.is_some() && !run.join("other").exists());
    }
}
