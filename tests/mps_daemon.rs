//! The MPS control daemons gpushare runs for shares, on a real cluster
//! with 4 fake a40s and a stand-in `nvidia-cuda-mps-control`
//! (`tests/src/bin/mps-control-standin.rs`). There is no GPU here: these
//! tests check gpushare's handling of the control program and of the
//! daemon's process (when it is started, asked, restarted, stopped, with
//! which arguments and limits), not MPS itself. The stand-in records each
//! call in `standin.log` and leaves a process named like the real daemon.

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use gpushare::mps::ledger::LedgerState;
use gpushare::mps::status::{DaemonState, NodeStatus};
use testcluster::cluster::{slurm_places_shares, wait_for, NODE};
use testcluster::monitor::mapping_follows_ledger;
use testcluster::time::{Timeout, JOB_END, JOB_LONG, JOB_START, NODE_STATE, SHORT};
use testcluster::users::TestUser;
use testcluster::{ensure, Cluster, ClusterSpec, Suite, TestResult};

#[path = "mps_daemon/compute_mode.rs"]
mod compute_mode;
use compute_mode::{
    admins_mode_kept, exclusive_while_shared, failed_restore_retried, whole_job_beside_shares,
};
#[path = "mps_daemon/cancel.rs"]
mod cancel;
#[path = "mps_daemon/disable.rs"]
mod disable;
#[path = "mps_daemon/health.rs"]
mod health;
#[path = "mps_daemon/idle.rs"]
mod idle;
#[path = "mps_daemon/job_container.rs"]
mod job_container;
#[path = "mps_daemon/linger.rs"]
mod linger;
#[path = "mps_daemon/neighbours.rs"]
mod neighbours;
#[path = "mps_daemon/private.rs"]
mod private;
#[path = "mps_daemon/selftest.rs"]
mod selftest;
#[path = "mps_daemon/selftest_start.rs"]
mod selftest_start;
#[path = "mps_daemon/usage.rs"]
mod usage;
#[path = "mps_daemon/users.rs"]
mod users;
use users::*;

/// A share whose daemon hangs is refused and sent elsewhere within this:
/// the prolog's own deadline ended the wait, not the hung program.
const REFUSED_WITHIN: Timeout = Timeout::secs(80);

/// A40s of 48 GiB: a share of 25 units may pin 12 GiB.
const GPU_MEMORY: &str = "GPUMemory=48G";

fn spec() -> ClusterSpec {
    let mut spec = ClusterSpec::mps_node();
    for (name, text) in &mut spec.extra_conf_files {
        if name == "gpu_mps.conf" {
            *text = text.replace(
                "MPSControl=none",
                &format!(
                    "MPSControl={{cluster}}/mps-bin/nvidia-cuda-mps-control\n{GPU_MEMORY}\n\
                     DCGMJobMappingDir={{cluster}}/run/dcgm-jobs"
                ),
            );
        }
    }
    spec
}

fn main() -> ExitCode {
    if testcluster::cluster::cgroup_v2() && !slurm_places_shares() {
        // Every share is refused there (see gpu_mps.rs): no daemon to run.
        return ExitCode::SUCCESS;
    }
    let mut suite = Suite::new(spec())
        .test(
            "one_daemon_per_gpu_started_by_the_first_share_quit_after_the_last",
            lifecycle,
        )
        .smoke()
        .test(
            "a_killed_daemon_is_restarted_by_the_next_share",
            killed_daemon,
        )
        .test(
            "a_hung_daemon_does_not_hang_the_job_start_and_refuses_its_share",
            hung_daemon,
        )
        .test(
            "a_share_cancelled_before_its_epilog_is_not_requeued",
            cancel::cancelled_before_its_epilog,
        )
        .test(
            "a_share_whose_daemon_cannot_start_is_sent_elsewhere_unless_the_site_runs_it",
            failing_daemon,
        )
        .test(
            "a_shares_memory_is_divided_over_its_tasks_with_framework_hints",
            memory_per_task,
        )
        .test(
            "the_epilog_terminates_the_jobs_mps_clients_before_releasing_it",
            clients_terminated,
        )
        .smoke()
        .test(
            "a_shared_gpu_is_exclusive_while_its_daemon_runs_then_gets_its_mode_back",
            exclusive_while_shared,
        )
        .test(
            "a_failed_compute_mode_restore_is_retried_by_the_node_timer",
            failed_restore_retried,
        )
        .test(
            "an_admins_compute_mode_set_while_shares_ran_is_kept",
            admins_mode_kept,
        )
        .test(
            "the_dcgm_mapping_follows_the_ledger_when_a_prolog_is_killed_mid_way",
            prolog_killed,
        )
        .test(
            "a_share_beside_another_users_server_is_refused_or_told_that_it_waits",
            beside_other_user,
        );
    // 26.05.2's CgroupJobIdPaths=yes names a job's cgroup/v2 directory
    // job_<id>, as v1 and 25.11 do, where 26.05 names it by SLUID.
    if testcluster::cluster::cgroup_v2() && testcluster::cluster::slurm_release() >= (26, 5) {
        suite = suite.test_on(
            "the_epilog_terminates_the_jobs_mps_clients_under_cgroup_job_id_paths",
            spec().with_cgroup_conf_lines(&["CgroupJobIdPaths=yes"]),
            clients_terminated,
        );
    }
    suite = selftest_start::tests(selftest::tests(idle::tests(usage::tests(disable::tests(
        suite,
    )))));
    suite = health::tests(linger::tests(neighbours::tests(private::tests(suite))));
    // On request only (named in full): Slurm's own container fails now and
    // then inside the harness's namespaces (see job_container.rs).
    if job_container::has_dirs() {
        suite = suite.test_on_on_request(
            "a_share_whose_job_container_hides_its_mps_pipes_fails_at_once",
            job_container::spec(),
            job_container::hidden_pipes_refused,
        );
    }
    if !slurm_places_shares() {
        suite = suite
            .test(
                "two_users_never_share_a_server_while_another_gpu_has_room",
                users_kept_apart,
            )
            .test(
                "a_daemon_started_before_multi_user_takes_no_second_user",
                one_user_daemon_kept,
            )
            // Where Slurm places shares it never gives a GPU holding them whole.
            .test(
                "a_gpu_given_whole_beside_shares_has_its_earlier_mode_while_held",
                whole_job_beside_shares,
            );
    }
    suite
        .test(
            "the_banner_goes_to_slurmds_log_or_nowhere_leaving_srun_output_clean",
            banner_kept_out_of_output,
        )
        .test("multi_user_daemons_start_with_minus_m", multi_user)
        .test(
            "a_step_with_more_tasks_than_the_gpu_serves_is_refused",
            too_many_clients,
        )
        .test(
            "a_gpus_mps_pipes_are_reachable_only_by_users_with_a_share_on_it",
            pipes_guarded,
        )
        .smoke()
        .test(
            "a_fatal_xid_in_the_kernel_log_sets_its_gpu_aside_at_the_node_timer",
            xid_sets_aside,
        )
        // Last: it sets every GPU aside (and resumes them).
        .test(
            "failed_gpus_take_no_share_and_never_drain_the_node",
            failed_gpus,
        )
        .run()
}

