//! What each `gpu-qos` command reads, and in which order, through a
//! [`SlurmRead`](crate::qos::slurm::SlurmRead): Slurm itself when run,
//! recorded answers of each release in tests. The binary parses its
//! arguments, calls one of these and prints.
//!
//! - [`why`]: one job explained (`gpu-qos why`).
//! - [`usage`]: a user's group QOS (`gpu-qos usage`).
//! - [`accounts`]: the typed limits above a user, by account and
//!   partition.
//! - [`advise`]: what ended jobs used, and the size each should have
//!   asked for (`gpu-qos advise`).
//! - [`replay`]: the recorded jobs and the database for `gpu-qos replay`.
//! - [`site`]: the site for `audit`, `check`, `generate` and `metrics`.

pub mod accounts;
pub mod advise;
pub mod replay;
pub mod site;
pub mod usage;
pub mod why;

#[cfg(test)]
mod scenes;

use crate::qos::check::{parse_grp_tres, QosRecord};
use crate::qos::config::{self, GpuQosConfig};
use crate::qos::site::{parse_qos, AuditQos, SlurmSettings, Unread};
use crate::qos::slurm::assoc_mgr::{self, CtldQos};
use crate::qos::slurm::{qos, soft, ReadError, SlurmRead};
use crate::shared::ConfigError;

/// The gpu_qos.conf beside the slurm.conf slurmctld runs with (its own
/// file, readable where users read slurm.conf); `None` where there is
/// none.
pub fn policy_in_force(conf: &SlurmSettings) -> Result<Option<GpuQosConfig>, ConfigError> {
    let path = crate::shared::locations::beside_slurm_conf(
        conf.get("SLURM_CONF").map(std::path::Path::new),
        "gpu_qos.conf",
    );
    crate::shared::syntax::load(&path, config::parse)
}

/// Whether `PrivateData` hides other users' jobs from users.
pub fn jobs_private(conf: &SlurmSettings) -> bool {
    conf.get("PrivateData").is_some_and(|v| {
        v.split(',')
            .any(|w| matches!(w.trim().to_ascii_lowercase().as_str(), "jobs" | "all"))
    })
}

/// A note where figures of `qos` may count jobs under the wrong QOS:
/// on a release whose slurmctld moves a running job with a QOS list to
/// the list's highest-priority QOS when it loads its jobs again (24.11 to
/// 26.05, SchedMD ticket 23033), the running jobs whose list names one of
/// them, as accounting has them (`sacct`: what the caller may see of
/// other users' jobs). Nothing where Slurm does not answer.
pub fn qos_list_note(read: &dyn SlurmRead, qos: &[&str]) -> Option<Unread> {
    use crate::qos::slurm::{config, qos_lists};
    let conf = SlurmSettings::from_show_config(&read.read(&config::show()).ok()?);
    if !conf.release().is_some_and(qos_lists::moves_listed_jobs) {
        return None;
    }
    let version = conf.get("SLURM_VERSION")?;
    let jobs = qos_lists::parse(&read.read(&qos_lists::running()).ok()?);
    let names =
        |j: &qos_lists::ListedJob, q: &str| j.requested.iter().any(|r| r.eq_ignore_ascii_case(q));
    let listed: Vec<_> = jobs
        .iter()
        .filter(|j| qos.iter().any(|q| names(j, q)))
        .collect();
    let named: Vec<&str> = qos
        .iter()
        .copied()
        .filter(|q| listed.iter().any(|j| names(j, q)))
        .collect();
    let listed = listed.len();
    (!named.is_empty()).then(|| Unread {
        source: format!("QOS {}", named.join(", ")),
        reason: format!(
            "{listed} running job(s) asked for a list of QOS naming it; Slurm {version} moves \
             such a job to its list's highest-priority QOS when slurmctld restarts or is \
             reconfigured (SchedMD ticket 23033), so these figures may count it under \
             another QOS than the one it started under"
        ),
    })
}

/// What a failed `sacctmgr show qos` leaves the users' commands without.
const DBD_QOS_SOURCE: &str = "sacctmgr show qos (each QOS's Preempt list, GraceTime and Flags)";

