//! SPANK `gpu_mps`: gives each task of a job holding an MPS share its GPU.
//!
//! Loaded by slurmstepd through `plugstack.conf`
//! (`required /usr/lib/.../spank_gpu_mps.so [conf=/etc/slurm/gpu_mps.conf]`).
//! The GPU was chosen by `gpu-mps-prolog` (recorded in the node's ledger,
//! which only the prolog writes, from what Slurm put in its environment);
//! here, in the remote context only:
//! - `slurm_spank_init` reads the placement once per step (or the prolog's
//!   refusal, which fails the job with its text: beside the ledger, or
//!   beside the node's ledger pointer where no configuration could be read);
//! - `slurm_spank_task_init` (in the task, before exec) replaces Slurm's
//!   GPU environment with the share's, and fails a task whose job namespace
//!   hides its GPU's MPS pipes (`job_container/tmpfs` over `StateDir`);
//! - `slurm_spank_task_post_fork` (slurmstepd, root, after Slurm wrote its
//!   device rules) confines the task to the chosen GPU's device file. It only
//!   narrows: the chosen GPU is allowed, every other GPU denied; a job without
//!   a share is left as Slurm made it. There too it starts the step's guard
//!   (`step_guard`), which ends the step's MPS clients through the daemon
//!   before Slurm's SIGKILL of a task that outlived SIGTERM;
//! - `slurm_spank_task_exit` (slurmstepd, root) stops the guard after the
//!   step's last task and ends the clients it left (`step_end`).
//!
//! No `init()` is exported: the SPANK loader would run it in every context.
//! Every export is made by [`slurm_plugin::export!`]; every callback is a
//! plain `fn -> Result<(), SpankError>` mapped to a SPANK code in one place
//! ([`finish`]).

use std::ffi::CString;
use std::fmt;
use std::os::raw::{c_char, c_int};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use gpushare::mps::config::{
    self as mps_conf, missing_conf_refusal, no_gpus_refusal, GpuMpsConfig,
};
use gpushare::mps::devices::{confine, job_levels, task_devices_dir, CharDevice, DEVICES_ROOT};
use gpushare::mps::in_force::{self, Role, NODE_RECORDS_DIR};
use gpushare::mps::ledger::Ledger;
use gpushare::mps::node::{
    claim_banner, count_mismatch, gpu_devices, node_ledger, node_name, private_record, requeue,
    task_plan, unconfigured_refusal, unreachable_pipes, TaskPlan,
};
use gpushare::mps::private::StepDaemon;
use gpushare::mps::programs::program;
use slurm_plugin::log;
use slurm_plugin::slurm_str::opt_str;
use slurm_sys::{
    spank_err_t, spank_t, ESPANK_ENV_NOEXIST, ESPANK_NOSPACE, ESPANK_SUCCESS, S_CTX_ALLOCATOR,
    S_CTX_LOCAL, S_CTX_REMOTE, S_CTX_SLURMD, S_JOB_ID, S_TASK_PID,
};

slurm_plugin::plugin_identity!(name: "gpu_mps", kind: "spank");

/// Why a callback fails; `Display` is the line for slurmstepd's log.
#[derive(Debug)]
enum SpankError {
    /// A SPANK call failed with this code.
    Spank {
        call: &'static str,
        code: spank_err_t,
    },
    /// Anything else, said in words.
    Failed(String),
}

impl fmt::Display for SpankError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpankError::Spank { call, code } => {
                // SAFETY: spank_strerror returns a static string for any code.
                let text = unsafe { opt_str(slurm_sys::spank_strerror(*code)) };
                write!(
                    f,
                    "{call}: {} (SPANK error {code})",
                    text.as_deref().unwrap_or("unknown error")
                )
            }
            SpankError::Failed(text) => f.write_str(text),
        }
    }
}

type SpankResult = Result<(), SpankError>;

/// The one mapping from a callback's result to what slurmstepd gets.
fn finish(callback: &str, result: SpankResult) -> c_int {
    match result {
        Ok(()) => 0,
        Err(e) => {
            log::error(&format!("gpu_mps: {callback}: {e}"));
            -1
        }
    }
}

