//! A stand-in for NVIDIA's `nvidia-cuda-mps-control`, for the test cluster
//! (there is no GPU here), installed under that name
//! ([`testcluster::standin::install`]). It tests gpushare's handling of
//! the program and its daemon process, not MPS, and costs what a small
//! compiled program costs, so that benchmarks show gpushare's calls and not
//! a shell's start-up.
//!
//! - It records every call in `standin.log` beside itself: `gpu=N args=...`
//!   for a call with arguments, `gpu=N cmd=LINE` for each line read from
//!   its standard input (the real program reads commands until the end of
//!   its input); and one line per call (per process start) in
//!   `standin.calls`.
//! - `-d` leaves a process named `nvidia-cuda-mps-control` running with the
//!   caller's `CUDA_MPS_PIPE_DIRECTORY`, as the real daemon does, and a
//!   `control` file in that directory holding its pid (the real one makes a
//!   socket there); a second `-d` fails while that file exists. It also
//!   writes the daemon's pid to `daemon-gpu-N` beside itself (N: the
//!   caller's `CUDA_VISIBLE_DEVICES`), removed by `quit`: how the stand-in
//!   `libcuda.so.1` (tests/fake-libcuda) sees, as any user, that GPU N's
//!   daemon runs.
//! - Commands fail with the real program's message when the daemon of that
//!   file is gone; `quit` ends it and its servers; other `set_*` and
//!   `get_*` commands succeed silently; anything else fails.
//! - Servers, as a real GPU showed them (the MPS world it shares with the
//!   stand-in libcuda: `tests/fake-libcuda/src/mps_world.rs`):
//!   `start_server -uid U` starts one for the daemon's GPU where none runs
//!   (so does the stand-in libcuda for its first MPS client); it lives
//!   until `quit`. `get_server_list` answers the daemon's live servers,
//!   then the pids that `<dir>/servers` lists for the GPU (lines `GPU
//!   PID`).
//! - `get_client_list SERVER` answers the live MPS clients of the stand-in
//!   libcuda registered with that server, then the pids `<dir>/clients`
//!   lists for that server of the GPU (lines `GPU SERVER CLIENT`);
//!   `terminate_client SERVER CLIENT` ends that client's work safely (a
//!   registered client's next call fails with
//!   `CUDA_ERROR_MPS_CLIENT_TERMINATED`, and its being killed afterwards
//!   harms no neighbour); the log keeps it.
//! - `<dir>/start-server-fail` exists: `start_server` fails (a driver
//!   that will not start a server on request).
//! - `<dir>/hang` exists: every call hangs (a hung control program).
//! - `<dir>/slow` holds a number of milliseconds: each call with commands
//!   takes that long before it acts and logs (a daemon on a loaded node).
//! - `<dir>/fail` exists: every call fails, as a control program that
//!   cannot reach the driver does.
//!
//! Installed as `nvidia-smi` ([`testcluster::standin::install_smi`]) it
//! stands in for that instead: each call is logged as `smi args=...` in
//! `standin.log`; `-i N --query-gpu=compute_mode --format=csv,noheader`
//! answers GPU N's mode from `<dir>/compute-mode-N` (`Default` where there
//! is none); `-i N -c MODE` writes it; N is what `-i` named, an index or a
//! PCI bus id (`compute-mode-00000000:3B:00.0`); `<dir>/smi-fail` makes
//! every call fail.
//!
//! Installed as `gpushare-nvml-usage` ([`testcluster::standin::install_nvml_usage`],
//! named by `ShareUsage=` in gpu_mps.conf) it stands in for `gpu-mps
//! --nvml-usage`, the node timer's NVML query: each call is logged as
//! `usage args=...` in `standin.log`; it prints `<dir>/nvml-usage` (the
//! recorded figures, in the text of `gpushare::mps::usage::gpu_block`)
//! line by line, flushed, and where a line reads `hang` it stops there
//! and sleeps, as a driver call that never returns; no such file: it
//! prints nothing (no GPU answered).
//!
//! Installed as `cuda-client` ([`testcluster::standin::install_client`])
//! it is a program that opens a CUDA context on its GPU and keeps it
//! `SECONDS` (its one argument), as the driver allows in the mode the
//! stand-in `nvidia-smi` keeps for that GPU, by index: `Prohibited` fails,
//! `Exclusive_Process` fails while another process holds the GPU (an
//! exclusive `flock` of its `compute-mode-N` file), `Default` never does.
//! Its GPU is the one Slurm gave the job or step (`SLURM_STEP_GPUS`,
//! `SLURM_JOB_GPUS`: global indices), else `CUDA_VISIBLE_DEVICES`.
//! `cuda-client SECONDS N` starts N such clients at once and waits for
//! each itself (`waitpid`, never a shell's `wait`, which dash can miss
//! where the job's shell starts with SIGCHLD blocked), prints `clients
//! failed: F` and exits F.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

