use super::*;

const R22_05: Release = (22, 5, 11);
const R23_02_5: Release = (23, 2, 5);
const R23_11: Release = (23, 11, 11);
const R26_05: Release = (26, 5, 3);

#[test]
fn whole_gpus_are_named_by_nvml_lowercased_with_underscores() {
    // Names as nvidia-smi and NVML print them on current drivers, and one
    // of an older driver (no "NVIDIA " yet).
    for (nvml, slurm) in [
        ("NVIDIA A100-SXM4-80GB", "nvidia_a100-sxm4-80gb"),
        ("NVIDIA A100-SXM4-40GB", "nvidia_a100-sxm4-40gb"),
        ("NVIDIA A100 80GB PCIe", "nvidia_a100_80gb_pcie"),
        ("NVIDIA H100 80GB HBM3", "nvidia_h100_80gb_hbm3"),
        ("NVIDIA H100 PCIe", "nvidia_h100_pcie"),
        ("NVIDIA A30", "nvidia_a30"),
        ("Tesla V100-SXM2-16GB", "tesla_v100-sxm2-16gb"),
        ("A100-PCIE-40GB", "a100-pcie-40gb"),
    ] {
        assert_eq!(gpu_type(nvml), slurm, "{nvml}");
    }
}

fn slice(name: &str, gi: u32, ci: u32, mb: u64) -> MigSlice<'_> {
    MigSlice {
        name,
        gpu_slices: gi,
        compute_slices: ci,
        memory_mb: mb,
    }
}

