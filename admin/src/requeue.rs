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
//! Every `scontrol` call is bounded in time ([`SCONTROL_TIMEOUT`]).

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

/// `ExcNodeList` as `scontrol show job -o` prints it (`None`: `(null)` or
/// absent).
pub fn excluded_nodes(show_job: &str) -> Option<String> {
    show_job
        .split_whitespace()
        .find_map(|w| w.strip_prefix("ExcNodeList="))
        .filter(|v| !v.is_empty() && *v != "(null)")
        .map(str::to_owned)
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
    let id = job.to_string();
    let own = excluded_nodes(&scontrol(&["-o", "show", "job", &id])?);
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
                match scontrol(&[
                    "update",
                    &format!("jobid={job}"),
                    &format!("ExcNodeList={list}"),
                ]) {
                    Ok(_) => format!("job {job} may run here again (ExcNodeList={list})"),
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

    #[test]
    fn the_node_joins_the_jobs_own_exclusions() {
        let shown = "JobId=7 JobName=x ReqNodeList=(null) ExcNodeList=(null) NodeList=gpu01";
        assert_eq!(excluded_nodes(shown), None);
        assert_eq!(with_node(None, "gpu01"), "gpu01");
        let own = "JobId=7 ExcNodeList=gpu03,gpu[05-06] Features=(null)";
        assert_eq!(excluded_nodes(own).as_deref(), Some("gpu03,gpu[05-06]"));
        assert_eq!(
            with_node(Some("gpu03,gpu[05-06]"), "gpu01"),
            "gpu03,gpu[05-06],gpu01"
        );
        assert_eq!(with_node(Some("gpu01,gpu03"), "gpu01"), "gpu01,gpu03");
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
