//! The levels Slurm counts a typed GrpTRES at: the job's QOS (named or
//! fallen back to), its partition's QOS and its association's accounts,
//! and levels no rule names. A module of `gpu_qos.rs` (its helpers), in a
//! file of its own.

use super::*;

/// Slurm counts a job against a typed GrpTRES at the job's QOS (named or
/// fallen back to), its partition's QOS and its association's accounts; an
/// untyped request escapes each. The plugin names the level it refuses at,
/// and a typed job is counted where Slurm's own books say.
pub(crate) fn every_level(c: &mut Cluster) -> TestResult {
    let sacctmgr = |args: &[&str]| c.run_ok("sacctmgr", args).map(drop);
    // The default QOS: dora belongs to the lafferty group by default.
    let dora = TestUser::create(c, "dora")?;
    dora.allow_qos_by_default(c, &["normal", "qos_lafferty"], "qos_lafferty")?;
    // A partition whose QOS carries the typed limit.
    sacctmgr(&["-i", "add", "qos", "part_a40", "GrpTRES=gres/gpu:a40=8"])?;
    c.run_ok(
        "scontrol",
        &[
            "create",
            "PartitionName=a40only",
            "Nodes=ALL",
            "QOS=part_a40",
            "State=UP",
        ],
    )?;
    // An account limit, inherited by a sub-account.
    sacctmgr(&["-i", "add", "account", "lafferty", "cluster=gpushare"])?;
    sacctmgr(&[
        "-i",
        "add",
        "account",
        "lafferty_students",
        "parent=lafferty",
        "cluster=gpushare",
    ])?;
    sacctmgr(&[
        "-i",
        "modify",
        "account",
        "where",
        "name=lafferty",
        "set",
        "GrpTRES=gres/gpu:a40=4",
    ])?;
    let eve = TestUser::create(c, "eve")?;
    sacctmgr(&[
        "-i",
        "add",
        "user",
        "eve",
        "account=lafferty_students",
        "cluster=gpushare",
    ])?;
    // Two types with their own limits in one QOS.
    sacctmgr(&[
        "-i",
        "add",
        "qos",
        "qos_pair",
        "GrpTRES=gres/gpu:a40=4,gres/gpu:h100=1",
    ])?;
    sacctmgr(&[
        "-i",
        "modify",
        "user",
        "where",
        "name=eve",
        "set",
        "qos+=qos_pair",
    ])?;

    let conf = format!(
        "{EXAMPLE_GPU_QOS_CONF}\n\
         QOS=qos_pair GPUTypes=a40,h100 GPULimit=a40:4,h100:1\n\
         Partition=a40only GPUTypes=a40 GPULimit=8\n\
         Account=lafferty GPUTypes=a40 GPULimit=4\n"
    );
    install_conf(c, &conf)?;
    // Only the new file's Partition= rule refuses a typed h100 request
    // there: an untyped one is refused as soon as the plugin's partition
    // map sees a40only's QOS, typed limit and no rule (the file before).
    let result = wait_for("the policy with every level to apply", SHORT, || {
        rejected(c, &["-p", "a40only", "--gres=gpu:h100:1"])
            .ok()
            .filter(|e| e.contains("does not cover GPU type h100"))
    })
    .and_then(|_| judge_every_level(c, &dora, &eve));
    install_conf(c, EXAMPLE_GPU_QOS_CONF)?;
    let admin = result.and_then(|()| admin_sees_every_level(c));
    let _ = c.run("scontrol", &["delete", "PartitionName=a40only"]);
    let _ = sacctmgr(&[
        "-i",
        "modify",
        "account",
        "where",
        "name=lafferty",
        "set",
        "GrpTRES=gres/gpu:a40=-1",
    ]);
    let _ = sacctmgr(&["-i", "delete", "qos", "part_a40,qos_pair"]);
    admin
}

