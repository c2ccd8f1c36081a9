//! The built stand-in, loaded as the probe loads the driver (dlopen of
//! `libcuda.so.1`) from a directory of its own, in a child process per
//! case (the driver reads its environment once, at cuInit): what it
//! answers must be what it claims, or the suites would test the probe
//! against a stand-in that lies.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::fs;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Set in the child: the directory of the library to load.
const CHILD: &str = "FAKE_LIBCUDA_TEST_DIR";

/// Set in the child: the share's memory limit the probe allocates against.
const LIMIT_MIB: &str = "FAKE_LIBCUDA_TEST_LIMIT_MIB";

const PTX: &str = ".version 7.0\n.target sm_70\n.address_size 64\n\
    .visible .entry gpushare_smids(.param .u64 out, .param .u64 spin_cycles)\n{\n ret;\n}\n\0";

/// The library this `cargo test` built: in the test's own `deps`
/// directory (cargo copies it to target/<profile> only for a build).
fn built() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().join("libcuda.so")
}

/// A node's stand-in directory: the library as `libcuda.so.1`.
fn node() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::copy(built(), dir.path().join("libcuda.so.1")).unwrap();
    dir
}

/// Runs the probe's calls in a child with exactly `env` of CUDA's and
/// gpushare's variables; its answers by name.
fn probe(dir: &Path, env: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "child_probe",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD, dir);
    for (name, _) in std::env::vars() {
        if name.starts_with("CUDA_") || name.starts_with("GPUSHARE_") {
            cmd.env_remove(name);
        }
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .filter_map(|l| l.strip_prefix("probe "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn get<'a>(answers: &'a BTreeMap<String, String>, key: &str) -> &'a str {
    answers.get(key).map_or("", String::as_str)
}

fn log(dir: &Path) -> String {
    fs::read_to_string(dir.join("cuda.log")).unwrap_or_default()
}

/// A pipe directory whose `control` holds this test's pid (a live one).
fn live_pipe(dir: &Path) -> PathBuf {
    let pipe = dir.join("pipe");
    fs::create_dir_all(&pipe).unwrap();
    fs::write(pipe.join("control"), format!("{}\n", std::process::id())).unwrap();
    pipe
}

fn share_env(pipe: &Path, gpu: &str, percentage: &str, limit: &str) -> Vec<(&'static str, String)> {
    vec![
        ("CUDA_VISIBLE_DEVICES", "0".into()),
        ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", percentage.into()),
        ("CUDA_MPS_PIPE_DIRECTORY", pipe.display().to_string()),
        ("CUDA_MPS_LOG_DIRECTORY", "/nonexistent".into()),
        ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", limit.into()),
        ("GPUSHARE_GPU", gpu.into()),
        ("CUDA_DEVICE_ORDER", "PCI_BUS_ID".into()),
    ]
}

fn as_refs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

#[test]
fn an_mps_client_gets_its_sms_and_memory_and_no_more() {
    let dir = node();
    let pipe = live_pipe(dir.path());
    let mut env = share_env(&pipe, "0", "25", "0=1024M");
    env.push((LIMIT_MIB, "1024".into()));
    let answers = probe(dir.path(), &as_refs(&env));
    assert_eq!(get(&answers, "init"), "0", "{answers:?}");
    assert_eq!(get(&answers, "ctx"), "0", "{answers:?}");
    assert_eq!(get(&answers, "sms_attr"), "32", "{answers:?}");
    assert_eq!(get(&answers, "smids"), "32", "{answers:?}");
    assert_eq!(get(&answers, "mps_attr"), "1", "{answers:?}");
    assert_eq!(get(&answers, "total_mem_mib"), "81920", "{answers:?}");
    assert_eq!(get(&answers, "meminfo_total_mib"), "1024", "{answers:?}");
    assert_eq!(get(&answers, "alloc_half"), "0", "{answers:?}");
    assert_eq!(get(&answers, "alloc_over"), "2", "{answers:?}");
    assert_eq!(get(&answers, "memset"), "0", "{answers:?}");
    assert_eq!(get(&answers, "memset_past"), "1", "{answers:?}");
    assert_eq!(get(&answers, "memset_word"), "0x7070707", "{answers:?}");
    assert_eq!(get(&answers, "memset_half"), "0", "{answers:?}");
    let busy: u64 = get(&answers, "busy_ms").parse().unwrap_or(0);
    assert!((50..5_000).contains(&busy), "{answers:?}");
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    assert!(
        log(dir.path()).contains(&format!("ctx gpu=0 mps=yes uid={uid} result=0")),
        "{}",
        log(dir.path())
    );

    // Another GPU as cuda-gpus lists it, chosen by GPUSHARE_GPU.
    fs::write(dir.path().join("cuda-gpus"), "0 132 81920\n2 108 40960\n").unwrap();
    let env = share_env(&pipe, "2", "50", "2G");
    let answers = probe(dir.path(), &as_refs(&env));
    assert_eq!(get(&answers, "sms_attr"), "54", "{answers:?}");
    assert_eq!(get(&answers, "smids"), "54", "{answers:?}");
    assert_eq!(get(&answers, "total_mem_mib"), "40960", "{answers:?}");
    assert_eq!(get(&answers, "meminfo_total_mib"), "2048", "{answers:?}");
    assert!(
        log(dir.path()).contains("ctx gpu=2 mps=yes"),
        "{}",
        log(dir.path())
    );
}

#[test]
fn a_driver_that_drops_the_limits_gives_the_whole_gpu() {
    let dir = node();
    let pipe = live_pipe(dir.path());
    fs::write(dir.path().join("cuda-ignore-limits"), "").unwrap();
    let mut env = share_env(&pipe, "0", "25", "0=1024M");
    env.push((LIMIT_MIB, "1024".into()));
    let answers = probe(dir.path(), &as_refs(&env));
    assert_eq!(get(&answers, "sms_attr"), "132", "{answers:?}");
    assert_eq!(get(&answers, "smids"), "132", "{answers:?}");
    assert_eq!(get(&answers, "meminfo_total_mib"), "81920", "{answers:?}");
    assert_eq!(get(&answers, "alloc_over"), "0", "{answers:?}");
}

#[test]
fn a_client_without_mps_is_refused_while_the_gpu_is_exclusive() {
    let dir = node();
    let bypass = [
        ("CUDA_VISIBLE_DEVICES", "1"),
        ("GPUSHARE_GPU", "1"),
        ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
    ];
    let mode = dir.path().join("compute-mode-1");
    fs::write(&mode, "Exclusive_Process\n").unwrap();
    // A control daemon alone holds nothing (as on a real GPU): the
    // client gets the whole GPU.
    fs::write(
        dir.path().join("daemon-gpu-1"),
        format!("{}\n", std::process::id()),
    )
    .unwrap();
    assert_eq!(get(&probe(dir.path(), &bypass), "ctx"), "0");
    // A server does.
    let mut server = std::process::Command::new("bash")
        .args([
            "-c",
            "exec -a nvidia-cuda-mps-server bash -c 'sleep 30; :' gpu=1 uid=0 \"at=$0\"",
        ])
        .arg(dir.path())
        .spawn()
        .unwrap();
    let seen = std::time::Instant::now();
    while !fs::read(format!("/proc/{}/cmdline", server.id()))
        .is_ok_and(|c| c.starts_with(b"nvidia-cuda-mps-server"))
    {
        assert!(seen.elapsed().as_secs() < 5, "the server's name");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let answers = probe(dir.path(), &bypass);
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(get(&answers, "init"), "0", "{answers:?}");
    assert_eq!(get(&answers, "ctx"), "46", "{answers:?}");
    assert_eq!(get(&answers, "ctx_name"), "CUDA_ERROR_DEVICE_UNAVAILABLE");
    assert_eq!(get(&answers, "mps_attr"), "0", "{answers:?}");
    assert!(
        log(dir.path()).contains("ctx gpu=1 mps=no"),
        "{}",
        log(dir.path())
    );
    assert!(log(dir.path()).contains("result=46"), "{}", log(dir.path()));

    // Prohibited refuses it without a daemon.
    fs::remove_file(dir.path().join("daemon-gpu-1")).unwrap();
    fs::write(&mode, "Prohibited\n").unwrap();
    assert_eq!(get(&probe(dir.path(), &bypass), "ctx"), "46");

    // Exclusive_Process without a daemon: free, unless another process
    // holds the GPU (the stand-in cuda-client's lock).
    fs::write(&mode, "Exclusive_Process\n").unwrap();
    let answers = probe(dir.path(), &bypass);
    assert_eq!(get(&answers, "ctx"), "0", "{answers:?}");
    let held = fs::File::open(&mode).unwrap();
    // SAFETY: flock on a descriptor `held` keeps open.
    let locked = unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(locked, 0);
    assert_eq!(get(&probe(dir.path(), &bypass), "ctx"), "46");
    drop(held);

    // Default: the whole GPU, the daemon or not.
    fs::write(
        dir.path().join("daemon-gpu-1"),
        format!("{}\n", std::process::id()),
    )
    .unwrap();
    fs::write(&mode, "Default\n").unwrap();
    let answers = probe(dir.path(), &bypass);
    assert_eq!(get(&answers, "ctx"), "0", "{answers:?}");
    assert_eq!(get(&answers, "sms_attr"), "132", "{answers:?}");
    assert_eq!(get(&answers, "smids"), "132", "{answers:?}");
    assert_eq!(get(&answers, "alloc_over"), "2", "{answers:?}");

    // A daemon file naming a gone process is no daemon.
    fs::write(&mode, "Exclusive_Process\n").unwrap();
    fs::write(dir.path().join("daemon-gpu-1"), format!("{}\n", gone_pid())).unwrap();
    assert_eq!(get(&probe(dir.path(), &bypass), "ctx"), "0");
}

#[test]
fn an_mps_client_whose_daemon_is_gone_cannot_connect() {
    let dir = node();
    let pipe = dir.path().join("pipe");
    fs::create_dir_all(&pipe).unwrap();
    fs::write(pipe.join("control"), format!("{}\n", gone_pid())).unwrap();
    let env = share_env(&pipe, "0", "25", "0=1024M");
    let answers = probe(dir.path(), &as_refs(&env));
    assert_eq!(get(&answers, "ctx"), "805", "{answers:?}");
    assert_eq!(
        get(&answers, "ctx_name"),
        "CUDA_ERROR_MPS_CONNECTION_FAILED"
    );
}

#[test]
fn fault_files_fail_the_calls_they_name() {
    let dir = node();
    let pipe = live_pipe(dir.path());
    let env = share_env(&pipe, "0", "25", "0=1024M");
    fs::write(dir.path().join("cuda-bad-ptx"), "").unwrap();
    let answers = probe(dir.path(), &as_refs(&env));
    assert_eq!(get(&answers, "module"), "218", "{answers:?}");
    fs::write(dir.path().join("cuda-no-device"), "").unwrap();
    let answers = probe(dir.path(), &as_refs(&env));
    assert_eq!(get(&answers, "init"), "100", "{answers:?}");
    // A GPU cuda-gpus does not list is no device either.
    fs::remove_file(dir.path().join("cuda-no-device")).unwrap();
    fs::write(dir.path().join("cuda-gpus"), "1 132 81920\n").unwrap();
    assert_eq!(get(&probe(dir.path(), &as_refs(&env)), "init"), "100");

    // cuda-hang: cuInit does not come back; the caller's deadline ends it.
    fs::write(dir.path().join("cuda-hang"), "").unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["child_probe", "--exact", "--ignored", "--nocapture"])
        .env(CHILD, dir.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(2) {
        assert!(child.try_wait().unwrap().is_none(), "cuInit came back");
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        log(dir.path()).contains("init hangs"),
        "{}",
        log(dir.path())
    );
}

/// The pid of a process that has ended (and been reaped).
fn gone_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

type Init = unsafe extern "C" fn(c_uint) -> c_int;
type IntOut = unsafe extern "C" fn(*mut c_int) -> c_int;
type DeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type Attribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
type TotalMem = unsafe extern "C" fn(*mut usize, c_int) -> c_int;
type Retain = unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int;
type SetCurrent = unsafe extern "C" fn(*mut c_void) -> c_int;
type MemInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> c_int;
type Alloc = unsafe extern "C" fn(*mut u64, usize) -> c_int;
type Free = unsafe extern "C" fn(u64) -> c_int;
type Release = unsafe extern "C" fn(c_int) -> c_int;
type LoadData = unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> c_int;
type GetFunction = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const c_char) -> c_int;
type Launch = unsafe extern "C" fn(
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
) -> c_int;
type Sync = unsafe extern "C" fn() -> c_int;
type CopyDtoH = unsafe extern "C" fn(*mut c_void, u64, usize) -> c_int;
type ErrorName = unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int;
type Memset = unsafe extern "C" fn(u64, u8, usize) -> c_int;

/// The child: the probe's steps in the probe's order, each answer printed
/// as `probe NAME=VALUE`. Run only by the tests above.
#[test]
#[ignore = "the child process of the tests above"]
#[allow(clippy::too_many_lines)]
fn child_probe() {
    let Some(dir) = std::env::var_os(CHILD) else {
        return;
    };
    let say = |k: &str, v: &dyn std::fmt::Display| println!("probe {k}={v}");
    // SAFETY: loading the stand-in runs no initialisers of note; every
    // symbol below is looked up with the driver's own signature, and each
    // call gets pointers to live locals of the right types.
    unsafe {
        let lib = libloading::Library::new(Path::new(&dir).join("libcuda.so.1")).unwrap();
        let name_of = *lib.get::<ErrorName>(b"cuGetErrorName").unwrap();
        let mut unknown: *const c_char = std::ptr::null();
        say("unknown_name", &name_of(4242, &mut unknown));
        assert!(unknown.is_null(), "an unknown code's name was written");
        let init = *lib.get::<Init>(b"cuInit").unwrap();
        let result = init(0);
        say("init", &result);
        if result != 0 {
            return;
        }
        let mut version = 0;
        (lib.get::<IntOut>(b"cuDriverGetVersion").unwrap())(&mut version);
        say("version", &version);
        let mut count = 0;
        (lib.get::<IntOut>(b"cuDeviceGetCount").unwrap())(&mut count);
        say("count", &count);
        let mut device = -1;
        say(
            "device",
            &(lib.get::<DeviceGet>(b"cuDeviceGet").unwrap())(&mut device, 0),
        );
        let attribute = *lib.get::<Attribute>(b"cuDeviceGetAttribute").unwrap();
        let mut sms = 0;
        attribute(&mut sms, 16, device);
        say("sms_attr", &sms);
        let mut mps = -1;
        attribute(&mut mps, 133, device);
        say("mps_attr", &mps);
        let mut total = 0usize;
        (lib.get::<TotalMem>(b"cuDeviceTotalMem_v2").unwrap())(&mut total, device);
        say("total_mem_mib", &(total >> 20));
        let mut ctx = std::ptr::null_mut();
        let result = (lib.get::<Retain>(b"cuDevicePrimaryCtxRetain").unwrap())(&mut ctx, device);
        say("ctx", &result);
        let mut name: *const c_char = std::ptr::null();
        name_of(result, &mut name);
        say("ctx_name", &CStr::from_ptr(name).to_string_lossy());
        if result != 0 {
            return;
        }
        assert_eq!((lib.get::<SetCurrent>(b"cuCtxSetCurrent").unwrap())(ctx), 0);
        let (mut free, mut limit) = (0usize, 0usize);
        (lib.get::<MemInfo>(b"cuMemGetInfo_v2").unwrap())(&mut free, &mut limit);
        say("meminfo_total_mib", &(limit >> 20));
        let mut module = std::ptr::null_mut();
        let result =
            (lib.get::<LoadData>(b"cuModuleLoadData").unwrap())(&mut module, PTX.as_ptr().cast());
        say("module", &result);
        if result != 0 {
            return;
        }
        let mut function = std::ptr::null_mut();
        let get_function = *lib.get::<GetFunction>(b"cuModuleGetFunction").unwrap();
        assert_eq!(get_function(&mut function, module, c"other".as_ptr()), 500);
        assert_eq!(
            get_function(&mut function, module, c"gpushare_smids".as_ptr()),
            0
        );
        let alloc = *lib.get::<Alloc>(b"cuMemAlloc_v2").unwrap();
        let free_fn = *lib.get::<Free>(b"cuMemFree_v2").unwrap();
        const GRID: u32 = 1024;
        let mut out = 0u64;
        assert_eq!(alloc(&mut out, GRID as usize * 4), 0);
        let launch = *lib.get::<Launch>(b"cuLaunchKernel").unwrap();
        // The kernel over GRID blocks of a warp, its output at `out`,
        // each block spinning `spin` cycles.
        let run = |mut out: u64, mut spin: u64| {
            let mut params = [
                std::ptr::from_mut(&mut out).cast::<c_void>(),
                std::ptr::from_mut(&mut spin).cast::<c_void>(),
            ];
            launch(
                function,
                GRID,
                1,
                1,
                32,
                1,
                1,
                0,
                std::ptr::null_mut(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        let result = run(out, 1000);
        say("launch", &result);
        assert_eq!((lib.get::<Sync>(b"cuCtxSynchronize").unwrap())(), 0);
        let mut ids = vec![0u32; GRID as usize];
        let copied = (lib.get::<CopyDtoH>(b"cuMemcpyDtoH_v2").unwrap())(
            ids.as_mut_ptr().cast(),
            out,
            ids.len() * 4,
        );
        say("copy", &copied);
        let distinct: std::collections::BTreeSet<u32> = ids.into_iter().collect();
        say("smids", &distinct.len());
        // Written where an allocation holds it, refused past its end.
        let memset = *lib.get::<Memset>(b"cuMemsetD8_v2").unwrap();
        say("memset", &memset(out, 7, GRID as usize * 4));
        say("memset_past", &memset(out, 7, GRID as usize * 4 + 1));
        let mut word = 0u32;
        (lib.get::<CopyDtoH>(b"cuMemcpyDtoH_v2").unwrap())(
            std::ptr::from_mut(&mut word).cast(),
            out,
            4,
        );
        say("memset_word", &format!("{word:#x}"));
        // A busy kernel: a nanosecond a cycle, waited for by the sync.
        assert_eq!(run(out, 50_000_000), 0);
        let started = Instant::now();
        assert_eq!((lib.get::<Sync>(b"cuCtxSynchronize").unwrap())(), 0);
        say("busy_ms", &started.elapsed().as_millis());
        assert_eq!(free_fn(out), 0);
        // The share's limit as the probe knows it (its configuration),
        // else what cuMemGetInfo said.
        let limit_mib = std::env::var(LIMIT_MIB)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(limit >> 20);
        let mut half = 0u64;
        let result = alloc(&mut half, (limit_mib / 2) << 20);
        say("alloc_half", &result);
        if result == 0 {
            say(
                "memset_half",
                &memset(half, 1, ((limit_mib / 2) << 20) as usize),
            );
            free_fn(half);
        }
        let mut over = 0u64;
        let result = alloc(&mut over, (limit_mib + 1) << 20);
        say("alloc_over", &result);
        if result == 0 {
            free_fn(over);
        }
        assert_eq!(
            (lib.get::<Release>(b"cuDevicePrimaryCtxRelease_v2").unwrap())(0),
            0
        );
    }
}
