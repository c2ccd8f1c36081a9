//! The configuration in force on a node: `gpu_mps.conf` as the node
//! programs may trust it, and the ledger it was made with.
//!
//! Every job start reads `gpu_mps.conf`, and an admin may be rewriting it
//! in place at that moment. A half-written file must never become the
//! node's configuration: with another `StateDir` it would open a second
//! ledger (and start second daemons) for the same GPUs, with another
//! `UnitsPerGPU` it would fill them by another measure. So:
//!
//! - The file is read whole or not at all ([`read_settled`]: size, inode
//!   and times before and after, a final newline, at least one key; tried
//!   again for up to 30 ms).
//! - The last good text is recorded under the state dir (`<StateDir>/config`,
//!   replaced atomically), with the inode it was read from. A read that
//!   stays half-written, or a text that differs from the record and was
//!   written *in place* less than [`IN_PLACE_QUIET`] ago, is not believed:
//!   the recorded configuration stays in force, and the node's log says so.
//!   An edit made by replacing the file (rename) takes effect at once.
//!   With nothing recorded (the node's first use), a file cut at a line's
//!   end reads as a whole one: there a file changed less than
//!   [`IN_PLACE_QUIET`] ago is not believed (a placer waits once for it to
//!   be still), and shares are refused while it keeps changing.
//! - A node-wide pointer ([`NODE_RECORDS_DIR`]`/ledger-of-<conf path>`)
//!   names the state dir of the ledger in force, so a program that reads
//!   another `StateDir` finds the ledger made under the recorded
//!   configuration. Its identity (`StateDir`, `UnitsPerGPU`, `GPUDevices`,
//!   `MPSControl`) changes only while that ledger holds no record, under
//!   the pointer's lock taken exclusively; every prolog that places holds
//!   it shared until it has placed. While shares run under the old
//!   identity, new shares are refused with the reason: never two ledgers
//!   with shares for the same GPUs.
//! - A file that stays bad (invalid, or half-written and not being written
//!   now) refuses shares only: CPU-only and whole-GPU jobs run, and the
//!   recorded configuration still serves (releases) the shares running.
//! - The file is read for one node, as Slurm names it (its `NodeName=`
//!   lines, see [`config::parse_for`]). One that gives the node no GPUs
//!   makes it a node without the file ([`InForce::no_gpus`]), once no job
//!   holds a share or whole GPU under the recorded configuration (until
//!   then that serves them, and new shares are refused). A change to
//!   another node's lines changes nothing here.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::config::{self, GpuMpsConfig, MpsControl};
use super::ledger::Ledger;
use super::lock_wait::{self, relock, Busy, Held, LockError, LockWait, Mode};
use super::state_dir::{self, Access};
use crate::shared::watched::{read_settled, Expect, FileId, Settled, Stamp, Unsettled};

/// Where the node keeps its pointers to the ledger in force, one per
/// `gpu_mps.conf` path (`/run`: gone at a reboot, with the default ledger).
pub const NODE_RECORDS_DIR: &str = "/run/gpushare";

/// The record of the last good configuration, under `StateDir`.
pub const RECORD_FILE: &str = "config";

/// How long a file edited in place must have been still before a text
/// other than the recorded one is believed.
pub const IN_PLACE_QUIET: Duration = Duration::from_secs(1);

/// How long a prolog that finds a new configuration to adopt waits for
/// the placements under the old one to end: one of them may be adopting
/// it now, and a share refused for that would fail for nothing.
pub const ADOPT_WAIT: Duration = Duration::from_secs(10);

const RECORD_FORMAT: &str = "gpushare-mps-config";
const POINTER_FORMAT: &str = "gpushare-mps-ledger-pointer";

/// The last good `gpu_mps.conf`, as recorded under its `StateDir`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    format: String,
    conf: PathBuf,
    /// The file the text was read from (an in-place edit keeps it).
    file: FileId,
    text: String,
}

/// Which state dir holds the ledger in force for a `gpu_mps.conf`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Pointer {
    format: String,
    conf: PathBuf,
    state_dir: PathBuf,
}

/// What a node program does with the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A prolog that records a share or whole GPUs: records the last good
    /// text, may adopt a new identity, holds the pointer's lock shared.
    Placer,
    /// Everything else: reads, writes nothing.
    Reader,
}

/// The configuration a node program runs with.
#[derive(Debug)]
pub struct InForce {
    /// `None`: no configuration can be trusted (a bad file, nothing
    /// recorded): no share can be placed or served.
    pub cfg: Option<GpuMpsConfig>,
    /// Why the file gives this node no GPUs (`NodeName=` lines that name
    /// other nodes only), where no share of an earlier configuration is
    /// held here: the node shares nothing, as a node without the file
    /// (`cfg` is `None`, `shares_refused` says the same).
    pub no_gpus: Option<String>,
    /// Why new shares are refused now, if they are (the text a refused job
    /// gets, after its `gpu_mps: job N on node X: `).
    pub shares_refused: Option<String>,
    /// What the node's log must say (a fallback, an adoption).
    pub notes: Vec<String>,
    /// A placer that could not hold the pointer's lock (another held it
    /// exclusive, adopting a new configuration, for the whole wait): it
    /// places nothing, shares and whole GPUs alike.
    pub busy: Option<Busy>,
    /// The pointer's lock, held shared by a placer until it exits.
    _lock: Option<Held>,
}

