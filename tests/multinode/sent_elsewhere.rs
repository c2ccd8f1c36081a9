//! Share jobs sent elsewhere: a node whose GPUs serve another user's
//! MPS server (or that is disabled) keeps a share off through the job's
//! `ExcNodeList`, and lifts that exclusion when its cause is gone. A
//! module of `multinode.rs` (its helpers), in a file of its own.

use super::*;

/// ann holds a small share on every GPU of gpu01, and gpu02 is taken by
/// an exclusive job, so ben's share can only start on gpu01. Where
/// gpushare places (one user per MPS server, `OtherUsers=refuse`), gpu01
/// cannot serve it: the job is requeued, kept off gpu01, and runs on
/// gpu02 once that is free instead of ending FAILED; `scontrol show job`
/// tells ben why. Where Slurm places, it runs beside ann on gpu01, told so.
pub(crate) fn sent_elsewhere(c: &mut Cluster) -> TestResult {
    let ann = TestUser::create(c, "gpushare-ann")?;
    let ben = TestUser::create(c, "gpushare-ben")?;
    let submit = |user: &TestUser, extra: &[&str]| {
        let out = format!("--output={}/%j.out", user.home.display());
        let mut args = vec![out.as_str()];
        args.extend_from_slice(extra);
        args.push(SHARE);
        user.sbatch(c, &args)
    };
    let anns: Vec<u32> = (0..4)
        .map(|_| submit(&ann, &["-w", "gpu01", "--gres=mps:10"]))
        .collect::<Result<_, _>>()?;
    wait_for("ann's four shares on gpu01", JOB_START, || {
        let held = shares(c, "gpu01");
        anns.iter().all(|id| held.contains_key(id)).then_some(())
    })?;
    let gpus: std::collections::BTreeSet<u32> = shares(c, "gpu01").into_values().collect();
    ensure(
        gpus.len() == 4,
        format!("ann's shares on GPUs {gpus:?} of gpu01"),
    )?;
    let blocker = c.sbatch_ok(&["-w", "gpu02", "--exclusive", "--wrap=sleep 300"])?;
    c.wait_job_state(blocker, &["RUNNING"], JOB_START)?;
    let id = submit(&ben, &["--gres=mps:30"])?;
    if slurm_places_shares() {
        c.wait_job_state(id, &["RUNNING"], JOB_LONG)?;
        return clean(c);
    }
    wait_for("ben's job to be sent off gpu01", JOB_LONG, || {
        let info = c.job(id).ok()?;
        info.get("ExcNodeList")?.contains("gpu01").then_some(info)
    })
    .and_then(|_| {
        let shown = ben.run_ok(c, None, "scontrol", &["show", "job", &id.to_string()])?;
        ensure(
            shown.contains("AdminComment=gpushare: requeued from gpu01"),
            format!("ben is not told why:\n{shown}"),
        )
    })?;
    c.run_ok("scancel", &[&blocker.to_string()])?;
    let info = c.wait_job_state(id, &["RUNNING"], JOB_LONG)?;
    ensure(
        info.get("NodeList") == Some("gpu02"),
        format!("ben's job runs on {:?}", info.get("NodeList")),
    )?;
    clean(c)
}

/// Each task of array `array` in `scontrol -o show job` (asked by the
/// array's id, it lists every task): task id → its fields.
pub(crate) fn array_tasks(
    c: &Cluster,
    array: u32,
) -> Result<BTreeMap<u32, BTreeMap<String, String>>, String> {
    let text = c.run_ok("scontrol", &["-o", "show", "job", &array.to_string()])?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let fields: BTreeMap<String, String> = line
                .split_whitespace()
                .filter_map(|w| w.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
            let task = fields.get("ArrayTaskId")?.parse().ok()?;
            Some((task, fields))
        })
        .collect())
}

