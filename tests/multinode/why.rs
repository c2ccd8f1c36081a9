//! `gpu-qos why` across nodes: a job waiting for `Resources` is told
//! which nodes it needs and who holds them. A module of `multinode.rs`
//! (its helpers), in a file of its own.

use super::*;

/// A group job that fits its group's limit but no node: the a40 nodes
/// hold jobs it may not preempt (root's, QOS normal) and one of its own
/// group's, each with a time limit. `gpu-qos why`, run by its user, names
/// each a40 node with its GPUs in use, the jobs holding them soonest end
/// first, and when enough of them end; the h100 node not at all. Where
/// `PrivateData=jobs` hides other users' jobs, it counts their GPUs.
pub(crate) fn why_resources(c: &mut Cluster, private: bool) -> TestResult {
    let alice = TestUser::create(c, "gpushare_alice")?;
    let bob = TestUser::create(c, "gpushare_bob")?;
    for u in [&alice, &bob] {
        u.allow_qos(c, &["normal", "qos_lafferty"])?;
    }
    let sbatch_as = |user: &TestUser, args: &[&str]| -> Result<u32, String> {
        let mut all = vec!["--output=/dev/null", "--wrap=sleep 300"];
        all.extend_from_slice(args);
        user.sbatch(c, &all)
    };
    let group = sbatch_as(
        &alice,
        &[
            "--qos=qos_lafferty",
            "-t",
            "30",
            "-w",
            "gpu01",
            "--gres=gpu:a40:2",
        ],
    )?;
    let filler1 = c.sbatch_ok(&[
        "-t",
        "10",
        "-w",
        "gpu01",
        "--gres=gpu:a40:2",
        "--wrap=sleep 300",
    ])?;
    let filler2 = c.sbatch_ok(&[
        "-t",
        "20",
        "-w",
        "gpu02",
        "--gres=gpu:a40:4",
        "--wrap=sleep 300",
    ])?;
    let mut ends = BTreeMap::new();
    for id in [group, filler1, filler2] {
        let info = c.wait_job_state(id, &["RUNNING"], JOB_START)?;
        ends.insert(id, info.get("EndTime").unwrap_or_default().to_owned());
    }
    let waiting = sbatch_as(&bob, &["--qos=qos_lafferty", "--gres=gpu:a40:2"])?;
    c.wait_job_reason(waiting, "Resources", JOB_START)?;
    let report = bob.why(c, waiting, "Resources")?;
    let node = |name: &str| {
        report
            .details
            .iter()
            .find(|d| d.starts_with(&format!("{name} (")))
            .cloned()
            .unwrap_or_default()
    };
    let (one, two) = (node("gpu01"), node("gpu02"));
    let when = report
        .details
        .iter()
        .find(|d| d.starts_with("enough a40s") || d.starts_with("when enough a40s"))
        .cloned()
        .unwrap_or_default();
    let (want_one, want_two, want_when) = if private {
        let hidden = "by jobs Slurm does not show you (PrivateData=jobs)";
        (
            format!(": 4 a40, 4 in use: 4 {hidden}"),
            format!(": 4 a40, 4 in use: 4 {hidden}"),
            "when enough a40s free up is not known: it rests on jobs without an end or that \
             Slurm does not show you ("
                .to_owned(),
        )
    } else {
        (
            format!(
                ": 4 a40, 4 in use: normal job {filler1} (root, 2 a40, ends by {}); qos_lafferty \
                 job {group} (gpushare_alice, 2 a40, ends by {})",
                ends[&filler1], ends[&group]
            ),
            format!(
                ": 4 a40, 4 in use: normal job {filler2} (root, 4 a40, ends by {})",
                ends[&filler2]
            ),
            format!(
                "enough a40s free up first on gpu01 by {}, when job {filler1} ends by its time \
                 limit, if nothing else starts there first (",
                ends[&filler1]
            ),
        )
    };
    ensure(
        report
            .summary
            .ends_with("waits for free GPUs: no node it may run on has enough free now")
            && one.contains(&want_one)
            && two.contains(&want_two)
            && when.starts_with(&want_when)
            && node("gpu03").is_empty(),
        format!("want {want_one:?}, {want_two:?} and {want_when:?}; got {report:#?}"),
    )?;
    clean(c)
}

/// A job waits for `Resources` on the one a40 node whose GPUs are free:
/// its CPUs are all taken by a job without GPUs, the other a40 node's GPUs
/// are all held. `why`, as the user, names the node with its GPUs free and
/// says it waits for the rest.
pub(crate) fn why_free_gpus(c: &mut Cluster) -> TestResult {
    let bob = TestUser::create(c, "gpushare_bob")?;
    bob.allow_qos(c, &["normal", "qos_lafferty"])?;
    let node = c.run_ok("scontrol", &["-o", "show", "node", "gpu01"])?;
    let cpus = node
        .split_whitespace()
        .find_map(|f| f.strip_prefix("CPUTot="))
        .ok_or_else(|| format!("no CPUTot: {node}"))?
        .to_owned();
    let cpu_job = c.sbatch_ok(&["-w", "gpu01", "-c", &cpus, "--wrap=sleep 300"])?;
    let gpu_job = c.sbatch_ok(&["-w", "gpu02", "--gres=gpu:a40:4", "--wrap=sleep 300"])?;
    for id in [cpu_job, gpu_job] {
        c.wait_job_state(id, &["RUNNING"], JOB_START)?;
    }
    let waiting = bob.sbatch(
        c,
        &[
            "--output=/dev/null",
            "--wrap=sleep 300",
            "--qos=qos_lafferty",
            "--gres=gpu:a40:1",
        ],
    )?;
    c.wait_job_reason(waiting, "Resources", JOB_START)?;
    let report = bob.why(c, waiting, "Resources")?;
    ensure(
        report
            .summary
            .ends_with("waits for resources other than GPUs: gpu01 has the 1 a40 it needs free")
            && report.details.iter().any(|d| {
                d.starts_with(
                    "the a40s it needs are free now on gpu01: it waits there for the rest",
                )
            }),
        format!("{report:#?}"),
    )?;
    clean(c)
}
