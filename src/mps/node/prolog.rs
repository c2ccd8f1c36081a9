//! The prolog's logic for a job: a share placed on the least-loaded GPU
//! (or recorded where Slurm put it), records of vanished jobs dropped when
//! they are in the way, a whole-GPU holder recorded.

use std::collections::HashSet;

use super::modes::follow_whole_or_busy;
use super::notes::{forget_notes, write_record};
use super::report::{busy_refusal, refuse, whole_gpus, PrologOutcome, PrologReport};
use super::report::{BUSY_REFUSAL, PRIVATE_REFUSAL, PRIVATE_SHARED_REFUSAL};
use super::running::RunningJob;
use super::serve::serve;
use super::setup::Node;
use super::trust::{
    count_mismatch, share_units, slurm_per_gpu, slurm_places, units_mismatch, JobEnv,
};
use crate::mps::daemon;
use crate::mps::health;
use crate::mps::ledger::{Holder, Ledger, LedgerError, SlurmChoice};
use crate::mps::placement::PlacementError;
use crate::mps::private::{self, PrivateRecord, PrivateRequest};
use crate::mps::under_test;
use crate::shared::booking::MpsBooking;

/// Runs the prolog's logic for `env`'s job. `running` is asked for the jobs
/// slurmctld runs on this node only when a share finds no room (records of
/// jobs that ended without an epilog may be what fills the GPUs); `Err`
/// from it means nothing is dropped. An `Err` from here means the node is
/// unfit (unusable state directory): the prolog then fails, and Slurm
/// drains the node, which is right.
pub fn prolog(
    node: &Node,
    env: &JobEnv,
    booking: &MpsBooking,
    running: impl FnOnce() -> Result<Vec<RunningJob>, String>,
) -> Result<PrologReport, LedgerError> {
    let records = env.is_share() || !env.job_gpus.is_empty();
    let busy = |busy| PrologReport {
        outcome: refuse(&node.ledger, env, BUSY_REFUSAL, busy_refusal(&busy)),
        dropped: Vec::new(),
        notes: Vec::new(),
    };
    if let (true, Some(b)) = (records, &node.busy) {
        return Ok(busy(b.clone()));
    }
    match place(node, env, booking, running) {
        // A lock that stayed held for the whole wait: the job is refused,
        // never placed or run unrecorded; the node is never drained.
        Err(LedgerError::Busy(b)) if records => Ok(busy(b)),
        // A ledger of a newer gpushare (a downgrade): the share is refused
        // with the reason, other jobs run; the node is never drained.
        Err(e @ LedgerError::TooNew { .. }) => Ok(PrologReport {
            outcome: if env.is_share() {
                refuse(&node.ledger, env, "downgrade", &e)
            } else {
                PrologOutcome::Untouched
            },
            dropped: Vec::new(),
            notes: vec![e.to_string()],
        }),
        other => other,
    }
}

