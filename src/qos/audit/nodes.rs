//! The node link: nodes that offer mps need the node half of the
//! product (the SPANK plugin, prolog and epilog) and isolated devices.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::qos::check::Severity;
use crate::qos::site::NodeInfo;
use crate::shared::autodetect::is_mig_type;
use crate::shared::batch_start::{batch_start_seconds, ShortBatchStart, SLURM_BATCH_START_TIMEOUT};
use crate::shared::booking::MpsBooking;
use crate::shared::locations::DEFAULT_STATE_DIR;
use crate::shared::namespaces::{
    hiding_dir, namespace_plugin, pipes_dir, plugin_of, private_dirs, state_dir_of, yaml_dirs_key,
};

use super::finding::*;
use super::gathered::Site;

/// gpushare's node half (docs/install.md), after https://slurm.schedmd.com/gres.html
/// (MPS), spank.html (plugstack.conf) and cgroup.conf.html
/// (ConstrainDevices): the prolog/epilog keep the share state and daemons,
/// the SPANK plugin confines and configures tasks, and confinement needs
/// Slurm's device cgroup.
pub(super) fn mps_nodes(site: &Site, out: &mut Vec<AuditFinding>) {
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
        .and_then(crate::qos::site::plugstack_loads_gpu_mps)
        .is_none()
    {
        out.push(
            AuditFinding::new(
                Severity::Error,
                "spank_gpu_mps_missing",
                plugstack_path,
                DOC_SPANK,
            )
            .what(format!(
                "{nodes} offers mps, but plugstack.conf does not load spank_gpu_mps.so"
            ))
            .why("mps jobs get no MPS environment and no limits, and are not confined to their GPU")
            .fix("required spank_gpu_mps.so conf=/etc/slurm/gpu_mps.conf"),
        );
    }
    // ConstrainDevices acts only through task/cgroup (cgroup.conf.html).
    let constrain_devices = site
        .cgroup_conf
        .as_deref()
        .and_then(|t| crate::qos::site::conf_value(t, "ConstrainDevices"))
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
    shares_stack(site, &mps, out);
    pipes_hidden(site, &nodes, out);
    batch_start_short(site, &mps, &nodes, out);
}

/// The GPUs of a node's `Gres=` (MIG slices counted as they are offered).
fn gpus_of(node: &NodeInfo) -> u64 {
    node.gres
        .iter()
        .filter(|g| g.name == "gpu")
        .map(|g| g.count)
        .sum()
}

/// `BatchStartTimeout` below the time gpushare's prolog may take before a
/// batch job's script starts on the largest mps node
/// ([`ShortBatchStart`]), where it is known: `scontrol show config`
/// reports it; in a slurm.conf read as such, unset is Slurm's default.
fn batch_start_short(site: &Site, mps: &[&NodeInfo], nodes: &str, out: &mut Vec<AuditFinding>) {
    let s = &site.settings;
    let set = match s.get("BatchStartTimeout") {
        Some(value) => batch_start_seconds(value),
        None => s.from_file.then_some(SLURM_BATCH_START_TIMEOUT),
    };
    let gpus = mps.iter().map(|n| gpus_of(n)).max().unwrap_or(0);
    let gpus = u32::try_from(gpus).unwrap_or(u32::MAX);
    let Some(short) = set.and_then(|set| ShortBatchStart::of(set, gpus)) else {
        return;
    };
    out.push(
        AuditFinding::new(
            Severity::Warning,
            "batch_start_timeout_short",
            "slurm.conf",
            DOC_SLURM_CONF,
        )
        .what(format!("{nodes} offers mps, but {}", short.what()))
        .why(short.why())
        .fix(format!(
            "{} (slurmctld reads it at a restart or scontrol reconfigure: make either while no \
             prolog runs, see gpushare's docs/operations.md)",
            short.fix()
        )),
    );
}

