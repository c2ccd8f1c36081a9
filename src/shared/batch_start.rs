//! `BatchStartTimeout` (slurm.conf) against the time gpushare's prolog
//! may take, for `gpu-mps config` and `gpu-qos audit` alike.
//!
//! slurmctld ends a batch job whose script has not started on its node
//! `BatchStartTimeout` (plus up to `MessageTimeout`, at most 10 s) after
//! the job started: `_purge_missing_jobs` in `src/slurmctld/job_mgr.c`,
//! 22.05 to 26.05, run whenever a node registers (slurmd's start, and at
//! intervals of pings, `ping_nodes.c`). A node reports a job only through
//! its running steps (slurmd's `_fill_registration_msg`), and no step of
//! the job runs while its prolog does, with `PrologFlags=Alloc` or
//! without (the extern step of `Contain` starts after it, `_rpc_prolog`
//! in slurmd's `req.c`). The job is requeued (`job_complete(...,
//! requeue, node_fail)`), or ends `NODE_FAIL` where it may not be.
//! Slurm's 26.11 pre-release warns (slurmctld's `read_config.c`) where
//! `BatchStartTimeout` is below `PrologTimeout` (or
//! `PrologEpilogTimeout`); no release before says anything.

use std::time::Duration;

/// Slurm's `BatchStartTimeout` where slurm.conf sets none
/// (`DEFAULT_BATCH_START_TIMEOUT`, `src/common/read_config.h`, 22.05 to
/// 26.05).
pub const SLURM_BATCH_START_TIMEOUT: u64 = 10;

/// How long the node programs wait for locks, all together
/// (`mps::lock_wait::LOCK_WAIT`, held to it by `mps::installed`'s test).
pub const PROLOG_LOCK_WAIT: Duration = Duration::from_secs(30);

/// How long `gpu-mps-prolog` can run when everything it waits for hangs
/// to its deadline (its locks 30 s in all, then each program it starts):
/// a share's prolog; a whole-GPU job's before its GPUs, and what each GPU
/// it holds adds. The admin crate's `worst_case` computes them from each
/// deadline, and its test holds these to it.
pub const PROLOG_SHARE_WORST: Duration = Duration::from_secs(179);
pub const PROLOG_WHOLE_WORST: Duration = Duration::from_secs(62);
pub const PROLOG_PER_GPU_WORST: Duration = Duration::from_secs(32);

/// The least `BatchStartTimeout` for nodes of up to `gpus` GPUs: the
/// prolog's worst case there, up to whole tens of seconds.
pub fn least_batch_start_timeout(gpus: u32) -> u64 {
    let whole = PROLOG_WHOLE_WORST.saturating_add(PROLOG_PER_GPU_WORST.saturating_mul(gpus));
    PROLOG_SHARE_WORST.max(whole).as_secs().div_ceil(10) * 10
}

/// The seconds of a `BatchStartTimeout` as slurm.conf (`60`) or `scontrol
/// show config` (`60 sec`) writes it.
pub fn batch_start_seconds(value: &str) -> Option<u64> {
    let value = value.trim();
    value
        .strip_suffix("sec")
        .map_or(value, str::trim_end)
        .parse()
        .ok()
}

/// `BatchStartTimeout` as slurmctld has it (`show_config`, `scontrol show
/// config`'s answer), else as `slurm_conf`'s text sets it (the last line
/// that does; Slurm's default where none does). `None`: neither could be
/// read.
pub fn batch_start_timeout_set(show_config: Option<&str>, slurm_conf: Option<&str>) -> Option<u64> {
    let key = |line: &str, sep: &str| {
        let (k, v) = line.split_once(sep)?;
        k.trim()
            .eq_ignore_ascii_case("BatchStartTimeout")
            .then(|| batch_start_seconds(v))
            .flatten()
    };
    if let Some(n) = show_config.and_then(|t| t.lines().find_map(|l| key(l, " = "))) {
        return Some(n);
    }
    let text = slurm_conf?;
    let set = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default())
        .flat_map(|l| l.split_whitespace())
        .filter_map(|word| key(word, "="))
        .next_back();
    Some(set.unwrap_or(SLURM_BATCH_START_TIMEOUT))
}

/// A `BatchStartTimeout` shorter than gpushare's prolog may run: what it
/// is and the least it should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShortBatchStart {
    pub set: u64,
    pub least: u64,
}

