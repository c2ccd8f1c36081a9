//! Each GPU's last self-test, kept in the state directory
//! (`selftest-gpu<N>`: when, pass or fail, why), for the metrics
//! (`gpushare_mps_selftest_ok`) and `gpu-mps status`; and the set-aside
//! a failure puts on its GPU, which only a passing test takes back.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::mps::health;
use crate::mps::lock_wait::LockWait;
use crate::mps::state_dir;

use super::judge::Verdict;

/// How a failed self-test's set-aside reason starts: what tells it from
/// an admin's or NVML's, so that a passing test lifts only its own.
pub const SET_ASIDE_PREFIX: &str = "MPS self-test failed";

/// One GPU's last self-test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastTest {
    /// Unix seconds.
    pub at: u64,
    pub passed: bool,
    /// The first failure, or empty.
    pub why: String,
}

fn file(gpu: u32) -> String {
    format!("selftest-gpu{gpu}")
}

/// GPU `gpu`'s last self-test, if it has had one (an unreadable record
/// counts as none).
pub fn last(state_dir: &Path, gpu: u32) -> Option<LastTest> {
    let text = std::fs::read_to_string(state_dir.join(file(gpu))).ok()?;
    let mut fields = text.trim_end_matches('\n').splitn(3, '\t');
    let at = fields.next()?.parse().ok()?;
    let passed = match fields.next()? {
        "pass" => true,
        "fail" => false,
        _ => return None,
    };
    Some(LastTest {
        at,
        passed,
        why: fields.next().unwrap_or_default().to_owned(),
    })
}

/// Keeps `verdict` as GPU `gpu`'s last self-test, and sets the GPU aside
/// when it failed, or gives it back when it passed and only a self-test
/// had set it aside. What changed, in words.
pub fn keep(
    state_dir: &Path,
    gpu: u32,
    verdict: &Verdict,
    wait: LockWait,
) -> Result<Option<String>, String> {
    let at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let why = verdict
        .failures
        .first()
        .map(|f| health::one_line(f))
        .unwrap_or_default();
    let word = if verdict.passed() { "pass" } else { "fail" };
    state_dir::replace_file(
        state_dir,
        &file(gpu),
        format!("{at}\t{word}\t{why}\n").as_bytes(),
        0o644,
    )
    .map_err(|e| format!("GPU {gpu}'s self-test record: {e}"))?;
    let set_aside = health::read(state_dir).remove(&gpu);
    if !verdict.passed() {
        if set_aside.is_some() {
            return Ok(None);
        }
        health::set_aside(state_dir, gpu, &format!("{SET_ASIDE_PREFIX}: {why}"), wait)?;
        return Ok(Some(format!(
            "GPU {gpu} takes no new share until `gpu-mps selftest` passes there"
        )));
    }
    match set_aside {
        Some(f) if f.reason.starts_with(SET_ASIDE_PREFIX) => {
            health::resume(state_dir, gpu, wait)?;
            Ok(Some(format!(
                "GPU {gpu} shares again: its self-test passed"
            )))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(failures: &[&str]) -> Verdict {
        Verdict {
            failures: failures.iter().map(|f| (*f).to_owned()).collect(),
            notes: Vec::new(),
        }
    }

    #[test]
    fn a_failure_sets_the_gpu_aside_and_only_a_pass_gives_it_back() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let state = dir.path().join("state");
        let uid = rustix::process::geteuid().as_raw();
        state_dir::ensure(&state, uid, state_dir::Access::Private)
            .unwrap_or_else(|e| panic!("{e}"));
        let wait = LockWait::default();
        assert_eq!(last(&state, 1), None);
        let said = keep(&state, 1, &verdict(&["132 SMs\twhere 33"]), wait);
        assert!(said.is_ok_and(|s| s.is_some_and(|s| s.contains("no new share"))));
        let kept = last(&state, 1).unwrap_or_else(|| panic!("no record"));
        assert!(!kept.passed);
        assert_eq!(kept.why, "132 SMs where 33");
        assert!(health::read(&state)[&1]
            .reason
            .starts_with(SET_ASIDE_PREFIX));
        keep(&state, 1, &verdict(&[]), wait).unwrap_or_else(|e| panic!("{e}"));
        assert!(health::read(&state).is_empty());
        assert!(last(&state, 1).is_some_and(|t| t.passed));
        // An admin's set-aside is never lifted by a test.
        health::set_aside(&state, 0, "drained by an admin", wait).unwrap_or_else(|e| panic!("{e}"));
        keep(&state, 0, &verdict(&[]), wait).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(health::read(&state)[&0].reason, "drained by an admin");
    }
}
