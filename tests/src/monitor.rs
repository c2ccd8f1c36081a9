//! Prometheus around a multi-node test cluster, with the tools Debian
//! ships: one node_exporter per node (in the node's namespaces, on its
//! address, reading its textfile directory) and one for the controller
//! side (in the lab, reading the cluster's), and a Prometheus server on
//! loopback that scrapes them every second. Everything is stopped on drop.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use gpushare::mps::ledger::{LedgerState, LOCK_WHAT};
use gpushare::mps::lock_wait::{self, LockWait, Mode};

use crate::cluster::{wait_for, Cluster};
use crate::hosts::TEXTFILE_DIR;
use crate::process::Daemon;
use crate::time::{DAEMON_START, DAEMON_STOP};
use crate::Result;

/// node_exporter's port on each node.
pub const NODE_EXPORTER_PORT: u16 = 9100;

/// Node `node`'s share ledger (the harness's `StateDir`, `run/gpu-mps`),
/// empty where it cannot be read.
pub fn node_ledger(c: &Cluster, node: &str) -> LedgerState {
    let path = c.node_dir(node).join("run/gpu-mps/state");
    let text = fs::read_to_string(&path).unwrap_or_default();
    LedgerState::parse(&text, &path).unwrap_or_default()
}

/// Checks `node`'s DCGM job mapping (`DCGMJobMappingDir`, one file per GPU
/// named by its device minor, which is its index in the harness; the
/// directory is `run/dcgm-jobs` of the node) line by line
/// against its ledger: each GPU's file lists exactly the jobs on it, one
/// per line in job order, and is empty (or not yet written) when none is.
/// Both are read under a shared hold of the ledger's lock, as a
/// transaction leaves them: a transaction publishes the mapping before it
/// writes the state, so an unlocked reader beside a running prolog or
/// epilog can see the one ahead of the other.
pub fn mapping_follows_ledger(c: &Cluster, node: &str) -> Result<()> {
    let lock = c.node_dir(node).join("run/gpu-mps/lock");
    let _held = if lock.exists() {
        let wait = LockWait::each(Duration::from_secs(30));
        Some(
            lock_wait::lock(&lock, LOCK_WHAT, Mode::Shared, wait)
                .map_err(|e| format!("{node}'s ledger lock: {e}"))?,
        )
    } else {
        None
    };
    let state = node_ledger(c, node);
    let dir = c.node_dir(node).join("run/dcgm-jobs");
    let mut per_gpu: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for s in state.shares() {
        per_gpu.entry(s.gpu).or_default().push(s.job);
    }
    for w in state.whole_holders() {
        for &g in &w.gpus {
            per_gpu.entry(g).or_default().push(w.job);
        }
    }
    let files: Vec<u32> = fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    for gpu in files.iter().chain(per_gpu.keys()) {
        let mut jobs = per_gpu.get(gpu).cloned().unwrap_or_default();
        jobs.sort_unstable();
        let want: String = jobs.iter().map(|j| format!("{j}\n")).collect();
        let have = fs::read_to_string(dir.join(gpu.to_string())).unwrap_or_default();
        if have != want {
            return Err(format!(
                "{node}'s DCGM mapping for GPU {gpu} is {have:?}, its ledger says {want:?}"
            ));
        }
    }
    Ok(())
}

/// One sample of a query's result: its labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// The exporters and the server.
#[derive(Debug)]
pub struct Monitoring {
    daemons: Vec<Daemon>,
    /// The server's URL (`http://127.0.0.1:PORT`).
    pub url: String,
    pub dir: PathBuf,
}

fn free_port() -> Result<u16> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

