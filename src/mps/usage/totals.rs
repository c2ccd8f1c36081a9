//! What each job used of each GPU over its whole stay on the node, from
//! the node timer's samples, and what becomes of it once the job ends:
//! its peak memory and mean SM use in the job's `AdminComment`, or its
//! `SystemComment` where the `AdminComment` is a site tool's (`gpu-qos
//! advise` reads both), and in histograms by QOS and share size.
//!
//! Pure: the samples, the ledger and what `sacct` shows come in as data;
//! the node timer (`gpu-mps metrics --write`, root) runs the commands.
//! Nothing here runs in a prolog or epilog: Slurm asks them not to call
//! its commands, and a slow slurmdbd must never hold a job's end.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ShareUse;
use crate::mps::ledger::LedgerState;
use crate::shared::admin_comment::{kept_whole, site_tools};

const MIB: u64 = 1 << 20;

/// One job's use of one GPU, summed over the node timer's samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub job: u32,
    pub gpu: u32,
    /// The share's units (`None`: the job held the GPU whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub units: Option<u32>,
    pub units_per_gpu: u32,
    /// What it may use, MiB: the share's memory limit (its part of the
    /// GPU's memory where it has none), or the GPU's memory for a job
    /// holding it whole (`None`: not known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_mib: Option<u64>,
    /// The most memory one sample saw, bytes (`None`: no sample gave it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_bytes: Option<u64>,
    /// The sum of the SM figures sampled ([`ShareUse::sm_utilization`]),
    /// and how many there were.
    pub sm_sum: f64,
    pub sm_samples: u32,
    /// The node timer's runs that sampled it.
    pub samples: u32,
}

impl Totals {
    /// The mean SM use: over the share's part of the GPU, or of the whole
    /// GPU for a job holding it.
    pub fn sm_mean(&self) -> Option<f64> {
        (self.sm_samples > 0).then(|| self.sm_sum / f64::from(self.sm_samples))
    }

    /// Peak memory over what it may use.
    pub fn memory_peak_ratio(&self) -> Option<f64> {
        let limit = self.limit_mib.filter(|&l| l > 0)?;
        Some(self.peak_bytes? as f64 / (limit * MIB) as f64)
    }

    /// The size label of its histograms: its units, or `whole`.
    pub fn size_label(&self) -> String {
        self.units
            .map_or_else(|| "whole".to_owned(), |u| u.to_string())
    }
}

/// Adds one run's figures (`usage`, of the GPUs that answered) to
/// `totals`; `gpu_memory`: each GPU's memory in bytes where NVML gave it.
pub fn fold(
    totals: &mut Vec<Totals>,
    usage: &[ShareUse],
    state: &LedgerState,
    units_per_gpu: u32,
    gpu_memory: &BTreeMap<u32, u64>,
) {
    for u in usage {
        let share = state.share(u.job).filter(|s| s.gpu == u.gpu && !u.whole);
        let at = match totals.iter().position(|t| (t.job, t.gpu) == (u.job, u.gpu)) {
            Some(i) => i,
            None => {
                totals.push(Totals {
                    job: u.job,
                    gpu: u.gpu,
                    units: share.map(|s| s.units),
                    units_per_gpu,
                    limit_mib: None,
                    peak_bytes: None,
                    sm_sum: 0.0,
                    sm_samples: 0,
                    samples: 0,
                });
                totals.len() - 1
            }
        };
        let t = &mut totals[at];
        // The limit is set after placement, the GPU's memory known once
        // NVML answers: the latest known figure. A share without a memory
        // limit of its own has its part of the GPU's memory.
        let gpu_mib = gpu_memory.get(&u.gpu).map(|b| b / MIB);
        let limit = match share {
            Some(s) => s.memory_mib.or_else(|| {
                gpu_mib.map(|m| m * u64::from(s.units) / u64::from(units_per_gpu.max(1)))
            }),
            None => gpu_mib,
        };
        t.limit_mib = limit.or(t.limit_mib);
        t.peak_bytes = t.peak_bytes.max(u.memory_bytes);
        if let Some(sm) = u.sm_utilization.filter(|v| v.is_finite()) {
            t.sm_sum += sm;
            t.sm_samples += 1;
        }
        t.samples += 1;
    }
}

