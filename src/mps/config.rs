//! `gpu_mps.conf`: how a node shares its GPUs in MPS slices.
//!
//! Read by the SPANK plugin `gpu_mps` (slurmstepd), by `gpu-mps-prolog` and
//! `gpu-mps-epilog` (slurmd) and by the `gpu-mps` admin command, from the
//! directory of the slurm.conf in use. Slurm `Key=Value` syntax (see
//! [`crate::shared::syntax`]); every error names `file:line`. One file may
//! serve every node: a line that starts with `NodeName=<host list>` is for
//! those nodes only, and wins there over the lines for every node (see
//! [`parse_for`] and [`scoped`]).
//!
//! ```text
//! UnitsPerGPU=100                  # mps units one GPU holds (a job's share = units / UnitsPerGPU)
//! GPUDevices=/dev/nvidia[0-3]      # the node's GPU device files, in index order (default: every /dev/nvidia<N>)
//! StateDir=/run/gpu-mps            # root-only state (ledger, MPS pipe and log directories)
//! SlurmMpsCount=1600               # the node's gres.conf `Name=mps Count=`; enables the checks and the fallback
//! GPUMemory=48G                    # per GPU, where NVML cannot tell (NVML's figure wins)
//! MemoryLimit=proportional         # a share's device memory: proportional (its units' part), none, or a size
//! MPSControl=auto                  # auto (found in PATH or the usual dirs), none, or the program's path
//! MultiUser=no                     # yes: one multi-user MPS server per GPU (the -M/--multiuser/-multiuser-server its -h names), isolation between users given up
//! OtherUsers=refuse                # a share that only fits beside another user's server: refuse, or queue (its CUDA work waits for theirs to end)
//! MaxClientsPerGPU=48              # MPS clients one GPU's server takes (48 on Volta and newer)
//! DaemonLinger=60                  # seconds a GPU's MPS daemon stays after its last share (0: stopped at once); a job given the GPU whole stops it at once
//! SyslogSocket=/dev/log            # where the prolog and epilog log (default /dev/log)
//! Placement=auto                   # who picks a share's GPU: auto (Slurm where gres.conf books mps per GPU), slurm, gpushare
//! MIGShares=refuse                 # refuse every share while NVML reports MIG on for a listed GPU; allow
//! Banner=stderr                    # a share's one line of limits: the job's stderr, slurmd's log only (log), or off
//! NodeName=gpu[05-06] GPUDevices=/dev/nvidia[0-1] UnitsPerGPU=50   # for gpu05 and gpu06 only
//! ShareUsage=nvml                  # each share's GPU memory and SM use in the metrics, sampled by the node timer: nvml, none, or a program's path
//! UsageRecord=admincomment         # each ended job's peak memory and mean SM use per GPU in its AdminComment (sacctmgr, by the node timer); none
//! ```

use std::path::PathBuf;

pub use crate::shared::locations::{DEFAULT_STATE_DIR, GPU_MPS_CONF as CONF_NAME};
pub use crate::shared::syntax::{expand_devices, slurm_conf_values};

use super::scoped;
use crate::shared::syntax::{self as kv, ConfigError};

/// Default `UnitsPerGPU`.
pub const DEFAULT_UNITS_PER_GPU: u32 = 100;

/// Default `MaxClientsPerGPU`: what one MPS server serves on Volta and newer.
pub const DEFAULT_MAX_CLIENTS_PER_GPU: u32 = 48;

/// Default `DaemonLinger`, seconds: a GPU's next share within a minute
/// finds its daemon and server running.
pub const DEFAULT_DAEMON_LINGER_SECS: u32 = 60;

/// Where the MPS control daemon comes from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum MpsControl {
    /// `MPSControl=auto`: `nvidia-cuda-mps-control` from PATH or the usual
    /// install directories (slurmd runs the Prolog without PATH); where
    /// there is none, a share is refused or run as `MPSFailure=` says.
    #[default]
    FromPath,
    /// Never start MPS daemons (a site that runs them itself).
    Disabled,
    /// This program.
    Program(PathBuf),
}

/// Who picks the GPU of a share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Placement {
    /// Slurm where gres.conf books mps per GPU (`File=` on the mps lines),
    /// gpushare where it books a node-wide Count (see [`crate::shared::booking`]).
    #[default]
    Auto,
    /// Slurm: gpushare records the GPU in `SLURM_JOB_GPUS` and leaves the
    /// job's devices to Slurm.
    Slurm,
    /// gpushare: the least-loaded GPU, confined through cgroup v1.
    Gpushare,
}

/// A share's device memory limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemoryLimit {
    /// The share's part of the GPU's memory (units / UnitsPerGPU), where
    /// the GPU's memory is known (NVML or `GPUMemory=`).
    #[default]
    Proportional,
    /// No device memory limit.
    Unlimited,
    /// This many MiB for every share.
    Fixed(u64),
}

