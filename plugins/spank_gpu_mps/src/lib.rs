//! SPANK `gpu_mps`: gives each task of a job holding an MPS share its GPU.
//!
//! Loaded by slurmstepd through `plugstack.conf`
//! (`required /usr/lib/.../spank_gpu_mps.so [conf=/etc/slurm/gpu_mps.conf]`).
//! The GPU was chosen by `gpu-mps-prolog` (recorded in the node's ledger);
//! here, in the remote context only:
//! - `slurm_spank_init` reads the placement once per step (or the prolog's
//!   refusal, which fails the job with its text);
//! - `slurm_spank_task_init` (in the task, before exec) replaces Slurm's
//!   GPU environment with the share's;
//! - `slurm_spank_task_post_fork` (slurmstepd, root, after Slurm wrote its
//!   device rules) confines the task to the chosen GPU's device file.
//!
//! No `init()` is exported: the SPANK loader would run it in every context.
//! Every callback goes through [`slurm_plugin::guard`].

use std::os::raw::{c_char, c_int};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use gpushare::mps::config::{self as mps_conf, GpuMpsConfig, CONF_NAME};
use gpushare::mps::devices::{confine, job_levels, task_devices_dir, CharDevice, DEVICES_ROOT};
use gpushare::mps::ledger::Ledger;
use gpushare::mps::node::{count_mismatch, gpu_devices, task_plan, TaskPlan};
use gpushare::shared::locations::beside_slurm_conf;
use slurm_plugin::slurm_str::opt_str;
use slurm_plugin::{guard, log};
use slurm_sys::{spank_t, ESPANK_SUCCESS, S_CTX_REMOTE, S_JOB_ID, S_TASK_PID};

slurm_plugin::plugin_identity!(name: "gpu_mps", kind: "spank");

const FAIL: c_int = -1;
const OK: c_int = 0;

/// What this slurmstepd's step does with its tasks.
#[derive(Debug, Clone)]
enum StepPlan {
    /// The job holds no share here: leave it alone.
    Untouched,
    Share(TaskPlan),
    /// The job must not run: each task prints this and exits 1. Failing
    /// later, in slurm_spank_init, would make slurmctld drain the node
    /// ("Plugin initialization failed") for what is a job's problem.
    Refused(String),
}

static PLAN: Mutex<StepPlan> = Mutex::new(StepPlan::Untouched);

fn remote(sp: spank_t) -> bool {
    // SAFETY: sp is the handle slurmstepd passed to the callback.
    unsafe { slurm_sys::spank_remote(sp) == 1 && slurm_sys::spank_context() == S_CTX_REMOTE }
}

fn job_id(sp: spank_t) -> Option<u32> {
    let mut id: u32 = 0;
    // SAFETY: S_JOB_ID writes a uint32_t through the pointer we pass.
    let rc = unsafe { slurm_sys::spank_get_item(sp, S_JOB_ID, &mut id as *mut u32) };
    (rc == ESPANK_SUCCESS).then_some(id)
}

fn task_pid(sp: spank_t) -> Option<i32> {
    let mut pid: libc::pid_t = 0;
    // SAFETY: S_TASK_PID writes a pid_t through the pointer we pass.
    let rc = unsafe { slurm_sys::spank_get_item(sp, S_TASK_PID, &mut pid as *mut libc::pid_t) };
    (rc == ESPANK_SUCCESS).then_some(pid)
}

fn getenv(sp: spank_t, name: &str) -> Option<String> {
    let c_name = std::ffi::CString::new(name).ok()?;
    let mut buf = [0 as c_char; 256];
    // SAFETY: buf is writable for its length; spank_getenv NUL-terminates.
    let rc = unsafe {
        slurm_sys::spank_getenv(sp, c_name.as_ptr(), buf.as_mut_ptr(), buf.len() as c_int)
    };
    // SAFETY: on success buf holds a NUL-terminated string.
    (rc == ESPANK_SUCCESS)
        .then(|| unsafe { opt_str(buf.as_ptr()) }.map(|s| s.into_owned()))
        .flatten()
}

fn setenv(sp: spank_t, name: &str, value: &str) -> Result<(), String> {
    let (Ok(n), Ok(v)) = (std::ffi::CString::new(name), std::ffi::CString::new(value)) else {
        return Err(format!("{name}: value contains NUL"));
    };
    // SAFETY: valid C strings; overwrite = 1 replaces what Slurm set.
    let rc = unsafe { slurm_sys::spank_setenv(sp, n.as_ptr(), v.as_ptr(), 1) };
    if rc == ESPANK_SUCCESS {
        Ok(())
    } else {
        Err(format!("spank_setenv({name}) failed ({rc})"))
    }
}

/// `conf=PATH` from the plugstack line, else next to slurm.conf.
fn conf_path(args: &[String]) -> PathBuf {
    args.iter()
        .find_map(|a| a.strip_prefix("conf=").map(PathBuf::from))
        .unwrap_or_else(|| beside_slurm_conf(None, CONF_NAME))
}

