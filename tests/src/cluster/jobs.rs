//! Submitting jobs, waiting on them and reading their state.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use gpushare::shared::calendar::stamp_seconds;

use super::{wait_for, write, Cluster, PARTITION};
use crate::time::{JOB_END, JOB_LONG};
use crate::Result;

/// What `scontrol show job` says about a job.
#[derive(Debug, Clone, Default)]
pub struct JobInfo {
    pub fields: BTreeMap<String, String>,
}

impl JobInfo {
    /// The `Key=Value` words of `scontrol -o show job`, each key's first.
    pub fn parse(text: &str) -> Self {
        let mut info = JobInfo::default();
        for (k, v) in text.split_whitespace().filter_map(|w| w.split_once('=')) {
            info.fields
                .entry(k.to_owned())
                .or_insert_with(|| v.to_owned());
        }
        info
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }
    /// A TRES request field (`TresPerNode`, `TresPerJob`, ...) spelt the
    /// same on every release: 22.05 writes `gres:gpu:a40:2`, later releases
    /// `gres/gpu:a40:2`.
    pub fn tres_request(&self, key: &str) -> Option<String> {
        self.get(key).map(|v| v.replace("gres/", "gres:"))
    }
    /// The job's TRES: pending jobs show what they ask (`ReqTRES` from
    /// 23.02, `TRES` before), running ones what they hold.
    pub fn tres(&self) -> &str {
        match self.get("ReqTRES") {
            None | Some("") => self.get("TRES").unwrap_or_default(),
            Some(req) => req,
        }
    }
    /// `JobState`, e.g. `RUNNING`.
    pub fn state(&self) -> &str {
        self.get("JobState").unwrap_or("")
    }
    /// The states of a job that has ended, successfully or not.
    pub const DONE: &'static [&'static str] = &[
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
    ];
    /// Whether the job has ended ([`Self::DONE`]).
    pub fn is_done(&self) -> bool {
        Self::DONE.contains(&self.state())
    }
    /// Number of times the job was requeued.
    pub fn restarts(&self) -> u32 {
        self.get("Restarts")
            .and_then(|r| r.parse().ok())
            .unwrap_or(0)
    }
}

