//! Users on one node's GPUs: one MPS server per user, a user's share
//! beside another user's server or queued behind it, clients and pipes
//! kept apart. A module of `mps_daemon.rs` (its helpers), in a file of
//! its own.

use super::*;

/// A user's sbatch of a share, its output in the user's home.
pub(crate) fn user_share(c: &Cluster, user: &TestUser, units: u32) -> Result<u32, String> {
    let id = user_submit(c, user, units)?;
    c.wait_job_state(id, &["RUNNING"], JOB_LONG)?;
    wait_for("the job's output", JOB_START, || {
        user_output(user, id).contains("GPU=").then_some(())
    })?;
    Ok(id)
}

/// Submits a share job of `units` as `user`; its id.
pub(crate) fn user_submit(c: &Cluster, user: &TestUser, units: u32) -> Result<u32, String> {
    user.sbatch(
        c,
        &[
            &format!("--output={}/%j.out", user.home.display()),
            &format!("--gres=mps:{units}"),
            SCRIPT,
        ],
    )
}

pub(crate) fn user_output(user: &TestUser, id: u32) -> String {
    fs::read_to_string(user.home.join(format!("{id}.out"))).unwrap_or_default()
}

pub(crate) fn gpu_of(c: &Cluster, id: u32) -> Result<u32, String> {
    ledger(c)
        .share(id)
        .map(|s| s.gpu)
        .ok_or_else(|| format!("job {id} has no share"))
}

/// Only another user's GPUs have room. Where gpushare places, the default
/// rule refuses the share with the reason (its CUDA work could not start
/// until alice's jobs end). With `OtherUsers=queue` (and wherever Slurm
/// chose the GPU) it is placed there, its output says that its work waits
/// for alice's jobs on that GPU, and the status marks the GPU.
pub(crate) fn beside_other_user(c: &mut Cluster) -> TestResult {
    standin(c)?;
    let alice = TestUser::create(c, "gpushare-alice")?;
    let bob = TestUser::create(c, "gpushare-bob")?;
    if !slurm_places_shares() {
        for _ in 0..4 {
            user_share(c, &alice, 60)?;
        }
        let id = user_submit(c, &bob, 30)?;
        // Refused here, then requeued and kept off this node (its epilog),
        // never FAILED: it waits for a node that can serve it.
        c.wait_sent_off(id, NODE, JOB_LONG)?;
        let out = user_output(&bob, id);
        let shown = c.run_ok("scontrol", &["show", "job", &id.to_string()])?;
        ensure(
            out.contains("run another user's MPS server")
                && out.contains("OtherUsers=refuse")
                && !out.contains("GPU=")
                && ledger(c).share(id).is_none()
                && shown.contains(&format!("AdminComment=gpushare: requeued from {NODE}")),
            format!("bob's job {id} beside alice under the default rule: {out}\n{shown}"),
        )?;
        cancel_and_wait_stopped(c)?;
    }
    with_line(c, "OtherUsers=queue", |c| queued_beside(c, &alice, &bob))
}

pub(crate) fn queued_beside(c: &mut Cluster, alice: &TestUser, bob: &TestUser) -> TestResult {
    for _ in 0..4 {
        user_share(c, alice, 60)?;
    }
    let id = user_share(c, bob, 30)?;
    let gpu = gpu_of(c, id)?;
    let out = user_output(bob, id);
    ensure(
        out.contains("runs the MPS server of user gpushare-alice")
            && out.contains("will wait until the jobs of user gpushare-alice on this GPU end")
            && !out.contains("time-sliced"),
        format!("bob's job {id} on GPU {gpu} was not told: {out}"),
    )?;
    let status = status_json(c)?;
    let row = status.mps.iter().find(|m| m.gpu == gpu);
    ensure(
        row.is_some_and(|m| {
            m.time_sliced && m.users == vec!["gpushare-alice".to_owned(), "gpushare-bob".to_owned()]
        }),
        format!("status of GPU {gpu}: {row:?}"),
    )?;
    cancel_and_wait_stopped(c)
}

