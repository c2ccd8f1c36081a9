//! `gpu-qos replay`: the policy core the plugin runs ([`judge_submit`]),
//! run over the jobs accounting recorded, and what it would have refused
//! or changed, counted by reason, rule, QOS and user.
//!
//! Each job is described as the plugin would have seen it: its GPU
//! request as typed (`SubmitLine`) where the release records it and the
//! line holds one, else as accounting counted it (`ReqTRES`), which
//! source each job's came from counted; its QOS, partition and account
//! as accounting recorded them (what the job ran under, Slurm's defaults
//! applied); the database's typed limits from `sacctmgr`.
//!
//! - `records`: sacct's records as submissions (arrays once, het
//!   components each).
//! - `report`: the counts, their text and JSON.

mod records;
mod report;

use std::collections::HashMap;

use crate::qos::check::{AssocRecord, QosRecord};
use crate::qos::config::GpuQosConfig;
use crate::qos::gres::PerNodeSpelling;
use crate::qos::policy::{
    judge_submit, limits_without_rule, JobDescription, LimitLevel, LowPriorityChange, Resolved,
    TypedLimit, Verdict, WarningReason,
};

use crate::qos::submit_line::{command_of, Retyped};
pub use crate::qos::submit_line::{parse as parse_submit_line, SubmittedOptions};
pub use records::{
    parse as parse_sacct, parse_job_id, requests_of_req_tres, ArrayIndex, JobId, Skipped,
    Submission,
};
pub use report::{Action, Example, Judged, ReasonCount, ReplayReport, Source};

/// What the database says that the plugin would have read from
/// slurmctld: the typed limits of QOS and accounts, each partition's QOS,
/// each account's parent.
#[derive(Debug, Clone, Default)]
pub struct Database {
    pub qos: Vec<QosRecord>,
    pub associations: Vec<AssocRecord>,
    /// (partition, its QOS).
    pub partition_qos: Vec<(String, String)>,
    /// (account, its parent).
    pub parents: Vec<(String, String)>,
}

/// What slurmctld would have resolved for jobs of one QOS, partition and
/// account: computed once per combination.
#[derive(Debug, Default)]
struct Cover {
    qos: Vec<String>,
    accounts: Vec<String>,
    typed_limits: Vec<TypedLimit>,
}

impl Database {
    fn cover(&self, qos: &str, partition: &str, account: &str) -> Cover {
        let eq = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
        let mut typed_limits = Vec::new();
        let types = |limits: &[crate::qos::check::GpuTresLimit]| -> Vec<String> {
            limits.iter().filter_map(|l| l.gpu_type.clone()).collect()
        };
        for q in self.qos.iter().filter(|q| eq(&q.name, qos)) {
            let t = types(&q.gpu_limits);
            if !t.is_empty() {
                typed_limits.push(TypedLimit {
                    level: LimitLevel::Qos(q.name.clone()),
                    types: t,
                });
            }
        }
        for part in partition.split(',').filter(|p| !p.is_empty()) {
            for (p, pq) in self.partition_qos.iter().filter(|(p, _)| eq(p, part)) {
                if let Some(q) = self.qos.iter().find(|q| eq(&q.name, pq)) {
                    let t = types(&q.gpu_limits);
                    if !t.is_empty() {
                        typed_limits.push(TypedLimit {
                            level: LimitLevel::Partition {
                                partition: p.clone(),
                                qos: pq.clone(),
                            },
                            types: t,
                        });
                    }
                }
            }
        }
        let mut accounts = Vec::new();
        let mut next = Some(account.to_owned()).filter(|a| !a.is_empty());
        while let Some(a) = next.take() {
            if accounts.iter().any(|seen: &String| eq(seen, &a)) || accounts.len() >= 32 {
                break;
            }
            next = self
                .parents
                .iter()
                .find(|(child, _)| eq(child, &a))
                .map(|(_, parent)| parent.clone());
            accounts.push(a);
        }
        for a in &accounts {
            for r in self
                .associations
                .iter()
                .filter(|r| r.user.is_none() && r.partition.is_none() && eq(&r.account, a))
            {
                let t = types(&r.gpu_limits);
                if !t.is_empty() {
                    typed_limits.push(TypedLimit {
                        level: LimitLevel::Account(r.account.clone()),
                        types: t,
                    });
                }
            }
        }
        Cover {
            qos: vec![qos.to_owned()]
                .into_iter()
                .filter(|q| !q.is_empty())
                .collect(),
            accounts,
            typed_limits,
        }
    }

