//! A GPU's MPS control daemon: one per GPU, started by the prolog for the
//! first share on it, asked to quit by the epilog when its last share ends.
//!
//! Each daemon sees only its GPU (`CUDA_VISIBLE_DEVICES`) and has its own
//! pipe and log directories under `<StateDir>-mps/gpu<N>/`, which jobs can
//! traverse and read but not write (they are created or checked by
//! [`super::state_dir`]). Every call of the control program is bounded by
//! [`CONTROL_TIMEOUT`]: a hung daemon must not hang a job's start.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::bounded;
use super::config::{GpuMpsConfig, MpsControl};
use super::state_dir::{self, Access};

/// How long one call of `nvidia-cuda-mps-control` may take.
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);

/// What happened to an MPS control daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MpsDaemon {
    /// Started (or asked to stop) successfully.
    Done,
    /// Already running.
    AlreadyRunning,
    /// No `nvidia-cuda-mps-control` on this node (or `MPSControl=none`).
    NotAvailable,
    /// The control program failed; the text says how.
    Failed(String),
}

/// The directory of the node's MPS pipes and logs and of the published
/// status copy: `<StateDir>-mps`, outside the root-only ledger directory
/// because job processes must reach the pipes.
pub fn public_dir(cfg: &GpuMpsConfig) -> PathBuf {
    let mut base = cfg.state_dir.clone().into_os_string();
    base.push("-mps");
    PathBuf::from(base)
}

/// Directory of GPU `gpu`'s MPS pipes and logs.
pub fn gpu_dir(cfg: &GpuMpsConfig, gpu: u32) -> PathBuf {
    public_dir(cfg).join(format!("gpu{gpu}"))
}

fn program(cfg: &GpuMpsConfig) -> Option<PathBuf> {
    match &cfg.mps_control {
        MpsControl::Disabled => None,
        MpsControl::Program(p) => Some(p.clone()),
        MpsControl::FromPath => std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("nvidia-cuda-mps-control"))
                .find(|p| p.is_file())
        }),
    }
}

fn command(cfg: &GpuMpsConfig, program: &Path, gpu: u32) -> Command {
    let dir = gpu_dir(cfg, gpu);
    let mut cmd = Command::new(program);
    // Index N must mean /dev/nvidiaN: CUDA's default order is "fastest first".
    cmd.env("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        .env("CUDA_VISIBLE_DEVICES", gpu.to_string())
        .env("CUDA_MPS_PIPE_DIRECTORY", dir.join("pipe"))
        .env("CUDA_MPS_LOG_DIRECTORY", dir.join("log"));
    cmd
}

fn outcome(what: &str, program: &Path, ran: Result<bounded::Ran, bounded::RunError>) -> MpsDaemon {
    match ran {
        Ok(r) if r.status.success() => MpsDaemon::Done,
        Ok(r) => MpsDaemon::Failed(format!(
            "{} {what}: {} {}",
            program.display(),
            r.status,
            r.stderr.trim()
        )),
        Err(e) => MpsDaemon::Failed(e.to_string()),
    }
}

/// Starts GPU `gpu`'s MPS control daemon unless it runs already. `owner`
/// must own the directories (the prolog's effective uid, root).
pub fn start(cfg: &GpuMpsConfig, gpu: u32, owner: u32) -> MpsDaemon {
    let Some(program) = program(cfg) else {
        return MpsDaemon::NotAvailable;
    };
    let dir = gpu_dir(cfg, gpu);
    if dir.join("pipe/control").exists() {
        return MpsDaemon::AlreadyRunning;
    }
    for sub in [dir.clone(), dir.join("pipe"), dir.join("log")] {
        if let Err(e) = state_dir::ensure(&sub, owner, Access::WorldReadable) {
            return MpsDaemon::Failed(e.to_string());
        }
    }
    let mut cmd = command(cfg, &program, gpu);
    cmd.arg("-d");
    outcome("-d", &program, bounded::run(cmd, None, CONTROL_TIMEOUT))
}

/// Asks GPU `gpu`'s MPS control daemon to quit.
pub fn stop(cfg: &GpuMpsConfig, gpu: u32) -> MpsDaemon {
    let Some(program) = program(cfg) else {
        return MpsDaemon::NotAvailable;
    };
    if !gpu_dir(cfg, gpu).join("pipe/control").exists() {
        return MpsDaemon::NotAvailable;
    }
    let ran = bounded::run(
        command(cfg, &program, gpu),
        Some(b"quit\n"),
        CONTROL_TIMEOUT,
    );
    outcome("quit", &program, ran)
}
