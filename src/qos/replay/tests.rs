//! The replay on sacct text: each job judged as the plugin would have,
//! and every count exact.

use crate::qos::check::{GpuTresLimit, QosRecord};
use crate::qos::config;

use super::*;

const CONF: &str = "\
QOS=qos_lab GPUTypes=a40 GPULimit=4
Partition=gpu_part GPUTypes=a100
LowPriorityQOS=lowprio
LowPriorityMaxArrayTasks=8
";

fn db() -> Database {
    Database {
        qos: vec![QosRecord {
            name: "qos_typed".to_owned(),
            gpu_limits: vec![GpuTresLimit {
                gpu_type: Some("a40".to_owned()),
                count: 2,
            }],
            preempt: Vec::new(),
        }],
        ..Database::default()
    }
}

fn run(conf: &str, sacct: &str) -> ReplayReport {
    let cfg = config::parse(conf, "gpu_qos.conf").unwrap();
    let (subs, skipped) = parse_sacct(sacct, true, "|");
    let mut r = replay(&cfg, &db(), &subs);
    r.skipped = skipped;
    r.sort();
    r
}

fn reason<'r>(r: &'r ReplayReport, action: Action, reason: &str) -> &'r ReasonCount {
    r.reasons
        .iter()
        .find(|x| x.action == action && x.reason == reason)
        .unwrap_or_else(|| panic!("no {action:?} {reason} in {:#?}", r.reasons))
}

const T: &str = "billing=1,cpu=1,node=1";

#[test]
fn each_job_counted_once_by_reason_rule_qos_and_user() {
    let sacct = format!(
        // untyped under a rule: refused
        "1|alice|phys|debug|qos_lab|1||{T},gres/gpu=2|sbatch --qos=qos_lab --gres=gpu:2 a.sh\n\
         2|alice|phys|debug|qos_lab|1||{T},gres/gpu=2|sbatch -q qos_lab --gres gpu:2 b.sh\n\
         3|bob|phys|debug|qos_lab|1||{T},gres/gpu:a40=2,gres/gpu=2|sbatch -q qos_lab --gres=gpu:a40:2 c.sh\n\
         4|bob|phys|debug|qos_lab|1||{T},gres/gpu:a100=1,gres/gpu=1|sbatch --qos=qos_lab --gpus=a100:1 d.sh\n\
         5|carol|phys|gpu_part|normal|1||{T},gres/gpu=1|sbatch -p gpu_part --gres=gpu:1 e.sh\n\
         6|carol|phys|debug|qos_typed|1||{T},gres/gpu=1|\n\
         7|dave|phys|debug|lowprio|1||{T},gres/gpu=1|sbatch --qos=lowprio --gres=gpu:1 --array=1-20 f.sh\n\
         8_1|dave|phys|debug|lowprio|1||{T},gres/gpu=1|sbatch -q lowprio --gres=gpu:1 -a 1-2%1 g.sh\n\
         8_2|dave|phys|debug|lowprio|1||{T},gres/gpu=1|sbatch -q lowprio --gres=gpu:1 -a 1-2%1 g.sh\n\
         9|erin|phys|debug|normal|1||{T}|sbatch --wrap=hostname\n\
         10+0|erin|phys|debug|qos_lab|1||{T},gres/gpu=1|sbatch -q qos_lab het.sh\n\
         10+1|erin|phys|debug|qos_lab|1||{T},gres/gpu:a40=1,gres/gpu=1|sbatch -q qos_lab het.sh\n\
         11|erin|phys|debug|qos_lab|1||{T},gres/gpu=1|sbatch odd \u{7f} --gres=gpu:1\n"
    );
    let r = run(CONF, &sacct);
    assert_eq!((r.records, r.jobs), (13, 12));
    assert_eq!(
        (
            r.sources.submit_line,
            r.sources.req_tres,
            r.sources.req_tres_beside_submit_line
        ),
        (8, 1, 3)
    );
    // Refused: 1, 2 (untyped), 4 (a100 under qos_lab), 5 (partition rule),
    // 6 (typed QOS without a rule), 10+0 and 11 (untyped from ReqTRES: the
    // line names no GPU).
    // Changed: 7 (requeue + throttle), 8 (requeue; throttle %1 kept).
    assert_eq!(
        (
            r.totals.refused,
            r.totals.changed,
            r.totals.warned,
            r.unchanged
        ),
        (7, 2, 0, 3)
    );
    assert_eq!(reason(&r, Action::Refused, "untyped_gpu").jobs, 5);
    assert_eq!(reason(&r, Action::Refused, "type_not_permitted").jobs, 1);
    assert_eq!(reason(&r, Action::Refused, "unlisted_typed_limit").jobs, 1);
    assert_eq!(reason(&r, Action::Changed, "low_priority_requeue").jobs, 2);
    assert_eq!(
        reason(&r, Action::Changed, "low_priority_array_throttle").jobs,
        1
    );
    let untyped = &reason(&r, Action::Refused, "untyped_gpu").example;
    assert_eq!(untyped.job_id, "1");
    assert_eq!(untyped.source, Source::SubmitLine);
    assert_eq!(untyped.type_instead.as_deref(), Some("--gres=gpu:a40:2"));
    assert_eq!(
        untyped.line_instead.as_deref(),
        Some("sbatch --gres=gpu:a40:2 --qos=qos_lab --partition=debug --account=phys")
    );
    let throttle = &reason(&r, Action::Changed, "low_priority_array_throttle").example;
    assert_eq!(
        throttle.line_instead.as_deref(),
        Some("sbatch --gres=gpu:1 --array=1-20%8 --qos=lowprio --partition=debug --account=phys")
    );
    let unlisted = &reason(&r, Action::Refused, "unlisted_typed_limit").example;
    assert_eq!(unlisted.source, Source::ReqTres);
    assert_eq!(unlisted.command, "sbatch --gres=gpu:1");
    assert_eq!(
        unlisted.line_instead.as_deref(),
        Some("sbatch --gres=gpu:a40:1 --qos=qos_typed --partition=debug --account=phys")
    );
    assert_eq!(r.by_qos["qos_lab"].refused, 5);
    assert_eq!(r.by_qos["lowprio"].changed, 2);
    assert_eq!(r.by_user["alice"].refused, 2);
    assert_eq!(r.by_rule["QOS qos_lab (line 1)"].refused, 5);
    assert_eq!(r.by_rule["Partition gpu_part (line 2)"].refused, 1);
    assert_eq!(r.by_rule["(no rule) QOS qos_typed"].refused, 1);
    assert_eq!(r.by_rule["LowPriorityQOS=lowprio"].changed, 2);
    let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    assert_eq!(json["totals"]["refused"], 7);
    assert!(r
        .to_text()
        .contains("12 jobs replayed (13 accounting records): 7 refused"));
}

