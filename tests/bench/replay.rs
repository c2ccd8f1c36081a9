//! `gpu-qos replay`'s core on a large accounting: JOBS synthetic `sacct
//! -a -X -P` records (default 100,000: typed, untyped, default-QOS,
//! partition, low-priority, arrays, het components, odd SubmitLines and
//! none) parsed and judged by the policy the plugin runs, under the
//! example gpu_qos.conf. Beside it, what a site would otherwise run over
//! the same records: an awk one-liner counting untyped `--gres=gpu:N`
//! lines (no QOS, types, defaults, arrays or #SBATCH requests).
//!
//! `cargo bench -p gpushare-tests --bench replay [-- JOBS]` (`make bench`
//! runs it). No cluster, no GPU, no network.

use std::fmt::Write as _;
use std::process::Command;
use std::time::Instant;

use gpushare::qos::check::{GpuTresLimit, QosRecord};
use gpushare::qos::config;
use gpushare::qos::replay::{self, Database};
use testcluster::bench_figures::{print_row, Key};
use testcluster::cluster::EXAMPLE_GPU_QOS_CONF;

const RUNS: usize = 5;

fn sacct_text(jobs: usize, d: &str) -> String {
    let users = ["alice", "bob", "dora", "eve", "frank", "gina", "hal", "ivy"];
    let shapes: [(&str, &str, &str, &str); 10] = [
        (
            "qos_lafferty",
            "gpu",
            "gres/gpu=2",
            "sbatch --qos=qos_lafferty --gres=gpu:2 job.sh",
        ),
        (
            "qos_lafferty",
            "gpu",
            "gres/gpu:a40=2,gres/gpu=2",
            "sbatch -q qos_lafferty --gres gpu:a40:2 job.sh",
        ),
        (
            "qos_saxena",
            "gpu",
            "gres/gpu:h100=1,gres/gpu=1",
            "sbatch --qos=qos_saxena --gpus=h100:1 job.sh",
        ),
        (
            "qos_lafferty",
            "gpu",
            "gres/gpu=1",
            "sbatch --gres=gpu:1 job.sh",
        ),
        (
            "normal",
            "a40only",
            "gres/gpu=1",
            "sbatch -p a40only --gres=gpu:1 job.sh",
        ),
        (
            "lowprio",
            "gpu",
            "gres/gpu:a40=1,gres/gpu=1",
            "sbatch -q lowprio --gres=gpu:a40:1 --array=1-100 job.sh",
        ),
        ("normal", "gpu", "", "sbatch --wrap=hostname"),
        ("qos_lafferty", "gpu", "gres/gpu=2", "sbatch job.sh"),
        ("qos_dijk", "gpu", "gres/gpu:h100=4,gres/gpu=4", ""),
        (
            "qos_lafferty",
            "gpu",
            "gres/gpu=1",
            "sbatch odd \u{7f} -- --gres=gpu:1 ||| x",
        ),
    ];
    let mut out = String::with_capacity(jobs * 140);
    for i in 0..jobs {
        let (qos, part, tres, line) = shapes[i % shapes.len()];
        let user = users[i % users.len()];
        let id = match i % 50 {
            48 => format!("{}+0", 1000 + i),
            49 => format!("{}_{}", 1000 + i - 1 - (i % 7), i % 7),
            _ => (1000 + i).to_string(),
        };
        let _ = writeln!(
            out,
            "{id}{d}{user}{d}acct_{}{d}{part}{d}{qos}{d}1{d}{d}billing=1,cpu=1,mem=1G,node=1{}{tres}{d}{line}",
            i % 20,
            if tres.is_empty() { "" } else { "," }
        );
    }
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let jobs: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let conf = format!("{EXAMPLE_GPU_QOS_CONF}\nPartition=a40only GPUTypes=a40 GPULimit=8\n");
    let Ok(cfg) = config::parse(&conf, "gpu_qos.conf") else {
        eprintln!("the example gpu_qos.conf does not parse");
        std::process::exit(2);
    };
    let db = Database {
        qos: ["qos_lafferty", "qos_saxena", "qos_dijk", "part_a40"]
            .iter()
            .map(|q| QosRecord {
                name: (*q).to_owned(),
                gpu_limits: vec![GpuTresLimit {
                    gpu_type: Some("a40".to_owned()),
                    count: 4,
                }],
                preempt: Vec::new(),
            })
            .collect(),
        partition_qos: vec![("a40only".to_owned(), "part_a40".to_owned())],
        parents: (0..20)
            .map(|i| (format!("acct_{i}"), "root".to_owned()))
            .collect(),
        ..Database::default()
    };
    // Fields separated as replay asks sacct to (a new separator each run).
    let delimiter = gpushare::qos::slurm::accounted::delimiter();
    let text = sacct_text(jobs, &delimiter);
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..RUNS {
        let start = Instant::now();
        let (subs, _) = replay::parse_sacct(&text, true, &delimiter);
        let report = replay::replay(&cfg, &db, &subs);
        times.push(start.elapsed().as_secs_f64());
        last = Some(report);
    }
    let Some(report) = last else { return };
    let ours = median(times);
    println!(
        "replay core, {jobs} sacct records: {} jobs, {} refused, {} changed, {} unchanged; \
         median of {RUNS}: {:.3} s",
        report.jobs, report.totals.refused, report.totals.changed, report.unchanged, ours
    );
    // What a site would otherwise run over the same records.
    let path =
        std::env::temp_dir().join(format!("gpushare-replay-bench-{}.txt", std::process::id()));
    let awk = std::fs::write(&path, &text).ok().and_then(|()| {
        let mut t = Vec::new();
        for _ in 0..RUNS {
            let start = Instant::now();
            let out = Command::new("awk")
                .args([
                    "-F|",
                    "$NF ~ /--gres[= ]gpu:[0-9]/ {n++} END {print n+0}",
                    &path.to_string_lossy(),
                ])
                .output()
                .ok()?;
            t.push(start.elapsed().as_secs_f64());
            println!(
                "awk untyped --gres count: {}",
                String::from_utf8_lossy(&out.stdout).trim()
            );
        }
        Some(median(t))
    });
    let _ = std::fs::remove_file(&path);
    let cmd = format!("cargo bench -p gpushare-tests --bench replay -- {jobs}");
    let per_record = ours * 1e6 / jobs as f64;
    let awk = awk
        .map(|a| format!("; an awk count of untyped --gres lines {a:.2} s"))
        .unwrap_or_default();
    print_row(
        &format!("gpu-qos replay core, {jobs} sacct records (parse + policy)"),
        &format!("{ours:.2} s ({per_record:.1} µs/record){awk}"),
        &cmd,
        &[Key::lower("record", per_record, "µs")],
    );
}
