//! `gpu-mps`: the sysadmin's (and curious user's) view of a GPU node's MPS
//! shares, kept by gpushare's prolog/epilog. `status` works for any user
//! (it falls back to the world-readable copy the prolog and epilog
//! publish); `gc` (root) drops records of jobs that ended without an
//! epilog and rebuilds a lost state; `drain-gpu` and `resume-gpu` (root)
//! set a failed GPU aside from sharing and back; `config` prints the
//! slurm.conf/gres.conf lines the node needs. This file parses arguments
//! and prints: what each command reads and decides lives in the core
//! (`gpushare::mps`: status, gc, health, xid, installed) and, where it
//! runs NVML or Slurm's commands, in `gpushare_node` (the timer's pass,
//! disable and enable, status's view, config's facts).

#![forbid(unsafe_code)]

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Parser;
use gpushare::mps::metrics::Counters;
use gpushare::mps::node::{metrics_text, node_name, publish_metrics, running_jobs, Node};
use gpushare::mps::setup_lines;
use gpushare::mps::status;
use gpushare::mps::{gc, health, in_force, located};
use gpushare::shared::exit_status::{gpu_mps as exit, Exit};
use gpushare_admin::mps_cli::{Cli, Cmd};
use gpushare_admin::selftest_cli;
use gpushare_node::sharing_off::{self, Off};
use gpushare_node::{
    cuda_probe, effective_uid, health_check, node_setup, node_status, nvml, nvml_usage, timer,
};

fn main() -> ExitCode {
    // `gpu-mps config` asks NVML for the GPUs' names in a child of its own.
    if let Some(code) = nvml::answer_as_child() {
        return code;
    }
    // The node timer's NVML query, in a process of its own (nvml_usage.rs).
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(nvml_usage::USAGE_OPTION) {
        return nvml_usage::print_usage(&args[2..]);
    }
    // The self-test's CUDA client, in a process of its own (cuda_probe.rs).
    if args.get(1).map(String::as_str) == Some(cuda_probe::PROBE_OPTION) {
        return cuda_probe::answer_as_child(&args[2..]);
    }
    let cli = Cli::parse();
    // As the node programs find it: beside $SLURM_CONF, else where they
    // last found it (slurmd gives them its SLURM_CONF), else /etc/slurm (a
    // configless node); where none exists, the first place is named.
    let (conf, nowhere) = located::locate_for_command(cli.conf.as_deref());
    // A node named on the command line may be another: `config` then
    // scopes its gres.conf lines to it, for a gres.conf every node shares.
    let named = cli.node.is_some();
    // This node as Slurm names it: the file's NodeName= lines for it, and
    // what slurmctld is asked about it.
    let node = node_name(cli.node);
    let at = Here {
        conf: &conf,
        node: &node,
    };
    // Each command's "could not run" (the self-test's is the test's).
    let unrun = match cli.command {
        Cmd::Selftest { .. } => exit::SELFTEST_UNRUN,
        _ => exit::COULD_NOT_RUN,
    };
    let result = match cli.command {
        Cmd::Status { json } => status(at, json),
        Cmd::Gc => gc(at),
        Cmd::Metrics { write, kernel_log } => match nowhere {
            // A CPU node, or one whose file is elsewhere: said, not failed.
            Some(looked_at) => {
                eprintln!("gpu-mps: {}", located::nothing_here(&looked_at));
                Ok(exit::NOTHING_HERE)
            }
            None => metrics(at, write, &kernel_log),
        },
        Cmd::DrainGpu { gpu, reason } => drain_gpu(at, gpu, Some(&reason)),
        Cmd::ResumeGpu { gpu } => drain_gpu(at, gpu, None),
        Cmd::Disable { reason, wait } => disable(at, &reason, wait),
        Cmd::Enable => enable(at),
        Cmd::Health { drain } => match nowhere {
            // A CPU node: healthy as far as GPU sharing goes.
            Some(looked_at) => {
                println!("gpushare: healthy: {}", located::nothing_here(&looked_at));
                Ok(exit::HEALTHY)
            }
            None => health(at, drain),
        },
        Cmd::Selftest {
            gpus,
            units,
            json,
            report,
            timeout,
        } => {
            let asked = selftest_cli::Asked {
                gpus: &gpus,
                units,
                timeout: std::time::Duration::from_secs(timeout.max(1)),
            };
            let node = open_as_root(at, "selftest starts MPS daemons: run it as root");
            node.and_then(|node| selftest_cli::run(node, &asked, json, report.as_deref()))
        }
        Cmd::Config {
            gpus,
            gpu_type,
            whole,
            release,
            autodetect,
        } => {
            let asked = node_setup::Asked {
                gpus,
                gpu_type: gpu_type.as_deref(),
                whole: &whole,
                release,
                autodetect,
            };
            config(at, asked, named)
        }
    };
    match result {
        Ok(code) => code.into(),
        Err(e) => {
            eprintln!("gpu-mps: {e:#}");
            unrun.into()
        }
    }
}

