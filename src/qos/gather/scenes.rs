//! The gathering of each command over the recorded answers of each Slurm
//! release (`tests/fixtures/slurm/RELEASE`, see its README): one small
//! site, the same in each release's words, its ids and names in the
//! release's `scene.json`. QOS qos_lafferty (GrpTRES gres/gpu:a40=4, may
//! preempt lowprio), a member in account lafferty (GrpTRES
//! gres/gpu:a40=8) whose job holds 4 a40 under it, another user's lowprio
//! job on the other 4 a40, a third user's job pending for Resources and
//! the member's second job pending for QOSGrpGRES. The recorded sets come
//! from `tests/fixtures_scene.rs` on a real cluster.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{site, usage, why};
use crate::qos::audit::{self, GpuQosConf};
use crate::qos::gres::TypeUse;
use crate::qos::slurm::{Query, ReadError, Recorded, SlurmRead};

const RELEASES: [&str; 3] = ["22.05", "24.11", "26.05"];

/// No gpu_qos.conf: what is read of Slurm only.
const NO_POLICY: &str = "/nonexistent/gpushare/gpu_qos.conf";

/// A release's `scene.json`: who and what the recorded answers name (the
/// lowprio job and its user, also there, are read of no report).
#[derive(Debug, Deserialize)]
struct Manifest {
    release: String,
    member: Member,
    account: String,
    jobs: Jobs,
    users: Users,
    nodes: Vec<Node>,
}

#[derive(Debug, Deserialize)]
struct Member {
    name: String,
    uid: u32,
}

#[derive(Debug, Deserialize)]
struct Jobs {
    /// The member's job on 4 a40 under qos_lafferty.
    running: String,
    /// Pending for Resources.
    resources: String,
    /// Another user's lowprio job on the other 4 a40.
    lowprio: String,
    /// The member's job pending for QOSGrpGRES.
    qos_grp_gres: String,
}

#[derive(Debug, Deserialize)]
struct Users {
    /// Who runs the job pending for Resources.
    resources: String,
    /// Who runs the lowprio job.
    lowprio: String,
}

#[derive(Debug, Deserialize)]
struct Node {
    name: String,
    a40: u64,
}

fn dir(release: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/slurm")
        .join(release)
}

fn scene(release: &str) -> Recorded {
    Recorded::new(dir(release))
}