/// With the example policy back (no Partition= or Account= rule), the
/// admin commands name the levels left open: check and audit find the
/// account's typed limit without its rule, generate writes both rules.
pub(crate) fn admin_sees_every_level(c: &Cluster) -> TestResult {
    let gpu_qos = testcluster::cluster::build_dir()?.join("gpu-qos");
    let gpu_qos = gpu_qos.to_string_lossy();
    let conf = conf_path(c);
    let check = c.run(&gpu_qos, &["check", "--conf", &conf.to_string_lossy()])?;
    let text = String::from_utf8_lossy(&check.stdout).into_owned();
    ensure(
        check.status.code() == Some(1),
        format!("check exit {:?}:\n{text}", check.status.code()),
    )?;
    contains_all(
        &text,
        &[
            "account lafferty: GrpTRES says gres/gpu:a40=4",
            "add Account=lafferty GPUTypes=a40 GPULimit=4",
        ],
    )?;
    let audit = c.run_ok(&gpu_qos, &["audit", "--fail-on", "note", "--json"]);
    let audit = audit.unwrap_or_else(|e| e);
    contains_all(
        &audit,
        &["partition_qos_unenforced", "unlisted_typed_association"],
    )?;
    let generated = c.run_ok(&gpu_qos, &["generate"])?;
    contains_all(
        &generated,
        &[
            "Partition=a40only GPUTypes=a40 GPULimit=8",
            "Account=lafferty GPUTypes=a40 GPULimit=4",
            "QOS=qos_pair GPUTypes=a40,h100 GPULimit=a40:4,h100:1",
        ],
    )
}