const NAME: &str = "nvidia-cuda-mps-control";

/// The MPS world the stand-in libcuda reads too: servers, clients and
/// their faults.
#[path = "../../fake-libcuda/src/mps_world.rs"]
#[allow(dead_code)] // the library's half of it
mod mps_world;

fn fail(text: &str) -> ExitCode {
    eprintln!("{text}");
    ExitCode::FAILURE
}

/// A live process (a killed daemon nobody reaped is a zombie: as dead as
/// a gone one).
fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        !s.lines()
            .any(|l| l.starts_with("State:") && l.contains('Z'))
    })
}

/// Set in the daemon's and servers' processes: they only wait to be killed.
const DAEMON_MARK: &str = mps_world::SLEEPER_MARK;

/// Starts the daemon: this program again, named as NVIDIA's, with the
/// options it was given (`-d -M`), as the real daemon keeps them on its
/// command line.
fn start_daemon(here: &Path, gpu: &str, pipe: &Path, args: &[String]) -> ExitCode {
    let control = pipe.join("control");
    if control.exists() {
        return fail("An instance of this daemon is already running");
    }
    let program = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("sleep"));
    let mut cmd = Command::new(program);
    cmd.arg0(NAME)
        .args(args)
        .env(DAEMON_MARK, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: setsid is async-signal-safe and touches no memory; detached
    // as the real daemon is, so callers never wait on it.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    // spawn returns once the exec succeeded: the process carries its name.
    match cmd.spawn() {
        Ok(child) => match fs::write(&control, format!("{}\n", child.id())) {
            Ok(()) => {
                // Read by the stand-in libcuda as an unprivileged client,
                // who cannot see into the pipe directory.
                let _ = fs::write(daemon_file(here, gpu), format!("{}\n", child.id()));
                ExitCode::SUCCESS
            }
            Err(e) => fail(&format!("{}: {e}", control.display())),
        },
        Err(e) => fail(&format!("cannot start the daemon: {e}")),
    }
}

/// The stand-in servers (of the stand-ins in `here`) of the daemon of
/// `pipe` (their environment names it, as the real servers' does).
fn pipe_servers(here: &Path, pipe: &Path) -> Vec<mps_world::Server> {
    let mut wanted = b"CUDA_MPS_PIPE_DIRECTORY=".to_vec();
    wanted.extend_from_slice(pipe.as_os_str().as_encoded_bytes());
    mps_world::servers(here)
        .into_iter()
        .filter(|s| {
            fs::read(format!("/proc/{}/environ", s.pid))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == wanted.as_slice()))
        })
        .collect()
}

/// Where the pid of GPU `gpu`'s daemon is announced (see the module's
/// text).
fn daemon_file(here: &Path, gpu: &str) -> PathBuf {
    here.join(format!("daemon-gpu-{gpu}"))
}

/// `nvidia-smi`'s spelling of a `-c` value.
fn mode_name(value: &str) -> Option<&'static str> {
    match value.to_ascii_uppercase().as_str() {
        "DEFAULT" | "0" => Some("Default"),
        "EXCLUSIVE_PROCESS" | "3" => Some("Exclusive_Process"),
        "PROHIBITED" | "2" => Some("Prohibited"),
        _ => None,
    }
}

/// One line `WHO args=ARGS` appended to `standin.log`.
fn log_call(here: &Path, who: &str, args: &[String]) {
    if let Ok(mut f) = fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(here.join("standin.log"))
    {
        let _ = f.write_all(format!("{who} args={}\n", args.join(" ")).as_bytes());
    }
}

/// The stand-in `nvidia-smi` (see the module's text).
fn smi(here: &Path, args: &[String]) -> ExitCode {
    log_call(here, "smi", args);
    if here.join("smi-fail").exists() {
        return fail("stand-in nvidia-smi told to fail (its smi-fail file exists)");
    }
    let value_of = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let Some(gpu) = value_of("-i") else {
        return fail("stand-in nvidia-smi: no -i");
    };
    let state = here.join(format!("compute-mode-{gpu}"));
    if let Some(mode) = value_of("-c") {
        let Some(name) = mode_name(&mode) else {
            return fail(&format!("Invalid compute mode {mode}"));
        };
        return match fs::write(&state, format!("{name}\n")) {
            Ok(()) => {
                println!(
                    "Set compute mode to {} for GPU 00000000:0{gpu}:00.0.",
                    mode.to_ascii_uppercase()
                );
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e.to_string()),
        };
    }
    if args.iter().any(|a| a == "--query-gpu=compute_mode") {
        let mode = fs::read_to_string(&state).unwrap_or_else(|_| "Default\n".into());
        print!("{mode}");
        return ExitCode::SUCCESS;
    }
    fail("stand-in nvidia-smi: unknown call")
}

