//! Where gpushare's files are, relative to the Slurm installation.

use std::path::{Path, PathBuf};

/// Slurm's default configuration file when neither the daemon nor
/// `$SLURM_CONF` names one.
pub const DEFAULT_SLURM_CONF: &str = "/etc/slurm/slurm.conf";

/// gpushare's node configuration, next to slurm.conf.
pub const GPU_MPS_CONF: &str = "gpu_mps.conf";

/// gpu_mps.conf's default `StateDir`: the node's root-only state
/// (ledger, MPS pipe and log directories).
pub const DEFAULT_STATE_DIR: &str = "/run/gpu-mps";

/// The path of `name` in the directory of the `slurm.conf` in use.
///
/// `slurm_conf` is the path the host daemon reports; otherwise
/// `$SLURM_CONF`, otherwise Slurm's default `/etc/slurm/slurm.conf`.
pub fn beside_slurm_conf(slurm_conf: Option<&Path>, name: &str) -> PathBuf {
    let conf = slurm_conf
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("SLURM_CONF").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SLURM_CONF));
    conf.parent().unwrap_or(Path::new("/")).join(name)
}

/// Where a node keeps its own gpushare configuration when slurm.conf comes
/// from elsewhere: a configless slurmd caches what slurmctld sends (slurm.conf,
/// gres.conf, cgroup.conf, plugstack.conf) in `/run/slurm/conf`, and
/// slurmctld never sends gpushare's files.
pub const NODE_CONF_DIR: &str = "/etc/slurm";

/// The places a node's configuration file `name` is looked for, in order:
/// `explicit` alone where the admin named one (`conf=` in plugstack.conf,
/// `--conf`); else beside the slurm.conf in use, then [`NODE_CONF_DIR`].
pub fn node_conf_candidates(
    explicit: Option<&Path>,
    slurm_conf: Option<&Path>,
    name: &str,
) -> Vec<PathBuf> {
    if let Some(path) = explicit {
        return vec![path.to_path_buf()];
    }
    let mut out = vec![beside_slurm_conf(slurm_conf, name)];
    let local = Path::new(NODE_CONF_DIR).join(name);
    if !out.contains(&local) {
        out.push(local);
    }
    out
}

/// The first of `candidates` that exists, or `Err` with them all (where
/// it was looked for, for the message).
pub fn first_existing(candidates: Vec<PathBuf>) -> Result<PathBuf, Vec<PathBuf>> {
    match candidates.iter().find(|p| p.exists()) {
        Some(found) => Ok(found.clone()),
        None => Err(candidates),
    }
}

/// The Slurm command `name` for a program slurmd starts (the prolog, the
/// epilog): the one installed beside that slurmd (`PREFIX/sbin/slurmd` ->
/// `PREFIX/bin/NAME`), so a Slurm built into a prefix of its own
/// (`/opt/slurm`) answers with its own commands although slurmd gives the
/// prolog no PATH (22.05) or a bare one; else `name` on PATH, then in
/// `/usr/bin` and `/usr/local/bin`; else `name` itself.
pub fn slurm_command(name: &str) -> PathBuf {
    let parent = std::os::unix::process::parent_id();
    let daemon = std::fs::read_link(format!("/proc/{parent}/exe")).ok();
    slurm_command_in(
        name,
        daemon.as_deref(),
        std::env::var_os("PATH").as_deref(),
        |p| p.is_file(),
    )
}

