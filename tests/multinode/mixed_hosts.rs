//! A cluster of RHEL and Ubuntu hosts: one plugstack.conf naming the SPANK
//! plugin bare (`required spank_gpu_mps.so`), one gres.conf made of the
//! lines `gpu-mps config --node` prints for each node, and the plugin in
//! a different directory on each host (RHEL's `/usr/lib64/slurm`, Ubuntu's
//! `/usr/lib/x86_64-linux-gnu/slurm`), both listed in `PluginDir`.
//!
//! Slurm resolves a plugstack.conf path without a `/` against each
//! directory of `PluginDir` in turn, the first that holds a loadable
//! plugin winning (`_spank_stack_process_line` → `_spank_plugin_find` in
//! src/common/spank.c, 22.05 to 26.05). Every directory `PluginDir` lists
//! must exist on every host that reads slurm.conf, or its daemons and
//! commands refuse the file (`_is_valid_path` in src/common/read_config.c):
//! each host has both, the layout it does not use empty. A module of
//! `multinode.rs` (its helpers), in a file of its own.

use super::*;
use std::path::{Path, PathBuf};
use testcluster::cluster::slurm_plugin_dir;

/// The plugin's directory on a RHEL host and on an Ubuntu host, under
/// the cluster's `run/`, which each node sees as its own (its `run/` is
/// bound over the cluster's in its mount namespace): a directory made on
/// one node is absent on the others.
const RHEL: &str = "run/usr/lib64/slurm";
const UBUNTU: &str = "run/usr/lib/x86_64-linux-gnu/slurm";
const PLUGIN: &str = "spank_gpu_mps.so";

