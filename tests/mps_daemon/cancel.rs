//! A share refused for its GPU's daemon whose user cancels the job while
//! its prolog still waits on the daemon: the epilog must not bring the
//! job back (Slurm requeues a job whose epilog runs, cancelled or not).
//! A module of `mps_daemon.rs` (its cluster and stand-in), in a file of
//! its own to keep that one under the house's length.

use super::*;

/// Every call of the control program hangs; a share's prolog waits on it
/// and the job's user cancels it meanwhile. The prolog then refuses the
/// share (a job sent elsewhere) and its epilog runs: the job stays
/// CANCELLED, never requeued nor kept off the node.
pub fn cancelled_before_its_epilog(c: &mut Cluster) -> TestResult {
    standin(c)?;
    shares(c, 4, 25)?;
    let hang = bin_dir(c).join("hang");
    fs::write(&hang, "").map_err(|e| e.to_string())?;
    let result = (|| {
        let before = calls(c).len();
        let id = c.sbatch_ok(&["--gres=mps:50", SCRIPT])?;
        wait_for(
            "the prolog to call the hung control program",
            JOB_START,
            || (calls(c).len() > before).then_some(()),
        )?;
        c.run_ok("scancel", &[&id.to_string()])?;
        let info = c
            .wait_job_state(id, &["CANCELLED", "PENDING"], REFUSED_WITHIN)
            .map_err(|e| format!("{e}\nsyslog:\n{}", c.syslog()))?;
        ensure(
            info.get("JobState") == Some("CANCELLED")
                && info.get("Restarts") == Some("0")
                && !c.sent_off(id, NODE),
            format!(
                "job {id}, cancelled before its epilog, was brought back: {info:?}\nsyslog:\n{}",
                c.syslog()
            ),
        )
    })();
    let _ = fs::remove_file(&hang);
    result.and(cancel_and_wait_stopped(c))
}
