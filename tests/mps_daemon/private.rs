//! `--gpu-mps=private`: a job holding a GPU whole gets an MPS daemon of
//! its own in each step, run as its user in the cgroups of the step's
//! first task. What the tasks see is the oracle: each is an MPS client
//! (of the stand-in driver library, `tests/fake-libcuda`) of one daemon
//! that runs as the job's user and ends with its step; another user's
//! process cannot reach it; what the site or the job cannot have is
//! refused with the reason, at the command line where the value is wrong.

use std::fs;
use std::path::{Path, PathBuf};

use gpushare::mps::daemon::process_uid;
use testcluster::cluster::{wait_for, Cluster};
use testcluster::standin::CudaFiles;
use testcluster::time::{JOB_LONG, JOB_START, SHORT};
use testcluster::users::TestUser;
use testcluster::{ensure, ClusterSpec, Suite, TestResult};

use super::{bin_dir, cancel_and_wait_stopped, standin};

/// This file's tests: on a cluster of their own that allows it.
pub fn tests(suite: Suite) -> Suite {
    let mut spec: ClusterSpec = super::spec();
    for (name, text) in &mut spec.extra_conf_files {
        if name == "gpu_mps.conf" {
            text.push_str("PrivateMPS=allow\n");
        }
    }
    suite.test_on(
        "a_private_jobs_tasks_are_clients_of_one_daemon_of_its_user_that_ends_with_its_step",
        spec,
        own_daemon,
    )
}

/// The stand-in CUDA client: `gpu-mps --cuda-probe LIB share`.
fn probe_line(c: &Cluster) -> Result<String, String> {
    super::cuda_probe(c, "share")
}

/// Processes named as an MPS control daemon, their uid and pipe directory.
fn control_daemons() -> Vec<(u32, u32, String)> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let argv0 = cmdline.split(|&b| b == 0).next()?;
            let name = Path::new(std::str::from_utf8(argv0).ok()?).file_name()?;
            (name == "nvidia-cuda-mps-control").then_some(())?;
            let uid = process_uid(pid)?;
            let environ = fs::read(format!("/proc/{pid}/environ")).ok()?;
            let pipe = environ.split(|&b| b == 0).find_map(|v| {
                std::str::from_utf8(v)
                    .ok()?
                    .strip_prefix("CUDA_MPS_PIPE_DIRECTORY=")
                    .map(str::to_owned)
            })?;
            Some((pid, uid, pipe))
        })
        .collect()
}

