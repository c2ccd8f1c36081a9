//! `gpu_mps.conf`: how a node shares its GPUs in MPS slices.
//!
//! Read by the SPANK plugin `gpu_mps` (slurmstepd), by `gpu-mps-prolog` and
//! `gpu-mps-epilog` (slurmd) and by the `gpu-mps` admin command, from the
//! directory of the slurm.conf in use. Slurm `Key=Value` syntax (see
//! [`crate::kv`]); every error names `file:line`.
//!
//! ```text
//! UnitsPerGPU=100                  # mps units one GPU holds (a job's share = units / UnitsPerGPU)
//! GPUDevices=/dev/nvidia[0-3]      # the node's GPU device files, in index order (default: every /dev/nvidia<N>)
//! StateDir=/run/gpu-mps            # root-only state (ledger, MPS pipe and log directories)
//! SlurmMpsCount=1600               # the node's gres.conf `Name=mps Count=`; enables the checks and the fallback
//! GPUMemory=48G                    # per GPU; caps each client's device memory in proportion to its units
//! MPSControl=/usr/bin/nvidia-cuda-mps-control   # or `none`; default: found in PATH, skipped when absent
//! ```

use std::fmt;
use std::path::PathBuf;

use crate::kv::{self, WordError};

/// Default `UnitsPerGPU`.
pub const DEFAULT_UNITS_PER_GPU: u32 = 100;
/// Default `StateDir`.
pub const DEFAULT_STATE_DIR: &str = "/run/gpu-mps";
/// File name, next to slurm.conf.
pub const CONF_NAME: &str = "gpu_mps.conf";

/// Where the MPS control daemon comes from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum MpsControl {
    /// `nvidia-cuda-mps-control` from PATH if installed; nothing otherwise.
    #[default]
    FromPath,
    /// Never start MPS daemons (a site that runs them itself).
    Disabled,
    /// This program.
    Program(PathBuf),
}

/// The parsed file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuMpsConfig {
    pub units_per_gpu: u32,
    /// `None`: every `/dev/nvidia<N>` present, in N order.
    pub gpu_devices: Option<Vec<PathBuf>>,
    pub state_dir: PathBuf,
    pub slurm_mps_count: Option<u64>,
    /// Device memory of one GPU, in MiB.
    pub gpu_memory_mib: Option<u64>,
    pub mps_control: MpsControl,
}

impl Default for GpuMpsConfig {
    fn default() -> Self {
        Self {
            units_per_gpu: DEFAULT_UNITS_PER_GPU,
            gpu_devices: None,
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            slurm_mps_count: None,
            gpu_memory_mib: None,
            mps_control: MpsControl::default(),
        }
    }
}

/// A problem in the file, shown as `file:line: reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.reason)
    }
}

impl std::error::Error for ConfigError {}

const KEYS: [&str; 6] = [
    "UnitsPerGPU",
    "GPUDevices",
    "StateDir",
    "SlurmMpsCount",
    "GPUMemory",
    "MPSControl",
];

