//! Jobs as `squeue` shows them: one format ([`FIELDS`]) and one parser
//! for every squeue read, whatever it filters on (one job, a user, a
//! state, a partition).
//!
//! Slurm fills in every field read here (ids, names, states, times, TRES),
//! `|`-separated, so nothing a user names a job can shift them. What is
//! asked of slurmctld does not grow with the site's jobs where it can be
//! helped: squeue is asked for one user at a time, the one filter
//! slurmctld applies itself (naming several users, or filtering by QOS or
//! state, makes squeue load every job).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{assoc_mgr, Query, ReadError, SlurmRead};
use crate::qos::gres::{gpus_of_tres, gpus_of_type};
use crate::qos::site::Unread;

/// One job as `squeue` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRow {
    pub id: String,
    pub user: String,
    pub running: bool,
    pub qos: String,
    /// GPUs by type (`None`: untyped `gres/gpu` only), allocated or asked.
    pub gpus: Vec<(Option<String>, u64)>,
    /// Slurm's reason code (`QOSGrpGRES`, `Priority`, `None`).
    pub reason: String,
}

impl JobRow {
    /// GPUs of `gpu_type` in the job.
    pub fn gpus_of(&self, gpu_type: &str) -> u64 {
        gpus_of_type(&self.gpus, Some(gpu_type))
    }
}

/// The `squeue -O` fields [`parse`] reads, `|` after each. `tres-alloc`
/// is the allocation of a running job and the request of a pending one.
pub const FIELDS: &str = "JobID:|,UserName:|,Account:|,StateCompact:|,QOS:|,Partition:|,\
     PriorityLong:|,tres-alloc:|,Reason:|,StartTime:|,SchedNodes:|,PreemptTime:|,EndTime:|,\
     NodeList:|,RestartCnt:|";

fn squeue(filter: &[&str], key: &str) -> Query {
    let mut args = vec!["-h"];
    args.extend_from_slice(filter);
    args.extend_from_slice(&["-O", FIELDS]);
    Query::new("squeue", &args, key)
}

/// One job (slurmctld packs only that job).
pub fn one(job: &str) -> Query {
    squeue(&["-j", job], &format!("squeue-job-{job}"))
}

/// Every job of one user (by name or uid), pending or running, in every
/// partition (slurmctld packs only that user's jobs).
pub fn of_user(user: &str) -> Query {
    squeue(
        &["-u", user, "-a", "-t", "RUNNING,PENDING"],
        &format!("squeue-user-{user}"),
    )
}

/// Every job of the cluster, pending or running: where Slurm keeps no
/// per-user counts for a QOS.
pub fn every() -> Query {
    squeue(&["-a", "-t", "RUNNING,PENDING"], "squeue-all")
}

/// One user's running jobs (slurmctld packs only that user's jobs).
pub fn running_of(user: &str) -> Query {
    squeue(
        &["-u", user, "-t", "RUNNING"],
        &format!("squeue-running-user-{user}"),
    )
}

/// The running jobs on `nodes` (a host list): squeue reads every job of
/// the cluster for this (one call, answered under slurmctld's job lock).
pub fn running_on(nodes: &str) -> Query {
    squeue(
        &["-t", "RUNNING", "-w", nodes],
        &format!("squeue-running-nodes-{nodes}"),
    )
}

/// Every running job of the cluster.
pub fn running() -> Query {
    squeue(&["-t", "RUNNING"], "squeue-running")
}

/// The pending jobs of one partition (one call, whatever the queue).
pub fn pending_in(partition: &str) -> Query {
    squeue(
        &["-p", partition, "-t", "PENDING"],
        &format!("squeue-pending-partition-{partition}"),
    )
}

/// One user's pending jobs.
pub fn pending_of(user: &str) -> Query {
    squeue(
        &["-u", user, "-t", "PENDING"],
        &format!("squeue-pending-user-{user}"),
    )
}

/// Every pending job of the cluster, in every partition.
pub fn pending() -> Query {
    squeue(&["-a", "-t", "PENDING"], "squeue-pending")
}

/// A job as [`FIELDS`] shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: String,
    pub user: String,
    pub account: String,
    /// `PD`, `R`, ...
    pub state: String,
    pub qos: String,
    pub partition: String,
    pub priority: u64,
    /// GPUs by type (`None`: untyped only), allocated or asked.
    pub gpus: Vec<(Option<String>, u64)>,
    pub reason: String,
    /// Slurm's expected start of a pending job (`squeue --start`).
    pub start: Option<String>,
    /// The nodes Slurm plans a pending job on.
    pub sched_nodes: Option<String>,
    /// When a running job was signalled for preemption.
    pub preempt_time: Option<String>,
    pub end: Option<String>,
    pub nodes: Option<String>,
    /// How many times Slurm requeued it (preempted, node failure, by hand).
    #[serde(default)]
    pub restarts: u32,
    /// Its nodes, allocated or asked (`node=` of its TRES).
    #[serde(default)]
    pub node_count: Option<u64>,
}

