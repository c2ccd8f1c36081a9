//! Starts a test cluster and keeps it up for interactive use.
//!
//! `testcluster [--nodes] [SECONDS]`: the seed site on one node, or with
//! `--nodes` the example site on three nodes, each a host of its own
//! (`ClusterSpec::example_site_nodes`). Prints how to reach it from another
//! shell, then waits (default: until killed); every daemon, node and
//! namespace goes when it exits.

use std::time::Duration;

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let nodes = args.iter().any(|a| a == "--nodes");
    let secs: u64 = args
        .iter()
        .find_map(|a| a.parse().ok())
        .unwrap_or(u64::MAX / 4);
    let spec = if nodes {
        testcluster::ClusterSpec::example_site_nodes()
    } else {
        testcluster::ClusterSpec {
            job_submit_plugins: vec!["gpu_qos".into()],
            ..testcluster::ClusterSpec::seed()
        }
    };
    match spec.start() {
        Ok(cluster) => {
            println!(
                "The cluster runs in a network namespace of its own. In another shell, as root:\n{}",
                cluster.enter_hint()
            );
            std::thread::sleep(Duration::from_secs(secs));
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}