/// Takes out of `totals` those whose job no longer holds their GPU in
/// `state` (it ended, or left the node): what is left of them to record.
pub fn take_ended(totals: &mut Vec<Totals>, state: &LedgerState) -> Vec<Totals> {
    let holds = |t: &Totals| {
        state.share(t.job).is_some_and(|s| s.gpu == t.gpu)
            || state
                .whole_holder(t.job)
                .is_some_and(|w| w.gpus.contains(&t.gpu))
    };
    let (kept, ended) = totals.drain(..).partition(holds);
    *totals = kept;
    ended
}

/// The start of each of gpushare's figures in a job's `AdminComment`.
pub use crate::shared::usage_words::MARK as WORDS_MARK;
use crate::shared::usage_words::{self, GpuUsage, Held, SEPARATOR};

/// The figures of one GPU of a job, as `gpu-qos advise` reads them
/// ([`usage_words`]): its peak memory in MiB (rounded up), its limit, its
/// mean SM use and how many runs of the timer sampled it, with this
/// node's name.
pub fn words(node: &str, t: &Totals) -> String {
    usage_words::render(&GpuUsage {
        node: Some(node.to_owned()),
        gpu: t.gpu,
        held: match t.units {
            Some(units) => Held::Share {
                units,
                per_gpu: t.units_per_gpu,
            },
            None => Held::Whole,
        },
        mem_peak_mib: t.peak_bytes.map(|b| b.div_ceil(MIB)),
        mem_limit_mib: t.limit_mib,
        sm_mean: t.sm_mean(),
        samples: u64::from(t.samples),
    })
}

/// Whether `part` is one of gpushare's figures written by node `node`.
fn of_node(part: &str, node: &str) -> bool {
    part.strip_prefix(WORDS_MARK)
        .and_then(|rest| rest.strip_prefix("node="))
        .and_then(|rest| rest.split(' ').next())
        .is_some_and(|n| n.eq_ignore_ascii_case(node))
}

/// `comment` with node `node`'s figures replaced by `figures`: every other
/// word of the site's, and of other nodes, kept as it was.
pub fn comment_with(comment: &str, node: &str, figures: &[String]) -> String {
    let kept = comment
        .split(SEPARATOR)
        .filter(|p| !p.is_empty() && !of_node(p, node));
    let all: Vec<&str> = kept.chain(figures.iter().map(String::as_str)).collect();
    all.join(SEPARATOR)
}

/// Whether `comment` holds each of `figures` (as 22.05's `sacctmgr`,
/// which writes a comment in lower case, may have left them).
pub fn comment_has(comment: &str, figures: &[String]) -> bool {
    figures
        .iter()
        .all(|f| comment.split(SEPARATOR).any(|p| p.eq_ignore_ascii_case(f)))
}

/// Whether `sacctmgr` would write `comment` as it is: it turns quotes into
/// backquotes, and before 23.02 it writes a comment in lower case.
pub fn sacctmgr_keeps(comment: &str, lowers: bool) -> bool {
    !comment.contains(['"', '\''])
        && !comment.contains(['\n', '\r'])
        && (!lowers || !comment.chars().any(|c| c.is_ascii_uppercase()))
}

/// The fields the node timer asks `sacct -X -n -P --delimiter=DELIMITER
/// -o FIELDS -j JOB` for.
pub const SACCT_FIELDS: &str = "JobIDRaw,JobID,State,QOS,AdminComment,SystemComment";

/// The field separator of that read: the two comments are free text an
/// operator or a site tool wrote, where a `|` is ordinary; this control
/// character is not (a comment holding it is a site tool's, and a record
/// it splits into too many fields is read as no record).
pub const SACCT_DELIMITER: &str = "\u{1f}";

const SACCT_FIELD_COUNT: usize = 6;