fn manifest(release: &str) -> Manifest {
    let path = dir(release).join("scene.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let m: Manifest =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(m.release, release, "{}", path.display());
    m
}

fn a40(limit: u64, held: u64) -> TypeUse {
    TypeUse {
        gpu_type: "a40".to_owned(),
        limit,
        held,
    }
}

/// What a pending group job is told: the member's running job holds the
/// group's 4 a40.
fn group_full(m: &Manifest) -> String {
    format!(
        "qos_lafferty's 4 a40 are all held: jobs {} ({}, 4)",
        m.jobs.running, m.member.name
    )
}

#[test]
fn every_release_has_its_scene() {
    for r in RELEASES {
        let m = manifest(r);
        // The caller of why and usage is the member.
        let read = |key: &str| {
            let path = dir(r).join(format!("{key}.txt"));
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        };
        assert_eq!(read("id-un").trim(), m.member.name, "{r}");
        assert_eq!(read("id-u").trim(), m.member.uid.to_string(), "{r}");
        assert_eq!(m.account, "lafferty", "{r}");
        assert!(!m.nodes.is_empty(), "{r}");
    }
}

#[test]
fn a_resources_wait_names_the_full_nodes() {
    for r in RELEASES {
        let m = manifest(r);
        let id = &m.jobs.resources;
        let report = why::report(&scene(r), id).unwrap_or_else(|e| panic!("{r}: {e}"));
        assert!(report.unread.is_empty(), "{r}: {:?}", report.unread);
        assert_eq!(report.job.reason, "Resources", "{r}");
        assert_eq!(report.job.gpus, [(Some("a40".to_owned()), 2)], "{r}");
        assert_eq!(
            report.summary,
            format!(
                "job {id} ({}, QOS normal, 2 a40, partition gpu) waits for free GPUs: \
                 no node it may run on has enough free now",
                m.users.resources
            ),
            "{r}"
        );
        // Every GPU of every node is in use, by the two running jobs,
        // each named with its end (squeue -t RUNNING -w).
        for node in &m.nodes {
            let line = report
                .details
                .iter()
                .find(|d| d.starts_with(&format!("{} (", node.name)))
                .unwrap_or_else(|| panic!("{r}: {} not in {:#?}", node.name, report.details));
            let all = format!(": {n} a40, {n} in use: ", n = node.a40);
            let member = format!(
                "qos_lafferty job {} ({}, 4 a40, ends by 20",
                m.jobs.running, m.member.name
            );
            let other = format!(
                "lowprio job {} ({}, 4 a40, ends by 20",
                m.jobs.lowprio, m.users.lowprio
            );
            assert!(
                line.contains(&all) && line.contains(&member) && line.contains(&other),
                "{r}: {line}"
            );
        }
        let when = format!("enough a40s free up first on {} by 20", m.nodes[0].name);
        assert!(
            report
                .details
                .iter()
                .any(|d| d.starts_with(&when) && d.contains(", when job ")),
            "{r}: {:#?}",
            report.details
        );

        // The factors and weights were read (sprio -j, sprio -w), sprio's
        // priority that of squeue.
        let factors = report.factors.unwrap_or_else(|| panic!("{r}: no factors"));
        assert_eq!(factors.priority, report.job.priority as f64, "{r}");
        assert_eq!(report.weights.map(|w| w.qos), Some(10000.0), "{r}");
        // sshare: the account's line and the user's.
        assert_eq!(report.fair_share.len(), 2, "{r}");
    }
}

#[test]
fn a_group_limit_wait_names_the_jobs_that_hold_the_limit() {
    for r in RELEASES {
        let m = manifest(r);
        let id = &m.jobs.qos_grp_gres;
        let report = why::report(&scene(r), id).unwrap_or_else(|e| panic!("{r}: {e}"));
        // 22.05 names users by uid in assoc_mgr: the lowprio job is read
        // as its user's uid's, the caller's uid as the member.
        assert!(report.unread.is_empty(), "{r}: {:?}", report.unread);
        assert_eq!(report.job.reason, "QOSGrpGRES", "{r}");
        assert_eq!(
            report.summary,
            format!(
                "job {id} ({}, QOS qos_lafferty, 2 a40, partition gpu) waits for its group's \
                 GPU limit: {}",
                m.member.name,
                group_full(&m)
            ),
            "{r}"
        );
        assert!(
            report
                .see
                .iter()
                .any(|s| s == "gpu-qos usage --qos qos_lafferty"),
            "{r}"
        );
        // Its QOS's priority, the highest, counts in full.
        let factors = report.factors.unwrap_or_else(|| panic!("{r}: no factors"));
        assert_eq!(factors.qos, 10000.0, "{r}");
        assert_eq!(factors.priority, report.job.priority as f64, "{r}");
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
fn the_members_usage_shows_the_full_group_and_her_account() {
    for r in RELEASES {
        let m = manifest(r);
        let report = usage::report(&scene(r), None, false).unwrap_or_else(|e| panic!("{r}: {e}"));
        assert!(report.unread.is_empty(), "{r}: {:?}", report.unread);
        assert_eq!(report.user, m.member.name, "{r}");
        assert_eq!(report.qos.len(), 1, "{r}");
        let group = &report.qos[0];
        assert_eq!(group.qos, "qos_lafferty", "{r}");
        assert_eq!(group.types, [a40(4, 4)], "{r}");
        let running: Vec<&str> = group.running.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(running, [m.jobs.running.as_str()], "{r}");
        assert_eq!(group.pending.len(), 1, "{r}");
        assert_eq!(group.pending[0].job.id, m.jobs.qos_grp_gres, "{r}");
        assert_eq!(group.pending[0].why, group_full(&m), "{r}");
        assert_eq!(report.accounts.len(), 1, "{r}");
        assert_eq!(report.accounts[0].account, m.account, "{r}");
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
fn the_members_usage_explains_her_pending_job() {
    for r in RELEASES {
        let m = manifest(r);
        let report = usage::report(&scene(r), None, true).unwrap_or_else(|e| panic!("{r}: {e}"));
        assert!(report.unread.is_empty(), "{r}: {:?}", report.unread);
        let explained: Vec<&str> = report.explained.iter().map(|w| w.job.id.as_str()).collect();
        assert_eq!(explained, [m.jobs.qos_grp_gres.as_str()], "{r}");
        assert!(
            report.explained[0].summary.ends_with(&group_full(&m)),
            "{r}: {}",
            report.explained[0].summary
        );
    }
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

/// The recorded scene read while Slurm's scheduler has cleared the
/// pending jobs' reasons (`None`, a moment of each of its passes): in
/// every squeue answer, or, with `job_read_kept`, in every one but the
/// one-job read (`squeue -j`) that comes first.
struct Cleared {
    scene: Recorded,
    job_read_kept: bool,
}

impl SlurmRead for Cleared {
    fn read(&self, query: &Query) -> Result<String, ReadError> {
        let text = self.scene.read(query)?;
        let kept = self.job_read_kept && query.args.iter().any(|a| a == "-j");
        Ok(if query.program == "squeue" && !kept {
            text.replace("|QOSGrpGRES|", "|None|")
                .replace("|Resources|", "|None|")
        } else {
            text
        })
    }
}

#[test]
fn a_reason_slurm_has_cleared_for_a_moment_is_settled_by_the_groups_use() {
    for r in RELEASES {
        let m = manifest(r);
        let cleared = Cleared {
            scene: scene(r),
            job_read_kept: false,
        };
        assert!(
            cleared
                .scene
                .read(&crate::qos::slurm::jobs::pending())
                .is_ok_and(|t| t.contains("|QOSGrpGRES|")),
            "{r}: the scene has a job pending for its group"
        );
        // The group's job waits on its group's limit in every command;
        // the one pending for Resources fits its QOS and keeps None.
        let (text, _) = site::metrics_text(&cleared, Path::new(NO_POLICY))
            .unwrap_or_else(|e| panic!("{r}: {e}"));
        assert!(
            text.contains(
                "gpushare_qos_jobs_pending{qos=\"qos_lafferty\",reason=\"QOSGrpGRES\"} 1\n"
            ),
            "{r}: {text}"
        );
        let report = usage::report(&cleared, None, true).unwrap_or_else(|e| panic!("{r}: {e}"));
        assert_eq!(report.qos[0].pending[0].why, group_full(&m), "{r}");
        assert!(
            report.explained[0].summary.ends_with(&group_full(&m)),
            "{r}: {}",
            report.explained[0].summary
        );
        let resources =
            why::report(&cleared, &m.jobs.resources).unwrap_or_else(|e| panic!("{r}: {e}"));
        assert!(
            resources
                .summary
                .ends_with("waits for the scheduler's next pass"),
            "{r}: {}",
            resources.summary
        );
    }
}

#[test]
fn the_audit_reads_the_whole_site() {
    for r in RELEASES {
        let m = manifest(r);
        let (site, sources) = site::site(&scene(r), Some(PathBuf::from(NO_POLICY)), None)
            .unwrap_or_else(|e| panic!("{r}: {e}"));
        assert!(site.unread.is_empty(), "{r}: {:?}", site.unread);
        let nodes = match m.nodes.len() {
            1 => "1 node".to_owned(),
            n => format!("{n} nodes"),
        };
        let mut expected = vec![
            "scontrol show config".to_owned(),
            "sacctmgr show qos (3 QOS)".to_owned(),
            format!("{nodes}, 1 partition"),
            "sacctmgr show assoc (1 with GPU limits)".to_owned(),
        ];
        // Running jobs' QOS lists, where a restart moves them (24.11 to
        // 26.05): the scene's two running jobs each name one QOS.
        if r != "22.05" {
            expected.push("sacct (running jobs, 0 with a QOS list)".to_owned());
        }
        assert_eq!(sources, expected, "{r}");
        assert_eq!(
            site.qos_lists.as_ref().map(Vec::len),
            (r != "22.05").then_some(0),
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
        let names: Vec<&str> = site.nodes.iter().map(|n| n.name.as_str()).collect();
        let want: Vec<&str> = m.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, want, "{r}");
        assert!(
            site.nodes
                .iter()
                .all(|n| n.gpu_types().eq(["a40"]) && n.partitions == ["gpu"]),
            "{r}"
        );
        assert_eq!(
            site.partitions[0].billing_weight("gres/gpu:a40"),
            Some("4.0"),
            "{r}"
        );
        assert_eq!(site.associations.len(), 1, "{r}");
        assert_eq!(site.associations[0].account, m.account, "{r}");
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
        let inputs = site::check_inputs(&read, &path).unwrap_or_else(|e| panic!("{r}: {e}"));
        let findings = inputs.findings(&path.to_string_lossy());
        assert!(findings.is_empty(), "{r}: {findings:?}");
        assert!(!inputs.users.is_empty(), "{r}");
    }
}

/// The recorded scene with slurmdbd down: every `sacctmgr` fails.
struct NoDbd(Recorded);

impl crate::qos::slurm::SlurmRead for NoDbd {
    fn read(
        &self,
        query: &crate::qos::slurm::Query,
    ) -> Result<String, crate::qos::slurm::ReadError> {
        if query.program == "sacctmgr" {
            return Err(crate::qos::slurm::ReadError::new(format!(
                "`{}` failed (exit status: 1): sacctmgr: error: Problem talking to the database: \
                 Connection refused",
                query.shown()
            )));
        }
        self.0.read(query)
    }
}

#[test]
fn without_slurmdbd_why_and_usage_tell_what_slurmctld_knows() {
    for r in RELEASES {
        let m = manifest(r);
        let read = NoDbd(scene(r));
        let report =
            why::report(&read, &m.jobs.qos_grp_gres).unwrap_or_else(|e| panic!("{r}: {e}"));
        assert!(
            report.summary.ends_with(&group_full(&m)),
            "{r}: {}",
            report.summary
        );
        let sources: Vec<&str> = report.unread.iter().map(|u| u.source.as_str()).collect();
        assert_eq!(
            sources,
            ["sacctmgr show qos (each QOS's Preempt list, GraceTime and Flags)"],
            "{r}"
        );
        let usage = usage::report(&read, None, false).unwrap_or_else(|e| panic!("{r}: {e}"));
        assert_eq!(usage.qos.len(), 1, "{r}: {usage:#?}");
        assert_eq!(usage.qos[0].qos, "qos_lafferty", "{r}");
        assert_eq!(usage.qos[0].types, [a40(4, 4)], "{r}");
        let sources: Vec<&str> = usage.unread.iter().map(|u| u.source.as_str()).collect();
        assert_eq!(sources.len(), 2, "{r}: {sources:?}");
        assert!(
            sources[1].starts_with("sacctmgr show assoc"),
            "{r}: {sources:?}"
        );
    }
}

#[test]
fn why_explains_the_reason_it_shows_when_a_later_read_has_none() {
    for r in RELEASES {
        let m = manifest(r);
        let read = Cleared {
            scene: scene(r),
            job_read_kept: true,
        };
        let report =
            why::report(&read, &m.jobs.qos_grp_gres).unwrap_or_else(|e| panic!("{r}: {e}"));
        assert_eq!(report.job.reason, "QOSGrpGRES", "{r}");
        assert!(
            report.summary.ends_with(&group_full(&m)),
            "{r}: {}",
            report.summary
        );
    }
}

#[test]
fn slurmctlds_qos_carry_slurmdbds_preemption() {
    for r in RELEASES {
        let mut unread = Vec::new();
        let all = super::users_qos(&scene(r), &mut unread).unwrap_or_else(|e| panic!("{r}: {e}"));
        assert!(unread.is_empty(), "{r}: {unread:?}");
        let q = |name: &str| {
            all.iter()
                .find(|q| q.name() == name)
                .unwrap_or_else(|| panic!("{r}: no {name}"))
        };
        assert_eq!(
            q("qos_lafferty").record.expected_gpu_limit(),
            Some(4),
            "{r}"
        );
        assert_eq!(q("qos_lafferty").record.preempt, ["lowprio"], "{r}");
        assert_eq!(q("qos_lafferty").priority, Some(100), "{r}");
        assert!(q("qos_lafferty").has_flag("DenyOnLimit"), "{r}");
        assert_eq!(q("lowprio").grace_time, Some(120), "{r}");
        assert_eq!(q("lowprio").preempt_mode.as_deref(), Some("requeue"), "{r}");
        let without =
            super::users_qos(&NoDbd(scene(r)), &mut unread).unwrap_or_else(|e| panic!("{r}: {e}"));
        let lafferty = without.iter().find(|q| q.name() == "qos_lafferty");
        assert_eq!(
            lafferty.map(|q| (q.record.expected_gpu_limit(), q.record.preempt.len())),
            Some((Some(4), 0)),
            "{r}"
        );
    }
}
