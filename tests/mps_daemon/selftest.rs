//! `gpu-mps selftest` on the suite's node, against the stand-in driver
//! library (`tests/fake-libcuda`, `CudaLibrary=` of the harness's
//! gpu_mps.conf) and the stand-in control program: what the command
//! reports is held against what the stand-in driver saw (its `cuda.log`:
//! each context, its user, whether it went through MPS), and the GPU is
//! left as it was found: its daemon stopped, its compute mode `Default`
//! (the stand-in `nvidia-smi`'s file).

use std::fs;
use std::time::{Duration, Instant};

use serde_json::Value;
use testcluster::standin::{CudaContext, CudaFault, CudaFiles};
use testcluster::{ensure, Cluster, Suite, TestResult};

use testcluster::cluster::{slurm_places_shares, wait_for};
use testcluster::time::SHORT;

use super::{
    bin_dir, calls, cancel_and_wait_stopped, daemons, gpu_mps, shares, standin, status_json,
    used_gpus, SCRIPT,
};

/// This file's tests, in order, after the suite's others.
pub fn tests(suite: Suite) -> Suite {
    suite
        .test(
            "gpu_mps_selftest_passes_on_an_idle_gpu_as_the_driver_saw_it",
            passes_on_idle_gpu,
        )
        .test(
            "gpu_mps_selftest_fails_where_the_driver_drops_the_limits_until_a_test_passes",
            fails_without_limits,
        )
        .test(
            "gpu_mps_selftest_with_a_hung_driver_ends_within_its_bound",
            hung_driver,
        )
        .test(
            "a_share_during_gpu_mps_selftest_goes_elsewhere_or_is_refused_at_once",
            share_during_test,
        )
}

/// Each client's deadline in the hung driver's test (`--timeout`): the
/// default, a minute, would only make the suite longer.
const HUNG_TIMEOUT: Duration = Duration::from_secs(5);

/// The GPU the tests use (any idle one would do; not 0, so that a probe
/// that ignored GPUSHARE_GPU would be seen).
const GPU: u32 = 2;

/// The SMs a share of 25 units (the command's default, a quarter of
/// UnitsPerGPU=100) gets of the stand-in's 132: 33, down to a TPC.
const SHARE_SMS: u64 = 32;

/// The stand-in driver's files, every fault off and its log empty, on a
/// node as it is after shares ran: a share of a whole GPU on each GPU,
/// ended (each GPU's MPS directory then admits only the users of its
/// shares, none: the self-test's user must be let in as a share's is).
fn driver(c: &Cluster) -> Result<CudaFiles, String> {
    standin(c)?;
    shares(c, 4, 100)?;
    cancel_and_wait_stopped(c)?;
    let files = CudaFiles::at(&bin_dir(c));
    files.reset()?;
    Ok(files)
}

/// `gpu-mps selftest --json --gpu GPU` as root: exit status and answer.
fn selftest(c: &Cluster) -> Result<(i32, Value), String> {
    selftest_with(c, &[])
}