/// Parses the text of `gpu_mps.conf`; `file` only names it in errors.
pub fn parse(text: &str, file: &str) -> Result<GpuMpsConfig, ConfigError> {
    let mut cfg = GpuMpsConfig::default();
    let mut seen: [Option<usize>; KEYS.len()] = [None; KEYS.len()];
    for (line, pairs) in kv::lines(text) {
        let err = |reason: String| ConfigError {
            file: file.to_owned(),
            line,
            reason,
        };
        let pairs = pairs.map_err(|e| {
            err(match e {
                WordError::MissingEquals(w) => format!("expected Key=Value, got \"{w}\""),
                WordError::EmptyValue(k) => format!("{k} has an empty value"),
            })
        })?;
        for p in pairs {
            let Some(index) = KEYS.iter().position(|k| k.eq_ignore_ascii_case(p.key)) else {
                return Err(err(format!(
                    "unknown key \"{}\" (known: {})",
                    p.key,
                    KEYS.join(", ")
                )));
            };
            let key = KEYS[index];
            if let Some(first) = seen[index] {
                return Err(err(format!("{key} already set on line {first}")));
            }
            seen[index] = Some(line);
            match index {
                0 => {
                    cfg.units_per_gpu = p
                        .value
                        .parse()
                        .ok()
                        .filter(|&u: &u32| (1..=1_000_000).contains(&u))
                        .ok_or_else(|| {
                            err(format!(
                                "UnitsPerGPU must be an integer from 1 to 1000000, got \"{}\"",
                                p.value
                            ))
                        })?;
                }
                1 => cfg.gpu_devices = Some(expand_devices(p.value).map_err(err)?),
                2 => {
                    if !p.value.starts_with('/') {
                        return Err(err(format!(
                            "StateDir must be an absolute path, got \"{}\"",
                            p.value
                        )));
                    }
                    cfg.state_dir = PathBuf::from(p.value);
                }
                3 => {
                    cfg.slurm_mps_count = Some(
                        p.value
                            .parse()
                            .ok()
                            .filter(|&c: &u64| c > 0)
                            .ok_or_else(|| {
                                err(format!(
                                    "SlurmMpsCount must be a positive integer, got \"{}\"",
                                    p.value
                                ))
                            })?,
                    );
                }
                4 => {
                    cfg.gpu_memory_mib = Some(parse_mib(p.value).ok_or_else(|| {
                        err(format!(
                            "GPUMemory must be a size such as 48G or 40960M, got \"{}\"",
                            p.value
                        ))
                    })?)
                }
                _ => {
                    cfg.mps_control = if p.value.eq_ignore_ascii_case("none") {
                        MpsControl::Disabled
                    } else if p.value.starts_with('/') {
                        MpsControl::Program(PathBuf::from(p.value))
                    } else {
                        return Err(err(format!(
                            "MPSControl must be an absolute path or none, got \"{}\"",
                            p.value
                        )));
                    };
                }
            }
        }
    }
    Ok(cfg)
}

/// `48G`, `40960M`, `40960` (MiB) → MiB.
fn parse_mib(s: &str) -> Option<u64> {
    let (digits, factor) = match s.chars().last()?.to_ascii_uppercase() {
        'G' => (&s[..s.len() - 1], 1024),
        'M' => (&s[..s.len() - 1], 1),
        'T' => (&s[..s.len() - 1], 1024 * 1024),
        _ => (s, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .filter(|&n| n > 0)?
        .checked_mul(factor)
}

/// Expands `/dev/nvidia[0-3]`, `/dev/nvidia[0,2,4-5]` and comma lists of
/// such into paths, in order.
pub fn expand_devices(spec: &str) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    let mut rest = spec;
    while !rest.is_empty() {
        // A comma inside brackets belongs to the range list.
        let mut depth = 0;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '[' => depth += 1,
                    ']' => depth -= 1,
                    _ => {}
                }
                c == ',' && depth == 0
            })
            .map_or(rest.len(), |(i, _)| i);
        let item = &rest[..end];
        rest = rest.get(end + 1..).unwrap_or("");
        if item.is_empty() {
            return Err(format!("empty entry in GPUDevices \"{spec}\""));
        }
        match (item.find('['), item.find(']')) {
            (None, None) => out.push(PathBuf::from(item)),
            (Some(open), Some(close)) if open < close && close == item.len() - 1 => {
                let prefix = &item[..open];
                for part in item[open + 1..close].split(',') {
                    let (a, b) = part.split_once('-').unwrap_or((part, part));
                    let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) else {
                        return Err(format!("bad range \"{part}\" in GPUDevices \"{spec}\""));
                    };
                    if a > b || b - a > 1024 {
                        return Err(format!("bad range \"{part}\" in GPUDevices \"{spec}\""));
                    }
                    out.extend((a..=b).map(|n| PathBuf::from(format!("{prefix}{n}"))));
                }
            }
            _ => return Err(format!("bad brackets in GPUDevices entry \"{item}\"")),
        }
    }
    if let Some(p) = out.iter().find(|p| !p.is_absolute()) {
        return Err(format!(
            "GPUDevices must be absolute paths, got \"{}\"",
            p.display()
        ));
    }
    Ok(out)
}

