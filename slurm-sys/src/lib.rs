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

/// The build's check of the headers' release (`supported.rs`, run by
/// build.rs).
#[cfg(test)]
#[allow(dead_code)]
mod supported {
    include!("../supported.rs");
    // SLURM_RELEASES.
    include!("../version_cfg.rs");

    const INCLUDE: &str = "/usr/include";

    #[test]
    fn headers_newer_than_the_newest_checked_release_are_refused() {
        // 22.05.8 .. 26.05.x: built on, whatever the micro release.
        for number in [0x16_05_08, 0x18_0b_05, 0x1a_05_00, 0x1a_05_03, 0x1a_05_ff] {
            assert_eq!(
                check_supported(number, INCLUDE, None),
                Ok(None),
                "{number:x}"
            );
        }
        // 26.11: built on, saying it was checked before its release only.
        for number in [0x1a_0b_00, 0x1a_0b_02] {
            let warning = check_supported(number, INCLUDE, None);
            assert!(
                warning.as_ref().is_ok_and(|w| w
                    .as_ref()
                    .is_some_and(|w| w.contains(&version_text(number))
                        && w.contains("before its release only")
                        && w.contains("284c3b95"))),
                "{warning:?}"
            );
        }
        // 27.05.1 and 28.11.0: refused, naming both releases and the way on.
        for (number, found) in [(0x1b_05_01, "27.05.1"), (0x1c_0b_00, "28.11.0")] {
            let refusal = check_supported(number, INCLUDE, None)
                .err()
                .unwrap_or_default();
            assert!(
                refusal.contains(&format!("are of Slurm {found}, newer than"))
                    && refusal.contains("the newest release gpushare supports, 26.11")
                    && refusal.contains(INCLUDE)
                    && refusal.contains("GPUSHARE_ALLOW_NEWER_SLURM=1"),
                "{refusal}"
            );
            for not_one in [None, Some(""), Some("0"), Some("yes")] {
                assert!(check_supported(number, INCLUDE, not_one).is_err());
            }
            let warning = check_supported(number, INCLUDE, Some("1"));
            assert!(
                warning
                    .as_ref()
                    .is_ok_and(|w| w.as_ref().is_some_and(|w| w.contains(found))),
                "{warning:?}"
            );
        }
    }

    #[test]
    fn the_newest_supported_release_is_the_last_gated_one() {
        assert_eq!(SLURM_RELEASES.last(), Some(&NEWEST_SUPPORTED));
        // A pre-release is always the newest one.
        if let Some((release, _)) = PRE_RELEASE {
            assert_eq!(release, NEWEST_SUPPORTED);
        }
        assert_eq!(version_text(0x1a_05_03), "26.05.3");
    }
}
