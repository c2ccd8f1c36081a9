//! The policy in force inside slurmctld, and the thread that reloads it.
//!
//! `init()` loads `gpu_qos.conf` (failing the plugin, and so slurmctld, if it
//! is missing or invalid) and starts a watcher thread that `stat`s the file
//! every [`POLL_INTERVAL`]; an edit is applied atomically, an invalid edit is
//! logged with its `file:line` and the last good policy stays. The submit
//! path only clones an `Arc`: no file I/O per job. `fini()` stops and joins
//! the thread before slurmctld unloads the library (a thread left running
//! code from an unloaded library would crash the daemon).
//!
//! The same thread publishes the decision counters ([`decisions`]) to
//! `MetricsFile=` of gpu_qos.conf when they changed, and once more at
//! `fini()`: the submit path only adds to an atomic.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use gpushare::qos::config::{self, GpuQosConfig};
use gpushare::qos::metrics::DecisionCounts;
use gpushare::shared::locations::beside_slurm_conf;
use gpushare::shared::prom;
use gpushare::shared::watched::{Current, PollOutcome, WatchedFile};
use slurm_plugin::{guard, log};

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

/// Writes the counters to the policy's `MetricsFile=` when they changed
/// since `last` (the total written last; `None`: never written).
fn publish_decisions(cfg: &GpuQosConfig, last: &mut Option<u64>) {
    let Some(path) = cfg.metrics_file() else {
        return;
    };
    let total = DECISIONS.total();
    if *last == Some(total) {
        return;
    }
    match prom::write_file(path, &DECISIONS.render()) {
        Ok(()) => *last = Some(total),
        Err(e) => log::error(&format!("{PLUGIN}: MetricsFile: {e}")),
    }
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
    watcher: Option<JoinHandle<()>>,
}

static RUNNING: RwLock<Option<Running>> = RwLock::new(None);

/// Where the policy lives: next to the slurm.conf the daemon uses.
pub fn conf_path(slurm_conf: Option<&Path>) -> PathBuf {
    beside_slurm_conf(slurm_conf, CONF_NAME)
}

/// Loads the policy and starts the watcher. Errors are `file:line: reason`.
pub fn start(path: &Path) -> Result<(), String> {
    stop();
    let mut file = WatchedFile::load(path, config::parse).map_err(|e| e.to_string())?;
    let current = file.current();
    let rules = current.get().rules().len();
    let stop = Arc::new(StopSignal::default());
    let interval = poll_interval();
    let thread_stop = Arc::clone(&stop);
    let watcher = std::thread::Builder::new()
        .name("gpu_qos-reload".into())
        .spawn(move || {
            let mut written = None;
            let publish = |file: &WatchedFile<GpuQosConfig>, written: &mut Option<u64>| {
                guard("job_submit/gpu_qos: metrics", (), || {
                    publish_decisions(&file.current().get(), written)
                })
            };
            publish(&file, &mut written);
            while !thread_stop.wait(interval) {
                // A panic here must not unwind out of a thread slurmctld
                // never joins; log it and keep watching.
                guard("job_submit/gpu_qos: reload", (), || match file.poll() {
                    PollOutcome::Unchanged => {}
                    PollOutcome::Reloaded => {
                        RELOADS.fetch_add(1, Ordering::Relaxed);
                        log::info(&format!(
                            "{PLUGIN}: reloaded {} ({} QOS rules)",
                            file.path().display(),
                            file.current().get().rules().len()
                        ))
                    }
                    PollOutcome::Rejected(why) => log::error(&format!("{PLUGIN}: {why}")),
                });
                publish(&file, &mut written);
            }
            // The last decisions before fini.
            publish(&file, &mut written);
        })
        .map_err(|e| format!("cannot start the reload thread: {e}"))?;
    log::info(&format!(
        "{PLUGIN}: policy from {} ({rules} QOS rules)",
        path.display()
    ));
    *RUNNING.write().unwrap_or_else(PoisonError::into_inner) = Some(Running {
        current,
        stop,
        watcher: Some(watcher),
    });
    Ok(())
}

/// Stops and joins the watcher; the policy is dropped.
pub fn stop() {
    let running = RUNNING
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    if let Some(mut r) = running {
        r.stop.request();
        if let Some(h) = r.watcher.take() {
            let _ = h.join();
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
