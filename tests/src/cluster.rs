//! Describing, starting and driving a Slurm cluster: one node on loopback,
//! or several nodes, each a host of its own (see [`crate::hosts`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{chown, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::hosts::{enter_lab, Fabric, NodeHost, TEXTFILE_DIR};
use crate::process::{kill_marked, kill_orphans, Daemon, MARKER};
use crate::Result;

/// Where Debian's slurm-wlm puts Slurm's own plugins.
pub const SLURM_PLUGIN_DIR: &str = "/usr/lib/x86_64-linux-gnu/slurm-wlm";
/// Name of the node of a one-node cluster.
pub const NODE: &str = "node1";
/// Name of the only partition.
pub const PARTITION: &str = "gpu";
/// Accounting cluster name.
pub const CLUSTER_NAME: &str = "gpushare";

/// The `gpu_qos.conf` shipped as the example (and used by the example site).
pub const EXAMPLE_GPU_QOS_CONF: &str =
    include_str!("../../plugins/job_submit_gpu_qos/gpu_qos.conf.example");

/// GPUs of one type on the node (fake char devices `c 195 N`).
#[derive(Debug, Clone)]
pub struct GpuSpec {
    pub gpu_type: String,
    pub count: u32,
}

/// One node of a multi-node cluster: a host of its own.
#[derive(Debug, Clone, Default)]
pub struct NodeSpec {
    /// Node name and hostname (`gpu01`).
    pub name: String,
    /// Its GPUs, in device order (`/dev/nvidia0` ... on the node).
    pub gpus: Vec<GpuSpec>,
    /// `Name=mps Count=N` on the node, as [`ClusterSpec::mps_count`].
    pub mps_count: Option<u32>,
    /// The count split over per-GPU lines, as [`ClusterSpec::mps_per_gpu`].
    pub mps_per_gpu: bool,
    /// Files of the node's own `/etc/slurm` (name, text with `{cluster}`...):
    /// a node's local `gpu_mps.conf`.
    pub local_files: Vec<(String, String)>,
    /// slurmd runs configless (`--conf-server`): it gets its configuration
    /// from slurmctld into `/run/slurm/conf`, not from the cluster's `etc/`.
    pub configless: bool,
}

impl NodeSpec {
    pub fn new(name: &str, gpu_type: &str, count: u32) -> Self {
        Self {
            name: name.to_owned(),
            gpus: vec![GpuSpec {
                gpu_type: gpu_type.to_owned(),
                count,
            }],
            ..Self::default()
        }
    }

    fn gpu_count(&self) -> u32 {
        self.gpus.iter().map(|g| g.count).sum()
    }
}

/// A QOS in the accounting database.
#[derive(Debug, Clone, Default)]
pub struct Qos {
    pub name: String,
    /// `GrpTRES`, e.g. `gres/gpu:a40=4`.
    pub grp_tres: Option<String>,
    /// QOS this one may preempt.
    pub preempt: Vec<String>,
    /// `PreemptMode` of the QOS (e.g. `requeue`).
    pub preempt_mode: Option<String>,
    /// `GraceTime` in seconds.
    pub grace_time: Option<u32>,
    /// `Priority` of the QOS.
    pub priority: Option<u32>,
    /// `UsageFactor` (0 = free).
    pub usage_factor: Option<f64>,
    /// `Flags` (e.g. `DenyOnLimit`).
    pub flags: Option<String>,
}

impl Qos {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            ..Self::default()
        }
    }
}

/// Everything a test can choose about its cluster.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// Whole GPUs on the node, in device order (one-node clusters).
    pub gpus: Vec<GpuSpec>,
    /// The nodes of a multi-node cluster, each a host of its own; empty: one
    /// node ([`NODE`]) on loopback, from `gpus`, `mps_count` and `mps_per_gpu`.
    pub nodes: Vec<NodeSpec>,
    /// `Name=mps Count=N` on the node (needs gpus).
    pub mps_count: Option<u32>,
    /// The count split over one `Name=mps ... File=<gpu> Flags=all_sharing`
    /// line per GPU of the first type (the MPS pool), with `LL_SHARED_GRES`: Slurm (23.11 and later) places
    /// shares itself. Otherwise one node-wide `Count=` line.
    pub mps_per_gpu: bool,
    /// Start MariaDB + slurmdbd and enforce associations/limits/QOS.
    pub accounting: bool,
    /// QOS created before the node starts; the test user may use all.
    pub qos: Vec<Qos>,
    /// `JobSubmitPlugins=` entries (ours are copied under Slurm's file names).
    pub job_submit_plugins: Vec<String>,
    /// Files to put next to slurm.conf (`gpu_qos.conf`, `job_submit.lua`...).
    pub extra_conf_files: Vec<(String, String)>,
    /// Lines of plugstack.conf (SPANK plugins).
    pub plugstack: Vec<String>,
    /// `Prolog=` / `Epilog=` programs.
    pub prolog: Option<PathBuf>,
    pub epilog: Option<PathBuf>,
    /// task/cgroup + proctrack/cgroup with `ConstrainDevices=yes` (cgroup v1).
    pub cgroup_devices: bool,
    /// Extra raw slurm.conf lines.
    pub extra_slurm_conf: Vec<String>,
    /// CPUs the node claims (config_overrides lets it exceed the real count).
    pub cpus: u32,
    /// GPU types known to accounting beyond the node's own (so QOS limits
    /// such as `gres/gpu:a100=20` can be defined).
    pub extra_gpu_types: Vec<String>,
    /// Use the plugins installed in this directory (by `make install`)
    /// instead of copying them from the build directory.
    pub installed_plugin_dir: Option<PathBuf>,
    /// Extra words of the partition's `PartitionName=` line
    /// (`TRESBillingWeights=...`).
    pub partition_options: Vec<String>,
    /// slurm.conf settings that replace the harness's own (`Key`, `Value`),
    /// or are added when it has none: a site with one link broken.
    pub conf_overrides: Vec<(String, String)>,
    /// `SlurmUser=` of slurmctld and slurmdbd: a system account the harness
    /// creates, as a site runs them; `None`: root.
    pub slurm_user: Option<String>,
}