/// What to do with a share that only fits on a GPU whose MPS server
/// serves another user (one user per server, in MPS's default mode).
///
/// NVIDIA's documents say such a client is *queued*: the control daemon
/// asks the other user's server to shut down once all its clients are
/// done and starts the new user's server only then (nvidia-cuda-mps-control(1));
/// the current troubleshooting guide lists the same case ("User ID Mismatch
/// Without Multi-User Mode") under the server not accepting new clients.
/// Neither is time-slicing: the job's CUDA work cannot run until the other
/// user's clients on that GPU have exited, or fails to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OtherUsers {
    /// Place it on the least-loaded such GPU anyway; the job's output says
    /// that its CUDA work waits until the other user's jobs there end.
    Queue,
    /// Refuse the job with the reason (the default: a refused job is told
    /// at once and can be resubmitted, a queued one holds its allocation
    /// idle for as long as the other user's jobs run).
    #[default]
    Refuse,
}

/// What a share gets whose GPU's MPS daemon cannot be started, reached
/// or given its limits (`MPSFailure=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MpsFailure {
    /// Refused with the reason and sent to another node: a share never runs
    /// without its limits (the default).
    #[default]
    Refuse,
    /// Run without MPS, its output saying so: no thread or memory limit,
    /// its work beside other jobs' on the GPU. A site's knowing choice.
    Run,
}

/// Where a share's one line of limits goes (`Banner=`): the line that
/// tells a job its GPU, thread percentage and memory limit, or that it
/// runs without MPS or waits for another user's server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Banner {
    /// The job's stderr, before its first task's own output (the default:
    /// what sites upgrading have, and the only place a user sees the
    /// limits CUDA does not report).
    #[default]
    Stderr,
    /// slurmd's log (slurmstepd's, through Slurm's logging), never the
    /// job's output: for sites whose scripts parse `srun ... 2>&1`.
    Log,
    /// Nowhere.
    Off,
}

/// Where the node timer gets each share's use of its GPU (`ShareUsage=`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ShareUsage {
    /// `gpu-mps` asks NVML in a child process of its own (the default).
    #[default]
    Nvml,
    /// Not sampled: no per-share figures in the metrics.
    Off,
    /// This program, which prints what `gpu-mps --nvml-usage` prints (the
    /// test cluster's stand-in for NVML).
    Program(PathBuf),
}

/// Whether the node's files show who runs what (`PrivateData=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PrivateData {
    /// As Slurm's own `PrivateData` in slurm.conf: hidden where it hides
    /// jobs or users.
    #[default]
    Auto,
    /// Hidden: the status copy and the DCGM job mapping readable by root
    /// only, no user label in the metrics.
    Yes,
    /// Shown to everyone on the node (and, through node_exporter, to
    /// whoever reads its metrics).
    No,
}

/// Whether slurm.conf's text (`slurm_conf`) hides who runs what from
/// other users: a `PrivateData=` whose value names `jobs`, `users` or
/// `all`.
///
/// Both flags count. `jobs` hides other users' jobs (`squeue` shows a
/// user their own only), and which user runs a job on a GPU is a fact of
/// that job; `users` keeps each user to their own user and association
/// records (`sacctmgr show user`), so a site that sets it does not want
/// users named to each other either. Read as slurmctld reads it
/// (`_validate_and_set_defaults` in read_config.c, 22.05 to 26.05): a
/// case-blind substring test on the whole value, `job` for jobs, `user`
/// for users, `all` for every flag; so `PrivateData=job` hides too. Every
/// such line counts, not only the last: a doubt hides.
pub fn slurm_hides_users(slurm_conf: &str) -> bool {
    slurm_conf_values(slurm_conf, "PrivateData").any(|v| {
        let v = v.to_ascii_lowercase();
        ["job", "user", "all"].iter().any(|h| v.contains(h))
    })
}

impl GpuMpsConfig {
    /// Whether this node keeps who runs what to root: `PrivateData=yes`,
    /// or `auto` where `slurm_conf` (slurm.conf's text) hides jobs or
    /// users; `None` for `auto` where slurm.conf could not be read.
    pub fn hides_users(&self, slurm_conf: Option<&str>) -> Option<bool> {
        match self.private_data {
            PrivateData::Yes => Some(true),
            PrivateData::No => Some(false),
            PrivateData::Auto => slurm_conf.map(slurm_hides_users),
        }
    }
}