/// [`selftest`] with more options.
fn selftest_with(c: &Cluster, more: &[&str]) -> Result<(i32, Value), String> {
    let gpu = GPU.to_string();
    let out = gpu_mps(c, &[&["selftest", "--json", "--gpu", &gpu], more].concat())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let answer: Value = serde_json::from_str(text.trim()).map_err(|e| {
        format!(
            "gpu-mps selftest --json: {e}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    Ok((out.status.code().unwrap_or(-1), answer))
}

/// The answer's entry for [`GPU`].
fn gpu_result(answer: &Value) -> Result<&Value, String> {
    answer["gpus"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["gpu"] == GPU))
        .ok_or_else(|| format!("no GPU {GPU} in the answer: {answer}"))
}

/// Runs `test`, then leaves the node as the suite's next tests expect it
/// whatever happened: no fault shown, [`GPU`] not set aside.
fn given_back(c: &Cluster, test: fn(&Cluster) -> TestResult) -> TestResult {
    let result = test(c);
    let files = CudaFiles::at(&bin_dir(c)).reset();
    let resumed = gpu_mps(c, &["resume-gpu", &GPU.to_string()]);
    result.and(files).and(resumed.map(|_| ()))
}

/// The uid of the configured SelfTestUser= (the default: nobody).
fn probe_uid(answer: &Value) -> Result<u32, String> {
    let user = answer["user"].as_str().unwrap_or_default();
    let out = std::process::Command::new("getent")
        .args(["passwd", user])
        .output()
        .map_err(|e| e.to_string())?;
    String::from_utf8_lossy(&out.stdout)
        .split(':')
        .nth(2)
        .and_then(|u| u.parse().ok())
        .filter(|&u| u != 0)
        .ok_or_else(|| format!("the self-test's user {user:?} is no unprivileged user"))
}

/// The GPU as it was before the test: no daemon process, no announcement
/// of one, its compute mode given back (`Default`).
fn left_as_found(c: &Cluster) -> TestResult {
    let mode = fs::read_to_string(bin_dir(c).join(format!("compute-mode-{GPU}")))
        .unwrap_or_else(|_| "Default".into());
    ensure(
        mode.trim() == "Default",
        format!(
            "GPU {GPU}'s compute mode after the self-test: {mode:?}: {:?}",
            calls(c)
        ),
    )?;
    ensure(
        daemons(c, GPU).is_empty() && !bin_dir(c).join(format!("daemon-gpu-{GPU}")).exists(),
        format!(
            "GPU {GPU}'s daemon still runs after the self-test: {:?}: {:?}",
            daemons(c, GPU),
            calls(c)
        ),
    )
}

/// The `limits` line the stand-in driver logged for the share's context:
/// `(sms, memory_mib)`.
fn logged_limits(files: &CudaFiles) -> Option<(u64, u64)> {
    let prefix = format!("limits gpu={GPU} ");
    files.log().iter().rev().find_map(|l| {
        let rest = l.strip_prefix(&prefix)?;
        let field = |k: &str| {
            rest.split_whitespace()
                .find_map(|w| w.strip_prefix(k)?.strip_prefix('=')?.parse().ok())
        };
        Some((field("sms")?, field("memory_mib")?))
    })
}

/// On an idle GPU the test passes, and each figure it reports is what the
/// stand-in driver gave: a context through MPS for the unprivileged user
/// with a quarter of the SMs and the share's memory, an allocation over
/// it refused, and a context without MPS refused while the GPU was
/// exclusive. Then the daemon is gone and the mode is back.
pub fn passes_on_idle_gpu(c: &mut Cluster) -> TestResult {
    given_back(c, passes_on_idle_gpu_on)
}

fn passes_on_idle_gpu_on(c: &Cluster) -> TestResult {
    let files = driver(c)?;
    let (code, answer) = selftest(c)?;
    let log = files.log();
    let gpu = gpu_result(&answer)?;
    ensure(
        code == 0 && gpu["result"] == "pass",
        format!("exit {code}, {gpu}: cuda.log {log:?}"),
    )?;
    let uid = probe_uid(&answer)?;
    let contexts = files.contexts();
    let through_mps = CudaContext {
        gpu: GPU,
        mps: true,
        uid,
        result: 0,
    };
    let bypass_refused = CudaContext {
        gpu: GPU,
        mps: false,
        uid,
        result: 46,
    };
    ensure(
        contexts == vec![bypass_refused, through_mps],
        format!("contexts the driver saw: {contexts:?}; expected {bypass_refused:?} then {through_mps:?}: {log:?}"),
    )?;
    let check = &gpu["check"];
    let (sms, memory_mib) = logged_limits(&files).ok_or(format!("no limits logged: {log:?}"))?;
    ensure(
        sms == SHARE_SMS
            && check["share"]["sms"] == sms
            && check["share"]["kernel_sms"] == sms
            && check["share"]["mps"] == true,
        format!("the driver gave {sms} SMs; the command reports {check}"),
    )?;
    ensure(
        check["expected"]["memory_mib"] == memory_mib
            && check["share"]["mem_info_mib"][1] == memory_mib,
        format!("the driver's memory limit {memory_mib} MiB; the command reports {check}"),
    )?;
    let refused = log.iter().any(|l| {
        l.starts_with("alloc ")
            && l.contains(&format!("limit_mib={memory_mib} "))
            && l.ends_with("result=2")
    });
    ensure(
        refused,
        format!("no allocation over the limit was refused by the driver: {log:?}"),
    )?;
    left_as_found(c)
}

/// A driver that silently drops the limits (the share's client gets the
/// whole GPU): the test fails, exit status 1, naming the SMs and the
/// memory; the GPU is set aside, and given back by the next test that
/// passes there.
pub fn fails_without_limits(c: &mut Cluster) -> TestResult {
    given_back(c, fails_without_limits_on)
}

fn fails_without_limits_on(c: &Cluster) -> TestResult {
    let files = driver(c)?;
    files.set_fault(CudaFault::IgnoreLimits, true)?;
    let (code, answer) = selftest(c)?;
    files.set_fault(CudaFault::IgnoreLimits, false)?;
    let gpu = gpu_result(&answer)?;
    let why = gpu["why"].to_string();
    ensure(
        code == 1 && gpu["result"] == "fail",
        format!("exit {code}, {gpu}"),
    )?;
    ensure(
        why.contains("SMs") && why.contains("memory limit does not hold"),
        format!("the failure names neither the SMs nor the memory: {why}"),
    )?;
    // What the driver really gave the client: the whole GPU.
    ensure(
        logged_limits(&files).is_some_and(|(sms, _)| sms == 132),
        format!("the driver's log: {:?}", files.log()),
    )?;
    left_as_found(c)?;
    let failed = set_aside(c)?;
    ensure(
        failed.is_some(),
        format!("GPU {GPU} not set aside after a failed self-test"),
    )?;
    let (code, answer) = selftest(c)?;
    let back = set_aside(c)?;
    ensure(
        code == 0 && back.is_none(),
        format!("after a passing test: exit {code}, still set aside: {back:?}: {answer}"),
    )?;
    left_as_found(c)
}

/// Why `gpu-mps status` says [`GPU`] is set aside from sharing, if it is.
fn set_aside(c: &Cluster) -> Result<Option<String>, String> {
    Ok(status_json(c)?
        .mps
        .into_iter()
        .find(|g| g.gpu == GPU)
        .and_then(|g| g.failed))
}

/// A driver call that never returns: each client is ended at its
/// deadline, the command ends within both deadlines and says the client
/// did not finish, no client is left behind, and the GPU is left as found
/// (and given back by a test that passes).
pub fn hung_driver(c: &mut Cluster) -> TestResult {
    given_back(c, hung_driver_on)
}

fn hung_driver_on(c: &Cluster) -> TestResult {
    let files = driver(c)?;
    files.set_fault(CudaFault::Hang, true)?;
    let started = Instant::now();
    let ran = selftest_with(c, &["--timeout", &HUNG_TIMEOUT.as_secs().to_string()]);
    let took = started.elapsed();
    files.set_fault(CudaFault::Hang, false)?;
    let (code, answer) = ran?;
    // One client's deadline (the second is not started after a hang),
    // and the daemon's start and stop.
    let bound = HUNG_TIMEOUT * 2 + Duration::from_secs(20);
    let gpu = gpu_result(&answer)?;
    let why = gpu["why"].to_string();
    ensure(
        took < bound && code == 1 && gpu["result"] == "fail",
        format!("exit {code} after {took:?} (bound {bound:?}): {gpu}"),
    )?;
    ensure(
        why.contains("did not finish within"),
        format!("the failure does not say the client hung: {why}"),
    )?;
    ensure(
        files.log().iter().any(|l| l.starts_with("init hangs")),
        format!("the driver never hung: {:?}", files.log()),
    )?;
    let left = probes_left(c);
    ensure(
        left.is_empty(),
        format!("CUDA clients left running: {left:?}"),
    )?;
    left_as_found(c)?;
    let (code, answer) = selftest(c)?;
    ensure(
        code == 0,
        format!("the test after the hang: exit {code}: {answer}"),
    )
}

/// Processes running gpushare's CUDA client (`--cuda-probe LIBRARY`) on
/// this cluster's stand-in library.
fn probes_left(c: &Cluster) -> Vec<u32> {
    let library = bin_dir(c).join(testcluster::standin::LIBCUDA);
    let library = library.to_string_lossy();
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|line| {
                let args: Vec<&[u8]> = line.split(|&b| b == 0).collect();
                args.windows(2).any(|w| {
                    w[0] == gpushare::mps::selftest::PROBE_OPTION.as_bytes()
                        && w[1] == library.as_bytes()
                })
            })
        })
        .collect()
}