impl Default for ClusterSpec {
    fn default() -> Self {
        Self {
            gpus: vec![GpuSpec {
                gpu_type: "a40".into(),
                count: 4,
            }],
            nodes: Vec::new(),
            mps_count: None,
            mps_per_gpu: false,
            accounting: true,
            qos: Vec::new(),
            job_submit_plugins: Vec::new(),
            extra_conf_files: Vec::new(),
            plugstack: Vec::new(),
            prolog: None,
            epilog: None,
            cgroup_devices: false,
            extra_slurm_conf: Vec::new(),
            cpus: 32,
            extra_gpu_types: Vec::new(),
            installed_plugin_dir: None,
            partition_options: Vec::new(),
            conf_overrides: Vec::new(),
            slurm_user: None,
        }
    }
}

impl ClusterSpec {
    /// The example site's seed: 4 a40, `lowprio` (free, preemptible with
    /// requeue) and `qos_lafferty` (4 a40, may preempt lowprio).
    pub fn seed() -> Self {
        Self {
            qos: vec![
                Qos {
                    preempt_mode: Some("requeue".into()),
                    grace_time: Some(2),
                    usage_factor: Some(0.0),
                    priority: Some(0),
                    ..Qos::new("lowprio")
                },
                Qos {
                    grp_tres: Some("gres/gpu:a40=4".into()),
                    preempt: vec!["lowprio".into()],
                    priority: Some(100),
                    ..Qos::new("qos_lafferty")
                },
            ],
            extra_conf_files: vec![(
                "gpu_qos.conf".into(),
                "QOS=qos_lafferty GPUTypes=a40 GPULimit=4\nLowPriorityQOS=lowprio\n".into(),
            )],
            ..Self::default()
        }
    }

    /// The example site of the README: group QOS with typed `GrpTRES`
    /// (h100, a100, a40), each allowed to preempt the free `lowprio`, on a
    /// node with 4 a40, 2 h100 and an mps pool, with `job_submit/gpu_qos`
    /// and the example `gpu_qos.conf`.
    pub fn example_site() -> Self {
        let group = |name: &str, tres: &str| Qos {
            grp_tres: Some(tres.into()),
            preempt: vec!["lowprio".into()],
            priority: Some(100),
            ..Qos::new(name)
        };
        let mut qos = vec![Qos {
            preempt_mode: Some("requeue".into()),
            grace_time: Some(2),
            usage_factor: Some(0.0),
            priority: Some(0),
            ..Qos::new("lowprio")
        }];
        for q in ["qos_dijk", "qos_zhuoran_yang", "qos_ma_zongming"] {
            qos.push(group(q, "gres/gpu:h100=4"));
        }
        qos.push(group("qos_saxena", "gres/gpu:a100=20"));
        for q in ["qos_ying_rex", "qos_lafferty"] {
            qos.push(group(q, "gres/gpu:a40=4"));
        }
        qos.push(group("qos_yildirim", "gres/gpu:a40=12"));
        Self {
            gpus: vec![
                GpuSpec {
                    gpu_type: "a40".into(),
                    count: 4,
                },
                GpuSpec {
                    gpu_type: "h100".into(),
                    count: 2,
                },
            ],
            mps_count: Some(600),
            extra_gpu_types: vec!["a100".into()],
            qos,
            job_submit_plugins: vec!["gpu_qos".into()],
            extra_conf_files: vec![("gpu_qos.conf".into(), EXAMPLE_GPU_QOS_CONF.into())],
            ..Self::default()
        }
    }

    /// A node of 4 a40 shared in MPS slices: `Name=mps Count=1600` (4 GPUs ×
    /// 4 × 100 units, the Slurm 22.05 arithmetic), gpushare's prolog,
    /// epilog and SPANK plugin, cgroup v1 device confinement, and
    /// `job_submit/gpu_qos` recording each job's units.
    ///
    /// Where Slurm can place shares itself ([`slurm_places_shares`]), the
    /// node is set up as `gpu-mps config` says for such a release instead:
    /// one `Count=100` mps line per GPU, `Flags=all_sharing`,
    /// `LL_SHARED_GRES`, and gpushare records Slurm's choice.
    pub fn mps_node() -> Self {
        let by_slurm = slurm_places_shares();
        Self {
            gpus: vec![GpuSpec {
                gpu_type: "a40".into(),
                count: 4,
            }],
            mps_count: Some(if by_slurm { 400 } else { 1600 }),
            mps_per_gpu: by_slurm,
            cgroup_devices: true,
            job_submit_plugins: vec!["gpu_qos".into()],
            prolog: Some("{build}/gpu-mps-prolog".into()),
            epilog: Some("{build}/gpu-mps-epilog".into()),
            plugstack: vec![
                "required {plugins}/spank_gpu_mps.so conf={cluster}/etc/gpu_mps.conf".into(),
            ],
            extra_conf_files: vec![
                ("gpu_qos.conf".into(), "MaxMPSPerJob=100\n".into()),
                ("gpu_mps.conf".into(), harness_gpu_mps_conf(4, !by_slurm)),
            ],
            // Where gpushare places, srun/salloc jobs' prologs get
            // job_submit/gpu_qos's share size only so; where Slurm places,
            // its percentage is exact and the flag is not needed.
            extra_slurm_conf: alloc_flag(by_slurm),
            ..Self::default()
        }
    }

