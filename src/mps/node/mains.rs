//! What `gpu-mps-prolog` and `gpu-mps-epilog` decide around their change
//! of the ledger, so that each program's `main` only reads its arguments
//! and orders the calls: which of NVML's facts the prolog asks, what a
//! refused share's mark holds, whether the epilog requeues a marked job,
//! takes back exclusions, or drains the node.

use super::report::{PrologOutcome, PrologReport};
use super::requeue::{Cause, Elsewhere, Marked};
use super::trust::{share_units, slurm_per_gpu, JobEnv};
use crate::mps::config::{GpuMpsConfig, MemoryLimit};
use crate::mps::ledger::{LedgerError, Record};
use crate::shared::booking::MpsBooking;

/// What the prolog asks NVML for a share job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvmlAsk {
    /// The GPUs' memory sets the node's: a proportional memory limit
    /// where `GPUMemory=` is not set.
    pub memory: bool,
}

/// Whether the prolog loads NVML for a job, and what for. Only for a
/// share, and only where its proportional memory limit needs the GPU's
/// memory (no `GPUMemory=`) or MIG mode must be known (a share is placed
/// on no GPU in MIG mode unless `MIGShares=allow`): `None` otherwise (a
/// node without NVML has no MIG). Where asked, NVML's lost GPUs and its
/// view of the GPUs (for the stacking check) are taken too.
pub fn nvml_ask(cfg: &GpuMpsConfig, share: bool) -> Option<NvmlAsk> {
    let memory = cfg.memory_limit == MemoryLimit::Proportional && cfg.gpu_memory_mib.is_none();
    (share && (memory || !cfg.mig_shares)).then_some(NvmlAsk { memory })
}

/// Whether the prolog rewrites the node's metrics: where it placed,
/// refused or recorded a job, or dropped records of jobs gone.
pub fn prolog_changed(report: &PrologReport) -> bool {
    report.outcome != PrologOutcome::Untouched || !report.dropped.is_empty()
}

/// What a share refused here is marked with for its epilog to send it
/// elsewhere ([`super::requeue::mark`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefusedMark {
    pub why: Elsewhere,
    /// The share's user and size (0 where the size is not known): what
    /// the node's state must let in again.
    pub uid: u32,
    pub units: u32,
    /// This run: Slurm's restart count (`SLURM_JOB_RESTART_COUNT`).
    pub run: Option<u32>,
    /// The GPU Slurm chose, where Slurm places the node's shares; for a
    /// private job given a GPU a share holds, that GPU.
    pub slurm_gpu: Option<u32>,
}

/// The mark of a share the prolog refused for `reason`, where another
/// node may serve it (only another user's servers had room, the GPU's MPS
/// daemon failed, or only failed GPUs had room: Slurm would keep sending
/// such jobs here); `None` for any other refusal. `restart_count` is
/// `SLURM_JOB_RESTART_COUNT` as slurmd set it.
pub fn refused_mark(
    reason: &str,
    (cfg, gpu_count, booking): (&GpuMpsConfig, u32, &MpsBooking),
    env: &JobEnv,
    restart_count: Option<&str>,
) -> Option<RefusedMark> {
    let why = Elsewhere::from_reason(reason)?;
    let per_gpu = slurm_per_gpu(cfg, gpu_count, booking);
    Some(RefusedMark {
        why,
        uid: env.uid,
        units: share_units(per_gpu, env).unwrap_or(0),
        run: restart_count.and_then(|r| r.parse().ok()),
        slurm_gpu: if super::trust::slurm_places(cfg, booking) {
            env.job_gpus.first().copied()
        } else {
            None
        },
    })
}

/// What the epilog does with the mark a job left ([`super::requeue::take_mark`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtEnd {
    /// No mark: the job ends here.
    Nothing,
    /// A mark, but the job is not requeued, for this reason (a warning).
    NotRequeued(String),
    /// Sent elsewhere (a share refused here), or requeued as it is (one
    /// Slurm started without its Prolog), off node `node`.
    Requeue { marked: Marked, node: String },
}

/// What the epilog does with `mark`, for a job slurmd says holds a share
/// or asked for an MPS daemon of its own (`needs_prolog`) or neither, on
/// node `node` (`SLURMD_NODENAME`). A mark of a job started without its
/// Prolog is made in slurmstepd from the job's own environment: only such
/// a job is requeued for it.
pub fn at_end(
    mark: Option<Result<Marked, String>>,
    needs_prolog: bool,
    node: Option<&str>,
) -> AtEnd {
    match (mark, node) {
        (None, _) => AtEnd::Nothing,
        (Some(Err(e)), _) => AtEnd::NotRequeued(e),
        (Some(Ok(marked)), _) if marked.why == Cause::PrologMissed && !needs_prolog => {
            AtEnd::NotRequeued(
                "slurmd gave this job no MPS share, nor did it ask for an MPS daemon of its \
                 own, yet it was marked as started without its Prolog"
                    .to_owned(),
            )
        }
        (Some(Ok(marked)), Some(node)) => AtEnd::Requeue {
            marked,
            node: node.to_owned(),
        },
        (Some(Ok(_)), None) => AtEnd::NotRequeued("SLURMD_NODENAME is not set".to_owned()),
    }
}

