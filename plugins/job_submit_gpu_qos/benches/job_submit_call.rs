//! One `job_submit` call, in-process, on representative job descriptions:
//! the exported C function (reading the C struct, judging, writing back),
//! and the core decision alone. Medians of 1000-call batches.
//!
//! `cargo bench -p job_submit_gpu_qos --bench job_submit_call`

use std::ffi::CString;
use std::hint::black_box;
use std::os::raw::c_char;
use std::ptr;
use std::time::Instant;

use gpushare::qos::config as qos_conf;
use gpushare::qos::policy::{judge_submit, JobDescription};
use job_submit_gpu_qos::{init, job_submit};
use slurm_sys::{job_desc_msg_t, slurm_init_job_desc_msg, slurm_xfree, slurm_xstrdup, NO_VAL16};

const CONF: &str = include_str!("../gpu_qos.conf.example");
const BATCH: u32 = 1000;
const BATCHES: usize = 300;

fn xstr(s: &str) -> *mut c_char {
    let c = CString::new(s).unwrap_or_default();
    // SAFETY: valid C string, copied by Slurm's allocator.
    unsafe { slurm_xstrdup(c.as_ptr()) }
}

struct Case {
    name: &'static str,
    qos: Option<&'static str>,
    per_node: Option<&'static str>,
}

const CASES: &[Case] = &[
    Case {
        name: "no GPU, no QOS",
        qos: None,
        per_node: None,
    },
    Case {
        name: "typed a40 under qos_lafferty (accept)",
        qos: Some("qos_lafferty"),
        per_node: Some("gres:gpu:a40:2"),
    },
    Case {
        name: "untyped under qos_lafferty (reject)",
        qos: Some("qos_lafferty"),
        per_node: Some("gres:gpu:2"),
    },
    Case {
        name: "lowprio typed (accept + requeue/append)",
        qos: Some("lowprio"),
        per_node: Some("gres:gpu:a40:1"),
    },
];

fn median_ns(mut f: impl FnMut()) -> f64 {
    let mut per_call: Vec<f64> = (0..BATCHES)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..BATCH {
                f();
            }
            t.elapsed().as_nanos() as f64 / f64::from(BATCH)
        })
        .collect();
    per_call.sort_by(|a, b| a.total_cmp(b));
    per_call[per_call.len() / 2]
}

fn main() {
    let dir = std::env::temp_dir().join(format!("gpushare-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.join("gpu_qos.conf"), CONF).unwrap_or_else(|e| panic!("{e}"));
    std::env::set_var("SLURM_CONF", dir.join("slurm.conf"));
    // SAFETY: called once, as slurmctld does at load.
    assert_eq!(unsafe { init() }, 0);
    let cfg = qos_conf::parse(CONF, "gpu_qos.conf").unwrap_or_else(|e| panic!("{e}"));

    println!(
        "{:<42} {:>16} {:>16}",
        "job description", "job_submit() ns", "decision ns"
    );
    for case in CASES {
        // SAFETY: plain C struct initialised by Slurm's own function.
        let mut d: Box<job_desc_msg_t> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: d is writable.
        unsafe { slurm_init_job_desc_msg(&mut *d) };
        d.qos = case.qos.map_or(ptr::null_mut(), xstr);
        d.tres_per_node = case.per_node.map_or(ptr::null_mut(), xstr);
        let exported = median_ns(|| {
            d.requeue = NO_VAL16;
            d.open_mode = 0;
            let mut err: *mut c_char = ptr::null_mut();
            // SAFETY: valid description and message slot, as slurmctld gives.
            black_box(unsafe { job_submit(&mut *d, 1000, &mut err) });
            if !err.is_null() {
                // SAFETY: Slurm-allocated by the plugin.
                unsafe { slurm_xfree(ptr::addr_of_mut!(err).cast()) };
            }
        });
        let job = JobDescription {
            qos: case.qos,
            tres_per_node: case.per_node,
            ..JobDescription::default()
        };
        let decision = median_ns(|| {
            black_box(judge_submit(black_box(&cfg), black_box(&job)));
        });
        println!("{:<42} {:>16.0} {:>16.0}", case.name, exported, decision);
        // make bench's summary line.
        println!(
            "ROW|job_submit() in process: {}|{exported:.0} ns (decision alone {decision:.0} ns)|\
             cargo bench -p job_submit_gpu_qos --bench job_submit_call|call={exported:.0} ns lower",
            case.name
        );
    }
}
