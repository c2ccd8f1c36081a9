//! A GPU's MPS control daemon: one per GPU, started by the prolog for the
//! first share on it, asked to quit by the epilog when its last share ends
//! (one left running idle: by the node timer, or by the prolog of a job
//! Slurm gives its GPU whole, [`stop_if_idle`]).
//!
//! Each daemon sees only its GPU (`CUDA_VISIBLE_DEVICES`) and has its own
//! pipe and log directories under `<StateDir>-mps/gpu<N>/`, which jobs can
//! traverse and read but not write (they are created or checked by
//! [`super::state_dir`]). Every call of the control program is bounded in
//! time ([`CONTROL_TIMEOUT`], [`PROBE_TIMEOUT`]): a hung daemon must not
//! hang a job's start.
//!
//! A daemon is *running* when the control process the prolog recorded
//! when it started or last probed the daemon (its pid and start time, with
//! its control pipe's inode and change time, `<StateDir>/daemon-gpuN.alive`)
//! is still that process with that pipe; without such a record, when its
//! control pipe answers `get_server_list`. A daemon whose process is gone,
//! or whose pipe does not answer (the daemon was killed and left its
//! socket, or it hangs), is a dead daemon: its processes are killed, the
//! pipe directory emptied, and a new daemon started. A daemon that hangs
//! while its process lives is found by the next call that changes its
//! limits (bounded, logged) and by `gpu-mps status`. The processes of a GPU's
//! daemon are found in `/proc` by their name (`nvidia-cuda-mps-control`,
//! `nvidia-cuda-mps-server`) and their `CUDA_MPS_PIPE_DIRECTORY`, which is
//! how they outlive a slurmd restart and are still found by `gpu-mps gc`.
//! Anyone can start a process of that name with that variable, so only
//! processes whose real, effective and saved uids are all the daemon's
//! (the node programs' own: root) count, and each is checked again through
//! a pidfd just before it is signalled ([`kill_all`]): no user can pass
//! for a daemon, keep a dead one from being restarted, or have root kill a
//! process of theirs or anyone's.
//!
//! Limits: the server of a GPU gets the thread percentage and device memory
//! limit of the largest share on that GPU (`set_default_*`, and the
//! `set_*` commands for servers already running). A client can lower its
//! own limits through its environment, never raise them past the server's.
//!
//! Cost: every call is a process start, and a share's start waits for them.
//! A share start makes no call where the recorded daemon runs and its
//! limits stay (two small file reads under the GPU's lock); one where they
//! change (`get_server_list` then every `set_*` line, in one call, as the
//! control program reads commands from its standard input until its end);
//! two where the daemon is started (the start, then the limits; with
//! `MultiUser=yes` a third before them, `-h`, for the multi-user option
//! this driver's control program documents, see [`multi_user_flag`]). The
//! limits last set are recorded beside the daemon lock, tied to the daemon
//! by its control pipe's inode and change time: a restarted daemon (new
//! pipe) has none, so nothing is skipped that a new daemon lacks. A share's
//! end asks for the job's clients to terminate (`get_server_list`, then a
//! `get_client_list` per server and, where the job has clients, one call
//! of `terminate_client` lines: [`terminate_clients`]) and calls nothing
//! more unless the limits change.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::config::GpuMpsConfig;
use super::ledger::{LedgerState, ShareRecord};
use super::lock_wait::{self, LockError, LockWait, Mode};
use super::programs::{program, CONTROL_PROGRAM};
use super::state_dir::{self, Access};
use crate::shared::bounded;

mod servers;
use servers::{argv0_name, kill_if, pipe_variable};
pub use servers::{kill_servers, servers_of, SERVER_PROGRAM};

/// How long one call of `nvidia-cuda-mps-control` may take.
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a daemon may take to answer whether it is alive.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a new daemon may take to open its control pipe.
pub const START_WAIT: Duration = Duration::from_secs(5);
/// How long a daemon asked to quit may take to exit before it is killed.
pub const QUIT_WAIT: Duration = Duration::from_secs(2);
/// What happened to an MPS control daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MpsDaemon {
    /// Started now.
    Started,
    /// Already running and answering.
    Running,
    /// Found dead or hung (the text says how), killed, started anew.
    Restarted(String),
    /// Asked to quit (or found gone already).
    Stopped,
    /// Left running after its GPU's last share, for the next one: the
    /// node timer stops it after this many seconds (`DaemonLinger=`).
    Kept(u32),
    /// Stopped, with something the admin should read (an admin's compute
    /// mode left on the GPU).
    StoppedWith(String),
    /// No control program on this node (or `MPSControl=none`).
    NotAvailable,
    /// The control program failed; the text says how.
    Failed(String),
}

impl fmt::Display for MpsDaemon {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Started => write!(f, "started"),
            Self::Running => write!(f, "running"),
            Self::Restarted(why) => write!(f, "restarted ({why})"),
            Self::Stopped => write!(f, "stopped"),
            Self::Kept(secs) => write!(
                f,
                "kept for the next share, for up to {secs} s (DaemonLinger=), or until a job \
                 is given the GPU whole"
            ),
            Self::StoppedWith(note) => write!(f, "stopped; {note}"),
            Self::NotAvailable => {
                write!(f, "not managed (no {CONTROL_PROGRAM}, or MPSControl=none)")
            }
            Self::Failed(why) => write!(f, "FAILED: {why}"),
        }
    }
}

