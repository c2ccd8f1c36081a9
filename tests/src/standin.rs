//! The stand-in MPS control program (`src/bin/mps-control-standin.rs`),
//! built with the harness: installed under NVIDIA's name where a cluster's
//! `MPSControl=` points; and the stand-in driver library
//! (`tests/fake-libcuda`), installed as `libcuda.so.1` where `CudaLibrary=`
//! points, with [`CudaFiles`] for what tests tell it and read of it.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::cluster::harness_dir;

use gpushare::mps::programs::CONTROL_PROGRAM;

/// Copies the stand-in into `dir` as `nvidia-cuda-mps-control` (its log,
/// `hang` and `servers` files live beside it) and returns its path.
pub fn install(dir: &Path) -> crate::Result<PathBuf> {
    install_as(dir, CONTROL_PROGRAM)
}

/// Copies the stand-in into `dir` as `nvidia-smi` (it then stands in for
/// that, logging to the same `standin.log`) and returns its path.
pub fn install_smi(dir: &Path) -> crate::Result<PathBuf> {
    install_as(dir, gpushare::mps::compute_mode::SMI)
}

/// Copies the stand-in into `dir` as `gpushare-nvml-usage`: the node
/// timer's NVML query as `ShareUsage=` names it, printing the figures in
/// `dir/nvml-usage` (see `src/bin/mps-control-standin.rs`); its path.
pub fn install_nvml_usage(dir: &Path) -> crate::Result<PathBuf> {
    install_as(dir, NVML_USAGE)
}