impl GpuMpsConfig {
    /// The `gres.conf` `Count` Slurm 22.05 needs so that a node of `gpus`
    /// GPUs admits `gpus × UnitsPerGPU` units at once: Slurm 22.05 puts all
    /// mps on GPU 0 and so admits only Count / gpus units (see README).
    pub fn slurm_count_for(&self, gpus: u32) -> u64 {
        u64::from(gpus) * u64::from(gpus) * u64::from(self.units_per_gpu)
    }

    /// Units from Slurm's `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`, the fallback
    /// when the job_submit plugin did not record them: Slurm's percentage is
    /// relative to Count / gpus and rounded down, so this is approximate.
    pub fn units_from_percentage(&self, percent: u32, gpus: u32) -> Option<u32> {
        let count = self.slurm_mps_count?;
        let per_gpu = count.checked_div(u64::from(gpus))?;
        let units = (u64::from(percent) * per_gpu).div_ceil(100);
        u32::try_from(units).ok().filter(|&u| u > 0)
    }

    /// `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` value for a client of `units`.
    pub fn memory_limit(&self, units: u32) -> Option<String> {
        let mib = self.gpu_memory_mib? * u64::from(units) / u64::from(self.units_per_gpu);
        Some(format!("0={}M", mib.max(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_file_parses() {
        let text = "UnitsPerGPU=50 # half GPUs\nGPUDevices=/dev/nvidia[0-1],/dev/nvidia3\nStateDir=/run/x\nSlurmMpsCount=1600\nGPUMemory=48G\nMPSControl=none\n";
        let cfg = parse(text, "gpu_mps.conf").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.units_per_gpu, 50);
        assert_eq!(
            cfg.gpu_devices,
            Some(vec![
                PathBuf::from("/dev/nvidia0"),
                PathBuf::from("/dev/nvidia1"),
                PathBuf::from("/dev/nvidia3")
            ])
        );
        assert_eq!(cfg.state_dir, PathBuf::from("/run/x"));
        assert_eq!(cfg.gpu_memory_mib, Some(48 * 1024));
        assert_eq!(cfg.mps_control, MpsControl::Disabled);
        assert_eq!(cfg.memory_limit(25), Some("0=24576M".into()));
    }

    #[test]
    fn empty_file_gives_defaults() {
        assert_eq!(parse("# nothing\n", "f"), Ok(GpuMpsConfig::default()));
    }

    #[test]
    fn errors_name_file_and_line() {
        let cases = [
            (
                "UnitsPerGPU=0\n",
                "f:1: UnitsPerGPU must be an integer from 1 to 1000000, got \"0\"",
            ),
            ("\nColour=red\n", "f:2: unknown key \"Colour\""),
            ("StateDir=run\n", "f:1: StateDir must be an absolute path"),
            (
                "UnitsPerGPU=1\nunitspergpu=2\n",
                "f:2: UnitsPerGPU already set on line 1",
            ),
            ("GPUDevices=/dev/nvidia[3-1]\n", "f:1: bad range \"3-1\""),
            ("GPUDevices=/dev/nvidia[0-1\n", "f:1: bad brackets"),
            ("GPUMemory=lots\n", "f:1: GPUMemory must be a size"),
            ("StateDir\n", "f:1: expected Key=Value, got \"StateDir\""),
        ];
        for (text, want) in cases {
            let e = parse(text, "f")
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.starts_with(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn count_arithmetic_matches_slurm_22_05() {
        let cfg = GpuMpsConfig {
            slurm_mps_count: Some(1600),
            ..GpuMpsConfig::default()
        };
        assert_eq!(cfg.slurm_count_for(4), 1600);
        // mps:50 on a 4-GPU node with Count=1600: Slurm says 12 % (of 400).
        assert_eq!(cfg.units_from_percentage(12, 4), Some(48));
        assert_eq!(cfg.units_from_percentage(25, 4), Some(100));
        assert_eq!(GpuMpsConfig::default().units_from_percentage(12, 4), None);
    }
}
