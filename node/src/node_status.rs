//! `gpu-mps status`: the node's view as the ledger (or, for a user who
//! cannot read it, its published copy) has it, with what NVML, the
//! disable mark, the file's NodeName= lines and Slurm's namespaces add to
//! it. The table and the JSON are the core's (`mps::status`).

use std::path::{Path, PathBuf};

use gpushare::mps::config::{self, GpuMpsConfig};
use gpushare::mps::node::gpu_devices;
use gpushare::mps::status::{self, NodeStatus};
use gpushare::mps::{disabled, in_force, namespaces};

use crate::nvml;

/// The configuration in force for node `node` in `conf`, as the node
/// programs run with it (never a half-written file), read as user `uid`;
/// what it says about the file goes to `say`.
pub fn in_force(
    conf: &Path,
    node: &str,
    uid: u32,
    say: &mut dyn FnMut(String),
) -> Result<GpuMpsConfig, String> {
    if !conf.exists() {
        return Err(format!(
            "{}: not found: this node shares no GPU",
            conf.display()
        ));
    }
    let records = Path::new(in_force::NODE_RECORDS_DIR);
    let found = in_force::resolve(conf, node, records, uid, in_force::Role::Reader);
    found.notes.into_iter().for_each(&mut *say);
    found
        .cfg
        .ok_or_else(|| found.shares_refused.unwrap_or_default())
}

/// The view of node `node` from `conf`'s configuration in force, as user
/// `uid` may see it, with its GPUs' devices and why the ledger could not
/// be read (the view is then the copy); notes on the file go to `say`.
pub fn view(
    conf: &Path,
    node: &str,
    uid: u32,
    say: &mut dyn FnMut(String),
) -> Result<(NodeStatus, Vec<PathBuf>, Option<String>), String> {
    let cfg = &in_force(conf, node, uid, say)?;
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

#[cfg(test)]
mod tests {
    use super::in_force;

    #[test]
    fn a_node_without_the_file_shares_no_gpu_and_says_where_it_looked() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let conf = dir.path().join("gpu_mps.conf");
        let mut said = Vec::new();
        let Err(err) = in_force(&conf, "gpu01", 0, &mut |l| said.push(l)) else {
            panic!("a configuration from a file that does not exist");
        };
        assert!(err.contains(&conf.display().to_string()), "{err}");
        assert!(err.contains("shares no GPU"), "{err}");
        assert!(said.is_empty(), "{said:?}");
    }
}
