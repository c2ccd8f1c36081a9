//! The thin FFI layer every gpushare plugin is built on.
//!
//! Slurm daemons (slurmctld, slurmstepd) `dlopen` the plugins and call their
//! exported symbols. This crate holds everything those exports have in
//! common, so that each plugin's own FFI file is a list of one-line shims:
//!
//! - [`export!`]: generates every exported function as a shim through
//!   [`guard`], which runs a callback under `catch_unwind`; a panic is
//!   logged through Slurm and becomes an error code, never an abort of the
//!   daemon. The build fails without `panic = "unwind"`.
//! - [`log`]: Slurm's log functions, always called with a constant `"%s"`
//!   format so user data can never be read as a format string.
//! - [`slurm_str`]: reading C strings Slurm hands us, and writing strings that
//!   Slurm will later free (they must come from Slurm's own allocator).
//! - [`plugin_identity!`]: the `plugin_name`/`plugin_type`/`plugin_version`
//!   symbols Slurm's loader looks for.
//!
//! The functions declared by slurm-sys are resolved from the host process at
//! load time; nothing here links libslurm.

pub mod guard;
pub mod log;
pub mod slurm_str;

pub use guard::guard;

// A panic that cannot unwind aborts the daemon that loaded the plugin
// (slurmctld, slurmstepd): the guard depends on unwinding.
#[cfg(not(panic = "unwind"))]
compile_error!(
    "gpushare's Slurm plugins must be built with panic = \"unwind\" (see the workspace Cargo.toml): \
     with panic = \"abort\" a panic would take down slurmctld or slurmstepd"
);

/// Defines the C functions a plugin exports, each a shim that runs its
/// body under [`guard`]: a panic is logged through Slurm as
/// `"<crate>: <function>: internal error: ..."` and becomes the given
/// error value. No export of a gpushare plugin is written any other way.
///
/// ```ignore
/// slurm_plugin::export! {
///     /// Called once when slurmctld loads the plugin.
///     fn init() -> c_int, on_panic SLURM_ERROR => plugin_init;
///     fn job_submit(desc: *mut job_desc_msg_t, uid: u32, err: *mut *mut c_char) -> c_int,
///         on_panic SLURM_ERROR => submit;
/// }
/// ```
///
/// Each body is a function taking the same arguments (an `unsafe fn` when
/// it dereferences them, with the daemon's contract as its safety).
#[macro_export]
macro_rules! export {
    ($(
        $(#[$meta:meta])*
        fn $name:ident($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty, on_panic $on_panic:expr => $body:path;
    )*) => {$(
        $(#[$meta])*
        ///
        /// # Safety
        /// Called only by the Slurm daemon that loaded the plugin, with the
        /// arguments its plugin API defines.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            $crate::guard(
                concat!(env!("CARGO_PKG_NAME"), ": ", stringify!($name)),
                $on_panic,
                // SAFETY: the body gets the daemon's arguments unchanged,
                // under the contract documented on this function.
                #[allow(unused_unsafe, clippy::undocumented_unsafe_blocks)]
                || unsafe { $body($($arg),*) },
            )
        }
    )*};
}

/// Emits the three data symbols Slurm's plugin loader requires.
///
/// `plugin_version` is the `SLURM_VERSION_NUMBER` of the headers the build
/// used: slurmctld refuses a job_submit plugin whose version differs from its
/// own in major, minor or micro; slurmstepd checks major.minor for SPANK.
///
/// ```ignore
/// slurm_plugin::plugin_identity!(
///     name: "gpushare typed-GPU QOS policy",
///     kind: "job_submit/gpu_qos",
/// );
/// ```
#[macro_export]
macro_rules! plugin_identity {
    (name: $name:literal, kind: $kind:literal $(,)?) => {
        /// Human-readable plugin name, read by Slurm's loader.
        #[no_mangle]
        #[used]
        pub static plugin_name: [::std::os::raw::c_char; $name.len() + 1] =
            $crate::slurm_str::c_chars(concat!($name, "\0"));

        /// `<plugin kind>/<name>`, read by Slurm's loader.
        #[no_mangle]
        #[used]
        pub static plugin_type: [::std::os::raw::c_char; $kind.len() + 1] =
            $crate::slurm_str::c_chars(concat!($kind, "\0"));

        /// The Slurm release this plugin was built for.
        #[no_mangle]
        #[used]
        pub static plugin_version: u32 = ::slurm_sys::SLURM_VERSION_NUMBER;
    };
}