    fn typed_anywhere(&self) -> bool {
        self.qos.iter().any(|q| q.typed_limits().next().is_some())
            || self
                .associations
                .iter()
                .any(|a| a.gpu_limits.iter().any(|l| l.gpu_type.is_some()))
    }
}

/// The request fields of one submission and where they came from.
struct Described {
    source: Source,
    per_node: Option<String>,
    per_job: Option<String>,
    per_task: Option<String>,
    per_socket: Option<String>,
    options: SubmittedOptions,
    /// The command shown as the example (the SubmitLine as recorded, or
    /// rebuilt from ReqTRES).
    command: String,
    /// Whether the job named its QOS (known only from a line; a job
    /// without one is taken to have named the QOS it ran under).
    named_qos: bool,
}

impl Described {
    /// The GPU options of the request, `instead` (a GPU option of a
    /// refusal, `--array=`) in place of its own of the same kind.
    fn gpu_options(&self, instead: &str) -> Vec<String> {
        let kinds: [(&[&str], Option<&String>, &str); 4] = [
            (
                &["--gres=", "--gpus-per-node="],
                self.per_node.as_ref(),
                "gres:",
            ),
            (&["--gpus="], self.per_job.as_ref(), "gres:gpu:"),
            (&["--gpus-per-task="], self.per_task.as_ref(), "gres:gpu:"),
            (
                &["--gpus-per-socket="],
                self.per_socket.as_ref(),
                "gres:gpu:",
            ),
        ];
        let mut out = Vec::new();
        let mut placed = instead.starts_with("--array=");
        for (names, items, prefix) in kinds {
            if names.iter().any(|n| instead.starts_with(n)) {
                out.push(instead.to_owned());
                placed = true;
            } else if let Some(items) = items {
                let items: Vec<&str> = items
                    .split(',')
                    .map(|i| i.strip_prefix(prefix).unwrap_or(i))
                    .collect();
                out.push(format!("{}{}", names[0], items.join(",")));
            }
        }
        if !placed {
            out.insert(0, instead.to_owned());
        }
        out
    }

    /// The command line to type instead, `instead` in place (a GPU
    /// option, `--array=`): rebuilt from the job's record and the options
    /// Slurm parsed, each word quoted ([`Retyped`]).
    fn line_instead(&self, sub: &Submission, instead: &str) -> String {
        let command = match (self.source, sub.submit_line.as_deref()) {
            (Source::ReqTres, _) | (_, None) => "sbatch",
            (_, Some(line)) => command_of(line),
        };
        let mut retyped = Retyped::new(command);
        for option in self.gpu_options(instead) {
            retyped.word(&option);
        }
        let array = match instead.strip_prefix("--array=") {
            Some(a) => Some(a.to_owned()),
            None => self.options.array.clone(),
        };
        let ntasks = self.options.ntasks.map(|n| n.to_string());
        let nodes = sub.nodes.filter(|&n| n > 1).map(|n| n.to_string());
        retyped
            .option("ntasks", ntasks.as_deref())
            .option("nodes", nodes.as_deref())
            .option("array", array.as_deref())
            .option("qos", Some(sub.qos.as_str()).filter(|_| self.named_qos))
            .option("partition", Some(sub.partition.as_str()))
            .option("account", Some(sub.account.as_str()))
            .option("reservation", sub.reservation.as_deref());
        retyped.line()
    }
}

fn joined(items: &[String]) -> Option<String> {
    (!items.is_empty()).then(|| items.join(","))
}

