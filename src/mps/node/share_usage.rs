//! Each share's use of its GPU, sampled by the node timer (`gpu-mps
//! metrics --write`, root, every minute) and never on a job's start or
//! end: NVML asked through the child the caller runs, each process NVML
//! names read from `/proc`, the shares' figures ([`crate::mps::usage`])
//! kept beside the ledger, whence every rewrite of the metrics file takes
//! them while they are fresh.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;

use super::setup::Node;
use crate::mps::ledger::LedgerState;
use crate::mps::state_dir;
use crate::mps::usage::totals::{self, Ended, Field, Fit, Next, Totals, Unanswered};
use crate::mps::usage::{self, cgroup, GpuAnswer, GpuSample, ProcessFacts, ShareUse};

/// The figures the node timer last sampled, in the state directory.
pub const KEPT_FILE: &str = "share-usage";

/// What the node timer keeps between its runs: the last figures, and
/// where each GPU's utilisation samples were read up to.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
struct Kept {
    #[serde(flatten)]
    usage: usage::KeptUsage,
    /// NVML's index → the driver's timestamp (µs) of the last sample read.
    #[serde(default)]
    cursor: BTreeMap<u32, u64>,
    /// Each job's use of each GPU it holds, over its stay.
    #[serde(default)]
    totals: Vec<Totals>,
    /// Jobs that ended, their figures still to be recorded.
    #[serde(default)]
    ended: Vec<Ended>,
    /// The ended jobs' figures by QOS and size.
    #[serde(default)]
    fit: Fit,
}

fn write_kept(dir: &std::path::Path, kept: &Kept) -> Result<(), String> {
    let text = serde_json::to_string(kept).map_err(|e| e.to_string())?;
    state_dir::replace_file(dir, KEPT_FILE, text.as_bytes(), 0o600).map_err(|e| e.to_string())
}

fn read_kept(dir: &std::path::Path) -> Kept {
    fs::read_to_string(dir.join(KEPT_FILE))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// Now, in seconds since 1970 (0 on a clock before it).
pub(super) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What the metrics file shows of the node timer's figures: each running
/// share's (none once stale: [`usage::KEPT_FOR_SECS`]; none read where no
/// share runs) and the ended jobs' histograms, from one read of its file.
pub fn kept_figures(node: &Node, state: &LedgerState) -> (Vec<ShareUse>, Fit) {
    let kept = read_kept(&node.cfg.state_dir);
    let usage = if state.shares().next().is_none() {
        Vec::new()
    } else {
        kept.usage.current(state, unix_now())
    };
    (usage, kept.fit)
}

/// The figures to show now for the shares of `state` (see [`kept_figures`]).
pub fn kept_usage(node: &Node, state: &LedgerState) -> Vec<ShareUse> {
    kept_figures(node, state).0
}

/// What the NVML child gave: what it printed (all of it, or what it had
/// printed when it was killed at its deadline), and why it gave no more
/// where it did not end well.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Asked {
    pub text: String,
    pub trouble: Option<String>,
}

/// A process as `/proc` shows it to root: its real uid and cgroups
/// (`None`: gone, or unreadable).
fn process_facts(pid: u32) -> Option<ProcessFacts> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let cgroup = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    Some(ProcessFacts { uid, cgroup })
}

/// The cgroup texts and titles of the node's root-owned `slurmstepd`
/// processes: where Slurm makes job cgroups (see [`cgroup::stepd_anchors`])
/// and which job each named one is ([`cgroup::stepd_job_dirs`]).
fn root_stepds() -> Vec<(String, String)> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "slurmstepd")
        })
        .filter_map(|pid| {
            let facts = process_facts(pid).filter(|f| f.uid == 0)?;
            let title = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let title = String::from_utf8_lossy(&title).replace('\0', " ");
            Some((facts.cgroup, title))
        })
        .collect()
}