/// [`prolog`] on a ledger this gpushare reads.
fn place(
    node: &Node,
    env: &JobEnv,
    booking: &MpsBooking,
    running: impl FnOnce() -> Result<Vec<RunningJob>, String>,
) -> Result<PrologReport, LedgerError> {
    let Node {
        cfg,
        gpu_count,
        ledger,
        ..
    } = node;
    let mut report = PrologReport {
        outcome: PrologOutcome::Untouched,
        dropped: Vec::new(),
        notes: Vec::new(),
    };
    // --gpu-mps=private: the job's own daemon, or its refusal.
    match &env.private {
        Ok(None) => {}
        Ok(Some(request)) => {
            report.outcome = private_daemon(node, env, *request, &mut report.notes)?;
            return Ok(report);
        }
        Err(why) => {
            report.outcome = refuse(ledger, env, PRIVATE_REFUSAL, why);
            return Ok(report);
        }
    }
    if env.is_share() {
        if let Some(off) = &node.disabled {
            report.outcome = refuse(ledger, env, "disabled", off.refusal());
            return Ok(report);
        }
        if let Some(why) = &node.shares_refused {
            report.outcome = refuse(ledger, env, "config", why);
            return Ok(report);
        }
        if !cfg.mig_shares && !node.mig_gpus.is_empty() {
            let listed: Vec<String> = node
                .mig_gpus
                .iter()
                .map(|d| d.display().to_string())
                .collect();
            report.outcome = refuse(
                ledger,
                env,
                "mig",
                format!(
                    "{} {} MIG enabled (NVML), and gpushare's MPS shares are made of whole \
                     GPUs: list only GPUs without MIG in gpu_mps.conf's GPUDevices, or set \
                     MIGShares=allow there to place shares anyway (the node's admin). {}",
                    listed.join(", "),
                    if listed.len() == 1 { "has" } else { "have" },
                    instead(env, booking)
                ),
            );
            return Ok(report);
        }
        let by_slurm = slurm_places(cfg, booking);
        if by_slurm {
            report.notes.extend(booking.stacking_warning());
            report.notes.extend(units_mismatch(cfg, booking));
        } else {
            report.notes.extend(count_mismatch(cfg, *gpu_count));
        }
        let units = match share_units(slurm_per_gpu(cfg, *gpu_count, booking), env) {
            Ok(units) => units,
            Err(why) => {
                report.outcome = refuse(ledger, env, "size", why);
                return Ok(report);
            }
        };
        if by_slurm {
            report.outcome = record_slurm_choice(node, env, units, running, &mut report)?;
            return Ok(report);
        }
        if booking.cgroup_v2 {
            report.outcome = refuse(
                ledger,
                env,
                "cgroup_v2",
                format!(
                    "this node runs cgroup v2, where a job can only be kept from devices, never \
                     given one Slurm did not allow; gpushare cannot move the share to the GPU \
                     it would choose, so the job is refused. Let Slurm place shares (Slurm \
                     23.11 or later: per-GPU mps lines with Flags=all_sharing and \
                     LL_SHARED_GRES, see `gpu-mps config`) or use CgroupPlugin=cgroup/v1 (the \
                     node's admin). {}",
                    instead(env, booking)
                ),
            );
            return Ok(report);
        }
        // Daemons started before MultiUser=yes still serve one user each
        // until their shares end: no second user goes there meanwhile.
        let single_user: Vec<u32> = if cfg.multi_user {
            (0..*gpu_count)
                .filter(|&gpu| daemon::running_multi_user(cfg, gpu) == Some(false))
                .collect()
        } else {
            Vec::new()
        };
        // GPUs under `gpu-mps selftest` are passed by as those set aside.
        let failed_gpus: Vec<u32> = node
            .failed
            .keys()
            .chain(node.under_test.keys())
            .copied()
            .collect();
        let place = || {
            ledger.place_beside(
                holder(env),
                units,
                (*gpu_count, cfg.units_per_gpu),
                &single_user,
                &failed_gpus,
            )
        };
        let mut placed = place();
        if let Err(LedgerError::Placement {
            error: PlacementError::NoGpuHasRoom { .. },
            ..
        }) = &placed
        {
            // Place again whatever this call dropped: a prolog running beside
            // this one may have dropped the same records of vanished jobs
            // first (after a node failure Slurm starts many shares at once),
            // leaving this reconciliation nothing to drop but the room free.
            // The refusal, if any, then states the load this second look saw.
            drop_vanished(ledger, env.job, running, &mut report)?;
            placed = place();
        }
        report.outcome = match placed {
            Ok(placed) => {
                report.notes.extend(placed.remarks());
                serve(node, env, placed.value, &mut report)?
            }
            Err(LedgerError::Placement { error, repair }) => {
                report.notes.extend(repair.map(|r| r.to_string()));
                match error {
                    // The only GPUs with room are under test: for a while.
                    PlacementError::GpuFailed { gpus, .. }
                        if !gpus.iter().all(|g| node.failed.contains_key(g)) =>
                    {
                        refuse(ledger, env, BUSY_REFUSAL, under_test_words(node, &gpus))
                    }
                    PlacementError::GpuFailed { gpus, .. } => {
                        let error = gpu_failed(&node.failed, gpus);
                        refuse(ledger, env, error.reason(), told(&error, env, booking))
                    }
                    other => refuse(ledger, env, other.reason(), told(&other, env, booking)),
                }
            }
            Err(other) => return Err(other),
        };
    } else if !env.job_gpus.is_empty() {
        let out = ledger.record_whole(env.job, &env.job_gpus)?;
        report.notes.extend(out.remarks());
        // Slurm gave the GPU whole: a GPU set aside takes no share, and
        // the job runs (the admin drains the node where it must not).
        for (gpu, failure) in env
            .job_gpus
            .iter()
            .filter_map(|g| Some((g, node.failed.get(g)?)))
        {
            report.notes.push(format!(
                "GPU {gpu}, set aside from sharing ({}), is held whole by job {}: Slurm gave \
                 it; gpushare keeps only shares off it",
                failure.reason, env.job
            ));
        }
        // Where gpushare made a GPU exclusive for its shares, the job
        // Slurm gave it would fail at CUDA start: the GPU gets its earlier
        // mode back while the job holds it (node/modes.rs).
        report
            .notes
            .extend(match follow_whole_or_busy(node, &env.job_gpus) {
                Ok(lines) => lines,
                Err(b) => return Err(LedgerError::Busy(b)),
            });
        report.outcome = PrologOutcome::Whole {
            gpus: env.job_gpus.clone(),
            overlapping: out.value,
            private: None,
        };
    }
    Ok(report)
}

