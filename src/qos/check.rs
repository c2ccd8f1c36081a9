//! The logic of the `gpu-qos` admin command: compare `gpu_qos.conf` with the
//! QOS in Slurm's accounting database, and derive a `gpu_qos.conf` from it.
//!
//! Sysadmins run `gpu-qos check` after changing either side (and monitoring
//! may run it from cron): the plugin only closes the untyped-request hole for
//! QOS that `gpu_qos.conf` lists, and its never-fits check is only right
//! while `GPULimit` matches the typed `GrpTRES`, yet nothing ties the two
//! together when `sacctmgr modify qos` runs. Everything here is pure, so it
//! is tested without Slurm; `src/bin/gpu-qos.rs` only runs `sacctmgr` and
//! prints.
//!
//! How accounting and the plugin count GPUs, which every check below follows:
//! a typed request (`gpu:a40:2`) counts against both `gres/gpu:a40` and
//! `gres/gpu` in `GrpTRES`; an untyped request counts only against
//! `gres/gpu`, which is the hole. The plugin's `GPULimit` is compared with
//! the request for *each* type on its own (see `policy::judge_under_rule`),
//! so the most GPUs of type T a job can ever get under a QOS is
//! min(`gres/gpu:T`, `gres/gpu`): `GPULimit=N` where every type has the same
//! figure, `GPULimit=a40:4,h100:2` where they differ.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use serde::{Deserialize, Serialize};

use super::config::{type_matches, GpuLimit, GpuQosConfig};

/// The arguments `gpu-qos` passes to `sacctmgr`; [`parse_sacctmgr`] reads
/// exactly these three fields.
pub const SACCTMGR_ARGS: [&str; 4] = ["-nP", "show", "qos", "format=Name,GrpTRES,Preempt"];

/// GPU types, sorted, each with the most GPUs of it one QOS may hold.
pub type TypeLimits = Vec<(String, u64)>;

/// One `gres/gpu…=N` entry of a QOS's `GrpTRES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuTresLimit {
    /// `None` for the untyped `gres/gpu=N`.
    pub gpu_type: Option<String>,
    pub count: u64,
}

impl fmt::Display for GpuTresLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.gpu_type {
            Some(t) => write!(f, "gres/gpu:{t}={}", self.count),
            None => write!(f, "gres/gpu={}", self.count),
        }
    }
}

/// What the accounting database says about one QOS, as far as GPUs go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QosRecord {
    pub name: String,
    /// The GPU entries of `GrpTRES`, in `sacctmgr`'s order; other TRES are
    /// dropped since neither the plugin nor this check looks at them.
    pub gpu_limits: Vec<GpuTresLimit>,
    /// The QOS this one may preempt.
    pub preempt: Vec<String>,
}

impl QosRecord {
    /// The typed entries, type and count.
    pub fn typed_limits(&self) -> impl Iterator<Item = (&str, u64)> {
        self.gpu_limits
            .iter()
            .filter_map(|l| l.gpu_type.as_deref().map(|t| (t, l.count)))
    }

    /// `gres/gpu=N`, which also caps every type.
    pub fn untyped_limit(&self) -> Option<u64> {
        self.gpu_limits
            .iter()
            .find(|l| l.gpu_type.is_none())
            .map(|l| l.count)
    }

    /// The types the QOS may hold some of, sorted, each with the most GPUs
    /// of that type it can hold (the untyped limit applied). A limit of 0
    /// forbids the type, so it is not here.
    pub fn usable_types(&self) -> TypeLimits {
        usable_types(&self.gpu_limits)
    }

    /// The `GPULimit` a rule for this QOS should have: the largest per-type
    /// limit, since the plugin applies `GPULimit` to each type separately and
    /// anything smaller would refuse jobs accounting would let run.
    pub fn expected_gpu_limit(&self) -> Option<u64> {
        self.usable_types().iter().map(|&(_, n)| n).max()
    }

    /// The `GrpTRES` GPU entries as `sacctmgr` would write them, for messages.
    pub fn gpu_tres_text(&self) -> String {
        join_display(&self.gpu_limits, ",")
    }

    fn preempts(&self, qos: &str) -> bool {
        !self.name.eq_ignore_ascii_case(qos)
            && self.preempt.iter().any(|p| p.eq_ignore_ascii_case(qos))
    }
}

/// The types a set of `GrpTRES` GPU entries lets its jobs hold some of,
/// sorted, each with the most GPUs of that type (`gres/gpu=N` capping
/// every type); a limit of 0 forbids the type, so it is not here.
fn usable_types(limits: &[GpuTresLimit]) -> TypeLimits {
    let cap = limits
        .iter()
        .find(|l| l.gpu_type.is_none())
        .map_or(u64::MAX, |l| l.count);
    let mut usable: Vec<(String, u64)> = limits
        .iter()
        .filter_map(|l| {
            l.gpu_type
                .as_deref()
                .map(|t| (t.to_owned(), l.count.min(cap)))
        })
        .filter(|&(_, n)| n > 0)
        .collect();
    usable.sort();
    usable
}

/// The `sacctmgr` arguments [`parse_sacctmgr_assoc`] reads: every
/// association's account, user, partition and `GrpTRES`.
pub const SACCTMGR_ASSOC_ARGS: [&str; 4] = [
    "-nP",
    "show",
    "assoc",
    "format=Account,User,Partition,GrpTRES",
];

/// An association with GPU entries in its `GrpTRES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssocRecord {
    pub account: String,
    /// `None`: the account's own association (its limit covers every job
    /// of the account and its sub-accounts).
    pub user: Option<String>,
    pub partition: Option<String>,
    pub gpu_limits: Vec<GpuTresLimit>,
}

impl AssocRecord {
    pub fn usable_types(&self) -> TypeLimits {
        usable_types(&self.gpu_limits)
    }

    /// As findings name it.
    pub fn who(&self) -> String {
        match &self.user {
            None => format!("account {}", self.account),
            Some(u) => format!("user {u} in account {}", self.account),
        }
    }

    /// The rule that says its typed limits exactly.
    pub fn rule(&self) -> String {
        let usable = self.usable_types();
        let types: Vec<&str> = usable.iter().map(|(t, _)| t.as_str()).collect();
        let scope = match &self.user {
            None => format!("Account={}", self.account),
            Some(u) => format!("User={u} Account={}", self.account),
        };
        format!(
            "{scope} GPUTypes={} GPULimit={}",
            types.join(","),
            limit_text(&usable)
        )
    }

    /// Whether `rule` is the one for this association: an account's rule
    /// names it and no user; a user's names the user and, if any account,
    /// this one.
    fn covered_by(&self, rule: &super::config::QosRule) -> bool {
        let super::config::RuleScope::Association { accounts, users } = rule.scope() else {
            return false;
        };
        let has = |list: &[String], name: &str| list.iter().any(|x| x.eq_ignore_ascii_case(name));
        match &self.user {
            None => users.is_empty() && has(accounts, &self.account),
            Some(u) => has(users, u) && (accounts.is_empty() || has(accounts, &self.account)),
        }
    }
}

