//! Running an external program bounded in time (and, where asked, in the
//! size of its answer): the one command runner of gpushare.
//!
//! The prolog and epilog run while slurmd waits to start or end a job: a
//! program that never exits (a hung MPS control daemon, slurmctld not
//! answering squeue) must not hang the job start, nor a hung `scontrol`
//! an admin command. Each run here has a deadline; past it the program is
//! killed and the run is an error that says so.
//!
//! Output goes to unlinked temporary files, read back once the program
//! exited: `nvidia-cuda-mps-control -d` leaves a daemon that keeps its
//! output open, so reading a pipe to end-of-file would never end.

use std::fmt;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::process::{pidfd_open, Pid, PidfdFlags};

/// What a bounded run gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Why a bounded run gave nothing usable.
#[derive(Debug)]
pub enum RunError {
    /// The program could not be started.
    Spawn {
        program: String,
        source: std::io::Error,
    },
    /// Still running at the deadline; it was killed.
    TimedOut { program: String, after: Duration },
    /// Waiting for it failed.
    Wait {
        program: String,
        source: std::io::Error,
    },
    /// It wrote more than the caller reads: its answer is refused whole
    /// rather than read in part.
    TooLong { program: String, limit: u64 },
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Spawn { program, source } => write!(f, "cannot run {program}: {source}"),
            RunError::TimedOut { program, after } => write!(
                f,
                "{program} did not finish within {} s and was killed",
                after.as_secs_f32()
            ),
            RunError::Wait { program, source } => write!(f, "waiting for {program}: {source}"),
            RunError::TooLong { program, limit } => write!(
                f,
                "{program} wrote more than {} MiB, more than gpushare reads of it: nothing \
                 of its answer was used",
                limit >> 20
            ),
        }
    }
}

impl std::error::Error for RunError {}

/// What a program run by [`run`] may write to each of its outputs: a
/// control command's answer is a few lines.
pub const OUTPUT_LIMIT: u64 = 1 << 20;

/// Slurm's command `program` (`scontrol`, `squeue`: found as
/// [`slurm_command`](super::locations::slurm_command) finds it) with
/// `args`, within `timeout`: its output, or an error that names the
/// command line and what went wrong (its stderr where it failed).
pub fn slurm(program: &str, args: &[&str], timeout: Duration) -> Result<String, String> {
    program_at(&super::locations::slurm_command(program), args, timeout)
}

/// Runs the program at `path` with `args`, within `timeout`, as
/// [`slurm`] runs Slurm's: its output, or an error that names the command
/// line (the program by its name) and what went wrong.
pub fn program_at(
    path: &std::path::Path,
    args: &[&str],
    timeout: Duration,
) -> Result<String, String> {
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let shown = format!("{name} {}", args.join(" "));
    let mut cmd = Command::new(path);
    cmd.args(args);
    let ran = run(cmd, None, timeout).map_err(|e| format!("{shown}: {e}"))?;
    if ran.status.success() {
        return Ok(ran.stdout);
    }
    let stderr = ran.stderr.trim();
    Err(if stderr.is_empty() {
        format!("{shown}: {}", ran.status)
    } else {
        format!("{shown}: {stderr}")
    })
}

/// Runs `cmd` with `input` on its stdin, killing it after `timeout`; an
/// output over [`OUTPUT_LIMIT`] is an error.
pub fn run(cmd: Command, input: Option<&[u8]>, timeout: Duration) -> Result<Ran, RunError> {
    run_limited(cmd, input, timeout, OUTPUT_LIMIT)
}

/// [`run`] where each output may hold up to `limit` bytes (an answer of
/// Slurm's about every job of a cluster); more is an error, never a
/// truncated answer.
pub fn run_limited(
    cmd: Command,
    input: Option<&[u8]>,
    timeout: Duration,
    limit: u64,
) -> Result<Ran, RunError> {
    let mut waited = wait_bounded(cmd, input, timeout)?;
    let Some(status) = waited.status else {
        return Err(RunError::TimedOut {
            program: waited.program,
            after: timeout,
        });
    };
    waited.check(limit)?;
    Ok(Ran {
        status,
        stdout: read_back(&mut waited.out),
        stderr: read_back(&mut waited.err),
    })
}