/// Job namespaces that hide the MPS pipes, after
/// https://slurm.schedmd.com/job_container.conf.html (`Dirs=`, default
/// `/tmp,/dev/shm`) and namespace.yaml.html (`dirs:`, 25.11): each job
/// gets its own empty copy of those directories, so where one holds
/// `<StateDir>-mps` a share's task cannot reach its GPU's MPS server. The
/// plugin is the controller's (`NamespaceType`, else `JobContainerType`),
/// the directories and `StateDir` those of the files beside slurm.conf
/// (else Slurm's and gpushare's defaults). A job's own `/dev/shm` alone
/// hides nothing: MPS clients reach their server through the pipe
/// directory (`mps::namespaces`), so a reachable one is no finding.
fn pipes_hidden(site: &Site, nodes: &str, out: &mut Vec<AuditFinding>) {
    let s = &site.settings;
    let Some(plugin) = plugin_of(s.get("NamespaceType"), s.get("JobContainerType"))
        .or_else(|| site.slurm_conf.as_deref().and_then(namespace_plugin))
    else {
        return;
    };
    let (state_dir, whose) = match site.gpu_mps_conf.as_deref().and_then(state_dir_of) {
        Some(dir) => (dir, "StateDir= of the gpu_mps.conf beside slurm.conf"),
        None => (
            PathBuf::from(DEFAULT_STATE_DIR),
            "gpushare's default StateDir (no gpu_mps.conf beside slurm.conf sets one)",
        ),
    };
    let dirs = private_dirs(
        &plugin,
        site.job_container_conf.as_deref(),
        site.namespace_yaml.as_deref(),
    );
    let Some(dir) = hiding_dir(&dirs, &state_dir) else {
        return;
    };
    let linux = plugin.to_ascii_lowercase().ends_with("/linux");
    let (file, key, doc) = if linux {
        let key = site
            .namespace_yaml
            .as_deref()
            .map_or("dirs:", yaml_dirs_key);
        ("namespace.yaml", key, DOC_NAMESPACE_YAML)
    } else {
        ("job_container.conf", "Dirs=", DOC_JOB_CONTAINER_CONF)
    };
    let read = if linux {
        site.namespace_yaml.is_some()
    } else {
        site.job_container_conf.is_some()
    };
    let from = if read {
        format!("its {file}")
    } else {
        format!("Slurm's default {key} (no {file} beside slurm.conf)")
    };
    let move_state = if hiding_dir(&dirs, Path::new(DEFAULT_STATE_DIR)).is_none() {
        format!("StateDir={DEFAULT_STATE_DIR} in gpu_mps.conf (gpushare's default, which no job gets its own copy of)")
    } else {
        let all: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        format!("StateDir= in gpu_mps.conf outside {}", all.join(", "))
    };
    out.push(
        AuditFinding::new(
            Severity::Error,
            "mps_pipes_hidden_by_job_namespaces",
            file,
            doc,
        )
        .what(format!(
            "{nodes} offers mps under job namespaces ({plugin}): {from} gives each job its own {}, \
             which holds the MPS pipes under {} ({whose})",
            dir.display(),
            pipes_dir(&state_dir).display(),
        ))
        .why("every share fails at its start: its task cannot reach its GPU's MPS server")
        .fix(format!(
            "{move_state}, or take {} out of {key} in {file}",
            dir.display()
        )),
    );
}

