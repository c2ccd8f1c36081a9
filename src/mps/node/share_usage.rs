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
}

fn read_kept(dir: &std::path::Path) -> Kept {
    fs::read_to_string(dir.join(KEPT_FILE))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The figures to show now for the shares of `state` (none once stale:
/// [`usage::KEPT_FOR_SECS`]); what the metrics file shows between two runs
/// of the node timer.
pub fn kept_usage(node: &Node, state: &LedgerState) -> Vec<ShareUse> {
    // No share, no figure: a whole-GPU job's prolog or epilog reads nothing.
    if state.shares().next().is_none() {
        return Vec::new();
    }
    read_kept(&node.cfg.state_dir)
        .usage
        .current(state, unix_now())
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

/// The cgroup texts of the node's root-owned `slurmstepd` processes: where
/// Slurm makes job cgroups (see [`cgroup::stepd_anchors`]).
fn root_stepd_cgroups() -> Vec<String> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "slurmstepd")
        })
        .filter_map(process_facts)
        .filter(|f| f.uid == 0)
        .map(|f| f.cgroup)
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
        root_stepd_cgroups()
    };
    let anchors = cgroup::stepd_anchors(stepds.iter().map(String::as_str));
    let got = usage::attribute(&answered, state, units_per_gpu, &facts, &anchors);
    (got.shares, lines)
}

/// Samples each share's use where at least one share runs: `ask` runs the
/// NVML child (given where each GPU's samples were read up to, by NVML's
/// index) and returns what it printed. The figures are kept for the
/// metrics file ([`kept_usage`]); the lines returned say what could not be
/// had (a GPU whose NVML did not answer is skipped, never waited for).
pub fn sample_share_usage(
    node: &Node,
    ask: impl FnOnce(&BTreeMap<u32, u64>) -> Asked,
) -> Vec<String> {
    let state = match node.ledger.snapshot() {
        Ok(s) => s.state,
        Err(e) => return vec![format!("share use not sampled: {e}")],
    };
    if state.shares().next().is_none() {
        return Vec::new();
    }
    let dir = &node.cfg.state_dir;
    let mut kept = read_kept(dir);
    let asked = ask(&kept.cursor);
    let report = usage::parse(&asked.text);
    // NVML names a GPU by its minor, gpushare by its place in GPUDevices.
    let gpu_of = |answer: &GpuAnswer| match answer.minor() {
        Some(minor) => node.gpus_of_minors(&[minor]).first().copied(),
        None => Some(answer.index()).filter(|&i| i < node.gpu_count),
    };
    let trouble = asked.trouble.as_deref();
    let (shares, mut lines) =
        share_figures(&report, &state, node.cfg.units_per_gpu, gpu_of, trouble);
    kept.cursor.extend(report.last_samples());
    kept.usage = usage::KeptUsage {
        at: unix_now(),
        shares,
    };
    let text = serde_json::to_string(&kept).unwrap_or_default();
    if let Err(e) = state_dir::replace_file(dir, KEPT_FILE, text.as_bytes(), 0o600) {
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
                sm_utilization: Some(0.0),
            }]
        );
        let again = sample_share_usage(&node, |cursor: &BTreeMap<u32, u64>| {
            assert_eq!(cursor, &BTreeMap::from([(5, 77)]));
            Asked::default()
        });
        assert_eq!(again.len(), 3, "{again:?}");
        assert!(kept_usage(&node, &state).is_empty());
    }
}
