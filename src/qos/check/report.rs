//! What `gpu-qos check` prints: the tally and its exit status, the
//! summary line, and the `--json` report.

use serde::{Deserialize, Serialize};

use crate::qos::config::GpuQosConfig;
use crate::shared::exit_status::gpu_qos as exit_status;

use super::findings::{Finding, Severity};
use super::records::QosRecord;

/// How many findings of each severity, and the exit status they mean.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub errors: usize,
    pub warnings: usize,
    pub notes: usize,
}

impl Tally {
    pub fn of(findings: &[Finding]) -> Self {
        let mut tally = Tally::default();
        for f in findings {
            match f.severity() {
                Severity::Error => tally.errors += 1,
                Severity::Warning => tally.warnings += 1,
                Severity::Note => tally.notes += 1,
            }
        }
        tally
    }

    /// Its status in `gpu-qos check`'s table: consistent (warnings and
    /// notes allowed), or at least one error.
    pub fn exit_code(&self) -> u8 {
        if self.errors > 0 {
            exit_status::CHECK_ERRORS.code
        } else {
            exit_status::CHECK_CONSISTENT.code
        }
    }
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// The last line of `check`'s text output.
pub fn summary_line(file: &str, cfg: &GpuQosConfig, db: &[QosRecord], tally: Tally) -> String {
    let verdict = if tally.errors > 0 {
        "DISCREPANCIES"
    } else {
        "consistent"
    };
    format!(
        "{file}: {verdict}: {}, {}, {} ({} checked against {} QOS in the accounting database)",
        plural(tally.errors, "error"),
        plural(tally.warnings, "warning"),
        plural(tally.notes, "note"),
        plural(cfg.rules().len(), "rule"),
        db.len(),
    )
}

/// One finding as `check --json` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FindingJson {
    pub severity: String,
    pub kind: String,
    pub qos: String,
    pub message: String,
}

/// What `check --json` prints: the result, or why there is none (`exit`
/// 2 and `error`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckJson {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conf: Option<String>,
    pub exit: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub errors: usize,
    #[serde(default)]
    pub warnings: usize,
    #[serde(default)]
    pub notes: usize,
    #[serde(default)]
    pub findings: Vec<FindingJson>,
}

impl CheckJson {
    pub fn report(file: &str, findings: &[Finding]) -> Self {
        let tally = Tally::of(findings);
        Self {
            conf: Some(file.to_owned()),
            exit: tally.exit_code(),
            error: None,
            errors: tally.errors,
            warnings: tally.warnings,
            notes: tally.notes,
            findings: findings
                .iter()
                .map(|f| FindingJson {
                    severity: f.severity().to_string(),
                    kind: f.kind().to_string(),
                    qos: f.qos().to_owned(),
                    message: f.to_string(),
                })
                .collect(),
        }
    }

    /// `check` could not check (exit 2).
    pub fn unchecked(reason: &str) -> Self {
        Self {
            conf: None,
            exit: exit_status::CHECK_UNCHECKED.code,
            error: Some(reason.to_owned()),
            errors: 0,
            warnings: 0,
            notes: 0,
            findings: Vec::new(),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
