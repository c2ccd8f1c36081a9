//! The site's QOS design told in plain words (`gpu-qos audit --explain`)
//! and as the table users read (`gpu-qos audit --markdown`): which QOS may
//! use which GPU types up to how many, whom each may preempt and with what
//! grace time, how priority is weighed, what each GPU type costs in fair
//! share. Written from the same [`Site`] the audit checks, so the story is
//! what Slurm is configured to do, not what the design meant.

use std::fmt::Write as _;

use super::audit::{effective_preempt_mode, GpuQosConf, Site};
use super::site::AuditQos;

fn seconds(secs: u64) -> String {
    if secs >= 60 && secs.is_multiple_of(60) {
        format!("{} min", secs / 60)
    } else {
        format!("{secs} s")
    }
}

/// `a40: 4, h100: 2`, or what the QOS's GPU limits amount to.
fn gpu_limits(q: &AuditQos) -> String {
    let usable = q.record.usable_types();
    if !usable.is_empty() {
        return usable
            .iter()
            .map(|(t, n)| format!("{n} {t}"))
            .collect::<Vec<_>>()
            .join(", ");
    }
    match q.record.untyped_limit() {
        Some(0) => "no GPU".to_owned(),
        Some(n) => format!("{n} GPUs of any type"),
        None if q.record.typed_limits().next().is_some() => "no GPU of a limited type".to_owned(),
        None => "no GPU limit".to_owned(),
    }
}

/// The QOS that may preempt `q`.
fn preempted_by<'a>(site: &'a Site, q: &AuditQos) -> Vec<&'a str> {
    site.qos
        .iter()
        .filter(|o| {
            o.name() != q.name()
                && o.record
                    .preempt
                    .iter()
                    .any(|p| p.eq_ignore_ascii_case(q.name()))
        })
        .map(AuditQos::name)
        .collect()
}

/// What happens to a preempted job of `q`, in words.
fn preemption_words(site: &Site, q: &AuditQos) -> String {
    let mode = effective_preempt_mode(&site.settings, q);
    let done = if mode.contains("requeue") {
        "requeued"
    } else if mode.contains("cancel") {
        "cancelled"
    } else if mode.contains("suspend") {
        "suspended (keeping its GPU memory)"
    } else {
        return "never preempted (PreemptMode off)".to_owned();
    };
    match q.grace_time.unwrap_or(0) {
        0 => format!("{done} at once (no grace time)"),
        g => format!("{done} after a grace time of {}", seconds(g)),
    }
}