const SCRIPT: &str = "--wrap=echo GPU=$GPUSHARE_GPU MEM=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT PIPE=$CUDA_MPS_PIPE_DIRECTORY; sleep 300";

fn bin_dir(c: &Cluster) -> PathBuf {
    c.dir.join("mps-bin")
}

/// gpushare's CUDA client against the stand-in libcuda beside the stand-in
/// control program: `gpu-mps --cuda-probe LIB ARGS`.
fn cuda_probe(c: &Cluster, args: &str) -> Result<String, String> {
    let bin = testcluster::cluster::build_dir()?.join("gpu-mps");
    let lib = bin_dir(c).join("libcuda.so.1");
    Ok(format!(
        "{} --cuda-probe {} {args}",
        bin.display(),
        lib.display()
    ))
}

/// Ends every job, puts the stand-ins in place (the control program and
/// `nvidia-smi`, every GPU in DEFAULT mode) and empties their call log.
fn standin(c: &Cluster) -> Result<(), String> {
    cancel_and_wait_stopped(c)?;
    let dir = bin_dir(c);
    testcluster::standin::install(&dir)?;
    testcluster::standin::install_smi(&dir)?;
    for name in ["hang", "fail", "smi-fail"] {
        let _ = fs::remove_file(dir.join(name));
    }
    for gpu in 0..4 {
        let _ = fs::remove_file(dir.join(format!("compute-mode-{gpu}")));
        // A failure the test before left remembered (node/sick.rs).
        let _ = fs::remove_file(c.dir.join(format!("run/gpu-mps/mps-sick-{gpu}")));
    }
    fs::write(dir.join("standin.calls"), "").map_err(|e| e.to_string())?;
    fs::write(dir.join("standin.log"), "").map_err(|e| e.to_string())
}

/// How many times the stand-in was started so far.
fn process_starts(c: &Cluster) -> usize {
    fs::read_to_string(bin_dir(c).join("standin.calls"))
        .unwrap_or_default()
        .lines()
        .count()
}

/// The stand-in's calls so far, one per line: `gpu=N args=...` or `gpu=N cmd=...`.
fn calls(c: &Cluster) -> Vec<String> {
    fs::read_to_string(bin_dir(c).join("standin.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// GPUs the stand-in got `what` for (`args=-d`, `cmd=quit`), one entry per call.
fn gpus_with(c: &Cluster, what: &str) -> Vec<u32> {
    calls(c)
        .iter()
        .filter(|l| l.split_once(' ').is_some_and(|(_, rest)| rest == what))
        .filter_map(|l| l.strip_prefix("gpu=")?.split(' ').next()?.parse().ok())
        .collect()
}

fn ledger(c: &Cluster) -> LedgerState {
    let path = c.dir.join("run/gpu-mps/state");
    LedgerState::parse(&fs::read_to_string(&path).unwrap_or_default(), &path).unwrap_or_default()
}

fn pipe(c: &Cluster, gpu: u32) -> PathBuf {
    c.dir.join(format!("run/gpu-mps-mps/gpu{gpu}/pipe"))
}

/// The stand-in daemon's processes for GPU `gpu` (its control process,
/// not the servers it runs).
fn daemons(c: &Cluster, gpu: u32) -> Vec<u32> {
    gpushare::mps::daemon::processes(&pipe(c, gpu))
        .into_iter()
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|line| {
                line.split(|&b| b == 0)
                    .next()
                    .is_some_and(|argv0| argv0.ends_with(b"nvidia-cuda-mps-control"))
            })
        })
        .collect()
}

