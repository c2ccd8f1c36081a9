//! Jobs, QOS and priorities captured from test clusters, for the tests
//! of `why`.

use crate::qos::site::AuditQos;
use crate::qos::slurm::jobs::parse as parse_jobs;
use crate::qos::slurm::jobs::Job;

// Captured from a 22.05 test cluster: a qos_lafferty job pending while
// lowprio job 1, signalled for preemption with GraceTime 120 s, ends.
pub(super) const PENDING: &str = "4|root|research|PD|qos_lafferty|gpu|10000|cpu=1,mem=16000M,node=1,billing=1,gres/gpu=2,gres/gpu:a40=2|Resources|2026-11-23T23:07:56|gpu01|N/A|NONE||0|\n";
pub(super) const VICTIMS: &str = "1|root|research|R|lowprio|gpu|1|cpu=1,node=1,billing=1,gres/gpu=4,gres/gpu:a40=4|None|2026-11-23T23:07:09|(null)|2026-11-23T23:07:24|2026-11-23T23:09:24|gpu01|0|\n\
    3|root|research|R|lowprio|gpu|1|cpu=1,node=1,billing=1,gres/gpu=4,gres/gpu:a40=4|None|2026-11-23T23:07:21|(null)|N/A|NONE|gpu02|0|\n";
pub(super) const SPRIO: &str = "4|gpu|root|10000|0|0|0|0|0|0|10000|0||\n";
pub(super) const WEIGHTS: &str = "Weights||||1|100|0|1000|0|0|10000||(null)|\n";
pub(super) const SSHARE: &str =
    "research||1|0.500000|6|0.000000||cpu=0,gres/gpu=0,gres/gpu:a40=0\n \
    research|root|1|1.000000|6|0.000000|0.250000|cpu=60,gres/gpu=1200,gres/gpu:a40=1200\n";

pub(super) fn qos(name: &str, preempt: &[&str], grace: Option<u64>) -> AuditQos {
    AuditQos {
        record: crate::qos::check::QosRecord {
            name: name.to_owned(),
            gpu_limits: Vec::new(),
            preempt: preempt.iter().map(|s| (*s).to_owned()).collect(),
        },
        preempt_mode: None,
        grace_time: grace,
        usage_factor: None,
        flags: Vec::new(),
        priority: None,
    }
}

pub(super) fn one(text: &str) -> Job {
    let (jobs, unread) = parse_jobs(text);
    assert!(unread.is_empty(), "{unread:?}");
    jobs.into_iter().next().unwrap_or_else(|| panic!("no job"))
}
