//! The unit tests of the checks' non-GPU parts.

use super::*;
use gpushare::mps::config::MpsControl;
use gpushare::mps::node::{prolog, JobEnv, Node, PrologOutcome};
use gpushare::shared::booking::MpsBooking;

/// A node like the check's (one GPU, gpushare places), no daemon.
fn node(dir: &Path) -> (GpuMpsConfig, Node) {
    let cfg = GpuMpsConfig {
        state_dir: dir.join("state"),
        gpu_devices: Some(vec![PathBuf::from("/dev/nvidia0")]),
        slurm_mps_count: Some(u64::from(UNITS_PER_GPU)),
        units_per_gpu: UNITS_PER_GPU,
        placement: config::Placement::Gpushare,
        mps_control: MpsControl::Disabled,
        gpu_memory_mib: Some(80 * 1024),
        ..GpuMpsConfig::default()
    };
    // SAFETY: geteuid has no preconditions.
    let owner = unsafe { libc::geteuid() };
    let node = Node::with_config(cfg.clone(), &dir.join("gpu_mps.conf"), owner)
        .unwrap_or_else(|e| panic!("{e}"));
    (cfg, node)
}

#[test]
fn the_client_gets_the_environment_the_spank_plugin_gives_a_task() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (cfg, node) = node(dir.path());
    // What the check hands gpu-mps-prolog is what slurmd hands it: the
    // prolog's own reader finds the job, its user and a 25-unit share.
    let given = prolog_env(4242, 1234, "gpushare-hwa", 25);
    let env = JobEnv::from_env(|k| given.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (env.job, env.uid, env.user.as_str()),
        (4242, 1234, "gpushare-hwa")
    );
    let report = prolog(&node, &env, &MpsBooking::default(), || Ok(Vec::new()))
        .unwrap_or_else(|e| panic!("{e}"));
    let PrologOutcome::Placed { share, .. } = report.outcome else {
        panic!("not placed: {:?}", report.outcome);
    };
    assert_eq!((share.units, share.gpu, share.uid), (25, 0, 1234));
    // The plugin's plan, from the same ledger, through the same call.
    let ledger = Ledger::open(&cfg.state_dir, node.owner).unwrap_or_else(|e| panic!("{e}"));
    let plan = task_plan(&cfg, &ledger, 4242, true, 1)
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("no plan"));
    let user = User {
        name: "gpushare-hwa".into(),
        uid: 1234,
        gid: 1234,
    };
    let given = client_env(&user, &plan.env);
    // Every variable the plugin sets, unchanged, and nothing else but
    // what any process of the user has.
    for (k, v) in &plan.env {
        assert_eq!(given.get(k), Some(v), "{k}");
    }
    let extra: Vec<&str> = given
        .keys()
        .map(String::as_str)
        .filter(|k| !plan.env.iter().any(|(n, _)| n == k))
        .collect();
    assert_eq!(extra, ["HOME", "LOGNAME", "PATH", "USER"]);
    assert_eq!(
        given
            .get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
            .map(String::as_str),
        Some("25")
    );
    assert_eq!(
        given
            .get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
            .map(String::as_str),
        Some("0=20480M")
    );
    let pipe = daemon::pipe_dir(&cfg, 0).to_string_lossy().into_owned();
    assert_eq!(given.get("CUDA_MPS_PIPE_DIRECTORY"), Some(&pipe));
}

#[test]
fn a_busy_gpu_or_running_jobs_keep_the_check_off() {
    assert_eq!(busy_reason("", 0), None);
    assert_eq!(busy_reason("No running processes found\n", 0), None);
    let why = busy_reason("4242, python3\n", 0).unwrap_or_default();
    assert!(why.contains("GPU 0 runs 4242, python3"), "{why}");
    let why = busy_reason("", 2).unwrap_or_default();
    assert!(why.contains("2 slurmstepd"), "{why}");
}

#[test]
fn only_users_the_check_made_are_its_own() {
    let ours = format!("gpushare-hwa:x:998:998:{USER_COMMENT}:/:/usr/sbin/nologin\n");
    assert!(made_by_check(&ours));
    assert!(!made_by_check(
        "gpushare-hwa:x:1001:1001:Ada Lovelace:/home/ada:/bin/bash\n"
    ));
    assert!(!made_by_check(""));
}

#[test]
fn a_report_is_written_only_as_a_new_file() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("report.md");
    assert!(write_new(&path, "first").is_ok());
    assert!(write_new(&path, "second").is_err());
    assert_eq!(fs::read_to_string(&path).unwrap_or_default(), "first");
}

#[test]
fn a_machine_without_a_gpu_is_one_line_of_why() {
    let why = gpu_absent(Path::new("/nonexistent/nvidia0"), None).unwrap_or_default();
    assert!(why.contains("/nonexistent/nvidia0 does not exist"), "{why}");
    assert!(!why.contains('\n'));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let device = dir.path().join("nvidia0");
    fs::write(&device, "").unwrap_or_else(|e| panic!("{e}"));
    let why = gpu_absent(&device, None).unwrap_or_default();
    assert!(why.contains("nvidia-smi is not installed"), "{why}");
    // An nvidia-smi that lists no GPU (driver not loaded) is no GPU.
    let smi = dir.path().join("nvidia-smi");
    fs::write(&smi, "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\nexit 9\n")
        .unwrap_or_else(|e| panic!("{e}"));
    fs::set_permissions(&smi, fs::Permissions::from_mode(0o755)).unwrap_or_else(|e| panic!("{e}"));
    let why = gpu_absent(&device, Some(&smi)).unwrap_or_default();
    assert!(
        why.contains("could not communicate with the NVIDIA driver"),
        "{why}"
    );
    assert!(!why.contains('\n'));
}

