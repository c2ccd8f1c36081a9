//! The harness refuses to test stale builds: a plugin or node program
//! older than one of the sources it was built from would make a suite test
//! yesterday's code while its report names today's commit.
//!
//! Cargo writes, beside every top-level artifact, a dep-info file
//! (`target/debug/libspank_gpu_mps.d`: `artifact: a.rs b.rs ...`)
//! listing exactly the files it was built from. An artifact is current when
//! none of those files under this checkout is newer than it, and all of
//! them still exist. An artifact without a dep-info file (installed from a
//! package) is taken as it is.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::Result;

/// The checkout the harness was built from (the workspace root).
fn checkout() -> PathBuf {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR"));
    tests.parent().unwrap_or(tests).to_path_buf()
}

/// The dep-info file cargo writes beside `artifact` (following a link to
/// where it was built): `libx.so` → `libx.d`, `prog` → `prog.d`.
fn dep_info(artifact: &Path) -> Option<PathBuf> {
    let real = fs::canonicalize(artifact).ok()?;
    let stem = real.file_stem()?.to_str()?.to_owned();
    Some(real.with_file_name(format!("{stem}.d")))
}

/// The source files a dep-info text names (its first rule: `target: deps`;
/// a space inside a name is written `\ `).
fn sources(text: &str) -> Vec<PathBuf> {
    let Some(line) = text.lines().find(|l| !l.trim().is_empty()) else {
        return Vec::new();
    };
    // The target may itself contain ": " only escaped; split at the first
    // unescaped ": ".
    let Some(at) = line.find(": ") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut word = String::new();
    let mut chars = line[at + 2..].chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&' ') => {
                word.push(' ');
                chars.next();
            }
            ' ' | '\t' => {
                if !word.is_empty() {
                    out.push(PathBuf::from(std::mem::take(&mut word)));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        out.push(PathBuf::from(word));
    }
    out
}

fn modified(path: &Path) -> Option<SystemTime> {
    fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// `Err` naming the first source under `root` that is newer than
/// `artifact` or gone, per the dep-info `text`. What the build generated
/// (under `root/target`: bindgen's bindings, made again for every Slurm
/// release in the shared target directory of `tests/release_plugins.sh`)
/// is not a source.
fn judge(artifact: &Path, built: SystemTime, text: &str, root: &Path) -> Result<()> {
    let generated = root.join("target");
    for source in sources(text) {
        if !source.starts_with(root) || source.starts_with(&generated) {
            continue;
        }
        let stale = match modified(&source) {
            None => format!("{} no longer exists", source.display()),
            Some(t) if t > built => format!("{} changed after it was built", source.display()),
            Some(_) => continue,
        };
        return Err(format!(
            "{} is stale: {stale}. Run `cargo build --workspace` (make check and make test do) so the suites test these sources.",
            artifact.display()
        ));
    }
    Ok(())
}

/// Fails if `artifact` was built by cargo from sources of this checkout
/// that have changed since.
pub fn ensure_current(artifact: &Path) -> Result<()> {
    let Some(info) = dep_info(artifact) else {
        return Ok(());
    };
    let Ok(text) = fs::read_to_string(&info) else {
        return Ok(());
    };
    let Some(built) = modified(artifact) else {
        return Err(format!(
            "{}: cannot read its modification time",
            artifact.display()
        ));
    };
    judge(artifact, built, &text, &checkout())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn dep_info_lists_every_source_with_escaped_spaces() {
        let text = "/t/libx.so: /w/src/a.rs /w/my\\ dir/b.rs\n\n/w/src/a.rs:\n";
        assert_eq!(
            sources(text),
            vec![
                PathBuf::from("/w/src/a.rs"),
                PathBuf::from("/w/my dir/b.rs")
            ]
        );
        assert!(sources("").is_empty());
    }

    #[test]
    fn a_source_newer_than_the_artifact_or_gone_is_stale() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        let src = root.join("lib.rs");
        fs::write(&src, "").expect("write");
        let written = modified(&src).expect("mtime");
        let text = format!(
            "{}: {} /usr/include/stdio.h\n",
            root.join("x.so").display(),
            src.display()
        );
        let artifact = root.join("x.so");
        // Built after the source: current (headers outside the checkout
        // are not judged).
        assert!(judge(&artifact, written + Duration::from_secs(1), &text, root).is_ok());
        // Built before the source changed: stale, and the message says
        // what to run.
        let err =
            judge(&artifact, written - Duration::from_secs(1), &text, root).expect_err("stale");
        assert!(err.contains("lib.rs changed after it was built"), "{err}");
        assert!(err.contains("cargo build --workspace"), "{err}");
        // What the build generated in the checkout's target directory
        // is not a source, however new.
        let generated = format!(
            "{}: {}\n",
            root.join("x.so").display(),
            root.join("target/release/build/s/out/bindings.rs")
                .display()
        );
        assert!(judge(
            &artifact,
            written - Duration::from_secs(1),
            &generated,
            root
        )
        .is_ok());
        fs::remove_file(&src).expect("remove");
        let err = judge(&artifact, written, &text, root).expect_err("gone");
        assert!(err.contains("no longer exists"), "{err}");
    }
}
