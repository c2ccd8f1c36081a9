//! `gpu-qos why JOB`: one pending job explained in words and numbers.
//!
//! What it reads, all of it what any user may read, in a number of calls
//! that does not grow with the site's jobs: the job (`squeue -j`, one job
//! packed), its priority factors and the site's weights (`sprio -j`,
//! `sprio -w`), its association's fair share (`sshare -A -u`, filtered by
//! slurmctld),
//! `PriorityMaxAge` and `PriorityDecayHalfLife` (`scontrol show config`),
//! for a job behind others the QOS and GPUs of the partition's pending
//! jobs (`squeue -p -t PENDING`, one call),
//! and, for a job its QOS may preempt others for, the running jobs of the
//! QOS it may preempt (the users `scontrol show assoc_mgr` names, then
//! `squeue -u` each, as `gpu-qos usage` reads a group).
//!
//! Each of these reads is a query of [`super::slurm`], where its
//! arguments and its parser live; what is read for which job is decided
//! in [`super::gather`].
//!
//! What a preempted job's end means: when a job's QOS preempts another, the
//! victim gets `PreemptTime` (when it was signalled) and an `EndTime` of
//! `PreemptTime` plus its QOS's `GraceTime` (seen on 22.05, 24.11 and
//! 26.05); the waiting job can start once the victims on the nodes Slurm
//! chose for it (`SchedNodes`) are gone.

use serde::{Deserialize, Serialize};

use super::explain::relative_costs;
use super::gres::{gpu_words, gpus_of_tres, gpus_of_type, held_words, AccountUse};
use super::site::{partition_gpu_types, AuditQos, NodeInfo, PartitionInfo, Unread};
pub use super::slurm::jobs::Job;
pub use super::slurm::priority::{Factors, Ranked};
pub use super::slurm::runs::Run;
pub use super::slurm::shares::ShareRow;
use crate::shared::calendar::{add_seconds, stamp_seconds};
use crate::shared::syntax::hostlist_contains;

impl Job {
    fn gpu_words(&self) -> String {
        gpu_words(&self.gpus)
    }

    /// The GPU type it asks for (its first typed request); `None` for an
    /// untyped request, which any GPU serves.
    fn gpu_type(&self) -> Option<&str> {
        self.gpus.iter().find_map(|(t, _)| t.as_deref())
    }
}

impl Factors {
    /// The factors that add to a priority, with their names.
    fn named(&self) -> [(&'static str, f64); 6] {
        [
            ("QOS", self.qos),
            ("fair share", self.fairshare),
            ("age", self.age),
            ("job size", self.jobsize),
            ("partition", self.partition),
            ("association", self.assoc),
        ]
    }
}

/// A running job being preempted for the pending one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Preempting {
    pub job: Job,
    /// Its QOS's grace time, seconds.
    pub grace_s: Option<u64>,
}

/// What `gpu-qos why --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhyReport {
    pub job: Job,
    /// The one-line answer.
    pub summary: String,
    /// What follows it, line by line.
    pub details: Vec<String>,
    /// Commands that show more.
    pub see: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factors: Option<Factors>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<Factors>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fair_share: Vec<ShareRow>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preempting: Vec<Preempting>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<Unread>,
}

/// Everything [`explain`] works from.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// This job's factors and the site's weights (`sprio`).
    pub factors: Option<Factors>,
    pub weights: Option<Factors>,
    /// The job's account and association (`sshare`).
    pub shares: Vec<ShareRow>,
    /// Running jobs of the QOS the job's QOS may preempt.
    pub preemptable: Vec<Job>,
    /// Every QOS (for `Preempt` lists and grace times).
    pub qos: Vec<AuditQos>,
    /// The pending jobs of the job's partition with their factors.
    pub ranked: Vec<Ranked>,
    /// The same jobs as `squeue` shows them (their QOS and GPUs).
    pub pending: Vec<Job>,
    /// `PriorityMaxAge`, `PriorityDecayHalfLife` as Slurm prints them.
    pub max_age: Option<String>,
    pub half_life: Option<String>,
    /// For a group-limit wait: `gpu-qos usage`'s sentence for the job.
    pub group_words: Option<String>,
    /// Earlier runs of a requeued job (`sacct -D`).
    pub runs: Vec<Run>,
    /// `JobFileAppend` (`scontrol show config`): whether a requeued job's
    /// output file is appended to (else each run truncates it, unless the
    /// job was submitted with `--open-mode=append`).
    pub file_append: Option<bool>,
    /// The cluster's nodes (`scontrol show node -o`): those of the job's
    /// partition with its GPU type are the ones that could run it.
    pub nodes: Vec<NodeInfo>,
    /// The job's partition (`scontrol show partition`): its billing weights.
    pub partition: Option<PartitionInfo>,
    /// Running jobs of the job's own group QOS (whose GPUs free up for it).
    pub group_running: Vec<Job>,
    /// For an account-limit wait: the typed GPU limits of the job's account
    /// and its parents, with what every job under each holds.
    pub account_limits: Vec<AccountUse>,
}

/// At most this many nodes are described one by one.
const NODES_SHOWN: usize = 6;

fn whole(x: f64) -> String {
    format!("{x:.0}")
}

