//! What happens on a GPU node for MPS shares, between the slurmd prolog,
//! the SPANK plugin in slurmstepd and the epilog.
//!
//! - `gpu-mps-prolog` ([`prolog`]): classify the job from its Prolog
//!   environment, reconcile the ledger, place a share on the least-loaded
//!   GPU (or record a whole-GPU holder), start that GPU's MPS daemon.
//!   A share that cannot be placed is *refused*, not failed: a failing
//!   prolog drains the node, so the prolog writes a refusal note and the
//!   SPANK plugin fails the job with its text.
//! - SPANK `gpu_mps` ([`task_plan`]): read the placement, set each task's
//!   environment, confine its devices.
//! - `gpu-mps-epilog` ([`epilog`]): release the job; stop a GPU's MPS
//!   daemon when its last share ends.
//!
//! Everything here is safe Rust over the environment and files; the binaries
//! and the plugin only gather inputs and print.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::ledger::{Ledger, LedgerError, Record, ShareRecord};
use crate::mps_conf::{GpuMpsConfig, MpsControl};
use crate::policy::MPS_UNITS_ENV;

/// Prolog environment variable carrying the units the job_submit plugin
/// recorded (`GPUSHARE_MPS_UNITS` in the job's SPANK environment).
pub fn spank_units_env() -> String {
    format!("SPANK_{MPS_UNITS_ENV}")
}

/// A GPU node as the prolog, epilog and admin command see it.
#[derive(Debug)]
pub struct Node {
    pub cfg: GpuMpsConfig,
    pub conf_path: PathBuf,
    pub gpu_count: u32,
    pub ledger: Ledger,
}

impl Node {
    /// Loads `gpu_mps.conf` and opens the ledger. `Ok(None)`: the node has
    /// no `gpu_mps.conf`, so it shares nothing. `Err`: the node is unfit
    /// (bad config, unusable state directory), with the reason.
    pub fn open(conf_path: &Path, euid: u32) -> Result<Option<Self>, String> {
        let text = match fs::read_to_string(conf_path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", conf_path.display())),
        };
        let cfg = crate::mps_conf::parse(&text, &conf_path.to_string_lossy())
            .map_err(|e| e.to_string())?;
        let gpu_count = u32::try_from(gpu_devices(&cfg).len()).unwrap_or(u32::MAX);
        if gpu_count == 0 {
            return Err(format!(
                "{}: no GPU device files found (set GPUDevices=)",
                conf_path.display()
            ));
        }
        let ledger = Ledger::open(&cfg.state_dir, euid).map_err(|e| e.to_string())?;
        Ok(Some(Self {
            cfg,
            conf_path: conf_path.to_path_buf(),
            gpu_count,
            ledger,
        }))
    }

    /// Appends a line to the node's gpushare log (`<StateDir>/log`) and
    /// prints it on stderr (which slurmd logs when the script fails).
    pub fn log(&self, line: &str) {
        eprintln!("{line}");
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if let Ok(mut f) = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.ledger.dir().join("log"))
        {
            let _ = std::io::Write::write_all(&mut f, format!("{stamp} {line}\n").as_bytes());
        }
    }
}

/// The common start of `gpu-mps-prolog` and `gpu-mps-epilog`: parses
/// `[--conf PATH]` (default: gpu_mps.conf next to slurm.conf), opens the
/// node and reads the job from slurmd's environment. `Ok(None)`: the node
/// shares nothing. `Err((status, message))`: 2 for misuse, 1 when the node
/// is unfit (slurmd then drains it, as it should).
pub fn script_start(
    program: &str,
    args: &[String],
    euid: u32,
) -> Result<Option<(Node, JobEnv)>, (u8, String)> {
    let conf = match args {
        [] => crate::reload::beside_slurm_conf(None, crate::mps_conf::CONF_NAME),
        [flag, path] if flag == "--conf" => PathBuf::from(path),
        _ => {
            return Err((
                2,
                format!("usage: {program} [--conf PATH]   (run by slurmd as Prolog=/Epilog=)"),
            ))
        }
    };
    let node = match Node::open(&conf, euid) {
        Ok(Some(n)) => n,
        Ok(None) => return Ok(None),
        Err(e) => return Err((1, format!("{program}: node unfit for GPU sharing: {e}"))),
    };
    let env =
        JobEnv::from_env(|k| std::env::var(k).ok()).map_err(|e| (2, format!("{program}: {e}")))?;
    Ok(Some((node, env)))
}

