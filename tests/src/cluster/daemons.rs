//! Starting the cluster's daemons and waiting until they serve.

use std::collections::BTreeMap;
use std::fs;
use std::net::TcpStream;
use std::os::unix::fs::{chown, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::{cgroup_v2, mkdir, Cluster};
use crate::process::Daemon;
use crate::time::{DAEMON_START, POLL};
use crate::Result;

fn user_ids(name: &str) -> Result<(u32, u32)> {
    let out = Command::new("id")
        .arg("-u")
        .arg(name)
        .output()
        .map_err(|e| e.to_string())?;
    let uid = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|_| format!("no user {name}"))?;
    let out = Command::new("id")
        .arg("-g")
        .arg(name)
        .output()
        .map_err(|e| e.to_string())?;
    let gid = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|_| format!("no group of {name}"))?;
    Ok((uid, gid))
}

fn port_open(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

impl Cluster {
    fn spawn(&mut self, name: &'static str, cmd: Command) -> Result<()> {
        let log = self.log_dir().join(format!("{name}.stdio.log"));
        let daemon = Daemon::spawn(name, cmd, &self.dir, log)
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        self.daemons.insert(name, daemon);
        Ok(())
    }

    /// Waits for `check`, failing early (with its log) if the daemon exits.
    fn wait_daemon(
        &mut self,
        name: &'static str,
        timeout: impl Into<Duration>,
        mut check: impl FnMut(&Self) -> bool,
    ) -> Result<()> {
        let timeout = timeout.into();
        let deadline = Instant::now() + timeout;
        loop {
            if check(self) {
                return Ok(());
            }
            if let Some(status) = self.daemons.get_mut(name).and_then(Daemon::exited) {
                return Err(format!("{name} exited during startup ({status})"));
            }
            if Instant::now() >= deadline {
                return Err(format!("{name} not ready after {timeout:?}"));
            }
            sleep(POLL);
        }
    }

    pub(super) fn start_munge(&mut self) -> Result<()> {
        let dir = self.dir.join("munge");
        // The key's directory; munged_command makes it the socket's too.
        mkdir(&dir, 0o755)?;
        let (uid, gid) = user_ids("munge")?;
        let key = dir.join("munge.key");
        // A fixed-size random key, as mungekey would make.
        let mut bytes = vec![0u8; 1024];
        fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
            .map_err(|e| format!("/dev/urandom: {e}"))?;
        fs::write(&key, &bytes).map_err(|e| e.to_string())?;
        fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).map_err(|e| e.to_string())?;
        chown(&key, Some(uid), Some(gid)).map_err(|e| format!("chown {}: {e}", key.display()))?;
        let log = self.log_dir().join("munged.log");
        let cmd = crate::hosts::munged_command(&dir, &key, &log, (uid, gid))?;
        self.spawn("munged", cmd)?;
        let sock = dir.join("munge.sock");
        self.wait_daemon("munged", DAEMON_START, |_| sock.exists())?;
        // Every node of a multi-node cluster its own, with the same key.
        let cluster = self.dir.clone();
        for host in &mut self.hosts {
            host.start_munged(&key, (uid, gid), &cluster)?;
        }
        Ok(())
    }

    pub(super) fn start_mysql(&mut self) -> Result<()> {
        let data = self.dir.join("mysql");
        mkdir(&data, 0o700)?;
        // Temporary tables in a directory of this cluster's own, not in the
        // /tmp every other lane's MariaDB shares: a bootstrap there once
        // found its own temporary table gone ("Error on delete of
        // '/tmp/#sql-temptable-...MAI'") while other lanes ran theirs.
        let tmp = self.dir.join("mysql-tmp");
        mkdir(&tmp, 0o700)?;
        let install = Command::new("mariadb-install-db")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .arg("--user=root")
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db")
            .arg("--skip-name-resolve")
            .output()
            .map_err(|e| format!("mariadb-install-db: {e}"))?;
        if !install.status.success() {
            return Err(format!(
                "mariadb-install-db failed: {}{}",
                String::from_utf8_lossy(&install.stdout),
                String::from_utf8_lossy(&install.stderr)
            ));
        }
        let mut cmd = Command::new("mariadbd");
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .arg(format!("--socket={}", data.join("mysqld.sock").display()))
            .arg(format!("--pid-file={}", data.join("mysqld.pid").display()))
            .arg(format!(
                "--log-error={}",
                self.log_dir().join("mariadb.log").display()
            ))
            .arg(format!("--port={}", self.ports.mysql))
            .arg("--bind-address=127.0.0.1")
            .arg("--user=root")
            .arg("--skip-name-resolve")
            .arg("--skip-log-bin")
            // A throwaway database: durability is not wanted, speed is.
            .arg("--innodb-flush-log-at-trx-commit=0")
            .arg("--innodb-doublewrite=0")
            .arg("--innodb-buffer-pool-size=64M")
            .arg("--innodb-log-file-size=16M")
            .arg("--innodb-lock-wait-timeout=900");
        self.spawn("mariadb", cmd)?;
        let port = self.ports.mysql;
        self.wait_daemon("mariadb", DAEMON_START, |_| port_open(port))
    }

    pub(super) fn start_slurmdbd(&mut self) -> Result<()> {
        let mut cmd = self.command("slurmdbd");
        cmd.arg("-D");
        self.spawn("slurmdbd", cmd)?;
        let port = self.ports.dbd;
        self.wait_daemon("slurmdbd", DAEMON_START, |_| port_open(port))
    }

    pub(super) fn start_slurmctld(&mut self) -> Result<()> {
        let mut cmd = self.command("slurmctld");
        cmd.args(["-D", "-i"]);
        self.spawn("slurmctld", cmd)?;
        self.wait_daemon("slurmctld", DAEMON_START, |c| {
            c.run("scontrol", &["ping"])
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("is UP"))
        })
    }

    /// Starts node `node`'s slurmd (on its own host on a multi-node
    /// cluster; configless nodes ask slurmctld for their configuration).
    pub(super) fn start_slurmd_on(&mut self, node: &str) -> Result<()> {
        let configless = self
            .nodes
            .iter()
            .find(|n| n.name == node)
            .ok_or_else(|| format!("no node {node} in this cluster"))?
            .configless;
        let mut cmd = self.on_node(node, "slurmd");
        cmd.args(["-D", "-N", node]);
        if configless {
            cmd.env_remove("SLURM_CONF")
                .arg("--conf-server")
                .arg(format!(
                    "{}:{}",
                    self.controller_addr(),
                    self.ports.slurmctld
                ));
        }
        if cgroup_v2() {
            cmd.env("LD_PRELOAD", self.unified_only_shim()?);
        }
        let log = self.node_dir(node).join("log").join("slurmd.stdio.log");
        let daemon = Daemon::spawn("slurmd", cmd, &self.dir, log)
            .map_err(|e| format!("cannot start slurmd on {node}: {e}"))?;
        self.slurmds.insert(node.to_owned(), daemon);
        Ok(())
    }

    /// Builds tests/cgroup2/unified_only.c for slurmd (see there why this
    /// machine needs it for cgroup v2) and returns the library's path.
    fn unified_only_shim(&self) -> Result<PathBuf> {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("cgroup2/unified_only.c");
        let lib = self.dir.join("unified_only.so");
        let out = Command::new("cc")
            .args(["-shared", "-fPIC", "-Wall", "-o"])
            .arg(&lib)
            .arg(&source)
            .arg("-ldl")
            .output()
            .map_err(|e| format!("cc: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cc {}: {}",
                source.display(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(lib)
    }

    /// Waits until every node reports `idle` (or `mixed`/`allocated`),
    /// failing early with its log if a slurmd exits.
    pub fn wait_node_idle(&mut self, timeout: impl Into<Duration>) -> Result<()> {
        let names = self.node_names();
        self.wait_nodes(&names, timeout)
    }

    /// Waits until each of `nodes` reports `idle`, `mixed` or `allocated`.
    pub fn wait_nodes(&mut self, nodes: &[String], timeout: impl Into<Duration>) -> Result<()> {
        let timeout = timeout.into();
        let deadline = Instant::now() + timeout;
        loop {
            let up = self.node_states().is_ok_and(|states| {
                nodes.iter().all(|n| {
                    states.get(n).is_some_and(|s| {
                        let s = s.trim_end_matches(['*', '~', '#', '!', '%', '$', '@', '^', '-']);
                        s == "idle" || s == "mixed" || s == "allocated"
                    })
                })
            });
            if up {
                return Ok(());
            }
            for n in nodes {
                if let Some(status) = self.slurmds.get_mut(n).and_then(Daemon::exited) {
                    return Err(format!("slurmd on {n} exited ({status})"));
                }
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "nodes {nodes:?} not up after {timeout:?}: {:?}",
                    self.node_states()
                ));
            }
            sleep(POLL);
        }
    }

    /// Each node's state as `sinfo` prints it (`idle`, `mixed`, `down*`...).
    pub fn node_states(&self) -> Result<BTreeMap<String, String>> {
        let out = self.run_ok("sinfo", &["-h", "-N", "-o", "%N %T"])?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(n, s)| (n.to_owned(), s.trim().to_owned()))
            .collect())
    }
}
