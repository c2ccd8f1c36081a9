//! Upgrades of a node's packages, run by the package lanes only
//! (`tests/package_test.sh`, `tests/rpm_test.sh`), which install one build
//! in the release root and name what to upgrade to: gpushare's next build
//! under running shares, and Slurm's next micro release together with
//! gpushare's packages built for it, as the install page gives it.

use testcluster::cluster::NODE;

use super::*;

/// The installed version of a Debian package.
fn package_version(c: &Cluster, package: &str) -> Result<String, String> {
    c.run_ok("dpkg-query", &["-W", "-f=${Version}", package])
        .map(|v| v.trim().to_owned())
}

/// A node upgraded while shares run, as `apt upgrade` does it: the packages
/// replaced under running jobs (run by `tests/package_test.sh`, which
/// installs one build in the root, names a newer one in
/// `GPUSHARE_UPGRADE_DEBS`, and points the harness at the installed
/// programs). The shares the old prolog placed keep their GPUs and are
/// released by the new epilog; the new prolog places the next shares from
/// the same ledger; no node is drained.
pub(super) fn upgraded_under_running_shares(c: &mut Cluster) -> TestResult {
    let dir = std::env::var("GPUSHARE_UPGRADE_DEBS")
        .map_err(|_| "GPUSHARE_UPGRADE_DEBS is not set: tests/package_test.sh runs this test")?;
    let mut debs: Vec<String> = fs::read_dir(&dir)
        .map_err(|e| format!("{dir}: {e}"))?
        .filter_map(|e| e.ok())
        .map(|e| e.path().to_string_lossy().into_owned())
        .filter(|p| p.ends_with(".deb"))
        .collect();
    debs.sort();
    ensure(!debs.is_empty(), format!("no .deb in {dir}"))?;
    c.cancel_all()?;
    wait_for("the epilogs", SHORT, || no_share_left(c))?;
    let old = package_version(c, "gpushare-node")?;
    let ids = start_shares(c, 2, 50)?;
    let gpus = gpus_of(c, &ids)?;

    let mut args = vec!["-i"];
    args.extend(debs.iter().map(String::as_str));
    c.run_ok("dpkg", &args)?;
    let new = package_version(c, "gpushare-node")?;
    ensure(
        new != old,
        format!("gpushare-node is still {old} after dpkg -i"),
    )?;
    for (&id, &gpu) in ids.iter().zip(&gpus) {
        ensure(
            c.job(id)?.state() == "RUNNING",
            format!("job {id} did not run on through the upgrade"),
        )?;
        ensure(
            ledger(c).share(id).map(|s| s.gpu) == Some(gpu),
            format!("the ledger lost job {id} on GPU {gpu}:\n{}", state_text(c)),
        )?;
    }
    c.cancel_all()?;
    wait_for(
        "the new epilog to release the old prolog's shares",
        SHORT,
        || no_share_left(c),
    )?;
    let ids = start_shares(c, 4, 25)?;
    gpus_of(c, &ids)?;
    ensure(
        ledger(c).shares().count() == 4,
        format!("the new prolog's shares:\n{}", state_text(c)),
    )?;
    let states = c.node_states()?;
    ensure(
        !states.values().any(|s| s.contains("drain")),
        format!("a node drained: {states:?}"),
    )?;
    c.cancel_all()?;
    wait_for("the epilogs", SHORT, || no_share_left(c))?;
    eprintln!("    gpushare-node {old} -> {new} under 2 running shares");
    Ok(())
}

/// What the running daemons say they are: slurmctld's version (`scontrol
/// show config`, from slurmctld) and the node's slurmd's (`scontrol show
/// node`, from its registration).
fn running_versions(c: &Cluster) -> Result<(String, String), String> {
    let config = c.run_ok("scontrol", &["show", "config"])?;
    let ctld = config
        .lines()
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim() == "SLURM_VERSION")
        .map(|(_, v)| v.trim().to_owned())
        .ok_or_else(|| format!("scontrol show config names no SLURM_VERSION:\n{config}"))?;
    let node = c.run_ok("scontrol", &["-o", "show", "node", NODE])?;
    let slurmd = node
        .split_whitespace()
        .find_map(|w| w.strip_prefix("Version="))
        .map(str::to_owned)
        .ok_or_else(|| format!("scontrol show node {NODE} names no Version:\n{node}"))?;
    Ok((ctld, slurmd))
}

