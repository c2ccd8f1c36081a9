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

fn main() -> ExitCode {
    Suite::new(ClusterSpec::example_site_nodes())
        // Each test starts with no job, no share in any ledger, every
        // node's DCGM mapping following its ledger.
        .reset(|c| clean(c))
        .test("each_node_is_a_host_of_its_own", own_hosts)
        .test("the_group_limit_holds_across_nodes", group_limit)
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
            "share_jobs_beyond_the_room_beside_other_users_all_complete",
            contention_completes,
        )
        .test(
            "a_share_started_again_without_its_prolog_is_requeued_and_completes",
            prolog_missed::completes_after_a_start_without_prolog,
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

/// The bug seen on a three-node cluster: gpu01's slurmd dies with shares
/// running and stays away long enough for slurmctld to end those jobs;
/// no epilog runs, so their records stay in gpu01's ledger. Slurm then
/// starts eight shares there at once: the first prologs fill what the
/// ghosts left, the others find no room and reconcile; every one of them
/// must be placed.
fn ghosts_after_outage(c: &mut Cluster) -> TestResult {
    let (lost, before) = start_shares_held(c, "gpu01", 4, &["--no-requeue"])?;
    c.crash_node("gpu01")?;
    for &id in &lost {
        let info = c.wait_job_done(id, NODE_STATE)?;
        ensure(
            info.state() == "NODE_FAIL",
            format!("job {id} ended {} after gpu01 went away", info.state()),
        )?;
    }
    // slurmctld forgets them while gpu01 is away (MinJobAge): nothing will
    // ever run their epilogs.
    wait_for("slurmctld to forget the lost jobs", JOB_END, || {
        lost.iter().all(|&id| c.job(id).is_err()).then_some(())
    })?;
    let ghosts = shares(c, "gpu01");
    ensure(
        ghosts == before,
        format!("after the outage gpu01's ledger holds {ghosts:?}, expected the ghosts {before:?}"),
    )?;
    // Queued while gpu01 is away, the eight start together when it is back:
    // their prologs run side by side, as on the site where this was seen.
    let ids: Vec<u32> = (0..8)
        .map(|_| c.sbatch_ok(&["-w", "gpu01", "--gres=mps:50", SHARE]))
        .collect::<Result<_, _>>()?;
    c.restart_slurmd_on("gpu01")?;
    // Each share either prints its GPU (placed) or fails with the prolog's
    // refusal in its output.
    let mut refused = Vec::new();
    for &id in &ids {
        let placed = wait_for(
            &format!("job {id} to print its GPU or fail"),
            JOB_LONG,
            || {
                if printed(c, id, "GPU").is_some_and(|g| !g.is_empty()) {
                    return Some(true);
                }
                c.job(id).is_ok_and(|j| j.is_done()).then_some(false)
            },
        )?;
        if !placed {
            refused.push(format!("{id}: {}", c.job_output(id).trim()));
        }
    }
    let now = shares(c, "gpu01");
    ensure(
        refused.is_empty(),
        format!(
            "with the ghosts {ghosts:?} of jobs {lost:?} in gpu01's ledger, shares were refused although room existed: {refused:?}; ledger now {now:?}"
        ),
    )?;
    let placed: Vec<u32> = now.keys().copied().collect();
    ensure(
        placed == ids,
        format!("gpu01's ledger holds {now:?}; the running shares are {ids:?}, the ghosts were {lost:?}"),
    )?;
    // The ghosts left dcgm-exporter's mapping with the ledger.
    mapping_follows_ledger(c, "gpu01")?;
    clean(c)
}

fn rebooted_node(c: &mut Cluster) -> TestResult {
    let (lost, before) = start_shares_held(c, "gpu02", 2, &["--no-requeue"])?;
    c.crash_node("gpu02")?;
    for &id in &lost {
        c.wait_job_done(id, NODE_STATE)?;
    }
    c.boot_node("gpu02")?;
    ensure(
        shares(c, "gpu02").is_empty(),
        format!(
            "gpu02 rebooted with shares in its ledger: {:?}",
            shares(c, "gpu02")
        ),
    )?;
    let ids = start_shares(c, "gpu02", 8, 50, &[])?;
    let now = shares(c, "gpu02");
    ensure(
        now.keys().copied().collect::<Vec<_>>() == ids,
        format!("after the reboot gpu02 holds {now:?}, its jobs are {ids:?} (before: {before:?})"),
    )?;
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

/// A group job that fits its group's limit but no node: the a40 nodes
/// hold jobs it may not preempt (root's, QOS normal) and one of its own
/// group's, each with a time limit. `gpu-qos why`, run by its user, names
/// each a40 node with its GPUs in use, the jobs holding them soonest end
/// first, and when enough of them end; the h100 node not at all. Where
/// `PrivateData=jobs` hides other users' jobs, it counts their GPUs.
fn why_resources(c: &mut Cluster, private: bool) -> TestResult {
    let alice = TestUser::create(c, "gpushare_alice")?;
    let bob = TestUser::create(c, "gpushare_bob")?;
    for u in [&alice, &bob] {
        u.allow_qos(c, &["normal", "qos_lafferty"])?;
    }
    let sbatch_as = |user: &TestUser, args: &[&str]| -> Result<u32, String> {
        let mut all = vec!["--output=/dev/null", "--wrap=sleep 300"];
        all.extend_from_slice(args);
        user.sbatch(c, &all)
    };
    let group = sbatch_as(
        &alice,
        &[
            "--qos=qos_lafferty",
            "-t",
            "30",
            "-w",
            "gpu01",
            "--gres=gpu:a40:2",
        ],
    )?;
    let filler1 = c.sbatch_ok(&[
        "-t",
        "10",
        "-w",
        "gpu01",
        "--gres=gpu:a40:2",
        "--wrap=sleep 300",
    ])?;
    let filler2 = c.sbatch_ok(&[
        "-t",
        "20",
        "-w",
        "gpu02",
        "--gres=gpu:a40:4",
        "--wrap=sleep 300",
    ])?;
    let mut ends = BTreeMap::new();
    for id in [group, filler1, filler2] {
        let info = c.wait_job_state(id, &["RUNNING"], JOB_START)?;
        ends.insert(id, info.get("EndTime").unwrap_or_default().to_owned());
    }
    let waiting = sbatch_as(&bob, &["--qos=qos_lafferty", "--gres=gpu:a40:2"])?;
    c.wait_job_reason(waiting, "Resources", JOB_START)?;
    let report = bob.why(c, waiting, "Resources")?;
    let node = |name: &str| {
        report
            .details
            .iter()
            .find(|d| d.starts_with(&format!("{name} (")))
            .cloned()
            .unwrap_or_default()
    };
    let (one, two) = (node("gpu01"), node("gpu02"));
    let when = report
        .details
        .iter()
        .find(|d| d.starts_with("enough a40s") || d.starts_with("when enough a40s"))
        .cloned()
        .unwrap_or_default();
    let (want_one, want_two, want_when) = if private {
        let hidden = "by jobs Slurm does not show you (PrivateData=jobs)";
        (
            format!(": 4 a40, 4 in use: 4 {hidden}"),
            format!(": 4 a40, 4 in use: 4 {hidden}"),
            "when enough a40s free up is not known: it rests on jobs without an end or that \
             Slurm does not show you ("
                .to_owned(),
        )
    } else {
        (
            format!(
                ": 4 a40, 4 in use: normal job {filler1} (root, 2 a40, ends by {}); qos_lafferty \
                 job {group} (gpushare_alice, 2 a40, ends by {})",
                ends[&filler1], ends[&group]
            ),
            format!(
                ": 4 a40, 4 in use: normal job {filler2} (root, 4 a40, ends by {})",
                ends[&filler2]
            ),
            format!(
                "enough a40s free up first on gpu01 by {}, when job {filler1} ends by its time \
                 limit, if nothing else starts there first (",
                ends[&filler1]
            ),
        )
    };
    ensure(
        report
            .summary
            .ends_with("waits for free GPUs: no node it may run on has enough free now")
            && one.contains(&want_one)
            && two.contains(&want_two)
            && when.starts_with(&want_when)
            && node("gpu03").is_empty(),
        format!("want {want_one:?}, {want_two:?} and {want_when:?}; got {report:#?}"),
    )?;
    clean(c)
}

/// A job waits for `Resources` on the one a40 node whose GPUs are free:
/// its CPUs are all taken by a job without GPUs, the other a40 node's GPUs
/// are all held. `why`, as the user, names the node with its GPUs free and
/// says it waits for the rest.
fn why_free_gpus(c: &mut Cluster) -> TestResult {
    let bob = TestUser::create(c, "gpushare_bob")?;
    bob.allow_qos(c, &["normal", "qos_lafferty"])?;
    let node = c.run_ok("scontrol", &["-o", "show", "node", "gpu01"])?;
    let cpus = node
        .split_whitespace()
        .find_map(|f| f.strip_prefix("CPUTot="))
        .ok_or_else(|| format!("no CPUTot: {node}"))?
        .to_owned();
    let cpu_job = c.sbatch_ok(&["-w", "gpu01", "-c", &cpus, "--wrap=sleep 300"])?;
    let gpu_job = c.sbatch_ok(&["-w", "gpu02", "--gres=gpu:a40:4", "--wrap=sleep 300"])?;
    for id in [cpu_job, gpu_job] {
        c.wait_job_state(id, &["RUNNING"], JOB_START)?;
    }
    let waiting = bob.sbatch(
        c,
        &[
            "--output=/dev/null",
            "--wrap=sleep 300",
            "--qos=qos_lafferty",
            "--gres=gpu:a40:1",
        ],
    )?;
    c.wait_job_reason(waiting, "Resources", JOB_START)?;
    let report = bob.why(c, waiting, "Resources")?;
    ensure(
        report
            .summary
            .ends_with("waits for resources other than GPUs: gpu01 has the 1 a40 it needs free")
            && report.details.iter().any(|d| {
                d.starts_with(
                    "the a40s it needs are free now on gpu01: it waits there for the rest",
                )
            }),
        format!("{report:#?}"),
    )?;
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

fn daemon_restarts(c: &mut Cluster) -> TestResult {
    let mut held = BTreeMap::new();
    for node in ["gpu01", "gpu02"] {
        start_shares(c, node, 3, 50, &[])?;
        held.insert(node, shares(c, node));
    }
    c.restart_slurmctld()?;
    c.kill9_slurmd_on("gpu02");
    c.restart_slurmd_on("gpu02")?;
    for (node, before) in &held {
        for id in before.keys() {
            let state = c.job(*id)?.state().to_owned();
            ensure(
                state == "RUNNING",
                format!(
                    "job {id} on {node} is {state} after slurmctld's and gpu02's slurmd's restarts"
                ),
            )?;
        }
        let now = shares(c, node);
        ensure(
            &now == before,
            format!("{node}'s ledger went from {before:?} to {now:?} across the restarts"),
        )?;
    }
    // New shares still spread beside them.
    let more = start_shares(c, "gpu01", 1, 50, &[])?;
    ensure(
        shares(c, "gpu01").len() == 4,
        format!(
            "gpu01 holds {:?} after one more share {more:?}",
            shares(c, "gpu01")
        ),
    )?;
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

/// gpu02 drops off the network with shares running, past SlurmdTimeout:
/// slurmctld marks it DOWN and requeues the jobs, while their processes keep
/// running on the cut-off node. Plugged back, slurmd re-registers, the stale
/// instances are killed (their epilogs release the records) and the
/// requeued jobs start again there. Each then runs on the GPU its prolog
/// chose, or, where Slurm started it without running the Prolog (seen on
/// 22.05 for a requeued job on the same node), is refused with that reason
/// and requeued by gpushare: no share ever runs unplaced, nothing
/// over-fills, nothing is left behind.
fn cable_cut(c: &mut Cluster) -> TestResult {
    let (ids, before) = start_shares_held(c, "gpu02", 2, &["--requeue", "--open-mode=append"])?;
    c.set_cable("gpu02", false)?;
    wait_for("gpu02 to be DOWN", NODE_STATE, || {
        let states = c.node_states().ok()?;
        states.get("gpu02")?.starts_with("down").then_some(())
    })?;
    for &id in &ids {
        wait_for(&format!("job {id} to be requeued"), NODE_STATE, || {
            let j = c.job(id).ok()?;
            (j.state() != "RUNNING").then_some(())
        })?;
    }
    // Cut off, the node still holds both shares.
    let during = shares(c, "gpu02");
    ensure(
        during == before,
        format!("while cut off gpu02's ledger went from {before:?} to {during:?}"),
    )?;
    c.set_cable("gpu02", true)?;
    c.wait_nodes(&["gpu02".to_owned()], NODE_STATE)?;
    // Each requeued job runs again placed, is refused by gpushare because
    // Slurm skipped its Prolog, or is ended by Slurm itself (24.11 ended one
    // as FAILED when the cut-off node's stale instance reported back, its
    // output ending `*** REASON: ReqNodeNotAvail ...`).
    let mut running = Vec::new();
    for &id in &ids {
        let ended = wait_for(
            &format!("job {id} to run again placed, or end"),
            JOB_LONG,
            || {
                let j = c.job(id).ok()?;
                let out = c.job_output(id);
                if j.restarts() >= 1 && j.state() == "RUNNING" && out.matches("GPU=").count() >= 2 {
                    return Some(None);
                }
                j.is_done().then(|| Some(j.state().to_owned()))
            },
        )?;
        let out = c.job_output(id);
        match ended {
            None => running.push(id),
            Some(_) if out.contains("the node's Prolog did not run for this job") => {
                println!("note: Slurm started requeued job {id} on gpu02 without its Prolog; gpushare refused it");
            }
            Some(state) => {
                // Never refused for want of room or a record: that would be
                // gpushare's doing.
                ensure(
                    !out.contains("error: gpu_mps"),
                    format!("requeued job {id} ended {state} with gpushare's refusal: {out:?}"),
                )?;
                let last = out.lines().last().unwrap_or_default().to_owned();
                println!("note: Slurm ended requeued job {id} {state}: {last}");
            }
        }
    }
    // An ended instance's epilog may still be on its way.
    wait_for(
        "gpu02's ledger to hold exactly its running shares",
        SHORT,
        || (shares(c, "gpu02").keys().copied().collect::<Vec<_>>() == running).then_some(()),
    )
    .map_err(|e| {
        format!(
            "{e}: after the cable came back gpu02 holds {:?}, its running shares are {running:?} (before the cut {before:?})",
            shares(c, "gpu02")
        )
    })?;
    clean(c)
}

/// ann holds a small share on every GPU of gpu01, and gpu02 is taken by
/// an exclusive job, so ben's share can only start on gpu01. Where
/// gpushare places (one user per MPS server, `OtherUsers=refuse`), gpu01
/// cannot serve it: the job is requeued, kept off gpu01, and runs on
/// gpu02 once that is free instead of ending FAILED; `scontrol show job`
/// tells ben why. Where Slurm places, it runs beside ann on gpu01, told so.
fn sent_elsewhere(c: &mut Cluster) -> TestResult {
    let ann = TestUser::create(c, "gpushare-ann")?;
    let ben = TestUser::create(c, "gpushare-ben")?;
    let submit = |user: &TestUser, extra: &[&str]| {
        let out = format!("--output={}/%j.out", user.home.display());
        let mut args = vec![out.as_str()];
        args.extend_from_slice(extra);
        args.push(SHARE);
        user.sbatch(c, &args)
    };
    let anns: Vec<u32> = (0..4)
        .map(|_| submit(&ann, &["-w", "gpu01", "--gres=mps:10"]))
        .collect::<Result<_, _>>()?;
    wait_for("ann's four shares on gpu01", JOB_START, || {
        let held = shares(c, "gpu01");
        anns.iter().all(|id| held.contains_key(id)).then_some(())
    })?;
    let gpus: std::collections::BTreeSet<u32> = shares(c, "gpu01").into_values().collect();
    ensure(
        gpus.len() == 4,
        format!("ann's shares on GPUs {gpus:?} of gpu01"),
    )?;
    let blocker = c.sbatch_ok(&["-w", "gpu02", "--exclusive", "--wrap=sleep 300"])?;
    c.wait_job_state(blocker, &["RUNNING"], JOB_START)?;
    let id = submit(&ben, &["--gres=mps:30"])?;
    if slurm_places_shares() {
        c.wait_job_state(id, &["RUNNING"], JOB_LONG)?;
        return clean(c);
    }
    wait_for("ben's job to be sent off gpu01", JOB_LONG, || {
        let info = c.job(id).ok()?;
        info.get("ExcNodeList")?.contains("gpu01").then_some(info)
    })
    .and_then(|_| {
        let shown = ben.run_ok(c, None, "scontrol", &["show", "job", &id.to_string()])?;
        ensure(
            shown.contains("AdminComment=gpushare: requeued from gpu01"),
            format!("ben is not told why:\n{shown}"),
        )
    })?;
    c.run_ok("scancel", &[&blocker.to_string()])?;
    let info = c.wait_job_state(id, &["RUNNING"], JOB_LONG)?;
    ensure(
        info.get("NodeList") == Some("gpu02"),
        format!("ben's job runs on {:?}", info.get("NodeList")),
    )?;
    clean(c)
}

/// Each task of array `array` in `scontrol -o show job` (asked by the
/// array's id, it lists every task): task id → its fields.
fn array_tasks(c: &Cluster, array: u32) -> Result<BTreeMap<u32, BTreeMap<String, String>>, String> {
    let text = c.run_ok("scontrol", &["-o", "show", "job", &array.to_string()])?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let fields: BTreeMap<String, String> = line
                .split_whitespace()
                .filter_map(|w| w.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
            let task = fields.get("ArrayTaskId")?.parse().ok()?;
            Some((task, fields))
        })
        .collect())
}

/// ann holds a small share on every GPU of gpu01 (as in
/// [`sent_elsewhere`]). ben's array of three shares: tasks 0 and 1 run on
/// gpu02; task 2, the last to start, keeps the array's job id (Slurm
/// reuses the array's record) and may only go to gpu01, where it is
/// refused beside ann's servers and requeued by its epilog. Only that
/// task is requeued: `scontrol requeue <array id>` would requeue every
/// task, killing 0 and 1 and running them again.
fn array_task_sent_elsewhere(c: &mut Cluster) -> TestResult {
    if slurm_places_shares() {
        // Slurm's placement runs ben beside ann: nothing is refused.
        return Ok(());
    }
    let ann = TestUser::create(c, "gpushare-ann")?;
    let ben = TestUser::create(c, "gpushare-ben")?;
    let anns: Vec<u32> = (0..4)
        .map(|_| {
            ann.sbatch(
                c,
                &[
                    &format!("--output={}/%j.out", ann.home.display()),
                    "-w",
                    "gpu01",
                    "--gres=mps:10",
                    SHARE,
                ],
            )
        })
        .collect::<Result<_, _>>()?;
    wait_for("ann's four shares on gpu01", JOB_START, || {
        let held = shares(c, "gpu01");
        anns.iter().all(|id| held.contains_key(id)).then_some(())
    })?;
    let array = ben.sbatch(
        c,
        &[
            &format!("--output={}/%A_%a.out", ben.home.display()),
            "--hold",
            "--array=0-2",
            "-x",
            "gpu01,gpu03",
            "--gres=mps:30",
            SHARE,
        ],
    )?;
    for task in ["0", "1"] {
        c.run_ok("scontrol", &["release", &format!("{array}_{task}")])?;
    }
    let running = |tasks: &BTreeMap<u32, BTreeMap<String, String>>, task: u32| {
        tasks.get(&task).is_some_and(|f| {
            f.get("JobState").map(String::as_str) == Some("RUNNING")
                && f.get("NodeList").map(String::as_str) == Some("gpu02")
        })
    };
    let before = wait_for("ben's tasks 0 and 1 running on gpu02", JOB_START, || {
        let tasks = array_tasks(c, array).ok()?;
        (running(&tasks, 0) && running(&tasks, 1)).then_some(tasks)
    })?;
    // Only task 2 is left in the array's own record: it keeps the
    // array's id, and gpu01 is the one node it may start on.
    c.run_ok(
        "scontrol",
        &[
            "update",
            &format!("jobid={array}_2"),
            "ExcNodeList=gpu02,gpu03",
        ],
    )?;
    c.run_ok("scontrol", &["release", &format!("{array}_2")])?;
    let after = wait_for("ben's task 2 to be sent off gpu01", JOB_LONG, || {
        let tasks = array_tasks(c, array).ok()?;
        let last = tasks.get(&2)?;
        (last.get("ExcNodeList")?.contains("gpu01")
            && last.get("Restarts").map(String::as_str) == Some("1"))
        .then_some(tasks)
    })
    .map_err(|e| {
        format!(
            "{e}\ntasks: {:?}\nsyslog:\n{}",
            array_tasks(c, array),
            c.syslog()
        )
    })?;
    let last = after.get(&2).cloned().unwrap_or_default();
    ensure(
        last.get("JobId") == Some(&array.to_string())
            && last
                .get("AdminComment")
                .is_some_and(|a| a.contains("gpushare:")),
        format!("task 2 is not the array's record, or not told why: {last:?}"),
    )?;
    let untouched = |now: &BTreeMap<u32, BTreeMap<String, String>>, what: &str| {
        for task in [0, 1] {
            let f = now.get(&task).cloned().unwrap_or_default();
            ensure(
                running(now, task)
                    && f.get("Restarts").map(String::as_str) == Some("0")
                    && f.get("JobId") == before.get(&task).and_then(|b| b.get("JobId")),
                format!("task {task} was touched by {what}: {f:?}"),
            )?;
        }
        Ok::<(), String>(())
    };
    untouched(&after, "task 2's requeue")?;
    // One of ann's shares ends: its epilog gives task 2 its own
    // ExcNodeList back (named as the task too), and it starts on the GPU
    // that share left free.
    c.run_ok("scancel", &[&anns[0].to_string()])?;
    let back = wait_for("ben's task 2 to run on gpu01", JOB_LONG, || {
        let tasks = array_tasks(c, array).ok()?;
        let last = tasks.get(&2)?;
        (last.get("JobState").map(String::as_str) == Some("RUNNING")
            && last.get("NodeList").map(String::as_str) == Some("gpu01"))
        .then_some(tasks)
    })
    .map_err(|e| format!("{e}\ntasks: {:?}", array_tasks(c, array)))?;
    untouched(&back, "task 2's exclusion taken back")?;
    clean(c)
}

/// The value of `key` in `scontrol show job`'s answer, whole: each
/// comment field is a line of its own there (ended by a blank).
fn shown_line(c: &Cluster, id: u32, key: &str) -> Option<String> {
    let text = c
        .run_ok("scontrol", &["show", "job", &id.to_string()])
        .ok()?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix(key)?.strip_prefix('='))
        .map(str::to_owned)
}

/// As in [`sent_elsewhere`], ben's share can only start on gpu01, where
/// ann's servers refuse it. The site gave his job an `AdminComment`
/// before it started: gpushare's words are appended to it, not put in
/// its place. ben adds gpu03 to his `ExcNodeList` while his job waits.
/// When one of ann's shares ends, only gpu01 leaves his list and only
/// gpushare's words leave the comment (they counted nothing toward the
/// cap: no tally stays): the job runs on gpu01, still excluding gpu03,
/// the site's comment as it was.
fn own_changes_survive_the_lift(c: &mut Cluster) -> TestResult {
    if slurm_places_shares() {
        // Slurm's placement runs ben beside ann: nothing is refused.
        return Ok(());
    }
    let (anns, blocker, ben) = only_gpu01_left(c)?;
    let id = ben.sbatch(
        c,
        &[
            &format!("--output={}/%j.out", ben.home.display()),
            "--hold",
            "--gres=mps:30",
            SHARE,
        ],
    )?;
    let site = "site: project 42";
    c.run_ok(
        "scontrol",
        &[
            "update",
            &format!("jobid={id}"),
            &format!("AdminComment={site}"),
        ],
    )?;
    c.run_ok("scontrol", &["release", &id.to_string()])?;
    let told = wait_for("ben's job to be sent off gpu01", JOB_LONG, || {
        let info = c.job(id).ok()?;
        (info.get("ExcNodeList") == Some("gpu01") && info.get("JobState") == Some("PENDING"))
            .then_some(())?;
        shown_line(c, id, "AdminComment")
    })
    .map_err(|e| format!("{e}\nsyslog:\n{}", c.syslog()))?;
    ensure(
        told.starts_with(&format!(
            "{site}; gpushare: requeued from gpu01 (not counted toward the 3), "
        )),
        format!("the site's AdminComment is not kept before gpushare's: {told:?}"),
    )?;
    ben.run_ok(
        c,
        None,
        "scontrol",
        &["update", &format!("jobid={id}"), "ExcNodeList=gpu01,gpu03"],
    )?;
    c.run_ok("scancel", &[&anns[0].to_string()])?;
    let info = c.wait_job_state(id, &["RUNNING"], JOB_LONG).map_err(|e| {
        format!(
            "{e}\nExcNodeList {:?}\nsyslog:\n{}",
            c.job(id)
                .ok()
                .and_then(|j| j.get("ExcNodeList").map(str::to_owned)),
            c.syslog()
        )
    })?;
    ensure(
        info.get("NodeList") == Some("gpu01") && info.get("ExcNodeList") == Some("gpu03"),
        format!(
            "ben's job runs on {:?} with ExcNodeList {:?}: his own gpu03 must stay",
            info.get("NodeList"),
            info.get("ExcNodeList")
        ),
    )?;
    // The site's words given back (gpushare's counted nothing: another
    // user's server is the node's own state, never held against the job).
    let comment = shown_line(c, id, "AdminComment");
    let kept = site.to_owned();
    ensure(
        comment.as_deref() == Some(kept.as_str()),
        format!("the AdminComment after the lift is {comment:?}, not {kept:?}"),
    )?;
    c.run_ok("scancel", &[&blocker.to_string()])?;
    clean(c)
}

/// ann holds a small share on every GPU of gpu01 and gpu02 is taken by an
/// exclusive job: a share of ben's can only start on gpu01, where ann's
/// servers refuse it. ann's jobs, the blocker, and ben.
fn only_gpu01_left(c: &Cluster) -> Result<(Vec<u32>, u32, TestUser), String> {
    let ann = TestUser::create(c, "gpushare-ann")?;
    let ben = TestUser::create(c, "gpushare-ben")?;
    let out = format!("--output={}/%j.out", ann.home.display());
    let anns: Vec<u32> = (0..4)
        .map(|_| ann.sbatch(c, &[&out, "-w", "gpu01", "--gres=mps:10", SHARE]))
        .collect::<Result<_, _>>()?;
    wait_for("ann's four shares on gpu01", JOB_START, || {
        let held = shares(c, "gpu01");
        anns.iter().all(|id| held.contains_key(id)).then_some(())
    })?;
    let blocker = c.sbatch_ok(&["-w", "gpu02", "--exclusive", "--wrap=sleep 300"])?;
    c.wait_job_state(blocker, &["RUNNING"], JOB_START)?;
    Ok((anns, blocker, ben))
}

/// gpu01's `gpu_mps.conf` as its prolog finds it: in its own `/etc/slurm`
/// (gpu01 runs configless).
const GPU01_CONF: &str = "/etc/slurm/gpu_mps.conf";

/// Runs gpu01's node timer (`gpu-mps metrics --write`) there: what it
/// said on stderr.
fn gpu01_timer(c: &Cluster) -> Result<String, String> {
    let conf = std::path::PathBuf::from(GPU01_CONF);
    let log = c.node_dir("gpu01").join("kernel-log");
    fs::write(&log, "").map_err(|e| format!("{}: {e}", log.display()))?;
    c.node_timer(Some("gpu01"), &conf, &log)
}

/// What must change on gpu01, as gpushare's words say it, for a share
/// refused beside another user's server, and on a disabled node.
const OTHER_USERS_GONE: &str = "a GPU there has room beside no MPS server of another user";
const ENABLED: &str = "its admin enables sharing there again";

/// gpushare's record of gpu01's exclusions, in what the node keeps across
/// reboots (`/var/lib/gpushare/kept-of-<StateDir>/requeued`).
fn gpu01_record(c: &Cluster) -> Result<std::path::PathBuf, String> {
    let kept = c.node_dir("gpu01").join("var-lib-gpushare");
    let dirs = fs::read_dir(&kept).map_err(|e| format!("{}: {e}", kept.display()))?;
    dirs.filter_map(|d| d.ok())
        .map(|d| d.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("kept-of-"))
        })
        .map(|d| d.join("requeued"))
        .ok_or_else(|| format!("no kept-of-* directory in {}", kept.display()))
}

