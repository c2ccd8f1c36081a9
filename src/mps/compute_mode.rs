//! A shared GPU's compute mode (`ComputeMode=exclusive`): EXCLUSIVE_PROCESS
//! while its MPS daemon runs, so that the MPS server is the only process
//! that can hold a context there; the mode it had before comes back when
//! the daemon stops after the GPU's last share.
//!
//! NVIDIA recommends EXCLUSIVE_PROCESS with MPS. In DEFAULT mode any
//! process that finds no MPS pipe (a CPU job touching CUDA, a user's
//! process outside Slurm where the device files are open) runs on the GPU
//! beside the server, its work unlimited. The mode is set with
//! `nvidia-smi -i <index> -c EXCLUSIVE_PROCESS` before the daemon starts
//! (the index is the same PCI-ordered one the daemon's
//! `CUDA_VISIBLE_DEVICES` uses), and the mode found first is recorded in
//! `<StateDir>/compute-mode-gpu<N>`: a daemon restarted meanwhile keeps the
//! first record, so the GPU always gets back the mode it had before
//! gpushare. Every call is bounded ([`SMI_TIMEOUT`]).
//!
//! `nvidia-smi` is looked for beside the MPS control program first (the
//! driver installs both in one directory), then where
//! [`super::programs::SEARCH_DIRS`] says.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::config::GpuMpsConfig;
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
    let index = gpu.to_string();
    if !cfg.state_dir.join(record_file(gpu)).exists() {
        let answer = smi(
            &program,
            &[
                "-i",
                &index,
                "--query-gpu=compute_mode",
                "--format=csv,noheader",
            ],
        )?;
        let mode = mode_value(&answer)
            .ok_or_else(|| format!("{SMI} reported compute mode {:?}", answer.trim()))?;
        state_dir::replace_file(&cfg.state_dir, &record_file(gpu), mode.as_bytes(), 0o600)
            .map_err(|e| format!("the GPU's compute mode could not be recorded: {e}"))?;
    }
    smi(&program, &["-i", &index, "-c", EXCLUSIVE]).map(|_| ())
}

/// Gives GPU `gpu` back the mode recorded before its daemon started
/// ([`make_exclusive`]); nothing where none is recorded. Call it holding
/// the GPU's daemon lock, once the daemon has stopped. The record is kept
/// where the mode cannot be set, so the next stop tries again.
pub fn restore(cfg: &GpuMpsConfig, gpu: u32) -> Result<Option<&'static str>, String> {
    let path = cfg.state_dir.join(record_file(gpu));
    let Ok(text) = fs::read_to_string(&path) else {
        return Ok(None);
    };
    let mode = mode_value(&text).unwrap_or("DEFAULT");
    let program = smi_program(cfg)
        .ok_or_else(|| format!("no {SMI} to give GPU {gpu} back its compute mode {mode}"))?;
    smi(&program, &["-i", &gpu.to_string(), "-c", mode])?;
    let _ = fs::remove_file(&path);
    Ok(Some(mode))
}

#[cfg(test)]
mod tests {
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
        assert_eq!(restore(&cfg, 2), Ok(Some("PROHIBITED")));
        assert_eq!(restore(&cfg, 2), Ok(None));
        let calls = fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(
            calls,
            "-i 2 --query-gpu=compute_mode --format=csv,noheader\n-i 2 -c EXCLUSIVE_PROCESS\n\
             -i 2 -c EXCLUSIVE_PROCESS\n-i 2 -c PROHIBITED\n"
        );
    }
}
