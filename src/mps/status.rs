//! What `gpu-mps` shows: the per-GPU share table, its JSON form (which is
//! also the world-readable status copy the ledger publishes), and the
//! slurm.conf/gres.conf lines a node needs. What the status is made of is
//! gathered here too ([`NodeStatus::as_seen`]: the ledger or its copy,
//! each GPU's daemon as [`probe_daemon`] finds it); the rest are pure
//! functions over the ledger's state.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::config::{GpuMpsConfig, NodeSettings};
use super::ledger::{GpuView, LedgerError, LedgerState, Lost, ShareRecord, View};
use super::state_dir::{self, Access};

/// Version of the [`NodeStatus`] schema.
pub const STATUS_VERSION: u32 = 1;

/// A node's shares as `gpu-mps status --json` prints them and as the
/// ledger publishes them for users (`<StateDir>-mps/state`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeStatus {
    pub version: u32,
    pub units_per_gpu: u32,
    pub gpus: Vec<GpuView>,
    /// Set while the GPU loads are unknown (see the ledger's docs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<Lost>,
    /// Unreadable state files moved aside, waiting for an admin.
    #[serde(default)]
    pub set_aside_files: Vec<PathBuf>,
    /// Each GPU's MPS daemon and limits (`gpu-mps status` adds them; the
    /// published copy has none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mps: Vec<GpuMps>,
    /// What an admin should fix that is not a GPU's row (an NVML order
    /// that contradicts GPUDevices).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Why the node's admin took it off sharing (`gpu-mps disable`), while
    /// it is: new shares are refused (not a problem: an admin's choice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<String>,
    /// The `NodeName=` lines of a gpu_mps.conf shared by several nodes
    /// that this node takes (`gpu-mps status` adds them; none where the
    /// file has no such lines, and in the published copy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_lines: Option<NodeLines>,
}

/// Which `NodeName=` lines of gpu_mps.conf a node takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeLines {
    /// The node as Slurm names it.
    pub node: String,
    /// The lines' numbers, each with its `NodeName=` list as written.
    pub lines: Vec<(usize, String)>,
}

impl NodeLines {
    /// What node `node` takes of `settings`; `None` where the file has no
    /// `NodeName=` lines (every line is every node's).
    pub fn of(node: &str, settings: &NodeSettings) -> Option<Self> {
        settings.scoped.then(|| Self {
            node: node.to_owned(),
            lines: settings.node_lines.clone(),
        })
    }

    /// The line `gpu-mps status` prints.
    fn line(&self) -> String {
        if self.lines.is_empty() {
            return format!(
                "NODE: no NodeName= line of gpu_mps.conf names {}: it takes the lines for every \
                 node only",
                self.node
            );
        }
        format!(
            "NODE: {} takes gpu_mps.conf's lines for every node and its {} (gpu-mps config \
             lists each setting and its line)",
            self.node,
            super::config::node_lines_text(&self.lines)
        )
    }
}

/// What is known of a GPU's MPS control daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DaemonState {
    /// It answers on its control pipe (root asked it).
    Running,
    /// Its control pipe is there but it does not answer: the next
    /// placement on this GPU kills and restarts it.
    NotAnswering,
    /// Its control pipe is there (only root can ask the daemon itself).
    PipePresent,
    /// No daemon.
    Stopped,
    /// gpushare does not run daemons here (`MPSControl=none`, or no
    /// `nvidia-cuda-mps-control` installed).
    Unmanaged,
}

/// A share's limits, as the job was told and the server enforces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShareLimits {
    pub job: u32,
    pub user: String,
    pub thread_percentage: u32,
    pub memory_limit_mib: Option<u64>,
}