impl InForce {
    fn run_with(cfg: GpuMpsConfig) -> Self {
        Self {
            cfg: Some(cfg),
            no_gpus: None,
            shares_refused: None,
            notes: Vec::new(),
            busy: None,
            _lock: None,
        }
    }

    /// Nothing to run with, shares refused for `why`.
    fn refusing(why: String, note: String) -> Self {
        Self {
            cfg: None,
            no_gpus: None,
            shares_refused: Some(why),
            notes: vec![note],
            busy: None,
            _lock: None,
        }
    }

    /// The node shares nothing: the file gives it no GPUs (`why`).
    fn no_gpus(why: String) -> Self {
        Self {
            cfg: None,
            no_gpus: Some(why.clone()),
            shares_refused: Some(why),
            notes: Vec::new(),
            busy: None,
            _lock: None,
        }
    }
}

/// The keys a ledger is made with, named where they differ between `now`
/// (the file) and `recorded` (the ledger's): `StateDir=/a (the ledger's: /b)`.
pub fn identity_changes(now: &GpuMpsConfig, recorded: &GpuMpsConfig) -> Vec<String> {
    let devices = |c: &GpuMpsConfig| match &c.gpu_devices {
        None => "every /dev/nvidia<N>".to_owned(),
        Some(list) => list
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(","),
    };
    let control = |c: &GpuMpsConfig| match &c.mps_control {
        MpsControl::FromPath => "auto".to_owned(),
        MpsControl::Disabled => "none".to_owned(),
        MpsControl::Program(p) => p.display().to_string(),
    };
    let pairs = [
        (
            "StateDir",
            now.state_dir.display().to_string(),
            recorded.state_dir.display().to_string(),
        ),
        (
            "UnitsPerGPU",
            now.units_per_gpu.to_string(),
            recorded.units_per_gpu.to_string(),
        ),
        ("GPUDevices", devices(now), devices(recorded)),
        ("MPSControl", control(now), control(recorded)),
    ];
    pairs
        .into_iter()
        .filter(|(_, a, b)| a != b)
        .map(|(key, a, b)| format!("{key}={a} (the ledger's: {b})"))
        .collect()
}

/// The pointer's file name for `conf`.
fn pointer_name(conf: &Path) -> String {
    named_for("ledger-of", conf)
}

/// A node-wide file name for `conf`: `prefix`, then its path, `/` as `-`,
/// anything but letters, digits, `_` and `.` as `%xx`.
pub(crate) fn named_for(prefix: &str, conf: &Path) -> String {
    let mut name = String::from(prefix);
    for b in conf.as_os_str().as_encoded_bytes() {
        match b {
            b'/' => name.push('-'),
            b if b.is_ascii_alphanumeric() || *b == b'_' || *b == b'.' => name.push(char::from(*b)),
            b => name.push_str(&format!("%{b:02x}")),
        }
    }
    name
}

/// The pointer and its lock for `conf` under `records`, as a node program
/// names them.
pub fn pointer_files(records: &Path, conf: &Path) -> [PathBuf; 2] {
    let name = pointer_name(conf);
    [records.join(&name), records.join(format!("{name}.lock"))]
}

fn read_pointer(records: &Path, conf: &Path, owner: u32) -> Option<PathBuf> {
    state_dir::check(records, owner, Access::Private).ok()?;
    let text = fs::read_to_string(records.join(pointer_name(conf))).ok()?;
    let p: Pointer = serde_json::from_str(&text).ok()?;
    (p.format == POINTER_FORMAT && p.conf == conf).then_some(p.state_dir)
}

fn write_pointer(records: &Path, conf: &Path, state_dir: &Path, owner: u32) -> Result<(), String> {
    state_dir::ensure(records, owner, Access::Private).map_err(|e| e.to_string())?;
    let p = Pointer {
        format: POINTER_FORMAT.to_owned(),
        conf: conf.to_path_buf(),
        state_dir: state_dir.to_path_buf(),
    };
    let json = serde_json::to_string(&p).map_err(|e| e.to_string())?;
    state_dir::replace_file(records, &pointer_name(conf), json.as_bytes(), 0o600)
        .map_err(|e| e.to_string())
}

/// The record under `dir`, parsed for `node`; `None` where there is none,
/// the directory is not one root may trust, or the record does not read
/// (or gives `node` no GPUs).
fn read_record(dir: &Path, conf: &Path, node: &str, owner: u32) -> Option<(Record, GpuMpsConfig)> {
    state_dir::check(dir, owner, Access::Private).ok()?;
    let text = fs::read_to_string(dir.join(RECORD_FILE)).ok()?;
    let record: Record = serde_json::from_str(&text).ok()?;
    if record.format != RECORD_FORMAT || record.conf != conf {
        return None;
    }
    let cfg = config::parse(&record.text, &conf.to_string_lossy(), node).ok()??;
    // A record names the ledger it sits beside, and no other.
    (cfg.state_dir == dir).then_some((record, cfg))
}

/// Records `settled` (parsed as `cfg`) as the last good configuration, in
/// its state dir (created with its ledger where missing), and points the
/// node at that ledger.
fn record(
    conf: &Path,
    records: &Path,
    settled: &Settled,
    cfg: &GpuMpsConfig,
    owner: u32,
) -> Result<(), String> {
    Ledger::open(&cfg.state_dir, owner).map_err(|e| e.to_string())?;
    let record = Record {
        format: RECORD_FORMAT.to_owned(),
        conf: conf.to_path_buf(),
        file: settled.stamp.file(),
        text: settled.text.clone(),
    };
    let json = serde_json::to_string(&record).map_err(|e| e.to_string())?;
    state_dir::replace_file(&cfg.state_dir, RECORD_FILE, json.as_bytes(), 0o600)
        .map_err(|e| e.to_string())?;
    write_pointer(records, conf, &cfg.state_dir, owner)
}