/// Every QOS for `usage` and `why`: limits, preemption mode and priority
/// as slurmctld holds them now (one `scontrol show assoc_mgr`), with what
/// only slurmdbd keeps where it answers (through the caller's cache when
/// run, see [`crate::qos::slurm::cache`]); without slurmdbd those are
/// unknown and a note says so.
pub fn users_qos(
    read: &dyn SlurmRead,
    unread: &mut Vec<Unread>,
) -> Result<Vec<AuditQos>, ReadError> {
    let ctld = assoc_mgr::parse_ctld_qos(&read.read(&assoc_mgr::all_qos())?);
    let dbd = match soft(unread, DBD_QOS_SOURCE, read.read(&qos::audit())) {
        Some(text) => {
            let (records, bad) = parse_qos(&text);
            unread.extend(bad);
            records
        }
        None => Vec::new(),
    };
    let (all, bad) = merge_qos(ctld, &dbd);
    unread.extend(bad);
    Ok(all)
}

/// The QOS for the users' commands: each as slurmctld holds it now
/// (`ctld`: its `GrpTRES` limits, `PreemptMode`, `Priority`), with what
/// only slurmdbd keeps (`Preempt`, `GraceTime`, `Flags`, `UsageFactor`)
/// from `dbd` where it was read. A typed limit slurmdbd has but slurmctld
/// does not track (its TRES missing from `AccountingStorageTRES`) is kept
/// from `dbd`, as `sacctmgr` shows it. A QOS slurmctld does not know yet
/// is taken from `dbd` as it is.
pub fn merge_qos(ctld: Vec<CtldQos>, dbd: &[AuditQos]) -> (Vec<AuditQos>, Vec<Unread>) {
    let mut unread = Vec::new();
    let mut all: Vec<AuditQos> = Vec::new();
    for c in ctld {
        let from_db = dbd.iter().find(|q| q.name().eq_ignore_ascii_case(&c.name));
        let gpu_limits = match parse_grp_tres(&c.grp_tres) {
            Ok(limits) => limits,
            Err(reason) => {
                unread.push(Unread {
                    source: "scontrol show assoc_mgr flags=qos".to_owned(),
                    reason: format!("GrpTRES \"{}\" of QOS {}: {reason}", c.grp_tres, c.name),
                });
                Vec::new()
            }
        };
        let gpu_limits = match from_db {
            Some(q) if gpu_limits.is_empty() => q.record.gpu_limits.clone(),
            _ => gpu_limits,
        };
        all.push(AuditQos {
            record: QosRecord {
                name: c.name,
                gpu_limits,
                preempt: from_db
                    .map(|q| q.record.preempt.clone())
                    .unwrap_or_default(),
            },
            preempt_mode: c.preempt_mode,
            grace_time: from_db.and_then(|q| q.grace_time),
            usage_factor: from_db.and_then(|q| q.usage_factor),
            flags: from_db.map(|q| q.flags.clone()).unwrap_or_default(),
            priority: c.priority,
        });
    }
    for q in dbd {
        if !all.iter().any(|a| a.name().eq_ignore_ascii_case(q.name())) {
            all.push(q.clone());
        }
    }
    (all, unread)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod qos_list_tests {
    use super::*;
    use crate::qos::slurm::Query;

    /// Slurm of `version`, whose accounting lists `running`.
    struct Answers {
        version: &'static str,
        running: &'static str,
    }

    impl SlurmRead for Answers {
        fn read(&self, query: &Query) -> Result<String, ReadError> {
            match query.key.as_str() {
                "scontrol-show-config" => Ok(format!("SLURM_VERSION = {}\n", self.version)),
                "sacct-running-qos-lists" => Ok(self.running.to_owned()),
                other => Err(ReadError::new(format!("no answer for {other}"))),
            }
        }
    }

    #[test]
    fn a_qos_named_in_a_running_jobs_list_is_noted_where_a_restart_moves_it() {
        let running = "7|qos_b|qos_a,qos_b\n8|normal|normal\n";
        let note = qos_list_note(
            &Answers {
                version: "25.05.8",
                running,
            },
            &["qos_a", "normal"],
        );
        let note = note.expect("qos_a is in job 7's list");
        assert_eq!(note.source, "QOS qos_a");
        assert!(note.reason.starts_with("1 running job(s)") && note.reason.contains("23033"));
        // A QOS no list names, a release that keeps the QOS, no answer.
        assert!(qos_list_note(
            &Answers {
                version: "25.05.8",
                running
            },
            &["normal"]
        )
        .is_none());
        assert!(qos_list_note(
            &Answers {
                version: "26.11.0",
                running
            },
            &["qos_a"]
        )
        .is_none());
        assert!(qos_list_note(
            &Answers {
                version: "22.05.8",
                running
            },
            &["qos_a"]
        )
        .is_none());
    }
}