#[test]
fn the_report_is_a_table_then_the_details_as_code_blocks() {
    let report = Report {
        gpu: "NVIDIA H100 80GB HBM3".into(),
        driver: "575.57.08".into(),
        cuda: "release 12.9".into(),
        host: "gpu01".into(),
        date: "2026-11-24 15:00 UTC".into(),
        intro: None,
        invoked: None,
        table: None,
        checks: vec![
            Check::new(
                "memory | limit",
                Verdict::Pass,
                "a\nb | c".into(),
                "out ```x```\n".into(),
            ),
            Check::fail("flags", "none".into(), String::new()),
            Check::new("help", Verdict::Seen, "-M".into(), "usage".into()),
        ],
    };
    let text = render(&report);
    assert!(
        text.starts_with("#### 2026-11-24 15:00 UTC — NVIDIA H100 80GB HBM3, driver 575.57.08\n"),
        "{text}"
    );
    assert!(
        text.contains("| memory \\| limit | pass | a b \\| c |\n"),
        "{text}"
    );
    assert!(text.contains("| flags | FAIL | none |\n"), "{text}");
    assert!(text.contains("| help | seen | -M |\n"), "{text}");
    // A detail cannot end its code block early; a check without one has none.
    assert!(text.contains("```text\nout '''x'''\n```"), "{text}");
    assert!(!text.contains("<summary>flags</summary>"), "{text}");
    assert_eq!(text.matches("<details>").count(), 2);
    assert!(text.contains("`make hw-check` as root on gpu01"), "{text}");
}

#[test]
fn the_benchmarks_report_says_what_ran_and_puts_its_table_first() {
    let report = Report {
        intro: Some("8 jobs three ways.".into()),
        table: Some("| how | batch |\n|---|---|\n| alone | 17.3 s |\n".into()),
        checks: vec![Check::new(
            "alone",
            Verdict::Seen,
            "17.3 s".into(),
            String::new(),
        )],
        ..Report::default()
    };
    let text = render(&report);
    let table = text.find("| alone | 17.3 s |").unwrap_or(usize::MAX);
    let checks = text.find("| check | result |").unwrap_or(0);
    assert!(
        text.contains("`make bench-gpu` as root on an unnamed host") && table < checks,
        "{text}"
    );
    assert!(text.contains("): 8 jobs three ways.\n"), "{text}");
}

/// `gpu-mps selftest --json`'s answer for GPU 0 (as the lead's CLI
/// prints it), with `result` and the share's SMs filled in.
fn selftest_answer(result: &str, share_sms: u32) -> selftest::Answer {
    let seen = |sms: u32, ctx: &str, allocs: &str| {
        format!(
            r#"{{"driver":13000,"init_error":null,"devices":1,"sms":{sms},"mps":true,
               "memory_mib":143771,"context_tried":true,"context_error":{ctx},"context_ms":212,
               "mem_info_mib":[35000,35942],"kernel_sms":{sms},"kernel_error":null,
               "ptx_target":"sm_70","allocations":[{allocs}]}}"#
        )
    };
    let text = format!(
        r#"{{"library":"libcuda.so.1","user":"nobody","units":25,"gpus":[{{"gpu":0,
           "result":"{result}","why":[],"changed":null,"check":{{"gpu":0,
           "expected":{{"thread_percentage":25,"memory_mib":35942,"exclusive":true}},
           "bypass":{},"share":{},
           "verdict":{{"failures":[],"notes":[]}},"ms":850}}}}]}}"#,
        seen(132, r#""CUDA_ERROR_DEVICE_UNAVAILABLE""#, ""),
        seen(
            share_sms,
            "null",
            r#"{"mib":17971,"error":null},{"mib":53913,"error":"CUDA_ERROR_OUT_OF_MEMORY"}"#
        ),
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn the_driver_api_clients_line_says_what_both_clients_saw() {
    let (v, line) = selftest::judge(Some(0), &selftest_answer("pass", 32));
    assert_eq!(v, Verdict::Pass, "{line}");
    for seen in [
        "exit 0: pass",
        "share client: 32 SMs, kernel on 32 SMs",
        "17971 MiB ok, 53913 MiB CUDA_ERROR_OUT_OF_MEMORY",
        "context 212 ms",
        "GPU of 132 SMs",
        "refused (CUDA_ERROR_DEVICE_UNAVAILABLE)",
        "PTX target sm_70, driver 13.0",
    ] {
        assert!(line.contains(seen), "{seen:?} not in {line}");
    }
    // A failed GPU, or a non-zero exit, fails the line.
    assert_eq!(
        selftest::judge(Some(1), &selftest_answer("fail", 32)).0,
        Verdict::Fail
    );
    assert_eq!(
        selftest::judge(Some(3), &selftest_answer("pass", 32)).0,
        Verdict::Fail
    );
}

#[test]
fn the_driver_api_client_must_agree_with_the_nvcc_client_on_sms() {
    let agree = |d, n, dw, nw| selftest::sms_agree(d, n, dw, nw).map(|(ok, _)| ok);
    assert_eq!(agree(Some(32), Some(32), Some(132), Some(132)), Some(true));
    assert_eq!(agree(Some(32), Some(32), None, None), Some(true));
    // Either figure off by a TPC is a disagreement: both ask CUDA the same.
    assert_eq!(agree(Some(34), Some(32), Some(132), Some(132)), Some(false));
    assert_eq!(agree(Some(32), Some(32), Some(132), Some(130)), Some(false));
    // Only the whole GPU's figures: not enough to pass.
    assert_eq!(agree(None, Some(32), Some(132), Some(132)), Some(false));
    assert_eq!(agree(None, None, None, Some(132)), None);
}
