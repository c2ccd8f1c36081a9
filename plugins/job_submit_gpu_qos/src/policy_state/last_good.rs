//! The copy of the last good `gpu_qos.conf` in slurmctld's
//! `StateSaveLocation` (`gpushare::qos::config::last_good` decides; this
//! file reads slurmctld's setting and the copy, and writes it).
//!
//! The copy is read at `init()` only where the file is bad, and written
//! by the reload thread (never on the submit path, never in `init()`)
//! whenever the version in force is the file's and its bytes differ from
//! the copy's: replaced whole (`shared::durable`), so neither this
//! controller nor a backup sharing the directory ever reads half of one.
//! slurmctld runs as its `SlurmUser`, whose directory it is.

use std::io;
use std::path::{Path, PathBuf};

use gpushare::qos::config::last_good::{CopyRead, COPY_MODE};
use gpushare::shared::durable;
use gpushare::shared::watched::{read_settled, Expect};
use slurm_plugin::slurm_str::opt_str;

/// slurmctld's `StateSaveLocation` (None outside a daemon, or unset).
pub(super) fn daemon_state_save_location() -> Option<PathBuf> {
    // SAFETY: `slurm_conf` is the daemon's global configuration, filled
    // before any plugin is loaded and not freed while plugins run; only
    // the pointer is read and the string it points to copied (as
    // lib.rs reads `slurm_conf` and `cluster_name`). The field is in
    // slurm_conf_t in every release from 22.05 to 26.05.
    let dir = unsafe { (*std::ptr::addr_of!(slurm_sys::slurm_conf)).state_save_location };
    // SAFETY: NULL or a NUL-terminated string owned by the daemon.
    unsafe { opt_str(dir) }
        .map(|d| PathBuf::from(d.into_owned()))
        .filter(|d| !d.as_os_str().is_empty())
}

/// Reads the copy at `path` whole (never a half-written one).
pub(super) fn read(path: &Path) -> CopyRead {
    match read_settled(path, Expect::AnyText) {
        Ok(Ok(settled)) => CopyRead::Text(settled.text),
        Ok(Err(why)) => CopyRead::Unreadable(why.to_string()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => CopyRead::Absent,
        Err(e) => CopyRead::Unreadable(e.to_string()),
    }
}

/// What a call of [`Keeper::keep`] has to say.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Said {
    Info(String),
    Error(String),
}

/// The copy's writer, in the reload thread: what the copy holds as far
/// as it knows, and the error it logged last.
#[derive(Debug)]
pub(super) struct Keeper {
    path: Option<PathBuf>,
    /// The copy's text; `None` until read (the first keep reads it).
    on_disk: Option<Option<String>>,
    failing: Option<String>,
}

impl Keeper {
    /// A keeper of the copy at `path` (none: slurmctld has no
    /// `StateSaveLocation`, nothing is kept), holding `on_disk` if it
    /// was read already.
    pub(super) fn new(path: Option<PathBuf>, on_disk: Option<&CopyRead>) -> Self {
        Self {
            path,
            on_disk: on_disk.map(|read| match read {
                CopyRead::Text(text) => Some(text.clone()),
                _ => None,
            }),
            failing: None,
        }
    }

    /// After a poll: `in_force` (the text of the file's version in
    /// force, none while the copy or no file stands in) written to the
    /// copy if its bytes changed. Each distinct failure is said once,
    /// and tried again at each poll.
    pub(super) fn keep(&mut self, in_force: Option<&str>) -> Option<Said> {
        let path = self.path.as_deref()?;
        let in_force = in_force?;
        let on_disk = self.on_disk.get_or_insert_with(|| match read(path) {
            CopyRead::Text(text) => Some(text),
            _ => None,
        });
        if !gpushare::qos::config::last_good::needs_copy(Some(in_force), on_disk.as_deref()) {
            return None;
        }
        let (dir, name) = (path.parent()?, path.file_name()?.to_string_lossy());
        match durable::replace(dir, &name, in_force.as_bytes(), COPY_MODE) {
            Ok(()) => {
                *on_disk = Some(in_force.to_owned());
                let again = if self.failing.take().is_some() {
                    " again"
                } else {
                    ""
                };
                Some(Said::Info(format!(
                    "kept{again} the last good gpu_qos.conf in {}",
                    path.display()
                )))
            }
            Err(e) => {
                let e = format!(
                    "cannot keep the last good gpu_qos.conf: {e} (a bad file at the next start \
                     would put in force the policy without it; tried again at each poll)"
                );
                let repeated = self.failing.as_deref() == Some(e.as_str());
                self.failing = Some(e.clone());
                (!repeated).then_some(Said::Error(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpushare::qos::config::last_good::COPY_NAME;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    /// A directory of this test's own, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir()
                .join(format!("gpushare-last-good-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            Self(dir)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn the_copy_is_written_when_the_good_version_changes_and_read_whole() {
        let dir = TempDir::new("written");
        let path = dir.path().join(COPY_NAME);
        assert_eq!(read(&path), CopyRead::Absent);
        let mut k = Keeper::new(Some(path.clone()), None);
        let said = k.keep(Some("A=1\n"));
        assert!(
            matches!(&said, Some(Said::Info(l)) if l.contains(COPY_NAME)),
            "{said:?}"
        );
        assert_eq!(read(&path), CopyRead::Text("A=1\n".into()));
        let mode = fs::metadata(&path).map(|m| m.permissions().mode() & 0o777);
        assert_eq!(mode.ok(), Some(COPY_MODE));
        // Unchanged, or no file's version in force: nothing written.
        assert_eq!(k.keep(Some("A=1\n")), None);
        assert_eq!(k.keep(None), None);
        // A new keeper (a restart) finds the same bytes: not rewritten.
        let mut again = Keeper::new(Some(path.clone()), None);
        assert_eq!(again.keep(Some("A=1\n")), None);
        assert!(again.keep(Some("A=2\n")).is_some());
        assert_eq!(read(&path), CopyRead::Text("A=2\n".into()));
        // No StateSaveLocation: nothing kept.
        assert_eq!(Keeper::new(None, None).keep(Some("A=1\n")), None);
    }

    #[test]
    fn a_copy_that_cannot_be_written_is_said_once_and_tried_again() {
        let dir = TempDir::new("unwritable");
        let path = dir.path().join("gone").join(COPY_NAME);
        let mut k = Keeper::new(Some(path.clone()), None);
        assert!(matches!(k.keep(Some("A=1\n")), Some(Said::Error(_))));
        assert_eq!(k.keep(Some("A=1\n")), None, "said once");
        fs::create_dir(dir.path().join("gone")).unwrap_or_else(|e| panic!("{e}"));
        let said = k.keep(Some("A=1\n"));
        assert!(
            matches!(&said, Some(Said::Info(l)) if l.contains("kept again")),
            "{said:?}"
        );
    }
}
