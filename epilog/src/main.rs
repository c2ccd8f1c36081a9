//! `gpu-mps-epilog`: slurmd's `Epilog=` (or one script of an epilog.d) on
//! GPU nodes that share GPUs through MPS.
//!
//! Releases the job's share (or whole-GPU record) from the node's ledger and
//! stops a GPU's MPS control daemon when its last share ends. Running it
//! twice for a job is harmless. It exits non-zero only when the node is
//! unfit (slurmd then drains it).
//!
//! `gpu-mps-epilog [--conf PATH]` (default: gpu_mps.conf next to slurm.conf).

use std::process::ExitCode;

use gpushare::mps_node::{epilog, script_start};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let (node, env) = match script_start("gpu-mps-epilog", &args, euid) {
        Ok(Some(started)) => started,
        Ok(None) => return ExitCode::SUCCESS,
        Err((status, message)) => {
            eprintln!("{message}");
            return ExitCode::from(status);
        }
    };
    let job = env.job;
    match epilog(&node.cfg, node.gpu_count, &node.ledger, job) {
        Ok(report) => {
            for r in &report.released {
                node.log(&format!("gpu-mps-epilog: job {job}: released {r}"));
            }
            for (gpu, outcome) in &report.stopped {
                node.log(&format!(
                    "gpu-mps-epilog: GPU {gpu} has no share left; MPS daemon stop: {outcome:?}"
                ));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            node.log(&format!(
                "gpu-mps-epilog: job {job}: node unfit for GPU sharing: {e}"
            ));
            ExitCode::FAILURE
        }
    }
}
