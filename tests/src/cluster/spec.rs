//! What a test can choose about its cluster ([`ClusterSpec`]), the
//! example sites, and what this machine's Slurm allows.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use super::{is_root, make_cluster_dir, Cluster, Ports, EXAMPLE_GPU_QOS_CONF, NODE};
use crate::hosts::{enter_lab, TEXTFILE_DIR};
use crate::process::kill_orphans;
use crate::Result;

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
    /// As [`ClusterSpec::unshared_mps_lines`].
    pub unshared_mps_lines: bool,
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

    pub(super) fn gpu_count(&self) -> u32 {
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
    /// With `mps_per_gpu`: a `Count=0` mps line with `Flags=all_sharing`
    /// for each GPU outside the pool, before the pool's lines, as `gpu-mps
    /// config` prints them for a node whose GPUs are not all shared
    /// (without them Slurm gives those GPUs mps records that share one GPU
    /// at a time, and the whole node follows).
    pub unshared_mps_lines: bool,
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
    /// Slurm detects the GPUs itself: this is gres.conf (with `{cluster}`),
    /// an `AutoDetect=` line and what the site adds, instead of the
    /// harness's `AutoDetect=off` and gpu/mps lines; slurmd finds the
    /// node's GPUs of `gpus` in a `fake_gpus.conf` beside slurm.conf, one
    /// record a GPU: its type, the node's CPUs, its device file and the
    /// UUID of [`fake_gpu_uuid`].
    pub detected_gres_conf: Option<String>,
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
            unshared_mps_lines: false,
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
            detected_gres_conf: None,
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

    /// This site under `JobContainerType=job_container/tmpfs` whose
    /// job_container.conf gives each job its own `{cluster}/run` (where the
    /// harness's `StateDir` is) and `/dev/shm` (`Dirs=`, Slurm 23.02 and
    /// later), with the `PrologFlags=Contain` Slurm needs for it.
    pub fn hiding_run_in_a_job_container(self) -> Self {
        let mut spec = self;
        spec.extra_conf_files.push((
            "job_container.conf".into(),
            "AutoBasePath=true\nBasePath={cluster}/ns\nDirs={cluster}/run,/dev/shm\n".into(),
        ));
        // Slurm needs Contain for a job container; it includes Alloc.
        spec.extra_slurm_conf
            .retain(|l| !l.starts_with("PrologFlags="));
        spec.extra_slurm_conf.extend([
            "JobContainerType=job_container/tmpfs".to_owned(),
            "PrologFlags=Contain".to_owned(),
        ]);
        spec
    }

    /// This spec with `lines` added to the harness's cgroup.conf (written
    /// as one of its files beside slurm.conf, after the harness's own).
    pub fn with_cgroup_conf_lines(self, lines: &[&str]) -> Self {
        let mut spec = self;
        spec.extra_conf_files
            .push(("cgroup.conf".into(), super::configs::cgroup_conf(lines)));
        spec
    }

    /// This site under `NamespaceType=namespace/linux` (Slurm 25.11 and
    /// later) whose namespace.yaml gives each job its own `{cluster}/run`
    /// (where the harness's `StateDir` is) and `/dev/shm`: as 26.05's
    /// `dir_confs:` entries where `dir_confs` is true, else as 25.11's
    /// `dirs:`; with the `PrologFlags=Contain` Slurm needs for it.
    pub fn hiding_run_in_a_namespace(self, dir_confs: bool) -> Self {
        let mut spec = self;
        let dirs = if dir_confs {
            "  dir_confs:\n    - path: \"{cluster}/run\"\n    - path: /dev/shm\n"
        } else {
            "  dirs: \"{cluster}/run,/dev/shm\"\n"
        };
        spec.extra_conf_files.push((
            "namespace.yaml".into(),
            format!("defaults:\n  auto_base_path: true\n  base_path: \"{{cluster}}/ns\"\n{dirs}"),
        ));
        spec.extra_slurm_conf
            .retain(|l| !l.starts_with("PrologFlags="));
        spec.extra_slurm_conf.extend([
            "NamespaceType=namespace/linux".to_owned(),
            "PrologFlags=Contain".to_owned(),
        ]);
        spec
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
        Self::mps_node_placed_by_slurm(slurm_places_shares())
    }

    /// [`Self::mps_node`] set up for Slurm to place shares (`by_slurm`,
    /// Slurm 23.11 and later) or gpushare, whatever the release.
    pub fn mps_node_placed_by_slurm(by_slurm: bool) -> Self {
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
        // A bad time scale stops the run here, before anything starts.
        crate::time::scale();
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
                    unshared_mps_lines: self.unshared_mps_lines,
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

/// The UUID `fake_gpus.conf` gives GPU `index` of a node whose GPUs Slurm
/// detects ([`ClusterSpec::detected_gres_conf`]), as NVML writes one.
pub fn fake_gpu_uuid(index: u32) -> String {
    format!("GPU-6a5e0000-0000-4000-8000-{index:012x}")
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

/// The monitoring lines of the example site's nodes' gpu_mps.conf: each
/// node's metrics file in its own textfile directory
/// ([`crate::hosts::TEXTFILE_DIR`]), its DCGM job mapping in its own `/run`.
pub const SITE_MONITORING_CONF: &str =
    "MetricsFile={cluster}/textfile/gpushare.prom\nDCGMJobMappingDir={cluster}/run/dcgm-jobs\n";

/// `PrologFlags=Alloc,DeferBatch` where gpushare places shares (it needs
/// `Alloc` there and 22.05/23.02 need `DeferBatch` beside it, see
/// docs/configuration.md), nothing where Slurm does.
fn alloc_flag(slurm_places: bool) -> Vec<String> {
    if slurm_places {
        Vec::new()
    } else {
        vec!["PrologFlags=Alloc,DeferBatch".into()]
    }
}

/// The harness's gpu_mps.conf for a node of `gpus` GPUs at
/// `{cluster}/dev/nvidia<N>`: state in `{cluster}/run`, syslog to the
/// harness, no MPS daemons; with `slurm_mps_count`, the node-wide
/// `Count=1600` of the 22.05 setup (gpushare places).
fn harness_gpu_mps_conf(gpus: u32, slurm_mps_count: bool) -> String {
    format!(
        "UnitsPerGPU=100\nGPUDevices={{cluster}}/dev/nvidia[0-{last}]\nStateDir={{cluster}}/run/gpu-mps\n{count}MPSControl=none\nSyslogSocket={{cluster}}/log/syslog.sock\n",
        last = gpus.saturating_sub(1),
        count = if slurm_mps_count { "SlurmMpsCount=1600\n" } else { "" },
    )
}
