//! Starts a test cluster and keeps it up for interactive use.
//!
//! `testcluster [--nodes] [SECONDS]`: the seed site on one node, or with
//! `--nodes` the example site on three nodes, each a host of its own
//! (`ClusterSpec::example_site_nodes`). Prints how to reach it from another
//! shell, then waits (default: until SIGINT, SIGTERM or SIGHUP); every
//! daemon, job process, node and namespace goes when it exits.

use std::time::Duration;

fn main() -> std::process::ExitCode {
    // Before any thread starts: Ctrl-C or kill then stops the cluster
    // cleanly (its Drop), as the time running out does.
    let signals = testcluster::process::StopSignals::block();
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
            match &signals {
                Ok(signals) => {
                    if let Some(s) = signals.wait(Duration::from_secs(secs)) {
                        eprintln!("signal {s}: stopping the cluster");
                    }
                }
                Err(e) => {
                    eprintln!("signals not blocked ({e}): kill leaves job processes behind");
                    std::thread::sleep(Duration::from_secs(secs));
                }
            }
            drop(cluster);
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}