/// Job `id`'s exclusion on gpu01 recorded at the epoch's start: as old as
/// any clock could make it.
fn age_exclusion(c: &Cluster, id: u32) -> TestResult {
    let record = gpu01_record(c)?;
    let text = fs::read_to_string(&record).map_err(|e| format!("{}: {e}", record.display()))?;
    let aged: String = text
        .lines()
        .map(|l| {
            let mut f: Vec<&str> = l.split('\t').collect();
            if let Some(since) = f.get_mut(2) {
                *since = "0";
            }
            format!("{}\n", f.join("\t"))
        })
        .collect();
    ensure(
        aged.starts_with(&format!("{id}\t1\t0\t")),
        format!("gpu01's record of job {id}'s exclusion: {text:?}"),
    )?;
    fs::write(&record, aged).map_err(|e| format!("{}: {e}", record.display()))
}

/// Job `id` pends, kept off gpu01 after `restarts` restarts.
fn kept_off_gpu01(c: &Cluster, id: u32, restarts: u32) -> TestResult {
    let info = c.job(id)?;
    ensure(
        info.get("JobState") == Some("PENDING")
            && info.get("ExcNodeList") == Some("gpu01")
            && info.get("Restarts") == Some(restarts.to_string().as_str()),
        format!("job {id} is no longer kept off gpu01 after {restarts} restart(s): {info:?}"),
    )
}

