//! What the node timer's per-share figures cost (`gpu-mps metrics
//! --write`, once a minute): CPU time per run on a node of 8 GPUs and 48
//! shares, against the budget of 50 ms of CPU per node per minute.
//!
//! `cargo bench -p gpushare-tests --bench share_usage [-- RUNS]`
//!
//! The node: 8 GPUs, 6 shares of 16 units on each, two processes per
//! share (96 processes, each with memory and two SM samples) and an MPS
//! server per GPU. Measured, as CPU time (`getrusage`, this process and
//! its children):
//! 1. the core alone: the NVML child's text parsed, each process mapped
//!    to its share by a Slurm-shaped cgroup text, the metrics rendered;
//! 2. one sampling as the timer runs it, NVML aside: the compiled
//!    stand-in started as the NVML child (`testcluster::standin`, a small
//!    program's start, in place of `gpu-mps --nvml-usage`) printing that
//!    text, each pid's `/proc` read (this machine's processes: none is in
//!    a job's cgroup, so each is mapped and found in none), root's
//!    `slurmstepd` processes looked for in `/proc`, the figures made and
//!    the metrics rendered. NVML's own cost (`nvmlInit`, the driver calls)
//!    is the GPU's, measured with `make bench-gpu` where a GPU is lent.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use gpushare::mps::ledger::{LedgerState, ShareRecord};
use gpushare::mps::metrics::{render_for, Counters};
use gpushare::mps::node::share_figures;
use gpushare::mps::status::NodeStatus;
use gpushare::mps::usage::{
    self, gpu_block, Anchors, GpuAnswer, GpuSample, ProcessFacts, ProcessList, ProcessSample,
    UtilSample,
};
use gpushare::shared::bounded;
use testcluster::bench_figures::{print_row, Key};

const GPUS: u32 = 8;
const SHARES_PER_GPU: u32 = 6;
const UNITS: u32 = 16;
const PROCS_PER_SHARE: u32 = 2;
const BUDGET_MS: f64 = 50.0;

/// CPU time used so far by this process and its waited-for children.
fn cpu() -> Duration {
    let usage = |who| {
        // SAFETY: getrusage writes the struct it is given, owned here.
        let mut r: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: as above; RUSAGE_SELF and RUSAGE_CHILDREN are valid.
        unsafe { libc::getrusage(who, &mut r) };
        let t = |tv: libc::timeval| {
            Duration::from_secs(tv.tv_sec as u64) + Duration::from_micros(tv.tv_usec as u64)
        };
        t(r.ru_utime) + t(r.ru_stime)
    };
    usage(libc::RUSAGE_SELF) + usage(libc::RUSAGE_CHILDREN)
}

/// The node's shares: job 1000 + n, uid 2000 + n.
fn ledger() -> LedgerState {
    let mut state = LedgerState::new();
    for n in 0..GPUS * SHARES_PER_GPU {
        state.insert_share(ShareRecord {
            job: 1000 + n,
            uid: 2000 + n,
            user: format!("user{n}"),
            gpu: n / SHARES_PER_GPU,
            units: UNITS,
            since: 0,
            placed_by_slurm: true,
            memory_mib: None,
            clients: Some(PROCS_PER_SHARE),
            sluid: None,
        });
    }
    state
}

/// The NVML child's text for the node, its processes given the pids
/// `pid(share, process)`, each GPU's MPS server `server(gpu)`.
fn child_text(pid: &dyn Fn(u32, u32) -> u32, server: &dyn Fn(u32) -> u32) -> String {
    (0..GPUS)
        .map(|gpu| {
            let shares = gpu * SHARES_PER_GPU..(gpu + 1) * SHARES_PER_GPU;
            let pids: Vec<u32> = shares
                .flat_map(|s| (0..PROCS_PER_SHARE).map(move |p| (s, p)))
                .map(|(s, p)| pid(s, p))
                .chain([server(gpu)])
                .collect();
            let sample = GpuSample {
                index: gpu,
                minor: Some(gpu),
                used_bytes: Some(80 << 30),
                total_bytes: Some(80 << 30),
                processes: pids
                    .iter()
                    .map(|&pid| ProcessSample {
                        pid,
                        memory_bytes: Some(1 << 30),
                        list: ProcessList::Compute,
                    })
                    .collect(),
                utilization: Some(
                    pids.iter()
                        .flat_map(|&pid| {
                            (0..2).map(move |i| UtilSample {
                                pid,
                                sm_percent: 10 + i,
                                timestamp_us: 1_700_000_000_000_000 + u64::from(i),
                            })
                        })
                        .collect(),
                ),
            };
            gpu_block(&GpuAnswer::Answered(sample))
        })
        .collect()
}

fn render(state: &LedgerState, shares: &[usage::ShareUse]) -> String {
    let view = NodeStatus::of(state, GPUS, 100, Vec::new());
    render_for(&view, &Counters::default(), true, shares)
}

