//! The node as the prolog, epilog, SPANK plugin and admin command open
//! it: the configuration in force, its GPU devices, its ledger with the
//! views each transaction publishes, and who may reach its MPS pipes.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::mps::config::{self, GpuMpsConfig};
use crate::mps::daemon;
use crate::mps::dcgm::JobMapping;
use crate::mps::disabled;
use crate::mps::gpu_devices::device_minor;
pub use crate::mps::gpu_devices::gpu_devices;
use crate::mps::health;
use crate::mps::in_force;
use crate::mps::ledger::{Ledger, LedgerError, LedgerState};
use crate::mps::placement::ServerRule;
use crate::mps::status::StatusCopy;
use crate::mps::under_test;
use crate::shared::locations::beside_slurm_conf;
use crate::shared::ConfigError;

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
    pub(super) gpu_memory_mib: Option<u64>,
    /// Restricts who may traverse a GPU's MPS directory to these uids (and
    /// root): the node programs set a POSIX ACL (`gpushare_node::acl`);
    /// `None` leaves the directories 0755.
    pub pipe_guard: Option<PipeGuard>,
    /// Why no share may be placed now, though the node runs (gpu_mps.conf
    /// unusable or changed under running shares: see [`crate::mps::in_force`]).
    pub shares_refused: Option<String>,
    /// The configuration's lock, which a prolog holds while it places,
    /// stayed held by another for the whole wait: no share is placed and
    /// no whole GPU recorded ([`in_force::InForce::busy`]).
    pub busy: Option<crate::mps::lock_wait::Busy>,
    /// The admin took the node off sharing (`gpu-mps disable`): new shares
    /// are refused with reason `disabled`.
    pub disabled: Option<crate::mps::disabled::Disabled>,
    /// What the node's log must say about the configuration in force.
    pub conf_notes: Vec<String>,
    /// The listed GPUs that NVML reports in MIG mode (their device paths):
    /// while there is one and `MIGShares` is not `allow`, no share is
    /// placed. Set through [`Node::set_mig_minors`].
    pub(super) mig_gpus: Vec<PathBuf>,
    /// Who runs what is root's to see (`PrivateData`, see [`hides_users`]):
    /// the status copy and DCGM files are root's, the metrics name no user.
    /// `None`: not known (the files keep their mode, the metrics name no
    /// user).
    pub private: Option<bool>,
    /// The GPUs set aside from sharing (see [`health`]): the prolog reads
    /// the record once, after setting aside the GPUs NVML reports lost.
    pub failed: health::FailedGpus,
    /// The GPUs under `gpu-mps selftest` now ([`under_test`]): read with
    /// [`Node::failed`]; placement passes them by.
    pub under_test: under_test::UnderTest,
}

/// See [`Node::pipe_guard`].
pub type PipeGuard = fn(&Path, &[u32]) -> std::io::Result<()>;

/// Lets only the users with a share on `gpu` (read from `state`) reach its
/// MPS pipes, where the node has a guard; a note when it cannot.
pub(super) fn guard_pipes(node: &Node, state: &LedgerState, gpu: u32, notes: &mut Vec<String>) {
    let Some(guard) = node.pipe_guard else {
        return;
    };
    let uids = share_uids(state, gpu);
    let dir = daemon::gpu_dir(&node.cfg, gpu);
    if let Err(e) = guard(&dir, &uids) {
        notes.push(format!(
            "{} stays open to every user ({e}): any job on this node can reach GPU {gpu}'s MPS \
             server; put StateDir on a filesystem with POSIX ACLs (tmpfs /run has them)",
            dir.display()
        ));
    }
}

/// The users with a share on `gpu` by `state`, each once.
pub(super) fn share_uids(state: &LedgerState, gpu: u32) -> Vec<u32> {
    let mut uids: Vec<u32> = state
        .shares()
        .filter(|s| s.gpu == gpu)
        .map(|s| s.uid)
        .collect();
    uids.sort_unstable();
    uids.dedup();
    uids
}

/// Why a node cannot share GPUs (the prolog then fails and slurmd drains
/// the node, which is right: its jobs' GPUs would be wrong).
#[derive(Debug)]
pub enum Unfit {
    Config(ConfigError),
    /// No configuration can be trusted (see [`crate::mps::in_force`]).
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
    /// Opens node `node` (as Slurm names it) with the configuration in
    /// force for `gpu_mps.conf` (read as a reader: see
    /// [`in_force::resolve`]) and its ledger with its status copy.
    /// `Ok(None)`: the node has no `gpu_mps.conf`, so it shares nothing
    /// (one that gives it no GPUs is `Unfit::NoConfig`, saying so).
    pub fn open(conf_path: &Path, node: &str, owner: u32) -> Result<Option<Self>, Unfit> {
        if fs::symlink_metadata(conf_path).is_err() {
            return Ok(None);
        }
        let records = Path::new(in_force::NODE_RECORDS_DIR);
        let role = in_force::Role::Reader;
        let in_force = in_force::resolve(conf_path, node, records, owner, role);
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
        node.busy = in_force.busy.clone();
        node.conf_notes = in_force.notes.clone();
        node.disabled = disabled::read(Path::new(disabled::DISABLED_DIR), conf_path, owner);
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
        Ok(Self::of_parts(cfg, gpu_count, ledger, owner, private))
    }

    /// The node of its configuration and opened ledger, nothing else read
    /// yet (no refusal, no busy or disabled marks, no MIG GPU, the memory
    /// of the configuration).
    fn of_parts(
        cfg: GpuMpsConfig,
        gpu_count: u32,
        ledger: Ledger,
        owner: u32,
        private: Option<bool>,
    ) -> Self {
        let mut node = Self {
            private,
            cfg,
            gpu_count,
            ledger,
            owner,
            gpu_memory_mib: None,
            pipe_guard: None,
            shares_refused: None,
            busy: None,
            disabled: None,
            conf_notes: Vec::new(),
            mig_gpus: Vec::new(),
            failed: Default::default(),
            under_test: Default::default(),
        };
        node.set_gpu_memory(None);
        node
    }

    /// The device minors (N of `/dev/nvidiaN`) NVML reports in MIG mode:
    /// the node's listed GPUs among them are kept for [`prolog`](fn@super::prolog).
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
    /// Waits for locks within `wait` from now on (a node program's budget:
    /// [`crate::mps::lock_wait`]), the ledger's and the GPUs' alike.
    pub fn set_lock_wait(&mut self, wait: crate::mps::lock_wait::LockWait) {
        self.ledger.set_lock_wait(wait);
    }

    pub fn set_gpu_memory(&mut self, mib: Option<u64>) {
        self.gpu_memory_mib = mib;
        let cfg = self.cfg.clone();
        self.ledger
            .set_share_memory(crate::mps::ledger::ShareMemory(Arc::new(move |units| {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::mps::config::MpsControl;
    use std::os::unix::fs::MetadataExt;

    pub(crate) fn temp_node(count: Option<u64>) -> (Node, tempfile::TempDir) {
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
        (Node::of_parts(cfg, 4, ledger, owner, Some(false)), dir)
    }
}
