//! Sending a share that only fits beside another user's MPS server
//! elsewhere (`OtherUsers=refuse`, where gpushare places).
//!
//! Slurm sees the node's free mps units and keeps sending share jobs
//! there, though each GPU serves one other user's clients: refused, each
//! would fail at start, and one user's idle small share on every GPU of a
//! node would make it a trap for everyone else's. So the prolog that
//! refuses such a share marks it ([`mark`]), and the job's epilog requeues
//! it (`scontrol requeue`: it is pending again after Slurm's short requeue
//! delay) and adds the node to its `ExcNodeList`, so that Slurm starts it
//! on a node that can serve it. The epilog does it, not the prolog: a
//! requeue makes slurmd kill the job's running prolog, which would then
//! fail half-way. The exclusion is
//! gpushare's, not the user's: it is recorded in `<StateDir>/requeued`
//! and taken back by the epilog of the next share that ends on the node
//! (room may have come back), restoring the job's own list. The job's
//! `AdminComment` says why it was requeued. A job that
//! cannot be requeued (interactive, `--no-requeue`) fails with the reason
//! as before.
//!
//! Every `scontrol` call is bounded in time ([`SCONTROL_TIMEOUT`]) and
//! names the job as Slurm must be told it: an array task as
//! `ARRAYJOBID_TASKID`. The last-started task of an array keeps the
//! array's job id (Slurm reuses the array's record), so the bare id that
//! slurmd gives its epilog (`SLURM_JOB_ID`) names the whole array to
//! `scontrol requeue` and `update`: every task would be requeued. slurmd
//! does not give a Prolog or Epilog the array ids (22.05 to 26.05,
//! `_build_env` in `src/plugins/prep/script/prep_script_slurmd.c`), so the
//! task's name comes from slurmctld's record of the job slurmd named
//! ([`resolve`]): the one record whose `JobId=` is that job, read from the
//! fields Slurm prints before the user's job name, checked again under
//! the name it is acted on with.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use gpushare::mps::state_dir;
use gpushare::shared::bounded;

/// How long one `scontrol` call may take.
pub const SCONTROL_TIMEOUT: Duration = Duration::from_secs(10);

/// The record of the exclusions gpushare added, in the state directory.
const RECORD: &str = "requeued";
const LOCK: &str = "requeued.lock";

fn mark_name(job: u32) -> String {
    format!("requeue-{job}")
}

/// Why a share was refused on a node that another node may serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elsewhere {
    /// Only GPUs running another user's MPS server have room here.
    OtherUsers,
    /// The GPU's MPS daemon could not serve it here (`MPSFailure=refuse`).
    MpsDaemon,
    /// Only GPUs set aside as failed had room, or Slurm chose one.
    GpuFailed,
}

impl Elsewhere {
    const ALL: [Elsewhere; 3] = [Self::OtherUsers, Self::MpsDaemon, Self::GpuFailed];

    /// The refusals another node may serve, by the prolog's refusal
    /// reason (`gpushare_refusals_total{reason}`).
    pub fn from_reason(reason: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.word() == reason)
    }

    /// The word in the mark file: the refusal reason.
    fn word(self) -> &'static str {
        match self {
            Self::OtherUsers => "other_users",
            Self::MpsDaemon => "mps_daemon",
            Self::GpuFailed => "gpu_failed",
        }
    }

    /// What the node lacks, after "requeued from NODE, ".
    fn why(self) -> &'static str {
        match self {
            Self::OtherUsers => {
                "whose GPUs with room serve another user's MPS server (OtherUsers=refuse)"
            }
            Self::MpsDaemon => {
                "where the MPS daemon of its GPU could not serve it (MPSFailure=refuse; the \
                 node's syslog says why)"
            }
            Self::GpuFailed => {
                "where the only GPUs for it are set aside as failed (gpu-mps status on the node \
                 says why)"
            }
        }
    }
}

/// Marks `job`, refused on this node, for its epilog to send elsewhere.
pub fn mark(state_dir: &Path, job: u32, why: Elsewhere) -> Result<(), String> {
    state_dir::replace_file(state_dir, &mark_name(job), why.word().as_bytes(), 0o600)
        .map_err(|e| e.to_string())
}

/// Why `job` was marked ([`mark`]), if it was; the mark is removed. A mark
/// without a word (written by gpushare 0.1) is for other users' servers.
pub fn take_mark(state_dir: &Path, job: u32) -> Option<Elsewhere> {
    let path = state_dir.join(mark_name(job));
    let text = std::fs::read_to_string(&path).ok()?;
    std::fs::remove_file(&path).ok()?;
    Some(Elsewhere::from_reason(text.trim()).unwrap_or(Elsewhere::OtherUsers))
}