/// Where gpushare places: a GPU of the user's own (or an empty one) beats
/// a less loaded GPU of another user's server.
pub(crate) fn users_kept_apart(c: &mut Cluster) -> TestResult {
    standin(c)?;
    let alice = TestUser::create(c, "gpushare-alice")?;
    let bob = TestUser::create(c, "gpushare-bob")?;
    let a = user_share(c, &alice, 20)?;
    let alice_gpu = gpu_of(c, a)?;
    let mut bob_gpus = BTreeSet::new();
    for _ in 0..3 {
        let id = user_share(c, &bob, 60)?;
        bob_gpus.insert(gpu_of(c, id)?);
    }
    ensure(
        bob_gpus.len() == 3 && !bob_gpus.contains(&alice_gpu),
        format!("bob's 60-unit shares on {bob_gpus:?}, alice's on {alice_gpu}"),
    )?;
    // 30 units: alice's GPU is the least loaded (80 free against 40), but
    // bob's own GPUs have room, so it goes to one of them.
    let id = user_share(c, &bob, 30)?;
    let gpu = gpu_of(c, id)?;
    ensure(
        bob_gpus.contains(&gpu),
        format!("bob's 30-unit share went to GPU {gpu}, alice's is {alice_gpu}"),
    )?;
    let out = user_output(&bob, id);
    ensure(
        !out.contains("will wait until"),
        format!("bob's job {id}: {out}"),
    )?;
    cancel_and_wait_stopped(c)
}

/// A daemon started while `MultiUser=no` serves one user until it stops:
/// after the switch to `MultiUser=yes`, another user's share goes to a
/// GPU whose daemon serves several (started with `-M`), not beside it,
/// though it is the least loaded; once its share ends, the GPU's next
/// daemon starts with `-M`.
pub(crate) fn one_user_daemon_kept(c: &mut Cluster) -> TestResult {
    standin(c)?;
    let alice = TestUser::create(c, "gpushare-alice")?;
    let bob = TestUser::create(c, "gpushare-bob")?;
    let a = user_share(c, &alice, 20)?;
    let alice_gpu = gpu_of(c, a)?;
    with_line(c, "MultiUser=yes", |c| {
        let mut bob_gpus = BTreeSet::new();
        for _ in 0..3 {
            let id = user_share(c, &bob, 60)?;
            bob_gpus.insert(gpu_of(c, id)?);
        }
        // 30 units: alice's GPU has 80 free against 40, but its daemon
        // serves one user at a time.
        let id = user_share(c, &bob, 30)?;
        let gpu = gpu_of(c, id)?;
        ensure(
            gpu != alice_gpu && bob_gpus.contains(&gpu),
            format!(
                "bob's 30-unit share went to GPU {gpu}, alice's one-user daemon is on {alice_gpu}"
            ),
        )?;
        let starts: Vec<String> = calls(c)
            .into_iter()
            .filter(|l| l.contains("args=-d"))
            .collect();
        ensure(
            starts.contains(&format!("gpu={alice_gpu} args=-d"))
                && bob_gpus
                    .iter()
                    .all(|g| starts.contains(&format!("gpu={g} args=-d -M"))),
            format!("daemon starts {starts:?}"),
        )?;
        c.cancel_all()?;
        wait_for("every daemon to stop", SHORT, || {
            (0..4).all(|g| daemons(c, g).is_empty()).then_some(())
        })?;
        let again = user_share(c, &bob, 20)?;
        let gpu = gpu_of(c, again)?;
        let last = calls(c).into_iter().rfind(|l| l.contains("args=-d"));
        ensure(
            last == Some(format!("gpu={gpu} args=-d -M")),
            format!("the next daemon started as {last:?}"),
        )
    })
}

/// Runs `f` with `line` added to gpu_mps.conf, restoring it after.
pub(crate) fn with_line(
    c: &mut Cluster,
    line: &str,
    f: impl FnOnce(&mut Cluster) -> TestResult,
) -> TestResult {
    let path = c.slurm_conf().with_file_name("gpu_mps.conf");
    let original = fs::read_to_string(&path).map_err(|e| e.to_string())?;
    testcluster::replace_conf(&path, &format!("{original}{line}\n"))?;
    let result = f(c);
    // The last job's epilog reads the edited file: every job ends first.
    let stopped = cancel_and_wait_stopped(c);
    testcluster::replace_conf(&path, &original)?;
    result.and(stopped)
}