/// Reads `sacctmgr` run with [`SACCTMGR_ASSOC_ARGS`]: the associations
/// whose `GrpTRES` has a GPU entry.
pub fn parse_sacctmgr_assoc(text: &str) -> Result<Vec<AssocRecord>, SacctmgrParseError> {
    let mut records = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let error = |reason: String| SacctmgrParseError { line, reason };
        if raw.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = raw.split('|').map(str::trim).collect();
        let [account, user, partition, grp_tres] = fields[..] else {
            return Err(error(format!(
                "{} fields in \"{raw}\", expected 4",
                fields.len()
            )));
        };
        let gpu_limits = parse_grp_tres(grp_tres).map_err(|reason| {
            error(format!(
                "GrpTRES \"{grp_tres}\" of account {account}: {reason}"
            ))
        })?;
        if account.is_empty() || gpu_limits.is_empty() {
            continue;
        }
        let some = |v: &str| (!v.is_empty()).then(|| v.to_owned());
        records.push(AssocRecord {
            account: account.to_owned(),
            user: some(user),
            partition: some(partition),
            gpu_limits,
        });
    }
    Ok(records)
}

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

fn join_display<T: fmt::Display>(items: &[T], sep: &str) -> String {
    let mut out = String::new();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(sep);
        }
        let _ = write!(out, "{item}");
    }
    out
}

/// `sacctmgr` printed something this tool does not understand; checking on
/// a guess could report a wrong "consistent", so it stops instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SacctmgrParseError {
    /// 1-based line of `sacctmgr`'s output.
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for SacctmgrParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sacctmgr output line {}: {} (expected Name|GrpTRES|Preempt from `sacctmgr {}`)",
            self.line,
            self.reason,
            SACCTMGR_ARGS.join(" ")
        )
    }
}

impl std::error::Error for SacctmgrParseError {}

/// Reads the output of `sacctmgr` run with [`SACCTMGR_ARGS`]: one
/// `Name|GrpTRES|Preempt` line per QOS, lists comma-separated, empty fields
/// for unset values. Blank lines are skipped; no QOS at all is a valid (if
/// odd) database.
pub fn parse_sacctmgr(text: &str) -> Result<Vec<QosRecord>, SacctmgrParseError> {
    let mut records: Vec<QosRecord> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let error = |reason: String| SacctmgrParseError { line, reason };
        if raw.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = raw.split('|').collect();
        let [name, grp_tres, preempt] = fields[..] else {
            return Err(error(format!(
                "{} fields in \"{raw}\", expected 3",
                fields.len()
            )));
        };
        let name = name.trim();
        if name.is_empty() {
            return Err(error(format!("no QOS name in \"{raw}\"")));
        }
        if records.iter().any(|r| r.name.eq_ignore_ascii_case(name)) {
            return Err(error(format!("QOS {name} listed twice")));
        }
        let gpu_limits = parse_grp_tres(grp_tres)
            .map_err(|reason| error(format!("GrpTRES \"{grp_tres}\" of QOS {name}: {reason}")))?;
        let preempt = preempt
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect();
        records.push(QosRecord {
            name: name.to_owned(),
            gpu_limits,
            preempt,
        });
    }
    Ok(records)
}

pub(crate) fn parse_grp_tres(text: &str) -> Result<Vec<GpuTresLimit>, String> {
    let mut limits: Vec<GpuTresLimit> = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, value) = entry
            .split_once('=')
            .ok_or_else(|| format!("entry \"{entry}\" has no '='"))?;
        // Only gres/gpu and gres/gpu:TYPE; gres/gpumem, gres/mps… are other TRES.
        let gpu_type = match name.strip_prefix("gres/gpu") {
            Some("") => None,
            Some(rest) => match rest.strip_prefix(':') {
                Some(t) if !t.is_empty() => Some(t.to_owned()),
                Some(_) => return Err(format!("entry \"{entry}\" has an empty GPU type")),
                None => continue,
            },
            None => continue,
        };
        let count = value
            .parse::<u64>()
            .map_err(|_| format!("\"{entry}\" is not a whole number of GPUs"))?;
        if limits.iter().any(|l| l.gpu_type == gpu_type) {
            return Err(format!("\"{name}\" appears twice"));
        }
        limits.push(GpuTresLimit { gpu_type, count });
    }
    Ok(limits)
}

/// How much a finding matters; `check` exits 1 on any [`Severity::Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Jobs are judged wrongly: accepted where they escape a limit, or
    /// refused where they would fit.
    Error,
    /// A protection is off or weaker than it could be.
    Warning,
    /// What `gpu_qos.conf` cannot express, for the record; nothing to fix.
    Note,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        })
    }
}

/// One discrepancy between `gpu_qos.conf` and the accounting database.
/// `at` is `FILE:LINE` of the rule in question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// A rule names a QOS accounting does not have.
    UnknownQos { qos: String, at: String },
    /// The rule's `GPUTypes` are not the types `GrpTRES` gives a positive
    /// limit; `gpu_tres` is the GPU part of `GrpTRES`, possibly empty.
    TypesDiffer {
        qos: String,
        at: String,
        config_types: Vec<String>,
        gpu_tres: String,
        usable_types: Vec<String>,
    },
    /// The rule's `GPULimit` is not what `GrpTRES` allows; `expected` is
    /// `None` when `GrpTRES` limits no GPU at all.
    LimitDiffers {
        qos: String,
        at: String,
        types: Vec<String>,
        /// `GPULimit=` as the rule writes it.
        config_limit: String,
        gpu_tres: String,
        /// The `GPULimit=` value that matches `GrpTRES`.
        expected: Option<String>,
    },
    /// A rule without `GPULimit` under a QOS with a GPU limit: jobs that can
    /// never fit are accepted and pend forever.
    LimitCheckOff {
        qos: String,
        at: String,
        gpu_tres: String,
        expected: String,
    },
    /// A rule for a QOS whose `GrpTRES` limits no GPUs: the rule only
    /// restricts the types.
    NoGpuLimit { qos: String, at: String },
    /// The types of the rule have different limits and one `GPULimit=N`
    /// (the largest) stands for all, so for `tighter` types the never-fits
    /// check lets through requests that can never start; `per_type` is the
    /// exact `GPULimit=` value.
    LooserForSomeTypes {
        qos: String,
        at: String,
        limit: u64,
        tighter: Vec<(String, u64)>,
        per_type: String,
    },
    /// A QOS with a typed GPU limit that no rule lists: untyped requests
    /// under it are counted against no typed limit.
    UnlistedTypedQos {
        qos: String,
        gpu_tres: String,
        usable_types: Vec<String>,
        /// The `GPULimit=` value that matches its `GrpTRES`.
        expected: String,
    },
    /// A QOS whose only typed limits are 0 and that has no `gres/gpu=0`:
    /// untyped requests may still land on the forbidden types, and a rule
    /// cannot list a QOS that may use no type.
    ZeroTypedLimitOnly { qos: String, gpu_tres: String },
    /// `LowPriorityQOS` names a QOS accounting does not have.
    LowPriorityUnknown { qos: String },
    /// `LowPriorityQOS` names a QOS no other QOS may preempt, so its jobs
    /// are made requeueable for nothing.
    LowPriorityNotPreemptable { qos: String },
    /// An account's (or a user's) association with a typed GPU limit that
    /// no `Account=`/`User=` rule covers: untyped requests escape it.
    UnlistedTypedAssociation {
        who: String,
        gpu_tres: String,
        rule: String,
    },
    /// The association's rule says other types or limits than its GrpTRES.
    AssociationRuleDiffers {
        who: String,
        at: String,
        gpu_tres: String,
        rule: String,
    },
}

