use super::*;
use crate::mps::ledger::ShareRecord;

/// A `/proc/PID/cgroup` text recorded on the test cluster (see
/// `tests/fixtures/cgroup/README.md`).
fn recorded(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/cgroup/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn share(job: u32, uid: u32, gpu: u32, units: u32, sluid: Option<&str>) -> ShareRecord {
    ShareRecord {
        job,
        uid,
        user: format!("user{uid}"),
        gpu,
        units,
        since: 0,
        placed_by_slurm: false,
        memory_mib: None,
        clients: None,
        sluid: sluid.map(str::to_owned),
    }
}

fn state(shares: &[ShareRecord]) -> LedgerState {
    let mut state = LedgerState::new();
    for s in shares {
        state.insert_share(s.clone());
    }
    state
}

fn facts(uid: u32, cgroup: &str) -> ProcessFacts {
    ProcessFacts {
        uid,
        cgroup: cgroup.to_owned(),
    }
}

const MIB: u64 = 1 << 20;

#[test]
fn a_block_reads_back_and_a_cut_or_broken_one_is_left_out() {
    let answered = GpuAnswer::Answered(GpuSample {
        index: 0,
        minor: Some(3),
        used_bytes: Some(223 * MIB),
        total_bytes: Some(143_000 * MIB),
        processes: vec![
            ProcessSample {
                pid: 552,
                memory_bytes: Some(148 * MIB),
                list: ProcessList::Compute,
            },
            ProcessSample {
                pid: 552,
                memory_bytes: None,
                list: ProcessList::Mps,
            },
        ],
        utilization: Some(vec![UtilSample {
            pid: 552,
            sm_percent: 87,
            timestamp_us: 1_700_000_000_000_000,
        }]),
    });
    let failed = GpuAnswer::Failed {
        index: 1,
        minor: None,
        reason: "GPU is lost\n(fallen off the bus)".into(),
    };
    let no_util = GpuAnswer::Answered(GpuSample {
        index: 2,
        minor: Some(2),
        utilization: None,
        ..GpuSample::default()
    });
    let text: String = [&answered, &failed, &no_util]
        .iter()
        .map(|a| gpu_block(a))
        .collect();
    assert!(text.contains("gpu 1 - err GPU is lost (fallen off the bus)\nend 1\n"));
    let back = parse(&text);
    assert_eq!(back.problems, Vec::<String>::new());
    assert_eq!(
        back.gpus,
        vec![
            answered.clone(),
            GpuAnswer::Failed {
                index: 1,
                minor: None,
                reason: "GPU is lost (fallen off the bus)".into(),
            },
            no_util
        ]
    );
    assert_eq!(
        back.last_samples(),
        BTreeMap::from([(0, 1_700_000_000_000_000)])
    );
    // GPU 3's NVML hung: its block never ended. GPU 4's has a bad line.
    let cut = format!(
        "{}gpu 3 3 ok -\nproc 3 9 - compute\ngpu 4 4 ok 1\nproc 4 x 1 compute\nend 4\n",
        gpu_block(&answered)
    );
    let back = parse(&cut);
    assert_eq!(back.gpus, vec![answered]);
    assert_eq!(back.problems.len(), 1, "{:?}", back.problems);
    assert!(back.problems[0].starts_with("GPU 4: a bad pid"));
    for bad in [
        "proc 0 1 1 compute\n",
        "gpu 0 0 maybe 1\nend 0\n",
        "gpu 0 0 ok 1\nproc 0 1 1 graphics\nend 0\n",
        "gpu 0 0 ok 1\nutil 0 1 x 5\nend 0\n",
        "end 7\n",
        "hello\n",
    ] {
        let r = parse(bad);
        assert!(
            r.gpus.is_empty() && !r.problems.is_empty(),
            "{bad:?}: {r:?}"
        );
    }
}

/// Where Slurm makes job cgroups, from what root's slurmstepd processes
/// of these recorded releases show.
fn anchors_of(releases: &[&str]) -> Anchors {
    let texts: Vec<String> = releases
        .iter()
        .map(|r| recorded(&format!("{r}-slurmstepd")))
        .collect();
    cgroup::stepd_anchors(texts.iter().map(String::as_str))
}

/// The texts of each release and cgroup version, as recorded: each names
/// its job where Slurm put it, and nothing else does.
#[test]
fn each_releases_job_cgroups_name_their_job() {
    // Slurm 22.05 (Debian's, built for several slurmd a host), cgroup v1.
    let v1 = anchors_of(&["22.05-v1"]);
    assert_eq!(v1.v1_prepends, vec!["/slurm_node1".to_owned()]);
    assert!(v1.v2_scopes.is_empty());
    assert_eq!(
        cgroup::placement(&recorded("22.05-v1-task"), &v1),
        InCgroup::Job {
            uid: Some(1001),
            dir: JobDir::Id(42962001),
        }
    );
    // 23.11, cgroup v2 (a slurmd of several a host: `node1_` scope).
    let v2_23 = anchors_of(&["23.11-v2"]);
    assert_eq!(
        v2_23.v2_scopes,
        vec!["/system.slice/node1_slurmstepd.scope".to_owned()]
    );
    assert!(v2_23.v1_prepends.is_empty());
    assert_eq!(
        cgroup::placement(&recorded("23.11-v2-task"), &v2_23),
        InCgroup::Job {
            uid: None,
            dir: JobDir::Id(46606001),
        }
    );
    // 26.05: the job's directory is its SLUID.
    let v2_26 = anchors_of(&["26.05-v2", "22.05-v1"]);
    assert_eq!(
        cgroup::placement(&recorded("26.05-v2-task"), &v2_26),
        InCgroup::Job {
            uid: None,
            dir: JobDir::Named("sBBXM8CEK87900".into()),
        }
    );
    // Without root's slurmstepd to say where Slurm's cgroups are, nothing
    // counts.
    for task in ["22.05-v1-task", "23.11-v2-task", "26.05-v2-task"] {
        assert_eq!(
            cgroup::placement(&recorded(task), &Anchors::default()),
            InCgroup::Outside
        );
    }
}

/// A user's process in their own delegated subtree, or in a `job_B`
/// directory made below its own job's, is never counted as job B's.
#[test]
fn a_forged_job_cgroup_names_no_other_job() {
    let anchors = anchors_of(&["22.05-v1", "23.11-v2"]);
    // Under systemd's delegation to the user: Slurm's layout, elsewhere.
    let forged = recorded("forged-v2-user-subtree");
    assert!(forged.contains("/node1_slurmstepd.scope/job_4243/step_0/user/task_0"));
    assert_eq!(cgroup::placement(&forged, &anchors), InCgroup::Outside);
    // The old rule, a `job_<id>` anywhere, takes it.
    assert!(crate::mps::daemon::cgroup_is_jobs(&forged, 4243, None));
    // v1: job_4243 made inside job 42962001's user-owned step.
    let nested =
        "6:freezer:/slurm_node1/uid_1001/job_42962001/step_batch/uid_1001/job_4243/step_0\n";
    assert_eq!(
        cgroup::placement(nested, &anchors),
        InCgroup::Job {
            uid: Some(1001),
            dir: JobDir::Id(42962001),
        }
    );
    // A named hierarchy a user may be delegated counts for nothing.
    let named = "1:name=systemd:/slurm_node1/uid_1001/job_4243/step_0\n";
    assert_eq!(cgroup::placement(named, &anchors), InCgroup::Outside);
    // Moved into another of one's own jobs in one controller only.
    let split = "6:freezer:/slurm_node1/uid_1001/job_4243/step_0\n\
                 5:devices:/slurm_node1/uid_1001/job_42962001/step_0/task_0\n";
    assert_eq!(cgroup::placement(split, &anchors), InCgroup::Conflicting);
    // A scope-like prefix that is not the scope.
    let longer = "0::/system.slice/node1_slurmstepd.scope.x/job_4243/step_0/user\n";
    assert_eq!(cgroup::placement(longer, &anchors), InCgroup::Outside);
}

#[test]
fn slurms_cgroups_are_where_root_slurmstepd_is() {
    let anchors = cgroup::stepd_anchors([
        "0::/a/system.slice/gpu01_slurmstepd.scope/system\n",
        "1:cpu:/\n6:freezer:/slurm/uid_0/job_5\n",
        // CgroupPrepend=/: the hierarchy's root.
        "5:devices:/uid_0/job_5/step_0\n",
    ]);
    assert_eq!(
        anchors.v1_prepends,
        vec!["/slurm".to_owned(), String::new()]
    );
    assert_eq!(
        anchors.v2_scopes,
        vec!["/a/system.slice/gpu01_slurmstepd.scope".to_owned()]
    );
    assert_eq!(
        cgroup::placement("4:memory:/uid_7/job_8/step_0\n", &anchors),
        InCgroup::Job {
            uid: Some(7),
            dir: JobDir::Id(8),
        }
    );
}

/// Two shares on GPU 0 (one of them 26.05's, by SLUID), a third on GPU 1,
/// the MPS server, a stranger and a pid gone: each share gets its own
/// processes' figures over its part, nothing else is counted.
#[test]
fn each_share_gets_its_own_processes_figures() {
    let sluid = "s0KQX3Z1V8G7A4";
    let shares = state(&[
        share(7, 1000, 0, 25, None),
        share(8, 1001, 0, 50, Some(sluid)),
        share(9, 1000, 1, 50, None),
    ]);
    let scope = "/system.slice/slurmstepd.scope";
    let anchors = Anchors {
        v1_prepends: vec!["/slurm".into()],
        v2_scopes: vec![scope.into()],
        ..Anchors::default()
    };
    let task = |dir: &str| format!("0::{scope}/{dir}/step_0/user/task_0\n");
    let facts = BTreeMap::from([
        (101, facts(1000, &task("job_7"))),
        (102, facts(1000, &task("job_7"))),
        (201, facts(1001, &task(sluid))),
        (301, facts(1000, &task("job_9"))),
        // The MPS server: root's, outside any job.
        (900, facts(0, "0::/system.slice/gpushare.service\n")),
        // Job 8's cgroup, but another user's process.
        (666, facts(1000, &task(sluid))),
    ]);
    let proc = |pid, mib: Option<u64>, list| ProcessSample {
        pid,
        memory_bytes: mib.map(|m| m * MIB),
        list,
    };
    let util = |pid, sm| UtilSample {
        pid,
        sm_percent: sm,
        timestamp_us: 1,
    };
    let gpu0 = GpuSample {
        index: 0,
        minor: Some(0),
        used_bytes: Some(2000 * MIB),
        total_bytes: None,
        processes: vec![
            proc(101, Some(100), ProcessList::Compute),
            proc(101, Some(100), ProcessList::Mps),
            proc(102, Some(50), ProcessList::Mps),
            proc(201, Some(1000), ProcessList::Compute),
            proc(900, Some(66), ProcessList::Compute),
            proc(666, Some(10), ProcessList::Compute),
            proc(777, Some(10), ProcessList::Compute),
        ],
        // As NVML samples under MPS: every client's work under the
        // server's pid (an H200, driver 580), none under a client's.
        utilization: Some(vec![util(900, 100), util(900, 60)]),
    };
    // GPU 1: no utilisation from NVML, memory unknown for one process.
    let gpu1 = GpuSample {
        index: 1,
        minor: Some(1),
        processes: vec![proc(301, None, ProcessList::Compute)],
        utilization: None,
        ..GpuSample::default()
    };
    let got = attribute(&[(0, &gpu0), (1, &gpu1)], &shares, 100, &facts, &anchors);
    assert_eq!(got.shares.len(), 3, "{got:?}");
    let (s7, s8, s9) = (&got.shares[0], &got.shares[1], &got.shares[2]);
    assert_eq!((s7.job, s7.gpu, s7.memory_bytes), (7, 0, Some(150 * MIB)));
    // No share has an SM figure: no sample is a client's.
    assert_eq!(s7.sm_utilization, None, "{s7:?}");
    assert_eq!((s8.job, s8.memory_bytes), (8, Some(1000 * MIB)));
    assert_eq!(s8.sm_utilization, None, "{s8:?}");
    assert_eq!((s9.job, s9.gpu, s9.memory_bytes), (9, 1, None));
    assert_eq!(s9.sm_utilization, None);
    assert_eq!(got.unattributed.get(&0), Some(&vec![666, 777, 900]));
    // Figures on the wrong GPU are not the share's.
    let on_gpu_1 = GpuSample {
        index: 1,
        minor: Some(1),
        ..gpu0.clone()
    };
    let got = attribute(&[(1, &on_gpu_1)], &shares, 100, &facts, &anchors);
    assert_eq!(got.shares.len(), 1);
    assert_eq!(got.shares[0].memory_bytes, Some(0));
    // An idle share on a GPU that answered uses nothing.
    let quiet = GpuSample {
        processes: Vec::new(),
        utilization: Some(Vec::new()),
        ..gpu0
    };
    let got = attribute(&[(0, &quiet)], &shares, 100, &facts, &anchors);
    assert!(got
        .shares
        .iter()
        .all(|s| s.memory_bytes == Some(0) && s.sm_utilization.is_none()));
}

#[test]
fn kept_figures_show_only_while_fresh_and_their_share_runs() {
    let shares = state(&[share(7, 1000, 0, 25, None), share(8, 1000, 1, 25, None)]);
    let used = |job, gpu| ShareUse {
        job,
        gpu,
        memory_bytes: Some(1),
        sm_utilization: Some(0.5),
        whole: false,
    };
    let kept = KeptUsage {
        at: 1000,
        shares: vec![used(7, 0), used(8, 0), used(9, 1)],
    };
    let text = serde_json::to_string(&kept).unwrap_or_default();
    let back: KeptUsage = serde_json::from_str(&text).unwrap_or_default();
    assert_eq!(back, kept);
    // Job 8 is on GPU 1 now; job 9 ended.
    assert_eq!(
        kept.current(&shares, 1000 + KEPT_FOR_SECS),
        vec![used(7, 0)]
    );
    assert!(kept.current(&shares, 1001 + KEPT_FOR_SECS).is_empty());
    assert!(kept.current(&shares, 900).is_empty());
}

/// A job holding GPU 1 whole: its processes there are its figures, its
/// SM use over the whole GPU, marked whole; on another GPU they are
/// nobody's.
#[test]
fn a_job_holding_its_gpu_whole_gets_its_processes_figures() {
    let mut state = state(&[share(7, 1000, 0, 25, None)]);
    state.insert_whole(crate::mps::ledger::WholeRecord {
        job: 12,
        gpus: vec![1],
        since: 0,
    });
    let scope = "/system.slice/slurmstepd.scope";
    let anchors = Anchors {
        v1_prepends: vec!["/slurm".into()],
        v2_scopes: vec![scope.into()],
        ..Anchors::default()
    };
    let facts = BTreeMap::from([(
        400,
        facts(1002, &format!("0::{scope}/job_12/step_batch/user/task_0\n")),
    )]);
    let sample = |index| GpuSample {
        index,
        minor: Some(index),
        processes: vec![ProcessSample {
            pid: 400,
            memory_bytes: Some(3000 * MIB),
            list: ProcessList::Compute,
        }],
        utilization: Some(vec![UtilSample {
            pid: 400,
            sm_percent: 60,
            timestamp_us: 1,
        }]),
        ..GpuSample::default()
    };
    let (gpu0, gpu1) = (sample(0), sample(1));
    let got = attribute(&[(0, &gpu0), (1, &gpu1)], &state, 100, &facts, &anchors);
    let whole: Vec<&ShareUse> = got.shares.iter().filter(|s| s.whole).collect();
    assert_eq!(whole.len(), 1, "{got:?}");
    assert_eq!((whole[0].job, whole[0].gpu), (12, 1));
    assert_eq!(whole[0].memory_bytes, Some(3000 * MIB));
    assert!(whole[0]
        .sm_utilization
        .is_some_and(|v| (v - 0.6).abs() < 1e-9));
    assert_eq!(got.unattributed.get(&0), Some(&vec![400]));
}

/// 26.05's SLUID directories: the job each is comes from the title of the
/// root-owned slurmstepd in it (recorded), never from a directory two
/// titles disagree on; a job held whole (no SLUID in its record) is
/// found so.
#[test]
fn a_sluid_directory_is_the_job_its_slurmstepd_serves() {
    let stepd = recorded("26.05-v2-slurmstepd");
    let anchors = cgroup::stepd_anchors([stepd.as_str()]);
    let scope = anchors.v2_scopes.first().cloned().unwrap_or_default();
    let other = format!("0::{scope}/sOTHERDIR00000/step_extern/slurm\n");
    let dirs = cgroup::stepd_job_dirs(
        [
            (stepd.as_str(), "slurmstepd: [29862002.batch]"),
            (stepd.as_str(), "slurmstepd: [29862002.extern]"),
            (other.as_str(), "slurmstepd: [7.extern]"),
            (other.as_str(), "slurmstepd: [8.0 stepmgr]"),
        ],
        &anchors,
    );
    assert_eq!(
        dirs,
        BTreeMap::from([("sBBXM8CEK87900".to_owned(), 29862002)])
    );
    let mut anchors = anchors;
    anchors.named_jobs = dirs;
    let mut state = LedgerState::new();
    state.insert_whole(crate::mps::ledger::WholeRecord {
        job: 29862002,
        gpus: vec![0],
        since: 0,
    });
    let task = format!("0::{scope}/sBBXM8CEK87900/step_batch/user/task_0\n");
    let facts = BTreeMap::from([(5, facts(1000, &task))]);
    let gpu = GpuSample {
        processes: vec![ProcessSample {
            pid: 5,
            memory_bytes: Some(MIB),
            list: ProcessList::Compute,
        }],
        ..GpuSample::default()
    };
    let got = attribute(&[(0, &gpu)], &state, 100, &facts, &anchors);
    assert_eq!(got.shares.len(), 1);
    assert_eq!(got.shares[0].memory_bytes, Some(MIB));
}
