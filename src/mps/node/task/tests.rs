//! The task plan's tests: each on a node whose prolog placed the share.

use super::*;
use crate::mps::node::prolog::prolog;
use crate::mps::node::prolog::tests::{no_squeue, outcome};
use crate::mps::node::report::{PrologOutcome, PrologReport};
use crate::mps::node::setup::tests::temp_node;
use crate::mps::node::trust::tests::share_env;
use crate::mps::node::Node;
use crate::shared::booking::MpsBooking;
use std::fs;

#[test]
fn shares_spread_and_tasks_get_their_gpu() {
    let (node, _dir) = temp_node(None);
    let mut gpus = Vec::new();
    for job in 1..=4 {
        match prolog(
            &node,
            &share_env(job, 50),
            &MpsBooking::default(),
            no_squeue,
        ) {
            Ok(PrologReport {
                outcome: PrologOutcome::Placed { share, .. },
                notes,
                ..
            }) => {
                assert!(notes.is_empty(), "{notes:?}");
                gpus.push(share.gpu)
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(gpus, vec![0, 1, 2, 3]);
    let copy = daemon::public_dir(&node.cfg).join(StatusCopy::FILE);
    let public: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&copy).unwrap_or_default()).unwrap_or_default();
    assert_eq!(public["gpus"][2]["shares"][0]["job"], 3, "{public}");
    let plan = task_plan(&node.cfg, &node.ledger, 3, true, 1)
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("no plan"));
    assert_eq!(plan.gpu, 2);
    assert_eq!(plan.device, PathBuf::from("/dev/fake2"));
    assert_eq!(plan.other_devices.len(), 3);
    assert!(plan
        .env
        .contains(&("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".into(), "50".into())));
    assert!(plan.env.contains(&("GPUSHARE_GPU".into(), "2".into())));
    assert_eq!(task_plan(&node.cfg, &node.ledger, 99, false, 1), Ok(None));
    assert!(task_plan(&node.cfg, &node.ledger, 99, true, 1)
        .is_err_and(|e| e.contains("Prolog=gpu-mps-prolog")));
    // An unreadable ledger: the published copy still places the job;
    // without it, only share jobs fail.
    fs::write(node.ledger.state_path(), "{").unwrap_or_else(|e| panic!("{e}"));
    let from_copy = task_plan(&node.cfg, &node.ledger, 3, true, 1);
    assert_eq!(from_copy.map(|p| p.map(|p| p.gpu)), Ok(Some(2)));
    fs::remove_file(&copy).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(task_plan(&node.cfg, &node.ledger, 99, false, 1), Ok(None));
    assert!(task_plan(&node.cfg, &node.ledger, 3, true, 1).is_err_and(|e| e.contains("unreadable")));
}

#[test]
fn a_shares_memory_is_divided_over_its_steps_tasks() {
    let (mut node, _dir) = temp_node(Some(1600));
    node.cfg.gpu_memory_mib = Some(48 * 1024);
    node.set_gpu_memory(Some(48 * 1024));
    assert!(matches!(
        outcome(&node, &share_env(1, 100)),
        PrologOutcome::Placed { .. }
    ));
    // A whole GPU's units: its 48 GiB.
    let limit_of = |tasks: u32| {
        let plan = task_plan(&node.cfg, &node.ledger, 1, true, tasks)
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("no plan"));
        let var = |name: &str| {
            plan.env
                .iter()
                .chain(&plan.hints)
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        (
            var("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"),
            var("GPUSHARE_MEMORY_FRACTION"),
            var("XLA_PYTHON_CLIENT_MEM_FRACTION"),
            plan.banner,
        )
    };
    let (one, fraction, jax, banner) = limit_of(1);
    assert_eq!(one, "0=49152M");
    assert_eq!((fraction.as_str(), jax.as_str()), ("1.0000", "0.7500"));
    assert!(banner.contains("49152 MiB"), "{banner}");
    let (three, fraction, _, banner) = limit_of(3);
    assert_eq!(three, "0=16384M");
    assert_eq!(fraction, "0.3333");
    assert!(
        banner.contains("16384 MiB for each of this step's 3 tasks"),
        "{banner}"
    );
    // Whatever the tasks, together they hold at most the share.
    for tasks in 1..=48u32 {
        let (limit, fraction, jax, _) = limit_of(tasks);
        let mib: u64 = limit
            .trim_start_matches("0=")
            .trim_end_matches('M')
            .parse()
            .unwrap_or(u64::MAX);
        assert!(mib * u64::from(tasks) <= 49152, "{tasks} tasks: {limit}");
        let f: f64 = fraction.parse().unwrap_or(2.0);
        let j: f64 = jax.parse().unwrap_or(2.0);
        assert!(
            f * f64::from(tasks) <= 1.0 && j < f,
            "{tasks} tasks: {f} {j}"
        );
    }
}

