//! How a rejection is told: the level whose limit refused the job, the
//! request as the user wrote it, and exactly what to type instead.

use crate::qos::config::{GpuQosConfig, QosRule};
use crate::qos::gres::{tres_entries, GpuOption, GresParseError, PerNodeSpelling, TresField};
use crate::qos::tres_read::Hidden;

use super::job::JobDescription;
use super::requests::{nodes, FieldRequest, LeastTotal};
use super::verdict::{reject, Rejection, RejectionKind};

/// The level at which Slurm applies the limit a rule stands for, as the
/// user is told it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Level<'a> {
    /// The QOS the job names.
    Qos(&'a str),
    /// The QOS the job falls back to, naming none.
    DefaultQos(&'a str),
    /// The QOS of a partition the job may run in.
    Partition(&'a str),
    /// The limit of the job's account or one of its parents.
    Account(&'a str),
    /// The limit of the job's user.
    User(&'a str),
}

impl Level<'_> {
    /// The level as the subject of a sentence.
    pub(super) fn subject(&self) -> String {
        match self {
            Level::Qos(q) => format!("QOS {q}"),
            Level::DefaultQos(q) => {
                format!("Your default QOS {q} (the job names no --qos, so it runs under it)")
            }
            Level::Partition(p) => format!("Partition {p}'s QOS"),
            Level::Account(a) => format!("Account {a}'s GPU limit"),
            Level::User(u) => format!("User {u}'s GPU limit"),
        }
    }

    /// Whose limit it is, as in "account lafferty allows at most 4 (its
    /// GrpTRES, ...)": the holder, and the limit named in Slurm's words.
    pub(super) fn limit_holder(&self) -> (String, &'static str) {
        match self {
            Level::Qos(q) => ((*q).to_owned(), "the QOS's GrpTRES"),
            Level::DefaultQos(q) => (
                (*q).to_owned(),
                "its GrpTRES: your default QOS, as the job names no --qos",
            ),
            Level::Partition(p) => (
                format!("partition {p}"),
                "its QOS's GrpTRES, shared by every job in the partition",
            ),
            Level::Account(a) => (
                format!("account {a}"),
                "its GrpTRES, shared by every job of the account and its sub-accounts",
            ),
            Level::User(u) => (format!("user {u}'s association"), "its GrpTRES"),
        }
    }

    /// What the user can change where this level's limit is too small:
    /// only a QOS's limit is left behind by choosing another QOS.
    pub(super) fn larger_limit(&self) -> String {
        match self {
            Level::Qos(_) => "use a QOS with a larger limit".to_owned(),
            Level::DefaultQos(_) => "name a QOS with a larger limit with --qos".to_owned(),
            Level::Partition(p) => format!(
                "submit to a partition whose QOS allows more (--partition=): another QOS does \
                 not lift partition {p}'s limit"
            ),
            Level::Account(a) => format!(
                "submit under an account with a larger limit (--account=), or ask your \
                 sysadmin to raise account {a}'s: another QOS does not lift it"
            ),
            Level::User(u) => {
                format!("ask your sysadmin to raise user {u}'s limit: another QOS does not lift it")
            }
        }
    }

    /// The level's short name, as in "qos_lafferty may use a40".
    pub(super) fn name(&self) -> String {
        match self {
            Level::Qos(q) | Level::DefaultQos(q) => (*q).to_owned(),
            Level::Partition(p) => format!("partition {p}"),
            Level::Account(a) => format!("account {a}"),
            Level::User(u) => format!("user {u}"),
        }
    }

    /// Where a job that needs another type could go instead.
    pub(super) fn elsewhere(&self, ty: &str) -> String {
        match self {
            Level::Qos(_) => format!("use a QOS that covers {ty}"),
            Level::DefaultQos(_) => format!("name a QOS that covers {ty} with --qos"),
            Level::Partition(_) => format!("use a partition that has {ty}"),
            Level::Account(_) | Level::User(_) => {
                format!("use an account whose limit covers {ty} (--account)")
            }
        }
    }
}

/// The marker that starts every warning of `Enforce=warn`.
pub const NOT_YET_ENFORCED: &str = "NOT YET ENFORCED:";

/// A refusal or change `Enforce=warn` only tells of, marked as such: the
/// text it would be, then what happened instead.
pub(super) fn not_yet_enforced(text: &str, syntax: Syntax) -> String {
    let (what, such) = match syntax {
        Syntax::Sbatch => ("The job was accepted as submitted", "a job like this"),
        Syntax::Scontrol => ("The update was made as asked", "an update like this"),
    };
    format!(
        "{NOT_YET_ENFORCED} {text}\n{what}: this GPU policy only warns for now. Once it is \
         enforced, {such} is refused or changed as said above."
    )
}

pub(super) fn bad_gres(
    cfg: &GpuQosConfig,
    job: &JobDescription<'_>,
    field: TresField,
    error: &GresParseError,
) -> Rejection {
    let spelling = job.per_node_spelling;
    let example = GpuOption {
        field,
        gpu_type: Some(cfg.known_gpu_types().first().map_or("a40", String::as_str)),
        count: 2,
        spelling,
    };
    let from = match field {
        TresField::PerNode => spelling.option_names(),
        other => other.option_names(),
    };
    reject(
        RejectionKind::BadRequest,
        format!("{error} (from {from}). Write GPU requests as type:count, e.g. {example}."),
    )
}

/// GPU text hidden inside another entry of a TRES field, which slurmctld
/// reads as a request of its own (`cpu=gres:gpu:2`): what it would hold,
/// and the entry to write instead.
pub(super) fn hidden_gres(
    cfg: &GpuQosConfig,
    job: &JobDescription<'_>,
    field: TresField,
    syntax: Syntax,
    hidden: &Hidden<'_>,
) -> Rejection {
    let found = &hidden.found;
    let count = found.count;
    let plural = if count == 1 { "" } else { "s" };
    let what = match found.name.to_ascii_lowercase().as_str() {
        "gpu" => format!("GPU{plural}"),
        "mps" => format!("MPS unit{plural} of a GPU"),
        _ => format!("GPU shard{plural}"),
    };
    let typed = found
        .gres_type
        .as_deref()
        .map_or_else(|| " without a type".to_owned(), |t| format!(" of type {t}"));
    let gpu_type = cfg.known_gpu_types().first().map_or("a40", String::as_str);
    let (from, instead) = match syntax {
        Syntax::Sbatch => {
            let from = match field {
                TresField::PerNode => job.per_node_spelling.option_names(),
                other => other.option_names(),
            };
            let example = GpuOption {
                field,
                gpu_type: Some(gpu_type),
                count,
                spelling: job.per_node_spelling,
            };
            (from.to_owned(), format!("Submit with {example} instead"))
        }
        Syntax::Scontrol => {
            let ctx = Context { job, syntax };
            let example = ctx.suggest(field, gpu_type, count);
            (
                format!("{}=", field.scontrol_key()),
                format!("Use: {example}"),
            )
        }
    };
    reject(
        RejectionKind::BadRequest,
        format!(
            "Slurm reads the entry \"{}\" (from {from}) as a request for {count} {what}{typed}, \
             hidden inside another entry, which GPU limits and rules would not see; GPU \
             requests must be entries of their own. {instead}.",
            hidden.entry
        ),
    )
}

/// How suggestions are written: as `sbatch` options for a submission, as
/// an `scontrol update` line for an update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Syntax {
    Sbatch,
    Scontrol,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Context<'j, 'a> {
    pub(super) job: &'j JobDescription<'a>,
    pub(super) syntax: Syntax,
}

impl Context<'_, '_> {
    /// How the user writes a `tres_per_node` request: as typed where that
    /// is known; both spellings where GPUs came that way and it is not;
    /// `--gres` for a job whose per-node field asks for no GPU.
    fn spelling(&self) -> PerNodeSpelling {
        let asks_gpu = |text: &str| tres_entries(text).any(|e| e.is_ok_and(|r| r.is_gpu()));
        match self.job.per_node_spelling {
            PerNodeSpelling::Unknown if !self.job.tres_per_node.is_some_and(asks_gpu) => {
                PerNodeSpelling::Gres
            }
            spelling => spelling,
        }
    }

    /// How the user would write this GPU request: `--gres=gpu:a40:2` (or
    /// `--gpus-per-node=a40:2`, as the user typed it) when submitting,
    /// `Gres=gpu:a40:2` in an update.
    pub(super) fn gpu_request(
        &self,
        field: TresField,
        gpu_type: Option<&str>,
        count: u64,
    ) -> String {
        match self.syntax {
            Syntax::Sbatch => GpuOption {
                field,
                gpu_type,
                count,
                spelling: self.spelling(),
            }
            .to_string(),
            Syntax::Scontrol => {
                let type_part = gpu_type.map(|t| format!("{t}:")).unwrap_or_default();
                let prefix = match field {
                    TresField::PerNode => "",
                    // Echo the separator this Slurm used: 23.11+ wants `gres/`.
                    _ if self.job.tres(field).is_some_and(|t| t.contains("gres/")) => "gres/",
                    _ => "gres:",
                };
                format!("{}={prefix}gpu:{type_part}{count}", field.scontrol_key())
            }
        }
    }

    /// A complete suggestion: the option itself, or a whole `scontrol` line
    /// that keeps the move the update asked for (its QOS, partition,
    /// account: in an update the plugin resolves only an account it names).
    pub(super) fn suggest(&self, field: TresField, gpu_type: &str, count: u64) -> String {
        let request = self.gpu_request(field, Some(gpu_type), count);
        match self.syntax {
            Syntax::Sbatch => request,
            Syntax::Scontrol => {
                let job = self.job;
                let named = |key: &str, value: Option<&str>| {
                    value
                        .map(str::trim)
                        .filter(|v| !v.is_empty())
                        .map(|v| format!("{key}={v} "))
                        .unwrap_or_default()
                };
                format!(
                    "scontrol update job={} {}{}{}{request}",
                    self.job_ref(),
                    named("QOS", job.qos),
                    named("Partition", job.partition),
                    named("Account", job.resolved.accounts.first().map(String::as_str)),
                )
            }
        }
    }

    /// An untyped request as the user made it: the option, or, for the
    /// GPUs Slurm adds for `--ntasks-per-gpu`, what makes them.
    pub(super) fn asked(&self, untyped: &FieldRequest<'_>) -> String {
        let count = untyped.request.count;
        match (untyped.tasks_per_gpu, self.syntax) {
            (Some(per_gpu), Syntax::Sbatch) => format!(
                "--ntasks-per-gpu={per_gpu} without a GPU request (Slurm adds {count} GPU{} \
                 for it, without a type)",
                if count == 1 { "" } else { "s" }
            ),
            (Some(per_gpu), Syntax::Scontrol) => format!(
                "a tasks-per-GPU count of {per_gpu} without a GPU request (Slurm adds GPUs \
                 for it, without a type)"
            ),
            (None, _) => self.gpu_request(untyped.field, None, count),
        }
    }

    /// What to type instead of an untyped request, with `gpu_type`: the
    /// option, kept beside `--ntasks-per-gpu` where that made the GPUs
    /// (`--gpus=a40:2 --ntasks-per-gpu=1`: Slurm then counts the tasks
    /// from the typed GPUs).
    pub(super) fn instead(&self, untyped: &FieldRequest<'_>, gpu_type: &str) -> String {
        let suggestion = self.suggest(untyped.field, gpu_type, untyped.request.count);
        match (untyped.tasks_per_gpu, self.syntax) {
            (Some(per_gpu), Syntax::Sbatch) => {
                format!("{suggestion} --ntasks-per-gpu={per_gpu}")
            }
            _ => suggestion,
        }
    }

    pub(super) fn job_ref(&self) -> String {
        self.job
            .job_id_for_messages
            .map_or_else(|| "<jobid>".to_owned(), |id| id.to_string())
    }
}

pub(super) fn no_gpu_request(
    ctx: &Context<'_, '_>,
    requests: &[FieldRequest<'_>],
    level: Level<'_>,
    rule: &QosRule,
) -> Rejection {
    let qos = level.name();
    let target = match level {
        Level::Qos(q) | Level::DefaultQos(q) => format!("QOS {q}"),
        _ => level.name(),
    };
    let permitted = rule.gpu_types().join(", ");
    let instead = ctx.suggest(TresField::PerNode, rule.first_gpu_type(), 1);
    match ctx.syntax {
        Syntax::Sbatch => {
            let shares_only = requests.iter().any(|r| r.request.is_shared_gpu());
            let what = if shares_only {
                "asks only for GPU shares (mps/shard), which its GPU limit does not count"
            } else {
                "asks for no GPU"
            };
            reject(
                RejectionKind::NoGpuRequest,
                format!(
                    "QOS {qos} is for GPU jobs, and this job {what}. Ask for a GPU with \
                     {instead} ({qos} may use {permitted}), or submit under another QOS."
                ),
            )
        }
        Syntax::Scontrol => reject(
            RejectionKind::UpdateNeedsTypedGpu,
            format!(
                "Moving a job to {target} needs a typed GPU request in the same update \
                 ({qos} may use {permitted}): {instead}\n\
                 If the job was submitted with an untyped GPU request, Slurm cannot add a \
                 type to it: cancel it and submit again with --gres=gpu:{}:1.",
                rule.first_gpu_type()
            ),
        ),
    }
}

/// An update with `QOS=` (blank): the default QOS it moves the job to
/// depends on the job's association, so the QOS must be named.
pub(super) fn blank_qos(
    cfg: &GpuQosConfig,
    ctx: &Context<'_, '_>,
    requests: &[FieldRequest<'_>],
) -> Rejection {
    let default = ctx.job.resolved.default_qos;
    let qos = match default {
        [one] => one.clone(),
        _ => "<qos>".to_owned(),
    };
    let known = match default {
        [one] => format!(" (the user's default QOS is {one})"),
        [] => String::new(),
        many => format!(" (the user's default QOS is one of {})", many.join(", ")),
    };
    let gpu = requests
        .iter()
        .find(|r| r.request.is_gpu())
        .map(|r| {
            let ty = r
                .request
                .gres_type
                .or_else(|| cfg.known_gpu_types().first().map(String::as_str))
                .unwrap_or("<type>");
            format!(" {}", ctx.gpu_request(r.field, Some(ty), r.request.count))
        })
        .unwrap_or_default();
    reject(
        RejectionKind::UpdateNeedsTypedGpu,
        format!(
            "QOS= (blank) moves a job to its default QOS, which depends on the job's account \
             and cannot be judged during an update: name the QOS instead{known}: scontrol \
             update job={} QOS={qos}{gpu}\nIf the job asks for GPUs and that QOS limits them \
             by type, the same update needs a typed GPU request, e.g. Gres=gpu:{}:1.",
            ctx.job_ref(),
            cfg.known_gpu_types()
                .first()
                .map_or("<type>", String::as_str)
        ),
    )
}

/// Rule 7 (and untyped GPUs in an update of unknown QOS): no QOS rule
/// applies, so suggest the types known from all rules.
pub(super) fn untyped_anywhere(
    cfg: &GpuQosConfig,
    ctx: &Context<'_, '_>,
    untyped: &FieldRequest<'_>,
) -> Rejection {
    let known = cfg.known_gpu_types();
    let asked = ctx.asked(untyped);
    let example_type = known.first().map_or("<type>", String::as_str);
    let instead = ctx.instead(untyped, example_type);
    let known_list = if known.is_empty() {
        String::new()
    } else {
        format!(" (known types: {})", known.join(", "))
    };
    match ctx.syntax {
        Syntax::Sbatch => reject(
            RejectionKind::UntypedGpu,
            format!(
                "GPU requests must name a GPU type, but {asked} does not name one{known_list}. \
                 Submit with e.g. {instead} instead."
            ),
        ),
        Syntax::Scontrol => reject(
            RejectionKind::UpdateNeedsTypedGpu,
            format!(
                "An update cannot take an untyped GPU request ({asked}): during an update \
                 this plugin cannot see the job's QOS, so the request must name a GPU \
                 type{known_list}. Use e.g.: {instead}"
            ),
        ),
    }
}

pub(super) fn over_limit(
    ctx: &Context<'_, '_>,
    level: Level<'_>,
    ty: &str,
    limit: u64,
    least: LeastTotal,
) -> Rejection {
    let job = ctx.job;
    let (units, unit, unit_plural) = match least.field {
        TresField::PerJob => (String::new(), "job", "GPUs"),
        TresField::PerNode => (format!("{} nodes", nodes(job)), "node", "nodes"),
        TresField::PerTask => (format!("{} tasks", least.multiplier), "task", "tasks"),
        TresField::PerSocket => (
            format!(
                "{} sockets per node on {} nodes",
                job.sockets_per_node.unwrap_or(1).max(1),
                nodes(job)
            ),
            "socket",
            "sockets or nodes",
        ),
    };
    let per_unit = limit / least.multiplier.max(1);
    let advice = if least.multiplier <= 1 {
        format!(
            "Ask for at most {limit}: {}, or {}.",
            ctx.suggest(least.field, ty, limit),
            level.larger_limit()
        )
    } else if per_unit >= 1 {
        format!(
            "With {units} that is at most {}; or ask for fewer {unit_plural}, or {}.",
            ctx.suggest(least.field, ty, per_unit),
            level.larger_limit()
        )
    } else {
        format!(
            "Even one {ty} per {unit} is too many with {units}: ask for fewer {unit_plural}, \
             or {}.",
            level.larger_limit()
        )
    };
    let (holder, whose) = level.limit_holder();
    reject(
        RejectionKind::OverLimit,
        format!(
            "This job can never start: asks {} {ty}, {holder} allows at most {limit} \
             ({whose}). {advice}",
            least.total
        ),
    )
}
