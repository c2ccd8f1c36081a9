//! `gpu-mps-epilog`: slurmd's `Epilog=` (or one script of an epilog.d) on
//! GPU nodes that share GPUs through MPS.
//!
//! Releases the job's share (or whole-GPU record) from the node's ledger and
//! stops a GPU's MPS control daemon when its last share ends. Running it
//! twice for a job is harmless. It exits non-zero only when the node is
//! unfit (slurmd then drains it); a ledger that stays locked past its wait
//! is not that: the release is left to the ledger's next change, and the
//! epilog exits 0. Logs go to syslog under `gpu-mps-epilog`.

use std::process::ExitCode;

use clap::Parser;
use gpushare::mps::node::mains::{at_end, epilog_drains, lift_after, AtEnd};
use gpushare::mps::node::step_guard as guard;
use gpushare::mps::node::{epilog_with_cgroup, publish_metrics};
use gpushare::mps::{lock_wait, status};
use gpushare::shared::exit_status::node as exit;
use gpushare_node::node_program::{self, EpilogCli, Program, Started};
use gpushare_node::requeue::{self, Deadline, Refused};
use gpushare_node::step_guard;

fn main() -> ExitCode {
    // Started by the SPANK plugin beside a share's step, not by slurmd.
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if let Some((word, rest)) = argv.split_first() {
        if word == guard::WORD {
            return match guard::GuardArgs::parse(rest) {
                Some(args) => step_guard::run(&args),
                None => {
                    eprintln!("usage: gpu-mps-epilog {} JOB GPU [CONF]", guard::WORD);
                    exit::MISUSED.into()
                }
            };
        }
    }
    let code = run();
    // What the locks cost this job's end, where it took any.
    if let Some(line) = lock_wait::summary() {
        log::info!("{line}");
    }
    code
}

fn run() -> ExitCode {
    let args = EpilogCli::parse();
    let Started { node, env, .. } = match node_program::start(Program::Epilog, &args.node) {
        Ok(Some(started)) => started,
        Ok(None) => return exit::EPILOG_DONE.into(),
        Err(code) => return code,
    };
    // Slurm's commands for requeues and exclusions share one budget.
    let deadline = Deadline::start();
    let node_name = std::env::var("SLURMD_NODENAME").ok();
    // A share refused here that another node may serve: sent elsewhere;
    // one Slurm started without its Prolog: requeued as it is.
    let mark = requeue::take_mark(&node.cfg.state_dir, env.job);
    let marked = mark.is_some();
    let needs_prolog = env.is_share() || env.asks_private();
    match at_end(mark, needs_prolog, node_name.as_deref()) {
        AtEnd::Nothing => {}
        AtEnd::NotRequeued(why) => log::warn!("not requeued: {why}"),
        AtEnd::Requeue { marked, node: name } => {
            let refused = Refused {
                marked,
                setup: requeue::mps_setup(&node.cfg),
            };
            let state_dir = &node.cfg.state_dir;
            match requeue::requeue_elsewhere(&deadline, state_dir, env.job, &name, &refused) {
                Ok(line) => log::info!("{line}"),
                Err(e) => log::warn!("not requeued: {e}"),
            }
        }
    }
    match epilog_with_cgroup(&node, env.job, env.sluid.as_deref()) {
        Ok(report) => {
            for n in &report.notes {
                log::warn!("{n}");
            }
            if report.deferred.is_some() {
                // Nothing released yet: no metrics to change, no room freed.
                return exit::EPILOG_DONE.into();
            }
            for (gpu, server, client) in &report.terminated {
                log::info!("GPU {gpu}: MPS client {client} of server {server} terminated");
            }
            for r in &report.released {
                log::info!("released {r}");
            }
            for (gpu, outcome) in &report.stopped {
                log::info!("GPU {gpu} has no share left; MPS daemon: {outcome}");
            }
            if !report.released.is_empty() {
                if let Err(e) =
                    publish_metrics(&node, &[], |gpu| status::pipe_probe(&node.cfg, gpu))
                {
                    log::warn!("metrics not written: {e}");
                }
            }
            // A share ended: jobs this node sent elsewhere may fit here
            // now, where what kept each off is gone.
            if let (true, Some(name)) = (lift_after(marked, &report.released), &node_name) {
                match requeue::lift_where_changed(&deadline, &node, name) {
                    Ok(lines) => lines.iter().for_each(|l| log::info!("{l}")),
                    Err(e) => log::warn!("exclusions not taken back: {e}"),
                }
            }
            exit::EPILOG_DONE.into()
        }
        // Written by a newer gpushare: a downgrade never drains the node.
        Err(e) if !epilog_drains(&e) => {
            log::error!("job not released: {e}");
            exit::EPILOG_DONE.into()
        }
        Err(e) => {
            log::error!("node unfit for GPU sharing: {e}");
            exit::EPILOG_UNRELEASED.into()
        }
    }
}