/// Each share's figures from what the NVML child printed (`report`;
/// `trouble`: why it gave no more), each process read from `/proc` as
/// root; `gpu_of`: gpushare's GPU of each of NVML's. With the lines that
/// say which GPUs with shares gave no figures, and why.
pub fn share_figures(
    report: &usage::Report,
    state: &LedgerState,
    units_per_gpu: u32,
    gpu_of: impl Fn(&GpuAnswer) -> Option<u32>,
    trouble: Option<&str>,
) -> (Vec<ShareUse>, Vec<String>) {
    let share_gpus: BTreeSet<u32> = state.shares().map(|s| s.gpu).collect();
    let mut lines: Vec<String> = report
        .problems
        .iter()
        .map(|p| format!("NVML's per-process figures: {p}"))
        .collect();
    let mut heard = BTreeSet::new();
    let mut answered: Vec<(u32, &GpuSample)> = Vec::new();
    for answer in &report.gpus {
        let Some(gpu) = gpu_of(answer) else { continue };
        heard.insert(gpu);
        match answer {
            GpuAnswer::Answered(sample) => answered.push((gpu, sample)),
            GpuAnswer::Failed { reason, .. } if share_gpus.contains(&gpu) => lines.push(format!(
                "GPU {gpu}: NVML: {reason}; no share figures for it this time"
            )),
            GpuAnswer::Failed { .. } => {}
        }
    }
    let why = trouble.unwrap_or("it did not name the GPU");
    for gpu in share_gpus.difference(&heard) {
        lines.push(format!(
            "GPU {gpu}: no answer from NVML ({why}); no share figures for it this time"
        ));
    }
    let pids: BTreeSet<u32> = answered
        .iter()
        .flat_map(|(_, g)| {
            let listed = g.processes.iter().map(|p| p.pid);
            listed.chain(g.utilization.iter().flatten().map(|s| s.pid))
        })
        .collect();
    let facts: BTreeMap<u32, ProcessFacts> = pids
        .into_iter()
        .filter_map(|pid| Some((pid, process_facts(pid)?)))
        .collect();
    // Where Slurm makes job cgroups, from root's slurmstepd processes.
    let stepds = if facts.is_empty() {
        Vec::new()
    } else {
        root_stepds()
    };
    let mut anchors = cgroup::stepd_anchors(stepds.iter().map(|(c, _)| c.as_str()));
    let titled = stepds.iter().map(|(c, t)| (c.as_str(), t.as_str()));
    anchors.named_jobs = cgroup::stepd_job_dirs(titled, &anchors);
    let got = usage::attribute(&answered, state, units_per_gpu, &facts, &anchors);
    (got.shares, lines)
}

/// Samples each share's use, and each job's holding a GPU whole, where
/// one runs: `ask` runs the NVML child (given where each GPU's samples
/// were read up to, by NVML's index) and returns what it printed. The
/// shares' figures are kept for the metrics file ([`kept_usage`]), each
/// job's added to its totals, and the jobs that left their GPUs since
/// the last run are set aside for [`record_ended`]. The lines returned
/// say what could not be had (a GPU whose NVML did not answer is
/// skipped, never waited for).
pub fn sample_share_usage(
    node: &Node,
    ask: impl FnOnce(&BTreeMap<u32, u64>) -> Asked,
) -> Vec<String> {
    let state = match node.ledger.snapshot() {
        Ok(s) => s.state,
        Err(e) => return vec![format!("share use not sampled: {e}")],
    };
    let dir = &node.cfg.state_dir;
    let mut kept = read_kept(dir);
    let held = state.shares().next().is_some() || state.whole_holders().next().is_some();
    if !held && kept.totals.is_empty() {
        return Vec::new();
    }
    let mut lines = Vec::new();
    if held {
        let asked = ask(&kept.cursor);
        let report = usage::parse(&asked.text);
        // NVML names a GPU by its minor, gpushare by its place in GPUDevices.
        let gpu_of = |answer: &GpuAnswer| match answer.minor() {
            Some(minor) => node.gpus_of_minors(&[minor]).first().copied(),
            None => Some(answer.index()).filter(|&i| i < node.gpu_count),
        };
        let gpu_memory: BTreeMap<u32, u64> = report
            .gpus
            .iter()
            .filter_map(|a| match a {
                GpuAnswer::Answered(g) => Some((gpu_of(a)?, g.total_bytes?)),
                GpuAnswer::Failed { .. } => None,
            })
            .collect();
        let trouble = asked.trouble.as_deref();
        let (figures, said) =
            share_figures(&report, &state, node.cfg.units_per_gpu, gpu_of, trouble);
        lines = said;
        kept.cursor.extend(report.last_samples());
        let units_per_gpu = node.cfg.units_per_gpu;
        totals::fold(
            &mut kept.totals,
            &figures,
            &state,
            units_per_gpu,
            &gpu_memory,
        );
        kept.usage = usage::KeptUsage {
            at: unix_now(),
            shares: figures.into_iter().filter(|u| !u.whole).collect(),
        };
    }
    let ended = totals::take_ended(&mut kept.totals, &state);
    kept.ended.extend(totals::ended_jobs(ended, unix_now()));
    finish(dir, &kept, lines)
}

