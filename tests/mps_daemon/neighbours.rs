//! What a real GPU showed of MPS (an H200, driver 580), on the stand-ins
//! that now model it (tests/fake-libcuda/src/mps_world.rs): a control
//! daemon alone holds nothing, so a process of a share's job without its
//! MPS variables gets the whole GPU until a server runs; and a client
//! killed with kernels in flight fails every other client of its server,
//! unless the control daemon's `terminate_client` ended it first. Each
//! test runs the driver-API client (`gpu-mps --cuda-probe LIB hold`) as a
//! share's task against the stand-in libcuda, and asserts on what that
//! client and the stand-ins saw. A module of `mps_daemon.rs`.

use super::*;

use std::time::Duration;

use testcluster::standin::CudaFiles;

/// This file's tests, in order, after the suite's others.
pub fn tests(suite: Suite) -> Suite {
    suite
        .test(
            "a_shares_task_without_its_mps_variables_gets_no_gpu_before_any_client",
            bypass_refused,
        )
        .smoke()
        .test(
            "a_cancelled_shares_clients_end_through_the_daemon_and_its_neighbour_runs_on",
            neighbour_survives,
        )
        .test(
            "a_cancelled_shares_task_ignoring_sigterm_has_its_clients_ended_before_the_sigkill",
            neighbour_survives_sigkill,
        )
        .test(
            "a_cancelled_shares_clients_are_ended_before_the_sigkill_while_slurmctld_stalls",
            neighbour_survives_stalled_controller,
        )
        .test(
            "a_shares_own_sigterm_leaves_its_clients_to_it",
            own_sigterm_left_alone,
        )
        .test(
            "a_daemon_that_will_not_start_a_server_still_serves_the_share_with_its_limits",
            server_refused,
        )
}

/// What the stalled case's batch shell prints on its SIGTERM.
const SIGTERM_SEEN: &str = "sigterm-seen-by-the-shell";

/// The control program refuses `start_server`: the share still runs,
/// its limits set by a second call without it, and the prolog says the
/// GPU is not held until its first client.
fn server_refused(c: &mut Cluster) -> TestResult {
    driver(c)?;
    let refuse = bin_dir(c).join("start-server-fail");
    fs::write(&refuse, "").map_err(|e| e.to_string())?;
    let result = (|| {
        let id = shares(c, 1, 25)?[0];
        let gpu = gpu_of(c, id)?;
        let limits = format!("gpu={gpu} cmd=set_default_active_thread_percentage 25");
        let log = calls(c);
        ensure(
            log.iter().filter(|l| **l == limits).count() == 2
                && log
                    .iter()
                    .any(|l| l.starts_with(&format!("gpu={gpu} cmd=start_server")))
                && c.syslog().contains("did not start with its daemon"),
            format!(
                "job {id} on GPU {gpu}: calls {log:?}\nsyslog:\n{}",
                c.syslog()
            ),
        )
    })();
    let _ = fs::remove_file(&refuse);
    result.and(cancel_and_wait_stopped(c))
}

/// `gpu-mps --cuda-probe LIB hold MIB SECONDS BUSY` against the stand-in
/// libcuda beside the stand-in control program.
fn hold(c: &Cluster, seconds: u32, busy: bool) -> Result<String, String> {
    cuda_probe(c, &format!("hold 0 {seconds} {}", u8::from(busy)))
}

/// The stand-ins as the suite sets them, the driver's log and its MPS
/// clients' records empty.
fn driver(c: &Cluster) -> Result<CudaFiles, String> {
    standin(c)?;
    let files = CudaFiles::at(&bin_dir(c));
    files.reset()?;
    Ok(files)
}

/// A share whose task drops its MPS variables before any client of its
/// GPU ran: the GPU (EXCLUSIVE_PROCESS, the default) must refuse it. A
/// daemon alone would let it in; the server the prolog starts with the
/// daemon does not.
fn bypass_refused(c: &mut Cluster) -> TestResult {
    let cuda = driver(c)?;
    let script = format!(
        "--wrap=env -u CUDA_MPS_PIPE_DIRECTORY -u CUDA_MPS_ACTIVE_THREAD_PERCENTAGE \
         -u CUDA_MPS_PINNED_DEVICE_MEM_LIMIT {}; echo exit=$?",
        hold(c, 1, false)?
    );
    let id = c.sbatch_ok(&["--gres=mps:25", &script])?;
    c.wait_job_done(id, JOB_END)?;
    let out = c.job_output(id);
    let log = cuda.log();
    ensure(
        out.contains("exit=1")
            && !out.contains("\"init\":\"ok\"")
            && log.iter().any(|l| l.starts_with("ctx ") && l.contains(" mps=no ") && l.ends_with("result=46"))
            && !log.iter().any(|l| l.contains(" mps=no ") && l.ends_with("result=0")),
        format!(
            "job {id}'s task without MPS variables was not refused the GPU:\n{out}\ndriver: {log:?}\n\
             control calls: {:?}",
            calls(c)
        ),
    )?;
    cancel_and_wait_stopped(c)
}

