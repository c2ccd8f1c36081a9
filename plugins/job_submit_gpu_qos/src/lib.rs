//! `job_submit/gpu_qos`: the slurmctld job_submit plugin of gpushare.
//!
//! Loaded by slurmctld through `JobSubmitPlugins=gpu_qos` (the file is
//! installed as `job_submit_gpu_qos.so` in Slurm's PluginDir). slurmctld
//! calls `job_submit` for every new job and `job_modify` for every
//! `scontrol update`, with its own locks held: nothing here may block, sleep
//! or call back into slurmctld. The policy itself is `gpushare::qos::policy`;
//! this crate is the C ABI around it, and every export is a shim through
//! [`slurm_plugin::export!`], so a panic becomes an error code, never a crash.

use std::os::raw::{c_char, c_int, c_void};
use std::path::PathBuf;

use gpushare::qos::config::GpuQosConfig;
use gpushare::qos::metrics::Call;
use gpushare::qos::policy::{
    apply_exemptions, asks_untyped_gpu, foreign_throttle, judge_modify, judge_submit,
    limits_without_rule, may_be_foreign_throttle, Action, JobDescription, Requester, Resolved,
    Verdict,
};
use slurm_plugin::log;
use slurm_plugin::slurm_str::{opt_str, set_message};
use slurm_sys::{job_desc_msg_t, SLURM_ERROR, SLURM_SUCCESS};

mod assoc;
mod job_desc;
mod partitions;
pub mod policy_state;
mod read_back;
mod typed;

use job_desc::{apply, error_code, JobStrings};

slurm_plugin::plugin_identity!(
    name: "gpushare typed-GPU QOS policy",
    kind: "job_submit/gpu_qos",
);

const PLUGIN: &str = "job_submit/gpu_qos";
const OK: c_int = SLURM_SUCCESS as c_int;

/// The slurm.conf the host daemon read (None outside a daemon).
fn daemon_slurm_conf() -> Option<PathBuf> {
    // SAFETY: `slurm_conf` is the daemon's global configuration, filled
    // before any plugin is loaded and not freed while plugins run; we only
    // read the path pointer and copy the string it points to.
    let path = unsafe { (*std::ptr::addr_of!(slurm_sys::slurm_conf)).slurm_conf };
    // SAFETY: NULL or a NUL-terminated string owned by the daemon.
    unsafe { opt_str(path) }.map(|p| PathBuf::from(p.into_owned()))
}

/// The `ClusterName` of the daemon's slurm.conf (empty outside a daemon),
/// for the heartbeat of the metrics file.
fn daemon_cluster_name() -> String {
    // SAFETY: as for `daemon_slurm_conf`: the daemon's global
    // configuration, only the pointer read and the string copied.
    let name = unsafe { (*std::ptr::addr_of!(slurm_sys::slurm_conf)).cluster_name };
    // SAFETY: NULL or a NUL-terminated string owned by the daemon.
    unsafe { opt_str(name) }.map_or_else(String::new, |n| n.into_owned())
}

slurm_plugin::export! {
    /// Called once when slurmctld loads the plugin (and at each `scontrol
    /// reconfigure`); a non-zero return stops slurmctld, so a missing or
    /// invalid gpu_qos.conf does not make one (see `policy_state::start`).
    fn init() -> c_int, on_panic SLURM_ERROR => plugin_init;
    /// Called when slurmctld shuts down or reloads its plugins.
    fn fini() -> c_int, on_panic SLURM_ERROR => plugin_fini;
    /// Judges a new job. Same signature in every supported Slurm release.
    fn job_submit(job_desc: *mut job_desc_msg_t, submit_uid: u32, err_msg: *mut *mut c_char) -> c_int,
        on_panic SLURM_ERROR => submit;
    /// Judges an `scontrol update` of a job (22.05: no message slot, so the
    /// explanation goes to slurmctld's log only). `job_ptr` is slurmctld's
    /// private job record, never dereferenced here.
    #[cfg(not(slurm_23_02))]
    fn job_modify(job_desc: *mut job_desc_msg_t, job_ptr: *mut c_void, submit_uid: u32) -> c_int,
        on_panic SLURM_ERROR => modify_22_05;
    /// Judges an `scontrol update` of a job (23.02+: with a message slot).
    #[cfg(slurm_23_02)]
    fn job_modify(job_desc: *mut job_desc_msg_t, job_ptr: *mut c_void, submit_uid: u32, err_msg: *mut *mut c_char) -> c_int,
        on_panic SLURM_ERROR => modify;
}

