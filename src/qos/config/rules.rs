//! What `gpu_qos.conf` says once parsed: the rules, each for a QOS, a
//! partition or an association, and the site-wide settings.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;

use super::patterns::{glob_matches, is_pattern, type_matches};

/// Whom untyped GPU requests are refused for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RequireGpuType {
    /// Only jobs under a QOS that has a rule in this file.
    #[default]
    Qos,
    /// Every job.
    All,
}

/// Whether a refusal is made or only told (`Enforce=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Enforce {
    /// Jobs the policy refuses are refused; its changes are made.
    #[default]
    Yes,
    /// Jobs the policy would refuse are accepted unchanged, and their
    /// users told what would have been refused and what to type; the
    /// changes it would make are described, not made.
    Warn,
}

impl Enforce {
    /// The stricter of two.
    pub fn or_stricter(self, other: Enforce) -> Enforce {
        if self == Enforce::Yes || other == Enforce::Yes {
            Enforce::Yes
        } else {
            Enforce::Warn
        }
    }
}

impl fmt::Display for Enforce {
    /// As `Enforce=` takes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Enforce::Yes => "yes",
            Enforce::Warn => "warn",
        })
    }
}

/// Which jobs a rule covers: the level at which Slurm applies the typed
/// limit the rule stands for. Slurm counts a job against a typed
/// `GrpTRES` at every level it applies (the job's QOS, its partition's
/// QOS, its association and the association's parents), and each is
/// escaped the same way, by leaving out the type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleScope {
    /// Jobs under one of these QOS, named with `--qos` or fallen back to
    /// as the association's default QOS. `QOS=`.
    Qos(Vec<String>),
    /// Jobs in one of these partitions (the partition's `QOS=` carries the
    /// typed limit). `Partition=`.
    Partition(Vec<String>),
    /// Jobs whose association lies under one of `accounts` (the account or
    /// any of its sub-accounts), limited to `users` where that is set.
    /// `Account=`, `User=`, or both.
    Association {
        accounts: Vec<String>,
        users: Vec<String>,
    },
}

/// How many GPUs a job may get, per type, under a rule (`GPULimit=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuLimit {
    /// `GPULimit=N`: at most N of each permitted type.
    Each(u64),
    /// `GPULimit=a40:4,h100:2,a100_*:7`: per type (or type pattern, each
    /// matching type on its own, as Slurm counts each type name); a type
    /// listed nowhere has no never-fits check.
    PerType(Vec<(String, u64)>),
}

/// One rule line: a scope (`QOS=`, `Partition=`, `Account=`/`User=`), the
/// permitted GPU types and optionally their limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QosRule {
    pub(super) scope: RuleScope,
    pub(super) gpu_types: Vec<String>,
    pub(super) gpu_limit: Option<GpuLimit>,
    /// `DefaultGPUType=`: the type a new job's untyped GPU request under
    /// the rule is given instead of a refusal.
    pub(super) default_gpu_type: Option<String>,
    /// `Enforce=` on the rule's own line; else the file's applies.
    pub(super) enforce: Option<Enforce>,
    pub(super) line: usize,
}

impl QosRule {
    /// Which jobs the rule covers.
    pub fn scope(&self) -> &RuleScope {
        &self.scope
    }

    /// The QOS names this rule covers, as written in the file; empty for a
    /// rule of another level.
    pub fn qos_names(&self) -> &[String] {
        match &self.scope {
            RuleScope::Qos(names) => names,
            _ => &[],
        }
    }

    /// The permitted GPU types (or type patterns), in file order; never empty.
    pub fn gpu_types(&self) -> &[String] {
        &self.gpu_types
    }

    /// The type suggested to users: the first one the admin listed that is
    /// a type rather than a pattern, else the first type `GPULimit` names
    /// (a MIG rule lists `a100_*` and limits each slice type).
    pub fn first_gpu_type(&self) -> &str {
        let limited = match &self.gpu_limit {
            Some(GpuLimit::PerType(limits)) => {
                limits.iter().map(|(t, _)| t).find(|t| !is_pattern(t))
            }
            _ => None,
        };
        self.gpu_types
            .iter()
            .find(|t| !is_pattern(t))
            .or(limited)
            .or(self.gpu_types.first())
            .map_or("", String::as_str)
    }

    /// `DefaultGPUType=`, if the rule names one.
    pub fn default_gpu_type(&self) -> Option<&str> {
        self.default_gpu_type.as_deref()
    }

    /// The limits as written (`GPULimit=`), if any.
    pub fn gpu_limit(&self) -> Option<&GpuLimit> {
        self.gpu_limit.as_ref()
    }

