use std::path::Path;

use super::*;
use crate::shared::autodetect::ReportedGpu;

fn installed() -> Installed<'static> {
    Installed {
        libexec: Path::new("/usr/libexec/gpushare"),
        plugin_dir: Path::new("/usr/lib64/slurm"),
        conf: Path::new("/etc/slurm/gpu_mps.conf"),
    }
}

/// The node of the issue: 8 A100, the last two with MIG on.
fn a100_node() -> Vec<NvmlGpu> {
    (0..8)
        .map(|minor| NvmlGpu {
            minor,
            name: "NVIDIA A100-SXM4-80GB".into(),
            mig: minor >= 6,
        })
        .collect()
}

fn lines(gpus: &[DetectedGpu], setup: SlurmSetup) -> Result<String, String> {
    detected_node_config(&GpuMpsConfig::default(), setup, "gpu17", gpus, installed())
}

#[test]
fn an_8_gpu_node_with_2_mig_gpus_shares_6_and_is_told_slurm_stacks_them() {
    let (gpus, notes) =
        detected_gpus(&a100_node(), None, (None, None), &[]).unwrap_or_else(|e| panic!("{e}"));
    assert!(notes.is_empty());
    let t = lines(&gpus, SlurmSetup::PerGpu).unwrap_or_else(|e| panic!("{e}"));
    for want in [
        "# gres.conf\nAutoDetect=nvml\nName=mps Count=100 File=/dev/nvidia0 Flags=all_sharing\n",
        "Name=mps Count=100 File=/dev/nvidia5 Flags=all_sharing\n\n# slurm.conf",
        "NodeName=gpu17 Gres=gpu:nvidia_a100-sxm4-80gb:6,mps:600\n",
        "UnitsPerGPU=100\nGPUDevices=/dev/nvidia[0-5]\nPlacement=slurm\n",
        "(gpu:nvidia_a100_<profile>:N)",
        "# WARNING: /dev/nvidia6, /dev/nvidia7 have MIG on",
    ] {
        assert!(t.contains(want), "{want}:\n{t}");
    }
    assert!(!t.contains("\nName=gpu"), "{t}");
    assert!(!t.contains("Count=0"), "no line can name a MIG slice:\n{t}");
    // What the prolog makes of these lines, with NVML's GPUs as slurmd
    // finds them: Slurm places, and stacks because of the MIG GPUs.
    let booking = MpsBooking::from_texts(&t, &t, "gpu17");
    assert!(booking.autodetect && booking.per_gpu && booking.spreads());
    let reported: Vec<ReportedGpu> = a100_node()
        .iter()
        .map(|g| ReportedGpu {
            file: format!("/dev/nvidia{}", g.minor),
            mig: g.mig,
        })
        .collect();
    let with = booking.with_reported(&reported);
    assert!(!with.spreads() && with.unshared_gpus.is_empty(), "{with:?}");
    // Before 23.11 such a node is refused: keep MIG GPUs apart.
    let old = lines(&gpus, SlurmSetup::NodeCount);
    assert!(
        old.as_ref()
            .is_err_and(|e| e.starts_with("/dev/nvidia[6-7] are not shared")),
        "{old:?}"
    );
}

