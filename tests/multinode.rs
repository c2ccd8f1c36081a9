//! gpushare across nodes: the example site on three nodes, each a host of
//! its own (own hostname, address, `/run`, GPU device files, slurmd and
//! slurmstepds; see `testcluster::hosts`). What one node cannot show: the
//! group limit counted over nodes, what Slurm sends for multi-node requests,
//! each node's ledger holding its own shares, and node failures.
//!
//! The fault tests print the state they rely on (which node held which
//! share before the fault) into their failure message, and check it before
//! the fault: each can fail for the reason its name gives.

use std::collections::BTreeMap;
use std::fs;
use std::process::ExitCode;

use testcluster::cluster::{slurm_places_shares, wait_for};
use testcluster::monitor::{mapping_follows_ledger, node_ledger};
use testcluster::time::{JOB_END, JOB_LONG, JOB_START, NODE_STATE, SHORT};
use testcluster::users::TestUser;
use testcluster::{ensure, Cluster, ClusterSpec, Suite, TestResult};

#[path = "multinode/shared_conf.rs"]
mod shared_conf;

#[path = "multinode/prolog_missed.rs"]
mod prolog_missed;

#[path = "multinode/mixed_hosts.rs"]
mod mixed_hosts;

#[path = "multinode/private_requeue.rs"]
mod private_requeue;

#[path = "multinode/faults.rs"]
mod faults;
use faults::*;

#[path = "multinode/why.rs"]
mod why;
use why::*;

#[path = "multinode/sent_elsewhere.rs"]
mod sent_elsewhere;
use sent_elsewhere::*;

fn main() -> ExitCode {
    Suite::new(ClusterSpec::example_site_nodes())
        // Each test starts with no job, no share in any ledger, every
        // node's DCGM mapping following its ledger.
        .reset(|c| clean(c))
        .test("each_node_is_a_host_of_its_own", own_hosts)
        .smoke()
        .test("the_group_limit_holds_across_nodes", group_limit)
        .smoke()
        .test(
            "a_typed_request_over_the_limit_on_two_nodes_is_refused_at_submit",
            never_fits_on_two_nodes,
        )
        .test(
            "multi_node_request_shapes_are_judged_as_slurm_sends_them",
            request_shapes,
        )
        .test(
            "shares_on_two_nodes_each_node_keeps_its_own_ledger",
            shares_on_two_nodes,
        )
        .smoke()
        .test(
            "a_group_job_preempts_lowprio_on_one_a40_node_only",
            preemption,
        )
        .test(
            "why_names_the_nodes_a_resources_wait_needs_and_who_holds_them",
            |c| why_resources(c, false),
        )
        .test_on(
            "why_counts_the_gpus_of_jobs_private_data_hides",
            {
                let mut spec = ClusterSpec::example_site_nodes();
                spec.conf_overrides
                    .push(("PrivateData".into(), "jobs".into()));
                spec
            },
            |c| why_resources(c, true),
        )
        .test(
            "why_says_a_job_whose_gpus_are_free_waits_for_the_rest",
            why_free_gpus,
        )
        .test(
            "a_two_node_share_puts_each_task_on_one_gpu_of_its_node",
            two_node_share,
        )
        .test(
            "a_two_node_share_with_no_room_on_one_node_never_runs_there",
            no_room_on_one_node,
        )
        .test(
            "a_node_without_gpushare_refuses_shares_loudly",
            missing_node_config,
        )
        .test(
            "shares_on_two_nodes_survive_slurmctld_and_slurmd_restarts",
            daemon_restarts,
        )
        .test(
            "a_node_cut_off_its_network_comes_back_and_no_requeued_share_runs_unplaced",
            cable_cut,
        )
        .test(
            "after_a_long_outage_ghost_records_never_refuse_a_share_with_room",
            ghosts_after_outage,
        )
        .test(
            "a_rebooted_node_comes_back_empty_and_takes_shares",
            rebooted_node,
        )
        .test(
            "a_node_whose_gpus_serve_another_user_sends_share_jobs_elsewhere",
            sent_elsewhere,
        )
        .test(
            "an_array_task_sent_elsewhere_is_requeued_alone_not_its_array",
            array_task_sent_elsewhere,
        )
        .test(
            "the_lift_takes_back_only_what_gpushare_added",
            own_changes_survive_the_lift,
        )
        .test(
            "an_exclusion_lifts_when_its_cause_is_gone_not_on_a_clock_or_any_share_end",
            lifts_with_its_cause,
        )
        .test(
            "a_gpu_set_aside_that_slurm_chose_gets_no_job_back_until_it_is_back",
            slurms_choice_set_aside_is_not_sent_back,
        )
        .test(
            "share_jobs_beyond_the_room_beside_other_users_all_complete",
            contention_completes,
        )
        .test(
            "a_share_started_again_without_its_prolog_is_requeued_and_completes",
            prolog_missed::completes_after_a_start_without_prolog,
        )
        .test_on(
            "private_jobs_the_node_cannot_start_are_requeued_not_failed",
            private_requeue::site(),
            private_requeue::requeued_not_failed,
        )
        .test(
            "a_disabled_node_keeps_share_jobs_off_without_failing_them",
            disabled_keeps_off,
        )
        .test(
            "a_job_sent_off_that_ran_elsewhere_may_return_after_its_next_requeue",
            returns_after_running_elsewhere,
        )
        .test(
            "exclusions_outlive_a_reboot_and_lift_after_it",
            exclusions_outlive_a_reboot,
        )
        .test(
            "an_xid_logged_before_the_first_timer_run_after_a_reboot_is_read",
            xid_logged_while_booting,
        )
        .test_on(
            "one_shared_gpu_mps_conf_gives_each_node_its_own_settings",
            shared_conf::site(),
            shared_conf::one_file_for_every_node,
        )
        .test_on(
            "one_plugstack_conf_with_a_bare_name_loads_the_plugin_from_each_hosts_layout",
            ClusterSpec::example_site_nodes(),
            mixed_hosts::one_plugstack_two_layouts,
        )
        .run()
}

