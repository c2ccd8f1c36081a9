//! The node's metrics in Prometheus's text format (for node_exporter's
//! textfile collector, `MetricsFile=` in gpu_mps.conf), and the counters
//! behind them.
//!
//! The figures are a view of the same [`NodeStatus`] `gpu-mps status`
//! prints: [`render`] is a pure function of it and of the [`Counters`].
//! The counters (placements, refusals by reason, daemon starts and
//! restarts, records dropped) outlive the prolog's short life in
//! `<StateDir>/counters`; they start from zero when `/run` is emptied (a
//! reboot), which Prometheus's `rate()` and `increase()` take as a reset.
//!
//! Series carry no node label: node_exporter's `instance` tells the node.
//! Only the per-share series carry a job label, so cardinality stays that
//! of the jobs running.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::daemon::MpsDaemon;
use super::ledger::GpuView;
use super::state_dir::{self, io_error, DirError};
use super::status::{DaemonState, GpuMps, NodeStatus};
use super::usage::totals::{Fit, FitRow, Histogram, MEMORY_BOUNDS, SM_BOUNDS};
use super::usage::ShareUse;
use crate::shared::prom::Exposition;

/// The counters file in the state directory.
pub const COUNTERS_FILE: &str = "counters";

/// Every reason a share is refused for (see `PlacementError::reason`),
/// exported from zero so that `increase()` sees the first one.
pub const REFUSAL_REASONS: [&str; 17] = [
    "size",
    "node_config",
    "no_room",
    "ledger_lost",
    "slurm_gpu",
    "client_limit",
    "other_users",
    "cgroup_v2",
    "config",
    "mig",
    "downgrade",
    "mps_daemon",
    "gpu_failed",
    "disabled",
    "busy",
    "private",
    "private_shared",
];

/// What the node programs count, kept across their runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Counters {
    /// Shares placed, by who chose the GPU (`gpushare`, `slurm`).
    pub placements: BTreeMap<String, u64>,
    /// Shares refused, by reason.
    pub refusals: BTreeMap<String, u64>,
    pub daemon_starts: u64,
    /// Daemons found dead or hung, killed and started anew.
    pub daemon_restarts: u64,
    pub daemon_failures: u64,
    /// Records of jobs no longer running, dropped by reconciliation.
    pub records_dropped: u64,
}

