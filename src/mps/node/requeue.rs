//! What the epilog decides for a share refused here that another node may
//! serve: requeue it or leave it alone, and what to give back when the
//! node may take it again. Pure functions of what `scontrol -o show job`
//! and `squeue` showed and of the node's record; the epilog program
//! (`gpushare_node::requeue`) only runs the commands they order.
//!
//! - [`shown_job`]: the one record of a job in `scontrol -o show job`,
//!   read only from fields Slurm prints in a fixed run (text the user
//!   chose cannot pass for them).
//! - [`decide_requeue`]: a job Slurm still runs or completes here is
//!   requeued and this node added to its `ExcNodeList` (unless the user
//!   had excluded it already); a job ended otherwise (cancelled, pending
//!   again, running elsewhere) is left alone. Only a refusal the node
//!   could not foresee counts toward [`MAX_REQUEUES`] ([`Elsewhere::counts`]):
//!   past it the job fails with its refusal; one the node's own state
//!   made (another user's server, a GPU set aside, sharing disabled) never
//!   fails a job, which waits for the node to change instead.
//! - [`cause_gone`]: whether what kept a job off the node can have
//!   changed ([`NodeNow`]: room beside no other user's server, the GPU
//!   back, the node enabled, its MPS setup or boot changed, Slurm booking
//!   no mps here); only then is the exclusion lifted, never on a clock.
//! - [`decide_lift`]: only the node gpushare added leaves the job's list
//!   as it is *now*, and only while the job pends (a job running
//!   elsewhere keeps its record until it pends again or ends for good);
//!   the user's own changes meanwhile stay.
//! - [`comment_with`], [`comment_without`]: gpushare's words appended to
//!   the site's `AdminComment`, and taken out again; [`requeue_words`]
//!   number each counted requeue, and a lift leaves their count behind
//!   (`gpushare: requeues so far: N`), which is all that stays of them:
//!   [`requeues_in`] reads it for the cap. A comment that is a site
//!   tool's ([`crate::shared::admin_comment`]) gets no words: each node
//!   counts its own requeues of the job instead ([`RequeueCounts`]), as it
//!   does beside gpushare's words, so erased words never start the count
//!   again on that node; Slurm's `Restarts=` (preemptions too) never
//!   counts.
//! - [`Exclusions`]: the record of what gpushare added, one job a line,
//!   with the cause; kept across reboots (`/var/lib/gpushare`,
//!   [`crate::mps::kept`]).
//! - [`mark`], [`take_mark`]: what the prolog leaves its epilog beside
//!   the ledger ([`Marked`]); [`mark_prolog_missed`]: the SPANK plugin's
//!   mark of a share Slurm started without its Prolog ([`prolog_missed`],
//!   [`Cause::PrologMissed`]), requeued as it is, counted toward the cap.

use std::collections::BTreeMap;
use std::path::Path;

use crate::mps::ledger::Ledger;
use crate::mps::{kept, state_dir};

/// The tally a lift leaves in the `AdminComment` where gpushare's words
/// were, before their count: `gpushare: requeues so far: N`.
const TALLY_MARK: &str = "gpushare: requeues so far: ";

/// The start of gpushare's words in a job's `AdminComment`.
pub const COMMENT_MARK: &str = "gpushare: requeued from ";

/// Between the site's `AdminComment` and gpushare's words.
const COMMENT_SEPARATOR: &str = "; ";

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
    /// A `--gpu-mps=private` job Slurm gave a GPU whole that a share
    /// gpushare placed holds (Slurm 22.05 books every share on GPU 0).
    SharedGpu,
}

impl Elsewhere {
    pub const ALL: [Elsewhere; 6] = [
        Self::OtherUsers,
        Self::MpsDaemon,
        Self::GpuFailed,
        Self::Disabled,
        Self::Busy,
        Self::SharedGpu,
    ];

