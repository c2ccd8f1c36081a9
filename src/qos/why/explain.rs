//! The decision: which wait the job is in, the one-line answer, and
//! which details and commands go with it.

use crate::qos::slurm::jobs::Job;
use crate::shared::calendar::stamp_seconds;
use crate::shared::syntax::hostlist_contains;

use super::facts::{Facts, Preempting};
use super::nodes::{node_details, node_names};
use super::priority::priority_details;
use super::reasons::{account_limit_words, other_reason, requeue_details};
use super::report::{report, WhyReport};
use super::words::{ends_by, grace_words};

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
            let free_on = node_details(&job, &facts, &mut details);
            see.push(format!("squeue -j {id} --start"));
            see.push(format!(
                "sinfo -p {} -O NodeList,Gres,GresUsed",
                job.partition
            ));
            if free_on.is_empty() {
                format!("{head} waits for free GPUs: no node it may run on has enough free now")
            } else {
                format!(
                    "{head} waits for resources other than GPUs: {} {} the {} it needs free",
                    free_on.join(", "),
                    if free_on.len() == 1 { "has" } else { "have" },
                    job.gpu_words()
                )
            }
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

#[cfg(test)]
mod tests;
