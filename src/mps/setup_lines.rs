//! The configuration lines a GPU node needs for gpushare, per Slurm
//! release (`gpu-mps config`): gres.conf, slurm.conf, cgroup.conf,
//! plugstack.conf and gpu_mps.conf.

use std::fmt::Write as _;
use std::path::Path;

use super::config::{node_lines_text, GpuMpsConfig, NodeSettings, Placement};
use crate::shared::syntax::is_gpu_type;

/// How a node's Slurm books mps, which decides the lines it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlurmSetup {
    /// Slurm before 23.11 (no `LL_SHARED_GRES`): a node-wide Count that
    /// Slurm cannot place, so gpushare places and confines (cgroup v1).
    NodeCount,
    /// Slurm 23.11 and later: per-GPU mps lines with `Flags=all_sharing`
    /// and `LL_SHARED_GRES`, so Slurm spreads shares itself.
    PerGpu,
}

impl SlurmSetup {
    /// The setup for Slurm `major.minor`.
    pub fn for_release(major: u32, minor: u32) -> Self {
        if (major, minor) >= (23, 11) {
            Self::PerGpu
        } else {
            Self::NodeCount
        }
    }
}

/// Where the node's programs live, for the printed lines.
#[derive(Debug, Clone, Copy)]
pub struct Installed<'a> {
    pub libexec: &'a Path,
    pub plugin_dir: &'a Path,
    pub conf: &'a Path,
}

/// GPUs of one type on a node: its type and how many.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuGroup {
    pub gpu_type: String,
    pub count: u32,
}

impl GpuGroup {
    /// `TYPE:N` as `--whole` takes it (`h100:2`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let (gpu_type, count) = text
            .split_once(':')
            .ok_or_else(|| format!("{text:?}: write TYPE:N, e.g. h100:2"))?;
        let count = count
            .parse::<u32>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("{text:?}: N must be a positive number of GPUs"))?;
        if !is_gpu_type(gpu_type) {
            return Err(format!(
                "{text:?}: the type must be a gres.conf Type, e.g. h100"
            ));
        }
        Ok(Self {
            gpu_type: gpu_type.to_owned(),
            count,
        })
    }
}

/// What node `node` takes from the gpu_mps.conf at `conf` (`settings`;
/// `None`: there is none), as comment lines: each key it sets for the node
/// with the line it comes from and that line's `NodeName=`, or why the
/// node shares nothing.
pub fn node_settings(conf: &Path, node: &str, settings: Option<&NodeSettings>) -> String {
    let file = conf.display();
    let Some(settings) = settings else {
        return format!(
            "# no {file}: {node} shares nothing until there is one (the lines below are its \
             defaults)\n"
        );
    };
    let mut out = match settings.node_lines.as_slice() {
        [] if settings.scoped => format!(
            "# {file} as {node} takes it: the lines for every node (no NodeName= line names \
             {node})\n"
        ),
        [] => format!("# {file} as {node} takes it:\n"),
        lines => format!(
            "# {file} as {node} takes it: the lines for every node and its {}\n",
            node_lines_text(lines)
        ),
    };
    let width = settings
        .taken
        .iter()
        .map(|t| t.key.len() + t.value.len() + 1)
        .max()
        .unwrap_or(0);
    for t in &settings.taken {
        let setting = format!("{}={}", t.key, t.value);
        let scope = t
            .node_name
            .as_ref()
            .map_or_else(String::new, |n| format!(" (NodeName={n})"));
        let _ = writeln!(out, "#   {setting:<width$}  line {}{scope}", t.line);
    }
    out.push_str("#   every other key: its default (gpu_mps.conf(5))\n");
    if let Some(why) = &settings.no_gpus {
        let _ = writeln!(
            out,
            "# {why}: {node} shares nothing, as a node without the file (shares refused, every \
             other job left alone)"
        );
    }
    out
}