    /// The example site across three nodes, each a host of its own:
    /// `gpu01` and `gpu02` with 4 a40 each, shared in MPS slices (as
    /// [`Self::mps_node`] sets one node up, for the release in use), and
    /// `gpu03` with 2 h100 held whole; the site's group QOS, `lowprio`,
    /// `job_submit/gpu_qos` with the example `gpu_qos.conf` (shares allowed
    /// outside reservations too), and gpushare's
    /// prolog, epilog and SPANK plugin on every node. Each node's
    /// `gpu_mps.conf` is its own, in its `/etc/slurm` (the SPANK line names
    /// no `conf=`): GPU lists differ between nodes. `gpu01` runs configless.
    pub fn example_site_nodes() -> Self {
        let by_slurm = slurm_places_shares();
        // Every node publishes its metrics and dcgm-exporter's job mapping
        // in its own /run (see tests/monitoring.rs).
        let node_conf = |gpus: u32, pool: bool| {
            (
                "gpu_mps.conf".to_owned(),
                format!(
                    "{}{SITE_MONITORING_CONF}",
                    harness_gpu_mps_conf(gpus, pool && !by_slurm)
                ),
            )
        };
        let pool = |name: &str| NodeSpec {
            mps_count: Some(if by_slurm { 400 } else { 1600 }),
            mps_per_gpu: by_slurm,
            local_files: vec![node_conf(4, true)],
            ..NodeSpec::new(name, "a40", 4)
        };
        let mut site = Self::example_site();
        // Shares anywhere on the MPS nodes, not only inside the course
        // reservations of the example.
        let mut policy: String = EXAMPLE_GPU_QOS_CONF
            .lines()
            .filter(|l| !l.starts_with("SharedGPUReservations="))
            .map(|l| format!("{l}\n"))
            .collect();
        policy.push_str(&format!(
            "MetricsFile={{cluster}}/{TEXTFILE_DIR}/gpushare_job_submit.prom\n"
        ));
        site.extra_conf_files = vec![("gpu_qos.conf".into(), policy)];
        Self {
            gpus: Vec::new(),
            mps_count: None,
            nodes: vec![
                // Configless, as many sites run their nodes: slurm.conf,
                // gres.conf, cgroup.conf and plugstack.conf come from
                // slurmctld, gpu_mps.conf from the node's /etc/slurm.
                NodeSpec {
                    configless: true,
                    ..pool("gpu01")
                },
                pool("gpu02"),
                NodeSpec {
                    local_files: vec![node_conf(2, false)],
                    ..NodeSpec::new("gpu03", "h100", 2)
                },
            ],
            cgroup_devices: true,
            prolog: Some("{build}/gpu-mps-prolog".into()),
            epilog: Some("{build}/gpu-mps-epilog".into()),
            plugstack: vec!["required {plugins}/spank_gpu_mps.so".into()],
            extra_slurm_conf: alloc_flag(by_slurm),
            // A node that stops answering is DOWN (and its jobs end) in
            // seconds, not the harness's usual five minutes.
            // Ended jobs are forgotten after 10 s (purged every 10 s), as
            // a busy site forgets them while a node is away.
            conf_overrides: vec![
                ("SlurmdTimeout".into(), "10".into()),
                ("MinJobAge".into(), "10".into()),
            ],
            cpus: 16,
            ..site
        }
    }

    /// Starts the cluster; fails with the daemon logs if it does not come up.
    pub fn start(&self) -> Result<Cluster> {
        if !is_root() {
            return Err("the Slurm test cluster needs root (daemons, mknod, cgroups): run the tests as root".into());
        }
        kill_orphans();
        enter_lab()?;
        let dir = make_cluster_dir()?;
        let mut cluster = Cluster {
            spec: self.clone(),
            dir: dir.clone(),
            ports: Ports::pick()?,
            daemons: BTreeMap::new(),
            nodes: if self.nodes.is_empty() {
                vec![NodeSpec {
                    name: NODE.to_owned(),
                    gpus: self.gpus.clone(),
                    mps_count: self.mps_count,
                    mps_per_gpu: self.mps_per_gpu,
                    local_files: Vec::new(),
                    configless: false,
                }]
            } else {
                self.nodes.clone()
            },
            slurmds: BTreeMap::new(),
            hosts: Vec::new(),
            fabric: None,
            plugin_dir: self
                .installed_plugin_dir
                .clone()
                .unwrap_or_else(|| dir.join("plugins")),
            jobs_dir: dir.join("jobs"),
        };
        let started = Instant::now();
        match cluster.boot() {
            Ok(()) => {
                eprintln!(
                    "testcluster: up in {:.1}s at {}",
                    started.elapsed().as_secs_f64(),
                    dir.display()
                );
                Ok(cluster)
            }
            Err(e) => Err(format!("{e}\n{}", cluster.log_tails(60))),
        }
    }
}

/// The Slurm release of the daemons on PATH, as (major, minor):
/// `slurmctld -V` prints `slurm-wlm 24.11.5` (Debian) or `slurm 22.05.8`.
pub fn slurm_release() -> (u32, u32) {
    static RELEASE: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();
    *RELEASE.get_or_init(|| {
        let out = Command::new("slurmctld").arg("-V").output();
        let text = out
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let mut numbers = text
            .split_whitespace()
            .nth(1)
            .unwrap_or("")
            .split('.')
            .map(|n| n.parse::<u32>().unwrap_or(0));
        (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0))
    })
}

/// Whether the MPS tests let Slurm place shares: Slurm 23.11 and later can
/// (`LL_SHARED_GRES`). `GPUSHARE_TEST_MPS_SETUP=node-count` keeps the
/// Slurm 22.05 setup, where gpushare places, on any release.
pub fn slurm_places_shares() -> bool {
    slurm_release() >= (23, 11)
        && std::env::var("GPUSHARE_TEST_MPS_SETUP").as_deref() != Ok("node-count")
}

/// Whether the clusters use cgroup v2 (`GPUSHARE_TEST_CGROUP=v2`, set by
/// `tests/release_suite.sh SUITE v2`, which mounts cgroup2 on
/// /sys/fs/cgroup in the suite's own mount namespace).
pub fn cgroup_v2() -> bool {
    std::env::var("GPUSHARE_TEST_CGROUP").as_deref() == Ok("v2")
}

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

/// What `scontrol show job` says about a job.
#[derive(Debug, Clone, Default)]
pub struct JobInfo {
    pub fields: BTreeMap<String, String>,
}

impl JobInfo {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }
    /// A TRES request field (`TresPerNode`, `TresPerJob`, ...) spelt the
    /// same on every release: 22.05 writes `gres:gpu:a40:2`, later releases
    /// `gres/gpu:a40:2`.
    pub fn tres_request(&self, key: &str) -> Option<String> {
        self.get(key).map(|v| v.replace("gres/", "gres:"))
    }
    /// `JobState`, e.g. `RUNNING`.
    pub fn state(&self) -> &str {
        self.get("JobState").unwrap_or("")
    }
    /// The states of a job that has ended, successfully or not.
    pub const DONE: &'static [&'static str] = &[
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
    ];
    /// Whether the job has ended ([`Self::DONE`]).
    pub fn is_done(&self) -> bool {
        Self::DONE.contains(&self.state())
    }
    /// Number of times the job was requeued.
    pub fn restarts(&self) -> u32 {
        self.get("Restarts")
            .and_then(|r| r.parse().ok())
            .unwrap_or(0)
    }
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
    let dir = base.join(format!("gpushare-{}-{n}", std::process::id()));
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

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its full length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end])
        .split('.')
        .next()
        .unwrap_or("localhost")
        .to_owned()
}

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