/// A share of ben's (30 units), sent off gpu01 and told, in its
/// `AdminComment`, that this counts nothing and what must change there
/// (`until`): its job id.
fn ben_sent_off_gpu01(c: &Cluster, ben: &TestUser, until: &str) -> Result<u32, String> {
    let out = format!("--output={}/%j.out", ben.home.display());
    let id = ben.sbatch(c, &[&out, "--gres=mps:30", SHARE])?;
    c.wait_sent_off(id, "gpu01", JOB_LONG)
        .map_err(|e| format!("{e}\nsyslog:\n{}", c.syslog()))?;
    let told = shown_line(c, id, "AdminComment").unwrap_or_default();
    ensure(
        told.contains("(not counted toward the 3)") && told.contains(&format!("until {until}")),
        format!("ben is not told what must change: {told:?}"),
    )?;
    Ok(id)
}

/// ben's share is sent off gpu01, where ann's servers hold every GPU. Its
/// exclusion outlives any clock (its record aged, the node timer run) and
/// the end of a share that frees no GPU of ann's server; it lifts when
/// one of ann's GPUs is free of her server: ben's job runs on gpu01,
/// requeued once.
fn lifts_with_its_cause(c: &mut Cluster) -> TestResult {
    if slurm_places_shares() {
        return Ok(());
    }
    let (anns, blocker, ben) = only_gpu01_left(c)?;
    let ann = TestUser::create(c, "gpushare-ann")?;
    let out = format!("--output={}/%j.out", ann.home.display());
    let fifth = ann.sbatch(c, &[&out, "-w", "gpu01", "--gres=mps:10", SHARE])?;
    c.wait_job_state(fifth, &["RUNNING"], JOB_START)?;
    let id = ben_sent_off_gpu01(c, &ben, OTHER_USERS_GONE)?;
    age_exclusion(c, id)?;
    let said = gpu01_timer(c)?;
    kept_off_gpu01(c, id, 1).map_err(|e| format!("{e}\ntimer: {said}"))?;
    // A share of ann's ends on a GPU where another of hers runs on.
    c.run_ok("scancel", &[&fifth.to_string()])?;
    c.wait_job_done(fifth, JOB_END)?;
    wait_for("gpu01 to release ann's fifth share", SHORT, || {
        (!shares(c, "gpu01").contains_key(&fifth)).then_some(())
    })?;
    kept_off_gpu01(c, id, 1).map_err(|e| format!("{e}\nsyslog:\n{}", c.syslog()))?;
    // One of ann's GPUs free of her server: ben's share fits there.
    c.run_ok("scancel", &[&anns[1].to_string()])?;
    let info = c
        .wait_job_state(id, &["RUNNING"], JOB_LONG)
        .map_err(|e| format!("{e}\nsyslog:\n{}", c.syslog()))?;
    ensure(
        info.get("NodeList") == Some("gpu01") && info.get("Restarts") == Some("1"),
        format!("ben's job after the lift: {info:?}"),
    )?;
    c.run_ok("scancel", &[&blocker.to_string()])?;
    clean(c)
}