/// The parsed file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuMpsConfig {
    pub units_per_gpu: u32,
    /// `None`: every `/dev/nvidia<N>` present, in N order.
    pub gpu_devices: Option<Vec<PathBuf>>,
    pub state_dir: PathBuf,
    pub slurm_mps_count: Option<u64>,
    /// Device memory of one GPU, in MiB.
    pub gpu_memory_mib: Option<u64>,
    pub mps_control: MpsControl,
    /// Where the prolog and epilog send their log lines (`None`: /dev/log).
    pub syslog_socket: Option<PathBuf>,
    pub placement: Placement,
    pub memory_limit: MemoryLimit,
    /// Run each GPU's daemon as one multi-user server (the option its
    /// control program's `-h` names, see `daemon::multi_user_flag`).
    pub multi_user: bool,
    pub other_users: OtherUsers,
    pub max_clients_per_gpu: u32,
    /// Seconds a GPU's MPS daemon (and its server) stays after its last
    /// share ends before the node timer stops it (`DaemonLinger=`, 0: the
    /// epilog stops it). A job Slurm gives the GPU whole stops it at once.
    pub daemon_linger_secs: u32,
    /// The node's metrics for node_exporter's textfile collector (`*.prom`);
    /// `None`: no metrics, no counters.
    pub metrics_file: Option<PathBuf>,
    /// dcgm-exporter's HPC job mapping directory (one file per GPU).
    pub dcgm_job_mapping_dir: Option<PathBuf>,
    /// `MIGShares=allow`: place shares on GPUs with MIG enabled (the
    /// default, `refuse`, refuses every share while a listed GPU has MIG on).
    pub mig_shares: bool,
    pub private_data: PrivateData,
    /// What a share gets whose GPU's MPS daemon cannot be started, reached
    /// or given its limits.
    pub mps_failure: MpsFailure,
    /// `ComputeMode=exclusive` (the default): a GPU runs in EXCLUSIVE_PROCESS
    /// compute mode while its MPS daemon runs, so nothing but the MPS server
    /// holds a context there; its earlier mode comes back after its last
    /// share. `leave`: the site's mode.
    pub exclusive_while_shared: bool,
    /// Where a share's line of limits goes.
    pub banner: Banner,
    /// Where the node timer gets each share's use of its GPU.
    pub share_usage: ShareUsage,
    /// `UsageRecord=admincomment` (the default): the node timer writes
    /// each ended job's figures in its `AdminComment`; `none`: only the
    /// metrics' histograms count them.
    pub usage_record: bool,
    /// The driver's CUDA library the MPS self-test loads (`CudaLibrary=`):
    /// a bare file name (the loader's search path) or an absolute path.
    pub cuda_library: PathBuf,
    /// When the node proves its MPS limits on its own (`SelfTest=`).
    pub self_test: SelfTest,
    /// The unprivileged user `gpu-mps selftest` runs its client as.
    pub self_test_user: String,
    /// `PrivateMPS=allow`: a job holding GPUs whole may ask for an MPS
    /// daemon of its own there (`--gpu-mps=private`, see `mps::private`).
    pub private_mps: bool,
    /// The program slurmstepd starts beside each share's step to end its
    /// MPS clients before Slurm's SIGKILL (`StepGuard=`, see
    /// `node::step_guard`).
    pub step_guard: StepGuard,
}

/// `StepGuard=`: the step guard's program.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StepGuard {
    /// `auto`: `gpu-mps-epilog` where the packages and `make install`
    /// put it ([`STEP_GUARD_PLACES`]); none found, no guard.
    #[default]
    Auto,
    /// `none`: no guard (a share's clients are ended only once its tasks
    /// ended, see `node::step_end`).
    Disabled,
    /// This program (a `gpu-mps-epilog`).
    Program(PathBuf),
}

/// Where `StepGuard=auto` looks for `gpu-mps-epilog`, in order: the
/// packages' place, then `make install`'s default prefix.
pub const STEP_GUARD_PLACES: [&str; 2] = [
    "/usr/libexec/gpushare/gpu-mps-epilog",
    "/usr/local/libexec/gpushare/gpu-mps-epilog",
];

impl StepGuard {
    /// The program to start, `None` for no guard.
    pub fn program(&self) -> Option<PathBuf> {
        match self {
            StepGuard::Disabled => None,
            StepGuard::Program(p) => Some(p.clone()),
            StepGuard::Auto => STEP_GUARD_PLACES
                .iter()
                .map(PathBuf::from)
                .find(|p| p.is_file()),
        }
    }
}

/// `SelfTest=`: when a node runs the MPS self-test on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SelfTest {
    /// Only when an admin runs `gpu-mps selftest` (the default).
    #[default]
    Off,
    /// Once after each start of a GPU's MPS daemon, in the prolog that
    /// started it, as the job's user: a failure refuses shares on that GPU.
    DaemonStart,
}

/// The driver library's name where `CudaLibrary=` is not set.
pub const DEFAULT_CUDA_LIBRARY: &str = "libcuda.so.1";
/// The self-test's user where `SelfTestUser=` is not set.
pub const DEFAULT_SELF_TEST_USER: &str = "nobody";

impl Default for GpuMpsConfig {
    fn default() -> Self {
        Self {
            units_per_gpu: DEFAULT_UNITS_PER_GPU,
            gpu_devices: None,
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            slurm_mps_count: None,
            gpu_memory_mib: None,
            mps_control: MpsControl::default(),
            syslog_socket: None,
            placement: Placement::default(),
            memory_limit: MemoryLimit::default(),
            multi_user: false,
            other_users: OtherUsers::default(),
            max_clients_per_gpu: DEFAULT_MAX_CLIENTS_PER_GPU,
            daemon_linger_secs: DEFAULT_DAEMON_LINGER_SECS,
            metrics_file: None,
            dcgm_job_mapping_dir: None,
            mig_shares: false,
            private_data: PrivateData::Auto,
            mps_failure: MpsFailure::Refuse,
            // Seen on a GPU (docs/hardware.md): in DEFAULT mode a process
            // that bypasses MPS (a share's task that drops its pipe
            // directory) gets the whole GPU, time-sliced, without limits.
            exclusive_while_shared: true,
            banner: Banner::Stderr,
            share_usage: ShareUsage::Nvml,
            usage_record: true,
            cuda_library: PathBuf::from(DEFAULT_CUDA_LIBRARY),
            self_test: SelfTest::Off,
            self_test_user: DEFAULT_SELF_TEST_USER.to_owned(),
            private_mps: false,
            step_guard: StepGuard::Auto,
        }
    }
}