pub(crate) fn judge_every_level(c: &Cluster, dora: &TestUser, eve: &TestUser) -> TestResult {
    // Default QOS, no --qos: the plugin sees what slurmctld falls back to.
    let err = user_rejected(c, dora, &["--gres=gpu:2"], "Your default QOS qos_lafferty")?;
    contains_all(&err, &["--gres=gpu:a40:2", "qos_lafferty may use a40"])?;
    let err = user_rejected(c, dora, &["--gpus=a40:5"], "can never start")?;
    contains_all(&err, &["qos_lafferty allows at most 4"])?;
    // The typed job runs under the default QOS, counted against its typed
    // limit in slurmctld's own books.
    let id = dora.sbatch(c, &["--gres=gpu:a40:2", "--wrap=sleep 120"])?;
    let job = c.wait_job_state(id, &["RUNNING"], JOB_START)?;
    ensure(
        job.get("QOS") == Some("qos_lafferty"),
        format!("dora's job runs under {:?}", job.get("QOS")),
    )?;
    let counted = counted_in_assoc_mgr(c, "qos_lafferty", &["gres/gpu:a40=4(2)"]);
    c.run_ok("scancel", &[&id.to_string()])?;
    counted?;

    // The partition's QOS, named with -p.
    let err = rejected(c, &["-p", "a40only", "--gres=gpu:1"])?;
    contains_all(&err, &["Partition a40only's QOS", "--gres=gpu:a40:1"])?;
    let err = rejected(c, &["-p", "a40only", "--gres=gpu:h100:1"])?;
    contains_all(
        &err,
        &[
            "does not cover GPU type h100",
            "use a partition that has h100",
        ],
    )?;
    let typed = c.sbatch_ok(&["-p", "a40only", "--gres=gpu:a40:1", "--wrap=sleep 120"])?;
    c.wait_job_state(typed, &["RUNNING"], JOB_START)?;
    let counted = counted_in_assoc_mgr(c, "part_a40", &["gres/gpu:a40=8(1)"]);
    let usage = dora_usage(c);
    c.run_ok("scancel", &[&typed.to_string()])?;
    counted?;
    contains_all(
        &usage?,
        &["partition a40only (its QOS part_a40): 1 of 8 a40 held (by every job in the partition)"],
    )?;

    // The account's limit, for a job of a sub-account.
    let err = user_rejected(
        c,
        eve,
        &["-A", "lafferty_students", "--gres=gpu:1"],
        "Account lafferty's GPU limit",
    )?;
    contains_all(&err, &["--gres=gpu:a40:1"])?;
    let err = user_rejected(
        c,
        eve,
        &["-A", "lafferty_students", "--gres=gpu:a40:5"],
        "account lafferty allows at most 4",
    )?;
    // The account's limit is named as such: another QOS would not help.
    contains_all(
        &err,
        &[
            "can never start",
            "(its GrpTRES, shared by every job of the account and its sub-accounts)",
            "raise account lafferty's: another QOS does not lift it",
        ],
    )?;
    ensure(
        !err.contains("use a QOS with a larger limit"),
        format!("a QOS advised for an account's limit:\n{err}"),
    )?;
    let ok = eve.sbatch(
        c,
        &[
            "-H",
            "-A",
            "lafferty_students",
            "--gres=gpu:a40:2",
            "--wrap=true",
        ],
    )?;
    c.run_ok("scancel", &[&ok.to_string()])?;
    // A type an update gives the sub-account's job, where the account's
    // rule permits a40 only: held, in slurmctld's record, as at submission.
    let pending = eve.sbatch(
        c,
        &[
            "--begin=now+3600",
            "-A",
            "lafferty_students",
            "--gres=gpu:a40:1",
            "--wrap=true",
        ],
    )?;
    let out = eve.run(
        c,
        None,
        "scontrol",
        &["update", &format!("JobId={pending}"), "Gres=gpu:h100:1"],
    )?;
    let shown = |id: u32| {
        c.run_ok("scontrol", &["-o", "show", "job", &id.to_string()])
            .unwrap_or_default()
    };
    let held_as_account = wait_for("the sub-account's job given h100 to be held", SHORT, || {
        let text = shown(pending);
        (text.contains(" Reason=JobHeldAdmin ")
            && text.contains(
                " AdminComment=gpushare: held: GPU type h100 is not one account lafferty may use (a40)",
            ))
        .then_some(())
    })
    .map_err(|e| format!("{e} (the update: {out:?}): {}", shown(pending)));
    c.run_ok("scancel", &[&pending.to_string()])?;
    held_as_account?;

    // The account's limit and its use, as gpu-qos metrics reports them.
    let held = eve.sbatch(
        c,
        &[
            "-A",
            "lafferty_students",
            "--gres=gpu:a40:2",
            "--wrap=sleep 120",
        ],
    )?;
    c.wait_job_state(held, &["RUNNING"], JOB_START)?;
    let gpu_qos = testcluster::cluster::build_dir()?.join("gpu-qos");
    let gpu_qos = gpu_qos.to_string_lossy();
    let mut last = String::new();
    let reported = wait_for("the account's GPUs in gpu-qos metrics", SHORT, || {
        last = c.run_ok(&gpu_qos, &["metrics"]).unwrap_or_else(|e| e);
        (last.contains("gpushare_account_gpus_in_use{account=\"lafferty\",gpu_type=\"a40\"} 2")
            && last
                .contains("gpushare_account_gpus_limit{account=\"lafferty\",gpu_type=\"a40\"} 4"))
        .then_some(())
    });
    let usage = eve.run_ok(c, None, &gpu_qos, &["usage"]);
    // A job the account's limit has no room for: gpu-qos why names the
    // parent account that is full.
    let waiting = eve.sbatch(
        c,
        &["-A", "lafferty_students", "--gres=gpu:a40:3", "--wrap=true"],
    )?;
    let why = c
        .wait_job_reason(waiting, "AssocGrpGRES", JOB_START)
        .and_then(|_| eve.why(c, waiting, "AssocGrpGRES"));
    c.run_ok("scancel", &[&waiting.to_string()])?;
    c.run_ok("scancel", &[&held.to_string()])?;
    contains_all(
        &why?.summary,
        &["waits for account lafferty's GPU limit: 2 of 4 a40 held"],
    )?;
    reported.map_err(|e| format!("{e}:\n{last}"))?;
    // eve sees her parent account's limit in gpu-qos usage.
    contains_all(
        &usage?,
        &["account lafferty: 2 of 4 a40 held (by every job of the account and its sub-accounts)"],
    )?;

    // Each type of a two-type QOS has its own limit.
    let err = user_rejected(
        c,
        eve,
        &["--qos=qos_pair", "--gres=gpu:h100:2"],
        "qos_pair allows at most 1",
    )?;
    contains_all(&err, &["asks 2 h100"])?;
    let ok = eve.sbatch(
        c,
        &["-H", "--qos=qos_pair", "--gres=gpu:a40:3", "--wrap=true"],
    )?;
    c.run_ok("scancel", &[&ok.to_string()])?;

    // Moving eve's untyped job into the limited account is refused.
    let untyped = eve.sbatch(c, &["-H", "--gres=gpu:1", "--wrap=true"])?;
    let out = c.run(
        "scontrol",
        &[
            "update",
            &format!("job={untyped}"),
            "Account=lafferty_students",
        ],
    )?;
    let moved = c.job(untyped)?.get("Account").map(str::to_owned);
    c.run_ok("scancel", &[&untyped.to_string()])?;
    ensure(
        !out.status.success() && moved.as_deref() == Some("research"),
        format!("an untyped job was moved into account lafferty_students (now {moved:?})"),
    )?;

    // Moving a job into the partition needs the typed request in the update.
    let id = accepted(c, &["--gres=gpu:a40:1"])?;
    let job = format!("job={id}");
    let out = c.run("scontrol", &["update", &job, "Partition=a40only"])?;
    ensure(
        !out.status.success(),
        "moving a job into a partition with a rule without a typed request was accepted",
    )?;
    c.run_ok(
        "scontrol",
        &["update", &job, "Partition=a40only", "Gres=gpu:a40:1"],
    )?;
    ensure(
        c.job(id)?.get("Partition") == Some("a40only"),
        "typed move did not apply",
    )?;
    c.run_ok("scancel", &[&id.to_string()]).map(drop)
}