    /// The refusals another node may serve, by the prolog's refusal
    /// reason (`gpushare_refusals_total{reason}`).
    pub fn from_reason(reason: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.word() == reason)
    }

    /// The refusal reason: the word in the mark and the record.
    pub fn word(self) -> &'static str {
        match self {
            Self::OtherUsers => "other_users",
            Self::MpsDaemon => "mps_daemon",
            Self::GpuFailed => "gpu_failed",
            Self::Disabled => "disabled",
            Self::Busy => "busy",
            Self::SharedGpu => "private_shared",
        }
    }

    /// Whether such a refusal counts toward [`MAX_REQUEUES`]: only a fault
    /// the node met at the job's start (its GPU's daemon failing).
    /// Another user's server, a GPU set aside, a disabled node and a
    /// share on the GPU a private job was given are the node's own state, which it keeps the job off until it changes; a
    /// lock held past the wait is another job's doing (a hung holder, a
    /// slow driver), which the job is kept off until it is gone: they
    /// never fail a job.
    pub fn counts(self) -> bool {
        matches!(self, Self::MpsDaemon)
    }

    /// What the node lacks, after "requeued from NODE, ".
    pub fn why(self) -> &'static str {
        match self {
            Self::OtherUsers => {
                "whose GPUs with room serve an MPS server of another user (OtherUsers=refuse)"
            }
            Self::MpsDaemon => {
                "where the MPS daemon of its GPU could not serve it (MPSFailure=refuse; the \
                 syslog of the node says why)"
            }
            Self::GpuFailed => {
                "where the only GPUs for it are set aside as failed (gpu-mps status on the node \
                 says why)"
            }
            Self::Disabled => "where its admin disabled GPU sharing (gpu-mps disable)",
            Self::Busy => {
                "where a lock its prolog needed stayed held past the wait of the prolog (the \
                 syslog of the node names it)"
            }
            Self::SharedGpu => {
                "where a GPU Slurm gave it whole for its own MPS daemon carries an MPS share \
                 of another job"
            }
        }
    }

    /// Until when the job is kept off the node, after "kept off NODE until ".
    /// No quote in any of gpushare's words: a comment with one is not
    /// written whole by every release ([`crate::shared::admin_comment`]).
    pub fn until(self) -> &'static str {
        match self {
            Self::OtherUsers => "a GPU there has room beside no MPS server of another user",
            Self::GpuFailed => "a GPU with room for it is back in sharing there",
            Self::Disabled => "its admin enables sharing there again",
            Self::MpsDaemon => "MPS daemons start there again, or its MPS setup changes",
            Self::Busy => "its locks are free again",
            Self::SharedGpu => "that GPU carries no MPS share",
        }
    }
}

/// Why the epilog requeues a share job: the first word of its mark
/// ([`mark`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The prolog refused it for a reason another node may serve: sent
    /// elsewhere, kept off this node until that reason is gone.
    Refused(Elsewhere),
    /// Slurm started it here without running the node's Prolog, so no GPU
    /// was chosen for its share and its tasks were refused
    /// ([`prolog_missed`]). Requeued as it is (its next start, here or
    /// elsewhere, runs the Prolog), never kept off the node; counted
    /// toward [`MAX_REQUEUES`], so that where no Prolog runs at all the
    /// job fails after them.
    PrologMissed,
}

/// The word of [`Cause::PrologMissed`] in a mark.
const PROLOG_MISSED: &str = "prolog_missed";

impl From<Elsewhere> for Cause {
    fn from(why: Elsewhere) -> Self {
        Self::Refused(why)
    }
}

impl Cause {
    /// The word in the mark.
    pub fn word(self) -> &'static str {
        match self {
            Self::Refused(why) => why.word(),
            Self::PrologMissed => PROLOG_MISSED,
        }
    }

    pub fn from_word(word: &str) -> Option<Self> {
        match word {
            PROLOG_MISSED => Some(Self::PrologMissed),
            word => Elsewhere::from_reason(word).map(Self::Refused),
        }
    }

    /// Whether such a requeue counts toward [`MAX_REQUEUES`].
    pub fn counts(self) -> bool {
        match self {
            Self::Refused(why) => why.counts(),
            Self::PrologMissed => true,
        }
    }
}

/// What was missing, after "requeued from NODE (...), ".
const PROLOG_MISSED_WHY: &str = "where Slurm started it without the Prolog of the node, so no GPU \
                                 was chosen for its share, or no MPS daemon of its own recorded \
                                 (slurmd of Slurm 22.05 can skip the Prolog of a job requeued to \
                                 the same node; or no Prolog=gpu-mps-prolog is set there)";

/// gpushare's words for the `n`th counted requeue of a job Slurm started
/// on `node` without its Prolog: as [`requeue_words`]' (so that
/// [`requeues_in`] counts them), but the job is kept off no node.
pub fn prolog_missed_words(node: &str, n: u32) -> String {
    format!(
        "{COMMENT_MARK}{node} (requeue {n} of {MAX_REQUEUES}), {PROLOG_MISSED_WHY}; it may start \
         there again"
    )
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
    /// `JobState=` as Slurm prints it (`COMPLETING` while epilogs run).
    pub state: String,
    /// Its `NodeList` (`None`: `(null)` or empty).
    pub nodes: Option<String>,
    /// Its `ExcNodeList` (`None`: `(null)` or empty).
    pub excluded: Option<String>,
    /// `Restarts=`: how many times Slurm requeued it.
    pub restarts: u32,
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

/// The values of the one run of `keys` (consecutive words, as Slurm prints
/// them together) in a record. `Err`: none, or more than one (a job name,
/// comment or path can hold that text; which one is Slurm's cannot be
/// told).
fn one_run<'a>(record: &'a str, keys: &[&str]) -> Result<Vec<&'a str>, String> {
    let words: Vec<&str> = record.split_whitespace().collect();
    let found: Vec<Vec<&str>> = words
        .windows(keys.len())
        .filter_map(|w| {
            w.iter()
                .zip(keys)
                .map(|(word, key)| word.strip_prefix(key)?.strip_prefix('='))
                .collect::<Option<Vec<&str>>>()
        })
        .collect();
    let first = keys.first().copied().unwrap_or_default();
    match <[Vec<&str>; 1]>::try_from(found) {
        Ok([one]) => Ok(one),
        Err(found) if found.is_empty() => Err(format!("its record shows no {first}")),
        Err(_) => Err(format!(
            "its record shows {first} more than once (text the user chose repeats it), so \
             Slurm's own cannot be told"
        )),
    }
}

