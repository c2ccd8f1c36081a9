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
//! `gpushare_node::nvml`, where they are tested.

#![forbid(unsafe_code)]

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Parser;
use gpushare::mps::config::{self, GpuMpsConfig};
use gpushare::mps::lock_wait::{LockWait, LOCK_WAIT};
use gpushare::mps::metrics::Counters;
use gpushare::mps::node::mains::nvml_ask;
use gpushare::mps::node::{
    finish_deferred, follow_whole, gpu_devices, metrics_text, node_name, publish_metrics,
    record_ended, retry_modes, running_jobs, sample_share_usage, stop_idle_daemons,
    with_usage_lock, Accounting, Node,
};
use gpushare::mps::setup_lines::{self, GpuGroup};
use gpushare::mps::status::{self, NodeStatus};
use gpushare::mps::{disabled, gc, health, in_force, installed, located, xid};
use gpushare::shared::exit_status::{gpu_mps as exit, Exit};
use gpushare_admin::mps_cli::{Cli, Cmd};
use gpushare_admin::selftest_cli;
use gpushare_node::usage_record::SlurmAccounting;
use gpushare_node::{cuda_probe, effective_uid, gpu_facts, nvml, nvml_usage, requeue};

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
    let (conf, nowhere) = match located::locate(cli.conf.as_deref()) {
        Ok(conf) => (conf, None),
        Err(looked_at) => {
            let first = looked_at.first().cloned().unwrap_or_default();
            (first, cli.conf.is_none().then_some(looked_at))
        }
    };
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
        Cmd::Selftest {
            gpus,
            units,
            json,
            report,
            timeout,
        } => {
            open_as_root(at, "selftest starts MPS daemons: run it as root").and_then(|mut node| {
                // The pipes' guard, as the prolog keeps it (the test's user is
                // let through while it runs).
                node.pipe_guard = Some(gpushare_node::acl::allow_traverse);
                let asked = selftest_cli::Asked {
                    gpus: &gpus,
                    units,
                    timeout: std::time::Duration::from_secs(timeout.max(1)),
                };
                selftest_cli::run(&node, &asked, json, report.as_deref())
            })
        }
        Cmd::Config {
            gpus,
            gpu_type,
            whole,
            release,
            autodetect,
        } => config(
            at,
            (gpus, gpu_type.as_deref()),
            &whole,
            (release, autodetect),
            named,
        ),
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

