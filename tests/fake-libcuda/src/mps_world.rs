//! What the stand-ins share of an MPS node as a real GPU showed it (an
//! H200, driver 580): used by the stand-in `libcuda.so.1` and, through
//! `#[path]`, by the stand-in `nvidia-cuda-mps-control`
//! (tests/src/bin/mps-control-standin.rs), so that both read one world.
//!
//! - **Servers.** A GPU's MPS server is a process named
//!   `nvidia-cuda-mps-server` with the words `gpu=N uid=U at=DIR` among
//!   its arguments, DIR the stand-ins' directory (the stand-ins of two test
//!   clusters on one machine never see each other's), and its daemon's
//!   `CUDA_MPS_PIPE_DIRECTORY`, as gpushare finds servers. The
//!   daemon starts one for its first client, or when told `start_server
//!   -uid U`, and it lives, idle or not, until the daemon quits. While one
//!   runs, a GPU in `EXCLUSIVE_PROCESS` refuses every context outside MPS;
//!   while none runs (a daemon alone holds nothing), the first such
//!   process gets the whole GPU, and then no server can start on it.
//! - **Clients and their work.** Each MPS client registers in the
//!   directory [`CLIENTS`] beside the stand-ins (made world-writable and
//!   sticky by whoever installs them): `<gpu>.<pid>` holds its server's
//!   pid, `<gpu>.<pid>.busy` exists while it has kernels in flight,
//!   `<gpu>.<pid>.terminated` once the control daemon's `terminate_client`
//!   ended its work. A client that is gone while busy and not terminated
//!   (a SIGKILL mid-kernel) is a fatal fault of its server: every other
//!   client of that server fails its next call (`CUDA_ERROR_ILLEGAL_ADDRESS`),
//!   as the server's log on the GPU showed.
//! - **Utilisation** is charged to the server's pid, never a client's
//!   (the stand-in NVML query's figures are written by the tests).
//!
//! Where [`CLIENTS`] is missing, clients register nothing and no fault is
//! modelled.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The server's program name.
pub const SERVER: &str = "nvidia-cuda-mps-server";

/// The clients' directory beside the stand-ins.
pub const CLIENTS: &str = "mps-clients";

/// Set in a stand-in's sleeping processes (the daemon, a server): they only
/// wait to be killed.
pub const SLEEPER_MARK: &str = "GPUSHARE_STANDIN_DAEMON";

/// A live process: `/proc` says so where it can be read (a zombie is as
/// dead as a gone process), else kill(pid, 0) succeeds or is refused
/// (EPERM: another user's process, alive).
pub fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    if let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command's closing parenthesis.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        return !matches!(state, Some('Z' | 'X'));
    }
    // SAFETY: kill with signal 0 only checks; it has no memory
    // preconditions.
    let answer = unsafe { libc::kill(pid, 0) };
    answer == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// A stand-in server process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub pid: u32,
    pub gpu: u32,
    pub uid: u32,
    /// The stand-ins' directory it belongs to.
    pub at: PathBuf,
}

/// The server a process's command line (NUL-separated) makes it, if any.
pub fn server_of_cmdline(pid: u32, cmdline: &[u8]) -> Option<Server> {
    let mut words = cmdline.split(|&b| b == 0);
    let name = words.next()?.rsplit(|&b| b == b'/').next()?;
    if name != SERVER.as_bytes() {
        return None;
    }
    let words: Vec<&str> = words.filter_map(|w| std::str::from_utf8(w).ok()).collect();
    let value =
        |key: &str| -> Option<u32> { words.iter().find_map(|w| w.strip_prefix(key)?.parse().ok()) };
    let at = words.iter().find_map(|w| w.strip_prefix("at="))?;
    Some(Server {
        pid,
        gpu: value("gpu=")?,
        uid: value("uid=")?,
        at: PathBuf::from(at),
    })
}

/// The live stand-in servers of the stand-ins in `here`.
pub fn servers(here: &Path) -> Vec<Server> {
    let here = fs::canonicalize(here).unwrap_or_else(|_| here.to_path_buf());
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found: Vec<Server> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            server_of_cmdline(pid, &cmdline)
                .filter(|s| alive(s.pid) && fs::canonicalize(&s.at).is_ok_and(|at| at == here))
        })
        .collect();
    found.sort_unstable_by_key(|s| s.pid);
    found
}

/// GPU `gpu`'s live server among the stand-ins in `here`, where one runs.
pub fn server_on(here: &Path, gpu: u32) -> Option<Server> {
    servers(here).into_iter().find(|s| s.gpu == gpu)
}

/// Starts a server for GPU `gpu` and user `uid` of the stand-ins in
/// `here`: `program` (a stand-in that sleeps under [`SLEEPER_MARK`]) run
/// as the server, detached, with the daemon's pipe directory; as `uid`
/// where the caller is root.
pub fn start_server(
    program: &Path,
    here: &Path,
    gpu: u32,
    uid: u32,
    pipe: &Path,
) -> io::Result<u32> {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    let mut cmd = Command::new(program);
    cmd.arg0(SERVER)
        .args([
            format!("gpu={gpu}"),
            format!("uid={uid}"),
            format!("at={}", here.display()),
        ])
        .env(SLEEPER_MARK, "1")
        .env("CUDA_MPS_PIPE_DIRECTORY", pipe)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } == 0 && uid != 0 {
        cmd.uid(uid);
    }
    // SAFETY: setsid is async-signal-safe and touches no memory: the
    // server is detached as the daemon's children are from a job.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    cmd.spawn().map(|child| child.id())
}

