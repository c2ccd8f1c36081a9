//! The one mechanism every exported function goes through.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `callback`, turning a panic into `on_panic` after logging it through
/// Slurm as `"<context>: internal error: <panic message>"`.
///
/// `context` names the plugin and the entry point (`"job_submit/gpu_qos:
/// job_submit"`), so the daemon's log says where it happened.
///
/// Unwind safety is asserted rather than proven: the callbacks share state
/// only through locks whose poisoning is ignored by design (a reader takes
/// the last value written, which is always complete), so no half-updated
/// state can be observed after a caught panic.
pub fn guard<R>(context: &str, on_panic: R, callback: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(callback)) {
        Ok(value) => value,
        Err(payload) => {
            crate::log::error(&format!(
                "{context}: internal error: {}",
                panic_message(payload.as_ref())
            ));
            on_panic
        }
    }
}

/// The text of a panic payload (`panic!` with a literal or a format string).
pub fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.as_str()
    } else {
        "panic with a non-string payload"
    }
}
