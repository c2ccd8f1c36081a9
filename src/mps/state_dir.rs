//! The node's state directories, made so that no user can turn them
//! against root.
//!
//! The prolog, epilog and SPANK plugin run as root and write under
//! `StateDir` (root only: the ledger) and `<StateDir>-mps` (world-readable:
//! MPS pipes and logs, the published status). If a user could plant a
//! symbolic link or a file there, root would follow it. So every directory
//! is either created here (mode set explicitly, not left to the umask) or
//! checked: a real directory, not a link, owned by the expected user, not
//! writable by group or others (and, for a private one, not readable
//! either). Files are replaced by writing a new file that must not exist
//! (`O_CREAT|O_EXCL|O_NOFOLLOW`), setting its mode on the open file,
//! fsyncing, and renaming it into place, then fsyncing the directory:
//! readers see the old or the new file, never half of one.

use std::fmt;
use std::fs::{self, DirBuilder, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::lock_wait::{self, LockWait, Mode};
use crate::shared::durable;

/// Who may look into a state directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Mode 0700: the ledger, refusal notes.
    Private,
    /// Mode 0755: what jobs and users must reach (MPS pipes, the status copy).
    WorldReadable,
}

impl Access {
    fn mode(self) -> u32 {
        match self {
            Access::Private => 0o700,
            Access::WorldReadable => 0o755,
        }
    }

    /// Permission bits a directory of this kind must not have.
    fn forbidden(self) -> u32 {
        match self {
            Access::Private => 0o077,
            Access::WorldReadable => 0o022,
        }
    }
}

/// Why a state directory or file cannot be used.
#[derive(Debug)]
pub enum DirError {
    IsSymlink(PathBuf),
    NotADirectory(PathBuf),
    WrongOwner {
        dir: PathBuf,
        owner: u32,
        expected: u32,
    },
    TooOpen {
        dir: PathBuf,
        mode: u32,
        access: Access,
    },
    /// A directory above `dir` that another user could change: they could
    /// move `dir` away and put their own in its place.
    UnsafeParent {
        dir: PathBuf,
        parent: PathBuf,
        owner: u32,
        mode: u32,
    },
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

impl fmt::Display for DirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DirError::IsSymlink(dir) => write!(
                f,
                "state directory {} is a symbolic link; refusing to use it (remove the link \
                 and gpushare creates the directory)",
                dir.display()
            ),
            DirError::NotADirectory(dir) => write!(
                f,
                "state directory {} exists but is not a directory; refusing to use it \
                 (remove it, or point StateDir in gpu_mps.conf elsewhere)",
                dir.display()
            ),
            DirError::WrongOwner {
                dir,
                owner,
                expected,
            } => write!(
                f,
                "state directory {} is owned by uid {owner}, not uid {expected}; refusing to \
                 use it (another user could change the sharing state: remove it and gpushare \
                 recreates it)",
                dir.display()
            ),
            DirError::TooOpen { dir, mode, access } => write!(
                f,
                "state directory {} has mode {mode:04o}, which lets other users {}; refusing \
                 to use it (run: chmod {:04o} {})",
                dir.display(),
                match access {
                    Access::Private => "in",
                    Access::WorldReadable => "write to it",
                },
                access.mode(),
                dir.display()
            ),
            DirError::UnsafeParent {
                dir,
                parent,
                owner,
                mode,
            } => write!(
                f,
                "state directory {} lies under {} (owner uid {owner}, mode {mode:04o}), which \
                 a user other than root could change, and so replace the state directory; \
                 refusing to use it (make {} owned by root and not writable by group or \
                 others, or point StateDir in gpu_mps.conf elsewhere)",
                dir.display(),
                parent.display(),
                parent.display()
            ),
            DirError::Io {
                action,
                path,
                source,
            } => write!(f, "cannot {action} {}: {source}", path.display()),
        }
    }
}

impl std::error::Error for DirError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DirError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

