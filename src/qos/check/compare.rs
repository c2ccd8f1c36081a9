//! `gpu_qos.conf` compared with the accounting database, QOS by QOS and
//! association by association.

use crate::qos::config::{type_matches, Enforce, ExemptUser, GpuLimit, GpuQosConfig};

use super::findings::Finding;
use super::records::{join_display, limit_text, AssocRecord, QosRecord};

/// Compares the `Account=`/`User=` rules with the associations' typed GPU
/// limits: each association with one needs its rule, saying its limits.
pub fn check_associations(cfg: &GpuQosConfig, file: &str, assocs: &[AssocRecord]) -> Vec<Finding> {
    let mut findings = Vec::new();
    for a in assocs {
        let usable = a.usable_types();
        if usable.is_empty() {
            continue;
        }
        let (who, gpu_tres, rule) = (a.who(), join_display(&a.gpu_limits, ","), a.rule());
        let Some(r) = cfg.association_rules().find(|r| a.covered_by(r)) else {
            if !findings.iter().any(|f: &Finding| f.qos() == who) {
                findings.push(Finding::UnlistedTypedAssociation {
                    who,
                    gpu_tres,
                    rule,
                });
            }
            continue;
        };
        let exact = usable
            .iter()
            .all(|(t, n)| r.permits(t) && r.limit_for(t) == Some(*n));
        if !exact {
            findings.push(Finding::AssociationRuleDiffers {
                who,
                at: format!("{file}:{}", r.line()),
                gpu_tres,
                rule,
            });
        }
    }
    findings
}

/// The names of `ExemptUsers=` that none of `users` (the associations'
/// users, [`super::parse_assoc_users`]) is, without regard to ASCII case
/// as the plugin compares them; uids are not checked (accounting names
/// no uid).
pub fn check_exempt_users(cfg: &GpuQosConfig, file: &str, users: &[String]) -> Vec<Finding> {
    cfg.exempt_users()
        .iter()
        .filter_map(|u| match u {
            ExemptUser::Name(n) => Some(n),
            ExemptUser::Uid(_) => None,
        })
        .filter(|n| !users.iter().any(|u| u.eq_ignore_ascii_case(n)))
        .map(|n| Finding::UnknownExemptUser {
            user: n.clone(),
            at: file.to_owned(),
        })
        .collect()
}