/// What the per-GPU setup is, at the top of its lines.
pub(super) const PER_GPU_HEADER: &str =
    "# Slurm 23.11 and later spread mps shares over all GPUs themselves with per-GPU\n\
     # mps lines, Flags=all_sharing and LL_SHARED_GRES; gpushare records Slurm's choice,\n\
     # runs that GPU's MPS daemon and sets the job's limits (cgroup v1 or v2).\n";

/// What the node-wide Count setup is, with its arithmetic for `gpus` GPUs
/// of `u` units.
pub(super) fn node_count_header(gpus: u32, u: u32, count: u64) -> String {
    format!(
        "# Slurm before 23.11 books every mps job of a node on one GPU and admits Count / GPUs\n\
         # units at once: {gpus} GPUs x {u} units each at once need Count = {gpus} x {gpus} x {u} = {count}.\n\
         # gpushare places each share on the least-loaded GPU and confines it there (cgroup v1).\n"
    )
}

/// `/dev/nvidia[first-last]`, or the one file.
pub(super) fn device_range(first: u32, count: u32) -> String {
    if count == 1 {
        format!("/dev/nvidia{first}")
    } else {
        format!("/dev/nvidia[{first}-{}]", first + count - 1)
    }
}

/// The lines a node of `gpus` GPUs of type `gpu_type` needs under `setup`,
/// the GPUs it holds whole (`whole`, device files after the shared ones)
/// included.
pub fn node_config(
    cfg: &GpuMpsConfig,
    setup: SlurmSetup,
    node: &str,
    (gpu_type, gpus): (&str, u32),
    whole: &[GpuGroup],
    installed: Installed<'_>,
) -> String {
    let files = device_range(0, gpus);
    // The GPUs held whole: their gres.conf gpu lines, and their gres in
    // slurm.conf.
    let mut whole_gpu_lines = String::new();
    let mut whole_gres = String::new();
    let mut next = gpus;
    for g in whole {
        let _ = writeln!(
            whole_gpu_lines,
            "Name=gpu Type={} File={}",
            g.gpu_type,
            device_range(next, g.count)
        );
        let _ = write!(whole_gres, "gpu:{}:{},", g.gpu_type, g.count);
        next += g.count;
    }
    let u = cfg.units_per_gpu;
    let count = match setup {
        SlurmSetup::NodeCount => cfg.slurm_count_for(gpus),
        SlurmSetup::PerGpu => u64::from(gpus) * u64::from(u),
    };
    let mut out = String::new();
    match setup {
        SlurmSetup::NodeCount => {
            out.push_str(&node_count_header(gpus, u, count));
            let _ = write!(
                out,
                "\n# gres.conf\nName=gpu Type={gpu_type} File={files}\n{whole_gpu_lines}Name=mps Count={count}\n"
            );
        }
        SlurmSetup::PerGpu => {
            out.push_str(PER_GPU_HEADER);
            let _ = write!(
                out,
                "\n# gres.conf\nName=gpu Type={gpu_type} File={files}\n{whole_gpu_lines}"
            );
            let held: Vec<u32> = (gpus..next).collect();
            let shared: Vec<u32> = (0..gpus).collect();
            per_gpu_mps_lines(&mut out, &held, &shared, u);
        }
    }
    let gres = format!("gpu:{gpu_type}:{gpus},{whole_gres}mps:{count}");
    other_files(&mut out, cfg, setup, node, (&gres, count), None, installed);
    out
}

/// gres.conf's per-GPU mps lines: Count 0 for the GPUs held whole (their
/// minors, `held`) first, then `u` for each shared one.
pub(super) fn per_gpu_mps_lines(out: &mut String, held: &[u32], shared: &[u32], u: u32) {
    if !held.is_empty() {
        out.push_str(
            "# A GPU held whole needs an mps line of Count 0, before the others: without one\n\
             # Slurm gives it mps shared one GPU at a time, and the whole node follows.\n",
        );
    }
    for g in held {
        let _ = writeln!(
            out,
            "Name=mps Count=0 File=/dev/nvidia{g} Flags=all_sharing"
        );
    }
    for g in shared {
        let _ = writeln!(
            out,
            "Name=mps Count={u} File=/dev/nvidia{g} Flags=all_sharing"
        );
    }
}

