//! A daemon left running without a share: the shares on every GPU end
//! while each GPU's daemon lock is held past the epilogs' wait (as a hung
//! holder would), so the epilogs release the shares but leave the daemons
//! idle and every GPU in EXCLUSIVE_PROCESS. The node timer stops them and
//! gives each GPU its recorded mode back; a job Slurm gives such a GPU
//! whole has its prolog stop the daemon first, so its CUDA processes run.

use std::fs;

use gpushare::mps::ledger::Ledger;
use gpushare::mps::lock_wait::open_lock;
use testcluster::cluster::NODE;
use testcluster::time::JOB_LONG;
use testcluster::{ensure, Cluster, Suite, TestResult};

use super::{bin_dir, calls, cancel_and_wait_stopped, daemons, gpu_mps, ledger, shares, standin};

/// This file's tests, in order, after the suite's others.
pub fn tests(suite: Suite) -> Suite {
    suite
        .test(
            "an_idle_daemon_left_behind_is_stopped_by_the_node_timer_and_the_mode_comes_back",
            timer_stops_idle,
        )
        .test(
            "a_whole_gpu_job_on_a_gpu_an_idle_daemon_left_exclusive_runs_its_processes",
            whole_job_stops_idle,
        )
}

/// GPU `gpu`'s compute mode as `nvidia-smi` (the stand-in) reports it.
fn smi_mode(c: &Cluster, gpu: u32) -> Result<String, String> {
    let smi = bin_dir(c).join("nvidia-smi");
    let out = c.run_ok(
        &smi.to_string_lossy(),
        &[
            "-i",
            &gpu.to_string(),
            "--query-gpu=compute_mode",
            "--format=csv,noheader",
        ],
    )?;
    Ok(out.trim().to_owned())
}

fn modes(c: &Cluster) -> Result<Vec<String>, String> {
    (0..4).map(|g| smi_mode(c, g)).collect()
}

