//! `gpushare-hw-check` (`make hw-check`): what gpushare's MPS half does on a
//! real NVIDIA GPU, recorded as a Markdown report for docs/hardware.md.
//!
//! Run as root on any machine with an NVIDIA GPU, its driver and CUDA's
//! compiler; no Slurm needed. It creates two throwaway users, writes a
//! `gpu_mps.conf` in a temporary directory (the real
//! `nvidia-cuda-mps-control`, `StateDir` in that directory, GPU 0 only),
//! runs the release `gpu-mps-prolog` and `gpu-mps-epilog` with the
//! environment slurmd gives them ([`prolog_env`]), and runs a small CUDA
//! client (`tests/hw-check/client.cu`, compiled here with nvcc) as each
//! job's user with exactly the environment the SPANK plugin gives a task:
//! the plan [`gpushare::mps::node::task_plan`] makes from the node's ledger,
//! the function the plugin calls ([`client_env`]).
//!
//! On a machine without a GPU it says so in one line and exits 1. Whatever
//! happens, it restores GPU 0's compute mode, stops the MPS processes it
//! started and removes the users it created and the directory (`Cleanup`),
//! also when it is interrupted (SIGINT, SIGTERM, SIGHUP: a thread of its
//! own cleans up and exits 130). It is safe to run on a production node:
//! it refuses while GPU 0 has compute processes or Slurm runs jobs on the
//! machine (`--force` to run anyway), never touches a user it did not
//! create (its users carry the comment [`USER_COMMENT`]), and writes its
//! report only as a new file. Every external program runs with a
//! deadline.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use clap::Parser;
use gpushare::mps::config::{self, GpuMpsConfig};
use gpushare::mps::daemon;
use gpushare::mps::ledger::Ledger;
use gpushare::mps::node::{task_plan, TaskPlan};
use gpushare::mps::programs::{CONTROL_PROGRAM, SEARCH_DIRS};
use gpushare::shared::bounded;
use serde::Deserialize;

mod bench;

/// The CUDA client, compiled on the GPU node (no copy of the tree needed there).
const CLIENT_SOURCE: &str = include_str!("../../../hw-check/client.cu");
/// The throwaway users (created and removed by the check).
const USERS: [&str; 2] = ["gpushare-hwa", "gpushare-hwb"];
/// The comment (GECOS) of the users the check creates: a user of that name
/// without it is someone's, and the check refuses to run.
const USER_COMMENT: &str = "gpushare hw-check throwaway user";
/// What one GPU holds in the check's gpu_mps.conf.
const UNITS_PER_GPU: u32 = 100;
/// Dependent FMAs per thread of the timed kernel.
const ROUNDS: u32 = 2_000_000;
/// How long a program the check runs may take (nvcc: longer).
const PROGRAM_TIMEOUT: Duration = Duration::from_secs(30);
const NVCC_TIMEOUT: Duration = Duration::from_secs(300);

/// Runs gpushare's node programs and a CUDA client on this machine's GPU 0
/// as two throwaway users, and writes what it sees as Markdown.
#[derive(Debug, Parser)]
#[command(name = "gpushare-hw-check")]
struct Args {
    /// Where to write the Markdown report
    #[arg(long, value_name = "PATH", default_value = "hw-check-report.md")]
    report: PathBuf,
    /// Directory of gpu-mps-prolog, gpu-mps-epilog and gpu-mps (default:
    /// this program's own, as `cargo build --release` leaves them)
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,
    /// How long a second user's client may wait for the GPU before it is
    /// killed, in seconds
    #[arg(long, default_value_t = 90)]
    wait: u64,
    /// Keep the temporary directory (its logs, the MPS logs)
    #[arg(long)]
    keep: bool,
    /// Run although GPU 0 has compute processes or Slurm runs jobs here
    #[arg(long)]
    force: bool,
    /// Instead of the checks, time a batch of small CUDA jobs one after
    /// another, side by side without MPS, and side by side in gpushare's
    /// MPS shares (`make bench-gpu`)
    #[arg(long)]
    bench: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let smi = find_program("nvidia-smi");
    if let Some(why) = gpu_absent(Path::new("/dev/nvidia0"), smi.as_deref()) {
        eprintln!("gpushare-hw-check: no NVIDIA GPU here, nothing checked: {why}");
        return ExitCode::FAILURE;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("gpushare-hw-check: run me as root (I create users and start MPS daemons)");
        return ExitCode::from(2);
    }
    if args.report.exists() {
        eprintln!(
            "gpushare-hw-check: {} exists: pass --report with a new file's path",
            args.report.display()
        );
        return ExitCode::from(2);
    }
    let smi = smi.unwrap_or_default();
    if !args.force {
        if let Some(why) = busy(&smi) {
            eprintln!("gpushare-hw-check: {why}: not now (--force runs anyway)");
            return ExitCode::from(2);
        }
    }
    let cleanup = Arc::new(Mutex::new(Cleanup::default()));
    catch_signals(Arc::clone(&cleanup));
    let mut report = Report::default();
    let outcome = match Setup::new(&args, smi, Arc::clone(&cleanup)) {
        Ok(mut setup) => {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                if args.bench {
                    bench::run(&mut setup, &mut report)
                } else {
                    run_checks(&mut setup, &mut report)
                }
            }));
            lock(&setup.cleanup).run(&mut report);
            match result {
                Ok(result) => result,
                Err(payload) => Err(format!(
                    "the check panicked: {}",
                    testcluster::guard_message(&*payload)
                )),
            }
        }
        Err(e) => Err(e),
    };
    if let Err(e) = &outcome {
        report.push(Check::fail("hw-check stopped", e.clone(), String::new()));
    }
    lock(&cleanup).run(&mut report);
    let text = render(&report);
    if let Err(e) = write_new(&args.report, &text) {
        eprintln!(
            "gpushare-hw-check: cannot write {}: {e}\n{text}",
            args.report.display()
        );
        return ExitCode::FAILURE;
    }
    let failed = report
        .checks
        .iter()
        .filter(|c| c.result == Verdict::Fail)
        .count();
    println!(
        "gpushare-hw-check: {} checks, {failed} failed; report: {}",
        report.checks.len(),
        args.report.display()
    );
    if failed == 0 && outcome.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `cleanup`, locked whatever a panic left.
fn lock(cleanup: &Mutex<Cleanup>) -> std::sync::MutexGuard<'_, Cleanup> {
    cleanup.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Writes `text` to `path`, which must not exist yet.
fn write_new(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?
        .write_all(text.as_bytes())
}

/// SIGINT, SIGTERM and SIGHUP go to a thread of their own, which cleans up
/// (users, MPS processes, compute mode, directory) and exits 130. Called
/// before any other thread starts, which inherit the blocked mask; the
/// programs the check runs get the default mask back from `Command`.
fn catch_signals(cleanup: Arc<Mutex<Cleanup>>) {
    // SAFETY: sigset_t is plain data, initialized by sigemptyset before use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t owned here; the signal numbers are
    // valid; pthread_sigmask only reads `set`.
    unsafe {
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    std::thread::spawn(move || {
        let mut sig: libc::c_int = 0;
        // SAFETY: `set` is valid and `sig` a writable int.
        if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
            return;
        }
        eprintln!("gpushare-hw-check: signal {sig}: cleaning up");
        let mut report = Report::default();
        lock(&cleanup).run(&mut report);
        for c in &report.checks {
            eprintln!("gpushare-hw-check: {}", c.summary);
        }
        std::process::exit(130);
    });
}

/// Why the check must not run now (`None`: GPU 0 is idle and no job runs
/// here): GPU 0 has compute processes, or Slurm runs jobs (slurmstepd).
fn busy(smi: &Path) -> Option<String> {
    let apps = run_ok(
        smi,
        &[
            "-i",
            "0",
            "--query-compute-apps=pid,process_name",
            "--format=csv,noheader",
        ],
    )
    .unwrap_or_default();
    let steps = fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    fs::read_to_string(e.path().join("comm"))
                        .is_ok_and(|c| c.trim() == "slurmstepd")
                })
                .count()
        })
        .unwrap_or(0);
    busy_reason(&apps, steps)
}

/// [`busy`] from nvidia-smi's compute-apps lines and the slurmstepd count.
fn busy_reason(compute_apps: &str, slurmstepds: usize) -> Option<String> {
    let apps: Vec<&str> = compute_apps
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("No running"))
        .collect();
    if !apps.is_empty() {
        return Some(format!("GPU 0 runs {}", apps.join("; ")));
    }
    (slurmstepds > 0).then(|| format!("Slurm runs jobs here ({slurmstepds} slurmstepd)"))
}

/// Whether a `getent passwd` line is a user this check created.
fn made_by_check(passwd: &str) -> bool {
    passwd.trim_end().split(':').nth(4) == Some(USER_COMMENT)
}