/// ann holds a small share on every GPU of gpu01 (as in
/// [`sent_elsewhere`]). ben's array of three shares: tasks 0 and 1 run on
/// gpu02; task 2, the last to start, keeps the array's job id (Slurm
/// reuses the array's record) and may only go to gpu01, where it is
/// refused beside ann's servers and requeued by its epilog. Only that
/// task is requeued: `scontrol requeue <array id>` would requeue every
/// task, killing 0 and 1 and running them again.
pub(crate) fn array_task_sent_elsewhere(c: &mut Cluster) -> TestResult {
    if slurm_places_shares() {
        // Slurm's placement runs ben beside ann: nothing is refused.
        return Ok(());
    }
    let ann = TestUser::create(c, "gpushare-ann")?;
    let ben = TestUser::create(c, "gpushare-ben")?;
    let anns: Vec<u32> = (0..4)
        .map(|_| {
            ann.sbatch(
                c,
                &[
                    &format!("--output={}/%j.out", ann.home.display()),
                    "-w",
                    "gpu01",
                    "--gres=mps:10",
                    SHARE,
                ],
            )
        })
        .collect::<Result<_, _>>()?;
    wait_for("ann's four shares on gpu01", JOB_START, || {
        let held = shares(c, "gpu01");
        anns.iter().all(|id| held.contains_key(id)).then_some(())
    })?;
    let array = ben.sbatch(
        c,
        &[
            &format!("--output={}/%A_%a.out", ben.home.display()),
            "--hold",
            "--array=0-2",
            "-x",
            "gpu01,gpu03",
            "--gres=mps:30",
            SHARE,
        ],
    )?;
    for task in ["0", "1"] {
        c.run_ok("scontrol", &["release", &format!("{array}_{task}")])?;
    }
    let running = |tasks: &BTreeMap<u32, BTreeMap<String, String>>, task: u32| {
        tasks.get(&task).is_some_and(|f| {
            f.get("JobState").map(String::as_str) == Some("RUNNING")
                && f.get("NodeList").map(String::as_str) == Some("gpu02")
        })
    };
    let before = wait_for("ben's tasks 0 and 1 running on gpu02", JOB_START, || {
        let tasks = array_tasks(c, array).ok()?;
        (running(&tasks, 0) && running(&tasks, 1)).then_some(tasks)
    })?;
    // Only task 2 is left in the array's own record: it keeps the
    // array's id, and gpu01 is the one node it may start on.
    c.run_ok(
        "scontrol",
        &[
            "update",
            &format!("jobid={array}_2"),
            "ExcNodeList=gpu02,gpu03",
        ],
    )?;
    c.run_ok("scontrol", &["release", &format!("{array}_2")])?;
    let after = wait_for("ben's task 2 to be sent off gpu01", JOB_LONG, || {
        let tasks = array_tasks(c, array).ok()?;
        let last = tasks.get(&2)?;
        (last.get("ExcNodeList")?.contains("gpu01")
            && last.get("Restarts").map(String::as_str) == Some("1"))
        .then_some(tasks)
    })
    .map_err(|e| {
        format!(
            "{e}\ntasks: {:?}\nsyslog:\n{}",
            array_tasks(c, array),
            c.syslog()
        )
    })?;
    let last = after.get(&2).cloned().unwrap_or_default();
    ensure(
        last.get("JobId") == Some(&array.to_string())
            && last
                .get("AdminComment")
                .is_some_and(|a| a.contains("gpushare:")),
        format!("task 2 is not the array's record, or not told why: {last:?}"),
    )?;
    let untouched = |now: &BTreeMap<u32, BTreeMap<String, String>>, what: &str| {
        for task in [0, 1] {
            let f = now.get(&task).cloned().unwrap_or_default();
            ensure(
                running(now, task)
                    && f.get("Restarts").map(String::as_str) == Some("0")
                    && f.get("JobId") == before.get(&task).and_then(|b| b.get("JobId")),
                format!("task {task} was touched by {what}: {f:?}"),
            )?;
        }
        Ok::<(), String>(())
    };
    untouched(&after, "task 2's requeue")?;
    // One of ann's shares ends: its epilog gives task 2 its own
    // ExcNodeList back (named as the task too), and it starts on the GPU
    // that share left free.
    c.run_ok("scancel", &[&anns[0].to_string()])?;
    let back = wait_for("ben's task 2 to run on gpu01", JOB_LONG, || {
        let tasks = array_tasks(c, array).ok()?;
        let last = tasks.get(&2)?;
        (last.get("JobState").map(String::as_str) == Some("RUNNING")
            && last.get("NodeList").map(String::as_str) == Some("gpu01"))
        .then_some(tasks)
    })
    .map_err(|e| format!("{e}\ntasks: {:?}", array_tasks(c, array)))?;
    untouched(&back, "task 2's exclusion taken back")?;
    clean(c)
}