    /// The most GPUs of `gpu_type` a job under this rule can get, if the
    /// rule says.
    pub fn limit_for(&self, gpu_type: &str) -> Option<u64> {
        match self.gpu_limit.as_ref()? {
            GpuLimit::Each(n) => Some(*n),
            GpuLimit::PerType(limits) => limits
                .iter()
                .find(|(pattern, _)| type_matches(pattern, gpu_type))
                .map(|&(_, n)| n),
        }
    }

    /// Types compare exactly (or by the admin's pattern): a spelling
    /// accounting would not count against the typed limit must be refused,
    /// not waved through.
    pub fn permits(&self, gpu_type: &str) -> bool {
        self.gpu_types.iter().any(|t| type_matches(t, gpu_type))
    }

    /// The line of the file the rule came from, for admin tools.
    pub fn line(&self) -> usize {
        self.line
    }

    /// `Enforce=` as the rule's own line says it, if it does.
    pub fn own_enforce(&self) -> Option<Enforce> {
        self.enforce
    }

    /// What the scope says, as in messages: `QOS a,b`, `Partition gpu`,
    /// `Account lafferty`, `User alice`, `User alice in Account lafferty`.
    pub fn scope_text(&self) -> String {
        match &self.scope {
            RuleScope::Qos(names) => format!("QOS {}", names.join(",")),
            RuleScope::Partition(names) => format!("Partition {}", names.join(",")),
            RuleScope::Association { accounts, users } => match (&accounts[..], &users[..]) {
                ([], u) => format!("User {}", u.join(",")),
                (a, []) => format!("Account {}", a.join(",")),
                (a, u) => format!("User {} in Account {}", u.join(","), a.join(",")),
            },
        }
    }
}

impl fmt::Display for GpuLimit {
    /// As `GPULimit=` takes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuLimit::Each(n) => write!(f, "{n}"),
            GpuLimit::PerType(limits) => {
                for (i, (t, n)) in limits.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{t}:{n}")?;
                }
                Ok(())
            }
        }
    }
}

/// The whole parsed file. `Default` is an empty file: nothing is enforced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuQosConfig {
    pub(super) rules: Vec<QosRule>,
    /// Lower-cased QOS name → index into `rules`.
    pub(super) rule_by_qos: HashMap<String, usize>,
    /// Partition name → index into `rules` (names compare exactly, as
    /// slurmctld looks partitions up).
    pub(super) rule_by_partition: HashMap<String, usize>,
    /// Indexes of the `Account=`/`User=` rules.
    pub(super) association_rules: Vec<usize>,
    /// Whether any rule names a `DefaultGPUType=`.
    pub(super) default_gpu_types: bool,
    /// Every type of every rule, first appearance first, for messages.
    pub(super) known_gpu_types: Vec<String>,
    pub(super) require_gpu_type: RequireGpuType,
    pub(super) low_priority_qos: Vec<String>,
    pub(super) low_priority_max_array_tasks: Option<u32>,
    pub(super) shared_gpu_reservations: Option<Vec<String>>,
    pub(super) max_mps_per_job: Option<u64>,
    /// `MaxGPUsPerJob=`, `MaxCPUsPerGPU=`, `MaxTasksPerGPU=`,
    /// `MaxMemPerGPU=`.
    pub(super) type_caps: TypeCaps,
    /// `LowPriorityExclusiveUser=keep`; the default (`clear`) is false here
    /// so that `Default` stays the empty file.
    pub(super) keep_low_priority_exclusive_user: bool,
    /// Where the plugin publishes its decision counters (`*.prom`).
    pub(super) metrics_file: Option<PathBuf>,
    /// `Enforce=` on a line of its own: every rule without its own, and
    /// every refusal or change no single rule makes.
    pub(super) enforce: Enforce,
    /// `ExemptUsers=`: whose submissions and updates are never refused.
    pub(super) exempt_users: Vec<ExemptUser>,
    /// `ExemptAdmins=yes`: operators' and administrators' updates of
    /// other users' jobs are never refused.
    pub(super) exempt_admins: bool,
}

/// What a job may hold with each GPU of a type, cluster-wide: each cap a
/// list of (type or pattern, value), the first that matches a type
/// counting.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TypeCaps {
    pub(super) gpus_per_job: Vec<(String, u64)>,
    pub(super) cpus_per_gpu: Vec<(String, u64)>,
    pub(super) tasks_per_gpu: Vec<(String, u64)>,
    /// In MB.
    pub(super) mem_per_gpu: Vec<(String, u64)>,
}

/// One of the per-type caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    GpusPerJob,
    CpusPerGpu,
    TasksPerGpu,
    MemPerGpu,
}

