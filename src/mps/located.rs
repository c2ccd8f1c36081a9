//! Where the node programs found `gpu_mps.conf`, for the commands slurmd
//! does not start (the node timer, an admin's `gpu-mps`).
//!
//! slurmd hands its prolog and epilog `SLURM_CONF`: the slurm.conf it reads
//! (`-f`, its own `$SLURM_CONF`, its configless cache, or the default its
//! build compiled in, `/opt/slurm/etc/slurm.conf` for a Slurm configured
//! into a prefix of its own), so they find `gpu_mps.conf` beside it, else
//! in `/etc/slurm` ([`super::config::locate`]). A systemd timer or an admin's shell
//! has no such variable: where the site's Slurm configuration is not in
//! `/etc/slurm`, they would look in the wrong place. So the node programs
//! record the file they used ([`record`]), in root's directory kept across
//! reboots, and `gpu-mps` looks beside `$SLURM_CONF` where it is set, then
//! at that record, then in `/etc/slurm` ([`locate`]).

use std::fs;
use std::path::{Path, PathBuf};

use super::config::CONF_NAME;
use super::disabled::DISABLED_DIR;
use super::state_dir::{self, Access};
use crate::shared::locations::{beside_slurm_conf, first_existing, NODE_CONF_DIR};

/// The record's directory: root's, kept across reboots (a node timer after
/// a reboot finds the file before any job has run).
pub const RECORD_DIR: &str = DISABLED_DIR;

/// The record's file name in [`RECORD_DIR`]: one line, the path.
pub const RECORD_FILE: &str = "gpu_mps.conf-path";

/// The path recorded in `dir`, if `owner` owns the directory (root on a
/// node: nobody else could have written it) and it is an absolute path.
pub fn recorded(dir: &Path, owner: u32) -> Option<PathBuf> {
    state_dir::check(dir, owner, Access::WorldReadable).ok()?;
    let text = fs::read_to_string(dir.join(RECORD_FILE)).ok()?;
    let line = text.trim_end_matches('\n');
    (!line.is_empty() && !line.contains('\n') && line.starts_with('/')).then(|| PathBuf::from(line))
}

/// Records `conf` (the file a node program found) in `dir`, `owner`'s,
/// where it is not already: written whole or not at all.
pub fn record(dir: &Path, owner: u32, conf: &Path) -> Result<(), String> {
    let Some(text) = conf
        .to_str()
        .filter(|t| t.starts_with('/') && !t.contains('\n'))
    else {
        return Ok(());
    };
    if recorded(dir, owner).as_deref() == Some(conf) {
        return Ok(());
    }
    state_dir::ensure(dir, owner, Access::WorldReadable)
        .and_then(|_| {
            state_dir::replace_file(dir, RECORD_FILE, format!("{text}\n").as_bytes(), 0o644)
        })
        .map_err(|e| format!("{}: {e}", dir.join(RECORD_FILE).display()))
}

/// The places `gpu-mps` looks, in order: `explicit` alone where given;
/// else beside `slurm_conf_env` (`$SLURM_CONF`) where set, then the
/// node programs' record, then [`NODE_CONF_DIR`].
pub fn candidates(
    explicit: Option<&Path>,
    slurm_conf_env: Option<&Path>,
    recorded: Option<PathBuf>,
) -> Vec<PathBuf> {
    if let Some(path) = explicit {
        return vec![path.to_path_buf()];
    }
    let beside_env = slurm_conf_env.map(|conf| beside_slurm_conf(Some(conf), CONF_NAME));
    let local = Path::new(NODE_CONF_DIR).join(CONF_NAME);
    let mut out: Vec<PathBuf> = Vec::new();
    for path in beside_env.into_iter().chain(recorded).chain([local]) {
        if !out.contains(&path) {
            out.push(path);
        }
    }
    out
}

/// This node's `gpu_mps.conf` for `gpu-mps` ([`candidates`], the record
/// root's); `Err`: nowhere, with the places looked at.
pub fn locate(explicit: Option<&Path>) -> Result<PathBuf, Vec<PathBuf>> {
    let env = std::env::var_os("SLURM_CONF").map(PathBuf::from);
    let found = recorded(Path::new(RECORD_DIR), 0);
    first_existing(candidates(explicit, env.as_deref(), found))
}

