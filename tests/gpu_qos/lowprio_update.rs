//! What `LowPriorityQOS=` forces on a job, kept through its owner's
//! updates that name no QOS.

use super::*;

/// `ArrayTaskThrottle=0` on a low-priority array: slurmctld applies it
/// before job_submit is asked, so gpu_qos reads the array back and sets
/// its cap again; another QOS's array keeps the throttle its user gave.
pub(super) fn lowprio_array_throttle_is_set_back(c: &mut Cluster) -> TestResult {
    let user = TestUser::create(c, "gpushare_lpu")?;
    user.allow_qos_by_default(c, &["normal", "lowprio"], "normal")?;
    let array = |qos: &str| -> Result<u32, String> {
        user.sbatch(
            c,
            &[
                "-H",
                "-o",
                "/dev/null",
                &format!("--qos={qos}"),
                "--array=0-19",
                "--gres=gpu:a40:1",
                "--wrap=true",
            ],
        )
    };
    // Read where Slurm prints it (a job's name may hold the word itself).
    let throttle = |id: u32| c.array_throttle(id);
    let low = array("lowprio")?;
    let normal = array("normal")?;
    ensure(
        throttle(low)? == "8",
        format!("lowprio array throttle at submission: {}", throttle(low)?),
    )?;
    let update = |id: u32, value: &str| -> Result<String, String> {
        user.run_ok(
            c,
            None,
            "scontrol",
            &[
                "update",
                &format!("JobId={id}"),
                &format!("ArrayTaskThrottle={value}"),
            ],
        )
    };
    // The other array first: its read-back is done before the lowprio
    // one's, which the wait below sees.
    update(normal, "30")?;
    update(low, "0")?;
    wait_for(
        "the lowprio array's throttle to be set back to 8",
        SHORT,
        || {
            (throttle(low).ok()? == "8"
                && c.log("slurmctld").contains(&format!(
                "array {low} runs under a low-priority QOS: an update lifted its throttle, set \
                 back to 8"
            )))
            .then_some(())
        },
    )?;
    ensure(
        throttle(normal)? == "30",
        format!(
            "a normal array's own throttle was changed: {}",
            throttle(normal)?
        ),
    )?;
    // Within the cap, the user's own tighter throttle stays.
    update(low, "3")?;
    ensure(
        throttle(low)? == "3",
        format!("a tighter throttle was not kept: {}", throttle(low)?),
    )?;
    // Values slurmctld reads as 0 or above the cap (strtoll), an array
    // named by its tasks, and a name that holds ` QOS=normal` before
    // Slurm's own QOS= in scontrol's line: each set back.
    let named = user.sbatch(
        c,
        &[
            "-H",
            "-o",
            "/dev/null",
            "--qos=lowprio",
            "--array=0-19",
            "-J",
            "x QOS=normal ArrayTaskThrottle=8",
            "--gres=gpu:a40:1",
            "--wrap=true",
        ],
    )?;
    let set_back = |id: u32, name: &str, value: &str| -> TestResult {
        user.run_ok(
            c,
            None,
            "scontrol",
            &[
                "update",
                &format!("JobId={name}"),
                &format!("ArrayTaskThrottle={value}"),
            ],
        )?;
        wait_for(
            &format!("array {id}'s throttle, made {value:?} by job={name}, set back to 8"),
            SHORT,
            || (throttle(id).ok()? == "8").then_some(()),
        )
        .map_err(|e| format!("{e} (now {:?})", throttle(id)))
    };
    for value in ["0x", "+0", "100abc", "4294967296"] {
        set_back(low, &low.to_string(), value)?;
    }
    // By its tasks: 22.05 and 23.02 apply it; from 23.11 slurmctld
    // refuses it ("only allowed on ArrayJobId"), and the cap stays.
    let tasks = format!("{low}_[0-19]");
    let out = user.run(
        c,
        None,
        "scontrol",
        &["update", &format!("JobId={tasks}"), "ArrayTaskThrottle=0"],
    )?;
    let refused = String::from_utf8_lossy(&out.stderr).contains("only allowed on ArrayJobId");
    if out.status.success() {
        wait_for(
            "the throttle an update by the array's tasks lifted to be set back",
            SHORT,
            || (throttle(low).ok()? == "8").then_some(()),
        )?;
    } else {
        ensure(
            refused && throttle(low)? == "8",
            format!(
                "job={tasks} ArrayTaskThrottle=0: {out:?}, throttle {:?}",
                throttle(low)
            ),
        )?;
    }
    set_back(named, &named.to_string(), "0")?;
    // An operator's throttle stands: root raises the named array's; then
    // the user lifts the other's, which the reading thread takes after
    // root's had it been queued; once that one is set back, root's 30 is
    // still there.
    c.run_ok(
        "scontrol",
        &["update", &format!("JobId={named}"), "ArrayTaskThrottle=30"],
    )?;
    set_back(low, &low.to_string(), "0")?;
    ensure(
        throttle(named)? == "30",
        format!("root's throttle was set back: {}", throttle(named)?),
    )?;
    c.run_ok(
        "scancel",
        &[&low.to_string(), &normal.to_string(), &named.to_string()],
    )
    .map(drop)
}