/// One GPU's MPS side: daemon, users, server limits, each share's limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuMps {
    pub gpu: u32,
    pub daemon: DaemonState,
    /// The daemon's and its servers' processes (root only).
    pub daemon_pids: Vec<u32>,
    /// MPS server processes the daemon lists (root only).
    pub servers: Vec<u32>,
    /// One server for all users (`MultiUser=yes`).
    pub multi_user: bool,
    /// Users with shares on this GPU.
    pub users: Vec<String>,
    /// More than one user without a multi-user server: MPS serves one
    /// user at a time, so one user's clients wait until the other's have
    /// exited (the JSON name is kept for the tools that read it).
    pub time_sliced: bool,
    /// MPS clients on this GPU (each share job's largest step's tasks),
    /// and the most it takes.
    pub clients: u32,
    pub max_clients: u32,
    /// The server's limits: those of the largest share.
    pub thread_percentage: Option<u32>,
    pub memory_limit_mib: Option<u64>,
    pub shares: Vec<ShareLimits>,
    /// From NVML, where it could be loaded: the GPU's UUID, its memory
    /// (MiB), and its compute processes (the MPS server, and on recent drivers its clients).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvml_compute_processes: Option<Vec<u32>>,
    /// Set aside from sharing (lost, or drained with `gpu-mps drain-gpu`):
    /// why. Only root reads the record, so users see `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// The GPU's last MPS self-test (`gpu-mps selftest`, `SelfTest=`):
    /// whether it passed, when (Unix seconds), its first failure. Root's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selftest: Option<SelfTestView>,
}

/// A GPU's last self-test, as `gpu-mps status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelfTestView {
    pub passed: bool,
    pub at: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub why: String,
}

/// What `gpu-mps status` learnt of GPU `gpu`'s daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonProbe {
    pub state: DaemonState,
    pub pids: Vec<u32>,
    pub servers: Vec<u32>,
}

/// GPU `gpu`'s daemon as anyone can see it, without asking it: whether
/// its control pipe is there (a stat or two; what the node programs'
/// metrics and `gpu-mps status` for users show).
pub fn pipe_probe(cfg: &GpuMpsConfig, gpu: u32) -> DaemonProbe {
    let state = if super::programs::program(cfg).is_none() {
        DaemonState::Unmanaged
    } else if super::daemon::pipe_dir(cfg, gpu).join("control").exists() {
        DaemonState::PipePresent
    } else {
        DaemonState::Stopped
    };
    DaemonProbe {
        state,
        pids: Vec::new(),
        servers: Vec::new(),
    }
}

/// GPU `gpu`'s daemon as this user can see it: root (`root`) asks it and
/// finds its processes; others see only whether its control pipe is there.
pub fn probe_daemon(cfg: &GpuMpsConfig, gpu: u32, root: bool) -> DaemonProbe {
    let seen = pipe_probe(cfg, gpu);
    if !root || seen.state == DaemonState::Unmanaged {
        return seen;
    }
    let Some(program) = super::programs::program(cfg) else {
        return seen;
    };
    let pipe = super::daemon::pipe_dir(cfg, gpu);
    let has_pipe = seen.state == DaemonState::PipePresent;
    let pids = super::daemon::processes(&pipe);
    match super::daemon::probe(cfg, &program, gpu) {
        // The daemon's own processes: its servers are listed apart (a
        // server of a root job is root's too).
        Ok(servers) => DaemonProbe {
            state: DaemonState::Running,
            pids: pids.into_iter().filter(|p| !servers.contains(p)).collect(),
            servers,
        },
        Err(_) if has_pipe || !pids.is_empty() => DaemonProbe {
            state: DaemonState::NotAnswering,
            pids,
            servers: Vec::new(),
        },
        Err(_) => DaemonProbe {
            state: DaemonState::Stopped,
            pids,
            servers: Vec::new(),
        },
    }
}

/// Each of the `gpu_count` GPUs' daemons asked now (as root), looked up
/// later: the metrics are written under the ledger's lock, which a hung
/// daemon must not hold up a prolog behind. A GPU not asked is seen by its
/// pipe.
pub fn probe_daemons(cfg: &GpuMpsConfig, gpu_count: u32) -> impl Fn(u32) -> DaemonProbe + '_ {
    let probes: Vec<DaemonProbe> = (0..gpu_count)
        .map(|gpu| probe_daemon(cfg, gpu, true))
        .collect();
    move |gpu| {
        probes
            .get(gpu as usize)
            .cloned()
            .unwrap_or_else(|| pipe_probe(cfg, gpu))
    }
}

