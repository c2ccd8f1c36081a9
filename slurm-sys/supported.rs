// The newest Slurm release the build accepts, and the check itself: a pure
// function, included by build.rs and by the tests in src/lib.rs (so it must
// stay free of `use` clashes).

/// The newest Slurm release (major, minor) gpushare was checked against:
/// the declarations it copies from Slurm's source because Slurm installs no
/// header for them (`include/slurm_unexported.h`,
/// `include/slurmctld_assoc_mgr.h`) and the `cfg(slurm_X_Y)` gates
/// (`version_cfg.rs`'s `SLURM_RELEASES`, whose last entry this is). Raise
/// it only after checking them against the new release's source.
const NEWEST_SUPPORTED: (u32, u32) = (26, 11);

/// A release checked only against a snapshot of SchedMD's development
/// branch, before its first tag, and which snapshot: building for it
/// works, with a warning that says so. `None` once the release's own
/// tarball has been through the lanes (only then: a tag may still move
/// what the snapshot had).
const PRE_RELEASE: Option<((u32, u32), &str)> = Some((
    (26, 11),
    "its pre-release, SchedMD's master of 2026-08-20 (commit 284c3b95, META 26.11.0)",
));

/// Set to `1`, the build goes on with headers newer than
/// [`NEWEST_SUPPORTED`] (with a warning): for whoever ports gpushare to a
/// new Slurm release.
const ALLOW_NEWER_ENV: &str = "GPUSHARE_ALLOW_NEWER_SLURM";

/// `SLURM_VERSION_NUMBER` (0xMMmmuu) as "26.05.3".
fn version_text(number: u32) -> String {
    format!(
        "{}.{:02}.{}",
        number >> 16,
        (number >> 8) & 0xff,
        number & 0xff
    )
}

/// Whether headers of `SLURM_VERSION_NUMBER` `number` (found in
/// `include`) may be built on: `Ok(None)` for [`NEWEST_SUPPORTED`] or
/// older (any micro release of it), `Ok(Some(warning))` for the
/// [`PRE_RELEASE`] one and for a newer one where `allow_newer` (the value
/// of [`ALLOW_NEWER_ENV`]) is `1`, else `Err` with what to do.
fn check_supported(
    number: u32,
    include: &str,
    allow_newer: Option<&str>,
) -> Result<Option<String>, String> {
    let found = (number >> 16, (number >> 8) & 0xff);
    let version = version_text(number);
    if let Some((release, snapshot)) = PRE_RELEASE.filter(|(r, _)| *r == found) {
        return Ok(Some(format!(
            "building for Slurm {version}: gpushare was checked against Slurm {}.{:02} \
             before its release only, against {snapshot}; rebuild and retest when the \
             release is tagged",
            release.0, release.1
        )));
    }
    if found <= NEWEST_SUPPORTED {
        return Ok(None);
    }
    let newest = format!("{}.{:02}", NEWEST_SUPPORTED.0, NEWEST_SUPPORTED.1);
    let release = format!("{}.{:02}", found.0, found.1);
    if allow_newer.map(str::trim) == Some("1") {
        return Ok(Some(format!(
            "building for Slurm {version}, newer than {newest}, the newest release gpushare \
             was checked against, because {ALLOW_NEWER_ENV}=1: check \
             include/slurm_unexported.h and include/slurmctld_assoc_mgr.h against Slurm \
             {release}'s source before loading these plugins into a daemon"
        )));
    }
    Err(format!(
        "the Slurm headers in {include} are of Slurm {version}, newer than the newest \
         release gpushare supports, {newest}. gpushare declares functions and structures \
         of slurmctld that Slurm installs no header for (include/slurm_unexported.h, \
         include/slurmctld_assoc_mgr.h), checked against every release up to {newest} \
         only: a plugin built on a declaration Slurm {release} changed could crash \
         slurmctld. Use a gpushare release that supports Slurm {release}, or build against \
         {newest} headers (SLURM_INCLUDE_DIR). To port gpushare to Slurm {release}, check \
         those files against its source, then build with {ALLOW_NEWER_ENV}=1."
    ))
}
