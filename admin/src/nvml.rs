//! What NVML says about the node's GPUs, where it can be had.
//!
//! NVML (`libnvidia-ml.so`) is loaded at run time by `nvml-wrapper`: a node
//! without the NVIDIA driver, or the test cluster, simply gets `Err` and
//! everything works from the device files and `gpu_mps.conf` instead.
//! NVML's index order is the PCI bus order, the order `CUDA_DEVICE_ORDER=
//! PCI_BUS_ID` gives the daemons; `/dev/nvidiaN` is the GPU of minor N.

use nvml_wrapper::Nvml;

/// One GPU as NVML reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuFacts {
    /// NVML's index.
    pub index: u32,
    pub uuid: Option<String>,
    /// Total device memory, MiB.
    pub memory_mib: Option<u64>,
    /// Minor number: the N of `/dev/nvidiaN`.
    pub minor: Option<u32>,
    /// Processes with a compute context on it (with MPS: the server and,
    /// on recent drivers, its clients).
    pub compute_processes: Vec<u32>,
    /// MIG mode is on (`None`: the GPU cannot say, e.g. no MIG support).
    pub mig_enabled: Option<bool>,
}

/// The node's GPUs, or why NVML cannot tell (no library, no driver).
pub fn gpus() -> Result<Vec<GpuFacts>, String> {
    let nvml = Nvml::init().map_err(|e| format!("NVML unavailable: {e}"))?;
    let count = nvml
        .device_count()
        .map_err(|e| format!("NVML device count: {e}"))?;
    Ok((0..count)
        .map(|index| match nvml.device_by_index(index) {
            Ok(d) => GpuFacts {
                index,
                uuid: d.uuid().ok(),
                memory_mib: d.memory_info().ok().map(|m| m.total / (1024 * 1024)),
                minor: d.minor_number().ok(),
                compute_processes: d
                    .running_compute_processes()
                    .map(|ps| ps.iter().map(|p| p.pid).collect())
                    .unwrap_or_default(),
                mig_enabled: d.mig_mode().ok().map(|m| m.current == 1),
            },
            Err(_) => GpuFacts {
                index,
                uuid: None,
                memory_mib: None,
                minor: None,
                compute_processes: Vec::new(),
                mig_enabled: None,
            },
        })
        .collect())
}

/// The driver's version (`/proc/driver/nvidia/version`), e.g. `615.12`.
pub fn driver_version() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  615.12  Thu ..."
    text.lines()
        .next()?
        .split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
        .map(str::to_owned)
}
