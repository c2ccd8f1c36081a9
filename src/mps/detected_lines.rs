//! The lines of a node whose gpu lines Slurm makes itself
//! (`AutoDetect=nvml` in gres.conf): gres.conf holds only the mps lines,
//! slurm.conf's `Gres=` names the types Slurm gives the GPUs, and
//! `GPUDevices=` lists the GPUs that share where others are held whole or
//! have MIG on.
//!
//! Slurm's AutoDetect gives each GPU `File=/dev/nvidia<minor>` and the
//! type of [`crate::shared::autodetect::gpu_type`]; slurmd matches an mps
//! line to the GPU whose `File=` it names, so mps lines with `File=` beside
//! `AutoDetect=nvml` book mps per GPU as on a node with gpu lines
//! (`_merge_lists` in src/plugins/gres/common/gres_c_s.c, 23.11 to 26.05).
//! A MIG slice cannot be named so ([`crate::shared::booking`]). The parts
//! both setups share are [`super::setup_lines`]'s.

use std::fmt::Write as _;
use std::path::PathBuf;

use super::setup_lines::{
    device_range, node_count_header, other_files, per_gpu_mps_lines, GpuGroup, Installed,
    SlurmSetup, PER_GPU_HEADER,
};
use crate::mps::config::GpuMpsConfig;
use crate::shared::autodetect::{configured_type_fits, gpu_type};
use crate::shared::booking::MpsBooking;

/// One GPU as NVML reports it, for these lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlGpu {
    /// The N of `/dev/nvidiaN`.
    pub minor: u32,
    /// `nvmlDeviceGetName` ("NVIDIA A100-SXM4-80GB").
    pub name: String,
    /// MIG mode is on.
    pub mig: bool,
}

/// What a GPU of the node is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuRole {
    Shared,
    Whole,
    /// MIG on: Slurm offers its slices, each a GPU of its own type.
    Mig,
}

/// One GPU of a node whose gpu lines Slurm's AutoDetect makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetectedGpu {
    /// The N of `/dev/nvidiaN`.
    pub minor: u32,
    /// The type slurm.conf gives it (for a GPU with MIG on: AutoDetect's
    /// type of the whole GPU, whose stem its slices' types start with).
    pub gpu_type: String,
    pub role: GpuRole,
}

/// The node's GPUs and what each is for, with what the admin should know
/// about the choice. With NVML's GPUs (`nvml` not empty): types from
/// their names unless `gpu_type` is given, MIG ones apart, the shared ones
/// those `GPUDevices=` lists (`listed`), else the first `gpus`, else all;
/// the others held whole. Without: `gpus` shared GPUs of `gpu_type`
/// (`TYPE` where not given) from `/dev/nvidia0`, then the `whole` groups.
pub fn detected_gpus(
    nvml: &[NvmlGpu],
    listed: Option<&[PathBuf]>,
    (gpus, gpu_type_given): (Option<u32>, Option<&str>),
    whole: &[GpuGroup],
) -> Result<(Vec<DetectedGpu>, Vec<String>), String> {
    let mut notes = Vec::new();
    if nvml.is_empty() {
        let gpus = gpus.ok_or("NVML cannot be asked here: pass --gpus N")?;
        let t = gpu_type_given.unwrap_or("TYPE");
        let mut out: Vec<DetectedGpu> = (0..gpus)
            .map(|minor| DetectedGpu {
                minor,
                gpu_type: t.to_owned(),
                role: GpuRole::Shared,
            })
            .collect();
        for g in whole {
            for _ in 0..g.count {
                out.push(DetectedGpu {
                    minor: u32::try_from(out.len()).unwrap_or(u32::MAX),
                    gpu_type: g.gpu_type.clone(),
                    role: GpuRole::Whole,
                });
            }
        }
        return Ok((out, notes));
    }
    if !whole.is_empty() {
        return Err(
            "--whole is for a node whose GPUs NVML cannot name; here the GPUs not \
                    listed in gpu_mps.conf's GPUDevices= are held whole (or pass --gpus N: \
                    the first N share)"
                .into(),
        );
    }
    let mut sorted = nvml.to_vec();
    sorted.sort_by_key(|g| g.minor);
    let mut shared_left = gpus.unwrap_or(u32::MAX);
    let mut out = Vec::new();
    for g in &sorted {
        let detected = gpu_type(&g.name);
        let listed_here = listed.is_none_or(|l| {
            l.iter()
                .any(|p| p == &crate::shared::autodetect::device_file(g.minor))
        });
        let role = if g.mig {
            GpuRole::Mig
        } else if listed_here && shared_left > 0 {
            shared_left -= 1;
            GpuRole::Shared
        } else {
            GpuRole::Whole
        };
        let gpu_type = match gpu_type_given {
            Some(t) if role == GpuRole::Shared => {
                if !configured_type_fits(t, &detected) {
                    notes.push(format!(
                        "--type {t} is not part of {detected}, the type AutoDetect gives \
                         /dev/nvidia{}: slurmd would leave the GPU out (the type in slurm.conf \
                         must be a substring of the detected one)",
                        g.minor
                    ));
                }
                t.to_owned()
            }
            _ => detected,
        };
        out.push(DetectedGpu {
            minor: g.minor,
            gpu_type,
            role,
        });
    }
    Ok((out, notes))
}

