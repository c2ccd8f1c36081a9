//! The per-job decision of the `job_submit/gpu_qos` plugin: given what a
//! client sent (before Slurm applies defaults) and `gpu_qos.conf`, accept the
//! job, possibly with changes, or reject it with a message that says what was
//! wrong and exactly what to type instead.
//!
//! slurmctld calls this with its own locks held, once per submission and
//! update, so it must be fast and must not block: it borrows everything from
//! the job, and a job asking for no GRES is judged without allocating.

use std::fmt;

use super::config::{GpuQosConfig, QosRule, RequireGpuType, RuleScope};
use super::gres::{tres_entries, GpuOption, GresParseError, GresRequest, TresField};

use crate::shared::spank_env::MPS_UNITS as MPS_UNITS_ENV;

/// What the plugin sees of a job submission or update. `None` means the
/// client did not set the field (Slurm's NULL / NO_VAL).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobDescription<'a> {
    /// One QOS name or, from 24.11, a comma list.
    pub qos: Option<&'a str>,
    pub tres_per_node: Option<&'a str>,
    pub tres_per_job: Option<&'a str>,
    pub tres_per_socket: Option<&'a str>,
    pub tres_per_task: Option<&'a str>,
    pub min_nodes: Option<u32>,
    pub num_tasks: Option<u32>,
    pub sockets_per_node: Option<u16>,
    /// One reservation name or a comma list.
    pub reservation: Option<&'a str>,
    /// `None`: the user gave neither `--requeue` nor `--no-requeue`.
    pub requeue: Option<bool>,
    pub open_mode_set: bool,
    /// `--exclusive=user`: the node is shared only with the user's own jobs.
    pub exclusive_user: bool,
    pub array_inx: Option<&'a str>,
    /// Known for updates; makes the suggested `scontrol` line copy-pasteable.
    pub job_id_for_messages: Option<u32>,
    /// One partition name or a comma list, as sent.
    pub partition: Option<&'a str>,
    /// What slurmctld resolves for the job beyond what the client sent
    /// (the plugin reads it from slurmctld's association manager, and only
    /// where a rule needs it).
    pub resolved: Resolved<'a>,
}

/// Facts about a job that its client did not send and slurmctld decides:
/// which QOS it falls back to, which partition it lands in, which
/// accounts' limits it counts against. Empty means unknown or not needed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resolved<'a> {
    /// The QOS the job runs under when it names none: its association's
    /// default (for each partition it may run in), as slurmctld resolves it.
    pub default_qos: &'a [String],
    /// The partition the job lands in when it names none.
    pub default_partition: Option<&'a str>,
    /// The job's account and every parent up to the root, nearest first.
    pub accounts: &'a [String],
    /// The job's user, by name (unknown in an update).
    pub user: Option<&'a str>,
}

impl<'a> JobDescription<'a> {
    /// The request string of one TRES field.
    pub fn tres(&self, field: TresField) -> Option<&'a str> {
        match field {
            TresField::PerNode => self.tres_per_node,
            TresField::PerJob => self.tres_per_job,
            TresField::PerSocket => self.tres_per_socket,
            TresField::PerTask => self.tres_per_task,
        }
    }

    fn qos_names(&self) -> impl Iterator<Item = &'a str> + Clone {
        comma_items(self.qos)
    }

    fn reservation_names(&self) -> impl Iterator<Item = &'a str> + Clone {
        comma_items(self.reservation)
    }

    /// The partitions the job may run in: those it names, else the default.
    fn partitions(&self) -> impl Iterator<Item = &'a str> + Clone {
        let named = comma_items(self.partition);
        let default = self
            .partition
            .is_none_or(|p| p.trim().is_empty())
            .then_some(self.resolved.default_partition)
            .flatten();
        named.chain(default)
    }
}

/// The level at which Slurm applies the limit a rule stands for, as the
/// user is told it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level<'a> {
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
    fn subject(&self) -> String {
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

    /// The level's short name, as in "qos_lafferty may use a40".
    fn name(&self) -> String {
        match self {
            Level::Qos(q) | Level::DefaultQos(q) => (*q).to_owned(),
            Level::Partition(p) => format!("partition {p}"),
            Level::Account(a) => format!("account {a}"),
            Level::User(u) => format!("user {u}"),
        }
    }

    /// Where a job that needs another type could go instead.
    fn elsewhere(&self, ty: &str) -> String {
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

fn comma_items(list: Option<&str>) -> impl Iterator<Item = &str> + Clone {
    list.unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

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
    pub spank_env: Vec<SpankEnvVar>,
    /// Text to show the user although the job is accepted.
    pub user_warning: Option<String>,
}

impl JobChanges {
    pub fn is_empty(&self) -> bool {
        *self == JobChanges::default()
    }
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

fn reject(kind: RejectionKind, message: String) -> Rejection {
    Rejection { kind, message }
}

/// Judges a new job (`job_submit`).
pub fn judge_submit(cfg: &GpuQosConfig, job: &JobDescription<'_>) -> Verdict {
    match submit(cfg, job) {
        Ok(changes) => Verdict::Accept(changes),
        Err(rejection) => Verdict::Reject(rejection),
    }
}

/// Judges an `scontrol update` of a pending job (`job_modify`). `update`
/// holds only the fields the update changes; the job's current values are
/// not visible to the plugin.
pub fn judge_modify(cfg: &GpuQosConfig, update: &JobDescription<'_>) -> Verdict {
    match modify(cfg, update) {
        Ok(changes) => Verdict::Accept(changes),
        Err(rejection) => Verdict::Reject(rejection),
    }
}

fn submit(cfg: &GpuQosConfig, job: &JobDescription<'_>) -> Result<JobChanges, Rejection> {
    let requests = collect_requests(cfg, job)?;
    let ctx = Context {
        job,
        syntax: Syntax::Sbatch,
    };
    // A job with several QOS may run under any of them, so each must agree.
    for qos in job.qos_names() {
        if let Some(rule) = cfg.rule_for(qos) {
            judge_under_rule(&ctx, &requests, Level::Qos(qos), rule)?;
        }
    }
    // Naming none, it runs under its association's default QOS.
    if job.qos_names().next().is_none() {
        for qos in job.resolved.default_qos {
            if let Some(rule) = cfg.rule_for(qos) {
                judge_under_rule(&ctx, &requests, Level::DefaultQos(qos), rule)?;
            }
        }
    }
    judge_partitions_and_associations(cfg, &ctx, &requests)?;
    if cfg.require_gpu_type() == RequireGpuType::All {
        if let Some(untyped) = first_untyped_gpu(&requests) {
            return Err(untyped_anywhere(cfg, &ctx, untyped));
        }
    }
    judge_shared_reservation(cfg, job, &requests)?;

    let mut changes = JobChanges::default();
    if let Some(units) = judge_mps_share(cfg, job, &requests)? {
        changes.spank_env.push(SpankEnvVar {
            name: MPS_UNITS_ENV,
            value: units.to_string(),
        });
    }
    if let Some(low_qos) = job.qos_names().find(|q| cfg.is_low_priority(q)) {
        apply_requeue(job, low_qos, &mut changes);
        apply_exclusive_user(cfg, job, low_qos, &mut changes);
        if !job.open_mode_set {
            changes.set_open_mode_append = true;
        }
        if let (Some(max), Some(inx)) = (
            cfg.low_priority_max_array_tasks(),
            job.array_inx.filter(|s| !s.trim().is_empty()),
        ) {
            changes.array_inx = throttled_array(inx.trim(), max)?;
        }
    }
    Ok(changes)
}

fn modify(cfg: &GpuQosConfig, update: &JobDescription<'_>) -> Result<JobChanges, Rejection> {
    let requests = collect_requests(cfg, update)?;
    let ctx = Context {
        job: update,
        syntax: Syntax::Scontrol,
    };
    let mut to_gpu_qos = false;
    for qos in update.qos_names() {
        if let Some(rule) = cfg.rule_for(qos) {
            to_gpu_qos = true;
            judge_under_rule(&ctx, &requests, Level::Qos(qos), rule)?;
        }
    }
    // Moving the job to a partition or account with a rule: the job's own
    // GPU request is not visible here, so the update must carry one.
    for (level, rule) in other_levels(cfg, update) {
        to_gpu_qos = true;
        if !requests.iter().any(|r| r.request.is_gpu()) {
            return Err(no_gpu_request(&ctx, &requests, level, rule));
        }
        judge_under_rule(&ctx, &requests, level, rule)?;
    }
    if !to_gpu_qos {
        if let Some(untyped) = first_untyped_gpu(&requests) {
            // Without a QOS in the update the job's QOS is unknown here, so an
            // untyped request could be landing under a GPU QOS.
            let qos_unknown = update.qos_names().next().is_none();
            let enforced = cfg.require_gpu_type() == RequireGpuType::All
                || (qos_unknown && !cfg.rules().is_empty());
            if enforced {
                return Err(untyped_anywhere(cfg, &ctx, untyped));
            }
        }
    }
    judge_mps_share(cfg, update, &requests)?;

    let mut changes = JobChanges::default();
    if let Some(low_qos) = update.qos_names().find(|q| cfg.is_low_priority(q)) {
        apply_requeue(update, low_qos, &mut changes);
        apply_exclusive_user(cfg, update, low_qos, &mut changes);
    }
    Ok(changes)
}

/// A GRES entry and the field it came from.
#[derive(Debug, Clone, Copy)]
struct FieldRequest<'a> {
    field: TresField,
    request: GresRequest<'a>,
}

fn collect_requests<'a>(
    cfg: &GpuQosConfig,
    job: &JobDescription<'a>,
) -> Result<Vec<FieldRequest<'a>>, Rejection> {
    let mut requests = Vec::new();
    for field in TresField::ALL {
        let Some(text) = job.tres(field) else {
            continue;
        };
        for entry in tres_entries(text) {
            let request = entry.map_err(|e| bad_gres(cfg, field, &e))?;
            requests.push(FieldRequest { field, request });
        }
    }
    Ok(requests)
}

