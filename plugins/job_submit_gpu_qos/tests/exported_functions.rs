//! The exported functions, called in-process the way slurmctld calls them,
//! with arbitrary field contents: nothing may panic (a caught panic would
//! show as SLURM_ERROR), every rejection carries a message, and concurrent
//! calls during config reloads (slurmctld 23.02+ calls plugins concurrently)
//! stay correct. Links libslurmfull for Slurm's allocator and log.

use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::path::PathBuf;
use std::ptr;
use std::sync::Once;

use job_submit_gpu_qos::{init, job_submit};
use proptest::prelude::*;
use slurm_sys::{
    job_desc_msg_t, slurm_init_job_desc_msg, slurm_xfree, slurm_xstrdup, SLURM_ERROR, SLURM_SUCCESS,
};

const CONF: &str = include_str!("../gpu_qos.conf.example");

fn conf_dir() -> PathBuf {
    std::env::temp_dir().join(format!("gpushare-ffi-{}", std::process::id()))
}

/// init() once per process, with the example policy beside a fake slurm.conf.
fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let dir = conf_dir();
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join("gpu_qos.conf"), CONF).unwrap_or_else(|e| panic!("{e}"));
        std::env::set_var("SLURM_CONF", dir.join("slurm.conf"));
        // Poll every 5 ms so the reload test sees reloads while it calls.
        std::env::set_var(job_submit_gpu_qos::policy_state::POLL_INTERVAL_ENV, "5");
        // Outside a daemon Slurm logs every rejection to stderr; thousands of
        // generated jobs would bury the test report. Panics are reported by
        // the test harness through its own capture, not fd 2.
        let devnull = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .unwrap_or_else(|e| panic!("{e}"));
        // SAFETY: dup2 onto fd 2 with a valid open descriptor.
        unsafe { libc::dup2(std::os::unix::io::AsRawFd::as_raw_fd(&devnull), 2) };
        // SAFETY: called once, as slurmctld does at load.
        let rc = unsafe { init() };
        assert_eq!(rc, SLURM_SUCCESS as i32, "init with the example config");
    });
}