/// Keeps this library mapped for the life of slurmctld (`RTLD_NODELETE`):
/// a thread left behind at `fini()` (a reload or a metrics write stuck on
/// a hung filesystem, see `policy_state`) must never return into code that
/// `dlclose` unmapped. Whether it could be pinned.
pub(crate) fn pin_library() -> bool {
    // SAFETY: Dl_info is plain data; all-zero is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let here = pin_library as *const c_void;
    // SAFETY: dladdr only reads the address and fills `info`.
    if unsafe { libc::dladdr(here, &mut info) } == 0 || info.dli_fname.is_null() {
        return false;
    }
    // SAFETY: a NUL-terminated path from dladdr; RTLD_NOLOAD only takes
    // another reference to the library already loaded, never loads one.
    // The reference is kept on purpose: it is what keeps the library.
    let handle = unsafe {
        libc::dlopen(
            info.dli_fname,
            libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
        )
    };
    !handle.is_null()
}

fn plugin_init() -> c_int {
    if !pin_library() {
        log::info(&format!(
            "{PLUGIN}: cannot pin the library in memory; a MetricsFile write stuck at \
             shutdown may crash slurmctld as it unloads plugins"
        ));
    }
    log::info(&format!(
        "{PLUGIN}: loaded (gpushare {}, built for Slurm {}){}",
        env!("CARGO_PKG_VERSION"),
        slurm_sys::SLURM_VERSION,
        if assoc::available() {
            ""
        } else {
            "; slurmctld's association manager not found: default QOS, default partition \
             and account limits cannot be judged"
        }
    ));
    let slurm_conf = daemon_slurm_conf();
    let path = policy_state::conf_path(slurm_conf.as_deref());
    match policy_state::start(&path, slurm_conf.as_deref(), daemon_cluster_name()) {
        // Only a thread that cannot be started fails the plugin.
        Ok(()) => OK,
        Err(e) => {
            log::error(&format!("{PLUGIN}: {e}"));
            SLURM_ERROR
        }
    }
}

fn plugin_fini() -> c_int {
    policy_state::stop();
    OK
}

/// What both entry points do with a verdict.
///
/// # Safety
/// As for [`submit`].
unsafe fn conclude(
    what: &str,
    verdict: Verdict,
    desc: &mut job_desc_msg_t,
    uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    match verdict {
        Verdict::Accept(changes) => {
            if let Some(e) = &changes.exemption {
                log::info(&format!(
                    "{PLUGIN}: {what} from uid {uid} accepted, exempt ({}), QOS {}; it would \
                     have been refused: {}",
                    e.reason.describe(),
                    if e.qos.is_empty() { "unknown" } else { &e.qos },
                    e.message.replace('\n', " ")
                ));
            }
            if let Some(given) = &changes.gpu_type_given {
                log::info(&format!(
                    "{PLUGIN}: {what} from uid {uid} accepted with GPU type {}: {}",
                    given.gpu_type,
                    given.message.replace('\n', " ")
                ));
            }
            for w in &changes.warnings {
                log::info(&format!(
                    "{PLUGIN}: {what} from uid {uid} accepted (Enforce=warn, QOS {}): {}",
                    if w.qos.is_empty() { "unknown" } else { &w.qos },
                    w.message.replace('\n', " ")
                ));
            }
            // SAFETY: forwarded from the caller.
            unsafe { apply(desc, err_msg, &changes) };
            if let Some(recheck) = changes.recheck_array_throttle {
                read_back::recheck(read_back::ReadBack::Throttle(recheck), daemon_slurm_conf());
            }
            if let Some(recheck) = changes.recheck_gpu_types {
                read_back::recheck(read_back::ReadBack::Types(recheck), daemon_slurm_conf());
            }
            OK
        }
        Verdict::Reject(r) => {
            let shown = gpushare::qos::policy::codes::coded(&r.message, r.kind.code());
            log::info(&format!(
                "{PLUGIN}: {what} from uid {uid} rejected: {}",
                shown.replace('\n', " ")
            ));
            // SAFETY: forwarded from the caller.
            unsafe { set_message(err_msg, &shown) };
            error_code(r.kind)
        }
    }
}