/// `text` (slurm.conf) with each `Key=` line of `overrides` replaced by
/// `Key=Value`, and the keys it lacks added before the first node line.
fn override_settings(text: &str, overrides: &[(String, String)]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for (key, value) in overrides {
        let line = format!("{key}={value}");
        let found = lines.iter().position(|l| {
            l.split_once('=')
                .is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case(key))
        });
        match found {
            // An empty value removes the setting: Slurm's default applies.
            Some(i) if value.is_empty() => {
                lines.remove(i);
            }
            None if value.is_empty() => {}
            Some(i) => lines[i] = line,
            None => {
                let at = lines
                    .iter()
                    .position(|l| l.starts_with("NodeName="))
                    .unwrap_or(lines.len());
                lines.insert(at, line);
            }
        }
    }
    lines.join("\n") + "\n"
}

/// Receives datagrams on `path` and appends them to `out`, for as long as
/// the socket file exists.
fn start_syslog(path: PathBuf, out: PathBuf) -> Result<()> {
    let socket = std::os::unix::net::UnixDatagram::bind(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
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

/// The monitoring lines of the example site's nodes' gpu_mps.conf: each
/// node's metrics file in its own textfile directory
/// ([`crate::hosts::TEXTFILE_DIR`]), its DCGM job mapping in its own `/run`.
pub const SITE_MONITORING_CONF: &str =
    "MetricsFile={cluster}/textfile/gpushare.prom\nDCGMJobMappingDir={cluster}/run/dcgm-jobs\n";

/// The harness's gpu_mps.conf for a node of `gpus` GPUs at
/// `{cluster}/dev/nvidia<N>`: state in `{cluster}/run`, syslog to the
/// harness, no MPS daemons; with `slurm_mps_count`, the node-wide
/// `Count=1600` of the 22.05 setup (gpushare places).
/// `PrologFlags=Alloc` where gpushare places shares (it needs the flag
/// there, see the README), nothing where Slurm does.
fn alloc_flag(slurm_places: bool) -> Vec<String> {
    if slurm_places {
        Vec::new()
    } else {
        vec!["PrologFlags=Alloc".into()]
    }
}

fn harness_gpu_mps_conf(gpus: u32, slurm_mps_count: bool) -> String {
    format!(
        "UnitsPerGPU=100\nGPUDevices={{cluster}}/dev/nvidia[0-{last}]\nStateDir={{cluster}}/run/gpu-mps\n{count}MPSControl=none\nSyslogSocket={{cluster}}/log/syslog.sock\n",
        last = gpus.saturating_sub(1),
        count = if slurm_mps_count { "SlurmMpsCount=1600\n" } else { "" },
    )
}

/// A node's lines of gres.conf, its GPUs at `dev/nvidia<N>`.
fn gres_lines(n: &NodeSpec, dev: &Path) -> String {
    let mut gres = String::new();
    let node = &n.name;
    let dev = dev.display();
    let mut first = 0;
    for g in &n.gpus {
        let last = first + g.count - 1;
        let files = if g.count == 1 {
            format!("{dev}/nvidia{first}")
        } else {
            format!("{dev}/nvidia[{first}-{last}]")
        };
        let _ = writeln!(
            gres,
            "NodeName={node} Name=gpu Type={} File={files}",
            g.gpu_type
        );
        first = last + 1;
    }
    match n.mps_count {
        Some(c) if n.mps_per_gpu => {
            // The GPUs of the first type are the MPS pool.
            let pool = n.gpus.first().map_or(0, |g| g.count);
            let per_gpu = c / pool.max(1);
            for i in 0..pool {
                let _ = writeln!(
                    gres,
                    "NodeName={node} Name=mps Count={per_gpu} File={dev}/nvidia{i} Flags=all_sharing"
                );
            }
        }
        Some(c) => {
            let _ = writeln!(gres, "NodeName={node} Name=mps Count={c}");
        }
        None => {}
    }
    gres
}

/// A fake GPU: the char device `c 195 minor` at `path`.
fn mknod_gpu(path: &Path, minor: u32) -> Result<()> {
    let c = std::ffi::CString::new(path.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: valid path; makedev/mknod have no memory preconditions.
    let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(195, minor)) };
    if rc != 0 {
        return Err(format!(
            "mknod {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Polls `check` every 100 ms until it returns `Some`, or fails after `timeout`.
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            return Err(format!("timed out after {:?} waiting for {what}", timeout));
        }
        sleep(Duration::from_millis(100));
    }
}

fn port_open(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

impl Cluster {
    fn etc(&self) -> PathBuf {
        self.dir.join("etc")
    }

    /// Path of slurm.conf (what `SLURM_CONF` points at).
    pub fn slurm_conf(&self) -> PathBuf {
        self.etc().join("slurm.conf")
    }

    fn log_dir(&self) -> PathBuf {
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

    /// Runs `program ARGS` on node `node`, as [`Self::on_node`].
    pub fn run_on(&self, node: &str, program: &str, args: &[&str]) -> Result<Output> {
        self.on_node(node, program)
            .args(args)
            .output()
            .map_err(|e| format!("{program} on {node}: {e}"))
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
        self.wait_node_idle(Duration::from_secs(60))
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
    fn start_syslogs(&self) -> Result<()> {
        if !self.multi_node() {
            return start_syslog(self.syslog_socket(), self.log_dir().join("syslog"));
        }
        for node in self.node_names() {
            let log = self.node_dir(&node).join("log");
            start_syslog(log.join("syslog.sock"), log.join("syslog"))?;
        }
        Ok(())
    }

    fn make_gpu_devices(&self) -> Result<()> {
        for node in &self.nodes {
            let dev = self.node_dir(&node.name).join("dev");
            for i in 0..node.gpu_count() {
                mknod_gpu(&dev.join(format!("nvidia{i}")), i)?;
            }
        }
        Ok(())
    }

    /// Copies our plugin libraries into `plugins/` under Slurm's names
    /// (`libjob_submit_gpu_qos.so` → `job_submit_gpu_qos.so`).
    fn install_plugins(&self) -> Result<()> {
        if self.spec.installed_plugin_dir.is_some() {
            return Ok(());
        }
        let built = build_dir()?;
        for entry in fs::read_dir(&built).map_err(|e| format!("{}: {e}", built.display()))? {
            let path = entry.map_err(|e| e.to_string())?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let Some(slurm_name) = name.strip_prefix("lib").filter(|n| n.ends_with(".so")) else {
                continue;
            };
            if slurm_name.starts_with("job_submit_") || slurm_name.starts_with("spank_") {
                crate::freshness::ensure_current(&path)?;
                fs::copy(&path, self.plugin_dir.join(slurm_name))
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
        // The node programs and admin commands the clusters run.
        for program in ["gpu-mps-prolog", "gpu-mps-epilog", "gpu-mps", "gpu-qos"] {
            let path = built.join(program);
            if path.exists() {
                crate::freshness::ensure_current(&path)?;
            }
        }
        for p in &self.spec.job_submit_plugins {
            let ours = self.plugin_dir.join(format!("job_submit_{p}.so"));
            let slurms = Path::new(SLURM_PLUGIN_DIR).join(format!("job_submit_{p}.so"));
            if !ours.exists() && !slurms.exists() {
                return Err(format!(
                    "job_submit plugin {p:?} not found in {} nor {SLURM_PLUGIN_DIR}: run `cargo build --workspace` first (`make test` does)",
                    built.display()
                ));
            }
        }
        Ok(())
    }

    /// Replaces `{cluster}`, `{plugins}` and `{build}` in spec strings,
    /// which cannot know the cluster's directory in advance.
    pub fn expand(&self, text: &str) -> String {
        text.replace("{cluster}", &self.dir.to_string_lossy())
            .replace("{plugins}", &self.plugin_dir.to_string_lossy())
            .replace(
                "{build}",
                &build_dir()
                    .map(|d| d.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            )
    }

    fn write_configs(&self) -> Result<()> {
        let etc = self.etc();
        let d = &self.dir;
        let p = self.ports;
        let host = hostname();
        let munge_sock = d.join("munge/munge.sock");
        let nodes = &self.nodes;
        let any_mps = nodes.iter().any(|n| n.mps_count.is_some());
        let mut gres_types = vec!["gpu"];
        if any_mps {
            gres_types.push("mps");
        }
        let mut tres = vec!["gres/gpu".to_owned()];
        for t in nodes
            .iter()
            .flat_map(|n| n.gpus.iter().map(|g| &g.gpu_type))
            .chain(&self.spec.extra_gpu_types)
        {
            let t = format!("gres/gpu:{t}");
            if !tres.contains(&t) {
                tres.push(t);
            }
        }
        if any_mps {
            tres.push("gres/mps".into());
        }
        let ctl_addr = self.controller_addr();
        let (proctrack, task) = if self.spec.cgroup_devices {
            ("proctrack/cgroup", "task/cgroup")
        } else {
            ("proctrack/linuxproc", "task/none")
        };
        let mut conf = format!(
            "# Generated by gpushare's test harness.\n\
             ClusterName={CLUSTER_NAME}\n\
             SlurmctldHost={host}({ctl_addr})\n\
             SlurmctldPort={ctld}\n\
             SlurmdPort={slurmd}\n\
             AuthType=auth/munge\n\
             AuthInfo=socket={munge},cred_expire=10\n\
             CredType=cred/munge\n\
             SlurmUser={slurm_user}\n\
             SlurmdUser=root\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool/slurmd-%n\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd-%n.pid\n\
             SlurmctldLogFile={d}/log/slurmctld.log\n\
             SlurmdLogFile={d}/log/slurmd.log\n\
             SlurmctldDebug=verbose\n\
             SlurmdDebug=verbose\n\
             PluginDir={plugins}:{SLURM_PLUGIN_DIR}\n\
             PlugStackConfig={etc}/plugstack.conf\n\
             ProctrackType={proctrack}\n\
             TaskPlugin={task}\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core{ll}\n\
             SchedulerType=sched/backfill\n\
             SchedulerParameters=sched_interval=2,bf_interval=2\n\
             MpiDefault=none\n\
             ReturnToService=2\n\
             SlurmdParameters=config_overrides\n\
             MinJobAge=600\n\
             KillWait=2\n\
             InactiveLimit=0\n\
             SlurmctldTimeout=30\n\
             SlurmdTimeout=300\n\
             JobAcctGatherType=jobacct_gather/none\n\
             GresTypes={gres_types}\n\
             PreemptType=preempt/qos\n\
             PreemptMode=REQUEUE\n\
             PriorityType=priority/multifactor\n\
             PriorityWeightQOS=10000\n\
             PriorityWeightAge=100\n\
             PriorityWeightFairshare=1000\n\
             PriorityDecayHalfLife=7-0\n\
             PriorityMaxAge=7-0\n",
            ctld = p.slurmctld,
            slurmd = p.slurmd,
            slurm_user = self.slurm_user_name(),
            munge = munge_sock.display(),
            d = d.display(),
            plugins = self.plugin_dir.display(),
            etc = etc.display(),
            gres_types = gres_types.join(","),
            ll = if nodes.iter().any(|n| n.mps_per_gpu) {
                ",LL_SHARED_GRES"
            } else {
                ""
            },
        );
        if self.spec.accounting {
            let _ = write!(
                conf,
                "AccountingStorageType=accounting_storage/slurmdbd\n\
                 AccountingStorageHost=127.0.0.1\n\
                 AccountingStoragePort={dbd}\n\
                 AccountingStoragePass={munge}\n\
                 AccountingStorageEnforce=associations,limits,qos,safe\n\
                 AccountingStorageTRES={tres}\n",
                dbd = p.dbd,
                tres = tres.join(","),
                munge = munge_sock.display(),
            );
        } else {
            conf.push_str("AccountingStorageType=accounting_storage/none\n");
        }
        if !self.spec.job_submit_plugins.is_empty() {
            let _ = writeln!(
                conf,
                "JobSubmitPlugins={}",
                self.spec.job_submit_plugins.join(",")
            );
        }
        if let Some(p) = &self.spec.prolog {
            let _ = writeln!(conf, "Prolog={}", self.expand(&p.to_string_lossy()));
        }
        if let Some(p) = &self.spec.epilog {
            let _ = writeln!(conf, "Epilog={}", self.expand(&p.to_string_lossy()));
        }
        for l in &self.spec.extra_slurm_conf {
            let _ = writeln!(conf, "{l}");
        }
        if nodes.iter().any(|n| n.configless) {
            conf.push_str("SlurmctldParameters=enable_configless\n");
        }
        for (i, n) in nodes.iter().enumerate() {
            let mut node_gres: Vec<String> = n
                .gpus
                .iter()
                .map(|g| format!("gpu:{}:{}", g.gpu_type, g.count))
                .collect();
            if let Some(c) = n.mps_count {
                node_gres.push(format!("mps:{c}"));
            }
            let (addr, hostname) = match &self.fabric {
                Some(f) => (f.node_addr(i).to_string(), n.name.clone()),
                None => ("127.0.0.1".to_owned(), host.clone()),
            };
            let _ = writeln!(
                conf,
                "NodeName={name} NodeAddr={addr} NodeHostname={hostname} CPUs={cpus} RealMemory=16000 Gres={gres} State=UNKNOWN",
                name = n.name,
                cpus = self.spec.cpus,
                gres = node_gres.join(","),
            );
        }
        let _ = writeln!(
            conf,
            "PartitionName={PARTITION} Nodes={nodes} Default=YES MaxTime=INFINITE State=UP{options}",
            nodes = self.node_names().join(","),
            options = self
                .spec
                .partition_options
                .iter()
                .map(|o| format!(" {o}"))
                .collect::<String>(),
        );
        let conf = override_settings(&conf, &self.spec.conf_overrides);
        write(&etc.join("slurm.conf"), &conf, 0o644)?;

        let mut gres = String::from("AutoDetect=off\n");
        for n in nodes {
            gres.push_str(&gres_lines(n, &d.join("dev")));
        }
        write(&etc.join("gres.conf"), &gres, 0o644)?;

        // cgroup v2: slurmd starts no systemd scope here (there is no
        // systemd); it makes its own below its cgroup.
        let cgroup_plugin = if cgroup_v2() {
            "cgroup/v2\nIgnoreSystemd=yes"
        } else {
            "cgroup/v1"
        };
        write(
            &etc.join("cgroup.conf"),
            &format!("CgroupPlugin={cgroup_plugin}\nCgroupMountpoint=/sys/fs/cgroup\nConstrainDevices=yes\nConstrainCores=no\nConstrainRAMSpace=no\n"),
            0o644,
        )?;
        let mut plugstack = self.expand(&self.spec.plugstack.join("\n"));
        plugstack.push('\n');
        write(&etc.join("plugstack.conf"), &plugstack, 0o644)?;
        for (name, text) in &self.spec.extra_conf_files {
            write(&etc.join(name), &self.expand(text), 0o644)?;
        }
        if self.spec.accounting {
            let dbd = format!(
                "AuthType=auth/munge\n\
                 AuthInfo=socket={munge}\n\
                 DbdHost=localhost\n\
                 DbdAddr=127.0.0.1\n\
                 DbdPort={dbd}\n\
                 SlurmUser={slurm_user}\n\
                 DebugLevel=info\n\
                 LogFile={d}/log/slurmdbd.log\n\
                 PidFile={d}/slurmdbd.pid\n\
                 PluginDir={SLURM_PLUGIN_DIR}\n\
                 StorageType=accounting_storage/mysql\n\
                 StorageHost=127.0.0.1\n\
                 StoragePort={mysql}\n\
                 StorageUser=root\n\
                 StorageLoc={db}\n",
                munge = munge_sock.display(),
                dbd = p.dbd,
                d = d.display(),
                mysql = p.mysql,
                db = self.database_name(),
                slurm_user = self.slurm_user_name(),
            );
            write(&etc.join("slurmdbd.conf"), &dbd, 0o600)?;
            // slurmdbd reads only a file its SlurmUser owns.
            if let Some((uid, gid)) = self.slurm_user_ids()? {
                std::os::unix::fs::chown(etc.join("slurmdbd.conf"), Some(uid), Some(gid))
                    .map_err(|e| format!("chown slurmdbd.conf: {e}"))?;
            }
        }
        Ok(())
    }

    /// `SlurmUser=` of slurmctld and slurmdbd.
    fn slurm_user_name(&self) -> &str {
        self.spec.slurm_user.as_deref().unwrap_or("root")
    }

    /// The (uid, gid) slurmctld and slurmdbd run as where it is not root
    /// ([`ClusterSpec::slurm_user`]; the account is created if missing).
    pub fn slurm_user_ids(&self) -> Result<Option<(u32, u32)>> {
        self.spec
            .slurm_user
            .as_deref()
            .map(crate::users::system_account)
            .transpose()
    }

    /// The accounting database: one per cluster, so that clusters can share
    /// a server (`GPUSHARE_TEST_MYSQL_PORT`).
    fn database_name(&self) -> String {
        let tag: String = self
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        format!("slurm_acct_{tag}")
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
        timeout: Duration,
        mut check: impl FnMut(&Self) -> bool,
    ) -> Result<()> {
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
            sleep(Duration::from_millis(100));
        }
    }

    fn start_munge(&mut self) -> Result<()> {
        let dir = self.dir.join("munge");
        // munged wants its socket directory traversable by every client.
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
        for p in [&dir, &key] {
            chown(p, Some(uid), Some(gid)).map_err(|e| format!("chown {}: {e}", p.display()))?;
        }
        let mut cmd = Command::new("munged");
        cmd.arg("--foreground")
            .arg(format!("--socket={}", dir.join("munge.sock").display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!(
                "--log-file={}",
                self.log_dir().join("munged.log").display()
            ))
            .arg(format!("--pid-file={}", dir.join("munged.pid").display()))
            .arg(format!("--seed-file={}", dir.join("munged.seed").display()))
            .uid(uid)
            .gid(gid);
        // munged writes its own log file as the munge user.
        let log = self.log_dir().join("munged.log");
        write(&log, "", 0o644)?;
        chown(&log, Some(uid), Some(gid)).map_err(|e| e.to_string())?;
        self.spawn("munged", cmd)?;
        let sock = dir.join("munge.sock");
        self.wait_daemon("munged", Duration::from_secs(10), |_| sock.exists())
    }

    fn start_mysql(&mut self) -> Result<()> {
        let data = self.dir.join("mysql");
        mkdir(&data, 0o700)?;
        let install = Command::new("mariadb-install-db")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
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
        self.wait_daemon("mariadb", Duration::from_secs(60), |_| port_open(port))
    }

    fn start_slurmdbd(&mut self) -> Result<()> {
        let mut cmd = self.command("slurmdbd");
        cmd.arg("-D");
        self.spawn("slurmdbd", cmd)?;
        let port = self.ports.dbd;
        self.wait_daemon("slurmdbd", Duration::from_secs(120), |_| port_open(port))
    }

    fn start_slurmctld(&mut self) -> Result<()> {
        let mut cmd = self.command("slurmctld");
        cmd.args(["-D", "-i"]);
        self.spawn("slurmctld", cmd)?;
        self.wait_daemon("slurmctld", Duration::from_secs(60), |c| {
            c.run("scontrol", &["ping"])
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("is UP"))
        })
    }

    /// Stops slurmctld (SIGTERM: it saves its state) and starts it again
    /// on that state; jobs on the nodes go on meanwhile.
    pub fn restart_slurmctld(&mut self) -> Result<()> {
        if let Some(mut d) = self.daemons.remove("slurmctld") {
            d.stop(Duration::from_secs(30));
        }
        self.start_slurmctld()
    }

    /// Starts node `node`'s slurmd (on its own host on a multi-node
    /// cluster; configless nodes ask slurmctld for their configuration).
    fn start_slurmd_on(&mut self, node: &str) -> Result<()> {
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
    pub fn wait_node_idle(&mut self, timeout: Duration) -> Result<()> {
        let names = self.node_names();
        self.wait_nodes(&names, timeout)
    }

    /// Waits until each of `nodes` reports `idle`, `mixed` or `allocated`.
    pub fn wait_nodes(&mut self, nodes: &[String], timeout: Duration) -> Result<()> {
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
            sleep(Duration::from_millis(100));
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

    fn setup_accounting(&mut self) -> Result<()> {
        self.run_ok(
            "sacctmgr",
            &[
                "-i",
                "add",
                "account",
                "research",
                &format!("cluster={CLUSTER_NAME}"),
            ],
        )?;
        let qos_names: Vec<&str> = self.spec.qos.iter().map(|q| q.name.as_str()).collect();
        // Create every QOS first: Preempt= may name a later one.
        for q in &qos_names {
            self.run_ok("sacctmgr", &["-i", "add", "qos", q])?;
        }
        for q in self.spec.qos.clone() {
            let mut set = Vec::new();
            if let Some(t) = &q.grp_tres {
                set.push(format!("GrpTRES={t}"));
            }
            if !q.preempt.is_empty() {
                set.push(format!("Preempt={}", q.preempt.join(",")));
            }
            if let Some(m) = &q.preempt_mode {
                set.push(format!("PreemptMode={m}"));
            }
            if let Some(g) = q.grace_time {
                set.push(format!("GraceTime={g}"));
            }
            if let Some(p) = q.priority {
                set.push(format!("Priority={p}"));
            }
            if let Some(u) = q.usage_factor {
                set.push(format!("UsageFactor={u}"));
            }
            if let Some(f) = &q.flags {
                set.push(format!("Flags={f}"));
            }
            if set.is_empty() {
                continue;
            }
            let mut args = vec![
                "-i".to_owned(),
                "modify".into(),
                "qos".into(),
                q.name.clone(),
                "set".into(),
            ];
            args.extend(set);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            self.run_ok("sacctmgr", &args)?;
        }
        let mut qos_list = vec!["normal".to_owned()];
        qos_list.extend(qos_names.iter().map(|s| (*s).to_owned()));
        self.run_ok(
            "sacctmgr",
            &[
                "-i",
                "add",
                "user",
                "root",
                "account=research",
                &format!("cluster={CLUSTER_NAME}"),
            ],
        )?;
        // root also has the `root` account from the cluster's creation: make
        // research its default and give every association of root the QOS.
        self.run_ok(
            "sacctmgr",
            &[
                "-i",
                "modify",
                "user",
                "where",
                "name=root",
                "set",
                "defaultaccount=research",
                &format!("qos={}", qos_list.join(",")),
            ],
        )?;
        // slurmctld learns association changes from slurmdbd asynchronously.
        wait_for(
            "slurmctld to see the new associations",
            Duration::from_secs(20),
            || {
                self.run(
                    "scontrol",
                    &["show", "assoc_mgr", "users=root", "flags=assoc"],
                )
                .ok()
                .filter(|o| String::from_utf8_lossy(&o.stdout).contains("Account=research"))
            },
        )?;
        Ok(())
    }

    /// Runs a Slurm command against this cluster.
    pub fn run(&self, program: &str, args: &[&str]) -> Result<Output> {
        self.command(program)
            .args(args)
            .output()
            .map_err(|e| format!("{program}: {e}"))
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

    /// `sbatch --parsable ARGS`: the job id, or sbatch's stderr as the error.
    pub fn sbatch(&self, args: &[&str]) -> std::result::Result<u32, String> {
        let mut full = vec!["--parsable"];
        let default_out = format!("--output={}/%j.out", self.jobs_dir.display());
        if !args
            .iter()
            .any(|a| a.starts_with("--output") || a.starts_with("-o"))
        {
            full.push(&default_out);
        }
        full.extend_from_slice(args);
        let out = self.run("sbatch", &full)?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            return Err(stderr);
        }
        stdout
            .trim()
            .split(';')
            .next()
            .and_then(|id| id.parse().ok())
            .ok_or_else(|| format!("sbatch printed no job id: {stdout:?} {stderr}"))
    }

    /// `sbatch` that must succeed.
    pub fn sbatch_ok(&self, args: &[&str]) -> Result<u32> {
        self.sbatch(args)
            .map_err(|e| format!("sbatch {} was rejected: {e}", args.join(" ")))
    }

    /// `srun ARGS` with a time limit; returns the whole output.
    pub fn srun(&self, args: &[&str]) -> Result<Output> {
        self.run("timeout", &[&["120", "srun"], args].concat())
    }

    /// Whether job `id` waits again and is kept off `node` (its
    /// `ExcNodeList`): a share refused there and requeued by gpushare's
    /// epilog to run elsewhere.
    pub fn sent_off(&self, id: u32, node: &str) -> bool {
        self.job(id)
            .is_ok_and(|i| i.state() == "PENDING" && i.get("ExcNodeList") == Some(node))
    }

    /// Waits until job `id` is [`Self::sent_off`] `node`.
    pub fn wait_sent_off(&self, id: u32, node: &str, timeout: Duration) -> Result<()> {
        wait_for(&format!("job {id} to be sent off {node}"), timeout, || {
            self.sent_off(id, node).then_some(())
        })
    }

    /// `scontrol show job ID`, parsed.
    pub fn job(&self, id: u32) -> Result<JobInfo> {
        let text = self.run_ok("scontrol", &["-o", "show", "job", &id.to_string()])?;
        let mut info = JobInfo::default();
        for word in text.split_whitespace() {
            if let Some((k, v)) = word.split_once('=') {
                info.fields
                    .entry(k.to_owned())
                    .or_insert_with(|| v.to_owned());
            }
        }
        Ok(info)
    }

    /// Waits until the job's state is one of `states`.
    pub fn wait_job_state(&self, id: u32, states: &[&str], timeout: Duration) -> Result<JobInfo> {
        let mut last = String::new();
        wait_for(&format!("job {id} to reach {states:?}"), timeout, || {
            let info = self.job(id).ok()?;
            last = info.state().to_owned();
            states.contains(&info.state()).then_some(info)
        })
        .map_err(|e| format!("{e} (last state {last:?})"))
    }

    /// Waits until the pending job's reason is `reason`.
    pub fn wait_job_reason(&self, id: u32, reason: &str, timeout: Duration) -> Result<JobInfo> {
        let mut last = String::new();
        wait_for(&format!("job {id} to wait for {reason}"), timeout, || {
            let info = self.job(id).ok()?;
            info.get("Reason").unwrap_or_default().clone_into(&mut last);
            (last == reason).then_some(info)
        })
        .map_err(|e| format!("{e} (last reason {last:?})"))
    }

    /// Waits until the job has finished, successfully or not.
    pub fn wait_job_done(&self, id: u32, timeout: Duration) -> Result<JobInfo> {
        self.wait_job_state(id, JobInfo::DONE, timeout)
    }

    /// Output file of a batch job submitted with the default `--output`.
    pub fn job_output(&self, id: u32) -> String {
        fs::read_to_string(self.jobs_dir.join(format!("{id}.out"))).unwrap_or_default()
    }

    /// Cancels every job and waits for them to leave the node.
    pub fn cancel_all(&self) -> Result<()> {
        // Every user's jobs: attack tests run jobs as other users.
        self.run_ok("scancel", &["--full", "--partition", PARTITION])?;
        wait_for("all jobs to end", Duration::from_secs(30), || {
            let out = self
                .run(
                    "squeue",
                    &[
                        "-h",
                        "-t",
                        "RUNNING,COMPLETING,PENDING,CONFIGURING",
                        "-o",
                        "%i",
                    ],
                )
                .ok()?;
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .is_empty()
                .then_some(())
        })
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
            d.stop(Duration::from_secs(10));
        }
        for name in ["slurmctld", "slurmdbd", "mariadb", "munged"] {
            if let Some(mut d) = self.daemons.remove(name) {
                d.stop(Duration::from_secs(10));
            }
        }
        let left = kill_marked(&self.dir, Duration::from_secs(10));
        if left > 0 {
            eprintln!(
                "testcluster: {left} processes of {} would not die",
                self.dir.display()
            );
        }
        self.hosts.clear();
        self.fabric = None;
        // The node programs' pointer to this cluster's ledger, in the
        // host's /run (a node of a multi-node cluster has a /run of its own).
        let records = Path::new(gpushare::mps::in_force::NODE_RECORDS_DIR);
        let conf = self.slurm_conf().with_file_name("gpu_mps.conf");
        for file in gpushare::mps::in_force::pointer_files(records, &conf) {
            let _ = fs::remove_file(file);
        }
    }

    /// Starts a second slurmctld on a copy of this cluster's configuration
    /// (own port, state, log; no accounting; plugins from `plugin_dir` if
    /// given), after `prepare` may change files in the copy's directory.
    /// It must stop by itself within 60 s: returns its exit status and log.
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
                        format!("PluginDir={}:{SLURM_PLUGIN_DIR}", plugins.display())
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
            Duration::from_secs(60),
            || d.exited(),
        );
        d.stop(Duration::from_secs(2));
        Ok((status?, fs::read_to_string(&log).unwrap_or_default()))
    }

    /// Creates a reservation on the node for root, starting now.
    pub fn create_reservation(&self, name: &str, minutes: u32) -> Result<()> {
        self.run_ok(
            "scontrol",
            &[
                "create",
                "reservation",
                &format!("ReservationName={name}"),
                "Users=root",
                &format!("Nodes={}", self.node_names().join(",")),
                "StartTime=now",
                &format!("Duration={minutes}"),
                "Flags=ignore_jobs",
            ],
        )
        .map(drop)
    }

    /// Writes a script that prints `dev<i>=<error>` for each GPU device
    /// file, the error of opening it shortened to `No_such_device_or_address`
    /// (the device cgroup allows it; no driver behind the fake device) or
    /// `Operation_not_permitted` (the cgroup denies it), all on one line.
    pub fn write_device_probe(&self) -> Result<PathBuf> {
        let gpus = self.total_gpus();
        let path = self.dir.join("probe.sh");
        let text = format!(
            "#!/bin/sh\nfor i in $(seq 0 {last}); do r=$( (cat {dev}/nvidia$i >/dev/null) 2>&1 | sed 's/.*: //; s/ /_/g'); printf 'dev%s=%s ' $i \"$r\"; done; echo\n",
            last = gpus.saturating_sub(1),
            dev = self.dir.join("dev").display()
        );
        write(&path, &text, 0o755)?;
        Ok(path)
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
        self.wait_nodes(&[node.to_owned()], Duration::from_secs(60))
    }

    /// A node crashes: every process on it dies at once (slurmd,
    /// slurmstepds, jobs, MPS daemons), nothing runs an epilog.
    pub fn crash_node(&mut self, node: &str) -> Result<()> {
        self.kill9_slurmd_on(node);
        let host = self.host(node)?;
        wait_for(
            &format!("every process on {node} to die"),
            Duration::from_secs(20),
            || {
                let left = host.processes();
                for &pid in &left {
                    if let Ok(pid) = i32::try_from(pid) {
                        // SAFETY: kill(2) on a pid of this node; gone is fine.
                        unsafe { libc::kill(pid, libc::SIGKILL) };
                    }
                }
                left.is_empty().then_some(())
            },
        )
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
