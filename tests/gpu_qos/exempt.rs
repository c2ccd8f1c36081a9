//! `ExemptUsers=` and `ExemptAdmins=` against a real slurmctld: refusals
//! not made for exempt requesters, logged and counted.

use super::*;

/// `ExemptUsers=` by name and by uid: each user's untyped submission is
/// accepted and slurmctld logs what it would have refused. `ExemptAdmins=yes`: an
/// operator's (`AdminLevel=Operator`) update of another user's job is
/// made, the owner's own update of it refused. Both counted.
pub(super) fn exemptions(c: &mut Cluster) -> TestResult {
    let xim = TestUser::create(c, "gpushare_xim")?;
    xim.allow_qos_by_default(c, &["normal", "qos_lafferty"], "normal")?;
    let yuri = TestUser::create(c, "gpushare_yuri")?;
    yuri.allow_qos_by_default(c, &["normal", "qos_lafferty"], "normal")?;
    let owen = TestUser::create(c, "gpushare_owen")?;
    owen.allow_qos_by_default(c, &["normal", "lowprio", "qos_lafferty"], "normal")?;
    let oscar = TestUser::create(c, "gpushare_oscar")?;
    oscar.allow_qos_by_default(c, &["normal"], "normal")?;
    c.run_ok(
        "sacctmgr",
        &[
            "-i",
            "modify",
            "user",
            "gpushare_oscar",
            "set",
            "adminlevel=operator",
        ],
    )?;
    let dir = c.dir.join("metrics-exempt");
    fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let metrics = dir.join("gpushare_job_submit.prom");
    install_and_wait(
        c,
        &format!(
            "{EXAMPLE_GPU_QOS_CONF}ExemptUsers=gpushare_xim,{}\nExemptAdmins=yes\n\
             MetricsFile={}\n",
            yuri.uid,
            metrics.display()
        ),
    )?;
    let result = judge_exemptions(c, [&xim, &yuri], &owen, &oscar, &metrics);
    install_conf(c, EXAMPLE_GPU_QOS_CONF)?;
    result
}

fn judge_exemptions(
    c: &Cluster,
    exempt: [&TestUser; 2],
    owen: &TestUser,
    oscar: &TestUser,
    metrics: &std::path::Path,
) -> TestResult {
    let untyped = [
        "--parsable",
        "-H",
        "--wrap=true",
        "--qos=qos_lafferty",
        "--gres=gpu:2",
    ];
    let mut ids = Vec::new();
    for user in exempt {
        let (id, _) = user_accepted(c, user, "sbatch", &untyped, "the exempt user's job")?;
        let job_id: u32 = id.parse().map_err(|e| format!("job id {id:?}: {e}"))?;
        let request = c.job(job_id)?.tres_request("TresPerNode");
        ensure(
            request.as_deref() == Some("gres:gpu:2"),
            format!("the exempt job was changed: TresPerNode {request:?}"),
        )?;
        let logged = format!(
            "job from uid {} accepted, exempt (ExemptUsers), QOS qos_lafferty; it would have \
             been refused: QOS qos_lafferty requires a GPU type",
            user.uid
        );
        wait_for("slurmctld to log the exemption", SHORT, || {
            c.log("slurmctld").contains(&logged).then_some(())
        })?;
        ids.push(id);
    }

    // owen's job, moved to the group QOS without a typed request.
    let own = owen.run_ok(
        c,
        None,
        "sbatch",
        &[
            "--parsable",
            "-H",
            "--wrap=true",
            "--qos=lowprio",
            "--gres=gpu:a40:1",
        ],
    )?;
    let own = own.trim().to_owned();
    let job = format!("job={own}");
    let out = owen.run(c, None, "scontrol", &["update", &job, "QOS=qos_lafferty"])?;
    ensure(
        !out.status.success(),
        "the owner's untyped move to a group QOS was made",
    )?;
    let refused = format!("update from uid {} rejected", owen.uid);
    wait_for("slurmctld to log the owner's refusal", SHORT, || {
        c.log("slurmctld").contains(&refused).then_some(())
    })?;
    // oscar's the same update: made once slurmctld knows oscar's level.
    let update = ["update", job.as_str(), "QOS=qos_lafferty"];
    user_accepted(c, oscar, "scontrol", &update, "the operator's update")?;
    let qos = c.job(own.parse().map_err(|e| format!("{own:?}: {e}"))?)?;
    ensure(
        qos.get("QOS") == Some("qos_lafferty"),
        format!("the operator's update did not apply: {:?}", qos.get("QOS")),
    )?;
    let logged = format!(
        "update from uid {} accepted, exempt (ExemptAdmins, an operator's update of another \
         user's job), QOS qos_lafferty; it would have been refused",
        oscar.uid
    );
    wait_for("slurmctld to log the operator's exemption", SHORT, || {
        c.log("slurmctld").contains(&logged).then_some(())
    })?;
    for id in ids.iter().chain([&own]) {
        let _ = c.run("scancel", &[id]);
    }
    wait_for("the metrics file to count all three", SHORT, || {
        fs::read_to_string(metrics).ok().filter(|text| {
            text.lines().any(|l| {
                l == "gpushare_policy_exemptions_total{reason=\"exempt_user\",\
                      rule=\"untyped_gpu\",qos=\"qos_lafferty\"} 2"
            }) && text.lines().any(|l| {
                l.starts_with("gpushare_policy_exemptions_total{reason=\"admin_update\",")
                    && l.contains("qos=\"qos_lafferty\"")
                    && l.ends_with(" 1")
            })
        })
    })
    .map(drop)
}
