//! `DaemonLinger=`: a GPU's daemon (and the server that holds the GPU)
//! kept after its last share, so that the next share there starts without
//! starting them; stopped by the node timer once its time is up, and at
//! once by the prolog of a job Slurm gives the GPU whole. A module of
//! `mps_daemon.rs`, on a cluster of its own (`DaemonLinger=3`).

use std::time::{Duration, Instant};

use testcluster::time::{JOB_END, JOB_LONG};

use super::*;

/// The kept daemon's time in this file's cluster.
const LINGER_SECS: u64 = 3;

/// This file's tests, in order, after the suite's others.
pub fn tests(suite: Suite) -> Suite {
    let mut spec = spec();
    for (name, text) in &mut spec.extra_conf_files {
        if name == "gpu_mps.conf" {
            text.push_str(&format!("DaemonLinger={LINGER_SECS}\n"));
        }
    }
    suite.test_on(
        "a_daemon_kept_after_its_last_share_serves_the_next_and_goes_when_due_or_for_a_whole_job",
        spec,
        kept_daemon,
    )
}

/// One share of `units`, run until it is cancelled and its epilog done;
/// its GPU, and how many times its start called the control program.
fn one_share(c: &Cluster, units: u32) -> Result<(u32, usize), String> {
    let before = process_starts(c);
    let id = shares(c, 1, units)?[0];
    let calls = process_starts(c) - before;
    let gpu = ledger(c)
        .share(id)
        .map(|s| s.gpu)
        .ok_or_else(|| format!("job {id} has no share"))?;
    c.run_ok("scancel", &[&id.to_string()])?;
    c.wait_job_done(id, JOB_END)?;
    wait_for("the share's release", SHORT, || {
        ledger(c).share(id).is_none().then_some(())
    })?;
    Ok((gpu, calls))
}

fn kept_daemon(c: &mut Cluster) -> TestResult {
    standin(c)?;
    // A share that takes its GPU whole: the next lands on the same GPU.
    let (gpu, _) = one_share(c, 100)?;
    let kept = daemons(c, gpu);
    ensure(
        kept.len() == 1 && !gpus_with(c, "cmd=quit").contains(&gpu),
        format!(
            "GPU {gpu}'s daemon after its last share: {kept:?}, calls {:?}",
            calls(c)
        ),
    )?;
    // The next share finds it: no daemon start, no call at all to start.
    let (again, started_with) = one_share(c, 100)?;
    ensure(
        again == gpu && daemons(c, gpu) == kept && started_with == 0,
        format!(
            "the next share (GPU {again}) beside the kept daemon {kept:?} of GPU {gpu}: \
             daemons now {:?}, {started_with} control calls to start it: {:?}",
            daemons(c, gpu),
            calls(c)
        ),
    )?;
    // The node timer keeps it until its time is up, then stops it.
    let ended = Instant::now();
    gpu_mps(c, &["metrics", "--write"])?;
    ensure(
        ended.elapsed() >= Duration::from_secs(LINGER_SECS) || daemons(c, gpu) == kept,
        format!(
            "the timer stopped GPU {gpu}'s daemon before its time: {:?}",
            calls(c)
        ),
    )?;
    std::thread::sleep(Duration::from_secs(LINGER_SECS + 1).saturating_sub(ended.elapsed()));
    gpu_mps(c, &["metrics", "--write"])?;
    ensure(
        daemons(c, gpu).is_empty() && gpus_with(c, "cmd=quit").contains(&gpu),
        format!(
            "the timer left GPU {gpu}'s daemon past its time: {:?}",
            calls(c)
        ),
    )?;
    // A kept daemon and a job given every GPU whole: its prolog stops the
    // daemon before its tasks start.
    let (gpu, _) = one_share(c, 100)?;
    ensure(
        daemons(c, gpu).len() == 1,
        format!("no kept daemon on GPU {gpu}"),
    )?;
    let whole = c.sbatch_ok(&["--gres=gpu:4", SCRIPT])?;
    c.wait_job_state(whole, &["RUNNING"], JOB_LONG)?;
    wait_for("the whole job's output", JOB_START, || {
        c.job_output(whole).contains("GPU=").then_some(())
    })?;
    ensure(
        daemons(c, gpu).is_empty(),
        format!(
            "GPU {gpu}'s kept daemon while a job holds it whole: {:?}, calls {:?}",
            daemons(c, gpu),
            calls(c)
        ),
    )?;
    cancel_and_wait_stopped(c)
}
