//! What each share really uses of its GPU: device memory and SM time, per
//! job, from NVML's per-process figures.
//!
//! The node timer (`gpu-mps metrics --write`, root, every minute, never
//! the prolog or epilog) asks NVML in a child process of its own for each
//! GPU's compute and MPS-client processes (their memory) and per-process
//! utilisation samples; the child prints them in the text of
//! [`gpu_block`], one complete block per GPU, so that a GPU whose NVML
//! hangs costs only its own block ([`parse`] keeps the complete ones).
//! Each process is then mapped to a share through its cgroup alone
//! ([`cgroup`]: anchored where Slurm makes job cgroups, never a `job_<id>`
//! found anywhere in the path, never its environment), and [`attribute`]
//! sums the figures per share: memory in bytes, SM use over the share's
//! part of the GPU (`units / UnitsPerGPU`).
//!
//! Everything here is pure: the child's text, each process's uid and
//! `/proc/PID/cgroup` text and the ledger's shares come in as data.
//! Figures that cannot be had are absent, never guessed: a GPU that did
//! not answer, memory NVML does not report for one of a share's
//! processes, utilisation NVML does not sample on a GPU.

pub mod cgroup;
pub mod totals;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::ledger::LedgerState;
pub use cgroup::{Anchors, InCgroup, JobDir};

/// Which of NVML's lists named a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProcessList {
    /// `nvmlDeviceGetComputeRunningProcesses`.
    Compute,
    /// `nvmlDeviceGetMPSComputeRunningProcesses` (R470 and later).
    Mps,
}

impl ProcessList {
    fn word(self) -> &'static str {
        match self {
            Self::Compute => "compute",
            Self::Mps => "mps",
        }
    }
}

/// A process NVML lists on a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessSample {
    pub pid: u32,
    /// Device memory it uses, bytes (`None`: NVML says not available).
    pub memory_bytes: Option<u64>,
    pub list: ProcessList,
}

/// One per-process utilisation sample (`nvmlDeviceGetProcessUtilization`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtilSample {
    pub pid: u32,
    /// SM use, percent of the GPU.
    pub sm_percent: u32,
    /// The driver's CPU timestamp, µs.
    pub timestamp_us: u64,
}

/// What NVML said of one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GpuSample {
    /// NVML's index.
    pub index: u32,
    /// Its device minor (`/dev/nvidiaN`), how gpushare names it.
    pub minor: Option<u32>,
    /// Device memory in use on the GPU, bytes (every process and the
    /// driver's own).
    pub used_bytes: Option<u64>,
    /// The GPU's device memory, bytes (what a job holding it whole may use).
    pub total_bytes: Option<u64>,
    pub processes: Vec<ProcessSample>,
    /// `None`: NVML gives no per-process utilisation here (MIG, a GPU
    /// older than Maxwell, or the call failed); `Some` of no sample: no
    /// process used its SMs since the last look.
    pub utilization: Option<Vec<UtilSample>>,
}

/// A GPU's answer: its figures, or why NVML could not give them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuAnswer {
    Answered(GpuSample),
    Failed {
        index: u32,
        minor: Option<u32>,
        reason: String,
    },
}

impl GpuAnswer {
    pub fn index(&self) -> u32 {
        match self {
            Self::Answered(g) => g.index,
            Self::Failed { index, .. } => *index,
        }
    }

    pub fn minor(&self) -> Option<u32> {
        match self {
            Self::Answered(g) => g.minor,
            Self::Failed { minor, .. } => *minor,
        }
    }
}

fn word<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// Text without line breaks, for a reason at the end of a line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The block the NVML child prints for one GPU, whole, ending in `end I`:
///
/// ```text
/// gpu I MINOR ok USED TOTAL    (or: gpu I MINOR err REASON, then end I)
/// proc I PID MEMORY compute|mps
/// util I PID SM TIMESTAMP      (or: util I none REASON)
/// end I
/// ```
///
/// `-` where NVML gave no figure. A GPU's lines are printed together, so
/// a block without its `end` line is one that NVML did not finish.
pub fn gpu_block(answer: &GpuAnswer) -> String {
    let mut out = String::new();
    match answer {
        GpuAnswer::Failed {
            index,
            minor,
            reason,
        } => {
            let _ = writeln!(out, "gpu {index} {} err {}", word(*minor), one_line(reason));
        }
        GpuAnswer::Answered(g) => {
            let i = g.index;
            let (minor, used, total) = (word(g.minor), word(g.used_bytes), word(g.total_bytes));
            let _ = writeln!(out, "gpu {i} {minor} ok {used} {total}");
            for p in &g.processes {
                let memory = word(p.memory_bytes);
                let _ = writeln!(out, "proc {i} {} {memory} {}", p.pid, p.list.word());
            }
            match &g.utilization {
                None => {
                    let _ = writeln!(out, "util {i} none");
                }
                Some(samples) => {
                    for s in samples {
                        let (pid, sm, at) = (s.pid, s.sm_percent, s.timestamp_us);
                        let _ = writeln!(out, "util {i} {pid} {sm} {at}");
                    }
                }
            }
        }
    }
    let _ = writeln!(out, "end {}", answer.index());
    out
}

