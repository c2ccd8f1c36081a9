//! What tests break on purpose: daemons killed and restarted, nodes
//! crashed and booted, cables pulled, a second slurmctld made to stop.

use super::{mkdir, slurm_plugin_dir, wait_for, write, Cluster, NODE};
use crate::process::Daemon;
use crate::time::{DAEMON_START, DAEMON_STOP, NODE_STATE, SHORT};
use crate::Result;
use std::fs;
use std::net::TcpListener;
use std::path::Path;

impl Cluster {
    /// Stops slurmctld (SIGTERM: it saves its state) and starts it again
    /// on that state; jobs on the nodes go on meanwhile.
    pub fn restart_slurmctld(&mut self) -> Result<()> {
        self.restart_slurmctld_after(|_| Ok(()))
    }

    /// Stops slurmctld (SIGTERM), runs `meanwhile` while it is down (a
    /// file changed before it starts), and starts it again, also where
    /// `meanwhile` failed (whose error then comes back).
    pub fn restart_slurmctld_after(
        &mut self,
        meanwhile: impl FnOnce(&Self) -> Result<()>,
    ) -> Result<()> {
        if let Some(mut d) = self.daemons.remove("slurmctld") {
            d.stop(DAEMON_STOP.into());
        }
        let done = meanwhile(self);
        let started = self.start_slurmctld();
        done.and(started)
    }