/// The value of `key` in `scontrol show job`'s answer, whole: each
/// comment field is a line of its own there (ended by a blank).
pub(crate) fn shown_line(c: &Cluster, id: u32, key: &str) -> Option<String> {
    let text = c
        .run_ok("scontrol", &["show", "job", &id.to_string()])
        .ok()?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix(key)?.strip_prefix('='))
        .map(str::to_owned)
}

/// As in [`sent_elsewhere`], ben's share can only start on gpu01, where
/// ann's servers refuse it. The site gave his job an `AdminComment`
/// before it started: gpushare leaves it whole, its words nowhere in it.
/// ben adds gpu03 to his `ExcNodeList` while his job waits. When one of
/// ann's shares ends, only gpu01 leaves his list: the job runs on gpu01,
/// still excluding gpu03, the site's comment as it was.
pub(crate) fn own_changes_survive_the_lift(c: &mut Cluster) -> TestResult {
    if slurm_places_shares() {
        // Slurm's placement runs ben beside ann: nothing is refused.
        return Ok(());
    }
    let (anns, blocker, ben) = only_gpu01_left(c)?;
    let id = ben.sbatch(
        c,
        &[
            &format!("--output={}/%j.out", ben.home.display()),
            "--hold",
            "--gres=mps:30",
            SHARE,
        ],
    )?;
    let site = "site: project 42";
    c.run_ok(
        "scontrol",
        &[
            "update",
            &format!("jobid={id}"),
            &format!("AdminComment={site}"),
        ],
    )?;
    c.run_ok("scontrol", &["release", &id.to_string()])?;
    let told = wait_for("ben's job to be sent off gpu01", JOB_LONG, || {
        let info = c.job(id).ok()?;
        (info.get("ExcNodeList") == Some("gpu01") && info.get("JobState") == Some("PENDING"))
            .then_some(())?;
        shown_line(c, id, "AdminComment")
    })
    .map_err(|e| format!("{e}\nsyslog:\n{}", c.syslog()))?;
    // The site's words are left whole: gpushare writes none after them.
    ensure(
        told == site,
        format!("the site's AdminComment is not left whole: {told:?}"),
    )?;
    ben.run_ok(
        c,
        None,
        "scontrol",
        &["update", &format!("jobid={id}"), "ExcNodeList=gpu01,gpu03"],
    )?;
    c.run_ok("scancel", &[&anns[0].to_string()])?;
    let info = c.wait_job_state(id, &["RUNNING"], JOB_LONG).map_err(|e| {
        format!(
            "{e}\nExcNodeList {:?}\nsyslog:\n{}",
            c.job(id)
                .ok()
                .and_then(|j| j.get("ExcNodeList").map(str::to_owned)),
            c.syslog()
        )
    })?;
    ensure(
        info.get("NodeList") == Some("gpu01") && info.get("ExcNodeList") == Some("gpu03"),
        format!(
            "ben's job runs on {:?} with ExcNodeList {:?}: his own gpu03 must stay",
            info.get("NodeList"),
            info.get("ExcNodeList")
        ),
    )?;
    // The site's words still whole after the lift.
    let comment = shown_line(c, id, "AdminComment");
    ensure(
        comment.as_deref() == Some(site),
        format!("the AdminComment after the lift is {comment:?}, not {site:?}"),
    )?;
    c.run_ok("scancel", &[&blocker.to_string()])?;
    clean(c)
}

