//! The state file's text (see the ledger's docs for its format): one JSON
//! object, read and written whole; another format or version is refused,
//! never guessed at.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::records::{LedgerState, Lost, ShareRecord, WholeRecord};

const FORMAT_NAME: &str = "gpushare-mps-ledger";
pub(super) const FORMAT_VERSION: u32 = 2;

/// The state file as it is written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StateFile {
    format: String,
    version: u32,
    shares: Vec<ShareRecord>,
    whole: Vec<WholeRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lost: Option<Lost>,
}

impl LedgerState {
    /// Parses the text of a state file; `file` only names it in errors.
    pub fn parse(text: &str, file: &Path) -> Result<Self, ParseError> {
        let error = |line: usize, problem: String| ParseError {
            file: file.to_path_buf(),
            line,
            problem,
        };
        if text.starts_with("gpushare-mps-ledger version=1") {
            return Err(error(
                1,
                format!(
                    "written in the text format of gpushare 0.1; this gpushare reads \
                     {FORMAT_NAME} version {FORMAT_VERSION} (JSON)"
                ),
            ));
        }
        let raw: StateFile =
            serde_json::from_str(text).map_err(|e| error(e.line(), e.to_string()))?;
        if raw.format != FORMAT_NAME || raw.version != FORMAT_VERSION {
            return Err(error(
                1,
                format!(
                    "this is {} version {}; this gpushare reads {FORMAT_NAME} version {FORMAT_VERSION}",
                    raw.format, raw.version
                ),
            ));
        }
        let mut state = Self {
            lost: raw.lost,
            ..Self::default()
        };
        for share in raw.shares {
            if share.units == 0 {
                return Err(error(
                    0,
                    format!("job {}: a share holds at least 1 unit", share.job),
                ));
            }
            let job = share.job;
            if state.insert_share(share).is_some() {
                return Err(error(0, format!("job {job} has two share records")));
            }
        }
        for whole in raw.whole {
            let mut gpus = whole.gpus.clone();
            gpus.sort_unstable();
            gpus.dedup();
            if gpus.is_empty() || gpus.len() != whole.gpus.len() {
                return Err(error(
                    0,
                    format!(
                        "job {}: whole GPUs {:?} must be a non-empty list without repeats",
                        whole.job, whole.gpus
                    ),
                ));
            }
            let job = whole.job;
            if state.insert_whole(whole).is_some() {
                return Err(error(0, format!("job {job} has two whole records")));
            }
        }
        Ok(state)
    }

    /// The text of a state file holding this state (see the module docs).
    pub fn to_json(&self) -> String {
        let file = StateFile {
            format: FORMAT_NAME.to_owned(),
            version: FORMAT_VERSION,
            shares: self.shares.values().cloned().collect(),
            whole: self.whole.values().cloned().collect(),
            lost: self.lost.clone(),
        };
        let mut text = serde_json::to_string_pretty(&file).unwrap_or_default();
        text.push('\n');
        text
    }
}

/// A state file that did not parse: `file:line: problem` (`file: problem`
/// when the problem is not on one line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub file: PathBuf,
    /// 1-based; 0 for the file as a whole.
    pub line: usize,
    pub problem: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            0 => write!(f, "{}: {}", self.file.display(), self.problem),
            line => write!(f, "{}:{line}: {}", self.file.display(), self.problem),
        }
    }
}

impl std::error::Error for ParseError {}

/// The version of a state file of this format newer than this gpushare
/// reads, if `bytes` is one (only its `format` and `version` are read).
pub(super) fn newer_version(bytes: &[u8]) -> Option<u32> {
    #[derive(Deserialize)]
    struct Head {
        format: String,
        version: u32,
    }
    let head: Head = serde_json::from_slice(bytes).ok()?;
    (head.format == FORMAT_NAME && head.version > FORMAT_VERSION).then_some(head.version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parse_refuses_what_it_cannot_trust() {
        let share = r#"{"job":1,"uid":2,"user":"a","gpu":0,"units":10,"since":3}"#;
        let file = |shares: &str, whole: &str, extra: &str| {
            format!(
                r#"{{"format":"gpushare-mps-ledger","version":2,"shares":[{shares}],"whole":[{whole}]{extra}}}"#
            )
        };
        let cases: Vec<(String, &str)> = vec![
            (String::new(), "EOF"),
            (file(share, "", ",\"colour\":1"), "unknown field `colour`"),
            (
                file(&share.replace("\"units\":10", "\"units\":0"), "", ""),
                "at least 1 unit",
            ),
            (
                file(&format!("{share},{share}"), "", ""),
                "two share records",
            ),
            (
                file("", r#"{"job":4,"gpus":[],"since":1}"#, ""),
                "non-empty list",
            ),
            (
                file("", r#"{"job":4,"gpus":[1,1],"since":1}"#, ""),
                "without repeats",
            ),
            (
                file(&share.replace("\"units\":10", "\"units\":-1"), "", ""),
                "invalid value",
            ),
            (
                file(share, "", "").replace("\"version\":2", "\"version\":3"),
                "version 3",
            ),
        ];
        for (text, want) in cases {
            match LedgerState::parse(&text, Path::new("/run/gpu-mps/state")) {
                Ok(state) => panic!("{text:?} parsed as {state:?}"),
                Err(e) => assert!(
                    e.to_string().contains(want),
                    "{text:?}: {e} (wanted {want:?})"
                ),
            }
        }
        let good = LedgerState::parse(
            &file(share, r#"{"job":4,"gpus":[3,1],"since":1}"#, ""),
            Path::new("s"),
        );
        let good = good.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            good.whole_holder(4).map(|w| w.gpus.clone()),
            Some(vec![1, 3])
        );
    }

    fn any_share() -> impl Strategy<Value = ShareRecord> {
        let fields = (
            any::<u32>(),
            any::<u32>(),
            any::<String>(),
            0u32..16,
            1u32..=100,
            any::<u64>(),
            any::<bool>(),
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<u32>()),
        )
            .prop_map(
                |(job, uid, user, gpu, units, since, placed_by_slurm, memory_mib, clients)| {
                    ShareRecord {
                        job,
                        uid,
                        user,
                        gpu,
                        units,
                        since,
                        placed_by_slurm,
                        memory_mib,
                        clients,
                        sluid: None,
                    }
                },
            );
        let sluid = proptest::option::of("s[0-9A-HJKMNP-TV-Z]{13}");
        (fields, sluid).prop_map(|(share, sluid)| ShareRecord { sluid, ..share })
    }

    fn any_whole() -> impl Strategy<Value = WholeRecord> {
        (
            any::<u32>(),
            proptest::collection::btree_set(0u32..16, 1..5),
            any::<u64>(),
        )
            .prop_map(|(job, gpus, since)| WholeRecord {
                job,
                gpus: gpus.into_iter().collect(),
                since,
            })
    }

    proptest! {
        #[test]
        fn every_state_survives_writing_and_reading_back(
            shares in proptest::collection::vec(any_share(), 0..8),
            wholes in proptest::collection::vec(any_whole(), 0..4),
            lost in proptest::option::of(any::<String>()),
        ) {
            let mut state = lost.map_or_else(LedgerState::new, LedgerState::lost);
            for share in shares {
                state.insert_share(share);
            }
            for whole in wholes {
                state.insert_whole(whole);
            }
            let parsed = LedgerState::parse(&state.to_json(), Path::new("state"));
            prop_assert_eq!(parsed, Ok(state));
        }
    }
}
