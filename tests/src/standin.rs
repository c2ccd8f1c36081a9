//! The stand-in MPS control program (`src/bin/mps-control-standin.rs`),
//! built with the harness: installed under NVIDIA's name where a cluster's
//! `MPSControl=` points.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::cluster::harness_dir;

use gpushare::mps::programs::CONTROL_PROGRAM;

/// Copies the stand-in into `dir` as `nvidia-cuda-mps-control` (its log,
/// `hang` and `servers` files live beside it) and returns its path.
pub fn install(dir: &Path) -> crate::Result<PathBuf> {
    install_as(dir, CONTROL_PROGRAM)
}

/// Copies the stand-in into `dir` as `nvidia-smi` (it then stands in for
/// that, logging to the same `standin.log`) and returns its path.
pub fn install_smi(dir: &Path) -> crate::Result<PathBuf> {
    install_as(dir, gpushare::mps::compute_mode::SMI)
}

/// Copies the stand-in into `dir` as `gpushare-nvml-usage`: the node
/// timer's NVML query as `ShareUsage=` names it, printing the figures in
/// `dir/nvml-usage` (see `src/bin/mps-control-standin.rs`); its path.
pub fn install_nvml_usage(dir: &Path) -> crate::Result<PathBuf> {
    install_as(dir, NVML_USAGE)
}

/// The name the stand-in NVML query is installed under.
pub const NVML_USAGE: &str = "gpushare-nvml-usage";

/// Copies the stand-in into `dir` as `cuda-client`: a program that uses
/// its job's GPU as the stand-in `nvidia-smi`'s mode allows (see
/// `src/bin/mps-control-standin.rs`), and returns its path.
pub fn install_client(dir: &Path) -> crate::Result<PathBuf> {
    install_as(dir, "cuda-client")
}

fn install_as(dir: &Path, name: &str) -> crate::Result<PathBuf> {
    let source = harness_dir()?.join("mps-control-standin");
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let program = dir.join(name);
    // A copy, not a link: a running copy is replaced by rename, never
    // written over (ETXTBSY).
    let temp = dir.join(format!(".{name}.new"));
    fs::copy(&source, &temp).map_err(|e| {
        format!(
            "{}: {e} (built by cargo build -p gpushare-tests --bins)",
            source.display()
        )
    })?;
    fs::set_permissions(&temp, fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
    fs::rename(&temp, &program).map_err(|e| e.to_string())?;
    Ok(program)
}
