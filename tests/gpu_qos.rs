//! `job_submit/gpu_qos` against a real slurmctld with real accounting: every
//! policy row of docs/configuration.md, as the user sees it in `sbatch`/`scontrol`.
//!
//! Jobs are submitted held (`-H`) unless the test needs them to run, so the
//! suite judges submissions without waiting for the scheduler.

use std::fs;
use std::process::ExitCode;

use gpushare::mps::daemon::process_uid;
use testcluster::cluster::{slurm_release, wait_for, GpuSpec, Qos, EXAMPLE_GPU_QOS_CONF};
use testcluster::time::{JOB_LONG, JOB_START, SHORT};
use testcluster::users::TestUser;
use testcluster::{ensure, Cluster, ClusterSpec, Suite, TestResult};

#[path = "gpu_qos/caps.rs"]
mod caps;
#[path = "gpu_qos/coexist.rs"]
mod coexist;
#[path = "gpu_qos/exempt.rs"]
mod exempt;
#[path = "gpu_qos/last_good.rs"]
mod last_good;
#[path = "gpu_qos/levels.rs"]
mod levels;
use caps::type_caps;
use levels::*;
#[path = "gpu_qos/lowprio_update.rs"]
mod lowprio_update;
#[path = "gpu_qos/without_file.rs"]
mod without_file;

fn main() -> ExitCode {
    let suite = Suite::new(ClusterSpec::example_site())
        // Each test starts with no job left by the one before.
        .reset(|c| c.cancel_all())
        .test(
            "untyped_gpu_under_group_qos_is_rejected_with_the_fix",
            untyped_rejected,
        )
        .smoke()
        .test(
            "typed_gpu_under_group_qos_is_accepted_unchanged",
            typed_accepted,
        )
        .smoke()
        .test(
            "type_outside_the_qos_is_rejected_listing_permitted_types",
            wrong_type,
        )
        .test("every_way_of_asking_for_gpus_is_judged", every_way)
        .smoke()
        .test(
            "request_that_can_never_fit_the_group_is_rejected",
            never_fits,
        )
        .test("group_qos_without_gpu_request_is_rejected", no_gpu_request)
        .test("jobs_under_other_qos_are_untouched", other_qos_untouched)
        .test("scontrol_update_to_group_qos_needs_a_typed_request", modify)
        .smoke()
        .test(
            "lowprio_jobs_are_made_requeueable_and_throttled",
            lowprio_flags,
        )
        .smoke()
        .test(
            "lowprio_no_requeue_is_accepted_with_a_warning",
            lowprio_no_requeue,
        )
        .test(
            "lowprio_exclusive_user_is_cleared_with_a_warning",
            lowprio_exclusive_user,
        )
        .test(
            "lowprio_array_throttle_lifted_by_an_update_is_set_back",
            lowprio_update::lowprio_array_throttle_is_set_back,
        )
        .test(
            "another_users_array_throttle_is_refused_and_logged",
            lowprio_update::another_users_throttle_is_refused_and_logged,
        )
        .test(
            "a_gpu_type_an_update_gives_is_held_to_the_jobs_own_qos",
            lowprio_update::a_type_given_by_update_is_held_to_its_qos,
        )
        .test(
            "preempted_lowprio_job_keeps_its_earlier_output",
            lowprio_output_kept,
        )
        .test(
            "gpu_shares_only_inside_shared_reservations",
            shared_reservations,
        )
        .test("hostile_requests_never_hurt_slurmctld", hostile_requests)
        .test(
            "untyped_gpus_escape_no_level_default_qos_partition_account",
            every_level,
        )
        .test(
            "typed_limits_without_a_rule_and_updates_leave_no_job_untyped",
            unruled_levels,
        )
        .test_on(
            "mig_slice_types_each_count_against_their_own_limit",
            mig_site(),
            mig_slices,
        )
        .test(
            "gpu_qos_check_json_is_json_against_the_database",
            check_json,
        )
        .test(
            "a_default_type_is_given_in_the_request_slurm_holds",
            default_type_given,
        )
        .test("per_type_caps_are_judged_on_what_slurm_holds", type_caps)
        .test(
            "a_rule_that_only_warns_accepts_and_tells_while_others_refuse",
            warn_only,
        )
        .test(
            "edited_config_is_picked_up_and_bad_edit_keeps_last_good",
            reload,
        )
        .test_on(
            "an_unwritable_metrics_file_is_logged_once_and_reloads_go_on",
            non_root_slurm_user_site(),
            metrics_file_trouble,
        )
        .test(
            "an_exempt_user_and_an_operators_update_are_accepted_and_counted",
            exempt::exemptions,
        )
        .test(
            "missing_or_invalid_config_leaves_slurmctld_running_on_the_database_limits",
            without_file::bad_config_at_init,
        )
        .test("bad_file_at_start_loads_last_good", last_good::at_start);
    // A site's job_submit.lua beside gpu_qos, where this Slurm has lua.
    let suite = if testcluster::cluster::slurm_has_job_submit("lua") {
        suite.test_on(
            "a_site_lua_script_runs_first_and_gpu_qos_judges_what_it_made",
            coexist::lua_first_site(),
            coexist::lua_runs_first,
        )
    } else {
        eprintln!("(this Slurm has no job_submit/lua: the lua coexistence test does not run)");
        suite
    };
    suite.run()
}

