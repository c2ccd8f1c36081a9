//! Every command line a refusal advises is one the policy accepts: each
//! way of asking for GPUs (`--gres`, `--gpus`, `--gpus-per-node`,
//! `--gpus-per-task`, `--gpus-per-socket`), refused under a named QOS, a
//! default QOS, a partition's QOS, an account's limit, a typed limit no
//! rule covers and `RequireGPUType=all`, and each `scontrol update` the
//! policy refuses. The line the user typed is read as the plugin and
//! replay read it (`submit_line`), the refusal must quote the request in
//! the user's own spelling, and each option it suggests takes the asked
//! one's place in the line, which is judged again by the same core.

use super::config::{self as qos_conf, GpuQosConfig};
use super::gres::PerNodeSpelling;
use super::policy::{
    judge_modify, judge_submit, JobDescription, LimitLevel, Resolved, TypedLimit, Verdict,
};
use super::submit_line::{parse, with_replaced_gpu_option};

const CONF: &str = "\
QOS=qos_lafferty GPUTypes=a40 GPULimit=4
QOS=qos_saxena GPUTypes=a100,h100 GPULimit=a100:20,h100:2
Partition=gpu GPUTypes=a40,h100 GPULimit=8
Account=lafferty GPUTypes=a40 GPULimit=a40:6
";

/// The GPU options whose value a refusal may suggest.
const GPU_OPTIONS: [&str; 5] = [
    "--gres=",
    "--gpus=",
    "--gpus-per-node=",
    "--gpus-per-task=",
    "--gpus-per-socket=",
];

/// What slurmctld resolves for the test user: account `physics` (default
/// QOS qos_lafferty) unless the line names `-A lafferty_students` (default
/// QOS normal, under account lafferty); the default partition `cpu`; a
/// typed limit without a rule on partition `grp_a40`'s QOS.
struct World {
    default_qos: Vec<String>,
    accounts: Vec<String>,
    typed: Vec<TypedLimit>,
}

impl World {
    fn for_line(account: Option<&str>, partition: Option<&str>, update: bool) -> Self {
        let names = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let (accounts, default_qos) = match account {
            Some("lafferty_students") => (
                names(&["lafferty_students", "lafferty", "root"]),
                names(&["normal"]),
            ),
            Some(other) => panic!("no account {other} in this world"),
            // An update resolves only an account it names.
            None if update => (Vec::new(), Vec::new()),
            None => (names(&["physics", "root"]), names(&["qos_lafferty"])),
        };
        let typed = partition
            .is_some_and(|p| p.split(',').any(|p| p == "grp_a40"))
            .then(|| TypedLimit {
                level: LimitLevel::Partition {
                    partition: "grp_a40".into(),
                    qos: "part_a40".into(),
                },
                types: vec!["a40".into()],
            })
            .into_iter()
            .collect();
        World {
            default_qos,
            accounts,
            typed,
        }
    }
}

/// Judges a submission line as the plugin sees it; `spelling` overrides
/// what the line says (as where the request came from `SBATCH_GRES`).
pub(super) fn judge_line(
    cfg: &GpuQosConfig,
    line: &str,
    spelling: Option<PerNodeSpelling>,
) -> Verdict {
    let o = parse(line);
    let joined = |items: &[String]| (!items.is_empty()).then(|| items.join(","));
    let (per_node, per_job) = (joined(&o.per_node), joined(&o.per_job));
    let (per_task, per_socket) = (joined(&o.per_task), joined(&o.per_socket));
    let world = World::for_line(o.account.as_deref(), o.partition.as_deref(), false);
    let job = JobDescription {
        qos: o.qos.as_deref(),
        tres_per_node: per_node.as_deref(),
        tres_per_job: per_job.as_deref(),
        tres_per_task: per_task.as_deref(),
        tres_per_socket: per_socket.as_deref(),
        num_tasks: o.ntasks,
        partition: o.partition.as_deref(),
        per_node_spelling: spelling.unwrap_or_else(|| o.per_node_spelling()),
        resolved: Resolved {
            default_qos: if o.qos.is_some() {
                &[]
            } else {
                &world.default_qos
            },
            default_partition: Some("cpu"),
            accounts: &world.accounts,
            user: Some("alice"),
            typed_limits: &world.typed,
            typed_limits_anywhere: true,
        },
        ..JobDescription::default()
    };
    judge_submit(cfg, &job)
}

