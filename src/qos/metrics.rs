//! The controller's metrics: each group QOS's GPUs in use by type against
//! its limit and its pending jobs by reason (`gpu-qos metrics`), and the
//! decisions of `job_submit/gpu_qos` (written by the plugin itself).
//!
//! `gpu-qos metrics` asks slurmctld twice, whatever the size of the site:
//! `scontrol -o show assoc_mgr flags=qos` (every QOS's `GrpTRES` limits
//! with their usage, from slurmctld's own accounting cache) and `squeue`
//! for the pending jobs' QOS and reason ([`super::slurm::jobs::pending`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use super::config;
use super::gres::settled_reason;
use super::policy::{RejectionKind, Verdict};
use super::slurm::assoc_mgr::{AccountGpus, QosGpus};
use super::slurm::jobs::Job;
use crate::shared::prom::{Exposition, TEXTFILE_DIRS};

/// The name `gpu-qos metrics --write` gives its file beside the plugin's.
pub const QOS_FILE_NAME: &str = "gpushare_qos.prom";

/// Why `gpu-qos metrics --write` without a FILE writes nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoQosFile {
    /// gpu_qos.conf names no directory, or one that is not there:
    /// node_exporter's textfile collector is not set up here (yet).
    NotSetUp(String),
    /// The plugin's own file has the name of this one.
    Clash(String),
}

/// Where `gpu-qos metrics --write` without a FILE (the timer's) writes:
/// [`QOS_FILE_NAME`] beside `MetricsFile=` of the gpu_qos.conf at `conf`,
/// so that node_exporter's textfile directory is named in one place on
/// the controller, for the plugin and the timer alike. `text` is the
/// file's text or why it could not be read; its `MetricsFile=` line is
/// taken where the file is otherwise invalid, as the plugin does.
/// `is_dir` tells whether a directory exists.
pub fn qos_file_beside(
    conf: &Path,
    text: Result<&str, &str>,
    is_dir: impl Fn(&Path) -> bool,
) -> Result<PathBuf, NoQosFile> {
    let nothing = "nothing written";
    let plugin = match text {
        Err(e) => {
            return Err(NoQosFile::NotSetUp(format!(
                "{}: {e}: its MetricsFile= says where the QOS metrics go (beside it, as \
                 {QOS_FILE_NAME}); {nothing}",
                conf.display()
            )))
        }
        Ok(text) => config::metrics_file_in(text),
    };
    let Some(plugin) = plugin else {
        return Err(NoQosFile::NotSetUp(format!(
            "{} has no valid MetricsFile= line: the QOS metrics go beside the plugin's \
             metrics file, in node_exporter's --collector.textfile.directory ({TEXTFILE_DIRS}); \
             {nothing}",
            conf.display()
        )));
    };
    let dir = plugin.parent().unwrap_or(Path::new("/"));
    let ours = dir.join(QOS_FILE_NAME);
    if ours == plugin {
        return Err(NoQosFile::Clash(format!(
            "MetricsFile= in {} names {}, the file gpu-qos metrics writes beside it: give \
             the plugin's file another name (gpushare_job_submit.prom); {nothing}",
            conf.display(),
            plugin.display()
        )));
    }
    if !is_dir(dir) {
        return Err(NoQosFile::NotSetUp(format!(
            "{} (the directory of MetricsFile= in {}) does not exist: node_exporter's \
             textfile collector is not set up on this host, or MetricsFile= names another \
             directory than its --collector.textfile.directory ({TEXTFILE_DIRS}); {nothing}",
            dir.display(),
            conf.display()
        )));
    }
    Ok(ours)
}

/// The Prometheus text of the accounts' typed GPU limits.
pub fn render_accounts(gpus: &[AccountGpus]) -> String {
    let mut out = Exposition::default();
    let shown: Vec<&AccountGpus> = gpus.iter().filter(|g| g.limit.is_some()).collect();
    if shown.is_empty() {
        return String::new();
    }
    out.family(
        "gpushare_account_gpus_in_use",
        "gauge",
        "GPUs of a type held by the jobs of an account and its sub-accounts (its GrpTRES usage).",
    );
    for g in &shown {
        out.sample(
            "gpushare_account_gpus_in_use",
            &[("account", &g.account), ("gpu_type", &g.gpu_type)],
            g.in_use,
        );
    }
    out.family(
        "gpushare_account_gpus_limit",
        "gauge",
        "The account's GrpTRES limit for a GPU type.",
    );
    for g in &shown {
        if let Some(limit) = g.limit {
            out.sample(
                "gpushare_account_gpus_limit",
                &[("account", &g.account), ("gpu_type", &g.gpu_type)],
                limit,
            );
        }
    }
    out.into_text()
}

