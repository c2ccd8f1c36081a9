//! What happens on a GPU node for MPS shares, between the slurmd prolog,
//! the SPANK plugin in slurmstepd and the epilog.
//!
//! - `gpu-mps-prolog` ([`prolog`]): classify the job from what Slurm put in
//!   its Prolog environment ([`JobEnv`]), place a share on the least-loaded
//!   GPU (or record a whole-GPU holder), start that GPU's MPS daemon. A
//!   share that cannot be placed is *refused*, not failed: a failing prolog
//!   drains the node, so the prolog writes a refusal note and the SPANK
//!   plugin fails the job with its text.
//! - SPANK `gpu_mps` ([`task_plan`]): read the placement, set each task's
//!   environment, confine its devices.
//! - `gpu-mps-epilog` ([`epilog`]): release the job; stop a GPU's MPS
//!   daemon when its last share ends.
//!
//! # What a job holds, and who says so
//!
//! Only slurmd's own variables decide: `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`
//! (an mps allocation) and `SLURM_JOB_GPUS` (GPUs held whole) come from the
//! job's credential, which slurmctld signed. A job without the percentage
//! holds no share, whatever its SPANK environment says. The exact units the
//! job_submit plugin recorded (`SPANK_GPUSHARE_MPS_UNITS`) are used only
//! where they agree with Slurm's percentage: Slurm rounds it down, and on
//! 22.05 a unit is less than 1 %, so the percentage alone cannot tell 48
//! from 50 units.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use super::booking::MpsBooking;
use super::config::{self, GpuMpsConfig, Placement};
use super::daemon::{self, MpsDaemon};
use super::dcgm::JobMapping;
use super::health;
use super::in_force;
use super::ledger::{Ledger, LedgerError, LedgerState, Record, ShareRecord, SlurmChoice, Snapshot};
use super::metrics::{self, Counters, Event};
use super::placement::PlacementError;
use super::placement::ServerRule;
use super::state_dir;
use super::status::{self, NodeStatus, StatusCopy};
use crate::shared::bounded;
use crate::shared::locations::beside_slurm_conf;
use crate::shared::{spank_env, ConfigError};

/// How long the prolog waits for `squeue` (asked only when a share finds
/// no room, to drop records of jobs that ended without an epilog).
pub const SQUEUE_TIMEOUT: Duration = Duration::from_secs(10);

/// A GPU node as the prolog, epilog and admin command see it.
#[derive(Debug)]
pub struct Node {
    pub cfg: GpuMpsConfig,
    pub gpu_count: u32,
    pub ledger: Ledger,
    /// The effective uid that owns the state (root on a real node).
    pub owner: u32,
    /// One GPU's memory in MiB as NVML reports it (`None`: no NVML here;
    /// `GPUMemory=` is used instead). Set through [`Node::set_gpu_memory`],
    /// which gives the ledger the same figure for new shares.
    gpu_memory_mib: Option<u64>,
    /// Restricts who may traverse a GPU's MPS directory to these uids (and
    /// root): the node programs set a POSIX ACL (`gpushare_admin::acl`);
    /// `None` leaves the directories 0755.
    pub pipe_guard: Option<PipeGuard>,
    /// Why no share may be placed now, though the node runs (gpu_mps.conf
    /// unusable or changed under running shares: see [`super::in_force`]).
    pub shares_refused: Option<String>,
    /// What the node's log must say about the configuration in force.
    pub conf_notes: Vec<String>,
    /// The listed GPUs that NVML reports in MIG mode (their device paths):
    /// while there is one and `MIGShares` is not `allow`, no share is
    /// placed. Set through [`Node::set_mig_minors`].
    mig_gpus: Vec<PathBuf>,
    /// Who runs what is root's to see (`PrivateData`, see [`hides_users`]):
    /// the status copy and DCGM files are root's, the metrics name no user.
    /// `None`: not known (the files keep their mode, the metrics name no
    /// user).
    pub private: Option<bool>,
    /// The GPUs set aside from sharing (see [`health`]): the prolog reads
    /// the record once, after setting aside the GPUs NVML reports lost.
    pub failed: health::FailedGpus,
}

/// See [`Node::pipe_guard`].
pub type PipeGuard = fn(&Path, &[u32]) -> std::io::Result<()>;

/// Lets only the users with a share on `gpu` (read from `state`) reach its
/// MPS pipes, where the node has a guard; a note when it cannot.
fn guard_pipes(node: &Node, state: &LedgerState, gpu: u32, notes: &mut Vec<String>) {
    let Some(guard) = node.pipe_guard else {
        return;
    };
    let mut uids: Vec<u32> = state
        .shares()
        .filter(|s| s.gpu == gpu)
        .map(|s| s.uid)
        .collect();
    uids.sort_unstable();
    uids.dedup();
    let dir = daemon::gpu_dir(&node.cfg, gpu);
    if let Err(e) = guard(&dir, &uids) {
        notes.push(format!(
            "{} stays open to every user ({e}): any job on this node can reach GPU {gpu}'s MPS \
             server; put StateDir on a filesystem with POSIX ACLs (tmpfs /run has them)",
            dir.display()
        ));
    }
}

/// Why a node cannot share GPUs (the prolog then fails and slurmd drains
/// the node, which is right: its jobs' GPUs would be wrong).
#[derive(Debug)]
pub enum Unfit {
    Config(ConfigError),
    /// No configuration can be trusted (see [`super::in_force`]).
    NoConfig(String),
    NoGpus(PathBuf),
    Ledger(LedgerError),
}

impl std::fmt::Display for Unfit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unfit::Config(e) => write!(f, "{e}"),
            Unfit::NoConfig(why) => f.write_str(why),
            Unfit::NoGpus(conf) => write!(
                f,
                "{}: no GPU device files found (set GPUDevices=)",
                conf.display()
            ),
            Unfit::Ledger(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Unfit {}

impl From<LedgerError> for Unfit {
    fn from(e: LedgerError) -> Self {
        Unfit::Ledger(e)
    }
}

impl Node {
    /// Opens the node with the configuration in force for `gpu_mps.conf`
    /// (read as a reader: see [`in_force::resolve`]) and its ledger with
    /// its status copy. `Ok(None)`: the node has no `gpu_mps.conf`, so it
    /// shares nothing.
    pub fn open(conf_path: &Path, owner: u32) -> Result<Option<Self>, Unfit> {
        if fs::symlink_metadata(conf_path).is_err() {
            return Ok(None);
        }
        let records = Path::new(in_force::NODE_RECORDS_DIR);
        let in_force = in_force::resolve(conf_path, records, owner, in_force::Role::Reader);
        Self::in_force(in_force.cfg.clone(), &in_force, conf_path, owner).map(Some)
    }

    /// The node of the configuration `in_force` resolved (its `cfg`, taken
    /// by the caller), with the shares it refuses and its notes.
    pub fn in_force(
        cfg: Option<GpuMpsConfig>,
        in_force: &in_force::InForce,
        conf_path: &Path,
        owner: u32,
    ) -> Result<Self, Unfit> {
        let Some(cfg) = cfg else {
            let why = in_force.shares_refused.clone();
            return Err(Unfit::NoConfig(why.unwrap_or_else(|| {
                format!("{}: no configuration can be used", conf_path.display())
            })));
        };
        let mut node = Self::with_config(cfg, conf_path, owner)?;
        node.shares_refused = in_force.shares_refused.clone();
        node.conf_notes = in_force.notes.clone();
        Ok(node)
    }

    /// The node of an already loaded `gpu_mps.conf` (read from `conf_path`).
    pub fn with_config(cfg: GpuMpsConfig, conf_path: &Path, owner: u32) -> Result<Self, Unfit> {
        let gpu_count = u32::try_from(gpu_devices(&cfg).len()).unwrap_or(u32::MAX);
        if gpu_count == 0 {
            return Err(Unfit::NoGpus(conf_path.to_path_buf()));
        }
        let private = hides_users(&cfg);
        let ledger = private_ledger(&cfg, owner, gpu_count, private)?;
        let mut node = Self {
            private,
            cfg,
            gpu_count,
            ledger,
            owner,
            gpu_memory_mib: None,
            pipe_guard: None,
            shares_refused: None,
            conf_notes: Vec::new(),
            mig_gpus: Vec::new(),
            failed: Default::default(),
        };
        node.set_gpu_memory(None);
        Ok(node)
    }

    /// The device minors (N of `/dev/nvidiaN`) NVML reports in MIG mode:
    /// the node's listed GPUs among them are kept for [`prolog`].
    pub fn set_mig_minors(&mut self, minors: &[u32]) {
        self.mig_gpus = gpu_devices(&self.cfg)
            .into_iter()
            .filter(|d| device_minor(d).is_some_and(|m| minors.contains(&m)))
            .collect();
    }

    /// The node's GPUs (their indexes in `GPUDevices`) whose device minor
    /// is among `minors`.
    pub fn gpus_of_minors(&self, minors: &[u32]) -> Vec<u32> {
        gpu_devices(&self.cfg)
            .iter()
            .enumerate()
            .filter(|(_, d)| device_minor(d).is_some_and(|m| minors.contains(&m)))
            .filter_map(|(i, _)| u32::try_from(i).ok())
            .collect()
    }

    /// The memory of this node's GPUs where known (NVML), for proportional
    /// limits when `gpu_mps.conf` has no `GPUMemory=`: new shares get
    /// their limit from it as they are placed.
    pub fn set_gpu_memory(&mut self, mib: Option<u64>) {
        self.gpu_memory_mib = mib;
        let cfg = self.cfg.clone();
        self.ledger
            .set_share_memory(super::ledger::ShareMemory(Arc::new(move |units| {
                cfg.memory_limit_mib(units, mib)
            })));
    }
}

/// A node of the GPU device files `devices` (none need exist) with its
/// state under `dir`, no MPS daemon, users shown, owned by this process's
/// user: for unit tests of what runs on a node.
#[cfg(test)]
pub(crate) fn test_node(dir: &Path, devices: &[&str]) -> Node {
    let cfg = GpuMpsConfig {
        state_dir: dir.join("state"),
        gpu_devices: Some(devices.iter().map(PathBuf::from).collect()),
        mps_control: config::MpsControl::Disabled,
        private_data: config::PrivateData::No,
        ..GpuMpsConfig::default()
    };
    let owner = rustix::process::geteuid().as_raw();
    Node::with_config(cfg, &dir.join("gpu_mps.conf"), owner).unwrap_or_else(|e| panic!("{e}"))
}

/// How this node's shares meet MPS servers (see [`ServerRule`]).
pub fn server_rule(cfg: &GpuMpsConfig) -> ServerRule {
    ServerRule {
        multi_user: cfg.multi_user,
        refuse_other_users: cfg.other_users == config::OtherUsers::Refuse,
        max_clients: cfg.max_clients_per_gpu,
    }
}

/// A job that runs on this node now, as slurmctld tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningJob {
    pub job: u32,
    /// Its GRES request names mps.
    pub holds_mps: bool,
}

/// This node as Slurm names it for an admin command: `given` (`--node`),
/// else `$SLURMD_NODENAME`, else the short hostname.
pub fn node_name(given: Option<String>) -> String {
    given
        .or_else(|| std::env::var("SLURMD_NODENAME").ok())
        .or_else(crate::shared::locations::short_hostname)
        .unwrap_or_default()
}

