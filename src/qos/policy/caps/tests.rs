use super::super::fixtures::{cfg_from, changes, job, rejection};
use super::super::submit::judge_submit;
use super::super::verdict::{RejectionKind, Verdict};
use super::*;
use crate::qos::config::megabytes;

const CONF: &str = "\
QOS=qos_lafferty GPUTypes=a40,h100 GPULimit=8 DefaultGPUType=a40
MaxGPUsPerJob=a40:4,h100:2
MaxCPUsPerGPU=a40:16,h100:24
MaxTasksPerGPU=a40:8
MaxMemPerGPU=a40:96G,h100:200G
";

fn verdict(j: &JobDescription<'_>) -> Verdict {
    judge_submit(&cfg_from(CONF), j)
}

fn refused(j: &JobDescription<'_>) -> String {
    let r = rejection(verdict(j));
    assert_eq!(r.kind, RejectionKind::OverTypeCap, "{}", r.message);
    r.message
}

fn accepted(j: &JobDescription<'_>) {
    changes(verdict(j));
}

fn a40(n: &str) -> String {
    format!("gres:gpu:a40:{n}")
}

#[test]
fn gpus_per_job_count_every_node_slurm_may_give() {
    let four = a40("4");
    accepted(&job(None, Some(&four)));
    let j = JobDescription {
        min_nodes: Some(2),
        max_nodes: Some(2),
        ..job(None, Some(&four))
    };
    assert_eq!(
        refused(&j),
        "This job can hold 8 a40, more than the 4 a40 one job may hold (MaxGPUsPerJob=a40:4): \
         ask for at most 4, e.g. --gpus=a40:4."
    );
    // Without --nodes, Slurm may put each of 4 tasks on a node of its own.
    let two = a40("2");
    let spread = JobDescription {
        num_tasks: Some(4),
        ..job(None, Some(&two))
    };
    assert_eq!(
        refused(&spread),
        "This job can hold 8 a40, more than the 4 a40 one job may hold (MaxGPUsPerJob=a40:4) \
         (Slurm may give it up to 4 nodes; on 1 it holds 2): fix its node count, --nodes=1."
    );
    accepted(&JobDescription {
        min_nodes: Some(1),
        max_nodes: Some(1),
        ..spread
    });
    accepted(&JobDescription {
        num_tasks: Some(4),
        ntasks_per_node: Some(2),
        ..job(None, Some(&two))
    });
    // Per job, per task, and a type given by DefaultGPUType.
    accepted(&JobDescription {
        tres_per_job: Some("gres/gpu:a40:4"),
        ..job(None, None)
    });
    refused(&JobDescription {
        num_tasks: Some(3),
        tres_per_task: Some("gres/gpu:h100:1"),
        ..job(None, None)
    });
    refused(&job(Some("qos_lafferty"), Some("gres:gpu:6")));
    // Untyped GPUs have no type to cap.
    accepted(&job(None, Some("gres:gpu:8")));
}

