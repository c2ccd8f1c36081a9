//! The gathering of each command over the recorded answers of each Slurm
//! release (`tests/fixtures/slurm/RELEASE`, see its README): one small
//! site, the same in each release's words. QOS qos_lafferty (GrpTRES
//! gres/gpu:a40=4, may preempt lowprio), alice in account lafferty
//! (GrpTRES gres/gpu:a40=8), her job 101 running on 4 a40 of gpu01, bob's
//! lowprio job 104 on the 4 a40 of gpu02, carol's job 102 pending for
//! Resources and alice's job 103 pending for QOSGrpGRES.

use std::path::{Path, PathBuf};

use super::{site, usage, why};
use crate::qos::audit::{self, GpuQosConf};
use crate::qos::gres::TypeUse;
use crate::qos::slurm::Recorded;

const RELEASES: [&str; 3] = ["22.05", "24.11", "26.05"];

/// No gpu_qos.conf: what is read of Slurm only.
const NO_POLICY: &str = "/nonexistent/gpushare/gpu_qos.conf";

fn scene(release: &str) -> Recorded {
    Recorded::new(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/slurm")
            .join(release),
    )
}

fn a40(limit: u64, held: u64) -> TypeUse {
    TypeUse {
        gpu_type: "a40".to_owned(),
        limit,
        held,
    }
}

#[test]
fn a_resources_wait_names_the_planned_node_and_its_holders() {
    for r in RELEASES {
        let report = why::report(&scene(r), "102").unwrap_or_else(|e| panic!("{r}: {e}"));
        assert!(report.unread.is_empty(), "{r}: {:?}", report.unread);
        assert_eq!(report.job.reason, "Resources", "{r}");
        assert_eq!(report.job.gpus, [(Some("a40".to_owned()), 2)], "{r}");
        assert_eq!(
            report.summary,
            "job 102 (carol, QOS normal, 2 a40, partition gpu) waits for free GPUs: \
             no node it may run on has enough free now",
            "{r}"
        );
        let details = report.details.join("\n");
        assert!(
            details.contains("gpu01 (MIXED), where Slurm plans it: 4 a40, 4 in use"),
            "{r}: {details}"
        );
        assert!(details.contains("gpu02 (MIXED): 4 a40, 4 in use"), "{r}");
        // The factors and weights were read (sprio -j, sprio -w).
        let factors = report.factors.unwrap_or_else(|| panic!("{r}: no factors"));
        assert_eq!(
            (factors.priority, factors.fairshare),
            (1050.0, 1000.0),
            "{r}"
        );
        assert_eq!(report.weights.map(|w| w.qos), Some(10000.0), "{r}");
        assert_eq!(report.fair_share.len(), 2, "{r}");
    }
}

#[test]
fn a_group_limit_wait_names_the_jobs_that_hold_the_limit() {
    for r in RELEASES {
        let report = why::report(&scene(r), "103").unwrap_or_else(|e| panic!("{r}: {e}"));
        // 22.05 names users by uid in assoc_mgr: bob's running lowprio
        // job is read as user 1002's, the caller's uid (1001) as alice.
        assert!(report.unread.is_empty(), "{r}: {:?}", report.unread);
        assert_eq!(report.job.reason, "QOSGrpGRES", "{r}");
        assert_eq!(
            report.summary,
            "job 103 (alice, QOS qos_lafferty, 2 a40, partition gpu) waits for its group's \
             GPU limit: qos_lafferty's 4 a40 are all held: jobs 101 (alice, 4)",
            "{r}"
        );
        assert!(
            report
                .see
                .iter()
                .any(|s| s == "gpu-qos usage --qos qos_lafferty"),
            "{r}"
        );
    }
}

#[test]
fn a_job_not_recorded_is_a_read_error() {
    let e = why::report(&scene("24.11"), "999")
        .err()
        .map(|e| e.to_string());
    assert!(
        e.as_deref()
            .is_some_and(|e| e.starts_with("`squeue -h -j 999 -O ") && e.contains("failed")),
        "{e:?}"
    );
    let e = why::report(&scene("24.11"), "1;rm")
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        e.as_deref(),
        Some("`1;rm` is not a job id (a number, or ARRAYID_TASK)")
    );
}

#[test]
fn alices_usage_shows_the_full_group_and_her_account() {
    for r in RELEASES {
        let report = usage::report(&scene(r), None, false).unwrap_or_else(|e| panic!("{r}: {e}"));
        assert!(report.unread.is_empty(), "{r}: {:?}", report.unread);
        assert_eq!(report.qos.len(), 1, "{r}");
        let group = &report.qos[0];
        assert_eq!(group.qos, "qos_lafferty", "{r}");
        assert_eq!(group.types, [a40(4, 4)], "{r}");
        let running: Vec<&str> = group.running.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(running, ["101"], "{r}");
        assert_eq!(group.pending.len(), 1, "{r}");
        assert_eq!(group.pending[0].job.id, "103", "{r}");
        assert_eq!(
            group.pending[0].why, "qos_lafferty's 4 a40 are all held: jobs 101 (alice, 4)",
            "{r}"
        );
        assert_eq!(report.accounts.len(), 1, "{r}");
        assert_eq!(report.accounts[0].account, "lafferty", "{r}");
        assert_eq!(report.accounts[0].types, [a40(8, 4)], "{r}");
        assert!(report.own.is_empty() && report.partitions.is_empty(), "{r}");
        assert!(
            report
                .to_text()
                .starts_with("qos_lafferty: 4 of 4 a40 held\n"),
            "{r}"
        );
    }
}