/// Whether the ledger of `cfg` holds no record (a missing one holds none;
/// one that cannot be read may hold some).
fn ledger_empty(cfg: &GpuMpsConfig, owner: u32) -> bool {
    if fs::symlink_metadata(&cfg.state_dir).is_err() {
        return true;
    }
    Ledger::open(&cfg.state_dir, owner)
        .and_then(|l| l.snapshot())
        .is_ok_and(|s| s.state.is_empty())
}

/// The pointer's lock file (its directory made where missing).
fn lock_path(records: &Path, conf: &Path, owner: u32) -> Result<PathBuf, String> {
    state_dir::ensure(records, owner, Access::Private).map_err(|e| e.to_string())?;
    let [_, path] = pointer_files(records, conf);
    Ok(path)
}

/// The pointer's lock in words.
const CONF_LOCK: &str = "the node's configuration lock";

/// Why a node that reads `cfg` has no GPU to share: it names no
/// `GPUDevices=` and there is no `/dev/nvidia<N>` here. A CPU node where
/// `/etc/slurm` is shared reads the GPU nodes' file: it is a node without
/// the file, never one drained for it (a node that lists its GPUs and
/// finds none of them is misconfigured, and says so where they are used).
fn without_gpus(cfg: &GpuMpsConfig, name: &str) -> Option<String> {
    (cfg.gpu_devices.is_none() && super::gpu_devices::gpu_devices(cfg).is_empty()).then(|| {
        format!("{name} names no GPUDevices= and this node has no /dev/nvidia<N>: it shares no GPU")
    })
}

/// What a read of the file gave.
enum Read {
    /// Whole and valid: the node's configuration, or why the file gives
    /// it no GPUs.
    Good(Settled, Result<Box<GpuMpsConfig>, String>),
    /// Not usable: why, and whether it is being written now (changing
    /// during the read, or written in place within [`IN_PLACE_QUIET`]).
    Bad { why: String, transient: bool },
}

fn read(conf: &Path, node: &str, recorded: Option<FileId>, now: SystemTime) -> Read {
    let name = conf.to_string_lossy();
    let in_place_now = |stamp: Option<Stamp>| {
        stamp.is_some_and(|s| {
            s.modified_within(IN_PLACE_QUIET, now) && recorded.is_none_or(|f| f == s.file())
        })
    };
    match read_settled(conf, Expect::SomeKey) {
        Err(e) => Read::Bad {
            why: format!("{name}: cannot be read: {e}"),
            transient: false,
        },
        Ok(Err(unsettled)) => Read::Bad {
            why: format!("{name}: {unsettled}"),
            transient: unsettled == Unsettled::Changed || in_place_now(Stamp::of(conf).ok()),
        },
        Ok(Ok(settled)) => match config::parse_for(&settled.text, &name, node) {
            Ok(s) => {
                let cfg = s
                    .cfg
                    .map(Box::new)
                    .ok_or(s.no_gpus.unwrap_or_default())
                    .and_then(|c| match without_gpus(&c, &name) {
                        Some(why) => Err(why),
                        None => Ok(c),
                    });
                Read::Good(settled, cfg)
            }
            Err(e) => Read::Bad {
                why: e.to_string(),
                transient: in_place_now(Some(settled.stamp)),
            },
        },
    }
}

/// Where a node program reads its configuration: the file, the node as
/// Slurm names it (its `NodeName=` lines), the records dir
/// ([`NODE_RECORDS_DIR`] on a node), the uid the state belongs to, and how
/// long a placer waits for the pointer's lock.
#[derive(Debug, Clone, Copy)]
pub struct Reading<'a> {
    pub conf: &'a Path,
    pub node: &'a str,
    pub records: &'a Path,
    pub owner: u32,
    pub wait: LockWait,
}

/// The configuration to run with for `conf` on node `node` (see the
/// module doc). `records` is [`NODE_RECORDS_DIR`] on a node; `owner` the
/// uid the state belongs to.
pub fn resolve(conf: &Path, node: &str, records: &Path, owner: u32, role: Role) -> InForce {
    let at = Reading {
        conf,
        node,
        records,
        owner,
        wait: LockWait::default(),
    };
    resolve_at(at, role, SystemTime::now())
}

/// [`resolve`] for a program that waits for locks within `wait` (a
/// prolog's budget): a placer that cannot take the pointer's lock in time
/// runs with the configuration, [`InForce::busy`] saying why it may place
/// nothing.
pub fn resolve_within(at: Reading<'_>, role: Role) -> InForce {
    resolve_at(at, role, SystemTime::now())
}