/// `srun ... printenv SLURMD_NODENAME 2>&1`, as SchedMD's test40.2 and
/// sites' scripts read it: the banner is its first line by default, and
/// absent under `Banner=log` (told in slurmd's log instead) and `off`.
pub(crate) fn banner_kept_out_of_output(c: &mut Cluster) -> TestResult {
    standin(c)?;
    // srun's stdout and stderr: `2>&1` is both, in whatever order.
    let node_name = |c: &Cluster| -> Result<(String, String), String> {
        let out = c.srun(&["--gres=mps:25", "printenv", "SLURMD_NODENAME"])?;
        Ok((
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    };
    let banners = |c: &Cluster| {
        c.log("slurmd")
            .matches(": MPS share of 25 units on GPU")
            .count()
    };
    let (stdout, stderr) = node_name(c)?;
    ensure(
        stdout == format!("{NODE}\n") && stderr.contains("MPS share of 25 units on GPU"),
        format!("Banner=stderr (the default): {stdout:?} {stderr:?}"),
    )?;
    cancel_and_wait_stopped(c)?;
    for (line, logged) in [("Banner=log", 1), ("Banner=off", 0)] {
        let before = banners(c);
        with_line(c, line, |c| {
            let (stdout, stderr) = node_name(c)?;
            ensure(
                stdout == format!("{NODE}\n") && stderr.is_empty(),
                format!("{line}: srun gave {stdout:?} and {stderr:?}"),
            )?;
            wait_for(
                &format!("{line}: {logged} banner(s) in slurmd's log"),
                SHORT,
                || (banners(c) == before + logged).then_some(()),
            )
            .map_err(|e| format!("{e}: {} now", banners(c)))
        })?;
    }
    Ok(())
}

pub(crate) fn multi_user(c: &mut Cluster) -> TestResult {
    standin(c)?;
    with_line(c, "MultiUser=yes", |c| {
        let ids = shares(c, 1, 25)?;
        let gpu = gpu_of(c, ids[0])?;
        let starts: Vec<String> = calls(c)
            .into_iter()
            .filter(|l| l.contains("args=-d"))
            .collect();
        ensure(
            starts == vec![format!("gpu={gpu} args=-d -M")],
            format!("MultiUser=yes: starts {starts:?}"),
        )
    })
}

/// Each task is an MPS client: a step with more tasks than the GPU's
/// server takes fails with the reason; one within the limit runs.
pub(crate) fn too_many_clients(c: &mut Cluster) -> TestResult {
    standin(c)?;
    with_line(c, "MaxClientsPerGPU=2", |c| {
        let two = c.srun(&["--gres=mps:25", "-n2", "sh", "-c", "echo GPU=$GPUSHARE_GPU"])?;
        let text = String::from_utf8_lossy(&two.stdout);
        ensure(
            two.status.success() && text.matches("GPU=").count() == 2,
            format!(
                "srun -n2 under MaxClientsPerGPU=2: {text} {}",
                String::from_utf8_lossy(&two.stderr)
            ),
        )?;
        let three = c.srun(&["--gres=mps:25", "-n3", "sh", "-c", "echo GPU=$GPUSHARE_GPU"])?;
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&three.stdout),
            String::from_utf8_lossy(&three.stderr)
        );
        ensure(
            !three.status.success()
                && all.contains("this step runs 3 tasks")
                && all.contains("MaxClientsPerGPU")
                && !all.contains("GPU="),
            format!("srun -n3 under MaxClientsPerGPU=2: {all}"),
        )
    })
}

/// Whether `user` can enter GPU `gpu`'s MPS directory (where its pipes are).
pub(crate) fn can_enter(c: &Cluster, user: &TestUser, gpu: u32) -> Result<bool, String> {
    let dir = pipe(c, gpu);
    let out = user.run(
        c,
        None,
        "sh",
        &["-c", &format!("cd {} && echo inside", dir.display())],
    )?;
    Ok(String::from_utf8_lossy(&out.stdout).contains("inside"))
}

/// The MPS server runs outside the job's cgroup, so a job's device rules
/// cannot keep it off another GPU's daemon: the pipe directories do. Only
/// users with a share on a GPU can reach its pipes, while they have one.
pub(crate) fn pipes_guarded(c: &mut Cluster) -> TestResult {
    standin(c)?;
    let alice = TestUser::create(c, "gpushare-alice")?;
    let bob = TestUser::create(c, "gpushare-bob")?;
    let root_job = shares(c, 1, 50)?;
    let root_gpu = gpu_of(c, root_job[0])?;
    let id = user_share(c, &alice, 50)?;
    let gpu = gpu_of(c, id)?;
    ensure(
        gpu != root_gpu,
        format!("alice's share on root's GPU {gpu}"),
    )?;
    let seen = (
        can_enter(c, &alice, gpu)?,
        can_enter(c, &alice, root_gpu)?,
        can_enter(c, &bob, gpu)?,
        can_enter(c, &bob, root_gpu)?,
    );
    ensure(
        seen == (true, false, false, false),
        format!(
            "(alice her GPU {gpu}, alice root's GPU {root_gpu}, bob each): {seen:?}; calls {:?}",
            calls(c)
        ),
    )?;
    c.run_ok("scancel", &[&id.to_string()])?;
    wait_for("alice's share to be released", SHORT, || {
        ledger(c).share(id).is_none().then_some(())
    })?;
    ensure(
        !can_enter(c, &alice, gpu)?,
        "alice still reaches the pipes of a GPU where she has no share left",
    )?;
    cancel_and_wait_stopped(c)
}
