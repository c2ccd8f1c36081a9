//! The runs of a requeued job (`sacct -D`: each requeue is a record).

use serde::{Deserialize, Serialize};

use super::jobs::given;
use super::Query;

/// Every run of `job`.
pub fn of(job: &str) -> Query {
    Query::new(
        "sacct",
        &[
            "-n",
            "-P",
            "-X",
            "-D",
            "-j",
            job,
            "-o",
            "JobID,State,Start,End,NodeList",
        ],
        &format!("sacct-runs-{job}"),
    )
}

/// One run of a job, as `sacct -D` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    pub state: String,
    pub start: Option<String>,
    pub end: Option<String>,
    pub nodes: Option<String>,
}

/// Reads `sacct` run with [`of`]: the runs that ended (the
/// current, pending or running record is left out).
pub fn parse_runs(text: &str) -> Vec<Run> {
    text.lines()
        .filter_map(|raw| {
            let [_, state, start, end, nodes] = raw.split('|').collect::<Vec<_>>()[..] else {
                return None;
            };
            let state = state
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned();
            (!matches!(state.as_str(), "PENDING" | "RUNNING" | "")).then(|| Run {
                state,
                start: given(start),
                end: given(end),
                nodes: given(nodes).filter(|n| n != "None assigned"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ended_runs_only() {
        let runs = parse_runs(
            "9|PREEMPTED|2026-11-23T10:00:00|2026-11-23T10:05:00|gpu01\n\
             9|CANCELLED by 0|2026-11-23T10:06:00|2026-11-23T10:06:00|None assigned\n\
             9|RUNNING|2026-11-23T10:07:00|Unknown|gpu02\n",
        );
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].state, "PREEMPTED");
        assert_eq!(runs[0].nodes.as_deref(), Some("gpu01"));
        assert_eq!(
            (runs[1].state.as_str(), runs[1].nodes.as_deref()),
            ("CANCELLED", None)
        );
    }
}
