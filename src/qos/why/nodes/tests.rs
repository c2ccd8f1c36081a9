use super::node_names;
use crate::qos::slurm::jobs::parse as parse_jobs;
use crate::qos::why::explain::explain;
use crate::qos::why::facts::Facts;
use crate::qos::why::fixtures::*;

#[test]
fn a_resources_wait_describes_each_node_that_could_run_it_and_its_holders() {
    let (mut preemptable, _) = parse_jobs(VICTIMS);
    for v in &mut preemptable {
        v.preempt_time = None;
    }
    let (group_running, _) = parse_jobs(
        "7|alice|research|R|qos_lafferty|gpu|10000|cpu=1,node=1,billing=1,gres/gpu=2,gres/gpu:a40=2|None|2026-11-23T23:00:00|(null)|N/A|NONE|gpu03|0|\n",
    );
    let (nodes, unread) = crate::qos::site::parse_nodes(
        "NodeName=gpu02 Gres=gpu:a40:4,mps:400 State=MIXED AllocTRES=cpu=2,gres/gpu=4,gres/gpu:a40=4,gres/mps=50 Partitions=gpu\n\
         NodeName=gpu01 Gres=gpu:a40:4 State=ALLOCATED AllocTRES=cpu=1,gres/gpu=4 Partitions=gpu\n\
         NodeName=gpu03 Gres=gpu:a40:4 State=MIXED+DRAIN AllocTRES=cpu=2,gres/gpu:a40=3 Partitions=gpu\n\
         NodeName=gpu04 Gres=gpu:h100:2 State=IDLE Partitions=gpu\n\
         NodeName=cpu01 State=IDLE Partitions=cpu\n",
    );
    assert!(unread.is_empty(), "{unread:?}");
    let r = explain(
        one(PENDING),
        Facts {
            qos: vec![
                qos("qos_lafferty", &["lowprio"], None),
                qos("lowprio", &[], Some(120)),
            ],
            preemptable,
            group_running,
            nodes,
            ..Facts::default()
        },
    );
    assert_eq!(
        r.details,
        vec![
            "Slurm plans it on gpu01, expected to start by 2026-11-23T23:07:56 (an estimate)",
            "lowprio job 1 (root, 4 a40) there may be preempted for it",
            // Planned first; a node that tracks only gres/gpu counts
            // it for its one type.
            "gpu01 (ALLOCATED), where Slurm plans it: 4 a40, 4 in use: lowprio job 1 (root, 4 a40), which it may preempt",
            "gpu02 (MIXED): 4 a40, 4 in use: lowprio job 3 (root, 4 a40), which it may preempt; MPS shares hold 50 units",
            "gpu03 (MIXED+DRAIN): 4 a40, 3 in use: qos_lafferty job 7 (alice, 2 a40); 1 by other jobs; it takes no new job in this state",
        ]
    );
}

#[test]
fn host_lists_expand_with_their_width() {
    assert_eq!(
        node_names("gpu[01-03,07],login"),
        vec!["gpu01", "gpu02", "gpu03", "gpu07", "login"]
    );
    assert_eq!(node_names("n[9-10]"), vec!["n9", "n10"]);
}

/// The nodes of the Resources wait above, with every running job there
/// read (`squeue -t RUNNING -w`).
fn nodes_with_holders(running: &str, private: bool) -> Vec<String> {
    let (nodes, _) = crate::qos::site::parse_nodes(
        "NodeName=gpu02 Gres=gpu:a40:4,mps:400 State=MIXED AllocTRES=cpu=2,gres/gpu=4,gres/gpu:a40=4,gres/mps=50 Partitions=gpu\n\
         NodeName=gpu01 Gres=gpu:a40:4 State=ALLOCATED AllocTRES=cpu=1,gres/gpu=4 Partitions=gpu\n\
         NodeName=gpu03 Gres=gpu:a40:4 State=MIXED+DRAIN AllocTRES=cpu=2,gres/gpu:a40=3 Partitions=gpu\n",
    );
    let (jobs, unread) = parse_jobs(running);
    assert!(unread.is_empty(), "{unread:?}");
    let r = explain(
        one(PENDING),
        Facts {
            qos: vec![qos("qos_lafferty", &["lowprio"], None)],
            nodes,
            running_on_nodes: Some(jobs),
            jobs_private: private,
            ..Facts::default()
        },
    );
    r.details.into_iter().skip(1).collect()
}

