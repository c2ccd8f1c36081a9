//! The common start of `gpu-mps-prolog` and `gpu-mps-epilog`: the command
//! line, the node, the job from slurmd's environment, the logger.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use gpushare::mps::config::{self, missing_conf_refusal, no_gpus_refusal};
use gpushare::mps::in_force::{self, InForce, Role, NODE_RECORDS_DIR};
use gpushare::mps::located;
use gpushare::mps::lock_wait::{LockWait, LOCK_WAIT};
use gpushare::mps::node::{
    node_name, record_node_name, refuse_unconfigured, release_unconfigured,
    take_unconfigured_refusal, JobEnv, Node,
};
use gpushare::shared::exit_status::node as exit;

use crate::node_log;

/// The command line both programs take (slurmd runs them without arguments).
#[derive(Debug, Parser)]
pub struct NodeArgs {
    /// gpu_mps.conf (default: next to $SLURM_CONF, else /etc/slurm/gpu_mps.conf)
    #[arg(long, value_name = "PATH")]
    pub conf: Option<PathBuf>,
}

/// slurmd's Prolog on GPU nodes that share GPUs through MPS (gpushare).
///
/// slurmd runs it as root before each job on the node, without arguments.
/// It places the job's MPS share on a GPU (or records the GPU Slurm
/// booked), starts that GPU's MPS daemon and writes the node's share
/// ledger; it logs to syslog. Exit status: 0 the job may start (a share
/// refused for the job's own reasons exits 0 too: the job fails, not the
/// node); 1 the node is unfit for GPU sharing (slurmd drains it; syslog
/// says why); 2 run without a job's environment.
#[derive(Debug, Parser)]
#[command(name = "gpu-mps-prolog", version = env!("CARGO_PKG_VERSION"))]
pub struct PrologCli {
    #[command(flatten)]
    pub node: NodeArgs,
}

/// slurmd's Epilog on GPU nodes that share GPUs through MPS (gpushare).
///
/// slurmd runs it as root after each job on the node, without arguments.
/// It releases the job's share from the node's ledger, ends the job's MPS
/// clients and stops a GPU's MPS daemon after its last share; a share
/// refused where another node may serve it is requeued elsewhere. It logs
/// to syslog. Exit status: 0 done (a share refused and never placed holds
/// nothing to release), 1 the node cannot release the share (slurmd
/// drains it; syslog says why), 2 run without a job's environment.
#[derive(Debug, Parser)]
#[command(name = "gpu-mps-epilog", version = env!("CARGO_PKG_VERSION"))]
pub struct EpilogCli {
    #[command(flatten)]
    pub node: NodeArgs,
}

/// Which of the two programs runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    Prolog,
    Epilog,
}

/// What a started node program works with.
#[derive(Debug)]
pub struct Started {
    pub node: Node,
    pub env: JobEnv,
    /// The configuration in force (a prolog that places holds its lock
    /// until it exits).
    pub in_force: InForce,
}