/// The jobs slurmctld says run on `node` (None when it cannot be asked in
/// [`SQUEUE_TIMEOUT`]: callers must then not drop anything).
pub fn running_jobs(node: &str) -> Result<Vec<RunningJob>, String> {
    let mut cmd = Command::new("squeue");
    cmd.args([
        "--noheader",
        "--nodelist",
        node,
        "--states=RUNNING,COMPLETING,CONFIGURING,SUSPENDED,STOPPED",
        "--format=%A|%b",
    ]);
    let ran = bounded::run(cmd, None, SQUEUE_TIMEOUT).map_err(|e| e.to_string())?;
    if !ran.status.success() {
        return Err(format!("squeue: {} {}", ran.status, ran.stderr.trim()));
    }
    ran.stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let (job, gres) = line.split_once('|').unwrap_or((line, ""));
            let job = job
                .trim()
                .parse()
                .map_err(|_| format!("squeue printed {line:?}, not a job id"))?;
            Ok(RunningJob {
                job,
                holds_mps: gres.contains("mps"),
            })
        })
        .collect()
}

/// What the node knows about a job from its Prolog/Epilog environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnv {
    pub job: u32,
    pub uid: u32,
    pub user: String,
    /// Slurm's `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`: set for mps jobs only,
    /// from the credential. The one sign that the job holds a share.
    pub mps_percentage: Option<u32>,
    /// The units in the SPANK environment (from job_submit/gpu_qos, or
    /// whatever a client sent): a claim, checked against the percentage.
    pub units_claimed: Option<u32>,
    /// `SLURM_JOB_GPUS`: the GPU indices Slurm allocated.
    pub job_gpus: Vec<u32>,
    /// `SLURMD_NODENAME`: this node, as Slurm names it; a refusal names it,
    /// so a job spanning nodes says which one refused.
    pub node: String,
}

impl JobEnv {
    /// Reads the variables slurmd gives a Prolog/Epilog.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let num = |name: &str| -> Result<Option<u32>, String> {
            match get(name) {
                None => Ok(None),
                Some(v) if v.trim().is_empty() => Ok(None),
                Some(v) => v
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| format!("{name}={v:?} is not a number")),
            }
        };
        let job = num("SLURM_JOB_ID")?
            .ok_or("SLURM_JOB_ID is not set: run me as slurmd's Prolog/Epilog")?;
        let uid = num("SLURM_JOB_UID")?.unwrap_or(0);
        let user = get("SLURM_JOB_USER").unwrap_or_else(|| uid.to_string());
        let job_gpus = match get("SLURM_JOB_GPUS") {
            Some(list) if !list.trim().is_empty() => list
                .split(',')
                .map(|g| {
                    g.trim()
                        .parse::<u32>()
                        .map_err(|_| format!("SLURM_JOB_GPUS={list:?} is not a list of indices"))
                })
                .collect::<Result<_, _>>()?,
            _ => Vec::new(),
        };
        // A claim that is not a number is no claim: it cannot make the
        // prolog fail (and the node drain) for what a client sent.
        let units_claimed =
            get(&spank_env::in_prolog(spank_env::MPS_UNITS)).and_then(|v| v.trim().parse().ok());
        let node = get("SLURMD_NODENAME")
            .filter(|n| !n.trim().is_empty())
            .or_else(crate::shared::locations::short_hostname)
            .unwrap_or_else(|| "this node".to_owned());
        Ok(Self {
            job,
            uid,
            user,
            mps_percentage: num("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")?,
            units_claimed,
            job_gpus,
            node,
        })
    }

    /// Whether the job holds an MPS share on this node: Slurm gave it a
    /// thread percentage, which only an mps allocation gets.
    pub fn is_share(&self) -> bool {
        self.mps_percentage.is_some()
    }
}

/// Slurm's mps count of one GPU, which its percentage is relative to: the
/// `Count` of gres.conf's per-GPU mps lines where it has them, else the
/// node-wide count over the GPUs (see [`GpuMpsConfig::slurm_per_gpu_count`]).
pub fn slurm_per_gpu(cfg: &GpuMpsConfig, gpu_count: u32, booking: &MpsBooking) -> u64 {
    booking
        .per_gpu_count
        .unwrap_or_else(|| cfg.slurm_per_gpu_count(gpu_count))
}

/// Whether Slurm picks the GPU of this node's shares (else gpushare does).
pub fn slurm_places(cfg: &GpuMpsConfig, booking: &MpsBooking) -> bool {
    match cfg.placement {
        Placement::Slurm => true,
        Placement::Gpushare => false,
        Placement::Auto => booking.per_gpu,
    }
}

/// The units of a share job, from Slurm's percentage (units × 100 / the
/// per-GPU count, rounded down, at least 1) and the claimed units: the
/// claim where Slurm's rounding agrees with it, else what the
/// percentage alone says where it says it exactly. `Err`: why the size
/// cannot be known (the job is refused with this text).
pub fn share_units(per_gpu: u64, env: &JobEnv) -> Result<u32, String> {
    let Some(percent) = env.mps_percentage else {
        return Err("the job holds no MPS allocation".into());
    };
    // Slurm's figure: rounded down, but never below 1 %.
    let percent_of = |units: u32| (u64::from(units) * 100 / per_gpu.max(1)).max(1);
    if let Some(claimed) = env.units_claimed {
        if claimed > 0 && percent_of(claimed) == u64::from(percent) {
            return Ok(claimed);
        }
    }
    // Below 100 units per GPU every unit is at least 1 %, so the percentage
    // names exactly one unit count.
    let exact = per_gpu <= 100;
    let derived = u32::try_from((u64::from(percent) * per_gpu).div_ceil(100).max(1))
        .ok()
        .filter(|&u| percent_of(u) == u64::from(percent));
    match (exact, derived, env.units_claimed) {
        (true, Some(units), _) => Ok(units),
        (_, _, Some(claimed)) => Err(format!(
            "the size in the job's SPANK environment ({claimed} units) does not match what Slurm \
             allocated ({percent} % of a GPU of {per_gpu} mps units); the job is refused"
        )),
        _ => Err(format!(
            "Slurm gives the job {percent} % of a GPU of {per_gpu} mps units, which does not say \
             how many units it asked for, and its exact size did not reach the prolog: \
             slurm.conf needs PrologFlags=Alloc so that srun and salloc jobs carry the size \
             job_submit/gpu_qos recorded (see `gpu-mps config`)"
        )),
    }
}

/// The Slurm 22.05 Count check, one text for every place that reports it.
pub fn count_mismatch(cfg: &GpuMpsConfig, gpus: u32) -> Option<String> {
    let count = cfg.slurm_mps_count?;
    let wanted = cfg.slurm_count_for(gpus);
    (count != wanted).then(|| {
        format!(
            "gpu_mps.conf says SlurmMpsCount={count}, but {gpus} GPUs of {} units each need \
             Name=mps Count={wanted} in gres.conf on Slurm 22.05 (see gpu-mps config)",
            cfg.units_per_gpu
        )
    })
}