/// The keys of `gpu_mps.conf` (besides `NodeName=`, see [`scoped`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    UnitsPerGpu,
    GpuDevices,
    StateDir,
    SlurmMpsCount,
    GpuMemory,
    MpsControl,
    SyslogSocket,
    Placement,
    MemoryLimit,
    MultiUser,
    OtherUsers,
    MaxClientsPerGpu,
    DaemonLinger,
    MetricsFile,
    DcgmJobMappingDir,
    MigShares,
    PrivateData,
    MpsFailure,
    ComputeMode,
    Banner,
    ShareUsage,
    UsageRecord,
    CudaLibrary,
    SelfTest,
    SelfTestUser,
    PrivateMps,
    StepGuard,
}

impl Key {
    const ALL: [Key; 27] = [
        Key::UnitsPerGpu,
        Key::GpuDevices,
        Key::StateDir,
        Key::SlurmMpsCount,
        Key::GpuMemory,
        Key::MpsControl,
        Key::SyslogSocket,
        Key::Placement,
        Key::MemoryLimit,
        Key::MultiUser,
        Key::OtherUsers,
        Key::MaxClientsPerGpu,
        Key::DaemonLinger,
        Key::MetricsFile,
        Key::DcgmJobMappingDir,
        Key::MigShares,
        Key::PrivateData,
        Key::MpsFailure,
        Key::ComputeMode,
        Key::Banner,
        Key::ShareUsage,
        Key::UsageRecord,
        Key::CudaLibrary,
        Key::SelfTest,
        Key::SelfTestUser,
        Key::PrivateMps,
        Key::StepGuard,
    ];