/// A share job that prints its GPU and waits.
const SHARE: &str = "--wrap=echo GPU=$GPUSHARE_GPU HOST=$(hostname); sleep 300";

/// [`SHARE`], which also prints which GPU devices of its node it can open
/// (see [`Cluster::write_device_probe`]), then `PROBED` once that line is
/// whole.
fn probed_share(c: &Cluster) -> Result<String, String> {
    let probe = c.write_device_probe()?;
    Ok(format!(
        "--wrap=echo GPU=$GPUSHARE_GPU HOST=$(hostname); {}; echo PROBED; sleep 300",
        probe.display()
    ))
}

/// Job id → GPU of every share in `node`'s ledger.
fn shares(c: &Cluster, node: &str) -> BTreeMap<u32, u32> {
    node_ledger(c, node)
        .shares()
        .map(|s| (s.job, s.gpu))
        .collect()
}

fn printed(c: &Cluster, id: u32, key: &str) -> Option<String> {
    c.job_output(id)
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('=').map(str::to_owned))
}

/// Submits `n` shares of `units` on `node` (extra sbatch words in
/// `extra`) and waits until each runs and printed its GPU.
fn start_shares(
    c: &Cluster,
    node: &str,
    n: usize,
    units: u32,
    extra: &[&str],
) -> Result<Vec<u32>, String> {
    let gres = format!("--gres=mps:{units}");
    let script = probed_share(c)?;
    let ids: Vec<u32> = (0..n)
        .map(|_| {
            let mut args = vec!["-w", node, gres.as_str()];
            args.extend_from_slice(extra);
            args.push(&script);
            c.sbatch_ok(&args)
        })
        .collect::<Result<_, _>>()?;
    for &id in &ids {
        c.wait_job_state(id, &["RUNNING"], JOB_START)
            .map_err(|e| format!("{e}\njob output: {}", c.job_output(id)))?;
    }
    // Its GPU, then the device probe's whole line (`PROBED` after it).
    wait_for("the shares' output", SHORT, || {
        ids.iter()
            .all(|&id| {
                printed(c, id, "GPU").is_some_and(|g| !g.is_empty())
                    && c.job_output(id).contains("PROBED")
            })
            .then_some(())
    })
    .map_err(|e| {
        let outs: Vec<String> = ids
            .iter()
            .map(|id| format!("{id}: {}", c.job_output(*id)))
            .collect();
        format!("{e}\n{}", outs.join("\n"))
    })?;
    Ok(ids)
}

