//! NVML's facts as `gpu-mps-prolog` takes them for a share
//! ([`gpushare::mps::node::mains::nvml_ask`] says when): the facts kept in
//! the state directory where they are fresh ([`facts_keys`]: the boot, the
//! driver, its GPUs and MIG instances read as when NVML was last asked),
//! else asked in a child process within [`nvml::QUERY_TIMEOUT`] and kept
//! with their keys ([`read`]); the node timer asks on each run
//! ([`refresh`]). Kept facts stand in too where NVML does not answer. Read
//! into what the node and the booking take ([`seen`]); GPUs NVML reports
//! lost are set aside ([`set_aside_lost`]) by whoever asked NVML: the
//! prolog that asked, and the node timer on each run.

use std::io::ErrorKind;
use std::path::Path;

use gpushare::mps::node::facts_keys::{self, FactsKeys, Freshness, KEPT_KEYS};
use gpushare::mps::node::mains::NvmlAsk;
use gpushare::mps::node::Node;
use gpushare::mps::{health, state_dir};
use gpushare::shared::autodetect::ReportedGpu;

use crate::nvml::{self, GpuFacts};

/// The GPUs' facts a prolog takes, and whether NVML was asked for them
/// now (else they are the kept ones, fresh).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub gpus: Vec<GpuFacts>,
    pub asked: bool,
}

/// The node's GPUs for a share's prolog: the kept facts where fresh (one
/// debug line), else NVML asked in a process of its own within
/// `nvml::QUERY_TIMEOUT` (a GPU fallen off the bus can hang NVML), why
/// logged at info; see [`kept_or_last`].
pub fn read(state_dir: &Path) -> Result<Facts, String> {
    let now = node_keys(Path::new("/"));
    match kept_fresh(state_dir, &now) {
        Ok(gpus) => {
            log::debug!("NVML not asked: the GPUs' facts kept are fresh");
            return Ok(Facts { gpus, asked: false });
        }
        Err(why) => log::info!("asking NVML for the GPUs' facts: {why}"),
    }
    kept_or_last(state_dir, ask(), &now).map(|gpus| Facts { gpus, asked: true })
}

/// NVML asked now and its answer kept with the node's keys: the node
/// timer's run, so that a prolog's kept facts are as fresh as the timer's
/// period. Only NVML's answer, never the facts kept before (a GPU they
/// say lost may have been given back since): `Err` where NVML did not
/// answer.
pub fn refresh(state_dir: &Path) -> Result<Vec<GpuFacts>, String> {
    let now = node_keys(Path::new("/"));
    let gpus = ask()?;
    keep(state_dir, &gpus, &now);
    Ok(gpus)
}

fn ask() -> Result<Vec<GpuFacts>, String> {
    std::env::current_exe()
        .map_err(|e| format!("cannot find this program to ask NVML: {e}"))
        .and_then(|exe| nvml::gpus_bounded(&exe, nvml::QUERY_TIMEOUT))
}

/// The facts kept in `state_dir` where their keys read as `now`; else why
/// NVML is to be asked.
fn kept_fresh(state_dir: &Path, now: &FactsKeys) -> Result<Vec<GpuFacts>, String> {
    let gpus = std::fs::read_to_string(state_dir.join(nvml::KEPT_FACTS))
        .ok()
        .and_then(|t| nvml::parse_facts(&t))
        .ok_or_else(|| "no facts kept".to_owned())?;
    let kept = std::fs::read_to_string(state_dir.join(KEPT_KEYS)).ok();
    match facts_keys::freshness(kept.as_deref(), now) {
        Freshness::Fresh => Ok(gpus),
        Freshness::Stale(why) => Err(why),
    }
}

