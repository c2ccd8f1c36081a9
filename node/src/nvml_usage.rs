//! Each GPU's processes and their utilisation samples as NVML gives them,
//! for the node timer's per-share figures (`gpushare::mps::usage`).
//!
//! NVML is asked in a child process of its own (`gpu-mps --nvml-usage`),
//! as the prolog asks for its figures: a GPU fallen off the bus can hang
//! a driver call, and the timer must not hang with it. The child asks each
//! GPU in a thread of its own and prints each GPU's block whole as soon as
//! it has it ([`gpushare::mps::usage::gpu_block`]); at the deadline the
//! parent kills it and keeps the blocks it finished, so one hung GPU costs
//! only its own figures. A child stuck in the kernel even after SIGKILL is
//! remembered (`<StateDir>/nvml-usage.pid`) and no other is started while
//! it lives, so that hung children never pile up, one a minute.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::raw::c_uint;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use gpushare::mps::config::{GpuMpsConfig, ShareUsage};
use gpushare::mps::node::Asked;
use gpushare::mps::state_dir;
use gpushare::mps::usage::{self, GpuAnswer, GpuSample, ProcessList, ProcessSample, UtilSample};
use gpushare::shared::bounded;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlProcessInfo_t, nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE as INSUFFICIENT_SIZE,
    nvmlReturn_enum_NVML_SUCCESS as SUCCESS, NvmlLib, NVML_VALUE_NOT_AVAILABLE,
};

/// The hidden option that makes `gpu-mps` print each GPU's block and exit.
pub const USAGE_OPTION: &str = "--nvml-usage";

/// Where each GPU's utilisation samples start (`--since 0=TS,1=TS`: NVML's
/// index, the driver's µs timestamp of the last sample read).
const SINCE_OPTION: &str = "--since";

/// How long the node timer waits for NVML's figures.
pub const USAGE_TIMEOUT: Duration = Duration::from_secs(5);

/// The child stuck in the kernel, in the state directory: `<pid> <start>`.
const STUCK_FILE: &str = "nvml-usage.pid";