/// A server's limits: what its largest share may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub thread_percentage: u32,
    pub memory_mib: Option<u64>,
}

/// The directory of the node's MPS pipes and logs and of the published
/// status copy: `<StateDir>-mps`, outside the root-only ledger directory
/// because job processes must reach the pipes.
pub fn public_dir(cfg: &GpuMpsConfig) -> PathBuf {
    let mut base = cfg.state_dir.clone().into_os_string();
    base.push("-mps");
    PathBuf::from(base)
}

/// Directory of GPU `gpu`'s MPS pipes and logs.
pub fn gpu_dir(cfg: &GpuMpsConfig, gpu: u32) -> PathBuf {
    public_dir(cfg).join(format!("gpu{gpu}"))
}

/// GPU `gpu`'s pipe directory (its daemon's `CUDA_MPS_PIPE_DIRECTORY`).
pub fn pipe_dir(cfg: &GpuMpsConfig, gpu: u32) -> PathBuf {
    gpu_dir(cfg, gpu).join("pipe")
}

/// The control program with nothing in its environment but a plain
/// `PATH` and the pipe and log directories in `dir` (`pipe`, `log`).
pub(crate) fn control_command(program: &Path, dir: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CUDA_MPS_PIPE_DIRECTORY", dir.join("pipe"))
        .env("CUDA_MPS_LOG_DIRECTORY", dir.join("log"));
    cmd
}

