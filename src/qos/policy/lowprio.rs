//! What changes for a job under the low-priority QOS: requeue on, no
//! `--exclusive=user`, arrays throttled.

use crate::qos::config::{Enforce, GpuQosConfig};

use super::enforce::Told;
use super::job::{record_values, JobDescription};
use super::verdict::{
    reject, JobChanges, LowPriorityChange, Rejection, RejectionKind, ThrottleRecheck,
};

/// What the low-priority QOS `low_qos` does to a job (`submission`: a new
/// job, whose output mode and array are its own; else an update): made
/// where its `Enforce=` (its rule's, else the file's) says yes,
/// described to the user, and the job left as it is, where it says warn.
pub(super) fn apply_low_priority(
    cfg: &GpuQosConfig,
    job: &JobDescription<'_>,
    low_qos: &str,
    submission: bool,
    told: &mut Told,
    changes: &mut JobChanges,
) -> Result<(), Rejection> {
    let enforce = low_enforce(cfg, low_qos);
    let mut low = JobChanges::default();
    apply_requeue(job, low_qos, &mut low);
    if submission {
        low.set_open_mode_append = !job.open_mode_set;
        if let (Some(max), Some(inx)) = (
            cfg.low_priority_max_array_tasks(),
            job.array_inx.filter(|s| !s.trim().is_empty()),
        ) {
            low.array_inx = told
                .judge(enforce, throttled_array(inx.trim(), max))?
                .flatten();
        }
    }
    if enforce == Enforce::Yes {
        apply_exclusive_user(cfg, job, low_qos, &mut low);
        changes.set_requeue |= low.set_requeue;
        changes.set_open_mode_append |= low.set_open_mode_append;
        changes.clear_exclusive_user |= low.clear_exclusive_user;
        changes.array_inx = low.array_inx.or(changes.array_inx.take());
    } else {
        describe(cfg, job, low_qos, &low, told);
    }
    // The note on --no-requeue says what happens, not what changes.
    if let Some(note) = low.user_warning {
        changes.user_warning = Some(match changes.user_warning.take() {
            Some(earlier) => format!("{earlier}\n{note}"),
            None => note,
        });
    }
    Ok(())
}

/// The `Enforce=` of the low-priority QOS `low_qos`: its rule's, else
/// the file's.
fn low_enforce(cfg: &GpuQosConfig, low_qos: &str) -> Enforce {
    cfg.rule_for(low_qos)
        .map_or(cfg.enforce(), |rule| cfg.rule_enforce(rule))
}

/// The changes `low` holds (and `--exclusive=user` taken off), each told
/// as what the QOS does to its jobs and left undone.
fn describe(
    cfg: &GpuQosConfig,
    job: &JobDescription<'_>,
    low_qos: &str,
    low: &JobChanges,
    told: &mut Told,
) {
    let options: Vec<&str> = [
        (low.set_requeue, "--requeue"),
        (low.set_open_mode_append, "--open-mode=append"),
    ]
    .into_iter()
    .filter_map(|(set, option)| set.then_some(option))
    .collect();
    if !options.is_empty() {
        told.change(
            LowPriorityChange::Requeue,
            format!(
                "Jobs under QOS {low_qos} can be preempted, and are given {} so that a \
                 preempted job is requeued and keeps its earlier output; this job was left \
                 as submitted.",
                options.join(" and ")
            ),
        );
    }
    if job.exclusive_user && cfg.low_priority_clears_exclusive_user() {
        told.change(
            LowPriorityChange::ExclusiveUser,
            format!(
                "Jobs under QOS {low_qos} may not use --exclusive=user: it would keep other \
                 users off the node's idle GPUs. This job keeps it for now."
            ),
        );
    }
    if let Some(inx) = &low.array_inx {
        told.change(
            LowPriorityChange::ArrayThrottle,
            format!(
                "Arrays under QOS {low_qos} run at most {} tasks at once (--array={inx}); \
                 this array was left as submitted.",
                cfg.low_priority_max_array_tasks().unwrap_or_default()
            ),
        );
    }
}

fn apply_requeue(job: &JobDescription<'_>, low_qos: &str, changes: &mut JobChanges) {
    match job.requeue {
        None => changes.set_requeue = true,
        Some(false) => {
            changes.user_warning = Some(super::codes::coded(
                &format!(
                    "Jobs under QOS {low_qos} can be preempted; because of --no-requeue this \
                     job will be cancelled instead of requeued when that happens. Submit \
                     without --no-requeue to have it requeued."
                ),
                LowPriorityChange::Requeue.code(),
            ));
        }
        Some(true) => {}
    }
}

