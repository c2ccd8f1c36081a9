//! What `sacctmgr` says of each QOS and association, and its parsers:
//! strict, because a guess could report a wrong "consistent".

use std::fmt::{self, Write as _};

use crate::qos::config::{QosRule, RuleScope};

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

    pub(super) fn preempts(&self, qos: &str) -> bool {
        !self.name.eq_ignore_ascii_case(qos)
            && self.preempt.iter().any(|p| p.eq_ignore_ascii_case(qos))
    }
}

/// The types a set of `GrpTRES` GPU entries lets its jobs hold some of,
/// sorted, each with the most GPUs of that type (`gres/gpu=N` capping
/// every type); a limit of 0 forbids the type, so it is not here.
pub(super) fn usable_types(limits: &[GpuTresLimit]) -> TypeLimits {
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
    pub(super) fn covered_by(&self, rule: &QosRule) -> bool {
        let RuleScope::Association { accounts, users } = rule.scope() else {
            return false;
        };
        let has = |list: &[String], name: &str| list.iter().any(|x| x.eq_ignore_ascii_case(name));
        match &self.user {
            None => users.is_empty() && has(accounts, &self.account),
            Some(u) => has(users, u) && (accounts.is_empty() || has(accounts, &self.account)),
        }
    }
}

/// The lines of `sacctmgr` run with [`SACCTMGR_ASSOC_ARGS`], each with
/// its number and its four fields (`Account|User|Partition|GrpTRES`);
/// blank lines passed over.
fn assoc_lines(text: &str) -> Result<Vec<(usize, [&str; 4])>, SacctmgrParseError> {
    let mut out = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = raw.split('|').map(str::trim).collect();
        let [account, user, partition, grp_tres] = fields[..] else {
            return Err(SacctmgrParseError {
                line: index + 1,
                reason: format!("{} fields in \"{raw}\", expected 4", fields.len()),
            });
        };
        out.push((index + 1, [account, user, partition, grp_tres]));
    }
    Ok(out)
}

/// Reads `sacctmgr` run with [`SACCTMGR_ASSOC_ARGS`]: the associations
/// whose `GrpTRES` has a GPU entry.
pub fn parse_sacctmgr_assoc(text: &str) -> Result<Vec<AssocRecord>, SacctmgrParseError> {
    let mut records = Vec::new();
    for (line, [account, user, partition, grp_tres]) in assoc_lines(text)? {
        let gpu_limits = parse_grp_tres(grp_tres).map_err(|reason| SacctmgrParseError {
            line,
            reason: format!("GrpTRES \"{grp_tres}\" of account {account}: {reason}"),
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

/// The users of every association in the same answer (with limits or
/// without), each once, as the association manager names them.
pub fn parse_assoc_users(text: &str) -> Result<Vec<String>, SacctmgrParseError> {
    let mut users: Vec<String> = assoc_lines(text)?
        .into_iter()
        .map(|(_, [_, user, _, _])| user.to_owned())
        .filter(|u| !u.is_empty())
        .collect();
    users.sort();
    users.dedup();
    Ok(users)
}

pub(super) fn join_display<T: fmt::Display>(items: &[T], sep: &str) -> String {
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
