//! A wait on priority: the factors that hold the job back, the jobs
//! ahead of it, and its fair share.

use crate::qos::explain::relative_costs;
use crate::qos::gres::gpus_of_type;
use crate::qos::site::partition_gpu_types;
use crate::qos::slurm::jobs::Job;
use crate::qos::slurm::priority::Ranked;

use super::facts::Facts;
use super::words::whole;

/// The pending jobs of `job`'s partition of higher priority than its own
/// (none while its own factors are unknown).
pub fn jobs_ahead<'a>(facts: &'a Facts, job: &Job) -> Vec<&'a Ranked> {
    let Some(f) = &facts.factors else {
        return Vec::new();
    };
    facts
        .ranked
        .iter()
        .filter(|r| r.job != job.id && r.factors.priority > f.priority)
        .filter(|r| r.partition == job.partition)
        .collect()
}

/// The priority in its factors, which one holds it back, and the fair share.
pub(super) fn priority_details(facts: &Facts, job: &Job, details: &mut Vec<String>) {
    let (Some(f), Some(w)) = (&facts.factors, &facts.weights) else {
        return;
    };
    let parts: Vec<String> = f
        .named()
        .iter()
        .zip(w.named())
        .filter(|(_, (_, weight))| *weight > 0.0)
        .map(|((name, got), (_, weight))| format!("{name} {} of {}", whole(*got), whole(weight)))
        .collect();
    details.push(format!(
        "its priority is {} = {} (sprio)",
        whole(f.priority),
        parts.join(" + ")
    ));
    let ahead = jobs_ahead(facts, job);
    if !ahead.is_empty() {
        let who = tally(ahead.iter().map(|r| r.user.as_str()));
        details.push(format!(
            "{} pending job{} of partition {} {} ahead of it (by user: {})",
            ahead.len(),
            if ahead.len() == 1 { "" } else { "s" },
            job.partition,
            if ahead.len() == 1 { "is" } else { "are" },
            who.join(", ")
        ));
        ahead_by_kind(job, &ahead, &facts.pending, details);
        // The factor in which the jobs ahead lead it most, on average.
        let n = ahead.len() as f64;
        let lead = f
            .named()
            .iter()
            .enumerate()
            .map(|(i, (name, mine))| {
                let theirs = ahead.iter().map(|r| r.factors.named()[i].1).sum::<f64>() / n;
                (*name, theirs, *mine)
            })
            .max_by(|a, b| (a.1 - a.2).total_cmp(&(b.1 - b.2)));
        if let Some((name, theirs, mine)) = lead.filter(|(_, t, m)| t - m >= 1.0) {
            details.push(format!(
                "{name} puts them ahead: {} on average against its {}{}",
                whole(theirs),
                whole(mine),
                factor_hint(name, facts)
            ));
            return shares_details(facts, details);
        }
    }
    // The factor with the most left out of what its weight could give.
    let lost = f
        .named()
        .iter()
        .zip(w.named())
        .filter(|(_, (_, weight))| *weight > 0.0)
        .map(|((name, got), (_, weight))| (*name, weight - got))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    if let Some((name, missing)) = lost.filter(|(_, m)| *m >= 1.0) {
        details.push(format!(
            "{name} holds it back most: {} below its weight{}",
            whole(missing),
            factor_hint(name, facts)
        ));
    }
    shares_details(facts, details);
}

/// `name count` for each name, in the order they first come.
pub(super) fn tally<'a>(names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for name in names {
        match counts.iter_mut().find(|(n, _)| *n == name) {
            Some((_, c)) => *c += 1,
            None => counts.push((name, 1)),
        }
    }
    counts.iter().map(|(n, c)| format!("{n} {c}")).collect()
}

/// Of the jobs ahead that `squeue` shows (all of them, unless the site's
/// `PrivateData` hides other users' jobs), how many ask for GPUs of the
/// waiting job's type, and their QOS.
pub(super) fn ahead_by_kind(
    job: &Job,
    ahead: &[&Ranked],
    pending: &[Job],
    details: &mut Vec<String>,
) {
    let seen: Vec<&Job> = ahead
        .iter()
        .filter_map(|r| pending.iter().find(|p| p.id == r.job))
        .collect();
    if seen.is_empty() || job.gpus.is_empty() {
        return;
    }
    let gpu_type = job.gpu_type();
    let rivals: Vec<&Job> = seen
        .iter()
        .copied()
        .filter(|p| gpus_of_type(&p.gpus, gpu_type) > 0)
        .collect();
    let mut qos: Vec<&str> = rivals.iter().map(|p| p.qos.as_str()).collect();
    qos.sort_unstable();
    let what = gpu_type.map_or_else(|| "GPUs".to_owned(), |t| format!("{t} GPUs"));
    let of = if seen.len() == ahead.len() {
        "of them".to_owned()
    } else {
        format!("of the {} you may see", seen.len())
    };
    let line = if rivals.is_empty() {
        format!("{of}, none asks for {what}")
    } else {
        format!(
            "{of}, {} ask{} for {what} as this job does (by QOS: {})",
            rivals.len(),
            if rivals.len() == 1 { "s" } else { "" },
            tally(qos.into_iter()).join(", ")
        )
    };
    details.push(line);
}

/// What a factor depends on, in a few words.
pub(super) fn factor_hint(name: &str, facts: &Facts) -> String {
    match name {
        "fair share" => {
            " (recent usage against shares, of the account and the user: see below)".to_owned()
        }
        "age" => format!(
            " (a job's age factor grows while it waits, to its weight after PriorityMaxAge{})",
            facts
                .max_age
                .as_deref()
                .map(|a| format!(" = {a}"))
                .unwrap_or_default()
        ),
        "QOS" => " (a group QOS of higher priority, where you have one, raises it)".to_owned(),
        "job size" => " (the site weighs job size: fewer or more GPUs change it)".to_owned(),
        _ => String::new(),
    }
}

/// The fair share of the account and the user, with GPU-hours by type
/// and what each type costs here.
pub(super) fn shares_details(facts: &Facts, details: &mut Vec<String>) {
    shares_usage(facts, details);
    let Some(p) = &facts.partition else {
        return;
    };
    let types = partition_gpu_types(&facts.nodes, &p.name);
    if let Some(words) = relative_costs(p, &types) {
        details.push(format!(
            "fair share counts GPU time as partition {}'s TRESBillingWeights bill it: {words}",
            p.name
        ));
    }
}

pub(super) fn shares_usage(facts: &Facts, details: &mut Vec<String>) {
    for s in &facts.shares {
        let who = match &s.user {
            Some(u) => format!("user {u} in account {}", s.account),
            None => format!("account {}", s.account),
        };
        let gpus: Vec<String> = s
            .tres_minutes
            .iter()
            .filter_map(|(k, v)| {
                let t = k.strip_prefix("gres/gpu:")?;
                (*v > 0.0).then(|| format!("{:.1} {t}-hours", v / 60.0))
            })
            .collect();
        details.push(format!(
            "{who}: fair-share factor {}, effective usage {:.4} against normalized shares {:.4}{}",
            s.fairshare
                .map_or_else(|| "-".to_owned(), |f| format!("{f:.4}")),
            s.effective_usage,
            s.norm_shares,
            if gpus.is_empty() {
                String::new()
            } else {
                format!(
                    "; used {} (decayed{})",
                    gpus.join(", "),
                    facts
                        .half_life
                        .as_deref()
                        .map(|h| format!(", half-life {h}"))
                        .unwrap_or_default()
                )
            }
        ));
    }
}

#[cfg(test)]
mod tests;