/// ann holds a small share on every GPU of gpu01 and gpu02 is taken by an
/// exclusive job: a share of ben's can only start on gpu01, where ann's
/// servers refuse it. ann's jobs, the blocker, and ben.
pub(crate) fn only_gpu01_left(c: &Cluster) -> Result<(Vec<u32>, u32, TestUser), String> {
    let ann = TestUser::create(c, "gpushare-ann")?;
    let ben = TestUser::create(c, "gpushare-ben")?;
    let out = format!("--output={}/%j.out", ann.home.display());
    let anns: Vec<u32> = (0..4)
        .map(|_| ann.sbatch(c, &[&out, "-w", "gpu01", "--gres=mps:10", SHARE]))
        .collect::<Result<_, _>>()?;
    wait_for("ann's four shares on gpu01", JOB_START, || {
        let held = shares(c, "gpu01");
        anns.iter().all(|id| held.contains_key(id)).then_some(())
    })?;
    let blocker = c.sbatch_ok(&["-w", "gpu02", "--exclusive", "--wrap=sleep 300"])?;
    c.wait_job_state(blocker, &["RUNNING"], JOB_START)?;
    Ok((anns, blocker, ben))
}

/// gpu01's `gpu_mps.conf` as its prolog finds it: in its own `/etc/slurm`
/// (gpu01 runs configless).
pub(crate) const GPU01_CONF: &str = "/etc/slurm/gpu_mps.conf";

/// Runs gpu01's node timer (`gpu-mps metrics --write`) there: what it
/// said on stderr.
pub(crate) fn gpu01_timer(c: &Cluster) -> Result<String, String> {
    let conf = std::path::PathBuf::from(GPU01_CONF);
    let log = c.node_dir("gpu01").join("kernel-log");
    fs::write(&log, "").map_err(|e| format!("{}: {e}", log.display()))?;
    c.node_timer(Some("gpu01"), &conf, &log)
}

/// What must change on gpu01, as gpushare's words say it, for a share
/// refused beside another user's server, and on a disabled node.
pub(crate) const OTHER_USERS_GONE: &str =
    "a GPU there has room beside no MPS server of another user";
pub(crate) const ENABLED: &str = "its admin enables sharing there again";

/// gpushare's record of gpu01's exclusions, in what the node keeps across
/// reboots (`/var/lib/gpushare/kept-of-<StateDir>/requeued`).
pub(crate) fn gpu01_record(c: &Cluster) -> Result<std::path::PathBuf, String> {
    let kept = c.node_dir("gpu01").join("var-lib-gpushare");
    let dirs = fs::read_dir(&kept).map_err(|e| format!("{}: {e}", kept.display()))?;
    dirs.filter_map(|d| d.ok())
        .map(|d| d.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("kept-of-"))
        })
        .map(|d| d.join("requeued"))
        .ok_or_else(|| format!("no kept-of-* directory in {}", kept.display()))
}

/// Job `id`'s exclusion on gpu01 recorded at the epoch's start: as old as
/// any clock could make it.
pub(crate) fn age_exclusion(c: &Cluster, id: u32) -> TestResult {
    let record = gpu01_record(c)?;
    let text = fs::read_to_string(&record).map_err(|e| format!("{}: {e}", record.display()))?;
    let aged: String = text
        .lines()
        .map(|l| {
            let mut f: Vec<&str> = l.split('\t').collect();
            if let Some(since) = f.get_mut(2) {
                *since = "0";
            }
            format!("{}\n", f.join("\t"))
        })
        .collect();
    ensure(
        aged.starts_with(&format!("{id}\t1\t0\t")),
        format!("gpu01's record of job {id}'s exclusion: {text:?}"),
    )?;
    fs::write(&record, aged).map_err(|e| format!("{}: {e}", record.display()))
}

/// Job `id` pends, kept off gpu01 after `restarts` restarts.
pub(crate) fn kept_off_gpu01(c: &Cluster, id: u32, restarts: u32) -> TestResult {
    let info = c.job(id)?;
    ensure(
        info.get("JobState") == Some("PENDING")
            && info.get("ExcNodeList") == Some("gpu01")
            && info.get("Restarts") == Some(restarts.to_string().as_str()),
        format!("job {id} is no longer kept off gpu01 after {restarts} restart(s): {info:?}"),
    )
}