/// The MPS rows of `gpus` (from [`LedgerState::per_gpu`]), with each
/// GPU's daemon as `probe` finds it.
pub fn mps_view(
    cfg: &GpuMpsConfig,
    gpus: &[GpuView],
    probe: impl Fn(u32) -> DaemonProbe,
) -> Vec<GpuMps> {
    let failed = super::health::read(&cfg.state_dir);
    gpus.iter()
        .map(|g| {
            let users: Vec<String> = g
                .shares
                .iter()
                .map(|s| s.user.clone())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let limits = super::daemon::server_limits(cfg, None, g.shares.iter());
            let found = probe(g.index);
            GpuMps {
                gpu: g.index,
                daemon: found.state,
                daemon_pids: found.pids,
                servers: found.servers,
                multi_user: cfg.multi_user,
                time_sliced: users.len() > 1 && !cfg.multi_user,
                users,
                clients: g.shares.iter().map(ShareRecord::client_count).sum(),
                max_clients: cfg.max_clients_per_gpu,
                thread_percentage: limits.map(|l| l.thread_percentage),
                memory_limit_mib: limits.and_then(|l| l.memory_mib),
                shares: g
                    .shares
                    .iter()
                    .map(|s| ShareLimits {
                        job: s.job,
                        user: s.user.clone(),
                        thread_percentage: cfg.thread_percentage(s.units),
                        memory_limit_mib: s.memory_mib,
                    })
                    .collect(),
                uuid: None,
                memory_mib: None,
                nvml_compute_processes: None,
                failed: failed.get(&g.index).map(|f| f.reason.clone()),
                selftest: super::selftest::record::last(&cfg.state_dir, g.index).map(|t| {
                    SelfTestView {
                        passed: t.passed,
                        at: t.at,
                        why: t.why,
                    }
                }),
            }
        })
        .collect()
}

/// The MPS table under the share table.
fn mps_table(rows: &[GpuMps]) -> String {
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|m| {
            let daemon = match m.daemon {
                DaemonState::Running => "running",
                DaemonState::NotAnswering => "NOT-ANSWERING",
                DaemonState::PipePresent => "pipe-present",
                DaemonState::Stopped => "stopped",
                DaemonState::Unmanaged => "unmanaged",
            };
            let limits = m
                .shares
                .iter()
                .map(|s| match s.memory_limit_mib {
                    Some(mib) => format!("{}:{}%/{mib}M", s.job, s.thread_percentage),
                    None => format!("{}:{}%", s.job, s.thread_percentage),
                })
                .collect::<Vec<_>>()
                .join(" ");
            [
                m.gpu.to_string(),
                if m.daemon_pids.is_empty() {
                    daemon.to_owned()
                } else {
                    format!(
                        "{daemon}({})",
                        m.daemon_pids
                            .iter()
                            .map(u32::to_string)
                            .collect::<Vec<_>>()
                            .join(",")
                    )
                },
                if m.users.is_empty() {
                    "-".to_owned()
                } else {
                    m.users.join(",")
                },
                format!("{}/{}", m.clients, m.max_clients),
                if limits.is_empty() {
                    "-".to_owned()
                } else {
                    limits
                },
                [
                    m.failed.as_ref().map(|_| "FAILED"),
                    match (m.multi_user, m.time_sliced) {
                        (true, _) => Some("MULTI-USER"),
                        (false, true) => Some("USERS-WAIT"),
                        _ => None,
                    },
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(","),
            ]
        })
        .collect();
    aligned(
        [
            "GPU",
            "MPS-DAEMON",
            "USERS",
            "CLIENTS",
            "LIMITS(job:threads/mem)",
            "FLAGS",
        ],
        cells,
    )
}

/// The world-readable copy of the state that `gpu-mps status` shows to
/// users and a lost state is rebuilt from (a [`View`] of the ledger). Its
/// directory is checked like the ledger's (owned by the ledger's owner,
/// writable by nobody else).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusCopy {
    pub dir: PathBuf,
    pub gpu_count: u32,
    pub units_per_gpu: u32,
    /// Readable by root only (`PrivateData`): users are not shown who
    /// runs what (`None`: unknown, the file keeps its mode).
    pub private: Option<bool>,
}

impl StatusCopy {
    pub const FILE: &'static str = "state";

    /// The copy in `dir`, which is created (world-readable, owned by
    /// `owner`) or checked now.
    pub fn create(
        dir: PathBuf,
        owner: u32,
        gpu_count: u32,
        units_per_gpu: u32,
    ) -> Result<Self, LedgerError> {
        state_dir::ensure(&dir, owner, Access::WorldReadable)?;
        Ok(Self {
            dir,
            gpu_count,
            units_per_gpu,
            private: Some(false),
        })
    }

    /// The same, readable by root only where `private` (see
    /// [`state_dir::view_mode`]).
    pub fn private(self, private: Option<bool>) -> Self {
        Self { private, ..self }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(Self::FILE)
    }

