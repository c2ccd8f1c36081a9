//! The per-share use check: what NVML reports of each MPS client, and what
//! the node timer makes of it (`gpushare_share_memory_used_bytes`,
//! `gpushare_share_sm_utilization`).
//!
//! Two shares of different users on GPU 0 under one multi-user server
//! (`MultiUser=yes`): job [`BUSY`] (the first user, 30 units) whose client
//! allocates 2 GiB and keeps its SMs busy, and job [`IDLE`] (the second
//! user, 60 units) whose client allocates 6 GiB and sleeps (each at most
//! 60 % of its share's memory). Each client is the release `gpu-mps
//! --cuda-probe LIBRARY hold` (the driver API, `CudaLibrary=`; no nvcc
//! needed). Each client is put in a job cgroup laid out
//! as Slurm makes them, in a tree of the check's own
//! (`/sys/fs/cgroup/gpushare-hw-check-<pid>`, or under v1's freezer
//! hierarchy), beside a root-owned process named `slurmstepd`: the node
//! timer finds where Slurm makes job cgroups from root's `slurmstepd`
//! processes, and nothing here is Slurm's. Then the release `gpu-mps
//! metrics --write` runs twice, as the node timer does, with a gpu_mps.conf
//! of its own: its own NVML child (`gpu-mps --nvml-usage`), its own
//! mapping, its own metrics file, which the check reads back. The NVML
//! child is also run directly (both process lists and the utilisation
//! samples, as text), and nvidia-smi's view is recorded beside it.
//!
//! Without a GPU (`--usage-standin`, the `hw_check` suite) the same runs
//! against stand-ins: each client is `sleep` (as a user id of no account),
//! the MPS control program is none, and NVML's figures for those pids come
//! from the stand-in `gpushare-nvml-usage` (`ShareUsage=`).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpushare::mps::daemon;
use gpushare::mps::node::SHARE_USAGE_FILE;
use gpushare::mps::selftest::PROBE_OPTION;
use gpushare::mps::usage::{self, GpuAnswer, GpuSample, ProcessList, ProcessSample, UtilSample};
use gpushare::shared::bounded;

use super::{
    find_program, load, lock, one_line, shown, verdict, Args, Check, Cleanup, Client, ClientLine,
    Ran, Report, Setup, User, Verdict, PROGRAM_TIMEOUT, UNITS_PER_GPU,
};

/// The busy share's job and the idle one's.
pub const BUSY: u32 = 701;
pub const IDLE: u32 = 702;

/// How long a client holds its memory (it is ended sooner, once measured).
const HOLD_SECS: u64 = 120;

/// The check's names in the report.
pub const LISTS: &str = "per-share use: NVML's process lists under MPS";
pub const SAMPLES: &str = "per-share use: NVML's utilisation samples under MPS";
pub const MEMORY: &str = "per-share use: the shares' memory against the GPU's used memory";
pub const SM: &str = "per-share use: no share shows an SM figure it cannot have";

const MIB: u64 = 1 << 20;

/// One share's load.
#[derive(Debug, Clone, Copy)]
struct Load {
    job: u32,
    /// Which of the check's users runs it.
    user: usize,
    units: u32,
    /// MiB its client allocates, at most (60 % of the share's memory).
    alloc_mib: u64,
    busy: bool,
}

const LOADS: [Load; 2] = [
    Load {
        job: BUSY,
        user: 0,
        units: 30,
        alloc_mib: 2048,
        busy: true,
    },
    Load {
        job: IDLE,
        user: 1,
        units: 60,
        alloc_mib: 6144,
        busy: false,
    },
];

/// What the check runs on.
pub enum Rig<'a> {
    /// A GPU: the driver-API client (`gpu-mps --cuda-probe ... hold`), the
    /// installed MPS control program, NVML.
    Gpu(&'a Setup),
    /// No GPU: `sleep` for each client, NVML's figures recorded.
    Standin(Standin),
}

/// The stand-ins' side of [`Rig`].
pub struct Standin {
    dir: PathBuf,
    bin: PathBuf,
    slurm_conf: PathBuf,
    users: Vec<User>,
    /// The stand-in NVML query (`ShareUsage=`), printing `nvml-usage`
    /// beside it.
    nvml_usage: PathBuf,
    cleanup: Arc<Mutex<Cleanup>>,
}

/// The variable each stand-in client carries: its run's directory name
/// (`gpushare-hw-check-<pid>`).
pub const STANDIN_RUN_ENV: &str = "GPUSHARE_HW_CHECK_RUN";

impl Standin {
    /// A temporary directory with the stand-in NVML query, a device file
    /// and Slurm's configuration directory; two user ids of no account.
    pub fn new(args: &Args, cleanup: Arc<Mutex<Cleanup>>) -> Result<Self, String> {
        let bin = super::bin_dir(args)?;
        let dir = std::env::temp_dir().join(format!("gpushare-hw-check-{}", std::process::id()));
        lock(&cleanup).keep = args.keep;
        fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        lock(&cleanup).dir = Some(dir.clone());
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let nvml_usage = testcluster::standin::install_nvml_usage(&dir.join("mps-bin"))?;
        fs::create_dir(dir.join("dev")).map_err(|e| e.to_string())?;
        fs::write(dir.join("dev").join("nvidia0"), "").map_err(|e| e.to_string())?;
        let slurm_conf = super::slurm_dir(&dir)?;
        let users = ["gpushare-hw-standin-a", "gpushare-hw-standin-b"]
            .iter()
            .zip([64_101, 64_102])
            .map(|(name, id)| User {
                name: (*name).to_owned(),
                uid: id,
                gid: id,
            })
            .collect();
        Ok(Self {
            dir,
            bin,
            slurm_conf,
            users,
            nvml_usage,
            cleanup,
        })
    }