/// Pending jobs by (QOS, reason), from [`super::slurm::jobs::pending`];
/// `gpus` (the QOS's typed limits and use) settle a reason Slurm has
/// cleared for a moment ([`settled_reason`]), so the figure and the
/// alerts on it do not flicker with Slurm's scheduling passes.
pub fn pending_by_reason(jobs: &[Job], gpus: &[QosGpus]) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    for job in jobs.iter().filter(|j| !j.qos.is_empty()) {
        let fits = |gpu_type: &str, n: u64| {
            gpus.iter()
                .filter(|g| g.qos.eq_ignore_ascii_case(&job.qos) && g.gpu_type == gpu_type)
                .all(|g| g.limit.is_none_or(|l| g.in_use + n <= l))
        };
        let reason = settled_reason(&job.reason, &job.gpus, fits);
        *out.entry((job.qos.clone(), reason.to_owned())).or_default() += 1;
    }
    out
}

/// The Prometheus text of the group QOS: GPUs in use by type for every QOS
/// that holds or limits a type, limits where there is one, pending jobs by
/// reason for those QOS, and which QOS are low priority (gpu_qos.conf).
pub fn render_qos(
    gpus: &[QosGpus],
    pending: &BTreeMap<(String, String), u64>,
    low_priority: &[String],
) -> String {
    let mut out = Exposition::default();
    let shown: Vec<&QosGpus> = gpus
        .iter()
        .filter(|g| g.limit.is_some() || g.in_use > 0)
        .collect();
    out.family(
        "gpushare_qos_gpus_in_use",
        "gauge",
        "GPUs of a type held by the QOS's running jobs (Slurm's GrpTRES usage).",
    );
    for g in &shown {
        out.sample(
            "gpushare_qos_gpus_in_use",
            &[("qos", &g.qos), ("gpu_type", &g.gpu_type)],
            g.in_use,
        );
    }
    out.family(
        "gpushare_qos_gpus_limit",
        "gauge",
        "The QOS's GrpTRES limit for a GPU type.",
    );
    for g in &shown {
        if let Some(limit) = g.limit {
            out.sample(
                "gpushare_qos_gpus_limit",
                &[("qos", &g.qos), ("gpu_type", &g.gpu_type)],
                limit,
            );
        }
    }
    out.family(
        "gpushare_qos_jobs_pending",
        "gauge",
        "Pending jobs of the QOS, by Slurm's reason code (None settled: QOSGrpGRES where the job does not fit its group's limit).",
    );
    for ((qos, reason), n) in pending {
        if shown.iter().any(|g| &g.qos == qos) {
            out.sample(
                "gpushare_qos_jobs_pending",
                &[("qos", qos), ("reason", reason)],
                *n,
            );
        }
    }
    out.family(
        "gpushare_qos_low_priority",
        "gauge",
        "1 for each LowPriorityQOS of gpu_qos.conf (preemptable by the group QOS).",
    );
    for qos in low_priority {
        out.sample("gpushare_qos_low_priority", &[("qos", qos)], 1);
    }
    out.into_text()
}

/// Which call a decision answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Submit,
    Modify,
}

const KINDS: [RejectionKind; 11] = RejectionKind::ALL;

/// The plugin's heartbeat series: when it last wrote its file.
pub const HEARTBEAT: &str = "gpushare_job_submit_heartbeat_timestamp_seconds";

/// [`HEARTBEAT`] at `now` (seconds since the epoch), labelled with the
/// `ClusterName` of slurm.conf: every slurmctld loads the plugin at its
/// start, a backup standing by as well as the one in control, and each
/// writes its own file on its own host, at least once a minute while it
/// runs. The freshest of a cluster's heartbeats (`max by (slurm_cluster)`)
/// says whether the plugin runs on any of its controllers: a controller
/// gone (failed over, or a standby of an active/passive pair left with
/// the file of its last run) is no alert while another writes. The label
/// is `slurm_cluster`, not `cluster`: a scrape's own `cluster` target
/// label must not rename it.
pub fn render_heartbeat(cluster: &str, now: u64) -> String {
    let mut out = Exposition::default();
    out.family(
        HEARTBEAT,
        "gauge",
        "When job_submit/gpu_qos last wrote this file (seconds since the epoch): at least \
         once a minute while slurmctld runs with the plugin loaded, in control or standing \
         by as a backup; by the ClusterName of slurm.conf.",
    );
    out.sample(HEARTBEAT, &[("slurm_cluster", cluster)], now);
    out.into_text()
}

