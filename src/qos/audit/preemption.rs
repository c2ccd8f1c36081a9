//! The preemption link: the low-priority QOS preempted by QOS, in a mode
//! that frees the GPUs, with requeue on.

use crate::qos::check::Severity;
use crate::qos::site::{AuditQos, SlurmSettings};

use super::finding::*;
use super::gathered::{group_qos, low_priority, plugin_loaded, GpuQosConf, Site};

/// The mode a preempted job of `q` gets: its own PreemptMode unless that is
/// `cluster` (https://slurm.schedmd.com/preempt.html: with preempt/qos the
/// QOS's PreemptMode overrides the cluster's), lower case.
pub fn effective_preempt_mode(settings: &SlurmSettings, q: &AuditQos) -> String {
    match q.preempt_mode.as_deref() {
        Some(m) if !m.eq_ignore_ascii_case("cluster") => m.to_ascii_lowercase(),
        _ => settings
            .get("PreemptMode")
            .unwrap_or("off")
            .to_ascii_lowercase(),
    }
}

/// https://slurm.schedmd.com/preempt.html and slurm.conf.html (PreemptType,
/// PreemptMode, JobRequeue): group QOS take GPUs back from the low-priority
/// QOS only with preempt/qos, a mode that ends the preempted job (REQUEUE
/// or CANCEL; SUSPEND keeps its GPU memory), and for REQUEUE, requeueable
/// jobs.
pub(super) fn preemption(site: &Site, out: &mut Vec<AuditFinding>) {
    let s = &site.settings;
    let lows = low_priority(site);
    let any_preempt = site.qos.iter().any(|q| !q.record.preempt.is_empty());
    if !any_preempt && lows.is_empty() {
        return;
    }
    let ptype = s.get("PreemptType").unwrap_or("preempt/none");
    if !ptype.eq_ignore_ascii_case("preempt/qos") {
        out.push(
            AuditFinding::new(Severity::Error, "preempt_type", "slurm.conf", DOC_PREEMPT)
                .what(format!("PreemptType is {ptype}, not preempt/qos"))
                .why("the QOS Preempt lists are ignored: group jobs wait for low-priority jobs to end")
                .fix("PreemptType=preempt/qos (then restart slurmctld)"),
        );
    }
    let plugin = plugin_loaded(site);
    for low in &lows {
        let mode = effective_preempt_mode(s, low);
        let words: Vec<&str> = mode.split(',').map(str::trim).collect();
        let inherited = low.preempt_mode.as_deref().is_none_or(|m| m == "cluster");
        let source = if inherited {
            "the cluster's PreemptMode"
        } else {
            "its PreemptMode"
        };
        let object = qos_object(low.name());
        if words.contains(&"requeue") {
            if s.number("JobRequeue") == Some(0) {
                // The plugin makes jobs under its LowPriorityQOS requeueable.
                let forced = plugin
                    && matches!(&site.gpu_qos_conf, GpuQosConf::Read(c) if c.is_low_priority(low.name()));
                out.push(
                    AuditFinding::new(
                        if forced {
                            Severity::Note
                        } else {
                            Severity::Warning
                        },
                        "job_requeue_off",
                        "slurm.conf",
                        DOC_SLURM_CONF,
                    )
                    .what(format!(
                        "{} is preempted by REQUEUE ({source}), but JobRequeue=0",
                        low.name()
                    ))
                    .why(if forced {
                        "jobs are not requeueable by default; gpu_qos makes low-priority batch \
                         jobs requeueable, but a job submitted with --no-requeue, or before the \
                         plugin, is cancelled when preempted"
                    } else {
                        "jobs are not requeueable by default, so a preempted job is cancelled \
                         unless its user said --requeue"
                    })
                    .fix("JobRequeue=1 (then scontrol reconfigure)"),
                );
            }
        } else if words.contains(&"cancel") {
            out.push(
                AuditFinding::new(Severity::Note, "preempt_cancels", object, DOC_PREEMPT)
                    .what(format!("preempted jobs are cancelled ({source} is {mode})"))
                    .why("users of the low-priority QOS lose their job instead of getting it requeued")
                    .fix(format!("sacctmgr -i modify qos {} set PreemptMode=requeue", low.name())),
            );
        } else if words.contains(&"suspend") {
            out.push(
                AuditFinding::new(Severity::Warning, "preempt_suspends", object, DOC_PREEMPT)
                    .what(format!("preempted jobs are suspended ({source} is {mode})"))
                    .why("a suspended job keeps its GPUs' memory: the group's job may not fit on them")
                    .fix(format!("sacctmgr -i modify qos {} set PreemptMode=requeue", low.name())),
            );
        } else {
            out.push(
                AuditFinding::new(Severity::Error, "preempt_mode_off", object, DOC_PREEMPT)
                    .what(format!(
                        "{} cannot be preempted: {source} is {mode}",
                        low.name()
                    ))
                    .why("group jobs wait until low-priority jobs end on their own")
                    .fix(format!(
                        "sacctmgr -i modify qos {} set PreemptMode=requeue",
                        low.name()
                    )),
            );
        }
        if low.grace_time.unwrap_or(0) == 0 {
            out.push(
                AuditFinding::new(
                    Severity::Warning,
                    "no_grace_time",
                    qos_object(low.name()),
                    DOC_PREEMPT,
                )
                .what(format!("{} has GraceTime 0", low.name()))
                .why("preempted jobs are killed at once, with no time to checkpoint")
                .fix(format!(
                    "sacctmgr -i modify qos {} set GraceTime=120",
                    low.name()
                )),
            );
        }
        // https://slurm.schedmd.com/qos.html (UsageFactor).
        if low.usage_factor.is_some_and(|u| u >= 1.0) {
            out.push(
                AuditFinding::new(
                    Severity::Note,
                    "low_priority_usage_factor",
                    qos_object(low.name()),
                    DOC_QOS,
                )
                .what(format!(
                    "{} has UsageFactor {}: its use counts in full against fair share",
                    low.name(),
                    low.usage_factor.unwrap_or(1.0)
                ))
                .why("scavenging idle GPUs at the risk of preemption costs as much as a group job")
                .fix(format!(
                    "sacctmgr -i modify qos {} set UsageFactor=0",
                    low.name()
                )),
            );
        }
    }
    if lows.is_empty() {
        return;
    }
    for g in group_qos(site) {
        if lows.iter().any(|l| l.name() == g.name()) {
            continue;
        }
        let reaches = lows.iter().any(|l| {
            g.record
                .preempt
                .iter()
                .any(|p| p.eq_ignore_ascii_case(l.name()))
        });
        if !reaches {
            let names: Vec<&str> = lows.iter().map(|l| l.name()).collect();
            out.push(
                AuditFinding::new(
                    Severity::Error,
                    "group_cannot_preempt",
                    qos_object(g.name()),
                    DOC_PREEMPT,
                )
                .what(format!(
                    "{} may not preempt {} (its Preempt list is {})",
                    g.name(),
                    names.join(","),
                    if g.record.preempt.is_empty() {
                        "empty".to_owned()
                    } else {
                        g.record.preempt.join(",")
                    }
                ))
                .why("the group's jobs wait behind low-priority jobs on the GPUs it bought")
                .fix(format!(
                    "sacctmgr -i modify qos {} set Preempt+={}",
                    g.name(),
                    names.join(",")
                )),
            );
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
