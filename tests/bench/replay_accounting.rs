//! `gpu-qos replay` end to end on a large accounting: JOBS records
//! (default 100,000) in a real slurmdbd's database, read back by `sacct`
//! and judged, beside `sacct` alone (what a site would run to look at the
//! same jobs). The records are real ones multiplied: a few jobs of every
//! kind (typed, untyped, default QOS, low-priority, CPU-only) submitted
//! with the plugin off, then their rows copied in MariaDB under new job
//! ids, as a month of a busy site would leave them.
//!
//! `cargo bench -p gpushare-tests --bench replay_accounting [-- JOBS]`
//! (`make bench` runs it). Root: it starts a test cluster.

use std::process::Command;
use std::time::Instant;

use testcluster::bench_figures::{print_row, Key};
use testcluster::cluster::{wait_for, CLUSTER_NAME, EXAMPLE_GPU_QOS_CONF};
use testcluster::time::JOB_LONG;
use testcluster::{Cluster, ClusterSpec};

const RUNS: usize = 3;

/// The job requests copied: each of these lines becomes JOBS / len jobs.
const KINDS: [&[&str]; 6] = [
    &["--qos=qos_lafferty", "--gres=gpu:2"],
    &["--qos=qos_lafferty", "--gres=gpu:a40:2"],
    &["--gres=gpu:1"],
    &["--qos=lowprio", "--gres=gpu:a40:1"],
    &["--gres=gpu:a40:1"],
    &[],
];

fn main() {
    let jobs: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    if let Err(e) = run(jobs) {
        eprintln!("replay_accounting: {e}");
        std::process::exit(1);
    }
}

/// Runs `sql` in the cluster's MariaDB; its rows, tab-separated.
fn sql(c: &Cluster, sql: &str) -> Result<String, String> {
    let sock = c.dir.join("mysql/mysqld.sock");
    let out = Command::new("mariadb")
        .arg(format!("--socket={}", sock.display()))
        .args(["-uroot", "-N", "-B", "-e", sql])
        .output()
        .map_err(|e| format!("mariadb: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "mariadb: {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Wall seconds of `program args` run RUNS times (median), and its last stdout.
fn timed(c: &Cluster, program: &str, args: &[&str]) -> Result<(f64, String), String> {
    let mut times = Vec::new();
    let mut last = String::new();
    for _ in 0..RUNS {
        let start = Instant::now();
        last = c.run_ok(program, args)?;
        times.push(start.elapsed().as_secs_f64());
    }
    Ok((median(times), last))
}

fn run(jobs: usize) -> Result<(), String> {
    let spec = ClusterSpec {
        job_submit_plugins: Vec::new(),
        ..ClusterSpec::example_site()
    };
    let c = spec.start()?;
    let since = c.run_ok("date", &["+%Y-%m-%dT%H:%M:%S"])?.trim().to_owned();
    let mut ids = Vec::new();
    for kind in KINDS {
        let mut args: Vec<&str> = kind.to_vec();
        args.extend(["-o", "/dev/null", "--wrap=true"]);
        ids.push(c.sbatch_ok(&args)?);
    }
    wait_for("the jobs to reach accounting", JOB_LONG, || {
        let out = c
            .run_ok(
                "sacct",
                &["-a", "-X", "-n", "-P", "-S", &since, "-o", "State"],
            )
            .ok()?;
        (out.lines().filter(|l| l.starts_with("COMPLETED")).count() == KINDS.len()).then_some(())
    })?;

    // The job table and its columns but the two the copies change.
    let table = format!("{CLUSTER_NAME}_job_table");
    let schema = sql(
        &c,
        &format!("SELECT table_schema FROM information_schema.tables WHERE table_name='{table}'"),
    )?
    .trim()
    .to_owned();
    let columns = sql(
        &c,
        &format!(
            "SELECT GROUP_CONCAT(column_name ORDER BY ordinal_position) FROM \
             information_schema.columns WHERE table_schema='{schema}' AND table_name='{table}' \
             AND column_name NOT IN ('job_db_inx','id_job')"
        ),
    )?
    .trim()
    .to_owned();
    let (first, last) = (ids[0], ids[ids.len() - 1]);
    let copies = jobs.div_ceil(KINDS.len());
    let start = Instant::now();
    sql(
        &c,
        &format!(
            "USE `{schema}`; INSERT INTO `{table}` (id_job,{quoted}) SELECT \
             {base} + s.seq * {width} + (j.id_job - {first}),{select} FROM `{table}` j \
             JOIN seq_1_to_{copies} s WHERE j.id_job BETWEEN {first} AND {last}",
            base = u64::from(last) + 1_000,
            width = KINDS.len(),
            quoted = columns
                .split(',')
                .map(|col| format!("`{col}`"))
                .collect::<Vec<_>>()
                .join(","),
            select = columns
                .split(',')
                .map(|col| format!("j.`{col}`"))
                .collect::<Vec<_>>()
                .join(","),
        ),
    )?;
    let copied = start.elapsed().as_secs_f64();
    let total = copies * KINDS.len() + KINDS.len();

    let conf = c.slurm_conf().with_file_name("replay_gpu_qos.conf");
    testcluster::replace_conf(&conf, EXAMPLE_GPU_QOS_CONF)?;
    let bin = testcluster::cluster::build_dir()?.join("gpu-qos");
    let bin = bin.to_string_lossy();
    let conf_arg = conf.to_string_lossy();
    // The very query replay runs, so the two rows time the same read.
    let delimiter = gpushare::qos::slurm::accounted::delimiter();
    let query = gpushare::qos::slurm::accounted::between(&since, None, true, &delimiter);
    let args: Vec<&str> = query.args.iter().map(String::as_str).collect();
    let (sacct_s, out) = timed(&c, query.program, &args)?;
    let records = out.lines().count();
    let (replay_s, json) = timed(
        &c,
        &bin,
        &["replay", "--since", &since, "--conf", &conf_arg, "--json"],
    )?;
    let r: serde_json::Value = serde_json::from_str(&json).map_err(|e| format!("{e}: {json}"))?;
    let judged = r["jobs"].as_u64().unwrap_or(0);
    if records != total || judged != total as u64 {
        return Err(format!(
            "{total} jobs in the database, sacct listed {records}, replay judged {judged}"
        ));
    }
    let command = format!("cargo bench -p gpushare-tests --bench replay_accounting -- {jobs}");
    println!("\n{total} jobs in slurmdbd's database ({copied:.1} s to copy them in)");
    println!("| what | wall (median of {RUNS}) | ratio |");
    println!("|---|---|---|");
    println!("| `sacct -a -X -P` of replay's fields | {sacct_s:.2} s | 1.00× |");
    println!(
        "| `gpu-qos replay --json` (sacct, then the policy) | {replay_s:.2} s | {:.2}× |",
        replay_s / sacct_s
    );
    print_row(
        &format!("sacct of {total} jobs, replay's fields"),
        &format!("{sacct_s:.2} s"),
        &command,
        &[Key::lower("sacct", sacct_s, "s")],
    );
    print_row(
        &format!("gpu-qos replay of {total} jobs, end to end"),
        &format!("{replay_s:.2} s ({:.2}× sacct)", replay_s / sacct_s),
        &command,
        &[
            Key::lower("replay", replay_s, "s"),
            Key::lower("vs_sacct", replay_s / sacct_s, "×"),
        ],
    );
    Ok(())
}