/// The lines after gres.conf's, for a node `node` whose slurm.conf
/// `Gres=` is `gres` with `count` mps: slurm.conf, cgroup.conf,
/// plugstack.conf and gpu_mps.conf (with `GPUDevices=` where given).
pub(super) fn other_files(
    out: &mut String,
    cfg: &GpuMpsConfig,
    setup: SlurmSetup,
    node: &str,
    (gres, count): (&str, u64),
    gpu_devices: Option<&str>,
    installed: Installed<'_>,
) {
    let u = cfg.units_per_gpu;
    let _ = write!(
        out,
        "\n# slurm.conf\nGresTypes=gpu,mps\nNodeName={node} Gres={gres}\n\
         Prolog={prolog}\nEpilog={epilog}\n",
        prolog = installed.libexec.join("gpu-mps-prolog").display(),
        epilog = installed.libexec.join("gpu-mps-epilog").display(),
    );
    // slurmd's connection manager exists from 25.05, after per-GPU lines.
    if setup == SlurmSetup::PerGpu {
        out.push_str(&slurmd_connections(count));
    }
    match setup {
        SlurmSetup::NodeCount => out.push_str(
            "# the prolog of srun/salloc jobs gets the share size job_submit/gpu_qos recorded only so\n\
             # (Alloc); DeferBatch: slurmd before 24.05.1 may give up waiting for the prolog and\n\
             # drain the node when many jobs start on it at once\n\
             PrologFlags=Alloc,DeferBatch\nTaskPlugin=task/cgroup\nProctrackType=proctrack/cgroup\n\
             \n# cgroup.conf\nCgroupPlugin=cgroup/v1\nConstrainDevices=yes\n",
        ),
        SlurmSetup::PerGpu => out.push_str(
            "# keep your CR_* value and add LL_SHARED_GRES:\n\
             SelectTypeParameters=CR_Core,LL_SHARED_GRES\n\
             TaskPlugin=task/cgroup\nProctrackType=proctrack/cgroup\n\
             \n# cgroup.conf (cgroup/v1 or cgroup/v2)\nConstrainDevices=yes\n",
        ),
    }
    let _ = write!(
        out,
        "\n# plugstack.conf\nrequired {plugin}/spank_gpu_mps.so conf={conf}\n\n# gpu_mps.conf\nUnitsPerGPU={u}\n{devices}",
        plugin = installed.plugin_dir.display(),
        conf = installed.conf.display(),
        devices = gpu_devices.map_or_else(String::new, |d| format!("GPUDevices={d}\n")),
    );
    // StepGuard=auto finds the epilog where the packages and make
    // install's default prefix put it; anywhere else it is named.
    let epilog = installed.libexec.join("gpu-mps-epilog");
    if !crate::mps::config::STEP_GUARD_PLACES
        .iter()
        .any(|p| Path::new(p) == epilog)
    {
        let _ = writeln!(out, "StepGuard={}", epilog.display());
    }
    match setup {
        SlurmSetup::NodeCount => {
            let _ = writeln!(out, "SlurmMpsCount={count}");
            if let Some(set) = cfg.slurm_mps_count.filter(|&c| c != count) {
                let _ = writeln!(
                    out,
                    "\n# WARNING: gpu_mps.conf has SlurmMpsCount={set}, not {count}"
                );
            }
        }
        SlurmSetup::PerGpu => {
            out.push_str("Placement=slurm\n");
            if cfg.placement == Placement::Gpushare {
                out.push_str(
                    "\n# WARNING: gpu_mps.conf has Placement=gpushare, which contradicts Slurm's books here\n",
                );
            }
        }
    }
}