/// What the child printed: each GPU it finished, and what could not be
/// read (a malformed block, named, never half used).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    pub gpus: Vec<GpuAnswer>,
    pub problems: Vec<String>,
}

impl Report {
    /// The largest utilisation timestamp of each GPU (NVML's index) that
    /// gave one: where the next look starts.
    pub fn last_samples(&self) -> BTreeMap<u32, u64> {
        let mut out = BTreeMap::new();
        for g in &self.gpus {
            if let GpuAnswer::Answered(g) = g {
                if let Some(last) = g.utilization.iter().flatten().map(|s| s.timestamp_us).max() {
                    out.insert(g.index, last);
                }
            }
        }
        out
    }
}

/// A block being read: its header and the lines so far.
struct Open {
    answer: GpuAnswer,
    broken: Option<String>,
}

/// Reads the child's text (see [`gpu_block`]). Blocks may interleave by
/// line only as whole blocks; one with no `end` line (the child killed at
/// its deadline while NVML still worked on that GPU) is left out, and so
/// is one with a line that does not read, which [`Report::problems`]
/// names.
pub fn parse(text: &str) -> Report {
    let mut report = Report::default();
    let mut open: BTreeMap<u32, Open> = BTreeMap::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split(' ').collect();
        let Some(index) = w.get(1).and_then(|i| i.parse::<u32>().ok()) else {
            if !line.trim().is_empty() {
                report.problems.push(format!("unreadable line {line:?}"));
            }
            continue;
        };
        match w[0] {
            "gpu" => {
                let minor = w.get(2).and_then(|m| maybe::<u32>(m));
                let answer = match (minor, w.get(3).copied()) {
                    // The total is a later word: a child without it still reads.
                    (Some(minor), Some("ok")) if matches!(w.len(), 5 | 6) => {
                        let total = w.get(5).map_or(Some(None), |t| maybe::<u64>(t));
                        maybe::<u64>(w[4])
                            .zip(total)
                            .map(|(used_bytes, total_bytes)| {
                                GpuAnswer::Answered(GpuSample {
                                    index,
                                    minor,
                                    used_bytes,
                                    total_bytes,
                                    utilization: Some(Vec::new()),
                                    ..GpuSample::default()
                                })
                            })
                    }
                    (Some(minor), Some("err")) => Some(GpuAnswer::Failed {
                        index,
                        minor,
                        reason: w[4..].join(" "),
                    }),
                    _ => None,
                };
                match answer {
                    Some(answer) => {
                        open.insert(
                            index,
                            Open {
                                answer,
                                broken: None,
                            },
                        );
                    }
                    None => report
                        .problems
                        .push(format!("GPU {index}: bad line {line:?}")),
                }
            }
            "end" => match open.remove(&index) {
                Some(Open { broken: None, .. }) if w.len() != 2 => report
                    .problems
                    .push(format!("GPU {index}: bad line {line:?}")),
                Some(Open {
                    answer,
                    broken: None,
                }) => report.gpus.push(answer),
                Some(Open {
                    broken: Some(why), ..
                }) => report.problems.push(format!("GPU {index}: {why}")),
                None => report
                    .problems
                    .push(format!("GPU {index}: an end without its gpu line")),
            },
            kind @ ("proc" | "util") => {
                let Some(block) = open.get_mut(&index) else {
                    report
                        .problems
                        .push(format!("GPU {index}: {line:?} outside its block"));
                    continue;
                };
                if block.broken.is_none() {
                    if let Err(why) = add_line(&mut block.answer, kind, &w[2..]) {
                        block.broken = Some(format!("{why}: {line:?}"));
                    }
                }
            }
            _ => report.problems.push(format!("unreadable line {line:?}")),
        }
    }
    report
}

/// `-` or a number.
fn maybe<T: std::str::FromStr>(w: &str) -> Option<Option<T>> {
    if w == "-" {
        Some(None)
    } else {
        w.parse().ok().map(Some)
    }
}