    /// Freezes slurmctld (SIGSTOP) until the returned value is dropped
    /// (SIGCONT): a controller too loaded to answer, whose clients wait on
    /// it until their own timeouts while slurmd goes on alone.
    pub fn stall_slurmctld(&self) -> Result<Stalled> {
        let pid = self
            .daemons
            .get("slurmctld")
            .and_then(Daemon::pid)
            .ok_or("slurmctld does not run")?;
        let pid = libc::pid_t::try_from(pid).map_err(|e| e.to_string())?;
        // SAFETY: a signal to a child this harness started.
        if unsafe { libc::kill(pid, libc::SIGSTOP) } != 0 {
            return Err(format!(
                "SIGSTOP to slurmctld {pid}: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Stalled(pid))
    }

    /// Runs `during` while watching for a program slurmctld starts whose
    /// arguments hold each of `words` (a plugin's own `scontrol`), for up
    /// to `within`: the first seen is frozen (SIGSTOP) before it can have
    /// its answer, as a slurmctld too busy to answer that one call would
    /// leave it, and stays so until whoever started it gives up on it
    /// (or the returned value is dropped). `None`: none was seen.
    pub fn freeze_slurmctld_child_during<R>(
        &self,
        words: &[&str],
        within: std::time::Duration,
        during: impl FnOnce() -> R,
    ) -> Result<(R, Option<FrozenChild>)> {
        let ctld = self
            .daemons
            .get("slurmctld")
            .and_then(Daemon::pid)
            .ok_or("slurmctld does not run")?;
        std::thread::scope(|s| {
            let watcher = s.spawn(|| watch_and_freeze(ctld, words, within));
            let done = during();
            let frozen = watcher
                .join()
                .map_err(|_| "the watcher of slurmctld's children panicked".to_owned())?;
            Ok((done, frozen))
        })
    }

    /// Stops slurmdbd (SIGTERM), as an outage of the accounting database:
    /// slurmctld goes on from its association cache.
    pub fn stop_slurmdbd(&mut self) {
        if let Some(mut d) = self.daemons.remove("slurmdbd") {
            d.stop(DAEMON_STOP.into());
        }
    }

    /// Starts slurmdbd again (after [`Cluster::stop_slurmdbd`]) and waits
    /// until `sacctmgr` gets answers from it.
    pub fn start_slurmdbd_again(&mut self) -> Result<()> {
        self.start_slurmdbd()?;
        wait_for("sacctmgr to reach slurmdbd again", DAEMON_START, || {
            self.run_ok("sacctmgr", &["-nP", "show", "qos", "format=name"])
                .ok()
        })
        .map(|_| ())
    }

    /// Starts a second slurmctld on a copy of this cluster's configuration
    /// (own port, state, log; no accounting; plugins from `plugin_dir` if
    /// given), after `prepare` may change files in the copy's directory.
    /// It must stop by itself within [`DAEMON_START`]: returns its exit status and log.
    /// For checking that a bad plugin or configuration stops slurmctld.
    pub fn probe_slurmctld(
        &self,
        name: &str,
        plugin_dir: Option<&Path>,
        prepare: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<(std::process::ExitStatus, String)> {
        let probe = self.dir.join(format!("probe-{name}"));
        mkdir(&probe.join("state"), 0o700)?;
        if let Some((uid, gid)) = self.slurm_user_ids()? {
            std::os::unix::fs::chown(probe.join("state"), Some(uid), Some(gid))
                .map_err(|e| format!("chown probe state: {e}"))?;
        }
        let log = self.log_dir().join(format!("probe-{name}.log"));
        let plugins = plugin_dir.unwrap_or(&self.plugin_dir);
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| e.to_string())?
            .port();
        let text = fs::read_to_string(self.slurm_conf()).map_err(|e| e.to_string())?;
        let text: Vec<String> = text
            .lines()
            .filter_map(|l| {
                let key = l.split_once('=').map(|(k, _)| k);
                Some(match key {
                    Some("PluginDir") => {
                        format!("PluginDir={}:{}", plugins.display(), slurm_plugin_dir())
                    }
                    Some("SlurmctldPort") => format!("SlurmctldPort={port}"),
                    Some("StateSaveLocation") => {
                        format!("StateSaveLocation={}/state", probe.display())
                    }
                    Some("SlurmctldLogFile") => format!("SlurmctldLogFile={}", log.display()),
                    Some("SlurmctldPidFile") => format!("SlurmctldPidFile={}/pid", probe.display()),
                    Some("AccountingStorageType") => {
                        "AccountingStorageType=accounting_storage/none".to_owned()
                    }
                    Some(k) if k.starts_with("AccountingStorage") => return None,
                    _ => l.to_owned(),
                })
            })
            .collect();
        for entry in fs::read_dir(self.etc()).map_err(|e| e.to_string())? {
            let path = entry.map_err(|e| e.to_string())?.path();
            let keep = path
                .file_name()
                .is_some_and(|n| n != "slurm.conf" && n != "slurmdbd.conf");
            if keep && path.is_file() {
                if let Some(n) = path.file_name() {
                    fs::copy(&path, probe.join(n)).map_err(|e| e.to_string())?;
                }
            }
        }
        write(&probe.join("slurm.conf"), &(text.join("\n") + "\n"), 0o644)?;
        prepare(&probe)?;
        let mut cmd = self.command("slurmctld");
        cmd.args(["-D", "-i"])
            .env("SLURM_CONF", probe.join("slurm.conf"));
        let stdio = self.log_dir().join(format!("probe-{name}.stdio.log"));
        let mut d =
            Daemon::spawn("probe-slurmctld", cmd, &self.dir, stdio).map_err(|e| e.to_string())?;
        let status = wait_for(
            &format!("probe slurmctld {name} to stop"),
            DAEMON_START,
            || d.exited(),
        );
        d.stop(DAEMON_STOP.into());
        Ok((status?, fs::read_to_string(&log).unwrap_or_default()))
    }

    /// Kills slurmd with SIGKILL (a crash) without touching its jobs.
    pub fn kill9_slurmd(&mut self) {
        self.kill9_slurmd_on(NODE);
    }

    /// Starts slurmd again (after [`Cluster::kill9_slurmd`]).
    pub fn restart_slurmd(&mut self) -> Result<()> {
        self.restart_slurmd_on(NODE)
    }

    /// Kills node `node`'s slurmd with SIGKILL (a crash); its jobs and
    /// slurmstepds go on.
    pub fn kill9_slurmd_on(&mut self, node: &str) {
        if let Some(mut d) = self.slurmds.remove(node) {
            d.kill9();
        }
    }

    /// Starts node `node`'s slurmd again and waits until it is up.
    pub fn restart_slurmd_on(&mut self, node: &str) -> Result<()> {
        self.start_slurmd_on(node)?;
        self.wait_nodes(&[node.to_owned()], NODE_STATE)
    }

    /// Restarts node `node`'s slurmd as `systemctl restart slurmd` does
    /// (SIGTERM: its jobs go on) and waits until it is up: how slurmd
    /// before 23.11 reads a changed `GresTypes=`.
    pub fn restart_slurmd_cleanly(&mut self, node: &str) -> Result<()> {
        if let Some(mut d) = self.slurmds.remove(node) {
            d.stop(DAEMON_STOP.into());
        }
        self.restart_slurmd_on(node)
    }

    /// A node crashes: every process on it dies at once (slurmd,
    /// slurmstepds, jobs, MPS daemons), nothing runs an epilog.
    pub fn crash_node(&mut self, node: &str) -> Result<()> {
        self.kill9_slurmd_on(node);
        let host = self.host(node)?;
        wait_for(&format!("every process on {node} to die"), SHORT, || {
            let left = host.processes();
            for &pid in &left {
                if let Ok(pid) = i32::try_from(pid) {
                    // SAFETY: kill(2) on a pid of this node; gone is fine.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
            left.is_empty().then_some(())
        })
    }

    /// The node comes back from a reboot: its `/run` (and with it
    /// gpushare's state directory) is empty, slurmd starts afresh.
    pub fn boot_node(&mut self, node: &str) -> Result<()> {
        self.host(node)?.wipe_run()?;
        self.restart_slurmd_on(node)
    }

    /// Unplugs (`false`) or plugs back (`true`) node `node`'s network cable.
    pub fn set_cable(&self, node: &str, connected: bool) -> Result<()> {
        self.host(node)?.set_cable(connected)
    }
}

/// slurmctld frozen by [`Cluster::stall_slurmctld`]: it goes on when this
/// is dropped.
#[derive(Debug)]
#[must_use = "slurmctld goes on when this is dropped"]
pub struct Stalled(libc::pid_t);

impl Drop for Stalled {
    fn drop(&mut self) {
        // SAFETY: a signal to the slurmctld this harness started.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// A program of slurmctld's frozen by
/// [`Cluster::freeze_slurmctld_child_during`]: its pid. It goes on when
/// this is dropped, where it is still slurmctld's child.
#[derive(Debug)]
#[must_use = "the program goes on when this is dropped"]
pub struct FrozenChild {
    pub pid: u32,
    parent: u32,
}

impl Drop for FrozenChild {
    fn drop(&mut self) {
        if parent_of(self.pid) == Some(self.parent) {
            if let Ok(pid) = libc::pid_t::try_from(self.pid) {
                // SAFETY: a signal to a child of the slurmctld this
                // harness started, checked just now.
                unsafe { libc::kill(pid, libc::SIGCONT) };
            }
        }
    }
}

/// The parent pid of process `pid` (`/proc/PID/stat`, after the command
/// name, which may hold anything).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// Looks at the children of every thread of process `parent` until one
/// runs a program with each of `words` among its arguments, and freezes
/// it; `None` after `within`.
fn watch_and_freeze(
    parent: u32,
    words: &[&str],
    within: std::time::Duration,
) -> Option<FrozenChild> {
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        let tasks = fs::read_dir(format!("/proc/{parent}/task")).ok()?;
        for task in tasks.flatten() {
            let children = fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children.split_whitespace() {
                let Ok(pid) = child.parse::<u32>() else {
                    continue;
                };
                // Before its exec the child still shows slurmctld's own
                // arguments: looked at again on the next round.
                let args = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let args: Vec<&[u8]> = args.split(|b| *b == 0).collect();
                let holds = |w: &&str| args.contains(&w.as_bytes());
                if !words.iter().all(holds) {
                    continue;
                }
                let signalled = libc::pid_t::try_from(pid)
                    // SAFETY: a signal to a child of the slurmctld this
                    // harness started.
                    .is_ok_and(|p| unsafe { libc::kill(p, libc::SIGSTOP) } == 0);
                if signalled {
                    return Some(FrozenChild { pid, parent });
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    None
}