fn own_daemon(c: &mut Cluster) -> TestResult {
    standin(c)?;
    let cuda = CudaFiles::at(&bin_dir(c));
    cuda.reset()?;
    let alice = TestUser::create(c, "gpushare-alice")?;
    let bob = TestUser::create(c, "gpushare-bob")?;
    let probe = probe_line(c)?;
    let go = alice.home.join("go");
    let _ = fs::remove_file(&go);
    // Four tasks of one step on the job's one GPU, each a CUDA client
    // that reports what it got, then waits for the test's word. Task 0
    // also says what file system its daemon's directories are on, and
    // tries to write 64 MiB in the job's directory.
    let script = format!(
        "#!/bin/sh\nsrun -n4 sh -c 'echo TASK=$SLURM_PROCID PIPE=$CUDA_MPS_PIPE_DIRECTORY \
         PCT=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE CG=$(grep -E \"^0::|:devices:\" /proc/self/cgroup); \
         if [ $SLURM_PROCID = 0 ]; then \
         echo FS=$(stat -f -c %T $CUDA_MPS_PIPE_DIRECTORY/../..); \
         dd if=/dev/zero of=$CUDA_MPS_PIPE_DIRECTORY/../../fill bs=1M count=64 2>/dev/null; \
         echo FILL=$?; fi; \
         {probe}; while [ ! -e {go} ]; do sleep 0.2; done'\n",
        go = go.display()
    );
    let script_path = alice.home.join("private.sh");
    fs::write(&script_path, script).map_err(|e| e.to_string())?;
    let out = format!("--output={}/%j.out", alice.home.display());
    let id = alice.sbatch(
        c,
        &[
            &out,
            "--gres=gpu:1",
            "--ntasks=4",
            "--gpu-mps=private",
            "--gpu-mps-threads=25",
            &script_path.display().to_string(),
        ],
    )?;
    let output =
        |id: u32| fs::read_to_string(alice.home.join(format!("{id}.out"))).unwrap_or_default();
    wait_for("four tasks to report", JOB_START, || {
        (output(id).matches("\"sms\"").count() >= 4).then_some(())
    })?;
    let said = output(id);
    let pipe = format!("job{id}/step0/pipe");
    let pipes: Vec<&str> = said
        .lines()
        .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("PIPE=")))
        .collect();
    ensure(
        pipes.len() == 4
            && pipes.iter().all(|p| p.ends_with(&pipe))
            && said.matches("PCT=25").count() == 4,
        format!("each task's MPS environment: {said}"),
    )?;
    // The job's directory is a small file system of its own: filling it
    // fills nothing of the node's (the ledger's /run above all).
    ensure(
        said.contains("FS=tmpfs") && said.contains("FILL=") && !said.contains("FILL=0"),
        format!("the job's directory is not a bounded file system of its own: {said}"),
    )?;
    // One daemon for the step (and one for the batch step), both the
    // user's, none of root's for this job.
    let daemons = control_daemons();
    let step: Vec<_> = daemons.iter().filter(|d| d.2.ends_with(&pipe)).collect();
    let job_dir = format!("job{id}/");
    let of_job: Vec<_> = daemons.iter().filter(|d| d.2.contains(&job_dir)).collect();
    ensure(
        step.len() == 1 && of_job.len() == 2 && of_job.iter().all(|d| d.1 == alice.uid),
        format!("the job's daemons: {daemons:?}"),
    )?;
    // Confined as the step's first task is: in its cgroup (the devices
    // one on cgroup v1, the unified one on v2).
    let task0 = said
        .lines()
        .find(|l| l.starts_with("TASK=0 "))
        .and_then(|l| l.split_once(" CG="))
        .map(|(_, cg)| cg.trim().to_owned())
        .unwrap_or_default();
    let daemon_cg = fs::read_to_string(format!("/proc/{}/cgroup", step[0].0)).unwrap_or_default();
    ensure(
        !task0.is_empty()
            && task0
                .split_whitespace()
                .all(|line| daemon_cg.lines().any(|l| l == line)),
        format!("the step's daemon's cgroups {daemon_cg:?}, task 0's {task0:?}"),
    )?;
    // Each task a client of it, with a quarter of the SMs.
    let contexts_of = |uid: u32| -> Vec<_> {
        let all = cuda.contexts().into_iter();
        all.filter(|x| x.uid == uid).collect()
    };
    let clients = contexts_of(alice.uid);
    ensure(
        clients.len() == 4 && clients.iter().all(|x| x.mps && x.result == 0),
        format!("alice's CUDA contexts: {clients:?}\n{said}"),
    )?;
    // Another user's process naming the pipe gets no client of it.
    let pipe_dir = PathBuf::from(step[0].2.clone());
    let bobs = bob.run(
        c,
        None,
        "env",
        &[
            &format!("CUDA_MPS_PIPE_DIRECTORY={}", pipe_dir.display()),
            "sh",
            "-c",
            &probe,
        ],
    )?;
    let theirs = contexts_of(bob.uid);
    ensure(
        !theirs.is_empty() && theirs.iter().all(|x| x.result != 0),
        format!(
            "bob's contexts through alice's pipe: {theirs:?} ({})",
            String::from_utf8_lossy(&bobs.stdout)
        ),
    )?;
    // The step ends: its daemon with it, then the job's directory.
    fs::write(&go, "").map_err(|e| e.to_string())?;
    c.wait_job_state(id, &["COMPLETED"], JOB_LONG)?;
    let job_path = pipe_dir
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    wait_for("the job's daemons and directory to be gone", SHORT, || {
        let left = control_daemons()
            .into_iter()
            .any(|d| d.2.contains(&job_dir));
        (!left && !job_path.exists()).then_some(())
    })?;

    // What cannot be had is refused with the reason.
    let bad = alice.run(c, None, "sbatch", &["--gpu-mps=shared", "--wrap=true"])?;
    let err = String::from_utf8_lossy(&bad.stderr);
    ensure(
        !bad.status.success() && err.contains("takes one value, private"),
        format!("sbatch --gpu-mps=shared: {err}"),
    )?;
    // A step whose job asked, where the node holds no record of the
    // prolog's (it never ran for it): refused, never run without MPS, and
    // the job requeued as one Slurm started without its Prolog (counted);
    // its next run, recorded, runs the step. The batch step's srun takes
    // the job's option from its environment.
    let go2 = alice.home.join("go2");
    let _ = fs::remove_file(&go2);
    let skipped = alice.sbatch(
        c,
        &[
            &out,
            "--open-mode=append",
            "--gres=gpu:1",
            "--gpu-mps=private",
            &format!(
                "--wrap=while [ ! -e {} ]; do sleep 0.2; done; srun -n1 echo STEP RAN; echo SRUN=$?",
                go2.display()
            ),
        ],
    )?;
    c.wait_job_state(skipped, &["RUNNING"], JOB_LONG)?;
    let record = c.dir.join("run/gpu-mps").join(format!("private.{skipped}"));
    wait_for("the prolog's record", SHORT, || {
        record.exists().then_some(())
    })?;
    fs::remove_file(&record).map_err(|e| format!("{}: {e}", record.display()))?;
    fs::write(&go2, "").map_err(|e| e.to_string())?;
    let ended = c.wait_job_state(skipped, &["FAILED", "COMPLETED"], JOB_LONG)?;
    let said = output(skipped);
    let refused_at = said.find("did not record one");
    let first_run = refused_at.map_or("", |at| &said[at..]);
    ensure(
        refused_at.is_some()
            && said.find("STEP RAN") > refused_at
            && first_run.contains("its epilog requeues it")
            && !said[..refused_at.unwrap_or(0)].contains("SRUN=0")
            && ended.state() == "COMPLETED"
            && ended.restarts() >= 1,
        format!("a step with no record of its own daemon: {ended:?}\n{said}"),
    )?;

    let none = alice.sbatch(c, &[&out, "--gpu-mps=private", "--wrap=echo RAN"])?;
    c.wait_job_state(none, &["FAILED", "COMPLETED"], JOB_LONG)?;
    let job = c.job(none)?;
    let said = output(none);
    ensure(
        job.state() == "FAILED" && said.contains("holds no GPU on node") && !said.contains("RAN"),
        format!("a private job without a GPU: {job:?}\n{said}"),
    )?;
    cancel_and_wait_stopped(c)
}
