//! The test cluster's site, and ways to break it, for the audit's tests.

use crate::qos::check::Severity;
use crate::qos::config as qos_conf;
use crate::qos::site::{parse_nodes, parse_partitions, parse_qos, SlurmSettings};

use super::audit;
use super::gathered::{GpuQosConf, Site};

/// The test cluster's correct site, as its daemons print it.
pub(super) const CONFIG: &str = "\
AccountingStorageEnforce = associations,limits,qos,safe
AccountingStorageTRES   = cpu,mem,energy,node,billing,fs/disk,vmem,pages,gres/gpu,gres/gpu:a40,gres/gpu:h100,gres/mps
AccountingStorageType   = accounting_storage/slurmdbd
BatchStartTimeout       = 260 sec
Epilog                  = /usr/libexec/gpushare/gpu-mps-epilog
JobRequeue              = 1
JobSubmitPlugins        = gpu_qos
PlugStackConfig         = /etc/slurm/plugstack.conf
PreemptMode             = REQUEUE
PreemptType             = preempt/qos
PriorityType            = priority/multifactor
PriorityWeightFairShare = 1000
PriorityWeightQOS       = 10000
Prolog                  = /usr/libexec/gpushare/gpu-mps-prolog
TaskPlugin              = task/cgroup,task/affinity
";
pub(super) const QOS: &str = "\
normal|||cluster|00:00:00|1.000000||0
lowprio|||requeue|00:02:00|0.000000||0
qos_lafferty|gres/gpu:a40=4|lowprio|cluster|00:00:00|1.000000|DenyOnLimit|100
qos_dijk|gres/gpu:h100=2|lowprio|cluster|00:00:00|1.000000|DenyOnLimit|100
";
pub(super) const NODES: &str =
    "NodeName=node1 Arch=x86_64 Gres=gpu:a40:4,gpu:h100:2,mps:600 Partitions=gpu State=IDLE\n";
pub(super) const PARTITIONS: &str =
    "PartitionName=gpu Nodes=node1 TRESBillingWeights=CPU=1.0,GRES/gpu=1.0,GRES/gpu:h100=2.0\n";
pub(super) const GPU_QOS_CONF: &str = "QOS=qos_lafferty GPUTypes=a40 GPULimit=4\n\
    QOS=qos_dijk GPUTypes=h100 GPULimit=2\nLowPriorityQOS=lowprio\n";
pub(super) const PLUGSTACK: &str =
    "required /usr/lib/slurm/spank_gpu_mps.so conf=/etc/slurm/gpu_mps.conf\n";
pub(super) const CGROUP: &str = "CgroupPlugin=cgroup/v1\nConstrainDevices=yes\n";
/// What the site set on purpose: the decay (the config above weighs
/// fair share, not age).
pub(super) const SLURM_CONF: &str =
    "PriorityType=priority/multifactor\nPriorityDecayHalfLife=14-0\n";

pub(super) fn site_with(
    edit: impl FnOnce(&mut String, &mut String, &mut String, &mut String),
) -> Site {
    let (mut config, mut qos, mut partitions, mut conf) = (
        CONFIG.to_owned(),
        QOS.to_owned(),
        PARTITIONS.to_owned(),
        GPU_QOS_CONF.to_owned(),
    );
    edit(&mut config, &mut qos, &mut partitions, &mut conf);
    let (qos, mut unread) = parse_qos(&qos);
    let (nodes, u) = parse_nodes(NODES);
    unread.extend(u);
    let (partitions, u) = parse_partitions(&partitions);
    unread.extend(u);
    Site {
        plugstack: Some(PLUGSTACK.into()),
        cgroup_conf: Some(CGROUP.into()),
        slurm_conf: Some(SLURM_CONF.into()),
        gpu_qos_conf_path: "/etc/slurm/gpu_qos.conf".into(),
        gpu_qos_conf: match qos_conf::parse(&conf, "/etc/slurm/gpu_qos.conf") {
            Ok(c) => GpuQosConf::Read(Box::new(c)),
            Err(e) => GpuQosConf::Invalid(e.to_string()),
        },
        unread,
        ..Site::of_slurm(
            SlurmSettings::from_show_config(&config),
            qos,
            nodes,
            partitions,
        )
    }
}

pub(super) fn kinds(site: &Site) -> Vec<(Severity, String)> {
    audit(site)
        .into_iter()
        .map(|f| (f.severity, f.kind))
        .collect()
}

pub(super) fn replace(text: &mut String, from: &str, to: &str) {
    assert!(text.contains(from), "{from:?} not in {text}");
    *text = text.replace(from, to);
}

pub(super) fn kinds_of(site: &Site) -> Vec<String> {
    audit(site).into_iter().map(|f| f.kind).collect()
}

/// The correct site under job namespaces: `config` added to what
/// slurmctld prints (`JobContainerType = job_container/tmpfs`), and the
/// files beside slurm.conf.
pub(super) fn site_under_namespaces(
    config: &str,
    job_container_conf: Option<&str>,
    namespace_yaml: Option<&str>,
    gpu_mps_conf: Option<&str>,
) -> Site {
    let mut site = site_with(|c, _, _, _| c.push_str(config));
    site.job_container_conf = job_container_conf.map(str::to_owned);
    site.namespace_yaml = namespace_yaml.map(str::to_owned);
    site.gpu_mps_conf = gpu_mps_conf.map(str::to_owned);
    site
}
