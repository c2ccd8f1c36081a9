//! The keys of `gpu_qos.conf`, and what can be wrong with a line, in
//! the words the admin reads.

use std::fmt;

use crate::shared::syntax as kv;

/// What is wrong with a line; it becomes the reason of a [`ConfigError`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Problem {
    UnknownKey(String),
    /// A word with no `=` in it.
    MissingEquals(String),
    EmptyValue(&'static str),
    /// An empty element in a comma list, as in `a40,,a100`.
    EmptyListItem(&'static str),
    NotPositiveInteger {
        key: &'static str,
        value: String,
    },
    BadEnumValue {
        key: &'static str,
        value: String,
        allowed: &'static str,
    },
    BadGpuType(String),
    /// An `ExemptUsers=` item that is neither a uid nor a user name.
    BadUserName(String),
    /// A path key's value that is not an absolute path ending as it must.
    BadPath {
        key: &'static str,
        value: String,
        must: &'static str,
    },
    KeyTwiceOnLine(&'static str),
    GlobalKeyRepeated {
        key: &'static str,
        first_line: usize,
    },
    /// A QOS or partition covered by two rules.
    InTwoRules {
        what: &'static str,
        name: String,
        first_line: usize,
    },
    /// Two scopes on one line (`QOS=` with `Partition=`, ...).
    TwoScopes(&'static str, &'static str),
    /// A `GPULimit=` per-type entry that is not `type:N`.
    BadLimitEntry(String),
    /// A `GPULimit=` type that `GPUTypes=` does not permit.
    LimitForUnlistedType(String),
    /// A `DefaultGPUType=` that is a pattern, or one `GPUTypes=` does
    /// not permit.
    BadDefaultType(String),
    /// A per-type cap's item that is not `type:value`.
    BadCapEntry {
        key: &'static str,
        entry: String,
        example: &'static str,
    },
    /// The same item twice in one comma list.
    DuplicateListItem {
        key: &'static str,
        item: String,
    },
    RuleWithoutGpuTypes,
    /// `GPUTypes`/`GPULimit` on a line without `QOS=`.
    RuleKeyWithoutQos(&'static str),
    /// A global key on a rule line, where it would read as per-QOS.
    GlobalKeyOnRuleLine(&'static str),
    /// A key that only means something together with another one.
    NeedsOtherKey {
        key: &'static str,
        needs: &'static str,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::UnknownKey(key) => {
                write!(f, "unknown key \"{key}\" (known keys: ")?;
                for (i, k) in Key::ALL.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    f.write_str(k.name())?;
                }
                f.write_str(")")
            }
            Problem::MissingEquals(word) => {
                write!(f, "expected Key=Value, got \"{word}\"")
            }
            Problem::EmptyValue(key) => write!(f, "{key} has an empty value"),
            Problem::EmptyListItem(key) => {
                write!(f, "{key} has an empty item in its comma list")
            }
            Problem::NotPositiveInteger { key, value } => {
                write!(f, "{key} must be a positive integer, got \"{value}\"")
            }
            Problem::BadEnumValue {
                key,
                value,
                allowed,
            } => write!(f, "{key} must be one of {allowed}, got \"{value}\""),
            Problem::BadPath { key, value, must } => {
                write!(f, "{key} must be {must}, got \"{value}\"")
            }
            Problem::BadGpuType(ty) => write!(
                f,
                "GPU type \"{ty}\" may contain only letters, digits, '_', '-' and '.', \
                 and must not be a number"
            ),
            Problem::BadUserName(name) => write!(
                f,
                "ExemptUsers takes user names or numeric uids; \"{name}\" is neither \
                 (a name may contain letters, digits, '_', '-', '.' and '@', and must not \
                 start with '-')"
            ),
            Problem::KeyTwiceOnLine(key) => write!(f, "{key} given twice on this line"),
            Problem::GlobalKeyRepeated { key, first_line } => {
                write!(f, "{key} already set on line {first_line}")
            }
            Problem::InTwoRules {
                what,
                name,
                first_line,
            } => {
                write!(f, "{what} {name} already has a rule on line {first_line}")
            }
            Problem::TwoScopes(a, b) => write!(
                f,
                "{a}= and {b}= cannot share a line: write one rule per level"
            ),
            Problem::BadLimitEntry(entry) => write!(
                f,
                "GPULimit takes a number (each type) or type:number items, \
                 e.g. GPULimit=a40:4,h100:2; got \"{entry}\""
            ),
            Problem::LimitForUnlistedType(ty) => write!(
                f,
                "GPULimit gives a limit for {ty}, which GPUTypes does not list"
            ),
            Problem::BadDefaultType(ty) => write!(
                f,
                "DefaultGPUType={ty} must be one GPU type that GPUTypes permits, not a pattern"
            ),
            Problem::BadCapEntry {
                key,
                entry,
                example,
            } => write!(
                f,
                "{key} takes type:value items, one per GPU type, e.g. {key}={example}; \
                 got \"{entry}\""
            ),
            Problem::DuplicateListItem { key, item } => {
                write!(f, "{key} lists {item} twice")
            }
            Problem::RuleWithoutGpuTypes => {
                f.write_str("a rule needs GPUTypes= (the GPU types its jobs may use)")
            }
            Problem::RuleKeyWithoutQos(key) => {
                write!(
                    f,
                    "{key} needs QOS=, Partition=, Account= or User= on the same line"
                )
            }
            Problem::GlobalKeyOnRuleLine(key) => write!(
                f,
                "{key} is a global setting and cannot share a line with a rule"
            ),
            Problem::NeedsOtherKey { key, needs } => {
                write!(f, "{key} has no effect without {needs}")
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Key {
    Qos,
    Partition,
    Account,
    User,
    GpuTypes,
    GpuLimit,
    DefaultGpuType,
    RequireGpuType,
    LowPriorityQos,
    LowPriorityMaxArrayTasks,
    SharedGpuReservations,
    MaxMpsPerJob,
    MaxGpusPerJob,
    MaxCpusPerGpu,
    MaxTasksPerGpu,
    MaxMemPerGpu,
    LowPriorityExclusiveUser,
    MetricsFile,
    Enforce,
    ExemptUsers,
    ExemptAdmins,
}

impl Key {
    pub(super) const ALL: [Key; 21] = [
        Key::Qos,
        Key::Partition,
        Key::Account,
        Key::User,
        Key::GpuTypes,
        Key::GpuLimit,
        Key::DefaultGpuType,
        Key::RequireGpuType,
        Key::LowPriorityQos,
        Key::LowPriorityMaxArrayTasks,
        Key::SharedGpuReservations,
        Key::MaxMpsPerJob,
        Key::MaxGpusPerJob,
        Key::MaxCpusPerGpu,
        Key::MaxTasksPerGpu,
        Key::MaxMemPerGpu,
        Key::LowPriorityExclusiveUser,
        Key::MetricsFile,
        Key::Enforce,
        Key::ExemptUsers,
        Key::ExemptAdmins,
    ];

    /// The canonical spelling, used in messages.
    pub(super) fn name(self) -> &'static str {
        match self {
            Key::Qos => "QOS",
            Key::Partition => "Partition",
            Key::Account => "Account",
            Key::User => "User",
            Key::GpuTypes => "GPUTypes",
            Key::GpuLimit => "GPULimit",
            Key::DefaultGpuType => "DefaultGPUType",
            Key::RequireGpuType => "RequireGPUType",
            Key::LowPriorityQos => "LowPriorityQOS",
            Key::LowPriorityMaxArrayTasks => "LowPriorityMaxArrayTasks",
            Key::SharedGpuReservations => "SharedGPUReservations",
            Key::MaxMpsPerJob => "MaxMPSPerJob",
            Key::MaxGpusPerJob => "MaxGPUsPerJob",
            Key::MaxCpusPerGpu => "MaxCPUsPerGPU",
            Key::MaxTasksPerGpu => "MaxTasksPerGPU",
            Key::MaxMemPerGpu => "MaxMemPerGPU",
            Key::LowPriorityExclusiveUser => "LowPriorityExclusiveUser",
            Key::MetricsFile => "MetricsFile",
            Key::Enforce => "Enforce",
            Key::ExemptUsers => "ExemptUsers",
            Key::ExemptAdmins => "ExemptAdmins",
        }
    }

    /// The value the key takes where the file does not set it, as the
    /// file would write it; `None`: no value (unset, or a rule's key).
    fn default_text(self) -> Option<&'static str> {
        match self {
            Key::RequireGpuType => Some("qos"),
            Key::LowPriorityExclusiveUser => Some("clear"),
            Key::Enforce => Some("yes"),
            Key::ExemptAdmins => Some("no"),
            Key::Qos
            | Key::Partition
            | Key::Account
            | Key::User
            | Key::GpuTypes
            | Key::GpuLimit
            | Key::DefaultGpuType
            | Key::LowPriorityQos
            | Key::LowPriorityMaxArrayTasks
            | Key::SharedGpuReservations
            | Key::MaxMpsPerJob
            | Key::MaxGpusPerJob
            | Key::MaxCpusPerGpu
            | Key::MaxTasksPerGpu
            | Key::MaxMemPerGpu
            | Key::MetricsFile
            | Key::ExemptUsers => None,
        }
    }

    pub(super) fn from_name(name: &str) -> Option<Key> {
        kv::key_named(&Key::ALL, Key::name, name)
    }

    pub(super) fn is_rule_key(self) -> bool {
        matches!(
            self,
            Key::Qos
                | Key::Partition
                | Key::Account
                | Key::User
                | Key::GpuTypes
                | Key::GpuLimit
                | Key::DefaultGpuType
        )
    }

    /// A key both global and per rule: on a rule line it is the rule's,
    /// on a line of its own the file's default.
    pub(super) fn is_global_and_rule_key(self) -> bool {
        matches!(self, Key::Enforce)
    }

    pub(super) fn index(self) -> usize {
        self as usize
    }
}

/// Every key of the file with the value it takes where the file does not
/// set it, as the file would write it (`None`: no value): what the manual
/// page, the docs and the shipped example are held to.
pub fn keys() -> impl Iterator<Item = (&'static str, Option<&'static str>)> {
    Key::ALL.iter().map(|k| (k.name(), k.default_text()))
}

/// What one line said, before it is checked against the rest of the file.
#[derive(Default)]
pub(super) struct LineValues<'a> {
    pub(super) values: [Option<&'a str>; Key::ALL.len()],
}

impl<'a> LineValues<'a> {
    pub(super) fn get(&self, key: Key) -> Option<&'a str> {
        self.values.get(key.index()).copied().flatten()
    }
}
