//! Per-job placement cost on a node full of jobs, beside a shell prolog in
//! the style of SURF's MPS setup.
//!
//! `cargo bench -p gpushare-tests --bench placement [-- RUNS]`
//! (build the release binaries first: `cargo build --release --workspace`).
//!
//! The node: 4 GPUs × 100 units holding 36 jobs of 10 units. Measured:
//! 1. in-process `Ledger::place` (flock, read, choose, write temp, fsync,
//!    rename, fsync dir), each followed by an untimed release;
//! 2. the real `gpu-mps-prolog` process, as slurmd runs it (spawn included),
//!    each followed by an untimed `gpu-mps-epilog`; the same, alternately,
//!    with `MetricsFile=` and `DCGMJobMappingDir=` set (what metrics cost a
//!    prolog: the mapping files in the transaction, the counters and the
//!    metrics file under the ledger's lock after it);
//! 3. the shell prolog (`surf_style_prolog.sh`), spawn included, on the same
//!    number of jobs (no lock, no fsync: cheaper work than ours);
//! 4. a bare process start (`/bin/true`), the floor of any prolog, and
//!    the two programs' own starts (`--version`: exec, the dynamic loader,
//!    Rust's runtime, no work), which splits a share's cost into the
//!    programs' starts and their work;
//! 5. one share's prolog + epilog with `MPSControl=none` and with the
//!    compiled stand-in control program (`testcluster::standin`), its
//!    GPU's daemon already running (another share holds the GPU), and the
//!    number of control-program starts per share.
//!
//! NVML's facts are kept and fresh, as on a GPU node after its first
//! prolog (no NVML child).
//!
//! The prolog does what it does on a node: the trust checks (Slurm's
//! percentage against the claimed units), the ledger transaction with its
//! published status copy, a syslog line (to a socket this bench drains, as
//! /dev/log would be); no Slurm command on this path. State lives on tmpfs
//! (/dev/shm), like /run on a real node.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gpushare::mps::ledger::Ledger;
use testcluster::bench_figures::{print_row, Key};

