//! The node's metrics file (`MetricsFile=`): its counters counted and the
//! file rewritten under the ledger's lock, so that no older view replaces
//! a newer one.

use super::setup::Node;
use super::share_usage::kept_figures;
use crate::mps::ledger::{LedgerError, LedgerState, Snapshot};
use crate::mps::metrics::{self, Counters, Event};
use crate::mps::status::{self, NodeStatus};

/// Counts `events` and rewrites the node's metrics file (`MetricsFile=`),
/// under the ledger's lock, so that no older view ever replaces a newer
/// one; nothing at all where no metrics file is configured. `probe` tells
/// each GPU's daemon and is called under the lock: the node programs pass
/// [`status::pipe_probe`] (a stat, never a question to the daemon).
pub fn publish_metrics(
    node: &Node,
    events: &[Event<'_>],
    probe: impl Fn(u32) -> status::DaemonProbe,
) -> Result<(), String> {
    let Some(path) = &node.cfg.metrics_file else {
        return Ok(());
    };
    let dir = node.ledger.dir();
    let written = node.ledger.with_lock(|snapshot| -> Result<(), String> {
        let (mut counters, note) = Counters::read(dir);
        for event in events {
            counters.count(*event);
        }
        let mut problems: Vec<String> = note.into_iter().collect();
        if !events.is_empty() || !problems.is_empty() {
            if let Err(e) = counters.write(dir) {
                problems.push(e.to_string());
            }
        }
        let text = metrics_text(node, snapshot, &counters, probe);
        if let Err(e) = crate::shared::prom::write_file(path, &text) {
            problems.push(format!("MetricsFile: {e}"));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    });
    written.map_err(|e| e.to_string())?
}

/// The node's metrics: the same [`NodeStatus`] as `gpu-mps status` builds
/// from `snapshot` (unreadable: the loads are unknown until the next
/// transaction repairs it), each GPU's daemon as `probe` tells, the
/// counters, and each running share's use as the node timer last sampled
/// it (read from its file: no NVML here).
pub fn metrics_text(
    node: &Node,
    snapshot: Result<Snapshot, LedgerError>,
    counters: &Counters,
    probe: impl Fn(u32) -> status::DaemonProbe,
) -> String {
    let (state, set_aside) = match snapshot {
        Ok(s) => (s.state, s.set_aside_files),
        Err(e) => (LedgerState::lost(e.to_string()), Vec::new()),
    };
    let (usage, fit) = kept_figures(node, &state);
    let mut view = NodeStatus::of(&state, node.gpu_count, node.cfg.units_per_gpu, set_aside);
    view.mps = status::mps_view(&node.cfg, &view.gpus, probe);
    let text = metrics::render_for(&view, counters, node.private != Some(false), &usage);
    text + &metrics::render_fit(&fit)
}

#[cfg(test)]
mod tests {
    use super::super::epilog::epilog;
    use super::super::prolog::prolog;
    use super::super::prolog::tests::no_squeue;
    use super::super::setup::tests::temp_node;
    use super::super::share_usage::{sample_share_usage, Asked};
    use super::super::trust::tests::share_env;
    use super::*;
    use crate::shared::booking::MpsBooking;
    use std::fs;

    /// The prolog and epilog keep the metrics file in step with the ledger
    /// and count placements and refusals across their runs.
    #[test]
    fn metrics_follow_each_prolog_and_epilog() {
        let (mut node, dir) = temp_node(None);
        let path = dir.path().join("textfile/gpushare.prom");
        fs::create_dir_all(dir.path().join("textfile")).unwrap_or_else(|e| panic!("{e}"));
        node.cfg.metrics_file = Some(path.clone());
        let probe = |gpu| status::pipe_probe(&node.cfg, gpu);
        let read = || fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
        let run = |job, units| {
            let report = prolog(
                &node,
                &share_env(job, units),
                &MpsBooking::default(),
                no_squeue,
            )
            .unwrap_or_else(|e| panic!("{e}"));
            publish_metrics(&node, &report.events(), probe).unwrap_or_else(|e| panic!("{e}"));
        };
        for job in 1..=4 {
            run(job, 60);
        }
        run(5, 60); // fits no GPU: refused
        let text = read();
        for line in [
            "gpushare_gpu_units_allocated{gpu=\"3\"} 60",
            "gpushare_share_units{job=\"2\",user=\"alice\",gpu=\"1\"} 60",
            "gpushare_placements_total{placed_by=\"gpushare\"} 4",
            "gpushare_refusals_total{reason=\"no_room\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        epilog(&node, 2).unwrap_or_else(|e| panic!("{e}"));
        publish_metrics(&node, &[], probe).unwrap_or_else(|e| panic!("{e}"));
        let text = read();
        assert!(
            text.contains("gpushare_gpu_units_allocated{gpu=\"1\"} 0\n"),
            "{text}"
        );
        assert!(!text.contains("job=\"2\""), "{text}");
        // Counted once each, whatever the number of writes.
        assert!(text.contains("gpushare_placements_total{placed_by=\"gpushare\"} 4\n"));
        // No temporary file is left where node_exporter looks.
        let names: Vec<_> = fs::read_dir(dir.path().join("textfile"))
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert_eq!(names, vec![std::ffi::OsString::from("gpushare.prom")]);
    }

    /// What the node timer sampled of each share stays in the file when a
    /// prolog or epilog rewrites it, for the shares still running.
    #[test]
    fn the_timers_share_figures_survive_a_prologs_rewrite() {
        let (mut node, dir) = temp_node(None);
        let path = dir.path().join("gpushare.prom");
        node.cfg.metrics_file = Some(path.clone());
        let probe = |gpu| status::pipe_probe(&node.cfg, gpu);
        for job in 1..=2 {
            let env = share_env(job, 60);
            prolog(&node, &env, &MpsBooking::default(), no_squeue)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let text = "gpu 0 - ok -\nutil 0 none\nend 0\ngpu 1 - ok -\nend 1\n".to_owned();
        let lines = sample_share_usage(&node, |_| Asked {
            text,
            trouble: None,
        });
        assert!(lines.is_empty(), "{lines:?}");
        let job = |j: u32, gpu: u32| {
            format!("gpushare_share_memory_used_bytes{{job=\"{j}\",gpu=\"{gpu}\"}} 0\n")
        };
        // The epilog of job 2, then a prolog's rewrite.
        epilog(&node, 2).unwrap_or_else(|e| panic!("{e}"));
        publish_metrics(&node, &[], probe).unwrap_or_else(|e| panic!("{e}"));
        let written = fs::read_to_string(&path).unwrap_or_default();
        assert!(written.contains(&job(1, 0)), "{written}");
        assert!(!written.contains("job=\"2\""), "{written}");
        // GPU 0 samples no utilisation: no figure, not a 0.
        assert!(
            !written.contains("gpushare_share_sm_utilization"),
            "{written}"
        );
    }
}
