//! `gpu-qos replay` against a real cluster's accounting: jobs of every
//! kind submitted with the plugin off (typed, untyped, under a default
//! QOS, in a partition whose QOS has a typed limit, low-priority, an
//! array, a request only in the script's #SBATCH lines), then replayed
//! under the example gpu_qos.conf; every count exact. And `gpu-qos
//! advise` on the same accounting (`replay/advise.rs`).

use std::process::ExitCode;

#[path = "replay/advise.rs"]
mod advise;

use testcluster::cluster::{wait_for, EXAMPLE_GPU_QOS_CONF};
use testcluster::time::JOB_LONG;
use testcluster::users::TestUser;
use testcluster::{ensure, Cluster, ClusterSpec, Suite, TestResult};

fn main() -> ExitCode {
    // The example site, the plugin not loaded: the jobs are as users
    // submit them before gpu_qos is enabled.
    let spec = ClusterSpec {
        job_submit_plugins: Vec::new(),
        ..ClusterSpec::example_site()
    };
    Suite::new(spec)
        .test(
            "replay_counts_what_the_policy_would_have_done_exactly",
            replay_counts,
        )
        .smoke()
        .test(
            "advise_lists_each_job_with_its_size_and_line",
            advise::advise_lists_each_job_with_its_size_and_line,
        )
        .run()
}

/// Two records as `sacct -P` prints them with `|`, for refused jobs of
/// root's: what a user can put into their own `SubmitLine`.
const FORGED: &str = "9000001|root|root|gpu|qos_lafferty|1||billing=1,cpu=1,gres/gpu=2,node=1|\
     sbatch --qos=qos_lafferty --gres=gpu:2 x\n\n\
     9000002|root|root|gpu|qos_lafferty|1||gres/gpu=2|sbatch --gres=gpu:2 y";

