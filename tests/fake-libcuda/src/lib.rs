//! A stand-in for NVIDIA's `libcuda.so.1` on the test cluster (there is no
//! GPU here): the driver-API calls `gpu-mps selftest` makes
//! (node/src/cuda_probe.rs), answered as a driver under MPS would answer
//! them, so that the probe's verdicts can be tested, its failures
//! included. The harness installs it as `libcuda.so.1` beside the
//! stand-in control program and `nvidia-smi`
//! (`testcluster::standin::install_libcuda`) and names it by
//! `CudaLibrary=` in the cluster's gpu_mps.conf.
//!
//! - It reads beside itself: `cuda-gpus` (lines `INDEX SMS MEMORY_MIB`;
//!   none: 132 SMs and 81920 MiB per GPU), `compute-mode-N` (the stand-in
//!   `nvidia-smi`'s file), `daemon-gpu-N` (the pid of GPU N's stand-in
//!   MPS daemon) and the fault files: `cuda-ignore-limits` (MPS clients
//!   get the whole GPU, as a driver that silently drops the limits),
//!   `cuda-no-device` (cuInit: 100), `cuda-hang` (cuInit sleeps an hour),
//!   `cuda-bad-ptx` (cuModuleLoadData: 218).
//! - It logs each call that matters in `cuda.log` beside itself, one line
//!   each: `init gpu=N uid=U result=C`, `ctx gpu=N mps=yes|no uid=U
//!   result=C`, then `limits gpu=N sms=S memory_mib=M` for a context
//!   made, `attr`, `meminfo`, `alloc`, `free`, `module`, `launch`,
//!   `release`, `memset`.
//! - The GPU: `GPUSHARE_GPU`, else the first of `CUDA_VISIBLE_DEVICES`,
//!   else 0. An MPS client names a pipe directory whose `control` holds
//!   a live pid: its SMs are its `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` (down
//!   to a TPC), its memory `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`; a pipe
//!   without a live daemon fails its context (805). It starts the GPU's
//!   server where none runs and registers with it (`mps_world.rs`: a
//!   neighbour killed mid-kernel fails its next call). Any other process
//!   gets the whole GPU as its compute mode allows: Prohibited never,
//!   Exclusive_Process not while an MPS server or another process holds it
//!   (the stand-in `cuda-client`'s lock; a daemon alone holds nothing, as
//!   on a real GPU), Default always.
//! - The kernel `gpushare_smids` writes `out[b] = b % SMs` for each block
//!   and takes a nanosecond for each clock cycle its blocks spin (its
//!   second parameter; [`model::kernel_time`]): `cuCtxSynchronize` waits
//!   that long for the kernels launched since the last wait.
//!
//! Every export catches panics (none may unwind into C) and checks each
//! pointer it is given for null; the pure rules are in `model.rs`, the
//! files in `place.rs`.

// The driver's own names.
#![allow(non_snake_case)]

mod model;
pub mod mps_world;
mod place;

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::fs::File;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use model::{code, Kind, Limits, Share};

/// Allocations up to this size get host memory (a kernel's output);
/// larger ones an address that is never read or written.
const BACKED: u64 = 64 << 20;

/// The one kernel the stand-in runs.
const ENTRY: &str = "gpushare_smids";

/// The version `cuDriverGetVersion` answers (CUDA 12.8).
const DRIVER_VERSION: c_int = 12_080;

/// The addresses of these bytes are the handles it gives out: the primary
/// context, the module, the function.
static HANDLES: [u8; 3] = [0; 3];
const CONTEXT: usize = 0;
const MODULE: usize = 1;
const FUNCTION: usize = 2;

fn handle(which: usize) -> *mut c_void {
    HANDLES.get(which).map_or(std::ptr::null_mut(), |b| {
        std::ptr::from_ref(b).cast_mut().cast()
    })
}

/// What the process's environment said at `cuInit` (a driver reads it then).
struct Process {
    gpu: u32,
    visible: Option<String>,
    pipe: Option<PathBuf>,
    limits: Limits,
}

