//! A shared GPU's compute mode (`ComputeMode=exclusive`): EXCLUSIVE_PROCESS
//! while its MPS daemon runs, so that the MPS server is the only process
//! that can hold a context there; the mode it had before comes back when
//! the daemon stops after the GPU's last share.
//!
//! NVIDIA recommends EXCLUSIVE_PROCESS with MPS. In DEFAULT mode any
//! process that finds no MPS pipe (a CPU job touching CUDA, a user's
//! process outside Slurm where the device files are open) runs on the GPU
//! beside the server, its work unlimited. The mode is set with
//! `nvidia-smi -i <GPU> -c EXCLUSIVE_PROCESS` before the daemon starts,
//! the GPU named by its PCI bus id where NVML's figures the prolog keeps
//! give one ([`super::gpu_devices::bus_id`]), else by gpushare's index
//! (the PCI-ordered one the daemon's `CUDA_VISIBLE_DEVICES` uses). The
//! mode found first is recorded in `<StateDir>/compute-mode-gpu<N>`: a
//! daemon restarted meanwhile keeps the first record, so the GPU always
//! gets back the mode it had before gpushare. Every call is bounded
//! ([`SMI_TIMEOUT`]).
//!
//! A job Slurm gives such a GPU whole (where gpushare places shares, Slurm
//! does not know which GPU holds them) would fail at CUDA start beside the
//! MPS server: while it holds the GPU, the GPU has its earlier mode back
//! ([`Wanted::Earlier`]), and EXCLUSIVE_PROCESS again after it while
//! shares run there (`node::modes`). Every change first reads the mode:
//! one that is neither gpushare's EXCLUSIVE_PROCESS nor the earlier mode
//! it gave back was set by an admin meanwhile (PROHIBITED, to take the
//! GPU out of service): it is left, and the record dropped ([`decide`]).
//! A change that fails leaves `<StateDir>/compute-mode-gpu<N>.retry`
//! ([`pending`]), and the node timer tries again.
//!
//! `nvidia-smi` is looked for beside the MPS control program first (the
//! driver installs both in one directory), then where
//! [`super::programs::SEARCH_DIRS`] says.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::config::GpuMpsConfig;
use super::gpu_devices;
use super::programs;
use super::state_dir;
use crate::shared::bounded;

/// How long one `nvidia-smi` call may take (it waits on the driver, which
/// can be slow while a GPU is busy or falling off the bus).
pub const SMI_TIMEOUT: Duration = Duration::from_secs(10);

/// The program's name.
pub const SMI: &str = "nvidia-smi";

/// The mode a shared GPU runs in.
pub const EXCLUSIVE: &str = "EXCLUSIVE_PROCESS";

fn record_file(gpu: u32) -> String {
    format!("compute-mode-gpu{gpu}")
}

fn retry_file(gpu: u32) -> String {
    format!("compute-mode-gpu{gpu}.retry")
}

/// `nvidia-smi`: beside the control program, else in the usual places.
pub fn smi_program(cfg: &GpuMpsConfig) -> Option<PathBuf> {
    programs::program(cfg)
        .and_then(|p| p.parent().map(|d| d.join(SMI)))
        .filter(|p| p.is_file())
        .or_else(|| {
            programs::SEARCH_DIRS
                .iter()
                .map(|d| Path::new(d).join(SMI))
                .find(|p| p.is_file())
        })
}

/// How `nvidia-smi -i` names GPU `gpu`: its PCI bus id where NVML's kept
/// figures give its device's minor one, else gpushare's index (the
/// PCI-ordered position in `GPUDevices`, right where the list is in PCI
/// order, as `gpu-mps status` checks).
pub fn smi_target(cfg: &GpuMpsConfig, gpu: u32) -> String {
    gpu_devices::bus_id(cfg, gpu).unwrap_or_else(|| gpu.to_string())
}

fn smi(program: &Path, args: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .args(args);
    let shown = format!("{} {}", program.display(), args.join(" "));
    let ran = bounded::run(cmd, None, SMI_TIMEOUT).map_err(|e| format!("`{shown}`: {e}"))?;
    if ran.status.success() {
        Ok(ran.stdout)
    } else {
        Err(format!(
            "`{shown}` exited with {}: {}",
            ran.status,
            format!("{} {}", ran.stdout.trim(), ran.stderr.trim()).trim()
        ))
    }
}