#[test]
fn alices_usage_explains_her_pending_job() {
    let Ok(report) = usage::report(&scene("26.05"), None, true) else {
        panic!("usage --explain did not read");
    };
    assert!(report.unread.is_empty(), "{:?}", report.unread);
    let explained: Vec<&str> = report.explained.iter().map(|w| w.job.id.as_str()).collect();
    assert_eq!(explained, ["103"]);
    assert!(report.explained[0]
        .summary
        .ends_with("qos_lafferty's 4 a40 are all held: jobs 101 (alice, 4)"));
}

#[test]
fn metrics_count_group_gpus_and_pending_reasons() {
    for r in RELEASES {
        let (text, warning) = site::metrics_text(&scene(r), Path::new(NO_POLICY))
            .unwrap_or_else(|e| panic!("{r}: {e}"));
        assert_eq!(warning, None, "{r}");
        for line in [
            "gpushare_qos_gpus_in_use{qos=\"qos_lafferty\",gpu_type=\"a40\"} 4\n",
            "gpushare_qos_gpus_in_use{qos=\"lowprio\",gpu_type=\"a40\"} 4\n",
            "gpushare_qos_gpus_limit{qos=\"qos_lafferty\",gpu_type=\"a40\"} 4\n",
            "gpushare_qos_jobs_pending{qos=\"qos_lafferty\",reason=\"QOSGrpGRES\"} 1\n",
        ] {
            assert!(text.contains(line), "{r}: {line} not in\n{text}");
        }
        // lowprio has no limit; normal holds no GPU.
        assert!(!text.contains("gpus_limit{qos=\"lowprio\""), "{r}");
        assert!(!text.contains("qos=\"normal\""), "{r}");
    }
}

#[test]
fn the_audit_reads_the_whole_site() {
    for r in RELEASES {
        let (site, sources) = site::site(&scene(r), Some(PathBuf::from(NO_POLICY)), None)
            .unwrap_or_else(|e| panic!("{r}: {e}"));
        assert!(site.unread.is_empty(), "{r}: {:?}", site.unread);
        assert_eq!(
            sources,
            [
                "scontrol show config",
                "sacctmgr show qos (3 QOS)",
                "2 nodes, 1 partition",
                "sacctmgr show assoc (1 with GPU limits)"
            ],
            "{r}"
        );
        assert_eq!(
            site.settings.number("PriorityWeightQOS"),
            Some(10000),
            "{r}"
        );
        assert!(
            site.settings
                .list_has("AccountingStorageTRES", "gres/gpu:a40"),
            "{r}"
        );
        let qos: Vec<&str> = site.qos.iter().map(|q| q.name()).collect();
        assert_eq!(qos, ["normal", "lowprio", "qos_lafferty"], "{r}");
        assert_eq!(site.qos[2].record.expected_gpu_limit(), Some(4), "{r}");
        assert_eq!(site.qos[1].grace_time, Some(120), "{r}");
        assert!(
            site.nodes
                .iter()
                .all(|n| n.gpu_types().eq(["a40"]) && n.partitions == ["gpu"]),
            "{r}"
        );
        assert_eq!(site.partitions[0].nodes, "gpu[01-02]", "{r}");
        assert_eq!(
            site.partitions[0].billing_weight("gres/gpu:a40"),
            Some("4.0"),
            "{r}"
        );
        assert_eq!(site.associations.len(), 1, "{r}");
        assert_eq!(site.associations[0].account, "lafferty", "{r}");
        assert_eq!(
            site.associations[0].usable_types(),
            [("a40".to_owned(), 8)],
            "{r}"
        );
        assert!(matches!(site.gpu_qos_conf, GpuQosConf::Missing), "{r}");
        // gpu_qos.conf missing is an audit finding, whatever the release.
        let findings = audit::audit(&site);
        assert!(!findings.is_empty(), "{r}");
    }
}

#[test]
fn generate_then_check_is_clean() {
    for r in RELEASES {
        let read = scene(r);
        let (text, warning) = site::generated(&read).unwrap_or_else(|e| panic!("{r}: {e}"));
        assert_eq!(warning, None, "{r}");
        assert!(
            text.contains("\nQOS=qos_lafferty GPUTypes=a40 GPULimit=4\n"),
            "{r}"
        );
        assert!(
            text.contains("\nAccount=lafferty GPUTypes=a40 GPULimit=8\n"),
            "{r}"
        );
        assert!(text.contains("\nLowPriorityQOS=lowprio\n"), "{r}");
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("gpu_qos.conf");
        std::fs::write(&path, &text).unwrap_or_else(|e| panic!("{e}"));
        let (cfg, db, assocs) =
            site::check_inputs(&read, &path).unwrap_or_else(|e| panic!("{r}: {e}"));
        let file = path.to_string_lossy();
        let mut findings = crate::qos::check::check(&cfg, &file, &db);
        findings.extend(crate::qos::check::check_associations(&cfg, &file, &assocs));
        assert!(findings.is_empty(), "{r}: {findings:?}");
    }
}
