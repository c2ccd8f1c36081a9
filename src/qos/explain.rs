//! The site's QOS design told in plain words (`gpu-qos audit --explain`)
//! and as the table users read (`gpu-qos audit --markdown`): which QOS may
//! use which GPU types up to how many, whom each may preempt and with what
//! grace time, how priority is weighed, what each GPU type costs in fair
//! share. Written from the same [`Site`] the audit checks, so the story is
//! what Slurm is configured to do, not what the design meant.

use std::fmt::Write as _;

use super::audit::{effective_preempt_mode, gpu_cost, GpuQosConf, Site};
use super::policy::requeued_output_words;
use super::site::{parse_duration, partition_gpu_types, AuditQos, NodeInfo, PartitionInfo};
use crate::shared::node_refusals::{markdown_table, AFTER_TABLE};

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

/// The highest QOS priority: the QOS factor is a QOS's priority over it.
fn top_priority(site: &Site) -> u64 {
    site.qos
        .iter()
        .filter_map(|q| q.priority)
        .max()
        .unwrap_or(0)
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
        let top = top_priority(site);
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
        let types = partition_gpu_types(&site.nodes, &p.name);
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
            .map(|t| format!("{t} {}", gpu_cost(p, t)))
            .collect();
        let _ = writeln!(
            billing,
            "- {}: per GPU asked by type: {}; per GPU asked without a type: {untyped}; \
             per CPU: {}{}.",
            p.name,
            costs.join(", "),
            weight("cpu").unwrap_or(0.0),
            relative_costs(p, &types)
                .map(|w| format!(": {w}"))
                .unwrap_or_default()
        );
    }
    if !billing.is_empty() {
        out.push_str("\nFair-share cost (TRESBillingWeights, summed per job):\n");
        out.push_str(&billing);
    }
    out
}