/// [`run`] for a program whose answer is one whole record a line, of
/// which the first are enough (an array's records, one per task, the
/// first telling the array's QOS and throttle): the whole lines within the
/// first `limit` bytes of its output, however much more it wrote.
pub fn run_first_lines(cmd: Command, timeout: Duration, limit: u64) -> Result<Ran, RunError> {
    let mut waited = wait_bounded(cmd, None, timeout)?;
    let Some(status) = waited.status else {
        return Err(RunError::TimedOut {
            program: waited.program,
            after: timeout,
        });
    };
    let head = |file: &mut File| {
        let mut bytes = Vec::new();
        if file.seek(SeekFrom::Start(0)).is_ok() {
            let _ = file.take(limit).read_to_end(&mut bytes);
        }
        if u64::try_from(bytes.len()).is_ok_and(|n| n == limit) {
            let whole = bytes
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |at| at + 1);
            bytes.truncate(whole);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Ok(Ran {
        status,
        stdout: head(&mut waited.out),
        stderr: head(&mut waited.err),
    })
}

/// What a run of [`run_partial`] gave: all its program wrote, or what it
/// had written when it was killed at the deadline.
#[derive(Debug)]
pub struct Partial {
    /// `None`: still running at the deadline, and killed.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    /// Its pid.
    pub pid: u32,
    /// Killed, but not gone within 100 ms: stuck in the kernel (a hung
    /// driver call), left to init to reap.
    pub left_running: bool,
}

/// Runs `cmd` as [`run_limited`] does, but at the deadline keeps what the
/// program wrote so far: for a program that prints whole records as it
/// goes (one per GPU), of which those it finished are good.
pub fn run_partial(cmd: Command, timeout: Duration, limit: u64) -> Result<Partial, RunError> {
    let mut waited = wait_bounded(cmd, None, timeout)?;
    waited.check(limit)?;
    Ok(Partial {
        status: waited.status,
        stdout: read_back(&mut waited.out),
        stderr: read_back(&mut waited.err),
        pid: waited.pid,
        left_running: waited.left_running,
    })
}

/// A program run until it exited or its deadline, its outputs in files.
struct Waited {
    program: String,
    status: Option<ExitStatus>,
    out: File,
    err: File,
    pid: u32,
    left_running: bool,
}

impl Waited {
    /// An output over `limit` makes the whole run an error.
    fn check(&self, limit: u64) -> Result<(), RunError> {
        let too_long = |file: &File| file.metadata().is_ok_and(|m| m.len() > limit);
        if too_long(&self.out) || too_long(&self.err) {
            return Err(RunError::TooLong {
                program: self.program.clone(),
                limit,
            });
        }
        Ok(())
    }
}

/// Starts `cmd` with `input` on its stdin and waits for it to exit, or
/// kills it at `timeout` (its status then `None`).
fn wait_bounded(
    mut cmd: Command,
    input: Option<&[u8]>,
    timeout: Duration,
) -> Result<Waited, RunError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let spawn_error = |source| RunError::Spawn {
        program: program.clone(),
        source,
    };
    // Unlinked files, not pipes: see the module doc.
    let out = tempfile::tempfile().map_err(spawn_error)?;
    let err = tempfile::tempfile().map_err(spawn_error)?;
    let mut child = cmd
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(out.try_clone().map_err(spawn_error)?)
        .stderr(err.try_clone().map_err(spawn_error)?)
        .spawn()
        .map_err(spawn_error)?;
    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        // A program that does not read its input gets EPIPE here; its exit
        // status says what happened.
        let _ = stdin.write_all(bytes);
    }
    let deadline = Instant::now() + timeout;
    let pid = child.id();
    // The child's exit wakes the wait at once where the kernel gives a
    // pidfd (Linux 5.3 and later): a control command's end is seen the
    // moment it comes, not at the next look.
    let exit_fd = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok());
    // Without one, a short program (a control command) ends within a
    // millisecond or two: look often at first, then every 2 ms, so that
    // waiting for it adds little to the share's start.
    let mut pause = Duration::from_micros(100);
    let (status, left_running) = loop {
        match child.try_wait() {
            Ok(Some(status)) => break (Some(status), false),
            Ok(None) if Instant::now() >= deadline => break (None, !kill(&mut child)),
            // A wait the pidfd cannot give (an error other than a signal)
            // falls back to the pause: never a spin to the deadline.
            Ok(None) => {
                if !exit_fd.as_ref().is_some_and(|fd| until_exit(fd, deadline)) {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(2));
                }
            }
            Err(source) => {
                kill(&mut child);
                return Err(RunError::Wait { program, source });
            }
        }
    };
    Ok(Waited {
        program,
        status,
        out,
        err,
        pid,
        left_running,
    })
}

/// Waits until the process of `exit_fd` exits or `deadline` comes,
/// whichever is first (a signal may end the wait sooner: the caller looks
/// again); `false` where poll failed otherwise.
fn until_exit(exit_fd: &OwnedFd, deadline: Instant) -> bool {
    let left = deadline.saturating_duration_since(Instant::now());
    let timeout = Timespec {
        tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(left.subsec_nanos()),
    };
    let mut fds = [PollFd::new(exit_fd, PollFlags::IN)];
    matches!(
        poll(&mut fds, Some(&timeout)),
        Ok(_) | Err(rustix::io::Errno::INTR)
    )
}

