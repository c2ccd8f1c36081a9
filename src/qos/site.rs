//! What a site's Slurm says about itself, read for `gpu-qos audit`: the
//! output of `scontrol show config`, `scontrol show node -o`,
//! `scontrol show partition -o` and `sacctmgr -nP show qos`, or `slurm.conf`
//! itself when slurmctld does not answer, plus `plugstack.conf` and
//! `cgroup.conf`.
//!
//! Every reader here is lenient, unlike [`super::check::parse_sacctmgr`]:
//! an audit that stops at the first odd line tells the admin nothing about
//! the other ninety settings, so what cannot be read is kept as an
//! [`Unread`] line, which the audit reports as a note, and the rest is
//! still checked. Nothing here panics on any input (a property test says
//! so).
//!
//! Formats, as Slurm 22.05 through 26.05 print them (checked on 22.05.8):
//! - `scontrol show config`: `Key = Value` lines, the key padded with
//!   spaces, `(null)` for unset; section titles (`Cgroup Support
//!   Configuration:`) and the closing `Slurmctld(primary) at host is UP`
//!   have no ` = `. Keys differ in case from slurm.conf
//!   (`PriorityWeightFairShare`), so they are compared without case.
//! - `scontrol show node -o` / `show partition -o`: one record per line of
//!   space-separated `Key=Value` words; a few values hold spaces
//!   (`OS=Linux 6.1 #1 SMP`), none of the keys read here do.
//! - `sacctmgr -nP`: `|`-separated fields, TRES as `gres/gpu:a40=4`,
//!   `GraceTime` as `[D-]HH:MM:SS`, `UsageFactor` as `1.000000`,
//!   `PreemptMode` `cluster` when the QOS inherits the cluster's mode.

use serde::{Deserialize, Serialize};

use super::check::{parse_grp_tres, GpuTresLimit, QosRecord};
use crate::shared::syntax::split_top_level;

/// The arguments `gpu-qos audit` passes to `sacctmgr`; [`parse_qos`] reads
/// exactly these fields.
pub const AUDIT_SACCTMGR_ARGS: [&str; 4] = [
    "-nP",
    "show",
    "qos",
    "format=Name,GrpTRES,Preempt,PreemptMode,GraceTime,UsageFactor,Flags,Priority",
];
const QOS_FIELDS: usize = 8;

/// Something the audit could not read: where, and what was there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unread {
    /// `sacctmgr line 3`, `slurm.conf:12`, `scontrol show node`.
    pub source: String,
    pub reason: String,
}

/// Slurm's global settings, from `scontrol show config` or `slurm.conf`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlurmSettings {
    /// In the order read, repeats kept.
    pairs: Vec<(String, String)>,
    /// Whether unset keys mean Slurm's default (`slurm.conf`) or "not
    /// reported" (`scontrol show config` reports every key it has).
    pub from_file: bool,
}

impl SlurmSettings {
    /// Reads `scontrol show config`.
    pub fn from_show_config(text: &str) -> Self {
        let mut settings = SlurmSettings::default();
        for line in text.lines() {
            let Some((key, value)) = line.split_once(" = ").or_else(|| {
                // `PowerPlugin             = ` ends in "=" with nothing after.
                line.trim_end().strip_suffix(" =").map(|k| (k, ""))
            }) else {
                continue;
            };
            let key = key.trim();
            if key.is_empty() || key.contains(' ') {
                continue;
            }
            settings.push(key, value.trim());
        }
        settings
    }

    /// Keeps every pair. `Prolog[0]`, `Prolog[1]` (23.11+ print each of
    /// several `Prolog=` that way) are kept under `Prolog`.
    fn push(&mut self, key: &str, value: &str) {
        let key = match key.split_once('[') {
            Some((base, index)) if index.ends_with(']') => base,
            _ => key,
        };
        self.pairs.push((key.to_owned(), value.to_owned()));
    }