/// Submits a held job that must be rejected; returns what sbatch printed.
fn rejected(c: &Cluster, args: &[&str]) -> Result<String, String> {
    let mut full = vec!["-H", "--wrap=true"];
    full.extend_from_slice(args);
    match c.sbatch(&full) {
        Ok(id) => {
            let _ = c.run("scancel", &[&id.to_string()]);
            Err(format!(
                "`sbatch {}` was accepted as job {id}",
                args.join(" ")
            ))
        }
        Err(stderr) => Ok(stderr),
    }
}

/// Submits a held job that must be accepted; returns its id.
fn accepted(c: &Cluster, args: &[&str]) -> Result<u32, String> {
    let mut full = vec!["-H", "--wrap=true"];
    full.extend_from_slice(args);
    c.sbatch_ok(&full)
}

fn contains_all(text: &str, wanted: &[&str]) -> TestResult {
    for w in wanted {
        ensure(text.contains(w), format!("expected {w:?} in:\n{text}"))?;
    }
    Ok(())
}

fn untyped_rejected(c: &mut Cluster) -> TestResult {
    let err = rejected(c, &["--qos=qos_lafferty", "--gres=gpu:2"])?;
    contains_all(
        &err,
        &[
            "qos_lafferty",
            "a40",
            "--gres=gpu:a40:2",
            "Invalid generic resource (gres) specification",
            // Its code, which users quote (docs/codes.md).
            "[GQ101]",
        ],
    )
}

fn typed_accepted(c: &mut Cluster) -> TestResult {
    let id = accepted(c, &["--qos=qos_lafferty", "--gres=gpu:a40:2"])?;
    let job = c.job(id)?;
    ensure(
        job.get("QOS") == Some("qos_lafferty"),
        format!("QOS {:?}", job.get("QOS")),
    )?;
    ensure(
        job.tres_request("TresPerNode").as_deref() == Some("gres:gpu:a40:2"),
        format!("TresPerNode {:?}", job.get("TresPerNode")),
    )?;
    ensure(
        job.get("Requeue") == Some("0") || job.get("Requeue") == Some("1"),
        "job record readable",
    )?;
    c.run_ok("scancel", &[&id.to_string()]).map(drop)
}

fn wrong_type(c: &mut Cluster) -> TestResult {
    let err = rejected(c, &["--qos=qos_lafferty", "--gres=gpu:h100:1"])?;
    contains_all(&err, &["qos_lafferty", "h100", "a40"])
}

fn every_way(c: &mut Cluster) -> TestResult {
    let lafferty = "--qos=qos_lafferty";
    // (arguments, what the fix must say)
    let untyped: &[(&[&str], &str)] = &[
        (&["--gpus=2"], "--gpus=a40:2"),
        (&["--gpus-per-node=2"], "--gpus-per-node=a40:2"),
        (&["-n2", "--gpus-per-task=1"], "--gpus-per-task=a40:1"),
        (
            &["--sockets-per-node=1", "--gpus-per-socket=1"],
            "--gpus-per-socket=a40:1",
        ),
        (&["--gres=gpu"], "--gres=gpu:a40:1"),
        (&["--gres=gpu:1", "--gpus=2"], "a40:"),
        (&["--qos=lowprio,qos_lafferty", "--gres=gpu:1"], "a40"),
    ];
    for (args, fix) in untyped {
        let mut a = vec![lafferty];
        a.extend_from_slice(args);
        let err = rejected(c, &a)?;
        ensure(
            err.contains(fix),
            format!("`{}` was rejected without {fix:?}:\n{err}", a.join(" ")),
        )?;
    }
    // --gres and --gpus-per-node reach the plugin alike: it reads which one
    // the user typed from the submission line and the script's #SBATCH
    // lines, and answers in it; where neither tells, in both.
    let err = rejected(c, &[lafferty, "--gpus-per-node=2"])?;
    contains_all(
        &err,
        &[
            "but --gpus-per-node=2 does not name one",
            "Submit with --gpus-per-node=a40:2 instead",
        ],
    )?;
    ensure(!err.contains("--gres"), format!("--gres in:\n{err}"))?;
    let script = c.dir.join("gpus-per-node.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\n#SBATCH --gpus-per-node=2\n#SBATCH --qos=qos_lafferty\ntrue\n",
    )
    .map_err(|e| e.to_string())?;
    let script = script.to_string_lossy();
    let err = match c.sbatch(&["-H", &script]) {
        Ok(id) => return Err(format!("{script} was accepted as job {id}")),
        Err(stderr) => stderr,
    };
    contains_all(&err, &["--gpus-per-node=2", "--gpus-per-node=a40:2"])?;
    ensure(!err.contains("--gres"), format!("--gres in:\n{err}"))?;
    // From sbatch's input environment: neither the line nor the script
    // says which (both options on one line are refused by sbatch itself
    // from 26.05).
    let out = c
        .command("sbatch")
        .env("SBATCH_GPUS_PER_NODE", "1")
        .args(["-H", "--wrap=true", lafferty])
        .output()
        .map_err(|e| format!("sbatch: {e}"))?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure(!out.status.success(), format!("accepted: {err}"))?;
    contains_all(
        &err,
        &[
            "--gres=gpu:1 (or --gpus-per-node=1) does not name one",
            "--gres=gpu:a40:1 (or --gpus-per-node=a40:1)",
        ],
    )?;
    let typed: &[&[&str]] = &[
        &["--gpus=a40:2"],
        &["--gpus-per-node=a40:1"],
        &["-n2", "--gpus-per-task=a40:1"],
        &["--gres=gpu:a40"],
        &["--gres=gpu:a40:1,mps:0"],
    ];
    for args in typed {
        let mut a = vec![lafferty];
        a.extend_from_slice(args);
        let id = accepted(c, &a)?;
        c.run_ok("scancel", &[&id.to_string()])?;
    }
    Ok(())
}