/// Submits `n` shares of `units` as root and waits for them to run.
fn shares(c: &Cluster, n: usize, units: u32) -> Result<Vec<u32>, String> {
    let gres = format!("--gres=mps:{units}");
    let ids: Vec<u32> = (0..n)
        .map(|_| c.sbatch_ok(&[&gres, SCRIPT]))
        .collect::<Result<_, _>>()?;
    for &id in &ids {
        c.wait_job_state(id, &["RUNNING"], JOB_LONG)?;
    }
    // The job's output is there once its prolog is done.
    wait_for("the jobs' output", JOB_START, || {
        ids.iter()
            .all(|&id| c.job_output(id).contains("GPU="))
            .then_some(())
    })?;
    Ok(ids)
}

fn status_json(c: &Cluster) -> Result<NodeStatus, String> {
    let bin = testcluster::cluster::build_dir()?.join("gpu-mps");
    let conf = c.slurm_conf().with_file_name("gpu_mps.conf");
    let out = c.run(
        &bin.to_string_lossy(),
        &["status", "--json", "--conf", &conf.to_string_lossy()],
    )?;
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(&text).map_err(|e| format!("gpu-mps status --json: {e}: {text}"))
}

fn used_gpus(c: &Cluster) -> BTreeSet<u32> {
    ledger(c).shares().map(|s| s.gpu).collect()
}

fn cancel_and_wait_stopped(c: &Cluster) -> TestResult {
    c.cancel_all()?;
    wait_for("every daemon to be stopped", SHORT, || {
        (0..4).all(|g| daemons(c, g).is_empty()).then_some(())
    })
    .map_err(|e| format!("{e}: calls {:?}", calls(c)))
}

fn lifecycle(c: &mut Cluster) -> TestResult {
    standin(c)?;
    let ids = shares(c, 8, 25)?;
    let gpus = used_gpus(c);
    ensure(gpus.len() == 4, format!("8 shares on GPUs {gpus:?}"))?;
    let mut started = gpus_with(c, "args=-d");
    started.sort_unstable();
    ensure(
        started == vec![0, 1, 2, 3],
        format!("one -d per GPU expected, got {started:?}: {:?}", calls(c)),
    )?;
    for g in 0..4 {
        wait_for(&format!("GPU {g}'s daemon"), SHORT, || {
            (daemons(c, g).len() == 1).then_some(())
        })
        .map_err(|e| format!("{e}: daemon processes {:?}", daemons(c, g)))?;
    }
    // A GPU's first share starts its daemon, sets its limits (both
    // set_default lines) and starts its user's server, which holds the
    // GPU from then on, in one call; a further share of the same size
    // calls nothing: the daemon the prolog recorded still runs, with those
    // limits. 2 calls per GPU, whatever its number of shares.
    ensure(
        process_starts(c) == 4 * 2,
        format!(
            "8 calls of the control program expected for 8 shares on 4 GPUs, got {}: {:?}",
            process_starts(c),
            calls(c)
        ),
    )?;
    // The server limits: the largest share's (25 units: 25 %, 12 GiB).
    let log = calls(c);
    for want in [
        "cmd=set_default_active_thread_percentage 25",
        "cmd=set_default_device_pinned_mem_limit 0 12288M",
        "cmd=start_server -uid 0",
    ] {
        ensure(
            log.iter().any(|l| l.ends_with(want)),
            format!("no `{want}` among {log:?}"),
        )?;
    }
    for &id in &ids {
        let out = c.job_output(id);
        ensure(
            out.contains("MEM=0=12288M")
                && out.lines().next().is_some_and(|l| {
                    l.contains(&format!("gpu_mps: job {id}: MPS share of 25 units"))
                        && l.contains("25 % of its threads, 12288 MiB of device memory")
                })
                && out.matches("gpu_mps: job").count() == 1,
            format!("job {id}'s output: {out}"),
        )?;
    }
    let status = status_json(c)?;
    ensure(
        status.mps.len() == 4
            && status.mps.iter().all(|m| {
                m.daemon == DaemonState::Running
                    && m.daemon_pids.len() == 1
                    && m.clients == 2
                    && m.thread_percentage == Some(25)
                    && m.memory_limit_mib == Some(12288)
                    && m.shares.iter().all(|s| s.memory_limit_mib == Some(12288))
            }),
        format!("gpu-mps status --json: {:?}", status.mps),
    )?;
    // A larger share raises its GPU's limits: the defaults and the running
    // server's (the one its first share's prolog started), in one call
    // after the `get_server_list` that named the server.
    let before = process_starts(c);
    let log_before = calls(c).len();
    let big = shares(c, 1, 50)?;
    let gpu = ledger(c)
        .shares()
        .find(|s| big.contains(&s.job))
        .map(|s| s.gpu)
        .ok_or("the 50-unit share is not in the ledger")?;
    let new: Vec<String> = calls(c).split_off(log_before);
    let server = match gpushare::mps::daemon::servers_of(&pipe(c, gpu), &daemons(c, gpu))[..] {
        [one] => one,
        ref other => return Err(format!("GPU {gpu}'s servers: {other:?}")),
    };
    let want: Vec<String> = [
        "get_server_list".to_owned(),
        "set_default_active_thread_percentage 50".to_owned(),
        "set_default_device_pinned_mem_limit 0 24576M".to_owned(),
        format!("set_active_thread_percentage {server} 50"),
        format!("set_device_pinned_mem_limit {server} 0 24576M"),
    ]
    .iter()
    .map(|l| format!("gpu={gpu} cmd={l}"))
    .collect();
    ensure(
        new == want && process_starts(c) == before + 2,
        format!(
            "a 50-unit share on GPU {gpu}: want {want:?} in 2 calls, got {new:?} in {}",
            process_starts(c) - before
        ),
    )?;
    cancel_and_wait_stopped(c)?;
    let mut quit = gpus_with(c, "cmd=quit");
    quit.sort_unstable();
    ensure(
        quit == vec![0, 1, 2, 3] && gpus_with(c, "args=-d").len() == 4,
        format!(
            "one quit per GPU after its last share expected: {:?}",
            calls(c)
        ),
    )
}