fn command(cfg: &GpuMpsConfig, program: &Path, gpu: u32) -> Command {
    let mut cmd = control_command(program, &gpu_dir(cfg, gpu));
    // Index N must mean /dev/nvidiaN: CUDA's default order is "fastest first".
    cmd.env("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        .env("CUDA_VISIBLE_DEVICES", gpu.to_string());
    cmd
}

/// Sends one command line to GPU `gpu`'s daemon; its answer on success.
pub fn control(
    cfg: &GpuMpsConfig,
    program: &Path,
    gpu: u32,
    line: &str,
    timeout: Duration,
) -> Result<String, String> {
    control_lines(cfg, program, gpu, &[line.to_owned()], timeout)
}

/// Sends command lines to GPU `gpu`'s daemon in one call of the control
/// program (one process start); its answer on success.
pub fn control_lines(
    cfg: &GpuMpsConfig,
    program: &Path,
    gpu: u32,
    lines: &[String],
    timeout: Duration,
) -> Result<String, String> {
    let mut input = Vec::new();
    for line in lines {
        input.extend_from_slice(line.as_bytes());
        input.push(b'\n');
    }
    let shown = lines.join("; ");
    let ran = bounded::run(command(cfg, program, gpu), Some(&input), timeout)
        .map_err(|e| format!("`{shown}`: {e}"))?;
    if ran.status.success() {
        Ok(ran.stdout)
    } else {
        Err(format!(
            "`{shown}`: {} exited with {} {}",
            program.display(),
            ran.status,
            ran.stderr.trim()
        ))
    }
}

/// Whether GPU `gpu`'s daemon answers: `Ok(server pids)`, `Err(why not)`.
pub fn probe(cfg: &GpuMpsConfig, program: &Path, gpu: u32) -> Result<Vec<u32>, String> {
    if !pipe_dir(cfg, gpu).join("control").exists() {
        return Err("no control pipe".into());
    }
    control(cfg, program, gpu, "get_server_list", PROBE_TIMEOUT).map(|out| pids(&out))
}

/// The numbers of a control command's answer (pids, one per line or word).
pub fn pids(text: &str) -> Vec<u32> {
    text.split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// What [`ensure`] found or did, and the daemon's servers where it asked
/// for them (none on a daemon it started; `None` where it did not ask).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ensured {
    pub daemon: MpsDaemon,
    pub servers: Option<Vec<u32>>,
    /// Whether the daemon serves several users at once (`None`: not known,
    /// or no daemon).
    pub multi_user: Option<bool>,
}

/// Makes sure GPU `gpu`'s daemon runs and answers: started if absent,
/// killed and started anew if dead or hung, or if it serves users in the
/// other mode than `MultiUser=` says and `alone` (the GPU has no share but
/// the one being served). `owner` must own the directories (the prolog's
/// effective uid, root).
pub fn ensure(cfg: &GpuMpsConfig, gpu: u32, owner: u32, alone: bool) -> Ensured {
    // A daemon started now runs in the mode the configuration says.
    let (daemon, servers, multi_user) = match ensure_daemon(cfg, gpu, owner, alone) {
        Ok(Found::Running(servers, mode)) => (MpsDaemon::Running, servers, mode),
        Ok(Found::Started) => (MpsDaemon::Started, Some(Vec::new()), Some(cfg.multi_user)),
        Err(daemon @ MpsDaemon::Restarted(_)) => (daemon, Some(Vec::new()), Some(cfg.multi_user)),
        Err(daemon) => (daemon, None, None),
    };
    Ensured {
        daemon,
        servers,
        multi_user,
    }
}

/// A daemon [`ensure_daemon`] found or started.
enum Found {
    /// Running; its servers where it was asked (`None`: the recorded
    /// daemon lives, nothing was asked), and its mode where recorded.
    Running(Option<Vec<u32>>, Option<bool>),
    Started,
}

/// `Err`: restarted, failed or not available.
fn ensure_daemon(
    cfg: &GpuMpsConfig,
    gpu: u32,
    owner: u32,
    alone: bool,
) -> Result<Found, MpsDaemon> {
    let Some(program) = program(cfg) else {
        return Err(MpsDaemon::NotAvailable);
    };
    let dir = gpu_dir(cfg, gpu);
    for sub in [dir.clone(), dir.join("pipe"), dir.join("log")] {
        if let Err(e) = state_dir::ensure(&sub, owner, Access::WorldReadable) {
            return Err(MpsDaemon::Failed(e.to_string()));
        }
    }
    let pipe = dir.join("pipe");
    // A daemon in the other mode is restarted where nobody else uses it.
    let other_mode = |r: AliveRecord| {
        (alone && r.multi_user != cfg.multi_user).then(|| {
            let was = if r.multi_user {
                "several users"
            } else {
                "one user"
            };
            let _ = stop(cfg, gpu);
            format!("it served {was} at a time, and MultiUser= says otherwise")
        })
    };
    let found = match alive_record(cfg, gpu) {
        Some(record) => Ok((Some(record), None)),
        None => probe(cfg, &program, gpu).map(|servers| {
            let record = record_alive(cfg, gpu, &pipe);
            (record, Some(servers))
        }),
    };
    let restarted = match found {
        Ok((record, servers)) => match record.and_then(other_mode) {
            Some(why) => Some(why),
            None => return Ok(Found::Running(servers, record.map(|r| r.multi_user))),
        },
        Err(why) => {
            let daemons = processes(&pipe);
            let servers = servers_of(&pipe, &daemons);
            let leftovers = [daemons.as_slice(), servers.as_slice()].concat();
            if leftovers.is_empty() && !pipe.join("control").exists() {
                None
            } else {
                kill_all(&daemons);
                kill_servers(&servers);
                clear(&pipe);
                Some(if leftovers.is_empty() {
                    format!("its control pipe was left behind and does not answer: {why}")
                } else {
                    format!(
                        "{} process(es) of a daemon that does not answer: {why}",
                        leftovers.len()
                    )
                })
            }
        }
    };
    // Only the MPS server may hold a context on the GPU from now on.
    if cfg.exclusive_while_shared {
        super::compute_mode::make_exclusive(cfg, gpu)
            .map_err(|e| MpsDaemon::Failed(format!("compute mode: {e}")))?;
    }
    let mut cmd = command(cfg, &program, gpu);
    cmd.arg("-d");
    if cfg.multi_user {
        cmd.arg(multi_user_flag_of(cfg, &program, gpu));
    }
    match bounded::run(cmd, None, CONTROL_TIMEOUT) {
        Ok(r) if r.status.success() => {}
        Ok(r) => {
            return Err(MpsDaemon::Failed(format!(
                "{} -d exited with {} {}",
                program.display(),
                r.status,
                r.stderr.trim()
            )))
        }
        Err(e) => return Err(MpsDaemon::Failed(e.to_string())),
    }
    // The daemon opens its pipe on its own time: wait for it, bounded.
    wait_for_pipe(&pipe)
        .map_err(|e| MpsDaemon::Failed(format!("{} -d exited, but {e}", program.display())))?;
    record_alive(cfg, gpu, &pipe);
    match restarted {
        Some(why) => Err(MpsDaemon::Restarted(why)),
        None => Ok(Found::Started),
    }
}

/// The spellings of the multi-user server option in NVIDIA's documents,
/// in the order gpushare prefers them: `-M` (NVIDIA's DRA driver and the
/// k8s device plugin pass it), `--multiuser` (the MPS v3 interface),
/// `-multiuser-server` (the older MPS guide and its troubleshooting page).
pub const MULTI_USER_FLAGS: [&str; 3] = ["-M", "--multiuser", "-multiuser-server"];

/// The multi-user option `help` (the control program's `-h` text) names,
/// the first of [`MULTI_USER_FLAGS`] it lists; `None` when it names none.
/// A word counts only whole (`-M,` and `[-M]` do, `-Mx` does not).
pub fn multi_user_flag(help: &str) -> Option<&'static str> {
    let words: Vec<&str> = help
        .split(|c: char| {
            c.is_whitespace()
                || matches!(c, ',' | ':' | ';' | '|' | '[' | ']' | '(' | ')' | '/' | '=')
        })
        .filter(|w| !w.is_empty())
        .collect();
    MULTI_USER_FLAGS
        .into_iter()
        .find(|flag| words.contains(flag))
}

/// The multi-user option to start GPU `gpu`'s daemon with: the one the
/// installed control program's `-h` documents (asked once per daemon
/// start, bounded), else `-M`, which NVIDIA's own drivers for Kubernetes
/// pass. Drivers differ here and the documents disagree; the hardware
/// check records what the node's driver says.
fn multi_user_flag_of(cfg: &GpuMpsConfig, program: &Path, gpu: u32) -> &'static str {
    let mut cmd = command(cfg, program, gpu);
    cmd.arg("-h");
    bounded::run(cmd, None, PROBE_TIMEOUT)
        .ok()
        .and_then(|ran| multi_user_flag(&format!("{}\n{}", ran.stdout, ran.stderr)))
        .unwrap_or(MULTI_USER_FLAGS[0])
}

