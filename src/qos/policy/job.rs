//! What the plugin sees of a job: the fields its client sent, and what
//! slurmctld resolved for it.

use crate::qos::gres::{PerNodeSpelling, TresField};

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
    /// The most nodes the job may get: equal to `min_nodes` for a fixed
    /// node count (`-N 2`), which lets Slurm count its tasks itself.
    pub max_nodes: Option<u32>,
    pub num_tasks: Option<u32>,
    /// `--ntasks-per-gpu` (`--ntasks-per-tres`): with no GPU request,
    /// slurmctld adds untyped GPUs itself, one per this many tasks, after
    /// `job_submit` ran (`gres_job_state_validate`: "For now, only
    /// generate type-less GPUs", every release 22.05 to 26.05).
    pub ntasks_per_gpu: Option<u16>,
    pub sockets_per_node: Option<u16>,
    /// `--ntasks-per-node`.
    pub ntasks_per_node: Option<u16>,
    /// `-c`: CPUs per task.
    pub cpus_per_task: Option<u16>,
    /// `--mincpus`: CPUs per node.
    pub pn_min_cpus: Option<u16>,
    /// The job's CPUs as its client counted them (`-n` × `-c`).
    pub min_cpus: Option<u32>,
    /// `--mem` or `--mem-per-cpu`.
    pub memory: Option<Memory>,
    /// `--cpus-per-gpu` as sent (`gres/gpu:8`; `cpus_per_tres`).
    pub cpus_per_tres: Option<&'a str>,
    /// `--mem-per-gpu` as sent (`gres/gpu:4096`, MB; `mem_per_tres`).
    pub mem_per_tres: Option<&'a str>,
    /// `--exclusive`: every CPU and all the memory of its nodes.
    pub whole_node: bool,
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
    /// An update's job as it names it (`job_id_str`: `123`, `123_4`,
    /// `123_[0-9]`).
    pub job_id_str: Option<&'a str>,
    /// One partition name or a comma list, as sent.
    pub partition: Option<&'a str>,
    /// Which option the user typed for the GPUs of `tres_per_node`
    /// (`--gres` or `--gpus-per-node`, which Slurm hands over alike), so
    /// that messages quote it and suggest the same one.
    pub per_node_spelling: PerNodeSpelling,
    /// Whether this Slurm's clients write GRES entries `gres/gpu:...`
    /// (23.11 and later) rather than `gres:gpu:...`: how a field gpushare
    /// writes is spelled.
    pub gres_slash: bool,
    /// What slurmctld resolves for the job beyond what the client sent
    /// (the plugin reads it from slurmctld's association manager, and only
    /// where a rule needs it).
    pub resolved: Resolved<'a>,
}

/// The memory a job asks for, in MB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    /// `--mem` (0: all the memory of each node).
    PerNode(u64),
    /// `--mem-per-cpu`.
    PerCpu(u64),
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
    /// The typed GPU limits the accounting database holds at the levels
    /// that cover the job (for an update: the levels it moves the job
    /// to), as slurmctld's association manager has them. A level that
    /// `gpu_qos.conf` has a rule for is judged by its rule instead.
    pub typed_limits: &'a [TypedLimit],
    /// Whether any QOS or association of the database holds a typed GPU
    /// limit: an update whose landing QOS is unknown is then judged as
    /// if it had a rule.
    pub typed_limits_anywhere: bool,
}

/// A typed GPU limit (`gres/gpu:TYPE` in any `GrpTRES`, `MaxTRES*` or
/// minutes limit) at one level of the accounting database. Slurm counts
/// such a limit only against requests that name the type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypedLimit {
    pub level: LimitLevel,
    /// The GPU types the limit names, in the database's order.
    pub types: Vec<String>,
}

/// Where a [`TypedLimit`] is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitLevel {
    /// A QOS the job names or, naming none, falls back to.
    Qos(String),
    /// The QOS of a partition the job may run in.
    Partition { partition: String, qos: String },
    /// The job's account or one of its parents.
    Account(String),
    /// The job's own user association (`sacctmgr modify user alice
    /// account=lab set GrpTRES=...`), or its user+partition association.
    User {
        user: String,
        account: String,
        partition: Option<String>,
    },
}

impl LimitLevel {
    /// How the level is named in the admin's log line.
    pub fn describe(&self) -> String {
        match self {
            LimitLevel::Qos(q) => format!("QOS {q}"),
            LimitLevel::Partition { partition, qos } => {
                format!("partition {partition} (its QOS {qos})")
            }
            LimitLevel::Account(a) => format!("account {a}"),
            LimitLevel::User {
                user,
                account,
                partition,
            } => match partition {
                Some(p) => format!("user {user}'s association (account {account}, partition {p})"),
                None => format!("user {user}'s association (account {account})"),
            },
        }
    }

    /// The `gpu_qos.conf` line that would cover it.
    pub fn rule_line(&self, types: &[String]) -> String {
        let types = types.join(",");
        match self {
            LimitLevel::Qos(q) => format!("QOS={q} GPUTypes={types}"),
            LimitLevel::Partition { partition, .. } => {
                format!("Partition={partition} GPUTypes={types}")
            }
            LimitLevel::Account(a) => format!("Account={a} GPUTypes={types}"),
            LimitLevel::User { user, account, .. } => {
                format!("Account={account} User={user} GPUTypes={types}")
            }
        }
    }
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

    pub(super) fn qos_names(&self) -> impl Iterator<Item = &'a str> + Clone {
        comma_items(self.qos)
    }

    /// The QOS the job runs under as far as the plugin sees it, for the
    /// metrics: the one it names, else its default; empty when neither
    /// is known.
    pub(super) fn qos_label(&self) -> String {
        self.qos_names()
            .next()
            .or(self.resolved.default_qos.first().map(String::as_str))
            .unwrap_or_default()
            .to_owned()
    }

    /// `QOS=` with nothing in it: in an update, a move to the default QOS.
    pub(super) fn qos_is_blank(&self) -> bool {
        self.qos.is_some() && self.qos_names().next().is_none()
    }

    pub(super) fn reservation_names(&self) -> impl Iterator<Item = &'a str> + Clone {
        comma_items(self.reservation)
    }

    /// The partitions the job may run in: those it names, else the default.
    pub(super) fn partitions(&self) -> impl Iterator<Item = &'a str> + Clone {
        let named = comma_items(self.partition);
        let default = self
            .partition
            .is_none_or(|p| p.trim().is_empty())
            .then_some(self.resolved.default_partition)
            .flatten();
        named.chain(default)
    }
}

/// Every value of `key=` in the words of a job's record (`scontrol -o
/// show job`: a QOS, a partition list, a count), each word Slurm's or a
/// user's alike.
pub(super) fn record_values<'a>(
    show_job: &'a str,
    key: &'a str,
) -> impl Iterator<Item = &'a str> + 'a {
    show_job
        .split_whitespace()
        .filter_map(move |w| w.strip_prefix(key)?.strip_prefix('='))
}

fn comma_items(list: Option<&str>) -> impl Iterator<Item = &str> + Clone {
    list.unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
}
