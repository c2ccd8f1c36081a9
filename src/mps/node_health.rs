//! `gpu-mps health`: a GPU node's sharing in one line for a health check
//! (Slurm's `HealthCheckProgram`, NHC), and with `--drain` the node
//! drained or resumed through Slurm where gpushare is the cause.
//!
//! A problem is what keeps shares off a GPU until an admin acts: a GPU
//! set aside (lost through NVML, drained with `gpu-mps drain-gpu`, a
//! failed MPS self-test), a GPU's MPS daemon that does not answer, a
//! state file moved aside as unreadable. What an admin chose (`gpu-mps
//! disable`) is not a problem.
//!
//! Slurm runs `HealthCheckProgram` and leaves every action to it. With
//! `--drain` a node with a problem is drained with a reason that starts
//! with [`REASON_PREFIX`], unless slurmctld already holds it unhealthy (an
//! admin's drain is never rewritten); a healthy node is resumed only where
//! the drain is gpushare's. Slurm 26.11 hands the program its own view
//! (`SLURM_NODE_IS_HEALTHY=yes|no`); a `yes` with nothing wrong asks
//! slurmctld nothing, any other case reads the node (`scontrol show
//! node`) for its state and reason.

use super::status::{DaemonState, NodeStatus};

/// How gpushare's drain reason starts: what tells it from an admin's.
pub const REASON_PREFIX: &str = "gpushare: ";
/// The longest reason written (Slurm keeps it whole; `sinfo -R` shows it).
const REASON_MAX: usize = 200;

/// The node's problems, in words, one per GPU or file.
pub fn problems(view: &NodeStatus) -> Vec<String> {
    let mut out = Vec::new();
    for m in &view.mps {
        if let Some(why) = &m.failed {
            out.push(format!("GPU {} set aside ({why})", m.gpu));
        }
        if m.daemon == DaemonState::NotAnswering {
            out.push(format!("GPU {}'s MPS daemon does not answer", m.gpu));
        }
    }
    for file in &view.set_aside_files {
        out.push(format!(
            "state file {} set aside as unreadable",
            file.display()
        ));
    }
    out
}

/// The one line: healthy, or every problem.
pub fn line(problems: &[String], gpus: usize) -> String {
    if problems.is_empty() {
        format!("{REASON_PREFIX}healthy ({gpus} GPU(s))")
    } else {
        format!("{REASON_PREFIX}{}", problems.join("; "))
    }
}

/// What slurmctld holds of the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlurmView {
    /// Healthy (`SLURM_NODE_IS_HEALTHY=yes`, or a state without DRAIN,
    /// DOWN, FAIL or MAINT).
    Healthy,
    /// Drained, down, failing or in maintenance, with its reason where
    /// read (`None`: only `SLURM_NODE_IS_HEALTHY=no` known).
    Unhealthy(Option<String>),
}

/// Slurm 26.11's `SLURM_NODE_IS_HEALTHY`: `Some` where it says.
pub fn from_env(value: Option<&str>) -> Option<SlurmView> {
    match value.map(str::trim) {
        Some(v) if v.eq_ignore_ascii_case("yes") => Some(SlurmView::Healthy),
        Some(v) if v.eq_ignore_ascii_case("no") => Some(SlurmView::Unhealthy(None)),
        _ => None,
    }
}

/// The node as `scontrol -o show node NODE` shows it: its `State=` word
/// and its `Reason=` (the rest of the line from there, the `[user@time]`
/// Slurm adds cut off). `None` where no `State=` is there.
pub fn from_show_node(text: &str) -> Option<SlurmView> {
    let state = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("State="))?;
    let unhealthy = state.split('+').any(|s| {
        [
            "DRAIN", "DRAINED", "DRAINING", "DOWN", "FAIL", "FAILING", "MAINT",
        ]
        .contains(&s)
    });
    if !unhealthy {
        return Some(SlurmView::Healthy);
    }
    let reason = text.split_once(" Reason=").map(|(_, r)| {
        let r = r.trim_end();
        match r.rfind(" [") {
            Some(at) if r.ends_with(']') => r[..at].to_owned(),
            _ => r.to_owned(),
        }
    });
    Some(SlurmView::Unhealthy(reason))
}

/// What `--drain` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Act {
    Nothing,
    /// Drain the node with this reason.
    Drain(String),
    /// Resume the node gpushare drained.
    Resume,
}