/// Runs `f` holding GPU `gpu`'s daemon lock (a file in the root-only
/// state directory), waited for as `wait` allows: a prolog starting the
/// daemon and an epilog deciding to stop it never interleave, so a share
/// placed while the last one ends always finds its daemon running.
pub fn with_gpu_lock<T>(
    cfg: &GpuMpsConfig,
    gpu: u32,
    wait: LockWait,
    f: impl FnOnce() -> T,
) -> Result<T, LockError> {
    let path = cfg.state_dir.join(format!("daemon-gpu{gpu}.lock"));
    let what = format!("GPU {gpu}'s MPS daemon lock");
    let held = lock_wait::lock(&path, &what, Mode::Exclusive, wait)?;
    let out = f();
    drop(held);
    Ok(out)
}

/// What [`apply_limits`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitsSet {
    /// The daemon has had these limits since they were last set: no call.
    Unchanged,
    /// Set, in one call of the control program.
    Set,
    /// Set, but the server asked for with them did not start (the call
    /// with `start_server` failed, the limits alone went through): the
    /// GPU is not held until its first client. The text says how.
    SetWithoutServer(String),
    /// No control program on this node.
    Unmanaged,
}

/// Sets GPU `gpu`'s server limits: the defaults for servers the daemon
/// starts from now on, and the same on each server already running.
/// `servers`: the running servers where the caller has just asked the
/// daemon (else they are asked for, only if the limits change). Where
/// `hold_for` names a user and the daemon is known to run no server, the
/// same call starts that user's server (`start_server -uid U`, after the
/// limits; never for a daemon that serves several users): see
/// [`start_server_line`]. Call it holding the GPU's daemon lock
/// ([`with_gpu_lock`]).
pub fn apply_limits(
    cfg: &GpuMpsConfig,
    gpu: u32,
    limits: Limits,
    servers: Option<Vec<u32>>,
    hold_for: Option<u32>,
) -> Result<LimitsSet, String> {
    let Some(program) = program(cfg) else {
        return Ok(LimitsSet::Unmanaged);
    };
    let daemon = pipe_identity(cfg, gpu);
    let record = daemon.map(|daemon| LimitsRecord { daemon, limits });
    if record.is_some() && applied_limits(cfg, gpu) == record {
        return Ok(LimitsSet::Unchanged);
    }
    let servers = match servers {
        Some(known) => known,
        None => probe(cfg, &program, gpu)?,
    };
    let mut lines = vec![format!(
        "set_default_active_thread_percentage {}",
        limits.thread_percentage
    )];
    if let Some(mib) = limits.memory_mib {
        // The daemon sees one GPU, so its device 0 is this GPU.
        lines.push(format!("set_default_device_pinned_mem_limit 0 {mib}M"));
    }
    let none_running = servers.is_empty();
    for pid in servers {
        lines.push(format!(
            "set_active_thread_percentage {pid} {}",
            limits.thread_percentage
        ));
        if let Some(mib) = limits.memory_mib {
            lines.push(format!("set_device_pinned_mem_limit {pid} 0 {mib}M"));
        }
    }
    let with_server = hold_for.filter(|_| none_running);
    if let Some(uid) = with_server {
        lines.push(start_server_line(uid));
    }
    // A failed record only costs the next share a call that changes nothing.
    forget_limits(cfg, gpu);
    let mut outcome = LimitsSet::Set;
    if let Err(e) = control_lines(cfg, &program, gpu, &lines, CONTROL_TIMEOUT) {
        // A driver that will not start the server must not cost the share
        // its limits: they are set again alone.
        if with_server.is_none() {
            return Err(e);
        }
        lines.pop();
        control_lines(cfg, &program, gpu, &lines, CONTROL_TIMEOUT)?;
        outcome = LimitsSet::SetWithoutServer(e);
    }
    if let Some(record) = record {
        let _ = state_dir::replace_file(
            &cfg.state_dir,
            &limits_file(gpu),
            record.to_string().as_bytes(),
            0o600,
        );
    }
    Ok(outcome)
}

/// The control command that starts user `uid`'s server at once.
///
/// Why: a GPU in `EXCLUSIVE_PROCESS` refuses a context outside MPS only
/// while a process holds it, and a control daemon holds nothing; its
/// server does, from the moment it starts until the daemon quits (it
/// stays while idle). Left to start with the first client, the server
/// leaves a window after each daemon start in which any process of a
/// share's job that drops its MPS variables gets the whole GPU, with no
/// thread or memory limit, and then no server can start there. Started
/// with the daemon, by the same call that sets its limits, it closes that
/// window at no cost to the share's start: the server's start is the same
/// work the first client would wait for. Not for `MultiUser=yes`
/// daemons, whose one server serves every user.
pub fn start_server_line(uid: u32) -> String {
    format!("start_server -uid {uid}")
}

/// The record of GPU `gpu`'s control daemon process (see [`AliveRecord`]).
fn alive_file(gpu: u32) -> String {
    format!("daemon-gpu{gpu}.alive")
}

/// GPU `gpu`'s control daemon as last seen answering or started: its pid,
/// its start time (clock ticks since boot, which a reused pid never
/// repeats), its control pipe's identity and whether it serves several
/// users at once (a multi-user option on its command line). `<pid> <start>
/// <inode> <ctime s> <ctime ns> multi|single`. A record of an older
/// build (no mode) reads as none: the daemon is probed and recorded anew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AliveRecord {
    pid: u32,
    start: u64,
    pipe: (u64, i64, i64),
    multi_user: bool,
}

