//! Job namespaces: Slurm's job container and namespace plugins
//! (`JobContainerType=job_container/tmpfs`; from Slurm 25.11
//! `NamespaceType=namespace/tmpfs` or `namespace/linux`) give each job its
//! own empty copy of every directory in `Dirs=` (`job_container.conf`) or
//! `dirs:` (`namespace.yaml`), by default `/tmp` and `/dev/shm`. A share's
//! task reaches its GPU's MPS server through the pipe directory under
//! `<StateDir>-mps`; where one of those directories holds it, the task
//! cannot (it then fails in its SPANK task_init, `node::unreachable_pipes`).
//! A job's own `/dev/shm` does not matter: MPS clients reach their server
//! through the pipe directory alone (seen on a GPU, docs/hardware.md).
//!
//! This reads the node's configuration as Slurm would, so that `gpu-mps
//! status` can say so before any job fails; what it reads is decided in
//! [`crate::shared::namespaces`], which `gpu-qos audit` shares.

use std::fs;
use std::path::Path;

pub use crate::shared::namespaces::{hidden_pipes, namespace_plugin, private_dirs};

/// [`hidden_pipes`] for this node, reading `slurm_conf` and the plugin's
/// file beside it.
pub fn node_warning(slurm_conf: &Path, state_dir: &Path) -> Option<String> {
    let text = fs::read_to_string(slurm_conf).ok()?;
    let plugin = namespace_plugin(&text)?;
    let beside = |name: &str| fs::read_to_string(slurm_conf.with_file_name(name)).ok();
    let dirs = private_dirs(
        &plugin,
        beside("job_container.conf").as_deref(),
        beside("namespace.yaml").as_deref(),
    );
    hidden_pipes(&plugin, &dirs, state_dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_is_read_from_the_files_beside_slurm_conf() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let conf = dir.path().join("slurm.conf");
        let state = Path::new("/tmp/gpushare/state");
        assert_eq!(node_warning(&conf, state), None, "no slurm.conf");
        fs::write(&conf, "JobContainerType=job_container/tmpfs\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(node_warning(&conf, state).is_some());
        fs::write(dir.path().join("job_container.conf"), "Dirs=/dev/shm\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(node_warning(&conf, state), None);
    }
}
