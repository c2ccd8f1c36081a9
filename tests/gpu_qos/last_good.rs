//! A gpu_qos.conf that is bad when slurmctld starts: the last good copy
//! slurmctld kept in StateSaveLocation is in force, not the policy
//! without the file.

use super::*;
use gpushare::qos::config::last_good::COPY_NAME;

/// A good file in force (its copy kept in StateSaveLocation); slurmctld
/// stopped, the file given a bad line, or removed, and slurmctld started
/// again: a user's `--gres=gpu:h100:8` under qos_lafferty is refused as
/// the good file says (a40 only), a40 is accepted, the log names the bad
/// `file:line` and the copy, the metrics say the file is bad but the
/// policy is not the one without it. A good file then ends it.
pub(super) fn at_start(c: &mut Cluster) -> TestResult {
    let result = judge_last_good_copy(c);
    // Whatever happened, the suite's file and a running slurmctld.
    install_conf(c, EXAMPLE_GPU_QOS_CONF)?;
    if c.run("scontrol", &["ping"]).map_or(true, |o| {
        !String::from_utf8_lossy(&o.stdout).contains("is UP")
    }) {
        c.restart_slurmctld()?;
    }
    result
}

/// StateSaveLocation of the cluster's slurm.conf.
fn state_save_location(c: &Cluster) -> Result<std::path::PathBuf, String> {
    let conf = fs::read_to_string(c.slurm_conf()).map_err(|e| e.to_string())?;
    conf.lines()
        .find_map(|l| l.trim().strip_prefix("StateSaveLocation="))
        .map(|d| std::path::PathBuf::from(d.trim()))
        .ok_or_else(|| "no StateSaveLocation in slurm.conf".to_owned())
}

/// The copy of the last good gpu_qos.conf slurmctld keeps.
pub(super) fn copy_path(c: &Cluster) -> Result<std::path::PathBuf, String> {
    Ok(state_save_location(c)?.join(COPY_NAME))
}

/// The copy of `text`, once in force, is written by slurmctld's
/// SlurmUser `uid` (its state directory), mode 0600.
pub(super) fn kept_by(c: &Cluster, uid: u32, text: &str) -> TestResult {
    let copy = copy_path(c)?;
    wait_for("the copy of the file in force", SHORT, || {
        fs::read_to_string(&copy).ok().filter(|t| t == text)
    })?;
    owned_by(&copy, 0o600, uid)
}

/// `path` has mode `mode` and owner `uid` (written by slurmctld's
/// SlurmUser, whatever its umask).
pub(super) fn owned_by(path: &std::path::Path, mode: u32, uid: u32) -> TestResult {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (has, owner) = (meta.mode() & 0o777, meta.uid());
    ensure(
        has == mode && owner == uid,
        format!(
            "{} has mode {has:o} and owner {owner}, expected {mode:o} and {uid}",
            path.display()
        ),
    )
}

fn judge_last_good_copy(c: &mut Cluster) -> TestResult {
    let user = TestUser::create(c, "gpushare_lastgood")?;
    user.allow_qos_by_default(c, &["normal", "qos_lafferty"], "normal")?;
    let dir = c.dir.join("metrics-last-good");
    fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let metrics = dir.join("gpushare_job_submit.prom");
    let good = format!("{EXAMPLE_GPU_QOS_CONF}MetricsFile={}\n", metrics.display());
    install_and_wait(c, &good)?;
    let copy = copy_path(c)?;
    wait_for("slurmctld to keep a copy of the good file", SHORT, || {
        fs::read_to_string(&copy).ok().filter(|t| *t == good)
    })?;
    let typed = [
        "-H",
        "--wrap=true",
        "--qos=qos_lafferty",
        "--gres=gpu:a40:1",
    ];
    let id = user.sbatch(c, &typed)?;
    c.run_ok("scancel", &[&id.to_string()])?;

    let bad = format!("{good}GPULimit=four\n");
    let bad_line = format!("{}:{}:", conf_path(c).display(), bad.lines().count());
    let missing = format!("{}: ", conf_path(c).display());
    for (how, text, named) in [
        ("a bad line", Some(&bad), &bad_line),
        ("no file", None, &missing),
    ] {
        let said = "RUNNING ON THE LAST GOOD COPY";
        let before = c.log("slurmctld").matches(said).count();
        let _ = fs::remove_file(&metrics);
        c.restart_slurmctld_after(|c| match text {
            Some(text) => install_conf(c, text),
            None => fs::remove_file(conf_path(c)).map_err(|e| e.to_string()),
        })?;
        let log = c.log("slurmctld");
        let copy_named = copy.display().to_string();
        ensure(
            log.matches(said).count() > before
                && log.lines().any(|l| {
                    l.contains("error:")
                        && l.contains(said)
                        && l.contains(named.as_str())
                        && l.contains(&copy_named)
                }),
            format!("{how}: no error naming {named} and the copy {copy_named} in:\n{log}"),
        )?;
        let out = user.run(
            c,
            None,
            "sbatch",
            &[
                "-H",
                "--wrap=true",
                "--qos=qos_lafferty",
                "--gres=gpu:h100:8",
            ],
        )?;
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        ensure(
            !out.status.success(),
            format!("{how}: h100:8 under qos_lafferty accepted: {err}"),
        )?;
        contains_all(&err, &["qos_lafferty", "h100", "a40"])?;
        let id = user.sbatch(c, &typed)?;
        c.run_ok("scancel", &[&id.to_string()])?;
        // The copy's MetricsFile=: the file bad, the rules in force.
        wait_for("the metrics to say the file is bad", SHORT, || {
            fs::read_to_string(&metrics).ok().filter(|t| {
                t.lines().any(|l| l == "gpushare_policy_config_ok 0")
                    && t.lines().any(|l| l == "gpushare_policy_without_file 0")
            })
        })?;
        // The copy stays the good file's.
        let kept = fs::read_to_string(&copy).map_err(|e| e.to_string())?;
        ensure(kept == good, format!("{how}: the copy changed:\n{kept}"))?;
    }
    // A good file ends the copy's time.
    install_and_wait(c, EXAMPLE_GPU_QOS_CONF)?;
    ensure(
        c.log("slurmctld").contains("no longer the last good copy"),
        "the reload did not say the copy is no longer in force",
    )
}
