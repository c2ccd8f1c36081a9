//! The advice as `gpu-qos advise` prints it: one entry per job advised,
//! the count of the others by reason, in text or JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::decide::{
    decide, ended, held_gpus, Decision, Held, Kind, NotAdvised, Site, Source, Used,
};
use super::line::{advised_line, LineFrom};
use crate::qos::config::GpuQosConfig;
use crate::qos::gres::gpu_words;
use crate::qos::slurm::used::UsedJob;
use crate::qos::submit_line::{parse, REST_OF_THE_JOB};
use crate::shared::user_text::{is_control, shown};

/// One job advised.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobAdvice {
    pub job: String,
    pub user: String,
    pub qos: String,
    pub partition: String,
    pub kind: Kind,
    pub held: Held,
    pub used: Used,
    /// The share to ask for (`None`: a whole GPU).
    pub units: Option<u32>,
    pub units_per_gpu: u32,
    /// The option to ask with (`--gres=mps:20`, `--gres=gpu:a40:1`).
    pub option: String,
    /// The command line to type instead, rebuilt from the job's record
    /// and each word quoted for a shell ([`super::advised_line`]).
    pub command: String,
    pub command_from: LineFrom,
    /// What the command leaves to its reader: the job's other options
    /// and its script (`None`: no line was recorded; a note says so).
    pub command_rest: Option<&'static str>,
    /// The job's `SubmitLine` as accounting recorded it, every control
    /// character written out ([`shown`]): to read, not to paste.
    pub submitted: Option<String>,
    /// What else the user must know to use the line.
    pub notes: Vec<String>,
}

/// How many jobs got no advice for one reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotAdvisedCount {
    pub reason: NotAdvised,
    pub words: &'static str,
    pub jobs: usize,
}

/// The whole answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AdviseReport {
    /// `alice`, or `every user` (those Slurm shows the caller).
    pub whose: String,
    pub since: String,
    pub until: String,
    /// Jobs accounting listed.
    pub jobs: usize,
    /// Of them, those that ended holding GPUs or shares.
    pub gpu_jobs: usize,
    /// Those still running or pending, left for a later run.
    pub not_ended: usize,
    pub advice: Vec<JobAdvice>,
    pub not_advised: Vec<NotAdvisedCount>,
    pub notes: Vec<String>,
}

