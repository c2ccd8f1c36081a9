//! A wait on free GPUs: the nodes that could run the job, what each
//! holds and for whom.

use crate::qos::gres::{gpu_words, gpus_of_tres, gpus_of_type};
use crate::qos::site::NodeInfo;
use crate::qos::slurm::jobs::Job;
use crate::shared::calendar::stamp_seconds;
use crate::shared::syntax::hostlist_contains;

use super::facts::{preempt_list, Facts};

/// At most this many nodes are described one by one.
pub const NODES_SHOWN: usize = 6;

/// Every node a Slurm host list names (`gpu[01-02],x` → gpu01, gpu02, x),
/// within the shared bounds ([`crate::shared::hostlist`]); an item it
/// cannot read is kept as written.
pub(super) fn node_names(list: &str) -> Vec<String> {
    let mut out = Vec::new();
    for item in crate::shared::syntax::split_top_level(list, '[', ']') {
        match crate::shared::hostlist::expand(item) {
            Ok(names) => out.extend(names),
            Err(_) => out.push(item.to_owned()),
        }
    }
    out
}

/// The nodes of the job's partition that have its GPU type (any GPU for
/// an untyped request), planned ones first: those [`node_details`]
/// describes are the first [`NODES_SHOWN`].
pub fn candidate_nodes<'a>(job: &Job, nodes: &'a [NodeInfo]) -> Vec<&'a NodeInfo> {
    let want = job.gpu_type();
    let mut found: Vec<&NodeInfo> = nodes
        .iter()
        .filter(|n| n.partitions.contains(&job.partition))
        .filter(|n| match want {
            Some(t) => n.gpu_types().any(|x| x == t),
            None => n.has_gpus(),
        })
        .collect();
    found.sort_by_key(|n| !planned(job, n));
    found
}

fn planned(job: &Job, n: &NodeInfo) -> bool {
    job.sched_nodes
        .as_deref()
        .is_some_and(|p| hostlist_contains(p, &n.name))
}

/// GPUs of `want` a job holds on each of its nodes (its count spread
/// evenly, as Slurm gives a multi-node job the same GRES per node).
fn per_node(j: &Job, want: Option<&str>) -> u64 {
    gpus_of_type(&j.gpus, want).div_ceil(j.node_count.unwrap_or(1).max(1))
}

/// What one node holds of the GPUs the job needs.
struct NodeUse<'a> {
    total: u64,
    used: u64,
    /// The jobs Slurm shows on it, soonest end first (no end last).
    holders: Vec<&'a Job>,
    /// GPUs held by jobs the caller cannot see or that were not read.
    unseen: u64,
    usable: bool,
}

impl NodeUse<'_> {
    /// When enough GPUs free up here for `need` if nothing else starts
    /// first: the end of the holder whose end frees the last one needed,
    /// with the ids of the jobs that end by then; `None` where that rests
    /// on a job without an end or one the caller cannot see.
    fn enough_by(&self, need: u64, want: Option<&str>) -> Option<(i64, String, Vec<String>)> {
        let mut free = self.total.saturating_sub(self.used);
        let mut ended = Vec::new();
        for h in &self.holders {
            if free >= need {
                break;
            }
            let end = h.end.as_deref()?;
            let at = stamp_seconds(end)?;
            free += per_node(h, want);
            ended.push(h.id.clone());
            if free >= need {
                return Some((at, end.to_owned(), ended));
            }
        }
        None
    }
}

