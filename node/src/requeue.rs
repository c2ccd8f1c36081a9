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
//!   epilog as `COMPLETING`), and only for the run the prolog marked (its
//!   boot and restart count: [`Marked::names_run`]). Refusals met at the
//!   job's start count, at most `MAX_REQUEUES` times (gpushare's own
//!   requeues, counted in the job's `AdminComment`; where that count
//!   cannot be read, Slurm's `Restarts=`): then it fails with its refusal.
//!   Refusals made by the node's own state never count.
//! - The exclusion is gpushare's, not the user's: the record in the
//!   node's kept directory (`/var/lib/gpushare/kept-of-<StateDir>`: it
//!   outlives a reboot) keeps whether gpushare added the node (not if the
//!   user had excluded it already), why, what the node's state must let
//!   in again (the job's user and units, the boot and MPS setup), and the
//!   words it appended to the site's `AdminComment` (none in a site
//!   tool's). [`lift_where_changed`] (after a share ends, at the node
//!   timer, at `gpu-mps enable` and `disable`) takes out of the job's
//!   lists *as they are then* only this node and gpushare's words, for
//!   the jobs whose cause is gone: what the user or an admin changed
//!   meanwhile stays. A job Slurm cannot be asked about, or that runs
//!   elsewhere, stays recorded for the next look.
//! - No command runs under the record's lock, and one program spends at
//!   most [`BUDGET`] on them all, its waits for that lock included.
//!
//! A share Slurm started here without the node's Prolog (Slurm 22.05's
//! slurmd can skip it for a job started again where it ran), whose tasks
//! the SPANK plugin refused for want of a GPU, is marked by that plugin
//! (`Cause::PrologMissed`): its epilog requeues it as it is, keeping it
//! off no node, counted toward the cap.
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
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gpushare::mps::kept;
use gpushare::mps::lock_wait::LockWait;
use gpushare::mps::node::requeue::{
    cause_gone, comment_with, counted_requeues, decide_lift, decide_requeue, prolog_missed_words,
    requeue_words, shown_job, Exclusion, Exclusions, Lift, Requeue, ShownJob,
};
pub use gpushare::mps::node::requeue::{
    clear_mark, mark, take_mark, Cause, Elsewhere, Marked, NodeNow, RequeueCounts, Requeued,
};
use gpushare::mps::state_dir;
use gpushare::shared::admin_comment::site_tools;
use gpushare::shared::bounded;

/// How long one `scontrol` or `squeue` call may take.
pub const SCONTROL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one node program may spend on Slurm's commands for requeues
/// and exclusions: what is left undone is tried again later.
pub const BUDGET: Duration = Duration::from_secs(40);

/// The record of the exclusions gpushare added, in the node's kept
/// directory (`gpushare::mps::kept`: it outlives a reboot); gpushare 0.2
/// kept it in the state directory, from where it is taken once.
const RECORD: &str = "requeued";
const LOCK: &str = "requeued.lock";
/// The node's own count of its counted requeues of each job
/// (`RequeueCounts`), beside the exclusions.
const COUNTS: &str = "requeue-counts";
const COUNTS_LOCK: &str = "requeue-counts.lock";

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
    let timeout = deadline.left(&format!("{program} {}", args.join(" ")))?;
    bounded::slurm(program, args, timeout).map_err(|e| {
        if e.contains("Invalid job id") {
            Failed::Gone(e)
        } else {
            Failed::Later(e)
        }
    })
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
    if !has_record(state_dir) {
        return Ok(0);
    }
    with_record(state_dir, &Deadline::start(), |r| r.0.len())
}

/// Whether the node keeps a record of exclusions at all (in the kept
/// directory, or 0.2's in the state directory), looked at without the
/// record's lock: a node with none spends nothing more on them.
fn has_record(state_dir: &Path) -> bool {
    let kept = kept::existing(Path::new(kept::KEPT_ROOT), state_dir, 0);
    state_dir.join(RECORD).exists() || kept.is_some_and(|k| k.join(RECORD).exists())
}

