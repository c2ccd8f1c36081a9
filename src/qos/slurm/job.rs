//! One job, as `gpu-qos why` reads it: `squeue -j` with the fields of
//! every squeue read ([`super::jobs::FIELDS`]), slurmctld packing only
//! that job.

use super::jobs::{self, Job};
use super::{ReadError, SlurmRead};
use crate::qos::site::Unread;

/// Whether `job` is a job id: a number, or `ARRAYID_TASK`.
pub fn is_job_id(job: &str) -> bool {
    !job.is_empty() && job.bytes().all(|b| b.is_ascii_digit() || b == b'_')
}

/// The job, `None` when slurmctld lists no such job pending or running.
pub fn read(read: &dyn SlurmRead, job: &str) -> Result<(Option<Job>, Vec<Unread>), ReadError> {
    if !is_job_id(job) {
        return Err(ReadError::new(format!(
            "`{job}` is not a job id (a number, or ARRAYID_TASK)"
        )));
    }
    let (found, unread) = jobs::read(read, &jobs::one(job))?;
    Ok((found.into_iter().next(), unread))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids() {
        assert!(is_job_id("42") && is_job_id("4242_3"));
        assert!(!is_job_id("") && !is_job_id("42;rm") && !is_job_id("-u"));
    }
}
