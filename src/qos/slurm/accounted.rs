//! The jobs accounting recorded (`sacct -a -X -P`), read for `gpu-qos
//! replay`: one record per submission as the job ran (QOS, partition,
//! account and user after Slurm's defaults), with the request as typed
//! (`SubmitLine`, which sacct lists from Slurm 21.08: `src/sacct/sacct.c`)
//! and as accounting counted it (`ReqTRES`).

use super::Query;

/// The fields read, in order. `SubmitLine` is last: it is the user's own
/// text and may hold the `|` sacct separates fields with.
pub const FIELDS: &str = "JobID,User,Account,Partition,QOS,NNodes,Reservation,ReqTRES,SubmitLine";
/// The same without `SubmitLine`, for a release older than 21.08.
pub const FIELDS_WITHOUT_SUBMIT_LINE: &str =
    "JobID,User,Account,Partition,QOS,NNodes,Reservation,ReqTRES";

/// Every job of every user submitted between `since` and `until` (Slurm's
/// date forms, `2026-01-31`, `now-7days`), one record per job (`-X`: no
/// steps). `with_submit_line`: false on a release without the field.
pub fn between(since: &str, until: Option<&str>, with_submit_line: bool) -> Query {
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
            "-S",
            since,
            "-E",
            until,
            "-o",
            fields,
        ],
        &format!("sacct-replay-{since}-{until}"),
    )
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
    fn submit_line_is_last() {
        assert!(FIELDS.ends_with(",SubmitLine"));
        assert_eq!(
            FIELDS.trim_end_matches(",SubmitLine"),
            FIELDS_WITHOUT_SUBMIT_LINE
        );
    }
}