/// Which comment of a job's record holds gpushare's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// `AdminComment`: where they go unless a site tool's text is there.
    AdminComment,
    /// `SystemComment`: where they go when `AdminComment` is a site tool's
    /// (`sacctmgr modify job` writes it for operators only on every
    /// release from 22.05; slurmctld writes it only for a burst buffer's
    /// failures).
    SystemComment,
}

impl Field {
    /// Its name as `sacctmgr` and `sacct` spell it.
    pub fn name(self) -> &'static str {
        match self {
            Field::AdminComment => "AdminComment",
            Field::SystemComment => "SystemComment",
        }
    }
}

/// What `sacct` showed of a job ([`SACCT_FIELDS`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accounted {
    /// Its `JobID`: `123`, or `120_3` for an array's task, the name that
    /// selects it alone (its raw id names every task of an array whose
    /// id it is).
    pub name: String,
    pub state: String,
    pub qos: String,
    /// Each comment as written, line breaks kept.
    pub admin_comment: String,
    pub system_comment: String,
}

/// The raw id of a line that starts a record of that output.
fn record_start(line: &str) -> Option<u32> {
    let (raw, _) = line.split_once(SACCT_DELIMITER)?;
    raw.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| raw.parse().ok())
        .flatten()
}

/// Reads that output for the job whose raw id is `job` (`sacct -j`
/// also lists an array's tasks by the array's id): `None` where it is
/// not (yet) recorded, or its record does not read as one. A comment's
/// line break continues the record on the next line.
pub fn accounted(text: &str, job: u32) -> Option<Accounted> {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines.iter().position(|l| record_start(l) == Some(job))?;
    let end = lines[at + 1..]
        .iter()
        .position(|l| record_start(l).is_some())
        .map_or(lines.len(), |n| at + 1 + n);
    let record = lines[at..end].join("\n");
    let f: Vec<&str> = record.split(SACCT_DELIMITER).collect();
    if f.len() != SACCT_FIELD_COUNT {
        return None;
    }
    Some(Accounted {
        name: f[1].to_owned(),
        state: f[2].split_whitespace().next()?.to_owned(),
        qos: f[3].trim().to_owned(),
        admin_comment: f[4].to_owned(),
        system_comment: f[5].to_owned(),
    })
}

/// Whether `sacctmgr modify job where jobid=NAME` selects that one job: a
/// plain id, or an array's task (`120_3`); not a heterogeneous job's
/// component (`120+1`).
fn names_one_job(name: &str) -> bool {
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    match name.split_once('_') {
        Some((array, task)) => digits(array) && digits(task),
        None => digits(name),
    }
}

/// Whether a job's state in the accounting is one it ended in (its record
/// complete: what the node writes then is not overwritten by the job's
/// end).
pub fn ended_state(state: &str) -> bool {
    matches!(
        state,
        "COMPLETED"
            | "FAILED"
            | "CANCELLED"
            | "TIMEOUT"
            | "OUT_OF_MEMORY"
            | "NODE_FAIL"
            | "PREEMPTED"
            | "BOOT_FAIL"
            | "DEADLINE"
    )
}

/// Upper bounds of the histogram of peak memory over the memory a job may
/// use.
pub const MEMORY_BOUNDS: [f64; 6] = [0.1, 0.25, 0.5, 0.75, 0.9, 1.0];
/// Upper bounds of the histogram of mean SM use (over a share's part:
/// above 1 where it used SMs others left idle).
pub const SM_BOUNDS: [f64; 6] = [0.1, 0.25, 0.5, 0.75, 1.0, 1.5];

/// A Prometheus histogram: a count per upper bound (not cumulative here),
/// the overflow, the sum.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Histogram {
    pub counts: Vec<u64>,
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], v: f64) {
        self.counts.resize(bounds.len() + 1, 0);
        let slot = bounds.iter().position(|&b| v <= b).unwrap_or(bounds.len());
        self.counts[slot] += 1;
        self.sum += v;
        self.count += 1;
    }

    /// Cumulative counts for each bound of `bounds`, then `+Inf`.
    pub fn cumulative(&self, bounds: &[f64]) -> Vec<u64> {
        let mut total = 0;
        (0..=bounds.len())
            .map(|i| {
                total += self.counts.get(i).copied().unwrap_or(0);
                total
            })
            .collect()
    }
}

