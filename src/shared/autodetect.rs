//! Slurm's GPU autodetection (`AutoDetect=nvml` in gres.conf, and
//! `nvidia` or `full` from 24.11), as Slurm's sources say it works: the
//! type each GPU and MIG slice gets, the rule by which slurm.conf's or
//! gres.conf's type takes its place, and what `slurmd -G` prints of it.
//!
//! - A whole GPU: NVML's device name (`nvmlDeviceGetName`, "NVIDIA
//!   A100-SXM4-80GB") lowercased with each space made `_`
//!   (`gpu_common_underscorify_tolower`, src/plugins/gpu/common/gpu_common.c,
//!   the same in 22.05 through 26.05): `nvidia_a100-sxm4-80gb`. The
//!   device file is `/dev/nvidia<minor>` (gpu_nvml.c: `"/dev/nvidia%u",
//!   minor_number`). `AutoDetect=nvidia` (24.11+) reads the same name
//!   from `/proc/driver/nvidia/gpus/*/information` (`Model:`), and finds
//!   no MIG slice.
//! - A MIG slice (gpu_nvml.c, `_handle_mig` and its caller): the GPU's
//!   type cut at its first `-` (`nvidia_a100`), then the profile. From
//!   23.02.6 (and in every 23.11 and later) the profile is what follows
//!   `mig` in the slice's own NVML name, made the same way
//!   ("NVIDIA A100-SXM4-80GB MIG 3g.40gb" → `_3g.40gb`), else, where NVML
//!   gives no such name, `_[Cc.]Gg.Mgb` from its attributes (compute
//!   slices where they differ from the GPU slices, memory in GiB rounded
//!   up); before 23.02.6 always `_Gg.Mgb` with the memory rounded to the
//!   nearest GiB. So `nvidia_a100_3g.40gb`; a name without a `-` keeps all
//!   of it (`nvidia_h100_80gb_hbm3_3g.40gb`). Older drivers named the
//!   A100 "A100-SXM4-40GB", without "NVIDIA ", whence `a100_3g.20gb`.
//!   Its device files are `/dev/nvidia<minor>` and two
//!   `/dev/nvidia-caps/nvidia-cap<N>`, one record of several files.
//! - The type Slurm then keeps (gres_gpu.c, `_normalize_sys_gres_types`,
//!   22.05 through 26.05): where slurm.conf's `Gres=` or a gres.conf line
//!   gives the node typed GPUs, each detected device takes the longest
//!   unused configured type that is a substring of its detected type,
//!   without case (`a100` for `nvidia_a100-sxm4-80gb`, `a100_3g.40gb` for
//!   `nvidia_a100_3g.40gb`, nothing for `nvidia_h100_80gb_hbm3_3g.40gb`);
//!   a device no configured type fits is left out of the node ("The
//!   following autodetected GPUs are being ignored"). Where no configured
//!   GPU has a type, the detected types are dropped. What `scontrol show
//!   node` and accounting show is that kept type.

use std::path::PathBuf;

use super::syntax::{self, expand_devices, hostlist_contains};

/// A Slurm release as `major.minor.micro` (`(23, 2, 6)`).
pub type Release = (u32, u32, u32);

/// The first release whose MIG types come from NVML's slice names (Slurm
/// commit 04f0e4c3d7, "Get mig profile name from nvidia if possible").
pub const MIG_NAMES_FROM_NVML: Release = (23, 2, 6);

/// The type Slurm's AutoDetect gives a whole GPU NVML calls `device_name`.
pub fn gpu_type(device_name: &str) -> String {
    device_name
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            ' ' => '_',
            c => c,
        })
        .collect()
}

/// One MIG slice as NVML describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigSlice<'a> {
    /// `nvmlDeviceGetName` of the slice ("NVIDIA A100-SXM4-80GB MIG
    /// 3g.40gb"); empty where NVML gave none.
    pub name: &'a str,
    /// `gpuInstanceSliceCount` of `nvmlDeviceGetAttributes`.
    pub gpu_slices: u32,
    /// `computeInstanceSliceCount`.
    pub compute_slices: u32,
    /// `memorySizeMB`.
    pub memory_mb: u64,
}

/// The type Slurm `release`'s AutoDetect gives a MIG `slice` of the GPU
/// NVML calls `gpu_name`.
pub fn mig_type(release: Release, gpu_name: &str, slice: &MigSlice<'_>) -> String {
    let whole = gpu_type(gpu_name);
    let stem = whole.split('-').next().unwrap_or_default();
    let (gi, ci, mb) = (slice.gpu_slices, slice.compute_slices, slice.memory_mb);
    let profile = if release < MIG_NAMES_FROM_NVML {
        // roundl(MB / 1024): to the nearest GiB, halves up.
        format!("_{gi}g.{}gb", (mb + 512) / 1024)
    } else {
        let name = gpu_type(slice.name);
        match name.find("mig_") {
            // "Adding 3 to skip "mig" but keep "_"".
            Some(at) => name[at + 3..].to_owned(),
            None if ci != gi => format!("_{ci}c.{gi}g.{}gb", mb.div_ceil(1024)),
            None => format!("_{gi}g.{}gb", mb.div_ceil(1024)),
        }
    };
    format!("{stem}{profile}")
}