/// What becomes of a requeued job's output file, in users' words, as
/// [`super::judge_submit`] makes it: a job submitted naming a QOS of
/// `LowPriorityQOS` (`--qos=`) that chose no open mode gets
/// `--open-mode=append`; every other job keeps Slurm's default, which
/// starts the file anew at each run unless slurm.conf sets
/// `JobFileAppend=1`. `low_qos`: the low-priority QOS (`None`: gpu_qos.conf
/// could not be read); `job_qos`: the QOS of the one job spoken of (`None`:
/// any job, for the users' page).
pub fn requeued_output_words(
    low_qos: Option<&[String]>,
    job_qos: Option<&str>,
    file_append: bool,
) -> String {
    const ANEW: &str = "starts its output file anew, losing the earlier runs' output, unless \
                        it was submitted with --open-mode=append";
    const KEEPS: &str = "appends to its output file, so the earlier runs' output stays in it: \
                         gpu_qos turns on --open-mode=append for it unless it was submitted \
                         with --open-mode=truncate";
    if file_append {
        return "each run appends to its output file (JobFileAppend=1): the earlier runs' \
                output stays in it"
            .to_owned();
    }
    let Some(low) = low_qos else {
        return format!(
            "each run {ANEW} (gpu_qos turns it on for a job submitted with a low-priority \
             --qos of gpu_qos.conf's LowPriorityQOS)"
        );
    };
    let flags = |names: &[&str]| {
        names
            .iter()
            .map(|q| format!("--qos={q}"))
            .collect::<Vec<_>>()
            .join(" or ")
    };
    match job_qos {
        Some(q) if low.iter().any(|l| l.eq_ignore_ascii_case(q)) => format!(
            "if it was submitted with {}, each run {KEEPS}; submitted without naming {q} (its \
             default QOS), each run {ANEW}",
            flags(&[q])
        ),
        Some(_) => format!("each run {ANEW}"),
        None if low.is_empty() => format!("a requeued job {ANEW}"),
        None => {
            let names: Vec<&str> = low.iter().map(String::as_str).collect();
            format!(
                "a requeued job submitted with {} {KEEPS}; any other requeued job {ANEW}",
                flags(&names)
            )
        }
    }
}

/// A low-priority job with `--exclusive=user` would keep every other user
/// off its node, idle GPUs included, until preempted: it loses the option
/// (unless `LowPriorityExclusiveUser=keep`) and its user is told.
fn apply_exclusive_user(
    cfg: &GpuQosConfig,
    job: &JobDescription<'_>,
    low_qos: &str,
    changes: &mut JobChanges,
) {
    if !job.exclusive_user || !cfg.low_priority_clears_exclusive_user() {
        return;
    }
    changes.clear_exclusive_user = true;
    let warning = super::codes::coded(
        &format!(
            "Jobs under QOS {low_qos} may not use --exclusive=user: it would keep other users \
             off the node's idle GPUs. The job was accepted without it."
        ),
        LowPriorityChange::ExclusiveUser.code(),
    );
    changes.user_warning = Some(match changes.user_warning.take() {
        Some(earlier) => format!("{earlier}\n{warning}"),
        None => warning,
    });
}

/// An update's `ArrayTaskThrottle=N` (sent as `array_inx`, the number
/// alone) that would let an array run more tasks at once than
/// `LowPriorityMaxArrayTasks`: 0 (no throttle) or above the cap. Whether
/// the array runs under a low-priority QOS cannot be seen in an update,
/// and slurmctld has applied the throttle already, so the array is read
/// back (by the plugin, once the update is done) and, if it is one,
/// capped again ([`throttle_to_restore`]).
pub(super) fn throttle_lifted(
    cfg: &GpuQosConfig,
    update: &JobDescription<'_>,
) -> Option<ThrottleRecheck> {
    let max = cfg.low_priority_max_array_tasks()?;
    // As slurmctld reads it: `0x`, `+0` and an empty value are 0 (no
    // throttle), `100abc` is 100; below 0 slurmctld refuses the update.
    let asked = u64::try_from(throttle_value(update.array_inx?)).ok()?;
    // Where the low-priority QOS only warns, its cap is not made either.
    let low_enforced = cfg
        .low_priority_qos()
        .iter()
        .any(|q| low_enforce(cfg, q) == Enforce::Yes);
    (low_enforced && (asked == 0 || asked > u64::from(max))).then_some(ThrottleRecheck {
        job_id: update
            .job_id_for_messages
            .or_else(|| array_job_id(update.job_id_str?))?,
        max,
    })
}

/// What the user of an update that lifted an array's throttle is told.
pub(super) fn throttle_warning(cfg: &GpuQosConfig, max: u32) -> String {
    let low = cfg.low_priority_qos().join(", ");
    super::codes::coded(
        &format!(
            "Arrays under QOS {low} run at most {max} tasks at once: if this array is one, its \
             ArrayTaskThrottle is set back to {max} within seconds."
        ),
        LowPriorityChange::ArrayThrottle.code(),
    )
}

