//! Logging of the node programs (`gpu-mps-prolog`, `gpu-mps-epilog`).
//!
//! slurmd runs them for every job and keeps nothing they print unless they
//! fail, so their record goes to syslog (journald on systemd nodes), under
//! their own program name, facility `daemon`, with the job id in every
//! line: `journalctl -t gpu-mps-prolog` or `grep gpu-mps /var/log/syslog`.
//! Every line also goes to stderr, which slurmd logs when the program
//! fails. Where the node has no syslog socket, stderr is all there is, and
//! the first line says so.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use gpushare::mps::config::DEFAULT_SYSLOG_SOCKET;
use log::{Level, LevelFilter, Log, Metadata, Record};
use syslog::{Facility, Formatter3164, Logger, LoggerBackend};

struct NodeLogger {
    prefix: String,
    syslog: Mutex<Option<Logger<LoggerBackend, Formatter3164>>>,
}

impl Log for NodeLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= Level::Info
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let line = format!("{}{}", self.prefix, record.args());
        let _ = writeln!(std::io::stderr(), "{line}");
        let mut syslog = self
            .syslog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(logger) = syslog.as_mut() {
            let sent = match record.level() {
                Level::Error => logger.err(&line),
                Level::Warn => logger.warning(&line),
                _ => logger.info(&line),
            };
            if sent.is_err() {
                // The socket went away (syslog restarted): stderr only now.
                *syslog = None;
            }
        }
    }

    fn flush(&self) {}
}

/// Installs the logger for `program` handling `job` (`None` before the job
/// is known). `socket`: syslog's socket (default: gpu_mps.conf's
/// `SyslogSocket=` default, [`DEFAULT_SYSLOG_SOCKET`]).
/// Calling it twice keeps the first logger.
pub fn init(program: &str, job: Option<u32>, socket: Option<&Path>) {
    let path: PathBuf =
        socket.map_or_else(|| PathBuf::from(DEFAULT_SYSLOG_SOCKET), Path::to_path_buf);
    let formatter = Formatter3164 {
        facility: Facility::LOG_DAEMON,
        hostname: None,
        process: program.to_owned(),
        pid: std::process::id(),
    };
    let syslog = syslog::unix_custom(formatter, &path).ok();
    let missing = syslog.is_none();
    let logger = NodeLogger {
        prefix: job.map_or_else(String::new, |j| format!("job {j}: ")),
        syslog: Mutex::new(syslog),
    };
    if log::set_boxed_logger(Box::new(logger)).is_ok() {
        log::set_max_level(LevelFilter::Info);
        if missing {
            log::warn!(
                "no syslog socket at {}: logging to stderr only (slurmd keeps it only when {program} fails)",
                path.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;

    #[test]
    fn lines_reach_syslog_under_the_program_name_with_the_job() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("log.sock");
        let server = UnixDatagram::bind(&path).unwrap_or_else(|e| panic!("{e}"));
        server
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap_or_else(|e| panic!("{e}"));
        init("gpu-mps-prolog", Some(42), Some(&path));
        log::info!("placed 50 units on GPU 1");
        let mut buf = [0u8; 2048];
        let n = server.recv(&mut buf).unwrap_or_else(|e| panic!("{e}"));
        let got = String::from_utf8_lossy(buf.get(..n).unwrap_or_default()).into_owned();
        // <30> = facility daemon (3) * 8 + severity info (6).
        assert!(got.starts_with("<30>"), "{got}");
        assert!(got.contains("gpu-mps-prolog["), "{got}");
        assert!(got.ends_with("job 42: placed 50 units on GPU 1"), "{got}");
    }
}