#[test]
fn warn_rules_count_as_warned_and_default_qos_is_told_so() {
    let conf = "Enforce=warn\nQOS=qos_lab GPUTypes=a40\n";
    let sacct = format!(
        "1|alice|phys|debug|qos_lab|1||{T},gres/gpu=2|sbatch --gres=gpu:2 a.sh\n\
         2|alice|phys|debug|qos_lab|1||{T},gres/gpu:a40=2,gres/gpu=2|sbatch --gres=gpu:a40:2 a.sh\n"
    );
    let r = run(conf, &sacct);
    assert_eq!((r.totals.refused, r.totals.warned, r.unchanged), (0, 1, 1));
    let w = &reason(&r, Action::Warned, "untyped_gpu").example;
    assert!(w.message.starts_with(crate::qos::policy::NOT_YET_ENFORCED));
    // Named nowhere on the line: its QOS is its default.
    assert!(w.message.contains("default"), "{}", w.message);
}

#[test]
fn odd_sacct_text_is_counted_as_skipped_never_judged() {
    let r = run(CONF, "garbage\n1.batch|a|b|c|d|e|f|g|h\n|||||||\n\u{0}|\n");
    assert_eq!((r.jobs, r.skipped.len()), (0, 4));
}

#[test]
fn hostile_lines_are_shown_as_text_and_lines_instead_rebuilt() {
    let sacct = format!(
        "1|alice|phys|debug|qos_lab|1||{T},gres/gpu=2|sbatch --qos=qos_lab --gres=gpu:2 \
         --wrap=cd /scratch && ./run; $(id) `id` 'q'\x1b]52;c;cm0gLXJm\x07\n\
         Note: fake line\u{202e}\x1b[2A\u{9b}\x7f\n\
         2|bob|phys|debug|qos_lab|1||{T},gres/gpu:h100=1,gres/gpu=1|sbatch -q qos_lab \
         --gpus=h100\x1b[8m:1 c.sh\n"
    );
    let r = run(CONF, &sacct);
    let job1 = concat!(
        r"sbatch --qos=qos_lab --gres=gpu:2 --wrap=cd /scratch && ./run; $(id) `id` 'q'",
        r"\x1b]52;c;cm0gLXJm\x07\nNote: fake line\u{202e}\x1b[2A\u{9b}\x7f"
    );
    let job2 = r"sbatch -q qos_lab --gpus=h100\x1b[8m:1 c.sh";
    let rest = "             with the job's other options and its script, as its user gave them \
                (not repeated here)\n";
    let recorded = "(its SubmitLine as Slurm recorded it, not a command)";
    let text = r.to_text();
    let by_reason = &text[text.find("By reason:").unwrap()..text.find("By rule:").unwrap()];
    assert_eq!(
        by_reason,
        format!(
            "By reason:\n\
             \x20 refused  bad_request                           1\n\
             \x20          e.g. job 2 {recorded}: {job2}\n\
             \x20          type instead: sbatch --gpus=a40:2 --qos=qos_lab --partition=debug \
             --account=phys\n\
             {rest}\
             \x20          told: invalid GRES request \"gres:gpu:h100\\x1b[8m:1\": the type may \
             contain only letters, digits, '_', '-' and '.' (from --gpus). Write GPU requests \
             as type:count, e.g. --gpus=a40:2.\n\
             \x20 refused  untyped_gpu                           1\n\
             \x20          e.g. job 1 {recorded}: {job1}\n\
             \x20          type instead: sbatch --gres=gpu:a40:2 --qos=qos_lab \
             --partition=debug --account=phys\n\
             {rest}\
             \x20          told: QOS qos_lab requires a GPU type, but --gres=gpu:2 does not name \
             one; qos_lab may use a40. Submit with --gres=gpu:a40:2 instead.\n\
             \n"
        )
    );
    // No line of the user's own in the report, no control character.
    assert!(!text.contains("\nNote: fake"));
    let json = r.to_json();
    for out in [&text, &json] {
        let bad = |c: char| c != '\n' && crate::shared::user_text::is_control(c);
        assert!(!out.chars().any(bad), "{out:?}");
    }
    // In JSON the written-out text is escaped by serde once more.
    let in_json = |s: &str| format!("\"command\": \"{}\"", s.replace('\\', "\\\\"));
    assert!(json.contains(&in_json(job1)), "{json}");
    assert!(json.contains(&in_json(job2)), "{json}");
    let back: serde_json::Value = serde_json::from_str(&json).unwrap();
    let lines: Vec<&str> = back["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["example"]["line_instead"].as_str().unwrap())
        .collect();
    assert_eq!(
        lines,
        [
            "sbatch --gpus=a40:2 --qos=qos_lab --partition=debug --account=phys",
            "sbatch --gres=gpu:a40:2 --qos=qos_lab --partition=debug --account=phys"
        ]
    );
}

#[test]
fn a_line_instead_quotes_what_a_shell_would_read() {
    // An array expression and a reservation no shell should read as they
    // are; a suggestion with a control character is never offered.
    let sacct = format!(
        "7|dave|phys|debug|lowprio|1|r;x|{T},gres/gpu=1|srun --qos=lowprio --gres=gpu:1 \
         --array=1-20&&id x\n"
    );
    let r = run(CONF, &sacct);
    let throttle = &reason(&r, Action::Changed, "low_priority_array_throttle").example;
    let line = throttle.line_instead.as_deref().unwrap();
    assert_eq!(
        line,
        "srun --gres=gpu:1 '--array=1-20&&id%8' --qos=lowprio --partition=debug \
         --account=phys '--reservation=r;x'"
    );
    assert_eq!(
        crate::shared::user_text::shell_split(line).unwrap()[2],
        "--array=1-20&&id%8"
    );
    let sacct = format!(
        "8|dave|phys|debug|lowprio|1||{T},gres/gpu=1|sbatch --qos=lowprio --gres=gpu:1 \
         --array=1-20\x1b[2J x\n"
    );
    let r = run(CONF, &sacct);
    let throttle = &reason(&r, Action::Changed, "low_priority_array_throttle").example;
    assert!(
        throttle.message.contains(r"--array=1-20\x1b[2J%8"),
        "{}",
        throttle.message
    );
    assert_eq!(
        (&throttle.type_instead, &throttle.line_instead),
        (&None, &None)
    );
}

/// A rule's `DefaultGPUType=`: its untyped jobs are counted as given the
/// type, apart from refusals; one over the limit once typed is refused.
#[test]
fn jobs_given_a_default_type_are_counted_apart_from_refusals() {
    let conf = CONF.replace(
        "QOS=qos_lab GPUTypes=a40 GPULimit=4",
        "QOS=qos_lab GPUTypes=a40 GPULimit=4 DefaultGPUType=a40",
    );
    let sacct = format!(
        "1|alice|phys|debug|qos_lab|1||{T},gres/gpu=2|sbatch --qos=qos_lab --gres=gpu:2 a.sh\n\
         2|alice|phys|debug|qos_lab|1||{T},gres/gpu=8|sbatch --qos=qos_lab --gpus=8 b.sh\n\
         3|bob|phys|debug|qos_lab|1||{T},gres/gpu:a40=2,gres/gpu=2|sbatch -q qos_lab --gres=gpu:a40:2 c.sh\n"
    );
    let r = run(&conf, &sacct);
    assert_eq!((r.totals.typed, r.totals.refused), (1, 1));
    let typed = reason(&r, Action::Typed, "default_gpu_type");
    assert_eq!((typed.jobs, typed.code), (1, "GQ204"));
    assert!(typed.example.message.contains("--gres=gpu:a40:2"));
    assert_eq!(reason(&r, Action::Refused, "over_limit").jobs, 1);
    assert!(r.to_text().contains("1 given a GPU type (DefaultGPUType=)"));
}
