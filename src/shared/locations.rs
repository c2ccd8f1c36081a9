//! Where gpushare's files are, relative to the Slurm installation.

use std::path::{Path, PathBuf};

/// Slurm's default configuration file when neither the daemon nor
/// `$SLURM_CONF` names one.
pub const DEFAULT_SLURM_CONF: &str = "/etc/slurm/slurm.conf";

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

#[cfg(test)]
mod tests {
    use super::*;

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