fn never_fits(c: &mut Cluster) -> TestResult {
    let err = rejected(c, &["--qos=qos_lafferty", "--gpus=a40:5"])?;
    contains_all(&err, &["qos_lafferty", "5", "4"])?;
    let err = rejected(c, &["--qos=qos_lafferty", "-n5", "--gpus-per-task=a40:1"])?;
    contains_all(&err, &["qos_lafferty", "4"])?;
    // The bigger group's limit admits it (and Slurm may then hold it pending).
    let id = accepted(c, &["--qos=qos_yildirim", "--gpus=a40:5"])?;
    c.run_ok("scancel", &[&id.to_string()]).map(drop)
}

fn no_gpu_request(c: &mut Cluster) -> TestResult {
    let err = rejected(c, &["--qos=qos_lafferty"])?;
    contains_all(&err, &["qos_lafferty", "--gres=gpu:a40:1"])
}

fn other_qos_untouched(c: &mut Cluster) -> TestResult {
    for args in [
        &["--qos=lowprio", "--gres=gpu:2"][..],
        &["--gres=gpu:1"],
        &["--qos=normal"],
    ] {
        let id = accepted(c, args)?;
        c.run_ok("scancel", &[&id.to_string()])?;
    }
    Ok(())
}

fn modify(c: &mut Cluster) -> TestResult {
    let id = accepted(c, &["--qos=lowprio", "--gres=gpu:a40:1"])?;
    let job = format!("job={id}");
    let out = c.run("scontrol", &["update", &job, "QOS=qos_lafferty"])?;
    ensure(
        !out.status.success(),
        "switching to a group QOS without a typed request was accepted",
    )?;
    // 22.05 gives job_modify no message slot: the fix is in slurmctld's log.
    let fix = format!("scontrol update job={id} QOS=qos_lafferty Gres=gpu:a40:1");
    wait_for("the fix in slurmctld.log", SHORT, || {
        c.log("slurmctld").contains(&fix).then_some(())
    })?;
    c.run_ok(
        "scontrol",
        &["update", &job, "QOS=qos_lafferty", "Gres=gpu:a40:1"],
    )?;
    ensure(
        c.job(id)?.get("QOS") == Some("qos_lafferty"),
        "typed update did not apply",
    )?;
    let out = c.run("scontrol", &["update", &job, "Gres=gpu:2"])?;
    ensure(!out.status.success(), "an untyped GPU update was accepted")?;
    c.run_ok("scontrol", &["update", &job, "Name=renamed"])?;
    c.run_ok("scancel", &[&id.to_string()]).map(drop)
}

fn lowprio_flags(c: &mut Cluster) -> TestResult {
    let id = accepted(c, &["--qos=lowprio", "--gres=gpu:a40:1"])?;
    ensure(
        c.job(id)?.get("Requeue") == Some("1"),
        format!(
            "lowprio job not requeueable: {:?}",
            c.job(id)?.get("Requeue")
        ),
    )?;
    c.run_ok("scancel", &[&id.to_string()])?;
    let id = accepted(c, &["--qos=lowprio", "--array=1-20", "--gres=gpu:a40:1"])?;
    let task = c.job(id)?;
    let ids = task.get("ArrayTaskId").unwrap_or_default().to_owned();
    ensure(
        ids.ends_with("%8"),
        format!("array not throttled to 8: ArrayTaskId={ids}"),
    )?;
    c.run_ok("scancel", &[&id.to_string()])?;
    let id = accepted(c, &["--qos=lowprio", "--array=1-20%2", "--gres=gpu:a40:1"])?;
    let ids = c.job(id)?.get("ArrayTaskId").unwrap_or_default().to_owned();
    ensure(
        ids.ends_with("%2"),
        format!("a tighter user throttle was changed: ArrayTaskId={ids}"),
    )?;
    c.run_ok("scancel", &[&id.to_string()]).map(drop)
}

fn lowprio_no_requeue(c: &mut Cluster) -> TestResult {
    let out = c.run(
        "sbatch",
        &[
            "-H",
            "--wrap=true",
            "--qos=lowprio",
            "--no-requeue",
            "--gres=gpu:a40:1",
        ],
    )?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure(
        out.status.success(),
        format!("--no-requeue under lowprio was rejected: {stderr}"),
    )?;
    contains_all(&stderr, &["lowprio", "cancel"])?;
    let id: u32 = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .last()
        .and_then(|w| w.parse().ok())
        .ok_or("no job id")?;
    ensure(
        c.job(id)?.get("Requeue") == Some("0"),
        "the user's --no-requeue was overridden",
    )?;
    c.run_ok("scancel", &[&id.to_string()]).map(drop)
}

