//! Gates the job_submit ABI differences between Slurm releases.
include!("../../slurm-sys/version_cfg.rs");

fn main() {
    emit_slurm_version_cfgs();
}