impl Process {
    fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok();
        let visible = var("CUDA_VISIBLE_DEVICES");
        Process {
            gpu: model::which_gpu(var("GPUSHARE_GPU").as_deref(), visible.as_deref()),
            visible,
            pipe: std::env::var_os("CUDA_MPS_PIPE_DIRECTORY")
                .filter(|p| !p.is_empty())
                .map(PathBuf::from),
            limits: Limits {
                percentage: model::percentage(var("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE").as_deref()),
                memory: var("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
                    .as_deref()
                    .and_then(model::memory_limit),
            },
        }
    }

    fn device_count(&self) -> usize {
        model::device_count(self.visible.as_deref(), place::listed_gpus().len())
    }

    /// The GPU behind device `ordinal`: device 0 is the process's GPU.
    fn device_gpu(&self, ordinal: c_int) -> Option<u32> {
        let ordinal = usize::try_from(ordinal).ok()?;
        if ordinal >= self.device_count() {
            return None;
        }
        if ordinal == 0 {
            return Some(self.gpu);
        }
        let listed = self
            .visible
            .as_deref()
            .and_then(|v| v.split(',').nth(ordinal)?.trim().parse().ok());
        listed.or_else(|| u32::try_from(ordinal).ok())
    }

    /// Whether it is an MPS client (its daemon's pid, checked now).
    fn kind(&self) -> Kind {
        let live = self
            .pipe
            .as_ref()
            .is_some_and(|p| place::names_live_process(&p.join("control")));
        model::kind(self.pipe.is_some(), live)
    }

    fn share(&self, gpu: u32) -> Option<Share> {
        let ignore = place::fault("cuda-ignore-limits");
        Some(model::share_of(
            place::gpu(gpu)?,
            self.kind(),
            &self.limits,
            ignore,
        ))
    }
}

/// The primary context, while retained.
struct Context {
    refs: u32,
    gpu: u32,
    share: Share,
    used: u64,
    current: bool,
    module: bool,
    /// How long the kernels launched since the last synchronisation run.
    running: Duration,
    /// The GPU's lock, held by a process outside MPS in Exclusive_Process.
    _held: Option<File>,
    /// An MPS client's server (its pid) where the stand-in runs servers.
    server: Option<u32>,
    /// A fault that ended this client's work: every later call fails so.
    fault: Option<c_int>,
}

struct Allocation {
    bytes: u64,
    host: Option<Vec<u8>>,
}

struct State {
    process: Option<Process>,
    context: Option<Context>,
    allocations: BTreeMap<u64, Allocation>,
    next_address: u64,
}

static STATE: Mutex<State> = Mutex::new(State {
    process: None,
    context: None,
    allocations: BTreeMap::new(),
    next_address: FIRST_ADDRESS,
});

/// Where device addresses start (never a host pointer: nothing reads them
/// as one).
const FIRST_ADDRESS: u64 = 0x7000_0000_0000;

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

impl State {
    /// The current context, or why there is none.
    fn context(&mut self) -> Result<&mut Context, c_int> {
        if self.process.is_none() {
            return Err(code::NOT_INITIALIZED);
        }
        self.context
            .as_mut()
            .filter(|c| c.current)
            .ok_or(code::INVALID_CONTEXT)
    }

    /// Whether one allocation holds the `len` bytes at device `address`.
    fn within(&self, address: u64, len: u64) -> bool {
        self.allocations
            .range(..=address)
            .next_back()
            .is_some_and(|(&base, a)| {
                (address - base)
                    .checked_add(len)
                    .is_some_and(|end| end <= a.bytes)
            })
    }

    /// `len` bytes of host memory at device `address`, where an
    /// allocation backs them all.
    fn host(&mut self, address: u64, len: u64) -> Option<&mut [u8]> {
        let (&base, allocation) = self.allocations.range_mut(..=address).next_back()?;
        let start = address - base;
        let end = start.checked_add(len).filter(|&e| e <= allocation.bytes)?;
        let host = allocation.host.as_mut()?;
        host.get_mut(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
    }
}

/// Runs an export's body: a panic becomes CUDA_ERROR_UNKNOWN, never an
/// unwind into the caller's C frames.
fn guarded(call: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(call)).unwrap_or(code::UNKNOWN)
}

