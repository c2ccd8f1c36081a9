//! Submission cost of `job_submit/gpu_qos` beside no plugin and beside
//! `job_submit/lua` running the same rule, on real slurmctlds.
//!
//! `cargo bench -p gpushare-tests --bench submit_throughput [-- JOBS]`
//!
//! For each configuration, one cluster (the example site) is started and
//! JOBS held, typed, accepted jobs are submitted by 4 concurrent `sbatch`
//! clients, first naming their QOS, then naming none, so that each plugin
//! looks up the default QOS (root's is `qos_lafferty`) in slurmctld's
//! association manager: `job_desc.default_qos` in the lua script, the same
//! calls in process in gpu_qos. Reported: client-side throughput (jobs/s, dominated by sbatch's
//! own start-up and munge) and slurmctld's own mean time per
//! REQUEST_SUBMIT_BATCH_JOB from `sdiag`, which is where a job_submit plugin
//! spends its time. Configurations run interleaved rounds to spread drift.

use std::time::Instant;

use testcluster::bench_figures::{print_row, Key};
use testcluster::cluster::EXAMPLE_GPU_QOS_CONF;
use testcluster::{Cluster, ClusterSpec};

const CLIENTS: usize = 4;

struct Config {
    name: &'static str,
    plugins: Vec<String>,
    files: Vec<(String, String)>,
}

fn configs() -> Vec<Config> {
    vec![
        Config {
            name: "no plugin",
            plugins: vec![],
            files: vec![],
        },
        Config {
            name: "job_submit/lua",
            plugins: vec!["lua".into()],
            files: vec![(
                "job_submit.lua".into(),
                include_str!("job_submit.lua").into(),
            )],
        },
        Config {
            name: "job_submit/gpu_qos",
            plugins: vec!["gpu_qos".into()],
            files: vec![("gpu_qos.conf".into(), EXAMPLE_GPU_QOS_CONF.into())],
        },
    ]
}

/// slurmctld's mean microseconds per batch submission, and the count.
fn sdiag_submit(c: &Cluster) -> Result<(u64, u64), String> {
    let text = c.run_ok("sdiag", &[])?;
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("REQUEST_SUBMIT_BATCH_JOB "))
        .ok_or("sdiag has no REQUEST_SUBMIT_BATCH_JOB line")?;
    let field = |name: &str| -> Result<u64, String> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("no {name} in {line:?}"))
    };
    Ok((field("ave_time:")?, field("count:")?))
}

fn submit_batch(c: &Cluster, jobs: usize, shape: &[&str]) -> Result<f64, String> {
    let started = Instant::now();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|k| {
                s.spawn(move || -> Result<(), String> {
                    for _ in (k..jobs).step_by(CLIENTS) {
                        let mut args = vec!["-H", "--output=/dev/null", "--wrap=true"];
                        args.extend_from_slice(shape);
                        c.sbatch(&args)?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().map_err(|_| "client panicked".to_string())?)
    })?;
    Ok(jobs as f64 / started.elapsed().as_secs_f64())
}

fn main() -> Result<(), String> {
    let jobs: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(600);
    let rounds = 3;
    let mut clusters = Vec::new();
    for cfg in configs() {
        let spec = ClusterSpec {
            job_submit_plugins: cfg.plugins.clone(),
            extra_conf_files: cfg.files.clone(),
            ..ClusterSpec::example_site()
        };
        eprintln!("starting cluster: {}", cfg.name);
        clusters.push((cfg, spec.start()?));
    }
    for (_, c) in &clusters {
        c.run_ok(
            "sacctmgr",
            &[
                "-i",
                "modify",
                "user",
                "where",
                "name=root",
                "set",
                "defaultqos=qos_lafferty",
            ],
        )?;
    }
    let cmd = format!("cargo bench -p gpushare-tests --bench submit_throughput -- {jobs}");
    let shapes: [(&str, &[&str]); 2] = [
        ("--qos named", &["--qos=qos_lafferty", "--gres=gpu:a40:1"]),
        ("default QOS", &["--gres=gpu:a40:1"]),
    ];
    for (shape_name, shape) in shapes {
        let mut rate = vec![0.0; clusters.len()];
        for (_, c) in &clusters {
            c.run_ok("sdiag", &["--reset"])?;
        }
        for round in 0..rounds {
            for (i, (cfg, c)) in clusters.iter().enumerate() {
                let r = submit_batch(c, jobs / rounds, shape)?;
                eprintln!(
                    "{shape_name}, round {round}: {:<20} {r:7.1} jobs/s",
                    cfg.name
                );
                rate[i] += r / rounds as f64;
                c.run_ok("scancel", &["-u", "root"])?;
            }
        }
        println!(
            "\n{shape_name}: {jobs} held jobs per configuration, {CLIENTS} concurrent sbatch \
             clients, {rounds} interleaved rounds"
        );
        println!(
            "{:<20} {:>10} {:>18} {:>14}",
            "configuration", "jobs/s", "slurmctld us/job", "vs no plugin"
        );
        let base = rate[0];
        let mut rpc_us = Vec::new();
        for (i, (cfg, c)) in clusters.iter().enumerate() {
            let (us, count) = sdiag_submit(c)?;
            rpc_us.push(us);
            println!(
                "{:<20} {:>10.1} {:>18} {:>13.1}%   ({count} RPCs)",
                cfg.name,
                rate[i],
                us,
                100.0 * rate[i] / base
            );
        }
        // make bench's summary lines.
        if let [none, lua, ours] = rpc_us[..] {
            print_row(
                &format!("job_submit in slurmctld, {shape_name}: µs per submission RPC (sdiag)"),
                &format!(
                    "no plugin {none} · lua {lua} · gpu_qos {ours}: gpu_qos adds {:+} µs, lua {:+} µs",
                    ours as i64 - none as i64,
                    lua as i64 - none as i64
                ),
                &cmd,
                &[Key::lower("gpu_qos", ours as f64, "µs")],
            );
        }
        if let [none, lua, ours] = rate[..] {
            print_row(
                &format!("submissions end to end, {shape_name}, 4 sbatch clients"),
                &format!(
                    "no plugin {none:.0} jobs/s · lua {lua:.0} ({:.2}×) · gpu_qos {ours:.0} ({:.2}×)",
                    lua / none,
                    ours / none
                ),
                &cmd,
                &[
                    Key::higher("gpu_qos", ours, "jobs/s"),
                    Key::higher("vs_none", ours / none, "×"),
                ],
            );
        }
    }
    Ok(())
}
