//! The jobs accounting recorded (`sacct -a -X -P`), read for `gpu-qos
//! replay`: one record per submission as the job ran (QOS, partition,
//! account and user after Slurm's defaults), with the request as typed
//! (`SubmitLine`, which sacct lists from Slurm 21.08: `src/sacct/sacct.c`)
//! and as accounting counted it (`ReqTRES`).

use std::time::Duration;

use super::Query;

/// How long replay's sacct may take: it reads months of accounting
/// (sacct answers about 100,000 jobs in 2 s), for an admin who waits for
/// it, where every other read has [`super::TIMEOUT`].
pub const REPLAY_TIMEOUT: Duration = Duration::from_secs(300);

/// The fields read, in order. `SubmitLine` is last: it is the user's own
/// text, and the only field that may run on over several lines.
pub const FIELDS: &str = "JobID,User,Account,Partition,QOS,NNodes,Reservation,ReqTRES,SubmitLine";
/// The same without `SubmitLine`, for a release older than 21.08.
pub const FIELDS_WITHOUT_SUBMIT_LINE: &str =
    "JobID,User,Account,Partition,QOS,NNodes,Reservation,ReqTRES";

/// A field separator for one read, which no user can have typed into the
/// `SubmitLine` read with it: 64 bits from the operating system's
/// randomness (std's hash keys), new for every read, which a user would
/// have had to guess when submitting (kept short: sacct prints it 8 times
/// a job). sacct separates records with newlines, which `SubmitLine` may
/// hold (`--wrap=$'...\n123|alice|...'`), and fields with this, so no
/// line a user typed is taken for a record of its own.
pub fn delimiter() -> String {
    use std::hash::{BuildHasher, RandomState};
    let a = RandomState::new().hash_one(std::process::id());
    format!("<{a:016x}>")
}

/// Every job of every user submitted between `since` and `until` (Slurm's
/// date forms, `2026-01-31`, `now-7days`), one record per job (`-X`: no
/// steps), its fields separated by `delimiter` ([`delimiter`]).
/// `with_submit_line`: false on a release without the field.
pub fn between(since: &str, until: Option<&str>, with_submit_line: bool, delimiter: &str) -> Query {
    let fields = if with_submit_line {
        FIELDS
    } else {
        FIELDS_WITHOUT_SUBMIT_LINE
    };
    let until = until.unwrap_or("now");
    Query::new(
        "sacct",
        &[
            "-a",
            "-X",
            "-P",
            "--noheader",
            &format!("--delimiter={delimiter}"),
            "-S",
            since,
            "-E",
            until,
            "-o",
            fields,
        ],
        &format!("sacct-replay-{since}-{until}"),
    )
    .within(REPLAY_TIMEOUT)
}

/// Whether sacct's error says it does not know a field (a release
/// without `SubmitLine`), rather than that it failed to answer.
pub fn refused_a_field(error: &str) -> bool {
    error.contains("Invalid field requested")
}

/// The parts of a job id: `123`, `123_4`, `123_[1-5%2]`, `123+0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobId<'a> {
    Plain(&'a str),
    ArrayTask { array: &'a str, task: u32 },
    ArrayPending { array: &'a str, index: &'a str },
    HetComponent(&'a str),
}

/// Reads one JobID field; `None` for anything else (a step, text).
pub fn parse_job_id(text: &str) -> Option<JobId<'_>> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if digits(text) {
        return Some(JobId::Plain(text));
    }
    if let Some((job, comp)) = text.split_once('+') {
        return (digits(job) && digits(comp)).then_some(JobId::HetComponent(text));
    }
    let (array, task) = text.split_once('_')?;
    if !digits(array) {
        return None;
    }
    if let Some(index) = task.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        return (!index.is_empty()).then_some(JobId::ArrayPending { array, index });
    }
    digits(task)
        .then(|| task.parse().ok())
        .flatten()
        .map(|task| JobId::ArrayTask { array, task })
}

/// Each account's parent (`sacctmgr show assoc`, the accounts' own
/// associations): the chain of accounts whose limits and rules cover a job.
pub fn account_parents() -> Query {
    Query::new(
        "sacctmgr",
        &["-nP", "show", "assoc", "format=Account,ParentName,User"],
        "sacctmgr-show-assoc-parents",
    )
}

/// Reads [`account_parents`]: (account, parent) for every account's own
/// association (no user); `root` has none.
pub fn parse_account_parents(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split('|').map(str::trim);
            let (account, parent, user) = (f.next()?, f.next()?, f.next()?);
            (!account.is_empty() && !parent.is_empty() && user.is_empty())
                .then(|| (account.to_owned(), parent.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids_of_every_shape() {
        assert_eq!(parse_job_id("123"), Some(JobId::Plain("123")));
        assert_eq!(
            parse_job_id("123_4"),
            Some(JobId::ArrayTask {
                array: "123",
                task: 4
            })
        );
        assert_eq!(
            parse_job_id("123_[1-5%2]"),
            Some(JobId::ArrayPending {
                array: "123",
                index: "1-5%2"
            })
        );
        assert_eq!(parse_job_id("123+0"), Some(JobId::HetComponent("123+0")));
        for bad in [
            "",
            "123.batch",
            "x",
            "123_",
            "123_[]",
            "_4",
            "+1",
            "123+",
            "1_99999999999",
        ] {
            assert_eq!(parse_job_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn parents_of_accounts_only() {
        let parents =
            parse_account_parents("root||\nphys|root|\nphys||alice\nlab|phys|\n|x|\nodd\n");
        assert_eq!(
            parents,
            vec![
                ("phys".to_owned(), "root".to_owned()),
                ("lab".to_owned(), "phys".to_owned())
            ]
        );
    }

    #[test]
    fn each_read_has_its_own_delimiter_which_is_no_text_of_sacct() {
        let (a, b) = (delimiter(), delimiter());
        assert_ne!(a, b);
        assert_eq!(a.len(), "<>".len() + 16);
        assert!(!a.contains(['|', '\n', ' ']), "{a}");
        let q = between("2026-01-01", None, true, &a);
        assert!(q.args.contains(&format!("--delimiter={a}")), "{:?}", q.args);
    }

    #[test]
    fn submit_line_is_last() {
        assert!(FIELDS.ends_with(",SubmitLine"));
        assert_eq!(
            FIELDS.trim_end_matches(",SubmitLine"),
            FIELDS_WITHOUT_SUBMIT_LINE
        );
    }
}