fn refusal(verdict: Verdict, what: &str) -> String {
    match verdict {
        Verdict::Reject(r) => r.message,
        Verdict::Accept(c) => panic!("`{what}` was accepted ({c:?}): not a case of this test"),
    }
}

/// The GPU options a message names, as a user would copy them.
fn options_in(message: &str) -> Vec<String> {
    message
        .split_whitespace()
        .map(|w| {
            w.trim_start_matches('(')
                .trim_end_matches(['.', ',', ';', ':', ')'])
        })
        .filter(|w| GPU_OPTIONS.iter().any(|o| w.starts_with(o)))
        .map(str::to_owned)
        .collect()
}

/// The asked option's name (`--gpus-per-node`), from a line's GPU option.
fn option_name(option: &str) -> &str {
    option.split('=').next().unwrap_or(option)
}

/// Each option `line`'s refusal suggests, fed back in the asked one's
/// place (or added, where the line asks for none): each is accepted.
/// Returns how many were fed back.
fn advice_is_accepted(cfg: &GpuQosConfig, line: &str, spelling: Option<PerNodeSpelling>) -> usize {
    let message = refusal(judge_line(cfg, line, spelling), line);
    // The request as typed, and in the other per-node spelling (quoted
    // beside it where the spelling is unknown).
    let asked: Vec<String> = line
        .split_whitespace()
        .filter(|w| GPU_OPTIONS.iter().any(|o| w.starts_with(o)))
        .flat_map(|w| {
            let other = w
                .strip_prefix("--gres=gpu:")
                .map(|rest| format!("--gpus-per-node={rest}"))
                .or_else(|| {
                    w.strip_prefix("--gpus-per-node=")
                        .map(|rest| format!("--gres=gpu:{rest}"))
                });
            std::iter::once(w.to_owned()).chain(other)
        })
        .collect();
    let suggested: Vec<String> = options_in(&message)
        .into_iter()
        .filter(|o| !asked.contains(o))
        .collect();
    assert!(
        !suggested.is_empty(),
        "`{line}`: no option to type in: {message}"
    );
    for option in &suggested {
        let typed = parse(&format!("sbatch {option}"));
        let items = typed
            .per_node
            .iter()
            .chain(&typed.per_job)
            .chain(&typed.per_task);
        for item in items.chain(&typed.per_socket) {
            assert!(
                item.split(':').count() >= 4,
                "`{line}`: {option} names no GPU type: {message}"
            );
        }
        let fixed = match with_replaced_gpu_option(line, &parse(line), option) {
            Some(fixed) => fixed,
            None => line.replacen("sbatch", &format!("sbatch {option}"), 1),
        };
        if let Verdict::Reject(r) = judge_line(cfg, &fixed, spelling) {
            panic!(
                "`{line}` was told to type {option}, but `{fixed}` is refused too:\n{message}\n\
                 then: {}",
                r.message
            );
        }
    }
    suggested.len()
}

/// A refusal of an untyped or mistyped request quotes it as typed, and
/// suggests the same option (where the option is known).
fn quotes_and_keeps_the_spelling(cfg: &GpuQosConfig, line: &str) {
    let message = refusal(judge_line(cfg, line, None), line);
    let asked = line
        .split_whitespace()
        .find(|w| GPU_OPTIONS.iter().any(|o| w.starts_with(o)))
        .unwrap_or_else(|| panic!("`{line}` asks for no GPU"));
    assert!(
        message.contains(asked),
        "`{line}`: the refusal does not quote {asked}: {message}"
    );
    for option in options_in(&message) {
        assert_eq!(
            option_name(&option),
            option_name(asked),
            "`{line}`: {option} is not in the user's spelling: {message}"
        );
    }
}

/// Each way of asking for `n` GPUs of `ty` (`None`: untyped), with the
/// options that make the count per unit a total of `n` or more.
fn ways(ty: Option<&str>, n: u64) -> Vec<String> {
    let t = ty.map(|t| format!("{t}:")).unwrap_or_default();
    vec![
        format!("--gres=gpu:{t}{n}"),
        format!("--gpus={t}{n}"),
        format!("--gpus-per-node={t}{n}"),
        format!("-n 2 --gpus-per-task={t}{}", n.div_ceil(2)),
        format!("--gpus-per-socket={t}{n}"),
    ]
}

