//! The MPS self-test's CUDA client: the driver API, loaded at run time.
//!
//! GPU nodes carry the driver and seldom a CUDA toolkit, so the client
//! links nothing: it opens the driver's `libcuda.so.1` (`CudaLibrary=`)
//! with `dlopen` and ships its one kernel as PTX text, which the driver
//! compiles itself ([`gpushare::mps::selftest::ptx`]). It runs as a
//! process of its own (`gpu-mps --cuda-probe`, also answered by the
//! prolog's program), started by [`gpushare::mps::selftest::run_client`]
//! as an unprivileged user with a share's environment and a deadline: a
//! driver call that never returns, or a crash inside the driver, ends that
//! process, never the caller. It prints one JSON line, what it saw
//! ([`Seen`]), and the caller judges it.
//!
//! Usage: `--cuda-probe LIBRARY MODE [MIB...]`; MODE `share` (context,
//! kernel, then an allocation of each MIB, each freed), `bypass` (device
//! attributes, then a context that should be refused) or `totals`
//! (device attributes only).
//!
//! `--cuda-probe LIBRARY hold MIB SECONDS BUSY` is one share's load for
//! the hardware kits (tests/hw-check, tests/gpu-slurm-check.sh), on a node
//! with the driver and no CUDA toolkit: it holds MIB MiB and keeps the GPU
//! busy (BUSY 1) or idle (0) for SECONDS, printing event lines as it goes
//! ([`hold`]).

mod hold;

use std::collections::BTreeSet;
use std::ffi::{c_char, c_int, c_uchar, c_uint, c_void, CStr};
use std::process::ExitCode;
use std::time::Instant;

use gpushare::mps::selftest::{self, Allocation, Seen, KERNEL, PTX_TARGETS};
use libloading::Library;

/// The option that makes a program of gpushare's this client.
pub const PROBE_OPTION: &str = gpushare::mps::selftest::PROBE_OPTION;

type CuResult = c_int;
type Device = c_int;
type DevicePtr = u64;

const MULTIPROCESSOR_COUNT: c_int = 16;
const MPS_ENABLED: c_int = 133;
/// Threads per block of the kernel: one warp.
const BLOCK_THREADS: c_uint = 32;
/// Clock cycles each block spins: long enough that the blocks spread over
/// every SM the client may use, short enough to cost nothing.
const SPIN_CYCLES: u64 = 200_000;

/// The driver entry points the client calls, taken from the library.
struct Driver {
    init: unsafe extern "C" fn(c_uint) -> CuResult,
    driver_version: unsafe extern "C" fn(*mut c_int) -> CuResult,
    device_count: unsafe extern "C" fn(*mut c_int) -> CuResult,
    device_get: unsafe extern "C" fn(*mut Device, c_int) -> CuResult,
    attribute: unsafe extern "C" fn(*mut c_int, c_int, Device) -> CuResult,
    total_mem: unsafe extern "C" fn(*mut usize, Device) -> CuResult,
    ctx_retain: unsafe extern "C" fn(*mut *mut c_void, Device) -> CuResult,
    ctx_set_current: unsafe extern "C" fn(*mut c_void) -> CuResult,
    ctx_release: unsafe extern "C" fn(Device) -> CuResult,
    mem_info: unsafe extern "C" fn(*mut usize, *mut usize) -> CuResult,
    mem_alloc: unsafe extern "C" fn(*mut DevicePtr, usize) -> CuResult,
    mem_free: unsafe extern "C" fn(DevicePtr) -> CuResult,
    memset: unsafe extern "C" fn(DevicePtr, c_uchar, usize) -> CuResult,
    module_load: unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> CuResult,
    module_function: unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const c_char) -> CuResult,
    #[allow(clippy::type_complexity)]
    launch: unsafe extern "C" fn(
        *mut c_void,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        *mut c_void,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> CuResult,
    synchronize: unsafe extern "C" fn() -> CuResult,
    copy_to_host: unsafe extern "C" fn(*mut c_void, DevicePtr, usize) -> CuResult,
    error_name: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    /// Kept open for as long as the pointers above are used.
    _library: Library,
}

