//! `gpu-qos audit`: the whole chain a typed-GPU QOS design depends on,
//! checked link by link. A group's `GrpTRES=gres/gpu:a40=4` only holds if
//! accounting enforces limits and QOS, tracks that TRES, and
//! `job_submit/gpu_qos` closes the untyped-request hole; its right to take
//! GPUs back from `lowprio` only holds if preemption is by QOS, in a mode
//! that frees the GPUs, with requeue on; its jobs only start first if QOS
//! priority weighs. Any one missing link and the design silently does
//! something else. Each check cites the Slurm page it follows.
//!
//! Pure: [`Site`] is what the admin command gathered (see [`super::site`]
//! for the readers), [`audit`] returns findings, [`AuditReport`] is what
//! `--json` prints. `gpu-qos check`'s findings are part of it, unchanged.

use std::fmt::{self, Write as _};

use serde::{Deserialize, Serialize};

use super::check::{self, Finding, Severity};
use super::config::{type_matches, GpuQosConfig};
use super::site::{
    conf_value, partition_gpu_types, AuditQos, NodeInfo, PartitionInfo, SlurmSettings, Unread,
};

const DOC_RESOURCE_LIMITS: &str = "https://slurm.schedmd.com/resource_limits.html";
const DOC_SLURM_CONF: &str = "https://slurm.schedmd.com/slurm.conf.html";
const DOC_PREEMPT: &str = "https://slurm.schedmd.com/preempt.html";
const DOC_PRIORITY: &str = "https://slurm.schedmd.com/priority_multifactor.html";
const DOC_GRES: &str = "https://slurm.schedmd.com/gres.html";
const DOC_QOS: &str = "https://slurm.schedmd.com/qos.html";
const DOC_SPANK: &str = "https://slurm.schedmd.com/spank.html";
const DOC_CGROUP_CONF: &str = "https://slurm.schedmd.com/cgroup.conf.html";
const DOC_JOB_SUBMIT: &str = "https://slurm.schedmd.com/job_submit_plugins.html";

/// `gpu_qos.conf` as the audit found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuQosConf {
    Missing,
    Invalid(String),
    Read(Box<GpuQosConfig>),
}

/// Everything the audit looks at, gathered by the admin command.
#[derive(Debug, Clone, PartialEq)]
pub struct Site {
    pub settings: SlurmSettings,
    pub qos: Vec<AuditQos>,
    /// The associations with GPU entries in their `GrpTRES`.
    pub associations: Vec<check::AssocRecord>,
    pub nodes: Vec<NodeInfo>,
    pub partitions: Vec<PartitionInfo>,
    /// `plugstack.conf`'s text; `None` when there is none or it is unreadable.
    pub plugstack: Option<String>,
    /// `cgroup.conf`'s text, likewise.
    pub cgroup_conf: Option<String>,
    /// `slurm.conf`'s own text with the files it includes: what the site
    /// set on purpose, where `scontrol show config` also prints defaults;
    /// `None` when it cannot all be read.
    pub slurm_conf: Option<String>,
    /// Where gpu_qos.conf is (for messages) and what it holds.
    pub gpu_qos_conf_path: String,
    pub gpu_qos_conf: GpuQosConf,
    /// What could not be read; each becomes a note.
    pub unread: Vec<Unread>,
}

/// One link of the chain that does not hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditFinding {
    pub severity: Severity,
    /// A stable name for scripts (`enforce_incomplete`, `unlisted_typed_qos`).
    pub kind: String,
    /// What it is about: `slurm.conf`, `QOS qos_lafferty`, `PartitionName=gpu`.
    pub object: String,
    /// What is wrong, in one sentence.
    pub what: String,
    /// What it means for jobs.
    pub why: String,
    /// The exact line or command that fixes it; empty when there is none.
    pub fix: String,
    /// The Slurm documentation the check follows.
    pub doc: String,
}

impl AuditFinding {
    fn new(severity: Severity, kind: &str, object: impl Into<String>, doc: &str) -> Self {
        Self {
            severity,
            kind: kind.to_owned(),
            object: object.into(),
            what: String::new(),
            why: String::new(),
            fix: String::new(),
            doc: doc.to_owned(),
        }
    }
    fn what(mut self, text: impl Into<String>) -> Self {
        self.what = text.into();
        self
    }
    fn why(mut self, text: impl Into<String>) -> Self {
        self.why = text.into();
        self
    }
    fn fix(mut self, text: impl Into<String>) -> Self {
        self.fix = text.into();
        self
    }
}

fn qos_object(name: &str) -> String {
    format!("QOS {name}")
}

/// The low-priority QOS: gpu_qos.conf's `LowPriorityQOS`, or, without it,
/// every QOS another QOS may preempt.
fn low_priority(site: &Site) -> Vec<&AuditQos> {
    let named: Vec<&str> = match &site.gpu_qos_conf {
        GpuQosConf::Read(cfg) => cfg.low_priority_qos().iter().map(String::as_str).collect(),
        _ => Vec::new(),
    };
    site.qos
        .iter()
        .filter(|q| {
            if named.is_empty() {
                site.qos
                    .iter()
                    .any(|o| o.name() != q.name() && o.record.preempt.iter().any(|p| p == q.name()))
            } else {
                named.iter().any(|n| n.eq_ignore_ascii_case(q.name()))
            }
        })
        .collect()
}

/// The group QOS: those with a usable typed GPU limit.
fn group_qos(site: &Site) -> impl Iterator<Item = &AuditQos> {
    site.qos
        .iter()
        .filter(|q| q.record.expected_gpu_limit().is_some())
}

fn plugin_loaded(site: &Site) -> bool {
    site.settings.list_has("JobSubmitPlugins", "gpu_qos")
}

/// Runs every check. Findings come in the order of the chain: accounting,
/// gpu_qos.conf, preemption, priority, billing, MPS nodes, then what could
/// not be read.
pub fn audit(site: &Site) -> Vec<AuditFinding> {
    let mut out = Vec::new();
    accounting(site, &mut out);
    tracked_tres(site, &mut out);
    gpu_qos_conf(site, &mut out);
    preemption(site, &mut out);
    priority(site, &mut out);
    billing(site, &mut out);
    group_flags(site, &mut out);
    mps_nodes(site, &mut out);
    for u in &site.unread {
        out.push(
            AuditFinding::new(Severity::Note, "unread", u.source.clone(), DOC_SLURM_CONF)
                .what(format!("could not be read: {}", u.reason))
                .why("the audit checked what it could read; this part was left out"),
        );
    }
    out
}