/// One `proc` or `util` line (its words after the index) added to a block.
fn add_line(answer: &mut GpuAnswer, kind: &str, w: &[&str]) -> Result<(), &'static str> {
    let GpuAnswer::Answered(g) = answer else {
        return Err("a figure in the block of a GPU that failed");
    };
    let number = |i: usize| w.get(i).and_then(|v| v.parse::<u64>().ok());
    match (kind, w) {
        ("proc", [pid, memory, list]) => {
            let list = match *list {
                "compute" => ProcessList::Compute,
                "mps" => ProcessList::Mps,
                _ => return Err("an unknown process list"),
            };
            g.processes.push(ProcessSample {
                pid: pid.parse().map_err(|_| "a bad pid")?,
                memory_bytes: maybe(memory).ok_or("a bad memory figure")?,
                list,
            });
        }
        ("util", ["none", ..]) => g.utilization = None,
        ("util", [pid, _, _]) => {
            let sm = number(1).and_then(|v| u32::try_from(v).ok());
            let (Ok(pid), Some(sm_percent), Some(timestamp_us)) = (pid.parse(), sm, number(2))
            else {
                return Err("a bad utilisation sample");
            };
            if let Some(samples) = &mut g.utilization {
                samples.push(UtilSample {
                    pid,
                    sm_percent,
                    timestamp_us,
                });
            }
        }
        _ => return Err("a line of the wrong length"),
    }
    Ok(())
}

/// What gpushare knows of a process NVML named, read from `/proc` as root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessFacts {
    /// Its real uid (`/proc/PID/status`).
    pub uid: u32,
    /// The text of `/proc/PID/cgroup`.
    pub cgroup: String,
}

/// One share's use of its GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShareUse {
    pub job: u32,
    pub gpu: u32,
    /// Device memory of its processes, bytes (`None`: NVML did not give
    /// it for one of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// SM use of a job holding its GPU whole, over the GPU (`None`: a
    /// share, whose use NVML charges to the MPS server; or NVML samples
    /// no per-process utilisation on the GPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_utilization: Option<f64>,
    /// The job holds the GPU whole (no share): its SM use is over the
    /// whole GPU, and the metrics' share series leave it out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub whole: bool,
}

/// [`attribute`]'s result.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Attribution {
    /// One per share on a GPU that answered, by job.
    pub shares: Vec<ShareUse>,
    /// By GPU (gpushare's index), the processes of no share there: the
    /// MPS server, a job holding the GPU whole, a process gone or of
    /// another user, one whose cgroup names no share's job.
    pub unattributed: BTreeMap<u32, Vec<u32>>,
}

/// A job that may use a GPU: a share there, or a job holding it whole.
struct Holder<'a> {
    job: u32,
    /// The share's user (a job held whole: any, as its cgroup says).
    uid: Option<u32>,
    sluid: Option<&'a str>,
    /// Its part of the GPU: the share's units over UnitsPerGPU, or 1.
    part: f64,
    whole: bool,
}

/// Who holds `gpu` in `state`: its shares and the jobs holding it whole.
fn holders_of(state: &LedgerState, gpu: u32, units_per_gpu: u32) -> Vec<Holder<'_>> {
    let shares = state.shares().filter(|s| s.gpu == gpu).map(|s| Holder {
        job: s.job,
        uid: Some(s.uid),
        sluid: s.sluid.as_deref(),
        part: f64::from(s.units) / f64::from(units_per_gpu.max(1)),
        whole: false,
    });
    let whole = state
        .whole_holders()
        .filter(|w| w.gpus.contains(&gpu))
        .map(|w| Holder {
            job: w.job,
            uid: None,
            sluid: None,
            part: 1.0,
            whole: true,
        });
    shares.chain(whole).collect()
}

/// The holder of `gpu` that `pid` (of `facts`) belongs to, if any: its
/// cgroup names the holder's job where Slurm makes job cgroups
/// ([`cgroup::placement`]), and it runs as the cgroup's user and the
/// share's.
fn holder_of<'a, 'h>(
    facts: Option<&ProcessFacts>,
    anchors: &Anchors,
    holders: &'h [Holder<'a>],
) -> Option<&'h Holder<'a>> {
    let facts = facts?;
    let InCgroup::Job { uid, dir } = cgroup::placement(&facts.cgroup, anchors) else {
        return None;
    };
    if uid.is_some_and(|u| u != facts.uid) {
        return None;
    }
    holders.iter().find(|h| {
        h.uid.is_none_or(|u| u == facts.uid)
            && match &dir {
                JobDir::Id(job) => h.job == *job,
                JobDir::Named(name) => {
                    h.sluid == Some(name.as_str()) || anchors.named_jobs.get(name) == Some(&h.job)
                }
            }
    })
}

