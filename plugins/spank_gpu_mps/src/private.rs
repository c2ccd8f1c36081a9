//! `--gpu-mps=private` in slurmstepd: the options, and the start of a
//! step's own MPS daemon in the cgroups of its first task, as the job's
//! user (`gpushare::mps::private` says why there and not in the prolog).
//!
//! The daemon is forked from slurmstepd in `slurm_spank_task_post_fork`
//! of local task 0, which Slurm calls as root after the task was put in
//! its cgroups and before any task may exec (mgr.c `_fork_all_tasks`).
//! Before it execs the control program the child moves itself into every
//! cgroup task 0 is in (so the step's device rules confine it and its
//! servers as they confine the tasks, and Slurm's end of the step finds
//! it), takes the user's groups and ids, and makes its pipe and log
//! directories as the user.

use std::ffi::{c_char, c_int, CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use gpushare::mps::daemon::CONTROL_TIMEOUT;
use gpushare::mps::private::{
    cgroup_procs, parse_request, StepDaemon, OPTION_MODE, OPTION_THREADS,
};
use gpushare::shared::bounded;
use slurm_plugin::log;
use slurm_sys::{spank_option, spank_t, ESPANK_SUCCESS};

/// Which option a callback is called for (`spank_option.val`).
const MODE: c_int = 0;
const THREADS: c_int = 1;

/// Checks an option's value where the user typed it (srun, sbatch,
/// salloc): a bad one fails the command at once, with what to type.
/// slurmstepd calls it again for the step (`remote`): nothing to check
/// there, the prolog decided.
unsafe extern "C" fn option_cb(val: c_int, optarg: *const c_char, remote: c_int) -> c_int {
    let checked = std::panic::catch_unwind(|| {
        // In slurmstepd the job's choice, kept: spank_option_getopt
        // answers nothing in slurm_spank_init or post_opt.
        if remote != 0 {
            if val == MODE {
                ASKED.store(true, Ordering::SeqCst);
            }
            return 0;
        }
        let value = if optarg.is_null() {
            String::new()
        } else {
            // SAFETY: Slurm passes the option's NUL-terminated argument.
            unsafe { CStr::from_ptr(optarg) }
                .to_string_lossy()
                .into_owned()
        };
        let parsed = match val {
            MODE => parse_request(Some(&value), None),
            _ => parse_request(Some(gpushare::mps::private::PRIVATE), Some(&value)),
        };
        match parsed {
            Ok(_) => 0,
            Err(e) => {
                log::error(&format!("gpu_mps: {e}"));
                -1
            }
        }
    });
    checked.unwrap_or(-1)
}

/// The two options, made once per process and never freed: Slurm keeps
/// the pointers it is given.
fn options() -> &'static [OptionEntry; 2] {
    static OPTIONS: std::sync::OnceLock<[OptionEntry; 2]> = std::sync::OnceLock::new();
    OPTIONS.get_or_init(|| {
        [
            OptionEntry::new(
                OPTION_MODE,
                "private",
                "An MPS daemon of the job's own on the GPUs it holds whole, run as the \
                 job's user; each task is its client (gpushare)",
                MODE,
            ),
            OptionEntry::new(
                OPTION_THREADS,
                "PCT",
                "With --gpu-mps=private: each task's share of its GPU's SMs, in percent \
                 (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE)",
                THREADS,
            ),
        ]
    })
}

/// A `struct spank_option` with the strings it points to.
struct OptionEntry {
    raw: *mut spank_option,
}

// SAFETY: the entry is written once, before any use, and only read after
// (by Slurm, through the pointer).
unsafe impl Send for OptionEntry {}
// SAFETY: as above.
unsafe impl Sync for OptionEntry {}

impl OptionEntry {
    fn new(name: &str, arginfo: &str, usage: &str, val: c_int) -> Self {
        let leak = |s: &str| CString::new(s).unwrap_or_default().into_raw();
        let raw = Box::into_raw(Box::new(spank_option {
            name: leak(name),
            arginfo: leak(arginfo),
            usage: leak(usage),
            has_arg: 1,
            val,
            cb: Some(option_cb),
        }));
        Self { raw }
    }
}

/// Registers the options (srun, sbatch, salloc and slurmstepd).
pub fn register(sp: spank_t) -> Result<(), String> {
    for entry in options() {
        // SAFETY: sp is slurmstepd's or the client's handle; the option
        // lives as long as the process.
        let rc = unsafe { slurm_sys::spank_option_register(sp, entry.raw) };
        if rc != ESPANK_SUCCESS {
            return Err(format!("spank_option_register: SPANK error {rc}"));
        }
    }
    Ok(())
}

/// Whether the job gave `--gpu-mps` (in slurmstepd: Slurm called the
/// option's callback for the step, after every plugin's
/// `slurm_spank_init` and before `slurm_spank_init_post_opt`).
pub fn asked() -> bool {
    ASKED.load(Ordering::SeqCst)
}

/// The job gave `--gpu-mps` (see [`asked`]).
static ASKED: AtomicBool = AtomicBool::new(false);

/// The step's daemon, once started here (its stop is owed).
static STARTED: AtomicBool = AtomicBool::new(false);
/// Local tasks of the step that have exited.
static EXITED: AtomicU32 = AtomicU32::new(0);

