//! A placed share served: its GPU's MPS daemon made to run with the
//! limits of the GPU's shares, under the GPU's lock; a share whose daemon
//! cannot serve it refused, or run without MPS where the site says so
//! (`MPSFailure=`).

use super::notes::unserved_name;
use super::report::{busy_refusal, refuse, PrologOutcome, PrologReport};
use super::report::{BUSY_REFUSAL, MPS_DAEMON_REFUSAL};
use super::setup::{guard_pipes, Node};
use super::trust::JobEnv;
use crate::mps::config;
use crate::mps::daemon::{self, MpsDaemon};
use crate::mps::ledger::LedgerError;
use crate::mps::lock_wait::LockError;
use crate::mps::state_dir;
use crate::mps::under_test;

/// What follows a share's placement: its memory limit recorded, its GPU's
/// MPS daemon made to run with the limits of the GPU's shares, and a note
/// when it shares the GPU with another user's server. A share whose daemon
/// cannot be started, reached or given its limits would run without them:
/// it is refused (`MPSFailure=refuse`, the default) or runs with its
/// output saying so (`MPSFailure=run`).
pub(super) fn serve(
    node: &Node,
    env: &JobEnv,
    placed: crate::mps::ledger::Placed,
    report: &mut PrologReport,
) -> Result<PrologOutcome, LedgerError> {
    // Placed with its memory limit (Node::set_gpu_memory).
    let share = placed.share;
    let gpu = share.gpu;
    let locked = daemon::with_gpu_lock(
        &node.cfg,
        gpu,
        node.ledger.lock_wait(),
        || -> Result<Served, LedgerError> {
            // Marked under `gpu-mps selftest` (read under the lock the
            // test marks it under): its server is the test's for now.
            if let Some(mark) = under_test::read(&node.cfg.state_dir).get(&gpu) {
                return Ok(Err(under_test::words(gpu, mark)));
            }
            let mut failed_test = None;
            // Read once, under the lock: the users and limits of the GPU's shares now.
            let state = node.ledger.snapshot()?.state;
            let alone = state.shares().all(|s| s.gpu != gpu || s.job == share.job);
            // A daemon that just failed to start is not tried again at
            // once by every prolog queued on this lock (sick.rs).
            let dir = node.ledger.dir();
            let control = format!("{:?}", node.cfg.mps_control);
            let daemons = node.cfg.mps_control != config::MpsControl::Disabled;
            let remembered = daemons
                .then(|| super::sick::remembered(dir, gpu, &control))
                .flatten();
            let ensured = match remembered {
                Some(why) => daemon::Ensured {
                    daemon: MpsDaemon::Failed(why),
                    servers: None,
                    multi_user: None,
                },
                None => {
                    let ensured = daemon::ensure(&node.cfg, gpu, node.owner, alone);
                    match &ensured.daemon {
                        MpsDaemon::Failed(why) => {
                            if let Err(e) = super::sick::remember(dir, gpu, &control, why) {
                                report.notes.push(format!(
                                    "GPU {gpu}'s daemon failure not remembered: {e}"
                                ));
                            }
                        }
                        MpsDaemon::NotAvailable => {}
                        _ => super::sick::forget(dir, gpu),
                    }
                    ensured
                }
            };
            let daemon::Ensured {
                daemon: mps,
                servers,
                multi_user,
            } = ensured;
            // A daemon started where a job holds the GPU whole (Slurm put
            // the share there): the whole job keeps the GPU's earlier mode.
            if state.whole_holders().any(|w| w.gpus.contains(&gpu)) {
                report
                    .notes
                    .extend(super::modes::settle_held(&node.cfg, gpu));
            }
            let others = state.other_users_on(gpu, share.uid);
            if !others.is_empty() && !multi_user.unwrap_or(node.cfg.multi_user) {
                report.notes.push(format!(
                    "job {} ({}) shares GPU {gpu} with the MPS server of {}: MPS serves one \
                     user at a time, so the job's CUDA work waits until their clients there \
                     have exited",
                    share.job,
                    share.user,
                    names(&others)
                ));
            }
            let mut unserved = match &mps {
                MpsDaemon::NotAvailable if node.cfg.mps_control == config::MpsControl::FromPath => {
                    Some(format!(
                        "no {} was found to run GPU {gpu}'s MPS daemon (MPSControl=auto looks \
                         in PATH and {})",
                        crate::mps::programs::CONTROL_PROGRAM,
                        crate::mps::programs::SEARCH_DIRS.join(", ")
                    ))
                }
                MpsDaemon::Failed(why) => Some(format!(
                    "GPU {gpu}'s MPS daemon could not be started: {why}"
                )),
                _ => None,
            };
            if mps != MpsDaemon::NotAvailable {
                guard_pipes(node, &state, gpu, &mut report.notes);
                let on_gpu = state.shares().filter(|s| s.gpu == gpu);
                let limits = daemon::server_limits(&node.cfg, node.gpu_memory_mib, on_gpu)
                    .filter(|_| unserved.is_none());
                if let Some(limits) = limits {
                    let set = daemon::apply_limits(
                        &node.cfg,
                        gpu,
                        limits,
                        servers,
                        // A one-user daemon's server holds the GPU from now on.
                        (!multi_user.unwrap_or(node.cfg.multi_user)).then_some(share.uid),
                    );
                    if let Ok(daemon::LimitsSet::SetWithoutServer(why)) = &set {
                        report.notes.push(format!(
                            "GPU {gpu}'s MPS server did not start with its daemon ({why}): until \
                             the share's first CUDA client starts it, a process without the MPS \
                             variables could get the whole GPU"
                        ));
                    }
                    if let Err(e) = set {
                        unserved = Some(format!(
                            "GPU {gpu}'s MPS daemon could not be given the limits of its \
                             shares: {e}"
                        ));
                    } else if matches!(mps, MpsDaemon::Started | MpsDaemon::Restarted(_)) {
                        // SelfTest=daemon-start: once per start, never per share.
                        let uids = super::setup::share_uids(&state, gpu);
                        failed_test = super::selftest::after_daemon_start(
                            node,
                            gpu,
                            limits,
                            &uids,
                            &mut report.notes,
                        );
                    }
                }
            }
            Ok(Ok((mps, unserved, failed_test)))
        },
    );
    let (mps, unserved, failed_test) = match locked {
        Ok(Ok(Ok(served))) => served,
        Ok(Ok(Err(under_test))) => {
            return Ok(refuse(&node.ledger, env, BUSY_REFUSAL, under_test));
        }
        Ok(Err(e)) => return Err(e),
        // Another program works on the GPU's daemon past the wait: not a
        // failed daemon, a busy node (MPSFailure= does not apply).
        Err(LockError::Busy(busy)) => {
            return Ok(refuse(&node.ledger, env, BUSY_REFUSAL, busy_refusal(&busy)));
        }
        Err(e) => {
            let why = format!("GPU {gpu}'s MPS daemon lock: {e}");
            (MpsDaemon::Failed(why.clone()), Some(why), None)
        }
    };
    // Limits that did not hold are refused whatever MPSFailure= says: the
    // GPU is set aside, and the share goes where they do hold.
    if let Some(why) = failed_test {
        return Ok(refuse(&node.ledger, env, MPS_DAEMON_REFUSAL, why));
    }
    if let Some(why) = unserved {
        match node.cfg.mps_failure {
            config::MpsFailure::Refuse => {
                return Ok(refuse(
                    &node.ledger,
                    env,
                    MPS_DAEMON_REFUSAL,
                    unserved_refusal(&why),
                ));
            }
            config::MpsFailure::Run => {
                let text = format!(
                    "runs WITHOUT MPS on GPU {gpu}: {why}. No thread or memory limit holds, \
                     and its work runs beside other jobs' on that GPU (gpu_mps.conf \
                     MPSFailure=run)"
                );
                report.notes.push(format!("job {}: {text}", share.job));
                if let Err(e) = state_dir::replace_file(
                    node.ledger.dir(),
                    &unserved_name(share.job),
                    text.as_bytes(),
                    0o600,
                ) {
                    report.notes.push(format!(
                        "job {}: its banner will not say so: {e}",
                        share.job
                    ));
                }
            }
        }
    }
    Ok(PrologOutcome::Placed {
        share,
        already: placed.already_recorded,
        mps,
    })
}

/// What the GPU's daemon did for the share (its state, why it could not
/// serve it, a failed `SelfTest=daemon-start`), or, where the GPU is
/// under `gpu-mps selftest`, why it was not asked.
type Served = Result<(MpsDaemon, Option<String>, Option<String>), String>;

/// `user a`, `users a, b`.
pub(super) fn names(users: &std::collections::BTreeSet<String>) -> String {
    let list: Vec<&str> = users.iter().map(String::as_str).collect();
    match list.as_slice() {
        [one] => format!("user {one}"),
        _ => format!("users {}", list.join(", ")),
    }
}

/// The refusal of a share whose GPU's MPS daemon could not serve it
/// (`why`), under `MPSFailure=refuse`.
pub(super) fn unserved_refusal(why: &str) -> String {
    format!(
        "{why}. The share is refused rather than run without its MPS limits beside other jobs \
         (gpu_mps.conf MPSFailure=refuse); a batch job is requeued to run elsewhere"
    )
}