impl ShortBatchStart {
    /// `set` seconds for nodes of up to `gpus` GPUs; `None` where it is
    /// long enough.
    pub fn of(set: u64, gpus: u32) -> Option<Self> {
        let least = least_batch_start_timeout(gpus);
        (set < least).then_some(Self { set, least })
    }

    /// What is wrong, in one sentence.
    pub fn what(&self) -> String {
        format!(
            "BatchStartTimeout is {} s{}, below the {} s gpu-mps-prolog may run before a batch \
             job's script starts (up to {} s waiting for the node's locks, then each program it \
             starts to its deadline)",
            self.set,
            if self.set == SLURM_BATCH_START_TIMEOUT {
                " (Slurm's default)"
            } else {
                ""
            },
            self.least,
            PROLOG_LOCK_WAIT.as_secs()
        )
    }

    /// What it means for jobs (Slurm 22.05 to 26.05, `_purge_missing_jobs`
    /// in slurmctld's `job_mgr.c`).
    pub fn why(&self) -> &'static str {
        "when the node registers with slurmctld (slurmd's start, and now and then), slurmctld \
         ends every batch job there whose script has not started BatchStartTimeout (plus up to \
         10 s) after the job did; the script starts only once the prolog has ended, with \
         PrologFlags=Alloc or without. Its log says `Batch JobId=N missing from batch node ... \
         (not found BatchStartTime after startup)`; the job is requeued, or ends NODE_FAIL where \
         it may not be requeued"
    }

    /// The line that fixes it.
    pub fn fix(&self) -> String {
        format!("BatchStartTimeout={}", self.least)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_start_timeout_is_read_as_slurmctld_has_it() {
        // scontrol show config of 22.05 and 26.05 (recorded), slurm.conf.
        for release in ["22.05", "26.05"] {
            let path = format!(
                "{}/tests/fixtures/slurm/{release}/scontrol-show-config.txt",
                env!("CARGO_MANIFEST_DIR")
            );
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            assert_eq!(
                batch_start_timeout_set(Some(&text), None),
                Some(10),
                "{release}"
            );
        }
        let conf =
            "SlurmctldHost=c\n#BatchStartTimeout=600\nbatchstarttimeout=60 MessageTimeout=20\n\
                    BatchStartTimeout=200 # the prolog's worst case\n";
        assert_eq!(batch_start_timeout_set(None, Some(conf)), Some(200));
        // slurmctld's answer first; unset in slurm.conf: Slurm's default.
        assert_eq!(
            batch_start_timeout_set(Some("BatchStartTimeout       = 180 sec\n"), Some(conf)),
            Some(180)
        );
        assert_eq!(
            batch_start_timeout_set(Some("error\n"), Some("Prolog=/p\n")),
            Some(10)
        );
        assert_eq!(batch_start_timeout_set(None, None), None);
        assert_eq!(batch_start_seconds(" 10 sec"), Some(10));
        assert_eq!(batch_start_seconds("ten"), None);
    }

    #[test]
    fn the_least_covers_the_prologs_worst_case() {
        // A share's prolog sets the least on nodes of up to 3 GPUs, a
        // whole-GPU job's (62 s + 32 s per GPU: an idle MPS daemon
        // stopped on each) on larger ones.
        assert_eq!(least_batch_start_timeout(3), 180);
        assert_eq!(least_batch_start_timeout(4), 190);
        assert_eq!(least_batch_start_timeout(8), 320);
        assert!(least_batch_start_timeout(8) >= 62 + 32 * 8);
        assert!(least_batch_start_timeout(1) >= PROLOG_SHARE_WORST.as_secs());
        assert!(least_batch_start_timeout(1) > PROLOG_LOCK_WAIT.as_secs());
        let short = ShortBatchStart::of(SLURM_BATCH_START_TIMEOUT, 4);
        assert_eq!(
            short,
            Some(ShortBatchStart {
                set: 10,
                least: 190
            })
        );
        assert_eq!(ShortBatchStart::of(180, 3), None);
        assert_eq!(ShortBatchStart::of(180, 4).map(|s| s.least), Some(190));
        assert_eq!(ShortBatchStart::of(190, 4), None);
        assert_eq!(ShortBatchStart::of(180, 8).map(|s| s.least), Some(320));
        let what = ShortBatchStart {
            set: 10,
            least: 180,
        }
        .what();
        assert!(
            what.contains("(Slurm's default)") && what.contains("30 s"),
            "{what}"
        );
        let what = ShortBatchStart {
            set: 60,
            least: 180,
        }
        .what();
        assert!(!what.contains("default"), "{what}");
    }
}
