//! `gpu-qos`'s command line: its commands and options, parsed by `clap`
//! (the program itself is `src/bin/gpu-qos.rs`).

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use gpushare::qos::audit::FailOn;

/// The site's typed-GPU QOS, from gpushare's side (gpushare).
///
/// For every user: the group QOS they may use and the GPUs in use against
/// each limit (`usage`), why a pending job waits (`why`), whether their
/// jobs asked for the right share of a GPU (`advise`). For admins:
/// gpu_qos.conf, the policy of slurmctld's job_submit/gpu_qos plugin,
/// checked against the QOS in Slurm's accounting database (`check`) or
/// written from them (`generate`), the whole QOS design audited
/// (`audit`), the QOS metrics for Prometheus (`metrics`). Slurm's
/// commands (sacct, sacctmgr, scontrol, squeue, sprio, sshare) run from PATH
/// with the environment as it is (SLURM_CONF included). Exit status: 0
/// fine; 1 check found an error, or audit a finding at or above
/// --fail-on; 2 could not run (bad arguments, an invalid or unreadable
/// gpu_qos.conf, a Slurm command missing or failing); 3 metrics --write
/// has nowhere to write.
#[derive(Debug, Parser)]
#[command(name = "gpu-qos", version = env!("CARGO_PKG_VERSION"))]
pub struct Cli {
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// (admins) Check gpu_qos.conf against the QOS in Slurm's accounting
    ///
    /// (admins) Validate gpu_qos.conf and compare its rules with the QOS
    /// that `sacctmgr show qos` lists, its Account=/User= rules with the
    /// associations, its ExemptUsers= names with the associations' users:
    /// one line per finding (error,
    /// warning or note, then the QOS), then a summary. Exit status: 0
    /// consistent (warnings and notes allowed), 1 at least one error, 2
    /// could not check.
    Check {
        /// The file to check (default: gpu_qos.conf next to $SLURM_CONF, or
        /// /etc/slurm/gpu_qos.conf)
        #[arg(long, value_name = "PATH")]
        conf: Option<PathBuf>,
        /// Print the result as one JSON object on stdout
        #[arg(long)]
        json: bool,
    },
    /// (admins) Print a gpu_qos.conf made from the QOS's typed GPU limits
    ///
    /// (admins) Print a complete gpu_qos.conf derived from the QOS's typed
    /// GPU limits (GrpTRES gres/gpu:TYPE=N), the partitions' and
    /// associations' typed limits, and the Preempt lists. Exit status: 0
    /// printed, 2 could not read.
    Generate,
    /// (admins) Audit the site's whole typed-GPU QOS design
    ///
    /// (admins) Audit the site's whole typed-GPU QOS design: accounting enforcement
    /// and tracked TRES, gpu_qos.conf against the QOS, preemption and
    /// requeue, priority weights, GPU billing, DenyOnLimit, and the node
    /// half on MPS nodes. Reads `scontrol show config` (slurm.conf when
    /// slurmctld does not answer), `scontrol show node/partition`,
    /// `sacctmgr show qos`, plugstack.conf and cgroup.conf. Exit status:
    /// 0 clean, 1 findings at or above --fail-on, 2 could not read.
    Audit {
        /// gpu_qos.conf (default: next to slurm.conf)
        #[arg(long, value_name = "PATH")]
        conf: Option<PathBuf>,
        /// Print the report as one JSON object on stdout
        #[arg(long)]
        json: bool,
        /// The lowest severity that makes the audit fail (exit 1)
        #[arg(long, value_enum, default_value_t = FailOnArg::Error)]
        fail_on: FailOnArg,
        /// First tell the site's design in plain words: which QOS may use
        /// which GPU types up to how many, whom each may preempt and with
        /// what grace time, priority weights, fair-share cost per GPU type
        #[arg(long, conflicts_with = "json")]
        explain: bool,
        /// Print only the users' QOS table, in Markdown (exit 0, or 2);
        /// with --explain, the page a site links its users to: their QOS,
        /// why jobs wait, this site's priority weights, fair-share decay
        /// and cost per GPU type, preemption, the commands to use
        #[arg(long, conflicts_with = "json")]
        markdown: bool,
    },
    /// Your group QOS: the GPUs each holds against its limit, its jobs
    ///
    /// For you (any user): each group QOS you may use, the GPUs the group
    /// holds by type against its limit, its running and pending jobs, and
    /// why each pending job waits, in words. What only slurmdbd answers
    /// (the QOS you may use, Preempt lists, grace times) is kept for 60 s
    /// in ~/.cache/gpushare (as `why` does) and, when slurmdbd does not
    /// answer, used with a note of its age. Exit status: 0 told, 2 could
    /// not read.
    Usage {
        /// Only this QOS (group QOS or not)
        #[arg(long, value_name = "QOS")]
        qos: Option<String>,
        /// Print the report as one JSON object on stdout
        #[arg(long)]
        json: bool,
        /// Also explain each of your pending jobs, as `gpu-qos why` does
        /// (at most 20; their shared reads are made once)
        #[arg(long)]
        explain: bool,
    },
    /// Why a pending job waits, for whom, and until when
    ///
    /// Why a pending job waits (any user, for the jobs they may see): its
    /// reason in words, its priority factors against the site's weights and
    /// the one that holds it back, its fair share and GPU-hours, the jobs
    /// being preempted for it and when their grace time ends; for a wait
    /// on free GPUs, the jobs that hold them on each node it could run on,
    /// soonest end first, and when enough of them end, beside Slurm's
    /// estimate (GPUs of jobs PrivateData hides are counted); the command
    /// that shows more. Exit status: 0 told, 2 could not read the job.
    Why {
        /// The job id
        job: String,
        /// Print the report as one JSON object on stdout
        #[arg(long)]
        json: bool,
    },
    /// (admins) What gpu_qos.conf would have refused or changed, from sacct
    ///
    /// (admins) Run the plugin's policy over the jobs accounting recorded
    /// (`sacct -a -X`, every user) between --since and --until, and print
    /// how many it would have refused, changed (low-priority requeue and
    /// append mode, --exclusive=user, array throttle) or only warned about
    /// (Enforce=warn), by reason, rule, QOS and user; each reason with one
    /// job's command line (its SubmitLine as text, every control character
    /// written out: \x1b, \n) and the line to type instead (rebuilt from
    /// the job's record and options, each word quoted). A job's GPU
    /// request is read from its SubmitLine (sacct 21.08 and later), else
    /// from its requested TRES (ReqTRES), and the output says which;
    /// options given in a batch script's #SBATCH lines are not in
    /// SubmitLine. QOS, partition and account are those the job ran
    /// under; typed limits come from sacctmgr as they are today. sacct
    /// has 5 minutes to answer (about 100,000 jobs take 2 s); a window it
    /// cannot answer in that time, or wider than slurmdbd's
    /// MaxQueryTimeRange, is replayed in parts (--since, --until). Exit
    /// status: 0 replayed, 2 could not read.
    Replay {
        /// The earliest submission (any date sacct's -S takes:
        /// 2026-01-31, 2026-01-31T08:00, now-7days)
        #[arg(long, value_name = "DATE")]
        since: String,
        /// The latest (sacct's -E; default now)
        #[arg(long, value_name = "DATE")]
        until: Option<String>,
        /// The gpu_qos.conf to replay (default: next to slurm.conf); the
        /// one to be enabled, not necessarily the one in force
        #[arg(long, value_name = "PATH")]
        conf: Option<PathBuf>,
        /// Print the report as one JSON object on stdout
        #[arg(long)]
        json: bool,
    },
    /// Is my share the right size? Jobs whose GPU request did not fit their use
    ///
    /// For you (any user), about your jobs that ended; for root and
    /// SlurmUser, about every user's (--user names one). From what Slurm
    /// accounted (`sacct`), lists with the command line to use instead:
    /// jobs that held one GPU whole and would have fit a share of at most
    /// half a GPU (--gres=mps:N); shares whose use needs at most half of
    /// what they asked (a smaller N); shares that reached their memory
    /// limit (a larger N, or a whole GPU where the largest share allowed
    /// is not larger). Figures: gpushare's words in the job's
    /// AdminComment (written by the node at the job's end, per GPU: peak
    /// memory, memory limit, mean SM use, samples), else Slurm's own
    /// gres/gpumem (TRESUsageInMax) and gres/gpuutil (TRESUsageInAve), the
    /// largest of the job's steps, where slurm.conf gathers them
    /// (AutoDetect=nvml, AccountingStorageTRES=gres/gpu); a 0 of Slurm's
    /// on an mps job is unknown, never unused. A size is the smallest
    /// number of units that covers both the peak memory and the mean SM
    /// use with 25 % more: memory as a share's limit gives it
    /// (MemoryLimit=proportional: limit / units per unit; a whole GPU's
    /// memory over UnitsPerGPU), SM use as a fraction of the GPU; never
    /// more than MaxMPSPerJob of gpu_qos.conf nor one GPU. A share reached
    /// its limit when its peak is 95 % of it or more: at least one unit
    /// more. UnitsPerGPU is the one gpushare's words name (for a whole GPU,
    /// the most frequent among the shares listed), else 100. A whole GPU's
    /// memory, with Slurm's figures only, is what its type's name says
    /// (`..._20gb`, as decimal GB) or what gpushare's words of another job
    /// on that type report; else the job is not advised. No advice from
    /// fewer than 2 samples (Slurm's figures: a job under 2 minutes), nor
    /// for jobs that held several GPUs. The command line is rebuilt from
    /// the job's record (never its SubmitLine, which Slurm keeps
    /// unquoted): its command, the advised option, its partition, the QOS
    /// and reservation its line named, each word quoted for the shell; its
    /// other options and script are left to its user. The SubmitLine is
    /// shown as text, every control character written out (\x1b, \n). A
    /// share's line leaves out a --qos that
    /// gpu_qos.conf has a rule for (the plugin refuses shares there), and
    /// a note names the shared-GPU reservations where gpu_qos.conf has
    /// them. PrivateData is Slurm's: a user sees the jobs Slurm shows
    /// them. Exit status: 0 told, 2 could not read.
    Advise {
        /// The earliest job end or start to look at (sacct's -S:
        /// 2026-01-31, 2026-01-31T08:00, now-7days)
        #[arg(long, value_name = "DATE", default_value = "now-7days")]
        since: String,
        /// The latest (sacct's -E)
        #[arg(long, value_name = "DATE", default_value = "now")]
        until: String,
        /// Only this user's jobs (default: yours; everyone's for root and
        /// SlurmUser)
        #[arg(long, value_name = "USER")]
        user: Option<String>,
        /// Print the advice as one JSON object on stdout
        #[arg(long)]
        json: bool,
    },
    /// (admins) Metrics of the group QOS for Prometheus
    ///
    /// (admins) Metrics of the group QOS for Prometheus (the controller's
    /// node_exporter textfile collector): GPUs in use by type against
    /// each GrpTRES limit, pending jobs by reason. Two calls to slurmctld:
    /// `scontrol show assoc_mgr flags=qos` and `squeue -t PENDING`. Exit
    /// status: 0 written; 2 could not read or write; 3 nowhere to write
    /// (--write without FILE: gpu_qos.conf names no MetricsFile=, or its
    /// directory does not exist; one line says which).
    Metrics {
        /// Write FILE atomically (a `*.prom` file) instead of printing;
        /// without FILE, `gpushare_qos.prom` beside the plugin's
        /// MetricsFile= of gpu_qos.conf (node_exporter's textfile
        /// directory, named once), as the timer does
        #[arg(long, value_name = "FILE", num_args = 0..=1)]
        write: Option<Option<PathBuf>>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FailOnArg {
    Error,
    Warning,
    Note,
}

impl From<FailOnArg> for FailOn {
    fn from(a: FailOnArg) -> Self {
        match a {
            FailOnArg::Error => FailOn::Error,
            FailOnArg::Warning => FailOn::Warning,
            FailOnArg::Note => FailOn::Note,
        }
    }
}

/// What `audit` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuditView {
    Table,
    Json,
    Explain,
    Markdown,
    UserPage,
}

impl AuditView {
    /// The view `audit`'s flags ask for.
    pub fn of(json: bool, explain: bool, markdown: bool) -> Self {
        if json {
            AuditView::Json
        } else if markdown && explain {
            AuditView::UserPage
        } else if markdown {
            AuditView::Markdown
        } else if explain {
            AuditView::Explain
        } else {
            AuditView::Table
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use std::path::Path;

    fn parse(args: &[&str]) -> Result<Cmd, clap::Error> {
        Cli::try_parse_from(std::iter::once("gpu-qos").chain(args.iter().copied()))
            .map(|c| c.command)
    }

    #[test]
    fn commands_options_and_misuse() {
        Cli::command().debug_assert();
        assert!(matches!(
            parse(&["check"]),
            Ok(Cmd::Check {
                conf: None,
                json: false
            })
        ));
        assert!(matches!(
            parse(&["check", "--json", "--conf", "/x/gpu_qos.conf"]),
            Ok(Cmd::Check { conf: Some(p), json: true }) if p == Path::new("/x/gpu_qos.conf")
        ));
        assert!(matches!(
            parse(&["check", "--conf=/y"]),
            Ok(Cmd::Check { conf: Some(_), .. })
        ));
        assert!(matches!(parse(&["generate"]), Ok(Cmd::Generate)));
        assert!(matches!(
            parse(&["usage", "--qos", "qos_lafferty", "--json"]),
            Ok(Cmd::Usage { qos: Some(q), json: true, explain: false }) if q == "qos_lafferty"
        ));
        assert!(matches!(
            parse(&["usage", "--explain"]),
            Ok(Cmd::Usage {
                qos: None,
                json: false,
                explain: true
            })
        ));
        assert!(matches!(
            parse(&["audit", "--explain", "--markdown"]),
            Ok(Cmd::Audit {
                explain: true,
                markdown: true,
                ..
            })
        ));
        assert!(matches!(
            parse(&["why", "4242_3", "--json"]),
            Ok(Cmd::Why { job, json: true }) if job == "4242_3"
        ));
        assert!(parse(&["why"]).is_err(), "why needs a job id");
        assert!(matches!(
            parse(&["audit"]),
            Ok(Cmd::Audit {
                conf: None,
                json: false,
                fail_on: FailOnArg::Error,
                explain: false,
                markdown: false,
            })
        ));
        assert!(matches!(
            parse(&["audit", "--json", "--fail-on", "note"]),
            Ok(Cmd::Audit {
                json: true,
                fail_on: FailOnArg::Note,
                ..
            })
        ));
        for bad in [
            &[][..],
            &["chek"],
            &["check", "--conf"],
            &["check", "extra"],
            &["generate", "--json"],
            &["audit", "--fail-on", "never"],
            &["audit", "--json", "--markdown"],
            &["audit", "--explain", "--json"],
            &["usage", "--qos"],
        ] {
            let e = parse(bad).err().map(|e| e.exit_code());
            assert_eq!(e, Some(2), "{bad:?}");
        }
        assert_eq!(parse(&["--version"]).err().map(|e| e.exit_code()), Some(0));
        assert_eq!(
            parse(&["check", "--help"]).err().map(|e| e.exit_code()),
            Some(0)
        );
    }
}