/// What makes kept facts stale, read under `root` (`/` on a node): a file
/// or directory that is not there reads `none` (no driver loaded), one
/// that cannot be read `None`.
pub fn node_keys(root: &Path) -> FactsKeys {
    let proc_nvidia = root.join("proc/driver/nvidia");
    let absent = |e: &std::io::Error| e.kind() == ErrorKind::NotFound;
    let driver = match std::fs::read_to_string(proc_nvidia.join("version")) {
        Ok(text) => Some(facts_keys::driver_word(&text)),
        Err(e) if absent(&e) => {
            match std::fs::read_to_string(root.join("sys/module/nvidia/version")) {
                Ok(text) => Some(facts_keys::driver_word(&text)),
                Err(e) if absent(&e) => Some(facts_keys::NONE.to_owned()),
                Err(_) => None,
            }
        }
        Err(_) => None,
    };
    let gpus = match std::fs::read_dir(proc_nvidia.join("gpus")) {
        Ok(dir) => dir
            .map(|e| {
                let e = e.ok()?;
                let info = std::fs::read_to_string(e.path().join("information")).ok()?;
                Some((e.file_name().to_string_lossy().into_owned(), info))
            })
            .collect::<Option<Vec<_>>>()
            .map(|g| facts_keys::gpus_key(&g)),
        Err(e) if absent(&e) => Some(facts_keys::NONE.to_owned()),
        Err(_) => None,
    };
    FactsKeys {
        boot: std::fs::read_to_string(root.join("proc/sys/kernel/random/boot_id"))
            .ok()
            .map(|b| b.trim().to_owned()),
        driver,
        gpus,
        mig: mig_instances(&proc_nvidia.join("capabilities")).map(|i| facts_keys::mig_key(&i)),
    }
}

/// The MIG GPU instances under the driver's `capabilities` directory
/// (`gpu0/gi1`, ...): none where it, or a GPU's `mig`, is not there.
fn mig_instances(caps: &Path) -> Option<Vec<String>> {
    let absent = |e: &std::io::Error| e.kind() == ErrorKind::NotFound;
    let gpus = match std::fs::read_dir(caps) {
        Ok(dir) => dir,
        Err(e) if absent(&e) => return Some(Vec::new()),
        Err(_) => return None,
    };
    let mut found = Vec::new();
    for gpu in gpus {
        let gpu = gpu.ok()?.file_name().to_string_lossy().into_owned();
        if !gpu.starts_with("gpu") {
            continue;
        }
        let instances = match std::fs::read_dir(caps.join(&gpu).join("mig")) {
            Ok(dir) => dir,
            Err(e) if absent(&e) => continue,
            Err(_) => return None,
        };
        for gi in instances {
            let gi = gi.ok()?.file_name().to_string_lossy().into_owned();
            if gi.starts_with("gi") {
                found.push(format!("{gpu}/{gi}"));
            }
        }
    }
    Some(found)
}

/// `gpus` kept in `state_dir` where they changed, then the keys `now`
/// (read before NVML was asked) beside them: the facts first, so keys
/// never stand beside facts older than they are.
fn keep(state_dir: &Path, gpus: &[GpuFacts], now: &FactsKeys) {
    let text = nvml::facts_text(gpus);
    let keys = facts_keys::keys_text(now);
    for (name, text) in [(nvml::KEPT_FACTS, &text), (KEPT_KEYS, &keys)] {
        let path = state_dir.join(name);
        if std::fs::read_to_string(&path).ok().as_deref() == Some(text.as_str()) {
            continue;
        }
        if let Err(e) = state_dir::replace_file(state_dir, name, text.as_bytes(), 0o600) {
            log::warn!("NVML's figures not kept: {e}");
            break;
        }
    }
}

