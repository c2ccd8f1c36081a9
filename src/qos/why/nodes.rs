//! A wait on free GPUs: the nodes that could run the job, what each
//! holds and for whom.

use crate::qos::gres::{gpus_of_tres, gpus_of_type};
use crate::qos::site::NodeInfo;
use crate::qos::slurm::jobs::Job;
use crate::shared::syntax::hostlist_contains;

use super::facts::{preempt_list, Facts};

/// At most this many nodes are described one by one.
pub(super) const NODES_SHOWN: usize = 6;

/// Every node a Slurm host list names (`gpu[01-02],x` → gpu01, gpu02, x);
/// a range it cannot read is kept as written.
pub(super) fn node_names(list: &str) -> Vec<String> {
    let mut out = Vec::new();
    for item in crate::shared::syntax::split_top_level(list, '[', ']') {
        let Some((prefix, rest)) = item.split_once('[') else {
            out.push(item.to_owned());
            continue;
        };
        let Some((body, suffix)) = rest.split_once(']') else {
            out.push(item.to_owned());
            continue;
        };
        for range in body.split(',') {
            let (a, b) = range.split_once('-').unwrap_or((range, range));
            let width = a.len();
            match (a.parse::<u64>(), b.parse::<u64>()) {
                (Ok(x), Ok(y)) if y >= x && y - x < 100_000 => {
                    for n in x..=y {
                        out.push(format!("{prefix}{n:0width$}{suffix}"));
                    }
                }
                _ => out.push(item.to_owned()),
            }
        }
    }
    out
}

/// The nodes of the job's partition that have its GPU type (any GPU for
/// an untyped request), planned ones first: each one's GPUs of that type,
/// how many are in use and by which jobs this user may see that matter
/// here (jobs it may preempt, its own group's), and what is left to others.
pub(super) fn node_details(job: &Job, facts: &Facts, details: &mut Vec<String>) {
    let want = job.gpu_type();
    let mut nodes: Vec<&NodeInfo> = facts
        .nodes
        .iter()
        .filter(|n| n.partitions.contains(&job.partition))
        .filter(|n| match want {
            Some(t) => n.gpu_types().any(|x| x == t),
            None => n.has_gpus(),
        })
        .collect();
    let planned = |n: &NodeInfo| {
        job.sched_nodes
            .as_deref()
            .is_some_and(|p| hostlist_contains(p, &n.name))
    };
    nodes.sort_by_key(|n| !planned(n));
    let kind = want.unwrap_or("GPU");
    let victims = preempt_list(&facts.qos, &job.qos);
    for n in nodes.iter().take(NODES_SHOWN) {
        let total: u64 = n
            .gres
            .iter()
            .filter(|g| g.name == "gpu")
            .filter(|g| want.is_none() || g.gres_type.as_deref() == want)
            .map(|g| g.count)
            .sum();
        let alloc = gpus_of_tres(&n.alloc_tres);
        // A type accounting does not track: the node's untyped count, where
        // it has that one type only.
        let untracked = alloc.iter().all(|(t, _)| t.is_none()) && n.gpu_types().count() == 1;
        let used = gpus_of_type(&alloc, want.filter(|_| !untracked));
        let on_node = |j: &&Job| {
            j.nodes
                .as_deref()
                .is_some_and(|l| hostlist_contains(l, &n.name))
        };
        // Two disjoint reads: jobs of the QOS it may preempt, its group's.
        let mut holders: Vec<String> = Vec::new();
        let mut known = 0;
        for h in facts
            .preemptable
            .iter()
            .chain(&facts.group_running)
            .filter(on_node)
        {
            known += gpus_of_type(&h.gpus, want);
            let preemptable = victims.iter().any(|v| v.eq_ignore_ascii_case(&h.qos));
            holders.push(format!(
                "{} job {} ({}, {}){}",
                h.qos,
                h.id,
                h.user,
                h.gpu_words(),
                if preemptable {
                    ", which it may preempt"
                } else {
                    ""
                }
            ));
        }
        let others = used.saturating_sub(known);
        if others > 0 {
            holders.push(format!(
                "{others} by {}",
                if holders.is_empty() {
                    "jobs of other QOS"
                } else {
                    "other jobs"
                }
            ));
        }
        let state = n.state.to_ascii_uppercase();
        let unusable = ["DOWN", "DRAIN", "FAIL", "MAINT", "RESERVED", "POWERED_DOWN"]
            .iter()
            .any(|w| state.contains(w));
        let mps = alloc_mps(&n.alloc_tres);
        details.push(format!(
            "{}{}{}: {total} {kind}, {used} in use{}{}{}",
            n.name,
            if state.is_empty() {
                String::new()
            } else {
                format!(" ({})", n.state)
            },
            if planned(n) {
                ", where Slurm plans it"
            } else {
                ""
            },
            if holders.is_empty() {
                String::new()
            } else {
                format!(": {}", holders.join("; "))
            },
            if mps > 0 {
                format!("; MPS shares hold {mps} units")
            } else {
                String::new()
            },
            if unusable {
                "; it takes no new job in this state"
            } else {
                ""
            },
        ));
    }
    if nodes.len() > NODES_SHOWN {
        details.push(format!(
            "and {} more nodes of partition {} with {kind}s",
            nodes.len() - NODES_SHOWN,
            job.partition
        ));
    }
}

/// The `gres/mps` units of a TRES string.
pub(super) fn alloc_mps(tres: &str) -> u64 {
    tres.split(',')
        .filter_map(|e| e.split_once('='))
        .filter(|(k, _)| k.trim() == "gres/mps")
        .filter_map(|(_, v)| v.trim().parse::<u64>().ok())
        .sum()
}

#[cfg(test)]
mod tests;