fn list_value(value: &str) -> Option<String> {
    (!value.is_empty() && value != "(null)").then(|| value.to_owned())
}

/// Job `job` in `scontrol -o show job`'s answer (which lists every task
/// of an array asked by the array's id): the one record whose `JobId=` is
/// `job`. `Err`: none, several (a job name with a line break can forge a
/// line), a record that is no started task (a range of array tasks), or
/// fields that cannot be told from text the user chose.
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
    let at = |e: String| format!("job {job}: {e}");
    let lists = one_run(line, &["ReqNodeList", "ExcNodeList", "NodeList"]).map_err(at)?;
    let state = one_run(line, &["JobState", "Reason"]).map_err(at)?;
    let counts = one_run(line, &["Requeue", "Restarts", "BatchFlag", "Reboot"]).map_err(at)?;
    let restarts = counts
        .get(1)
        .and_then(|r| r.parse().ok())
        .ok_or_else(|| format!("job {job}: Restarts={:?} is no count", counts.get(1)))?;
    Ok(ShownJob {
        name: JobName { job, array },
        state: state.first().copied().unwrap_or_default().to_owned(),
        nodes: lists.get(2).and_then(|v| list_value(v)),
        excluded: lists.get(1).and_then(|v| list_value(v)),
        restarts,
    })
}

/// The items of a Slurm node list: split at the commas outside brackets
/// (`gpu[01,03],gpu05` is two).
fn items(list: &str) -> Vec<&str> {
    crate::shared::syntax::split_top_level(list, '[', ']')
        .into_iter()
        .filter(|i| !i.is_empty())
        .collect()
}

/// The names of one item: `gpu05`, or `gpu[01-03,07]` expanded (zero
/// padding kept), within the shared bounds
/// ([`crate::shared::hostlist`]). `None`: a form Slurm would not read,
/// or more names than a cluster holds.
fn names_of(item: &str) -> Option<Vec<String>> {
    crate::shared::hostlist::expand(item).ok()
}

/// Whether node list `list` names `node`. `None`: it cannot be told (a
/// form not read here).
pub fn names_node(list: &str, node: &str) -> Option<bool> {
    let mut found = false;
    for item in items(list) {
        found |= names_of(item)?.iter().any(|n| n == node);
    }
    Some(found)
}

/// `list` with `node` added (Slurm reads comma lists and host ranges):
/// the new list, and whether `node` was added (`false`: the list named it
/// already).
pub fn with_node(list: Option<&str>, node: &str) -> (String, bool) {
    match list {
        Some(list) if names_node(list, node) == Some(true) => (list.to_owned(), false),
        Some(list) => (format!("{list},{node}"), true),
        None => (node.to_owned(), true),
    }
}

/// `list` without `node`: only the item that names it changes (a range
/// written out without it). `None`: it does not name `node`, or cannot be
/// read.
pub fn without_node(list: &str, node: &str) -> Option<String> {
    let mut kept = Vec::new();
    let mut found = false;
    for item in items(list) {
        let names = names_of(item)?;
        if names.iter().any(|n| n == node) {
            found = true;
            kept.extend(names.into_iter().filter(|n| n != node));
        } else {
            kept.push(item.to_owned());
        }
    }
    found.then(|| kept.join(","))
}

/// What to do with a share refused here, marked for its epilog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requeue {
    /// `scontrol requeue`, then `ExcNodeList=list`; `added`: gpushare
    /// added this node to it (to take back later).
    Send { list: String, added: bool },
    /// `scontrol requeue` alone: a run Slurm started without its Prolog
    /// ([`Cause::PrologMissed`]) may start here again.
    Again,
    /// The job is no longer the refused run on this node: not requeued.
    LeaveAlone(String),
    /// Requeued too often already: the share fails with its refusal.
    Capped(String),
}