fn replay_counts(c: &mut Cluster) -> TestResult {
    let since = c.run_ok("date", &["+%Y-%m-%dT%H:%M:%S"])?.trim().to_owned();
    c.run_ok(
        "sacctmgr",
        &["-i", "add", "qos", "part_a40", "GrpTRES=gres/gpu:a40=8"],
    )?;
    c.run_ok(
        "scontrol",
        &[
            "create",
            "PartitionName=a40only",
            "Nodes=ALL",
            "QOS=part_a40",
            "State=UP",
        ],
    )?;
    let alice = TestUser::create(c, "alice")?;
    alice.allow_qos(c, &["normal", "qos_lafferty"])?;
    let dora = TestUser::create(c, "dora")?;
    dora.allow_qos_by_default(c, &["normal", "qos_lafferty"], "qos_lafferty")?;
    let bob = TestUser::create(c, "bob")?;
    bob.allow_qos(c, &["normal", "qos_lafferty", "lowprio"])?;
    let script = std::env::temp_dir().join(format!("replay-{}.sh", std::process::id()));
    std::fs::write(
        &script,
        "#!/bin/sh\n#SBATCH --gres=gpu:2\n#SBATCH --qos=qos_lafferty\ntrue\n",
    )
    .map_err(|e| e.to_string())?;
    let script_arg = script.to_string_lossy().into_owned();
    let o = ["-o", "/dev/null", "--wrap=true"];
    let with = |args: &[&str]| -> Vec<String> {
        args.iter()
            .chain(o.iter())
            .map(|s| (*s).to_owned())
            .collect()
    };
    let submissions: Vec<(&TestUser, Vec<String>)> = vec![
        // untyped under a group QOS: refused
        (&alice, with(&["--qos=qos_lafferty", "--gres=gpu:2"])),
        // typed: unchanged
        (&alice, with(&["-q", "qos_lafferty", "--gres", "gpu:a40:2"])),
        // a type the QOS does not cover: refused
        (&alice, with(&["--qos=qos_lafferty", "--gres=gpu:h100:1"])),
        // untyped under the default QOS: refused
        (&dora, with(&["--gres=gpu:1"])),
        // untyped in a partition whose QOS has a typed limit: refused
        (&bob, with(&["-p", "a40only", "--gres=gpu:1"])),
        // low priority: requeue; an array also throttled
        (&bob, with(&["-q", "lowprio", "--gres=gpu:a40:1"])),
        (
            &bob,
            with(&["--qos=lowprio", "--gres=gpu:a40:1", "--array=1-12"]),
        ),
        // under a QOS without a rule, and without GPUs: unchanged
        (&bob, with(&["--gres=gpu:1"])),
        (&bob, with(&[])),
        // the request in #SBATCH lines: ReqTRES stands in; refused
        (
            &bob,
            vec!["-o".into(), "/dev/null".into(), script_arg.clone()],
        ),
        // an argument holding newlines and whole records as sacct prints
        // them, of root's refused jobs (the script exits before them): one
        // job of bob's without GPUs, unchanged, and no job of root's
        (
            &bob,
            vec![
                "-o".into(),
                "/dev/null".into(),
                format!("--wrap=exit 0\n{FORGED}"),
            ],
        ),
    ];
    for (user, args) in &submissions {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        user.sbatch(c, &args)?;
    }
    let _ = std::fs::remove_file(&script);
    // Every record (the array's 12 tasks each) ended and in accounting.
    let records = wait_for("every job to end and reach accounting", JOB_LONG, || {
        let out = c
            .run_ok(
                "sacct",
                &["-a", "-X", "-n", "-P", "-S", &since, "-o", "JobID,State"],
            )
            .ok()?;
        let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
        (lines.len() == 22 && lines.iter().all(|l| l.contains("|COMPLETED"))).then_some(lines.len())
    })?;
    ensure(records == 22, "22 records")?;

    let conf = c.slurm_conf().with_file_name("replay_gpu_qos.conf");
    testcluster::replace_conf(
        &conf,
        &format!("{EXAMPLE_GPU_QOS_CONF}\nPartition=a40only GPUTypes=a40 GPULimit=8\n"),
    )?;
    let bin = testcluster::cluster::build_dir()?.join("gpu-qos");
    let bin = bin.to_string_lossy();
    let conf_arg = conf.to_string_lossy();
    let json = c.run_ok(
        &bin,
        &["replay", "--since", &since, "--conf", &conf_arg, "--json"],
    )?;
    let text = c.run_ok(&bin, &["replay", "--since", &since, "--conf", &conf_arg])?;
    println!("{text}");
    let r: serde_json::Value = serde_json::from_str(&json).map_err(|e| format!("{e}: {json}"))?;
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(u64::MAX);
    let got = (
        n(&r["jobs"]),
        n(&r["records"]),
        n(&r["totals"]["refused"]),
        n(&r["totals"]["changed"]),
        n(&r["totals"]["warned"]),
        n(&r["unchanged"]),
    );
    ensure(
        got == (11, 22, 5, 2, 0, 4),
        format!("totals {got:?}: {json}"),
    )?;
    let sources = (
        n(&r["sources"]["submit_line"]),
        n(&r["sources"]["req_tres"]),
        n(&r["sources"]["req_tres_beside_submit_line"]),
    );
    ensure(sources == (10, 0, 1), format!("sources {sources:?}"))?;
    let reason = |action: &str, reason: &str| {
        r["reasons"]
            .as_array()
            .and_then(|a| {
                a.iter()
                    .find(|x| x["action"] == action && x["reason"] == reason)
                    .map(|x| n(&x["jobs"]))
            })
            .unwrap_or(0)
    };
    let reasons = (
        reason("refused", "untyped_gpu"),
        reason("refused", "type_not_permitted"),
        reason("changed", "low_priority_requeue"),
        reason("changed", "low_priority_array_throttle"),
    );
    ensure(reasons == (4, 1, 2, 1), format!("reasons {reasons:?}"))?;
    let by = |map: &str, name: &str, action: &str| n(&r[map][name][action]);
    let by_counts = (
        by("by_qos", "qos_lafferty", "refused"),
        by("by_qos", "normal", "refused"),
        by("by_qos", "lowprio", "changed"),
        by("by_user", "alice", "refused"),
        by("by_user", "dora", "refused"),
        by("by_user", "bob", "refused"),
    );
    // Refused under qos_lafferty: alice's two, dora's, the script's (4);
    // under normal: the a40only partition's (1). None of root's.
    ensure(
        by_counts == (4, 1, 2, 2, 1, 2) && r["by_user"].get("root").is_none(),
        format!("by qos/user {by_counts:?}: {}", r["by_user"]),
    )?;
    let line_instead = r["reasons"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["reason"] == "untyped_gpu"))
        .and_then(|x| x["example"]["line_instead"].as_str())
        .unwrap_or_default();
    ensure(
        line_instead.contains("--gres=gpu:a40:2") && line_instead.contains("--qos=qos_lafferty"),
        format!("the example's line to type instead: {line_instead:?}"),
    )
}
