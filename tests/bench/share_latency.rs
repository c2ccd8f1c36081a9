//! What a share's start and end cost, where users feel it: from the
//! allocation to the job's first instruction, and from its last to the
//! node giving the resources back, beside Slurm alone and Slurm with a
//! trivial Prolog/Epilog.
//!
//! `cargo bench -p gpushare-tests --bench share_latency [-- SERIAL BURST ROUNDS]`
//! (defaults 20 50 3; `make bench` runs it).
//!
//! One cluster per configuration, all started first (the node of
//! `ClusterSpec::mps_node`, this machine's Slurm), then ROUNDS interleaved
//! rounds: in each, every configuration in turn runs SERIAL share jobs one
//! after the other (each submitted once the previous one is gone), then a
//! burst of BURST share jobs submitted at once. Every job is `--gres=mps:25`
//! and prints the time as its first and last command. Times:
//!
//! - allocation: slurmctld's `sched: Allocate JobId=N` log line (or the
//!   backfill scheduler's `Started JobId=N`);
//! - task start and task end: the job's own two time stamps;
//! - job gone: slurmctld's `cleanup_completing: JobId=N`
//!   (`DebugFlags=TraceJobs`), when it clears the job's COMPLETING state
//!   and the node's resources are free again: after the Epilog where there
//!   is one, at once where slurmd has nothing to run.
//!
//! Submission → end is not measured: 22.05 starts batch jobs on its
//! scheduler's tick, which hides everything else. All stamps are the same
//! clock at millisecond resolution (Slurm's log format).
//!
//! Configurations: Slurm alone (no Prolog, Epilog or SPANK plugin); a
//! trivial Prolog and Epilog (`/bin/true`) with the `PrologFlags` gpushare
//! uses on this release, and without any (what `PrologFlags=Alloc` costs);
//! gpushare with `MPSControl=none`, and the same without its SPANK plugin
//! (the node programs alone); gpushare with the compiled stand-in
//! control program (`tests/src/bin/mps-control-standin.rs`: a small
//! program's cost, so the figure shows gpushare's calls, not a shell's),
//! where each serial share is its GPU's first and last (the daemon started
//! and stopped for it), and again with a share held on every GPU all along
//! (the daemon running, as on a busy node; bursts then have 12 places, not
//! 16).
//!
//! gpushare's state is on tmpfs, as /run is on a node, with NVML's facts
//! kept and fresh, as on a GPU node after its first share (no NVML child).
//! `SHARE_LATENCY_ONLY="name;name"` runs only the configurations named
//! (to profile one alone, e.g. under `perf record -a`); their figures are
//! printed, not kept.
//!
//! Bursts on a small machine are CPU-bound, so each burst also counts the
//! machine's busy CPU time per job (`/proc/stat`): what each configuration
//! costs, wherever it runs.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpushare::shared::calendar::stamp_seconds;
use testcluster::bench_figures::{print_row, Key};
use testcluster::cluster::slurm_places_shares;
use testcluster::{Cluster, ClusterSpec};

/// Where the gpushare clusters keep their state: `/dev/shm/<cluster dir>`.
const SHM: &str = "/dev/shm";

const SCRIPT: &str = "#!/bin/bash\ndate +S%Y-%m-%dT%H:%M:%S.%3N\ndate +E%Y-%m-%dT%H:%M:%S.%3N\n";

/// Milliseconds since 1970 of a `YYYY-MM-DDTHH:MM:SS.mmm` stamp read as
/// UTC (Slurm and `date` both print local time: only differences matter).
fn stamp_ms(s: &str) -> Option<i64> {
    let secs = stamp_seconds(s.get(..19)?)?;
    let ms = s.get(20..23)?.parse::<i64>().ok()?;
    Some(secs * 1000 + ms)
}

/// The stamp that opens a Slurm log line: `[2026-11-23T19:05:02.123] ...`.
fn log_stamp(line: &str) -> Option<i64> {
    stamp_ms(line.strip_prefix('[')?)
}