fn status(result: Result<(), c_int>) -> c_int {
    result.err().unwrap_or(code::SUCCESS)
}

/// Writes `value` where `out` points.
///
/// # Safety
/// `out` is null (refused) or points at a writable, aligned `T`.
unsafe fn put<T>(out: *mut T, value: T) -> Result<(), c_int> {
    if out.is_null() {
        return Err(code::INVALID_VALUE);
    }
    // SAFETY: not null, and the caller vouches for the rest.
    unsafe { out.write(value) };
    Ok(())
}

/// # Safety
/// None: it takes no pointer.
#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> c_int {
    guarded(|| {
        if place::fault("cuda-hang") {
            place::log(&format!("init hangs uid={}", place::uid()));
            std::thread::sleep(Duration::from_secs(3600));
        }
        let process = Process::from_env();
        let result = if flags != 0 {
            code::INVALID_VALUE
        } else if place::fault("cuda-no-device")
            || process.device_count() == 0
            || place::gpu(process.gpu).is_none()
        {
            code::NO_DEVICE
        } else {
            code::SUCCESS
        };
        place::log(&format!(
            "init gpu={} uid={} result={result}",
            process.gpu,
            place::uid()
        ));
        if result == code::SUCCESS {
            state().process = Some(process);
        }
        result
    })
}

/// # Safety
/// `version` is null or points at a writable int.
#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> c_int {
    // SAFETY: as this function's contract says.
    guarded(|| status(unsafe { put(version, DRIVER_VERSION) }))
}

/// # Safety
/// `count` is null or points at a writable int.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> c_int {
    guarded(|| {
        let Some(n) = state().process.as_ref().map(Process::device_count) else {
            return code::NOT_INITIALIZED;
        };
        let n = c_int::try_from(n).unwrap_or(c_int::MAX);
        // SAFETY: as this function's contract says.
        status(unsafe { put(count, n) })
    })
}

/// # Safety
/// `device` is null or points at a writable int.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut c_int, ordinal: c_int) -> c_int {
    guarded(|| {
        let Some(found) = state().process.as_ref().map(|p| p.device_gpu(ordinal)) else {
            return code::NOT_INITIALIZED;
        };
        if found.is_none() {
            return code::INVALID_DEVICE;
        }
        // SAFETY: as this function's contract says.
        status(unsafe { put(device, ordinal) })
    })
}

/// The process's GPU behind `device` and what the process gets of it.
fn device_share(device: c_int) -> Result<(u32, Share, Kind), c_int> {
    let st = state();
    let process = st.process.as_ref().ok_or(code::NOT_INITIALIZED)?;
    let gpu = process.device_gpu(device).ok_or(code::INVALID_DEVICE)?;
    let share = process.share(gpu).ok_or(code::INVALID_DEVICE)?;
    Ok((gpu, share, process.kind()))
}

/// # Safety
/// `value` is null or points at a writable int.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    value: *mut c_int,
    attrib: c_int,
    device: c_int,
) -> c_int {
    guarded(|| {
        let (gpu, share, kind) = match device_share(device) {
            Ok(found) => found,
            Err(e) => return e,
        };
        let answer = match attrib {
            // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
            16 => c_int::try_from(share.sms).unwrap_or(c_int::MAX),
            // CU_DEVICE_ATTRIBUTE_MPS_ENABLED
            133 => c_int::from(kind == Kind::Mps),
            // Compute capability 9.0, as an H100's.
            75 => 9,
            76 => 0,
            _ => return code::INVALID_VALUE,
        };
        place::log(&format!("attr gpu={gpu} attrib={attrib} value={answer}"));
        // SAFETY: as this function's contract says.
        status(unsafe { put(value, answer) })
    })
}