impl Monitoring {
    /// Starts the exporters and the server, and waits until the server has
    /// scraped every target once.
    pub fn start(c: &Cluster) -> Result<Self> {
        let dir = c.dir.join("prometheus");
        fs::create_dir_all(dir.join("data")).map_err(|e| format!("{}: {e}", dir.display()))?;
        let textfile = c.dir.join(TEXTFILE_DIR);
        let exporter_args = |listen: &str| {
            vec![
                format!("--web.listen-address={listen}"),
                "--collector.disable-defaults".to_owned(),
                "--collector.textfile".to_owned(),
                format!("--collector.textfile.directory={}", textfile.display()),
            ]
        };
        let log = |name: &str| c.dir.join("log").join(format!("{name}.log"));
        let mut daemons = Vec::new();
        let mut targets = Vec::new();
        // Each node's exporter in its namespaces on its address, then the
        // controller's in the lab on loopback.
        let mut hosts: Vec<(String, Command, String)> = Vec::new();
        for node in c.node_names() {
            let listen = format!("{}:{NODE_EXPORTER_PORT}", c.node_addr(&node)?);
            hosts.push((
                node.clone(),
                c.on_node(&node, "prometheus-node-exporter"),
                listen,
            ));
        }
        let listen = format!("127.0.0.1:{}", free_port()?);
        hosts.push((
            "controller".to_owned(),
            Command::new("prometheus-node-exporter"),
            listen,
        ));
        for (host, mut cmd, listen) in hosts {
            cmd.args(exporter_args(&listen));
            let exporter = Daemon::spawn(
                "node_exporter",
                cmd,
                &c.dir,
                log(&format!("node_exporter-{host}")),
            )
            .map_err(|e| format!("prometheus-node-exporter for {host}: {e}"))?;
            daemons.push(exporter);
            targets.push((host, listen));
        }
        let mut config = String::from(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: node\n    static_configs:\n",
        );
        for (node, target) in &targets {
            let _ = writeln!(
                config,
                "      - targets: ['{target}']\n        labels:\n          node: {node}"
            );
        }
        let config_file = dir.join("prometheus.yml");
        fs::write(&config_file, &config).map_err(|e| format!("{}: {e}", config_file.display()))?;
        let port = free_port()?;
        let mut cmd = Command::new("prometheus");
        cmd.arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"));
        daemons.push(
            Daemon::spawn("prometheus", cmd, &c.dir, log("prometheus"))
                .map_err(|e| format!("prometheus: {e}"))?,
        );
        let me = Self {
            daemons,
            url: format!("http://127.0.0.1:{port}"),
            dir,
        };
        let want = targets.len();
        wait_for("Prometheus to scrape every exporter", DAEMON_START, || {
            let up = me.query("sum(up)").ok()?;
            (up.first()?.value as usize == want).then_some(())
        })
        .map_err(|e| {
            let logs: Vec<String> = ["prometheus", "node_exporter-controller"]
                .iter()
                .map(|n| fs::read_to_string(log(n)).unwrap_or_default())
                .collect();
            format!("{e}: {}", logs.join("\n"))
        })?;
        Ok(me)
    }

    /// An instant query, through `promtool query instant` (its JSON form).
    pub fn query(&self, expr: &str) -> Result<Vec<Sample>> {
        let out = Command::new("promtool")
            .args(["query", "instant", "-o", "json", &self.url, expr])
            .output()
            .map_err(|e| format!("promtool: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "promtool query instant {expr:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let json: serde_json::Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("promtool printed no JSON for {expr:?}: {e}"))?;
        let items = json.as_array().cloned().unwrap_or_default();
        Ok(items
            .iter()
            .map(|item| Sample {
                labels: item["metric"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                            .collect()
                    })
                    .unwrap_or_default(),
                value: item["value"][1]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(f64::NAN),
            })
            .collect())
    }

    /// Waits until `expr` gives one sample of value `want`; the error shows
    /// the last result.
    pub fn wait_value(&self, expr: &str, want: f64, timeout: impl Into<Duration>) -> Result<()> {
        let mut last = String::new();
        wait_for(&format!("{expr} to be {want}"), timeout, || {
            let got = self.query(expr);
            last = format!("{got:?}");
            let got = got.ok()?;
            (got.len() == 1 && got[0].value == want).then_some(())
        })
        .map_err(|e| format!("{e}; last: {last}"))
    }

    /// Stops the server and the exporters.
    pub fn stop(&mut self) {
        for d in self.daemons.iter_mut().rev() {
            d.stop(DAEMON_STOP.into());
        }
    }
}

impl Drop for Monitoring {
    fn drop(&mut self) {
        self.stop();
    }
}
