//! The driver-API client (`gpu-mps selftest`, no CUDA toolkit needed) on
//! GPU 0, beside the nvcc-built client where nvcc exists: what it saw, and
//! its SM figures held against the nvcc client's (they must agree: that is
//! how a real GPU shows the driver-API client right).
//!
//! Also the nvcc client's build: optional, since production GPU nodes
//! carry the driver and no toolkit; without nvcc every check that needs
//! the client says "not run: no nvcc" and the rest still run and count.

use super::*;
use gpushare::mps::selftest::GpuCheck;

/// What the checks that need the nvcc client say where there is none.
pub const NO_NVCC: &str = "not run: no nvcc";

/// The checks that need the nvcc client, as the report names them where
/// there is none.
pub const NVCC_CHECKS: [&str; 9] = [
    "client without MPS (no daemon at its pipe directory)",
    "a share's client: daemon, MPS, memory limit, SMs, kernel time, limits on the live server, a second user's share",
    "a share's client and the GPU's UUID",
    "a client without MPS beside another user's server (DEFAULT, EXCLUSIVE_PROCESS)",
    "MultiUser=yes: two users' clients at once (DEFAULT, exclusive)",
    "the daemon killed with kill -9, restarted by the next prolog",
    "a share's task that raises or unsets its limits",
    "ComputeMode=exclusive: two tasks, a third over its limit, terminate_client",
    "the driver-API client against the nvcc client: SMs",
];

/// How long `gpu-mps selftest` may take (two clients of at most a minute
/// each, a daemon's start and stop).
const SELFTEST_TIMEOUT: Duration = Duration::from_secs(300);
/// The share the driver-API client stands for, and the nvcc client's share
/// it is held against: a quarter of GPU 0.
const UNITS: u32 = 25;
/// The job of the nvcc client's share in the cross-check.
const CROSS_JOB: u32 = 801;

/// nvcc, where installed (PATH, then CUDA's default place).
pub fn nvcc() -> Option<PathBuf> {
    find_program("nvcc")
        .or_else(|| Some(PathBuf::from("/usr/local/cuda/bin/nvcc")).filter(|p| p.is_file()))
}

/// Compiles `tests/hw-check/client.cu` (both its modes: the timed client,
/// `bench`) into `dir/client` where nvcc exists: the client, or
/// `None` without nvcc, and how it went (for the report).
pub fn build_client(dir: &Path) -> Result<(Option<PathBuf>, String), String> {
    let Some(nvcc) = nvcc() else {
        return Ok((
            None,
            "nvcc (CUDA's compiler) is not installed: the checks that need client.cu say \
             \"not run: no nvcc\"; gpu-mps selftest's driver-API client needs none"
                .into(),
        ));
    };
    let source = dir.join("client.cu");
    let client = dir.join("client");
    fs::write(&source, CLIENT_SOURCE).map_err(|e| e.to_string())?;
    let compile = |extra: &[&str]| {
        let mut cmd = Command::new(&nvcc);
        cmd.args(["-O2", "-o"])
            .arg(&client)
            .arg(&source)
            .args(extra);
        bounded::run(cmd, None, NVCC_TIMEOUT).map_err(|e| e.to_string())
    };
    // CUDA's MPS attribute comes from the driver API (libcuda, CUDA
    // 12.4+); without it (older CUDA, no unversioned libcuda.so to link)
    // the client still runs, and the check relies on the daemon's client
    // list instead.
    let ran = compile(&["-lcuda"])?;
    let mut compiled = format!(
        "{} -O2 ... -lcuda (modes: timed, bench): {}",
        nvcc.display(),
        ran.status
    );
    if !ran.status.success() {
        let again = compile(&["-DNO_MPS_ATTRIBUTE"])?;
        compiled = format!(
            "{compiled}\n{}\nagain with -DNO_MPS_ATTRIBUTE (no CUDA MPS attribute): {}",
            ran.stderr.trim(),
            again.status
        );
        if !again.status.success() {
            return Err(format!("nvcc: {}", one_line(&again.stderr)));
        }
    }
    Ok((Some(client), compiled))
}

/// `gpu-mps selftest --json`'s answer, as much as the check reads.
#[derive(Debug, Deserialize)]
pub struct Answer {
    pub library: String,
    pub user: String,
    pub units: u32,
    pub gpus: Vec<GpuResult>,
}

/// One GPU's line of the answer.
#[derive(Debug, Deserialize)]
pub struct GpuResult {
    pub gpu: u32,
    pub result: String,
    #[serde(default)]
    pub why: Vec<String>,
    pub check: Option<GpuCheck>,
}