/// [`start_shares`], then the state a fault test relies on: `node`'s
/// ledger holds exactly those jobs (job → GPU).
fn start_shares_held(
    c: &Cluster,
    node: &str,
    n: usize,
    extra: &[&str],
) -> Result<(Vec<u32>, BTreeMap<u32, u32>), String> {
    let ids = start_shares(c, node, n, 50, extra)?;
    let held = shares(c, node);
    ensure(
        held.keys().copied().collect::<Vec<_>>() == ids,
        format!("before the fault {node} holds {held:?}, not jobs {ids:?}"),
    )?;
    mapping_follows_ledger(c, node)?;
    Ok((ids, held))
}

fn all_ledgers_empty(c: &Cluster) -> Option<()> {
    c.node_names()
        .iter()
        .all(|n| node_ledger(c, n).shares().count() == 0)
        .then_some(())
}

fn clean(c: &Cluster) -> TestResult {
    c.cancel_all()?;
    wait_for("every node's ledger to be empty", SHORT, || {
        all_ledgers_empty(c)
    })
    .map_err(|e| {
        let left: Vec<String> = c
            .node_names()
            .iter()
            .map(|n| format!("{n}: {:?}", shares(c, n)))
            .collect();
        format!("{e}: {}", left.join("; "))
    })?;
    for node in c.node_names() {
        mapping_follows_ledger(c, &node)?;
    }
    Ok(())
}