const SLOTS: usize = 2 * (1 + KINDS.len());

/// The most distinct QOS labels the warnings keep; others count under
/// `other`. The QOS comes from the job as submitted (a warning under a
/// partition rule may carry any `--qos` a user types), and each label is
/// a series Prometheus keeps.
pub const MAX_WARNING_QOS: usize = 200;

/// Counts by a key and the job's QOS label.
type ByQos<K> = BTreeMap<(K, String), u64>;

/// One more under `key` and the job's QOS (lower-cased, `none` where
/// unknown; `other` once [`MAX_WARNING_QOS`] series are kept and this
/// one is new).
fn count_by_qos<K: Ord>(counts: &Mutex<ByQos<K>>, key: K, qos: &str) {
    let mut counts = counts.lock().unwrap_or_else(PoisonError::into_inner);
    let mut key = (
        key,
        match qos {
            "" => "none".to_owned(),
            q => q.to_ascii_lowercase(),
        },
    );
    if !counts.contains_key(&key) && counts.len() >= MAX_WARNING_QOS {
        key.1 = "other".to_owned();
    }
    *counts.entry(key).or_default() += 1;
}

/// The plugin's decision counters: lock-free, so counting costs a
/// submission one atomic add; written out by the plugin's own thread.
/// Warnings (`Enforce=warn`), by reason and QOS, take a short lock: only
/// a job warned of pays it.
#[derive(Debug)]
pub struct DecisionCounts {
    counts: [AtomicU64; SLOTS],
    /// (reason, lower-cased QOS) → warnings.
    warnings: Mutex<ByQos<&'static str>>,
    /// ((reason, rule), lower-cased QOS) → refusals not made for exempt
    /// requesters.
    exemptions: Mutex<ByQos<(&'static str, &'static str)>>,
    /// (GPU type, lower-cased QOS) → new jobs whose untyped GPU request
    /// was given that type (`DefaultGPUType=`).
    types_given: Mutex<ByQos<String>>,
    /// Whether the policy in force is what gpu_qos.conf says now.
    config_ok: AtomicBool,
    /// Whether no version of gpu_qos.conf has been read since slurmctld
    /// loaded the plugin (the policy without its file is in force).
    without_file: AtomicBool,
}

impl Default for DecisionCounts {
    fn default() -> Self {
        Self::new()
    }
}

impl DecisionCounts {
    pub const fn new() -> Self {
        Self {
            counts: [const { AtomicU64::new(0) }; SLOTS],
            warnings: Mutex::new(BTreeMap::new()),
            exemptions: Mutex::new(BTreeMap::new()),
            types_given: Mutex::new(BTreeMap::new()),
            config_ok: AtomicBool::new(true),
            without_file: AtomicBool::new(false),
        }
    }

    /// What the plugin reads of gpu_qos.conf: `ok` when the policy in
    /// force is the file as it is now; `without_file` while no version
    /// of it has been read since load.
    pub fn set_config_state(&self, ok: bool, without_file: bool) {
        self.config_ok.store(ok, Ordering::Relaxed);
        self.without_file.store(without_file, Ordering::Relaxed);
    }

    /// A figure that changes whenever what [`Self::render`] prints does:
    /// every decision, and the state of the file.
    pub fn generation(&self) -> u64 {
        let (ok, without_file) = self.config_state();
        self.total()
            .wrapping_mul(4)
            .wrapping_add(u64::from(ok) * 2 + u64::from(without_file))
    }

    /// `(ok, without_file)` as last set.
    pub fn config_state(&self) -> (bool, bool) {
        (
            self.config_ok.load(Ordering::Relaxed),
            self.without_file.load(Ordering::Relaxed),
        )
    }

    fn slot(call: Call, rejected: Option<RejectionKind>) -> usize {
        let base = match call {
            Call::Submit => 0,
            Call::Modify => 1 + KINDS.len(),
        };
        base + rejected.map_or(0, |k| 1 + KINDS.iter().position(|&x| x == k).unwrap_or(0))
    }