    /// Every value given for `key` (several `Prolog=` lines), in order.
    pub fn all(&self, key: &str) -> Vec<&str> {
        self.pairs
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty() && *v != "(null)")
            .collect()
    }

    fn get_raw(&self, key: &str) -> Option<&str> {
        let mut matching = self
            .pairs
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str());
        // In slurm.conf the last of a repeated key counts (Slurm warns);
        // scontrol prints each key once, its slurm.conf section first.
        if self.from_file {
            matching.next_back()
        } else {
            matching.next()
        }
    }

    /// The value of `key`; `None` when unset, empty or `(null)`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.get_raw(key)
            .map(str::trim)
            .filter(|v| !v.is_empty() && *v != "(null)")
    }

    /// slurmctld's release (`SLURM_VERSION`), as major and minor.
    pub fn release(&self) -> Option<(u32, u32)> {
        crate::shared::slurm_release::parse(self.get("SLURM_VERSION")?).ok()
    }

    /// A comma list, items trimmed, empty items dropped.
    pub fn list(&self, key: &str) -> Vec<String> {
        split_list(self.get(key).unwrap_or(""))
    }

    /// Whether the comma list `key` holds `item`, without case.
    pub fn list_has(&self, key: &str, item: &str) -> bool {
        self.list(key).iter().any(|i| i.eq_ignore_ascii_case(item))
    }

    /// A whole number; `None` when unset or not a number (`UNLIMITED`).
    pub fn number(&self, key: &str) -> Option<u64> {
        self.get(key).and_then(|v| v.parse().ok())
    }

    /// How many settings were read.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}

fn split_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// One generic resource of a node's `Gres=`: `gpu:a40:4`, `mps:1600`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GresItem {
    pub name: String,
    pub gres_type: Option<String>,
    pub count: u64,
}

/// A node as far as the audit cares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    pub gres: Vec<GresItem>,
    pub partitions: Vec<String>,
    /// `State=` (`IDLE`, `MIXED+DRAIN`, ...); empty from slurm.conf.
    pub state: String,
    /// `AllocTRES=`: what running jobs hold now (`gres/gpu:a40=2,...`).
    pub alloc_tres: String,
    /// Its CPUs (`CPUTot=`, slurm.conf's `CPUs=`), where given.
    pub cpus: Option<u64>,
}

impl NodeInfo {
    /// GPU types on the node, in `Gres=` order.
    pub fn gpu_types(&self) -> impl Iterator<Item = &str> {
        self.gres
            .iter()
            .filter(|g| g.name == "gpu")
            .filter_map(|g| g.gres_type.as_deref())
    }

    pub fn has_gpus(&self) -> bool {
        self.gres.iter().any(|g| g.name == "gpu")
    }

    pub fn has_mps(&self) -> bool {
        self.gres.iter().any(|g| g.name == "mps")
    }
}

/// The GPU types on those of `nodes` in partition `name`, sorted.
pub fn partition_gpu_types(nodes: &[NodeInfo], name: &str) -> Vec<String> {
    let mut t: Vec<String> = nodes
        .iter()
        .filter(|n| n.partitions.iter().any(|x| x == name))
        .flat_map(|n| n.gpu_types().map(str::to_owned))
        .collect();
    t.sort_unstable();
    t.dedup();
    t
}

/// A partition as far as the audit cares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionInfo {
    pub name: String,
    /// `Nodes=` as written (a hostlist expression).
    pub nodes: String,
    /// `TRESBillingWeights=` entries, keys as written (`GRES/gpu:a40`).
    pub billing: Vec<(String, String)>,
    /// The partition's `QOS=`, whose limits apply to every job in it.
    pub qos: Option<String>,
}

impl PartitionInfo {
    /// The weight for a TRES (`gres/gpu`, `gres/gpu:a40`), without case.
    pub fn billing_weight(&self, tres: &str) -> Option<&str> {
        self.billing
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(tres))
            .map(|(_, v)| v.as_str())
    }
}

/// The words of a `-o` record or slurm.conf line: (key, value) for each
/// `Key=Value` word, in order.
fn words(line: &str) -> impl Iterator<Item = (&str, &str)> {
    line.split_whitespace().filter_map(|w| w.split_once('='))
}

