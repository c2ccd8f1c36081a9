//! The accounting links: limits enforced, the GPU TRES tracked,
//! `gpu_qos.conf` and the plugin closing the untyped-request hole, and
//! the group QOS flags.

use crate::qos::check::{self, Finding, Severity};
use crate::qos::config::{type_matches, Cap, GpuQosConfig};
use crate::qos::site::{AuditQos, NodeInfo};

use super::finding::*;
use super::gathered::{group_qos, plugin_loaded, GpuQosConf, Site};

/// https://slurm.schedmd.com/resource_limits.html ("Configuration"): limits
/// need accounting through slurmdbd and `AccountingStorageEnforce` with
/// `limits` (else no GrpTRES is enforced) and `qos` (else any QOS may be
/// requested and QOS limits are not applied as the design needs).
pub(super) fn accounting(site: &Site, out: &mut Vec<AuditFinding>) {
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
pub(super) fn tracked_tres(site: &Site, out: &mut Vec<AuditFinding>) {
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
pub(super) fn gpu_qos_conf(site: &Site, out: &mut Vec<AuditFinding>) {
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
                .why(format!(
                    "slurmctld keeps the last good policy; if it started with the file so, it \
                     runs on the last good copy it kept ({}/{}), or where none was ever kept, \
                     without its file: {}",
                    site.settings
                        .get("StateSaveLocation")
                        .unwrap_or("StateSaveLocation"),
                    crate::qos::config::last_good::COPY_NAME,
                    crate::qos::config::WITHOUT_FILE
                ))
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
pub(super) fn partition_levels(
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

/// The GPU types the nodes' `Gres=` carry, sorted, each once.
fn node_gpu_types(site: &Site) -> Vec<String> {
    let mut known: Vec<String> = site
        .nodes
        .iter()
        .flat_map(|n| n.gpu_types().map(str::to_owned))
        .collect();
    known.sort();
    known.dedup();
    known
}

/// The nodes' types that `entry` may have meant: one holds the other, as
/// a type written from the docs (`a100_3g.20gb`) and one AutoDetect gave
/// (`nvidia_a100_3g.20gb`) do.
fn near_types<'a>(entry: &str, known: &'a [String]) -> Vec<&'a str> {
    let e = entry.to_ascii_lowercase();
    known
        .iter()
        .filter(|k| {
            let k = k.to_ascii_lowercase();
            k.contains(&e) || e.contains(&k)
        })
        .map(String::as_str)
        .collect()
}

/// https://slurm.schedmd.com/resource_limits.html (GrpTRES) and
/// gres.html (MIG Management): a GrpTRES entry counts only the TRES jobs
/// are given, and jobs are given the types the nodes' `Gres=` carry. An
/// entry on a type no node carries never counts a job, so the group's jobs
/// on the real type are not limited there. Under `AutoDetect=nvml` the
/// type is slurm.conf's where it is a substring of the detected one, else
/// the detected one (`nvidia_a100_3g.20gb`, not the `a100_3g.20gb` older
/// drivers gave): the common way such an entry comes about.
pub(super) fn grp_tres_types_on_nodes(site: &Site, out: &mut Vec<AuditFinding>) {
    let known = node_gpu_types(site);
    if known.is_empty() {
        return;
    }
    let on_nodes = |t: &str| known.iter().any(|k| k.eq_ignore_ascii_case(t));
    let mut flag = |object: String, holder: String, command: String, t: &str, n: u64| {
        let near = near_types(t, &known);
        let fix = match near.as_slice() {
            [one] => format!("{command} GrpTRES=gres/gpu:{t}=-1,gres/gpu:{one}={n}"),
            _ => format!(
                "{command} GrpTRES=gres/gpu:{t}=-1, and a limit on a type the nodes have ({})",
                known.join(", ")
            ),
        };
        out.push(
            AuditFinding::new(
                Severity::Warning,
                "grp_tres_type_on_no_node",
                object,
                DOC_RESOURCE_LIMITS,
            )
            .what(format!(
                "{holder} limits gres/gpu:{t}, a type no node's Gres carries (nodes have {})",
                known.join(", ")
            ))
            .why(
                "the limit never counts a job: jobs are given the nodes' types, which this \
                 level then does not limit",
            )
            .fix(fix),
        );
    };
    for q in &site.qos {
        let partitions: Vec<&str> = site
            .partitions
            .iter()
            .filter(|p| {
                p.qos
                    .as_deref()
                    .is_some_and(|n| n.eq_ignore_ascii_case(q.name()))
            })
            .map(|p| p.name.as_str())
            .collect();
        let holder = if partitions.is_empty() {
            format!("QOS {}", q.name())
        } else {
            format!("QOS {} (of partition {})", q.name(), partitions.join(", "))
        };
        for (t, n) in q.record.typed_limits().filter(|(t, _)| !on_nodes(t)) {
            let command = format!("sacctmgr -i modify qos {} set", q.name());
            flag(qos_object(q.name()), holder.clone(), command, t, n);
        }
    }
    for a in &site.associations {
        let mut command = match &a.user {
            None => format!("sacctmgr -i modify account where name={}", a.account),
            Some(u) => format!(
                "sacctmgr -i modify user where name={u} account={}",
                a.account
            ),
        };
        if let Some(p) = &a.partition {
            command.push_str(&format!(" partition={p}"));
        }
        command.push_str(" set");
        for l in &a.gpu_limits {
            let Some(t) = l.gpu_type.as_deref().filter(|t| !on_nodes(t)) else {
                continue;
            };
            flag(a.who(), a.who(), command.clone(), t, l.count);
        }
    }
}

/// The nodes' type `entry` (a type or pattern of `gpu_qos.conf`) was
/// likely meant for, in words (empty where none is near); `None` where
/// some node's GPUs carry it.
fn on_no_node(entry: &str, known: &[String]) -> Option<String> {
    if known.iter().any(|t| type_matches(entry, t)) {
        return None;
    }
    let near = near_types(entry, known);
    Some(if near.is_empty() || entry.contains(['*', '?']) {
        String::new()
    } else {
        format!(" ({})", near.join(" or "))
    })
}

/// A rule type (or pattern) that no node's GPUs carry: every job asking for
/// the site's real type is refused under the rule, or a pattern meant for
/// MIG slice types (`a100_*`) misses their real names. A per-type cap's
/// type that no node's GPUs carry: the cap holds no job, and jobs of the
/// type it was meant for run uncapped.
pub(super) fn rule_types_on_nodes(
    site: &Site,
    cfg: &GpuQosConfig,
    path: &str,
    out: &mut Vec<AuditFinding>,
) {
    let known = node_gpu_types(site);
    if known.is_empty() {
        return;
    }
    let nodes_have = known.join(", ");
    for rule in cfg.rules() {
        for entry in rule.gpu_types() {
            let Some(meant) = on_no_node(entry, &known) else {
                continue;
            };
            out.push(
                AuditFinding::new(
                    Severity::Warning,
                    "rule_type_on_no_node",
                    format!("{path}:{}", rule.line()),
                    DOC_RESOURCE_LIMITS,
                )
                .what(format!(
                    "GPUTypes entry {entry} matches no node's GPU type (nodes have {nodes_have})"
                ))
                .why("a job asking for that type can never run; one asking for the real type is refused")
                .fix(format!(
                    "write the type as the nodes' Gres= names it{meant}, in {path}:{}",
                    rule.line()
                )),
            );
        }
    }
    let caps = cfg.type_caps();
    for cap in Cap::ALL {
        for (entry, _) in caps.items(cap) {
            let Some(meant) = on_no_node(entry, &known) else {
                continue;
            };
            let key = cap.key();
            let item = caps.item(cap, entry).unwrap_or_default();
            out.push(
                AuditFinding::new(
                    Severity::Warning,
                    "cap_type_on_no_node",
                    format!("{path}: {key}"),
                    DOC_RESOURCE_LIMITS,
                )
                .what(format!(
                    "{key}={item} names a GPU type no node's GPUs carry (nodes have {nodes_have})"
                ))
                .why("the cap holds no job: jobs of the type it was meant for run uncapped")
                .fix(format!(
                    "write the type as the nodes' Gres= names it{meant}, in {path}'s {key} line"
                )),
            );
        }
    }
}

/// A `gpu-qos check` finding in the audit's shape.
pub(super) fn from_check(f: &Finding, path: &str) -> AuditFinding {
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
        Finding::OnlyWarns { at, .. } => (
            "Enforce=warn: its users are told what would be refused, nothing is refused",
            format!("Enforce=yes at {at} once its users type what they are told"),
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

/// https://slurm.schedmd.com/resource_limits.html (QOS Flags,
/// DenyOnLimit): without it a typed request that can never fit pends
/// forever instead of being refused at submit.
pub(super) fn group_flags(site: &Site, out: &mut Vec<AuditFinding>) {
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;

/// Running jobs with a QOS list, on a release whose slurmctld moves them
/// to the list's highest-priority QOS when it reloads its jobs (a restart,
/// `scontrol reconfigure`): SchedMD ticket 23033 ([`qos_lists`]).
///
/// [`qos_lists`]: crate::qos::slurm::qos_lists
pub(super) fn qos_lists(site: &Site, out: &mut Vec<AuditFinding>) {
    let Some(jobs) = site.qos_lists.as_deref().filter(|j| !j.is_empty()) else {
        return;
    };
    let version = site.settings.get("SLURM_VERSION").unwrap_or("this release");
    let shown: Vec<String> = jobs
        .iter()
        .take(5)
        .map(|j| {
            format!(
                "{} ({}, started under {})",
                j.job,
                j.requested.join(","),
                j.qos
            )
        })
        .collect();
    let more = jobs.len().saturating_sub(shown.len());
    let mut qos: Vec<&str> = jobs
        .iter()
        .flat_map(|j| j.requested.iter().map(String::as_str))
        .collect();
    qos.sort_unstable();
    qos.dedup();
    out.push(
        AuditFinding::new(
            Severity::Warning,
            "qos_list_moved_on_restart",
            format!("QOS {}", qos.join(",")),
            DOC_QOS,
        )
        .what(format!(
            "{} running job{} asked for a list of QOS: {}{}",
            jobs.len(),
            if jobs.len() == 1 { "" } else { "s" },
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ))
        .why(format!(
            "slurmctld {version} moves a running job with a QOS list to the list's \
             highest-priority QOS when it loads its jobs again (a restart, or scontrol \
             reconfigure, which restarts it), and charges that QOS's GrpTRES usage with the \
             job's GPUs while the QOS it started under is charged nothing (SchedMD ticket \
             23033, fixed after 26.05): group limits, gpu-qos why and gpu-qos usage read \
             those QOS wrong until the jobs end"
        ))
        .fix(
            "restart or reconfigure slurmctld only once these jobs have ended, or ask users to \
             name one QOS (--qos=QOS); `scontrol -o show assoc_mgr flags=qos` shows the usage \
             Slurm counts",
        ),
    );
}
