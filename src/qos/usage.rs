//! `gpu-qos usage`: for a user, each group QOS they may use, the GPUs the
//! group holds by type against its limit, the group's running and pending
//! jobs, and why each pending job waits, in words (`QOSGrpGRES` becomes
//! "qos_lafferty's 4 a40 are all held: jobs 101 (alice, 2), 102 (bob, 2)").
//!
//! Users run it without privileges: it reads only what any user may
//! (`sacctmgr show assoc`, `sacctmgr show qos`, `scontrol show assoc_mgr`,
//! `squeue -u`). What it asks slurmctld does not grow with the site's
//! jobs: the QOS's per-user counts name who has jobs there
//! ([`super::slurm::assoc_mgr::parse_qos_users`]), and squeue is asked for one user at a time, the
//! one filter slurmctld applies itself (naming several users, or filtering
//! by QOS or state, makes squeue load every job). The squeue
//! fields are ones Slurm itself fills in (ids, user names, state, QOS,
//! TRES, reason code), `|`-separated, so nothing a user names a job can
//! shift them.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::gres::{gpu_words, held_words, settled_reason, AccountUse, TypeUse};
use super::site::{AuditQos, Unread};

pub use super::slurm::jobs::JobRow;

/// The QOS of a user's associations (one comma list per association).
pub fn parse_assoc_qos(text: &str) -> Vec<String> {
    let mut all: Vec<String> = Vec::new();
    for q in text
        .lines()
        .flat_map(|l| l.split([',', '|']))
        .map(str::trim)
    {
        if !q.is_empty() && !all.iter().any(|a| a.eq_ignore_ascii_case(q)) {
            all.push(q.to_owned());
        }
    }
    all
}

/// A pending job and why it waits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingJob {
    pub job: JobRow,
    pub why: String,
}

/// A group QOS as the user sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosUse {
    pub qos: String,
    pub types: Vec<TypeUse>,
    pub running: Vec<JobRow>,
    pub pending: Vec<PendingJob>,
}

/// A partition whose QOS carries typed GPU limits: what every job in the
/// partition holds against them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionUse {
    pub partition: String,
    pub qos: String,
    pub types: Vec<TypeUse>,
}

/// The partitions (name, `QOS=`) whose QOS `assoc_mgr` lists with typed
/// limits, from [`super::slurm::assoc_mgr::all_qos`]'s answer.
pub fn partition_uses(
    partitions: &[(String, String)],
    qos_gpus: &[super::slurm::assoc_mgr::QosGpus],
) -> Vec<PartitionUse> {
    partitions
        .iter()
        .filter_map(|(partition, qos)| {
            let types: Vec<TypeUse> = qos_gpus
                .iter()
                .filter(|g| g.qos.eq_ignore_ascii_case(qos))
                .filter_map(|g| {
                    Some(TypeUse {
                        gpu_type: g.gpu_type.clone(),
                        limit: g.limit?,
                        held: g.in_use,
                    })
                })
                .collect();
            (!types.is_empty()).then(|| PartitionUse {
                partition: partition.clone(),
                qos: qos.clone(),
                types,
            })
        })
        .collect()
}

/// The most levels of accounts followed up from the user's own.
pub const MAX_ACCOUNT_DEPTH: usize = 16;

/// The user's accounts (their associations, from
/// `scontrol -o show assoc_mgr flags=assoc users=NAME`).
pub fn user_accounts(lines: &[super::slurm::assoc_mgr::AssocLine], user: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for l in lines {
        if l.user.as_deref() == Some(user) && !out.contains(&l.account) {
            out.push(l.account.clone());
        }
    }
    out
}

/// The typed GPU limits on the user's own associations (`sacctmgr modify
/// user alice set GrpTRES=...`), one per account they have one in.
pub fn own_limits(lines: &[super::slurm::assoc_mgr::AssocLine], user: &str) -> Vec<AccountUse> {
    lines
        .iter()
        .filter(|l| l.user.as_deref() == Some(user))
        .filter_map(|l| {
            let types = limited_types(&l.gpus);
            (!types.is_empty()).then(|| AccountUse {
                account: l.account.clone(),
                types,
            })
        })
        .collect()
}

/// The entries with a limit, as [`TypeUse`]s.
fn limited_types(gpus: &[(String, Option<u64>, u64)]) -> Vec<TypeUse> {
    gpus.iter()
        .filter_map(|(t, limit, used)| {
            Some(TypeUse {
                gpu_type: t.clone(),
                limit: (*limit)?,
                held: *used,
            })
        })
        .collect()
}