#[test]
fn framework_hints_never_pass_the_share() {
    let cfg = GpuMpsConfig {
        gpu_memory_mib: Some(40_000),
        ..GpuMpsConfig::default()
    };
    // A fixed limit below the share's part of the GPU lowers the fraction.
    assert_eq!(memory_fraction(&cfg, 50, Some(10_000), 1), 0.25);
    assert_eq!(memory_fraction(&cfg, 50, Some(5_000), 2), 0.125);
    // Unknown GPU memory: the share's part of the GPU.
    let unknown = GpuMpsConfig::default();
    assert_eq!(memory_fraction(&unknown, 50, Some(10_000), 1), 0.5);
    let hints = framework_hints(1.0 / 3.0);
    assert!(hints.contains(&("GPUSHARE_MEMORY_FRACTION".into(), "0.3333".into())));
    assert!(hints.contains(&("XLA_PYTHON_CLIENT_MEM_FRACTION".into(), "0.2500".into())));
    assert!(hints.contains(&("TF_FORCE_GPU_ALLOW_GROWTH".into(), "true".into())));
    let third_of_a_quarter = framework_hints(0.25 / 3.0);
    assert!(
        third_of_a_quarter.contains(&("XLA_PYTHON_CLIENT_MEM_FRACTION".into(), "0.0625".into()))
    );
}

/// A node where alice's share (job 1) and bob's (job 2) are on GPU 0.
pub(crate) fn alice_and_bob_on_gpu_0() -> (Node, tempfile::TempDir) {
    use crate::mps::ledger::{Holder, SlurmChoice};
    let (node, dir) = temp_node(None);
    let on_gpu_0 = SlurmChoice {
        gpu: 0,
        gpu_count: 4,
        units_per_gpu: 100,
    };
    for (job, uid, user) in [(1, 1000, "alice"), (2, 1001, "bob")] {
        node.ledger
            .record_slurm_share(Holder::new(job, uid, user), 30, on_gpu_0)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    (node, dir)
}

/// The banner of `job`'s first step on `node`.
pub(crate) fn banner_of(node: &Node, job: u32) -> String {
    task_plan(&node.cfg, &node.ledger, job, true, 1)
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|p| p.banner)
        .unwrap_or_else(|| panic!("no plan"))
}

/// bob's share beside alice's on GPU 0: his banner names alice only where
/// the node shows who runs what (`PrivateData=no`); where it hides users
/// (`yes`, or `auto` where Slurm's `PrivateData` names `users` or `jobs`) it
/// says only that another user's server is there.
#[test]
fn the_banner_names_other_users_only_where_the_node_shows_them() {
    use crate::mps::config::PrivateData;
    let (mut node, _dir) = alice_and_bob_on_gpu_0();
    node.cfg.private_data = PrivateData::No;
    let shown = banner_of(&node, 2);
    assert!(
        shown.contains("runs the MPS server of user alice")
            && shown.contains("until the jobs of user alice on this GPU end"),
        "{shown}"
    );
    node.cfg.private_data = PrivateData::Yes;
    let hidden = banner_of(&node, 2);
    assert!(
        hidden.contains("another user's MPS server runs on this GPU")
            && hidden.contains("will wait until that user's jobs on this GPU end")
            && !hidden.contains("alice"),
        "{hidden}"
    );
    assert!(!banner_of(&node, 1).contains("bob"));
    // `auto` follows Slurm's PrivateData (config.rs's tests), read from
    // the slurm.conf in use: tests/attack.rs runs it on a cluster.
}

