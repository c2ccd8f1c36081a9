//! Every read of Slurm that `gpu-qos` makes, each a typed [`Query`]: the
//! program, its arguments and a stable name for its recorded answer,
//! written once in the module of its kind of read beside the parser of
//! its answer.
//!
//! What reads them is a [`SlurmRead`]: [`Live`] runs the commands
//! (bounded in time and size, each answer once per run), [`Recorded`]
//! answers from files recorded on a real cluster, one set per Slurm
//! release (`tests/fixtures/slurm/RELEASE/KEY.txt`), so that what gpu-qos
//! decides from Slurm's answers is tested against each release's words.
//! This room is the only part of the QOS half that runs commands.
//!
//! - [`job`]: one job (`squeue -j`).
//! - [`jobs`]: jobs by user, state or partition (`squeue`), one format and
//!   one parser for every squeue read.
//! - [`priority`]: priority factors and weights (`sprio`).
//! - [`shares`]: an association's fair share (`sshare`).
//! - [`runs`]: the runs of a requeued job (`sacct -D`).
//! - [`assoc_mgr`]: slurmctld's association manager (`scontrol show
//!   assoc_mgr`): QOS and account usage, who has jobs in a QOS.
//! - [`config`]: `scontrol show config`.
//! - [`nodes`]: `scontrol show node`.
//! - [`partitions`]: `scontrol show partition`.
//! - [`qos`]: the accounting database's QOS and associations (`sacctmgr`).
//! - [`qos_lists`]: running jobs that asked for a list of QOS (`sacct`).
//! - [`accounted`]: the jobs accounting recorded (`sacct -a -X`), for
//!   `gpu-qos replay`.
//! - [`used`]: what jobs used, step by step, and gpushare's words in
//!   their `AdminComment` (`sacct -P --noconvert`), then the command lines
//!   of those advised, for `gpu-qos advise`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use crate::qos::site::Unread;
use crate::shared::bounded;

pub mod accounted;
pub mod assoc_mgr;
pub mod cache;
pub mod config;
pub mod job;
pub mod jobs;
pub mod nodes;
pub mod partitions;
pub mod priority;
pub mod qos;
pub mod qos_lists;
pub mod runs;
pub mod shares;
pub mod used;

/// One read of Slurm: what to run, and the name its answer is recorded
/// under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub program: &'static str,
    pub args: Vec<String>,
    /// The file name (without `.txt`) of its recorded answer: only
    /// letters, digits, `.`, `_` and `-`.
    pub key: String,
    /// How long it may take ([`TIMEOUT`] unless [`Query::within`] says).
    pub timeout: Duration,
}

impl Query {
    /// A query of `program` with `args`, its answer recorded as `key`
    /// (any other character of `key` becomes `_`).
    pub fn new(program: &'static str, args: &[&str], key: &str) -> Self {
        Query {
            program,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            key: key
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                        c
                    } else {
                        '_'
                    }
                })
                .collect(),
            timeout: TIMEOUT,
        }
    }

    /// The same query, allowed `timeout` (an admin's command over months
    /// of accounting, never the users' commands or a timer's).
    pub fn within(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The command line, as messages show it.
    pub fn shown(&self) -> String {
        format!("{} {}", self.program, self.args.join(" "))
    }

    /// The name of the user who runs this (`id -un`), not `$USER`, which
    /// anyone sets.
    pub fn user_name() -> Self {
        Query::new("id", &["-un"], "id-un")
    }

    /// The uid of the user who runs this (`id -u`): Slurm 22.05 names
    /// users by uid in `scontrol show assoc_mgr`.
    pub fn user_id() -> Self {
        Query::new("id", &["-u"], "id-u")
    }
}

/// Why a read gave no answer, in words that name the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadError(String);