/// Nodes whose gres.conf books mps per GPU (Slurm places their shares)
/// in a way Slurm does not spread: shares stack on one GPU until it is
/// full and the next wait while other GPUs of the node are free
/// ([`MpsBooking::stacking_fixes`]; under `AutoDetect=nvml`, from the
/// number of GPUs in the node's `Gres=`). Nodes that lack the same words
/// are one finding.
fn shares_stack(site: &Site, mps: &[&NodeInfo], out: &mut Vec<AuditFinding>) {
    let Some(gres) = site.gres_conf.as_deref() else {
        return;
    };
    // What `scontrol show config` says, and slurm.conf's own text where it
    // could be read: 23.11's show config leaves LL_SHARED_GRES out.
    let select = format!(
        "SelectTypeParameters={}\n{}",
        site.settings
            .get("SelectTypeParameters")
            .unwrap_or_default(),
        site.slurm_conf.as_deref().unwrap_or_default()
    );
    let mut by_fix: BTreeMap<Vec<String>, Vec<&str>> = BTreeMap::new();
    for node in mps {
        // Where Slurm detects the GPUs, gres.conf does not list them: the
        // node's Gres= says how many there are.
        let count = |mig: bool| -> u64 {
            node.gres
                .iter()
                .filter(|g| g.name == "gpu")
                .filter(|g| mig == g.gres_type.as_deref().is_some_and(is_mig_type))
                .map(|g| g.count)
                .sum()
        };
        let booking = MpsBooking::from_texts(gres, &select, &node.name)
            .with_reported_count(count(false) + count(true), count(true));
        let mut fixes = booking.stacking_fixes();
        if !fixes.is_empty() {
            fixes = vec![format!(
                "add {} (gpu-mps config prints the lines)",
                fixes.join(" and ")
            )];
        }
        fixes.extend(booking.mig_stacking());
        if !fixes.is_empty() {
            by_fix.entry(fixes).or_default().push(&node.name);
        }
    }
    for (fixes, nodes) in by_fix {
        let which = match nodes.as_slice() {
            [one] => format!("node {one}"),
            many => format!("{} nodes ({})", many.len(), many.join(",")),
        };
        out.push(
            AuditFinding::new(Severity::Warning, "mps_shares_stack", "gres.conf", DOC_GRES)
                .what(format!(
                    "{which} books mps per GPU, so Slurm places its shares, but stacks them on one GPU until it is full"
                ))
                .why("shares wait (Reason=Resources) while other GPUs of the node have room")
                .fix(fixes.join("; ")),
        );
    }
}

/// MPS nodes that may run more jobs at once than slurmd's connection
/// manager serves (`SlurmdParameters=conmgr_max_connections`, from 25.05,
/// default 512): slurm.conf(5) asks for at least the node's jobs, and a
/// dense MPS node (8 GPUs of 48 shares) comes near. A node's jobs are
/// bounded by its CPUs (each job holds one at least) and its mps count
/// (each share one unit at least).
pub(super) fn slurmd_connections(site: &Site, out: &mut Vec<AuditFinding>) {
    use crate::shared::slurm_release::{
        slurmd_connections_for, SLURMD_CONNECTIONS, SLURMD_CONNECTIONS_SINCE,
    };
    let s = &site.settings;
    if s.release().is_none_or(|r| r < SLURMD_CONNECTIONS_SINCE) {
        return;
    }
    let params = s.list("SlurmdParameters");
    let limit = params
        .iter()
        .filter_map(|p| p.strip_prefix("conmgr_max_connections="))
        .filter_map(|n| n.trim().parse::<u64>().ok())
        .next_back()
        .unwrap_or(SLURMD_CONNECTIONS);
    let most = site
        .nodes
        .iter()
        .filter(|n| n.has_mps())
        .filter_map(|n| {
            let mps: u64 = n
                .gres
                .iter()
                .filter(|g| g.name == "mps")
                .map(|g| g.count)
                .sum();
            let jobs = n.cpus.map_or(mps, |cpus| cpus.min(mps));
            (jobs > limit).then_some((n, mps, jobs))
        })
        .max_by_key(|(_, _, jobs)| *jobs);
    let Some((node, mps, jobs)) = most else {
        return;
    };
    let line = std::iter::once(format!(
        "conmgr_max_connections={}",
        slurmd_connections_for(jobs)
    ))
    .chain(
        params
            .iter()
            .filter(|p| !p.starts_with("conmgr_max_connections="))
            .cloned(),
    )
    .collect::<Vec<_>>()
    .join(",");
    out.push(
        AuditFinding::new(
            Severity::Warning,
            "slurmd_connections_short",
            format!("node {}", node.name),
            DOC_SLURM_CONF,
        )
        .what(format!(
            "node {} may run {jobs} jobs at once ({}{mps} mps), more than slurmd's \
             conmgr_max_connections ({limit})",
            node.name,
            node.cpus
                .map_or_else(String::new, |c| format!("{c} CPUs, ")),
        ))
        .why(
            "slurmd serves at most that many connections at once, and slurm.conf(5) asks for \
             at least as many as the node's jobs: with every share of the node starting or \
             ending at once, its steps' calls to slurmd wait",
        )
        .fix(format!("SlurmdParameters={line}")),
    );
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