/// An update's `ArrayTaskThrottle=` value as slurmctld reads it
/// (`_update_job`: `strtoll(.., 10)` stored in a C `int`): leading white
/// space and a sign taken, the digits up to the first other character (none:
/// 0), saturated at 64 bits, then cut to 32 as the C conversion does.
pub(super) fn throttle_value(text: &str) -> i32 {
    let text = text.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let value = digits
        .bytes()
        .take_while(u8::is_ascii_digit)
        .try_fold(0i64, |v, d| {
            let d = i64::from(d - b'0');
            if negative {
                v.checked_mul(10)?.checked_sub(d)
            } else {
                v.checked_mul(10)?.checked_add(d)
            }
        })
        .unwrap_or(if negative { i64::MIN } else { i64::MAX });
    // C's conversion of the 64-bit value to an int: its low 32 bits (gcc,
    // every platform Slurm runs on).
    value as i32
}

/// The array an update names by its job id string (`123`, `123_4`,
/// `123_[0-9]`): the digits before anything else, the array's job id.
pub(super) fn array_job_id(job_id_str: &str) -> Option<u32> {
    let s = job_id_str.trim();
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    s[..digits].parse().ok().filter(|id| *id > 0)
}

/// What `scontrol -o show job ARRAY` (the array's records, one a line)
/// says of an array whose throttle an update lifted: the cap to set
/// again where it runs under one of `low_qos` and its `ArrayTaskThrottle`
/// is 0 (no `ArrayTaskThrottle=` at all: scontrol prints none then) or
/// above `max`; `None` where it is not such an array or is within the
/// cap already.
///
/// The throttle is the array's pending tasks' (one record, anywhere among
/// the others): a task split off (running, or updated alone) has a record
/// without one, which says nothing of it. Where no record carries one the
/// array has none, or its pending tasks' record was not among those read:
/// either way it is capped (a throttle its owner lowered may then be set
/// to the cap, never above it).
///
/// Each field by where Slurm prints it, never by the first word that
/// looks like it: the array's fields come before `JobName=`, which only
/// Slurm writes, and the user's words (the job's name, comment, working
/// directory, command) may hold any text, `QOS=normal` among it. The QOS
/// follows the name, and a name may end in a whole copy of the fields
/// after it; so every `QOS=` word of the record counts, and one of them
/// naming a low-priority QOS is enough (a user's own text can only make
/// their own array capped).
pub fn throttle_to_restore(show_job: &str, low_qos: &[String], max: u32) -> Option<u32> {
    let mut low = false;
    let mut array = false;
    let mut throttle: Option<u64> = None;
    for line in show_job.lines() {
        let fixed = line.split(" JobName=").next().unwrap_or_default();
        low |=
            record_values(line, "QOS").any(|q| low_qos.iter().any(|l| l.eq_ignore_ascii_case(q)));
        array |= record_values(fixed, "ArrayJobId").next().is_some();
        if let Some(t) = record_values(fixed, "ArrayTaskThrottle").next() {
            // Digits only (scontrol's %u); anything else is no throttle.
            throttle = throttle.or(Some(t.parse::<u64>().unwrap_or(0)));
        }
    }
    let lifted = throttle.map_or(array, |t| t == 0 || t > u64::from(max));
    (low && lifted).then_some(max)
}

/// Rule 9's array cap: `Some(new)` when `array_inx` must change. A throttle
/// of 0 is treated as "no throttle", which is what Slurm makes of it.
/// slurmctld reads the throttle after the *first* `%` (`atoi`: `0-99%100%5`
/// runs 100 at once), so anything after it but the digits of one number
/// is refused rather than read otherwise.
pub(super) fn throttled_array(inx: &str, max: u32) -> Result<Option<String>, Rejection> {
    let Some((range, throttle)) = inx.split_once('%') else {
        return Ok(Some(format!("{inx}%{max}")));
    };
    if throttle.is_empty() || !throttle.bytes().all(|b| b.is_ascii_digit()) {
        return Err(reject(
            RejectionKind::BadRequest,
            format!(
                "Invalid --array={inx}: Slurm reads the number of tasks to run at once after \
                 the first % and nothing after it, so only that number may follow it, e.g. \
                 --array={range}%{max}."
            ),
        ));
    }
    // All digits, so a parse failure can only be an overflow: a huge throttle.
    let asked = throttle.parse::<u64>().unwrap_or(u64::MAX);
    if asked == 0 || asked > u64::from(max) {
        Ok(Some(format!("{range}%{max}")))
    } else {
        Ok(None)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