pub(crate) fn io_error(action: &'static str, path: &Path, source: io::Error) -> DirError {
    DirError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// Checks that `dir` is a directory `owner` may trust (see the module doc).
pub fn check(dir: &Path, owner: u32, access: Access) -> Result<(), DirError> {
    let meta = fs::symlink_metadata(dir).map_err(|e| io_error("inspect", dir, e))?;
    if meta.file_type().is_symlink() {
        return Err(DirError::IsSymlink(dir.to_path_buf()));
    }
    if !meta.is_dir() {
        return Err(DirError::NotADirectory(dir.to_path_buf()));
    }
    if meta.uid() != owner {
        return Err(DirError::WrongOwner {
            dir: dir.to_path_buf(),
            owner: meta.uid(),
            expected: owner,
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & access.forbidden() != 0 {
        return Err(DirError::TooOpen {
            dir: dir.to_path_buf(),
            mode,
            access,
        });
    }
    Ok(())
}

/// Checks that no directory above `dir` can be changed by a user other
/// than root or `owner`: each one on the path as written (a link there
/// must be theirs too) and on the path it resolves to is owned by one of
/// them and writable by nobody else, unless its sticky bit keeps others
/// from renaming what is not theirs (`/tmp`).
pub fn check_parents(dir: &Path, owner: u32) -> Result<(), DirError> {
    let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) else {
        return Ok(());
    };
    let resolved = fs::canonicalize(parent).map_err(|e| io_error("resolve", parent, e))?;
    let written = parent.ancestors().map(|p| (p, false));
    let real = resolved.ancestors().map(|p| (p, true));
    for (p, follow) in written.chain(real) {
        if p.as_os_str().is_empty() {
            continue;
        }
        let meta = if follow {
            fs::metadata(p)
        } else {
            fs::symlink_metadata(p)
        }
        .map_err(|e| io_error("inspect", p, e))?;
        let mode = meta.mode() & 0o7777;
        let trusted = meta.uid() == 0 || meta.uid() == owner;
        // A link's own mode means nothing; what it points to is checked
        // on the resolved path.
        let open = !meta.file_type().is_symlink() && mode & 0o022 != 0 && mode & 0o1000 == 0;
        if !trusted || open {
            return Err(DirError::UnsafeParent {
                dir: dir.to_path_buf(),
                parent: p.to_path_buf(),
                owner: meta.uid(),
                mode,
            });
        }
    }
    Ok(())
}

/// Creates `dir` (and missing parents) when it does not exist, then
/// [`check`]s it and the directories above it ([`check_parents`]).
/// Returns whether it was created.
pub fn ensure(dir: &Path, owner: u32, access: Access) -> Result<bool, DirError> {
    let created = match fs::symlink_metadata(dir) {
        Ok(_) => false,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent() {
                fs::create_dir_all(parent).map_err(|e| io_error("create", parent, e))?;
            }
            check_parents(dir, owner)?;
            match DirBuilder::new().mode(access.mode()).create(dir) {
                Ok(()) => {
                    // The umask may have taken bits; set them on what we made.
                    fs::set_permissions(dir, Permissions::from_mode(access.mode()))
                        .map_err(|e| io_error("set the mode of", dir, e))?;
                    true
                }
                // Another process made it first: check theirs.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
                Err(e) => return Err(io_error("create", dir, e)),
            }
        }
        Err(e) => return Err(io_error("inspect", dir, e)),
    };
    if !created {
        check_parents(dir, owner)?;
    }
    check(dir, owner, access)?;
    Ok(created)
}

/// Replaces `dir/name` with `bytes` (mode `mode`), atomically and durably
/// ([`durable::replace`]). `dir` must be a checked directory (nobody else
/// can write in it); each writer writes a temporary file of its own, and
/// what a crashed one left is removed once stale.
pub fn replace_file(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> Result<(), DirError> {
    durable::replace(dir, name, bytes, mode).map_err(from_durable)
}

fn from_durable(e: durable::ReplaceError) -> DirError {
    DirError::Io {
        action: e.action,
        path: e.path,
        source: e.source,
    }
}

/// The mode of a file that shows who runs what: 0600 where the node keeps
/// that private (`Some(true)`), 0644 where it does not; where it is not
/// known (`None`), the mode `existing` has if it is root's alone, so an
/// unknown never opens up what was closed.
pub fn view_mode(private: Option<bool>, existing: &Path) -> u32 {
    match private {
        Some(true) => 0o600,
        Some(false) => 0o644,
        None => match fs::metadata(existing) {
            Ok(m) if m.mode() & 0o077 == 0 => 0o600,
            _ => 0o644,
        },
    }
}

/// Rewrites the small record `name` in `dir` under the lock file
/// `lock_name` beside it: `change` gets its text (empty where there is
/// none) and returns the new text with its own result. A record is
/// replaced whole ([`replace_file`], mode 0600) only where its text
/// changed, and removed where the new text is empty. The lock is waited
/// for as `wait` allows ([`lock_wait`]); `what` names it.
pub fn update_locked<T>(
    dir: &Path,
    (lock_name, what): (&str, &str),
    name: &str,
    wait: LockWait,
    change: impl FnOnce(&str) -> (String, T),
) -> Result<T, String> {
    let lock_path = dir.join(lock_name);
    let _held =
        lock_wait::lock(&lock_path, what, Mode::Exclusive, wait).map_err(|e| e.to_string())?;
    let path = dir.join(name);
    let before = fs::read_to_string(&path).unwrap_or_default();
    let (after, out) = change(&before);
    if after != before {
        if after.is_empty() {
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("{}: {e}", path.display())),
            }
        } else {
            replace_file(dir, name, after.as_bytes(), 0o600).map_err(|e| e.to_string())?;
        }
    }
    Ok(out)
}

/// Makes a rename in `dir` durable: without it a crash can bring back the
/// old directory entry.
pub fn sync_dir(dir: &Path) -> Result<(), DirError> {
    durable::sync_dir(dir).map_err(from_durable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn owner(dir: &Path) -> u32 {
        fs::metadata(dir).map(|m| m.uid()).unwrap_or(u32::MAX)
    }

    #[test]
    fn created_with_exact_modes_and_checked_afterwards() {
        let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let me = owner(temp.path());
        let private = temp.path().join("run/gpu-mps");
        let public = temp.path().join("run/gpu-mps-mps");
        assert!(matches!(ensure(&private, me, Access::Private), Ok(true)));
        assert!(matches!(
            ensure(&public, me, Access::WorldReadable),
            Ok(false | true)
        ));
        let mode = |p: &Path| fs::metadata(p).map(|m| m.mode() & 0o7777).unwrap_or(0);
        assert_eq!((mode(&private), mode(&public)), (0o700, 0o755));
        assert!(matches!(ensure(&private, me, Access::Private), Ok(false)));
        assert!(matches!(
            ensure(&private, me.wrapping_add(1), Access::Private),
            Err(DirError::WrongOwner { .. })
        ));
        fs::set_permissions(&public, Permissions::from_mode(0o777))
            .unwrap_or_else(|e| panic!("{e}"));
        let err = check(&public, me, Access::WorldReadable).err();
        assert!(
            matches!(err, Some(DirError::TooOpen { mode: 0o777, .. })),
            "{err:?}"
        );
        let link = temp.path().join("link");
        symlink(&private, &link).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            check(&link, me, Access::Private),
            Err(DirError::IsSymlink(_))
        ));
    }

    #[test]
    fn a_state_dir_under_a_directory_others_can_change_is_refused() {
        let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let me = owner(temp.path());
        let parent = temp.path().join("run");
        fs::create_dir(&parent).unwrap_or_else(|e| panic!("{e}"));
        let dir = parent.join("gpu-mps");
        assert!(ensure(&dir, me, Access::Private).is_ok());
        // Writable by everyone: anyone could move the ledger's directory
        // away and put theirs in its place.
        fs::set_permissions(&parent, Permissions::from_mode(0o777))
            .unwrap_or_else(|e| panic!("{e}"));
        let err = ensure(&dir, me, Access::Private).err();
        assert!(
            matches!(&err, Some(DirError::UnsafeParent { parent: p, mode: 0o777, .. }) if *p == parent),
            "{err:?}"
        );
        assert!(err.is_some_and(|e| e.to_string().contains("writable by group or others")));
        // Not yet made, under an open parent: refused before it is made.
        let fresh = parent.join("fresh/gpu-mps");
        assert!(matches!(
            ensure(&fresh, me, Access::Private),
            Err(DirError::UnsafeParent { .. })
        ));
        assert!(!fresh.exists());
        // The sticky bit (as on /tmp) keeps others from renaming it: allowed.
        fs::set_permissions(&parent, Permissions::from_mode(0o1777))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(ensure(&dir, me, Access::Private).is_ok());
        // Reached through a link to an open directory: the resolved path
        // is checked too.
        let open = temp.path().join("open");
        fs::create_dir(&open).unwrap_or_else(|e| panic!("{e}"));
        fs::set_permissions(&open, Permissions::from_mode(0o777)).unwrap_or_else(|e| panic!("{e}"));
        symlink(&open, temp.path().join("via")).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            ensure(&temp.path().join("via/gpu-mps"), me, Access::Private),
            Err(DirError::UnsafeParent { parent: p, .. }) if p == open
        ));
    }

    #[test]
    fn a_state_dir_under_another_users_directory_is_refused() {
        let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let me = owner(temp.path());
        let theirs = temp.path().join("home");
        fs::create_dir(&theirs).unwrap_or_else(|e| panic!("{e}"));
        // Only root can give a directory away; elsewhere `me` plays root's
        // part and another uid stands for the user.
        let user = if me == 0 { 65534 } else { me };
        let trusted_owner = if me == 0 { 0 } else { me.wrapping_add(1) };
        if me == 0 {
            std::os::unix::fs::chown(&theirs, Some(user), None).unwrap_or_else(|e| panic!("{e}"));
        }
        let err = check_parents(&theirs.join("gpu-mps"), trusted_owner).err();
        assert!(
            matches!(&err, Some(DirError::UnsafeParent { owner, .. }) if *owner == user),
            "{err:?}"
        );
    }

    #[test]
    fn an_unknown_privacy_never_opens_a_closed_file() {
        let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = temp.path().join("state");
        assert_eq!(view_mode(None, &file), 0o644);
        fs::write(&file, "{}").unwrap_or_else(|e| panic!("{e}"));
        fs::set_permissions(&file, Permissions::from_mode(0o600)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(view_mode(None, &file), 0o600);
        assert_eq!(view_mode(Some(false), &file), 0o644);
        fs::set_permissions(&file, Permissions::from_mode(0o644)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(view_mode(None, &file), 0o644);
        assert_eq!(view_mode(Some(true), &file), 0o600);
    }

    #[test]
    fn replace_file_sets_the_mode_and_names_the_step_that_failed() {
        let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let dir = temp.path().join("d");
        ensure(&dir, owner(temp.path()), Access::WorldReadable).unwrap_or_else(|e| panic!("{e}"));
        replace_file(&dir, "state", b"{}", 0o644).unwrap_or_else(|e| panic!("{e}"));
        let mode = fs::metadata(dir.join("state"))
            .map(|m| m.mode() & 0o777)
            .unwrap_or(0);
        assert_eq!(mode, 0o644);
        // A directory in the file's place: the rename is refused.
        fs::create_dir_all(dir.join("busy/x")).unwrap_or_else(|e| panic!("{e}"));
        let err = replace_file(&dir, "busy", b"{}", 0o600).err();
        assert!(
            matches!(&err, Some(DirError::Io { action: "rename into place", path, .. }) if *path == dir.join("busy")),
            "{err:?}"
        );
        assert!(err.is_some_and(|e| e.to_string().starts_with("cannot rename into place ")));
        assert!(!dir.join("busy.new").exists());
    }
}
