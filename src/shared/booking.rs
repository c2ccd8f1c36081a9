//! How Slurm books this node's mps and confines its devices, read from the
//! `gres.conf`, `slurm.conf` and `cgroup.conf` beside `gpu_mps.conf`: the
//! facts that decide who places a share (gpushare or Slurm) and whether
//! gpushare can confine a share to a GPU Slurm did not choose.
//!
//! - mps lines with `File=` (one per GPU, or a range): Slurm books mps per
//!   GPU and names each share's GPU in `SLURM_JOB_GPUS`. gpushare then
//!   follows Slurm's choice: moving the job elsewhere would contradict
//!   Slurm's books and Slurm's device rules. Slurm spreads shares over the
//!   GPUs only with `Flags=all_sharing` on those lines and
//!   `LL_SHARED_GRES` in `SelectTypeParameters` (Slurm 23.11 and later);
//!   without them it stacks every share on the first GPU with room.
//! - A node-wide `Count=` without `File=` (the Slurm 22.05 setup of
//!   `gpu-mps config`): Slurm books nothing per GPU, so gpushare places.
//! - A GPU of the node without an mps line of its own (an h100 beside
//!   shared a40s): slurmd makes it an mps record of Count 0 with Slurm's
//!   default for mps, `one_sharing`, and slurmctld takes that flag for the
//!   whole node: every share then goes to the GPU already shared until it
//!   is full, and the rest wait (Slurm 23.11 to 26.05, `_merge_lists` in
//!   gres_c_s.c, `gres_use_busy_dev` in gres.c). A `Count=0` mps line with
//!   `Flags=all_sharing` for such a GPU avoids it, if it comes before the
//!   lines with a count (slurmd drops lines past the node's mps count).
//! - GPUs Slurm detects (`AutoDetect=nvml`, gres.conf's gpu lines without
//!   `File=`): gres.conf does not say which GPUs the node has, so the
//!   check above works from what slurmd reports instead (`slurmd -G`'s
//!   records, NVML's GPUs, which AutoDetect=nvml reads, or only their
//!   number in the node's `Gres=`; [`MpsBooking::with_reported`]). A GPU
//!   with MIG on is there as its slices, each a record of several files
//!   (`/dev/nvidia6,/dev/nvidia-caps/nvidia-cap57,...`); slurmd matches
//!   mps lines to GPU records by the whole `File=` string and splits an mps
//!   line's `File=` at commas (`_find_matching_file_gres`,
//!   `_build_shared_list` in gres_c_s.c, 23.11 to 26.05), so no mps line
//!   can name a slice: each gets Slurm's Count 0 record with `one_sharing`,
//!   and the node's shares stack whatever gres.conf says.

use std::fs;
use std::path::Path;

use super::autodetect::{detects_gpus, ReportedGpu};
use super::syntax::{self, expand_devices, hostlist_contains};

/// What the configuration says about this node's mps.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MpsBooking {
    /// Some mps line of this node names device files.
    pub per_gpu: bool,
    /// Every such line has `Flags=all_sharing`.
    pub all_sharing: bool,
    /// `SelectTypeParameters` has `LL_SHARED_GRES`.
    pub least_loaded: bool,
    /// The mps count of one GPU on those lines (Count over the files named).
    pub per_gpu_count: Option<u64>,
    /// GPU device files of this node's gpu lines that no mps line names.
    pub unshared_gpus: Vec<String>,
    /// Device files of `Count=0` mps lines after the last line with a
    /// count, which slurmd drops.
    pub late_zero_lines: Vec<String>,
    /// `CgroupPlugin=cgroup/v2` (or autodetect on a cgroup2 `/sys/fs/cgroup`).
    pub cgroup_v2: bool,
    /// gres.conf leaves this node's GPUs to Slurm's AutoDetect (no gpu
    /// line of the node names `File=`): which GPUs lack an mps line is
    /// known only from what slurmd reports ([`Self::with_reported`]).
    pub autodetect: bool,
    /// The device files this node's mps lines name.
    pub mps_files: Vec<String>,
    /// GPUs with MIG on that slurmd (or NVML) reports: their slices make
    /// Slurm stack the node's shares, and no mps line can prevent it.
    pub mig_gpus: Vec<String>,
    /// GPUs without an mps line where only their number is known
    /// ([`Self::with_reported_count`]).
    pub unnamed_unshared: u64,
    /// MIG slices where only their number is known (types of the node's
    /// `Gres=` that are MIG profiles).
    pub mig_slices: u64,
    /// The GPU types of this node, as a user names them in a request
    /// (`--gres=gpu:a40:1`): from its gpu lines of gres.conf, else its
    /// `Gres=` in slurm.conf; empty where neither names one
    /// (`AutoDetect=nvml` with an untyped `Gres=`).
    pub gpu_types: Vec<String>,
}

