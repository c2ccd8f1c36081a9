//! `gpu-qos audit` against real daemons: a correct site passes with no
//! finding at all, and each site with one link of the chain broken fails
//! with exactly that finding; where the printed fix is a `sacctmgr`
//! command, running it makes the audit pass again.
//!
//! The correct site is the suite's cluster. A link an admin breaks with
//! `sacctmgr` is broken on it and mended by the printed fix (the suite's
//! reset puts every QOS back whatever a test did); a site broken in
//! slurm.conf is a cluster of its own (one starts in seconds), differing
//! from the start, as a site would.

use std::process::ExitCode;

use gpushare::qos::audit::{AuditFinding, AuditReport};
use gpushare::qos::check::Severity;

use gpushare::qos::usage::UsageReport;
use gpushare::qos::why::WhyReport;
use testcluster::cluster::{wait_for, GpuSpec, Qos};
use testcluster::time::{Timeout, JOB_END, JOB_LONG, JOB_START, SHORT};
use testcluster::users::TestUser;
use testcluster::{ensure, Cluster, ClusterSpec, Suite, TestResult};

#[path = "audit/releases.rs"]
mod releases;

/// Two priority passes (`PriorityCalcPeriod=1`) and room for a loaded
/// machine: one sid run under load missed 150 s.
const PRIORITY_RANKED: Timeout = Timeout::secs(240);

/// A site where every link holds: the MPS node of the suites (prolog,
/// epilog, SPANK plugin, device cgroup) under two group QOS that may
/// preempt a free `lowprio` with a grace time, DenyOnLimit, GPU billing.
fn correct_site() -> ClusterSpec {
    let node = ClusterSpec::mps_node();
    let group = |name: &str, n: u32| Qos {
        grp_tres: Some(format!("gres/gpu:a40={n}")),
        preempt: vec!["lowprio".into()],
        priority: Some(100),
        flags: Some("DenyOnLimit".into()),
        ..Qos::new(name)
    };
    let mut files: Vec<(String, String)> = node
        .extra_conf_files
        .iter()
        .filter(|(name, _)| name != "gpu_qos.conf")
        .cloned()
        .collect();
    files.push((
        "gpu_qos.conf".into(),
        "QOS=qos_lafferty GPUTypes=a40 GPULimit=4\nQOS=qos_ying_rex GPUTypes=a40 GPULimit=2\n\
         LowPriorityQOS=lowprio\nMaxMPSPerJob=100\n"
            .into(),
    ));
    ClusterSpec {
        qos: vec![
            Qos {
                preempt_mode: Some("requeue".into()),
                grace_time: Some(60),
                usage_factor: Some(0.0),
                priority: Some(0),
                ..Qos::new("lowprio")
            },
            group("qos_lafferty", 4),
            group("qos_ying_rex", 2),
        ],
        extra_conf_files: files,
        partition_options: vec!["TRESBillingWeights=CPU=1.0,GRES/gpu=1.0".into()],
        // At least what gpu-mps config asks for the largest node of any
        // variant of this site (6 GPUs, the h100s added: 230 s), the
        // prolog's worst case (Slurm's 10 s default is a warning).
        conf_overrides: vec![("BatchStartTimeout".into(), "240".into())],
        ..node
    }
}

fn with_conf(key: &str, value: &str) -> ClusterSpec {
    let mut spec = correct_site();
    spec.conf_overrides.push((key.into(), value.into()));
    spec
}

/// Breaks one QOS link as an admin would (`sacctmgr modify qos NAME set
/// SETTING`); the suite's reset restores it.
fn break_qos(c: &Cluster, name: &str, setting: &str) -> TestResult {
    c.run_ok("sacctmgr", &["-i", "modify", "qos", name, "set", setting])
        .map(drop)
}

