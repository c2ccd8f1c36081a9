//! What the prolog and the SPANK plugin leave beside the ledger for a
//! job's steps: the refusal note a step fails with, the marker of the
//! step that prints the job's limits, why a share runs without MPS, the
//! record of a job's own MPS daemon (`--gpu-mps=private`). The
//! epilog removes them with the job.

use std::fs;

use crate::mps::ledger::Ledger;
use crate::mps::private::{self, PrivateRecord};
use crate::mps::state_dir;

pub(super) fn refusal_name(job: u32) -> String {
    format!("refused.{job}")
}

fn banner_name(job: u32) -> String {
    format!("banner.{job}")
}

/// The note of a share that runs without MPS (`MPSFailure=run`): why.
pub(super) fn unserved_name(job: u32) -> String {
    format!("unserved.{job}")
}

/// Why `job` runs without MPS, where the prolog let it (`MPSFailure=run`).
pub fn unserved(ledger: &Ledger, job: u32) -> Option<String> {
    fs::read_to_string(ledger.dir().join(unserved_name(job))).ok()
}

/// Whether this step is the first of `job` here to print the job's limits
/// line: the first to call wins (a marker in the ledger directory, removed
/// by the epilog). Where the marker cannot be written, every step prints.
pub fn claim_banner(ledger: &Ledger, job: u32) -> bool {
    match fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(ledger.dir().join(banner_name(job)))
    {
        Ok(_) => true,
        Err(e) => e.kind() != std::io::ErrorKind::AlreadyExists,
    }
}

/// Removes what the prolog and SPANK plugin left for `job` beside the
/// ledger (refusal note, banner marker).
pub(super) fn forget_notes(ledger: &Ledger, job: u32) {
    for name in [
        refusal_name(job),
        banner_name(job),
        unserved_name(job),
        private::record_name(job),
    ] {
        let _ = fs::remove_file(ledger.dir().join(name));
    }
}

/// Leaves the record of `job`'s own MPS daemon (`--gpu-mps=private`) for
/// its steps.
pub(super) fn write_record(
    ledger: &Ledger,
    job: u32,
    record: &PrivateRecord,
) -> Result<(), state_dir::DirError> {
    let name = private::record_name(job);
    state_dir::replace_file(ledger.dir(), &name, record.to_string().as_bytes(), 0o600)
}

/// The record of `job`'s own MPS daemon, where the prolog let it have one.
pub fn private_record(ledger: &Ledger, job: u32) -> Option<PrivateRecord> {
    private::read_record(ledger.dir(), job)
}

/// The refusal note the prolog left for `job`, if any.
pub fn refusal(ledger: &Ledger, job: u32) -> Option<String> {
    fs::read_to_string(ledger.dir().join(refusal_name(job))).ok()
}