impl AliveRecord {
    fn parse(text: &str) -> Option<Self> {
        let mut w = text.split_whitespace();
        let record = Self {
            pid: w.next()?.parse().ok()?,
            start: w.next()?.parse().ok()?,
            pipe: (
                w.next()?.parse().ok()?,
                w.next()?.parse().ok()?,
                w.next()?.parse().ok()?,
            ),
            multi_user: match w.next()? {
                "multi" => true,
                "single" => false,
                _ => return None,
            },
        };
        w.next().is_none().then_some(record)
    }
}

impl fmt::Display for AliveRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (ino, s, ns) = self.pipe;
        let mode = if self.multi_user { "multi" } else { "single" };
        writeln!(f, "{} {} {ino} {s} {ns} {mode}", self.pid, self.start)
    }
}

/// Whether process `pid` was started with a multi-user option.
fn started_multi_user(pid: u32) -> bool {
    fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
        cmdline
            .split(|&b| b == 0)
            .skip(1)
            .any(|arg| MULTI_USER_FLAGS.iter().any(|f| f.as_bytes() == arg))
    })
}

/// Whether GPU `gpu`'s recorded daemon lives and serves several users at
/// once; `None` where no live daemon is recorded.
pub fn running_multi_user(cfg: &GpuMpsConfig, gpu: u32) -> Option<bool> {
    alive_record(cfg, gpu).map(|r| r.multi_user)
}

/// The start time of process `pid` (`/proc/<pid>/stat` field 22), `None`
/// for a process that is gone or a zombie.
fn process_start(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name (field 2) may hold spaces and parentheses: fields 3 on
    // follow its last ')'.
    let mut rest = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    if rest.next()? == "Z" {
        return None;
    }
    rest.nth(18)?.parse().ok()
}

/// Whether the daemon recorded for GPU `gpu` is still the process it was,
/// with the control pipe it had.
fn alive_record(cfg: &GpuMpsConfig, gpu: u32) -> Option<AliveRecord> {
    let text = fs::read_to_string(cfg.state_dir.join(alive_file(gpu))).ok()?;
    AliveRecord::parse(&text).filter(|r| {
        pipe_identity(cfg, gpu) == Some(r.pipe) && process_start(r.pid) == Some(r.start)
    })
}

/// Records the control daemon of `pipe` as alive (one look through
/// `/proc`, made only when a daemon starts or is first found); nothing when
/// it cannot be found, so the next share probes again.
fn record_alive(cfg: &GpuMpsConfig, gpu: u32, pipe: &Path) -> Option<AliveRecord> {
    forget_alive(cfg, gpu);
    let control = processes(pipe)
        .into_iter()
        .find(|&pid| argv0_name(pid).is_some_and(|n| n == CONTROL_PROGRAM.as_bytes()));
    let record = control.and_then(|pid| {
        Some(AliveRecord {
            pid,
            start: process_start(pid)?,
            pipe: pipe_identity(cfg, gpu)?,
            multi_user: started_multi_user(pid),
        })
    });
    if let Some(record) = record {
        let _ = state_dir::replace_file(
            &cfg.state_dir,
            &alive_file(gpu),
            record.to_string().as_bytes(),
            0o600,
        );
    }
    record
}

fn forget_alive(cfg: &GpuMpsConfig, gpu: u32) {
    let _ = fs::remove_file(cfg.state_dir.join(alive_file(gpu)));
}

/// The record of the limits last set on GPU `gpu`'s daemon.
fn limits_file(gpu: u32) -> String {
    format!("daemon-gpu{gpu}.limits")
}

/// Which daemon owns GPU `gpu`'s control pipe now: the pipe's inode and
/// change time (a daemon makes its pipe when it starts).
fn pipe_identity(cfg: &GpuMpsConfig, gpu: u32) -> Option<(u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::symlink_metadata(pipe_dir(cfg, gpu).join("control")).ok()?;
    Some((meta.ino(), meta.ctime(), meta.ctime_nsec()))
}

/// Limits set on a daemon, as recorded: `<inode> <ctime s> <ctime ns>
/// <thread %> <memory MiB or ->`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LimitsRecord {
    daemon: (u64, i64, i64),
    limits: Limits,
}

impl fmt::Display for LimitsRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (ino, s, ns) = self.daemon;
        let mem = self
            .limits
            .memory_mib
            .map_or_else(|| "-".to_owned(), |m| m.to_string());
        writeln!(f, "{ino} {s} {ns} {} {mem}", self.limits.thread_percentage)
    }
}

impl LimitsRecord {
    fn parse(text: &str) -> Option<Self> {
        let mut w = text.split_whitespace();
        let daemon = (
            w.next()?.parse().ok()?,
            w.next()?.parse().ok()?,
            w.next()?.parse().ok()?,
        );
        let thread_percentage = w.next()?.parse().ok()?;
        let memory_mib = match w.next()? {
            "-" => None,
            m => Some(m.parse().ok()?),
        };
        w.next().is_none().then_some(Self {
            daemon,
            limits: Limits {
                thread_percentage,
                memory_mib,
            },
        })
    }
}

