//! slurmctld's association manager (`scontrol -o show assoc_mgr`): each
//! QOS's typed GPU limits with their usage, who has jobs in a QOS, and
//! the associations of accounts and users. One call answered from
//! slurmctld's association cache (no job lock), whose size does not grow
//! with the site's jobs. Its words are the same in 22.05, 24.11 and 26.05
//! but for users: 22.05 names them by uid, later releases `name(uid)`.

use std::collections::BTreeMap;

use super::Query;

/// Every QOS, one line each.
pub fn all_qos() -> Query {
    Query::new(
        "scontrol",
        &["-o", "show", "assoc_mgr", "flags=qos"],
        "assoc-mgr-qos",
    )
}

/// The associations of `accounts`, one line each.
pub fn accounts(accounts: &[String]) -> Query {
    let list = accounts.join(",");
    assoc(&format!("accounts={list}"), &format!("accounts-{list}"))
}

/// The associations of one user.
pub fn user(user: &str) -> Query {
    assoc(&format!("users={user}"), &format!("user-{user}"))
}

fn assoc(filter: &str, key: &str) -> Query {
    Query::new(
        "scontrol",
        &["-o", "show", "assoc_mgr", "flags=assoc", filter],
        &format!("assoc-mgr-assoc-{key}"),
    )
}

/// What [`crate::qos::usage`] notes when an association read fails.
pub const ASSOC_SOURCE: &str = "scontrol show assoc_mgr flags=assoc";

/// One GPU type in one QOS's `GrpTRES`: the limit (`None`: no limit) and
/// the GPUs its running jobs hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QosGpus {
    pub qos: String,
    pub gpu_type: String,
    pub limit: Option<u64>,
    pub in_use: u64,
}

/// Reads `scontrol -o show assoc_mgr flags=qos`: for each QOS, each typed
/// `gres/gpu:TYPE=LIMIT(USED)` entry of its `GrpTRES` (`N` is no limit).
/// The format is the same in 22.05, 24.11 and 25.11 (`_print_tres_line`).
pub fn parse_assoc_mgr_qos(text: &str) -> Vec<QosGpus> {
    let mut out = Vec::new();
    let mut qos: Option<String> = None;
    for word in text.split_whitespace() {
        if let Some(rest) = word.strip_prefix("QOS=") {
            // `QOS=name(id)`
            qos = Some(rest.rsplit_once('(').map_or(rest, |(n, _)| n).to_owned());
        } else if let (Some(rest), Some(q)) = (word.strip_prefix("GrpTRES="), &qos) {
            for (gpu_type, limit, in_use) in typed_gpu_entries(rest) {
                out.push(QosGpus {
                    qos: q.clone(),
                    gpu_type,
                    limit,
                    in_use,
                });
            }
        }
    }
    out
}

/// One QOS as slurmctld holds it now ([`all_qos`]'s answer): what it
/// prints of the QOS's own settings. `Preempt`, `GraceTime`, `Flags` and
/// `UsageFactor` are not among them (slurmdbd's, see
/// [`crate::qos::gather::merge_qos`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CtldQos {
    pub name: String,
    /// The limits of its `GrpTRES` in `sacctmgr`'s words
    /// (`cpu=8,gres/gpu:a40=4`): entries without a limit left out.
    pub grp_tres: String,
    /// Lower case, as `sacctmgr` prints it (`requeue`, `cluster`).
    pub preempt_mode: Option<String>,
    /// `None` where Slurm prints `NONE`.
    pub priority: Option<u64>,
}

/// Reads [`all_qos`]'s answer, one QOS a line (the same words in 22.05 to
/// 26.05; 26.05 prints a priority always, earlier releases `NONE` for
/// none).
pub fn parse_ctld_qos(text: &str) -> Vec<CtldQos> {
    text.lines()
        .filter_map(|line| {
            let field = |key: &str| field(line, key);
            let name = name_of(field("QOS")?)?;
            let grp_tres = field("GrpTRES")
                .unwrap_or_default()
                .split(',')
                .filter_map(|entry| {
                    let (tres, value) = entry.split_once('=')?;
                    let limit = value.split_once('(').map_or(value, |(l, _)| l);
                    (limit != "N" && !limit.is_empty()).then(|| format!("{tres}={limit}"))
                })
                .collect::<Vec<_>>()
                .join(",");
            Some(CtldQos {
                name,
                grp_tres,
                preempt_mode: field("PreemptMode")
                    .filter(|m| !m.is_empty())
                    .map(str::to_ascii_lowercase),
                priority: field("Priority").and_then(|p| p.parse().ok()),
            })
        })
        .collect()
}

/// One GPU type in an account's own `GrpTRES` (its association without a
/// user): the limit and the GPUs its and its sub-accounts' jobs hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountGpus {
    pub account: String,
    pub gpu_type: String,
    pub limit: Option<u64>,
    pub in_use: u64,
}