impl MpsBooking {
    /// Reads the configuration files in `dir` (slurm.conf's directory) for
    /// the node `host`. A file that is missing says nothing; one that cannot
    /// be read is an error.
    pub fn read(dir: &Path, host: &str) -> Result<Self, String> {
        let text = |name: &str| match fs::read_to_string(dir.join(name)) {
            Ok(text) => Ok(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
            Err(e) => Err(format!("{}: {e}", dir.join(name).display())),
        };
        let mut booking = Self::from_texts(&text("gres.conf")?, &text("slurm.conf")?, host);
        booking.cgroup_v2 = cgroup_v2(&text("cgroup.conf")?, unified_mount);
        Ok(booking)
    }

    /// The facts of a `gres.conf` and a `slurm.conf` text for node `host`.
    pub fn from_texts(gres_conf: &str, slurm_conf: &str, host: &str) -> Self {
        let mut booking = Self {
            all_sharing: true,
            ..Self::default()
        };
        let (mut gpu_files, mut mps_files) = (Vec::new(), Vec::new());
        // The zero-count mps lines since the last line with a count.
        let mut zero_lines: Vec<Vec<String>> = Vec::new();
        for (_, pairs) in syntax::lines(gres_conf) {
            // A line that is not all Key=Value (Include, typos) books nothing
            // slurmd would accept either.
            let Ok(pairs) = pairs else { continue };
            let get = |key: &str| syntax::value_of(&pairs, key);
            let name = get("Name").unwrap_or_default();
            let is_mps = name.eq_ignore_ascii_case("mps");
            let ours = get("NodeName").is_none_or(|n| hostlist_contains(n, host));
            if ours && name.eq_ignore_ascii_case("gpu") {
                gpu_files.extend(get("File").map(device_names).unwrap_or_default());
                add_type(&mut booking.gpu_types, get("Type"));
            }
            let Some(files) = get("File").filter(|_| is_mps && ours) else {
                continue;
            };
            let named = device_names(files);
            let count = get("Count").and_then(|c| c.parse::<u64>().ok());
            if booking.per_gpu_count.is_none_or(|c| c == 0) {
                // A line that names no valid device list counts as one GPU.
                let gpus = named.len().max(1) as u64;
                booking.per_gpu_count = count.and_then(|c| c.checked_div(gpus));
            }
            match count {
                Some(0) => zero_lines.push(named.clone()),
                _ => zero_lines.clear(),
            }
            mps_files.extend(named);
            booking.per_gpu = true;
            booking.all_sharing &= get("Flags").is_some_and(|f| {
                f.split(',')
                    .any(|flag| flag.eq_ignore_ascii_case("all_sharing"))
            });
        }
        booking.all_sharing &= booking.per_gpu;
        booking.autodetect = gpu_files.is_empty() && detects_gpus(gres_conf, host);
        if booking.per_gpu {
            booking.unshared_gpus = gpu_files
                .into_iter()
                .filter(|f| !mps_files.contains(f))
                .collect();
            booking.late_zero_lines = zero_lines.concat();
        }
        booking.mps_files = mps_files;
        if booking.gpu_types.is_empty() {
            let node_gres = syntax::lines(slurm_conf)
                .filter_map(|(_, pairs)| pairs.ok())
                .filter(|pairs| {
                    pairs.iter().any(|p| {
                        p.key.eq_ignore_ascii_case("NodeName") && hostlist_contains(p.value, host)
                    })
                })
                .flat_map(|pairs| {
                    pairs
                        .into_iter()
                        .filter(|p| p.key.eq_ignore_ascii_case("Gres"))
                        .map(|p| p.value)
                });
            for gres in node_gres {
                for ty in gres_gpu_types(gres) {
                    add_type(&mut booking.gpu_types, Some(ty));
                }
            }
        }
        booking.least_loaded = syntax::lines(slurm_conf)
            .filter_map(|(_, pairs)| pairs.ok())
            .flatten()
            .filter(|p| p.key.eq_ignore_ascii_case("SelectTypeParameters"))
            .any(|p| {
                p.value
                    .split(',')
                    .any(|v| v.eq_ignore_ascii_case("LL_SHARED_GRES"))
            });
        booking
    }

    /// Where Slurm detects the node's GPUs, the GPUs slurmd reports (or
    /// NVML, which `AutoDetect=nvml` reads) stand in for gres.conf's gpu
    /// lines: those without an mps line, and those with MIG on.
    pub fn with_reported(mut self, gpus: &[ReportedGpu]) -> Self {
        if self.autodetect && self.per_gpu {
            self.mig_gpus = gpus
                .iter()
                .filter(|g| g.mig)
                .map(|g| g.file.clone())
                .collect();
            self.unshared_gpus = gpus
                .iter()
                .filter(|g| !g.mig && !self.mps_files.contains(&g.file))
                .map(|g| g.file.clone())
                .collect();
        }
        self
    }

    /// [`Self::with_reported`] where only the number of the node's GPUs
    /// and MIG slices is known (its `Gres=` in `scontrol show node`, which
    /// counts each slice as a GPU): the GPUs beyond the mps lines' device
    /// files, and the slices.
    pub fn with_reported_count(mut self, gpus: u64, mig_slices: u64) -> Self {
        if self.autodetect && self.per_gpu {
            let mut named = self.mps_files.clone();
            named.sort_unstable();
            named.dedup();
            self.mig_slices = mig_slices;
            self.unnamed_unshared = gpus
                .saturating_sub(mig_slices)
                .saturating_sub(named.len() as u64);
        }
        self
    }

    /// Whether Slurm spreads shares over the GPUs itself.
    pub fn spreads(&self) -> bool {
        self.per_gpu
            && self.all_sharing
            && self.least_loaded
            && self.unshared_gpus.is_empty()
            && self.late_zero_lines.is_empty()
            && self.mig_gpus.is_empty()
            && self.unnamed_unshared == 0
            && self.mig_slices == 0
    }

    /// The node-log warning for a node where Slurm places shares but will
    /// stack them on one GPU.
    pub fn stacking_warning(&self) -> Option<String> {
        let missing = self.stacking_fixes();
        let mut why = Vec::new();
        if !missing.is_empty() {
            why.push(format!(
                "add {} (see gpu-mps config)",
                missing.join(" and ")
            ));
        }
        why.extend(self.mig_stacking());
        (!why.is_empty()).then(|| {
            format!(
                "Slurm places this node's mps shares (gres.conf books mps per GPU with File=) but \
                 will stack them on one GPU until it is full: {}",
                why.join("; ")
            )
        })
    }

    /// Why GPUs with MIG on make the node's shares stack, and what to do;
    /// `None` without them.
    pub fn mig_stacking(&self) -> Option<String> {
        let which = match (self.mig_gpus.as_slice(), self.mig_slices) {
            ([], 0) => return None,
            ([], n) => format!("{n} MIG slices of the node's Gres= show GPUs with MIG on"),
            ([one], _) => format!("{one} has MIG on"),
            (many, _) => format!("{} have MIG on", many.join(", ")),
        };
        self.per_gpu.then(|| {
            format!(
                "{which}, and slurmd gives each MIG slice an mps record of Count 0 with \
                 Slurm's default for mps (one GPU at a time, for the whole node), which no \
                 gres.conf line can replace: keep GPUs with MIG on nodes that do not share"
            )
        })
    }

    /// What a node where Slurm places shares but stacks them lacks, each
    /// as the words to add; empty where Slurm spreads or does not place.
    pub fn stacking_fixes(&self) -> Vec<String> {
        if !self.per_gpu || self.spreads() {
            return Vec::new();
        }
        let mut missing = Vec::new();
        if !self.all_sharing {
            missing.push("Flags=all_sharing on every mps line of gres.conf".to_owned());
        }
        if !self.least_loaded {
            missing
                .push("LL_SHARED_GRES in SelectTypeParameters (Slurm 23.11 or later)".to_owned());
        }
        if !self.unshared_gpus.is_empty() {
            missing.push(format!(
                "an mps line for each GPU not shared, before the other mps lines ({}: a GPU \
                 without one gets Slurm's default for mps, one GPU at a time, for the whole node)",
                zero_lines(&self.unshared_gpus)
            ));
        }
        if self.unnamed_unshared > 0 {
            missing.push(format!(
                "an mps line for each GPU not shared, before the other mps lines ({} of the \
                 GPUs Slurm detects here have none: `slurmd -G` on the node names their File=; \
                 a GPU without one gets Slurm's default for mps, one GPU at a time, for the \
                 whole node)",
                self.unnamed_unshared
            ));
        }
        if !self.late_zero_lines.is_empty() {
            missing.push(format!(
                "the Count=0 mps lines for {} before the lines with a count (slurmd drops mps \
                 lines past the node's mps count)",
                self.late_zero_lines.join(", ")
            ));
        }
        missing
    }
}

fn add_type(types: &mut Vec<String>, ty: Option<&str>) {
    if let Some(ty) = ty.map(str::trim).filter(|t| !t.is_empty()) {
        if !types.iter().any(|t| t == ty) {
            types.push(ty.to_owned());
        }
    }
}

/// The GPU types a node's `Gres=` of slurm.conf names
/// (`gpu:a40:4(S:0-1),mps:400` names a40; `gpu:4` none; a lone word after
/// `gpu:` is a type unless it reads as a count, as Slurm has it).
fn gres_gpu_types(gres: &str) -> impl Iterator<Item = &str> {
    gres.split(',').filter_map(|item| {
        let item = item.split('(').next().unwrap_or(item).trim();
        let mut fields = item.split(':');
        if !fields.next()?.eq_ignore_ascii_case("gpu") {
            return None;
        }
        let ty = fields.next()?;
        let count_like = |s: &str| {
            let digits = s.trim_end_matches(['k', 'K', 'm', 'M', 'g', 'G']);
            !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
        };
        (fields.next().is_some() || !count_like(ty)).then_some(ty)
    })
}

/// The device files of a gres.conf `File=` value, as written there (a
/// value that is not a valid list stands for itself).
fn device_names(files: &str) -> Vec<String> {
    expand_devices(files).map_or_else(
        |_| vec![files.to_owned()],
        |d| d.iter().map(|p| p.display().to_string()).collect(),
    )
}

/// The `Count=0` mps lines for `files`, one after the other.
fn zero_lines(files: &[String]) -> String {
    files
        .iter()
        .map(|f| format!("Name=mps Count=0 File={f} Flags=all_sharing"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Whether Slurm's cgroup plugin is cgroup v2: `CgroupPlugin=cgroup/v2`, or
/// autodetect (the default) and `unified()` says `/sys/fs/cgroup` is cgroup2.
fn cgroup_v2(cgroup_conf: &str, unified: fn() -> bool) -> bool {
    let plugin = syntax::lines(cgroup_conf)
        .filter_map(|(_, pairs)| pairs.ok())
        .flatten()
        .filter(|p| p.key.eq_ignore_ascii_case("CgroupPlugin"))
        .map(|p| p.value.to_ascii_lowercase())
        .last();
    match plugin.as_deref() {
        Some("cgroup/v2") => true,
        Some("cgroup/v1") => false,
        _ => unified(),
    }
}

/// Whether `/sys/fs/cgroup` is a cgroup2 mount, as Slurm's autodetect
/// decides it: the file system seen there now (the last mount wins) has
/// cgroup2's magic. One `statfs`, where reading `/proc/self/mounts` took
/// the kernel a line per mount of the node at every share's start.
fn unified_mount() -> bool {
    const CGROUP2_SUPER_MAGIC: u64 = 0x6367_7270;
    rustix::fs::statfs("/sys/fs/cgroup")
        .is_ok_and(|fs| u64::try_from(fs.f_type).is_ok_and(|t| t == CGROUP2_SUPER_MAGIC))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPREAD: &str = "AutoDetect=off\nName=gpu Type=a40 File=/dev/nvidia[0-3]\n\
        Name=mps Count=100 File=/dev/nvidia0 Flags=all_sharing\n\
        Name=mps Count=100 File=/dev/nvidia1 Flags=all_sharing\n\
        Name=mps Count=200 File=/dev/nvidia[2-3] Flags=all_sharing\n";
    const LL: &str = "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core,LL_SHARED_GRES\n";

    #[test]
    fn per_gpu_lines_with_all_sharing_and_ll_shared_gres_spread() {
        let b = MpsBooking::from_texts(SPREAD, LL, "gpu01");
        assert!(b.per_gpu && b.all_sharing && b.least_loaded && b.spreads());
        assert_eq!(b.per_gpu_count, Some(100));
        assert_eq!(b.stacking_warning(), None);
    }

    #[test]
    fn the_nodes_gpu_types_come_from_gres_conf_else_slurm_conf() {
        let gres = "NodeName=gpu02 Name=gpu Type=h100 File=/dev/nvidia0\n\
                    Name=gpu Type=a40 File=/dev/nvidia[0-1]\nName=gpu Type=a40 File=/dev/nvidia2\n";
        assert_eq!(MpsBooking::from_texts(gres, "", "gpu01").gpu_types, ["a40"]);
        let slurm = "NodeName=gpu[01-02] Gres=gpu:a40:2(S:0-1),gpu:nvidia_a100_3g.20gb:1,mps:200\n\
                     NodeName=gpu03 Gres=gpu:4,mps:400\nNodeName=gpu04 Gres=gpu:l4\n";
        let types = |host| MpsBooking::from_texts("AutoDetect=nvml\n", slurm, host).gpu_types;
        assert_eq!(types("gpu02"), ["a40", "nvidia_a100_3g.20gb"]);
        assert!(types("gpu03").is_empty());
        assert_eq!(types("gpu04"), ["l4"]);
        assert!(types("cpu01").is_empty());
        assert_eq!(
            MpsBooking::from_texts(gres, slurm, "gpu01").gpu_types,
            ["a40"],
            "gres.conf first"
        );
    }

    #[test]
    fn the_count_only_setup_is_placed_by_gpushare() {
        let gres = "Name=gpu Type=a40 File=/dev/nvidia[0-3]\nName=mps Count=1600\n";
        let b = MpsBooking::from_texts(gres, LL, "gpu01");
        assert!(!b.per_gpu && !b.spreads());
        assert_eq!(b.stacking_warning(), None);
    }

    #[test]
    fn a_missing_flag_or_parameter_is_named_in_the_warning() {
        let one_sharing = "Name=mps Count=400 File=/dev/nvidia[0-3]\n";
        let b = MpsBooking::from_texts(one_sharing, "SelectTypeParameters=CR_Core\n", "n");
        assert_eq!(b.per_gpu_count, Some(100));
        let w = b.stacking_warning().unwrap_or_default();
        assert!(
            w.contains("Flags=all_sharing") && w.contains("LL_SHARED_GRES"),
            "{w}"
        );
        let b = MpsBooking::from_texts(SPREAD, "SelectTypeParameters=CR_Core\n", "n");
        let w = b.stacking_warning().unwrap_or_default();
        assert!(
            !w.contains("Flags=all_sharing") && w.contains("LL_SHARED_GRES"),
            "{w}"
        );
        // One line without the flag is enough to stack.
        let mixed = format!("{SPREAD}Name=mps Count=100 File=/dev/nvidia2\n");
        assert!(!MpsBooking::from_texts(&mixed, LL, "n").all_sharing);
    }

    #[test]
    fn a_gpu_without_an_mps_line_stacks_the_whole_node() {
        let gpus =
            "Name=gpu Type=a40 File=/dev/nvidia[0-1]\nName=gpu Type=h100 File=/dev/nvidia[2-3]\n";
        let shared = "Name=mps Count=100 File=/dev/nvidia0 Flags=all_sharing\n\
                      Name=mps Count=100 File=/dev/nvidia1 Flags=all_sharing\n";
        let b = MpsBooking::from_texts(&format!("{gpus}{shared}"), LL, "n");
        assert_eq!(b.unshared_gpus, ["/dev/nvidia2", "/dev/nvidia3"]);
        assert!(!b.spreads());
        let w = b.stacking_warning().unwrap_or_default();
        assert!(
            w.contains("Name=mps Count=0 File=/dev/nvidia2 Flags=all_sharing; Name=mps Count=0 File=/dev/nvidia3")
                && !w.contains("LL_SHARED_GRES"),
            "{w}"
        );
        // Zero-count lines first: Slurm spreads.
        let zeros = "Name=mps Count=0 File=/dev/nvidia[2-3] Flags=all_sharing\n";
        let b = MpsBooking::from_texts(&format!("{gpus}{zeros}{shared}"), LL, "n");
        assert!(b.spreads(), "{b:?}");
        assert_eq!(b.per_gpu_count, Some(100));
        // After them: slurmd drops them, and the node stacks again.
        let b = MpsBooking::from_texts(&format!("{gpus}{shared}{zeros}"), LL, "n");
        assert!(b.unshared_gpus.is_empty() && !b.spreads());
        assert_eq!(b.late_zero_lines, ["/dev/nvidia2", "/dev/nvidia3"]);
        let w = b.stacking_warning().unwrap_or_default();
        assert!(
            w.contains("Count=0 mps lines for /dev/nvidia2, /dev/nvidia3 before"),
            "{w}"
        );
        // Autodetected GPUs (no File= on gpu lines) say nothing of this
        // until slurmd's report is known.
        let auto = format!("AutoDetect=nvml\n{shared}");
        let b = MpsBooking::from_texts(&auto, LL, "n");
        assert!(b.autodetect && b.spreads());
    }

    fn gpu(file: &str, mig: bool) -> ReportedGpu {
        ReportedGpu {
            file: file.into(),
            mig,
        }
    }

    #[test]
    fn under_autodetect_what_slurmd_reports_stands_in_for_the_gpu_lines() {
        let shared = "Name=mps Count=100 File=/dev/nvidia0 Flags=all_sharing\n\
                      Name=mps Count=100 File=/dev/nvidia1 Flags=all_sharing\n";
        let auto = format!("AutoDetect=nvml\n{shared}");
        let b = MpsBooking::from_texts(&auto, LL, "gpu01");
        // Two GPUs reported, both with lines: Slurm spreads.
        let two = [gpu("/dev/nvidia0", false), gpu("/dev/nvidia1", false)];
        assert!(b.clone().with_reported(&two).spreads());
        // A third held whole without a line: named, as gres.conf's would be.
        let three = [two[0].clone(), two[1].clone(), gpu("/dev/nvidia2", false)];
        let w = b.clone().with_reported(&three).stacking_warning();
        assert!(
            w.as_deref().is_some_and(|w| w.contains(
                "an mps line for each GPU not shared, before the other mps lines \
                 (Name=mps Count=0 File=/dev/nvidia2 Flags=all_sharing"
            )),
            "{w:?}"
        );
        // A GPU with MIG on: no line helps.
        let mig = [two[0].clone(), two[1].clone(), gpu("/dev/nvidia7", true)];
        let m = b.clone().with_reported(&mig);
        assert!(!m.spreads() && m.stacking_fixes().is_empty());
        let w = m.stacking_warning().unwrap_or_default();
        assert!(
            w.contains("will stack them on one GPU until it is full: /dev/nvidia7 has MIG on")
                && w.ends_with("keep GPUs with MIG on nodes that do not share"),
            "{w}"
        );
        // Only the count (scontrol show node's Gres=gpu:a100:4).
        let counted = b.clone().with_reported_count(4, 0);
        assert_eq!(counted.unnamed_unshared, 2);
        let fixes = counted.stacking_fixes().join(" ");
        assert!(
            fixes.contains("(2 of the GPUs Slurm detects here"),
            "{fixes}"
        );
        assert!(b.clone().with_reported_count(2, 0).spreads());
        // Gres=gpu:a100:2,gpu:a100_3g.40gb:4: four slices, no line missing.
        let sliced = b.clone().with_reported_count(6, 4);
        assert!(sliced.stacking_fixes().is_empty() && !sliced.spreads());
        assert!(sliced
            .mig_stacking()
            .is_some_and(|m| m.starts_with("4 MIG slices of the node's Gres=")));
        // gpu lines with File= (AutoDetect checking them): gres.conf says.
        let checked = format!("AutoDetect=nvml\nName=gpu File=/dev/nvidia[0-2]\n{shared}");
        let c = MpsBooking::from_texts(&checked, LL, "gpu01");
        assert!(!c.autodetect);
        assert_eq!(c.clone().with_reported_count(9, 2), c);
        // No AutoDetect: the report changes nothing.
        let plain = MpsBooking::from_texts(shared, LL, "gpu01");
        assert_eq!(plain.clone().with_reported(&mig), plain);
    }

    #[test]
    fn lines_of_other_nodes_are_ignored() {
        let gres = "NodeName=gpu[01-04] Name=mps Count=100 File=/dev/nvidia0 Flags=all_sharing\n\
                    NodeName=big Name=mps Count=800\n";
        assert!(MpsBooking::from_texts(gres, LL, "gpu03").spreads());
        assert!(!MpsBooking::from_texts(gres, LL, "gpu05").per_gpu);
        assert!(!MpsBooking::from_texts(gres, LL, "big").per_gpu);
        assert!(!MpsBooking::from_texts(gres, LL, "gpu3").per_gpu);
    }

    #[test]
    fn host_lists() {
        assert!(hostlist_contains("a,b[1-3,7],c", "b7"));
        assert!(hostlist_contains("n[1-10]", "n10"));
        assert!(!hostlist_contains("n[1-10]", "n11"));
        assert!(hostlist_contains("ALL", "x"));
        assert!(!hostlist_contains("n[x-y]", "nx"));
    }

    #[test]
    fn cgroup_version_from_cgroup_conf() {
        fn yes() -> bool {
            true
        }
        fn no() -> bool {
            false
        }
        assert!(cgroup_v2("CgroupPlugin=cgroup/v2\n", no));
        assert!(!cgroup_v2("CgroupPlugin=cgroup/v1\n", yes));
        assert!(cgroup_v2("CgroupPlugin=autodetect\n", yes));
        assert!(!cgroup_v2("", no));
    }

    /// The one `statfs` reads `/sys/fs/cgroup` as the mount table does:
    /// the last mount there, cgroup2 or not (on the host running the test).
    #[test]
    fn unified_mount_agrees_with_the_mount_table() {
        let Ok(mounts) = fs::read_to_string("/proc/self/mounts") else {
            return;
        };
        let table = mounts
            .lines()
            .filter_map(|l| {
                let mut words = l.split_whitespace().skip(1);
                Some((words.next()?, words.next()?))
            })
            .rfind(|(at, _)| *at == "/sys/fs/cgroup")
            .is_some_and(|(_, kind)| kind == "cgroup2");
        assert_eq!(unified_mount(), table, "{mounts}");
    }
}