/// A share of ben's (30 units), sent off gpu01 and told, in its
/// `AdminComment`, that this counts nothing and what must change there
/// (`until`): its job id.
pub(crate) fn ben_sent_off_gpu01(c: &Cluster, ben: &TestUser, until: &str) -> Result<u32, String> {
    let out = format!("--output={}/%j.out", ben.home.display());
    let id = ben.sbatch(c, &[&out, "--gres=mps:30", SHARE])?;
    c.wait_sent_off(id, "gpu01", JOB_LONG)
        .map_err(|e| format!("{e}\nsyslog:\n{}", c.syslog()))?;
    let told = shown_line(c, id, "AdminComment").unwrap_or_default();
    ensure(
        told.contains("(not counted toward the 3)") && told.contains(&format!("until {until}")),
        format!("ben is not told what must change: {told:?}"),
    )?;
    Ok(id)
}

/// ben's share is sent off gpu01, where ann's servers hold every GPU. Its
/// exclusion outlives any clock (its record aged, the node timer run) and
/// the end of a share that frees no GPU of ann's server; it lifts when
/// one of ann's GPUs is free of her server: ben's job runs on gpu01,
/// requeued once.
pub(crate) fn lifts_with_its_cause(c: &mut Cluster) -> TestResult {
    if slurm_places_shares() {
        return Ok(());
    }
    let (anns, blocker, ben) = only_gpu01_left(c)?;
    let ann = TestUser::create(c, "gpushare-ann")?;
    let out = format!("--output={}/%j.out", ann.home.display());
    let fifth = ann.sbatch(c, &[&out, "-w", "gpu01", "--gres=mps:10", SHARE])?;
    c.wait_job_state(fifth, &["RUNNING"], JOB_START)?;
    let id = ben_sent_off_gpu01(c, &ben, OTHER_USERS_GONE)?;
    age_exclusion(c, id)?;
    let said = gpu01_timer(c)?;
    kept_off_gpu01(c, id, 1).map_err(|e| format!("{e}\ntimer: {said}"))?;
    // A share of ann's ends on a GPU where another of hers runs on.
    c.run_ok("scancel", &[&fifth.to_string()])?;
    c.wait_job_done(fifth, JOB_END)?;
    wait_for("gpu01 to release ann's fifth share", SHORT, || {
        (!shares(c, "gpu01").contains_key(&fifth)).then_some(())
    })?;
    kept_off_gpu01(c, id, 1).map_err(|e| format!("{e}\nsyslog:\n{}", c.syslog()))?;
    // One of ann's GPUs free of her server: ben's share fits there.
    c.run_ok("scancel", &[&anns[1].to_string()])?;
    let info = c
        .wait_job_state(id, &["RUNNING"], JOB_LONG)
        .map_err(|e| format!("{e}\nsyslog:\n{}", c.syslog()))?;
    ensure(
        info.get("NodeList") == Some("gpu01") && info.get("Restarts") == Some("1"),
        format!("ben's job after the lift: {info:?}"),
    )?;
    c.run_ok("scancel", &[&blocker.to_string()])?;
    clean(c)
}