/// Ten share jobs of ben's, more than gpu01 has room for beside ann's
/// servers, which end one by one, while gpu02 is taken: every one of
/// ben's jobs ends COMPLETED on gpu01, none FAILED by the requeue cap,
/// however often they were sent off (before, each share's end sent every
/// one back, to be refused again beside ann's remaining servers).
fn contention_completes(c: &mut Cluster) -> TestResult {
    if slurm_places_shares() {
        return Ok(());
    }
    let ann = TestUser::create(c, "gpushare-ann")?;
    let ben = TestUser::create(c, "gpushare-ben")?;
    let out = format!("--output={}/%j.out", ann.home.display());
    let anns: Vec<u32> = [20, 35, 50, 65]
        .iter()
        .map(|secs| {
            let wrap = format!("--wrap=sleep {secs}");
            ann.sbatch(c, &[&out, "-w", "gpu01", "--gres=mps:10", &wrap])
        })
        .collect::<Result<_, _>>()?;
    wait_for("ann's four shares on gpu01", JOB_START, || {
        let held = shares(c, "gpu01");
        anns.iter().all(|id| held.contains_key(id)).then_some(())
    })?;
    let blocker = c.sbatch_ok(&["-w", "gpu02", "--exclusive", "--wrap=sleep 600"])?;
    c.wait_job_state(blocker, &["RUNNING"], JOB_START)?;
    let out = format!("--output={}/%j.out", ben.home.display());
    let bens: Vec<u32> = (0..10)
        .map(|_| ben.sbatch(c, &[&out, "--gres=mps:40", "--wrap=sleep 3"]))
        .collect::<Result<_, _>>()?;
    // Each one's end as accounting keeps it (slurmctld forgets ended jobs
    // after MinJobAge), once none of them is queued any more: a refused
    // run's record reads FAILED until slurmctld has requeued the job.
    let ids: Vec<String> = bens.iter().map(u32::to_string).collect();
    let ids = ids.join(",");
    let ended = wait_for(
        "ben's ten jobs to end",
        std::time::Duration::from_secs(400),
        || {
            let queued = c
                .run_ok("squeue", &["-h", "-u", &ben.name, "-o", "%i"])
                .ok()?;
            if !queued.trim().is_empty() {
                return None;
            }
            let out = c
                .run_ok(
                    "sacct",
                    &["-X", "-n", "-P", "-o", "JobID,State", "-j", &ids],
                )
                .ok()?;
            let states: BTreeMap<String, String> = out
                .lines()
                .filter_map(|l| l.split_once('|'))
                .map(|(j, s)| (j.to_owned(), s.to_owned()))
                .collect();
            let done = |s: &str| !matches!(s, "PENDING" | "RUNNING" | "REQUEUED" | "COMPLETING");
            (states.len() == bens.len() && states.values().all(|s| done(s))).then_some(states)
        },
    )
    .map_err(|e| format!("{e}\nsyslog:\n{}", c.syslog()))?;
    ensure(
        ended.values().all(|s| s == "COMPLETED"),
        format!("ben's jobs ended {ended:?}\nsyslog:\n{}", c.syslog()),
    )?;
    c.run_ok("scancel", &[&blocker.to_string()])?;
    clean(c)
}