fn main() -> ExitCode {
    let mut suite = Suite::new(correct_site())
        .reset(|c| {
            c.cancel_all()?;
            correct_site().qos.iter().try_for_each(|q| c.set_qos(q))
        })
        .test("correct_site_has_no_finding", clean)
        .smoke()
        .test(
            "group_qos_that_cannot_preempt_lowprio_is_fixed_by_the_printed_command",
            cannot_preempt,
        )
        .test(
            "lowprio_without_grace_time_is_fixed_by_the_printed_command",
            no_grace,
        )
        .test(
            "group_qos_without_deny_on_limit_is_fixed_by_the_printed_command",
            deny_on_limit,
        )
        .test(
            "slurm_conf_is_read_when_slurmctld_does_not_answer",
            fallback,
        )
        .test(
            "usage_tells_a_user_why_the_full_group_waits",
            usage_when_full,
        )
        .smoke()
        .test(
            "why_tells_a_user_which_preempted_job_they_wait_for_and_until_when",
            why_preempted,
        )
        .test(
            "usage_and_why_go_on_without_slurmdbd_and_admin_commands_say_whose_they_are",
            without_slurmdbd,
        )
        .test_on(
            "why_names_the_fair_share_that_puts_another_users_job_ahead",
            with_conf("PriorityCalcPeriod", "1"),
            why_fair_share,
        )
        .test_on(
            "the_suites_example_site_has_no_qos_error",
            ClusterSpec::example_site(),
            example_site,
        )
        .test_on(
            "priority_periods_left_at_defaults_and_gpu_types_billed_alike_are_noted",
            {
                // a40 and h100 on the node, both billed GRES/gpu=1.0;
                // slurm.conf without the decay or the maximum age.
                let mut spec = with_conf("PriorityDecayHalfLife", "");
                spec.conf_overrides
                    .push(("PriorityMaxAge".into(), String::new()));
                spec.gpus.push(GpuSpec {
                    gpu_type: "h100".into(),
                    count: 1,
                });
                // The h100 held whole, as gpu-mps config --whole writes it.
                spec.unshared_mps_lines = true;
                spec
            },
            priority_defaults,
        )
        .test_on(
            "a_gpu_held_whole_without_an_mps_line_is_a_warning",
            {
                // An h100 held whole beside the shared a40s, with no mps
                // line of its own (Slurm then stacks the a40s' shares).
                let mut spec = correct_site();
                spec.gpus.push(GpuSpec {
                    gpu_type: "h100".into(),
                    count: 1,
                });
                spec
            },
            shares_stack,
        )
        .test_on(
            "enforce_without_limits_and_qos_is_an_error",
            with_conf("AccountingStorageEnforce", "associations"),
            enforce,
        )
        .test_on(
            "untracked_gpu_type_is_an_error",
            {
                let mut spec = with_conf("AccountingStorageTRES", "gres/gpu,gres/gpu:a40,gres/mps");
                spec.gpus.push(GpuSpec {
                    gpu_type: "h100".into(),
                    count: 1,
                });
                spec.unshared_mps_lines = true;
                spec
            },
            untracked,
        )
        .test_on(
            "zero_qos_priority_weight_is_a_warning",
            with_conf("PriorityWeightQOS", "0"),
            qos_weight,
        )
        .test_on(
            "batch_start_timeout_below_the_prologs_worst_case_is_a_warning",
            with_conf("BatchStartTimeout", ""),
            batch_start_short,
        )
        .test_on(
            "requeue_mode_with_job_requeue_off_is_noted",
            with_conf("JobRequeue", "0"),
            job_requeue,
        )
        .test_on(
            "preempt_type_none_is_an_error",
            {
                // Slurm itself refuses preempt/none with PreemptMode=REQUEUE.
                let mut spec = with_conf("PreemptType", "preempt/none");
                spec.conf_overrides
                    .push(("PreemptMode".into(), "OFF".into()));
                spec
            },
            preempt_type,
        );
    // 22.05 has no Dirs= and refuses a BasePath under /tmp, where the
    // cluster lies.
    if testcluster::cluster::slurm_release() >= (23, 2) {
        suite = suite.test_on(
            "job_namespaces_hiding_the_mps_pipes_are_an_error",
            under_job_container(),
            pipes_hidden,
        );
    }
    // slurmd's connection manager and its limit exist from 25.05.
    if testcluster::cluster::slurm_release() >= (25, 5) {
        suite = suite.test_on(
            "an_mps_node_with_more_jobs_than_slurmds_connections_is_a_warning",
            // The harness's own parameter kept (its nodes claim more CPUs
            // than this machine has).
            with_conf(
                "SlurmdParameters",
                "config_overrides,conmgr_max_connections=8",
            ),
            releases::slurmd_connections,
        );
    }
    // QOS lists (`--qos=a,b`) exist from 24.11.
    if testcluster::cluster::slurm_release() >= (24, 11) {
        suite = suite.test(
            "a_running_job_with_a_qos_list_is_a_warning_where_a_restart_moves_it",
            releases::qos_list_running,
        );
    }
    // namespace/linux (25.11): namespace.yaml's dirs:, from 26.05 its
    // dir_confs: entries.
    if testcluster::cluster::slurm_release() >= (25, 11) {
        suite = suite.test_on(
            "namespace_linux_hiding_the_mps_pipes_is_an_error",
            correct_site().hiding_run_in_a_namespace(dir_confs()),
            pipes_hidden_by_namespace_yaml,
        );
    }
    suite.run()
}

/// Runs `gpu-qos audit --json ARGS` as root against the cluster; the
/// report and the exit status, which must agree.
fn audit(c: &Cluster, args: &[&str]) -> Result<(AuditReport, i32), String> {
    let bin = testcluster::cluster::build_dir()?.join("gpu-qos");
    let out = c
        .command(&bin.to_string_lossy())
        .arg("audit")
        .arg("--json")
        .args(args)
        .output()
        .map_err(|e| {
            format!(
                "{}: {e} (cargo build -p gpushare-admin first)",
                bin.display()
            )
        })?;
    let code = out.status.code().unwrap_or(-1);
    let report: AuditReport = serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "not an audit report ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    ensure(
        i32::from(report.exit) == code,
        format!("exit status {code}, report says {}", report.exit),
    )?;
    Ok((report, code))
}

fn listing(findings: &[AuditFinding]) -> String {
    findings
        .iter()
        .map(|f| {
            format!(
                "\n  {} {} [{}] {}: {}",
                f.severity, f.kind, f.object, f.what, f.fix
            )
        })
        .collect()
}

/// The audit fails at `fail_on` with exactly one finding, of `kind` and
/// `severity`; returns it.
fn exactly(
    c: &Cluster,
    fail_on: &str,
    severity: Severity,
    kind: &str,
) -> Result<AuditFinding, String> {
    let (report, code) = audit(c, &["--fail-on", fail_on])?;
    let found = &report.findings;
    ensure(
        code == 1 && found.len() == 1 && found[0].kind == kind && found[0].severity == severity,
        format!(
            "expected exit 1 with only {severity} {kind} at --fail-on {fail_on}, got exit {code}:{}",
            listing(found)
        ),
    )?;
    Ok(found[0].clone())
}