/// One association line of `scontrol -o show assoc_mgr flags=assoc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssocLine {
    pub account: String,
    /// The user's name (`alice`, or `alice(1001)` as printed, the uid cut
    /// off); `None` for the account's own association.
    pub user: Option<String>,
    /// `None` for an association of every partition.
    pub partition: Option<String>,
    /// The parent account (account associations only).
    pub parent: Option<String>,
    /// Each typed `gres/gpu:TYPE=LIMIT(USED)` of its `GrpTRES`.
    pub gpus: Vec<(String, Option<u64>, u64)>,
}

/// The value of `KEY=value` in one line of `scontrol -o show assoc_mgr`.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

/// `name(id)` → `name`; empty → `None`.
fn name_of(value: &str) -> Option<String> {
    let name = value.rsplit_once('(').map_or(value, |(n, _)| n);
    (!name.is_empty()).then(|| name.to_owned())
}

/// Reads `scontrol -o show assoc_mgr flags=assoc`, one association a line
/// (the same words in 22.05, 24.11 and 26.05; headers are skipped).
pub fn parse_assoc_lines(text: &str) -> Vec<AssocLine> {
    text.lines()
        .filter_map(|line| {
            let field = |key: &str| field(line, key);
            Some(AssocLine {
                account: name_of(field("Account")?)?,
                user: field("UserName").and_then(name_of),
                partition: field("Partition").and_then(name_of),
                parent: field("ParentAccount").and_then(name_of),
                gpus: field("GrpTRES")
                    .map(|t| typed_gpu_entries(t).collect())
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// For each account's own association (no user, no partition), each typed
/// GPU entry of its `GrpTRES`. Users' associations are left out: their
/// names are not for a metrics file.
pub fn parse_assoc_mgr_accounts(text: &str) -> Vec<AccountGpus> {
    parse_assoc_lines(text)
        .into_iter()
        .filter(|l| l.user.is_none() && l.partition.is_none())
        .flat_map(|l| {
            let account = l.account;
            l.gpus
                .into_iter()
                .map(move |(gpu_type, limit, in_use)| AccountGpus {
                    account: account.clone(),
                    gpu_type,
                    limit,
                    in_use,
                })
        })
        .collect()
}

/// The `gres/gpu:TYPE=LIMIT(USED)` entries of an assoc_mgr TRES list
/// (`N` is no limit).
fn typed_gpu_entries(tres: &str) -> impl Iterator<Item = (String, Option<u64>, u64)> + '_ {
    tres.split(',').filter_map(|entry| {
        let (name, value) = entry.split_once('=')?;
        let gpu_type = name.strip_prefix("gres/gpu:")?;
        let (limit, used) = value.strip_suffix(')')?.split_once('(')?;
        Some((gpu_type.to_owned(), limit.parse().ok(), used.parse().ok()?))
    })
}

/// Who has jobs in each QOS, from [`all_qos`]'s answer: the users
/// of its `User Limits` with submitted jobs (`MaxSubmitJobsPU=..(N)`, N >
/// 0), as a name where Slurm prints one (`alice(1001)`, 24.11 on) or a uid
/// (22.05). `None` for a QOS whose jobs Slurm counts but lists no user
/// for (no per-user counters: `AccountingStorageEnforce` without
/// `limits`): its jobs must then be found another way.
pub fn parse_qos_users(text: &str) -> BTreeMap<String, Option<Vec<String>>> {
    let mut out: BTreeMap<String, Option<Vec<String>>> = BTreeMap::new();
    let mut qos: Option<String> = None;
    let mut submitted_in_qos = 0u64;
    let mut in_users = false;
    let mut previous = "";
    let mut current_user: Option<String> = None;
    let used = |word: &str| -> u64 {
        word.rsplit_once('(')
            .and_then(|(_, n)| n.trim_end_matches(['}', ')']).parse().ok())
            .unwrap_or(0)
    };
    let finish = |qos: &Option<String>, submitted: u64, out: &mut BTreeMap<_, _>| {
        if let Some(q) = qos {
            let entry: &mut Option<Vec<String>> = out.entry(q.clone()).or_insert(Some(Vec::new()));
            if submitted > 0 && entry.as_ref().is_some_and(|u| u.is_empty()) {
                *entry = None;
            }
        }
    };
    for word in text.split_whitespace() {
        if let Some(rest) = word.strip_prefix("QOS=") {
            finish(&qos, submitted_in_qos, &mut out);
            qos = Some(rest.rsplit_once('(').map_or(rest, |(n, _)| n).to_owned());
            out.entry(qos.clone().unwrap_or_default())
                .or_insert(Some(Vec::new()));
            submitted_in_qos = 0;
            in_users = false;
            current_user = None;
        } else if let Some(rest) = word.strip_prefix("GrpSubmitJobs=") {
            submitted_in_qos = used(rest);
        } else if word == "Limits=" {
            in_users = previous == "User";
        } else if in_users {
            if let Some((who, _)) = word.split_once("={") {
                let name = who.split_once('(').map_or(who, |(n, _)| n);
                current_user = Some(name.to_owned());
            }
            let stat = word.split_once("={").map_or(word, |(_, s)| s);
            if let (Some(rest), Some(user), Some(q)) =
                (stat.strip_prefix("MaxSubmitJobsPU="), &current_user, &qos)
            {
                if used(rest) > 0 {
                    if let Some(Some(users)) = out.get_mut(q) {
                        if !users.contains(user) {
                            users.push(user.clone());
                        }
                    }
                }
            }
        }
        previous = word;
    }
    finish(&qos, submitted_in_qos, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assoc_mgr_names_who_has_jobs_in_each_qos() {
        let v24 = "QOS=qos_lafferty(3) UsageRaw=1.0 GrpJobs=N(2) GrpJobsAccrue=N(1) GrpSubmitJobs=N(3) GrpWall=N(2.00) GrpTRES=cpu=N(2),gres/gpu:a40=4(4) Account Limits= research={MaxJobsPA=N(2) MaxJobsAccruePA=N(1) MaxSubmitJobsPA=N(3) MaxTRESPA=cpu=N(2)} User Limits= alice(1001)={MaxJobsPU=N(2) MaxJobsAccruePU=N(0) MaxSubmitJobsPU=N(2) MaxTRESPU=cpu=N(2),gres/gpu:a40=N(4)} bob(1002)={MaxJobsPU=N(0) MaxJobsAccruePU=N(1) MaxSubmitJobsPU=N(1) MaxTRESPU=cpu=N(0)} carol(1003)={MaxJobsPU=N(0) MaxJobsAccruePU=N(0) MaxSubmitJobsPU=N(0) MaxTRESPU=cpu=N(0)}
QOS=qos_dijk(4) UsageRaw=0.0 GrpJobs=N(0) GrpJobsAccrue=N(0) GrpSubmitJobs=N(0) GrpWall=N(0.00) GrpTRES=cpu=N(0) Account Limits= No Accounts User Limits= No Users
QOS=qos_saxena(5) GrpSubmitJobs=N(2) GrpTRES=cpu=N(1) Account Limits= No Accounts User Limits= No Users";
        let users = parse_qos_users(v24);
        assert_eq!(
            users.get("qos_lafferty"),
            Some(&Some(vec!["alice".to_owned(), "bob".to_owned()]))
        );
        assert_eq!(users.get("qos_dijk"), Some(&Some(Vec::new())));
        // Two jobs counted, nobody listed: find them another way.
        assert_eq!(users.get("qos_saxena"), Some(&None));
        let v22 = "QOS=qos_lafferty(3) GrpSubmitJobs=N(1) GrpTRES=cpu=N(1) Account Limits= research={MaxJobsPA=N(1) MaxJobsAccruePA=N(0) MaxSubmitJobsPA=N(1) MaxTRESPA=cpu=N(1)} User Limits= 1001={MaxJobsPU=N(1) MaxJobsAccruePU=N(0) MaxSubmitJobsPU=N(1) MaxTRESPU=cpu=N(1)}";
        assert_eq!(
            parse_qos_users(v22).get("qos_lafferty"),
            Some(&Some(vec!["1001".to_owned()]))
        );
    }

    #[test]
    fn qos_settings_as_slurmctld_holds_them() {
        let v24 = "QOS=qos_lafferty(3) UsageRaw=1.0 GrpJobs=N(2) GrpTRES=cpu=N(2),mem=N(0),gres/gpu=N(4),gres/gpu:a40=4(4) GrpTRESMins=cpu=N(0) MaxWallPJ= MaxTRESPJ=cpu=N MinPrioThresh= PreemptMode=REQUEUE Priority=100 Account Limits= No Accounts User Limits= No Users
QOS=normal(1) GrpTRES=cpu=N(0) PreemptMode=CLUSTER Priority=NONE Account Limits= No Accounts User Limits= No Users";
        assert_eq!(
            parse_ctld_qos(v24),
            vec![
                CtldQos {
                    name: "qos_lafferty".into(),
                    grp_tres: "gres/gpu:a40=4".into(),
                    preempt_mode: Some("requeue".into()),
                    priority: Some(100),
                },
                CtldQos {
                    name: "normal".into(),
                    grp_tres: String::new(),
                    preempt_mode: Some("cluster".into()),
                    priority: None,
                },
            ]
        );
        assert!(parse_ctld_qos("\nQOS Records\n\n").is_empty());
    }

    #[test]
    fn filters_are_slurmctlds_own() {
        assert_eq!(
            accounts(&["lafferty".to_owned()]).shown(),
            "scontrol -o show assoc_mgr flags=assoc accounts=lafferty"
        );
        assert_eq!(user("alice").key, "assoc-mgr-assoc-user-alice");
    }
}