/// CPU time per run of `f` over `runs` runs, in ms.
fn per_run(runs: usize, mut f: impl FnMut() -> usize) -> (f64, usize) {
    let mut out = f();
    let before = cpu();
    for _ in 0..runs {
        out = f();
    }
    ((cpu() - before).as_secs_f64() * 1e3 / runs as f64, out)
}

fn main() {
    let runs: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let state = ledger();
    let cmd = "cargo bench -p gpushare-tests --bench share_usage";

    // 1. The core, with Slurm-shaped cgroups (cgroup v2, 23.11's layout).
    let scope = "/system.slice/slurmstepd.scope";
    let pid = |s: u32, p: u32| 100_000 + s * 10 + p;
    let text = child_text(&pid, &|gpu| 90_000 + gpu);
    let mut facts = BTreeMap::new();
    for s in 0..GPUS * SHARES_PER_GPU {
        for p in 0..PROCS_PER_SHARE {
            let cgroup = format!("0::{scope}/job_{}/step_0/user/task_{p}\n", 1000 + s);
            facts.insert(
                pid(s, p),
                ProcessFacts {
                    uid: 2000 + s,
                    cgroup,
                },
            );
        }
    }
    for gpu in 0..GPUS {
        let cgroup = "0::/system.slice/gpushare.service\n".to_owned();
        facts.insert(90_000 + gpu, ProcessFacts { uid: 0, cgroup });
    }
    let anchors = Anchors {
        v1_prepends: Vec::new(),
        v2_scopes: vec![scope.to_owned()],
        ..Anchors::default()
    };
    let (core_ms, figures) = per_run(runs * 10, || {
        let report = usage::parse(&text);
        let gpus: Vec<(u32, &GpuSample)> = report
            .gpus
            .iter()
            .filter_map(|g| match g {
                GpuAnswer::Answered(s) => Some((s.index, s)),
                GpuAnswer::Failed { .. } => None,
            })
            .collect();
        let got = usage::attribute(&gpus, &state, 100, &facts, &anchors);
        assert!(got.shares.iter().all(|s| s.memory_bytes == Some(2 << 30)));
        render(&state, &got.shares).len() + got.shares.len()
    });
    assert!(figures > 0);
    println!(
        "core: {} GPUs, {} shares, {} processes: {:.3} ms CPU per run",
        GPUS,
        GPUS * SHARES_PER_GPU,
        GPUS * (SHARES_PER_GPU * PROCS_PER_SHARE + 1),
        core_ms
    );

    // 2. One sampling as the timer runs it, the stand-in as NVML's child.
    let dir = std::env::temp_dir().join(format!("gpushare-bench-usage-{}", std::process::id()));
    let program = testcluster::standin::install_nvml_usage(&dir)
        .unwrap_or_else(|e| panic!("the stand-in: {e}"));
    let here: Vec<u32> = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    assert!(!here.is_empty(), "no process in /proc");
    let real = |i: u32| here[i as usize % here.len()];
    let text = child_text(&|s, p| real(s * PROCS_PER_SHARE + p), &|gpu| {
        real(1000 + gpu)
    });
    std::fs::write(dir.join("nvml-usage"), &text).unwrap_or_else(|e| panic!("{e}"));
    let (timer_ms, written) = per_run(runs, || {
        let mut child = Command::new(&program);
        child.arg("--nvml-usage");
        let ran = bounded::run_partial(child, Duration::from_secs(5), bounded::OUTPUT_LIMIT)
            .unwrap_or_else(|e| panic!("{e}"));
        let report = usage::parse(&ran.stdout);
        let gpu_of = |a: &GpuAnswer| Some(a.index());
        let (shares, lines) = share_figures(&report, &state, 100, gpu_of, None);
        assert!(lines.is_empty(), "{lines:?}");
        render(&state, &shares).len()
    });
    assert!(written > 0);
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "one sampling, NVML aside (stand-in child, /proc reads of {} processes of {} here): \
         {timer_ms:.2} ms CPU per run",
        GPUS * (SHARES_PER_GPU * PROCS_PER_SHARE + 1),
        here.len()
    );
    print_row(
        "per-share GPU use, core: 8 GPUs × 48 shares (parse, map, render)",
        &format!(
            "{core_ms:.3} ms CPU per run ({:.1} % of the 50 ms budget)",
            core_ms / BUDGET_MS * 100.0
        ),
        cmd,
        &[Key::lower("cpu", core_ms, "ms")],
    );
    print_row(
        "per-share GPU use, one node-timer sampling, NVML aside (stand-in child, /proc)",
        &format!(
            "{timer_ms:.2} ms CPU per run ({:.0} % of the 50 ms budget)",
            timer_ms / BUDGET_MS * 100.0
        ),
        cmd,
        &[Key::lower("cpu", timer_ms, "ms")],
    );
}