/// NVML's facts kept fresh in the state directory `state_dir`, as a GPU
/// node holds them after its first share's prolog or node timer run:
/// `gpus` GPUs of `memory_mib` each (minors 0 up, no MIG, none lost), with
/// the node's keys as they read now. A share's prolog then takes them and
/// starts no NVML child; without them, on a machine with no NVIDIA driver,
/// every share's prolog would ask NVML in a child of its own, a cost no GPU
/// node pays. The directory is made where missing, as the ledger wants it.
pub fn keep_nvml_facts(state_dir: &Path, gpus: u32, memory_mib: u64) -> crate::Result<()> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    gpushare::mps::ledger::Ledger::open(state_dir, euid).map_err(|e| e.to_string())?;
    let facts = gpushare_node::nvml::facts_text(
        &(0..gpus)
            .map(|g| gpushare_node::nvml::GpuFacts {
                index: g,
                uuid: None,
                memory_mib: Some(memory_mib),
                minor: Some(g),
                compute_processes: Vec::new(),
                mig_enabled: Some(false),
                lost: false,
                pci_bus_id: None,
            })
            .collect::<Vec<_>>(),
    );
    let keys = gpushare::mps::node::facts_keys::keys_text(&gpushare_node::gpu_facts::node_keys(
        Path::new("/"),
    ));
    for (name, text) in [
        (gpushare::mps::gpu_devices::KEPT_FACTS, facts),
        (gpushare::mps::node::facts_keys::KEPT_KEYS, keys),
    ] {
        let path = state_dir.join(name);
        fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// The name the stand-in NVML query is installed under.
pub const NVML_USAGE: &str = "gpushare-nvml-usage";

/// Copies the stand-in into `dir` as `cuda-client`: a program that uses
/// its job's GPU as the stand-in `nvidia-smi`'s mode allows (see
/// `src/bin/mps-control-standin.rs`), and returns its path.
pub fn install_client(dir: &Path) -> crate::Result<PathBuf> {
    install_as(dir, "cuda-client")
}

fn install_as(dir: &Path, name: &str) -> crate::Result<PathBuf> {
    let source = harness_dir()?.join("mps-control-standin");
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let program = dir.join(name);
    // A copy, not a link: a running copy is replaced by rename, never
    // written over (ETXTBSY).
    let temp = dir.join(format!(".{name}.new"));
    fs::copy(&source, &temp).map_err(|e| {
        format!(
            "{}: {e} (built by cargo build -p gpushare-tests --bins)",
            source.display()
        )
    })?;
    fs::set_permissions(&temp, fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
    fs::rename(&temp, &program).map_err(|e| e.to_string())?;
    clients_dir(dir)?;
    Ok(program)
}

/// The directory the stand-in libcuda's MPS clients register in, beside
/// the stand-ins (tests/fake-libcuda/src/mps_world.rs): anyone may write
/// there, sticky, as clients run as the jobs' users.
fn clients_dir(dir: &Path) -> crate::Result<()> {
    let clients = dir.join("mps-clients");
    fs::create_dir_all(&clients).map_err(|e| format!("{}: {e}", clients.display()))?;
    fs::set_permissions(&clients, fs::Permissions::from_mode(0o1777))
        .map_err(|e| format!("{}: {e}", clients.display()))
}

/// The name the stand-in driver library is installed under.
pub const LIBCUDA: &str = "libcuda.so.1";

/// Copies the stand-in driver library (`tests/fake-libcuda`, built as
/// `libcuda.so` by `cargo build --workspace`) into `dir` as
/// `libcuda.so.1`, by rename as the programs, and makes its `cuda.log`
/// writable by the unprivileged users the probe runs as; its path.
pub fn install_libcuda(dir: &Path) -> crate::Result<PathBuf> {
    let source = harness_dir()?.join("libcuda.so");
    if !source.exists() {
        return Err(format!(
            "{}: not built (cargo build --workspace builds it: tests/fake-libcuda)",
            source.display()
        ));
    }
    crate::freshness::ensure_current(&source)?;
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let library = dir.join(LIBCUDA);
    let temp = dir.join(format!(".{LIBCUDA}.new"));
    fs::copy(&source, &temp).map_err(|e| format!("{}: {e}", source.display()))?;
    fs::set_permissions(&temp, fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
    fs::rename(&temp, &library).map_err(|e| e.to_string())?;
    CudaFiles::at(dir).open_log()?;
    Ok(library)
}

/// A fault the stand-in driver library is told to show, by a file beside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CudaFault {
    /// MPS clients get the whole GPU, as a driver that drops the limits.
    IgnoreLimits,
    /// cuInit answers CUDA_ERROR_NO_DEVICE.
    NoDevice,
    /// cuInit sleeps an hour: the caller's deadline must end it.
    Hang,
    /// cuModuleLoadData answers CUDA_ERROR_INVALID_PTX.
    BadPtx,
}

impl CudaFault {
    pub const ALL: [CudaFault; 4] = [
        CudaFault::IgnoreLimits,
        CudaFault::NoDevice,
        CudaFault::Hang,
        CudaFault::BadPtx,
    ];

    pub fn file_name(self) -> &'static str {
        match self {
            CudaFault::IgnoreLimits => "cuda-ignore-limits",
            CudaFault::NoDevice => "cuda-no-device",
            CudaFault::Hang => "cuda-hang",
            CudaFault::BadPtx => "cuda-bad-ptx",
        }
    }
}

/// One context the stand-in driver library was asked for, as `cuda.log`
/// records it (`ctx gpu=N mps=yes|no uid=U result=CODE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaContext {
    pub gpu: u32,
    pub mps: bool,
    pub uid: u32,
    /// The CUresult: 0 made, 46 refused (device unavailable), 805 no daemon.
    pub result: i32,
}

impl CudaContext {
    /// The context a `cuda.log` line records, if it records one.
    pub fn parse(line: &str) -> Option<Self> {
        let rest = line.strip_prefix("ctx ")?;
        let field = |key: &str| {
            rest.split_whitespace()
                .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        };
        Some(CudaContext {
            gpu: field("gpu")?.parse().ok()?,
            mps: match field("mps")? {
                "yes" => true,
                "no" => false,
                _ => return None,
            },
            uid: field("uid")?.parse().ok()?,
            result: field("result")?.parse().ok()?,
        })
    }
}

/// The stand-in driver library's files in the directory it is installed
/// in: the faults, the GPUs it shows (`cuda-gpus`), its log (`cuda.log`).
#[derive(Clone, Debug)]
pub struct CudaFiles {
    dir: PathBuf,
}

impl CudaFiles {
    pub fn at(dir: &Path) -> Self {
        CudaFiles {
            dir: dir.to_path_buf(),
        }
    }