fn describe_request(sub: &Submission) -> Described {
    let from_tres = |source: Source| {
        let items = requests_of_req_tres(&sub.req_tres);
        let multi_node = sub.nodes.is_some_and(|n| n > 1);
        let request = joined(&items);
        let shown: Vec<String> = items
            .iter()
            .map(|i| i.trim_start_matches("gres:").to_owned())
            .collect();
        let mut command = String::from("sbatch");
        if !shown.is_empty() {
            if multi_node {
                let gpus: Vec<&str> = shown
                    .iter()
                    .filter_map(|s| s.strip_prefix("gpu:"))
                    .collect();
                command.push_str(&format!(" --gpus={}", gpus.join(",")));
            } else {
                command.push_str(&format!(" --gres={}", shown.join(",")));
            }
        }
        let array = sub.array.as_ref().map(ArrayIndex::expression);
        if let Some(a) = &array {
            command.push_str(&format!(" --array={a}"));
        }
        Described {
            source,
            per_node: request.clone().filter(|_| !multi_node),
            per_job: request.filter(|_| multi_node),
            per_task: None,
            per_socket: None,
            options: SubmittedOptions {
                array,
                gpu_tokens: (!shown.is_empty()).then_some((1, 2)),
                ..SubmittedOptions::default()
            },
            command,
            named_qos: true,
        }
    };
    let Some(line) = sub.submit_line.as_deref() else {
        return from_tres(Source::ReqTres);
    };
    let options = parse_submit_line(line);
    if !options.asks_gres() && !requests_of_req_tres(&sub.req_tres).is_empty() {
        // The request is in the script's #SBATCH lines, or in words this
        // reader could not tell apart: accounting's count stands in.
        let mut d = from_tres(Source::ReqTresBesideSubmitLine);
        d.options = SubmittedOptions {
            gpu_tokens: None,
            array: options.array.clone().or(d.options.array),
            ..options
        };
        d.named_qos = d.options.qos.is_some();
        d.command = line.to_owned();
        return d;
    }
    Described {
        source: Source::SubmitLine,
        per_node: joined(&options.per_node),
        per_job: joined(&options.per_job),
        per_task: joined(&options.per_task),
        per_socket: joined(&options.per_socket),
        command: line.to_owned(),
        named_qos: options.qos.is_some(),
        options,
    }
}

/// Replays `subs` under `cfg`: every count of the report.
pub fn replay(cfg: &GpuQosConfig, db: &Database, subs: &[Submission]) -> ReplayReport {
    let mut covers: HashMap<(String, String, String), Cover> = HashMap::new();
    let anywhere = db.typed_anywhere();
    let mut report = ReplayReport::default();
    for sub in subs {
        let key = (sub.qos.clone(), sub.partition.clone(), sub.account.clone());
        let cover = covers
            .entry(key)
            .or_insert_with(|| db.cover(&sub.qos, &sub.partition, &sub.account));
        let described = describe_request(sub);
        let named_qos = described.named_qos;
        let array = described
            .options
            .array
            .clone()
            .or_else(|| sub.array.as_ref().map(ArrayIndex::expression));
        let job = JobDescription {
            qos: named_qos
                .then_some(sub.qos.as_str())
                .filter(|q| !q.is_empty()),
            tres_per_node: described.per_node.as_deref(),
            tres_per_job: described.per_job.as_deref(),
            tres_per_socket: described.per_socket.as_deref(),
            tres_per_task: described.per_task.as_deref(),
            min_nodes: sub.nodes,
            max_nodes: described.options.nodes.map(|(_, max)| max),
            num_tasks: described.options.ntasks,
            ntasks_per_gpu: described.options.ntasks_per_gpu,
            sockets_per_node: None,
            // The caps per GPU are judged on GPUs alone here: the CPUs
            // and memory a past job held are not what it asked for.
            ntasks_per_node: None,
            cpus_per_task: None,
            pn_min_cpus: None,
            min_cpus: None,
            memory: None,
            cpus_per_tres: None,
            mem_per_tres: None,
            whole_node: false,
            reservation: sub.reservation.as_deref(),
            requeue: described.options.requeue,
            open_mode_set: described.options.open_mode_set,
            exclusive_user: described.options.exclusive_user,
            array_inx: array.as_deref(),
            job_id_for_messages: None,
            job_id_str: None,
            partition: Some(sub.partition.as_str()).filter(|p| !p.is_empty()),
            gres_slash: false,
            per_node_spelling: match described.source {
                Source::SubmitLine => described.options.per_node_spelling(),
                // The example's command is rebuilt with --gres.
                Source::ReqTres => PerNodeSpelling::Gres,
                Source::ReqTresBesideSubmitLine => PerNodeSpelling::Unknown,
            },
            resolved: Resolved {
                default_qos: if named_qos { &[] } else { &cover.qos },
                default_partition: None,
                accounts: &cover.accounts,
                user: Some(sub.user.as_str()),
                typed_limits: &cover.typed_limits,
                typed_limits_anywhere: anywhere,
            },
        };
        let outcomes = judge(cfg, &job);
        report.count(
            sub,
            (&described.source, &described.command),
            &outcomes,
            &|instead| described.line_instead(sub, instead),
        );
    }
    report
}

