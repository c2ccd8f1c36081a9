//! The policy in force inside slurmctld, and the thread that reloads it.
//!
//! `init()` loads `gpu_qos.conf` and starts a watcher thread that `stat`s
//! the file every [`POLL_INTERVAL`]; an edit is applied atomically, an
//! invalid edit is logged with its `file:line` and the last good policy
//! stays. Each version of the file put in force is copied, when its
//! bytes changed, to `StateSaveLocation` ([`last_good`], by the watcher).
//! A file missing or invalid at `init()` does not fail the plugin (which
//! would stop slurmctld): that last good copy is in force, or where no
//! copy can serve the policy without its file
//! ([`GpuQosConfig::without_file`]); said at error level at load and at
//! each rejected edit, naming the copy, and in the metrics
//! (`gpushare_policy_config_ok 0`; `gpushare_policy_without_file 1`
//! without the file), until a valid file appears, which the watcher
//! takes. The submit
//! path only clones an `Arc`: no file I/O per job. `fini()` stops the thread
//! and joins it if it ends within [`STOP_WAIT`]: one stuck in a `stat` of a
//! hung filesystem is left behind rather than holding up slurmctld, which
//! would otherwise wait without end; the library stays mapped
//! (RTLD_NODELETE, [`crate::pin_library`]), so the code it runs is never
//! unloaded under it.
//!
//! A thread of its own publishes the decision counters ([`decisions`]) to
//! `MetricsFile=` of gpu_qos.conf when they changed, at least every
//! [`HEARTBEAT_TICKS`] polls (a minute) while they do not, and once more
//! at `fini()`: the submit path only adds to an atomic. The rewrite of a
//! quiet controller's file is its heartbeat, and each write says when it
//! was made and for which cluster
//! (`gpushare_job_submit_heartbeat_timestamp_seconds{slurm_cluster}`):
//! the freshest of a cluster's controllers (the `GpushareMetricsStale`
//! alert) tells a plugin whose thread runs somewhere from one gone with
//! every slurmctld or stuck in a write, whether or not jobs are submitted,
//! and a backup controller's file left behind raises nothing while another
//! controller writes. A file that cannot be
//! written is logged once per distinct error and tried less and less
//! often; a write stuck on a hung filesystem holds up neither reloads nor
//! `fini()` (the same bound).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gpushare::qos::config::last_good::{self as copy, InForce, Source};
use gpushare::qos::config::{self, GpuQosConfig};
use gpushare::qos::metrics::{render_heartbeat, DecisionCounts};
use gpushare::shared::locations::beside_slurm_conf;
use gpushare::shared::prom;
use gpushare::shared::watched::{Current, PollOutcome, WatchedFile};
use slurm_plugin::{guard, log};

mod last_good;

/// How often the watcher looks at the file's stamp.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// Overrides [`POLL_INTERVAL`] (milliseconds) when set at `init()`: tests
/// use it to see reloads within their run; sites have no need to.
pub const POLL_INTERVAL_ENV: &str = "GPUSHARE_QOS_POLL_MS";

/// Reloads applied since the library was loaded (a test observes them).
static RELOADS: AtomicU64 = AtomicU64::new(0);

/// Decisions since the library was loaded.
static DECISIONS: DecisionCounts = DecisionCounts::new();

/// The decision counters the submit and modify paths add to.
pub fn decisions() -> &'static DecisionCounts {
    &DECISIONS
}

/// The longest pause between two tries of a `MetricsFile=` that cannot
/// be written.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Polls between two writes of an unchanged `MetricsFile=`: 30, a minute
/// at [`POLL_INTERVAL`], well inside the 5 minutes after which the shipped
/// `GpushareMetricsStale` alert calls a file stale. Counted in polls, not
/// seconds, so that a test polling faster sees it sooner.
pub const HEARTBEAT_TICKS: u32 = 30;