    /// The stand-in's figures for the clients `pids` (busy, idle) and the
    /// stand-in server: shaped as the H200 report shows MPS (each client
    /// listed with its context, the server with 66 MiB, 9 MiB of the
    /// driver's), the shares' utilisation sampled under the server's pid
    /// alone, as NVML gave it there (none under a client's).
    fn figures(busy: u32, idle: u32, server: u32) -> String {
        let proc = |pid, mib: Option<u64>, list| ProcessSample {
            pid,
            memory_bytes: mib.map(|m| m * MIB),
            list,
        };
        let util = |pid, sm_percent, timestamp_us| UtilSample {
            pid,
            sm_percent,
            timestamp_us,
        };
        let sample = GpuSample {
            index: 0,
            minor: Some(0),
            used_bytes: Some((2_200 + 6_300 + 66 + 9) * MIB),
            total_bytes: Some(48 << 30),
            processes: vec![
                proc(server, Some(66), ProcessList::Compute),
                proc(busy, Some(2_200), ProcessList::Compute),
                proc(idle, Some(6_300), ProcessList::Compute),
                proc(busy, Some(2_200), ProcessList::Mps),
                proc(idle, None, ProcessList::Mps),
            ],
            utilization: Some(vec![
                util(server, 28, 1_000_001),
                util(server, 31, 1_000_002),
            ]),
        };
        usage::gpu_block(&GpuAnswer::Answered(sample))
    }
}

impl Rig<'_> {
    fn dir(&self) -> &Path {
        match self {
            Self::Gpu(s) => &s.dir,
            Self::Standin(t) => &t.dir,
        }
    }

    fn bin(&self) -> &Path {
        match self {
            Self::Gpu(s) => &s.bin,
            Self::Standin(t) => &t.bin,
        }
    }

    fn cleanup(&self) -> &Mutex<Cleanup> {
        match self {
            Self::Gpu(s) => &s.cleanup,
            Self::Standin(t) => &t.cleanup,
        }
    }

    fn user(&self, i: usize) -> &User {
        match self {
            Self::Gpu(s) => s.user(i),
            Self::Standin(t) => &t.users[i],
        }
    }

    /// The check's gpu_mps.conf: its own StateDir and MetricsFile; on a
    /// GPU the installed control program, one multi-user server and NVML
    /// asked by `gpu-mps` itself, else no daemon and the stand-in query.
    fn write_conf(&self) -> Result<PathBuf, String> {
        let dir = self.dir();
        let specific = match self {
            Self::Gpu(s) => format!(
                "GPUDevices=/dev/nvidia0\nMPSControl={}\n",
                s.control.display()
            ),
            Self::Standin(t) => format!(
                "GPUDevices={}\nMPSControl=none\nShareUsage={}\n",
                dir.join("dev").join("nvidia0").display(),
                t.nvml_usage.display()
            ),
        };
        let text = format!(
            "UnitsPerGPU={UNITS_PER_GPU}\nSlurmMpsCount={UNITS_PER_GPU}\nPlacement=gpushare\n\
             StateDir={}\nMetricsFile={}\nMultiUser=yes\nComputeMode=leave\nDaemonLinger=0\n{specific}",
            dir.join("usage").display(),
            dir.join("usage.prom").display()
        );
        let path = dir.join("gpu_mps_usage.conf");
        fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    }

    fn node_program(&self, program: &str, conf: &Path, load: &Load, units: u32) -> Ran {
        let slurm_conf = match self {
            Self::Gpu(s) => &s.slurm_conf,
            Self::Standin(t) => &t.slurm_conf,
        };
        let user = self.user(load.user);
        super::run_node_program(self.bin(), slurm_conf, program, conf, load.job, user, units)
    }

    /// Starts `load`'s client: what it allocates (MiB) and the client.
    fn start(&self, conf: &Path, load: &Load) -> Result<(u64, Client), String> {
        match self {
            Self::Gpu(s) => {
                let plan = s.plan(conf, load.job)?;
                let share = super::memory_mib(&plan.env);
                let mib = match share {
                    0 => load.alloc_mib,
                    m => load.alloc_mib.min(m * 6 / 10),
                };
                let library = super::load(conf)?.cuda_library;
                let args = [
                    PROBE_OPTION.to_owned(),
                    library.to_string_lossy().into_owned(),
                    "hold".to_owned(),
                    mib.to_string(),
                    HOLD_SECS.to_string(),
                    u8::from(load.busy).to_string(),
                ];
                let gpu_mps = s.bin.join("gpu-mps");
                let client = super::as_user(&gpu_mps, &args, s.user(load.user), &plan.env)?;
                Ok((mib, client))
            }
            Self::Standin(t) => {
                let script = format!(
                    r#"echo "{{\"event\":\"result\",\"pid\":$$,\"init\":\"ok\",\"alloc\":\"ok\"}}"; exec sleep {HOLD_SECS}"#
                );
                let args = ["-c".to_owned(), script];
                // The run's name in each client's environment: the uids
                // are the same in every run, and runs may go side by side.
                let run = t.dir.file_name().map(|n| n.to_string_lossy().into_owned());
                let env = [(STANDIN_RUN_ENV.to_owned(), run.unwrap_or_default())];
                let client =
                    super::as_user(Path::new("/bin/sh"), &args, self.user(load.user), &env)?;
                Ok((load.alloc_mib, client))
            }
        }
    }

    /// The program that prints NVML's figures: the release `gpu-mps`, or
    /// the stand-in.
    fn nvml_program(&self) -> PathBuf {
        match self {
            Self::Gpu(s) => s.bin.join("gpu-mps"),
            Self::Standin(t) => t.nvml_usage.clone(),
        }
    }

    /// The MPS servers of `conf`'s GPU 0 (the stand-ins': this process).
    fn servers(&self, conf: &Path) -> Vec<u32> {
        match self {
            Self::Gpu(_) => load(conf)
                .map(|cfg| daemon::processes(&daemon::pipe_dir(&cfg, 0)))
                .unwrap_or_default()
                .into_iter()
                .filter(|&pid| {
                    super::cmdline(pid)
                        .split(' ')
                        .next()
                        .is_some_and(|a| a.ends_with("nvidia-cuda-mps-server"))
                })
                .collect(),
            Self::Standin(_) => vec![std::process::id()],
        }
    }

    /// How long to let NVML sample the loads before the timer's first run,
    /// and between its two runs.
    fn pauses(&self) -> (Duration, Duration) {
        match self {
            Self::Gpu(_) => (Duration::from_secs(3), Duration::from_secs(8)),
            Self::Standin(_) => (Duration::ZERO, Duration::from_millis(200)),
        }
    }
}

