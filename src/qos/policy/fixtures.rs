//! What the policy's tests share: a `gpu_qos.conf`, jobs and verdicts.

use crate::qos::config::{self as qos_conf, GpuQosConfig};
use crate::qos::gres::PerNodeSpelling;

use super::job::{JobDescription, Resolved};
use super::submit::judge_submit;
use super::verdict::{JobChanges, Rejection, Verdict};

pub(super) const CONF: &str = "\
QOS=qos_lafferty,qos_ying_rex GPUTypes=a40 GPULimit=4
QOS=qos_saxena GPUTypes=a100,h100 GPULimit=20
QOS=qos_open GPUTypes=a40
LowPriorityQOS=lowprio
LowPriorityMaxArrayTasks=8
SharedGPUReservations=jhl_homework_gpu*,jupyterhub_course_*
MaxMPSPerJob=100
";

pub(super) fn cfg() -> GpuQosConfig {
    qos_conf::parse(CONF, "gpu_qos.conf").unwrap()
}

pub(super) fn cfg_from(text: &str) -> GpuQosConfig {
    qos_conf::parse(text, "gpu_qos.conf").unwrap()
}

/// A job as `sbatch [--qos=QOS] [--gres=PER_NODE]` sends it.
pub(super) fn job<'a>(qos: Option<&'a str>, per_node: Option<&'a str>) -> JobDescription<'a> {
    JobDescription {
        qos,
        tres_per_node: per_node,
        per_node_spelling: PerNodeSpelling::Gres,
        ..JobDescription::default()
    }
}

pub(super) fn rejection(verdict: Verdict) -> Rejection {
    match verdict {
        Verdict::Reject(r) => r,
        Verdict::Accept(c) => panic!("expected a rejection, got Accept({c:?})"),
    }
}

pub(super) fn changes(verdict: Verdict) -> JobChanges {
    match verdict {
        Verdict::Accept(c) => c,
        Verdict::Reject(r) => panic!("expected acceptance, got {:?}: {}", r.kind, r.message),
    }
}

pub(super) fn submit(job: &JobDescription<'_>) -> Verdict {
    judge_submit(&cfg(), job)
}

pub(super) const LEVELS: &str = "\
QOS=qos_lafferty GPUTypes=a40 GPULimit=4
QOS=qos_saxena GPUTypes=a100,h100 GPULimit=a100:20,h100:2
Partition=gpu GPUTypes=a40,h100 GPULimit=8
Account=lafferty GPUTypes=a40 GPULimit=a40:6
User=carol GPUTypes=h100
";

pub(super) fn resolved<'a>(default_qos: &'a [String], accounts: &'a [String]) -> Resolved<'a> {
    Resolved {
        default_qos,
        default_partition: Some("cpu"),
        accounts,
        user: Some("alice"),
        ..Resolved::default()
    }
}

pub(super) fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}