fn xstr(s: Option<&str>) -> *mut c_char {
    match s {
        None => ptr::null_mut(),
        Some(s) => {
            let c = CString::new(s.replace('\0', "")).unwrap_or_default();
            // SAFETY: valid C string; Slurm's allocator copies it.
            unsafe { slurm_xstrdup(c.as_ptr()) }
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Fields {
    qos: Option<String>,
    per_node: Option<String>,
    per_job: Option<String>,
    per_socket: Option<String>,
    per_task: Option<String>,
    reservation: Option<String>,
    array_inx: Option<String>,
    min_nodes: u32,
    num_tasks: u32,
    requeue: u16,
    sockets: u16,
}

fn desc_of(f: &Fields) -> Box<job_desc_msg_t> {
    // SAFETY: job_desc_msg_t is plain C data; slurm_init_job_desc_msg sets
    // every field to its "unset" value, as slurmctld's unpacking does.
    let mut d: Box<job_desc_msg_t> = Box::new(unsafe { std::mem::zeroed() });
    // SAFETY: d points to a writable job_desc_msg_t.
    unsafe { slurm_init_job_desc_msg(&mut *d) };
    d.qos = xstr(f.qos.as_deref());
    d.tres_per_node = xstr(f.per_node.as_deref());
    d.tres_per_job = xstr(f.per_job.as_deref());
    d.tres_per_socket = xstr(f.per_socket.as_deref());
    d.tres_per_task = xstr(f.per_task.as_deref());
    d.reservation = xstr(f.reservation.as_deref());
    d.array_inx = xstr(f.array_inx.as_deref());
    d.min_nodes = f.min_nodes;
    d.num_tasks = f.num_tasks;
    d.requeue = f.requeue;
    d.sockets_per_node = f.sockets;
    d
}

/// Calls job_submit; returns the code and the message, freeing it.
fn submit(d: &mut job_desc_msg_t) -> (i32, Option<String>) {
    let mut err: *mut c_char = ptr::null_mut();
    // SAFETY: d is a valid description, err a valid message slot.
    let rc = unsafe { job_submit(d, 1000, &mut err) };
    let msg = (!err.is_null()).then(|| {
        // SAFETY: set by the plugin with slurm_xstrdup.
        let s = unsafe { CStr::from_ptr(err) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: Slurm-allocated; xfree frees it and NULLs err.
        unsafe { slurm_xfree(ptr::addr_of_mut!(err).cast()) };
        s
    });
    (rc, msg)
}

fn gres_like() -> impl Strategy<Value = String> {
    prop_oneof![
        "(gres[:/])?(gpu|mps|shard|nic)(:[a-z0-9_.-]{0,6})?([:=][0-9]{0,12}[kKmMgG]?)?(,(gres[:/])?(gpu|mps)(:[a-z0-9]{0,4})?(:[0-9]{0,3})?){0,3}",
        "(cpu=[0-9]{1,3},)?gres/gpu:a40=[0-9]{1,2}",
        ".{0,40}",
    ]
}

fn fields() -> impl Strategy<Value = Fields> {
    let opt = |s: BoxedStrategy<String>| proptest::option::of(s);
    (
        (
            opt(prop_oneof![
                Just("qos_lafferty".to_string()),
                Just("lowprio".to_string()),
                Just("lowprio,qos_saxena".to_string()),
                ".{0,12}".prop_map(|s| s)
            ]
            .boxed()),
            opt(gres_like().boxed()),
            opt(gres_like().boxed()),
            opt(gres_like().boxed()),
            opt(gres_like().boxed()),
        ),
        (
            opt(prop_oneof![
                Just("jhl_homework_gpu1".to_string()),
                ".{0,12}".prop_map(|s| s)
            ]
            .boxed()),
            opt("[0-9,%-]{0,12}".prop_map(|s| s).boxed()),
            any::<u32>(),
            any::<u32>(),
            prop_oneof![
                Just(slurm_sys::NO_VAL16),
                Just(0u16),
                Just(1u16),
                any::<u16>()
            ],
            any::<u16>(),
        ),
    )
        .prop_map(
            |(
                (qos, per_node, per_job, per_socket, per_task),
                (reservation, array_inx, min_nodes, num_tasks, requeue, sockets),
            )| Fields {
                qos,
                per_node,
                per_job,
                per_socket,
                per_task,
                reservation,
                array_inx,
                min_nodes,
                num_tasks,
                requeue,
                sockets,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_jobs_never_panic_and_rejections_explain(f in fields()) {
        setup();
        let mut d = desc_of(&f);
        let (rc, msg) = submit(&mut d);
        prop_assert_ne!(rc, SLURM_ERROR, "a panic was caught (or init missing) for {:?}", f);
        if rc != SLURM_SUCCESS as i32 {
            prop_assert!(msg.as_deref().is_some_and(|m| !m.is_empty()), "rejection without a message: {:?}", f);
        }
    }
}

#[test]
fn untyped_gpu_under_group_qos_is_rejected_with_the_fix() {
    setup();
    let mut d = desc_of(&Fields {
        qos: Some("qos_lafferty".into()),
        per_node: Some("gres:gpu:2".into()),
        requeue: slurm_sys::NO_VAL16,
        ..Fields::default()
    });
    let (rc, msg) = submit(&mut d);
    assert_eq!(rc, slurm_sys::ESLURM_INVALID_GRES as i32);
    assert!(msg.unwrap_or_default().contains("--gres=gpu:a40:2"));
}

#[test]
fn lowprio_job_is_changed_in_place_and_units_reach_spank_env() {
    setup();
    let mut d = desc_of(&Fields {
        qos: Some("lowprio".into()),
        per_node: Some("gres:gpu:a40:1".into()),
        array_inx: Some("1-100".into()),
        requeue: slurm_sys::NO_VAL16,
        ..Fields::default()
    });
    let (rc, _) = submit(&mut d);
    assert_eq!(rc, SLURM_SUCCESS as i32);
    assert_eq!(d.requeue, 1);
    assert_eq!(u32::from(d.open_mode), slurm_sys::OPEN_MODE_APPEND);
    // SAFETY: set by the plugin with slurm_xstrdup.
    let inx = unsafe { CStr::from_ptr(d.array_inx) }
        .to_string_lossy()
        .into_owned();
    assert_eq!(inx, "1-100%8");

    let mut d = desc_of(&Fields {
        reservation: Some("jhl_homework_gpu1".into()),
        per_node: Some("gres:mps:50".into()),
        requeue: slurm_sys::NO_VAL16,
        ..Fields::default()
    });
    let (rc, msg) = submit(&mut d);
    assert_eq!(rc, SLURM_SUCCESS as i32, "{msg:?}");
    assert_eq!(d.spank_job_env_size, 1);
    // SAFETY: one entry, set by the plugin; a NULL slot follows it.
    let (entry, after) = unsafe { (CStr::from_ptr(*d.spank_job_env), *d.spank_job_env.add(1)) };
    assert_eq!(entry.to_string_lossy(), "GPUSHARE_MPS_UNITS=50");
    assert!(after.is_null());
}

/// Puts `entries` into the description's SPANK environment, as a client's
/// submission carries them (Slurm-allocated array, NULL after the last).
fn set_spank_env(d: &mut job_desc_msg_t, entries: &[&str]) {
    let len = entries.len();
    let mut block: *mut std::os::raw::c_void = ptr::null_mut();
    // SAFETY: Slurm's allocator, zeroed: len entries plus a NULL slot.
    unsafe {
        slurm_sys::slurm_xrecalloc(
            &mut block,
            len + 1,
            std::mem::size_of::<*mut c_char>(),
            true,
            false,
            c"test".as_ptr(),
            line!() as i32,
            c"set_spank_env".as_ptr(),
        )
    };
    let array = block.cast::<*mut c_char>();
    for (i, e) in entries.iter().enumerate() {
        // SAFETY: i < len, inside the array just allocated.
        unsafe { *array.add(i) = xstr(Some(e)) };
    }
    d.spank_job_env = array;
    d.spank_job_env_size = len as u32;
}

fn spank_env_of(d: &job_desc_msg_t) -> Vec<String> {
    (0..d.spank_job_env_size as usize)
        .map(|i| {
            // SAFETY: the plugin keeps size entries, each a Slurm C string.
            unsafe { CStr::from_ptr(*d.spank_job_env.add(i)) }
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

#[test]
fn client_sent_gpushare_variables_never_survive_submission() {
    setup();
    let forged = [
        "GPUSHARE_MPS_UNITS=100",
        "OTHER=1",
        "GPUSHARE_MPS_UNITS=100",
        "gpushare_mps_units=7",
        "GPUSHARE_GPU=3",
    ];
    // A share of 1 unit: exactly one GPUSHARE_MPS_UNITS, the plugin's.
    let mut d = desc_of(&Fields {
        reservation: Some("jhl_homework_gpu1".into()),
        per_node: Some("gres:mps:1".into()),
        requeue: slurm_sys::NO_VAL16,
        ..Fields::default()
    });
    set_spank_env(&mut d, &forged);
    let (rc, msg) = submit(&mut d);
    assert_eq!(rc, SLURM_SUCCESS as i32, "{msg:?}");
    assert_eq!(spank_env_of(&d), vec!["OTHER=1", "GPUSHARE_MPS_UNITS=1"]);
    // SAFETY: the array keeps a NULL slot after its last entry.
    assert!(unsafe { *d.spank_job_env.add(d.spank_job_env_size as usize) }.is_null());
    // A CPU-only job keeps nothing of gpushare's.
    let mut d = desc_of(&Fields {
        requeue: slurm_sys::NO_VAL16,
        ..Fields::default()
    });
    set_spank_env(&mut d, &forged);
    let (rc, msg) = submit(&mut d);
    assert_eq!(rc, SLURM_SUCCESS as i32, "{msg:?}");
    assert_eq!(spank_env_of(&d), vec!["OTHER=1"]);
}

#[test]
fn concurrent_calls_during_reloads_stay_correct() {
    setup();
    let path = conf_dir().join("gpu_qos.conf");
    let reloads_before = job_submit_gpu_qos::policy_state::reloads();
    let calls_done = std::sync::atomic::AtomicUsize::new(0);
    // The reload count each caller saw as it finished its last call.
    let seen_at_end = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..5000 {
                    let mut d = desc_of(&Fields {
                        qos: Some("qos_lafferty".into()),
                        per_node: Some("gres:gpu:2".into()),
                        requeue: slurm_sys::NO_VAL16,
                        ..Fields::default()
                    });
                    let (rc, _) = submit(&mut d);
                    assert_eq!(rc, slurm_sys::ESLURM_INVALID_GRES as i32);
                    let mut d = desc_of(&Fields {
                        qos: Some("qos_lafferty".into()),
                        per_node: Some("gres:gpu:a40:2".into()),
                        requeue: slurm_sys::NO_VAL16,
                        ..Fields::default()
                    });
                    assert_eq!(submit(&mut d).0, SLURM_SUCCESS as i32);
                }
                let seen = job_submit_gpu_qos::policy_state::reloads();
                seen_at_end
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(seen);
                calls_done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
        s.spawn(|| {
            let mut i = 0;
            // Edit until every caller is done, so edits and calls overlap
            // however fast the callers are.
            while calls_done.load(std::sync::atomic::Ordering::SeqCst) < 4 {
                let text = if i % 2 == 0 {
                    format!("{CONF}# edit {i}\n")
                } else {
                    format!("{CONF}Broken line {i}\n")
                };
                let tmp = path.with_extension("new");
                std::fs::write(&tmp, text).unwrap_or_else(|e| panic!("{e}"));
                std::fs::rename(&tmp, &path).unwrap_or_else(|e| panic!("{e}"));
                std::thread::sleep(std::time::Duration::from_millis(5));
                i += 1;
            }
        });
    });
    let last_seen = seen_at_end
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .into_iter()
        .max()
        .unwrap_or(0);
    // Reloads a caller saw before its last call returned happened while
    // calls were running.
    let reloads_while_calling = last_seen - reloads_before;
    // Atomically, as the edits: other tests run beside this one, and a
    // half-written file can be a valid policy with rules missing.
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, CONF).unwrap_or_else(|e| panic!("{e}"));
    std::fs::rename(&tmp, &path).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        reloads_while_calling >= 1,
        "no reload happened while the calls ran: the test proves nothing"
    );
}
