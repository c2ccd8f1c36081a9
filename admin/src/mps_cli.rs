//! `gpu-mps`'s command line: its commands and options, parsed by `clap`
//! (the program itself is `src/bin/gpu-mps.rs`; `manual.rs` makes its
//! manual pages and completions from the same definitions).

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use gpushare::mps::installed;
use gpushare::mps::setup_lines::GpuGroup;

/// The MPS shares of this GPU node (gpushare).
///
/// Exit status: 0 fine; 1 a problem shown or work left (status, gc,
/// disable, health), a GPU failed (selftest); 2 could not run; 3 nothing to do
/// (metrics: no gpu_mps.conf applies to this node), GPUs skipped
/// (selftest).
#[derive(Debug, Parser)]
#[command(name = "gpu-mps", version = env!("CARGO_PKG_VERSION"))]
pub struct Cli {
    /// gpu_mps.conf (default: next to $SLURM_CONF, else where the node's
    /// prolog and epilog last found it, else /etc/slurm)
    #[arg(long, value_name = "PATH", global = true)]
    pub conf: Option<PathBuf>,
    /// This node as Slurm names it, for gpu_mps.conf's NodeName= lines and
    /// slurmctld (default: $SLURMD_NODENAME, else the name slurmd gave the
    /// node's last prolog or epilog, else the short hostname)
    #[arg(long, value_name = "NAME", global = true)]
    pub node: Option<String>,
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// The node's GPUs: shares, holders and problems, one row each
    ///
    /// One row per GPU: units used/total, share jobs (id, user, units),
    /// whole-GPU holders, and flags: OVERLAP (shares and a whole-GPU job on
    /// one GPU, which Slurm 22.05 can create), OVER (over capacity). Any
    /// user may run it. Exit status: 0 fine; 1 a problem shown (OVERLAP,
    /// OVER, a lost or set-aside state, a ledger that cannot be read); 2
    /// could not run.
    Status {
        /// Print the status as one JSON object
        #[arg(long)]
        json: bool,
    },
    /// (root) The node's metrics for Prometheus
    ///
    /// (root) The node's metrics in Prometheus's text format, as the
    /// prolog and epilog write them to MetricsFile (each daemon asked, not
    /// only its pipe seen). A timer runs `--write` every minute, so a node
    /// whose file is not rewritten is known stale. Where no gpu_mps.conf
    /// applies to the node (none found, or one that gives it no GPUs: a
    /// CPU node) it says so in one line and exits 3. Exit status: 0
    /// printed or written, 2 could not run, 3 no gpu_mps.conf applies to
    /// this node.
    Metrics {
        /// Write MetricsFile atomically instead of printing; also read the
        /// kernel log for fatal XID errors since the last look (the first
        /// look starts at the log's end), setting their GPUs aside; only
        /// the kernel's records starting with the driver's `NVRM: Xid` count;
        /// set again each compute mode nvidia-smi failed to set;
        /// and lift the exclusions of jobs requeued off this node whose
        /// cause can have changed (a GPU given back, an MPS setup mended;
        /// only this node leaves their ExcNodeList)
        #[arg(long)]
        write: bool,
        /// The kernel log to read XIDs from, as /dev/kmsg records
        #[arg(long, value_name = "PATH", default_value = "/dev/kmsg")]
        kernel_log: PathBuf,
    },
    /// (root) Drop the records of jobs that ended unseen
    ///
    /// (root) Drop the records of jobs slurmctld no longer runs on this
    /// node, and end a lost state once every running share is accounted
    /// for. Exit status: 0 every running share accounted for, 1 a lost
    /// state kept: some running share jobs are not in the ledger, 2 could
    /// not run.
    Gc,
    /// (root) Set a GPU aside from sharing
    ///
    /// (root) Set a GPU aside from sharing: it takes no new share (shares
    /// already there run on), `status` flags it FAILED with the reason and
    /// the metrics say so. CPU-only and whole-GPU jobs still run there,
    /// and the node is never drained for it, even with every GPU set aside.
    /// For health checks (NHC, DCGM on fatal XID errors) and admins. Exit
    /// status: 0 done, 2 could not run.
    DrainGpu {
        /// The GPU's index on the node (its place in GPUDevices)
        gpu: u32,
        /// Why, as `status` and the refused jobs will say it
        #[arg(long, default_value = "drained by an admin")]
        reason: String,
    },
    /// (root) Give a set-aside GPU back to sharing
    ///
    /// (root) Give a GPU set aside (by drain-gpu, or found lost through
    /// NVML) back to sharing. Exit status: 0 done, 2 could not run.
    ResumeGpu {
        /// The GPU's index on the node
        gpu: u32,
    },
    /// (root) Take this node off GPU sharing, leaving nothing of gpushare
    ///
    /// (root) Take this node off GPU sharing: from now on every new share
    /// is refused with reason `disabled` (a batch job is requeued to a node
    /// that shares); shares already running run on, CPU-only and whole-GPU
    /// jobs are not touched. Once no share runs here, every MPS daemon is
    /// stopped, every GPU gets its compute mode back and every exclusion
    /// gpushare put on jobs is taken back (while shares still run, run it
    /// again, or give --wait). The mark outlives a reboot; `enable`
    /// removes it. Exit status: 0 nothing of gpushare's left on this node;
    /// 1 shares still run, or something is left to do (run it again); 2
    /// could not run.
    Disable {
        /// Why, as `status` and the refused jobs will say it
        #[arg(long, default_value = "taken off sharing by an admin")]
        reason: String,
        /// Wait up to this many seconds for the running shares to end
        #[arg(long, value_name = "SECONDS", default_value_t = 0)]
        wait: u64,
    },
    /// (root) The node's GPU sharing in one line, for a health check
    ///
    /// (root) The node's GPU sharing in one line, for Slurm's
    /// HealthCheckProgram or NHC: `gpushare: healthy (N GPU(s))`, or each
    /// problem that keeps shares off a GPU until an admin acts (a GPU set
    /// aside: lost, drain-gpu, a failed self-test; a GPU's MPS daemon that
    /// does not answer; a state file set aside). A node no gpu_mps.conf
    /// applies to is healthy. With --drain, a node with a problem is
    /// drained with that line as its reason (`gpushare: ...`) unless
    /// slurmctld already holds it unhealthy, and a healthy node whose
    /// drain reason is gpushare's is resumed: an admin's drain is never
    /// touched. Slurm 26.11's SLURM_NODE_IS_HEALTHY is read where set.
    /// Exit status: 0 healthy (or no gpu_mps.conf applies here); 1 a
    /// problem (--drain: the node drained, unless Slurm holds it unhealthy
    /// already); 2 could not run.
    Health {
        /// Drain or resume the node through Slurm as above
        #[arg(long)]
        drain: bool,
    },
    /// (root) Give this node back to GPU sharing
    ///
    /// (root) Give this node back to GPU sharing after `disable`: the next
    /// share job is placed as before. Exit status: 0 done, 2 could not run.
    Enable,
    /// (root) Prove each GPU's MPS limits with a CUDA client
    ///
    /// (root) On each GPU that shares and runs no job, start its MPS daemon
    /// as a share's prolog does, with the limits of a share of --units, and
    /// run a CUDA client built into gpushare (it loads the driver's
    /// library, CudaLibrary=, and needs no CUDA toolkit) as SelfTestUser=
    /// with a share's environment: the SMs it gets and its kernel runs on
    /// must match the share's thread percentage, an allocation of half its
    /// memory limit must succeed and one over it fail, and a client without
    /// the MPS variables must be refused while the GPU is exclusive. The
    /// daemon is stopped again. A GPU that fails is set aside from sharing
    /// (as drain-gpu does) until a test passes there. Exit status: 0 every
    /// GPU tested passed, 1 a GPU failed, 2 the test could not run, 3 none
    /// failed but some were skipped (shares or a whole-GPU job run there).
    Selftest {
        /// Test only this GPU (its index on the node; repeat for several)
        #[arg(long = "gpu", value_name = "N")]
        gpus: Vec<u32>,
        /// The size of the share the client stands for, in units of
        /// UnitsPerGPU (default: a quarter of a GPU)
        #[arg(long, value_name = "UNITS")]
        units: Option<u32>,
        /// Print the figures as one JSON object
        #[arg(long)]
        json: bool,
        /// Also write the results as a Markdown report to this file
        #[arg(long, value_name = "FILE")]
        report: Option<PathBuf>,
        /// How long each CUDA client may take (a cold CUDA start on a GPU
        /// without persistence mode takes seconds; a hung driver forever)
        #[arg(long, value_name = "SECONDS", default_value_t = 60)]
        timeout: u64,
    },
    /// The Slurm and gpushare configuration lines this node needs
    ///
    /// Print the settings this node takes from gpu_mps.conf, each with the
    /// line it comes from (and that line's NodeName=, where the file has
    /// lines for some nodes only; --node names another node), then the
    /// gres.conf, slurm.conf, cgroup.conf, plugstack.conf and gpu_mps.conf
    /// lines it needs. With --node, each gres.conf line starts with
    /// NodeName=NAME, for one gres.conf every node shares (without, the
    /// lines of the node's own gres.conf). A gpu_mps.conf that does not
    /// parse is the error. Exit status: 0 printed, 2 could not run.
    Config {
        /// GPUs of the node (default: the device files gpu_mps.conf finds)
        #[arg(long)]
        gpus: Option<u32>,
        /// GPU type for gres.conf and slurm.conf (default: under
        /// AutoDetect, the type Slurm gives each GPU from its NVML name;
        /// else TYPE)
        #[arg(long = "type")]
        gpu_type: Option<String>,
        /// GPUs of the node held whole, after the shared ones (TYPE:N, e.g.
        /// h100:2; repeat for several types)
        #[arg(long, value_name = "TYPE:N", value_parser = GpuGroup::parse)]
        whole: Vec<GpuGroup>,
        /// Slurm release the lines are for, as 24.11 (default: what
        /// `scontrol --version` says)
        #[arg(long, value_name = "MAJOR.MINOR", value_parser = installed::parse_release)]
        release: Option<(u32, u32)>,
        /// The node's gpu lines come from Slurm's AutoDetect=nvml: print
        /// only the mps lines, with the GPUs and types NVML gives, and
        /// check what `slurmd -G` reports (default: where the gres.conf
        /// beside slurm.conf sets AutoDetect for the node)
        #[arg(long)]
        autodetect: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("gpu-mps").chain(args.iter().copied()))
    }

    #[test]
    fn each_command_takes_only_its_own_flags() {
        Cli::command().debug_assert();
        assert!(matches!(
            parse(&["status", "--json"]).map(|c| c.command),
            Ok(Cmd::Status { json: true })
        ));
        assert!(matches!(
            parse(&["--conf", "/x", "gc", "--node", "n1"]).map(|c| (c.conf, c.node, c.command)),
            Ok((Some(_), Some(_), Cmd::Gc))
        ));
        // Before the command too, and for every command.
        assert!(matches!(
            parse(&["--node", "gpu05", "config", "--release", "24.11"]).map(|c| c.node),
            Ok(Some(n)) if n == "gpu05"
        ));
        assert!(matches!(
            parse(&["status", "--node", "gpu05"]).map(|c| c.node),
            Ok(Some(n)) if n == "gpu05"
        ));
        assert!(matches!(
            parse(&["config", "--gpus", "4", "--type", "a40"]).map(|c| c.command),
            Ok(Cmd::Config { gpus: Some(4), .. })
        ));
        assert!(matches!(
            parse(&["config", "--release", "24.11.5"]).map(|c| c.command),
            Ok(Cmd::Config {
                release: Some((24, 11)),
                gpu_type: None,
                autodetect: false,
                ..
            })
        ));
        assert!(matches!(
            parse(&["config", "--autodetect"]).map(|c| c.command),
            Ok(Cmd::Config {
                autodetect: true,
                ..
            })
        ));
        for bad in [
            &["status", "--gpus", "4"][..],
            &["gc", "--json"],
            &["config", "--gpus", "x"],
            &["config", "--release", "new"],
            &[],
            &["stat"],
        ] {
            assert_eq!(parse(bad).err().map(|e| e.exit_code()), Some(2), "{bad:?}");
        }
        assert_eq!(parse(&["--help"]).err().map(|e| e.exit_code()), Some(0));
    }
}