impl Job {
    /// The job as `gpu-qos usage` counts it.
    pub fn row(&self) -> JobRow {
        JobRow {
            id: self.id.clone(),
            user: self.user.clone(),
            running: self.state == "R",
            qos: self.qos.clone(),
            gpus: self.gpus.clone(),
            reason: self.reason.clone(),
        }
    }
}

/// A time or node field: Slurm's words for "none" become `None`.
pub fn given(field: &str) -> Option<String> {
    match field {
        "" | "N/A" | "NONE" | "None" | "(null)" | "Unknown" => None,
        f => Some(f.to_owned()),
    }
}

/// The `node=N` of a TRES list.
fn tres_nodes(tres: &str) -> Option<u64> {
    tres.split(',')
        .find_map(|e| e.strip_prefix("node="))
        .and_then(|n| n.parse().ok())
        .filter(|n| *n > 0)
}

/// Reads `squeue` run with [`FIELDS`].
pub fn parse(text: &str) -> (Vec<Job>, Vec<Unread>) {
    let mut jobs = Vec::new();
    let mut unread = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = raw.split('|').map(str::trim).collect();
        match f[..] {
            [id, user, account, state, qos, partition, priority, tres, reason, start, sched, preempt, end, nodes, restarts, ""]
                if !id.is_empty() =>
            {
                jobs.push(Job {
                    id: id.to_owned(),
                    user: user.to_owned(),
                    account: account.to_owned(),
                    state: state.to_owned(),
                    qos: qos.to_owned(),
                    partition: partition.to_owned(),
                    priority: priority.parse().unwrap_or(0),
                    gpus: gpus_of_tres(tres),
                    reason: reason.to_owned(),
                    start: given(start),
                    sched_nodes: given(sched),
                    preempt_time: given(preempt),
                    end: given(end),
                    nodes: given(nodes),
                    restarts: restarts.parse().unwrap_or(0),
                    node_count: tres_nodes(tres),
                })
            }
            _ => unread.push(Unread {
                source: format!("squeue line {}", i + 1),
                reason: format!(
                    "{} fields in \"{raw}\", expected 15",
                    f.len().saturating_sub(1)
                ),
            }),
        }
    }
    (jobs, unread)
}

/// Reads `query`'s answer.
pub fn read(read: &dyn SlurmRead, query: &Query) -> Result<(Vec<Job>, Vec<Unread>), ReadError> {
    read.read(query).map(|t| parse(&t))
}

/// The jobs of `user` and of every user with jobs in `qos`, asked of
/// slurmctld so that neither the number of calls nor their answers grow
/// with the site's jobs: one `scontrol show assoc_mgr` for the QOS names
/// who has jobs there, then one squeue ([`of_user`] or [`running_of`], as
/// `of_user` says) per such user, each job once. Where Slurm keeps no
/// per-user counts for a QOS (`AccountingStorageEnforce` without
/// `limits`), every job is read (`every`).
pub fn of_qos_users(
    read: &dyn SlurmRead,
    user: &str,
    qos: &[String],
    every: &Query,
    of_user: impl Fn(&str) -> Query,
) -> Result<(Vec<Job>, Vec<Unread>), ReadError> {
    if qos.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let users = match qos_users(read, user, qos)? {
        Ok(users) => users,
        Err(name) => {
            let (jobs, mut unread) = self::read(read, every)?;
            unread.push(every_job_read(&name));
            return Ok((jobs, unread));
        }
    };
    let mut jobs: Vec<Job> = Vec::new();
    let mut unread = Vec::new();
    for u in &users {
        let (rows, bad) = self::read(read, &of_user(u))?;
        unread.extend(bad);
        for row in rows {
            if !jobs.iter().any(|j| j.id == row.id) {
                jobs.push(row);
            }
        }
    }
    Ok((jobs, unread))
}

/// `user` and every user with jobs in `qos`, from `scontrol show
/// assoc_mgr`'s answer for every QOS (which `usage` and `why` read once
/// per run for the QOS's limits); `Err(qos name)` where Slurm keeps no
/// per-user counts for a QOS (`AccountingStorageEnforce` without
/// `limits`).
fn qos_users(
    read: &dyn SlurmRead,
    user: &str,
    qos: &[String],
) -> Result<Result<Vec<String>, String>, ReadError> {
    let mut by_qos = users_by_qos(read, user)?;
    by_qos.retain(|name, _| qos.iter().any(|q| q.eq_ignore_ascii_case(name)));
    let mut users = vec![user.to_owned()];
    for (name, listed) in &by_qos {
        let Some(listed) = listed else {
            return Ok(Err(name.clone()));
        };
        for u in listed {
            if !users.contains(u) {
                users.push(u.clone());
            }
        }
    }
    Ok(Ok(users))
}

