//! `--cuda-probe LIBRARY hold MIB SECONDS BUSY`: one share's load for the
//! hardware kits' per-share use and cancelled-neighbour checks, through
//! the driver API (no CUDA toolkit on the node).
//!
//! It prints, one JSON line each, as the kits' nvcc client did:
//!
//! - `{"event":"ready","pid":P,"init_ms":T}` once its context is made (the
//!   caller may look at the process as a client from then on);
//! - `{"event":"result","pid":P,"init_ms":T,"init":"ok","mps_enabled":M,
//!   "sms":S,"alloc_mib":N,"alloc":"ok"}` once MIB MiB are allocated and
//!   written (`alloc` the driver's error instead where that failed;
//!   `mps_enabled` 1 through MPS, 0 not, -1 where the driver does not
//!   say), or `{"event":"result","pid":P,"init_ms":T,"init":"WHY"}` where
//!   no context could be made (then nothing more, exit 1);
//! - `{"event":"done","pid":P,"busy":"ok"}` after SECONDS during which it
//!   launched its kernel back to back (BUSY 1) or slept (BUSY 0), keeping
//!   the memory; `busy` the driver's error where a kernel failed.
//!
//! Exit 0 where the allocation and every kernel went through, else 1.
//! The caller bounds it (kills it once measured, or its job ends); a
//! driver call that never returns ends it all the same [`GRACE`] after
//! SECONDS, with a done line saying so.

use std::ffi::c_void;
use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{
    blocks_for, device, load_kernel, run_kernel, Device, DevicePtr, Driver, Seen, MPS_ENABLED,
    MULTIPROCESSOR_COUNT,
};

/// Clock cycles each block of a busy launch spins: tens of milliseconds
/// a launch on a GPU (two waves of blocks at 1.5 to 2 GHz), so that the
/// GPU is never idle between launches for long and SECONDS is kept to a
/// launch; the test cluster's stand-in driver takes a nanosecond a cycle.
pub const BUSY_SPIN_CYCLES: u64 = 40_000_000;
/// How long an idle client sleeps between looks at the clock.
const IDLE_STEP: Duration = Duration::from_millis(100);
/// How long past SECONDS a client stuck in a driver call lives on.
pub const GRACE: Duration = Duration::from_secs(60);

/// The mode's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    /// MiB allocated, written and kept (0: none).
    pub mib: u64,
    /// How long it keeps the GPU busy or idle.
    pub seconds: u64,
    /// Kernels back to back, else sleep.
    pub busy: bool,
}

/// One line the mode prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum Event {
    Ready {
        pid: u32,
        init_ms: f64,
    },
    Result {
        pid: u32,
        init_ms: f64,
        init: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        mps_enabled: Option<i32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        sms: Option<u32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        alloc_mib: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        alloc: Option<String>,
    },
    Done {
        pid: u32,
        busy: String,
    },
}