fn own_hosts(c: &mut Cluster) -> TestResult {
    let out = c.srun(&[
        "-N3",
        "-l",
        "sh",
        "-c",
        "echo $(hostname) $(ls /run | wc -l)",
    ])?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut hosts: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    hosts.sort_unstable();
    ensure(
        hosts == ["gpu01", "gpu02", "gpu03"],
        format!(
            "srun -N3 ran on {hosts:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        ),
    )?;
    // gpu01 runs configless: its slurm.conf came from slurmctld into /run,
    // gpushare's own file did not (it is in gpu01's /etc/slurm).
    let cache = c.run_on("gpu01", "ls", &["/run/slurm/conf/"])?;
    let cache = String::from_utf8_lossy(&cache.stdout).into_owned();
    ensure(
        cache.contains("slurm.conf")
            && cache.contains("plugstack.conf")
            && !cache.contains("gpu_mps.conf"),
        format!("gpu01's configless cache holds {cache:?}"),
    )?;
    // Each node sees its own GPU device files at the path gres.conf names.
    let dev = c.gpu_device(0);
    let dev = dev
        .parent()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    for (node, want) in [("gpu01", 4), ("gpu03", 2)] {
        let out = c.run_ok("srun", &["-w", node, "ls", &dev])?;
        ensure(
            out.lines().filter(|l| l.starts_with("nvidia")).count() == want,
            format!("{node} sees {dev} as {out:?}, not its {want} GPUs"),
        )?;
    }
    Ok(())
}

fn group_limit(c: &mut Cluster) -> TestResult {
    let lafferty = |node: &str, gres: &str| {
        c.sbatch_ok(&["--qos=qos_lafferty", "-w", node, gres, "--wrap=sleep 300"])
    };
    let first = lafferty("gpu01", "--gres=gpu:a40:2")?;
    let second = lafferty("gpu02", "--gres=gpu:a40:2")?;
    for id in [first, second] {
        c.wait_job_state(id, &["RUNNING"], JOB_START)?;
    }
    // Two a40 stay free on each node: the next one waits on the group.
    let third = c.sbatch_ok(&["--qos=qos_lafferty", "--gres=gpu:a40:1", "--wrap=sleep 300"])?;
    let info = wait_for("the third lafferty job to wait on its group", SHORT, || {
        let info = c.job(third).ok()?;
        let reason = info.get("Reason")?.to_owned();
        (info.state() == "PENDING" && reason.starts_with("QOSGrp")).then_some(reason)
    })
    .map_err(|e| format!("{e}: {:?}", c.job(third).map(|j| j.fields)))?;
    // gpu-qos usage counts the group's GPUs over both nodes.
    let bin = testcluster::cluster::build_dir()?.join("gpu-qos");
    let bin = bin.to_string_lossy();
    let usage = c.run_ok(&bin, &["usage", "--qos", "qos_lafferty"])?;
    ensure(
        usage.starts_with("qos_lafferty: 4 of 4 a40 held\n")
            && usage.contains(&format!("pending  {third} ")),
        format!("gpu-qos usage with 2 a40 on gpu01 and 2 on gpu02:\n{usage}"),
    )?;
    // The multi-node site's design audits clean.
    let audit = c.run(&bin, &["audit", "--fail-on", "error"])?;
    ensure(
        audit.status.success(),
        format!(
            "gpu-qos audit on the three-node site: {}{}",
            String::from_utf8_lossy(&audit.stdout),
            String::from_utf8_lossy(&audit.stderr)
        ),
    )?;
    // Untyped, the same request would slip past the group's typed limit.
    let untyped = c.sbatch(&["--qos=qos_lafferty", "--gres=gpu:1", "--wrap=true"]);
    ensure(
        untyped
            .as_ref()
            .is_err_and(|e| e.contains("--gres=gpu:a40:1")),
        format!("an untyped lafferty job was not refused with the fix: {untyped:?}"),
    )?;
    // A lowprio job still finds the free a40s.
    let low = c.sbatch_ok(&["--qos=lowprio", "--gres=gpu:a40:2", "--wrap=sleep 300"])?;
    c.wait_job_state(low, &["RUNNING"], JOB_START)
        .map_err(|e| format!("{e} (the third lafferty job waited on {info})"))?;
    Ok(())
}

fn never_fits_on_two_nodes(c: &mut Cluster) -> TestResult {
    let out = c.sbatch(&[
        "--qos=qos_lafferty",
        "-N2",
        "--gres=gpu:a40:3",
        "--wrap=true",
    ]);
    ensure(
        out.as_ref()
            .is_err_and(|e| e.contains("asks 6 a40") && e.contains("--gres=gpu:a40:2")),
        format!("-N2 --gres=gpu:a40:3 under a limit of 4 was not refused with the fix: {out:?}"),
    )?;
    // Two a40 on each of two nodes is the whole group limit, and fits.
    let id = c.sbatch_ok(&[
        "--qos=qos_lafferty",
        "-N2",
        "--gres=gpu:a40:2",
        "--wrap=srun -l hostname; sleep 300",
    ])?;
    let info = c.wait_job_state(id, &["RUNNING"], JOB_START)?;
    ensure(
        info.get("NumNodes") == Some("2"),
        format!("job {id} runs on {:?} nodes", info.get("NumNodes")),
    )
}

fn shares_on_two_nodes(c: &mut Cluster) -> TestResult {
    let mut placed = BTreeMap::new();
    for node in ["gpu01", "gpu02"] {
        let ids = start_shares(c, node, 8, 50, &[])?;
        placed.insert(node, ids);
    }
    for (node, ids) in &placed {
        mapping_follows_ledger(c, node)?;
        let held = shares(c, node);
        let mine: Vec<u32> = held.keys().copied().collect();
        ensure(
            &mine == ids,
            format!("{node}'s ledger holds {held:?}, its jobs are {ids:?}"),
        )?;
        let mut per_gpu = [0; 4];
        for gpu in held.values() {
            if let Some(n) = per_gpu.get_mut(*gpu as usize) {
                *n += 1;
            }
        }
        ensure(
            per_gpu == [2, 2, 2, 2],
            format!("{node}: shares per GPU {per_gpu:?}: {held:?}"),
        )?;
        for (id, gpu) in &held {
            let host = printed(c, *id, "HOST");
            ensure(
                host.as_deref() == Some(*node),
                format!("job {id} ran on {host:?}, not {node}"),
            )?;
            // Confined: its own GPU's device opens, no other of its node.
            let out = c.job_output(*id);
            let open: Vec<&str> = out
                .split_whitespace()
                .filter(|w| w.ends_with("=No_such_device_or_address"))
                .collect();
            ensure(
                open == [format!("dev{gpu}=No_such_device_or_address")],
                format!("job {id}, placed on GPU {gpu} of {node}, can open {open:?}: {out}"),
            )?;
        }
    }
    clean(c)
}

fn preemption(c: &mut Cluster) -> TestResult {
    let low = |node: &str, gres: &str| {
        c.sbatch_ok(&[
            "--qos=lowprio",
            "-w",
            node,
            gres,
            "--open-mode=append",
            "--wrap=echo started on $(hostname); sleep 300",
        ])
    };
    let a40 = [
        ("gpu01", low("gpu01", "--gres=gpu:a40:4")?),
        ("gpu02", low("gpu02", "--gres=gpu:a40:4")?),
    ];
    let h100 = low("gpu03", "--gres=gpu:h100:2")?;
    for id in a40.iter().map(|(_, id)| *id).chain([h100]) {
        c.wait_job_state(id, &["RUNNING"], JOB_START)?;
    }
    let group = c.sbatch_ok(&["--qos=qos_lafferty", "--gres=gpu:a40:2", "--wrap=sleep 300"])?;
    let info = c.wait_job_state(group, &["RUNNING"], JOB_LONG)?;
    let node = info.get("NodeList").unwrap_or_default().to_owned();
    let mut preempted = Vec::new();
    for (low_node, id) in a40 {
        let j = c.job(id)?;
        if j.restarts() > 0 || j.state() != "RUNNING" {
            preempted.push((low_node, id, j.state().to_owned()));
        }
    }
    ensure(
        preempted.len() == 1 && preempted[0].0 == node,
        format!(
            "the lafferty job runs on {node}; lowprio a40 jobs preempted: {preempted:?} (want exactly the one on {node})"
        ),
    )?;
    let h = c.job(h100)?;
    ensure(
        h.state() == "RUNNING" && h.restarts() == 0,
        format!(
            "the lowprio h100 job on gpu03 was touched: {} restarts {}",
            h.state(),
            h.restarts()
        ),
    )?;
    // Requeued, it runs again once the group job ends, its output appended.
    let (_, victim, _) = preempted[0];
    c.run_ok("scancel", &[&group.to_string()])?;
    c.wait_job_state(victim, &["RUNNING"], JOB_LONG)?;
    wait_for("the requeued job's second start", SHORT, || {
        (c.job_output(victim).matches("started on").count() == 2).then_some(())
    })
    .map_err(|e| format!("{e}: {:?}", c.job_output(victim)))?;
    clean(c)
}

fn two_node_share(c: &mut Cluster) -> TestResult {
    let probe = c.write_device_probe()?;
    let probe = probe.to_string_lossy().into_owned();
    let out = c.srun(&[
        "-N2",
        "-w",
        "gpu01,gpu02",
        "--gres=mps:25",
        "-l",
        "sh",
        "-c",
        &format!("echo $(hostname) GPU=$GPUSHARE_GPU; {probe}"),
    ])?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    ensure(
        out.status.success(),
        format!("srun -N2 --gres=mps:25 failed: {text}{err}"),
    )?;
    for node in ["gpu01", "gpu02"] {
        ensure(
            text.lines()
                .any(|l| l.contains(node) && l.contains("GPU=") && !l.ends_with("GPU=")),
            format!("no task on {node} was given a GPU: {text}{err}"),
        )?;
    }
    // Each task reaches exactly one GPU device of its node.
    let probes: Vec<&str> = text.lines().filter(|l| l.contains("dev0=")).collect();
    ensure(
        probes.len() == 2
            && probes
                .iter()
                .all(|l| l.matches("No_such_device_or_address").count() == 1),
        format!("each task should open exactly its own GPU: {text}"),
    )?;
    wait_for("both ledgers to be empty after the step", SHORT, || {
        all_ledgers_empty(c)
    })
}

/// gpu01 holds four shares of 60 units, one per GPU: 160 units free on
/// the node, at most 40 on any GPU. A two-node share of 50 on gpu01 and
/// gpu02: where gpushare places (Slurm counts the node's mps as one pool),
/// Slurm starts it, gpu01's prolog refuses it and the job fails naming
/// gpu01, while gpu02, which placed its half, releases it. Where Slurm
/// places, it sees each GPU's room and holds the job until one has room.
fn no_room_on_one_node(c: &mut Cluster) -> TestResult {
    let fillers = start_shares(c, "gpu01", 4, 60, &[])?;
    let held = shares(c, "gpu01");
    let gpus: Vec<u32> = held.values().copied().collect();
    ensure(
        gpus.len() == 4 && (0..4).all(|g| gpus.contains(&g)),
        format!("gpu01 should hold one 60-unit share per GPU: {held:?}"),
    )?;
    let id = c.sbatch_ok(&[
        "-N2",
        "-w",
        "gpu01,gpu02",
        "--gres=mps:50",
        "--wrap=srun -l sh -c 'echo $(hostname) GPU=$GPUSHARE_GPU'",
    ])?;
    if slurm_places_shares() {
        // Slurm holds it: no GPU of gpu01 has 50 units. Still pending,
        // gpu01 untouched, once a scheduling pass after its submission
        // has looked at it.
        let info = c.wait_considered(id, JOB_START)?;
        ensure(
            info.state() == "PENDING" && shares(c, "gpu01") == held,
            format!(
                "with 40 units free on each GPU of gpu01, job {id} is {} and gpu01 holds {:?}",
                info.state(),
                shares(c, "gpu01")
            ),
        )?;
        c.run_ok("scancel", &[&fillers[0].to_string()])?;
        let done = c.wait_job_done(id, JOB_END)?;
        let out = c.job_output(id);
        ensure(
            done.state() == "COMPLETED"
                && ["gpu01", "gpu02"]
                    .iter()
                    .all(|n| out.lines().any(|l| l.contains(n) && !l.ends_with("GPU="))),
            format!("once a GPU had room job {id} ended {}: {out}", done.state()),
        )?;
        return clean(c);
    }
    let done = c.wait_job_done(id, JOB_END)?;
    let out = c.job_output(id);
    ensure(
        done.state() == "FAILED"
            && out.contains(&format!("job {id} on node gpu01:"))
            && out.contains("no single GPU"),
        format!(
            "a share with no room on gpu01 ended {}, its output: {out:?}",
            done.state()
        ),
    )?;
    // gpu02 placed its half, then released it; gpu01 holds its fillers only.
    let log = c.node_log("gpu02", "syslog");
    let about: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(&format!("job {id}")))
        .collect();
    ensure(
        about.iter().any(|l| l.contains("units on GPU"))
            && about.iter().any(|l| l.contains("released")),
        format!("gpu02's log should show job {id} placed and released: {about:?}"),
    )?;
    wait_for("gpu02's ledger to be empty", SHORT, || {
        shares(c, "gpu02").is_empty().then_some(())
    })?;
    ensure(
        shares(c, "gpu01") == held,
        format!(
            "gpu01 holds {:?}, its fillers were {held:?}",
            shares(c, "gpu01")
        ),
    )?;
    clean(c)
}