#[test]
fn cpus_tasks_and_memory_are_counted_per_gpu() {
    let one = a40("1");
    let two = a40("2");
    let cpus = JobDescription {
        num_tasks: Some(4),
        cpus_per_task: Some(8),
        min_nodes: Some(1),
        max_nodes: Some(1),
        ..job(None, Some(&one))
    };
    assert_eq!(
        refused(&cpus),
        "This job holds 32 CPUs with 1 GPU(s): 32 per GPU, more than MaxCPUsPerGPU=a40:16 \
         allows. Ask for at most 16 per a40, e.g. --cpus-per-gpu=16, or for more GPUs."
    );
    accepted(&JobDescription {
        tres_per_node: Some(&two),
        ..cpus
    });
    refused(&JobDescription {
        cpus_per_tres: Some("gres/gpu:17"),
        ..job(None, Some(&one))
    });
    accepted(&JobDescription {
        cpus_per_tres: Some("gres:gpu:16"),
        ..job(None, Some(&one))
    });
    refused(&JobDescription {
        pn_min_cpus: Some(20),
        ..job(None, Some(&one))
    });
    // Tasks: -n, --ntasks-per-node × nodes, --ntasks-per-gpu.
    refused(&JobDescription {
        num_tasks: Some(9),
        min_nodes: Some(1),
        max_nodes: Some(1),
        ..job(None, Some(&one))
    });
    refused(&JobDescription {
        ntasks_per_gpu: Some(9),
        ..job(None, Some(&one))
    });
    accepted(&JobDescription {
        ntasks_per_gpu: Some(8),
        ..job(None, Some(&one))
    });
    // Memory: per node, per CPU, per GPU; 0 and --exclusive are refused.
    let mem = |m: Memory| JobDescription {
        memory: Some(m),
        ..job(None, Some(&two))
    };
    accepted(&mem(Memory::PerNode(192 * 1024)));
    assert_eq!(
        refused(&mem(Memory::PerNode(256 * 1024))),
        "This job holds 256G of memory with 2 GPU(s): 128G per GPU, more than \
         MaxMemPerGPU=a40:96G allows. Ask for at most 96G per a40, e.g. --mem-per-gpu=96G, or \
         for more GPUs."
    );
    refused(&JobDescription {
        cpus_per_task: Some(8),
        ..mem(Memory::PerCpu(32 * 1024))
    });
    assert_eq!(
        refused(&mem(Memory::PerNode(0))),
        "--mem=0 holds all the memory of its nodes, which MaxMemPerGPU=a40:96G cannot judge \
         before the job runs. Ask for amounts instead, e.g. --mem-per-gpu=96G."
    );
    assert!(refused(&JobDescription {
        whole_node: true,
        ..job(None, Some(&two))
    })
    .starts_with("--exclusive holds every CPU"));
    refused(&JobDescription {
        mem_per_tres: Some("gres/gpu:100000"),
        ..job(None, Some(&one))
    });
    // What does not read in full is refused, not guessed.
    assert!(refused(&JobDescription {
        mem_per_tres: Some("gres/gpu:lots"),
        ..job(None, Some(&one))
    })
    .contains("could not be read in full"));
    // Memory not asked for is Slurm's default: not judged.
    accepted(&job(None, Some(&one)));
}

#[test]
fn a_ratio_is_judged_at_both_ends_of_the_node_range() {
    // 32 tasks with 1 a40 per node: on 1 node 32 per GPU; on 32, 1.
    let one = a40("1");
    refused(&JobDescription {
        num_tasks: Some(32),
        ..job(None, Some(&one))
    });
    // Several types: the smallest cap binds.
    let both = "gres:gpu:a40:1,gres:gpu:h100:1";
    accepted(&JobDescription {
        cpus_per_tres: Some("gres/gpu:16"),
        ..job(None, Some(both))
    });
    refused(&JobDescription {
        cpus_per_tres: Some("gres/gpu:20"),
        ..job(None, Some(both))
    });
}

#[test]
fn warn_only_keeps_the_job_and_says_why() {
    let conf = format!("{CONF}Enforce=warn\n");
    let j = JobDescription {
        min_nodes: Some(2),
        max_nodes: Some(2),
        ..job(None, Some("gres:gpu:a40:4"))
    };
    let c = changes(judge_submit(&cfg_from(&conf), &j));
    assert_eq!(c.warnings.len(), 1, "{c:?}");
    assert!(c.warnings[0].message.contains("MaxGPUsPerJob=a40:4"));
}

