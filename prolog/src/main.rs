//! `gpu-mps-prolog`: slurmd's `Prolog=` (or one script of a prolog.d) on
//! GPU nodes that share GPUs through MPS.
//!
//! For a job holding an MPS share it picks the least-loaded GPU and records
//! it in the node's ledger (`StateDir`), starting that GPU's MPS control
//! daemon; for a whole-GPU job it records which GPUs it holds, so no share
//! is put there. It exits non-zero only when the node is unfit for sharing
//! (bad gpu_mps.conf, unusable state directory): slurmd then drains the
//! node, as it should. A share that cannot be placed is refused through the
//! SPANK plugin instead, never by failing here.
//!
//! `gpu-mps-prolog [--conf PATH]` (default: gpu_mps.conf next to slurm.conf).

use std::process::ExitCode;

use gpushare::mps_node::{prolog, running_jobs, script_start, PrologOutcome};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let (node, env) = match script_start("gpu-mps-prolog", &args, euid) {
        Ok(Some(started)) => started,
        Ok(None) => return ExitCode::SUCCESS,
        Err((status, message)) => {
            eprintln!("{message}");
            return ExitCode::from(status);
        }
    };
    // Only a job that takes GPUs needs stale records cleared first.
    let running = if env.is_share() || !env.job_gpus.is_empty() {
        std::env::var("SLURMD_NODENAME")
            .ok()
            .and_then(|n| running_jobs(&n))
    } else {
        None
    };
    match prolog(
        &node.cfg,
        node.gpu_count,
        &node.ledger,
        &env,
        running.as_ref(),
    ) {
        Ok(report) => {
            for r in &report.dropped {
                node.log(&format!(
                    "gpu-mps-prolog: job {}: dropped record of vanished job: {r}",
                    env.job
                ));
            }
            for n in &report.notes {
                node.log(&format!("gpu-mps-prolog: warning: {n}"));
            }
            match &report.outcome {
                PrologOutcome::Untouched => {}
                PrologOutcome::Placed {
                    share,
                    already,
                    mps,
                } => node.log(&format!(
                    "gpu-mps-prolog: job {} ({}): {} units on GPU {}{}; MPS daemon: {mps:?}",
                    env.job,
                    env.user,
                    share.units,
                    share.gpu,
                    if *already { " (already placed)" } else { "" }
                )),
                PrologOutcome::Refused(text) => {
                    node.log(&format!("gpu-mps-prolog: refused: {text}"))
                }
                PrologOutcome::Whole { gpus, overlapping } => {
                    node.log(&format!(
                        "gpu-mps-prolog: job {}: holds GPUs {gpus:?} whole",
                        env.job
                    ));
                    for s in overlapping {
                        node.log(&format!(
                            "gpu-mps-prolog: warning: Slurm gave job {} GPU {} whole while share job {} runs there (Slurm 22.05 books all shares on GPU 0)",
                            env.job, s.gpu, s.job
                        ));
                    }
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            node.log(&format!(
                "gpu-mps-prolog: job {}: node unfit for GPU sharing: {e}",
                env.job
            ));
            ExitCode::FAILURE
        }
    }
}
