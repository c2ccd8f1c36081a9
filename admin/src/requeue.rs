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
//! fail half-way. The decisions are the core's
//! (`gpushare::mps::node::requeue`); this file runs the commands they
//! order.
//!
//! - Only a job Slurm still runs or completes on this node is requeued (a
//!   job requeued, or started elsewhere, meanwhile is left alone; one its
//!   user cancelled, where accounting tells: Slurm shows every job in its
//!   epilog as `COMPLETING`), and at
//!   most `MAX_REQUEUES` times (gpushare's own requeues, counted in the
//!   job's `AdminComment`; where it cannot be read, Slurm's `Restarts=`):
//!   then it fails with its refusal.
//! - The exclusion is gpushare's, not the user's: `<StateDir>/requeued`
//!   records whether gpushare added the node (not if the user had
//!   excluded it already), when, and the words it appended to the site's
//!   `AdminComment`. The epilog of the next share that ends on the node
//!   (room may have come back), or the node's timer once `LIFT_AFTER` has
//!   passed, takes out of the job's lists *as they are then* only this
//!   node and gpushare's words: what the user or an admin changed
//!   meanwhile stays. A job Slurm cannot be asked about stays recorded
//!   for the next try.
//! - No command runs under the record's lock, and one program spends at
//!   most [`BUDGET`] on them all, its waits for that lock included.
//!
//! A job that cannot be requeued (interactive, `--no-requeue`) fails with
//! the reason as before.
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

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gpushare::mps::lock_wait::LockWait;
use gpushare::mps::node::requeue::{
    comment_with, decide_lift, decide_requeue, requeue_words, requeues_in, shown_job, Exclusion,
    Exclusions, Lift, Requeue, ShownJob, LIFT_AFTER,
};
use gpushare::mps::state_dir;
use gpushare::shared::bounded;

/// How long one `scontrol` or `squeue` call may take.
pub const SCONTROL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one node program may spend on Slurm's commands for requeues
/// and exclusions: what is left undone is tried again later.
pub const BUDGET: Duration = Duration::from_secs(40);

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
    /// The node's admin took it off sharing (`gpu-mps disable`).
    Disabled,
    /// A lock the prolog needed stayed held past its wait (`lock_wait`).
    Busy,
}

impl Elsewhere {
    const ALL: [Elsewhere; 5] = [
        Self::OtherUsers,
        Self::MpsDaemon,
        Self::GpuFailed,
        Self::Disabled,
        Self::Busy,
    ];

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
            Self::Disabled => "disabled",
            Self::Busy => "busy",
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
            Self::Disabled => "where its admin disabled GPU sharing (gpu-mps disable)",
            Self::Busy => {
                "where a lock its prolog needed stayed held past the prolog's wait (the node's \
                 syslog names it)"
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

/// Job `job` as slurmctld records it, under the name `scontrol` must be
/// given: asked by its id, then, for an array task, asked again as
/// `ARRAYJOBID_TASKID`, whose answer must be that same job.
fn resolve(deadline: &Deadline, job: u32) -> Result<ShownJob, Failed> {
    let answer = scontrol(deadline, &["-o", "show", "job", &job.to_string()])?;
    let shown = shown_job(job, &answer).map_err(Failed::Unreadable)?;
    if shown.name.array.is_none() {
        return Ok(shown);
    }
    let name = shown.name.to_string();
    let again = shown_job(job, &scontrol(deadline, &["-o", "show", "job", &name])?)
        .map_err(Failed::Unreadable)?;
    if again.name != shown.name {
        return Err(Failed::Unreadable(format!(
            "job {job} was {name}, but scontrol show job {name} names {}",
            again.name
        )));
    }
    Ok(again)
}

/// Why a call to Slurm gave no answer to act on.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Failed {
    /// slurmctld knows no such job (ended and purged): nothing to do, ever.
    Gone(String),
    /// Its record cannot be read safely (text the user chose): nothing
    /// will be done for it.
    Unreadable(String),
    /// Slurm could not be asked now (no answer in time, down, out of this
    /// epilog's time): try again later.
    Later(String),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Gone(e) | Self::Unreadable(e) | Self::Later(e) => f.write_str(e),
        }
    }
}

/// The end of the time one node program may spend on Slurm's commands
/// here: every call gets what is left of it, at most [`SCONTROL_TIMEOUT`].
#[derive(Debug, Clone, Copy)]
pub struct Deadline(Instant);

impl Deadline {
    /// [`BUDGET`] from now.
    pub fn start() -> Self {
        Self(Instant::now() + BUDGET)
    }

    fn left(&self, what: &str) -> Result<Duration, Failed> {
        let left = self.0.saturating_duration_since(Instant::now());
        if left < Duration::from_millis(200) {
            return Err(Failed::Later(format!(
                "{what}: not run, this program's {} s for Slurm's commands are spent",
                BUDGET.as_secs()
            )));
        }
        Ok(left.min(SCONTROL_TIMEOUT))
    }
}