fn resolve_at(at: Reading<'_>, role: Role, now: SystemTime) -> InForce {
    let Reading {
        conf,
        records,
        owner,
        wait,
        ..
    } = at;
    let mut notes = Vec::new();
    let mut busy = None;
    let lock = match role {
        Role::Reader => None,
        Role::Placer => {
            let taken = lock_path(records, conf, owner).and_then(|path| {
                lock_wait::lock(&path, CONF_LOCK, Mode::Shared, wait).map_err(|e| match e {
                    LockError::Busy(b) => {
                        busy = Some(b);
                        String::new()
                    }
                    other => other.to_string(),
                })
            });
            match taken {
                Ok(held) => Some(held),
                Err(e) => {
                    if busy.is_none() {
                        notes.push(format!("{CONF_LOCK}: {e}"));
                    }
                    None
                }
            }
        }
    };
    let mut in_force = decide(at, role, now, lock.as_ref(), &mut notes, true);
    in_force.notes.splice(0..0, notes);
    // A placer that lost its shared lock converting it places nothing.
    if let Some(held) = &lock {
        let start = std::time::Instant::now();
        if !matches!(relock(held.file(), Mode::Shared, wait), Ok(true)) {
            in_force.busy = Some(Busy {
                what: CONF_LOCK.to_owned(),
                path: lock_path(records, conf, owner).unwrap_or_default(),
                waited: start.elapsed(),
            });
        }
    }
    in_force.busy = in_force.busy.take().or(busy);
    in_force._lock = lock;
    in_force
}