/// https://slurm.schedmd.com/resource_limits.html ("Configuration"): limits
/// need accounting through slurmdbd and `AccountingStorageEnforce` with
/// `limits` (else no GrpTRES is enforced) and `qos` (else any QOS may be
/// requested and QOS limits are not applied as the design needs).
fn accounting(site: &Site, out: &mut Vec<AuditFinding>) {
    let s = &site.settings;
    let storage = s
        .get("AccountingStorageType")
        .unwrap_or("accounting_storage/none");
    if !storage.eq_ignore_ascii_case("accounting_storage/slurmdbd") {
        out.push(
            AuditFinding::new(
                Severity::Error,
                "accounting_off",
                "slurm.conf",
                DOC_RESOURCE_LIMITS,
            )
            .what(format!(
                "AccountingStorageType is {storage}, not accounting_storage/slurmdbd"
            ))
            .why("QOS and their GrpTRES limits live in slurmdbd; without it no group limit exists")
            .fix("AccountingStorageType=accounting_storage/slurmdbd (then restart slurmctld)"),
        );
        return;
    }
    let enforce = s.list("AccountingStorageEnforce");
    let has = |w: &str| enforce.iter().any(|e| e.eq_ignore_ascii_case(w));
    // `safe` implies `limits` (slurm.conf.html, AccountingStorageEnforce).
    let mut missing = Vec::new();
    if !has("limits") && !has("safe") {
        missing.push("limits");
    }
    if !has("qos") {
        missing.push("qos");
    }
    if missing.is_empty() {
        return;
    }
    let mut wanted = enforce.clone();
    for w in ["associations", "limits", "qos"] {
        let implied = w == "limits" && has("safe");
        if !has(w) && !implied {
            wanted.push(w.to_owned());
        }
    }
    let shown = if enforce.is_empty() {
        "is not set".to_owned()
    } else {
        format!("is {}", enforce.join(","))
    };
    out.push(
        AuditFinding::new(
            Severity::Error,
            "enforce_incomplete",
            "slurm.conf",
            DOC_RESOURCE_LIMITS,
        )
        .what(format!(
            "AccountingStorageEnforce {shown}, without {}",
            missing.join(" and ")
        ))
        .why(
            "without limits no GrpTRES is enforced, without qos a QOS is not required to \
                 be allowed for the user: the groups' GPU limits do not hold",
        )
        .fix(format!(
            "AccountingStorageEnforce={} (then restart slurmctld)",
            wanted.join(",")
        )),
    );
}

/// https://slurm.schedmd.com/slurm.conf.html (AccountingStorageTRES) and
/// https://slurm.schedmd.com/gres.html: a GrpTRES limit on a GRES that
/// accounting does not track is never counted, so never reached.
fn tracked_tres(site: &Site, out: &mut Vec<AuditFinding>) {
    let s = &site.settings;
    let tracked = s.list("AccountingStorageTRES");
    let is_tracked = |t: &str| tracked.iter().any(|x| x.eq_ignore_ascii_case(t));
    let mut needed: Vec<(String, String)> = Vec::new();
    let mut need = |tres: String, by: String| {
        if !is_tracked(&tres) && !needed.iter().any(|(t, _)| t.eq_ignore_ascii_case(&tres)) {
            needed.push((tres, by));
        }
    };
    let any_gpu = site.nodes.iter().any(NodeInfo::has_gpus)
        || site.qos.iter().any(|q| !q.record.gpu_limits.is_empty());
    if any_gpu {
        need("gres/gpu".into(), "every GPU request".into());
    }
    for q in &site.qos {
        for (t, _) in q.record.typed_limits() {
            need(
                format!("gres/gpu:{t}"),
                format!("GrpTRES of QOS {}", q.name()),
            );
        }
    }
    for n in &site.nodes {
        for t in n.gpu_types() {
            need(format!("gres/gpu:{t}"), format!("Gres of node {}", n.name));
        }
    }
    if needed.is_empty() {
        return;
    }
    let mut wanted = tracked.clone();
    wanted.extend(needed.iter().map(|(t, _)| t.clone()));
    let list: Vec<String> = needed.iter().map(|(t, by)| format!("{t} ({by})")).collect();
    out.push(
        AuditFinding::new(
            Severity::Error,
            "tres_untracked",
            "slurm.conf",
            DOC_SLURM_CONF,
        )
        .what(format!(
            "AccountingStorageTRES does not track {}",
            list.join(", ")
        ))
        .why(
            "a GrpTRES limit on an untracked TRES is never counted, so it never stops a \
                 job; per-type GPU use is invisible to accounting",
        )
        .fix(format!(
            "AccountingStorageTRES={} (then restart slurmctld)",
            wanted.join(",")
        )),
    );
}

/// The plugin's half: https://slurm.schedmd.com/job_submit_plugins.html and
/// https://slurm.schedmd.com/resource_limits.html (typed GRES limits apply
/// only to requests that name the type; the docs advise a job_submit
/// plugin). `gpu-qos check`'s findings are included as they are.
fn gpu_qos_conf(site: &Site, out: &mut Vec<AuditFinding>) {
    let path = &site.gpu_qos_conf_path;
    let loaded = plugin_loaded(site);
    let typed: Vec<&AuditQos> = group_qos(site).collect();
    let cfg = match &site.gpu_qos_conf {
        GpuQosConf::Missing => {
            if let Some(q) = typed.first() {
                out.push(
                    AuditFinding::new(
                        Severity::Error,
                        "gpu_qos_conf_missing",
                        path.clone(),
                        DOC_JOB_SUBMIT,
                    )
                    .what(format!(
                        "there is no {path}, yet {} QOS have typed GPU limits (first: {})",
                        typed.len(),
                        q.name()
                    ))
                    .why(
                        "Slurm counts a typed GrpTRES only when the job names the type: \
                             --gres=gpu:2 under a group QOS escapes its limit",
                    )
                    .fix(format!(
                        "gpu-qos generate > {path}, and JobSubmitPlugins=gpu_qos in slurm.conf"
                    )),
                );
            }
            return;
        }
        GpuQosConf::Invalid(reason) => {
            out.push(
                AuditFinding::new(
                    Severity::Error,
                    "gpu_qos_conf_invalid",
                    path.clone(),
                    DOC_JOB_SUBMIT,
                )
                .what(reason.clone())
                .why("slurmctld keeps the last good policy, or does not start with none")
                .fix(format!(
                    "correct the line, then gpu-qos check --conf {path}"
                )),
            );
            return;
        }
        GpuQosConf::Read(cfg) => cfg,
    };
    if !loaded {
        out.push(
            AuditFinding::new(
                Severity::Error,
                "plugin_not_loaded",
                "slurm.conf",
                DOC_JOB_SUBMIT,
            )
            .what(format!(
                "{path} exists but JobSubmitPlugins does not list gpu_qos ({})",
                site.settings.get("JobSubmitPlugins").unwrap_or("none")
            ))
            .why("the policy of gpu_qos.conf is enforced by nobody")
            .fix(format!("JobSubmitPlugins={} (then restart slurmctld)", {
                let mut p = site.settings.list("JobSubmitPlugins");
                p.push("gpu_qos".into());
                p.join(",")
            })),
        );
    }
    let records: Vec<check::QosRecord> = site.qos.iter().map(|q| q.record.clone()).collect();
    let partition_qos = partition_levels(site, cfg, path, out);
    for f in check::check(cfg, path, &records) {
        // A partition's QOS is judged through its Partition= rule.
        if let Finding::UnlistedTypedQos { qos, .. } = &f {
            if partition_qos.iter().any(|q| q.eq_ignore_ascii_case(qos)) {
                continue;
            }
        }
        out.push(from_check(&f, path));
    }
    for f in check::check_associations(cfg, path, &site.associations) {
        out.push(from_check(&f, path));
    }
    rule_types_on_nodes(site, cfg, path, out);
}

