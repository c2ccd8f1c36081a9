//! Between Slurm's `job_desc_msg_t` and the core's plain types.

use std::borrow::Cow;
use std::os::raw::{c_char, c_int};

use gpushare::qos::gres::{tres_entries, PerNodeSpelling, TresField};
use gpushare::qos::policy::{JobChanges, JobDescription, Memory, RejectionKind, Resolved};
use gpushare::qos::submit_line::per_node_spelling;
use gpushare::shared::spank_env;
use slurm_plugin::slurm_str::{opt_str, opt_str_head, remove_env, set_env, set_message, xstrdup};
use slurm_sys::{
    job_desc_msg_t, JOB_SHARED_NONE, JOB_SHARED_USER, MEM_PER_CPU, NO_VAL, NO_VAL16, NO_VAL64,
    OPEN_MODE_APPEND,
};

/// The string fields of a job description, read once (lossily if not UTF-8).
#[derive(Debug, Default)]
pub struct JobStrings<'a> {
    qos: Option<Cow<'a, str>>,
    tres_per_node: Option<Cow<'a, str>>,
    tres_per_job: Option<Cow<'a, str>>,
    tres_per_socket: Option<Cow<'a, str>>,
    tres_per_task: Option<Cow<'a, str>>,
    cpus_per_tres: Option<Cow<'a, str>>,
    mem_per_tres: Option<Cow<'a, str>>,
    reservation: Option<Cow<'a, str>>,
    array_inx: Option<Cow<'a, str>>,
    job_id_str: Option<Cow<'a, str>>,
    partition: Option<Cow<'a, str>>,
    per_node_spelling: PerNodeSpelling,
}

/// How much of a batch script is read for its `#SBATCH` lines: they come
/// before its first command, so far less than this.
const SCRIPT_HEAD: usize = 64 * 1024;

impl<'a> JobStrings<'a> {
    /// # Safety
    /// `desc`'s string fields must be NULL or valid NUL-terminated strings
    /// that stay unchanged while the result lives (true during a job_submit
    /// or job_modify call: slurmctld owns the message and holds its locks).
    pub unsafe fn read(desc: &'a job_desc_msg_t) -> Self {
        // SAFETY: forwarded from the caller's contract, field by field.
        unsafe {
            Self {
                qos: opt_str(desc.qos),
                tres_per_node: opt_str(desc.tres_per_node),
                tres_per_job: opt_str(desc.tres_per_job),
                tres_per_socket: opt_str(desc.tres_per_socket),
                tres_per_task: opt_str(desc.tres_per_task),
                cpus_per_tres: opt_str(desc.cpus_per_tres),
                mem_per_tres: opt_str(desc.mem_per_tres),
                reservation: opt_str(desc.reservation),
                array_inx: opt_str(desc.array_inx),
                job_id_str: opt_str(desc.job_id_str),
                partition: opt_str(desc.partition),
                // Read only for a verdict that has words to say
                // ([`Self::learn_spelling`]).
                per_node_spelling: PerNodeSpelling::Unknown,
            }
        }
    }

    /// Learns which option asked for the per-node GPUs (Slurm hands
    /// `--gres` and `--gpus-per-node` over alike) from what the user typed:
    /// the submit line and the script's `#SBATCH` lines. Only the words of
    /// a refusal or a warning quote it, so it is read for those alone, never
    /// for a job accepted silently. Whether it learnt anything: `false`
    /// where the job asks for no per-node GPU or it is known already.
    ///
    /// # Safety
    /// As for [`Self::read`], with the same `desc`.
    pub unsafe fn learn_spelling(&mut self, desc: &'a job_desc_msg_t) -> bool {
        let asks_gpu = |text: &str| tres_entries(text).any(|e| e.is_ok_and(|r| r.is_gpu()));
        if self.per_node_spelling != PerNodeSpelling::Unknown
            || !self.tres_per_node.as_deref().is_some_and(asks_gpu)
        {
            return false;
        }
        // SAFETY: forwarded from the caller's contract.
        let (line, script) = unsafe {
            (
                opt_str(desc.submit_line),
                opt_str_head(desc.script, SCRIPT_HEAD),
            )
        };
        self.per_node_spelling = per_node_spelling(line.as_deref(), script.as_deref());
        self.per_node_spelling != PerNodeSpelling::Unknown
    }

