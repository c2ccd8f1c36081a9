//! What users are told agrees with what the policy does: the users'
//! guide, the users' page (`gpu-qos audit --explain --markdown`) and
//! `gpu-qos why` on append mode for a requeued job; the guide's refusals
//! as the policy words them. (That every command line a refusal advises
//! is one the policy accepts: `advice_accepted`.)

use super::advice_accepted::judge_line;
use super::audit::{GpuQosConf, Site};
use super::config::{self as qos_conf, GpuQosConfig};
use super::explain::user_page;
use super::policy::{judge_submit, requeued_output_words, JobDescription, Resolved, Verdict};
use super::site::{parse_qos, GresItem, NodeInfo, SlurmSettings};
use crate::shared::node_refusals::{markdown_table, AFTER_TABLE};

const CONF: &str = "QOS=qos_lafferty GPUTypes=a40 GPULimit=4\nLowPriorityQOS=lowprio\n\
                    Partition=gpu GPUTypes=a40 GPULimit=8\n\
                    Account=lafferty GPUTypes=a40 GPULimit=6\n\
                    SharedGPUReservations=jhl_homework_gpu*,jupyterhub_course_*\n";

fn conf() -> GpuQosConfig {
    qos_conf::parse(CONF, "gpu_qos.conf").unwrap()
}

/// Whether the policy submits `job` in append mode.
fn appends(job: &JobDescription<'_>) -> bool {
    match judge_submit(&conf(), job) {
        Verdict::Accept(changes) => changes.set_open_mode_append,
        Verdict::Reject(r) => panic!("refused: {}", r.message),
    }
}

/// The text with every run of white space one space, Markdown's quotes
/// dropped: how a reader takes it, wherever its lines break.
fn read_as(text: &str) -> String {
    text.replace('`', "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn guide_page_and_why_say_what_the_policy_does_with_a_requeued_jobs_output() {
    let named = JobDescription {
        qos: Some("lowprio"),
        ..JobDescription::default()
    };
    let chose = JobDescription {
        open_mode_set: true,
        ..named
    };
    let defaults = ["lowprio".to_owned()];
    let by_default = JobDescription {
        resolved: Resolved {
            default_qos: &defaults,
            ..Resolved::default()
        },
        ..JobDescription::default()
    };
    let other = JobDescription {
        qos: Some("normal"),
        ..JobDescription::default()
    };
    // What the policy does.
    assert!(appends(&named));
    assert!(!appends(&chose));
    assert!(!appends(&by_default));
    assert!(!appends(&other));

    let keeps = "appends to its output file, so the earlier runs' output stays in it: \
                 gpu_qos turns on --open-mode=append for it unless it was submitted with \
                 --open-mode=truncate";
    let anew = "starts its output file anew, losing the earlier runs' output, unless it \
                was submitted with --open-mode=append";
    let low = conf().low_priority_qos().to_vec();

    // `gpu-qos why` on a requeued job of each QOS.
    let why_low = requeued_output_words(Some(&low), Some("lowprio"), false);
    assert!(
        why_low.contains(&format!(
            "if it was submitted with --qos=lowprio, each run {keeps}"
        )) && why_low.contains(&format!("(its default QOS), each run {anew}")),
        "{why_low}"
    );
    assert_eq!(
        requeued_output_words(Some(&low), Some("normal"), false),
        format!("each run {anew}")
    );

    // The users' page.
    let page = user_page(&page_site());
    let line = format!(
        "- A requeued job submitted with --qos=lowprio {keeps}; any other requeued job {anew}."
    );
    assert!(
        page.lines().any(|l| l == line),
        "{line}\nnot a line of\n{page}"
    );

    // The users' guide.
    let guide = read_as(include_str!("../../docs/users-guide.md"));
    for words in [
        "A job submitted with --qos= naming a low-priority QOS (gpu_qos.conf's \
         LowPriorityQOS) appends to its output file when requeued, so the earlier runs' \
         output stays in it: gpu_qos turns on --open-mode=append for it unless it was \
         submitted with --open-mode=truncate.",
        "Any other requeued job (one that runs under a low-priority QOS as its default QOS \
         without naming it,",
        "its output appended to when it was submitted with --qos= naming a low-priority QOS",
    ] {
        assert!(
            guide.contains(&read_as(words)),
            "the users' guide lacks: {words}"
        );
    }
    for wrong in [
        "Slurm truncates a requeued",
        "its output started anew unless",
    ] {
        assert!(
            !guide.contains(wrong),
            "the users' guide still says: {wrong}"
        );
    }
}

fn page_site() -> Site {
    let (qos, _) = parse_qos(
        "normal|||cluster|00:00:00|1.000000||0\n\
         lowprio|||cluster|00:02:00|0.000000||0\n\
         qos_lafferty|gres/gpu:a40=4|lowprio|cluster|00:00:00|1.000000|DenyOnLimit|100\n",
    );
    Site {
        gpu_qos_conf: GpuQosConf::Read(Box::new(conf())),
        ..Site::of_slurm(
            SlurmSettings::from_show_config("PreemptMode = REQUEUE\n"),
            qos,
            Vec::new(),
            Vec::new(),
        )
    }
}

#[test]
fn the_guides_refusals_are_the_policys_words() {
    let guide = include_str!("../../docs/users-guide.md");
    let mut lines = guide.lines().peekable();
    let mut seen = 0;
    while let Some(line) = lines.next() {
        let Some(command) = line.strip_prefix("$ ") else {
            continue;
        };
        let Some(told) = lines.peek().and_then(|l| l.strip_prefix("sbatch: error: ")) else {
            continue;
        };
        match judge_line(&conf(), command, None) {
            // As the user reads it: its code at the end of the first line.
            Verdict::Reject(r) => assert_eq!(
                crate::qos::policy::codes::coded(&r.message, r.kind.code()),
                told,
                "`{command}`"
            ),
            Verdict::Accept(_) => panic!("`{command}` is accepted, the guide says: {told}"),
        }
        seen += 1;
    }
    assert!(seen >= 6, "{seen} refusals checked");
}

#[test]
fn the_page_of_a_site_with_mps_nodes_tells_the_guides_node_refusals() {
    let guide = include_str!("../../docs/users-guide.md");
    let table = markdown_table();
    assert!(
        guide.contains(&table),
        "the guide's node table differs from:\n{table}"
    );
    let mut site = page_site();
    assert!(!user_page(&site).contains("When a node refuses"));
    let item = |name: &str, count| GresItem {
        name: name.into(),
        gres_type: None,
        count,
    };
    site.nodes.push(NodeInfo {
        name: "gpu01".into(),
        gres: vec![item("gpu", 4), item("mps", 400)],
        ..NodeInfo::default()
    });
    let page = user_page(&site);
    assert!(
        page.contains(&table) && page.contains(AFTER_TABLE),
        "the page lacks the node table:\n{page}"
    );
}