/// The lock the node timer holds while it samples and records (a file
/// beside [`KEPT_FILE`], only ever `flock`ed).
const KEPT_LOCK: &str = "share-usage.lock";

/// Runs `f` (the node timer's [`sample_share_usage`] and [`record_ended`])
/// unless another run holds the lock: two runs at once (the timer and an
/// admin's `gpu-mps metrics --write`) would each add the same minute and
/// record a job twice. `None`: another run was at it, nothing done.
pub fn with_usage_lock<T>(node: &Node, f: impl FnOnce() -> T) -> Result<Option<T>, String> {
    let path = node.cfg.state_dir.join(KEPT_LOCK);
    let file =
        crate::mps::lock_wait::open_lock(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => return Ok(None),
        Err(fs::TryLockError::Error(e)) => return Err(format!("lock {}: {e}", path.display())),
    }
    let out = f();
    drop(file);
    Ok(Some(out))
}

/// How the node timer reaches the accounting for [`record_ended`].
pub trait Accounting {
    /// `sacct -X -n -P --delimiter=DELIMITER -o FIELDS -j JOB`'s output
    /// ([`totals::SACCT_FIELDS`], [`totals::SACCT_DELIMITER`]).
    fn shown(&mut self, job: u32) -> Result<String, Unanswered>;
    /// `sacctmgr -i modify job where jobid=NAME set FIELD=TEXT` (NAME:
    /// the job's `JobID`, which selects it alone).
    fn write(&mut self, name: &str, field: Field, text: &str) -> Result<(), Unanswered>;
    /// Whether its `sacctmgr` writes a comment in lower case (before
    /// Slurm 23.02).
    fn lowers(&self) -> bool;
}

/// At most this many ended jobs are looked at in one run of the timer.
pub const RECORDS_PER_RUN: usize = 16;

/// Notes when a call for `e` was made and failed: the span of failures
/// starts (once).
fn failed(e: &mut Ended, now: u64) {
    e.failing_since.get_or_insert(now);
}