/// The plain-words story.
pub fn explain(site: &Site) -> String {
    let s = &site.settings;
    let mut out = String::new();
    let enforce = s.list("AccountingStorageEnforce");
    let has = |w: &str| enforce.iter().any(|e| e.eq_ignore_ascii_case(w));
    let enforced = (has("limits") || has("safe")) && has("qos");
    let _ = writeln!(
        out,
        "GPU limits are {} (AccountingStorageEnforce={}).",
        if enforced { "enforced" } else { "NOT enforced" },
        if enforce.is_empty() {
            "unset".to_owned()
        } else {
            enforce.join(",")
        }
    );
    let cfg = match &site.gpu_qos_conf {
        GpuQosConf::Read(cfg) => Some(cfg),
        _ => None,
    };
    let lows: Vec<&AuditQos> = site
        .qos
        .iter()
        .filter(|q| {
            cfg.is_some_and(|c| c.is_low_priority(q.name())) || !preempted_by(site, q).is_empty()
        })
        .collect();
    let groups: Vec<&AuditQos> = site
        .qos
        .iter()
        .filter(|q| q.record.expected_gpu_limit().is_some())
        .collect();
    if !groups.is_empty() {
        out.push_str("\nGroup QOS (limits count all jobs of the QOS together):\n");
    }
    for q in &groups {
        let _ = write!(out, "- {}: at most {} at a time", q.name(), gpu_limits(q));
        if cfg.and_then(|c| c.rule_for(q.name())).is_some() {
            out.push_str("; jobs must name the type (--gres=gpu:TYPE:N)");
        } else {
            out.push_str(
                "; untyped requests are NOT held to the typed limit (no gpu_qos.conf rule)",
            );
        }
        if !q.record.preempt.is_empty() {
            let _ = write!(out, "; may preempt {}", q.record.preempt.join(", "));
        }
        if let Some(p) = q.priority {
            let _ = write!(out, "; QOS priority {p}");
        }
        out.push_str(".\n");
    }
    if !lows.is_empty() {
        out.push_str("\nLow-priority QOS (idle GPUs, at the risk of preemption):\n");
    }
    for q in &lows {
        let _ = write!(
            out,
            "- {}: {}; preempted by {}, its jobs are {}",
            q.name(),
            gpu_limits(q),
            preempted_by(site, q).join(", "),
            preemption_words(site, q)
        );
        if let Some(u) = q.usage_factor {
            let _ = write!(out, "; its use counts {u} times in fair share");
        }
        out.push_str(".\n");
    }
    let others: Vec<&AuditQos> = site
        .qos
        .iter()
        .filter(|q| !groups.iter().chain(&lows).any(|g| g.name() == q.name()))
        .collect();
    if !others.is_empty() {
        out.push_str("\nOther QOS:\n");
        for q in &others {
            let _ = writeln!(out, "- {}: {}.", q.name(), gpu_limits(q));
        }
    }

    let ptype = s.get("PriorityType").unwrap_or("priority/basic");
    let _ = write!(out, "\nPriority: {ptype}");
    if ptype.eq_ignore_ascii_case("priority/multifactor") {
        let weights: Vec<String> = [
            ("QOS", "PriorityWeightQOS"),
            ("fair share", "PriorityWeightFairshare"),
            ("age", "PriorityWeightAge"),
            ("job size", "PriorityWeightJobSize"),
            ("partition", "PriorityWeightPartition"),
        ]
        .iter()
        .map(|(word, key)| format!("{word} {}", s.number(key).unwrap_or(0)))
        .collect();
        let top = site
            .qos
            .iter()
            .filter_map(|q| q.priority)
            .max()
            .unwrap_or(0);
        let _ = write!(
            out,
            "; weights {}. A pending job's priority is the sum of each weight times \
             its factor (0 to 1); the QOS factor is the QOS's priority over the highest \
             ({top}).",
            weights.join(", ")
        );
    } else {
        out.push_str(": jobs start in submission order; QOS priority does not count.");
    }
    out.push('\n');

    let mut billing = String::new();
    for p in &site.partitions {
        let types: Vec<&str> = {
            let mut t: Vec<&str> = site
                .nodes
                .iter()
                .filter(|n| n.partitions.iter().any(|x| x == &p.name))
                .flat_map(|n| n.gpu_types())
                .collect();
            t.sort_unstable();
            t.dedup();
            t
        };
        if types.is_empty() {
            continue;
        }
        if p.billing.is_empty() {
            // slurm.conf.html: without TRESBillingWeights a job is billed its CPUs.
            let _ = writeln!(
                billing,
                "- {}: no TRESBillingWeights: a job costs its CPUs; GPUs cost nothing.",
                p.name
            );
            continue;
        }
        let weight = |k: &str| p.billing_weight(k).and_then(|w| w.parse::<f64>().ok());
        let untyped = weight("gres/gpu").unwrap_or(0.0);
        let costs: Vec<String> = types
            .iter()
            .map(|t| {
                let typed = weight(&format!("gres/gpu:{t}")).unwrap_or(0.0);
                format!("{t} {}", untyped + typed)
            })
            .collect();
        let _ = writeln!(
            billing,
            "- {}: per GPU asked by type: {}; per GPU asked without a type: {untyped}; \
             per CPU: {}.",
            p.name,
            costs.join(", "),
            weight("cpu").unwrap_or(0.0)
        );
    }
    if !billing.is_empty() {
        out.push_str("\nFair-share cost (TRESBillingWeights, summed per job):\n");
        out.push_str(&billing);
    }
    out
}

