//! `--gpu-mps=private` jobs where the node's state, not the job, stops
//! them: requeued as shares are, never failed for it. A module of
//! `multinode.rs` (its helpers), in a file of its own.

use super::*;

/// A private job's script: where its own daemon's pipe is, and the run;
/// the first run of [`private_job_started_again_without_its_prolog_completes`]
/// waits to be requeued.
const PRIVATE_RUN: &str = "--wrap=echo PIPE=${CUDA_MPS_PIPE_DIRECTORY:-none} \
                           RUN=${SLURM_RESTART_COUNT:-0}; \
                           [ \"${SLURM_RESTART_COUNT:-0}\" != 0 ] || sleep 300";

/// The site with MPS daemons (the stand-in control program) and
/// `PrivateMPS=allow` on every node.
pub fn site() -> ClusterSpec {
    let mut spec = ClusterSpec::example_site_nodes();
    for node in &mut spec.nodes {
        for (name, text) in &mut node.local_files {
            if name == "gpu_mps.conf" {
                *text = text.replace(
                    "MPSControl=none",
                    "MPSControl={cluster}/mps-bin/nvidia-cuda-mps-control\nPrivateMPS=allow",
                );
            }
        }
    }
    spec
}

/// A private job given a GPU a share holds (where gpushare places), then
/// private jobs started again without their Prolog: each requeued, none
/// failed for what the node did.
pub fn requeued_not_failed(c: &mut Cluster) -> TestResult {
    let bin = c.dir.join("mps-bin");
    testcluster::standin::install(&bin)?;
    testcluster::standin::install_smi(&bin)?;
    given_a_shared_gpu_is_requeued_and_runs_once_it_is_free(c)?;
    private_job_started_again_without_its_prolog_completes(c)
}

/// The GPU a prolog refused a private job on, from its words in the
/// node's syslog (`GPU N of this job on node gpu01 also carries ...`).
fn refused_on(c: &Cluster) -> Option<u32> {
    c.syslog().lines().rev().find_map(|l| {
        let (_, rest) = l.split_once("GPU ")?;
        let (n, rest) = rest.split_once(' ')?;
        rest.starts_with("of this job on node gpu01 also carries")
            .then(|| n.parse().ok())?
    })
}

/// Where gpushare places shares (Slurm 22.05 books them all on GPU 0),
/// Slurm gives a private job on gpu01 a GPU a share holds. The job is
/// requeued and kept off gpu01 (not counted), stays off while that GPU's
/// share runs, however many other shares end and however often the node
/// timer looks, and runs on gpu01 once that GPU carries none. Before, it
/// failed at once.
pub fn given_a_shared_gpu_is_requeued_and_runs_once_it_is_free(c: &mut Cluster) -> TestResult {
    if slurm_places_shares() {
        // Slurm knows each share's GPU and never gives it whole.
        return Ok(());
    }
    let ben = TestUser::create(c, "gpushare-ben")?;
    let blocker = c.sbatch_ok(&["-w", "gpu02", "--exclusive", "--wrap=sleep 300"])?;
    c.wait_job_state(blocker, &["RUNNING"], JOB_START)?;
    // One share on each GPU of gpu01 (gpushare spreads them).
    start_shares(c, "gpu01", 4, 10, &[])?;
    let placed = shares(c, "gpu01");
    let mut gpus: Vec<u32> = placed.values().copied().collect();
    gpus.sort_unstable();
    gpus.dedup();
    ensure(
        gpus == [0, 1, 2, 3],
        format!("four shares on gpu01 are not one on each GPU: {placed:?}"),
    )?;
    let out = format!("--output={}/%j.out", ben.home.display());
    let id = ben.sbatch(
        c,
        &[
            &out,
            "--gres=gpu:a40:1",
            "--gpu-mps=private",
            "--wrap=echo PIPE=${CUDA_MPS_PIPE_DIRECTORY:-none}; sleep 300",
        ],
    )?;
    c.wait_sent_off(id, "gpu01", JOB_LONG)
        .map_err(|e| format!("{e}: {:?}\nsyslog:\n{}", c.job(id), c.syslog()))?;
    let told = shown_line(c, id, "AdminComment").unwrap_or_default();
    ensure(
        told.contains("(not counted toward the 3)")
            && told.contains("until that GPU carries no MPS share"),
        format!("ben is not told what must change: {told:?}"),
    )?;
    let gpu =
        refused_on(c).ok_or_else(|| format!("no refusal in gpu01's syslog:\n{}", c.syslog()))?;
    // Every share but that GPU's ends: the job stays off.
    let (on_it, others): (BTreeMap<u32, u32>, BTreeMap<u32, u32>) =
        placed.into_iter().partition(|&(_, g)| g == gpu);
    for share in others.keys() {
        c.run_ok("scancel", &[&share.to_string()])?;
        c.wait_job_done(*share, JOB_END)?;
    }
    for look in 1..=2 {
        let said = gpu01_timer(c)?;
        kept_off_gpu01(c, id, 1).map_err(|e| {
            format!("{e}\nafter the timer's look {look} (GPU {gpu} still shared): {said}")
        })?;
    }
    for share in on_it.keys() {
        c.run_ok("scancel", &[&share.to_string()])?;
        c.wait_job_done(*share, JOB_END)?;
    }
    let said = gpu01_timer(c)?;
    let info = c
        .wait_job_state(id, &["RUNNING"], JOB_LONG)
        .map_err(|e| format!("{e}\ntimer: {said}\nsyslog:\n{}", c.syslog()))?;
    ensure(
        info.get("NodeList") == Some("gpu01") && info.get("Restarts") == Some("1"),
        format!("ben's job after GPU {gpu} was freed: {info:?}"),
    )?;
    let printed = || fs::read_to_string(ben.home.join(format!("{id}.out"))).unwrap_or_default();
    wait_for("ben's job to print its daemon's pipe", SHORT, || {
        printed().contains("PIPE=/").then_some(())
    })
    .map_err(|e| format!("{e}: {:?}", printed()))?;
    c.run_ok("scancel", &[&blocker.to_string()])?;
    clean(c)
}

/// As `prolog_missed.rs`'s shares: three private jobs on gpu01 requeued
/// and held, their start brought to now, released together. Slurm 22.05's
/// slurmd starts some without their Prolog, so no daemon of their own is
/// recorded: refused, and requeued for it (counted). Each ends COMPLETED,
/// its script run only with its own daemon.
pub fn private_job_started_again_without_its_prolog_completes(c: &mut Cluster) -> TestResult {
    super::prolog_missed::started_again_without_prolog(
        c,
        &["--gres=gpu:a40:1", "--gpu-mps=private", PRIVATE_RUN],
        "PIPE=",
        |l| l.starts_with("PIPE=/"),
        "without its own MPS daemon",
    )
}