/// Looks up `name` in `lib` as a function pointer of type `T`.
///
/// # Safety
///
/// `T` must be the C signature of the driver's `name`.
unsafe fn symbol<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
    // SAFETY: the caller names the symbol's true type.
    unsafe { lib.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| format!("{name}: {e}"))
}

impl Driver {
    fn load(path: &str) -> Result<Driver, String> {
        // SAFETY: loading the driver's library runs its initialisers, as
        // any CUDA program does; this process exists only to do so.
        let lib = unsafe { Library::new(path) }.map_err(|e| format!("cannot load {path}: {e}"))?;
        // SAFETY: each type below is the signature of the CUDA driver API
        // function of that name (cuda.h; the `_v2` names are those a
        // program built against CUDA 4 or later calls).
        unsafe {
            Ok(Driver {
                init: symbol(&lib, "cuInit")?,
                driver_version: symbol(&lib, "cuDriverGetVersion")?,
                device_count: symbol(&lib, "cuDeviceGetCount")?,
                device_get: symbol(&lib, "cuDeviceGet")?,
                attribute: symbol(&lib, "cuDeviceGetAttribute")?,
                total_mem: symbol(&lib, "cuDeviceTotalMem_v2")?,
                ctx_retain: symbol(&lib, "cuDevicePrimaryCtxRetain")?,
                ctx_set_current: symbol(&lib, "cuCtxSetCurrent")?,
                ctx_release: symbol(&lib, "cuDevicePrimaryCtxRelease_v2")?,
                mem_info: symbol(&lib, "cuMemGetInfo_v2")?,
                mem_alloc: symbol(&lib, "cuMemAlloc_v2")?,
                mem_free: symbol(&lib, "cuMemFree_v2")?,
                memset: symbol(&lib, "cuMemsetD8_v2")?,
                module_load: symbol(&lib, "cuModuleLoadData")?,
                module_function: symbol(&lib, "cuModuleGetFunction")?,
                launch: symbol(&lib, "cuLaunchKernel")?,
                synchronize: symbol(&lib, "cuCtxSynchronize")?,
                copy_to_host: symbol(&lib, "cuMemcpyDtoH_v2")?,
                error_name: symbol(&lib, "cuGetErrorName")?,
                _library: lib,
            })
        }
    }

    /// The driver's name for `code` (`CUDA_ERROR_OUT_OF_MEMORY`).
    fn name(&self, code: CuResult) -> String {
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorName writes a pointer to a static string, or
        // nothing where it does not know the code.
        let known = unsafe { (self.error_name)(code, &mut text) } == 0 && !text.is_null();
        if known {
            // SAFETY: a NUL-terminated static string of the driver's.
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        } else {
            format!("CUDA error {code}")
        }
    }

    /// `Ok(())` for CUDA_SUCCESS, else the error's name.
    fn check(&self, code: CuResult) -> Result<(), String> {
        if code == 0 {
            Ok(())
        } else {
            Err(self.name(code))
        }
    }
}