    /// Whether the client named a QOS.
    pub fn names_qos(&self) -> bool {
        self.qos.as_deref().is_some_and(|q| !q.trim().is_empty())
    }

    /// Whether the update says `QOS=` with nothing in it (a move to the
    /// default QOS).
    pub fn qos_is_blank(&self) -> bool {
        self.qos
            .as_deref()
            .is_some_and(|q| q.split(',').all(|x| x.trim().is_empty()))
    }

    /// Whether the client named a partition.
    pub fn names_partition(&self) -> bool {
        self.partition
            .as_deref()
            .is_some_and(|p| !p.trim().is_empty())
    }

    /// The core's view of the job, with what slurmctld resolved for it.
    pub fn describe<'s>(
        &'s self,
        desc: &job_desc_msg_t,
        resolved: Resolved<'s>,
    ) -> JobDescription<'s> {
        JobDescription {
            qos: self.qos.as_deref(),
            tres_per_node: self.tres_per_node.as_deref(),
            tres_per_job: self.tres_per_job.as_deref(),
            tres_per_socket: self.tres_per_socket.as_deref(),
            tres_per_task: self.tres_per_task.as_deref(),
            min_nodes: set_u32(desc.min_nodes),
            max_nodes: set_u32(desc.max_nodes),
            num_tasks: set_u32(desc.num_tasks),
            // NO_VAL16 unset; 0 as Slurm's own "nothing" (a requeue's).
            ntasks_per_gpu: (desc.ntasks_per_tres != NO_VAL16 && desc.ntasks_per_tres != 0)
                .then_some(desc.ntasks_per_tres),
            sockets_per_node: (desc.sockets_per_node != NO_VAL16).then_some(desc.sockets_per_node),
            ntasks_per_node: set_u16(desc.ntasks_per_node),
            cpus_per_task: set_u16(desc.cpus_per_task),
            pn_min_cpus: set_u16(desc.pn_min_cpus),
            min_cpus: set_u32(desc.min_cpus),
            memory: memory(desc.pn_min_memory),
            cpus_per_tres: self.cpus_per_tres.as_deref(),
            mem_per_tres: self.mem_per_tres.as_deref(),
            whole_node: u32::from(desc.shared) == JOB_SHARED_NONE,
            reservation: self.reservation.as_deref(),
            requeue: match desc.requeue {
                NO_VAL16 => None,
                0 => Some(false),
                _ => Some(true),
            },
            open_mode_set: desc.open_mode != 0,
            exclusive_user: u32::from(desc.shared) == JOB_SHARED_USER,
            array_inx: self.array_inx.as_deref(),
            // An update names its job in job_id_str ("123", or "123_4" for
            // an array task); job_id stays unset.
            job_id_for_messages: set_u32(requested_job_id(desc)).or_else(|| {
                self.job_id_str
                    .as_deref()
                    .and_then(|s| s.trim().parse().ok())
            }),
            job_id_str: self.job_id_str.as_deref(),
            partition: self.partition.as_deref(),
            per_node_spelling: self.per_node_spelling,
            gres_slash: cfg!(slurm_23_11),
            resolved,
        }
    }
}

/// The job id a submission asks for (`sbatch --jobid`, or an update's id).
#[cfg(not(slurm_25_11))]
fn requested_job_id(desc: &job_desc_msg_t) -> u32 {
    desc.job_id
}

/// The job id a submission asks for: from 25.11 it lives in `step_id`.
#[cfg(slurm_25_11)]
fn requested_job_id(desc: &job_desc_msg_t) -> u32 {
    desc.step_id.job_id
}

fn set_u32(v: u32) -> Option<u32> {
    (v != NO_VAL && v != 0).then_some(v)
}

fn set_u16(v: u16) -> Option<u16> {
    (v != NO_VAL16 && v != 0).then_some(v)
}

/// `pn_min_memory`: MB per node, or per CPU with `MEM_PER_CPU` set;
/// `NO_VAL64` unset. `--mem=0` (all of the node's memory) stays 0.
fn memory(v: u64) -> Option<Memory> {
    // slurm.h's 0x8000000000000000, which bindgen types as i64.
    const PER_CPU: u64 = MEM_PER_CPU.cast_unsigned();
    if v == NO_VAL64 {
        return None;
    }
    Some(if v & PER_CPU != 0 {
        Memory::PerCpu(v & !PER_CPU)
    } else {
        Memory::PerNode(v)
    })
}

