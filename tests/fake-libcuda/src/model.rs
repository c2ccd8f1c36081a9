//! The pure part of the stand-in: what a client's environment and the
//! files beside the library say it gets (SMs, memory, a context or not),
//! and the driver's error names. No I/O here.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::time::Duration;

/// The `CUresult` codes the stand-in answers (the driver's numbers).
pub mod code {
    pub const SUCCESS: i32 = 0;
    pub const INVALID_VALUE: i32 = 1;
    pub const OUT_OF_MEMORY: i32 = 2;
    pub const NOT_INITIALIZED: i32 = 3;
    pub const DEVICE_UNAVAILABLE: i32 = 46;
    pub const NO_DEVICE: i32 = 100;
    pub const INVALID_DEVICE: i32 = 101;
    pub const INVALID_CONTEXT: i32 = 201;
    pub const INVALID_PTX: i32 = 218;
    pub const INVALID_HANDLE: i32 = 400;
    pub const NOT_FOUND: i32 = 500;
    pub const ILLEGAL_ADDRESS: i32 = 700;
    pub const MPS_CONNECTION_FAILED: i32 = 805;
    pub const MPS_CLIENT_TERMINATED: i32 = 810;
    pub const UNKNOWN: i32 = 999;
}

/// `cuGetErrorName`'s answer for `error`, as the driver spells it; `None`
/// for a code the stand-in does not know.
pub fn error_name(error: i32) -> Option<&'static CStr> {
    Some(match error {
        code::SUCCESS => c"CUDA_SUCCESS",
        code::INVALID_VALUE => c"CUDA_ERROR_INVALID_VALUE",
        code::OUT_OF_MEMORY => c"CUDA_ERROR_OUT_OF_MEMORY",
        code::NOT_INITIALIZED => c"CUDA_ERROR_NOT_INITIALIZED",
        code::DEVICE_UNAVAILABLE => c"CUDA_ERROR_DEVICE_UNAVAILABLE",
        code::NO_DEVICE => c"CUDA_ERROR_NO_DEVICE",
        code::INVALID_DEVICE => c"CUDA_ERROR_INVALID_DEVICE",
        code::INVALID_CONTEXT => c"CUDA_ERROR_INVALID_CONTEXT",
        code::INVALID_PTX => c"CUDA_ERROR_INVALID_PTX",
        code::INVALID_HANDLE => c"CUDA_ERROR_INVALID_HANDLE",
        code::NOT_FOUND => c"CUDA_ERROR_NOT_FOUND",
        code::ILLEGAL_ADDRESS => c"CUDA_ERROR_ILLEGAL_ADDRESS",
        code::MPS_CONNECTION_FAILED => c"CUDA_ERROR_MPS_CONNECTION_FAILED",
        code::MPS_CLIENT_TERMINATED => c"CUDA_ERROR_MPS_CLIENT_TERMINATED",
        code::UNKNOWN => c"CUDA_ERROR_UNKNOWN",
        _ => return None,
    })
}

/// A GPU where `cuda-gpus` does not list it, or there is no such file:
/// an H100's SMs and memory.
pub const DEFAULT_GPU: Gpu = Gpu {
    sms: 132,
    memory_mib: 81_920,
};

/// GPUs a process sees without `CUDA_VISIBLE_DEVICES` where no `cuda-gpus`
/// lists them.
pub const DEFAULT_GPU_COUNT: usize = 8;

/// One GPU of the stand-in node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gpu {
    pub sms: u32,
    pub memory_mib: u64,
}

impl Gpu {
    pub fn memory_bytes(self) -> u64 {
        self.memory_mib.saturating_mul(1 << 20)
    }
}

/// The `cuda-gpus` file: lines `INDEX SMS MEMORY_MIB`; blank lines,
/// `#` comments and lines that do not read so are passed over.
pub fn gpus(text: &str) -> BTreeMap<u32, Gpu> {
    text.lines()
        .filter_map(|line| {
            let line = line.split('#').next().unwrap_or_default();
            let mut words = line.split_whitespace();
            let index = words.next()?.parse().ok()?;
            let sms = words.next()?.parse().ok()?;
            let memory_mib = words.next()?.parse().ok()?;
            words
                .next()
                .is_none()
                .then_some((index, Gpu { sms, memory_mib }))
        })
        .collect()
}

