//! What `gpu-qos why JOB` reads: what Slurm says of the job, then only
//! what explains its reason, in a number of calls that does not grow with
//! the site's jobs; a part that cannot be read is named in the report.

use super::accounts::account_chain_uses;
use crate::qos::site::{parse_nodes, parse_partitions, SlurmSettings, Unread};
use crate::qos::slurm::{
    config, job, jobs, nodes, partitions, priority, qos, runs, shares, soft, Query, ReadError,
    SlurmRead,
};
use crate::qos::usage;
use crate::qos::why::{self, Facts, WhyReport};

/// The nodes and the job's partition, for a wait where nodes or billing
/// matter (two calls that grow with the nodes, not the jobs).
fn node_facts(read: &dyn SlurmRead, partition: &str, unread: &mut Vec<Unread>, facts: &mut Facts) {
    if let Some(t) = soft(unread, "scontrol show node", read.read(&nodes::all())) {
        let (nodes, bad) = parse_nodes(&t);
        facts.nodes = nodes;
        unread.extend(bad);
    }
    if let Some(t) = soft(
        unread,
        "scontrol show partition",
        read.read(&partitions::one(partition)),
    ) {
        facts.partition = parse_partitions(&t).0.into_iter().next();
    }
}

/// One job's explanation (`gpu-qos why`, and each job of `usage
/// --explain`).
pub fn report(read: &dyn SlurmRead, id: &str) -> Result<WhyReport, ReadError> {
    // slurmdbd's QOS (`sacctmgr`, the slowest read where nothing is kept)
    // read beside slurmctld's answers.
    read.prefetch(&[qos::audit()]);
    let (found, mut unread) = job::read(read, id)?;
    let Some(mut found) = found else {
        return Err(ReadError::new(format!(
            "no job {id} pending or running (squeue -j {id} lists none)"
        )));
    };
    let all_qos = super::users_qos(read, &mut unread)?;
    let mut facts = Facts {
        qos: all_qos,
        ..Facts::default()
    };
    let pending = found.state == "PD";
    if pending {
        if let Some(t) = soft(&mut unread, "sprio -j", read.read(&priority::of_job(id))) {
            facts.factors = priority::parse_factors(&t)
                .into_iter()
                .next()
                .map(|(_, f)| f);
        }
        // The jobs it may be behind: only where priority decides (the
        // answer is the partition's pending jobs).
        let ranked = matches!(found.reason.as_str(), "Priority" | "Resources");
        if let Some(t) = ranked
            .then(|| {
                soft(
                    &mut unread,
                    "sprio -p",
                    read.read(&priority::of_partition(&found.partition)),
                )
            })
            .flatten()
        {
            facts.ranked = priority::parse_ranked(&t);
        }
        // The QOS and GPUs of the jobs ahead of it, where there are any.
        if !why::jobs_ahead(&facts, &found).is_empty() {
            if let Some(t) = soft(
                &mut unread,
                "squeue -t PENDING",
                read.read(&jobs::pending_in(&found.partition)),
            ) {
                let (jobs, bad) = jobs::parse(&t);
                facts.pending = jobs;
                unread.extend(bad);
            }
        }
        if let Some(t) = soft(&mut unread, "sprio -w", read.read(&priority::weights())) {
            facts.weights = priority::parse_factors(&t)
                .into_iter()
                .next()
                .map(|(_, f)| f);
        }
        if let Some(t) = soft(
            &mut unread,
            "sshare",
            read.read(&shares::of(&found.account, &found.user)),
        ) {
            facts.shares = shares::parse_shares(&t);
        }
        let victims = why::preempt_list(&facts.qos, &found.qos);
        // Its own group's running jobs too, where its QOS is a group's:
        // they hold the GPUs it waits for.
        let group = facts
            .qos
            .iter()
            .find(|q| q.name().eq_ignore_ascii_case(&found.qos))
            .filter(|q| q.record.expected_gpu_limit().is_some())
            .map(|q| q.name().to_owned());
        let asked: Vec<String> = victims.iter().cloned().chain(group.clone()).collect();
        match jobs::running_in(read, &found.user, &asked) {
            Ok((jobs, bad)) => {
                let (own, others): (Vec<_>, Vec<_>) = jobs
                    .into_iter()
                    .partition(|j| group.as_deref() == Some(j.qos.as_str()));
                facts.preemptable = others;
                facts.group_running = own;
                unread.extend(bad);
            }
            Err(e) => unread.push(e.unread("running jobs of the QOS it may preempt")),
        }
        if ranked {
            node_facts(read, &found.partition, &mut unread, &mut facts);
        }
        // Who holds the GPUs of the nodes it could run on, and until when.
        if found.reason == "Resources" {
            let names: Vec<&str> = why::candidate_nodes(&found, &facts.nodes)
                .iter()
                .take(why::NODES_SHOWN)
                .map(|n| n.name.as_str())
                .collect();
            if !names.is_empty() {
                if let Some(t) = soft(
                    &mut unread,
                    "squeue -t RUNNING -w",
                    read.read(&jobs::running_on(&names.join(","))),
                ) {
                    let (jobs, bad) = jobs::parse(&t);
                    facts.running_on_nodes = Some(jobs);
                    unread.extend(bad);
                }
            }
        }
        if found.reason.starts_with("AssocGrp") {
            facts.account_limits =
                account_chain_uses(read, vec![found.account.clone()], &mut unread);
        }
        // A reason Slurm has cleared for a moment (None) is settled
        // against the group's use, as `usage` does.
        if found.reason.starts_with("QOSGrp") || matches!(found.reason.as_str(), "None" | "") {
            let me = read.read(&Query::user_name())?.trim().to_owned();
            let report =
                jobs::group(read, &me, std::slice::from_ref(&found.qos)).map(|(jobs, _)| {
                    // This second read may catch the job while Slurm's
                    // scheduler has cleared its reason (None): explain the
                    // reason the first read gave, which the report shows.
                    let rows: Vec<usage::JobRow> = jobs
                        .iter()
                        .map(|j| {
                            let mut row = j.row();
                            if row.id == found.id {
                                row.reason.clone_from(&found.reason);
                            }
                            row
                        })
                        .collect();
                    usage::usage(&me, &[], &facts.qos, &rows, Some(&found.qos))
                });
            let settled = report.ok().and_then(|r| {
                r.qos
                    .into_iter()
                    .flat_map(|q| q.pending)
                    .find(|p| p.job.id == found.id && p.job.reason.starts_with("QOSGrp"))
            });
            if let Some(p) = settled {
                found.reason = p.job.reason;
                facts.group_words = Some(p.why);
            }
        }
    }
    if pending || found.restarts > 0 {
        if let Some(t) = soft(
            &mut unread,
            "scontrol show config",
            read.read(&config::show()),
        ) {
            let conf = SlurmSettings::from_show_config(&t);
            facts.max_age = conf.get("PriorityMaxAge").map(str::to_owned);
            facts.half_life = conf.get("PriorityDecayHalfLife").map(str::to_owned);
            facts.file_append = conf.get("JobFileAppend").map(|v| v.trim() == "1");
            // Which QOS gpu_qos submits in append mode.
            facts.low_priority_qos = super::policy_in_force(&conf).ok().map(|cfg| {
                cfg.map(|c| c.low_priority_qos().to_vec())
                    .unwrap_or_default()
            });
            facts.jobs_private = super::jobs_private(&conf);
        }
    }
    if found.restarts > 0 {
        if let Some(t) = soft(&mut unread, "sacct -D", read.read(&runs::of(id))) {
            facts.runs = runs::parse_runs(&t);
        }
    }
    unread.extend(super::qos_list_note(read, &[found.qos.as_str()]));
    let mut report = why::explain(found, facts);
    report.unread = unread;
    Ok(report)
}