/// Nothing at all, even at `--fail-on note`.
fn passes_clean(c: &Cluster) -> TestResult {
    let (report, code) = audit(c, &["--fail-on", "note"])?;
    ensure(
        code == 0 && report.findings.is_empty(),
        format!(
            "expected a clean audit, got exit {code}:{}",
            listing(&report.findings)
        ),
    )
}

/// Runs the finding's fix, which must be one `sacctmgr` command line.
fn apply(c: &Cluster, finding: &AuditFinding) -> TestResult {
    ensure(
        finding.fix.starts_with("sacctmgr -i "),
        format!("not a sacctmgr command: {:?}", finding.fix),
    )?;
    c.run_ok("sh", &["-c", &finding.fix]).map(drop)
}

fn clean(c: &mut Cluster) -> TestResult {
    passes_clean(c)?;
    // The table for people says the same.
    let bin = testcluster::cluster::build_dir()?.join("gpu-qos");
    let table = c.run_ok(&bin.to_string_lossy(), &["audit"])?;
    ensure(
        table.starts_with("audit passed (--fail-on error): 0 errors, 0 warnings, 0 notes; read scontrol show config, sacctmgr show qos (4 QOS), 1 node, 1 partition, "),
        format!("table: {table}"),
    )?;
    // The users' table and the story come from the same accounting.
    let md = c.run_ok(&bin.to_string_lossy(), &["audit", "--markdown"])?;
    ensure(
        md.lines()
            .any(|l| l == "| qos_lafferty | 4 a40 | lowprio | – | – | 100 | 1 |")
            && md.lines().any(|l| {
                l == "| lowprio | no GPU limit | – | qos_lafferty, qos_ying_rex | requeued after a grace time of 1 min | 0 | 0 |"
            }),
        format!("markdown:\n{md}"),
    )?;
    let story = c.run_ok(&bin.to_string_lossy(), &["audit", "--explain"])?;
    ensure(
        story.contains("- qos_ying_rex: at most 2 a40 at a time; jobs must name the type")
            && story.contains(
                "- gpu: per GPU asked by type: a40 1; per GPU asked without a type: 1; per CPU: 1.",
            ),
        format!("explain:\n{story}"),
    )
}

/// The gpu_qos suite's site has no QOS error; it offers mps without
/// gpushare's node half, and the audit says exactly that.
fn example_site(c: &mut Cluster) -> TestResult {
    let (report, code) = audit(c, &[])?;
    let mut errors: Vec<&str> = report
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| f.kind.as_str())
        .collect();
    errors.sort();
    ensure(
        code == 1
            && errors
                == [
                    "devices_unconstrained",
                    "mps_epilog_missing",
                    "mps_prolog_missing",
                    "spank_gpu_mps_missing",
                ],
        format!("exit {code}:{}", listing(&report.findings)),
    )?;
    // Nine QOS read; the QOS part is sound (DenyOnLimit is a note), but
    // for qos_saxena's a100, which this cluster's node does not carry:
    // its limit counts no job here.
    let saxena = "QOS qos_saxena limits gres/gpu:a100, a type no node's Gres carries (nodes \
                  have a40, h100)";
    ensure(
        report
            .sources
            .iter()
            .any(|s| s == "sacctmgr show qos (9 QOS)")
            && report
                .findings
                .iter()
                .filter(|f| f.object.starts_with("QOS "))
                .all(|f| {
                    f.kind == "no_deny_on_limit"
                        || (f.kind == "grp_tres_type_on_no_node" && f.what == saxena)
                })
            && report
                .findings
                .iter()
                .any(|f| f.kind == "grp_tres_type_on_no_node" && f.object == "QOS qos_saxena"),
        format!("{:?}{}", report.sources, listing(&report.findings)),
    )
}

/// With slurmctld unreachable the audit reads slurm.conf (and says so),
/// and finds the same: nothing.
fn fallback(c: &mut Cluster) -> TestResult {
    let conf = std::fs::read_to_string(c.slurm_conf()).map_err(|e| e.to_string())?;
    let away: String = conf
        .lines()
        .map(|l| {
            if l.starts_with("SlurmctldPort=") {
                "SlurmctldPort=1\n".to_owned()
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let path = c.slurm_conf().with_file_name("slurm-away.conf");
    std::fs::write(&path, away).map_err(|e| e.to_string())?;
    let bin = testcluster::cluster::build_dir()?.join("gpu-qos");
    let out = c
        .command(&bin.to_string_lossy())
        .args(["audit", "--json", "--fail-on", "note"])
        .env("SLURM_CONF", &path)
        .output()
        .map_err(|e| e.to_string())?;
    let report: AuditReport = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&out.stderr)))?;
    ensure(
        out.status.code() == Some(0)
            && report.findings.is_empty()
            && report.sources.first().is_some_and(|s| {
                s.starts_with(&format!("{} (scontrol show config: ", path.display()))
            }),
        format!(
            "exit {:?}, {:?}{}",
            out.status.code(),
            report.sources,
            listing(&report.findings)
        ),
    )
}

/// The correct site under `job_container/tmpfs` whose private
/// directories hold the node's `StateDir` (`{cluster}/run/gpu-mps` in the
/// gpu_mps.conf beside slurm.conf): `Dirs={cluster}/run,/dev/shm` (23.02
/// and later). slurmctld alone is asked; no job runs in a container.
fn under_job_container() -> ClusterSpec {
    correct_site().hiding_run_in_a_job_container()
}