/// https://slurm.schedmd.com/resource_limits.html (a partition's QOS limits
/// every job in the partition, and a typed limit counts only typed
/// requests): a partition whose QOS carries typed GPU limits needs a
/// `Partition=` rule, or untyped requests there escape it. Returns the
/// partitions' QOS with typed limits, each reported here rather than as a
/// QOS without a rule.
fn partition_levels(
    site: &Site,
    cfg: &GpuQosConfig,
    path: &str,
    out: &mut Vec<AuditFinding>,
) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for p in &site.partitions {
        let Some(q) = p.qos.as_deref().and_then(|name| {
            site.qos
                .iter()
                .find(|q| q.name().eq_ignore_ascii_case(name))
        }) else {
            continue;
        };
        let usable = q.record.usable_types();
        if usable.is_empty() {
            continue;
        }
        seen.push(q.name().to_owned());
        if cfg.partition_rule(&p.name).is_some() {
            continue;
        }
        let types: Vec<&str> = usable.iter().map(|(t, _)| t.as_str()).collect();
        out.push(
            AuditFinding::new(
                Severity::Error,
                "partition_qos_unenforced",
                format!("PartitionName={}", p.name),
                DOC_RESOURCE_LIMITS,
            )
            .what(format!(
                "partition {}'s QOS {} has typed GPU limits ({}), but {path} has no \
                 Partition={} rule",
                p.name,
                q.name(),
                q.record.gpu_tres_text(),
                p.name
            ))
            .why(
                "Slurm counts a typed GrpTRES only when the job names the type: \
                 --gres=gpu:2 in the partition escapes its QOS's limit",
            )
            .fix(format!(
                "add to {path}: Partition={} GPUTypes={} GPULimit={}",
                p.name,
                types.join(","),
                check::limit_text(&usable)
            )),
        );
    }
    seen
}

/// A rule type (or pattern) that no node's GPUs carry: every job asking for
/// the site's real type is refused under the rule, or a pattern meant for
/// MIG slice types (`a100_*`) misses their real names.
fn rule_types_on_nodes(site: &Site, cfg: &GpuQosConfig, path: &str, out: &mut Vec<AuditFinding>) {
    let node_types: Vec<String> = site
        .nodes
        .iter()
        .flat_map(|n| n.gpu_types().map(str::to_owned))
        .collect();
    if node_types.is_empty() {
        return;
    }
    for rule in cfg.rules() {
        for entry in rule.gpu_types() {
            if node_types.iter().any(|t| type_matches(entry, t)) {
                continue;
            }
            let mut known = node_types.clone();
            known.sort();
            known.dedup();
            out.push(
                AuditFinding::new(
                    Severity::Warning,
                    "rule_type_on_no_node",
                    format!("{path}:{}", rule.line()),
                    DOC_RESOURCE_LIMITS,
                )
                .what(format!(
                    "GPUTypes entry {entry} matches no node's GPU type (nodes have {})",
                    known.join(", ")
                ))
                .why("a job asking for that type can never run; one asking for the real type is refused")
                .fix(format!("write the type as gres.conf names it, in {path}:{}", rule.line())),
            );
        }
    }
}