#[test]
fn gpus_not_listed_in_gpu_devices_are_held_whole_with_zero_lines_first() {
    let nvml: Vec<NvmlGpu> = a100_node()
        .into_iter()
        .map(|g| NvmlGpu { mig: false, ..g })
        .collect();
    let listed: Vec<PathBuf> = (0..4).map(crate::shared::autodetect::device_file).collect();
    let (gpus, _) = detected_gpus(&nvml, Some(&listed), (None, Some("a100")), &[])
        .unwrap_or_else(|e| panic!("{e}"));
    let t = lines(&gpus, SlurmSetup::PerGpu).unwrap_or_else(|e| panic!("{e}"));
    for want in [
        "AutoDetect=nvml\n# A GPU held whole needs an mps line of Count 0",
        "Name=mps Count=0 File=/dev/nvidia7 Flags=all_sharing\nName=mps Count=100 File=/dev/nvidia0",
        "Gres=gpu:a100:4,gpu:nvidia_a100-sxm4-80gb:4,mps:400\n",
        "GPUDevices=/dev/nvidia[0-3]\n",
    ] {
        assert!(t.contains(want), "{want}:\n{t}");
    }
    assert!(!t.contains("WARNING"), "{t}");
    let reported: Vec<ReportedGpu> = (0..8)
        .map(|m| ReportedGpu {
            file: format!("/dev/nvidia{m}"),
            mig: false,
        })
        .collect();
    assert!(MpsBooking::from_texts(&t, &t, "gpu17")
        .with_reported(&reported)
        .spreads());
    // --gpus 2: the first two share.
    let (gpus, _) =
        detected_gpus(&nvml, None, (Some(2), None), &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(gpus.iter().filter(|g| g.role == GpuRole::Shared).count(), 2);
    // A type that is no part of NVML's name is said to be wrong.
    let (_, notes) =
        detected_gpus(&nvml, None, (None, Some("h100")), &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(notes.len(), 8, "{notes:?}");
    assert!(notes[0].starts_with("--type h100 is not part of nvidia_a100-sxm4-80gb"));
    // With NVML, --whole is the GPUDevices= list's business.
    let whole = [GpuGroup::parse("h100:2").unwrap_or_else(|e| panic!("{e}"))];
    assert!(detected_gpus(&nvml, None, (None, None), &whole).is_err());
}

#[test]
fn without_nvml_the_admin_says_how_many_gpus_and_of_which_types() {
    let whole = [GpuGroup::parse("h100:2").unwrap_or_else(|e| panic!("{e}"))];
    assert!(detected_gpus(&[], None, (None, None), &whole).is_err());
    let (gpus, _) =
        detected_gpus(&[], None, (Some(4), None), &whole).unwrap_or_else(|e| panic!("{e}"));
    let t = lines(&gpus, SlurmSetup::PerGpu).unwrap_or_else(|e| panic!("{e}"));
    for want in [
        "Name=mps Count=0 File=/dev/nvidia4 Flags=all_sharing\n\
         Name=mps Count=0 File=/dev/nvidia5 Flags=all_sharing\n\
         Name=mps Count=100 File=/dev/nvidia0",
        "Gres=gpu:TYPE:4,gpu:h100:2,mps:400\n",
    ] {
        assert!(t.contains(want), "{want}:\n{t}");
    }
    // gpushare places on 22.05: one Count for the node, no File=.
    let (gpus, _) =
        detected_gpus(&[], None, (Some(4), Some("a40")), &[]).unwrap_or_else(|e| panic!("{e}"));
    let t = lines(&gpus, SlurmSetup::NodeCount).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        t.contains("# gres.conf\nAutoDetect=nvml\nName=mps Count=1600\n")
            && t.contains("Gres=gpu:a40:4,mps:1600\n")
            && !t.contains("GPUDevices"),
        "{t}"
    );
    assert!(!MpsBooking::from_texts(&t, &t, "gpu17").per_gpu);
}

#[test]
fn a_gpu_not_shared_before_a_shared_one_is_a_warning() {
    let nvml: Vec<NvmlGpu> = a100_node()
        .into_iter()
        .map(|g| NvmlGpu {
            mig: g.minor == 0,
            ..g
        })
        .collect();
    let (gpus, _) = detected_gpus(&nvml, None, (None, None), &[]).unwrap_or_else(|e| panic!("{e}"));
    let t = lines(&gpus, SlurmSetup::PerGpu).unwrap_or_else(|e| panic!("{e}"));
    assert!(t.contains("GPUDevices=/dev/nvidia[1-7]\n"), "{t}");
    assert!(
        t.contains("# WARNING: /dev/nvidia0 comes before a shared GPU in Slurm's order"),
        "{t}"
    );
}