/// The device files of `minors` (ascending), each run as one range
/// (`/dev/nvidia[1-5],/dev/nvidia7`), as `GPUDevices=` reads them.
fn device_list(minors: &[u32]) -> String {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &m in minors {
        match runs.last_mut() {
            Some((first, count)) if *first + *count == m => *count += 1,
            _ => runs.push((m, 1)),
        }
    }
    runs.iter()
        .map(|&(first, count)| device_range(first, count))
        .collect::<Vec<_>>()
        .join(",")
}

/// The lines a node `node` whose GPUs (`gpus`) Slurm detects needs under
/// `setup`; `Err` where that setup cannot serve it (GPUs held whole or with
/// MIG on where gpushare places, no GPU that shares).
pub fn detected_node_config(
    cfg: &GpuMpsConfig,
    setup: SlurmSetup,
    node: &str,
    gpus: &[DetectedGpu],
    installed: Installed<'_>,
) -> Result<String, String> {
    let of = |role: GpuRole| -> Vec<u32> {
        gpus.iter()
            .filter(|g| g.role == role)
            .map(|g| g.minor)
            .collect()
    };
    let (shared, held, mig) = (of(GpuRole::Shared), of(GpuRole::Whole), of(GpuRole::Mig));
    let n = u32::try_from(shared.len()).unwrap_or(u32::MAX);
    if n == 0 {
        return Err("no GPU of this node shares: list them in gpu_mps.conf's GPUDevices=".into());
    }
    let u = cfg.units_per_gpu;
    let mut out = String::new();
    let count = match setup {
        SlurmSetup::NodeCount => {
            if !held.is_empty() || !mig.is_empty() {
                let mut others = held.clone();
                others.extend(&mig);
                others.sort_unstable();
                return Err(format!(
                    "{} {} not shared (held whole or MIG on): before Slurm 23.11 keep such GPUs \
                     on nodes of their own",
                    device_list(&others),
                    if others.len() == 1 { "is" } else { "are" }
                ));
            }
            let count = cfg.slurm_count_for(n);
            out.push_str(&node_count_header(n, u, count));
            out.push_str(AUTODETECT_NOTE);
            let _ = write!(
                out,
                "\n# gres.conf\nAutoDetect=nvml\nName=mps Count={count}\n"
            );
            count
        }
        SlurmSetup::PerGpu => {
            out.push_str(PER_GPU_HEADER);
            out.push_str(AUTODETECT_NOTE);
            out.push_str("\n# gres.conf\nAutoDetect=nvml\n");
            per_gpu_mps_lines(&mut out, &held, &shared, u);
            u64::from(n) * u64::from(u)
        }
    };
    // Slurm's types in the order of the GPUs, each with its count.
    let mut types: Vec<(String, u32)> = Vec::new();
    for g in gpus.iter().filter(|g| g.role != GpuRole::Mig) {
        match types.iter_mut().find(|(t, _)| *t == g.gpu_type) {
            Some((_, c)) => *c += 1,
            None => types.push((g.gpu_type.clone(), 1)),
        }
    }
    let mut gres: String = types.iter().map(|(t, c)| format!("gpu:{t}:{c},")).collect();
    let _ = write!(gres, "mps:{count}");
    let devices = (!held.is_empty() || !mig.is_empty()).then(|| device_list(&shared));
    other_files(
        &mut out,
        cfg,
        setup,
        node,
        (&gres, count),
        devices.as_deref(),
        installed,
    );
    if !mig.is_empty() {
        let stems: Vec<String> = gpus
            .iter()
            .filter(|g| g.role == GpuRole::Mig)
            .map(|g| g.gpu_type.split('-').next().unwrap_or_default().to_owned())
            .collect();
        let _ = write!(
            out,
            "\n# slurm.conf's Gres= also takes the MIG slices, as `slurmd -G` names them \
             (gpu:{}_<profile>:N)\n",
            stems.first().map_or("", String::as_str)
        );
        let warning = MpsBooking {
            per_gpu: true,
            mig_gpus: mig.iter().map(|m| format!("/dev/nvidia{m}")).collect(),
            ..MpsBooking::default()
        }
        .mig_stacking()
        .unwrap_or_default();
        let _ = writeln!(out, "# WARNING: {warning}");
    }
    if let Some(max_shared) = shared.iter().max() {
        let mut before: Vec<u32> = held
            .iter()
            .chain(&mig)
            .copied()
            .filter(|m| m < max_shared)
            .collect();
        before.sort_unstable();
        if !before.is_empty() {
            let _ = writeln!(
                out,
                "# WARNING: {} {} before a shared GPU in Slurm's order, while SLURM_JOB_GPUS \
                 counts GPUDevices= from the first GPU: share the GPUs of the lowest minors",
                device_list(&before),
                if before.len() == 1 { "comes" } else { "come" }
            );
        }
    }
    Ok(out)
}

/// What AutoDetect does, at the top of its lines.
const AUTODETECT_NOTE: &str =
    "# AutoDetect=nvml makes this node's gpu lines (File=/dev/nvidia<minor>, the type from\n\
     # NVML's device name), so gres.conf holds only the mps lines; `slurmd -G` on the node\n\
     # prints what slurmd found.\n";

#[cfg(test)]
mod tests;