/// What to do with the node's `line` (`healthy`: no problem) against
/// slurmctld's `view`.
pub fn act(healthy: bool, line: &str, view: &SlurmView) -> Act {
    match (healthy, view) {
        (false, SlurmView::Healthy) => Act::Drain(cut(line)),
        (true, SlurmView::Unhealthy(Some(reason))) if reason.starts_with(REASON_PREFIX) => {
            Act::Resume
        }
        _ => Act::Nothing,
    }
}

/// Whether `act` needs the node's state and reason read first: where
/// slurmctld said nothing, and where it holds a healthy node unhealthy
/// (whose drain it is decides). Its word settles the rest.
pub fn needs_reason(healthy: bool, env: Option<&SlurmView>) -> bool {
    match env {
        None => true,
        Some(SlurmView::Unhealthy(_)) => healthy,
        Some(SlurmView::Healthy) => false,
    }
}

/// `line` cut to [`REASON_MAX`] bytes at a character's edge.
fn cut(line: &str) -> String {
    if line.len() <= REASON_MAX {
        return line.to_owned();
    }
    let mut end = REASON_MAX - 3;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &line[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurmctlds_view_is_read_from_its_variable_or_the_node() {
        assert_eq!(from_env(Some("yes")), Some(SlurmView::Healthy));
        assert_eq!(from_env(Some("no")), Some(SlurmView::Unhealthy(None)));
        assert_eq!(from_env(None), None);
        assert_eq!(from_env(Some("")), None);
        let idle = "NodeName=gpu01 Arch=x86_64 CoresPerSocket=1 State=IDLE ThreadsPerCore=1";
        assert_eq!(from_show_node(idle), Some(SlurmView::Healthy));
        let ours = "NodeName=gpu01 State=IDLE+DRAIN ThreadsPerCore=1 \
                    Reason=gpushare: GPU 1 set aside (drained by an admin) [root@2026-11-29T10:20:00]";
        assert_eq!(
            from_show_node(ours),
            Some(SlurmView::Unhealthy(Some(
                "gpushare: GPU 1 set aside (drained by an admin)".to_owned()
            )))
        );
        let admins = "NodeName=gpu01 State=DOWN+DRAIN Reason=fan [root@2026-11-29T10:20:00]\n";
        assert_eq!(
            from_show_node(admins),
            Some(SlurmView::Unhealthy(Some("fan".to_owned())))
        );
        assert_eq!(from_show_node("no such node"), None);
    }

    #[test]
    fn gpushare_drains_a_healthy_node_and_resumes_only_its_own_drain() {
        let bad = line(&["GPU 1 set aside (lost)".to_owned()], 4);
        assert_eq!(bad, "gpushare: GPU 1 set aside (lost)");
        assert_eq!(line(&[], 4), "gpushare: healthy (4 GPU(s))");
        assert_eq!(
            act(false, &bad, &SlurmView::Healthy),
            Act::Drain(bad.clone())
        );
        // An admin's drain (or any) is left as it is.
        let admins = SlurmView::Unhealthy(Some("fan".to_owned()));
        assert_eq!(act(false, &bad, &admins), Act::Nothing);
        assert_eq!(act(true, "", &admins), Act::Nothing);
        assert_eq!(act(true, "", &SlurmView::Unhealthy(None)), Act::Nothing);
        let ours = SlurmView::Unhealthy(Some(bad.clone()));
        assert_eq!(act(true, "", &ours), Act::Resume);
        assert_eq!(act(true, "", &SlurmView::Healthy), Act::Nothing);
        // Slurm 26.11's word saves the question where it settles it.
        assert!(!needs_reason(true, Some(&SlurmView::Healthy)));
        assert!(!needs_reason(false, Some(&SlurmView::Unhealthy(None))));
        assert!(needs_reason(true, Some(&SlurmView::Unhealthy(None))));
        assert!(!needs_reason(false, Some(&SlurmView::Healthy)));
        assert!(needs_reason(true, None));
        assert!(needs_reason(false, None));
        // A long line is cut, never split inside a character.
        let long = format!("gpushare: {}", "é".repeat(300));
        match act(false, &long, &SlurmView::Healthy) {
            Act::Drain(r) => assert!(r.len() <= 200 && r.ends_with("...")),
            other => panic!("{other:?}"),
        }
    }
}