/// A Slurm micro upgrade as the install page gives it: Slurm's packages
/// of the next micro release and both of gpushare's built for it, in one
/// transaction (`GPUSHARE_UPGRADE_SLURM`, the command line the lane runs
/// in the root: `rpm -U` of them all, or `apt-get install` of them all),
/// taken while a share runs; then the daemons restarted in Slurm's order,
/// slurmdbd, slurmctld, slurmd. Every daemon answers as the new release
/// and gpushare's plugins say they were built for it; the share kept its
/// GPU through the upgrade and the new epilog releases it; a new share,
/// placed by the new prolog, runs with its GPU and is in sacct.
pub(super) fn slurm_upgraded_with_gpushare(c: &mut Cluster) -> TestResult {
    let command = std::env::var("GPUSHARE_UPGRADE_SLURM").map_err(|_| {
        "GPUSHARE_UPGRADE_SLURM is not set: tests/rpm_test.sh and tests/package_test.sh run this test"
    })?;
    c.cancel_all()?;
    wait_for("the epilogs", SHORT, || no_share_left(c))?;
    let (old, old_slurmd) = running_versions(c)?;
    let ids = start_shares(c, 1, 50)?;
    let gpus = gpus_of(c, &ids)?;

    let said = c.run_ok("sh", &["-c", &command])?;
    eprintln!("    {command}\n{said}");
    // The client commands are the new release's now; the daemons still run
    // the old one.
    let new = c
        .run_ok("scontrol", &["version"])?
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .to_owned();
    ensure(
        new != old && !new.is_empty(),
        format!("scontrol version says {new:?} after the upgrade, slurmctld ran {old}"),
    )?;
    c.stop_slurmdbd();
    c.start_slurmdbd_again()?;
    c.restart_slurmctld()?;
    c.restart_slurmd_cleanly(NODE)?;

    let (ctld, slurmd) = running_versions(c)?;
    ensure(
        ctld == new && slurmd == new,
        format!("after the restarts slurmctld is {ctld}, slurmd {slurmd}; expected {new}"),
    )?;
    for daemon in ["slurmdbd", "slurmctld", "slurmd"] {
        let started = format!("{daemon} version {new} started");
        ensure(
            c.log(daemon).contains(&started),
            format!("{daemon}.log lacks {started:?}"),
        )?;
    }
    for (daemon, plugin) in [("slurmctld", "job_submit/gpu_qos"), ("slurmd", "gpu_mps")] {
        let loaded = format!(
            "{plugin}: loaded (gpushare {}, built for Slurm {new})",
            env!("CARGO_PKG_VERSION")
        );
        ensure(
            c.log(daemon).contains(&loaded),
            format!("{daemon}.log lacks {loaded:?}"),
        )?;
    }
    let states = c.node_states()?;
    ensure(
        states.values().all(|s| s == "mixed" || s == "allocated"),
        format!("the node is not up with its share: {states:?}"),
    )?;
    // The share placed before the upgrade ran through it on its GPU; the
    // new epilog releases it.
    for (&id, &gpu) in ids.iter().zip(&gpus) {
        ensure(
            c.job(id)?.state() == "RUNNING" && ledger(c).share(id).map(|s| s.gpu) == Some(gpu),
            format!(
                "job {id} on GPU {gpu} did not run on through the upgrade: {}\n{}",
                c.job(id)?.state(),
                state_text(c)
            ),
        )?;
    }
    c.cancel_all()?;
    wait_for("the new epilog to release the share", SHORT, || {
        no_share_left(c)
    })?;

    // A share of the new release's cluster, placed by the new prolog.
    let ids = start_shares_running(
        c,
        1,
        25,
        "--wrap=echo GPU=$GPUSHARE_GPU UNITS=$GPUSHARE_MPS_UNITS PCT=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; sleep 20",
    )?;
    let id = ids[0];
    let job = c.job(id)?;
    let seen = printed(c, id);
    ensure(
        job.state() == "RUNNING"
            && job.get("TresPerNode").is_some_and(|t| t.contains("mps:25"))
            && seen.get("UNITS").map(String::as_str) == Some("25")
            && seen.get("PCT").is_some_and(|p| !p.is_empty())
            && ledger(c).share(id).is_some(),
        format!(
            "the new share {id}: {} {:?}, printed {seen:?}\n{}",
            job.state(),
            job.get("TresPerNode"),
            state_text(c)
        ),
    )?;
    let done = c.wait_job_done(id, JOB_END)?;
    ensure(
        done.state() == "COMPLETED",
        format!("the new share {id} ended {}", done.state()),
    )?;
    let id_text = id.to_string();
    wait_for("sacct to record the new share", SHORT, || {
        c.run_ok(
            "sacct",
            &["-n", "-P", "-X", "-j", &id_text, "-o", "JobID,State"],
        )
        .ok()
        .filter(|out| out.trim() == format!("{id}|COMPLETED"))
    })?;
    eprintln!(
        "    Slurm {old} (slurmd {old_slurmd}) -> {new} with gpushare's packages in one transaction; \
         share {id} on GPU {} after it",
        seen.get("GPU").map_or("?", String::as_str)
    );
    Ok(())
}