fn pipes_hidden(c: &mut Cluster) -> TestResult {
    let f = exactly(
        c,
        "error",
        Severity::Error,
        "mps_pipes_hidden_by_job_namespaces",
    )?;
    ensure(
        f.what
            .starts_with("node node1 offers mps under job namespaces (job_container/tmpfs)")
            && f.what
                .contains("its job_container.conf gives each job its own /")
            && f.what.contains("/run, which holds the MPS pipes under /")
            && f.what
                .contains("/run/gpu-mps-mps (StateDir= of the gpu_mps.conf beside slurm.conf)")
            && f.object == "job_container.conf"
            && f.fix.starts_with("StateDir="),
        format!("{f:?}"),
    )
}

/// Whether this Slurm reads namespace.yaml's `dir_confs:` (26.05).
fn dir_confs() -> bool {
    testcluster::cluster::slurm_release() >= (26, 5)
}

fn pipes_hidden_by_namespace_yaml(c: &mut Cluster) -> TestResult {
    // slurmd took the plugin and its file: Slurm's own record of it.
    let config = c.run_ok("scontrol", &["show", "config"])?;
    ensure(
        config
            .lines()
            .any(|l| l.starts_with("NamespaceType") && l.contains("namespace/linux")),
        format!("slurmctld does not run namespace/linux: {config}"),
    )?;
    let f = exactly(
        c,
        "error",
        Severity::Error,
        "mps_pipes_hidden_by_job_namespaces",
    )?;
    let key = if dir_confs() { "dir_confs:" } else { "dirs:" };
    ensure(
        f.what
            .starts_with("node node1 offers mps under job namespaces (namespace/linux)")
            && f.what
                .contains("its namespace.yaml gives each job its own /")
            && f.what.contains("/run, which holds the MPS pipes under /")
            && f.object == "namespace.yaml"
            && f.fix
                .ends_with(&format!("/run out of {key} in namespace.yaml")),
        format!("{f:?}"),
    )
}

fn enforce(c: &mut Cluster) -> TestResult {
    let f = exactly(c, "error", Severity::Error, "enforce_incomplete")?;
    ensure(
        f.what == "AccountingStorageEnforce is associations, without limits and qos"
            && f.fix == "AccountingStorageEnforce=associations,limits,qos (then restart slurmctld)",
        format!("{f:?}"),
    )
}

fn untracked(c: &mut Cluster) -> TestResult {
    let f = exactly(c, "error", Severity::Error, "tres_untracked")?;
    ensure(
        f.what == "AccountingStorageTRES does not track gres/gpu:h100 (Gres of node node1)"
            // 24.11 adds gres/gpumem and gres/gpuutil to the list itself.
            && f.fix.contains(",gres/gpu,gres/gpu:a40,")
            && f.fix.ends_with(",gres/mps,gres/gpu:h100 (then restart slurmctld)"),
        format!("{f:?}"),
    )
}

fn shares_stack(c: &mut Cluster) -> TestResult {
    let (report, code) = audit(c, &["--fail-on", "warning"])?;
    let stack: Vec<&AuditFinding> = report
        .findings
        .iter()
        .filter(|f| f.kind == "mps_shares_stack")
        .collect();
    if !testcluster::cluster::slurm_places_shares() {
        // gpushare places (a node-wide Count): Slurm stacks nothing.
        return ensure(stack.is_empty(), listing(&report.findings));
    }
    ensure(
        code == 1
            && stack.len() == 1
            && stack[0].severity == Severity::Warning
            && stack[0].what.starts_with("node node1 books mps per GPU")
            && stack[0].fix.contains("Name=mps Count=0 File=")
            && stack[0].fix.contains("/nvidia4 Flags=all_sharing"),
        format!("exit {code}:{}", listing(&report.findings)),
    )
}

fn qos_weight(c: &mut Cluster) -> TestResult {
    let (report, code) = audit(c, &[])?;
    ensure(
        code == 0,
        format!(
            "a warning failed the default audit:{}",
            listing(&report.findings)
        ),
    )?;
    exactly(c, "warning", Severity::Warning, "priority_weight_qos_zero").map(drop)
}

/// slurm.conf without `BatchStartTimeout`: slurmctld reports Slurm's
/// 10 s, below what gpushare's prolog may take on the node's 4 GPUs.
fn batch_start_short(c: &mut Cluster) -> TestResult {
    let config = c.run_ok("scontrol", &["show", "config"])?;
    ensure(
        config.lines().any(|l| {
            l.split_whitespace().collect::<Vec<_>>() == ["BatchStartTimeout", "=", "10", "sec"]
        }),
        format!("slurmctld's BatchStartTimeout is not Slurm's default:\n{config}"),
    )?;
    let found = exactly(c, "warning", Severity::Warning, "batch_start_timeout_short")?;
    ensure(
        found
            .what
            .contains("BatchStartTimeout is 10 s (Slurm's default), below the 190 s")
            && found.fix.starts_with("BatchStartTimeout=190 "),
        listing(&[found]),
    )
}

fn job_requeue(c: &mut Cluster) -> TestResult {
    // gpu_qos makes lowprio jobs requeueable, so this is a note.
    let (_, code) = audit(c, &["--fail-on", "warning"])?;
    ensure(code == 0, "a note failed the audit at --fail-on warning")?;
    let f = exactly(c, "note", Severity::Note, "job_requeue_off")?;
    ensure(
        f.fix == "JobRequeue=1 (then scontrol reconfigure)",
        format!("{f:?}"),
    )
}

fn preempt_type(c: &mut Cluster) -> TestResult {
    let f = exactly(c, "error", Severity::Error, "preempt_type")?;
    ensure(
        f.what == "PreemptType is preempt/none, not preempt/qos",
        format!("{f:?}"),
    )
}

