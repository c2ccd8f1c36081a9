//! Bursts of concurrent prologs and epilogs on one node: how long a burst
//! of N share starts (then ends) takes end to end, and how long each
//! program waited for the ledger's lock and held it, with the real
//! binaries (not in Slurm).
//!
//! `cargo bench -p gpushare-tests --bench node_bursts [-- ROUNDS N...]`
//! (build the release binaries first: `cargo build --release --workspace`;
//! default: 5 rounds of 32 and of 64).
//!
//! The node: 4 GPUs × 100 units, empty before each burst; every job a share
//! of 5 units (64 fit), placed by gpushare. Each burst: N `gpu-mps-prolog`
//! processes started at once, as slurmd starts the prologs of jobs it was
//! given together, each timed from its spawn to its exit; then N
//! `gpu-mps-epilog` the same way. Each program logs at its end what its
//! locks cost it (`lock_wait::summary`: the ledger's lock taken, waited
//! for, held): those lines, read from the syslog socket this bench listens
//! on, give each program's wait and hold. Twice: `MPSControl=none` (the
//! ledger alone) and with the compiled stand-in control program
//! (`testcluster::standin`; the GPUs' daemon locks too: a share's start
//! finds its GPU's daemon or starts it, a share's end asks it for the
//! job's clients and stops it after the last share). State on tmpfs
//! (/dev/shm), like /run on a real node; NVML's facts kept and fresh, as
//! on a GPU node after its first prolog (no NVML child).

use std::collections::BTreeMap;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use testcluster::bench_figures::{print_row, Key};

const UNITS: u32 = 5;

/// What one program run cost: its wall time, and the ledger lock's wait
/// and hold from its own line.
#[derive(Debug, Clone, Copy, Default)]
struct Run {
    wall: Duration,
    waited: Duration,
    held: Duration,
}