/// `scontrol update job=J Gres=gpu:h100:1` names no QOS, so the plugin
/// cannot judge it by the job's own QOS when it is asked: the job is read
/// back once the update is done. A pending `qos_lafferty` job (a40 only)
/// given h100 is held as an administrator holds it, told why in its
/// `AdminComment`; its user cannot release it; the update back to a40
/// releases it. A `normal` job given h100 is left alone.
pub(super) fn a_type_given_by_update_is_held_to_its_qos(c: &mut Cluster) -> TestResult {
    let user = TestUser::create(c, "gpushare_tyu")?;
    user.allow_qos_by_default(c, &["normal", "qos_lafferty"], "normal")?;
    let submit = |qos: &str| {
        user.sbatch(
            c,
            &[
                "--begin=now+3600",
                "-o",
                "/dev/null",
                &format!("--qos={qos}"),
                "--gres=gpu:a40:1",
                "--wrap=true",
            ],
        )
    };
    let update = |id: u32, gres: &str| -> Result<std::process::Output, String> {
        user.run(
            c,
            None,
            "scontrol",
            &["update", &format!("JobId={id}"), &format!("Gres={gres}")],
        )
    };
    let shown = |id: u32| -> String {
        c.run_ok("scontrol", &["-o", "show", "job", &id.to_string()])
            .unwrap_or_default()
    };
    let held = |id: u32| shown(id).contains(" Reason=JobHeldAdmin ");
    let normal = submit("normal")?;
    let group = submit("qos_lafferty")?;
    // The normal job's update first: the reading thread takes it before
    // the group job's, whose hold the wait below sees.
    for (id, what) in [(normal, "normal"), (group, "qos_lafferty")] {
        let out = update(id, "gpu:h100:1")?;
        ensure(
            out.status.success(),
            format!("the {what} job's update to h100 was refused: {out:?}"),
        )?;
    }
    wait_for("the qos_lafferty job given h100 to be held", SHORT, || {
        let text = shown(group);
        (text.contains(" Reason=JobHeldAdmin ")
            && text.contains(" AdminComment=gpushare: held: GPU type h100 is not one QOS qos_lafferty may use (a40)"))
        .then_some(())
    })
    .map_err(|e| format!("{e}: {}", shown(group)))?;
    ensure(
        !held(normal),
        format!("the normal job was held: {}", shown(normal)),
    )?;
    let release = user.run(c, None, "scontrol", &["release", &group.to_string()])?;
    ensure(
        !release.status.success() && held(group),
        format!("its user released gpushare's hold: {release:?}"),
    )?;
    let out = update(group, "gpu:a40:1")?;
    ensure(
        out.status.success(),
        format!("the update back to a40: {out:?}"),
    )?;
    wait_for("the job back on a40 to be released", SHORT, || {
        let text = shown(group);
        (!text.contains("JobHeldAdmin") && !text.contains("gpushare: held")).then_some(())
    })
    .map_err(|e| format!("{e}: {}", shown(group)))?;
    c.run_ok("scancel", &[&normal.to_string(), &group.to_string()])
        .map(drop)
}

/// Another user's `ArrayTaskThrottle=`: Slurm 22.05 applies it before it
/// checks who asks (`_update_job`; 23.02 checks first), answering only
/// "Invalid user id". gpu_qos refuses it too, and its log line says what
/// Slurm did and who asked (22.05's job_modify has no message slot to
/// tell the requester). A coordinator of the owner's account may change it on every
/// release.
pub(super) fn another_users_throttle_is_refused_and_logged(c: &mut Cluster) -> TestResult {
    let owner = TestUser::create(c, "gpushare_tho")?;
    let other = TestUser::create(c, "gpushare_thx")?;
    let coordinator = TestUser::create(c, "gpushare_thc")?;
    let array = owner.sbatch(
        c,
        &["-H", "-o", "/dev/null", "--array=0-9%4", "--wrap=true"],
    )?;
    let update = |who: &TestUser, value: &str| {
        who.run(
            c,
            None,
            "scontrol",
            &[
                "update",
                &format!("JobId={array}"),
                &format!("ArrayTaskThrottle={value}"),
            ],
        )
    };
    let out = update(&other, "1")?;
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    ensure(
        !out.status.success(),
        format!("another user's throttle was accepted: {said}"),
    )?;
    let logged = format!(
        "uid {} (gpushare_thx) set ArrayTaskThrottle=1 on job {array} of another user",
        other.uid
    );
    if testcluster::cluster::slurm_release() < (23, 2) {
        // 22.05 gives job_modify no message slot: the requester reads
        // Slurm's words for the code, the log says the rest.
        contains_all(&said, &["Invalid user id"])?;
        contains_all(
            &c.log("slurmctld"),
            &[
                &logged,
                &format!("job {array} belongs to another user (uid {})", owner.uid),
                "Slurm 22.05 has nevertheless set it to 1",
            ],
        )?;
        // What gpu_qos cannot undo, as its words say.
        ensure(
            c.array_throttle(array)? == "1",
            format!("22.05's throttle: {}", c.array_throttle(array)?),
        )?;
    } else {
        // Refused by Slurm before any plugin: nothing changed, nothing logged.
        ensure(
            c.array_throttle(array)? == "4" && !c.log("slurmctld").contains(&logged),
            format!(
                "throttle {} after another user's update ({said})",
                c.array_throttle(array)?
            ),
        )?;
    }
    c.run_ok(
        "sacctmgr",
        &[
            "-i",
            "add",
            "coordinator",
            "account=research",
            "names=gpushare_thc",
        ],
    )?;
    // Accepted once slurmctld has the coordinator from slurmdbd.
    let result = wait_for("the coordinator's throttle to be accepted", SHORT, || {
        update(&coordinator, "2")
            .ok()
            .filter(|o| o.status.success())
    })
    .and_then(|_| {
        ensure(
            c.array_throttle(array)? == "2",
            format!("the coordinator's throttle: {}", c.array_throttle(array)?),
        )
    });
    let _ = c.run(
        "sacctmgr",
        &[
            "-i",
            "delete",
            "coordinator",
            "account=research",
            "names=gpushare_thc",
        ],
    );
    let _ = c.run("scancel", &[&array.to_string()]);
    result
}