/// Runs `f` on the record (in the kept directory) under its lock (no
/// command runs under it), waited for within what is left of `deadline`.
/// A record gpushare 0.2 left in the state directory is taken in first.
fn with_record<T>(
    state_dir: &Path,
    deadline: &Deadline,
    f: impl FnOnce(&mut Exclusions) -> T,
) -> Result<T, String> {
    let lock = (LOCK, "the lock of the requeue record");
    let old = state_dir.join(RECORD);
    update_kept(state_dir, deadline, lock, RECORD, |before| {
        let mut records = Exclusions::parse(before);
        if let Ok(text) = std::fs::read_to_string(&old) {
            for (job, entry) in Exclusions::parse(&text).0 {
                records.0.entry(job).or_insert(entry);
            }
        }
        let out = f(&mut records);
        (records.to_text(), out)
    })
    .inspect(|_| {
        // Taken in (and written whole) above: the old place is left.
        let _ = std::fs::remove_file(&old);
    })
}

/// Runs `f` on the node's count of requeues, under its lock; what it
/// leaves is written back whole.
fn with_counts<T>(
    state_dir: &Path,
    deadline: &Deadline,
    f: impl FnOnce(&mut RequeueCounts) -> T,
) -> Result<T, String> {
    let lock = (COUNTS_LOCK, "the lock of the requeue counts");
    update_kept(state_dir, deadline, lock, COUNTS, |before| {
        let mut counts = RequeueCounts::parse(before);
        let out = f(&mut counts);
        (counts.to_text(), out)
    })
}