/// `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` as a percentage: 100 where it is
/// unset or not a number in (0, 100].
pub fn percentage(value: Option<&str>) -> f64 {
    value
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|p| p.is_finite() && *p > 0.0 && *p <= 100.0)
        .unwrap_or(100.0)
}

/// The SMs an MPS client of `percentage` gets of `total`: floor(total ×
/// P / 100), down to an even number (one TPC is two SMs), at least 2
/// (never more than the GPU has).
pub fn client_sms(total: u32, percentage: f64) -> u32 {
    // A hair above the exact product so that 132 × 25 / 100 is 33, never
    // 32.999…; far below the next whole SM.
    let raw = (f64::from(total) * percentage / 100.0 + 1e-9).floor();
    // The product is within 0..=total: the cast neither wraps nor cuts.
    let raw = raw.clamp(0.0, f64::from(total)) as u32;
    (raw & !1).max(2).min(total)
}

/// The bytes `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` allows device 0: its
/// `0=SIZE` entry or a bare `SIZE` (entries separated by commas; SIZE is
/// a number with `M`/`MB` or `G`/`GB`); `None` where it gives none.
pub fn memory_limit(value: &str) -> Option<u64> {
    value
        .split(',')
        .find_map(|entry| match entry.split_once('=') {
            Some((device, size)) if device.trim() == "0" => size_bytes(size),
            Some(_) => None,
            None => size_bytes(entry),
        })
}

fn size_bytes(text: &str) -> Option<u64> {
    let text = text.trim().to_ascii_uppercase();
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let shift = match &text[digits.len()..] {
        "M" | "MB" => 20,
        "G" | "GB" => 30,
        _ => return None,
    };
    let n: u64 = digits.parse().ok()?;
    n.checked_mul(1 << shift)
}

/// The GPU a process's calls are about: `GPUSHARE_GPU` where set, else the
/// first entry of `CUDA_VISIBLE_DEVICES`, else 0 (an entry that is not an
/// index, a UUID, counts as 0).
pub fn which_gpu(gpushare_gpu: Option<&str>, visible: Option<&str>) -> u32 {
    let index = |v: &str| v.trim().parse::<u32>().ok();
    if let Some(gpu) = gpushare_gpu.and_then(index) {
        return gpu;
    }
    visible
        .and_then(|v| v.split(',').next())
        .and_then(index)
        .unwrap_or(0)
}

/// How many devices a process sees: the entries of
/// `CUDA_VISIBLE_DEVICES` where set, else the GPUs `cuda-gpus` lists,
/// else [`DEFAULT_GPU_COUNT`].
pub fn device_count(visible: Option<&str>, listed: usize) -> usize {
    match visible {
        Some(v) => v.split(',').filter(|e| !e.trim().is_empty()).count(),
        None if listed > 0 => listed,
        None => DEFAULT_GPU_COUNT,
    }
}

/// A GPU's compute mode as the stand-in `nvidia-smi` keeps it in
/// `compute-mode-N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Default,
    ExclusiveProcess,
    Prohibited,
}

/// The mode a `compute-mode-N` file's text names (no file: `Default`).
pub fn mode(text: Option<&str>) -> Mode {
    match text.map(|t| t.trim().to_ascii_lowercase()).as_deref() {
        Some("exclusive_process") => Mode::ExclusiveProcess,
        Some("prohibited") => Mode::Prohibited,
        _ => Mode::Default,
    }
}

/// What kind of client a process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `CUDA_MPS_PIPE_DIRECTORY` names the pipe of a live daemon.
    Mps,
    /// The pipe is named but no live daemon's: its context fails (805).
    NoDaemon,
    /// No MPS pipe: a context of its own, as the compute mode allows.
    Direct,
}

pub fn kind(pipe_named: bool, daemon_live: bool) -> Kind {
    match (pipe_named, daemon_live) {
        (false, _) => Kind::Direct,
        (true, true) => Kind::Mps,
        (true, false) => Kind::NoDaemon,
    }
}