/// The limits recorded as set on GPU `gpu`'s daemon, with that daemon.
fn applied_limits(cfg: &GpuMpsConfig, gpu: u32) -> Option<LimitsRecord> {
    let text = fs::read_to_string(cfg.state_dir.join(limits_file(gpu))).ok()?;
    LimitsRecord::parse(&text)
}

fn forget_limits(cfg: &GpuMpsConfig, gpu: u32) {
    let _ = fs::remove_file(cfg.state_dir.join(limits_file(gpu)));
}

/// The limits GPU `gpu`'s server gets for `shares` (those on that GPU):
/// the largest share's. `None` when no share is left. A share whose
/// memory limit is not recorded yet (another prolog placed it and has not
/// come to it) counts with the limit the configuration gives it on a GPU
/// of `gpu_mib` (else of `GPUMemory=`): that prolog records exactly that.
pub fn server_limits<'a>(
    cfg: &GpuMpsConfig,
    gpu_mib: Option<u64>,
    shares: impl Iterator<Item = &'a ShareRecord>,
) -> Option<Limits> {
    shares.fold(None, |acc: Option<Limits>, s| {
        let pct = cfg.thread_percentage(s.units);
        let mem = s
            .memory_mib
            .or_else(|| cfg.memory_limit_mib(s.units, gpu_mib));
        Some(match acc {
            None => Limits {
                thread_percentage: pct,
                memory_mib: mem,
            },
            Some(l) => Limits {
                thread_percentage: l.thread_percentage.max(pct),
                // A share without a limit makes the server's unlimited.
                memory_mib: l.memory_mib.zip(mem).map(|(a, b)| a.max(b)),
            },
        })
    })
}

/// Pauses between looks at something a daemon does on its own time: 1 ms,
/// doubling up to 20 ms. A share's start or end waits for it, and the
/// stand-in or a real daemon is usually done within a millisecond or two.
struct Backoff(Duration);

impl Backoff {
    fn new() -> Self {
        Self(Duration::from_millis(1))
    }

    fn sleep(&mut self) {
        std::thread::sleep(self.0);
        self.0 = (self.0 * 2).min(Duration::from_millis(20));
    }
}

/// Waits, bounded by [`START_WAIT`], for a daemon just started to open
/// its control pipe in `pipe`.
pub(crate) fn wait_for_pipe(pipe: &Path) -> Result<(), String> {
    let deadline = Instant::now() + START_WAIT;
    let mut pause = Backoff::new();
    while !pipe.join("control").exists() {
        if Instant::now() >= deadline {
            return Err(format!(
                "no control pipe appeared in {} within {} s",
                pipe.display(),
                START_WAIT.as_secs()
            ));
        }
        pause.sleep();
    }
    Ok(())
}

/// The processes `find` still finds of a daemon asked to quit, looked at
/// until none is left or [`QUIT_WAIT`] has passed: what is to be killed.
pub(crate) fn left_after_quit(find: impl Fn() -> Vec<u32>) -> Vec<u32> {
    let deadline = Instant::now() + QUIT_WAIT;
    let mut pause = Backoff::new();
    let mut left = find();
    while !left.is_empty() && Instant::now() < deadline {
        pause.sleep();
        left = find();
    }
    left
}

/// Asks GPU `gpu`'s daemon to quit; one that does not answer is killed.
pub fn stop(cfg: &GpuMpsConfig, gpu: u32) -> MpsDaemon {
    let Some(program) = program(cfg) else {
        return MpsDaemon::NotAvailable;
    };
    let pipe = pipe_dir(cfg, gpu);
    let quit = if pipe.join("control").exists() {
        control(cfg, &program, gpu, "quit", CONTROL_TIMEOUT).map(|_| ())
    } else {
        Ok(())
    };
    // `quit` returns before the daemon is gone; whatever is left of it
    // after a short wait (or after a failed quit) is killed.
    let left = left_after_quit(|| processes(&pipe));
    // Its servers run as their users: found while the daemon is still
    // their parent, killed with it (see servers.rs).
    let servers = servers_of(&pipe, &left);
    kill_all(&left);
    kill_servers(&servers);
    clear(&pipe);
    forget_limits(cfg, gpu);
    forget_alive(cfg, gpu);
    let _ = fs::remove_file(cfg.state_dir.join(idle_file(gpu)));
    // The GPU's own compute mode comes back, whatever ComputeMode= says now.
    let restored = super::compute_mode::restore(cfg, gpu);
    match (quit, restored) {
        (Ok(()), Ok(Some(s))) if matches!(s.step, super::compute_mode::Step::AdminsMode(_)) => {
            MpsDaemon::StoppedWith(s.to_string())
        }
        (Ok(()), Ok(_)) => MpsDaemon::Stopped,
        (Ok(()), Err(e)) => MpsDaemon::Failed(format!(
            "stopped, but the GPU's compute mode was not given back: {e}; the node timer \
             (gpu-mps metrics --write) tries again"
        )),
        (Err(e), _) => MpsDaemon::Failed(format!("{e}; its processes were killed")),
    }
}

/// Where the time GPU `gpu`'s daemon was left idle is kept.
fn idle_file(gpu: u32) -> String {
    format!("daemon-gpu{gpu}.idle")
}