/// One registered MPS client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Client {
    pub pid: u32,
    pub gpu: u32,
    pub server: u32,
    pub busy: bool,
    pub terminated: bool,
}

fn client_file(clients: &Path, gpu: u32, pid: u32) -> PathBuf {
    clients.join(format!("{gpu}.{pid}"))
}

fn marker(clients: &Path, gpu: u32, pid: u32, what: &str) -> PathBuf {
    clients.join(format!("{gpu}.{pid}.{what}"))
}

/// Registers client `pid` of GPU `gpu`'s server `server`; false where the
/// directory is not there (no fault is modelled then).
pub fn register(clients: &Path, gpu: u32, pid: u32, server: u32) -> bool {
    forget_dead(clients);
    fs::write(client_file(clients, gpu, pid), format!("{server}\n")).is_ok()
}

/// Marks client `pid`'s work in flight (`busy`) or finished.
pub fn set_busy(clients: &Path, gpu: u32, pid: u32, busy: bool) {
    let path = marker(clients, gpu, pid, "busy");
    if busy {
        let _ = fs::write(path, "");
    } else {
        let _ = fs::remove_file(path);
    }
}

/// What the control daemon's `terminate_client` does: the client's work
/// ended, safely for the others.
pub fn terminate(clients: &Path, gpu: u32, pid: u32) -> bool {
    client_file(clients, gpu, pid).exists()
        && fs::write(marker(clients, gpu, pid, "terminated"), "").is_ok()
}

/// A client that ended its context: nothing of it is left.
pub fn unregister(clients: &Path, gpu: u32, pid: u32) {
    for path in [
        client_file(clients, gpu, pid),
        marker(clients, gpu, pid, "busy"),
        marker(clients, gpu, pid, "terminated"),
    ] {
        let _ = fs::remove_file(path);
    }
}

/// Every registered client, live or not.
pub fn clients(clients: &Path) -> Vec<Client> {
    let Ok(entries) = fs::read_dir(clients) else {
        return Vec::new();
    };
    let mut found: Vec<Client> = entries
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let (gpu, pid) = name.split_once('.')?;
            let (gpu, pid) = (gpu.parse().ok()?, pid.parse().ok()?);
            let server = fs::read_to_string(client_file(clients, gpu, pid))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            Some(Client {
                pid,
                gpu,
                server,
                busy: marker(clients, gpu, pid, "busy").exists(),
                terminated: marker(clients, gpu, pid, "terminated").exists(),
            })
        })
        .collect();
    found.sort_unstable_by_key(|c| (c.gpu, c.pid));
    found
}

/// The client whose end was a fault of server `server`: gone while its
/// kernels ran, never ended through the control daemon.
pub fn fault_of(all: &[Client], server: u32, me: u32) -> Option<u32> {
    all.iter()
        .find(|c| c.server == server && c.pid != me && c.busy && !c.terminated && !alive(c.pid))
        .map(|c| c.pid)
}

/// Forgets the clients of servers that are gone (their faults went with
/// them).
fn forget_dead(dir: &Path) {
    let here = dir.parent().unwrap_or(dir);
    let live: Vec<u32> = servers(here).iter().map(|s| s.pid).collect();
    for c in clients(dir) {
        if !live.contains(&c.server) && !alive(c.pid) {
            unregister(dir, c.gpu, c.pid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_is_known_by_its_name_and_arguments() {
        let line = b"/x/nvidia-cuda-mps-server\0gpu=3\0uid=1001\0at=/s\0";
        assert_eq!(
            server_of_cmdline(7, line),
            Some(Server {
                pid: 7,
                gpu: 3,
                uid: 1001,
                at: PathBuf::from("/s"),
            })
        );
        assert_eq!(
            server_of_cmdline(7, b"nvidia-cuda-mps-server\0gpu=3\0uid=1\0"),
            None,
            "no directory"
        );
        assert_eq!(server_of_cmdline(7, b"nvidia-cuda-mps-server\0"), None);
        assert_eq!(server_of_cmdline(7, b"sleep\0gpu=3\0uid=1\0"), None);
        assert_eq!(
            server_of_cmdline(7, b"nvidia-cuda-mps-server\0-c\0x\0at=/s\0uid=1\0gpu=3\0"),
            Some(Server {
                pid: 7,
                gpu: 3,
                uid: 1,
                at: PathBuf::from("/s"),
            })
        );
    }

    #[test]
    fn a_client_killed_mid_kernel_is_its_servers_fault_unless_terminated() {
        let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let at = temp.path();
        // A pid that is surely not alive.
        let gone = u32::try_from(i32::MAX).unwrap_or(u32::MAX);
        let me = std::process::id();
        assert!(fs::write(client_file(at, 0, gone), "50\n").is_ok());
        assert!(fs::write(client_file(at, 0, me), "50\n").is_ok());
        assert_eq!(fault_of(&clients(at), 50, me), None, "not busy: no fault");
        set_busy(at, 0, gone, true);
        assert_eq!(fault_of(&clients(at), 50, me), Some(gone));
        assert_eq!(fault_of(&clients(at), 51, me), None, "another server's");
        assert!(terminate(at, 0, gone));
        assert_eq!(fault_of(&clients(at), 50, me), None, "ended safely");
        assert!(!terminate(at, 0, 12345), "no such client");
        unregister(at, 0, gone);
        assert_eq!(clients(at).len(), 1);
    }
}