impl Finding {
    pub fn severity(&self) -> Severity {
        match self {
            Finding::UnknownQos { .. }
            | Finding::TypesDiffer { .. }
            | Finding::LimitDiffers { .. }
            | Finding::UnlistedTypedQos { .. }
            | Finding::UnlistedTypedAssociation { .. }
            | Finding::AssociationRuleDiffers { .. }
            | Finding::LowPriorityUnknown { .. } => Severity::Error,
            Finding::LimitCheckOff { .. }
            | Finding::NoGpuLimit { .. }
            | Finding::ZeroTypedLimitOnly { .. }
            | Finding::LowPriorityNotPreemptable { .. } => Severity::Warning,
            Finding::LooserForSomeTypes { .. } => Severity::Note,
        }
    }

    /// A stable name for scripts (`--json`).
    pub fn kind(&self) -> &'static str {
        match self {
            Finding::UnknownQos { .. } => "unknown_qos",
            Finding::TypesDiffer { .. } => "types_differ",
            Finding::LimitDiffers { .. } => "limit_differs",
            Finding::LimitCheckOff { .. } => "limit_check_off",
            Finding::NoGpuLimit { .. } => "no_gpu_limit",
            Finding::LooserForSomeTypes { .. } => "looser_for_some_types",
            Finding::UnlistedTypedQos { .. } => "unlisted_typed_qos",
            Finding::ZeroTypedLimitOnly { .. } => "zero_typed_limit_only",
            Finding::LowPriorityUnknown { .. } => "low_priority_unknown",
            Finding::LowPriorityNotPreemptable { .. } => "low_priority_not_preemptable",
            Finding::UnlistedTypedAssociation { .. } => "unlisted_typed_association",
            Finding::AssociationRuleDiffers { .. } => "association_rule_differs",
        }
    }

    /// The QOS the finding is about, or the association (`account
    /// lafferty`, `user alice in account lafferty`).
    pub fn qos(&self) -> &str {
        match self {
            Finding::UnlistedTypedAssociation { who, .. }
            | Finding::AssociationRuleDiffers { who, .. } => who,
            Finding::UnknownQos { qos, .. }
            | Finding::TypesDiffer { qos, .. }
            | Finding::LimitDiffers { qos, .. }
            | Finding::LimitCheckOff { qos, .. }
            | Finding::NoGpuLimit { qos, .. }
            | Finding::LooserForSomeTypes { qos, .. }
            | Finding::UnlistedTypedQos { qos, .. }
            | Finding::ZeroTypedLimitOnly { qos, .. }
            | Finding::LowPriorityUnknown { qos }
            | Finding::LowPriorityNotPreemptable { qos } => qos,
        }
    }

    /// What the finding is about, as the audit names objects.
    pub fn object(&self) -> String {
        match self {
            Finding::UnlistedTypedAssociation { who, .. }
            | Finding::AssociationRuleDiffers { who, .. } => who.clone(),
            _ => format!("QOS {}", self.qos()),
        }
    }
}

/// `QOS: what is wrong; what to do`, without the severity word.
impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::UnknownQos { qos, at } => write!(
                f,
                "{qos}: {at} lists it, but the accounting database has no such QOS \
                 (sacctmgr show qos); remove it from the rule or create it"
            ),
            Finding::TypesDiffer {
                qos,
                at,
                config_types,
                gpu_tres,
                usable_types,
            } => {
                let db = if gpu_tres.is_empty() {
                    "GrpTRES has no GPU limit".to_owned()
                } else {
                    format!("GrpTRES says {gpu_tres}")
                };
                write!(
                    f,
                    "{qos}: {at} says GPUTypes={}, {db}",
                    config_types.join(",")
                )?;
                if usable_types.is_empty() {
                    f.write_str("; it may use no GPU: remove it from the rule or raise its GrpTRES")
                } else {
                    write!(f, "; set GPUTypes={}", usable_types.join(","))
                }
            }
            Finding::LimitDiffers {
                qos,
                at,
                types,
                config_limit,
                gpu_tres,
                expected,
            } => {
                write!(
                    f,
                    "{qos}: {at} says {} limit {config_limit}, ",
                    types.join(",")
                )?;
                match expected {
                    None => f.write_str(
                        "GrpTRES has no GPU limit; remove GPULimit or give the QOS a GrpTRES limit",
                    ),
                    Some(n) => write!(f, "GrpTRES says {gpu_tres}; set GPULimit={n}"),
                }
            }
            Finding::LimitCheckOff {
                qos,
                at,
                gpu_tres,
                expected,
            } => write!(
                f,
                "{qos}: {at} has no GPULimit while GrpTRES says {gpu_tres}, so jobs asking \
                 for more GPUs than that are accepted and pend forever; add GPULimit={expected}"
            ),
            Finding::NoGpuLimit { qos, at } => write!(
                f,
                "{qos}: {at} restricts its GPU types, but GrpTRES limits no GPUs for it, so \
                 no GPU count is enforced; give it GrpTRES=gres/gpu:<type>=N if it should have one"
            ),
            Finding::UnlistedTypedAssociation {
                who,
                gpu_tres,
                rule,
            } => write!(
                f,
                "{who}: GrpTRES says {gpu_tres}, but gpu_qos.conf has no rule for it, so \
                 untyped GPU requests of its jobs escape that limit; add {rule}"
            ),
            Finding::AssociationRuleDiffers {
                who,
                at,
                gpu_tres,
                rule,
            } => write!(
                f,
                "{who}: {at} does not say what GrpTRES says ({gpu_tres}); write {rule}"
            ),
            Finding::LooserForSomeTypes {
                qos,
                at,
                limit,
                tighter,
                per_type,
            } => {
                write!(f, "{qos}: {at} has GPULimit={limit}, but ")?;
                for (i, (t, n)) in tighter.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{t} is limited to {n}")?;
                }
                write!(
                    f,
                    "; larger requests of those types pass submit and pend: set \
                     GPULimit={per_type}"
                )
            }
            Finding::UnlistedTypedQos {
                qos,
                gpu_tres,
                usable_types,
                expected,
            } => write!(
                f,
                "{qos}: GrpTRES says {gpu_tres}, but gpu_qos.conf has no rule for it, so \
                 untyped GPU requests under it escape that limit; add \
                 QOS={qos} GPUTypes={} GPULimit={expected}",
                usable_types.join(",")
            ),
            Finding::ZeroTypedLimitOnly { qos, gpu_tres } => write!(
                f,
                "{qos}: GrpTRES says {gpu_tres}, which untyped GPU requests are not counted \
                 against, and gpu_qos.conf cannot list a QOS that may use no GPU type; add \
                 gres/gpu=0 to its GrpTRES if it should get no GPUs"
            ),
            Finding::LowPriorityUnknown { qos } => write!(
                f,
                "{qos}: LowPriorityQOS names it, but the accounting database has no such QOS"
            ),
            Finding::LowPriorityNotPreemptable { qos } => write!(
                f,
                "{qos}: LowPriorityQOS names it, but no other QOS has it in its Preempt list, \
                 so its jobs are made requeueable yet never preempted \
                 (sacctmgr modify qos <name> set Preempt+={qos})"
            ),
        }
    }
}

