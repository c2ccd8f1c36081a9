//! What the plugin reads back once an update is done: an array's throttle
//! set back to the low-priority cap after an update lifted it, and a job
//! an update gave GPU types held or released by its own QOS's rule
//! (`gpushare::qos::policy::not_permitted`).
//!
//! slurmctld applies `ArrayTaskThrottle=` (`array_inx` of an update)
//! before it asks job_submit (`_update_job`, 22.05 to 26.05), and the
//! plugin sees neither the job's QOS nor its array in an update, so a
//! refusal could not undo it. Instead the update is accepted and, once it
//! is done, a thread of the plugin's reads the array back with the
//! `scontrol` beside slurmctld (bounded in time) and, where it runs under
//! a low-priority QOS above `LowPriorityMaxArrayTasks`, sets the cap
//! again as slurmctld's own user. Never on the submit path: job_modify
//! only queues the job id.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use gpushare::qos::policy::{
    held_by_gpushare, not_permitted, over_type_caps, record_accounts, throttle_to_restore,
    ThrottleRecheck, TypesRecheck, HOLD_MARK,
};
use slurm_plugin::{guard, log};

const PLUGIN: &str = "job_submit/gpu_qos";

/// A job to read back once its update is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadBack {
    Throttle(ThrottleRecheck),
    Types(TypesRecheck),
}

impl ReadBack {
    /// One read-back of each kind waits per job.
    fn same(&self, other: &ReadBack) -> bool {
        match (self, other) {
            (ReadBack::Throttle(a), ReadBack::Throttle(b)) => a.job_id == b.job_id,
            (ReadBack::Types(a), ReadBack::Types(b)) => a.job_id == b.job_id,
            _ => false,
        }
    }

    fn job_id(&self) -> u32 {
        match self {
            ReadBack::Throttle(r) => r.job_id,
            ReadBack::Types(r) => r.job_id,
        }
    }
}

/// A job to read back, and the slurm.conf slurmctld reads.
type Queued = (ReadBack, Option<PathBuf>);

/// Arrays waiting to be read back: one entry per array (a second update
/// of an array already waiting adds nothing), at most [`QUEUE_MAX`].
struct Queue {
    waiting: Mutex<VecDeque<Queued>>,
    ready: Condvar,
}

/// More arrays waiting than this means the reading thread is stuck (each
/// read is bounded in time): a further one is logged and not queued.
const QUEUE_MAX: usize = 4096;

/// How often one `scontrol` of a read-back is tried, and the pause before
/// each retry (slurmctld busy, a timeout): bounded, never a loop.
const TRIES: u32 = 3;
const RETRY_AFTER: Duration = Duration::from_secs(2);

/// The queue to the thread, started at the first array to look at.
static QUEUE: OnceLock<Option<Queue>> = OnceLock::new();

/// Queues `recheck`: the array is read back once the update holding
/// slurmctld's locks is done (the thread's `scontrol` waits for them).
pub fn recheck(recheck: ReadBack, slurm_conf: Option<PathBuf>) {
    let queue = QUEUE.get_or_init(|| {
        // The library is pinned (`pin_library`): this thread may outlive
        // `fini()` without returning into unmapped code; it ends with
        // slurmctld, waiting on an empty queue.
        let started = std::thread::Builder::new()
            .name("gpu_qos-throttle".into())
            .spawn(|| loop {
                let Some(Some(queue)) = QUEUE.get() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                let (job, conf) = {
                    let mut waiting = queue.waiting.lock().unwrap_or_else(PoisonError::into_inner);
                    loop {
                        if let Some(next) = waiting.pop_front() {
                            break next;
                        }
                        waiting = queue
                            .ready
                            .wait(waiting)
                            .unwrap_or_else(PoisonError::into_inner);
                    }
                };
                guard("job_submit/gpu_qos: read-back", (), || match &job {
                    ReadBack::Throttle(t) => restore(t, conf.as_deref()),
                    ReadBack::Types(t) => hold_or_release(t, conf.as_deref()),
                });
            });
        match started {
            Ok(_) => Some(Queue {
                waiting: Mutex::new(VecDeque::new()),
                ready: Condvar::new(),
            }),
            Err(e) => {
                log::error(&format!(
                    "{PLUGIN}: cannot start the array throttle thread: {e}; an update that \
                     lifts a low-priority array's throttle is not capped again"
                ));
                None
            }
        }
    });
    let Some(queue) = queue else {
        return;
    };
    let mut waiting = queue.waiting.lock().unwrap_or_else(PoisonError::into_inner);
    if waiting.iter().any(|(j, _)| j.same(&recheck)) {
        return;
    }
    if waiting.len() >= QUEUE_MAX {
        log::error(&format!(
            "{PLUGIN}: job {} not read back after its update: {QUEUE_MAX} jobs wait already \
             (is scontrol answering?)",
            recheck.job_id()
        ));
        return;
    }
    waiting.push_back((recheck, slurm_conf));
    queue.ready.notify_one();
}