/// The node a command is about: its gpu_mps.conf and its name.
#[derive(Debug, Clone, Copy)]
struct Here<'a> {
    conf: &'a Path,
    node: &'a str,
}

/// The node, for a command that changes root's state (`refusal`: what a
/// user is told).
fn open_as_root(Here { conf, node }: Here<'_>, refusal: &str) -> Result<Node> {
    if effective_uid() != 0 {
        bail!("{refusal}");
    }
    Node::open(conf, node, 0)?
        .with_context(|| format!("{}: not found: this node shares no GPU", conf.display()))
}

fn status(at: Here<'_>, json: bool) -> Result<Exit> {
    let say = &mut |line: String| eprintln!("gpu-mps: {line}");
    let seen = node_status::view(at.conf, at.node, effective_uid(), say);
    let (view, devices, trouble) = seen.map_err(anyhow::Error::msg)?;
    let text = if json {
        view.to_json()
    } else {
        view.table(&devices)
    };
    print!("{text}");
    if let Some(t) = &trouble {
        eprintln!("gpu-mps: the ledger cannot be read, the table above is the published copy: {t}");
    }
    Ok(if view.has_problem() || trouble.is_some() {
        exit::STATUS_PROBLEM
    } else {
        exit::STATUS_FINE
    })
}

/// `gpu-mps health`: the line on stdout, what `--drain` did on stderr.
fn health(at: Here<'_>, drain: bool) -> Result<Exit> {
    if effective_uid() != 0 {
        bail!("health: run as root (it asks each GPU's MPS daemon, as status does for root)");
    }
    let slurm_says = std::env::var("SLURM_NODE_IS_HEALTHY").ok();
    let checked = health_check::check(at.conf, at.node, 0, drain, slurm_says.as_deref())
        .map_err(anyhow::Error::msg)?;
    println!("{}", checked.line);
    if let Some(acted) = &checked.acted {
        eprintln!("gpu-mps: {acted}");
    }
    Ok(if checked.healthy {
        exit::HEALTHY
    } else {
        exit::UNHEALTHY
    })
}

/// `gpu-mps metrics`: where no gpu_mps.conf applies to this node (none
/// found, or one that gives it no GPUs) its status is
/// [`exit::NOTHING_HERE`], which the node timer's unit counts as done
/// (SuccessExitStatus=3).
fn metrics(at: Here<'_>, write: bool, kernel_log: &Path) -> Result<Exit> {
    let conf = at.conf;
    let root_only = "metrics: run as root (the ledger and its counters are root's)";
    if effective_uid() != 0 {
        bail!("{root_only}");
    }
    // A file that gives this node no GPUs (its NodeName= lines are for
    // other nodes, or no GPUDevices= and no /dev/nvidia<N>): a CPU node.
    let records = Path::new(in_force::NODE_RECORDS_DIR);
    let found = in_force::resolve(conf, at.node, records, 0, in_force::Role::Reader);
    if let Some(why) = &found.no_gpus {
        eprintln!("gpu-mps: {why}; nothing to do");
        return Ok(exit::NOTHING_HERE);
    }
    let mut node = open_as_root(at, root_only)?;
    if write {
        let say = &mut |line: String| eprintln!("gpu-mps: {line}");
        let pass = timer::pass(&mut node, at.node, kernel_log, say).map_err(anyhow::Error::msg)?;
        if pass == timer::Pass::NoMetricsFile {
            eprintln!(
                "gpu-mps: {}: no MetricsFile= set: the kernel log read and the share use \
                 recorded, no metrics written",
                conf.display()
            );
        }
        return Ok(exit::METRICS_DONE);
    }
    let probe = status::probe_daemons(&node.cfg, node.gpu_count);
    let (counters, note) = Counters::read(node.ledger.dir());
    if let Some(note) = note {
        eprintln!("gpu-mps: {note}");
    }
    let text = metrics_text(&node, node.ledger.snapshot(), &counters, probe);
    print!("{text}");
    Ok(exit::METRICS_DONE)
}