/// How long `fini()` waits, in all, for the reload and metrics threads to
/// end: a reload or a write stuck on a hung filesystem is left behind
/// (the library stays mapped, see [`crate::pin_library`]) rather than
/// holding up slurmctld's shutdown or reconfiguration.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// A thread of the plugin's, and word that its body has ended: the
/// sender it holds is dropped as the body returns or unwinds.
#[derive(Debug)]
struct Worker {
    name: &'static str,
    handle: JoinHandle<()>,
    /// In a `Mutex`: a `Receiver` alone may not be shared (`RUNNING`).
    ended: Mutex<Receiver<()>>,
}

impl Worker {
    fn spawn(name: &'static str, body: impl FnOnce() + Send + 'static) -> Result<Self, String> {
        let (ended_tx, ended) = mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                // Dropped after the body, also when it unwinds.
                let _ended = ended_tx;
                body();
            })
            .map_err(|e| format!("cannot start the {name} thread: {e}"))?;
        Ok(Self {
            name,
            handle,
            ended: Mutex::new(ended),
        })
    }

    /// Joins the thread if its body ends by `deadline` (true); else
    /// leaves it running (false), never waiting past the deadline.
    fn join_by(self, deadline: Instant) -> bool {
        let wait = deadline.saturating_duration_since(Instant::now());
        let outcome = self
            .ended
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .recv_timeout(wait);
        let ended = !matches!(outcome, Err(RecvTimeoutError::Timeout));
        if ended {
            // The body has returned: only the thread's exit is left.
            let _ = self.handle.join();
        }
        ended
    }
}

/// What the metrics writer knows between tries: what it wrote last, and
/// while writes fail, the error it logged and when to try again.
#[derive(Debug, Default)]
struct MetricsWriter {
    /// The decision total last written, and to which file.
    written: Option<(u64, PathBuf)>,
    /// Ticks since the last write found nothing new to write.
    quiet: u32,
    /// The error logged last; a try that fails the same way is not
    /// logged again.
    failing: Option<String>,
    /// While failing: the pause before the next try, doubling up to
    /// [`MAX_BACKOFF`], and the tries skipped until then.
    backoff: Duration,
    skip: u32,
    /// The reloads counted at the last try: an edit of gpu_qos.conf (a
    /// new MetricsFile=, a directory made) is tried at once.
    reloads: u64,
}

/// What one tick of the metrics writer does.
#[derive(Debug, PartialEq, Eq)]
enum Tick {
    Nothing,
    Write(PathBuf),
}

impl MetricsWriter {
    /// Whether to write `total` to `path` now (`interval` apart).
    fn tick(&mut self, path: Option<&Path>, total: u64, reloads: u64) -> Tick {
        let Some(path) = path else {
            return Tick::Nothing;
        };
        let edited = std::mem::replace(&mut self.reloads, reloads) != reloads;
        if edited {
            self.skip = 0;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return Tick::Nothing;
        }
        let current = self
            .written
            .as_ref()
            .is_some_and(|(t, p)| *t == total && p == path);
        if current {
            // Unchanged: written again as a heartbeat now and then.
            self.quiet = self.quiet.saturating_add(1);
            if self.quiet < HEARTBEAT_TICKS {
                return Tick::Nothing;
            }
        }
        Tick::Write(path.to_path_buf())
    }

    /// After a try of `path` at `total`; the line to log, if any: each
    /// distinct error once, and the first success after errors.
    fn tried(
        &mut self,
        path: &Path,
        total: u64,
        outcome: Result<(), String>,
        interval: Duration,
    ) -> Option<String> {
        match outcome {
            Ok(()) => {
                self.written = Some((total, path.to_path_buf()));
                self.quiet = 0;
                self.backoff = Duration::ZERO;
                self.skip = 0;
                self.failing
                    .take()
                    .map(|_| format!("{PLUGIN}: MetricsFile {} written again", path.display()))
            }
            Err(e) => {
                self.backoff = (self.backoff * 2).clamp(interval * 2, MAX_BACKOFF);
                let ticks = self.backoff.as_millis() / interval.as_millis().max(1);
                self.skip = u32::try_from(ticks.saturating_sub(1)).unwrap_or(u32::MAX);
                let repeated = self.failing.as_deref() == Some(e.as_str());
                self.failing = Some(e.clone());
                (!repeated).then(|| {
                    format!(
                        "{PLUGIN}: MetricsFile: {e} (tried again less and less often, up to \
                         every {} s; logged again only if the error changes)",
                        MAX_BACKOFF.as_secs()
                    )
                })
            }
        }
    }
}