#[test]
fn every_suggested_command_line_is_accepted_by_the_policy() {
    let cfg = qos_conf::parse(CONF, "gpu_qos.conf").unwrap();
    // (the level's options, a type it refuses, its limit of a40)
    let levels: [(&str, &str, u64); 4] = [
        ("--qos=qos_lafferty", "h100", 4),
        // No --qos: the default QOS qos_lafferty.
        ("", "h100", 4),
        ("--qos=normal -p gpu", "a100", 8),
        ("--qos=normal -A lafferty_students", "h100", 6),
    ];
    let mut fed = 0;
    for (level, wrong, limit) in levels {
        let refused = ways(None, 2)
            .into_iter()
            .chain(ways(Some(wrong), 1))
            .chain(ways(Some("a40"), limit + 1));
        for ask in refused {
            let line = format!("sbatch {level} {ask} job.sh");
            fed += advice_is_accepted(&cfg, &line, None);
            if !ask.contains("a40:") {
                quotes_and_keeps_the_spelling(&cfg, &line);
            }
            // Where the plugin cannot tell --gres from --gpus-per-node,
            // both are suggested, and each is accepted.
            if ask.starts_with("--gres=") || ask.starts_with("--gpus-per-node=") {
                let both = advice_is_accepted(&cfg, &line, Some(PerNodeSpelling::Unknown));
                assert!(both >= 2, "`{line}`: {both} spellings suggested");
            }
        }
    }
    // A group QOS named for a job that asks for no GPU.
    fed += advice_is_accepted(&cfg, "sbatch --qos=qos_lafferty -t 5 job.sh", None);
    // A typed limit of the database that no rule covers.
    for ask in ways(None, 1) {
        let line = format!("sbatch --qos=normal -p grp_a40 {ask} job.sh");
        fed += advice_is_accepted(&cfg, &line, None);
        quotes_and_keeps_the_spelling(&cfg, &line);
    }
    // RequireGPUType=all: untyped anywhere.
    let all = qos_conf::parse(&format!("{CONF}RequireGPUType=all\n"), "gpu_qos.conf").unwrap();
    for ask in ways(None, 1) {
        let line = format!("sbatch --qos=normal {ask} job.sh");
        fed += advice_is_accepted(&all, &line, None);
        quotes_and_keeps_the_spelling(&all, &line);
    }
    assert!(fed >= 70, "only {fed} suggestions fed back");
}

/// Judges an `scontrol update job=N KEY=VALUE ...` line as the plugin sees it.
fn judge_update(cfg: &GpuQosConfig, line: &str) -> Verdict {
    let mut job = JobDescription {
        job_id_for_messages: Some(7),
        ..JobDescription::default()
    };
    let pairs: Vec<(String, String)> = line
        .split_whitespace()
        .skip(2)
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
        .collect();
    let value = |key: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    // scontrol sends Gres= through gres_prepend_tres_type, the others as typed.
    let gres = value("gres").map(|v| format!("gres:{v}"));
    job.qos = value("qos");
    job.partition = value("partition");
    job.tres_per_node = gres.as_deref();
    job.tres_per_job = value("tresperjob");
    job.tres_per_task = value("trespertask");
    let world = World::for_line(value("account"), job.partition, true);
    job.resolved = Resolved {
        accounts: &world.accounts,
        typed_limits: &world.typed,
        typed_limits_anywhere: true,
        ..Resolved::default()
    };
    judge_modify(cfg, &job)
}

#[test]
fn every_suggested_update_is_accepted_and_keeps_the_move_asked_for() {
    let cfg = qos_conf::parse(CONF, "gpu_qos.conf").unwrap();
    for line in [
        "scontrol update job=7 QOS=qos_lafferty",
        "scontrol update job=7 QOS=qos_lafferty Gres=gpu:2",
        "scontrol update job=7 QOS=qos_lafferty Gres=gpu:h100:1",
        "scontrol update job=7 QOS=qos_lafferty TresPerJob=gres:gpu:a40:5",
        "scontrol update job=7 Partition=gpu",
        "scontrol update job=7 Partition=gpu Gres=gpu:1",
        "scontrol update job=7 Partition=grp_a40",
        "scontrol update job=7 Account=lafferty_students",
        "scontrol update job=7 Account=lafferty_students Gres=gpu:a40:7",
        "scontrol update job=7 Gres=gpu:1",
    ] {
        let message = refusal(judge_update(&cfg, line), line);
        let suggested: Vec<&str> = message
            .match_indices("scontrol update job=7")
            .map(|(at, _)| {
                let rest = &message[at..];
                rest.split('\n')
                    .next()
                    .unwrap_or(rest)
                    .trim_end_matches('.')
            })
            .collect();
        assert!(
            !suggested.is_empty(),
            "`{line}`: no update suggested: {message}"
        );
        for fixed in suggested {
            // The update still does what was asked of it.
            for word in line.split_whitespace().skip(3) {
                let key = word.split('=').next().unwrap_or(word);
                if ["QOS", "Partition", "Account"].contains(&key) {
                    assert!(
                        fixed.split_whitespace().any(|w| w == word),
                        "`{line}`: `{fixed}` drops {word}"
                    );
                }
            }
            if let Verdict::Reject(r) = judge_update(&cfg, fixed) {
                panic!(
                    "`{line}` was told to type `{fixed}`, which is refused too:\n{message}\n\
                     then: {}",
                    r.message
                );
            }
        }
    }
}