/// The node's GPU device files, in index order.
pub fn gpu_devices(cfg: &GpuMpsConfig) -> Vec<PathBuf> {
    if let Some(list) = &cfg.gpu_devices {
        return list.clone();
    }
    let mut found: Vec<(u32, PathBuf)> = fs::read_dir("/dev")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name();
                    let n = name.to_str()?.strip_prefix("nvidia")?.parse::<u32>().ok()?;
                    Some((n, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found.into_iter().map(|(_, p)| p).collect()
}

/// The N of a `/dev/nvidiaN` path: the device's minor number, which is how
/// NVML names the same GPU (`nvmlDeviceGetMinorNumber`).
fn device_minor(path: &Path) -> Option<u32> {
    path.file_name()?
        .to_str()?
        .strip_prefix("nvidia")?
        .parse()
        .ok()
}

fn refusal_name(job: u32) -> String {
    format!("refused.{job}")
}

fn banner_name(job: u32) -> String {
    format!("banner.{job}")
}

/// The note of a share that runs without MPS (`MPSFailure=run`): why.
fn unserved_name(job: u32) -> String {
    format!("unserved.{job}")
}

/// Why `job` runs without MPS, where the prolog let it (`MPSFailure=run`).
pub fn unserved(ledger: &Ledger, job: u32) -> Option<String> {
    fs::read_to_string(ledger.dir().join(unserved_name(job))).ok()
}

/// Whether this step is the first of `job` here to print the job's limits
/// line: the first to call wins (a marker in the ledger directory, removed
/// by the epilog). Where the marker cannot be written, every step prints.
pub fn claim_banner(ledger: &Ledger, job: u32) -> bool {
    match fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(ledger.dir().join(banner_name(job)))
    {
        Ok(_) => true,
        Err(e) => e.kind() != std::io::ErrorKind::AlreadyExists,
    }
}

/// Removes what the prolog and SPANK plugin left for `job` beside the
/// ledger (refusal note, banner marker).
fn forget_notes(ledger: &Ledger, job: u32) {
    for name in [refusal_name(job), banner_name(job), unserved_name(job)] {
        let _ = fs::remove_file(ledger.dir().join(name));
    }
}

/// The refusal note the prolog left for `job`, if any.
pub fn refusal(ledger: &Ledger, job: u32) -> Option<String> {
    fs::read_to_string(ledger.dir().join(refusal_name(job))).ok()
}

/// What the prolog did, for its log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrologOutcome {
    /// Not a GPU job: nothing recorded.
    Untouched,
    /// A share placed (or found placed by an earlier prolog run).
    Placed {
        share: ShareRecord,
        already: bool,
        mps: MpsDaemon,
    },
    /// A share that cannot run here; the SPANK plugin fails the job with
    /// `text`. `reason` is what the metrics count it as (see
    /// [`PlacementError::reason`]).
    Refused { reason: &'static str, text: String },
    /// A whole-GPU job recorded; shares already on its GPUs are listed (an overlap Slurm created).
    Whole {
        gpus: Vec<u32>,
        overlapping: Vec<ShareRecord>,
    },
}

/// Counts `events` and rewrites the node's metrics file (`MetricsFile=`),
/// under the ledger's lock, so that no older view ever replaces a newer
/// one; nothing at all where no metrics file is configured. `probe` tells
/// each GPU's daemon and is called under the lock: the node programs pass
/// [`status::pipe_probe`] (a stat, never a question to the daemon).
pub fn publish_metrics(
    node: &Node,
    events: &[Event<'_>],
    probe: impl Fn(u32) -> status::DaemonProbe,
) -> Result<(), String> {
    let Some(path) = &node.cfg.metrics_file else {
        return Ok(());
    };
    let dir = node.ledger.dir();
    let written = node.ledger.with_lock(|snapshot| -> Result<(), String> {
        let (mut counters, note) = Counters::read(dir);
        for event in events {
            counters.count(*event);
        }
        let mut problems: Vec<String> = note.into_iter().collect();
        if !events.is_empty() || !problems.is_empty() {
            if let Err(e) = counters.write(dir) {
                problems.push(e.to_string());
            }
        }
        let text = metrics_text(node, snapshot, &counters, probe);
        if let Err(e) = crate::shared::prom::write_file(path, &text) {
            problems.push(format!("MetricsFile: {e}"));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    });
    written.map_err(|e| e.to_string())?
}

/// The node's metrics: the same [`NodeStatus`] as `gpu-mps status` builds
/// from `snapshot` (unreadable: the loads are unknown until the next
/// transaction repairs it), each GPU's daemon as `probe` tells, and the
/// counters.
pub fn metrics_text(
    node: &Node,
    snapshot: Result<Snapshot, LedgerError>,
    counters: &Counters,
    probe: impl Fn(u32) -> status::DaemonProbe,
) -> String {
    let (state, set_aside) = match snapshot {
        Ok(s) => (s.state, s.set_aside_files),
        Err(e) => (LedgerState::lost(e.to_string()), Vec::new()),
    };
    let mut view = NodeStatus::of(&state, node.gpu_count, node.cfg.units_per_gpu, set_aside);
    view.mps = status::mps_view(&node.cfg, &view.gpus, probe);
    metrics::render_for(&view, counters, node.private != Some(false))
}

/// The refusal reason of a share whose GPU's MPS daemon could not serve it.
pub const MPS_DAEMON_REFUSAL: &str = "mps_daemon";

/// What the counters see of such a refusal.
static DAEMON_FAILED: MpsDaemon = MpsDaemon::Failed(String::new());

/// Result of the prolog: the outcome, plus what it noticed on the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrologReport {
    pub outcome: PrologOutcome,
    /// Records dropped by reconciliation (jobs no longer running here).
    pub dropped: Vec<Record>,
    /// Anything an admin should know (a repaired state, a count mismatch).
    pub notes: Vec<String>,
}

impl PrologReport {
    /// What the metrics count of this prolog (see [`publish_metrics`]).
    pub fn events(&self) -> Vec<Event<'_>> {
        let mut events = Vec::new();
        if !self.dropped.is_empty() {
            events.push(Event::Dropped(self.dropped.len()));
        }
        match &self.outcome {
            PrologOutcome::Placed {
                share,
                already: false,
                mps,
            } => {
                events.push(Event::Placed {
                    by_slurm: share.placed_by_slurm,
                });
                events.push(Event::Daemon(mps));
            }
            PrologOutcome::Placed { mps, .. } => events.push(Event::Daemon(mps)),
            PrologOutcome::Refused { reason, .. } => {
                events.push(Event::Refused(reason));
                // Its GPU's daemon failed: counted as such too.
                if *reason == MPS_DAEMON_REFUSAL {
                    events.push(Event::Daemon(&DAEMON_FAILED));
                }
            }
            PrologOutcome::Untouched | PrologOutcome::Whole { .. } => {}
        }
        events
    }
}

/// Runs the prolog's logic for `env`'s job. `running` is asked for the jobs
/// slurmctld runs on this node only when a share finds no room (records of
/// jobs that ended without an epilog may be what fills the GPUs); `Err`
/// from it means nothing is dropped. An `Err` from here means the node is
/// unfit (unusable state directory): the prolog then fails, and Slurm
/// drains the node, which is right.
pub fn prolog(
    node: &Node,
    env: &JobEnv,
    booking: &MpsBooking,
    running: impl FnOnce() -> Result<Vec<RunningJob>, String>,
) -> Result<PrologReport, LedgerError> {
    match place(node, env, booking, running) {
        // A ledger of a newer gpushare (a downgrade): the share is refused
        // with the reason, other jobs run; the node is never drained.
        Err(e @ LedgerError::TooNew { .. }) => Ok(PrologReport {
            outcome: if env.is_share() {
                refuse(&node.ledger, env, "downgrade", &e)
            } else {
                PrologOutcome::Untouched
            },
            dropped: Vec::new(),
            notes: vec![e.to_string()],
        }),
        other => other,
    }
}

/// [`prolog`] on a ledger this gpushare reads.
fn place(
    node: &Node,
    env: &JobEnv,
    booking: &MpsBooking,
    running: impl FnOnce() -> Result<Vec<RunningJob>, String>,
) -> Result<PrologReport, LedgerError> {
    let Node {
        cfg,
        gpu_count,
        ledger,
        ..
    } = node;
    let mut report = PrologReport {
        outcome: PrologOutcome::Untouched,
        dropped: Vec::new(),
        notes: Vec::new(),
    };
    if env.is_share() {
        if let Some(why) = &node.shares_refused {
            report.outcome = refuse(ledger, env, "config", why);
            return Ok(report);
        }
        if !cfg.mig_shares && !node.mig_gpus.is_empty() {
            let listed: Vec<String> = node
                .mig_gpus
                .iter()
                .map(|d| d.display().to_string())
                .collect();
            report.outcome = refuse(
                ledger,
                env,
                "mig",
                format!(
                    "{} {} MIG enabled (NVML), and gpushare's MPS shares are made of whole \
                     GPUs: list only GPUs without MIG in gpu_mps.conf's GPUDevices, or set \
                     MIGShares=allow there to place shares anyway",
                    listed.join(", "),
                    if listed.len() == 1 { "has" } else { "have" }
                ),
            );
            return Ok(report);
        }
        let by_slurm = slurm_places(cfg, booking);
        if by_slurm {
            report.notes.extend(booking.stacking_warning());
            report.notes.extend(units_mismatch(cfg, booking));
        } else {
            report.notes.extend(count_mismatch(cfg, *gpu_count));
        }
        let units = match share_units(slurm_per_gpu(cfg, *gpu_count, booking), env) {
            Ok(units) => units,
            Err(why) => {
                report.outcome = refuse(ledger, env, "size", why);
                return Ok(report);
            }
        };
        if by_slurm {
            report.outcome = record_slurm_choice(node, env, units, running, &mut report)?;
            return Ok(report);
        }
        if booking.cgroup_v2 {
            report.outcome = refuse(
                ledger,
                env,
                "cgroup_v2",
                "this node runs cgroup v2, where a job can only be kept from devices, never \
                 given one Slurm did not allow; gpushare cannot move the share to the GPU it \
                 would choose, so the job is refused. Let Slurm place shares (Slurm 23.11 or \
                 later: per-GPU mps lines with Flags=all_sharing and LL_SHARED_GRES, see \
                 `gpu-mps config`) or use CgroupPlugin=cgroup/v1",
            );
            return Ok(report);
        }
        // Daemons started before MultiUser=yes still serve one user each
        // until their shares end: no second user goes there meanwhile.
        let single_user: Vec<u32> = if cfg.multi_user {
            (0..*gpu_count)
                .filter(|&gpu| daemon::running_multi_user(cfg, gpu) == Some(false))
                .collect()
        } else {
            Vec::new()
        };
        let failed_gpus: Vec<u32> = node.failed.keys().copied().collect();
        let place = || {
            ledger.place_beside(
                env.job,
                env.uid,
                &env.user,
                units,
                (*gpu_count, cfg.units_per_gpu),
                &single_user,
                &failed_gpus,
            )
        };
        let mut placed = place();
        if let Err(LedgerError::Placement {
            error: PlacementError::NoGpuHasRoom { .. },
            ..
        }) = &placed
        {
            // Place again whatever this call dropped: a prolog running beside
            // this one may have dropped the same records of vanished jobs
            // first (after a node failure Slurm starts many shares at once),
            // leaving this reconciliation nothing to drop but the room free.
            // The refusal, if any, then states the load this second look saw.
            drop_vanished(ledger, env.job, running, &mut report)?;
            placed = place();
        }
        report.outcome = match placed {
            Ok(placed) => {
                report.notes.extend(placed.remarks());
                serve(node, env, placed.value, &mut report)?
            }
            Err(LedgerError::Placement { error, repair }) => {
                report.notes.extend(repair.map(|r| r.to_string()));
                let error = match error {
                    PlacementError::GpuFailed { gpus, .. } => gpu_failed(&node.failed, gpus),
                    other => other,
                };
                refuse(ledger, env, error.reason(), error)
            }
            Err(other) => return Err(other),
        };
    } else if !env.job_gpus.is_empty() {
        let out = ledger.record_whole(env.job, &env.job_gpus)?;
        report.notes.extend(out.remarks());
        report.outcome = PrologOutcome::Whole {
            gpus: env.job_gpus.clone(),
            overlapping: out.value,
        };
    }
    Ok(report)
}

/// Drops the records of jobs slurmctld no longer runs here (ended without
/// an epilog), keeping `job`'s; what it dropped goes into the report. When
/// slurmctld cannot be asked nothing is dropped, and a note says so.
fn drop_vanished(
    ledger: &Ledger,
    job: u32,
    running: impl FnOnce() -> Result<Vec<RunningJob>, String>,
    report: &mut PrologReport,
) -> Result<(), LedgerError> {
    let jobs = match running() {
        Ok(jobs) => jobs,
        Err(e) => {
            report.notes.push(format!(
                "cannot ask slurmctld which jobs still run here, so no record was dropped: {e}"
            ));
            return Ok(());
        }
    };
    let running: HashSet<u32> = jobs.iter().map(|j| j.job).collect();
    let out = ledger.reconcile(|j| j == job || running.contains(&j))?;
    report.notes.extend(out.remarks());
    for record in &out.value {
        forget_notes(ledger, record.job());
    }
    report.dropped.extend(out.value);
    Ok(())
}

/// Records a share where Slurm put it (`SLURM_JOB_GPUS`) and starts that
/// GPU's MPS daemon; Slurm's device rules already confine the job there.
/// Where the ledger sees no room on that GPU, records of jobs that ended
/// without an epilog are what fills it: they are dropped.
fn record_slurm_choice(
    node: &Node,
    env: &JobEnv,
    units: u32,
    running: impl FnOnce() -> Result<Vec<RunningJob>, String>,
    report: &mut PrologReport,
) -> Result<PrologOutcome, LedgerError> {
    let Some(&gpu) = env.job_gpus.first() else {
        return Ok(refuse(
            &node.ledger,
            env,
            "slurm_gpu",
            "Slurm places this node's shares, but named no GPU for it (SLURM_JOB_GPUS is not \
             set in the prolog)",
        ));
    };
    if env.job_gpus.len() > 1 {
        report.notes.push(format!(
            "Slurm gave job {} mps on GPUs {:?}; one MPS client uses one GPU, so gpushare \
             records it on GPU {gpu}",
            env.job, env.job_gpus
        ));
    }
    // A GPU set aside takes no share, whoever chose it.
    if node.failed.contains_key(&gpu) {
        let error = gpu_failed(&node.failed, vec![gpu]);
        return Ok(refuse(
            &node.ledger,
            env,
            error.reason(),
            format!("on GPU {gpu} (Slurm's choice): {error}"),
        ));
    }
    let choice = SlurmChoice {
        gpu,
        gpu_count: node.gpu_count,
        units_per_gpu: node.cfg.units_per_gpu,
    };
    match node
        .ledger
        .record_slurm_share(env.job, env.uid, &env.user, units, choice)
    {
        Ok(placed) => {
            report.notes.extend(placed.remarks());
            if placed.value.crowded {
                drop_vanished(&node.ledger, env.job, running, report)?;
            }
            serve(node, env, placed.value, report)
        }
        Err(LedgerError::Placement { error, repair }) => {
            report.notes.extend(repair.map(|r| r.to_string()));
            Ok(refuse(
                &node.ledger,
                env,
                error.reason(),
                format!("on GPU {gpu} (Slurm's choice): {error}"),
            ))
        }
        Err(other) => Err(other),
    }
}

/// What follows a share's placement: its memory limit recorded, its GPU's
/// MPS daemon made to run with the limits of the GPU's shares, and a note
/// when it shares the GPU with another user's server. A share whose daemon
/// cannot be started, reached or given its limits would run without them:
/// it is refused (`MPSFailure=refuse`, the default) or runs with its
/// output saying so (`MPSFailure=run`).
fn serve(
    node: &Node,
    env: &JobEnv,
    placed: super::ledger::Placed,
    report: &mut PrologReport,
) -> Result<PrologOutcome, LedgerError> {
    // Placed with its memory limit (Node::set_gpu_memory).
    let share = placed.share;
    let gpu = share.gpu;
    let locked = daemon::with_gpu_lock(
        &node.cfg,
        gpu,
        || -> Result<(MpsDaemon, Option<String>), LedgerError> {
            // Read once, under the lock: the users and limits of the GPU's shares now.
            let state = node.ledger.snapshot()?.state;
            let alone = state.shares().all(|s| s.gpu != gpu || s.job == share.job);
            let daemon::Ensured {
                daemon: mps,
                servers,
                multi_user,
            } = daemon::ensure(&node.cfg, gpu, node.owner, alone);
            let others = state.other_users_on(gpu, share.uid);
            if !others.is_empty() && !multi_user.unwrap_or(node.cfg.multi_user) {
                report.notes.push(format!(
                    "job {} ({}) shares GPU {gpu} with the MPS server of {}: MPS serves one \
                     user at a time, so the job's CUDA work waits until their clients there \
                     have exited",
                    share.job,
                    share.user,
                    names(&others)
                ));
            }
            let mut unserved = match &mps {
                MpsDaemon::NotAvailable if node.cfg.mps_control == config::MpsControl::FromPath => {
                    Some(format!(
                        "no {} was found to run GPU {gpu}'s MPS daemon (MPSControl=auto looks \
                         in PATH and {})",
                        super::programs::CONTROL_PROGRAM,
                        super::programs::SEARCH_DIRS.join(", ")
                    ))
                }
                MpsDaemon::Failed(why) => Some(format!(
                    "GPU {gpu}'s MPS daemon could not be started: {why}"
                )),
                _ => None,
            };
            if mps != MpsDaemon::NotAvailable {
                guard_pipes(node, &state, gpu, &mut report.notes);
                let on_gpu = state.shares().filter(|s| s.gpu == gpu);
                let limits = daemon::server_limits(&node.cfg, node.gpu_memory_mib, on_gpu)
                    .filter(|_| unserved.is_none());
                if let Some(limits) = limits {
                    if let Err(e) = daemon::apply_limits(&node.cfg, gpu, limits, servers) {
                        unserved = Some(format!(
                            "GPU {gpu}'s MPS daemon could not be given the limits of its \
                             shares: {e}"
                        ));
                    }
                }
            }
            Ok((mps, unserved))
        },
    );
    let (mps, unserved) = match locked {
        Ok(result) => result?,
        Err(e) => {
            let why = format!("GPU {gpu}'s MPS daemon lock: {e}");
            (MpsDaemon::Failed(why.clone()), Some(why))
        }
    };
    if let Some(why) = unserved {
        match node.cfg.mps_failure {
            config::MpsFailure::Refuse => {
                return Ok(refuse(
                    &node.ledger,
                    env,
                    MPS_DAEMON_REFUSAL,
                    format!(
                        "{why}. The share is refused rather than run without its MPS limits \
                         beside other jobs (gpu_mps.conf MPSFailure=refuse); a batch job is \
                         requeued to run elsewhere"
                    ),
                ));
            }
            config::MpsFailure::Run => {
                let text = format!(
                    "runs WITHOUT MPS on GPU {gpu}: {why}. No thread or memory limit holds, \
                     and its work runs beside other jobs' on that GPU (gpu_mps.conf \
                     MPSFailure=run)"
                );
                report.notes.push(format!("job {}: {text}", share.job));
                if let Err(e) = state_dir::replace_file(
                    node.ledger.dir(),
                    &unserved_name(share.job),
                    text.as_bytes(),
                    0o600,
                ) {
                    report.notes.push(format!(
                        "job {}: its banner will not say so: {e}",
                        share.job
                    ));
                }
            }
        }
    }
    Ok(PrologOutcome::Placed {
        share,
        already: placed.already_recorded,
        mps,
    })
}

/// The refusal of a share only `gpus`, set aside, could take: with why
/// each was set aside.
fn gpu_failed(failed: &health::FailedGpus, gpus: Vec<u32>) -> PlacementError {
    let reasons: Vec<&str> = gpus
        .iter()
        .filter_map(|g| failed.get(g).map(|f| f.reason.as_str()))
        .collect();
    PlacementError::GpuFailed {
        reasons: reasons.join("; "),
        gpus,
    }
}

/// `user a`, `users a, b`.
fn names(users: &std::collections::BTreeSet<String>) -> String {
    let list: Vec<&str> = users.iter().map(String::as_str).collect();
    match list.as_slice() {
        [one] => format!("user {one}"),
        _ => format!("users {}", list.join(", ")),
    }
}

/// Where Slurm places shares, its per-GPU Count and gpushare's UnitsPerGPU
/// must agree, or the status view and memory limits are off.
pub fn units_mismatch(cfg: &GpuMpsConfig, booking: &MpsBooking) -> Option<String> {
    let count = booking.per_gpu_count?;
    (count != u64::from(cfg.units_per_gpu)).then(|| {
        format!(
            "gres.conf gives each GPU Count={count} mps, but gpu_mps.conf says UnitsPerGPU={}: \
             make them equal (see gpu-mps config)",
            cfg.units_per_gpu
        )
    })
}

/// Leaves the refusal note the SPANK plugin fails `env`'s job with: the
/// job, the node (a job on several nodes must say which one refused) and why.
fn refuse(
    ledger: &Ledger,
    env: &JobEnv,
    reason: &'static str,
    why: impl std::fmt::Display,
) -> PrologOutcome {
    let text = format!("gpu_mps: job {} on node {}: {why}", env.job, env.node);
    let text =
        match state_dir::replace_file(ledger.dir(), &refusal_name(env.job), text.as_bytes(), 0o600)
        {
            Ok(()) => text,
            Err(e) => format!("{text} (and the refusal note could not be written: {e})"),
        };
    PrologOutcome::Refused { reason, text }
}

/// What the epilog did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpilogReport {
    /// The job's MPS clients its GPU's daemon was asked to terminate:
    /// `(gpu, server, client)`.
    pub terminated: Vec<(u32, u32, u32)>,
    pub released: Vec<Record>,
    /// MPS daemons stopped because their GPU has no share left.
    pub stopped: Vec<(u32, MpsDaemon)>,
    /// A repaired state, worth a log line.
    pub notes: Vec<String>,
}

/// Releases `job` (idempotent: a second run releases nothing).
pub fn epilog(node: &Node, job: u32) -> Result<EpilogReport, LedgerError> {
    let mut notes = Vec::new();
    let mut terminated = Vec::new();
    // What MPS still runs for the job ends before its units are released
    // (nothing to ask where the site runs MPS itself).
    let gpu = (node.cfg.mps_control != config::MpsControl::Disabled)
        .then(|| node.ledger.snapshot().ok())
        .flatten()
        .and_then(|s| s.state.share(job).map(|share| share.gpu));
    if let Some(gpu) = gpu {
        let ended = daemon::with_gpu_lock(&node.cfg, gpu, || {
            daemon::terminate_clients(&node.cfg, gpu, job)
        });
        match ended {
            Ok(done) => {
                notes.extend(done.problems.into_iter().map(|p| {
                    format!("GPU {gpu}: job {job}'s MPS clients not all terminated: {p}")
                }));
                terminated.extend(done.clients.into_iter().map(|(s, c)| (gpu, s, c)));
            }
            Err(e) => notes.push(format!(
                "GPU {gpu}: job {job}'s MPS clients not terminated: {e}"
            )),
        }
    }
    let out = node.ledger.release(job)?;
    forget_notes(&node.ledger, job);
    let mut stopped = Vec::new();
    notes.extend(out.remarks());
    let gpus: std::collections::BTreeSet<u32> = out
        .value
        .iter()
        .filter_map(|r| match r {
            Record::Share(s) => Some(s.gpu),
            _ => None,
        })
        .collect();
    for gpu in gpus {
        // Under the GPU's daemon lock, from the ledger as it is then: a
        // share placed meanwhile keeps its daemon.
        let locked = daemon::with_gpu_lock(&node.cfg, gpu, || -> Result<(), LedgerError> {
            let state = node.ledger.snapshot()?.state;
            if super::programs::program(&node.cfg).is_some() {
                guard_pipes(node, &state, gpu, &mut notes);
            }
            let left = state.shares().filter(|o| o.gpu == gpu);
            match daemon::server_limits(&node.cfg, node.gpu_memory_mib, left) {
                None => stopped.push((gpu, daemon::stop(&node.cfg, gpu))),
                // The largest share may have left: the server's limits follow.
                Some(limits) => {
                    if let Err(e) = daemon::apply_limits(&node.cfg, gpu, limits, None) {
                        notes.push(format!(
                            "GPU {gpu}'s MPS limits could not be lowered on its daemon: {e}"
                        ));
                    }
                }
            }
            Ok(())
        });
        match locked {
            Ok(result) => result?,
            Err(e) => notes.push(format!("GPU {gpu}'s MPS daemon left as it is: {e}")),
        }
    }
    Ok(EpilogReport {
        terminated,
        released: out.value,
        stopped,
        notes,
    })
}

/// The node's ledger as every writer opens it: with the views each of its
/// transactions publishes (the status copy, the DCGM job mapping) and the
/// rule its servers follow, so that no writer leaves them behind it.
pub fn node_ledger(cfg: &GpuMpsConfig, owner: u32, gpu_count: u32) -> Result<Ledger, LedgerError> {
    private_ledger(cfg, owner, gpu_count, hides_users(cfg))
}

/// [`node_ledger`], its views readable by root only where `private`.
fn private_ledger(
    cfg: &GpuMpsConfig,
    owner: u32,
    gpu_count: u32,
    private: Option<bool>,
) -> Result<Ledger, LedgerError> {
    let copy = StatusCopy::create(daemon::public_dir(cfg), owner, gpu_count, cfg.units_per_gpu)?
        .private(private);
    let mut ledger = Ledger::open(&cfg.state_dir, owner)?
        .with_view(Arc::new(copy))
        .with_server_rule(server_rule(cfg));
    if let Some(dir) = &cfg.dcgm_job_mapping_dir {
        let mapping = JobMapping::new(dir.clone(), owner, &gpu_devices(cfg)).private(private);
        ledger = ledger.with_view(Arc::new(mapping));
    }
    Ok(ledger)
}

/// Whether this node keeps who runs what to root (`PrivateData=` of
/// gpu_mps.conf; `auto` reads Slurm's in the slurm.conf this node uses,
/// `None` where it cannot be read).
pub fn hides_users(cfg: &GpuMpsConfig) -> Option<bool> {
    // Read only where it decides.
    let slurm_conf = (cfg.private_data == config::PrivateData::Auto)
        .then(|| fs::read_to_string(beside_slurm_conf(None, "slurm.conf")).ok())
        .flatten();
    cfg.hides_users(slurm_conf.as_deref())
}

/// Stops the daemons of GPUs without a share (left by a crash, or by a
/// node whose epilog never ran); their GPUs and outcomes. Each GPU is
/// decided as the epilog decides, under its daemon lock and from the
/// ledger as it is then: a share placed meanwhile keeps its daemon.
pub fn stop_idle_daemons(node: &Node) -> Result<Vec<(u32, MpsDaemon)>, LedgerError> {
    let mut stopped = Vec::new();
    for gpu in 0..node.gpu_count {
        let pipe = daemon::pipe_dir(&node.cfg, gpu);
        // A cheap first look: most GPUs have no daemon at all.
        if !pipe.join("control").exists() && daemon::processes(&pipe).is_empty() {
            continue;
        }
        let locked = daemon::with_gpu_lock(&node.cfg, gpu, || -> Result<_, LedgerError> {
            let state = node.ledger.snapshot()?.state;
            Ok(if state.shares().any(|s| s.gpu == gpu) {
                None
            } else {
                Some(daemon::stop(&node.cfg, gpu))
            })
        });
        match locked {
            Ok(result) => stopped.extend(result?.map(|outcome| (gpu, outcome))),
            Err(e) => stopped.push((gpu, MpsDaemon::Failed(format!("left as it is: {e}")))),
        }
    }
    Ok(stopped)
}

/// The records of the published status copy, if its directory can be
/// trusted (owned by `owner`, writable by nobody else) and it reads.
fn published_records(cfg: &GpuMpsConfig, owner: u32) -> Option<LedgerState> {
    let dir = daemon::public_dir(cfg);
    state_dir::check(&dir, owner, state_dir::Access::WorldReadable).ok()?;
    StatusCopy {
        dir,
        gpu_count: 0,
        units_per_gpu: cfg.units_per_gpu,
        private: None,
    }
    .read_records()
}

/// What each task of a share job gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskPlan {
    pub gpu: u32,
    pub units: u32,
    /// gpushare placed the share, so it confines the tasks to its GPU;
    /// where Slurm placed it, Slurm's own device rules already do.
    pub confine: bool,
    /// The chosen GPU's device file (allowed).
    pub device: PathBuf,
    /// Every other GPU's device file (denied).
    pub other_devices: Vec<PathBuf>,
    /// Environment to set, replacing what Slurm set.
    pub env: Vec<(String, String)>,
    /// Hints for frameworks that size themselves from the whole GPU's
    /// memory ([`framework_hints`]): set only where the job has not set
    /// them itself.
    pub hints: Vec<(String, String)>,
    /// The line the job's output starts with (its limits, see [`banner`]).
    pub banner: String,
    /// The MPS clients the ledger counted for the job when the plan was
    /// read: a step with no more tasks changes nothing, so it need not take
    /// the ledger's lock (the count only grows while the job runs).
    pub clients: u32,
}

