//! `make bench-gpu` (`gpushare-hw-check --bench`): what MPS sharing buys.
//!
//! A batch of [`JOBS`] small CUDA jobs, each one kernel after another of
//! [`BLOCKS`] blocks (the client's bench mode: a job that keeps a few SMs
//! busy, as a small inference or a notebook does), run three ways on GPU 0
//! as one throwaway user: one after another on the whole GPU, side by side
//! without MPS (the driver time-slices their contexts), and side by side in
//! gpushare's MPS shares (the release prolog places each job with [`UNITS`]
//! units, its task gets the environment the SPANK plugin gives it, the
//! epilogs end them). For each: the batch's wall time, each job's, and GPU
//! utilisation as `nvidia-smi` samples it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::{shown, Check, Client, Ran, Report, Setup, Verdict};

/// Jobs in the batch.
pub const JOBS: u32 = 8;
/// Each MPS share's units of the GPU's 100: 8 x 12 = 96.
pub const UNITS: u32 = 12;
/// Blocks per kernel: fewer than the SMs a 12 % share is given (14 of an
/// H100's or H200's 132), so a share runs a job as fast as the whole GPU.
pub const BLOCKS: u32 = 12;
/// Kernels per job, one after another.
pub const LAUNCHES: u32 = 400;
/// Dependent FMAs per thread in one kernel.
pub const ROUNDS: u32 = 2_000_000;
/// Longest one job may take before it is killed.
const JOB_TIMEOUT: Duration = Duration::from_secs(300);

/// `nvidia-smi`'s utilisation of GPU 0, sampled every 100 ms until stopped.
struct Sampler {
    child: Child,
    reader: Option<JoinHandle<Vec<f64>>>,
}