/// Why this machine cannot run the check (`None`: it has a GPU): no
/// `device` file, or no `nvidia-smi` (which also needs libnvidia-ml).
fn gpu_absent(device: &Path, smi: Option<&Path>) -> Option<String> {
    if !device.exists() {
        return Some(format!("{} does not exist", device.display()));
    }
    let Some(smi) = smi else {
        return Some("nvidia-smi is not installed (no NVIDIA driver tools)".into());
    };
    let mut cmd = Command::new(smi);
    cmd.arg("-L");
    match bounded::run(cmd, None, PROGRAM_TIMEOUT) {
        Ok(ran) if ran.status.success() && ran.stdout.contains("GPU 0") => None,
        Ok(ran) => Some(format!(
            "`nvidia-smi -L` lists no GPU 0 ({}): {}",
            ran.status,
            one_line(&format!("{}{}", ran.stdout, ran.stderr))
        )),
        Err(e) => Some(format!("`nvidia-smi -L`: {e}")),
    }
}

/// `name` in PATH or the directories gpushare searches for the MPS control
/// program (CUDA's own among them).
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(SEARCH_DIRS.iter().map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// An optional figure for the report: its value, or `-`.
fn shown<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

// ---------------------------------------------------------------- report

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// What gpushare relies on holds.
    Pass,
    /// It does not: gpushare must change (see the detail).
    Fail,
    /// A fact recorded for a decision (no expectation).
    Seen,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Check {
    name: String,
    result: Verdict,
    /// One line for the table.
    summary: String,
    /// Commands, outputs, timings (a code block in the report).
    detail: String,
}

impl Check {
    fn new(name: &str, result: Verdict, summary: String, detail: String) -> Self {
        Self {
            name: name.to_owned(),
            result,
            summary,
            detail,
        }
    }
    fn fail(name: &str, summary: String, detail: String) -> Self {
        Self::new(name, Verdict::Fail, summary, detail)
    }
}

#[derive(Debug, Default)]
struct Report {
    /// `nvidia-smi` facts: GPU name, driver, memory, compute mode.
    gpu: String,
    driver: String,
    cuda: String,
    host: String,
    date: String,
    /// What was run, in place of the checks' sentence (the benchmark's).
    intro: Option<String>,
    /// A Markdown table before the checks' (the benchmark's figures).
    table: Option<String>,
    checks: Vec<Check>,
}

impl Report {
    fn push(&mut self, check: Check) {
        eprintln!(
            "gpushare-hw-check: {}: {} {}",
            check.name,
            verdict_word(check.result),
            check.summary
        );
        self.checks.push(check);
    }
}

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "pass",
        Verdict::Fail => "FAIL",
        Verdict::Seen => "seen",
    }
}

/// `text`, or `missing` where it is empty.
fn or<'a>(text: &'a str, missing: &'a str) -> &'a str {
    if text.is_empty() {
        missing
    } else {
        text
    }
}

/// A table cell: one line, `|` escaped.
fn cell(text: &str) -> String {
    one_line(text).replace('|', "\\|")
}

/// The report, Markdown meant to go into docs/hardware.md as it is (its
/// headings sit under that page's title).
fn render(report: &Report) -> String {
    let mut out = format!(
        "#### {} — {}, driver {}\n\n",
        or(&report.date, "undated"),
        or(&report.gpu, "unknown GPU"),
        or(&report.driver, "unknown"),
    );
    out.push_str(&format!(
        "`make {}` as root on {} ({}, gpushare {}): {}\n\n",
        if report.intro.is_some() {
            "bench-gpu"
        } else {
            "hw-check"
        },
        or(&report.host, "an unnamed host"),
        or(&report.cuda, "nvcc version unknown"),
        env!("CARGO_PKG_VERSION"),
        report.intro.as_deref().unwrap_or(
            "the release `gpu-mps-prolog`/`gpu-mps-epilog` driven with slurmd's environment, a \
             CUDA client run as each job's user with the environment the SPANK plugin gives its \
             tasks."
        ),
    ));
    if let Some(table) = &report.table {
        out.push_str(table);
        out.push('\n');
    }
    out.push_str("| check | result | what was seen |\n|---|---|---|\n");
    for c in &report.checks {
        out.push_str(&format!(
            "| {} | {} | {} |\n",
            cell(&c.name),
            verdict_word(c.result),
            cell(&c.summary)
        ));
    }
    for c in report.checks.iter().filter(|c| !c.detail.trim().is_empty()) {
        // A fence inside the detail would end the block early.
        let detail = c.detail.trim_end().replace("```", "'''");
        out.push_str(&format!(
            "\n<details><summary>{}</summary>\n\n```text\n{detail}\n```\n\n</details>\n",
            cell(&c.name)
        ));
    }
    out
}

// ---------------------------------------------------------------- setup

/// A throwaway user.
#[derive(Debug, Clone)]
struct User {
    name: String,
    uid: u32,
    gid: u32,
}

/// What the check must undo, even when it fails half-way.
#[derive(Debug, Default)]
struct Cleanup {
    dir: Option<PathBuf>,
    keep: bool,
    users: Vec<String>,
    /// GPU 0's compute mode before the check (`nvidia-smi -c` takes it).
    compute_mode: Option<String>,
    smi: PathBuf,
    done: bool,
}

impl Cleanup {
    fn run(&mut self, report: &mut Report) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let mut seen = Vec::new();
        if let Some(dir) = &self.dir {
            let left = daemon::processes_under(dir);
            if !left.is_empty() {
                seen.push(format!("killed MPS processes left behind: {left:?}"));
                daemon::kill_all(&left);
            }
        }
        if let Some(mode) = &self.compute_mode {
            match run_ok(&self.smi, &["-i", "0", "-c", mode]) {
                Ok(_) => seen.push(format!("GPU 0 compute mode restored to {mode}")),
                Err(e) => seen.push(format!("GPU 0 compute mode NOT restored to {mode}: {e}")),
            }
        }
        for user in &self.users {
            let mut cmd = Command::new("userdel");
            cmd.arg(user);
            match bounded::run(cmd, None, PROGRAM_TIMEOUT) {
                Ok(r) if r.status.success() => seen.push(format!("user {user} removed")),
                Ok(r) => seen.push(format!("userdel {user}: {} {}", r.status, r.stderr.trim())),
                Err(e) => seen.push(format!("userdel {user}: {e}")),
            }
        }
        if let Some(dir) = &self.dir {
            if self.keep {
                seen.push(format!("kept {}", dir.display()));
            } else if let Err(e) = fs::remove_dir_all(dir) {
                seen.push(format!("{}: {e}", dir.display()));
            }
        }
        if !seen.is_empty() {
            report.push(Check::new(
                "clean-up",
                Verdict::Seen,
                seen.join("; "),
                String::new(),
            ));
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let mut report = Report::default();
        self.run(&mut report);
    }
}

/// Everything the checks use.
struct Setup {
    /// How nvcc built the client (for the report).
    compiled: String,
    dir: PathBuf,
    bin: PathBuf,
    smi: PathBuf,
    control: PathBuf,
    client: PathBuf,
    /// gpu_mps.conf with one user per server (`OtherUsers=queue`, so a
    /// second user's share is placed beside the first to be observed).
    conf: PathBuf,
    /// The same with `MultiUser=yes` and a StateDir of its own.
    conf_multi: PathBuf,
    /// The same with `ComputeMode=exclusive` and a StateDir of its own.
    conf_exclusive: PathBuf,
    /// `MultiUser=yes` and `ComputeMode=exclusive`, a StateDir of its own.
    conf_multi_exclusive: PathBuf,
    slurm_conf: PathBuf,
    users: Vec<User>,
    wait: Duration,
    cleanup: Arc<Mutex<Cleanup>>,
}

/// Runs `program args`, bounded; its stdout when it exits 0.
fn run_ok(program: &Path, args: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new(program);
    cmd.args(args);
    let ran = bounded::run(cmd, None, PROGRAM_TIMEOUT).map_err(|e| e.to_string())?;
    if ran.status.success() {
        Ok(ran.stdout)
    } else {
        Err(format!(
            "{} {}: {} {}",
            program.display(),
            args.join(" "),
            ran.status,
            one_line(&format!("{}{}", ran.stdout, ran.stderr))
        ))
    }
}

fn ids(name: &str) -> Option<(u32, u32)> {
    let id = |flag: &str| {
        run_ok(Path::new("id"), &[flag, name])
            .ok()
            .and_then(|o| o.trim().parse().ok())
    };
    Some((id("-u")?, id("-g")?))
}