#[test]
fn the_caps_read_as_the_file_writes_them() {
    let cfg = cfg_from(CONF);
    let caps = cfg.type_caps();
    assert_eq!(caps.of(Cap::MemPerGpu, "a40"), Some(96 * 1024));
    assert_eq!(
        caps.item(Cap::MemPerGpu, "h100").as_deref(),
        Some("h100:200G")
    );
    assert_eq!(caps.of(Cap::TasksPerGpu, "h100"), None);
    let pattern = cfg_from("MaxCPUsPerGPU=a100_*:4,a100:32\n");
    assert_eq!(
        pattern.type_caps().of(Cap::CpusPerGpu, "a100_3g.40gb"),
        Some(4)
    );
    assert_eq!(pattern.type_caps().of(Cap::CpusPerGpu, "a100"), Some(32));
    for bad in [
        "MaxGPUsPerJob=4\n",
        "MaxGPUsPerJob=a40:0\n",
        "MaxGPUsPerJob=a40:4,a40:2\n",
        "MaxMemPerGPU=a40:96X\n",
        "MaxCPUsPerGPU=a40:\n",
        "MaxTasksPerGPU=:8\n",
    ] {
        let e = crate::qos::config::parse(bad, "gpu_qos.conf").unwrap_err();
        assert!(e.to_string().contains("gpu_qos.conf:1"), "{bad}: {e}");
    }
    assert_eq!(megabytes("1T"), Some(1024 * 1024));
    assert_eq!(megabytes("1500K"), Some(2));
    assert_eq!(megabytes("0"), None);
}

#[test]
fn per_gpu_strings_read_in_every_spelling() {
    assert_eq!(per_gpu_value("gres/gpu:8", false), Ok(Some(8)));
    assert_eq!(per_gpu_value("gres:gpu:8", false), Ok(Some(8)));
    assert_eq!(
        per_gpu_value("gres/gpu:a40:8,gres/gpu:h100:12", false),
        Ok(Some(12))
    );
    assert_eq!(per_gpu_value("gres/gpu=4G", true), Ok(Some(4096)));
    assert_eq!(per_gpu_value("gres/shard:4", false), Ok(None));
    assert_eq!(per_gpu_value("gpu", false), Err(()));
    assert_eq!(per_gpu_value("gres/gpu:x", false), Err(()));
}

/// A pending job's record as 22.05 prints it (`TRES=`), from 23.02
/// (`ReqTRES=`) with `tres`.
fn record(tres_key: &str, tres: &str, tail: &str) -> String {
    format!(
        "JobId=7 JobName=x UserId=ann(1001) Account=ann QOS=normal JobState=PENDING \
         NumNodes=1 NumCPUs=2 NumTasks=1 CPUs/Task=2 {tres_key}={tres} MinCPUsNode=2 \
         MinMemoryNode=0 OverSubscribe=OK TresPerNode=gres:gpu:a40:1{tail}\n"
    )
}