/// `n` stand-in CUDA programs at once, each waited for: exit status the
/// number that failed.
fn clients(seconds: u64, n: usize) -> ExitCode {
    let Ok(me) = std::env::current_exe() else {
        return fail("stand-in CUDA client: no path to itself");
    };
    let started: Vec<_> = (0..n)
        .map(|_| {
            std::process::Command::new(&me)
                .arg(seconds.to_string())
                .spawn()
        })
        .collect();
    let mut failed = 0usize;
    for child in started {
        let ok = match child {
            Ok(mut child) => child.wait().is_ok_and(|status| status.success()),
            Err(_) => false,
        };
        failed += usize::from(!ok);
    }
    println!("clients failed: {failed}");
    ExitCode::from(u8::try_from(failed).unwrap_or(u8::MAX))
}

/// The stand-in NVML query (see the module's text).
fn nvml_usage(here: &Path, args: &[String]) -> ExitCode {
    log_call(here, "usage", args);
    let text = fs::read_to_string(here.join("nvml-usage")).unwrap_or_default();
    let mut out = std::io::stdout().lock();
    for line in text.lines() {
        if line == "hang" {
            let _ = out.flush();
            std::thread::sleep(Duration::from_secs(1000));
            return ExitCode::FAILURE;
        }
        let _ = writeln!(out, "{line}");
    }
    let _ = out.flush();
    ExitCode::SUCCESS
}