/// At most this many QOS labels; the others count as `other`.
pub const MAX_QOS_LABELS: usize = 32;

/// One QOS and size's histograms.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FitRow {
    pub qos: String,
    /// The share's units, or `whole`.
    pub size: String,
    pub memory: Histogram,
    pub sm: Histogram,
}

/// The ended jobs' figures, by QOS and size.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Fit {
    pub rows: Vec<FitRow>,
}

impl Fit {
    /// Counts an ended job's GPU, under `qos` (`""`: not known).
    pub fn observe(&mut self, t: &Totals, qos: &str) {
        let known = self.rows.iter().any(|r| r.qos == qos);
        let distinct: std::collections::BTreeSet<&str> =
            self.rows.iter().map(|r| r.qos.as_str()).collect();
        let qos = match qos {
            "" => "unknown",
            q if known || distinct.len() < MAX_QOS_LABELS => q,
            _ => "other",
        };
        let size = t.size_label();
        let at = match self
            .rows
            .iter()
            .position(|r| r.qos == qos && r.size == size)
        {
            Some(i) => i,
            None => {
                self.rows.push(FitRow {
                    qos: qos.to_owned(),
                    size,
                    ..FitRow::default()
                });
                self.rows
                    .sort_by(|a, b| (&a.qos, &a.size).cmp(&(&b.qos, &b.size)));
                self.rows
                    .iter()
                    .position(|r| r.qos == qos && r.size == t.size_label())
                    .unwrap_or(0)
            }
        };
        let Some(row) = self.rows.get_mut(at) else {
            return;
        };
        if let Some(r) = t.memory_peak_ratio() {
            row.memory.observe(&MEMORY_BOUNDS, r);
        }
        if let Some(m) = t.sm_mean() {
            row.sm.observe(&SM_BOUNDS, m);
        }
    }
}

/// An ended job whose figures are still to be recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ended {
    pub job: u32,
    /// Each GPU it used here.
    pub totals: Vec<Totals>,
    /// When the node timer saw it end, Unix seconds.
    pub since: u64,
    /// Since when every call made for it failed (Unix seconds; `None`:
    /// none failed since the last that went through). A call not made
    /// (the run's time for the accounting spent) is no failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_since: Option<u64>,
    /// Writes that went through whose figures the accounting did not show
    /// next.
    #[serde(default)]
    pub writes: u32,
}

/// Groups what [`take_ended`] took by job, seen ending at `now`.
pub fn ended_jobs(totals: Vec<Totals>, now: u64) -> Vec<Ended> {
    let mut by_job: BTreeMap<u32, Vec<Totals>> = BTreeMap::new();
    for t in totals {
        by_job.entry(t.job).or_default().push(t);
    }
    by_job
        .into_iter()
        .map(|(job, totals)| Ended {
            job,
            totals,
            since: now,
            failing_since: None,
            writes: 0,
        })
        .collect()
}

/// How long an ended job's figures wait for its complete record in the
/// accounting (the job requeued and running again, its end not yet
/// recorded).
pub const RECORD_FOR_SECS: u64 = 3600;
/// How long the accounting may fail every call made for a job before its
/// figures are given up: longer than slurmdbd's upgrade or restart.
pub const FAILING_FOR_SECS: u64 = 3600;
/// Writes that went through but did not stay before the figures are
/// given up (each moves them where the comment read next lets them go).
pub const MAX_WRITES: u32 = 3;

/// Why the accounting gave no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unanswered {
    /// The call was not made (the run's time for the accounting spent):
    /// no try.
    NotAsked(String),
    /// It was made and failed (slurmdbd down, a timeout, an error).
    Failed(String),
}

impl Unanswered {
    pub fn why(&self) -> &str {
        match self {
            Unanswered::NotAsked(w) | Unanswered::Failed(w) => w,
        }
    }
}