/// The job id after `JobId=` or `StepId=` in a log line.
fn job_in(line: &str) -> Option<u32> {
    let at = line
        .find("JobId=")
        .map(|i| i + 6)
        .or_else(|| line.find("StepId=").map(|i| i + 7))?;
    let digits: String = line[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Lines of a growing log, read from where the last call stopped.
struct Tail {
    path: PathBuf,
    offset: u64,
}

impl Tail {
    fn new(path: PathBuf) -> Self {
        let offset = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        Self { path, offset }
    }

    fn lines(&mut self) -> Vec<String> {
        let Ok(mut f) = fs::File::open(&self.path) else {
            return Vec::new();
        };
        let mut text = String::new();
        if f.seek(SeekFrom::Start(self.offset)).is_err() || f.read_to_string(&mut text).is_err() {
            return Vec::new();
        }
        // Only whole lines; a half-written one is read next time.
        let whole = text.rfind('\n').map_or(0, |i| i + 1);
        self.offset += whole as u64;
        text[..whole].lines().map(str::to_owned).collect()
    }
}

/// The configuration the others are compared with.
const TRIVIAL: &str = "trivial Prolog/Epilog";

struct Config {
    name: &'static str,
    spec: ClusterSpec,
    standin: bool,
    /// Shares of 25 units held on each GPU for the whole run: every
    /// measured share finds its GPU's daemon running (a busy node), where
    /// without them each serial share starts and stops it.
    holders: bool,
}

fn configs() -> Vec<Config> {
    // gpushare needs PrologFlags=Alloc only where it places shares (see
    // docs/configuration.md); the trivial configuration uses the same flags.
    let flags: Vec<String> = if slurm_places_shares() {
        Vec::new()
    } else {
        vec!["PrologFlags=Alloc".into()]
    };
    let debug = vec![("DebugFlags".to_owned(), "TraceJobs".to_owned())];
    let mut gpushare = ClusterSpec {
        extra_slurm_conf: flags.clone(),
        conf_overrides: debug.clone(),
        ..ClusterSpec::mps_node()
    };
    // State on tmpfs, as /run is on a node (here /run is on disk).
    for (name, text) in &mut gpushare.extra_conf_files {
        if name == "gpu_mps.conf" {
            *text = text.replace(
                "StateDir={cluster}/run/",
                &format!("StateDir={SHM}{{cluster}}/"),
            );
        }
    }
    let plain = |prolog: Option<&str>, flags: Vec<String>| ClusterSpec {
        prolog: prolog.map(PathBuf::from),
        epilog: prolog.map(PathBuf::from),
        plugstack: Vec::new(),
        extra_slurm_conf: flags,
        ..gpushare.clone()
    };
    let mut standin = gpushare.clone();
    for (name, text) in &mut standin.extra_conf_files {
        if name == "gpu_mps.conf" {
            *text = text.replace(
                "MPSControl=none",
                "MPSControl={cluster}/mps-bin/nvidia-cuda-mps-control\nGPUMemory=48G",
            );
        }
    }
    let mut out = vec![
        Config {
            name: "Slurm alone",
            spec: plain(None, Vec::new()),
            standin: false,
            holders: false,
        },
        Config {
            name: TRIVIAL,
            spec: plain(Some("/bin/true"), flags.clone()),
            standin: false,
            holders: false,
        },
    ];
    if !flags.is_empty() {
        out.push(Config {
            name: "trivial, no PrologFlags",
            spec: plain(Some("/bin/true"), Vec::new()),
            standin: false,
            holders: false,
        });
    }
    out.push(Config {
        name: "gpushare, MPSControl=none",
        spec: gpushare.clone(),
        standin: false,
        holders: false,
    });
    // The node programs alone: what the SPANK plugin adds is the
    // difference from the row above.
    out.push(Config {
        name: "gpushare none, no SPANK",
        spec: ClusterSpec {
            plugstack: Vec::new(),
            ..gpushare
        },
        standin: false,
        holders: false,
    });
    out.push(Config {
        name: "gpushare, control program",
        spec: standin.clone(),
        standin: true,
        holders: false,
    });
    out.push(Config {
        name: "gpushare, control, daemons up",
        spec: standin,
        standin: true,
        holders: true,
    });
    out
}

/// One job's stamps, in ms.
#[derive(Debug, Default, Clone, Copy)]
struct Timeline {
    alloc: Option<i64>,
    start: Option<i64>,
    end: Option<i64>,
    gone: Option<i64>,
}

struct Bench<'a> {
    c: &'a Cluster,
    script: PathBuf,
    ctld: Tail,
    jobs: BTreeMap<u32, Timeline>,
    /// Jobs per second of each burst.
    bursts: Vec<f64>,
    /// CPU time of the whole machine per job of each burst, ms.
    cpu_per_job: Vec<f64>,
    serial: Vec<u32>,
}

impl<'a> Bench<'a> {
    fn new(c: &'a Cluster) -> Result<Self, String> {
        let script = c.jobs_dir.join("share.sh");
        fs::write(&script, SCRIPT).map_err(|e| e.to_string())?;
        Ok(Self {
            c,
            script,
            ctld: Tail::new(c.log_path("slurmctld")),
            jobs: BTreeMap::new(),
            bursts: Vec::new(),
            cpu_per_job: Vec::new(),
            serial: Vec::new(),
        })
    }

    fn submit(&mut self) -> Result<u32, String> {
        let id = self
            .c
            .sbatch(&["--gres=mps:25", &self.script.to_string_lossy()])?;
        self.jobs.insert(id, Timeline::default());
        Ok(id)
    }

    /// Reads the new log lines into the jobs' timelines.
    fn read_logs(&mut self) {
        for line in self.ctld.lines() {
            let (Some(t), Some(j)) = (log_stamp(&line), job_in(&line)) else {
                continue;
            };
            let job = self.jobs.entry(j).or_default();
            if line.contains("Allocate JobId=") || line.contains("Started JobId=") {
                job.alloc.get_or_insert(t);
            } else if line.contains("cleanup_completing: ") {
                job.gone.get_or_insert(t);
            }
        }
    }

    fn wait_gone(&mut self, ids: &[u32]) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.read_logs();
            if ids
                .iter()
                .all(|id| self.jobs.get(id).is_some_and(|t| t.gone.is_some()))
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "jobs {ids:?} not gone after 30 s: {:?}\n{}",
                    ids.iter()
                        .map(|id| self.c.job(*id).map(|j| j.state().to_owned()))
                        .collect::<Vec<_>>(),
                    self.c.log_tails(30)
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn round(&mut self, serial: usize, burst: usize) -> Result<(), String> {
        for _ in 0..serial {
            let id = self.submit()?;
            self.serial.push(id);
            self.wait_gone(&[id])?;
        }
        let cpu_before = busy_cpu_ms();
        let ids: Vec<u32> = (0..burst)
            .map(|_| self.submit())
            .collect::<Result<_, _>>()?;
        self.wait_gone(&ids)?;
        if let (Some(before), Some(after)) = (cpu_before, busy_cpu_ms()) {
            self.cpu_per_job
                .push((after - before) / burst.max(1) as f64);
        }
        self.read_stamps(&ids);
        // A refused share ends fast too: each job must have run its script,
        // or the figures would be a refusal's.
        if let Some(id) = ids.iter().find(|id| self.jobs[id].start.is_none()) {
            return Err(format!(
                "job {id} never ran its script (refused?): {}",
                self.c.job_output(*id)
            ));
        }
        let jobs = &self.jobs;
        let first = ids.iter().filter_map(|id| jobs[id].alloc).min();
        let last = ids.iter().filter_map(|id| jobs[id].gone).max();
        if let (Some(first), Some(last)) = (first, last) {
            self.bursts
                .push(burst as f64 * 1000.0 / (last - first).max(1) as f64);
        }
        Ok(())
    }

    /// The jobs' own stamps, from their output.
    fn read_stamps(&mut self, ids: &[u32]) {
        for id in ids {
            let out = self.c.job_output(*id);
            let get = |p: char| {
                out.lines()
                    .find_map(|l| l.strip_prefix(p))
                    .and_then(stamp_ms)
            };
            if let Some(t) = self.jobs.get_mut(id) {
                t.start = get('S');
                t.end = get('E');
            }
        }
    }

    /// (allocation → task start, task end → gone) of the serial jobs.
    fn serial_spans(&mut self) -> (Vec<i64>, Vec<i64>) {
        let ids = self.serial.clone();
        self.read_stamps(&ids);
        let mut start = Vec::new();
        let mut end = Vec::new();
        for id in &ids {
            let t = self.jobs[id];
            if let (Some(a), Some(s)) = (t.alloc, t.start) {
                start.push(s - a);
            }
            if let (Some(e), Some(g)) = (t.end, t.gone) {
                end.push(g - e);
            }
        }
        (start, end)
    }
}

/// CPU time every processor of the machine spent busy (user, nice,
/// system, irq, softirq, steal) since boot, ms, from `/proc/stat`. Over a
/// burst it counts everything the burst made run: sbatch, slurmctld,
/// slurmd, slurmstepd, the prolog and epilog, the job (the same in every
/// configuration) and the machine's idle background.
fn busy_cpu_ms() -> Option<f64> {
    let text = fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal
    let busy: u64 = [0, 1, 2, 5, 6, 7].iter().filter_map(|&i| f.get(i)).sum();
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (tick > 0).then(|| busy as f64 * 1000.0 / tick as f64)
}

fn quantile(v: &[i64], q: f64) -> i64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.get(((v.len().saturating_sub(1)) as f64 * q).round() as usize)
        .copied()
        .unwrap_or(-1)
}