    /// Shows `fault` (`true`) or stops showing it.
    pub fn set_fault(&self, fault: CudaFault, on: bool) -> crate::Result<()> {
        let path = self.dir.join(fault.file_name());
        if on {
            fs::write(&path, "").map_err(|e| format!("{}: {e}", path.display()))
        } else {
            match fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(format!("{}: {e}", path.display()))
                }
                _ => Ok(()),
            }
        }
    }

    /// No fault shown, the default GPUs (132 SMs, 81920 MiB each), an
    /// empty log.
    pub fn reset(&self) -> crate::Result<()> {
        for fault in CudaFault::ALL {
            self.set_fault(fault, false)?;
        }
        self.set_gpus(&[])?;
        // The MPS clients an earlier test's jobs left registered.
        if let Ok(entries) = fs::read_dir(self.dir.join("mps-clients")) {
            for entry in entries.flatten() {
                let _ = fs::remove_file(entry.path());
            }
        }
        self.clear_log()
    }

    /// The GPUs shown, `(index, SMs, MiB)` each (none: the default for
    /// every index).
    pub fn set_gpus(&self, gpus: &[(u32, u32, u64)]) -> crate::Result<()> {
        let path = self.dir.join("cuda-gpus");
        if gpus.is_empty() {
            let _ = fs::remove_file(&path);
            return Ok(());
        }
        let text: String = gpus
            .iter()
            .map(|(index, sms, mib)| format!("{index} {sms} {mib}\n"))
            .collect();
        fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// What the library logged, line by line.
    pub fn log(&self) -> Vec<String> {
        fs::read_to_string(self.dir.join("cuda.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The contexts it was asked for, in order.
    pub fn contexts(&self) -> Vec<CudaContext> {
        self.log()
            .iter()
            .filter_map(|l| CudaContext::parse(l))
            .collect()
    }

    /// Empties the log (kept writable by every user).
    pub fn clear_log(&self) -> crate::Result<()> {
        let path = self.dir.join("cuda.log");
        fs::write(&path, "").map_err(|e| format!("{}: {e}", path.display()))?;
        self.open_log()
    }

    /// The log, there and writable by the unprivileged probe.
    fn open_log(&self) -> crate::Result<()> {
        let path = self.dir.join("cuda.log");
        fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .and_then(|_| fs::set_permissions(&path, fs::Permissions::from_mode(0o666)))
            .map_err(|e| format!("{}: {e}", path.display()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_context_line_of_cuda_log_is_read_whole_or_not_at_all() {
        assert_eq!(
            CudaContext::parse("ctx gpu=2 mps=yes uid=65534 result=0"),
            Some(CudaContext {
                gpu: 2,
                mps: true,
                uid: 65534,
                result: 0
            })
        );
        assert_eq!(
            CudaContext::parse("ctx gpu=0 mps=no uid=0 result=46").map(|c| (c.mps, c.result)),
            Some((false, 46))
        );
        for other in [
            "init gpu=0 uid=0 result=0",
            "ctx gpu=0 mps=maybe uid=0 result=0",
            "ctx gpu=0 mps=no uid=0",
        ] {
            assert_eq!(CudaContext::parse(other), None, "{other}");
        }
    }

    #[test]
    fn faults_and_gpus_are_files_beside_the_library() {
        let dir = tempfile::tempdir().unwrap();
        let files = CudaFiles::at(dir.path());
        files.set_fault(CudaFault::Hang, true).unwrap();
        assert!(dir.path().join("cuda-hang").exists());
        files
            .set_gpus(&[(0, 132, 81_920), (1, 108, 40_960)])
            .unwrap();
        assert_eq!(
            fs::read_to_string(dir.path().join("cuda-gpus")).unwrap(),
            "0 132 81920\n1 108 40960\n"
        );
        fs::write(
            dir.path().join("cuda.log"),
            "ctx gpu=1 mps=no uid=7 result=46\n",
        )
        .unwrap();
        assert_eq!(files.contexts().len(), 1);
        files.reset().unwrap();
        assert!(!dir.path().join("cuda-hang").exists());
        assert!(!dir.path().join("cuda-gpus").exists());
        assert!(files.log().is_empty());
        let mode = fs::metadata(dir.path().join("cuda.log"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o666);
    }
}