/// Applies an accepted job's changes to the description slurmctld will use.
///
/// # Safety
/// `desc` must be slurmctld's live job description (its pointer fields NULL
/// or Slurm-allocated) and `err_msg` NULL or its message slot; no one else
/// may touch either during the call.
pub unsafe fn apply(desc: &mut job_desc_msg_t, err_msg: *mut *mut c_char, changes: &JobChanges) {
    if changes.set_requeue {
        desc.requeue = 1;
    }
    if changes.set_open_mode_append {
        desc.open_mode = OPEN_MODE_APPEND as u8;
    }
    if changes.clear_exclusive_user {
        // NO_VAL16: "the system default", as if the option was never given.
        desc.shared = NO_VAL16;
    }
    // An untyped GPU request given its rule's default type: each field
    // that changes, written whole.
    for (field, text) in changes.gpu_type_given.iter().flat_map(|g| &g.fields) {
        let slot = match field {
            TresField::PerNode => &mut desc.tres_per_node,
            TresField::PerJob => &mut desc.tres_per_job,
            TresField::PerSocket => &mut desc.tres_per_socket,
            TresField::PerTask => &mut desc.tres_per_task,
        };
        // SAFETY: each tres_per_* is NULL or Slurm-allocated; xfree NULLs it.
        unsafe { slurm_sys::slurm_xfree(std::ptr::addr_of_mut!(*slot).cast()) };
        *slot = xstrdup(text);
    }
    if let Some(inx) = &changes.array_inx {
        // SAFETY: array_inx is NULL or Slurm-allocated; xfree NULLs it.
        unsafe { slurm_sys::slurm_xfree(std::ptr::addr_of_mut!(desc.array_inx).cast()) };
        desc.array_inx = xstrdup(inx);
    }
    // Whatever a client sent under gpushare's names is not ours to believe:
    // every such entry goes (duplicates too), then ours are written.
    // SAFETY: spank_job_env/size describe a Slurm-allocated array (or
    // NULL/0), exclusively ours during the call (caller's contract).
    let removed = unsafe {
        remove_env(
            std::ptr::addr_of_mut!(desc.spank_job_env),
            std::ptr::addr_of_mut!(desc.spank_job_env_size),
            spank_env::is_owned_entry,
        )
    };
    if removed > 0 {
        slurm_plugin::log::info(&format!(
            "job_submit/gpu_qos: removed {removed} client-sent GPUSHARE_* SPANK variable(s)"
        ));
    }
    for var in &changes.spank_env {
        // SAFETY: spank_job_env/size describe a Slurm-allocated array (or
        // NULL/0), exclusively ours during the call (caller's contract).
        unsafe {
            set_env(
                std::ptr::addr_of_mut!(desc.spank_job_env),
                std::ptr::addr_of_mut!(desc.spank_job_env_size),
                var.name,
                &var.value,
            );
        }
    }
    // Slurm hands a message set on an accepted job to the client, which
    // prints it on stderr (sbatch: `job_submit_user_msg`).
    if let Some(w) = changes.user_message() {
        // SAFETY: err_msg contract forwarded from the caller.
        unsafe { set_message(err_msg, &w) };
    }
}

/// The Slurm error code a rejection returns. Never EAGAIN-like codes:
/// clients retry those.
pub fn error_code(kind: RejectionKind) -> c_int {
    let code = match kind {
        RejectionKind::OverLimit | RejectionKind::OverTypeCap => {
            slurm_sys::ESLURM_ACCOUNTING_POLICY
        }
        RejectionKind::UntypedGpu
        | RejectionKind::TypeNotPermitted
        | RejectionKind::NoGpuRequest
        | RejectionKind::SharedOutsideReservation
        | RejectionKind::ShareTooLarge
        | RejectionKind::UpdateNeedsTypedGpu
        | RejectionKind::BadRequest
        | RejectionKind::UnlistedTypedLimit => slurm_sys::ESLURM_INVALID_GRES,
        // What Slurm itself answers another user's update.
        RejectionKind::ForeignArrayThrottle => slurm_sys::ESLURM_USER_ID_MISSING,
    };
    code as c_int
}