fn median_f(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn main() -> Result<(), String> {
    let nums: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let serial = nums.first().copied().unwrap_or(20);
    let burst = nums.get(1).copied().unwrap_or(50);
    let rounds = nums.get(2).copied().unwrap_or(3);
    let mut configs = configs();
    // SHARE_LATENCY_ONLY="name;name": only those configurations (to profile
    // one alone); their rows are printed, not kept as make bench's figures.
    let only = std::env::var("SHARE_LATENCY_ONLY").ok();
    if let Some(only) = &only {
        configs.retain(|c| only.split(';').any(|o| c.name == o));
    }
    let mut clusters: Vec<Cluster> = Vec::new();
    for cfg in &configs {
        eprintln!("starting cluster: {}", cfg.name);
        let c = cfg.spec.start()?;
        // NVML's facts kept fresh, as on a GPU node after its first share:
        // gpushare's prologs then start no NVML child (on this machine,
        // with no NVIDIA driver, each would ask in one of its own).
        if cfg
            .spec
            .prolog
            .as_ref()
            .is_some_and(|p| p.ends_with("gpu-mps-prolog"))
        {
            let state = PathBuf::from(format!("{SHM}{}/gpu-mps", c.dir.display()));
            testcluster::standin::keep_nvml_facts(&state, 4, 48_000)?;
        }
        if cfg.standin {
            testcluster::standin::install(&c.dir.join("mps-bin"))?;
            // nvidia-smi beside it, as on a node: ComputeMode=exclusive
            // (the default) refuses a share where there is none.
            testcluster::standin::install_smi(&c.dir.join("mps-bin"))?;
        }
        if cfg.holders {
            for _ in 0..4 {
                let id =
                    c.sbatch_ok(&["--gres=mps:25", "--output=/dev/null", "--wrap=sleep 100000"])?;
                c.wait_job_state(id, &["RUNNING"], Duration::from_secs(60))?;
            }
        }
        clusters.push(c);
    }
    let shm: Vec<PathBuf> = clusters
        .iter()
        .map(|c| PathBuf::from(format!("{SHM}{}", c.dir.display())))
        .collect();
    let result = run(&configs, &clusters, (serial, burst, rounds), only.is_none());
    drop(clusters);
    for dir in shm {
        let _ = fs::remove_dir_all(&dir);
        // The emptied parents (/dev/shm/tmp), where nothing else is.
        for parent in dir.ancestors().skip(1).take_while(|p| *p != Path::new(SHM)) {
            let _ = fs::remove_dir(parent);
        }
    }
    result
}

fn run(
    configs: &[Config],
    clusters: &[Cluster],
    (serial, burst, rounds): (usize, usize, usize),
    figures: bool,
) -> Result<(), String> {
    let mut benches: Vec<Bench> = clusters.iter().map(Bench::new).collect::<Result<_, _>>()?;
    for round in 0..rounds {
        for (cfg, b) in configs.iter().zip(&mut benches) {
            let t = Instant::now();
            b.round(serial, burst)?;
            eprintln!(
                "round {round}: {:<28} {:5.1} s, burst {:5.1} jobs/s",
                cfg.name,
                t.elapsed().as_secs_f64(),
                b.bursts.last().copied().unwrap_or(0.0)
            );
        }
    }
    let version = clusters
        .first()
        .and_then(|c| c.run_ok("sinfo", &["-V"]).ok())
        .unwrap_or_default();
    println!(
        "\nshare start and end, {} ({}), {serial} serial + {burst}-job bursts × {rounds} interleaved rounds, ms",
        version.trim(),
        if slurm_places_shares() { "Slurm places shares" } else { "gpushare places shares, PrologFlags=Alloc" }
    );
    println!(
        "{:<28} {:>16} {:>16} {:>12} {:>12} {:>10} {:>12}",
        "configuration",
        "alloc→start p50/p90",
        "end→gone p50/p90",
        "+ms/share",
        "burst jobs/s",
        "vs trivial",
        "CPU ms/job"
    );
    let rows: Vec<(i64, i64, i64, i64, f64, f64)> = benches
        .iter_mut()
        .map(|b| {
            let (s, e) = b.serial_spans();
            (
                quantile(&s, 0.5),
                quantile(&s, 0.9),
                quantile(&e, 0.5),
                quantile(&e, 0.9),
                median_f(&b.bursts),
                median_f(&b.cpu_per_job),
            )
        })
        .collect();
    let trivial = configs
        .iter()
        .position(|c| c.name == TRIVIAL)
        .and_then(|i| rows.get(i))
        .copied()
        .unwrap_or_default();
    for (cfg, r) in configs.iter().zip(&rows) {
        println!(
            "{:<28} {:>9}/{:<6} {:>9}/{:<6} {:>+12} {:>12.1} {:>9.2}× {:>12.1}",
            cfg.name,
            r.0,
            r.1,
            r.2,
            r.3,
            (r.0 + r.2) - (trivial.0 + trivial.2),
            r.4,
            r.4 / trivial.4.max(f64::MIN_POSITIVE),
            r.5
        );
    }
    println!(
        "(+ms/share: median start + end over the trivial Prolog/Epilog row; burst: jobs/s from the \
         first allocation to the last job gone, median of the rounds; CPU ms/job: the whole \
         machine's busy CPU time over a burst, from its first submission to its last job gone, \
         per job)"
    );
    // make bench's summary lines.
    if !figures {
        return Ok(());
    }
    let cmd =
        format!("cargo bench -p gpushare-tests --bench share_latency -- {serial} {burst} {rounds}");
    for (cfg, r) in configs.iter().zip(&rows) {
        let ratio = r.4 / trivial.4.max(f64::MIN_POSITIVE);
        print_row(
            &format!("share start + end: {}", cfg.name),
            &format!(
                "alloc→start {} ms, end→gone {} ms (p50), {:+} ms/share vs trivial \
                 Prolog/Epilog; bursts {:.1} jobs/s = {ratio:.2}×, {:.1} CPU ms/job",
                r.0,
                r.2,
                (r.0 + r.2) - (trivial.0 + trivial.2),
                r.4,
                r.5
            ),
            &cmd,
            &[
                Key::lower("start", r.0 as f64, "ms"),
                Key::lower("end", r.2 as f64, "ms"),
                Key::higher("bursts", r.4, "jobs/s"),
                Key::higher("vs_trivial", ratio, "×"),
                Key::lower("cpu", r.5, "ms/job"),
            ],
        );
    }
    Ok(())
}