impl Sampler {
    fn start(smi: &Path) -> Option<Self> {
        let mut child = Command::new(smi)
            .args([
                "-i",
                "0",
                "--query-gpu=utilization.gpu",
                "--format=csv,noheader,nounits",
                "-lms",
                "100",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let out = child.stdout.take()?;
        let reader = std::thread::spawn(move || {
            BufReader::new(out)
                .lines()
                .map_while(Result::ok)
                .filter_map(|l| l.trim().parse().ok())
                .collect()
        });
        Some(Self {
            child,
            reader: Some(reader),
        })
    }

    fn stop(&mut self) -> Vec<f64> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.reader
            .take()
            .and_then(|r| r.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One way of running the batch, measured.
struct Batch {
    /// First job's start to last job's end, seconds.
    total_s: f64,
    /// Each job's wall time (CUDA init included), seconds.
    jobs_s: Vec<f64>,
    /// Each job's kernels, wall time, ms.
    work_ms: Vec<f64>,
    /// Utilisation samples, %.
    util: Vec<f64>,
    /// SMs CUDA reported to the first job.
    sms: Option<u32>,
    /// Jobs that did not report their kernels ok.
    failed: Vec<String>,
    detail: String,
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn max(v: &[f64]) -> Option<f64> {
    v.iter().copied().reduce(f64::max)
}

/// Runs one job per `envs` entry, all at once or one after another.
fn run_batch(s: &Setup, envs: &[Vec<(String, String)>], together: bool) -> Result<Batch, String> {
    let args: Vec<String> = vec![
        "bench".into(),
        BLOCKS.to_string(),
        LAUNCHES.to_string(),
        ROUNDS.to_string(),
    ];
    let mut sampler = Sampler::start(&s.smi);
    let mut clients: Vec<Client> = Vec::new();
    let mut lines = Vec::new();
    let wait = |c: &mut Client, lines: &mut Vec<_>| {
        lines.push(c.wait_event("bench", JOB_TIMEOUT));
        c.finish(JOB_TIMEOUT);
    };
    if together {
        for env in envs {
            clients.push(s.client_with(0, env, &args)?);
        }
        for c in &mut clients {
            wait(c, &mut lines);
        }
    } else {
        for env in envs {
            let mut c = s.client_with(0, env, &args)?;
            wait(&mut c, &mut lines);
            clients.push(c);
        }
    }
    let util = sampler.as_mut().map(Sampler::stop).unwrap_or_default();
    let first = clients.iter().map(|c| c.started).min();
    let last = clients.iter().filter_map(|c| c.done_at).max();
    let jobs_s: Vec<f64> = clients
        .iter()
        .filter_map(|c| Some(c.done_at?.duration_since(c.started).as_secs_f64()))
        .collect();
    let failed = clients
        .iter()
        .zip(&lines)
        .filter(|(_, l)| {
            l.as_ref()
                .and_then(|l| l.kernel.as_deref())
                .is_none_or(|k| k != "ok")
        })
        .map(|(c, _)| c.detail())
        .collect();
    Ok(Batch {
        total_s: first
            .zip(last)
            .map_or(0.0, |(f, l)| l.duration_since(f).as_secs_f64()),
        jobs_s,
        work_ms: lines.iter().flatten().filter_map(|l| l.work_ms).collect(),
        util,
        sms: lines.iter().flatten().find_map(|l| l.sms),
        failed,
        detail: clients
            .iter()
            .map(Client::detail)
            .collect::<Vec<_>>()
            .join("\n"),
    })
}

/// The benchmark: the three batches, a table and one row per batch.
pub fn run(s: &mut Setup, report: &mut Report) -> Result<(), String> {
    crate::checks::gpu_facts(s, report)?;
    if s.client.is_none() {
        return Err(format!(
            "the benchmark times the nvcc-built client: {}",
            crate::selftest::NO_NVCC
        ));
    }
    let nomps = s.nomps_pipe().to_string_lossy().into_owned();
    let plain: Vec<(String, String)> = [
        ("CUDA_VISIBLE_DEVICES", "0"),
        ("CUDA_MPS_PIPE_DIRECTORY", nomps.as_str()),
        ("CUDA_MPS_LOG_DIRECTORY", nomps.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let plain_envs = vec![plain; JOBS as usize];
    let alone = run_batch(s, &plain_envs, false)?;
    let sliced = run_batch(s, &plain_envs, true)?;

    let conf = s.conf.clone();
    let jobs: Vec<u32> = (701..701 + JOBS).collect();
    let prologs: Vec<Ran> = jobs.iter().map(|&j| s.prolog(&conf, j, 0, UNITS)).collect();
    let shared = jobs
        .iter()
        .map(|&j| s.plan(&conf, j).map(|p| p.env))
        .collect::<Result<Vec<_>, _>>()
        .and_then(|envs| run_batch(s, &envs, true));
    let epilogs: Vec<Ran> = jobs.iter().map(|&j| s.epilog(&conf, j, 0)).collect();
    let shared = shared?;
    let node_ms = |r: &[Ran]| {
        format!(
            "{} ms (first {} ms)",
            r.iter().map(|r| r.ms).sum::<u128>(),
            r.first().map_or(0, |r| r.ms)
        )
    };
    let node_detail: Vec<String> = prologs.iter().chain(&epilogs).map(Ran::detail).collect();

    let base = alone.total_s;
    let rows = [
        (
            "one after another, whole GPU (no MPS)",
            &alone,
            String::new(),
        ),
        ("side by side, no MPS (time-sliced)", &sliced, String::new()),
        (
            "side by side, gpushare MPS shares",
            &shared,
            format!(
                "; {JOBS} prologs {}, {JOBS} epilogs {} (not in the batch's time)",
                node_ms(&prologs),
                node_ms(&epilogs)
            ),
        ),
    ];
    let mut table = format!(
        "{JOBS} jobs, each {LAUNCHES} kernels of {BLOCKS} blocks x 256 threads \
         ({ROUNDS} dependent FMAs per thread) one after another: a job that keeps {BLOCKS} of \
         the GPU's {} SMs busy. MPS shares of {UNITS} units of 100 each. Job time includes \
         CUDA's start; GPU utilisation is `nvidia-smi`'s (the share of time a kernel ran, \
         whatever number of SMs it used), sampled every 100 ms.\n\n\
         | how the {JOBS} jobs ran | batch | each job, mean / longest | kernels per job, mean \
         | GPU utilisation, mean | batch time vs one after another |\n|---|---|---|---|---|---|\n",
        shown(alone.sms)
    );
    for (name, b, note) in &rows {
        let f1 = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"));
        table.push_str(&format!(
            "| {name} | {:.1} s | {} / {} s | {} s | {} % | {} |\n",
            b.total_s,
            f1(mean(&b.jobs_s)),
            f1(max(&b.jobs_s)),
            f1(mean(&b.work_ms).map(|m| m / 1000.0)),
            mean(&b.util).map_or_else(|| "-".to_owned(), |u| format!("{u:.0}")),
            if b.total_s > 0.0 {
                format!("{:.2}x", base / b.total_s)
            } else {
                "-".to_owned()
            }
        ));
        report.push(Check::new(
            name,
            if b.failed.is_empty() && b.jobs_s.len() == JOBS as usize {
                Verdict::Seen
            } else {
                Verdict::Fail
            },
            format!(
                "batch {:.1} s, jobs {} s mean, {} SMs reported to a job{note}",
                b.total_s,
                mean(&b.jobs_s).map_or_else(|| "-".to_owned(), |v| format!("{v:.1}")),
                shown(b.sms)
            ),
            if b.failed.is_empty() {
                b.detail.clone()
            } else {
                format!("jobs that failed:\n{}", b.failed.join("\n"))
            },
        ));
    }
    report.push(Check::new(
        "prologs and epilogs of the shares",
        if prologs.iter().chain(&epilogs).all(|r| r.ok) {
            Verdict::Pass
        } else {
            Verdict::Fail
        },
        format!(
            "prologs {}, epilogs {}",
            node_ms(&prologs),
            node_ms(&epilogs)
        ),
        node_detail.join("\n"),
    ));
    report.intro = Some(format!(
        "a batch of {JOBS} small CUDA jobs of one user on GPU 0, one after another, side by \
         side without MPS, and side by side in gpushare's MPS shares (the release \
         `gpu-mps-prolog`/`gpu-mps-epilog` driven with slurmd's environment, each task with \
         the environment the SPANK plugin gives it)."
    ));
    report.table = Some(table);
    Ok(())
}