/// Whether the epilog takes back the exclusions of jobs this node sent
/// elsewhere: where a share ended (`released`), they may fit here now.
/// Not at the end of a job that left a mark (`marked`: refused after its
/// placement, for its GPU's daemon, and sent elsewhere just now): that
/// frees nothing.
pub fn lift_after(marked: bool, released: &[Record]) -> bool {
    !marked && released.iter().any(|r| matches!(r, Record::Share(_)))
}

/// Whether the epilog's failure to release a job makes it exit non-zero
/// (slurmd drains the node). A ledger written by a newer gpushare never
/// does: a downgrade must not drain the node.
pub fn epilog_drains(e: &LedgerError) -> bool {
    !matches!(e, LedgerError::TooNew { .. })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::mps::ledger::{ShareRecord, WholeRecord};
    use crate::shared::spank_env;

    fn cfg(memory: MemoryLimit, gpu_memory_mib: Option<u64>, mig_shares: bool) -> GpuMpsConfig {
        GpuMpsConfig {
            memory_limit: memory,
            gpu_memory_mib,
            mig_shares,
            ..GpuMpsConfig::default()
        }
    }

    #[test]
    fn nvml_is_asked_for_shares_that_need_the_memory_or_mig_mode() {
        let proportional = cfg(MemoryLimit::Proportional, None, false);
        let ask = |c: &GpuMpsConfig, share| nvml_ask(c, share);
        assert_eq!(ask(&proportional, true), Some(NvmlAsk { memory: true }));
        // Not for a job without a share, whatever the configuration.
        assert_eq!(ask(&proportional, false), None);
        // GPUMemory= set: NVML still says which GPUs are in MIG mode.
        let set = cfg(MemoryLimit::Proportional, Some(40_000), false);
        assert_eq!(ask(&set, true), Some(NvmlAsk { memory: false }));
        let fixed = cfg(MemoryLimit::Fixed(1000), None, false);
        assert_eq!(ask(&fixed, true), Some(NvmlAsk { memory: false }));
        // MIGShares=allow: only a proportional limit without GPUMemory=.
        let allow = |m, g| cfg(m, g, true);
        assert_eq!(
            ask(&allow(MemoryLimit::Proportional, None), true),
            Some(NvmlAsk { memory: true })
        );
        assert_eq!(ask(&allow(MemoryLimit::Proportional, Some(1)), true), None);
        assert_eq!(ask(&allow(MemoryLimit::Unlimited, None), true), None);
    }

    #[test]
    fn the_prolog_rewrites_the_metrics_where_it_changed_the_ledger() {
        let report = |outcome, dropped: Vec<Record>| PrologReport {
            outcome,
            dropped,
            notes: vec!["a note alone changes nothing".to_owned()],
        };
        assert!(!prolog_changed(&report(PrologOutcome::Untouched, vec![])));
        let whole = Record::Whole(WholeRecord {
            job: 8,
            gpus: vec![1],
            since: 0,
        });
        assert!(prolog_changed(&report(
            PrologOutcome::Untouched,
            vec![whole]
        )));
        let refused = PrologOutcome::Refused {
            reason: "other_users",
            text: "t".to_owned(),
        };
        assert!(prolog_changed(&report(refused, vec![])));
    }

    fn env(vars: &[(&str, &str)]) -> JobEnv {
        JobEnv::from_env(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        })
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_refusal_another_node_may_serve_is_marked_with_the_share_and_run() {
        let c = GpuMpsConfig::default();
        let booking = MpsBooking::default();
        let per_gpu = slurm_per_gpu(&c, 2, &booking);
        let units = u32::try_from(per_gpu / 4).unwrap_or(0);
        let percent = (u64::from(units) * 100 / per_gpu).to_string();
        let claim = spank_env::in_prolog(spank_env::MPS_UNITS);
        let job = env(&[
            ("SLURM_JOB_ID", "7"),
            ("SLURM_JOB_UID", "1001"),
            ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", &percent),
            (&claim, &units.to_string()),
        ]);
        let reason = Elsewhere::OtherUsers.word();
        let mark = refused_mark(reason, (&c, 2, &booking), &job, Some("3"));
        let expected = RefusedMark {
            why: Elsewhere::OtherUsers,
            uid: 1001,
            units: share_units(per_gpu, &job).unwrap_or(0),
            run: Some(3),
            // gpushare places this node's shares: no GPU of Slurm's.
            slurm_gpu: None,
        };
        assert_eq!(mark, Some(expected));
        assert_eq!(expected.units, units);
        // A restart count that is no number names no run.
        let mark = refused_mark(reason, (&c, 2, &booking), &job, Some("x"));
        assert_eq!(mark.map(|m| m.run), Some(None));
        // A size that cannot be known is 0.
        let no_share = env(&[("SLURM_JOB_ID", "7"), ("SLURM_JOB_UID", "1001")]);
        let mark = refused_mark(reason, (&c, 2, &booking), &no_share, None);
        assert_eq!(mark.map(|m| (m.units, m.run)), Some((0, None)));
        // A refusal no other node would serve better is not marked.
        assert_eq!(refused_mark("too-big", (&c, 2, &booking), &job, None), None);
        // Where Slurm places shares, the GPU it chose is kept.
        let by_slurm = GpuMpsConfig {
            placement: crate::mps::config::Placement::Slurm,
            ..GpuMpsConfig::default()
        };
        let on_gpu_2 = env(&[
            ("SLURM_JOB_ID", "7"),
            ("SLURM_JOB_UID", "1001"),
            ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", &percent),
            ("SLURM_JOB_GPUS", "2"),
        ]);
        let failed = Elsewhere::GpuFailed.word();
        let mark = refused_mark(failed, (&by_slurm, 2, &booking), &on_gpu_2, None);
        assert_eq!(mark.map(|m| m.slurm_gpu), Some(Some(2)));
        let mark = refused_mark(failed, (&c, 2, &booking), &on_gpu_2, None);
        assert_eq!(mark.map(|m| m.slurm_gpu), Some(None));
    }

    fn marked(why: Cause) -> Marked {
        Marked {
            why,
            uid: 1001,
            units: 25,
            boot: "b".to_owned(),
            run: None,
            gpu: None,
        }
    }

    #[test]
    fn the_epilog_requeues_a_marked_job_only_with_its_node_and_a_share_or_own_daemon() {
        let refused = marked(Cause::Refused(Elsewhere::OtherUsers));
        let missed = marked(Cause::PrologMissed);
        assert_eq!(at_end(None, true, Some("n1")), AtEnd::Nothing);
        let requeue = |m: &Marked| AtEnd::Requeue {
            marked: m.clone(),
            node: "n1".to_owned(),
        };
        assert_eq!(
            at_end(Some(Ok(refused.clone())), true, Some("n1")),
            requeue(&refused)
        );
        assert_eq!(
            at_end(Some(Ok(missed.clone())), true, Some("n1")),
            requeue(&missed)
        );
        // A refusal was marked by the prolog, which saw the share itself.
        assert_eq!(
            at_end(Some(Ok(refused.clone())), false, Some("n1")),
            requeue(&refused)
        );
        let not = |why: &str| AtEnd::NotRequeued(why.to_owned());
        assert_eq!(
            at_end(Some(Ok(missed)), false, Some("n1")),
            not(
                "slurmd gave this job no MPS share, nor did it ask for an MPS daemon of its own, \
                 yet it was marked as started without its Prolog"
            )
        );
        assert_eq!(
            at_end(Some(Ok(refused)), true, None),
            not("SLURMD_NODENAME is not set")
        );
        assert_eq!(
            at_end(Some(Err("damaged".to_owned())), true, Some("n1")),
            not("damaged")
        );
    }

    #[test]
    fn exclusions_are_taken_back_where_a_share_ended_unmarked() {
        let share = Record::Share(ShareRecord {
            job: 7,
            uid: 1001,
            user: "u".to_owned(),
            gpu: 0,
            units: 25,
            since: 0,
            placed_by_slurm: false,
            memory_mib: None,
            clients: None,
            sluid: None,
        });
        let whole = Record::Whole(WholeRecord {
            job: 8,
            gpus: vec![1],
            since: 0,
        });
        assert!(lift_after(false, &[whole.clone(), share.clone()]));
        assert!(!lift_after(true, std::slice::from_ref(&share)));
        assert!(!lift_after(false, &[whole]));
        assert!(!lift_after(false, &[]));
    }

    #[test]
    fn only_a_ledger_too_new_to_read_leaves_the_node_undrained() {
        let too_new = LedgerError::TooNew {
            path: PathBuf::from("/s/ledger"),
            version: 99,
        };
        assert!(!epilog_drains(&too_new));
        let other = LedgerError::Missing(PathBuf::from("/s/ledger"));
        assert!(epilog_drains(&other));
    }
}
