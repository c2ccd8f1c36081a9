//! Findings of some releases only: running jobs with a QOS list (24.11
//! to 26.05), slurmd's connection limit (25.05 on). A module of
//! `audit.rs`, in a file of its own.

use super::*;

/// A user's running job that asked for two QOS
/// (`--qos=qos_lafferty,lowprio`): on 24.11 to 26.05, whose slurmctld
/// moves it to the list's highest-priority QOS at a restart (SchedMD
/// ticket 23033), the audit warns of it, read from accounting's
/// `QOSREQ`, and the user's `gpu-qos usage` notes it beside
/// qos_lafferty's figures; from 26.11 neither says anything.
pub(super) fn qos_list_running(c: &mut Cluster) -> TestResult {
    let user = TestUser::create(c, "gpushare_lists")?;
    user.allow_qos(c, &["normal", "lowprio", "qos_lafferty"])?;
    let id = wait_for("slurmctld to know the user's QOS", SHORT, || {
        user.sbatch(
            c,
            &[
                "-o",
                "/dev/null",
                "--qos=qos_lafferty,lowprio",
                "--gres=gpu:a40:1",
                "--wrap=sleep 300",
            ],
        )
        .ok()
    })?;
    c.wait_job_state(id, &["RUNNING"], JOB_START)?;
    let job = id.to_string();
    // Accounting has the job's start (slurmctld tells slurmdbd on its own time).
    wait_for("accounting to hold the job's QOS list", SHORT, || {
        let out = c
            .run_ok(
                "sacct",
                &["-X", "-n", "-P", "-j", &job, "-o", "State,QOSREQ"],
            )
            .ok()?;
        out.lines()
            .any(|l| l.starts_with("RUNNING|") && l.contains(','))
            .then_some(())
    })?;
    let (report, _) = audit(c, &[])?;
    let found: Vec<&AuditFinding> = report
        .findings
        .iter()
        .filter(|f| f.kind == "qos_list_moved_on_restart")
        .collect();
    let bin = testcluster::cluster::build_dir()?.join("gpu-qos");
    let json = user.run_ok(c, None, &bin.to_string_lossy(), &["usage", "--json"]);
    let _ = c.run("scancel", &[&job]);
    let usage: UsageReport = serde_json::from_str(&json?).map_err(|e| e.to_string())?;
    let noted: Vec<_> = usage
        .unread
        .iter()
        .filter(|u| u.reason.contains("asked for a list of QOS"))
        .collect();
    if testcluster::cluster::slurm_release() >= (26, 11) {
        return ensure(
            found.is_empty() && noted.is_empty(),
            format!("26.11 keeps the QOS: {found:?} {noted:?}"),
        );
    }
    ensure(
        found.len() == 1
            && found[0].severity == Severity::Warning
            && found[0]
                .what
                .contains(&format!("{job} (qos_lafferty,lowprio, started under ")),
        format!("the audit's findings: {:?}", report.findings),
    )?;
    ensure(
        noted.len() == 1 && noted[0].source == "QOS qos_lafferty",
        format!("the user's usage: {:?}", usage.unread),
    )
}

/// slurmd serving at most 8 connections on a node of 32 CPUs that offers
/// mps: it may run 32 jobs at once, and the audit says the line that
/// serves them.
pub(super) fn slurmd_connections(c: &mut Cluster) -> TestResult {
    let f = exactly(c, "warning", Severity::Warning, "slurmd_connections_short")?;
    ensure(
        f.what.contains("may run 32 jobs at once")
            && f.what.contains("conmgr_max_connections (8)")
            && f.fix == "SlurmdParameters=conmgr_max_connections=64,config_overrides",
        format!("{f:?}"),
    )
}
