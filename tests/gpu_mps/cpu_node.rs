//! A CPU node with gpushare's node half installed, as the install page
//! says every slurmd host gets it: the cluster-wide `Prolog=`, `Epilog=`
//! and `required` plugstack line name gpushare's programs and plugin, the
//! node has no GPU, and reads the GPU nodes' `gpu_mps.conf` (a shared
//! `/etc/slurm`; the file names no `GPUDevices=`): its jobs run as
//! without gpushare, and the node timer, enabled there too, does nothing
//! and says why.

use super::*;

/// One node, no GPU, the GPU nodes' `gpu_mps.conf` beside `slurm.conf`;
/// gpushare's prolog, epilog and SPANK plugin configured as for the whole
/// cluster.
pub(super) fn cpu_node() -> ClusterSpec {
    ClusterSpec {
        gpus: Vec::new(),
        mps_count: None,
        mps_per_gpu: false,
        cgroup_devices: true,
        prolog: Some("{build}/gpu-mps-prolog".into()),
        epilog: Some("{build}/gpu-mps-epilog".into()),
        plugstack: vec!["required {plugins}/spank_gpu_mps.so".into()],
        extra_conf_files: vec![(
            "gpu_mps.conf".into(),
            "UnitsPerGPU=100\nMPSControl=none\n".into(),
        )],
        ..ClusterSpec::default()
    }
}

/// A batch job and an srun step run and complete there, their output
/// untouched (no banner, no MPS variable), and the node stays up: the
/// prolog and epilog exited 0 (a failed one drains the node).
pub(super) fn cpu_jobs(c: &mut Cluster) -> TestResult {
    let id = c.sbatch_ok(&["--wrap=echo batch ran; env | grep -c CUDA_MPS || true"])?;
    let info = c.wait_job_done(id, JOB_END)?;
    let out = c.job_output(id);
    ensure(
        info.state() == "COMPLETED" && out.starts_with("batch ran\n0"),
        format!(
            "a batch job on the CPU node ended {}: {out:?}",
            info.state()
        ),
    )?;
    let step = c.srun(&["true"])?;
    ensure(
        step.status.success() && step.stderr.is_empty(),
        format!(
            "srun on the CPU node: {:?} {}",
            step.status.code(),
            String::from_utf8_lossy(&step.stderr)
        ),
    )?;
    let states = c.node_states()?;
    ensure(
        states
            .values()
            .all(|s| !s.contains("DRAIN") && !s.contains("DOWN")),
        format!("after gpushare's prolog and epilog the node is {states:?}"),
    )?;
    node_timer(c)
}

/// The node timer's command, where the admin enabled it on every slurmd
/// host: the file gives this node no GPUs, so nothing is done, one line
/// says why and it exits 3, which `gpushare-node-metrics.service` counts
/// as done (SuccessExitStatus=3): no failed unit, never a silent skip.
fn node_timer(c: &Cluster) -> TestResult {
    let gpu_mps = testcluster::cluster::build_dir()?.join("gpu-mps");
    let timer = c.run(&gpu_mps.to_string_lossy(), &["metrics", "--write"])?;
    let said = String::from_utf8_lossy(&timer.stderr);
    ensure(
        timer.status.code() == Some(3)
            && said.lines().count() == 1
            && said.contains("it shares no GPU; nothing to do"),
        format!(
            "gpu-mps metrics --write on the CPU node: exit {:?}, said: {said}",
            timer.status.code()
        ),
    )
}