/// A job as `scontrol` must name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobName {
    /// Its own job id (what slurmd calls `SLURM_JOB_ID`).
    pub job: u32,
    /// `(ArrayJobId, ArrayTaskId)` of an array task.
    pub array: Option<(u32, u32)>,
}

impl std::fmt::Display for JobName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.array {
            Some((array, task)) => write!(f, "{array}_{task}"),
            None => write!(f, "{}", self.job),
        }
    }
}

/// What the epilog reads of a job in `scontrol -o show job`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShownJob {
    pub name: JobName,
    /// Its `ExcNodeList` (`None`: `(null)` or empty).
    pub excluded: Option<String>,
}

/// The identity Slurm prints before the job's name, which its user chose:
/// `JobId=N [ArrayJobId=A ArrayTaskId=T [ArrayTaskThrottle=K] |
/// HetJobId=H HetJobOffset=O] JobName=`. `None`: not such a line. The
/// task id is the text Slurm printed (a range on a record of pending tasks).
fn record_head(line: &str) -> Option<(u32, Option<(u32, &str)>)> {
    let mut words = line.split(' ');
    let job = words.next()?.strip_prefix("JobId=")?.parse().ok()?;
    let mut array_job = None;
    let mut task = None;
    for word in words {
        if word.starts_with("JobName=") {
            return match (array_job, task) {
                (Some(a), Some(t)) => Some((job, Some((a, t)))),
                (None, None) => Some((job, None)),
                _ => None,
            };
        }
        let (key, value) = word.split_once('=')?;
        match key {
            "ArrayJobId" if array_job.is_none() => array_job = Some(value.parse().ok()?),
            "ArrayTaskId" if task.is_none() && array_job.is_some() => task = Some(value),
            "ArrayTaskThrottle" | "HetJobId" | "HetJobOffset" => {
                value.parse::<u32>().ok()?;
            }
            _ => return None,
        }
    }
    None
}

/// `ExcNodeList` in one record: the value of the one
/// `ReqNodeList=… ExcNodeList=… NodeList=…` run of fields, as Slurm prints
/// them together. `Err`: none, or more than one (a job name, comment or
/// path can hold that text; which one is Slurm's cannot be told).
fn excluded_in(record: &str) -> Result<Option<String>, String> {
    let words: Vec<&str> = record.split_whitespace().collect();
    let found: Vec<&str> = words
        .windows(3)
        .filter(|w| w[0].starts_with("ReqNodeList=") && w[2].starts_with("NodeList="))
        .filter_map(|w| w[1].strip_prefix("ExcNodeList="))
        .collect();
    match found.as_slice() {
        [one] => Ok((!one.is_empty() && *one != "(null)").then(|| (*one).to_owned())),
        [] => Err("its record shows no ExcNodeList".to_owned()),
        _ => Err(
            "its record shows ExcNodeList more than once (text the user chose repeats it), so \
             its own list cannot be told"
                .to_owned(),
        ),
    }
}

/// Job `job` in `scontrol -o show job`'s answer (which lists every task
/// of an array asked by the array's id): the one record whose `JobId=` is
/// `job`. `Err`: none, several (a job name with a line break can forge a
/// line), or a record that is no started task (a range of array tasks).
pub fn shown_job(job: u32, answer: &str) -> Result<ShownJob, String> {
    let mine: Vec<(&str, Option<(u32, &str)>)> = answer
        .lines()
        .filter_map(|l| record_head(l).map(|h| (l, h)))
        .filter(|(_, (id, _))| *id == job)
        .map(|(l, (_, array))| (l, array))
        .collect();
    let (line, array) = match mine.as_slice() {
        [one] => *one,
        [] => return Err(format!("scontrol shows no record of job {job}")),
        _ => {
            return Err(format!(
                "scontrol shows {} records with JobId={job}",
                mine.len()
            ))
        }
    };
    let array = match array {
        None => None,
        Some((array_job, task)) => Some((
            array_job,
            task.parse::<u32>()
                .map_err(|_| format!("job {job} is no single array task (ArrayTaskId={task})"))?,
        )),
    };
    let excluded = excluded_in(line).map_err(|e| format!("job {job}: {e}"))?;
    Ok(ShownJob {
        name: JobName { job, array },
        excluded,
    })
}

/// Job `job` as slurmctld records it, under the name `scontrol` must be
/// given: asked by its id, then, for an array task, asked again as
/// `ARRAYJOBID_TASKID`, whose answer must be that same job.
pub fn resolve(job: u32) -> Result<ShownJob, String> {
    let shown = shown_job(job, &scontrol(&["-o", "show", "job", &job.to_string()])?)?;
    if shown.name.array.is_none() {
        return Ok(shown);
    }
    let name = shown.name.to_string();
    let again = shown_job(job, &scontrol(&["-o", "show", "job", &name])?)?;
    if again.name != shown.name {
        return Err(format!(
            "job {job} was {name}, but scontrol show job {name} names {}",
            again.name
        ));
    }
    Ok(again)
}

