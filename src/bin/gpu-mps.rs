//! `gpu-mps`: the sysadmin's (and curious user's) view of a GPU node's MPS
//! shares, kept by gpushare's prolog/epilog.
//!
//! `status` works for any user (it falls back to the world-readable copy the
//! prolog and epilog publish); `gc` (root) runs the prolog's reconciliation
//! on demand; `config` prints the slurm.conf/gres.conf lines the node needs.
//! Rendering lives in `gpushare::mps_status`, where it is tested.

#![forbid(unsafe_code)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use gpushare::ledger::{Ledger, LedgerState};
use gpushare::mps_conf::{self, GpuMpsConfig, CONF_NAME};
use gpushare::mps_node::{gpu_devices, public_status_path, publish_status, running_jobs};
use gpushare::mps_status;
use gpushare::reload::beside_slurm_conf;

const USAGE: &str = "\
gpu-mps: the MPS shares of this GPU node (gpushare)

Usage:
  gpu-mps status [--conf PATH] [--json]
  gpu-mps gc [--conf PATH] [--node NAME]
  gpu-mps config [--conf PATH] [--gpus N] [--type T] [--node NAME]
  gpu-mps --help | --version

Commands:
  status   One row per GPU: units used/total, share jobs (id, user, units),
           whole-GPU holders, and flags: OVERLAP (shares and a whole-GPU job
           on one GPU, which Slurm 22.05 can create), OVER (over capacity).
           Any user may run it.
  gc       (root) Drop records of jobs slurmctld no longer runs on this node,
           as the prolog does; drops nothing if squeue cannot be asked.
  config   Print the gres.conf, slurm.conf, cgroup.conf, plugstack.conf and
           gpu_mps.conf lines this node needs on Slurm 22.05.

Options:
  --conf PATH  gpu_mps.conf (default: next to $SLURM_CONF, or /etc/slurm)
  --json       status as one JSON object
  --node NAME  node name (default: $SLURMD_NODENAME, else the short hostname)
  --gpus N     GPUs of the node (default: the device files gpu_mps.conf finds)
  --type T     GPU type for gres.conf (default: TYPE, to be edited)

Exit status: 0 fine, 1 a problem shown (OVERLAP/OVER), 2 could not run.
";

struct Args {
    command: String,
    conf: PathBuf,
    json: bool,
    node: Option<String>,
    gpus: Option<u32>,
    gpu_type: String,
}

fn parse_args(raw: &[String]) -> Result<Args, String> {
    let mut it = raw.iter();
    let command = it.next().cloned().ok_or("no command given")?;
    let mut a = Args {
        command,
        conf: beside_slurm_conf(None, CONF_NAME),
        json: false,
        node: None,
        gpus: None,
        gpu_type: "TYPE".into(),
    };
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--conf" => a.conf = value()?.into(),
            "--json" => a.json = true,
            "--node" => a.node = Some(value()?),
            "--gpus" => {
                a.gpus = Some(
                    value()?
                        .parse()
                        .map_err(|_| "--gpus needs a number".to_string())?,
                )
            }
            "--type" => a.gpu_type = value()?,
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(a)
}

fn euid() -> u32 {
    // /proc/self belongs to the effective user of the process reading it.
    std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid())
}

fn load(conf: &Path) -> Result<GpuMpsConfig, String> {
    match std::fs::read_to_string(conf) {
        Ok(text) => mps_conf::parse(&text, &conf.to_string_lossy()).map_err(|e| e.to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "{}: not found: this node shares no GPU",
            conf.display()
        )),
        Err(e) => Err(format!("{}: {e}", conf.display())),
    }
}

fn node_name(arg: Option<String>) -> String {
    arg.or_else(|| std::env::var("SLURMD_NODENAME").ok())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().split('.').next().unwrap_or("").to_owned())
        })
        .unwrap_or_default()
}