fn killed_daemon(c: &mut Cluster) -> TestResult {
    standin(c)?;
    shares(c, 4, 50)?;
    let before: Vec<u32> = wait_for("the 4 daemons", SHORT, || {
        let all: Vec<u32> = (0..4).flat_map(|g| daemons(c, g)).collect();
        (all.len() == 4).then_some(all)
    })?;
    let pids: Vec<String> = before.iter().map(u32::to_string).collect();
    let mut args = vec!["-KILL"];
    args.extend(pids.iter().map(String::as_str));
    c.run_ok("kill", &args)?;
    wait_for("the daemons to die", SHORT, || {
        (0..4).all(|g| daemons(c, g).is_empty()).then_some(())
    })?;
    // Each left its control pipe behind, as a killed real daemon does.
    ensure(
        (0..4).all(|g| pipe(c, g).join("control").exists()),
        "a killed daemon's control file is gone",
    )?;
    shares(c, 4, 50)?;
    for g in 0..4 {
        let now = wait_for(&format!("GPU {g}'s new daemon"), SHORT, || {
            let now = daemons(c, g);
            (now.len() == 1 && !before.contains(&now[0])).then_some(now)
        })
        .map_err(|e| {
            format!(
                "{e}: daemon {:?} after the kill of {before:?}",
                daemons(c, g)
            )
        })?;
        ensure(now.len() == 1, format!("GPU {g}: {now:?}"))?;
    }
    ensure(
        gpus_with(c, "args=-d").len() == 8,
        format!("4 starts and 4 restarts expected: {:?}", calls(c)),
    )?;
    let log = c.syslog();
    ensure(
        log.contains("restarted"),
        format!("syslog does not say the daemons were restarted:\n{log}"),
    )?;
    cancel_and_wait_stopped(c)
}

/// A share refused on this node because its GPU's daemon could not serve
/// it: requeued by its epilog and kept off the node, its output saying
/// why (`want` among it), its record released, its script never run.
fn sent_elsewhere(c: &Cluster, id: u32, want: &str) -> TestResult {
    c.wait_sent_off(id, NODE, JOB_LONG)?;
    let out = c.job_output(id);
    let shown = c.run_ok("scontrol", &["show", "job", &id.to_string()])?;
    ensure(
        out.contains(want)
            && out.contains("MPSFailure=refuse")
            && !out.contains("GPU=")
            && ledger(c).share(id).is_none()
            && shown.contains(&format!("AdminComment=gpushare: requeued from {NODE}"))
            && shown.contains("could not serve it"),
        format!("refused share {id}: {out}\n{shown}"),
    )
}

fn hung_daemon(c: &mut Cluster) -> TestResult {
    standin(c)?;
    shares(c, 4, 25)?;
    // Every call of the control program hangs from now on; the next share
    // raises its GPU's limits, so its prolog must call the daemon. The
    // limits cannot be set: the share is refused, within the deadline.
    fs::write(bin_dir(c).join("hang"), "").map_err(|e| e.to_string())?;
    let started = Instant::now();
    let id = c.sbatch_ok(&["--gres=mps:50", SCRIPT])?;
    sent_elsewhere(c, id, "could not be given the limits of its shares")?;
    ensure(
        started.elapsed() < REFUSED_WITHIN.scaled(),
        format!("the refusal took {:?}", started.elapsed()),
    )?;
    let log = c.syslog();
    ensure(
        log.lines()
            .any(|l| l.contains("gpu-mps-prolog") && l.contains("did not finish within")),
        format!("syslog lacks the killed control program:\n{log}"),
    )?;
    let _ = fs::remove_file(bin_dir(c).join("hang"));
    cancel_and_wait_stopped(c)
}