/// Compares a parsed `gpu_qos.conf` (read from `file`) with the QOS of the
/// accounting database. Findings come rule by rule in file order, then the
/// unlisted QOS in database order, then `LowPriorityQOS`.
pub fn check(cfg: &GpuQosConfig, file: &str, db: &[QosRecord]) -> Vec<Finding> {
    let mut findings = only_warns(cfg, file);
    let find = |name: &str| db.iter().find(|r| r.name.eq_ignore_ascii_case(name));

    for rule in cfg.rules() {
        let at = format!("{file}:{}", rule.line());
        for name in rule.qos_names() {
            let qos = name.clone();
            let Some(record) = find(name) else {
                findings.push(Finding::UnknownQos {
                    qos,
                    at: at.clone(),
                });
                continue;
            };
            let usable = record.usable_types();
            let gpu_tres = record.gpu_tres_text();
            let usable_types: Vec<String> = usable.iter().map(|(t, _)| t.clone()).collect();
            let types_differ = usable_types.iter().any(|t| !rule.permits(t))
                || rule
                    .gpu_types()
                    .iter()
                    .any(|e| !usable_types.iter().any(|t| type_matches(e, t)));

            // The rule's types and the database's usable ones disagree.
            let types_differ_finding = |qos, gpu_tres, usable_types| Finding::TypesDiffer {
                qos,
                at: at.clone(),
                config_types: rule.gpu_types().to_vec(),
                gpu_tres,
                usable_types,
            };

            // Types from GrpTRES only count when there are typed limits;
            // with only `gres/gpu=N` every type is capped at N.
            let per_type: Vec<(String, u64)> = if usable.is_empty() {
                let typed = record.typed_limits().next().is_some();
                match record.untyped_limit() {
                    // Only `gres/gpu=N`: it caps every type of the rule at N.
                    Some(n) if n > 0 && !typed => {
                        rule.gpu_types().iter().map(|t| (t.clone(), n)).collect()
                    }
                    None if !typed => {
                        findings.push(match rule.gpu_limit() {
                            Some(config_limit) => Finding::LimitDiffers {
                                qos,
                                at: at.clone(),
                                types: rule.gpu_types().to_vec(),
                                config_limit: config_limit.to_string(),
                                gpu_tres,
                                expected: None,
                            },
                            None => Finding::NoGpuLimit {
                                qos,
                                at: at.clone(),
                            },
                        });
                        continue;
                    }
                    // Limits of 0 only: every type the rule permits is forbidden.
                    _ => {
                        findings.push(types_differ_finding(qos, gpu_tres, usable_types));
                        continue;
                    }
                }
            } else if types_differ {
                findings.push(types_differ_finding(qos, gpu_tres, usable_types));
                continue;
            } else {
                usable
            };

            let expected = limit_text(&per_type);
            let max = per_type.iter().map(|&(_, n)| n).max().unwrap_or(0);
            match rule.gpu_limit() {
                None => findings.push(Finding::LimitCheckOff {
                    qos,
                    at: at.clone(),
                    gpu_tres,
                    expected,
                }),
                Some(_) if per_type.iter().all(|(t, n)| rule.limit_for(t) == Some(*n)) => {}
                Some(&GpuLimit::Each(limit)) if limit == max => {
                    let tighter: Vec<(String, u64)> =
                        per_type.into_iter().filter(|&(_, n)| n < limit).collect();
                    findings.push(Finding::LooserForSomeTypes {
                        qos,
                        at: at.clone(),
                        limit,
                        tighter,
                        per_type: expected,
                    });
                }
                Some(config_limit) => findings.push(Finding::LimitDiffers {
                    qos,
                    at: at.clone(),
                    types: rule.gpu_types().to_vec(),
                    config_limit: config_limit.to_string(),
                    gpu_tres,
                    expected: Some(expected),
                }),
            }
        }
    }

    for record in db {
        if cfg.rule_for(&record.name).is_some() {
            continue;
        }
        if let Some(finding) = unlisted_finding(record) {
            findings.push(finding);
        }
    }

    for low in cfg.low_priority_qos() {
        if find(low).is_none() {
            findings.push(Finding::LowPriorityUnknown { qos: low.clone() });
        } else if !db.iter().any(|r| r.preempts(low)) {
            findings.push(Finding::LowPriorityNotPreemptable { qos: low.clone() });
        }
    }
    findings
}

/// What only warns (`Enforce=warn`): the file's default first (refusals
/// of no single rule, the low-priority QOS's changes, rules without
/// their own), then each rule that warns.
fn only_warns(cfg: &GpuQosConfig, file: &str) -> Vec<Finding> {
    let whole = (cfg.enforce() == Enforce::Warn).then(|| Finding::OnlyWarns {
        who: "gpu_qos.conf as a whole".to_owned(),
        at: file.to_owned(),
    });
    whole
        .into_iter()
        .chain(cfg.warning_rules().map(|rule| Finding::OnlyWarns {
            who: rule.scope_text(),
            at: format!("{file}:{}", rule.line()),
        }))
        .collect()
}

/// What an unlisted QOS means, if anything: a typed limit needs a rule; a
/// QOS limited only by `gres/gpu=N` needs none, since every request counts
/// against that.
pub(super) fn unlisted_finding(record: &QosRecord) -> Option<Finding> {
    let gpu_tres = record.gpu_tres_text();
    if record.expected_gpu_limit().is_some() {
        return Some(Finding::UnlistedTypedQos {
            qos: record.name.clone(),
            gpu_tres,
            usable_types: record.usable_types().into_iter().map(|(t, _)| t).collect(),
            expected: limit_text(&record.usable_types()),
        });
    }
    let zero_typed = record.typed_limits().next().is_some();
    (zero_typed && record.untyped_limit() != Some(0)).then(|| Finding::ZeroTypedLimitOnly {
        qos: record.name.clone(),
        gpu_tres,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