/// Opens the node and reads the job; installs the logger. `Ok(None)`: the
/// node shares nothing, or nothing can be done for this job, exit 0.
/// `Err(code)`: already logged; 2 for misuse, 1 when the node is unfit
/// (slurmd then drains it, as it should): an unusable state directory, or
/// an epilog that cannot serve a share for want of any configuration.
pub fn start(program: Program, args: &NodeArgs) -> Result<Option<Started>, ExitCode> {
    let name = match program {
        Program::Prolog => "gpu-mps-prolog",
        Program::Epilog => "gpu-mps-epilog",
    };
    let env = JobEnv::from_env(|k| std::env::var(k).ok());
    let job = env.as_ref().ok().map(|e| e.job);
    let conf = match config::locate(args.conf.as_deref()) {
        Ok(conf) => conf,
        Err(looked_at) => {
            // No gpushare here: every job is Slurm's alone. A share must not
            // run so silently: the SPANK plugin refuses it, and the node's
            // log says why.
            if let (Ok(env), Some(job)) = (&env, job) {
                if env.is_share() {
                    node_log::init(name, Some(job), None);
                    log::error!("{}", missing_conf_refusal(job, &looked_at));
                }
            }
            return Ok(None);
        }
    };
    // Only a prolog that records something places: it alone records the
    // last good configuration and may adopt a changed one.
    let places = program == Program::Prolog
        && env
            .as_ref()
            .is_ok_and(|e| e.is_share() || !e.job_gpus.is_empty());
    let role = if places { Role::Placer } else { Role::Reader };
    let owner = crate::effective_uid();
    // This node as slurmd names it, for the file's NodeName= lines.
    let node = env
        .as_ref()
        .map_or_else(|_| node_name(None), |e| e.node.clone());
    // The configuration first, for its syslog socket: even a node found
    // unfit must say why where the admin looks.
    let records = std::path::Path::new(NODE_RECORDS_DIR);
    // Every lock this program waits for, together, within one budget.
    let wait = LockWait::budget(LOCK_WAIT);
    let at = in_force::Reading {
        conf: &conf,
        node: &node,
        records,
        owner,
        wait,
    };
    let mut in_force = in_force::resolve_within(at, role);
    let socket = in_force.cfg.as_ref().and_then(|c| c.syslog_socket.clone());
    node_log::init(name, job, socket.as_deref());
    for note in &in_force.notes {
        log::warn!("{note}");
    }
    // For the commands slurmd does not start (the node timer, an admin's
    // gpu-mps), which have no SLURMD_NODENAME.
    if env.is_ok() {
        if let Err(e) = record_node_name(records, owner, &node) {
            log::debug!("the node's name not recorded: {e}");
        }
        // And where slurmd's SLURM_CONF led to gpu_mps.conf (located.rs).
        if let Err(e) = located::record(Path::new(located::RECORD_DIR), owner, &conf) {
            log::debug!("where gpu_mps.conf is not recorded: {e}");
        }
    }
    if let Some(why) = &in_force.no_gpus {
        // The file gives this node no GPUs: as on a node without it, every
        // job is Slurm's alone, and a share is refused (by the SPANK
        // plugin), the node's log saying why.
        if let (Ok(env), Some(job)) = (&env, job) {
            if env.is_share() {
                log::error!("{}", no_gpus_refusal(job, why));
            }
        }
        return Ok(None);
    }
    let env = match env {
        Ok(env) => env,
        Err(e) => {
            log::error!("{e}");
            return Err(exit::MISUSED.into());
        }
    };
    // A share refused for want of any configuration left its note beside
    // the node's ledger pointer: its epilog takes it away, whatever the
    // file says now.
    let refused_unplaced = (program == Program::Epilog && env.is_share())
        .then(|| take_unconfigured_refusal(records, &conf, owner, env.job))
        .flatten();
    let Some(cfg) = in_force.cfg.take() else {
        // No configuration to trust: CPU-only and whole-GPU jobs run; a
        // share is refused, with a note the SPANK plugin fails its tasks
        // with; the epilog of a share refused so has nothing to release.
        // Only an epilog of a share that may have been placed drains the
        // node: it cannot release it.
        let why = in_force
            .shares_refused
            .as_deref()
            .unwrap_or("no configuration");
        if !env.is_share() {
            return Ok(None);
        }
        return match program {
            Program::Prolog => {
                let text = refuse_unconfigured(records, &conf, owner, &env, why);
                log::warn!("refused: {text}");
                Ok(None)
            }
            Program::Epilog => {
                match release_unconfigured(env.job, refused_unplaced.as_deref(), why) {
                    Ok(line) => {
                        log::info!("{line}");
                        Ok(None)
                    }
                    Err(line) => {
                        log::error!("{line}");
                        Err(exit::EPILOG_UNRELEASED.into())
                    }
                }
            }
        };
    };
    if program == Program::Prolog && env.is_share() {
        // Placed now: no earlier refusal of this job (a run before a
        // requeue whose epilog never ran) may fail its tasks.
        let _ = take_unconfigured_refusal(records, &conf, owner, env.job);
    }
    match Node::in_force(Some(cfg), &in_force, &conf, owner) {
        Ok(mut node) => {
            node.pipe_guard = Some(crate::acl::allow_traverse);
            node.set_lock_wait(wait);
            Ok(Some(Started {
                node,
                env,
                in_force,
            }))
        }
        Err(e) => {
            log::error!("node unfit for GPU sharing: {e}");
            Err(match program {
                Program::Prolog => exit::PROLOG_UNFIT,
                Program::Epilog => exit::EPILOG_UNRELEASED,
            }
            .into())
        }
    }
}

/// How Slurm books mps on node `node_name` (gres.conf, slurm.conf and
/// cgroup.conf in slurm.conf's directory, slurmd's configless cache
/// included), for the prolog of a share: other jobs start without reading
/// them (`Ok` of nothing booked). `Err`: the node is unfit for sharing.
pub fn booking(
    env: &JobEnv,
    node_name: Option<&str>,
) -> Result<gpushare::shared::booking::MpsBooking, String> {
    use gpushare::shared::booking::MpsBooking;
    if !env.is_share() {
        return Ok(MpsBooking::default());
    }
    let slurm_conf = gpushare::shared::locations::beside_slurm_conf(None, "slurm.conf");
    let conf_dir = slurm_conf.parent().unwrap_or(Path::new("/"));
    MpsBooking::read(conf_dir, node_name.unwrap_or_default())
}
