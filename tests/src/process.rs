//! Child processes that cannot outlive the test run.
//!
//! Every daemon is started with `PR_SET_PDEATHSIG = SIGKILL` (so a test
//! process killed with `kill -9` still takes its daemons down), with the
//! environment variable [`MARKER`] set to the cluster's directory, and in
//! the cluster's own cgroup of [`GROUPS`], a cgroup v1 hierarchy of the
//! tests' own with no controller (Slurm, systemd and the kernel's
//! controllers never move a process in it; cgroup v2 runs leave it be).
//! Everything a daemon forks stays in that cgroup: slurmd's slurmstepds,
//! which slurmd double-forks (re-parented to init, out of reach of
//! `PR_SET_PDEATHSIG`) and which overwrite their environment with their
//! process title (`slurmstepd: [N.batch]`: `/proc/PID/environ` no longer
//! holds [`MARKER`]), and the jobs. [`kill_marked`] kills by both marks;
//! [`kill_orphans`] kills what a test process killed before it stopped its
//! clusters left; `tests/leftovers.sh` (the end of `make test`) fails while
//! any process is left in a cluster's cgroup.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::time::{DAEMON_STOP, EXIT_POLL, POLL};

/// Environment variable naming the cluster directory a process belongs to.
pub const MARKER: &str = "GPUSHARE_TESTCLUSTER";

/// A daemon started by the harness, stopped and reaped on drop.
#[derive(Debug)]
pub struct Daemon {
    pub name: &'static str,
    child: Option<Child>,
    pub log: PathBuf,
}

impl Daemon {
    /// Starts `cmd` with stdout/stderr appended to `log`, tied to our life.
    pub fn spawn(
        name: &'static str,
        mut cmd: Command,
        marker: &Path,
        log: PathBuf,
    ) -> io::Result<Self> {
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        let err = out.try_clone()?;
        cmd.env(MARKER, marker)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        // The cluster's cgroup's list of processes, opened here (close on
        // exec): the child writes itself in before it runs the daemon.
        let procs = match group_of(marker) {
            Some(group) => Some(
                fs::OpenOptions::new()
                    .write(true)
                    .open(group.join("cgroup.procs"))?,
            ),
            None => None,
        };
        let procs_fd = procs.as_ref().map(AsRawFd::as_raw_fd);
        // SAFETY: prctl and write are async-signal-safe and touch no Rust
        // state; they run in the forked child just before exec, on a file
        // descriptor the parent keeps open until spawn returns.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if let Some(fd) = procs_fd {
                    if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        drop(procs);
        Ok(Self {
            name,
            child: Some(child),
            log,
        })
    }

    /// The daemon's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `Some(status)` once the daemon has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGTERM, then SIGKILL after `grace`; always reaps.
    pub fn stop(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        signal(child.id(), libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            sleep(EXIT_POLL);
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// SIGKILL without any grace (to simulate a crash); reaps.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop(DAEMON_STOP.into());
    }
}

fn signal(pid: u32, sig: i32) {
    if let Ok(pid) = i32::try_from(pid) {
        // SAFETY: kill(2) with a pid we own; failure (already gone) is fine.
        unsafe { libc::kill(pid, sig) };
    }
}

/// Pids of live processes whose environment has `MARKER=<value>` with a
/// value accepted by `select`.
pub fn marked_processes(select: impl Fn(&str) -> bool) -> Vec<u32> {
    let needle = format!("{MARKER}=");
    other_processes(|pid| {
        let Ok(env) = fs::read(format!("/proc/{pid}/environ")) else {
            return false;
        };
        env.split(|&b| b == 0).any(|kv| {
            std::str::from_utf8(kv)
                .ok()
                .and_then(|kv| kv.strip_prefix(needle.as_str()))
                .is_some_and(&select)
        })
    })
}

/// Pids of live processes other than this one that `select` accepts.
fn other_processes(select: impl Fn(u32) -> bool) -> Vec<u32> {
    let own = std::process::id();
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|&pid| pid != own && select(pid))
        .collect()
}

