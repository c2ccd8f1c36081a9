//! Logging through the host daemon's own log (slurmctld.log, slurmd.log).
//!
//! Every call passes a constant `"%s"` format and the message as its one
//! argument: job names, QOS names and paths come from users, and a `%` in
//! them must never be interpreted by Slurm's printf.

use std::ffi::CString;
use std::os::raw::c_char;

const PERCENT_S: &[u8] = b"%s\0";

/// Converts a message to a C string; interior NULs (never in our own text,
/// possible in echoed user data) are replaced rather than truncating it.
fn to_c(msg: &str) -> CString {
    CString::new(msg.replace('\0', "\\0")).unwrap_or_default()
}

macro_rules! slurm_log_fn {
    ($(#[$doc:meta])* $name:ident => $sys:ident) => {
        $(#[$doc])*
        pub fn $name(msg: &str) {
            let c = to_c(msg);
            // SAFETY: the format is a NUL-terminated "%s" and its one argument
            // a valid NUL-terminated string that outlives the call; the symbol
            // is resolved from the Slurm daemon that loaded us.
            unsafe { slurm_sys::$sys(PERCENT_S.as_ptr().cast::<c_char>(), c.as_ptr()) };
        }
    };
}

slurm_log_fn!(
    /// Logs at error level (always shown).
    error => slurm_error
);
slurm_log_fn!(
    /// Logs at info level (shown at the default `SlurmctldDebug=info`).
    info => slurm_info
);
slurm_log_fn!(
    /// Logs at verbose level.
    verbose => slurm_verbose
);
slurm_log_fn!(
    /// Logs at debug level.
    debug => slurm_debug
);