/// `list` with `node` added (Slurm reads comma lists and host ranges).
pub fn with_node(list: Option<&str>, node: &str) -> String {
    match list {
        Some(list) if list.split(',').any(|n| n == node) => list.to_owned(),
        Some(list) => format!("{list},{node}"),
        None => node.to_owned(),
    }
}

/// The record's text: one job a line, `<job> <its own ExcNodeList or ->`.
fn record_text(records: &BTreeMap<u32, Option<String>>) -> String {
    records
        .iter()
        .map(|(job, own)| format!("{job} {}\n", own.as_deref().unwrap_or("-")))
        .collect()
}

fn parse_record(text: &str) -> BTreeMap<u32, Option<String>> {
    text.lines()
        .filter_map(|l| {
            let (job, own) = l.split_once(' ')?;
            let own = (own != "-").then(|| own.to_owned());
            Some((job.parse().ok()?, own))
        })
        .collect()
}

fn scontrol(args: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new(gpushare::shared::locations::slurm_command("scontrol"));
    cmd.args(args);
    let shown = format!("scontrol {}", args.join(" "));
    let ran = bounded::run(cmd, None, SCONTROL_TIMEOUT).map_err(|e| format!("{shown}: {e}"))?;
    if ran.status.success() {
        Ok(ran.stdout)
    } else {
        Err(format!("{shown}: {}", ran.stderr.trim()))
    }
}

/// Runs `f` on the record under its lock.
fn with_record<T>(
    state_dir: &Path,
    f: impl FnOnce(&mut BTreeMap<u32, Option<String>>) -> T,
) -> Result<T, String> {
    state_dir::update_locked(state_dir, LOCK, RECORD, |before| {
        let mut records = parse_record(before);
        let out = f(&mut records);
        (record_text(&records), out)
    })
}

/// Requeues `job` and keeps it off `node` until a share ends there; what
/// to log. `Err`: it could not be requeued (the job then fails with its
/// refusal, as it would have).
pub fn requeue_elsewhere(
    state_dir: &Path,
    job: u32,
    node: &str,
    why: Elsewhere,
) -> Result<String, String> {
    let shown = resolve(job)?;
    let id = shown.name.to_string();
    let own = shown.excluded;
    scontrol(&["requeue", &id])?;
    let list = with_node(own.as_deref(), node);
    with_record(state_dir, |r| {
        r.entry(job).or_insert_with(|| own.clone());
    })?;
    // What the user sees in `scontrol show job`: why it left the node.
    let comment = format!(
        "AdminComment=gpushare: requeued from {node}, {}; kept off {node} until a share ends \
         there",
        why.why()
    );
    let excluded = scontrol(&[
        "update",
        &format!("jobid={id}"),
        &format!("ExcNodeList={list}"),
        &comment,
    ]);
    Ok(match excluded {
        Ok(_) => format!(
            "requeued from {node}, {}; kept off {node} until a share ends there \
             (ExcNodeList={list})",
            why.why()
        ),
        Err(e) => format!("requeued, but not kept off {node}: {e}"),
    })
}