/// One thing the node programs count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    Placed { by_slurm: bool },
    Refused(&'static str),
    Daemon(&'a MpsDaemon),
    Dropped(usize),
}

impl Counters {
    /// The counters in `dir`: zero where there are none yet, and where the
    /// file cannot be read (the note says why; counting starts again).
    pub fn read(dir: &Path) -> (Self, Option<String>) {
        let path = dir.join(COUNTERS_FILE);
        match fs::read_to_string(&path) {
            Ok(text) => match serde_json::from_str(&text) {
                Ok(c) => (c, None),
                Err(e) => (
                    Self::default(),
                    Some(format!(
                        "{}: unreadable, counting from 0: {e}",
                        path.display()
                    )),
                ),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => (Self::default(), None),
            Err(e) => (
                Self::default(),
                Some(format!("{}: {e}; counting from 0", path.display())),
            ),
        }
    }

    /// Writes them to `dir` atomically (a checked, private directory).
    pub fn write(&self, dir: &Path) -> Result<(), DirError> {
        let text = serde_json::to_string(self)
            .map_err(|e| io_error("encode", &dir.join(COUNTERS_FILE), io::Error::other(e)))?;
        state_dir::replace_file(dir, COUNTERS_FILE, text.as_bytes(), 0o600)
    }

    pub fn count(&mut self, event: Event<'_>) {
        match event {
            Event::Placed { by_slurm } => {
                let by = if by_slurm { "slurm" } else { "gpushare" };
                *self.placements.entry(by.to_owned()).or_default() += 1;
            }
            Event::Refused(reason) => *self.refusals.entry(reason.to_owned()).or_default() += 1,
            Event::Daemon(MpsDaemon::Started) => self.daemon_starts += 1,
            Event::Daemon(MpsDaemon::Restarted(_)) => self.daemon_restarts += 1,
            Event::Daemon(MpsDaemon::Failed(_)) => self.daemon_failures += 1,
            Event::Daemon(_) => {}
            Event::Dropped(n) => self.records_dropped += n as u64,
        }
    }
}

/// Each share's use of its GPU, as the node timer last sampled it: a
/// family only where one share has its figure (none while no share runs,
/// nor where NVML gives none).
fn render_usage(out: &mut Exposition, usage: &[ShareUse]) {
    let memory: Vec<(&ShareUse, u64)> = usage
        .iter()
        .filter_map(|u| Some((u, u.memory_bytes?)))
        .collect();
    if !memory.is_empty() {
        let name = "gpushare_share_memory_used_bytes";
        out.family(
            name,
            "gauge",
            "Device memory the share's processes use on its GPU (NVML's figure per process, \
             each MPS client's context included), bytes, by job and GPU; sampled by the node \
             timer.",
        );
        for (u, bytes) in memory {
            let (job, gpu) = (u.job.to_string(), u.gpu.to_string());
            out.sample(name, &[("job", &job), ("gpu", &gpu)], bytes);
        }
    }
    // No SM figure per share: NVML charges MPS clients' work to their
    // server's pid, so none is measured (docs/monitoring.md).
}

/// The ended jobs' figures by QOS and size (`units`: the share's, or
/// `whole`): peak memory over what the job could use, mean SM use over
/// its part of the GPU. No job or user label: the same under PrivateData.
pub fn render_fit(fit: &Fit) -> String {
    let mut out = Exposition::default();
    type Pick = fn(&FitRow) -> &Histogram;
    let families: [(&str, &str, &[f64], Pick); 2] = [
        (
            "gpushare_share_memory_peak_ratio",
            "Peak device memory of each ended job's share (or GPU held whole) over its memory \
             limit (the GPU's memory), by QOS and size (units, or whole); sampled each minute \
             by the node timer.",
            &MEMORY_BOUNDS,
            |r| &r.memory,
        ),
        (
            "gpushare_share_sm_mean_ratio",
            "Mean SM use of each ended job holding a GPU whole, over the GPU, by QOS and size \
             (whole); none for shares, whose work NVML charges to their MPS server.",
            &SM_BOUNDS,
            |r| &r.sm,
        ),
    ];
    for (name, help, bounds, pick) in families {
        let rows: Vec<&FitRow> = fit.rows.iter().filter(|r| pick(r).count > 0).collect();
        if rows.is_empty() {
            continue;
        }
        out.family(name, "histogram", help);
        let bucket = format!("{name}_bucket");
        for row in rows {
            let h = pick(row);
            let labels = [("qos", row.qos.as_str()), ("units", row.size.as_str())];
            let les = bounds
                .iter()
                .map(|b| b.to_string())
                .chain(["+Inf".to_owned()]);
            for (le, n) in les.zip(h.cumulative(bounds)) {
                let [q, u] = labels;
                out.sample(&bucket, &[q, u, ("le", &le)], n);
            }
            out.sample_f64(&format!("{name}_sum"), &labels, h.sum);
            out.sample(&format!("{name}_count"), &labels, h.count);
        }
    }
    out.into_text()
}

/// A per-GPU gauge: its name, help and value of one row.
type Gauge<'a, T> = (&'a str, &'a str, &'a dyn Fn(&T) -> u64);

/// A gauge with one sample per row, labelled by the row's GPU.
fn gauge_per_gpu<T>(
    out: &mut Exposition,
    rows: &[T],
    gpu: impl Fn(&T) -> u32,
    name: &str,
    help: &str,
    value: &dyn Fn(&T) -> u64,
) {
    out.family(name, "gauge", help);
    for row in rows {
        out.sample(name, &[("gpu", &gpu(row).to_string())], value(row));
    }
}

/// The Prometheus text of `status` (with its MPS rows where gpushare runs
/// daemons) and `counters`: HELP and TYPE once per metric, its samples
/// together, a newline at the end.
pub fn render(status: &NodeStatus, counters: &Counters) -> String {
    render_for(status, counters, false, &[])
}

/// [`render`], without the user of each share where `hide_users`
/// (`PrivateData`): node_exporter shows the file to whoever scrapes it;
/// with each share's use of its GPU where the node timer sampled it
/// (`usage`, by job and GPU: never a user label).
pub fn render_for(
    status: &NodeStatus,
    counters: &Counters,
    hide_users: bool,
    usage: &[ShareUse],
) -> String {
    let mut out = Exposition::default();
    let gpus: Vec<&GpuView> = status.gpus.iter().filter(|g| g.configured).collect();
    let capacity = u64::from(status.units_per_gpu);
    let gpu_gauges: [Gauge<&GpuView>; 4] = [
        (
            "gpushare_gpu_units_capacity",
            "MPS units one GPU holds (UnitsPerGPU).",
            &|_| capacity,
        ),
        (
            "gpushare_gpu_units_allocated",
            "MPS units held by the shares on the GPU.",
            &|g| u64::from(g.used_units),
        ),
        ("gpushare_gpu_shares", "Share jobs on the GPU.", &|g| {
            g.shares.len() as u64
        }),
        (
            "gpushare_gpu_held_whole",
            "1 while a job holds the GPU whole.",
            &|g| u64::from(!g.whole_jobs.is_empty()),
        ),
    ];
    for (name, help, value) in gpu_gauges {
        gauge_per_gpu(&mut out, &gpus, |g| g.index, name, help, value);
    }
    out.family(
        "gpushare_share_units",
        "gauge",
        "MPS units of each share, by job, user (unless the node keeps it private) and GPU.",
    );
    for g in &gpus {
        for s in &g.shares {
            let job = s.job.to_string();
            let gpu = g.index.to_string();
            let labels: &[(&str, &str)] = if hide_users {
                &[("job", &job), ("gpu", &gpu)]
            } else {
                &[("job", &job), ("user", &s.user), ("gpu", &gpu)]
            };
            out.sample("gpushare_share_units", labels, u64::from(s.units));
        }
    }
    render_usage(&mut out, usage);
    if !status.mps.is_empty() {
        gauge_per_gpu(
            &mut out,
            &status.mps,
            |m| m.gpu,
            "gpushare_gpu_failed",
            "1 while the GPU is set aside from sharing (NVML reports it lost, or an admin or \
             health check drained it with gpu-mps drain-gpu): it takes no new share.",
            &|m| u64::from(m.failed.is_some()),
        );
    }
    let tested: Vec<_> = status.mps.iter().filter(|m| m.selftest.is_some()).collect();
    if !tested.is_empty() {
        gauge_per_gpu(
            &mut out,
            &tested,
            |m| m.gpu,
            "gpushare_mps_selftest_ok",
            "1 where the GPU's last MPS self-test (gpu-mps selftest, SelfTest=daemon-start) \
             passed, 0 where it failed (the GPU is then set aside); GPUs never tested have \
             no sample.",
            &|m| u64::from(m.selftest.as_ref().is_some_and(|t| t.passed)),
        );
    }
    let managed: Vec<_> = status
        .mps
        .iter()
        .filter(|m| m.daemon != DaemonState::Unmanaged)
        .collect();
    if !managed.is_empty() {
        let mps_gauges: [Gauge<&GpuMps>; 4] = [
            (
                "gpushare_gpu_mps_daemon_up",
                "1 while the GPU's MPS control daemon runs (its control pipe is there and, \
                 where root asked it, it answers).",
                &|m| {
                    u64::from(matches!(
                        m.daemon,
                        DaemonState::Running | DaemonState::PipePresent
                    ))
                },
            ),
            (
                "gpushare_gpu_mps_clients",
                "MPS clients on the GPU (each share's largest step's tasks).",
                &|m| u64::from(m.clients),
            ),
            (
                "gpushare_gpu_mps_users",
                "Users with shares on the GPU.",
                &|m| m.users.len() as u64,
            ),
            (
                "gpushare_gpu_mps_time_sliced",
                "1 while users share the GPU without a multi-user server (MPS serves one user \
                 at a time: one user's CUDA work waits until the other's clients have exited).",
                &|m| u64::from(m.time_sliced),
            ),
        ];
        for (name, help, value) in mps_gauges {
            gauge_per_gpu(&mut out, &managed, |m| m.gpu, name, help, value);
        }
    }
    out.family(
        "gpushare_ledger_lost",
        "gauge",
        "1 while the node's share ledger is lost: no share is placed until `gpu-mps gc`.",
    );
    out.sample(
        "gpushare_ledger_lost",
        &[],
        u64::from(status.lost.is_some()),
    );
    out.family(
        "gpushare_ledger_set_aside_files",
        "gauge",
        "Unreadable state files set aside, waiting for an admin.",
    );
    out.sample(
        "gpushare_ledger_set_aside_files",
        &[],
        status.set_aside_files.len() as u64,
    );
    out.family(
        "gpushare_placements_total",
        "counter",
        "Shares placed, by who chose the GPU.",
    );
    for by in ["gpushare", "slurm"] {
        let n = counters.placements.get(by).copied().unwrap_or(0);
        out.sample("gpushare_placements_total", &[("placed_by", by)], n);
    }
    out.family(
        "gpushare_refusals_total",
        "counter",
        "Shares refused by the prolog, by reason (`private`: a job's `--gpu-mps=private` refused; \
         `private_shared`: one given a GPU a share holds, requeued).",
    );
    let mut reasons: BTreeMap<&str, u64> = REFUSAL_REASONS.iter().map(|r| (*r, 0)).collect();
    for (reason, n) in &counters.refusals {
        reasons.insert(reason, *n);
    }
    for (reason, n) in reasons {
        out.sample("gpushare_refusals_total", &[("reason", reason)], n);
    }
    for (name, help, n) in [
        (
            "gpushare_mps_daemon_starts_total",
            "MPS control daemons started.",
            counters.daemon_starts,
        ),
        (
            "gpushare_mps_daemon_restarts_total",
            "MPS control daemons found dead or hung, killed and started anew.",
            counters.daemon_restarts,
        ),
        (
            "gpushare_mps_daemon_failures_total",
            "MPS control daemons that could not be started.",
            counters.daemon_failures,
        ),
        (
            "gpushare_records_dropped_total",
            "Ledger records of jobs no longer running, dropped by reconciliation.",
            counters.records_dropped,
        ),
    ] {
        out.family(name, "counter", help);
        out.sample(name, &[], n);
    }
    out.into_text()
}

#[cfg(test)]
mod tests {
    use super::super::ledger::{LedgerState, ShareRecord, WholeRecord};
    use super::super::placement::PlacementError;
    use super::super::status::GpuMps;
    use super::*;

    fn share(job: u32, user: &str, gpu: u32, units: u32) -> ShareRecord {
        ShareRecord {
            job,
            uid: 1000,
            user: user.into(),
            gpu,
            units,
            since: 0,
            placed_by_slurm: false,
            memory_mib: None,
            clients: Some(1),
            sluid: None,
        }
    }

    fn status() -> NodeStatus {
        let mut state = LedgerState::new();
        state.insert_share(share(7, "alice", 0, 25));
        state.insert_share(share(8, "bob\"x", 0, 50));
        state.insert_whole(WholeRecord {
            job: 9,
            gpus: vec![1],
            since: 0,
        });
        NodeStatus::of(&state, 2, 100, Vec::new())
    }

    /// What the node timer sampled of [`status`]'s shares: job 8's memory
    /// unknown, no utilisation for job 7's GPU... both on GPU 0 here.
    fn usage() -> Vec<ShareUse> {
        vec![
            ShareUse {
                job: 7,
                gpu: 0,
                memory_bytes: Some(150 << 20),
                sm_utilization: Some(0.8),
                whole: false,
            },
            ShareUse {
                job: 8,
                gpu: 0,
                memory_bytes: None,
                sm_utilization: Some(1.25),
                whole: false,
            },
        ]
    }

    /// One ended share's and one whole GPU's figures.
    fn fit() -> Fit {
        let mut fit = Fit::default();
        let mut t = crate::mps::usage::totals::Totals {
            job: 7,
            gpu: 0,
            units: Some(25),
            units_per_gpu: 100,
            limit_mib: Some(1000),
            peak_bytes: Some(300 << 20),
            sm_sum: 1.2,
            sm_samples: 2,
            samples: 2,
        };
        fit.observe(&t, "normal");
        t.units = None;
        fit.observe(&t, "");
        fit
    }

    /// Cumulative buckets by QOS and size, `+Inf` last, then the sum and
    /// count; nothing where no job ended.
    #[test]
    fn the_ended_jobs_histograms_are_cumulative_by_qos_and_size() {
        assert_eq!(render_fit(&Fit::default()), "");
        let text = render_fit(&fit());
        let peak = "gpushare_share_memory_peak_ratio";
        for (le, n) in [("0.25", 0), ("0.5", 1), ("1", 1), ("+Inf", 1)] {
            let line = format!("{peak}_bucket{{qos=\"normal\",units=\"25\",le=\"{le}\"}} {n}\n");
            assert!(text.contains(&line), "{line}{text}");
        }
        assert!(text.contains(&format!("{peak}_sum{{qos=\"normal\",units=\"25\"}} 0.3\n")));
        assert!(text
            .contains("gpushare_share_sm_mean_ratio_count{qos=\"unknown\",units=\"whole\"} 1\n"));
        assert_eq!(text.matches("# TYPE").count(), 2, "{text}");
    }

    fn value(text: &str, series: &str) -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn per_gpu_and_per_share_figures_follow_the_ledger() {
        let text = render(&status(), &Counters::default());
        assert_eq!(
            value(&text, "gpushare_gpu_units_allocated{gpu=\"0\"}"),
            Some(75)
        );
        assert_eq!(
            value(&text, "gpushare_gpu_units_allocated{gpu=\"1\"}"),
            Some(0)
        );
        assert_eq!(
            value(&text, "gpushare_gpu_units_capacity{gpu=\"1\"}"),
            Some(100)
        );
        assert_eq!(value(&text, "gpushare_gpu_shares{gpu=\"0\"}"), Some(2));
        assert_eq!(value(&text, "gpushare_gpu_held_whole{gpu=\"1\"}"), Some(1));
        assert_eq!(
            value(
                &text,
                "gpushare_share_units{job=\"8\",user=\"bob\\\"x\",gpu=\"0\"}"
            ),
            Some(50)
        );
        assert_eq!(value(&text, "gpushare_ledger_lost"), Some(0));
        // No daemon rows: no daemon series.
        assert!(!text.contains("gpushare_gpu_mps_daemon_up"));
        assert!(text.ends_with('\n'));
    }

    /// [`status`] with the rows of daemons gpushare runs, one failed GPU:
    /// every family the node writes.
    fn status_with_daemons() -> NodeStatus {
        let mut st = status();
        st.mps = (0..2)
            .map(|gpu| GpuMps {
                gpu,
                daemon: if gpu == 0 {
                    DaemonState::Running
                } else {
                    DaemonState::Stopped
                },
                daemon_pids: Vec::new(),
                servers: Vec::new(),
                multi_user: false,
                users: vec!["alice".into(), "bob".into()],
                time_sliced: gpu == 0,
                clients: 2,
                max_clients: 48,
                thread_percentage: None,
                memory_limit_mib: None,
                shares: Vec::new(),
                uuid: None,
                memory_mib: None,
                nvml_compute_processes: None,
                failed: (gpu == 1).then(|| "NVML reports it lost".to_owned()),
                selftest: Some(crate::mps::status::SelfTestView {
                    passed: gpu == 0,
                    at: 1_700_000_000,
                    why: String::new(),
                }),
            })
            .collect();
        st
    }

    /// docs/monitoring.md's table of the node's metrics is what the node
    /// writes: every family, its labels, every refusal reason.
    #[test]
    fn the_docs_table_of_the_node_metrics_is_what_the_node_writes() {
        let text = render_for(
            &status_with_daemons(),
            &Counters::default(),
            false,
            &usage(),
        ) + &render_fit(&fit());
        let table = crate::shared::prom::markdown_table(
            &text,
            &[
                (
                    "gpushare_placements_total",
                    "placed_by",
                    vec!["gpushare", "slurm"],
                ),
                (
                    "gpushare_refusals_total",
                    "reason",
                    REFUSAL_REASONS.to_vec(),
                ),
            ],
        );
        crate::shared::prom::assert_doc_table(
            include_str!("../../docs/monitoring.md"),
            "docs/monitoring.md",
            "node metrics",
            &table,
        );
    }

    /// Every refusal reason the docs and manual pages name (`reason
    /// \`mig\``, `(reason mig in the metrics)`) is one the node counts.
    #[test]
    fn the_refusal_reasons_the_docs_name_are_the_nodes() {
        let man = crate::shared::doc_keys::man_text(include_str!("../../docs/man/gpu_mps.conf.5"));
        let docs = [
            ("docs/man/gpu_mps.conf.5", man.as_str()),
            (
                "docs/configuration.md",
                include_str!("../../docs/configuration.md"),
            ),
            ("docs/mps.md", include_str!("../../docs/mps.md")),
            (
                "docs/operations.md",
                include_str!("../../docs/operations.md"),
            ),
            (
                "docs/coexistence.md",
                include_str!("../../docs/coexistence.md"),
            ),
            (
                "docs/troubleshooting.md",
                include_str!("../../docs/troubleshooting.md"),
            ),
            (
                "docs/users-guide.md",
                include_str!("../../docs/users-guide.md"),
            ),
        ];
        let mut named = 0;
        for (name, text) in docs {
            for (_, after) in text
                .match_indices("reason ")
                .map(|(i, _)| text.split_at(i + 7))
            {
                let word = match after.strip_prefix('`') {
                    Some(quoted) => quoted.split('`').next().unwrap_or(""),
                    // The manual page's `(reason mig in the metrics)`.
                    None if after.contains(" in the metrics") => {
                        let (word, rest) = after.split_once(' ').unwrap_or((after, ""));
                        if !rest.starts_with("in the metrics") {
                            continue;
                        }
                        word
                    }
                    None => continue,
                };
                // Slurm's words (a node's `Prolog error`) are not gpushare's.
                if word.is_empty() || !word.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                    continue;
                }
                named += 1;
                assert!(
                    REFUSAL_REASONS.contains(&word),
                    "{name} names refusal reason `{word}`, which the node never counts \
                     (REFUSAL_REASONS: {REFUSAL_REASONS:?})"
                );
            }
        }
        assert!(
            named >= 8,
            "only {named} reasons found: the test reads nothing"
        );
    }

    #[test]
    fn each_metric_has_help_and_type_once_before_all_its_samples() {
        let text = render(&status_with_daemons(), &Counters::default());
        assert_eq!(value(&text, "gpushare_gpu_failed{gpu=\"1\"}"), Some(1));
        assert_eq!(value(&text, "gpushare_gpu_failed{gpu=\"0\"}"), Some(0));
        assert_eq!(
            value(&text, "gpushare_gpu_mps_daemon_up{gpu=\"0\"}"),
            Some(1)
        );
        assert_eq!(
            value(&text, "gpushare_gpu_mps_daemon_up{gpu=\"1\"}"),
            Some(0)
        );
        assert_eq!(
            value(&text, "gpushare_gpu_mps_time_sliced{gpu=\"0\"}"),
            Some(1)
        );
        let mut seen: Vec<&str> = Vec::new();
        let mut current = "";
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap_or("");
                assert!(!seen.contains(&name), "{name} twice");
                seen.push(name);
                current = name;
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap_or("");
                assert_eq!(name, current, "{line} outside its family");
            }
        }
    }

    #[test]
    fn counters_count_and_every_refusal_reason_is_exported() {
        let mut c = Counters::default();
        c.count(Event::Placed { by_slurm: false });
        c.count(Event::Placed { by_slurm: true });
        c.count(Event::Placed { by_slurm: true });
        c.count(Event::Refused("no_room"));
        c.count(Event::Daemon(&MpsDaemon::Restarted("hung".into())));
        c.count(Event::Daemon(&MpsDaemon::Running));
        c.count(Event::Dropped(3));
        let text = render(&status(), &c);
        assert_eq!(
            value(&text, "gpushare_placements_total{placed_by=\"slurm\"}"),
            Some(2)
        );
        assert_eq!(
            value(&text, "gpushare_refusals_total{reason=\"no_room\"}"),
            Some(1)
        );
        assert_eq!(
            value(&text, "gpushare_refusals_total{reason=\"cgroup_v2\"}"),
            Some(0)
        );
        assert_eq!(value(&text, "gpushare_mps_daemon_restarts_total"), Some(1));
        assert_eq!(value(&text, "gpushare_mps_daemon_starts_total"), Some(0));
        assert_eq!(value(&text, "gpushare_records_dropped_total"), Some(3));
        // Every reason a placement can fail for is among those exported.
        let errors = [
            PlacementError::ZeroUnits,
            PlacementError::NoGpus,
            PlacementError::LoadsUnknown { reason: "x".into() },
            PlacementError::SlurmGpuUnknown {
                gpu: 1,
                gpu_count: 1,
            },
            PlacementError::TooManyClients { max_clients: 1 },
            PlacementError::OnlyBesideOtherUsers { units: 1 },
        ];
        for e in errors {
            assert!(REFUSAL_REASONS.contains(&e.reason()), "{}", e.reason());
        }
    }

    #[test]
    fn counters_survive_writing_and_an_unreadable_file_counts_from_zero() {
        let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut c = Counters::default();
        c.count(Event::Dropped(2));
        c.write(temp.path()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(Counters::read(temp.path()), (c, None));
        fs::write(temp.path().join(COUNTERS_FILE), "{not json").unwrap_or_else(|e| panic!("{e}"));
        let (back, note) = Counters::read(temp.path());
        assert_eq!(back, Counters::default());
        assert!(note.is_some_and(|n| n.contains("counting from 0")));
    }

    #[test]
    fn a_private_node_names_no_user() {
        let shown = render_for(&status(), &Counters::default(), false, &usage());
        let hidden = render_for(&status(), &Counters::default(), true, &usage());
        assert!(shown.contains("user=\"alice\""), "{shown}");
        assert!(
            !hidden.contains("alice") && !hidden.contains("user="),
            "{hidden}"
        );
        assert_eq!(
            shown.matches("gpushare_share_units{").count(),
            hidden.matches("gpushare_share_units{").count()
        );
        // The use of each share is by job and GPU alone, either way.
        for text in [&shown, &hidden] {
            assert!(text.contains("gpushare_share_memory_used_bytes{job=\"7\",gpu=\"0\"} "));
        }
    }

    /// Each share's use where the node timer has it: memory in bytes; a
    /// figure it does not have is absent, never 0; no SM use, whatever a
    /// figure says (none is measured per share under MPS); and without
    /// any figure (no share, no NVML) there is no family at all.
    #[test]
    fn share_use_is_written_where_sampled_and_absent_otherwise() {
        let text = render_for(&status(), &Counters::default(), false, &usage());
        assert_eq!(
            value(
                &text,
                "gpushare_share_memory_used_bytes{job=\"7\",gpu=\"0\"}"
            ),
            Some(150 << 20)
        );
        assert!(!text.contains("gpushare_share_memory_used_bytes{job=\"8\""));
        assert!(!text.contains("gpushare_share_sm_utilization"));
        let none = render(&status(), &Counters::default());
        assert!(!none.contains("gpushare_share_memory") && !none.contains("sm_utilization"));
        let no_sm: Vec<ShareUse> = usage()
            .into_iter()
            .map(|u| ShareUse {
                sm_utilization: None,
                ..u
            })
            .collect();
        let text = render_for(&status(), &Counters::default(), false, &no_sm);
        assert!(text.contains("gpushare_share_memory_used_bytes{"));
        assert!(!text.contains("gpushare_share_sm_utilization"));
    }
}
