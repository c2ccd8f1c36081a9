//! What jobs used, as accounting recorded it, for `gpu-qos advise`: each
//! job and its steps (`sacct -P --noconvert`, no `-X`), and the command
//! lines of the jobs advised (`SubmitLine`, read apart).
//!
//! The first read holds no text a user chose: every field is Slurm's
//! (ids, names, TRES, states, seconds) but `AdminComment`, which only
//! operators and root write, and which is last, so that a `|` in it
//! shifts nothing. `SubmitLine` is the user's own text (a newline in an
//! argument starts a new line of sacct's answer): it is read in a second
//! query, for the jobs advised only, and a job whose line starts twice in
//! that answer gets none ([`parse_submit_lines`]).

use std::collections::{BTreeMap, BTreeSet};

use super::accounted::{parse_job_id, JobId};
use super::Query;

/// The fields of [`between`], in order; `AdminComment` last.
pub const FIELDS: &str = "JobID,User,QOS,Partition,Reservation,NodeList,AllocTRES,State,\
     ElapsedRaw,TRESUsageInMax,TRESUsageInAve,AdminComment";

const FIELD_COUNT: usize = 12;

/// Whose jobs are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Whose {
    /// One user's (`-u`): the caller's own, or one named.
    User(String),
    /// Every user's Slurm shows the caller (`-a`).
    Everyone,
}

/// Every job of `whose` that ran between `since` and `until` (sacct's
/// `-S`/`-E` forms), with its steps; figures unconverted (bytes, counts).
pub fn between(whose: &Whose, since: &str, until: &str) -> Query {
    let (flag, who, name) = match whose {
        Whose::User(u) => ("-u", Some(u.as_str()), format!("user-{u}")),
        Whose::Everyone => ("-a", None, "all".to_owned()),
    };
    let mut args = vec!["-P", "-n", "--noconvert", flag];
    args.extend(who);
    args.extend(["-S", since, "-E", until, "-o", FIELDS]);
    Query::new(
        "sacct",
        &args,
        &format!("sacct-advise-{name}-{since}-{until}"),
    )
}

/// One field of each of `jobs` (`sacct -X -P -n -j LIST -o JobID,FIELD`),
/// its answer kept under `key` and the jobs named.
fn field_of_jobs(jobs: &[String], field: &str, key: &str) -> Query {
    let list = jobs.join(",");
    let first = jobs.first().map_or("", String::as_str);
    let last = jobs.last().map_or("", String::as_str);
    let fields = format!("JobID,{field}");
    Query::new(
        "sacct",
        &["-a", "-X", "-P", "-n", "-j", &list, "-o", &fields],
        &format!("sacct-{key}-{first}-{last}-{}", jobs.len()),
    )
}

/// The `SubmitLine` of each of `jobs` (at most [`LINES_PER_QUERY`]).
pub fn submit_lines(jobs: &[String]) -> Query {
    field_of_jobs(jobs, "SubmitLine", "submit-lines")
}

/// The `SystemComment` of each of `jobs` (at most [`LINES_PER_QUERY`]):
/// where the node timer keeps gpushare's words of a job whose
/// `AdminComment` is a site tool's. Read apart, as the command lines are,
/// and only for the jobs whose `AdminComment` holds text but none of
/// gpushare's words; [`parse_submit_lines`] reads the answer.
pub fn system_comments(jobs: &[String]) -> Query {
    field_of_jobs(jobs, "SystemComment", "system-comments")
}

/// How many jobs one [`submit_lines`] names.
pub const LINES_PER_QUERY: usize = 100;

/// One job as accounting recorded it, with what its steps used.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsedJob {
    /// As sacct prints it: `123`, `123_4`, `123+0`.
    pub id: String,
    pub user: String,
    pub qos: String,
    pub partition: String,
    pub reservation: Option<String>,
    pub nodes: Option<String>,
    pub alloc_tres: String,
    /// The state's first word (`COMPLETED`, `CANCELLED`).
    pub state: String,
    pub elapsed_s: Option<u64>,
    pub admin_comment: String,
    /// Its `SystemComment`, where it was read ([`system_comments`]).
    pub system_comment: String,
    /// Each step's `TRESUsageInMax`.
    pub steps_max: Vec<String>,
    /// Each step's `TRESUsageInAve`.
    pub steps_ave: Vec<String>,
}

/// A line of sacct's answer left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Unreadable {
    pub line: usize,
    pub reason: String,
}

