//! What `gpu-qos why --json` prints, and the text it prints without.

use serde::{Deserialize, Serialize};

use crate::qos::site::Unread;
use crate::qos::slurm::jobs::Job;
use crate::qos::slurm::priority::Factors;
use crate::qos::slurm::shares::ShareRow;

use super::facts::{Facts, Preempting};

/// What `gpu-qos why --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhyReport {
    pub job: Job,
    /// The one-line answer.
    pub summary: String,
    /// What follows it, line by line.
    pub details: Vec<String>,
    /// Commands that show more.
    pub see: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factors: Option<Factors>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<Factors>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fair_share: Vec<ShareRow>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preempting: Vec<Preempting>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<Unread>,
}

pub(super) fn report(
    job: Job,
    summary: String,
    details: Vec<String>,
    see: Vec<String>,
    facts: Facts,
    preempting: Vec<Preempting>,
) -> WhyReport {
    WhyReport {
        job,
        summary,
        details,
        see,
        factors: facts.factors,
        weights: facts.weights,
        fair_share: facts.shares,
        preempting,
        unread: Vec::new(),
    }
}

/// The report as text: the summary, each detail, then the commands.
pub fn render(r: &WhyReport) -> String {
    let mut out = format!("{}\n", r.summary);
    for d in &r.details {
        out.push_str(&format!("  {d}\n"));
    }
    if !r.see.is_empty() {
        out.push_str(&format!("  more: {}\n", r.see.join("; ")));
    }
    for u in &r.unread {
        out.push_str(&format!("  (not read: {}: {})\n", u.source, u.reason));
    }
    out
}