/// The decision for job `shown`, refused on `node` for `why`;
/// `accounted`: the state accounting recorded for its run (`sacct -X -P
/// -o State`), where it answered. Slurm shows every job whose epilog runs
/// as `COMPLETING`, whatever ended it; only accounting tells that its
/// user cancelled it. `requeued`: how many counted requeues gpushare made
/// of it, in its `AdminComment` or on this node ([`Requeued`]). A refusal
/// that does not count ([`Cause::counts`]) is never capped.
pub fn decide_requeue(
    shown: &ShownJob,
    node: &str,
    accounted: Option<&str>,
    requeued: Requeued,
    why: impl Into<Cause>,
) -> Requeue {
    let why = why.into();
    let name = shown.name;
    if let Some(state) = accounted
        .and_then(|a| a.lines().next())
        .filter(|s| s.starts_with("CANCELLED"))
    {
        return Requeue::LeaveAlone(format!(
            "job {name} was cancelled (accounting: {state}): left alone"
        ));
    }
    if !matches!(shown.state.as_str(), "RUNNING" | "COMPLETING") {
        return Requeue::LeaveAlone(format!(
            "job {name} is {} (cancelled, ended or requeued meanwhile): left alone",
            shown.state
        ));
    }
    let here = shown
        .nodes
        .as_deref()
        .and_then(|n| names_node(n, node))
        .unwrap_or(false);
    if !here {
        return Requeue::LeaveAlone(format!(
            "job {name} runs on {}, not {node}: left alone",
            shown.nodes.as_deref().unwrap_or("no node")
        ));
    }
    let (count, counted) = (requeued.count(), requeued.whose());
    if why.counts() && requeued.capped() {
        let refusal = match why {
            Cause::Refused(_) => "its refusal".to_owned(),
            Cause::PrologMissed => format!(
                "its refusal: Slurm started it on {node} without the Prolog of the node (is \
                 Prolog=gpu-mps-prolog set there?)"
            ),
        };
        return Requeue::Capped(format!(
            "job {name} was requeued {count} times already, {counted} (gpushare requeues a job \
             at most {MAX_REQUEUES} times): not requeued again, it fails with {refusal}"
        ));
    }
    if why == Cause::PrologMissed {
        return Requeue::Again;
    }
    let (list, added) = with_node(shown.excluded.as_deref(), node);
    Requeue::Send { list, added }
}

/// gpushare's words for a requeue of a job from `node` for `why`: the
/// `n`th counted one, or (`None`) one that does not count.
pub fn requeue_words(node: &str, n: Option<u32>, why: Elsewhere) -> String {
    let count = match n {
        Some(n) => format!("requeue {n} of {MAX_REQUEUES}"),
        None => format!("{NOT_COUNTED}{MAX_REQUEUES}"),
    };
    format!(
        "{COMMENT_MARK}{node} ({count}), {}; kept off {node} until {}",
        why.why(),
        why.until()
    )
}

/// How a requeue that does not count toward the cap is said.
const NOT_COUNTED: &str = "not counted toward the ";

/// How many counted requeues gpushare made of a job, as its
/// `AdminComment` (`None`: none) tells: the count its words there keep;
/// `None` where they are not there (never requeued, the comment a site
/// tool's, where gpushare writes no words, or rewritten by a tool). The
/// node's own record counts beside it ([`Requeued::of`]); Slurm's
/// `Restarts=`, which counts preemptions and an admin's requeues too,
/// never does.
pub fn counted_requeues(comment: Option<&str>) -> Option<u32> {
    let comment = comment.unwrap_or_default();
    // Its words first: an older gpushare appended them to a site's text.
    let ours = comment.contains(COMMENT_MARK)
        || comment
            .split(COMMENT_SEPARATOR)
            .any(|p| tally_of(p).is_some());
    ours.then(|| requeues_in(comment))
}

/// How many times gpushare requeued a job whose `AdminComment` is
/// `comment`: the highest count its words there name (`(requeue N of`,
/// or the tally `gpushare: requeues so far: N` a lift left); words of an
/// older gpushare, which did not number them, count one each.
pub fn requeues_in(comment: &str) -> u32 {
    let tallied = comment.split(COMMENT_SEPARATOR).filter_map(tally_of).max();
    let mut numbered = 0;
    let mut unnumbered = 0;
    for (at, _) in comment.match_indices(COMMENT_MARK) {
        let words = &comment[at + COMMENT_MARK.len()..];
        let Some((node, rest)) = words.split_once(" (") else {
            unnumbered += 1;
            continue;
        };
        if node.contains([' ', ',', ';']) {
            unnumbered += 1;
            continue;
        }
        if rest.starts_with(NOT_COUNTED) {
            continue;
        }
        let count = rest
            .strip_prefix("requeue ")
            .and_then(|n| n.split_once(' ')?.0.parse::<u32>().ok());
        match count {
            Some(n) => numbered = numbered.max(n),
            None => unnumbered += 1,
        }
    }
    tallied.unwrap_or(0).max(numbered).max(unnumbered)
}

/// The count of a tally a lift left (`gpushare: requeues so far: N`).
fn tally_of(part: &str) -> Option<u32> {
    let digits = part.strip_prefix(TALLY_MARK)?;
    digits
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| digits.parse().ok())?
}

/// `comment` without the tally a lift left (gpushare's next words carry
/// the count on).
fn without_tally(comment: &str) -> String {
    comment
        .split(COMMENT_SEPARATOR)
        .filter(|part| tally_of(part).is_none())
        .collect::<Vec<_>>()
        .join(COMMENT_SEPARATOR)
}

