//! A share's step ending: its MPS clients ended through the control daemon
//! before Slurm kills them.
//!
//! On a real GPU (an H200, driver 580) a client killed while its kernels
//! run makes the MPS server tear down the GPU's context for every client:
//! the other shares on that GPU fail with `CUDA_ERROR_ILLEGAL_ADDRESS`.
//! NVIDIA's way to end one client without harming the others is the
//! control daemon's `terminate_client`. Slurm offers no hook between its
//! SIGTERM and its SIGKILL, but slurmstepd calls SPANK's `task_exit` for
//! each task it reaps and only after the step's last task kills what the
//! step left (`job_manager`: the tasks waited for, then
//! `proctrack_g_signal(SIGKILL)`): the batch shell that SIGTERM ended,
//! with its CUDA program still running, is the common case of `scancel`,
//! a time limit and a preemption. There, the step's clients that are still
//! alive are terminated first ([`terminate_left`]), so the SIGKILL that
//! follows finds no work in flight.
//!
//! Which processes are the step's: those in the step's cgroup, read from
//! a task's `/proc/<pid>/cgroup` when it started ([`StepCgroup::of_task`]):
//! each hierarchy's path up to its `step_*` directory, on cgroup v1 and v2
//! and whatever names the job's directory (`job_<id>`, a SLUID).

use std::fs;
use std::time::Duration;

use crate::mps::config::GpuMpsConfig;
use crate::mps::daemon::{self, Terminated};

/// How long a step's end may spend ending its clients: slurmstepd waits,
/// and the job's end with it.
pub const STEP_END_BUDGET: Duration = Duration::from_secs(3);

/// A step's cgroup: per hierarchy (its `/proc/<pid>/cgroup` number), the
/// path of the step's directory.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StepCgroup {
    paths: Vec<(String, String)>,
}

impl StepCgroup {
    /// The step of a task whose `/proc/<pid>/cgroup` reads `text`: each
    /// line's path cut after its `step_*` component; `None` where no line
    /// has one (a task outside Slurm's step cgroups).
    pub fn of_task(text: &str) -> Option<Self> {
        let paths: Vec<(String, String)> = text
            .lines()
            .filter_map(|line| {
                let (hierarchy, rest) = line.split_once(':')?;
                let (_, path) = rest.split_once(':')?;
                let mut kept = Vec::new();
                for part in path.split('/') {
                    kept.push(part);
                    if part.starts_with("step_") {
                        return Some((hierarchy.to_owned(), kept.join("/")));
                    }
                }
                None
            })
            .collect();
        (!paths.is_empty()).then_some(Self { paths })
    }

    /// Whether a process whose `/proc/<pid>/cgroup` reads `text` is in
    /// this step (in its directory or below, in any hierarchy).
    pub fn holds(&self, text: &str) -> bool {
        text.lines().any(|line| {
            let Some((hierarchy, rest)) = line.split_once(':') else {
                return false;
            };
            let Some((_, path)) = rest.split_once(':') else {
                return false;
            };
            self.paths.iter().any(|(h, step)| {
                h == hierarchy
                    && path
                        .strip_prefix(step.as_str())
                        .is_some_and(|below| below.is_empty() || below.starts_with('/'))
            })
        })
    }

    /// Whether live process `pid` is in this step.
    pub fn holds_pid(&self, pid: u32) -> bool {
        fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|t| self.holds(&t))
    }

    /// Whether any process but `except` (slurmstepd itself) is left in the
    /// step: none, and no client can be.
    pub fn anyone_left(&self, except: u32) -> bool {
        let Ok(entries) = fs::read_dir("/proc") else {
            return true;
        };
        entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .any(|pid| pid != except && self.holds_pid(pid))
    }
}

/// Ends, through GPU `gpu`'s daemon, the MPS clients still alive in
/// `step` (slurmstepd, `stepd`, excepted): called after the step's last
/// task was reaped, before slurmstepd kills what is left. Nothing is asked
/// where nothing is left.
pub fn terminate_left(cfg: &GpuMpsConfig, gpu: u32, step: &StepCgroup, stepd: u32) -> Terminated {
    if !step.anyone_left(stepd) {
        return Terminated::default();
    }
    terminate_in_step(cfg, gpu, step, stepd, STEP_END_BUDGET)
}

/// Ends, through GPU `gpu`'s daemon within `budget`, the MPS clients in
/// `step` but `except` (slurmstepd, or the step's guard itself).
pub fn terminate_in_step(
    cfg: &GpuMpsConfig,
    gpu: u32,
    step: &StepCgroup,
    except: u32,
    budget: Duration,
) -> Terminated {
    daemon::terminate_clients_where(cfg, gpu, budget, |client| {
        client != except && step.holds_pid(client)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_each_hierarchys_path_to_its_step_directory() {
        let v2 = "0::/system.slice/slurmstepd.scope/job_42/step_batch/user/task_0\n";
        let step = StepCgroup::of_task(v2).unwrap_or_else(|| panic!("no step in {v2}"));
        assert!(step.holds("0::/system.slice/slurmstepd.scope/job_42/step_batch/user/task_0\n"));
        assert!(step.holds("0::/system.slice/slurmstepd.scope/job_42/step_batch\n"));
        assert!(!step.holds("0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n"));
        assert!(!step.holds("0::/system.slice/slurmstepd.scope/job_42/step_batchx/user\n"));
        assert!(!step.holds("0::/system.slice/slurmstepd.scope/job_43/step_batch/user\n"));
        // cgroup v1: the freezer and devices hierarchies name the step.
        let v1 = "12:freezer:/slurm/uid_0/job_7/step_0\n\
                  5:devices:/slurm/uid_0/job_7/step_0/task_1\n\
                  3:memory:/slurm/uid_0/job_7\n";
        let step = StepCgroup::of_task(v1).unwrap_or_else(|| panic!("no step in {v1}"));
        assert!(step.holds("12:freezer:/slurm/uid_0/job_7/step_0\n"));
        assert!(step.holds("5:devices:/slurm/uid_0/job_7/step_0/task_3\n"));
        assert!(!step.holds("12:freezer:/slurm/uid_0/job_7/step_1\n"));
        assert!(!step.holds("3:memory:/slurm/uid_0/job_7\n"));
        // A SLUID names the job's directory on 26.05's cgroup/v2.
        let sluid = "0::/slurmstepd.scope/sBE2MZ5G6VBS/step_0/user/task_0\n";
        assert!(StepCgroup::of_task(sluid).is_some_and(|s| s.holds(sluid)));
        assert_eq!(
            StepCgroup::of_task("0::/user.slice/session-1.scope\n"),
            None
        );
        assert_eq!(StepCgroup::of_task("garbage"), None);
    }
}
