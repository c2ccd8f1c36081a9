//! dcgm-exporter's HPC job mapping (`--hpc-job-mapping-dir`), kept by the
//! ledger as one of its [`View`]s.
//!
//! dcgm-exporter reads, at every scrape, one file per GPU named after its
//! `gpu` label (NVML's index) holding one job id per line, and emits each
//! GPU metric once per listed job with an `hpc_job` label. With MPS shares
//! several jobs run on one GPU: each file lists every job on its GPU,
//! shares and whole-GPU holders alike, sorted, one per line, and is empty
//! (zero bytes: a blank line would be an empty job id) when no job is
//! there. Every job on a GPU then carries the whole GPU's values: never sum
//! a GPU metric over `hpc_job`.
//!
//! The files are written in the ledger's transaction, before its state, and
//! only where their text changes; a transaction that cannot write them
//! still places or releases its job, and the next one writes every file
//! that differs from the state again.
//!
//! File names: the GPU's device minor (`/dev/nvidiaN` → `N`), which is
//! NVML's index wherever `gpu-mps status` reports no NVML order mismatch.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use super::devices::CharDevice;
use super::ledger::{LedgerError, LedgerState, View};
use super::state_dir::{self, Access};

/// The mapping directory and the file name of each GPU, in ledger order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobMapping {
    dir: PathBuf,
    owner: u32,
    names: Vec<String>,
    /// Whether its files are root's alone (see [`state_dir::view_mode`]).
    private: Option<bool>,
}

impl JobMapping {
    /// The mapping in `dir` for the GPUs of `devices`, each file named by
    /// its device's minor number, else by its position. The directory is
    /// created (owned by `owner`, writable by nobody else) or checked at
    /// each publication: a bad one is a note of the transaction, never a
    /// node unfit for jobs.
    pub fn new(dir: PathBuf, owner: u32, devices: &[PathBuf]) -> Self {
        Self::with_names(dir, owner, file_names(devices))
    }

    /// A mapping with the given file names (GPU i's is `names[i]`).
    pub fn with_names(dir: PathBuf, owner: u32, names: Vec<String>) -> Self {
        Self {
            dir,
            owner,
            names,
            private: Some(false),
        }
    }

    /// The same, its files readable by root only where `private`
    /// (`PrivateData`; dcgm-exporter runs as root).
    pub fn private(self, private: Option<bool>) -> Self {
        Self { private, ..self }
    }
}

/// Each device's minor number (`N` of a `/dev/nvidiaN` character device),
/// else its position in `devices`.
pub fn file_names(devices: &[PathBuf]) -> Vec<String> {
    devices
        .iter()
        .enumerate()
        .map(|(i, d)| {
            CharDevice::of(d)
                .map(|c| c.minor)
                .unwrap_or(i as u32)
                .to_string()
        })
        .collect()
}

/// The text of GPU `gpu`'s file: each job on it, one per line, sorted.
pub fn file_text(state: &LedgerState, gpu: u32) -> String {
    let jobs: BTreeSet<u32> = state
        .shares()
        .filter(|s| s.gpu == gpu)
        .map(|s| s.job)
        .chain(
            state
                .whole_holders()
                .filter(|w| w.gpus.contains(&gpu))
                .map(|w| w.job),
        )
        .collect();
    jobs.iter().map(|j| format!("{j}\n")).collect()
}