/// `nvidia-smi --query-gpu=compute_mode` answers (`Default`,
/// `Exclusive_Process`, `Prohibited`) as the `-c` value that sets it
/// back; `None` for anything else.
pub fn mode_value(answer: &str) -> Option<&'static str> {
    match answer.trim().to_ascii_lowercase().as_str() {
        "default" | "0" => Some("DEFAULT"),
        "exclusive_process" | "3" => Some(EXCLUSIVE),
        "prohibited" | "2" => Some("PROHIBITED"),
        _ => None,
    }
}

/// The GPU's mode now.
fn current(program: &Path, target: &str) -> Result<&'static str, String> {
    let answer = smi(
        program,
        &[
            "-i",
            target,
            "--query-gpu=compute_mode",
            "--format=csv,noheader",
        ],
    )?;
    mode_value(&answer).ok_or_else(|| format!("{SMI} reported compute mode {:?}", answer.trim()))
}

/// Puts GPU `gpu` in EXCLUSIVE_PROCESS mode for its MPS daemon, recording
/// the mode it had unless one is recorded already. Call it holding the
/// GPU's daemon lock, before the daemon starts. `Err`: the GPU would run
/// in a mode where other processes can use it beside the server.
pub fn make_exclusive(cfg: &GpuMpsConfig, gpu: u32) -> Result<(), String> {
    let program = smi_program(cfg).ok_or_else(|| {
        format!(
            "ComputeMode=exclusive, but no {SMI} was found (beside the MPS control program or \
             in {})",
            programs::SEARCH_DIRS.join(", ")
        )
    })?;
    let target = smi_target(cfg, gpu);
    if !cfg.state_dir.join(record_file(gpu)).exists() {
        let mode = current(&program, &target)?;
        state_dir::replace_file(&cfg.state_dir, &record_file(gpu), mode.as_bytes(), 0o600)
            .map_err(|e| format!("the GPU's compute mode could not be recorded: {e}"))?;
    }
    smi(&program, &["-i", &target, "-c", EXCLUSIVE]).map(|_| ())
}

/// The mode GPU `gpu` had before gpushare made it exclusive; `None` where
/// gpushare holds no record (it set no mode there).
pub fn recorded(cfg: &GpuMpsConfig, gpu: u32) -> Option<&'static str> {
    let text = fs::read_to_string(cfg.state_dir.join(record_file(gpu))).ok()?;
    Some(mode_value(&text).unwrap_or("DEFAULT"))
}

/// The mode a GPU with a record should have now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    /// Shares run there and nothing else may: EXCLUSIVE_PROCESS.
    Exclusive,
    /// Shares run there beside a job Slurm gave the GPU whole: the earlier
    /// mode, so that the whole job runs beside the MPS server
    /// (time-sliced) instead of failing at CUDA start; the record stays.
    Earlier,
    /// No share is left: the earlier mode, and the record dropped.
    Restored,
}

/// What to do, the GPU's mode now read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Set(&'static str),
    /// The GPU has the wanted mode already.
    Already(&'static str),
    /// A mode gpushare never sets there (an admin's, e.g. PROHIBITED to
    /// take the GPU out of service): left as it is, the record dropped.
    AdminsMode(&'static str),
}

/// The step from `current` to what `wanted` asks of a GPU whose earlier
/// mode was `recorded`. gpushare leaves a GPU in EXCLUSIVE_PROCESS or in
/// its earlier mode, never another: any other mode is an admin's, and no
/// change of gpushare's overwrites it.
pub fn decide(recorded: &'static str, current: &'static str, wanted: Wanted) -> Step {
    if current != EXCLUSIVE && current != recorded {
        return Step::AdminsMode(current);
    }
    let target = match wanted {
        Wanted::Exclusive => EXCLUSIVE,
        Wanted::Earlier | Wanted::Restored => recorded,
    };
    if current == target {
        Step::Already(current)
    } else {
        Step::Set(target)
    }
}

/// What [`settle`] did, as the admin reads it after `GPU N: `.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    pub wanted: Wanted,
    pub step: Step,
    /// The mode recorded before gpushare.
    pub recorded: &'static str,
    /// How `nvidia-smi -i` named the GPU.
    pub target: String,
}

impl fmt::Display for Settled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match self.wanted {
            Wanted::Exclusive => "its MPS server alone may hold a context again",
            Wanted::Earlier => {
                "its earlier mode, while a job Slurm gave it whole runs beside its shares, \
                 time-sliced (their MPS daemon keeps running)"
            }
            Wanted::Restored => "its earlier mode, its last share gone",
        };
        let on = &self.target;
        match self.step {
            Step::Set(mode) => write!(f, "compute mode set to {mode} (nvidia-smi -i {on}): {why}"),
            Step::Already(mode) => write!(f, "compute mode {mode} already: {why}"),
            Step::AdminsMode(mode) => write!(
                f,
                "compute mode {mode} was set while gpushare managed it (neither its \
                 {EXCLUSIVE} nor the earlier {}): left as it is, and gpushare's record of \
                 the earlier mode dropped",
                self.recorded
            ),
        }
    }
}