/// The NVML child: every GPU's block printed as soon as it is had, then
/// exit (`args`: what follows [`USAGE_OPTION`]).
pub fn print_usage(args: &[String]) -> ExitCode {
    let since = args
        .iter()
        .position(|a| a == SINCE_OPTION)
        .and_then(|i| args.get(i + 1))
        .map(|v| parse_since(v))
        .unwrap_or_default();
    let nvml = match Nvml::init() {
        Ok(nvml) => nvml,
        Err(e) => {
            eprintln!("NVML unavailable: {e}");
            return ExitCode::FAILURE;
        }
    };
    let count = match nvml.device_count() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("NVML device count: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mps = MpsList::load();
    std::thread::scope(|scope| {
        for index in 0..count {
            let (nvml, since, mps) = (&nvml, &since, &mps);
            scope.spawn(move || {
                let answer = gpu_answer(nvml, index, since.get(&index).copied(), mps);
                let block = usage::gpu_block(&answer);
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(block.as_bytes());
                let _ = out.flush();
            });
        }
    });
    ExitCode::SUCCESS
}

/// `0=TS,1=TS` → {0: TS, 1: TS}; what does not read is left out (that
/// GPU's samples then start with the driver's whole buffer).
fn parse_since(text: &str) -> BTreeMap<u32, u64> {
    text.split(',')
        .filter_map(|pair| {
            let (index, ts) = pair.split_once('=')?;
            Some((index.parse().ok()?, ts.parse().ok()?))
        })
        .collect()
}

fn since_arg(cursor: &BTreeMap<u32, u64>) -> String {
    cursor
        .iter()
        .map(|(i, ts)| format!("{i}={ts}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// What NVML says of GPU `index`: its compute processes (and MPS clients
/// where the driver lists them apart), their memory, and the utilisation
/// samples since `since`.
fn gpu_answer(nvml: &Nvml, index: u32, since: Option<u64>, mps: &MpsList) -> GpuAnswer {
    let device = match nvml.device_by_index(index) {
        Ok(d) => d,
        Err(e) => {
            return GpuAnswer::Failed {
                index,
                minor: None,
                reason: e.to_string(),
            }
        }
    };
    let minor = device.minor_number().ok();
    let memory = |m: UsedGpuMemory| match m {
        UsedGpuMemory::Used(bytes) => Some(bytes),
        UsedGpuMemory::Unavailable => None,
    };
    let mut processes: Vec<ProcessSample> = match device.running_compute_processes() {
        Ok(ps) => ps
            .into_iter()
            .map(|p| ProcessSample {
                pid: p.pid,
                memory_bytes: memory(p.used_gpu_memory),
                list: ProcessList::Compute,
            })
            .collect(),
        Err(e) => {
            return GpuAnswer::Failed {
                index,
                minor,
                reason: format!("its compute processes: {e}"),
            }
        }
    };
    // Absent before R470, and then no failure: the compute list is all.
    if let Some(Ok(clients)) = mps.processes(&device) {
        processes.extend(clients);
    }
    let utilization = match device.process_utilization_stats(since) {
        Ok(samples) => Some(
            samples
                .into_iter()
                .map(|s| UtilSample {
                    pid: s.pid,
                    sm_percent: s.sm_util,
                    timestamp_us: s.timestamp,
                })
                .collect(),
        ),
        // No process used the GPU since `since`.
        Err(NvmlError::NotFound) => Some(Vec::new()),
        // MIG, a GPU older than Maxwell, or a failure: no figure.
        Err(_) => None,
    };
    let memory = device.memory_info().ok();
    GpuAnswer::Answered(GpuSample {
        index,
        minor,
        used_bytes: memory.as_ref().map(|m| m.used),
        total_bytes: memory.as_ref().map(|m| m.total),
        processes,
        utilization,
    })
}

/// `nvmlDeviceGetMPSComputeRunningProcesses_v3` (R510 and later), which
/// nvml-wrapper 0.11 does not wrap: its symbol from the library
/// `Nvml::init` loaded (`None` where it cannot be had).
struct MpsList(Option<NvmlLib>);

impl MpsList {
    fn load() -> Self {
        // SAFETY: the library is NVIDIA's libnvidia-ml, which `Nvml::init`
        // loaded and initialised in this process already: dlopen returns
        // the same handle and runs no initialiser again; the symbols are
        // looked up one by one, a missing one an `Err` field.
        Self(unsafe { NvmlLib::new("libnvidia-ml.so.1") }.ok())
    }

    /// `device`'s MPS clients (`None`: the driver has no such call).
    fn processes(&self, device: &Device) -> Option<Result<Vec<ProcessSample>, String>> {
        let sym = self
            .0
            .as_ref()?
            .nvmlDeviceGetMPSComputeRunningProcesses_v3
            .as_ref()
            .ok()?;
        // SAFETY: the handle of a device of the `Nvml` that lives for this
        // whole call (`device` borrows it).
        let handle = unsafe { device.handle() };
        let mut count: c_uint = 0;
        // SAFETY: a count of 0 and a null buffer ask for the count only:
        // NVML writes `count` and nothing else.
        let rc = unsafe { sym(handle, &mut count, std::ptr::null_mut()) };
        match rc {
            SUCCESS => return Some(Ok(Vec::new())),
            INSUFFICIENT_SIZE => {}
            other => return Some(Err(format!("NVML error {other}"))),
        }
        // Room for clients that start meanwhile.
        let empty = nvmlProcessInfo_t {
            pid: 0,
            usedGpuMemory: 0,
            gpuInstanceId: 0,
            computeInstanceId: 0,
        };
        let mut count = count.saturating_add(8);
        let mut infos = vec![empty; count as usize];
        // SAFETY: `infos` holds `count` entries, owned here for the call;
        // NVML writes at most `count` of them and sets `count` to how many.
        let rc = unsafe { sym(handle, &mut count, infos.as_mut_ptr()) };
        if rc != SUCCESS {
            return Some(Err(format!("NVML error {rc}")));
        }
        infos.truncate(count as usize);
        let unknown = NVML_VALUE_NOT_AVAILABLE as u64;
        Some(Ok(infos
            .iter()
            .map(|p| ProcessSample {
                pid: p.pid,
                memory_bytes: (p.usedGpuMemory != unknown).then_some(p.usedGpuMemory),
                list: ProcessList::Mps,
            })
            .collect()))
    }
}

/// The program that prints the figures: this one, or `ShareUsage=PATH`.
fn program(cfg: &GpuMpsConfig) -> Result<PathBuf, String> {
    match &cfg.share_usage {
        ShareUsage::Nvml => std::env::current_exe()
            .map_err(|e| format!("cannot find this program to ask NVML: {e}")),
        ShareUsage::Program(path) => Ok(path.clone()),
        ShareUsage::Off => Err("ShareUsage=none".to_owned()),
    }
}

/// A process's start time (`/proc/PID/stat`, field 22): tells it from a
/// later one of the same pid.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name (field 2) may hold spaces and parentheses: count after it.
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(19)?.parse().ok()
}

/// The child of an earlier run still stuck in the kernel, if any (the
/// record of one gone is removed).
fn stuck_child(state_dir: &Path) -> Option<u32> {
    let path = state_dir.join(STUCK_FILE);
    let text = std::fs::read_to_string(&path).ok()?;
    let (pid, start) = text.trim().split_once(' ')?;
    let (pid, start): (u32, u64) = (pid.parse().ok()?, start.parse().ok()?);
    if start_time(pid) == Some(start) {
        return Some(pid);
    }
    let _ = std::fs::remove_file(path);
    None
}

/// Asks for each GPU's figures within [`USAGE_TIMEOUT`] (`cursor`: where
/// each GPU's samples were read up to, by NVML's index): what the child
/// printed by then, and why there is not more where it did not end well.
pub fn ask(cfg: &GpuMpsConfig, cursor: &BTreeMap<u32, u64>) -> Asked {
    let trouble = |text: String| Asked {
        text: String::new(),
        trouble: Some(text),
    };
    let program = match program(cfg) {
        Ok(p) => p,
        Err(e) => return trouble(e),
    };
    if let Some(pid) = stuck_child(&cfg.state_dir) {
        return trouble(format!(
            "the NVML query of an earlier run (pid {pid}) is still stuck in the driver"
        ));
    }
    let mut cmd = Command::new(&program);
    cmd.arg(USAGE_OPTION);
    if !cursor.is_empty() {
        cmd.args([SINCE_OPTION, &since_arg(cursor)]);
    }
    let ran = match bounded::run_partial(cmd, USAGE_TIMEOUT, bounded::OUTPUT_LIMIT) {
        Ok(ran) => ran,
        Err(e) => return trouble(e.to_string()),
    };
    if ran.left_running {
        if let Some(start) = start_time(ran.pid) {
            let record = format!("{} {start}\n", ran.pid);
            let _ = state_dir::replace_file(&cfg.state_dir, STUCK_FILE, record.as_bytes(), 0o600);
        }
    }
    let trouble = match ran.status {
        None => Some(format!(
            "{} {USAGE_OPTION} did not finish within {} s",
            program.display(),
            USAGE_TIMEOUT.as_secs()
        )),
        Some(status) if !status.success() => Some(match ran.stderr.trim() {
            "" => format!("{} {USAGE_OPTION}: {status}", program.display()),
            said => said.to_owned(),
        }),
        Some(_) => None,
    };
    Asked {
        text: ran.stdout,
        trouble,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(dir: &Path, body: &str) -> PathBuf {
        let path = dir.join("usage");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap_or_else(|e| panic!("{e}"));
        let mut perms = std::fs::metadata(&path)
            .map(|m| m.permissions())
            .unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&path, perms).unwrap_or_else(|e| panic!("{e}"));
        path
    }

    #[test]
    fn the_cursor_goes_to_the_child_and_back() {
        let cursor = BTreeMap::from([(0, 17), (3, 1_700_000_000_000_000)]);
        assert_eq!(since_arg(&cursor), "0=17,3=1700000000000000");
        assert_eq!(parse_since(&since_arg(&cursor)), cursor);
        assert_eq!(parse_since("0=1,x=2,3"), BTreeMap::from([(0, 1)]));
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let cfg = GpuMpsConfig {
            state_dir: dir.path().to_path_buf(),
            share_usage: ShareUsage::Program(script(dir.path(), "echo \"$@\"")),
            ..GpuMpsConfig::default()
        };
        let asked = ask(&cfg, &cursor);
        assert_eq!(asked.text, "--nvml-usage --since 0=17,3=1700000000000000\n");
        assert_eq!(asked.trouble, None);
    }

    /// A child that prints GPU 0's block and hangs on GPU 1 is killed at
    /// the deadline; what it printed is kept, and why there is no more.
    #[test]
    fn a_hung_child_is_cut_at_the_deadline_and_its_blocks_kept() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let body = "printf 'gpu 0 0 ok -\\nend 0\\ngpu 1 1 ok -\\n'; exec sleep 60";
        let cfg = GpuMpsConfig {
            state_dir: dir.path().to_path_buf(),
            share_usage: ShareUsage::Program(script(dir.path(), body)),
            ..GpuMpsConfig::default()
        };
        let started = std::time::Instant::now();
        let asked = ask(&cfg, &BTreeMap::new());
        assert!(started.elapsed() < USAGE_TIMEOUT + Duration::from_secs(5));
        assert!(asked
            .trouble
            .as_deref()
            .is_some_and(|t| t.ends_with("--nvml-usage did not finish within 5 s")));
        let report = usage::parse(&asked.text);
        assert_eq!(report.gpus.len(), 1);
        // No child stuck in the kernel: none remembered.
        assert!(!dir.path().join(STUCK_FILE).exists());
        let off = GpuMpsConfig {
            share_usage: ShareUsage::Off,
            ..cfg
        };
        assert_eq!(
            ask(&off, &BTreeMap::new()).trouble.as_deref(),
            Some("ShareUsage=none")
        );
    }

    #[test]
    fn a_stuck_child_is_remembered_while_it_lives() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let me = std::process::id();
        let start = start_time(me).unwrap_or_else(|| panic!("no start time"));
        let record = |text: String| {
            std::fs::write(dir.path().join(STUCK_FILE), text).unwrap_or_else(|e| panic!("{e}"))
        };
        record(format!("{me} {start}\n"));
        assert_eq!(stuck_child(dir.path()), Some(me));
        let cfg = GpuMpsConfig {
            state_dir: dir.path().to_path_buf(),
            share_usage: ShareUsage::Program(PathBuf::from("/nonexistent")),
            ..GpuMpsConfig::default()
        };
        let asked = ask(&cfg, &BTreeMap::new());
        assert!(asked.trouble.is_some_and(|t| t.contains("still stuck")));
        // The same pid, another process: gone, and forgotten.
        record(format!("{me} {}\n", start + 1));
        assert_eq!(stuck_child(dir.path()), None);
        assert!(!dir.path().join(STUCK_FILE).exists());
    }
}
