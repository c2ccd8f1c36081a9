//! GPUs under `gpu-mps selftest`: while its clients run (up to a minute
//! each on a slow driver) the GPU's MPS server is the self-test user's,
//! so no share may be served there, yet the test holds no lock meanwhile
//! (it did: every share's prolog on that GPU then waited for it and was
//! refused `busy`). Instead the test marks the GPU here, under the GPU's
//! daemon lock and before it looks for shares there; gpushare's placement
//! passes such a GPU by, and a share that reaches its daemon anyway (Slurm
//! chose the GPU, or a prolog placed it just before the mark) is refused
//! `busy`, not counted, and requeued.
//!
//! The record is `<StateDir>/gpus-under-test`, a GPU a line: `<index>
//! <pid of the test> <until, Unix seconds>`, replaced whole under its own
//! lock. A mark past its `until` is no mark: a test killed before it could
//! clear its mark holds the GPU no longer than its clients could have.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::Duration;

use super::ledger::unix_now as now;
use super::lock_wait::LockWait;
use super::state_dir;

/// The record's file in the state directory.
pub const RECORD: &str = "gpus-under-test";
const LOCK: &str = "gpus-under-test.lock";

/// A GPU's mark: the test's pid, and when it stops counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub pid: u32,
    pub until: u64,
}

/// The GPUs marked, by index.
pub type UnderTest = BTreeMap<u32, Mark>;

fn text(marks: &UnderTest) -> String {
    marks
        .iter()
        .map(|(gpu, m)| format!("{gpu} {} {}\n", m.pid, m.until))
        .collect()
}

/// A record's text, with the marks that count at `at` (Unix seconds);
/// lines that do not read whole are no mark.
pub fn parse(text: &str, at: u64) -> UnderTest {
    text.lines()
        .filter_map(|l| {
            let mut words = l.split(' ');
            let gpu = words.next()?.parse().ok()?;
            let pid = words.next()?.parse().ok()?;
            let until = words.next()?.parse().ok()?;
            words.next().is_none().then_some((gpu, Mark { pid, until }))
        })
        .filter(|(_, m)| m.until > at)
        .collect()
}

/// The GPUs under test now in `state_dir` (none where there is no record).
pub fn read(state_dir: &Path) -> UnderTest {
    fs::read_to_string(state_dir.join(RECORD))
        .map(|t| parse(&t, now()))
        .unwrap_or_default()
}

/// Marks `gpu` as under the test of this process for up to `longest`.
pub fn mark(state_dir: &Path, gpu: u32, longest: Duration, wait: LockWait) -> Result<(), String> {
    let mark = Mark {
        pid: std::process::id(),
        until: now().saturating_add(longest.as_secs().max(1)),
    };
    change(state_dir, wait, |marks| {
        marks.insert(gpu, mark);
    })
}

/// Clears this process's mark of `gpu` (another test's is left).
pub fn clear(state_dir: &Path, gpu: u32, wait: LockWait) -> Result<(), String> {
    let me = std::process::id();
    change(state_dir, wait, |marks| {
        if marks.get(&gpu).is_some_and(|m| m.pid == me) {
            marks.remove(&gpu);
        }
    })
}

/// Changes the record under its lock; marks past their time are dropped.
fn change(state_dir: &Path, wait: LockWait, f: impl FnOnce(&mut UnderTest)) -> Result<(), String> {
    let lock = (LOCK, "the lock of the GPUs under self-test");
    state_dir::update_locked(state_dir, lock, RECORD, wait, |before| {
        let mut marks = parse(before, now());
        f(&mut marks);
        (text(&marks), ())
    })
}

/// Why a share is not served on `gpu` while `mark` holds, in words.
pub fn words(gpu: u32, mark: &Mark) -> String {
    let left = mark.until.saturating_sub(now());
    format!(
        "GPU {gpu} is under its MPS self-test (`gpu-mps selftest`, pid {}) for at most {left} s \
         more: its MPS server is the test's until then; the share is refused here, not counted, \
         and a batch job is requeued",
        mark.pid
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_counts_until_its_time_and_only_whole() {
        let text = "1 4242 100\n2 77 50\n3 9 x\n4 5 200 extra\nnonsense\n";
        let marks = parse(text, 60);
        assert_eq!(marks.len(), 1, "{marks:?}");
        assert_eq!(
            marks.get(&1),
            Some(&Mark {
                pid: 4242,
                until: 100
            })
        );
        assert!(parse(text, 100).is_empty());
    }

    #[test]
    fn a_test_clears_its_own_mark_only() {
        let dir = tempfile::tempdir().unwrap();
        let wait = LockWait::default();
        mark(dir.path(), 2, Duration::from_secs(60), wait).unwrap();
        let marks = read(dir.path());
        assert_eq!(marks.get(&2).map(|m| m.pid), Some(std::process::id()));
        // Another test's mark of GPU 3 stays when this one clears GPU 3.
        change(dir.path(), wait, |m| {
            m.insert(
                3,
                Mark {
                    pid: 1,
                    until: now() + 60,
                },
            );
        })
        .unwrap();
        clear(dir.path(), 3, wait).unwrap();
        clear(dir.path(), 2, wait).unwrap();
        let marks = read(dir.path());
        assert_eq!(marks.keys().copied().collect::<Vec<_>>(), vec![3]);
        assert!(words(3, &marks[&3]).contains("pid 1"));
    }
}
