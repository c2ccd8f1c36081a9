//! The common start of `gpu-mps-prolog` and `gpu-mps-epilog`: the command
//! line, the node, the job from slurmd's environment, the logger.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use gpushare::mps::config::{self, missing_conf_refusal};
use gpushare::mps::node::{JobEnv, Node, Unfit};

use crate::node_log;

/// The command line both programs take (slurmd runs them without arguments).
#[derive(Debug, Parser)]
pub struct NodeArgs {
    /// gpu_mps.conf (default: next to $SLURM_CONF, else /etc/slurm/gpu_mps.conf)
    #[arg(long, value_name = "PATH")]
    pub conf: Option<PathBuf>,
}

/// What a started node program works with.
#[derive(Debug)]
pub struct Started {
    pub node: Node,
    pub env: JobEnv,
}

/// Opens the node and reads the job; installs the logger. `Ok(None)`: the
/// node shares nothing, exit 0. `Err(code)`: already logged; 2 for misuse,
/// 1 when the node is unfit (slurmd then drains it, as it should).
pub fn start(program: &str, args: &NodeArgs) -> Result<Option<Started>, ExitCode> {
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
                    node_log::init(program, Some(job), None);
                    log::error!("{}", missing_conf_refusal(job, &looked_at));
                }
            }
            return Ok(None);
        }
    };
    // The configuration first, for its syslog socket: even a node found
    // unfit must say why where the admin looks.
    let cfg = config::load(&conf);
    let socket = cfg
        .as_ref()
        .ok()
        .and_then(|c| c.as_ref())
        .and_then(|c| c.syslog_socket.clone());
    node_log::init(program, job, socket.as_deref());
    let env = match env {
        Ok(env) => env,
        Err(e) => {
            log::error!("{e}");
            return Err(ExitCode::from(2));
        }
    };
    let node = match cfg {
        Ok(Some(cfg)) => Node::with_config(cfg, &conf, crate::effective_uid()),
        Ok(None) => return Ok(None),
        Err(e) => Err(Unfit::Config(e)),
    };
    match node {
        Ok(mut node) => {
            node.pipe_guard = Some(crate::acl::allow_traverse);
            Ok(Some(Started { node, env }))
        }
        Err(e) => {
            log::error!("node unfit for GPU sharing: {e}");
            Err(ExitCode::FAILURE)
        }
    }
}