/// A job that asked for an MPS daemon of its own (`--gpu-mps=private`):
/// refused where it holds no whole GPU here, holds a share, or shares a
/// GPU with one, or where the node does not allow it; else recorded as a
/// whole-GPU job, with the record its steps start their daemon from
/// (`mps::private`). Its GPUs get their earlier compute mode back as any
/// whole GPU does.
fn private_daemon(
    node: &Node,
    env: &JobEnv,
    request: PrivateRequest,
    notes: &mut Vec<String>,
) -> Result<PrologOutcome, LedgerError> {
    let Node { cfg, ledger, .. } = node;
    let refused = |why: String| refuse(ledger, env, PRIVATE_REFUSAL, why);
    let allowed = cfg.private_mps;
    if let Some(why) = private::refusal(allowed, env.is_share(), &env.job_gpus, &[], &env.node) {
        return Ok(refused(why));
    }
    let out = ledger.record_whole(env.job, &env.job_gpus)?;
    notes.extend(out.remarks());
    let mut shared: Vec<u32> = out.value.iter().map(|s| s.gpu).collect();
    shared.sort_unstable();
    shared.dedup();
    if let Some(why) = private::refusal(allowed, false, &env.job_gpus, &shared, &env.node) {
        // The node's state: requeued (a batch job), kept off the node
        // until the first such GPU carries no share.
        return Ok(refuse(ledger, env, PRIVATE_SHARED_REFUSAL, why));
    }
    notes.extend(match follow_whole_or_busy(node, &env.job_gpus) {
        Ok(lines) => lines,
        Err(b) => return Err(LedgerError::Busy(b)),
    });
    let record = PrivateRecord {
        uid: env.uid,
        gpus: env.job_gpus.clone(),
        threads: request.threads,
    };
    if let Err(e) = write_record(ledger, env.job, &record) {
        return Ok(refused(format!(
            "the record of the job's own MPS daemon could not be written ({e}), so none can              start: resubmit the job"
        )));
    }
    Ok(PrologOutcome::Whole {
        gpus: env.job_gpus.clone(),
        overlapping: out.value,
        private: Some(record),
    })
}

/// Who the job's share is for, as slurmd named the job (its SLUID too,
/// which the node timer maps its processes by on 26.05's cgroup/v2).
fn holder(env: &JobEnv) -> Holder<'_> {
    Holder {
        job: env.job,
        uid: env.uid,
        user: &env.user,
        sluid: env.sluid.as_deref(),
    }
}