/// The configuration in force, as the node programs run with it (never a
/// half-written file); what it says about the file goes to stderr.
fn load(Here { conf, node }: Here<'_>) -> Result<GpuMpsConfig> {
    if !conf.exists() {
        bail!("{}: not found: this node shares no GPU", conf.display());
    }
    let records = Path::new(in_force::NODE_RECORDS_DIR);
    let role = in_force::Role::Reader;
    let found = in_force::resolve(conf, node, records, effective_uid(), role);
    for note in &found.notes {
        eprintln!("gpu-mps: {note}");
    }
    found
        .cfg
        .with_context(|| found.shares_refused.unwrap_or_default())
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
    let conf = at.conf;
    let cfg = load(at)?;
    let devices = gpu_devices(&cfg);
    let gpus = u32::try_from(devices.len()).unwrap_or(u32::MAX);
    let (mut view, trouble) = NodeStatus::as_seen(&cfg, gpus, effective_uid() == 0)?;
    nvml::add_to_status(&mut view, &devices);
    view.disabled = disabled::read(Path::new(disabled::DISABLED_DIR), conf, 0).map(|d| d.reason);
    // Which of a shared file's NodeName= lines this node takes (the file as
    // it reads now).
    if let Ok(Some(settings)) = config::load(conf, at.node) {
        view.node_lines = status::NodeLines::of(at.node, &settings);
    }
    let slurm_conf = gpushare::shared::locations::beside_slurm_conf(None, "slurm.conf");
    view.warnings
        .extend(gpushare::mps::namespaces::node_warning(
            &slurm_conf,
            &cfg.state_dir,
        ));
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
    Ok(if view.has_problem() || trouble.is_some() {
        exit::STATUS_PROBLEM
    } else {
        exit::STATUS_FINE
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
        // One budget for every lock of the run, as a prolog's.
        node.set_lock_wait(LockWait::budget(LOCK_WAIT));
    }
    let probe = status::probe_daemons(&node.cfg, node.gpu_count);
    if write {
        // Releases epilogs left to the ledger's next change (they found it
        // locked), where no job has started or ended here since.
        match finish_deferred(&node) {
            Ok(lines) => lines.iter().for_each(|l| eprintln!("gpu-mps: {l}")),
            Err(e) => eprintln!("gpu-mps: releases left by epilogs not made: {e}"),
        }
        // NVML's facts asked and kept with their keys, where a share's
        // prolog takes them (mains::nvml_ask): its kept copy is as fresh
        // as this run, and a GPU NVML now reports lost is set aside here
        // (a prolog with fresh kept facts asks nothing). A node whose
        // NVML never answered has nothing kept and nothing to say.
        if let Some(ask) = nvml_ask(&node.cfg, true) {
            if let Ok(gpus) = gpu_facts::refresh(&node.cfg.state_dir) {
                let seen = gpu_facts::seen(&gpus, ask, |m| node.gpus_of_minors(&[m]));
                for line in gpu_facts::set_aside_lost(&node, &seen.lost) {
                    eprintln!("gpu-mps: {line}");
                }
            }
        }
        // NVML's figures the prolog kept (or their copy kept by the
        // cursor, in /var/lib/gpushare, after a reboot) name an XID's GPU.
        for line in xid::set_aside_fatal(&node, kernel_log, nvml::last_seen) {
            eprintln!("gpu-mps: {line}");
        }
        // A compute mode nvidia-smi failed to set (given back after the
        // last share, or around a job holding the GPU whole) is set now.
        for line in retry_modes(&node) {
            eprintln!("gpu-mps: {line}");
        }
        // MPS daemons left without a share stopped (gc's step), each
        // GPU's earlier mode given back: a job Slurm gives it whole runs.
        for line in gc::idle_daemons(&node) {
            eprintln!("gpu-mps: {line}");
        }
        // Exclusions whose cause is gone lifted, whether or not a share
        // ended here (a GPU back, the setup mended, the node rebooted).
        let (deadline, name) = (requeue::Deadline::start(), at.node);
        match requeue::lift_where_changed(&deadline, &node, name) {
            Ok(lines) => lines.iter().for_each(|l| eprintln!("gpu-mps: {l}")),
            Err(e) => eprintln!("gpu-mps: exclusions not taken back: {e}"),
        }
        // Each share's use of its GPU, where one runs: NVML asked in a
        // child, a GPU that does not answer skipped (ShareUsage=); with or
        // without MetricsFile=, the ended jobs' figures are recorded.
        if node.cfg.share_usage != config::ShareUsage::Off {
            let run = || {
                let ask = |cursor: &_| nvml_usage::ask(&node.cfg, cursor);
                let mut lines = sample_share_usage(&node, ask);
                // The jobs that ended since: their figures to the
                // accounting (UsageRecord=), then counted by QOS and size.
                let mut slurm = node.cfg.usage_record.then(SlurmAccounting::start);
                let accounting = slurm.as_mut().map(|s| s as &mut dyn Accounting);
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                lines.extend(record_ended(&node, at.node, accounting, now));
                lines
            };
            let lines = match with_usage_lock(&node, run) {
                Ok(Some(lines)) => lines,
                Ok(None) => vec!["share use not sampled: another run of the timer is at it".into()],
                Err(e) => vec![format!("share use not sampled: {e}")],
            };
            for line in lines {
                eprintln!("gpu-mps: {line}");
            }
        }
        if node.cfg.metrics_file.is_none() {
            eprintln!(
                "gpu-mps: {}: no MetricsFile= set: the kernel log read and the share use \
                 recorded, no metrics written",
                conf.display()
            );
            return Ok(exit::METRICS_DONE);
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

/// Takes the node off sharing: the mark at once, then, once no share
/// runs, every daemon stopped, every mode given back, every exclusion
/// taken back (each line printed); work left while shares still run.
fn disable(at: Here<'_>, reason: &str, wait: u64) -> Result<Exit> {
    let conf = at.conf;
    let node = open_as_root(at, "disable changes the node's state: run it as root")?;
    let dir = Path::new(disabled::DISABLED_DIR);
    if disabled::read(dir, conf, 0).is_none() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        disabled::disable(dir, conf, 0, reason, now).map_err(anyhow::Error::msg)?;
        println!("GPU sharing disabled on this node: new shares are refused (reason `disabled`)");
    } else {
        println!("GPU sharing was disabled on this node already");
    }
    let until = std::time::Instant::now() + std::time::Duration::from_secs(wait);
    let running = loop {
        let jobs: Vec<u32> = node
            .ledger
            .snapshot()?
            .state
            .shares()
            .map(|s| s.job)
            .collect();
        if jobs.is_empty() || std::time::Instant::now() >= until {
            break jobs;
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    };
    if !running.is_empty() {
        println!(
            "shares still run here (jobs {}): run gpu-mps disable again once they end (or give \
             --wait SECONDS); their epilogs stop each GPU's daemon after its last share",
            running
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
        return Ok(exit::DISABLE_LEFT);
    }
    for (gpu, outcome) in stop_idle_daemons(&node)? {
        println!("GPU {gpu}: MPS daemon: {outcome}");
    }
    let all: Vec<u32> = (0..node.gpu_count).collect();
    for line in follow_whole(&node, &all)
        .into_iter()
        .chain(retry_modes(&node))
    {
        println!("{line}");
    }
    // Jobs kept off here stay off while Slurm still books mps here
    // (sent back, each would only be refused again); once it books none,
    // they are given back.
    let (deadline, name) = (requeue::Deadline::start(), at.node);
    let state_dir = &node.cfg.state_dir;
    match requeue::lift_where_changed(&deadline, &node, name) {
        Ok(lines) => lines.iter().for_each(|l| println!("{l}")),
        Err(e) => println!("exclusions not taken back: {e}"),
    }
    publish_metrics(&node, &[], |g| status::pipe_probe(&node.cfg, g))
        .map_err(anyhow::Error::msg)?;
    // What is left, read back: a mode still to set, an exclusion kept.
    let modes_left = gpushare::mps::compute_mode::pending(&node.cfg, node.gpu_count);
    let kept = requeue::kept_exclusions(state_dir).unwrap_or(usize::MAX);
    if !modes_left.is_empty() {
        println!("not all of gpushare's traces are gone: run gpu-mps disable again");
        return Ok(exit::DISABLE_LEFT);
    }
    if kept > 0 {
        println!(
            "{kept} job(s) gpushare sent elsewhere stay kept off this node while Slurm books mps \
             here: take its mps out of Slurm's configuration (gres.conf, slurm.conf), then run \
             gpu-mps disable again, or gpu-mps enable"
        );
        return Ok(exit::DISABLE_LEFT);
    }
    println!("no share runs here, no MPS daemon of gpushare's, no exclusion of gpushare's left");
    Ok(exit::DISABLE_DONE)
}

fn enable(at: Here<'_>) -> Result<Exit> {
    let mut node = open_as_root(at, "enable changes the node's state: run it as root")?;
    if disabled::enable(Path::new(disabled::DISABLED_DIR), at.conf).map_err(anyhow::Error::msg)? {
        println!("GPU sharing enabled on this node again");
    } else {
        println!("GPU sharing was not disabled on this node");
    }
    // Jobs kept off while it was disabled may come back where they fit.
    node.disabled = None;
    match requeue::lift_where_changed(&requeue::Deadline::start(), &node, at.node) {
        Ok(lines) => lines.iter().for_each(|l| println!("{l}")),
        Err(e) => println!("exclusions not taken back: {e}"),
    }
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

fn config(
    Here { conf, node }: Here<'_>,
    (gpus, gpu_type): (Option<u32>, Option<&str>),
    whole: &[GpuGroup],
    (release, autodetect): (Option<(u32, u32)>, bool),
    named: bool,
) -> Result<Exit> {
    // With --node, each gres.conf line names the node (NodeName=), for one
    // gres.conf every node shares; without, the node's own file's lines.
    let print = |lines: String| {
        if named {
            print!("{}", setup_lines::scoped_gres_lines(&lines, node));
        } else {
            print!("{lines}");
        }
    };
    let Some(release) = release.or_else(installed::slurm_release) else {
        bail!("cannot tell the Slurm release (scontrol --version): pass --release, e.g. --release 24.11");
    };
    let driver = nvml::driver_version();
    if autodetect || installed::gpus_detected_here(node) {
        // NVML in a child of our own: a GPU fallen off the bus can hang it.
        let names = std::env::current_exe()
            .map_err(|e| e.to_string())
            .and_then(|exe| nvml::names_bounded(&exe, nvml::QUERY_TIMEOUT));
        let nvml_gpus = names.unwrap_or_else(|e| {
            eprintln!("gpu-mps: NVML cannot name this node's GPUs ({e}): --gpus and --type say");
            Vec::new()
        });
        let lines = installed::detected_config(
            conf,
            release,
            node,
            ((gpus, gpu_type), whole),
            &nvml_gpus,
            driver.as_deref(),
            installed::slurmd_g(),
        )
        .map_err(anyhow::Error::msg)?;
        print(lines);
        return Ok(exit::CONFIG_PRINTED);
    }
    let lines = installed::node_config(
        conf,
        release,
        node,
        gpu_type.unwrap_or("TYPE"),
        gpus,
        whole,
        driver.as_deref(),
    )
    .map_err(anyhow::Error::msg)?;
    print(lines);
    Ok(exit::CONFIG_PRINTED)
}
