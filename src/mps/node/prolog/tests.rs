//! The prolog's tests, and how its neighbours' tests run it
//! ([`no_squeue`], [`outcome`]).

use super::*;
use crate::mps::config::{self, MpsControl};
use crate::mps::daemon::MpsDaemon;
use crate::mps::ledger::tests::ok;
use crate::mps::ledger::Record;
use crate::mps::lock_wait::{self, LockWait};
use crate::mps::metrics::Event;
use crate::mps::node::epilog::{epilog, finish_deferred, EpilogReport};
use crate::mps::node::notes::{refusal, unserved};
use crate::mps::node::report::{BUSY_REFUSAL, MPS_DAEMON_REFUSAL};
use crate::mps::node::setup::tests::temp_node;
use crate::mps::node::task::task_plan;
use crate::mps::node::trust::tests::share_env;
use std::fs;
use std::path::PathBuf;

pub(crate) fn no_squeue() -> Result<Vec<RunningJob>, String> {
    Err("not asked in this test".into())
}

pub(crate) fn outcome(node: &Node, env: &JobEnv) -> PrologOutcome {
    prolog(node, env, &MpsBooking::default(), no_squeue)
        .unwrap_or_else(|e| panic!("{e}"))
        .outcome
}

#[test]
fn no_share_is_placed_while_a_listed_gpu_has_mig_on() {
    let (mut node, _dir) = temp_node(Some(1600));
    node.cfg.gpu_devices = Some(
        (0..4)
            .map(|i| PathBuf::from(format!("/dev/nvidia{i}")))
            .collect(),
    );
    // A MIG GPU the node does not list changes nothing.
    node.set_mig_minors(&[7]);
    assert!(matches!(
        outcome(&node, &share_env(1, 100)),
        PrologOutcome::Placed { .. }
    ));
    node.set_mig_minors(&[2]);
    match outcome(&node, &share_env(2, 100)) {
        PrologOutcome::Refused { reason, text } => {
            assert_eq!(reason, "mig");
            assert!(
                text.contains("/dev/nvidia2 has MIG enabled (NVML)")
                    && text.contains("MIGShares=allow"),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }
    // Whole GPUs are Slurm's business, MIG or not.
    let whole = JobEnv {
        mps_percentage: None,
        units_claimed: None,
        job_gpus: vec![3],
        ..share_env(3, 0)
    };
    assert!(matches!(
        outcome(&node, &whole),
        PrologOutcome::Whole { .. }
    ));
    node.cfg.mig_shares = true;
    assert!(matches!(
        outcome(&node, &share_env(4, 100)),
        PrologOutcome::Placed { .. }
    ));
}

#[test]
fn forged_units_on_jobs_without_an_mps_allocation_change_nothing() {
    let (node, _dir) = temp_node(None);
    let forged = |job, gpus: Vec<u32>| JobEnv {
        job,
        uid: 1000,
        user: "mallory".into(),
        mps_percentage: None,
        units_claimed: Some(100),
        job_gpus: gpus,
        node: "gpu01".to_owned(),
        sluid: None,
        private: Ok(None),
    };
    for job in 1..=4 {
        assert_eq!(
            outcome(&node, &forged(job, Vec::new())),
            PrologOutcome::Untouched
        );
    }
    // A whole-GPU job claiming units is a whole-GPU job.
    assert!(matches!(
        outcome(&node, &forged(5, vec![1])),
        PrologOutcome::Whole { .. }
    ));
    for job in 1..=4 {
        assert_eq!(task_plan(&node.cfg, &node.ledger, job, false, 1), Ok(None));
    }
    // An honest share still fits, beside the whole GPU.
    match outcome(&node, &share_env(6, 100)) {
        PrologOutcome::Placed { share, .. } => assert_ne!(share.gpu, 1),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_share_that_fits_no_gpu_is_refused_not_failed_and_epilog_is_idempotent() {
    let (node, _dir) = temp_node(None);
    for job in 1..=4 {
        assert!(matches!(
            outcome(&node, &share_env(job, 60)),
            PrologOutcome::Placed { .. }
        ));
    }
    // 160 units free on the node, but at most 40 on any one GPU.
    match prolog(&node, &share_env(5, 60), &MpsBooking::default(), no_squeue) {
        Ok(PrologReport {
            outcome:
                PrologOutcome::Refused {
                    text,
                    reason: "no_room",
                },
            notes,
            ..
        }) => {
            // A job on several nodes says which one refused it.
            assert!(text.contains("job 5 on node gpu01:"), "{text}");
            assert!(
                notes.iter().any(|n| n.contains("no record was dropped")),
                "{notes:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        task_plan(&node.cfg, &node.ledger, 5, true, 1).is_err_and(|e| e.contains("no single GPU"))
    );
    let r = epilog(&node, 1).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.released.len(), 1);
    assert_eq!(r.stopped, vec![(0, MpsDaemon::NotAvailable)]);
    assert!(epilog(&node, 1).is_ok_and(|r| r.released.is_empty()));
    assert!(epilog(&node, 5).is_ok_and(|r| r.released.is_empty()));
    assert_eq!(refusal(&node.ledger, 5), None);
}

#[test]
fn records_of_vanished_jobs_are_dropped_only_when_a_share_needs_the_room() {
    let (node, _dir) = temp_node(None);
    let whole = JobEnv {
        job: 10,
        uid: 0,
        user: "root".into(),
        mps_percentage: None,
        units_claimed: None,
        job_gpus: vec![0],
        node: "gpu01".to_owned(),
        sluid: None,
        private: Ok(None),
    };
    assert!(matches!(
        outcome(&node, &whole),
        PrologOutcome::Whole { .. }
    ));
    for job in 1..=6 {
        match outcome(&node, &share_env(job, 50)) {
            PrologOutcome::Placed { share, .. } => assert_ne!(share.gpu, 0),
            other => panic!("{other:?}"),
        }
    }
    let asked = std::cell::Cell::new(false);
    let running = || {
        asked.set(true);
        Ok(vec![
            RunningJob {
                job: 2,
                holds_mps: true,
            },
            RunningJob {
                job: 3,
                holds_mps: true,
            },
        ])
    };
    let report = prolog(&node, &share_env(7, 50), &MpsBooking::default(), running)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(asked.get());
    let dropped: Vec<u32> = report.dropped.iter().map(Record::job).collect();
    assert_eq!(dropped, vec![1, 4, 5, 6, 10]);
    assert!(matches!(report.outcome, PrologOutcome::Placed { .. }));
    // With room to spare nobody asks slurmctld anything.
    let never = || -> Result<Vec<RunningJob>, String> { panic!("squeue asked") };
    assert!(prolog(&node, &share_env(8, 10), &MpsBooking::default(), never).is_ok());
}

/// After a node failure Slurm starts many shares at once on a node whose
/// ledger still holds the records of the jobs it lost. Every prolog that
/// finds no room asks slurmctld; the first to reconcile drops the ghosts,
/// and the others find nothing left to drop: they must place again all
/// the same, and a refusal must state the load of that second look.
#[test]
fn a_share_places_again_after_another_prolog_dropped_the_ghosts() {
    let (node, _dir) = temp_node(None);
    // Jobs 1-8 ran two per GPU and vanished without an epilog.
    for job in 1..=8 {
        assert!(matches!(
            outcome(&node, &share_env(job, 50)),
            PrologOutcome::Placed { .. }
        ));
    }
    let only_new_jobs = || {
        Ok((20..=27)
            .map(|job| RunningJob {
                job,
                holds_mps: true,
            })
            .collect())
    };
    // The other prolog's reconciliation lands between this prolog's
    // failed placement and its own reconciliation.
    let beside = Ledger::open(&node.cfg.state_dir, node.owner).unwrap_or_else(|e| panic!("{e}"));
    let raced = || {
        let out = beside
            .reconcile(|j| j >= 20)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out.value.len(), 8, "the other prolog drops the ghosts");
        only_new_jobs()
    };
    let report = prolog(&node, &share_env(20, 50), &MpsBooking::default(), raced)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(report.dropped.is_empty(), "{:?}", report.dropped);
    assert!(
        matches!(report.outcome, PrologOutcome::Placed { .. }),
        "{:?}",
        report.outcome
    );
    // Seven more fill the node (two per GPU); the ninth is refused
    // with the load it saw after reconciling: 0 units free.
    for job in 21..=27 {
        let r = prolog(
            &node,
            &share_env(job, 50),
            &MpsBooking::default(),
            only_new_jobs,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(r.outcome, PrologOutcome::Placed { .. }), "{r:?}");
    }
    let ninth = prolog(
        &node,
        &share_env(28, 50),
        &MpsBooking::default(),
        only_new_jobs,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    match ninth.outcome {
        PrologOutcome::Refused { text, .. } => {
            assert!(text.contains("0 free in total"), "{text}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_count_mismatch_is_noted() {
    let (node, _dir) = temp_node(Some(400));
    let r = prolog(&node, &share_env(3, 40), &MpsBooking::default(), no_squeue)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        r.notes.iter().any(|n| n.contains("Count=1600")),
        "{:?}",
        r.notes
    );
}

/// A node whose gres.conf books 100 mps per GPU, spread by Slurm.
fn slurm_booking() -> MpsBooking {
    MpsBooking {
        per_gpu: true,
        all_sharing: true,
        least_loaded: true,
        per_gpu_count: Some(100),
        cgroup_v2: true,
        ..MpsBooking::default()
    }
}

/// A share as Slurm 24.11 sends it with per-GPU lines: its GPU and the
/// true percentage.
fn slurm_share_env(job: u32, units: u32, gpu: u32) -> JobEnv {
    JobEnv {
        mps_percentage: Some(units),
        units_claimed: None,
        job_gpus: vec![gpu],
        node: "gpu01".to_owned(),
        ..share_env(job, units)
    }
}

#[test]
fn where_slurm_places_its_gpu_is_recorded_and_left_to_slurm() {
    let (node, _dir) = temp_node(None);
    let booking = slurm_booking();
    // Slurm's books are the truth: a third share on a full GPU is
    // recorded there too (it shows as over capacity), never moved.
    for (job, gpu) in [(1, 2), (2, 2), (3, 2)] {
        let report = prolog(&node, &slurm_share_env(job, 50, gpu), &booking, no_squeue)
            .unwrap_or_else(|e| panic!("{e}"));
        let PrologOutcome::Placed { share, .. } = report.outcome else {
            panic!("{:?}", report.outcome);
        };
        assert_eq!(
            (share.gpu, share.units, share.placed_by_slurm),
            (2, 50, true)
        );
        // The third overfills GPU 2 in the ledger: slurmctld is asked
        // for vanished jobs (here it cannot be, so nothing is dropped).
        let asked = report
            .notes
            .iter()
            .any(|n| n.contains("cannot ask slurmctld"));
        assert_eq!(asked, job == 3, "{:?}", report.notes);
    }
    let plan = task_plan(&node.cfg, &node.ledger, 1, true, 1)
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("no plan"));
    // No device rules and Slurm's own CUDA variables: cgroup v2 is fine.
    assert!(!plan.confine);
    assert!(!plan
        .env
        .iter()
        .any(|(k, _)| k == "CUDA_VISIBLE_DEVICES" || k == "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
    assert!(plan
        .env
        .iter()
        .any(|(k, v)| k == "GPUSHARE_GPU" && v == "2"));
}

/// The job's SLUID (26.05's name of its cgroup/v2 directory) is kept with
/// its share, whoever placed it: the node timer maps processes by it.
#[test]
fn a_shares_sluid_is_recorded_whoever_places_it() {
    let (node, _dir) = temp_node(None);
    let sluid = |job| Some(format!("s0AB12CD34EF5{job}"));
    let ours = JobEnv {
        sluid: sluid(1),
        ..share_env(1, 50)
    };
    let slurms = JobEnv {
        sluid: sluid(2),
        ..slurm_share_env(2, 50, 3)
    };
    for (env, booking) in [(ours, MpsBooking::default()), (slurms, slurm_booking())] {
        let report = prolog(&node, &env, &booking, no_squeue).unwrap_or_else(|e| panic!("{e}"));
        let PrologOutcome::Placed { share, .. } = report.outcome else {
            panic!("{:?}", report.outcome);
        };
        assert_eq!(share.sluid, sluid(env.job));
    }
}

#[test]
fn where_slurm_places_on_a_gpu_full_of_vanished_jobs_they_are_dropped() {
    let (node, _dir) = temp_node(None);
    let booking = slurm_booking();
    for job in [1, 2] {
        outcome_with(&node, &slurm_share_env(job, 60, 0), &booking);
    }
    // Job 1 ended without an epilog; slurmctld runs 2 and 3.
    let running = || {
        Ok([2, 3]
            .map(|job| RunningJob {
                job,
                holds_mps: true,
            })
            .to_vec())
    };
    let report = prolog(&node, &slurm_share_env(3, 30, 0), &booking, running)
        .unwrap_or_else(|e| panic!("{e}"));
    let dropped: Vec<u32> = report.dropped.iter().map(Record::job).collect();
    assert_eq!(dropped, vec![1]);
    let state = node.ledger.snapshot().map(|s| s.state);
    assert!(state.is_ok_and(|s| s.share(2).is_some() && s.share(3).is_some()));
}

#[test]
fn where_slurm_places_a_missing_or_unknown_gpu_is_refused() {
    let (node, _dir) = temp_node(None);
    let booking = slurm_booking();
    let none = JobEnv {
        job_gpus: Vec::new(),
        node: "gpu01".to_owned(),
        ..slurm_share_env(1, 50, 0)
    };
    let refused = |env: &JobEnv, text: &str| {
        let outcome = outcome_with(&node, env, &booking);
        assert!(
            matches!(&outcome, PrologOutcome::Refused { text: t, .. } if t.contains(text)),
            "{outcome:?}"
        );
    };
    refused(&none, "SLURM_JOB_GPUS");
    refused(&slurm_share_env(2, 50, 4), "lists only 4 GPU devices");
}

#[test]
fn stacking_and_unit_mismatches_are_noted() {
    let (node, _dir) = temp_node(None);
    let booking = MpsBooking {
        least_loaded: false,
        per_gpu_count: Some(50),
        ..slurm_booking()
    };
    let env = JobEnv {
        mps_percentage: Some(50),
        ..slurm_share_env(1, 25, 0)
    };
    let r = prolog(&node, &env, &booking, no_squeue).unwrap_or_else(|e| panic!("{e}"));
    let notes = r.notes.join("\n");
    assert!(notes.contains("LL_SHARED_GRES"), "{notes}");
    assert!(
        notes.contains("Count=50") && notes.contains("UnitsPerGPU=100"),
        "{notes}"
    );
    assert!(matches!(r.outcome, PrologOutcome::Placed { share, .. } if share.units == 25));
}

#[test]
fn gpushare_placement_on_cgroup_v2_is_refused_with_the_way_out() {
    let (node, _dir) = temp_node(None);
    let booking = MpsBooking {
        cgroup_v2: true,
        ..MpsBooking::default()
    };
    let outcome = outcome_with(&node, &share_env(1, 50), &booking);
    let PrologOutcome::Refused {
        text,
        reason: "cgroup_v2",
    } = outcome
    else {
        panic!("{outcome:?}");
    };
    assert!(
        text.contains("cgroup v2") && text.contains("all_sharing"),
        "{text}"
    );
    assert!(node
        .ledger
        .snapshot()
        .is_ok_and(|s| s.state.share(1).is_none()));
    // The same node placing through Slurm runs the share.
    let placed = outcome_with(&node, &slurm_share_env(2, 50, 1), &slurm_booking());
    assert!(matches!(placed, PrologOutcome::Placed { .. }), "{placed:?}");
}

fn outcome_with(node: &Node, env: &JobEnv, booking: &MpsBooking) -> PrologOutcome {
    prolog(node, env, booking, no_squeue)
        .unwrap_or_else(|e| panic!("{e}"))
        .outcome
}

#[test]
fn after_a_downgrade_shares_are_refused_and_other_jobs_run() {
    let (node, _dir) = temp_node(Some(1600));
    assert!(matches!(
        outcome(&node, &share_env(1, 100)),
        PrologOutcome::Placed { .. }
    ));
    let path = node.ledger.state_path();
    let text = fs::read_to_string(&path).unwrap_or_default();
    fs::write(&path, text.replace("\"version\": 2", "\"version\": 9"))
        .unwrap_or_else(|e| panic!("{e}"));
    match outcome(&node, &share_env(2, 100)) {
        PrologOutcome::Refused { reason, text } => {
            assert_eq!(reason, "downgrade");
            assert!(text.contains("newer gpushare (ledger version 9"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    let whole = JobEnv {
        mps_percentage: None,
        units_claimed: None,
        ..share_env(3, 100)
    };
    let report = prolog(&node, &whole, &MpsBooking::default(), no_squeue);
    assert!(
        matches!(&report, Ok(r) if r.outcome == PrologOutcome::Untouched && !r.notes.is_empty()),
        "{report:?}"
    );
}

#[test]
fn a_share_whose_daemon_cannot_start_is_refused_unless_the_site_runs_it_anyway() {
    let (mut node, _dir) = temp_node(Some(1600));
    // `false -d` fails: the daemon cannot be started.
    node.cfg.mps_control = MpsControl::Program(PathBuf::from("/bin/false"));
    let report = prolog(&node, &share_env(1, 100), &MpsBooking::default(), no_squeue)
        .unwrap_or_else(|e| panic!("{e}"));
    match &report.outcome {
        PrologOutcome::Refused { reason, text } => {
            assert_eq!(*reason, MPS_DAEMON_REFUSAL);
            assert!(text.contains("could not be started"), "{text}");
            assert!(text.contains("MPSFailure=refuse"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    // Counted as a refusal and as a daemon failure.
    assert!(report
        .events()
        .contains(&Event::Refused(MPS_DAEMON_REFUSAL)));
    assert!(report
        .events()
        .iter()
        .any(|e| matches!(e, Event::Daemon(MpsDaemon::Failed(_)))));
    let refused = task_plan(&node.cfg, &node.ledger, 1, true, 1);
    assert!(refused.is_err_and(|e| e.contains("could not be started")));
    // MPSFailure=run: placed, and its first line says what it lacks.
    node.cfg.mps_failure = config::MpsFailure::Run;
    match outcome(&node, &share_env(2, 100)) {
        PrologOutcome::Placed { mps, .. } => {
            assert!(matches!(mps, MpsDaemon::Failed(_)), "{mps:?}")
        }
        other => panic!("{other:?}"),
    }
    let plan = task_plan(&node.cfg, &node.ledger, 2, true, 1)
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("no plan"));
    assert!(
        plan.banner.contains("WARNING") && plan.banner.contains("WITHOUT MPS"),
        "{}",
        plan.banner
    );
    // The note goes with the job.
    epilog(&node, 2).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(unserved(&node.ledger, 2), None);
}

#[test]
fn auto_without_a_control_program_refuses_shares_and_none_runs_them() {
    let (mut node, _dir) = temp_node(Some(1600));
    node.cfg.mps_control = MpsControl::FromPath;
    if crate::mps::programs::program(&node.cfg).is_some() {
        return; // a node with MPS installed: nothing to show here
    }
    match outcome(&node, &share_env(1, 100)) {
        PrologOutcome::Refused { reason, text } => {
            assert_eq!(reason, MPS_DAEMON_REFUSAL);
            assert!(text.contains("MPSControl=auto looks in PATH"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    // MPSControl=none: the site runs MPS itself.
    node.cfg.mps_control = MpsControl::Disabled;
    assert!(matches!(
        outcome(&node, &share_env(2, 100)),
        PrologOutcome::Placed { .. }
    ));
}

/// Every GPU set aside (one forged kernel log line per GPU could do it):
/// a share is refused and sent elsewhere, wherever it would go; a CPU-only
/// job and a whole-GPU job run, the whole one told of its GPU. The prolog
/// never fails for it, so Slurm never drains the node for it.
#[test]
fn gpus_set_aside_refuse_only_the_shares_placed_on_them() {
    let (mut node, _dir) = temp_node(Some(1600));
    for gpu in 0..4 {
        health::set_aside(
            &node.cfg.state_dir,
            gpu,
            "XID 79 in the kernel log",
            Default::default(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    node.failed = health::read(&node.cfg.state_dir);
    assert!(health::all_failed(&node.failed, node.gpu_count).is_some());
    let refused = |outcome: PrologOutcome| match outcome {
        PrologOutcome::Refused { reason, text } => {
            assert_eq!(reason, "gpu_failed", "{text}");
            assert!(text.contains("XID 79 in the kernel log"), "{text}");
        }
        other => panic!("{other:?}"),
    };
    refused(outcome(&node, &share_env(1, 100)));
    let by_slurm = prolog(
        &node,
        &slurm_share_env(2, 50, 3),
        &slurm_booking(),
        no_squeue,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    refused(by_slurm.outcome);
    let cpu = JobEnv {
        mps_percentage: None,
        units_claimed: None,
        job_gpus: Vec::new(),
        ..share_env(3, 100)
    };
    assert_eq!(outcome(&node, &cpu), PrologOutcome::Untouched);
    let whole = JobEnv {
        job_gpus: vec![1],
        ..cpu.clone()
    };
    let whole = JobEnv { job: 4, ..whole };
    let report =
        prolog(&node, &whole, &MpsBooking::default(), no_squeue).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        matches!(&report.outcome, PrologOutcome::Whole { gpus, .. } if gpus == &vec![1]),
        "{report:?}"
    );
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.starts_with("GPU 1, set aside from sharing (XID 79")),
        "{:?}",
        report.notes
    );
    // Given back, the GPU takes shares again.
    health::resume(&node.cfg.state_dir, 0, Default::default()).unwrap_or_else(|e| panic!("{e}"));
    node.failed = health::read(&node.cfg.state_dir);
    assert!(matches!(
        outcome(&node, &share_env(5, 100)),
        PrologOutcome::Placed { .. }
    ));
}

/// gpu_mps.conf stays bad where a last good copy is recorded: the node
/// runs with that copy and refuses new shares with the file's fault. The
/// share's tasks are told it, and its epilog releases nothing and succeeds.
#[test]
fn a_share_refused_for_a_bad_conf_beside_a_last_good_copy_is_told_why() {
    let (mut node, _dir) = temp_node(None);
    let why = "gpu_mps.conf: no newline at its end (cut off?); new shares are refused on this \
               node until it is fixed";
    node.shares_refused = Some(why.to_owned());
    match outcome(&node, &share_env(9, 50)) {
        PrologOutcome::Refused {
            reason: "config",
            text,
        } => assert!(text.contains(why), "{text}"),
        other => panic!("{other:?}"),
    }
    let told = task_plan(&node.cfg, &node.ledger, 9, true, 1);
    assert!(
        told.as_ref()
            .is_err_and(|e| e.contains("job 9 on node gpu01") && e.contains(why)),
        "{told:?}"
    );
    let r = epilog(&node, 9).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.released.is_empty() && r.stopped.is_empty(), "{r:?}");
    assert_eq!(refusal(&node.ledger, 9), None);
}

/// A node its admin disabled (`gpu-mps disable`) refuses new shares with
/// reason `disabled`, before anything else is looked at; a whole-GPU job
/// runs as before.
#[test]
fn a_disabled_node_refuses_shares_only() {
    let (mut node, _dir) = temp_node(None);
    node.disabled = Some(crate::mps::disabled::Disabled {
        since: 1,
        reason: "moving to MIG".to_owned(),
    });
    node.shares_refused = Some("a bad file too".to_owned());
    match outcome(&node, &share_env(9, 50)) {
        PrologOutcome::Refused {
            reason: "disabled",
            text,
        } => assert!(text.contains("gpu-mps disable: moving to MIG"), "{text}"),
        other => panic!("{other:?}"),
    }
    let whole = JobEnv {
        mps_percentage: None,
        units_claimed: None,
        job_gpus: vec![1],
        ..share_env(10, 0)
    };
    assert!(!matches!(
        outcome(&node, &whole),
        PrologOutcome::Refused { .. }
    ));
}

/// A job Slurm gave a GPU whole where gpushare's shares run, in
/// EXCLUSIVE_PROCESS: its prolog gives the GPU its earlier mode, its
/// epilog makes it exclusive again for the share still there; a whole
/// GPU without shares is never asked about.
#[test]
fn a_gpu_given_whole_beside_shares_has_its_earlier_mode_while_held() {
    let (mut node, dir) = temp_node(Some(1600));
    node.cfg.mps_control =
        MpsControl::Program(crate::mps::compute_mode::tests::fake_smi(dir.path()));
    node.ledger
        .place(7, 1000, "alice", 25, 4, 100)
        .unwrap_or_else(|e| panic!("{e}"));
    crate::mps::compute_mode::make_exclusive(&node.cfg, 0).unwrap_or_else(|e| panic!("{e}"));
    let mode = || fs::read_to_string(dir.path().join("mode-0")).unwrap_or_default();
    assert_eq!(mode(), "EXCLUSIVE_PROCESS\n");
    let whole = |job, gpus: Vec<u32>| JobEnv {
        mps_percentage: None,
        units_claimed: None,
        job_gpus: gpus,
        ..share_env(job, 0)
    };
    let log = dir.path().join("log");
    fs::write(&log, "").unwrap_or_else(|e| panic!("{e}"));
    let report = prolog(&node, &whole(8, vec![1]), &MpsBooking::default(), no_squeue)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(report.notes.is_empty(), "{:?}", report.notes);
    assert_eq!(fs::read_to_string(&log).ok().as_deref(), Some(""));
    let report = prolog(&node, &whole(9, vec![0]), &MpsBooking::default(), no_squeue)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(mode(), "DEFAULT\n");
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.starts_with("GPU 0: compute mode set to DEFAULT")),
        "{:?}",
        report.notes
    );
    let released = epilog(&node, 9).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(mode(), "EXCLUSIVE_PROCESS\n", "{:?}", released.notes);
    // Without the share, the whole job's epilog leaves the mode to the
    // share's: the GPU's earlier mode comes back when its daemon stops.
    epilog(&node, 7).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(mode(), "DEFAULT\n");
}

/// A daemon left running without a share (its GPU's lock was busy at
/// the last share's end) keeps GPU 1 in EXCLUSIVE_PROCESS: a job Slurm
/// gives it whole has its prolog stop that daemon first, which gives the
/// GPU its earlier mode; GPU 0's daemon, serving a share, is kept (the job
/// runs beside it in the earlier mode, as before).
#[test]
fn an_idle_daemon_on_a_gpu_given_whole_is_stopped_before_the_job_starts() {
    let (mut node, dir) = temp_node(Some(1600));
    node.cfg.mps_control =
        MpsControl::Program(crate::mps::compute_mode::tests::fake_smi(dir.path()));
    let placed = node.ledger.place(7, 1000, "alice", 25, 4, 100);
    assert_eq!(placed.ok().map(|p| p.value.share.gpu), Some(0));
    crate::mps::daemon::tests::daemon_left(&node.cfg, 0);
    crate::mps::daemon::tests::daemon_left(&node.cfg, 1);
    let mode = |gpu: u32| fs::read_to_string(dir.path().join(format!("mode-{gpu}")));
    let control = |gpu: u32| crate::mps::daemon::pipe_dir(&node.cfg, gpu).join("control");
    assert_eq!(mode(1).ok().as_deref(), Some("EXCLUSIVE_PROCESS\n"));
    let whole = JobEnv {
        mps_percentage: None,
        units_claimed: None,
        job_gpus: vec![0, 1],
        ..share_env(9, 0)
    };
    let report =
        prolog(&node, &whole, &MpsBooking::default(), no_squeue).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        report
            .notes
            .contains(&"GPU 1: MPS daemon without a share (left idle): stopped".to_owned()),
        "{:?}",
        report.notes
    );
    assert!(!control(1).exists(), "the idle daemon was asked to quit");
    assert_eq!(mode(1).ok().as_deref(), Some("DEFAULT\n"));
    assert_eq!(crate::mps::compute_mode::recorded(&node.cfg, 1), None);
    // The share's daemon runs on, its GPU in its earlier mode meanwhile.
    assert!(control(0).exists());
    assert_eq!(mode(0).ok().as_deref(), Some("DEFAULT\n"));
    assert_eq!(
        crate::mps::compute_mode::recorded(&node.cfg, 0),
        Some("DEFAULT")
    );
}

/// The ledger's lock held by another open file description (another
/// process), with `node` waiting at most 100 ms for it.
fn ledger_held_elsewhere(node: &mut Node) -> fs::File {
    node.set_lock_wait(LockWait::each(std::time::Duration::from_millis(100)));
    let other =
        lock_wait::open_lock(&node.ledger.dir().join("lock")).unwrap_or_else(|e| panic!("{e}"));
    other.lock().unwrap_or_else(|e| panic!("{e}"));
    other
}

#[test]
fn a_ledger_locked_past_the_wait_refuses_the_job_and_records_nothing() {
    let (mut node, _dir) = temp_node(Some(1600));
    let other = ledger_held_elsewhere(&mut node);
    let whole = JobEnv {
        mps_percentage: None,
        units_claimed: None,
        job_gpus: vec![2],
        ..share_env(2, 0)
    };
    for env in [share_env(1, 100), whole] {
        match outcome(&node, &env) {
            PrologOutcome::Refused { reason, text } => {
                assert_eq!(reason, BUSY_REFUSAL);
                let lock = node.ledger.dir().join("lock");
                assert!(
                    text.contains(&format!(
                        "the node's share ledger lock ({})",
                        lock.display()
                    )) && text.contains("stayed held by another process for the 0.1 s")
                        && text.contains("a batch job is requeued to run elsewhere"),
                    "{text}"
                );
                // Its steps fail with the same words.
                let plan = task_plan(&node.cfg, &node.ledger, env.job, env.is_share(), 1);
                assert_eq!(plan.err(), Some(text));
            }
            other => panic!("not refused: {other:?}"),
        }
    }
    assert!(
        ok(node.ledger.snapshot()).state.is_empty(),
        "nothing placed"
    );
    // A CPU-only job waits for no lock and runs.
    let cpu = JobEnv {
        mps_percentage: None,
        units_claimed: None,
        job_gpus: Vec::new(),
        ..share_env(3, 0)
    };
    assert_eq!(outcome(&node, &cpu), PrologOutcome::Untouched);
    // Released: the next share is placed.
    drop(other);
    assert!(matches!(
        outcome(&node, &share_env(4, 100)),
        PrologOutcome::Placed { .. }
    ));
}

#[test]
fn a_gpus_daemon_lock_held_past_the_wait_refuses_the_share_it_placed() {
    let (mut node, _dir) = temp_node(Some(1600));
    node.set_lock_wait(LockWait::each(std::time::Duration::from_millis(100)));
    let path = node.ledger.dir().join("daemon-gpu0.lock");
    let other = lock_wait::open_lock(&path).unwrap_or_else(|e| panic!("{e}"));
    other.lock().unwrap_or_else(|e| panic!("{e}"));
    // The first share goes to GPU 0 (all are empty).
    match outcome(&node, &share_env(1, 100)) {
        PrologOutcome::Refused { reason, text } => {
            assert_eq!(reason, BUSY_REFUSAL);
            assert!(text.contains("GPU 0's MPS daemon lock ("), "{text}");
        }
        other => panic!("not refused: {other:?}"),
    }
    // Placed, then refused: its epilog releases it, as any refused share.
    assert!(ok(node.ledger.snapshot()).state.share(1).is_some());
    drop(other);
    ok(epilog(&node, 1));
    assert!(ok(node.ledger.snapshot()).state.is_empty());
}

#[test]
fn an_epilog_that_finds_the_ledger_locked_leaves_its_release_and_loses_nothing() {
    let (mut node, dir) = temp_node(Some(1600));
    assert!(matches!(
        outcome(&node, &share_env(7, 100)),
        PrologOutcome::Placed { .. }
    ));
    let other = ledger_held_elsewhere(&mut node);
    let report = epilog(&node, 7).unwrap_or_else(|e| panic!("{e}"));
    let marker = node.ledger.dir().join("release.7");
    assert_eq!(report.deferred.as_deref(), Some(marker.as_path()));
    assert!(report.released.is_empty() && marker.exists());
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("stayed held by another process")
                && n.contains("job 7's release is left to the ledger's next change")),
        "{:?}",
        report.notes
    );
    // A job without a record here waits for no lock: nothing to defer.
    let cpu = epilog(&node, 99).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cpu, EpilogReport::default());
    // Unlocked: the next change (here the node timer's) releases it,
    // and follows it up as its epilog would have.
    drop(other);
    let finished = finish_deferred(&node).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        finished.first().is_some_and(|l| l.contains("share job=7"))
            && finished
                .iter()
                .any(|l| l.starts_with("GPU 0 has no share left")),
        "{finished:?}"
    );
    assert!(node
        .ledger
        .snapshot()
        .map(|s| s.state.is_empty())
        .unwrap_or(false));
    assert!(!marker.exists());
    drop(dir);
}

/// A job Slurm gave GPUs whole, asking for a daemon of its own.
fn private_env(job: u32, gpus: Vec<u32>, threads: Option<u32>) -> JobEnv {
    JobEnv {
        mps_percentage: None,
        units_claimed: None,
        job_gpus: gpus,
        private: Ok(Some(PrivateRequest { threads })),
        ..share_env(job, 0)
    }
}

#[test]
fn a_private_daemon_is_recorded_for_whole_gpus_where_the_site_allows_it() {
    let (mut node, _dir) = temp_node(Some(1600));
    node.cfg.private_mps = true;
    let expected = PrivateRecord {
        uid: 1000,
        gpus: vec![1, 2],
        threads: Some(30),
    };
    assert_eq!(
        outcome(&node, &private_env(7, vec![1, 2], Some(30))),
        PrologOutcome::Whole {
            gpus: vec![1, 2],
            overlapping: Vec::new(),
            private: Some(expected.clone()),
        }
    );
    assert_eq!(
        crate::mps::node::notes::private_record(&node.ledger, 7),
        Some(expected)
    );
    // It holds its GPUs whole: no share goes there meanwhile.
    let state = ok(node.ledger.snapshot()).state;
    assert!(state.whole_holder(7).is_some());
    // The epilog takes the record with the job.
    epilog(&node, 7).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        crate::mps::node::notes::private_record(&node.ledger, 7),
        None
    );
}

#[test]
fn a_private_daemon_is_refused_with_its_reason_and_nothing_recorded() {
    let (mut node, _dir) = temp_node(Some(1600));
    let refused_as = |node: &Node, env: &JobEnv, why: &str, said: &str| match outcome(node, env) {
        PrologOutcome::Refused { reason, text } => {
            assert_eq!(reason, why);
            assert!(text.contains(said), "{text}");
            assert_eq!(
                refusal(&node.ledger, env.job).as_deref(),
                Some(text.as_str())
            );
            assert_eq!(
                crate::mps::node::notes::private_record(&node.ledger, env.job),
                None
            );
        }
        other => panic!("{other:?}"),
    };
    let refused =
        |node: &Node, env: &JobEnv, said: &str| refused_as(node, env, PRIVATE_REFUSAL, said);
    // The site has not allowed it.
    refused(&node, &private_env(1, vec![0], None), "PrivateMPS=allow");
    node.cfg.private_mps = true;
    // No GPU here.
    refused(&node, &private_env(2, Vec::new(), None), "holds no GPU");
    // A share.
    let share = JobEnv {
        private: Ok(Some(PrivateRequest { threads: None })),
        ..share_env(3, 100)
    };
    refused(&node, &share, "holds an MPS share");
    // A value the option does not take.
    let bad = JobEnv {
        private: Err("--gpu-mps takes one value, private".to_owned()),
        ..private_env(4, vec![0], None)
    };
    refused(&node, &bad, "takes one value");
    // A GPU a share is recorded on (Slurm 22.05 books shares on GPU 0):
    // the node's state, a reason of its own (the job is requeued).
    assert!(matches!(
        outcome(&node, &share_env(5, 100)),
        PrologOutcome::Placed { .. }
    ));
    let placed = ok(node.ledger.snapshot()).state;
    let gpu = placed.share(5).map(|s| s.gpu).unwrap_or_default();
    refused_as(
        &node,
        &private_env(6, vec![gpu], None),
        PRIVATE_SHARED_REFUSAL,
        &format!("GPU {gpu} of this job"),
    );
}

/// A GPU under `gpu-mps selftest`: gpushare's placement passes it by;
/// where Slurm chose it, or the mark came after the placement (read again
/// under the GPU's daemon lock, where the test marks it), the share is
/// refused `busy` (not counted, requeued), never served by the test's
/// server.
#[test]
fn a_gpu_under_self_test_is_passed_by_and_never_served() {
    use crate::mps::under_test;
    let (mut node, _dir) = temp_node(Some(1600));
    let longest = std::time::Duration::from_secs(120);
    under_test::mark(&node.cfg.state_dir, 0, longest, Default::default())
        .unwrap_or_else(|e| panic!("{e}"));
    node.under_test = under_test::read(&node.cfg.state_dir);
    match outcome(&node, &share_env(1, 100)) {
        PrologOutcome::Placed { share, .. } => assert_ne!(share.gpu, 0),
        other => panic!("{other:?}"),
    }
    let busy = |outcome: PrologOutcome| match outcome {
        PrologOutcome::Refused { reason, text } => {
            assert_eq!(reason, BUSY_REFUSAL, "{text}");
            assert!(text.contains("GPU 0 is under its MPS self-test"), "{text}");
        }
        other => panic!("{other:?}"),
    };
    let by_slurm = prolog(
        &node,
        &slurm_share_env(2, 50, 0),
        &slurm_booking(),
        no_squeue,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    busy(by_slurm.outcome);
    // A prolog that read no mark, placing on GPU 0 (the least loaded).
    let mut unaware = node;
    unaware.under_test = Default::default();
    busy(outcome(&unaware, &share_env(3, 100)));
    // The test over (and the refused share's epilog done), the GPU takes
    // shares again.
    under_test::clear(&unaware.cfg.state_dir, 0, Default::default())
        .unwrap_or_else(|e| panic!("{e}"));
    epilog(&unaware, 3).unwrap_or_else(|e| panic!("{e}"));
    match outcome(&unaware, &share_env(4, 100)) {
        PrologOutcome::Placed { share, .. } => assert_eq!(share.gpu, 0),
        other => panic!("{other:?}"),
    }
}
