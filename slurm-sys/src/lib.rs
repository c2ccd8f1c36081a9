//! Raw bindings to the Slurm installed on the build host, generated at build
//! time by bindgen from `include/gpushare_slurm.h`.
//!
//! Nothing here is hand-written but the declarations in
//! `include/slurm_unexported.h`. The crate is linked by plugins that Slurm
//! daemons load, so it deliberately does not link libslurm: every function
//! declared here is resolved from the host process (slurmctld, slurmstepd)
//! when the plugin is loaded.
//!
//! [`SLURM_VERSION`] and [`SLURM_VERSION_NUMBER`] say which Slurm the
//! bindings were generated for; plugins must be rebuilt for each Slurm
//! release (job_submit plugins for each micro release).

#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case)]
#![allow(clippy::all, clippy::undocumented_unsafe_blocks)]
#![allow(missing_debug_implementations, unsafe_op_in_unsafe_fn)]

mod bindings {
    #![allow(
        non_upper_case_globals,
        non_camel_case_types,
        non_snake_case,
        dead_code
    )]
    #![allow(clippy::all, missing_debug_implementations, unsafe_op_in_unsafe_fn)]
    include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
}

pub use bindings::*;

/// The Slurm version the bindings were generated for, as "22.05.8".
pub const SLURM_VERSION: &str = env!("SLURM_SYS_BUILT_FOR");

// Layout assumptions the FFI layers rely on, checked at compile time.
const _: () = assert!(NO_VAL == 0xffff_fffe);
const _: () = assert!(NO_VAL16 == 0xfffe);
const _: () = assert!(NO_VAL64 == 0xffff_ffff_ffff_fffe);
const _: () = assert!(INFINITE == 0xffff_ffff);
const _: () = assert!(INFINITE64 == 0xffff_ffff_ffff_ffff);