fn spank_call(call: &'static str, code: spank_err_t) -> SpankResult {
    if code == ESPANK_SUCCESS {
        Ok(())
    } else {
        Err(SpankError::Spank { call, code })
    }
}

mod private;
mod step_end;
mod step_guard;

/// What this slurmstepd's step does with its tasks.
#[derive(Debug, Clone)]
enum StepPlan {
    /// The job holds no share here: leave it alone.
    Untouched,
    Share(TaskPlan),
    /// `--gpu-mps=private`: the step's own MPS daemon.
    Private(PrivateStep),
    /// The job must not run: each task prints this and exits 1. Failing
    /// earlier, in slurm_spank_init, would make slurmctld drain the node
    /// ("Plugin initialization failed") for what is a job's problem.
    Refused(String),
}

/// A step's own MPS daemon, as the prolog's record allows it.
#[derive(Debug, Clone)]
struct PrivateStep {
    job: u32,
    /// The MPS control program (`MPSControl=`), found once for the step.
    program: Option<PathBuf>,
    daemon: StepDaemon,
    threads: Option<u32>,
    /// Local tasks: the daemon stops when the last has exited.
    tasks: u32,
}

static PLAN: Mutex<StepPlan> = Mutex::new(StepPlan::Untouched);

/// The job of a step that has no record of its own MPS daemon here, and
/// the node's state directory: it is refused should the job turn out to
/// have asked for one (post_opt).
static UNRECORDED: Mutex<Option<(u32, PathBuf)>> = Mutex::new(None);