/// Rewrites the small record `name` of the node's kept directory under
/// `lock`, waited for within what is left of `deadline`
/// (`state_dir::update_locked`).
fn update_kept<T>(
    state_dir: &Path,
    deadline: &Deadline,
    lock: (&str, &str),
    name: &str,
    change: impl FnOnce(&str) -> (String, T),
) -> Result<T, String> {
    let dir = kept::ensure(Path::new(kept::KEPT_ROOT), state_dir, 0)?;
    let wait = LockWait::each(deadline.0.saturating_duration_since(Instant::now()));
    state_dir::update_locked(&dir, lock, name, wait, change)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What the node knows of a share it refused: from the prolog's mark,
/// and the MPS setup it had ([`NodeNow::setup`]).
#[derive(Debug, Clone)]
pub struct Refused {
    pub marked: Marked,
    pub setup: String,
}

/// Requeues `job` and keeps it off `node` until what refused it there
/// changes, or (a run Slurm started without its Prolog,
/// [`Cause::PrologMissed`]) requeues it as it is; what to log. `Err`: it
/// was not requeued (the job then fails with its refusal, as it would
/// have), and why.
pub fn requeue_elsewhere(
    deadline: &Deadline,
    state_dir: &Path,
    job: u32,
    node: &str,
    refused: &Refused,
) -> Result<String, String> {
    let cause = refused.marked.why;
    let shown = resolve(deadline, job).map_err(|e| e.to_string())?;
    if !refused.marked.names_run(&kept::this_boot(), shown.restarts) {
        return Err(format!(
            "job {job}'s mark was left by another run (its epilog never ran): this run \
             (Restarts={}) is left alone",
            shown.restarts
        ));
    }
    let id = shown.name.to_string();
    let accounted = accounted_state(deadline, &id);
    // Read before the requeue: the site's words are kept, gpushare's
    // appended, and they count gpushare's requeues so far. Unread, or a
    // site tool's, the comment is not written at all.
    let site = admin_comment(deadline, &id);
    let in_comment = site
        .as_ref()
        .ok()
        .and_then(|comment| counted_requeues(comment.as_deref()));
    let writable = match &site {
        Ok(comment) => match comment.as_deref().and_then(site_tools) {
            Some(tool) => Err(format!("its AdminComment is left whole: {tool}")),
            None => Ok(comment.as_deref()),
        },
        Err(e) => Err(format!("its AdminComment not read, so not written: {e}")),
    };
    // This node's own count: where the comment cannot hold gpushare's
    // words, the only one. Unread, the job is not requeued on a guess.
    let here = with_counts(state_dir, deadline, |c| c.of(job))
        .map_err(|e| format!("job {id}: the node's requeue counts not read: {e}"))?;
    let requeued = Requeued::of(in_comment, writable.is_ok(), here);
    let sent = match decide_requeue(&shown, node, accounted.as_deref(), requeued, cause) {
        Requeue::Send { list, added } => Some((list, added)),
        Requeue::Again => None,
        Requeue::LeaveAlone(why) | Requeue::Capped(why) => return Err(why),
    };
    scontrol(deadline, &["requeue", &id]).map_err(|e| e.to_string())?;
    let n = cause.counts().then(|| requeued.count() + 1);
    let counts_note = match n {
        Some(n) => match with_counts(state_dir, deadline, |c| c.bump(job, n, now())) {
            Ok(()) => String::new(),
            Err(e) => format!("; not counted on this node: {e}"),
        },
        None => String::new(),
    };
    let counted = match n {
        Some(n) => format!(
            "requeue {n} of {}",
            gpushare::mps::node::requeue::MAX_REQUEUES
        ),
        None => "not counted toward the cap".to_owned(),
    };
    let ours = match cause {
        Cause::Refused(why) => requeue_words(node, n, why),
        Cause::PrologMissed => prolog_missed_words(node, n.unwrap_or(1)),
    };
    let mut update = vec![format!("jobid={id}")];
    if let Some((list, _)) = &sent {
        update.push(format!("ExcNodeList={list}"));
    }
    let comment_note = match &writable {
        Ok(site) => {
            update.push(format!("AdminComment={}", comment_with(*site, &ours)));
            counts_note
        }
        Err(e) => format!("; {e}{counts_note}"),
    };
    let updated = if update.len() > 1 {
        let args: Vec<&str> = std::iter::once("update")
            .chain(update.iter().map(String::as_str))
            .collect();
        scontrol(deadline, &args).map(drop)
    } else {
        Ok(())
    };
    let (Some((list, added)), Cause::Refused(why)) = (sent, cause) else {
        // Kept off no node: gpushare's words alone were written.
        let comment_note = match updated {
            Ok(()) => comment_note,
            Err(e) => format!("; its AdminComment not written: {e}"),
        };
        return Ok(format!(
            "job {id} requeued on {node} ({counted}): Slurm started it without the Prolog of the \
             node, so no GPU was chosen for its share, or no MPS daemon of its own recorded; \
             it may start here again{comment_note}"
        ));
    };
    if let Err(e) = updated {
        return Ok(format!("requeued, but not kept off {node}: {e}"));
    }
    let entry = Exclusion {
        uid: Some(refused.marked.uid),
        units: refused.marked.units,
        boot: refused.marked.boot.clone(),
        setup: refused.setup.clone(),
        gpu: refused.marked.gpu,
        ..Exclusion::new(added, now(), writable.is_ok().then_some(ours), why)
    };
    let recorded = with_record(state_dir, deadline, |r| {
        r.0.insert(job, entry);
    });
    let recorded = match recorded {
        Ok(()) => String::new(),
        Err(e) => format!("; not recorded, so never taken back here: {e}"),
    };
    Ok(format!(
        "job {id} requeued from {node} ({counted}), {}; kept off {node} until {} \
         (ExcNodeList={list}{}){comment_note}{recorded}",
        why.why(),
        why.until(),
        if added { "" } else { ", the user's own" }
    ))
}

/// The MPS setup the daemons start from, as one line: the control
/// program and `nvidia-smi` found (path, size, change time) and the
/// driver's version. An admin's fix or a driver update changes it.
pub fn mps_setup(cfg: &gpushare::mps::config::GpuMpsConfig) -> String {
    use std::os::unix::fs::MetadataExt;
    let file = |p: Option<std::path::PathBuf>| match p {
        Some(p) => match std::fs::metadata(&p) {
            Ok(m) => format!("{} {} {}", p.display(), m.size(), m.ctime()),
            Err(_) => format!("{} absent", p.display()),
        },
        None => "none".to_owned(),
    };
    let driver = crate::nvml::driver_version().unwrap_or_else(|| "no driver".to_owned());
    format!(
        "{}; {}; {driver}",
        file(gpushare::mps::programs::program(cfg)),
        file(gpushare::mps::compute_mode::smi_program(cfg))
    )
    .replace(['\t', '\n'], " ")
}

/// Whether Slurm books mps on node `name` (its `Gres=` in `scontrol -o
/// show node`); `None` where it cannot be told.
fn slurm_books_mps(deadline: &Deadline, name: &str) -> Option<bool> {
    let answer = scontrol(deadline, &["-o", "show", "node", name]).ok()?;
    let gres: Vec<&str> = answer
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("Gres="))
        .collect();
    match gres.as_slice() {
        [one] => Some(one.split(',').any(|g| g.starts_with("mps"))),
        _ => None,
    }
}

/// [`lift_where_changed`] within a fresh deadline, what it did (or why it
/// could not) said line by line: the node timer's step, `gpu-mps disable`'s
/// and `enable`'s.
pub fn lift_and_say(node: &gpushare::mps::node::Node, name: &str, say: &mut dyn FnMut(String)) {
    match lift_where_changed(&Deadline::start(), node, name) {
        Ok(lines) => lines.into_iter().for_each(say),
        Err(e) => say(format!("exclusions not taken back: {e}")),
    }
}