/// Runs `gpu-mps ARGS` on gpu01 with its gpu_mps.conf: what it said.
fn gpu01_mps(c: &Cluster, args: &[&str]) -> Result<std::process::Output, String> {
    let bin = testcluster::cluster::build_dir()?.join("gpu-mps");
    let args = [args, &["--conf", GPU01_CONF, "--node", "gpu01"]].concat();
    c.run_on("gpu01", &bin.to_string_lossy(), &args)
}

/// gpu01 is disabled (its mps still in Slurm's configuration) and gpu02
/// taken: ben's share goes to gpu01, is refused and sent off, not counted
/// toward the cap. However old its record and however often the node
/// timer or `gpu-mps disable` runs, it is not sent back to gpu01 (Slurm
/// would only send it there again): it waits, then runs on gpu02.
fn disabled_keeps_off(c: &mut Cluster) -> TestResult {
    let disabled = gpu01_mps(c, &["disable", "--reason", "driver update"])?;
    let result = (|| {
        ensure(
            disabled.status.success(),
            format!("gpu-mps disable: {disabled:?}"),
        )?;
        let blocker = c.sbatch_ok(&["-w", "gpu02", "--exclusive", "--wrap=sleep 300"])?;
        c.wait_job_state(blocker, &["RUNNING"], JOB_START)?;
        let ben = TestUser::create(c, "gpushare-ben")?;
        let id = ben_sent_off_gpu01(c, &ben, ENABLED)?;
        age_exclusion(c, id)?;
        for _ in 0..2 {
            gpu01_timer(c)?;
        }
        let again = gpu01_mps(c, &["disable"])?;
        let said = String::from_utf8_lossy(&again.stdout).into_owned();
        ensure(
            said.contains("stay kept off this node while Slurm books mps here"),
            format!("gpu-mps disable again: {again:?}"),
        )?;
        kept_off_gpu01(c, id, 1)?;
        c.run_ok("scancel", &[&blocker.to_string()])?;
        let info = c.wait_job_state(id, &["RUNNING"], JOB_LONG)?;
        ensure(
            info.get("NodeList") == Some("gpu02") && info.get("Restarts") == Some("1"),
            format!("ben's job: {info:?}"),
        )
    })();
    let enabled = gpu01_mps(c, &["enable"]);
    result?;
    ensure(
        enabled.as_ref().is_ok_and(|o| o.status.success()),
        format!("gpu-mps enable: {enabled:?}"),
    )?;
    clean(c)
}

