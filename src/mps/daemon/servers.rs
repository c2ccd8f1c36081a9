//! A GPU daemon's MPS servers. The control daemon runs as root, but each
//! server it spawns runs as the user it serves, so the daemon-uid rule of
//! [`super::processes`] never finds one. A server that outlives its
//! control daemon (killed after a `quit` it did not answer) keeps its
//! context on the GPU: in `EXCLUSIVE_PROCESS` mode no new server can then
//! open the GPU, and every later share's CUDA start fails with
//! `cudaErrorMpsConnectionFailed` (seen on an H200 under Slurm, when two
//! users' shares on one GPU were cancelled together). Whoever kills a
//! GPU's daemon kills its servers too.

use std::fs;
use std::path::Path;

/// The server program the daemon spawns for each user.
pub const SERVER_PROGRAM: &str = "nvidia-cuda-mps-server";

/// Pids of the MPS servers of the daemon at `pipe`: processes named
/// `nvidia-cuda-mps-server` in `argv[0]`, whatever their uid, whose parent
/// is one of `daemons` (the GPU's control daemon processes) or whose
/// environment names `pipe` (a server left behind by a daemon that is
/// gone). A user can make only their own processes match, and killing
/// those harms nobody else.
pub fn servers_of(pipe: &Path, daemons: &[u32]) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let wanted = pipe_variable(pipe);
    let mut found: Vec<u32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            is_server(pid)
                && (parent(pid).is_some_and(|p| daemons.contains(&p))
                    || fs::read(format!("/proc/{pid}/environ"))
                        .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == wanted.as_slice())))
        })
        .collect();
    found.sort_unstable();
    found
}

/// SIGKILL to each of `pids` still named as an MPS server (as
/// [`kill_if`]); returns the pids signalled.
pub fn kill_servers(pids: &[u32]) -> Vec<u32> {
    pids.iter()
        .copied()
        .filter(|&pid| kill_if(pid, is_server))
        .collect()
}

/// SIGKILL to `pid` if `still` says so of it while a pidfd holds it: until
/// it is reaped its pid is its own, so what /proc says of the pid then is
/// said of it, and a process that took the pid since is never signalled.
/// Kernels before 5.3 have no pidfd: check, then signal by pid.
pub(super) fn kill_if(pid: u32, still: impl Fn(u32) -> bool) -> bool {
    use rustix::process::{self as rp, Pid, PidfdFlags, Signal};
    let Some(id) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return false;
    };
    match rp::pidfd_open(id, PidfdFlags::empty()) {
        Ok(fd) => still(pid) && rp::pidfd_send_signal(&fd, Signal::KILL).is_ok(),
        Err(rustix::io::Errno::NOSYS) => still(pid) && rp::kill_process(id, Signal::KILL).is_ok(),
        Err(_) => false,
    }
}

/// `CUDA_MPS_PIPE_DIRECTORY=<path>`, as it appears in `/proc/<pid>/environ`.
pub(super) fn pipe_variable(path: &Path) -> Vec<u8> {
    let mut w = b"CUDA_MPS_PIPE_DIRECTORY=".to_vec();
    w.extend_from_slice(path.as_os_str().as_encoded_bytes());
    w
}

/// The file name of process `pid`'s `argv[0]`.
pub(super) fn argv0_name(pid: u32) -> Option<Vec<u8>> {
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let argv0 = cmdline.split(|&b| b == 0).next()?;
    Some(argv0.rsplit(|&b| b == b'/').next()?.to_vec())
}

fn is_server(pid: u32) -> bool {
    argv0_name(pid).is_some_and(|name| name == SERVER_PROGRAM.as_bytes())
}

/// The parent pid of process `pid`.
fn parent(pid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command};
    use std::time::{Duration, Instant};

    /// `bash -c script` with `CUDA_MPS_PIPE_DIRECTORY` set as given, as
    /// uid 65534 where the tests run as root.
    fn spawn(script: &str, pipe: Option<&Path>) -> Child {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new("bash");
        cmd.args(["-c", script])
            .env_remove("CUDA_MPS_PIPE_DIRECTORY");
        if let Some(p) = pipe {
            cmd.env("CUDA_MPS_PIPE_DIRECTORY", p);
        }
        if rustix::process::geteuid().is_root() {
            cmd.uid(65534).gid(65534);
        }
        cmd.spawn().unwrap_or_else(|e| panic!("{e}"))
    }

    fn until(mut found: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !found() {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    #[test]
    fn a_users_server_is_found_by_its_daemon_or_its_pipe_and_killed() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let pipe = dir.path().join("pipe");
        let other = dir.path().join("other");
        let server = format!("exec -a {SERVER_PROGRAM} sleep 30");
        // Left behind: no daemon, its environment names the pipe.
        let mut orphan = spawn(&server, Some(&pipe));
        // Another GPU's server, and a process of another name.
        let mut elsewhere = spawn(&server, Some(&other));
        let mut named_otherwise = spawn("exec -a sleeper sleep 30", Some(&pipe));
        // A daemon's child with no such variable: found by its parent.
        let mut daemon = spawn(&format!("exec 2>/dev/null; {server} & wait"), None);
        let daemon_pid = daemon.id();
        let child = || {
            servers_of(&other.join("none"), &[daemon_pid])
                .first()
                .copied()
        };
        assert!(until(|| child().is_some()), "the daemon's child is found");
        let child_pid = child().unwrap_or_default();
        assert!(until(|| servers_of(&pipe, &[]) == vec![orphan.id()]));
        let found = servers_of(&pipe, &[daemon_pid]);
        let mut want = vec![orphan.id(), child_pid];
        want.sort_unstable();
        assert_eq!(found, want, "neither another GPU's nor another name's");
        assert_eq!(kill_servers(&found), want);
        assert!(until(|| orphan.try_wait().ok().flatten().is_some()));
        assert_eq!(kill_servers(&[named_otherwise.id()]), Vec::<u32>::new());
        for c in [&mut elsewhere, &mut named_otherwise, &mut daemon] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
