//! Describing, starting and driving a Slurm cluster: one node on loopback,
//! or several nodes, each a host of its own (see [`crate::hosts`]).
//!
//! Here: the [`Cluster`] itself, its nodes, its commands, starting it
//! (`boot`) and stopping it. Beside it, by concern: `spec` (what a test
//! can choose: [`ClusterSpec`]), `configs` (slurm.conf, gres.conf,
//! cgroup.conf, plugstack.conf and the plugins' files), `daemons`
//! (starting the daemons and waiting for them), `accounting` (the
//! database's cluster, account, users and QOS), `logs` (daemon logs and
//! the node programs' syslog), `jobs` (submitting jobs, waiting on them,
//! reading their state) and `faults` (what tests break on purpose).

mod accounting;
mod configs;
mod daemons;
mod faults;
mod jobs;
mod logs;
mod spec;

pub use faults::{FrozenChild, Stalled};
pub use jobs::JobInfo;
pub use spec::{
    cgroup_v2, fake_gpu_uuid, slurm_places_shares, slurm_release, ClusterSpec, GpuSpec, NodeSpec,
    Qos, SITE_MONITORING_CONF,
};

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::hosts::{Fabric, NodeHost};
use crate::process::{kill_marked, Daemon, MARKER};
use crate::time::{DAEMON_START, DAEMON_STOP, POLL};
use crate::Result;

/// Where Debian's slurm-wlm puts Slurm's own plugins.
pub const DEBIAN_PLUGIN_DIR: &str = "/usr/lib/x86_64-linux-gnu/slurm-wlm";

/// Where the Slurm under test keeps its own plugins:
/// `GPUSHARE_SLURM_PLUGIN_DIR` (`tests/release_suite.sh` sets it to
/// `PREFIX/lib/slurm` for a release built from source), else Debian's.
pub fn slurm_plugin_dir() -> String {
    std::env::var("GPUSHARE_SLURM_PLUGIN_DIR")
        .ok()
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| DEBIAN_PLUGIN_DIR.to_owned())
}
/// Whether the Slurm under test has its own job_submit plugin `name`
/// (`lua` is built only where Lua's headers were there: Debian's packages
/// have it, SchedMD's source builds here do not).
pub fn slurm_has_job_submit(name: &str) -> bool {
    Path::new(&slurm_plugin_dir())
        .join(format!("job_submit_{name}.so"))
        .exists()
}

/// Name of the node of a one-node cluster.
pub const NODE: &str = "node1";
/// Name of the only partition.
pub const PARTITION: &str = "gpu";
/// Accounting cluster name.
pub const CLUSTER_NAME: &str = "gpushare";

/// The `gpu_qos.conf` shipped as the example (and used by the example site).
pub const EXAMPLE_GPU_QOS_CONF: &str =
    include_str!("../../../plugins/job_submit_gpu_qos/gpu_qos.conf.example");

/// Free loopback ports, picked at start.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub mysql: u16,
    pub dbd: u16,
    pub slurmctld: u16,
    pub slurmd: u16,
}

impl Ports {
    fn pick() -> Result<Self> {
        // Hold all listeners until every port is chosen so they differ.
        let ls: Vec<TcpListener> = (0..4)
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<std::io::Result<_>>()
            .map_err(|e| format!("no free port: {e}"))?;
        let p = |i: usize| ls[i].local_addr().map(|a| a.port()).unwrap_or(0);
        Ok(Self {
            mysql: external_mysql_port().unwrap_or(p(0)),
            dbd: p(1),
            slurmctld: p(2),
            slurmd: p(3),
        })
    }
}