/// A control program that fails every call (as one that cannot reach the
/// driver does): no share runs without MPS by default; `MPSFailure=run`
/// runs it, its first line saying what it lacks.
fn failing_daemon(c: &mut Cluster) -> TestResult {
    standin(c)?;
    let fail = bin_dir(c).join("fail");
    fs::write(&fail, "").map_err(|e| e.to_string())?;
    let result = (|| {
        let id = c.sbatch_ok(&["--gres=mps:25", SCRIPT])?;
        sent_elsewhere(c, id, "could not be started")?;
        ensure(
            c.job_output(id).contains("stand-in told to fail"),
            format!("the reason is not shown: {}", c.job_output(id)),
        )?;
        cancel_and_wait_stopped(c)?;
        with_line(c, "MPSFailure=run", |c| {
            let ids = shares(c, 1, 25)?;
            let out = c.job_output(ids[0]);
            ensure(
                out.lines().next().is_some_and(|l| {
                    l.contains("WARNING: this job runs WITHOUT MPS on GPU")
                        && l.contains("MPSFailure=run")
                }) && out.contains("GPU="),
                format!("MPSFailure=run: {out}"),
            )
        })
    })();
    let _ = fs::remove_file(&fail);
    result.and(cancel_and_wait_stopped(c))
}

/// Each task of a step is an MPS client with a limit of its own: the
/// share's memory is divided over them, and the frameworks' variables say
/// the same fraction, unless the job set its own.
fn memory_per_task(c: &mut Cluster) -> TestResult {
    standin(c)?;
    let show = "echo MEM=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT F=$GPUSHARE_MEMORY_FRACTION \
                XLA=$XLA_PYTHON_CLIENT_MEM_FRACTION TF=$TF_FORCE_GPU_ALLOW_GROWTH";
    let out = c.srun(&["--gres=mps:25", "-n3", "sh", "-c", show])?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = format!("{text}{}", String::from_utf8_lossy(&out.stderr));
    // 25 units of a 48 GiB GPU: 12288 MiB for the share, 4096 for each task.
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("MEM=")).collect();
    ensure(
        out.status.success()
            && lines.len() == 3
            && lines
                .iter()
                .all(|l| *l == "MEM=0=4096M F=0.0833 XLA=0.0625 TF=true")
            && all.contains("12288 MiB of device memory, 4096 MiB for each of this step's 3 tasks"),
        format!("srun -n3 --gres=mps:25: {all}"),
    )?;
    // What the job set itself stays; the hard limit does not.
    let own = c
        .command("timeout")
        .env("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5")
        .env("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=99999M")
        .arg(JOB_LONG.scaled_secs().to_string())
        .args(["srun", "--gres=mps:25", "-n1", "sh", "-c", show])
        .output()
        .map_err(|e| format!("srun: {e}"))?;
    let text = String::from_utf8_lossy(&own.stdout);
    ensure(
        text.contains("MEM=0=12288M F=0.2500 XLA=0.5 TF=true"),
        format!(
            "srun with the job's own XLA fraction: {text} {}",
            String::from_utf8_lossy(&own.stderr)
        ),
    )
}

/// The epilog asks the GPU's daemon to terminate the job's clients (here
/// gone, as Slurm killed them) before releasing the job, and no other
/// process's.
fn clients_terminated(c: &mut Cluster) -> TestResult {
    standin(c)?;
    let ids = shares(c, 1, 25)?;
    let id = ids[0];
    let gpu = gpu_of(c, id)?;
    let pids = c.run_ok("scontrol", &["listpids", &id.to_string()])?;
    let job_pid: u32 = pids
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .next()
        .ok_or_else(|| format!("no pid of job {id}: {pids}"))?;
    // A client that outlives its job is found by its cgroup, named as this
    // release and cgroup version name a job's: `job_<id>`, or on 26.05's
    // cgroup/v2 by default the job's SLUID, which slurmd gives the job's
    // processes and the epilog (`SLURM_JOB_SLUID`). Read as Slurm made it.
    let cgroup =
        fs::read_to_string(format!("/proc/{job_pid}/cgroup")).map_err(|e| e.to_string())?;
    let environ = fs::read(format!("/proc/{job_pid}/environ")).map_err(|e| e.to_string())?;
    let sluid = environ
        .split(|&b| b == 0)
        .find_map(|v| v.strip_prefix(b"SLURM_JOB_SLUID="))
        .map(|v| String::from_utf8_lossy(v).into_owned());
    ensure(
        gpushare::mps::daemon::cgroup_is_jobs(&cgroup, id, sluid.as_deref()),
        format!("job {id}'s process {job_pid} (SLUID {sluid:?}) is not seen as the job's by its cgroup: {cgroup:?}"),
    )?;
    // The naming this run asked Slurm for is the one it made: job_<id>
    // under CgroupJobIdPaths=yes; the SLUID on 26.05's cgroup/v2 without.
    let job_id_paths = fs::read_to_string(c.slurm_conf().with_file_name("cgroup.conf"))
        .map_err(|e| e.to_string())?
        .contains("CgroupJobIdPaths=yes");
    if job_id_paths || !testcluster::cluster::cgroup_v2() {
        ensure(
            cgroup.contains(&format!("/job_{id}/")),
            format!("job {id}'s cgroup is not job_{id}: {cgroup:?}"),
        )?;
    } else if testcluster::cluster::slurm_release() >= (26, 5) {
        ensure(
            sluid
                .as_deref()
                .is_some_and(|s| cgroup.contains(&format!("/{s}/")))
                && !cgroup.contains(&format!("/job_{id}/")),
            format!("job {id}'s cgroup is not its SLUID {sluid:?}: {cgroup:?}"),
        )?;
    }
    // The test's own process: a live client of no job.
    let other = std::process::id();
    fs::write(bin_dir(c).join("servers"), format!("{gpu} 7700\n")).map_err(|e| e.to_string())?;
    fs::write(
        bin_dir(c).join("clients"),
        format!("{gpu} 7700 {job_pid}\n{gpu} 7700 {other}\n"),
    )
    .map_err(|e| e.to_string())?;
    let result = (|| {
        c.run_ok("scancel", &[&id.to_string()])?;
        c.wait_job_done(id, JOB_END)?;
        wait_for("the epilog's quit", SHORT, || {
            gpus_with(c, "cmd=quit").contains(&gpu).then_some(())
        })?;
        let log = calls(c);
        let at = |want: &str| {
            log.iter()
                .position(|l| l == &format!("gpu={gpu} cmd={want}"))
        };
        let terminated = at(&format!("terminate_client 7700 {job_pid}"));
        ensure(
            terminated.is_some()
                && terminated < at("quit")
                && at(&format!("terminate_client 7700 {other}")).is_none(),
            format!("job {id}'s client {job_pid}, the test's {other}: {log:?}"),
        )?;
        let syslog = c.syslog();
        ensure(
            syslog.contains(&format!(
                "GPU {gpu}: MPS client {job_pid} of server 7700 terminated"
            )),
            format!("syslog: {syslog}"),
        )
    })();
    for name in ["servers", "clients"] {
        let _ = fs::remove_file(bin_dir(c).join(name));
    }
    result.and(cancel_and_wait_stopped(c))
}