/// The refusal, or each change and warning, of one job.
pub fn judge(cfg: &GpuQosConfig, job: &JobDescription<'_>) -> Vec<Judged> {
    match judge_submit(cfg, job) {
        Verdict::Reject(r) => vec![Judged {
            action: Action::Refused,
            reason: r.kind.label(),
            rule: rule_of(cfg, job, Some(r.kind)),
            message: r.message,
        }],
        Verdict::Accept(changes) => {
            let mut out = Vec::new();
            let low = || {
                running_qos(job)
                    .find(|q| cfg.is_low_priority(q))
                    .map_or_else(String::new, |q| format!("LowPriorityQOS={q}"))
            };
            let mut change = |c: LowPriorityChange, message: String| {
                out.push(Judged {
                    action: Action::Changed,
                    reason: c.label(),
                    rule: low(),
                    message,
                });
            };
            if changes.set_requeue || changes.set_open_mode_append {
                change(
                    LowPriorityChange::Requeue,
                    "given --requeue and --open-mode=append".to_owned(),
                );
            }
            if changes.clear_exclusive_user {
                change(
                    LowPriorityChange::ExclusiveUser,
                    changes.user_warning.clone().unwrap_or_default(),
                );
            }
            if let Some(inx) = &changes.array_inx {
                change(LowPriorityChange::ArrayThrottle, format!("--array={inx}"));
            }
            if let Some(given) = &changes.gpu_type_given {
                out.push(Judged {
                    action: Action::Typed,
                    reason: crate::qos::policy::codes::DEFAULT_GPU_TYPE.1,
                    rule: rule_of(cfg, job, None),
                    message: given.message.clone(),
                });
            }
            for w in &changes.warnings {
                let rule = match w.reason {
                    WarningReason::Refusal(kind) => rule_of(cfg, job, Some(kind)),
                    WarningReason::TypeGiven => rule_of(cfg, job, None),
                    WarningReason::LowPriority(_) => low(),
                };
                out.push(Judged {
                    action: Action::Warned,
                    reason: w.reason.label(),
                    rule,
                    message: w.message.clone(),
                });
            }
            out
        }
    }
}

/// The QOS the job runs under: the one it names, else its default.
fn running_qos<'j>(job: &'j JobDescription<'_>) -> impl Iterator<Item = &'j str> {
    job.qos
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .chain(job.resolved.default_qos.iter().map(String::as_str))
}

/// The rule a refusal is counted under: the database's level for a typed
/// limit without a rule; else the first rule covering the job (its QOS,
/// then partition, then account); else the file's own keys.
fn rule_of(
    cfg: &GpuQosConfig,
    job: &JobDescription<'_>,
    kind: Option<crate::qos::policy::RejectionKind>,
) -> String {
    use crate::qos::policy::RejectionKind;
    if kind == Some(RejectionKind::UnlistedTypedLimit) {
        if let Some(limit) = limits_without_rule(cfg, job).first() {
            return format!("(no rule) {}", limit.level.describe());
        }
    }
    let by_qos = running_qos(job).find_map(|q| cfg.rule_for(q));
    let by_partition = || {
        job.partition
            .unwrap_or("")
            .split(',')
            .find_map(|p| cfg.partition_rule(p.trim()))
    };
    let by_account = || {
        cfg.association_rules().find(|rule| match rule.scope() {
            crate::qos::config::RuleScope::Association { accounts, users } => {
                let has = |l: &[String], n: Option<&str>| {
                    n.is_some_and(|n| l.iter().any(|x| x.eq_ignore_ascii_case(n)))
                };
                (users.is_empty() || has(users, job.resolved.user))
                    && (accounts.is_empty()
                        || job
                            .resolved
                            .accounts
                            .iter()
                            .any(|a| has(accounts, Some(a.as_str()))))
            }
            _ => false,
        })
    };
    match by_qos.or_else(by_partition).or_else(by_account) {
        Some(rule) => format!("{} (line {})", rule.scope_text(), rule.line()),
        None => "gpu_qos.conf (file-wide keys)".to_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
