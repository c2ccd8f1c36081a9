//! The typed GPU limits above a user: their own associations', their
//! accounts' and each parent's, and the partitions whose QOS carries typed
//! limits, from slurmctld's association manager. What cannot be read
//! becomes a note.

use crate::qos::gres::AccountUse;
use crate::qos::site::{parse_partitions, AuditQos, Unread};
use crate::qos::slurm::{assoc_mgr, partitions, soft, Query, ReadError, SlurmRead};
use crate::qos::usage;

/// The note a failed association read leaves.
const ASSOC_MGR_SOURCE: &str = assoc_mgr::ASSOC_SOURCE;

/// `scontrol -o show assoc_mgr flags=assoc FILTER`, read.
fn ask(read: &dyn SlurmRead, query: &Query) -> Result<Vec<assoc_mgr::AssocLine>, ReadError> {
    read.read(query).map(|t| assoc_mgr::parse_assoc_lines(&t))
}

/// The typed GPU limits of the user's own associations, and of the
/// user's accounts and their parents: the user's associations, then each
/// level of parents in one call.
pub fn account_uses(
    read: &dyn SlurmRead,
    user: &str,
    unread: &mut Vec<Unread>,
) -> (Vec<AccountUse>, Vec<AccountUse>) {
    match ask(read, &assoc_mgr::user(user)) {
        Ok(lines) => (
            usage::own_limits(&lines, user),
            account_chain_uses(read, usage::user_accounts(&lines, user), unread),
        ),
        Err(e) => {
            unread.push(e.unread(ASSOC_MGR_SOURCE));
            (Vec::new(), Vec::new())
        }
    }
}

/// The typed GPU limits of `accounts` and every parent above them.
pub fn account_chain_uses(
    read: &dyn SlurmRead,
    mut accounts: Vec<String>,
    unread: &mut Vec<Unread>,
) -> Vec<AccountUse> {
    let (mut seen, mut uses) = (Vec::new(), Vec::new());
    for _ in 0..usage::MAX_ACCOUNT_DEPTH {
        if accounts.is_empty() {
            break;
        }
        seen.extend(accounts.iter().cloned());
        match ask(read, &assoc_mgr::accounts(&accounts)) {
            Ok(lines) => {
                let (found, next) = usage::account_limits(&lines, &seen);
                uses.extend(found);
                accounts = next;
            }
            Err(e) => {
                unread.push(e.unread(ASSOC_MGR_SOURCE));
                break;
            }
        }
    }
    uses
}

/// The partitions whose QOS carries typed GPU limits, with what every job
/// in each holds (their QOS's usage in slurmctld's association manager).
pub fn partition_uses(
    read: &dyn SlurmRead,
    all_qos: &[AuditQos],
    unread: &mut Vec<Unread>,
) -> Vec<usage::PartitionUse> {
    let Some(text) = soft(
        unread,
        "scontrol show partition",
        read.read(&partitions::all()),
    ) else {
        return Vec::new();
    };
    let typed = |q: &str| {
        all_qos
            .iter()
            .any(|a| a.name().eq_ignore_ascii_case(q) && a.record.expected_gpu_limit().is_some())
    };
    let partitions: Vec<(String, String)> = parse_partitions(&text)
        .0
        .into_iter()
        .filter_map(|p| Some((p.name, p.qos.filter(|q| typed(q))?)))
        .collect();
    if partitions.is_empty() {
        return Vec::new();
    }
    // Every QOS's answer, which usage has read already (one per run).
    let Some(text) = soft(
        unread,
        "scontrol show assoc_mgr flags=qos",
        read.read(&assoc_mgr::all_qos()),
    ) else {
        return Vec::new();
    };
    usage::partition_uses(&partitions, &assoc_mgr::parse_assoc_mgr_qos(&text))
}