/// The file an admin command is about: [`locate`]'s, else (none exists)
/// the first place looked at, with every place looked at where the admin
/// named no file (`gpu-mps metrics` then says there is nothing here).
pub fn locate_for_command(explicit: Option<&Path>) -> (PathBuf, Option<Vec<PathBuf>>) {
    match locate(explicit) {
        Ok(conf) => (conf, None),
        Err(looked_at) => {
            let first = looked_at.first().cloned().unwrap_or_default();
            (first, explicit.is_none().then_some(looked_at))
        }
    }
}

/// The line `gpu-mps metrics` says where no `gpu_mps.conf` is found
/// (`looked_at`): nothing to do here, and how to point it at the file
/// where the node does share.
pub fn nothing_here(looked_at: &[PathBuf]) -> String {
    let places: Vec<String> = looked_at.iter().map(|p| p.display().to_string()).collect();
    format!(
        "no {CONF_NAME} at {}: this node shares no GPU, nothing to do. Where it does share and \
         Slurm's configuration is elsewhere, set SLURM_CONF (in /etc/default/slurmd or \
         /etc/sysconfig/slurmd, which the node timer reads as slurmd does) or run a job here \
         once (its prolog records where slurmd's {CONF_NAME} is, in {RECORD_DIR}/{RECORD_FILE})",
        places.join(" nor ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uid() -> u32 {
        std::os::unix::fs::MetadataExt::uid(&fs::metadata(".").unwrap_or_else(|e| panic!("{e}")))
    }

    #[test]
    fn gpu_mps_looks_beside_slurm_conf_then_at_the_record_then_in_etc_slurm() {
        let opt = Path::new("/opt/slurm/etc/gpu_mps.conf");
        let etc = Path::new("/etc/slurm/gpu_mps.conf");
        assert_eq!(candidates(None, None, Some(opt.to_path_buf())), [opt, etc]);
        assert_eq!(
            candidates(
                None,
                Some(Path::new("/srv/slurm/slurm.conf")),
                Some(opt.to_path_buf())
            ),
            [Path::new("/srv/slurm/gpu_mps.conf"), opt, etc]
        );
        // Nothing recorded, no SLURM_CONF: /etc/slurm alone.
        assert_eq!(candidates(None, None, None), [etc]);
        // The same place twice is looked at once.
        assert_eq!(
            candidates(
                None,
                Some(Path::new("/etc/slurm/slurm.conf")),
                Some(etc.to_path_buf())
            ),
            [etc]
        );
        // --conf alone.
        let given = Path::new("/x/g.conf");
        assert_eq!(
            candidates(Some(given), Some(Path::new("/a/slurm.conf")), None),
            [given]
        );
    }

    #[test]
    fn the_record_is_read_back_only_from_its_owners_directory() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let dir = tmp.path().join("gpushare");
        let owner = uid();
        let conf = Path::new("/opt/slurm/etc/gpu_mps.conf");
        assert_eq!(recorded(&dir, owner), None);
        record(&dir, owner, conf).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(recorded(&dir, owner).as_deref(), Some(conf));
        // Another owner's directory is not believed.
        assert_eq!(recorded(&dir, owner.wrapping_add(1)), None);
        // A relative path is never written; a bad record never read.
        record(&dir, owner, Path::new("etc/gpu_mps.conf")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(recorded(&dir, owner).as_deref(), Some(conf));
        fs::write(dir.join(RECORD_FILE), "relative/gpu_mps.conf\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(recorded(&dir, owner), None);
    }

    #[test]
    fn nothing_here_names_every_place_and_the_way_to_point_at_the_file() {
        let line = nothing_here(&[
            PathBuf::from("/etc/slurm/gpu_mps.conf"),
            PathBuf::from("/srv/gpu_mps.conf"),
        ]);
        assert!(line.contains("no gpu_mps.conf at /etc/slurm/gpu_mps.conf nor /srv/gpu_mps.conf"));
        assert!(line.contains("SLURM_CONF"), "{line}");
        assert!(
            line.contains("/var/lib/gpushare/gpu_mps.conf-path"),
            "{line}"
        );
    }
}