impl Cluster {
    /// `sbatch --parsable ARGS`: the job id, or sbatch's stderr as the error.
    pub fn sbatch(&self, args: &[&str]) -> std::result::Result<u32, String> {
        let mut full = vec!["--parsable"];
        let default_out = format!("--output={}/%j.out", self.jobs_dir.display());
        if !args
            .iter()
            .any(|a| a.starts_with("--output") || a.starts_with("-o"))
        {
            full.push(&default_out);
        }
        full.extend_from_slice(args);
        let out = self.run("sbatch", &full)?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            return Err(stderr);
        }
        stdout
            .trim()
            .split(';')
            .next()
            .and_then(|id| id.parse().ok())
            .ok_or_else(|| format!("sbatch printed no job id: {stdout:?} {stderr}"))
    }

    /// `sbatch` that must succeed.
    pub fn sbatch_ok(&self, args: &[&str]) -> Result<u32> {
        self.sbatch(args)
            .map_err(|e| format!("sbatch {} was rejected: {e}", args.join(" ")))
    }

    /// `srun ARGS` with a time limit; returns the whole output.
    pub fn srun(&self, args: &[&str]) -> Result<Output> {
        let limit = JOB_LONG.scaled_secs().to_string();
        self.run("timeout", &[&[limit.as_str(), "srun"], args].concat())
    }

    /// Whether job `id` waits again and is kept off `node` (its
    /// `ExcNodeList`): a share refused there and requeued by gpushare's
    /// epilog to run elsewhere.
    pub fn sent_off(&self, id: u32, node: &str) -> bool {
        self.job(id)
            .is_ok_and(|i| i.state() == "PENDING" && i.get("ExcNodeList") == Some(node))
    }

    /// Waits until job `id` is [`Self::sent_off`] `node`.
    pub fn wait_sent_off(&self, id: u32, node: &str, timeout: impl Into<Duration>) -> Result<()> {
        wait_for(&format!("job {id} to be sent off {node}"), timeout, || {
            self.sent_off(id, node).then_some(())
        })
    }

    /// `scontrol show job ID`, parsed (a heterogeneous job's or an
    /// array's records read as one: each key's first value).
    pub fn job(&self, id: u32) -> Result<JobInfo> {
        let text = self.run_ok("scontrol", &["-o", "show", "job", &id.to_string()])?;
        Ok(JobInfo::parse(&text))
    }

    /// `scontrol -o show job ID`, each record (a heterogeneous job's
    /// components, an array's tasks) parsed on its own.
    pub fn job_records(&self, id: u32) -> Result<Vec<JobInfo>> {
        let text = self.run_ok("scontrol", &["-o", "show", "job", &id.to_string()])?;
        Ok(text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(JobInfo::parse)
            .collect())
    }

    /// Waits until the job's state is one of `states`.
    pub fn wait_job_state(
        &self,
        id: u32,
        states: &[&str],
        timeout: impl Into<Duration>,
    ) -> Result<JobInfo> {
        let mut last = String::new();
        wait_for(&format!("job {id} to reach {states:?}"), timeout, || {
            let info = self.job(id).ok()?;
            last = info.state().to_owned();
            states.contains(&info.state()).then_some(info)
        })
        .map_err(|e| format!("{e} (last state {last:?})"))
    }

    /// Waits until the pending job's reason is `reason`.
    pub fn wait_job_reason(
        &self,
        id: u32,
        reason: &str,
        timeout: impl Into<Duration>,
    ) -> Result<JobInfo> {
        let mut last = String::new();
        wait_for(&format!("job {id} to wait for {reason}"), timeout, || {
            let info = self.job(id).ok()?;
            info.get("Reason").unwrap_or_default().clone_into(&mut last);
            (last == reason).then_some(info)
        })
        .map_err(|e| format!("{e} (last reason {last:?})"))
    }

    /// Waits until slurmctld has considered pending job `id` in a
    /// scheduling pass at least [`CONSIDERED_AFTER`] after its submission
    /// (`LastSchedEval` against `SubmitTime`) and given it a reason, or
    /// the job has left PENDING. A job that could start would have
    /// started by then: a test that shows a job held waits for this, not
    /// for a fixed time. A pass may stamp `LastSchedEval` and leave
    /// `Reason=None` (the main scheduler stamps a job before checks that
    /// can end the pass, such as its time budget); a later pass, or
    /// backfill's, gives the reason.
    pub fn wait_considered(&self, id: u32, timeout: impl Into<Duration>) -> Result<JobInfo> {
        let mut last = String::new();
        wait_for(
            &format!("slurmctld to consider job {id} after its submission"),
            timeout,
            || {
                let info = self.job(id).ok()?;
                let submit = info.get("SubmitTime").and_then(stamp_seconds);
                let eval = info.get("LastSchedEval").and_then(stamp_seconds);
                let reason = info.get("Reason").unwrap_or("None");
                last = format!(
                    "{} Reason={reason} SubmitTime={:?} LastSchedEval={:?}",
                    info.state(),
                    info.get("SubmitTime"),
                    info.get("LastSchedEval")
                );
                let considered = reason != "None"
                    && matches!((submit, eval),
                        (Some(s), Some(e)) if e >= s + CONSIDERED_AFTER);
                (considered || info.state() != "PENDING").then_some(info)
            },
        )
        .map_err(|e| format!("{e} (last: {last})"))
    }

    /// Waits until the job has finished, successfully or not.
    pub fn wait_job_done(&self, id: u32, timeout: impl Into<Duration>) -> Result<JobInfo> {
        self.wait_job_state(id, JobInfo::DONE, timeout)
    }

    /// `ArrayTaskThrottle` of array job `id` where Slurm prints it: before
    /// `JobName=` (a job's name may hold the word itself) in the one
    /// record that carries it, the array's pending tasks (a task split
    /// off, running or updated alone, has none, and may come first);
    /// every record is read. Empty where none has it (no throttle).
    pub fn array_throttle(&self, id: u32) -> Result<String> {
        let shown = self.run_ok("scontrol", &["-o", "show", "job", &id.to_string()])?;
        Ok(shown
            .lines()
            .find_map(|line| {
                line.split(" JobName=")
                    .next()?
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("ArrayTaskThrottle="))
            })
            .unwrap_or_default()
            .to_owned())
    }

    /// Waits until slurmctld has handed slurmdbd every accounting message
    /// it queued (`sdiag`: "DBD Agent queue size: 0"). A job state
    /// slurmctld reached before this call is then what `sacct` reads: a
    /// job's last run is in accounting, not only an earlier one's end.
    pub fn wait_accounting_sent(&self, timeout: impl Into<Duration>) -> Result<()> {
        let mut last = String::new();
        wait_for("slurmctld's queue to slurmdbd to empty", timeout, || {
            let out = self.run_ok("sdiag", &[]).ok()?;
            last = out
                .lines()
                .find(|l| l.starts_with("DBD Agent queue size:"))
                .unwrap_or("no \"DBD Agent queue size\" line in sdiag")
                .to_owned();
            (last.split(':').nth(1).map(str::trim) == Some("0")).then_some(())
        })
        .map_err(|e| format!("{e} (last: {last})"))
    }

    /// Output file of a batch job submitted with the default `--output`.
    pub fn job_output(&self, id: u32) -> String {
        fs::read_to_string(self.jobs_dir.join(format!("{id}.out"))).unwrap_or_default()
    }

    /// Cancels every job and waits for them to leave the node.
    pub fn cancel_all(&self) -> Result<()> {
        // Every user's jobs: attack tests run jobs as other users.
        self.run_ok("scancel", &["--full", "--partition", PARTITION])?;
        wait_for("all jobs to end", JOB_END, || {
            let out = self
                .run(
                    "squeue",
                    &[
                        "-h",
                        "-t",
                        "RUNNING,COMPLETING,PENDING,CONFIGURING",
                        "-o",
                        "%i",
                    ],
                )
                .ok()?;
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .is_empty()
                .then_some(())
        })
    }

    /// Creates a reservation on the node for root, starting now.
    pub fn create_reservation(&self, name: &str, minutes: u32) -> Result<()> {
        self.run_ok(
            "scontrol",
            &[
                "create",
                "reservation",
                &format!("ReservationName={name}"),
                "Users=root",
                &format!("Nodes={}", self.node_names().join(",")),
                "StartTime=now",
                &format!("Duration={minutes}"),
                "Flags=ignore_jobs",
            ],
        )
        .map(drop)
    }

    /// Writes a script that prints `dev<i>=<error>` for each GPU device
    /// file, the error of opening it shortened to `No_such_device_or_address`
    /// (the device cgroup allows it; no driver behind the fake device) or
    /// `Operation_not_permitted` (the cgroup denies it), all on one line.
    pub fn write_device_probe(&self) -> Result<PathBuf> {
        let gpus = self.total_gpus();
        let path = self.dir.join("probe.sh");
        let text = format!(
            "#!/bin/sh\nfor i in $(seq 0 {last}); do r=$( (cat {dev}/nvidia$i >/dev/null) 2>&1 | sed 's/.*: //; s/ /_/g'); printf 'dev%s=%s ' $i \"$r\"; done; echo\n",
            last = gpus.saturating_sub(1),
            dev = self.dir.join("dev").display()
        );
        write(&path, &text, 0o755)?;
        Ok(path)
    }
}

/// How long after a job's submission a scheduling pass must have looked
/// at it for [`Cluster::wait_considered`], in seconds: later than the
/// attempt slurmctld makes at submission, in the same or the next second.
pub const CONSIDERED_AFTER: i64 = 2;