/// The metrics writer's thread: every `interval`, the decision counters
/// to the policy's `MetricsFile=` when they changed, and every
/// [`HEARTBEAT_TICKS`] intervals when not. Its own thread, so
/// a write stuck on a hung filesystem holds up neither the reloads nor
/// slurmctld (see [`STOP_WAIT`]).
fn write_metrics(
    current: &Current<GpuQosConfig>,
    stop: &StopSignal,
    interval: Duration,
    cluster: &str,
) {
    let mut writer = MetricsWriter::default();
    let mut once = || {
        guard("job_submit/gpu_qos: metrics", (), || {
            // Not only decisions: a change of the file's state is news.
            let total = DECISIONS.generation();
            let policy = current.get();
            if let Tick::Write(path) = writer.tick(policy.metrics_file(), total, reloads()) {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                let text = DECISIONS.render() + &render_heartbeat(cluster, now);
                let outcome = prom::write_file(&path, &text);
                let failed = outcome.is_err();
                if let Some(line) = writer.tried(&path, total, outcome, interval) {
                    if failed {
                        log::error(&line);
                    } else {
                        log::info(&line);
                    }
                }
            }
        })
    };
    once();
    while !stop.wait(interval) {
        once();
    }
    // The last decisions before fini.
    once();
}

/// How many edits of the file have been put in force since load.
pub fn reloads() -> u64 {
    RELOADS.load(Ordering::Relaxed)
}

fn poll_interval() -> Duration {
    std::env::var(POLL_INTERVAL_ENV)
        .ok()
        .and_then(|ms| ms.trim().parse().ok())
        .filter(|&ms: &u64| ms > 0)
        .map_or(POLL_INTERVAL, Duration::from_millis)
}

/// File name of the policy, next to slurm.conf.
pub const CONF_NAME: &str = "gpu_qos.conf";

const PLUGIN: &str = "job_submit/gpu_qos";

#[derive(Debug, Default)]
struct StopSignal {
    stop: Mutex<bool>,
    wake: Condvar,
}

impl StopSignal {
    /// Sleeps up to `timeout`; true once stop was requested.
    fn wait(&self, timeout: Duration) -> bool {
        let stopped = self.stop.lock().unwrap_or_else(PoisonError::into_inner);
        if *stopped {
            return true;
        }
        let (stopped, _) = self
            .wake
            .wait_timeout(stopped, timeout)
            .unwrap_or_else(PoisonError::into_inner);
        *stopped
    }

    fn request(&self) {
        *self.stop.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.wake.notify_all();
    }
}

#[derive(Debug)]
struct Running {
    current: Arc<Current<GpuQosConfig>>,
    stop: Arc<StopSignal>,
    /// The reload thread.
    watcher: Worker,
    writer_stop: Arc<StopSignal>,
    /// The metrics thread.
    writer: Worker,
    /// The partitions' reader (crate::partitions), if it could be started.
    parts: Option<Worker>,
}

/// "N rules" for the log (a rule may name QOS, partitions or accounts).
fn rules_text(cfg: &GpuQosConfig) -> String {
    let n = cfg.rules().len();
    format!("{n} rule{}", if n == 1 { "" } else { "s" })
}

static RUNNING: RwLock<Option<Running>> = RwLock::new(None);

/// Where the policy lives: next to the slurm.conf the daemon uses.
pub fn conf_path(slurm_conf: Option<&Path>) -> PathBuf {
    beside_slurm_conf(slurm_conf, CONF_NAME)
}

