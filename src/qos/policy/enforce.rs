//! `Enforce=warn`: a refusal its rule only warns of is kept as a warning
//! and the decision goes on (a rule that enforces may still refuse the
//! job); a change it would make is described instead of made.

use crate::qos::config::{Enforce, GpuQosConfig};

use super::job::JobDescription;
use super::rules::covering_rules;
use super::verdict::{JobChanges, LowPriorityChange, PolicyWarning, Rejection, WarningReason};
use super::wording::{not_yet_enforced, Syntax};

/// The warnings of one decision.
#[derive(Debug)]
pub(super) struct Told {
    qos: String,
    syntax: Syntax,
    warnings: Vec<PolicyWarning>,
}

impl Told {
    pub(super) fn new(job: &JobDescription<'_>, syntax: Syntax) -> Self {
        let qos = job.qos_label();
        Self {
            qos,
            syntax,
            warnings: Vec::new(),
        }
    }

    /// An outcome under `enforce`: a refusal that is enforced is returned
    /// as the error; one that only warns is kept (the first of them: a
    /// job refused is refused once) and the decision goes on without
    /// what the outcome would have given.
    pub(super) fn judge<T>(
        &mut self,
        enforce: Enforce,
        outcome: Result<T, Rejection>,
    ) -> Result<Option<T>, Rejection> {
        match outcome {
            Ok(value) => Ok(Some(value)),
            Err(refusal) if enforce == Enforce::Warn => {
                let refused_before = self
                    .warnings
                    .iter()
                    .any(|w| matches!(w.reason, WarningReason::Refusal(_)));
                if !refused_before {
                    self.warnings.push(PolicyWarning {
                        reason: WarningReason::Refusal(refusal.kind),
                        qos: self.qos.clone(),
                        message: not_yet_enforced(&refusal.message, self.syntax),
                    });
                }
                Ok(None)
            }
            Err(refusal) => Err(refusal),
        }
    }

    /// A change not made, described in `text`.
    pub(super) fn change(&mut self, change: LowPriorityChange, text: String) {
        self.warnings.push(PolicyWarning {
            reason: WarningReason::LowPriority(change),
            qos: self.qos.clone(),
            message: not_yet_enforced(&text, self.syntax),
        });
    }

    /// The accepted job's changes with the warnings told.
    pub(super) fn into_changes(self, mut changes: JobChanges) -> JobChanges {
        changes.warnings = self.warnings;
        changes
    }
}

/// For a refusal no single rule makes but that concerns every rule
/// covering the job (its GPU request does not parse): enforced when any
/// of those rules enforces; the file's `Enforce=` where none covers it.
pub(super) fn strictest_covering(cfg: &GpuQosConfig, job: &JobDescription<'_>) -> Enforce {
    covering_rules(cfg, job)
        .map(|rule| cfg.rule_enforce(rule))
        .reduce(Enforce::or_stricter)
        .unwrap_or(cfg.enforce())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