/// `13000` as `13.0`.
fn cuda_version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// The report's line for the driver-API client: pass where `gpu-mps
/// selftest` exited 0 and GPU 0 passed, with every figure the clients saw.
pub fn judge(exit: Option<i32>, answer: &Answer) -> (Verdict, String) {
    let Some(g) = answer.gpus.iter().find(|g| g.gpu == 0) else {
        return (
            Verdict::Fail,
            format!("exit {}; no line for GPU 0", shown(exit)),
        );
    };
    let mut parts = vec![format!(
        "exit {}: {}{} (a share of {} units, as {}, {})",
        shown(exit),
        g.result,
        if g.why.is_empty() {
            String::new()
        } else {
            format!(": {}", g.why.join("; "))
        },
        answer.units,
        answer.user,
        answer.library
    )];
    if let Some(c) = &g.check {
        let sh = &c.share;
        let allocs = sh
            .allocations
            .iter()
            .map(|a| format!("{} MiB {}", a.mib, a.error.as_deref().unwrap_or("ok")))
            .collect::<Vec<_>>()
            .join(", ");
        parts.push(format!(
            "share client: {} SMs, kernel on {} SMs, cuMemGetInfo {}, allocations {}, context {} ms{}",
            shown(sh.sms),
            shown(sh.kernel_sms),
            sh.mem_info_mib
                .map_or_else(|| "-".into(), |(f, t)| format!("{f}/{t} MiB free")),
            or(&allocs, "none"),
            shown(sh.context_ms),
            sh.context_error
                .as_ref()
                .map(|e| format!(" (context: {e})"))
                .unwrap_or_default()
        ));
        let by = &c.bypass;
        parts.push(format!(
            "bypass client (no MPS variables): GPU of {} SMs, {} MiB, context {}",
            shown(by.sms),
            shown(by.memory_mib),
            match (&by.context_error, by.context_tried) {
                (Some(e), _) => format!("refused ({e})"),
                (None, true) => "STARTED".into(),
                (None, false) => "not tried".into(),
            }
        ));
        parts.push(format!(
            "PTX target {}, driver {}, MPS attribute {}; {} ms in all",
            sh.ptx_target.as_deref().unwrap_or("-"),
            sh.driver.map_or_else(|| "-".into(), cuda_version),
            shown(sh.mps),
            c.ms
        ));
    }
    let ok = exit == Some(0) && g.result == "pass";
    (verdict(ok), parts.join("; "))
}

/// Whether the driver-API client's SM figures agree with the nvcc
/// client's: the share's SMs (both ask CUDA's `MULTIPROCESSOR_COUNT` in a
/// share of [`UNITS`]) must be equal, and so must the whole GPU's where
/// both saw it. `None` where nothing can be compared.
pub fn sms_agree(
    driver_share: Option<u32>,
    nvcc_share: Option<u32>,
    driver_whole: Option<u32>,
    nvcc_whole: Option<u32>,
) -> Option<(bool, String)> {
    let share = driver_share.zip(nvcc_share);
    let whole = driver_whole.zip(nvcc_whole);
    if share.is_none() && whole.is_none() {
        return None;
    }
    let mut ok = share.is_some();
    let mut said = Vec::new();
    match share {
        Some((d, n)) => {
            ok &= d == n;
            said.push(format!(
                "a {UNITS}-unit share: driver-API client {d} SMs, nvcc client {n}"
            ));
        }
        None => said.push(format!(
            "a {UNITS}-unit share: driver-API client {}, nvcc client {} (nothing to compare)",
            shown(driver_share),
            shown(nvcc_share)
        )),
    }
    if let Some((d, n)) = whole {
        ok &= d == n;
        said.push(format!(
            "the whole GPU: driver-API client {d} SMs, nvcc client without MPS {n}"
        ));
    }
    Some((ok, said.join("; ")))
}