const GPUS: u32 = 4;
const UNITS: u32 = 100;
const FULL: u32 = 36;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn run(cmd: &mut Command) -> Duration {
    let t = Instant::now();
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let took = t.elapsed();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

fn main() {
    let runs: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(300);
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("gpushare-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // The ledger wants its directory owned by the caller (root, as on a node).
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let state = dir.join("state");
    let ledger = Ledger::open(&state, euid).unwrap_or_else(|e| panic!("{e}"));
    for job in 1..=FULL {
        ledger
            .place(job, 1000, "alice", 10, GPUS, UNITS)
            .unwrap_or_else(|e| panic!("{e}"));
    }

    // 1. In-process transaction.
    let inproc: Vec<Duration> = (0..runs * 10)
        .map(|i| {
            let job = 10_000 + i as u32;
            let t = Instant::now();
            let placed = ledger.place(job, 1000, "bob", 10, GPUS, UNITS);
            let took = t.elapsed();
            assert!(placed.is_ok());
            let _ = ledger.release(job);
            took
        })
        .collect();

    // 2. The real prolog binary (any char devices do as the 4 "GPUs").
    let bin = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent()?.parent().map(Path::to_path_buf))
        .unwrap_or_default();
    let conf = dir.join("gpu_mps.conf");
    let syslog = dir.join("log.sock");
    let sink = std::os::unix::net::UnixDatagram::bind(&syslog).unwrap_or_else(|e| panic!("{e}"));
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while sink.recv(&mut buf).is_ok() {}
    });
    std::fs::write(&conf, format!("UnitsPerGPU={UNITS}\nGPUDevices=/dev/null,/dev/zero,/dev/full,/dev/random\nStateDir={}\nMPSControl=none\nSyslogSocket={}\n", state.display(), syslog.display()))
        .unwrap_or_else(|e| panic!("{e}"));
    let conf_metrics = dir.join("gpu_mps_metrics.conf");
    std::fs::create_dir_all(dir.join("textfile")).unwrap_or_else(|e| panic!("{e}"));
    let plain = std::fs::read_to_string(&conf).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        &conf_metrics,
        format!(
            "{plain}MetricsFile={}\nDCGMJobMappingDir={}\n",
            dir.join("textfile/gpushare.prom").display(),
            dir.join("dcgm").display()
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // The compiled stand-in control program (a small program's cost): the
    // GPU's daemon started by its first share, probed by every later one.
    let standin =
        testcluster::standin::install(&dir.join("mps-bin")).unwrap_or_else(|e| panic!("{e}"));
    // nvidia-smi beside it, as on a node: ComputeMode=exclusive (the
    // default) sets each served GPU's mode with it, and refuses the share
    // where there is none.
    testcluster::standin::install_smi(&dir.join("mps-bin")).unwrap_or_else(|e| panic!("{e}"));
    let conf_mps = dir.join("gpu_mps_control.conf");
    std::fs::write(
        &conf_mps,
        plain.replace(
            "MPSControl=none",
            &format!("MPSControl={}\nGPUMemory=48G", standin.display()),
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // NVML's facts kept fresh, as on a GPU node after its first prolog or
    // timer run: a share's prolog takes them and starts no NVML child.
    testcluster::standin::keep_nvml_facts(&state, GPUS, 48_000).unwrap_or_else(|e| panic!("{e}"));
    let calls_file = dir.join("mps-bin/standin.calls");
    let calls = || {
        std::fs::read_to_string(&calls_file)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    let job_cmd = |prog: &str, job: u32, conf: &Path| {
        let mut c = Command::new(bin.join(prog));
        c.arg("--conf")
            .arg(conf)
            .env("SLURM_JOB_ID", job.to_string())
            .env("SLURM_JOB_UID", "1000")
            .env("SLURM_JOB_USER", "bob")
            .env("SPANK_GPUSHARE_MPS_UNITS", "10")
            // What slurmd says for 10 units of 400 (Count=1600, 4 GPUs).
            .env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "2")
            .env_remove("SLURMD_NODENAME");
        c
    };
    let mut epilogs = Vec::with_capacity(runs);
    let mut with_metrics = Vec::with_capacity(runs);
    let mut process = Vec::with_capacity(runs);
    let mut pairs = Vec::with_capacity(runs);
    let mut pairs_mps = Vec::with_capacity(runs);
    // The first share on its GPU starts the daemon (untimed): from then on
    // the GPU always holds a share, as on a busy node.
    run(&mut job_cmd("gpu-mps-prolog", 19_999, &conf_mps));
    let calls_before = calls();
    // The prolog without metrics, then with them, each followed by an
    // epilog of the same configuration; then a share with the control
    // program.
    // A prolog that refuses a share exits 0 too (the job's SPANK plugin
    // stops it): each timed prolog must have placed its share, or the
    // figures would be a refusal's.
    let placed = |job: u32| {
        let held = ledger.snapshot().unwrap_or_else(|e| panic!("{e}")).state;
        assert!(
            held.share(job).is_some() && !state.join(format!("refused.{job}")).exists(),
            "job {job}'s prolog placed no share (refused: {:?})",
            std::fs::read_to_string(state.join(format!("refused.{job}")))
        );
    };
    // Each configuration in a block of its own: a node's prolog records the
    // gpu_mps.conf it found where that changed (a file on disk, fsynced),
    // which alternating files would make every run do.
    for i in 0..runs {
        let job = 20_000 + 3 * i as u32;
        let p = run(&mut job_cmd("gpu-mps-prolog", job, &conf));
        placed(job);
        let e = run(&mut job_cmd("gpu-mps-epilog", job, &conf));
        process.push(p);
        epilogs.push(e);
        pairs.push(p + e);
    }
    for i in 0..runs {
        let job = 20_001 + 3 * i as u32;
        with_metrics.push(run(&mut job_cmd("gpu-mps-prolog", job, &conf_metrics)));
        placed(job);
        run(&mut job_cmd("gpu-mps-epilog", job, &conf_metrics));
    }
    for i in 0..runs {
        let job = 20_002 + 3 * i as u32;
        let p = run(&mut job_cmd("gpu-mps-prolog", job, &conf_mps));
        placed(job);
        pairs_mps.push(p + run(&mut job_cmd("gpu-mps-epilog", job, &conf_mps)));
    }
    let calls_per_pair = (calls() - calls_before) as f64 / runs as f64;
    // The shares of the control program's configuration were served by a
    // daemon: its program was run, or the figure is MPSControl=none's.
    assert!(
        calls() > 0,
        "the control program ({}) was never run",
        standin.display()
    );
    run(&mut job_cmd("gpu-mps-epilog", 19_999, &conf_mps));
    let bare: Vec<Duration> = (0..runs)
        .map(|_| run(&mut Command::new("/bin/true")))
        .collect();
    // The two programs' own starts, no work (`--version`): what a share
    // would cost if the prolog and epilog did nothing, the floor of any
    // dynamically linked Rust program above /bin/true's.
    let starts: Vec<Duration> = (0..runs)
        .map(|_| {
            run(Command::new(bin.join("gpu-mps-prolog")).arg("--version"))
                + run(Command::new(bin.join("gpu-mps-epilog")).arg("--version"))
        })
        .collect();

    // 3. The shell prolog, on a node with the same 36 jobs.
    let shell_state = dir.join("shell");
    for job in 1..=FULL {
        let gpu = job % GPUS;
        std::fs::create_dir_all(shell_state.join(format!("gpu{gpu}")))
            .unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(shell_state.join(format!("gpu{gpu}/{job}")), "alice\n")
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/surf_style_prolog.sh");
    let shell: Vec<Duration> = (0..runs)
        .map(|i| {
            let job = 30_000 + i as u32;
            let took = run(Command::new("bash")
                .arg(&script)
                .env("STATE_DIR", &shell_state)
                .env("SLURM_JOB_ID", job.to_string())
                .env("SLURM_JOB_USER", "bob"));
            for g in 0..GPUS {
                let _ = std::fs::remove_file(shell_state.join(format!("gpu{g}/{job}")));
            }
            let _ = std::fs::remove_file(shell_state.join(format!("job_{job}.env")));
            took
        })
        .collect();

    let (a, b, c) = (median(inproc), median(process), median(shell));
    let (e, t) = (median(epilogs), median(bare));
    let own = median(starts);
    let m = median(with_metrics);
    println!(
        "\nplacement on a node of {GPUS} GPUs x {UNITS} units holding {FULL} jobs, state on {}",
        base.display()
    );
    println!(
        "{:<48} {:>12} {:>14} {:>14}",
        "what", "median us", "shell / this", "this / bare"
    );
    let row = |what: &str, d: Duration| {
        println!(
            "{what:<48} {:>12.1} {:>13.1}x {:>13.1}x",
            us(d),
            us(c) / us(d),
            us(d) / us(t)
        );
    };
    row("Ledger::place in-process (lock+read+choose+write)", a);
    row("gpu-mps-prolog process (as slurmd runs it)", b);
    row("gpu-mps-prolog, MetricsFile + DCGMJobMappingDir", m);
    row("gpu-mps-epilog process (as slurmd runs it)", e);
    row("surf-style shell prolog (no lock, no fsync)", c);
    row("bare process start (/bin/true)", t);
    let (pair, pair_mps) = (median(pairs), median(pairs_mps));
    println!(
        "one share's prolog + epilog: {:.0} us = {:.2}x two bare process starts (MPSControl=none); \
         with the control program {:.0} us = {:.2}x ({calls_per_pair:.1} control-program starts per share, \
         its GPU's daemon running)",
        us(pair),
        us(pair) / (2.0 * us(t)),
        us(pair_mps),
        us(pair_mps) / (2.0 * us(t)),
    );
    println!(
        "prolog + epilog = {:.2}x two bare process starts; the shell prolog alone = {:.1}x the gpushare prolog",
        (us(b) + us(e)) / (2.0 * us(t)),
        us(c) / us(b)
    );
    println!(
        "the two programs' own starts (--version, no work): {:.0} us = {:.2}x two bare process \
         starts; their work for one share: {:.0} us",
        us(own),
        us(own) / (2.0 * us(t)),
        us(pair) - us(own)
    );
    println!(
        "metrics file and DCGM mapping add {:.0} us to the prolog ({:+.1} %)",
        us(m) - us(b),
        (us(m) / us(b) - 1.0) * 100.0
    );
    // make bench's summary lines.
    let cmd = format!("cargo bench -p gpushare-tests --bench placement -- {runs}");
    let (pair_ms, pair_x) = (us(pair) / 1000.0, us(pair) / (2.0 * us(t)));
    print_row(
        "node programs: one share's prolog + epilog, state on tmpfs",
        &format!(
            "{pair_ms:.2} ms = {pair_x:.2}× two bare process starts (bare {:.2} ms; \
             the two programs' own starts {:.2} ms = {:.2}×, their work {:.2} ms; \
             MPSControl=none, no control program started)",
            us(t) / 1000.0,
            us(own) / 1000.0,
            us(own) / (2.0 * us(t)),
            (us(pair) - us(own)) / 1000.0
        ),
        &cmd,
        &[
            Key::lower("pair", pair_ms, "ms"),
            Key::lower("vs_bare", pair_x, "×"),
            Key::lower("work", (us(pair) - us(own)) / 1000.0, "ms"),
        ],
    );
    let (mps_ms, mps_x) = (us(pair_mps) / 1000.0, us(pair_mps) / (2.0 * us(t)));
    print_row(
        "node programs, with the control program (daemon running)",
        &format!(
            "{mps_ms:.2} ms = {mps_x:.2}× two bare process starts; {calls_per_pair:.1} \
             control-program start per share"
        ),
        &cmd,
        &[
            Key::lower("pair", mps_ms, "ms"),
            Key::lower("vs_bare", mps_x, "×"),
            Key::lower("calls", calls_per_pair, "starts"),
        ],
    );
    print_row(
        "share placement in process, node of 36 shares",
        &format!(
            "Ledger::place {:.0} µs vs SURF-style shell prolog {:.1} ms ({:.0}×)",
            us(a),
            us(c) / 1000.0,
            us(c) / us(a)
        ),
        &cmd,
        &[Key::lower("place", us(a), "µs")],
    );
    let _ = std::fs::remove_dir_all(&dir);
    // What the node programs keep on the host for the three
    // configurations (their ledgers' pointers in /run/gpushare).
    testcluster::cluster::forget_node_records(&dir);
}
