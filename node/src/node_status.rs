//! `gpu-mps status`: the node's view as the ledger (or, for a user who
//! cannot read it, its published copy) has it, with what NVML, the
//! disable mark, the file's NodeName= lines and Slurm's namespaces add to
//! it. The table and the JSON are the core's (`mps::status`).

use std::path::{Path, PathBuf};

use gpushare::mps::config::{self, GpuMpsConfig};
use gpushare::mps::node::gpu_devices;
use gpushare::mps::status::{self, NodeStatus};
use gpushare::mps::{disabled, namespaces};

use crate::nvml;

/// The view of the node `node` whose configuration in force is `cfg`
/// (read from `conf`), as user `uid` may see it, with its GPUs' devices
/// and why the ledger could not be read (the view is then the copy).
pub fn view(
    cfg: &GpuMpsConfig,
    conf: &Path,
    node: &str,
    uid: u32,
) -> Result<(NodeStatus, Vec<PathBuf>, Option<String>), String> {
    let devices = gpu_devices(cfg);
    let gpus = u32::try_from(devices.len()).unwrap_or(u32::MAX);
    let (mut view, trouble) =
        NodeStatus::as_seen(cfg, gpus, uid == 0).map_err(|e| e.to_string())?;
    nvml::add_to_status(&mut view, &devices);
    view.disabled = disabled::read(Path::new(disabled::DISABLED_DIR), conf, 0).map(|d| d.reason);
    // Which of a shared file's NodeName= lines this node takes (the file as
    // it reads now).
    if let Ok(Some(settings)) = config::load(conf, node) {
        view.node_lines = status::NodeLines::of(node, &settings);
    }
    let slurm_conf = gpushare::shared::locations::beside_slurm_conf(None, "slurm.conf");
    view.warnings
        .extend(namespaces::node_warning(&slurm_conf, &cfg.state_dir));
    Ok((view, devices, trouble))
}