/// Gives every job this node kept off itself its own `ExcNodeList`
/// back; what to log.
pub fn restore_exclusions(state_dir: &Path) -> Result<Vec<String>, String> {
    if !state_dir.join(RECORD).exists() {
        return Ok(Vec::new());
    }
    with_record(state_dir, |records| {
        let taken = std::mem::take(records);
        taken
            .into_iter()
            .map(|(job, own)| {
                let list = own.unwrap_or_default();
                let given_back = resolve(job).and_then(|shown| {
                    scontrol(&[
                        "update",
                        &format!("jobid={}", shown.name),
                        &format!("ExcNodeList={list}"),
                    ])
                    .map(|_| shown.name)
                });
                match given_back {
                    Ok(name) => format!("job {name} may run here again (ExcNodeList={list})"),
                    // Ended or started elsewhere since: nothing to give back.
                    Err(e) => format!("job {job}: its exclusion not taken back: {e}"),
                }
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One record of `scontrol -o show job` as 22.05 to 26.05 print it
    /// (`slurm_sprint_job_info`), cut to the fields around the ones read.
    fn record(head: &str, name: &str, exc: &str) -> String {
        format!(
            "{head} JobName={name} UserId=ben(1001) GroupId=ben(1001) MCS_label=N/A \
             Priority=1 Nice=0 Account=ben QOS=normal JobState=RUNNING Reason=None \
             Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 \
             Partition=mps AllocNode:Sid=login:1 ReqNodeList=(null) ExcNodeList={exc} \
             NodeList=gpu01 BatchHost=gpu01 NumNodes=1 Command=(null) WorkDir=/home/ben"
        )
    }

    #[test]
    fn the_node_joins_the_jobs_own_exclusions() {
        let shown = shown_job(7, &record("JobId=7", "x", "(null)"));
        assert_eq!(shown.map(|s| s.excluded), Ok(None));
        assert_eq!(with_node(None, "gpu01"), "gpu01");
        let own = shown_job(7, &record("JobId=7", "x", "gpu03,gpu[05-06]"));
        assert_eq!(
            own.map(|s| s.excluded),
            Ok(Some("gpu03,gpu[05-06]".to_owned()))
        );
        assert_eq!(
            with_node(Some("gpu03,gpu[05-06]"), "gpu01"),
            "gpu03,gpu[05-06],gpu01"
        );
        assert_eq!(with_node(Some("gpu01,gpu03"), "gpu01"), "gpu01,gpu03");
    }

    #[test]
    fn the_last_task_of_an_array_is_named_as_its_task_not_the_array() {
        // Asked by the array's id (the last-started task keeps it), scontrol
        // lists every task; job 40 is task 2, the others are 41 and 42.
        let answer = [
            record("JobId=41 ArrayJobId=40 ArrayTaskId=0", "a", "gpu01"),
            record("JobId=42 ArrayJobId=40 ArrayTaskId=1", "a", "gpu01"),
            record(
                "JobId=40 ArrayJobId=40 ArrayTaskId=2 ArrayTaskThrottle=2",
                "a",
                "gpu02",
            ),
        ]
        .join("\n");
        let shown = shown_job(40, &answer).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            shown.name,
            JobName {
                job: 40,
                array: Some((40, 2))
            }
        );
        assert_eq!(shown.name.to_string(), "40_2");
        assert_eq!(shown.excluded.as_deref(), Some("gpu02"));
        let task = shown_job(42, &answer).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(task.name.to_string(), "40_1");
        // A plain job and a heterogeneous job's component keep their id.
        let het = record("JobId=9 HetJobId=8 HetJobOffset=1", "h", "(null)");
        assert_eq!(
            shown_job(9, &het).map(|s| s.name.to_string()),
            Ok("9".to_owned())
        );
        // The record of the pending tasks is no started task.
        let pending = record("JobId=50 ArrayJobId=50 ArrayTaskId=3-9%2", "a", "(null)");
        assert!(shown_job(50, &pending).is_err());
        assert!(shown_job(43, &answer).is_err());
    }

    #[test]
    fn text_the_user_chose_never_passes_for_slurms_fields() {
        // A job name that holds ExcNodeList= comes before Slurm's field.
        let named = record("JobId=7", "ExcNodeList=foo", "(null)");
        assert_eq!(shown_job(7, &named).map(|s| s.excluded), Ok(None));
        let named = record("JobId=7", "x ExcNodeList=foo", "gpu03");
        assert_eq!(
            shown_job(7, &named).map(|s| s.excluded),
            Ok(Some("gpu03".to_owned()))
        );
        // The whole run of fields forged in the name: which is Slurm's
        // cannot be told, so nothing is acted on.
        let forged = record(
            "JobId=7",
            "x ReqNodeList=(null) ExcNodeList=foo NodeList=gpu01",
            "gpu03",
        );
        assert!(shown_job(7, &forged).is_err());
        // A name with a line break that starts a record of its own.
        let split = record("JobId=7", &record("x\nJobId=7", "y", "foo"), "gpu03");
        assert!(shown_job(7, &split).is_err());
        // A line break alone leaves the record's head without its fields.
        let broken = record("JobId=7", "x\ny", "gpu03");
        assert!(shown_job(7, &broken).is_err());
        // Another job's name cannot claim this job's id either.
        let other = record("JobId=8", "JobId=7", "foo");
        assert!(shown_job(7, &other).is_err());
        assert!(shown_job(7, "JobId=7x JobName=a").is_err());
    }

    #[test]
    fn every_mark_is_a_refusal_reason_of_the_metrics() {
        for e in Elsewhere::ALL {
            assert!(gpushare::mps::metrics::REFUSAL_REASONS.contains(&e.word()));
            assert_eq!(Elsewhere::from_reason(e.word()), Some(e));
        }
        assert_eq!(Elsewhere::from_reason("size"), None);
    }

    #[test]
    fn the_record_reads_back() {
        let records: BTreeMap<u32, Option<String>> =
            [(7, None), (9, Some("gpu[03-04]".to_owned()))]
                .into_iter()
                .collect();
        let text = record_text(&records);
        assert_eq!(text, "7 -\n9 gpu[03-04]\n");
        assert_eq!(parse_record(&text), records);
        assert_eq!(parse_record("x y\n7\n"), BTreeMap::new());
    }
}
