//! A share on a node with no configuration to trust: `gpu_mps.conf` cannot
//! be read whole or is wrong, and no earlier good copy is recorded (the
//! node's first use, or its first share since a reboot emptied `/run`).
//!
//! The prolog refuses the share, but knows no `StateDir` to leave its
//! refusal note in: it leaves it beside the node's ledger pointer
//! ([`NODE_RECORDS_DIR`](crate::mps::in_force::NODE_RECORDS_DIR)), named for
//! the `gpu_mps.conf` path and the job. The SPANK plugin fails the job's
//! tasks with its text, also where the file has been written whole since
//! (the ledger then holds no share of the job, and the tasks would be told
//! that the prolog did not run). The epilog that finds the note knows the
//! share was never placed: nothing to release, so it never drains the node
//! for it. A share without the note may have been placed under a
//! configuration the node can no longer read: that epilog still fails.

use std::fs;
use std::path::{Path, PathBuf};

use super::trust::JobEnv;
use crate::mps::in_force::pointer_files;
use crate::mps::state_dir::{self, Access};

/// The note's name: the pointer's, then `.refused.<job>`.
fn note_name(records: &Path, conf: &Path, job: u32) -> Option<String> {
    let [pointer, _] = pointer_files(records, conf);
    let name = pointer.file_name()?.to_str()?.to_owned();
    Some(format!("{name}.refused.{job}"))
}

fn note_path(records: &Path, conf: &Path, job: u32) -> Option<PathBuf> {
    note_name(records, conf, job).map(|n| records.join(n))
}

/// The prolog's refusal of `env`'s share for want of any configuration
/// (`why`: the in-force reading's words); the text the job's tasks fail
/// with, saying so where the note could not be left.
pub fn refuse_unconfigured(
    records: &Path,
    conf: &Path,
    owner: u32,
    env: &JobEnv,
    why: &str,
) -> String {
    let text = format!("gpu_mps: job {} on node {}: {why}", env.job, env.node);
    let written = note_name(records, conf, env.job)
        .ok_or_else(|| "no name for it".to_owned())
        .and_then(|name| {
            state_dir::ensure(records, owner, Access::Private)
                .and_then(|_| state_dir::replace_file(records, &name, text.as_bytes(), 0o600))
                .map_err(|e| e.to_string())
        });
    match written {
        Ok(()) => text,
        Err(e) => format!("{text} (and the refusal note could not be written: {e})"),
    }
}

/// The note the prolog left for `job` ([`refuse_unconfigured`]), if the
/// directory is one root may trust.
pub fn unconfigured_refusal(records: &Path, conf: &Path, owner: u32, job: u32) -> Option<String> {
    state_dir::check(records, owner, Access::Private).ok()?;
    fs::read_to_string(note_path(records, conf, job)?).ok()
}

/// Takes `job`'s note away (the epilog, and a prolog that placed the
/// share after all); its text, if there was one.
pub fn take_unconfigured_refusal(
    records: &Path,
    conf: &Path,
    owner: u32,
    job: u32,
) -> Option<String> {
    let text = unconfigured_refusal(records, conf, owner, job)?;
    fs::remove_file(note_path(records, conf, job)?).ok()?;
    Some(text)
}

/// The epilog of a share where no configuration can be trusted (`why`):
/// `Ok(line to log)` when the note (`refused`, already taken) says its
/// prolog refused it: it holds nothing. `Err(why the node is unfit)`
/// otherwise: it may hold a share no configuration can release.
pub fn release_unconfigured(job: u32, refused: Option<&str>, why: &str) -> Result<String, String> {
    match refused {
        Some(note) => Ok(format!(
            "job {job}'s share was refused and never placed, nothing to release ({})",
            note.trim()
        )),
        None => Err(format!(
            "node unfit for GPU sharing: the share of job {job} cannot be released: {why}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mps::in_force::{resolve, Role};
    use crate::mps::node::trust::tests::share_env;
    use std::os::unix::fs::MetadataExt;

    struct FirstUse {
        _dir: tempfile::TempDir,
        conf: PathBuf,
        records: PathBuf,
        owner: u32,
    }

    fn first_use(text: &str) -> FirstUse {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let owner = fs::metadata(dir.path()).map(|m| m.uid()).unwrap_or(0);
        let conf = dir.path().join("gpu_mps.conf");
        fs::write(&conf, text).unwrap_or_else(|e| panic!("{e}"));
        FirstUse {
            conf,
            records: dir.path().join("run-gpushare"),
            owner,
            _dir: dir,
        }
    }

    #[test]
    fn a_share_refused_at_first_use_is_told_why_and_its_epilog_releases_nothing() {
        // Cut off mid-line, with no earlier configuration recorded.
        for text in [
            "",
            "UnitsPerGPU=100\nStateDir=/run/gpu-mps-fre",
            "UnitsPerGPU=0\n",
        ] {
            let node = first_use(text);
            let read = resolve(&node.conf, "gpu01", &node.records, node.owner, Role::Placer);
            assert!(read.cfg.is_none(), "{text:?}");
            let why = read.shares_refused.unwrap_or_default();
            assert!(why.contains("no earlier configuration"), "{why}");
            let env = share_env(7, 100);
            let told = refuse_unconfigured(&node.records, &node.conf, node.owner, &env, &why);
            assert_eq!(told, format!("gpu_mps: job 7 on node gpu01: {why}"));
            // The tasks get the prolog's words, whatever the file says now.
            assert_eq!(
                unconfigured_refusal(&node.records, &node.conf, node.owner, 7).as_deref(),
                Some(told.as_str())
            );
            assert_eq!(
                unconfigured_refusal(&node.records, &node.conf, node.owner, 8),
                None
            );
            // The epilog takes the note: nothing held, the node stays up.
            let note = take_unconfigured_refusal(&node.records, &node.conf, node.owner, 7);
            let line = release_unconfigured(7, note.as_deref(), &why);
            assert!(
                line.as_ref().is_ok_and(|l| l.contains("never placed")),
                "{line:?}"
            );
            // Run again, or for a share no prolog refused: it may hold one.
            let note = take_unconfigured_refusal(&node.records, &node.conf, node.owner, 7);
            assert_eq!(note, None);
            assert!(release_unconfigured(7, None, &why)
                .is_err_and(|e| e.contains("cannot be released")));
        }
    }

    #[test]
    fn a_note_is_read_only_from_a_directory_root_may_trust() {
        let node = first_use("");
        let env = share_env(7, 100);
        let told = refuse_unconfigured(&node.records, &node.conf, node.owner, &env, "why");
        assert!(!told.contains("could not be written"), "{told}");
        // Another owner's directory is no place for root's notes.
        assert_eq!(
            unconfigured_refusal(&node.records, &node.conf, node.owner + 1, 7),
            None
        );
        // Another gpu_mps.conf (another cluster's node) has notes of its own.
        let other = node.conf.with_file_name("other.conf");
        assert_eq!(
            unconfigured_refusal(&node.records, &other, node.owner, 7),
            None
        );
    }
}