fn bad_gres(cfg: &GpuQosConfig, field: TresField, error: &GresParseError) -> Rejection {
    let example = GpuOption {
        field,
        gpu_type: Some(cfg.known_gpu_types().first().map_or("a40", String::as_str)),
        count: 2,
    };
    reject(
        RejectionKind::BadRequest,
        format!(
            "{error} (from {}). Write GPU requests as type:count, e.g. {example}.",
            field.option_names()
        ),
    )
}

fn first_untyped_gpu<'r, 'a>(requests: &'r [FieldRequest<'a>]) -> Option<&'r FieldRequest<'a>> {
    requests
        .iter()
        .find(|r| r.request.is_gpu() && r.request.gres_type.is_none())
}

/// How suggestions are written: as `sbatch` options for a submission, as
/// an `scontrol update` line for an update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Syntax {
    Sbatch,
    Scontrol,
}

#[derive(Debug, Clone, Copy)]
struct Context<'j, 'a> {
    job: &'j JobDescription<'a>,
    syntax: Syntax,
}

impl Context<'_, '_> {
    /// How the user would write this GPU request: `--gres=gpu:a40:2` when
    /// submitting, `Gres=gpu:a40:2` in an update.
    fn gpu_request(&self, field: TresField, gpu_type: Option<&str>, count: u64) -> String {
        match self.syntax {
            Syntax::Sbatch => GpuOption {
                field,
                gpu_type,
                count,
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

    /// A complete suggestion: the option itself, or a whole `scontrol` line.
    fn suggest(&self, field: TresField, gpu_type: &str, count: u64) -> String {
        let request = self.gpu_request(field, Some(gpu_type), count);
        match self.syntax {
            Syntax::Sbatch => request,
            Syntax::Scontrol => {
                let qos = self
                    .job
                    .qos
                    .map(|q| format!("QOS={} ", q.trim()))
                    .unwrap_or_default();
                format!("scontrol update job={} {qos}{request}", self.job_ref())
            }
        }
    }

    fn job_ref(&self) -> String {
        self.job
            .job_id_for_messages
            .map_or_else(|| "<jobid>".to_owned(), |id| id.to_string())
    }
}

/// The partition and association rules that cover the job, each with the
/// level it is told as. An association rule names the nearest of the job's
/// accounts it covers; a rule limited to users covers the job when its user
/// is one of them, or is unknown (an update), which fails closed.
fn other_levels<'c, 'a>(
    cfg: &'c GpuQosConfig,
    job: &JobDescription<'a>,
) -> impl Iterator<Item = (Level<'a>, &'c QosRule)> + 'c
where
    'a: 'c,
{
    let partitions = job.partitions().filter_map(|p| {
        cfg.partition_rule(p)
            .map(|rule| (Level::Partition(p), rule))
    });
    let resolved = job.resolved;
    let associations = cfg.association_rules().filter_map(move |rule| {
        let RuleScope::Association { accounts, users } = rule.scope() else {
            return None;
        };
        let user_matches = users.is_empty()
            || resolved
                .user
                .is_none_or(|u| users.iter().any(|x| x.eq_ignore_ascii_case(u)));
        if !user_matches {
            return None;
        }
        if accounts.is_empty() {
            return resolved.user.map(|u| (Level::User(u), rule));
        }
        resolved
            .accounts
            .iter()
            .find(|a| accounts.iter().any(|x| x.eq_ignore_ascii_case(a)))
            .map(|a| (Level::Account(a.as_str()), rule))
    });
    partitions.chain(associations)
}

/// The rules of the job's partitions and of its association and parents.
fn judge_partitions_and_associations(
    cfg: &GpuQosConfig,
    ctx: &Context<'_, '_>,
    requests: &[FieldRequest<'_>],
) -> Result<(), Rejection> {
    for (level, rule) in other_levels(cfg, ctx.job) {
        judge_under_rule(ctx, requests, level, rule)?;
    }
    Ok(())
}

/// Rules 1, 3, 5 and 6 for one rule that covers the job.
fn judge_under_rule(
    ctx: &Context<'_, '_>,
    requests: &[FieldRequest<'_>],
    level: Level<'_>,
    rule: &QosRule,
) -> Result<(), Rejection> {
    // Joined only on the way to a rejection: the accept path stays allocation-light.
    let permitted = || rule.gpu_types().join(", ");
    let first_type = rule.first_gpu_type();
    let gpus = requests.iter().filter(|r| r.request.is_gpu());

    if gpus.clone().next().is_none() {
        // Only a QOS the user chose is "for GPU jobs": a CPU job that falls
        // back to a GPU QOS, or runs in a GPU partition, counts no GPU.
        return match level {
            Level::Qos(_) => Err(no_gpu_request(ctx, requests, level, rule)),
            _ => Ok(()),
        };
    }
    if let Some(untyped) = gpus.clone().find(|r| r.request.gres_type.is_none()) {
        let (field, count) = (untyped.field, untyped.request.count);
        let asked = ctx.gpu_request(field, None, count);
        let instead = ctx.suggest(field, first_type, count);
        let permitted = permitted();
        let (subject, name) = (level.subject(), level.name());
        return Err(match ctx.syntax {
            Syntax::Sbatch => reject(
                RejectionKind::UntypedGpu,
                format!(
                    "{subject} requires a GPU type, but {asked} does not name one; \
                     {name} may use {permitted}. Submit with {instead} instead."
                ),
            ),
            Syntax::Scontrol => reject(
                RejectionKind::UpdateNeedsTypedGpu,
                format!(
                    "{subject} requires a GPU type, but {asked} does not name one; \
                     {name} may use {permitted}. Use: {instead}"
                ),
            ),
        });
    }
    for r in gpus.clone() {
        let Some(ty) = r.request.gres_type else {
            continue;
        };
        if !rule.permits(ty) {
            let asked = ctx.gpu_request(r.field, Some(ty), r.request.count);
            let instead = ctx.suggest(r.field, first_type, r.request.count);
            let how = match ctx.syntax {
                Syntax::Sbatch => format!("Submit with {instead} instead"),
                Syntax::Scontrol => format!("Use: {instead}"),
            };
            let permitted = permitted();
            let (subject, name, elsewhere) = (level.subject(), level.name(), level.elsewhere(ty));
            return Err(reject(
                RejectionKind::TypeNotPermitted,
                format!(
                    "{subject} does not cover GPU type {ty} (asked with {asked}); \
                     {name} may use {permitted}. {how}, or {elsewhere}."
                ),
            ));
        }
    }
    // Each type against its own limit, as accounting counts each type name.
    for r in gpus {
        let Some(ty) = r.request.gres_type else {
            continue;
        };
        let Some(limit) = rule.limit_for(ty) else {
            continue;
        };
        let least = least_total(ctx.job, requests, ty);
        if least.total > limit {
            return Err(over_limit(ctx, level, ty, limit, least));
        }
    }
    Ok(())
}

fn no_gpu_request(
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

/// Rule 7 (and untyped GPUs in an update of unknown QOS): no QOS rule
/// applies, so suggest the types known from all rules.
fn untyped_anywhere(
    cfg: &GpuQosConfig,
    ctx: &Context<'_, '_>,
    untyped: &FieldRequest<'_>,
) -> Rejection {
    let known = cfg.known_gpu_types();
    let (field, count) = (untyped.field, untyped.request.count);
    let asked = ctx.gpu_request(field, None, count);
    let example_type = known.first().map_or("<type>", String::as_str);
    let instead = ctx.suggest(field, example_type, count);
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

/// The fewest GPUs of one type a job can end up with, and the field that
/// forces it. Fields constrain one allocation rather than add up
/// (`--gpus=4 --gpus-per-node=2` is 4 GPUs on 2 nodes), so the bound is the
/// largest field total, not their sum.
#[derive(Debug, Clone, Copy)]
struct LeastTotal {
    total: u64,
    field: TresField,
    multiplier: u64,
}

fn least_total(job: &JobDescription<'_>, requests: &[FieldRequest<'_>], ty: &str) -> LeastTotal {
    let mut least = LeastTotal {
        total: 0,
        field: TresField::PerJob,
        multiplier: 1,
    };
    for field in TresField::ALL {
        let per_unit = requests
            .iter()
            .filter(|r| r.field == field && r.request.is_gpu() && r.request.gres_type == Some(ty))
            .fold(0u64, |sum, r| sum.saturating_add(r.request.count));
        let multiplier = multiplier(job, field);
        let total = per_unit.saturating_mul(multiplier);
        if total > least.total {
            least = LeastTotal {
                total,
                field,
                multiplier,
            };
        }
    }
    least
}

fn nodes(job: &JobDescription<'_>) -> u64 {
    u64::from(job.min_nodes.unwrap_or(1).max(1))
}

fn multiplier(job: &JobDescription<'_>, field: TresField) -> u64 {
    match field {
        TresField::PerJob => 1,
        TresField::PerNode => nodes(job),
        TresField::PerTask => u64::from(job.num_tasks.unwrap_or(1).max(1)),
        TresField::PerSocket => {
            u64::from(job.sockets_per_node.unwrap_or(1).max(1)).saturating_mul(nodes(job))
        }
    }
}

fn over_limit(
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
            "Ask for at most {limit}: {}, or use a QOS with a larger limit.",
            ctx.suggest(least.field, ty, limit)
        )
    } else if per_unit >= 1 {
        format!(
            "With {units} that is at most {}; or ask for fewer {unit_plural}, or use a QOS \
             with a larger limit.",
            ctx.suggest(least.field, ty, per_unit)
        )
    } else {
        format!(
            "Even one {ty} per {unit} is too many with {units}: ask for fewer {unit_plural}, \
             or use a QOS with a larger limit."
        )
    };
    let limited_by = level.name();
    reject(
        RejectionKind::OverLimit,
        format!(
            "This job can never start: asks {} {ty}, {limited_by} allows at most {limit}. {advice}",
            least.total
        ),
    )
}

/// Rule 10: GPU shares only inside the shared-GPU reservations. A job
/// naming several reservations may start in any, so all must qualify.
fn judge_shared_reservation(
    cfg: &GpuQosConfig,
    job: &JobDescription<'_>,
    requests: &[FieldRequest<'_>],
) -> Result<(), Rejection> {
    let Some(globs) = cfg.shared_gpu_reservations() else {
        return Ok(());
    };
    let Some(share) = requests.iter().find(|r| r.request.is_shared_gpu()) else {
        return Ok(());
    };
    let mut names = job.reservation_names();
    let outside = names.clone().find(|n| !cfg.reservation_allows_shared(n));
    let asked = format!("{}:{}", share.request.name, share.request.count);
    let patterns = globs.join(", ");
    let message = match (names.next(), outside) {
        (Some(_), None) => return Ok(()),
        (None, _) => format!(
            "GPU shares ({asked}) are only available inside the shared-GPU reservations \
             matching {patterns}: add --reservation=<name> with the name of one of them \
             (scontrol show reservation lists them)."
        ),
        (Some(_), Some(outside)) => format!(
            "Reservation {outside} is not a shared-GPU reservation, and GPU shares ({asked}) \
             are only available inside reservations matching {patterns}: use \
             --reservation=<name> with the name of one of those."
        ),
    };
    Err(reject(RejectionKind::SharedOutsideReservation, message))
}

/// Rule 11: the mps units per node, checked against `MaxMPSPerJob`.
/// Returns the exact per-node count for the SPANK environment when the job
/// asked it per node (`--gres=mps:N`); other fields only give a lower
/// bound of one node's share, good enough to refuse but not to hand on.
fn judge_mps_share(
    cfg: &GpuQosConfig,
    job: &JobDescription<'_>,
    requests: &[FieldRequest<'_>],
) -> Result<Option<u64>, Rejection> {
    let mut per_node: Option<u64> = None;
    let mut least_on_one_node: u64 = 0;
    for r in requests
        .iter()
        .filter(|r| r.request.name.eq_ignore_ascii_case("mps"))
    {
        let on_one_node = match r.field {
            TresField::PerNode => {
                let sum = per_node.unwrap_or(0).saturating_add(r.request.count);
                per_node = Some(sum);
                sum
            }
            TresField::PerSocket => r
                .request
                .count
                .saturating_mul(u64::from(job.sockets_per_node.unwrap_or(1).max(1))),
            TresField::PerTask => r.request.count,
            // Spread over nodes we cannot count: no per-node bound.
            TresField::PerJob => 0,
        };
        least_on_one_node = least_on_one_node.max(on_one_node);
    }
    if let Some(max) = cfg.max_mps_per_job() {
        if least_on_one_node > max {
            return Err(reject(
                RejectionKind::ShareTooLarge,
                format!(
                    "This job asks for {least_on_one_node} mps units on one node, more than \
                     the largest GPU share allowed: at most {max} mps units per job. Ask for \
                     --gres=mps:{max} or less, or for whole GPUs with --gres=gpu:<type>:<count>."
                ),
            ));
        }
    }
    Ok(per_node)
}

fn apply_requeue(job: &JobDescription<'_>, low_qos: &str, changes: &mut JobChanges) {
    match job.requeue {
        None => changes.set_requeue = true,
        Some(false) => {
            changes.user_warning = Some(format!(
                "Jobs under QOS {low_qos} can be preempted; because of --no-requeue this job \
                 will be cancelled instead of requeued when that happens. Submit without \
                 --no-requeue to have it requeued."
            ));
        }
        Some(true) => {}
    }
}

/// A low-priority job with `--exclusive=user` would keep every other user
/// off its node, idle GPUs included, until preempted: it loses the option
/// (unless `LowPriorityExclusiveUser=keep`) and its user is told.
fn apply_exclusive_user(
    cfg: &GpuQosConfig,
    job: &JobDescription<'_>,
    low_qos: &str,
    changes: &mut JobChanges,
) {
    if !job.exclusive_user || !cfg.low_priority_clears_exclusive_user() {
        return;
    }
    changes.clear_exclusive_user = true;
    let warning = format!(
        "Jobs under QOS {low_qos} may not use --exclusive=user: it would keep other users \
         off the node's idle GPUs. The job was accepted without it."
    );
    changes.user_warning = Some(match changes.user_warning.take() {
        Some(earlier) => format!("{earlier}\n{warning}"),
        None => warning,
    });
}

/// Rule 9's array cap: `Some(new)` when `array_inx` must change. A throttle
/// of 0 is treated as "no throttle", which is what Slurm makes of it.
fn throttled_array(inx: &str, max: u32) -> Result<Option<String>, Rejection> {
    let Some((range, throttle)) = inx.rsplit_once('%') else {
        return Ok(Some(format!("{inx}%{max}")));
    };
    if throttle.is_empty() || !throttle.bytes().all(|b| b.is_ascii_digit()) {
        return Err(reject(
            RejectionKind::BadRequest,
            format!(
                "Invalid --array={inx}: what follows % must be the number of tasks to run at \
                 once, e.g. --array={range}%{max}."
            ),
        ));
    }
    // All digits, so a parse failure can only be an overflow: a huge throttle.
    let asked = throttle.parse::<u64>().unwrap_or(u64::MAX);
    if asked == 0 || asked > u64::from(max) {
        Ok(Some(format!("{range}%{max}")))
    } else {
        Ok(None)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::qos::config as qos_conf;
    use proptest::prelude::*;

    const CONF: &str = "\
QOS=qos_lafferty,qos_ying_rex GPUTypes=a40 GPULimit=4
QOS=qos_saxena GPUTypes=a100,h100 GPULimit=20
QOS=qos_open GPUTypes=a40
LowPriorityQOS=lowprio
LowPriorityMaxArrayTasks=8
SharedGPUReservations=jhl_homework_gpu*,jupyterhub_course_*
MaxMPSPerJob=100
";

    fn cfg() -> GpuQosConfig {
        qos_conf::parse(CONF, "gpu_qos.conf").unwrap()
    }

    fn cfg_from(text: &str) -> GpuQosConfig {
        qos_conf::parse(text, "gpu_qos.conf").unwrap()
    }

    fn job<'a>(qos: Option<&'a str>, per_node: Option<&'a str>) -> JobDescription<'a> {
        JobDescription {
            qos,
            tres_per_node: per_node,
            ..JobDescription::default()
        }
    }

    fn rejection(verdict: Verdict) -> Rejection {
        match verdict {
            Verdict::Reject(r) => r,
            Verdict::Accept(c) => panic!("expected a rejection, got Accept({c:?})"),
        }
    }

    fn changes(verdict: Verdict) -> JobChanges {
        match verdict {
            Verdict::Accept(c) => c,
            Verdict::Reject(r) => panic!("expected acceptance, got {:?}: {}", r.kind, r.message),
        }
    }

    fn submit(job: &JobDescription<'_>) -> Verdict {
        judge_submit(&cfg(), job)
    }

    // Rule 1
    #[test]
    fn untyped_gres_under_gpu_qos_is_rejected_with_the_typed_option() {
        let r = rejection(submit(&job(Some("qos_lafferty"), Some("gres:gpu:2"))));
        assert_eq!(r.kind, RejectionKind::UntypedGpu);
        assert_eq!(
            r.message,
            "QOS qos_lafferty requires a GPU type, but --gres=gpu:2 does not name one; \
             qos_lafferty may use a40. Submit with --gres=gpu:a40:2 instead."
        );
        assert_eq!(r.to_string(), r.message);
    }

    #[test]
    fn untyped_suggestion_follows_the_field_used() {
        let per_job = JobDescription {
            qos: Some("qos_ying_rex"),
            tres_per_job: Some("gres/gpu:3"),
            ..JobDescription::default()
        };
        let r = rejection(submit(&per_job));
        assert!(
            r.message.contains("but --gpus=3 does not name one"),
            "{}",
            r.message
        );
        assert!(
            r.message.ends_with("Submit with --gpus=a40:3 instead."),
            "{}",
            r.message
        );

        let per_task = JobDescription {
            qos: Some("qos_lafferty"),
            tres_per_task: Some("cpu=4,gres/gpu=1"),
            ..JobDescription::default()
        };
        let r = rejection(submit(&per_task));
        assert!(r
            .message
            .ends_with("Submit with --gpus-per-task=a40:1 instead."));

        let per_socket = JobDescription {
            qos: Some("qos_lafferty"),
            tres_per_socket: Some("gres:gpu:1"),
            ..JobDescription::default()
        };
        let r = rejection(submit(&per_socket));
        assert!(r
            .message
            .ends_with("Submit with --gpus-per-socket=a40:1 instead."));
    }

    #[test]
    fn untyped_without_count_means_one() {
        let r = rejection(submit(&job(Some("qos_lafferty"), Some("gres:gpu"))));
        assert!(r.message.contains("--gres=gpu:1 does not name one"));
        assert!(r.message.ends_with("Submit with --gres=gpu:a40:1 instead."));
    }

    #[test]
    fn several_permitted_types_suggest_the_first_and_list_all() {
        let r = rejection(submit(&job(Some("qos_saxena"), Some("gres:gpu:2"))));
        assert_eq!(
            r.message,
            "QOS qos_saxena requires a GPU type, but --gres=gpu:2 does not name one; \
             qos_saxena may use a100, h100. Submit with --gres=gpu:a100:2 instead."
        );
    }

    #[test]
    fn qos_spelling_does_not_dodge_the_rule() {
        let r = rejection(submit(&job(Some("QOS_Lafferty"), Some("gres:GPU:2"))));
        assert_eq!(r.kind, RejectionKind::UntypedGpu);
        assert!(r
            .message
            .starts_with("QOS QOS_Lafferty requires a GPU type"));
    }

    // Rule 2
    #[test]
    fn typed_permitted_requests_are_accepted_unchanged() {
        for gres in [
            "gres:gpu:a40:2",
            "gres/gpu:a40:4",
            "gpu:a40",
            "gres:gpu:a40:2,gres:gpu:a40:0",
        ] {
            assert!(changes(submit(&job(Some("qos_lafferty"), Some(gres)))).is_empty());
        }
        let per_task = JobDescription {
            qos: Some("qos_saxena"),
            tres_per_task: Some("cpu=4,gres/gpu:h100=1"),
            num_tasks: Some(4),
            ..JobDescription::default()
        };
        assert!(changes(submit(&per_task)).is_empty());
    }

    // Rule 3
    #[test]
    fn typed_request_outside_the_qos_types_is_rejected() {
        let r = rejection(submit(&job(Some("qos_lafferty"), Some("gres:gpu:a100:2"))));
        assert_eq!(r.kind, RejectionKind::TypeNotPermitted);
        assert_eq!(
            r.message,
            "QOS qos_lafferty does not cover GPU type a100 (asked with --gres=gpu:a100:2); \
             qos_lafferty may use a40. Submit with --gres=gpu:a40:2 instead, or use a QOS \
             that covers a100."
        );
    }

    #[test]
    fn type_comparison_is_exact() {
        let r = rejection(submit(&job(Some("qos_lafferty"), Some("gres:gpu:A40:1"))));
        assert_eq!(r.kind, RejectionKind::TypeNotPermitted);
    }

    // Rule 4
    #[test]
    fn every_field_is_judged() {
        let mixed = JobDescription {
            qos: Some("qos_lafferty"),
            tres_per_node: Some("gres:gpu:a40:1"),
            tres_per_task: Some("gres/gpu=1"),
            ..JobDescription::default()
        };
        let r = rejection(submit(&mixed));
        assert_eq!(r.kind, RejectionKind::UntypedGpu);
        assert!(r
            .message
            .ends_with("Submit with --gpus-per-task=a40:1 instead."));

        let wrong_socket = JobDescription {
            qos: Some("qos_lafferty"),
            tres_per_node: Some("gres:gpu:a40:1"),
            tres_per_socket: Some("gres:gpu:a100:1"),
            ..JobDescription::default()
        };
        assert_eq!(
            rejection(submit(&wrong_socket)).kind,
            RejectionKind::TypeNotPermitted
        );

        let gpu_only_in_per_job = JobDescription {
            qos: Some("qos_lafferty"),
            tres_per_node: Some("gres:mps:0"),
            tres_per_job: Some("gres:gpu:a40:1"),
            ..JobDescription::default()
        };
        assert!(changes(submit(&gpu_only_in_per_job)).is_empty());
    }

    // Rule 5
    #[test]
    fn per_job_over_limit_can_never_start() {
        let j = JobDescription {
            qos: Some("qos_lafferty"),
            tres_per_job: Some("gres:gpu:a40:8"),
            ..JobDescription::default()
        };
        let r = rejection(submit(&j));
        assert_eq!(r.kind, RejectionKind::OverLimit);
        assert_eq!(
            r.message,
            "This job can never start: asks 8 a40, qos_lafferty allows at most 4. \
             Ask for at most 4: --gpus=a40:4, or use a QOS with a larger limit."
        );
    }

    #[test]
    fn per_node_counts_multiply_by_nodes() {
        let j = JobDescription {
            min_nodes: Some(3),
            ..job(Some("qos_lafferty"), Some("gres:gpu:a40:2"))
        };
        let r = rejection(submit(&j));
        assert_eq!(
            r.message,
            "This job can never start: asks 6 a40, qos_lafferty allows at most 4. \
             With 3 nodes that is at most --gres=gpu:a40:1; or ask for fewer nodes, or use \
             a QOS with a larger limit."
        );
        let fits = JobDescription {
            min_nodes: Some(2),
            ..job(Some("qos_lafferty"), Some("gres:gpu:a40:2"))
        };
        assert!(changes(submit(&fits)).is_empty());
    }

    #[test]
    fn per_task_and_per_socket_counts_multiply() {
        let tasks = JobDescription {
            qos: Some("qos_lafferty"),
            tres_per_task: Some("gres/gpu:a40=1"),
            num_tasks: Some(5),
            ..JobDescription::default()
        };
        let r = rejection(submit(&tasks));
        assert_eq!(
            r.message,
            "This job can never start: asks 5 a40, qos_lafferty allows at most 4. \
             Even one a40 per task is too many with 5 tasks: ask for fewer tasks, or use a \
             QOS with a larger limit."
        );
        let sockets = JobDescription {
            qos: Some("qos_lafferty"),
            tres_per_socket: Some("gres:gpu:a40:1"),
            sockets_per_node: Some(2),
            min_nodes: Some(3),
            ..JobDescription::default()
        };
        let r = rejection(submit(&sockets));
        assert!(r
            .message
            .starts_with("This job can never start: asks 6 a40"));
        assert!(r.message.contains("with 2 sockets per node on 3 nodes"));
    }

    #[test]
    fn fields_bound_the_total_together_not_as_a_sum() {
        let j = JobDescription {
            qos: Some("qos_lafferty"),
            tres_per_job: Some("gres:gpu:a40:4"),
            tres_per_node: Some("gres:gpu:a40:2"),
            min_nodes: Some(2),
            ..JobDescription::default()
        };
        assert!(changes(submit(&j)).is_empty());
    }

    #[test]
    fn no_limit_means_no_never_fits_check_and_huge_counts_saturate() {
        let j = JobDescription {
            min_nodes: Some(u32::MAX),
            sockets_per_node: Some(u16::MAX),
            tres_per_socket: Some("gres:gpu:a40:16G"),
            ..job(Some("qos_open"), Some("gres:gpu:a40:16G"))
        };
        assert!(changes(submit(&j)).is_empty());
        let j = JobDescription {
            qos: Some("qos_lafferty"),
            ..j
        };
        let r = rejection(submit(&j));
        assert!(
            r.message.contains(&format!("asks {} a40", u64::MAX)),
            "{}",
            r.message
        );
    }

    // Rule 6
    #[test]
    fn gpu_qos_without_gpu_request_is_rejected() {
        let r = rejection(submit(&job(Some("qos_lafferty"), None)));
        assert_eq!(r.kind, RejectionKind::NoGpuRequest);
        assert_eq!(
            r.message,
            "QOS qos_lafferty is for GPU jobs, and this job asks for no GPU. Ask for a GPU \
             with --gres=gpu:a40:1 (qos_lafferty may use a40), or submit under another QOS."
        );
        let r = rejection(submit(&job(Some("qos_lafferty"), Some("gres:gpu:a40:0"))));
        assert_eq!(r.kind, RejectionKind::NoGpuRequest);
    }

    #[test]
    fn gpu_qos_with_only_shares_is_told_why() {
        let j = JobDescription {
            reservation: Some("jhl_homework_gpu"),
            ..job(Some("qos_lafferty"), Some("gres:mps:50"))
        };
        let r = rejection(submit(&j));
        assert_eq!(r.kind, RejectionKind::NoGpuRequest);
        assert!(r.message.contains("asks only for GPU shares (mps/shard)"));
    }

    // Rule 7
    #[test]
    fn unlisted_or_no_qos_is_untouched() {
        for qos in [None, Some("normal"), Some("")] {
            assert!(changes(submit(&job(qos, Some("gres:gpu:2")))).is_empty());
            assert!(changes(submit(&job(qos, Some("gres:gpu:v100:200")))).is_empty());
            assert!(changes(submit(&job(qos, None))).is_empty());
        }
    }

    #[test]
    fn require_gpu_type_all_rejects_untyped_everywhere() {
        let cfg = cfg_from("QOS=q GPUTypes=a40\nQOS=r GPUTypes=a100,a40\nRequireGPUType=all");
        let r = rejection(judge_submit(&cfg, &job(None, Some("gres:gpu:2"))));
        assert_eq!(r.kind, RejectionKind::UntypedGpu);
        assert_eq!(
            r.message,
            "GPU requests must name a GPU type, but --gres=gpu:2 does not name one \
             (known types: a40, a100). Submit with e.g. --gres=gpu:a40:2 instead."
        );
        assert!(changes(judge_submit(
            &cfg,
            &job(Some("normal"), Some("gres:gpu:v100:2"))
        ))
        .is_empty());

        let no_rules = cfg_from("RequireGPUType=all");
        let r = rejection(judge_submit(
            &no_rules,
            &job(Some("normal"), Some("gres:gpu:2")),
        ));
        assert_eq!(
            r.message,
            "GPU requests must name a GPU type, but --gres=gpu:2 does not name one. \
             Submit with e.g. --gres=gpu:<type>:2 instead."
        );
    }

    // Rule 8
    #[test]
    fn every_gpu_qos_of_a_list_must_accept() {
        let r = rejection(submit(&job(
            Some("normal,qos_lafferty"),
            Some("gres:gpu:2"),
        )));
        assert_eq!(r.kind, RejectionKind::UntypedGpu);
        let r = rejection(submit(&job(
            Some("qos_lafferty, qos_saxena"),
            Some("gres:gpu:a40:1"),
        )));
        assert_eq!(r.kind, RejectionKind::TypeNotPermitted);
        assert!(r
            .message
            .starts_with("QOS qos_saxena does not cover GPU type a40"));
        assert!(changes(submit(&job(
            Some("qos_lafferty,qos_open"),
            Some("gres:gpu:a40:1")
        )))
        .is_empty());
    }

    // Rule 9
    #[test]
    fn low_priority_jobs_become_requeueable_with_appended_output() {
        let c = changes(submit(&job(Some("lowprio"), None)));
        assert_eq!(
            c,
            JobChanges {
                set_requeue: true,
                set_open_mode_append: true,
                ..JobChanges::default()
            }
        );
        let explicit = JobDescription {
            requeue: Some(true),
            open_mode_set: true,
            ..job(Some("LOWPRIO"), None)
        };
        assert!(changes(submit(&explicit)).is_empty());
        let in_list = job(Some("normal,lowprio"), None);
        assert!(changes(submit(&in_list)).set_requeue);
    }

    #[test]
    fn exclusive_user_under_low_priority_is_cleared_with_a_warning() {
        let j = JobDescription {
            exclusive_user: true,
            requeue: Some(false),
            ..job(Some("lowprio"), None)
        };
        let c = changes(submit(&j));
        assert!(c.clear_exclusive_user);
        let warning = c.user_warning.unwrap_or_default();
        assert!(
            warning.starts_with("Jobs under QOS lowprio can be preempted;"),
            "{warning}"
        );
        assert!(warning.ends_with(
            "\nJobs under QOS lowprio may not use --exclusive=user: it would keep other users \
             off the node's idle GPUs. The job was accepted without it."
        ));
        // Other QOS keep it; so does a site that says keep.
        let group = JobDescription {
            exclusive_user: true,
            ..job(Some("qos_lafferty"), Some("gres:gpu:a40:1"))
        };
        assert!(!changes(submit(&group)).clear_exclusive_user);
        let keep = cfg_from("LowPriorityQOS=lowprio\nLowPriorityExclusiveUser=keep");
        assert!(!changes(judge_submit(&keep, &j)).clear_exclusive_user);
        // An update to the low-priority QOS loses it too.
        let update = JobDescription {
            exclusive_user: true,
            ..job(Some("lowprio"), None)
        };
        assert!(changes(judge_modify(&cfg(), &update)).clear_exclusive_user);
    }

    #[test]
    fn no_requeue_under_low_priority_is_accepted_with_a_warning() {
        let j = JobDescription {
            requeue: Some(false),
            ..job(Some("lowprio"), None)
        };
        let c = changes(submit(&j));
        assert!(!c.set_requeue);
        assert_eq!(
            c.user_warning.as_deref(),
            Some(
                "Jobs under QOS lowprio can be preempted; because of --no-requeue this job \
                 will be cancelled instead of requeued when that happens. Submit without \
                 --no-requeue to have it requeued."
            )
        );
    }

    #[test]
    fn low_priority_arrays_are_throttled() {
        let array = |inx| {
            changes(submit(&JobDescription {
                array_inx: Some(inx),
                ..job(Some("lowprio"), None)
            }))
            .array_inx
        };
        assert_eq!(array("0-99").as_deref(), Some("0-99%8"));
        assert_eq!(array("0-99%20").as_deref(), Some("0-99%8"));
        assert_eq!(array("1,3,5-9:2%0").as_deref(), Some("1,3,5-9:2%8"));
        assert_eq!(
            array("0-9%99999999999999999999999").as_deref(),
            Some("0-9%8")
        );
        assert_eq!(array("0-99%4"), None);
        assert_eq!(array("0-99%8"), None);
        assert_eq!(array("  "), None);

        let r = rejection(submit(&JobDescription {
            array_inx: Some("0-9%x"),
            ..job(Some("lowprio"), None)
        }));
        assert_eq!(r.kind, RejectionKind::BadRequest);
        assert_eq!(
            r.message,
            "Invalid --array=0-9%x: what follows % must be the number of tasks to run at \
             once, e.g. --array=0-9%8."
        );

        let normal = JobDescription {
            array_inx: Some("0-99"),
            ..job(Some("normal"), None)
        };
        assert!(changes(submit(&normal)).is_empty());
        let uncapped = cfg_from("LowPriorityQOS=lowprio");
        let j = JobDescription {
            array_inx: Some("0-99"),
            ..job(Some("lowprio"), None)
        };
        assert_eq!(changes(judge_submit(&uncapped, &j)).array_inx, None);
    }

    // Rule 10
    #[test]
    fn shares_outside_the_shared_reservations_are_rejected() {
        let r = rejection(submit(&job(None, Some("gres:mps:50"))));
        assert_eq!(r.kind, RejectionKind::SharedOutsideReservation);
        assert_eq!(
            r.message,
            "GPU shares (mps:50) are only available inside the shared-GPU reservations \
             matching jhl_homework_gpu*, jupyterhub_course_*: add --reservation=<name> with \
             the name of one of them (scontrol show reservation lists them)."
        );
        let elsewhere = JobDescription {
            reservation: Some("maint"),
            ..job(None, Some("gres/shard:2"))
        };
        let r = rejection(submit(&elsewhere));
        assert_eq!(
            r.message,
            "Reservation maint is not a shared-GPU reservation, and GPU shares (shard:2) are \
             only available inside reservations matching jhl_homework_gpu*, \
             jupyterhub_course_*: use --reservation=<name> with the name of one of those."
        );
        let one_bad_of_two = JobDescription {
            reservation: Some("jupyterhub_course_a,maint"),
            ..job(None, Some("gres:mps:50"))
        };
        assert_eq!(
            rejection(submit(&one_bad_of_two)).kind,
            RejectionKind::SharedOutsideReservation
        );
    }

    #[test]
    fn shares_inside_a_matching_reservation_or_without_restriction_pass() {
        let inside = JobDescription {
            reservation: Some("jupyterhub_course_ml"),
            ..job(None, Some("gres:shard:1"))
        };
        assert!(changes(submit(&inside)).is_empty());
        let unrestricted = cfg_from("");
        assert!(changes(judge_submit(
            &unrestricted,
            &job(None, Some("gres/shard:1"))
        ))
        .is_empty());
    }

    // Rule 11
    #[test]
    fn mps_units_reach_the_spank_environment() {
        let j = JobDescription {
            reservation: Some("jhl_homework_gpu3"),
            ..job(None, Some("gres:mps:50"))
        };
        let c = changes(submit(&j));
        assert_eq!(c.spank_env.len(), 1);
        assert_eq!(c.spank_env[0].to_string(), "GPUSHARE_MPS_UNITS=50");
        assert_eq!(c.spank_env[0].name, MPS_UNITS_ENV);
    }

    #[test]
    fn mps_share_larger_than_the_maximum_is_rejected() {
        let j = JobDescription {
            reservation: Some("jhl_homework_gpu3"),
            ..job(None, Some("gres:mps:150"))
        };
        let r = rejection(submit(&j));
        assert_eq!(r.kind, RejectionKind::ShareTooLarge);
        assert_eq!(
            r.message,
            "This job asks for 150 mps units on one node, more than the largest GPU share \
             allowed: at most 100 mps units per job. Ask for --gres=mps:100 or less, or for \
             whole GPUs with --gres=gpu:<type>:<count>."
        );
        let per_task = JobDescription {
            reservation: Some("jhl_homework_gpu3"),
            tres_per_task: Some("gres/mps=200"),
            ..JobDescription::default()
        };
        assert_eq!(
            rejection(submit(&per_task)).kind,
            RejectionKind::ShareTooLarge
        );
        let per_task_ok = JobDescription {
            tres_per_task: Some("gres/mps=20"),
            ..per_task
        };
        assert!(changes(submit(&per_task_ok)).spank_env.is_empty());
        let exactly = JobDescription {
            reservation: Some("jhl_homework_gpu3"),
            ..job(None, Some("gres:mps:100"))
        };
        assert_eq!(changes(submit(&exactly)).spank_env[0].value, "100");
    }

    // Rule 12
    #[test]
    fn update_to_gpu_qos_without_gpus_shows_the_working_update() {
        let update = JobDescription {
            job_id_for_messages: Some(4242),
            ..job(Some("qos_lafferty"), None)
        };
        let r = rejection(judge_modify(&cfg(), &update));
        assert_eq!(r.kind, RejectionKind::UpdateNeedsTypedGpu);
        assert_eq!(
            r.message,
            "Moving a job to QOS qos_lafferty needs a typed GPU request in the same update \
             (qos_lafferty may use a40): scontrol update job=4242 QOS=qos_lafferty \
             Gres=gpu:a40:1\nIf the job was submitted with an untyped GPU request, Slurm \
             cannot add a type to it: cancel it and submit again with --gres=gpu:a40:1."
        );
        let r = rejection(judge_modify(&cfg(), &job(Some("qos_lafferty"), None)));
        assert!(r
            .message
            .contains("scontrol update job=<jobid> QOS=qos_lafferty Gres=gpu:a40:1"));
    }

    #[test]
    fn untyped_update_with_qos_change_names_the_type() {
        let update = JobDescription {
            job_id_for_messages: Some(7),
            ..job(Some("qos_lafferty"), Some("gres:gpu:2"))
        };
        let r = rejection(judge_modify(&cfg(), &update));
        assert_eq!(r.kind, RejectionKind::UpdateNeedsTypedGpu);
        assert_eq!(
            r.message,
            "QOS qos_lafferty requires a GPU type, but Gres=gpu:2 does not name one; \
             qos_lafferty may use a40. Use: scontrol update job=7 QOS=qos_lafferty Gres=gpu:a40:2"
        );
    }

    const LEVELS: &str = "\
QOS=qos_lafferty GPUTypes=a40 GPULimit=4
QOS=qos_saxena GPUTypes=a100,h100 GPULimit=a100:20,h100:2
Partition=gpu GPUTypes=a40,h100 GPULimit=8
Account=lafferty GPUTypes=a40 GPULimit=a40:6
User=carol GPUTypes=h100
";

    fn resolved<'a>(default_qos: &'a [String], accounts: &'a [String]) -> Resolved<'a> {
        Resolved {
            default_qos,
            default_partition: Some("cpu"),
            accounts,
            user: Some("alice"),
        }
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_default_qos_is_judged_when_the_job_names_none() {
        let cfg = cfg_from(LEVELS);
        let (lafferty, none) = (names(&["qos_lafferty"]), names(&[]));
        let j = JobDescription {
            resolved: resolved(&lafferty, &none),
            ..job(None, Some("gres/gpu:2"))
        };
        let r = rejection(judge_submit(&cfg, &j));
        assert_eq!(r.kind, RejectionKind::UntypedGpu);
        assert_eq!(
            r.message,
            "Your default QOS qos_lafferty (the job names no --qos, so it runs under it) \
             requires a GPU type, but --gres=gpu:2 does not name one; qos_lafferty may use \
             a40. Submit with --gres=gpu:a40:2 instead."
        );
        let typed = JobDescription {
            tres_per_node: Some("gres/gpu:a40:2"),
            ..j
        };
        assert!(changes(judge_submit(&cfg, &typed)).is_empty());
        // A CPU job that falls back to the group QOS is not refused: the
        // user did not choose a GPU QOS.
        let cpu = JobDescription {
            tres_per_node: None,
            ..j
        };
        assert!(changes(judge_submit(&cfg, &cpu)).is_empty());
        // A job naming a QOS is judged by that QOS only.
        let named = JobDescription {
            qos: Some("normal"),
            ..j
        };
        assert!(changes(judge_submit(&cfg, &named)).is_empty());
        // Over the default QOS's limit.
        let big = JobDescription {
            tres_per_node: Some("gres/gpu:a40:5"),
            ..j
        };
        assert!(rejection(judge_submit(&cfg, &big))
            .message
            .starts_with("This job can never start: asks 5 a40, qos_lafferty allows at most 4."));
    }

    #[test]
    fn the_partition_qos_is_judged_for_named_and_default_partitions() {
        let cfg = cfg_from(LEVELS);
        let none = names(&[]);
        let in_gpu = JobDescription {
            partition: Some("cpu,gpu"),
            ..job(None, Some("gres/gpu:1"))
        };
        assert_eq!(
            rejection(judge_submit(&cfg, &in_gpu)).message,
            "Partition gpu's QOS requires a GPU type, but --gres=gpu:1 does not name one; \
             partition gpu may use a40, h100. Submit with --gres=gpu:a40:1 instead."
        );
        let default_gpu = JobDescription {
            resolved: Resolved {
                default_partition: Some("gpu"),
                ..resolved(&none, &none)
            },
            ..job(None, Some("gres/gpu:a100:1"))
        };
        let r = rejection(judge_submit(&cfg, &default_gpu));
        assert_eq!(r.kind, RejectionKind::TypeNotPermitted);
        assert!(
            r.message.ends_with("or use a partition that has a100."),
            "{}",
            r.message
        );
        // The default partition does not count when the job names one.
        let elsewhere = JobDescription {
            partition: Some("cpu"),
            ..default_gpu
        };
        assert!(changes(judge_submit(&cfg, &elsewhere)).is_empty());
        // A CPU job in a GPU partition counts no GPU.
        let cpu = JobDescription {
            tres_per_node: None,
            ..in_gpu
        };
        assert!(changes(judge_submit(&cfg, &cpu)).is_empty());
    }

    #[test]
    fn account_limits_cover_sub_accounts_and_user_limits_their_user() {
        let cfg = cfg_from(LEVELS);
        let (none, chain) = (
            names(&[]),
            names(&["lafferty_students", "lafferty", "root"]),
        );
        let j = JobDescription {
            resolved: resolved(&none, &chain),
            ..job(None, Some("gres/gpu:2"))
        };
        assert_eq!(
            rejection(judge_submit(&cfg, &j)).message,
            "Account lafferty's GPU limit requires a GPU type, but --gres=gpu:2 does not name \
             one; account lafferty may use a40. Submit with --gres=gpu:a40:2 instead."
        );
        let over = JobDescription {
            tres_per_job: Some("gres/gpu:a40:7"),
            tres_per_node: None,
            ..j
        };
        assert!(rejection(judge_submit(&cfg, &over))
            .message
            .contains("asks 7 a40, account lafferty allows at most 6."));
        let carol = JobDescription {
            resolved: Resolved {
                user: Some("carol"),
                ..resolved(&none, &none)
            },
            ..job(None, Some("gres/gpu:a40:1"))
        };
        let r = rejection(judge_submit(&cfg, &carol));
        assert!(
            r.message
                .starts_with("User carol's GPU limit does not cover GPU type a40"),
            "{}",
            r.message
        );
    }

    #[test]
    fn several_types_of_one_qos_have_their_own_limits() {
        let cfg = cfg_from(LEVELS);
        let three_h100 = job(Some("qos_saxena"), Some("gres/gpu:h100:3"));
        assert!(rejection(judge_submit(&cfg, &three_h100))
            .message
            .contains("asks 3 h100, qos_saxena allows at most 2."));
        let many_a100 = job(Some("qos_saxena"), Some("gres/gpu:a100:16"));
        assert!(changes(judge_submit(&cfg, &many_a100)).is_empty());
    }

    #[test]
    fn updates_into_a_partition_or_account_with_a_rule_need_a_typed_request() {
        let cfg = cfg_from(LEVELS);
        let none = names(&[]);
        let to_gpu = JobDescription {
            partition: Some("gpu"),
            job_id_for_messages: Some(42),
            ..JobDescription::default()
        };
        let r = rejection(judge_modify(&cfg, &to_gpu));
        assert_eq!(r.kind, RejectionKind::UpdateNeedsTypedGpu);
        assert!(
            r.message.starts_with(
                "Moving a job to partition gpu needs a typed GPU request in the same update"
            ),
            "{}",
            r.message
        );
        let typed = JobDescription {
            tres_per_node: Some("gres/gpu:a40:1"),
            ..to_gpu
        };
        assert!(changes(judge_modify(&cfg, &typed)).is_empty());
        let chain = names(&["lafferty"]);
        let to_lafferty = JobDescription {
            resolved: Resolved {
                accounts: &chain,
                ..Resolved::default()
            },
            ..JobDescription::default()
        };
        assert!(rejection(judge_modify(&cfg, &to_lafferty))
            .message
            .starts_with("Moving a job to account lafferty needs a typed GPU request"));
        // An update's default partition is not a move: nothing to judge.
        let unrelated = JobDescription {
            resolved: resolved(&none, &none),
            ..JobDescription::default()
        };
        assert!(changes(judge_modify(&cfg, &unrelated)).is_empty());
    }

    #[test]
    fn untyped_update_without_qos_is_rejected_because_the_qos_is_unknown() {
        let update = JobDescription {
            job_id_for_messages: Some(7),
            tres_per_job: Some("gres/gpu:3"),
            ..JobDescription::default()
        };
        let r = rejection(judge_modify(&cfg(), &update));
        assert_eq!(r.kind, RejectionKind::UpdateNeedsTypedGpu);
        assert_eq!(
            r.message,
            "An update cannot take an untyped GPU request (TresPerJob=gres/gpu:3): during an \
             update this plugin cannot see the job's QOS, so the request must name a GPU type \
             (known types: a40, a100, h100). Use e.g.: scontrol update job=7 \
             TresPerJob=gres/gpu:a40:3"
        );
        // With no rules there is nothing to protect.
        assert!(changes(judge_modify(&cfg_from(""), &update)).is_empty());
        // A move to a known, unlisted QOS settles the question.
        let to_normal = job(Some("normal"), Some("gres:gpu:2"));
        assert!(changes(judge_modify(&cfg(), &to_normal)).is_empty());
    }

    #[test]
    fn typed_updates_are_judged_when_the_qos_is_in_the_update() {
        let wrong = JobDescription {
            job_id_for_messages: Some(9),
            ..job(Some("qos_lafferty"), Some("gres:gpu:a100:1"))
        };
        let r = rejection(judge_modify(&cfg(), &wrong));
        assert_eq!(r.kind, RejectionKind::TypeNotPermitted);
        assert_eq!(
            r.message,
            "QOS qos_lafferty does not cover GPU type a100 (asked with Gres=gpu:a100:1); \
             qos_lafferty may use a40. Use: scontrol update job=9 QOS=qos_lafferty \
             Gres=gpu:a40:1, or use a QOS that covers a100."
        );
        let too_many = JobDescription {
            job_id_for_messages: Some(9),
            ..job(Some("qos_lafferty"), Some("gres:gpu:a40:5"))
        };
        let r = rejection(judge_modify(&cfg(), &too_many));
        assert_eq!(r.kind, RejectionKind::OverLimit);
        assert!(r.message.ends_with(
            "Ask for at most 4: scontrol update job=9 QOS=qos_lafferty Gres=gpu:a40:4, or use \
             a QOS with a larger limit."
        ));
        let fine = job(Some("qos_lafferty"), Some("gres:gpu:a40:2"));
        assert!(changes(judge_modify(&cfg(), &fine)).is_empty());
        // Without the QOS the type cannot be judged: Slurm's own limits apply.
        let typed_only = job(None, Some("gres:gpu:a100:64"));
        assert!(changes(judge_modify(&cfg(), &typed_only)).is_empty());
    }

    #[test]
    fn updates_touching_neither_qos_nor_gpus_are_accepted() {
        let update = JobDescription {
            min_nodes: Some(2),
            array_inx: Some("0-999"),
            ..JobDescription::default()
        };
        assert!(changes(judge_modify(&cfg(), &update)).is_empty());
        let to_normal = job(Some("normal"), None);
        assert!(changes(judge_modify(&cfg(), &to_normal)).is_empty());
    }

    #[test]
    fn update_to_low_priority_makes_the_job_requeueable() {
        let c = changes(judge_modify(&cfg(), &job(Some("lowprio"), None)));
        assert_eq!(
            c,
            JobChanges {
                set_requeue: true,
                ..JobChanges::default()
            }
        );
    }

    // Rule 13
    #[test]
    fn unparsable_gres_is_a_bad_request_with_the_parser_message() {
        let r = rejection(submit(&job(Some("normal"), Some("gres:gpu:a40:two"))));
        assert_eq!(r.kind, RejectionKind::BadRequest);
        assert_eq!(
            r.message,
            "invalid GRES request \"gres:gpu:a40:two\": count \"two\" is not a number \
             (from --gres/--gpus-per-node). Write GPU requests as type:count, e.g. \
             --gres=gpu:a40:2."
        );
        let update = JobDescription {
            tres_per_job: Some("gres/gpu:99999999999999999999999"),
            ..JobDescription::default()
        };
        assert_eq!(
            rejection(judge_modify(&cfg(), &update)).kind,
            RejectionKind::BadRequest
        );
    }

    #[test]
    fn a_plain_cpu_job_is_accepted_unchanged() {
        let j = JobDescription {
            tres_per_task: Some("cpu=4"),
            num_tasks: Some(8),
            ..job(Some("normal"), None)
        };
        assert!(changes(submit(&j)).is_empty());
        assert!(changes(judge_submit(&GpuQosConfig::default(), &j)).is_empty());
    }

    fn opt_str(pattern: &'static str) -> impl Strategy<Value = Option<String>> {
        prop::option::of(pattern)
    }

    const TRES: &str =
        "((gres[:/])?(gpu|mps|shard|cpu|GPU)(:[a-z0-9.]{1,4})?([:=][0-9kKgx]{0,3})?,?){0,3}";

    #[derive(Debug, Clone)]
    struct OwnedJob {
        strings: [Option<String>; 7],
        min_nodes: Option<u32>,
        num_tasks: Option<u32>,
        sockets_per_node: Option<u16>,
        requeue: Option<bool>,
        open_mode_set: bool,
        exclusive_user: bool,
        job_id: Option<u32>,
    }

    impl OwnedJob {
        fn view(&self) -> JobDescription<'_> {
            let s = |i: usize| self.strings[i].as_deref();
            JobDescription {
                qos: s(0),
                tres_per_node: s(1),
                tres_per_job: s(2),
                tres_per_socket: s(3),
                tres_per_task: s(4),
                reservation: s(5),
                array_inx: s(6),
                min_nodes: self.min_nodes,
                num_tasks: self.num_tasks,
                sockets_per_node: self.sockets_per_node,
                requeue: self.requeue,
                open_mode_set: self.open_mode_set,
                exclusive_user: self.exclusive_user,
                job_id_for_messages: self.job_id,
                ..JobDescription::default()
            }
        }
    }

    fn any_job() -> impl Strategy<Value = OwnedJob> {
        let strings = (
            opt_str("(qos_lafferty|qos_saxena|lowprio|normal|QOS_LAFFERTY|,| ){0,3}"),
            opt_str(TRES),
            opt_str(TRES),
            opt_str(TRES),
            opt_str(TRES),
            opt_str("(jhl_homework_gpu[0-9]?|maint|,){0,2}"),
            opt_str("[0-9,%-]{0,8}"),
        );
        let numbers = (
            any::<Option<u32>>(),
            any::<Option<u32>>(),
            any::<Option<u16>>(),
            any::<Option<bool>>(),
            any::<bool>(),
            any::<Option<u32>>(),
            any::<bool>(),
        );
        (strings, numbers).prop_map(|(s, n)| OwnedJob {
            strings: [s.0, s.1, s.2, s.3, s.4, s.5, s.6],
            min_nodes: n.0,
            num_tasks: n.1,
            sockets_per_node: n.2,
            requeue: n.3,
            open_mode_set: n.4,
            exclusive_user: n.6,
            job_id: n.5,
        })
    }

    fn arbitrary_job() -> impl Strategy<Value = OwnedJob> {
        let strings = proptest::array::uniform7(opt_str(".{0,24}"));
        (
            strings,
            any::<(
                Option<u32>,
                Option<u32>,
                Option<u16>,
                Option<bool>,
                bool,
                bool,
            )>(),
        )
            .prop_map(|(strings, n)| OwnedJob {
                strings,
                min_nodes: n.0,
                num_tasks: n.1,
                sockets_per_node: n.2,
                requeue: n.3,
                open_mode_set: n.4,
                exclusive_user: n.5,
                job_id: None,
            })
    }

    fn configs() -> impl Strategy<Value = GpuQosConfig> {
        prop::sample::select(vec![
            cfg(),
            GpuQosConfig::default(),
            cfg_from("QOS=qos_lafferty GPUTypes=a40 GPULimit=1\nRequireGPUType=all"),
        ])
    }

    proptest! {
        #[test]
        fn judging_never_panics(cfg in configs(), owned in any_job()) {
            let job = owned.view();
            for verdict in [judge_submit(&cfg, &job), judge_modify(&cfg, &job)] {
                if let Verdict::Reject(r) = verdict {
                    prop_assert!(!r.message.is_empty());
                }
            }
        }

        #[test]
        fn judging_arbitrary_text_never_panics(cfg in configs(), owned in arbitrary_job()) {
            let job = owned.view();
            let _ = judge_submit(&cfg, &job);
            let _ = judge_modify(&cfg, &job);
        }

        #[test]
        fn accepted_gpu_qos_jobs_only_hold_permitted_typed_gpus(owned in any_job()) {
            let cfg = cfg();
            let job = owned.view();
            if let Verdict::Accept(_) = judge_submit(&cfg, &job) {
                for qos in job.qos_names() {
                    let Some(rule) = cfg.rule_for(qos) else { continue };
                    let requests = collect_requests(&cfg, &job).unwrap();
                    prop_assert!(requests.iter().any(|r| r.request.is_gpu()));
                    for r in requests.iter().filter(|r| r.request.is_gpu()) {
                        let ty = r.request.gres_type;
                        prop_assert!(ty.is_some_and(|t| rule.permits(t)), "{:?}", r);
                    }
                }
            }
        }

        #[test]
        fn following_the_untyped_advice_is_accepted(
            field in prop::sample::select(TresField::ALL.to_vec()),
            count in 1u64..=4,
            slash in any::<bool>(),
        ) {
            let cfg = cfg();
            let sep = if slash { '/' } else { ':' };
            let asked = format!("gres{sep}gpu:{count}");
            let mut job = JobDescription { qos: Some("qos_lafferty"), ..JobDescription::default() };
            set_field(&mut job, field, &asked);
            let r = rejection(judge_submit(&cfg, &job));
            let advice = r.message.split("Submit with ").nth(1).unwrap();
            let option = advice.strip_suffix(" instead.").unwrap();
            let tail = option.strip_prefix(field.gpu_option_prefix()).unwrap();
            let fixed = format!("gres{sep}gpu:{tail}");
            set_field(&mut job, field, &fixed);
            prop_assert!(changes(judge_submit(&cfg, &job)).is_empty());
        }
    }

    fn set_field<'a>(job: &mut JobDescription<'a>, field: TresField, value: &'a str) {
        match field {
            TresField::PerNode => job.tres_per_node = Some(value),
            TresField::PerJob => job.tres_per_job = Some(value),
            TresField::PerSocket => job.tres_per_socket = Some(value),
            TresField::PerTask => job.tres_per_task = Some(value),
        }
    }
}