impl Event {
    /// The event as one JSON line (with its newline).
    pub fn line(&self) -> String {
        // A plain enum of numbers and strings: serialisation cannot fail.
        let mut text = serde_json::to_string(self)
            .unwrap_or_else(|e| format!(r#"{{"event":"error","why":{:?}}}"#, e.to_string()));
        text.push('\n');
        text
    }

    /// A result line where no context could be made.
    fn failed(init_ms: f64, why: String) -> Self {
        Self::Result {
            pid: std::process::id(),
            init_ms,
            init: why,
            mps_enabled: None,
            sms: None,
            alloc_mib: None,
            alloc: None,
        }
    }
}

/// Milliseconds since `since`, to a tenth.
fn ms_since(since: Instant) -> f64 {
    (since.elapsed().as_secs_f64() * 10_000.0).round() / 10.0
}

impl Hold {
    /// `MIB SECONDS BUSY` (BUSY `0` or `1`), nothing more.
    pub fn parse(args: &[String]) -> Result<Self, String> {
        let [mib, seconds, busy] = args else {
            return Err(format!(
                "takes MIB SECONDS BUSY, not {} argument{}",
                args.len(),
                if args.len() == 1 { "" } else { "s" }
            ));
        };
        let whole = |what: &str, v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{what} must be a whole number, not {v:?}"))
        };
        let busy = match busy.as_str() {
            "1" => true,
            "0" => false,
            other => return Err(format!("BUSY must be 0 or 1, not {other:?}")),
        };
        Ok(Self {
            mib: whole("MIB", mib)?,
            seconds: whole("SECONDS", seconds)?,
            busy,
        })
    }

    /// The process's answer: the load run, its lines on stdout; a watch
    /// that ends the process [`GRACE`] after SECONDS where a driver call
    /// keeps it.
    pub fn run_as_child(self, library: &str) -> ExitCode {
        let limit = Duration::from_secs(self.seconds).saturating_add(GRACE);
        std::thread::spawn(move || {
            std::thread::sleep(limit);
            let done = Event::Done {
                pid: std::process::id(),
                busy: format!(
                    "still in a driver call {} s after its {} s: ended",
                    GRACE.as_secs(),
                    limit.saturating_sub(GRACE).as_secs()
                ),
            };
            let mut out = std::io::stdout();
            let _ = out.write_all(done.line().as_bytes());
            let _ = out.flush();
            // SAFETY: _exit ends the process at once: no destructor or
            // exit handler runs into the driver that the main thread is
            // stuck in.
            unsafe { libc::_exit(1) };
        });
        let mut out = std::io::stdout();
        if self.run(library, &mut out) {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    }

    /// Runs the load with `library`, each event written to `out` (flushed)
    /// as it happens; whether the allocation and every kernel went through.
    pub fn run(self, library: &str, out: &mut dyn Write) -> bool {
        let mut say = |event: Event| {
            let _ = out.write_all(event.line().as_bytes());
            let _ = out.flush();
        };
        let started = Instant::now();
        let (driver, dev) = match context(library) {
            Ok(made) => made,
            Err(why) => {
                say(Event::failed(ms_since(started), why));
                return false;
            }
        };
        let init_ms = ms_since(started);
        let pid = std::process::id();
        say(Event::Ready { pid, init_ms });
        let attribute = |which| {
            let mut value = 0;
            // SAFETY: a valid out-pointer; `dev` came from cuDeviceGet.
            let code = unsafe { (driver.attribute)(&mut value, which, dev) };
            (code == 0).then_some(value)
        };
        let mps_enabled = attribute(MPS_ENABLED).map_or(-1, |v| i32::from(v != 0));
        let sms = attribute(MULTIPROCESSOR_COUNT)
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(0);
        let (held, alloc) = allocate(&driver, self.mib);
        // The kernel and its output, for a busy client.
        let blocks = blocks_for(sms.max(1));
        let prepared = if self.busy {
            prepare(&driver, blocks)
        } else {
            Ok(None)
        };
        say(Event::Result {
            pid,
            init_ms,
            init: "ok".to_owned(),
            mps_enabled: Some(mps_enabled),
            sms: Some(sms),
            alloc_mib: Some(self.mib),
            alloc: Some(alloc.clone()),
        });
        let until = Instant::now() + Duration::from_secs(self.seconds);
        let kernels = prepared.and_then(|prepared| {
            while Instant::now() < until {
                match &prepared {
                    Some((kernel, output)) => {
                        run_kernel(&driver, kernel, blocks, *output, BUSY_SPIN_CYCLES)?;
                    }
                    None => std::thread::sleep(IDLE_STEP.min(until - Instant::now())),
                }
            }
            Ok(prepared)
        });
        let busy = match &kernels {
            Ok(_) => "ok".to_owned(),
            Err(e) => e.clone(),
        };
        let went = alloc == "ok" && busy == "ok";
        say(Event::Done { pid, busy });
        for ptr in [held, kernels.ok().flatten().map(|(_, o)| o)]
            .into_iter()
            .flatten()
        {
            // SAFETY: an allocation of this context's, freed once.
            unsafe { (driver.mem_free)(ptr) };
        }
        // SAFETY: releases the retain of `context`; the process ends next.
        unsafe { (driver.ctx_release)(dev) };
        went
    }
}

/// The driver loaded, initialised, device 0's primary context current.
fn context(library: &str) -> Result<(Driver, Device), String> {
    let driver = Driver::load(library)?;
    let dev = device(&driver, &mut Seen::default())?;
    let mut ctx: *mut c_void = std::ptr::null_mut();
    // SAFETY: ctx is a valid out-pointer; dev came from cuDeviceGet.
    let retained = driver.check(unsafe { (driver.ctx_retain)(&mut ctx, dev) });
    retained
        .and_then(|()| {
            // SAFETY: the context just retained.
            driver.check(unsafe { (driver.ctx_set_current)(ctx) })
        })
        .map_err(|e| format!("the context: {e}"))?;
    Ok((driver, dev))
}

/// `mib` MiB allocated and written (`cuMemsetD8`, waited for): the
/// allocation to keep, and `ok` or the driver's error.
fn allocate(driver: &Driver, mib: u64) -> (Option<DevicePtr>, String) {
    if mib == 0 {
        return (None, "ok".to_owned());
    }
    let Some(bytes) = mib
        .checked_mul(1 << 20)
        .and_then(|b| usize::try_from(b).ok())
    else {
        return (
            None,
            format!("{mib} MiB: more than this machine can address"),
        );
    };
    let mut ptr: DevicePtr = 0;
    // SAFETY: a valid out-pointer.
    if let Err(e) = driver.check(unsafe { (driver.mem_alloc)(&mut ptr, bytes) }) {
        return (None, e);
    }
    // SAFETY: the allocation just made, `bytes` long.
    let written = driver
        .check(unsafe { (driver.memset)(ptr, 1, bytes) })
        // SAFETY: waits for the write above.
        .and_then(|()| driver.check(unsafe { (driver.synchronize)() }));
    match written {
        Ok(()) => (Some(ptr), "ok".to_owned()),
        Err(e) => (Some(ptr), e),
    }
}

/// The kernel loaded and its output allocated (one u32 per block).
fn prepare(driver: &Driver, blocks: u32) -> Result<Option<(super::Kernel, DevicePtr)>, String> {
    let kernel = load_kernel(driver)?;
    let mut output: DevicePtr = 0;
    // SAFETY: a valid out-pointer.
    let allocated = unsafe { (driver.mem_alloc)(&mut output, blocks as usize * 4) };
    driver
        .check(allocated)
        .map_err(|e| format!("cuMemAlloc: {e}"))?;
    Ok(Some((kernel, output)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn its_arguments_are_mib_seconds_and_busy() {
        assert_eq!(
            Hold::parse(&args(&["2048", "120", "1"])),
            Ok(Hold {
                mib: 2048,
                seconds: 120,
                busy: true
            })
        );
        assert_eq!(
            Hold::parse(&args(&["0", "0", "0"])),
            Ok(Hold {
                mib: 0,
                seconds: 0,
                busy: false
            })
        );
        for bad in [
            &["2048", "120"][..],
            &["2048", "120", "1", "4"],
            &["2048", "120", "yes"],
            &["2048", "120", "2"],
            &["2G", "120", "1"],
            &["2048", "-1", "1"],
            &["2048", "1.5", "0"],
        ] {
            assert!(Hold::parse(&args(bad)).is_err(), "{bad:?} taken");
        }
        let e = Hold::parse(&args(&["1", "2", "busy"]))
            .err()
            .unwrap_or_default();
        assert!(e.contains("BUSY must be 0 or 1"), "{e}");
    }

    /// The lines carry client.cu's fields, which the kits read.
    #[test]
    fn its_lines_are_the_kits_client_lines() {
        let ready = Event::Ready {
            pid: 7,
            init_ms: 12.3,
        };
        assert_eq!(
            ready.line(),
            "{\"event\":\"ready\",\"pid\":7,\"init_ms\":12.3}\n"
        );
        let result = Event::Result {
            pid: 7,
            init_ms: 12.3,
            init: "ok".into(),
            mps_enabled: Some(1),
            sms: Some(40),
            alloc_mib: Some(2048),
            alloc: Some("CUDA_ERROR_OUT_OF_MEMORY".into()),
        };
        let v: serde_json::Value = serde_json::from_str(&result.line()).unwrap_or_default();
        assert_eq!(v["event"], "result");
        assert_eq!(v["pid"], 7);
        assert_eq!(v["init"], "ok");
        assert_eq!(v["mps_enabled"], 1);
        assert_eq!(v["sms"], 40);
        assert_eq!(v["alloc_mib"], 2048);
        assert_eq!(v["alloc"], "CUDA_ERROR_OUT_OF_MEMORY");
        let failed = Event::failed(0.5, "cuInit: CUDA_ERROR_NO_DEVICE".into());
        let v: serde_json::Value = serde_json::from_str(&failed.line()).unwrap_or_default();
        assert_eq!(v["init"], "cuInit: CUDA_ERROR_NO_DEVICE");
        assert!(
            v.get("alloc").is_none() && v.get("mps_enabled").is_none(),
            "{v}"
        );
        let done = Event::Done {
            pid: 7,
            busy: "ok".into(),
        };
        assert_eq!(
            done.line(),
            "{\"event\":\"done\",\"pid\":7,\"busy\":\"ok\"}\n"
        );
    }

    #[test]
    fn a_missing_library_is_one_result_line_and_a_failure() {
        let mut out = Vec::new();
        let load = Hold {
            mib: 1,
            seconds: 0,
            busy: true,
        };
        assert!(!load.run("/nonexistent/libcuda.so.1", &mut out));
        let text = String::from_utf8_lossy(&out);
        assert_eq!(text.lines().count(), 1, "{text}");
        let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap_or_default();
        assert_eq!(v["event"], "result");
        assert_eq!(v["pid"], std::process::id());
        let init = v["init"].as_str().unwrap_or_default();
        assert!(
            init.starts_with("cannot load /nonexistent/libcuda.so.1"),
            "{init}"
        );
    }

    #[test]
    fn milliseconds_are_kept_to_a_tenth() {
        let t = ms_since(Instant::now() - Duration::from_micros(12_345));
        assert!((12.3..13.5).contains(&t), "{t}");
        assert_eq!(t, (t * 10.0).round() / 10.0);
    }
}