/// A figure as people write it: `4`, `2.5`, `0.33`.
fn figure(x: f64) -> String {
    let text = format!("{x:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// What each GPU type costs in fair share against the cheapest one, the
/// way users compare them: "an h100-hour counts 2.5 a40-hours".
pub fn relative_costs(p: &PartitionInfo, types: &[String]) -> Option<String> {
    let costs: Vec<(&str, f64)> = types.iter().map(|t| (t.as_str(), gpu_cost(p, t))).collect();
    let (base, base_cost) = costs
        .iter()
        .copied()
        .filter(|(_, c)| *c > 0.0)
        .min_by(|a, b| a.1.total_cmp(&b.1))?;
    if costs.len() < 2 {
        return None;
    }
    if costs.iter().all(|(_, c)| *c == base_cost) {
        return Some(format!(
            "an hour of any GPU type ({}) counts the same",
            types.join(", ")
        ));
    }
    let words: Vec<String> = costs
        .iter()
        .filter(|(t, _)| *t != base)
        .map(|(t, c)| {
            let r = c / base_cost;
            format!(
                "{} {t}-hour counts {} {base}-hour{}",
                article(t),
                figure(r),
                if r == 1.0 { "" } else { "s" }
            )
        })
        .collect();
    Some(words.join(", "))
}

/// `an` before a type read with a vowel sound (`a40`, `h100`: "an
/// h-one-hundred"), else `a`.
fn article(word: &str) -> &'static str {
    match word.chars().next().map(|c| c.to_ascii_lowercase()) {
        Some('a' | 'e' | 'f' | 'h' | 'i' | 'l' | 'm' | 'n' | 'o' | 'r' | 's' | 'x') => "an",
        _ => "a",
    }
}

/// A period in words: `7 days`, `12 h`, `30 min`.
pub fn period_words(secs: u64) -> String {
    match secs {
        0 => "0 (no decay)".to_owned(),
        s if s % 86_400 == 0 => format!("{} day{}", s / 86_400, if s == 86_400 { "" } else { "s" }),
        s if s % 3600 == 0 => format!("{} h", s / 3600),
        s => seconds(s),
    }
}

/// The page a site links its users to, in Markdown: their QOS, why jobs
/// wait and how priority is made here (the site's own weights, decay and
/// cost per GPU type), what preemption means on either side, and the
/// commands that show more. Everything in it comes from the same [`Site`]
/// the audit reads, so it says what Slurm is configured to do.
pub fn user_page(site: &Site) -> String {
    let s = &site.settings;
    let mut out =
        String::from("# Using the GPUs: your QOS, why jobs wait, what GPU time costs\n\n");
    out.push_str(
        "_Generated from this cluster's configuration by `gpu-qos audit --explain --markdown`._\n\n\
         ## Your QOS\n\n",
    );
    out.push_str(&markdown(site));
    out.push_str(
        "\nSee yours, the GPUs your group holds and why its jobs wait: `gpu-qos usage`.\n\n\
         ## Why is my job waiting?\n\n\
         `gpu-qos why JOBID` explains one pending job in words and numbers, from what Slurm \
         says of it. `squeue --me` shows each job's reason; the ones met most:\n\n",
    );
    let multifactor = s
        .get("PriorityType")
        .is_some_and(|t| t.eq_ignore_ascii_case("priority/multifactor"));
    let period = |key: &str| {
        s.get(key)
            .and_then(parse_duration)
            .map_or_else(|| "7 days (Slurm's default)".to_owned(), period_words)
    };
    if multifactor {
        let top = top_priority(site);
        out.push_str(
            "**Priority**: jobs of higher priority are ahead of it. A pending job's priority is \
             the sum of these factors, each between 0 and 1, times this site's weight:\n\n\
             | factor | weight | what raises it |\n|---|---|---|\n",
        );
        for (word, key, raises) in [
            (
                "QOS",
                "PriorityWeightQOS",
                format!("a QOS of higher priority (its priority over the highest, {top})"),
            ),
            (
                "fair share",
                "PriorityWeightFairshare",
                "little recent GPU use by you and your account, against your shares".to_owned(),
            ),
            (
                "age",
                "PriorityWeightAge",
                format!(
                    "waiting: it grows to 1 over {} (PriorityMaxAge)",
                    period("PriorityMaxAge")
                ),
            ),
            (
                "job size",
                "PriorityWeightJobSize",
                "the job's size (fewer or more GPUs)".to_owned(),
            ),
            (
                "partition",
                "PriorityWeightPartition",
                "the partition's PriorityJobFactor".to_owned(),
            ),
        ] {
            let w = s.number(key).unwrap_or(0);
            if w > 0 {
                let _ = writeln!(out, "| {word} | {w} | {raises} |");
            }
        }
        let _ = write!(
            out,
            "\nFair share: what you and your account used counts against the shares you \
             were given, in billing units, and decays with a half-life of {} \
             (PriorityDecayHalfLife): an hour used that long ago counts half. \
             `sprio -l -j JOBID` shows a job's factors, `sshare -l -u $USER` your usage.\n",
            period("PriorityDecayHalfLife")
        );
        let mut table = String::new();
        for p in &site.partitions {
            let types = partition_gpu_types(&site.nodes, &p.name);
            if types.is_empty() || p.billing.is_empty() {
                continue;
            }
            let relative = relative_costs(p, &types).unwrap_or_default();
            for t in &types {
                let _ = writeln!(table, "| {} | {t} | {} | |", p.name, figure(gpu_cost(p, t)));
            }
            if !relative.is_empty() {
                let _ = writeln!(table, "| {} | | | {relative} |", p.name);
            }
        }
        if !table.is_empty() {
            out.push_str(
                "\nWhat one GPU-hour costs in fair share (TRESBillingWeights):\n\n\
                 | partition | GPU type | billing units per GPU-hour | compared |\n\
                 |---|---|---|---|\n",
            );
            out.push_str(&table);
        }
        out.push('\n');
    } else {
        out.push_str("**Priority**: jobs start in the order they were submitted.\n\n");
    }
    out.push_str(
        "- **Resources**: no node it may run on has enough free GPUs of its type now. \
         `squeue --start -j JOBID` shows Slurm's estimate; `gpu-qos why JOBID` names the nodes \
         and what holds their GPUs.\n\
         - **QOSGrpGRES**: your group's QOS holds as many GPUs as its limit allows; the job \
         starts when one of the group's jobs ends (`gpu-qos usage` says whose).\n",
    );
    // The QOS whose jobs are in fact preempted (a mode other than off).
    let lows: Vec<(&AuditQos, Vec<&str>)> = site
        .qos
        .iter()
        .filter(|q| !effective_preempt_mode(s, q).eq_ignore_ascii_case("off"))
        .map(|q| (q, preempted_by(site, q)))
        .filter(|(_, by)| !by.is_empty())
        .collect();
    for (q, by) in &lows {
        let grace = q.grace_time.unwrap_or(0);
        let _ = writeln!(
            out,
            "- **Waiting for preemption**: a job of {} that needs GPUs held by {} jobs waits \
             while they are {}{}",
            by.join(" or "),
            q.name(),
            preemption_words(site, q),
            if grace > 0 {
                format!(
                    ": up to {} (`gpu-qos why JOBID` says until when).",
                    seconds(grace)
                )
            } else {
                ".".to_owned()
            }
        );
    }
    out.push_str(
        "- **Dependency**, **BeginTime**, **JobHeldUser**, **ReqNodeNotAvail**, \
         **Reservation**: `gpu-qos why JOBID` says which, in one sentence, with the command \
         that shows more.\n",
    );
    if !lows.is_empty() {
        let append = s.get("JobFileAppend").is_some_and(|v| v.trim() == "1");
        out.push_str("\n## Low-priority jobs may be interrupted\n\n");
        for (q, by) in &lows {
            let grace = q.grace_time.unwrap_or(0);
            let _ = writeln!(
                out,
                "- {} jobs use idle GPUs and are {} when a job of {} needs them.{}",
                q.name(),
                preemption_words(site, q),
                by.join(" or "),
                if grace > 0 {
                    format!(
                        " They get SIGTERM first and {} to save their state: checkpoint \
                         then, and resume from the checkpoint when the job starts again.",
                        seconds(grace)
                    )
                } else {
                    " Checkpoint often: they get no warning.".to_owned()
                }
            );
        }
        let low = match &site.gpu_qos_conf {
            GpuQosConf::Read(cfg) => Some(cfg.low_priority_qos()),
            _ => None,
        };
        let words = requeued_output_words(low, None, append);
        let _ = writeln!(out, "- {}.", capitalized(&words));
    }
    if site.nodes.iter().any(NodeInfo::has_mps) {
        out.push_str(
            "\n## When a node refuses a GPU share\n\n\
             A GPU share (`--gres=mps:N`) that the node Slurm started it on cannot serve ends \
             with one of these messages in the job's output (its first words: `gpu_mps: job \
             N on node NODE:`):\n\n",
        );
        out.push_str(&markdown_table());
        let _ = writeln!(out, "\n{AFTER_TABLE}");
    }
    out.push_str(
        "\n## Commands\n\n\
         - `gpu-qos why JOBID`: why one job waits (`--json` for scripts)\n\
         - `gpu-qos usage` (`--explain`: each of your pending jobs explained): your group QOS, \
         the GPUs they hold, why their jobs wait\n\
         - `sprio -l -j JOBID`, `sshare -l -u $USER`, `squeue --start -j JOBID`: Slurm's own figures\n",
    );
    out
}

/// `words` with its first letter in capitals, to start a sentence.
fn capitalized(words: &str) -> String {
    let mut chars = words.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
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
    use crate::qos::audit::{self, AuditReport, FailOn};
    use crate::qos::check::Severity;
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
            gpu_qos_conf: GpuQosConf::Read(Box::new(
                qos_conf::parse(
                    "QOS=qos_lafferty GPUTypes=a40 GPULimit=4\nLowPriorityQOS=lowprio\n",
                    "gpu_qos.conf",
                )
                .unwrap(),
            )),
            ..Site::of_slurm(
                settings,
                qos,
                parse_nodes("NodeName=n1 Gres=gpu:a40:4,gpu:h100:2 Partitions=gpu\n").0,
                parse_partitions(
                    "PartitionName=gpu Nodes=n1 TRESBillingWeights=CPU=0.5,GRES/gpu=1,GRES/gpu:h100=3\n",
                )
                .0,
            )
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
            "- gpu: per GPU asked by type: a40 1, h100 4; per GPU asked without a type: 1; per CPU: 0.5: an h100-hour counts 4 a40-hours.",
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
    fn gpu_types_compared_with_the_cheapest() {
        let types = ["a40".to_owned(), "h100".to_owned(), "l4".to_owned()];
        let p = |w: &str| {
            parse_partitions(&format!(
                "PartitionName=gpu Nodes=n1 TRESBillingWeights={w}\n"
            ))
            .0
            .remove(0)
        };
        assert_eq!(
            relative_costs(&p("GRES/gpu=1,GRES/gpu:h100=1.5,GRES/gpu:l4=-0.5"), &types).as_deref(),
            Some("an a40-hour counts 2 l4-hours, an h100-hour counts 5 l4-hours")
        );
        assert_eq!(
            relative_costs(&p("GRES/gpu=2"), &types).as_deref(),
            Some("an hour of any GPU type (a40, h100, l4) counts the same")
        );
        assert_eq!(relative_costs(&p("CPU=1"), &types), None);
        assert_eq!(relative_costs(&p("GRES/gpu=3"), &types[..1]), None);
        assert_eq!(
            relative_costs(&p("GRES/gpu:a40=1,GRES/gpu:h100=3"), &types[..2]).as_deref(),
            Some("an h100-hour counts 3 a40-hours")
        );
        assert_eq!(
            (
                period_words(1_209_600),
                period_words(86_400),
                period_words(7200)
            ),
            ("14 days".into(), "1 day".into(), "2 h".into())
        );
    }

    #[test]
    fn the_users_page_is_the_sites_own() {
        let mut s = site();
        s.settings = SlurmSettings::from_show_config(
            "PreemptMode = REQUEUE\nPriorityType = priority/multifactor\n\
             PriorityWeightQOS = 10000\n\
             PriorityWeightFairShare = 1000\nPriorityWeightAge = 100\n\
             PriorityDecayHalfLife = 14-00:00:00\nPriorityMaxAge = 1-00:00:00\n",
        );
        let page = user_page(&s);
        for line in [
            "| qos_lafferty | 4 a40 | lowprio | – | – | 100 | 1 |",
            "| QOS | 10000 | a QOS of higher priority (its priority over the highest, 100) |",
            "| age | 100 | waiting: it grows to 1 over 1 day (PriorityMaxAge) |",
            "| gpu | h100 | 4 | |",
            "| gpu | | | an h100-hour counts 4 a40-hours |",
            "- A requeued job submitted with --qos=lowprio appends to its output file, so the earlier runs' output stays in it: gpu_qos turns on --open-mode=append for it unless it was submitted with --open-mode=truncate; any other requeued job starts its output file anew, losing the earlier runs' output, unless it was submitted with --open-mode=append.",
        ] {
            assert!(page.lines().any(|l| l == line), "{line}\nnot a line of\n{page}");
        }
        for words in [
            "decays with a half-life of 14 days (PriorityDecayHalfLife)",
            "- **Waiting for preemption**: a job of qos_lafferty or qos_new that needs GPUs held by lowprio jobs waits while they are requeued after a grace time of 2 min: up to 2 min (`gpu-qos why JOBID` says until when).",
            "They get SIGTERM first and 2 min to save their state",
        ] {
            assert!(page.contains(words), "{words}\nnot in\n{page}");
        }
        // Weights of 0 are left out: nothing a user does changes them.
        assert!(!page.contains("| job size |"));
        // Where Slurm's defaults apply, the page says so.
        s.settings = SlurmSettings::from_show_config(
            "PriorityType = priority/multifactor\nPriorityWeightFairShare = 1\n",
        );
        assert!(user_page(&s).contains("half-life of 7 days (Slurm's default)"));
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

    proptest::proptest! {
        /// Whatever Slurm printed, the audit and its explanation report;
        /// neither panics, and every line the audit could not read is a note.
        #[test]
        fn any_output_is_audited(
            config in "\\PC{0,120}",
            qos in "([a-z|/=:0-9,.-]{0,40}\n){0,4}",
            nodes in "\\PC{0,80}",
            partitions in "\\PC{0,80}",
        ) {
            let (qos, mut unread) = parse_qos(&qos);
            let (nodes, u) = parse_nodes(&nodes);
            unread.extend(u);
            let (partitions, u) = parse_partitions(&partitions);
            unread.extend(u);
            let unread_count = unread.len();
            let site = Site {
                unread,
                ..Site::of_slurm(SlurmSettings::from_show_config(&config), qos, nodes, partitions)
            };
            let found = audit::audit(&site);
            let notes = found.iter().filter(|f| f.kind == "unread" && f.severity == Severity::Note).count();
            proptest::prop_assert_eq!(notes, unread_count);
            let _ = explain(&site);
            let _ = markdown(&site);
            let _ = AuditReport::new(found, FailOn::Note, Vec::new()).to_table();
        }
    }
}