impl Setup {
    fn new(args: &Args, smi: PathBuf, cleanup: Arc<Mutex<Cleanup>>) -> Result<Self, String> {
        let bin = match &args.bin_dir {
            Some(dir) => dir.clone(),
            None => std::env::current_exe()
                .map_err(|e| format!("where am I: {e}"))?
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default(),
        };
        for program in ["gpu-mps-prolog", "gpu-mps-epilog", "gpu-mps"] {
            if !bin.join(program).is_file() {
                return Err(format!(
                    "{} is missing: build the release (`cargo build --release --workspace`) or \
                     pass --bin-dir",
                    bin.join(program).display()
                ));
            }
        }
        let control = find_program(CONTROL_PROGRAM)
            .ok_or_else(|| format!("{CONTROL_PROGRAM} is not installed"))?;
        let nvcc = find_program("nvcc")
            .or_else(|| Some(PathBuf::from("/usr/local/cuda/bin/nvcc")).filter(|p| p.is_file()))
            .ok_or("nvcc (CUDA's compiler) is not installed: it builds the CUDA client")?;
        let dir = std::env::temp_dir().join(format!("gpushare-hw-check-{}", std::process::id()));
        {
            let mut c = lock(&cleanup);
            c.keep = args.keep;
            c.smi = smi.clone();
        }
        fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        lock(&cleanup).dir = Some(dir.clone());
        // The users reach the client and the MPS pipes under it.
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut users = Vec::new();
        for name in USERS {
            if ids(name).is_some() {
                // Left by a crashed run of the check, or someone's.
                let entry = run_ok(Path::new("getent"), &["passwd", name]).unwrap_or_default();
                if !made_by_check(&entry) {
                    return Err(format!(
                        "a user named {name} exists and was not made by this check (comment \
                         {USER_COMMENT:?}): it is left alone, and the check does not run"
                    ));
                }
            } else {
                let mut cmd = Command::new("useradd");
                cmd.args(["--system", "--no-create-home", "--home-dir", "/"])
                    .args(["--comment", USER_COMMENT])
                    .args(["--shell", "/usr/sbin/nologin", name]);
                let ran = bounded::run(cmd, None, PROGRAM_TIMEOUT).map_err(|e| e.to_string())?;
                if !ran.status.success() {
                    return Err(format!("useradd {name}: {}", ran.stderr.trim()));
                }
            }
            lock(&cleanup).users.push(name.to_owned());
            let (uid, gid) = ids(name).ok_or_else(|| format!("no user {name} after useradd"))?;
            users.push(User {
                name: name.to_owned(),
                uid,
                gid,
            });
        }
        let mode = run_ok(
            &smi,
            &[
                "-i",
                "0",
                "--query-gpu=compute_mode",
                "--format=csv,noheader",
            ],
        )?;
        // nvidia-smi prints `Default`, `Exclusive_Process` but takes only
        // `DEFAULT`, `EXCLUSIVE_PROCESS` (or the numbers) back.
        lock(&cleanup).compute_mode = Some(mode.trim().to_ascii_uppercase());

        // slurm.conf's directory as the prolog reads it: no gres.conf (so
        // gpushare places), cgroup v1 named (so the share is not refused
        // for cgroup v2: no Slurm confines anything here anyway).
        let slurm_dir = dir.join("slurm");
        fs::create_dir(&slurm_dir).map_err(|e| e.to_string())?;
        fs::write(slurm_dir.join("slurm.conf"), "").map_err(|e| e.to_string())?;
        fs::write(slurm_dir.join("cgroup.conf"), "CgroupPlugin=cgroup/v1\n")
            .map_err(|e| e.to_string())?;
        let conf_text = |state: &str, extra: &str| {
            format!(
                "UnitsPerGPU={UNITS_PER_GPU}\nGPUDevices=/dev/nvidia0\nSlurmMpsCount={UNITS_PER_GPU}\n\
                 Placement=gpushare\nStateDir={}\nMPSControl={}\n{extra}",
                dir.join(state).display(),
                control.display()
            )
        };
        let write_conf = |path: PathBuf, state: &str, extra: &str| {
            fs::write(&path, conf_text(state, extra))
                .map(|()| path)
                .map_err(|e| e.to_string())
        };
        // ComputeMode=leave: these observe what runs beside MPS in the
        // mode each check sets.
        let conf = write_conf(
            slurm_dir.join("gpu_mps.conf"),
            "state",
            "OtherUsers=queue\nComputeMode=leave\n",
        )?;
        let conf_multi = write_conf(
            dir.join("gpu_mps_multi.conf"),
            "multi",
            "MultiUser=yes\nComputeMode=leave\n",
        )?;
        let conf_multi_exclusive = write_conf(
            dir.join("gpu_mps_multi_exclusive.conf"),
            "multi-exclusive",
            "MultiUser=yes\nComputeMode=exclusive\n",
        )?;
        let conf_exclusive = write_conf(
            dir.join("gpu_mps_exclusive.conf"),
            "exclusive",
            "ComputeMode=exclusive\n",
        )?;

        let source = dir.join("client.cu");
        let client = dir.join("client");
        fs::write(&source, CLIENT_SOURCE).map_err(|e| e.to_string())?;
        let compile = |extra: &[&str]| {
            let mut cmd = Command::new(&nvcc);
            cmd.args(["-O2", "-o"])
                .arg(&client)
                .arg(&source)
                .args(extra);
            bounded::run(cmd, None, NVCC_TIMEOUT).map_err(|e| e.to_string())
        };
        // CUDA's MPS attribute comes from the driver API (libcuda, CUDA
        // 12.4+); without it (older CUDA, no unversioned libcuda.so to link)
        // the client still runs, and the check relies on the daemon's
        // client list instead.
        let ran = compile(&["-lcuda"])?;
        let mut compiled = format!("{} -O2 ... -lcuda: {}", nvcc.display(), ran.status);
        if !ran.status.success() {
            let again = compile(&["-DNO_MPS_ATTRIBUTE"])?;
            compiled = format!(
                "{compiled}\n{}\nagain with -DNO_MPS_ATTRIBUTE (no CUDA MPS attribute): {}",
                ran.stderr.trim(),
                again.status
            );
            if !again.status.success() {
                return Err(format!("nvcc: {}", one_line(&again.stderr)));
            }
        }
        Ok(Self {
            compiled,
            bin,
            smi,
            control,
            client,
            conf,
            conf_multi,
            conf_multi_exclusive,
            conf_exclusive,
            slurm_conf: slurm_dir.join("slurm.conf"),
            users,
            wait: Duration::from_secs(args.wait),
            cleanup,
            dir,
        })
    }

    fn user(&self, i: usize) -> &User {
        &self.users[i]
    }

    fn nomps_pipe(&self) -> PathBuf {
        self.dir.join("nomps").join("pipe")
    }

    /// Runs the release node program `program` for `job` as slurmd would.
    fn node_program(&self, program: &str, conf: &Path, job: u32, user: &User, units: u32) -> Ran {
        let mut cmd = Command::new(self.bin.join(program));
        cmd.arg("--conf").arg(conf).env_clear();
        for (k, v) in prolog_env(job, user.uid, &user.name, units) {
            cmd.env(k, v);
        }
        cmd.env("SLURM_CONF", &self.slurm_conf);
        let started = Instant::now();
        let ran = bounded::run(cmd, None, PROGRAM_TIMEOUT);
        Ran {
            what: format!("{program} (job {job}, {}, {units} units)", user.name),
            ok: ran.as_ref().is_ok_and(|r| r.status.success()),
            text: match ran {
                Ok(r) => format!("{}\n{}{}", r.status, r.stdout, r.stderr),
                Err(e) => e.to_string(),
            },
            ms: started.elapsed().as_millis(),
        }
    }

    fn prolog(&self, conf: &Path, job: u32, user: usize, units: u32) -> Ran {
        self.node_program("gpu-mps-prolog", conf, job, self.user(user), units)
    }

    fn epilog(&self, conf: &Path, job: u32, user: usize) -> Ran {
        self.node_program("gpu-mps-epilog", conf, job, self.user(user), 0)
    }

    /// The task environment and first output line of `job` from the
    /// node's ledger, as the SPANK plugin reads them.
    fn plan(&self, conf: &Path, job: u32) -> Result<TaskPlan, String> {
        let cfg = load(conf)?;
        let ledger = Ledger::open(&cfg.state_dir, 0).map_err(|e| e.to_string())?;
        task_plan(&cfg, &ledger, job, true, 1)?.ok_or_else(|| format!("job {job} holds no share"))
    }

    /// Starts the client as `user` with `env` (nothing else of root's).
    fn client(
        &self,
        user: usize,
        env: &[(String, String)],
        alloc_mib: u64,
        busy_ms: u64,
    ) -> Result<Client, String> {
        let args = [
            alloc_mib.to_string(),
            busy_ms.to_string(),
            ROUNDS.to_string(),
        ];
        self.client_with(user, env, &args)
    }

    /// Starts the client with `args` as `user` with `env` (nothing else of
    /// root's).
    fn client_with(
        &self,
        user: usize,
        env: &[(String, String)],
        args: &[String],
    ) -> Result<Client, String> {
        let user = self.user(user);
        let mut cmd = Command::new(&self.client);
        cmd.args(args)
            .env_clear()
            .envs(client_env(user, env))
            .current_dir("/")
            .uid(user.uid)
            .gid(user.gid)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Client::start(cmd, &user.name)
    }

    /// The environment of a task that finds no MPS daemon: the plan's,
    /// with a pipe directory where none runs.
    fn without_mps(&self, env: &[(String, String)]) -> Vec<(String, String)> {
        let pipe = self.nomps_pipe().to_string_lossy().into_owned();
        env.iter()
            .map(|(k, v)| match k.as_str() {
                "CUDA_MPS_PIPE_DIRECTORY" | "CUDA_MPS_LOG_DIRECTORY" => (k.clone(), pipe.clone()),
                _ => (k.clone(), v.clone()),
            })
            .collect()
    }

    /// Sends `lines` to GPU 0's daemon of `conf` in one call, as gpushare does.
    fn control(&self, conf: &Path, lines: &[&str]) -> Result<String, String> {
        let cfg = load(conf)?;
        let lines: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
        daemon::control_lines(&cfg, &self.control, 0, &lines, daemon::CONTROL_TIMEOUT)
    }