/// The site's `AdminComment` (`None`: it has none) with gpushare's `ours`
/// appended (in place of the tally an earlier lift left).
pub fn comment_with(site: Option<&str>, ours: &str) -> String {
    let site = site.map(without_tally);
    match site.as_deref().map(str::trim_end).filter(|s| !s.is_empty()) {
        Some(site) => format!("{site}{COMMENT_SEPARATOR}{ours}"),
        None => ours.to_owned(),
    }
}

/// `comment` without gpushare's `ours` (and the separator before it):
/// what the site had. `None`: `ours` is not in it (someone rewrote it):
/// left alone.
pub fn comment_without(comment: &str, ours: &str) -> Option<String> {
    let at = comment.find(ours)?;
    let before = &comment[..at];
    let after = &comment[at + ours.len()..];
    let before = before.strip_suffix(COMMENT_SEPARATOR).unwrap_or(before);
    let after = if before.is_empty() {
        after.strip_prefix(COMMENT_SEPARATOR).unwrap_or(after)
    } else {
        after
    };
    Some(format!("{before}{after}"))
}

/// What gpushare keeps of one job it kept off this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exclusion {
    /// gpushare added this node to the job's `ExcNodeList` (`false`: the
    /// user had excluded it already: nothing to take back).
    pub added: bool,
    /// When (seconds since the epoch; 0: recorded by an older gpushare).
    pub since: u64,
    /// gpushare's words appended to the job's `AdminComment`.
    pub comment: Option<String>,
    /// Why the node refused it (`None`: recorded by an older gpushare,
    /// which kept no cause: lifted at the next look).
    pub cause: Option<Elsewhere>,
    /// What the node's state must let in again: the job's user and the
    /// units of its share here (0: not known).
    pub uid: Option<u32>,
    pub units: u32,
    /// The node's boot and its MPS setup ([`NodeNow::setup`]) when it
    /// refused the job: either changed may have mended a failed daemon.
    pub boot: String,
    pub setup: String,
    /// The GPU Slurm chose for the share, where Slurm places the node's
    /// shares: Slurm keeps choosing it, so a job refused for it being
    /// set aside comes back only once it is back.
    pub gpu: Option<u32>,
}

impl Exclusion {
    /// A new record of job kept off for `cause`, now (`since`).
    pub fn new(added: bool, since: u64, comment: Option<String>, cause: Elsewhere) -> Self {
        Self {
            added,
            since,
            comment,
            cause: Some(cause),
            uid: None,
            units: 0,
            boot: String::new(),
            setup: String::new(),
            gpu: None,
        }
    }
}

/// What the node is now, as far as the causes of its exclusions go.
pub struct NodeNow<'a> {
    /// The kernel's boot id.
    pub boot: &'a str,
    /// The MPS setup the daemons start from: the control program and
    /// `nvidia-smi` found (path, size, change time) and the driver's
    /// version; an admin's fix or a driver update changes it.
    pub setup: &'a str,
    /// The admin took the node off sharing (`gpu-mps disable`).
    pub disabled: bool,
    /// Slurm books no mps on this node any more: it sends no share here,
    /// so no exclusion has anything left to do.
    pub mps_unbooked: bool,
    /// Whether a share of `units` units (0: not known) of user `uid` would
    /// be placed here now: the prolog's own choice on the ledger as it is.
    pub fits: &'a dyn Fn(Option<u32>, u32) -> bool,
    /// The GPUs set aside now.
    pub failed: &'a [u32],
    /// The GPUs that carry a share now.
    pub shared: &'a [u32],
}

impl std::fmt::Debug for NodeNow<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeNow")
            .field("boot", &self.boot)
            .field("setup", &self.setup)
            .field("disabled", &self.disabled)
            .field("mps_unbooked", &self.mps_unbooked)
            .field("failed", &self.failed)
            .field("shared", &self.shared)
            .finish_non_exhaustive()
    }
}

/// Whether the prolog would place a share of `units` units (0: not known,
/// taken as one) of user `uid` (`None`: not known, every share counts as
/// another user's) on the node whose ledger is `state` now, with GPUs
/// `failed` set aside: the same choice under the same `rule`.
pub fn fits_now(
    state: &crate::mps::ledger::LedgerState,
    failed: &[u32],
    (gpu_count, units_per_gpu): (u32, u32),
    rule: crate::mps::placement::ServerRule,
    (uid, units): (Option<u32>, u32),
) -> bool {
    if state.lost_reason().is_some() {
        return false;
    }
    let loads = state.placing_loads(gpu_count, uid.unwrap_or(u32::MAX), &[], failed);
    crate::mps::placement::choose_gpu_for_user(&loads, units_per_gpu, units.max(1), rule).is_ok()
}