/// # Safety
/// Called by slurmctld only: `job_desc` is a live job description it owns and
/// `err_msg` NULL or a slot for a Slurm-allocated message.
unsafe fn submit(
    job_desc: *mut job_desc_msg_t,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    // SAFETY: slurmctld passes a valid, exclusively ours description.
    let Some(desc) = (unsafe { job_desc.as_mut() }) else {
        return SLURM_ERROR;
    };
    let Some(policy) = policy_state::policy() else {
        log::error(&format!("{PLUGIN}: job_submit before init"));
        return SLURM_ERROR;
    };
    // SAFETY: strings stay valid and unchanged during this call.
    let mut strings = unsafe { JobStrings::read(desc) };
    // A typed limit without a rule refuses only an untyped request: a job
    // asking for no GPU, or only typed ones, is not looked up for it.
    let untyped = asks_untyped_gpu(&strings.describe(desc, Resolved::default()));
    let needs = assoc::Needs {
        default_qos: policy.has_qos_rules() && !strings.names_qos(),
        default_partition: (untyped || policy.has_partition_rules()) && !strings.names_partition(),
        accounts: policy.has_association_rules(),
        typed_limits: untyped,
        anywhere: false,
    };
    let partition_qos = partitions::current();
    // SAFETY: slurmctld's job_submit, no association manager lock held.
    let resolution = unsafe { assoc::resolve(desc, needs, false, &partition_qos) };
    // SAFETY: the description `strings` was read from.
    let verdict = unsafe { judged(&mut strings, desc, &resolution, &policy, judge_submit) };
    let job = strings.describe(desc, resolution.view());
    let verdict = exempted(&policy, &job, Action::Submit, submit_uid, verdict);
    drop(strings);
    policy_state::decisions().record(Call::Submit, &verdict);
    // SAFETY: forwarded from slurmctld's contract above.
    unsafe { conclude("job", verdict, desc, submit_uid, err_msg) }
}

/// # Safety
/// As for [`submit`]; `job_ptr` is never dereferenced.
unsafe fn modify(
    job_desc: *mut job_desc_msg_t,
    _job_ptr: *mut c_void,
    uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    // SAFETY: slurmctld passes a valid, exclusively ours description.
    let Some(desc) = (unsafe { job_desc.as_mut() }) else {
        return SLURM_ERROR;
    };
    let Some(policy) = policy_state::policy() else {
        return SLURM_ERROR;
    };
    // SAFETY: strings stay valid and unchanged during this call.
    let mut strings = unsafe { JobStrings::read(desc) };
    // The landing QOS is unknown (none named, or a blank QOS=): whether
    // the database limits GPU types anywhere decides if it is protected.
    // It matters only to a blank QOS= or an untyped request.
    let qos_unseen = !strings.names_qos();
    let untyped = asks_untyped_gpu(&strings.describe(desc, Resolved::default()));
    let needs = assoc::Needs {
        default_qos: strings.qos_is_blank(),
        accounts: policy.has_association_rules(),
        typed_limits: true,
        anywhere: qos_unseen && (strings.qos_is_blank() || untyped) && policy.rules().is_empty(),
        ..assoc::Needs::default()
    };
    let partition_qos = partitions::current();
    // SAFETY: slurmctld's job_modify, no association manager lock held.
    let resolution = unsafe { assoc::resolve(desc, needs, true, &partition_qos) };
    // SAFETY: the description `strings` was read from.
    let verdict = unsafe { judged(&mut strings, desc, &resolution, &policy, judge_modify) };
    let job = strings.describe(desc, resolution.view());
    // slurmctld sets user_id to the job's owner just before job_modify
    // (`_update_job`, job_mgr.c: where the client left it unset, NO_VAL on
    // 22.05, SLURM_AUTH_NOBODY (99) from 23.02 to 26.05), or keeps the uid
    // an administrator's `scontrol -u` names, which is then also `uid`.
    let owner = (desc.user_id != slurm_sys::NO_VAL).then_some(desc.user_id);
    let verdict = exempted(&policy, &job, Action::Update { owner }, uid, verdict);
    drop(strings);
    policy_state::decisions().record(Call::Modify, &verdict);
    // SAFETY: forwarded from slurmctld's contract above.
    unsafe { conclude("update", verdict, desc, uid, err_msg) }
}

