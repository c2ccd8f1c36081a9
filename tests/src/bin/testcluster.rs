//! Starts the seed test cluster and keeps it up for interactive use.
//!
//! `testcluster [SECONDS]` prints the `SLURM_CONF` to export, then waits
//! (default: until killed); every daemon stops when it exits.

use std::time::Duration;

fn main() -> std::process::ExitCode {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(u64::MAX / 4);
    let spec = testcluster::ClusterSpec {
        job_submit_plugins: vec!["gpu_qos".into()],
        ..testcluster::ClusterSpec::seed()
    };
    match spec.start() {
        Ok(cluster) => {
            println!("export SLURM_CONF={}", cluster.slurm_conf().display());
            std::thread::sleep(Duration::from_secs(secs));
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}