/// `--exclusive=user` under lowprio would keep other users off the node's
/// idle GPUs: the job is accepted without it and the user told; a group
/// job keeps it. Seen by what it does (another user's job starts beside
/// the lowprio job, not beside the group job): `scontrol show job`'s
/// OverSubscribe shows USER on 22.05 but NO on 26.05.5 for both.
fn lowprio_exclusive_user(c: &mut Cluster) -> TestResult {
    let other = TestUser::create(c, "gpushare_carol")?;
    let other_job = || -> Result<u32, String> {
        let out = other.run_ok(
            c,
            None,
            "sbatch",
            &["--parsable", "--output=/dev/null", "--wrap=sleep 300"],
        )?;
        out.trim()
            .parse()
            .map_err(|_| format!("sbatch printed no job id: {out}"))
    };
    let exclusive = |qos: &str, gres: &str| -> Result<(u32, String), String> {
        let out = c.run(
            "sbatch",
            &[
                "--parsable",
                "--output=/dev/null",
                "--wrap=sleep 300",
                qos,
                gres,
                "--exclusive=user",
            ],
        )?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let id = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|_| format!("{qos} --exclusive=user was rejected: {stderr}"))?;
        Ok((id, stderr))
    };

    // A group job keeps the node to root's jobs: the other user's job waits.
    let (group, stderr) = exclusive("--qos=qos_lafferty", "--gres=gpu:a40:1")?;
    ensure(stderr.is_empty(), format!("a group job was told: {stderr}"))?;
    c.wait_job_state(group, &["RUNNING"], JOB_START)?;
    let blocked = other_job()?;
    // Still pending once a scheduling pass after its submission looked at it.
    let state = c.wait_considered(blocked, JOB_START)?.state().to_owned();
    ensure(
        state == "PENDING",
        format!("beside a group job with --exclusive=user another user's job is {state}"),
    )?;
    c.run_ok("scancel", &[&group.to_string(), &blocked.to_string()])?;

    // Under lowprio the option is dropped, with a warning.
    let (low, stderr) = exclusive("--qos=lowprio", "--gres=gpu:a40:1")?;
    contains_all(&stderr, &["lowprio", "may not use --exclusive=user"])?;
    c.wait_job_state(low, &["RUNNING"], JOB_START)?;
    let beside = other_job()?;
    c.wait_job_state(beside, &["RUNNING"], JOB_START)?;
    c.cancel_all()
}

/// A preempted and requeued lowprio job appends to its output, so the first
/// run's log survives the second (the user did not ask for any of it).
fn lowprio_output_kept(c: &mut Cluster) -> TestResult {
    let script = "--wrap=echo run ${SLURM_RESTART_COUNT:-0}; sleep 300";
    let low: Vec<u32> = (0..4)
        .map(|_| c.sbatch_ok(&["--qos=lowprio", "--gres=gpu:a40:1", script]))
        .collect::<Result<_, _>>()?;
    for &id in &low {
        c.wait_job_state(id, &["RUNNING"], JOB_START)?;
    }
    wait_for("first runs to write output", SHORT, || {
        low.iter()
            .all(|&id| c.job_output(id).contains("run 0"))
            .then_some(())
    })?;
    let high = c.sbatch_ok(&["--qos=qos_lafferty", "--gres=gpu:a40:1", "--wrap=sleep 300"])?;
    c.wait_job_state(high, &["RUNNING"], JOB_START)?;
    let victim = wait_for("a lowprio job to be requeued", SHORT, || {
        low.iter()
            .copied()
            .find(|&id| c.job(id).is_ok_and(|j| j.restarts() >= 1))
    })?;
    c.run_ok("scancel", &[&high.to_string()])?;
    wait_for("the requeued job's second run", JOB_LONG, || {
        c.job_output(victim).contains("run 1").then_some(())
    })?;
    let out = c.job_output(victim);
    ensure(
        out.contains("run 0") && out.contains("run 1"),
        format!("output of requeued job {victim}:\n{out}"),
    )?;
    c.cancel_all()
}

fn shared_reservations(c: &mut Cluster) -> TestResult {
    let err = rejected(c, &["--gres=mps:50"])?;
    contains_all(
        &err,
        &["jhl_homework_gpu*", "jupyterhub_course_*", "--reservation="],
    )?;
    c.create_reservation("jhl_homework_gpu1", 60)?;
    let id = accepted(c, &["--reservation=jhl_homework_gpu1", "--gres=mps:50"])?;
    ensure(
        c.job(id)?.get("Reservation") == Some("jhl_homework_gpu1"),
        "reservation not kept",
    )?;
    c.run_ok("scancel", &[&id.to_string()])?;
    let err = rejected(c, &["--reservation=jhl_homework_gpu1", "--gres=mps:150"])?;
    contains_all(&err, &["150", "100"])?;
    c.run_ok("scontrol", &["delete", "ReservationName=jhl_homework_gpu1"])
        .map(drop)
}

fn hostile_requests(c: &mut Cluster) -> TestResult {
    let long_type = format!("--gres=gpu:{}:1", "x".repeat(5000));
    let cases: Vec<Vec<String>> = vec![
        vec![
            "--qos=qos_lafferty".into(),
            "--gres=gpu:a40:99999999999999999999".into(),
        ],
        vec!["--qos=qos_lafferty".into(), "--gres=gpu:%s%n%s:1".into()],
        vec!["--qos=qos_lafferty".into(), long_type],
        vec!["--qos=%s%n%x".into(), "--gres=gpu:1".into()],
        vec![
            "--qos=qos_lafferty".into(),
            "--gpus-per-task=a40:1".into(),
            "-n".into(),
            "4294967294".into(),
        ],
        vec!["--qos=qos_lafferty".into(), "--gres=gpu:a40:1K".into()],
    ];
    for args in &cases {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        if let Ok(id) = c.sbatch(&[&["-H", "--wrap=true"][..], &a].concat()) {
            let _ = c.run("scancel", &[&id.to_string()]);
        }
        let ping = c.run_ok("scontrol", &["ping"])?;
        ensure(
            ping.contains("is UP"),
            format!("slurmctld down after {a:?}: {ping}"),
        )?;
    }
    ensure(
        !c.log("slurmctld").contains("internal error"),
        "the plugin panicked (see slurmctld.log)",
    )
}