/// Of an array's records (one line each, a line per running task), what
/// is read: any one tells its QOS and throttle.
const READ_BACK_BYTES: u64 = 1 << 20;

/// `scontrol ARGS`, tried [`TRIES`] times: the whole lines of its first
/// [`READ_BACK_BYTES`].
fn scontrol(args: &[&str], slurm_conf: Option<&std::path::Path>) -> Result<String, String> {
    let mut last = String::new();
    for attempt in 1..=TRIES {
        match crate::partitions::scontrol_head(args, slurm_conf, READ_BACK_BYTES) {
            Ok(text) => return Ok(text),
            Err(e) => last = e.to_string(),
        }
        if attempt < TRIES {
            std::thread::sleep(RETRY_AFTER);
        }
    }
    Err(format!("{last} ({TRIES} tries)"))
}

/// Job `id`'s records (`scontrol -o show job`), or `None` where they
/// could not be read (logged: `what` was not read back).
fn shown_job(id: &str, what: &str, slurm_conf: Option<&std::path::Path>) -> Option<String> {
    scontrol(&["-o", "show", "job", id], slurm_conf)
        .map_err(|e| {
            log::error(&format!(
                "{PLUGIN}: {what} not read back: scontrol show job {id}: {e}"
            ));
        })
        .ok()
}

fn restore(job: &ThrottleRecheck, slurm_conf: Option<&std::path::Path>) {
    let Some(policy) = crate::policy_state::policy() else {
        return;
    };
    let id = job.job_id.to_string();
    let Some(shown) = shown_job(&id, &format!("array {id}'s throttle"), slurm_conf) else {
        return;
    };
    let Some(max) = throttle_to_restore(&shown, policy.low_priority_qos(), job.max) else {
        return;
    };
    let throttle = format!("ArrayTaskThrottle={max}");
    match scontrol(&["update", &format!("JobId={id}"), &throttle], slurm_conf) {
        Ok(_) => log::info(&format!(
            "{PLUGIN}: array {id} runs under a low-priority QOS: an update lifted its \
             throttle, set back to {max} (LowPriorityMaxArrayTasks)"
        )),
        Err(e) => log::error(&format!(
            "{PLUGIN}: array {id}'s throttle not set back to {max}: scontrol update: {e}"
        )),
    }
}

/// A job an update gave GPU types: held (as an administrator holds it, so
/// that its user cannot release it) where its own QOS's or partition's
/// enforcing rule (or its account's or user's) does not permit one, with
/// gpushare's words in its
/// `AdminComment` where that is empty; released where gpushare held it
/// and its types fit again.
fn hold_or_release(job: &TypesRecheck, slurm_conf: Option<&std::path::Path>) {
    let Some(policy) = crate::policy_state::policy() else {
        return;
    };
    let id = job.job_id.to_string();
    let Some(shown) = shown_job(&id, &format!("job {id}'s GPU types"), slurm_conf) else {
        return;
    };
    let pending = shown.split_whitespace().any(|w| w == "JobState=PENDING");
    let done = |what: &str, args: &[&str]| match scontrol(args, slurm_conf) {
        Ok(_) => true,
        Err(e) => {
            log::error(&format!("{PLUGIN}: job {id} not {what}: scontrol: {e}"));
            false
        }
    };
    let accounts = if policy.has_association_rules() {
        crate::assoc::accounts_above(&record_accounts(&shown))
    } else {
        Vec::new()
    };
    let why = not_permitted(&policy, job.job_id, &shown, &accounts)
        .or_else(|| over_type_caps(&policy, job.job_id, &shown, cfg!(slurm_26_05)));
    match why {
        Some(why) if job.may_hold && pending && !held_by_gpushare(&shown) => {
            if !done("held", &["hold", &id]) {
                return;
            }
            // The site's comment is left whole (slurmctld's log says why).
            if !shown.contains(" AdminComment=") {
                let words = format!("AdminComment={HOLD_MARK}{why}");
                done(
                    "told why in its AdminComment",
                    &["update", &format!("JobId={id}"), &words],
                );
            }
            log::info(&format!(
                "{PLUGIN}: job {id} held after an update: {why} (it is refused at submission)"
            ));
        }
        None if held_by_gpushare(&shown) && done("released", &["release", &id]) => {
            done(
                "cleared of gpushare's words",
                &["update", &format!("JobId={id}"), "AdminComment="],
            );
            log::info(&format!(
                "{PLUGIN}: job {id} released: it fits its rules and the per-type caps again"
            ));
        }
        _ => {}
    }
}