/// `Banner=`: the job's stderr gets the line only under `stderr`; `log`
/// hands it to slurmstepd's log; `off` tells it nowhere; only the job's
/// first step here tells it at all.
#[test]
fn the_banner_goes_where_banner_says_once_per_job() {
    use crate::mps::config::Banner;
    use crate::mps::ledger::{Holder, SlurmChoice};
    let (node, _dir) = temp_node(None);
    let choice = SlurmChoice {
        gpu: 1,
        gpu_count: 4,
        units_per_gpu: 100,
    };
    node.ledger
        .record_slurm_share(Holder::new(7, 1000, "alice"), 25, choice)
        .unwrap_or_else(|e| panic!("{e}"));
    let plan_with = |node: &crate::mps::node::Node, to: Banner| {
        let mut cfg = node.cfg.clone();
        cfg.banner = to;
        task_plan(&cfg, &node.ledger, 7, true, 1)
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("no plan"))
    };
    let line = "gpu_mps: job 7: MPS share of 25 units on GPU 1";
    let mut stderr = plan_with(&node, Banner::Stderr);
    assert!(stderr.banner_wanted());
    assert_eq!(stderr.route_banner(true), None);
    assert!(stderr.banner.starts_with(line), "{}", stderr.banner);
    let mut log = plan_with(&node, Banner::Log);
    assert!(log.banner_wanted());
    let logged = log.route_banner(true).unwrap_or_default();
    assert!(logged.starts_with(line), "{logged}");
    assert_eq!(log.banner, "", "Banner=log: nothing for the job's stderr");
    let mut off = plan_with(&node, Banner::Off);
    assert!(!off.banner_wanted(), "Banner=off claims no marker");
    assert_eq!((off.route_banner(true), off.banner.as_str()), (None, ""));
    // A later step of the job: nothing, wherever the line goes.
    for to in [Banner::Stderr, Banner::Log, Banner::Off] {
        let mut later = plan_with(&node, to);
        assert_eq!(
            (later.route_banner(false), later.banner.as_str()),
            (None, "")
        );
    }
}

#[test]
fn a_task_that_cannot_see_its_gpus_mps_directory_is_refused() {
    let (node, dir) = temp_node(None);
    let placed = prolog(&node, &share_env(7, 25), &MpsBooking::default(), no_squeue);
    assert!(placed.is_ok(), "{placed:?}");
    let mut plan = task_plan(&node.cfg, &node.ledger, 7, true, 1)
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("no plan"));
    // No daemons on this node (MPSControl=none): nothing to see.
    assert_eq!(plan.pipes, None);
    assert_eq!(unreachable_pipes(&plan, 7), None);
    // Where the node runs daemons, a directory the task sees passes.
    let seen = dir.path().join("gpu-mps-mps/gpu0");
    fs::create_dir_all(&seen).unwrap_or_else(|e| panic!("{e}"));
    plan.pipes = Some(seen);
    assert_eq!(unreachable_pipes(&plan, 7), None);
    // One a job namespace hid (an empty private /tmp over it) fails the
    // task with the setting to change.
    plan.pipes = Some(dir.path().join("hidden/gpu-mps-mps/gpu0"));
    let refusal = unreachable_pipes(&plan, 7).unwrap_or_default();
    assert!(
        refusal.starts_with("gpu_mps: job 7: this task cannot see its GPU's MPS directory")
            && refusal.contains("StateDir=")
            && refusal.contains("Dirs= of job_container.conf"),
        "{refusal}"
    );
}