/// Whether a GPU type names a MIG slice: it ends in a MIG profile
/// (`a100_3g.40gb`, `nvidia_a100_1c.3g.40gb`, `..._1g.10gb+me`).
pub fn is_mig_type(gres_type: &str) -> bool {
    let t = gres_type.to_ascii_lowercase();
    let profile = t.rsplit('_').next().unwrap_or_default();
    let profile = profile.split('+').next().unwrap_or_default();
    let digits = |w: &str| !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit());
    let mut parts: Vec<&str> = profile.split('.').collect();
    if parts.len() == 3 {
        // A compute instance: `1c.3g.40gb`.
        match parts[0].strip_suffix('c') {
            Some(n) if digits(n) => {
                parts.remove(0);
            }
            _ => return false,
        }
    }
    matches!(parts.as_slice(), [g, mem]
        if g.strip_suffix('g').is_some_and(digits)
            && mem.strip_suffix("gb").is_some_and(digits))
}

/// Whether a configured type (slurm.conf's `Gres=`, a gres.conf `Type=`)
/// takes the place of the `detected` one: it is a substring of it,
/// without case (`xstrcasestr`).
pub fn configured_type_fits(configured: &str, detected: &str) -> bool {
    !configured.is_empty()
        && detected
            .to_ascii_lowercase()
            .contains(&configured.to_ascii_lowercase())
}

/// The `AutoDetect=` value of gres.conf that applies to node `host`: a
/// line naming the node wins over a line without `NodeName=` (the last of
/// each); `None` where none is set (Slurm's default, off, on a node that
/// is not dynamic).
pub fn autodetect_value(gres_conf: &str, host: &str) -> Option<String> {
    let (mut global, mut own) = (None, None);
    for (_, pairs) in syntax::lines(gres_conf) {
        let Ok(pairs) = pairs else { continue };
        let get = |key: &str| syntax::value_of(&pairs, key);
        let Some(value) = get("AutoDetect") else {
            continue;
        };
        match get("NodeName") {
            None => global = Some(value.to_owned()),
            Some(nodes) if hostlist_contains(nodes, host) => own = Some(value.to_owned()),
            Some(_) => {}
        }
    }
    own.or(global)
}

/// Whether gres.conf has Slurm detect node `host`'s GPUs: an `AutoDetect=`
/// other than `off` applies to it.
pub fn detects_gpus(gres_conf: &str, host: &str) -> bool {
    autodetect_value(gres_conf, host).is_some_and(|v| !v.eq_ignore_ascii_case("off"))
}

/// One record of `slurmd -G`: a `Gres Name=... Type=... Count=...
/// File=... Flags=...` line (slurmd's final GRES list; `Flags=` from
/// 23.02).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmdGres {
    pub name: String,
    /// `None` where slurmd prints `(null)`.
    pub gres_type: Option<String>,
    pub count: u64,
    /// `File=` as printed: one device, a range, or a MIG slice's files
    /// (`/dev/nvidia6,/dev/nvidia-caps/nvidia-cap57,...`).
    pub file: Option<String>,
    pub flags: Vec<String>,
}

impl SlurmdGres {
    /// A MIG slice: one record of the GPU's device file and its
    /// `nvidia-caps` files.
    pub fn is_mig(&self) -> bool {
        self.file
            .as_deref()
            .is_some_and(|f| f.contains("nvidia-caps"))
    }

    /// The GPU device files of the record: a MIG slice's GPU, else each
    /// file of its `File=`.
    pub fn devices(&self) -> Vec<String> {
        let Some(file) = self.file.as_deref() else {
            return Vec::new();
        };
        if self.is_mig() {
            return file.split(',').take(1).map(str::to_owned).collect();
        }
        expand_devices(file).map_or_else(
            |_| vec![file.to_owned()],
            |d| d.iter().map(|p| p.display().to_string()).collect(),
        )
    }

    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f.eq_ignore_ascii_case(flag))
    }
}

/// The records of `slurmd -G`'s output (its other lines are skipped).
pub fn parse_slurmd_g(text: &str) -> Vec<SlurmdGres> {
    text.lines()
        .filter_map(|line| {
            let (_, rest) = line.split_once("Gres Name=")?;
            let mut gres = SlurmdGres {
                name: rest.split_whitespace().next()?.to_ascii_lowercase(),
                gres_type: None,
                count: 0,
                file: None,
                flags: Vec::new(),
            };
            let null = |v: &str| (v != "(null)" && !v.is_empty()).then(|| v.to_owned());
            for (key, value) in rest.split_whitespace().filter_map(|w| w.split_once('=')) {
                match key {
                    "Type" => gres.gres_type = null(value),
                    "Count" => gres.count = value.parse().ok()?,
                    "File" => gres.file = null(value),
                    "Flags" => gres.flags = value.split(',').map(str::to_owned).collect(),
                    _ => {}
                }
            }
            Some(gres)
        })
        .collect()
}

/// One GPU of a node as slurmd or NVML reports it: its device file and
/// whether MIG is on (its slices then stand in its place).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedGpu {
    pub file: String,
    pub mig: bool,
}

/// The node's GPUs in `slurmd -G`'s records, each once, in its order.
pub fn reported_gpus(records: &[SlurmdGres]) -> Vec<ReportedGpu> {
    let mut out: Vec<ReportedGpu> = Vec::new();
    for r in records.iter().filter(|r| r.name == "gpu") {
        for file in r.devices() {
            if !out.iter().any(|g| g.file == file) {
                out.push(ReportedGpu {
                    file,
                    mig: r.is_mig(),
                });
            }
        }
    }
    out
}

/// `/dev/nvidia<minor>`, the device file Slurm's AutoDetect gives a GPU.
pub fn device_file(minor: u32) -> PathBuf {
    PathBuf::from(format!("/dev/nvidia{minor}"))
}

#[cfg(test)]
mod tests;
