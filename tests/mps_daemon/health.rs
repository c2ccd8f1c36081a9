//! `gpu-mps health --drain` as Slurm's own `HealthCheckProgram`: a GPU
//! set aside drains the node through slurmd's health check with gpushare's
//! reason, its return resumes it, and an admin's drain is never touched.
//! Asserted on slurmctld's record of the node (`scontrol show node`). A
//! module of `mps_daemon.rs`.

use super::*;

use std::os::unix::fs::PermissionsExt;

/// This file's tests, in order, after the suite's others.
pub fn tests(suite: Suite) -> Suite {
    suite.test_on(
        "a_set_aside_gpu_drains_the_node_through_slurms_health_check_until_it_is_back",
        health_spec(),
        drains_and_resumes,
    )
}

/// The suite's cluster with the health check every 2 s: a script that
/// counts its runs, then execs `gpu-mps health --drain` (slurmd gives the
/// program no environment but SLURMD_NODENAME, nor arguments).
fn health_spec() -> ClusterSpec {
    let mut s = spec();
    s.extra_slurm_conf.extend([
        "HealthCheckProgram={cluster}/etc/gpushare-health".to_owned(),
        "HealthCheckInterval=2".to_owned(),
    ]);
    s
}

fn runs(c: &Cluster) -> usize {
    fs::read_to_string(c.dir.join("health.runs"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// The node's `State=` and `Reason=` as slurmctld keeps them.
fn node_state(c: &Cluster) -> String {
    c.run_ok("scontrol", &["-o", "show", "node", NODE])
        .unwrap_or_default()
}

fn drains_and_resumes(c: &mut Cluster) -> TestResult {
    standin(c)?;
    let bin = testcluster::cluster::build_dir()?.join("gpu-mps");
    let script = c.slurm_conf().with_file_name("gpushare-health");
    let text = format!(
        "#!/bin/sh\necho run >>{runs}\nSLURM_CONF={conf}\nexport SLURM_CONF\n\
         exec {bin} --conf {mps} --node \"$SLURMD_NODENAME\" health --drain\n",
        runs = c.dir.join("health.runs").display(),
        conf = c.slurm_conf().display(),
        bin = bin.display(),
        mps = c.slurm_conf().with_file_name("gpu_mps.conf").display(),
    );
    fs::write(&script, text).map_err(|e| e.to_string())?;
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
    // Two runs after each change: the check has seen it (one may have
    // been under way as it was made).
    let two_more = |c: &Cluster, what: &str| {
        let from = runs(c);
        wait_for(what, NODE_STATE, || (runs(c) >= from + 2).then_some(()))
    };
    let result = (|| {
        two_more(c, "the health check to run")?;
        let state = node_state(c);
        ensure(
            !state.contains("DRAIN"),
            format!("a healthy node was drained: {state}"),
        )?;
        // An admin's drain: never resumed by gpushare.
        c.run_ok(
            "scontrol",
            &[
                "update",
                &format!("NodeName={NODE}"),
                "State=DRAIN",
                "Reason=fan",
            ],
        )?;
        two_more(c, "the health check to run on the admin's drain")?;
        let state = node_state(c);
        ensure(
            state.contains("DRAIN") && state.contains("Reason=fan"),
            format!("the admin's drain was not kept: {state}"),
        )?;
        c.run_ok(
            "scontrol",
            &["update", &format!("NodeName={NODE}"), "State=RESUME"],
        )?;
        // A GPU set aside: drained with gpushare's reason.
        gpu_mps(c, &["drain-gpu", "1", "--reason", "fell off the bus"])?;
        wait_for("the health check to drain the node", NODE_STATE, || {
            let state = node_state(c);
            (state.contains("DRAIN")
                && state.contains("Reason=gpushare: GPU 1 set aside (fell off the bus)"))
            .then_some(())
        })
        .map_err(|e| format!("{e}: {}", node_state(c)))?;
        gpu_mps(c, &["resume-gpu", "1"])?;
        wait_for("the health check to resume the node", NODE_STATE, || {
            (!node_state(c).contains("DRAIN")).then_some(())
        })
        .map_err(|e| format!("{e}: {}", node_state(c)))?;
        // What a health check prints: one line, its status.
        let out = gpu_mps(c, &["health"])?;
        ensure(
            out.status.success()
                && String::from_utf8_lossy(&out.stdout).trim() == "gpushare: healthy (4 GPU(s))",
            format!("gpu-mps health: {out:?}"),
        )
    })();
    let _ = gpu_mps(c, &["resume-gpu", "1"]);
    result.map_err(|e| format!("{e}\nslurmd's log:\n{}", c.log("slurmd")))
}
