//! gpushare seen from Prometheus, with the tools Debian ships: the example
//! site on three nodes, each node's metrics file read by its own
//! node_exporter, the controller's (`gpu-qos metrics --write` and the
//! job_submit plugin's decisions) by another, a Prometheus server scraping
//! them all; the figures are checked through Prometheus's query API, every
//! file gpushare writes with `promtool check metrics`, and the shipped
//! alerting rules and dashboard against that server.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use testcluster::cluster::{build_dir, wait_for, CLUSTER_NAME};
use testcluster::hosts::TEXTFILE_DIR;
use testcluster::monitor::Monitoring;
use testcluster::process::sleep_of_job;
use testcluster::standin::{install_nvml_usage, NVML_USAGE};
use testcluster::time::{JOB_START, SHORT};
use testcluster::{ensure, Cluster, ClusterSpec, Suite, TestResult};

/// job_submit/gpu_qos's poll (`GPUSHARE_QOS_POLL_MS`, policy_state.rs),
/// for the slurmctld this suite starts: its quiet file's heartbeat comes
/// every 30 polls, 7.5 s here instead of a minute.
const PLUGIN_POLL_MS: &str = "250";

fn main() -> ExitCode {
    // Before the cluster starts: slurmctld inherits it.
    std::env::set_var("GPUSHARE_QOS_POLL_MS", PLUGIN_POLL_MS);
    // Each node's timer asks the stand-in NVML query (share_use).
    let mut spec = ClusterSpec::example_site_nodes();
    for node in &mut spec.nodes {
        for (name, text) in &mut node.local_files {
            if name == "gpu_mps.conf" {
                text.push_str(&format!("ShareUsage={{cluster}}/mps-bin/{NVML_USAGE}\n"));
            }
        }
    }
    Suite::new(spec)
        // Each test starts with no job left by the one before.
        .reset(|c| c.cancel_all())
        .test(
            "prometheus_sees_shares_group_use_and_decisions_across_nodes",
            figures,
        )
        .smoke()
        .test(
            "every_metrics_file_gpushare_writes_passes_promtool",
            promtool_check_metrics,
        )
        .test(
            "a_quiet_controllers_plugin_file_is_rewritten_all_the_same",
            quiet_controller,
        )
        .run()
}

/// A share job that waits.
const SHARE: &str = "--wrap=sleep 300";

fn gpu_qos(c: &Cluster, args: &[&str]) -> Result<String, String> {
    let bin = build_dir()?.join("gpu-qos");
    c.run_ok(&bin.to_string_lossy(), args)
}

/// The controller's textfile directory, where `gpu-qos metrics --write`
/// goes (a timer's job on a real controller).
fn qos_file(c: &Cluster) -> PathBuf {
    c.dir.join(TEXTFILE_DIR).join("gpushare_qos.prom")
}

fn node_file(c: &Cluster, node: &str) -> PathBuf {
    c.node_dir(node).join(TEXTFILE_DIR).join("gpushare.prom")
}