    /// The records of a readable copy. The caller has checked its
    /// directory (see [`state_dir::check`]).
    pub fn read_records(&self) -> Option<LedgerState> {
        let text = std::fs::read_to_string(self.path()).ok()?;
        let status: NodeStatus = serde_json::from_str(&text).ok()?;
        Some(LedgerState::from_views(&status.gpus, status.lost))
    }
}

impl View for StatusCopy {
    fn publish(&self, state: &LedgerState) -> Result<(), LedgerError> {
        let status = NodeStatus::of(state, self.gpu_count, self.units_per_gpu, Vec::new());
        let mode = state_dir::view_mode(self.private, &self.path());
        state_dir::replace_file(&self.dir, Self::FILE, status.to_json().as_bytes(), mode)?;
        Ok(())
    }

    fn required(&self) -> bool {
        true
    }

    fn recover(&self) -> Option<(LedgerState, PathBuf)> {
        Some((self.read_records()?, self.path()))
    }
}

/// Why the published status copy cannot be shown.
#[derive(Debug)]
pub enum CopyUnreadable {
    /// Readable by root only (`PrivateData`).
    Private,
    Io(PathBuf, std::io::Error),
    Json(PathBuf, serde_json::Error),
}

impl std::fmt::Display for CopyUnreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Private => f.write_str(
                "this node keeps who runs what to root (PrivateData in gpu_mps.conf, or Slurm's \
                 PrivateData hides jobs or users): `squeue --me` shows your own jobs, and an \
                 admin can run gpu-mps status as root",
            ),
            Self::Io(path, e) => write!(f, "{}: {e}", path.display()),
            Self::Json(path, e) => write!(f, "{}: {e}", path.display()),
        }
    }
}

impl std::error::Error for CopyUnreadable {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // The path stands in front of the error: its causes follow it.
        match self {
            Self::Private => None,
            Self::Io(_, e) => e.source(),
            Self::Json(_, e) => e.source(),
        }
    }
}

impl NodeStatus {
    pub fn of(
        state: &LedgerState,
        gpu_count: u32,
        units_per_gpu: u32,
        set_aside_files: Vec<PathBuf>,
    ) -> Self {
        Self {
            version: STATUS_VERSION,
            units_per_gpu,
            gpus: state.per_gpu(gpu_count, units_per_gpu),
            lost: state.lost_reason().cloned(),
            set_aside_files,
            mps: Vec::new(),
            warnings: Vec::new(),
            disabled: None,
            node_lines: None,
        }
    }

