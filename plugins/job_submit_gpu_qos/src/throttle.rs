//! An array's throttle set back to the low-priority cap after an update
//! lifted it.
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

use std::path::PathBuf;
use std::sync::mpsc::{self, Sender};
use std::sync::{Mutex, OnceLock, PoisonError};

use gpushare::qos::policy::{throttle_to_restore, ThrottleRecheck};
use slurm_plugin::{guard, log};

const PLUGIN: &str = "job_submit/gpu_qos";

/// An array to read back, and the slurm.conf slurmctld reads.
type Queued = (ThrottleRecheck, Option<PathBuf>);

/// The queue to the thread, started at the first array to look at.
static QUEUE: OnceLock<Option<Mutex<Sender<Queued>>>> = OnceLock::new();

/// Queues `recheck`: the array is read back once the update holding
/// slurmctld's locks is done (the thread's `scontrol` waits for them).
pub fn recheck(recheck: ThrottleRecheck, slurm_conf: Option<PathBuf>) {
    let queue = QUEUE.get_or_init(|| {
        let (send, receive) = mpsc::channel::<Queued>();
        // The library is pinned (`pin_library`): this thread may outlive
        // `fini()` without returning into unmapped code; it ends with
        // slurmctld, blocked on an empty queue.
        let started = std::thread::Builder::new()
            .name("gpu_qos-throttle".into())
            .spawn(move || {
                while let Ok((job, conf)) = receive.recv() {
                    guard("job_submit/gpu_qos: array throttle", (), || {
                        restore(&job, conf.as_deref());
                    });
                }
            });
        match started {
            Ok(_) => Some(Mutex::new(send)),
            Err(e) => {
                log::error(&format!(
                    "{PLUGIN}: cannot start the array throttle thread: {e}; an update that \
                     lifts a low-priority array's throttle is not capped again"
                ));
                None
            }
        }
    });
    if let Some(queue) = queue {
        let _ = queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send((recheck, slurm_conf));
    }
}

fn restore(job: &ThrottleRecheck, slurm_conf: Option<&std::path::Path>) {
    let Some(policy) = crate::policy_state::policy() else {
        return;
    };
    let id = job.job_id.to_string();
    let shown = match crate::partitions::scontrol_output(&["-o", "show", "job", &id], slurm_conf) {
        Ok(text) => text,
        Err(e) => {
            log::error(&format!(
                "{PLUGIN}: array {id}'s throttle not read back: scontrol show job: {e}"
            ));
            return;
        }
    };
    let Some(max) = throttle_to_restore(&shown, policy.low_priority_qos(), job.max) else {
        return;
    };
    let throttle = format!("ArrayTaskThrottle={max}");
    match crate::partitions::scontrol_output(
        &["update", &format!("JobId={id}"), &throttle],
        slurm_conf,
    ) {
        Ok(_) => log::info(&format!(
            "{PLUGIN}: array {id} runs under a low-priority QOS: an update lifted its \
             throttle, set back to {max} (LowPriorityMaxArrayTasks)"
        )),
        Err(e) => log::error(&format!(
            "{PLUGIN}: array {id}'s throttle not set back to {max}: scontrol update: {e}"
        )),
    }
}
