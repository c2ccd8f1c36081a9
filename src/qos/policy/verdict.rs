//! What the plugin answers: an accepted job with the changes to make to
//! it, or a rejection with its kind and the words the user reads.

use std::fmt;

/// One `NAME=value` entry to append to the job's SPANK environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpankEnvVar {
    pub name: &'static str,
    pub value: String,
}

impl fmt::Display for SpankEnvVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.name, self.value)
    }
}

/// Changes to make to an accepted job. `Default` is "leave it as it is".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobChanges {
    /// Set `requeue = 1`.
    pub set_requeue: bool,
    /// Set `open_mode` to append, so a requeued job keeps its earlier output.
    pub set_open_mode_append: bool,
    /// Drop `--exclusive=user` (the node's sharing back to the default).
    pub clear_exclusive_user: bool,
    /// Replace `array_inx` with this.
    pub array_inx: Option<String>,
    /// An update lifted an array's throttle past the low-priority cap
    /// (`ArrayTaskThrottle=0`): slurmctld applies that before job_submit
    /// is asked (`_update_job`, 22.05 to 26.05), so no refusal can undo
    /// it. The plugin reads the array back once the update is done and,
    /// if it runs under a low-priority QOS, sets this cap again.
    pub recheck_array_throttle: Option<ThrottleRecheck>,
    /// The job an update gave GPU types: read back once the update is
    /// done, held where its own QOS's or partition's rule does not permit
    /// them, released by gpushare where they fit again (`type_recheck`).
    pub recheck_gpu_types: Option<TypesRecheck>,
    pub spank_env: Vec<SpankEnvVar>,
    /// Text to show the user although the job is accepted.
    pub user_warning: Option<String>,
    /// What the policy only tells of (`Enforce=warn`): refusals not made
    /// and changes not applied.
    pub warnings: Vec<PolicyWarning>,
    /// A refusal not made because the requester is exempt
    /// (`ExemptUsers=`, `ExemptAdmins=`): logged and counted, the job
    /// accepted as sent.
    pub exemption: Option<Exemption>,
    /// The untyped GPU requests of a new job given their rule's
    /// `DefaultGPUType=`: the fields to write.
    pub gpu_type_given: Option<Box<TypeGiven>>,
}

/// The code and name of a new job's untyped GPU request given its rule's
/// `DefaultGPUType=` (a change the policy makes, as the low-priority
/// QOS's are); see [`super::codes`].
pub const DEFAULT_GPU_TYPE: (&str, &str) = ("GQ204", "default_gpu_type");

/// A new job's untyped GPU requests given a type (`DefaultGPUType=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeGiven {
    pub gpu_type: String,
    /// The job's QOS as far as the plugin sees it (as for warnings).
    pub qos: String,
    /// Each request field that changes, with its new text.
    pub fields: Vec<(crate::qos::gres::TresField, String)>,
    /// What the user reads: what was asked and the line it became.
    pub message: String,
}

impl JobChanges {
    pub fn is_empty(&self) -> bool {
        *self == JobChanges::default()
    }

    /// Everything the user reads on an accepted job, one message:
    /// the warnings of the policy first, then the other notes.
    pub fn user_message(&self) -> Option<String> {
        let given = self
            .gpu_type_given
            .as_ref()
            .map(|g| coded(&g.message, DEFAULT_GPU_TYPE.0));
        let parts: Vec<String> = given
            .into_iter()
            .chain(
                self.warnings
                    .iter()
                    .map(|w| coded(&w.message, w.reason.code())),
            )
            .chain(self.user_warning.clone())
            .collect();
        (!parts.is_empty()).then(|| parts.join("\n"))
    }
}

/// `text` as the user reads it: its code ([`super::codes`]) at the end of its first line
/// (Slurm's clients print the message whole; the first line is what a
/// user copies).
pub fn coded(text: &str, code: &str) -> String {
    match text.split_once('\n') {
        Some((first, rest)) => format!("{first} [{code}]\n{rest}"),
        None => format!("{text} [{code}]"),
    }
}

/// A job whose GPU types an update set, to read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TypesRecheck {
    pub job_id: u32,
    /// `false` for an exempt requester's update (`ExemptUsers=`,
    /// `ExemptAdmins=`): the job is not held for it, only released where
    /// it fits.
    pub may_hold: bool,
}

/// An array whose throttle an update may have lifted past the cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThrottleRecheck {
    pub job_id: u32,
    /// `LowPriorityMaxArrayTasks`.
    pub max: u32,
}

/// Why a refusal was not made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExemptReason {
    /// `ExemptUsers=` names the requester.
    User,
    /// `ExemptAdmins=yes` and an operator updates another user's job.
    Admin,
}

impl ExemptReason {
    /// The `reason` label of the metrics.
    pub fn label(self) -> &'static str {
        match self {
            ExemptReason::User => "exempt_user",
            ExemptReason::Admin => "admin_update",
        }
    }

    /// The words of slurmctld's log line.
    pub fn describe(self) -> &'static str {
        match self {
            ExemptReason::User => "ExemptUsers",
            ExemptReason::Admin => "ExemptAdmins, an operator's update of another user's job",
        }
    }
}