/// # Safety
/// `bytes` is null or points at a writable size_t.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, device: c_int) -> c_int {
    guarded(|| {
        let total = match device_share(device).map(|(gpu, ..)| place::gpu(gpu)) {
            Ok(Some(gpu)) => gpu.memory_bytes(),
            Ok(None) => return code::INVALID_DEVICE,
            Err(e) => return e,
        };
        // SAFETY: as this function's contract says.
        status(unsafe { put(bytes, usize::try_from(total).unwrap_or(usize::MAX)) })
    })
}

/// # Safety
/// `ctx` is null or points at a writable pointer.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut *mut c_void, device: c_int) -> c_int {
    guarded(|| {
        if ctx.is_null() {
            return code::INVALID_VALUE;
        }
        let mut guard = state();
        // The fields apart: the process read while the context changes.
        let st = &mut *guard;
        let Some(process) = st.process.as_ref() else {
            return code::NOT_INITIALIZED;
        };
        let Some(gpu) = process.device_gpu(device) else {
            return code::INVALID_DEVICE;
        };
        if let Some(context) = st.context.as_mut() {
            context.refs += 1;
            // SAFETY: not null, and the caller vouches for the rest.
            return status(unsafe { put(ctx, handle(CONTEXT)) });
        }
        let kind = process.kind();
        let (result, held, server) = match kind {
            Kind::Mps => {
                let (result, server) = mps_context(gpu, process.pipe.as_deref());
                (result, None, server)
            }
            Kind::NoDaemon => (code::MPS_CONNECTION_FAILED, None, None),
            Kind::Direct => {
                let (result, held) = direct_context(gpu);
                (result, held, None)
            }
        };
        let share = process.share(gpu);
        place::log(&format!(
            "ctx gpu={gpu} mps={} uid={} result={result}",
            if kind == Kind::Direct { "no" } else { "yes" },
            place::uid()
        ));
        let Some(share) = share.filter(|_| result == code::SUCCESS) else {
            return if result == code::SUCCESS {
                code::INVALID_DEVICE
            } else {
                result
            };
        };
        place::log(&format!(
            "limits gpu={gpu} sms={} memory_mib={}",
            share.sms,
            share.memory >> 20
        ));
        st.context = Some(Context {
            refs: 1,
            gpu,
            share,
            used: 0,
            current: false,
            module: false,
            running: Duration::ZERO,
            _held: held,
            server,
            fault: None,
        });
        if let Some(server) = server {
            mps_world::register(&place::clients_dir(), gpu, std::process::id(), server);
        }
        // SAFETY: not null, and the caller vouches for the rest.
        status(unsafe { put(ctx, handle(CONTEXT)) })
    })
}

/// A context outside MPS on GPU `gpu`: its result and, in
/// Exclusive_Process, the GPU's lock it then holds.
/// An MPS client's context: its GPU's server, started for it where none
/// runs (one start at a time per GPU, under a lock in the clients'
/// directory). A server cannot start where a process outside MPS holds
/// the GPU in Exclusive_Process: the client fails as the driver's does.
/// Without the stand-in control program beside the library no server is
/// modelled.
fn mps_context(gpu: u32, pipe: Option<&std::path::Path>) -> (c_int, Option<u32>) {
    let Some(program) = place::control_program() else {
        return (code::SUCCESS, None);
    };
    let _lock = place::clients_lock(gpu);
    if let Some(server) = mps_world::server_on(place::here(), gpu) {
        return (code::SUCCESS, Some(server.pid));
    }
    if place::mode(gpu) == model::Mode::ExclusiveProcess && place::hold(gpu).is_err() {
        return (code::DEVICE_UNAVAILABLE, None);
    }
    let pipe = pipe.unwrap_or(std::path::Path::new("/tmp/nvidia-mps"));
    match mps_world::start_server(&program, place::here(), gpu, place::uid(), pipe) {
        Ok(pid) => (code::SUCCESS, Some(pid)),
        Err(_) => (code::MPS_CONNECTION_FAILED, None),
    }
}