/// Records the figures of the jobs that ended here (see
/// [`sample_share_usage`]): each job's peak memory and mean SM use per
/// GPU in its `AdminComment` (its `SystemComment` where the
/// `AdminComment` is a site tool's) once the accounting holds its
/// complete record, with `accounting` (`None`: `UsageRecord=none`,
/// nothing written); read back on the next run (a site tool that
/// replaced the comment meanwhile moves them to `SystemComment`); then
/// counted in the histograms by QOS and size. A job is given up only
/// after an hour in which every call made for it failed; a call not made
/// (the run's time for the accounting spent) changes nothing. Jobs whose
/// calls failed are asked after the others next run. `now`: Unix
/// seconds. Returns what went wrong, a line each.
pub fn record_ended(
    node: &Node,
    node_name: &str,
    accounting: Option<&mut dyn Accounting>,
    now: u64,
) -> Vec<String> {
    let dir = &node.cfg.state_dir;
    let mut kept = read_kept(dir);
    if kept.ended.is_empty() {
        return Vec::new();
    }
    let mut lines = Vec::new();
    let ended = std::mem::take(&mut kept.ended);
    let Some(acct) = accounting else {
        for e in ended {
            e.totals.iter().for_each(|t| kept.fit.observe(t, ""));
        }
        kept.ended = Vec::new();
        return finish(dir, &kept, lines);
    };
    let (mut left, mut failing) = (Vec::new(), Vec::new());
    for (i, mut e) in ended.into_iter().enumerate() {
        if i >= RECORDS_PER_RUN {
            left.push(e);
            continue;
        }
        let shown = acct
            .shown(e.job)
            .map(|text| totals::accounted(&text, e.job));
        let made_and_failed = matches!(shown, Err(Unanswered::Failed(_)));
        if let Err(Unanswered::Failed(why)) = &shown {
            if e.failing_since.is_none() {
                lines.push(format!("job {}: its GPU figures wait: {why}", e.job));
            }
        }
        match totals::next(&e, shown, node_name, acct.lowers(), now) {
            Next::Wait if made_and_failed => {
                failed(&mut e, now);
                failing.push(e);
            }
            Next::Wait => left.push(e),
            Next::Write {
                name,
                field,
                comment,
            } => match acct.write(&name, field, &comment) {
                Ok(()) => {
                    e.writes += 1;
                    e.failing_since = None;
                    left.push(e);
                }
                Err(Unanswered::NotAsked(_)) => left.push(e),
                Err(Unanswered::Failed(why)) => {
                    lines.push(format!("job {}: its GPU figures not written: {why}", e.job));
                    failed(&mut e, now);
                    failing.push(e);
                }
            },
            Next::Done { qos } => e.totals.iter().for_each(|t| kept.fit.observe(t, &qos)),
            Next::GiveUp(why) => {
                lines.push(format!(
                    "job {}: its GPU figures not recorded: {why}",
                    e.job
                ));
                e.totals.iter().for_each(|t| kept.fit.observe(t, ""));
            }
        }
    }
    left.extend(failing);
    kept.ended = left;
    finish(dir, &kept, lines)
}

