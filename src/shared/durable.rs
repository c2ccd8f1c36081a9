//! A file replaced whole and durably: the one way gpushare writes a file
//! that others read while it may change (the node's state, the status copy,
//! `*.prom` files for node_exporter).
//!
//! The new text goes to `<name>.new` in the same directory, created so that
//! it must not exist (`O_CREAT|O_EXCL|O_NOFOLLOW`: a link planted there is
//! never written through), its mode set on the open file (the writer's
//! umask cannot change it), fsynced, renamed over `<name>`, then the
//! directory fsynced: readers see the old or the new file, never half of
//! one, and a crash cannot bring the old one back. A leftover `<name>.new`
//! from a crash is removed first; on any error the temporary file is
//! removed again.

use std::fmt;
use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A step of a replace that failed: what was being done, to which path.
#[derive(Debug)]
pub struct ReplaceError {
    /// What was being done (`create`, `write`, `rename into place`, ...).
    pub action: &'static str,
    pub path: PathBuf,
    pub source: io::Error,
}

impl fmt::Display for ReplaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.action,
            self.path.display(),
            self.source
        )
    }
}

impl std::error::Error for ReplaceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

fn failed<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> ReplaceError + 'a {
    move |source| ReplaceError {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// Replaces `dir/name` with `bytes`, mode `mode`, atomically and durably
/// (see the module doc). Only the writer may be able to write in `dir`:
/// the temporary name `name.new` is fixed.
pub fn replace(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> Result<(), ReplaceError> {
    let temp = dir.join(format!("{name}.new"));
    match fs::remove_file(&temp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(failed("remove leftover", &temp)(e)),
    }
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&temp)
        .map_err(failed("create", &temp))?;
    let path = dir.join(name);
    let written = fill(file, &temp, bytes, mode)
        .and_then(|()| fs::rename(&temp, &path).map_err(failed("rename into place", &path)));
    if written.is_err() {
        // The temporary file is ours (created just now, never a link).
        let _ = fs::remove_file(&temp);
    }
    written?;
    sync_dir(dir)
}

/// Sets the mode of the fresh temporary file, writes it and fsyncs it.
fn fill(mut file: File, temp: &Path, bytes: &[u8], mode: u32) -> Result<(), ReplaceError> {
    // fchmod on the open file: the umask cannot have changed what we chose.
    file.set_permissions(Permissions::from_mode(mode))
        .map_err(failed("set the mode of", temp))?;
    file.write_all(bytes).map_err(failed("write", temp))?;
    file.sync_all().map_err(failed("fsync", temp))
}

/// Makes a rename in `dir` durable: without it a crash can bring back the
/// old directory entry.
pub fn sync_dir(dir: &Path) -> Result<(), ReplaceError> {
    File::open(dir)
        .and_then(|handle| handle.sync_all())
        .map_err(failed("fsync directory", dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, MetadataExt};

    fn names(dir: &Path) -> Vec<std::ffi::OsString> {
        let mut names: Vec<_> = fs::read_dir(dir)
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    #[test]
    fn never_follows_a_planted_link_and_sets_the_mode() {
        let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let victim = temp.path().join("victim");
        fs::write(&victim, "root's own data").unwrap_or_else(|e| panic!("{e}"));
        let dir = temp.path().join("d");
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
        // A link where the temporary file goes: removed, never written through.
        symlink(&victim, dir.join("state.new")).unwrap_or_else(|e| panic!("{e}"));
        replace(&dir, "state", b"{}", 0o640).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            fs::read_to_string(&victim).unwrap_or_default(),
            "root's own data"
        );
        assert_eq!(
            fs::read_to_string(dir.join("state")).unwrap_or_default(),
            "{}"
        );
        let mode = fs::metadata(dir.join("state"))
            .map(|m| m.mode() & 0o777)
            .unwrap_or(0);
        assert_eq!(mode, 0o640);
        assert_eq!(names(&dir), vec![std::ffi::OsString::from("state")]);
    }

    #[test]
    fn files_are_replaced_whole_and_no_temporary_is_left() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        fs::write(dir.path().join("m.prom.new"), "leftover").unwrap_or_else(|e| panic!("{e}"));
        replace(dir.path(), "m.prom", b"a 1\n", 0o644).unwrap_or_else(|e| panic!("{e}"));
        replace(dir.path(), "m.prom", b"a 2\n", 0o644).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            fs::read_to_string(dir.path().join("m.prom")).unwrap_or_default(),
            "a 2\n"
        );
        assert_eq!(names(dir.path()), vec![std::ffi::OsString::from("m.prom")]);
    }

    #[test]
    fn a_failed_replace_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        replace(dir.path(), "state", b"old", 0o600).unwrap_or_else(|e| panic!("{e}"));
        // A directory in the final file's place: the rename fails after
        // the temporary file was written.
        fs::create_dir(dir.path().join("busy")).unwrap_or_else(|e| panic!("{e}"));
        fs::write(dir.path().join("busy/x"), "").unwrap_or_else(|e| panic!("{e}"));
        let err = replace(dir.path(), "busy", b"new", 0o600).err();
        assert!(
            matches!(
                &err,
                Some(ReplaceError {
                    action: "rename into place",
                    ..
                })
            ),
            "{err:?}"
        );
        assert!(!dir.path().join("busy.new").exists());
        assert_eq!(
            fs::read_to_string(dir.path().join("state")).unwrap_or_default(),
            "old"
        );
        assert_eq!(
            names(dir.path()),
            vec![
                std::ffi::OsString::from("busy"),
                std::ffi::OsString::from("state")
            ]
        );
    }
}