/// Ten share jobs of ben's, more than gpu01 has room for beside ann's
/// servers, which end one by one, while gpu02 is taken: every one of
/// ben's jobs ends COMPLETED on gpu01, none FAILED by the requeue cap,
/// however often they were sent off (before, each share's end sent every
/// one back, to be refused again beside ann's remaining servers).
pub(crate) fn contention_completes(c: &mut Cluster) -> TestResult {
    if slurm_places_shares() {
        return Ok(());
    }
    let ann = TestUser::create(c, "gpushare-ann")?;
    let ben = TestUser::create(c, "gpushare-ben")?;
    let out = format!("--output={}/%j.out", ann.home.display());
    let anns: Vec<u32> = [20, 35, 50, 65]
        .iter()
        .map(|secs| {
            let wrap = format!("--wrap=sleep {secs}");
            ann.sbatch(c, &[&out, "-w", "gpu01", "--gres=mps:10", &wrap])
        })
        .collect::<Result<_, _>>()?;
    wait_for("ann's four shares on gpu01", JOB_START, || {
        let held = shares(c, "gpu01");
        anns.iter().all(|id| held.contains_key(id)).then_some(())
    })?;
    let blocker = c.sbatch_ok(&["-w", "gpu02", "--exclusive", "--wrap=sleep 600"])?;
    c.wait_job_state(blocker, &["RUNNING"], JOB_START)?;
    let out = format!("--output={}/%j.out", ben.home.display());
    let bens: Vec<u32> = (0..10)
        .map(|_| ben.sbatch(c, &[&out, "--gres=mps:40", "--wrap=sleep 3"]))
        .collect::<Result<_, _>>()?;
    // Each one's end as accounting keeps it (slurmctld forgets ended jobs
    // after MinJobAge), once none of them is queued any more and
    // slurmctld has handed slurmdbd all it knows: before, the record of a
    // refused run (FAILED until the job is requeued) may be the last one
    // accounting has.
    let ids: Vec<String> = bens.iter().map(u32::to_string).collect();
    let ids = ids.join(",");
    wait_for(
        "ben's ten jobs to leave the queue",
        std::time::Duration::from_secs(400),
        || {
            let queued = c
                .run_ok("squeue", &["-h", "-u", &ben.name, "-o", "%i"])
                .ok()?;
            queued.trim().is_empty().then_some(())
        },
    )
    .map_err(|e| format!("{e}\nsyslog:\n{}", c.syslog()))?;
    c.wait_accounting_sent(SHORT)?;
    let out = c.run_ok(
        "sacct",
        &["-X", "-n", "-P", "-o", "JobID,State", "-j", &ids],
    )?;
    let ended: BTreeMap<String, String> = out
        .lines()
        .filter_map(|l| l.split_once('|'))
        .map(|(j, s)| (j.to_owned(), s.to_owned()))
        .collect();
    ensure(
        ended.len() == bens.len(),
        format!("accounting knows {ended:?} of ben's jobs {ids}"),
    )?;
    // The jobs that did not complete lead the message (a summary line of
    // it may be all a reader gets), each with its comment and its lines
    // in the syslog.
    let bad: Vec<&String> = ended
        .iter()
        .filter(|(_, s)| s.as_str() != "COMPLETED")
        .map(|(j, _)| j)
        .collect();
    let why: Vec<String> = bad
        .iter()
        .map(|j| {
            let comment = c
                .run_ok(
                    "sacct",
                    &["-X", "-n", "-P", "-o", "State,AdminComment", "-j", j],
                )
                .unwrap_or_default();
            let job = format!("job {j}");
            let lines: Vec<String> = c
                .syslog()
                .lines()
                .filter(|l| l.contains(&job) || l.contains(&format!("job{j}")))
                .map(str::to_owned)
                .collect();
            format!("{j}: {}\n{}", comment.trim(), lines.join("\n"))
        })
        .collect();
    ensure(
        bad.is_empty(),
        format!(
            "ben's jobs {bad:?} did not complete: {}\nall: {ended:?}\nsyslog:\n{}",
            why.join("\n"),
            c.syslog()
        ),
    )?;
    c.run_ok("scancel", &[&blocker.to_string()])?;
    clean(c)
}

/// Runs `gpu-mps ARGS` on gpu01 with its gpu_mps.conf: what it said.
pub(crate) fn gpu01_mps(c: &Cluster, args: &[&str]) -> Result<std::process::Output, String> {
    let bin = testcluster::cluster::build_dir()?.join("gpu-mps");
    let args = [args, &["--conf", GPU01_CONF, "--node", "gpu01"]].concat();
    c.run_on("gpu01", &bin.to_string_lossy(), &args)
}

