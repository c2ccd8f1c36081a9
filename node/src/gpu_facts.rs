//! NVML's facts as `gpu-mps-prolog` takes them for a share
//! ([`gpushare::mps::node::mains::nvml_ask`] says when): asked in a child process
//! within [`nvml::QUERY_TIMEOUT`], kept in the state directory for when
//! NVML does not answer, and read into what the node and the booking take
//! ([`seen`]); GPUs NVML reports lost are set aside ([`set_aside_lost`]).

use std::path::Path;

use gpushare::mps::node::mains::NvmlAsk;
use gpushare::mps::node::Node;
use gpushare::mps::{health, state_dir};
use gpushare::shared::autodetect::ReportedGpu;

use crate::nvml::{self, GpuFacts};

/// The node's GPUs as NVML says, asked in a process of its own within
/// `nvml::QUERY_TIMEOUT` (a GPU fallen off the bus can hang NVML); see
/// [`kept_or_last`].
pub fn read(state_dir: &Path) -> Result<Vec<GpuFacts>, String> {
    let asked = std::env::current_exe()
        .map_err(|e| format!("cannot find this program to ask NVML: {e}"))
        .and_then(|exe| nvml::gpus_bounded(&exe, nvml::QUERY_TIMEOUT));
    kept_or_last(state_dir, asked)
}

/// NVML's answer `asked`, its figures kept in `state_dir` where they
/// changed; where NVML did not answer, the last ones kept, with a
/// warning; else why not.
pub fn kept_or_last(
    state_dir: &Path,
    asked: Result<Vec<GpuFacts>, String>,
) -> Result<Vec<GpuFacts>, String> {
    const KEPT: &str = nvml::KEPT_FACTS;
    let kept = state_dir.join(KEPT);
    match asked {
        Ok(gpus) => {
            let text = nvml::facts_text(&gpus);
            if std::fs::read_to_string(&kept).ok().as_deref() != Some(text.as_str()) {
                if let Err(e) = state_dir::replace_file(state_dir, KEPT, text.as_bytes(), 0o600) {
                    log::warn!("NVML's figures not kept: {e}");
                }
            }
            Ok(gpus)
        }
        Err(e) => {
            let last = std::fs::read_to_string(&kept)
                .ok()
                .and_then(|t| nvml::parse_facts(&t));
            match last {
                Some(gpus) => {
                    log::warn!(
                        "NVML: {e}; using the figures it gave last ({})",
                        kept.display()
                    );
                    Ok(gpus)
                }
                None => Err(e),
            }
        }
    }
}

/// What the prolog takes from NVML's GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The node's GPU memory, where asked ([`NvmlAsk::memory`]): the
    /// smallest GPU's (a node's GPUs are one type in practice, and a limit
    /// must never exceed its GPU; `Some(None)`: none said).
    pub memory_mib: Option<Option<u64>>,
    /// The device minors of the GPUs in MIG mode.
    pub mig_minors: Vec<u32>,
    /// The node's GPUs (indexes) NVML reports lost: by device minor, or
    /// by NVML's index (the node's PCI order) where a lost GPU cannot say
    /// its minor.
    pub lost: Vec<u32>,
    /// NVML's GPUs as Slurm's AutoDetect=nvml finds them: the stacking
    /// check's view of the GPUs slurmd found.
    pub reported: Vec<ReportedGpu>,
}

/// What `gpus` say, for `ask`; `gpus_of_minor` gives the node's GPUs of a
/// device minor ([`Node::gpus_of_minors`]).
pub fn seen(gpus: &[GpuFacts], ask: NvmlAsk, gpus_of_minor: impl Fn(u32) -> Vec<u32>) -> Seen {
    let mig = |g: &&GpuFacts| g.mig_enabled == Some(true);
    let mut lost = Vec::new();
    for g in gpus.iter().filter(|g| g.lost) {
        match g.minor {
            Some(minor) => lost.extend(gpus_of_minor(minor)),
            None => lost.push(g.index),
        }
    }
    Seen {
        memory_mib: ask
            .memory
            .then(|| gpus.iter().filter_map(|g| g.memory_mib).min()),
        mig_minors: gpus.iter().filter(mig).filter_map(|g| g.minor).collect(),
        lost,
        reported: gpus
            .iter()
            .filter_map(|g| {
                Some(ReportedGpu {
                    file: format!("/dev/nvidia{}", g.minor?),
                    mig: g.mig_enabled == Some(true),
                })
            })
            .collect(),
    }
}

