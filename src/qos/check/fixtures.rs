//! What the tests of `check` share: the example site and helpers.

use crate::qos::config::{self as qos_conf, GpuQosConfig};

use super::compare::check;
use super::findings::Finding;
use super::records::{parse_sacctmgr, QosRecord};

pub(super) const FILE: &str = "gpu_qos.conf";

/// The example site: what `sacctmgr -nP show qos format=Name,GrpTRES,Preempt`
/// prints for it.
pub(super) const SITE_DB: &str = "\
normal||
lowprio||
qos_dijk|cpu=64,gres/gpu:h100=4|lowprio
qos_zhuoran_yang|gres/gpu:h100=4|lowprio
qos_ma_zongming|gres/gpu:h100=4,mem=512000|lowprio
qos_saxena|gres/gpu:a100=20|lowprio
qos_ying_rex|gres/gpu:a40=4|lowprio
qos_lafferty|gres/gpu:a40=4|lowprio
qos_yildirim|gres/gpu:a40=12|lowprio
";

pub(super) const SITE_CONF: &str =
    include_str!("../../../plugins/job_submit_gpu_qos/gpu_qos.conf.example");

pub(super) fn db(text: &str) -> Vec<QosRecord> {
    parse_sacctmgr(text).unwrap()
}

pub(super) fn conf(text: &str) -> GpuQosConfig {
    qos_conf::parse(text, FILE).unwrap()
}

pub(super) fn findings(conf_text: &str, db_text: &str) -> Vec<Finding> {
    check(&conf(conf_text), FILE, &db(db_text))
}

/// Each finding as the line `check` prints.
pub(super) fn lines(conf_text: &str, db_text: &str) -> Vec<String> {
    findings(conf_text, db_text)
        .iter()
        .map(|f| format!("{}: {f}", f.severity()))
        .collect()
}
