//! Gates the job_submit ABI differences between Slurm releases, and lets the
//! crate's own tests and benchmarks call the exported functions in-process.
include!("../../slurm-sys/version_cfg.rs");

fn main() {
    emit_slurm_version_cfgs();
    // The plugin resolves Slurm's symbols from slurmctld at load time and
    // must not link libslurm. Its tests and benchmarks run outside a daemon,
    // so they (and only they) link libslurmfull to get xmalloc and logging.
    if let Ok(dir) = std::env::var("DEP_SLURM_LIBDIR") {
        for kind in ["tests", "benches"] {
            println!("cargo::rustc-link-arg-{kind}=-L{dir}");
            println!("cargo::rustc-link-arg-{kind}=-Wl,-rpath,{dir}");
            println!("cargo::rustc-link-arg-{kind}=-lslurmfull");
        }
    }
}