/// The stand-in CUDA program (see the module's text).
fn client(here: &Path, args: &[String]) -> ExitCode {
    let gpu = ["SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|g| !g.is_empty()));
    let Some(gpu) = gpu.filter(|g| !g.contains(',')) else {
        return fail("stand-in CUDA client: not one GPU (SLURM_JOB_GPUS, CUDA_VISIBLE_DEVICES)");
    };
    let Some(seconds) = args.first().and_then(|a| a.parse::<u64>().ok()) else {
        return fail("stand-in CUDA client: SECONDS to hold the GPU expected");
    };
    if let Some(n) = args.get(1).and_then(|a| a.parse::<usize>().ok()) {
        return clients(seconds, n);
    }
    // Held open while the context lives: its lock is the context's.
    let state = fs::File::open(here.join(format!("compute-mode-{gpu}"))).ok();
    let mode = state
        .as_ref()
        .and_then(|mut f| {
            let mut text = String::new();
            f.read_to_string(&mut text)
                .ok()
                .map(|_| text.trim().to_owned())
        })
        .unwrap_or_else(|| "Default".into());
    let busy = "all CUDA-capable devices are busy or unavailable";
    match (mode.as_str(), &state) {
        ("Prohibited", _) => return fail(&format!("GPU {gpu} (Prohibited): {busy}")),
        ("Exclusive_Process", _)
            if gpu
                .parse()
                .is_ok_and(|g: u32| mps_world::server_on(here, g).is_some()) =>
        {
            return fail(&format!(
                "GPU {gpu} (Exclusive_Process, an MPS server holds it): {busy}"
            ));
        }
        ("Exclusive_Process", Some(f)) => {
            // SAFETY: flock on a descriptor this process holds open.
            let locked = unsafe {
                libc::flock(
                    std::os::fd::AsRawFd::as_raw_fd(f),
                    libc::LOCK_EX | libc::LOCK_NB,
                )
            };
            if locked != 0 {
                return fail(&format!(
                    "GPU {gpu} (Exclusive_Process, another process holds it): {busy}"
                ));
            }
        }
        _ => {}
    }
    println!("GPU {gpu} ({mode}): context of pid {}", std::process::id());
    std::thread::sleep(Duration::from_secs(seconds));
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    if std::env::var_os(DAEMON_MARK).is_some() {
        loop {
            std::thread::sleep(Duration::from_secs(100_000));
        }
    }
    let here = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."));
    let gpu = std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_else(|_| "?".into());
    let pipe = PathBuf::from(
        std::env::var_os("CUDA_MPS_PIPE_DIRECTORY").unwrap_or_else(|| "/tmp/nvidia-mps".into()),
    );
    let args: Vec<String> = std::env::args().skip(1).collect();
    let called = std::env::current_exe().ok();
    match called
        .as_deref()
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
    {
        Some("nvidia-smi") => return smi(&here, &args),
        Some("cuda-client") => return client(&here, &args),
        Some("gpushare-nvml-usage") => return nvml_usage(&here, &args),
        _ => {}
    }
    let mut input = String::new();
    if args.is_empty() {
        let _ = std::io::stdin().read_to_string(&mut input);
    }
    if args.is_empty() {
        let slow = fs::read_to_string(here.join("slow")).ok();
        if let Some(ms) = slow.and_then(|t| t.trim().parse().ok()) {
            std::thread::sleep(Duration::from_millis(ms));
        }
    }
    let mut log = String::new();
    if args.is_empty() {
        for line in input.lines() {
            log.push_str(&format!("gpu={gpu} cmd={line}\n"));
        }
    } else {
        log.push_str(&format!("gpu={gpu} args={}\n", args.join(" ")));
    }
    // One append of whole lines: concurrent calls never interleave a line.
    let append = |name: &str, text: &str| {
        if let Ok(mut f) = fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(here.join(name))
        {
            let _ = f.write_all(text.as_bytes());
        }
    };
    append("standin.log", &log);
    append("standin.calls", &format!("gpu={gpu}\n"));
    if here.join("hang").exists() {
        std::thread::sleep(Duration::from_secs(1000));
    }
    if here.join("fail").exists() {
        return fail("stand-in told to fail (its fail file exists)");
    }
    if args.first().map(String::as_str) == Some("-d") {
        return start_daemon(&here, &gpu, &pipe, &args);
    }
    let pid = fs::read_to_string(pipe.join("control"))
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok());
    let Some(pid) = pid.filter(|&p| alive(p)) else {
        return fail("Cannot find MPS control daemon process");
    };
    let mut out = String::new();
    for line in input.lines() {
        match line.split_whitespace().next().unwrap_or_default() {
            "quit" => {
                // Its servers go with it, as the real daemon's do.
                for server in pipe_servers(&here, &pipe) {
                    // SAFETY: kill has no memory preconditions.
                    unsafe { libc::kill(server.pid as libc::pid_t, libc::SIGKILL) };
                }
                // SAFETY: kill has no memory preconditions.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
                let _ = fs::remove_file(pipe.join("control"));
                // Only this daemon's announcement (another pipe's daemon of
                // the same GPU may have written it since).
                let announced = daemon_file(&here, &gpu);
                if fs::read_to_string(&announced).is_ok_and(|t| t.trim() == pid.to_string()) {
                    let _ = fs::remove_file(announced);
                }
            }
            "get_server_list" => {
                for server in pipe_servers(&here, &pipe) {
                    out.push_str(&format!("{}\n", server.pid));
                }
                let servers = fs::read_to_string(here.join("servers")).unwrap_or_default();
                for l in servers.lines() {
                    if let Some((g, p)) = l.split_once(' ') {
                        if g == gpu {
                            out.push_str(p.trim());
                            out.push('\n');
                        }
                    }
                }
            }
            "get_client_list" => {
                let server = line.split_whitespace().nth(1).unwrap_or_default();
                for client in mps_world::clients(&here.join(mps_world::CLIENTS)) {
                    if server == client.server.to_string() && mps_world::alive(client.pid) {
                        out.push_str(&format!("{}\n", client.pid));
                    }
                }
                let clients = fs::read_to_string(here.join("clients")).unwrap_or_default();
                for l in clients.lines() {
                    let words: Vec<&str> = l.split_whitespace().collect();
                    if let [g, s, client] = words.as_slice() {
                        if *g == gpu && *s == server {
                            out.push_str(client);
                            out.push('\n');
                        }
                    }
                }
            }
            "terminate_client" => {
                let client = line.split_whitespace().nth(2).unwrap_or_default();
                if let (Ok(gpu), Ok(client)) = (gpu.parse(), client.parse()) {
                    mps_world::terminate(&here.join(mps_world::CLIENTS), gpu, client);
                }
            }
            "start_server" if here.join("start-server-fail").exists() => {
                print!("{out}");
                return fail(
                    "stand-in told not to start servers (its start-server-fail file exists)",
                );
            }
            "start_server" => {
                let uid = line
                    .split_whitespace()
                    .skip_while(|w| *w != "-uid")
                    .nth(1)
                    .and_then(|u| u.parse::<u32>().ok());
                let (Some(uid), Ok(gpu_index)) = (uid, gpu.parse::<u32>()) else {
                    print!("{out}");
                    return fail(&format!("bad command {line}"));
                };
                if pipe_servers(&here, &pipe).is_empty() {
                    let program = std::env::current_exe().unwrap_or_else(|_| PathBuf::from(NAME));
                    if let Err(e) = mps_world::start_server(&program, &here, gpu_index, uid, &pipe)
                    {
                        print!("{out}");
                        return fail(&format!("cannot start a server: {e}"));
                    }
                }
            }
            c if c.starts_with("set_") || c.starts_with("get_") => {}
            _ => {
                print!("{out}");
                return fail(&format!("unknown command {line}"));
            }
        }
    }
    print!("{out}");
    ExitCode::SUCCESS
}
