//! The sysadmin path, end to end: `make install` into a staging tree (the
//! install check script verifies the layout and that `make uninstall`
//! removes it all again), then the narrated demo, run from that installed
//! tree on its own throwaway cluster. The demo checks every expected
//! outcome itself and exits non-zero on the first that fails.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// A test given its own staging directory.
type StagedTest = fn(&Path) -> Result<(), String>;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn profile_dir() -> PathBuf {
    testcluster::cluster::build_dir().unwrap_or_default()
}

fn profile() -> String {
    profile_dir()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "debug".into())
}

fn run(name: &str, cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{name}: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("{name} failed ({}):\n{text}", out.status))
    }
}

fn install_layout_and_uninstall(stage: &Path) -> Result<(), String> {
    run(
        "tests/install_tree.sh",
        Command::new("bash")
            .arg(repo().join("tests/install_tree.sh"))
            .arg(stage)
            .env("PROFILE", profile())
            .env("TARGET_DIR", profile_dir())
            .current_dir(repo()),
    )
    .map(drop)
}

fn demo_from_installed_tree(stage: &Path) -> Result<(), String> {
    run(
        "make install",
        Command::new("make")
            .args([
                "install",
                "NOBUILD=1",
                "PREFIX=/usr",
                "PLUGINDIR=/usr/lib/gpushare",
            ])
            .arg(format!("PROFILE={}", profile()))
            .arg(format!("TARGET_DIR={}", profile_dir().display()))
            .arg(format!("DESTDIR={}", stage.display()))
            .current_dir(repo()),
    )?;
    let out = run(
        "gpushare-demo",
        Command::new(profile_dir().join("gpushare-demo"))
            .arg("--root")
            .arg(stage),
    )?;
    print!("{out}");
    if !out.contains("checks passed") {
        return Err("the demo did not report its checks".into());
    }
    Ok(())
}

fn main() -> ExitCode {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let base = std::env::temp_dir().join(format!("gpushare-install-{}", std::process::id()));
    let tests: [(&str, StagedTest); 2] = [
        (
            "make_install_layout_and_uninstall",
            install_layout_and_uninstall,
        ),
        (
            "demo_runs_from_the_installed_tree",
            demo_from_installed_tree,
        ),
    ];
    let (mut passed, mut failed) = (0, 0);
    // Its smoke (GPUSHARE_TEST_SMOKE=1, testcluster::Suite's): the install
    // into this release's plugin directory, not the narrated tour.
    let smoke = std::env::var("GPUSHARE_TEST_SMOKE").as_deref() == Ok("1");
    for (name, test) in tests {
        if filter.as_deref().is_some_and(|f| !name.contains(f)) {
            continue;
        }
        if smoke && name != "make_install_layout_and_uninstall" {
            continue;
        }
        let stage = base.join(name);
        let _ = std::fs::remove_dir_all(&stage);
        match test(&stage) {
            Ok(()) => {
                println!("test {name} ... ok");
                passed += 1;
            }
            Err(e) => {
                println!("test {name} ... FAILED\n{e}");
                failed += 1;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&base);
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
