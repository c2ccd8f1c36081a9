//! `gpushare-hw-check` (`make hw-check`) where there is no GPU: one line
//! saying so, exit 1, no report. The checks themselves need a GPU; their
//! non-GPU parts are the binary's unit tests, and the per-share use check
//! runs here against stand-ins (`--usage-standin`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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

/// The per-share use check without a GPU: the release node programs and
/// `gpu-mps metrics --write`, two `sleep` processes as the clients in job
/// cgroups named as Slurm names them (this machine's cgroup v1 or v2),
/// NVML's figures for their pids from the stand-in (the utilisation
/// samples under the server's pid, as on a GPU). Its four lines pass
/// (each share's memory is its client's, no share shows an SM figure),
/// and nothing it made is left: cgroups, processes, directory.
#[test]
fn the_per_share_use_check_runs_on_stand_ins_and_leaves_nothing() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: it makes cgroups (run the hw_check suite as root)");
        return;
    }
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let report = dir.path().join("report.md");
    let child = Command::new(env!("CARGO_BIN_EXE_gpushare-hw-check"))
        .arg("--usage-standin")
        .arg("--report")
        .arg(&report)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let pid = child.id();
    let out = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let text = std::fs::read_to_string(&report).unwrap_or_else(|e| panic!("{e}"));
    let row = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("| {name} | ")))
            .unwrap_or_else(|| panic!("no line {name:?} in\n{text}"))
            .to_owned()
    };
    let lists = row("per-share use: NVML's process lists under MPS");
    assert!(
        lists.contains("| seen | client of job 701 (busy) (pid ")
            && lists.contains("compute list 2200 MiB, MPS list 2200 MiB;")
            && lists.contains("compute list 66 MiB, MPS list absent; no other pid listed"),
        "{lists}"
    );
    let samples = row("per-share use: NVML's utilisation samples under MPS");
    assert!(
        samples.ends_with("samples are charged to the MPS server's pid, not the clients' |"),
        "{samples}"
    );
    let memory = row("per-share use: the shares' memory against the GPU's used memory");
    assert!(
        memory.contains(
            "| pass | job 701: 2200 MiB (its client allocated 2048 MiB: ok), job 702: 6300 MiB"
        ),
        "{memory}"
    );
    let sm = row("per-share use: no share shows an SM figure it cannot have");
    assert!(
        sm.contains(
            "| pass | job 701 (busy, 30 units): no figure, job 702 (idle, 60 units): no figure"
        ),
        "{sm}"
    );
    // Nothing left: its cgroup tree (either hierarchy), its processes (the
    // clients ran as these uids), its directory.
    let name = format!("gpushare-hw-check-{pid}");
    for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/freezer"] {
        let left = PathBuf::from(root).join(&name);
        assert!(!left.exists(), "{} left behind", left.display());
    }
    assert!(
        !std::env::temp_dir().join(&name).exists(),
        "{name} left in the temporary directory"
    );
    // Nor the node programs' pointer to its configuration's ledger in the
    // host's /run/gpushare.
    let records = std::path::Path::new(gpushare::mps::in_force::NODE_RECORDS_DIR);
    let conf = std::env::temp_dir().join(&name).join("gpu_mps_usage.conf");
    for file in gpushare::mps::in_force::pointer_files(records, &conf) {
        assert!(!file.exists(), "{} left behind", file.display());
    }
    // Nor the records it keeps across reboots in /var/lib/gpushare.
    let kept = gpushare::mps::kept::kept_dir(
        std::path::Path::new(gpushare::mps::kept::KEPT_ROOT),
        &std::env::temp_dir().join(&name).join("usage"),
    );
    assert!(!kept.exists(), "{} left behind", kept.display());
    // This run's clients: the uids are every run's, and another suite's
    // run may hold its own clients at this moment; each client carries its
    // run's name (GPUSHARE_HW_CHECK_RUN).
    let mark = format!("GPUSHARE_HW_CHECK_RUN={name}");
    let strays: Vec<String> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let status = std::fs::read_to_string(e.path().join("status")).ok()?;
            let uid = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
            let uid = uid.split_whitespace().next()?;
            let environ = std::fs::read(e.path().join("environ")).ok()?;
            let ours = environ.split(|&b| b == 0).any(|v| v == mark.as_bytes());
            (["64101", "64102"].contains(&uid) && ours)
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect();
    assert!(
        strays.is_empty(),
        "processes of the stand-in clients left: {strays:?}"
    );
}