fn figures(c: &mut Cluster) -> TestResult {
    let mon = Monitoring::start(c)?;
    // Eight shares of 25 units on gpu01, two a40 of qos_lafferty on gpu02.
    let shares: Vec<u32> = (0..8)
        .map(|_| c.sbatch_ok(&["-w", "gpu01", "--gres=mps:25", SHARE]))
        .collect::<Result<_, _>>()?;
    let group = c.sbatch_ok(&[
        "--qos=qos_lafferty",
        "-w",
        "gpu02",
        "--gres=gpu:a40:2",
        "--wrap=sleep 300",
    ])?;
    for &id in shares.iter().chain([&group]) {
        c.wait_job_state(id, &["RUNNING"], JOB_START)?;
    }
    // One untyped group job, refused by the plugin.
    let refused = c.sbatch(&["--qos=qos_lafferty", "--gres=gpu:1", "--wrap=true"]);
    ensure(
        refused.is_err(),
        format!("untyped job accepted: {refused:?}"),
    )?;
    let write = qos_file(c);
    gpu_qos(c, &["metrics", "--write", &write.to_string_lossy()])?;
    let wait = SHORT;
    mon.wait_value(
        r#"sum(gpushare_gpu_units_allocated{node="gpu01"})"#,
        200.0,
        wait,
    )?;
    mon.wait_value(r#"count(gpushare_share_units{node="gpu01"})"#, 8.0, wait)?;
    mon.wait_value(
        r#"sum(gpushare_gpu_units_capacity{node="gpu01"})"#,
        400.0,
        wait,
    )?;
    mon.wait_value(r#"sum(gpushare_gpu_held_whole{node="gpu02"})"#, 2.0, wait)?;
    mon.wait_value(
        r#"gpushare_qos_gpus_in_use{qos="qos_lafferty",gpu_type="a40"}"#,
        2.0,
        wait,
    )?;
    mon.wait_value(
        r#"gpushare_qos_gpus_limit{qos="qos_lafferty",gpu_type="a40"}"#,
        4.0,
        wait,
    )?;
    mon.wait_value(
        r#"gpushare_job_submit_decisions_total{call="submit",decision="reject",rule="untyped_gpu"}"#,
        1.0,
        wait,
    )?;
    // The plugin runs its file: no alert of GpusharePolicyFileBad.
    mon.wait_value("gpushare_policy_config_ok", 1.0, wait)?;
    mon.wait_value("gpushare_policy_without_file", 0.0, wait)?;
    // Its heartbeat, by the cluster's name, fresh: the cluster's staleness
    // rule (the freshest of its controllers) finds nothing.
    let fresh = format!(
        "count(time() - max by (slurm_cluster) ({HEARTBEAT}{{slurm_cluster=\"{CLUSTER_NAME}\"}}) < 120)"
    );
    mon.wait_value(&fresh, 1.0, wait)?;
    mon.wait_value(r#"sum(gpushare_placements_total{node="gpu01"})"#, 8.0, wait)?;
    // A lafferty job over what is left waits on the group; the pending
    // figure says so once gpu-qos metrics runs again.
    let waiting = c.sbatch_ok(&["--qos=qos_lafferty", "--gres=gpu:a40:3", "--wrap=sleep 300"])?;
    wait_for("the job to wait on its group", wait, || {
        let info = c.job(waiting).ok()?;
        info.get("Reason")?.starts_with("QOSGrp").then_some(())
    })
    .map_err(|e| {
        // What Slurm said instead, and what held the group then.
        let held = c.run_ok("squeue", &["-h", "-o", "%i %T %q %b %N %r"]);
        format!("{e}: {:?}\n{held:?}", c.job(waiting))
    })?;
    gpu_qos(c, &["metrics", "--write", &write.to_string_lossy()])?;
    mon.wait_value(
        r#"sum(gpushare_qos_jobs_pending{qos="qos_lafferty",reason=~"QOSGrp.*"})"#,
        1.0,
        wait,
    )?;
    // A low-priority job on the h100 node, for the dashboard's view of
    // what low-priority QOS hold.
    let low = c.sbatch_ok(&["--qos=lowprio", "-w", "gpu03", "--gres=gpu:h100:1", SHARE])?;
    c.wait_job_state(low, &["RUNNING"], wait)?;
    gpu_qos(c, &["metrics", "--write", &write.to_string_lossy()])?;
    mon.wait_value(
        r#"gpushare_qos_gpus_in_use{qos="lowprio",gpu_type="h100"}"#,
        1.0,
        wait,
    )?;
    // What the shares use, and what an ended one used.
    share_use(c, &mon, &shares)?;
    // The shipped rules and dashboard against this server: every alert's
    // expression evaluates, every panel's query returns data.
    check_rules_evaluate(&mon)?;
    check_dashboard(&mon)?;
    // Released: the figures fall back to zero.
    c.cancel_all()?;
    mon.wait_value(
        r#"sum(gpushare_gpu_units_allocated{node="gpu01"})"#,
        0.0,
        wait,
    )?;
    mon.wait_value(r#"count(gpushare_share_units) or vector(0)"#, 0.0, wait)?;
    Ok(())
}

/// gpu01's timer, its NVML query the stand-in's: every share's `sleep`
/// listed on each GPU with 1 GiB and 50 % of the SMs (a process counts
/// only on the GPU of its share). Prometheus sees each share's memory and
/// SM use; once the first share is cancelled and its record complete in
/// the accounting, the histograms count it under its QOS and size.
fn share_use(c: &Cluster, mon: &Monitoring, shares: &[u32]) -> TestResult {
    let bin = c.dir.join("mps-bin");
    fs::create_dir_all(&bin).map_err(|e| format!("{}: {e}", bin.display()))?;
    install_nvml_usage(&bin)?;
    let pids: Vec<u32> = shares
        .iter()
        .map(|&j| sleep_of_job(j).ok_or_else(|| format!("no sleep of job {j}")))
        .collect::<Result<_, _>>()?;
    let mut text = String::new();
    for gpu in 0..4 {
        text.push_str(&format!(
            "gpu {gpu} {gpu} ok {} {}\n",
            8u64 << 30,
            48u64 << 30
        ));
        for (i, pid) in pids.iter().enumerate() {
            text.push_str(&format!("proc {gpu} {pid} {} compute\n", 1u64 << 30));
            text.push_str(&format!("util {gpu} {pid} 50 {}\n", i + 1));
        }
        text.push_str(&format!("end {gpu}\n"));
    }
    fs::write(bin.join("nvml-usage"), &text).map_err(|e| e.to_string())?;
    let conf = Path::new("/etc/slurm/gpu_mps.conf");
    let kmsg = c.dir.join("kmsg-none");
    fs::write(&kmsg, "").map_err(|e| e.to_string())?;
    let mut said = String::new();
    for _ in 0..2 {
        said.push_str(&c.node_timer(Some("gpu01"), conf, &kmsg)?);
    }
    // 1 GiB; 50 % of the GPU over a quarter of it. The file's `job` label
    // is `exported_job` in Prometheus, whose own `job` names the scrape.
    let first = shares.first().copied().ok_or("no share")?;
    let wait = SHORT;
    mon.wait_value(
        &format!(r#"gpushare_share_memory_used_bytes{{node="gpu01",exported_job="{first}"}}"#),
        f64::from(1u32 << 30),
        wait,
    )
    .map_err(|e| {
        let kept = c.node_dir("gpu01").join("run/gpu-mps/share-usage");
        let kept = fs::read_to_string(kept).unwrap_or_default();
        let calls = fs::read_to_string(c.dir.join("mps-bin/standin.log")).unwrap_or_default();
        format!("{e}\nthe timer said: {said}\nkept: {kept}\nstand-in calls: {calls}")
    })?;
    // No SM figure per share: NVML charges MPS clients' work to their
    // server, so the samples given for the shares' pids count for none.
    ensure(
        mon.query(r#"gpushare_share_sm_utilization{node="gpu01"}"#)?
            .is_empty(),
        "a share's SM figure in Prometheus".to_owned(),
    )?;
    c.run_ok("scancel", &[&first.to_string()])?;
    c.wait_job_done(first, JOB_START)?;
    // Under the QOS the accounting shows for it.
    let counted =
        r#"sum(gpushare_share_memory_peak_ratio_count{node="gpu01",qos!="unknown",units="25"})"#;
    let mut said = String::new();
    wait_for("the ended share in the histograms", JOB_START, || {
        said = c.node_timer(Some("gpu01"), conf, &kmsg).ok()?;
        let text = fs::read_to_string(node_file(c, "gpu01")).ok()?;
        text.contains("gpushare_share_memory_peak_ratio_count")
            .then_some(())
    })
    .map_err(|e| {
        let kept = c.node_dir("gpu01").join("run/gpu-mps/share-usage");
        let kept = fs::read_to_string(kept).unwrap_or_default();
        let job = first.to_string();
        let args = ["-X", "-n", "-P", "-o", "State,QOS,AdminComment", "-j", &job];
        let sacct = c
            .run_on("gpu01", "sacct", &args)
            .map(|o| format!("{o:?}"))
            .unwrap_or_else(|e| e);
        format!("{e}; the timer said: {said}\nkept: {kept}\nsacct on gpu01: {sacct}")
    })?;
    mon.wait_value(counted, 1.0, wait)
}

/// Every alerting rule's expression, run against the live server.
fn check_rules_evaluate(mon: &Monitoring) -> TestResult {
    let rules = repo().join("packaging/monitoring/gpushare-rules.yml");
    let text = fs::read_to_string(&rules).map_err(|e| format!("{}: {e}", rules.display()))?;
    let exprs = rule_exprs(&text);
    ensure(exprs.len() >= 5, format!("{} rules read", exprs.len()))?;
    for expr in exprs {
        mon.query(&expr)
            .map_err(|e| format!("rule expression {expr:?}: {e}"))?;
    }
    Ok(())
}

/// Panel queries that have no data on this cluster: its nodes run no MPS
/// daemons (`MPSControl=none`), so no daemon series exists.
const NO_DAEMONS_HERE: [&str; 5] = [
    "gpushare_gpu_mps_daemon_up",
    "gpushare_gpu_mps_users",
    "gpushare_gpu_mps_time_sliced",
    "gpushare_gpu_mps_clients",
    // Of jobs that held a GPU whole only, and none ends here.
    "histogram_quantile(0.5, sum by (qos, units, le) (gpushare_share_sm_mean_ratio_bucket))",
];

/// Every query of the shipped Grafana dashboard, run against the live
/// server: none fails, and each returns data (but for [`NO_DAEMONS_HERE`]).
fn check_dashboard(mon: &Monitoring) -> TestResult {
    let path = repo().join("packaging/monitoring/gpushare-dashboard.json");
    let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let dash: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut exprs = Vec::new();
    for panel in dash["panels"].as_array().into_iter().flatten() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(e) = target["expr"].as_str() {
                exprs.push((
                    panel["title"].as_str().unwrap_or("").to_owned(),
                    e.to_owned(),
                ));
            }
        }
    }
    ensure(
        exprs.len() >= 15,
        format!("{} dashboard queries", exprs.len()),
    )?;
    // Rates have data once two samples are in their window: asked again
    // until every query has some (a failing query fails at once).
    let mut empty = Vec::new();
    let mut failed = None;
    let _ = wait_for("every dashboard query to return data", SHORT, || {
        empty.clear();
        for (title, expr) in &exprs {
            match mon.query(expr) {
                Err(e) => {
                    failed = Some(format!("dashboard panel {title:?}: {e}"));
                    return Some(());
                }
                Ok(got) if got.is_empty() && !NO_DAEMONS_HERE.contains(&expr.as_str()) => {
                    empty.push(format!("{title}: {expr}"));
                }
                Ok(_) => {}
            }
        }
        empty.is_empty().then_some(())
    });
    if let Some(e) = failed {
        return Err(e);
    }
    ensure(
        empty.is_empty(),
        format!("dashboard queries without data: {empty:#?}"),
    )
}

/// The `expr:` of each rule (one line, or a `|` block).
fn rule_exprs(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(rest) = line.trim_start().strip_prefix("expr:") else {
            continue;
        };
        let rest = rest.trim();
        if rest == "|" {
            let mut block = Vec::new();
            while let Some(next) = lines.peek() {
                if next.trim().is_empty() || !next.starts_with("          ") {
                    break;
                }
                block.push(next.trim().to_owned());
                lines.next();
            }
            out.push(block.join(" "));
        } else {
            out.push(rest.to_owned());
        }
    }
    out
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn promtool_check(what: &str, text: &str) -> TestResult {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("promtool: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write as _;
        stdin
            .write_all(text.as_bytes())
            .map_err(|e| format!("promtool: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("promtool: {e}"))?;
    ensure(
        out.status.success(),
        format!(
            "promtool check metrics on {what}: {}{}\n{text}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn promtool_check_metrics(c: &mut Cluster) -> TestResult {
    for _ in 0..3 {
        c.sbatch_ok(&["-w", "gpu02", "--gres=mps:25", SHARE])?;
    }
    c.sbatch_ok(&["-w", "gpu03", "--gres=gpu:h100:1", SHARE])?;
    let _ = c.sbatch(&["--qos=qos_dijk", "--gres=gpu:1", "--wrap=true"]);
    wait_for("gpu02's metrics to show three shares", JOB_START, || {
        let text = fs::read_to_string(node_file(c, "gpu02")).ok()?;
        (text.matches("gpushare_share_units{").count() == 3).then_some(())
    })?;
    let write = qos_file(c);
    gpu_qos(c, &["metrics", "--write", &write.to_string_lossy()])?;
    let plugin = c.dir.join(TEXTFILE_DIR).join("gpushare_job_submit.prom");
    wait_for("the plugin's decisions file", SHORT, || {
        fs::metadata(&plugin).ok().map(|_| ())
    })?;
    let gpu_mps = build_dir()?.join("gpu-mps");
    let printed = c.run_on("gpu02", &gpu_mps.to_string_lossy(), &["metrics"])?;
    let mut files: Vec<(String, String)> = Vec::new();
    for node in c.node_names() {
        let path = node_file(c, &node);
        if let Ok(text) = fs::read_to_string(&path) {
            files.push((path.display().to_string(), text));
        }
    }
    ensure(
        files.len() == 3,
        format!("{} node metrics files", files.len()),
    )?;
    for path in [write, plugin] {
        let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        files.push((path.display().to_string(), text));
    }
    files.push((
        "gpu-mps metrics on gpu02".into(),
        String::from_utf8_lossy(&printed.stdout).into_owned(),
    ));
    for (what, text) in &files {
        promtool_check(what, text)?;
    }
    c.cancel_all()
}

/// The plugin's heartbeat series, by the cluster's name.
const HEARTBEAT: &str = "gpushare_job_submit_heartbeat_timestamp_seconds";

/// The value of the heartbeat line for this cluster in the plugin's file.
fn heartbeat_of(text: &str) -> Option<u64> {
    let prefix = format!("{HEARTBEAT}{{slurm_cluster=\"{CLUSTER_NAME}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

/// No job submitted, no decision made: slurmctld's job_submit/gpu_qos
/// rewrites its file all the same (a new file renamed over it), each time
/// with a later heartbeat labelled with the cluster's name, so that
/// GpushareMetricsStale knows the plugin is alive.
fn quiet_controller(c: &mut Cluster) -> TestResult {
    let plugin = c.dir.join(TEXTFILE_DIR).join("gpushare_job_submit.prom");
    let read = || {
        let text = fs::read_to_string(&plugin).ok()?;
        let inode = std::os::unix::fs::MetadataExt::ino(&fs::metadata(&plugin).ok()?);
        Some((text, inode))
    };
    let (before, inode) = wait_for("the plugin's decisions file", SHORT, read)?;
    let after = wait_for(
        "the plugin to rewrite its file with no decision to tell",
        SHORT,
        || read().filter(|(_, i)| *i != inode),
    )?;
    let beats = (heartbeat_of(&before), heartbeat_of(&after.0));
    let Some((was, is)) = beats.0.zip(beats.1) else {
        return Err(format!(
            "no heartbeat of cluster {CLUSTER_NAME} in the plugin's file:\n{}",
            after.0
        ));
    };
    ensure(is > was, format!("the heartbeat went from {was} to {is}"))?;
    let counts = |text: &str| -> Vec<String> {
        let beat = |l: &&str| l.starts_with(HEARTBEAT);
        text.lines()
            .filter(|l| !beat(l))
            .map(str::to_owned)
            .collect()
    };
    ensure(
        counts(&after.0) == counts(&before),
        format!(
            "a decision came while waiting, the test shows nothing:\n{before}\n--\n{}",
            after.0
        ),
    )
}