/// Sets aside the `lost` GPUs not set aside already, each said in the log.
pub fn set_aside_lost(node: &Node, lost: &[u32]) {
    let known = health::read(&node.cfg.state_dir);
    for &gpu in lost.iter().filter(|g| !known.contains_key(g)) {
        let reason = "NVML reports it lost (NVML_ERROR_GPU_IS_LOST: fallen off the bus or \
                      otherwise unreachable until a reset)";
        match health::set_aside(&node.cfg.state_dir, gpu, reason, node.ledger.lock_wait()) {
            Ok(_) => log::error!(
                "GPU {gpu} set aside from sharing: {reason}; `gpu-mps resume-gpu {gpu}` once fixed"
            ),
            Err(e) => log::error!("GPU {gpu} is lost, but could not be set aside: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, minor: Option<u32>, memory_mib: Option<u64>) -> GpuFacts {
        GpuFacts {
            index,
            uuid: None,
            memory_mib,
            minor,
            compute_processes: Vec::new(),
            mig_enabled: Some(false),
            lost: false,
            pci_bus_id: None,
        }
    }

    #[test]
    fn the_prolog_takes_the_smallest_memory_mig_gpus_lost_gpus_and_devices() {
        let mut gpus = vec![
            gpu(0, Some(0), Some(81_000)),
            gpu(1, Some(1), Some(40_000)),
            gpu(2, Some(3), None),
            gpu(3, None, Some(90_000)),
        ];
        gpus[1].mig_enabled = Some(true);
        gpus[2].lost = true;
        gpus[3].lost = true;
        // The node lists minor 3 as its GPU 2.
        let of_minor = |m: u32| if m == 3 { vec![2] } else { Vec::new() };
        let seen = seen(&gpus, NvmlAsk { memory: true }, of_minor);
        assert_eq!(seen.memory_mib, Some(Some(40_000)));
        assert_eq!(seen.mig_minors, [1]);
        // Minor 3 by the node's list; the one without a minor by its index.
        assert_eq!(seen.lost, [2, 3]);
        let files: Vec<(&str, bool)> = seen
            .reported
            .iter()
            .map(|r| (r.file.as_str(), r.mig))
            .collect();
        assert_eq!(
            files,
            [
                ("/dev/nvidia0", false),
                ("/dev/nvidia1", true),
                ("/dev/nvidia3", false)
            ]
        );
        // Memory not asked (GPUMemory= set, or no proportional limit):
        // the node's memory is left as it is.
        let seen = super::seen(&gpus, NvmlAsk { memory: false }, of_minor);
        assert_eq!(seen.memory_mib, None);
        // Asked, where no GPU says: none.
        let seen = super::seen(&gpus[2..3], NvmlAsk { memory: true }, of_minor);
        assert_eq!(seen.memory_mib, Some(None));
    }

    #[test]
    fn nvml_s_figures_are_kept_and_used_where_it_does_not_answer() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let gpus = vec![gpu(0, Some(0), Some(81_000))];
        assert_eq!(
            kept_or_last(dir.path(), Err("no driver".to_owned())),
            Err("no driver".to_owned())
        );
        assert_eq!(kept_or_last(dir.path(), Ok(gpus.clone())), Ok(gpus.clone()));
        let kept = std::fs::read_to_string(dir.path().join(nvml::KEPT_FACTS));
        assert_eq!(kept.ok(), Some(nvml::facts_text(&gpus)));
        assert_eq!(kept_or_last(dir.path(), Err("hung".to_owned())), Ok(gpus));
    }
}