fn conf_path(c: &Cluster) -> std::path::PathBuf {
    c.slurm_conf().with_file_name("gpu_qos.conf")
}

/// Replaces gpu_qos.conf the way config tools do (write + rename).
fn install_conf(c: &Cluster, text: &str) -> TestResult {
    testcluster::replace_conf(&conf_path(c), text)
}

fn reload(c: &mut Cluster) -> TestResult {
    let widened = EXAMPLE_GPU_QOS_CONF.replace(
        "QOS=qos_ying_rex,qos_lafferty GPUTypes=a40",
        "QOS=qos_ying_rex,qos_lafferty GPUTypes=a40,h100",
    );
    ensure(
        widened != EXAMPLE_GPU_QOS_CONF,
        "example config changed shape",
    )?;
    install_conf(c, &widened)?;
    let id = wait_for("the widened policy to apply", SHORT, || {
        accepted(c, &["--qos=qos_lafferty", "--gres=gpu:h100:1"]).ok()
    })?;
    c.run_ok("scancel", &[&id.to_string()])?;

    let broken = format!("{widened}GPULimit=four\n");
    let line = broken.lines().count();
    install_conf(c, &broken)?;
    let wanted = format!("{}:{line}:", conf_path(c).display());
    wait_for("the bad edit to be logged", SHORT, || {
        c.log("slurmctld").contains(&wanted).then_some(())
    })?;
    let id = accepted(c, &["--qos=qos_lafferty", "--gres=gpu:h100:1"])?;
    c.run_ok("scancel", &[&id.to_string()])?;

    install_conf(c, EXAMPLE_GPU_QOS_CONF)?;
    wait_for("the original policy to apply again", SHORT, || {
        rejected(c, &["--qos=qos_lafferty", "--gres=gpu:h100:1"]).ok()
    })
    .map(drop)
}

/// Installs `text` as gpu_qos.conf and waits until slurmctld logs that it
/// put it in force (one more `reloaded` line than before).
fn install_and_wait(c: &Cluster, text: &str) -> TestResult {
    let reloads = |c: &Cluster| {
        c.log("slurmctld")
            .matches("job_submit/gpu_qos: reloaded")
            .count()
    };
    let before = reloads(c);
    install_conf(c, text)?;
    wait_for("the edit to be put in force", SHORT, || {
        (reloads(c) > before).then_some(())
    })
    .map(drop)
}

/// `DefaultGPUType=a40` on qos_lafferty's rule: a user's untyped requests
/// (`--gres`, `--gpus`, the GPUs Slurm adds for `--ntasks-per-gpu`) are
/// accepted, told the line they became (`[GQ204]`), and slurmctld holds
/// every GPU of them typed; one over the rule's limit once typed is
/// refused saying so; an untyped `scontrol update` is still refused.
fn default_type_given(c: &mut Cluster) -> TestResult {
    let rule = "QOS=qos_ying_rex,qos_lafferty GPUTypes=a40 GPULimit=4";
    let given = EXAMPLE_GPU_QOS_CONF.replace(rule, &format!("{rule} DefaultGPUType=a40"));
    ensure(
        given != EXAMPLE_GPU_QOS_CONF,
        "example config changed shape",
    )?;
    install_and_wait(c, &given)?;
    let result = judge_default_type(c);
    install_conf(c, EXAMPLE_GPU_QOS_CONF)?;
    result
}

fn judge_default_type(c: &Cluster) -> TestResult {
    let lafferty = "--qos=qos_lafferty";
    // (arguments, the line it becomes, the field Slurm holds it in)
    let cases: &[(&[&str], &str, &str, &str)] = &[
        (
            &["--gres=gpu:2"],
            "--gres=gpu:a40:2",
            "TresPerNode",
            "gres:gpu:a40:2",
        ),
        (
            &["--gpus=2"],
            "--gpus=a40:2",
            "TresPerJob",
            "gres:gpu:a40:2",
        ),
        (
            &["-n", "2", "--ntasks-per-gpu=1"],
            "--gpus=a40:2 --ntasks-per-gpu=1",
            "TresPerJob",
            "gres:gpu:a40:2",
        ),
    ];
    for (args, line, key, held) in cases {
        let mut full = vec!["--parsable", "-H", "--wrap=true", lafferty];
        full.extend_from_slice(args);
        let out = c.run("sbatch", &full)?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        ensure(
            out.status.success(),
            format!("`sbatch {}` was refused: {stderr}", args.join(" ")),
        )?;
        contains_all(&stderr, &["given type a40", line, "[GQ204]"])?;
        let id: u32 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|e| format!("sbatch's answer: {e}"))?;
        let job = c.job(id)?;
        let tres = job.tres().to_owned();
        ensure(
            job.tres_request(key).as_deref() == Some(*held)
                && tres.contains("gres/gpu:a40=2")
                && tres.contains("gres/gpu=2"),
            format!(
                "`sbatch {}`: Slurm holds {key}={:?}, {tres}",
                args.join(" "),
                job.get(key)
            ),
        )?;
        c.run_ok("scancel", &[&id.to_string()])?;
    }
    let err = rejected(c, &[lafferty, "--gres=gpu:8"])?;
    contains_all(&err, &["given type a40", "[GQ103]"])?;
    // An update carries only what changes: still refused with the line.
    let id = accepted(c, &[lafferty, "--gres=gpu:a40:1"])?;
    let out = c.run(
        "scontrol",
        &["update", &format!("job={id}"), "TresPerNode=gres/gpu:1"],
    )?;
    ensure(
        !out.status.success(),
        format!("an untyped update of job {id} was made"),
    )?;
    c.run_ok("scancel", &[&id.to_string()]).map(drop)
}