/// The lines of the `# gres.conf` part of `gpu-mps config`'s output
/// (comments left out), with the stand-in devices' directory for `/dev`.
fn gres_part(config: &str, dev: &str) -> Vec<String> {
    config
        .split("\n\n")
        .find(|part| part.starts_with("# gres.conf"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.replace("/dev/nvidia", &format!("{dev}/nvidia")))
        .collect()
}

fn copy_plugin(from: &Path, dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    fs::copy(from, dir.join(PLUGIN))
        .map(drop)
        .map_err(|e| format!("{} to {}: {e}", from.display(), dir.display()))
}

/// Whether node `node` sees a file at `path` (in its own mount namespace).
fn node_sees(c: &Cluster, node: &str, path: &Path) -> Result<bool, String> {
    let out = c.run_on(node, "test", &["-e", &path.to_string_lossy()])?;
    Ok(out.status.success())
}

pub fn one_plugstack_two_layouts(c: &mut Cluster) -> TestResult {
    let cluster = PathBuf::from(c.expand("{cluster}"));
    let plugins = PathBuf::from(c.expand("{plugins}"));
    let etc = c
        .slurm_conf()
        .parent()
        .map(Path::to_path_buf)
        .ok_or("slurm.conf has no directory")?;
    let (rhel, ubuntu) = (cluster.join(RHEL), cluster.join(UBUNTU));
    // One gres.conf for every node: gpu01 and gpu02's lines as `gpu-mps
    // config --node` prints them on gpu01, gpu03's (no gpushare) kept.
    let dev = cluster.join("dev");
    let mut gres = String::from("AutoDetect=off\n");
    for node in ["gpu01", "gpu02"] {
        let config =
            shared_conf::gpu_mps(c, "gpu01", &["--node", node, "config", "--type", "a40"])?;
        let lines = gres_part(&config, &dev.to_string_lossy());
        let scope = format!("NodeName={node} ");
        ensure(
            !lines.is_empty() && lines.iter().all(|l| l.starts_with(&scope)),
            format!("gpu-mps config --node {node}: gres.conf lines not scoped:\n{config}"),
        )?;
        for l in lines {
            gres.push_str(&l);
            gres.push('\n');
        }
    }
    let old = fs::read_to_string(etc.join("gres.conf")).map_err(|e| e.to_string())?;
    for l in old.lines().filter(|l| l.starts_with("NodeName=gpu03 ")) {
        gres.push_str(l);
        gres.push('\n');
    }
    // The plugin: a RHEL login host (the lab, where sbatch loads it) and
    // gpu01 in RHEL's directory, gpu02 and gpu03 in Ubuntu's; none where
    // the harness put it for every host. Each host has the other layout's
    // directory too, empty.
    let built = plugins.join(PLUGIN);
    let hosts = [
        (cluster.clone(), RHEL, UBUNTU),
        (c.node_dir("gpu01"), RHEL, UBUNTU),
        (c.node_dir("gpu02"), UBUNTU, RHEL),
        (c.node_dir("gpu03"), UBUNTU, RHEL),
    ];
    for (host, with, empty) in &hosts {
        copy_plugin(&built, &host.join(with))?;
        let empty = host.join(empty);
        fs::create_dir_all(&empty).map_err(|e| format!("{}: {e}", empty.display()))?;
    }
    fs::remove_file(&built).map_err(|e| format!("{}: {e}", built.display()))?;
    for (node, has, lacks) in [("gpu01", &rhel, &ubuntu), ("gpu02", &ubuntu, &rhel)] {
        ensure(
            node_sees(c, node, &has.join(PLUGIN))?
                && !node_sees(c, node, &lacks.join(PLUGIN))?
                && !node_sees(c, node, &built)?,
            format!("{node} should see the plugin in {} alone", has.display()),
        )?;
    }
    let plugin_dir = format!(
        "PluginDir={}:{}:{}:{}",
        rhel.display(),
        ubuntu.display(),
        plugins.display(),
        slurm_plugin_dir()
    );
    c.restart_slurmctld_after(|c| {
        let conf = fs::read_to_string(c.slurm_conf()).map_err(|e| e.to_string())?;
        let conf: String = conf
            .lines()
            .map(|l| {
                if l.starts_with("PluginDir=") {
                    format!("{plugin_dir}\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        let write = |name: &str, text: &str| {
            fs::write(etc.join(name), text).map_err(|e| format!("{name}: {e}"))
        };
        write("slurm.conf", &conf)?;
        write("plugstack.conf", &format!("required {PLUGIN}\n"))?;
        write("gres.conf", &gres)
    })?;
    // gpu01 runs configless: it gets all three files from slurmctld.
    for node in ["gpu01", "gpu02", "gpu03"] {
        c.restart_slurmd_cleanly(node)?;
    }
    let mut ids = BTreeMap::new();
    for node in ["gpu01", "gpu02"] {
        let script = "--wrap=echo HOST=$(hostname) GPU=$GPUSHARE_GPU \
                      PERCENT=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; sleep 300";
        ids.insert(node, c.sbatch_ok(&["-w", node, "--gres=mps:50", script])?);
    }
    for (node, &id) in &ids {
        let info = c
            .wait_job_state(id, &["RUNNING"], JOB_START)
            .map_err(|e| format!("{e}\njob output: {}", c.job_output(id)))?;
        ensure(
            info.get("NodeList") == Some(*node),
            format!("job {id} runs on {:?}, not {node}", info.get("NodeList")),
        )?;
    }
    wait_for("the shares' output", SHORT, || {
        ids.values()
            .all(|&id| printed(c, id, "PERCENT").is_some())
            .then_some(())
    })
    .map_err(|e| format!("{e}\nsyslog:\n{}", c.syslog()))?;
    // What only the SPANK plugin gives a share: its GPU and its MPS
    // limits, on each node from its own directory.
    for (node, &id) in &ids {
        let gpu = shares(c, node).get(&id).map(u32::to_string);
        ensure(
            printed(c, id, "HOST").as_deref() == Some(*node)
                && printed(c, id, "GPU") == gpu
                && gpu.is_some()
                && printed(c, id, "PERCENT").as_deref() == Some("50"),
            format!(
                "job {id} on {node} (ledger's GPU {gpu:?}): want its GPU and 50 %: {}",
                c.job_output(id)
            ),
        )?;
    }
    // Each node booked its mps from the one gres.conf's lines for it.
    for node in ["gpu01", "gpu02"] {
        let show = c.run_ok("scontrol", &["show", "node", node])?;
        ensure(
            show.contains("mps:") && !show.contains("DRAIN") && !show.contains("INVAL"),
            format!("scontrol show node {node}:\n{show}"),
        )?;
    }
    c.cancel_all()
}