/// Pids of live processes named `name` (their `comm`) that descend from
/// `ancestor`: what a daemon started, however many forks below it, and
/// nothing of another cluster's.
pub fn descendants_named(ancestor: u32, name: &str) -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let stat = |pid: u32| -> Option<(String, u32)> {
        let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses.
        let (head, tail) = text.rsplit_once(')')?;
        let comm = head.split_once('(')?.1.to_owned();
        let ppid = tail.split_whitespace().nth(1)?.parse().ok()?;
        Some((comm, ppid))
    };
    let descends = |mut pid: u32| {
        // A chain longer than this is a loop read mid-change: not ours.
        for _ in 0..64 {
            match stat(pid) {
                Some((_, ppid)) if ppid == ancestor => return true,
                Some((_, ppid)) if ppid > 1 => pid = ppid,
                _ => return false,
            }
        }
        false
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|&pid| stat(pid).is_some_and(|(comm, _)| comm == name) && descends(pid))
        .collect()
}

/// Kills (SIGKILL) every process marked with `dir` or in its cgroup of
/// [`GROUPS`], until none is left or `timeout` passes; then removes that
/// cgroup. Returns how many were still alive at the end.
pub fn kill_marked(dir: &Path, timeout: Duration) -> usize {
    let want = dir.to_string_lossy().into_owned();
    let group = group_name(dir);
    let deadline = Instant::now() + timeout;
    loop {
        let mut pids = marked_processes(|v| v == want);
        pids.extend(grouped_processes(|g| Some(g) == group.as_deref()));
        if pids.is_empty() || Instant::now() >= deadline {
            if pids.is_empty() {
                if let (Some(root), Some(name)) = (groups_mounted(), &group) {
                    let _ = fs::remove_dir(root.join(name));
                }
            }
            return pids.len();
        }
        for pid in pids {
            signal(pid, libc::SIGKILL);
        }
        sleep(POLL);
    }
}

/// Kills processes left by an earlier test run that died before cleaning up
/// (its directory, or its cgroup of [`GROUPS`], names an owner process
/// that no longer runs, [`owner_alive`]).
pub fn kill_orphans() {
    let orphaned = |value: &str| owner_pid(value).is_some() && !owner_alive(value);
    for pid in marked_processes(orphaned)
        .into_iter()
        .chain(grouped_processes(orphaned))
    {
        signal(pid, libc::SIGKILL);
    }
    // Their cgroups, once empty (one whose processes are still dying
    // goes at a later start).
    let Some(root) = groups_mounted() else {
        return;
    };
    let groups = fs::read_dir(&root).into_iter().flatten().flatten();
    for group in groups.filter(|g| g.file_name().to_str().is_some_and(orphaned)) {
        let _ = fs::remove_dir(group.path());
    }
}

/// The name of the tests' own cgroup v1 hierarchy (no controller): each
/// cluster's daemons, and all they fork, run in its cgroup
/// `/<cluster directory's name>` (`/gpushare-<pid>-<start>-<n>`), which
/// `/proc/PID/cgroup` shows as `N:name=gpushare-tests:/gpushare-<pid>-<start>-<n>`
/// in whatever root or mount namespace the process runs. Processes of
/// anything else (a site's own Slurm daemons) sit in its root, `/`.
pub const GROUPS: &str = "gpushare-tests";

/// Where the harness mounts [`GROUPS`] (in the root it runs in).
pub(crate) const GROUPS_MOUNT: &str = "/run/gpushare-tests-cgroup";