/// Each candidate node's GPUs, what is in use and by which jobs this user
/// may see, what is left to others, and when enough of it ends for the job.
/// Returns the nodes described that take jobs and have the job's GPUs free
/// now: there it waits for something else (CPUs, memory, more nodes).
pub(super) fn node_details(job: &Job, facts: &Facts, details: &mut Vec<String>) -> Vec<String> {
    let want = job.gpu_type();
    let need = per_node(job, want);
    let nodes = candidate_nodes(job, &facts.nodes);
    let kind = want.unwrap_or("GPU");
    let victims = preempt_list(&facts.qos, &job.qos);
    let mut free_on = Vec::new();
    let mut soonest: Option<(i64, String, &str, Vec<String>)> = None;
    for n in nodes.iter().take(NODES_SHOWN) {
        let u = node_use(n, job, facts);
        if u.usable && u.total.saturating_sub(u.used) >= need {
            free_on.push(n.name.clone());
        }
        let preemptable = |h: &Job| victims.iter().any(|v| v.eq_ignore_ascii_case(&h.qos));
        let mut said: Vec<String> = u
            .holders
            .iter()
            .map(|h| {
                format!(
                    "{} job {} ({}, {}{}){}",
                    h.qos,
                    h.id,
                    h.user,
                    gpu_words(&[(want.map(str::to_owned), per_node(h, want))]),
                    match (&facts.running_on_nodes, &h.end) {
                        (Some(_), Some(end)) => format!(", ends by {end}"),
                        (Some(_), None) => ", no end set".to_owned(),
                        (None, _) => String::new(),
                    },
                    if preemptable(h) {
                        ", which it may preempt"
                    } else {
                        ""
                    }
                )
            })
            .collect();
        if u.unseen > 0 {
            said.push(format!(
                "{} by {}",
                u.unseen,
                if facts.running_on_nodes.is_some() && facts.jobs_private {
                    "jobs Slurm does not show you (PrivateData=jobs)"
                } else if said.is_empty() {
                    "jobs of other QOS"
                } else {
                    "other jobs"
                }
            ));
        }
        let mps = alloc_mps(&n.alloc_tres);
        details.push(format!(
            "{}{}{}: {} {kind}, {} in use{}{}{}",
            n.name,
            if n.state.is_empty() {
                String::new()
            } else {
                format!(" ({})", n.state)
            },
            if planned(job, n) {
                ", where Slurm plans it"
            } else {
                ""
            },
            u.total,
            u.used,
            if said.is_empty() {
                String::new()
            } else {
                format!(": {}", said.join("; "))
            },
            if mps > 0 {
                format!("; MPS shares hold {mps} units")
            } else {
                String::new()
            },
            if u.usable {
                ""
            } else {
                "; it takes no new job in this state"
            },
        ));
        // Only where every job there was read, on a node that takes jobs.
        let enough = (facts.running_on_nodes.is_some() && u.usable)
            .then(|| u.enough_by(need, want))
            .flatten();
        if let Some((at, end, ids)) = enough {
            if soonest.as_ref().is_none_or(|(t, ..)| at < *t) {
                soonest = Some((at, end, &n.name, ids));
            }
        }
    }
    if nodes.len() > NODES_SHOWN {
        details.push(format!(
            "and {} more nodes of partition {} with {kind}s",
            nodes.len() - NODES_SHOWN,
            job.partition
        ));
    }
    let estimate = match &job.start {
        Some(s) => format!("Slurm's estimate: {s}"),
        None => "Slurm gives no estimate yet".to_owned(),
    };
    if !free_on.is_empty() {
        details.push(format!(
            "the {kind}s it needs are free now on {}: it waits there for the rest of what it \
             asks for (CPUs, memory, more nodes; scontrol show node {} shows what is allocated) \
             ({estimate})",
            free_on.join(", "),
            free_on[0]
        ));
    } else if facts.running_on_nodes.is_some() {
        details.push(match soonest {
            Some((_, end, node, ids)) => format!(
                "enough {kind}s free up first on {node} by {end}, when job{} {} end{} by {} \
                 time limit, if nothing else starts there first ({estimate})",
                if ids.len() == 1 { "" } else { "s" },
                ids.join(", "),
                if ids.len() == 1 { "s" } else { "" },
                if ids.len() == 1 { "its" } else { "their" },
            ),
            None => format!(
                "when enough {kind}s free up is not known: it rests on jobs without an end or \
                 that Slurm does not show you ({estimate})"
            ),
        });
    }
    free_on
}

/// What node `n` holds of the job's GPU type, and by which jobs.
fn node_use<'a>(n: &'a NodeInfo, job: &Job, facts: &'a Facts) -> NodeUse<'a> {
    let want = job.gpu_type();
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
    // Every job Slurm shows there where they were read; else what is known
    // of two disjoint reads: the QOS it may preempt, its group's.
    let mut holders: Vec<&Job> = match &facts.running_on_nodes {
        Some(all) => all
            .iter()
            .filter(on_node)
            .filter(|j| per_node(j, want) > 0)
            .collect(),
        None => facts
            .preemptable
            .iter()
            .chain(&facts.group_running)
            .filter(on_node)
            .collect(),
    };
    holders.sort_by_key(|h| h.end.as_deref().and_then(stamp_seconds).unwrap_or(i64::MAX));
    let known: u64 = holders.iter().map(|h| per_node(h, want)).sum();
    let state = n.state.to_ascii_uppercase();
    let usable = !["DOWN", "DRAIN", "FAIL", "MAINT", "RESERVED", "POWERED_DOWN"]
        .iter()
        .any(|w| state.contains(w));
    NodeUse {
        total,
        used,
        holders,
        unseen: used.saturating_sub(known),
        usable,
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
