//! What `gpu-qos usage` reads: the caller's QOS, their groups' jobs (one
//! `squeue -u` per user with jobs there, see [`jobs::group`]), the typed
//! limits above them, and with `--explain` each of their pending jobs as
//! `gpu-qos why` reads it.

use super::accounts::{account_uses, partition_uses};
use crate::qos::site::Unread;
use crate::qos::slurm::{jobs, qos, Query, ReadError, SlurmRead};
use crate::qos::usage::{self, UsageReport};

/// What a failed read of the caller's associations leaves out.
const USER_QOS_SOURCE: &str =
    "sacctmgr show assoc (the QOS you may use; shown: those you have jobs in)";

/// The QOS slurmctld lists `user` in (by name, or by uid on 22.05) with
/// jobs pending or running.
fn qos_with_jobs_of(read: &dyn SlurmRead, user: &str) -> Vec<String> {
    jobs::users_by_qos(read, user)
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, users)| users.as_ref().is_some_and(|u| u.iter().any(|n| n == user)))
        .map(|(qos, _)| qos)
        .collect()
}

/// At most this many pending jobs are explained by `usage --explain`.
pub const EXPLAINED_JOBS: usize = 20;

/// The caller's report, only of the QOS `only` where given.
pub fn report(
    read: &dyn SlurmRead,
    only: Option<&str>,
    explain: bool,
) -> Result<UsageReport, ReadError> {
    // The name of the uid that runs this, not $USER, which anyone sets.
    let user = read.read(&Query::user_name())?.trim().to_owned();
    // slurmdbd's two answers (`sacctmgr`, the slowest reads where nothing
    // is kept) read beside each other and slurmctld's.
    read.prefetch(&[qos::audit(), qos::of_user(&user)]);
    let mut unread = Vec::new();
    let all_qos = super::users_qos(read, &mut unread)?;
    let user_qos = match read.read(&qos::of_user(&user)) {
        Ok(assoc) => usage::parse_assoc_qos(&assoc),
        // Without slurmdbd: the QOS slurmctld counts jobs of theirs in.
        Err(e) => {
            unread.push(e.unread(USER_QOS_SOURCE));
            qos_with_jobs_of(read, &user)
        }
    };
    let (jobs, u) = jobs::group(read, &user, &usage::covered_qos(&all_qos, &user_qos, only))?;
    unread.extend(u);
    let rows: Vec<usage::JobRow> = jobs.iter().map(jobs::Job::row).collect();
    let mut report = usage::usage(&user, &user_qos, &all_qos, &rows, only);
    if only.is_none() {
        (report.own, report.accounts) = account_uses(read, &user, &mut unread);
        report.partitions = partition_uses(read, &all_qos, &mut unread);
    }
    if explain {
        // The caller's own pending jobs, whatever their QOS (slurmctld
        // packs only this user's).
        let (pending, _) = jobs::read(read, &jobs::pending_of(&user))?;
        for job in pending.iter().take(EXPLAINED_JOBS) {
            match super::why::report(read, &job.id) {
                Ok(r) => report.explained.push(r),
                // Gone between the two reads: nothing to explain.
                Err(e) => unread.push(e.unread(&format!("gpu-qos why {}", job.id))),
            }
        }
        if pending.len() > EXPLAINED_JOBS {
            unread.push(Unread {
                source: "gpu-qos usage --explain".to_owned(),
                reason: format!(
                    "{} more pending jobs not explained: gpu-qos why JOBID",
                    pending.len() - EXPLAINED_JOBS
                ),
            });
        }
    }
    let shown: Vec<&str> = report.qos.iter().map(|q| q.qos.as_str()).collect();
    unread.extend(super::qos_list_note(read, &shown));
    report.unread = unread;
    Ok(report)
}
