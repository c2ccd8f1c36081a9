use crate::qos::slurm::jobs::parse as parse_jobs;
use crate::qos::slurm::priority::{parse_factors, parse_ranked};
use crate::qos::slurm::shares::parse_shares;
use crate::qos::why::explain::explain;
use crate::qos::why::facts::Facts;
use crate::qos::why::fixtures::*;

#[test]
fn fair_share_usage_comes_with_what_each_gpu_type_costs() {
    let mut job = one(PENDING);
    job.reason = "Priority".into();
    let (nodes, _) = crate::qos::site::parse_nodes(
        "NodeName=a Gres=gpu:a40:4 Partitions=gpu\nNodeName=b Gres=gpu:h100:4 Partitions=gpu\n",
    );
    let (partitions, _) = crate::qos::site::parse_partitions(
        "PartitionName=gpu Nodes=a,b TRESBillingWeights=CPU=1,GRES/gpu=1,GRES/gpu:h100=1.5\n",
    );
    let r = explain(
        job,
        Facts {
            factors: Some(parse_factors(SPRIO)[0].1.clone()),
            weights: Some(parse_factors(WEIGHTS)[0].1.clone()),
            shares: parse_shares(SSHARE),
            nodes,
            partition: partitions.into_iter().next(),
            ..Facts::default()
        },
    );
    assert_eq!(
        r.details.last().map(String::as_str),
        Some("fair share counts GPU time as partition gpu's TRESBillingWeights bill it: an h100-hour counts 2.5 a40-hours")
    );
}

#[test]
fn a_priority_wait_names_the_factor_that_holds_it_back_and_the_usage() {
    let mut job = one(PENDING);
    job.reason = "Priority".into();
    let factors = parse_factors(SPRIO);
    let weights = parse_factors(WEIGHTS);
    assert_eq!(weights[0].0, "Weights");
    assert_eq!(
        (weights[0].1.age, weights[0].1.fairshare, weights[0].1.qos),
        (100.0, 1000.0, 10000.0)
    );
    let shares = parse_shares(SSHARE);
    assert_eq!(shares.len(), 2);
    assert_eq!(shares[1].user.as_deref(), Some("root"));
    assert_eq!(shares[0].fairshare, None);
    let r = explain(
        job,
        Facts {
            factors: Some(factors[0].1.clone()),
            weights: Some(weights[0].1.clone()),
            shares,
            half_life: Some("7-00:00:00".into()),
            ..Facts::default()
        },
    );
    assert!(
        r.summary
            .ends_with("waits behind pending jobs of higher priority"),
        "{}",
        r.summary
    );
    assert_eq!(
        r.details[0],
        "its priority is 10000 = QOS 10000 of 10000 + fair share 0 of 1000 + age 0 of 100 (sprio)"
    );
    assert!(
        r.details[1].starts_with("fair share holds it back most: 1000 below its weight"),
        "{}",
        r.details[1]
    );
    assert_eq!(
        r.details[3],
        "user root in account research: fair-share factor 0.2500, effective usage 0.0000 \
         against normalized shares 1.0000; used 20.0 a40-hours (decayed, half-life 7-00:00:00)"
    );
    assert_eq!(
        r.see,
        vec!["sprio -l -j 4", "sshare -l -A research -u root"]
    );
}

#[test]
fn a_job_behind_others_is_told_who_is_ahead_and_which_factor_puts_them_there() {
    let mut job = one(PENDING);
    job.reason = "Priority".into();
    job.priority = 1250;
    // Two ahead (bob's two, more fair share), one behind, another partition's.
    let ranked = parse_ranked(
        "7|gpu|bob|1900|0|50|0|850|0|0|1000|0||\n\
         8|gpu|bob|1700|0|40|0|660|0|0|1000|0||\n\
         4|gpu|root|1250|0|50|0|200|0|0|1000|0||\n\
         9|gpu|carol|1100|0|100|0|0|0|0|1000|0||\n\
         10|other|dave|9000|0|0|0|0|0|0|9000|0||\n",
    );
    assert_eq!(ranked.len(), 5);
    // As squeue shows them: bob's first asks for a40s, his second an h100.
    let (pending, unread) = parse_jobs(
        "7|bob|research|PD|normal|gpu|1900|cpu=1,gres/gpu=2,gres/gpu:a40=2|Priority|N/A|(null)|N/A|NONE||0|\n\
         8|bob|research|PD|qos_lafferty|gpu|1700|cpu=1,gres/gpu=1,gres/gpu:h100=1|Priority|N/A|(null)|N/A|NONE||0|\n\
         9|carol|research|PD|normal|gpu|1100|cpu=1,gres/gpu=2,gres/gpu:a40=2|Priority|N/A|(null)|N/A|NONE||0|\n",
    );
    assert!(unread.is_empty(), "{unread:?}");
    let weights = parse_factors(WEIGHTS);
    let facts = Facts {
        factors: Some(ranked[2].factors.clone()),
        weights: Some(weights[0].1.clone()),
        ranked,
        pending,
        ..Facts::default()
    };
    let r = explain(job.clone(), facts.clone());
    assert_eq!(
        r.details[1],
        "2 pending jobs of partition gpu are ahead of it (by user: bob 2)"
    );
    assert_eq!(
        r.details[2],
        "of them, 1 asks for a40 GPUs as this job does (by QOS: normal 1)"
    );
    assert_eq!(
        r.details[3],
        "fair share puts them ahead: 755 on average against its 200 (recent usage against \
         shares, of the account and the user: see below)"
    );
    // Where PrivateData hides some, the line says how many it saw; an
    // untyped job competes with any GPU job.
    let mut seen_one = facts.clone();
    seen_one.pending.retain(|p| p.id == "8");
    let r = explain(job.clone(), seen_one);
    assert_eq!(r.details[2], "of the 1 you may see, none asks for a40 GPUs");
    let mut untyped = job;
    untyped.gpus = vec![(None, 1)];
    let r = explain(untyped, facts);
    assert_eq!(
        r.details[2],
        "of them, 2 ask for GPUs as this job does (by QOS: normal 1, qos_lafferty 1)"
    );
}