/// ben's share is sent off gpu01 and runs on gpu02; while it runs there,
/// ann's share on gpu01 ends (room for it back), but Slurm keeps its
/// ExcNodeList while it runs: the record stays. Requeued (as a
/// preemption would), the job pends, and gpu01's next look gives gpu01
/// back: Slurm's record no longer keeps it off.
fn returns_after_running_elsewhere(c: &mut Cluster) -> TestResult {
    if slurm_places_shares() {
        return Ok(());
    }
    let (anns, blocker, ben) = only_gpu01_left(c)?;
    let id = ben_sent_off_gpu01(c, &ben, OTHER_USERS_GONE)?;
    c.run_ok("scancel", &[&blocker.to_string()])?;
    let info = c.wait_job_state(id, &["RUNNING"], JOB_LONG)?;
    ensure(
        info.get("NodeList") == Some("gpu02"),
        format!("ben's job: {info:?}"),
    )?;
    c.run_ok("scancel", &[&anns[0].to_string()])?;
    c.wait_job_done(anns[0], JOB_END)?;
    // gpu02 taken again, so that nothing but gpu01 can run it.
    let again = c.sbatch_ok(&["-w", "gpu02", "--exclusive", "--wrap=sleep 300"])?;
    c.run_ok("scontrol", &["requeue", &id.to_string()])?;
    c.wait_job_state(again, &["RUNNING"], JOB_LONG)?;
    gpu01_timer(c)?;
    let info = c
        .wait_job_state(id, &["RUNNING"], JOB_LONG)
        .map_err(|e| format!("{e}: {:?}\nsyslog:\n{}", c.job(id), c.syslog()))?;
    ensure(
        info.get("NodeList") == Some("gpu01")
            && !info.get("ExcNodeList").is_some_and(|l| l.contains("gpu01")),
        format!("ben's job after its requeue: {info:?}"),
    )?;
    c.run_ok("scancel", &[&again.to_string()])?;
    clean(c)
}

