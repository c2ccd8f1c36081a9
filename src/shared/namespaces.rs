//! Job namespaces as Slurm reads them from the controller's or a node's
//! files: which plugin (`JobContainerType=`, from 25.11 `NamespaceType=`),
//! which directories each job gets its own copy of (`Dirs=` of
//! job_container.conf, `dirs:` of namespace.yaml), and whether one of
//! them holds the MPS pipes under gpu_mps.conf's `StateDir`. Text in,
//! answers out: `gpu-mps status` reads a node's files
//! (`mps::namespaces`), `gpu-qos audit` the controller's.

use std::path::{Path, PathBuf};

use super::syntax::{self as kv, slurm_conf_values};

/// What Slurm makes private per job where no `Dirs=`/`dirs:` says
/// otherwise (`SLURM_TMPFS_DEF_DIRS`, 23.02 to 26.05; 22.05 has no `Dirs`
/// and always does this).
const DEFAULT_DIRS: &str = "/tmp,/dev/shm";

/// The job namespace plugin slurm.conf's text names, if any:
/// `NamespaceType=` where set, else `JobContainerType=` (25.11 reads the
/// old key so), the last line of each counting; `none` is none.
pub fn namespace_plugin(slurm_conf: &str) -> Option<String> {
    let last = |key| slurm_conf_values(slurm_conf, key).next_back();
    plugin_of(last("NamespaceType"), last("JobContainerType"))
}

/// The job namespace plugin of the two settings, as Slurm decides it
/// (`_validate_and_set_defaults` in read_config.c): `namespace_type`
/// (25.11's `NamespaceType`) where set, else `job_container_type`; a value
/// containing `none` (any case) or `(null)` (what `scontrol show config`
/// prints for unset) is none.
pub fn plugin_of(namespace_type: Option<&str>, job_container_type: Option<&str>) -> Option<String> {
    fn set(v: Option<&str>) -> Option<&str> {
        v.map(str::trim).filter(|v| !v.is_empty() && *v != "(null)")
    }
    set(namespace_type)
        .or_else(|| set(job_container_type))
        .filter(|p| !p.to_ascii_lowercase().contains("none"))
        .map(str::to_owned)
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
            yaml_dir_confs(text).or_else(|| {
                text.lines()
                    .map(|l| l.split('#').next().unwrap_or_default().trim())
                    .find_map(|l| l.strip_prefix("dirs:"))
                    .map(|v| v.trim().trim_matches(['"', '\'']).to_owned())
            })
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

/// The `path:` of each entry of namespace.yaml's `dir_confs:` (26.05),
/// which supersedes `dirs:` where both are set, joined by commas as
/// `dirs:` is; `None` where there is no `dir_confs:` key. Block entries
/// (`- path: /tmp` below the key) and flow ones (`[{path: /tmp}]`) are
/// read; `base_path:` is not a path of a private directory.
fn yaml_dir_confs(text: &str) -> Option<String> {
    let lines: Vec<&str> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim_end())
        .collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let at = lines.iter().position(|l| l.contains("dir_confs:"))?;
    let key_indent = indent(lines[at]);
    let mut region = lines[at]
        .split_once("dir_confs:")
        .map(|(_, v)| v.to_owned())
        .unwrap_or_default();
    for l in lines.iter().skip(at + 1).filter(|l| !l.trim().is_empty()) {
        let below =
            indent(l) > key_indent || (indent(l) == key_indent && l.trim_start().starts_with('-'));
        if !below {
            break;
        }
        region.push('\n');
        region.push_str(l);
    }
    let mut paths = Vec::new();
    let mut rest = region.as_str();
    while let Some(i) = rest.find("path:") {
        let before = rest[..i].chars().next_back();
        let after = &rest[i + "path:".len()..];
        if before.is_none_or(|c| c.is_whitespace() || matches!(c, '{' | ',' | '-')) {
            let value = after
                .split(['\n', ',', '}'])
                .next()
                .unwrap_or_default()
                .trim()
                .trim_matches(['"', '\'']);
            if !value.is_empty() {
                paths.push(value.to_owned());
            }
        }
        rest = after;
    }
    Some(paths.join(","))
}