/// For a node of `count` mps (as many shares at most, each one unit at
/// least) beyond what slurmd serves at once: the `SlurmdParameters` line
/// slurm.conf(5) asks for (at least the node's jobs), as a comment, since
/// slurmd before 25.05 has no such parameter; nothing for a smaller node.
pub fn slurmd_connections(count: u64) -> String {
    use crate::shared::slurm_release::{slurmd_connections_for, SLURMD_CONNECTIONS};
    if count <= SLURMD_CONNECTIONS {
        return String::new();
    }
    format!(
        "# Slurm 25.05 and later: up to {count} shares may run here at once (fewer where the\n\
         # node has fewer CPUs), and slurmd serves {SLURMD_CONNECTIONS} connections at a time unless told\n\
         # more; add this to your SlurmdParameters (gpu-qos audit checks it):\n\
         # SlurmdParameters=conmgr_max_connections={}\n",
        slurmd_connections_for(count)
    )
}

/// `lines` (what `gpu-mps config` prints) with each gres.conf line scoped
/// to node `node`, for a gres.conf every node shares: `NodeName=` first on
/// each line, as gres.conf(5) asks of a line for some nodes (slurmd skips
/// the lines whose `NodeName=` hostlist leaves it out, and takes
/// `AutoDetect=` on such a line for those nodes alone: `_parse_gres_config`
/// and `_parse_gres_config_node` in Slurm's gres.c). The comments and the
/// other files' lines are left as they are.
pub fn scoped_gres_lines(lines: &str, node: &str) -> String {
    let mut out = String::with_capacity(lines.len() + 64);
    let mut in_gres = false;
    for line in lines.split_inclusive('\n') {
        let bare = line.trim_end_matches('\n');
        if bare == "# gres.conf" {
            in_gres = true;
            let _ = writeln!(
                out,
                "# gres.conf (NodeName={node} on each line: for one gres.conf every node shares)"
            );
            continue;
        }
        if bare.trim().is_empty() {
            in_gres = false;
        } else if in_gres && !bare.starts_with('#') {
            let _ = write!(out, "NodeName={node} ");
        }
        out.push_str(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::booking::MpsBooking;

    #[test]
    fn node_config_has_the_count_arithmetic() {
        let cfg = GpuMpsConfig {
            slurm_mps_count: Some(400),
            ..GpuMpsConfig::default()
        };
        let t = lines_for(&cfg, SlurmSetup::NodeCount);
        for want in [
            "Name=mps Count=1600",
            "Gres=gpu:a40:4,mps:1600",
            "File=/dev/nvidia[0-3]",
            "Prolog=/usr/libexec/gpushare/gpu-mps-prolog",
            "SlurmMpsCount=1600",
            "PrologFlags=Alloc,DeferBatch",
            "WARNING: gpu_mps.conf has SlurmMpsCount=400",
        ] {
            assert!(t.contains(want), "{want}:\n{t}");
        }
        // The prolog reads these lines as a node gpushare places on.
        assert!(!MpsBooking::from_texts(&t, &t, "gpu01").per_gpu);
    }

    #[test]
    fn a_node_of_more_shares_than_slurmd_serves_is_told_the_line() {
        // 4 GPUs of 100 units: 400 shares at most, within slurmd's 512.
        let t = lines_for(&GpuMpsConfig::default(), SlurmSetup::PerGpu);
        assert!(!t.contains("conmgr_max_connections"), "{t}");
        // Before 23.11 (a node-wide count), slurmd has no such parameter.
        let t = lines_for(&GpuMpsConfig::default(), SlurmSetup::NodeCount);
        assert!(!t.contains("conmgr_max_connections"), "{t}");
        // 8 GPUs of 100: the line, commented (no such parameter before
        // 25.05), in slurm.conf's part.
        let installed = Installed {
            libexec: Path::new("/usr/libexec/gpushare"),
            plugin_dir: Path::new("/usr/lib/slurm"),
            conf: Path::new("/etc/slurm/gpu_mps.conf"),
        };
        let cfg = GpuMpsConfig::default();
        let t = node_config(
            &cfg,
            SlurmSetup::PerGpu,
            "gpu01",
            ("h100", 8),
            &[],
            installed,
        );
        let line = "# SlurmdParameters=conmgr_max_connections=832\n";
        let at = t.find(line).unwrap_or_else(|| panic!("{t}"));
        assert!(
            t[..at].contains("# slurm.conf") && t[at..].contains("# cgroup.conf"),
            "{t}"
        );
        assert_eq!(slurmd_connections(512), "");
        assert!(slurmd_connections(513).ends_with("=576\n"));
    }

    #[test]
    fn the_step_guard_is_named_only_where_auto_would_not_find_it() {
        let cfg = GpuMpsConfig::default();
        let at = |libexec: &str| {
            node_config(
                &cfg,
                SlurmSetup::PerGpu,
                "gpu01",
                ("a40", 4),
                &[],
                Installed {
                    libexec: Path::new(libexec),
                    plugin_dir: Path::new("/usr/lib/slurm"),
                    conf: Path::new("/etc/slurm/gpu_mps.conf"),
                },
            )
        };
        for packaged in ["/usr/libexec/gpushare", "/usr/local/libexec/gpushare"] {
            assert!(!at(packaged).contains("StepGuard="), "{packaged}");
        }
        let t = at("/opt/gpushare/libexec/gpushare");
        assert!(
            t.contains("\nStepGuard=/opt/gpushare/libexec/gpushare/gpu-mps-epilog\n"),
            "{t}"
        );
    }

    fn lines_for(cfg: &GpuMpsConfig, setup: SlurmSetup) -> String {
        lines_with(cfg, setup, &[])
    }

    fn lines_with(cfg: &GpuMpsConfig, setup: SlurmSetup, whole: &[GpuGroup]) -> String {
        node_config(
            cfg,
            setup,
            "gpu01",
            ("a40", 4),
            whole,
            Installed {
                libexec: Path::new("/usr/libexec/gpushare"),
                plugin_dir: Path::new("/usr/lib/slurm"),
                conf: Path::new("/etc/slurm/gpu_mps.conf"),
            },
        )
    }

    #[test]
    fn the_settings_a_node_takes_name_their_lines() {
        let conf = Path::new("/etc/slurm/gpu_mps.conf");
        let text = "UnitsPerGPU=100\nStateDir=/run/x\n\
                    NodeName=gpu[01-02] GPUDevices=/dev/nvidia[0-3] UnitsPerGPU=50\n\
                    NodeName=gpu02 Banner=log\n";
        let of = |node: &str| {
            let s = crate::mps::config::parse_for(text, "/etc/slurm/gpu_mps.conf", node)
                .unwrap_or_else(|e| panic!("{e}"));
            node_settings(conf, node, Some(&s))
        };
        assert_eq!(
            of("gpu02"),
            "# /etc/slurm/gpu_mps.conf as gpu02 takes it: the lines for every node and its \
             lines 3 (NodeName=gpu[01-02]), 4 (NodeName=gpu02)\n\
             #   StateDir=/run/x              line 2\n\
             #   GPUDevices=/dev/nvidia[0-3]  line 3 (NodeName=gpu[01-02])\n\
             #   UnitsPerGPU=50               line 3 (NodeName=gpu[01-02])\n\
             #   Banner=log                   line 4 (NodeName=gpu02)\n\
             #   every other key: its default (gpu_mps.conf(5))\n"
        );
        let cpu = of("cpu01");
        assert!(
            cpu.starts_with(
                "# /etc/slurm/gpu_mps.conf as cpu01 takes it: the lines for every node (no \
                 NodeName= line names cpu01)\n#   UnitsPerGPU=100  line 1\n"
            ),
            "{cpu}"
        );
        assert!(
            cpu.ends_with("gives node cpu01 no GPUs: it has NodeName= lines, and no GPUDevices= on a line without NodeName= nor on a NodeName= line that names cpu01: cpu01 shares nothing, as a node without the file (shares refused, every other job left alone)\n"),
            "{cpu}"
        );
        assert!(node_settings(conf, "gpu01", None).starts_with("# no /etc/slurm/gpu_mps.conf"));
    }

    #[test]
    fn node_config_for_newer_slurm_lets_slurm_spread_shares() {
        assert_eq!(SlurmSetup::for_release(23, 2), SlurmSetup::NodeCount);
        assert_eq!(SlurmSetup::for_release(23, 11), SlurmSetup::PerGpu);
        assert_eq!(SlurmSetup::for_release(26, 5), SlurmSetup::PerGpu);
        let cfg = GpuMpsConfig {
            units_per_gpu: 50,
            ..GpuMpsConfig::default()
        };
        let t = lines_for(&cfg, SlurmSetup::PerGpu);
        for want in [
            "Name=mps Count=50 File=/dev/nvidia3 Flags=all_sharing",
            "Gres=gpu:a40:4,mps:200",
            "LL_SHARED_GRES",
            "Placement=slurm",
        ] {
            assert!(t.contains(want), "{want}:\n{t}");
        }
        // What the prolog makes of these lines: Slurm spreads, 50 a GPU.
        let booking = MpsBooking::from_texts(&t, &t, "gpu01");
        assert!(booking.spreads(), "{booking:?}");
        assert_eq!(booking.per_gpu_count, Some(50));
        assert_eq!(booking.stacking_warning(), None);
    }

    #[test]
    fn gpus_held_whole_get_zero_mps_lines_before_the_shared_ones() {
        let whole = [GpuGroup::parse("h100:2").unwrap_or_else(|e| panic!("{e}"))];
        let t = lines_with(&GpuMpsConfig::default(), SlurmSetup::PerGpu, &whole);
        for want in [
            "Name=gpu Type=h100 File=/dev/nvidia[4-5]",
            "Name=mps Count=0 File=/dev/nvidia5 Flags=all_sharing\nName=mps Count=100 File=/dev/nvidia0",
            "Gres=gpu:a40:4,gpu:h100:2,mps:400",
        ] {
            assert!(t.contains(want), "{want}:\n{t}");
        }
        // What the prolog makes of them: Slurm spreads, 100 a GPU.
        let booking = MpsBooking::from_texts(&t, &t, "gpu01");
        assert!(booking.spreads(), "{booking:?}");
        assert_eq!(booking.per_gpu_count, Some(100));
        for bad in ["h100", "h100:0", ":2", "h 100:2", "h100:x", "1080:2"] {
            assert!(GpuGroup::parse(bad).is_err(), "{bad}");
        }
    }
    /// The gres.conf section of `lines` (what follows `# gres.conf...` up
    /// to the blank line).
    fn gres_section(lines: &str) -> String {
        lines
            .split("\n\n")
            .find(|part| part.starts_with("# gres.conf"))
            .unwrap_or_default()
            .to_owned()
    }

    #[test]
    fn scoped_gres_lines_name_the_node_on_each_gres_line_only() {
        let whole = [GpuGroup::parse("h100:2").unwrap_or_else(|e| panic!("{e}"))];
        let t = lines_with(&GpuMpsConfig::default(), SlurmSetup::PerGpu, &whole);
        let scoped = scoped_gres_lines(&t, "gpu01");
        let gres = gres_section(&scoped);
        assert_eq!(
            gres,
            "# gres.conf (NodeName=gpu01 on each line: for one gres.conf every node shares)\n\
             NodeName=gpu01 Name=gpu Type=a40 File=/dev/nvidia[0-3]\n\
             NodeName=gpu01 Name=gpu Type=h100 File=/dev/nvidia[4-5]\n\
             # A GPU held whole needs an mps line of Count 0, before the others: without one\n\
             # Slurm gives it mps shared one GPU at a time, and the whole node follows.\n\
             NodeName=gpu01 Name=mps Count=0 File=/dev/nvidia4 Flags=all_sharing\n\
             NodeName=gpu01 Name=mps Count=0 File=/dev/nvidia5 Flags=all_sharing\n\
             NodeName=gpu01 Name=mps Count=100 File=/dev/nvidia0 Flags=all_sharing\n\
             NodeName=gpu01 Name=mps Count=100 File=/dev/nvidia1 Flags=all_sharing\n\
             NodeName=gpu01 Name=mps Count=100 File=/dev/nvidia2 Flags=all_sharing\n\
             NodeName=gpu01 Name=mps Count=100 File=/dev/nvidia3 Flags=all_sharing"
        );
        // Every other file's lines as they were.
        assert_eq!(
            scoped.replace(&gres, ""),
            t.replace(&gres_section(&t), ""),
            "{scoped}"
        );
        assert!(scoped.contains("\nNodeName=gpu01 Gres=gpu:a40:4,gpu:h100:2,mps:400\n"));
        // The node's own booking reads the same from the scoped lines, and
        // another node finds nothing of it in the shared file.
        let own = MpsBooking::from_texts(&scoped, &t, "gpu01");
        assert_eq!(own, MpsBooking::from_texts(&t, &t, "gpu01"));
        assert!(own.spreads(), "{own:?}");
        assert_eq!(
            MpsBooking::from_texts(&scoped, &t, "gpu02").per_gpu_count,
            None
        );
    }

    #[test]
    fn two_nodes_scoped_lines_make_one_gres_conf_for_both() {
        let cfg = GpuMpsConfig::default();
        let node = |name: &str, gpus: u32| {
            let t = node_config(
                &cfg,
                SlurmSetup::NodeCount,
                name,
                ("a40", gpus),
                &[],
                Installed {
                    libexec: Path::new("/usr/libexec/gpushare"),
                    plugin_dir: Path::new("/usr/lib64/slurm"),
                    conf: Path::new("/etc/slurm/gpu_mps.conf"),
                },
            );
            gres_section(&scoped_gres_lines(&t, name))
        };
        let shared = format!("{}\n{}\n", node("gpu01", 4), node("gpu02", 2));
        assert!(
            shared.contains("NodeName=gpu01 Name=mps Count=1600\n"),
            "{shared}"
        );
        assert!(shared.contains("NodeName=gpu02 Name=gpu Type=a40 File=/dev/nvidia[0-1]\n"));
        assert!(
            shared.contains("NodeName=gpu02 Name=mps Count=400\n"),
            "{shared}"
        );
        // Only the gres.conf section: lines outside it are left as they are.
        assert_eq!(scoped_gres_lines("Name=gpu\n", "gpu01"), "Name=gpu\n");
        // AutoDetect on a NodeName= line is that node's alone (gres.conf(5)).
        assert_eq!(
            scoped_gres_lines(
                "# head\n\n# gres.conf\nAutoDetect=nvml\nName=mps Count=100 File=/dev/nvidia0\n\n\
                 # slurm.conf\nGresTypes=gpu,mps\n",
                "gpu07"
            ),
            "# head\n\n# gres.conf (NodeName=gpu07 on each line: for one gres.conf every node \
             shares)\nNodeName=gpu07 AutoDetect=nvml\n\
             NodeName=gpu07 Name=mps Count=100 File=/dev/nvidia0\n\n# slurm.conf\nGresTypes=gpu,mps\n"
        );
    }
}
