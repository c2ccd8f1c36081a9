//! Releases an epilog could not make: its wait for the lock ran out (see
//! `lock_wait`), so it left a marker, `release.<job>` beside the state, and
//! the ledger's next transaction, whoever runs it (a prolog, an epilog, a
//! step, `gpu-mps gc`, the node timer), releases those records before its
//! own change. Nothing is lost and the node is not drained: a share's
//! units come back before any later placement looks at them.
//!
//! The marker names the records the epilog saw without the lock, by the
//! time each was made (`since`): a record of the same job id made later
//! (a requeued job placed here again) is never released by it. An epilog
//! that could read no state names none: every record of the job goes.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::records::{LedgerState, Record};

const PREFIX: &str = "release.";

/// The marker's name and text for `job`, whose records `seen` shows (the
/// state read without the lock; `None`: it could not be read).
pub(super) fn marker(job: u32, seen: Option<&LedgerState>) -> (String, String) {
    let deferred = Deferred {
        job,
        share_since: seen.and_then(|s| s.share(job)).map(|s| s.since),
        whole_since: seen.and_then(|s| s.whole_holder(job)).map(|w| w.since),
    };
    // Two integers and a name: nothing here fails to serialize.
    let text = serde_json::to_string(&deferred).unwrap_or_default();
    (format!("{PREFIX}{job}"), text)
}

/// One release left to the next transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Deferred {
    job: u32,
    /// The `since` of the job's share the epilog saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    share_since: Option<u64>,
    /// The `since` of its whole-GPU record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    whole_since: Option<u64>,
}

impl Deferred {
    /// Removes the records this release names from `state`; returns them.
    fn apply(&self, state: &mut LedgerState) -> Vec<Record> {
        let every = self.share_since.is_none() && self.whole_since.is_none();
        let mut out = Vec::new();
        let share = state.shares.get(&self.job).map(|s| s.since);
        if share.is_some() && (every || share == self.share_since) {
            out.extend(state.shares.remove(&self.job).map(Record::Share));
        }
        let whole = state.whole.get(&self.job).map(|w| w.since);
        if whole.is_some() && (every || whole == self.whole_since) {
            out.extend(state.whole.remove(&self.job).map(Record::Whole));
        }
        out
    }
}

/// The releases left in `dir`, with their files; a marker that does not
/// read is passed over (it stays for an admin to look at), and so is a
/// marker still being written.
pub(super) fn read_all(dir: &Path) -> Vec<(PathBuf, Deferred)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(PathBuf, Deferred)> = entries
        .filter_map(|e| {
            let path = e.ok()?.path();
            // `release.<job>` only: a writer's temporary file
            // (`release.<job>.<pid>.<n>.<random>.new`, see durable.rs) is
            // not a marker yet, and removing it would fail that writer's
            // rename (an epilog error, which drains the node).
            path.file_name()?
                .to_str()?
                .strip_prefix(PREFIX)?
                .parse::<u32>()
                .ok()?;
            let text = fs::read_to_string(&path).ok()?;
            Some((path, serde_json::from_str(&text).ok()?))
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// Applies every release in `found` to `state`: the records released.
pub(super) fn apply_all(found: &[(PathBuf, Deferred)], state: &mut LedgerState) -> Vec<Record> {
    found.iter().flat_map(|(_, d)| d.apply(state)).collect()
}

/// Removes the markers once the state without their records is written
/// (one left behind names records that are gone: applying it again
/// changes nothing).
pub(super) fn remove_all(found: &[(PathBuf, Deferred)]) {
    for (path, _) in found {
        let _ = fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_still_being_written_is_neither_read_nor_removed() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (name, text) = marker(7, None);
        // Another epilog's write of its marker, not yet renamed into place.
        let temp = dir
            .path()
            .join(format!("{name}.4242.0.0123456789abcdef.new"));
        fs::write(&temp, &text).unwrap_or_else(|e| panic!("{e}"));
        assert!(read_all(dir.path()).is_empty());
        fs::write(dir.path().join(&name), &text).unwrap_or_else(|e| panic!("{e}"));
        let found = read_all(dir.path());
        assert_eq!(found.len(), 1);
        remove_all(&found);
        assert!(temp.exists(), "the writer's temporary file was removed");
        assert!(!dir.path().join(&name).exists());
    }
}