/// The partitions' reader: every [`crate::partitions::REFRESH_TICKS`]
/// polls, each partition's QOS from slurmctld. Each distinct failure is
/// logged once (slurmctld does not answer before it has started).
fn read_partitions(slurm_conf: Option<&Path>, stop: &StopSignal, interval: Duration) {
    let mut last: Option<Result<usize, String>> = None;
    loop {
        guard("job_submit/gpu_qos: partitions", (), || {
            let outcome = crate::partitions::refresh(slurm_conf);
            if last.as_ref() != Some(&outcome) {
                match &outcome {
                    Ok(n) if !matches!(last, Some(Ok(_))) => log::info(&format!(
                        "{PLUGIN}: read the QOS of {n} partition(s) from slurmctld"
                    )),
                    // The first try, while slurmctld starts, may fail.
                    Err(e) if last.is_some() => {
                        log::error(&format!("{PLUGIN}: partitions not read: {e}"))
                    }
                    _ => {}
                }
            }
            last = Some(outcome);
        });
        if stop.wait(interval * crate::partitions::REFRESH_TICKS) {
            return;
        }
    }
}

/// Sets the metrics' state of the file: `ok` when the file as it is now
/// is in force; without the file while neither it nor a copy is.
fn set_config_state(ok: bool, source: &Source) {
    DECISIONS.set_config_state(ok, matches!(source, Source::WithoutFile(_)));
}

/// Loads the policy (or, where the file is missing or invalid, the last
/// good copy in slurmctld's StateSaveLocation, else the policy without
/// the file) and starts the watcher and the metrics writer (its
/// heartbeat labelled with `cluster`, slurm.conf's ClusterName). Only a
/// thread that cannot be started is an error.
pub fn start(path: &Path, slurm_conf: Option<&Path>, cluster: String) -> Result<(), String> {
    stop();
    crate::partitions::seed_from_slurm_conf(slurm_conf);
    let copy_path = copy::copy_path(last_good::daemon_state_save_location().as_deref());
    let mut copy_read = None;
    let mut source = Source::File;
    // Without a copy, its metrics go where the file's own MetricsFile=
    // line says, if that line is valid alone: the site's alert must see it.
    let (mut file, error) = WatchedFile::load_or(path, config::parse, |text| {
        let copy = copy_path.as_deref().map(|p| {
            let read = last_good::read(p);
            copy_read = Some(read.clone());
            (p, read)
        });
        let fallback = copy::in_place_of_bad_file(text, copy);
        source = fallback.source;
        fallback.policy
    });
    set_config_state(error.is_none(), &source);
    if let Some(e) = &error {
        log::error(&format!("{PLUGIN}: {e}; {}", InForce(&source)));
    }
    let mut keeper = last_good::Keeper::new(copy_path, copy_read.as_ref());
    let current = file.current();
    let stop = Arc::new(StopSignal::default());
    let interval = poll_interval();
    let thread_stop = Arc::clone(&stop);
    let watcher = Worker::spawn("gpu_qos-reload", move || {
        while !thread_stop.wait(interval) {
            // A panic here must not unwind out of a thread slurmctld
            // never joins; log it and keep watching.
            guard("job_submit/gpu_qos: reload", (), || {
                match file.poll() {
                    PollOutcome::Unchanged => {}
                    PollOutcome::Reloaded => {
                        RELOADS.fetch_add(1, Ordering::Relaxed);
                        let before = std::mem::replace(&mut source, Source::File);
                        set_config_state(true, &source);
                        log::info(&format!(
                            "{PLUGIN}: reloaded {} ({}){}",
                            file.path().display(),
                            rules_text(&file.current().get()),
                            copy::no_longer(&before)
                        ))
                    }
                    PollOutcome::Rejected(why) => {
                        set_config_state(false, &source);
                        if source == Source::File {
                            log::error(&format!("{PLUGIN}: {why}"))
                        } else {
                            log::error(&format!("{PLUGIN}: {why}; {}", InForce(&source)))
                        }
                    }
                }
                match keeper.keep(file.text_in_force()) {
                    Some(last_good::Said::Info(line)) => log::info(&format!("{PLUGIN}: {line}")),
                    Some(last_good::Said::Error(line)) => log::error(&format!("{PLUGIN}: {line}")),
                    None => {}
                }
            });
        }
    })?;
    let writer_stop = Arc::new(StopSignal::default());
    let writer = {
        let current = Arc::clone(&current);
        let stop = Arc::clone(&writer_stop);
        Worker::spawn("gpu_qos-metrics", move || {
            write_metrics(&current, &stop, interval, &cluster)
        })
    };
    let writer = match writer {
        Ok(writer) => writer,
        Err(e) => {
            stop.request();
            if !watcher.join_by(Instant::now() + STOP_WAIT) {
                log::error(&format!(
                    "{PLUGIN}: the reload thread did not end within {} s: left behind",
                    STOP_WAIT.as_secs()
                ));
            }
            return Err(e);
        }
    };
    // Not fatal: without it the partitions of slurm.conf stand in.
    let parts = {
        let stop = Arc::clone(&writer_stop);
        let slurm_conf = slurm_conf.map(Path::to_path_buf);
        Worker::spawn("gpu_qos-partitions", move || {
            read_partitions(slurm_conf.as_deref(), &stop, interval)
        })
    }
    .map_err(|e| log::error(&format!("{PLUGIN}: {e}")))
    .ok();
    if error.is_none() {
        log::info(&format!(
            "{PLUGIN}: policy from {} ({})",
            path.display(),
            rules_text(&current.get())
        ));
    }
    *RUNNING.write().unwrap_or_else(PoisonError::into_inner) = Some(Running {
        current,
        stop,
        watcher,
        writer_stop,
        writer,
        parts,
    });
    Ok(())
}

