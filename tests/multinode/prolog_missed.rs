//! A share job Slurm starts again without the node's Prolog. slurmd of
//! Slurm 22.05 runs a job's Prolog only where it caches no credential
//! state of the job (`slurm_cred_jobid_cached` in `_rpc_prolog` and
//! `_rpc_batch_job`); a requeued job's reissued credential purges that
//! state, but through a scan slurmd runs at most once each two seconds
//! (`_clear_expired_job_states`, SchedMD's bug 15656, mended in 23.02).
//! Jobs started again on the node they ran on, inside their credential's
//! lifetime (`cred_expire`) and within a second of each other: the first
//! one's scan throttles the others', which start without their Prolog.
//! No GPU was chosen for their shares, so their tasks are refused, and
//! gpushare requeues them (counted toward its cap): each job completes,
//! its script run only where its Prolog placed it. A module of
//! `multinode.rs` (its helpers), in a file of its own.

use super::*;
use testcluster::cluster::{slurm_release, JobInfo};

/// Prints the GPU gpushare chose and the run; the first run waits to be
/// requeued, later ones end at once. Slurm up to 26.05 leaves
/// `SLURM_RESTART_COUNT` unset in a batch job's first run, 26.11 sets it
/// to 0.
const RUN_THEN_END: &str = "--wrap=echo GPU=$GPUSHARE_GPU RUN=${SLURM_RESTART_COUNT:-0}; \
                            [ \"${SLURM_RESTART_COUNT:-0}\" != 0 ] || sleep 300";

/// Three shares on gpu01 are requeued and held, their start time brought
/// to now, and released together: Slurm starts them again on gpu01 in one
/// pass, inside their credential's lifetime. Each ends COMPLETED; every
/// run that ran its script ran on a GPU gpushare chose; on Slurm 22.05 at
/// least one was started without its Prolog, and requeued by gpushare
/// for that, which its AdminComment shows as gpushare's first counted
/// requeue (the admin's requeue before it does not count).
pub fn completes_after_a_start_without_prolog(c: &mut Cluster) -> TestResult {
    started_again_without_prolog(
        c,
        &["--gres=mps:10", RUN_THEN_END],
        "GPU=",
        |l| !l.starts_with("GPU= "),
        "unplaced",
    )
}

/// Three jobs of `job` (sbatch's words, the script last) on gpu01, each
/// printing a line that starts with `line` and ends with its run: run,
/// requeued and held, released together (see
/// [`completes_after_a_start_without_prolog`]). Each must end COMPLETED,
/// every printed line `as_asked` (else it ran `unlike` it asked).
pub fn started_again_without_prolog(
    c: &mut Cluster,
    job: &[&str],
    line: &str,
    as_asked: impl Fn(&str) -> bool,
    unlike: &str,
) -> TestResult {
    let ids: Vec<u32> = (0..3)
        .map(|_| {
            let mut args = vec!["-w", "gpu01", "--requeue", "--open-mode=append"];
            args.extend_from_slice(job);
            c.sbatch_ok(&args)
        })
        .collect::<Result<_, _>>()?;
    wait_for("the three jobs to run on gpu01", JOB_START, || {
        let printed = ids.iter().all(|&id| c.job_output(id).contains("RUN=0"));
        printed.then_some(())
    })
    .map_err(|e| {
        let jobs: Vec<String> = ids
            .iter()
            .map(|&id| format!("{id}: {:?}", c.job(id)))
            .collect();
        format!("{e}\n{}\nsyslog:\n{}", jobs.join("\n"), c.syslog())
    })?;
    let list = ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    c.run_ok("scontrol", &["requeuehold", &list])?;
    wait_for("the three to pend again, held", SHORT, || {
        ids.iter()
            .all(|&id| {
                c.job(id)
                    .is_ok_and(|j| j.state() == "PENDING" && j.restarts() == 1)
            })
            .then_some(())
    })?;
    for id in &ids {
        c.run_ok(
            "scontrol",
            &["update", &format!("jobid={id}"), "StartTime=now"],
        )?;
    }
    c.run_ok("scontrol", &["release", &list])?;
    // All three watched at once: this cluster forgets an ended job within
    // 20 s (MinJobAge=10), and one may end long before another.
    let mut ended: std::collections::BTreeMap<u32, (JobInfo, String)> = Default::default();
    wait_for("the three to end", JOB_LONG, || {
        for &id in &ids {
            if ended.contains_key(&id) {
                continue;
            }
            let Ok(info) = c.job(id) else { continue };
            if JobInfo::DONE.contains(&info.state()) {
                let comment = shown_line(c, id, "AdminComment").unwrap_or_default();
                ended.insert(id, (info, comment));
            }
        }
        (ended.len() == ids.len()).then_some(())
    })
    .map_err(|e| format!("{e}: ended {:?}", ended.keys().collect::<Vec<_>>()))?;
    let mut missed = Vec::new();
    for (&id, (info, comment)) in &ended {
        let out = c.job_output(id);
        ensure(
            info.state() == "COMPLETED",
            format!(
                "job {id} ended {} after {} restarts: {info:?}\noutput:\n{out}\nsyslog:\n{}",
                info.state(),
                info.restarts(),
                c.syslog()
            ),
        )?;
        // Its script ran only where a GPU was chosen, and last in the run
        // Slurm counts.
        let runs: Vec<&str> = out.lines().filter(|l| l.starts_with(line)).collect();
        let last = format!("RUN={}", info.restarts());
        ensure(
            runs.iter().all(|l| as_asked(l)) && runs.last().is_some_and(|l| l.ends_with(&last)),
            format!("job {id} ran {unlike}, or not last in its run {last}:\n{out}"),
        )?;
        if comment.contains("without the Prolog of the node") {
            // Counted, as gpushare's first: the admin's requeue before it
            // (as a preemption would) is not gpushare's, though Slurm's
            // Restarts= counts it.
            ensure(
                info.restarts() >= 2
                    && comment.contains("(requeue 1 of 3)")
                    && !comment.contains("(requeue 2 of 3)"),
                format!("job {id}: {comment:?} after {} restarts", info.restarts()),
            )?;
            missed.push(id);
        }
    }
    // Where slurmd throttles its purge, one pass's starts skip the Prolog.
    if slurm_release() < (23, 2) {
        ensure(
            !missed.is_empty(),
            format!(
                "no job of {ids:?} was started without its Prolog: the test no longer shows \
                 what it is for\nslurmd's log:\n{}",
                c.log_tails(40)
            ),
        )?;
    }
    println!("started without their Prolog, then completed: {missed:?}");
    clean(c)
}
