//! What is installed on this machine, for the lines `gpu-mps config`
//! prints: the Slurm release and its PluginDir (as `scontrol` says),
//! where gpushare's node programs are, and whether cgroup v2 and its
//! `dmem` controller are there (MPS v3's memory limits).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::config;
use super::detected_lines::{detected_gpus, detected_node_config, NvmlGpu};
use super::node::gpu_devices;
use super::setup_lines::{self, GpuGroup, Installed, SlurmSetup};
use super::status;
use crate::shared::autodetect::{parse_slurmd_g, reported_gpus};
use crate::shared::batch_start::{
    batch_start_timeout_set, least_batch_start_timeout, ShortBatchStart,
};
use crate::shared::booking::MpsBooking;
use crate::shared::bounded;

/// How long `scontrol` may take: a slurmctld that does not answer leaves
/// the default.
const SCONTROL_TIMEOUT: Duration = Duration::from_secs(10);

pub use crate::shared::slurm_release::parse as parse_release;

/// The release in `scontrol --version`'s answer (`slurm 24.11.5`, or
/// `slurm-wlm 24.11.5` as Debian builds it).
pub fn release_of_version(text: &str) -> Option<(u32, u32)> {
    text.split_whitespace()
        .nth(1)
        .and_then(|v| parse_release(v).ok())
}

/// The release of the Slurm commands on this machine.
pub fn slurm_release() -> Option<(u32, u32)> {
    let mut cmd = Command::new(crate::shared::locations::slurm_command("scontrol"));
    cmd.arg("--version");
    let ran = bounded::run(cmd, None, SCONTROL_TIMEOUT).ok()?;
    release_of_version(&ran.stdout)
}

/// The first directory of `PluginDir` in `scontrol show config`'s answer.
pub fn plugin_dir_of(show_config: &str) -> Option<String> {
    show_config
        .lines()
        .find(|l| l.starts_with("PluginDir"))
        .and_then(|l| l.split('=').nth(1))
        .map(|v| v.trim().split(':').next().unwrap_or("").to_owned())
        .filter(|d| !d.is_empty())
}

/// Where the running program's prolog and epilog are: installed as
/// `PREFIX/sbin/gpu-mps`, they are in `PREFIX/libexec/gpushare`.
pub fn libexec_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent()?.parent().map(|p| p.join("libexec/gpushare")))
        .unwrap_or_else(|| PathBuf::from("/usr/local/libexec/gpushare"))
}

/// Whether `/sys/fs/cgroup` is cgroup v2, and whether it offers `dmem`.
pub fn cgroup_v2_and_dmem() -> (bool, bool) {
    let controllers = Path::new("/sys/fs/cgroup/cgroup.controllers");
    let v2 = controllers.exists();
    let dmem = std::fs::read_to_string(controllers)
        .is_ok_and(|c| c.split_whitespace().any(|w| w == "dmem"));
    (v2, dmem)
}

/// What `gpu-mps config` prints for Slurm `release` (major, minor) on
/// this machine: whether the node could use MPS v3 (`driver`: NVIDIA's
/// driver version, where known), the settings node `node` takes from
/// `conf` and the line each comes from ([`setup_lines::node_settings`]),
/// then the lines a node `node` of `gpus` GPUs of `gpu_type` needs
/// ([`setup_lines::node_config`]) with `conf` as its gpu_mps.conf: as it
/// says where it reads, else its defaults (none written yet), `gpus` by
/// default its `GPUDevices`. A file that does not parse is the error; one
/// that gives `node` no GPUs says so, and (without `gpus`) prints no lines.
pub fn node_config(
    conf: &Path,
    (major, minor): (u32, u32),
    node: &str,
    gpu_type: &str,
    gpus: Option<u32>,
    whole: &[GpuGroup],
    driver: Option<&str>,
) -> Result<String, String> {
    let settings = config::load(conf, node).map_err(|e| e.to_string())?;
    let taken = setup_lines::node_settings(conf, node, settings.as_ref());
    let release = release_head((major, minor), driver);
    if gpus.is_none() && settings.as_ref().is_some_and(|s| s.cfg.is_none()) {
        return Ok(format!("{release}{taken}"));
    }
    let cfg = settings.and_then(|s| s.cfg).unwrap_or_default();
    let gpus = gpus.unwrap_or_else(|| u32::try_from(gpu_devices(&cfg).len()).unwrap_or(0));
    if gpus == 0 {
        return Err("no GPU device files found: pass --gpus N".into());
    }
    let setup = SlurmSetup::for_release(major, minor);
    if setup == SlurmSetup::NodeCount && !whole.is_empty() {
        return Err(format!(
            "--whole is for Slurm 23.11 and later (per-GPU mps lines); on Slurm {major}.{minor:02} \
             keep GPUs held whole on nodes of their own"
        ));
    }
    with_installed(conf, format!("{release}{taken}"), gpus, |installed| {
        Ok(setup_lines::node_config(
            &cfg,
            setup,
            node,
            (gpu_type, gpus),
            whole,
            installed,
        ))
    })
}

