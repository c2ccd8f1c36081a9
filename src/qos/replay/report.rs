//! What `gpu-qos replay` prints: the jobs replayed, where each job's
//! request came from, and what the policy would have refused or changed,
//! by reason (with one example each), rule, QOS and user.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::records::{Skipped, Submission};
use crate::qos::submit_line::REST_OF_THE_JOB;
use crate::shared::user_text::{is_control, shell_word, shown};

/// Where a job's GPU request was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The options of its `SubmitLine`.
    SubmitLine,
    /// `ReqTRES`: the release records no `SubmitLine`, or the job has none.
    ReqTres,
    /// `ReqTRES`, although there is a `SubmitLine`: it names no GPU (the
    /// request is in the script's `#SBATCH` lines, which it does not hold).
    ReqTresBesideSubmitLine,
}

/// What the policy does to a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Refused at submission.
    Refused,
    /// Accepted, its untyped GPU request given a type (`DefaultGPUType=`).
    Typed,
    /// Accepted with a change (low-priority requeue, exclusive=user, array throttle).
    Changed,
    /// Accepted as submitted with a warning (`Enforce=warn`).
    Warned,
}

impl Action {
    fn word(self) -> &'static str {
        match self {
            Action::Refused => "refused",
            Action::Typed => "typed",
            Action::Changed => "changed",
            Action::Warned => "warned",
        }
    }
}

/// What became of one submission: its action, reason (the metrics'
/// label), rule and the words its user would read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    pub action: Action,
    pub reason: &'static str,
    pub rule: String,
    pub message: String,
}

/// One job that shows a reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Example {
    pub job_id: String,
    /// Its SubmitLine as Slurm recorded it (its arguments joined by
    /// spaces, unquoted: not a command), or the request rebuilt from
    /// ReqTRES; every control character written out ([`shown`]).
    pub command: String,
    pub source: Source,
    /// What the plugin would have told its user, each of its lines with
    /// every control character written out.
    pub message: String,
    /// The option to type instead, from the message, quoted for a shell.
    pub type_instead: Option<String>,
    /// A command line with that option in place, rebuilt from the job's
    /// record and the options Slurm parsed, each word quoted for a
    /// shell: to be given with the job's other options and its script.
    pub line_instead: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReasonCount {
    pub action: Action,
    pub reason: &'static str,
    /// The reason's stable code (`docs/codes.md`).
    pub code: &'static str,
    pub jobs: u64,
    pub example: Example,
}

/// Jobs refused, changed and warned about, under one name (a rule, QOS, user).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ActionCounts {
    pub refused: u64,
    /// Accepted with a GPU type given (`DefaultGPUType=`), not refused.
    pub typed: u64,
    pub changed: u64,
    pub warned: u64,
}