/// A refusal not made because its requester is exempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exemption {
    pub reason: ExemptReason,
    /// The refusal's kind and its text, as the requester would have read it.
    pub kind: RejectionKind,
    pub message: String,
    /// The job's QOS as far as the plugin sees it (as for warnings).
    pub qos: String,
}

/// A change the low-priority QOS makes to a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LowPriorityChange {
    /// `--requeue` and `--open-mode=append`.
    Requeue,
    /// `--exclusive=user` taken off.
    ExclusiveUser,
    /// An array throttled (`%N`).
    ArrayThrottle,
}

impl LowPriorityChange {
    pub const ALL: [LowPriorityChange; 3] = [
        LowPriorityChange::Requeue,
        LowPriorityChange::ExclusiveUser,
        LowPriorityChange::ArrayThrottle,
    ];

    /// The `reason` label of a warning about it.
    pub fn label(self) -> &'static str {
        match self {
            LowPriorityChange::Requeue => "low_priority_requeue",
            LowPriorityChange::ExclusiveUser => "low_priority_exclusive_user",
            LowPriorityChange::ArrayThrottle => "low_priority_array_throttle",
        }
    }
}

/// Why the policy warned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WarningReason {
    /// A refusal `Enforce=warn` did not make.
    Refusal(RejectionKind),
    /// A change `Enforce=warn` did not apply.
    LowPriority(LowPriorityChange),
    /// A type `DefaultGPUType=` did not give, its rule `Enforce=warn`.
    TypeGiven,
}

impl WarningReason {
    /// The `reason` label of a warning: the refusal's name, or the
    /// change's.
    pub fn label(self) -> &'static str {
        match self {
            WarningReason::Refusal(kind) => kind.label(),
            WarningReason::LowPriority(change) => change.label(),
            WarningReason::TypeGiven => DEFAULT_GPU_TYPE.1,
        }
    }
}

/// A refusal not made or a change not applied because its rule (or the
/// file) says `Enforce=warn`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyWarning {
    pub reason: WarningReason,
    /// The QOS the job runs under as far as the plugin sees it: the one
    /// it names, else its default; empty when neither is known.
    pub qos: String,
    /// What the user reads, marked as not yet enforced.
    pub message: String,
}

/// Why a job is refused; the FFI layer maps each kind to a Slurm error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectionKind {
    /// A GPU request without a type where one is required.
    UntypedGpu,
    /// A GPU type the job's QOS does not cover.
    TypeNotPermitted,
    /// More GPUs of a type than the QOS ever allows: the job could never start.
    OverLimit,
    /// A GPU QOS job that asks for no GPU.
    NoGpuRequest,
    /// mps/shard GRES outside the shared-GPU reservations.
    SharedOutsideReservation,
    /// An mps share larger than `MaxMPSPerJob`.
    ShareTooLarge,
    /// An `scontrol update` that cannot be judged without a typed GPU request.
    UpdateNeedsTypedGpu,
    /// A GRES field or array index that does not parse.
    BadRequest,
    /// An untyped GPU request (or, in an update, a move without a typed
    /// one) under a level whose limit in the accounting database is typed
    /// and that `gpu_qos.conf` has no rule for.
    UnlistedTypedLimit,
    /// Another user's `ArrayTaskThrottle=` (applied by Slurm 22.05 before
    /// its ownership check).
    ForeignArrayThrottle,
    /// More GPUs of a type, or more CPUs, tasks or memory per GPU of it,
    /// than its per-type cap allows.
    OverTypeCap,
}

impl RejectionKind {
    /// Its name: the `rule` label of the plugin's metrics, replay's
    /// `reason`, the word of docs/codes.md.
    pub fn label(self) -> &'static str {
        match self {
            RejectionKind::UntypedGpu => "untyped_gpu",
            RejectionKind::TypeNotPermitted => "type_not_permitted",
            RejectionKind::OverLimit => "over_limit",
            RejectionKind::NoGpuRequest => "no_gpu_request",
            RejectionKind::SharedOutsideReservation => "shared_outside_reservation",
            RejectionKind::ShareTooLarge => "share_too_large",
            RejectionKind::UpdateNeedsTypedGpu => "update_needs_typed_gpu",
            RejectionKind::BadRequest => "bad_request",
            RejectionKind::UnlistedTypedLimit => "unlisted_typed_limit",
            RejectionKind::ForeignArrayThrottle => "foreign_array_throttle",
            RejectionKind::OverTypeCap => "over_type_cap",
        }
    }

    /// Every kind, in the order of their codes.
    pub const ALL: [RejectionKind; 11] = [
        RejectionKind::UntypedGpu,
        RejectionKind::TypeNotPermitted,
        RejectionKind::OverLimit,
        RejectionKind::NoGpuRequest,
        RejectionKind::SharedOutsideReservation,
        RejectionKind::ShareTooLarge,
        RejectionKind::UpdateNeedsTypedGpu,
        RejectionKind::BadRequest,
        RejectionKind::UnlistedTypedLimit,
        RejectionKind::ForeignArrayThrottle,
        RejectionKind::OverTypeCap,
    ];
}

/// A refused job: its kind and the text shown to the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub kind: RejectionKind,
    pub message: String,
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Rejection {}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Accept(JobChanges),
    Reject(Rejection),
}

pub(super) fn reject(kind: RejectionKind, message: String) -> Rejection {
    Rejection { kind, message }
}