/// The client: runs `args` (after the option), prints what it saw.
pub fn answer_as_child(args: &[String]) -> ExitCode {
    let (Some(library), Some(mode)) = (args.first(), args.get(1)) else {
        eprintln!(
            "usage: {PROBE_OPTION} LIBRARY share|bypass|totals [MIB...]\n       \
             {PROBE_OPTION} LIBRARY hold MIB SECONDS BUSY"
        );
        return ExitCode::from(2);
    };
    if mode == "hold" {
        return match hold::Hold::parse(&args[2..]) {
            Ok(load) => load.run_as_child(library),
            Err(e) => {
                eprintln!("{PROBE_OPTION} {library} hold: {e}");
                ExitCode::from(2)
            }
        };
    }
    let Ok(sizes) = args[2..]
        .iter()
        .map(|a| a.parse::<u64>())
        .collect::<Result<Vec<_>, _>>()
    else {
        eprintln!("{PROBE_OPTION}: allocation sizes are whole MiB");
        return ExitCode::from(2);
    };
    let seen = probe(library, mode, &sizes);
    match serde_json::to_string(&seen) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{PROBE_OPTION}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn probe(library: &str, mode: &str, sizes: &[u64]) -> Seen {
    let started = Instant::now();
    let mut seen = Seen::default();
    let driver = match Driver::load(library) {
        Ok(d) => d,
        Err(e) => {
            seen.init_error = Some(e);
            return seen;
        }
    };
    let device = match device(&driver, &mut seen) {
        Ok(d) => d,
        Err(e) => {
            seen.init_error = Some(e);
            return seen;
        }
    };
    if mode == "totals" {
        return seen;
    }
    seen.context_tried = true;
    let mut ctx: *mut c_void = std::ptr::null_mut();
    // SAFETY: ctx is a valid out-pointer; device came from cuDeviceGet.
    let retained = driver.check(unsafe { (driver.ctx_retain)(&mut ctx, device) });
    // SAFETY: the context just retained.
    let current = retained.and_then(|()| driver.check(unsafe { (driver.ctx_set_current)(ctx) }));
    if let Err(e) = current {
        seen.context_error = Some(e);
        return seen;
    }
    seen.context_ms = Some(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
    if mode == "share" {
        in_context(&driver, &mut seen, sizes);
    }
    // SAFETY: releases the retain above; the process ends next.
    unsafe { (driver.ctx_release)(device) };
    seen
}

/// cuInit and the device's attributes (no context needed).
fn device(driver: &Driver, seen: &mut Seen) -> Result<Device, String> {
    // SAFETY: plain calls with valid out-pointers.
    unsafe {
        driver
            .check((driver.init)(0))
            .map_err(|e| format!("cuInit: {e}"))?;
        let mut version = 0;
        if (driver.driver_version)(&mut version) == 0 {
            seen.driver = Some(version);
        }
        let mut count = 0;
        driver
            .check((driver.device_count)(&mut count))
            .map_err(|e| format!("cuDeviceGetCount: {e}"))?;
        seen.devices = Some(count);
        let mut device = 0;
        driver
            .check((driver.device_get)(&mut device, 0))
            .map_err(|e| format!("cuDeviceGet: {e}"))?;
        let mut value = 0;
        if (driver.attribute)(&mut value, MULTIPROCESSOR_COUNT, device) == 0 {
            seen.sms = u32::try_from(value).ok();
        }
        let mut mps = 0;
        if (driver.attribute)(&mut mps, MPS_ENABLED, device) == 0 {
            seen.mps = Some(mps != 0);
        }
        let mut bytes = 0usize;
        if (driver.total_mem)(&mut bytes, device) == 0 {
            seen.memory_mib = Some(bytes as u64 >> 20);
        }
        Ok(device)
    }
}

/// Memory figures, the kernel, the allocations: in the current context.
fn in_context(driver: &Driver, seen: &mut Seen, sizes: &[u64]) {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: valid out-pointers, a current context.
    if unsafe { (driver.mem_info)(&mut free, &mut total) } == 0 {
        seen.mem_info_mib = Some((free as u64 >> 20, total as u64 >> 20));
    }
    match kernel_sms(driver, seen.sms.unwrap_or(1)) {
        Ok((sms, target)) => {
            seen.kernel_sms = Some(sms);
            seen.ptx_target = Some(target.to_owned());
        }
        Err(e) => seen.kernel_error = Some(e),
    }
    for &mib in sizes {
        let mut ptr: DevicePtr = 0;
        let bytes = usize::try_from(mib << 20).unwrap_or(usize::MAX);
        // SAFETY: a valid out-pointer; the memory is never touched.
        let error = driver
            .check(unsafe { (driver.mem_alloc)(&mut ptr, bytes) })
            .err();
        if error.is_none() {
            // SAFETY: the allocation just made.
            unsafe { (driver.mem_free)(ptr) };
        }
        seen.allocations.push(Allocation { mib, error });
    }
}

/// The kernel, loaded: its function and the PTX target the driver took.
struct Kernel {
    function: *mut c_void,
    target: &'static str,
}

/// Loads the kernel's PTX (each of [`PTX_TARGETS`] in turn) in the
/// current context.
fn load_kernel(driver: &Driver) -> Result<Kernel, String> {
    let mut module: *mut c_void = std::ptr::null_mut();
    let mut last = String::new();
    let mut taken = None;
    for (version, target) in PTX_TARGETS {
        let text = selftest::ptx(version, target);
        // SAFETY: a NUL-terminated PTX image, alive for the call.
        match driver.check(unsafe { (driver.module_load)(&mut module, text.as_ptr().cast()) }) {
            Ok(()) => {
                taken = Some(target);
                break;
            }
            Err(e) => last = format!("the driver took none of its PTX ({target}: {e})"),
        }
    }
    let target = taken.ok_or(last)?;
    let mut function: *mut c_void = std::ptr::null_mut();
    let name = format!("{KERNEL}\0");
    // SAFETY: the module just loaded, a NUL-terminated name.
    let found = unsafe { (driver.module_function)(&mut function, module, name.as_ptr().cast()) };
    driver
        .check(found)
        .map_err(|e| format!("cuModuleGetFunction: {e}"))?;
    Ok(Kernel { function, target })
}

/// The blocks of one launch on a GPU of `sms` SMs: many per SM, so that
/// they spread over every SM the client may use.
fn blocks_for(sms: u32) -> u32 {
    sms.saturating_mul(64).clamp(64, 65_535)
}

/// Launches `kernel` over `blocks` blocks, each spinning `spin` clock
/// cycles and writing its SM to `out` (room for `blocks` u32), and waits
/// for it.
fn run_kernel(
    driver: &Driver,
    kernel: &Kernel,
    blocks: u32,
    out: DevicePtr,
    spin: u64,
) -> Result<(), String> {
    let (mut out, mut spin) = (out, spin);
    let mut params = [
        (&mut out as *mut DevicePtr).cast::<c_void>(),
        (&mut spin as *mut u64).cast::<c_void>(),
    ];
    // SAFETY: the kernel takes two u64 parameters, pointed at by params,
    // which outlive the launch and the synchronisation after it; the
    // caller gives `out` one u32 per block.
    driver
        .check(unsafe {
            (driver.launch)(
                kernel.function,
                blocks,
                1,
                1,
                BLOCK_THREADS,
                1,
                1,
                0,
                std::ptr::null_mut(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
        // SAFETY: waits for the launch above.
        .and_then(|()| driver.check(unsafe { (driver.synchronize)() }))
}

/// Runs the kernel over many blocks; the distinct SMs they ran on, and
/// the PTX target the driver took.
fn kernel_sms(driver: &Driver, sms: u32) -> Result<(u32, &'static str), String> {
    let kernel = load_kernel(driver)?;
    let blocks = blocks_for(sms);
    let bytes = blocks as usize * 4;
    let mut out: DevicePtr = 0;
    // SAFETY: a valid out-pointer.
    let allocated = unsafe { (driver.mem_alloc)(&mut out, bytes) };
    driver
        .check(allocated)
        .map_err(|e| format!("cuMemAlloc: {e}"))?;
    let ran = run_kernel(driver, &kernel, blocks, out, SPIN_CYCLES);
    let mut ids = vec![0u32; blocks as usize];
    let copied = ran.and_then(|()| {
        // SAFETY: `ids` holds `bytes` bytes; `out` as many on the device.
        let code = unsafe { (driver.copy_to_host)(ids.as_mut_ptr().cast(), out, bytes) };
        driver.check(code)
    });
    // SAFETY: the allocation above.
    unsafe { (driver.mem_free)(out) };
    copied.map_err(|e| format!("the kernel: {e}"))?;
    let distinct: BTreeSet<u32> = ids.into_iter().collect();
    Ok((
        u32::try_from(distinct.len()).unwrap_or(u32::MAX),
        kernel.target,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_an_init_error_not_a_crash() {
        let seen = probe("/nonexistent/libcuda.so.1", "share", &[1]);
        let e = seen.init_error.unwrap_or_default();
        assert!(
            e.starts_with("cannot load /nonexistent/libcuda.so.1"),
            "{e}"
        );
        assert!(!seen.context_tried);
    }
}
