//! `gpushare-hw-check` (`make hw-check`) where there is no GPU: one line
//! saying so, exit 1, no report. The checks themselves need a GPU; their
//! non-GPU parts are the binary's unit tests.

use std::path::Path;
use std::process::Command;

#[test]
fn without_a_gpu_it_says_so_in_one_line_and_fails() {
    if Path::new("/dev/nvidia0").exists() {
        eprintln!("skipped: this machine has a GPU (run `make hw-check` as root instead)");
        return;
    }
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let report = dir.path().join("report.md");
    let out = Command::new(env!("CARGO_BIN_EXE_gpushare-hw-check"))
        .arg("--report")
        .arg(&report)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("no NVIDIA GPU here, nothing checked: /dev/nvidia0 does not exist"),
        "{stderr}"
    );
    assert!(!report.exists(), "a report was written without a GPU");
}