    /// GPU 0's compute mode as `nvidia-smi` reports it (or its error).
    fn compute_mode(&self) -> String {
        one_line(&self.smi(&[
            "-i",
            "0",
            "--query-gpu=compute_mode",
            "--format=csv,noheader",
        ]))
    }

    fn smi(&self, args: &[&str]) -> String {
        match run_ok(&self.smi, args) {
            Ok(out) => out,
            Err(e) => e,
        }
    }
}

/// A task's device memory in MiB from its plan's environment
/// (`GPUSHARE_MEMORY_MIB`; 0 where the plan sets no limit).
fn memory_mib(env: &[(String, String)]) -> u64 {
    env.iter()
        .find(|(k, _)| k == "GPUSHARE_MEMORY_MIB")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// What this machine takes from `conf`, as a node named by its short
/// hostname (the node programs' own name here: no slurmd).
fn load(conf: &Path) -> Result<GpuMpsConfig, String> {
    let node = gpushare::mps::node::node_name(None);
    let settings = config::load(conf, &node)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("{}: not found", conf.display()))?;
    settings
        .cfg
        .ok_or_else(|| settings.no_gpus.unwrap_or_default())
}

/// A node program's run, for the report.
struct Ran {
    what: String,
    ok: bool,
    text: String,
    ms: u128,
}

impl Ran {
    fn detail(&self) -> String {
        format!("$ {} [{} ms]\n{}", self.what, self.ms, self.text.trim_end())
    }
}

/// The variables slurmd gives a Prolog/Epilog for a share of `units`
/// (what `JobEnv::from_env` reads): the job, its user, Slurm's thread
/// percentage of one GPU holding [`UNITS_PER_GPU`] (node-wide Count on one
/// GPU), the units job_submit/gpu_qos records, and the node's name.
fn prolog_env(job: u32, uid: u32, user: &str, units: u32) -> Vec<(String, String)> {
    let mut env = vec![
        ("SLURM_JOB_ID".to_owned(), job.to_string()),
        ("SLURM_JOB_UID".to_owned(), uid.to_string()),
        ("SLURM_JOB_USER".to_owned(), user.to_owned()),
        (
            "SLURMD_NODENAME".to_owned(),
            gpushare::shared::locations::short_hostname().unwrap_or_else(|| "gpunode".into()),
        ),
    ];
    if units > 0 {
        env.extend([
            (
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_owned(),
                (units * 100 / UNITS_PER_GPU).to_string(),
            ),
            (
                gpushare::shared::spank_env::in_prolog(gpushare::shared::spank_env::MPS_UNITS),
                units.to_string(),
            ),
        ]);
    }
    env
}

/// A task's whole environment: what any process of the user has (PATH,
/// HOME, USER) and, replacing nothing else, `plan_env` (the plan's
/// [`TaskPlan::env`], which the SPANK plugin sets with `spank_setenv`).
fn client_env(user: &User, plan_env: &[(String, String)]) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = [
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("HOME", "/"),
        ("USER", &user.name),
        ("LOGNAME", &user.name),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    env.extend(plan_env.iter().cloned());
    env
}

// ---------------------------------------------------------------- client

/// What the client printed (see client.cu).
#[derive(Debug, Clone, Default, Deserialize)]
struct ClientLine {
    event: String,
    pid: u32,
    #[serde(default)]
    init_ms: f64,
    #[serde(default)]
    init: Option<String>,
    #[serde(default)]
    mps_enabled: Option<i32>,
    #[serde(default)]
    sms: Option<u32>,
    #[serde(default)]
    alloc: Option<String>,
    #[serde(default)]
    kernel_ms: Option<f64>,
    #[serde(default)]
    kernel: Option<String>,
    /// The benchmark's kernels, wall time.
    #[serde(default)]
    work_ms: Option<f64>,
}

/// A client process and its output lines as they come, each stamped with
/// when it arrived.
struct Client {
    child: Child,
    lines: mpsc::Receiver<(Instant, String)>,
    started: Instant,
    user: String,
    seen: Vec<String>,
    /// When it printed its last line (`{"event":"done"}`), just before exit.
    done_at: Option<Instant>,
}

