//! `gpushare-hw-check` (`make hw-check`): what gpushare's MPS half does on a
//! real NVIDIA GPU, recorded as a Markdown report for docs/hardware.md.
//!
//! Run as root on any machine with an NVIDIA GPU and its driver (CUDA's
//! compiler for the checks of the nvcc client); no Slurm needed. It creates two throwaway users, writes a
//! `gpu_mps.conf` in a temporary directory (the real
//! `nvidia-cuda-mps-control`, `StateDir` in that directory, GPU 0 only),
//! runs the release `gpu-mps-prolog` and `gpu-mps-epilog` with the
//! environment slurmd gives them ([`prolog_env`]), and runs a small CUDA
//! client (`tests/hw-check/client.cu`, compiled here with nvcc) as each
//! job's user with exactly the environment the SPANK plugin gives a task:
//! the plan [`gpushare::mps::node::task_plan`] makes from the node's ledger,
//! the function the plugin calls ([`client_env`]).
//!
//! Where nvcc is missing (a production node carries the driver alone),
//! the checks that need that client say "not run: no nvcc" and the rest
//! run; `gpu-mps selftest`'s driver-API client needs no toolkit, and where
//! both run their SM figures are compared ([`selftest`]).
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
mod checks;
mod selftest;
mod usage;

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
    /// Run only the per-share use check (after the GPU's facts)
    #[arg(long)]
    usage_only: bool,
    /// Without a GPU: only the per-share use check, on stand-ins (the
    /// `hw_check` suite)
    #[arg(long, hide = true)]
    usage_standin: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let smi = find_program("nvidia-smi");
    let standin = args.usage_standin;
    if let Some(why) = gpu_absent(Path::new("/dev/nvidia0"), smi.as_deref()).filter(|_| !standin) {
        eprintln!("gpushare-hw-check: no NVIDIA GPU here, nothing checked: {why}");
        return ExitCode::FAILURE;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!(
            "gpushare-hw-check: run me as root (I create users, cgroups and start MPS daemons)"
        );
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
    if !args.force && !standin {
        if let Some(why) = busy(&smi) {
            eprintln!("gpushare-hw-check: {why}: not now (--force runs anyway)");
            return ExitCode::from(2);
        }
    }
    let cleanup = Arc::new(Mutex::new(Cleanup::default()));
    catch_signals(Arc::clone(&cleanup));
    let mut report = Report::default();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if standin {
            return usage::standin(&args, Arc::clone(&cleanup), &mut report);
        }
        let mut setup = Setup::new(&args, smi, Arc::clone(&cleanup))?;
        if args.bench {
            bench::run(&mut setup, &mut report)
        } else {
            checks::run_checks(&mut setup, &mut report)
        }
    }));
    lock(&cleanup).run(&mut report);
    let outcome = match result {
        Ok(result) => result,
        Err(payload) => Err(format!(
            "the check panicked: {}",
            testcluster::guard_message(&*payload)
        )),
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
    /// Not checked here (the detail says why).
    Skip,
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
    /// The command, where not `make hw-check` or `make bench-gpu`.
    invoked: Option<String>,
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
        Verdict::Skip => "skip",
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
    let make = if report.intro.is_some() {
        "make bench-gpu"
    } else {
        "make hw-check"
    };
    out.push_str(&format!(
        "`{}` as root on {} ({}, gpushare {}): {}\n\n",
        report.invoked.as_deref().unwrap_or(make),
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
    /// The cgroup tree of the per-share use check (`usage.rs`).
    cgroups: Option<PathBuf>,
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
        if let Some(top) = &self.cgroups {
            seen.extend(usage::remove_tree(top));
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
            } else if let Err(e) =
                fs::remove_dir_all(dir).map(|()| testcluster::cluster::forget_node_records(dir))
            {
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
    /// How nvcc built the client (for the report), or that there is none.
    compiled: String,
    dir: PathBuf,
    bin: PathBuf,
    smi: PathBuf,
    control: PathBuf,
    /// The nvcc-built client; `None` without nvcc.
    client: Option<PathBuf>,
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
    /// `--usage-only`.
    usage_only: bool,
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
        let bin = bin_dir(args)?;
        let control = find_program(CONTROL_PROGRAM)
            .ok_or_else(|| format!("{CONTROL_PROGRAM} is not installed"))?;
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

        let slurm_conf = slurm_dir(&dir)?;
        let slurm_dir = slurm_conf.parent().unwrap_or(&dir).to_path_buf();
        // DaemonLinger=0: each check ends with the GPU as it found it (the
        // epilog of the last share stops the daemon, as a check asserts).
        let conf_text = |state: &str, extra: &str| {
            format!(
                "UnitsPerGPU={UNITS_PER_GPU}\nGPUDevices=/dev/nvidia0\nSlurmMpsCount={UNITS_PER_GPU}\n\
                 Placement=gpushare\nStateDir={}\nMPSControl={}\nDaemonLinger=0\n{extra}",
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

        let (client, compiled) = selftest::build_client(&dir)?;
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
            slurm_conf,
            users,
            wait: Duration::from_secs(args.wait),
            usage_only: args.usage_only,
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
        run_node_program(&self.bin, &self.slurm_conf, program, conf, job, user, units)
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
        let client = self.client.as_ref().ok_or(selftest::NO_NVCC)?;
        as_user(client, args, self.user(user), env)
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

/// The directory of the node programs (`--bin-dir`, else this program's),
/// each checked there.
fn bin_dir(args: &Args) -> Result<PathBuf, String> {
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
    Ok(bin)
}

/// slurm.conf's directory under `dir` as the prolog reads it: no gres.conf
/// (so gpushare places), cgroup v1 named (so the share is not refused for
/// cgroup v2: no Slurm confines anything here anyway); slurm.conf's path.
fn slurm_dir(dir: &Path) -> Result<PathBuf, String> {
    let slurm_dir = dir.join("slurm");
    fs::create_dir(&slurm_dir).map_err(|e| e.to_string())?;
    fs::write(slurm_dir.join("slurm.conf"), "").map_err(|e| e.to_string())?;
    fs::write(slurm_dir.join("cgroup.conf"), "CgroupPlugin=cgroup/v1\n")
        .map_err(|e| e.to_string())?;
    Ok(slurm_dir.join("slurm.conf"))
}

/// Runs the release node program `program` of `bin` for `job` as slurmd
/// would, with `slurm_conf` as `SLURM_CONF`.
fn run_node_program(
    bin: &Path,
    slurm_conf: &Path,
    program: &str,
    conf: &Path,
    job: u32,
    user: &User,
    units: u32,
) -> Ran {
    let mut cmd = Command::new(bin.join(program));
    cmd.arg("--conf").arg(conf).env_clear();
    for (k, v) in prolog_env(job, user.uid, &user.name, units) {
        cmd.env(k, v);
    }
    cmd.env("SLURM_CONF", slurm_conf);
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

/// Starts `program args` as `user` from `/`, with its task environment
/// ([`client_env`] of `env`) and nothing else of root's.
fn as_user(
    program: &Path,
    args: &[String],
    user: &User,
    env: &[(String, String)],
) -> Result<Client, String> {
    let mut cmd = Command::new(program);
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

#[cfg(test)]
mod tests;