/// Why job `entry` may come back to the node now (what changed), or
/// `None` where its cause is still there. Never a clock: a job whose
/// cause stays waits for it to change (its `AdminComment` says until
/// what), and fails no cap for it.
pub fn cause_gone(entry: &Exclusion, now: &NodeNow<'_>) -> Option<String> {
    if now.mps_unbooked {
        return Some("Slurm books no mps on this node any more".to_owned());
    }
    let Some(cause) = entry.cause else {
        return Some("recorded without its cause by an older gpushare".to_owned());
    };
    // A private job refused for a share on the GPU Slurm gave it: back
    // when that GPU carries none (Slurm gives it again while it is free);
    // one recorded without its GPU, when no GPU here carries one.
    if cause == Elsewhere::SharedGpu {
        let free = match entry.gpu {
            Some(gpu) => !now.shared.contains(&gpu),
            None => now.shared.is_empty(),
        };
        return free.then(|| match entry.gpu {
            Some(gpu) => format!("GPU {gpu}, which Slurm gave it whole, carries no share now"),
            None => "no GPU here carries a share now".to_owned(),
        });
    }
    if now.disabled {
        return None;
    }
    // Slurm chose a GPU set aside, and chooses it again while it is: the
    // job comes back when that GPU does, whatever room the others have.
    if let (Elsewhere::GpuFailed, Some(gpu)) = (cause, entry.gpu) {
        return (!now.failed.contains(&gpu))
            .then(|| format!("GPU {gpu}, which Slurm chose for it, is back in sharing"));
    }
    let fits = (now.fits)(entry.uid, entry.units);
    match cause {
        Elsewhere::Disabled if fits => Some("sharing is enabled on the node again".to_owned()),
        Elsewhere::OtherUsers if fits => {
            Some("a GPU has room beside no other user's MPS server".to_owned())
        }
        Elsewhere::GpuFailed if fits => Some("a GPU with room is back in sharing".to_owned()),
        Elsewhere::Busy if fits => Some("its locks are free again".to_owned()),
        Elsewhere::MpsDaemon if fits && entry.boot != now.boot => {
            Some("the node booted again".to_owned())
        }
        Elsewhere::MpsDaemon if fits && entry.setup != now.setup => {
            Some("its MPS setup changed (control program, nvidia-smi or driver)".to_owned())
        }
        _ => None,
    }
}

/// What to do for one recorded job when this node may take it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lift {
    /// `ExcNodeList=list` (empty: none); `comment`: `AdminComment=` too,
    /// when the comment is to change.
    Update {
        list: Option<String>,
        comment: Option<String>,
    },
    /// Nothing to change; the record is dropped (why).
    Nothing(String),
    /// Nothing to change now, the record stays (why): the job runs or
    /// ends a run elsewhere, with this node still in its `ExcNodeList`
    /// (Slurm changes it only while the job pends); once requeued it may
    /// come back.
    Later(String),
}

/// The states a job ends in for good (nothing of it will run again).
const ENDED: [&str; 11] = [
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
    "SPECIAL_EXIT",
    "REVOKED",
];

/// The decision for job `shown`, recorded as `entry`, on `node`;
/// `comment`: its `AdminComment` now (`None`: none).
pub fn decide_lift(shown: &ShownJob, node: &str, entry: &Exclusion, comment: Option<&str>) -> Lift {
    let name = shown.name;
    if shown.state != "PENDING" {
        let why = format!("job {name} is {}", shown.state);
        return if ENDED.contains(&shown.state.as_str()) {
            Lift::Nothing(format!("{why}: nothing to give back"))
        } else {
            Lift::Later(format!(
                "{why}: {node} is given back once it pends again (Slurm changes its \
                 ExcNodeList only then)"
            ))
        };
    }
    let list = if entry.added {
        shown
            .excluded
            .as_deref()
            .and_then(|l| without_node(l, node))
    } else {
        None
    };
    // What is given back: the site's words; gpushare's leave their count,
    // 0 too: a comment without any words of gpushare's on a job Slurm
    // restarted reads as one a site tool rewrote, where every restart
    // would count, gpushare's own uncounted requeues among them.
    let comment = entry
        .comment
        .as_deref()
        .zip(comment)
        .and_then(|(ours, now)| {
            let left = without_tally(&comment_without(now, ours)?);
            let tally = format!("{TALLY_MARK}{}", requeues_in(now));
            Some(comment_with(Some(&left), &tally))
        });
    if list.is_none() && comment.is_none() {
        return Lift::Nothing(format!(
            "job {name}: {node} no longer in its ExcNodeList ({}) nor gpushare's words in its \
             AdminComment: nothing to give back",
            shown.excluded.as_deref().unwrap_or("none")
        ));
    }
    Lift::Update { list, comment }
}

/// The record of the exclusions gpushare added on this node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exclusions(pub BTreeMap<u32, Exclusion>);

