//! Reading `gpu_qos.conf`: each line's keys, each value checked, and
//! the file as a whole (no QOS in two rules, no key without the one it
//! needs).

use std::collections::HashMap;
use std::path::PathBuf;

use crate::shared::syntax::{self as kv, is_gpu_type, ConfigError};

use super::keys::{Key, LineValues, Problem};
use super::patterns::{is_pattern, type_matches};
use super::rules::{
    Enforce, ExemptUser, GpuLimit, GpuQosConfig, QosRule, RequireGpuType, RuleScope,
};

/// Parses the text of `gpu_qos.conf`; `file` only names it in errors.
pub fn parse(text: &str, file: &str) -> Result<GpuQosConfig, ConfigError> {
    let mut cfg = GpuQosConfig::default();
    // Line on which each global key was set, to report repeats.
    let mut global_seen: [Option<usize>; Key::ALL.len()] = [None; Key::ALL.len()];
    // Lower-cased QOS name → line of its rule; partition name → line.
    let mut rule_line_by_qos: HashMap<String, usize> = HashMap::new();
    let mut rule_line_by_partition: HashMap<String, usize> = HashMap::new();

    for (line_no, words) in kv::lines(text) {
        let error = |problem: Problem| ConfigError::new(file, line_no, problem);
        let words = words.map_err(|kv::MissingEquals(word)| error(Problem::MissingEquals(word)))?;
        let mut line = LineValues::default();
        for kv::Pair {
            key: key_text,
            value,
        } in words
        {
            let key = Key::from_name(key_text)
                .ok_or_else(|| error(Problem::UnknownKey(key_text.to_owned())))?;
            if value.is_empty() {
                return Err(error(Problem::EmptyValue(key.name())));
            }
            match line.values.get_mut(key.index()) {
                Some(Some(_)) => return Err(error(Problem::KeyTwiceOnLine(key.name()))),
                Some(slot) => *slot = Some(value),
                None => {}
            }
        }

        if let Some(scope) = rule_scope(&line).map_err(error)? {
            let rule = parse_rule(&line, scope, line_no).map_err(error)?;
            let index = cfg.rules.len();
            match &rule.scope {
                RuleScope::Qos(names) => {
                    for qos in names {
                        let folded = qos.to_ascii_lowercase();
                        if let Some(&first_line) = rule_line_by_qos.get(&folded) {
                            return Err(error(Problem::InTwoRules {
                                what: "QOS",
                                name: qos.clone(),
                                first_line,
                            }));
                        }
                        rule_line_by_qos.insert(folded.clone(), line_no);
                        cfg.rule_by_qos.insert(folded, index);
                    }
                }
                RuleScope::Partition(names) => {
                    for partition in names {
                        if let Some(&first_line) = rule_line_by_partition.get(partition) {
                            return Err(error(Problem::InTwoRules {
                                what: "Partition",
                                name: partition.clone(),
                                first_line,
                            }));
                        }
                        rule_line_by_partition.insert(partition.clone(), line_no);
                        cfg.rule_by_partition.insert(partition.clone(), index);
                    }
                }
                RuleScope::Association { .. } => cfg.association_rules.push(index),
            }
            for ty in &rule.gpu_types {
                if !is_pattern(ty) && !cfg.known_gpu_types.contains(ty) {
                    cfg.known_gpu_types.push(ty.clone());
                }
            }
            cfg.default_gpu_types |= rule.default_gpu_type.is_some();
            cfg.rules.push(rule);
            continue;
        }

        for key in Key::ALL {
            let Some(value) = line.get(key) else { continue };
            if key.is_rule_key() {
                return Err(error(Problem::RuleKeyWithoutQos(key.name())));
            }
            if let Some(slot) = global_seen.get_mut(key.index()) {
                if let Some(first_line) = *slot {
                    return Err(error(Problem::GlobalKeyRepeated {
                        key: key.name(),
                        first_line,
                    }));
                }
                *slot = Some(line_no);
            }
            set_global(&mut cfg, key, value).map_err(error)?;
        }
    }

    if let Some(line) = global_seen
        .get(Key::LowPriorityMaxArrayTasks.index())
        .copied()
        .flatten()
    {
        if cfg.low_priority_qos.is_empty() {
            return Err(ConfigError::new(
                file,
                line,
                Problem::NeedsOtherKey {
                    key: Key::LowPriorityMaxArrayTasks.name(),
                    needs: Key::LowPriorityQos.name(),
                },
            ));
        }
    }
    Ok(cfg)
}