/// gpu01 is disabled and ben's share sent off it; gpu01 crashes and
/// reboots (its `/run`, gpushare's state directory, emptied). Its record
/// of the exclusion is kept: enabled again, gpu01 gives the job back, and
/// it runs there.
fn exclusions_outlive_a_reboot(c: &mut Cluster) -> TestResult {
    let disabled = gpu01_mps(c, &["disable", "--reason", "firmware"])?;
    let result = (|| {
        ensure(disabled.status.success(), format!("disable: {disabled:?}"))?;
        let blocker = c.sbatch_ok(&["-w", "gpu02", "--exclusive", "--wrap=sleep 300"])?;
        c.wait_job_state(blocker, &["RUNNING"], JOB_START)?;
        let ben = TestUser::create(c, "gpushare-ben")?;
        let id = ben_sent_off_gpu01(c, &ben, ENABLED)?;
        c.crash_node("gpu01")?;
        c.boot_node("gpu01")?;
        c.wait_nodes(&["gpu01".to_owned()], NODE_STATE)?;
        let enabled = gpu01_mps(c, &["enable"])?;
        let said = String::from_utf8_lossy(&enabled.stdout).into_owned();
        ensure(
            said.contains(&format!("job {id} may run here again")),
            format!("enable after the reboot gives nothing back: {enabled:?}"),
        )?;
        let info = c
            .wait_job_state(id, &["RUNNING"], JOB_LONG)
            .map_err(|e| format!("{e}: {:?}", c.job(id)))?;
        ensure(
            info.get("NodeList") == Some("gpu01"),
            format!("ben's job after the reboot: {info:?}"),
        )?;
        c.run_ok("scancel", &[&blocker.to_string()]).map(drop)
    })();
    let _ = gpu01_mps(c, &["enable"]);
    result?;
    clean(c)
}