/// The user-facing QOS table, in Markdown.
pub fn markdown(site: &Site) -> String {
    let mut out = String::from(
        "| QOS | GPUs the QOS may hold at once | may preempt | preempted by | when preempted | priority | usage factor |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for q in &site.qos {
        let by = preempted_by(site, q);
        let dash = |v: String| if v.is_empty() { "–".to_owned() } else { v };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            q.name(),
            gpu_limits(q),
            dash(q.record.preempt.join(", ")),
            dash(by.join(", ")),
            if by.is_empty() {
                "–".to_owned()
            } else {
                preemption_words(site, q)
            },
            q.priority.map_or("–".to_owned(), |p| p.to_string()),
            q.usage_factor.map_or("–".to_owned(), |u| u.to_string()),
        );
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::qos::config as qos_conf;
    use crate::qos::site::{parse_nodes, parse_partitions, parse_qos, SlurmSettings};

    fn site() -> Site {
        let settings = SlurmSettings::from_show_config(
            "AccountingStorageEnforce = associations,limits,qos\n\
             PreemptMode = REQUEUE\nPriorityType = priority/multifactor\n\
             PriorityWeightQOS = 10000\nPriorityWeightFairShare = 1000\n",
        );
        let (qos, _) = parse_qos(
            "normal|||cluster|00:00:00|1.000000||0\n\
             lowprio|||cluster|00:02:00|0.000000||0\n\
             qos_lafferty|gres/gpu:a40=4|lowprio|cluster|00:00:00|1.000000|DenyOnLimit|100\n\
             qos_new|gres/gpu:h100=2|lowprio|cluster|00:00:00|1.000000||50\n",
        );
        Site {
            settings,
            qos,
            nodes: parse_nodes("NodeName=n1 Gres=gpu:a40:4,gpu:h100:2 Partitions=gpu\n").0,
            partitions: parse_partitions(
                "PartitionName=gpu Nodes=n1 TRESBillingWeights=CPU=0.5,GRES/gpu=1,GRES/gpu:h100=3\n",
            )
            .0,
            plugstack: None,
            cgroup_conf: None,
            gpu_qos_conf_path: "gpu_qos.conf".into(),
            gpu_qos_conf: GpuQosConf::Read(
                qos_conf::parse(
                    "QOS=qos_lafferty GPUTypes=a40 GPULimit=4\nLowPriorityQOS=lowprio\n",
                    "gpu_qos.conf",
                )
                .unwrap(),
            ),
            unread: Vec::new(),
        }
    }

    #[test]
    fn the_story_in_plain_words() {
        let text = explain(&site());
        for line in [
            "GPU limits are enforced (AccountingStorageEnforce=associations,limits,qos).",
            "- qos_lafferty: at most 4 a40 at a time; jobs must name the type (--gres=gpu:TYPE:N); may preempt lowprio; QOS priority 100.",
            "- qos_new: at most 2 h100 at a time; untyped requests are NOT held to the typed limit (no gpu_qos.conf rule); may preempt lowprio; QOS priority 50.",
            "- lowprio: no GPU limit; preempted by qos_lafferty, qos_new, its jobs are requeued after a grace time of 2 min; its use counts 0 times in fair share.",
            "- normal: no GPU limit.",
            "Priority: priority/multifactor; weights QOS 10000, fair share 1000, age 0, job size 0, partition 0. A pending job's priority is the sum of each weight times its factor (0 to 1); the QOS factor is the QOS's priority over the highest (100).",
            "- gpu: per GPU asked by type: a40 1, h100 4; per GPU asked without a type: 1; per CPU: 0.5.",
        ] {
            assert!(text.contains(line), "{line}\nnot in\n{text}");
        }
    }

    #[test]
    fn a_partition_without_billing_weights_bills_cpus() {
        let mut s = site();
        s.partitions = parse_partitions("PartitionName=gpu Nodes=n1\n").0;
        assert!(explain(&s)
            .contains("- gpu: no TRESBillingWeights: a job costs its CPUs; GPUs cost nothing.\n"));
    }

    #[test]
    fn the_users_table() {
        let text = markdown(&site());
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(rows.len(), 6);
        assert_eq!(
            rows[3],
            "| lowprio | no GPU limit | – | qos_lafferty, qos_new | requeued after a grace time of 2 min | 0 | 0 |"
        );
        assert_eq!(
            rows[4],
            "| qos_lafferty | 4 a40 | lowprio | – | – | 100 | 1 |"
        );
    }
}