/// Sets GPU `gpu` aside for `reason`, or gives it back (`None`); the
/// metrics file follows.
fn drain_gpu(at: Here<'_>, gpu: u32, reason: Option<&str>) -> Result<Exit> {
    let root_only = "drain-gpu and resume-gpu change the node's state: run them as root";
    let node = open_as_root(at, root_only)?;
    let drained = health::drain(&node.cfg.state_dir, node.gpu_count, gpu, reason)
        .map_err(anyhow::Error::msg)?;
    print!("{drained}");
    publish_metrics(&node, &[], |g| status::pipe_probe(&node.cfg, g))
        .map_err(anyhow::Error::msg)?;
    Ok(exit::DONE)
}

/// Takes the node off sharing (`sharing_off::disable`), each step's line
/// printed.
fn disable(at: Here<'_>, reason: &str, wait: u64) -> Result<Exit> {
    let node = open_as_root(at, "disable changes the node's state: run it as root")?;
    let wait = std::time::Duration::from_secs(wait);
    let say = &mut |line: String| println!("{line}");
    let off = sharing_off::disable(&node, at.conf, at.node, (reason, wait), say);
    Ok(match off.map_err(anyhow::Error::msg)? {
        Off::Done => {
            println!(
                "no share runs here, no MPS daemon of gpushare's, no exclusion of gpushare's left"
            );
            exit::DISABLE_DONE
        }
        Off::SharesRun(jobs) => {
            let jobs: Vec<String> = jobs.iter().map(u32::to_string).collect();
            println!(
                "shares still run here (jobs {}): run gpu-mps disable again once they end (or give \
                 --wait SECONDS); their epilogs stop each GPU's daemon after its last share",
                jobs.join(", ")
            );
            exit::DISABLE_LEFT
        }
        Off::ModesLeft => {
            println!("not all of gpushare's traces are gone: run gpu-mps disable again");
            exit::DISABLE_LEFT
        }
        Off::Kept(kept) => {
            println!(
                "{kept} job(s) gpushare sent elsewhere stay kept off this node while Slurm books mps \
                 here: take its mps out of Slurm's configuration (gres.conf, slurm.conf), then run \
                 gpu-mps disable again, or gpu-mps enable"
            );
            exit::DISABLE_LEFT
        }
    })
}

fn enable(at: Here<'_>) -> Result<Exit> {
    let mut node = open_as_root(at, "enable changes the node's state: run it as root")?;
    let say = &mut |line: String| println!("{line}");
    sharing_off::enable(&mut node, at.conf, at.node, say).map_err(anyhow::Error::msg)?;
    Ok(exit::DONE)
}

fn gc(at: Here<'_>) -> Result<Exit> {
    let shared = open_as_root(at, "gc changes the node's ledger: run it as root")?;
    let known = gc::gc(&shared, at.node, running_jobs, |note| println!("{note}"))?;
    Ok(if known {
        exit::GC_DONE
    } else {
        exit::GC_UNKNOWN
    })
}

/// `gpu-mps config`: the node's lines (`node_setup::lines`); with
/// `--node`, each gres.conf line names the node (NodeName=), for one
/// gres.conf every node shares; without, the node's own file's lines.
fn config(
    Here { conf, node }: Here<'_>,
    asked: node_setup::Asked<'_>,
    named: bool,
) -> Result<Exit> {
    let say = &mut |line: String| eprintln!("gpu-mps: {line}");
    let lines = node_setup::lines(conf, node, asked, say).map_err(anyhow::Error::msg)?;
    if named {
        print!("{}", setup_lines::scoped_gres_lines(&lines, node));
    } else {
        print!("{lines}");
    }
    Ok(exit::CONFIG_PRINTED)
}