/// A partition QOS and an account whose limits in the database are typed
/// and that gpu_qos.conf (the example's: QOS rules only) has no rule for:
/// untyped requests there are refused all the same, and no update (a
/// blank QOS=, a partition, an account) takes an untyped job into a
/// level whose limits are typed.
pub(crate) fn unruled_levels(c: &mut Cluster) -> TestResult {
    let sacctmgr = |args: &[&str]| c.run_ok("sacctmgr", args).map(drop);
    sacctmgr(&["-i", "add", "qos", "part_grp", "GrpTRES=gres/gpu:a40=2"])?;
    c.run_ok(
        "scontrol",
        &[
            "create",
            "PartitionName=grp_a40",
            "Nodes=ALL",
            "QOS=part_grp",
            "State=UP",
        ],
    )?;
    sacctmgr(&["-i", "add", "account", "grp_acct", "cluster=gpushare"])?;
    sacctmgr(&[
        "-i",
        "modify",
        "account",
        "where",
        "name=grp_acct",
        "set",
        "GrpTRES=gres/gpu:a40=2",
    ])?;
    let fay = TestUser::create(c, "fay")?;
    sacctmgr(&[
        "-i",
        "add",
        "user",
        "fay",
        "account=grp_acct",
        "cluster=gpushare",
    ])?;
    // gil falls back to the group QOS, as the lafferty group's users do.
    let gil = TestUser::create(c, "gil")?;
    gil.allow_qos_by_default(c, &["normal", "qos_lafferty"], "qos_lafferty")?;
    let result = judge_unruled_levels(c, &fay, &gil);
    let _ = c.run("scontrol", &["delete", "PartitionName=grp_a40"]);
    let _ = sacctmgr(&["-i", "delete", "user", "fay", "account=grp_acct"]);
    let _ = sacctmgr(&["-i", "delete", "account", "grp_acct"]);
    let _ = sacctmgr(&["-i", "delete", "qos", "part_grp"]);
    result
}