/// The `MetricsFile=` of a file that does not parse as a whole, where
/// the line that sets it is valid on its own: the plugin still publishes
/// its metrics (`gpushare_policy_config_ok 0` above all) where the site
/// reads them.
pub fn metrics_file_in(text: &str) -> Option<PathBuf> {
    text.lines()
        .filter_map(|line| parse(&format!("{line}\n"), "").ok())
        .find_map(|cfg| cfg.metrics_file)
}

/// The scope a line's keys give, if it is a rule line at all.
fn rule_scope(line: &LineValues<'_>) -> Result<Option<RuleScope>, Problem> {
    let qos = line.get(Key::Qos);
    let partition = line.get(Key::Partition);
    let association = line.get(Key::Account).or(line.get(Key::User));
    let scope_key = |v: Option<&str>, k: Key| v.map(|_| k.name());
    let named: Vec<&'static str> = [
        scope_key(qos, Key::Qos),
        scope_key(partition, Key::Partition),
        scope_key(association, Key::Account).map(|_| {
            if line.get(Key::Account).is_some() {
                Key::Account.name()
            } else {
                Key::User.name()
            }
        }),
    ]
    .into_iter()
    .flatten()
    .collect();
    if let [a, b, ..] = named[..] {
        return Err(Problem::TwoScopes(a, b));
    }
    if let Some(q) = qos {
        return Ok(Some(RuleScope::Qos(split_list(Key::Qos, q)?)));
    }
    if let Some(p) = partition {
        return Ok(Some(RuleScope::Partition(split_list(Key::Partition, p)?)));
    }
    if association.is_some() {
        let list = |k: Key| {
            line.get(k)
                .map(|v| split_list(k, v))
                .transpose()
                .map(Option::unwrap_or_default)
        };
        return Ok(Some(RuleScope::Association {
            accounts: list(Key::Account)?,
            users: list(Key::User)?,
        }));
    }
    Ok(None)
}

fn parse_rule(line: &LineValues<'_>, scope: RuleScope, line_no: usize) -> Result<QosRule, Problem> {
    for key in Key::ALL {
        if !key.is_rule_key() && !key.is_global_and_rule_key() && line.get(key).is_some() {
            return Err(Problem::GlobalKeyOnRuleLine(key.name()));
        }
    }
    let enforce = line.get(Key::Enforce).map(enforce_value).transpose()?;
    let types_value = line
        .get(Key::GpuTypes)
        .ok_or(Problem::RuleWithoutGpuTypes)?;
    let gpu_types = split_list(Key::GpuTypes, types_value)?;
    if let Some(bad) = gpu_types.iter().find(|t| !is_gpu_type_entry(t)) {
        return Err(Problem::BadGpuType(bad.clone()));
    }
    let gpu_limit = line
        .get(Key::GpuLimit)
        .map(|v| parse_limit(v, &gpu_types))
        .transpose()?;
    let default_gpu_type = match line.get(Key::DefaultGpuType) {
        Some(ty) => {
            let permitted = gpu_types.iter().any(|t| type_matches(t, ty));
            if is_pattern(ty) || !is_gpu_type_entry(ty) || !permitted {
                return Err(Problem::BadDefaultType(ty.to_owned()));
            }
            Some(ty.to_owned())
        }
        None => None,
    };
    Ok(QosRule {
        scope,
        gpu_types,
        gpu_limit,
        default_gpu_type,
        enforce,
        line: line_no,
    })
}

/// `N`, or `type:N,type:N` where each type is one `GPUTypes` permits (a
/// pattern there may be given as itself or by its member types).
fn parse_limit(value: &str, gpu_types: &[String]) -> Result<GpuLimit, Problem> {
    if !value.contains(':') {
        return positive_integer(Key::GpuLimit, value).map(GpuLimit::Each);
    }
    let mut limits: Vec<(String, u64)> = Vec::new();
    for item in split_list(Key::GpuLimit, value)? {
        let Some((ty, n)) = item.split_once(':') else {
            return Err(Problem::BadLimitEntry(item));
        };
        if !is_gpu_type_entry(ty) {
            return Err(Problem::BadGpuType(ty.to_owned()));
        }
        let n = positive_integer(Key::GpuLimit, n)?;
        let listed = gpu_types
            .iter()
            .any(|t| t == ty || (!is_pattern(ty) && type_matches(t, ty)));
        if !listed {
            return Err(Problem::LimitForUnlistedType(ty.to_owned()));
        }
        if limits.iter().any(|(seen, _)| seen == ty) {
            return Err(Problem::DuplicateListItem {
                key: Key::GpuLimit.name(),
                item: ty.to_owned(),
            });
        }
        limits.push((ty.to_owned(), n));
    }
    Ok(GpuLimit::PerType(limits))
}