fn slurm(deadline: &Deadline, program: &str, args: &[&str]) -> Result<String, Failed> {
    let shown = format!("{program} {}", args.join(" "));
    let timeout = deadline.left(&shown)?;
    let mut cmd = Command::new(gpushare::shared::locations::slurm_command(program));
    cmd.args(args);
    let ran =
        bounded::run(cmd, None, timeout).map_err(|e| Failed::Later(format!("{shown}: {e}")))?;
    if ran.status.success() {
        return Ok(ran.stdout);
    }
    let err = format!("{shown}: {}", ran.stderr.trim());
    if ran.stderr.contains("Invalid job id") {
        Err(Failed::Gone(err))
    } else {
        Err(Failed::Later(err))
    }
}

fn scontrol(deadline: &Deadline, args: &[&str]) -> Result<String, Failed> {
    slurm(deadline, "scontrol", args)
}

/// The job's `AdminComment` as Slurm keeps it (`None`: none; blanks at
/// its end dropped), asked of `squeue` alone in its column, so that no
/// other field's text can pass for it.
fn admin_comment(deadline: &Deadline, name: &str) -> Result<Option<String>, Failed> {
    let out = slurm(
        deadline,
        "squeue",
        &["--noheader", "--jobs", name, "--Format", "admin_comment:0"],
    )?;
    let Some(text) = out.strip_suffix('\n') else {
        return Err(Failed::Gone(format!("squeue shows no job {name}")));
    };
    // squeue ends the column with a blank (22.05): blanks at its end are
    // not the comment's.
    let text = text.trim_end_matches(' ');
    Ok((!text.is_empty() && text != "(null)").then(|| text.to_owned()))
}

/// The state accounting recorded for the job's latest run (`CANCELLED
/// by UID`, `FAILED`, ...); `None` where it does not answer (no
/// accounting, slurmdbd down): then Slurm's own state decides alone.
fn accounted_state(deadline: &Deadline, name: &str) -> Option<String> {
    let args = ["--noheader", "--allocations", "--parsable2"];
    let args: Vec<&str> = args
        .into_iter()
        .chain(["--jobs", name, "--format", "State"])
        .collect();
    let out = slurm(deadline, "sacct", &args).ok()?;
    out.lines().next().map(|l| l.trim().to_owned())
}

/// How many jobs this node still keeps off itself (its record's entries).
pub fn kept_exclusions(state_dir: &Path) -> Result<usize, String> {
    if !state_dir.join(RECORD).exists() {
        return Ok(0);
    }
    with_record(state_dir, &Deadline::start(), |r| r.0.len())
}

/// Runs `f` on the record under its lock (no command runs under it),
/// waited for within what is left of `deadline`.
fn with_record<T>(
    state_dir: &Path,
    deadline: &Deadline,
    f: impl FnOnce(&mut Exclusions) -> T,
) -> Result<T, String> {
    let wait = LockWait::each(deadline.0.saturating_duration_since(Instant::now()));
    let lock = (LOCK, "the lock of the requeue record");
    state_dir::update_locked(state_dir, lock, RECORD, wait, |before| {
        let mut records = Exclusions::parse(before);
        let out = f(&mut records);
        (records.to_text(), out)
    })
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// gpushare's words in the job's `AdminComment` for its `n`th requeue,
/// appended to the site's.
fn our_comment(node: &str, n: u32, why: Elsewhere) -> String {
    requeue_words(node, n, why.why())
}

/// Requeues `job` and keeps it off `node` until a share ends there (or
/// [`LIFT_AFTER`] passes); what to log. `Err`: it was not requeued (the
/// job then fails with its refusal, as it would have), and why.
pub fn requeue_elsewhere(
    deadline: &Deadline,
    state_dir: &Path,
    job: u32,
    node: &str,
    why: Elsewhere,
) -> Result<String, String> {
    let shown = resolve(deadline, job).map_err(|e| e.to_string())?;
    let id = shown.name.to_string();
    let accounted = accounted_state(deadline, &id);
    // Read before the requeue: the site's words are kept, gpushare's
    // appended, and they count gpushare's requeues so far. Unread, the
    // comment is not written at all.
    let site = admin_comment(deadline, &id);
    let requeued = site
        .as_ref()
        .ok()
        .map(|c| c.as_deref().map_or(0, requeues_in));
    let (list, added) = match decide_requeue(&shown, node, accounted.as_deref(), requeued) {
        Requeue::Send { list, added } => (list, added),
        Requeue::LeaveAlone(why) | Requeue::Capped(why) => return Err(why),
    };
    scontrol(deadline, &["requeue", &id]).map_err(|e| e.to_string())?;
    let ours = our_comment(node, requeued.unwrap_or(shown.restarts) + 1, why);
    let mut update = vec![format!("jobid={id}"), format!("ExcNodeList={list}")];
    let comment_note = match &site {
        Ok(site) => {
            update.push(format!(
                "AdminComment={}",
                comment_with(site.as_deref(), &ours)
            ));
            String::new()
        }
        Err(e) => format!("; its AdminComment not read, so not written: {e}"),
    };
    let args: Vec<&str> = std::iter::once("update")
        .chain(update.iter().map(String::as_str))
        .collect();
    if let Err(e) = scontrol(deadline, &args) {
        return Ok(format!("requeued, but not kept off {node}: {e}"));
    }
    let entry = Exclusion {
        added,
        since: now(),
        comment: site.is_ok().then_some(ours),
    };
    let recorded = with_record(state_dir, deadline, |r| {
        r.0.insert(job, entry);
    });
    let recorded = match recorded {
        Ok(()) => String::new(),
        Err(e) => format!("; not recorded, so never taken back here: {e}"),
    };
    Ok(format!(
        "job {id} requeued from {node}, {}; kept off {node} until a share ends there or {} min \
         pass (ExcNodeList={list}{}){comment_note}{recorded}",
        why.why(),
        LIFT_AFTER.as_secs() / 60,
        if added { "" } else { ", the user's own" }
    ))
}

/// Which recorded exclusions to lift.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// Every one: a share ended on the node, room may have come back.
    All,
    /// Those older than [`LIFT_AFTER`] (the node's timer).
    Stale,
}