// ---------------------------------------------------------------- cgroups

/// Job cgroups as Slurm lays them out, in a tree of the check's own, with
/// a root-owned `slurmstepd` (a copy of `sleep`) in it; the tree is
/// removed on drop (its processes killed first).
struct JobCgroups {
    v2: bool,
    top: PathBuf,
    stepd: Option<Child>,
}

/// The hierarchy the check makes job cgroups in: cgroup v2 where
/// `/sys/fs/cgroup` is the unified hierarchy, else v1's freezer (which
/// Slurm's cgroup/v1 plugin uses for its jobs).
fn hierarchy() -> Option<(bool, PathBuf)> {
    let root = Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").is_file() {
        Some((true, root.to_path_buf()))
    } else if root.join("freezer").join("cgroup.procs").is_file() {
        Some((false, root.join("freezer")))
    } else {
        None
    }
}

/// Moves `pid` into the cgroup `dir` (made if missing).
fn put(dir: &Path, pid: u32) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    fs::write(dir.join("cgroup.procs"), pid.to_string())
        .map_err(|e| format!("moving {pid} into {}: {e}", dir.display()))
}

impl JobCgroups {
    /// The tree, and its `slurmstepd` in the cgroup Slurm gives one
    /// (v2: `<scope>/system`, v1: the first job's `step_extern`).
    fn make(dir: &Path, cleanup: &Mutex<Cleanup>, first: (u32, u32)) -> Result<Self, String> {
        let (v2, root) = hierarchy().ok_or("no cgroup v2 at /sys/fs/cgroup, no v1 freezer")?;
        let top = root.join(format!("gpushare-hw-check-{}", std::process::id()));
        fs::create_dir(&top).map_err(|e| format!("mkdir {}: {e}", top.display()))?;
        lock(cleanup).cgroups = Some(top.clone());
        let mut made = Self {
            v2,
            top,
            stepd: None,
        };
        let sleep = find_program("sleep").ok_or("no sleep program")?;
        let stepd = dir.join("slurmstepd");
        fs::copy(&sleep, &stepd).map_err(|e| format!("{}: {e}", stepd.display()))?;
        let mut cmd = Command::new(&stepd);
        cmd.arg((HOLD_SECS * 3).to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd
            .spawn()
            .map_err(|e| format!("{}: {e}", stepd.display()))?;
        let pid = child.id();
        made.stepd = Some(child);
        let at = if v2 {
            made.scope().join("system")
        } else {
            made.job_dir(first.0, first.1).join("step_extern")
        };
        put(&at, pid)?;
        Ok(made)
    }

    fn scope(&self) -> PathBuf {
        self.top.join("slurmstepd.scope")
    }

    fn job_dir(&self, job: u32, uid: u32) -> PathBuf {
        if self.v2 {
            self.scope().join(format!("job_{job}"))
        } else {
            self.top
                .join(format!("uid_{uid}"))
                .join(format!("job_{job}"))
        }
    }

    /// The cgroup of a task of `job`'s step 0, as Slurm names it.
    fn task(&self, job: u32, uid: u32) -> PathBuf {
        let step = self.job_dir(job, uid).join("step_0");
        if self.v2 {
            step.join("user").join("task_0")
        } else {
            step.join("task_0")
        }
    }

    fn describe(&self) -> String {
        if self.v2 {
            format!(
                "cgroup v2: each client in {}/job_<J>/step_0/user/task_0, a slurmstepd in \
                 {0}/system",
                self.scope().display()
            )
        } else {
            format!(
                "cgroup v1 (freezer): each client in {}/uid_<U>/job_<J>/step_0/task_0, a \
                 slurmstepd in the first job's step_extern",
                self.top.display()
            )
        }
    }
}

impl Drop for JobCgroups {
    fn drop(&mut self) {
        if let Some(mut stepd) = self.stepd.take() {
            let _ = stepd.kill();
            let _ = stepd.wait();
        }
        for problem in remove_tree(&self.top) {
            eprintln!("gpushare-hw-check: {problem}");
        }
    }
}

/// Removes the cgroup tree `top` (nothing where it is gone), deepest first,
/// killing the processes still in it: the check's own, which it put
/// there. What could not be removed, in words.
pub fn remove_tree(top: &Path) -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        out.push(dir.to_path_buf());
        for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&entry.path(), out);
            }
        }
    }
    if !top.is_dir() {
        return Vec::new();
    }
    let mut dirs = Vec::new();
    walk(top, &mut dirs);
    let me = std::process::id();
    let mut problems = Vec::new();
    for dir in dirs.iter().rev() {
        let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
            if pid != me {
                if let Ok(pid) = libc::pid_t::try_from(pid) {
                    // SAFETY: kill has no memory preconditions; the pid is
                    // one the check put in its own cgroup tree.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match fs::remove_dir(dir) {
                Ok(()) => break,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => {
                    problems.push(format!("cgroup {} not removed: {e}", dir.display()));
                    break;
                }
            }
        }
    }
    problems
}