/// Looks at the node now and takes back the exclusions whose cause is
/// gone ([`restore_exclusions`]); what to log. `name`: the node as Slurm
/// names it.
pub fn lift_where_changed(
    deadline: &Deadline,
    node: &gpushare::mps::node::Node,
    name: &str,
) -> Result<Vec<String>, String> {
    let state_dir = &node.cfg.state_dir;
    if !has_record(state_dir) {
        return Ok(Vec::new());
    }
    let state = node
        .ledger
        .snapshot()
        .map(|s| s.state)
        .map_err(|e| e.to_string())?;
    let failed: Vec<u32> = gpushare::mps::health::read(state_dir).into_keys().collect();
    let shared: Vec<u32> = state.shares().map(|s| s.gpu).collect();
    let rule = gpushare::mps::node::server_rule(&node.cfg);
    let sizes = (node.gpu_count, node.cfg.units_per_gpu);
    // Placement passes by GPUs under `gpu-mps selftest` too, for now.
    let passed_by: Vec<u32> = failed
        .iter()
        .copied()
        .chain(gpushare::mps::under_test::read(state_dir).into_keys())
        .collect();
    let fits = |uid: Option<u32>, units: u32| {
        gpushare::mps::node::requeue::fits_now(&state, &passed_by, sizes, rule, (uid, units))
    };
    let disabled = node.disabled.is_some();
    // Only a disabled node asks: Slurm may no longer send shares there.
    let mps_unbooked = disabled && slurm_books_mps(deadline, name) == Some(false);
    let (boot, setup) = (kept::this_boot(), mps_setup(&node.cfg));
    let now = NodeNow {
        boot: &boot,
        setup: &setup,
        disabled,
        mps_unbooked,
        fits: &fits,
        failed: &failed,
        shared: &shared,
    };
    restore_exclusions(deadline, state_dir, name, &now)
}

/// Takes back what gpushare added to the jobs this node kept off itself
/// whose cause is gone ([`cause_gone`] on `now`): only this node from
/// each job's `ExcNodeList` as it is now, and gpushare's words from its
/// `AdminComment`; what to log. A job Slurm could not be asked about, or
/// that runs elsewhere, stays recorded, for the next look.
fn restore_exclusions(
    deadline: &Deadline,
    state_dir: &Path,
    node: &str,
    now: &NodeNow<'_>,
) -> Result<Vec<String>, String> {
    // Read under the lock, acted on without it.
    let records = with_record(state_dir, deadline, |r| r.clone())?;
    let mut lines = Vec::new();
    let mut done = Vec::new();
    for (job, entry) in &records.0 {
        let Some(changed) = cause_gone(entry, now) else {
            continue;
        };
        match lift(deadline, *job, node, entry) {
            Ok(Some(line)) => {
                lines.push(format!("{line} ({changed})"));
                done.push((*job, entry.clone()));
            }
            Ok(None) => {}
            Err(Failed::Later(e)) => {
                lines.push(format!("job {job}: exclusion kept, to lift later: {e}"));
            }
            Err(e) => {
                lines.push(format!("job {job}: nothing to give back: {e}"));
                done.push((*job, entry.clone()));
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

/// One job's exclusion given back: what to log (`None`: the job runs
/// elsewhere, the record stays until it pends again).
fn lift(
    deadline: &Deadline,
    job: u32,
    node: &str,
    entry: &Exclusion,
) -> Result<Option<String>, Failed> {
    let shown = resolve(deadline, job)?;
    let name = shown.name.to_string();
    let comment = match &entry.comment {
        Some(_) => admin_comment(deadline, &name)?,
        None => None,
    };
    match decide_lift(&shown, node, entry, comment.as_deref()) {
        Lift::Nothing(why) => Ok(Some(why)),
        Lift::Later(_) => Ok(None),
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
            Ok(Some(match list {
                Some(list) => format!("job {name} may run here again (ExcNodeList={list})"),
                None => format!("job {name}: gpushare's words taken out of its AdminComment"),
            }))
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
    fn the_setup_names_what_daemons_start_from() {
        let setup = mps_setup(&gpushare::mps::config::GpuMpsConfig::default());
        assert!(!setup.contains('\t') && !setup.contains('\n'), "{setup}");
        assert_eq!(setup.matches("; ").count(), 2, "{setup}");
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
