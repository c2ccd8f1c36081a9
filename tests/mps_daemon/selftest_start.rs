//! `SelfTest=daemon-start`: the prolog that starts a GPU's daemon runs
//! the self-test's two clients there (against the stand-in driver
//! library, `tests/fake-libcuda`), once per daemon start and never per
//! share; where the limits do not hold, the share is refused and sent
//! elsewhere (Slurm's record: the job waits again, kept off the node) and
//! the GPU is set aside until `gpu-mps selftest` passes there.

use std::collections::BTreeSet;
use std::fs;

use testcluster::cluster::{wait_for, NODE};
use testcluster::standin::{CudaFault, CudaFiles};
use testcluster::time::{JOB_LONG, SHORT};
use testcluster::{ensure, Cluster, ClusterSpec, Suite, TestResult};

use super::{bin_dir, cancel_and_wait_stopped, gpu_mps, shares, standin, status_json, used_gpus};

/// This file's tests: on a cluster of their own, whose gpu_mps.conf
/// turns the test on and writes metrics.
pub fn tests(suite: Suite) -> Suite {
    let mut spec: ClusterSpec = super::spec();
    for (name, text) in &mut spec.extra_conf_files {
        if name == "gpu_mps.conf" {
            text.push_str("SelfTest=daemon-start\nMetricsFile={cluster}/run/gpushare.prom\n");
        }
    }
    suite.test_on(
        "selftest_runs_once_per_daemon_start_and_a_failed_gpu_refuses_shares_until_it_passes",
        spec,
        once_per_start_and_fail_closed,
    )
}

/// The metrics file's sample of `name{gpu="N"}`.
fn sample(c: &Cluster, name: &str, gpu: u32) -> Option<u64> {
    let text = fs::read_to_string(c.dir.join("run/gpushare.prom")).unwrap_or_default();
    let key = format!("{name}{{gpu=\"{gpu}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&key)?.trim().parse().ok())
}

fn once_per_start_and_fail_closed(c: &mut Cluster) -> TestResult {
    standin(c)?;
    let cuda = CudaFiles::at(&bin_dir(c));
    cuda.reset()?;
    // Five shares of a quarter: one on each of the 4 GPUs (4 daemon
    // starts), the fifth beside one of them (its daemon runs already).
    shares(c, 5, 25)?;
    let gpus = used_gpus(c);
    ensure(gpus.len() == 4, format!("5 shares on GPUs {gpus:?}"))?;
    let contexts = cuda.contexts();
    let tested: BTreeSet<u32> = contexts.iter().map(|x| x.gpu).collect();
    ensure(
        contexts.len() == 8 && tested == gpus,
        format!("two clients per daemon start (8), on every GPU, expected: {contexts:?}"),
    )?;
    // Each start: a client without MPS refused, a share's client served
    // through MPS, both as the unprivileged SelfTestUser (nobody).
    for gpu in &gpus {
        let on: Vec<_> = contexts.iter().filter(|x| x.gpu == *gpu).collect();
        let ok = on.iter().any(|x| !x.mps && x.result != 0)
            && on.iter().any(|x| x.mps && x.result == 0)
            && on.iter().all(|x| x.uid != 0);
        ensure(ok, format!("GPU {gpu}'s clients: {on:?}"))?;
    }
    let status = status_json(c)?;
    for m in &status.mps {
        ensure(
            m.selftest.as_ref().is_some_and(|t| t.passed) && m.failed.is_none(),
            format!("GPU {}: {:?} / set aside {:?}", m.gpu, m.selftest, m.failed),
        )?;
        ensure(
            sample(c, "gpushare_mps_selftest_ok", m.gpu) == Some(1),
            format!("gpushare_mps_selftest_ok of GPU {}", m.gpu),
        )?;
    }

    // A driver that drops the limits: the next daemon start fails the
    // test, its share is sent elsewhere and its GPU set aside.
    cancel_and_wait_stopped(c)?;
    cuda.clear_log()?;
    cuda.set_fault(CudaFault::IgnoreLimits, true)?;
    let id = c.sbatch_ok(&["--gres=mps:25", super::SCRIPT])?;
    c.wait_sent_off(id, NODE, JOB_LONG)?;
    let status = status_json(c)?;
    let failed: Vec<_> = status.mps.iter().filter(|m| m.failed.is_some()).collect();
    let [gpu] = failed.as_slice() else {
        return Err(format!("one GPU set aside expected: {:?}", status.mps));
    };
    let why = gpu.failed.clone().unwrap_or_default();
    ensure(
        why.starts_with("MPS self-test failed") && why.contains("SMs"),
        format!("the set-aside reason: {why}"),
    )?;
    ensure(
        gpu.selftest.as_ref().is_some_and(|t| !t.passed),
        format!("GPU {}'s last test: {:?}", gpu.gpu, gpu.selftest),
    )?;
    wait_for("the metric to say so", SHORT, || {
        (sample(c, "gpushare_mps_selftest_ok", gpu.gpu) == Some(0)).then_some(())
    })?;
    let job = c.job(id)?;
    ensure(
        job.restarts() >= 1 && job.get("ExcNodeList") == Some(NODE),
        format!("job {id}: {job:?}"),
    )?;
    let gpu = gpu.gpu;
    c.run_ok("scancel", &[&id.to_string()])?;
    cancel_and_wait_stopped(c)?;

    // Fixed: `gpu-mps selftest` passes there and gives the GPU back.
    cuda.set_fault(CudaFault::IgnoreLimits, false)?;
    let out = gpu_mps(c, &["selftest", "--gpu", &gpu.to_string()])?;
    let said = String::from_utf8_lossy(&out.stdout);
    ensure(
        out.status.code() == Some(0) && said.contains("shares again"),
        format!("gpu-mps selftest: {:?} {said}", out.status),
    )?;
    let status = status_json(c)?;
    ensure(
        status.mps.iter().all(|m| m.failed.is_none()),
        format!("every GPU shares again: {:?}", status.mps),
    )?;
    cuda.reset()
}