/// Runs `gpu-mps ARGS --conf <the cluster's gpu_mps.conf>` as root.
fn gpu_mps(c: &Cluster, args: &[&str]) -> Result<std::process::Output, String> {
    let bin = testcluster::cluster::build_dir()?.join("gpu-mps");
    let conf = c.slurm_conf().with_file_name("gpu_mps.conf");
    let conf = conf.to_string_lossy();
    // The node by name: the name a node's prologs record in the host's
    // /run/gpushare is the last cluster's on this host (lanes run side by
    // side), where a real node has one slurmd.
    let mut all = [args, &["--conf", &conf]].concat();
    if !args.contains(&"--node") {
        all.extend(["--node", NODE]);
    }
    c.run(&bin.to_string_lossy(), &all)
}

/// A fatal XID in the kernel log (a file of `/dev/kmsg` records the
/// node timer's command is pointed at) sets its GPU aside, found by the PCI
/// bus id in NVML's figures the prolog keeps; a benign XID does not, nor do
/// the kernel's segfault lines a user's crashing program wrote the driver's
/// words into (the recorded fixture), nor a user's record; the first look
/// reads nothing logged before it; each record is read once (a GPU resumed
/// stays so).
fn xid_sets_aside(c: &mut Cluster) -> TestResult {
    standin(c)?;
    let state = c.dir.join("run/gpu-mps");
    shares(c, 1, 25)?;
    cancel_and_wait_stopped(c)?;
    let facts: String = (0..4u32)
        .map(|g| format!("{g} {g} 49152 0 0 00000000:{:02X}:00.0\n", 0x3b + g))
        .collect();
    fs::write(state.join("nvml-facts"), facts).map_err(|e| e.to_string())?;
    for name in ["kmsg-cursor", "xid-cursor"] {
        let _ = fs::remove_file(state.join(name));
    }
    // The cursor and the figures the timer keeps over reboots.
    let kept =
        gpushare::mps::kept::kept_dir(std::path::Path::new(gpushare::mps::kept::KEPT_ROOT), &state);
    let _ = fs::remove_file(kept.join("xid-cursor"));
    let log = c.dir.join("kmsg");
    // Logged before the first look (before gpushare was installed).
    fs::write(
        &log,
        "3,90,1,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n",
    )
    .map_err(|e| e.to_string())?;
    let log_text = log.to_string_lossy().into_owned();
    let failed_gpus = |c: &Cluster| -> Result<Vec<u32>, String> {
        let json = gpu_mps(c, &["status", "--json"])?;
        let view: NodeStatus = serde_json::from_slice(&json.stdout).map_err(|e| e.to_string())?;
        Ok(view
            .mps
            .iter()
            .filter(|m| m.failed.is_some())
            .map(|m| m.gpu)
            .collect())
    };
    let result = (|| -> TestResult {
        let first = gpu_mps(c, &["metrics", "--write", "--kernel-log", &log_text])?;
        let said = String::from_utf8_lossy(&first.stderr).into_owned();
        ensure(
            first.status.success() && said.contains("first look") && failed_gpus(c)?.is_empty(),
            format!("the first look ({}): {said}", first.status),
        )?;
        let fixture = fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/kernel-log/segfault-forged-xid.kmsg"
        ))
        .map_err(|e| e.to_string())?;
        let text = format!(
            "{fixture}\
             12,348,2,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n\
             4,400,3,-;NVRM: Xid (PCI:0000:3c:00): 79, pid=1, GPU has fallen off the bus.\n\
             4,401,4,-;NVRM: Xid (PCI:0000:3e:00): 13, pid=2, Graphics SM Warp Exception\n"
        );
        let mut file = fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .map_err(|e| e.to_string())?;
        std::io::Write::write_all(&mut file, text.as_bytes()).map_err(|e| e.to_string())?;
        let timer = gpu_mps(c, &["metrics", "--write", "--kernel-log", &log_text])?;
        let said = String::from_utf8_lossy(&timer.stderr).into_owned();
        ensure(
            timer.status.success()
                && said.contains("GPU 1 set aside from sharing: XID 79")
                && said.contains("3 record(s) name an XID but are not the driver's")
                && !said.contains("GPU 0 "),
            format!("gpu-mps metrics --write ({}): {said}", timer.status),
        )?;
        let failed = failed_gpus(c)?;
        ensure(
            failed == vec![1],
            format!("failed GPUs after the XIDs: {failed:?}"),
        )?;
        // Resumed, it stays so: the record was read once.
        gpu_mps(c, &["resume-gpu", "1"])?;
        let again = gpu_mps(c, &["metrics", "--write", "--kernel-log", &log_text])?;
        let failed = failed_gpus(c)?;
        ensure(
            again.status.success() && failed.is_empty(),
            format!(
                "after resume-gpu 1 and a second look: {failed:?} {}",
                String::from_utf8_lossy(&again.stderr)
            ),
        )
    })();
    let _ = gpu_mps(c, &["resume-gpu", "0"]);
    let _ = gpu_mps(c, &["resume-gpu", "1"]);
    for name in ["nvml-facts", "xid-cursor"] {
        let _ = fs::remove_file(state.join(name));
        let _ = fs::remove_file(kept.join(name));
    }
    result
}

