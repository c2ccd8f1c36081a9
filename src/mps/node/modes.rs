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
//!
//! A daemon left running without a share (its stop failed, its GPU's
//! lock was busy at the last share's end, a release was left to the
//! ledger's next change) keeps its GPU in EXCLUSIVE_PROCESS. Where Slurm
//! places shares it then sees the GPU free and may give it whole: that
//! job's prolog stops the idle daemon first, under the GPU's lock, which
//! gives the GPU its earlier mode back; the node timer stops any other
//! (`gpu-mps gc`'s [`stop_idle_daemons`](super::stop_idle_daemons)).

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

/// What [`settle`] did to a GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Followed {
    /// Its mode settled (`None`: nothing gpushare set there, or a daemon
    /// left running in a lost state).
    Mode(Option<Settled>),
    /// Its daemon ran without a share (an idle one left behind): stopped,
    /// which gives the GPU its earlier mode back.
    IdleStopped(daemon::MpsDaemon),
}

/// Settles GPU `gpu`'s mode as the ledger says, under its daemon lock. A
/// GPU without shares whose daemon still runs has that idle daemon
/// stopped first ([`daemon::stop_if_idle`]): it would keep the GPU in
/// EXCLUSIVE_PROCESS, where a job Slurm gave the GPU whole fails at CUDA
/// start. `Err` outside: the lock was not taken (the GPU is marked for
/// the node timer).
fn settle(node: &Node, gpu: u32) -> Result<Result<Followed, String>, LockError> {
    let cfg = &node.cfg;
    let settled = daemon::with_gpu_lock(cfg, gpu, node.ledger.lock_wait(), || {
        let state = node.ledger.snapshot().map_err(|e| e.to_string())?.state;
        let shares = state.shares().any(|s| s.gpu == gpu);
        let whole = state.whole_holders().any(|w| w.gpus.contains(&gpu));
        if !shares {
            if let Some(stopped) = daemon::stop_if_idle(cfg, &state, gpu) {
                return Ok(Followed::IdleStopped(stopped));
            }
            if daemon::present(cfg, gpu) {
                return Ok(Followed::Mode(None));
            }
        }
        let wanted = wanted(shares, whole, cfg.exclusive_while_shared);
        compute_mode::settle(cfg, gpu, wanted).map(Followed::Mode)
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
    said(
        gpu,
        compute_mode::settle(cfg, gpu, Wanted::Earlier).map(Followed::Mode),
    )
}

/// Settles the mode of each of `gpus` where gpushare set one or a daemon
/// of gpushare's has its control pipe: called by the prolog of a job Slurm
/// gave them whole (after the ledger records it: an idle daemon there is
/// stopped before the job starts) and by its epilog (after the ledger
/// released it). What happened, one line a GPU, for the log; a GPU
/// gpushare never set and runs no daemon on costs nothing.
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
        let control = daemon::pipe_dir(&node.cfg, gpu).join("control");
        if compute_mode::recorded(&node.cfg, gpu).is_none() && !control.exists() {
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

fn said(gpu: u32, settled: Result<Followed, String>) -> Option<String> {
    match settled {
        Ok(Followed::Mode(settled)) => settled.map(|s| format!("GPU {gpu}: {s}")),
        Ok(Followed::IdleStopped(outcome)) => Some(format!(
            "GPU {gpu}: MPS daemon without a share (left idle): {outcome}"
        )),
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