/// After GPU `gpu`'s last share: its daemon (and its server, which holds
/// the GPU) kept for the next share for `DaemonLinger=` seconds, when it
/// runs and the setting allows; else stopped. A share's start on a GPU
/// whose daemon runs costs no control call; a start that starts the
/// daemon, switches the compute mode and starts the server costs tens of
/// milliseconds, its end as much again. The node timer stops it once
/// the time is up ([`linger_over`]); a job Slurm gives the GPU whole,
/// `gpu-mps gc` and `disable` stop it at once ([`stop_if_idle`]). Call it
/// holding the GPU's daemon lock.
pub fn stop_or_keep(cfg: &GpuMpsConfig, gpu: u32, now: u64) -> MpsDaemon {
    let linger = cfg.daemon_linger_secs;
    if linger > 0
        && present(cfg, gpu)
        && state_dir::replace_file(
            &cfg.state_dir,
            &idle_file(gpu),
            now.to_string().as_bytes(),
            0o600,
        )
        .is_ok()
    {
        return MpsDaemon::Kept(linger);
    }
    stop(cfg, gpu)
}

/// Whether GPU `gpu`'s idle daemon has stayed its `DaemonLinger=` time at
/// `now`: true where no time was kept (a daemon left idle otherwise: a
/// crash, a failed stop), or the kept time is not a number.
pub fn linger_over(cfg: &GpuMpsConfig, gpu: u32, now: u64) -> bool {
    fs::read_to_string(cfg.state_dir.join(idle_file(gpu)))
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
        .is_none_or(|since| now >= since.saturating_add(u64::from(cfg.daemon_linger_secs)))
}

/// Whether GPU `gpu` shows an MPS daemon of gpushare's: its control pipe,
/// or a process of its pipe directory (a daemon whose pipe is gone).
pub fn present(cfg: &GpuMpsConfig, gpu: u32) -> bool {
    let pipe = pipe_dir(cfg, gpu);
    pipe.join("control").exists() || !processes(&pipe).is_empty()
}

/// Whether a daemon on GPU `gpu` runs idle by `state`, the ledger read
/// under the GPU's lock: no share is recorded there. A lost state says
/// nothing of the shares that run (they may be missing from it): no
/// daemon is idle then, until `gpu-mps gc` ends the lost state.
pub fn idle(state: &LedgerState, gpu: u32) -> bool {
    state.lost_reason().is_none() && !state.shares().any(|s| s.gpu == gpu)
}

/// Stops GPU `gpu`'s daemon where one runs idle by `state` ([`idle`]),
/// which gives the GPU its earlier compute mode back ([`stop`]); `None`
/// where none runs or it serves shares. Call it holding the GPU's lock
/// ([`with_gpu_lock`]), `state` read under it: a share placed meanwhile
/// keeps its daemon, and a prolog placing one after finds none and
/// starts it.
pub fn stop_if_idle(cfg: &GpuMpsConfig, state: &LedgerState, gpu: u32) -> Option<MpsDaemon> {
    (idle(state, gpu) && present(cfg, gpu)).then(|| stop(cfg, gpu))
}

/// How long the epilog may spend ending one job's clients on one GPU.
pub const TERMINATE_BUDGET: Duration = Duration::from_secs(10);

/// What [`terminate_clients`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Terminated {
    /// `(server, client)` pairs the daemon was asked to terminate.
    pub clients: Vec<(u32, u32)>,
    /// What could not be asked or done (the rest went on).
    pub problems: Vec<String>,
}

/// Asks GPU `gpu`'s daemon to terminate the clients of `job`
/// (`terminate_client <server> <client>`): every client process whose
/// cgroup is the job's or whose environment names the job, and every
/// client whose process is gone (what is left of it on the GPU belongs to
/// nobody now). Slurm kills a job's processes before its epilog; this ends
/// what MPS still runs for them, so that a client outliving its job keeps
/// no slice of the GPU. One `get_server_list`, one `get_client_list` per
/// server and one call for all the terminations, within
/// [`TERMINATE_BUDGET`]. Call it holding the GPU's daemon lock.
pub fn terminate_clients(
    cfg: &GpuMpsConfig,
    gpu: u32,
    job: u32,
    sluid: Option<&str>,
) -> Terminated {
    terminate_clients_where(cfg, gpu, TERMINATE_BUDGET, |client| {
        client_of_job(client, job, sluid)
    })
}

/// Asks GPU `gpu`'s daemon to terminate every client `wanted` picks, as
/// [`terminate_clients`] does, within `budget`.
pub fn terminate_clients_where(
    cfg: &GpuMpsConfig,
    gpu: u32,
    budget: Duration,
    wanted: impl Fn(u32) -> bool,
) -> Terminated {
    let mut done = Terminated::default();
    let Some(program) = program(cfg) else {
        return done;
    };
    if !pipe_dir(cfg, gpu).join("control").exists() {
        return done;
    }
    let deadline = Instant::now() + budget;
    let left = |most: Duration| most.min(deadline.saturating_duration_since(Instant::now()));
    let servers = match control(cfg, &program, gpu, "get_server_list", left(PROBE_TIMEOUT)) {
        Ok(out) => pids(&out),
        Err(e) => {
            done.problems.push(e);
            return done;
        }
    };
    for server in servers {
        if left(PROBE_TIMEOUT).is_zero() {
            done.problems.push(format!(
                "no time left to ask server {server} for its clients"
            ));
            break;
        }
        let line = format!("get_client_list {server}");
        match control(cfg, &program, gpu, &line, left(PROBE_TIMEOUT)) {
            Ok(out) => done.clients.extend(
                pids(&out)
                    .into_iter()
                    .filter(|&client| wanted(client))
                    .map(|client| (server, client)),
            ),
            Err(e) => done.problems.push(e),
        }
    }
    if done.clients.is_empty() {
        return done;
    }
    let lines: Vec<String> = done
        .clients
        .iter()
        .map(|(server, client)| format!("terminate_client {server} {client}"))
        .collect();
    if let Err(e) = control_lines(cfg, &program, gpu, &lines, left(CONTROL_TIMEOUT)) {
        done.problems.push(e);
    }
    done
}