/// `Enforce=warn` on qos_lafferty's rule only: a user's untyped request
/// there is accepted as submitted, sbatch's stderr carries the refusal it
/// would be, marked, with the line to type; slurmctld logs it and the
/// metrics file counts it by reason and QOS; an untyped `scontrol update`
/// of it is made and told the same way. qos_dijk's rule still refuses,
/// and `gpu-qos check` says which rule only warns.
fn warn_only(c: &mut Cluster) -> TestResult {
    let wendy = TestUser::create(c, "gpushare_wendy")?;
    wendy.allow_qos_by_default(c, &["normal", "qos_lafferty", "qos_dijk"], "normal")?;
    let dir = c.dir.join("metrics-warn");
    fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let metrics = dir.join("gpushare_job_submit.prom");
    let rule = "QOS=qos_ying_rex,qos_lafferty GPUTypes=a40 GPULimit=4";
    let warned = EXAMPLE_GPU_QOS_CONF.replace(rule, &format!("{rule} Enforce=warn"));
    ensure(
        warned != EXAMPLE_GPU_QOS_CONF,
        "example config changed shape",
    )?;
    install_and_wait(c, &format!("{warned}MetricsFile={}\n", metrics.display()))?;
    let result = judge_warn_only(c, &wendy, &metrics);
    install_conf(c, EXAMPLE_GPU_QOS_CONF)?;
    result
}

fn judge_warn_only(c: &Cluster, wendy: &TestUser, metrics: &std::path::Path) -> TestResult {
    let args = [
        "--parsable",
        "-H",
        "--wrap=true",
        "--qos=qos_lafferty",
        "--gres=gpu:2",
    ];
    let (id, stderr) = user_accepted(c, wendy, "sbatch", &args, "the warned job")?;
    contains_all(
        &stderr,
        &[
            // As sbatch prints a job_submit message on an accepted job.
            "sbatch: NOT YET ENFORCED: QOS qos_lafferty requires a GPU type, but --gres=gpu:2 \
             does not name one",
            "Submit with --gres=gpu:a40:2 instead.",
            "The job was accepted as submitted",
        ],
    )?;
    let job_id: u32 = id.parse().map_err(|e| format!("job id {id:?}: {e}"))?;
    let request = c.job(job_id)?.tres_request("TresPerNode");
    ensure(
        request.as_deref() == Some("gres:gpu:2"),
        format!("the warned job was changed: TresPerNode {request:?}"),
    )?;
    // An update follows the same rule: still untyped, made, and told
    // (from 23.02; 22.05 gives job_modify no message for the client).
    let update = c.run(
        "scontrol",
        &[
            "update",
            &format!("job={id}"),
            "QOS=qos_lafferty",
            "Gres=gpu:3",
        ],
    )?;
    let told = String::from_utf8_lossy(&update.stderr).into_owned();
    ensure(
        update.status.success(),
        format!("the warned update was refused: {told}"),
    )?;
    let request = c.job(job_id)?.tres_request("TresPerNode");
    ensure(
        request.as_deref() == Some("gres:gpu:3"),
        format!("the update was not made as asked: TresPerNode {request:?}"),
    )?;
    if slurm_release() >= (23, 2) {
        contains_all(
            &told,
            &[
                "NOT YET ENFORCED: QOS qos_lafferty requires a GPU type",
                "QOS=qos_lafferty Gres=gpu:a40:3",
            ],
        )?;
    }
    c.run_ok("scancel", &[&id])?;
    wait_for("slurmctld to log the update's warning", SHORT, || {
        c.log("slurmctld")
            .lines()
            .any(|l| l.contains("update from uid 0 accepted (Enforce=warn, QOS qos_lafferty)"))
            .then_some(())
    })?;
    wait_for("slurmctld to log the warning", SHORT, || {
        c.log("slurmctld")
            .lines()
            .any(|l| {
                l.contains("accepted (Enforce=warn, QOS qos_lafferty)")
                    && l.contains("NOT YET ENFORCED: QOS qos_lafferty requires a GPU type")
            })
            .then_some(())
    })?;
    let counted = [
        "gpushare_policy_warnings_total{reason=\"untyped_gpu\",qos=\"qos_lafferty\"} 1",
        "gpushare_policy_warnings_total{reason=\"update_needs_typed_gpu\",qos=\"qos_lafferty\"} 1",
    ];
    wait_for("the metrics file to count the warning", SHORT, || {
        fs::read_to_string(metrics)
            .ok()
            .filter(|text| counted.iter().all(|c| text.lines().any(|l| l == *c)))
    })?;
    // The rule that enforces still refuses, with no warning mark.
    let refused = user_rejected(
        c,
        wendy,
        &["--qos=qos_dijk", "--gres=gpu:1"],
        "--gres=gpu:h100:1",
    )?;
    ensure(
        !refused.contains("NOT YET ENFORCED"),
        format!("an enforced refusal is marked as a warning: {refused}"),
    )?;
    let bin = testcluster::cluster::build_dir()?.join("gpu-qos");
    let conf = conf_path(c);
    let out = c.run(
        &bin.to_string_lossy(),
        &["check", "--conf", &conf.to_string_lossy()],
    )?;
    contains_all(
        &String::from_utf8_lossy(&out.stdout),
        &["QOS qos_ying_rex,qos_lafferty", "says Enforce=warn"],
    )
}

