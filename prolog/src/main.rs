//! `gpu-mps-prolog`: slurmd's `Prolog=` (or one script of a prolog.d) on
//! GPU nodes that share GPUs through MPS.
//!
//! For a job Slurm gave an MPS share it picks the least-loaded GPU and
//! records it in the node's ledger (`StateDir`), starting that GPU's MPS
//! control daemon; for a whole-GPU job it records which GPUs it holds, so
//! no share is put there. It exits non-zero only when the node is unfit for
//! sharing (bad gpu_mps.conf, unusable state directory): slurmd then drains
//! the node, as it should; a GPU set aside as failed never makes it fail. A share that cannot be placed is refused through
//! the SPANK plugin instead, never by failing here. Logs go to syslog under
//! `gpu-mps-prolog` (see `gpushare_node::node_log`).

use std::process::ExitCode;

use clap::Parser;
use gpushare::mps::config::MemoryLimit;
use gpushare::mps::node::{prolog, publish_metrics, running_jobs, PrologOutcome};
use gpushare::mps::{health, lock_wait, state_dir, status};
use gpushare::shared::autodetect::ReportedGpu;
use gpushare::shared::booking::MpsBooking;
use gpushare::shared::locations::beside_slurm_conf;
use gpushare_node::node_program::{self, Program, PrologCli, Started};
use gpushare_node::requeue::{self, Elsewhere};
use gpushare_node::{cuda_probe, nvml};

fn main() -> ExitCode {
    // NVML asked in a child of our own (gpu_facts).
    if let Some(code) = nvml::answer_as_child() {
        return code;
    }
    // SelfTest=daemon-start's CUDA client, in a process of its own.
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(cuda_probe::PROBE_OPTION) {
        return cuda_probe::answer_as_child(&args[2..]);
    }
    let code = run();
    // What the locks cost this job's start, where it took any.
    if let Some(line) = lock_wait::summary() {
        log::info!("{line}");
    }
    code
}