/// Takes back what gpushare added to the jobs this node kept off itself
/// (only this node from each job's `ExcNodeList` as it is now, and
/// gpushare's words from its `AdminComment`); what to log. A job Slurm
/// could not be asked about stays recorded, for the next try.
pub fn restore_exclusions(
    deadline: &Deadline,
    state_dir: &Path,
    node: &str,
    which: Which,
) -> Result<Vec<String>, String> {
    if !state_dir.join(RECORD).exists() {
        return Ok(Vec::new());
    }
    // Read under the lock, acted on without it.
    let records = with_record(state_dir, deadline, |r| r.clone())?;
    let jobs: Vec<u32> = match which {
        Which::All => records.0.keys().copied().collect(),
        Which::Stale => records.stale(now()),
    };
    let mut lines = Vec::new();
    let mut done = Vec::new();
    for job in jobs {
        let Some(entry) = records.0.get(&job) else {
            continue;
        };
        match lift(deadline, job, node, entry) {
            Ok(line) => {
                lines.push(line);
                done.push((job, entry.clone()));
            }
            Err(Failed::Later(e)) => {
                lines.push(format!("job {job}: exclusion kept, to lift later: {e}"));
            }
            Err(e) => {
                lines.push(format!("job {job}: nothing to give back: {e}"));
                done.push((job, entry.clone()));
            }
        }
    }
    // Only the entries acted on leave: one a new requeue wrote meanwhile
    // stays.
    with_record(state_dir, deadline, |r| {
        for (job, entry) in done {
            if r.0.get(&job) == Some(&entry) {
                r.0.remove(&job);
            }
        }
    })?;
    Ok(lines)
}

fn lift(deadline: &Deadline, job: u32, node: &str, entry: &Exclusion) -> Result<String, Failed> {
    let shown = resolve(deadline, job)?;
    let name = shown.name.to_string();
    let comment = match &entry.comment {
        Some(_) => admin_comment(deadline, &name)?,
        None => None,
    };
    match decide_lift(&shown, node, entry, comment.as_deref()) {
        Lift::Nothing(why) => Ok(why),
        Lift::Update { list, comment } => {
            let mut args = vec!["update".to_owned(), format!("jobid={name}")];
            if let Some(list) = &list {
                args.push(format!("ExcNodeList={list}"));
            }
            if let Some(comment) = &comment {
                args.push(format!("AdminComment={comment}"));
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            scontrol(deadline, &args)?;
            Ok(match list {
                Some(list) => format!("job {name} may run here again (ExcNodeList={list})"),
                None => format!("job {name}: gpushare's words taken out of its AdminComment"),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mark_is_a_refusal_reason_of_the_metrics() {
        for e in Elsewhere::ALL {
            assert!(gpushare::mps::metrics::REFUSAL_REASONS.contains(&e.word()));
            assert_eq!(Elsewhere::from_reason(e.word()), Some(e));
        }
        assert_eq!(Elsewhere::from_reason("size"), None);
    }

    #[test]
    fn gpushares_words_start_with_its_mark() {
        let ours = our_comment("gpu01", 2, Elsewhere::OtherUsers);
        assert!(ours.starts_with("gpushare: requeued from gpu01 (requeue 2 of 3), whose GPUs"));
        assert_eq!(requeues_in(&ours), 2);
        assert!(ours.ends_with("until a share ends there or 10 min pass"));
        assert!(!ours.contains('\t') && !ours.contains('\n'));
    }

    #[test]
    fn a_spent_budget_runs_nothing() {
        let spent = Deadline(Instant::now());
        assert!(matches!(
            scontrol(&spent, &["ping"]),
            Err(Failed::Later(e)) if e.contains("spent")
        ));
    }
}
