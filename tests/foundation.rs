//! The ground everything stands on, proven against a real Slurm: our
//! job_submit plugin is loaded by slurmctld, jobs run, a group QOS preempts
//! `lowprio` with requeue, and a plugin built for another Slurm is refused
//! loudly.

use std::fs;
use std::process::{Command, ExitCode};

use testcluster::time::{JOB_END, JOB_START};
use testcluster::{elf, ensure, Cluster, ClusterSpec, Suite, TestResult};

fn main() -> ExitCode {
    let spec = ClusterSpec {
        job_submit_plugins: vec!["gpu_qos".into()],
        ..ClusterSpec::seed()
    };
    Suite::new(spec)
        // Each test starts with no job left by the one before.
        .reset(|c| c.cancel_all())
        .test("job_submit_plugin_is_loaded_by_slurmctld", plugin_loaded)
        .smoke()
        .test("batch_job_runs_through_the_plugin", batch_job_runs)
        .smoke()
        .test("srun_step_runs", srun_runs)
        .smoke()
        .test("group_qos_preempts_lowprio_with_requeue", preemption)
        .smoke()
        .test("wrong_plugin_version_stops_slurmctld_loudly", wrong_version)
        .smoke()
        .run()
}

fn plugin_loaded(c: &mut Cluster) -> TestResult {
    let want = format!(
        "job_submit/gpu_qos: loaded (gpushare {}, built for Slurm ",
        env!("CARGO_PKG_VERSION")
    );
    let log = c.log("slurmctld");
    ensure(log.contains(&want), format!("slurmctld.log lacks {want:?}"))?;
    // The version it says it was built for is the one slurmctld runs
    // (a pre-release's, `26.11.0-0rc1`, by its number: installed headers
    // carry no release suffix).
    let ctld = String::from_utf8_lossy(
        &Command::new("slurmctld")
            .arg("-V")
            .output()
            .map_err(|e| e.to_string())?
            .stdout,
    )
    .split_whitespace()
    .last()
    .unwrap_or_default()
    .split('-')
    .next()
    .unwrap_or_default()
    .to_owned();
    ensure(
        log.contains(&format!("built for Slurm {ctld})")),
        format!("plugin does not report Slurm {ctld}"),
    )
}

fn batch_job_runs(c: &mut Cluster) -> TestResult {
    let id = c.sbatch_ok(&[
        "--qos=qos_lafferty",
        "--gres=gpu:a40:1",
        "--wrap=echo hello from $SLURM_JOB_ID",
    ])?;
    let info = c.wait_job_done(id, JOB_END)?;
    ensure(
        info.state() == "COMPLETED",
        format!("job {id} ended {}", info.state()),
    )?;
    ensure(
        c.job_output(id).contains(&format!("hello from {id}")),
        format!("job {id} output: {:?}", c.job_output(id)),
    )?;
    // The plugin judged it (and judges the next one, which it refuses).
    let refused = c.sbatch(&["--qos=qos_lafferty", "--gres=gpu:1", "--wrap=true"]);
    ensure(
        refused
            .as_ref()
            .is_err_and(|e| e.contains("--gres=gpu:a40:1")),
        format!("an untyped request under qos_lafferty was not refused by the plugin: {refused:?}"),
    )
}

fn srun_runs(c: &mut Cluster) -> TestResult {
    let out = c.srun(&["-n2", "--label", "sh", "-c", "echo task $SLURM_PROCID"])?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure(
        out.status.success() && text.contains("0: task 0") && text.contains("1: task 1"),
        format!(
            "srun: {} {text} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The seed scenario: lowprio fills the four a40s, a qos_lafferty job takes
/// one of them back, and the preempted job is requeued, not lost.
fn preemption(c: &mut Cluster) -> TestResult {
    let low: Vec<u32> = (0..4)
        .map(|_| {
            c.sbatch_ok(&[
                "--qos=lowprio",
                "--requeue",
                "--gres=gpu:a40:1",
                "--wrap=sleep 300",
            ])
        })
        .collect::<Result<_, _>>()?;
    for &id in &low {
        c.wait_job_state(id, &["RUNNING"], JOB_START)?;
    }
    let high = c.sbatch_ok(&["--qos=qos_lafferty", "--gres=gpu:a40:1", "--wrap=sleep 300"])?;
    c.wait_job_state(high, &["RUNNING"], JOB_START)?;
    let requeued: Vec<u32> = low
        .iter()
        .copied()
        .filter(|&id| {
            c.job(id)
                .is_ok_and(|j| j.restarts() >= 1 && j.state() != "RUNNING")
        })
        .collect();
    ensure(
        requeued.len() == 1,
        format!("expected exactly one lowprio job requeued, got {requeued:?}"),
    )?;
    let job = c.job(requeued[0])?;
    ensure(
        job.get("QOS") == Some("lowprio"),
        format!("requeued job has QOS {:?}", job.get("QOS")),
    )?;
    c.cancel_all()
}

/// slurmctld checks `plugin_version` against its own release; a plugin built
/// for another micro release must stop it with a clear log line, never load.
fn wrong_version(c: &mut Cluster) -> TestResult {
    let probe = c.dir.join("badversion");
    let plugins = probe.join("plugins");
    fs::create_dir_all(&plugins).map_err(|e| e.to_string())?;
    let mut image =
        fs::read(c.plugin_dir.join("job_submit_gpu_qos.so")).map_err(|e| e.to_string())?;
    let built = elf::patch_u32(&mut image, "plugin_version", 0)?;
    let wrong = built + 1; // next micro release
    elf::patch_u32(&mut image, "plugin_version", wrong)?;
    fs::write(plugins.join("job_submit_gpu_qos.so"), &image).map_err(|e| e.to_string())?;

    let (status, log) = c.probe_slurmctld("badversion", Some(&plugins), |_| Ok(()))?;
    ensure(
        !status.success(),
        format!("slurmctld with a wrong-version plugin exited {status}"),
    )?;
    let wanted = format!(
        "Incompatible Slurm plugin {}/job_submit_gpu_qos.so version ({}.{:02}.{})",
        plugins.display(),
        wrong >> 16,
        (wrong >> 8) & 0xff,
        wrong & 0xff
    );
    ensure(
        log.contains(&wanted),
        format!("probe log lacks {wanted:?}:\n{log}"),
    )?;
    ensure(
        log.contains("fatal"),
        format!("probe slurmctld did not stop with a fatal error:\n{log}"),
    )
}