/// Drops the records of jobs slurmctld no longer runs here (ended without
/// an epilog), keeping `job`'s; what it dropped goes into the report. When
/// slurmctld cannot be asked nothing is dropped, and a note says so.
fn drop_vanished(
    ledger: &Ledger,
    job: u32,
    running: impl FnOnce() -> Result<Vec<RunningJob>, String>,
    report: &mut PrologReport,
) -> Result<(), LedgerError> {
    let jobs = match running() {
        Ok(jobs) => jobs,
        Err(e) => {
            report.notes.push(format!(
                "cannot ask slurmctld which jobs still run here, so no record was dropped: {e}"
            ));
            return Ok(());
        }
    };
    let running: HashSet<u32> = jobs.iter().map(|j| j.job).collect();
    let out = match ledger.reconcile(|j| j == job || running.contains(&j)) {
        Ok(out) => out,
        // Dropping is a second look only: the placement decides.
        Err(LedgerError::Busy(b)) => {
            report
                .notes
                .push(format!("no record of a vanished job dropped: {b}"));
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    report.notes.extend(out.remarks());
    for record in &out.value {
        forget_notes(ledger, record.job());
    }
    report.dropped.extend(out.value);
    Ok(())
}

/// Records a share where Slurm put it (`SLURM_JOB_GPUS`) and starts that
/// GPU's MPS daemon; Slurm's device rules already confine the job there.
/// Where the ledger sees no room on that GPU, records of jobs that ended
/// without an epilog are what fills it: they are dropped.
fn record_slurm_choice(
    node: &Node,
    env: &JobEnv,
    units: u32,
    running: impl FnOnce() -> Result<Vec<RunningJob>, String>,
    report: &mut PrologReport,
) -> Result<PrologOutcome, LedgerError> {
    let Some(&gpu) = env.job_gpus.first() else {
        return Ok(refuse(
            &node.ledger,
            env,
            "slurm_gpu",
            "Slurm places this node's shares, but named no GPU for it (SLURM_JOB_GPUS is not \
             set in the prolog)",
        ));
    };
    if env.job_gpus.len() > 1 {
        report.notes.push(format!(
            "Slurm gave job {} mps on GPUs {:?}; one MPS client uses one GPU, so gpushare \
             records it on GPU {gpu}",
            env.job, env.job_gpus
        ));
    }
    if node.under_test.contains_key(&gpu) {
        return Ok(refuse(
            &node.ledger,
            env,
            BUSY_REFUSAL,
            under_test_words(node, &[gpu]),
        ));
    }
    // A GPU set aside takes no share, whoever chose it.
    if node.failed.contains_key(&gpu) {
        let error = gpu_failed(&node.failed, vec![gpu]);
        return Ok(refuse(
            &node.ledger,
            env,
            error.reason(),
            format!("on GPU {gpu} (Slurm's choice): {error}"),
        ));
    }
    let choice = SlurmChoice {
        gpu,
        gpu_count: node.gpu_count,
        units_per_gpu: node.cfg.units_per_gpu,
    };
    match node.ledger.record_slurm_share(holder(env), units, choice) {
        Ok(placed) => {
            report.notes.extend(placed.remarks());
            if placed.value.crowded {
                drop_vanished(&node.ledger, env.job, running, report)?;
            }
            serve(node, env, placed.value, report)
        }
        Err(LedgerError::Placement { error, repair }) => {
            report.notes.extend(repair.map(|r| r.to_string()));
            Ok(refuse(
                &node.ledger,
                env,
                error.reason(),
                format!("on GPU {gpu} (Slurm's choice): {error}"),
            ))
        }
        Err(other) => Err(other),
    }
}

/// What the user of a share this node cannot place can do instead: a
/// whole GPU of this node's type (Slurm places and confines those
/// itself), or another node.
fn instead(env: &JobEnv, booking: &MpsBooking) -> String {
    format!(
        "This job can run here as a whole GPU instead ({}), or elsewhere: resubmit it with \
         --exclude={}",
        whole_gpus(&booking.gpu_types, 1, &env.node),
        env.node
    )
}

/// A placement refusal in words, with the whole GPUs of this node's type
/// to ask for where a share is larger than one GPU.
fn told(error: &PlacementError, env: &JobEnv, booking: &MpsBooking) -> String {
    match error {
        PlacementError::MoreThanOneGpu {
            units,
            units_per_gpu,
        } => format!(
            "{error} of this node's type instead: {}",
            whole_gpus(
                &booking.gpu_types,
                units.div_ceil((*units_per_gpu).max(1)),
                &env.node
            )
        ),
        other => other.to_string(),
    }
}

/// The refusal of a share only `gpus`, some under `gpu-mps selftest`
/// (the others set aside), could take, in words.
fn under_test_words(node: &Node, gpus: &[u32]) -> String {
    let each: Vec<String> = gpus
        .iter()
        .filter_map(|g| Some(under_test::words(*g, node.under_test.get(g)?)))
        .collect();
    each.join("; ")
}

/// The refusal of a share only `gpus`, set aside, could take: with why
/// each was set aside.
fn gpu_failed(failed: &health::FailedGpus, gpus: Vec<u32>) -> PlacementError {
    let reasons: Vec<&str> = gpus
        .iter()
        .filter_map(|g| failed.get(g).map(|f| f.reason.as_str()))
        .collect();
    PlacementError::GpuFailed {
        reasons: reasons.join("; "),
        gpus,
    }
}

#[cfg(test)]
pub(crate) mod tests;