#[test]
fn an_updated_record_over_a_cap_is_named_and_one_within_is_not() {
    let cfg = cfg_from(CONF);
    let fits = "cpu=2,mem=16000M,node=1,billing=2,gres/gpu=1,gres/gpu:a40=1";
    for key in ["TRES", "ReqTRES"] {
        // Memory not asked for (MinMemoryNode=0) is Slurm's default.
        assert_eq!(over_type_caps(&cfg, 7, &record(key, fits, ""), false), None);
        let cpus = record(key, &fits.replace("cpu=2", "cpu=17"), "");
        let why = over_type_caps(&cfg, 7, &cpus, false).expect("over");
        assert_eq!(
            why,
            "it holds 17 CPUs with 1 GPU(s), more than MaxCPUsPerGPU=a40:16 allows; an update \
             of job 7 within the cap releases it"
        );
    }
    let asked = record(
        "TRES",
        "cpu=2,mem=100G,node=1,gres/gpu=1,gres/gpu:a40=1",
        "",
    )
    .replace("MinMemoryNode=0", "MinMemoryNode=100G");
    assert!(over_type_caps(&cfg, 7, &asked, false).is_some_and(|w| w.contains("MaxMemPerGPU")));
    // A per-node request on up to 5 nodes: 5 a40.
    let nodes = record("TRES", fits, "").replace("NumNodes=1", "NumNodes=2-5");
    assert!(over_type_caps(&cfg, 7, &nodes, false).is_some_and(|w| w.contains("5 a40")));
    let tasks = record("TRES", fits, "").replace("NumTasks=1", "NumTasks=9");
    assert!(over_type_caps(&cfg, 7, &tasks, false).is_some_and(|w| w.contains("9 tasks")));
    // What a pending job's TRES leaves out: --cpus-per-gpu, --mincpus,
    // --mem-per-gpu.
    for (tail, cap) in [
        (" CpusPerTres=gres:gpu:17", "MaxCPUsPerGPU"),
        (" MemPerTres=gres/gpu:100000", "MaxMemPerGPU"),
    ] {
        let r = record("TRES", fits, tail);
        assert!(
            over_type_caps(&cfg, 7, &r, false).is_some_and(|w| w.contains(cap)),
            "{tail}"
        );
    }
    let mincpus = record("TRES", fits, "").replace("MinCPUsNode=2", "MinCPUsNode=17");
    assert!(over_type_caps(&cfg, 7, &mincpus, false).is_some());
    let whole = record("TRES", fits, "").replace("OverSubscribe=OK", "OverSubscribe=NO");
    assert!(over_type_caps(&cfg, 7, &whole, false).is_some_and(|w| w.contains("a whole node")));
    // 26.05 says a whole node by Exclusive=, OverSubscribe=NO being every
    // job's default there.
    let default =
        record("ReqTRES", fits, "").replace("OverSubscribe=OK", "OverSubscribe=NO Exclusive=NO");
    assert_eq!(over_type_caps(&cfg, 7, &default, true), None);
    let node = default.replace("Exclusive=NO", "Exclusive=NODE");
    assert!(over_type_caps(&cfg, 7, &node, true).is_some_and(|w| w.contains("a whole node")));
}

#[test]
fn a_users_words_in_the_record_only_make_the_job_look_larger() {
    let cfg = cfg_from(CONF);
    let over = "cpu=20,mem=16000M,node=1,gres/gpu=1,gres/gpu:a40=1";
    // A job name that repeats Slurm's words with more GPUs or fewer CPUs
    // changes nothing: the fewest GPUs and the most CPUs count.
    let named = record("TRES", over, "").replace(
        "JobName=x",
        "JobName=x TRES=cpu=1,gres/gpu=8,gres/gpu:a40=1 NumCPUs=1",
    );
    assert!(over_type_caps(&cfg, 7, &named, false).is_some());
    // Words that make it larger hold only the user's own job.
    let fits = "cpu=2,mem=16000M,node=1,gres/gpu=1,gres/gpu:a40=1";
    let louder = record("TRES", fits, " Comment=x NumCPUs=99");
    assert!(over_type_caps(&cfg, 7, &louder, false).is_some());
    // Under Enforce=warn nothing is held.
    let warn = cfg_from(&format!("{CONF}Enforce=warn\n"));
    assert_eq!(
        over_type_caps(&warn, 7, &record("TRES", over, ""), false),
        None
    );
}

#[test]
fn updates_that_change_what_a_cap_judges_are_read_back() {
    let cfg = cfg_from(CONF);
    let cpus = JobDescription {
        min_cpus: Some(64),
        job_id_for_messages: Some(7),
        ..JobDescription::default()
    };
    assert!(update_changes_shape(&cfg, &cpus));
    let c = changes(super::super::update::judge_modify(&cfg, &cpus));
    assert_eq!(c.recheck_gpu_types.map(|r| r.job_id), Some(7));
    let time_only = JobDescription {
        job_id_for_messages: Some(7),
        ..JobDescription::default()
    };
    assert!(!update_changes_shape(&cfg, &time_only));
    // Without caps, a CPU update is not read back.
    let none = cfg_from("QOS=q GPUTypes=a40\n");
    assert!(!update_changes_shape(&none, &cpus));
}
