//! GPUs set aside from sharing: a GPU NVML reports lost (fallen off the
//! bus, `NVML_ERROR_GPU_IS_LOST`), or one an admin or a health check
//! (NHC, DCGM health watches on fatal XID errors) marked with
//! `gpu-mps drain-gpu`, takes no new share until `gpu-mps resume-gpu`.
//! Shares already on it run on (Slurm's own drain decides about jobs);
//! where Slurm places a share on such a GPU it is refused with the reason
//! and sent elsewhere. Nothing else changes: a CPU-only or whole-GPU job
//! runs, and the prolog never fails for a GPU set aside, even where every
//! GPU is (a drain would turn one wrong record, such as a forged kernel
//! log line, into an outage of the node; the alert on the failed GPU and
//! the refusals tell the admin).
//!
//! The record is `<StateDir>/failed-gpus`, one GPU a line: `<index>
//! <since, Unix seconds> <reason>`, replaced whole under its own lock.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use super::lock_wait::LockWait;
use super::state_dir;

/// The record's file in the state directory.
pub const RECORD: &str = "failed-gpus";
const LOCK: &str = "failed-gpus.lock";

/// Why a GPU was set aside, and since when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub since: u64,
    pub reason: String,
}

/// The GPUs set aside, by index.
pub type FailedGpus = BTreeMap<u32, Failure>;

/// The record's text.
pub fn text(failed: &FailedGpus) -> String {
    failed
        .iter()
        .map(|(gpu, f)| format!("{gpu} {} {}\n", f.since, one_line(&f.reason)))
        .collect()
}

/// A reason as one line of printable text.
pub(crate) fn one_line(reason: &str) -> String {
    let line: String = reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let line = line.trim();
    if line.is_empty() {
        "no reason given".to_owned()
    } else {
        line.to_owned()
    }
}

/// Reads a record's text; lines that do not read are skipped (a GPU is
/// set aside only by a line that says so whole).
pub fn parse(text: &str) -> FailedGpus {
    text.lines()
        .filter_map(|l| {
            let mut words = l.splitn(3, ' ');
            let gpu = words.next()?.parse().ok()?;
            let since = words.next()?.parse().ok()?;
            let reason = words.next()?.to_owned();
            Some((gpu, Failure { since, reason }))
        })
        .collect()
}

/// The GPUs set aside in `state_dir` (none where there is no record).
pub fn read(state_dir: &Path) -> FailedGpus {
    fs::read_to_string(state_dir.join(RECORD))
        .map(|t| parse(&t))
        .unwrap_or_default()
}

/// Changes the record under its lock (waited for as `wait` allows);
/// returns it as written.
pub fn update(
    state_dir: &Path,
    wait: LockWait,
    change: impl FnOnce(&mut FailedGpus),
) -> Result<FailedGpus, String> {
    let lock = (LOCK, "the lock of the GPUs set aside");
    state_dir::update_locked(state_dir, lock, RECORD, wait, |before| {
        let mut failed = parse(before);
        change(&mut failed);
        (text(&failed), failed)
    })
}

/// Sets `gpu` aside for `reason` (kept as first recorded where it is
/// already set aside).
pub fn set_aside(
    state_dir: &Path,
    gpu: u32,
    reason: &str,
    wait: LockWait,
) -> Result<FailedGpus, String> {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    update(state_dir, wait, |failed| {
        failed.entry(gpu).or_insert_with(|| Failure {
            since,
            reason: one_line(reason),
        });
    })
}

/// Gives `gpu` back to sharing.
pub fn resume(state_dir: &Path, gpu: u32, wait: LockWait) -> Result<FailedGpus, String> {
    update(state_dir, wait, |failed| {
        failed.remove(&gpu);
    })
}

/// What an admin is told when all of the node's `gpu_count` GPUs are set
/// aside: no share is placed there, other jobs run.
pub fn all_failed(failed: &FailedGpus, gpu_count: u32) -> Option<String> {
    (gpu_count > 0 && (0..gpu_count).all(|g| failed.contains_key(&g))).then(|| {
        let each: Vec<String> = failed
            .iter()
            .map(|(gpu, f)| format!("GPU {gpu}: {}", f.reason))
            .collect();
        format!(
            "every GPU of the node is set aside ({}); `gpu-mps resume-gpu N` once fixed",
            each.join("; ")
        )
    })
}

/// What `gpu-mps drain-gpu` or `resume-gpu` left: the GPU's state now,
/// and a note where every GPU is set aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drained {
    pub gpu: u32,
    /// Why it takes no new share; `None`: it shares again.
    pub set_aside: Option<String>,
    /// See [`all_failed`].
    pub all_failed: Option<String>,
}