/// An ended job on one GPU of `alloc` with gpushare's `words`.
fn used_job(alloc: &str, words: &str) -> crate::qos::slurm::used::UsedJob {
    crate::qos::slurm::used::UsedJob {
        id: "7".into(),
        user: "alice".into(),
        alloc_tres: alloc.into(),
        state: "COMPLETED".into(),
        elapsed_s: Some(600),
        admin_comment: words.into(),
        ..Default::default()
    }
}

#[test]
fn every_line_advise_gives_is_accepted_by_the_policy() {
    use super::advise::{decide, entry, Kind, Site};
    let cfg = qos_conf::parse(&format!("{CONF}MaxMPSPerJob=100\n"), "gpu_qos.conf").unwrap();
    let site = Site {
        units_per_gpu: 100,
        max_mps_per_job: cfg.max_mps_per_job(),
        gpu_memory_mib: Vec::new(),
    };
    let words = |units: &str, peak: u64, limit: u64, sm: &str| {
        format!(
            "gpushare-usage: gpu=0 units={units} mem_peak_mib={peak} mem_limit_mib={limit} \
             sm_mean={sm} samples=30"
        )
    };
    // (the GPU option asked, the job, the advice it gets)
    let jobs = [
        (
            "--gres=gpu:a40:1",
            used_job(
                "gres/gpu:a40=1,gres/gpu=1",
                &words("whole", 4096, 46_068, "0.1"),
            ),
            Kind::ShareInstead,
        ),
        (
            "--gres=mps:50",
            used_job("gres/mps=50", &words("50/100", 1024, 23_034, "0.1")),
            Kind::Smaller,
        ),
        (
            "--gres=mps:25",
            used_job("gres/mps=25", &words("25/100", 11_517, 11_517, "0.5")),
            Kind::Larger,
        ),
        (
            "--gres=mps:100",
            used_job("gres/mps=100", &words("100/100", 46_068, 46_068, "0.5")),
            Kind::WholeInstead,
        ),
    ];
    let mut judged = 0;
    for level in [
        "--qos=qos_lafferty",
        "",
        "--qos=normal -p gpu",
        "-q qos_lafferty -p gpu",
        "--qos=normal -A lafferty_students",
    ] {
        for (ask, job, kind) in &jobs {
            let line = format!("sbatch {level} {ask} -t 30 job.sh");
            // The job's record: the QOS and partition it ran under.
            let o = parse(&line);
            let mut job = job.clone();
            job.qos = o.qos.unwrap_or_else(|| "qos_lafferty".into());
            job.partition = o.partition.unwrap_or_else(|| "cpu".into());
            let d = decide(&job, &site).unwrap();
            assert_eq!(d.kind, *kind, "{line}");
            let e = entry(&job, d, Some(&line), Some("a40"), Some(&cfg));
            assert!(
                e.command.starts_with(&format!("sbatch {} ", e.option)),
                "{}",
                e.command
            );
            // Read as a shell reads what is pasted.
            let words = crate::shared::user_text::shell_split(&e.command)
                .unwrap_or_else(|| panic!("`{}` is not plain words", e.command));
            if let Verdict::Reject(r) = judge_line(&cfg, &words.join(" "), None) {
                panic!(
                    "`{line}` was advised `{}`, which is refused:\n{}",
                    e.command, r.message
                );
            }
            judged += 1;
        }
    }
    assert_eq!(judged, 20);
}