/// A MariaDB server already listening on this loopback port, for a release
/// whose own MariaDB its slurmdbd cannot use (`GPUSHARE_TEST_MYSQL_PORT`,
/// set by tests/release_suite.sh for Debian sid); each cluster then keeps
/// its accounting in a database of its own there.
fn external_mysql_port() -> Option<u16> {
    std::env::var("GPUSHARE_TEST_MYSQL_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
}

/// A running cluster. Dropping it stops everything it started.
#[derive(Debug)]
pub struct Cluster {
    pub spec: ClusterSpec,
    /// The cluster's directory (configs in `etc/`, logs in `log/`).
    pub dir: PathBuf,
    pub ports: Ports,
    daemons: BTreeMap<&'static str, Daemon>,
    /// The nodes: the spec's, or the one node of a one-node cluster.
    nodes: Vec<NodeSpec>,
    /// Each node's slurmd, by node name.
    slurmds: BTreeMap<String, Daemon>,
    /// The nodes' hosts (multi-node clusters), in the spec's order.
    hosts: Vec<NodeHost>,
    /// The lab's bridge the nodes hang on (multi-node clusters).
    fabric: Option<Fabric>,
    /// Where our plugins are copied under Slurm's file names.
    pub plugin_dir: PathBuf,
    /// Default directory for job output.
    pub jobs_dir: PathBuf,
}

static CLUSTER_SEQ: AtomicU32 = AtomicU32::new(0);

fn make_cluster_dir() -> Result<PathBuf> {
    let base = std::env::var_os("GPUSHARE_TEST_TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let n = CLUSTER_SEQ.fetch_add(1, Ordering::Relaxed);
    let dir = base.join(crate::process::cluster_dir_name(n));
    if dir.exists() {
        fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Job processes (and munge) must be able to traverse it.
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
    Ok(dir)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn mkdir(path: &Path, mode: u32) -> Result<()> {
    fs::create_dir_all(path).map_err(|e| format!("{}: {e}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn write(path: &Path, text: &str, mode: u32) -> Result<()> {
    fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Polls `check` every [`POLL`] until it returns `Some`, or fails after `timeout`.
pub fn wait_for<T>(
    what: &str,
    timeout: impl Into<Duration>,
    mut check: impl FnMut() -> Option<T>,
) -> Result<T> {
    let timeout = timeout.into();
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            return Err(format!("timed out after {:?} waiting for {what}", timeout));
        }
        sleep(POLL);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
        if std::env::var_os("GPUSHARE_KEEP_TEST_DIRS").is_none() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Directory holding the built plugin libraries (`target/<profile>`), or
/// `GPUSHARE_BUILD_DIR` (another release's build, installed packages).
pub fn build_dir() -> Result<PathBuf> {
    match std::env::var_os("GPUSHARE_BUILD_DIR") {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => harness_dir(),
    }
}

/// The harness's own build directory (`target/<profile>`), whatever
/// `GPUSHARE_BUILD_DIR` says: the directory of the running program (test
/// binaries live in `target/<profile>/deps`, other binaries one up).
pub fn harness_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = exe
        .parent()
        .ok_or_else(|| format!("cannot find the build directory from {}", exe.display()))?;
    Ok(if dir.ends_with("deps") {
        dir.parent().unwrap_or(dir)
    } else {
        dir
    }
    .to_path_buf())
}

impl Cluster {
    fn etc(&self) -> PathBuf {
        self.dir.join("etc")
    }

    /// Path of slurm.conf (what `SLURM_CONF` points at).
    pub fn slurm_conf(&self) -> PathBuf {
        self.etc().join("slurm.conf")
    }

    /// Device file of GPU `index`: the path in gres.conf, the same on
    /// every node (each node sees its own there).
    pub fn gpu_device(&self, index: u32) -> PathBuf {
        self.dir.join("dev").join(format!("nvidia{index}"))
    }

    /// The most GPUs any node has.
    fn total_gpus(&self) -> u32 {
        self.nodes
            .iter()
            .map(NodeSpec::gpu_count)
            .max()
            .unwrap_or(0)
    }

    /// Whether the nodes are hosts of their own.
    pub fn multi_node(&self) -> bool {
        !self.spec.nodes.is_empty()
    }

    /// Names of the nodes, in the spec's order.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// The processes named `name` that node `node`'s slurmd started (a
    /// prolog, an epilog, however many forks below it): this cluster's
    /// only, never those of another cluster on the machine.
    pub fn node_processes_named(&self, node: &str, name: &str) -> Vec<u32> {
        self.slurmds
            .get(node)
            .and_then(Daemon::pid)
            .map(|pid| crate::process::descendants_named(pid, name))
            .unwrap_or_default()
    }

    /// Where nodes and clients reach slurmctld.
    fn controller_addr(&self) -> String {
        self.fabric.as_ref().map_or_else(
            || "127.0.0.1".to_owned(),
            |f| f.controller_addr().to_string(),
        )
    }

    /// A node's own directory as the harness sees it: `nodes/<name>` (its
    /// `run/`, `dev/`, `log/`, `etc-slurm/`); the cluster's own directory
    /// on a one-node cluster.
    pub fn node_dir(&self, node: &str) -> PathBuf {
        if self.multi_node() {
            self.dir.join("nodes").join(node)
        } else {
            self.dir.clone()
        }
    }

    /// Node `node`'s address on the cluster's fabric (multi-node clusters).
    pub fn node_addr(&self, node: &str) -> Result<std::net::Ipv4Addr> {
        self.host(node).map(|h| h.addr)
    }

    fn host(&self, node: &str) -> Result<&NodeHost> {
        self.hosts
            .iter()
            .find(|h| h.name == node)
            .ok_or_else(|| format!("no node {node} in this cluster"))
    }

    /// `program` run as root on node `node` (in its namespaces on a
    /// multi-node cluster), with this cluster's `SLURM_CONF`.
    pub fn on_node(&self, node: &str, program: &str) -> Command {
        let mut cmd = match self.host(node) {
            Ok(h) => h.command(program),
            Err(_) => Command::new(program),
        };
        self.slurm_env(&mut cmd);
        cmd
    }

    /// Runs the node timer's command (`gpu-mps metrics --write`) as root,
    /// on `node` or, with none, where the cluster's one node runs: what it
    /// said on stderr; an error with it unless it exits 0.
    pub fn node_timer(&self, node: Option<&str>, conf: &Path, kernel_log: &Path) -> Result<String> {
        let bin = build_dir()?.join("gpu-mps");
        let (bin, log, conf) = (
            bin.to_string_lossy(),
            kernel_log.to_string_lossy(),
            conf.to_string_lossy(),
        );
        let args = ["metrics", "--write", "--kernel-log", &log, "--conf", &conf];
        let out = match node {
            Some(node) => self.run_on(node, &bin, &args)?,
            // The node by name: the name prologs record in the host's
            // /run/gpushare is the last cluster's on this host (lanes run
            // side by side), where a real node has one slurmd.
            None => self.run(&bin, &[&args[..], &["--node", NODE]].concat())?,
        };
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            return Err(format!("gpu-mps {args:?}: {said}"));
        }
        Ok(said)
    }

    /// Runs `program ARGS` on node `node`, as [`Self::on_node`].
    pub fn run_on(&self, node: &str, program: &str, args: &[&str]) -> Result<Output> {
        self.on_node(node, program)
            .args(args)
            .output()
            .map_err(|e| format!("{program} on {node}: {e}"))
    }

    /// A command for this cluster: `SLURM_CONF` set, the caller's Slurm
    /// variables removed, marked so that `Drop` reaps what it leaves.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        self.slurm_env(&mut cmd);
        cmd
    }

    /// `SLURM_CONF` and the marker set, the caller's Slurm variables removed.
    fn slurm_env(&self, cmd: &mut Command) {
        cmd.env("SLURM_CONF", self.slurm_conf())
            .env(MARKER, &self.dir);
        // The caller's Slurm environment (a test run inside a job) must not leak in.
        for (k, _) in std::env::vars_os() {
            if let Some(k) = k.to_str() {
                if k.starts_with("SLURM_") && k != "SLURM_CONF"
                    || k.starts_with("SBATCH_")
                    || k.starts_with("SRUN_")
                {
                    cmd.env_remove(k);
                }
            }
        }
    }

    /// Runs a Slurm command against this cluster.
    pub fn run(&self, program: &str, args: &[&str]) -> Result<Output> {
        self.command(program)
            .args(args)
            .output()
            .map_err(|e| format!("{program}: {e}"))
    }

    /// Every node Slurm drained or is draining, once each, with the
    /// reason it gives (`sinfo %E`, e.g. `Duplicate jobid`).
    pub fn drained_nodes(&self) -> Result<Vec<(String, String)>> {
        let out = self.run_ok("sinfo", &["-h", "-N", "-o", "%N|%T|%E"])?;
        let mut drained: Vec<(String, String)> = Vec::new();
        for line in out.lines() {
            let mut f = line.splitn(3, '|');
            let (Some(name), Some(state), reason) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            if state.starts_with("drain") && !drained.iter().any(|(n, _)| n == name) {
                drained.push((name.to_owned(), reason.unwrap_or("").trim().to_owned()));
            }
        }
        Ok(drained)
    }

    /// Resumes every node Slurm drained (as a failed prolog drains its
    /// node) and returns a line per node: `NAME (REASON)`. A suite calls
    /// it after a failed test, so the tests after it start on a usable
    /// node and fail, if they do, for their own reasons.
    pub fn resume_drained(&self) -> Result<Vec<String>> {
        let mut resumed = Vec::new();
        for (name, reason) in self.drained_nodes()? {
            self.run_ok(
                "scontrol",
                &["update", &format!("nodename={name}"), "state=resume"],
            )?;
            resumed.push(format!("{name} ({reason})"));
        }
        Ok(resumed)
    }

    /// Runs a Slurm command and fails unless it exits 0; returns stdout.
    pub fn run_ok(&self, program: &str, args: &[&str]) -> Result<String> {
        let out = self.run(program, args)?;
        if !out.status.success() {
            return Err(format!(
                "`{program} {}` failed ({}): {}{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// How a person reaches this cluster from another shell (as root): it
    /// lives in this process's network namespace, and each node of a
    /// multi-node cluster in namespaces of its own.
    pub fn enter_hint(&self) -> String {
        let mut out = format!(
            "nsenter --net=/proc/{pid}/ns/net env SLURM_CONF={conf} bash    # sinfo, squeue, sbatch ...",
            pid = std::process::id(),
            conf = self.slurm_conf().display()
        );
        for h in &self.hosts {
            let _ = write!(
                out,
                "\nnsenter -t {pid} --net --uts --mount env SLURM_CONF={conf} bash    # a shell on {name}",
                pid = h.pid().unwrap_or(0),
                conf = self.slurm_conf().display(),
                name = h.name
            );
        }
        out
    }

    /// Makes the nodes' hosts and the bridge between them and the lab.
    fn start_hosts(&mut self) -> Result<()> {
        let fabric = Fabric::create_next()?;
        for (i, n) in self.spec.nodes.iter().enumerate() {
            let host = NodeHost::start(&n.name, i, &fabric, &self.dir)?;
            for (name, text) in &n.local_files {
                write(
                    &host.dir.join("etc-slurm").join(name),
                    &self.expand(text),
                    0o644,
                )?;
            }
            self.hosts.push(host);
        }
        self.fabric = Some(fabric);
        Ok(())
    }

    fn boot(&mut self) -> Result<()> {
        for (d, mode) in [
            ("etc", 0o755),
            ("log", 0o755),
            ("dev", 0o755),
            ("jobs", 0o777),
            ("plugins", 0o755),
            ("state", 0o700),
            ("spool", 0o755),
            // Like /run on a node: gpushare keeps its state below it.
            ("run", 0o755),
        ] {
            mkdir(&self.dir.join(d), mode)?;
        }
        // slurmctld and slurmdbd create their log and pid files as root
        // and hand them over; the state directory must be the user's.
        if let Some((uid, gid)) = self.slurm_user_ids()? {
            std::os::unix::fs::chown(self.dir.join("state"), Some(uid), Some(gid))
                .map_err(|e| format!("chown state: {e}"))?;
        }
        if self.multi_node() {
            self.start_hosts()?;
        }
        self.make_gpu_devices()?;
        self.start_syslogs()?;
        self.install_plugins()?;
        self.write_configs()?;
        self.start_munge()?;
        if self.spec.accounting {
            if external_mysql_port().is_none() {
                self.start_mysql()?;
            }
            self.start_slurmdbd()?;
            self.run_ok("sacctmgr", &["-i", "add", "cluster", CLUSTER_NAME])?;
        }
        self.start_slurmctld()?;
        if self.spec.accounting {
            self.setup_accounting()?;
        }
        for node in self.node_names() {
            self.start_slurmd_on(&node)?;
        }
        self.wait_node_idle(DAEMON_START)
    }

    /// Stops and reaps every process the cluster started.
    pub fn stop(&mut self) {
        if self.daemons.contains_key("slurmctld") {
            // Every user's jobs, not only root's: a bench runs thousands as
            // test users, and their steps must end with the cluster.
            let mut users = vec!["root".to_owned()];
            if let Ok(out) = self.run("squeue", &["-h", "-o", "%u"]) {
                for u in String::from_utf8_lossy(&out.stdout).lines() {
                    if !users.iter().any(|k| k == u.trim()) {
                        users.push(u.trim().to_owned());
                    }
                }
            }
            for u in &users {
                let _ = self.run("scancel", &["--full", "-u", u]);
            }
        }
        for (_, mut d) in std::mem::take(&mut self.slurmds) {
            d.stop(DAEMON_STOP.into());
        }
        for name in ["slurmctld", "slurmdbd", "mariadb", "munged"] {
            if let Some(mut d) = self.daemons.remove(name) {
                d.stop(DAEMON_STOP.into());
            }
        }
        let left = kill_marked(&self.dir, DAEMON_STOP.into());
        if left > 0 {
            eprintln!(
                "testcluster: {left} processes of {} would not die",
                self.dir.display()
            );
        }
        self.hosts.clear();
        self.fabric = None;
        // What the node programs keep on the host for this cluster's
        // configuration and state directories (a node of a multi-node
        // cluster has a /run of its own).
        forget_node_records(&self.dir);
    }
}

/// The records of the node programs kept across reboots
/// (`/var/lib/gpushare`: `kept-of-<dir>`, `disabled-of-<conf>`).
const KEPT_PREFIXES: [&str; 2] = ["kept-of", "disabled-of"];

/// Removes what the node programs keep on this host for paths under `dir`
/// (a test cluster's, hw-check's or a bench's directory): the pointers to
/// ledgers in /run/gpushare (`ledger-of-<conf>` and its lock) and the
/// records kept across reboots in /var/lib/gpushare. They outlive the
/// directory otherwise, one set per run.
pub fn forget_node_records(dir: &Path) {
    forget_under(
        Path::new(gpushare::mps::in_force::NODE_RECORDS_DIR),
        &["ledger-of"],
        dir,
    );
    forget_under(
        Path::new(gpushare::mps::kept::KEPT_ROOT),
        &KEPT_PREFIXES,
        dir,
    );
}

/// Removes the entries `root` holds for paths under `dir`: one of
/// `prefixes`, then the path as [`gpushare::mps::kept::kept_dir`] spells
/// it (every node record is named so).
fn forget_under(root: &Path, prefixes: &[&str], dir: &Path) {
    let spelled = gpushare::mps::kept::kept_dir(Path::new(""), dir);
    let Some(ours) = spelled
        .to_str()
        .and_then(|n| n.strip_prefix("kept-of"))
        .map(|d| format!("{d}-"))
    else {
        return;
    };
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let mine = prefixes.iter().any(|p| {
            name.strip_prefix(p)
                .is_some_and(|rest| rest.starts_with(&ours))
        });
        if mine {
            let path = entry.path();
            let _ = fs::remove_dir_all(&path).or_else(|_| fs::remove_file(&path));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_cluster_forgets_its_kept_records_and_no_other() {
        let root = tempfile::tempdir().unwrap();
        let dir = Path::new("/tmp/gpushare-5-0");
        let kept =
            |d: &str| gpushare::mps::kept::kept_dir(root.path(), &Path::new(d).join("run/gpu-mps"));
        for d in [
            "/tmp/gpushare-5-0",
            "/tmp/gpushare-5-01",
            "/tmp/gpushare-6-0",
        ] {
            fs::create_dir_all(kept(d)).unwrap();
        }
        let disabled = root
            .path()
            .join("disabled-of-tmp-gpushare%2d5%2d0-etc-gpu_mps.conf");
        fs::write(&disabled, "").unwrap();
        fs::write(
            root.path().join("gpu_mps.conf-path"),
            "/etc/slurm/gpu_mps.conf\n",
        )
        .unwrap();
        forget_under(root.path(), &KEPT_PREFIXES, dir);
        let mut left: Vec<String> = fs::read_dir(root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "gpu_mps.conf-path",
                "kept-of-tmp-gpushare%2d5%2d01-run-gpu%2dmps",
                "kept-of-tmp-gpushare%2d6%2d0-run-gpu%2dmps"
            ]
        );
    }
}