/// The jobs slurmctld says run on `node` (None when it cannot be asked:
/// callers must then not drop anything).
pub fn running_jobs(node: &str) -> Option<HashSet<u32>> {
    let out = Command::new("squeue")
        .args([
            "--noheader",
            "--nodelist",
            node,
            "--states=RUNNING,COMPLETING,CONFIGURING,SUSPENDED,STOPPED",
            "--format=%A",
        ])
        .stdin(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().parse().ok())
        .collect()
}

/// What the node knows about a job from its Prolog/Epilog environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnv {
    pub job: u32,
    pub uid: u32,
    pub user: String,
    /// Exact units from the job_submit plugin.
    pub units: Option<u32>,
    /// Slurm's `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` (set for mps jobs only).
    pub mps_percentage: Option<u32>,
    /// `SLURM_JOB_GPUS`: the GPU indices Slurm allocated.
    pub job_gpus: Vec<u32>,
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
        Ok(Self {
            job,
            uid,
            user,
            units: num(&spank_units_env())?,
            mps_percentage: num("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")?,
            job_gpus,
        })
    }

    /// Whether the job holds an MPS share on this node.
    pub fn is_share(&self) -> bool {
        self.units.is_some() || self.mps_percentage.is_some()
    }
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

/// Directory of GPU `gpu`'s MPS pipes and logs. Outside the root-only
/// ledger directory: job processes must reach the pipes.
pub fn mps_dir(cfg: &GpuMpsConfig, gpu: u32) -> PathBuf {
    let mut base = cfg.state_dir.clone().into_os_string();
    base.push("-mps");
    PathBuf::from(base).join(format!("gpu{gpu}"))
}

/// The world-readable copy of the ledger that `gpu-mps status` shows to
/// users (the ledger's own directory is root-only). It says what squeue
/// says (job, user) plus the GPU and units.
pub fn public_status_path(cfg: &GpuMpsConfig) -> PathBuf {
    mps_dir(cfg, 0).with_file_name("state")
}

/// Publishes the ledger's current state at [`public_status_path`]
/// (temp file + rename, mode 0644, so readers never see half a file).
pub fn publish_status(cfg: &GpuMpsConfig, ledger: &Ledger) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let path = public_status_path(cfg);
    let dir = path.parent().unwrap_or(Path::new("/"));
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o755));
    let text = ledger
        .snapshot()
        .map_err(|e| e.to_string())?
        .state
        .to_text();
    let tmp = path.with_extension("new");
    fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o644))
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    fs::rename(&tmp, &path).map_err(|e| format!("{}: {e}", path.display()))
}

fn refusal_path(ledger: &Ledger, job: u32) -> PathBuf {
    ledger.dir().join(format!("refused.{job}"))
}

/// The refusal note the prolog left for `job`, if any.
pub fn refusal(ledger: &Ledger, job: u32) -> Option<String> {
    fs::read_to_string(refusal_path(ledger, job)).ok()
}

fn write_refusal(ledger: &Ledger, job: u32, text: &str) -> std::io::Result<()> {
    let path = refusal_path(ledger, job);
    let tmp = path.with_extension("new");
    fs::write(&tmp, text)?;
    fs::rename(&tmp, &path)
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
    /// A share that cannot run here; the SPANK plugin fails the job with this text.
    Refused(String),
    /// A whole-GPU job recorded; shares already on its GPUs are listed (an overlap Slurm created).
    Whole {
        gpus: Vec<u32>,
        overlapping: Vec<ShareRecord>,
    },
}

/// Result of the prolog: the outcome, plus what it noticed on the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrologReport {
    pub outcome: PrologOutcome,
    /// Records dropped by reconciliation (jobs no longer running here).
    pub dropped: Vec<Record>,
    /// Anything an admin should know (set-aside state files, count mismatch).
    pub notes: Vec<String>,
}