/// The fault that ends an MPS client's work now, if any: its own work
/// terminated through the control daemon, or a neighbour of its server
/// killed with kernels in flight (sticky, as the driver's error is).
fn mps_fault(context: &mut Context) -> Option<c_int> {
    if context.fault.is_some() {
        return context.fault;
    }
    let server = context.server?;
    let me = std::process::id();
    let all = mps_world::clients(&place::clients_dir());
    let fault = if all
        .iter()
        .any(|c| c.pid == me && c.gpu == context.gpu && c.terminated)
    {
        Some(code::MPS_CLIENT_TERMINATED)
    } else {
        mps_world::fault_of(&all, server, me).map(|pid| {
            place::log(&format!(
                "fault gpu={} server={server} client={me}: client {pid} was killed with work in flight",
                context.gpu
            ));
            code::ILLEGAL_ADDRESS
        })
    };
    context.fault = fault;
    fault
}

fn direct_context(gpu: u32) -> (c_int, Option<File>) {
    let mode = place::mode(gpu);
    let (held_by_another, held) = if mode == model::Mode::ExclusiveProcess {
        match place::hold(gpu) {
            Ok(held) => (false, held),
            Err(()) => (true, None),
        }
    } else {
        (false, None)
    };
    let result = model::direct_context(mode, place::server_runs(gpu), held_by_another);
    (result, held.filter(|_| result == code::SUCCESS))
}

/// # Safety
/// None: `ctx` is compared, never read.
#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: *mut c_void) -> c_int {
    guarded(|| {
        let mut st = state();
        if st.process.is_none() {
            return code::NOT_INITIALIZED;
        }
        match st.context.as_mut() {
            _ if ctx.is_null() => {
                if let Some(context) = st.context.as_mut() {
                    context.current = false;
                }
                code::SUCCESS
            }
            Some(context) if ctx == handle(CONTEXT) => {
                context.current = true;
                code::SUCCESS
            }
            _ => code::INVALID_CONTEXT,
        }
    })
}

/// # Safety
/// None: it takes no pointer.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(device: c_int) -> c_int {
    guarded(|| {
        let mut st = state();
        let Some(process) = st.process.as_ref() else {
            return code::NOT_INITIALIZED;
        };
        if process.device_gpu(device).is_none() {
            return code::INVALID_DEVICE;
        }
        let Some(context) = st.context.as_mut() else {
            return code::INVALID_CONTEXT;
        };
        context.refs -= 1;
        if context.refs == 0 {
            place::log(&format!("release gpu={}", context.gpu));
            if context.server.is_some() {
                mps_world::unregister(&place::clients_dir(), context.gpu, std::process::id());
            }
            st.context = None;
            st.allocations.clear();
        }
        code::SUCCESS
    })
}

/// # Safety
/// `free` and `total` are null or point at writable size_t's.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> c_int {
    guarded(|| {
        let mut st = state();
        let context = match st.context() {
            Ok(c) => c,
            Err(e) => return e,
        };
        let limit = context.share.memory;
        let left = limit.saturating_sub(context.used);
        place::log(&format!(
            "meminfo free_mib={} total_mib={}",
            left >> 20,
            limit >> 20
        ));
        let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        // SAFETY: as this function's contract says.
        status(unsafe { put(free, size(left)).and_then(|()| put(total, size(limit))) })
    })
}

/// # Safety
/// `dptr` is null or points at a writable u64.
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut u64, bytes: usize) -> c_int {
    guarded(|| {
        if dptr.is_null() {
            return code::INVALID_VALUE;
        }
        let mut st = state();
        let next = st.next_address;
        let context = match st.context() {
            Ok(c) => c,
            Err(e) => return e,
        };
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        let result = if bytes == 0 {
            code::INVALID_VALUE
        } else if model::over_limit(context.used, bytes, context.share.memory) {
            code::OUT_OF_MEMORY
        } else {
            code::SUCCESS
        };
        place::log(&format!(
            "alloc mib={} used_mib={} limit_mib={} result={result}",
            bytes >> 20,
            context.used >> 20,
            context.share.memory >> 20
        ));
        if result != code::SUCCESS {
            return result;
        }
        // Each allocation starts on a 2 MiB boundary of its own.
        let Some(after) = bytes
            .checked_next_multiple_of(2 << 20)
            .and_then(|b| next.checked_add(b))
        else {
            return code::OUT_OF_MEMORY;
        };
        let host = usize::try_from(bytes)
            .ok()
            .filter(|_| bytes <= BACKED)
            .map(|n| vec![0u8; n]);
        context.used += bytes;
        st.next_address = after;
        st.allocations.insert(next, Allocation { bytes, host });
        // SAFETY: not null, and the caller vouches for the rest.
        status(unsafe { put(dptr, next) })
    })
}