fn set_global(cfg: &mut GpuQosConfig, key: Key, value: &str) -> Result<(), Problem> {
    match key {
        Key::RequireGpuType => {
            cfg.require_gpu_type = if value.eq_ignore_ascii_case("qos") {
                RequireGpuType::Qos
            } else if value.eq_ignore_ascii_case("all") {
                RequireGpuType::All
            } else {
                return Err(Problem::BadEnumValue {
                    key: key.name(),
                    value: value.to_owned(),
                    allowed: "qos, all",
                });
            }
        }
        Key::LowPriorityQos => cfg.low_priority_qos = split_list(key, value)?,
        Key::LowPriorityMaxArrayTasks => {
            let n = positive_integer(key, value)?;
            cfg.low_priority_max_array_tasks =
                Some(u32::try_from(n).map_err(|_| Problem::NotPositiveInteger {
                    key: key.name(),
                    value: value.to_owned(),
                })?);
        }
        Key::SharedGpuReservations => cfg.shared_gpu_reservations = Some(split_list(key, value)?),
        Key::MaxMpsPerJob => cfg.max_mps_per_job = Some(positive_integer(key, value)?),
        Key::MaxGpusPerJob => cfg.type_caps.gpus_per_job = parse_caps(key, value, "a40:4")?,
        Key::MaxCpusPerGpu => cfg.type_caps.cpus_per_gpu = parse_caps(key, value, "a40:16")?,
        Key::MaxTasksPerGpu => cfg.type_caps.tasks_per_gpu = parse_caps(key, value, "a40:8")?,
        Key::MaxMemPerGpu => cfg.type_caps.mem_per_gpu = parse_caps(key, value, "a40:96G")?,
        Key::LowPriorityExclusiveUser => {
            cfg.keep_low_priority_exclusive_user =
                either(key, value, ("keep", "clear"), "clear, keep")?
        }
        Key::MetricsFile => {
            if !value.starts_with('/') || !value.ends_with(".prom") {
                return Err(Problem::BadPath {
                    key: key.name(),
                    value: value.to_owned(),
                    must: "an absolute path ending in .prom (node_exporter's textfile collector \
                           reads only those)",
                });
            }
            cfg.metrics_file = Some(PathBuf::from(value));
        }
        Key::Enforce => cfg.enforce = enforce_value(value)?,
        Key::ExemptUsers => cfg.exempt_users = exempt_users(value)?,
        Key::ExemptAdmins => cfg.exempt_admins = either(key, value, ("yes", "no"), "yes, no")?,
        Key::Qos
        | Key::Partition
        | Key::Account
        | Key::User
        | Key::GpuTypes
        | Key::GpuLimit
        | Key::DefaultGpuType => {}
    }
    Ok(())
}

/// A key of two words, `(on, off)` (any case): true for `on`. `allowed`
/// names both as the error says them.
fn either(
    key: Key,
    value: &str,
    (on, off): (&str, &str),
    allowed: &'static str,
) -> Result<bool, Problem> {
    if value.eq_ignore_ascii_case(on) {
        Ok(true)
    } else if value.eq_ignore_ascii_case(off) {
        Ok(false)
    } else {
        Err(Problem::BadEnumValue {
            key: key.name(),
            value: value.to_owned(),
            allowed,
        })
    }
}

/// `ExemptUsers=`: uids (all digits) and user names. A name is not
/// looked up here: the file is parsed where no user database can be
/// asked (gpu-qos check on any host, the plugin before slurmctld has read
/// its association manager), and a user added to accounting later must
/// not make a valid file invalid. The plugin matches names against the
/// user's name in slurmctld's association manager at each decision.
fn exempt_users(value: &str) -> Result<Vec<ExemptUser>, Problem> {
    let mut out = Vec::new();
    for item in split_list(Key::ExemptUsers, value)? {
        let text = item.clone();
        let user = if item.bytes().all(|b| b.is_ascii_digit()) {
            let uid = item
                .parse::<u32>()
                .ok()
                .filter(|&u| u != u32::MAX - 1 && u != u32::MAX)
                .ok_or_else(|| Problem::BadUserName(item.clone()))?;
            ExemptUser::Uid(uid)
        } else {
            let valid = !item.starts_with('-')
                && item
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'@'));
            if !valid {
                return Err(Problem::BadUserName(item));
            }
            ExemptUser::Name(item)
        };
        if out.contains(&user) {
            return Err(Problem::DuplicateListItem {
                key: Key::ExemptUsers.name(),
                item: text,
            });
        }
        out.push(user);
    }
    Ok(out)
}