/// Starts `daemon` for the step in the cgroups of task `pid` (local task
/// 0), and waits for its control pipe.
pub fn start(program: Option<&Path>, daemon: &StepDaemon, pid: i32) -> Result<(), String> {
    let Some(program) = program else {
        return Err("no nvidia-cuda-mps-control on this node (MPSControl=)".into());
    };
    daemon.ensure_job_dir()?;
    let proc_cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .map_err(|e| format!("/proc/{pid}/cgroup: {e}"))?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    let procs = cgroup_procs(&proc_cgroup, &mountinfo, Path::exists)?;
    // Named here: the child can only say that a write failed.
    if let Some(missing) = procs.iter().find(|p| !p.exists()) {
        return Err(format!(
            "task {pid}'s cgroup has no {} (its /proc/{pid}/cgroup: {:?})",
            missing.display(),
            proc_cgroup.trim()
        ));
    }
    let groups = task_groups(pid)?;
    let child = ChildSetup {
        procs: procs.iter().map(|p| c_path(p)).collect::<Result<_, _>>()?,
        dirs: [daemon.dir.clone(), daemon.pipe(), daemon.log()]
            .iter()
            .map(|p| c_path(p))
            .collect::<Result<_, _>>()?,
        groups,
        uid: daemon.uid,
        gid: daemon.gid,
    };
    let mut cmd = daemon.command(program);
    cmd.arg("-d");
    // SAFETY: the closure makes only async-signal-safe calls (open, write,
    // close, setgroups, setgid, setuid, mkdir, syscall) on data made
    // before the fork.
    unsafe {
        cmd.pre_exec(move || child.enter());
    }
    STARTED.store(true, Ordering::SeqCst);
    match bounded::run(cmd, None, CONTROL_TIMEOUT) {
        Ok(r) if r.status.success() => {}
        Ok(r) => {
            return Err(format!(
                "{} -d exited with {} {}",
                program.display(),
                r.status,
                r.stderr.trim()
            ))
        }
        Err(e) => return Err(e.to_string()),
    }
    daemon.wait_for_start()
}

/// Counts one local task's exit; true for the step's last (`tasks`).
pub fn last_task_exited(tasks: u32) -> bool {
    EXITED.fetch_add(1, Ordering::SeqCst) + 1 >= tasks
}

/// Stops the step's daemon where this process started one (once):
/// `graceful`, with `quit` first (after the step's last task, its clients,
/// exited); else only what is left of it is killed and its directory
/// removed (at the step's end, after Slurm killed what the step left).
pub fn stop(program: Option<&Path>, job: u32, daemon: &StepDaemon, graceful: bool) {
    if !STARTED.swap(false, Ordering::SeqCst) {
        return;
    }
    let problems = daemon.stop(program.filter(|_| graceful));
    for p in problems {
        log::error(&format!("gpu_mps: job {job}: its own MPS daemon: {p}"));
    }
}

/// The supplementary groups task `pid` runs with (`Groups:` in its
/// status), which the daemon takes too.
fn task_groups(pid: i32) -> Result<Vec<libc::gid_t>, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .unwrap_or("");
    line.split_whitespace()
        .map(|g| {
            g.parse()
                .map_err(|_| format!("/proc/{pid}/status: a group {g:?} that is not a number"))
        })
        .collect()
}

pub fn c_path(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{}: a path with NUL", path.display()))
}

/// What the daemon's process does between fork and exec, all prepared
/// before the fork.
struct ChildSetup {
    /// `cgroup.procs` files to write `0` into.
    procs: Vec<CString>,
    /// Directories to make as the user, in order (exists: fine).
    dirs: Vec<CString>,
    groups: Vec<libc::gid_t>,
    uid: u32,
    gid: u32,
}

impl ChildSetup {
    /// In the child, as root: into the task's cgroups, then the user's
    /// ids, then its directories; slurmstepd's other files closed at exec.
    fn enter(&self) -> io::Result<()> {
        enter_cgroups(&self.procs)?;
        let check = |rc: c_int| {
            if rc < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(rc)
            }
        };
        // SAFETY: plain system calls on values made before the fork.
        unsafe {
            check(libc::setgroups(self.groups.len(), self.groups.as_ptr()))?;
            check(libc::setgid(self.gid))?;
            check(libc::setuid(self.uid))?;
        }
        for dir in &self.dirs {
            // SAFETY: a NUL-terminated path made before the fork.
            if unsafe { libc::mkdir(dir.as_ptr(), 0o700) } < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EEXIST) {
                    return Err(e);
                }
            }
        }
        close_at_exec();
        Ok(())
    }
}

/// In a child of slurmstepd between fork and exec: into the cgroups whose
/// `cgroup.procs` files are `procs` (paths made before the fork).
pub fn enter_cgroups(procs: &[CString]) -> io::Result<()> {
    for file in procs {
        // SAFETY: a NUL-terminated path made before the fork.
        let fd = unsafe { libc::open(file.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is open; one byte from a static buffer.
        let wrote = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
        // SAFETY: fd is ours.
        unsafe { libc::close(fd) };
        if wrote != 1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// In a child of slurmstepd between fork and exec: nothing of
/// slurmstepd's (its sockets, the tasks' pipes) may live on in the
/// program, every descriptor from 3 up closes at exec.
pub fn close_at_exec() {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range takes plain numbers.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) };
    if rc < 0 {
        for fd in 3..4096 {
            // SAFETY: setting a flag on a descriptor that may not exist.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
    }
}