fn cannot_preempt(c: &mut Cluster) -> TestResult {
    break_qos(c, "qos_lafferty", "Preempt-=lowprio")?;
    let f = exactly(c, "error", Severity::Error, "group_cannot_preempt")?;
    ensure(
        f.object == "QOS qos_lafferty"
            && f.fix == "sacctmgr -i modify qos qos_lafferty set Preempt+=lowprio",
        format!("{f:?}"),
    )?;
    apply(c, &f)?;
    passes_clean(c)
}

fn no_grace(c: &mut Cluster) -> TestResult {
    break_qos(c, "lowprio", "GraceTime=0")?;
    let f = exactly(c, "warning", Severity::Warning, "no_grace_time")?;
    apply(c, &f)?;
    passes_clean(c)
}

fn deny_on_limit(c: &mut Cluster) -> TestResult {
    break_qos(c, "qos_ying_rex", "Flags-=DenyOnLimit")?;
    let f = exactly(c, "note", Severity::Note, "no_deny_on_limit")?;
    ensure(f.object == "QOS qos_ying_rex", format!("{f:?}"))?;
    apply(c, &f)?;
    passes_clean(c)
}

/// Slurm's defaults for the two priority periods and one billing weight
/// for both GPU types: three notes, the audit still passes; once the
/// partition weighs h100 above a40, the users' page (as a user reads it)
/// states the site's own figures.
fn priority_defaults(c: &mut Cluster) -> TestResult {
    let (report, code) = audit(c, &[])?;
    let kinds: Vec<(&str, Severity)> = report
        .findings
        .iter()
        .map(|f| (f.kind.as_str(), f.severity))
        .collect();
    ensure(
        code == 0
            && kinds
                == [
                    ("decay_half_life_default", Severity::Note),
                    ("max_age_default", Severity::Note),
                    ("billing_types_alike", Severity::Note),
                ],
        format!("exit {code}:{}", listing(&report.findings)),
    )?;
    let f = &report.findings;
    ensure(
        f[0].what
            == "PriorityDecayHalfLife is not set in slurm.conf: Slurm's default 7-00:00:00 applies"
            && f[2].what
                == "gpu bills its GPU types a40, h100 alike (1 per GPU; no GRES/gpu:TYPE weight tells them apart)",
        listing(f),
    )?;
    c.run_ok(
        "scontrol",
        &[
            "update",
            "PartitionName=gpu",
            "TRESBillingWeights=CPU=1.0,GRES/gpu=1.0,GRES/gpu:h100=1.5",
        ],
    )?;
    let user = member(c, "gpushare_carol")?;
    let bin = testcluster::cluster::build_dir()?.join("gpu-qos");
    let page = user.run_ok(
        c,
        None,
        &bin.to_string_lossy(),
        &["audit", "--explain", "--markdown"],
    )?;
    for line in [
        "| fair share | 1000 | little recent GPU use by you and your account, against your shares |",
        "| age | 100 | waiting: it grows to 1 over 7 days (PriorityMaxAge) |",
        "| gpu | h100 | 2.5 | |",
        "| gpu | | | an h100-hour counts 2.5 a40-hours |",
        "| qos_lafferty | 4 a40 | lowprio | – | – | 100 | 1 |",
    ] {
        ensure(
            page.lines().any(|l| l == line),
            format!("{line:?} is not a line of the page:\n{page}"),
        )?;
    }
    ensure(
        page.contains("decays with a half-life of 7 days (PriorityDecayHalfLife)")
            && page.contains(
                "a job of qos_lafferty or qos_ying_rex that needs GPUs held by lowprio jobs waits while they are requeued after a grace time of 1 min: up to 1 min",
            ),
        format!("page:\n{page}"),
    )?;
    // The partition's weights now tell the types apart.
    let (report, _) = audit(c, &[])?;
    ensure(
        !report
            .findings
            .iter()
            .any(|f| f.kind == "billing_types_alike"),
        listing(&report.findings),
    )
}

/// A member of the group, allowed its QOS; returns the user.
fn member(c: &Cluster, name: &str) -> Result<TestUser, String> {
    let user = TestUser::create(c, name)?;
    user.allow_qos(c, &["normal", "lowprio", "qos_lafferty"])?;
    Ok(user)
}

/// `sbatch` as `user` under qos_lafferty, retried while slurmctld has not
/// yet learnt the user's new QOS from slurmdbd.
fn submit_as(c: &Cluster, user: &TestUser, gpus: u32) -> Result<u32, String> {
    let gres = format!("--gres=gpu:a40:{gpus}");
    user.sbatch(
        c,
        &[
            "--qos=qos_lafferty",
            &gres,
            "--output=/dev/null",
            "--wrap=sleep 300",
        ],
    )
}

/// The group's 4 a40 held by two members' jobs (`a`, alice's, and `b`,
/// bob's), alice's third job waiting for the group's limit.
struct FullGroup {
    alice: TestUser,
    bob: TestUser,
    a: u32,
    b: u32,
    waiting: u32,
}

fn full_group(c: &mut Cluster) -> Result<FullGroup, String> {
    let alice = member(c, "gpushare_alice")?;
    let bob = member(c, "gpushare_bob")?;
    let a = submit_as(c, &alice, 2)?;
    let b = submit_as(c, &bob, 2)?;
    for id in [a, b] {
        c.wait_job_state(id, &["RUNNING"], JOB_START)?;
    }
    let waiting = submit_as(c, &alice, 1)?;
    c.wait_job_reason(waiting, "QOSGrpGRES", SHORT)?;
    Ok(FullGroup {
        alice,
        bob,
        a,
        b,
        waiting,
    })
}