/// A `gpu-qos check` finding in the audit's shape.
fn from_check(f: &Finding, path: &str) -> AuditFinding {
    let (why, fix) = match f {
        Finding::UnlistedTypedQos {
            qos,
            usable_types,
            expected,
            ..
        } => (
            "the plugin refuses untyped requests only under QOS it lists",
            format!(
                "add to {path}: QOS={qos} GPUTypes={} GPULimit={expected}",
                usable_types.join(",")
            ),
        ),
        Finding::LowPriorityNotPreemptable { qos } => (
            "jobs under it are made requeueable for a preemption that never comes",
            format!("sacctmgr -i modify qos <group qos> set Preempt+={qos}"),
        ),
        Finding::LooserForSomeTypes { per_type, .. } => (
            "one GPULimit for types with different limits lets some never-fitting jobs pend",
            format!("in {path}: GPULimit={per_type}"),
        ),
        _ => (
            "the plugin judges jobs by gpu_qos.conf, accounting by GrpTRES; they must agree",
            format!("edit {path} as said (gpu-qos generate prints a matching file)"),
        ),
    };
    AuditFinding::new(f.severity(), f.kind(), f.object(), DOC_RESOURCE_LIMITS)
        .what(f.to_string())
        .why(why)
        .fix(fix)
}

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
fn preemption(site: &Site, out: &mut Vec<AuditFinding>) {
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

/// https://slurm.schedmd.com/priority_multifactor.html: QOS priority counts
/// only under priority/multifactor with PriorityWeightQOS > 0; fair share
/// balances the groups' use of the shared GPUs.
fn priority(site: &Site, out: &mut Vec<AuditFinding>) {
    let s = &site.settings;
    let ptype = s.get("PriorityType").unwrap_or("priority/basic");
    if !ptype.eq_ignore_ascii_case("priority/multifactor") {
        out.push(
            AuditFinding::new(
                Severity::Warning,
                "priority_not_multifactor",
                "slurm.conf",
                DOC_PRIORITY,
            )
            .what(format!("PriorityType is {ptype}, not priority/multifactor"))
            .why("QOS priority and fair share do not order jobs: group jobs queue behind the rest")
            .fix("PriorityType=priority/multifactor (then restart slurmctld)"),
        );
        return;
    }
    for (key, kind, why, fix) in [
        (
            "PriorityWeightQOS",
            "priority_weight_qos_zero",
            "the QOS Priority is multiplied by 0: group jobs do not start before low-priority ones",
            "PriorityWeightQOS=10000 (then scontrol reconfigure)",
        ),
        (
            "PriorityWeightFairshare",
            "priority_weight_fairshare_zero",
            "past use does not lower priority: one busy user can keep the shared GPUs",
            "PriorityWeightFairshare=1000 (then scontrol reconfigure)",
        ),
    ] {
        if s.number(key).unwrap_or(0) == 0 {
            out.push(
                AuditFinding::new(Severity::Warning, kind, "slurm.conf", DOC_PRIORITY)
                    .what(format!("{key} is 0 or unset"))
                    .why(why)
                    .fix(fix),
            );
        }
    }
    priority_defaults(site, out);
}

/// https://slurm.schedmd.com/slurm.conf.html (PriorityDecayHalfLife,
/// PriorityMaxAge, both 7-0 by default): the two periods users are told
/// when they ask why they wait (how long their GPU use counts against
/// them, how long before waiting stops raising a job). A site that weighs
/// fair share or age should have chosen them; `scontrol show config`
/// prints the default as if set, so only slurm.conf's text tells.
fn priority_defaults(site: &Site, out: &mut Vec<AuditFinding>) {
    let Some(text) = &site.slurm_conf else {
        return;
    };
    let s = &site.settings;
    for (key, weight, kind, why, fix) in [
        (
            "PriorityDecayHalfLife",
            "PriorityWeightFairshare",
            "decay_half_life_default",
            "fair share forgets GPU use at this half-life (a GPU-hour used one half-life ago \
             counts half): it decides how long a group's heavy use keeps its jobs behind, and \
             users are told it (gpu-qos why)",
            "PriorityDecayHalfLife=14-0 (the period GPU use should weigh on priority; then \
             scontrol reconfigure)",
        ),
        (
            "PriorityMaxAge",
            "PriorityWeightAge",
            "max_age_default",
            "a pending job's age factor grows to its full weight over this period: it decides \
             how long a job waits before age alone lifts it past others",
            "PriorityMaxAge=1-0 (the wait after which age weighs fully; then scontrol \
             reconfigure)",
        ),
    ] {
        if s.number(weight).unwrap_or(0) > 0 && conf_value(text, key).is_none() {
            out.push(
                AuditFinding::new(Severity::Note, kind, "slurm.conf", DOC_SLURM_CONF)
                    .what(format!(
                        "{key} is not set in slurm.conf: Slurm's default {} applies",
                        s.get(key).unwrap_or("7-00:00:00")
                    ))
                    .why(why)
                    .fix(fix),
            );
        }
    }
}

/// The partitions holding GPU nodes, with the GPU types on them.
fn gpu_partitions(site: &Site) -> Vec<(&PartitionInfo, Vec<String>)> {
    site.partitions
        .iter()
        .filter(|p| {
            site.nodes
                .iter()
                .any(|n| n.has_gpus() && n.partitions.contains(&p.name))
        })
        .map(|p| (p, partition_gpu_types(&site.nodes, &p.name)))
        .collect()
}

/// https://slurm.schedmd.com/slurm.conf.html (TRESBillingWeights) and
/// priority_multifactor.html: fair share charges what billing counts; a
/// typed request counts against `gres/gpu` and `gres/gpu:TYPE`, an untyped
/// one only against `gres/gpu`.
fn billing(site: &Site, out: &mut Vec<AuditFinding>) {
    for (p, types) in gpu_partitions(site) {
        let object = format!("PartitionName={}", p.name);
        let untyped = p.billing_weight("gres/gpu").is_some();
        let typed: Vec<&String> = types
            .iter()
            .filter(|t| p.billing_weight(&format!("gres/gpu:{t}")).is_some())
            .collect();
        let suggestion = || {
            let mut w: Vec<String> = p.billing.iter().map(|(k, v)| format!("{k}={v}")).collect();
            if w.is_empty() {
                w.push("CPU=1.0".into());
            }
            if !untyped {
                w.push("GRES/gpu=1.0".into());
            }
            format!(
                "PartitionName={} ... TRESBillingWeights={}",
                p.name,
                w.join(",")
            )
        };
        if untyped {
            billed_alike(&site.settings, p, &types, out);
            continue;
        }
        if typed.is_empty() {
            out.push(
                AuditFinding::new(Severity::Note, "billing_ignores_gpus", object, DOC_PRIORITY)
                    .what(format!(
                        "{} bills no GPU (no GRES/gpu in TRESBillingWeights)",
                        p.name
                    ))
                    .why("fair share charges GPU jobs for their CPUs only")
                    .fix(suggestion()),
            );
        } else {
            out.push(
                AuditFinding::new(Severity::Warning, "billing_typed_only", object, DOC_PRIORITY)
                    .what(format!(
                        "{} bills typed GPUs ({}) but not GRES/gpu",
                        p.name,
                        typed.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(",")
                    ))
                    .why("an untyped request (--gres=gpu:2, allowed outside group QOS) is billed nothing for its GPUs")
                    .fix(suggestion()),
            );
        }
    }
}

/// What one GPU of `gpu_type` adds to a job's billing in `p`: a typed
/// request counts against `gres/gpu` and `gres/gpu:TYPE` both.
pub fn gpu_cost(p: &PartitionInfo, gpu_type: &str) -> f64 {
    let weight = |k: &str| {
        p.billing_weight(k)
            .and_then(|w| w.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    weight("gres/gpu") + weight(&format!("gres/gpu:{gpu_type}"))
}

/// Partitions whose GPU types all cost the same in fair share: an hour of
/// the site's dearest GPU lowers a group's priority no more than one of
/// its cheapest. Only types accounting tracks count: slurmctld refuses to
/// start with a weight for an untracked one (seen on 22.05: "TRES weight
/// 'GRES:gpu:h100' is not a configured TRES type"), and `tres_untracked`
/// reports those first.
fn billed_alike(
    settings: &SlurmSettings,
    p: &PartitionInfo,
    types: &[String],
    out: &mut Vec<AuditFinding>,
) {
    let types: Vec<String> = types
        .iter()
        .filter(|t| settings.list_has("AccountingStorageTRES", &format!("gres/gpu:{t}")))
        .cloned()
        .collect();
    if types.len() < 2 {
        return;
    }
    let cost = gpu_cost(p, &types[0]);
    if types.iter().any(|t| gpu_cost(p, t) != cost) {
        return;
    }
    let dearest = &types[types.len() - 1];
    let w: Vec<String> = p.billing.iter().map(|(k, v)| format!("{k}={v}")).collect();
    out.push(
        AuditFinding::new(
            Severity::Note,
            "billing_types_alike",
            format!("PartitionName={}", p.name),
            DOC_PRIORITY,
        )
        .what(format!(
            "{} bills its GPU types {} alike ({cost} per GPU; no GRES/gpu:TYPE weight tells them apart)",
            p.name,
            types.join(", ")
        ))
        .why(
            "fair share charges an hour of every type the same: a group on the dearest GPUs \
             loses no more priority than one on the cheapest",
        )
        .fix(format!(
            "PartitionName={} ... TRESBillingWeights={},GRES/gpu:{}=W (W: what one {}-hour \
             costs beyond GRES/gpu; then scontrol reconfigure)",
            p.name,
            w.join(","),
            dearest,
            dearest
        )),
    );
}

/// https://slurm.schedmd.com/resource_limits.html (QOS Flags,
/// DenyOnLimit): without it a typed request that can never fit pends
/// forever instead of being refused at submit.
fn group_flags(site: &Site, out: &mut Vec<AuditFinding>) {
    for g in group_qos(site) {
        if !g.has_flag("DenyOnLimit") {
            out.push(
                AuditFinding::new(
                    Severity::Note,
                    "no_deny_on_limit",
                    qos_object(g.name()),
                    DOC_RESOURCE_LIMITS,
                )
                .what(format!("{} has no Flags=DenyOnLimit", g.name()))
                .why(
                    "a typed request over the group's GrpTRES can never start, yet pends \
                         forever instead of being refused at submit (DenyOnLimit treats Grp \
                         limits as per-job limits)",
                )
                .fix(format!(
                    "sacctmgr -i modify qos {} set Flags+=DenyOnLimit",
                    g.name()
                )),
            );
        }
    }
}

/// gpushare's node half (README), after https://slurm.schedmd.com/gres.html
/// (MPS), spank.html (plugstack.conf) and cgroup.conf.html
/// (ConstrainDevices): the prolog/epilog keep the share state and daemons,
/// the SPANK plugin confines and configures tasks, and confinement needs
/// Slurm's device cgroup.
fn mps_nodes(site: &Site, out: &mut Vec<AuditFinding>) {
    let mps: Vec<&NodeInfo> = site.nodes.iter().filter(|n| n.has_mps()).collect();
    let Some(first) = mps.first() else {
        return;
    };
    let nodes = if mps.len() == 1 {
        format!("node {}", first.name)
    } else {
        format!("{} MPS nodes (first: {})", mps.len(), first.name)
    };
    let s = &site.settings;
    for (key, program, kind) in [
        ("Prolog", "gpu-mps-prolog", "mps_prolog_missing"),
        ("Epilog", "gpu-mps-epilog", "mps_epilog_missing"),
    ] {
        // Several Prolog= are allowed from 23.11 (shown as Prolog[N]).
        let value = s.all(key).join(",");
        if !value.contains(program) {
            let is = if value.is_empty() {
                "unset".to_owned()
            } else {
                format!("{value}, which does not run {program}")
            };
            out.push(
                AuditFinding::new(Severity::Error, kind, "slurm.conf", DOC_GRES)
                    .what(format!("{nodes} offers mps, but {key} is {is}"))
                    .why("gpushare keeps no share state and starts no MPS daemon for mps jobs")
                    .fix(format!(
                        "{key}=/usr/libexec/gpushare/{program} (or a script that runs it)"
                    )),
            );
        }
    }
    let plugstack_path = s
        .get("PlugStackConfig")
        .unwrap_or("plugstack.conf")
        .to_owned();
    if site
        .plugstack
        .as_deref()
        .and_then(super::site::plugstack_loads_gpu_mps)
        .is_none()
    {
        out.push(
            AuditFinding::new(Severity::Error, "spank_gpu_mps_missing", plugstack_path, DOC_SPANK)
                .what(format!("{nodes} offers mps, but plugstack.conf does not load spank_gpu_mps.so"))
                .why("mps jobs get no MPS environment and no limits, and are not confined to their GPU")
                .fix("required /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_gpu_mps.so conf=/etc/slurm/gpu_mps.conf"),
        );
    }
    // ConstrainDevices acts only through task/cgroup (cgroup.conf.html).
    let constrain_devices = site
        .cgroup_conf
        .as_deref()
        .and_then(|t| super::site::conf_value(t, "ConstrainDevices"))
        .or_else(|| s.get("ConstrainDevices").map(str::to_owned))
        .is_some_and(|v| v.eq_ignore_ascii_case("yes"));
    let task_cgroup = s.list_has("TaskPlugin", "task/cgroup");
    if !(constrain_devices && task_cgroup) {
        let mut missing = Vec::new();
        if !constrain_devices {
            missing.push("cgroup.conf does not say ConstrainDevices=yes");
        }
        if !task_cgroup {
            missing.push("TaskPlugin lacks task/cgroup");
        }
        out.push(
            AuditFinding::new(
                Severity::Error,
                "devices_unconstrained",
                if constrain_devices {
                    "slurm.conf"
                } else {
                    "cgroup.conf"
                },
                DOC_CGROUP_CONF,
            )
            .what(format!("{nodes} offers mps, but {}", missing.join(" and ")))
            .why("every job can open every GPU of the node: shares are not isolated")
            .fix("ConstrainDevices=yes in cgroup.conf and TaskPlugin=task/cgroup in slurm.conf"),
        );
    }
}

/// The `--fail-on` threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailOn {
    Error,
    Warning,
    Note,
}

impl FailOn {
    fn reached_by(self, s: Severity) -> bool {
        let limit = match self {
            FailOn::Error => Severity::Error,
            FailOn::Warning => Severity::Warning,
            FailOn::Note => Severity::Note,
        };
        s <= limit
    }
}

/// What `gpu-qos audit --json` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditReport {
    /// 0 clean, 1 findings at or above `fail_on`, 2 could not read.
    pub exit: u8,
    pub fail_on: FailOn,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Where the settings came from (`scontrol show config` or a file).
    #[serde(default)]
    pub sources: Vec<String>,
    pub errors: usize,
    pub warnings: usize,
    pub notes: usize,
    pub findings: Vec<AuditFinding>,
}

impl AuditReport {
    pub fn new(findings: Vec<AuditFinding>, fail_on: FailOn, sources: Vec<String>) -> Self {
        let count = |s: Severity| findings.iter().filter(|f| f.severity == s).count();
        let exit = u8::from(findings.iter().any(|f| fail_on.reached_by(f.severity)));
        Self {
            exit,
            fail_on,
            error: None,
            sources,
            errors: count(Severity::Error),
            warnings: count(Severity::Warning),
            notes: count(Severity::Note),
            findings,
        }
    }

    /// The audit could not read the site (exit 2).
    pub fn unread(reason: &str, fail_on: FailOn) -> Self {
        Self {
            exit: 2,
            error: Some(reason.to_owned()),
            ..Self::new(Vec::new(), fail_on, Vec::new())
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The table for people: one block per finding, then a summary.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let width = self
            .findings
            .iter()
            .map(|f| f.object.chars().count())
            .max()
            .unwrap_or(6)
            .clamp(6, 40);
        if !self.findings.is_empty() {
            let _ = writeln!(out, "{:<8} {:<width$} FINDING", "SEVERITY", "OBJECT");
        }
        for f in &self.findings {
            let _ = writeln!(
                out,
                "{:<8} {:<width$} {}",
                f.severity.to_string(),
                f.object,
                f.what
            );
            let pad = " ".repeat(9 + width + 1);
            if !f.why.is_empty() {
                let _ = writeln!(out, "{pad}why: {}", f.why);
            }
            if !f.fix.is_empty() {
                let _ = writeln!(out, "{pad}fix: {}", f.fix);
            }
            let _ = writeln!(out, "{pad}see: {}", f.doc);
        }
        let verdict = if self.exit == 0 { "passed" } else { "FAILED" };
        let _ = writeln!(
            out,
            "audit {verdict} (--fail-on {}): {} error{}, {} warning{}, {} note{}; read {}",
            self.fail_on,
            self.errors,
            plural(self.errors),
            self.warnings,
            plural(self.warnings),
            self.notes,
            plural(self.notes),
            self.sources.join(", ")
        );
        out
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

impl fmt::Display for FailOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailOn::Error => "error",
            FailOn::Warning => "warning",
            FailOn::Note => "note",
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::qos::config as qos_conf;
    use crate::qos::site::{parse_nodes, parse_partitions, parse_qos};

    /// The test cluster's correct site, as its daemons print it.
    const CONFIG: &str = "\
AccountingStorageEnforce = associations,limits,qos,safe
AccountingStorageTRES   = cpu,mem,energy,node,billing,fs/disk,vmem,pages,gres/gpu,gres/gpu:a40,gres/gpu:h100,gres/mps
AccountingStorageType   = accounting_storage/slurmdbd
Epilog                  = /usr/libexec/gpushare/gpu-mps-epilog
JobRequeue              = 1
JobSubmitPlugins        = gpu_qos
PlugStackConfig         = /etc/slurm/plugstack.conf
PreemptMode             = REQUEUE
PreemptType             = preempt/qos
PriorityType            = priority/multifactor
PriorityWeightFairShare = 1000
PriorityWeightQOS       = 10000
Prolog                  = /usr/libexec/gpushare/gpu-mps-prolog
TaskPlugin              = task/cgroup,task/affinity
";
    const QOS: &str = "\
normal|||cluster|00:00:00|1.000000||0
lowprio|||requeue|00:02:00|0.000000||0
qos_lafferty|gres/gpu:a40=4|lowprio|cluster|00:00:00|1.000000|DenyOnLimit|100
qos_dijk|gres/gpu:h100=2|lowprio|cluster|00:00:00|1.000000|DenyOnLimit|100
";
    const NODES: &str =
        "NodeName=node1 Arch=x86_64 Gres=gpu:a40:4,gpu:h100:2,mps:600 Partitions=gpu State=IDLE\n";
    const PARTITIONS: &str =
        "PartitionName=gpu Nodes=node1 TRESBillingWeights=CPU=1.0,GRES/gpu=1.0,GRES/gpu:h100=2.0\n";
    const GPU_QOS_CONF: &str = "QOS=qos_lafferty GPUTypes=a40 GPULimit=4\n\
        QOS=qos_dijk GPUTypes=h100 GPULimit=2\nLowPriorityQOS=lowprio\n";
    const PLUGSTACK: &str =
        "required /usr/lib/slurm/spank_gpu_mps.so conf=/etc/slurm/gpu_mps.conf\n";
    const CGROUP: &str = "CgroupPlugin=cgroup/v1\nConstrainDevices=yes\n";
    /// What the site set on purpose: the decay (the config above weighs
    /// fair share, not age).
    const SLURM_CONF: &str = "PriorityType=priority/multifactor\nPriorityDecayHalfLife=14-0\n";

    fn site_with(edit: impl FnOnce(&mut String, &mut String, &mut String, &mut String)) -> Site {
        let (mut config, mut qos, mut partitions, mut conf) = (
            CONFIG.to_owned(),
            QOS.to_owned(),
            PARTITIONS.to_owned(),
            GPU_QOS_CONF.to_owned(),
        );
        edit(&mut config, &mut qos, &mut partitions, &mut conf);
        let (qos, mut unread) = parse_qos(&qos);
        let (nodes, u) = parse_nodes(NODES);
        unread.extend(u);
        let (partitions, u) = parse_partitions(&partitions);
        unread.extend(u);
        Site {
            settings: SlurmSettings::from_show_config(&config),
            qos,
            associations: Vec::new(),
            nodes,
            partitions,
            plugstack: Some(PLUGSTACK.into()),
            cgroup_conf: Some(CGROUP.into()),
            slurm_conf: Some(SLURM_CONF.into()),
            gpu_qos_conf_path: "/etc/slurm/gpu_qos.conf".into(),
            gpu_qos_conf: match qos_conf::parse(&conf, "/etc/slurm/gpu_qos.conf") {
                Ok(c) => GpuQosConf::Read(Box::new(c)),
                Err(e) => GpuQosConf::Invalid(e.to_string()),
            },
            unread,
        }
    }

    fn kinds(site: &Site) -> Vec<(Severity, String)> {
        audit(site)
            .into_iter()
            .map(|f| (f.severity, f.kind))
            .collect()
    }

    fn replace(text: &mut String, from: &str, to: &str) {
        assert!(text.contains(from), "{from:?} not in {text}");
        *text = text.replace(from, to);
    }

    #[test]
    fn the_correct_site_has_no_finding() {
        assert_eq!(audit(&site_with(|_, _, _, _| {})), []);
    }

    /// Changes the show-config text, QOS, partitions and gpu_qos.conf.
    type Edit = dyn Fn(&mut String, &mut String, &mut String, &mut String);

    #[test]
    fn each_broken_link_is_one_finding() {
        use Severity::*;
        let cases: Vec<(Box<Edit>, Severity, &str)> = vec![
            (
                Box::new(|c, _, _, _| replace(c, "associations,limits,qos,safe", "associations")),
                Error,
                "enforce_incomplete",
            ),
            (
                Box::new(|c, _, _, _| replace(c, ",gres/gpu:h100", "")),
                Error,
                "tres_untracked",
            ),
            (
                Box::new(|c, _, _, _| replace(c, "= gpu_qos", "= lua")),
                Error,
                "plugin_not_loaded",
            ),
            (
                Box::new(|c, _, _, _| replace(c, "preempt/qos", "preempt/none")),
                Error,
                "preempt_type",
            ),
            (
                Box::new(|c, _, _, _| replace(c, "JobRequeue              = 1", "JobRequeue = 0")),
                Note,
                "job_requeue_off",
            ),
            (
                Box::new(|c, _, _, _| {
                    replace(
                        c,
                        "PriorityWeightQOS       = 10000",
                        "PriorityWeightQOS = 0",
                    )
                }),
                Warning,
                "priority_weight_qos_zero",
            ),
            (
                Box::new(|c, _, _, _| replace(c, "PriorityWeightFairShare = 1000", "")),
                Warning,
                "priority_weight_fairshare_zero",
            ),
            (
                Box::new(|c, _, _, _| replace(c, "priority/multifactor", "priority/basic")),
                Warning,
                "priority_not_multifactor",
            ),
            (
                Box::new(|c, _, _, _| replace(c, "gpu-mps-prolog", "site-prolog")),
                Error,
                "mps_prolog_missing",
            ),
            (
                Box::new(|_, q, _, _| {
                    replace(
                        q,
                        "|lowprio|cluster|00:00:00|1.000000|DenyOnLimit|100\nqos_dijk",
                        "||cluster|00:00:00|1.000000|DenyOnLimit|100\nqos_dijk",
                    )
                }),
                Error,
                "group_cannot_preempt",
            ),
            (
                Box::new(|_, q, _, _| replace(q, "requeue|00:02:00", "requeue|00:00:00")),
                Warning,
                "no_grace_time",
            ),
            (
                Box::new(|_, q, _, _| {
                    replace(q, "requeue|00:02:00|0.000000", "cancel|00:02:00|0.000000")
                }),
                Note,
                "preempt_cancels",
            ),
            (
                Box::new(|_, q, _, _| {
                    replace(q, "requeue|00:02:00|0.000000", "off|00:02:00|0.000000")
                }),
                Error,
                "preempt_mode_off",
            ),
            (
                Box::new(|_, q, _, _| replace(q, "00:02:00|0.000000", "00:02:00|1.000000")),
                Note,
                "low_priority_usage_factor",
            ),
            (
                Box::new(|_, q, _, _| {
                    replace(
                        q,
                        "1.000000|DenyOnLimit|100\nqos_dijk",
                        "1.000000||100\nqos_dijk",
                    )
                }),
                Note,
                "no_deny_on_limit",
            ),
            (
                Box::new(|_, q, _, _| replace(q, "gres/gpu:a40=4", "gres/gpu:a40=8")),
                Error,
                "limit_differs",
            ),
            (
                Box::new(|_, _, p, _| replace(p, ",GRES/gpu:h100=2.0", "")),
                Note,
                "billing_types_alike",
            ),
            (
                Box::new(|c, _, _, _| c.push_str("PriorityWeightAge = 100\n")),
                Note,
                "max_age_default",
            ),
            (
                Box::new(|_, _, p, _| replace(p, "GRES/gpu=1.0,", "")),
                Warning,
                "billing_typed_only",
            ),
            (
                Box::new(|_, _, p, _| {
                    replace(
                        p,
                        " TRESBillingWeights=CPU=1.0,GRES/gpu=1.0,GRES/gpu:h100=2.0",
                        "",
                    )
                }),
                Note,
                "billing_ignores_gpus",
            ),
            (
                Box::new(|_, _, _, f| replace(f, "QOS=qos_dijk GPUTypes=h100 GPULimit=2\n", "")),
                Error,
                "unlisted_typed_qos",
            ),
            (
                Box::new(|_, _, p, _| replace(p, "Nodes=node1 ", "Nodes=node1 QOS=qos_dijk ")),
                Error,
                "partition_qos_unenforced",
            ),
            (
                Box::new(|_, _, _, f| f.push_str("Account=lafferty GPUTypes=a4O\n")),
                Warning,
                "rule_type_on_no_node",
            ),
        ];
        for (edit, severity, kind) in cases {
            let site = site_with(|c, q, p, f| edit(c, q, p, f));
            assert_eq!(kinds(&site), [(severity, kind.to_owned())], "{kind}");
        }
    }

    #[test]
    fn a_partition_rule_covers_the_partitions_qos() {
        // qos_part is used only as the partition's QOS: its Partition= rule
        // covers it, and it is no unlisted QOS.
        let site = site_with(|_, q, p, f| {
            q.push_str("qos_part|gres/gpu:a40=8,gres/gpu:h100=1|lowprio|cluster|00:00:00|1.000000|DenyOnLimit|100\n");
            replace(p, "Nodes=node1 ", "Nodes=node1 QOS=qos_part ");
            f.push_str("Partition=gpu GPUTypes=a40,h100 GPULimit=a40:8,h100:1\n");
        });
        assert_eq!(kinds(&site), []);
        let uncovered = site_with(|_, q, p, _| {
            q.push_str("qos_part|gres/gpu:a40=8,gres/gpu:h100=1|lowprio|cluster|00:00:00|1.000000|DenyOnLimit|100\n");
            replace(p, "Nodes=node1 ", "Nodes=node1 QOS=qos_part ");
        });
        let findings = audit(&uncovered);
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(
            findings[0].fix,
            "add to /etc/slurm/gpu_qos.conf: Partition=gpu GPUTypes=a40,h100 GPULimit=a40:8,h100:1"
        );
    }

    #[test]
    fn a_queue_mode_inherited_from_the_cluster_counts() {
        let site = site_with(|c, q, _, _| {
            replace(q, "requeue|00:02:00", "cluster|00:02:00");
            replace(c, "PreemptMode             = REQUEUE", "PreemptMode = OFF");
        });
        let found = audit(&site);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].kind, "preempt_mode_off");
        assert!(
            found[0].what.contains("the cluster's PreemptMode is off"),
            "{}",
            found[0].what
        );
        assert_eq!(
            found[0].fix,
            "sacctmgr -i modify qos lowprio set PreemptMode=requeue"
        );
    }

    #[test]
    fn fixes_are_exact() {
        let site = site_with(|c, q, _, _| {
            replace(c, "associations,limits,qos,safe", "associations");
            replace(c, ",gres/gpu:h100", "");
            replace(
                q,
                "|lowprio|cluster|00:00:00|1.000000|DenyOnLimit|100\nqos_dijk",
                "||cluster|00:00:00|1.000000||100\nqos_dijk",
            );
        });
        let fixes: Vec<String> = audit(&site).into_iter().map(|f| f.fix).collect();
        assert_eq!(
            fixes,
            [
                "AccountingStorageEnforce=associations,limits,qos (then restart slurmctld)",
                "AccountingStorageTRES=cpu,mem,energy,node,billing,fs/disk,vmem,pages,gres/gpu,\
                 gres/gpu:a40,gres/mps,gres/gpu:h100 (then restart slurmctld)",
                "sacctmgr -i modify qos qos_lafferty set Preempt+=lowprio",
                "sacctmgr -i modify qos qos_lafferty set Flags+=DenyOnLimit",
            ]
        );
    }

    #[test]
    fn mps_nodes_need_the_node_half() {
        let mut site = site_with(|c, _, _, _| {
            replace(
                c,
                "Epilog                  = /usr/libexec/gpushare/gpu-mps-epilog\n",
                "",
            );
        });
        site.plugstack = Some("# nothing\n".into());
        site.cgroup_conf = None;
        let k: Vec<String> = audit(&site).into_iter().map(|f| f.kind).collect();
        assert_eq!(
            k,
            [
                "mps_epilog_missing",
                "spank_gpu_mps_missing",
                "devices_unconstrained"
            ]
        );
        let site = site_with(|c, _, _, _| replace(c, "task/cgroup,task/affinity", "task/none"));
        let found = audit(&site);
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].object.as_str(), found[0].what.as_str()),
            (
                "slurm.conf",
                "node node1 offers mps, but TaskPlugin lacks task/cgroup"
            )
        );
    }

    #[test]
    fn no_gpu_qos_conf_with_typed_limits_is_an_error() {
        let mut site = site_with(|_, _, _, _| {});
        site.gpu_qos_conf = GpuQosConf::Missing;
        assert_eq!(
            kinds(&site),
            [(Severity::Error, "gpu_qos_conf_missing".to_owned())]
        );
        // Without the plugin nothing makes lowprio jobs requeueable.
        let mut site =
            site_with(|c, _, _, _| replace(c, "JobRequeue              = 1", "JobRequeue = 0"));
        site.gpu_qos_conf = GpuQosConf::Missing;
        assert_eq!(
            kinds(&site),
            [
                (Severity::Error, "gpu_qos_conf_missing".to_owned()),
                (Severity::Warning, "job_requeue_off".to_owned())
            ]
        );
        // Without LowPriorityQOS the preempted QOS are found from Preempt lists.
        let found = audit(&site_with(|_, q, _, _| {
            replace(q, "requeue|00:02:00", "requeue|00:00:00")
        }));
        assert_eq!(found[0].object, "QOS lowprio");
    }

    #[test]
    fn priority_periods_left_at_their_default_are_noted_only_where_they_weigh() {
        let mut site = site_with(|c, _, _, _| {
            c.push_str("PriorityDecayHalfLife   = 7-00:00:00\nPriorityWeightAge = 10\n");
        });
        site.slurm_conf = Some("PriorityType=priority/multifactor\n# PriorityMaxAge=1-0\n".into());
        let found = audit(&site);
        let kinds: Vec<&str> = found.iter().map(|f| f.kind.as_str()).collect();
        assert_eq!(kinds, ["decay_half_life_default", "max_age_default"]);
        assert_eq!(
            found[0].what,
            "PriorityDecayHalfLife is not set in slurm.conf: Slurm's default 7-00:00:00 applies"
        );
        assert_eq!(found[1].severity, Severity::Note);
        // Set on purpose (any case, through an Include read into the text):
        // nothing to say.
        site.slurm_conf = Some("prioritydecayhalflife=7-0\nPriorityMaxAge=7-0\n".into());
        assert!(audit(&site).is_empty());
        // A weight of 0: the period changes nothing users see.
        let mut site = site_with(|c, _, _, _| replace(c, "FairShare = 1000", "FairShare = 0"));
        site.slurm_conf = Some(String::new());
        assert_eq!(
            kinds_of(&site),
            ["priority_weight_fairshare_zero".to_owned()]
        );
        // slurm.conf unreadable: the audit cannot tell, and says nothing.
        let mut site = site_with(|_, _, _, _| {});
        site.slurm_conf = None;
        assert!(audit(&site).is_empty());
    }

    fn kinds_of(site: &Site) -> Vec<String> {
        audit(site).into_iter().map(|f| f.kind).collect()
    }

    #[test]
    fn gpu_types_billed_alike_name_the_dearer_type_to_weigh() {
        let site = site_with(|_, _, p, _| replace(p, "GRES/gpu:h100=2.0", "GRES/gpu:a40=0"));
        let found = audit(&site);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            found[0].what,
            "gpu bills its GPU types a40, h100 alike (1 per GPU; no GRES/gpu:TYPE weight tells them apart)"
        );
        assert!(found[0]
            .fix
            .starts_with("PartitionName=gpu ... TRESBillingWeights=CPU=1.0,GRES/gpu=1.0,GRES/gpu:a40=0,GRES/gpu:h100=W"));
        let p = &site.partitions[0];
        assert_eq!((gpu_cost(p, "a40"), gpu_cost(p, "h100")), (1.0, 1.0));
        let priced = site_with(|_, _, _, _| {});
        assert_eq!(gpu_cost(&priced.partitions[0], "h100"), 3.0);
        // An untracked type cannot be weighed (slurmctld refuses the
        // weight): only tres_untracked is said.
        let untracked = site_with(|c, _, p, _| {
            replace(p, "GRES/gpu:h100=2.0", "GRES/gpu:a40=0");
            replace(c, ",gres/gpu:h100", "");
        });
        assert_eq!(kinds_of(&untracked), ["tres_untracked".to_owned()]);
    }

    #[test]
    fn unreadable_parts_become_notes() {
        let site = site_with(|_, q, _, _| q.push_str("broken|line\n"));
        let found = audit(&site);
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].severity, found[0].kind.as_str()),
            (Severity::Note, "unread")
        );
        assert!(found[0].what.contains("2 fields"));
    }

    #[test]
    fn report_exit_codes_and_json() {
        let site = site_with(|c, _, _, _| {
            replace(
                c,
                "PriorityWeightQOS       = 10000",
                "PriorityWeightQOS = 0",
            )
        });
        let found = audit(&site);
        assert_eq!(
            AuditReport::new(found.clone(), FailOn::Error, vec![]).exit,
            0
        );
        assert_eq!(
            AuditReport::new(found.clone(), FailOn::Warning, vec![]).exit,
            1
        );
        assert_eq!(
            AuditReport::new(found.clone(), FailOn::Note, vec![]).exit,
            1
        );
        assert_eq!(AuditReport::new(vec![], FailOn::Note, vec![]).exit, 0);
        let report = AuditReport::new(found, FailOn::Warning, vec!["scontrol show config".into()]);
        let back: AuditReport = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(back, report);
        let value: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(value["findings"][0]["severity"], "warning");
        assert_eq!(value["fail_on"], "warning");
        let table = report.to_table();
        assert!(
            table.contains("warning  slurm.conf PriorityWeightQOS is 0 or unset"),
            "{table}"
        );
        assert!(table.contains("fix: PriorityWeightQOS=10000"));
        assert!(table.ends_with("audit FAILED (--fail-on warning): 0 errors, 1 warning, 0 notes; read scontrol show config\n"));
        let unread = AuditReport::unread("sacctmgr: error", FailOn::Error);
        assert_eq!(unread.exit, 2);
        assert!(unread.to_json().contains("\"error\":\"sacctmgr: error\""));
    }
}