fn status(a: &Args) -> Result<u8, String> {
    let cfg = load(&a.conf)?;
    let devices = gpu_devices(&cfg);
    let gpus = u32::try_from(devices.len()).unwrap_or(u32::MAX);
    let (state, aside) = if euid() == 0 {
        let snap = Ledger::open(&cfg.state_dir, 0)
            .and_then(|l| l.snapshot())
            .map_err(|e| e.to_string())?;
        (snap.state, snap.set_aside_files)
    } else {
        let path = public_status_path(&cfg);
        match std::fs::read_to_string(&path) {
            Ok(text) => (
                LedgerState::parse(&text, &path).map_err(|e| e.to_string())?,
                Vec::new(),
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (LedgerState::new(), Vec::new()),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
    };
    let view = state.per_gpu(gpus, cfg.units_per_gpu);
    if a.json {
        println!("{}", mps_status::json(&view, cfg.units_per_gpu, &aside));
    } else {
        print!("{}", mps_status::table(&view, &devices, cfg.units_per_gpu));
        for f in &aside {
            println!(
                "set aside (unreadable state, kept for inspection): {}",
                f.display()
            );
        }
    }
    Ok(u8::from(mps_status::has_problem(&view)))
}

fn gc(a: &Args) -> Result<u8, String> {
    if euid() != 0 {
        return Err("gc changes the node's ledger: run it as root".into());
    }
    let cfg = load(&a.conf)?;
    let ledger = Ledger::open(&cfg.state_dir, 0).map_err(|e| e.to_string())?;
    let node = node_name(a.node.clone());
    let running = running_jobs(&node).ok_or_else(|| {
        format!("cannot ask slurmctld which jobs run on {node:?} (squeue failed): nothing dropped")
    })?;
    let out = ledger
        .reconcile(|job| running.contains(&job))
        .map_err(|e| e.to_string())?;
    for r in &out.value {
        println!("dropped: {r}");
    }
    if out.value.is_empty() {
        println!("nothing to drop: every record belongs to a job running on {node}");
    } else {
        publish_status(&cfg, &ledger)?;
    }
    Ok(0)
}

fn config(a: &Args) -> Result<u8, String> {
    // Without a gpu_mps.conf yet, print the lines for the defaults.
    let cfg = load(&a.conf).unwrap_or_default();
    let gpus = a
        .gpus
        .unwrap_or_else(|| u32::try_from(gpu_devices(&cfg).len()).unwrap_or(0));
    if gpus == 0 {
        return Err("no GPU device files found: pass --gpus N".into());
    }
    // Installed as PREFIX/sbin/gpu-mps: the scripts are in PREFIX/libexec/gpushare.
    let libexec = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent()?.parent().map(|p| p.join("libexec/gpushare")))
        .unwrap_or_else(|| PathBuf::from("/usr/local/libexec/gpushare"));
    let plugin_dir = Command::new("scontrol")
        .args(["show", "config"])
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find(|l| l.starts_with("PluginDir"))
                .and_then(|l| l.split('=').nth(1))
                .map(|v| v.trim().split(':').next().unwrap_or("").to_owned())
        })
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| "<PluginDir>".into());
    print!(
        "{}",
        mps_status::node_config(
            &cfg,
            &node_name(a.node.clone()),
            &a.gpu_type,
            gpus,
            &libexec,
            Path::new(&plugin_dir),
            &a.conf
        )
    );
    Ok(0)
}

fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    if raw.iter().any(|a| a == "-h" || a == "--help") {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if raw.first().is_some_and(|a| a == "--version") {
        println!(
            "gpu-mps {} (gpushare, built for Slurm {})",
            env!("CARGO_PKG_VERSION"),
            gpushare::SLURM_VERSION
        );
        return ExitCode::SUCCESS;
    }
    let args = match parse_args(&raw) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gpu-mps: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let result = match args.command.as_str() {
        "status" => status(&args),
        "gc" => gc(&args),
        "config" => config(&args),
        other => Err(format!("unknown command {other:?}\n\n{USAGE}")),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("gpu-mps: {e}");
            ExitCode::from(2)
        }
    }
}