/// Two shares of one user on one GPU, each running kernels back to back;
/// one is cancelled (its batch shell ends on SIGTERM while its client
/// runs on): its client must be ended through the daemon before Slurm
/// kills it, and the other's kernels must go on to the end.
fn neighbour_survives(c: &mut Cluster) -> TestResult {
    neighbour_case(c, Cancelled::EndsOnSigterm)
}

/// As [`neighbour_survives`], where the cancelled share's batch shell
/// ignores SIGTERM: nothing of the job ends before Slurm's SIGKILL
/// (KillWait=2, so 5 s later), and the step guard must end its client
/// through the daemon before then.
fn neighbour_survives_sigkill(c: &mut Cluster) -> TestResult {
    neighbour_case(c, Cancelled::IgnoresSigterm)
}

/// As [`neighbour_survives_sigkill`], on a loaded node: slurmctld is
/// frozen from the SIGTERM until after Slurm's SIGKILL (slurmd needs no
/// controller to send it), so the guard's questions go unanswered, and
/// each call of the control program takes half a second. The guard must
/// still end the client before the SIGKILL, with `KillWait` unknown.
fn neighbour_survives_stalled_controller(c: &mut Cluster) -> TestResult {
    neighbour_case(c, Cancelled::IgnoresSigtermControllerStalled)
}

/// How the first of [`neighbour_case`]'s shares meets its `scancel`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cancelled {
    /// Its batch shell ends on SIGTERM; its client runs on.
    EndsOnSigterm,
    /// Nothing of it ends before Slurm's SIGKILL.
    IgnoresSigterm,
    /// As `IgnoresSigterm`, slurmctld frozen from the SIGTERM on and the
    /// control program slow.
    IgnoresSigtermControllerStalled,
}

/// What each control program call takes in the stalled case, in ms.
const SLOW_CONTROL_MS: u32 = 500;
/// How long slurmctld stays frozen after the SIGTERM: past Slurm's
/// SIGKILL, due 5 s after it.
const STALL: Duration = Duration::from_secs(7);