fn run() -> ExitCode {
    let args = PrologCli::parse();
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
    // A mark an earlier run of this job left (its epilog never ran) is
    // never this run's.
    requeue::clear_mark(&node.cfg.state_dir, env.job);
    let running = || {
        let name = node_name
            .as_deref()
            .ok_or_else(|| "SLURMD_NODENAME is not set".to_owned())?;
        running_jobs(name)
    };
    // How Slurm books mps here: gres.conf, slurm.conf and cgroup.conf in
    // slurm.conf's directory (slurmd's configless cache included). Only a
    // share needs it: other jobs start without reading them.
    let mut booking = if env.is_share() {
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
        match gpu_facts(&node.cfg.state_dir) {
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
                set_aside_lost(&node, &gpus);
                // Where Slurm detects the GPUs (AutoDetect=nvml), NVML's
                // are the ones slurmd found: the stacking check needs them.
                let reported: Vec<ReportedGpu> = gpus
                    .iter()
                    .filter_map(|g| {
                        Some(ReportedGpu {
                            file: format!("/dev/nvidia{}", g.minor?),
                            mig: g.mig_enabled == Some(true),
                        })
                    })
                    .collect();
                booking = booking.with_reported(&reported);
            }
            Err(e) => log::debug!("no memory limit or MIG mode from NVML: {e}"),
        }
    }
    // Read once, after NVML's lost GPUs were set aside. A GPU set aside
    // refuses the shares placed on it, nothing more: the prolog never
    // fails for it, even where every GPU is set aside (a drain would turn
    // one wrong record into an outage of the node).
    node.failed = health::read(&node.cfg.state_dir);
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
        PrologOutcome::Refused { reason, text } => {
            log::warn!("refused: {text}");
            // Only another user's servers had room, the GPU's MPS daemon
            // failed, or only failed GPUs had room: Slurm would keep
            // sending such jobs here, so the epilog sends this one elsewhere.
            if let Some(why) = Elsewhere::from_reason(reason) {
                // What the node's state must let in again: the share's
                // size (0 where not known), its user; and this run.
                let per_gpu =
                    gpushare::mps::node::slurm_per_gpu(&node.cfg, node.gpu_count, &booking);
                let units = gpushare::mps::node::share_units(per_gpu, &env).unwrap_or(0);
                let run = std::env::var("SLURM_JOB_RESTART_COUNT")
                    .ok()
                    .and_then(|r| r.parse().ok());
                let state_dir = &node.cfg.state_dir;
                if let Err(e) = requeue::mark(state_dir, env.job, why, (env.uid, units), run) {
                    log::warn!("not marked to be sent elsewhere, the job fails: {e}");
                }
            }
        }
        PrologOutcome::Whole {
            gpus,
            overlapping,
            private,
        } => {
            match private {
                Some(record) => log::info!(
                    "holds GPUs {gpus:?} whole, with an MPS daemon of its own in each step \
                     (--gpu-mps=private{})",
                    record
                        .threads
                        .map_or_else(String::new, |t| format!(", {t}% of the SMs a rank"))
                ),
                None => log::info!("holds GPUs {gpus:?} whole"),
            }
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

/// Sets aside the GPUs NVML reports lost (by device minor, or by NVML's
/// index, the node's PCI order, where a lost GPU cannot say its minor).
fn set_aside_lost(node: &gpushare::mps::node::Node, gpus: &[nvml::GpuFacts]) {
    let mut lost = Vec::new();
    for g in gpus.iter().filter(|g| g.lost) {
        match g.minor {
            Some(minor) => lost.extend(node.gpus_of_minors(&[minor])),
            None => lost.push(g.index),
        }
    }
    let known = health::read(&node.cfg.state_dir);
    for gpu in lost.into_iter().filter(|g| !known.contains_key(g)) {
        let reason = "NVML reports it lost (NVML_ERROR_GPU_IS_LOST: fallen off the bus or \
                      otherwise unreachable until a reset)";
        match health::set_aside(&node.cfg.state_dir, gpu, reason, node.ledger.lock_wait()) {
            Ok(_) => log::error!(
                "GPU {gpu} set aside from sharing: {reason}; `gpu-mps resume-gpu {gpu}` once fixed"
            ),
            Err(e) => log::error!("GPU {gpu} is lost, but could not be set aside: {e}"),
        }
    }
}

/// The node's GPUs as NVML says, asked in a process of its own within
/// `nvml::QUERY_TIMEOUT` (a GPU fallen off the bus can hang NVML). The
/// figures are kept in the state directory; where NVML does not answer,
/// the last ones kept are used, with a warning.
fn gpu_facts(state_dir: &std::path::Path) -> Result<Vec<nvml::GpuFacts>, String> {
    const KEPT: &str = nvml::KEPT_FACTS;
    let kept = state_dir.join(KEPT);
    let asked = std::env::current_exe()
        .map_err(|e| format!("cannot find this program to ask NVML: {e}"))
        .and_then(|exe| nvml::gpus_bounded(&exe, nvml::QUERY_TIMEOUT));
    match asked {
        Ok(gpus) => {
            let text = nvml::facts_text(&gpus);
            if std::fs::read_to_string(&kept).ok().as_deref() != Some(text.as_str()) {
                if let Err(e) = state_dir::replace_file(state_dir, KEPT, text.as_bytes(), 0o600) {
                    log::warn!("NVML's figures not kept: {e}");
                }
            }
            Ok(gpus)
        }
        Err(e) => {
            let last = std::fs::read_to_string(&kept)
                .ok()
                .and_then(|t| nvml::parse_facts(&t));
            match last {
                Some(gpus) => {
                    log::warn!(
                        "NVML: {e}; using the figures it gave last ({})",
                        kept.display()
                    );
                    Ok(gpus)
                }
                None => Err(e),
            }
        }
    }
}