pub(crate) fn judge_unruled_levels(c: &Cluster, fay: &TestUser, gil: &TestUser) -> TestResult {
    // The partition's QOS: slurmctld's partitions are read again within
    // a few seconds of a change.
    let mut last = String::new();
    wait_for(
        "the new partition's typed QOS to be judged",
        SHORT,
        || match rejected(c, &["-p", "grp_a40", "--qos=normal", "--gres=gpu:1"]) {
            Ok(err) => Some(err),
            Err(e) => {
                last = e;
                None
            }
        },
    )
    .map_err(|e| format!("{e}: {last}"))
    .and_then(|err| {
        contains_all(
            &err,
            &[
                "Partition grp_a40's QOS has a GPU limit by type in Slurm's accounting (a40)",
                "--gres=gpu:a40:1",
            ],
        )
    })?;
    let typed = accepted(c, &["-p", "grp_a40", "--qos=normal", "--gres=gpu:a40:1"])?;
    c.run_ok("scancel", &[&typed.to_string()])?;
    // The account's limit.
    let err = user_rejected(
        c,
        fay,
        &["-A", "grp_acct", "--gres=gpu:1"],
        "Account grp_acct has a GPU limit by type",
    )?;
    contains_all(&err, &["--gres=gpu:a40:1"])?;
    // Said once in slurmctld's log, with the rule to add.
    let said = "add `Account=grp_acct GPUTypes=a40`";
    wait_for("the missing rule in slurmctld.log", SHORT, || {
        c.log("slurmctld").contains(said).then_some(())
    })?;
    let err = user_rejected(
        c,
        fay,
        &["-A", "grp_acct", "--gpus=2"],
        "Account grp_acct has a GPU limit by type",
    )?;
    contains_all(&err, &["--gpus=a40:2"])?;
    let times = c.log("slurmctld").matches(said).count();
    ensure(times == 1, format!("the missing rule logged {times} times"))?;

    // A blank QOS= as the job's own user: Slurm would move the job to
    // gil's default QOS, the group QOS, untyped.
    let untyped = gil.sbatch(c, &["-H", "--qos=normal", "--gres=gpu:2", "--wrap=true"])?;
    let job = format!("job={untyped}");
    let out = gil.run(c, None, "scontrol", &["update", &job, "QOS="])?;
    let blank = c.job(untyped)?;
    c.run_ok("scancel", &[&untyped.to_string()])?;
    ensure(
        !out.status.success() && blank.get("QOS") == Some("normal"),
        format!(
            "QOS= (blank) moved an untyped job to {:?} (exit {}): {}",
            blank.get("QOS"),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    )?;
    // fay's untyped job of her default account, moved by her into the
    // typed partition or her typed account, or by root (an admin fixing
    // a job) into both at once.
    let untyped = fay.sbatch(c, &["-H", "--gres=gpu:1", "--wrap=true"])?;
    let job = format!("job={untyped}");
    let moves = [
        fay.run(c, None, "scontrol", &["update", &job, "Partition=grp_a40"])?,
        fay.run(c, None, "scontrol", &["update", &job, "Account=grp_acct"])?,
        c.run(
            "scontrol",
            &["update", &job, "Partition=grp_a40", "Account=grp_acct"],
        )?,
    ];
    let after = c.job(untyped)?;
    c.run_ok("scancel", &[&untyped.to_string()])?;
    ensure(
        moves.iter().all(|m| !m.status.success())
            && after.get("Partition") != Some("grp_a40")
            && after.get("Account") != Some("grp_acct"),
        format!(
            "an untyped job was moved into a typed level: Partition={:?} Account={:?}",
            after.get("Partition"),
            after.get("Account")
        ),
    )?;
    // Naming the QOS works, with the typed request its rule wants.
    let typed = gil.sbatch(
        c,
        &["-H", "--qos=normal", "--gres=gpu:a40:1", "--wrap=true"],
    )?;
    let job = format!("job={typed}");
    gil.run_ok(
        c,
        None,
        "scontrol",
        &["update", &job, "QOS=qos_lafferty", "Gres=gpu:a40:1"],
    )?;
    let moved = c.job(typed)?.get("QOS").map(str::to_owned);
    c.run_ok("scancel", &[&typed.to_string()])?;
    ensure(
        moved.as_deref() == Some("qos_lafferty"),
        format!("the named, typed move left the job in {moved:?}"),
    )
}

/// `gpu-qos usage` as dora (any user sees the partitions' limits).
pub(crate) fn dora_usage(c: &Cluster) -> Result<String, String> {
    let gpu_qos = testcluster::cluster::build_dir()?.join("gpu-qos");
    let dora = TestUser::create(c, "dora")?;
    dora.run_ok(c, None, &gpu_qos.to_string_lossy(), &["usage"])
}