/// Keeps `kept`, adding a line where that failed.
fn finish(dir: &std::path::Path, kept: &Kept, mut lines: Vec<String>) -> Vec<String> {
    if let Err(e) = write_kept(dir, kept) {
        lines.push(format!("share figures not kept: {e}"));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::super::setup::tests::temp_node;
    use super::*;
    use std::path::PathBuf;

    /// NVML's GPUs by minor, gpushare's by their place in GPUDevices: a
    /// GPU that answers has its shares' figures kept; one whose NVML failed, or that the child never finished,
    /// is named and skipped; the next run starts each GPU's samples where
    /// the last one ended; with no share, NVML is not asked.
    #[test]
    fn answered_gpus_are_kept_and_the_others_named() {
        let (mut node, _dir) = temp_node(None);
        let asked = std::cell::Cell::new(0);
        let never = |_: &BTreeMap<u32, u64>| {
            asked.set(asked.get() + 1);
            Asked::default()
        };
        assert!(sample_share_usage(&node, never).is_empty());
        assert_eq!(asked.get(), 0);
        node.cfg.gpu_devices = Some(
            (0..4)
                .rev()
                .map(|m| PathBuf::from(format!("/dev/nvidia{m}")))
                .collect(),
        );
        for job in 1..=3 {
            node.ledger
                .place(job, 1000, "alice", 50, 4, 100)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        // This process: alive, in no job's cgroup.
        let me = std::process::id();
        let text = format!(
            "gpu 5 3 ok 1000\nproc 5 {me} 4096 compute\nutil 5 {me} 40 77\nend 5\n\
             gpu 6 2 err GPU is lost\nend 6\ngpu 7 1 ok 5\n"
        );
        let ask = |cursor: &BTreeMap<u32, u64>| {
            assert!(cursor.is_empty());
            Asked {
                text: text.clone(),
                trouble: Some("the child did not finish within 5 s".into()),
            }
        };
        let lines = sample_share_usage(&node, ask);
        assert_eq!(
            lines,
            vec![
                "GPU 1: NVML: GPU is lost; no share figures for it this time".to_owned(),
                "GPU 2: no answer from NVML (the child did not finish within 5 s); no share \
                 figures for it this time"
                    .to_owned(),
            ]
        );
        let state = node
            .ledger
            .snapshot()
            .map(|s| s.state)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            kept_usage(&node, &state),
            vec![ShareUse {
                job: 1,
                gpu: 0,
                memory_bytes: Some(0),
                sm_utilization: None,
                whole: false,
            }]
        );
        let again = sample_share_usage(&node, |cursor: &BTreeMap<u32, u64>| {
            assert_eq!(cursor, &BTreeMap::from([(5, 77)]));
            Asked::default()
        });
        assert_eq!(again.len(), 3, "{again:?}");
        assert!(kept_usage(&node, &state).is_empty());
    }

    /// The accounting as a test sees it: each job's record (state, QOS,
    /// AdminComment, SystemComment), what was written, whether sacct
    /// answers, and how many calls the run's budget still allows.
    struct Books {
        records: BTreeMap<u32, [String; 4]>,
        written: Vec<(u32, Field, String)>,
        down: bool,
        budget: Option<u32>,
        lowers: bool,
    }

    impl Books {
        fn new(records: &[(u32, &str, &str, &str)]) -> Self {
            Books {
                records: records
                    .iter()
                    .map(|&(job, state, qos, admin)| {
                        let fields = [state, qos, admin, ""].map(str::to_owned);
                        (job, fields)
                    })
                    .collect(),
                written: Vec::new(),
                down: false,
                budget: None,
                lowers: false,
            }
        }

        fn call(&mut self) -> Result<(), Unanswered> {
            if let Some(left) = self.budget.as_mut() {
                if *left == 0 {
                    return Err(Unanswered::NotAsked("the budget is spent".into()));
                }
                *left -= 1;
            }
            if self.down {
                return Err(Unanswered::Failed("slurmdbd is down".into()));
            }
            Ok(())
        }
    }

    impl Accounting for Books {
        fn shown(&mut self, job: u32) -> Result<String, Unanswered> {
            self.call()?;
            let d = totals::SACCT_DELIMITER;
            Ok(self
                .records
                .get(&job)
                .map_or_else(String::new, |r| format!("{job}{d}{job}{d}{}\n", r.join(d))))
        }
        fn write(&mut self, name: &str, field: Field, text: &str) -> Result<(), Unanswered> {
            self.call()?;
            let job: u32 = name
                .parse()
                .map_err(|_| Unanswered::Failed(format!("{name}: no such job")))?;
            self.written.push((job, field, text.to_owned()));
            if let Some(r) = self.records.get_mut(&job) {
                let at = if field == Field::AdminComment { 2 } else { 3 };
                r[at] = if self.lowers {
                    text.to_lowercase()
                } else {
                    text.to_owned()
                };
            }
            Ok(())
        }
        fn lowers(&self) -> bool {
            self.lowers
        }
    }

    /// A node of 4 GPUs, NVML's minors in order.
    fn four_gpus() -> (Node, tempfile::TempDir) {
        let (mut node, dir) = temp_node(None);
        node.cfg.gpu_devices = Some(
            (0..4)
                .map(|m| PathBuf::from(format!("/dev/nvidia{m}")))
                .collect(),
        );
        (node, dir)
    }

    /// Job `job` holding GPU `gpu` whole, sampled once, then ended.
    fn ended_here(node: &Node, job: u32, gpu: u32) {
        node.ledger
            .record_whole(job, &[gpu])
            .unwrap_or_else(|e| panic!("{e}"));
        let text = format!("gpu {gpu} {gpu} ok 5 80000000000\nend {gpu}\n");
        sample_share_usage(node, |_: &BTreeMap<u32, u64>| Asked {
            text: text.clone(),
            trouble: None,
        });
        node.ledger.release(job).unwrap_or_else(|e| panic!("{e}"));
        sample_share_usage(node, |_: &BTreeMap<u32, u64>| -> Asked {
            panic!("NVML asked with no job")
        });
    }

    /// A share and a job holding a GPU whole are sampled twice; once they
    /// leave the ledger, the next runs write each one's figures in its
    /// AdminComment (the site's words kept) when its record is complete,
    /// count it by QOS and size once the accounting shows them, and
    /// forget it; with UsageRecord=none it is only counted.
    #[test]
    fn ended_jobs_figures_go_to_their_admin_comment_then_the_histograms() {
        let (mut node, _dir) = temp_node(None);
        node.cfg.gpu_devices = Some(
            (0..4)
                .map(|m| PathBuf::from(format!("/dev/nvidia{m}")))
                .collect(),
        );
        node.ledger
            .place(1, 1000, "alice", 25, 4, 100)
            .unwrap_or_else(|e| panic!("{e}"));
        node.ledger
            .record_whole(2, &[3])
            .unwrap_or_else(|e| panic!("{e}"));
        let text = "gpu 0 0 ok 1000 80000000000\nend 0\ngpu 3 3 ok 5 80000000000\nend 3\n";
        for _ in 0..2 {
            let lines = sample_share_usage(&node, |_: &BTreeMap<u32, u64>| Asked {
                text: text.to_owned(),
                trouble: None,
            });
            assert!(lines.is_empty(), "{lines:?}");
        }
        let kept = read_kept(&node.cfg.state_dir);
        assert_eq!(kept.totals.len(), 2, "{kept:?}");
        assert!(kept.totals.iter().all(|t| t.samples == 2));
        let mut books = Books::new(&[
            (1, "RUNNING", "normal", "site words"),
            (2, "COMPLETED", "long", ""),
        ]);
        let now = unix_now();
        // Still running: nothing ended, nothing written.
        assert!(record_ended(&node, "n1", Some(&mut books), now).is_empty());
        node.ledger.release(1).unwrap_or_else(|e| panic!("{e}"));
        node.ledger.release(2).unwrap_or_else(|e| panic!("{e}"));
        let never = |_: &BTreeMap<u32, u64>| -> Asked { panic!("NVML asked with no job") };
        assert!(sample_share_usage(&node, never).is_empty());
        assert!(record_ended(&node, "n1", Some(&mut books), now).is_empty());
        assert_eq!(books.written.len(), 1, "{:?}", books.written);
        assert_eq!(books.written[0].0, 2);
        assert!(books.written[0]
            .2
            .starts_with("gpushare-usage: node=n1 gpu=3 units=whole"));
        if let Some(r) = books.records.get_mut(&1) {
            r[0] = "COMPLETED".into();
        }
        assert!(record_ended(&node, "n1", Some(&mut books), now).is_empty());
        let (job, field, comment) = &books.written[1];
        // The site's words left whole: SystemComment used.
        assert_eq!((*job, *field), (1, Field::SystemComment));
        assert!(comment.starts_with("gpushare-usage: node=n1 gpu=0 units=25/100 "));
        assert!(comment.ends_with(" samples=2"), "{comment}");
        assert!(record_ended(&node, "n1", Some(&mut books), now).is_empty());
        let kept = read_kept(&node.cfg.state_dir);
        assert!(kept.ended.is_empty() && kept.totals.is_empty(), "{kept:?}");
        let sizes: Vec<(&str, &str)> = kept
            .fit
            .rows
            .iter()
            .map(|r| (r.qos.as_str(), r.size.as_str()))
            .collect();
        assert_eq!(sizes, vec![("long", "whole"), ("normal", "25")]);
        // UsageRecord=none: counted at once, under no QOS.
        ended_here(&node, 4, 2);
        assert!(record_ended(&node, "n1", None, now).is_empty());
        let kept = read_kept(&node.cfg.state_dir);
        assert!(kept.ended.is_empty());
        let unknown = kept.fit.rows.iter().find(|r| r.qos == "unknown");
        assert_eq!(unknown.map(|r| (r.sm.count, r.memory.count)), Some((1, 1)));
    }

    /// slurmdbd down ten minutes (an upgrade), the timer running every
    /// minute: every job that ended meanwhile is recorded once it is back;
    /// a run whose time for the accounting is spent asks nothing and
    /// counts nothing, however many runs; only an hour in which every call
    /// made failed gives a job up.
    #[test]
    fn the_accounting_down_ten_minutes_loses_no_job_and_calls_not_made_are_no_tries() {
        let (node, _dir) = four_gpus();
        let t0 = unix_now();
        let mut books = Books::new(&[]);
        books.down = true;
        for (minute, job) in (0..10).zip(10..) {
            ended_here(&node, job, 0);
            books
                .records
                .insert(job, ["COMPLETED", "normal", "", ""].map(str::to_owned));
            let said = record_ended(&node, "n1", Some(&mut books), t0 + minute * 60);
            assert_eq!(said.len(), 1, "{said:?}");
        }
        books.down = false;
        for minute in 10..13 {
            record_ended(&node, "n1", Some(&mut books), t0 + minute * 60);
        }
        let kept = read_kept(&node.cfg.state_dir);
        assert!(kept.ended.is_empty(), "{:?}", kept.ended);
        assert_eq!(books.written.len(), 10);
        assert!(books
            .records
            .values()
            .all(|r| r[2].starts_with("gpushare-usage: ")));
        // Two hours of runs whose budget is spent before this job's call:
        // it waits, untouched.
        ended_here(&node, 30, 1);
        books
            .records
            .insert(30, ["COMPLETED", "normal", "", ""].map(str::to_owned));
        books.down = true;
        for minute in 0..120 {
            books.budget = Some(0);
            let said = record_ended(&node, "n1", Some(&mut books), t0 + minute * 60);
            assert!(said.is_empty(), "{said:?}");
        }
        let kept = read_kept(&node.cfg.state_dir);
        assert_eq!(kept.ended.len(), 1);
        assert_eq!(kept.ended[0].failing_since, None);
        // Every call made failing: waits the hour, then given up.
        books.budget = None;
        let start = t0 + 7200;
        for minute in 0..60 {
            let said = record_ended(&node, "n1", Some(&mut books), start + minute * 60);
            assert!(said.iter().all(|l| !l.contains("not recorded")), "{said:?}");
        }
        let said = record_ended(&node, "n1", Some(&mut books), start + 3600);
        assert!(said.iter().any(|l| l.contains("not recorded")), "{said:?}");
        assert!(read_kept(&node.cfg.state_dir).ended.is_empty());
    }

    /// jobstats' blob in AdminComment: left whole, the figures in
    /// SystemComment; jobstats writing after gpushare: read back, moved.
    #[test]
    fn a_site_tools_admin_comment_stays_whole_in_either_order() {
        let (node, _dir) = four_gpus();
        let now = unix_now();
        let js1 = "JS1:H4sIAAAAAAAAA6tWKkktLlGyUlAqS8wpTgUA+/Wu5BIAAAA=";
        ended_here(&node, 5, 0);
        ended_here(&node, 6, 1);
        let mut books = Books::new(&[
            (5, "COMPLETED", "normal", js1),
            (6, "COMPLETED", "normal", ""),
        ]);
        assert!(record_ended(&node, "n1", Some(&mut books), now).is_empty());
        assert_eq!(books.records[&5][2], js1);
        assert!(books.records[&5][3].starts_with("gpushare-usage: node=n1 gpu=0 "));
        assert!(books.records[&6][2].starts_with("gpushare-usage: node=n1 gpu=1 "));
        // jobstats' epilog replaces job 6's AdminComment after the write.
        if let Some(r) = books.records.get_mut(&6) {
            r[2] = js1.to_owned();
        }
        assert!(record_ended(&node, "n1", Some(&mut books), now + 60).is_empty());
        assert_eq!(books.records[&6][2], js1);
        assert!(books.records[&6][3].starts_with("gpushare-usage: node=n1 gpu=1 "));
        assert!(record_ended(&node, "n1", Some(&mut books), now + 120).is_empty());
        assert!(read_kept(&node.cfg.state_dir).ended.is_empty());
        assert!(books
            .written
            .iter()
            .all(|(_, f, t)| *f == Field::SystemComment || !t.contains("JS1:")));
    }
}