/// The key of namespace.yaml's `text` that names the private directories:
/// `dir_confs:` where the file has one (26.05), else `dirs:`.
pub fn yaml_dirs_key(text: &str) -> &'static str {
    if yaml_dir_confs(text).is_some() {
        "dir_confs:"
    } else {
        "dirs:"
    }
}

/// Where a node with `state_dir` keeps its MPS pipes: `<state_dir>-mps`.
pub fn pipes_dir(state_dir: &Path) -> PathBuf {
    let mut mps = state_dir.as_os_str().to_owned();
    mps.push("-mps");
    PathBuf::from(mps)
}

/// The one of `dirs` (a job's private directories) that holds
/// `state_dir`'s MPS pipes, if any.
pub fn hiding_dir<'d>(dirs: &'d [PathBuf], state_dir: &Path) -> Option<&'d Path> {
    let mps = pipes_dir(state_dir);
    dirs.iter()
        .find(|d| mps.starts_with(d))
        .map(PathBuf::as_path)
}

/// The warning for a node whose job namespaces hide `state_dir`'s MPS
/// pipes (`<state_dir>-mps`), `None` where they do not.
pub fn hidden_pipes(plugin: &str, dirs: &[PathBuf], state_dir: &Path) -> Option<String> {
    let dir = hiding_dir(dirs, state_dir)?;
    Some(format!(
        "job namespaces ({plugin}) give each job its own {}, which holds the MPS pipes \
         under {}: every share would fail at its start; move StateDir= of gpu_mps.conf \
         out of it (the default {} is)",
        dir.display(),
        pipes_dir(state_dir).display(),
        super::locations::DEFAULT_STATE_DIR,
    ))
}

/// gpu_mps.conf's `StateDir=` in its text (`gpu_mps_conf`), `None` where
/// the file does not set it (or sets something that is not an absolute
/// path, which the node refuses anyway).
pub fn state_dir_of(gpu_mps_conf: &str) -> Option<PathBuf> {
    kv::lines(gpu_mps_conf)
        .filter_map(|(_, pairs)| pairs.ok())
        .flatten()
        .find(|p| p.key.eq_ignore_ascii_case("StateDir"))
        .map(|p| PathBuf::from(p.value))
        .filter(|p| p.is_absolute())
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
        // 26.05's dir_confs: supersedes dirs:, block or flow style.
        let linux = |yaml| private_dirs("namespace/linux", None, Some(yaml));
        let block = "defaults:\n  base_path: /var/ns\n  dirs: /x\n  dir_confs:\n    \
                     - path: /tmp\n      base_path: /scratch\n      options: noexec\n    \
                     - path: \"/run\"\n      tmpfs: true\n  shared: false\n";
        assert_eq!(linux(block), vec![PathBuf::from("/tmp"), "/run".into()]);
        let same_indent = "defaults:\n  dir_confs:\n  - path: /dev/shm\n  - {path: /var/tmp}\n";
        assert_eq!(
            linux(same_indent),
            vec![PathBuf::from("/dev/shm"), "/var/tmp".into()]
        );
        let flow = "defaults: {dir_confs: [{path: /tmp, base_path: /b}, {path: '/run/x'}]}\n";
        assert_eq!(linux(flow), vec![PathBuf::from("/tmp"), "/run/x".into()]);
        // A key after the list ends it.
        let after = "defaults:\n  dir_confs:\n    - path: /tmp\nnode_confs:\n  - nodes: a\n    \
                     options:\n      path: /not\n";
        assert_eq!(linux(after), vec![PathBuf::from("/tmp")]);
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
    fn show_configs_null_is_no_plugin() {
        assert_eq!(plugin_of(Some("(null)"), Some("(null)")), None);
        assert_eq!(
            plugin_of(Some("(null)"), Some("job_container/tmpfs")).as_deref(),
            Some("job_container/tmpfs")
        );
        assert_eq!(plugin_of(None, Some("job_container/None")), None);
    }

    #[test]
    fn the_state_dir_is_gpu_mps_confs_own() {
        assert_eq!(state_dir_of("UnitsPerGPU=100\n"), None);
        assert_eq!(
            state_dir_of("# StateDir=/x\nstatedir=/tmp/x  # here\n"),
            Some(PathBuf::from("/tmp/x"))
        );
        assert_eq!(state_dir_of("StateDir=relative\n"), None);
    }
}
