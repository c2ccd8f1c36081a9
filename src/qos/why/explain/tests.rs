use crate::qos::slurm::jobs::parse as parse_jobs;
use crate::qos::why::explain::explain;
use crate::qos::why::facts::Facts;
use crate::qos::why::fixtures::*;

#[test]
fn a_job_behind_a_preempted_job_is_told_when_it_should_start() {
    let (preemptable, _) = parse_jobs(VICTIMS);
    let r = explain(
        one(PENDING),
        Facts {
            preemptable,
            qos: vec![
                qos("qos_lafferty", &["lowprio"], None),
                qos("lowprio", &[], Some(120)),
            ],
            ..Facts::default()
        },
    );
    assert_eq!(
        r.summary,
        "job 4 (root, QOS qos_lafferty, 2 a40, partition gpu) waits for 1 preempted job to \
         end: it should start by 2026-11-23T23:09:24"
    );
    assert_eq!(
        r.details,
        vec![
            "lowprio job 1 (root, 4 a40) on gpu01 was signalled at 2026-11-23T23:07:24; \
             lowprio's GraceTime is 2 min: it ends by 2026-11-23T23:09:24"
        ]
    );
    // The job on gpu02, not signalled, is not waited for.
    assert_eq!(r.preempting.len(), 1);
}

#[test]
fn a_resources_wait_names_the_planned_node_and_what_may_be_preempted_there() {
    let (mut preemptable, _) = parse_jobs(VICTIMS);
    for v in &mut preemptable {
        v.preempt_time = None;
    }
    let r = explain(
        one(PENDING),
        Facts {
            preemptable,
            ..Facts::default()
        },
    );
    assert!(
        r.summary
            .ends_with("waits for free GPUs: no node it may run on has enough free now"),
        "{}",
        r.summary
    );
    assert_eq!(
        r.details,
        vec![
            "Slurm plans it on gpu01, expected to start by 2026-11-23T23:07:56 (an estimate)",
            "lowprio job 1 (root, 4 a40) there may be preempted for it",
        ]
    );
}

#[test]
fn a_victim_without_an_end_ends_by_its_grace_time() {
    let (mut preemptable, _) = parse_jobs(VICTIMS);
    preemptable[0].end = None;
    let facts = |grace| Facts {
        preemptable: preemptable.clone(),
        qos: vec![
            qos("qos_lafferty", &["lowprio"], None),
            qos("lowprio", &[], grace),
        ],
        ..Facts::default()
    };
    let r = explain(one(PENDING), facts(Some(60)));
    assert!(
        r.summary
            .ends_with("it should start by 2026-11-23T23:08:24"),
        "{}",
        r.summary
    );
    let r = explain(one(PENDING), facts(None));
    assert!(
        r.summary
            .ends_with("it should start by the end of their grace time"),
        "{}",
        r.summary
    );
}