/// Gives GPU `gpu` the mode `wanted` asks, after reading the one it has
/// ([`decide`]); `Ok(None)` where gpushare recorded no earlier mode there
/// (it set none). Call it holding the GPU's daemon lock. A failure (no
/// `nvidia-smi`, one that fails or hangs) leaves the retry mark
/// ([`pending`]) and keeps the record; a success removes the mark.
pub fn settle(cfg: &GpuMpsConfig, gpu: u32, wanted: Wanted) -> Result<Option<Settled>, String> {
    let Some(recorded) = recorded(cfg, gpu) else {
        let _ = fs::remove_file(cfg.state_dir.join(retry_file(gpu)));
        return Ok(None);
    };
    let target = smi_target(cfg, gpu);
    let done = (|| {
        let program =
            smi_program(cfg).ok_or_else(|| format!("no {SMI} to set GPU {gpu}'s compute mode"))?;
        let step = decide(recorded, current(&program, &target)?, wanted);
        if let Step::Set(mode) = step {
            smi(&program, &["-i", &target, "-c", mode])?;
        }
        if wanted == Wanted::Restored || matches!(step, Step::AdminsMode(_)) {
            let _ = fs::remove_file(cfg.state_dir.join(record_file(gpu)));
        }
        Ok(step)
    })();
    match done {
        Ok(step) => {
            let _ = fs::remove_file(cfg.state_dir.join(retry_file(gpu)));
            Ok(Some(Settled {
                wanted,
                step,
                recorded,
                target,
            }))
        }
        Err(e) => {
            // Kept for the node timer; where even this cannot be written,
            // the error still reaches the log.
            let text = format!("{wanted:?}: {e}\n");
            let _ =
                state_dir::replace_file(&cfg.state_dir, &retry_file(gpu), text.as_bytes(), 0o600);
            Err(e)
        }
    }
}

/// Gives GPU `gpu` back the mode recorded before its daemon started
/// ([`make_exclusive`]), unless an admin set another meanwhile; nothing
/// where none is recorded. Call it holding the GPU's daemon lock, once
/// the daemon has stopped. Where the mode cannot be set the record is
/// kept and the GPU marked for the node timer ([`pending`]).
pub fn restore(cfg: &GpuMpsConfig, gpu: u32) -> Result<Option<Settled>, String> {
    settle(cfg, gpu, Wanted::Restored)
}

/// Moves GPU `gpu`'s record of its earlier mode from `old`'s state
/// directory to `new`'s, marked for the node timer ([`pending`]), where
/// `new` holds none: a node that takes another `StateDir` while a mode
/// could not be given back keeps the duty of giving it back. The mode
/// carried, if one was.
pub fn carry(
    old: &GpuMpsConfig,
    new: &GpuMpsConfig,
    gpu: u32,
) -> Result<Option<&'static str>, String> {
    let Some(mode) = recorded(old, gpu) else {
        return Ok(None);
    };
    if old.state_dir == new.state_dir || new.state_dir.join(record_file(gpu)).exists() {
        return Ok(None);
    }
    let mark = format!("Restored: carried from {}\n", old.state_dir.display());
    state_dir::replace_file(&new.state_dir, &record_file(gpu), mode.as_bytes(), 0o600)
        .and_then(|()| {
            state_dir::replace_file(&new.state_dir, &retry_file(gpu), mark.as_bytes(), 0o600)
        })
        .map_err(|e| format!("{}: {e}", new.state_dir.display()))?;
    for name in [record_file(gpu), retry_file(gpu)] {
        let _ = fs::remove_file(old.state_dir.join(name));
    }
    Ok(Some(mode))
}

/// Marks GPU `gpu` for the node timer ([`pending`]): its mode could not
/// be settled now (`why`).
pub fn mark_pending(cfg: &GpuMpsConfig, gpu: u32, why: &str) {
    let _ = state_dir::replace_file(&cfg.state_dir, &retry_file(gpu), why.as_bytes(), 0o600);
}