/// Two shares on one GPU (three others filled), the first cancelled
/// mid-kernel as `how` says: the neighbour's kernels go on to the end,
/// the client was ended through the daemon, and the node's log says why.
fn neighbour_case(c: &mut Cluster, how: Cancelled) -> TestResult {
    let cuda = driver(c)?;
    // Three GPUs taken whole by shares: the two below share the fourth.
    let fillers = shares(c, 3, 100)?;
    let client_cmd = hold(c, 60, true)?;
    let script = match how {
        Cancelled::EndsOnSigterm => format!("{client_cmd} & wait"),
        Cancelled::IgnoresSigterm => format!("trap '' TERM; {client_cmd} & wait"),
        // The shell says when the SIGTERM came and waits on; the client
        // ignores it.
        Cancelled::IgnoresSigtermControllerStalled => format!(
            "(trap '' TERM; exec {client_cmd}) & trap 'echo {SIGTERM_SEEN}' TERM; wait; wait"
        ),
    };
    let said = match how {
        Cancelled::EndsOnSigterm => "its step's last task ended",
        Cancelled::IgnoresSigterm => "outlived SIGTERM",
        Cancelled::IgnoresSigtermControllerStalled => "(KillWait unknown)",
    };
    let cancelled = c.sbatch_ok(&["--gres=mps:40", &format!("--wrap={script}")])?;
    let neighbour = c.sbatch_ok(&["--gres=mps:60", &format!("--wrap={}", hold(c, 12, true)?)])?;
    let result = (|| {
        for id in [cancelled, neighbour] {
            wait_for(
                &format!("job {id}'s client to run its kernels"),
                JOB_START,
                || c.job_output(id).contains("\"init\":\"ok\"").then_some(()),
            )
            .map_err(|e| format!("{e}: {}", c.job_output(id)))?;
        }
        let (a, b) = (gpu_of(c, cancelled)?, gpu_of(c, neighbour)?);
        ensure(
            a == b,
            format!("the two shares are on GPUs {a} and {b}, not one"),
        )?;
        let client = c
            .job_output(cancelled)
            .lines()
            .find_map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).ok()?;
                (v["event"] == "ready").then(|| v["pid"].as_u64())?
            })
            .ok_or_else(|| format!("no ready line: {}", c.job_output(cancelled)))?;
        let slow = bin_dir(c).join("slow");
        if how == Cancelled::IgnoresSigtermControllerStalled {
            fs::write(&slow, SLOW_CONTROL_MS.to_string()).map_err(|e| e.to_string())?;
        }
        c.run_ok("scancel", &[&cancelled.to_string()])?;
        if how == Cancelled::IgnoresSigtermControllerStalled {
            wait_for(&format!("job {cancelled}'s SIGTERM"), JOB_END, || {
                c.job_output(cancelled).contains(SIGTERM_SEEN).then_some(())
            })?;
            let stalled = c.stall_slurmctld()?;
            std::thread::sleep(STALL);
            drop(stalled);
            fs::remove_file(&slow).map_err(|e| e.to_string())?;
        }
        c.wait_job_done(cancelled, JOB_END)?;
        let info = c.wait_job_done(neighbour, JOB_LONG)?;
        let out = c.job_output(neighbour);
        let terminated = calls(c).iter().any(|l| {
            l.starts_with(&format!("gpu={a} cmd=terminate_client "))
                && l.ends_with(&format!(" {client}"))
        });
        // The plugin's words are in slurmd's log, the guard's in syslog.
        let logs = format!("{}{}", c.log("slurmd"), c.syslog());
        let logged = logs.lines().any(|l| {
            l.contains(&format!("job {cancelled}: "))
                && l.contains(said)
                && l.contains(&client.to_string())
        });
        let logged = logged
            && (how != Cancelled::IgnoresSigtermControllerStalled
                || logs.lines().any(|l| {
                    l.contains(&format!("job {cancelled}: ")) && l.contains("outlived SIGTERM")
                }));
        ensure(
            info.get("JobState") == Some("COMPLETED")
                && out.contains("\"event\":\"done\"")
                && out.contains("\"busy\":\"ok\"")
                && terminated
                && logged,
            format!(
                "job {neighbour} beside the cancelled job {cancelled} (its client {client} \
                 terminated through the daemon: {terminated}, logged as {said:?}: {logged}): \
                 {info:?}\n{out}\ndriver: {:?}\ncontrol calls: {:?}\nsyslog:\n{}",
                cuda.log()
                    .iter()
                    .filter(|l| l.starts_with("fault"))
                    .collect::<Vec<_>>(),
                calls(c),
                c.syslog()
            ),
        )
    })();
    for id in fillers {
        let _ = c.run("scancel", &[&id.to_string()]);
    }
    result.and(cancel_and_wait_stopped(c))
}

/// A user's own `scancel -s TERM` of a share's step whose task ignores
/// it: the job runs on, so the step's guard asks slurmctld, finds it
/// running, and ends nothing: the job's kernels go on, and it completes.
/// (Slurm signals a batch step's own process group for a user, never its
/// guard: the step here is srun's.)
fn own_sigterm_left_alone(c: &mut Cluster) -> TestResult {
    driver(c)?;
    let id = c.sbatch_ok(&[
        "--gres=mps:25",
        &format!(
            "--wrap=srun bash -c \"trap '' TERM; {} & wait\"",
            hold(c, 10, true)?
        ),
    ])?;
    wait_for(
        &format!("job {id}'s client to run its kernels"),
        JOB_START,
        || c.job_output(id).contains("\"init\":\"ok\"").then_some(()),
    )
    .map_err(|e| format!("{e}: {}", c.job_output(id)))?;
    c.run_ok("scancel", &["-s", "TERM", &id.to_string()])?;
    let info = c.wait_job_done(id, JOB_LONG)?;
    let out = c.job_output(id);
    let terminated = calls(c).iter().any(|l| l.contains("cmd=terminate_client "));
    ensure(
        info.get("JobState") == Some("COMPLETED")
            && out.contains("\"busy\":\"ok\"")
            && !terminated
            && c.syslog()
                .contains(&format!("job {id}: SIGTERM while the job is RUNNING")),
        format!(
            "job {id} after its own SIGTERM (a terminate_client asked: {terminated}): {info:?}\n\
             {out}\ncontrol calls: {:?}\nsyslog:\n{}",
            calls(c),
            c.syslog()
        ),
    )?;
    cancel_and_wait_stopped(c)
}