/// What to do next for an ended job's figures.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Nothing yet (its record not complete, or not asked): ask again
    /// next run.
    Wait,
    /// Write this comment of the job so named (then read it back next
    /// run).
    Write {
        name: String,
        field: Field,
        comment: String,
    },
    /// Recorded: count it (where not yet) under this QOS and forget it.
    Done { qos: String },
    /// Given up, for this reason: count it (QOS not known) and forget it.
    GiveUp(String),
}

/// Where this node's `figures` go in `a`'s record, and the comment
/// written there: its `AdminComment` unless that is a site tool's
/// ([`site_tools`]: anything gpushare did not write) or `sacctmgr` would
/// alter it, else its
/// `SystemComment` on the same terms; each comment's other words kept.
fn placed(
    a: &Accounted,
    node: &str,
    figures: &[String],
    lowers: bool,
) -> Result<(Field, String), String> {
    let mut whys = Vec::new();
    for (field, old) in [
        (Field::AdminComment, &a.admin_comment),
        (Field::SystemComment, &a.system_comment),
    ] {
        let comment = comment_with(old, node, figures);
        let whole = match field {
            Field::AdminComment => site_tools(old),
            Field::SystemComment => kept_whole(old),
        };
        match whole {
            Some(why) => whys.push(format!("its {} is left whole: {why}", field.name())),
            None if !sacctmgr_keeps(&comment, lowers) => whys.push(format!(
                "sacctmgr would change its {} (capitals before Slurm 23.02)",
                field.name()
            )),
            None => return Ok((field, comment)),
        }
    }
    Err(whys.join("; "))
}

/// The step for `e` given what `sacct` showed (`Err`: no answer), this
/// node's name, and whether `sacctmgr` writes comments in lower case.
pub fn next(
    e: &Ended,
    shown: Result<Option<Accounted>, Unanswered>,
    node: &str,
    lowers: bool,
    now: u64,
) -> Next {
    let figures: Vec<String> = e.totals.iter().map(|t| words(node, t)).collect();
    let old = now.saturating_sub(e.since) > RECORD_FOR_SECS;
    let failing_long = e
        .failing_since
        .is_some_and(|s| now.saturating_sub(s) >= FAILING_FOR_SECS);
    match shown {
        // sacct's own words where slurm.conf names no AccountingStorageType.
        Err(Unanswered::Failed(why)) if why.contains("accounting storage is disabled") => {
            Next::GiveUp(format!(
                "{why} (UsageRecord=none in gpu_mps.conf: only count them)"
            ))
        }
        Err(Unanswered::Failed(why)) if failing_long => Next::GiveUp(format!(
            "the accounting failed every call for {} minutes: {why}",
            FAILING_FOR_SECS / 60
        )),
        Err(_) => Next::Wait,
        Ok(None) if old => Next::GiveUp("no record of it in the accounting".into()),
        Ok(Some(a)) if !ended_state(&a.state) && old => {
            Next::GiveUp(format!("it is {} in the accounting", a.state))
        }
        Ok(None) => Next::Wait,
        Ok(Some(a)) if !ended_state(&a.state) => Next::Wait,
        Ok(Some(a))
            if comment_has(&a.admin_comment, &figures)
                || comment_has(&a.system_comment, &figures) =>
        {
            Next::Done { qos: a.qos }
        }
        Ok(Some(_)) if e.writes >= MAX_WRITES => Next::GiveUp(format!(
            "its comments did not keep the figures written {MAX_WRITES} times"
        )),
        Ok(Some(_)) if failing_long => Next::GiveUp(format!(
            "sacctmgr failed every write for {} minutes",
            FAILING_FOR_SECS / 60
        )),
        Ok(Some(a)) if !names_one_job(&a.name) => Next::GiveUp(format!(
            "sacctmgr cannot name it alone ({}: a heterogeneous job's component)",
            a.name
        )),
        Ok(Some(a)) => match placed(&a, node, &figures, lowers) {
            Ok((field, comment)) => Next::Write {
                name: a.name,
                field,
                comment,
            },
            Err(why) => Next::GiveUp(why),
        },
    }
}

#[cfg(test)]
mod tests;