/// The example site with slurmctld and slurmdbd running as a system
/// account of their own (`SlurmUser=gpushare_slurm`), as sites run them.
fn non_root_slurm_user_site() -> ClusterSpec {
    ClusterSpec {
        slurm_user: Some("gpushare_slurm".into()),
        ..ClusterSpec::example_site()
    }
}

/// slurmctld runs as a non-root `SlurmUser`; `MetricsFile=` lies in a
/// directory it cannot write (root's, mode 0755): the error is logged once,
/// however many times the writer tries again, while the edits of the
/// policy are still put in force; once the directory is the SlurmUser's,
/// the next edit makes the writer try at once, the file is written by
/// that user (mode 0644 whatever slurmctld's umask) and the log says so.
fn metrics_file_trouble(c: &mut Cluster) -> TestResult {
    let (uid, gid) = c
        .slurm_user_ids()?
        .ok_or("this test's site runs slurmctld as a SlurmUser of its own")?;
    let pid = fs::read_to_string(c.dir.join("slurmctld.pid")).map_err(|e| e.to_string())?;
    ensure(
        pid.trim().parse().ok().and_then(process_uid) == Some(uid),
        format!("slurmctld (pid {}) does not run as uid {uid}", pid.trim()),
    )?;
    let dir = c.dir.join("metrics-later");
    fs::create_dir(&dir).map_err(|e| e.to_string())?;
    let file = dir.join("gpushare_job_submit.prom");
    let with_file = format!("{EXAMPLE_GPU_QOS_CONF}MetricsFile={}\n", file.display());
    let errors = |c: &Cluster| {
        c.log("slurmctld")
            .lines()
            .filter(|l| l.contains("MetricsFile:") && l.contains("metrics-later"))
            .count()
    };
    install_and_wait(c, &with_file)?;
    // A decision to publish.
    rejected(c, &["--qos=qos_lafferty", "--gres=gpu:1"])?;
    wait_for("the write error to be logged", SHORT, || {
        (errors(c) > 0).then_some(())
    })?;
    // Three more edits, each tried again at once: nothing new to log.
    for n in 0..3 {
        install_and_wait(c, &format!("{with_file}# edit {n}\n"))?;
    }
    let logged = errors(c);
    let result = ensure(
        logged == 1,
        format!("the same MetricsFile error was logged {logged} times"),
    )
    .and_then(|()| {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).map_err(|e| e.to_string())?;
        install_and_wait(c, &format!("{with_file}# fixed\n"))?;
        wait_for("the metrics file", SHORT, || fs::metadata(&file).ok())?;
        last_good::owned_by(&file, 0o644, uid)?;
        wait_for("word that it is written again", SHORT, || {
            c.log("slurmctld").contains("written again").then_some(())
        })?;
        last_good::kept_by(c, uid, &format!("{with_file}# fixed\n"))
    });
    install_conf(c, EXAMPLE_GPU_QOS_CONF)?;
    result
}

/// Runs `program args` as `user` until it succeeds (until slurmctld has
/// learnt a new association or admin level from slurmdbd, Slurm itself
/// refuses): its stdout, trimmed, and stderr.
fn user_accepted(
    c: &Cluster,
    user: &TestUser,
    program: &str,
    args: &[&str],
    what: &str,
) -> Result<(String, String), String> {
    let mut last = String::new();
    wait_for(
        &format!("{what} to be accepted"),
        JOB_START,
        || match user.run(c, None, program, args) {
            Ok(out) if out.status.success() => Some((
                String::from_utf8_lossy(&out.stdout).trim().to_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )),
            Ok(out) => {
                last = String::from_utf8_lossy(&out.stderr).into_owned();
                None
            }
            Err(e) => {
                last = e;
                None
            }
        },
    )
    .map_err(|e| format!("{e}; last answer: {last}"))
}