/// Runs `gpu-mps selftest` on GPU 0 (ComputeMode=exclusive, so the bypass
/// client must be refused) and, where the nvcc client exists, the nvcc
/// client in a share of the same size and without MPS, to compare.
pub fn driver_api(s: &mut Setup, report: &mut Report) {
    let conf = s.conf_exclusive.clone();
    let md = s.dir.join("selftest-report.md");
    let gpu_mps = s.bin.join("gpu-mps");
    let args: Vec<String> = [
        "--conf",
        &conf.to_string_lossy(),
        "selftest",
        "--gpu",
        "0",
        "--units",
        &UNITS.to_string(),
        "--json",
        "--report",
        &md.to_string_lossy(),
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect();
    let mut cmd = Command::new(&gpu_mps);
    cmd.args(&args);
    let started = Instant::now();
    let ran = bounded::run(cmd, None, SELFTEST_TIMEOUT);
    let ms = started.elapsed().as_millis();
    let mut detail = format!("$ {} {} [{ms} ms]\n", gpu_mps.display(), args.join(" "));
    let name = "gpu-mps selftest: the driver-API client (no nvcc)";
    let answer = match &ran {
        Ok(r) => {
            detail.push_str(&format!("{}\n{}{}", r.status, r.stdout, r.stderr));
            let exit = r.status.code();
            match serde_json::from_str::<Answer>(r.stdout.trim()) {
                Ok(a) => {
                    let (v, summary) = judge(exit, &a);
                    if let Ok(text) = fs::read_to_string(&md) {
                        detail.push_str(&format!("\n{}:\n{text}", md.display()));
                    }
                    report.push(Check::new(name, v, summary, detail));
                    Some(a)
                }
                Err(e) => {
                    report.push(Check::fail(
                        name,
                        format!("exit {}; its JSON: {e}", shown(exit)),
                        detail,
                    ));
                    None
                }
            }
        }
        Err(e) => {
            report.push(Check::fail(name, e.to_string(), detail));
            None
        }
    };
    let seen = answer
        .as_ref()
        .and_then(|a| a.gpus.iter().find(|g| g.gpu == 0))
        .and_then(|g| g.check.as_ref());
    cross_check(s, report, seen);
}

/// The nvcc client in a share of [`UNITS`] and without MPS, its SMs held
/// against what the driver-API client saw.
fn cross_check(s: &mut Setup, report: &mut Report, seen: Option<&GpuCheck>) {
    let name = NVCC_CHECKS[8];
    if s.client.is_none() {
        report.push(Check::new(
            name,
            Verdict::Skip,
            NO_NVCC.into(),
            String::new(),
        ));
        return;
    }
    let mut detail = Vec::new();
    // Without MPS: no daemon at its pipe directory, the GPU as it is.
    let pipe = s.nomps_pipe().to_string_lossy().into_owned();
    let whole_env = [
        ("CUDA_VISIBLE_DEVICES", "0"),
        ("CUDA_MPS_PIPE_DIRECTORY", pipe.as_str()),
        ("CUDA_MPS_LOG_DIRECTORY", pipe.as_str()),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()));
    let whole = run_short(s, &whole_env, &mut detail);
    let conf = s.conf_exclusive.clone();
    let p = s.prolog(&conf, CROSS_JOB, 0, UNITS);
    detail.push(p.detail());
    let share = match s.plan(&conf, CROSS_JOB) {
        Ok(plan) => run_short(s, &plan.env, &mut detail),
        Err(e) => {
            detail.push(format!("the share's plan: {e}"));
            None
        }
    };
    detail.push(s.epilog(&conf, CROSS_JOB, 0).detail());
    let agreed = sms_agree(
        seen.and_then(|c| c.share.sms),
        share,
        seen.and_then(|c| c.bypass.sms),
        whole,
    );
    let (v, summary) = match agreed {
        Some((ok, said)) => (verdict(ok), said),
        None => (
            Verdict::Fail,
            "no SM figure from one of the clients: nothing to compare".into(),
        ),
    };
    report.push(Check::new(name, v, summary, detail.join("\n")));
}

/// The nvcc client once (no allocation, a short kernel) as user 0 with
/// `env`: the SMs CUDA gave it.
fn run_short(s: &Setup, env: &[(String, String)], detail: &mut Vec<String>) -> Option<u32> {
    let args = ["0".to_owned(), "0".to_owned(), "1000".to_owned()];
    let mut c = match s.client_with(0, env, &args) {
        Ok(c) => c,
        Err(e) => {
            detail.push(e);
            return None;
        }
    };
    let result = c.wait_event("result", Duration::from_secs(120));
    c.finish(PROGRAM_TIMEOUT);
    detail.push(c.detail());
    result.and_then(|r| r.sms).filter(|&n| n > 0)
}

/// Every check that needs the nvcc client, said not run (no nvcc here).
pub fn not_run(report: &mut Report, names: &[&str]) {
    for name in names {
        report.push(Check::new(
            name,
            Verdict::Skip,
            NO_NVCC.into(),
            String::new(),
        ));
    }
}