/// Runs the prolog's logic. `running` is the set of jobs slurmctld says run
/// on this node, when it could be asked (`None`: skip reconciliation —
/// never drop records on uncertain information). An `Err` means the node is
/// unfit (unusable state directory): the prolog then fails, and Slurm
/// drains the node, which is right.
pub fn prolog(
    cfg: &GpuMpsConfig,
    gpu_count: u32,
    ledger: &Ledger,
    env: &JobEnv,
    running: Option<&HashSet<u32>>,
) -> Result<PrologReport, LedgerError> {
    let mut notes = Vec::new();
    let mut dropped = Vec::new();
    if let Some(running) = running {
        let out = ledger.reconcile(|job| job == env.job || running.contains(&job))?;
        if let Some(aside) = out.set_aside {
            notes.push(aside.to_string());
        }
        for r in &out.value {
            let _ = fs::remove_file(refusal_path(ledger, r.job()));
        }
        dropped = out.value;
    }
    if let Some(count) = cfg.slurm_mps_count {
        let wanted = cfg.slurm_count_for(gpu_count);
        if count != wanted {
            notes.push(format!(
                "SlurmMpsCount={count} but a node of {gpu_count} GPUs holding {} units each needs Name=mps Count={wanted} in gres.conf on Slurm 22.05",
                cfg.units_per_gpu
            ));
        }
    }
    let outcome = if env.is_share() {
        let units = env.units.or_else(|| {
            env.mps_percentage
                .and_then(|p| cfg.units_from_percentage(p, gpu_count))
        });
        match units {
            None => refuse(
                ledger,
                env.job,
                format!(
                    "gpu_mps: job {} holds an MPS share but its size is unknown: it was not submitted through job_submit/gpu_qos, \
                     and gpu_mps.conf has no SlurmMpsCount to derive it from Slurm's percentage",
                    env.job
                ),
            ),
            Some(units) => match ledger.place(env.job, env.uid, &env.user, units, gpu_count, cfg.units_per_gpu) {
                Ok(placed) => {
                    if let Some(aside) = placed.set_aside {
                        notes.push(aside.to_string());
                    }
                    let mps = start_mps_daemon(cfg, placed.value.share.gpu);
                    PrologOutcome::Placed { share: placed.value.share, already: placed.value.already_recorded, mps }
                }
                Err(LedgerError::Placement { error, .. }) => refuse(ledger, env.job, format!("gpu_mps: job {}: {error}", env.job)),
                Err(other) => return Err(other),
            },
        }
    } else if !env.job_gpus.is_empty() {
        let out = ledger.record_whole(env.job, &env.job_gpus)?;
        PrologOutcome::Whole {
            gpus: env.job_gpus.clone(),
            overlapping: out.value,
        }
    } else {
        PrologOutcome::Untouched
    };
    let changed = !dropped.is_empty()
        || matches!(
            outcome,
            PrologOutcome::Placed { already: false, .. } | PrologOutcome::Whole { .. }
        );
    if changed {
        if let Err(e) = publish_status(cfg, ledger) {
            notes.push(format!("cannot publish the status copy: {e}"));
        }
    }
    Ok(PrologReport {
        outcome,
        dropped,
        notes,
    })
}

fn refuse(ledger: &Ledger, job: u32, text: String) -> PrologOutcome {
    match write_refusal(ledger, job, &text) {
        Ok(()) => PrologOutcome::Refused(text),
        Err(e) => PrologOutcome::Refused(format!(
            "{text} (and the refusal note could not be written: {e})"
        )),
    }
}

/// What the epilog did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpilogReport {
    pub released: Vec<Record>,
    /// MPS daemons stopped because their GPU has no share left.
    pub stopped: Vec<(u32, MpsDaemon)>,
}

