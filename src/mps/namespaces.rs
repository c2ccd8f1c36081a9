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
//! status` can say so before any job fails.

use std::fs;
use std::path::{Path, PathBuf};

use super::config::slurm_conf_values;

/// What Slurm makes private per job where no `Dirs=`/`dirs:` says
/// otherwise (`SLURM_TMPFS_DEF_DIRS`, 23.02 to 26.05; 22.05 has no `Dirs`
/// and always does this).
const DEFAULT_DIRS: &str = "/tmp,/dev/shm";

/// The job namespace plugin slurm.conf's text names, if any:
/// `NamespaceType=` where set, else `JobContainerType=` (25.11 reads the
/// old key so), the last line of each counting; `none` is none.
pub fn namespace_plugin(slurm_conf: &str) -> Option<String> {
    let last = |key| {
        slurm_conf_values(slurm_conf, key)
            .next_back()
            .map(str::to_owned)
    };
    last("NamespaceType")
        .or_else(|| last("JobContainerType"))
        .filter(|p| !p.is_empty() && !p.to_ascii_lowercase().contains("none"))
}

/// The directories a job gets its own copy of under `plugin`:
/// `job_container_conf` (text of job_container.conf, `Dirs=` on a line
/// without `NodeName=`) for the tmpfs plugins, `namespace_yaml` (`dirs:`)
/// for namespace/linux; Slurm's default where the file or key is absent.
pub fn private_dirs(
    plugin: &str,
    job_container_conf: Option<&str>,
    namespace_yaml: Option<&str>,
) -> Vec<PathBuf> {
    let value = if plugin.to_ascii_lowercase().ends_with("/linux") {
        namespace_yaml.and_then(|text| {
            text.lines()
                .map(|l| l.split('#').next().unwrap_or_default().trim())
                .find_map(|l| l.strip_prefix("dirs:"))
                .map(|v| v.trim().trim_matches(['"', '\'']).to_owned())
        })
    } else {
        job_container_conf.and_then(|text| {
            text.lines()
                .map(|l| l.split('#').next().unwrap_or_default().trim())
                .filter(|l| !l.to_ascii_lowercase().starts_with("nodename="))
                .flat_map(|l| l.split_whitespace())
                .filter_map(|w| w.split_once('='))
                .filter(|(k, _)| k.eq_ignore_ascii_case("Dirs"))
                .map(|(_, v)| v.to_owned())
                .next_back()
        })
    };
    value
        .as_deref()
        .unwrap_or(DEFAULT_DIRS)
        .split(',')
        .map(str::trim)
        .filter(|d| d.starts_with('/'))
        .map(PathBuf::from)
        .collect()
}

/// The warning for a node whose job namespaces hide `state_dir`'s MPS
/// pipes (`<state_dir>-mps`), `None` where they do not.
pub fn hidden_pipes(plugin: &str, dirs: &[PathBuf], state_dir: &Path) -> Option<String> {
    let mut mps = state_dir.as_os_str().to_owned();
    mps.push("-mps");
    let mps = PathBuf::from(mps);
    let dir = dirs.iter().find(|d| mps.starts_with(d))?;
    Some(format!(
        "job namespaces ({plugin}) give each job its own {}, which holds the MPS pipes \
         under {}: every share would fail at its start; move StateDir= of gpu_mps.conf \
         out of it (the default /run/gpu-mps is)",
        dir.display(),
        mps.display()
    ))
}

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
    fn the_plugin_is_the_newer_key_else_the_older() {
        assert_eq!(namespace_plugin("ClusterName=x\n"), None);
        assert_eq!(
            namespace_plugin("JobContainerType=job_container/tmpfs\n").as_deref(),
            Some("job_container/tmpfs")
        );
        assert_eq!(
            namespace_plugin(
                "JobContainerType=job_container/tmpfs\nnamespacetype = namespace/linux # new\n"
            )
            .as_deref(),
            Some("namespace/linux")
        );
        assert_eq!(
            namespace_plugin("JobContainerType=job_container/none\n"),
            None
        );
    }

    #[test]
    fn dirs_come_from_the_plugins_file_or_slurms_default() {
        let tmpfs = |conf| private_dirs("job_container/tmpfs", conf, None);
        assert_eq!(tmpfs(None), vec![PathBuf::from("/tmp"), "/dev/shm".into()]);
        assert_eq!(
            tmpfs(Some(
                "AutoBasePath=true BasePath=/var/ns Dirs=/tmp,/var/tmp\n"
            )),
            vec![PathBuf::from("/tmp"), "/var/tmp".into()]
        );
        // A node's own line is that node's, not the default.
        assert_eq!(
            tmpfs(Some(
                "BasePath=/var/ns\nNodeName=gpu01 BasePath=/x Dirs=/scratch\n"
            ))
            .len(),
            2
        );
        let yaml = "defaults:\n  base_path: /var/ns\n  dirs: \"/tmp,/run/x\"\n";
        assert_eq!(
            private_dirs("namespace/linux", Some("Dirs=/y\n"), Some(yaml)),
            vec![PathBuf::from("/tmp"), "/run/x".into()]
        );
    }

    #[test]
    fn only_a_state_dir_inside_a_private_dir_is_flagged() {
        let dirs = private_dirs("namespace/tmpfs", None, None);
        assert_eq!(
            hidden_pipes("namespace/tmpfs", &dirs, Path::new("/run/gpu-mps")),
            None
        );
        // A name that only starts alike is another directory.
        assert_eq!(
            hidden_pipes("namespace/tmpfs", &dirs, Path::new("/tmpx/gpu-mps")),
            None
        );
        let w =
            hidden_pipes("namespace/tmpfs", &dirs, Path::new("/tmp/gpu-mps")).unwrap_or_default();
        assert!(
            w.contains("its own /tmp") && w.contains("/tmp/gpu-mps-mps") && w.contains("StateDir="),
            "{w}"
        );
    }

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
