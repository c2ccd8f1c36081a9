//! A missing or invalid gpu_qos.conf when slurmctld starts, where no
//! last good copy was ever kept: slurmctld runs on with the policy
//! without its file, and takes a good file.

use super::*;

/// A missing or invalid gpu_qos.conf at start leaves slurmctld running
/// with the policy without its file: untyped requests under a typed
/// limit of the database refused, nothing else of the file's rules; said
/// at error level, in the metrics and by `gpu-qos check`; a good file
/// put in place later is taken.
pub(super) fn bad_config_at_init(c: &mut Cluster) -> TestResult {
    let dir = c.dir.join("metrics-noconf");
    fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let metrics = dir.join("gpushare_job_submit.prom");
    let result = judge_bad_config_at_init(c, &metrics);
    // Whatever happened, the suite's file and a running slurmctld.
    install_conf(c, EXAMPLE_GPU_QOS_CONF)?;
    if c.run("scontrol", &["ping"]).map_or(true, |o| {
        !String::from_utf8_lossy(&o.stdout).contains("is UP")
    }) {
        c.restart_slurmctld()?;
    }
    result
}

fn judge_bad_config_at_init(c: &mut Cluster, metrics: &std::path::Path) -> TestResult {
    let without = "RUNNING WITHOUT ITS POLICY FILE";
    let count = |c: &Cluster| c.log("slurmctld").matches(without).count();
    let bad = format!(
        "QOS=qos_lafferty GPUTypes=a40\nQOS=qos_saxena GPULimit=20 GPUTypes=a100 Bogus=1\n\
         MetricsFile={}\n",
        metrics.display()
    );
    install_conf(c, &bad)?;
    let before = count(c);
    // A cluster that never had a good file: no last good copy kept.
    let copy = super::last_good::copy_path(c)?;
    c.restart_slurmctld_after(|_| remove_if_there(&copy))?;
    let log = c.log("slurmctld");
    let line = format!("{}:2:", conf_path(c).display());
    ensure(
        count(c) > before
            && log.lines().any(|l| {
                l.contains("error:") && l.contains(&line) && l.contains("none was ever made")
            }),
        format!("no error naming {line} and the policy without the file in:\n{log}"),
    )?;
    judge_without_file(c, metrics)?;
    // `gpu-qos check` says what is wrong and what the plugin does.
    let bin = testcluster::cluster::build_dir()?.join("gpu-qos");
    let out = c.run(
        &bin.to_string_lossy(),
        &["check", "--conf", &conf_path(c).to_string_lossy()],
    )?;
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    ensure(
        out.status.code() == Some(2),
        format!("check exited {:?}", out.status),
    )?;
    contains_all(&said, &["Bogus", "running without its file"])?;
    // An edit still bad: said again at error level.
    let before = count(c);
    install_conf(c, &format!("{bad}# still bad\n"))?;
    wait_for("the bad edit to be logged", SHORT, || {
        (count(c) > before).then_some(())
    })?;
    // A good file appears: taken.
    install_and_wait(
        c,
        &format!("{EXAMPLE_GPU_QOS_CONF}MetricsFile={}\n", metrics.display()),
    )?;
    rejected(c, &["--qos=qos_lafferty", "--gres=gpu:h100:1"])?;
    wait_for("the metrics file to say the file is read", SHORT, || {
        fs::read_to_string(metrics).ok().filter(|t| {
            t.lines().any(|l| l == "gpushare_policy_config_ok 1")
                && t.lines().any(|l| l == "gpushare_policy_without_file 0")
        })
    })?;

    // No file at all, nor a copy: the same policy, then the file taken
    // when it comes.
    let before = count(c);
    c.restart_slurmctld_after(|c| {
        fs::remove_file(conf_path(c)).map_err(|e| e.to_string())?;
        remove_if_there(&copy)
    })?;
    ensure(count(c) > before, "no error for the missing file")?;
    let err = rejected(c, &["--qos=qos_lafferty", "--gres=gpu:2"])?;
    contains_all(&err, &["a40"])?;
    accepted(c, &["--qos=qos_lafferty", "--gres=gpu:h100:1"])?;
    install_and_wait(c, EXAMPLE_GPU_QOS_CONF)?;
    rejected(c, &["--qos=qos_lafferty", "--gres=gpu:h100:1"]).map(drop)
}

/// What the policy without its file judges on the example site: the
/// untyped request under qos_lafferty's typed GrpTRES refused, naming
/// the type; a type the file's rule would refuse accepted; the metrics
/// say so.
fn judge_without_file(c: &Cluster, metrics: &std::path::Path) -> TestResult {
    let err = rejected(c, &["--qos=qos_lafferty", "--gres=gpu:2"])?;
    contains_all(&err, &["qos_lafferty", "a40"])?;
    let id = accepted(c, &["--qos=qos_lafferty", "--gres=gpu:h100:1"])?;
    c.run_ok("scancel", &[&id.to_string()])?;
    wait_for(
        "the metrics file to say the file is not read",
        SHORT,
        || {
            fs::read_to_string(metrics).ok().filter(|t| {
                t.lines().any(|l| l == "gpushare_policy_config_ok 0")
                    && t.lines().any(|l| l == "gpushare_policy_without_file 1")
            })
        },
    )
    .map(drop)
}

/// Removes `path`, there or not.
fn remove_if_there(path: &std::path::Path) -> TestResult {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("{}: {e}", path.display()))
        }
        _ => Ok(()),
    }
}