/// `# for Slurm X.Y` and whether MPS v3 could run here (`driver`:
/// NVIDIA's driver version, where known).
fn release_head((major, minor): (u32, u32), driver: Option<&str>) -> String {
    let (cgroup_v2, dmem) = cgroup_v2_and_dmem();
    format!(
        "# for Slurm {major}.{minor:02}\n{}",
        status::mps_v3_readiness(driver, cgroup_v2, dmem)
    )
}

/// `head`, then the lines `lines` makes with this machine's paths, then
/// what `BatchStartTimeout` in force means for the prolog of a node of
/// `gpus` GPUs.
fn with_installed(
    conf: &Path,
    head: String,
    gpus: u32,
    lines: impl FnOnce(Installed<'_>) -> Result<String, String>,
) -> Result<String, String> {
    let libexec = libexec_dir();
    let mut show_config = Command::new(crate::shared::locations::slurm_command("scontrol"));
    show_config.args(["show", "config"]);
    let show_config = bounded::run(show_config, None, SCONTROL_TIMEOUT)
        .ok()
        .map(|o| o.stdout);
    let plugin_dir = show_config
        .as_deref()
        .and_then(plugin_dir_of)
        .unwrap_or_else(|| "<PluginDir>".into());
    let installed = Installed {
        libexec: &libexec,
        plugin_dir: Path::new(&plugin_dir),
        conf,
    };
    let slurm_conf = std::fs::read_to_string(crate::shared::locations::beside_slurm_conf(
        None,
        "slurm.conf",
    ))
    .ok();
    let batch_start = batch_start_timeout_set(show_config.as_deref(), slurm_conf.as_deref());
    Ok(format!(
        "{head}\n{}{}",
        lines(installed)?,
        batch_start_check(batch_start, gpus)
    ))
}

/// What `gpu-mps config` says of `BatchStartTimeout` (`set`: as
/// [`batch_start_timeout_set`] found it) for a node of `gpus` GPUs:
/// nothing where it is long enough.
pub fn batch_start_check(set: Option<u64>, gpus: u32) -> String {
    match set {
        None => format!(
            "\n# BatchStartTimeout could not be read (scontrol show config, slurm.conf): it must \
             be at least {} s here (docs/operations.md)\n",
            least_batch_start_timeout(gpus)
        ),
        Some(set) => ShortBatchStart::of(set, gpus).map_or_else(String::new, |short| {
            format!(
                "\n# WARNING: {}: {}\n# slurm.conf (slurmctld reads it at a restart or scontrol \
                 reconfigure: make either while no prolog runs, see docs/operations.md)\n{}\n",
                short.what(),
                short.why(),
                short.fix()
            )
        }),
    }
}

/// What `gpu-mps config` prints for a node whose gpu lines Slurm's
/// AutoDetect makes: the lines of
/// [`setup_lines::detected_node_config`] for NVML's GPUs (`nvml`, empty
/// where NVML cannot be asked) or the admin's counts, then what `slurmd
/// -G` (`slurmd_g`: its output, or why it could not run) reports of the
/// configuration in force now ([`slurmd_g_check`]).
pub fn detected_config(
    conf: &Path,
    release: (u32, u32),
    node: &str,
    (choice, whole): ((Option<u32>, Option<&str>), &[GpuGroup]),
    nvml: &[NvmlGpu],
    driver: Option<&str>,
    slurmd_g: Result<String, String>,
) -> Result<String, String> {
    let settings = config::load(conf, node).map_err(|e| e.to_string())?;
    let taken = setup_lines::node_settings(conf, node, settings.as_ref());
    let cfg = settings.and_then(|s| s.cfg).unwrap_or_default();
    let (gpus, notes) = detected_gpus(nvml, cfg.gpu_devices.as_deref(), choice, whole)?;
    let setup = SlurmSetup::for_release(release.0, release.1);
    let head = format!("{}{taken}", release_head(release, driver));
    let count = u32::try_from(gpus.len()).unwrap_or(u32::MAX);
    let mut out = with_installed(conf, head, count, |installed| {
        detected_node_config(&cfg, setup, node, &gpus, installed)
    })?;
    for note in notes {
        out.push_str(&format!("# WARNING: {note}\n"));
    }
    let read = |name: &str| {
        std::fs::read_to_string(crate::shared::locations::beside_slurm_conf(None, name))
            .unwrap_or_default()
    };
    out.push_str(&slurmd_g_check(
        slurmd_g,
        (&read("gres.conf"), &read("slurm.conf")),
        node,
    ));
    Ok(out)
}

/// Whether the gres.conf beside slurm.conf has Slurm detect node
/// `node`'s GPUs (`AutoDetect=` other than `off`).
pub fn gpus_detected_here(node: &str) -> bool {
    std::fs::read_to_string(crate::shared::locations::beside_slurm_conf(
        None,
        "gres.conf",
    ))
    .is_ok_and(|gres| crate::shared::autodetect::detects_gpus(&gres, node))
}

/// How long `slurmd -G` may take: it loads NVML, which a GPU fallen off
/// the bus can hang.
const SLURMD_G_TIMEOUT: Duration = Duration::from_secs(30);

/// `slurmd -G`'s output (its log lines, on stderr): the GRES slurmd finds
/// with the configuration in force, autodetected GPUs included.
pub fn slurmd_g() -> Result<String, String> {
    let scontrol = crate::shared::locations::slurm_command("scontrol");
    let slurmd = scontrol
        .parent()
        .and_then(Path::parent)
        .map(|prefix| prefix.join("sbin/slurmd"))
        .into_iter()
        .chain(["/usr/sbin/slurmd", "/usr/local/sbin/slurmd"].map(PathBuf::from))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("slurmd"));
    let mut cmd = Command::new(&slurmd);
    cmd.arg("-G");
    let ran = bounded::run(cmd, None, SLURMD_G_TIMEOUT)
        .map_err(|e| format!("{}: {e}", slurmd.display()))?;
    let text = format!("{}{}", ran.stdout, ran.stderr);
    if ran.status.success() {
        Ok(text)
    } else {
        let last = text.lines().last().unwrap_or_default().to_owned();
        Err(format!("{} -G: {} {last}", slurmd.display(), ran.status))
    }
}