/// Releases `job` (idempotent: a second run releases nothing).
pub fn epilog(
    cfg: &GpuMpsConfig,
    gpu_count: u32,
    ledger: &Ledger,
    job: u32,
) -> Result<EpilogReport, LedgerError> {
    let released = ledger.release(job)?.value;
    let _ = fs::remove_file(refusal_path(ledger, job));
    if !released.is_empty() {
        // Best effort: the status copy is informational.
        let _ = publish_status(cfg, ledger);
    }
    let mut stopped = Vec::new();
    let snapshot = ledger.snapshot()?;
    for r in &released {
        if let Record::Share(s) = r {
            let idle = snapshot
                .state
                .gpu_loads(gpu_count)
                .get(s.gpu as usize)
                .is_none_or(|l| l.share_jobs == 0);
            if idle {
                stopped.push((s.gpu, stop_mps_daemon(cfg, s.gpu)));
            }
        }
    }
    Ok(EpilogReport { released, stopped })
}

/// What happened to an MPS control daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MpsDaemon {
    /// Started (or asked to stop) successfully.
    Done,
    /// Already running.
    AlreadyRunning,
    /// No `nvidia-cuda-mps-control` on this node (or `MPSControl=none`).
    NotAvailable,
    /// The control program failed; the text says how.
    Failed(String),
}

fn mps_program(cfg: &GpuMpsConfig) -> Option<PathBuf> {
    match &cfg.mps_control {
        MpsControl::Disabled => None,
        MpsControl::Program(p) => Some(p.clone()),
        MpsControl::FromPath => std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("nvidia-cuda-mps-control"))
                .find(|p| p.is_file())
        }),
    }
}