/// GPU 2 reported lost by NVML (the figures the prolog keeps, which it
/// reads where NVML does not answer, as here): the next share's prolog
/// sets it aside, no share goes there (refused and sent elsewhere where
/// only it has room, or where Slurm chose it), `gpu-mps status` and the
/// metrics say so. The other GPUs drained with `gpu-mps drain-gpu`: a
/// share is refused and sent elsewhere, a CPU-only and a whole-GPU job
/// run, and the node is never drained. Resumed, it shares again.
fn failed_gpus(c: &mut Cluster) -> TestResult {
    standin(c)?;
    let state = c.dir.join("run/gpu-mps");
    // The node's state directory and ledger, as a first share leaves them.
    shares(c, 1, 25)?;
    cancel_and_wait_stopped(c)?;
    let facts: String = (0..4)
        .map(|g| format!("{g} {g} 49152 0 {}\n", u8::from(g == 2)))
        .collect();
    fs::write(state.join("nvml-facts"), facts).map_err(|e| e.to_string())?;
    let result = (|| -> TestResult {
        // 60 units: one share per GPU. Each runs on a GPU other than 2 or
        // is sent off the node: at least one, the share placed on GPU 2.
        // Where Slurm chooses the GPU it may give GPU 2, freed by that
        // refusal, to the next share too, which is then refused as well.
        let ids: Vec<u32> = (0..4)
            .map(|_| c.sbatch_ok(&["--gres=mps:60", SCRIPT]))
            .collect::<Result<_, _>>()?;
        let (refused, running) =
            wait_for("every share running or sent off the node", JOB_LONG, || {
                let off: Vec<u32> = ids
                    .iter()
                    .copied()
                    .filter(|&id| c.sent_off(id, NODE))
                    .collect();
                let running = ids
                    .iter()
                    .filter(|&&id| c.job_output(id).contains("GPU="))
                    .count();
                (!off.is_empty() && off.len() + running == ids.len()).then_some((off, running))
            })?;
        ensure(
            slurm_places_shares() || refused.len() == 1,
            format!("gpushare placed, yet shares {refused:?} were sent off"),
        )?;
        for &id in &refused {
            let out = c.job_output(id);
            ensure(
                out.contains("set aside as failed")
                    && out.contains("NVML reports it lost")
                    && out.contains("GPU 2"),
                format!("the refused share {id}: {out}"),
            )?;
        }
        let used = used_gpus(c);
        ensure(
            !used.contains(&2) && used.len() == running,
            format!("shares on GPUs {used:?}, {running} running"),
        )?;
        let shown = gpu_mps(c, &["status"])?;
        let table = String::from_utf8_lossy(&shown.stdout);
        ensure(
            shown.status.code() == Some(1)
                && table.contains("FAILED: GPU 2 takes no new share: NVML reports it lost"),
            format!("gpu-mps status ({}): {table}", shown.status),
        )?;
        ensure(
            c.syslog().contains("GPU 2 set aside from sharing"),
            "syslog does not say GPU 2 was set aside",
        )?;
        cancel_and_wait_stopped(c)?;
        // Every GPU set aside: shares are refused and sent elsewhere; a
        // CPU-only job and a whole-GPU job run; the node is not drained.
        for gpu in ["0", "1", "3"] {
            let out = gpu_mps(c, &["drain-gpu", gpu, "--reason", "XID 79 (health check)"])?;
            ensure(
                out.status.success(),
                format!("drain-gpu {gpu}: {}", String::from_utf8_lossy(&out.stderr)),
            )?;
        }
        let share = c.sbatch_ok(&["--gres=mps:25", SCRIPT])?;
        c.wait_sent_off(share, NODE, JOB_LONG)?;
        let out = c.job_output(share);
        ensure(
            out.contains("set aside as failed") && !out.contains("GPU="),
            format!("the share on a node of failed GPUs: {out}"),
        )?;
        let cpu = c.sbatch_ok(&["--wrap=echo CPU-ONLY"])?;
        let whole = c.sbatch_ok(&["--gres=gpu:a40:1", "--wrap=echo HELD=$SLURM_JOB_GPUS"])?;
        for id in [cpu, whole] {
            let info = c.wait_job_done(id, JOB_LONG)?;
            ensure(
                info.state() == "COMPLETED",
                format!("job {id} ended {}: {}", info.state(), c.job_output(id)),
            )?;
        }
        let states = c.node_states()?;
        ensure(
            !states.values().any(|s| s.starts_with("drain")),
            format!("node states: {states:?}"),
        )?;
        let log = c.syslog();
        ensure(
            !log.contains("node unfit for GPU sharing") && log.contains("is held whole by job"),
            format!("syslog: {log}"),
        )?;
        c.run_ok("scancel", &[&share.to_string()])?;
        Ok(())
    })();
    // Back to sharing, whatever happened above.
    let _ = fs::remove_file(state.join("nvml-facts"));
    for gpu in ["0", "1", "2", "3"] {
        let _ = gpu_mps(c, &["resume-gpu", gpu]);
    }
    let _ = c.cancel_all();
    let _ = c.run_ok(
        "scontrol",
        &["update", &format!("nodename={NODE}"), "state=resume"],
    );
    result?;
    let ids = shares(c, 1, 25)?;
    ensure(!ids.is_empty(), "no share after resume-gpu")?;
    cancel_and_wait_stopped(c)
}