impl Cap {
    pub const ALL: [Cap; 4] = [
        Cap::GpusPerJob,
        Cap::CpusPerGpu,
        Cap::TasksPerGpu,
        Cap::MemPerGpu,
    ];

    /// The key that sets it.
    pub fn key(self) -> &'static str {
        match self {
            Cap::GpusPerJob => "MaxGPUsPerJob",
            Cap::CpusPerGpu => "MaxCPUsPerGPU",
            Cap::TasksPerGpu => "MaxTasksPerGPU",
            Cap::MemPerGpu => "MaxMemPerGPU",
        }
    }
}

impl TypeCaps {
    pub fn is_empty(&self) -> bool {
        Cap::ALL.iter().all(|c| self.items(*c).is_empty())
    }

    /// `cap`'s items as the file gives them: (type or pattern, value).
    pub fn items(&self, cap: Cap) -> &[(String, u64)] {
        match cap {
            Cap::GpusPerJob => &self.gpus_per_job,
            Cap::CpusPerGpu => &self.cpus_per_gpu,
            Cap::TasksPerGpu => &self.tasks_per_gpu,
            Cap::MemPerGpu => &self.mem_per_gpu,
        }
    }

    /// `cap` for GPU type `ty` (MB for memory), `None` where no item
    /// covers it.
    pub fn of(&self, cap: Cap, ty: &str) -> Option<u64> {
        self.items(cap)
            .iter()
            .find(|(entry, _)| type_matches(entry, ty))
            .map(|(_, n)| *n)
    }

    /// The item as the file writes it (`a40:16`, `a40:96G`).
    pub fn item(&self, cap: Cap, ty: &str) -> Option<String> {
        let (entry, n) = self
            .items(cap)
            .iter()
            .find(|(entry, _)| type_matches(entry, ty))?;
        Some(match cap {
            Cap::MemPerGpu => format!("{entry}:{}", mem_text(*n)),
            _ => format!("{entry}:{n}"),
        })
    }
}

/// MB as Slurm writes a size: `96G` where it is whole GB, else `500M`.
pub fn mem_text(mb: u64) -> String {
    if mb.is_multiple_of(1024 * 1024) {
        format!("{}T", mb / (1024 * 1024))
    } else if mb.is_multiple_of(1024) {
        format!("{}G", mb / 1024)
    } else {
        format!("{mb}M")
    }
}

/// What the policy without its file does, in the admin's words (the
/// plugin's log, `gpu-qos check`).
pub const WITHOUT_FILE: &str = "until a valid gpu_qos.conf is in place, job_submit/gpu_qos \
     refuses only untyped GPU requests under a limit of the accounting database that names GPU \
     types (no rule, exemption or Enforce=warn of the file applies)";

/// One item of `ExemptUsers=`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExemptUser {
    /// A user name, as slurmctld's association manager has it.
    Name(String),
    Uid(u32),
}

impl GpuQosConfig {
    /// The policy in force while no version of `gpu_qos.conf` could be
    /// read since slurmctld started: the empty file. It refuses only what
    /// can be judged without the file: an untyped GPU request under a
    /// level whose limit in the accounting database names GPU types (the
    /// hole Slurm leaves open), told with the types to name.
    /// `metrics_file`: where to publish the decisions meanwhile (the
    /// unreadable file's own `MetricsFile=` line, [`super::metrics_file_in`]).
    pub fn without_file(metrics_file: Option<PathBuf>) -> Self {
        Self {
            metrics_file,
            ..Self::default()
        }
    }

    /// `ExemptUsers=`, in file order.
    pub fn exempt_users(&self) -> &[ExemptUser] {
        &self.exempt_users
    }

    /// Whether `ExemptUsers=` names `uid`, or `name` (without regard to
    /// ASCII case, as rules match users).
    pub fn exempts_user(&self, uid: u32, name: Option<&str>) -> bool {
        self.exempt_users.iter().any(|u| match u {
            ExemptUser::Uid(x) => *x == uid,
            ExemptUser::Name(n) => name.is_some_and(|name| n.eq_ignore_ascii_case(name)),
        })
    }

    /// `ExemptAdmins=yes`.
    pub fn exempt_admins(&self) -> bool {
        self.exempt_admins
    }

    /// Whether any exemption is configured (the plugin looks the
    /// requester up only then, and only for a refusal).
    pub fn has_exemptions(&self) -> bool {
        self.exempt_admins || !self.exempt_users.is_empty()
    }

    /// Whether any rule names a `DefaultGPUType=` (the submit path looks
    /// for one only then).
    pub fn has_default_gpu_types(&self) -> bool {
        self.default_gpu_types
    }