fn load_config(path: &Path) -> Result<GpuMpsConfig, String> {
    // A node without the file shares nothing: every job is left alone.
    Ok(mps_conf::load(path)
        .map_err(|e| e.to_string())?
        .unwrap_or_default())
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

fn init(sp: spank_t, args: &[String]) -> c_int {
    if !remote(sp) {
        return OK;
    }
    let Some(job) = job_id(sp) else { return OK };
    let fail = |msg: String| {
        log::error(&msg);
        FAIL
    };
    let cfg = match load_config(&conf_path(args)) {
        Ok(c) => c,
        Err(e) => return fail(format!("gpu_mps: job {job}: {e}")),
    };
    // SAFETY: geteuid has no preconditions (slurmstepd runs as root).
    let euid = unsafe { libc::geteuid() };
    let ledger = match Ledger::open(&cfg.state_dir, euid) {
        Ok(l) => l,
        Err(e) => return fail(format!("gpu_mps: job {job}: {e}")),
    };
    let slurm_says_share = getenv(sp, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE").is_some();
    let plan = match task_plan(&cfg, &ledger, job, slurm_says_share) {
        Ok(Some(p)) => {
            log::info(&format!(
                "gpu_mps: job {job}: GPU {} ({}), {} units",
                p.gpu,
                p.device.display(),
                p.units
            ));
            let gpus = u32::try_from(gpu_devices(&cfg).len()).unwrap_or(u32::MAX);
            if let Some(warning) = count_mismatch(&cfg, gpus) {
                log::error(&format!("gpu_mps: job {job}: {warning}"));
            }
            StepPlan::Share(p)
        }
        Ok(None) => StepPlan::Untouched,
        Err(text) => {
            log::error(&text);
            StepPlan::Refused(text)
        }
    };
    *PLAN.lock().unwrap_or_else(PoisonError::into_inner) = plan;
    OK
}

fn plan() -> StepPlan {
    PLAN.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

fn task_init(sp: spank_t) -> c_int {
    let plan = match plan() {
        StepPlan::Untouched => return OK,
        StepPlan::Refused(text) => {
            // This runs in the task: its stderr is the job's error output.
            eprintln!("{text}");
            return FAIL;
        }
        StepPlan::Share(p) => p,
    };
    for (name, value) in &plan.env {
        if let Err(e) = setenv(sp, name, value) {
            log::error(&format!("gpu_mps: {e}"));
            return FAIL;
        }
    }
    OK
}

fn task_post_fork(sp: spank_t) -> c_int {
    let StepPlan::Share(plan) = plan() else {
        return OK;
    };
    let job = job_id(sp).unwrap_or(0);
    let fail = |msg: String| {
        log::error(&format!("gpu_mps: job {job}: {msg}"));
        FAIL
    };
    let Some(pid) = task_pid(sp) else {
        return fail("no task pid".into());
    };
    let cgroup = match std::fs::read_to_string(format!("/proc/{pid}/cgroup")) {
        Ok(t) => t,
        Err(e) => return fail(format!("/proc/{pid}/cgroup: {e}")),
    };
    let levels =
        match task_devices_dir(&cgroup, Path::new(DEVICES_ROOT)).and_then(|d| job_levels(&d)) {
            Ok(l) => l,
            Err(e) => return fail(e.to_string()),
        };
    let allow = match CharDevice::of(&plan.device) {
        Ok(d) => d,
        Err(e) => return fail(format!("{}: {e}", plan.device.display())),
    };
    let deny: Vec<CharDevice> = plan
        .other_devices
        .iter()
        .filter_map(|p| CharDevice::of(p).ok())
        .collect();
    match confine(&levels, allow, &deny) {
        Ok(()) => OK,
        Err(e) => fail(format!(
            "cannot confine task {pid} to {}: {e}",
            plan.device.display()
        )),
    }
}

/// # Safety
/// Called by slurmstepd with its SPANK handle and plugin arguments.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_init(sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    guard("spank/gpu_mps: init", FAIL, || {
        // SAFETY: slurmstepd's argument vector.
        let a = unsafe { args(ac, av) };
        init(sp, &a)
    })
}

/// # Safety
/// Called by slurmstepd in the task, before exec.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_task_init(
    sp: spank_t,
    _ac: c_int,
    _av: *mut *mut c_char,
) -> c_int {
    guard("spank/gpu_mps: task_init", FAIL, || task_init(sp))
}

/// # Safety
/// Called by slurmstepd (root) after forking each task.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_task_post_fork(
    sp: spank_t,
    _ac: c_int,
    _av: *mut *mut c_char,
) -> c_int {
    guard("spank/gpu_mps: task_post_fork", FAIL, || task_post_fork(sp))
}