fn missing_node_config(c: &mut Cluster) -> TestResult {
    let conf = c.node_dir("gpu02").join("etc-slurm/gpu_mps.conf");
    let aside = conf.with_extension("aside");
    fs::rename(&conf, &aside).map_err(|e| format!("{}: {e}", conf.display()))?;
    let result = (|| -> TestResult {
        let id = c.sbatch_ok(&["-w", "gpu02", "--gres=mps:50", SHARE])?;
        let info = c.wait_job_done(id, JOB_END)?;
        let out = c.job_output(id);
        ensure(
            info.state() == "FAILED"
                && out.contains("gpushare has no configuration here")
                && out.contains("/etc/slurm/gpu_mps.conf"),
            format!(
                "a share on gpu02 without gpu_mps.conf ended {}: {out:?}",
                info.state()
            ),
        )?;
        ensure(
            c.node_log("gpu02", "syslog")
                .contains("gpushare has no configuration here")
                || c.log("slurmd")
                    .contains("gpushare has no configuration here"),
            "the node's log does not say why the share was refused",
        )?;
        // A job without mps runs there as ever.
        let plain = c.sbatch_ok(&["-w", "gpu02", "--gres=gpu:a40:1", "--wrap=true"])?;
        let done = c.wait_job_done(plain, JOB_END)?;
        ensure(
            done.state() == "COMPLETED",
            format!("a whole-GPU job on gpu02 ended {}", done.state()),
        )
    })();
    fs::rename(&aside, &conf).map_err(|e| format!("{}: {e}", aside.display()))?;
    result?;
    clean(c)
}