/// gpu01 is disabled (its mps still in Slurm's configuration) and gpu02
/// taken: ben's share goes to gpu01, is refused and sent off, not counted
/// toward the cap. However old its record and however often the node
/// timer or `gpu-mps disable` runs, it is not sent back to gpu01 (Slurm
/// would only send it there again): it waits, then runs on gpu02.
pub(crate) fn disabled_keeps_off(c: &mut Cluster) -> TestResult {
    let disabled = gpu01_mps(c, &["disable", "--reason", "driver update"])?;
    let result = (|| {
        ensure(
            disabled.status.success(),
            format!("gpu-mps disable: {disabled:?}"),
        )?;
        let blocker = c.sbatch_ok(&["-w", "gpu02", "--exclusive", "--wrap=sleep 300"])?;
        c.wait_job_state(blocker, &["RUNNING"], JOB_START)?;
        let ben = TestUser::create(c, "gpushare-ben")?;
        let id = ben_sent_off_gpu01(c, &ben, ENABLED)?;
        age_exclusion(c, id)?;
        for _ in 0..2 {
            gpu01_timer(c)?;
        }
        let again = gpu01_mps(c, &["disable"])?;
        let said = String::from_utf8_lossy(&again.stdout).into_owned();
        ensure(
            said.contains("stay kept off this node while Slurm books mps here"),
            format!("gpu-mps disable again: {again:?}"),
        )?;
        kept_off_gpu01(c, id, 1)?;
        c.run_ok("scancel", &[&blocker.to_string()])?;
        let info = c.wait_job_state(id, &["RUNNING"], JOB_LONG)?;
        ensure(
            info.get("NodeList") == Some("gpu02") && info.get("Restarts") == Some("1"),
            format!("ben's job: {info:?}"),
        )
    })();
    let enabled = gpu01_mps(c, &["enable"]);
    result?;
    ensure(
        enabled.as_ref().is_ok_and(|o| o.status.success()),
        format!("gpu-mps enable: {enabled:?}"),
    )?;
    clean(c)
}

/// ben's share is sent off gpu01 and runs on gpu02; while it runs there,
/// ann's share on gpu01 ends (room for it back), but Slurm keeps its
/// ExcNodeList while it runs: the record stays. Requeued (as a
/// preemption would), the job pends, and gpu01's next look gives gpu01
/// back: Slurm's record no longer keeps it off.
pub(crate) fn returns_after_running_elsewhere(c: &mut Cluster) -> TestResult {
    if slurm_places_shares() {
        return Ok(());
    }
    let (anns, blocker, ben) = only_gpu01_left(c)?;
    let id = ben_sent_off_gpu01(c, &ben, OTHER_USERS_GONE)?;
    c.run_ok("scancel", &[&blocker.to_string()])?;
    let info = c.wait_job_state(id, &["RUNNING"], JOB_LONG)?;
    ensure(
        info.get("NodeList") == Some("gpu02"),
        format!("ben's job: {info:?}"),
    )?;
    c.run_ok("scancel", &[&anns[0].to_string()])?;
    c.wait_job_done(anns[0], JOB_END)?;
    // gpu02 taken again, so that nothing but gpu01 can run it.
    let again = c.sbatch_ok(&["-w", "gpu02", "--exclusive", "--wrap=sleep 300"])?;
    c.run_ok("scontrol", &["requeue", &id.to_string()])?;
    c.wait_job_state(again, &["RUNNING"], JOB_LONG)?;
    gpu01_timer(c)?;
    let info = c
        .wait_job_state(id, &["RUNNING"], JOB_LONG)
        .map_err(|e| format!("{e}: {:?}\nsyslog:\n{}", c.job(id), c.syslog()))?;
    ensure(
        info.get("NodeList") == Some("gpu01")
            && !info.get("ExcNodeList").is_some_and(|l| l.contains("gpu01")),
        format!("ben's job after its requeue: {info:?}"),
    )?;
    c.run_ok("scancel", &[&again.to_string()])?;
    clean(c)
}

/// gpu01 is disabled and ben's share sent off it; gpu01 crashes and
/// reboots (its `/run`, gpushare's state directory, emptied). Its record
/// of the exclusion is kept: enabled again, gpu01 gives the job back, and
/// it runs there.
pub(crate) fn exclusions_outlive_a_reboot(c: &mut Cluster) -> TestResult {
    let disabled = gpu01_mps(c, &["disable", "--reason", "firmware"])?;
    let result = (|| {
        ensure(disabled.status.success(), format!("disable: {disabled:?}"))?;
        let blocker = c.sbatch_ok(&["-w", "gpu02", "--exclusive", "--wrap=sleep 300"])?;
        c.wait_job_state(blocker, &["RUNNING"], JOB_START)?;
        let ben = TestUser::create(c, "gpushare-ben")?;
        let id = ben_sent_off_gpu01(c, &ben, ENABLED)?;
        c.crash_node("gpu01")?;
        c.boot_node("gpu01")?;
        c.wait_nodes(&["gpu01".to_owned()], NODE_STATE)?;
        let enabled = gpu01_mps(c, &["enable"])?;
        let said = String::from_utf8_lossy(&enabled.stdout).into_owned();
        ensure(
            said.contains(&format!("job {id} may run here again")),
            format!("enable after the reboot gives nothing back: {enabled:?}"),
        )?;
        let info = c
            .wait_job_state(id, &["RUNNING"], JOB_LONG)
            .map_err(|e| format!("{e}: {:?}", c.job(id)))?;
        ensure(
            info.get("NodeList") == Some("gpu01"),
            format!("ben's job after the reboot: {info:?}"),
        )?;
        c.run_ok("scancel", &[&blocker.to_string()]).map(drop)
    })();
    let _ = gpu01_mps(c, &["enable"]);
    result?;
    clean(c)
}

