//! The node's GPU device files (`GPUDevices=`, else `/dev/nvidiaN`), the
//! minor each names, and the PCI bus id NVML last gave that minor (the
//! figures the prolog keeps in `<StateDir>/nvml-facts`). gpushare's GPU
//! index is a position in the device list; `nvidia-smi -i` and the
//! driver's kernel messages name a GPU by its PCI bus id, which no
//! reordering (`CUDA_DEVICE_ORDER`, a list in another order) changes.

use std::fs;
use std::path::{Path, PathBuf};

use super::config::GpuMpsConfig;

/// The figures NVML gave the prolog last, kept in the state directory, one
/// GPU a line: `<index> <minor> <memory MiB> <mig on> <lost> <PCI bus id>`,
/// `-` where NVML could not say (written by `gpushare_node::nvml`).
pub const KEPT_FACTS: &str = "nvml-facts";

/// The node's GPU device files, in index order.
pub fn gpu_devices(cfg: &GpuMpsConfig) -> Vec<PathBuf> {
    if let Some(list) = &cfg.gpu_devices {
        return list.clone();
    }
    let mut found: Vec<(u32, PathBuf)> = fs::read_dir("/dev")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name();
                    let n = name.to_str()?.strip_prefix("nvidia")?.parse::<u32>().ok()?;
                    Some((n, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found.into_iter().map(|(_, p)| p).collect()
}

/// The N of a `/dev/nvidiaN` path: the device's minor number, which is how
/// NVML names the same GPU (`nvmlDeviceGetMinorNumber`).
pub fn device_minor(path: &Path) -> Option<u32> {
    path.file_name()?
        .to_str()?
        .strip_prefix("nvidia")?
        .parse()
        .ok()
}

/// The PCI bus id (`00000000:3B:00.0`) of the GPU of minor `minor` in a
/// [`KEPT_FACTS`] text; `None` where the text does not say.
pub fn bus_id_of_minor(facts: &str, minor: u32) -> Option<String> {
    let minor = minor.to_string();
    facts.lines().find_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        let bus = *words.get(5)?;
        let spelled = bus.len() <= 32
            && bus.contains(':')
            && bus
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
        (words.get(1) == Some(&minor.as_str()) && spelled).then(|| bus.to_owned())
    })
}

/// GPU `gpu`'s PCI bus id, where its device file names a minor and NVML's
/// kept figures give that minor one.
pub fn bus_id(cfg: &GpuMpsConfig, gpu: u32) -> Option<String> {
    let devices = gpu_devices(cfg);
    let minor = device_minor(devices.get(usize::try_from(gpu).ok()?)?)?;
    let facts = fs::read_to_string(cfg.state_dir.join(KEPT_FACTS)).ok()?;
    bus_id_of_minor(&facts, minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_is_named_by_its_minors_bus_id_never_by_its_line() {
        // NVML's index 0 is minor 3: gpushare's GPU of /dev/nvidia3.
        let facts = "0 3 81559 0 0 00000000:3B:00.0\n1 1 81559 0 0 00000000:86:00.0\n\
                     2 - - 0 1 -\n3 0 81559 0 0 -\n";
        assert_eq!(
            bus_id_of_minor(facts, 3).as_deref(),
            Some("00000000:3B:00.0")
        );
        assert_eq!(
            bus_id_of_minor(facts, 1).as_deref(),
            Some("00000000:86:00.0")
        );
        assert_eq!(bus_id_of_minor(facts, 0), None, "NVML gave no bus id");
        assert_eq!(bus_id_of_minor(facts, 7), None, "no such minor");
        assert_eq!(bus_id_of_minor("0 3 1 0 0 ;rm -rf\n", 3), None);
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let cfg = GpuMpsConfig {
            state_dir: dir.path().to_path_buf(),
            gpu_devices: Some(vec!["/dev/nvidia1".into(), "/dev/nvidia3".into()]),
            ..GpuMpsConfig::default()
        };
        assert_eq!(bus_id(&cfg, 1), None, "no figures kept");
        fs::write(dir.path().join(KEPT_FACTS), facts).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(bus_id(&cfg, 1).as_deref(), Some("00000000:3B:00.0"));
        assert_eq!(bus_id(&cfg, 0).as_deref(), Some("00000000:86:00.0"));
        assert_eq!(bus_id(&cfg, 2), None, "no such GPU");
    }
}