/// # Safety
/// None: the address is looked up, never read.
#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: u64) -> c_int {
    guarded(|| {
        let mut st = state();
        if let Err(e) = st.context() {
            return e;
        }
        let Some(freed) = st.allocations.remove(&dptr) else {
            return code::INVALID_VALUE;
        };
        if let Ok(context) = st.context() {
            context.used -= freed.bytes;
        }
        place::log(&format!("free mib={}", freed.bytes >> 20));
        code::SUCCESS
    })
}

/// # Safety
/// `module` is null or points at a writable pointer; `image` is null or
/// a NUL-terminated text.
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut *mut c_void, image: *const c_void) -> c_int {
    guarded(|| {
        if module.is_null() || image.is_null() {
            return code::INVALID_VALUE;
        }
        let mut st = state();
        let context = match st.context() {
            Ok(c) => c,
            Err(e) => return e,
        };
        // SAFETY: not null; NUL-terminated PTX text, as the contract says.
        let text = unsafe { CStr::from_ptr(image.cast::<c_char>()) };
        let entry = format!(".entry {ENTRY}");
        let has_entry = text.to_string_lossy().contains(&entry);
        let result = if place::fault("cuda-bad-ptx") || !has_entry {
            code::INVALID_PTX
        } else {
            code::SUCCESS
        };
        place::log(&format!("module result={result}"));
        if result != code::SUCCESS {
            return result;
        }
        context.module = true;
        // SAFETY: not null, and the caller vouches for the rest.
        status(unsafe { put(module, handle(MODULE)) })
    })
}

/// # Safety
/// `function` is null or points at a writable pointer; `name` is null or
/// a NUL-terminated text.
#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    function: *mut *mut c_void,
    module: *mut c_void,
    name: *const c_char,
) -> c_int {
    guarded(|| {
        if function.is_null() || name.is_null() {
            return code::INVALID_VALUE;
        }
        let mut st = state();
        match st.context() {
            Ok(c) if c.module && module == handle(MODULE) => {}
            Ok(_) => return code::INVALID_HANDLE,
            Err(e) => return e,
        }
        // SAFETY: not null; NUL-terminated, as the contract says.
        let name = unsafe { CStr::from_ptr(name) };
        if name.to_bytes() != ENTRY.as_bytes() {
            return code::NOT_FOUND;
        }
        // SAFETY: not null, and the caller vouches for the rest.
        status(unsafe { put(function, handle(FUNCTION)) })
    })
}

