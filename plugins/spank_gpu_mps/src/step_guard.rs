//! The step guard in slurmstepd: started beside a share's step in the
//! cgroups of its first task, stopped after its last
//! (`gpushare::mps::node::step_guard` says what it does and why there).

use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gpushare::mps::node::step_guard::{GuardArgs, WORD};
use gpushare::mps::private::cgroup_procs;

use crate::private::{c_path, close_at_exec, enter_cgroups};

/// A guard started: its pid and its start time (`/proc/<pid>/stat`), so
/// that a pid Linux gave to another process since is never signalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guard {
    pid: i32,
    started: u64,
}

/// Field 22 of `/proc/<pid>/stat` (after the command's closing paren):
/// when the process started, in clock ticks since boot.
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    // rest: " S ppid ..." = fields 3 on; field 22 is the 20th of them.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Starts `program` as the guard of job `job`'s step on GPU `gpu`, in the
/// cgroups of its task `task` (so that Slurm signals and kills it with the
/// tasks), as root; `conf`: the gpu_mps.conf the plugin read.
pub fn start(
    program: &Path,
    conf: Option<&Path>,
    job: u32,
    gpu: u32,
    task: i32,
) -> Result<Guard, String> {
    let proc_cgroup = std::fs::read_to_string(format!("/proc/{task}/cgroup"))
        .map_err(|e| format!("/proc/{task}/cgroup: {e}"))?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    let procs = cgroup_procs(&proc_cgroup, &mountinfo, Path::exists)?
        .iter()
        .map(|p| c_path(p))
        .collect::<Result<Vec<_>, _>>()?;
    let args = GuardArgs {
        job,
        gpu,
        conf: conf.map(Path::to_path_buf),
    };
    let mut cmd = Command::new(program);
    cmd.arg(WORD)
        .args(args.to_args())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: the closure makes only async-signal-safe calls (open, write,
    // close, syscall, fcntl) on data made before the fork.
    unsafe {
        cmd.pre_exec(move || {
            enter_cgroups(&procs)?;
            close_at_exec();
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .map_err(|e| format!("{}: {e}", program.display()))?;
    let pid = i32::try_from(child.id()).map_err(|e| e.to_string())?;
    // Dropping the handle neither waits nor kills: stop() reaps it, or
    // slurmstepd does while the step's tasks run.
    drop(child);
    let started = start_time(pid).ok_or_else(|| format!("guard {pid} gone at its start"))?;
    Ok(Guard { pid, started })
}

/// Stops the guard where it is still the process started (SIGKILL), and
/// reaps it within a second (slurmstepd reaps what it finds first).
pub fn stop(guard: Guard) -> io::Result<()> {
    if start_time(guard.pid) != Some(guard.started) {
        return Ok(());
    }
    // SAFETY: a signal to a pid whose start time was just checked.
    if unsafe { libc::kill(guard.pid, libc::SIGKILL) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let until = Instant::now() + Duration::from_secs(1);
    loop {
        let mut status = 0;
        // SAFETY: waitpid on our child, not blocking.
        let rc = unsafe { libc::waitpid(guard.pid, &mut status, libc::WNOHANG) };
        if rc != 0 || Instant::now() >= until {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_start_time_is_read_past_its_command() {
        let me = i32::try_from(std::process::id()).unwrap_or(0);
        assert!(start_time(me).is_some_and(|t| t > 0));
        assert_eq!(start_time(i32::MAX), None);
    }
}