/// The accounts' own lines as read so far: the typed limits among them,
/// and the parents not yet read (to ask for next).
pub fn account_limits(
    lines: &[super::slurm::assoc_mgr::AssocLine],
    seen: &[String],
) -> (Vec<AccountUse>, Vec<String>) {
    let mut uses = Vec::new();
    let mut next = Vec::new();
    for l in lines
        .iter()
        .filter(|l| l.user.is_none() && l.partition.is_none())
    {
        let types = limited_types(&l.gpus);
        if !types.is_empty() {
            uses.push(AccountUse {
                account: l.account.clone(),
                types,
            });
        }
        if let Some(p) = &l.parent {
            if !seen.contains(p) && !next.contains(p) {
                next.push(p.clone());
            }
        }
    }
    (uses, next)
}

/// What `gpu-qos usage --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageReport {
    pub user: String,
    pub qos: Vec<QosUse>,
    /// The user's own associations with typed GPU limits (by account).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub own: Vec<AccountUse>,
    /// The user's accounts and their parents with typed GPU limits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accounts: Vec<AccountUse>,
    /// The partitions whose QOS carries typed GPU limits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<PartitionUse>,
    /// `--explain`: each of the user's pending jobs, as `gpu-qos why`
    /// explains it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub explained: Vec<super::why::WhyReport>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<Unread>,
}