/// A prolog killed while it waits on a hung control program, after its
/// ledger transaction: dcgm-exporter's mapping lists exactly what the
/// ledger holds before the kill, after it (Slurm drains the node; the
/// epilog, where Slurm runs one, releases the job) and once the node is
/// resumed and `gpu-mps gc` has dropped any record left.
fn prolog_killed(c: &mut Cluster) -> TestResult {
    standin(c)?;
    let node = c.node_names().first().cloned().unwrap_or_default();
    let running = shares(c, 2, 25)?;
    mapping_follows_ledger(c, &node)?;
    fs::write(bin_dir(c).join("hang"), "").map_err(|e| e.to_string())?;
    let id = c.sbatch_ok(&["--gres=mps:25", SCRIPT])?;
    // Its prolog placed it and now waits on the control program. Only
    // this node's prologs: another cluster on the machine (a release run
    // beside this one) has its own, which must never be killed from here.
    let prolog = wait_for(
        "the prolog to place the share and wait on the daemon",
        JOB_START,
        || {
            ledger(c).share(id)?;
            let pids = c.node_processes_named(&node, "gpu-mps-prolog");
            (!pids.is_empty()).then_some(pids)
        },
    )?;
    mapping_follows_ledger(c, &node)?;
    for pid in &prolog {
        c.run("kill", &["-9", &pid.to_string()])?;
    }
    let _ = fs::remove_file(bin_dir(c).join("hang"));
    // Slurm gives up on the job (22.05 runs the epilog, which releases
    // it); whatever the ledger holds, the mapping holds the same.
    wait_for("the job to leave RUNNING/CONFIGURING", JOB_END, || {
        let state = c.job(id).ok()?.state().to_owned();
        (state != "RUNNING" && state != "CONFIGURING").then_some(())
    })?;
    mapping_follows_ledger(c, &node)?;
    c.run_ok("scancel", &[&id.to_string()])?;
    // Slurm drains a node whose prolog failed: once it has, resume it and
    // wait until it takes jobs again (the next tests need it).
    let drained = |c: &Cluster| {
        c.node_states()
            .ok()
            .and_then(|s| s.get(&node).cloned())
            .unwrap_or_default()
    };
    wait_for("Slurm to drain the node", NODE_STATE, || {
        drained(c).to_lowercase().contains("drain").then_some(())
    })?;
    c.run_ok(
        "scontrol",
        &["update", &format!("nodename={node}"), "state=resume"],
    )?;
    wait_for("the node to take jobs again", NODE_STATE, || {
        let state = drained(c);
        (!state.to_lowercase().contains("drain") && !state.is_empty()).then_some(())
    })?;
    let bin = testcluster::cluster::build_dir()?.join("gpu-mps");
    let conf = c.slurm_conf().with_file_name("gpu_mps.conf");
    c.run_ok(
        &bin.to_string_lossy(),
        &["gc", "--conf", &conf.to_string_lossy(), "--node", &node],
    )?;
    ensure(
        ledger(c).share(id).is_none() && running.iter().all(|r| ledger(c).share(*r).is_some()),
        format!("after gc the ledger holds {:?}", ledger(c)),
    )?;
    mapping_follows_ledger(c, &node)?;
    cancel_and_wait_stopped(c)?;
    mapping_follows_ledger(c, &node)
}