impl ReadError {
    pub fn new(message: impl Into<String>) -> Self {
        ReadError(message.into())
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReadError {}

impl ReadError {
    /// The error as a note of what `source` could not give.
    pub fn unread(&self, source: &str) -> Unread {
        Unread {
            source: source.to_owned(),
            reason: self.0.clone(),
        }
    }
}

/// The answer of a read a report can do without: `None`, and the reason
/// noted in `unread`.
pub fn soft(
    unread: &mut Vec<Unread>,
    source: &str,
    answer: Result<String, ReadError>,
) -> Option<String> {
    match answer {
        Ok(text) => Some(text),
        Err(e) => {
            unread.push(e.unread(source));
            None
        }
    }
}

/// What answers a [`Query`]: Slurm itself ([`Live`]) or recorded answers
/// ([`Recorded`]).
pub trait SlurmRead {
    /// The query's stdout, or why there is none.
    fn read(&self, query: &Query) -> Result<String, ReadError>;

    /// `queries` about to be read: a reader may start them now, beside
    /// whatever is read before them (their answers are the same either
    /// way). Where a read waits on slurmdbd (`sacctmgr`, about 0.3 s each
    /// when nothing is kept), the users' commands take the longest of
    /// their reads, not the sum.
    fn prefetch(&self, _queries: &[Query]) {}
}

/// How long one Slurm command may take; slurmctld or slurmdbd not
/// answering must end the command, not hang a cron job.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// The most gpu-qos reads of one answer of Slurm's: about 4 million squeue
/// lines. A larger answer is an error, never read in part (a cut list
/// would give figures that are low without a word).
pub const ANSWER_LIMIT: u64 = 1 << 30;

/// Where [`Live`] records each answer when set: a directory that gets
/// `KEY.txt` per query, the fixtures of [`Recorded`].
pub const RECORD_ENV: &str = "GPUSHARE_RECORD_SLURM";

/// An answer being read in a thread of its own, with the note of a kept
/// answer used in its place.
type InFlight = std::thread::JoinHandle<(Result<String, ReadError>, Option<Unread>)>;

/// Slurm's commands, run from PATH with the environment as it is
/// (`SLURM_CONF` included), each answer kept for the rest of the run:
/// `usage --explain` explains several jobs whose reads overlap (the QOS
/// list, the weights, a partition's pending jobs, an association's fair
/// share), and a one-shot command has no reason to ask slurmctld the same
/// thing twice.
#[derive(Debug, Default)]
pub struct Live {
    answers: Mutex<Vec<(String, Result<String, ReadError>)>>,
    /// Answers being read in threads of their own ([`SlurmRead::prefetch`]).
    in_flight: Mutex<Vec<(String, InFlight)>>,
    record: Option<PathBuf>,
    /// Where `sacctmgr`'s answers are kept between runs ([`cache`]).
    cache: Option<cache::Cache>,
    /// Kept answers used because slurmdbd did not answer.
    notes: Mutex<Vec<Unread>>,
}

impl Live {
    /// Recording answers where [`RECORD_ENV`] says.
    pub fn new() -> Self {
        Live {
            answers: Mutex::new(Vec::new()),
            in_flight: Mutex::new(Vec::new()),
            record: std::env::var_os(RECORD_ENV).map(PathBuf::from),
            cache: None,
            notes: Mutex::new(Vec::new()),
        }
    }

    /// `sacctmgr`'s answers reused from `cache` ([`cache`]): for the
    /// users' commands, never for what admins check.
    pub fn with_cache(mut self, cache: Option<cache::Cache>) -> Self {
        self.cache = cache;
        self
    }

    /// What was read from the cache because slurmdbd did not answer.
    pub fn notes(&self) -> Vec<Unread> {
        self.notes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// A `sacctmgr` question through the cache: a fresh answer kept, else
    /// slurmdbd's (then kept), else an older kept one with a note.
    fn through_cache(
        cache: &cache::Cache,
        query: &Query,
        shown: &str,
    ) -> (Result<String, ReadError>, Option<Unread>) {
        let kept = cache.get(&query.key);
        if let Some(k) = kept.as_ref().filter(|k| cache.fresh(k)) {
            return (Ok(k.text.clone()), None);
        }
        match Live::run(query, shown) {
            Ok(text) => {
                cache.put(&query.key, &text);
                (Ok(text), None)
            }
            Err(e) => match kept {
                Some(k) => {
                    let note = Unread {
                        source: shown.to_owned(),
                        reason: format!(
                            "{e}; its answer of {} ago is used",
                            cache::age_words(k.age)
                        ),
                    };
                    (Ok(k.text), Some(note))
                }
                None => (Err(e), None),
            },
        }
    }

    /// The answer of `query` (`sacctmgr`'s through `cache` where given),
    /// with the note of a kept answer used in its place.
    fn fetch(
        cache: Option<&cache::Cache>,
        query: &Query,
        shown: &str,
    ) -> (Result<String, ReadError>, Option<Unread>) {
        match cache {
            Some(cache) if query.program == "sacctmgr" => Live::through_cache(cache, query, shown),
            _ => (Live::run(query, shown), None),
        }
    }

    /// The answer already read for the command line `shown`.
    fn answered(&self, shown: &str) -> Option<Result<String, ReadError>> {
        let answers = self
            .answers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        answers
            .iter()
            .find(|(k, _)| k == shown)
            .map(|(_, a)| a.clone())
    }

    /// The thread reading `shown`, taken from those in flight.
    fn take_in_flight(&self, shown: &str) -> Option<InFlight> {
        let mut in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let at = in_flight.iter().position(|(k, _)| k == shown)?;
        Some(in_flight.swap_remove(at).1)
    }

    fn run(query: &Query, shown: &str) -> Result<String, ReadError> {
        let mut cmd = Command::new(query.program);
        cmd.args(&query.args);
        let ran = bounded::run_limited(cmd, None, query.timeout, ANSWER_LIMIT)
            .map_err(|e| ReadError(format!("`{shown}`: {e}")))?;
        if !ran.status.success() {
            return Err(ReadError(format!(
                "`{shown}` failed ({}): {}",
                ran.status,
                ran.stderr.trim()
            )));
        }
        Ok(ran.stdout)
    }
}

impl SlurmRead for Live {
    fn read(&self, query: &Query) -> Result<String, ReadError> {
        let shown = query.shown();
        if let Some(answer) = self.answered(&shown) {
            return answer;
        }
        let (answer, note) = match self.take_in_flight(&shown) {
            Some(thread) => thread.join().unwrap_or_else(|_| {
                let e = ReadError(format!("`{shown}`: the thread reading it failed"));
                (Err(e), None)
            }),
            None => Live::fetch(self.cache.as_ref(), query, &shown),
        };
        if let Some(note) = note {
            self.notes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(note);
        }
        if let (Some(dir), Ok(text)) = (&self.record, &answer) {
            let file = dir.join(format!("{}.txt", query.key));
            if let Err(e) = std::fs::write(&file, text) {
                eprintln!("gpushare: cannot record {}: {e}", file.display());
            }
        }
        self.answers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((shown, answer.clone()));
        answer
    }

    /// Each query not read yet, read in a thread of its own; [`read`]
    /// takes its answer (a thread that cannot start leaves the query to be
    /// read in turn).
    ///
    /// [`read`]: SlurmRead::read
    fn prefetch(&self, queries: &[Query]) {
        for query in queries {
            let shown = query.shown();
            if self.answered(&shown).is_some() {
                continue;
            }
            let mut in_flight = self
                .in_flight
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if in_flight.iter().any(|(k, _)| *k == shown) {
                continue;
            }
            let (cache, query, line) = (self.cache.clone(), query.clone(), shown.clone());
            let thread = std::thread::Builder::new()
                .name("gpu-qos read".to_owned())
                .spawn(move || Live::fetch(cache.as_ref(), &query, &line));
            if let Ok(thread) = thread {
                in_flight.push((shown, thread));
            }
        }
    }
}

/// Answers recorded on a real cluster: `DIR/KEY.txt` per query. A query
/// without a file fails as a failed command does.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub dir: PathBuf,
}

impl Recorded {
    pub fn new(dir: impl AsRef<Path>) -> Self {
        Recorded {
            dir: dir.as_ref().to_owned(),
        }
    }
}

impl SlurmRead for Recorded {
    fn read(&self, query: &Query) -> Result<String, ReadError> {
        let file = self.dir.join(format!("{}.txt", query.key));
        std::fs::read_to_string(&file).map_err(|e| {
            ReadError(format!(
                "`{}` failed (no recorded answer): {}: {e}",
                query.shown(),
                file.display()
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_file_names_and_commands_are_shown_whole() {
        let q = Query::new("squeue", &["-h", "-u", "al/ice"], "squeue-user-al/ice");
        assert_eq!(q.key, "squeue-user-al_ice");
        assert_eq!(q.shown(), "squeue -h -u al/ice");
    }

    #[test]
    fn a_missing_recording_fails_as_a_command_does() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.path().join("id-un.txt"), "alice\n").unwrap_or_else(|e| panic!("{e}"));
        let read = Recorded::new(dir.path());
        assert_eq!(read.read(&Query::user_name()), Ok("alice\n".to_owned()));
        let e = read.read(&Query::user_id()).err().map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.starts_with("`id -u` failed")));
    }

    /// A query that appends a line to `runs` each time it runs, then waits
    /// (up to 10 s) for the file `other` where one is named, then answers
    /// `answer` (exits 3 where `answer` is empty, 4 where `other` never
    /// came: the two were not read beside each other).
    fn counted(runs: &Path, other: Option<&Path>, answer: &str) -> Query {
        let wait = other.map_or(String::new(), |o| {
            let o = o.display();
            format!(
                "for i in $(seq 200); do [ -e '{o}' ] && break; sleep 0.05; done; \
                 [ -e '{o}' ] || exit 4; "
            )
        });
        let script = format!(
            "echo run >> '{}'; {wait}[ -n '{answer}' ] || exit 3; echo '{answer}'",
            runs.display()
        );
        Query::new("sh", &["-c", &script], "counted")
    }

    #[test]
    fn prefetched_reads_run_beside_each_other_once_with_the_same_answers() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = |n: &str| dir.path().join(n);
        let runs = |n: &str| std::fs::read_to_string(path(n)).unwrap_or_default();
        // a and b each wait for the other to have started: read one after
        // the other, the first would fail.
        let a = counted(&path("a"), Some(&path("b")), "alpha");
        let b = counted(&path("b"), Some(&path("a")), "beta");
        let bad = counted(&path("bad"), None, "");
        let live = Live::new();
        live.prefetch(&[a.clone(), b.clone(), bad.clone()]);
        // Asked again while in flight: still one run each.
        live.prefetch(&[a.clone(), b.clone()]);
        assert_eq!(live.read(&a), Ok("alpha\n".to_owned()));
        assert_eq!(live.read(&b), Ok("beta\n".to_owned()));
        let e = live.read(&bad).err().map(|e| e.to_string());
        assert!(e.as_deref().is_some_and(|e| e.contains("failed")), "{e:?}");
        // Read again, and prefetched once more: the answers kept, no run.
        live.prefetch(std::slice::from_ref(&a));
        assert_eq!(live.read(&a), Ok("alpha\n".to_owned()));
        assert_eq!(live.read(&bad).err().map(|e| e.to_string()), e);
        for n in ["a", "b", "bad"] {
            assert_eq!(runs(n), "run\n", "{n}");
        }
        // Never prefetched: read in turn, once.
        let c = counted(&path("c"), None, "gamma");
        assert_eq!(live.read(&c), Ok("gamma\n".to_owned()));
        assert_eq!(live.read(&c), Ok("gamma\n".to_owned()));
        assert_eq!(runs("c"), "run\n");
    }
}