    /// The canonical spelling, used in messages.
    fn name(self) -> &'static str {
        match self {
            Key::UnitsPerGpu => "UnitsPerGPU",
            Key::GpuDevices => "GPUDevices",
            Key::StateDir => "StateDir",
            Key::SlurmMpsCount => "SlurmMpsCount",
            Key::GpuMemory => "GPUMemory",
            Key::MpsControl => "MPSControl",
            Key::SyslogSocket => "SyslogSocket",
            Key::Placement => "Placement",
            Key::MemoryLimit => "MemoryLimit",
            Key::MultiUser => "MultiUser",
            Key::OtherUsers => "OtherUsers",
            Key::MaxClientsPerGpu => "MaxClientsPerGPU",
            Key::DaemonLinger => "DaemonLinger",
            Key::MetricsFile => "MetricsFile",
            Key::DcgmJobMappingDir => "DCGMJobMappingDir",
            Key::MigShares => "MIGShares",
            Key::PrivateData => "PrivateData",
            Key::MpsFailure => "MPSFailure",
            Key::ComputeMode => "ComputeMode",
            Key::Banner => "Banner",
            Key::ShareUsage => "ShareUsage",
            Key::UsageRecord => "UsageRecord",
            Key::CudaLibrary => "CudaLibrary",
            Key::SelfTest => "SelfTest",
            Key::SelfTestUser => "SelfTestUser",
            Key::PrivateMps => "PrivateMPS",
            Key::StepGuard => "StepGuard",
        }
    }

    fn from_name(name: &str) -> Option<Key> {
        kv::key_named(&Key::ALL, Key::name, name)
    }

    /// The value the key takes where the file does not set it, as the
    /// file would write it; `None`: no value (unset, or found at run time).
    fn default_text(self) -> Option<&'static str> {
        Some(match self {
            Key::UnitsPerGpu => "100",
            Key::StateDir => DEFAULT_STATE_DIR,
            Key::MpsControl | Key::Placement | Key::PrivateData | Key::StepGuard => "auto",
            Key::SyslogSocket => DEFAULT_SYSLOG_SOCKET,
            Key::MemoryLimit => "proportional",
            Key::MultiUser | Key::SelfTest | Key::PrivateMps => "no",
            Key::OtherUsers | Key::MigShares | Key::MpsFailure => "refuse",
            Key::MaxClientsPerGpu => "48",
            Key::DaemonLinger => "60",
            Key::ComputeMode => "exclusive",
            Key::Banner => "stderr",
            Key::ShareUsage => "nvml",
            Key::UsageRecord => "admincomment",
            Key::CudaLibrary => DEFAULT_CUDA_LIBRARY,
            Key::SelfTestUser => DEFAULT_SELF_TEST_USER,
            Key::GpuDevices
            | Key::SlurmMpsCount
            | Key::GpuMemory
            | Key::MetricsFile
            | Key::DcgmJobMappingDir => return None,
        })
    }

    /// `value` as an absolute path, the only kind a path key takes.
    fn absolute(self, value: &str) -> Result<PathBuf, String> {
        if value.starts_with('/') {
            Ok(PathBuf::from(value))
        } else {
            Err(format!(
                "{} must be an absolute path, got \"{value}\"",
                self.name()
            ))
        }
    }

    /// Sets this key's field of `cfg` from `value` (never empty).
    fn apply(self, cfg: &mut GpuMpsConfig, value: &str) -> Result<(), String> {
        match self {
            Key::UnitsPerGpu => {
                cfg.units_per_gpu = value
                    .parse()
                    .ok()
                    .filter(|&u: &u32| (1..=1_000_000).contains(&u))
                    .ok_or_else(|| {
                        format!("UnitsPerGPU must be an integer from 1 to 1000000, got \"{value}\"")
                    })?;
            }
            Key::GpuDevices => cfg.gpu_devices = Some(expand_devices(value)?),
            Key::StateDir => cfg.state_dir = self.absolute(value)?,
            Key::SlurmMpsCount => {
                let count = value.parse().ok().filter(|&c: &u64| c > 0);
                cfg.slurm_mps_count = Some(count.ok_or_else(|| {
                    format!("SlurmMpsCount must be a positive integer, got \"{value}\"")
                })?);
            }
            Key::GpuMemory => {
                cfg.gpu_memory_mib = Some(parse_mib(value).ok_or_else(|| {
                    format!("GPUMemory must be a size such as 48G or 40960M, got \"{value}\"")
                })?);
            }
            Key::MpsControl => {
                cfg.mps_control = if value.eq_ignore_ascii_case("none") {
                    MpsControl::Disabled
                } else if value.eq_ignore_ascii_case("auto") {
                    MpsControl::FromPath
                } else if value.starts_with('/') {
                    MpsControl::Program(PathBuf::from(value))
                } else {
                    return Err(format!(
                        "MPSControl must be auto, none or an absolute path, got \"{value}\""
                    ));
                };
            }
            Key::StepGuard => {
                cfg.step_guard = if value.eq_ignore_ascii_case("none") {
                    StepGuard::Disabled
                } else if value.eq_ignore_ascii_case("auto") {
                    StepGuard::Auto
                } else if value.starts_with('/') {
                    StepGuard::Program(PathBuf::from(value))
                } else {
                    return Err(format!(
                        "StepGuard must be auto, none or an absolute path, got \"{value}\""
                    ));
                };
            }
            Key::SyslogSocket => cfg.syslog_socket = Some(self.absolute(value)?),
            Key::MetricsFile => {
                let path = self.absolute(value)?;
                // node_exporter's textfile collector reads *.prom only.
                if path.extension().is_none_or(|e| e != "prom") {
                    return Err(format!(
                        "MetricsFile must end in .prom (node_exporter's textfile collector reads \
                         only those), got \"{value}\""
                    ));
                }
                cfg.metrics_file = Some(path);
            }
            Key::DcgmJobMappingDir => cfg.dcgm_job_mapping_dir = Some(self.absolute(value)?),
            Key::Placement => {
                cfg.placement = match value.to_ascii_lowercase().as_str() {
                    "auto" => Placement::Auto,
                    "slurm" => Placement::Slurm,
                    "gpushare" => Placement::Gpushare,
                    _ => {
                        return Err(format!(
                            "Placement must be auto, slurm or gpushare, got \"{value}\""
                        ))
                    }
                };
            }
            Key::MemoryLimit => {
                cfg.memory_limit = match value.to_ascii_lowercase().as_str() {
                    "proportional" => MemoryLimit::Proportional,
                    "none" => MemoryLimit::Unlimited,
                    _ => MemoryLimit::Fixed(parse_mib(value).ok_or_else(|| {
                        format!(
                            "MemoryLimit must be proportional, none or a size such as 8G, got \"{value}\""
                        )
                    })?),
                };
            }
            Key::MigShares => {
                cfg.mig_shares = match value.to_ascii_lowercase().as_str() {
                    "allow" => true,
                    "refuse" => false,
                    _ => {
                        return Err(format!(
                            "MIGShares must be refuse or allow, got \"{value}\""
                        ))
                    }
                };
            }
            Key::PrivateData => {
                cfg.private_data = match value.to_ascii_lowercase().as_str() {
                    "auto" => PrivateData::Auto,
                    "yes" | "true" | "1" => PrivateData::Yes,
                    "no" | "false" | "0" => PrivateData::No,
                    _ => {
                        return Err(format!(
                            "PrivateData must be auto, yes or no, got \"{value}\""
                        ))
                    }
                };
            }
            Key::MpsFailure => {
                cfg.mps_failure = match value.to_ascii_lowercase().as_str() {
                    "refuse" => MpsFailure::Refuse,
                    "run" => MpsFailure::Run,
                    _ => return Err(format!("MPSFailure must be refuse or run, got \"{value}\"")),
                };
            }
            Key::ComputeMode => {
                cfg.exclusive_while_shared = match value.to_ascii_lowercase().as_str() {
                    "exclusive" => true,
                    "leave" => false,
                    _ => {
                        return Err(format!(
                            "ComputeMode must be leave or exclusive, got \"{value}\""
                        ))
                    }
                };
            }
            Key::Banner => {
                cfg.banner = match value.to_ascii_lowercase().as_str() {
                    "stderr" => Banner::Stderr,
                    "log" => Banner::Log,
                    "off" | "no" | "none" => Banner::Off,
                    _ => {
                        return Err(format!(
                            "Banner must be stderr, log or off, got \"{value}\""
                        ))
                    }
                };
            }
            Key::ShareUsage => {
                cfg.share_usage = match value.to_ascii_lowercase().as_str() {
                    "nvml" => ShareUsage::Nvml,
                    "none" | "off" | "no" => ShareUsage::Off,
                    _ if value.starts_with('/') => ShareUsage::Program(PathBuf::from(value)),
                    _ => {
                        return Err(format!(
                            "ShareUsage must be nvml, none or an absolute path, got \"{value}\""
                        ))
                    }
                };
            }
            Key::UsageRecord => {
                cfg.usage_record = match value.to_ascii_lowercase().as_str() {
                    "admincomment" => true,
                    "none" | "off" | "no" => false,
                    _ => {
                        return Err(format!(
                            "UsageRecord must be admincomment or none, got \"{value}\""
                        ))
                    }
                };
            }
            Key::CudaLibrary => {
                // A bare name goes to the loader's search path; anything
                // with a slash must be absolute (never the cwd's).
                if value.contains('/') && !value.starts_with('/') {
                    return Err(format!(
                        "CudaLibrary must be a file name such as libcuda.so.1 or an absolute \
                         path, got \"{value}\""
                    ));
                }
                cfg.cuda_library = PathBuf::from(value);
            }
            Key::SelfTest => {
                cfg.self_test = match value.to_ascii_lowercase().as_str() {
                    "no" | "none" | "off" => SelfTest::Off,
                    "daemon-start" => SelfTest::DaemonStart,
                    _ => {
                        return Err(format!(
                            "SelfTest must be no or daemon-start, got \"{value}\""
                        ))
                    }
                };
            }
            Key::SelfTestUser => {
                let name_like = !value.starts_with('-')
                    && value
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
                if !name_like {
                    return Err(format!("SelfTestUser must be a user name, got \"{value}\""));
                }
                cfg.self_test_user = value.to_owned();
            }
            Key::PrivateMps => {
                cfg.private_mps = match value.to_ascii_lowercase().as_str() {
                    "allow" | "yes" => true,
                    "no" | "refuse" => false,
                    _ => return Err(format!("PrivateMPS must be allow or no, got \"{value}\"")),
                };
            }
            Key::MultiUser => {
                cfg.multi_user = match value.to_ascii_lowercase().as_str() {
                    "yes" | "true" | "1" => true,
                    "no" | "false" | "0" => false,
                    _ => return Err(format!("MultiUser must be yes or no, got \"{value}\"")),
                };
            }
            Key::OtherUsers => {
                cfg.other_users = match value.to_ascii_lowercase().as_str() {
                    "queue" => OtherUsers::Queue,
                    "refuse" => OtherUsers::Refuse,
                    _ => {
                        return Err(format!(
                            "OtherUsers must be queue or refuse, got \"{value}\""
                        ))
                    }
                };
            }
            Key::MaxClientsPerGpu => {
                cfg.max_clients_per_gpu = value
                    .parse()
                    .ok()
                    .filter(|&n: &u32| (1..=1024).contains(&n))
                    .ok_or_else(|| {
                        format!(
                            "MaxClientsPerGPU must be an integer from 1 to 1024, got \"{value}\""
                        )
                    })?;
            }
            Key::DaemonLinger => {
                cfg.daemon_linger_secs = value
                    .parse()
                    .ok()
                    .filter(|&n: &u32| n <= 86_400)
                    .ok_or_else(|| {
                        format!("DaemonLinger must be seconds from 0 to 86400, got \"{value}\"")
                    })?;
            }
        }
        Ok(())
    }
}