fn decide(
    at: Reading<'_>,
    role: Role,
    now: SystemTime,
    lock: Option<&Held>,
    notes: &mut Vec<String>,
    may_wait: bool,
) -> InForce {
    let Reading {
        conf,
        node,
        records,
        owner,
        ..
    } = at;
    let name = conf.display();
    let pointed = read_pointer(records, conf, owner);
    let mut recorded = pointed
        .as_deref()
        .and_then(|dir| read_record(dir, conf, node, owner));
    let file = read(conf, node, recorded.as_ref().map(|(r, _)| r.file), now);
    if recorded.is_none() {
        if let Read::Good(_, Ok(cfg)) = &file {
            recorded = read_record(&cfg.state_dir, conf, node, owner);
        }
    }
    let placer = role == Role::Placer;
    let keep_record = |settled: &Settled, cfg: &GpuMpsConfig, notes: &mut Vec<String>| {
        if placer {
            if let Err(e) = record(conf, records, settled, cfg, owner) {
                notes.push(format!(
                    "{name}: the last good configuration could not be recorded: {e}"
                ));
            }
        }
    };
    let (settled, cfg, recorded) = match (file, recorded) {
        (Read::Good(settled, cfg), None) => {
            // Nothing recorded to compare with: a file changed this last
            // moment may be one cut at a line's end while it is written,
            // which a placer would record as the node's configuration (and
            // a node program open a ledger by). A placer waits for the file
            // to be still, once; a file still being written then refuses
            // shares, as a cut one does. A reader that could never find a
            // record here (a user's `gpu-mps status`: the records are
            // root's) reads the file as it is.
            let could_record = placer || state_dir::check(records, owner, Access::Private).is_ok();
            if could_record && settled.stamp.modified_within(IN_PLACE_QUIET, now) {
                if placer && may_wait {
                    std::thread::sleep(IN_PLACE_QUIET);
                    let later = now + IN_PLACE_QUIET;
                    return decide(at, role, later, lock, notes, false);
                }
                let why = format!(
                    "{name} is being written (changed less than {} s ago)",
                    IN_PLACE_QUIET.as_secs()
                );
                return InForce::refusing(
                    format!(
                        "{why}; no earlier configuration is recorded on this node, so shares \
                         are refused until it has been still that long (other jobs run)"
                    ),
                    format!("{why}: shares are refused until it is still"),
                );
            }
            return match cfg {
                Ok(cfg) => {
                    keep_record(&settled, &cfg, notes);
                    InForce::run_with(*cfg)
                }
                Err(why) => InForce::no_gpus(why),
            };
        }
        (Read::Bad { why, .. }, None) => {
            return InForce::refusing(
                format!(
                    "{why}; no earlier configuration is recorded on this node, so shares are \
                     refused until the file is fixed (other jobs run)"
                ),
                format!("{why}: shares are refused until it is fixed"),
            );
        }
        (Read::Bad { why, transient }, Some((_, last))) => {
            let at = last.state_dir.join(RECORD_FILE);
            if transient {
                notes.push(format!(
                    "{why}; it is being written, so the node keeps the last good configuration \
                     it recorded ({})",
                    at.display()
                ));
                return InForce::run_with(last);
            }
            notes.push(format!(
                "{why}; new shares are refused until it is fixed (the shares running are served \
                 with the last good configuration, {})",
                at.display()
            ));
            return InForce {
                shares_refused: Some(format!(
                    "{why}; new shares are refused on this node until it is fixed"
                )),
                ..InForce::run_with(last)
            };
        }
        (Read::Good(settled, cfg), Some(recorded)) => (settled, cfg, recorded),
    };
    let (rec, last) = recorded;
    let cfg = match cfg {
        Ok(cfg) if settled.text == rec.text => {
            if placer && pointed.as_deref() != Some(last.state_dir.as_path()) {
                keep_record(&settled, &cfg, notes);
            }
            return InForce::run_with(*cfg);
        }
        other => other,
    };
    if settled.stamp.file() == rec.file && settled.stamp.modified_within(IN_PLACE_QUIET, now) {
        notes.push(format!(
            "{name} is being edited in place (changed less than {} s ago): the node keeps the \
             last good configuration it recorded ({}) until the file has been still that long",
            IN_PLACE_QUIET.as_secs(),
            last.state_dir.join(RECORD_FILE).display()
        ));
        return InForce::run_with(last);
    }
    let cfg = match cfg {
        Ok(cfg) => *cfg,
        Err(why) if ledger_empty(&last, owner) => return InForce::no_gpus(why),
        Err(why) => {
            return InForce {
                shares_refused: Some(format!(
                    "{why}; the jobs that hold shares or whole GPUs here are served with the \
                     configuration recorded beside this node's ledger ({}) until they end, new \
                     shares are refused",
                    last.state_dir.display()
                )),
                ..InForce::run_with(last)
            }
        }
    };
    let changes = identity_changes(&cfg, &last);
    if changes.is_empty() {
        keep_record(&settled, &cfg, notes);
        return InForce::run_with(cfg);
    }
    let refused = |why: String| InForce {
        shares_refused: Some(why),
        ..InForce::run_with(last.clone())
    };
    let running_under_old = format!(
        "{name} now says {}, but this node's share ledger ({}) was made with the configuration \
         recorded beside it",
        changes.join(", "),
        last.state_dir.display()
    );
    if !placer {
        return refused(format!(
            "{running_under_old}; the next job start takes the new one once no job holds a \
             share or whole GPU here"
        ));
    }
    let Some(lock) = lock else {
        return refused(format!(
            "{running_under_old}; new shares are refused meanwhile"
        ));
    };
    // Adopted only under the lock held exclusive: no prolog is placing in
    // the old ledger meanwhile, so it stays empty until the pointer moves.
    // Each try that fails holds nothing meanwhile (Linux drops a lock it
    // cannot convert), so no two prologs keep each other from adopting; the
    // caller takes it back shared.
    let exclusive = |limit| relock(lock.file(), Mode::Exclusive, at.wait.at_most(limit));
    if !matches!(exclusive(Duration::from_millis(10)), Ok(true)) {
        // Other prologs place under the configuration in force; one of them
        // may be taking the new one. Once they are done, look again.
        if may_wait && matches!(exclusive(ADOPT_WAIT), Ok(true)) {
            return decide(at, role, now, Some(lock), notes, false);
        }
        return refused(format!(
            "{running_under_old}; other jobs are starting, so new shares are refused until the \
             node takes the new configuration"
        ));
    }
    let adopted = if ledger_empty(&last, owner) {
        // Still under the lock held exclusive: what the old identity left
        // running is stopped before any share is placed under the new one.
        record(conf, records, &settled, &cfg, owner)
            .map(|()| Some(super::retire::retire(&last, &cfg, at.wait)))
    } else {
        Ok(None)
    };
    match adopted {
        Ok(Some(retired)) => {
            notes.push(format!(
                "{name} changed {} while no job held a share or whole GPU here: the node's \
                 ledger is now {}",
                changes.join(", "),
                cfg.state_dir.display()
            ));
            notes.extend(retired);
            InForce::run_with(cfg)
        }
        Ok(None) => refused(format!(
            "{running_under_old}, and jobs on this node hold shares or whole GPUs in it: new \
             shares are refused until they end (the node then takes the new configuration), \
             so that no GPU is counted in two ledgers. Sysadmin: undo the change, or drain the \
             node until its jobs end"
        )),
        Err(e) => refused(format!(
            "{running_under_old}; the new one could not be recorded ({e}), so new shares are \
             refused"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// A node in a temp dir: its gpu_mps.conf, state dirs and records dir.
    struct Site {
        _dir: tempfile::TempDir,
        root: PathBuf,
        conf: PathBuf,
        records: PathBuf,
        owner: u32,
    }

    impl Site {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
            let root = dir.path().to_path_buf();
            let owner = fs::metadata(&root).map(|m| m.uid()).unwrap_or(u32::MAX);
            let site = Self {
                conf: root.join("gpu_mps.conf"),
                records: root.join("records"),
                root,
                owner,
                _dir: dir,
            };
            site.replace(&site.text("a", 100));
            site
        }

        fn state(&self, name: &str) -> PathBuf {
            self.root.join(name)
        }

        fn text(&self, state: &str, units: u32) -> String {
            format!(
                "UnitsPerGPU={units}\nGPUDevices=/dev/nvidia[0-1]\nStateDir={}\nMPSControl=none\n",
                self.state(state).display()
            )
        }

        /// Written as config tools should: a new file renamed into place.
        fn replace(&self, text: &str) {
            let tmp = self.conf.with_extension("new");
            fs::write(&tmp, text).unwrap_or_else(|e| panic!("{e}"));
            fs::rename(&tmp, &self.conf).unwrap_or_else(|e| panic!("{e}"));
        }

        /// Written in place (`cat >`): same inode.
        fn in_place(&self, text: &str) {
            fs::write(&self.conf, text).unwrap_or_else(|e| panic!("{e}"));
        }

        fn modified(&self) -> SystemTime {
            fs::metadata(&self.conf)
                .and_then(|m| m.modified())
                .unwrap_or_else(|e| panic!("{e}"))
        }

        /// Where node gpu01 reads, as `owner`.
        fn reading(&self, owner: u32) -> Reading<'_> {
            Reading {
                conf: &self.conf,
                node: "gpu01",
                records: &self.records,
                owner,
                wait: LockWait::default(),
            }
        }

        /// Resolved `after` the file's last change.
        fn resolve(&self, role: Role, after: Duration) -> InForce {
            resolve_at(self.reading(self.owner), role, self.modified() + after)
        }

        fn ledger(&self, state: &str) -> Ledger {
            Ledger::open(&self.state(state), self.owner).unwrap_or_else(|e| panic!("{e}"))
        }
    }

    const NOW: Duration = Duration::ZERO;
    const LATER: Duration = Duration::from_secs(5);

    fn state_dir(f: &InForce) -> Option<PathBuf> {
        f.cfg.as_ref().map(|c| c.state_dir.clone())
    }

    #[test]
    fn the_first_good_read_is_recorded_and_pointed_at() {
        let site = Site::new();
        let f = site.resolve(Role::Placer, NOW);
        assert_eq!(state_dir(&f), Some(site.state("a")));
        assert_eq!(f.shares_refused, None);
        assert!(site.state("a").join(RECORD_FILE).exists());
        assert_eq!(
            read_pointer(&site.records, &site.conf, site.owner),
            Some(site.state("a"))
        );
        // A reader writes nothing.
        let other = Site::new();
        let _ = other.resolve(Role::Reader, NOW);
        assert!(!other.state("a").exists() && !other.records.exists());
    }

    #[test]
    fn a_half_written_file_falls_back_to_the_last_good_one() {
        let site = Site::new();
        let _ = site.resolve(Role::Placer, NOW);
        let full = site.text("a", 100);
        let cut_at = full.find("StateDir=").unwrap_or(0) + 12;
        for half in ["", &full[..cut_at], "UnitsPerGPU=100\n"] {
            site.in_place(half);
            for role in [Role::Reader, Role::Placer] {
                let f = site.resolve(role, NOW);
                assert_eq!(state_dir(&f), Some(site.state("a")), "{half:?}");
                assert_eq!(f.cfg.as_ref().map(|c| c.units_per_gpu), Some(100));
                assert_eq!(f.shares_refused, None, "{half:?}");
                assert!(
                    f.notes
                        .iter()
                        .any(|n| n.contains("last good configuration")),
                    "{half:?}: {:?}",
                    f.notes
                );
            }
        }
        // The default StateDir the cut file names was never made.
        assert!(!Path::new(config::DEFAULT_STATE_DIR)
            .join(RECORD_FILE)
            .exists());
        // Written whole again: in force at once, no note.
        site.in_place(&full);
        let f = site.resolve(Role::Placer, NOW);
        assert_eq!(state_dir(&f), Some(site.state("a")));
        assert!(f.notes.is_empty(), "{:?}", f.notes);
    }

    #[test]
    fn a_file_that_stays_bad_refuses_shares_only() {
        let site = Site::new();
        let _ = site.resolve(Role::Placer, NOW);
        // Invalid, and still for a while: the admin's to fix.
        site.in_place("UnitsPerGPU=0\n");
        let f = site.resolve(Role::Placer, LATER);
        assert_eq!(
            state_dir(&f),
            Some(site.state("a")),
            "running shares still served"
        );
        let why = f.shares_refused.unwrap_or_default();
        assert!(why.contains(":1: UnitsPerGPU must be"), "{why}");
        // Cut off and left so: the same.
        site.in_place("UnitsPerGPU=100\nStateDir=/ru");
        let f = site.resolve(Role::Reader, LATER);
        assert_eq!(state_dir(&f), Some(site.state("a")));
        assert!(f.shares_refused.is_some_and(|w| w.contains("no newline")));
        // With nothing recorded: no configuration at all, shares refused.
        let fresh = Site::new();
        fresh.in_place("");
        let f = fresh.resolve(Role::Placer, LATER);
        assert!(f.cfg.is_none());
        assert!(f
            .shares_refused
            .is_some_and(|w| w.contains("no Key=Value line")));
    }

    #[test]
    fn at_first_use_a_file_still_being_written_is_not_recorded() {
        // Cut at a line's end, it parses: nothing recorded tells it from a
        // whole file but its age. A placer waits for it to be still.
        let site = Site::new();
        site.in_place(&site.text("a", 100));
        let started = std::time::Instant::now();
        let f = site.resolve(Role::Placer, NOW);
        assert!(started.elapsed() >= IN_PLACE_QUIET);
        assert_eq!(f.cfg.map(|c| c.units_per_gpu), Some(100));
        // Written again during the wait: not recorded, shares refused.
        let fresh = Site::new();
        let before = fresh.modified();
        let text = fresh.text("a", 100);
        let f = std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(IN_PLACE_QUIET / 3);
                fresh.in_place(&text);
            });
            resolve_at(fresh.reading(fresh.owner), Role::Placer, before)
        });
        assert!(f.cfg.is_none());
        assert!(f
            .shares_refused
            .is_some_and(|w| w.contains("is being written")
                && w.contains("no earlier configuration is recorded")));
        assert!(!fresh.state("a").join(RECORD_FILE).exists());
        // A reader does not wait: nothing until the file is still.
        assert!(fresh.resolve(Role::Reader, NOW).cfg.is_none());
        // One that cannot read the node's records (another owner's) never
        // finds a record: it reads the file as it is.
        let stranger = resolve_at(
            fresh.reading(fresh.owner + 1),
            Role::Reader,
            fresh.modified(),
        );
        assert_eq!(state_dir(&stranger), Some(fresh.state("a")));
        let f = fresh.resolve(Role::Reader, LATER);
        assert_eq!(state_dir(&f), Some(fresh.state("a")));
    }

    #[test]
    fn an_edit_by_rename_is_taken_at_once_and_recorded() {
        let site = Site::new();
        let _ = site.resolve(Role::Placer, NOW);
        let text = format!("{}MemoryLimit=none\n", site.text("a", 100));
        site.replace(&text);
        let f = site.resolve(Role::Placer, NOW);
        assert_eq!(
            f.cfg.map(|c| c.memory_limit),
            Some(config::MemoryLimit::Unlimited)
        );
        // The new text is the last good one now.
        site.in_place("");
        let f = site.resolve(Role::Reader, NOW);
        assert_eq!(
            f.cfg.map(|c| c.memory_limit),
            Some(config::MemoryLimit::Unlimited)
        );
    }

    #[test]
    fn another_identity_waits_for_the_ledger_to_empty_and_never_opens_a_second_one() {
        let site = Site::new();
        let _ = site.resolve(Role::Placer, NOW);
        let a = site.ledger("a");
        a.place(7, 1000, "alice", 30, 2, 100)
            .unwrap_or_else(|e| panic!("{e}"));
        for text in [site.text("b", 100), site.text("a", 50)] {
            site.replace(&text);
            let f = site.resolve(Role::Placer, NOW);
            assert_eq!(state_dir(&f), Some(site.state("a")), "{text} {:?}", f.notes);
            assert_eq!(
                f.cfg.as_ref().map(|c| c.units_per_gpu),
                Some(100),
                "{:?}",
                f.notes
            );
            let why = f.shares_refused.clone().unwrap_or_default();
            assert!(
                why.contains("(the ledger's: ") && why.contains("refused until they end"),
                "{why} {:?}",
                f.notes
            );
            assert!(!site.state("b").exists(), "no second ledger");
        }
        // A reader (epilog, SPANK) serves the running share from the old one.
        let f = site.resolve(Role::Reader, NOW);
        assert_eq!(state_dir(&f), Some(site.state("a")));
        // The share ends: the next placer takes the new configuration, once
        // no other placer holds the lock (as `f` did until here).
        a.release(7).unwrap_or_else(|e| panic!("{e}"));
        // Another prolog placing meanwhile (holding the lock shared) for
        // 300 ms: this one waits for it, then takes the new configuration
        // (refusing the share would fail it for nothing).
        let holder = lock_path(&site.records, &site.conf, site.owner)
            .and_then(|p| {
                lock_wait::lock(&p, "test", Mode::Shared, LockWait::default())
                    .map_err(|e| e.to_string())
            })
            .unwrap_or_else(|e| panic!("{e}"));
        let started = std::time::Instant::now();
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(holder);
        });
        let f = site.resolve(Role::Placer, NOW);
        let _ = releaser.join();
        assert!(started.elapsed() >= Duration::from_millis(250));
        assert_eq!(f.cfg.as_ref().map(|c| c.units_per_gpu), Some(50));
        assert_eq!(f.shares_refused, None);
        assert!(f
            .notes
            .iter()
            .any(|n| n.contains("UnitsPerGPU=50 (the ledger's: 100)")));
        drop(f);
        site.replace(&site.text("b", 50));
        let f = site.resolve(Role::Placer, NOW);
        assert_eq!(
            state_dir(&f),
            Some(site.state("b")),
            "{:?} {:?}",
            f.shares_refused,
            f.notes
        );
        assert_eq!(
            read_pointer(&site.records, &site.conf, site.owner),
            Some(site.state("b"))
        );
        // A cut file naming the old dir again is not believed.
        site.in_place(&site.text("a", 50)[..10]);
        assert_eq!(
            state_dir(&site.resolve(Role::Reader, NOW)),
            Some(site.state("b"))
        );
    }

    #[test]
    fn a_new_state_dir_stops_the_idle_daemon_the_old_one_left() {
        use std::os::unix::fs::PermissionsExt;
        let site = Site::new();
        // A control program that answers every call (`quit` included).
        let control = site.root.join("control");
        fs::write(&control, "#!/bin/sh\nexit 0\n").unwrap_or_else(|e| panic!("{e}"));
        fs::set_permissions(&control, fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("{e}"));
        let text = |state: &str| {
            site.text(state, 100).replace(
                "MPSControl=none",
                &format!("MPSControl={}", control.display()),
            )
        };
        site.replace(&text("a"));
        let old = site
            .resolve(Role::Placer, LATER)
            .cfg
            .unwrap_or_else(|| panic!("no configuration"));
        // A daemon whose stop failed: left running, its ledger empty.
        let pipe = super::super::daemon::pipe_dir(&old, 1);
        fs::create_dir_all(&pipe).unwrap_or_else(|e| panic!("{e}"));
        fs::write(pipe.join("control"), "").unwrap_or_else(|e| panic!("{e}"));
        let mut left = std::process::Command::new("bash")
            .args([
                "-c",
                &format!(
                    "exec -a {} sleep 60",
                    super::super::programs::CONTROL_PROGRAM
                ),
            ])
            .env("CUDA_MPS_PIPE_DIRECTORY", &pipe)
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"));
        let seen = std::time::Instant::now() + Duration::from_secs(5);
        while super::super::daemon::processes(&pipe).is_empty() && std::time::Instant::now() < seen
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        site.replace(&text("b"));
        let f = site.resolve(Role::Placer, LATER);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut gone = left.try_wait().ok().flatten();
        while gone.is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            gone = left.try_wait().ok().flatten();
        }
        if gone.is_none() {
            let _ = left.kill();
            let _ = left.wait();
        }
        assert_eq!(state_dir(&f), Some(site.state("b")), "{:?}", f.notes);
        assert!(gone.is_some(), "two daemons for GPU 1: {:?}", f.notes);
        assert!(
            f.notes
                .iter()
                .any(|n| n.starts_with("GPU 1: the MPS daemon left under the earlier StateDir")),
            "{:?}",
            f.notes
        );
    }

    #[test]
    fn a_node_without_gpus_reading_a_file_that_lists_none_shares_nothing() {
        // A CPU node where /etc/slurm is shared: no GPUDevices=, and (as
        // here, on the build host) no /dev/nvidia<N>.
        if !crate::mps::gpu_devices::gpu_devices(&GpuMpsConfig::default()).is_empty() {
            return;
        }
        let site = Site::new();
        fs::write(&site.conf, "UnitsPerGPU=100\nMPSControl=none\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let f = site.resolve(Role::Placer, NOW);
        assert!(f.cfg.is_none(), "{:?}", f.notes);
        assert!(
            f.no_gpus
                .as_deref()
                .is_some_and(|w| w.contains("names no GPUDevices=") && w.contains("shares no GPU")),
            "{:?}",
            f.no_gpus
        );
        // Listed and missing is another matter: not a node without GPUs.
        let listed = GpuMpsConfig {
            gpu_devices: Some(vec![PathBuf::from("/dev/nvidia0")]),
            ..GpuMpsConfig::default()
        };
        assert_eq!(without_gpus(&listed, "gpu_mps.conf"), None);
    }

    #[test]
    fn an_in_place_edit_is_believed_once_still() {
        let site = Site::new();
        let _ = site.resolve(Role::Placer, NOW);
        // Cut at a line end: whole-looking, another identity.
        site.in_place("UnitsPerGPU=100\nGPUDevices=/dev/nvidia[0-1]\n");
        let f = site.resolve(Role::Placer, Duration::from_millis(100));
        assert_eq!(state_dir(&f), Some(site.state("a")));
        assert!(f.notes.iter().any(|n| n.contains("being edited in place")));
        drop(f);
        // Left so: believed, but refused while it differs from the ledger's
        // identity and the ledger holds a share.
        site.ledger("a")
            .place(8, 1000, "alice", 30, 2, 100)
            .unwrap_or_else(|e| panic!("{e}"));
        let f = site.resolve(Role::Placer, LATER);
        assert_eq!(state_dir(&f), Some(site.state("a")));
        assert!(f
            .shares_refused
            .is_some_and(|w| w.contains("StateDir=/run/gpu-mps")));
    }

    #[test]
    fn a_node_the_shared_file_gives_no_gpus_shares_nothing_once_its_jobs_end() {
        let site = Site::new();
        let head = format!("StateDir={}\nMPSControl=none\n", site.state("a").display());
        let gpu02 = "NodeName=gpu02 GPUDevices=/dev/nvidia0\n";
        let gpu01 = "NodeName=gpu01 GPUDevices=/dev/nvidia[0-1]\n";
        site.replace(&format!("{head}{gpu01}{gpu02}"));
        let f = site.resolve(Role::Placer, LATER);
        assert_eq!(state_dir(&f), Some(site.state("a")));
        // Another node's line changes: this node takes the new text quietly.
        site.replace(&format!(
            "{head}{gpu01}NodeName=gpu02 GPUDevices=/dev/nvidia[0-3]\n"
        ));
        let f = site.resolve(Role::Placer, NOW);
        assert_eq!(state_dir(&f), Some(site.state("a")));
        assert!(
            f.notes.is_empty() && f.shares_refused.is_none(),
            "{:?}",
            f.notes
        );
        drop(f);
        // A node no line gives GPUs: nothing to run with, nothing written.
        let cpu = Reading {
            node: "cpu01",
            ..site.reading(site.owner)
        };
        let f = resolve_at(cpu, Role::Placer, site.modified() + LATER);
        assert!(f.cfg.is_none());
        let why = f.no_gpus.clone().unwrap_or_default();
        assert!(why.contains("gives node cpu01 no GPUs"), "{why}");
        assert_eq!(f.shares_refused, f.no_gpus);
        drop(f);
        // This node taken off sharing while a share runs here: the share is
        // served with the recorded configuration, new ones are refused.
        let a = site.ledger("a");
        a.place(7, 1000, "alice", 30, 2, 100)
            .unwrap_or_else(|e| panic!("{e}"));
        site.replace(&format!("{head}{gpu02}"));
        for role in [Role::Placer, Role::Reader] {
            let f = site.resolve(role, LATER);
            assert_eq!(state_dir(&f), Some(site.state("a")));
            assert_eq!(f.no_gpus, None);
            let why = f.shares_refused.clone().unwrap_or_default();
            assert!(
                why.contains("gives node gpu01 no GPUs") && why.contains("until they end"),
                "{why}"
            );
        }
        // Once it ends, the node shares nothing.
        a.release(7).unwrap_or_else(|e| panic!("{e}"));
        let f = site.resolve(Role::Placer, LATER);
        assert!(f.cfg.is_none() && f.no_gpus.is_some(), "{:?}", f.notes);
    }

    #[test]
    fn the_pointer_name_keeps_paths_apart() {
        assert_eq!(
            pointer_name(Path::new("/etc/slurm/gpu_mps.conf")),
            "ledger-of-etc-slurm-gpu_mps.conf"
        );
        assert_ne!(
            pointer_name(Path::new("/a-b/c")),
            pointer_name(Path::new("/a/b-c"))
        );
    }
}