/// `gpu-qos check --json` against the cluster's accounting database: what it
/// prints is JSON to `python3 -m json.tool` and to the schema, with the exit
/// status inside equal to the command's.
fn check_json(c: &mut Cluster) -> TestResult {
    let bin = testcluster::cluster::build_dir()?.join("gpu-qos");
    let conf = conf_path(c);
    let script = format!(
        "{} check --json --conf {}; echo \"exit=$?\" >&2",
        bin.display(),
        conf.display()
    );
    let out = c.run("sh", &["-c", &script])?;
    let json = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let tool = c.run(
        "sh",
        &[
            "-c",
            &format!(
                "printf '%s' '{}' | python3 -m json.tool",
                json.trim().replace('\'', "'\\''")
            ),
        ],
    )?;
    ensure(
        tool.status.success(),
        format!(
            "python3 -m json.tool refused {json:?}: {}",
            String::from_utf8_lossy(&tool.stderr)
        ),
    )?;
    let parsed: gpushare::qos::check::CheckJson =
        serde_json::from_str(&json).map_err(|e| format!("{e}: {json}"))?;
    ensure(
        stderr.contains(&format!("exit={}", parsed.exit)) && parsed.exit < 2,
        format!("exit status and JSON disagree or the check failed: {stderr} / {json}"),
    )?;
    ensure(
        parsed.conf.as_deref() == Some(&*conf.to_string_lossy()),
        format!("JSON names another file: {json}"),
    )?;
    // A file that does not parse: exit 2, still JSON.
    let out = c.run(
        &bin.to_string_lossy(),
        &["check", "--json", "--conf", "/nonexistent/gpu_qos.conf"],
    )?;
    let unchecked: gpushare::qos::check::CheckJson =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("{e}: {:?}", out.stdout))?;
    ensure(
        out.status.code() == Some(2) && unchecked.exit == 2 && unchecked.error.is_some(),
        format!("unchecked: {unchecked:?}"),
    )
}

/// Submits `args` (held) as `user` until the refusal says `wanted`: while
/// slurmctld has not yet learnt a new association from slurmdbd, the job
/// may be accepted, or refused for another reason. The refusal's text.
fn user_rejected(
    c: &Cluster,
    user: &TestUser,
    args: &[&str],
    wanted: &str,
) -> Result<String, String> {
    let mut all = vec!["--parsable", "-H", "--wrap=true"];
    all.extend_from_slice(args);
    let mut last = String::new();
    wait_for(
        &format!(
            "sbatch {} as {} to be refused with {wanted:?}",
            args.join(" "),
            user.name
        ),
        JOB_START,
        || match user.run(c, None, "sbatch", &all) {
            Ok(out) if out.status.success() => {
                let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                let _ = c.run("scancel", &[&id]);
                last = format!("accepted as job {id}");
                None
            }
            Ok(out) => {
                last = String::from_utf8_lossy(&out.stderr).into_owned();
                last.contains(wanted).then(|| last.clone())
            }
            Err(e) => {
                last = e;
                None
            }
        },
    )
    .map_err(|e| format!("{e}; last answer: {last}"))
}

/// A node whose GPUs are MIG slices of two profiles (fake devices named as
/// gres.conf names them), and a QOS limiting each profile on its own.
fn mig_site() -> ClusterSpec {
    ClusterSpec {
        gpus: vec![
            GpuSpec {
                gpu_type: "a100_3g.20gb".into(),
                count: 2,
            },
            GpuSpec {
                gpu_type: "a100_1g.5gb".into(),
                count: 3,
            },
        ],
        qos: vec![Qos {
            grp_tres: Some("gres/gpu:a100_3g.20gb=1,gres/gpu:a100_1g.5gb=2".into()),
            ..Qos::new("qos_mig")
        }],
        job_submit_plugins: vec!["gpu_qos".into()],
        extra_conf_files: vec![(
            "gpu_qos.conf".into(),
            "QOS=qos_mig GPUTypes=a100_* GPULimit=a100_1g.5gb:2,a100_3g.20gb:1\n".into(),
        )],
        ..ClusterSpec::default()
    }
}

/// MIG slice types by pattern: the untyped request is told a real slice
/// type, each profile has its own never-fits limit, another type is not
/// covered, and a typed job is counted against its profile's limit.
fn mig_slices(c: &mut Cluster) -> TestResult {
    let err = rejected(c, &["--qos=qos_mig", "--gres=gpu:1"])?;
    contains_all(
        &err,
        &[
            "QOS qos_mig requires a GPU type",
            "qos_mig may use a100_*",
            "--gres=gpu:a100_1g.5gb:1",
        ],
    )?;
    let err = rejected(c, &["--qos=qos_mig", "--gres=gpu:a100_3g.20gb:2"])?;
    contains_all(&err, &["asks 2 a100_3g.20gb, qos_mig allows at most 1"])?;
    let err = rejected(c, &["--qos=qos_mig", "--gres=gpu:a40:1"])?;
    contains_all(&err, &["does not cover GPU type a40"])?;
    let id = c.sbatch_ok(&[
        "--qos=qos_mig",
        "--gres=gpu:a100_1g.5gb:2",
        "--wrap=sleep 120",
    ])?;
    c.wait_job_state(id, &["RUNNING"], JOB_START)?;
    let counted = counted_in_assoc_mgr(
        c,
        "qos_mig",
        &["gres/gpu:a100_1g.5gb=2(2)", "gres/gpu:a100_3g.20gb=1(0)"],
    );
    c.run_ok("scancel", &[&id.to_string()])?;
    counted
}

/// Slurm's own books as the witness: `scontrol show assoc_mgr` shows each
/// of `usage` (`gres/gpu:TYPE=LIMIT(USED)`) in `qos`'s GrpTRES.
fn counted_in_assoc_mgr(c: &Cluster, qos: &str, usage: &[&str]) -> TestResult {
    let mut last = String::new();
    let args = ["show", "assoc_mgr", "flags=qos", &format!("qos={qos}")];
    wait_for(
        &format!("{} counted in assoc_mgr", usage.join(", ")),
        SHORT,
        || {
            last = c.run_ok("scontrol", &args).unwrap_or_else(|e| e);
            usage.iter().all(|u| last.contains(u)).then_some(())
        },
    )
    .map_err(|e| format!("{e}:\n{last}"))
}
