//! A shared GPU's compute mode following who holds it (`ComputeMode=
//! exclusive`, `mps::compute_mode`): EXCLUSIVE_PROCESS while only shares
//! run there; the mode it had before gpushare while a job Slurm gave it
//! whole runs beside them; that mode again once the last share is gone.
//!
//! Where gpushare places shares (Slurm 22.05 and 23.02, or a node-wide mps
//! `Count`), Slurm does not know which GPU holds them and may give one
//! whole (`--gres=gpu:1`). In EXCLUSIVE_PROCESS that job would fail at
//! CUDA start (`cudaErrorDevicesUnavailable`) beside the MPS server: the
//! user Slurm chose would pay for gpushare's mode. Its prolog gives the
//! GPU its earlier mode back (normally DEFAULT: the job runs time-sliced
//! beside the shares, as it would without gpushare's mode) and its epilog
//! makes it exclusive again while shares still run. The shares' daemon is
//! never stopped for it: that would end running shares. No new share goes
//! to a GPU held whole (`placement`). Where Slurm places shares (per-GPU
//! mps lines, 23.11 on), it never gives a GPU with shares whole.
//!
//! The ledger says what the mode should be, read under the GPU's daemon
//! lock, so a prolog, an epilog and the node timer never undo each other;
//! a change that failed is tried again by the node timer
//! (`gpu-mps metrics --write`, [`retry_modes`]).

use super::setup::Node;
use crate::mps::compute_mode::{self, Settled, Wanted};
use crate::mps::config::GpuMpsConfig;
use crate::mps::daemon;
use crate::mps::lock_wait::{Busy, LockError};

/// What GPU `gpu`'s holders want of its mode, from whether shares run
/// there and a job holds it whole; `exclusive`: `ComputeMode=exclusive`
/// in force (with `leave`, gpushare only gives back what it changed).
pub fn wanted(shares: bool, held_whole: bool, exclusive: bool) -> Wanted {
    match (shares, held_whole) {
        (false, _) => Wanted::Restored,
        (true, true) => Wanted::Earlier,
        (true, false) if exclusive => Wanted::Exclusive,
        (true, false) => Wanted::Earlier,
    }
}

/// Settles GPU `gpu`'s mode as the ledger says, under its daemon lock.
/// `Ok(None)`: nothing gpushare set there, or a GPU without shares whose
/// daemon still runs (its stop gives the mode back). `Err` outside: the
/// lock was not taken (the GPU is marked for the node timer).
fn settle(node: &Node, gpu: u32) -> Result<Result<Option<Settled>, String>, LockError> {
    let cfg = &node.cfg;
    let settled = daemon::with_gpu_lock(cfg, gpu, node.ledger.lock_wait(), || {
        let state = node.ledger.snapshot().map_err(|e| e.to_string())?.state;
        let shares = state.shares().any(|s| s.gpu == gpu);
        let whole = state.whole_holders().any(|w| w.gpus.contains(&gpu));
        if !shares {
            let pipe = daemon::pipe_dir(cfg, gpu);
            if pipe.join("control").exists() || !daemon::processes(&pipe).is_empty() {
                return Ok(None);
            }
        }
        compute_mode::settle(cfg, gpu, wanted(shares, whole, cfg.exclusive_while_shared))
    });
    if let Err(e) = &settled {
        compute_mode::mark_pending(cfg, gpu, &format!("{e}\n"));
    }
    settled
}

/// Gives GPU `gpu`, held whole, its earlier mode where gpushare set one:
/// called holding its daemon lock, by a prolog that started the daemon of
/// a share Slurm put on a GPU a job holds whole.
pub(super) fn settle_held(cfg: &GpuMpsConfig, gpu: u32) -> Option<String> {
    said(gpu, compute_mode::settle(cfg, gpu, Wanted::Earlier))
}

/// Settles the mode of each of `gpus` where gpushare set one: called by
/// the prolog of a job Slurm gave them whole (after the ledger records
/// it) and by its epilog (after the ledger released it). What happened,
/// one line a GPU, for the log; a GPU gpushare never set costs nothing.
pub fn follow_whole(node: &Node, gpus: &[u32]) -> Vec<String> {
    follow_whole_or_busy(node, gpus).unwrap_or_else(|busy| {
        vec![format!(
            "{busy}: compute modes not settled; the node timer (gpu-mps metrics --write) \
             tries again"
        )]
    })
}

/// [`follow_whole`], stopping at a GPU whose daemon lock stayed held for
/// the whole wait (a prolog then refuses the job: in EXCLUSIVE_PROCESS
/// mode it would fail at CUDA start).
pub fn follow_whole_or_busy(node: &Node, gpus: &[u32]) -> Result<Vec<String>, Busy> {
    let mut lines = Vec::new();
    for &gpu in gpus {
        if compute_mode::recorded(&node.cfg, gpu).is_none() {
            continue;
        }
        match settle(node, gpu) {
            Ok(settled) => lines.extend(said(gpu, settled)),
            Err(LockError::Busy(busy)) => return Err(busy),
            Err(e) => lines.extend(said(gpu, Err(e.to_string()))),
        }
    }
    Ok(lines)
}

/// Settles again the GPUs whose last change of mode failed (the node
/// timer, `gpu-mps metrics --write`); what happened, for the admin.
pub fn retry_modes(node: &Node) -> Vec<String> {
    compute_mode::pending(&node.cfg, node.gpu_count)
        .into_iter()
        .filter_map(|gpu| said(gpu, settle(node, gpu).map_err(|e| e.to_string()).flatten()))
        .collect()
}

fn said(gpu: u32, settled: Result<Option<Settled>, String>) -> Option<String> {
    match settled {
        Ok(settled) => settled.map(|s| format!("GPU {gpu}: {s}")),
        Err(e) => Some(format!(
            "GPU {gpu}: compute mode not changed: {e}; the node timer (gpu-mps metrics \
             --write) tries again"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_held_whole_beside_shares_gets_its_earlier_mode() {
        assert_eq!(wanted(true, false, true), Wanted::Exclusive);
        assert_eq!(wanted(true, true, true), Wanted::Earlier);
        assert_eq!(wanted(false, true, true), Wanted::Restored);
        assert_eq!(wanted(false, false, true), Wanted::Restored);
        // ComputeMode=leave now: what gpushare changed before is given back.
        assert_eq!(wanted(true, false, false), Wanted::Earlier);
    }
}
