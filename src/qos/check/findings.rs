//! What `gpu-qos check` finds: each finding's severity, kind, object,
//! and the words the admin reads.

use std::fmt;

use serde::{Deserialize, Serialize};

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
    /// A rule (or the whole file) says `Enforce=warn`: what it would
    /// refuse is accepted and told, what it would change is described.
    OnlyWarns { who: String, at: String },
    /// `ExemptUsers=` names a user no association of the database has:
    /// slurmctld's association manager never names a requester so, and
    /// the exemption never applies. `at` is the file (its lines of
    /// file-wide keys are not kept).
    UnknownExemptUser { user: String, at: String },
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
            | Finding::LowPriorityNotPreemptable { .. }
            | Finding::OnlyWarns { .. }
            | Finding::UnknownExemptUser { .. } => Severity::Warning,
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
            Finding::OnlyWarns { .. } => "only_warns",
            Finding::UnknownExemptUser { .. } => "unknown_exempt_user",
        }
    }

    /// The QOS the finding is about, or the association (`account
    /// lafferty`, `user alice in account lafferty`), or the user.
    pub fn qos(&self) -> &str {
        match self {
            Finding::UnknownExemptUser { user, .. } => user,
            Finding::UnlistedTypedAssociation { who, .. }
            | Finding::AssociationRuleDiffers { who, .. }
            | Finding::OnlyWarns { who, .. } => who,
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
            | Finding::AssociationRuleDiffers { who, .. }
            | Finding::OnlyWarns { who, .. } => who.clone(),
            Finding::UnknownExemptUser { user, .. } => format!("user {user}"),
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
            Finding::OnlyWarns { who, at } => write!(
                f,
                "{who}: {at} says Enforce=warn, so jobs it would refuse are accepted \
                 unchanged and their users only warned, and changes it would make are only \
                 described; set Enforce=yes (or remove Enforce=warn) to enforce"
            ),
            Finding::UnknownExemptUser { user, at } => write!(
                f,
                "{user}: ExemptUsers= of {at} names it, but no association of the accounting \
                 database has that user (sacctmgr show assoc), so slurmctld never knows a \
                 requester by that name and the exemption never applies; correct the name (or \
                 write the uid), or add the user to an account"
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