/// Stops the reload and metrics threads, joining those that end within
/// [`STOP_WAIT`] and leaving the others behind (a `stat` or a write stuck
/// on a hung filesystem); the policy is dropped. Never waits longer.
pub fn stop() {
    let running = RUNNING
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    if let Some(r) = running {
        r.stop.request();
        r.writer_stop.request();
        let deadline = Instant::now() + STOP_WAIT;
        // An scontrol under way for the partitions ends at its own deadline.
        let parts = r.parts.map(|w| (w, "a read of the partitions"));
        for (worker, doing) in [
            (r.watcher, "a reload of gpu_qos.conf"),
            (r.writer, "the MetricsFile write"),
        ]
        .into_iter()
        .chain(parts)
        {
            let name = worker.name;
            if !worker.join_by(deadline) {
                log::error(&format!(
                    "{PLUGIN}: {doing} did not end within {} s (a hung filesystem?): thread \
                     {name} left behind",
                    STOP_WAIT.as_secs()
                ));
            }
        }
    }
}

/// The policy in force, if the plugin is initialized.
pub fn policy() -> Option<Arc<GpuQosConfig>> {
    RUNNING
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .map(|r| r.current.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_secs(2);

    fn failing(w: &mut MetricsWriter, path: &Path, total: u64, e: &str) -> Option<String> {
        w.tried(path, total, Err(e.to_owned()), TICK)
    }

    /// A thread stuck (as in a `stat` of a hung filesystem) is left
    /// behind at the deadline, not waited for; one that ends, or panics,
    /// is joined.
    #[test]
    fn stopping_waits_for_a_stuck_thread_no_longer_than_the_bound() {
        let (release, stuck) = mpsc::channel::<()>();
        let worker = Worker::spawn("test-stuck", move || {
            let _ = stuck.recv();
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let started = Instant::now();
        let bound = Duration::from_millis(200);
        assert!(!worker.join_by(started + bound));
        let waited = started.elapsed();
        assert!(waited >= bound && waited < bound * 10, "{waited:?}");
        // It ends on its own later.
        drop(release);
        let quick = Worker::spawn("test-quick", || {}).unwrap_or_else(|e| panic!("{e}"));
        assert!(quick.join_by(Instant::now() + Duration::from_secs(30)));
        let panics = Worker::spawn("test-panics", || panic!("in the test thread"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(panics.join_by(Instant::now() + Duration::from_secs(30)));
        // A deadline already past: no wait at all for a stuck thread.
        let (_keep, stuck) = mpsc::channel::<()>();
        let late = Worker::spawn("test-late", move || {
            let _ = stuck.recv();
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let started = Instant::now();
        assert!(!late.join_by(started));
        assert!(started.elapsed() < bound);
    }

    #[test]
    fn an_unwritable_file_is_logged_once_per_error_and_tried_less_and_less() {
        let path = Path::new("/nowhere/qos.prom");
        let mut w = MetricsWriter::default();
        let mut tries = Vec::new();
        let mut logged = Vec::new();
        for tick in 0..200u32 {
            if let Tick::Write(p) = w.tick(Some(path), 5, 0) {
                tries.push(tick);
                // The error changes once, at the fourth try.
                let e = if tries.len() < 4 { "ENOENT" } else { "EACCES" };
                logged.extend(failing(&mut w, &p, 5, e));
            }
        }
        assert_eq!(logged.len(), 2, "{logged:?}");
        assert!(logged[0].contains("ENOENT") && logged[1].contains("EACCES"));
        // Every 2nd, 4th, 8th ... tick, then every 150th (300 s of 2 s).
        let gaps: Vec<u32> = tries.windows(2).map(|p| p[1] - p[0]).collect();
        assert_eq!(&gaps[..6], &[2, 4, 8, 16, 32, 64]);
        assert!(gaps[6..].iter().all(|&g| g == 150), "{gaps:?}");
    }

    /// A quiet controller's file is rewritten every HEARTBEAT_TICKS
    /// polls, so that its age tells a live plugin from a gone one; a
    /// decision writes at once and starts the count again.
    #[test]
    fn an_unchanged_file_is_rewritten_as_a_heartbeat() {
        let path = Path::new("/var/lib/node_exporter/textfile_collector/q.prom");
        let mut w = MetricsWriter::default();
        let mut writes = Vec::new();
        for tick in 0..=(40 + 2 * HEARTBEAT_TICKS) {
            // One decision at tick 40.
            let total = if tick < 40 { 7 } else { 8 };
            if let Tick::Write(p) = w.tick(Some(path), total, 0) {
                writes.push(tick);
                assert_eq!(w.tried(&p, total, Ok(()), TICK), None);
            }
        }
        let h = HEARTBEAT_TICKS;
        assert_eq!(writes, vec![0, h, 40, 40 + h, 40 + 2 * h], "{writes:?}");
        // A minute at the default poll: within the alert's 5 minutes.
        let period = POLL_INTERVAL * h;
        assert!(period >= Duration::from_secs(30) && period <= Duration::from_secs(120));
    }

    #[test]
    fn an_edit_of_the_policy_is_tried_at_once_and_success_is_told() {
        let path = Path::new("/var/lib/node_exporter/qos.prom");
        let mut w = MetricsWriter::default();
        assert_eq!(w.tick(Some(path), 1, 0), Tick::Write(path.into()));
        assert!(failing(&mut w, path, 1, "ENOENT").is_some());
        assert_eq!(w.tick(Some(path), 1, 0), Tick::Nothing);
        // The admin fixed gpu_qos.conf: tried at the next tick.
        assert_eq!(w.tick(Some(path), 1, 1), Tick::Write(path.into()));
        let told = w.tried(path, 1, Ok(()), TICK);
        assert!(told.is_some_and(|t| t.contains("written again")));
        // Written and unchanged: nothing; a new decision: written.
        assert_eq!(w.tick(Some(path), 1, 1), Tick::Nothing);
        assert_eq!(w.tick(Some(path), 2, 1), Tick::Write(path.into()));
        assert_eq!(w.tried(path, 2, Ok(()), TICK), None);
        // No MetricsFile=: nothing, ever.
        assert_eq!(w.tick(None, 3, 1), Tick::Nothing);
        // Another file, same figures: written there too.
        let other = Path::new("/run/qos.prom");
        assert_eq!(w.tick(Some(other), 2, 2), Tick::Write(other.into()));
    }
}