#[test]
fn every_holder_is_named_soonest_end_first_and_the_earliest_room_is_told() {
    let running = "11|carol|research|R|normal|gpu|1|cpu=1,node=1,gres/gpu:a40=2|None|2026-11-23T23:00:00|(null)|N/A|2026-11-23T23:30:00|gpu01|0|\n\
        12|dave|research|R|normal|gpu|1|cpu=1,node=1,gres/gpu:a40=2|None|2026-11-23T23:00:00|(null)|N/A|2026-11-23T23:20:00|gpu01|0|\n\
        13|erin|research|R|lowprio|gpu|1|cpu=2,node=2,gres/gpu:a40=4|None|2026-11-23T23:00:00|(null)|N/A|2026-11-23T23:10:00|gpu[02-03]|0|\n\
        14|frank|research|R|normal|gpu|1|cpu=1,node=1,gres/gpu:a40=2|None|2026-11-23T23:00:00|(null)|N/A|Unknown|gpu02|0|\n";
    assert_eq!(
        nodes_with_holders(running, false),
        vec![
            "gpu01 (ALLOCATED), where Slurm plans it: 4 a40, 4 in use: normal job 12 (dave, 2 a40, ends by 2026-11-23T23:20:00); normal job 11 (carol, 2 a40, ends by 2026-11-23T23:30:00)",
            // A two-node job holds half its GPUs on each node.
            "gpu02 (MIXED): 4 a40, 4 in use: lowprio job 13 (erin, 2 a40, ends by 2026-11-23T23:10:00), which it may preempt; normal job 14 (frank, 2 a40, no end set); MPS shares hold 50 units",
            "gpu03 (MIXED+DRAIN): 4 a40, 3 in use: lowprio job 13 (erin, 2 a40, ends by 2026-11-23T23:10:00), which it may preempt; 1 by other jobs; it takes no new job in this state",
            "enough a40s free up first on gpu02 by 2026-11-23T23:10:00, when job 13 ends by its time limit, if nothing else starts there first (Slurm's estimate: 2026-11-23T23:07:56)",
        ]
    );
    // Room that rests on a job without an end is not promised.
    let endless = running
        .replace("2026-11-23T23:10:00", "Unknown")
        .replace("|2026-11-23T23:20:00|", "|Unknown|")
        .replace("|2026-11-23T23:30:00|", "|NONE|");
    let told = nodes_with_holders(&endless, false);
    assert_eq!(
        told.last().map(String::as_str),
        Some("when enough a40s free up is not known: it rests on jobs without an end or that Slurm does not show you (Slurm's estimate: 2026-11-23T23:07:56)")
    );
}

#[test]
fn gpus_of_jobs_private_data_hides_are_counted() {
    let told = nodes_with_holders("", true);
    assert_eq!(
        told[0],
        "gpu01 (ALLOCATED), where Slurm plans it: 4 a40, 4 in use: 4 by jobs Slurm does not show you (PrivateData=jobs)"
    );
    assert!(
        told[3].starts_with("when enough a40s free up is not known"),
        "{told:#?}"
    );
}

#[test]
fn a_resources_wait_on_a_node_with_its_gpus_free_says_it_waits_for_the_rest() {
    let (nodes, _) = crate::qos::site::parse_nodes(
        "NodeName=gpu01 Gres=gpu:a40:4 State=ALLOCATED AllocTRES=cpu=64,gres/gpu=4 Partitions=gpu\n\
         NodeName=gpu02 Gres=gpu:a40:4 State=MIXED AllocTRES=cpu=64,mem=500G,gres/gpu:a40=1 Partitions=gpu\n",
    );
    let (jobs, _) = parse_jobs(
        "11|carol|research|R|normal|gpu|1|cpu=64,node=1,gres/gpu:a40=1|None|2026-11-23T23:00:00|(null)|N/A|2026-11-23T23:30:00|gpu02|0|\n",
    );
    let r = explain(
        one(PENDING),
        Facts {
            qos: vec![qos("qos_lafferty", &["lowprio"], None)],
            nodes,
            running_on_nodes: Some(jobs),
            ..Facts::default()
        },
    );
    assert!(
        r.summary
            .ends_with("waits for resources other than GPUs: gpu02 has the 2 a40 it needs free"),
        "{}",
        r.summary
    );
    assert_eq!(
        r.details.last().map(String::as_str),
        Some(
            "the a40s it needs are free now on gpu02: it waits there for the rest of what it asks \
             for (CPUs, memory, more nodes; scontrol show node gpu02 shows what is allocated) \
             (Slurm's estimate: 2026-11-23T23:07:56)"
        ),
        "{:#?}",
        r.details
    );
}