/// `judge`'s verdict on the job, in the user's own spelling where it has
/// words for them: only then are their own words read for the option they
/// typed ([`JobStrings::learn_spelling`]) and the job judged again with
/// them (the decision is the same; its words quote their spelling). A job
/// accepted silently costs no read of its script.
///
/// # Safety
/// `desc` is the description `strings` was read from, as for
/// [`JobStrings::read`].
unsafe fn judged<'a>(
    strings: &mut JobStrings<'a>,
    desc: &'a job_desc_msg_t,
    resolution: &assoc::Resolution,
    policy: &GpuQosConfig,
    judge: fn(&GpuQosConfig, &JobDescription<'_>) -> Verdict,
) -> Verdict {
    let verdict = {
        let job = strings.describe(desc, resolution.view());
        log_missing_rules(policy, &job);
        judge(policy, &job)
    };
    let has_words = match &verdict {
        Verdict::Reject(_) => true,
        Verdict::Accept(c) => c.user_warning.is_some() || !c.warnings.is_empty(),
    };
    // SAFETY: forwarded from the caller.
    if has_words && unsafe { strings.learn_spelling(desc) } {
        judge(policy, &strings.describe(desc, resolution.view()))
    } else {
        verdict
    }
}

/// The verdict once `ExemptUsers=`/`ExemptAdmins=` are applied: the
/// requester is looked up only for a refusal where the file exempts
/// anyone, and for an update whose array throttle would be set back (an
/// operator's stands).
fn exempted(
    policy: &GpuQosConfig,
    job: &JobDescription<'_>,
    action: Action,
    uid: u32,
    verdict: Verdict,
) -> Verdict {
    let foreign = may_be_foreign_throttle(job, action, uid);
    let look = match &verdict {
        Verdict::Reject(_) => policy.has_exemptions(),
        Verdict::Accept(c) => {
            c.recheck_array_throttle.is_some()
                || (c.recheck_gpu_types.is_some() && policy.has_exemptions())
        }
    };
    if !look && !foreign {
        return verdict;
    }
    // SAFETY: from slurmctld's job_submit/job_modify, no manager lock held.
    let who = unsafe { assoc::requester(uid) };
    // root and SlurmUser are operators whatever the database says, as
    // Slurm's own validate_operator() has it.
    // SAFETY: slurmctld's configuration, filled before plugins load.
    let slurm_user = unsafe { (*std::ptr::addr_of!(slurm_sys::slurm_conf)).slurm_user_id };
    let requester = Requester {
        uid,
        name: who.name.as_deref(),
        operator: who.operator || uid == 0 || uid == slurm_user,
        coordinator: who.coordinator,
    };
    if let Some(refusal) = foreign_throttle(job, action, &requester) {
        log::error(&format!(
            "{PLUGIN}: uid {uid} ({}) set ArrayTaskThrottle={} on {} of another user: \
             Slurm 22.05 applies it before checking who asks; refused",
            requester.name.unwrap_or("no user record"),
            job.array_inx.unwrap_or_default().escape_debug(),
            job.job_id_for_messages
                .map_or_else(|| "a job".to_owned(), |id| format!("job {id}")),
        ));
        return Verdict::Reject(refusal);
    }
    apply_exemptions(policy, job, action, &requester, verdict)
}

/// # Safety
/// As for [`modify`], on 22.05 (no message slot).
#[cfg(not(slurm_23_02))]
unsafe fn modify_22_05(job_desc: *mut job_desc_msg_t, job_ptr: *mut c_void, uid: u32) -> c_int {
    // SAFETY: forwarded; a NULL message slot is allowed.
    unsafe { modify(job_desc, job_ptr, uid, std::ptr::null_mut()) }
}

/// Logs, once per level while slurmctld runs, a typed limit of the
/// database that `gpu_qos.conf` has no rule for, with the line to add.
fn log_missing_rules(policy: &gpushare::qos::config::GpuQosConfig, job: &JobDescription<'_>) {
    use std::collections::HashSet;
    use std::sync::{Mutex, PoisonError};
    static LOGGED: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    for limit in limits_without_rule(policy, job) {
        let line = limit.level.rule_line(&limit.types);
        let mut logged = LOGGED.lock().unwrap_or_else(PoisonError::into_inner);
        if logged.get_or_insert_with(HashSet::new).insert(line.clone()) {
            log::info(&format!(
                "{PLUGIN}: {} has a GPU limit by type in the accounting database ({}) but no \
                 rule in gpu_qos.conf: untyped GPU requests under it are refused all the same; \
                 add `{line}` (gpu-qos generate writes it, gpu-qos check reports it)",
                limit.level.describe(),
                limit.types.join(", ")
            ));
        }
    }
}
