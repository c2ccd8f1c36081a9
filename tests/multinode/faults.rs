//! Node faults: a slurmd that dies or restarts, a node cut off its
//! network, a node that crashes and reboots; shares must come back
//! placed, ledgers right, nothing left behind. A module of
//! `multinode.rs` (its helpers), in a file of its own.

use super::*;

/// The bug seen on a three-node cluster: gpu01's slurmd dies with shares
/// running and stays away long enough for slurmctld to end those jobs;
/// no epilog runs, so their records stay in gpu01's ledger. Slurm then
/// starts eight shares there at once: the first prologs fill what the
/// ghosts left, the others find no room and reconcile; every one of them
/// must be placed.
pub(crate) fn ghosts_after_outage(c: &mut Cluster) -> TestResult {
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

pub(crate) fn rebooted_node(c: &mut Cluster) -> TestResult {
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

pub(crate) fn daemon_restarts(c: &mut Cluster) -> TestResult {
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

/// gpu02 drops off the network with shares running, past SlurmdTimeout:
/// slurmctld marks it DOWN and requeues the jobs, while their processes keep
/// running on the cut-off node. Plugged back, slurmd re-registers, the stale
/// instances are killed (their epilogs release the records) and the
/// requeued jobs start again there. Each then runs on the GPU its prolog
/// chose, or, where Slurm started it without running the Prolog (seen on
/// 22.05 for a requeued job on the same node), is refused with that reason
/// and requeued by gpushare: no share ever runs unplaced, nothing
/// over-fills, nothing is left behind.
pub(crate) fn cable_cut(c: &mut Cluster) -> TestResult {
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
    //
    // Slurm may also start a requeued job on gpu02 again before the stale
    // instance the node reported is gone (the cut outlasted the requeued
    // jobs' wait of cred_expire, so they may start the moment the node
    // answers): slurmd answers that the job id is there already,
    // slurmctld drains the node (`Duplicate jobid`) and requeues that job
    // held (`launch_failed_requeued_held`). Both then wait for an admin:
    // the admin's resume of the node and release of such a job are done
    // here, once each, and only after that drain. Any other drain or hold
    // is left for the test to fail on.
    let mut duplicate = false;
    let mut running = Vec::new();
    for &id in &ids {
        let mut released = false;
        let mut last = String::new();
        let ended = wait_for(
            &format!("job {id} to run again placed, or end"),
            JOB_LONG,
            || {
                let drained = c.drained_nodes().unwrap_or_default();
                let gpu02 = drained.iter().find(|(n, _)| n == "gpu02");
                if !duplicate && gpu02.is_some_and(|(_, r)| r.contains("Duplicate jobid")) {
                    println!(
                        "note: Slurm drained gpu02 (Duplicate jobid): resumed, as an admin would"
                    );
                    duplicate = c
                        .run_ok("scontrol", &["update", "nodename=gpu02", "state=resume"])
                        .is_ok();
                }
                let j = c.job(id).ok()?;
                last = format!(
                    "{} {} restarts {}; gpu02 drained: {:?}",
                    j.state(),
                    j.get("Reason").unwrap_or_default(),
                    j.restarts(),
                    gpu02.map(|(_, r)| r.as_str())
                );
                if duplicate
                    && !released
                    && j.get("Reason") == Some("launch_failed_requeued_held")
                {
                    println!(
                        "note: Slurm held job {id} after its launch met the stale instance: released, as an admin would"
                    );
                    released = c.run_ok("scontrol", &["release", &id.to_string()]).is_ok();
                }
                let out = c.job_output(id);
                if j.restarts() >= 1 && j.state() == "RUNNING" && out.matches("GPU=").count() >= 2 {
                    return Some(None);
                }
                j.is_done().then(|| Some(j.state().to_owned()))
            },
        )
        .map_err(|e| format!("{e}: the job is {last}"))?;
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

/// gpu01's node timer has read its kernel log (its cursor kept); the node
/// reboots (its `/run`, gpushare's state directory with it, emptied; a new
/// boot id) and the driver logs an ECC XID of its GPU 2 while it comes up.
/// The timer's first run after the boot reads the new boot's log from its
/// start and sets GPU 2 aside, named by NVML's figures kept from the boot
/// before (no share has started since; the harness has no NVML: the
/// figures a prolog keeps are written here).
pub(crate) fn xid_logged_while_booting(c: &mut Cluster) -> TestResult {
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