fn enforce_value(value: &str) -> Result<Enforce, Problem> {
    if value.eq_ignore_ascii_case("yes") {
        Ok(Enforce::Yes)
    } else if value.eq_ignore_ascii_case("warn") {
        Ok(Enforce::Warn)
    } else {
        Err(Problem::BadEnumValue {
            key: Key::Enforce.name(),
            value: value.to_owned(),
            allowed: "yes, warn",
        })
    }
}

/// A per-type cap: `type:value` items (a type, or a pattern of types as
/// in `GPUTypes=`), each type once; `MaxMemPerGPU=` takes sizes as Slurm
/// writes them (MB, or a K/M/G/T suffix), kept in MB.
fn parse_caps(key: Key, value: &str, example: &'static str) -> Result<Vec<(String, u64)>, Problem> {
    let mut caps: Vec<(String, u64)> = Vec::new();
    for item in split_list(key, value)? {
        let bad = || Problem::BadCapEntry {
            key: key.name(),
            entry: item.clone(),
            example,
        };
        let (ty, n) = item.split_once(':').ok_or_else(bad)?;
        if !is_gpu_type_entry(ty) {
            return Err(Problem::BadGpuType(ty.to_owned()));
        }
        let n = if key == Key::MaxMemPerGpu {
            megabytes(n).ok_or_else(bad)?
        } else {
            positive_integer(key, n)?
        };
        if caps.iter().any(|(seen, _)| seen == ty) {
            return Err(Problem::DuplicateListItem {
                key: key.name(),
                item: ty.to_owned(),
            });
        }
        caps.push((ty.to_owned(), n));
    }
    Ok(caps)
}

/// A memory size as Slurm reads one (`--mem=96G`): a positive number of
/// MB, or of K, M, G or T (any case) units, in MB (rounded up).
pub fn megabytes(text: &str) -> Option<u64> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().ok().filter(|n| *n > 0)?;
    let mb = match unit.to_ascii_uppercase().as_str() {
        "" | "M" => Some(n),
        "K" => Some(n.div_ceil(1024)),
        "G" => n.checked_mul(1024),
        "T" => n.checked_mul(1024 * 1024),
        _ => None,
    }?;
    Some(mb)
}

/// A comma list with no empty and no repeated items. Repeats compare without
/// case for QOS names, since slurmctld does.
fn split_list(key: Key, value: &str) -> Result<Vec<String>, Problem> {
    let fold_case = matches!(key, Key::Qos | Key::LowPriorityQos);
    let mut items: Vec<String> = Vec::new();
    for item in value.split(',') {
        if item.is_empty() {
            return Err(Problem::EmptyListItem(key.name()));
        }
        let repeated = items.iter().any(|seen| {
            if fold_case {
                seen.eq_ignore_ascii_case(item)
            } else {
                seen == item
            }
        });
        if repeated {
            return Err(Problem::DuplicateListItem {
                key: key.name(),
                item: item.to_owned(),
            });
        }
        items.push(item.to_owned());
    }
    Ok(items)
}

/// A `GPUTypes=` entry: a type, or a pattern of types with `*` and `?`
/// (`a100_*` for every MIG slice type of the A100).
fn is_gpu_type_entry(t: &str) -> bool {
    if is_pattern(t) {
        let literal: String = t.chars().filter(|c| !matches!(c, '*' | '?')).collect();
        literal.is_empty()
            || literal
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    } else {
        is_gpu_type(t)
    }
}

