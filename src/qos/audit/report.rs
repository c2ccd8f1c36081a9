//! The audit as printed: the table, the `--json` report and the exit
//! status `--fail-on` gives it.

use std::fmt::{self, Write as _};

use serde::{Deserialize, Serialize};

use crate::qos::check::Severity;
use crate::shared::exit_status::gpu_qos as exit_status;

use super::finding::AuditFinding;

/// The `--fail-on` threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailOn {
    Error,
    Warning,
    Note,
}

impl FailOn {
    fn reached_by(self, s: Severity) -> bool {
        let limit = match self {
            FailOn::Error => Severity::Error,
            FailOn::Warning => Severity::Warning,
            FailOn::Note => Severity::Note,
        };
        s <= limit
    }
}

/// What `gpu-qos audit --json` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditReport {
    /// 0 clean, 1 findings at or above `fail_on`, 2 could not read.
    pub exit: u8,
    pub fail_on: FailOn,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Where the settings came from (`scontrol show config` or a file).
    #[serde(default)]
    pub sources: Vec<String>,
    pub errors: usize,
    pub warnings: usize,
    pub notes: usize,
    pub findings: Vec<AuditFinding>,
}

impl AuditReport {
    pub fn new(findings: Vec<AuditFinding>, fail_on: FailOn, sources: Vec<String>) -> Self {
        let count = |s: Severity| findings.iter().filter(|f| f.severity == s).count();
        let exit = if findings.iter().any(|f| fail_on.reached_by(f.severity)) {
            exit_status::AUDIT_FOUND.code
        } else {
            exit_status::AUDIT_CLEAN.code
        };
        Self {
            exit,
            fail_on,
            error: None,
            sources,
            errors: count(Severity::Error),
            warnings: count(Severity::Warning),
            notes: count(Severity::Note),
            findings,
        }
    }

    /// The audit could not read the site (exit 2).
    pub fn unread(reason: &str, fail_on: FailOn) -> Self {
        Self {
            exit: exit_status::UNREAD.code,
            error: Some(reason.to_owned()),
            ..Self::new(Vec::new(), fail_on, Vec::new())
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The table for people: one block per finding, then a summary.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let width = self
            .findings
            .iter()
            .map(|f| f.object.chars().count())
            .max()
            .unwrap_or(6)
            .clamp(6, 40);
        if !self.findings.is_empty() {
            let _ = writeln!(out, "{:<8} {:<width$} FINDING", "SEVERITY", "OBJECT");
        }
        for f in &self.findings {
            let _ = writeln!(
                out,
                "{:<8} {:<width$} {}",
                f.severity.to_string(),
                f.object,
                f.what
            );
            let pad = " ".repeat(9 + width + 1);
            if !f.why.is_empty() {
                let _ = writeln!(out, "{pad}why: {}", f.why);
            }
            if !f.fix.is_empty() {
                let _ = writeln!(out, "{pad}fix: {}", f.fix);
            }
            let _ = writeln!(out, "{pad}see: {}", f.doc);
        }
        let verdict = if self.exit == 0 { "passed" } else { "FAILED" };
        let _ = writeln!(
            out,
            "audit {verdict} (--fail-on {}): {} error{}, {} warning{}, {} note{}; read {}",
            self.fail_on,
            self.errors,
            plural(self.errors),
            self.warnings,
            plural(self.warnings),
            self.notes,
            plural(self.notes),
            self.sources.join(", ")
        );
        out
    }
}

pub(super) fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

impl fmt::Display for FailOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailOn::Error => "error",
            FailOn::Warning => "warning",
            FailOn::Note => "note",
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