/// A share of a whole GPU's units on each GPU (`prohibited` PROHIBITED
/// before), ended while the test holds every GPU's daemon lock past the
/// epilogs' wait (30 s): the ledger holds no share, each GPU's daemon
/// runs on idle and keeps it EXCLUSIVE_PROCESS. The modes before.
fn leave_idle_daemons(c: &Cluster, prohibited: Option<u32>) -> Result<Vec<String>, String> {
    standin(c)?;
    if let Some(gpu) = prohibited {
        let file = bin_dir(c).join(format!("compute-mode-{gpu}"));
        fs::write(file, "Prohibited\n").map_err(|e| e.to_string())?;
    }
    let before = modes(c)?;
    let ids = shares(c, 4, 100)?;
    let state = c.dir.join("run/gpu-mps");
    let held = (0..4)
        .map(|gpu| {
            let path = state.join(format!("daemon-gpu{gpu}.lock"));
            let file = open_lock(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            file.lock()
                .map_err(|e| format!("flock {}: {e}", path.display()))?;
            Ok(file)
        })
        .collect::<Result<Vec<_>, String>>()?;
    // Their epilogs wait for the locks, give up, release the shares (or
    // leave a release to the ledger's next change where another epilog
    // held the ledger then), and leave each daemon as it is.
    let ended = c.cancel_all().and_then(|()| {
        // The ledger's next change (here the test's) makes those releases:
        // a GPU whose release it makes keeps its daemon too.
        let ledger = Ledger::open(&state, 0).map_err(|e| e.to_string())?;
        ledger.finish_deferred().map_err(|e| e.to_string())
    });
    drop(held);
    ended?;
    let during = modes(c)?;
    let left: Vec<u32> = (0..4).filter(|&g| !daemons(c, g).is_empty()).collect();
    let recorded: Vec<u32> = ledger(c).shares().map(|s| s.job).collect();
    ensure(
        left == vec![0, 1, 2, 3]
            && recorded.is_empty()
            && during.iter().all(|m| m == "Exclusive_Process"),
        format!(
            "after the shares {ids:?} ended with their GPUs locked: daemons on {left:?}, \
             modes {during:?}, shares still recorded {recorded:?}"
        ),
    )?;
    Ok(before)
}

/// Daemons left idle by [`leave_idle_daemons`]: one run of the node timer
/// (`gpu-mps metrics --write`) stops each (`quit`) and gives each GPU the
/// mode it had before (GPU 2 PROHIBITED, the others DEFAULT), as
/// `nvidia-smi` reads it back; a second run finds nothing to do.
fn timer_stops_idle(c: &mut Cluster) -> TestResult {
    let before = leave_idle_daemons(c, Some(2))?;
    let kmsg = c.dir.join("kmsg-none");
    fs::write(&kmsg, "").map_err(|e| e.to_string())?;
    let kmsg = kmsg.to_string_lossy();
    let tick = ["metrics", "--write", "--kernel-log", &kmsg];
    let timer = gpu_mps(c, &tick)?;
    let said = String::from_utf8_lossy(&timer.stderr).into_owned();
    let after = modes(c)?;
    let quit: Vec<bool> = (0..4)
        .map(|g| calls(c).contains(&format!("gpu={g} cmd=quit")))
        .collect();
    ensure(
        timer.status.success()
            && after == before
            && quit.iter().all(|&q| q)
            && (0..4).all(|g| daemons(c, g).is_empty())
            && (0..4)
                .all(|g| said.contains(&format!("GPU {g}: MPS daemon without a share: stopped"))),
        format!(
            "the timer ({}): modes {after:?} (before {before:?}), quit {quit:?}: {said}",
            timer.status
        ),
    )?;
    let again = gpu_mps(c, &tick)?;
    let said = String::from_utf8_lossy(&again.stderr);
    ensure(
        !said.contains("MPS daemon") && !said.contains("compute mode"),
        format!("a second tick found more to do: {said}"),
    )
}

/// How many stand-in CUDA clients the whole-GPU job starts at once: in
/// EXCLUSIVE_PROCESS all but one fail.
const PROCESSES: usize = 3;

/// Daemons left idle by [`leave_idle_daemons`]: a job Slurm gives a GPU
/// whole starts [`PROCESSES`] CUDA clients at once and completes (Slurm's
/// record), each client seeing the GPU's earlier mode: its prolog stopped
/// the idle daemon before the job ran. The other GPUs' daemons are left
/// to the node timer.
fn whole_job_stops_idle(c: &mut Cluster) -> TestResult {
    let client = testcluster::standin::install_client(&bin_dir(c))?;
    let result = (|| {
        let before = leave_idle_daemons(c, None)?;
        let wrap = format!("--wrap={} 3 {PROCESSES}", client.display());
        let id = c.sbatch_ok(&["--gres=gpu:a40:1", &wrap])?;
        let info = c
            .wait_job_done(id, JOB_LONG)
            .map_err(|e| format!("{e}; its output so far: {:?}", c.job_output(id)))?;
        let out = c.job_output(id);
        let gpu: Option<u32> = out
            .lines()
            .find(|l| l.contains("context of pid"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok());
        let earlier = gpu.and_then(|g| before.get(usize::try_from(g).ok()?).cloned());
        let log = c.syslog();
        ensure(
            info.state() == "COMPLETED"
                && out.contains("clients failed: 0")
                && out.matches("context of pid").count() == PROCESSES
                && gpu.is_some_and(|g| {
                    daemons(c, g).is_empty()
                        && earlier.as_ref().is_some_and(|m| {
                            out.contains(&format!("GPU {g} ({m}): context"))
                                && smi_mode(c, g).as_ref() == Ok(m)
                        })
                        && log.contains(&format!(
                            "GPU {g}: MPS daemon without a share (left idle): stopped"
                        ))
                }),
            format!(
                "whole-GPU job {id} ({}) on GPU {gpu:?} (earlier mode {earlier:?}): {out}\n\
                 syslog: {log}",
                info.state()
            ),
        )
    })();
    // The daemons still idle stopped (gc's step), for the tests after.
    let cleaned = gpu_mps(c, &["gc", "--node", NODE]).map(|_| ());
    result.and(cleaned).and(cancel_and_wait_stopped(c))
}