/// What Slurm sends job_submit for requests that span nodes, each judged
/// and (where accepted) run on the three nodes.
fn request_shapes(c: &mut Cluster) -> TestResult {
    let lafferty = |extra: &[&str]| {
        let mut args = vec!["--qos=qos_lafferty"];
        args.extend_from_slice(extra);
        c.sbatch(&args)
    };
    // One a40 per task, one task on each of two nodes: 2 of the group's 4.
    let per_task = lafferty(&[
        "-N2",
        "--ntasks-per-node=1",
        "--gpus-per-task=a40:1",
        "--wrap=srun -l hostname; sleep 300",
    ])
    .map_err(|e| format!("-N2 --gpus-per-task=a40:1 refused: {e}"))?;
    let info = c.wait_job_state(per_task, &["RUNNING"], JOB_START)?;
    ensure(
        info.get("NumNodes") == Some("2"),
        format!(
            "--gpus-per-task on two nodes runs on {:?}",
            info.get("NodeList")
        ),
    )?;
    c.run_ok("scancel", &[&per_task.to_string()])?;
    // Six tasks of one a40 can never fit a group of 4, however spread.
    let six = lafferty(&[
        "-n6",
        "--ntasks-per-node=3",
        "--gpus-per-task=a40:1",
        "--wrap=true",
    ]);
    ensure(
        six.as_ref().is_err_and(|e| e.contains("can never start")),
        format!("-n6 --gpus-per-task=a40:1 under a limit of 4: {six:?}"),
    )?;
    // --gpus for the whole job, over two nodes: Slurm spreads it.
    let spread = lafferty(&["-N2", "--gpus=a40:4", "--wrap=sleep 300"])
        .map_err(|e| format!("-N2 --gpus=a40:4 refused: {e}"))?;
    let info = c.wait_job_state(spread, &["RUNNING"], JOB_START)?;
    ensure(
        info.get("NumNodes") == Some("2"),
        format!("-N2 --gpus=a40:4 runs on {:?}", info.get("NodeList")),
    )?;
    c.run_ok("scancel", &[&spread.to_string()])?;
    // A node range is judged by its least node count (2 a40 on one node
    // fit the group); Slurm's own limit keeps what it is given within 4.
    let range = lafferty(&["-N1-3", "--gres=gpu:a40:2", "--wrap=sleep 300"])
        .map_err(|e| format!("-N1-3 --gres=gpu:a40:2 refused: {e}"))?;
    let info = c.wait_job_state(range, &["RUNNING"], JOB_START)?;
    let nodes: u32 = info
        .get("NumNodes")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    ensure(
        (1..=2).contains(&nodes),
        format!("-N1-3 --gres=gpu:a40:2 under a limit of 4 runs on {nodes} nodes"),
    )?;
    c.run_ok("scancel", &[&range.to_string()])?;
    // An array: one job_submit call for all its tasks, the untyped one
    // refused with the fix; the typed one's tasks count against the group
    // wherever they run, four at a time, the others waiting on the group.
    let untyped = lafferty(&["--array=0-5", "--gres=gpu:1", "--wrap=true"]);
    ensure(
        untyped
            .as_ref()
            .is_err_and(|e| e.contains("--gres=gpu:a40:1")),
        format!("an untyped lafferty array: {untyped:?}"),
    )?;
    let array = lafferty(&["--array=0-5", "--gres=gpu:a40:1", "--wrap=sleep 300"])
        .map_err(|e| format!("--array=0-5 --gres=gpu:a40:1 refused: {e}"))?;
    let tasks = wait_for(
        "four array tasks to run and two to wait on the group",
        JOB_START,
        || {
            let out = c
                .run_ok(
                    "squeue",
                    &["-h", "-r", "-j", &array.to_string(), "-o", "%T %N %r"],
                )
                .ok()?;
            let running = out.lines().filter(|l| l.starts_with("RUNNING")).count();
            let on_group = out
                .lines()
                .filter(|l| l.starts_with("PENDING") && l.contains("QOSGrp"))
                .count();
            (running == 4 && on_group == 2).then_some(out)
        },
    )
    .map_err(|e| {
        let now = c
            .run_ok(
                "squeue",
                &["-h", "-r", "-j", &array.to_string(), "-o", "%T %N %r"],
            )
            .unwrap_or_default();
        format!("{e}: {now}")
    })?;
    eprintln!("array {array} under qos_lafferty:\n{tasks}");
    c.run_ok("scancel", &[&array.to_string()])?;
    // A heterogeneous job: one job_submit call per component, and the
    // untyped second one is refused with the fix.
    let script = c.jobs_dir.join("het.sh");
    fs::write(&script, "#!/bin/sh\nsleep 30\n").map_err(|e| e.to_string())?;
    let script = script.to_string_lossy().into_owned();
    let het = c.sbatch(&[
        "--qos=qos_lafferty",
        "--gres=gpu:a40:1",
        ":",
        "--qos=qos_lafferty",
        "--gres=gpu:1",
        &script,
    ]);
    ensure(
        het.as_ref().is_err_and(|e| e.contains("--gres=gpu:a40:1")),
        format!("a heterogeneous job with an untyped component: {het:?}"),
    )?;
    let het_ok = c.sbatch(&[
        "--qos=qos_lafferty",
        "--gres=gpu:a40:1",
        ":",
        "--qos=lowprio",
        "--gres=gpu:h100:1",
        &script,
    ]);
    ensure(
        het_ok.is_ok(),
        format!("a heterogeneous job, a40 under the group and h100 under lowprio: {het_ok:?}"),
    )?;
    clean(c)
}