/// Who slurmctld lists with jobs in each QOS ([`assoc_mgr::parse_qos_users`]),
/// the caller, `user`, by name: Slurm 22.05 names users by uid there, and
/// the caller's own uid is asked for once.
pub fn users_by_qos(
    read: &dyn SlurmRead,
    user: &str,
) -> Result<BTreeMap<String, Option<Vec<String>>>, ReadError> {
    let mut by_qos = assoc_mgr::parse_qos_users(&read.read(&assoc_mgr::all_qos())?);
    let my_uid = read
        .read(&Query::user_id())
        .map(|u| u.trim().to_owned())
        .unwrap_or_default();
    for listed in by_qos.values_mut().flatten() {
        for u in listed.iter_mut().filter(|u| **u == my_uid) {
            user.clone_into(u);
        }
    }
    Ok(by_qos)
}

fn every_job_read(qos: &str) -> Unread {
    Unread {
        source: format!("scontrol show assoc_mgr flags=qos qos={qos}"),
        reason: "Slurm keeps no per-user job counts for this QOS (AccountingStorageEnforce \
                 without limits): every job of the cluster was read instead"
            .to_owned(),
    }
}

/// The jobs of a group (`gpu-qos usage`): those of `user` and of every
/// user with jobs in `qos`, pending or running.
pub fn group(
    read: &dyn SlurmRead,
    user: &str,
    qos: &[String],
) -> Result<(Vec<Job>, Vec<Unread>), ReadError> {
    of_qos_users(read, user, qos, &every(), of_user)
}

/// The running jobs of `qos` (read as [`group`] reads a group).
pub fn running_in(
    read: &dyn SlurmRead,
    user: &str,
    qos: &[String],
) -> Result<(Vec<Job>, Vec<Unread>), ReadError> {
    let (mut jobs, unread) = of_qos_users(read, user, qos, &running(), running_of)?;
    jobs.retain(|j| qos.iter().any(|q| q.eq_ignore_ascii_case(&j.qos)));
    Ok((jobs, unread))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from a 22.05 test cluster: a qos_lafferty job pending while
    // lowprio job 1, signalled for preemption with GraceTime 120 s, ends.
    const PENDING: &str = "4|root|research|PD|qos_lafferty|gpu|10000|cpu=1,mem=16000M,node=1,billing=1,gres/gpu=2,gres/gpu:a40=2|Resources|2026-11-23T23:07:56|gpu01|N/A|NONE||0|\n";
    const VICTIMS: &str = "1|root|research|R|lowprio|gpu|1|cpu=1,node=1,billing=1,gres/gpu=4,gres/gpu:a40=4|None|2026-11-23T23:07:09|(null)|2026-11-23T23:07:24|2026-11-23T23:09:24|gpu01|0|\n\
        3|root|research|R|lowprio|gpu|1|cpu=1,node=1,billing=1,gres/gpu=4,gres/gpu:a40=4|None|2026-11-23T23:07:21|(null)|N/A|NONE|gpu02|0|\n";

    fn one(text: &str) -> Job {
        let (jobs, unread) = parse(text);
        assert!(unread.is_empty(), "{unread:?}");
        jobs.into_iter().next().unwrap_or_else(|| panic!("no job"))
    }

    #[test]
    fn jobs_read_with_slurms_words_for_none() {
        let j = one(PENDING);
        assert_eq!(
            (j.id.as_str(), j.state.as_str(), j.priority),
            ("4", "PD", 10000)
        );
        assert_eq!(j.gpus, vec![(Some("a40".to_owned()), 2)]);
        assert_eq!(j.sched_nodes.as_deref(), Some("gpu01"));
        assert_eq!((j.preempt_time, j.end, j.nodes), (None, None, None));
        let (v, bad) = parse(VICTIMS);
        assert!(bad.is_empty());
        assert_eq!(v[0].preempt_time.as_deref(), Some("2026-11-23T23:07:24"));
        assert_eq!(v[0].end.as_deref(), Some("2026-11-23T23:09:24"));
        assert_eq!(v[1].preempt_time, None);
        let (none, bad) = parse("4|root|x\n");
        assert!(none.is_empty() && bad.len() == 1, "{bad:?}");
    }

    #[test]
    fn jobs_become_usage_rows() {
        let (v, _) = parse(VICTIMS);
        let row = v[0].row();
        assert!(row.running);
        assert_eq!((row.id.as_str(), row.qos.as_str()), ("1", "lowprio"));
        assert_eq!(row.gpus, [(Some("a40".to_owned()), 4)]);
    }

    #[test]
    fn each_read_names_its_filter_and_key() {
        assert_eq!(
            one_query_args(&of_user("alice")),
            "-h -u alice -a -t RUNNING,PENDING -O"
        );
        assert_eq!(of_user("alice").key, "squeue-user-alice");
        assert_eq!(one_query_args(&super::one("42")), "-h -j 42 -O");
        assert_eq!(
            one_query_args(&pending_in("gpu")),
            "-h -p gpu -t PENDING -O"
        );
    }

    fn one_query_args(q: &Query) -> String {
        assert_eq!(q.args.last().map(String::as_str), Some(FIELDS));
        q.args[..q.args.len() - 1].join(" ")
    }
}