impl std::fmt::Display for Drained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let gpu = self.gpu;
        match &self.set_aside {
            Some(reason) => writeln!(f, "GPU {gpu} takes no new share: {reason}")?,
            None => writeln!(f, "GPU {gpu} shares again")?,
        }
        if let Some(all) = &self.all_failed {
            writeln!(
                f,
                "note: {all}; shares are refused here and sent elsewhere, other jobs run \
                 (the node is not drained: `scontrol update nodename=... state=drain` does that)"
            )?;
        }
        Ok(())
    }
}

/// Sets GPU `gpu` of a node of `gpu_count` GPUs aside for `reason`, or
/// gives it back (`None`).
pub fn drain(
    state_dir: &Path,
    gpu_count: u32,
    gpu: u32,
    reason: Option<&str>,
) -> Result<Drained, String> {
    if gpu >= gpu_count {
        return Err(format!(
            "GPU {gpu}: the node lists {gpu_count} GPUs (0 to {}) in GPUDevices",
            gpu_count.saturating_sub(1)
        ));
    }
    let failed = match reason {
        Some(why) => set_aside(state_dir, gpu, why, LockWait::default()),
        None => resume(state_dir, gpu, LockWait::default()),
    }?;
    Ok(Drained {
        gpu,
        set_aside: failed.get(&gpu).map(|f| f.reason.clone()),
        all_failed: all_failed(&failed, gpu_count),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_reads_back_and_drops_what_it_cannot_read() {
        let failed: FailedGpus = [
            (
                1,
                Failure {
                    since: 1_700_000_000,
                    reason: "NVML: GPU is lost".into(),
                },
            ),
            (
                3,
                Failure {
                    since: 5,
                    reason: "XID 79 (nhc)".into(),
                },
            ),
        ]
        .into_iter()
        .collect();
        let t = text(&failed);
        assert_eq!(t, "1 1700000000 NVML: GPU is lost\n3 5 XID 79 (nhc)\n");
        assert_eq!(parse(&t), failed);
        assert_eq!(parse("x 1 a\n2 y b\n4 7\n").len(), 0);
        assert_eq!(one_line("a\nb\t"), "a b");
    }

    /// A state directory as the node programs make it, in a temporary one.
    fn private_state_dir() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let state = dir.path().join("state");
        state_dir::ensure(
            &state,
            rustix::process::geteuid().as_raw(),
            state_dir::Access::Private,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        (dir, state)
    }

    #[test]
    fn set_aside_resume_and_all_failed() {
        let (_dir, state) = private_state_dir();
        assert!(read(&state).is_empty());
        set_aside(&state, 0, "lost", LockWait::default()).unwrap_or_else(|e| panic!("{e}"));
        // Already set aside: the first reason stays.
        let failed =
            set_aside(&state, 0, "again", LockWait::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(failed[&0].reason, "lost");
        assert_eq!(all_failed(&failed, 2), None);
        let failed =
            set_aside(&state, 1, "xid 48", LockWait::default()).unwrap_or_else(|e| panic!("{e}"));
        let all = all_failed(&failed, 2).unwrap_or_default();
        assert!(all.contains("GPU 0: lost; GPU 1: xid 48"), "{all}");
        resume(&state, 0, LockWait::default()).unwrap_or_else(|e| panic!("{e}"));
        resume(&state, 1, LockWait::default()).unwrap_or_else(|e| panic!("{e}"));
        assert!(!state.join(RECORD).exists());
    }

    #[test]
    fn drain_and_resume_say_what_the_gpu_and_the_node_do_now() {
        let (_dir, state) = private_state_dir();
        let said = |r: Result<Drained, String>| r.map(|d| d.to_string());
        assert_eq!(
            said(drain(&state, 2, 2, Some("x"))),
            Err("GPU 2: the node lists 2 GPUs (0 to 1) in GPUDevices".into())
        );
        assert_eq!(
            said(drain(&state, 2, 0, Some("XID 79"))),
            Ok("GPU 0 takes no new share: XID 79\n".into())
        );
        assert_eq!(
            said(drain(&state, 2, 1, Some("nhc"))),
            Ok(
                "GPU 1 takes no new share: nhc\nnote: every GPU of the node is set aside \
                (GPU 0: XID 79; GPU 1: nhc); `gpu-mps resume-gpu N` once fixed; shares are \
                refused here and sent elsewhere, other jobs run (the node is not drained: \
                `scontrol update nodename=... state=drain` does that)\n"
                    .into()
            )
        );
        assert_eq!(
            said(drain(&state, 2, 0, None)),
            Ok("GPU 0 shares again\n".into())
        );
    }
}