// ---------------------------------------------------------------- figures

/// `gpu-mps metrics --write` as the node timer runs it, with the check's
/// gpu_mps.conf and an empty kernel log (no XID to read).
fn timer_run(bin: &Path, conf: &Path, kernel_log: &Path) -> Ran {
    let mut cmd = Command::new(bin.join("gpu-mps"));
    cmd.arg("--conf")
        .arg(conf)
        .args(["metrics", "--write", "--kernel-log"])
        .arg(kernel_log);
    let started = Instant::now();
    let ran = bounded::run(cmd, None, PROGRAM_TIMEOUT);
    Ran {
        what: format!("gpu-mps --conf {} metrics --write", conf.display()),
        ok: ran.as_ref().is_ok_and(|r| r.status.success()),
        text: match ran {
            Ok(r) => format!("{}\n{}{}", r.status, r.stdout, r.stderr),
            Err(e) => e.to_string(),
        },
        ms: started.elapsed().as_millis(),
    }
}

/// A series' value for `job` on GPU 0 in a metrics file's text.
fn metric(text: &str, name: &str, job: u32) -> Option<f64> {
    let head = format!("{name}{{job=\"{job}\",gpu=\"0\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(head.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

/// NVML's index → the driver's timestamp of the last sample the node
/// timer read, from its state file.
fn kept_cursor(state_dir: &Path) -> Option<u64> {
    let text = fs::read_to_string(state_dir.join(SHARE_USAGE_FILE)).ok()?;
    let kept: serde_json::Value = serde_json::from_str(&text).ok()?;
    kept.get("cursor")?.get("0")?.as_u64()
}

fn mib(bytes: u64) -> u64 {
    bytes.div_ceil(MIB)
}

/// A process the check knows, as the report names it.
struct Known {
    what: String,
    pid: u32,
}

/// What NVML's lists say of `pid`: its memory in each list.
fn listing(g: &GpuSample, pid: u32) -> String {
    let word = |list: ProcessList| match g.processes.iter().find(|p| p.pid == pid && p.list == list)
    {
        None => "absent".to_owned(),
        Some(ProcessSample {
            memory_bytes: None, ..
        }) => "listed, memory not available".to_owned(),
        Some(ProcessSample {
            memory_bytes: Some(b),
            ..
        }) => format!("{} MiB", mib(*b)),
    };
    format!(
        "compute list {}, MPS list {}",
        word(ProcessList::Compute),
        word(ProcessList::Mps)
    )
}

/// The largest memory NVML gives `pid` in either list (0: none).
fn memory_of(g: &GpuSample, pid: u32) -> u64 {
    g.processes
        .iter()
        .filter(|p| p.pid == pid)
        .filter_map(|p| p.memory_bytes)
        .max()
        .unwrap_or(0)
}

/// Question 1: which list carries each known process, under which pid,
/// with which memory; the pids NVML names that the check does not know.
fn lists_summary(g: &GpuSample, known: &[Known]) -> String {
    let mut parts: Vec<String> = known
        .iter()
        .map(|k| format!("{} (pid {}): {}", k.what, k.pid, listing(g, k.pid)))
        .collect();
    let mut others: Vec<u32> = g
        .processes
        .iter()
        .map(|p| p.pid)
        .filter(|pid| !known.iter().any(|k| k.pid == *pid))
        .collect();
    others.dedup();
    parts.push(if others.is_empty() {
        "no other pid listed".to_owned()
    } else {
        let others: Vec<String> = others
            .iter()
            .map(|&pid| format!("pid {pid}: {}", listing(g, pid)))
            .collect();
        format!("other pids: {}", others.join(", "))
    });
    parts.push(format!("GPU used {} MiB", shown(g.used_bytes.map(mib))));
    parts.join("; ")
}

/// Question 2: the utilisation samples of each known process and of any
/// other pid, and whom they are charged to (`busy`: the busy client's pid;
/// `servers`: the MPS servers').
fn samples_summary(g: &GpuSample, known: &[Known], busy: u32, servers: &[u32]) -> String {
    let Some(samples) = &g.utilization else {
        return "NVML gives no per-process utilisation on this GPU (MIG, a GPU before Maxwell, \
                or the call failed)"
            .to_owned();
    };
    let of = |pid: u32| {
        let sm: Vec<u32> = samples
            .iter()
            .filter(|s| s.pid == pid)
            .map(|s| s.sm_percent)
            .collect();
        match sm.iter().max() {
            None => "no sample".to_owned(),
            Some(max) => format!(
                "{} sample{}, SM mean {:.0} %, max {max} %",
                sm.len(),
                if sm.len() == 1 { "" } else { "s" },
                f64::from(sm.iter().sum::<u32>()) / sm.len() as f64
            ),
        }
    };
    let mut parts: Vec<String> = known
        .iter()
        .map(|k| format!("{} (pid {}): {}", k.what, k.pid, of(k.pid)))
        .collect();
    let mut others: Vec<u32> = samples
        .iter()
        .map(|s| s.pid)
        .filter(|pid| !known.iter().any(|k| k.pid == *pid))
        .collect();
    others.sort_unstable();
    others.dedup();
    for pid in &others {
        parts.push(format!("other pid {pid}: {}", of(*pid)));
    }
    let busy_seen = samples.iter().any(|s| s.pid == busy && s.sm_percent > 0);
    let server_seen = samples
        .iter()
        .any(|s| servers.contains(&s.pid) && s.sm_percent > 0);
    let charged = if busy_seen {
        "samples name the clients' own pids"
    } else if server_seen {
        "samples are charged to the MPS server's pid, not the clients'"
    } else if samples.iter().any(|s| s.sm_percent > 0) {
        "samples only under pids that are neither the clients' nor the server's"
    } else {
        "no sample with SM use in the window"
    };
    format!("{}: {charged}", parts.join("; "))
}

/// One share as the check ran it and the timer reported it.
#[derive(Debug, Clone, PartialEq)]
struct ShareSeen {
    job: u32,
    units: u32,
    busy: bool,
    /// MiB its client allocated, and the client's word for it (`ok`).
    alloc_mib: u64,
    alloc: String,
    /// `gpushare_share_memory_used_bytes` and `gpushare_share_sm_utilization`.
    memory: Option<f64>,
    sm: Option<f64>,
}

/// The acceptance check of the memory: each share's figure at least what
/// its client allocated (the timer found the client), and the shares' sum
/// plus the MPS server's own memory (NVML's figure for the server's pid,
/// which no share counts) within 5 % of the GPU's used memory: the rest
/// is the driver's own.
fn memory_verdict(shares: &[ShareSeen], server_bytes: u64, used: Option<u64>) -> (Verdict, String) {
    let each: Vec<String> = shares
        .iter()
        .map(|s| {
            format!(
                "job {}: {} MiB (its client allocated {} MiB: {})",
                s.job,
                shown(s.memory.map(|b| mib(b as u64))),
                s.alloc_mib,
                s.alloc
            )
        })
        .collect();
    let found = shares
        .iter()
        .all(|s| s.alloc == "ok" && s.memory.is_some_and(|b| b as u64 >= s.alloc_mib * MIB));
    let sum: u64 = shares
        .iter()
        .filter_map(|s| s.memory)
        .map(|b| b as u64)
        .sum();
    let Some(used) = used.filter(|&u| u > 0) else {
        return (
            Verdict::Fail,
            format!("{}; NVML gave no used memory for GPU 0", each.join(", ")),
        );
    };
    let percent = |part: f64| 100.0 * part / used as f64;
    let rest = used as f64 - sum as f64 - server_bytes as f64;
    let within = rest.abs() <= used as f64 * 0.05;
    let summary = format!(
        "{}; shares' sum {} MiB = {:.1} % of the GPU's used {} MiB; with the MPS server's own {} \
         MiB (NVML's figure for its pid, no share's) the rest, {:.0} MiB (the driver's own), is \
         {:.1} % of used ({} 5 %); each share at least its allocation: {}",
        each.join(", "),
        mib(sum),
        percent(sum as f64),
        mib(used),
        mib(server_bytes),
        rest / MIB as f64,
        percent(rest.abs()),
        if within { "within" } else { "more than" },
        if found { "yes" } else { "no" }
    );
    (verdict(found && within), summary)
}

/// The SM check: NVML charges MPS clients' work to their server (the
/// samples check shows where it went), so gpushare shows no share an SM
/// figure: a figure there would be one read as 0, or taken from
/// somewhere it is not measured.
fn sm_verdict(shares: &[ShareSeen]) -> (Verdict, String) {
    let each: Vec<String> = shares
        .iter()
        .map(|s| {
            format!(
                "job {} ({}, {} units): {}",
                s.job,
                if s.busy { "busy" } else { "idle" },
                s.units,
                s.sm.map_or_else(|| "no figure".to_owned(), |r| format!("{r:.2}"))
            )
        })
        .collect();
    let none = shares.iter().all(|s| s.sm.is_none());
    (
        verdict(none),
        format!(
            "{}: {}",
            each.join(", "),
            if none {
                "no gpushare_share_sm_utilization, as none is measured per share"
            } else {
                "a gpushare_share_sm_utilization a share cannot have"
            }
        ),
    )
}

/// The first `n` lines of `text`, and how many more there were.
fn head(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = lines[..lines.len().min(n)].join("\n");
    if lines.len() > n {
        out.push_str(&format!("\n... ({} more lines)", lines.len() - n));
    }
    out
}

// ---------------------------------------------------------------- check

/// The check on `rig`: four lines (the two lists, the samples, the
/// memory, the SM figures), whatever gpushare's assumptions turn out; or
/// one failed line saying why it could not run. The shares' epilogs run
/// in any case.
pub fn share_usage(rig: &Rig<'_>, report: &mut Report) {
    let mut detail = Vec::new();
    let measured = rig.write_conf().and_then(|conf| {
        let checks = (|| {
            for l in &LOADS {
                let ran = rig.node_program("gpu-mps-prolog", &conf, l, l.units);
                detail.push(ran.detail());
                if !placed(&conf, l.job) {
                    return Err(format!(
                        "the prolog placed no share for job {}: {}",
                        l.job,
                        ran.text.lines().last().unwrap_or_default()
                    ));
                }
            }
            measure(rig, &conf, &mut detail)
        })();
        // Each share released, placed or not (an epilog of none is a no-op).
        for l in &LOADS {
            detail.push(rig.node_program("gpu-mps-epilog", &conf, l, 0).detail());
        }
        checks
    });
    match measured {
        Ok(mut checks) => {
            checks[0].detail = format!("{}\n{}", detail.join("\n"), checks[0].detail);
            for check in checks {
                report.push(check);
            }
        }
        Err(e) => report.push(Check::fail(MEMORY, e, detail.join("\n"))),
    }
}

/// Whether `conf`'s ledger holds a share of `job`.
fn placed(conf: &Path, job: u32) -> bool {
    load(conf)
        .ok()
        .and_then(|cfg| gpushare::mps::ledger::Ledger::open(&cfg.state_dir, 0).ok())
        .and_then(|ledger| ledger.snapshot().ok())
        .is_some_and(|snap| snap.state.share(job).is_some())
}

/// The shares placed: the clients started and measured, then ended; the
/// four checks (`detail` gets what ran).
fn measure(rig: &Rig<'_>, conf: &Path, detail: &mut Vec<String>) -> Result<Vec<Check>, String> {
    let conf = conf.to_path_buf();
    let state_dir = rig.dir().join("usage");
    let kernel_log = rig.dir().join("kmsg");
    fs::write(&kernel_log, "").map_err(|e| e.to_string())?;
    // The clients' cgroups before the clients: they are moved at once.
    let first = (LOADS[0].job, rig.user(LOADS[0].user).uid);
    let cgroups = JobCgroups::make(rig.dir(), rig.cleanup(), first);
    // Why no process can be a share's, if so.
    let mut no_cgroups = None;
    match &cgroups {
        Ok(c) => detail.push(c.describe()),
        Err(e) => no_cgroups = Some(e.clone()),
    }
    let mut clients = Vec::new();
    for l in &LOADS {
        let (alloc_mib, client) = rig.start(&conf, l)?;
        let pid = client.child.id();
        if let Ok(c) = &cgroups {
            if let Err(e) = put(&c.task(l.job, rig.user(l.user).uid), pid) {
                no_cgroups.get_or_insert(e);
            }
        }
        clients.push((l, alloc_mib, client, pid));
    }
    let mut results: Vec<Option<ClientLine>> = Vec::new();
    for (_, _, client, _) in &mut clients {
        results.push(client.wait_event("result", Duration::from_secs(60)));
    }
    let pid_of = |job: u32| {
        clients
            .iter()
            .find(|(l, ..)| l.job == job)
            .map_or(0, |c| c.3)
    };
    let (busy_pid, idle_pid) = (pid_of(BUSY), pid_of(IDLE));
    let servers = rig.servers(&conf);
    if let Rig::Standin(t) = rig {
        let server = servers.first().copied().unwrap_or(0);
        let text = Standin::figures(busy_pid, idle_pid, server);
        let file = t.nvml_usage.with_file_name("nvml-usage");
        fs::write(&file, text).map_err(|e| format!("{}: {e}", file.display()))?;
    }
    let (before, between) = rig.pauses();
    std::thread::sleep(before);
    let run1 = timer_run(rig.bin(), &conf, &kernel_log);
    let since = kept_cursor(&state_dir);
    std::thread::sleep(between);
    let run2 = timer_run(rig.bin(), &conf, &kernel_log);
    let metrics = fs::read_to_string(rig.dir().join("usage.prom")).unwrap_or_default();
    // NVML's own text, the samples from where the timer's first run read
    // up to: what its second run saw.
    let mut raw = Command::new(rig.nvml_program());
    raw.arg("--nvml-usage");
    if let Some(ts) = since {
        raw.args(["--since", &format!("0={ts}")]);
    }
    let raw = bounded::run(raw, None, PROGRAM_TIMEOUT)
        .map(|r| format!("{}{}", r.stdout, r.stderr))
        .unwrap_or_else(|e| e.to_string());
    let smi = match rig {
        Rig::Gpu(s) => format!(
            "$ nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv\n{}\n\
             $ nvidia-smi pmon -c 1\n{}",
            s.smi(&[
                "--query-compute-apps=pid,process_name,used_memory",
                "--format=csv"
            ]),
            s.smi(&["pmon", "-c", "1"])
        ),
        Rig::Standin(_) => String::new(),
    };
    let alive: Vec<bool> = clients
        .iter_mut()
        .map(|c| matches!(c.2.child.try_wait(), Ok(None)))
        .collect();
    for (_, _, client, _) in &mut clients {
        let _ = client.child.kill();
        client.finish(PROGRAM_TIMEOUT);
        detail.push(client.detail());
    }
    drop(cgroups);

    let parsed = usage::parse(&raw);
    let gpu0 = parsed.gpus.iter().find_map(|g| match g {
        GpuAnswer::Answered(g) if g.minor == Some(0) || (g.minor.is_none() && g.index == 0) => {
            Some(g)
        }
        _ => None,
    });
    let mut known: Vec<Known> = clients
        .iter()
        .map(|(l, _, _, pid)| Known {
            what: format!(
                "client of job {} ({})",
                l.job,
                if l.busy { "busy" } else { "idle" }
            ),
            pid: *pid,
        })
        .collect();
    known.extend(servers.iter().map(|&pid| Known {
        what: "MPS server".to_owned(),
        pid,
    }));
    let printed: Vec<String> = clients
        .iter()
        .zip(&results)
        .filter_map(|((l, _, _, pid), r)| {
            let said = r.as_ref()?.pid;
            (said != *pid).then(|| format!("client of job {} calls itself pid {said}", l.job))
        })
        .collect();
    let raw_detail = format!(
        "$ {} --nvml-usage{}\n{}\n{smi}",
        rig.nvml_program().display(),
        since.map_or_else(String::new, |ts| format!(" --since 0={ts}")),
        head(&raw, 200)
    );
    let (lists, samples) = match gpu0 {
        Some(g) => {
            let mut lists = lists_summary(g, &known);
            if !printed.is_empty() {
                lists.push_str(&format!(" ({})", printed.join(", ")));
            }
            (lists, samples_summary(g, &known, busy_pid, &servers))
        }
        None => {
            let why = format!("NVML gave no figures for GPU 0: {}", one_line(&raw));
            (why.clone(), why)
        }
    };
    let mut checks = vec![
        Check::new(LISTS, Verdict::Seen, lists, raw_detail),
        Check::new(SAMPLES, Verdict::Seen, samples, String::new()),
    ];

    let seen: Vec<ShareSeen> = clients
        .iter()
        .zip(&results)
        .map(|((l, alloc_mib, ..), r)| ShareSeen {
            job: l.job,
            units: l.units,
            busy: l.busy,
            alloc_mib: *alloc_mib,
            alloc: match r {
                Some(r) if r.init.as_deref() == Some("ok") => {
                    r.alloc.clone().unwrap_or_else(|| "no word".into())
                }
                Some(r) => format!("CUDA init: {}", r.init.as_deref().unwrap_or("?")),
                None => "no result within 60 s".to_owned(),
            },
            memory: metric(&metrics, "gpushare_share_memory_used_bytes", l.job),
            sm: metric(&metrics, "gpushare_share_sm_utilization", l.job),
        })
        .collect();
    let server_bytes: u64 = gpu0.map_or(0, |g| servers.iter().map(|&p| memory_of(g, p)).sum());
    let timer_detail = format!(
        "{}\n{}\nmetrics file (its share lines):\n{}\nclients still running when measured: \
         {alive:?}",
        run1.detail(),
        run2.detail(),
        metrics
            .lines()
            .filter(|l| l.starts_with("gpushare_share_"))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    let (memory, sm) = match &no_cgroups {
        Some(why) => {
            let nvml_sum: u64 = gpu0.map_or(0, |g| {
                clients.iter().map(|c| memory_of(g, c.3)).sum::<u64>()
            });
            let used = gpu0.and_then(|g| g.used_bytes);
            let skipped =
                format!("skipped: no job cgroups here ({why}), so no process is a share's");
            let memory = format!(
                "{skipped}; NVML's own figures for the two clients' pids sum to {} MiB, with the \
                 MPS server's {} MiB, of {} MiB used",
                mib(nvml_sum),
                mib(server_bytes),
                shown(used.map(mib))
            );
            let sm = format!("{skipped}; NVML's samples per pid are on the line {SAMPLES:?}");
            ((Verdict::Skip, memory), (Verdict::Skip, sm))
        }
        None => (
            memory_verdict(&seen, server_bytes, gpu0.and_then(|g| g.used_bytes)),
            sm_verdict(&seen),
        ),
    };
    checks.push(Check::new(MEMORY, memory.0, memory.1, timer_detail));
    checks.push(Check::new(SM, sm.0, sm.1, String::new()));
    Ok(checks)
}

/// `gpushare-hw-check --usage-standin`: the check alone, on stand-ins.
pub fn standin(
    args: &Args,
    cleanup: Arc<Mutex<Cleanup>>,
    report: &mut Report,
) -> Result<(), String> {
    report.gpu = "no GPU (stand-ins)".to_owned();
    report.driver = "none".to_owned();
    report.host = gpushare::shared::locations::short_hostname().unwrap_or_default();
    report.invoked = Some("gpushare-hw-check --usage-standin".to_owned());
    report.intro = Some(
        "the per-share use check alone, without a GPU: `sleep` for each client, NVML's figures \
         from the stand-in `gpushare-nvml-usage`, the release `gpu-mps metrics --write`."
            .to_owned(),
    );
    let rig = Rig::Standin(Standin::new(args, cleanup)?);
    share_usage(&rig, report);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> GpuSample {
        let text = Standin::figures(11, 12, 10);
        match usage::parse(&text).gpus.into_iter().next() {
            Some(GpuAnswer::Answered(g)) => g,
            other => panic!("{other:?}"),
        }
    }

    fn known() -> Vec<Known> {
        [
            ("client of job 701 (busy)", 11),
            ("client of job 702 (idle)", 12),
            ("MPS server", 10),
        ]
        .iter()
        .map(|(what, pid)| Known {
            what: (*what).to_owned(),
            pid: *pid,
        })
        .collect()
    }

    #[test]
    fn each_pid_is_told_with_what_each_list_gives_it() {
        let g = sample();
        assert_eq!(
            lists_summary(&g, &known()),
            "client of job 701 (busy) (pid 11): compute list 2200 MiB, MPS list 2200 MiB; \
             client of job 702 (idle) (pid 12): compute list 6300 MiB, MPS list listed, memory \
             not available; MPS server (pid 10): compute list 66 MiB, MPS list absent; no other \
             pid listed; GPU used 8575 MiB"
        );
        let strangers = &known()[2..];
        assert!(lists_summary(&g, strangers)
            .contains("other pids: pid 11: compute list 2200 MiB, MPS list 2200 MiB, pid 12:"));
    }

    #[test]
    fn samples_say_whom_they_are_charged_to() {
        // A driver that charged the clients' own pids.
        let mut g = sample();
        for s in g.utilization.iter_mut().flatten() {
            s.pid = 11;
        }
        let told = samples_summary(&g, &known(), 11, &[10]);
        assert!(
            told.starts_with(
                "client of job 701 (busy) (pid 11): 2 samples, SM mean 30 %, max 31 %"
            ),
            "{told}"
        );
        assert!(
            told.ends_with(": samples name the clients' own pids"),
            "{told}"
        );
        // The stand-in's load as NVML gave it on a GPU: the server's.
        let g = sample();
        let told = samples_summary(&g, &known(), 11, &[10]);
        assert!(told.contains("(pid 11): no sample"), "{told}");
        assert!(
            told.ends_with("charged to the MPS server's pid, not the clients'"),
            "{told}"
        );
        let mut g = g;
        g.utilization = None;
        assert!(samples_summary(&g, &known(), 11, &[10]).starts_with("NVML gives no"));
    }

    fn seen(memory: [Option<u64>; 2], sm: [Option<f64>; 2]) -> Vec<ShareSeen> {
        LOADS
            .iter()
            .zip(memory.iter().zip(sm))
            .map(|(l, (m, sm))| ShareSeen {
                job: l.job,
                units: l.units,
                busy: l.busy,
                alloc_mib: l.alloc_mib,
                alloc: "ok".into(),
                memory: m.map(|m| (m * MIB) as f64),
                sm,
            })
            .collect()
    }

    #[test]
    fn the_shares_memory_must_be_their_clients_and_account_for_the_gpus_used() {
        let used = Some(8_575 * MIB);
        let (v, told) =
            memory_verdict(&seen([Some(2_200), Some(6_300)], [None; 2]), 66 * MIB, used);
        assert_eq!(v, Verdict::Pass, "{told}");
        assert!(
            told.contains(
                "shares' sum 8500 MiB = 99.1 % of the GPU's used 8575 MiB; with the MPS \
                           server's own 66 MiB (NVML's figure for its pid, no share's) the rest, 9 \
                           MiB (the driver's own), is 0.1 % of used (within 5 %)"
            ),
            "{told}"
        );
        // The clients charged to the server: the shares read 0.
        let (v, told) = memory_verdict(&seen([Some(0), Some(0)], [None; 2]), 8_566 * MIB, used);
        assert_eq!(v, Verdict::Fail, "{told}");
        assert!(
            told.ends_with("each share at least its allocation: no"),
            "{told}"
        );
        // A share counted twice.
        let (v, _) = memory_verdict(
            &seen([Some(2_200), Some(12_600)], [None; 2]),
            66 * MIB,
            used,
        );
        assert_eq!(v, Verdict::Fail);
        let (v, _) = memory_verdict(&seen([None, Some(6_300)], [None; 2]), 66 * MIB, used);
        assert_eq!(v, Verdict::Fail);
    }

    #[test]
    fn no_share_may_show_an_sm_figure() {
        assert_eq!(sm_verdict(&seen([None; 2], [None, None])).0, Verdict::Pass);
        for figures in [
            [Some(0.98), Some(0.02)],
            [Some(0.0), Some(0.0)],
            [Some(0.5), None],
        ] {
            let (v, told) = sm_verdict(&seen([None; 2], figures));
            assert_eq!(v, Verdict::Fail, "{figures:?}");
            assert!(told.ends_with("a share cannot have"), "{told}");
        }
    }

    #[test]
    fn a_series_is_read_by_job_on_gpu_0() {
        let text = "gpushare_share_memory_used_bytes{job=\"701\",gpu=\"0\"} 2306867200\n\
                    gpushare_share_sm_utilization{job=\"701\",gpu=\"0\"} 0.98\n\
                    gpushare_share_sm_utilization{job=\"7011\",gpu=\"0\"} 5\n";
        assert_eq!(
            metric(text, "gpushare_share_memory_used_bytes", 701),
            Some(2_306_867_200.0)
        );
        assert_eq!(
            metric(text, "gpushare_share_sm_utilization", 701),
            Some(0.98)
        );
        assert_eq!(metric(text, "gpushare_share_sm_utilization", 702), None);
    }

    #[test]
    fn a_long_dump_is_cut_with_a_count() {
        assert_eq!(head("a\nb\nc\n", 2), "a\nb\n... (1 more lines)");
        assert_eq!(head("a\n", 2), "a");
    }
}