/// gpu01's node timer has read its kernel log (its cursor kept); the node
/// reboots (its `/run`, gpushare's state directory with it, emptied; a new
/// boot id) and the driver logs an ECC XID of its GPU 2 while it comes up.
/// The timer's first run after the boot reads the new boot's log from its
/// start and sets GPU 2 aside, named by NVML's figures kept from the boot
/// before (no share has started since; the harness has no NVML: the
/// figures a prolog keeps are written here).
fn xid_logged_while_booting(c: &mut Cluster) -> TestResult {
    let conf = c.node_dir("gpu01").join("etc-slurm/gpu_mps.conf");
    let log = c.node_dir("gpu01").join("kernel-log");
    let state = c.node_dir("gpu01").join("run/gpu-mps");
    let write = |path: &std::path::Path, text: &str| {
        fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    let boot_id = |c: &Cluster| -> Result<String, String> {
        let out = c.run_on("gpu01", "cat", &["/proc/sys/kernel/random/boot_id"])?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let failed = |c: &Cluster| -> Result<Vec<u32>, String> {
        let bin = testcluster::cluster::build_dir()?.join("gpu-mps");
        let conf = conf.to_string_lossy();
        let out = c.run_on(
            "gpu01",
            &bin.to_string_lossy(),
            &["status", "--json", "--conf", &conf],
        )?;
        let view: gpushare::mps::status::NodeStatus = serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("gpu-mps status --json: {e}: {out:?}"))?;
        Ok(view
            .mps
            .iter()
            .filter(|m| m.failed.is_some())
            .map(|m| m.gpu)
            .collect())
    };
    let facts: String = (0..4u32)
        .map(|g| format!("{g} {g} 49152 0 0 00000000:{:02X}:00.0\n", 0x3b + g))
        .collect();
    // The boot before: the timer has looked (or looks now: first look).
    write(
        &log,
        "6,0,1,-;Linux version\n6,1,2,-;eth0: link up\n6,2,3,-;slurmd\n",
    )?;
    c.node_timer(Some("gpu01"), &conf, &log)?;
    write(&state.join("nvml-facts"), &facts)?;
    c.node_timer(Some("gpu01"), &conf, &log)?;
    let before = boot_id(c)?;
    c.crash_node("gpu01")?;
    c.boot_node("gpu01")?;
    let after = boot_id(c)?;
    ensure(
        !after.is_empty() && after != before,
        format!("gpu01's boot id {before:?} before the reboot, {after:?} after"),
    )?;
    // The new boot's ring: its numbers start again, below the cursor's.
    write(
        &log,
        "6,0,1,-;Linux version\n\
         4,1,2,-;NVRM: Xid (PCI:0000:3d:00): 94, pid=1, name=python, Contained ECC error.\n",
    )?;
    let result = (|| -> TestResult {
        ensure(
            !state.join("nvml-facts").exists(),
            "gpu01's state directory kept NVML's figures over the reboot",
        )?;
        let said = c.node_timer(Some("gpu01"), &conf, &log)?;
        let aside = failed(c)?;
        ensure(
            said.contains("GPU 2 set aside from sharing: XID 94") && aside == vec![2],
            format!("the timer's first run after the reboot set {aside:?} aside: {said}"),
        )
    })();
    let bin = testcluster::cluster::build_dir()?.join("gpu-mps");
    let conf = conf.to_string_lossy();
    let _ = c.run_on(
        "gpu01",
        &bin.to_string_lossy(),
        &["resume-gpu", "2", "--conf", &conf],
    );
    let _ = fs::remove_file(state.join("nvml-facts"));
    let kept = c
        .node_dir("gpu01")
        .join("var-lib-gpushare")
        .join(gpushare::mps::kept::kept_dir(
            std::path::Path::new(""),
            &c.dir.join("run/gpu-mps"),
        ));
    let _ = fs::remove_file(kept.join("nvml-facts"));
    result.and(clean(c))
}