impl Exclusions {
    /// The record's text: one job a line, `<job>\t<1|0>\t<since>\t<comment>\t
    /// <cause>\t<uid>\t<units>\t<boot>\t<setup>\t<gpu>` (`-` where unknown;
    /// gpushare's words and the setup hold no tab).
    pub fn to_text(&self) -> String {
        self.0
            .iter()
            .map(|(job, e)| {
                let comment = e.comment.as_deref().unwrap_or_default();
                let cause = e.cause.map_or("-", Elsewhere::word);
                let uid = e.uid.map_or_else(|| "-".to_owned(), |u| u.to_string());
                let clean = |t: &str| t.replace(['\t', '\n'], " ");
                format!(
                    "{job}\t{}\t{}\t{comment}\t{cause}\t{uid}\t{}\t{}\t{}\t{}\n",
                    u8::from(e.added),
                    e.since,
                    e.units,
                    clean(&e.boot),
                    clean(&e.setup),
                    e.gpu.map_or_else(|| "-".to_owned(), |g| g.to_string())
                )
            })
            .collect()
    }

    /// The record read back; a line of gpushare 0.1 (`<job> <its own
    /// ExcNodeList or ->`) is an exclusion gpushare added, of unknown age;
    /// a line of 0.2 (four fields) one of unknown cause.
    pub fn parse(text: &str) -> Self {
        let entries = text.lines().filter_map(|l| {
            let mut fields = l.split('\t');
            let first = fields.next()?;
            let Some(added) = fields.next() else {
                let (job, _own) = first.split_once(' ')?;
                let entry = Exclusion {
                    cause: None,
                    ..Exclusion::new(true, 0, None, Elsewhere::OtherUsers)
                };
                return Some((job.parse().ok()?, entry));
            };
            let since = fields.next()?.parse().ok()?;
            let comment = fields.next().filter(|c| !c.is_empty()).map(str::to_owned);
            let cause = fields.next().and_then(Elsewhere::from_reason);
            let uid = fields.next().and_then(|u| u.parse().ok());
            let units = fields.next().and_then(|u| u.parse().ok()).unwrap_or(0);
            let boot = fields.next().unwrap_or_default().to_owned();
            let setup = fields.next().unwrap_or_default().to_owned();
            // Records of gpushare 0.3 end with the setup.
            let gpu = fields.next().and_then(|g| g.parse().ok());
            let entry = Exclusion {
                added: added == "1",
                since,
                comment,
                cause,
                uid,
                units,
                boot,
                setup,
                gpu,
            };
            Some((first.parse().ok()?, entry))
        });
        Self(entries.collect())
    }
}

fn mark_name(job: u32) -> String {
    format!("requeue-{job}")
}

/// What the node knows of a share its epilog is to requeue, beside the
/// ledger (`StateDir/requeue-<job>`, root's): why, its user and units,
/// the boot and the run (Slurm's restart count in the job's credential,
/// `SLURM_JOB_RESTART_COUNT`). The prolog marks a share it refused
/// ([`mark`]); the SPANK plugin one Slurm started without its Prolog
/// ([`mark_prolog_missed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marked {
    pub why: Cause,
    pub uid: u32,
    pub units: u32,
    pub boot: String,
    /// The run: how many times Slurm had restarted the job (`None`: not
    /// known to who marked it).
    pub run: Option<u32>,
    /// The GPU Slurm chose for the share, where Slurm places this node's
    /// shares (`None`: gpushare places them, or not known).
    pub gpu: Option<u32>,
}

impl Marked {
    fn text(&self) -> String {
        format!(
            "{} {} {} {} {} {}\n",
            self.why.word(),
            self.uid,
            self.units,
            self.boot,
            self.run.map_or_else(|| "-".to_owned(), |r| r.to_string()),
            self.gpu.map_or_else(|| "-".to_owned(), |g| g.to_string())
        )
    }

    /// A mark read back; one of gpushare 0.2 (the word alone, or nothing
    /// for 0.1) has no owner: it is not trusted to name this run.
    fn parse(text: &str) -> Option<Self> {
        let mut words = text.split_whitespace();
        let why = Cause::from_word(words.next()?)?;
        Some(Self {
            why,
            uid: words.next()?.parse().ok()?,
            units: words.next()?.parse().ok()?,
            boot: words.next()?.to_owned(),
            run: match words.next()? {
                "-" => None,
                run => Some(run.parse().ok()?),
            },
            // Marks of gpushare 0.3 end with the run.
            gpu: match words.next() {
                None | Some("-") => None,
                Some(gpu) => Some(gpu.parse().ok()?),
            },
        })
    }

    /// Whether this mark was made for the run of the job Slurm counts
    /// `restarts` restarts of (its `Restarts=` now), in boot `boot`: a mark
    /// of another boot or another run (its epilog never ran: slurmd or
    /// the node crashed, and the job came back) names none of this run.
    pub fn names_run(&self, boot: &str, restarts: u32) -> bool {
        self.boot == boot && self.run.is_none_or(|run| run == restarts)
    }

    fn write(&self, state_dir: &Path, job: u32) -> Result<(), String> {
        state_dir::replace_file(state_dir, &mark_name(job), self.text().as_bytes(), 0o600)
            .map_err(|e| e.to_string())
    }
}