fn usage_when_full(c: &mut Cluster) -> TestResult {
    let FullGroup {
        alice,
        bob: _,
        a,
        b,
        waiting,
    } = full_group(c)?;
    let bin = testcluster::cluster::build_dir()?.join("gpu-qos");
    let bin = bin.to_string_lossy();
    let why = format!(
        "qos_lafferty's 4 a40 are all held: jobs {a} (gpushare_alice, 2), {b} (gpushare_bob, 2)"
    );
    // Slurm clears a pending job's reason while its scheduler looks at it
    // (seen on 24.11 and 26.05: `None` between two QOSGrpGRES); gpu-qos
    // settles it against the group's use, so one read gives the reason.
    let json = alice.run_ok(c, None, &bin, &["usage", "--json"])?;
    let report: UsageReport = serde_json::from_str(&json).map_err(|e| format!("{e}: {json}"))?;
    let q = report.qos.first();
    ensure(
        report.user == "gpushare_alice"
            // Read through assoc_mgr and per-user squeue, not every job.
            && report.unread.is_empty()
            && report.qos.len() == 1
            && q.is_some_and(|q| {
                q.qos == "qos_lafferty"
                    && q.types.len() == 1
                    && (q.types[0].held, q.types[0].limit) == (4, 4)
                    && q.running.len() == 2
                    && q.pending.len() == 1
                    && q.pending[0].job.id == waiting.to_string()
                    && q.pending[0].why == why
            }),
        format!("expected {why:?} in {report:?}"),
    )?;
    let want = format!("  pending  {waiting} (gpushare_alice, 1 a40): {why}\n");
    let text = alice.run_ok(c, None, &bin, &["usage"])?;
    ensure(
        text.starts_with("qos_lafferty: 4 of 4 a40 held\n") && text.contains(&want),
        format!("text:\n{text}"),
    )?;
    // --explain: each of her pending jobs as `gpu-qos why` tells it, one
    // of them held by her (a reason usage alone does not explain).
    let held = submit_as(c, &alice, 1)?;
    alice.run_ok(c, None, "scontrol", &["hold", &held.to_string()])?;
    let summary = format!(
        "job {waiting} (gpushare_alice, QOS qos_lafferty, 1 a40, partition gpu) waits for its \
         group's GPU limit: {why}"
    );
    let mut explained = None;
    let told = wait_for(
        "usage --explain to explain both pending jobs",
        SHORT,
        || {
            let json = alice
                .run_ok(c, None, &bin, &["usage", "--explain", "--json"])
                .ok()?;
            let r: UsageReport = serde_json::from_str(&json).ok()?;
            let found = r
                .explained
                .iter()
                .map(|w| w.summary.clone())
                .collect::<Vec<_>>();
            explained = Some(found.clone());
            (found.len() == 2
                && found.contains(&summary)
                && found.iter().any(|s| {
                    s.starts_with(&format!("job {held} ")) && s.ends_with("is held by its user")
                }))
            .then_some(())
        },
    );
    ensure(
        told.is_ok(),
        format!("want {summary:?} and job {held} held, got {explained:?}"),
    )?;
    let text = alice.run_ok(c, None, &bin, &["usage", "--explain"])?;
    ensure(
        text.contains("\nYour pending jobs, explained (gpu-qos why):\n")
            && text.contains(&format!("    more: scontrol release {held}\n")),
        format!("text:\n{text}"),
    )?;
    c.cancel_all()
}

