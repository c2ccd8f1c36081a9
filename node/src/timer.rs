//! The node timer's pass (`gpu-mps metrics --write`, every minute on a GPU
//! node): the order of its steps, each the core's or a module's here, and
//! what each says. `gpu-mps` only prints the lines and maps the outcome
//! to its exit status.

use std::path::Path;

use gpushare::mps::config::ShareUsage;
use gpushare::mps::gc;
use gpushare::mps::lock_wait::{LockWait, LOCK_WAIT};
use gpushare::mps::node::mains::nvml_ask;
use gpushare::mps::node::{
    finish_deferred, publish_metrics, record_ended, retry_modes, sample_share_usage,
    with_usage_lock, Accounting, Node,
};
use gpushare::mps::status;
use gpushare::mps::xid;

use crate::usage_record::SlurmAccounting;
use crate::{gpu_facts, nvml, nvml_usage, requeue};

/// How a pass ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// Every step run, the metrics file written.
    Published,
    /// Every step run; no `MetricsFile=` to write.
    NoMetricsFile,
}

/// One pass of the node timer over `node` (the node as Slurm names it:
/// `name`; the kernel log read for XIDs: `kernel_log`). Each step's lines
/// go to `say` as they come; a step that fails says so and the pass goes
/// on. Only a metrics file that cannot be written fails the pass.
pub fn pass(
    node: &mut Node,
    name: &str,
    kernel_log: &Path,
    say: &mut dyn FnMut(String),
) -> Result<Pass, String> {
    // One budget for every lock of the run, as a prolog's.
    node.set_lock_wait(LockWait::budget(LOCK_WAIT));
    let node = &*node;
    let probe = status::probe_daemons(&node.cfg, node.gpu_count);
    // Releases epilogs left to the ledger's next change (they found it
    // locked), where no job has started or ended here since.
    match finish_deferred(node) {
        Ok(lines) => lines.into_iter().for_each(&mut *say),
        Err(e) => say(format!("releases left by epilogs not made: {e}")),
    }
    // NVML's facts asked and kept with their keys, where a share's prolog
    // takes them (mains::nvml_ask): its kept copy is as fresh as this run,
    // and a GPU NVML now reports lost is set aside here (a prolog with
    // fresh kept facts asks nothing). A node whose NVML never answered has
    // nothing kept and nothing to say.
    if let Some(ask) = nvml_ask(&node.cfg, true) {
        if let Ok(gpus) = gpu_facts::refresh(&node.cfg.state_dir) {
            let seen = gpu_facts::seen(&gpus, ask, |m| node.gpus_of_minors(&[m]));
            gpu_facts::set_aside_lost(node, &seen.lost)
                .into_iter()
                .for_each(&mut *say);
        }
    }
    // NVML's figures the prolog kept (or their copy kept by the cursor, in
    // /var/lib/gpushare, after a reboot) name an XID's GPU.
    xid::set_aside_fatal(node, kernel_log, nvml::last_seen)
        .into_iter()
        .for_each(&mut *say);
    // A compute mode nvidia-smi failed to set (given back after the last
    // share, or around a job holding the GPU whole) is set now.
    retry_modes(node).into_iter().for_each(&mut *say);
    // MPS daemons left without a share stopped (gc's step), each GPU's
    // earlier mode given back: a job Slurm gives it whole runs.
    gc::idle_daemons(node).into_iter().for_each(&mut *say);
    // Exclusions whose cause is gone lifted, whether or not a share ended
    // here (a GPU back, the setup mended, the node rebooted).
    requeue::lift_and_say(node, name, say);
    if node.cfg.share_usage != ShareUsage::Off {
        share_usage(node, name).into_iter().for_each(&mut *say);
    }
    if node.cfg.metrics_file.is_none() {
        return Ok(Pass::NoMetricsFile);
    }
    publish_metrics(node, &[], probe)?;
    Ok(Pass::Published)
}

/// Each share's use of its GPU, where one runs: NVML asked in a child, a
/// GPU that does not answer skipped (`ShareUsage=`); with or without
/// `MetricsFile=`, the ended jobs' figures are recorded (`UsageRecord=`),
/// then counted by QOS and size.
fn share_usage(node: &Node, name: &str) -> Vec<String> {
    let run = || {
        let ask = |cursor: &_| nvml_usage::ask(&node.cfg, cursor);
        let mut lines = sample_share_usage(node, ask);
        let mut slurm = node.cfg.usage_record.then(SlurmAccounting::start);
        let accounting = slurm.as_mut().map(|s| s as &mut dyn Accounting);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        lines.extend(record_ended(node, name, accounting, now));
        lines
    };
    match with_usage_lock(node, run) {
        Ok(Some(lines)) => lines,
        Ok(None) => vec!["share use not sampled: another run of the timer is at it".into()],
        Err(e) => vec![format!("share use not sampled: {e}")],
    }
}
