//! GPU types an `scontrol update` gives a pending job, judged by the rules
//! of the QOS and partition the job already holds.
//!
//! An update that names no QOS (`scontrol update job=J Gres=gpu:h100:1`)
//! leaves the job under its own QOS, which `job_modify` cannot see: the
//! plugin is handed the update, not the job (it never reads slurmctld's
//! job record, whose layout no installed header gives). So a type the
//! job's rule does not permit would pass where the same request is
//! refused at submission. Instead the update is accepted and, once it is
//! done, the plugin reads the job back (`scontrol -o show job`): where it
//! holds a type its QOS's or partition's enforcing rule does not permit,
//! the job is held as an administrator holds it (the user cannot release
//! it) with gpushare's words in its `AdminComment`; an update that makes
//! it fit again releases it.

use crate::qos::config::{Enforce, GpuQosConfig, QosRule, RuleScope};

use super::job::{record_values as values, JobDescription};
use super::requests::FieldRequest;
use super::verdict::TypesRecheck;

/// How gpushare's hold is told in a job's `AdminComment`.
pub const HOLD_MARK: &str = "gpushare: held: ";

/// The job whose record is read back after `update`: one that names GPU
/// types where a rule limits types, whatever else it names (an update
/// naming the QOS was judged, but may be what releases a job gpushare
/// held); and one whose GPUs, CPUs, tasks, memory or nodes it changes
/// where per-type caps are set (`shape_capped`).
pub(super) fn types_to_recheck(
    cfg: &GpuQosConfig,
    update: &JobDescription<'_>,
    requests: &[FieldRequest<'_>],
    shape_capped: bool,
) -> Option<TypesRecheck> {
    let typed = requests
        .iter()
        .any(|r| r.request.is_gpu() && r.request.gres_type.is_some());
    let types_ruled = typed && !cfg.rules().is_empty();
    if !types_ruled && !shape_capped {
        return None;
    }
    let job_id = update
        .job_id_for_messages
        .or_else(|| super::lowprio::array_job_id(update.job_id_str?))?;
    Some(TypesRecheck {
        job_id,
        may_hold: true,
    })
}

/// A GPU type and count a job's record holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldType {
    pub gpu_type: String,
    pub count: u64,
}

/// The typed GPUs `show_job` (`scontrol -o show job`, every record) asks
/// for: each `gres/gpu:TYPE=N` or `gres:gpu:TYPE:N` of its `TresPer*=`
/// words, what the job is allocated by. Not `TRES=`: on 22.05 a pending
/// job's keeps a type an update took away. A user's own words (a job
/// name, a comment) may add types, never hide the record's: every such
/// word counts.
pub fn held_types(show_job: &str) -> Vec<HeldType> {
    let mut found: Vec<HeldType> = Vec::new();
    let requests = show_job
        .split_whitespace()
        .filter(|w| w.starts_with("TresPer"));
    for word in requests {
        types_in(word, &mut found);
    }
    found
}

fn types_in(word: &str, found: &mut Vec<HeldType>) {
    let mut rest = word;
    while let Some(at) = rest.find("gpu:") {
        let after = &rest[at + 4..];
        rest = after;
        let gpu_type: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
            .collect();
        let tail = &after[gpu_type.len()..];
        let Some(count) = tail.strip_prefix(['=', ':']) else {
            continue;
        };
        if gpu_type.is_empty() || gpu_type.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let digits = count.bytes().take_while(u8::is_ascii_digit).count();
        let count = count[..digits].parse().unwrap_or(1);
        if !found.iter().any(|f| f.gpu_type == gpu_type) {
            found.push(HeldType { gpu_type, count });
        }
    }
}

/// The accounts `show_job` names (every `Account=` word): the plugin
/// adds each one's parents from slurmctld's association manager before it
/// asks [`not_permitted`].
pub fn record_accounts(show_job: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in values(show_job, "Account").filter(|a| !a.is_empty()) {
        if !out.iter().any(|o| o == a) {
            out.push(a.to_owned());
        }
    }
    out
}