/// Whether MPS client process `pid` is `job`'s: gone, or in the job's
/// cgroup, or with `SLURM_JOB_ID=<job>` in its environment.
fn client_of_job(pid: u32, job: u32, sluid: Option<&str>) -> bool {
    let Ok(cgroup) = fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return !Path::new(&format!("/proc/{pid}")).exists();
    };
    let wanted = format!("SLURM_JOB_ID={job}");
    cgroup_is_jobs(&cgroup, job, sluid)
        || fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == wanted.as_bytes()))
}

/// Whether `/proc/<pid>/cgroup` text puts the process under `job`'s
/// cgroup: `.../job_<job>/...` (cgroup v1, and v2 up to 25.11 or with
/// `CgroupJobIdPaths=yes`), or `.../<sluid>/...` where Slurm 26.05's
/// cgroup/v2 names a job's cgroup by its SLUID (`cgroup_p_step_create`;
/// slurmd gives the epilog `SLURM_JOB_SLUID`).
pub fn cgroup_is_jobs(cgroup: &str, job: u32, sluid: Option<&str>) -> bool {
    let wanted = format!("job_{job}");
    cgroup
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .any(|path| {
            path.split('/')
                .any(|part| part == wanted || sluid.is_some_and(|s| part == s))
        })
}

/// Pids of GPU processes of MPS tied to `pipe`: the control daemon and the
/// servers it spawned, named so in `argv[0]`, with
/// `CUDA_MPS_PIPE_DIRECTORY=<pipe>`. Only root can read other users'
/// environments, so others find only their own.
pub fn processes(pipe: &Path) -> Vec<u32> {
    let wanted = pipe_variable(pipe);
    processes_where(daemon_uid(), |v| v == wanted.as_slice())
}

/// Pids of MPS processes (as [`processes`]) whose pipe directory lies
/// anywhere under `dir`: every daemon of a state directory at once.
pub fn processes_under(dir: &Path) -> Vec<u32> {
    processes_of_under(daemon_uid(), dir)
}

/// Pids of MPS processes running wholly as `owner` (as [`processes`])
/// whose pipe directory lies anywhere under `dir`: a job's own daemons
/// (`mps::private`) run as the job's user.
pub fn processes_of_under(owner: u32, dir: &Path) -> Vec<u32> {
    let mut prefix = pipe_variable(dir);
    prefix.push(b'/');
    processes_where(owner, |v| v.starts_with(&prefix))
}

/// Pids of MPS control daemons and servers of `owner` with an environment
/// variable `wanted` accepts.
fn processes_where(owner: u32, wanted: impl Fn(&[u8]) -> bool) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found: Vec<u32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            is_mps_process(pid, owner)
                && fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|&b| b == 0).any(&wanted))
        })
        .collect();
    found.sort_unstable();
    found
}

/// The uid MPS daemons run as: the node programs' own (root on a node),
/// since the prolog starts them.
pub fn daemon_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Whether process `pid` is named as an MPS control daemon or server and
/// runs wholly as `owner` (real, effective and saved uid): a user's
/// process of that name, or a set-uid program a user started under that
/// name, is not one.
fn is_mps_process(pid: u32, owner: u32) -> bool {
    argv0_name(pid)
        .is_some_and(|name| name == CONTROL_PROGRAM.as_bytes() || name == SERVER_PROGRAM.as_bytes())
        && process_uids(pid).is_some_and(|uids| uids.iter().all(|&u| u == owner))
}

/// The real, effective and saved uids of process `pid`.
fn process_uids(pid: u32) -> Option<[u32; 3]> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let mut ids = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace();
    let mut next = || ids.next()?.parse::<u32>().ok();
    Some([next()?, next()?, next()?])
}

/// SIGKILL to each of `pids` that is still an MPS process of the daemon's
/// uid (best effort: one may be gone). Each is held by a pidfd while it
/// is checked, so the signal reaches the process that was checked, never
/// one that took its pid since; returns the pids signalled.
pub fn kill_all(pids: &[u32]) -> Vec<u32> {
    kill_all_of(daemon_uid(), pids)
}

/// [`kill_all`] for MPS processes of `owner`.
pub fn kill_all_of(owner: u32, pids: &[u32]) -> Vec<u32> {
    pids.iter()
        .copied()
        .filter(|&pid| kill_if(pid, |p| is_mps_process(p, owner)))
        .collect()
}

/// Empties a pipe directory (sockets and files a dead daemon left).
fn clear(pipe: &Path) {
    if let Ok(entries) = fs::read_dir(pipe) {
        for e in entries.flatten() {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// The uid of process `pid`, from `/proc/<pid>/status`.
pub fn process_uid(pid: u32) -> Option<u32> {
    process_uids(pid).map(|[real, ..]| real)
}

#[cfg(test)]
pub(crate) mod tests;