fn grace_words(s: u64) -> String {
    match s {
        s if s >= 3600 && s % 3600 == 0 => format!("{} h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// When a signalled job ends at the latest: its grace time after it was
/// signalled, or its own end where that comes first (Slurm sets it so
/// where the job had an end; a job without a time limit has none).
fn ends_by(p: &Preempting) -> Option<String> {
    let by_grace = p
        .job
        .preempt_time
        .as_deref()
        .zip(p.grace_s)
        .and_then(|(at, g)| add_seconds(at, g));
    match (by_grace, p.job.end.clone()) {
        (Some(g), Some(e)) => Some(if stamp_seconds(&e) < stamp_seconds(&g) {
            e
        } else {
            g
        }),
        (g, e) => g.or(e),
    }
}

/// The QOS `qos` may preempt (its `Preempt` list).
pub fn preempt_list(all: &[AuditQos], qos: &str) -> Vec<String> {
    all.iter()
        .find(|q| q.name().eq_ignore_ascii_case(qos))
        .map(|q| q.record.preempt.clone())
        .unwrap_or_default()
}

/// The explanation of `job` from `facts`.
pub fn explain(job: Job, facts: Facts) -> WhyReport {
    let id = job.id.clone();
    let mut details = Vec::new();
    let mut see = Vec::new();
    let head = format!(
        "job {id} ({}, QOS {}, {}, partition {})",
        job.user,
        job.qos,
        job.gpu_words(),
        job.partition
    );
    if job.state != "PD" {
        let summary = format!("{head} is not pending (state {})", job.state);
        return report(job, summary, details, see, facts, Vec::new());
    }
    // Victims of preemption for it: signalled jobs of a QOS it may preempt,
    // on the nodes Slurm chose for it (anywhere when it has not chosen).
    let preempting: Vec<Preempting> = facts
        .preemptable
        .iter()
        .filter(|v| v.preempt_time.is_some())
        .filter(|v| match (&job.sched_nodes, &v.nodes) {
            (Some(planned), Some(held)) => node_names(held)
                .iter()
                .any(|n| hostlist_contains(planned, n)),
            _ => true,
        })
        .map(|v| Preempting {
            job: v.clone(),
            grace_s: facts
                .qos
                .iter()
                .find(|q| q.name().eq_ignore_ascii_case(&v.qos))
                .and_then(|q| q.grace_time),
        })
        .collect();
    let summary = match job.reason.as_str() {
        "Resources" | "Priority" | "None" if !preempting.is_empty() => {
            let ends: Vec<Option<String>> = preempting.iter().map(ends_by).collect();
            // All of them must be gone; one without a known end leaves it open.
            let last_end = if ends.iter().all(Option::is_some) {
                ends.iter()
                    .flatten()
                    .max_by_key(|e| stamp_seconds(e))
                    .cloned()
            } else {
                None
            };
            for (p, end) in preempting.iter().zip(&ends) {
                details.push(format!(
                    "{} job {} ({}, {}) on {} was signalled at {}{}: it ends by {}",
                    p.job.qos,
                    p.job.id,
                    p.job.user,
                    p.job.gpu_words(),
                    p.job.nodes.as_deref().unwrap_or("?"),
                    p.job.preempt_time.as_deref().unwrap_or("?"),
                    p.grace_s
                        .map(|g| format!("; {}'s GraceTime is {}", p.job.qos, grace_words(g)))
                        .unwrap_or_default(),
                    end.as_deref().unwrap_or("its grace time's end"),
                ));
            }
            see.push(format!("squeue -j {id} --start"));
            format!(
                "{head} waits for {} preempted job{} to end: it should start by {}",
                preempting.len(),
                if preempting.len() == 1 { "" } else { "s" },
                last_end.as_deref().unwrap_or("the end of their grace time"),
            )
        }
        "Resources" => {
            let holders: Vec<&Job> = facts
                .preemptable
                .iter()
                .filter(|v| match (&job.sched_nodes, &v.nodes) {
                    (Some(planned), Some(held)) => node_names(held)
                        .iter()
                        .any(|n| hostlist_contains(planned, n)),
                    _ => false,
                })
                .collect();
            if let Some(nodes) = &job.sched_nodes {
                details.push(format!(
                    "Slurm plans it on {nodes}{}",
                    job.start
                        .as_deref()
                        .map(|s| format!(", expected to start by {s} (an estimate)"))
                        .unwrap_or_default()
                ));
            }
            for h in holders {
                details.push(format!(
                    "{} job {} ({}, {}) there may be preempted for it",
                    h.qos,
                    h.id,
                    h.user,
                    h.gpu_words()
                ));
            }
            node_details(&job, &facts, &mut details);
            see.push(format!("squeue -j {id} --start"));
            see.push(format!(
                "sinfo -p {} -O NodeList,Gres,GresUsed",
                job.partition
            ));
            format!("{head} waits for free GPUs: no node it may run on has enough free now")
        }
        "Priority" => {
            priority_details(&facts, &job, &mut details);
            see.push(format!("sprio -l -j {id}"));
            see.push(format!("sshare -l -A {} -u {}", job.account, job.user));
            format!("{head} waits behind pending jobs of higher priority")
        }
        "AssocGrpGRES" | "AssocGrpTRES" if !facts.account_limits.is_empty() => {
            see.push("gpu-qos usage".to_owned());
            format!(
                "{head} {}",
                account_limit_words(&job, &facts.account_limits)
            )
        }
        "QOSGrpGRES" | "QOSGrpTRES" => {
            see.push(format!("gpu-qos usage --qos {}", job.qos));
            format!(
                "{head} waits for its group's GPU limit: {}",
                facts
                    .group_words
                    .clone()
                    .unwrap_or_else(|| format!("{}'s GrpTRES is reached", job.qos))
            )
        }
        other => {
            let (words, command) = other_reason(other, &job);
            see.extend(command);
            format!("{head} {words}")
        }
    };
    if matches!(job.reason.as_str(), "Resources" | "Priority") && details.is_empty() {
        priority_details(&facts, &job, &mut details);
    }
    if job.restarts > 0 {
        requeue_details(&job, &facts, &mut details);
        see.push(format!(
            "sacct -D -X -j {id} -o JobID,State,Start,End,NodeList"
        ));
    }
    report(job, summary, details, see, facts, preempting)
}

fn report(
    job: Job,
    summary: String,
    details: Vec<String>,
    see: Vec<String>,
    facts: Facts,
    preempting: Vec<Preempting>,
) -> WhyReport {
    WhyReport {
        job,
        summary,
        details,
        see,
        factors: facts.factors,
        weights: facts.weights,
        fair_share: facts.shares,
        preempting,
        unread: Vec::new(),
    }
}

/// Every node a Slurm host list names (`gpu[01-02],x` → gpu01, gpu02, x);
/// a range it cannot read is kept as written.
fn node_names(list: &str) -> Vec<String> {
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
fn node_details(job: &Job, facts: &Facts, details: &mut Vec<String>) {
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
fn alloc_mps(tres: &str) -> u64 {
    tres.split(',')
        .filter_map(|e| e.split_once('='))
        .filter(|(k, _)| k.trim() == "gres/mps")
        .filter_map(|(_, v)| v.trim().parse::<u64>().ok())
        .sum()
}

/// The pending jobs of `job`'s partition of higher priority than its own
/// (none while its own factors are unknown).
pub fn jobs_ahead<'a>(facts: &'a Facts, job: &Job) -> Vec<&'a Ranked> {
    let Some(f) = &facts.factors else {
        return Vec::new();
    };
    facts
        .ranked
        .iter()
        .filter(|r| r.job != job.id && r.factors.priority > f.priority)
        .filter(|r| r.partition == job.partition)
        .collect()
}

/// The priority in its factors, which one holds it back, and the fair share.
fn priority_details(facts: &Facts, job: &Job, details: &mut Vec<String>) {
    let (Some(f), Some(w)) = (&facts.factors, &facts.weights) else {
        return;
    };
    let parts: Vec<String> = f
        .named()
        .iter()
        .zip(w.named())
        .filter(|(_, (_, weight))| *weight > 0.0)
        .map(|((name, got), (_, weight))| format!("{name} {} of {}", whole(*got), whole(weight)))
        .collect();
    details.push(format!(
        "its priority is {} = {} (sprio)",
        whole(f.priority),
        parts.join(" + ")
    ));
    let ahead = jobs_ahead(facts, job);
    if !ahead.is_empty() {
        let who = tally(ahead.iter().map(|r| r.user.as_str()));
        details.push(format!(
            "{} pending job{} of partition {} {} ahead of it (by user: {})",
            ahead.len(),
            if ahead.len() == 1 { "" } else { "s" },
            job.partition,
            if ahead.len() == 1 { "is" } else { "are" },
            who.join(", ")
        ));
        ahead_by_kind(job, &ahead, &facts.pending, details);
        // The factor in which the jobs ahead lead it most, on average.
        let n = ahead.len() as f64;
        let lead = f
            .named()
            .iter()
            .enumerate()
            .map(|(i, (name, mine))| {
                let theirs = ahead.iter().map(|r| r.factors.named()[i].1).sum::<f64>() / n;
                (*name, theirs, *mine)
            })
            .max_by(|a, b| (a.1 - a.2).total_cmp(&(b.1 - b.2)));
        if let Some((name, theirs, mine)) = lead.filter(|(_, t, m)| t - m >= 1.0) {
            details.push(format!(
                "{name} puts them ahead: {} on average against its {}{}",
                whole(theirs),
                whole(mine),
                factor_hint(name, facts)
            ));
            return shares_details(facts, details);
        }
    }
    // The factor with the most left out of what its weight could give.
    let lost = f
        .named()
        .iter()
        .zip(w.named())
        .filter(|(_, (_, weight))| *weight > 0.0)
        .map(|((name, got), (_, weight))| (*name, weight - got))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    if let Some((name, missing)) = lost.filter(|(_, m)| *m >= 1.0) {
        details.push(format!(
            "{name} holds it back most: {} below its weight{}",
            whole(missing),
            factor_hint(name, facts)
        ));
    }
    shares_details(facts, details);
}

/// `name count` for each name, in the order they first come.
fn tally<'a>(names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for name in names {
        match counts.iter_mut().find(|(n, _)| *n == name) {
            Some((_, c)) => *c += 1,
            None => counts.push((name, 1)),
        }
    }
    counts.iter().map(|(n, c)| format!("{n} {c}")).collect()
}

/// Of the jobs ahead that `squeue` shows (all of them, unless the site's
/// `PrivateData` hides other users' jobs), how many ask for GPUs of the
/// waiting job's type, and their QOS.
fn ahead_by_kind(job: &Job, ahead: &[&Ranked], pending: &[Job], details: &mut Vec<String>) {
    let seen: Vec<&Job> = ahead
        .iter()
        .filter_map(|r| pending.iter().find(|p| p.id == r.job))
        .collect();
    if seen.is_empty() || job.gpus.is_empty() {
        return;
    }
    let gpu_type = job.gpu_type();
    let rivals: Vec<&Job> = seen
        .iter()
        .copied()
        .filter(|p| gpus_of_type(&p.gpus, gpu_type) > 0)
        .collect();
    let mut qos: Vec<&str> = rivals.iter().map(|p| p.qos.as_str()).collect();
    qos.sort_unstable();
    let what = gpu_type.map_or_else(|| "GPUs".to_owned(), |t| format!("{t} GPUs"));
    let of = if seen.len() == ahead.len() {
        "of them".to_owned()
    } else {
        format!("of the {} you may see", seen.len())
    };
    let line = if rivals.is_empty() {
        format!("{of}, none asks for {what}")
    } else {
        format!(
            "{of}, {} ask{} for {what} as this job does (by QOS: {})",
            rivals.len(),
            if rivals.len() == 1 { "s" } else { "" },
            tally(qos.into_iter()).join(", ")
        )
    };
    details.push(line);
}

/// What a factor depends on, in a few words.
fn factor_hint(name: &str, facts: &Facts) -> String {
    match name {
        "fair share" => {
            " (recent usage against shares, of the account and the user: see below)".to_owned()
        }
        "age" => format!(
            " (a job's age factor grows while it waits, to its weight after PriorityMaxAge{})",
            facts
                .max_age
                .as_deref()
                .map(|a| format!(" = {a}"))
                .unwrap_or_default()
        ),
        "QOS" => " (a group QOS of higher priority, where you have one, raises it)".to_owned(),
        "job size" => " (the site weighs job size: fewer or more GPUs change it)".to_owned(),
        _ => String::new(),
    }
}

/// The fair share of the account and the user, with GPU-hours by type
/// and what each type costs here.
fn shares_details(facts: &Facts, details: &mut Vec<String>) {
    shares_usage(facts, details);
    let Some(p) = &facts.partition else {
        return;
    };
    let types = partition_gpu_types(&facts.nodes, &p.name);
    if let Some(words) = relative_costs(p, &types) {
        details.push(format!(
            "fair share counts GPU time as partition {}'s TRESBillingWeights bill it: {words}",
            p.name
        ));
    }
}

fn shares_usage(facts: &Facts, details: &mut Vec<String>) {
    for s in &facts.shares {
        let who = match &s.user {
            Some(u) => format!("user {u} in account {}", s.account),
            None => format!("account {}", s.account),
        };
        let gpus: Vec<String> = s
            .tres_minutes
            .iter()
            .filter_map(|(k, v)| {
                let t = k.strip_prefix("gres/gpu:")?;
                (*v > 0.0).then(|| format!("{:.1} {t}-hours", v / 60.0))
            })
            .collect();
        details.push(format!(
            "{who}: fair-share factor {}, effective usage {:.4} against normalized shares {:.4}{}",
            s.fairshare
                .map_or_else(|| "-".to_owned(), |f| format!("{f:.4}")),
            s.effective_usage,
            s.norm_shares,
            if gpus.is_empty() {
                String::new()
            } else {
                format!(
                    "; used {} (decayed{})",
                    gpus.join(", "),
                    facts
                        .half_life
                        .as_deref()
                        .map(|h| format!(", half-life {h}"))
                        .unwrap_or_default()
                )
            }
        ));
    }
}

/// What a requeued job went through and what it means for its output.
fn requeue_details(job: &Job, facts: &Facts, details: &mut Vec<String>) {
    let n = job.restarts;
    let preemptors: Vec<&str> = facts
        .qos
        .iter()
        .filter(|q| {
            q.record
                .preempt
                .iter()
                .any(|p| p.eq_ignore_ascii_case(&job.qos))
        })
        .map(AuditQos::name)
        .collect();
    details.push(format!(
        "it was requeued {n} time{}{}",
        if n == 1 { "" } else { "s" },
        if preemptors.is_empty() {
            String::new()
        } else {
            format!(
                " (jobs of {} may preempt {} jobs)",
                preemptors.join(", "),
                job.qos
            )
        }
    ));
    for r in &facts.runs {
        details.push(format!(
            "ran {} to {}{}: {}",
            r.start.as_deref().unwrap_or("?"),
            r.end.as_deref().unwrap_or("?"),
            r.nodes
                .as_deref()
                .map(|n| format!(" on {n}"))
                .unwrap_or_default(),
            r.state
        ));
    }
    details.push(match facts.file_append {
        Some(true) => "each run appends to its output file (JobFileAppend=1): the earlier runs' \
                       output stays in it"
            .to_owned(),
        _ => "each run starts its output file anew, losing the earlier runs' output, unless the \
              job was submitted with --open-mode=append"
            .to_owned(),
    });
    let grace = facts
        .qos
        .iter()
        .find(|q| q.name().eq_ignore_ascii_case(&job.qos))
        .and_then(|q| q.grace_time)
        .filter(|g| *g > 0);
    details.push(format!(
        "a job that may be preempted should save its state when it gets SIGTERM{} and resume \
         from it when it starts again",
        grace
            .map(|g| format!(
                " (it then has {}'s GraceTime, {}, to do so)",
                job.qos,
                grace_words(g)
            ))
            .unwrap_or_default()
    ));
}

/// Which account's typed limit holds the job: the nearest whose limit of
/// the job's GPU type has no room for it (else the nearest with a limit of
/// that type, else the nearest with any).
fn account_limit_words(job: &Job, limits: &[AccountUse]) -> String {
    let ty = job.gpu_type();
    let asked = |t: &str| gpus_of_type(&job.gpus, Some(t));
    let of_type = |a: &&AccountUse| a.types.iter().any(|t| ty.is_none_or(|ty| t.gpu_type == ty));
    let full = limits.iter().find(|a| {
        a.types
            .iter()
            .any(|t| ty.is_none_or(|ty| t.gpu_type == ty) && t.held + asked(&t.gpu_type) > t.limit)
    });
    let Some(a) = full
        .or_else(|| limits.iter().find(of_type))
        .or(limits.first())
    else {
        return format!("waits for account {}'s GPU limit", job.account);
    };
    format!(
        "waits for account {}'s GPU limit: {} by the jobs of the account and its sub-accounts",
        a.account,
        held_words(&a.types)
    )
}

/// One sentence and the command that shows more, for the other reasons.
fn other_reason(reason: &str, job: &Job) -> (String, Option<String>) {
    let id = &job.id;
    let (words, cmd) = match reason {
        "QOSMaxGRESPerUser" | "QOSMaxTRESPerUser" => (
            format!(
                "waits because you hold as many GPUs under {} as it allows one user \
                 (MaxTRESPerUser): it starts when one of your jobs there ends",
                job.qos
            ),
            Some(format!("squeue --me -q {}", job.qos)),
        ),
        "AssocGrpGRES" | "AssocGrpTRES" | "AssocGrpGRESRunMinutes" | "AssocGrpTRESRunMinutes" => (
            format!(
                "waits for account {}'s own GPU limit (GrpTRES of the association)",
                job.account
            ),
            Some(format!(
                "sacctmgr show assoc account={} format=account,user,grptres,grptresrunmins",
                job.account
            )),
        ),
        "ReqNodeNotAvail" => (
            "waits because a node it needs is down, drained or reserved".to_owned(),
            Some("sinfo -R".to_owned()),
        ),
        "Reservation" => (
            "waits for its reservation to start".to_owned(),
            Some("scontrol show reservation".to_owned()),
        ),
        "BeginTime" => (
            "waits for the start time it was given (--begin)".to_owned(),
            Some(format!("squeue -j {id} -O StartTime")),
        ),
        "Dependency" => (
            "waits for the jobs it depends on".to_owned(),
            Some(format!("squeue -j {id} -O Dependency")),
        ),
        "DependencyNeverSatisfied" => (
            "can never start: a job it depends on ended the wrong way (scancel it)".to_owned(),
            Some(format!("squeue -j {id} -O Dependency")),
        ),
        "JobHeldUser" => (
            "is held by its user".to_owned(),
            Some(format!("scontrol release {id}")),
        ),
        "JobHeldAdmin" => ("is held by an administrator: ask them".to_owned(), None),
        "None" | "" => ("waits for the scheduler's next pass".to_owned(), None),
        other => (
            format!("waits: Slurm's reason is {other}"),
            Some("man squeue (JOB REASON CODES)".to_owned()),
        ),
    };
    (words, cmd)
}

/// The report as text: the summary, each detail, then the commands.
pub fn render(r: &WhyReport) -> String {
    let mut out = format!("{}\n", r.summary);
    for d in &r.details {
        out.push_str(&format!("  {d}\n"));
    }
    if !r.see.is_empty() {
        out.push_str(&format!("  more: {}\n", r.see.join("; ")));
    }
    for u in &r.unread {
        out.push_str(&format!("  (not read: {}: {})\n", u.source, u.reason));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qos::slurm::jobs::parse as parse_jobs;
    use crate::qos::slurm::priority::{parse_factors, parse_ranked};
    use crate::qos::slurm::runs::parse_runs;
    use crate::qos::slurm::shares::parse_shares;

    // Captured from a 22.05 test cluster: a qos_lafferty job pending while
    // lowprio job 1, signalled for preemption with GraceTime 120 s, ends.
    const PENDING: &str = "4|root|research|PD|qos_lafferty|gpu|10000|cpu=1,mem=16000M,node=1,billing=1,gres/gpu=2,gres/gpu:a40=2|Resources|2026-11-23T23:07:56|gpu01|N/A|NONE||0|\n";
    const VICTIMS: &str = "1|root|research|R|lowprio|gpu|1|cpu=1,node=1,billing=1,gres/gpu=4,gres/gpu:a40=4|None|2026-11-23T23:07:09|(null)|2026-11-23T23:07:24|2026-11-23T23:09:24|gpu01|0|\n\
        3|root|research|R|lowprio|gpu|1|cpu=1,node=1,billing=1,gres/gpu=4,gres/gpu:a40=4|None|2026-11-23T23:07:21|(null)|N/A|NONE|gpu02|0|\n";
    const SPRIO: &str = "4|gpu|root|10000|0|0|0|0|0|0|10000|0||\n";
    const WEIGHTS: &str = "Weights||||1|100|0|1000|0|0|10000||(null)|\n";
    const SSHARE: &str = "research||1|0.500000|6|0.000000||cpu=0,gres/gpu=0,gres/gpu:a40=0\n \
        research|root|1|1.000000|6|0.000000|0.250000|cpu=60,gres/gpu=1200,gres/gpu:a40=1200\n";

    fn qos(name: &str, preempt: &[&str], grace: Option<u64>) -> AuditQos {
        AuditQos {
            record: super::super::check::QosRecord {
                name: name.to_owned(),
                gpu_limits: Vec::new(),
                preempt: preempt.iter().map(|s| (*s).to_owned()).collect(),
            },
            preempt_mode: None,
            grace_time: grace,
            usage_factor: None,
            flags: Vec::new(),
            priority: None,
        }
    }

    fn one(text: &str) -> Job {
        let (jobs, unread) = parse_jobs(text);
        assert!(unread.is_empty(), "{unread:?}");
        jobs.into_iter().next().unwrap_or_else(|| panic!("no job"))
    }

    #[test]
    fn an_account_limit_wait_names_the_account_that_is_full() {
        use super::super::gres::{AccountUse, TypeUse};
        let mut job = one(PENDING);
        job.reason = "AssocGrpGRES".into();
        job.account = "lafferty_students".into();
        let limit = |account: &str, gpu_type: &str, limit, held| AccountUse {
            account: account.into(),
            types: vec![TypeUse {
                gpu_type: gpu_type.into(),
                limit,
                held,
            }],
        };
        let r = explain(
            job.clone(),
            Facts {
                // The nearest account has room; its parent has none.
                account_limits: vec![
                    limit("lafferty_students", "a40", 8, 2),
                    limit("lafferty", "a40", 4, 4),
                ],
                ..Facts::default()
            },
        );
        assert_eq!(
            r.summary,
            "job 4 (root, QOS qos_lafferty, 2 a40, partition gpu) waits for account \
             lafferty's GPU limit: 4 of 4 a40 held by the jobs of the account and its \
             sub-accounts"
        );
        assert!(r.see.contains(&"gpu-qos usage".to_owned()));
        // Nothing read: Slurm's own words for it.
        let r = explain(job, Facts::default());
        assert!(
            r.summary
                .contains("waits for account lafferty_students's own GPU limit"),
            "{}",
            r.summary
        );
    }

    #[test]
    fn a_job_behind_a_preempted_job_is_told_when_it_should_start() {
        let (preemptable, _) = parse_jobs(VICTIMS);
        let r = explain(
            one(PENDING),
            Facts {
                preemptable,
                qos: vec![
                    qos("qos_lafferty", &["lowprio"], None),
                    qos("lowprio", &[], Some(120)),
                ],
                ..Facts::default()
            },
        );
        assert_eq!(
            r.summary,
            "job 4 (root, QOS qos_lafferty, 2 a40, partition gpu) waits for 1 preempted job to \
             end: it should start by 2026-11-23T23:09:24"
        );
        assert_eq!(
            r.details,
            vec![
                "lowprio job 1 (root, 4 a40) on gpu01 was signalled at 2026-11-23T23:07:24; \
                 lowprio's GraceTime is 2 min: it ends by 2026-11-23T23:09:24"
            ]
        );
        // The job on gpu02, not signalled, is not waited for.
        assert_eq!(r.preempting.len(), 1);
    }

    #[test]
    fn a_resources_wait_names_the_planned_node_and_what_may_be_preempted_there() {
        let (mut preemptable, _) = parse_jobs(VICTIMS);
        for v in &mut preemptable {
            v.preempt_time = None;
        }
        let r = explain(
            one(PENDING),
            Facts {
                preemptable,
                ..Facts::default()
            },
        );
        assert!(
            r.summary
                .ends_with("waits for free GPUs: no node it may run on has enough free now"),
            "{}",
            r.summary
        );
        assert_eq!(
            r.details,
            vec![
                "Slurm plans it on gpu01, expected to start by 2026-11-23T23:07:56 (an estimate)",
                "lowprio job 1 (root, 4 a40) there may be preempted for it",
            ]
        );
    }

    #[test]
    fn a_resources_wait_describes_each_node_that_could_run_it_and_its_holders() {
        let (mut preemptable, _) = parse_jobs(VICTIMS);
        for v in &mut preemptable {
            v.preempt_time = None;
        }
        let (group_running, _) = parse_jobs(
            "7|alice|research|R|qos_lafferty|gpu|10000|cpu=1,node=1,billing=1,gres/gpu=2,gres/gpu:a40=2|None|2026-11-23T23:00:00|(null)|N/A|NONE|gpu03|0|\n",
        );
        let (nodes, unread) = crate::qos::site::parse_nodes(
            "NodeName=gpu02 Gres=gpu:a40:4,mps:400 State=MIXED AllocTRES=cpu=2,gres/gpu=4,gres/gpu:a40=4,gres/mps=50 Partitions=gpu\n\
             NodeName=gpu01 Gres=gpu:a40:4 State=ALLOCATED AllocTRES=cpu=1,gres/gpu=4 Partitions=gpu\n\
             NodeName=gpu03 Gres=gpu:a40:4 State=MIXED+DRAIN AllocTRES=cpu=2,gres/gpu:a40=3 Partitions=gpu\n\
             NodeName=gpu04 Gres=gpu:h100:2 State=IDLE Partitions=gpu\n\
             NodeName=cpu01 State=IDLE Partitions=cpu\n",
        );
        assert!(unread.is_empty(), "{unread:?}");
        let r = explain(
            one(PENDING),
            Facts {
                qos: vec![
                    qos("qos_lafferty", &["lowprio"], None),
                    qos("lowprio", &[], Some(120)),
                ],
                preemptable,
                group_running,
                nodes,
                ..Facts::default()
            },
        );
        assert_eq!(
            r.details,
            vec![
                "Slurm plans it on gpu01, expected to start by 2026-11-23T23:07:56 (an estimate)",
                "lowprio job 1 (root, 4 a40) there may be preempted for it",
                // Planned first; a node that tracks only gres/gpu counts
                // it for its one type.
                "gpu01 (ALLOCATED), where Slurm plans it: 4 a40, 4 in use: lowprio job 1 (root, 4 a40), which it may preempt",
                "gpu02 (MIXED): 4 a40, 4 in use: lowprio job 3 (root, 4 a40), which it may preempt; MPS shares hold 50 units",
                "gpu03 (MIXED+DRAIN): 4 a40, 3 in use: qos_lafferty job 7 (alice, 2 a40); 1 by other jobs; it takes no new job in this state",
            ]
        );
    }

    #[test]
    fn fair_share_usage_comes_with_what_each_gpu_type_costs() {
        let mut job = one(PENDING);
        job.reason = "Priority".into();
        let (nodes, _) = crate::qos::site::parse_nodes(
            "NodeName=a Gres=gpu:a40:4 Partitions=gpu\nNodeName=b Gres=gpu:h100:4 Partitions=gpu\n",
        );
        let (partitions, _) = crate::qos::site::parse_partitions(
            "PartitionName=gpu Nodes=a,b TRESBillingWeights=CPU=1,GRES/gpu=1,GRES/gpu:h100=1.5\n",
        );
        let r = explain(
            job,
            Facts {
                factors: Some(parse_factors(SPRIO)[0].1.clone()),
                weights: Some(parse_factors(WEIGHTS)[0].1.clone()),
                shares: parse_shares(SSHARE),
                nodes,
                partition: partitions.into_iter().next(),
                ..Facts::default()
            },
        );
        assert_eq!(
            r.details.last().map(String::as_str),
            Some("fair share counts GPU time as partition gpu's TRESBillingWeights bill it: an h100-hour counts 2.5 a40-hours")
        );
    }

    #[test]
    fn a_priority_wait_names_the_factor_that_holds_it_back_and_the_usage() {
        let mut job = one(PENDING);
        job.reason = "Priority".into();
        let factors = parse_factors(SPRIO);
        let weights = parse_factors(WEIGHTS);
        assert_eq!(weights[0].0, "Weights");
        assert_eq!(
            (weights[0].1.age, weights[0].1.fairshare, weights[0].1.qos),
            (100.0, 1000.0, 10000.0)
        );
        let shares = parse_shares(SSHARE);
        assert_eq!(shares.len(), 2);
        assert_eq!(shares[1].user.as_deref(), Some("root"));
        assert_eq!(shares[0].fairshare, None);
        let r = explain(
            job,
            Facts {
                factors: Some(factors[0].1.clone()),
                weights: Some(weights[0].1.clone()),
                shares,
                half_life: Some("7-00:00:00".into()),
                ..Facts::default()
            },
        );
        assert!(
            r.summary
                .ends_with("waits behind pending jobs of higher priority"),
            "{}",
            r.summary
        );
        assert_eq!(r.details[0], "its priority is 10000 = QOS 10000 of 10000 + fair share 0 of 1000 + age 0 of 100 (sprio)");
        assert!(
            r.details[1].starts_with("fair share holds it back most: 1000 below its weight"),
            "{}",
            r.details[1]
        );
        assert_eq!(
            r.details[3],
            "user root in account research: fair-share factor 0.2500, effective usage 0.0000 \
             against normalized shares 1.0000; used 20.0 a40-hours (decayed, half-life 7-00:00:00)"
        );
        assert_eq!(
            r.see,
            vec!["sprio -l -j 4", "sshare -l -A research -u root"]
        );
    }

    #[test]
    fn a_job_behind_others_is_told_who_is_ahead_and_which_factor_puts_them_there() {
        let mut job = one(PENDING);
        job.reason = "Priority".into();
        job.priority = 1250;
        // Two ahead (bob's two, more fair share), one behind, another partition's.
        let ranked = parse_ranked(
            "7|gpu|bob|1900|0|50|0|850|0|0|1000|0||\n\
             8|gpu|bob|1700|0|40|0|660|0|0|1000|0||\n\
             4|gpu|root|1250|0|50|0|200|0|0|1000|0||\n\
             9|gpu|carol|1100|0|100|0|0|0|0|1000|0||\n\
             10|other|dave|9000|0|0|0|0|0|0|9000|0||\n",
        );
        assert_eq!(ranked.len(), 5);
        // As squeue shows them: bob's first asks for a40s, his second an h100.
        let (pending, unread) = parse_jobs(
            "7|bob|research|PD|normal|gpu|1900|cpu=1,gres/gpu=2,gres/gpu:a40=2|Priority|N/A|(null)|N/A|NONE||0|\n\
             8|bob|research|PD|qos_lafferty|gpu|1700|cpu=1,gres/gpu=1,gres/gpu:h100=1|Priority|N/A|(null)|N/A|NONE||0|\n\
             9|carol|research|PD|normal|gpu|1100|cpu=1,gres/gpu=2,gres/gpu:a40=2|Priority|N/A|(null)|N/A|NONE||0|\n",
        );
        assert!(unread.is_empty(), "{unread:?}");
        let weights = parse_factors(WEIGHTS);
        let facts = Facts {
            factors: Some(ranked[2].factors.clone()),
            weights: Some(weights[0].1.clone()),
            ranked,
            pending,
            ..Facts::default()
        };
        let r = explain(job.clone(), facts.clone());
        assert_eq!(
            r.details[1],
            "2 pending jobs of partition gpu are ahead of it (by user: bob 2)"
        );
        assert_eq!(
            r.details[2],
            "of them, 1 asks for a40 GPUs as this job does (by QOS: normal 1)"
        );
        assert_eq!(
            r.details[3],
            "fair share puts them ahead: 755 on average against its 200 (recent usage against \
             shares, of the account and the user: see below)"
        );
        // Where PrivateData hides some, the line says how many it saw; an
        // untyped job competes with any GPU job.
        let mut seen_one = facts.clone();
        seen_one.pending.retain(|p| p.id == "8");
        let r = explain(job.clone(), seen_one);
        assert_eq!(r.details[2], "of the 1 you may see, none asks for a40 GPUs");
        let mut untyped = job;
        untyped.gpus = vec![(None, 1)];
        let r = explain(untyped, facts);
        assert_eq!(
            r.details[2],
            "of them, 2 ask for GPUs as this job does (by QOS: normal 1, qos_lafferty 1)"
        );
    }

    #[test]
    fn other_reasons_get_a_sentence_and_a_command() {
        for (reason, words, cmd) in [
            (
                "QOSMaxGRESPerUser",
                "as many GPUs under qos_lafferty",
                Some("squeue --me -q qos_lafferty"),
            ),
            (
                "ReqNodeNotAvail",
                "down, drained or reserved",
                Some("sinfo -R"),
            ),
            (
                "JobHeldUser",
                "held by its user",
                Some("scontrol release 4"),
            ),
            (
                "Weird",
                "Slurm's reason is Weird",
                Some("man squeue (JOB REASON CODES)"),
            ),
        ] {
            let mut job = one(PENDING);
            job.reason = reason.into();
            let r = explain(job, Facts::default());
            assert!(r.summary.contains(words), "{reason}: {}", r.summary);
            assert_eq!(r.see.first().map(String::as_str), cmd, "{reason}");
        }
        let mut running = one(PENDING);
        running.state = "R".into();
        assert!(explain(running, Facts::default())
            .summary
            .ends_with("is not pending (state R)"));
    }

    #[test]
    fn a_victim_without_an_end_ends_by_its_grace_time() {
        let (mut preemptable, _) = parse_jobs(VICTIMS);
        preemptable[0].end = None;
        let facts = |grace| Facts {
            preemptable: preemptable.clone(),
            qos: vec![
                qos("qos_lafferty", &["lowprio"], None),
                qos("lowprio", &[], grace),
            ],
            ..Facts::default()
        };
        let r = explain(one(PENDING), facts(Some(60)));
        assert!(
            r.summary
                .ends_with("it should start by 2026-11-23T23:08:24"),
            "{}",
            r.summary
        );
        let r = explain(one(PENDING), facts(None));
        assert!(
            r.summary
                .ends_with("it should start by the end of their grace time"),
            "{}",
            r.summary
        );
    }

    #[test]
    fn a_requeued_job_is_told_its_runs_and_what_became_of_its_output() {
        let mut job = one(VICTIMS);
        job.state = "PD".into();
        job.reason = "BeginTime".into();
        job.restarts = 1;
        let runs = parse_runs(
            "1|PREEMPTED|2026-11-23T23:07:09|2026-11-23T23:09:24|gpu01\n\
             1|PENDING|Unknown|Unknown|None assigned\n",
        );
        assert_eq!(runs.len(), 1);
        let facts = Facts {
            runs,
            qos: vec![
                qos("qos_lafferty", &["lowprio"], None),
                qos("lowprio", &[], Some(120)),
            ],
            file_append: Some(false),
            ..Facts::default()
        };
        let r = explain(job, facts);
        assert_eq!(
            r.details,
            vec![
                "it was requeued 1 time (jobs of qos_lafferty may preempt lowprio jobs)",
                "ran 2026-11-23T23:07:09 to 2026-11-23T23:09:24 on gpu01: PREEMPTED",
                "each run starts its output file anew, losing the earlier runs' output, unless \
                 the job was submitted with --open-mode=append",
                "a job that may be preempted should save its state when it gets SIGTERM (it \
                 then has lowprio's GraceTime, 2 min, to do so) and resume from it when it \
                 starts again",
            ]
        );
        assert_eq!(
            r.see.last().map(String::as_str),
            Some("sacct -D -X -j 1 -o JobID,State,Start,End,NodeList")
        );
    }

    #[test]
    fn host_lists_expand_with_their_width() {
        assert_eq!(
            node_names("gpu[01-03,07],login"),
            vec!["gpu01", "gpu02", "gpu03", "gpu07", "login"]
        );
        assert_eq!(node_names("n[9-10]"), vec!["n9", "n10"]);
    }
}