/// Why job `job`, as `show_job` shows it, must be held: a GPU type an
/// enforcing rule of its QOS, partition or association does not permit
/// (every `QOS=`, `Partition=` and `UserId=` word counts, so the user's
/// words can only add rules); `None` where each type it holds fits every
/// such rule. `accounts`: the job's account and every account above it
/// (an `Account=` rule covers its sub-accounts).
pub fn not_permitted(
    cfg: &GpuQosConfig,
    job: u32,
    show_job: &str,
    accounts: &[String],
) -> Option<String> {
    let held = held_types(show_job);
    let mut rules: Vec<(String, &QosRule)> = values(show_job, "QOS")
        .filter_map(|q| Some((format!("QOS {q}"), cfg.rule_for(q)?)))
        .collect();
    for list in values(show_job, "Partition") {
        rules.extend(
            list.split(',')
                .filter_map(|p| Some((format!("partition {p}"), cfg.partition_rule(p)?))),
        );
    }
    // `UserId=alice(1001)`: the name before the uid.
    let users: Vec<&str> = values(show_job, "UserId")
        .map(|u| u.split('(').next().unwrap_or(u))
        .filter(|u| !u.is_empty())
        .collect();
    for rule in cfg.association_rules() {
        let RuleScope::Association {
            accounts: ruled,
            users: ruled_users,
        } = rule.scope()
        else {
            continue;
        };
        // Every user the record names may be the one a rule covers.
        let user = users
            .iter()
            .copied()
            .find(|u| ruled_users.iter().any(|r| r.eq_ignore_ascii_case(u)));
        if !ruled_users.is_empty() && user.is_none() {
            continue;
        }
        if let (true, Some(user)) = (ruled.is_empty(), user) {
            rules.push((format!("user {user}"), rule));
        } else if let Some(a) = accounts
            .iter()
            .find(|a| ruled.iter().any(|r| r.eq_ignore_ascii_case(a)))
        {
            rules.push((format!("account {a}"), rule));
        }
    }
    rules
        .into_iter()
        .filter(|(_, rule)| cfg.rule_enforce(rule) == Enforce::Yes)
        .find_map(|(level, rule)| {
            let bad = held.iter().find(|h| !rule.permits(&h.gpu_type))?;
            let first = rule.first_gpu_type();
            Some(format!(
                "GPU type {} is not one {level} may use ({}); scontrol update job={job} \
                 Gres=gpu:{first}:{} releases it",
                bad.gpu_type,
                rule.gpu_types().join(", "),
                bad.count
            ))
        })
}