/// The plan for `job`'s tasks: `Ok(None)` when the job holds no share
/// here, `Err(text)` when it must fail (refused by the prolog, or a share
/// Slurm granted that the prolog never placed). `slurm_says_share` only
/// sharpens that message: a share is given by the ledger's record alone,
/// which only the prolog writes, from the credential's facts.
///
/// `tasks`: the step's tasks on this node. MPS limits a share's device
/// memory per client process, so the share's memory is divided over them:
/// the step's tasks together hold at most the share.
pub fn task_plan(
    cfg: &GpuMpsConfig,
    ledger: &Ledger,
    job: u32,
    slurm_says_share: bool,
    tasks: u32,
) -> Result<Option<TaskPlan>, String> {
    if let Some(text) = refusal(ledger, job) {
        return Err(text);
    }
    let state = match ledger.snapshot() {
        Ok(snapshot) => snapshot.state,
        // Found damaged (the next transaction repairs it): the published
        // copy, never behind the ledger, still says where the job is.
        Err(e) => match published_records(cfg, ledger.owner()) {
            Some(state) => state,
            // A job Slurm gave no share is left as Slurm made it, whatever
            // the state of the ledger.
            None if !slurm_says_share => return Ok(None),
            None => {
                return Err(format!(
                    "gpu_mps: job {job}: cannot read the node's share ledger: {e}"
                ))
            }
        },
    };
    let Some(share) = state.share(job) else {
        if slurm_says_share {
            return Err(format!(
                "gpu_mps: job {job} holds an MPS share but no GPU was chosen for it: the node's \
                 Prolog did not run for this job. Either Prolog=gpu-mps-prolog is not configured \
                 on this node, or Slurm skipped it (Slurm 22.05 can start a requeued job again on \
                 the same node without its Prolog); the share is refused rather than run \
                 unplaced: resubmit the job"
            ));
        }
        return Ok(None);
    };
    let devices = gpu_devices(cfg);
    let device = devices.get(share.gpu as usize).cloned().ok_or_else(|| {
        format!(
            "gpu_mps: job {job} was placed on GPU {} but the node lists only {} GPU devices",
            share.gpu,
            devices.len()
        )
    })?;
    let other_devices = devices
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != share.gpu as usize)
        .map(|(_, p)| p.clone())
        .collect();
    let dir = daemon::gpu_dir(cfg, share.gpu);
    let percent = cfg.thread_percentage(share.units);
    let memory_mib = share
        .memory_mib
        .or_else(|| cfg.memory_limit_mib(share.units, None));
    let tasks = tasks.max(1);
    let memory = memory_mib.map(|mib| TaskMemory {
        share_mib: mib,
        task_mib: (mib / u64::from(tasks)).max(1),
        tasks,
    });
    let mut env = Vec::new();
    if !share.placed_by_slurm {
        env.extend([
            // The MPS server of this GPU exposes exactly one device to clients.
            ("CUDA_VISIBLE_DEVICES".to_owned(), "0".to_owned()),
            (
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_owned(),
                percent.to_string(),
            ),
        ]);
    }
    // Where Slurm placed the share, its own CUDA_VISIBLE_DEVICES and
    // percentage already match its device rules and the share.
    env.extend([
        (
            "CUDA_MPS_PIPE_DIRECTORY".to_owned(),
            dir.join("pipe").to_string_lossy().into_owned(),
        ),
        (
            "CUDA_MPS_LOG_DIRECTORY".to_owned(),
            dir.join("log").to_string_lossy().into_owned(),
        ),
        ("GPUSHARE_GPU".to_owned(), share.gpu.to_string()),
        (spank_env::MPS_UNITS.to_owned(), share.units.to_string()),
    ]);
    if let Some(m) = &memory {
        // The server sees one GPU, so the client's device 0 is this GPU.
        env.push((
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_owned(),
            format!("0={}M", m.task_mib),
        ));
        env.push(("GPUSHARE_MEMORY_MIB".to_owned(), m.task_mib.to_string()));
    }
    let hints = framework_hints(memory_fraction(
        cfg,
        share.units,
        memory.as_ref().map(|m| m.task_mib),
        tasks,
    ));
    let others = if cfg.multi_user {
        Default::default()
    } else {
        state.other_users_on(share.gpu, share.uid)
    };
    let mut banner = banner(cfg, job, share, percent, memory.as_ref(), &others);
    if let Some(why) = unserved(ledger, job) {
        banner = format!("gpu_mps: job {job}: WARNING: this job {why}");
    }
    Ok(Some(TaskPlan {
        gpu: share.gpu,
        units: share.units,
        confine: !share.placed_by_slurm,
        device,
        other_devices,
        env,
        hints,
        banner,
        clients: share.client_count(),
    }))
}

