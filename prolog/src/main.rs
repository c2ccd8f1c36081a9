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
use gpushare::mps::node::mains::{nvml_ask, prolog_changed, refused_mark};
use gpushare::mps::node::requeue::{first_shared_gpu, Elsewhere};
use gpushare::mps::node::{prolog, publish_metrics, running_jobs, PrologOutcome};
use gpushare::mps::{health, lock_wait, status, under_test};
use gpushare::shared::exit_status::node as exit;
use gpushare_node::node_program::{self, Program, PrologCli, Started};
use gpushare_node::requeue;
use gpushare_node::{cuda_probe, gpu_facts, nvml};

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
        Ok(None) => return exit::PROLOG_START.into(),
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
    // How Slurm books mps here: read for a share only.
    let mut booking = match node_program::booking(&env, node_name.as_deref()) {
        Ok(booking) => booking,
        Err(e) => {
            log::error!("node unfit for GPU sharing: {e}");
            return exit::PROLOG_UNFIT.into();
        }
    };
    // NVML's facts, for a share, where its memory limit or MIG mode needs
    // them: the kept ones where fresh, else NVML asked (gpu_facts).
    if let Some(ask) = nvml_ask(&node.cfg, env.is_share()) {
        match gpu_facts::read(&node.cfg.state_dir) {
            Ok(facts) => {
                let seen = gpu_facts::seen(&facts.gpus, ask, |m| node.gpus_of_minors(&[m]));
                if let Some(mib) = seen.memory_mib {
                    node.set_gpu_memory(mib);
                }
                node.set_mig_minors(&seen.mig_minors);
                // Lost GPUs from kept facts were set aside by whoever
                // asked (a prolog, the node timer, which asks on each run):
                // never again after `gpu-mps resume-gpu`.
                if facts.asked {
                    for line in gpu_facts::set_aside_lost(&node, &seen.lost) {
                        log::error!("{line}");
                    }
                }
                booking = booking.with_reported(&seen.reported);
            }
            Err(e) => log::debug!("no memory limit or MIG mode from NVML: {e}"),
        }
    }
    // Read once, after NVML's lost GPUs were set aside. A GPU set aside
    // refuses the shares placed on it, nothing more: the prolog never
    // fails for it, even where every GPU is set aside (a drain would turn
    // one wrong record into an outage of the node).
    node.failed = health::read(&node.cfg.state_dir);
    node.under_test = under_test::read(&node.cfg.state_dir);
    let report = match prolog(&node, &env, &booking, running) {
        Ok(report) => report,
        Err(e) => {
            log::error!("node unfit for GPU sharing: {e}");
            return exit::PROLOG_UNFIT.into();
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
            // One another node may serve: the epilog sends it elsewhere.
            let restarts = std::env::var("SLURM_JOB_RESTART_COUNT").ok();
            let sized = (&node.cfg, node.gpu_count, &booking);
            if let Some(mut m) = refused_mark(reason, sized, &env, restarts.as_deref()) {
                if m.why == Elsewhere::SharedGpu {
                    m.slurm_gpu = first_shared_gpu(&node.ledger, &env.job_gpus);
                }
                let state_dir = &node.cfg.state_dir;
                let (who, run) = ((m.uid, m.units), (m.run, m.slurm_gpu));
                if let Err(e) = requeue::mark(state_dir, env.job, m.why, who, run) {
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
    if prolog_changed(&report) {
        if let Err(e) = publish_metrics(&node, &report.events(), |gpu| {
            status::pipe_probe(&node.cfg, gpu)
        }) {
            log::warn!("metrics not written: {e}");
        }
    }
    exit::PROLOG_START.into()
}