/// Marks `job`, refused on this node for `why` (a share of `units` of
/// user `uid`; 0 units: not a share or not known) in its run `run`
/// (`SLURM_JOB_RESTART_COUNT`), for its epilog to send elsewhere.
pub fn mark(
    state_dir: &Path,
    job: u32,
    why: Elsewhere,
    (uid, units): (u32, u32),
    (run, gpu): (Option<u32>, Option<u32>),
) -> Result<(), String> {
    let marked = Marked {
        why: Cause::Refused(why),
        uid,
        units,
        boot: kept::this_boot(),
        run,
        gpu,
    };
    marked.write(state_dir, job)
}

/// Removes a mark `job` left from an earlier run (its epilog never ran):
/// each prolog starts without one.
pub fn clear_mark(state_dir: &Path, job: u32) {
    let _ = std::fs::remove_file(state_dir.join(mark_name(job)));
}

/// The mark of `job` ([`mark`]), if there is one; it is removed. One that
/// does not read whole names no run (it is dropped, and said).
pub fn take_mark(state_dir: &Path, job: u32) -> Option<Result<Marked, String>> {
    let path = state_dir.join(mark_name(job));
    let text = std::fs::read_to_string(&path).ok()?;
    std::fs::remove_file(&path).ok()?;
    Some(Marked::parse(&text).ok_or_else(|| {
        format!(
            "job {job}'s mark ({}) names no run (an older gpushare's or damaged): the job is not \
             requeued",
            text.trim()
        )
    }))
}

/// Whether share job `job` was started here without its Prolog: Slurm
/// gave it a share (`slurm_says_share`), yet the node's ledger, read
/// whole, holds neither its placement nor a prolog's refusal of it (the
/// SPANK plugin refuses its tasks: `task_plan`). Slurm 22.05's slurmd
/// skips the Prolog of a job started again on a node that still caches
/// its earlier run's credential (a purge it throttles to one each two
/// seconds: SchedMD's bug 15656, mended in 23.02); a node without
/// `Prolog=` runs none at all. `false` where the ledger cannot be read:
/// the job is refused all the same, and not requeued.
pub fn prolog_missed(ledger: &Ledger, job: u32, slurm_says_share: bool) -> bool {
    slurm_says_share
        && crate::mps::node::refusal(ledger, job).is_none()
        && ledger
            .snapshot()
            .is_ok_and(|s| s.state.share(job).is_none())
}

/// The first of `gpus` (a private job's, as Slurm gave them) that carries
/// a share in the node's ledger: what its refusal ([`Elsewhere::SharedGpu`])
/// waits to see free. `None` where the ledger cannot be read or none does.
pub fn first_shared_gpu(ledger: &Ledger, gpus: &[u32]) -> Option<u32> {
    let state = ledger.snapshot().ok()?.state;
    let shared: Vec<u32> = state.shares().map(|s| s.gpu).collect();
    gpus.iter().copied().find(|g| shared.contains(g))
}

/// For the SPANK plugin, in slurmstepd (root), where share job `job` of
/// user `uid` is refused: where Slurm started it without its Prolog
/// ([`prolog_missed`]), marks it for its epilog to requeue
/// ([`Cause::PrologMissed`], no run named: slurmstepd is not given the
/// credential's restart count), and says so, for the refusal's text.
/// `None`: refused for another reason, which its text says.
pub fn mark_prolog_missed(
    ledger: &Ledger,
    job: u32,
    uid: u32,
    slurm_says_share: bool,
) -> Option<String> {
    if !prolog_missed(ledger, job, slurm_says_share) {
        return None;
    }
    Some(write_prolog_missed(ledger, job, uid))
}

/// [`mark_prolog_missed`] for a job that asked for an MPS daemon of its
/// own (`--gpu-mps=private`) and was started without the Prolog that
/// records it: the ledger, read whole, holds neither that record nor a
/// prolog's refusal of the job. Requeued as a share is, counted alike.
pub fn mark_private_prolog_missed(ledger: &Ledger, job: u32, uid: u32) -> Option<String> {
    let missed = crate::mps::node::refusal(ledger, job).is_none()
        && crate::mps::private::read_record(ledger.dir(), job).is_none()
        && ledger.snapshot().is_ok();
    missed.then(|| write_prolog_missed(ledger, job, uid))
}

/// Writes the mark of a job started without its Prolog; what to tell.
fn write_prolog_missed(ledger: &Ledger, job: u32, uid: u32) -> String {
    let marked = Marked {
        why: Cause::PrologMissed,
        uid,
        units: 0,
        boot: kept::this_boot(),
        run: None,
        gpu: None,
    };
    match marked.write(ledger.dir(), job) {
        Ok(()) => format!(
            "gpu_mps: job {job}: its epilog requeues it, so that its next start runs the Prolog \
             (gpushare requeues a job at most {MAX_REQUEUES} times, as its AdminComment counts \
             them: only past that must it be resubmitted)"
        ),
        Err(e) => format!("gpu_mps: job {job}: not marked to be requeued, it fails: {e}"),
    }
}

mod counts;
pub use counts::{RequeueCounts, Requeued, MAX_REQUEUES};

#[cfg(test)]
mod tests;
