//! `gpu-mps disable` and `enable`: a node taken off sharing and back, in
//! the order that leaves nothing of gpushare's behind (the mark at once;
//! once no share runs, every daemon stopped, every mode given back, every
//! exclusion taken back). `gpu-mps` only prints the lines and maps the
//! outcome to its exit status.

use std::path::Path;
use std::time::{Duration, Instant};

use gpushare::mps::node::{follow_whole, publish_metrics, retry_modes, stop_idle_daemons, Node};
use gpushare::mps::{compute_mode, disabled, status};

use crate::requeue;

/// Where `disable` stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Off {
    /// Nothing of gpushare's is left on the node.
    Done,
    /// Shares still ran when the wait ended (their jobs): run it again.
    SharesRun(Vec<u32>),
    /// A GPU's compute mode is still to be given back: run it again.
    ModesLeft,
    /// Jobs sent elsewhere stay kept off while Slurm books mps here.
    Kept(usize),
}

/// Takes the node of `conf` off sharing for `reason`: marked at once
/// (new shares refused, reason `disabled`), then, once no share runs
/// (waiting up to `wait`), its daemons stopped, its modes given back and
/// the exclusions taken back; each step's lines go to `say`.
pub fn disable(
    node: &Node,
    conf: &Path,
    name: &str,
    (reason, wait): (&str, Duration),
    say: &mut dyn FnMut(String),
) -> Result<Off, String> {
    let dir = Path::new(disabled::DISABLED_DIR);
    if disabled::read(dir, conf, 0).is_none() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        disabled::disable(dir, conf, 0, reason, now)?;
        say("GPU sharing disabled on this node: new shares are refused (reason `disabled`)".into());
    } else {
        say("GPU sharing was disabled on this node already".into());
    }
    let until = Instant::now() + wait;
    let running = loop {
        let snapshot = node.ledger.snapshot().map_err(|e| e.to_string())?;
        let jobs: Vec<u32> = snapshot.state.shares().map(|s| s.job).collect();
        if jobs.is_empty() || Instant::now() >= until {
            break jobs;
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    if !running.is_empty() {
        return Ok(Off::SharesRun(running));
    }
    for (gpu, outcome) in stop_idle_daemons(node).map_err(|e| e.to_string())? {
        say(format!("GPU {gpu}: MPS daemon: {outcome}"));
    }
    let all: Vec<u32> = (0..node.gpu_count).collect();
    follow_whole(node, &all)
        .into_iter()
        .chain(retry_modes(node))
        .for_each(&mut *say);
    // Jobs kept off here stay off while Slurm still books mps here (sent
    // back, each would only be refused again); once it books none, they
    // are given back.
    requeue::lift_and_say(node, name, say);
    publish_metrics(node, &[], |g| status::pipe_probe(&node.cfg, g))?;
    // What is left, read back: a mode still to set, an exclusion kept.
    if !compute_mode::pending(&node.cfg, node.gpu_count).is_empty() {
        return Ok(Off::ModesLeft);
    }
    match requeue::kept_exclusions(&node.cfg.state_dir).unwrap_or(usize::MAX) {
        0 => Ok(Off::Done),
        kept => Ok(Off::Kept(kept)),
    }
}

/// Gives the node of `conf` back to sharing, said; the jobs kept off
/// while it was disabled may come back where they fit.
pub fn enable(
    node: &mut Node,
    conf: &Path,
    name: &str,
    say: &mut dyn FnMut(String),
) -> Result<(), String> {
    if disabled::enable(Path::new(disabled::DISABLED_DIR), conf)? {
        say("GPU sharing enabled on this node again".into());
    } else {
        say("GPU sharing was not disabled on this node".into());
    }
    node.disabled = None;
    requeue::lift_and_say(node, name, say);
    Ok(())
}
