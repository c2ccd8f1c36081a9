//! The daemons' logs and the node programs' syslog.

use super::Cluster;
use crate::time::SOCKET_POLL;
use crate::Result;
use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;

/// Receives datagrams on `path` and appends them to `out`, for as long as
/// the socket file exists.
fn start_syslog(path: PathBuf, out: PathBuf) -> Result<()> {
    let socket = std::os::unix::net::UnixDatagram::bind(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    socket
        .set_read_timeout(Some(SOCKET_POLL))
        .map_err(|e| e.to_string())?;
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 16384];
        while path.exists() {
            if let Ok(n) = socket.recv(&mut buf) {
                let line = String::from_utf8_lossy(buf.get(..n).unwrap_or_default()).into_owned();
                if let Ok(mut f) = fs::OpenOptions::new().create(true).append(true).open(&out) {
                    let _ = std::io::Write::write_all(
                        &mut f,
                        format!("{}\n", line.trim_end()).as_bytes(),
                    );
                }
            }
        }
    });
    Ok(())
}

impl Cluster {
    pub(super) fn log_dir(&self) -> PathBuf {
        self.dir.join("log")
    }

    /// Path of a daemon's log file (`slurmctld`, `slurmd`, `slurmdbd`...).
    pub fn log_path(&self, daemon: &str) -> PathBuf {
        self.log_dir().join(format!("{daemon}.log"))
    }

    /// Contents of a daemon's log; on a multi-node cluster, a node
    /// daemon's (`slurmd`) is every node's log, each behind a header line.
    pub fn log(&self, daemon: &str) -> String {
        if !self.multi_node() || daemon != "slurmd" {
            return fs::read_to_string(self.log_path(daemon)).unwrap_or_default();
        }
        let mut out = String::new();
        for h in &self.hosts {
            let _ = writeln!(out, "----- {} -----", h.name);
            out.push_str(&self.node_log(&h.name, daemon));
        }
        out
    }

    /// A log of node `node`'s own (`slurmd`, `syslog`).
    pub fn node_log(&self, node: &str, name: &str) -> String {
        let dir = self.node_dir(node).join("log");
        let file = if name == "syslog" {
            dir.join("syslog")
        } else {
            dir.join(format!("{name}.log"))
        };
        fs::read_to_string(file).unwrap_or_default()
    }

    /// The last `lines` lines of every log, for failure reports.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        let Ok(entries) = fs::read_dir(self.log_dir()) else {
            return out;
        };
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        for h in &self.hosts {
            if let Ok(entries) = fs::read_dir(h.dir.join("log")) {
                paths.extend(entries.filter_map(|e| e.ok().map(|e| e.path())));
            }
        }
        paths.retain(|p| p.is_file() && p.extension().is_none_or(|e| e != "sock"));
        paths.sort();
        for p in paths {
            let text = fs::read_to_string(&p).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            let tail = &all[all.len().saturating_sub(lines)..];
            let _ = writeln!(
                out,
                "----- {} (last {} lines) -----",
                p.display(),
                tail.len()
            );
            for l in tail {
                let _ = writeln!(out, "{l}");
            }
        }
        out
    }

    /// Where the node programs' syslog lines arrive (gpu_mps.conf's
    /// `SyslogSocket=`), like /dev/log on a node.
    pub fn syslog_socket(&self) -> PathBuf {
        self.log_dir().join("syslog.sock")
    }

    /// Every syslog line received so far, one per line, as syslog keeps
    /// them; on a multi-node cluster every node's, each line behind the
    /// node's name (`gpu01: ...`), as a central syslog writes them.
    pub fn syslog(&self) -> String {
        if !self.multi_node() {
            return fs::read_to_string(self.log_dir().join("syslog")).unwrap_or_default();
        }
        let mut out = String::new();
        for node in self.node_names() {
            for line in self.node_log(&node, "syslog").lines() {
                let _ = writeln!(out, "{node}: {line}");
            }
        }
        out
    }

    /// A syslog receiver for every node (each node's `log/syslog.sock`).
    pub(super) fn start_syslogs(&self) -> Result<()> {
        if !self.multi_node() {
            return start_syslog(self.syslog_socket(), self.log_dir().join("syslog"));
        }
        for node in self.node_names() {
            let log = self.node_dir(&node).join("log");
            start_syslog(log.join("syslog.sock"), log.join("syslog"))?;
        }
        Ok(())
    }
}