/// The mounted [`GROUPS`] hierarchy, mounted on first use; `None` (said
/// once) where it cannot be: clusters then run without cgroups of their
/// own, found by [`MARKER`] alone.
pub(crate) fn groups_mounted() -> Option<PathBuf> {
    static MOUNTED: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    MOUNTED
        .get_or_init(|| {
            let root = PathBuf::from(GROUPS_MOUNT);
            let mounted = || {
                fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| {
                    m.lines().any(|l| {
                        l.split(' ').nth(4) == Some(GROUPS_MOUNT)
                            && l.contains(&format!("name={GROUPS}"))
                    })
                })
            };
            if mounted() {
                return Some(root);
            }
            let tried = fs::create_dir_all(&root)
                .map_err(|e| e.to_string())
                .and_then(|()| {
                    let c = |s: &str| CString::new(s).map_err(|e| e.to_string());
                    let (src, target, fstype) = (c(GROUPS)?, c(GROUPS_MOUNT)?, c("cgroup")?);
                    let data = c(&format!("none,name={GROUPS}"))?;
                    // SAFETY: mount(2) with NUL-terminated strings that live
                    // across the call.
                    let rc = unsafe {
                        libc::mount(
                            src.as_ptr(),
                            target.as_ptr(),
                            fstype.as_ptr(),
                            0,
                            data.as_ptr().cast(),
                        )
                    };
                    if rc == 0 {
                        Ok(())
                    } else {
                        Err(io::Error::last_os_error().to_string())
                    }
                });
            match tried {
                Ok(()) => Some(root),
                Err(e) => {
                    eprintln!(
                        "testcluster: no cgroup hierarchy {GROUPS} at {GROUPS_MOUNT} ({e}): \
                         clusters are stopped by their processes' environment alone"
                    );
                    None
                }
            }
        })
        .clone()
}

/// A cluster's cgroup name in [`GROUPS`]: its directory's name.
fn group_name(dir: &Path) -> Option<String> {
    dir.file_name().and_then(|n| n.to_str()).map(str::to_owned)
}

/// The cgroup of [`GROUPS`] for the cluster of directory `marker`, made
/// if need be; `None` where the hierarchy cannot be mounted.
fn group_of(marker: &Path) -> Option<PathBuf> {
    let group = groups_mounted()?.join(group_name(marker)?);
    match fs::create_dir_all(&group) {
        Ok(()) => Some(group),
        Err(e) => {
            eprintln!("testcluster: {}: {e}", group.display());
            None
        }
    }
}

/// Pids of live processes in a cgroup of [`GROUPS`] other than its root,
/// whose name (`gpushare-<pid>-<start>-<n>`) `select` accepts. Read from
/// `/proc/PID/cgroup`: the hierarchy need not be mounted here.
pub fn grouped_processes(select: impl Fn(&str) -> bool) -> Vec<u32> {
    let needle = format!(":name={GROUPS}:/");
    other_processes(|pid| {
        fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|text| {
            text.lines().any(|l| {
                l.split_once(needle.as_str())
                    .is_some_and(|(_, g)| !g.is_empty() && select(g))
            })
        })
    })
}

/// The owning test process of a cluster directory
/// `.../gpushare-<pid>-<start>-<n>` (or an older `gpushare-<pid>-<n>`).
pub fn owner_pid(dir: &str) -> Option<u32> {
    let name = Path::new(dir).file_name()?.to_str()?;
    name.strip_prefix("gpushare-")?
        .split('-')
        .next()?
        .parse()
        .ok()
}

/// When process `pid` started, in clock ticks since boot (the 22nd field
/// of `/proc/PID/stat`): with the pid, what tells one process from a later
/// one given the same pid.
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name (field 2) may hold spaces and parentheses: count from the
    // last ')'.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// The name of this process's `n`th cluster directory:
/// `gpushare-<pid>-<start ticks>-<n>`, unique on this machine until it
/// reboots even where a run reuses a pid (a name of the pid alone would
/// find an earlier cluster's accounting database in a shared MariaDB).
pub fn cluster_dir_name(n: u32) -> String {
    let pid = std::process::id();
    format!("gpushare-{pid}-{}-{n}", start_ticks(pid).unwrap_or(0))
}