    /// The published copy, as any user reads it (none yet: no share).
    pub fn published(cfg: &GpuMpsConfig, gpus: u32) -> Result<Self, CopyUnreadable> {
        let copy = StatusCopy {
            dir: super::daemon::public_dir(cfg),
            gpu_count: gpus,
            units_per_gpu: cfg.units_per_gpu,
            private: None,
        };
        let path = copy.path();
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| CopyUnreadable::Json(path, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::of(
                &LedgerState::default(),
                gpus,
                cfg.units_per_gpu,
                Vec::new(),
            )),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                Err(CopyUnreadable::Private)
            }
            Err(e) => Err(CopyUnreadable::Io(path, e)),
        }
    }

    /// What `gpu-mps status` shows of a node of `gpus` GPUs: root (`root`)
    /// reads the ledger, anyone else the published copy; each GPU's daemon
    /// as [`probe_daemon`] finds it. Second: why root's ledger could not be
    /// read, where the published copy is shown instead.
    pub fn as_seen(
        cfg: &GpuMpsConfig,
        gpus: u32,
        root: bool,
    ) -> Result<(Self, Option<String>), CopyUnreadable> {
        let mut trouble = None;
        let mut view = if root {
            match super::ledger::Ledger::open(&cfg.state_dir, 0).and_then(|l| l.snapshot()) {
                Ok(s) => Self::of(&s.state, gpus, cfg.units_per_gpu, s.set_aside_files),
                Err(e) => {
                    trouble = Some(e.to_string());
                    Self::published(cfg, gpus)?
                }
            }
        } else {
            Self::published(cfg, gpus)?
        };
        view.mps = mps_view(cfg, &view.gpus, |gpu| probe_daemon(cfg, gpu, root));
        Ok((view, trouble))
    }

    /// Whether anything needs an admin's attention (the command exits 1).
    pub fn has_problem(&self) -> bool {
        self.lost.is_some()
            || !self.warnings.is_empty()
            || self
                .mps
                .iter()
                .any(|m| m.daemon == DaemonState::NotAnswering || m.failed.is_some())
            || !self.set_aside_files.is_empty()
            || self
                .gpus
                .iter()
                .any(|g| g.overlap || g.over_capacity || !g.configured)
    }

    /// One JSON object and a newline.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// The aligned table `gpu-mps status` prints, with a warning line per
    /// problem that is not a GPU's.
    pub fn table(&self, devices: &[impl AsRef<Path>]) -> String {
        let mut out = table(&self.gpus, devices, self.units_per_gpu);
        if !self.mps.is_empty() {
            out.push('\n');
            out.push_str(&mps_table(&self.mps));
        }
        if let Some(lost) = &self.lost {
            let _ = writeln!(
                out,
                "LOST: the GPU loads are unknown since {} ({}); no share is placed until root runs `gpu-mps gc`",
                lost.since, lost.reason
            );
        }
        for m in &self.mps {
            if let Some(why) = &m.failed {
                // A self-test's set-aside ends with a passing test.
                let lift = if why.starts_with(super::selftest::record::SET_ASIDE_PREFIX) {
                    "selftest --gpu"
                } else {
                    "resume-gpu"
                };
                let _ = writeln!(
                    out,
                    "FAILED: GPU {} takes no new share: {why}; `gpu-mps {lift} {}` once fixed",
                    m.gpu, m.gpu
                );
            }
        }
        if let Some(why) = &self.disabled {
            let _ = writeln!(
                out,
                "DISABLED: new shares are refused: {why}; `gpu-mps enable` gives the node back"
            );
        }
        for w in &self.warnings {
            let _ = writeln!(out, "WARNING: {w}");
        }
        if let Some(lines) = &self.node_lines {
            let _ = writeln!(out, "{}", lines.line());
        }
        for file in &self.set_aside_files {
            let _ = writeln!(
                out,
                "SET ASIDE: {} (an unreadable state file, kept for inspection)",
                file.display()
            );
        }
        out
    }
}

fn flags(g: &GpuView) -> String {
    let mut f = Vec::new();
    if g.overlap {
        f.push("OVERLAP");
    }
    if g.over_capacity {
        f.push("OVER");
    }
    if !g.configured {
        f.push("UNCONFIGURED");
    }
    f.join(",")
}

fn jobs_text(g: &GpuView) -> String {
    let mut parts: Vec<String> = g
        .shares
        .iter()
        .map(|s| format!("{}({}:{})", s.job, s.user, s.units))
        .collect();
    parts.extend(g.whole_jobs.iter().map(|j| format!("{j}(whole)")));
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join(" ")
    }
}

/// The per-GPU rows.
fn table(gpus: &[GpuView], devices: &[impl AsRef<Path>], units_per_gpu: u32) -> String {
    let rows: Vec<[String; 6]> = gpus
        .iter()
        .map(|g| {
            [
                g.index.to_string(),
                devices
                    .get(g.index as usize)
                    .map_or("-".into(), |d| d.as_ref().display().to_string()),
                format!("{}/{units_per_gpu}", g.used_units),
                g.shares.len().to_string(),
                jobs_text(g),
                flags(g),
            ]
        })
        .collect();
    let head = [
        "GPU",
        "DEVICE",
        "UNITS",
        "SHARES",
        "JOBS(user:units)",
        "FLAGS",
    ];
    aligned(head, rows)
}