fn positive_integer(key: Key, value: &str) -> Result<u64, Problem> {
    let bad = || Problem::NotPositiveInteger {
        key: key.name(),
        value: value.to_owned(),
    };
    if !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    match value.parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(bad()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_file_still_says_where_its_metrics_go_if_that_line_is_valid() {
        let broken = "QOS=q GPUTypes=a40\nQOS=q GPUTypes=h100\nMetricsFile=/m/x.prom\n";
        assert!(parse(broken, "f").is_err());
        assert_eq!(metrics_file_in(broken), Some(PathBuf::from("/m/x.prom")));
        // A MetricsFile= line that is itself wrong, or none: nowhere.
        assert_eq!(metrics_file_in("MetricsFile=x.prom Bogus=1\n"), None);
        assert_eq!(metrics_file_in("MetricsFile=relative.prom\n"), None);
        assert_eq!(metrics_file_in(""), None);
    }
    use proptest::prelude::*;

    const FILE: &str = "/etc/slurm/gpu_qos.conf";

    fn err(text: &str) -> String {
        parse(text, FILE).unwrap_err().to_string()
    }

    const EXAMPLE: &str = "\
# GPU QOS policy
QOS=qos_lafferty,qos_ying_rex GPUTypes=a40 GPULimit=4   # a rule
QOS=qos_saxena GPUTypes=a100,h100 GPULimit=20

RequireGPUType=qos
LowPriorityQOS=lowprio
LowPriorityMaxArrayTasks=8
SharedGPUReservations=jhl_homework_gpu*,jupyterhub_course_*
MaxMPSPerJob=100
";

    #[test]
    fn the_documented_example_parses() {
        let cfg = parse(EXAMPLE, FILE).unwrap();
        assert_eq!(cfg.rules().len(), 2);
        let rule = cfg.rule_for("qos_ying_rex").unwrap();
        assert_eq!(rule.gpu_types(), ["a40"]);
        assert_eq!(rule.gpu_limit(), Some(&GpuLimit::Each(4)));
        assert_eq!(rule.limit_for("a40"), Some(4));
        assert_eq!(rule.line(), 2);
        assert!(rule.permits("a40"));
        assert!(!rule.permits("A40"));
        let saxena = cfg.rule_for("qos_saxena").unwrap();
        assert_eq!(saxena.first_gpu_type(), "a100");
        assert_eq!(cfg.known_gpu_types(), ["a40", "a100", "h100"]);
        assert_eq!(cfg.require_gpu_type(), RequireGpuType::Qos);
        assert!(cfg.is_low_priority("lowprio"));
        assert!(cfg.is_low_priority("LowPrio"));
        assert_eq!(cfg.low_priority_max_array_tasks(), Some(8));
        assert_eq!(cfg.max_mps_per_job(), Some(100));
        assert!(cfg.reservation_allows_shared("jhl_homework_gpu"));
        assert!(cfg.reservation_allows_shared("jupyterhub_course_ml"));
        assert!(!cfg.reservation_allows_shared("maint"));
        assert!(cfg.rule_for("normal").is_none());
    }

    #[test]
    fn qos_lookup_ignores_case() {
        let cfg = parse(EXAMPLE, FILE).unwrap();
        assert!(cfg.rule_for("QOS_Lafferty").is_some());
    }

    #[test]
    fn empty_and_comment_only_files_enforce_nothing() {
        let cfg = parse("\n  # nothing\n\n", FILE).unwrap();
        assert_eq!(cfg, GpuQosConfig::default());
        assert!(cfg.reservation_allows_shared("anything"));
    }

    #[test]
    fn keys_are_case_insensitive_and_pairs_share_lines() {
        let cfg = parse(
            "qos=a gputypes=a40\nrequiregputype=ALL maxmpsperjob=50 lowpriorityqos=lp",
            FILE,
        )
        .unwrap();
        assert_eq!(cfg.require_gpu_type(), RequireGpuType::All);
        assert_eq!(cfg.max_mps_per_job(), Some(50));
        assert!(cfg.is_low_priority("lp"));
    }

    #[test]
    fn comment_may_follow_without_space() {
        let cfg = parse("QOS=a GPUTypes=a40#,a100", FILE).unwrap();
        assert_eq!(cfg.rule_for("a").unwrap().gpu_types(), ["a40"]);
    }

    #[test]
    fn bad_number_names_the_file_line_and_value() {
        assert_eq!(
            err("\n\n\n\n\n\nQOS=q GPUTypes=a40 GPULimit=four"),
            "/etc/slurm/gpu_qos.conf:7: GPULimit must be a positive integer, got \"four\""
        );
        assert_eq!(
            err("QOS=q GPUTypes=a40 GPULimit=0"),
            "/etc/slurm/gpu_qos.conf:1: GPULimit must be a positive integer, got \"0\""
        );
        assert_eq!(
            err("MaxMPSPerJob=-1"),
            "/etc/slurm/gpu_qos.conf:1: MaxMPSPerJob must be a positive integer, got \"-1\""
        );
        assert_eq!(
            err("LowPriorityQOS=lp\nLowPriorityMaxArrayTasks=99999999999"),
            "/etc/slurm/gpu_qos.conf:2: LowPriorityMaxArrayTasks must be a positive integer, \
             got \"99999999999\""
        );
    }

    #[test]
    fn unknown_key_lists_the_known_ones() {
        assert_eq!(
            err("GPUS=4"),
            "/etc/slurm/gpu_qos.conf:1: unknown key \"GPUS\" (known keys: QOS, Partition, \
             Account, User, GPUTypes, GPULimit, DefaultGPUType, RequireGPUType, LowPriorityQOS, LowPriorityMaxArrayTasks, \
             SharedGPUReservations, MaxMPSPerJob, MaxGPUsPerJob, MaxCPUsPerGPU, MaxTasksPerGPU, MaxMemPerGPU, LowPriorityExclusiveUser, MetricsFile, Enforce, ExemptUsers, ExemptAdmins)"
        );
    }

    #[test]
    fn structural_errors() {
        assert_eq!(
            err("QOS=a GPUTypes"),
            format!("{FILE}:1: expected Key=Value, got \"GPUTypes\"")
        );
        assert_eq!(
            err("QOS= GPUTypes=a40"),
            format!("{FILE}:1: QOS has an empty value")
        );
        assert_eq!(
            err("QOS=a GPUTypes=a40 gputypes=a100"),
            format!("{FILE}:1: GPUTypes given twice on this line")
        );
        assert_eq!(
            err("QOS=a GPULimit=3"),
            format!("{FILE}:1: a rule needs GPUTypes= (the GPU types its jobs may use)")
        );
        assert_eq!(
            err("GPUTypes=a40"),
            format!(
                "{FILE}:1: GPUTypes needs QOS=, Partition=, Account= or User= on the same line"
            )
        );
        assert_eq!(
            err("QOS=a GPUTypes=a40 MaxMPSPerJob=5"),
            format!(
                "{FILE}:1: MaxMPSPerJob is a global setting and cannot share a line with a rule"
            )
        );
        assert_eq!(
            err("QOS=a GPUTypes=a40,,a100"),
            format!("{FILE}:1: GPUTypes has an empty item in its comma list")
        );
        assert_eq!(
            err("QOS=a GPUTypes=a40,a40"),
            format!("{FILE}:1: GPUTypes lists a40 twice")
        );
        assert_eq!(
            err("QOS=a GPUTypes=1080"),
            format!(
                "{FILE}:1: GPU type \"1080\" may contain only letters, digits, '_', '-' and \
                 '.', and must not be a number"
            )
        );
    }

    #[test]
    fn a_qos_in_two_rules_is_an_error() {
        assert_eq!(
            err("QOS=a,b GPUTypes=a40\nQOS=c,B GPUTypes=a100"),
            format!("{FILE}:2: QOS B already has a rule on line 1")
        );
        assert_eq!(
            err("QOS=a,a GPUTypes=a40"),
            format!("{FILE}:1: QOS lists a twice")
        );
    }

    #[test]
    fn rules_at_every_level_parse() {
        let cfg = parse(
            "QOS=qos_lafferty GPUTypes=a40 GPULimit=4\n\
             Partition=gpu,gpu_long GPUTypes=a40,h100 GPULimit=a40:8,h100:2\n\
             Account=lafferty GPUTypes=a40 GPULimit=4\n\
             User=alice Account=saxena GPUTypes=a100_* GPULimit=a100_1g.5gb:7,a100_*:2\n",
            FILE,
        )
        .unwrap();
        assert!(cfg.has_qos_rules() && cfg.has_partition_rules() && cfg.has_association_rules());
        let gpu = cfg.partition_rule("gpu").unwrap();
        assert_eq!(gpu.limit_for("a40"), Some(8));
        assert_eq!(gpu.limit_for("h100"), Some(2));
        assert!(
            cfg.partition_rule("GPU").is_none(),
            "partition names compare exactly"
        );
        assert_eq!(gpu.qos_names(), [] as [String; 0]);
        let assoc: Vec<&QosRule> = cfg.association_rules().collect();
        assert_eq!(assoc.len(), 2);
        assert_eq!(
            assoc[1].scope(),
            &RuleScope::Association {
                accounts: vec!["saxena".into()],
                users: vec!["alice".into()]
            }
        );
        // MIG slices: a pattern permits each slice type; the first matching
        // limit counts, each slice type on its own.
        assert!(assoc[1].permits("a100_3g.20gb"));
        assert!(!assoc[1].permits("a100"));
        assert_eq!(assoc[1].limit_for("a100_1g.5gb"), Some(7));
        assert_eq!(assoc[1].limit_for("a100_3g.20gb"), Some(2));
        assert_eq!(assoc[1].first_gpu_type(), "a100_1g.5gb");
        // Patterns are no type anyone can type: not suggested.
        assert_eq!(cfg.known_gpu_types(), ["a40", "h100"]);
        assert_eq!(gpu.gpu_limit().unwrap().to_string(), "a40:8,h100:2");
    }

    #[test]
    fn level_and_limit_errors() {
        assert_eq!(
            err("QOS=q Partition=gpu GPUTypes=a40"),
            format!("{FILE}:1: QOS= and Partition= cannot share a line: write one rule per level")
        );
        assert_eq!(
            err("Partition=gpu GPUTypes=a40\nPartition=cpu,gpu GPUTypes=a100"),
            format!("{FILE}:2: Partition gpu already has a rule on line 1")
        );
        assert_eq!(
            err("QOS=q GPUTypes=a40 GPULimit=h100:2"),
            format!("{FILE}:1: GPULimit gives a limit for h100, which GPUTypes does not list")
        );
        assert_eq!(
            err("QOS=q GPUTypes=a40 GPULimit=a40:2,a40:3"),
            format!("{FILE}:1: GPULimit lists a40 twice")
        );
        assert_eq!(
            err("QOS=q GPUTypes=a40 GPULimit=a40:0"),
            format!("{FILE}:1: GPULimit must be a positive integer, got \"0\"")
        );
        assert_eq!(
            err("QOS=q GPUTypes=a40 GPULimit=a40:2,4"),
            format!(
                "{FILE}:1: GPULimit takes a number (each type) or type:number items, \
                 e.g. GPULimit=a40:4,h100:2; got \"4\""
            )
        );
        assert!(err("Account=a GPUTypes=a1/0*").contains("GPU type \"a1/0*\""));
    }

    #[test]
    fn global_keys_only_once_per_file() {
        assert_eq!(
            err("MaxMPSPerJob=1\n#\nmaxmpsperjob=2"),
            format!("{FILE}:3: MaxMPSPerJob already set on line 1")
        );
    }

    #[test]
    fn enum_values_are_checked() {
        assert_eq!(
            err("RequireGPUType=some"),
            format!("{FILE}:1: RequireGPUType must be one of qos, all, got \"some\"")
        );
    }

    #[test]
    fn enforce_is_global_and_per_rule_and_yes_by_default() {
        let cfg = parse(EXAMPLE, FILE).unwrap();
        assert_eq!(cfg.enforce(), Enforce::Yes);
        assert_eq!(cfg.warning_rules().count(), 0);
        let cfg = parse(
            "QOS=a GPUTypes=a40 Enforce=warn\n\
             QOS=b GPUTypes=a40\n\
             Partition=gpu GPUTypes=a40 enforce=Yes\n",
            FILE,
        )
        .unwrap();
        assert_eq!(cfg.enforce(), Enforce::Yes);
        let a = cfg.rule_for("a").unwrap();
        assert_eq!(cfg.rule_enforce(a), Enforce::Warn);
        assert_eq!(cfg.rule_enforce(cfg.rule_for("b").unwrap()), Enforce::Yes);
        let warns: Vec<usize> = cfg.warning_rules().map(QosRule::line).collect();
        assert_eq!(warns, [1]);
        assert_eq!(cfg.enforce_anywhere(), Enforce::Yes);
        // The file's Enforce= for every rule without its own.
        let cfg = parse(
            "Enforce=warn\nQOS=a GPUTypes=a40\nPartition=gpu GPUTypes=a40 Enforce=yes",
            FILE,
        )
        .unwrap();
        assert_eq!(cfg.enforce(), Enforce::Warn);
        assert_eq!(cfg.rule_enforce(cfg.rule_for("a").unwrap()), Enforce::Warn);
        let gpu = cfg.partition_rule("gpu").unwrap();
        assert_eq!(cfg.rule_enforce(gpu), Enforce::Yes);
        assert_eq!(gpu.scope_text(), "Partition gpu");
        assert_eq!(cfg.enforce_anywhere(), Enforce::Yes);
        let all_warn = parse("Enforce=warn\nQOS=a GPUTypes=a40", FILE).unwrap();
        assert_eq!(all_warn.enforce_anywhere(), Enforce::Warn);
    }

    #[test]
    fn a_bad_enforce_value_names_the_file_and_line() {
        assert_eq!(
            err("QOS=a GPUTypes=a40\nQOS=b GPUTypes=a40 Enforce=no"),
            format!("{FILE}:2: Enforce must be one of yes, warn, got \"no\"")
        );
        assert_eq!(
            err("# policy\nEnforce=later"),
            format!("{FILE}:2: Enforce must be one of yes, warn, got \"later\"")
        );
        assert_eq!(
            err("Enforce=warn\nEnforce=yes"),
            format!("{FILE}:2: Enforce already set on line 1")
        );
    }

    #[test]
    fn array_cap_needs_a_low_priority_qos() {
        assert_eq!(
            err("LowPriorityMaxArrayTasks=8"),
            format!("{FILE}:1: LowPriorityMaxArrayTasks has no effect without LowPriorityQOS")
        );
    }

    proptest! {
        #[test]
        fn parse_never_panics(text in ".*") {
            let _ = parse(&text, FILE);
        }

        #[test]
        fn parse_never_panics_on_config_shaped_text(
            text in "((QOS|GPUTypes|GPULimit|RequireGPUType|LowPriorityQOS|LowPriorityMaxArrayTasks\
                      |SharedGPUReservations|MaxMPSPerJob|x)=?[a-z0-9,*]{0,6}[ \n#]){0,12}"
        ) {
            if let Err(e) = parse(&text, FILE) {
                prop_assert!(e.to_string().starts_with(FILE));
            }
        }
    }

    /// The manual page, the docs and the shipped example, held to the parser.
    mod docs {
        use super::*;
        use crate::qos::config::keys;
        use crate::shared::doc_keys::{self, setting_lines};

        const MAN: &str = include_str!("../../../docs/man/gpu_qos.conf.5");
        const EXAMPLE: &str =
            include_str!("../../../plugins/job_submit_gpu_qos/gpu_qos.conf.example");

        fn code_keys() -> Vec<(&'static str, Option<&'static str>)> {
            keys().collect()
        }

        #[test]
        fn each_keys_default_text_is_what_the_parser_takes_without_it() {
            for (key, default) in keys() {
                let Some(value) = default else { continue };
                let text = format!("{key}={value}\n");
                let cfg = parse(&text, FILE).unwrap_or_else(|e| panic!("{text:?}: {e}"));
                assert_eq!(cfg, GpuQosConfig::default(), "{text:?}");
            }
        }

        #[test]
        fn the_manual_page_and_the_configuration_table_name_every_key_and_its_default() {
            let heading = "## `gpu_qos.conf` (slurmctld)";
            doc_keys::assert_docs_agree("gpu_qos.conf", MAN, heading, &code_keys());
        }

        #[test]
        fn the_shipped_example_parses_whole_and_its_defaults_are_the_parsers() {
            let name = "plugins/job_submit_gpu_qos/gpu_qos.conf.example";
            parse(&doc_keys::settings_text(EXAMPLE), name)
                .unwrap_or_else(|e| panic!("every line in: {e}"));
            let (active, defaults) = doc_keys::default_lines(EXAMPLE, &code_keys());
            let base = parse(&active, name).unwrap_or_else(|e| panic!("{e}"));
            // A commented-out global key with a default shows the default.
            for (line, setting) in &defaults {
                let with = parse(&format!("{active}{setting}\n"), name);
                let with = with.unwrap_or_else(|e| panic!("{name}:{line}: {e}"));
                assert_eq!(with, base, "{name}:{line}: `{setting}` is not the default");
            }
            doc_keys::assert_shows_every_key(name, EXAMPLE, &code_keys());
        }

        #[test]
        fn the_manual_pages_examples_parse_and_the_first_is_the_shipped_file() {
            let blocks = doc_keys::man_examples(MAN);
            let files: Vec<&String> = blocks.iter().filter(|b| !b.contains("$ ")).collect();
            assert!(files.len() >= 4, "{blocks:?}");
            for (i, text) in files.iter().enumerate() {
                let name = format!("gpu_qos.conf(5) EXAMPLES, file {}", i + 1);
                parse(&doc_keys::settings_text(text), &name)
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
            }
            // "The file shipped with gpushare, in short": each of its
            // setting lines is one of the shipped file's.
            let shipped = setting_lines(EXAMPLE);
            for (line, _, setting) in setting_lines(files.first().map_or("", |f| f.as_str())) {
                assert!(
                    shipped.iter().any(|(_, _, l)| *l == setting),
                    "gpu_qos.conf(5)'s shipped file, line {line}: `{setting}` is not shipped"
                );
            }
        }
    }
}
