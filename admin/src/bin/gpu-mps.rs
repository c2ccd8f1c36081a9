//! `gpu-mps`: the sysadmin's (and curious user's) view of a GPU node's MPS
//! shares, kept by gpushare's prolog/epilog.
//!
//! `status` works for any user (it falls back to the world-readable copy the
//! prolog and epilog publish); `gc` (root) drops records of jobs that ended
//! without an epilog and rebuilds a lost state; `drain-gpu` and
//! `resume-gpu` (root) set a failed GPU aside from sharing and back; `config` prints the
//! slurm.conf/gres.conf lines the node needs. Rendering lives in
//! `gpushare::mps::status`, where it is tested.

#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use gpushare::mps::bounded;
use gpushare::mps::config::{self, GpuMpsConfig};
use gpushare::mps::daemon;
use gpushare::mps::health;
use gpushare::mps::in_force;
use gpushare::mps::ledger::Ledger;
use gpushare::mps::metrics::Counters;
use gpushare::mps::node::{
    gpu_devices, metrics_text, publish_metrics, running_jobs, stop_idle_daemons, Node,
};
use gpushare::mps::status::{
    self, DaemonProbe, DaemonState, Installed, NodeStatus, SlurmSetup, StatusCopy,
};
use gpushare::mps::xid;
use gpushare_admin::{effective_uid, nvml};

/// The MPS shares of this GPU node (gpushare).
///
/// Exit status: 0 fine; 1 a problem shown (OVERLAP, OVER, a lost or
/// set-aside state); 2 could not run.
#[derive(Debug, Parser)]
#[command(name = "gpu-mps", version = env!("CARGO_PKG_VERSION"))]
struct Cli {
    /// gpu_mps.conf (default: next to $SLURM_CONF, or /etc/slurm)
    #[arg(long, value_name = "PATH", global = true)]
    conf: Option<PathBuf>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// One row per GPU: units used/total, share jobs (id, user, units),
    /// whole-GPU holders, and flags: OVERLAP (shares and a whole-GPU job on
    /// one GPU, which Slurm 22.05 can create), OVER (over capacity). Any
    /// user may run it.
    Status {
        /// Print the status as one JSON object
        #[arg(long)]
        json: bool,
    },
    /// (root) The node's metrics in Prometheus's text format, as the
    /// prolog and epilog write them to MetricsFile (each daemon asked, not
    /// only its pipe seen). A timer runs `--write` every minute, so a node
    /// whose file is not rewritten is known stale.
    Metrics {
        /// Write MetricsFile atomically instead of printing; also read the
        /// kernel log for fatal XID errors since the last look, setting
        /// their GPUs aside
        #[arg(long)]
        write: bool,
        /// The kernel log to read XIDs from, as /dev/kmsg records
        #[arg(long, value_name = "PATH", default_value = "/dev/kmsg")]
        kernel_log: PathBuf,
    },
    /// (root) Drop the records of jobs slurmctld no longer runs on this
    /// node, and end a lost state once every running share is accounted for.
    Gc {
        /// Node name (default: $SLURMD_NODENAME, else the short hostname)
        #[arg(long)]
        node: Option<String>,
    },
    /// (root) Set a GPU aside from sharing: it takes no new share (shares
    /// already there run on), `status` flags it FAILED with the reason and
    /// the metrics say so; the node is drained once every GPU is set aside.
    /// For health checks (NHC, DCGM on fatal XID errors) and admins.
    DrainGpu {
        /// The GPU's index on the node (its place in GPUDevices)
        gpu: u32,
        /// Why, as `status` and the refused jobs will say it
        #[arg(long, default_value = "drained by an admin")]
        reason: String,
    },
    /// (root) Give a GPU set aside (by drain-gpu, or found lost through
    /// NVML) back to sharing.
    ResumeGpu {
        /// The GPU's index on the node
        gpu: u32,
    },
    /// Print the gres.conf, slurm.conf, cgroup.conf, plugstack.conf and
    /// gpu_mps.conf lines this node needs.
    Config {
        /// GPUs of the node (default: the device files gpu_mps.conf finds)
        #[arg(long)]
        gpus: Option<u32>,
        /// GPU type for gres.conf
        #[arg(long = "type", default_value = "TYPE")]
        gpu_type: String,
        /// Node name (default: $SLURMD_NODENAME, else the short hostname)
        #[arg(long)]
        node: Option<String>,
        /// Slurm release the lines are for, as 24.11 (default: what
        /// `scontrol --version` says)
        #[arg(long, value_name = "MAJOR.MINOR", value_parser = parse_release)]
        release: Option<(u32, u32)>,
    },
}