/// A share's device memory as its step's tasks hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskMemory {
    /// The share's limit.
    pub share_mib: u64,
    /// Each task's (each MPS client's): the share over the tasks.
    pub task_mib: u64,
    pub tasks: u32,
}

/// The part of its GPU's memory one task of a share may use: the share's
/// part of the GPU (`units` / UnitsPerGPU), or less where its memory limit
/// is smaller than that part of a GPU of known memory (`GPUMemory=`),
/// divided over the step's `tasks`.
pub fn memory_fraction(cfg: &GpuMpsConfig, units: u32, task_mib: Option<u64>, tasks: u32) -> f64 {
    let share = f64::from(units) / f64::from(cfg.units_per_gpu.max(1));
    let per_task = share / f64::from(tasks.max(1));
    match (task_mib, cfg.gpu_memory_mib) {
        (Some(mib), Some(gpu)) if gpu > 0 => per_task.min(mib as f64 / gpu as f64),
        _ => per_task,
    }
    .clamp(0.0, 1.0)
}

/// What JAX preallocates of the memory a task may use, as JAX's own
/// default is of a whole GPU (75 %): the rest is for the CUDA libraries'
/// own allocations, which also count against the task's MPS limit.
pub const JAX_PREALLOCATION: f64 = 0.75;

/// The environment that makes the common frameworks stop at a task's part
/// of the GPU (`fraction`, see [`memory_fraction`]) instead of sizing
/// themselves from the whole GPU, which CUDA still reports under MPS:
/// JAX preallocates `XLA_PYTHON_CLIENT_MEM_FRACTION` of the GPU,
/// TensorFlow maps almost all of it unless `TF_FORCE_GPU_ALLOW_GROWTH`;
/// PyTorch allocates as it goes, and `GPUSHARE_MEMORY_FRACTION` is what to
/// give `torch.cuda.set_per_process_memory_fraction`. Fractions are
/// rounded down to 4 decimals, never past the share.
pub fn framework_hints(fraction: f64) -> Vec<(String, String)> {
    // Down, past the float error of a product such as 0.25 / 3 * 0.75.
    let shown = |f: f64| format!("{:.4}", (f * 10_000.0 + 1e-6).floor() / 10_000.0);
    vec![
        ("GPUSHARE_MEMORY_FRACTION".to_owned(), shown(fraction)),
        (
            "XLA_PYTHON_CLIENT_MEM_FRACTION".to_owned(),
            shown(fraction * JAX_PREALLOCATION),
        ),
        ("TF_FORCE_GPU_ALLOW_GROWTH".to_owned(), "true".to_owned()),
    ]
}