/// A context of a process outside MPS: `Prohibited` refuses it, so does
/// `Exclusive_Process` while an MPS server or another process holds the
/// GPU; `Default` never does. A control daemon alone holds nothing: on a
/// real GPU the first such process beside a daemon without a server gets
/// the whole GPU.
pub fn direct_context(mode: Mode, server_runs: bool, held_by_another: bool) -> i32 {
    match mode {
        Mode::Prohibited => code::DEVICE_UNAVAILABLE,
        Mode::ExclusiveProcess if server_runs || held_by_another => code::DEVICE_UNAVAILABLE,
        _ => code::SUCCESS,
    }
}

/// What a client gets of its GPU: the limits apply to an MPS client
/// unless the driver drops them (`cuda-ignore-limits`).
pub fn share_of(gpu: Gpu, kind: Kind, env: &Limits, ignore_limits: bool) -> Share {
    if kind == Kind::Direct || ignore_limits {
        return Share {
            sms: gpu.sms,
            memory: gpu.memory_bytes(),
        };
    }
    Share {
        sms: client_sms(gpu.sms, env.percentage),
        memory: env
            .memory
            .map_or(gpu.memory_bytes(), |m| m.min(gpu.memory_bytes())),
    }
}

/// The limits a client's environment asks for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    pub percentage: f64,
    pub memory: Option<u64>,
}

/// What a client gets: SMs its kernels run on, bytes it may allocate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    pub sms: u32,
    pub memory: u64,
}

/// Whether `bytes` more would take a client with `used` over `limit`.
pub fn over_limit(used: u64, bytes: u64, limit: u64) -> bool {
    used.checked_add(bytes).is_none_or(|total| total > limit)
}

/// The longest a kernel of the stand-in takes.
pub const LONGEST_KERNEL: Duration = Duration::from_secs(10);