/// A count with Slurm's K/M/G suffixes.
fn count(text: &str) -> Option<u64> {
    let (digits, factor) = match text.char_indices().last() {
        Some((i, 'k' | 'K')) => (&text[..i], 1024),
        Some((i, 'm' | 'M')) => (&text[..i], 1024 * 1024),
        Some((i, 'g' | 'G')) => (&text[..i], 1024 * 1024 * 1024),
        _ => (text, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(factor)
}

/// Reads a node's `Gres=` value (`gpu:a40:4(S:0),mps:1600`); unreadable
/// items are returned as reasons.
pub fn parse_gres(text: &str) -> (Vec<GresItem>, Vec<String>) {
    let mut items = Vec::new();
    let mut bad = Vec::new();
    if text == "(null)" {
        return (items, bad);
    }
    for raw in split_top_level(text, '(', ')').into_iter().map(str::trim) {
        let item = raw.split('(').next().unwrap_or("");
        // `no_consume` and other flags may sit between type and count.
        let parts: Vec<&str> = item
            .split(':')
            .filter(|p| !p.eq_ignore_ascii_case("no_consume"))
            .collect();
        let parsed = match parts[..] {
            [name] if !name.is_empty() => Some((name, None, 1)),
            [name, last] if !name.is_empty() => match count(last) {
                Some(n) => Some((name, None, n)),
                None if !last.is_empty() => Some((name, Some(last), 1)),
                None => None,
            },
            [name, t, n] if !name.is_empty() && !t.is_empty() => {
                count(n).map(|n| (name, Some(t), n))
            }
            _ => None,
        };
        match parsed {
            Some((name, t, n)) => items.push(GresItem {
                name: name.to_ascii_lowercase(),
                gres_type: t.map(str::to_owned),
                count: n,
            }),
            None => bad.push(format!("Gres item \"{raw}\" is not NAME[:TYPE][:COUNT]")),
        }
    }
    (items, bad)
}

/// Reads one record per line of `scontrol show KIND -o`, named by its
/// `name_key` word; `read` takes each other word.
fn records<T: Default>(
    text: &str,
    kind: &str,
    name_key: &str,
    mut read: impl FnMut(&mut T, &str, &str, &mut Vec<Unread>),
) -> (Vec<(String, T)>, Vec<Unread>) {
    let source = format!("scontrol show {kind}");
    let mut found = Vec::new();
    let mut unread = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut name = None;
        let mut record = T::default();
        for (key, value) in words(line) {
            if key.eq_ignore_ascii_case(name_key) {
                name = Some(value.to_owned());
            } else {
                read(&mut record, key, value, &mut unread);
            }
        }
        match name.filter(|n| !n.is_empty()) {
            Some(name) => found.push((name, record)),
            None => unread.push(Unread {
                source: source.clone(),
                reason: format!("no {name_key} in \"{}\"", shorten(line)),
            }),
        }
    }
    (found, unread)
}

/// Reads `scontrol show node -o`: one node per line.
pub fn parse_nodes(text: &str) -> (Vec<NodeInfo>, Vec<Unread>) {
    let (found, unread) = records(
        text,
        "node",
        "NodeName",
        |node: &mut NodeInfo, key, value, unread| {
            if key.eq_ignore_ascii_case("Gres") {
                let (gres, bad) = parse_gres(value);
                node.gres = gres;
                unread.extend(bad.into_iter().map(|reason| Unread {
                    source: "scontrol show node".into(),
                    reason,
                }));
            } else if key.eq_ignore_ascii_case("Partitions") {
                node.partitions = split_list(value);
            } else if key.eq_ignore_ascii_case("State") {
                value.clone_into(&mut node.state);
            } else if key.eq_ignore_ascii_case("AllocTRES") {
                value.clone_into(&mut node.alloc_tres);
            } else if key.eq_ignore_ascii_case("CPUTot") {
                node.cpus = value.parse().ok();
            }
        },
    );
    let nodes = found
        .into_iter()
        .map(|(name, node)| NodeInfo { name, ..node })
        .collect();
    (nodes, unread)
}

/// Reads `TRESBillingWeights=` (`CPU=1.0,Mem=0.25G,GRES/gpu:a40=3`).
pub fn parse_billing(text: &str) -> Vec<(String, String)> {
    split_list(text)
        .iter()
        .filter_map(|e| e.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// Reads `scontrol show partition -o`: one partition per line.
pub fn parse_partitions(text: &str) -> (Vec<PartitionInfo>, Vec<Unread>) {
    let (found, unread) = records(
        text,
        "partition",
        "PartitionName",
        |part: &mut PartitionInfo, key, value, _| {
            if key.eq_ignore_ascii_case("Nodes") {
                part.nodes = value.to_owned();
            } else if key.eq_ignore_ascii_case("TRESBillingWeights") {
                part.billing = parse_billing(value);
            } else if key.eq_ignore_ascii_case("QOS") {
                part.qos = partition_qos(value);
            }
        },
    );
    let parts = found
        .into_iter()
        .map(|(name, part)| PartitionInfo { name, ..part })
        .collect();
    (parts, unread)
}

/// A partition's `QOS=`: `scontrol` writes `N/A` for none.
fn partition_qos(value: &str) -> Option<String> {
    let v = value.trim();
    (!v.is_empty() && !v.eq_ignore_ascii_case("N/A") && !v.eq_ignore_ascii_case("(null)"))
        .then(|| v.to_owned())
}

fn shorten(text: &str) -> String {
    let short: String = text.chars().take(80).collect();
    if short.len() < text.len() {
        format!("{short}...")
    } else {
        short
    }
}

/// `slurm.conf` read directly, when `scontrol show config` is not there:
/// global keys, nodes and partitions. Hostlists are not expanded, so a
/// node line stands for all of its nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlurmConfFile {
    pub settings: SlurmSettings,
    pub nodes: Vec<NodeInfo>,
    pub partitions: Vec<PartitionInfo>,
    pub unread: Vec<Unread>,
}

/// Reads `slurm.conf` (named `file` in what cannot be read).
pub fn parse_slurm_conf(text: &str, file: &str) -> SlurmConfFile {
    let mut conf = SlurmConfFile {
        settings: SlurmSettings {
            from_file: true,
            ..SlurmSettings::default()
        },
        ..SlurmConfFile::default()
    };
    for (index, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = format!("{file}:{}", index + 1);
        let first = line.split_whitespace().next().unwrap_or("");
        if first.eq_ignore_ascii_case("include") {
            conf.unread.push(Unread {
                source: at,
                reason: format!("\"{line}\": included files are not read by the audit"),
            });
            continue;
        }
        let pairs: Vec<(&str, &str)> = words(line).collect();
        let Some(&(key, value)) = pairs.first() else {
            conf.unread.push(Unread {
                source: at,
                reason: format!("\"{}\" is not Key=Value", shorten(line)),
            });
            continue;
        };
        if key.eq_ignore_ascii_case("NodeName") {
            if value.eq_ignore_ascii_case("DEFAULT") {
                continue;
            }
            let mut node = NodeInfo {
                name: value.to_owned(),
                ..NodeInfo::default()
            };
            for &(k, v) in &pairs[1..] {
                if k.eq_ignore_ascii_case("Gres") {
                    let (gres, bad) = parse_gres(v);
                    node.gres = gres;
                    conf.unread.extend(bad.into_iter().map(|reason| Unread {
                        source: at.clone(),
                        reason,
                    }));
                } else if k.eq_ignore_ascii_case("CPUs") || k.eq_ignore_ascii_case("Procs") {
                    node.cpus = v.parse().ok();
                }
            }
            conf.nodes.push(node);
        } else if key.eq_ignore_ascii_case("PartitionName") {
            if value.eq_ignore_ascii_case("DEFAULT") {
                continue;
            }
            let mut part = PartitionInfo {
                name: value.to_owned(),
                ..PartitionInfo::default()
            };
            for &(k, v) in &pairs[1..] {
                if k.eq_ignore_ascii_case("Nodes") {
                    part.nodes = v.to_owned();
                } else if k.eq_ignore_ascii_case("TRESBillingWeights") {
                    part.billing = parse_billing(v);
                } else if k.eq_ignore_ascii_case("QOS") {
                    part.qos = partition_qos(v);
                }
            }
            conf.partitions.push(part);
        } else if key.eq_ignore_ascii_case("NodeSet")
            || key.eq_ignore_ascii_case("DownNodes")
            || key.eq_ignore_ascii_case("FrontendName")
        {
            continue;
        } else {
            for (k, v) in pairs {
                conf.settings.push(k, v);
            }
        }
    }
    // Without `scontrol` the node→partition map comes from `Nodes=`: exact
    // names only (hostlists are not expanded), or `ALL`.
    for node in &mut conf.nodes {
        for part in &conf.partitions {
            let listed = split_list(&part.nodes)
                .iter()
                .any(|n| n == &node.name || n.eq_ignore_ascii_case("ALL"));
            if listed {
                node.partitions.push(part.name.clone());
            }
        }
    }
    conf
}

/// A QOS as the audit reads it: the GPU limits and preemption of
/// [`QosRecord`] plus what preemption and priority need.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditQos {
    pub record: QosRecord,
    /// Lower case; `cluster` means "the cluster's PreemptMode".
    pub preempt_mode: Option<String>,
    /// Seconds.
    pub grace_time: Option<u64>,
    pub usage_factor: Option<f64>,
    pub flags: Vec<String>,
    pub priority: Option<u64>,
}

impl AuditQos {
    pub fn name(&self) -> &str {
        &self.record.name
    }

    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f.eq_ignore_ascii_case(flag))
    }
}

