//! Findings of some releases only: running jobs with a QOS list (24.11
//! to 26.05), slurmd's connection limit (25.05 on). A module of
//! `audit.rs`, in a file of its own.

use super::*;

/// A user's running job that asked for two QOS (`--qos=normal,lowprio`):
/// on 24.11 to 26.05, whose slurmctld moves it to the list's
/// highest-priority QOS at a restart (SchedMD ticket 23033), the audit
/// warns of it, read from accounting's `QOSREQ`; from 26.11 it says
/// nothing.
pub(super) fn qos_list_running(c: &mut Cluster) -> TestResult {
    let user = TestUser::create(c, "gpushare_lists")?;
    user.allow_qos(c, &["normal", "lowprio"])?;
    let id = wait_for("slurmctld to know the user's QOS", SHORT, || {
        user.sbatch(
            c,
            &[
                "-o",
                "/dev/null",
                "--qos=normal,lowprio",
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
    let _ = c.run("scancel", &[&job]);
    if testcluster::cluster::slurm_release() >= (26, 11) {
        return ensure(found.is_empty(), format!("26.11 keeps the QOS: {found:?}"));
    }
    ensure(
        found.len() == 1
            && found[0].severity == Severity::Warning
            && found[0]
                .what
                .contains(&format!("{job} (normal,lowprio, started under ")),
        format!("the audit's findings: {:?}", report.findings),
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