fn mps_command(cfg: &GpuMpsConfig, program: &Path, gpu: u32) -> Command {
    let dir = mps_dir(cfg, gpu);
    let mut cmd = Command::new(program);
    // Index N must mean /dev/nvidiaN: CUDA's default order is "fastest first".
    cmd.env("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        .env("CUDA_VISIBLE_DEVICES", gpu.to_string())
        .env("CUDA_MPS_PIPE_DIRECTORY", dir.join("pipe"))
        .env("CUDA_MPS_LOG_DIRECTORY", dir.join("log"));
    cmd
}

/// Starts GPU `gpu`'s MPS control daemon unless it runs already.
pub fn start_mps_daemon(cfg: &GpuMpsConfig, gpu: u32) -> MpsDaemon {
    let Some(program) = mps_program(cfg) else {
        return MpsDaemon::NotAvailable;
    };
    let dir = mps_dir(cfg, gpu);
    if dir.join("pipe/control").exists() {
        return MpsDaemon::AlreadyRunning;
    }
    for sub in ["pipe", "log"] {
        if let Err(e) = fs::create_dir_all(dir.join(sub)) {
            return MpsDaemon::Failed(format!("{}: {e}", dir.join(sub).display()));
        }
    }
    match mps_command(cfg, &program, gpu)
        .arg("-d")
        .stdin(Stdio::null())
        .output()
    {
        Ok(o) if o.status.success() => MpsDaemon::Done,
        Ok(o) => MpsDaemon::Failed(format!(
            "{} -d: {} {}",
            program.display(),
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => MpsDaemon::Failed(format!("{}: {e}", program.display())),
    }
}

/// Asks GPU `gpu`'s MPS control daemon to quit.
pub fn stop_mps_daemon(cfg: &GpuMpsConfig, gpu: u32) -> MpsDaemon {
    let Some(program) = mps_program(cfg) else {
        return MpsDaemon::NotAvailable;
    };
    if !mps_dir(cfg, gpu).join("pipe/control").exists() {
        return MpsDaemon::NotAvailable;
    }
    let child = mps_command(cfg, &program, gpu)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return MpsDaemon::Failed(format!("{}: {e}", program.display())),
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = std::io::Write::write_all(&mut stdin, b"quit\n");
    }
    match child.wait_with_output() {
        Ok(o) if o.status.success() => MpsDaemon::Done,
        Ok(o) => MpsDaemon::Failed(format!(
            "quit: {} {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => MpsDaemon::Failed(e.to_string()),
    }
}

/// What each task of a share job gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskPlan {
    pub gpu: u32,
    pub units: u32,
    /// The chosen GPU's device file (allowed).
    pub device: PathBuf,
    /// Every other GPU's device file (denied).
    pub other_devices: Vec<PathBuf>,
    /// Environment to set, replacing what Slurm set.
    pub env: Vec<(String, String)>,
}

/// The plan for `job`'s tasks: `Ok(None)` when the job holds no share
/// here, `Err(text)` when it must fail (refused by the prolog, or a share
/// Slurm granted that the prolog never placed).
pub fn task_plan(
    cfg: &GpuMpsConfig,
    ledger: &Ledger,
    job: u32,
    slurm_says_share: bool,
) -> Result<Option<TaskPlan>, String> {
    if let Some(text) = refusal(ledger, job) {
        return Err(text);
    }
    let snapshot = ledger
        .snapshot()
        .map_err(|e| format!("gpu_mps: job {job}: cannot read the node's share ledger: {e}"))?;
    let Some(share) = snapshot.state.share(job) else {
        if slurm_says_share {
            return Err(format!(
                "gpu_mps: job {job} holds an MPS share but no GPU was chosen for it: is Prolog=gpu-mps-prolog configured on this node?"
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
    let dir = mps_dir(cfg, share.gpu);
    let percent = (u64::from(share.units) * 100 / u64::from(cfg.units_per_gpu)).max(1);
    let mut env = vec![
        // The MPS server of this GPU exposes exactly one device to clients.
        ("CUDA_VISIBLE_DEVICES".to_owned(), "0".to_owned()),
        (
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_owned(),
            percent.to_string(),
        ),
        (
            "CUDA_MPS_PIPE_DIRECTORY".to_owned(),
            dir.join("pipe").to_string_lossy().into_owned(),
        ),
        (
            "CUDA_MPS_LOG_DIRECTORY".to_owned(),
            dir.join("log").to_string_lossy().into_owned(),
        ),
        ("GPUSHARE_GPU".to_owned(), share.gpu.to_string()),
        ("GPUSHARE_MPS_UNITS".to_owned(), share.units.to_string()),
    ];
    if let Some(limit) = cfg.memory_limit(share.units) {
        env.push(("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_owned(), limit));
    }
    Ok(Some(TaskPlan {
        gpu: share.gpu,
        units: share.units,
        device,
        other_devices,
        env,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    /// Removes a test's directory when the test ends, passed or failed.
    struct RemoveOnDrop(PathBuf);

    impl Drop for RemoveOnDrop {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn temp_ledger(name: &str) -> (GpuMpsConfig, Ledger, RemoveOnDrop) {
        let dir = std::env::temp_dir().join(format!("gpushare-node-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let euid = fs::metadata(std::env::temp_dir())
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
            .unwrap_or(0);
        let cfg = GpuMpsConfig {
            state_dir: dir.join("state"),
            gpu_devices: Some(
                (0..4)
                    .map(|i| PathBuf::from(format!("/dev/fake{i}")))
                    .collect(),
            ),
            mps_control: MpsControl::Disabled,
            ..GpuMpsConfig::default()
        };
        let ledger = Ledger::open(&cfg.state_dir, euid).unwrap_or_else(|e| panic!("{e}"));
        (cfg, ledger, RemoveOnDrop(dir))
    }

    fn share_env(job: u32, units: u32) -> JobEnv {
        JobEnv {
            job,
            uid: 1000,
            user: "alice".into(),
            units: Some(units),
            mps_percentage: Some(12),
            job_gpus: vec![0],
        }
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
        assert_eq!(e.units, Some(50));
        assert!(JobEnv::from_env(env_of(&[])).is_err());
        assert!(JobEnv::from_env(env_of(&[("SLURM_JOB_ID", "x")])).is_err());
    }

    #[test]
    fn shares_spread_and_tasks_get_their_gpu() {
        let (cfg, ledger, _dir) = temp_ledger("spread");
        let mut gpus = Vec::new();
        for job in 1..=4 {
            match prolog(&cfg, 4, &ledger, &share_env(job, 50), None) {
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
        let public = fs::read_to_string(public_status_path(&cfg)).unwrap_or_default();
        assert_eq!(
            public.matches("share job=").count(),
            4,
            "{} => {public:?}",
            public_status_path(&cfg).display()
        );
        let plan = task_plan(&cfg, &ledger, 3, true)
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("no plan"));
        assert_eq!(plan.gpu, 2);
        assert_eq!(plan.device, PathBuf::from("/dev/fake2"));
        assert_eq!(plan.other_devices.len(), 3);
        assert!(plan
            .env
            .contains(&("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".into(), "50".into())));
        assert!(plan.env.contains(&("GPUSHARE_GPU".into(), "2".into())));
        assert_eq!(task_plan(&cfg, &ledger, 99, false), Ok(None));
        assert!(
            task_plan(&cfg, &ledger, 99, true).is_err_and(|e| e.contains("Prolog=gpu-mps-prolog"))
        );
    }

    #[test]
    fn a_share_that_fits_no_gpu_is_refused_not_failed_and_epilog_is_idempotent() {
        let (cfg, ledger, _dir) = temp_ledger("refuse");
        for job in 1..=4 {
            assert!(matches!(
                prolog(&cfg, 4, &ledger, &share_env(job, 60), None).map(|r| r.outcome),
                Ok(PrologOutcome::Placed { .. })
            ));
        }
        // 160 units free on the node, but at most 40 on any one GPU.
        match prolog(&cfg, 4, &ledger, &share_env(5, 60), None).map(|r| r.outcome) {
            Ok(PrologOutcome::Refused(text)) => assert!(text.contains("job 5"), "{text}"),
            other => panic!("{other:?}"),
        }
        assert!(task_plan(&cfg, &ledger, 5, true).is_err_and(|e| e.contains("no single GPU")));
        let r = epilog(&cfg, 4, &ledger, 1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.released.len(), 1);
        assert_eq!(r.stopped, vec![(0, MpsDaemon::NotAvailable)]);
        assert!(epilog(&cfg, 4, &ledger, 1).is_ok_and(|r| r.released.is_empty()));
        assert!(epilog(&cfg, 4, &ledger, 5).is_ok_and(|r| r.released.is_empty()));
        assert_eq!(refusal(&ledger, 5), None);
    }

    #[test]
    fn whole_gpu_jobs_are_recorded_and_avoided_and_vanished_jobs_reconciled() {
        let (cfg, ledger, _dir) = temp_ledger("whole");
        let whole = JobEnv {
            job: 10,
            uid: 0,
            user: "root".into(),
            units: None,
            mps_percentage: None,
            job_gpus: vec![0],
        };
        assert!(matches!(
            prolog(&cfg, 4, &ledger, &whole, None).map(|r| r.outcome),
            Ok(PrologOutcome::Whole { .. })
        ));
        for job in 1..=6 {
            match prolog(&cfg, 4, &ledger, &share_env(job, 50), None).map(|r| r.outcome) {
                Ok(PrologOutcome::Placed { share, .. }) => assert_ne!(share.gpu, 0),
                other => panic!("{other:?}"),
            }
        }
        let running: HashSet<u32> = [2, 3].into_iter().collect();
        let report = prolog(&cfg, 4, &ledger, &share_env(7, 50), Some(&running))
            .unwrap_or_else(|e| panic!("{e}"));
        let dropped: Vec<u32> = report.dropped.iter().map(Record::job).collect();
        assert_eq!(dropped, vec![1, 4, 5, 6, 10]);
    }

    #[test]
    fn units_fall_back_to_slurms_percentage_only_when_count_is_known() {
        let (mut cfg, ledger, _dir) = temp_ledger("fallback");
        let env = JobEnv {
            units: None,
            ..share_env(1, 0)
        };
        assert!(
            matches!(prolog(&cfg, 4, &ledger, &env, None).map(|r| r.outcome), Ok(PrologOutcome::Refused(t)) if t.contains("size is unknown"))
        );
        cfg.slurm_mps_count = Some(1600);
        match prolog(&cfg, 4, &ledger, &JobEnv { job: 2, ..env }, None) {
            Ok(PrologReport {
                outcome: PrologOutcome::Placed { share, .. },
                notes,
                ..
            }) => {
                assert_eq!(share.units, 48);
                assert!(notes.is_empty(), "{notes:?}");
            }
            other => panic!("{other:?}"),
        }
        cfg.slurm_mps_count = Some(400);
        let r = prolog(&cfg, 4, &ledger, &share_env(3, 10), None).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            r.notes.iter().any(|n| n.contains("Count=1600")),
            "{:?}",
            r.notes
        );
    }
}