/// The GPUs among `0..gpu_count` whose last change of mode failed: the
/// node timer settles them again.
pub fn pending(cfg: &GpuMpsConfig, gpu_count: u32) -> Vec<u32> {
    (0..gpu_count)
        .filter(|&gpu| cfg.state_dir.join(retry_file(gpu)).exists())
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn nvidia_smi_answers_read_as_the_modes_that_set_them() {
        assert_eq!(mode_value("Default\n"), Some("DEFAULT"));
        assert_eq!(mode_value(" Exclusive_Process"), Some(EXCLUSIVE));
        assert_eq!(mode_value("Prohibited"), Some("PROHIBITED"));
        assert_eq!(mode_value("[N/A]"), None);
    }

    #[test]
    fn the_first_mode_is_recorded_and_given_back() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let bin = dir.path().join("bin");
        fs::create_dir_all(&bin).unwrap_or_else(|e| panic!("{e}"));
        // A control program, and an nvidia-smi beside it that logs its
        // arguments and reports the mode in `mode`.
        let control = bin.join(programs::CONTROL_PROGRAM);
        fs::write(&control, "#!/bin/sh\n").unwrap_or_else(|e| panic!("{e}"));
        let log = dir.path().join("log");
        let mode = dir.path().join("mode");
        fs::write(&mode, "Prohibited\n").unwrap_or_else(|e| panic!("{e}"));
        fs::write(
            bin.join(SMI),
            format!(
                "#!/bin/sh\necho \"$*\" >> {}\ncase \"$*\" in *query*) cat {};; esac\n",
                log.display(),
                mode.display()
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(bin.join(SMI), fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("{e}"));
        let cfg = GpuMpsConfig {
            state_dir: dir.path().join("state"),
            mps_control: super::super::config::MpsControl::Program(control),
            ..GpuMpsConfig::default()
        };
        fs::create_dir_all(&cfg.state_dir).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(smi_program(&cfg), Some(bin.join(SMI)));
        make_exclusive(&cfg, 2).unwrap_or_else(|e| panic!("{e}"));
        // A second start (a restarted daemon) keeps the first record.
        fs::write(&mode, "Exclusive_Process\n").unwrap_or_else(|e| panic!("{e}"));
        make_exclusive(&cfg, 2).unwrap_or_else(|e| panic!("{e}"));
        let step = restore(&cfg, 2).map(|s| s.map(|s| s.step));
        assert_eq!(step, Ok(Some(Step::Set("PROHIBITED"))));
        assert_eq!(restore(&cfg, 2), Ok(None));
        let calls = fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(
            calls,
            "-i 2 --query-gpu=compute_mode --format=csv,noheader\n-i 2 -c EXCLUSIVE_PROCESS\n\
             -i 2 -c EXCLUSIVE_PROCESS\n-i 2 --query-gpu=compute_mode --format=csv,noheader\n\
             -i 2 -c PROHIBITED\n"
        );
    }

    #[test]
    fn gpushare_changes_only_the_modes_it_leaves_and_keeps_an_admins() {
        use Wanted::*;
        // Shares beside a whole-GPU job: the earlier mode, and back.
        assert_eq!(decide("DEFAULT", EXCLUSIVE, Earlier), Step::Set("DEFAULT"));
        assert_eq!(
            decide("DEFAULT", "DEFAULT", Earlier),
            Step::Already("DEFAULT")
        );
        assert_eq!(
            decide("DEFAULT", "DEFAULT", Exclusive),
            Step::Set(EXCLUSIVE)
        );
        assert_eq!(
            decide("DEFAULT", EXCLUSIVE, Exclusive),
            Step::Already(EXCLUSIVE)
        );
        assert_eq!(decide("DEFAULT", EXCLUSIVE, Restored), Step::Set("DEFAULT"));
        assert_eq!(
            decide("DEFAULT", "DEFAULT", Restored),
            Step::Already("DEFAULT")
        );
        // An admin's PROHIBITED, set while shares ran, is never overwritten.
        for wanted in [Earlier, Exclusive, Restored] {
            assert_eq!(
                decide("DEFAULT", "PROHIBITED", wanted),
                Step::AdminsMode("PROHIBITED")
            );
        }
        // A GPU that was PROHIBITED before gpushare gets it back.
        assert_eq!(
            decide("PROHIBITED", EXCLUSIVE, Restored),
            Step::Set("PROHIBITED")
        );
        assert_eq!(
            decide("PROHIBITED", "DEFAULT", Restored),
            Step::AdminsMode("DEFAULT")
        );
    }

    /// An MPS control program that does nothing in `dir/bin`, and beside
    /// it an `nvidia-smi` that keeps each GPU's mode in `dir/mode-<target>`
    /// (as `-c` sets it), logs its calls in `dir/log` and fails while
    /// `dir/fail` exists; the control program's path.
    pub(crate) fn fake_smi(dir: &Path) -> PathBuf {
        let bin = dir.join("bin");
        fs::create_dir_all(&bin).unwrap_or_else(|e| panic!("{e}"));
        let control = bin.join(programs::CONTROL_PROGRAM);
        fs::write(&control, "#!/bin/sh\n").unwrap_or_else(|e| panic!("{e}"));
        let d = dir.display();
        fs::write(
            bin.join(SMI),
            format!(
                "#!/bin/sh\necho \"$*\" >> {d}/log\n[ -e {d}/fail ] && exit 1\n\
                 case \"$3\" in -c) echo \"$4\" > {d}/mode-$2;; \
                 *) cat {d}/mode-$2 2>/dev/null || echo Default;; esac\n"
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        use std::os::unix::fs::PermissionsExt;
        for program in [bin.join(SMI), control.clone()] {
            fs::set_permissions(program, fs::Permissions::from_mode(0o755))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        control
    }

    /// A node of two GPUs whose programs are [`fake_smi`]'s.
    fn smi_node(dir: &Path) -> (GpuMpsConfig, PathBuf) {
        let cfg = GpuMpsConfig {
            state_dir: dir.join("state"),
            mps_control: super::super::config::MpsControl::Program(fake_smi(dir)),
            gpu_devices: Some((0..2).map(|n| format!("/dev/nvidia{n}").into()).collect()),
            ..GpuMpsConfig::default()
        };
        fs::create_dir_all(&cfg.state_dir).unwrap_or_else(|e| panic!("{e}"));
        (cfg, dir.join("log"))
    }

    #[test]
    fn a_failed_change_is_marked_for_the_timer_and_an_admins_mode_kept() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (cfg, _log) = smi_node(dir.path());
        let mode = |gpu: u32| fs::read_to_string(dir.path().join(format!("mode-{gpu}")));
        make_exclusive(&cfg, 0).unwrap_or_else(|e| panic!("{e}"));
        make_exclusive(&cfg, 1).unwrap_or_else(|e| panic!("{e}"));
        let step = |r: Result<Option<Settled>, String>| r.map(|s| s.map(|s| s.step));
        // nvidia-smi fails: the record stays, the GPU is marked.
        fs::write(dir.path().join("fail"), "").unwrap_or_else(|e| panic!("{e}"));
        assert!(settle(&cfg, 0, Wanted::Earlier).is_err());
        assert!(restore(&cfg, 1).is_err());
        assert_eq!(pending(&cfg, 2), vec![0, 1]);
        assert_eq!(recorded(&cfg, 1), Some("DEFAULT"));
        let _ = fs::remove_file(dir.path().join("fail"));
        // The retry succeeds and clears the mark.
        assert_eq!(
            step(settle(&cfg, 0, Wanted::Earlier)),
            Ok(Some(Step::Set("DEFAULT")))
        );
        assert_eq!(mode(0).ok().as_deref(), Some("DEFAULT\n"));
        assert_eq!(recorded(&cfg, 0), Some("DEFAULT"), "kept while shares run");
        assert_eq!(
            step(settle(&cfg, 0, Wanted::Exclusive)),
            Ok(Some(Step::Set(EXCLUSIVE)))
        );
        // An admin took GPU 1 out of service while its shares ran.
        fs::write(dir.path().join("mode-1"), "Prohibited\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            step(restore(&cfg, 1)),
            Ok(Some(Step::AdminsMode("PROHIBITED")))
        );
        assert_eq!(mode(1).ok().as_deref(), Some("Prohibited\n"));
        assert_eq!((recorded(&cfg, 1), pending(&cfg, 2)), (None, vec![]));
        assert_eq!(step(settle(&cfg, 1, Wanted::Exclusive)), Ok(None));
    }

    #[test]
    fn nvidia_smi_is_told_the_pci_bus_id_where_nvml_gave_one() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (cfg, log) = smi_node(dir.path());
        // NVML's order differs from GPUDevices': minor 1 is the first bus.
        fs::write(
            cfg.state_dir.join(gpu_devices::KEPT_FACTS),
            "0 1 49152 0 0 00000000:3B:00.0\n1 0 49152 0 0 -\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        make_exclusive(&cfg, 1).unwrap_or_else(|e| panic!("{e}"));
        make_exclusive(&cfg, 0).unwrap_or_else(|e| panic!("{e}"));
        let calls = fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(
            calls,
            "-i 00000000:3B:00.0 --query-gpu=compute_mode --format=csv,noheader\n\
             -i 00000000:3B:00.0 -c EXCLUSIVE_PROCESS\n\
             -i 0 --query-gpu=compute_mode --format=csv,noheader\n-i 0 -c EXCLUSIVE_PROCESS\n"
        );
    }
}