fn job_list(jobs: &[&JobRow], gpu_type: &str) -> String {
    jobs.iter()
        .map(|j| format!("{} ({}, {})", j.id, j.user, j.gpus_of(gpu_type)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The reason of a pending job of a QOS whose group `types` are held as
/// given, settled where Slurm has cleared it for a moment
/// ([`settled_reason`]).
fn settled<'a>(job: &'a JobRow, types: &[TypeUse]) -> &'a str {
    let fits = |gpu_type: &str, n: u64| {
        types
            .iter()
            .filter(|t| t.gpu_type == gpu_type)
            .all(|t| t.held + n <= t.limit)
    };
    settled_reason(&job.reason, &job.gpus, fits)
}

/// Why a pending job of `qos` waits, in words; `running` are the group's
/// running jobs.
pub fn reason_words(job: &JobRow, qos: &str, types: &[TypeUse], running: &[JobRow]) -> String {
    match job.reason.as_str() {
        "QOSGrpGRES" | "QOSGrpTRES" => {
            let mut parts = Vec::new();
            for t in types {
                let wants = job.gpus_of(&t.gpu_type);
                if wants == 0 || t.held + wants <= t.limit {
                    continue;
                }
                let holders: Vec<&JobRow> = running
                    .iter()
                    .filter(|j| j.gpus_of(&t.gpu_type) > 0)
                    .collect();
                let list = job_list(&holders, &t.gpu_type);
                if t.held >= t.limit {
                    parts.push(format!(
                        "{qos}'s {} {} are all held: jobs {list}",
                        t.limit, t.gpu_type
                    ));
                } else {
                    parts.push(format!(
                        "{qos} holds {} of its {} {}, {wants} more would exceed it: jobs {list}",
                        t.held, t.limit, t.gpu_type
                    ));
                }
            }
            if parts.is_empty() {
                format!("{qos}'s group GPU limit is reached (Slurm: {})", job.reason)
            } else {
                parts.join("; ")
            }
        }
        "Priority" => "jobs of higher priority are to start first".to_owned(),
        "Resources" => "waiting for enough free GPUs (or CPUs, memory) on the nodes".to_owned(),
        "Dependency" => "waiting for the jobs it depends on".to_owned(),
        "BeginTime" => "its start time has not come yet".to_owned(),
        "JobHeldUser" => "held by its user (scontrol release <job>)".to_owned(),
        "JobHeldAdmin" => {
            "held by an administrator, or by gpushare (its AdminComment says why)".to_owned()
        }
        "None" | "" => "waiting for the scheduler's next pass".to_owned(),
        other => format!("Slurm's reason: {other} (man squeue, JOB REASON CODES)"),
    }
}

/// The report for `user`, whose associations may use `user_qos`: every
/// group QOS (typed GPU limit) among them, or only `only`.
/// Whether the report covers `q`: the one QOS asked for, else each of the
/// user's QOS with a typed GPU limit (a group QOS).
fn covers(q: &AuditQos, user_qos: &[String], only: Option<&str>) -> bool {
    let name = q.name();
    match only {
        Some(o) => o.eq_ignore_ascii_case(name),
        None => {
            user_qos.iter().any(|u| u.eq_ignore_ascii_case(name))
                && q.record.expected_gpu_limit().is_some()
        }
    }
}

/// The QOS the report covers (see [`usage`]), to ask Slurm about them only.
pub fn covered_qos(all_qos: &[AuditQos], user_qos: &[String], only: Option<&str>) -> Vec<String> {
    all_qos
        .iter()
        .filter(|q| covers(q, user_qos, only))
        .map(|q| q.name().to_owned())
        .collect()
}

pub fn usage(
    user: &str,
    user_qos: &[String],
    all_qos: &[AuditQos],
    jobs: &[JobRow],
    only: Option<&str>,
) -> UsageReport {
    let mut report = UsageReport {
        user: user.to_owned(),
        qos: Vec::new(),
        own: Vec::new(),
        accounts: Vec::new(),
        partitions: Vec::new(),
        explained: Vec::new(),
        unread: Vec::new(),
    };
    for q in all_qos {
        let name = q.name();
        if !covers(q, user_qos, only) {
            continue;
        }
        let of_qos = |running: bool| -> Vec<JobRow> {
            jobs.iter()
                .filter(|j| j.qos.eq_ignore_ascii_case(name) && j.running == running)
                .cloned()
                .collect()
        };
        let running = of_qos(true);
        let types: Vec<TypeUse> = q
            .record
            .usable_types()
            .into_iter()
            .map(|(t, limit)| TypeUse {
                held: running.iter().map(|j| j.gpus_of(&t)).sum(),
                gpu_type: t,
                limit,
            })
            .collect();
        let pending = of_qos(false)
            .into_iter()
            .map(|mut job| {
                job.reason = settled(&job, &types).to_owned();
                PendingJob {
                    why: reason_words(&job, name, &types, &running),
                    job,
                }
            })
            .collect();
        report.qos.push(QosUse {
            qos: name.to_owned(),
            types,
            running,
            pending,
        });
    }
    report
}

fn gpus_text(job: &JobRow) -> String {
    gpu_words(&job.gpus)
}

impl UsageReport {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The text for people.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        if self.qos.is_empty() {
            let _ = writeln!(out, "{} may use no QOS with a GPU limit.", self.user);
        }
        for q in &self.qos {
            let _ = writeln!(
                out,
                "{}: {}",
                q.qos,
                if q.types.is_empty() {
                    "no typed GPU limit".to_owned()
                } else {
                    held_words(&q.types)
                }
            );
            for j in &q.running {
                let _ = writeln!(out, "  running  {} ({}, {})", j.id, j.user, gpus_text(j));
            }
            for p in &q.pending {
                let _ = writeln!(
                    out,
                    "  pending  {} ({}, {}): {}",
                    p.job.id,
                    p.job.user,
                    gpus_text(&p.job),
                    p.why
                );
            }
        }
        for a in &self.own {
            let _ = writeln!(
                out,
                "your association in account {}: {} (by your jobs there)",
                a.account,
                held_words(&a.types)
            );
        }
        for a in &self.accounts {
            let _ = writeln!(
                out,
                "account {}: {} (by every job of the account and its sub-accounts)",
                a.account,
                held_words(&a.types)
            );
        }
        for p in &self.partitions {
            let _ = writeln!(
                out,
                "partition {} (its QOS {}): {} (by every job in the partition)",
                p.partition,
                p.qos,
                held_words(&p.types)
            );
        }
        if !self.explained.is_empty() {
            out.push_str("\nYour pending jobs, explained (gpu-qos why):\n");
        }
        for r in &self.explained {
            for line in super::why::render(r).lines() {
                let _ = writeln!(out, "  {line}");
            }
        }
        for u in &self.unread {
            let _ = writeln!(out, "note: {}: {}", u.source, u.reason);
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {

    /// `scontrol -o show assoc_mgr flags=assoc` for eve's associations,
    /// then her account, then its parent (22.05's words, trimmed).
    const EVE: &str = "Current Association Manager state
Association Records
ClusterName=gpushare Account=lafferty_students UserName=eve(1002) Partition= Priority=0 ID=7 ParentAccount= GrpTRES=cpu=N(0),gres/gpu:a40=N(2)
ClusterName=gpushare Account=research UserName=eve(1002) Partition= Priority=0 ID=8 ParentAccount= GrpTRES=cpu=N(0),gres/gpu:a40=N(0)";
    const STUDENTS: &str = "ClusterName=gpushare Account=lafferty_students UserName= Partition= ID=6 ParentAccount=lafferty(5) GrpTRES=cpu=N(1),gres/gpu:a40=N(2)
ClusterName=gpushare Account=lafferty_students UserName=eve(1002) Partition= ID=7 ParentAccount= GrpTRES=gres/gpu:a40=N(2)
ClusterName=gpushare Account=research UserName= Partition= ID=3 ParentAccount=root(1) GrpTRES=gres/gpu:a40=N(0)";
    const LAFFERTY: &str = "ClusterName=gpushare Account=lafferty UserName= Partition= ID=5 ParentAccount=root(1) GrpTRES=cpu=N(1),gres/gpu=N(2),gres/gpu:a40=4(2)
ClusterName=gpushare Account=root UserName= Partition= ID=1 ParentAccount= GrpTRES=gres/gpu:a40=N(2)";

    #[test]
    fn partitions_with_a_typed_qos_are_reported_with_its_use() {
        let gpus = crate::qos::slurm::assoc_mgr::parse_assoc_mgr_qos(
            "QOS=part_a40(7) GrpTRES=cpu=N(1),gres/gpu=N(1),gres/gpu:a40=8(1),gres/gpu:h100=N(0)",
        );
        let uses = partition_uses(
            &[
                ("a40only".into(), "part_a40".into()),
                ("cpu".into(), "normal".into()),
            ],
            &gpus,
        );
        assert_eq!(
            uses,
            [PartitionUse {
                partition: "a40only".into(),
                qos: "part_a40".into(),
                types: vec![TypeUse {
                    gpu_type: "a40".into(),
                    limit: 8,
                    held: 1
                }]
            }]
        );
    }

    #[test]
    fn account_limits_are_found_up_the_users_accounts() {
        use crate::qos::slurm::assoc_mgr::parse_assoc_lines;
        let accounts = user_accounts(&parse_assoc_lines(EVE), "eve");
        assert_eq!(accounts, ["lafferty_students", "research"]);
        assert!(own_limits(&parse_assoc_lines(EVE), "eve").is_empty());
        let capped = EVE.replace("gres/gpu:a40=N(2)", "gres/gpu:a40=3(2)");
        assert_eq!(
            own_limits(&parse_assoc_lines(&capped), "eve"),
            [AccountUse {
                account: "lafferty_students".into(),
                types: vec![TypeUse {
                    gpu_type: "a40".into(),
                    limit: 3,
                    held: 2
                }]
            }]
        );
        let (uses, next) = account_limits(&parse_assoc_lines(STUDENTS), &accounts);
        assert!(uses.is_empty());
        assert_eq!(next, ["lafferty", "root"]);
        let seen: Vec<String> = accounts.iter().chain(&next).cloned().collect();
        let (uses, next) = account_limits(&parse_assoc_lines(LAFFERTY), &seen);
        assert!(next.is_empty(), "root has no parent, lafferty's is seen");
        assert_eq!(
            uses,
            [AccountUse {
                account: "lafferty".into(),
                types: vec![TypeUse {
                    gpu_type: "a40".into(),
                    limit: 4,
                    held: 2
                }]
            }]
        );
    }

    /// `scontrol -o show assoc_mgr flags=qos qos=...` as 22.05 prints it
    /// (users by uid) and as 24.11 and later do (`name(uid)`), and a QOS
    /// whose jobs Slurm counts without per-user records.
    use super::*;
    use crate::qos::site::parse_qos;
    use proptest::prelude::*;

    /// `squeue` 22.05.8 with every squeue read's fields, group qos_lafferty full.
    const SQUEUE: &str = "\
103|alice|lafferty|PD|qos_lafferty|gpu|100|cpu=1,mem=16000M,node=1,billing=1,gres/gpu=2,gres/gpu:a40=2|QOSGrpGRES|N/A|(null)|N/A|NONE||0|
104|alice|lafferty|PD|qos_lafferty|gpu|100|cpu=1,mem=16000M,node=1,billing=1,gres/gpu=1,gres/gpu:a40=1|Priority|N/A|(null)|N/A|NONE||0|
101|alice|lafferty|R|qos_lafferty|gpu|100|cpu=1,node=1,billing=1,gres/gpu=2,gres/gpu:a40=2|None|2026-11-23T23:07:09|(null)|N/A|NONE|gpu01|0|
102|bob|lafferty|R|qos_lafferty|gpu|100|cpu=1,node=1,billing=1,gres/gpu=2,gres/gpu:a40=2|None|2026-11-23T23:07:09|(null)|N/A|NONE|gpu01|0|
105|carol|other|R|lowprio|gpu|1|cpu=1,node=1,billing=1,gres/gpu=1|None|2026-11-23T23:07:09|(null)|N/A|NONE|gpu02|0|
";

    /// [`SQUEUE`] as `gpu-qos usage` counts it.
    fn parse_squeue(text: &str) -> (Vec<JobRow>, Vec<Unread>) {
        let (jobs, unread) = crate::qos::slurm::jobs::parse(text);
        (jobs.iter().map(|j| j.row()).collect(), unread)
    }

    fn qos() -> Vec<AuditQos> {
        parse_qos(
            "normal|||cluster|00:00:00|1.000000||0\n\
             lowprio|||requeue|00:02:00|0.000000||0\n\
             qos_lafferty|gres/gpu:a40=4|lowprio|cluster|00:00:00|1.000000||100\n\
             qos_other|gres/gpu:h100=2|lowprio|cluster|00:00:00|1.000000||100\n",
        )
        .0
    }

    #[test]
    fn reads_squeue() {
        let (jobs, unread) = parse_squeue(SQUEUE);
        assert!(unread.is_empty());
        assert_eq!(jobs.len(), 5);
        assert_eq!(jobs[2].gpus, [(Some("a40".to_owned()), 2)]);
        assert!(jobs[2].running && !jobs[0].running);
        assert_eq!(jobs[4].gpus, [(None, 1)]);
        let (jobs, unread) = parse_squeue("1|a|R\n\n");
        assert!(jobs.is_empty());
        assert_eq!(unread[0].source, "squeue line 1");
    }

    #[test]
    fn assoc_qos_lists() {
        assert_eq!(
            parse_assoc_qos("lowprio,normal,qos_lafferty\nnormal,QOS_X\n\n"),
            ["lowprio", "normal", "qos_lafferty", "QOS_X"]
        );
    }

    #[test]
    fn a_full_group_in_words() {
        let (jobs, _) = parse_squeue(SQUEUE);
        let user_qos = parse_assoc_qos("lowprio,normal,qos_lafferty\n");
        let report = usage("alice", &user_qos, &qos(), &jobs, None);
        assert_eq!(report.qos.len(), 1);
        let q = &report.qos[0];
        assert_eq!(
            q.types,
            [TypeUse {
                gpu_type: "a40".into(),
                limit: 4,
                held: 4
            }]
        );
        assert_eq!(
            q.pending[0].why,
            "qos_lafferty's 4 a40 are all held: jobs 101 (alice, 2), 102 (bob, 2)"
        );
        assert_eq!(
            q.pending[1].why,
            "jobs of higher priority are to start first"
        );
        assert_eq!(
            report.to_text(),
            "qos_lafferty: 4 of 4 a40 held\n\
             \x20 running  101 (alice, 2 a40)\n\
             \x20 running  102 (bob, 2 a40)\n\
             \x20 pending  103 (alice, 2 a40): qos_lafferty's 4 a40 are all held: jobs 101 (alice, 2), 102 (bob, 2)\n\
             \x20 pending  104 (alice, 1 a40): jobs of higher priority are to start first\n"
        );
        let back: UsageReport = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(back, report);
        // --qos picks one, group or not.
        let low = usage("alice", &user_qos, &qos(), &jobs, Some("lowprio"));
        assert_eq!(low.qos[0].running.len(), 1);
        assert!(usage("bob", &[], &qos(), &jobs, None).qos.is_empty());
    }

    #[test]
    fn a_group_short_of_room_in_words() {
        let (jobs, _) = parse_squeue(
            "7|bob|x|R|qos_lafferty|gpu|1|gres/gpu=3,gres/gpu:a40=3|None||||||0|\n\
             8|alice|x|PD|qos_lafferty|gpu|1|gres/gpu=2,gres/gpu:a40=2|QOSGrpGRES||||||0|\n",
        );
        let report = usage("alice", &["qos_lafferty".into()], &qos(), &jobs, None);
        assert_eq!(
            report.qos[0].pending[0].why,
            "qos_lafferty holds 3 of its 4 a40, 2 more would exceed it: jobs 7 (bob, 3)"
        );
    }

    proptest! {
        #[test]
        fn squeue_reader_never_panics(text in "\\PC{0,200}") {
            let (jobs, _) = parse_squeue(&text);
            let _ = usage("u", &["q".into()], &qos(), &jobs, None).to_text();
            let _ = parse_assoc_qos(&text);
        }
    }
}