    pub fn record(&self, call: Call, verdict: &Verdict) {
        let rejected = match verdict {
            Verdict::Accept(changes) => {
                if let Some(e) = &changes.exemption {
                    count_by_qos(&self.exemptions, (e.reason.label(), e.kind.label()), &e.qos);
                }
                if let Some(given) = &changes.gpu_type_given {
                    let ty = given.gpu_type.to_ascii_lowercase();
                    count_by_qos(&self.types_given, ty, &given.qos);
                }
                for w in &changes.warnings {
                    count_by_qos(&self.warnings, w.reason.label(), &w.qos);
                }
                None
            }
            Verdict::Reject(r) => Some(r.kind),
        };
        if let Some(c) = self.counts.get(Self::slot(call, rejected)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Every decision so far (a change is seen by comparing two of these).
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// `gpushare_job_submit_decisions_total{call,decision,rule}`, every
    /// combination from zero.
    pub fn render(&self) -> String {
        let name = "gpushare_job_submit_decisions_total";
        let mut out = Exposition::default();
        out.family(
            name,
            "counter",
            "Decisions of job_submit/gpu_qos since slurmctld loaded it, by call, decision \
             and the rule that refused.",
        );
        for (call, label) in [(Call::Submit, "submit"), (Call::Modify, "modify")] {
            let n = |k| self.counts[Self::slot(call, k)].load(Ordering::Relaxed);
            out.sample(
                name,
                &[("call", label), ("decision", "accept"), ("rule", "none")],
                n(None),
            );
            for kind in KINDS {
                out.sample(
                    name,
                    &[
                        ("call", label),
                        ("decision", "reject"),
                        ("rule", kind.label()),
                    ],
                    n(Some(kind)),
                );
            }
        }
        let warnings = "gpushare_policy_warnings_total";
        out.family(
            warnings,
            "counter",
            "Refusals not made and changes not applied because gpu_qos.conf says \
             Enforce=warn, since slurmctld loaded the plugin, by reason and the job's QOS.",
        );
        let counted = self.warnings.lock().unwrap_or_else(PoisonError::into_inner);
        for ((reason, qos), n) in counted.iter() {
            out.sample(warnings, &[("reason", reason), ("qos", qos)], *n);
        }
        drop(counted);
        let exemptions = "gpushare_policy_exemptions_total";
        out.family(
            exemptions,
            "counter",
            "Refusals not made because the requester is exempt (ExemptUsers=, or \
             ExemptAdmins= for an operator's update of another user's job), since slurmctld \
             loaded the plugin, by reason, the rule that would have refused and the job's QOS.",
        );
        let counted = self
            .exemptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (((reason, rule), qos), n) in counted.iter() {
            out.sample(
                exemptions,
                &[("reason", reason), ("rule", rule), ("qos", qos)],
                *n,
            );
        }
        drop(counted);
        let given = "gpushare_policy_gpu_types_given_total";
        out.family(
            given,
            "counter",
            "New jobs whose GPU request without a type was given its rule's DefaultGPUType= \
             instead of being refused, since slurmctld loaded the plugin, by the type and the \
             job's QOS.",
        );
        let counted = self
            .types_given
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for ((ty, qos), n) in counted.iter() {
            out.sample(given, &[("type", ty), ("qos", qos)], *n);
        }
        drop(counted);
        let (ok, without_file) = self.config_state();
        out.family(
            "gpushare_policy_config_ok",
            "gauge",
            "1 when the policy in force is gpu_qos.conf as it is now; 0 when the file is \
             missing or invalid (the last good version, its copy in StateSaveLocation at a \
             start, or the policy without its file, is in force).",
        );
        out.sample("gpushare_policy_config_ok", &[], u64::from(ok));
        out.family(
            "gpushare_policy_without_file",
            "gauge",
            "1 while no version of gpu_qos.conf has been read since slurmctld loaded the \
             plugin and no last good copy could stand in: only untyped GPU requests under \
             typed limits of the accounting database are refused.",
        );
        out.sample("gpushare_policy_without_file", &[], u64::from(without_file));
        out.into_text()
    }
}

#[cfg(test)]
mod tests {
    use super::super::policy::{JobChanges, Rejection, WarningReason};
    use super::*;
    use crate::qos::slurm::assoc_mgr::{parse_assoc_mgr_accounts, parse_assoc_mgr_qos};

    /// As `scontrol -o show assoc_mgr flags=qos` prints two QOS (24.11).
    const ASSOC_MGR: &str = "QOS=normal(1) UsageRaw=0.000000 GrpJobs=N(0) GrpJobsAccrue=N(0) GrpSubmitJobs=N(0) GrpWall=N(0.00) GrpTRES=cpu=N(0),mem=N(0),energy=N(0),node=N(0),billing=N(0),fs/disk=N(0),vmem=N(0),pages=N(0),gres/gpu=N(0),gres/gpu:a40=N(0),gres/gpu:h100=N(0) GrpTRESMins=cpu=N(0)
QOS=qos_lafferty(3) UsageRaw=120.000000 GrpJobs=N(2) GrpJobsAccrue=N(0) GrpSubmitJobs=N(3) GrpWall=N(2.00) GrpTRES=cpu=N(2),mem=N(200),gres/gpu=N(2),gres/gpu:a40=4(2),gres/gpu:h100=N(0) GrpTRESMins=cpu=N(4),gres/gpu:a40=N(7) MaxTRESPJ=gres/gpu:a40=2
QOS=lowprio(4) GrpTRES=cpu=N(8),gres/gpu=N(3),gres/gpu:a40=N(3),gres/gpu:h100=N(0)";

    /// As `scontrol -o show assoc_mgr flags=assoc accounts=lafferty` prints
    /// an account, a sub-account and a user's association (22.05), trimmed.
    const ASSOC_MGR_ACCOUNTS: &str = "Current Association Manager state
Association Records
ClusterName=gpushare Account=lafferty UserName= Partition= Priority=0 ID=5 SharesRaw/Norm/Level/Factor=1/0.33/3/0.00 ParentAccount=root(1) Lft=2 DefAssoc=No GrpJobs=N(1) GrpTRES=cpu=N(1),mem=N(0),node=N(1),billing=N(1),gres/gpu=N(2),gres/gpu:a40=4(2) GrpTRESMins=cpu=N(0),gres/gpu:a40=N(0) MaxJobs= MaxTRESPJ= MinPrioThresh=
ClusterName=gpushare Account=lafferty_students UserName= Partition= Priority=0 ID=6 ParentAccount=lafferty(5) GrpTRES=cpu=N(1),gres/gpu=N(2),gres/gpu:a40=N(2) MinPrioThresh=
ClusterName=gpushare Account=lafferty_students UserName=root(0) Partition= Priority=0 ID=7 ParentAccount= GrpTRES=cpu=N(1),gres/gpu=N(2),gres/gpu:a40=2(2) MinPrioThresh=";

    #[test]
    fn assoc_mgr_gives_each_accounts_typed_limits_and_usage_not_users() {
        let gpus = parse_assoc_mgr_accounts(ASSOC_MGR_ACCOUNTS);
        assert_eq!(
            gpus,
            [
                AccountGpus {
                    account: "lafferty".into(),
                    gpu_type: "a40".into(),
                    limit: Some(4),
                    in_use: 2
                },
                AccountGpus {
                    account: "lafferty_students".into(),
                    gpu_type: "a40".into(),
                    limit: None,
                    in_use: 2
                },
            ]
        );
        let text = render_accounts(&gpus);
        assert!(text
            .contains("gpushare_account_gpus_in_use{account=\"lafferty\",gpu_type=\"a40\"} 2\n"));
        assert!(
            text.contains("gpushare_account_gpus_limit{account=\"lafferty\",gpu_type=\"a40\"} 4\n")
        );
        assert!(!text.contains("lafferty_students"), "no limit, no series");
        assert!(!text.contains("root"), "users are not named");
        assert_eq!(render_accounts(&[]), "");
    }

    #[test]
    fn assoc_mgr_gives_each_qos_typed_limits_and_usage() {
        let gpus = parse_assoc_mgr_qos(ASSOC_MGR);
        let lafferty: Vec<_> = gpus.iter().filter(|g| g.qos == "qos_lafferty").collect();
        assert_eq!(lafferty.len(), 2, "{gpus:?}");
        assert_eq!(
            *lafferty[0],
            QosGpus {
                qos: "qos_lafferty".into(),
                gpu_type: "a40".into(),
                limit: Some(4),
                in_use: 2,
            }
        );
        // GrpTRESMins and MaxTRESPJ are not GrpTRES.
        assert!(gpus.iter().all(|g| g.in_use != 7));
        let (jobs, _) = crate::qos::slurm::jobs::parse(
            "1|a|x|PD|qos_lafferty|gpu|1||QOSGrpGRES||||||0|\n\
             2|a|x|PD|qos_lafferty|gpu|1||QOSGrpGRES||||||0|\n\
             3|b|x|PD|lowprio|gpu|1||Priority||||||0|\n\
             4|c|x|PD|normal|gpu|1||Resources||||||0|\n\
             5|a|x|PD|qos_lafferty|gpu|1|cpu=1,gres/gpu:a40=3|None||||||0|\n\
             6|a|x|PD|qos_lafferty|gpu|1|cpu=1,gres/gpu:a40=2|None||||||0|\n",
        );
        // Slurm clears a reason for a moment in each pass: job 5 does not
        // fit what its group has left (2 of 4 a40), job 6 does.
        let pending = pending_by_reason(&jobs, &gpus);
        let text = render_qos(&gpus, &pending, &["lowprio".to_owned()]);
        for line in [
            "gpushare_qos_gpus_in_use{qos=\"qos_lafferty\",gpu_type=\"a40\"} 2",
            "gpushare_qos_gpus_limit{qos=\"qos_lafferty\",gpu_type=\"a40\"} 4",
            "gpushare_qos_gpus_in_use{qos=\"lowprio\",gpu_type=\"a40\"} 3",
            "gpushare_qos_jobs_pending{qos=\"qos_lafferty\",reason=\"QOSGrpGRES\"} 3",
            "gpushare_qos_jobs_pending{qos=\"qos_lafferty\",reason=\"None\"} 1",
            "gpushare_qos_jobs_pending{qos=\"lowprio\",reason=\"Priority\"} 1",
            "gpushare_qos_low_priority{qos=\"lowprio\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        // Nothing for a QOS that neither limits nor holds a type.
        assert!(!text.contains("qos=\"normal\""), "{text}");
        assert!(!text.contains("h100"), "{text}");
    }

    #[test]
    fn warnings_are_counted_by_reason_and_qos_beside_the_decisions() {
        use super::super::policy::{LowPriorityChange, PolicyWarning};
        let counts = DecisionCounts::new();
        let warned = |reason, qos: &str| {
            Verdict::Accept(JobChanges {
                warnings: vec![PolicyWarning {
                    reason,
                    qos: qos.to_owned(),
                    message: String::new(),
                }],
                ..JobChanges::default()
            })
        };
        let untyped = WarningReason::Refusal(RejectionKind::UntypedGpu);
        counts.record(Call::Submit, &warned(untyped, "qos_warn"));
        counts.record(Call::Submit, &warned(untyped, "QOS_Warn"));
        counts.record(Call::Modify, &warned(untyped, ""));
        let requeue = WarningReason::LowPriority(LowPriorityChange::Requeue);
        counts.record(Call::Submit, &warned(requeue, "lowprio"));
        let text = counts.render();
        for line in [
            "gpushare_policy_warnings_total{reason=\"untyped_gpu\",qos=\"qos_warn\"} 2",
            "gpushare_policy_warnings_total{reason=\"untyped_gpu\",qos=\"none\"} 1",
            "gpushare_policy_warnings_total{reason=\"low_priority_requeue\",qos=\"lowprio\"} 1",
            // A warned job is an accepted one.
            "gpushare_job_submit_decisions_total{call=\"submit\",decision=\"accept\",rule=\"none\"} 3",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        // Any QOS a user types is a label only up to the bound.
        for i in 0..MAX_WARNING_QOS + 10 {
            counts.record(Call::Submit, &warned(untyped, &format!("q{i}")));
        }
        let text = counts.render();
        let series = text
            .lines()
            .filter(|l| l.starts_with("gpushare_policy_warnings_total{"))
            .count();
        assert!(series <= MAX_WARNING_QOS + 1, "{series}");
        assert!(
            text.contains("reason=\"untyped_gpu\",qos=\"other\"}"),
            "{text}"
        );
    }

    #[test]
    fn exemptions_are_counted_by_reason_rule_and_qos_and_the_file_state_shown() {
        use super::super::policy::{ExemptReason, Exemption};
        let counts = DecisionCounts::new();
        let exempt = |reason, qos: &str| {
            Verdict::Accept(JobChanges {
                exemption: Some(Exemption {
                    reason,
                    kind: RejectionKind::UntypedGpu,
                    message: String::new(),
                    qos: qos.to_owned(),
                }),
                ..JobChanges::default()
            })
        };
        counts.record(Call::Submit, &exempt(ExemptReason::User, "QOS_Lafferty"));
        counts.record(Call::Modify, &exempt(ExemptReason::User, "qos_lafferty"));
        counts.record(Call::Modify, &exempt(ExemptReason::Admin, ""));
        let text = counts.render();
        for line in [
            "gpushare_policy_exemptions_total{reason=\"exempt_user\",rule=\"untyped_gpu\",qos=\"qos_lafferty\"} 2",
            "gpushare_policy_exemptions_total{reason=\"admin_update\",rule=\"untyped_gpu\",qos=\"none\"} 1",
            // An exempted job is an accepted one.
            "gpushare_job_submit_decisions_total{call=\"modify\",decision=\"accept\",rule=\"none\"} 2",
            "gpushare_policy_config_ok 1",
            "gpushare_policy_without_file 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        counts.set_config_state(false, true);
        let text = counts.render();
        assert!(
            text.lines().any(|l| l == "gpushare_policy_config_ok 0"),
            "{text}"
        );
        assert!(
            text.lines().any(|l| l == "gpushare_policy_without_file 1"),
            "{text}"
        );
    }

    #[test]
    fn the_heartbeat_names_its_cluster_and_the_time_of_the_write() {
        let text = render_heartbeat("prod \"a\"", 1_700_000_123);
        let line = "gpushare_job_submit_heartbeat_timestamp_seconds{slurm_cluster=\"prod \\\"a\\\"\"} 1700000123";
        assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        assert!(text.contains("# TYPE gpushare_job_submit_heartbeat_timestamp_seconds gauge"));
    }

    /// docs/monitoring.md's tables of the controller's metrics are what
    /// `gpu-qos metrics` and the plugin write: every family, its labels,
    /// every rule and reason.
    #[test]
    fn the_docs_tables_of_the_controller_metrics_are_what_is_written() {
        use super::super::policy::{
            ExemptReason, Exemption, JobChanges, LowPriorityChange, PolicyWarning, TypeGiven,
        };
        let doc = include_str!("../../docs/monitoring.md");
        let mut text = render_qos(
            &parse_assoc_mgr_qos(ASSOC_MGR),
            &BTreeMap::from([(("qos_lafferty".into(), "QOSGrpGRES".into()), 1)]),
            &["lowprio".to_owned()],
        );
        text.push_str(&render_accounts(&parse_assoc_mgr_accounts(
            ASSOC_MGR_ACCOUNTS,
        )));
        let table = crate::shared::prom::markdown_table(&text, &[]);
        crate::shared::prom::assert_doc_table(doc, "docs/monitoring.md", "QOS metrics", &table);

        let counts = DecisionCounts::new();
        let warned = |reason| {
            Verdict::Accept(JobChanges {
                warnings: vec![PolicyWarning {
                    reason,
                    qos: "q".into(),
                    message: String::new(),
                }],
                ..JobChanges::default()
            })
        };
        counts.record(Call::Submit, &warned(WarningReason::Refusal(KINDS[0])));
        counts.record(
            Call::Submit,
            &Verdict::Accept(JobChanges {
                exemption: Some(Exemption {
                    reason: ExemptReason::User,
                    kind: KINDS[0],
                    message: String::new(),
                    qos: "q".into(),
                }),
                ..JobChanges::default()
            }),
        );
        counts.record(
            Call::Submit,
            &Verdict::Accept(JobChanges {
                gpu_type_given: Some(Box::new(TypeGiven {
                    gpu_type: "A40".into(),
                    qos: "Q".into(),
                    fields: Vec::new(),
                    message: String::new(),
                })),
                ..JobChanges::default()
            }),
        );
        assert!(counts
            .render()
            .lines()
            .any(|l| l == "gpushare_policy_gpu_types_given_total{type=\"a40\",qos=\"q\"} 1"));
        let rules: Vec<&str> = KINDS.iter().map(|&k| k.label()).collect();
        let with_none: Vec<&str> = ["none"].into_iter().chain(rules.clone()).collect();
        let warnings: Vec<&str> = rules
            .iter()
            .copied()
            .chain(LowPriorityChange::ALL.map(|c| c.label()))
            .chain([WarningReason::TypeGiven.label()])
            .collect();
        let exempt = [ExemptReason::User, ExemptReason::Admin].map(|r| r.label());
        let decisions = "gpushare_job_submit_decisions_total";
        let table = crate::shared::prom::markdown_table(
            &(counts.render() + &render_heartbeat("gpushare", 1_700_000_000)),
            &[
                (decisions, "call", vec!["submit", "modify"]),
                (decisions, "decision", vec!["accept", "reject"]),
                (decisions, "rule", with_none),
                ("gpushare_policy_warnings_total", "reason", warnings),
                (
                    "gpushare_policy_exemptions_total",
                    "reason",
                    exempt.to_vec(),
                ),
                ("gpushare_policy_exemptions_total", "rule", rules),
            ],
        );
        crate::shared::prom::assert_doc_table(doc, "docs/monitoring.md", "plugin metrics", &table);
    }

    #[test]
    fn the_qos_file_goes_beside_the_plugins_and_says_why_when_it_cannot() {
        let conf = Path::new("/etc/slurm/gpu_qos.conf");
        let rhel = "/var/lib/node_exporter/textfile_collector";
        let there = |d: &Path| d == Path::new(rhel);
        let text =
            format!("QOS=q GPUTypes=a40 GPULimit=1\nMetricsFile={rhel}/gpushare_job_submit.prom\n");
        assert_eq!(
            qos_file_beside(conf, Ok(&text), there),
            Ok(PathBuf::from(format!("{rhel}/gpushare_qos.prom")))
        );
        // An invalid file: its MetricsFile= line still counts, as for the plugin.
        let broken = format!("{text}Bogus=1\n");
        assert!(qos_file_beside(conf, Ok(&broken), there).is_ok());
        let not_set_up = |r: Result<PathBuf, NoQosFile>| match r {
            Err(NoQosFile::NotSetUp(why)) => why,
            other => panic!("{other:?}"),
        };
        // The directory missing: one line naming it, the file and the usual places.
        let why = not_set_up(qos_file_beside(conf, Ok(&text), |_| false));
        assert!(
            why.starts_with(&format!(
                "{rhel} (the directory of MetricsFile= in {}",
                conf.display()
            )) && why.contains("/var/lib/prometheus/node-exporter")
                && why.ends_with("nothing written"),
            "{why}"
        );
        let why = not_set_up(qos_file_beside(
            conf,
            Ok("QOS=q GPUTypes=a40 GPULimit=1\n"),
            there,
        ));
        assert!(why.contains("has no valid MetricsFile= line"), "{why}");
        let why = not_set_up(qos_file_beside(
            conf,
            Err("No such file or directory"),
            there,
        ));
        assert!(
            why.starts_with("/etc/slurm/gpu_qos.conf: No such file"),
            "{why}"
        );
        // The plugin's file under this file's name: refused, not overwritten.
        let clash = format!("MetricsFile={rhel}/gpushare_qos.prom\n");
        assert!(matches!(
            qos_file_beside(conf, Ok(&clash), there),
            Err(NoQosFile::Clash(why)) if why.contains("another name")
        ));
    }

    #[test]
    fn decisions_are_counted_by_call_and_rule() {
        let counts = DecisionCounts::new();
        let reject = |kind| {
            Verdict::Reject(Rejection {
                kind,
                message: String::new(),
            })
        };
        counts.record(Call::Submit, &Verdict::Accept(JobChanges::default()));
        counts.record(Call::Submit, &reject(RejectionKind::UntypedGpu));
        counts.record(Call::Submit, &reject(RejectionKind::UntypedGpu));
        counts.record(Call::Modify, &reject(RejectionKind::BadRequest));
        assert_eq!(counts.total(), 4);
        let text = counts.render();
        assert!(
            text.contains("# TYPE gpushare_policy_warnings_total counter")
                && !text.contains("gpushare_policy_warnings_total{"),
            "{text}"
        );
        for line in [
            "gpushare_job_submit_decisions_total{call=\"submit\",decision=\"accept\",rule=\"none\"} 1",
            "gpushare_job_submit_decisions_total{call=\"submit\",decision=\"reject\",rule=\"untyped_gpu\"} 2",
            "gpushare_job_submit_decisions_total{call=\"modify\",decision=\"reject\",rule=\"bad_request\"} 1",
            "gpushare_job_submit_decisions_total{call=\"modify\",decision=\"reject\",rule=\"over_limit\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
    }
}