/// `24.11` or `24.11.5` → (24, 11).
fn parse_release(text: &str) -> Result<(u32, u32), String> {
    let mut parts = text.trim().split('.');
    let number = |p: Option<&str>| p.and_then(|p| p.parse::<u32>().ok());
    number(parts.next())
        .zip(number(parts.next()))
        .ok_or_else(|| format!("expected a release such as 24.11, got {text:?}"))
}

/// The release of the Slurm commands on this machine (`scontrol --version`
/// prints `slurm 24.11.5` or `slurm-wlm 24.11.5`).
fn installed_release() -> Option<(u32, u32)> {
    let mut cmd = Command::new("scontrol");
    cmd.arg("--version");
    let ran = bounded::run(cmd, None, Duration::from_secs(10)).ok()?;
    ran.stdout
        .split_whitespace()
        .nth(1)
        .and_then(|v| parse_release(v).ok())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // As the node programs find it: beside slurm.conf, else /etc/slurm (a
    // configless node); where neither exists, the first place is named.
    let conf = config::locate(cli.conf.as_deref())
        .unwrap_or_else(|looked_at| looked_at.into_iter().next().unwrap_or_default());
    let result = match cli.command {
        Cmd::Status { json } => status(&conf, json),
        Cmd::Gc { node } => gc(&conf, node),
        Cmd::Metrics { write, kernel_log } => metrics(&conf, write, &kernel_log),
        Cmd::DrainGpu { gpu, reason } => drain_gpu(&conf, gpu, Some(&reason)),
        Cmd::ResumeGpu { gpu } => drain_gpu(&conf, gpu, None),
        Cmd::Config {
            gpus,
            gpu_type,
            node,
            release,
        } => config(&conf, gpus, &gpu_type, node, release),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("gpu-mps: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// The configuration in force, as the node programs run with it (never a
/// half-written file); what it says about the file goes to stderr.
fn load(conf: &Path) -> Result<GpuMpsConfig> {
    if !conf.exists() {
        bail!("{}: not found: this node shares no GPU", conf.display());
    }
    let records = Path::new(in_force::NODE_RECORDS_DIR);
    let found = in_force::resolve(conf, records, effective_uid(), in_force::Role::Reader);
    for note in &found.notes {
        eprintln!("gpu-mps: {note}");
    }
    found
        .cfg
        .with_context(|| found.shares_refused.unwrap_or_default())
}

fn node_name(arg: Option<String>) -> String {
    arg.or_else(|| std::env::var("SLURMD_NODENAME").ok())
        .or_else(gpushare::shared::locations::short_hostname)
        .unwrap_or_default()
}

/// The published copy, as any user reads it.
fn published(cfg: &GpuMpsConfig, gpus: u32) -> Result<NodeStatus> {
    let copy = StatusCopy {
        dir: daemon::public_dir(cfg),
        gpu_count: gpus,
        units_per_gpu: cfg.units_per_gpu,
        private: None,
    };
    let path = copy.path();
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text).with_context(|| format!("{}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(NodeStatus::of(
            &Default::default(),
            gpus,
            cfg.units_per_gpu,
            Vec::new(),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => bail!(
            "this node keeps who runs what to root (PrivateData in gpu_mps.conf, or Slurm's \
             PrivateData hides jobs or users): `squeue --me` shows your own jobs, and an \
             admin can run gpu-mps status as root"
        ),
        Err(e) => Err(e).with_context(|| format!("{}", path.display())),
    }
}

fn status(conf: &Path, json: bool) -> Result<u8> {
    let cfg = load(conf)?;
    let devices = gpu_devices(&cfg);
    let gpus = u32::try_from(devices.len()).unwrap_or(u32::MAX);
    let mut trouble = None;
    let view = if effective_uid() == 0 {
        let snapshot = Ledger::open(&cfg.state_dir, 0).and_then(|l| l.snapshot());
        match snapshot {
            Ok(s) => NodeStatus::of(&s.state, gpus, cfg.units_per_gpu, s.set_aside_files),
            Err(e) => {
                // Show what users see, and say why the ledger could not be read.
                trouble = Some(e.to_string());
                published(&cfg, gpus)?
            }
        }
    } else {
        published(&cfg, gpus)?
    };
    let mut view = view;
    view.mps = status::mps_view(&cfg, &view.gpus, |gpu| probe_daemon(&cfg, gpu));
    // NVML where it loads (a node with the driver): UUIDs, memory, MPS
    // clients, and its GPU order checked against GPUDevices.
    if let Ok(facts) = nvml::gpus() {
        for (m, f) in view.mps.iter_mut().zip(&facts) {
            m.uuid = f.uuid.clone();
            m.memory_mib = f.memory_mib;
            m.nvml_compute_processes = Some(f.compute_processes.clone());
        }
        let minors: Vec<Option<u32>> = facts.iter().map(|f| f.minor).collect();
        view.warnings = status::minor_mismatches(&devices, &minors);
    }
    if json {
        print!("{}", view.to_json());
    } else {
        print!("{}", view.table(&devices));
    }
    if let Some(t) = &trouble {
        eprintln!("gpu-mps: the ledger cannot be read, the table above is the published copy: {t}");
    }
    Ok(u8::from(view.has_problem() || trouble.is_some()))
}

/// Sets aside the GPUs of fatal XIDs logged since the last look (the
/// cursor in the state directory, for this boot); what to print.
fn scan_xids(node: &Node, kernel_log: &Path) -> Vec<String> {
    const CURSOR: &str = "kmsg-cursor";
    let dir = &node.cfg.state_dir;
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap_or_default()
        .trim()
        .to_owned();
    let after = std::fs::read_to_string(dir.join(CURSOR))
        .ok()
        .and_then(|t| {
            let (b, seq) = t.trim().split_once(' ')?;
            (b == boot).then(|| seq.parse::<u64>().ok())?
        });
    let look = match xid::look(kernel_log, after) {
        Ok(look) => look,
        Err(e) => return vec![format!("{}: {e}; no XID read", kernel_log.display())],
    };
    let mut said = Vec::new();
    let fatal: Vec<&xid::Xid> = look.xids.iter().filter(|x| x.needs_reset()).collect();
    if !fatal.is_empty() {
        // The prolog's last figures: NVML itself may hang on a GPU in trouble.
        let facts = std::fs::read_to_string(dir.join(nvml::KEPT_FACTS))
            .ok()
            .and_then(|t| nvml::parse_facts(&t))
            .unwrap_or_default();
        for x in fatal {
            let gpu = facts
                .iter()
                .find(|f| f.pci_bus_id.as_deref().and_then(xid::parse_pci) == Some(x.pci))
                .and_then(|f| match f.minor {
                    Some(minor) => node.gpus_of_minors(&[minor]).first().copied(),
                    None => Some(f.index),
                });
            match gpu {
                Some(gpu) => {
                    let reason = format!("XID {} in the kernel log: {}", x.code, x.text);
                    match health::set_aside(dir, gpu, &reason) {
                        Ok(_) => said.push(format!("GPU {gpu} set aside from sharing: {reason}")),
                        Err(e) => {
                            said.push(format!("GPU {gpu}: XID {}, not set aside: {e}", x.code))
                        }
                    }
                }
                None => said.push(format!(
                    "XID {} on PCI {:04x}:{:02x}:{:02x}, which NVML's last figures name no GPU \
                     of this node (none kept before a share started here): {}",
                    x.code, x.pci.0, x.pci.1, x.pci.2, x.text
                )),
            }
        }
    }
    if let Some(last) = look.last {
        if let Err(e) = gpushare::mps::state_dir::replace_file(
            dir,
            CURSOR,
            format!("{boot} {last}\n").as_bytes(),
            0o600,
        ) {
            said.push(format!("the kernel log's cursor not kept: {e}"));
        }
    }
    said
}

fn metrics(conf: &Path, write: bool, kernel_log: &Path) -> Result<u8> {
    if effective_uid() != 0 {
        bail!("metrics: run as root (the ledger and its counters are root's)");
    }
    let node = Node::open(conf, 0)?
        .with_context(|| format!("{}: not found: this node shares no GPU", conf.display()))?;
    // Each daemon asked now, outside the ledger's lock: a hung one must
    // not hold up a prolog.
    let probes: Vec<DaemonProbe> = (0..node.gpu_count)
        .map(|gpu| probe_daemon(&node.cfg, gpu))
        .collect();
    let probe = |gpu: u32| {
        probes
            .get(gpu as usize)
            .cloned()
            .unwrap_or_else(|| status::pipe_probe(&node.cfg, gpu))
    };
    if write {
        for line in scan_xids(&node, kernel_log) {
            eprintln!("gpu-mps: {line}");
        }
        if node.cfg.metrics_file.is_none() {
            eprintln!(
                "gpu-mps: {}: no MetricsFile= set: the kernel log was read, no metrics written",
                conf.display()
            );
            return Ok(0);
        }
        publish_metrics(&node, &[], probe).map_err(anyhow::Error::msg)?;
    } else {
        let (counters, note) = Counters::read(node.ledger.dir());
        if let Some(note) = note {
            eprintln!("gpu-mps: {note}");
        }
        print!(
            "{}",
            metrics_text(&node, node.ledger.snapshot(), &counters, probe)
        );
    }
    Ok(0)
}

/// GPU `gpu`'s daemon as this user can see it: root asks it and finds its
/// processes; others see only whether its control pipe is there.
fn probe_daemon(cfg: &GpuMpsConfig, gpu: u32) -> DaemonProbe {
    let seen = status::pipe_probe(cfg, gpu);
    if effective_uid() != 0 || seen.state == DaemonState::Unmanaged {
        return seen;
    }
    let Some(program) = daemon::program(cfg) else {
        return seen;
    };
    let pipe = daemon::pipe_dir(cfg, gpu);
    let has_pipe = seen.state == DaemonState::PipePresent;
    let pids = daemon::processes(&pipe);
    match daemon::probe(cfg, &program, gpu) {
        Ok(servers) => DaemonProbe {
            state: DaemonState::Running,
            pids,
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

/// Sets GPU `gpu` aside for `reason`, or gives it back (`None`); the
/// metrics file follows.
fn drain_gpu(conf: &Path, gpu: u32, reason: Option<&str>) -> Result<u8> {
    if effective_uid() != 0 {
        bail!("drain-gpu and resume-gpu change the node's state: run them as root");
    }
    let node = Node::open(conf, 0)?
        .with_context(|| format!("{}: not found: this node shares no GPU", conf.display()))?;
    if gpu >= node.gpu_count {
        bail!(
            "GPU {gpu}: the node lists {} GPUs (0 to {}) in GPUDevices",
            node.gpu_count,
            node.gpu_count.saturating_sub(1)
        );
    }
    let dir = &node.cfg.state_dir;
    let failed = match reason {
        Some(why) => health::set_aside(dir, gpu, why),
        None => health::resume(dir, gpu),
    }
    .map_err(anyhow::Error::msg)?;
    match failed.get(&gpu) {
        Some(f) => println!("GPU {gpu} takes no new share: {}", f.reason),
        None => println!("GPU {gpu} shares again"),
    }
    if let Some(all) = health::all_failed(&failed, node.gpu_count) {
        println!("note: {all}; the next job's prolog on this node fails, and Slurm drains it");
    }
    if node.cfg.metrics_file.is_some() {
        publish_metrics(&node, &[], |g| status::pipe_probe(&node.cfg, g))
            .map_err(anyhow::Error::msg)?;
    }
    Ok(0)
}

fn gc(conf: &Path, node: Option<String>) -> Result<u8> {
    if effective_uid() != 0 {
        bail!("gc changes the node's ledger: run it as root");
    }
    let shared = Node::open(conf, 0)?
        .with_context(|| format!("{}: not found: this node shares no GPU", conf.display()))?;
    let name = node_name(node);
    let running = running_jobs(&name)
        .map_err(anyhow::Error::msg)
        .with_context(|| {
            format!("cannot ask slurmctld which jobs run on {name:?}: nothing dropped")
        })?;
    let ids: HashSet<u32> = running.iter().map(|j| j.job).collect();
    let dropped = shared.ledger.reconcile(|job| ids.contains(&job))?;
    for remark in dropped.remarks() {
        println!("note: {remark}");
    }
    for r in &dropped.value {
        println!("dropped: {r}");
    }
    if dropped.value.is_empty() {
        println!("nothing to drop: every record belongs to a job running on {name}");
    }
    for (gpu, outcome) in stop_idle_daemons(&shared)? {
        println!("GPU {gpu}: MPS daemon without a share: {outcome}");
    }
    let rebuilt = shared.ledger.rebuild(|state| {
        running
            .iter()
            .filter(|j| j.holds_mps && state.share(j.job).is_none())
            .map(|j| j.job)
            .collect()
    })?;
    match rebuilt.value {
        Ok(false) => Ok(0),
        Ok(true) => {
            println!("the GPU loads are known again: every running share is in the ledger");
            Ok(0)
        }
        Err(jobs) => {
            println!(
                "the GPU loads stay unknown: running share jobs {jobs:?} are not in the ledger; \
                 run gc again once they have ended"
            );
            Ok(1)
        }
    }
}

fn config(
    conf: &Path,
    gpus: Option<u32>,
    gpu_type: &str,
    node: Option<String>,
    release: Option<(u32, u32)>,
) -> Result<u8> {
    let Some((major, minor)) = release.or_else(installed_release) else {
        bail!("cannot tell the Slurm release (scontrol --version): pass --release, e.g. --release 24.11");
    };
    // Without a gpu_mps.conf yet, print the lines for the defaults.
    let cfg = config::load(conf).ok().flatten().unwrap_or_default();
    let gpus = gpus.unwrap_or_else(|| u32::try_from(gpu_devices(&cfg).len()).unwrap_or(0));
    if gpus == 0 {
        bail!("no GPU device files found: pass --gpus N");
    }
    // Installed as PREFIX/sbin/gpu-mps: the scripts are in PREFIX/libexec/gpushare.
    let libexec = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent()?.parent().map(|p| p.join("libexec/gpushare")))
        .unwrap_or_else(|| PathBuf::from("/usr/local/libexec/gpushare"));
    let mut show_config = Command::new("scontrol");
    show_config.args(["show", "config"]);
    // Bounded: a slurmctld that does not answer leaves the default.
    let plugin_dir = bounded::run(show_config, None, Duration::from_secs(10))
        .ok()
        .and_then(|o| {
            o.stdout
                .lines()
                .find(|l| l.starts_with("PluginDir"))
                .and_then(|l| l.split('=').nth(1))
                .map(|v| v.trim().split(':').next().unwrap_or("").to_owned())
        })
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "<PluginDir>".into());
    println!("# for Slurm {major}.{minor:02}");
    let cgroup_v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let dmem = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
        .is_ok_and(|c| c.split_whitespace().any(|w| w == "dmem"));
    print!(
        "{}",
        status::mps_v3_readiness(nvml::driver_version().as_deref(), cgroup_v2, dmem)
    );
    print!(
        "{}",
        status::node_config(
            &cfg,
            SlurmSetup::for_release(major, minor),
            &node_name(node),
            gpu_type,
            gpus,
            Installed {
                libexec: &libexec,
                plugin_dir: Path::new(&plugin_dir),
                conf,
            },
        )
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("gpu-mps").chain(args.iter().copied()))
    }

    #[test]
    fn each_command_takes_only_its_own_flags() {
        Cli::command().debug_assert();
        assert!(matches!(
            parse(&["status", "--json"]).map(|c| c.command),
            Ok(Cmd::Status { json: true })
        ));
        assert!(matches!(
            parse(&["--conf", "/x", "gc", "--node", "n1"]).map(|c| (c.conf, c.command)),
            Ok((Some(_), Cmd::Gc { node: Some(_) }))
        ));
        assert!(matches!(
            parse(&["config", "--gpus", "4", "--type", "a40"]).map(|c| c.command),
            Ok(Cmd::Config { gpus: Some(4), .. })
        ));
        assert!(matches!(
            parse(&["config", "--release", "24.11.5"]).map(|c| c.command),
            Ok(Cmd::Config {
                release: Some((24, 11)),
                ..
            })
        ));
        for bad in [
            &["status", "--gpus", "4"][..],
            &["gc", "--json"],
            &["config", "--gpus", "x"],
            &["config", "--release", "new"],
            &[],
            &["stat"],
        ] {
            assert_eq!(parse(bad).err().map(|e| e.exit_code()), Some(2), "{bad:?}");
        }
        assert_eq!(parse(&["--help"]).err().map(|e| e.exit_code()), Some(0));
    }
}