impl View for JobMapping {
    fn publish(&self, state: &LedgerState) -> Result<(), LedgerError> {
        state_dir::ensure(&self.dir, self.owner, Access::WorldReadable)
            .map_err(|e| LedgerError::View(format!("DCGM job mapping: {e}")))?;
        let mut failed = Vec::new();
        for (gpu, name) in self.names.iter().enumerate() {
            let text = file_text(state, gpu as u32);
            let path = self.dir.join(name);
            let mode = state_dir::view_mode(self.private, &path);
            let same_mode = fs::metadata(&path).is_ok_and(|m| m.mode() & 0o777 == mode);
            if same_mode && fs::read(&path).is_ok_and(|now| now == text.as_bytes()) {
                continue;
            }
            if let Err(e) = state_dir::replace_file(&self.dir, name, text.as_bytes(), mode) {
                failed.push(e.to_string());
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(LedgerError::View(format!(
                "DCGM job mapping in {}: {}",
                self.dir.display(),
                failed.join("; ")
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::ledger::{Ledger, ShareRecord, WholeRecord};
    use super::*;
    use std::sync::Arc;

    fn share(job: u32, gpu: u32) -> ShareRecord {
        ShareRecord {
            job,
            uid: 1000,
            user: "alice".into(),
            gpu,
            units: 25,
            since: 0,
            placed_by_slurm: false,
            memory_mib: None,
            clients: None,
            sluid: None,
        }
    }

    #[test]
    fn each_gpu_lists_its_shares_and_whole_holders_sorted_and_is_empty_without() {
        let mut state = LedgerState::new();
        state.insert_share(share(12, 1));
        state.insert_share(share(7, 1));
        state.insert_share(share(9, 0));
        state.insert_whole(WholeRecord {
            job: 3,
            gpus: vec![2, 3],
            since: 0,
        });
        assert_eq!(file_text(&state, 0), "9\n");
        assert_eq!(file_text(&state, 1), "7\n12\n");
        assert_eq!(file_text(&state, 2), "3\n");
        assert_eq!(file_text(&state, 3), "3\n");
        // Zero bytes, not a blank line (an empty job id to dcgm-exporter).
        assert_eq!(file_text(&LedgerState::new(), 0), "");
    }

    #[test]
    fn names_are_device_minors_else_positions() {
        let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let plain = temp.path().join("nvidia5");
        fs::write(&plain, "").unwrap_or_else(|e| panic!("{e}"));
        // /dev/null is the character device 1:3.
        let names = file_names(&[PathBuf::from("/dev/null"), plain]);
        assert_eq!(names, vec!["3".to_owned(), "1".to_owned()]);
    }

    /// The mapping follows the ledger transaction by transaction: never a
    /// job the ledger does not hold, never one missing.
    #[test]
    fn the_ledger_keeps_the_mapping_in_step() {
        let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let owner = euid();
        let dir = temp.path().join("dcgm");
        let names: Vec<String> = ["10", "11"].map(str::to_owned).to_vec();
        let mapping = JobMapping::with_names(dir.clone(), owner, names);
        let ledger = Ledger::open(&temp.path().join("state"), owner)
            .unwrap_or_else(|e| panic!("{e}"))
            .with_view(Arc::new(mapping));
        let read =
            |name: &str| fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{e}"));
        for job in 1..=3 {
            ledger
                .place(job, 1000, "alice", 50, 2, 100)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(read("10"), "1\n3\n");
        assert_eq!(read("11"), "2\n");
        ledger.release(1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read("10"), "3\n");
        ledger.release(2).unwrap_or_else(|e| panic!("{e}"));
        ledger.release(3).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((read("10"), read("11")), (String::new(), String::new()));
    }

    /// A mapping directory that cannot be trusted is a note of the
    /// transaction: the job is placed all the same.
    #[test]
    fn a_bad_mapping_directory_never_refuses_a_share() {
        let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let owner = euid();
        let dir = temp.path().join("dcgm");
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
        // World-writable: refused as a place to write.
        fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap_or_else(|e| panic!("{e}"));
        let ledger = Ledger::open(&temp.path().join("state"), owner)
            .unwrap_or_else(|e| panic!("{e}"))
            .with_view(Arc::new(JobMapping::with_names(
                dir,
                owner,
                vec!["0".into()],
            )));
        let placed = ledger
            .place(1, 1000, "alice", 50, 1, 100)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(placed.value.share.gpu, 0);
        assert!(
            placed.notes.iter().any(|n| n.contains("DCGM job mapping")),
            "{:?}",
            placed.notes
        );
    }

    /// The owner of a directory this process creates.
    fn euid() -> u32 {
        std::fs::metadata("/proc/self")
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
            .unwrap_or(0)
    }
}