/// The job a JobID names, and its step (`.batch`, `.0`) if any.
fn split_step(id: &str) -> Option<(&str, Option<&str>)> {
    let (job, step) = match id.split_once('.') {
        Some((job, step)) if !step.is_empty() => (job, Some(step)),
        Some(_) => return None,
        None => (id, None),
    };
    match parse_job_id(job)? {
        JobId::ArrayPending { .. } => None,
        _ => Some((job, step)),
    }
}

/// Reads [`between`]'s answer: jobs in sacct's order, each with its
/// steps' figures. A step whose job line was not read, and a line that is
/// not a record, are named. A line with too few fields right after a
/// record continues its `AdminComment` (an operator's newline).
pub fn parse(text: &str) -> (Vec<UsedJob>, Vec<Unreadable>) {
    let mut jobs: Vec<UsedJob> = Vec::new();
    let mut at: BTreeMap<String, usize> = BTreeMap::new();
    let mut bad = Vec::new();
    let mut continues: Option<usize> = None;
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        if raw.trim().is_empty() {
            continues = None;
            continue;
        }
        let f: Vec<&str> = raw.splitn(FIELD_COUNT, '|').collect();
        if f.len() < FIELD_COUNT {
            match continues.and_then(|i| jobs.get_mut(i)) {
                Some(job) => {
                    job.admin_comment.push('\n');
                    job.admin_comment.push_str(raw);
                }
                None => bad.push(Unreadable {
                    line,
                    reason: format!("{} fields, expected {FIELD_COUNT}", f.len()),
                }),
            }
            continue;
        }
        continues = None;
        let Some((job, step)) = split_step(f[0].trim()) else {
            bad.push(Unreadable {
                line,
                reason: format!("\"{}\" is not a job or step id", f[0]),
            });
            continue;
        };
        let text = |i: usize| f.get(i).map_or("", |s| s.trim()).to_owned();
        if let Some(step) = step {
            match at.get(job).and_then(|&i| jobs.get_mut(i)) {
                Some(j) => {
                    j.steps_max.push(text(9));
                    j.steps_ave.push(text(10));
                }
                None => bad.push(Unreadable {
                    line,
                    reason: format!("step {job}.{step} of a job not listed before it"),
                }),
            }
            continue;
        }
        if at.contains_key(job) {
            bad.push(Unreadable {
                line,
                reason: format!("job {job} listed twice"),
            });
            continue;
        }
        let given = |i: usize| {
            Some(text(i)).filter(|s| !s.is_empty() && s != "None assigned" && s != "(null)")
        };
        at.insert(job.to_owned(), jobs.len());
        continues = Some(jobs.len());
        jobs.push(UsedJob {
            id: job.to_owned(),
            user: text(1),
            qos: text(2),
            partition: text(3),
            reservation: given(4),
            nodes: given(5),
            alloc_tres: text(6),
            state: text(7)
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned(),
            elapsed_s: text(8).parse().ok(),
            // Kept as written: only the words of gpushare are read of it.
            admin_comment: f.get(11).map_or("", |s| s).to_owned(),
            system_comment: String::new(),
            steps_max: Vec::new(),
            steps_ave: Vec::new(),
        });
    }
    (jobs, bad)
}

/// Reads [`submit_lines`]'s answer for `asked`: each job's line, its
/// continuation lines joined with newlines. A line starts a job's record
/// only as `ID|` of a job asked for; any other line continues the record
/// before it. A job whose record starts twice (a user's line holding a
/// newline and text shaped like a record) gets no line: neither can be
/// told to be Slurm's.
pub fn parse_submit_lines(text: &str, asked: &[String]) -> BTreeMap<String, String> {
    let asked: BTreeSet<&str> = asked.iter().map(String::as_str).collect();
    let mut found: BTreeMap<String, String> = BTreeMap::new();
    let mut twice: BTreeSet<String> = BTreeSet::new();
    let mut current: Option<String> = None;
    for raw in text.lines() {
        let start = raw
            .split_once('|')
            .filter(|(id, _)| asked.contains(id.trim()));
        match start {
            Some((id, line)) => {
                let id = id.trim().to_owned();
                if found.insert(id.clone(), line.to_owned()).is_some() {
                    twice.insert(id.clone());
                }
                current = Some(id);
            }
            None => {
                if let Some(l) = current.as_ref().and_then(|id| found.get_mut(id)) {
                    l.push('\n');
                    l.push_str(raw);
                }
            }
        }
    }
    found.retain(|id, line| !twice.contains(id) && !line.trim().is_empty());
    for line in found.values_mut() {
        let trimmed = line.trim_end().len();
        line.truncate(trimmed);
    }
    found
}