/// Where Slurm places shares (per-GPU mps lines, `LL_SHARED_GRES`): the
/// GPU of gpu01 that Slurm gives a share on the idle node is set aside
/// (`gpu-mps drain-gpu`), and gpu02 is taken. ben's share, which only
/// gpu01 may take, is refused on Slurm's choice and kept off gpu01 while
/// that GPU stays aside, however much room the node's other GPUs have and
/// however often the node timer looks (each look used to let it back, and
/// Slurm chose the same GPU again: requeued without end, never run, never
/// failed). Once the GPU is resumed, the next look lets it back and it
/// runs on gpu01, requeued once.
pub(crate) fn slurms_choice_set_aside_is_not_sent_back(c: &mut Cluster) -> TestResult {
    if !slurm_places_shares() {
        // gpushare places: it never chooses a GPU set aside.
        return Ok(());
    }
    let ben = TestUser::create(c, "gpushare-ben")?;
    let blocker = c.sbatch_ok(&["-w", "gpu02", "--exclusive", "--wrap=sleep 300"])?;
    c.wait_job_state(blocker, &["RUNNING"], JOB_START)?;
    let out = format!("--output={}/%j.out", ben.home.display());
    let probe = ben.sbatch(c, &[&out, "--gres=mps:30", SHARE])?;
    let gpu = wait_for("ben's first share on gpu01", JOB_START, || {
        shares(c, "gpu01").get(&probe).copied()
    })?;
    c.run_ok("scancel", &[&probe.to_string()])?;
    c.wait_job_done(probe, JOB_END)?;
    wait_for("gpu01 to release ben's first share", SHORT, || {
        (!shares(c, "gpu01").contains_key(&probe)).then_some(())
    })?;
    let gpu_mps = testcluster::cluster::build_dir()?.join("gpu-mps");
    let gpu_mps = gpu_mps.to_string_lossy();
    let on_gpu01 = |args: &[&str]| -> TestResult {
        let out = c.run_on("gpu01", &gpu_mps, args)?;
        ensure(
            out.status.success(),
            format!(
                "gpu-mps {args:?} on gpu01: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let gpu = gpu.to_string();
    on_gpu01(&["drain-gpu", &gpu, "--reason", "fan", "--conf", GPU01_CONF])?;
    let id = ben.sbatch(c, &[&out, "--gres=mps:30", SHARE])?;
    c.wait_sent_off(id, "gpu01", JOB_LONG)
        .map_err(|e| format!("{e}\nsyslog:\n{}", c.syslog()))?;
    for look in 1..=3 {
        let said = gpu01_timer(c)?;
        kept_off_gpu01(c, id, 1)
            .map_err(|e| format!("{e}\nafter the timer's look {look}: {said}"))?;
    }
    on_gpu01(&["resume-gpu", &gpu, "--conf", GPU01_CONF])?;
    let said = gpu01_timer(c)?;
    let info = c
        .wait_job_state(id, &["RUNNING"], JOB_LONG)
        .map_err(|e| format!("{e}\ntimer: {said}\nsyslog:\n{}", c.syslog()))?;
    ensure(
        info.get("NodeList") == Some("gpu01") && info.get("Restarts") == Some("1"),
        format!("ben's job after GPU {gpu} came back: {info:?}"),
    )?;
    c.run_ok("scancel", &[&blocker.to_string()])?;
    clean(c)
}
