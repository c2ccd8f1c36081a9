//! Turns the Slurm version slurm-sys detected into `cfg(slurm_X_Y)` flags.
include!("slurm-sys/version_cfg.rs");

fn main() {
    emit_slurm_version_cfgs();
}