/// A duration as `sacctmgr` prints it: `[D-]HH:MM:SS`, `MM:SS` or seconds.
pub fn parse_duration(text: &str) -> Option<u64> {
    let text = text.trim();
    let (days, clock) = match text.split_once('-') {
        Some((d, rest)) => (d.parse::<u64>().ok()?, rest),
        None => (0, text),
    };
    let parts: Vec<u64> = clock
        .split(':')
        .map(|p| p.parse::<u64>().ok())
        .collect::<Option<_>>()?;
    let secs = match parts[..] {
        [s] => s,
        [m, s] => m.checked_mul(60)?.checked_add(s)?,
        [h, m, s] => h
            .checked_mul(3600)?
            .checked_add(m.checked_mul(60)?)?
            .checked_add(s)?,
        _ => return None,
    };
    days.checked_mul(86_400)?.checked_add(secs)
}

/// Reads `sacctmgr` run with [`AUDIT_SACCTMGR_ARGS`]. A line with the wrong
/// number of fields is skipped; a field that cannot be read is left unset;
/// both are reported as [`Unread`].
pub fn parse_qos(text: &str) -> (Vec<AuditQos>, Vec<Unread>) {
    let mut all: Vec<AuditQos> = Vec::new();
    let mut unread = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let source = format!("sacctmgr show qos, line {}", index + 1);
        let mut note = |reason: String| {
            unread.push(Unread {
                source: source.clone(),
                reason,
            })
        };
        let fields: Vec<&str> = raw.split('|').map(str::trim).collect();
        let [name, grp_tres, preempt, mode, grace, usage, flags, priority] = fields[..] else {
            note(format!(
                "{} fields in \"{}\", expected {QOS_FIELDS}",
                fields.len(),
                shorten(raw)
            ));
            continue;
        };
        if name.is_empty() || all.iter().any(|q| q.name().eq_ignore_ascii_case(name)) {
            note(format!("no name, or listed twice: \"{}\"", shorten(raw)));
            continue;
        }
        let gpu_limits: Vec<GpuTresLimit> = match parse_grp_tres(grp_tres) {
            Ok(limits) => limits,
            Err(reason) => {
                note(format!("GrpTRES \"{grp_tres}\" of QOS {name}: {reason}"));
                Vec::new()
            }
        };
        let optional = |text: &str| (!text.is_empty()).then(|| text.to_owned());
        let grace_time = optional(grace).and_then(|g| {
            let secs = parse_duration(&g);
            if secs.is_none() {
                note(format!("GraceTime \"{g}\" of QOS {name} is not a duration"));
            }
            secs
        });
        let usage_factor = optional(usage).and_then(|u| {
            let factor = u.parse::<f64>().ok().filter(|f| f.is_finite());
            if factor.is_none() {
                note(format!("UsageFactor \"{u}\" of QOS {name} is not a number"));
            }
            factor
        });
        let priority = optional(priority).and_then(|p| {
            let n = p.parse::<u64>().ok();
            if n.is_none() {
                note(format!("Priority \"{p}\" of QOS {name} is not a number"));
            }
            n
        });
        all.push(AuditQos {
            record: QosRecord {
                name: name.to_owned(),
                gpu_limits,
                preempt: split_list(preempt),
            },
            preempt_mode: optional(mode).map(|m| m.to_ascii_lowercase()),
            grace_time,
            usage_factor,
            flags: split_list(flags),
            priority,
        });
    }
    (all, unread)
}