/// NVML's answer `asked`, kept in `state_dir` with the keys `now`
/// ([`keep`]); where NVML did not answer, the last ones kept, with a
/// warning; else why not.
pub fn kept_or_last(
    state_dir: &Path,
    asked: Result<Vec<GpuFacts>, String>,
    now: &FactsKeys,
) -> Result<Vec<GpuFacts>, String> {
    let kept = state_dir.join(nvml::KEPT_FACTS);
    match asked {
        Ok(gpus) => {
            keep(state_dir, &gpus, now);
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

/// Sets aside the `lost` GPUs not set aside already: what was done, one
/// line each, for the caller's log (errors all: a GPU lost).
#[must_use]
pub fn set_aside_lost(node: &Node, lost: &[u32]) -> Vec<String> {
    let known = health::read(&node.cfg.state_dir);
    let mut lines = Vec::new();
    for &gpu in lost.iter().filter(|g| !known.contains_key(g)) {
        let reason = "NVML reports it lost (NVML_ERROR_GPU_IS_LOST: fallen off the bus or \
                      otherwise unreachable until a reset)";
        lines.push(
            match health::set_aside(&node.cfg.state_dir, gpu, reason, node.ledger.lock_wait()) {
                Ok(_) => format!(
                    "GPU {gpu} set aside from sharing: {reason}; `gpu-mps resume-gpu {gpu}` once fixed"
                ),
                Err(e) => format!("GPU {gpu} is lost, but could not be set aside: {e}"),
            },
        );
    }
    lines
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
    fn nvml_s_figures_are_kept_with_their_keys_and_used_where_it_does_not_answer() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let gpus = vec![gpu(0, Some(0), Some(81_000))];
        let now = FactsKeys {
            boot: Some("b1".into()),
            driver: Some("550.54.15".into()),
            gpus: Some("none".into()),
            mig: Some("none".into()),
        };
        assert_eq!(
            kept_or_last(dir.path(), Err("no driver".to_owned()), &now),
            Err("no driver".to_owned())
        );
        assert_eq!(
            kept_fresh(dir.path(), &now),
            Err("no facts kept".to_owned())
        );
        assert_eq!(
            kept_or_last(dir.path(), Ok(gpus.clone()), &now),
            Ok(gpus.clone())
        );
        let kept = std::fs::read_to_string(dir.path().join(nvml::KEPT_FACTS));
        assert_eq!(kept.ok(), Some(nvml::facts_text(&gpus)));
        let keys = std::fs::read_to_string(dir.path().join(KEPT_KEYS));
        assert_eq!(keys.ok(), Some(facts_keys::keys_text(&now)));
        // Fresh under the same keys; stale, saying why, under others.
        assert_eq!(kept_fresh(dir.path(), &now), Ok(gpus.clone()));
        let reloaded = FactsKeys {
            driver: Some("555.42.02".into()),
            ..now.clone()
        };
        let why = kept_fresh(dir.path(), &reloaded).err().unwrap_or_default();
        assert!(
            why.contains("driver's version changed (kept 550.54.15, now 555.42.02)"),
            "{why}"
        );
        assert_eq!(
            kept_or_last(dir.path(), Err("hung".to_owned()), &reloaded),
            Ok(gpus.clone())
        );
        // The node timer takes NVML's answer only, never the kept facts
        // (a GPU they say lost may have been given back since).
        let lost = vec![GpuFacts {
            lost: true,
            ..gpu(1, Some(1), None)
        }];
        let kept_lost = kept_or_last(dir.path(), Ok(lost), &now);
        assert!(kept_lost.is_ok_and(|g| g[0].lost));
        let asked = refresh(dir.path());
        assert!(asked.is_err(), "{asked:?}");
        // Facts kept by an earlier gpushare, without keys: stale.
        std::fs::remove_file(dir.path().join(KEPT_KEYS)).unwrap_or_else(|e| panic!("{e}"));
        let why = kept_fresh(dir.path(), &now).err().unwrap_or_default();
        assert!(why.contains("carry no keys"), "{why}");
    }

    #[test]
    fn the_node_s_keys_are_read_from_proc() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let write = |path: &str, text: &str| {
            let path = root.path().join(path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{e}"));
            }
            std::fs::write(path, text).unwrap_or_else(|e| panic!("{e}"));
        };
        write("proc/sys/kernel/random/boot_id", "b1\n");
        // No driver: its keys read `none`.
        let bare = node_keys(root.path());
        assert_eq!(
            bare,
            FactsKeys {
                boot: Some("b1".into()),
                driver: Some("none".into()),
                gpus: Some("none".into()),
                mig: Some("none".into()),
            }
        );
        write("sys/module/nvidia/version", "550.54.15\n");
        assert_eq!(node_keys(root.path()).driver.as_deref(), Some("550.54.15"));
        write(
            "proc/driver/nvidia/version",
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  555.42.02  Tue\n",
        );
        write(
            "proc/driver/nvidia/gpus/0000:3b:00.0/information",
            "Device Minor: 0\n",
        );
        write("proc/driver/nvidia/capabilities/mig/config", "");
        write("proc/driver/nvidia/capabilities/gpu0/mig/gi1/access", "");
        write("proc/driver/nvidia/capabilities/gpu0/mig/monitor", "");
        let keys = node_keys(root.path());
        assert_eq!(keys.driver.as_deref(), Some("555.42.02"));
        assert!(
            keys.gpus
                .as_deref()
                .is_some_and(|g| g.starts_with("0000:3b:00.0#")),
            "{keys:?}"
        );
        assert_eq!(keys.mig.as_deref(), Some("gpu0/gi1"));
        // A GPU whose information cannot be read: the key cannot be.
        std::fs::remove_file(
            root.path()
                .join("proc/driver/nvidia/gpus/0000:3b:00.0/information"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(node_keys(root.path()).gpus, None);
        std::fs::remove_file(root.path().join("proc/sys/kernel/random/boot_id"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(node_keys(root.path()).boot, None);
    }
}