/// A group job that preempts a lowprio job waits out the lowprio QOS's
/// GraceTime (60 s here): `gpu-qos why`, run by the group job's user,
/// names the lowprio job, when Slurm signalled it and when it ends (its
/// EndTime: PreemptTime + GraceTime), with the priority figures sprio gives.
fn why_preempted(c: &mut Cluster) -> TestResult {
    let alice = member(c, "gpushare_alice")?;
    let bob = member(c, "gpushare_bob")?;
    // The lowprio job ignores SIGTERM (so do its children), as a job that
    // checkpoints on it would take its time: it runs to the grace's end.
    let victim = {
        let args = [
            "--parsable",
            "--qos=lowprio",
            "--gres=gpu:a40:4",
            "--output=/dev/null",
            "--wrap=trap '' TERM; sleep 300",
        ];
        wait_for("bob's lowprio job to be accepted", SHORT, || {
            bob.run_ok(c, None, "sbatch", &args)
                .ok()?
                .trim()
                .split(';')
                .next()?
                .parse::<u32>()
                .ok()
        })?
    };
    c.wait_job_state(victim, &["RUNNING"], JOB_START)?;
    let waiting = submit_as(c, &alice, 2)?;
    let at = wait_for(
        "Slurm to preempt the lowprio job for the group job",
        SHORT,
        || {
            let v = c.job(victim).ok()?;
            v.get("PreemptTime")
                .filter(|t| t.len() == 19)
                .map(str::to_owned)
        },
    )?;
    // Slurm ends it GraceTime after signalling it.
    let end = gpushare::shared::calendar::add_seconds(&at, 60).ok_or("PreemptTime unread")?;
    let bin = testcluster::cluster::build_dir()?.join("gpu-qos");
    let bin = bin.to_string_lossy();
    let id = waiting.to_string();
    let json = alice.run_ok(c, None, &bin, &["why", &id, "--json"])?;
    let report: WhyReport = serde_json::from_str(&json).map_err(|e| format!("{e}: {json}"))?;
    let want_summary = format!(
        "job {id} (gpushare_alice, QOS qos_lafferty, 2 a40, partition {}) waits for 1 preempted \
         job to end: it should start by {end}",
        report.job.partition
    );
    let want_detail = format!(
        "lowprio job {victim} (gpushare_bob, 4 a40) on {} was signalled at {at}; lowprio's \
         GraceTime is 1 min: it ends by {end}",
        c.node_names().first().cloned().unwrap_or_default()
    );
    ensure(
        report.summary == want_summary && report.details.first() == Some(&want_detail),
        format!("want {want_summary:?} and {want_detail:?}, got {report:#?}"),
    )?;
    // The figures are sprio's for the same job (its age factor may have
    // grown between the two reads, and its priority with it).
    let sprio = c.run_ok("sprio", &["-h", "-j", &id, "-o", "%Y|%Q|%F|%A|"])?;
    let f = report.factors.clone().ok_or("no factors in the report")?;
    let theirs: Vec<f64> = sprio
        .trim()
        .split('|')
        .filter_map(|x| x.trim().parse().ok())
        .collect();
    ensure(
        theirs.len() == 4
            && theirs[1] == f.qos
            && theirs[2] == f.fairshare
            && (theirs[0] - theirs[3] - (f.priority - f.age)).abs() < 1.0,
        format!("report's factors {f:?} against sprio's {sprio:?}"),
    )?;
    let text = alice.run_ok(c, None, &bin, &["why", &id])?;
    ensure(
        text.starts_with(&format!("{want_summary}\n  {want_detail}\n")),
        format!("text:\n{text}"),
    )?;
    // What it said comes true: the group job starts once the lowprio job's
    // grace time is over (within a few scheduler passes of it).
    c.wait_job_state(waiting, &["RUNNING"], JOB_LONG)?;
    let started = c
        .job(waiting)?
        .get("StartTime")
        .map(str::to_owned)
        .unwrap_or_default();
    let late = gpushare::shared::calendar::add_seconds(&end, 20).unwrap_or_default();
    ensure(
        started >= end && started <= late,
        format!("predicted start {end}, started {started}"),
    )?;
    // The lowprio job was requeued: its user is told so, with the run
    // accounting recorded and what became of its output.
    let victim_id = victim.to_string();
    let mut last = String::new();
    let told = wait_for(
        "bob's requeued job to be explained with its preempted run",
        JOB_LONG,
        || {
            last = bob
                .run_ok(c, None, &bin, &["why", &victim_id, "--json"])
                .ok()?;
            let r: WhyReport = serde_json::from_str(&last).ok()?;
            let runs: Vec<&String> = r.details.iter().filter(|d| d.starts_with("ran ")).collect();
            (r.job.restarts == 1
                && r.details.first().map(String::as_str)
                    == Some("it was requeued 1 time (jobs of qos_lafferty, qos_ying_rex may preempt lowprio jobs)")
                && runs.len() == 1
                && runs[0].ends_with(": PREEMPTED")
                && r.details.iter().any(|d| d.contains("--open-mode=append")))
            .then_some(r)
        },
    );
    ensure(told.is_ok(), format!("why {victim} as bob: {last}"))?;
    // Not a job id: a clear error, exit 2.
    let bad = alice.run(c, None, &bin, &["why", "12;rm"])?;
    ensure(
        bad.status.code() == Some(2)
            && String::from_utf8_lossy(&bad.stderr).contains("is not a job id"),
        format!("why 12;rm: {bad:?}"),
    )?;
    c.cancel_all()
}

