//! How times, priority factors and jobs are said.

use crate::qos::gres::gpu_words;
use crate::qos::slurm::jobs::Job;
use crate::qos::slurm::priority::Factors;
use crate::shared::calendar::{add_seconds, stamp_seconds};

use super::facts::Preempting;

impl Job {
    pub(super) fn gpu_words(&self) -> String {
        gpu_words(&self.gpus)
    }

    /// The GPU type it asks for (its first typed request); `None` for an
    /// untyped request, which any GPU serves.
    pub(super) fn gpu_type(&self) -> Option<&str> {
        self.gpus.iter().find_map(|(t, _)| t.as_deref())
    }
}

impl Factors {
    /// The factors that add to a priority, with their names.
    pub(super) fn named(&self) -> [(&'static str, f64); 6] {
        [
            ("QOS", self.qos),
            ("fair share", self.fairshare),
            ("age", self.age),
            ("job size", self.jobsize),
            ("partition", self.partition),
            ("association", self.assoc),
        ]
    }
}

pub(super) fn whole(x: f64) -> String {
    format!("{x:.0}")
}

pub(super) fn grace_words(s: u64) -> String {
    match s {
        s if s >= 3600 && s % 3600 == 0 => format!("{} h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// When a signalled job ends at the latest: its grace time after it was
/// signalled, or its own end where that comes first (Slurm sets it so
/// where the job had an end; a job without a time limit has none).
pub(super) fn ends_by(p: &Preempting) -> Option<String> {
    let by_grace = p
        .job
        .preempt_time
        .as_deref()
        .zip(p.grace_s)
        .and_then(|(at, g)| add_seconds(at, g));
    match (by_grace, p.job.end.clone()) {
        (Some(g), Some(e)) => Some(if stamp_seconds(&e) < stamp_seconds(&g) {
            e
        } else {
            g
        }),
        (g, e) => g.or(e),
    }
}
