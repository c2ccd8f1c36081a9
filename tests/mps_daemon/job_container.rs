//! Shares under a job container (`JobContainerType=job_container/tmpfs`,
//! read as `namespace/tmpfs` from Slurm 25.11) whose `Dirs=` covers the
//! node's `StateDir`, as the default `Dirs=/tmp,/dev/shm` does a `StateDir`
//! under `/tmp`: each job gets its own empty directory there, so a share's
//! task cannot see its GPU's MPS pipes. It must fail at once, saying why
//! and what to change, and never run its command without its server. A
//! CPU-only job runs in the same container, and `gpu-mps status` warns of
//! the setting. The cluster's own directory
//! lies under `/tmp` (its spool too), so the container hides
//! `<cluster>/run`, where `StateDir` is, rather than `/tmp`: Slurm 22.05
//! has no `Dirs=` (it always hides `/tmp` and `/dev/shm`) and is skipped.
//!
//! It runs only when named in full
//! (`tests/release_suite.sh 23.02 v1 mps_daemon:a_share_whose_job_container_hides_its_mps_pipes_fails_at_once`):
//! inside the harness's per-node namespaces Slurm's tmpfs container
//! sometimes fails to make a job's namespace (`_create_ns: ns base mount
//! failed: Invalid argument`, binding `/proc/<pid>/ns/mnt`; 1 run in 5 on
//! 23.02, cause not established) and requeues the job. `make test` covers
//! the same refusal on the host, outside those namespaces, through
//! `tests/gpu-slurm-check.sh` (its "job_container/tmpfs hiding StateDir").

use testcluster::cluster::{slurm_release, wait_for};
use testcluster::time::JOB_END;
use testcluster::{ensure, Cluster, ClusterSpec, TestResult};

pub fn spec() -> ClusterSpec {
    super::spec().hiding_run_in_a_job_container()
}

/// Whether this Slurm reads `Dirs=` (23.02 and later).
pub fn has_dirs() -> bool {
    slurm_release() >= (23, 2)
}

pub fn hidden_pipes_refused(c: &mut Cluster) -> TestResult {
    super::standin(c)?;
    // One job at a time: two jobs' first containers made at once can fail
    // in Slurm ("ns base mount failed: Invalid argument", 23.02).
    let cpu = c.sbatch_ok(&["--wrap=echo the CPU job ran in its container"])?;
    // The container runs jobs: the CPU-only one ran its command, or, where
    // Slurm runs from a Debian root (tests/release_root.sh), failed only in
    // exec'ing the batch script slurmd wrote into the cluster's spool,
    // which the job's namespace does not show there (Slurm 24.11 and 26.05;
    // cause not established). Either way it got past every plugin.
    let done = c.wait_job_done(cpu, JOB_END)?;
    let out = c.job_output(cpu);
    ensure(
        (done.state() == "COMPLETED" && out.contains("the CPU job ran"))
            || (out.contains("execve(): ") && out.contains("slurm_script: No such file")),
        format!("CPU-only job {cpu}: {} {out:?}", done.state()),
    )?;
    let share = c.sbatch_ok(&[
        "--gres=mps:25",
        "--wrap=echo the share ran PIPE=$CUDA_MPS_PIPE_DIRECTORY",
    ])?;
    let refusal = wait_for("the share's refusal", JOB_END, || {
        let out = c.job_output(share);
        out.contains("this task cannot see its GPU's MPS directory")
            .then_some(out)
    })
    .map_err(|e| format!("{e}: {:?}", c.job_output(share)))?;
    ensure(
        !refusal.contains("the share ran")
            && refusal.contains("StateDir=")
            && refusal.contains("job_container.conf"),
        format!("share {share}: {refusal:?}"),
    )?;
    // The prolog did start the GPU's daemon: what the task missed was
    // hidden from it, not absent.
    ensure(
        !super::gpus_with(c, "args=-d").is_empty(),
        format!("no daemon started: {:?}", super::calls(c)),
    )?;
    // gpu-mps status says so before any job fails.
    let status = super::status_json(c)?;
    ensure(
        status
            .warnings
            .iter()
            .any(|w| w.contains("job namespaces (job_container/tmpfs) give each job its own")),
        format!("gpu-mps status warnings: {:?}", status.warnings),
    )
}
