//! `gpu-mps health`: the node's view read as `status` reads it, the
//! verdict and Slurm's drain or resume (`gpushare::mps::node_health`
//! decides), Slurm asked through `scontrol` within a bound.

use std::path::Path;
use std::time::Duration;

use gpushare::mps::in_force::{self, Role, NODE_RECORDS_DIR};
use gpushare::mps::node_health::{
    act, from_env, from_show_node, line, needs_reason, problems, Act, SlurmView,
};
use gpushare::shared::bounded;

use crate::node_status;

/// How long one `scontrol` call may take (Slurm kills the health check
/// program after HealthCheckTimeout, 60 s by default).
const SCONTROL_TIMEOUT: Duration = Duration::from_secs(15);

/// What `gpu-mps health` found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The one line.
    pub line: String,
    pub healthy: bool,
    /// What `--drain` asked of Slurm, in words (`None`: nothing).
    pub acted: Option<String>,
}

fn scontrol(args: &[&str]) -> Result<String, String> {
    bounded::slurm("scontrol", args, SCONTROL_TIMEOUT)
}

/// Checks node `node` (its gpu_mps.conf `conf`), as `uid`; with `drain`,
/// drains or resumes it through Slurm (`slurm_says`: the
/// `SLURM_NODE_IS_HEALTHY` slurmd gave, where it did).
pub fn check(
    conf: &Path,
    node: &str,
    uid: u32,
    drain: bool,
    slurm_says: Option<&str>,
) -> Result<Checked, String> {
    let records = Path::new(NODE_RECORDS_DIR);
    let found = in_force::resolve(conf, node, records, uid, Role::Reader);
    if let Some(why) = &found.no_gpus {
        return Ok(Checked {
            line: format!("gpushare: healthy: {why}"),
            healthy: true,
            acted: None,
        });
    }
    let say = &mut |l: String| eprintln!("gpu-mps: {l}");
    let (view, _, trouble) = node_status::view(conf, node, uid, say)?;
    let mut found = problems(&view);
    if let Some(t) = trouble {
        found.push(format!("the ledger cannot be read ({t})"));
    }
    let healthy = found.is_empty();
    let text = line(&found, view.gpus.len());
    let mut checked = Checked {
        line: text,
        healthy,
        acted: None,
    };
    if !drain {
        return Ok(checked);
    }
    let told = from_env(slurm_says);
    let slurm = match told {
        Some(v) if !needs_reason(healthy, Some(&v)) => v,
        _ => {
            let shown = scontrol(&["-o", "show", "node", node])?;
            from_show_node(&shown).ok_or_else(|| format!("scontrol shows no node {node}"))?
        }
    };
    let name = format!("NodeName={node}");
    match act(healthy, &checked.line, &slurm) {
        Act::Nothing => {}
        Act::Drain(reason) => {
            scontrol(&["update", &name, "State=DRAIN", &format!("Reason={reason}")])?;
            checked.acted = Some(format!("node {node} drained"));
        }
        Act::Resume => {
            scontrol(&["update", &name, "State=RESUME"])?;
            checked.acted = Some(format!("node {node} resumed (its drain was gpushare's)"));
        }
    }
    if let (false, SlurmView::Unhealthy(reason)) = (healthy, &slurm) {
        checked.acted = Some(format!(
            "node {node} left as Slurm holds it (unhealthy{})",
            reason
                .as_deref()
                .map_or_else(String::new, |r| format!(": {r}"))
        ));
    }
    Ok(checked)
}
