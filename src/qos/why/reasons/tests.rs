use crate::qos::slurm::runs::parse_runs;
use crate::qos::why::explain::explain;
use crate::qos::why::facts::Facts;
use crate::qos::why::fixtures::*;

#[test]
fn an_account_limit_wait_names_the_account_that_is_full() {
    use crate::qos::gres::{AccountUse, TypeUse};
    let mut job = one(PENDING);
    job.reason = "AssocGrpGRES".into();
    job.account = "lafferty_students".into();
    let limit = |account: &str, gpu_type: &str, limit, held| AccountUse {
        account: account.into(),
        types: vec![TypeUse {
            gpu_type: gpu_type.into(),
            limit,
            held,
        }],
    };
    let r = explain(
        job.clone(),
        Facts {
            // The nearest account has room; its parent has none.
            account_limits: vec![
                limit("lafferty_students", "a40", 8, 2),
                limit("lafferty", "a40", 4, 4),
            ],
            ..Facts::default()
        },
    );
    assert_eq!(
        r.summary,
        "job 4 (root, QOS qos_lafferty, 2 a40, partition gpu) waits for account \
         lafferty's GPU limit: 4 of 4 a40 held by the jobs of the account and its \
         sub-accounts"
    );
    assert!(r.see.contains(&"gpu-qos usage".to_owned()));
    // Nothing read: Slurm's own words for it.
    let r = explain(job, Facts::default());
    assert!(
        r.summary
            .contains("waits for account lafferty_students's own GPU limit"),
        "{}",
        r.summary
    );
}

#[test]
fn other_reasons_get_a_sentence_and_a_command() {
    for (reason, words, cmd) in [
        (
            "QOSMaxGRESPerUser",
            "as many GPUs under qos_lafferty",
            Some("squeue --me -q qos_lafferty"),
        ),
        (
            "ReqNodeNotAvail",
            "down, drained or reserved",
            Some("sinfo -R"),
        ),
        (
            "JobHeldUser",
            "held by its user",
            Some("scontrol release 4"),
        ),
        (
            "Weird",
            "Slurm's reason is Weird",
            Some("man squeue (JOB REASON CODES)"),
        ),
    ] {
        let mut job = one(PENDING);
        job.reason = reason.into();
        let r = explain(job, Facts::default());
        assert!(r.summary.contains(words), "{reason}: {}", r.summary);
        assert_eq!(r.see.first().map(String::as_str), cmd, "{reason}");
    }
    let mut running = one(PENDING);
    running.state = "R".into();
    assert!(explain(running, Facts::default())
        .summary
        .ends_with("is not pending (state R)"));
}

#[test]
fn a_requeued_job_is_told_its_runs_and_what_became_of_its_output() {
    let mut job = one(VICTIMS);
    job.state = "PD".into();
    job.reason = "BeginTime".into();
    job.restarts = 1;
    let runs = parse_runs(
        "1|PREEMPTED|2026-11-23T23:07:09|2026-11-23T23:09:24|gpu01\n\
         1|PENDING|Unknown|Unknown|None assigned\n",
    );
    assert_eq!(runs.len(), 1);
    let facts = Facts {
        runs,
        qos: vec![
            qos("qos_lafferty", &["lowprio"], None),
            qos("lowprio", &[], Some(120)),
        ],
        file_append: Some(false),
        low_priority_qos: Some(vec!["lowprio".to_owned()]),
        ..Facts::default()
    };
    let r = explain(job, facts);
    assert_eq!(
        r.details,
        vec![
            "it was requeued 1 time (jobs of qos_lafferty may preempt lowprio jobs)",
            "ran 2026-11-23T23:07:09 to 2026-11-23T23:09:24 on gpu01: PREEMPTED",
            "if it was submitted with --qos=lowprio, each run appends to its output file, so \
             the earlier runs' output stays in it: gpu_qos turns on --open-mode=append for it \
             unless it was submitted with --open-mode=truncate; submitted without naming \
             lowprio (its default QOS), each run starts its output file anew, losing the \
             earlier runs' output, unless it was submitted with --open-mode=append",
            "a job that may be preempted should save its state when it gets SIGTERM (it \
             then has lowprio's GraceTime, 2 min, to do so) and resume from it when it \
             starts again",
        ]
    );
    assert_eq!(
        r.see.last().map(String::as_str),
        Some("sacct -D -X -j 1 -o JobID,State,Start,End,NodeList")
    );
}