/// How long the self-test's hung client runs in [`share_during_test`]:
/// longer than a prolog waits for a lock (30 s), so that a test holding
/// the GPU's daemon lock while its client runs has the share refused.
const LONG_TIMEOUT: Duration = Duration::from_secs(35);

/// `gpu-mps selftest` on GPU 2 with a client that hangs until its
/// deadline, while GPU 2 is the least loaded and GPU 3 has room: a share
/// submitted meanwhile starts on GPU 3 while the test still runs, never
/// requeued (the test runs its clients with no lock held, and placement
/// passes a GPU under test by). Where Slurm places shares (it chooses GPU
/// 2), the share is refused at once with the test named, not after the
/// prolog's 30 s lock wait. The mark is gone once the test ends.
pub fn share_during_test(c: &mut Cluster) -> TestResult {
    given_back(c, share_during_test_on)
}

fn share_during_test_on(c: &Cluster) -> TestResult {
    let files = driver(c)?;
    // GPUs 0, 1 and 2 taken whole, GPU 3 half; then GPU 2 freed.
    let whole = shares(c, 3, 100)?;
    let half = shares(c, 1, 50)?;
    let on = |id: u32| c.job_output(id);
    let on_gpu = whole
        .iter()
        .find(|&&id| on(id).contains(&format!("GPU={GPU} ")))
        .copied();
    let Some(on_gpu) = on_gpu.filter(|_| on(half[0]).contains("GPU=3 ")) else {
        return Err(format!(
            "shares not where the test needs them: {:?}",
            used_gpus(c)
        ));
    };
    c.run_ok("scancel", &[&on_gpu.to_string()])?;
    wait_for("GPU 2's share to leave the ledger", SHORT, || {
        (!used_gpus(c).contains(&GPU)).then_some(())
    })?;
    files.set_fault(CudaFault::Hang, true)?;
    let mark = c.dir.join("run/gpu-mps/gpus-under-test");
    let timeout = LONG_TIMEOUT.as_secs().to_string();
    let result = std::thread::scope(|s| -> TestResult {
        let test = s.spawn(|| selftest_with(c, &["--timeout", &timeout]));
        // Its client has reached the driver (and hangs there).
        let marked = wait_for("the self-test's client to start", SHORT, || {
            files
                .log()
                .iter()
                .any(|l| l.starts_with("init hangs"))
                .then_some(())
        });
        let share = marked.and_then(|()| c.sbatch_ok(&["--gres=mps:25", SCRIPT]));
        // gpushare places: the share starts on GPU 3 at once. Slurm places
        // (and chooses GPU 2, the least loaded): the share is refused at
        // once, in words, not after the prolog's lock wait.
        let by_slurm = slurm_places_shares();
        let refused = format!("GPU {GPU} is under its MPS self-test");
        let started = share.as_ref().map_err(Clone::clone).and_then(|&id| {
            if by_slurm {
                let job = format!("job {id} on node");
                wait_for("the share's refusal", LONG_TIMEOUT, || {
                    c.log("slurmd")
                        .lines()
                        .any(|l| l.contains(&job) && l.contains(&refused))
                        .then_some(())
                })
            } else {
                wait_for("the share's output", LONG_TIMEOUT, || {
                    on(id).contains("GPU=").then_some(())
                })
            }
        });
        let running = !test.is_finished();
        let ran = test
            .join()
            .map_err(|_| "the self-test's thread panicked".to_owned())?;
        let id = share?;
        started.map_err(|e| format!("{e}: the share's record: {:?}", c.job(id)))?;
        ensure(
            running,
            format!("the share was served or refused only after the self-test ended: {ran:?}"),
        )?;
        if !by_slurm {
            let output = on(id);
            let job = c.job(id)?;
            ensure(
                output.contains("GPU=3 ") && job.get("Restarts") == Some("0"),
                format!("the share during the test: {output:?}, {job:?}"),
            )?;
        }
        ran.map(drop)
    });
    files.set_fault(CudaFault::Hang, false)?;
    result?;
    ensure(
        fs::read_to_string(&mark)
            .unwrap_or_default()
            .trim()
            .is_empty(),
        format!(
            "GPU 2 is still marked under test: {:?}",
            fs::read_to_string(&mark)
        ),
    )?;
    cancel_and_wait_stopped(c)
}