/// Each share's use on the GPUs that answered, and each job's holding a
/// GPU whole ([`ShareUse::whole`]). `gpus`: each answer with gpushare's
/// index of its GPU; `facts`: what `/proc` says of each pid (none: gone,
/// or unreadable); `anchors`: where Slurm makes job cgroups.
///
/// Memory is the sum of NVML's figure for the job's processes (a pid in
/// both lists counted once). SM use, of a job holding a GPU whole only,
/// is the sum over its processes of their mean sampled percentage over
/// 100; a process without samples used none. A share has none: NVML
/// samples an MPS client's work under its server's pid, never the
/// client's, and nothing else on the node divides it by client (the
/// control daemon reports no use). A job with no process on its GPU uses
/// nothing.
pub fn attribute(
    gpus: &[(u32, &GpuSample)],
    state: &LedgerState,
    units_per_gpu: u32,
    facts: &BTreeMap<u32, ProcessFacts>,
    anchors: &Anchors,
) -> Attribution {
    let mut out = Attribution::default();
    for &(gpu, sample) in gpus {
        // Each pid once: memory is the figure either list gives (the
        // larger where both do), unknown only where neither does.
        let mut memory: BTreeMap<u32, Option<u64>> = BTreeMap::new();
        for p in &sample.processes {
            let m = memory.entry(p.pid).or_insert(None);
            *m = (*m).max(p.memory_bytes);
        }
        let mut sm: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for s in sample.utilization.iter().flatten() {
            let e = sm.entry(s.pid).or_default();
            *e = (e.0 + u64::from(s.sm_percent), e.1 + 1);
        }
        let holders = holders_of(state, gpu, units_per_gpu);
        let mut per_job: BTreeMap<u32, (Option<u64>, f64)> =
            holders.iter().map(|h| (h.job, (Some(0), 0.0))).collect();
        let pids: BTreeSet<u32> = memory.keys().chain(sm.keys()).copied().collect();
        for pid in pids {
            let Some(holder) = holder_of(facts.get(&pid), anchors, &holders) else {
                out.unattributed.entry(gpu).or_default().push(pid);
                continue;
            };
            let Some((mem, percent)) = per_job.get_mut(&holder.job) else {
                continue;
            };
            // A process sampled but not listed holds no memory any more.
            let used = memory.get(&pid).copied().unwrap_or(Some(0));
            *mem = mem.zip(used).map(|(a, b)| a.saturating_add(b));
            if let Some(&(sum, n)) = sm.get(&pid) {
                *percent += sum as f64 / n.max(1) as f64;
            }
        }
        for h in &holders {
            let (memory_bytes, percent) = per_job.get(&h.job).copied().unwrap_or_default();
            out.shares.push(ShareUse {
                job: h.job,
                gpu,
                memory_bytes,
                // A share's SM use is not measured: under MPS, NVML
                // charges every client's samples to the server's pid
                // (seen on an H200, driver 580), so no client has any.
                sm_utilization: sample
                    .utilization
                    .as_ref()
                    .filter(|_| h.whole)
                    .map(|_| percent / 100.0 / h.part.max(f64::MIN_POSITIVE)),
                whole: h.whole,
            });
        }
    }
    out.shares.sort_by_key(|s| (s.job, s.gpu));
    out
}

/// How long the figures the node timer kept are shown after it wrote
/// them: two of its runs, so that a prolog's or epilog's rewrite of the
/// metrics file between two runs keeps them, and a timer that stopped
/// leaves none.
pub const KEPT_FOR_SECS: u64 = 150;

/// The figures the node timer last wrote, kept beside the ledger.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct KeptUsage {
    /// When they were sampled, Unix seconds.
    pub at: u64,
    pub shares: Vec<ShareUse>,
}

impl KeptUsage {
    /// The figures to show at `now` for the shares of `state`: none once
    /// older than [`KEPT_FOR_SECS`] (or from the future), only shares
    /// still on the same GPU.
    pub fn current(&self, state: &LedgerState, now: u64) -> Vec<ShareUse> {
        if now.saturating_sub(self.at) > KEPT_FOR_SECS || self.at > now.saturating_add(60) {
            return Vec::new();
        }
        self.shares
            .iter()
            .filter(|u| state.share(u.job).is_some_and(|s| s.gpu == u.gpu))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests;
