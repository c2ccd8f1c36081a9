//! How long `gpu-mps-prolog` and `gpu-mps-epilog` can run when everything
//! they wait for hangs to its deadline at once: every lock waited for in
//! vain (`lock_wait`'s budget) and every program they start killed at its
//! timeout, along the longest path each takes. A site that sets
//! `PrologEpilogTimeout` must allow this much, or slurmd kills one and
//! drains the node; docs/coexistence.md gives these figures (a test holds
//! it to them).

use std::time::Duration;

use gpushare::mps::compute_mode::SMI_TIMEOUT;
use gpushare::mps::daemon::{
    CONTROL_TIMEOUT, PROBE_TIMEOUT, QUIT_WAIT, START_WAIT, TERMINATE_BUDGET,
};
use gpushare::mps::lock_wait::LOCK_WAIT;
use gpushare::mps::node::{SELFTEST_PROLOG_TIMEOUT, SQUEUE_TIMEOUT};

use crate::nvml::QUERY_TIMEOUT;
use crate::requeue::BUDGET;

/// A GPU's compute mode read, then set (`nvidia-smi` twice).
const MODE_SETTLED: Duration = SMI_TIMEOUT.saturating_mul(2);

/// A GPU's daemon stopped: `quit`, the wait for it to exit, its GPU's mode
/// given back.
const DAEMON_STOPPED: Duration = CONTROL_TIMEOUT
    .saturating_add(QUIT_WAIT)
    .saturating_add(MODE_SETTLED);

/// A changed `gpu_mps.conf` taken over: the old daemons stopped (or their
/// modes given back), all GPUs at once.
const TAKEN_OVER: Duration = DAEMON_STOPPED;

/// A share's GPU served: a daemon in the other `MultiUser=` mode stopped,
/// the GPU made exclusive, the control program's `-h` and `-d`, its pipe
/// awaited, the limits set, the mode of a GPU held whole beside it settled.
const SERVED: Duration = DAEMON_STOPPED
    .saturating_add(MODE_SETTLED)
    .saturating_add(PROBE_TIMEOUT)
    .saturating_add(CONTROL_TIMEOUT)
    .saturating_add(START_WAIT)
    .saturating_add(CONTROL_TIMEOUT)
    .saturating_add(MODE_SETTLED);

/// A share's prolog: lock waits, a takeover, NVML, `squeue`, its GPU served.
pub const PROLOG_SHARE: Duration = LOCK_WAIT
    .saturating_add(TAKEN_OVER)
    .saturating_add(QUERY_TIMEOUT)
    .saturating_add(SQUEUE_TIMEOUT)
    .saturating_add(SERVED);

/// What `SelfTest=daemon-start` adds to a share's prolog that starts its
/// GPU's daemon: the self-test's two clients, each to its deadline.
pub const PROLOG_SELFTEST: Duration = SELFTEST_PROLOG_TIMEOUT.saturating_mul(2);

/// A whole-GPU job's prolog, before the modes of its GPUs (per GPU:
/// [`PER_GPU_HELD`]).
pub const PROLOG_WHOLE: Duration = LOCK_WAIT.saturating_add(TAKEN_OVER);

/// A share's epilog: lock waits, the requeue of a share refused here, its
/// clients ended, its GPU's daemon stopped (lowering its limits instead
/// takes less).
pub const EPILOG_SHARE: Duration = LOCK_WAIT
    .saturating_add(BUDGET)
    .saturating_add(TERMINATE_BUDGET)
    .saturating_add(DAEMON_STOPPED);

/// A whole-GPU job's epilog, before the modes of its GPUs.
pub const EPILOG_WHOLE: Duration = LOCK_WAIT.saturating_add(BUDGET);

/// What each GPU held whole adds, where gpushare set its mode or a daemon
/// of gpushare's runs there: an idle daemon stopped (which gives the mode
/// back, [`DAEMON_STOPPED`]), else the mode settled ([`MODE_SETTLED`],
/// which takes less).
pub const PER_GPU_HELD: Duration = DAEMON_STOPPED;

/// The least `PrologEpilogTimeout` for a node of `gpus` GPUs where jobs
/// may hold every one whole beside shares.
pub fn prolog_epilog_timeout(gpus: u32) -> Duration {
    let held = PER_GPU_HELD.saturating_mul(gpus);
    [
        PROLOG_SHARE,
        EPILOG_SHARE,
        PROLOG_WHOLE.saturating_add(held),
        EPILOG_WHOLE.saturating_add(held),
    ]
    .into_iter()
    .max()
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const COEXISTENCE: &str = include_str!("../../docs/coexistence.md");
    const CONFIGURATION: &str = include_str!("../../docs/configuration.md");

    #[test]
    fn the_docs_give_the_worst_cases_the_code_has() {
        let s = |d: Duration| d.as_secs();
        let base = s(PROLOG_SHARE.max(EPILOG_SHARE)).div_ceil(10) * 10;
        let per = s(PER_GPU_HELD);
        for said in [
            format!("| prolog of a share | {} s |", s(PROLOG_SHARE)),
            format!(
                "| prolog of a share, `SelfTest=daemon-start` | {} s + {} s |",
                s(PROLOG_SHARE),
                s(PROLOG_SELFTEST)
            ),
            format!(
                "| prolog of a whole-GPU job | {} s + {per} s per GPU |",
                s(PROLOG_WHOLE)
            ),
            format!("| epilog of a share | {} s |", s(EPILOG_SHARE)),
            format!(
                "| epilog of a whole-GPU job | {} s + {per} s per GPU |",
                s(EPILOG_WHOLE)
            ),
            format!("least {base} seconds**"),
            format!("{} s +\n{per} s per GPU of the node", s(EPILOG_WHOLE)),
            format!("({} s on a node of 8 GPUs)", s(prolog_epilog_timeout(8))),
            format!("within one budget of {} seconds", s(LOCK_WAIT)),
        ] {
            assert!(
                COEXISTENCE.contains(&said),
                "docs/coexistence.md lacks: {said}"
            );
        }
        let said = format!("**{} seconds in all**", s(LOCK_WAIT));
        assert!(
            CONFIGURATION.contains(&said),
            "docs/configuration.md lacks: {said}"
        );
        // Three GPUs or fewer: a share's programs set the least.
        assert_eq!(s(prolog_epilog_timeout(3)).div_ceil(10) * 10, base);
        assert!(s(prolog_epilog_timeout(4)) > base);
    }

    #[test]
    fn the_prolog_figures_batch_start_timeout_is_checked_against_are_these() {
        use gpushare::shared::batch_start as core;
        assert_eq!(core::PROLOG_SHARE_WORST, PROLOG_SHARE);
        assert_eq!(core::PROLOG_WHOLE_WORST, PROLOG_WHOLE);
        assert_eq!(core::PROLOG_PER_GPU_WORST, PER_GPU_HELD);
        assert_eq!(core::PROLOG_LOCK_WAIT, LOCK_WAIT);
    }
}
