//! `gpu-mps`: the sysadmin's (and curious user's) view of a GPU node's MPS
//! shares, kept by gpushare's prolog/epilog.
//!
//! `status` works for any user (it falls back to the world-readable copy the
//! prolog and epilog publish); `gc` (root) drops records of jobs that ended
//! without an epilog and rebuilds a lost state; `drain-gpu` and
//! `resume-gpu` (root) set a failed GPU aside from sharing and back; `config` prints the
//! slurm.conf/gres.conf lines the node needs. This file parses arguments
//! and prints: what each command reads and decides lives in the core
//! (`gpushare::mps`: status, gc, health, xid, installed), NVML's part in
//! `gpushare_admin::nvml`, where they are tested.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use gpushare::mps::config::{self, GpuMpsConfig};
use gpushare::mps::metrics::Counters;
use gpushare::mps::node::{
    gpu_devices, metrics_text, node_name, publish_metrics, running_jobs, Node,
};
use gpushare::mps::setup_lines::GpuGroup;
use gpushare::mps::status::{self, NodeStatus};
use gpushare::mps::{gc, health, in_force, installed, xid};
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
        /// GPUs of the node held whole, after the shared ones (TYPE:N, e.g.
        /// h100:2; repeat for several types)
        #[arg(long, value_name = "TYPE:N", value_parser = GpuGroup::parse)]
        whole: Vec<GpuGroup>,
        /// Node name (default: $SLURMD_NODENAME, else the short hostname)
        #[arg(long)]
        node: Option<String>,
        /// Slurm release the lines are for, as 24.11 (default: what
        /// `scontrol --version` says)
        #[arg(long, value_name = "MAJOR.MINOR", value_parser = installed::parse_release)]
        release: Option<(u32, u32)>,
    },
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
            whole,
            node,
            release,
        } => config(&conf, (gpus, &gpu_type), &whole, node, release),
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

/// The node, for a command that changes root's state (`refusal`: what a
/// user is told).
fn open_as_root(conf: &Path, refusal: &str) -> Result<Node> {
    if effective_uid() != 0 {
        bail!("{refusal}");
    }
    Node::open(conf, 0)?
        .with_context(|| format!("{}: not found: this node shares no GPU", conf.display()))
}

fn status(conf: &Path, json: bool) -> Result<u8> {
    let cfg = load(conf)?;
    let devices = gpu_devices(&cfg);
    let gpus = u32::try_from(devices.len()).unwrap_or(u32::MAX);
    let (mut view, trouble) = NodeStatus::as_seen(&cfg, gpus, effective_uid() == 0)?;
    nvml::add_to_status(&mut view, &devices);
    print!(
        "{}",
        if json {
            view.to_json()
        } else {
            view.table(&devices)
        }
    );
    if let Some(t) = &trouble {
        eprintln!("gpu-mps: the ledger cannot be read, the table above is the published copy: {t}");
    }
    Ok(u8::from(view.has_problem() || trouble.is_some()))
}

fn metrics(conf: &Path, write: bool, kernel_log: &Path) -> Result<u8> {
    let root_only = "metrics: run as root (the ledger and its counters are root's)";
    let node = open_as_root(conf, root_only)?;
    let probe = status::probe_daemons(&node.cfg, node.gpu_count);
    if write {
        let last_seen = || nvml::last_seen(&node.cfg.state_dir);
        for line in xid::set_aside_fatal(&node, kernel_log, last_seen) {
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
        let text = metrics_text(&node, node.ledger.snapshot(), &counters, probe);
        print!("{text}");
    }
    Ok(0)
}

/// Sets GPU `gpu` aside for `reason`, or gives it back (`None`); the
/// metrics file follows.
fn drain_gpu(conf: &Path, gpu: u32, reason: Option<&str>) -> Result<u8> {
    let root_only = "drain-gpu and resume-gpu change the node's state: run them as root";
    let node = open_as_root(conf, root_only)?;
    let drained = health::drain(&node.cfg.state_dir, node.gpu_count, gpu, reason)
        .map_err(anyhow::Error::msg)?;
    print!("{drained}");
    publish_metrics(&node, &[], |g| status::pipe_probe(&node.cfg, g))
        .map_err(anyhow::Error::msg)?;
    Ok(0)
}

fn gc(conf: &Path, node: Option<String>) -> Result<u8> {
    let shared = open_as_root(conf, "gc changes the node's ledger: run it as root")?;
    let known = gc::gc(&shared, &node_name(node), running_jobs, |note| {
        println!("{note}")
    })?;
    Ok(u8::from(!known))
}

fn config(
    conf: &Path,
    (gpus, gpu_type): (Option<u32>, &str),
    whole: &[GpuGroup],
    node: Option<String>,
    release: Option<(u32, u32)>,
) -> Result<u8> {
    let Some(release) = release.or_else(installed::slurm_release) else {
        bail!("cannot tell the Slurm release (scontrol --version): pass --release, e.g. --release 24.11");
    };
    let driver = nvml::driver_version();
    let name = node_name(node);
    let lines = installed::node_config(
        conf,
        release,
        &name,
        gpu_type,
        gpus,
        whole,
        driver.as_deref(),
    )
    .map_err(anyhow::Error::msg)?;
    print!("{lines}");
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
