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