/// The advice of each job that ended holding GPUs, or why there is none.
pub fn decisions<'j>(
    jobs: &'j [UsedJob],
    site: &Site,
) -> (Vec<(&'j UsedJob, Decision)>, AdviseReport) {
    let mut report = AdviseReport {
        jobs: jobs.len(),
        ..AdviseReport::default()
    };
    let mut advised = Vec::new();
    let mut counts: BTreeMap<NotAdvised, usize> = BTreeMap::new();
    for job in jobs.iter().filter(|j| held_gpus(j)) {
        if !ended(&job.state) {
            report.not_ended += 1;
            continue;
        }
        report.gpu_jobs += 1;
        match decide(job, site) {
            Ok(d) => advised.push((job, d)),
            Err(why) => *counts.entry(why).or_default() += 1,
        }
    }
    report.not_advised = counts
        .into_iter()
        .map(|(reason, jobs)| NotAdvisedCount {
            reason,
            words: reason.words(),
            jobs,
        })
        .collect();
    (advised, report)
}

/// The entry of one job advised: `submit_line` as accounting recorded it,
/// `gpu_type` the type of the GPUs of its nodes (for a whole GPU).
pub fn entry(
    job: &UsedJob,
    d: Decision,
    submit_line: Option<&str>,
    gpu_type: Option<&str>,
    cfg: Option<&GpuQosConfig>,
) -> JobAdvice {
    // A type no shell word can hold is no type to offer.
    let gpu_type = gpu_type.filter(|t| !t.is_empty() && !t.chars().any(is_control));
    let option = match (d.units, gpu_type) {
        (Some(units), _) => format!("--gres=mps:{units}"),
        (None, Some(t)) => format!("--gres=gpu:{t}:1"),
        (None, None) => "--gres=gpu:1".to_owned(),
    };
    // A share under a QOS the line names and gpu_qos.conf has a rule for
    // is refused (the rule's QOS is for GPUs): the line leaves it out.
    let named_qos = submit_line.and_then(|l| parse(l).qos);
    let ruled = named_qos.as_deref().and_then(|q| {
        q.split(',')
            .map(str::trim)
            .find(|q| cfg.is_some_and(|c| c.rule_for(q).is_some()))
            .map(str::to_owned)
    });
    let drop_qos = d.units.is_some() && ruled.is_some();
    let (command, command_from) = advised_line(job, submit_line, &option, drop_qos);
    let mut notes = Vec::new();
    if let (true, Some(q)) = (drop_qos, &ruled) {
        notes.push(format!(
            "gpu_qos.conf takes only whole GPUs of the jobs that name QOS {q}: the line leaves \
             --qos out, so the share runs under your default QOS"
        ));
    }
    match command_from {
        LineFrom::SubmitLine => {}
        LineFrom::SubmitLineAdded => notes.push(
            "its command line asks for no GPU: take the GPU request out of the script's \
             #SBATCH lines"
                .to_owned(),
        ),
        LineFrom::Minimal => notes.push(
            "accounting recorded no command line: add your own options and script".to_owned(),
        ),
    }
    if d.units.is_some() {
        if let Some(globs) = cfg.and_then(GpuQosConfig::shared_gpu_reservations) {
            let inside = job
                .reservation
                .as_deref()
                .is_some_and(|r| cfg.is_some_and(|c| c.reservation_allows_shared(r)));
            if !inside {
                notes.push(format!(
                    "shares run only inside the reservations matching {}: add \
                     --reservation=NAME with one of them (scontrol show reservation)",
                    globs.join(", ")
                ));
            }
        }
    }
    if d.kind == Kind::WholeInstead && gpu_type.is_none() {
        notes.push("the type of its node's GPUs is not known: add it (gpu:TYPE:1)".to_owned());
    }
    if d.kind == Kind::Larger {
        notes.push(
            "a larger share has more memory only where gpu_mps.conf sets \
             MemoryLimit=proportional (the default)"
                .to_owned(),
        );
    }
    JobAdvice {
        job: job.id.clone(),
        user: job.user.clone(),
        qos: job.qos.clone(),
        partition: job.partition.clone(),
        kind: d.kind,
        held: d.held,
        used: d.used,
        units: d.units,
        units_per_gpu: d.units_per_gpu,
        option,
        command,
        command_from,
        command_rest: (command_from != LineFrom::Minimal).then_some(REST_OF_THE_JOB),
        submitted: submit_line.map(shown),
        notes,
    }
}

/// `412 MiB`, `4.0 GiB`.
fn memory_words(mib: u64) -> String {
    if mib < 1024 {
        format!("{mib} MiB")
    } else {
        format!("{:.1} GiB", mib as f64 / 1024.0)
    }
}

fn percent(fraction: f64) -> String {
    format!("{:.0} %", fraction * 100.0)
}

impl JobAdvice {
    /// What it held, in words.
    fn held_words(&self) -> String {
        match &self.held {
            Held::Share {
                units,
                units_per_gpu,
            } => format!("a share of {units} of {units_per_gpu} units"),
            Held::Whole { gpus, gpu_type } => {
                format!("{} whole", gpu_words(&[(gpu_type.clone(), *gpus)]))
            }
        }
    }

    /// What it used, in words.
    fn used_words(&self) -> String {
        let u = &self.used;
        let share = matches!(self.held, Held::Share { .. });
        let of = if share { "its limit" } else { "the GPU's" };
        let memory = match (u.mem_peak_mib, u.mem_limit_mib) {
            (Some(p), Some(l)) => {
                format!("at most {} of {of} {}", memory_words(p), memory_words(l))
            }
            (Some(p), None) => format!("at most {} of memory", memory_words(p)),
            (None, _) => "memory unknown".to_owned(),
        };
        let part = if share { "its part's SMs" } else { "its SMs" };
        let sm = u.sm_mean.map_or_else(
            || "SM use unknown".to_owned(),
            |s| format!("{} of {part} on average", percent(s)),
        );
        let from = match (u.source, u.samples) {
            (Source::Gpushare, Some(n)) => format!("gpushare's figures, {n} samples"),
            (Source::Gpushare, None) => "gpushare's figures".to_owned(),
            (Source::Slurm, _) => "Slurm's figures".to_owned(),
        };
        format!("{memory}, {sm} ({from})")
    }

    /// The advice, in words.
    fn advice_words(&self) -> String {
        let size = self
            .units
            .map(|u| format!(" ({u} of {} units per GPU)", self.units_per_gpu))
            .unwrap_or_default();
        match self.kind {
            Kind::ShareInstead => format!("Would fit a share: ask for {}{size}.", self.option),
            Kind::Smaller => format!(
                "Used at most half of its share: ask for {}{size}.",
                self.option
            ),
            Kind::Larger => format!("Reached its memory limit: ask for {}{size}.", self.option),
            Kind::WholeInstead => format!(
                "Reached its memory limit, and no share allowed is larger: ask for a whole \
                 GPU, {}.",
                self.option
            ),
        }
    }
}

impl AdviseReport {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Jobs of {} that ran between {} and {}: {} listed, {} ended with GPUs, {} advised.",
            self.whose,
            self.since,
            self.until,
            self.jobs,
            self.gpu_jobs,
            self.advice.len()
        );
        for a in &self.advice {
            let _ = writeln!(
                out,
                "\njob {} ({}, QOS {}): held {}; used {}.",
                a.job,
                a.user,
                a.qos,
                a.held_words(),
                a.used_words()
            );
            let _ = writeln!(out, "  {}", a.advice_words());
            let _ = writeln!(out, "  type: {}", a.command);
            if let Some(rest) = a.command_rest {
                let _ = writeln!(out, "        {rest}");
            }
            if let Some(line) = &a.submitted {
                let _ = writeln!(
                    out,
                    "  its SubmitLine, as Slurm recorded it (not a command): {line}"
                );
            }
            for n in &a.notes {
                let _ = writeln!(out, "  note: {n}");
            }
        }
        if !self.not_advised.is_empty() {
            let parts: Vec<String> = self
                .not_advised
                .iter()
                .map(|c| format!("{}: {}", c.words, c.jobs))
                .collect();
            let _ = writeln!(out, "\nNot advised: {}.", parts.join("; "));
        }
        if self.not_ended > 0 {
            let _ = writeln!(
                out,
                "{} job(s) still running or pending: advised once they end.",
                self.not_ended
            );
        }
        for n in &self.notes {
            let _ = writeln!(out, "note: {n}");
        }
        out
    }
}