/// The largest value of `name` (`gres/gpumem`) in any of `tres` (TRES
/// strings as `--noconvert` prints them: `gres/gpumem=1048576,...`);
/// `None` where none names it with a whole number.
pub fn largest(tres: &[String], name: &str) -> Option<u64> {
    tres.iter()
        .flat_map(|t| t.split(','))
        .filter_map(|item| {
            let (n, v) = item.trim().split_once('=')?;
            (n == name).then(|| v.parse::<u64>().ok()).flatten()
        })
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_name_whose_jobs_and_keep_admin_comment_last() {
        let q = between(&Whose::User("alice".into()), "now-7days", "now");
        assert_eq!(
            q.shown(),
            format!("sacct -P -n --noconvert -u alice -S now-7days -E now -o {FIELDS}")
        );
        assert_eq!(q.key, "sacct-advise-user-alice-now-7days-now");
        let q = between(&Whose::Everyone, "2026-01-01", "now");
        assert!(q.args.contains(&"-a".to_owned()));
        assert!(FIELDS.ends_with(",AdminComment"));
        assert_eq!(FIELDS.split(',').count(), FIELD_COUNT);
        let q = submit_lines(&["7".into(), "9_2".into()]);
        assert_eq!(q.shown(), "sacct -a -X -P -n -j 7,9_2 -o JobID,SubmitLine");
    }

    const JOB: &str =
        "alice|normal|gpu||node1|billing=1,cpu=1,gres/gpu:a40=1,gres/gpu=1|COMPLETED|300";

    #[test]
    fn jobs_with_their_steps_and_the_comment_whole() {
        let text = format!(
            "101|{JOB}|||site | text; gpushare-usage: x\n\
             101.batch||||||||300|cpu=00:00:01,gres/gpumem=1048576|gres/gpuutil=30|\n\
             101.0||||||||300|gres/gpumem=4194304,gres/gpuutil=90|gres/gpuutil=40|\n\
             102_3|bob|normal|gpu|res1|node1|gres/mps=50|CANCELLED by 0|12|||\n\
             more of the comment\n\
             102_3.batch||||||||12|||\n\
             103+0|{JOB}|||\n\
             9.batch||||||||1|||\n\
             x|{JOB}|||\n\
             101|{JOB}|||\n\
             short|line\n"
        );
        let (jobs, bad) = parse(&text);
        let ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(ids, ["101", "102_3", "103+0"]);
        assert_eq!(jobs[0].admin_comment, "site | text; gpushare-usage: x");
        assert_eq!(jobs[0].steps_max.len(), 2);
        assert_eq!(largest(&jobs[0].steps_max, "gres/gpumem"), Some(4_194_304));
        assert_eq!(largest(&jobs[0].steps_ave, "gres/gpuutil"), Some(40));
        assert_eq!(largest(&jobs[0].steps_max, "gres/gpu"), None);
        assert_eq!(jobs[0].elapsed_s, Some(300));
        assert_eq!(jobs[0].reservation, None);
        assert_eq!(jobs[1].state, "CANCELLED");
        assert_eq!(jobs[1].reservation.as_deref(), Some("res1"));
        assert_eq!(jobs[1].admin_comment, "\nmore of the comment");
        assert_eq!(
            bad.iter().map(|b| b.line).collect::<Vec<_>>(),
            vec![8, 9, 10, 11]
        );
    }

    #[test]
    fn a_users_newline_never_makes_a_record() {
        let asked: Vec<String> = ["7", "8", "9"].iter().map(|s| (*s).to_owned()).collect();
        // Job 7's line holds a newline and text shaped like job 8's record.
        let text = "7|sbatch --wrap=\"a\n8|sbatch --gres=gpu:h100:8 evil.sh\"\n\
                    8|sbatch --gres=gpu:a40:1 job.sh\n\
                    9|srun --gres=gpu:1 python\n  x.py\n\
                    10|sbatch other\n";
        let lines = parse_submit_lines(text, &asked);
        assert_eq!(lines.get("8"), None);
        assert_eq!(
            lines.get("7").map(String::as_str),
            Some("sbatch --wrap=\"a")
        );
        // A job not asked for is a continuation, never a record.
        assert_eq!(
            lines.get("9").map(String::as_str),
            Some("srun --gres=gpu:1 python\n  x.py\n10|sbatch other")
        );
        assert!(parse_submit_lines("7|\n", &asked).is_empty());
    }
}
