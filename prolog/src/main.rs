//! `gpu-mps-prolog`: slurmd's `Prolog=` (or one script of a prolog.d) on
//! GPU nodes that share GPUs through MPS.
//!
//! For a job Slurm gave an MPS share it picks the least-loaded GPU and
//! records it in the node's ledger (`StateDir`), starting that GPU's MPS
//! control daemon; for a whole-GPU job it records which GPUs it holds, so
//! no share is put there. It exits non-zero only when the node is unfit for
//! sharing (bad gpu_mps.conf, unusable state directory): slurmd then drains
//! the node, as it should. A share that cannot be placed is refused through
//! the SPANK plugin instead, never by failing here. Logs go to syslog under
//! `gpu-mps-prolog` (see `gpushare_admin::node_log`).

use std::process::ExitCode;

use clap::Parser;
use gpushare::mps::booking::MpsBooking;
use gpushare::mps::config::MemoryLimit;
use gpushare::mps::node::{prolog, publish_metrics, running_jobs, PrologOutcome};
use gpushare::mps::status;
use gpushare::shared::locations::beside_slurm_conf;
use gpushare_admin::node_program::{self, NodeArgs, Program, Started};
use gpushare_admin::nvml;

/// slurmd's Prolog on GPU nodes that share GPUs through MPS (gpushare).
#[derive(Debug, Parser)]
#[command(name = "gpu-mps-prolog", version = env!("CARGO_PKG_VERSION"))]
struct Args {
    #[command(flatten)]
    node: NodeArgs,
}

fn main() -> ExitCode {
    let args = Args::parse();
    // `_in_force` holds the configuration's lock until the share is placed.
    let Started {
        mut node,
        env,
        in_force: _in_force,
    } = match node_program::start(Program::Prolog, &args.node) {
        Ok(Some(started)) => started,
        Ok(None) => return ExitCode::SUCCESS,
        Err(code) => return code,
    };
    let node_name = std::env::var("SLURMD_NODENAME").ok();
    let running = || {
        let name = node_name
            .as_deref()
            .ok_or_else(|| "SLURMD_NODENAME is not set".to_owned())?;
        running_jobs(name)
    };
    // How Slurm books mps here: gres.conf, slurm.conf and cgroup.conf in
    // slurm.conf's directory (slurmd's configless cache included). Only a
    // share needs it: other jobs start without reading them.
    let booking = if env.is_share() {
        let slurm_conf = beside_slurm_conf(None, "slurm.conf");
        let conf_dir = slurm_conf.parent().unwrap_or(std::path::Path::new("/"));
        match MpsBooking::read(conf_dir, node_name.as_deref().unwrap_or_default()) {
            Ok(booking) => booking,
            Err(e) => {
                log::error!("node unfit for GPU sharing: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        MpsBooking::default()
    };
    // A proportional memory limit needs the GPU's memory: GPUMemory= where
    // the admin set it, else NVML; and a share is placed on no GPU in MIG
    // mode unless MIGShares=allow. NVML is loaded for shares only, and only
    // where one of the two asks (a node without NVML has no MIG).
    let needs_memory =
        node.cfg.memory_limit == MemoryLimit::Proportional && node.cfg.gpu_memory_mib.is_none();
    if env.is_share() && (needs_memory || !node.cfg.mig_shares) {
        match nvml::gpus() {
            Ok(gpus) => {
                if needs_memory {
                    // The smallest GPU's: a node's GPUs are one type in
                    // practice, and a limit must never exceed its GPU.
                    node.set_gpu_memory(gpus.iter().filter_map(|g| g.memory_mib).min());
                }
                let mig: Vec<u32> = gpus
                    .iter()
                    .filter(|g| g.mig_enabled == Some(true))
                    .filter_map(|g| g.minor)
                    .collect();
                node.set_mig_minors(&mig);
            }
            Err(e) => log::debug!("no memory limit or MIG mode from NVML: {e}"),
        }
    }
    let report = match prolog(&node, &env, &booking, running) {
        Ok(report) => report,
        Err(e) => {
            log::error!("node unfit for GPU sharing: {e}");
            return ExitCode::FAILURE;
        }
    };
    for r in &report.dropped {
        log::info!("dropped the record of a job no longer running: {r}");
    }
    for n in &report.notes {
        log::warn!("{n}");
    }
    match &report.outcome {
        PrologOutcome::Untouched => {}
        PrologOutcome::Placed {
            share,
            already,
            mps,
        } => log::info!(
            "{} ({}): {} units on GPU {} ({}){}; MPS daemon: {mps}",
            env.user,
            env.uid,
            share.units,
            share.gpu,
            if share.placed_by_slurm {
                "Slurm's choice"
            } else {
                "gpushare's choice"
            },
            if *already { " (already placed)" } else { "" }
        ),
        PrologOutcome::Refused { text, .. } => log::warn!("refused: {text}"),
        PrologOutcome::Whole { gpus, overlapping } => {
            log::info!("holds GPUs {gpus:?} whole");
            for s in overlapping {
                log::warn!(
                    "Slurm gave this job GPU {} whole while share job {} runs there (Slurm 22.05 books all shares on GPU 0)",
                    s.gpu,
                    s.job
                );
            }
        }
    }
    if report.outcome != PrologOutcome::Untouched || !report.dropped.is_empty() {
        if let Err(e) = publish_metrics(&node, &report.events(), |gpu| {
            status::pipe_probe(&node.cfg, gpu)
        }) {
            log::warn!("metrics not written: {e}");
        }
    }
    ExitCode::SUCCESS
}
