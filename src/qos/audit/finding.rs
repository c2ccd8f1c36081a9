//! What each check of the audit reports: one link that does not hold,
//! with the Slurm page it follows.

use serde::{Deserialize, Serialize};

use crate::qos::check::Severity;

pub(super) const DOC_RESOURCE_LIMITS: &str = "https://slurm.schedmd.com/resource_limits.html";
pub(super) const DOC_SLURM_CONF: &str = "https://slurm.schedmd.com/slurm.conf.html";
pub(super) const DOC_PREEMPT: &str = "https://slurm.schedmd.com/preempt.html";
pub(super) const DOC_PRIORITY: &str = "https://slurm.schedmd.com/priority_multifactor.html";
pub(super) const DOC_GRES: &str = "https://slurm.schedmd.com/gres.html";
pub(super) const DOC_QOS: &str = "https://slurm.schedmd.com/qos.html";
pub(super) const DOC_SPANK: &str = "https://slurm.schedmd.com/spank.html";
pub(super) const DOC_CGROUP_CONF: &str = "https://slurm.schedmd.com/cgroup.conf.html";
pub(super) const DOC_JOB_CONTAINER_CONF: &str = "https://slurm.schedmd.com/job_container.conf.html";
pub(super) const DOC_NAMESPACE_YAML: &str = "https://slurm.schedmd.com/namespace.yaml.html";
pub(super) const DOC_JOB_SUBMIT: &str = "https://slurm.schedmd.com/job_submit_plugins.html";

/// One link of the chain that does not hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditFinding {
    pub severity: Severity,
    /// A stable name for scripts (`enforce_incomplete`, `unlisted_typed_qos`).
    pub kind: String,
    /// What it is about: `slurm.conf`, `QOS qos_lafferty`, `PartitionName=gpu`.
    pub object: String,
    /// What is wrong, in one sentence.
    pub what: String,
    /// What it means for jobs.
    pub why: String,
    /// The exact line or command that fixes it; empty when there is none.
    pub fix: String,
    /// The Slurm documentation the check follows.
    pub doc: String,
}

impl AuditFinding {
    pub(super) fn new(
        severity: Severity,
        kind: &str,
        object: impl Into<String>,
        doc: &str,
    ) -> Self {
        Self {
            severity,
            kind: kind.to_owned(),
            object: object.into(),
            what: String::new(),
            why: String::new(),
            fix: String::new(),
            doc: doc.to_owned(),
        }
    }
    pub(super) fn what(mut self, text: impl Into<String>) -> Self {
        self.what = text.into();
        self
    }
    pub(super) fn why(mut self, text: impl Into<String>) -> Self {
        self.why = text.into();
        self
    }
    pub(super) fn fix(mut self, text: impl Into<String>) -> Self {
        self.fix = text.into();
        self
    }
}

pub(super) fn qos_object(name: &str) -> String {
    format!("QOS {name}")
}
