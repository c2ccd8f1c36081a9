//! What NVML says about the node's GPUs, where it can be had.
//!
//! NVML (`libnvidia-ml.so`) is loaded at run time by `nvml-wrapper`: a node
//! without the NVIDIA driver, or the test cluster, simply gets `Err` and
//! everything works from the device files and `gpu_mps.conf` instead.
//! NVML's index order is the PCI bus order, the order `CUDA_DEVICE_ORDER=
//! PCI_BUS_ID` gives the daemons; `/dev/nvidiaN` is the GPU of minor N.

use gpushare::mps::detected_lines::NvmlGpu;
use gpushare::mps::status::{self, NodeStatus};
use gpushare::mps::xid;
use nvml_wrapper::error::NvmlError;
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
    /// NVML reports the GPU lost (`NVML_ERROR_GPU_IS_LOST`: fallen off the
    /// bus, or otherwise inaccessible until a reset).
    pub lost: bool,
    /// NVML's PCI bus id (`00000000:3B:00.0`): how the driver's kernel
    /// messages name the GPU.
    pub pci_bus_id: Option<String>,
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
                lost: matches!(d.memory_info(), Err(NvmlError::GpuLost)),
                pci_bus_id: d.pci_info().ok().map(|p| p.bus_id),
                memory_mib: d.memory_info().ok().map(|m| m.total / (1024 * 1024)),
                minor: d.minor_number().ok(),
                compute_processes: d
                    .running_compute_processes()
                    .map(|ps| ps.iter().map(|p| p.pid).collect())
                    .unwrap_or_default(),
                mig_enabled: d.mig_mode().ok().map(|m| m.current == 1),
            },
            Err(e) => GpuFacts {
                index,
                lost: matches!(e, NvmlError::GpuLost),
                pci_bus_id: None,
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

/// How long the prolog waits for NVML: a GPU fallen off the bus can hang
/// it, and the job's start waits meanwhile.
pub const QUERY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The hidden option that makes a node program print [`gpus`] as
/// [`facts_text`] and exit: NVML is asked in a process of its own, so a
/// hung query is killed or left behind, never waited for.
pub const FACTS_OPTION: &str = "--nvml-facts";

/// Where the prolog keeps NVML's last figures, in the state directory: what
/// it uses while NVML does not answer, and what the node timer maps the
/// kernel log's PCI addresses to GPUs with (never asking NVML itself).
pub const KEPT_FACTS: &str = gpushare::mps::gpu_devices::KEPT_FACTS;

/// The figures the prolog uses, one GPU a line: `<index> <minor>
/// <memory MiB> <mig on> <lost> <PCI bus id>`, `-` where NVML could not say.
pub fn facts_text(gpus: &[GpuFacts]) -> String {
    fn word<T: ToString>(v: Option<T>) -> String {
        v.map_or_else(|| "-".to_owned(), |v| v.to_string())
    }
    gpus.iter()
        .map(|g| {
            format!(
                "{} {} {} {} {} {}\n",
                g.index,
                word(g.minor),
                word(g.memory_mib),
                word(g.mig_enabled.map(u8::from)),
                u8::from(g.lost),
                word(
                    g.pci_bus_id
                        .as_deref()
                        .filter(|p| !p.contains(char::is_whitespace))
                )
            )
        })
        .collect()
}

/// The GPUs of a [`facts_text`] (`None`: not such a text, e.g. cut short).
pub fn parse_facts(text: &str) -> Option<Vec<GpuFacts>> {
    fn word<T: std::str::FromStr>(w: &str) -> Option<Option<T>> {
        if w == "-" {
            Some(None)
        } else {
            w.parse().ok().map(Some)
        }
    }
    if !text.is_empty() && !text.ends_with('\n') {
        return None;
    }
    text.lines()
        .map(|line| {
            let w: Vec<&str> = line.split(' ').collect();
            // Four words: kept by gpushare 0.1, which did not ask.
            let (index, minor, memory, mig, lost, pci) = match w.as_slice() {
                [index, minor, memory, mig] => (index, minor, memory, mig, &"0", &"-"),
                [index, minor, memory, mig, lost] => (index, minor, memory, mig, lost, &"-"),
                [index, minor, memory, mig, lost, pci] => (index, minor, memory, mig, lost, pci),
                _ => return None,
            };
            Some(GpuFacts {
                index: index.parse().ok()?,
                minor: word(minor)?,
                memory_mib: word(memory)?,
                mig_enabled: word::<u8>(mig)?.map(|m| m == 1),
                lost: match *lost {
                    "0" => false,
                    "1" => true,
                    _ => return None,
                },
                uuid: None,
                compute_processes: Vec::new(),
                pci_bus_id: word(pci)?,
            })
        })
        .collect()
}

/// What `program OPTION` prints within `timeout`; a hung query is an
/// error that says so.
fn ask(
    program: &std::path::Path,
    option: &str,
    timeout: std::time::Duration,
) -> Result<String, String> {
    let mut cmd = std::process::Command::new(program);
    cmd.arg(option);
    let ran = gpushare::shared::bounded::run(cmd, None, timeout).map_err(|e| e.to_string())?;
    if !ran.status.success() {
        return Err(ran.stderr.trim().to_owned());
    }
    Ok(ran.stdout)
}

/// What NVML says, asked through `program` [`FACTS_OPTION`] within
/// `timeout` ([`QUERY_TIMEOUT`]); a hung query is an error that says so.
pub fn gpus_bounded(
    program: &std::path::Path,
    timeout: std::time::Duration,
) -> Result<Vec<GpuFacts>, String> {
    let out = ask(program, FACTS_OPTION, timeout)?;
    parse_facts(&out).ok_or_else(|| format!("unreadable NVML figures: {out:?}"))
}

/// The hidden option that makes `gpu-mps` print [`names`] as
/// [`names_text`] and exit: `gpu-mps config` asks NVML for the GPUs'
/// names (the types Slurm's AutoDetect gives them) in a process of its
/// own, as the prolog asks for its figures.
pub const NAMES_OPTION: &str = "--nvml-names";

/// Each GPU's minor number, MIG mode and NVML name (a GPU whose minor
/// NVML cannot say is left out: Slurm's AutoDetect skips it too).
pub fn names() -> Result<Vec<NvmlGpu>, String> {
    let nvml = Nvml::init().map_err(|e| format!("NVML unavailable: {e}"))?;
    let count = nvml
        .device_count()
        .map_err(|e| format!("NVML device count: {e}"))?;
    Ok((0..count)
        .filter_map(|index| {
            let d = nvml.device_by_index(index).ok()?;
            Some(NvmlGpu {
                minor: d.minor_number().ok()?,
                name: d.name().unwrap_or_default(),
                mig: d.mig_mode().is_ok_and(|m| m.current == 1),
            })
        })
        .collect())
}

/// One GPU a line: `<minor> <mig 0|1> <name>` (the name last: it holds
/// spaces).
pub fn names_text(gpus: &[NvmlGpu]) -> String {
    gpus.iter()
        .map(|g| {
            let name: String = g.name.chars().filter(|c| !c.is_control()).collect();
            format!("{} {} {name}\n", g.minor, u8::from(g.mig))
        })
        .collect()
}

/// The GPUs of a [`names_text`] (`None`: not such a text).
pub fn parse_names(text: &str) -> Option<Vec<NvmlGpu>> {
    if !text.is_empty() && !text.ends_with('\n') {
        return None;
    }
    text.lines()
        .map(|line| {
            let mut words = line.splitn(3, ' ');
            let minor = words.next()?.parse().ok()?;
            let mig = match words.next()? {
                "0" => false,
                "1" => true,
                _ => return None,
            };
            Some(NvmlGpu {
                minor,
                mig,
                name: words.next().unwrap_or_default().to_owned(),
            })
        })
        .collect()
}

/// Where this process was started as NVML's child (its first argument
/// [`FACTS_OPTION`] or [`NAMES_OPTION`]): prints the answer and says how
/// to exit; `None` otherwise.
pub fn answer_as_child() -> Option<std::process::ExitCode> {
    let answer = match std::env::args().nth(1).as_deref() {
        Some(FACTS_OPTION) => gpus().map(|g| facts_text(&g)),
        Some(NAMES_OPTION) => names().map(|g| names_text(&g)),
        _ => return None,
    };
    Some(match answer {
        Ok(text) => {
            print!("{text}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::ExitCode::FAILURE
        }
    })
}

/// [`names`], asked through `program` [`NAMES_OPTION`] within `timeout`.
pub fn names_bounded(
    program: &std::path::Path,
    timeout: std::time::Duration,
) -> Result<Vec<NvmlGpu>, String> {
    let out = ask(program, NAMES_OPTION, timeout)?;
    parse_names(&out).ok_or_else(|| format!("unreadable NVML names: {out:?}"))
}

/// Where NVML last saw each GPU, from the figures the prolog kept in
/// `state_dir` ([`KEPT_FACTS`]; none kept: no GPU known).
pub fn last_seen(state_dir: &std::path::Path) -> Vec<xid::SeenGpu> {
    std::fs::read_to_string(state_dir.join(KEPT_FACTS))
        .ok()
        .and_then(|t| parse_facts(&t))
        .unwrap_or_default()
        .iter()
        .map(|f| xid::SeenGpu {
            index: f.index,
            minor: f.minor,
            pci: f.pci_bus_id.as_deref().and_then(xid::parse_pci),
        })
        .collect()
}

/// Adds what NVML says, where it loads (a node with the driver), to the
/// status of a node whose `GPUDevices` are `devices`: UUIDs, memory, MPS
/// clients, and its GPU order checked against the list.
pub fn add_to_status(view: &mut NodeStatus, devices: &[impl AsRef<std::path::Path>]) {
    if let Ok(facts) = gpus() {
        add_facts(view, devices, &facts);
    }
}

fn add_facts(view: &mut NodeStatus, devices: &[impl AsRef<std::path::Path>], facts: &[GpuFacts]) {
    for (m, f) in view.mps.iter_mut().zip(facts) {
        m.uuid = f.uuid.clone();
        m.memory_mib = f.memory_mib;
        m.nvml_compute_processes = Some(f.compute_processes.clone());
    }
    let minors: Vec<Option<u32>> = facts.iter().map(|f| f.minor).collect();
    view.warnings = status::minor_mismatches(devices, &minors);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_read_back_and_a_cut_text_does_not() {
        let gpus = vec![
            GpuFacts {
                index: 0,
                uuid: None,
                memory_mib: Some(81_559),
                minor: Some(3),
                compute_processes: Vec::new(),
                mig_enabled: Some(true),
                lost: false,
                pci_bus_id: Some("00000000:3B:00.0".into()),
            },
            GpuFacts {
                index: 1,
                uuid: None,
                memory_mib: None,
                minor: None,
                compute_processes: Vec::new(),
                mig_enabled: None,
                lost: true,
                pci_bus_id: None,
            },
        ];
        let text = facts_text(&gpus);
        assert_eq!(text, "0 3 81559 1 0 00000000:3B:00.0\n1 - - - 1 -\n");
        assert_eq!(parse_facts(&text), Some(gpus));
        // As gpushare 0.1 kept them: not lost.
        assert!(parse_facts("0 3 81559 1\n").is_some_and(|g| !g[0].lost));
        assert_eq!(parse_facts(""), Some(Vec::new()));
        for bad in [
            "0 3 81559 1",
            "0 3 81559\n",
            "0 x 1 1\n",
            "0 1 1 1 2\n",
            "0 1 1 1 1 - 1\n",
        ] {
            assert_eq!(parse_facts(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn names_read_back_with_their_spaces() {
        let gpus = vec![
            NvmlGpu {
                minor: 0,
                name: "NVIDIA H100 80GB HBM3".into(),
                mig: false,
            },
            NvmlGpu {
                minor: 7,
                name: "NVIDIA A100-SXM4-80GB".into(),
                mig: true,
            },
        ];
        let text = names_text(&gpus);
        assert_eq!(
            text,
            "0 0 NVIDIA H100 80GB HBM3\n7 1 NVIDIA A100-SXM4-80GB\n"
        );
        assert_eq!(parse_names(&text), Some(gpus));
        assert_eq!(parse_names(""), Some(Vec::new()));
        for bad in ["0 0 A40", "x 0 A40\n", "0 2 A40\n", "0\n"] {
            assert_eq!(parse_names(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_hung_query_is_bounded() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let hung = dir.path().join("hung");
        std::fs::write(&hung, "#!/bin/sh\nsleep 60\n").unwrap_or_else(|e| panic!("{e}"));
        let mut perms = std::fs::metadata(&hung)
            .map(|m| m.permissions())
            .unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&hung, perms).unwrap_or_else(|e| panic!("{e}"));
        let started = std::time::Instant::now();
        let limit = std::time::Duration::from_millis(300);
        let err = gpus_bounded(&hung, limit).err().unwrap_or_default();
        assert!(err.contains("did not finish"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
    }

    #[test]
    fn kept_figures_name_each_gpu_by_its_pci_address() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(last_seen(dir.path()), Vec::new());
        std::fs::write(
            dir.path().join(KEPT_FACTS),
            "0 3 81559 0 0 00000000:3B:00.0\n1 - - - 1 -\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            last_seen(dir.path()),
            vec![
                xid::SeenGpu {
                    index: 0,
                    minor: Some(3),
                    pci: Some((0, 0x3b, 0)),
                },
                xid::SeenGpu {
                    index: 1,
                    minor: None,
                    pci: None,
                },
            ]
        );
    }

    #[test]
    fn nvml_facts_fill_the_status_and_check_the_gpu_order() {
        let mut view = NodeStatus::of(&Default::default(), 2, 100, Vec::new());
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let cfg = gpushare::mps::config::GpuMpsConfig {
            state_dir: dir.path().join("state"),
            mps_control: gpushare::mps::config::MpsControl::Disabled,
            ..Default::default()
        };
        view.mps = status::mps_view(&cfg, &view.gpus, |g| status::pipe_probe(&cfg, g));
        let fact = |index: u32, minor: u32| GpuFacts {
            index,
            uuid: Some(format!("GPU-{index}")),
            memory_mib: Some(40_960),
            minor: Some(minor),
            compute_processes: vec![42],
            mig_enabled: None,
            lost: false,
            pci_bus_id: None,
        };
        let devices = ["/dev/nvidia0", "/dev/nvidia1"];
        add_facts(&mut view, &devices, &[fact(0, 1), fact(1, 0)]);
        assert_eq!(view.mps[1].uuid.as_deref(), Some("GPU-1"));
        assert_eq!(view.mps[0].nvml_compute_processes, Some(vec![42]));
        assert_eq!(view.warnings.len(), 2, "{:?}", view.warnings);
    }
}
