//! A file replaced whole and durably: the one way gpushare writes a file
//! that others read while it may change (the node's state, the status copy,
//! `*.prom` files for node_exporter, the users' command cache).
//!
//! The new text goes to a temporary file of its writer's own in the same
//! directory, `<name>.<pid>.<n>.<random>.new` ([`temp_name`]), created so
//! that it must not exist (`O_CREAT|O_EXCL|O_NOFOLLOW`: a link planted there
//! is never written through; a name taken is tried again with another),
//! its mode set on the open file (the writer's umask cannot change it),
//! fsynced, renamed over `<name>`, then the directory fsynced: readers see
//! the old or the new file, never half of one, and a crash cannot bring the
//! old one back. Two writers of one file never meet on a temporary name:
//! each rename is whole, and the last one stays. On any error the writer's
//! temporary file is removed again; what a crashed writer left is removed
//! by a later replace of the same file once it is [`STALE`] (and
//! `<name>.new`, the fixed name of gpushare 0.2.0 and earlier, at once).

use std::collections::hash_map::RandomState;
use std::fmt;
use std::fs::{self, File, OpenOptions, Permissions};
use std::hash::BuildHasher;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// A step of a replace that failed: what was being done, to which path.
/// A step on the temporary file names the file being replaced (the
/// temporary name is new each time: the same trouble must read the same,
/// for those who log an error once until it changes).
#[derive(Debug)]
pub struct ReplaceError {
    /// What was being done (`create a temporary file for`, `write the new
    /// copy of`, `rename into place`, ...).
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

/// A temporary file older than this was left by a writer that died
/// before its rename: no write takes that long.
pub const STALE: Duration = Duration::from_secs(15 * 60);

/// Names taken in a row before a replace gives up (each is random: a
/// second is already unlikely).
const TRIES: u32 = 16;

/// The writes of this process so far: with the pid, a name no other
/// writer of this process or machine is using.
static WRITES: AtomicU64 = AtomicU64::new(0);

/// The temporary name of one write of `name`: `<name>.<pid>.<n>.<random>.new`.
/// The pid and the process's count of writes keep the writers of one
/// machine apart; the random part (std's per-process random hash keys)
/// those of pid namespaces or hosts that share the directory.
fn temp_name(name: &str) -> String {
    let n = WRITES.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let random = RandomState::new().hash_one((pid, n, SystemTime::now()));
    format!("{name}.{pid}.{n}.{random:016x}.new")
}

/// Whether `file` is a temporary name [`temp_name`] gives for `name`.
fn is_temp_of(file: &str, name: &str) -> bool {
    let Some(middle) = file
        .strip_prefix(name)
        .and_then(|r| r.strip_prefix('.'))
        .and_then(|r| r.strip_suffix(".new"))
    else {
        return false;
    };
    let parts: Vec<&str> = middle.split('.').collect();
    match parts.as_slice() {
        [pid, n, random] => {
            pid.parse::<u32>().is_ok()
                && n.parse::<u64>().is_ok()
                && random.len() == 16
                && random.bytes().all(|b| b.is_ascii_hexdigit())
        }
        _ => false,
    }
}

/// The temporary file of one write: removed when dropped, unless it was
/// renamed into place.
struct Temp {
    path: PathBuf,
    placed: bool,
}

impl Drop for Temp {
    fn drop(&mut self) {
        if !self.placed {
            // Ours: created just now with O_EXCL, never a link.
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Creates a temporary file of this writer's own for `dir/name`.
fn create_temp(dir: &Path, name: &str, mode: u32) -> Result<(File, Temp), ReplaceError> {
    let target = dir.join(name);
    let mut tries = 0;
    loop {
        let path = dir.join(temp_name(name));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        {
            Ok(file) => {
                let temp = Temp {
                    path,
                    placed: false,
                };
                return Ok((file, temp));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries + 1 < TRIES => {
                tries += 1;
            }
            Err(e) => return Err(failed("create a temporary file for", &target)(e)),
        }
    }
}

/// Replaces `dir/name` with `bytes`, mode `mode`, atomically and durably
/// (see the module doc). Only the writers of the file may be able to
/// write in `dir`; any number of them may replace it at once.
pub fn replace(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> Result<(), ReplaceError> {
    let legacy = dir.join(format!("{name}.new"));
    match fs::remove_file(&legacy) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(failed("remove leftover", &legacy)(e)),
    }
    let (file, mut temp) = create_temp(dir, name, mode)?;
    let path = dir.join(name);
    fill(file, &path, bytes, mode)?;
    fs::rename(&temp.path, &path).map_err(failed("rename into place", &path))?;
    temp.placed = true;
    sync_dir(dir)?;
    remove_stale(dir, name, SystemTime::now());
    Ok(())
}

/// Removes the temporary files of `name` in `dir` that writers which died
/// before their rename left, those last changed [`STALE`] before `now`.
/// Best effort: what cannot be listed or removed is left.
fn remove_stale(dir: &Path, name: &str, now: SystemTime) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file = entry.file_name();
        if !file.to_str().is_some_and(|f| is_temp_of(f, name)) {
            continue;
        }
        // Of the entry itself, never of what a link points at.
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|changed| now.duration_since(changed).is_ok_and(|age| age >= STALE));
        if old {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Sets the mode of the fresh temporary file, the new copy of `target`,
/// writes it and fsyncs it.
fn fill(mut file: File, target: &Path, bytes: &[u8], mode: u32) -> Result<(), ReplaceError> {
    // fchmod on the open file: the umask cannot have changed what we chose.
    file.set_permissions(Permissions::from_mode(mode))
        .map_err(failed("set the mode of the new copy of", target))?;
    file.write_all(bytes)
        .map_err(failed("write the new copy of", target))?;
    file.sync_all()
        .map_err(failed("fsync the new copy of", target))
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

    /// Two writers of one file, many times each, a reader beside them:
    /// no writer fails (a temporary name of its own each time), every
    /// read is one whole version, and no temporary file is left.
    #[test]
    fn writers_of_one_file_at_once_never_collide() {
        const WRITES: usize = 300;
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("state");
        // A version: its tag on every line, 64 lines.
        let version = |writer: usize, i: usize| format!("{writer}-{i}\n").repeat(64);
        replace(dir.path(), "state", version(9, 0).as_bytes(), 0o600)
            .unwrap_or_else(|e| panic!("{e}"));
        let done = std::sync::atomic::AtomicBool::new(false);
        let (errors, torn) = std::thread::scope(|scope| {
            let writers: Vec<_> = (0..2)
                .map(|writer| {
                    let dir = dir.path();
                    scope.spawn(move || {
                        (0..WRITES)
                            .filter_map(|i| {
                                replace(dir, "state", version(writer, i).as_bytes(), 0o600)
                                    .err()
                                    .map(|e| e.to_string())
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            let reader = scope.spawn(|| {
                let mut torn = Vec::new();
                while !done.load(Ordering::Relaxed) {
                    let text = fs::read_to_string(&path).unwrap_or_default();
                    let first = text.lines().next().unwrap_or_default();
                    if text.lines().count() != 64 || text.lines().any(|l| l != first) {
                        torn.push(text);
                    }
                }
                torn
            });
            let errors: Vec<String> = writers
                .into_iter()
                .flat_map(|w| w.join().unwrap_or_else(|_| vec!["panicked".into()]))
                .collect();
            done.store(true, Ordering::Relaxed);
            (errors, reader.join().unwrap_or_default())
        });
        assert!(errors.is_empty(), "{errors:?}");
        assert!(
            torn.is_empty(),
            "{} torn reads: {:?}",
            torn.len(),
            torn.first()
        );
        let last = fs::read_to_string(&path).unwrap_or_default();
        assert!(
            last == version(0, WRITES - 1) || last == version(1, WRITES - 1),
            "{last}"
        );
        assert_eq!(names(dir.path()), vec![std::ffi::OsString::from("state")]);
    }

    #[test]
    fn temporary_names_are_each_writers_own() {
        let a = temp_name("m.prom");
        let b = temp_name("m.prom");
        assert_ne!(a, b);
        assert!(a.starts_with(&format!("m.prom.{}.", std::process::id())));
        assert!(is_temp_of(&a, "m.prom") && is_temp_of(&b, "m.prom"));
        for other in [
            "m.prom",
            "m.prom.new",
            "state.corrupt-1.new",
            "m.prom.1.2.x.new",
            "m.prom.1.2.0123456789abcdef",
            "m.prom.1.2.0123456789abcdef.new.bak",
        ] {
            assert!(!is_temp_of(other, "m.prom"), "{other}");
        }
        assert!(!is_temp_of(&a, "m"));
    }

    /// What a writer that died before its rename left is removed by a
    /// later replace once it is stale; a temporary file of a writer at work
    /// now, and every other file, are left.
    #[test]
    fn stale_temporaries_of_dead_writers_are_removed() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let left = temp_name("state");
        let other = temp_name("counters");
        for file in [&left, &other, &"state.corrupt-1".to_owned()] {
            fs::write(dir.path().join(file), "x").unwrap_or_else(|e| panic!("{e}"));
        }
        // Just written: a writer at work.
        replace(dir.path(), "state", b"new", 0o600).unwrap_or_else(|e| panic!("{e}"));
        assert!(dir.path().join(&left).exists());
        remove_stale(dir.path(), "state", SystemTime::now() + STALE);
        assert!(!dir.path().join(&left).exists());
        assert!(dir.path().join(&other).exists());
        assert!(dir.path().join("state.corrupt-1").exists());
    }

    /// The same trouble reads the same each time, though each try has a
    /// temporary name of its own.
    #[test]
    fn a_failed_create_names_the_file_being_replaced() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let missing = dir.path().join("gone");
        let first = replace(&missing, "m.prom", b"a 1\n", 0o644).err();
        let again = replace(&missing, "m.prom", b"a 1\n", 0o644).err();
        let text = first.map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(Some(&text), again.map(|e| e.to_string()).as_ref());
        assert!(
            text.starts_with(&format!(
                "create a temporary file for {}: ",
                missing.join("m.prom").display()
            )),
            "{text}"
        );
    }

    /// A write that fails leaves no temporary file of its own.
    #[test]
    fn a_failed_write_removes_its_temporary() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (file, temp) =
            create_temp(dir.path(), "state", 0o600).unwrap_or_else(|e| panic!("{e}"));
        let path = temp.path.clone();
        assert!(path.exists());
        drop(file);
        drop(temp);
        assert!(!path.exists());
        assert!(names(dir.path()).is_empty());
    }
}