/// Whether `plugstack.conf` loads gpushare's SPANK plugin: a `required` or
/// `optional` line naming `spank_gpu_mps.so`, and the line's number.
pub fn plugstack_loads_gpu_mps(text: &str) -> Option<(usize, bool)> {
    text.lines().enumerate().find_map(|(i, raw)| {
        let line = raw.split('#').next().unwrap_or("");
        let mut w = line.split_whitespace();
        let kind = w.next()?;
        let path = w.next()?;
        let named = path.rsplit('/').next() == Some("spank_gpu_mps.so");
        let required = kind.eq_ignore_ascii_case("required");
        (named && (required || kind.eq_ignore_ascii_case("optional"))).then_some((i + 1, required))
    })
}

/// The value of `key` in a `Key=Value` file such as `cgroup.conf`.
pub fn conf_value(text: &str, key: &str) -> Option<String> {
    text.lines()
        .flat_map(|raw| words(raw.split('#').next().unwrap_or("")))
        .filter(|(k, _)| k.eq_ignore_ascii_case(key))
        .last()
        .map(|(_, v)| v.to_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Abridged from Slurm 22.05.8 (`scontrol show config` on the test cluster).
    const SHOW_CONFIG_22_05: &str = "\
Configuration data as of 2026-11-23T06:58:12
AccountingStorageEnforce = associations,limits,qos,safe
AccountingStorageTRES   = cpu,mem,energy,node,billing,fs/disk,vmem,pages,gres/gpu,gres/gpu:a40
AccountingStorageType   = accounting_storage/slurmdbd
Epilog                  = (null)
JobRequeue              = 1
JobSubmitPlugins        = gpu_qos
PowerPlugin             = 
PreemptMode             = REQUEUE
PreemptType             = preempt/qos
PriorityType            = priority/multifactor
PriorityWeightFairShare = 1000
PriorityWeightQOS       = 10000
SlurmctldHost[0]        = vm(127.0.0.1)
SLURM_CONF              = /etc/slurm/slurm.conf

Cgroup Support Configuration:
ConstrainDevices        = yes

Slurmctld(primary) at vm is UP
";

    #[test]
    fn reads_show_config_of_22_05() {
        let s = SlurmSettings::from_show_config(SHOW_CONFIG_22_05);
        assert_eq!(
            s.get("accountingstorageenforce"),
            Some("associations,limits,qos,safe")
        );
        assert!(s.list_has("AccountingStorageTRES", "GRES/GPU:A40"));
        assert_eq!(s.get("Epilog"), None);
        assert_eq!(s.get("PowerPlugin"), None);
        assert_eq!(s.number("JobRequeue"), Some(1));
        // slurm.conf spells it PriorityWeightFairshare.
        assert_eq!(s.number("PriorityWeightFairshare"), Some(1000));
        assert_eq!(s.get("SlurmctldHost"), Some("vm(127.0.0.1)"));
        assert_eq!(s.get("ConstrainDevices"), Some("yes"));
        assert_eq!(s.get("SLURM_CONF"), Some("/etc/slurm/slurm.conf"));
        assert!(!s.from_file);
    }

    #[test]
    fn reads_show_config_of_newer_releases() {
        // 24.11/26.05 print the same layout; TRES lists carry more defaults.
        let text = "Configuration data as of 2026-01-01T00:00:00\n\
            AccountingStorageTRES   = cpu,mem,energy,node,billing,fs/disk,vmem,pages,gres/gpu,gres/gpu:a40,gres/gpu:h100\n\
            PriorityType            = priority/multifactor\n\
            PriorityWeightQOS       = 0\n\
            MCSParameters           = (null)\n\
            Prolog[0]               = /etc/slurm/prolog.d/site\n\
            Prolog[1]               = /usr/libexec/gpushare/gpu-mps-prolog\n";
        let s = SlurmSettings::from_show_config(text);
        // 23.11+ print each of several Prolog= as Prolog[N].
        assert_eq!(
            s.all("Prolog"),
            [
                "/etc/slurm/prolog.d/site",
                "/usr/libexec/gpushare/gpu-mps-prolog"
            ]
        );
        assert_eq!(s.get("Prolog"), Some("/etc/slurm/prolog.d/site"));
        assert!(s.list_has("AccountingStorageTRES", "gres/gpu:h100"));
        assert_eq!(s.number("PriorityWeightQOS"), Some(0));
        assert_eq!(s.get("MCSParameters"), None);
    }

    #[test]
    fn reads_nodes_and_their_gres() {
        let text = "NodeName=node1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 Gres=gpu:a40:4(S:0),gpu:h100:2(S:0,1),mps:600 NodeAddr=127.0.0.1 OS=Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC  Partitions=gpu,debug  CfgTRES=cpu=32\n\
                    NodeName=cpu1 Gres=(null) Partitions=cpu\n";
        let (nodes, unread) = parse_nodes(text);
        assert!(unread.is_empty(), "{unread:?}");
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[0].gpu_types().collect::<Vec<_>>(), ["a40", "h100"]);
        assert!(nodes[0].has_mps() && nodes[0].has_gpus());
        assert_eq!(nodes[0].partitions, ["gpu", "debug"]);
        assert!(!nodes[1].has_gpus());
        assert_eq!(
            parse_gres("gpu:4,gpu:tesla:no_consume:2,shard:8K").0,
            [
                GresItem {
                    name: "gpu".into(),
                    gres_type: None,
                    count: 4
                },
                GresItem {
                    name: "gpu".into(),
                    gres_type: Some("tesla".into()),
                    count: 2
                },
                GresItem {
                    name: "shard".into(),
                    gres_type: None,
                    count: 8192
                },
            ]
        );
        assert_eq!(parse_gres("gpu:a40:x").1.len(), 1);
    }

    #[test]
    fn reads_partitions_and_billing_weights() {
        let text = "PartitionName=gpu AllowGroups=ALL Nodes=node[1-4] PreemptMode=REQUEUE TRESBillingWeights=CPU=1.0,Mem=0.25G,GRES/gpu=2.0,GRES/gpu:a40=3 TRES=cpu=32\n\
                    PartitionName=cpu Nodes=cpu1\n";
        let (parts, unread) = parse_partitions(text);
        assert!(unread.is_empty());
        assert_eq!(parts[0].nodes, "node[1-4]");
        assert_eq!(parts[0].billing_weight("gres/gpu"), Some("2.0"));
        assert_eq!(parts[0].billing_weight("GRES/gpu:a40"), Some("3"));
        assert!(parts[1].billing.is_empty());
    }

    #[test]
    fn reads_sacctmgr_qos_of_22_05_and_later() {
        let text = "\
normal|||cluster|00:00:00|1.000000||0
lowprio|||requeue|1-01:00:02|0.000000||0
qos_lafferty|cpu=8,gres/gpu:a40=4|lowprio|cluster|00:00:00|1.000000|DenyOnLimit,NoDecay|100
";
        let (qos, unread) = parse_qos(text);
        assert!(unread.is_empty(), "{unread:?}");
        assert_eq!(qos.len(), 3);
        assert_eq!(qos[1].grace_time, Some(86_400 + 3600 + 2));
        assert_eq!(qos[1].usage_factor, Some(0.0));
        assert_eq!(qos[1].preempt_mode.as_deref(), Some("requeue"));
        assert_eq!(qos[2].record.expected_gpu_limit(), Some(4));
        assert!(qos[2].has_flag("denyonlimit"));
        assert_eq!(qos[2].record.preempt, ["lowprio"]);
        assert_eq!(qos[2].priority, Some(100));
    }

    #[test]
    fn unreadable_sacctmgr_fields_are_kept_as_unread() {
        let (qos, unread) =
            parse_qos("a|gres/gpu:a40=four|||soon|cheap||high\nshort|line\n|||||||\nb||||||| \n");
        assert_eq!(qos.len(), 2);
        assert!(qos[0].record.gpu_limits.is_empty());
        assert_eq!(
            (qos[0].grace_time, qos[0].usage_factor, qos[0].priority),
            (None, None, None)
        );
        let reasons: Vec<&str> = unread.iter().map(|u| u.reason.as_str()).collect();
        assert_eq!(reasons.len(), 6, "{reasons:?}");
        assert!(reasons[0].contains("gres/gpu:a40=four"));
        assert!(reasons[4].starts_with("2 fields"));
        assert!(unread[4].source.ends_with("line 2"));
    }

    #[test]
    fn reads_slurm_conf_when_slurmctld_is_away() {
        let text = "\
# site
AccountingStorageEnforce=limits,qos # comment
PriorityWeightFairshare=100
include /etc/slurm/nodes.conf
NodeName=DEFAULT CPUs=8
NodeName=gpu1 CPUs=32 Gres=gpu:a40:4,mps:1600
PartitionName=gpu Nodes=gpu1 TRESBillingWeights=GRES/gpu=1
PartitionName=all Nodes=ALL
";
        let conf = parse_slurm_conf(
            &format!("{text}PriorityWeightFairshare=200\n"),
            "slurm.conf",
        );
        assert!(conf.settings.from_file);
        // The last of a repeated key counts, as in Slurm.
        assert_eq!(conf.settings.number("PriorityWeightFairShare"), Some(200));
        assert_eq!(
            conf.settings.get("AccountingStorageEnforce"),
            Some("limits,qos")
        );
        assert_eq!(conf.nodes.len(), 1);
        assert_eq!(conf.nodes[0].partitions, ["gpu", "all"]);
        assert_eq!(conf.partitions[0].billing_weight("gres/gpu"), Some("1"));
        assert_eq!(conf.unread.len(), 1);
        assert_eq!(conf.unread[0].source, "slurm.conf:4");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("00:02:00"), Some(120));
        assert_eq!(parse_duration("2:00"), Some(120));
        assert_eq!(parse_duration("90"), Some(90));
        assert_eq!(parse_duration("2-00:00:00"), Some(172_800));
        assert_eq!(parse_duration("x"), None);
        assert_eq!(parse_duration("1:2:3:4"), None);
        assert_eq!(parse_duration("99999999999999999-00:00:00"), None);
    }

    #[test]
    fn plugstack_and_cgroup_conf() {
        let text = "# x\noptional /usr/lib/other.so\nrequired /usr/lib/slurm/spank_gpu_mps.so conf=/etc/slurm/gpu_mps.conf\n";
        assert_eq!(plugstack_loads_gpu_mps(text), Some((3, true)));
        assert_eq!(
            plugstack_loads_gpu_mps("#required spank_gpu_mps.so\n"),
            None
        );
        assert_eq!(
            plugstack_loads_gpu_mps("optional spank_gpu_mps.so"),
            Some((1, false))
        );
        assert_eq!(
            conf_value(
                "CgroupPlugin=cgroup/v1\nConstrainDevices=yes # why\n",
                "constraindevices"
            ),
            Some("yes".into())
        );
        assert_eq!(
            conf_value("#ConstrainDevices=yes\n", "ConstrainDevices"),
            None
        );
    }

    proptest! {
        #[test]
        fn readers_never_panic(text in "\\PC{0,200}") {
            let _ = SlurmSettings::from_show_config(&text);
            let _ = parse_nodes(&text);
            let _ = parse_partitions(&text);
            let _ = parse_slurm_conf(&text, "slurm.conf");
            let _ = parse_gres(&text);
            let _ = parse_duration(&text);
            let _ = plugstack_loads_gpu_mps(&text);
            let _ = conf_value(&text, "ConstrainDevices");
            let _ = parse_qos(&text);
        }

        #[test]
        fn shaped_sacctmgr_lines_are_read_or_noted(
            lines in prop::collection::vec(
                ("[a-z]{1,4}", "(gres/gpu(:[a-z0-9]{0,3})?=[0-9a-z]{0,2},?){0,3}",
                 "[a-z,]{0,6}", "(cluster|requeue|cancel|)",
                 "([0-9]{1,2}-)?[0-9:]{0,8}", "[0-9.a-z]{0,8}", "[A-Za-z,]{0,12}", "[0-9a-z]{0,3}",
                 0usize..3),
                0..6)
        ) {
            let mut text = String::new();
            for (n, t, p, m, g, u, f, pr, extra) in &lines {
                text.push_str(&format!("{n}|{t}|{p}|{m}|{g}|{u}|{f}|{pr}{}\n", "|".repeat(*extra)));
            }
            let (qos, unread) = parse_qos(&text);
            // A line is either read (possibly with notes) or noted, never lost.
            for (i, (n, _, _, _, _, _, _, _, extra)) in lines.iter().enumerate() {
                let source = format!("sacctmgr show qos, line {}", i + 1);
                let read = *extra == 0 && qos.iter().any(|q| q.name() == n);
                prop_assert!(read || unread.iter().any(|u| u.source == source), "{text}");
            }
        }
    }
}
