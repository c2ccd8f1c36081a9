//! `gpu-mps config`: the slurm.conf, gres.conf and gpu_mps.conf lines a
//! GPU node needs, from what the node says of itself (the installed Slurm
//! release, whether slurmd detects its GPUs, NVML's names of them) and
//! what the admin asked. The lines are the core's (`mps::installed`);
//! this module gathers the node's facts for it.

use std::path::Path;

use gpushare::mps::installed;
use gpushare::mps::setup_lines::GpuGroup;

use crate::nvml;

/// What the admin asked `gpu-mps config` for.
#[derive(Debug, Clone, Copy)]
pub struct Asked<'a> {
    /// `--gpus`, `--type`.
    pub gpus: Option<u32>,
    pub gpu_type: Option<&'a str>,
    /// `--whole`: GPUs given whole, not shared.
    pub whole: &'a [GpuGroup],
    /// `--release` (else the installed Slurm's).
    pub release: Option<(u32, u32)>,
    /// `--autodetect`: lines for a node whose slurmd detects its GPUs,
    /// whatever its gres.conf says now.
    pub autodetect: bool,
}

/// The node's lines for gpu_mps.conf `conf`, node `node`; NVML's trouble
/// naming the GPUs goes to `say` (the lines then take `--gpus` and
/// `--type`).
pub fn lines(
    conf: &Path,
    node: &str,
    asked: Asked<'_>,
    say: &mut dyn FnMut(String),
) -> Result<String, String> {
    let Some(release) = asked.release.or_else(installed::slurm_release) else {
        return Err(
            "cannot tell the Slurm release (scontrol --version): pass --release, e.g. \
                    --release 24.11"
                .into(),
        );
    };
    let driver = nvml::driver_version();
    let (gpus, gpu_type) = (asked.gpus, asked.gpu_type);
    if asked.autodetect || installed::gpus_detected_here(node) {
        // NVML in a child of our own: a GPU fallen off the bus can hang it.
        let names = std::env::current_exe()
            .map_err(|e| e.to_string())
            .and_then(|exe| nvml::names_bounded(&exe, nvml::QUERY_TIMEOUT));
        let nvml_gpus = names.unwrap_or_else(|e| {
            say(format!(
                "NVML cannot name this node's GPUs ({e}): --gpus and --type say"
            ));
            Vec::new()
        });
        return installed::detected_config(
            conf,
            release,
            node,
            ((gpus, gpu_type), asked.whole),
            &nvml_gpus,
            driver.as_deref(),
            installed::slurmd_g(),
        );
    }
    installed::node_config(
        conf,
        release,
        node,
        gpu_type.unwrap_or("TYPE"),
        gpus,
        asked.whole,
        driver.as_deref(),
    )
}