fn plan() -> StepPlan {
    PLAN.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

fn remote(sp: spank_t) -> bool {
    // SAFETY: sp is the handle slurmstepd passed to the callback.
    unsafe { slurm_sys::spank_remote(sp) == 1 && slurm_sys::spank_context() == S_CTX_REMOTE }
}

fn job_id(sp: spank_t) -> Result<u32, SpankError> {
    let mut id: u32 = 0;
    // SAFETY: S_JOB_ID writes a uint32_t through the pointer we pass.
    let rc = unsafe { slurm_sys::spank_get_item(sp, S_JOB_ID, &mut id as *mut u32) };
    spank_call("spank_get_item(S_JOB_ID)", rc).map(|()| id)
}

/// Slurm's step id of the extern step (`SLURM_EXTERN_CONT`, the same on
/// every release): it runs no task, so it prints nothing.
const EXTERN_STEP: u32 = 0xffff_fffc;

fn item_u32(
    sp: spank_t,
    item: slurm_sys::spank_item,
    name: &'static str,
) -> Result<u32, SpankError> {
    let mut value: u32 = 0;
    // SAFETY: S_JOB_STEPID and S_TASK_ID write a uint32_t through the pointer.
    let rc = unsafe { slurm_sys::spank_get_item(sp, item, &mut value as *mut u32) };
    spank_call(name, rc).map(|()| value)
}

fn task_pid(sp: spank_t) -> Result<libc::pid_t, SpankError> {
    let mut pid: libc::pid_t = 0;
    // SAFETY: S_TASK_PID writes a pid_t through the pointer we pass.
    let rc = unsafe { slurm_sys::spank_get_item(sp, S_TASK_PID, &mut pid as *mut libc::pid_t) };
    spank_call("spank_get_item(S_TASK_PID)", rc).map(|()| pid)
}

/// The job's variable `name`: `Ok(None)` when unset. The buffer grows while
/// Slurm says it is too small, so a long value is never read as unset.
fn getenv(sp: spank_t, name: &str) -> Result<Option<String>, SpankError> {
    let c_name = CString::new(name).map_err(|_| SpankError::Failed(format!("{name}: NUL")))?;
    let mut len: usize = 256;
    loop {
        let mut buf = vec![0 as c_char; len];
        let size = c_int::try_from(len).unwrap_or(c_int::MAX);
        // SAFETY: buf is writable for `size` bytes; spank_getenv NUL-terminates.
        let rc = unsafe { slurm_sys::spank_getenv(sp, c_name.as_ptr(), buf.as_mut_ptr(), size) };
        match rc {
            ESPANK_SUCCESS => {
                // SAFETY: on success buf holds a NUL-terminated string.
                return Ok(unsafe { opt_str(buf.as_ptr()) }.map(|s| s.into_owned()));
            }
            ESPANK_ENV_NOEXIST => return Ok(None),
            ESPANK_NOSPACE if len < (1 << 24) => len *= 16,
            code => {
                return Err(SpankError::Spank {
                    call: "spank_getenv",
                    code,
                })
            }
        }
    }
}

/// Sets `name` in the task's environment; where `overwrite` is false, a
/// value already there is kept.
fn setenv(sp: spank_t, name: &str, value: &str, overwrite: bool) -> SpankResult {
    let (Ok(n), Ok(v)) = (CString::new(name), CString::new(value)) else {
        return Err(SpankError::Failed(format!("{name}: value contains NUL")));
    };
    // SAFETY: valid C strings; overwrite = 1 replaces what Slurm set.
    let rc = unsafe { slurm_sys::spank_setenv(sp, n.as_ptr(), v.as_ptr(), c_int::from(overwrite)) };
    if !overwrite && rc == slurm_sys::ESPANK_ENV_EXISTS {
        return Ok(());
    }
    spank_call("spank_setenv", rc)
}

/// Where the node's gpu_mps.conf is: `conf=PATH` from the plugstack line,
/// else where [`mps_conf::locate`] finds it.
fn conf_path(args: &[String]) -> Result<PathBuf, Vec<PathBuf>> {
    let explicit = args
        .iter()
        .find_map(|a| a.strip_prefix("conf=").map(PathBuf::from));
    mps_conf::locate(explicit.as_deref())
}

/// # Safety
/// `av` must hold `ac` valid C strings (slurmstepd's plugin arguments).
unsafe fn args(ac: c_int, av: *mut *mut c_char) -> Vec<String> {
    if av.is_null() {
        return Vec::new();
    }
    (0..usize::try_from(ac).unwrap_or(0))
        // SAFETY: i < ac entries are valid (caller's contract).
        .filter_map(|i| unsafe { opt_str(*av.add(i)) }.map(|s| s.into_owned()))
        .collect()
}

fn init(sp: spank_t, args: &[String]) -> SpankResult {
    // SAFETY: spank_context has no preconditions.
    if unsafe { slurm_sys::spank_context() } == S_CTX_SLURMD {
        // slurmd, as it starts: which gpushare and for which Slurm.
        log::info(&format!(
            "gpu_mps: loaded (gpushare {}, built for Slurm {})",
            env!("CARGO_PKG_VERSION"),
            slurm_sys::SLURM_VERSION
        ));
        return Ok(());
    }
    // The options, wherever a user may type them and in slurmstepd.
    // SAFETY: spank_context has no preconditions.
    let context = unsafe { slurm_sys::spank_context() };
    // A name another plugin took leaves the options out, never the
    // command or the step (a failed init of a required plugin would fail
    // every job, and drain the node).
    if [S_CTX_LOCAL, S_CTX_ALLOCATOR, S_CTX_REMOTE].contains(&context) {
        if let Err(e) = private::register(sp) {
            log::error(&format!("gpu_mps: --gpu-mps options not offered: {e}"));
        }
    }
    if !remote(sp) {
        return Ok(());
    }
    let job = job_id(sp)?;
    let in_job = |e: SpankError| SpankError::Failed(format!("job {job}: {e}"));
    // SAFETY: geteuid has no preconditions (slurmstepd runs as root).
    let euid = unsafe { libc::geteuid() };
    let cfg = match conf_path(args) {
        // The configuration in force: never a half-written file (the last
        // good one the prolog recorded serves the shares it placed).
        Ok(path) if path.exists() => {
            // Refused by the prolog for want of any configuration: its words,
            // even where the file reads whole now (the ledger holds no share).
            let records = Path::new(NODE_RECORDS_DIR);
            if let Some(text) = unconfigured_refusal(records, &path, euid, job) {
                let text = text.trim().to_owned();
                log::error(&text);
                *PLAN.lock().unwrap_or_else(PoisonError::into_inner) = StepPlan::Refused(text);
                return Ok(());
            }
            // This node as slurmd names it: slurmstepd has it in its own
            // environment (`setenvf(NULL, "SLURMD_NODENAME", ...)` in
            // slurmstepd.c, 22.05 to 26.05), for the file's NodeName= lines.
            let node = node_name(None);
            let records = Path::new(NODE_RECORDS_DIR);
            let in_force = in_force::resolve(&path, &node, records, euid, Role::Reader);
            for note in &in_force.notes {
                log::info(&format!("gpu_mps: job {job}: {note}"));
            }
            match in_force.cfg {
                Some(cfg) => cfg,
                None => {
                    if getenv(sp, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")?.is_some() {
                        let why = in_force.shares_refused.unwrap_or_default();
                        let text = match &in_force.no_gpus {
                            Some(no_gpus) => no_gpus_refusal(job, no_gpus),
                            None => format!("gpu_mps: job {job}: {why}"),
                        };
                        log::error(&text);
                        *PLAN.lock().unwrap_or_else(PoisonError::into_inner) =
                            StepPlan::Refused(text);
                    }
                    return Ok(());
                }
            }
        }
        Ok(_) => return Ok(()),
        // No gpushare on this node: jobs are Slurm's alone, but a share
        // never runs so without a word.
        Err(looked_at) => {
            if getenv(sp, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")?.is_some() {
                let text = missing_conf_refusal(job, &looked_at);
                log::error(&text);
                *PLAN.lock().unwrap_or_else(PoisonError::into_inner) = StepPlan::Refused(text);
            }
            return Ok(());
        }
    };
    let ledger = Ledger::open(&cfg.state_dir, euid)
        .map_err(|e| in_job(SpankError::Failed(e.to_string())))?;
    // Only sharpens the message for a share the prolog never placed: what
    // the job holds is the ledger's record, which only the prolog writes.
    let slurm_says_share = getenv(sp, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")?.is_some();
    let step = item_u32(sp, slurm_sys::S_JOB_STEPID, "spank_get_item(S_JOB_STEPID)")?;
    // Each task is an MPS client of the GPU's server: the share's memory
    // is divided over them, and the server takes only so many.
    let tasks = if step == EXTERN_STEP {
        0
    } else {
        item_u32(
            sp,
            slurm_sys::S_JOB_LOCAL_TASK_COUNT,
            "spank_get_item(S_JOB_LOCAL_TASK_COUNT)",
        )?
    };
    let plan = match task_plan(&cfg, &ledger, job, slurm_says_share, tasks) {
        Ok(Some(mut p)) => {
            // The limits line is told once per job on this node, by the
            // first step that runs tasks: in the job's stderr (task 0
            // prints it), in slurmstepd's log, or nowhere (`Banner=`).
            let first = step != EXTERN_STEP && p.banner_wanted() && claim_banner(&ledger, job);
            if let Some(line) = p.route_banner(first) {
                log::info(&line);
            }
            // The job counts for its largest step's clients.
            // Most steps run no more tasks than the ledger counts already
            // (a batch step's one): nothing to write, so no lock to take.
            let clients = if tasks <= p.clients {
                Ok(Ok(()))
            } else {
                // Written as every writer writes: the count also reaches the
                // status copy users read.
                let gpus = u32::try_from(gpu_devices(&cfg).len()).unwrap_or(u32::MAX);
                node_ledger(&cfg, euid, gpus).and_then(|writer| {
                    writer
                        .note_step_clients(job, tasks, cfg.max_clients_per_gpu)
                        .map(|outcome| outcome.value)
                })
            };
            log::info(&format!(
                "gpu_mps: job {job}: GPU {} ({}), {} units, placed by {}",
                p.gpu,
                p.device.display(),
                p.units,
                if p.confine { "gpushare" } else { "Slurm" }
            ));
            // A prolog's output never reaches slurmd's log when it succeeds,
            // so the Count warning (which matters only where gpushare
            // places) is logged here too, per share job.
            if p.confine {
                let gpus = u32::try_from(gpu_devices(&cfg).len()).unwrap_or(u32::MAX);
                if let Some(warning) = count_mismatch(&cfg, gpus) {
                    log::error(&format!("gpu_mps: job {job}: {warning}"));
                }
            }
            if step != EXTERN_STEP {
                step_end::share_step(&cfg, conf_path(args).ok(), job, p.gpu, tasks);
            }
            match clients {
                Ok(Ok(())) => StepPlan::Share(p),
                Ok(Err(text)) => {
                    log::error(&text);
                    StepPlan::Refused(text)
                }
                // Bookkeeping only: the step keeps its share.
                Err(e) => {
                    log::error(&format!("gpu_mps: job {job}: MPS clients not counted: {e}"));
                    StepPlan::Share(p)
                }
            }
        }
        Ok(None) => private_plan(sp, &cfg, &ledger, job, step, tasks)?,
        Err(text) => {
            // A share Slurm started without its Prolog: refused all the
            // same, and marked for its epilog to requeue (counted).
            let uid = item_u32(sp, slurm_sys::S_JOB_UID, "spank_get_item(S_JOB_UID)");
            let uid = uid.unwrap_or(u32::MAX);
            let text = match requeue::mark_prolog_missed(&ledger, job, uid, slurm_says_share) {
                Some(said) => format!("{text}\n{said}"),
                None => text,
            };
            log::error(&text);
            StepPlan::Refused(text)
        }
    };
    *PLAN.lock().unwrap_or_else(PoisonError::into_inner) = plan;
    Ok(())
}

/// The plan of a step of a job with no share here: its own MPS daemon
/// where the prolog recorded one (a step that runs tasks), a refusal
/// where the job asked for one the prolog never recorded.
fn private_plan(
    sp: spank_t,
    cfg: &GpuMpsConfig,
    ledger: &Ledger,
    job: u32,
    step: u32,
    tasks: u32,
) -> Result<StepPlan, SpankError> {
    let Some(record) = private_record(ledger, job) else {
        // Whether the job asked is known only after this callback
        // (post_opt): the refusal waits there.
        *UNRECORDED.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((job, cfg.state_dir.clone()));
        return Ok(StepPlan::Untouched);
    };
    if step == EXTERN_STEP {
        return Ok(StepPlan::Untouched);
    }
    let gid = match item_u32(sp, slurm_sys::S_JOB_GID, "spank_get_item(S_JOB_GID)") {
        Ok(gid) => gid,
        // The job's, never the node's, problem: its tasks fail with it.
        Err(e) => {
            let text = format!("gpu_mps: job {job}: its own MPS daemon cannot start: {e}");
            log::error(&text);
            return Ok(StepPlan::Refused(text));
        }
    };
    Ok(StepPlan::Private(PrivateStep {
        job,
        program: program(cfg),
        daemon: StepDaemon::of(cfg, job, step, record.uid, gid),
        threads: record.threads,
        tasks,
    }))
}

fn task_init(sp: spank_t) -> SpankResult {
    match plan() {
        StepPlan::Untouched => Ok(()),
        StepPlan::Private(p) => {
            // In the task, as its user: the daemon started in post_fork
            // must be there as the task sees the file system.
            if !p.daemon.reachable() {
                let text = format!(
                    "gpu_mps: job {}: the job's own MPS daemon did not start on node {} (its \
                     pipe {} is missing; slurmd's log says why)",
                    p.job,
                    node_name(None),
                    p.daemon.pipe().display()
                );
                eprintln!("{text}");
                return Err(SpankError::Failed(text));
            }
            p.daemon
                .task_env(p.threads)
                .iter()
                .try_for_each(|(name, value)| setenv(sp, name, value, true))
        }
        StepPlan::Refused(text) => {
            // This runs in the task: its stderr is the job's error output.
            eprintln!("{text}");
            Err(SpankError::Failed(text))
        }
        StepPlan::Share(plan) => {
            // In the task, so in the job's mount namespace where a job
            // container gives it one: its GPU's pipes must be there.
            if let Some(text) = unreachable_pipes(&plan, job_id(sp)?) {
                log::error(&text);
                eprintln!("{text}");
                return Err(SpankError::Failed(text));
            }
            if !plan.banner.is_empty()
                && item_u32(sp, slurm_sys::S_TASK_ID, "spank_get_item(S_TASK_ID)")? == 0
            {
                eprintln!("{}", plan.banner);
            }
            plan.env
                .iter()
                .try_for_each(|(name, value)| setenv(sp, name, value, true))?;
            // What the job set itself wins over a hint.
            plan.hints
                .iter()
                .try_for_each(|(name, value)| setenv(sp, name, value, false))
        }
    }
}

fn task_post_fork(sp: spank_t) -> SpankResult {
    let plan = match plan() {
        StepPlan::Share(plan) => plan,
        StepPlan::Private(p) => {
            if item_u32(sp, slurm_sys::S_TASK_ID, "spank_get_item(S_TASK_ID)")? != 0 {
                return Ok(());
            }
            let pid = task_pid(sp)?;
            // A daemon that cannot start fails the tasks in task_init,
            // with the reason here in slurmd's log: never the node.
            match private::start(p.program.as_deref(), &p.daemon, pid) {
                Ok(()) => log::info(&format!(
                    "gpu_mps: job {}: its own MPS daemon runs ({})",
                    p.job,
                    p.daemon.pipe().display()
                )),
                Err(e) => log::error(&format!(
                    "gpu_mps: job {}: its own MPS daemon did not start: {e}",
                    p.job
                )),
            }
            return Ok(());
        }
        _ => return Ok(()),
    };
    // The extern step (job_container/tmpfs) has no task: nothing to
    // confine or keep.
    let Ok(pid) = task_pid(sp) else {
        return Ok(());
    };
    step_end::task_started(pid);
    // Slurm chose this share's GPU and its device rules confine the job
    // there (cgroup v1 or v2): nothing to add.
    if !plan.confine {
        return Ok(());
    }
    let job = job_id(sp)?;
    let fail = |msg: String| SpankError::Failed(format!("job {job}: {msg}"));
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .map_err(|e| fail(format!("/proc/{pid}/cgroup: {e}")))?;
    let levels = task_devices_dir(&cgroup, Path::new(DEVICES_ROOT))
        .and_then(|d| job_levels(&d))
        .map_err(|e| fail(e.to_string()))?;
    let device = |path: &Path| {
        CharDevice::of(path).map_err(|e| {
            fail(format!(
                "cannot read the device numbers of {} to confine task {pid}: {e}",
                path.display()
            ))
        })
    };
    let allow = device(&plan.device)?;
    // Every other GPU must be denied: one that cannot be named fails the
    // task rather than leave it reachable.
    let deny = plan
        .other_devices
        .iter()
        .map(|p| device(p))
        .collect::<Result<Vec<_>, _>>()?;
    confine(&levels, allow, &deny).map_err(|e| {
        fail(format!(
            "cannot confine task {pid} to {}: {e}",
            plan.device.display()
        ))
    })
}

/// After the options, in slurmstepd: a job that asked for its own MPS
/// daemon where the prolog recorded none is refused, never run without it.
fn init_post_opt(sp: spank_t) -> SpankResult {
    if !remote(sp) || !private::asked() {
        return Ok(());
    }
    let unrecorded = UNRECORDED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    let mut plan = PLAN.lock().unwrap_or_else(PoisonError::into_inner);
    if let (Some((job, state_dir)), StepPlan::Untouched) = (unrecorded, &*plan) {
        let mut text = format!(
            "gpu_mps: job {job} asked for an MPS daemon of its own (--gpu-mps=private), but \
             the node's Prolog did not record one: Prolog=gpu-mps-prolog is not configured \
             on this node, or Slurm skipped it; the job is refused rather than run without \
             it"
        );
        // Started without its Prolog: refused all the same, and marked
        // for its epilog to requeue (counted), as a share is.
        // SAFETY: geteuid has no preconditions (slurmstepd runs as root).
        let euid = unsafe { libc::geteuid() };
        let marked = Ledger::open(&state_dir, euid).ok().and_then(|ledger| {
            let uid = item_u32(sp, slurm_sys::S_JOB_UID, "spank_get_item(S_JOB_UID)");
            requeue::mark_private_prolog_missed(&ledger, job, uid.unwrap_or(u32::MAX))
        });
        match marked {
            Some(said) => text = format!("{text}\n{said}"),
            None => text.push_str(": resubmit the job"),
        }
        log::error(&text);
        *plan = StepPlan::Refused(text);
    }
    Ok(())
}

/// After each task has exited, in slurmstepd as root: the step's own MPS
/// daemon is stopped after its last task (its clients) ended, before
/// Slurm kills what is left in the step.
fn task_exit() -> SpankResult {
    step_end::task_exited();
    if let Some(p) = private_step() {
        if private::last_task_exited(p.tasks) {
            private::stop(p.program.as_deref(), p.job, &p.daemon, true);
        }
    }
    Ok(())
}

/// At the step's end: a daemon no task exit stopped is stopped now.
fn exit() -> SpankResult {
    step_end::step_exit();
    if let Some(p) = private_step() {
        private::stop(p.program.as_deref(), p.job, &p.daemon, false);
    }
    Ok(())
}

/// The step's own MPS daemon, where it has one: every task's exit asks,
/// and only such a step's plan is copied.
fn private_step() -> Option<PrivateStep> {
    match &*PLAN.lock().unwrap_or_else(PoisonError::into_inner) {
        StepPlan::Private(p) => Some(p.clone()),
        _ => None,
    }
}

/// # Safety
/// slurmstepd's handle and argument vector.
unsafe fn spank_init(sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    // SAFETY: slurmstepd's argument vector.
    let a = unsafe { args(ac, av) };
    finish("init", init(sp, &a))
}

fn spank_task_init(sp: spank_t, _ac: c_int, _av: *mut *mut c_char) -> c_int {
    finish("task_init", task_init(sp))
}

fn spank_task_post_fork(sp: spank_t, _ac: c_int, _av: *mut *mut c_char) -> c_int {
    finish("task_post_fork", task_post_fork(sp))
}

fn spank_init_post_opt(sp: spank_t, _ac: c_int, _av: *mut *mut c_char) -> c_int {
    finish("init_post_opt", init_post_opt(sp))
}

fn spank_task_exit(_sp: spank_t, _ac: c_int, _av: *mut *mut c_char) -> c_int {
    finish("task_exit", task_exit())
}

fn spank_exit(_sp: spank_t, _ac: c_int, _av: *mut *mut c_char) -> c_int {
    finish("exit", exit())
}

slurm_plugin::export! {
    /// Once per step, in every context; acts in the remote one. slurmd
    /// calls it once when it starts: the load line.
    fn slurm_spank_init(sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int,
        on_panic -1 => spank_init;
    /// After the options were processed, in every context.
    fn slurm_spank_init_post_opt(sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int,
        on_panic -1 => spank_init_post_opt;
    /// In each task, as the user, before exec.
    fn slurm_spank_task_init(sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int,
        on_panic -1 => spank_task_init;
    /// In slurmstepd, as root, after each task was forked and Slurm set its cgroup.
    fn slurm_spank_task_post_fork(sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int,
        on_panic -1 => spank_task_post_fork;
    /// In slurmstepd, as root, as each task exits.
    fn slurm_spank_task_exit(sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int,
        on_panic -1 => spank_task_exit;
    /// At the end of each step (and of srun, sbatch, salloc), as root in slurmstepd.
    fn slurm_spank_exit(sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int,
        on_panic -1 => spank_exit;
}
