//! The per-type caps judged on a pending job's record once an update is
//! done (`scontrol -o show job`): an update carries only what it changes,
//! so `NumCPUs=64` on a job of one a40 cannot be judged before slurmctld
//! has applied it. Such a job is held as one given a type its rule does
//! not permit is (`type_recheck`), and released when an update makes it
//! fit again.
//!
//! The record holds words a user wrote (a job name, a comment, an output
//! path), which may look like Slurm's own. Every word counts, each the way
//! that makes the job look larger: the most CPUs, tasks, memory and GPUs
//! of a type any word says, the fewest GPUs in all. A user's words can
//! only get their own job held.

use crate::qos::config::{megabytes, mem_text, Cap, Enforce, GpuQosConfig};
use crate::qos::policy::job::record_values as values;

/// The first number of a value (`8`, `2-3` → 2, `3000M` with `mem`).
fn number(value: &str, mem: bool) -> Option<u64> {
    if mem {
        return megabytes(value).or_else(|| (value == "0").then_some(0));
    }
    let digits: String = value.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The last number of a range (`2-3` → 3).
fn most(value: &str) -> Option<u64> {
    number(value.rsplit('-').next().unwrap_or(value), false)
}

/// `(name, type, count)` of each `gres/gpu:a40=2` entry of TRES words.
fn tres_entries<'a>(show_job: &'a str) -> impl Iterator<Item = (&'a str, u64)> + 'a {
    values(show_job, "TRES")
        .chain(values(show_job, "ReqTRES"))
        .flat_map(|list| list.split(','))
        .filter_map(|entry| {
            let (key, value) = entry.split_once('=')?;
            let is_mem = key == "mem";
            Some((key, number(value, is_mem)?))
        })
}

/// Each typed GPU entry of `TresPer*=` words: (type, count per unit,
/// which word).
fn tres_per_types(show_job: &str) -> Vec<(String, u64, &'static str)> {
    let mut found = Vec::new();
    for key in ["TresPerNode", "TresPerJob", "TresPerTask", "TresPerSocket"] {
        for list in values(show_job, key) {
            for entry in list.split(',') {
                let body = entry
                    .strip_prefix("gres/")
                    .or_else(|| entry.strip_prefix("gres:"))
                    .unwrap_or(entry);
                let mut parts = body.split([':', '=']);
                let (Some(name), Some(ty), Some(count)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    continue;
                };
                if !name.eq_ignore_ascii_case("gpu") {
                    continue;
                }
                if let Some(n) = number(count, false) {
                    found.push((ty.to_owned(), n, key));
                }
            }
        }
    }
    found
}

/// Why job `job`, as `show_job` shows it, is over a per-type cap; `None`
/// where it is within every one, or the file enforces none.
/// `exclusive_word`: the record says a whole node by `Exclusive=NODE`
/// (26.05 and later, where `OverSubscribe=NO` is every job's default),
/// not by `OverSubscribe=NO` (before 26.05).
pub fn over_type_caps(
    cfg: &GpuQosConfig,
    job: u32,
    show_job: &str,
    exclusive_word: bool,
) -> Option<String> {
    let caps = cfg.type_caps();
    if caps.is_empty() || cfg.enforce() != Enforce::Yes {
        return None;
    }
    let largest = |key: &str| values(show_job, key).filter_map(|v| number(v, false)).max();
    let nodes = values(show_job, "NumNodes")
        .filter_map(most)
        .max()
        .unwrap_or(1);
    let tasks = largest("NumTasks").unwrap_or(1);
    let tres: Vec<(&str, u64)> = tres_entries(show_job).collect();
    let tres_of = |wanted: &'static str| {
        tres.iter()
            .filter(move |(key, _)| *key == wanted)
            .map(|(_, n)| *n)
    };
    // GPUs of each type: the most any word says.
    let mut typed: Vec<(String, u64)> = Vec::new();
    let mut count = |ty: &str, n: u64| match typed.iter_mut().find(|(t, _)| t == ty) {
        Some((_, held)) => *held = (*held).max(n),
        None => typed.push((ty.to_owned(), n)),
    };
    for (key, n) in &tres {
        if let Some(ty) = key.strip_prefix("gres/gpu:") {
            count(ty, *n);
        }
    }
    for (ty, n, key) in tres_per_types(show_job) {
        let units = match key {
            "TresPerNode" | "TresPerSocket" => nodes,
            "TresPerTask" => tasks,
            _ => 1,
        };
        count(&ty, n.saturating_mul(units));
    }
    // GPUs in all: the fewest any TRES word says.
    let gpus = tres_of("gres/gpu")
        .min()
        .or_else(|| typed.iter().map(|(_, n)| *n).max())?
        .max(1);
    // A pending job's TRES leaves out what Slurm adds at allocation:
    // `--cpus-per-gpu`, `--mem-per-gpu` and `--mincpus` count from their
    // own words.
    let per_gpu = |key: &str, mem: bool| {
        values(show_job, key)
            .filter_map(|v| per_gpu_value(v, mem).ok().flatten())
            .max()
            .map(|n| n.saturating_mul(gpus))
    };
    let least_nodes = values(show_job, "NumNodes")
        .filter_map(|v| number(v, false))
        .max()
        .unwrap_or(1);
    let cpus = tres_of("cpu")
        .chain(largest("NumCPUs"))
        .chain(largest("MinCPUsNode").map(|n| n.saturating_mul(least_nodes)))
        .chain(per_gpu("CpusPerTres", false))
        .max()
        .unwrap_or(1);
    // Memory counts where the job asked for some (MinMemoryNode=0 with no
    // MinMemoryCPU is Slurm's default, as at submission).
    let asked_mem = values(show_job, "MinMemoryNode")
        .chain(values(show_job, "MinMemoryCPU"))
        .filter_map(|v| number(v, true))
        .any(|mb| mb > 0);
    let mem = tres_of("mem")
        .filter(|_| asked_mem)
        .chain(per_gpu("MemPerTres", true))
        .max();
    let whole_node = if exclusive_word {
        values(show_job, "Exclusive").any(|v| v == "NODE" || v == "TOPO")
    } else {
        values(show_job, "OverSubscribe").any(|v| v == "NO")
    };
    let release = format!("an update of job {job} within the cap releases it");
    for (ty, held) in &typed {
        if let Some(cap) = caps.of(Cap::GpusPerJob, ty) {
            if *held > cap {
                let item = caps.item(Cap::GpusPerJob, ty).unwrap_or_default();
                return Some(format!(
                    "it can hold {held} {ty}, more than MaxGPUsPerJob={item} allows; {release}"
                ));
            }
        }
        for (cap, what, amount) in [
            (Cap::CpusPerGpu, "CPUs", Some(cpus)),
            (Cap::TasksPerGpu, "tasks", Some(tasks)),
            (Cap::MemPerGpu, "of memory", mem),
        ] {
            let (Some(limit), Some(amount)) = (caps.of(cap, ty), amount) else {
                continue;
            };
            let item = caps.item(cap, ty).unwrap_or_default();
            if whole_node && cap != Cap::TasksPerGpu {
                return Some(format!(
                    "a whole node holds every CPU and all of its memory, which {}={item} \
                     cannot judge; {release}",
                    cap.key()
                ));
            }
            if amount > limit.saturating_mul(gpus) {
                let amount = match cap {
                    Cap::MemPerGpu => mem_text(amount),
                    _ => amount.to_string(),
                };
                return Some(format!(
                    "it holds {amount} {what} with {gpus} GPU(s), more than {}={item} allows; \
                     {release}",
                    cap.key()
                ));
            }
        }
    }
    None
}

/// The GPU entry's number of a `cpus_per_tres`/`mem_per_tres` string
/// (`gres/gpu:8`, `gres:gpu:8`, `gres/gpu:a40:8`; the largest where
/// there are several): `Ok(None)` where it names no GPU, `Err` where an
/// entry does not read.
pub(super) fn per_gpu_value(text: &str, mem: bool) -> Result<Option<u64>, ()> {
    let mut most: Option<u64> = None;
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let body = entry
            .strip_prefix("gres/")
            .or_else(|| entry.strip_prefix("gres:"))
            .unwrap_or(entry);
        let (head, value) = body.rsplit_once([':', '=']).ok_or(())?;
        let name = head.split(':').next().unwrap_or(head);
        if !name.eq_ignore_ascii_case("gpu") {
            continue;
        }
        let n = if mem {
            megabytes(value).ok_or(())?
        } else {
            value.parse::<u64>().map_err(|_| ())?
        };
        most = Some(most.map_or(n, |m| m.max(n)));
    }
    Ok(most)
}