/// [`slurm_command`] from the starting program's path, a PATH value and a
/// test for an installed file.
pub fn slurm_command_in(
    name: &str,
    daemon: Option<&Path>,
    path: Option<&std::ffi::OsStr>,
    installed: impl Fn(&Path) -> bool,
) -> PathBuf {
    let beside_daemon = daemon
        .filter(|d| {
            d.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("slurm"))
        })
        .and_then(|d| d.parent()?.parent())
        .map(|prefix| prefix.join("bin"));
    beside_daemon
        .into_iter()
        .chain(
            path.map(|p| std::env::split_paths(p).collect::<Vec<_>>())
                .unwrap_or_default(),
        )
        .chain(["/usr/bin", "/usr/local/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| installed(p))
        .unwrap_or_else(|| PathBuf::from(name))
}

/// This host's short name (the kernel's hostname up to its first dot), as
/// Slurm names a node by default; `None` where it is empty or not text.
/// One `uname` (the UTS namespace's name, as /proc/sys/kernel/hostname
/// shows it), no file opened: every share's prolog asks.
pub fn short_hostname() -> Option<String> {
    let uts = rustix::system::uname();
    let name = uts.nodename().to_str().ok()?;
    let short = name.trim().split('.').next().unwrap_or("");
    (!short.is_empty()).then(|| short.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The name `uname` gives is the one the kernel shows in /proc.
    #[test]
    fn the_short_hostname_is_the_kernels() {
        let Ok(name) = std::fs::read_to_string("/proc/sys/kernel/hostname") else {
            return;
        };
        let short = name.trim().split('.').next().unwrap_or("");
        assert_eq!(
            short_hostname().as_deref(),
            (!short.is_empty()).then_some(short)
        );
    }

    #[test]
    fn slurm_commands_come_from_the_prefix_of_the_slurmd_that_started_us() {
        let installed = |p: &Path| {
            [
                "/opt/slurm-25.05/bin/squeue",
                "/usr/bin/squeue",
                "/usr/local/bin/sinfo",
            ]
            .contains(&p.to_str().unwrap_or(""))
        };
        let slurmd = Some(Path::new("/opt/slurm-25.05/sbin/slurmd"));
        let path = Some(std::ffi::OsStr::new("/usr/bin:/bin"));
        assert_eq!(
            slurm_command_in("squeue", slurmd, path, installed),
            Path::new("/opt/slurm-25.05/bin/squeue")
        );
        // Started from a shell: PATH, then the usual places.
        let bash = Some(Path::new("/usr/bin/bash"));
        assert_eq!(
            slurm_command_in("squeue", bash, path, installed),
            Path::new("/usr/bin/squeue")
        );
        assert_eq!(
            slurm_command_in("sinfo", slurmd, None, installed),
            Path::new("/usr/local/bin/sinfo")
        );
        // Nowhere: the bare name, for the error to name it.
        assert_eq!(
            slurm_command_in("sprio", slurmd, path, installed),
            Path::new("sprio")
        );
    }

    #[test]
    fn a_node_conf_is_looked_for_beside_slurm_conf_then_in_etc_slurm() {
        // A configless node: slurm.conf in slurmd's cache.
        assert_eq!(
            node_conf_candidates(
                None,
                Some(Path::new("/run/slurm/conf/slurm.conf")),
                "gpu_mps.conf"
            ),
            vec![
                PathBuf::from("/run/slurm/conf/gpu_mps.conf"),
                PathBuf::from("/etc/slurm/gpu_mps.conf")
            ]
        );
        assert_eq!(
            node_conf_candidates(
                None,
                Some(Path::new("/etc/slurm/slurm.conf")),
                "gpu_mps.conf"
            ),
            vec![PathBuf::from("/etc/slurm/gpu_mps.conf")]
        );
        assert_eq!(
            node_conf_candidates(Some(Path::new("/opt/g.conf")), None, "gpu_mps.conf"),
            vec![PathBuf::from("/opt/g.conf")]
        );
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let there = dir.path().join("b");
        std::fs::write(&there, "").unwrap_or_else(|e| panic!("{e}"));
        let missing = dir.path().join("a");
        assert_eq!(
            first_existing(vec![missing.clone(), there.clone()]),
            Ok(there)
        );
        assert_eq!(first_existing(vec![missing.clone()]), Err(vec![missing]));
    }

    #[test]
    fn config_lives_beside_slurm_conf() {
        assert_eq!(
            beside_slurm_conf(Some(Path::new("/opt/slurm/etc/slurm.conf")), "gpu_qos.conf"),
            PathBuf::from("/opt/slurm/etc/gpu_qos.conf")
        );
        assert_eq!(
            beside_slurm_conf(Some(Path::new("slurm.conf")), "x"),
            PathBuf::from("x")
        );
    }
}