/// Every key of the file (besides `NodeName=`) with the value it takes
/// where the file does not set it, as the file would write it (`None`: no
/// value): what the manual page, the docs and the shipped example are
/// held to.
pub fn keys() -> impl Iterator<Item = (&'static str, Option<&'static str>)> {
    Key::ALL.iter().map(|k| (k.name(), k.default_text()))
}

/// Where the prolog and epilog log where `SyslogSocket=` is not set.
pub const DEFAULT_SYSLOG_SOCKET: &str = "/dev/log";

/// One key of the file as a node takes it: the value as written, its
/// line, and the `NodeName=` list of that line (`None`: a line for every
/// node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    pub key: &'static str,
    pub value: String,
    pub line: usize,
    pub node_name: Option<String>,
}

/// `gpu_mps.conf` as one node takes it (see [`parse_for`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSettings {
    /// The node's configuration; `None` where the file gives it no GPUs,
    /// and `no_gpus` says why: it shares nothing, as a node without the file.
    pub cfg: Option<GpuMpsConfig>,
    pub no_gpus: Option<String>,
    /// Each key the file sets for the node, in file order: the value it
    /// takes and where from (every other key has its default).
    pub taken: Vec<Taken>,
    /// The `NodeName=` lines for the node: line, list as written.
    pub node_lines: Vec<(usize, String)>,
    /// Whether the file has `NodeName=` lines at all.
    pub scoped: bool,
}