/// Whether the test process that made cluster directory `dir` still runs:
/// its pid lives and, where the name records it, started when the name
/// says (a later process given the same pid does not count).
pub fn owner_alive(dir: &str) -> bool {
    let Some(pid) = owner_pid(dir) else {
        return false;
    };
    let parts: Vec<&str> = Path::new(dir)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("")
        .split('-')
        .collect();
    match parts.as_slice() {
        [_, _, start, _] => start.parse::<u64>().ok() == start_ticks(pid),
        _ => Path::new(&format!("/proc/{pid}")).exists(),
    }
}

/// SIGINT, SIGTERM and SIGHUP held back, so that a program keeping a
/// cluster up for interactive use can wait for them with
/// [`StopSignals::wait`], return, and drop its `Cluster`: slurmstepds,
/// cgroups and namespaces go with it instead of outliving a killed program
/// (the daemons' own `PR_SET_PDEATHSIG` takes only them). Block them first
/// thing in `main`: a thread started before keeps the default action, and
/// a process-directed signal goes to a thread that does not block it.
pub struct StopSignals {
    set: libc::sigset_t,
}

impl StopSignals {
    /// Blocks the signals (programs started later are not affected: std's
    /// `Command` empties a child's signal mask before it runs).
    pub fn block() -> io::Result<Self> {
        // SAFETY: sigemptyset/sigaddset write only into `set`, which is
        // ours; pthread_sigmask changes only this thread's mask.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::sigaddset(&mut set, s);
            }
            let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            Ok(Self { set })
        }
    }

    /// Waits for one of the signals, at most `limit`; returns it (`None`
    /// when the time ran out).
    pub fn wait(&self, limit: Duration) -> Option<i32> {
        // A limit past what an Instant holds is no limit.
        let deadline = Instant::now().checked_add(limit);
        loop {
            let left = deadline.map_or(Duration::from_secs(3600), |d| {
                d.saturating_duration_since(Instant::now())
            });
            if left.is_zero() {
                return None;
            }
            let ts = libc::timespec {
                tv_sec: left.as_secs().min(i32::MAX as u64) as libc::time_t,
                tv_nsec: left.subsec_nanos().into(),
            };
            // SAFETY: `set` is a valid signal set; the info pointer may be null.
            let s = unsafe { libc::sigtimedwait(&self.set, std::ptr::null_mut(), &ts) };
            if s > 0 {
                return Some(s);
            }
            // EAGAIN (time out) or EINTR: the loop checks the deadline.
        }
    }
}

impl std::fmt::Debug for StopSignals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StopSignals(SIGINT, SIGTERM, SIGHUP)")
    }
}

/// The `sleep` process of Slurm job `job`, told apart by the
/// `SLURM_JOB_ID` in its environment (the tests' way; gpushare never
/// reads a job's environment for this). Multi-node clusters share the
/// host's pids.
pub fn sleep_of_job(job: u32) -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
                && job_of_environ(pid) == Some(job)
        })
}

/// A pid's `SLURM_JOB_ID`.
fn job_of_environ(pid: u32) -> Option<u32> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&b| b == 0)
        .find_map(|v| v.strip_prefix(b"SLURM_JOB_ID="))
        .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
}

#[cfg(test)]
mod cluster_names {
    use super::{cluster_dir_name, owner_alive, owner_pid};

    #[test]
    fn a_cluster_is_owned_by_the_process_that_started_when_its_name_says() {
        let name = cluster_dir_name(2);
        let pid = std::process::id();
        assert_eq!(owner_pid(&format!("/tmp/{name}")), Some(pid));
        assert!(name.ends_with("-2"), "{name}");
        assert!(owner_alive(&format!("/tmp/{name}")));
        // The same pid, another start: a process that reused the pid.
        assert!(!owner_alive(&format!("/tmp/gpushare-{pid}-1-2")));
        // A name of the pid alone (an older run's): the pid decides.
        assert!(owner_alive(&format!("/tmp/gpushare-{pid}-0")));
        assert!(!owner_alive("/tmp/gpushare-notapid-0"));
    }
}