/// One burst: every program's run, and the burst from the first spawn
/// to the last exit.
struct Burst {
    runs: Vec<Run>,
    all: Duration,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn quantile(mut v: Vec<Duration>, q: f64) -> Duration {
    v.sort();
    let at = ((v.len() as f64 - 1.0) * q).round() as usize;
    v.get(at).copied().unwrap_or_default()
}

/// `the node's share ledger lock taken 1 time, waited 0.120 ms (at most
/// 0.120 ms), held 1.532 ms` in a line: (waited, held).
fn ledger_clause(line: &str) -> Option<(Duration, Duration)> {
    let clause = line.split("the node's share ledger lock taken ").nth(1)?;
    let number = |after: &str| -> Option<Duration> {
        let text = clause.split(after).nth(1)?;
        let n: f64 = text.split(' ').next()?.parse().ok()?;
        Some(Duration::from_secs_f64(n / 1e3))
    };
    Some((number("waited ")?, number("held ")?))
}

/// Runs `program` for every job of `jobs` at once; each run's wall time
/// and its ledger figures from the lines `log` collects.
fn burst(
    bin: &Path,
    program: &str,
    conf: &Path,
    jobs: &[u32],
    log: &Arc<Mutex<Vec<String>>>,
) -> Burst {
    log.lock().unwrap_or_else(|e| e.into_inner()).clear();
    let start = Instant::now();
    let waiters: Vec<_> = jobs
        .iter()
        .map(|&job| {
            let mut cmd = Command::new(bin.join(program));
            cmd.arg("--conf")
                .arg(conf)
                .env("SLURM_JOB_ID", job.to_string())
                .env("SLURM_JOB_UID", "1000")
                .env("SLURM_JOB_USER", "bob")
                .env("SPANK_GPUSHARE_MPS_UNITS", UNITS.to_string())
                // What slurmd says for 5 units of 400 (Count=1600, 4 GPUs).
                .env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "1")
                .env_remove("SLURMD_NODENAME")
                // Their lines go to the socket too; stderr is slurmd's.
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let spawned = Instant::now();
            let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
            let program = program.to_owned();
            std::thread::spawn(move || {
                let status = child.wait().unwrap_or_else(|e| panic!("{e}"));
                assert!(status.success(), "{program} of job {job}: {status}");
                (job, spawned.elapsed(), Instant::now())
            })
        })
        .collect();
    let ended: Vec<(u32, Duration, Instant)> = waiters
        .into_iter()
        .map(|w| w.join().unwrap_or_else(|_| panic!("a waiter panicked")))
        .collect();
    let last = ended.iter().map(|e| e.2).max().unwrap_or(start);
    // Each program's lines reach the socket before it exits; the reader
    // may lag a little behind.
    let deadline = Instant::now() + Duration::from_secs(10);
    let figures = loop {
        let lines = log.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut by_job = BTreeMap::new();
        for line in &lines {
            let Some(rest) = line.split("job ").nth(1) else {
                continue;
            };
            let Some((job, text)) = rest.split_once(": ") else {
                continue;
            };
            if let (Ok(job), Some(f)) = (job.parse::<u32>(), ledger_clause(text)) {
                by_job.insert(job, f);
            }
        }
        if by_job.len() >= jobs.len() || Instant::now() > deadline {
            break by_job;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(figures.len(), jobs.len(), "a lock line per {program}");
    let runs = ended
        .iter()
        .map(|&(job, wall, _)| {
            let (waited, held) = figures.get(&job).copied().unwrap_or_default();
            Run { wall, waited, held }
        })
        .collect();
    Burst {
        runs,
        all: last.duration_since(start),
    }
}

/// What `rounds` bursts of `what` came to, as a row's figures.
struct Summary {
    all_p50: Duration,
    all_max: Duration,
    wall_p50: Duration,
    wall_max: Duration,
    wait_p50: Duration,
    wait_max: Duration,
    held_p50: Duration,
    held_max: Duration,
}

fn summarize(bursts: &[Burst]) -> Summary {
    let runs: Vec<Run> = bursts.iter().flat_map(|b| b.runs.iter().copied()).collect();
    let pick = |f: fn(&Run) -> Duration| runs.iter().map(f).collect::<Vec<_>>();
    let all: Vec<Duration> = bursts.iter().map(|b| b.all).collect();
    Summary {
        all_p50: quantile(all.clone(), 0.5),
        all_max: quantile(all, 1.0),
        wall_p50: quantile(pick(|r| r.wall), 0.5),
        wall_max: quantile(pick(|r| r.wall), 1.0),
        wait_p50: quantile(pick(|r| r.waited), 0.5),
        wait_max: quantile(pick(|r| r.waited), 1.0),
        held_p50: quantile(pick(|r| r.held), 0.5),
        held_max: quantile(pick(|r| r.held), 1.0),
    }
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let mut sizes: Vec<u32> = args.filter_map(|a| a.parse().ok()).collect();
    if sizes.is_empty() {
        sizes = vec![32, 64];
    }
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("gpushare-bursts-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let bin = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent()?.parent().map(Path::to_path_buf))
        .unwrap_or_default();
    let syslog = dir.join("log.sock");
    let sink = UnixDatagram::bind(&syslog).unwrap_or_else(|e| panic!("{e}"));
    let log = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&log);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = sink.recv(&mut buf) {
            let line = String::from_utf8_lossy(buf.get(..n).unwrap_or_default()).into_owned();
            kept.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        }
    });
    // The stand-in as the control program and as nvidia-smi beside it
    // (ComputeMode=exclusive: a GPU's first share sets the mode, its last
    // gives it back).
    let standin =
        testcluster::standin::install(&dir.join("mps-bin")).unwrap_or_else(|e| panic!("{e}"));
    testcluster::standin::install_smi(&dir.join("mps-bin")).unwrap_or_else(|e| panic!("{e}"));
    let conf = |name: &str, control: &str| {
        let path = dir.join(name);
        let state = dir.join(name.replace(".conf", "-state"));
        std::fs::write(
            &path,
            format!(
                "UnitsPerGPU=100\nGPUDevices=/dev/null,/dev/zero,/dev/full,/dev/random\n\
                 StateDir={}\nMPSControl={control}\nSyslogSocket={}\n",
                state.display(),
                syslog.display()
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        // NVML's facts kept fresh, as on a GPU node after its first share:
        // no prolog starts an NVML child (here, with no NVIDIA driver, each
        // would ask in one of its own).
        testcluster::standin::keep_nvml_facts(&state, 4, 48_000).unwrap_or_else(|e| panic!("{e}"));
        (path, state)
    };
    let setups = [
        ("MPSControl=none", conf("none.conf", "none")),
        (
            "control program",
            conf("control.conf", &standin.display().to_string()),
        ),
    ];
    let cmd = format!(
        "cargo bench -p gpushare-tests --bench node_bursts -- {rounds} {}",
        sizes
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "\nbursts of concurrent prologs, then epilogs: 4 GPUs x 100 units, shares of {UNITS}, \
         state on {}, {rounds} rounds each",
        base.display()
    );
    let mut job = 100_000;
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let shares = |state: &Path| {
        gpushare::mps::ledger::Ledger::open(state, euid)
            .and_then(|l| l.snapshot())
            .map(|s| s.state.shares().count())
            .unwrap_or_else(|e| panic!("{e}"))
    };
    for (setup, (conf, state)) in &setups {
        // Untimed: the node's first prolog records the configuration (it
        // waits for a file this fresh to be still) and makes the ledger.
        let first = [job];
        job += 1;
        burst(&bin, "gpu-mps-prolog", conf, &first, &log);
        burst(&bin, "gpu-mps-epilog", conf, &first, &log);
        for &n in &sizes {
            let mut prologs = Vec::new();
            let mut epilogs = Vec::new();
            for _ in 0..rounds {
                let jobs: Vec<u32> = (job..job + n).collect();
                job += n;
                prologs.push(burst(&bin, "gpu-mps-prolog", conf, &jobs, &log));
                assert_eq!(shares(state), jobs.len(), "every share placed ({setup})");
                epilogs.push(burst(&bin, "gpu-mps-epilog", conf, &jobs, &log));
                assert_eq!(shares(state), 0, "every share released ({setup})");
            }
            for (program, bursts) in [("prologs", &prologs), ("epilogs", &epilogs)] {
                let s = summarize(bursts);
                let what = format!("{n} concurrent {program}, state on tmpfs, {setup}");
                let figures = format!(
                    "all done in {:.0} ms (p50 of {rounds} bursts; slowest {:.0} ms); each \
                     {:.1} ms p50, {:.1} ms at most; ledger lock waited {:.2} ms p50, {:.1} ms \
                     at most, held {:.2} ms p50, {:.2} ms at most",
                    ms(s.all_p50),
                    ms(s.all_max),
                    ms(s.wall_p50),
                    ms(s.wall_max),
                    ms(s.wait_p50),
                    ms(s.wait_max),
                    ms(s.held_p50),
                    ms(s.held_max)
                );
                println!("{what}: {figures}");
                print_row(
                    &what,
                    &figures,
                    &cmd,
                    &[
                        Key::lower("all", ms(s.all_p50), "ms"),
                        Key::lower("each", ms(s.wall_p50), "ms"),
                        Key::lower("slowest", ms(s.wall_max), "ms"),
                    ],
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    // The node programs' ledger pointers in /run/gpushare, for both setups.
    testcluster::cluster::forget_node_records(&dir);
}