#[test]
fn mig_slices_keep_the_gpu_name_up_to_its_first_dash() {
    let a100 = "NVIDIA A100-SXM4-80GB";
    // About 39.25 GiB of memory, which NVIDIA's profile calls 40gb.
    let s = slice("NVIDIA A100-SXM4-80GB MIG 3g.40gb", 3, 3, 40_192);
    for release in [MIG_NAMES_FROM_NVML, R23_11, R26_05] {
        assert_eq!(mig_type(release, a100, &s), "nvidia_a100_3g.40gb");
    }
    // Before 23.02.6 the memory was rounded to the nearest GiB.
    for release in [R22_05, R23_02_5] {
        assert_eq!(mig_type(release, a100, &s), "nvidia_a100_3g.39gb");
    }
    // The profile names the docs used came from drivers without "NVIDIA ".
    let old = slice("A100-SXM4-40GB MIG 3g.20gb", 3, 3, 19_968);
    assert_eq!(mig_type(R23_11, "A100-SXM4-40GB", &old), "a100_3g.20gb");
    // A name without a dash is kept whole: a pattern a100_* or h100_*
    // matches none of these.
    let h100 = slice("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 1, 1, 9_984);
    assert_eq!(
        mig_type(R26_05, "NVIDIA H100 80GB HBM3", &h100),
        "nvidia_h100_80gb_hbm3_1g.10gb"
    );
    let pcie = slice("NVIDIA A100 80GB PCIe MIG 2g.20gb", 2, 2, 19_968);
    assert_eq!(
        mig_type(R23_11, "NVIDIA A100 80GB PCIe", &pcie),
        "nvidia_a100_80gb_pcie_2g.20gb"
    );
}

#[test]
fn the_profile_came_from_attributes_before_23_02_6() {
    let a100 = "NVIDIA A100-SXM4-80GB";
    // A compute instance of one slice in a 3-slice GPU instance: NVML's
    // name says so; the attributes before 23.02.6 did not.
    let ci = slice("NVIDIA A100-SXM4-80GB MIG 1c.3g.40gb", 3, 1, 40_192);
    assert_eq!(mig_type(R22_05, a100, &ci), "nvidia_a100_3g.39gb");
    assert_eq!(mig_type(R23_11, a100, &ci), "nvidia_a100_1c.3g.40gb");
    // Without NVML's slice name, 23.02.6 and later build it from the
    // attributes: compute slices where they differ, memory rounded up.
    let unnamed = slice("", 3, 1, 40_192);
    assert_eq!(mig_type(R23_11, a100, &unnamed), "nvidia_a100_1c.3g.40gb");
    // 4.25 GiB: rounded to the nearest before, up after.
    let small = slice("", 1, 1, 4_352);
    assert_eq!(mig_type(R23_02_5, a100, &small), "nvidia_a100_1g.4gb");
    assert_eq!(mig_type(R23_11, a100, &small), "nvidia_a100_1g.5gb");
    // Half a GiB rounds up either way (roundl).
    let half = slice("", 2, 2, 19_968);
    assert_eq!(mig_type(R22_05, a100, &half), "nvidia_a100_2g.20gb");
    // A profile NVML names with a suffix keeps it.
    let me = slice("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", 1, 1, 9_984);
    assert_eq!(
        mig_type(R26_05, "NVIDIA H100 80GB HBM3", &me),
        "nvidia_h100_80gb_hbm3_1g.10gb+me"
    );
}

#[test]
fn mig_types_are_told_from_whole_gpu_types() {
    for mig in [
        "a100_3g.40gb",
        "nvidia_a100_3g.40gb",
        "nvidia_a100_1c.3g.40gb",
        "nvidia_h100_80gb_hbm3_1g.10gb+me",
        "A100_7G.80GB",
    ] {
        assert!(is_mig_type(mig), "{mig}");
    }
    for whole in [
        "a100",
        "nvidia_a100-sxm4-80gb",
        "nvidia_h100_80gb_hbm3",
        "a40",
        "3g",
        "x_1g.gb",
        "x_c.1g.5gb",
    ] {
        assert!(!is_mig_type(whole), "{whole}");
    }
}

#[test]
fn a_configured_type_fits_where_it_is_a_substring_of_the_detected_one() {
    assert!(configured_type_fits("a100", "nvidia_a100-sxm4-80gb"));
    assert!(configured_type_fits("a100_3g.40gb", "nvidia_a100_3g.40gb"));
    assert!(configured_type_fits("A100", "nvidia_a100_3g.40gb"));
    assert!(configured_type_fits(
        "3g.40gb",
        "nvidia_h100_80gb_hbm3_3g.40gb"
    ));
    assert!(!configured_type_fits(
        "h100_3g.40gb",
        "nvidia_h100_80gb_hbm3_3g.40gb"
    ));
    assert!(!configured_type_fits("a100", "tesla_v100-sxm2-16gb"));
    assert!(!configured_type_fits("", "nvidia_a30"));
}

#[test]
fn autodetect_applies_per_node_over_the_global_line() {
    let gres = "AutoDetect=nvml\nNodeName=old[1-4] AutoDetect=off Name=gpu File=/dev/nvidia[0-3]\n\
                Name=mps Count=100 File=/dev/nvidia0\n";
    assert_eq!(autodetect_value(gres, "gpu01").as_deref(), Some("nvml"));
    assert!(detects_gpus(gres, "gpu01"));
    assert!(!detects_gpus(gres, "old2"));
    assert!(!detects_gpus("Name=gpu File=/dev/nvidia0\n", "gpu01"));
    assert!(detects_gpus(
        "NodeName=gpu[01-02] AutoDetect=nvidia\n",
        "gpu02"
    ));
    assert!(!detects_gpus(
        "NodeName=gpu[01-02] AutoDetect=nvidia\n",
        "gpu03"
    ));
}

/// `slurmd -G` on a node of six A100 (one held whole) and two with MIG,
/// in the format of Slurm 23.11 to 26.05 (`_log_gres_slurmd_conf` with
/// DebugFlags=Gres): the GPU lines, then the mps records, the MIG slices'
/// made by slurmd with Slurm's default for mps.
const SLURMD_G: &str = "\
slurmd: gpu/nvml: _get_system_gpu_list_nvml: 8 GPU system device(s) detected
slurmd: Gres Name=gpu Type=a100 Count=1 Index=0 ID=7696487 File=/dev/nvidia0 Cores=0-31 CoreCnt=64 Links=-1,0,0,0,0,0 Flags=HAS_FILE,HAS_TYPE,ENV_NVML
slurmd: Gres Name=gpu Type=a100 Count=1 Index=5 ID=7696487 File=/dev/nvidia5 Cores=32-63 CoreCnt=64 Links=0,0,0,0,0,-1 Flags=HAS_FILE,HAS_TYPE,ENV_NVML
slurmd: Gres Name=gpu Type=a100_3g.40gb Count=1 Index=58 ID=7696487 File=/dev/nvidia6,/dev/nvidia-caps/nvidia-cap57,/dev/nvidia-caps/nvidia-cap58 Cores=32-63 CoreCnt=64 Links=(null) Flags=HAS_FILE,HAS_TYPE,ENV_NVML
slurmd: Gres Name=gpu Type=a100_3g.40gb Count=1 Index=67 ID=7696487 File=/dev/nvidia7,/dev/nvidia-caps/nvidia-cap66,/dev/nvidia-caps/nvidia-cap67 Cores=32-63 CoreCnt=64 Links=(null) Flags=HAS_FILE,HAS_TYPE,ENV_NVML
slurmd: Gres Name=mps Type=a100 Count=0 Index=5 ID=7562611 File=/dev/nvidia5 Cores=32-63 CoreCnt=64 Links=(null) Flags=HAS_FILE,HAS_TYPE,ENV_NVML,SHARED
slurmd: Gres Name=mps Type=a100 Count=100 Index=0 ID=7562611 File=/dev/nvidia0 Cores=0-31 CoreCnt=64 Links=(null) Flags=HAS_FILE,HAS_TYPE,ENV_NVML,SHARED
slurmd: Gres Name=mps Type=a100_3g.40gb Count=0 Index=58 ID=7562611 File=/dev/nvidia6,/dev/nvidia-caps/nvidia-cap57,/dev/nvidia-caps/nvidia-cap58 Cores=32-63 CoreCnt=64 Links=(null) Flags=HAS_FILE,HAS_TYPE,ENV_NVML,SHARED,ONE_SHARING
";

#[test]
fn slurmd_g_records_are_read() {
    let records = parse_slurmd_g(SLURMD_G);
    assert_eq!(records.len(), 7);
    let mig = &records[2];
    assert_eq!(mig.gres_type.as_deref(), Some("a100_3g.40gb"));
    assert!(mig.is_mig() && mig.devices() == ["/dev/nvidia6"]);
    assert!(records[6].has_flag("one_sharing") && records[6].name == "mps");
    assert_eq!(records[5].count, 100);
    assert_eq!(
        reported_gpus(&records),
        [
            ("/dev/nvidia0", false),
            ("/dev/nvidia5", false),
            ("/dev/nvidia6", true),
            ("/dev/nvidia7", true),
        ]
        .map(|(file, mig)| ReportedGpu {
            file: file.into(),
            mig
        })
    );
    // 22.05 prints no Flags=, a file list as given, (null) for no type.
    let old = parse_slurmd_g(
        "slurmd: Gres Name=gpu Type=(null) Count=4 Index=0 ID=7696487 File=/dev/nvidia[0-3] Links=(null)\n",
    );
    assert_eq!(old[0].gres_type, None);
    assert_eq!(old[0].devices().len(), 4);
    assert!(parse_slurmd_g("slurmd: error: Gres Name=\n").is_empty());
}
