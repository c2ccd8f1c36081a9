//! How long the harness and the suites wait, by what they wait for.
//!
//! Every timeout is a [`Timeout`] named here (or, for a wait of one test's
//! own, a `Timeout` constant named in its suite), and each is multiplied by
//! **`GPUSHARE_TEST_TIME_SCALE`**: a positive number, `1` when unset. A slow
//! or loaded machine (a release root under emulation, a CI runner beside a
//! bench) runs the suites with `GPUSHARE_TEST_TIME_SCALE=3`; nothing else
//! changes. It is read once, when the first suite or cluster starts; a value
//! that is not a positive number stops the run there with a message, rather
//! than silently running at 1.
//!
//! Poll intervals ([`POLL`], [`EXIT_POLL`], [`SOCKET_POLL`]) are how often a
//! loop looks, not how long it may wait: they are not scaled.
//!
//! A timeout bounds a wait for something that will happen; it never proves
//! that something did not happen. To show that, wait for a positive state
//! of Slurm's that implies it would have happened by then (a scheduling
//! pass that considered the job, a later job started, a log line).

use std::sync::OnceLock;
use std::time::Duration;

/// The environment variable that scales every [`Timeout`].
pub const SCALE_VAR: &str = "GPUSHARE_TEST_TIME_SCALE";

/// How often a wait looks again (Slurm commands, files, sockets).
pub const POLL: Duration = Duration::from_millis(100);
/// How often a stopping process is checked for having exited.
pub const EXIT_POLL: Duration = Duration::from_millis(50);
/// How often the syslog receiver checks that its socket file still exists.
pub const SOCKET_POLL: Duration = Duration::from_millis(500);

/// What the test has just caused shows where it looks: a file, a job's
/// output, a log or syslog line, a ledger record, a process gone,
/// slurmctld seeing a change it was told of.
pub const SHORT: Timeout = Timeout::secs(30);
/// A job just submitted is accepted or running (one or two scheduler
/// passes, `sched_interval=2`, and its prolog).
pub const JOB_START: Timeout = Timeout::secs(60);
/// A job ends, or every job ends once cancelled, its epilog run.
pub const JOB_END: Timeout = Timeout::secs(60);
/// A job's start or end that waits on more than one scheduler pass: after
/// a preemption's grace time, a requeue, an epilog sending it elsewhere, a
/// node program's own deadline, other jobs ahead of it; an `srun` from
/// submission to its end.
pub const JOB_LONG: Timeout = Timeout::secs(120);
/// A node reaches a state Slurm decides on: DOWN once silent for
/// `SlurmdTimeout`, back up, drained.
pub const NODE_STATE: Timeout = Timeout::secs(120);
/// A daemon started serves: munged's socket, MariaDB's and slurmdbd's
/// ports (slurmdbd makes its tables), slurmctld answering, every node up,
/// Prometheus scraping.
pub const DAEMON_START: Timeout = Timeout::secs(120);
/// A daemon stops after SIGTERM (slurmctld saving its state) before it is
/// killed; processes left marked are killed until gone.
pub const DAEMON_STOP: Timeout = Timeout::secs(30);

/// A timeout before scaling: `Timeout::secs(60)` waits 60 s at scale 1.
/// Becomes a [`Duration`] scaled by [`SCALE_VAR`] (`.into()`, or any
/// harness wait that takes `impl Into<Duration>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timeout(Duration);

impl Timeout {
    /// `seconds` at scale 1.
    pub const fn secs(seconds: u64) -> Self {
        Self(Duration::from_secs(seconds))
    }

    /// The timeout at this run's scale.
    pub fn scaled(self) -> Duration {
        self.0.mul_f64(scale())
    }

    /// Whole seconds at this run's scale, for a command's own limit
    /// (`timeout N srun ...`); at least 1.
    pub fn scaled_secs(self) -> u64 {
        self.scaled().as_secs().max(1)
    }
}

impl From<Timeout> for Duration {
    fn from(t: Timeout) -> Duration {
        t.scaled()
    }
}

/// This run's [`SCALE_VAR`], read once. Panics with the reason on a value
/// that is not a positive number.
pub fn scale() -> f64 {
    static SCALE: OnceLock<f64> = OnceLock::new();
    *SCALE.get_or_init(|| {
        let raw = std::env::var(SCALE_VAR).ok();
        match parse_scale(raw.as_deref()) {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        }
    })
}

/// The scale `raw` ([`SCALE_VAR`]'s value, if set) gives, or what is wrong
/// with it.
pub fn parse_scale(raw: Option<&str>) -> Result<f64, String> {
    let Some(raw) = raw else {
        return Ok(1.0);
    };
    match raw.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 => Ok(s),
        _ => Err(format!(
            "{SCALE_VAR}={raw:?} is not a positive number: it multiplies every test timeout (e.g. {SCALE_VAR}=2.5); unset it for 1"
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn unset_is_one() {
        assert_eq!(parse_scale(None), Ok(1.0));
    }

    #[test]
    fn a_positive_number_is_taken() {
        assert_eq!(parse_scale(Some("2.5")), Ok(2.5));
        assert_eq!(parse_scale(Some(" 3 ")), Ok(3.0));
        assert_eq!(parse_scale(Some("0.5")), Ok(0.5));
    }

    #[test]
    fn anything_else_is_refused_with_the_variable_named() {
        for bad in ["", "fast", "0", "-1", "inf", "NaN", "2x"] {
            let e = parse_scale(Some(bad)).expect_err(bad);
            assert!(e.contains(SCALE_VAR) && e.contains("positive"), "{e}");
        }
    }
}