/// Whether gpushare's hold is on the job (its words in `AdminComment`).
pub fn held_by_gpushare(show_job: &str) -> bool {
    show_job.contains(&format!(" AdminComment={HOLD_MARK}"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::qos::policy::fixtures::*;

    fn shown(qos: &str, part: &str, tres: &str, tail: &str) -> String {
        format!(
            "JobId=7 JobName=x UserId=ann(1001) GroupId=ann(1001) MCS_label=N/A Priority=0 \
             Nice=0 Account=ann QOS={qos} JobState=PENDING Reason=JobHeldAdmin Partition={part} \
             TresPerJob={tres}{tail}\n"
        )
    }

    #[test]
    fn types_are_read_wherever_slurm_prints_them() {
        let types = |s: &str| -> Vec<(String, u64)> {
            held_types(s)
                .into_iter()
                .map(|h| (h.gpu_type, h.count))
                .collect()
        };
        assert_eq!(
            types("TRES=gres/gpu=2,gres/gpu:h100=2 TresPerNode=gres:gpu:h100:2"),
            vec![("h100".to_owned(), 2)]
        );
        assert_eq!(
            types("TresPerNode=gres/gpu:a40:1"),
            vec![("a40".to_owned(), 1)]
        );
        assert_eq!(types("TRES=gres/gpu=2 TresPerNode=gres:gpu:2"), vec![]);
        // 22.05 keeps a type an update took away in a pending job's TRES.
        assert_eq!(
            types("TRES=gres/gpu:a40=1,gres/gpu:h100=1 TresPerNode=gres:gpu:a40:1"),
            vec![("a40".to_owned(), 1)]
        );
        assert_eq!(
            types("TresPerJob=gres/gpu:a40=1,gres/gpu:h100=3 TresPerTask=cpu=2"),
            vec![("a40".to_owned(), 1), ("h100".to_owned(), 3)]
        );
    }

    #[test]
    fn a_type_the_jobs_own_rule_does_not_permit_holds_it_until_it_fits() {
        let cfg = cfg();
        let h100 = shown("qos_lafferty", "gpu", "gres/gpu=1,gres/gpu:h100=1", "");
        assert_eq!(
            not_permitted(&cfg, 7, &h100, &[]).as_deref(),
            Some(
                "GPU type h100 is not one QOS qos_lafferty may use (a40); scontrol update \
                 job=7 Gres=gpu:a40:1 releases it"
            )
        );
        let a40 = shown("qos_lafferty", "gpu", "gres/gpu=1,gres/gpu:a40=1", "");
        assert_eq!(not_permitted(&cfg, 7, &a40, &[]), None);
        // Under a QOS without a rule, or one that permits it: nothing.
        for qos in ["normal", "qos_saxena"] {
            let h = shown(qos, "gpu", "gres/gpu=1,gres/gpu:h100=1", "");
            assert_eq!(not_permitted(&cfg, 7, &h, &[]), None, "{qos}");
        }
        // A user's words never hide the job's own QOS.
        let named = h100.replace("JobName=x", "JobName=x QOS=normal");
        assert!(not_permitted(&cfg, 7, &named, &[]).is_some());
        // A partition's rule too.
        let part = cfg_from("Partition=a40only GPUTypes=a40\n");
        let h = shown("normal", "a40only,other", "gres/gpu=1,gres/gpu:h100=1", "");
        assert!(not_permitted(&part, 7, &h, &[]).is_some());
        // A rule that only warns holds nothing.
        let warns = cfg_from("QOS=qos_lafferty GPUTypes=a40 Enforce=warn\n");
        assert_eq!(not_permitted(&warns, 7, &h100, &[]), None);
    }

    #[test]
    fn an_account_or_user_rule_holds_its_jobs_and_their_sub_accounts() {
        let cfg =
            cfg_from("Account=lafferty GPUTypes=a40\nUser=alice Account=saxena GPUTypes=a100\n");
        let job = |account: &str, user: &str| {
            shown("normal", "gpu", "gres/gpu=1,gres/gpu:h100=1", "")
                .replace("Account=ann", &format!("Account={account}"))
                .replace("UserId=ann(1001)", &format!("UserId={user}(1001)"))
        };
        let students = job("lafferty_students", "eve");
        assert_eq!(
            record_accounts(&students),
            vec!["lafferty_students".to_owned()]
        );
        // Its parent, as the association manager tells the plugin.
        let chain = ["lafferty_students".to_owned(), "lafferty".to_owned()];
        assert_eq!(
            not_permitted(&cfg, 7, &students, &chain).as_deref(),
            Some(
                "GPU type h100 is not one account lafferty may use (a40); scontrol update \
                 job=7 Gres=gpu:a40:1 releases it"
            )
        );
        assert_eq!(not_permitted(&cfg, 7, &students, &chain[..1]), None);
        // A rule limited to a user holds that user's jobs only.
        let saxena = ["saxena".to_owned()];
        assert!(not_permitted(&cfg, 7, &job("saxena", "alice"), &saxena).is_some());
        assert_eq!(not_permitted(&cfg, 7, &job("saxena", "bob"), &saxena), None);
        // A user's words (a job name before the record's own fields) only
        // add accounts and users: the record's are still read.
        let named = students.replace("JobName=x", "JobName=x Account=other UserId=bob(7)");
        assert_eq!(
            record_accounts(&named),
            vec!["other".to_owned(), "lafferty_students".to_owned()]
        );
        let with_name = [chain.to_vec(), vec!["other".to_owned()]].concat();
        assert!(not_permitted(&cfg, 7, &named, &with_name).is_some());
        // A type the rule permits holds nothing.
        let a40 = students.replace("gres/gpu:h100=1", "gres/gpu:a40=1");
        assert_eq!(not_permitted(&cfg, 7, &a40, &chain), None);
    }

    #[test]
    fn gpushares_hold_is_told_apart_by_its_words() {
        let held = shown(
            "q",
            "p",
            "",
            &format!(" AdminComment={HOLD_MARK}GPU type h100"),
        );
        assert!(held_by_gpushare(&held));
        assert!(!held_by_gpushare(&shown(
            "q",
            "p",
            "",
            " AdminComment=site"
        )));
    }
}