/// Compares a parsed `gpu_qos.conf` (read from `file`) with the QOS of the
/// accounting database. Findings come rule by rule in file order, then the
/// unlisted QOS in database order, then `LowPriorityQOS`.
pub fn check(cfg: &GpuQosConfig, file: &str, db: &[QosRecord]) -> Vec<Finding> {
    let mut findings = Vec::new();
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
                        findings.push(Finding::TypesDiffer {
                            qos,
                            at: at.clone(),
                            config_types: rule.gpu_types().to_vec(),
                            gpu_tres,
                            usable_types,
                        });
                        continue;
                    }
                }
            } else if types_differ {
                findings.push(Finding::TypesDiffer {
                    qos,
                    at: at.clone(),
                    config_types: rule.gpu_types().to_vec(),
                    gpu_tres,
                    usable_types,
                });
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

/// What an unlisted QOS means, if anything: a typed limit needs a rule; a
/// QOS limited only by `gres/gpu=N` needs none, since every request counts
/// against that.
fn unlisted_finding(record: &QosRecord) -> Option<Finding> {
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

/// How many findings of each severity, and the exit status they mean.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub errors: usize,
    pub warnings: usize,
    pub notes: usize,
}

impl Tally {
    pub fn of(findings: &[Finding]) -> Self {
        let mut tally = Tally::default();
        for f in findings {
            match f.severity() {
                Severity::Error => tally.errors += 1,
                Severity::Warning => tally.warnings += 1,
                Severity::Note => tally.notes += 1,
            }
        }
        tally
    }

    /// 0: consistent (warnings and notes allowed); 1: discrepancies.
    pub fn exit_code(&self) -> u8 {
        u8::from(self.errors > 0)
    }
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// The last line of `check`'s text output.
pub fn summary_line(file: &str, cfg: &GpuQosConfig, db: &[QosRecord], tally: Tally) -> String {
    let verdict = if tally.errors > 0 {
        "DISCREPANCIES"
    } else {
        "consistent"
    };
    format!(
        "{file}: {verdict}: {}, {}, {} ({} checked against {} QOS in the accounting database)",
        plural(tally.errors, "error"),
        plural(tally.warnings, "warning"),
        plural(tally.notes, "note"),
        plural(cfg.rules().len(), "rule"),
        db.len(),
    )
}

/// One finding as `check --json` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FindingJson {
    pub severity: String,
    pub kind: String,
    pub qos: String,
    pub message: String,
}

/// What `check --json` prints: the result, or why there is none (`exit`
/// 2 and `error`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckJson {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conf: Option<String>,
    pub exit: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub errors: usize,
    #[serde(default)]
    pub warnings: usize,
    #[serde(default)]
    pub notes: usize,
    #[serde(default)]
    pub findings: Vec<FindingJson>,
}

impl CheckJson {
    pub fn report(file: &str, findings: &[Finding]) -> Self {
        let tally = Tally::of(findings);
        Self {
            conf: Some(file.to_owned()),
            exit: tally.exit_code(),
            error: None,
            errors: tally.errors,
            warnings: tally.warnings,
            notes: tally.notes,
            findings: findings
                .iter()
                .map(|f| FindingJson {
                    severity: f.severity().to_string(),
                    kind: f.kind().to_string(),
                    qos: f.qos().to_owned(),
                    message: f.to_string(),
                })
                .collect(),
        }
    }