/// Kills `child` and reaps it if it dies at once (within 100 ms): `true`;
/// one stuck in the kernel (a hung driver call ignores SIGKILL until it
/// returns) is left to be reaped by init, never waited for: `false`.
fn kill(child: &mut Child) -> bool {
    let _ = child.kill();
    for _ in 0..50 {
        if !matches!(child.try_wait(), Ok(None)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    false
}

/// What the program wrote (its size was checked).
fn read_back(file: &mut File) -> String {
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(0)).is_ok() {
        let _ = file.read_to_end(&mut bytes);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]);
        cmd
    }

    #[test]
    fn output_and_status_come_back() {
        let ran = run(
            sh("read x; echo out $x; echo err >&2; exit 3"),
            Some(b"in\n"),
            Duration::from_secs(10),
        );
        let ran = ran.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (ran.status.code(), ran.stdout.as_str(), ran.stderr.as_str()),
            (Some(3), "out in\n", "err\n")
        );
    }

    #[test]
    fn a_program_that_never_exits_is_killed_at_the_deadline() {
        let started = Instant::now();
        let error = run(sh("sleep 30"), None, Duration::from_millis(200)).err();
        assert!(
            matches!(error, Some(RunError::TimedOut { .. })),
            "{error:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(error
            .map(|e| e.to_string())
            .unwrap_or_default()
            .contains("was killed"));
    }

    #[test]
    fn a_daemon_keeping_the_pipe_open_does_not_hang_the_run() {
        // Like `nvidia-cuda-mps-control -d`: the parent exits, a child lives on.
        let started = Instant::now();
        let ran = run(
            sh("(sleep 5 &) ; echo started"),
            None,
            Duration::from_secs(4),
        );
        let ran = ran.unwrap_or_else(|e| panic!("{e}"));
        assert!(ran.status.success());
        assert!(started.elapsed() < Duration::from_secs(4));
    }

    #[test]
    fn an_answer_over_the_limit_is_refused_whole_never_cut() {
        let big = "head -c 3000 /dev/zero | tr '\\0' x";
        let ran = run_limited(sh(big), None, Duration::from_secs(10), 4096);
        assert_eq!(ran.map(|r| r.stdout.len()).ok(), Some(3000));
        let error = run_limited(sh(big), None, Duration::from_secs(10), 2048).err();
        assert!(
            matches!(error, Some(RunError::TooLong { limit: 2048, .. })),
            "{error:?}"
        );
        let on_stderr = run_limited(
            sh(&format!("{big} >&2")),
            None,
            Duration::from_secs(10),
            2048,
        );
        assert!(matches!(on_stderr, Err(RunError::TooLong { .. })));
    }

    #[test]
    fn a_partial_run_keeps_what_was_written_by_the_deadline() {
        let started = Instant::now();
        let cut = run_partial(
            sh("echo first; sleep 30; echo never"),
            Duration::from_millis(300),
            OUTPUT_LIMIT,
        );
        let cut = cut.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((cut.status, cut.stdout.as_str()), (None, "first\n"));
        assert!(!cut.left_running && cut.pid > 0);
        assert!(started.elapsed() < Duration::from_secs(10));
        let whole = run_partial(sh("echo all"), Duration::from_secs(10), OUTPUT_LIMIT);
        let whole = whole.unwrap_or_else(|e| panic!("{e}"));
        assert!(whole.status.is_some_and(|s| s.success()));
        assert_eq!(whole.stdout, "all\n");
    }

    #[test]
    fn a_missing_program_is_a_spawn_error() {
        let error = run(
            Command::new("/nonexistent/gpushare-test"),
            None,
            Duration::from_secs(1),
        )
        .err();
        assert!(matches!(error, Some(RunError::Spawn { .. })), "{error:?}");
    }

    #[test]
    fn only_the_whole_first_lines_are_read_of_a_long_answer() {
        let ran = run_first_lines(
            sh("i=0; while [ $i -lt 5000 ]; do echo record-$i; i=$((i+1)); done"),
            Duration::from_secs(20),
            100,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(ran.status.success());
        let lines: Vec<&str> = ran.stdout.lines().collect();
        assert_eq!(lines.first(), Some(&"record-0"));
        assert!(
            ran.stdout.ends_with('\n') && ran.stdout.len() <= 100,
            "{:?}",
            ran.stdout
        );
        assert!(lines.iter().all(|l| l.starts_with("record-")), "{lines:?}");
        // A short answer whole.
        let ran = run_first_lines(sh("printf 'a\\nb'"), Duration::from_secs(20), 100)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ran.stdout, "a\nb");
    }
}
