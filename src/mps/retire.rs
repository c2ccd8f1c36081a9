//! What a ledger's identity leaves behind when the node takes another
//! (`in_force`: a new `StateDir`, `MPSControl`, `GPUDevices` or
//! `UnitsPerGPU`, adopted once the old ledger holds no record).
//!
//! The old ledger is empty, so every MPS daemon started under it is idle.
//! Normally the last epilog stopped each one and gave its GPU back its
//! compute mode; where a stop failed, a node crashed, or a mode could not
//! be set, something is left under the old `StateDir`, and nothing under
//! the new one would ever look there: a control daemon whose pipes the new
//! ledger does not know (two daemons for one GPU once the new one starts),
//! and a GPU kept in EXCLUSIVE_PROCESS whose earlier mode the new ledger
//! would record as EXCLUSIVE_PROCESS (the first mode it finds) and so
//! never give back. [`retire`] stops the old daemons and gives their GPUs
//! their modes back, and carries a mode it could not give back to the new
//! `StateDir`, where the node timer tries again.

use std::collections::BTreeSet;
use std::fs;

use super::compute_mode;
use super::config::GpuMpsConfig;
use super::daemon;
use super::gpu_devices::gpu_devices;
use super::lock_wait::LockWait;

/// The GPUs something is left for under `cfg`: a pipe directory
/// (`<StateDir>-mps/gpuN`) or a record of an earlier compute mode.
fn traces(cfg: &GpuMpsConfig) -> BTreeSet<u32> {
    let numbered = |dir: &std::path::Path, prefix: &str| -> Vec<u32> {
        fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(|e| {
                        let name = e.ok()?.file_name();
                        name.to_str()?.strip_prefix(prefix)?.parse().ok()
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    numbered(&daemon::public_dir(cfg), "gpu")
        .into_iter()
        .chain(numbered(&cfg.state_dir, "compute-mode-gpu"))
        .collect()
}

/// Stops what `old` left running (its idle daemons, each under its GPU's
/// lock) and gives their GPUs their modes back, all GPUs at once (each
/// stop is bounded: the control program's and `nvidia-smi`'s timeouts).
/// A mode that cannot be given back is carried to `new`'s state directory
/// where the GPU is the same device file under both. Call it with `old`'s
/// ledger empty, before any share is placed under `new` (the adopting
/// prolog holds the node's configuration lock exclusive); each GPU's lock
/// is waited for as `wait` allows. One line for the node's log per thing
/// done.
pub fn retire(old: &GpuMpsConfig, new: &GpuMpsConfig, wait: LockWait) -> Vec<String> {
    if old.mps_control == super::config::MpsControl::Disabled {
        // gpushare started no daemon and set no mode under it.
        return Vec::new();
    }
    let gpus = traces(old);
    let (old_devices, new_devices) = (gpu_devices(old), gpu_devices(new));
    let same_device = |gpu: u32| {
        let at = usize::try_from(gpu).unwrap_or(usize::MAX);
        old_devices
            .get(at)
            .is_some_and(|d| new_devices.get(at) == Some(d))
    };
    let earlier = old.state_dir.display();
    std::thread::scope(|scope| {
        let each: Vec<_> = gpus
            .iter()
            .map(|&gpu| scope.spawn(move || retire_gpu(old, gpu, wait)))
            .collect();
        let mut said = Vec::new();
        for (&gpu, done) in gpus.iter().zip(each) {
            match done.join() {
                Ok(lines) => said.extend(lines.into_iter().map(|l| format!("GPU {gpu}: {l}"))),
                Err(_) => said.push(format!("GPU {gpu}: its earlier daemon was not looked at")),
            }
            if compute_mode::recorded(old, gpu).is_none() {
                continue;
            }
            let carried = if same_device(gpu) {
                compute_mode::carry(old, new, gpu)
            } else {
                Ok(None)
            };
            said.push(match carried {
                Ok(Some(mode)) => format!(
                    "GPU {gpu}: its earlier mode {mode} could not be given back under {earlier}: \
                     the node timer (gpu-mps metrics --write) gives it back under {}",
                    new.state_dir.display()
                ),
                Ok(None) if old.state_dir == new.state_dir => continue,
                Ok(None) => format!(
                    "GPU {gpu}: its earlier compute mode ({earlier}/compute-mode-gpu{gpu}) could \
                     not be given back and is not carried over (another device or record under \
                     {}): set it with nvidia-smi -c",
                    new.state_dir.display()
                ),
                Err(e) => format!(
                    "GPU {gpu}: its earlier compute mode could not be given back nor carried \
                     over ({e}): set it with nvidia-smi -c"
                ),
            });
        }
        said
    })
}

/// GPU `gpu`'s idle daemon under `cfg` stopped (which gives its mode
/// back), or, with no daemon, its recorded mode given back.
fn retire_gpu(cfg: &GpuMpsConfig, gpu: u32, wait: LockWait) -> Vec<String> {
    let earlier = cfg.state_dir.display();
    let done = daemon::with_gpu_lock(cfg, gpu, wait, || {
        if daemon::present(cfg, gpu) {
            return vec![format!(
                "the MPS daemon left under the earlier StateDir {earlier}: {}",
                daemon::stop(cfg, gpu)
            )];
        }
        match compute_mode::restore(cfg, gpu) {
            Ok(Some(settled)) => vec![format!("{settled} (recorded under {earlier})")],
            Ok(None) => Vec::new(),
            Err(e) => vec![format!("compute mode not given back under {earlier}: {e}")],
        }
    });
    done.unwrap_or_else(|e| vec![format!("left under {earlier}: {e}")])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mps::state_dir::{self, Access};
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::time::{Duration, Instant};

    /// A node in a temp dir: a control program that answers every call,
    /// an `nvidia-smi` beside it that logs its arguments, reports the mode
    /// in `mode` and fails `-c` while `fail` exists.
    struct Site {
        dir: tempfile::TempDir,
        bin: PathBuf,
    }

    impl Site {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
            let bin = dir.path().join("bin");
            fs::create_dir_all(&bin).unwrap_or_else(|e| panic!("{e}"));
            let root = dir.path().display();
            let smi = format!(
                "#!/bin/sh\necho \"$*\" >> {root}/log\ncase \"$*\" in *query*) cat {root}/mode;; \
                 *' -c '*) [ -e {root}/fail ] && exit 3;; esac\nexit 0\n"
            );
            for (name, text) in [
                ("control", "#!/bin/sh\nexit 0\n".to_owned()),
                (compute_mode::SMI, smi),
            ] {
                let path = bin.join(name);
                fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
                fs::set_permissions(&path, fs::Permissions::from_mode(0o755))
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            let site = Self { dir, bin };
            site.write("mode", "Exclusive_Process\n");
            site
        }

        fn path(&self, name: &str) -> PathBuf {
            self.dir.path().join(name)
        }

        fn write(&self, name: &str, text: &str) {
            fs::write(self.path(name), text).unwrap_or_else(|e| panic!("{e}"));
        }

        fn log(&self) -> String {
            fs::read_to_string(self.path("log")).unwrap_or_default()
        }

        /// A configuration with state under `state` and GPU devices `devices`.
        fn cfg(&self, state: &str, devices: &str) -> GpuMpsConfig {
            let text = format!(
                "StateDir={}\nGPUDevices={devices}\nMPSControl={}\n",
                self.path(state).display(),
                self.bin.join("control").display()
            );
            let cfg = crate::mps::config::parse(&text, "gpu_mps.conf", "gpu01")
                .unwrap_or_else(|e| panic!("{e}"))
                .unwrap_or_else(|| panic!("no GPUs: {text}"));
            let owner = daemon::daemon_uid();
            state_dir::ensure(&cfg.state_dir, owner, Access::Private)
                .unwrap_or_else(|e| panic!("{e}"));
            cfg
        }

        fn record(&self, cfg: &GpuMpsConfig, gpu: u32, mode: &str) {
            fs::write(cfg.state_dir.join(format!("compute-mode-gpu{gpu}")), mode)
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }

    fn fake_daemon(pipe: &Path) -> std::process::Child {
        fs::create_dir_all(pipe).unwrap_or_else(|e| panic!("{e}"));
        fs::write(pipe.join("control"), "").unwrap_or_else(|e| panic!("{e}"));
        let child = Command::new("bash")
            .args([
                "-c",
                &format!("exec -a {} sleep 60", crate::mps::programs::CONTROL_PROGRAM),
            ])
            .env("CUDA_MPS_PIPE_DIRECTORY", pipe)
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"));
        let deadline = Instant::now() + Duration::from_secs(5);
        while daemon::processes(pipe).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    #[test]
    fn an_old_state_dirs_idle_daemons_are_stopped_and_their_modes_given_back() {
        let site = Site::new();
        let devices = "/dev/fake0,/dev/fake1";
        let (old, new) = (site.cfg("a", devices), site.cfg("b", devices));
        // GPU 0: a daemon a failed stop left, in gpushare's exclusive mode;
        // GPU 1: no daemon, a mode whose restore failed.
        let mut left = fake_daemon(&daemon::pipe_dir(&old, 0));
        site.record(&old, 0, "DEFAULT");
        site.record(&old, 1, "DEFAULT");
        let said = retire(&old, &new, LockWait::default());
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut gone = left.try_wait().ok().flatten();
        while gone.is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            gone = left.try_wait().ok().flatten();
        }
        if gone.is_none() {
            let _ = left.kill();
            let _ = left.wait();
        }
        assert!(gone.is_some(), "the old daemon still runs: {said:?}");
        assert!(
            said[0].starts_with("GPU 0: the MPS daemon left under the earlier StateDir"),
            "{said:?}"
        );
        assert_eq!(said.len(), 2, "{said:?}");
        let log = site.log();
        for gpu in [0, 1] {
            assert!(log.contains(&format!("-i {gpu} -c DEFAULT")), "{log}");
            assert_eq!(compute_mode::recorded(&old, gpu), None);
            assert_eq!(compute_mode::recorded(&new, gpu), None);
        }
        // Nothing left: a second look does nothing.
        fs::remove_file(site.path("log")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            retire(&old, &new, LockWait::default()),
            Vec::<String>::new()
        );
        assert_eq!(site.log(), "");
    }

    #[test]
    fn a_mode_that_cannot_be_given_back_goes_with_the_node_to_its_new_state_dir() {
        let site = Site::new();
        let (old, new) = (
            site.cfg("a", "/dev/fake0,/dev/fake1"),
            site.cfg("b", "/dev/fake0,/dev/other1"),
        );
        site.write("fail", "");
        site.record(&old, 0, "DEFAULT");
        site.record(&old, 1, "DEFAULT");
        let said = retire(&old, &new, LockWait::default());
        // GPU 0 is the same device under both: the new ledger gives it back.
        assert_eq!(compute_mode::recorded(&new, 0), Some("DEFAULT"));
        assert_eq!(compute_mode::pending(&new, 2), vec![0]);
        assert_eq!(compute_mode::recorded(&old, 0), None);
        assert!(
            said.iter()
                .any(|l| l.starts_with("GPU 0: its earlier mode DEFAULT")),
            "{said:?}"
        );
        // GPU 1 is another device now: left for the admin, and said so.
        assert_eq!(compute_mode::recorded(&new, 1), None);
        assert!(
            said.iter()
                .any(|l| l.starts_with("GPU 1:") && l.contains("set it with nvidia-smi -c")),
            "{said:?}"
        );
        // The node timer under the new configuration gives it back.
        fs::remove_file(site.path("fail")).unwrap_or_else(|e| panic!("{e}"));
        let settled = compute_mode::restore(&new, 0).unwrap_or_else(|e| panic!("{e}"));
        assert!(settled.is_some());
        assert!(site.log().ends_with("-i 0 -c DEFAULT\n"), "{}", site.log());
        assert_eq!(compute_mode::pending(&new, 2), Vec::<u32>::new());
    }
}