/// The users' commands read slurmctld for what changes with the jobs and
/// keep slurmdbd's answers a while: with slurmdbd stopped, `why` uses a
/// kept answer and says how old it is, and `usage` without any kept
/// answer still shows the group from slurmctld's association cache and
/// names what it could not read. An admins' command run by a user says
/// first that it is one.
fn without_slurmdbd(c: &mut Cluster) -> TestResult {
    let FullGroup {
        alice,
        bob,
        a,
        b,
        waiting,
    } = full_group(c)?;
    let bin = testcluster::cluster::build_dir()?.join("gpu-qos");
    let bin = bin.to_string_lossy();
    let id = waiting.to_string();
    let audit = alice.run(c, None, &bin, &["audit"])?;
    let err = String::from_utf8_lossy(&audit.stderr).into_owned();
    ensure(
        err.starts_with(&format!(
            "gpu-qos: gpu-qos audit is an admins' command, run here by uid {}, neither root nor \
             SlurmUser",
            alice.uid
        )),
        format!("gpu-qos audit as a user: {err}"),
    )?;
    let root_audit = c.run(&bin, &["audit"])?;
    let root_err = String::from_utf8_lossy(&root_audit.stderr).into_owned();
    ensure(
        !root_err.contains("admins' command"),
        format!("gpu-qos audit as root: {root_err}"),
    )?;
    let group = format!(
        "qos_lafferty's 4 a40 are all held: jobs {a} (gpushare_alice, 2), {b} (gpushare_bob, 2)"
    );
    // The caller's own jobs come first.
    let group_for_bob = format!(
        "qos_lafferty's 4 a40 are all held: jobs {b} (gpushare_bob, 2), {a} (gpushare_alice, 2)"
    );
    // One read gives the group's reason, whenever Slurm's scheduler runs.
    let why = |c: &Cluster, user: &TestUser| -> Result<WhyReport, String> {
        let r = user.why_now(c, waiting)?;
        ensure(
            r.job.reason == "QOSGrpGRES",
            format!("why as {}: {r:#?}", user.name),
        )?;
        Ok(r)
    };
    let before = why(c, &alice)?;
    ensure(
        before.summary.ends_with(&group) && before.unread.is_empty(),
        format!("why with slurmdbd up: {before:#?}"),
    )?;
    // Alice's kept answers made older than the cache keeps them fresh.
    let kept = alice.home.join(".cache/gpushare");
    let files: Vec<String> = std::fs::read_dir(&kept)
        .map_err(|e| format!("{}: {e}", kept.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path().to_string_lossy().into_owned())
        .collect();
    ensure(
        files.iter().any(|f| f.ends_with("-sacctmgr-show-qos.txt")),
        format!("alice's cache holds {files:?}"),
    )?;
    for f in &files {
        c.run_ok("touch", &["-d", "10 minutes ago", f])?;
    }
    let _ = std::fs::remove_dir_all(bob.home.join(".cache"));
    c.stop_slurmdbd();
    let told = (|| -> TestResult {
        let after = why(c, &alice)?;
        ensure(
            after.summary == before.summary
                && after.unread.iter().any(|u| {
                    u.source.starts_with("sacctmgr ")
                        && u.reason.ends_with("its answer of 10 min ago is used")
                }),
            format!("why with slurmdbd stopped and a kept answer: {after:#?}"),
        )?;
        let json = bob.run_ok(c, None, &bin, &["usage", "--json"])?;
        let usage: UsageReport = serde_json::from_str(&json).map_err(|e| format!("{e}: {json}"))?;
        let sources: Vec<&str> = usage.unread.iter().map(|u| u.source.as_str()).collect();
        ensure(
            usage.qos.len() == 1
                && usage.qos[0].qos == "qos_lafferty"
                && usage.qos[0]
                    .types
                    .iter()
                    .map(|t| (t.limit, t.held))
                    .eq([(4, 4)])
                && usage.qos[0]
                    .pending
                    .iter()
                    .any(|p| p.job.id == id && p.why == group_for_bob)
                && sources.iter().any(|s| s.starts_with("sacctmgr show qos"))
                && sources.iter().any(|s| s.starts_with("sacctmgr show assoc")),
            format!("usage with slurmdbd stopped and nothing kept: {usage:#?}"),
        )?;
        let cold = why(c, &bob)?;
        ensure(
            cold.summary.ends_with(&group_for_bob),
            format!("why with slurmdbd stopped and nothing kept: {cold:#?}"),
        )
    })();
    c.start_slurmdbd_again()?;
    told?;
    c.cancel_all()
}

/// Two users of one account; one has used the GPUs, the other not. Both
/// wait behind a job holding every GPU; the one with usage is behind the
/// other (Reason=Priority), and `gpu-qos why`, as that user, says so and
/// names fair share with sprio's own figures.
fn why_fair_share(c: &mut Cluster) -> TestResult {
    let alice = member(c, "gpushare_alice")?;
    let bob = member(c, "gpushare_bob")?;
    let sbatch = |user: &TestUser, wrap: &str| -> Result<u32, String> {
        let wrap = format!("--wrap={wrap}");
        user.sbatch(c, &["--gres=gpu:a40:4", "--output=/dev/null", &wrap])
    };
    // alice uses the node's 4 GPUs for a while.
    let used = sbatch(&alice, "sleep 8")?;
    c.wait_job_state(used, &["COMPLETED"], JOB_END)?;
    let blocker = c.sbatch_ok(&["--gres=gpu:a40:4", "--output=/dev/null", "--wrap=sleep 300"])?;
    c.wait_job_state(blocker, &["RUNNING"], JOB_START)?;
    let a = sbatch(&alice, "sleep 1")?;
    let b = sbatch(&bob, "sleep 1")?;
    let (ida, idb) = (a.to_string(), b.to_string());
    // The next priority pass (PriorityCalcPeriod, 1 min) counts alice's
    // usage and ranks bob's job first.
    let factor = |id: &str, fmt: &str| -> Option<f64> {
        c.run_ok("sprio", &["-h", "-j", id, "-o", fmt])
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    wait_for(
        "bob's job to rank ahead of alice's, hers waiting on Priority",
        PRIORITY_RANKED,
        || {
            let ahead = factor(&idb, "%Y")? > factor(&ida, "%Y")?;
            let reason = c.job(a).ok()?.get("Reason").map(str::to_owned);
            (ahead && reason.as_deref() == Some("Priority")).then_some(())
        },
    )?;
    let report = alice.why(c, a, "Priority")?;
    let fs_a = factor(&ida, "%F").ok_or("no sprio for alice's job")?;
    let fs_b = factor(&idb, "%F").ok_or("no sprio for bob's job")?;
    let partition = report.job.partition.clone();
    let want_ahead =
        format!("1 pending job of partition {partition} is ahead of it (by user: gpushare_bob 1)");
    let want_factor =
        format!("fair share puts them ahead: {fs_b:.0} on average against its {fs_a:.0}");
    let qos_b = c.job(b)?.get("QOS").unwrap_or_default().to_owned();
    let want_kind = format!("of them, 1 asks for a40 GPUs as this job does (by QOS: {qos_b} 1)");
    ensure(
        report
            .summary
            .ends_with("waits behind pending jobs of higher priority")
            && report.details.contains(&want_ahead)
            && report.details.contains(&want_kind)
            && report.details.iter().any(|d| d.starts_with(&want_factor))
            && report.details.iter().any(|d| {
                d.starts_with("user gpushare_alice in account research: fair-share factor")
            }),
        format!("want {want_ahead:?}, {want_kind:?} and {want_factor:?}, got {report:#?}"),
    )?;
    c.cancel_all()
}