/// What `slurmd -G` says of this node (`report`) against the gres.conf
/// and slurm.conf texts in force (`texts`): the GPUs it found and, where
/// Slurm will stack the node's shares, why.
pub fn slurmd_g_check(report: Result<String, String>, texts: (&str, &str), node: &str) -> String {
    let text = match report {
        Ok(text) => text,
        Err(e) => {
            return format!(
                "\n# slurmd -G could not be run ({e}): run it as root on the node to see the GPUs \
                 slurmd finds and check for mps records with ONE_SHARING\n"
            )
        }
    };
    let records = parse_slurmd_g(&text);
    let gpus = reported_gpus(&records);
    if gpus.is_empty() {
        return "\n# slurmd -G reported no GPU with the configuration in force\n".into();
    }
    let mig = gpus.iter().filter(|g| g.mig).count();
    let mut out = format!(
        "\n# slurmd -G, with the configuration in force now: {} GPUs{}; types {}\n",
        gpus.len(),
        if mig > 0 {
            format!(" ({mig} with MIG on, offered as their slices)")
        } else {
            String::new()
        },
        {
            let mut types: Vec<&str> = records
                .iter()
                .filter(|r| r.name == "gpu")
                .filter_map(|r| r.gres_type.as_deref())
                .collect();
            types.dedup();
            if types.is_empty() {
                "none".to_owned()
            } else {
                types.join(", ")
            }
        }
    );
    let booking = MpsBooking::from_texts(texts.0, texts.1, node).with_reported(&gpus);
    let one_sharing: Vec<String> = records
        .iter()
        .filter(|r| r.name == "mps" && r.has_flag("ONE_SHARING"))
        .flat_map(|r| r.devices())
        .collect();
    if let Some(w) = booking.stacking_warning() {
        out.push_str(&format!("# WARNING: {w}\n"));
    } else if !one_sharing.is_empty() {
        out.push_str(&format!(
            "# WARNING: slurmd -G shows mps records with ONE_SHARING ({}): Slurm will stack this \
             node's shares on one GPU\n",
            one_sharing.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_as_admins_and_scontrol_write_them() {
        assert_eq!(parse_release("24.11"), Ok((24, 11)));
        assert_eq!(parse_release(" 24.11.5\n"), Ok((24, 11)));
        assert!(parse_release("new").is_err());
        assert!(parse_release("24").is_err());
        // scontrol --version of 22.05 (upstream), 24.11 and 26.05 (Debian).
        assert_eq!(release_of_version("slurm 22.05.8\n"), Some((22, 5)));
        assert_eq!(release_of_version("slurm-wlm 24.11.5\n"), Some((24, 11)));
        assert_eq!(release_of_version("slurm-wlm 26.05.5\n"), Some((26, 5)));
        assert_eq!(release_of_version(""), None);
    }

    #[test]
    fn plugin_dir_is_the_first_of_the_list() {
        let show_config = "Configuration data as of 2025-01-01T00:00:00\n\
                           PlugStackConfig         = /etc/slurm/plugstack.conf\n\
                           PluginDir               = /usr/lib/x86_64-linux-gnu/slurm-wlm\n";
        assert_eq!(
            plugin_dir_of(show_config).as_deref(),
            Some("/usr/lib/x86_64-linux-gnu/slurm-wlm")
        );
        assert_eq!(
            plugin_dir_of("PluginDir = /opt/slurm/lib:/usr/lib/slurm\n").as_deref(),
            Some("/opt/slurm/lib")
        );
        assert_eq!(plugin_dir_of("PluginDir = \n"), None);
        assert_eq!(plugin_dir_of("slurm_load_ctl_conf error\n"), None);
    }

    #[test]
    fn config_says_what_a_node_takes_and_refuses_a_bad_file() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let conf = dir.path().join("gpu_mps.conf");
        let write = |text: &str| std::fs::write(&conf, text).unwrap_or_else(|e| panic!("{e}"));
        write("UnitsPerGPU=100\nNodeName=gpu[01-04] GPUDevices=/dev/nvidia[0-3]\n");
        // A node the file gives no GPUs: what it takes, and no lines
        // (nothing asked of scontrol).
        let cpu = node_config(&conf, (24, 11), "cpu01", "a40", None, &[], None);
        let cpu = cpu.unwrap_or_else(|e| panic!("{e}"));
        assert!(cpu.contains("#   UnitsPerGPU=100  line 1\n"), "{cpu}");
        assert!(cpu.contains("gives node cpu01 no GPUs"), "{cpu}");
        assert!(!cpu.contains("# gres.conf"), "{cpu}");
        // A mistake anywhere in the file is the answer, for any node.
        write("UnitsPerGPU=100\nNodeName=gpu[01-04 GPUDevices=/dev/nvidia[0-3]\n");
        let bad = node_config(&conf, (24, 11), "cpu01", "a40", None, &[], None);
        assert!(
            bad.as_ref()
                .is_err_and(|e| e.contains("gpu_mps.conf:2: NodeName=gpu[01-04")),
            "{bad:?}"
        );
    }

    #[test]
    fn config_says_a_batch_start_timeout_below_the_prologs_worst_case() {
        // The prolog's lock budget is the node programs' own.
        assert_eq!(
            crate::shared::batch_start::PROLOG_LOCK_WAIT,
            crate::mps::lock_wait::LOCK_WAIT
        );
        let said = batch_start_check(Some(10), 4);
        for want in [
            "# WARNING: BatchStartTimeout is 10 s (Slurm's default), below the 190 s",
            "up to 30 s waiting for the node's locks",
            "not found BatchStartTime after startup",
            "NODE_FAIL",
            "\nBatchStartTimeout=190\n",
        ] {
            assert!(said.contains(want), "{want}: {said}");
        }
        assert!(
            !said.contains("(Slurm's default)")
                || !batch_start_check(Some(60), 4).contains("(Slurm's default)")
        );
        assert_eq!(batch_start_check(Some(320), 8), "");
        assert!(batch_start_check(None, 4).contains("at least 190 s"));
    }

    #[test]
    fn slurmd_g_says_what_slurm_found_and_why_shares_would_stack() {
        let gres = "AutoDetect=nvml\n\
                    Name=mps Count=100 File=/dev/nvidia0 Flags=all_sharing\n\
                    Name=mps Count=100 File=/dev/nvidia1 Flags=all_sharing\n";
        let slurm = "SelectTypeParameters=CR_Core,LL_SHARED_GRES\n";
        let gpu = |i: u32, mps: u32, flags: &str| {
            format!(
                "slurmd: Gres Name=gpu Type=a40 Count=1 Index={i} ID=7696487 File=/dev/nvidia{i} \
                 Cores=0-31 CoreCnt=64 Links=(null) Flags=HAS_FILE,HAS_TYPE,ENV_NVML\n\
                 slurmd: Gres Name=mps Type=a40 Count={mps} Index={i} ID=7562611 \
                 File=/dev/nvidia{i} Cores=0-31 CoreCnt=64 Links=(null) Flags={flags}\n"
            )
        };
        let two = format!("{}{}", gpu(0, 100, "SHARED"), gpu(1, 100, "SHARED"));
        let said = slurmd_g_check(Ok(two.clone()), (gres, slurm), "gpu01");
        assert_eq!(
            said,
            "\n# slurmd -G, with the configuration in force now: 2 GPUs; types a40\n"
        );
        // A third GPU slurmd found, without an mps line: named.
        let three = format!("{two}{}", gpu(2, 0, "SHARED,ONE_SHARING"));
        let said = slurmd_g_check(Ok(three), (gres, slurm), "gpu01");
        assert!(
            said.contains("3 GPUs; types a40\n# WARNING: Slurm places this node's mps shares")
                && said.contains("Name=mps Count=0 File=/dev/nvidia2 Flags=all_sharing"),
            "{said}"
        );
        let said = slurmd_g_check(Err("no slurmd".into()), (gres, slurm), "gpu01");
        assert!(
            said.starts_with("\n# slurmd -G could not be run (no slurmd)"),
            "{said}"
        );
    }

    #[test]
    fn config_lines_need_gpus() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let conf = dir.path().join("gpu_mps.conf");
        std::fs::write(&conf, "UnitsPerGPU=100\n").unwrap_or_else(|e| panic!("{e}"));
        // Refused before anything is asked of scontrol.
        assert_eq!(
            node_config(&conf, (24, 11), "gpu01", "a40", Some(0), &[], None),
            Err("no GPU device files found: pass --gpus N".into())
        );
        let whole = [GpuGroup {
            gpu_type: "h100".into(),
            count: 2,
        }];
        let old = node_config(&conf, (23, 2), "gpu01", "a40", Some(4), &whole, None);
        assert!(
            old.as_ref().is_err_and(|e| e.contains("23.11 and later")),
            "{old:?}"
        );
    }
}