/// The one line a share job's output starts with: its GPU, its limits and
/// who enforces them, and any other user's server its work waits for.
fn banner(
    cfg: &GpuMpsConfig,
    job: u32,
    share: &ShareRecord,
    percent: u32,
    memory: Option<&TaskMemory>,
    others: &std::collections::BTreeSet<String>,
) -> String {
    let memory = match memory {
        Some(m) if m.tasks > 1 => format!(
            "{} MiB of device memory, {} MiB for each of this step's {} tasks (MPS limits \
             each CUDA process: a process a task starts gets its own; CUDA still reports the \
             whole GPU's memory)",
            m.share_mib, m.task_mib, m.tasks
        ),
        Some(m) => format!(
            "{} MiB of device memory (CUDA still reports the whole GPU's memory: stay \
             under {} MiB)",
            m.share_mib, m.share_mib
        ),
        None => "no device memory limit".to_owned(),
    };
    let mut line = format!(
        "gpu_mps: job {job}: MPS share of {} units on GPU {}: {percent} % of its threads, {memory}",
        share.units, share.gpu
    );
    if cfg.multi_user {
        line.push_str("; the GPU's MPS server is shared by all users");
    } else if !others.is_empty() {
        // NVIDIA documents such a client as queued until every client of
        // the other user's server has exited (or, in its troubleshooting
        // guide, refused): never as running beside them.
        line.push_str(&format!(
            "; this GPU also runs the MPS server of {0}, and MPS serves one user at a time: \
             your job's CUDA work will wait until the jobs of {0} on this GPU end",
            names(others)
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mps::config::MpsControl;
    use std::collections::HashMap;
    use std::os::unix::fs::MetadataExt;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn temp_node(count: Option<u64>) -> (Node, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let owner = fs::metadata(dir.path()).map(|m| m.uid()).unwrap_or(0);
        let cfg = GpuMpsConfig {
            state_dir: dir.path().join("state"),
            gpu_devices: Some(
                (0..4)
                    .map(|i| PathBuf::from(format!("/dev/fake{i}")))
                    .collect(),
            ),
            mps_control: MpsControl::Disabled,
            slurm_mps_count: count,
            ..GpuMpsConfig::default()
        };
        let ledger = Ledger::open(&cfg.state_dir, owner)
            .and_then(|l| {
                let copy = StatusCopy::create(daemon::public_dir(&cfg), owner, 4, 100)?;
                Ok(l.with_view(Arc::new(copy)))
            })
            .unwrap_or_else(|e| panic!("{e}"));
        let mut node = Node {
            cfg,
            gpu_count: 4,
            ledger,
            owner,
            gpu_memory_mib: None,
            pipe_guard: None,
            shares_refused: None,
            conf_notes: Vec::new(),
            mig_gpus: Vec::new(),
            private: Some(false),
            failed: Default::default(),
        };
        node.set_gpu_memory(None);
        (node, dir)
    }

    /// A share job as Slurm 22.05 sends it with Count=1600 on 4 GPUs
    /// (400 a GPU): the plugin's units and Slurm's rounded percentage.
    fn share_env(job: u32, units: u32) -> JobEnv {
        JobEnv {
            job,
            uid: 1000,
            user: "alice".into(),
            mps_percentage: Some(units / 4),
            units_claimed: Some(units),
            job_gpus: vec![0],
            node: "gpu01".to_owned(),
        }
    }

    fn no_squeue() -> Result<Vec<RunningJob>, String> {
        Err("not asked in this test".into())
    }

    fn outcome(node: &Node, env: &JobEnv) -> PrologOutcome {
        prolog(node, env, &MpsBooking::default(), no_squeue)
            .unwrap_or_else(|e| panic!("{e}"))
            .outcome
    }

    #[test]
    fn no_share_is_placed_while_a_listed_gpu_has_mig_on() {
        let (mut node, _dir) = temp_node(Some(1600));
        node.cfg.gpu_devices = Some(
            (0..4)
                .map(|i| PathBuf::from(format!("/dev/nvidia{i}")))
                .collect(),
        );
        // A MIG GPU the node does not list changes nothing.
        node.set_mig_minors(&[7]);
        assert!(matches!(
            outcome(&node, &share_env(1, 100)),
            PrologOutcome::Placed { .. }
        ));
        node.set_mig_minors(&[2]);
        match outcome(&node, &share_env(2, 100)) {
            PrologOutcome::Refused { reason, text } => {
                assert_eq!(reason, "mig");
                assert!(
                    text.contains("/dev/nvidia2 has MIG enabled (NVML)")
                        && text.contains("MIGShares=allow"),
                    "{text}"
                );
            }
            other => panic!("{other:?}"),
        }
        // Whole GPUs are Slurm's business, MIG or not.
        let whole = JobEnv {
            mps_percentage: None,
            units_claimed: None,
            job_gpus: vec![3],
            ..share_env(3, 0)
        };
        assert!(matches!(
            outcome(&node, &whole),
            PrologOutcome::Whole { .. }
        ));
        node.cfg.mig_shares = true;
        assert!(matches!(
            outcome(&node, &share_env(4, 100)),
            PrologOutcome::Placed { .. }
        ));
    }

    #[test]
    fn prolog_environment_is_classified() {
        let e = JobEnv::from_env(env_of(&[
            ("SLURM_JOB_ID", "7"),
            ("SLURM_JOB_UID", "1000"),
            ("SLURM_JOB_USER", "alice"),
            ("SLURM_JOB_GPUS", "1,3"),
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (e.job, e.job_gpus.clone(), e.is_share()),
            (7, vec![1, 3], false)
        );
        let e = JobEnv::from_env(env_of(&[
            ("SLURM_JOB_ID", "8"),
            ("SPANK_GPUSHARE_MPS_UNITS", "50"),
            ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "12"),
            ("SLURM_JOB_GPUS", "0"),
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(e.is_share());
        assert_eq!(e.units_claimed, Some(50));
        // The claim alone makes no share, and a junk claim fails nothing.
        let forged = JobEnv::from_env(env_of(&[
            ("SLURM_JOB_ID", "9"),
            ("SPANK_GPUSHARE_MPS_UNITS", "7"),
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(!forged.is_share());
        let junk = JobEnv::from_env(env_of(&[
            ("SLURM_JOB_ID", "9"),
            ("SPANK_GPUSHARE_MPS_UNITS", "x"),
        ]));
        assert_eq!(junk.map(|e| e.units_claimed), Ok(None));
        assert!(JobEnv::from_env(env_of(&[])).is_err());
        assert!(JobEnv::from_env(env_of(&[("SLURM_JOB_ID", "x")])).is_err());
    }

    #[test]
    fn units_are_the_claim_only_where_slurm_agrees() {
        let cfg22 = GpuMpsConfig {
            slurm_mps_count: Some(1600),
            ..GpuMpsConfig::default()
        };
        let env = |pct, claim| JobEnv {
            mps_percentage: Some(pct),
            units_claimed: claim,
            ..share_env(1, 0)
        };
        // 22.05, 400 units a GPU: 50 units are 12 %, and so are 48..=51;
        // 1 unit is 1 % (Slurm never says less), and so are 2..=7.
        assert_eq!(
            share_units(cfg22.slurm_per_gpu_count(4), &env(12, Some(50))),
            Ok(50)
        );
        assert_eq!(
            share_units(cfg22.slurm_per_gpu_count(4), &env(1, Some(1))),
            Ok(1)
        );
        assert!(share_units(cfg22.slurm_per_gpu_count(4), &env(1, Some(8))).is_err());
        assert_eq!(
            share_units(cfg22.slurm_per_gpu_count(4), &env(12, Some(51))),
            Ok(51)
        );
        let forged_big = share_units(cfg22.slurm_per_gpu_count(4), &env(12, Some(100)));
        assert!(
            forged_big
                .as_ref()
                .is_err_and(|e| e.contains("does not match")),
            "{forged_big:?}"
        );
        let forged_small = share_units(cfg22.slurm_per_gpu_count(4), &env(25, Some(1)));
        assert!(forged_small.is_err());
        let missing = share_units(cfg22.slurm_per_gpu_count(4), &env(12, None));
        assert!(
            missing
                .as_ref()
                .is_err_and(|e| e.contains("PrologFlags=Alloc")),
            "{missing:?}"
        );
        // 24.11 and later, 100 units a GPU: the percentage is the units.
        let cfg24 = GpuMpsConfig {
            slurm_mps_count: Some(400),
            ..GpuMpsConfig::default()
        };
        assert_eq!(
            share_units(cfg24.slurm_per_gpu_count(4), &env(25, None)),
            Ok(25)
        );
        assert_eq!(
            share_units(cfg24.slurm_per_gpu_count(4), &env(25, Some(25))),
            Ok(25)
        );
        assert_eq!(
            share_units(cfg24.slurm_per_gpu_count(4), &env(25, Some(90))),
            Ok(25)
        );
        // Without SlurmMpsCount the count gpu-mps config prescribes is assumed.
        assert_eq!(
            share_units(
                GpuMpsConfig::default().slurm_per_gpu_count(4),
                &env(12, Some(50))
            ),
            Ok(50)
        );
    }

    #[test]
    fn shares_spread_and_tasks_get_their_gpu() {
        let (node, _dir) = temp_node(None);
        let mut gpus = Vec::new();
        for job in 1..=4 {
            match prolog(
                &node,
                &share_env(job, 50),
                &MpsBooking::default(),
                no_squeue,
            ) {
                Ok(PrologReport {
                    outcome: PrologOutcome::Placed { share, .. },
                    notes,
                    ..
                }) => {
                    assert!(notes.is_empty(), "{notes:?}");
                    gpus.push(share.gpu)
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(gpus, vec![0, 1, 2, 3]);
        let copy = daemon::public_dir(&node.cfg).join(StatusCopy::FILE);
        let public: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(&copy).unwrap_or_default())
                .unwrap_or_default();
        assert_eq!(public["gpus"][2]["shares"][0]["job"], 3, "{public}");
        let plan = task_plan(&node.cfg, &node.ledger, 3, true, 1)
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("no plan"));
        assert_eq!(plan.gpu, 2);
        assert_eq!(plan.device, PathBuf::from("/dev/fake2"));
        assert_eq!(plan.other_devices.len(), 3);
        assert!(plan
            .env
            .contains(&("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".into(), "50".into())));
        assert!(plan.env.contains(&("GPUSHARE_GPU".into(), "2".into())));
        assert_eq!(task_plan(&node.cfg, &node.ledger, 99, false, 1), Ok(None));
        assert!(task_plan(&node.cfg, &node.ledger, 99, true, 1)
            .is_err_and(|e| e.contains("Prolog=gpu-mps-prolog")));
        // An unreadable ledger: the published copy still places the job;
        // without it, only share jobs fail.
        fs::write(node.ledger.state_path(), "{").unwrap_or_else(|e| panic!("{e}"));
        let from_copy = task_plan(&node.cfg, &node.ledger, 3, true, 1);
        assert_eq!(from_copy.map(|p| p.map(|p| p.gpu)), Ok(Some(2)));
        fs::remove_file(&copy).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(task_plan(&node.cfg, &node.ledger, 99, false, 1), Ok(None));
        assert!(
            task_plan(&node.cfg, &node.ledger, 3, true, 1).is_err_and(|e| e.contains("unreadable"))
        );
    }

    #[test]
    fn forged_units_on_jobs_without_an_mps_allocation_change_nothing() {
        let (node, _dir) = temp_node(None);
        let forged = |job, gpus: Vec<u32>| JobEnv {
            job,
            uid: 1000,
            user: "mallory".into(),
            mps_percentage: None,
            units_claimed: Some(100),
            job_gpus: gpus,
            node: "gpu01".to_owned(),
        };
        for job in 1..=4 {
            assert_eq!(
                outcome(&node, &forged(job, Vec::new())),
                PrologOutcome::Untouched
            );
        }
        // A whole-GPU job claiming units is a whole-GPU job.
        assert!(matches!(
            outcome(&node, &forged(5, vec![1])),
            PrologOutcome::Whole { .. }
        ));
        for job in 1..=4 {
            assert_eq!(task_plan(&node.cfg, &node.ledger, job, false, 1), Ok(None));
        }
        // An honest share still fits, beside the whole GPU.
        match outcome(&node, &share_env(6, 100)) {
            PrologOutcome::Placed { share, .. } => assert_ne!(share.gpu, 1),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_share_that_fits_no_gpu_is_refused_not_failed_and_epilog_is_idempotent() {
        let (node, _dir) = temp_node(None);
        for job in 1..=4 {
            assert!(matches!(
                outcome(&node, &share_env(job, 60)),
                PrologOutcome::Placed { .. }
            ));
        }
        // 160 units free on the node, but at most 40 on any one GPU.
        match prolog(&node, &share_env(5, 60), &MpsBooking::default(), no_squeue) {
            Ok(PrologReport {
                outcome:
                    PrologOutcome::Refused {
                        text,
                        reason: "no_room",
                    },
                notes,
                ..
            }) => {
                // A job on several nodes says which one refused it.
                assert!(text.contains("job 5 on node gpu01:"), "{text}");
                assert!(
                    notes.iter().any(|n| n.contains("no record was dropped")),
                    "{notes:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(task_plan(&node.cfg, &node.ledger, 5, true, 1)
            .is_err_and(|e| e.contains("no single GPU")));
        let r = epilog(&node, 1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.released.len(), 1);
        assert_eq!(r.stopped, vec![(0, MpsDaemon::NotAvailable)]);
        assert!(epilog(&node, 1).is_ok_and(|r| r.released.is_empty()));
        assert!(epilog(&node, 5).is_ok_and(|r| r.released.is_empty()));
        assert_eq!(refusal(&node.ledger, 5), None);
    }

    #[test]
    fn records_of_vanished_jobs_are_dropped_only_when_a_share_needs_the_room() {
        let (node, _dir) = temp_node(None);
        let whole = JobEnv {
            job: 10,
            uid: 0,
            user: "root".into(),
            mps_percentage: None,
            units_claimed: None,
            job_gpus: vec![0],
            node: "gpu01".to_owned(),
        };
        assert!(matches!(
            outcome(&node, &whole),
            PrologOutcome::Whole { .. }
        ));
        for job in 1..=6 {
            match outcome(&node, &share_env(job, 50)) {
                PrologOutcome::Placed { share, .. } => assert_ne!(share.gpu, 0),
                other => panic!("{other:?}"),
            }
        }
        let asked = std::cell::Cell::new(false);
        let running = || {
            asked.set(true);
            Ok(vec![
                RunningJob {
                    job: 2,
                    holds_mps: true,
                },
                RunningJob {
                    job: 3,
                    holds_mps: true,
                },
            ])
        };
        let report = prolog(&node, &share_env(7, 50), &MpsBooking::default(), running)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(asked.get());
        let dropped: Vec<u32> = report.dropped.iter().map(Record::job).collect();
        assert_eq!(dropped, vec![1, 4, 5, 6, 10]);
        assert!(matches!(report.outcome, PrologOutcome::Placed { .. }));
        // With room to spare nobody asks slurmctld anything.
        let never = || -> Result<Vec<RunningJob>, String> { panic!("squeue asked") };
        assert!(prolog(&node, &share_env(8, 10), &MpsBooking::default(), never).is_ok());
    }

    /// After a node failure Slurm starts many shares at once on a node whose
    /// ledger still holds the records of the jobs it lost. Every prolog that
    /// finds no room asks slurmctld; the first to reconcile drops the ghosts,
    /// and the others find nothing left to drop: they must place again all
    /// the same, and a refusal must state the load of that second look.
    #[test]
    fn a_share_places_again_after_another_prolog_dropped_the_ghosts() {
        let (node, _dir) = temp_node(None);
        // Jobs 1-8 ran two per GPU and vanished without an epilog.
        for job in 1..=8 {
            assert!(matches!(
                outcome(&node, &share_env(job, 50)),
                PrologOutcome::Placed { .. }
            ));
        }
        let only_new_jobs = || {
            Ok((20..=27)
                .map(|job| RunningJob {
                    job,
                    holds_mps: true,
                })
                .collect())
        };
        // The other prolog's reconciliation lands between this prolog's
        // failed placement and its own reconciliation.
        let beside =
            Ledger::open(&node.cfg.state_dir, node.owner).unwrap_or_else(|e| panic!("{e}"));
        let raced = || {
            let out = beside
                .reconcile(|j| j >= 20)
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(out.value.len(), 8, "the other prolog drops the ghosts");
            only_new_jobs()
        };
        let report = prolog(&node, &share_env(20, 50), &MpsBooking::default(), raced)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(report.dropped.is_empty(), "{:?}", report.dropped);
        assert!(
            matches!(report.outcome, PrologOutcome::Placed { .. }),
            "{:?}",
            report.outcome
        );
        // Seven more fill the node (two per GPU); the ninth is refused
        // with the load it saw after reconciling: 0 units free.
        for job in 21..=27 {
            let r = prolog(
                &node,
                &share_env(job, 50),
                &MpsBooking::default(),
                only_new_jobs,
            )
            .unwrap_or_else(|e| panic!("{e}"));
            assert!(matches!(r.outcome, PrologOutcome::Placed { .. }), "{r:?}");
        }
        let ninth = prolog(
            &node,
            &share_env(28, 50),
            &MpsBooking::default(),
            only_new_jobs,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        match ninth.outcome {
            PrologOutcome::Refused { text, .. } => {
                assert!(text.contains("0 free in total"), "{text}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_count_mismatch_is_noted() {
        let (node, _dir) = temp_node(Some(400));
        let r = prolog(&node, &share_env(3, 40), &MpsBooking::default(), no_squeue)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            r.notes.iter().any(|n| n.contains("Count=1600")),
            "{:?}",
            r.notes
        );
    }

    /// A node whose gres.conf books 100 mps per GPU, spread by Slurm.
    fn slurm_booking() -> MpsBooking {
        MpsBooking {
            per_gpu: true,
            all_sharing: true,
            least_loaded: true,
            per_gpu_count: Some(100),
            cgroup_v2: true,
        }
    }

    /// A share as Slurm 24.11 sends it with per-GPU lines: its GPU and the
    /// true percentage.
    fn slurm_share_env(job: u32, units: u32, gpu: u32) -> JobEnv {
        JobEnv {
            mps_percentage: Some(units),
            units_claimed: None,
            job_gpus: vec![gpu],
            node: "gpu01".to_owned(),
            ..share_env(job, units)
        }
    }

    #[test]
    fn where_slurm_places_its_gpu_is_recorded_and_left_to_slurm() {
        let (node, _dir) = temp_node(None);
        let booking = slurm_booking();
        // Slurm's books are the truth: a third share on a full GPU is
        // recorded there too (it shows as over capacity), never moved.
        for (job, gpu) in [(1, 2), (2, 2), (3, 2)] {
            let report = prolog(&node, &slurm_share_env(job, 50, gpu), &booking, no_squeue)
                .unwrap_or_else(|e| panic!("{e}"));
            let PrologOutcome::Placed { share, .. } = report.outcome else {
                panic!("{:?}", report.outcome);
            };
            assert_eq!(
                (share.gpu, share.units, share.placed_by_slurm),
                (2, 50, true)
            );
            // The third overfills GPU 2 in the ledger: slurmctld is asked
            // for vanished jobs (here it cannot be, so nothing is dropped).
            let asked = report
                .notes
                .iter()
                .any(|n| n.contains("cannot ask slurmctld"));
            assert_eq!(asked, job == 3, "{:?}", report.notes);
        }
        let plan = task_plan(&node.cfg, &node.ledger, 1, true, 1)
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("no plan"));
        // No device rules and Slurm's own CUDA variables: cgroup v2 is fine.
        assert!(!plan.confine);
        assert!(!plan
            .env
            .iter()
            .any(|(k, _)| k == "CUDA_VISIBLE_DEVICES" || k == "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
        assert!(plan
            .env
            .iter()
            .any(|(k, v)| k == "GPUSHARE_GPU" && v == "2"));
    }

    #[test]
    fn where_slurm_places_on_a_gpu_full_of_vanished_jobs_they_are_dropped() {
        let (node, _dir) = temp_node(None);
        let booking = slurm_booking();
        for job in [1, 2] {
            outcome_with(&node, &slurm_share_env(job, 60, 0), &booking);
        }
        // Job 1 ended without an epilog; slurmctld runs 2 and 3.
        let running = || {
            Ok([2, 3]
                .map(|job| RunningJob {
                    job,
                    holds_mps: true,
                })
                .to_vec())
        };
        let report = prolog(&node, &slurm_share_env(3, 30, 0), &booking, running)
            .unwrap_or_else(|e| panic!("{e}"));
        let dropped: Vec<u32> = report.dropped.iter().map(Record::job).collect();
        assert_eq!(dropped, vec![1]);
        let state = node.ledger.snapshot().map(|s| s.state);
        assert!(state.is_ok_and(|s| s.share(2).is_some() && s.share(3).is_some()));
    }

    #[test]
    fn where_slurm_places_a_missing_or_unknown_gpu_is_refused() {
        let (node, _dir) = temp_node(None);
        let booking = slurm_booking();
        let none = JobEnv {
            job_gpus: Vec::new(),
            node: "gpu01".to_owned(),
            ..slurm_share_env(1, 50, 0)
        };
        let refused = |env: &JobEnv, text: &str| {
            let outcome = outcome_with(&node, env, &booking);
            assert!(
                matches!(&outcome, PrologOutcome::Refused { text: t, .. } if t.contains(text)),
                "{outcome:?}"
            );
        };
        refused(&none, "SLURM_JOB_GPUS");
        refused(&slurm_share_env(2, 50, 4), "lists only 4 GPU devices");
    }

    #[test]
    fn stacking_and_unit_mismatches_are_noted() {
        let (node, _dir) = temp_node(None);
        let booking = MpsBooking {
            least_loaded: false,
            per_gpu_count: Some(50),
            ..slurm_booking()
        };
        let env = JobEnv {
            mps_percentage: Some(50),
            ..slurm_share_env(1, 25, 0)
        };
        let r = prolog(&node, &env, &booking, no_squeue).unwrap_or_else(|e| panic!("{e}"));
        let notes = r.notes.join("\n");
        assert!(notes.contains("LL_SHARED_GRES"), "{notes}");
        assert!(
            notes.contains("Count=50") && notes.contains("UnitsPerGPU=100"),
            "{notes}"
        );
        assert!(matches!(r.outcome, PrologOutcome::Placed { share, .. } if share.units == 25));
    }

    #[test]
    fn gpushare_placement_on_cgroup_v2_is_refused_with_the_way_out() {
        let (node, _dir) = temp_node(None);
        let booking = MpsBooking {
            cgroup_v2: true,
            ..MpsBooking::default()
        };
        let outcome = outcome_with(&node, &share_env(1, 50), &booking);
        let PrologOutcome::Refused {
            text,
            reason: "cgroup_v2",
        } = outcome
        else {
            panic!("{outcome:?}");
        };
        assert!(
            text.contains("cgroup v2") && text.contains("all_sharing"),
            "{text}"
        );
        assert!(node
            .ledger
            .snapshot()
            .is_ok_and(|s| s.state.share(1).is_none()));
        // The same node placing through Slurm runs the share.
        let placed = outcome_with(&node, &slurm_share_env(2, 50, 1), &slurm_booking());
        assert!(matches!(placed, PrologOutcome::Placed { .. }), "{placed:?}");
    }

    /// The prolog and epilog keep the metrics file in step with the ledger
    /// and count placements and refusals across their runs.
    #[test]
    fn metrics_follow_each_prolog_and_epilog() {
        let (mut node, dir) = temp_node(None);
        let path = dir.path().join("textfile/gpushare.prom");
        fs::create_dir_all(dir.path().join("textfile")).unwrap_or_else(|e| panic!("{e}"));
        node.cfg.metrics_file = Some(path.clone());
        let probe = |gpu| status::pipe_probe(&node.cfg, gpu);
        let read = || fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
        let run = |job, units| {
            let report = prolog(
                &node,
                &share_env(job, units),
                &MpsBooking::default(),
                no_squeue,
            )
            .unwrap_or_else(|e| panic!("{e}"));
            publish_metrics(&node, &report.events(), probe).unwrap_or_else(|e| panic!("{e}"));
        };
        for job in 1..=4 {
            run(job, 60);
        }
        run(5, 60); // fits no GPU: refused
        let text = read();
        for line in [
            "gpushare_gpu_units_allocated{gpu=\"3\"} 60",
            "gpushare_share_units{job=\"2\",user=\"alice\",gpu=\"1\"} 60",
            "gpushare_placements_total{placed_by=\"gpushare\"} 4",
            "gpushare_refusals_total{reason=\"no_room\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        epilog(&node, 2).unwrap_or_else(|e| panic!("{e}"));
        publish_metrics(&node, &[], probe).unwrap_or_else(|e| panic!("{e}"));
        let text = read();
        assert!(
            text.contains("gpushare_gpu_units_allocated{gpu=\"1\"} 0\n"),
            "{text}"
        );
        assert!(!text.contains("job=\"2\""), "{text}");
        // Counted once each, whatever the number of writes.
        assert!(text.contains("gpushare_placements_total{placed_by=\"gpushare\"} 4\n"));
        // No temporary file is left where node_exporter looks.
        let names: Vec<_> = fs::read_dir(dir.path().join("textfile"))
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert_eq!(names, vec![std::ffi::OsString::from("gpushare.prom")]);
    }

    fn outcome_with(node: &Node, env: &JobEnv, booking: &MpsBooking) -> PrologOutcome {
        prolog(node, env, booking, no_squeue)
            .unwrap_or_else(|e| panic!("{e}"))
            .outcome
    }

    #[test]
    fn an_idle_daemon_is_stopped_only_under_its_lock_from_a_fresh_ledger() {
        let (mut node, dir) = temp_node(Some(1600));
        // A control program that answers every call (`quit` included).
        node.cfg.mps_control = MpsControl::Program(PathBuf::from("/bin/true"));
        let control = |gpu: u32| daemon::pipe_dir(&node.cfg, gpu).join("control");
        for gpu in [0, 1] {
            let pipe = daemon::pipe_dir(&node.cfg, gpu);
            fs::create_dir_all(&pipe).unwrap_or_else(|e| panic!("{e}"));
            fs::write(control(gpu), "").unwrap_or_else(|e| panic!("{e}"));
        }
        // A prolog holds GPU 0's lock while it places a share there (the
        // least-loaded GPU of an empty node): the cleanup waits for it and
        // then sees the share.
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let stopped = std::thread::scope(|scope| {
            let prolog = scope.spawn(|| {
                daemon::with_gpu_lock(&node.cfg, 0, || {
                    let _ = held_tx.send(());
                    std::thread::sleep(Duration::from_millis(300));
                    node.ledger.place(7, 1000, "alice", 100, 4, 100)
                })
            });
            let _ = held_rx.recv();
            let stopped = stop_idle_daemons(&node).unwrap_or_else(|e| panic!("{e}"));
            let placed = prolog.join().ok().and_then(Result::ok).and_then(Result::ok);
            assert_eq!(placed.map(|p| p.value.share.gpu), Some(0));
            stopped
        });
        assert_eq!(
            stopped.iter().map(|(gpu, _)| *gpu).collect::<Vec<_>>(),
            vec![1],
            "only the idle GPU's daemon is stopped: {stopped:?}"
        );
        assert!(control(0).exists() && !control(1).exists());
        drop(dir);
    }

    #[test]
    fn after_a_downgrade_shares_are_refused_and_other_jobs_run() {
        let (node, _dir) = temp_node(Some(1600));
        assert!(matches!(
            outcome(&node, &share_env(1, 100)),
            PrologOutcome::Placed { .. }
        ));
        let path = node.ledger.state_path();
        let text = fs::read_to_string(&path).unwrap_or_default();
        fs::write(&path, text.replace("\"version\": 2", "\"version\": 9"))
            .unwrap_or_else(|e| panic!("{e}"));
        match outcome(&node, &share_env(2, 100)) {
            PrologOutcome::Refused { reason, text } => {
                assert_eq!(reason, "downgrade");
                assert!(text.contains("newer gpushare (ledger version 9"), "{text}");
            }
            other => panic!("{other:?}"),
        }
        let whole = JobEnv {
            mps_percentage: None,
            units_claimed: None,
            ..share_env(3, 100)
        };
        let report = prolog(&node, &whole, &MpsBooking::default(), no_squeue);
        assert!(
            matches!(&report, Ok(r) if r.outcome == PrologOutcome::Untouched && !r.notes.is_empty()),
            "{report:?}"
        );
    }

    #[test]
    fn a_share_whose_daemon_cannot_start_is_refused_unless_the_site_runs_it_anyway() {
        let (mut node, _dir) = temp_node(Some(1600));
        // `false -d` fails: the daemon cannot be started.
        node.cfg.mps_control = MpsControl::Program(PathBuf::from("/bin/false"));
        let report = prolog(&node, &share_env(1, 100), &MpsBooking::default(), no_squeue)
            .unwrap_or_else(|e| panic!("{e}"));
        match &report.outcome {
            PrologOutcome::Refused { reason, text } => {
                assert_eq!(*reason, MPS_DAEMON_REFUSAL);
                assert!(text.contains("could not be started"), "{text}");
                assert!(text.contains("MPSFailure=refuse"), "{text}");
            }
            other => panic!("{other:?}"),
        }
        // Counted as a refusal and as a daemon failure.
        assert!(report
            .events()
            .contains(&Event::Refused(MPS_DAEMON_REFUSAL)));
        assert!(report
            .events()
            .iter()
            .any(|e| matches!(e, Event::Daemon(MpsDaemon::Failed(_)))));
        let refused = task_plan(&node.cfg, &node.ledger, 1, true, 1);
        assert!(refused.is_err_and(|e| e.contains("could not be started")));
        // MPSFailure=run: placed, and its first line says what it lacks.
        node.cfg.mps_failure = config::MpsFailure::Run;
        match outcome(&node, &share_env(2, 100)) {
            PrologOutcome::Placed { mps, .. } => {
                assert!(matches!(mps, MpsDaemon::Failed(_)), "{mps:?}")
            }
            other => panic!("{other:?}"),
        }
        let plan = task_plan(&node.cfg, &node.ledger, 2, true, 1)
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("no plan"));
        assert!(
            plan.banner.contains("WARNING") && plan.banner.contains("WITHOUT MPS"),
            "{}",
            plan.banner
        );
        // The note goes with the job.
        epilog(&node, 2).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(unserved(&node.ledger, 2), None);
    }

    #[test]
    fn auto_without_a_control_program_refuses_shares_and_none_runs_them() {
        let (mut node, _dir) = temp_node(Some(1600));
        node.cfg.mps_control = MpsControl::FromPath;
        if crate::mps::programs::program(&node.cfg).is_some() {
            return; // a node with MPS installed: nothing to show here
        }
        match outcome(&node, &share_env(1, 100)) {
            PrologOutcome::Refused { reason, text } => {
                assert_eq!(reason, MPS_DAEMON_REFUSAL);
                assert!(text.contains("MPSControl=auto looks in PATH"), "{text}");
            }
            other => panic!("{other:?}"),
        }
        // MPSControl=none: the site runs MPS itself.
        node.cfg.mps_control = MpsControl::Disabled;
        assert!(matches!(
            outcome(&node, &share_env(2, 100)),
            PrologOutcome::Placed { .. }
        ));
    }

    #[test]
    fn a_shares_memory_is_divided_over_its_steps_tasks() {
        let (mut node, _dir) = temp_node(Some(1600));
        node.cfg.gpu_memory_mib = Some(48 * 1024);
        node.set_gpu_memory(Some(48 * 1024));
        assert!(matches!(
            outcome(&node, &share_env(1, 100)),
            PrologOutcome::Placed { .. }
        ));
        // A whole GPU's units: its 48 GiB.
        let limit_of = |tasks: u32| {
            let plan = task_plan(&node.cfg, &node.ledger, 1, true, tasks)
                .unwrap_or_else(|e| panic!("{e}"))
                .unwrap_or_else(|| panic!("no plan"));
            let var = |name: &str| {
                plan.env
                    .iter()
                    .chain(&plan.hints)
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            (
                var("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"),
                var("GPUSHARE_MEMORY_FRACTION"),
                var("XLA_PYTHON_CLIENT_MEM_FRACTION"),
                plan.banner,
            )
        };
        let (one, fraction, jax, banner) = limit_of(1);
        assert_eq!(one, "0=49152M");
        assert_eq!((fraction.as_str(), jax.as_str()), ("1.0000", "0.7500"));
        assert!(banner.contains("49152 MiB"), "{banner}");
        let (three, fraction, _, banner) = limit_of(3);
        assert_eq!(three, "0=16384M");
        assert_eq!(fraction, "0.3333");
        assert!(
            banner.contains("16384 MiB for each of this step's 3 tasks"),
            "{banner}"
        );
        // Whatever the tasks, together they hold at most the share.
        for tasks in 1..=48u32 {
            let (limit, fraction, jax, _) = limit_of(tasks);
            let mib: u64 = limit
                .trim_start_matches("0=")
                .trim_end_matches('M')
                .parse()
                .unwrap_or(u64::MAX);
            assert!(mib * u64::from(tasks) <= 49152, "{tasks} tasks: {limit}");
            let f: f64 = fraction.parse().unwrap_or(2.0);
            let j: f64 = jax.parse().unwrap_or(2.0);
            assert!(
                f * f64::from(tasks) <= 1.0 && j < f,
                "{tasks} tasks: {f} {j}"
            );
        }
    }

    #[test]
    fn framework_hints_never_pass_the_share() {
        let cfg = GpuMpsConfig {
            gpu_memory_mib: Some(40_000),
            ..GpuMpsConfig::default()
        };
        // A fixed limit below the share's part of the GPU lowers the fraction.
        assert_eq!(memory_fraction(&cfg, 50, Some(10_000), 1), 0.25);
        assert_eq!(memory_fraction(&cfg, 50, Some(5_000), 2), 0.125);
        // Unknown GPU memory: the share's part of the GPU.
        let unknown = GpuMpsConfig::default();
        assert_eq!(memory_fraction(&unknown, 50, Some(10_000), 1), 0.5);
        let hints = framework_hints(1.0 / 3.0);
        assert!(hints.contains(&("GPUSHARE_MEMORY_FRACTION".into(), "0.3333".into())));
        assert!(hints.contains(&("XLA_PYTHON_CLIENT_MEM_FRACTION".into(), "0.2500".into())));
        assert!(hints.contains(&("TF_FORCE_GPU_ALLOW_GROWTH".into(), "true".into())));
        let third_of_a_quarter = framework_hints(0.25 / 3.0);
        assert!(third_of_a_quarter
            .contains(&("XLA_PYTHON_CLIENT_MEM_FRACTION".into(), "0.0625".into())));
    }
}