/// How long a kernel whose blocks spin `cycles` clock cycles takes: a
/// nanosecond a cycle (a 1 GHz GPU where every block runs at once), at
/// most [`LONGEST_KERNEL`].
pub fn kernel_time(cycles: u64) -> Duration {
    Duration::from_nanos(cycles).min(LONGEST_KERNEL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_takes_a_nanosecond_a_cycle_up_to_a_bound() {
        assert_eq!(kernel_time(0), Duration::ZERO);
        assert_eq!(kernel_time(200_000), Duration::from_micros(200));
        assert_eq!(kernel_time(40_000_000), Duration::from_millis(40));
        assert_eq!(kernel_time(u64::MAX), LONGEST_KERNEL);
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn an_mps_client_gets_its_percentage_down_to_whole_tpcs() {
        assert_eq!(client_sms(132, 25.0), 32); // 33 → 32
        assert_eq!(client_sms(132, 50.0), 66);
        assert_eq!(client_sms(132, 100.0), 132);
        assert_eq!(client_sms(132, 1.0), 2); // 1 → at least a TPC
        assert_eq!(client_sms(108, 33.3), 34); // 35.96 → 35 → 34
        assert_eq!(client_sms(100, 7.0), 6);
        assert_eq!(client_sms(1, 50.0), 1); // never more than the GPU has
    }

    #[test]
    fn a_percentage_not_in_range_is_the_whole_gpu() {
        assert_eq!(percentage(None), 100.0);
        assert_eq!(percentage(Some("25")), 25.0);
        assert_eq!(percentage(Some(" 12.5 ")), 12.5);
        for bad in ["0", "-5", "101", "x", "", "NaN", "inf"] {
            assert_eq!(percentage(Some(bad)), 100.0, "{bad}");
        }
    }

    #[test]
    fn the_memory_limit_of_device_zero_is_read_in_every_spelling() {
        assert_eq!(memory_limit("0=12288M"), Some(12_288 * MIB));
        assert_eq!(memory_limit("0=12G"), Some(12 * 1024 * MIB));
        assert_eq!(memory_limit("512M"), Some(512 * MIB));
        assert_eq!(memory_limit("2gb"), Some(2048 * MIB));
        assert_eq!(memory_limit("1=1G,0=3G"), Some(3 * 1024 * MIB));
        assert_eq!(memory_limit("1=1G"), None);
        for bad in [
            "",
            "0=",
            "0=12",
            "0=12T",
            "0=M",
            "0=-1G",
            "0=99999999999999G",
        ] {
            assert_eq!(memory_limit(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_gpu_is_gpushare_gpu_then_the_first_visible_then_zero() {
        assert_eq!(which_gpu(Some("3"), Some("0")), 3);
        assert_eq!(which_gpu(None, Some("2,1")), 2);
        assert_eq!(which_gpu(Some("x"), Some("1")), 1);
        assert_eq!(which_gpu(None, Some("GPU-1234")), 0);
        assert_eq!(which_gpu(None, None), 0);
        assert_eq!(device_count(Some("0"), 4), 1);
        assert_eq!(device_count(Some("1,2"), 0), 2);
        assert_eq!(device_count(Some(""), 4), 0);
        assert_eq!(device_count(None, 4), 4);
        assert_eq!(device_count(None, 0), DEFAULT_GPU_COUNT);
    }

    #[test]
    fn the_gpus_file_lists_index_sms_and_memory() {
        let listed =
            gpus("0 132 81920\n# a comment\n\n3 108 40960 # A100\nbad line\n1 2\n2 1 2 3\n");
        assert_eq!(listed.len(), 2);
        assert_eq!(
            listed.get(&3),
            Some(&Gpu {
                sms: 108,
                memory_mib: 40_960
            })
        );
        assert_eq!(listed.get(&0), Some(&DEFAULT_GPU));
    }

    #[test]
    fn a_direct_context_follows_the_compute_mode() {
        use code::{DEVICE_UNAVAILABLE as REFUSED, SUCCESS};
        assert_eq!(mode(None), Mode::Default);
        assert_eq!(mode(Some("Exclusive_Process\n")), Mode::ExclusiveProcess);
        assert_eq!(mode(Some("Prohibited")), Mode::Prohibited);
        assert_eq!(direct_context(Mode::Default, true, true), SUCCESS);
        assert_eq!(direct_context(Mode::Prohibited, false, false), REFUSED);
        assert_eq!(direct_context(Mode::ExclusiveProcess, true, false), REFUSED);
        assert_eq!(direct_context(Mode::ExclusiveProcess, false, true), REFUSED);
        assert_eq!(
            direct_context(Mode::ExclusiveProcess, false, false),
            SUCCESS
        );
        assert_eq!(kind(false, true), Kind::Direct);
        assert_eq!(kind(true, true), Kind::Mps);
        assert_eq!(kind(true, false), Kind::NoDaemon);
    }

    #[test]
    fn limits_bind_mps_clients_unless_the_driver_drops_them() {
        let limits = Limits {
            percentage: 25.0,
            memory: Some(12 * 1024 * MIB),
        };
        let mps = share_of(DEFAULT_GPU, Kind::Mps, &limits, false);
        assert_eq!(mps.sms, 32);
        assert_eq!(mps.memory, 12 * 1024 * MIB);
        let whole = DEFAULT_GPU.memory_bytes();
        assert_eq!(
            share_of(DEFAULT_GPU, Kind::Mps, &limits, true),
            Share {
                sms: 132,
                memory: whole
            }
        );
        assert_eq!(share_of(DEFAULT_GPU, Kind::Direct, &limits, false).sms, 132);
        // A limit above the GPU's memory is the GPU's memory.
        let big = Limits {
            percentage: 100.0,
            memory: Some(whole * 2),
        };
        assert_eq!(share_of(DEFAULT_GPU, Kind::Mps, &big, false).memory, whole);
        assert!(!over_limit(0, 10, 10));
        assert!(over_limit(1, 10, 10));
        assert!(over_limit(u64::MAX, 1, u64::MAX));
    }

    #[test]
    fn known_codes_have_the_drivers_names() {
        assert_eq!(
            error_name(46).map(CStr::to_bytes),
            Some(&b"CUDA_ERROR_DEVICE_UNAVAILABLE"[..])
        );
        assert_eq!(
            error_name(805).map(CStr::to_bytes),
            Some(&b"CUDA_ERROR_MPS_CONNECTION_FAILED"[..])
        );
        assert_eq!(error_name(12345), None);
    }
}