/// Rows under a head, columns padded to their widest cell.
fn aligned<const N: usize>(head: [&str; N], rows: Vec<[String; N]>) -> String {
    let mut width = head.map(str::len);
    for r in &rows {
        for (w, cell) in width.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for r in std::iter::once(head.map(String::from)).chain(rows) {
        let line: Vec<String> = r
            .iter()
            .zip(width)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

/// Where NVML's minor numbers (the N of `/dev/nvidiaN`, in NVML's PCI
/// order) disagree with `GPUDevices=`: one warning per GPU. A node whose
/// list is in another order would start GPU i's daemon on another GPU than
/// the device file its jobs are confined to.
pub fn minor_mismatches(devices: &[impl AsRef<Path>], minors: &[Option<u32>]) -> Vec<String> {
    let listed = |p: &Path| -> Option<u32> {
        p.file_name()?
            .to_str()?
            .strip_prefix("nvidia")?
            .parse()
            .ok()
    };
    let mut out = Vec::new();
    for (i, minor) in minors.iter().enumerate() {
        let device = devices.get(i).map(AsRef::as_ref);
        match (device, minor) {
            (Some(d), Some(m)) if listed(d) != Some(*m) => out.push(format!(
                "GPU {i}: NVML's GPU {i} (PCI order) is /dev/nvidia{m}, but GPUDevices lists {} \
                 in position {i}: list the device files in PCI bus order",
                d.display()
            )),
            (None, _) => out.push(format!(
                "GPU {i}: NVML reports {} GPUs, GPUDevices lists {}",
                minors.len(),
                devices.len()
            )),
            _ => {}
        }
    }
    out.dedup();
    out
}

/// Whether a node could use MPS v3's kernel-enforced memory limits
/// (driver r615 or later, cgroup v2 with the `dmem` controller): the line
/// `gpu-mps config` prints.
pub fn mps_v3_readiness(driver: Option<&str>, cgroup_v2: bool, dmem: bool) -> String {
    let major = driver
        .and_then(|d| d.split('.').next())
        .and_then(|m| m.parse::<u32>().ok());
    let driver_text = match (driver, major) {
        (Some(d), Some(m)) if m >= 615 => format!("driver {d} (r615 or later: yes)"),
        (Some(d), _) => format!("driver {d} (needs r615 or later)"),
        (None, _) => "no NVIDIA driver found".to_owned(),
    };
    let ready = major.is_some_and(|m| m >= 615) && cgroup_v2 && dmem;
    format!(
        "# MPS v3 (namespaces, kernel-enforced memory limits): {}; {driver_text}; cgroup v2: {}; \
         dmem controller: {}\n",
        if ready {
            "this node could use it"
        } else {
            "not on this node"
        },
        if cgroup_v2 { "yes" } else { "no" },
        if dmem {
            "yes"
        } else {
            "no (kernel 6.14 or later)"
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mps::ledger::tests::{ok, place};
    use crate::mps::ledger::{self, Ledger, LedgerState, ShareRecord, WholeRecord};
    use crate::mps::placement::PlacementError;
    use std::fs;
    use std::os::unix::fs::MetadataExt;
    use std::sync::Arc;

    #[test]
    fn nvml_minors_are_checked_against_the_device_list() {
        let devices = ["/dev/nvidia0", "/dev/nvidia1"];
        assert!(minor_mismatches(&devices, &[Some(0), Some(1)]).is_empty());
        let swapped = minor_mismatches(&devices, &[Some(1), Some(0)]);
        assert_eq!(swapped.len(), 2, "{swapped:?}");
        assert!(swapped[0].contains("is /dev/nvidia1, but GPUDevices lists /dev/nvidia0"));
        assert_eq!(
            minor_mismatches(&devices, &[Some(0), Some(1), Some(2)]).len(),
            1
        );
        assert!(minor_mismatches(&devices, &[None, None]).is_empty());
    }

    #[test]
    fn mps_v3_needs_r615_cgroup_v2_and_dmem() {
        assert!(mps_v3_readiness(Some("615.12"), true, true).contains("this node could use it"));
        for (driver, v2, dmem) in [
            (Some("580.65.06"), true, true),
            (Some("615.12"), false, true),
            (Some("615.12"), true, false),
            (None, true, true),
        ] {
            assert!(
                mps_v3_readiness(driver, v2, dmem).contains("not on this node"),
                "{driver:?} {v2} {dmem}"
            );
        }
    }

    fn state() -> LedgerState {
        let mut s = LedgerState::new();
        s.insert_share(ShareRecord {
            job: 11,
            uid: 1000,
            user: "a-very-long-user-name".into(),
            gpu: 1,
            units: 50,
            since: 1,
            placed_by_slurm: false,
            memory_mib: None,
            clients: None,
            sluid: None,
        });
        s.insert_share(ShareRecord {
            job: 12,
            uid: 1001,
            user: "bo\"b".into(),
            gpu: 1,
            units: 25,
            since: 2,
            placed_by_slurm: false,
            memory_mib: None,
            clients: None,
            sluid: None,
        });
        s.insert_whole(WholeRecord {
            job: 20,
            gpus: vec![1, 2],
            since: 3,
        });
        s
    }

    #[test]
    fn table_is_aligned_and_flags_overlap() {
        let status = NodeStatus::of(&state(), 4, 100, Vec::new());
        let devs: Vec<String> = (0..4).map(|i| format!("/dev/nvidia{i}")).collect();
        let t = status.table(&devs);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 5, "{t}");
        let col = lines[0].find("UNITS").unwrap_or(0);
        assert!(
            lines[1..]
                .iter()
                .all(|l| l.get(col..col + 1).is_some_and(|c| c != " ")),
            "{t}"
        );
        assert!(
            lines[2].contains("75/100")
                && lines[2].contains("11(a-very-long-user-name:50)")
                && lines[2].contains("20(whole)")
                && lines[2].ends_with("OVERLAP"),
            "{t}"
        );
        assert!(
            lines[3].contains("20(whole)") && !lines[3].contains("OVERLAP"),
            "{t}"
        );
        assert!(
            lines[4].contains("0/100") && lines[4].ends_with(" -"),
            "{t}"
        );
        assert!(status.has_problem());
        assert!(!NodeStatus::of(&LedgerState::new(), 4, 100, Vec::new()).has_problem());
    }

    #[test]
    fn status_names_the_node_name_lines_the_node_takes() {
        let text = "NodeName=gpu[01-02] GPUDevices=/dev/nvidia0\nNodeName=gpu02 Banner=log\n";
        let of = |text: &str, node: &str| {
            crate::mps::config::parse_for(text, "f", node)
                .map(|s| NodeLines::of(node, &s))
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let mut view = NodeStatus::of(&LedgerState::new(), 1, 100, Vec::new());
        view.node_lines = of(text, "gpu02");
        let t = view.table(&["/dev/nvidia0"]);
        assert!(
            t.contains(
                "NODE: gpu02 takes gpu_mps.conf's lines for every node and its lines 1 \
                 (NodeName=gpu[01-02]), 2 (NodeName=gpu02)"
            ),
            "{t}"
        );
        assert!(!view.has_problem());
        let back: Result<NodeStatus, _> = serde_json::from_str(&view.to_json());
        assert_eq!(back.ok(), Some(view));
        let none = of(text, "gpu03").map(|l| l.line());
        assert!(none.is_some_and(|l| l.contains("no NodeName= line of gpu_mps.conf names gpu03")));
        // A file for every node alike: nothing to say.
        assert_eq!(of("UnitsPerGPU=1\n", "gpu02"), None);
    }

    #[test]
    fn json_round_trips_and_lists_everything() {
        let aside = vec![PathBuf::from("/run/gpu-mps/state.corrupt-1")];
        let status = NodeStatus::of(&state(), 2, 100, aside);
        let j = status.to_json();
        let value: serde_json::Value = serde_json::from_str(&j).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(value["gpus"][1]["gpu"], 1);
        assert_eq!(value["gpus"][1]["used_units"], 75);
        assert_eq!(value["gpus"][1]["free_units"], 25);
        assert_eq!(value["gpus"][1]["shares"][1]["user"], "bo\"b");
        assert_eq!(value["gpus"][1]["whole_jobs"], serde_json::json!([20]));
        assert_eq!(value["gpus"][1]["overlap"], true);
        assert_eq!(value["set_aside_files"][0], "/run/gpu-mps/state.corrupt-1");
        let back: NodeStatus = serde_json::from_str(&j).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, status);
        assert!(back.has_problem());
        let lost = NodeStatus::of(&LedgerState::lost("test".into()), 2, 100, Vec::new());
        assert!(lost.has_problem());
        assert!(lost.table(&["/dev/nvidia0"]).contains("LOST"));
    }

    #[test]
    fn users_see_the_published_copy_or_why_not() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let cfg = GpuMpsConfig {
            state_dir: dir.path().join("state"),
            mps_control: crate::mps::config::MpsControl::Disabled,
            ..GpuMpsConfig::default()
        };
        // No copy yet: nothing shared anywhere.
        let (view, trouble) = NodeStatus::as_seen(&cfg, 2, false).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((view.gpus.len(), trouble), (2, None));
        assert!(view.mps.iter().all(|m| m.daemon == DaemonState::Unmanaged));
        assert!(!view.has_problem());
        let public = crate::mps::daemon::public_dir(&cfg);
        std::fs::create_dir_all(&public).unwrap_or_else(|e| panic!("{e}"));
        let path = public.join(StatusCopy::FILE);
        std::fs::write(&path, "{").unwrap_or_else(|e| panic!("{e}"));
        let said = NodeStatus::published(&cfg, 2)
            .map(|_| ())
            .map_err(|e| e.to_string());
        assert!(
            said.as_ref()
                .is_err_and(|e| e.starts_with(&format!("{}: ", path.display()))),
            "{said:?}"
        );
        assert!(CopyUnreadable::Private
            .to_string()
            .contains("`squeue --me`"));
    }

    // The ledger with its status copy: what a lost state is rebuilt from.

    /// A ledger in `<temp>/gpu-mps` publishing its status copy in
    /// `<temp>/gpu-mps-mps`.
    fn ledger_with_copy() -> (tempfile::TempDir, Ledger) {
        let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let owner = fs::metadata(temp.path())
            .map(|m| m.uid())
            .unwrap_or_else(|e| panic!("{e}"));
        let copy = ok(StatusCopy::create(
            temp.path().join("gpu-mps-mps"),
            owner,
            4,
            100,
        ));
        let ledger = ok(Ledger::open(&temp.path().join("gpu-mps"), owner));
        (temp, ledger.with_view(Arc::new(copy)))
    }

    #[test]
    fn a_lost_state_is_rebuilt_from_the_status_copy_and_no_gpu_over_fills() {
        let (temp, ledger) = ledger_with_copy();
        for job in 1..=4 {
            place(&ledger, job, 100);
        }
        ok(ledger.record_whole(9, &[3]));
        ok(ledger.release(4));
        let copy = temp.path().join("gpu-mps-mps/state");
        let mode = fs::metadata(&copy).map(|m| m.mode() & 0o7777).ok();
        assert_eq!(mode, Some(0o644));
        // Corrupt, then missing: both times the loads come back from the copy.
        for damage in ["corrupt", "missing"] {
            if damage == "corrupt" {
                fs::write(ledger.state_path(), "\u{1}\u{2}").unwrap_or_else(|e| panic!("{e}"));
            } else {
                fs::remove_file(ledger.state_path()).unwrap_or_else(|e| panic!("{e}"));
            }
            let refused = ledger.place(10, 1, "u", 50, 4, 100);
            let Err(LedgerError::Placement {
                error: PlacementError::NoGpuHasRoom { .. },
                repair: Some(repair),
            }) = refused
            else {
                panic!("{damage}: expected the rebuilt loads to refuse, got {refused:?}");
            };
            assert_eq!(
                repair.rebuilt_from.as_deref(),
                Some(copy.as_path()),
                "{damage}"
            );
            assert_eq!(repair.moved_to.is_some(), damage == "corrupt");
            let state = ok(ledger.snapshot()).state;
            let jobs: Vec<u32> = state.shares().map(|s| s.job).collect();
            assert_eq!(jobs, vec![1, 2, 3], "{damage}");
            assert_eq!(state.whole_holder(9).map(|w| w.gpus.clone()), Some(vec![3]));
            assert!(state.lost_reason().is_none());
        }
    }

    #[test]
    fn a_ledger_of_a_newer_gpushare_is_left_as_it_is() {
        let (_temp, ledger) = ledger_with_copy();
        ok(ledger.place(1, 5, "a", 10, 4, 100));
        let path = ledger.state_path();
        let newer = fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{e}"))
            .replace("\"version\": 2", "\"version\": 3")
            .replace("\"shares\"", "\"queues\": [],\n  \"shares\"");
        fs::write(&path, &newer).unwrap_or_else(|e| panic!("{e}"));
        let placed = ledger.place(2, 5, "a", 10, 4, 100).err();
        assert!(
            matches!(&placed, Some(LedgerError::TooNew { version: 3, .. })),
            "{placed:?}"
        );
        assert!(placed.is_some_and(|e| e.to_string().contains("newer gpushare")));
        assert!(matches!(ledger.release(1), Err(LedgerError::TooNew { .. })));
        assert!(matches!(ledger.snapshot(), Err(LedgerError::TooNew { .. })));
        // Never set aside as unreadable, never rewritten.
        assert_eq!(fs::read_to_string(&path).ok(), Some(newer));
        let aside = fs::read_dir(ledger.dir())
            .map(|d| {
                d.flatten()
                    .filter(|e| {
                        e.file_name()
                            .to_string_lossy()
                            .starts_with(ledger::SET_ASIDE_PREFIX)
                    })
                    .count()
            })
            .unwrap_or(0);
        assert_eq!(aside, 0);
    }
}