/// # Safety
/// `params` is null or points at the kernel's parameters, the first a
/// pointer to the u64 device address of its output.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // the driver's signature
pub unsafe extern "C" fn cuLaunchKernel(
    f: *mut c_void,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    _shared_bytes: c_uint,
    _stream: *mut c_void,
    params: *mut *mut c_void,
    _extra: *mut *mut c_void,
) -> c_int {
    guarded(|| {
        let mut st = state();
        if let Ok(context) = st.context() {
            if let Some(fault) = mps_fault(context) {
                return fault;
            }
        }
        let sms = match st.context() {
            Ok(c) if c.module && f == handle(FUNCTION) => c.share.sms,
            Ok(_) => return code::INVALID_HANDLE,
            Err(e) => return e,
        };
        let dims = [grid_x, grid_y, grid_z, block_x, block_y, block_z];
        if dims.contains(&0) || params.is_null() {
            return code::INVALID_VALUE;
        }
        // SAFETY: params is not null and points at the kernel's parameter
        // pointers, the first of them `out`'s.
        let first = unsafe { *params };
        if first.is_null() {
            return code::INVALID_VALUE;
        }
        // SAFETY: the first parameter points at a u64 (CUdeviceptr); read
        // unaligned, whatever the caller's layout.
        let out = unsafe { first.cast::<u64>().read_unaligned() };
        // SAFETY: the kernel has a second parameter, so params holds a
        // second pointer: to a u64 (the cycles each block spins), or null.
        let second = unsafe { *params.add(1) };
        if second.is_null() {
            return code::INVALID_VALUE;
        }
        // SAFETY: not null, a u64 as the kernel's signature says.
        let spin = unsafe { second.cast::<u64>().read_unaligned() };
        let result = match st.host(out, u64::from(grid_x) * 4) {
            Some(buffer) => {
                for (block, slot) in (0..grid_x).zip(buffer.chunks_exact_mut(4)) {
                    slot.copy_from_slice(&(block % sms.max(1)).to_ne_bytes());
                }
                code::SUCCESS
            }
            None => code::ILLEGAL_ADDRESS,
        };
        place::log(&format!(
            "launch blocks={grid_x} sms={sms} spin={spin} result={result}"
        ));
        if result == code::SUCCESS {
            if let Ok(context) = st.context() {
                context.running = context.running.saturating_add(model::kernel_time(spin));
                if context.server.is_some() {
                    mps_world::set_busy(
                        &place::clients_dir(),
                        context.gpu,
                        std::process::id(),
                        true,
                    );
                }
            }
        }
        result
    })
}

/// # Safety
/// None: it takes no pointer.
#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> c_int {
    guarded(|| {
        // Taken under the lock, waited for without it.
        let (running, gpu, mps) = match state().context() {
            Ok(context) => {
                if let Some(fault) = mps_fault(context) {
                    return fault;
                }
                (
                    std::mem::take(&mut context.running),
                    context.gpu,
                    context.server.is_some(),
                )
            }
            Err(e) => return e,
        };
        std::thread::sleep(running);
        if !mps {
            return code::SUCCESS;
        }
        // A neighbour killed while these kernels ran fails them.
        let fault = state().context().ok().and_then(mps_fault);
        if fault.is_none() {
            mps_world::set_busy(&place::clients_dir(), gpu, std::process::id(), false);
        }
        fault.unwrap_or(code::SUCCESS)
    })
}

/// # Safety
/// None: the address is looked up, and written only where an allocation
/// of this library's backs it.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8_v2(dptr: u64, value: u8, count: usize) -> c_int {
    guarded(|| {
        let mut st = state();
        if let Err(e) = st.context() {
            return e;
        }
        let len = u64::try_from(count).unwrap_or(u64::MAX);
        let result = if st.within(dptr, len) {
            if let Some(bytes) = st.host(dptr, len) {
                bytes.fill(value);
            }
            code::SUCCESS
        } else {
            code::INVALID_VALUE
        };
        place::log(&format!("memset mib={} result={result}", len >> 20));
        result
    })
}

/// # Safety
/// `dst` is null or points at `bytes` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, bytes: usize) -> c_int {
    guarded(|| {
        if dst.is_null() {
            return code::INVALID_VALUE;
        }
        let mut st = state();
        if let Err(e) = st.context() {
            return e;
        }
        let len = u64::try_from(bytes).unwrap_or(u64::MAX);
        let Some(from) = st.host(src, len) else {
            return code::INVALID_VALUE;
        };
        // SAFETY: `from` holds `bytes` bytes of an allocation of ours, dst
        // is not null and (the contract) has room for them; a caller's
        // buffer never overlaps memory this library owns.
        unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), dst.cast::<u8>(), from.len()) };
        code::SUCCESS
    })
}

/// # Safety
/// `name` is null or points at a writable pointer.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: c_int, name: *mut *const c_char) -> c_int {
    guarded(|| match model::error_name(error) {
        // SAFETY: as this function's contract says; the name is static.
        Some(text) => status(unsafe { put(name, text.as_ptr()) }),
        None => code::INVALID_VALUE,
    })
}