impl Client {
    fn start(mut cmd: Command, user: &str) -> Result<Self, String> {
        let mut child = cmd.spawn().map_err(|e| format!("client as {user}: {e}"))?;
        let (tx, rx) = mpsc::channel();
        let streams: [Option<Box<dyn std::io::Read + Send>>; 2] = [
            child.stdout.take().map(|s| Box::new(s) as _),
            child.stderr.take().map(|s| Box::new(s) as _),
        ];
        for stream in streams.into_iter().flatten() {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if tx.send((Instant::now(), line)).is_err() {
                        break;
                    }
                }
            });
        }
        Ok(Self {
            child,
            lines: rx,
            started: Instant::now(),
            user: user.to_owned(),
            seen: Vec::new(),
            done_at: None,
        })
    }

    /// Records a line; its JSON where it is one.
    fn take(&mut self, at: Instant, line: String) -> Option<ClientLine> {
        self.seen.push(format!(
            "[{:.1} s] {line}",
            at.saturating_duration_since(self.started).as_secs_f64()
        ));
        let parsed = serde_json::from_str::<ClientLine>(&line).ok()?;
        if parsed.event == "done" {
            self.done_at = Some(at);
        }
        Some(parsed)
    }

    /// The next JSON line of `event` within `timeout` (other lines kept
    /// for the report); `None` at the deadline or when the client ended.
    fn wait_event(&mut self, event: &str, timeout: Duration) -> Option<ClientLine> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (at, line) = self.lines.recv_timeout(left).ok()?;
            if let Some(parsed) = self.take(at, line) {
                if parsed.event == event {
                    return Some(parsed);
                }
            }
        }
    }

    /// Waits for the client to exit within `timeout`, killing it past it.
    fn finish(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    // Ended without its done line (killed by a signal, a
                    // CUDA error in init): it ended by now.
                    self.done_at.get_or_insert_with(Instant::now);
                    self.seen.push(format!("ended: {status}"));
                    break;
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    self.seen
                        .push(format!("killed after {} s", timeout.as_secs()));
                    break;
                }
            }
        }
        while let Ok((at, line)) = self.lines.recv_timeout(Duration::from_millis(100)) {
            self.take(at, line);
        }
    }

    /// Seconds from `other`'s start to this client's last line (negative:
    /// before `other` started).
    fn done_after_start_of(&self, other: &Client) -> Option<f64> {
        let done = self.done_at?;
        Some(match done.checked_duration_since(other.started) {
            Some(d) => d.as_secs_f64(),
            None => -other.started.duration_since(done).as_secs_f64(),
        })
    }

    fn detail(&self) -> String {
        format!("client as {}:\n{}", self.user, self.seen.join("\n"))
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---------------------------------------------------------------- processes

fn cmdline(pid: u32) -> String {
    fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .split('\0')
                .filter(|a| !a.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// The control daemon's pid and command line for `conf`'s GPU 0.
fn control_daemon(conf: &Path) -> Option<(u32, String)> {
    let cfg = load(conf).ok()?;
    daemon::processes(&daemon::pipe_dir(&cfg, 0))
        .into_iter()
        .map(|pid| (pid, cmdline(pid)))
        .find(|(_, cmd)| {
            cmd.split(' ')
                .next()
                .is_some_and(|a| a.ends_with(CONTROL_PROGRAM))
        })
}

// ---------------------------------------------------------------- checks

fn verdict(ok: bool) -> Verdict {
    if ok {
        Verdict::Pass
    } else {
        Verdict::Fail
    }
}

/// The GPU, driver and CUDA for the report's heading; GPU 0 set to
/// `DEFAULT` compute mode; the pipe directory where no daemon runs.
fn gpu_facts(s: &mut Setup, report: &mut Report) -> Result<(), String> {
    let info = s.smi(&[
        "-i",
        "0",
        "--query-gpu=name,driver_version,memory.total,compute_mode",
        "--format=csv,noheader",
    ]);
    let mut fields = info.trim().split(',').map(str::trim);
    report.gpu = fields.next().unwrap_or_default().to_owned();
    report.driver = fields.next().unwrap_or_default().to_owned();
    report.host = gpushare::shared::locations::short_hostname().unwrap_or_default();
    report.date = run_ok(Path::new("date"), &["-u", "+%Y-%m-%d %H:%M UTC"])
        .map(|d| d.trim().to_owned())
        .unwrap_or_default();
    report.cuda = find_program("nvcc")
        .or_else(|| Some(PathBuf::from("/usr/local/cuda/bin/nvcc")))
        .and_then(|nvcc| run_ok(&nvcc, &["--version"]).ok())
        .and_then(|v| v.lines().find(|l| l.contains("release")).map(str::to_owned))
        .map(|l| one_line(&l))
        .unwrap_or_default();
    let to_default = s.smi(&["-i", "0", "-c", "DEFAULT"]);
    report.push(Check::new(
        "GPU 0",
        Verdict::Seen,
        one_line(&info),
        format!(
            "nvidia-smi -c DEFAULT: {}\n{}\nclient: {}",
            to_default.trim(),
            s.smi(&[]),
            s.compiled
        ),
    ));
    fs::create_dir_all(s.nomps_pipe()).map_err(|e| e.to_string())?;
    fs::set_permissions(s.nomps_pipe(), fs::Permissions::from_mode(0o755))
        .and_then(|()| fs::set_permissions(s.dir.join("nomps"), fs::Permissions::from_mode(0o755)))
        .map_err(|e| e.to_string())
}

fn run_checks(s: &mut Setup, report: &mut Report) -> Result<(), String> {
    gpu_facts(s, report)?;
    // The control program's own help: which multi-user option it takes.
    let mut help = Command::new(&s.control);
    help.arg("-h")
        .env_clear()
        .env("CUDA_MPS_PIPE_DIRECTORY", s.nomps_pipe())
        .env("CUDA_MPS_LOG_DIRECTORY", s.nomps_pipe());
    let help_text = match bounded::run(help, None, daemon::PROBE_TIMEOUT) {
        Ok(r) => format!("{}\n{}{}", r.status, r.stdout, r.stderr),
        Err(e) => e.to_string(),
    };
    let flag = daemon::multi_user_flag(&help_text);
    report.push(Check::new(
        "control program's help (multi-user option)",
        Verdict::Seen,
        match flag {
            Some(f) => format!("`{CONTROL_PROGRAM} -h` documents `{f}`; gpushare starts MultiUser=yes daemons with it"),
            None => format!("`{CONTROL_PROGRAM} -h` names none of -M, --multiuser, -multiuser-server; gpushare falls back to -M"),
        },
        format!("$ {} -h\n{help_text}", s.control.display()),
    ));

    // Baseline: the same kernel without MPS (no daemon at the pipe directory).
    let base_env = vec![
        ("CUDA_VISIBLE_DEVICES".to_owned(), "0".to_owned()),
        (
            "CUDA_MPS_PIPE_DIRECTORY".to_owned(),
            s.nomps_pipe().to_string_lossy().into_owned(),
        ),
        (
            "CUDA_MPS_LOG_DIRECTORY".to_owned(),
            s.nomps_pipe().to_string_lossy().into_owned(),
        ),
    ];
    let mut base = s.client(0, &base_env, 0, 0)?;
    let base_result = base.wait_event("result", Duration::from_secs(120));
    base.finish(PROGRAM_TIMEOUT);
    let base_ms = base_result
        .as_ref()
        .and_then(|r| r.kernel_ms)
        .filter(|&t| t > 0.0);
    report.push(Check::new(
        "client without MPS (no daemon at its pipe directory)",
        verdict(base_ms.is_some()),
        match &base_result {
            Some(r) => format!(
                "CUDA's MPS attribute {}; kernel {:.1} ms at 100 % of {} SMs",
                shown(r.mps_enabled),
                r.kernel_ms.unwrap_or(-1.0),
                r.sms.unwrap_or(0)
            ),
            None => "no result".into(),
        },
        base.detail(),
    ));

    one_user_per_server(s, report, base_ms)?;
    without_mps_beside(s, report, "DEFAULT")?;
    without_mps_beside(s, report, "EXCLUSIVE_PROCESS")?;
    let _ = s.smi(&["-i", "0", "-c", "DEFAULT"]);
    multi_user(s, report, false)?;
    multi_user(s, report, true)?;
    killed_daemon(s, report)?;
    client_cannot_control(s, report)?;
    raised_limits(s, report)?;
    exclusive_and_clients(s, report)?;

    let left = daemon::processes_under(&s.dir);
    report.push(Check::new(
        "the last epilog leaves no MPS process",
        verdict(left.is_empty()),
        if left.is_empty() {
            "no nvidia-cuda-mps-control/-server of the check's pipe directories left".into()
        } else {
            format!("left: {left:?}")
        },
        left.iter()
            .map(|&p| format!("{p} {}", cmdline(p)))
            .collect::<Vec<_>>()
            .join("\n"),
    ));
    // Without a Slurm that answers `scontrol --version`, `gpu-mps config`
    // needs a release to write the Slurm lines for; the MPS v3 readiness it
    // reports does not depend on it.
    let conf_arg = s.conf.to_string_lossy().into_owned();
    let gpu_mps = s.bin.join("gpu-mps");
    let config = run_ok(&gpu_mps, &["--conf", &conf_arg, "config"]).or_else(|e| {
        run_ok(
            &gpu_mps,
            &["--conf", &conf_arg, "config", "--release", "24.11"],
        )
        .map(|out| format!("({e}; asked again with --release 24.11)\n{out}"))
    });
    report.push(Check::new(
        "gpu-mps config (MPS v3 readiness)",
        Verdict::Seen,
        config
            .as_ref()
            .map(|c| {
                c.lines()
                    .filter(|l| l.contains("v3") || l.contains("dmem") || l.contains("driver"))
                    .map(one_line)
                    .collect::<Vec<_>>()
                    .join("; ")
            })
            .unwrap_or_else(|e| e.clone()),
        config.unwrap_or_else(|e| e),
    ));
    Ok(())
}

/// One user's share: daemon flags, MPS client, memory limit, thread
/// percentage, set/get on the live server, then a second user's share
/// beside it and `gpu-mps status`.
fn one_user_per_server(
    s: &mut Setup,
    report: &mut Report,
    base_ms: Option<f64>,
) -> Result<(), String> {
    let conf = s.conf.clone();
    let p = s.prolog(&conf, 101, 0, 25);
    let daemon = control_daemon(&conf);
    report.push(Check::new(
        "daemon started by the first share's prolog",
        verdict(p.ok && daemon.is_some()),
        match &daemon {
            Some((pid, cmd)) => format!("pid {pid}: `{cmd}`"),
            None => "no control daemon running".into(),
        },
        p.detail(),
    ));
    let plan = s.plan(&conf, 101)?;
    let limit = plan
        .env
        .iter()
        .find(|(k, _)| k == "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
        .and_then(|(_, v)| v.strip_prefix("0=")?.strip_suffix('M')?.parse::<u64>().ok());
    let mut a1 = s.client(0, &plan.env, limit.map_or(256, |m| m / 2), 25_000)?;
    let ready = a1.wait_event("ready", Duration::from_secs(60));
    let servers = s.control(&conf, &["get_server_list"]).unwrap_or_default();
    let server = daemon::pids(&servers).first().copied();
    let clients = server
        .map(|pid| s.control(&conf, &[&format!("get_client_list {pid}")]))
        .transpose()
        .unwrap_or_else(Some);
    let smi = s.smi(&[]);
    let result = a1.wait_event("result", Duration::from_secs(120));
    let pid = ready.as_ref().map(|r| r.pid);
    let listed = pid.is_some_and(|pid| {
        clients
            .as_deref()
            .is_some_and(|c| daemon::pids(c).contains(&pid))
    });
    let smi_line = pid
        .and_then(|pid| {
            smi.lines()
                .find(|l| l.split_whitespace().any(|w| w == pid.to_string()))
        })
        .map(one_line);
    report.push(Check::new(
        "the job's client is an MPS client",
        verdict(listed || result.as_ref().and_then(|r| r.mps_enabled) == Some(1)),
        format!(
            "client pid {}: in get_client_list of server {}: {listed}; CUDA's MPS attribute: {}; nvidia-smi: {}",
            shown(pid),
            shown(server),
            shown(result.as_ref().and_then(|r| r.mps_enabled)),
            smi_line.as_deref().unwrap_or("(not listed)")
        ),
        format!(
            "first output line: {}\nenvironment: {:?}\nget_server_list: {servers}\nget_client_list: {clients:?}\n{smi}",
            plan.banner, plan.env
        ),
    ));
    let alloc_ok = result.as_ref().and_then(|r| r.alloc.clone());
    report.push(Check::new(
        "an allocation below the memory limit succeeds",
        verdict(alloc_ok.as_deref() == Some("ok")),
        format!(
            "limit {} MiB (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT), cudaMalloc+memset of {} MiB: {}",
            shown(limit),
            shown(limit.map(|m| m / 2)),
            alloc_ok.as_deref().unwrap_or("no result")
        ),
        a1.seen.join("\n"),
    ));
    // Past the limit: the same job's second task.
    let mut above = s.client(0, &plan.env, limit.map_or(1 << 20, |m| m * 3 / 2), 0)?;
    let above_result = above.wait_event("result", Duration::from_secs(60));
    above.finish(PROGRAM_TIMEOUT);
    let above_alloc = above_result.as_ref().and_then(|r| r.alloc.clone());
    report.push(Check::new(
        "an allocation above the memory limit fails",
        verdict(limit.is_some() && above_alloc.as_deref().is_some_and(|a| a != "ok")),
        format!(
            "cudaMalloc of {} MiB: {}",
            shown(limit.map(|m| m * 3 / 2)),
            match limit {
                Some(_) => above_alloc.as_deref().unwrap_or("no result"),
                None => "the job's environment has no memory limit (GPUMemory= unset and NVML not loaded by the prolog?)",
            }
        ),
        above.detail(),
    ));
    let share_ms = result
        .as_ref()
        .and_then(|r| r.kernel_ms)
        .filter(|&t| t > 0.0);
    let ratio = share_ms.zip(base_ms).map(|(a, b)| a / b);
    report.push(Check::new(
        "thread percentage: kernel time at 25 % against 100 %",
        verdict(ratio.is_some_and(|r| r > 1.8)),
        match ratio {
            Some(r) => format!(
                "{:.1} ms against {:.1} ms without MPS: {r:.2}x (4x would be exact); \
                 CUDA reports {} SMs to the share",
                share_ms.unwrap_or(0.0),
                base_ms.unwrap_or(0.0),
                shown(result.as_ref().and_then(|r| r.sms))
            ),
            None => format!(
                "no timing: kernel {}",
                result
                    .as_ref()
                    .and_then(|r| r.kernel.as_deref())
                    .unwrap_or("did not report")
            ),
        },
        String::new(),
    ));

    // A larger share of the same user: the prolog sets the new limits on
    // the running server, in one call; read them back, several in one call.
    let p2 = s.prolog(&conf, 102, 0, 50);
    let asked = server.map(|pid| {
        let lines = [
            "get_default_active_thread_percentage".to_owned(),
            format!("get_active_thread_percentage {pid}"),
            "get_default_device_pinned_mem_limit 0".to_owned(),
            format!("get_device_pinned_mem_limit {pid} 0"),
        ];
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        (lines.join("; "), s.control(&conf, &refs))
    });
    let answers = asked
        .as_ref()
        .and_then(|(_, a)| a.as_ref().ok())
        .cloned()
        .unwrap_or_default();
    let answered = answers.lines().filter(|l| !l.trim().is_empty()).count();
    report.push(Check::new(
        "set_* on the live server, read back with get_* (four commands in one call)",
        verdict(p2.ok && answered >= 4 && answers.lines().take(2).all(|l| l.contains("50"))),
        format!("{answered} answer lines: {}", one_line(&answers)),
        format!(
            "{}\n$ {}\n{:?}",
            p2.detail(),
            asked
                .as_ref()
                .map(|(l, _)| l.as_str())
                .unwrap_or("(no server)"),
            asked.as_ref().map(|(_, a)| a)
        ),
    ));

    // A second user's share on the same GPU (OtherUsers=queue here).
    let p3 = s.prolog(&conf, 201, 1, 20);
    let status = run_ok(
        &s.bin.join("gpu-mps"),
        &["--conf", &conf.to_string_lossy(), "status"],
    );
    report.push(Check::new(
        "gpu-mps status with two users' shares on GPU 0",
        Verdict::Seen,
        status
            .as_ref()
            .map(|t| {
                t.lines()
                    .find(|l| l.contains("USERS-WAIT") || l.contains("MULTI-USER"))
                    .map(one_line)
                    .unwrap_or_else(|| "no GPU marked".into())
            })
            .unwrap_or_else(|e| e.clone()),
        status.unwrap_or_else(|e| e),
    ));
    let plan_b = s.plan(&conf, 201)?;
    let mut b = s.client(1, &plan_b.env, 64, 0)?;
    let b_ready = b.wait_event("ready", s.wait);
    let b_ready_at = b.started.elapsed().as_secs_f64();
    let b_result = b_ready
        .as_ref()
        .and_then(|_| b.wait_event("result", Duration::from_secs(60)));
    a1.finish(Duration::from_secs(60));
    b.finish(PROGRAM_TIMEOUT);
    let a_end = a1
        .done_after_start_of(&b)
        .map_or_else(|| "(unknown)".to_owned(), |t| format!("{t:.1} s"));
    let failed_init = b
        .seen
        .iter()
        .find(|l| l.contains("\"init\":\"cuda") || l.contains("\"init\":\"CUDA"))
        .cloned();
    report.push(Check::new(
        "a second user's client while the first user's server runs",
        Verdict::Seen,
        match (&b_ready, &failed_init) {
            (Some(r), _) => format!(
                "CUDA init took {:.1} s (ready {b_ready_at:.1} s after start); the first user's last client ended {a_end} after it started; then {}",
                r.init_ms / 1000.0,
                b_result.as_ref().map(|r| format!("alloc {}, kernel {} ms", r.alloc.as_deref().unwrap_or("?"), shown(r.kernel_ms))).unwrap_or_else(|| "no result".into())
            ),
            (None, Some(line)) => format!("failed: {line}"),
            (None, None) => format!("still waiting after {} s: killed (the first user's client ended {a_end} after it started)", s.wait.as_secs()),
        },
        format!("first output line: {}\n{}\n{}\n{}", plan_b.banner, p3.detail(), b.detail(), a1.detail()),
    ));
    let mut ends = Vec::new();
    for (job, user) in [(201, 1), (102, 0), (101, 0)] {
        ends.push(s.epilog(&conf, job, user).detail());
    }
    let left = control_daemon(&conf);
    report.push(Check::new(
        "the epilog of the GPU's last share stops its daemon",
        verdict(left.is_none() && daemon::processes_under(&s.dir).is_empty()),
        match left {
            Some((pid, _)) => format!("control daemon {pid} still runs"),
            None => "no MPS process left".into(),
        },
        ends.join("\n"),
    ));
    Ok(())
}

/// A client of the second user that finds no daemon (a pipe directory
/// without one) while the first user's MPS server works, in `mode`.
fn without_mps_beside(s: &mut Setup, report: &mut Report, mode: &str) -> Result<(), String> {
    let conf = s.conf.clone();
    let set = s.smi(&["-i", "0", "-c", mode]);
    let job = if mode == "DEFAULT" { 103 } else { 104 };
    let p = s.prolog(&conf, job, 0, 25);
    let plan = s.plan(&conf, job)?;
    let mut a = s.client(0, &plan.env, 0, 20_000)?;
    let a_result = a.wait_event("result", Duration::from_secs(120));
    let env_b = s.without_mps(&plan.env);
    let mut b = s.client(1, &env_b, 64, 0)?;
    let b_result = b.wait_event("result", Duration::from_secs(60));
    b.finish(PROGRAM_TIMEOUT);
    let b_done = b.done_at.map_or(-1.0, |t| {
        t.saturating_duration_since(b.started).as_secs_f64()
    });
    let a_alive = matches!(a.child.try_wait(), Ok(None));
    a.finish(Duration::from_secs(60));
    let e = s.epilog(&conf, job, 0);
    report.push(Check::new(
        &format!("a second user's client without MPS beside the first user's server, {mode} mode"),
        Verdict::Seen,
        match &b_result {
            Some(r) if r.init.as_deref() == Some("ok") => format!(
                "runs (CUDA's MPS attribute {}), kernel {} ms, done {b_done:.1} s after its start while the first user's client {} (its kernel {} ms alone)",
                shown(r.mps_enabled),
                shown(r.kernel_ms),
                if a_alive { "still ran" } else { "had ended" },
                shown(a_result.as_ref().and_then(|r| r.kernel_ms))
            ),
            Some(r) => format!("fails: {}", r.init.as_deref().unwrap_or("?")),
            None => "no result within 60 s".into(),
        },
        format!("nvidia-smi -c {mode}: {}\n{}\n{}\n{}\n{}", set.trim(), p.detail(), a.detail(), b.detail(), e.detail()),
    ));
    Ok(())
}

/// `MultiUser=yes` (with `ComputeMode=exclusive` where `exclusive`): both
/// users' clients at once on one server.
fn multi_user(s: &mut Setup, report: &mut Report, exclusive: bool) -> Result<(), String> {
    let (conf, name, job) = if exclusive {
        (
            s.conf_multi_exclusive.clone(),
            "MultiUser=yes, ComputeMode=exclusive: two users' clients at once",
            311,
        )
    } else {
        (
            s.conf_multi.clone(),
            "MultiUser=yes: two users' clients at once",
            301,
        )
    };
    let pa = s.prolog(&conf, job, 0, 30);
    let pb = s.prolog(&conf, job + 1, 1, 30);
    let daemon = control_daemon(&conf);
    let mode = s.compute_mode();
    let plan_a = s.plan(&conf, job)?;
    let plan_b = s.plan(&conf, job + 1)?;
    let mut a = s.client(0, &plan_a.env, 64, 10_000)?;
    let mut b = s.client(1, &plan_b.env, 64, 10_000)?;
    let ra = a.wait_event("result", Duration::from_secs(60));
    let rb = b.wait_event("result", Duration::from_secs(60));
    let both_alive =
        matches!(a.child.try_wait(), Ok(None)) && matches!(b.child.try_wait(), Ok(None));
    a.finish(Duration::from_secs(60));
    b.finish(Duration::from_secs(60));
    let ea = s.epilog(&conf, job, 0);
    let eb = s.epilog(&conf, job + 1, 1);
    report.push(Check::new(
        name,
        verdict(ra.is_some() && rb.is_some() && both_alive),
        format!(
            "daemon `{}`, GPU in mode {mode}; first user's kernel {} ms, second user's {} ms, both running together: {both_alive}",
            daemon.map(|(_, c)| c).unwrap_or_else(|| "not running".into()),
            shown(ra.as_ref().and_then(|r| r.kernel_ms)),
            shown(rb.as_ref().and_then(|r| r.kernel_ms))
        ),
        format!("{}\n{}\n{}\n{}\n{}\n{}", pa.detail(), pb.detail(), a.detail(), b.detail(), ea.detail(), eb.detail()),
    ));
    Ok(())
}

/// A job's user, with the pipe directory its tasks are given, sends the
/// daemon control commands (a lower default thread percentage, `quit`):
/// the daemon must refuse both and keep running with its limits.
fn client_cannot_control(s: &mut Setup, report: &mut Report) -> Result<(), String> {
    let conf = s.conf.clone();
    let p = s.prolog(&conf, 401, 0, 20);
    let plan = s.plan(&conf, 401)?;
    let before = s.control(&conf, &["get_default_active_thread_percentage"]);
    let user = s.user(0).clone();
    let mut cmd = Command::new(&s.control);
    cmd.env_clear()
        .envs(client_env(&user, &plan.env))
        .current_dir("/")
        .uid(user.uid)
        .gid(user.gid);
    let sent = bounded::run(
        cmd,
        Some(b"set_default_active_thread_percentage 7\nquit\n"),
        PROGRAM_TIMEOUT,
    );
    std::thread::sleep(Duration::from_millis(500));
    let alive = control_daemon(&conf);
    let after = s.control(&conf, &["get_default_active_thread_percentage"]);
    let e = s.epilog(&conf, 401, 0);
    let unchanged = before.is_ok() && before.as_ref().ok() == after.as_ref().ok();
    report.push(Check::new(
        "a job's user cannot send the MPS daemon control commands",
        verdict(alive.is_some() && unchanged),
        format!(
            "as {}: daemon still running: {}; default thread percentage before {}, after {}",
            user.name,
            alive.is_some(),
            before.as_deref().map(str::trim).unwrap_or("?"),
            after.as_deref().map(str::trim).unwrap_or("?")
        ),
        format!(
            "{}\nthe user's control call: {}\n{}",
            p.detail(),
            match &sent {
                Ok(r) => format!("{} {}{}", r.status, r.stdout, r.stderr),
                Err(e) => e.to_string(),
            },
            e.detail()
        ),
    ));
    Ok(())
}

/// `ComputeMode=exclusive`, a share of two tasks, and the epilog's
/// `terminate_client`: the prolog puts GPU 0 in EXCLUSIVE_PROCESS before
/// starting its daemon; each of the two tasks gets half the share's
/// memory (both allocate 80 % of their half at once; a third client asks
/// for 120 % of a half, which its limit refuses); a second user's client
/// without MPS tries the GPU meanwhile; the epilog, while both tasks still
/// run, terminates them (they name the job in `SLURM_JOB_ID`) and gives
/// the GPU back the mode it had.
fn exclusive_and_clients(s: &mut Setup, report: &mut Report) -> Result<(), String> {
    let conf = s.conf_exclusive.clone();
    let job = 501;
    let before = s.compute_mode();
    let p = s.prolog(&conf, job, 0, 50);
    let during = s.compute_mode();
    let cfg = load(&conf)?;
    let ledger = Ledger::open(&cfg.state_dir, 0).map_err(|e| e.to_string())?;
    let plan = task_plan(&cfg, &ledger, job, true, 2)?
        .ok_or_else(|| format!("job {job} holds no share"))?;
    let task_mib = memory_mib(&plan.env);
    let mut env = plan.env.clone();
    env.push(("SLURM_JOB_ID".to_owned(), job.to_string()));
    let mut tasks = [
        s.client(0, &env, task_mib * 8 / 10, 60_000)?,
        s.client(0, &env, task_mib * 8 / 10, 60_000)?,
    ];
    let results: Vec<Option<ClientLine>> = tasks
        .iter_mut()
        .map(|t| t.wait_event("result", Duration::from_secs(120)))
        .collect();
    let mut over = s.client(0, &env, task_mib * 12 / 10, 0)?;
    let over_result = over.wait_event("result", Duration::from_secs(60));
    over.finish(PROGRAM_TIMEOUT);
    let mut outside = s.client(1, &s.without_mps(&plan.env), 64, 0)?;
    let outside_result = outside.wait_event("result", Duration::from_secs(60));
    outside.finish(PROGRAM_TIMEOUT);
    let clients = s.control(&conf, &["get_server_list"]);
    let epilog_at = Instant::now();
    let e = s.epilog(&conf, job, 0);
    for t in &mut tasks {
        t.finish(Duration::from_secs(30));
    }
    let ended: Vec<String> = tasks
        .iter()
        .map(|t| match t.done_at {
            Some(at) => format!(
                "ended {:.1} s after the epilog started",
                at.saturating_duration_since(epilog_at).as_secs_f64()
            ),
            None => "still ran 30 s after the epilog (killed)".to_owned(),
        })
        .collect();
    let after = s.compute_mode();
    let alloc = |r: &Option<ClientLine>| {
        r.as_ref()
            .and_then(|r| r.alloc.clone())
            .unwrap_or_else(|| "no result".into())
    };
    let halves_ok = results.iter().all(|r| alloc(r) == "ok");
    let over_refused = alloc(&over_result) != "ok";
    report.push(Check::new(
        "ComputeMode=exclusive, a two-task share, clients ended by the epilog",
        verdict(
            during.eq_ignore_ascii_case("Exclusive_Process")
                && halves_ok
                && over_refused
                && after.eq_ignore_ascii_case(&before),
        ),
        format!(
            "mode {before} -> {during} while shared -> {after}; each task's limit {task_mib} MiB:              80 % in both tasks at once {}, 120 % {}; a second user's client without MPS: {};              the two tasks {}",
            if halves_ok { "allocated" } else { "FAILED" },
            if over_refused { "refused" } else { "ALLOWED" },
            match &outside_result {
                Some(r) if r.init.as_deref() == Some("ok") => "ran".to_owned(),
                Some(r) => format!("failed: {}", r.init.as_deref().unwrap_or("?")),
                None => "no result".to_owned(),
            },
            ended.join(", ")
        ),
        format!(
            "{}
servers: {}
{}
{}
{}
{}
{}
{}",
            p.detail(),
            clients.unwrap_or_else(|e| e),
            tasks[0].detail(),
            tasks[1].detail(),
            over.detail(),
            outside.detail(),
            e.detail(),
            plan.banner
        ),
    ));
    Ok(())
}

/// A job's task that edits its environment: its thread percentage and
/// memory limit raised past its share's, then both unset. The server's
/// limits (the largest share's on the GPU) must hold: CUDA reports no more
/// SMs than to the share's own task, and an allocation past the share's
/// memory fails.
fn raised_limits(s: &mut Setup, report: &mut Report) -> Result<(), String> {
    let conf = s.conf.clone();
    let job = 601;
    let p = s.prolog(&conf, job, 0, 25);
    let plan = s.plan(&conf, job)?;
    let limit = memory_mib(&plan.env);
    const THREADS: &str = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";
    const MEMORY: &str = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";
    let raised: Vec<(String, String)> = plan
        .env
        .iter()
        .map(|(k, v)| match k.as_str() {
            THREADS => (k.clone(), "100".to_owned()),
            MEMORY => (k.clone(), format!("0={}M", limit * 4)),
            _ => (k.clone(), v.clone()),
        })
        .collect();
    let unset: Vec<(String, String)> = plan
        .env
        .iter()
        .filter(|(k, _)| k != THREADS && k != MEMORY)
        .cloned()
        .collect();
    let mut seen = vec![p.detail()];
    let mut run = |env: &[(String, String)]| -> Result<Option<ClientLine>, String> {
        let mut c = s.client(0, env, limit * 3 / 2, 0)?;
        let r = c.wait_event("result", Duration::from_secs(60));
        c.finish(PROGRAM_TIMEOUT);
        seen.push(c.detail());
        Ok(r)
    };
    let own = run(&plan.env)?;
    let up = run(&raised)?;
    let none = run(&unset)?;
    seen.push(s.epilog(&conf, job, 0).detail());
    let sms = |r: &Option<ClientLine>| r.as_ref().and_then(|r| r.sms);
    let alloc = |r: &Option<ClientLine>| {
        r.as_ref()
            .and_then(|r| r.alloc.clone())
            .unwrap_or_else(|| "no result".into())
    };
    let held = |r: &Option<ClientLine>| {
        sms(r).is_some() && sms(r) <= sms(&own) && alloc(r) != "ok" && alloc(r) != "no result"
    };
    report.push(Check::new(
        "a task that raises or unsets its limits in its environment",
        verdict(limit > 0 && held(&up) && held(&none)),
        format!(
            "share of 25 units, {limit} MiB: its own environment {} SMs; raised to 100 % and \
             {} MiB: {} SMs, cudaMalloc of {} MiB: {}; both unset: {} SMs, {}",
            shown(sms(&own)),
            limit * 4,
            shown(sms(&up)),
            limit * 3 / 2,
            alloc(&up),
            shown(sms(&none)),
            alloc(&none)
        ),
        seen.join("\n"),
    ));
    Ok(())
}

/// `kill -9` of the daemon: the next share's prolog finds it dead and
/// starts a new one, which serves the job.
fn killed_daemon(s: &mut Setup, report: &mut Report) -> Result<(), String> {
    let conf = s.conf.clone();
    let p1 = s.prolog(&conf, 105, 0, 20);
    let first = control_daemon(&conf);
    if let Some((pid, _)) = &first {
        daemon::kill_all(&[*pid]);
        std::thread::sleep(Duration::from_millis(500));
    }
    let p2 = s.prolog(&conf, 106, 0, 20);
    let second = control_daemon(&conf);
    let plan = s.plan(&conf, 106)?;
    let mut c = s.client(0, &plan.env, 64, 0)?;
    let r = c.wait_event("result", Duration::from_secs(60));
    c.finish(PROGRAM_TIMEOUT);
    let e1 = s.epilog(&conf, 105, 0);
    let e2 = s.epilog(&conf, 106, 0);
    let restarted = p2.text.contains("restarted");
    report.push(Check::new(
        "a daemon killed with kill -9 is restarted by the next prolog",
        verdict(
            first.is_some()
                && second.as_ref().map(|d| d.0) != first.as_ref().map(|d| d.0)
                && second.is_some()
                && restarted
                && r.as_ref().and_then(|r| r.init.as_deref()) == Some("ok"),
        ),
        format!(
            "killed {}; next prolog: {}; new daemon {}; the job's client {}",
            shown(first.as_ref().map(|d| d.0)),
            if restarted {
                "says restarted"
            } else {
                "says nothing of a restart"
            },
            shown(second.as_ref().map(|d| d.0)),
            if r.is_some() { "ran" } else { "did not run" }
        ),
        format!(
            "{}\n{}\n{}\n{}\n{}",
            p1.detail(),
            p2.detail(),
            c.detail(),
            e1.detail(),
            e2.detail()
        ),
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpushare::mps::config::MpsControl;
    use gpushare::mps::node::{prolog, JobEnv, Node, PrologOutcome};
    use gpushare::shared::booking::MpsBooking;

    /// A node like the check's (one GPU, gpushare places), no daemon.
    fn node(dir: &Path) -> (GpuMpsConfig, Node) {
        let cfg = GpuMpsConfig {
            state_dir: dir.join("state"),
            gpu_devices: Some(vec![PathBuf::from("/dev/nvidia0")]),
            slurm_mps_count: Some(u64::from(UNITS_PER_GPU)),
            units_per_gpu: UNITS_PER_GPU,
            placement: config::Placement::Gpushare,
            mps_control: MpsControl::Disabled,
            gpu_memory_mib: Some(80 * 1024),
            ..GpuMpsConfig::default()
        };
        // SAFETY: geteuid has no preconditions.
        let owner = unsafe { libc::geteuid() };
        let node = Node::with_config(cfg.clone(), &dir.join("gpu_mps.conf"), owner)
            .unwrap_or_else(|e| panic!("{e}"));
        (cfg, node)
    }

    #[test]
    fn the_client_gets_the_environment_the_spank_plugin_gives_a_task() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (cfg, node) = node(dir.path());
        // What the check hands gpu-mps-prolog is what slurmd hands it: the
        // prolog's own reader finds the job, its user and a 25-unit share.
        let given = prolog_env(4242, 1234, "gpushare-hwa", 25);
        let env = JobEnv::from_env(|k| given.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (env.job, env.uid, env.user.as_str()),
            (4242, 1234, "gpushare-hwa")
        );
        let report = prolog(&node, &env, &MpsBooking::default(), || Ok(Vec::new()))
            .unwrap_or_else(|e| panic!("{e}"));
        let PrologOutcome::Placed { share, .. } = report.outcome else {
            panic!("not placed: {:?}", report.outcome);
        };
        assert_eq!((share.units, share.gpu, share.uid), (25, 0, 1234));
        // The plugin's plan, from the same ledger, through the same call.
        let ledger = Ledger::open(&cfg.state_dir, node.owner).unwrap_or_else(|e| panic!("{e}"));
        let plan = task_plan(&cfg, &ledger, 4242, true, 1)
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("no plan"));
        let user = User {
            name: "gpushare-hwa".into(),
            uid: 1234,
            gid: 1234,
        };
        let given = client_env(&user, &plan.env);
        // Every variable the plugin sets, unchanged, and nothing else but
        // what any process of the user has.
        for (k, v) in &plan.env {
            assert_eq!(given.get(k), Some(v), "{k}");
        }
        let extra: Vec<&str> = given
            .keys()
            .map(String::as_str)
            .filter(|k| !plan.env.iter().any(|(n, _)| n == k))
            .collect();
        assert_eq!(extra, ["HOME", "LOGNAME", "PATH", "USER"]);
        assert_eq!(
            given
                .get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
                .map(String::as_str),
            Some("25")
        );
        assert_eq!(
            given
                .get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
                .map(String::as_str),
            Some("0=20480M")
        );
        let pipe = daemon::pipe_dir(&cfg, 0).to_string_lossy().into_owned();
        assert_eq!(given.get("CUDA_MPS_PIPE_DIRECTORY"), Some(&pipe));
    }

    #[test]
    fn a_busy_gpu_or_running_jobs_keep_the_check_off() {
        assert_eq!(busy_reason("", 0), None);
        assert_eq!(busy_reason("No running processes found\n", 0), None);
        let why = busy_reason("4242, python3\n", 0).unwrap_or_default();
        assert!(why.contains("GPU 0 runs 4242, python3"), "{why}");
        let why = busy_reason("", 2).unwrap_or_default();
        assert!(why.contains("2 slurmstepd"), "{why}");
    }

    #[test]
    fn only_users_the_check_made_are_its_own() {
        let ours = format!("gpushare-hwa:x:998:998:{USER_COMMENT}:/:/usr/sbin/nologin\n");
        assert!(made_by_check(&ours));
        assert!(!made_by_check(
            "gpushare-hwa:x:1001:1001:Ada Lovelace:/home/ada:/bin/bash\n"
        ));
        assert!(!made_by_check(""));
    }

    #[test]
    fn a_report_is_written_only_as_a_new_file() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("report.md");
        assert!(write_new(&path, "first").is_ok());
        assert!(write_new(&path, "second").is_err());
        assert_eq!(fs::read_to_string(&path).unwrap_or_default(), "first");
    }

    #[test]
    fn a_machine_without_a_gpu_is_one_line_of_why() {
        let why = gpu_absent(Path::new("/nonexistent/nvidia0"), None).unwrap_or_default();
        assert!(why.contains("/nonexistent/nvidia0 does not exist"), "{why}");
        assert!(!why.contains('\n'));
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let device = dir.path().join("nvidia0");
        fs::write(&device, "").unwrap_or_else(|e| panic!("{e}"));
        let why = gpu_absent(&device, None).unwrap_or_default();
        assert!(why.contains("nvidia-smi is not installed"), "{why}");
        // An nvidia-smi that lists no GPU (driver not loaded) is no GPU.
        let smi = dir.path().join("nvidia-smi");
        fs::write(&smi, "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\nexit 9\n")
            .unwrap_or_else(|e| panic!("{e}"));
        fs::set_permissions(&smi, fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("{e}"));
        let why = gpu_absent(&device, Some(&smi)).unwrap_or_default();
        assert!(
            why.contains("could not communicate with the NVIDIA driver"),
            "{why}"
        );
        assert!(!why.contains('\n'));
    }

    #[test]
    fn the_report_is_a_table_then_the_details_as_code_blocks() {
        let report = Report {
            gpu: "NVIDIA H100 80GB HBM3".into(),
            driver: "575.57.08".into(),
            cuda: "release 12.9".into(),
            host: "gpu01".into(),
            date: "2026-11-24 15:00 UTC".into(),
            intro: None,
            table: None,
            checks: vec![
                Check::new(
                    "memory | limit",
                    Verdict::Pass,
                    "a\nb | c".into(),
                    "out ```x```\n".into(),
                ),
                Check::fail("flags", "none".into(), String::new()),
                Check::new("help", Verdict::Seen, "-M".into(), "usage".into()),
            ],
        };
        let text = render(&report);
        assert!(
            text.starts_with(
                "#### 2026-11-24 15:00 UTC — NVIDIA H100 80GB HBM3, driver 575.57.08\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("| memory \\| limit | pass | a b \\| c |\n"),
            "{text}"
        );
        assert!(text.contains("| flags | FAIL | none |\n"), "{text}");
        assert!(text.contains("| help | seen | -M |\n"), "{text}");
        // A detail cannot end its code block early; a check without one has none.
        assert!(text.contains("```text\nout '''x'''\n```"), "{text}");
        assert!(!text.contains("<summary>flags</summary>"), "{text}");
        assert_eq!(text.matches("<details>").count(), 2);
        assert!(text.contains("`make hw-check` as root on gpu01"), "{text}");
    }

    #[test]
    fn the_benchmarks_report_says_what_ran_and_puts_its_table_first() {
        let report = Report {
            intro: Some("8 jobs three ways.".into()),
            table: Some("| how | batch |\n|---|---|\n| alone | 17.3 s |\n".into()),
            checks: vec![Check::new(
                "alone",
                Verdict::Seen,
                "17.3 s".into(),
                String::new(),
            )],
            ..Report::default()
        };
        let text = render(&report);
        let table = text.find("| alone | 17.3 s |").unwrap_or(usize::MAX);
        let checks = text.find("| check | result |").unwrap_or(0);
        assert!(
            text.contains("`make bench-gpu` as root on an unnamed host") && table < checks,
            "{text}"
        );
        assert!(text.contains("): 8 jobs three ways.\n"), "{text}");
    }
}