impl ActionCounts {
    fn add(&mut self, action: Action) {
        match action {
            Action::Refused => self.refused += 1,
            Action::Typed => self.typed += 1,
            Action::Changed => self.changed += 1,
            Action::Warned => self.warned += 1,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SourceCounts {
    pub submit_line: u64,
    pub req_tres: u64,
    pub req_tres_beside_submit_line: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReplayReport {
    /// sacct's records read (array tasks each).
    pub records: u64,
    /// Submissions judged: a job, an array, a het component.
    pub jobs: u64,
    pub sources: SourceCounts,
    /// Jobs refused; jobs changed (not refused); jobs warned about only.
    pub totals: ActionCounts,
    pub unchanged: u64,
    pub reasons: Vec<ReasonCount>,
    pub by_rule: BTreeMap<String, ActionCounts>,
    pub by_qos: BTreeMap<String, ActionCounts>,
    pub by_user: BTreeMap<String, ActionCounts>,
    pub skipped: Vec<Skipped>,
    /// Notes on what the replay could not see.
    pub notes: Vec<String>,
}

/// The GPU or array option the message suggests: the last one it
/// names (the user's own request comes first in the refusal's words).
fn suggestion(message: &str) -> Option<String> {
    const STARTS: [&str; 6] = [
        "--gres=",
        "--gpus=",
        "--gpus-per-node=",
        "--gpus-per-task=",
        "--gpus-per-socket=",
        "--array=",
    ];
    message
        .split_whitespace()
        .rfind(|w| STARTS.iter().any(|s| w.starts_with(s)))
        .map(|w| w.trim_end_matches(['.', ',', ')', ';', ':']).to_owned())
}

impl ReplayReport {
    /// Counts `sub`, whose request came from `source` and is shown as
    /// `command`; `line_instead` rebuilds its line with an option in
    /// place.
    pub(super) fn count(
        &mut self,
        sub: &Submission,
        (source, command): (&Source, &str),
        outcomes: &[Judged],
        line_instead: &dyn Fn(&str) -> String,
    ) {
        self.records += sub.records as u64;
        self.jobs += 1;
        match source {
            Source::SubmitLine => self.sources.submit_line += 1,
            Source::ReqTres => self.sources.req_tres += 1,
            Source::ReqTresBesideSubmitLine => self.sources.req_tres_beside_submit_line += 1,
        }
        // A job counts once in the totals, under its strongest action.
        let Some(strongest) = outcomes.iter().map(|o| o.action).min() else {
            self.unchanged += 1;
            return;
        };
        self.totals.add(strongest);
        let mut seen: Vec<(Action, &str)> = Vec::new();
        for o in outcomes {
            if seen.contains(&(o.action, o.reason)) {
                continue;
            }
            seen.push((o.action, o.reason));
            match self
                .reasons
                .iter_mut()
                .find(|r| r.action == o.action && r.reason == o.reason)
            {
                Some(r) => r.jobs += 1,
                None => {
                    // The user's own words where the refusal quotes only
                    // them: never offered with a control character.
                    let instead = suggestion(&o.message).filter(|t| !t.chars().any(is_control));
                    let type_instead = instead.as_deref().and_then(shell_word);
                    let line_instead = instead.as_deref().map(line_instead);
                    self.reasons.push(ReasonCount {
                        action: o.action,
                        reason: o.reason,
                        code: crate::qos::policy::codes::code_of(o.reason).unwrap_or_default(),
                        jobs: 1,
                        example: Example {
                            job_id: sub.job_id.clone(),
                            command: shown(command),
                            source: *source,
                            message: o.message.lines().map(shown).collect::<Vec<_>>().join("\n"),
                            type_instead,
                            line_instead,
                        },
                    });
                }
            }
        }
        // Each name counts the job once, under its strongest action there.
        let mut by_rule: BTreeMap<&str, Action> = BTreeMap::new();
        for o in outcomes {
            let a = by_rule.entry(o.rule.as_str()).or_insert(o.action);
            *a = (*a).min(o.action);
        }
        for (rule, action) in by_rule {
            self.by_rule.entry(rule.to_owned()).or_default().add(action);
        }
        self.by_qos
            .entry(sub.qos.clone())
            .or_default()
            .add(strongest);
        self.by_user
            .entry(sub.user.clone())
            .or_default()
            .add(strongest);
    }

    /// The reasons in a stable order: action, then most jobs first.
    pub fn sort(&mut self) {
        self.reasons
            .sort_by(|a, b| (a.action, b.jobs, a.reason).cmp(&(b.action, a.jobs, b.reason)));
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    pub fn to_text(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "{} jobs replayed ({} accounting records): {} refused, {} given a GPU type \
             (DefaultGPUType=), {} changed, {} warned about, {} unchanged",
            self.jobs,
            self.records,
            self.totals.refused,
            self.totals.typed,
            self.totals.changed,
            self.totals.warned,
            self.unchanged
        );
        let _ = writeln!(
            t,
            "GPU request read from: SubmitLine {}, ReqTRES {} (no SubmitLine), ReqTRES {} \
             (SubmitLine names no GPU: #SBATCH lines are not in it)",
            self.sources.submit_line,
            self.sources.req_tres,
            self.sources.req_tres_beside_submit_line
        );
        if !self.reasons.is_empty() {
            let _ = writeln!(t, "\nBy reason:");
            for r in &self.reasons {
                let _ = writeln!(t, "  {:<8} {:<30} {:>8}", r.action.word(), r.reason, r.jobs);
                let e = &r.example;
                let from = match e.source {
                    Source::ReqTres => "rebuilt from ReqTRES",
                    _ => "its SubmitLine as Slurm recorded it, not a command",
                };
                let _ = writeln!(
                    t,
                    "           e.g. job {} ({from}): {}",
                    e.job_id, e.command
                );
                if let Some(line) = e.line_instead.as_ref().or(e.type_instead.as_ref()) {
                    let _ = writeln!(t, "           type instead: {line}");
                    let _ = writeln!(t, "             {REST_OF_THE_JOB}");
                }
                let first = e.message.lines().next().unwrap_or_default();
                let _ = writeln!(t, "           told: {first}");
            }
        }
        for (title, map) in [
            ("By rule", &self.by_rule),
            ("By QOS", &self.by_qos),
            ("By user", &self.by_user),
        ] {
            if map.is_empty() {
                continue;
            }
            let _ = writeln!(
                t,
                "\n{:<52} {:>8} {:>8} {:>8} {:>8}",
                format!("{title}:"),
                "refused",
                "typed",
                "changed",
                "warned"
            );
            for (name, c) in map {
                let _ = writeln!(
                    t,
                    "  {:<50} {:>8} {:>8} {:>8} {:>8}",
                    if name.is_empty() { "(none)" } else { name },
                    c.refused,
                    c.typed,
                    c.changed,
                    c.warned
                );
            }
        }
        if !self.skipped.is_empty() {
            let _ = writeln!(t, "\n{} sacct lines left out:", self.skipped.len());
            for s in self.skipped.iter().take(10) {
                let _ = writeln!(t, "  line {}: {}", s.line, shown(&s.reason));
            }
        }
        for n in &self.notes {
            let _ = writeln!(t, "\nNote: {n}");
        }
        t
    }
}