    pub fn rules(&self) -> &[QosRule] {
        &self.rules
    }

    /// The rule covering `qos`, if any. Allocates only when the name has
    /// upper-case letters, which `--qos` values almost never do.
    pub fn rule_for(&self, qos: &str) -> Option<&QosRule> {
        let index = if qos.bytes().any(|b| b.is_ascii_uppercase()) {
            self.rule_by_qos.get(&qos.to_ascii_lowercase())
        } else {
            self.rule_by_qos.get(qos)
        };
        index.and_then(|&i| self.rules.get(i))
    }

    /// The rule of partition `partition`, if any.
    pub fn partition_rule(&self, partition: &str) -> Option<&QosRule> {
        self.rule_by_partition
            .get(partition)
            .and_then(|&i| self.rules.get(i))
    }

    /// Whether any rule covers jobs by partition.
    pub fn has_partition_rules(&self) -> bool {
        !self.rule_by_partition.is_empty()
    }

    /// Whether any rule covers jobs by QOS (so a job naming no QOS needs its
    /// default QOS looked up).
    pub fn has_qos_rules(&self) -> bool {
        !self.rule_by_qos.is_empty()
    }

    /// Whether any rule covers jobs by account or user.
    pub fn has_association_rules(&self) -> bool {
        !self.association_rules.is_empty()
    }

    /// The `Account=`/`User=` rules, in file order.
    pub fn association_rules(&self) -> impl Iterator<Item = &QosRule> {
        self.association_rules
            .iter()
            .filter_map(|&i| self.rules.get(i))
    }

    /// The literal GPU types of every rule, first appearance first, for
    /// messages (patterns are left out: no one can type them).
    pub fn known_gpu_types(&self) -> &[String] {
        &self.known_gpu_types
    }

    /// The file's `Enforce=`: for refusals and changes no single rule
    /// makes (RequireGPUType=all, typed limits without a rule, shares,
    /// the low-priority QOS) and for rules without their own.
    pub fn enforce(&self) -> Enforce {
        self.enforce
    }

    /// Whether `rule`'s refusals are made or only told.
    pub fn rule_enforce(&self, rule: &QosRule) -> Enforce {
        rule.enforce.unwrap_or(self.enforce)
    }

    /// The rules that only warn, in file order.
    pub fn warning_rules(&self) -> impl Iterator<Item = &QosRule> {
        self.rules
            .iter()
            .filter(|r| self.rule_enforce(r) == Enforce::Warn)
    }

    /// Enforce unless the file and every rule only warn: for a refusal
    /// whose rule cannot be known (an update whose landing QOS is unseen).
    pub fn enforce_anywhere(&self) -> Enforce {
        self.rules
            .iter()
            .fold(self.enforce, |e, r| e.or_stricter(self.rule_enforce(r)))
    }

    pub fn require_gpu_type(&self) -> RequireGpuType {
        self.require_gpu_type
    }

    /// Where `job_submit/gpu_qos` publishes its decision counters.
    pub fn metrics_file(&self) -> Option<&std::path::Path> {
        self.metrics_file.as_deref()
    }

    pub fn low_priority_qos(&self) -> &[String] {
        &self.low_priority_qos
    }

    pub fn is_low_priority(&self, qos: &str) -> bool {
        self.low_priority_qos
            .iter()
            .any(|q| q.eq_ignore_ascii_case(qos))
    }

    pub fn low_priority_max_array_tasks(&self) -> Option<u32> {
        self.low_priority_max_array_tasks
    }

    /// The reservation globs mps/shard jobs are confined to; `None` means
    /// shares are allowed anywhere.
    pub fn shared_gpu_reservations(&self) -> Option<&[String]> {
        self.shared_gpu_reservations.as_deref()
    }

    /// Whether a job in `reservation` may hold GPU shares. Reservation names
    /// compare case-sensitively, as slurmctld looks them up.
    pub fn reservation_allows_shared(&self, reservation: &str) -> bool {
        match &self.shared_gpu_reservations {
            None => true,
            Some(globs) => globs.iter().any(|g| glob_matches(g, reservation)),
        }
    }

    pub fn max_mps_per_job(&self) -> Option<u64> {
        self.max_mps_per_job
    }

    /// The per-type caps of what goes with a GPU.
    pub fn type_caps(&self) -> &TypeCaps {
        &self.type_caps
    }

    /// Whether `--exclusive=user` is taken off low-priority jobs
    /// (`LowPriorityExclusiveUser=clear`, the default).
    pub fn low_priority_clears_exclusive_user(&self) -> bool {
        !self.keep_low_priority_exclusive_user
    }
}