/// Parses the text of `gpu_mps.conf` for node `node` (as Slurm names it:
/// `SLURMD_NODENAME`); `file` only names it in errors.
///
/// Every line is checked, whichever node it is for: the file is one for
/// all of them, and a mistake on another node's line shows on every node
/// (and in `gpu-mps config` anywhere), never only once that node starts a
/// job. A node takes the lines without `NodeName=`, then those whose
/// `NodeName=` names it, whose values win wherever they stand (as
/// gres.conf's `NodeName=tux3 AutoDetect=off` after `AutoDetect=nvml`).
/// A key may be set once on the lines for every node, and once for each
/// node on the `NodeName=` lines: two `NodeName=` lines that both name a
/// node and set the same key are an error naming both lines, whatever the
/// values, rather than one silently winning.
///
/// A file with `NodeName=` lines says which nodes share GPUs: those a
/// `GPUDevices=` reaches (on a line without `NodeName=`, or on one naming
/// the node). Any other node reading it, a CPU node of a shared
/// `/etc/slurm`, is given no GPUs. A file without `NodeName=` lines is
/// every node's as before (`GPUDevices` by default every `/dev/nvidia<N>`).
pub fn parse_for(text: &str, file: &str, node: &str) -> Result<NodeSettings, ConfigError> {
    let lines = scoped::read(text).map_err(|(line, why)| ConfigError::new(file, line, why))?;
    let mut checked: Vec<(Key, &scoped::Word<'_>)> = Vec::with_capacity(lines.words.len());
    let mut for_all: Vec<(Key, usize)> = Vec::new();
    let mut per_node: std::collections::HashMap<(Key, &str), usize> = Default::default();
    let mut scratch = GpuMpsConfig::default();
    for w in &lines.words {
        let err = |reason: String| ConfigError::new(file, w.line, reason);
        let Some(key) = Key::from_name(w.key) else {
            let known: Vec<&str> = Key::ALL.iter().map(|k| k.name()).collect();
            return Err(err(format!(
                "unknown key \"{}\" (known: NodeName, {})",
                w.key,
                known.join(", ")
            )));
        };
        if w.value.is_empty() {
            return Err(err(format!("{} has an empty value", key.name())));
        }
        key.apply(&mut scratch, w.value).map_err(err)?;
        match w.scope.and_then(|s| lines.scopes.get(s)) {
            None => {
                if let Some((_, first)) = for_all.iter().find(|(k, _)| *k == key) {
                    return Err(err(format!("{} already set on line {first}", key.name())));
                }
                for_all.push((key, w.line));
            }
            Some(scope) => {
                for name in scope.nodes() {
                    let Some(first) = per_node.insert((key, name), w.line) else {
                        continue;
                    };
                    return Err(err(if first == w.line {
                        format!("{} already set on line {first}", key.name())
                    } else {
                        format!(
                            "{} for node {name} already set on line {first}: two NodeName= \
                             lines that name one node may not set the same key",
                            key.name()
                        )
                    }));
                }
            }
        }
        checked.push((key, w));
    }
    let everyone = checked.iter().filter(|(_, w)| w.scope.is_none());
    let this_node = checked
        .iter()
        .filter(|(_, w)| w.scope.is_some() && lines.is_for(w, node));
    let mut cfg = GpuMpsConfig::default();
    let mut taken: Vec<Taken> = Vec::new();
    for (key, w) in everyone.chain(this_node) {
        key.apply(&mut cfg, w.value)
            .map_err(|e| ConfigError::new(file, w.line, e))?;
        taken.retain(|t| t.key != key.name());
        taken.push(Taken {
            key: key.name(),
            value: w.value.to_owned(),
            line: w.line,
            node_name: w
                .scope
                .and_then(|s| lines.scopes.get(s))
                .map(|s| s.list.clone()),
        });
    }
    taken.sort_by_key(|t| t.line);
    let scoped = !lines.scopes.is_empty();
    let gpus = !scoped || taken.iter().any(|t| t.key == Key::GpuDevices.name());
    let no_gpus = (!gpus).then(|| {
        format!(
            "{file} gives node {node} no GPUs: it has NodeName= lines, and no GPUDevices= on a \
             line without NodeName= nor on a NodeName= line that names {node}"
        )
    });
    Ok(NodeSettings {
        cfg: gpus.then_some(cfg),
        no_gpus,
        taken,
        node_lines: lines
            .scopes_of(node)
            .map(|s| (s.line, s.list.clone()))
            .collect(),
        scoped,
    })
}

/// `NodeName=` lines as a sentence names them: `line 5 (NodeName=gpu05)`,
/// `lines 4 (NodeName=gpu[01-04]), 6 (NodeName=gpu04)`.
pub fn node_lines_text(lines: &[(usize, String)]) -> String {
    let each: Vec<String> = lines
        .iter()
        .map(|(line, list)| format!("{line} (NodeName={list})"))
        .collect();
    let s = if each.len() == 1 { "" } else { "s" };
    format!("line{s} {}", each.join(", "))
}

/// The configuration node `node` takes from the text of `gpu_mps.conf`
/// ([`parse_for`]); `Ok(None)`: the file gives it no GPUs.
pub fn parse(text: &str, file: &str, node: &str) -> Result<Option<GpuMpsConfig>, ConfigError> {
    parse_for(text, file, node).map(|s| s.cfg)
}

/// What a job holding an MPS share is told on a node that the node's
/// `gpu_mps.conf` gives no GPUs (`why`, [`NodeSettings::no_gpus`]): as on a
/// node without the file, the share is refused, every other job left alone.
pub fn no_gpus_refusal(job: u32, why: &str) -> String {
    format!(
        "gpu_mps: job {job}: Slurm gave this job an MPS share on this node, but {why}; the \
         share would run as Slurm alone, without gpushare's GPU placement, confinement and MPS \
         daemon, so it is refused. Sysadmin: give this node GPUDevices= in {CONF_NAME} (a \
         NodeName= line that names it), or take mps off this node's Gres"
    )
}

/// What a job holding an MPS share is told on a node where gpushare has no
/// configuration: Slurm alone would run the share unplaced (22.05 stacks
/// every share on GPU 0), unconfined and without an MPS daemon, so gpushare
/// refuses it and says why, in the job's output and the node's log.
pub fn missing_conf_refusal(job: u32, looked_at: &[std::path::PathBuf]) -> String {
    let places: Vec<String> = looked_at.iter().map(|p| p.display().to_string()).collect();
    format!(
        "gpu_mps: job {job}: Slurm gave this job an MPS share on this node, but gpushare has \
         no configuration here (no {CONF_NAME} at {}); the share would run as Slurm alone, \
         without gpushare's GPU placement, confinement and MPS daemon, so it is refused. \
         Sysadmin: install {CONF_NAME} on this node ({} on a configless node: slurmctld does \
         not send it), or take mps off this node's Gres. This job: resubmit it with --exclude \
         naming this node, or ask for a whole GPU of this node's type (--gres=gpu:TYPE:1)",
        places.join(" nor "),
        crate::shared::locations::NODE_CONF_DIR
    )
}

/// Where this node's gpu_mps.conf is: `explicit` (`conf=` in plugstack.conf,
/// `--conf`), else beside the slurm.conf in use, else in
/// [`NODE_CONF_DIR`](crate::shared::locations::NODE_CONF_DIR) (a configless
/// node's own file); `Err`: nowhere, with the places looked at.
pub fn locate(
    explicit: Option<&std::path::Path>,
) -> Result<std::path::PathBuf, Vec<std::path::PathBuf>> {
    use crate::shared::locations::{first_existing, node_conf_candidates};
    first_existing(node_conf_candidates(explicit, None, CONF_NAME))
}

/// Reads and parses the file at `path` for node `node` ([`parse_for`]).
/// `Ok(None)`: there is none, so the node shares nothing (what the prolog,
/// epilog and SPANK plugin do with that is theirs to decide).
pub fn load(path: &std::path::Path, node: &str) -> Result<Option<NodeSettings>, ConfigError> {
    kv::load(path, |text, file| parse_for(text, file, node))
}

/// `48G`, `40960M`, `40960` (MiB) → MiB.
fn parse_mib(s: &str) -> Option<u64> {
    let (digits, factor) = match s.chars().last()?.to_ascii_uppercase() {
        'G' => (&s[..s.len() - 1], 1024),
        'M' => (&s[..s.len() - 1], 1),
        'T' => (&s[..s.len() - 1], 1024 * 1024),
        _ => (s, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .filter(|&n| n > 0)?
        .checked_mul(factor)
}

impl GpuMpsConfig {
    /// The `gres.conf` `Count` Slurm 22.05 needs so that a node of `gpus`
    /// GPUs admits `gpus × UnitsPerGPU` units at once: Slurm 22.05 puts all
    /// mps on GPU 0 and so admits only Count / gpus units (see
    /// docs/configuration.md, "Who places a share").
    pub fn slurm_count_for(&self, gpus: u32) -> u64 {
        u64::from(gpus) * u64::from(gpus) * u64::from(self.units_per_gpu)
    }

    /// Slurm's mps count of one GPU, which its
    /// `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` is relative to: the node's Count
    /// (`SlurmMpsCount`, else the one [`Self::slurm_count_for`] prescribes)
    /// over its GPUs, on every release (22.05 books it all on GPU 0 but
    /// still divides by the GPUs).
    pub fn slurm_per_gpu_count(&self, gpus: u32) -> u64 {
        let count = self
            .slurm_mps_count
            .unwrap_or_else(|| self.slurm_count_for(gpus));
        count.checked_div(u64::from(gpus)).unwrap_or(count)
    }

    /// The device memory limit of a share of `units`, in MiB, on a GPU of
    /// `gpu_mib` (NVML's figure, else `GPUMemory=`); `None`: no limit
    /// (`MemoryLimit=none`, or proportional with the GPU's memory unknown).
    pub fn memory_limit_mib(&self, units: u32, gpu_mib: Option<u64>) -> Option<u64> {
        match self.memory_limit {
            MemoryLimit::Unlimited => None,
            MemoryLimit::Fixed(mib) => Some(mib),
            MemoryLimit::Proportional => {
                let total = gpu_mib.or(self.gpu_memory_mib)?;
                Some((total * u64::from(units) / u64::from(self.units_per_gpu.max(1))).max(1))
            }
        }
    }

    /// A share's thread percentage, as Slurm computes it: units × 100 /
    /// UnitsPerGPU, rounded down, at least 1, at most 100.
    pub fn thread_percentage(&self, units: u32) -> u32 {
        let pct = u64::from(units) * 100 / u64::from(self.units_per_gpu.max(1));
        u32::try_from(pct.clamp(1, 100)).unwrap_or(100)
    }
}

#[cfg(test)]
mod tests;
