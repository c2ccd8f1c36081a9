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

use gpushare::mps_conf::CONF_NAME;
use gpushare::mps_node::{epilog, JobEnv, Node};
use gpushare::reload::beside_slurm_conf;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let conf = match args.as_slice() {
        [] => beside_slurm_conf(None, CONF_NAME),
        [flag, path] if flag == "--conf" => path.into(),
        _ => {
            eprintln!("usage: gpu-mps-epilog [--conf PATH]   (run by slurmd as Epilog=)");
            return ExitCode::from(2);
        }
    };
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let node = match Node::open(&conf, euid) {
        Ok(Some(n)) => n,
        Ok(None) => return ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpu-mps-epilog: node unfit for GPU sharing: {e}");
            return ExitCode::FAILURE;
        }
    };
    let job = match JobEnv::from_env(|k| std::env::var(k).ok()) {
        Ok(e) => e.job,
        Err(e) => {
            eprintln!("gpu-mps-epilog: {e}");
            return ExitCode::from(2);
        }
    };
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
