//! The other waits Slurm names: an account's GPU limit, a requeued
//! job's runs, and every other reason with a sentence and a command.

use crate::qos::gres::{gpus_of_type, held_words, AccountUse};
use crate::qos::policy::requeued_output_words;
use crate::qos::site::AuditQos;
use crate::qos::slurm::jobs::Job;

use super::facts::Facts;
use super::words::grace_words;

/// What a requeued job went through and what it means for its output.
pub(super) fn requeue_details(job: &Job, facts: &Facts, details: &mut Vec<String>) {
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
    details.push(requeued_output_words(
        facts.low_priority_qos.as_deref(),
        Some(&job.qos),
        facts.file_append == Some(true),
    ));
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
pub(super) fn account_limit_words(job: &Job, limits: &[AccountUse]) -> String {
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
pub(super) fn other_reason(reason: &str, job: &Job) -> (String, Option<String>) {
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
        // gpushare holds a job so too, after an update that took it past
        // its rule's GPU types or a per-type cap, with its words in the
        // job's AdminComment, which its user may read.
        "JobHeldAdmin" => (
            "is held by an administrator, or by gpushare after an update that took it past \
             its QOS's GPU types or a per-type cap (its AdminComment then starts with \
             \"gpushare: held:\", says why and which update releases it); else ask your \
             administrators"
                .to_owned(),
            Some(format!("scontrol show job {id}")),
        ),
        "None" | "" => ("waits for the scheduler's next pass".to_owned(), None),
        other => (
            format!("waits: Slurm's reason is {other}"),
            Some("man squeue (JOB REASON CODES)".to_owned()),
        ),
    };
    (words, cmd)
}

#[cfg(test)]
mod tests;
