//! What the audit reads: the site as the admin command gathered it, and
//! the QOS roles found in it.

use crate::qos::check;
use crate::qos::config::GpuQosConfig;
use crate::qos::site::{AuditQos, NodeInfo, PartitionInfo, SlurmSettings, Unread};

/// `gpu_qos.conf` as the audit found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuQosConf {
    Missing,
    Invalid(String),
    Read(Box<GpuQosConfig>),
}

/// Everything the audit looks at, gathered by the admin command.
#[derive(Debug, Clone, PartialEq)]
pub struct Site {
    pub settings: SlurmSettings,
    pub qos: Vec<AuditQos>,
    /// The associations with GPU entries in their `GrpTRES`.
    pub associations: Vec<check::AssocRecord>,
    pub nodes: Vec<NodeInfo>,
    pub partitions: Vec<PartitionInfo>,
    /// `plugstack.conf`'s text; `None` when there is none or it is unreadable.
    pub plugstack: Option<String>,
    /// `cgroup.conf`'s text, likewise.
    pub cgroup_conf: Option<String>,
    /// `gres.conf`'s text beside slurm.conf (what slurmctld sends
    /// configless nodes), likewise.
    pub gres_conf: Option<String>,
    /// `job_container.conf` beside slurm.conf (the tmpfs plugins' `Dirs=`,
    /// which slurmctld also sends configless nodes), likewise.
    pub job_container_conf: Option<String>,
    /// `namespace.yaml` beside slurm.conf (namespace/linux's `dirs:`, 25.11),
    /// likewise.
    pub namespace_yaml: Option<String>,
    /// `gpu_mps.conf` beside slurm.conf, where the controller shares the
    /// nodes' `/etc/slurm` (its `StateDir`), likewise.
    pub gpu_mps_conf: Option<String>,
    /// `slurm.conf`'s own text with the files it includes: what the site
    /// set on purpose, where `scontrol show config` also prints defaults;
    /// `None` when it cannot all be read.
    pub slurm_conf: Option<String>,
    /// The running jobs that asked for a list of QOS, where slurmctld's
    /// release moves them at a restart ([`qos_lists`]); `None` where not
    /// read (another release, or unread).
    ///
    /// [`qos_lists`]: crate::qos::slurm::qos_lists
    pub qos_lists: Option<Vec<crate::qos::slurm::qos_lists::ListedJob>>,
    /// Where gpu_qos.conf is (for messages) and what it holds.
    pub gpu_qos_conf_path: String,
    pub gpu_qos_conf: GpuQosConf,
    /// What could not be read; each becomes a note.
    pub unread: Vec<Unread>,
}

impl Site {
    /// What Slurm answered and nothing else: no site file read, no
    /// gpu_qos.conf (`gpu_qos.conf` for messages), nothing unread. The
    /// start of a site that a test or a caller fills in further.
    pub fn of_slurm(
        settings: SlurmSettings,
        qos: Vec<AuditQos>,
        nodes: Vec<NodeInfo>,
        partitions: Vec<PartitionInfo>,
    ) -> Site {
        Site {
            settings,
            qos,
            associations: Vec::new(),
            nodes,
            partitions,
            plugstack: None,
            cgroup_conf: None,
            gres_conf: None,
            job_container_conf: None,
            namespace_yaml: None,
            gpu_mps_conf: None,
            slurm_conf: None,
            qos_lists: None,
            gpu_qos_conf_path: "gpu_qos.conf".into(),
            gpu_qos_conf: GpuQosConf::Missing,
            unread: Vec::new(),
        }
    }
}

/// The low-priority QOS: gpu_qos.conf's `LowPriorityQOS`, or, without it,
/// every QOS another QOS may preempt.
pub(super) fn low_priority(site: &Site) -> Vec<&AuditQos> {
    let named: Vec<&str> = match &site.gpu_qos_conf {
        GpuQosConf::Read(cfg) => cfg.low_priority_qos().iter().map(String::as_str).collect(),
        _ => Vec::new(),
    };
    site.qos
        .iter()
        .filter(|q| {
            if named.is_empty() {
                site.qos
                    .iter()
                    .any(|o| o.name() != q.name() && o.record.preempt.iter().any(|p| p == q.name()))
            } else {
                named.iter().any(|n| n.eq_ignore_ascii_case(q.name()))
            }
        })
        .collect()
}

/// The group QOS: those with a usable typed GPU limit.
pub(super) fn group_qos(site: &Site) -> impl Iterator<Item = &AuditQos> {
    site.qos
        .iter()
        .filter(|q| q.record.expected_gpu_limit().is_some())
}

pub(super) fn plugin_loaded(site: &Site) -> bool {
    site.settings.list_has("JobSubmitPlugins", "gpu_qos")
}
