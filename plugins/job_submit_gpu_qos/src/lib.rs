//! `job_submit/gpu_qos`: the slurmctld job_submit plugin of gpushare.
//!
//! Loaded by slurmctld through `JobSubmitPlugins=gpu_qos` (the file is
//! installed as `job_submit_gpu_qos.so` in Slurm's PluginDir). slurmctld
//! calls `job_submit` for every new job and `job_modify` for every
//! `scontrol update`, with its own locks held: nothing here may block, sleep
//! or call back into slurmctld.
//!
//! This file is only the C ABI: each export is a one-line shim through
//! [`slurm_plugin::guard`], so a panic becomes `SLURM_ERROR`, never a crash.

use std::os::raw::{c_char, c_int, c_void};

use slurm_plugin::{guard, log};
use slurm_sys::{job_desc_msg_t, SLURM_ERROR, SLURM_SUCCESS};

slurm_plugin::plugin_identity!(
    name: "gpushare typed-GPU QOS policy",
    kind: "job_submit/gpu_qos",
);

const PLUGIN: &str = "job_submit/gpu_qos";

/// Called once when slurmctld loads the plugin; a non-zero return stops
/// slurmctld, which is what a site wants when its policy cannot be enforced.
#[no_mangle]
pub extern "C" fn init() -> c_int {
    guard("job_submit/gpu_qos: init", SLURM_ERROR, || {
        log::info(&format!(
            "{PLUGIN}: loaded (gpushare {}, built for Slurm {})",
            env!("CARGO_PKG_VERSION"),
            slurm_sys::SLURM_VERSION
        ));
        SLURM_SUCCESS as c_int
    })
}

/// Called when slurmctld shuts down or reconfigures.
#[no_mangle]
pub extern "C" fn fini() -> c_int {
    guard("job_submit/gpu_qos: fini", SLURM_ERROR, || {
        SLURM_SUCCESS as c_int
    })
}

/// Judges a new job. Same signature in every supported Slurm release.
///
/// # Safety
/// Called by slurmctld only: `job_desc` is a live job description it owns and
/// `err_msg` NULL or a slot for a Slurm-allocated message.
#[no_mangle]
pub unsafe extern "C" fn job_submit(
    job_desc: *mut job_desc_msg_t,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    guard("job_submit/gpu_qos: job_submit", SLURM_ERROR, || {
        let _ = (job_desc, err_msg);
        log::verbose(&format!(
            "{PLUGIN}: job_submit from uid {submit_uid}: accepted"
        ));
        SLURM_SUCCESS as c_int
    })
}

/// Judges an `scontrol update` of a job (22.05: no message slot).
///
/// # Safety
/// Called by slurmctld only: `job_desc` is the update it owns; `job_ptr` is
/// slurmctld's private job record, never dereferenced here.
#[cfg(not(slurm_23_02))]
#[no_mangle]
pub unsafe extern "C" fn job_modify(
    job_desc: *mut job_desc_msg_t,
    job_ptr: *mut c_void,
    submit_uid: u32,
) -> c_int {
    guard("job_submit/gpu_qos: job_modify", SLURM_ERROR, || {
        let _ = (job_desc, job_ptr);
        log::verbose(&format!(
            "{PLUGIN}: job_modify from uid {submit_uid}: accepted"
        ));
        SLURM_SUCCESS as c_int
    })
}

/// Judges an `scontrol update` of a job (23.02+: with a message slot).
///
/// # Safety
/// As above; `err_msg` is NULL or a slot for a Slurm-allocated message.
#[cfg(slurm_23_02)]
#[no_mangle]
pub unsafe extern "C" fn job_modify(
    job_desc: *mut job_desc_msg_t,
    job_ptr: *mut c_void,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    guard("job_submit/gpu_qos: job_modify", SLURM_ERROR, || {
        let _ = (job_desc, job_ptr, err_msg);
        log::verbose(&format!(
            "{PLUGIN}: job_modify from uid {submit_uid}: accepted"
        ));
        SLURM_SUCCESS as c_int
    })
}
