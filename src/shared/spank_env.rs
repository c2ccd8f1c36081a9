//! The SPANK job environment as a channel from slurmctld to the node.
//!
//! `job_submit/gpu_qos` writes `GPUSHARE_*` variables into a job's
//! `spank_job_env`; slurmd hands them to the Prolog and Epilog as
//! `SPANK_GPUSHARE_*`. Any client can send that environment too (sbatch's
//! own SPANK plugins, a libslurm program), so the plugin deletes every
//! client-sent `GPUSHARE_*` entry before writing its own, and the node
//! accepts a value only where it agrees with what Slurm itself put in the
//! Prolog environment from the job's signed credential.

/// Every variable gpushare owns in the SPANK environment starts so.
pub const PREFIX: &str = "GPUSHARE_";

/// The exact MPS units of a job (Slurm 22.05 only passes a rounded
/// percentage to the node).
pub const MPS_UNITS: &str = "GPUSHARE_MPS_UNITS";

/// The name under which slurmd shows a SPANK variable to Prolog and Epilog.
pub fn in_prolog(name: &str) -> String {
    format!("SPANK_{name}")
}

/// Whether an `NAME=value` entry of a submitted SPANK environment is one
/// gpushare owns (and so must come from the plugin, not the client).
pub fn is_owned_entry(entry: &str) -> bool {
    entry
        .get(..PREFIX.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(PREFIX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_entries_are_recognised_whatever_the_case() {
        assert!(is_owned_entry("GPUSHARE_MPS_UNITS=7"));
        assert!(is_owned_entry("gpushare_mps_units=7"));
        assert!(is_owned_entry("GPUSHARE_OTHER"));
        assert!(!is_owned_entry("GPUSHAR"));
        assert!(!is_owned_entry("MY_GPUSHARE_X=1"));
        assert_eq!(in_prolog(MPS_UNITS), "SPANK_GPUSHARE_MPS_UNITS");
    }
}