    /// `check` could not check (exit 2).
    pub fn unchecked(reason: &str) -> Self {
        Self {
            conf: None,
            exit: 2,
            error: Some(reason.to_owned()),
            errors: 0,
            warnings: 0,
            notes: 0,
            findings: Vec::new(),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// A complete `gpu_qos.conf` for the database: one rule per set of QOS with
/// identical per-type GPU limits, `LowPriorityQOS` = every QOS another QOS
/// may preempt. Deterministic (sorted, no timestamp), so that regenerating
/// and diffing shows only what changed in accounting.
/// The `GPULimit=` value that says `limits` exactly: one number where every
/// type has the same, else one `type:N` item per type.
pub fn limit_text(limits: &[(String, u64)]) -> String {
    match limits {
        [(_, first), rest @ ..] if rest.iter().all(|(_, n)| n == first) => first.to_string(),
        _ => limits
            .iter()
            .map(|(t, n)| format!("{t}:{n}"))
            .collect::<Vec<_>>()
            .join(","),
    }
}

pub fn generate(db: &[QosRecord]) -> String {
    generate_for_site(db, &[], &[])
}

/// [`generate`], plus a `Partition=` rule for each partition (name, its
/// `QOS=`) whose QOS carries typed GPU limits: Slurm applies a partition's
/// QOS to every job in it, named or not.
/// Likewise an `Account=` (or `User=`) rule for each association with
/// typed GPU limits.
pub fn generate_for_site(
    db: &[QosRecord],
    partition_qos: &[(String, String)],
    assocs: &[AssocRecord],
) -> String {
    // Per-type limits → QOS names; BTreeMap so the output order is stable.
    let mut groups: BTreeMap<TypeLimits, Vec<String>> = BTreeMap::new();
    let mut zero_only: Vec<&QosRecord> = Vec::new();
    for record in db {
        let usable = record.usable_types();
        if !usable.is_empty() {
            groups.entry(usable).or_default().push(record.name.clone());
        } else if unlisted_finding(record).is_some() {
            zero_only.push(record);
        }
    }
    let mut rules: Vec<(TypeLimits, Vec<String>)> = groups.into_iter().collect();
    for (_, names) in &mut rules {
        names.sort();
    }
    // Ordered by QOS name, as admins look them up.
    rules.sort_by(|a, b| a.1.cmp(&b.1));

    let mut out = String::new();
    out.push_str(
        "# gpu_qos.conf — policy of the job_submit/gpu_qos plugin (gpushare).\n\
         # Generated by `gpu-qos generate` from `sacctmgr ",
    );
    out.push_str(&SACCTMGR_ARGS.join(" "));
    out.push_str(
        "`.\n\
         # Check it against accounting again with `gpu-qos check` after any\n\
         # `sacctmgr modify qos`.\n\
         #\n\
         # One rule per set of QOS with the same typed GPU limits (GrpTRES\n\
         # gres/gpu:TYPE=N): jobs under them must name one of GPUTypes, so the\n\
         # typed limit applies to every GPU request. GPULimit is the most GPUs of\n\
         # each type a job under the QOS can ever get: the typed limit, capped by\n\
         # gres/gpu=N if there is one (GPULimit=N for every type alike, or\n\
         # GPULimit=type:N,... where the types differ).\n",
    );
    if rules.is_empty() {
        out.push_str(
            "#\n# No QOS in the database has a typed GPU limit: there is no rule to write.\n",
        );
    }
    for (limits, names) in &rules {
        out.push('\n');
        let described: Vec<String> = limits.iter().map(|(t, n)| format!("{t}={n}")).collect();
        let _ = writeln!(out, "# Per type: {}", described.join(", "));
        let types: Vec<&str> = limits.iter().map(|(t, _)| t.as_str()).collect();
        let _ = writeln!(
            out,
            "QOS={} GPUTypes={} GPULimit={}",
            names.join(","),
            types.join(","),
            limit_text(limits)
        );
    }
    for (partition, qos) in partition_qos {
        let Some(record) = db.iter().find(|r| r.name.eq_ignore_ascii_case(qos)) else {
            continue;
        };
        let limits = record.usable_types();
        if limits.is_empty() {
            continue;
        }
        let types: Vec<&str> = limits.iter().map(|(t, _)| t.as_str()).collect();
        let _ = writeln!(
            out,
            "\n# Partition {partition}: its QOS {} says {}.\nPartition={partition} GPUTypes={} GPULimit={}",
            record.name,
            record.gpu_tres_text(),
            types.join(","),
            limit_text(&limits)
        );
    }
    for a in assocs.iter().filter(|a| !a.usable_types().is_empty()) {
        let _ = writeln!(
            out,
            "
# {}: GrpTRES {}.
{}",
            a.who(),
            join_display(&a.gpu_limits, ","),
            a.rule()
        );
    }
    for record in &zero_only {
        let _ = writeln!(
            out,
            "\n# {}: GrpTRES {} allows no GPU type, which a rule cannot say; untyped\n\
             # requests are not counted against it: add gres/gpu=0 to its GrpTRES.",
            record.name,
            record.gpu_tres_text()
        );
    }

    out.push_str(
        "\n# qos: untyped GPU requests are rejected under the QOS listed above.\n\
         # all: untyped GPU requests are rejected for every job.\n\
         RequireGPUType=qos\n\n\
         # The QOS that another QOS may preempt (its Preempt list): their jobs are\n\
         # made requeueable and their output is appended across requeues.\n",
    );
    let mut preempted: Vec<&str> = Vec::new();
    for record in db {
        if db.iter().any(|other| other.preempts(&record.name))
            && !preempted
                .iter()
                .any(|p| p.eq_ignore_ascii_case(&record.name))
        {
            preempted.push(&record.name);
        }
    }
    preempted.sort_by(
        |a, b| match a.to_ascii_lowercase().cmp(&b.to_ascii_lowercase()) {
            Ordering::Equal => a.cmp(b),
            other => other,
        },
    );
    if preempted.is_empty() {
        out.push_str("# (No QOS preempts another.)\n# LowPriorityQOS=lowprio\n");
    } else {
        let _ = writeln!(out, "LowPriorityQOS={}", preempted.join(","));
    }
    out.push_str(
        "\n# Not in the accounting database; uncomment and adjust for this site.\n\
         # Low-priority job arrays run at most this many tasks at once (%N):\n\
         # LowPriorityMaxArrayTasks=8\n\
         # mps/shard GPU shares only inside reservations matching these patterns:\n\
         # SharedGPUReservations=jhl_homework_gpu*,jupyterhub_course_*\n\
         # A share is at most one GPU (UnitsPerGPU of gpu_mps.conf):\n\
         # MaxMPSPerJob=100\n",
    );
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::qos::config as qos_conf;
    use proptest::prelude::*;

    const FILE: &str = "gpu_qos.conf";

    /// The example site: what `sacctmgr -nP show qos format=Name,GrpTRES,Preempt`
    /// prints for it.
    const SITE_DB: &str = "\
normal||
lowprio||
qos_dijk|cpu=64,gres/gpu:h100=4|lowprio
qos_zhuoran_yang|gres/gpu:h100=4|lowprio
qos_ma_zongming|gres/gpu:h100=4,mem=512000|lowprio
qos_saxena|gres/gpu:a100=20|lowprio
qos_ying_rex|gres/gpu:a40=4|lowprio
qos_lafferty|gres/gpu:a40=4|lowprio
qos_yildirim|gres/gpu:a40=12|lowprio
";

    const SITE_CONF: &str = include_str!("../../plugins/job_submit_gpu_qos/gpu_qos.conf.example");

    fn db(text: &str) -> Vec<QosRecord> {
        parse_sacctmgr(text).unwrap()
    }

    fn conf(text: &str) -> GpuQosConfig {
        qos_conf::parse(text, FILE).unwrap()
    }

    fn findings(conf_text: &str, db_text: &str) -> Vec<Finding> {
        check(&conf(conf_text), FILE, &db(db_text))
    }

    /// Each finding as the line `check` prints.
    fn lines(conf_text: &str, db_text: &str) -> Vec<String> {
        findings(conf_text, db_text)
            .iter()
            .map(|f| format!("{}: {f}", f.severity()))
            .collect()
    }

    #[test]
    fn parses_sacctmgr_output() {
        let records = db("\
normal||
qos_x|cpu=10,gres/gpu:a40=4,gres/gpu=8,gres/gpumem=100,gres/mps=200|lowprio,scavenger
lowprio||
");
        assert_eq!(records.len(), 3);
        let x = &records[1];
        assert_eq!(x.name, "qos_x");
        assert_eq!(
            x.gpu_limits,
            [
                GpuTresLimit {
                    gpu_type: Some("a40".into()),
                    count: 4
                },
                GpuTresLimit {
                    gpu_type: None,
                    count: 8
                }
            ]
        );
        assert_eq!(x.gpu_tres_text(), "gres/gpu:a40=4,gres/gpu=8");
        assert_eq!(x.untyped_limit(), Some(8));
        assert_eq!(x.preempt, ["lowprio", "scavenger"]);
        assert!(records[0].gpu_limits.is_empty() && records[0].preempt.is_empty());
    }

    #[test]
    fn empty_output_is_an_empty_database() {
        assert_eq!(db(""), []);
        assert_eq!(db("\n  \n"), []);
    }

    #[test]
    fn malformed_sacctmgr_output_is_a_clear_error() {
        let err = |text: &str| parse_sacctmgr(text).unwrap_err().to_string();
        const TAIL: &str =
            "(expected Name|GrpTRES|Preempt from `sacctmgr -nP show qos format=Name,GrpTRES,Preempt`)";
        assert_eq!(
            err("normal||\nqos_x|gres/gpu:a40=4"),
            format!(
                "sacctmgr output line 2: 2 fields in \"qos_x|gres/gpu:a40=4\", expected 3 {TAIL}"
            )
        );
        assert_eq!(
            err("  Name  GrpTRES  Preempt"),
            format!("sacctmgr output line 1: 1 fields in \"  Name  GrpTRES  Preempt\", expected 3 {TAIL}")
        );
        assert_eq!(
            err("|gres/gpu=1|"),
            format!("sacctmgr output line 1: no QOS name in \"|gres/gpu=1|\" {TAIL}")
        );
        assert_eq!(
            err("q|gres/gpu:a40=four|"),
            format!(
                "sacctmgr output line 1: GrpTRES \"gres/gpu:a40=four\" of QOS q: \
                 \"gres/gpu:a40=four\" is not a whole number of GPUs {TAIL}"
            )
        );
        assert!(err("q|gres/gpu:a40|").contains("entry \"gres/gpu:a40\" has no '='"));
        assert!(err("q|gres/gpu:=3|").contains("has an empty GPU type"));
        assert!(err("q|gres/gpu:a40=1,gres/gpu:a40=2|").contains("\"gres/gpu:a40\" appears twice"));
        assert!(err("q||\nQ||").contains("line 2: QOS Q listed twice"));
        assert!(err("q|gres/gpu=-1|").contains("not a whole number"));
    }

    #[test]
    fn the_example_site_is_consistent() {
        assert_eq!(lines(SITE_CONF, SITE_DB), Vec::<String>::new());
    }

    #[test]
    fn unknown_qos_is_an_error() {
        assert_eq!(
            lines(
                "QOS=qos_a,qos_gone GPUTypes=a40 GPULimit=4",
                "qos_a|gres/gpu:a40=4|"
            ),
            [
                "error: qos_gone: gpu_qos.conf:1 lists it, but the accounting database has no \
              such QOS (sacctmgr show qos); remove it from the rule or create it"
            ]
        );
    }

    #[test]
    fn qos_names_compare_without_case() {
        assert_eq!(
            lines("QOS=QOS_A GPUTypes=a40 GPULimit=4", "qos_a|gres/gpu:a40=4|"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn limit_differs_says_both_sides() {
        assert_eq!(
            lines(
                "#\n#\n#\n#\n#\n#\n#\n#\n#\n#\n#\nQOS=qos_lafferty GPUTypes=a40 GPULimit=4",
                "qos_lafferty|gres/gpu:a40=8|"
            ),
            [
                "error: qos_lafferty: gpu_qos.conf:12 says a40 limit 4, GrpTRES says \
              gres/gpu:a40=8; set GPULimit=8"
            ]
        );
    }

    #[test]
    fn the_untyped_limit_caps_every_type() {
        let db_text = "q|gres/gpu:a40=8,gres/gpu=4|";
        assert_eq!(
            lines("QOS=q GPUTypes=a40 GPULimit=8", db_text),
            ["error: q: gpu_qos.conf:1 says a40 limit 8, GrpTRES says \
              gres/gpu:a40=8,gres/gpu=4; set GPULimit=4"]
        );
        assert!(lines("QOS=q GPUTypes=a40 GPULimit=4", db_text).is_empty());
    }

    #[test]
    fn types_differ_is_an_error() {
        assert_eq!(
            lines(
                "QOS=q GPUTypes=a40 GPULimit=4",
                "q|gres/gpu:a40=4,gres/gpu:h100=4|"
            ),
            ["error: q: gpu_qos.conf:1 says GPUTypes=a40, GrpTRES says \
              gres/gpu:a40=4,gres/gpu:h100=4; set GPUTypes=a40,h100"]
        );
        // A type the rule permits that accounting does not count per type.
        assert_eq!(
            findings("QOS=q GPUTypes=a40,a100 GPULimit=4", "q|gres/gpu:a40=4|")[0].kind(),
            "types_differ"
        );
        // Order in the file does not matter.
        assert!(lines(
            "QOS=q GPUTypes=h100,a40 GPULimit=4",
            "q|gres/gpu:a40=4,gres/gpu:h100=4|"
        )
        .is_empty());
    }

    #[test]
    fn a_type_accounting_forbids_is_a_type_difference() {
        assert_eq!(
            lines("QOS=q GPUTypes=a40 GPULimit=4", "q|gres/gpu:a40=0|"),
            [
                "error: q: gpu_qos.conf:1 says GPUTypes=a40, GrpTRES says gres/gpu:a40=0; \
                 it may use no GPU: remove it from the rule or raise its GrpTRES"
            ]
        );
        assert_eq!(
            findings("QOS=q GPUTypes=a40 GPULimit=4", "q|gres/gpu=0|")[0].kind(),
            "types_differ"
        );
        assert_eq!(
            findings(
                "QOS=q GPUTypes=a40 GPULimit=4",
                "q|gres/gpu:a40=4,gres/gpu=0|"
            )[0]
            .kind(),
            "types_differ"
        );
        assert_eq!(
            findings(
                "QOS=q GPUTypes=a40,h100 GPULimit=4",
                "q|gres/gpu:a40=4,gres/gpu:h100=0|"
            )[0]
            .kind(),
            "types_differ"
        );
    }

    #[test]
    fn rule_without_limit_under_a_typed_limit_is_a_warning() {
        assert_eq!(
            lines("QOS=q GPUTypes=a40", "q|gres/gpu:a40=4|"),
            [
                "warning: q: gpu_qos.conf:1 has no GPULimit while GrpTRES says gres/gpu:a40=4, \
              so jobs asking for more GPUs than that are accepted and pend forever; add \
              GPULimit=4"
            ]
        );
    }

    #[test]
    fn only_an_untyped_limit_caps_the_rule_types() {
        assert!(lines("QOS=q GPUTypes=a40,h100 GPULimit=8", "q|gres/gpu=8|").is_empty());
        assert_eq!(
            findings("QOS=q GPUTypes=a40 GPULimit=4", "q|gres/gpu=8|")[0].kind(),
            "limit_differs"
        );
        assert_eq!(
            findings("QOS=q GPUTypes=a40", "q|gres/gpu=8|")[0].kind(),
            "limit_check_off"
        );
    }

    #[test]
    fn a_rule_for_a_qos_without_gpu_limits() {
        assert_eq!(
            lines("QOS=q GPUTypes=a40", "q|cpu=4|"),
            [
                "warning: q: gpu_qos.conf:1 restricts its GPU types, but GrpTRES limits no GPUs \
              for it, so no GPU count is enforced; give it GrpTRES=gres/gpu:<type>=N if it \
              should have one"
            ]
        );
        assert_eq!(
            lines("QOS=q GPUTypes=a40 GPULimit=2", "q||"),
            [
                "error: q: gpu_qos.conf:1 says a40 limit 2, GrpTRES has no GPU limit; remove \
              GPULimit or give the QOS a GrpTRES limit"
            ]
        );
    }

    #[test]
    fn multi_type_limits_are_checked_per_type() {
        let db_text = "q|gres/gpu:a40=4,gres/gpu:h100=8|";
        assert_eq!(
            lines("QOS=q GPUTypes=a40,h100 GPULimit=8", db_text),
            [
                "note: q: gpu_qos.conf:1 has GPULimit=8, but a40 is limited to 4; larger \
              requests of those types pass submit and pend: set GPULimit=a40:4,h100:8"
            ]
        );
        // Per type, exactly: nothing to say.
        assert!(lines("QOS=q GPUTypes=a40,h100 GPULimit=h100:8,a40:4", db_text).is_empty());
        assert_eq!(
            lines("QOS=q GPUTypes=a40,h100 GPULimit=a40:4,h100:6", db_text),
            [
                "error: q: gpu_qos.conf:1 says a40,h100 limit a40:4,h100:6, GrpTRES says \
              gres/gpu:a40=4,gres/gpu:h100=8; set GPULimit=a40:4,h100:8"
            ]
        );
        // The smallest would refuse 5..8 h100, which accounting lets run.
        assert_eq!(
            lines("QOS=q GPUTypes=a40,h100 GPULimit=4", db_text),
            [
                "error: q: gpu_qos.conf:1 says a40,h100 limit 4, GrpTRES says \
              gres/gpu:a40=4,gres/gpu:h100=8; set GPULimit=a40:4,h100:8"
            ]
        );
        // The sum is no limit any job meets.
        assert_eq!(
            findings("QOS=q GPUTypes=a40,h100 GPULimit=12", db_text)[0].kind(),
            "limit_differs"
        );
    }

    #[test]
    fn unlisted_typed_qos_is_the_hole() {
        assert_eq!(
            lines("", "normal|gres/gpu=16|\nqos_new|cpu=8,gres/gpu:h100=2|"),
            [
                "error: qos_new: GrpTRES says gres/gpu:h100=2, but gpu_qos.conf has no rule for \
              it, so untyped GPU requests under it escape that limit; add QOS=qos_new \
              GPUTypes=h100 GPULimit=2"
            ]
        );
    }

    #[test]
    fn zero_typed_limits_without_an_untyped_zero_are_a_warning() {
        assert_eq!(
            lines("", "q|gres/gpu:a40=0|"),
            [
                "warning: q: GrpTRES says gres/gpu:a40=0, which untyped GPU requests are not \
              counted against, and gpu_qos.conf cannot list a QOS that may use no GPU type; \
              add gres/gpu=0 to its GrpTRES if it should get no GPUs"
            ]
        );
        assert!(lines("", "q|gres/gpu:a40=0,gres/gpu=0|").is_empty());
    }

    #[test]
    fn low_priority_qos_checks() {
        let db_text = "lowprio||\nscavenger||\nhigh||lowprio\nselfish||selfish";
        assert!(lines("LowPriorityQOS=lowprio", db_text).is_empty());
        assert!(lines("LowPriorityQOS=LOWPRIO", db_text).is_empty());
        assert_eq!(
            lines("LowPriorityQOS=lowprio,scavenger,gone,selfish", db_text),
            [
                "warning: scavenger: LowPriorityQOS names it, but no other QOS has it in its \
                 Preempt list, so its jobs are made requeueable yet never preempted \
                 (sacctmgr modify qos <name> set Preempt+=scavenger)",
                "error: gone: LowPriorityQOS names it, but the accounting database has no such QOS",
                "warning: selfish: LowPriorityQOS names it, but no other QOS has it in its \
                 Preempt list, so its jobs are made requeueable yet never preempted \
                 (sacctmgr modify qos <name> set Preempt+=selfish)",
            ]
        );
    }

    #[test]
    fn tally_and_exit_code() {
        let f = findings(
            "QOS=q GPUTypes=a40,h100 GPULimit=8\nQOS=r GPUTypes=a40",
            "q|gres/gpu:a40=4,gres/gpu:h100=8|\nr|gres/gpu:a40=1|",
        );
        let tally = Tally::of(&f);
        assert_eq!(
            tally,
            Tally {
                errors: 0,
                warnings: 1,
                notes: 1
            }
        );
        assert_eq!(tally.exit_code(), 0);
        let f = findings("", "q|gres/gpu:a40=4|");
        assert_eq!(Tally::of(&f).exit_code(), 1);
    }

    #[test]
    fn summary_line_counts() {
        let cfg = conf(SITE_CONF);
        let records = db(SITE_DB);
        assert_eq!(
            summary_line(FILE, &cfg, &records, Tally::default()),
            "gpu_qos.conf: consistent: 0 errors, 0 warnings, 0 notes (4 rules checked \
             against 9 QOS in the accounting database)"
        );
        assert_eq!(
            summary_line(
                FILE,
                &conf("QOS=q GPUTypes=a"),
                &records[..1],
                Tally {
                    errors: 1,
                    warnings: 0,
                    notes: 1
                }
            ),
            "gpu_qos.conf: DISCREPANCIES: 1 error, 0 warnings, 1 note (1 rule checked \
             against 1 QOS in the accounting database)"
        );
    }

    #[test]
    fn json_report() {
        let f = findings("QOS=q GPUTypes=a40", "q|gres/gpu:a40=4|");
        let text = CheckJson::report("/etc/slurm/\"x\".conf", &f).to_json();
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back["conf"], "/etc/slurm/\"x\".conf");
        assert_eq!(
            (back["exit"].as_u64(), back["warnings"].as_u64()),
            (Some(0), Some(1))
        );
        assert_eq!(back["findings"][0]["kind"], "limit_check_off");
        assert_eq!(back["findings"][0]["qos"], "q");
        assert_eq!(back["findings"][0]["message"], f[0].to_string());
        assert_eq!(
            CheckJson::unchecked("sacctmgr: error").to_json(),
            "{\"exit\":2,\"error\":\"sacctmgr: error\",\"errors\":0,\"warnings\":0,\"notes\":0,\"findings\":[]}"
        );
    }

    #[test]
    fn generate_groups_qos_with_identical_limits() {
        let text = generate(&db(SITE_DB));
        let rules: Vec<&str> = text.lines().filter(|l| l.starts_with("QOS=")).collect();
        assert_eq!(
            rules,
            [
                "QOS=qos_dijk,qos_ma_zongming,qos_zhuoran_yang GPUTypes=h100 GPULimit=4",
                "QOS=qos_lafferty,qos_ying_rex GPUTypes=a40 GPULimit=4",
                "QOS=qos_saxena GPUTypes=a100 GPULimit=20",
                "QOS=qos_yildirim GPUTypes=a40 GPULimit=12",
            ]
        );
        assert!(text.contains("\nLowPriorityQOS=lowprio\n"));
        assert!(text.contains("\nRequireGPUType=qos\n"));
        let cfg = conf(&text);
        assert_eq!(cfg.low_priority_qos(), ["lowprio"]);
        assert_eq!(cfg.max_mps_per_job(), None);
    }

    const ASSOCS: &str = "root|||\n\
        lafferty|||gres/gpu:a40=4\n\
        lafferty|alice||gres/gpu:a40=2\n\
        research|bob||cpu=4\n";

    #[test]
    fn associations_with_typed_limits_need_their_rules() {
        let assocs = parse_sacctmgr_assoc(ASSOCS).unwrap();
        assert_eq!(assocs.len(), 2, "{assocs:?}");
        let findings = |conf_text: &str| -> Vec<String> {
            check_associations(&conf(conf_text), "gpu_qos.conf", &assocs)
                .iter()
                .map(|f| format!("{}: {f}", f.kind()))
                .collect()
        };
        assert_eq!(
            findings(""),
            [
                "unlisted_typed_association: account lafferty: GrpTRES says gres/gpu:a40=4, but \
                 gpu_qos.conf has no rule for it, so untyped GPU requests of its jobs escape that \
                 limit; add Account=lafferty GPUTypes=a40 GPULimit=4",
                "unlisted_typed_association: user alice in account lafferty: GrpTRES says \
                 gres/gpu:a40=2, but gpu_qos.conf has no rule for it, so untyped GPU requests of \
                 its jobs escape that limit; add User=alice Account=lafferty GPUTypes=a40 \
                 GPULimit=2",
            ]
        );
        assert!(findings(
            "Account=lafferty GPUTypes=a40 GPULimit=4\nUser=alice GPUTypes=a40 GPULimit=2\n"
        )
        .is_empty());
        assert_eq!(
            findings(
                "Account=lafferty GPUTypes=a40 GPULimit=8\nUser=alice GPUTypes=a40 GPULimit=2\n"
            ),
            [
                "association_rule_differs: account lafferty: gpu_qos.conf:1 does not say what \
              GrpTRES says (gres/gpu:a40=4); write Account=lafferty GPUTypes=a40 GPULimit=4"
            ]
        );
        let text = generate_for_site(&[], &[], &assocs);
        let cfg = conf(&text);
        assert!(check_associations(&cfg, "x", &assocs).is_empty(), "{text}");
        assert!(parse_sacctmgr_assoc("a|b|c").is_err());
    }

    #[test]
    fn generate_writes_partition_rules_for_partition_qos() {
        let text = generate_for_site(
            &db("part_a40|gres/gpu:a40=8|\nnormal||"),
            &[
                ("a40only".into(), "part_a40".into()),
                ("cpu".into(), "normal".into()),
            ],
            &[],
        );
        assert!(text.contains(
            "# Partition a40only: its QOS part_a40 says gres/gpu:a40=8.\n\
             Partition=a40only GPUTypes=a40 GPULimit=8\n"
        ));
        assert!(!text.contains("Partition=cpu"));
        let cfg = conf(&text);
        assert!(cfg.partition_rule("a40only").is_some());
    }

    #[test]
    fn generate_multi_type_writes_each_types_limit() {
        let text = generate(&db("q|gres/gpu:h100=8,gres/gpu:a40=4|\nr|gres/gpu:a40=0|"));
        assert!(text.contains(
            "# Per type: a40=4, h100=8\n\
             QOS=q GPUTypes=a40,h100 GPULimit=a40:4,h100:8\n"
        ));
        assert!(text.contains("# r: GrpTRES gres/gpu:a40=0 allows no GPU type"));
        assert!(text.contains("# (No QOS preempts another.)\n# LowPriorityQOS=lowprio\n"));
    }

    #[test]
    fn generate_for_an_empty_database_parses_and_enforces_nothing() {
        let cfg = conf(&generate(&[]));
        assert!(cfg.rules().is_empty());
        assert!(cfg.low_priority_qos().is_empty());
    }

    #[test]
    fn generated_site_file_checks_clean() {
        let records = db(SITE_DB);
        let cfg = conf(&generate(&records));
        assert_eq!(check(&cfg, FILE, &records), []);
    }

    /// A small database in sacctmgr's format: QOS named q0…, each with some
    /// typed and an optional untyped limit (0 included), preempting others.
    fn any_database() -> impl Strategy<Value = String> {
        let qos = (
            prop::collection::vec((0usize..3, 0u64..5), 0..3),
            prop::option::of(0u64..6),
            prop::collection::vec(0usize..6, 0..3),
        );
        prop::collection::vec(qos, 0..6).prop_map(|all| {
            let types = ["a40", "h100", "a100"];
            let mut out = String::new();
            for (i, (typed, untyped, preempt)) in all.iter().enumerate() {
                let mut tres: Vec<String> = vec!["cpu=8".into()];
                let mut seen = Vec::new();
                for &(t, n) in typed {
                    if !seen.contains(&t) {
                        seen.push(t);
                        tres.push(format!("gres/gpu:{}={n}", types[t]));
                    }
                }
                if let Some(n) = untyped {
                    tres.push(format!("gres/gpu={n}"));
                }
                let preempt: Vec<String> = preempt
                    .iter()
                    .filter(|&&p| p < all.len())
                    .map(|p| format!("q{p}"))
                    .collect();
                out.push_str(&format!("q{i}|{}|{}\n", tres.join(","), preempt.join(",")));
            }
            out
        })
    }

    proptest! {
        #[test]
        fn generated_files_parse_and_check_without_errors(db_text in any_database()) {
            let records = db(&db_text);
            let text = generate(&records);
            let cfg = qos_conf::parse(&text, FILE).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let found = check(&cfg, FILE, &records);
            prop_assert_eq!(Tally::of(&found).errors, 0, "{:?}\n{}", found, text);
            // Every QOS with a usable typed limit got a rule.
            for r in &records {
                prop_assert_eq!(cfg.rule_for(&r.name).is_some(), r.expected_gpu_limit().is_some());
            }
        }

        #[test]
        fn parse_sacctmgr_never_panics(text in ".*") {
            let _ = parse_sacctmgr(&text);
        }

        #[test]
        fn parse_sacctmgr_never_panics_on_shaped_text(
            text in "([a-z]{0,3}\\|((gres/gpu(:[a-z0-9]{0,3})?|cpu)=?[0-9a-z-]{0,3},?){0,3}\\|[a-z,]{0,5}\n){0,4}"
        ) {
            let _ = parse_sacctmgr(&text);
        }
    }
}
