//! One `gpu_mps.conf` for every node, as a shared `/etc/slurm` (NFS, or
//! one copy pushed everywhere) gives it: `NodeName=` lines give gpu01 and
//! gpu02 their GPUs and gpu02 another `UnitsPerGPU`, and gpu03 (GPUs held
//! whole) none at all. A module of `multinode.rs` (its helpers), in a file
//! of its own to keep that one from growing.

use super::*;
use testcluster::cluster::{build_dir, SITE_MONITORING_CONF};

/// The one file: 100 units a GPU on every node, 50 on gpu02's line (and,
/// where gpushare places, the Count each node's gres.conf books); GPU
/// devices only on a line that names gpu01 and gpu02; 48 GiB a GPU, so a
/// share's memory limit shows which `UnitsPerGPU` its node took.
fn shared_text(by_slurm: bool) -> String {
    // A key on a line for every node, and on gpu02's line: gpu02 takes its
    // own (a key on two NodeName= lines that name gpu02 would be an error).
    let count = |n: u32, sep: &str| {
        if by_slurm {
            String::new()
        } else {
            format!("{sep}SlurmMpsCount={n}")
        }
    };
    format!(
        "# one file for every node, as on a shared /etc/slurm\n\
         UnitsPerGPU=100\nGPUMemory=48G\nStateDir={{cluster}}/run/gpu-mps\nMPSControl=none\n\
         SyslogSocket={{cluster}}/log/syslog.sock\n{SITE_MONITORING_CONF}{}\n\
         NodeName=gpu[01-02] GPUDevices={{cluster}}/dev/nvidia[0-3]\n\
         NodeName=gpu02 UnitsPerGPU=50{}\n",
        count(1600, ""),
        count(800, " ")
    )
}

/// The example site on three nodes, every node's `/etc/slurm/gpu_mps.conf`
/// the one file; gpu02's gres.conf books 50 units a GPU.
pub fn site() -> ClusterSpec {
    let by_slurm = slurm_places_shares();
    let mut spec = ClusterSpec::example_site_nodes();
    let text = shared_text(by_slurm);
    for node in &mut spec.nodes {
        node.local_files = vec![("gpu_mps.conf".to_owned(), text.clone())];
        if node.name == "gpu02" {
            node.mps_count = Some(if by_slurm { 200 } else { 800 });
        }
    }
    spec
}

/// What `gpu-mps ARGS` prints on `node` (the node named by its hostname,
/// as an admin's shell there names it), or why it failed.
pub fn gpu_mps(c: &Cluster, node: &str, args: &[&str]) -> Result<String, String> {
    let bin = build_dir()?.join("gpu-mps");
    let mut all = vec!["--conf", "/etc/slurm/gpu_mps.conf"];
    all.extend_from_slice(args);
    let out = c.run_on(node, &bin.to_string_lossy(), &all)?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "gpu-mps {all:?} on {node}: {}: {text}{err}",
            out.status
        ));
    }
    Ok(text)
}

/// A share of 50 units on gpu01 (100 a GPU) and on gpu02 (50 a GPU): half
/// a GPU's threads and memory on the first, a whole GPU's on the second,
/// each in its own node's ledger; gpu03 runs a whole-GPU job as a node
/// without gpushare (no ledger made, never drained).
pub fn one_file_for_every_node(c: &mut Cluster) -> TestResult {
    let script = "--wrap=echo HOST=$(hostname) MEM=$GPUSHARE_MEMORY_MIB; sleep 300";
    let mut ids = BTreeMap::new();
    for node in ["gpu01", "gpu02"] {
        ids.insert(node, c.sbatch_ok(&["-w", node, "--gres=mps:50", script])?);
    }
    for id in ids.values() {
        c.wait_job_state(*id, &["RUNNING"], JOB_START)
            .map_err(|e| format!("{e}\njob output: {}", c.job_output(*id)))?;
    }
    wait_for("the shares' output", SHORT, || {
        ids.values()
            .all(|&id| printed(c, id, "MEM").is_some())
            .then_some(())
    })
    .map_err(|e| format!("{e}\nsyslog:\n{}", c.syslog()))?;
    for (node, want_mem, want_percent) in [("gpu01", "24576", 50), ("gpu02", "49152", 100)] {
        let id = ids[node];
        let out = c.job_output(id);
        let held = shares(c, node);
        ensure(
            held.keys().copied().collect::<Vec<_>>() == [id],
            format!("{node}'s ledger holds {held:?}, not job {id}"),
        )?;
        let banner = format!(
            "MPS share of 50 units on GPU {}: {want_percent} % of its threads",
            held[&id]
        );
        ensure(
            printed(c, id, "HOST").as_deref() == Some(node)
                && printed(c, id, "MEM").as_deref() == Some(want_mem)
                && out.contains(&banner),
            format!("job {id} on {node}: want MEM={want_mem} and {banner:?}: {out}"),
        )?;
    }
    // What each node says it takes, from its own name (its hostname).
    let status = gpu_mps(c, "gpu02", &["status", "--json"])?;
    let view: serde_json::Value =
        serde_json::from_str(&status).map_err(|e| format!("{e}: {status}"))?;
    ensure(
        view["units_per_gpu"] == 50 && view["node_lines"]["node"] == "gpu02",
        format!("gpu-mps status on gpu02: {status}"),
    )?;
    // What gpu02 and gpu03 take, as gpu01 reads the file for them.
    let text = shared_text(slurm_places_shares());
    let line = text
        .lines()
        .position(|l| l.starts_with("NodeName=gpu02"))
        .map_or(0, |i| i + 1);
    let gpu02_line = format!("line {line} (NodeName=gpu02)");
    for (node, wanted, unwanted) in [
        (
            "gpu02",
            vec![
                "#   UnitsPerGPU=50",
                &gpu02_line,
                "Name=mps Count=50 File=/dev/nvidia3",
            ],
            None,
        ),
        (
            "gpu03",
            vec!["gives node gpu03 no GPUs"],
            Some("# gres.conf"),
        ),
    ] {
        let args = ["config", "--node", node, "--release", "24.11"];
        let config = gpu_mps(c, "gpu01", &args)?;
        ensure(
            wanted.iter().all(|w| config.contains(w))
                && unwanted.is_none_or(|u| !config.contains(u)),
            format!("gpu-mps config --node {node} on gpu01:\n{config}"),
        )?;
    }
    // gpu03: given no GPUs, a node without gpushare. Its whole-GPU job
    // runs, no ledger is made, the node stays up.
    let whole = c.sbatch_ok(&["-w", "gpu03", "--gres=gpu:h100:1", "--wrap=true"])?;
    let done = c.wait_job_done(whole, JOB_END)?;
    ensure(
        done.state() == "COMPLETED",
        format!(
            "a whole-GPU job on gpu03 ended {}: {}",
            done.state(),
            c.job_output(whole)
        ),
    )?;
    let ledger = c.node_dir("gpu03").join("run/gpu-mps");
    ensure(
        !ledger.exists(),
        format!("gpu03, given no GPUs, has a ledger at {}", ledger.display()),
    )?;
    let states = c.node_states()?;
    ensure(
        states
            .get("gpu03")
            .is_some_and(|s| s == "idle" || s == "mixed"),
        format!("gpu03 is {states:?} after its whole-GPU job"),
    )?;
    c.cancel_all()
}
