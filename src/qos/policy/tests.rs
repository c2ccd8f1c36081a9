//! Properties of both decisions, over generated jobs.

use super::fixtures::*;
use super::rules::collect_requests;
use super::wording::Syntax;
use super::*;
use crate::qos::config::GpuQosConfig;
use crate::qos::gres::TresField;
use proptest::prelude::*;

fn opt_str(pattern: &'static str) -> impl Strategy<Value = Option<String>> {
    prop::option::of(pattern)
}

const TRES: &str =
    "((gres[:/])?(gpu|mps|shard|cpu|GPU)(:[a-z0-9.]{1,4})?([:=][0-9kKgx]{0,3})?,?){0,3}";

#[derive(Debug, Clone)]
struct OwnedJob {
    strings: [Option<String>; 7],
    min_nodes: Option<u32>,
    max_nodes: Option<u32>,
    num_tasks: Option<u32>,
    ntasks_per_gpu: Option<u16>,
    sockets_per_node: Option<u16>,
    requeue: Option<bool>,
    open_mode_set: bool,
    exclusive_user: bool,
    job_id: Option<u32>,
}

impl OwnedJob {
    fn view(&self) -> JobDescription<'_> {
        let s = |i: usize| self.strings[i].as_deref();
        JobDescription {
            qos: s(0),
            tres_per_node: s(1),
            tres_per_job: s(2),
            tres_per_socket: s(3),
            tres_per_task: s(4),
            reservation: s(5),
            array_inx: s(6),
            min_nodes: self.min_nodes,
            max_nodes: self.max_nodes,
            num_tasks: self.num_tasks,
            ntasks_per_gpu: self.ntasks_per_gpu,
            sockets_per_node: self.sockets_per_node,
            requeue: self.requeue,
            open_mode_set: self.open_mode_set,
            exclusive_user: self.exclusive_user,
            job_id_for_messages: self.job_id,
            ..JobDescription::default()
        }
    }
}

fn any_job() -> impl Strategy<Value = OwnedJob> {
    let strings = (
        opt_str("(qos_lafferty|qos_saxena|lowprio|normal|QOS_LAFFERTY|,| ){0,3}"),
        opt_str(TRES),
        opt_str(TRES),
        opt_str(TRES),
        opt_str(TRES),
        opt_str("(jhl_homework_gpu[0-9]?|maint|,){0,2}"),
        opt_str("[0-9,%-]{0,8}"),
    );
    let numbers = (
        any::<Option<u32>>(),
        any::<Option<u32>>(),
        any::<Option<u16>>(),
        any::<Option<bool>>(),
        any::<bool>(),
        any::<Option<u32>>(),
        any::<bool>(),
    );
    let tasks = (any::<Option<u32>>(), prop::option::of(0u16..4));
    (strings, numbers, tasks).prop_map(|(s, n, t)| OwnedJob {
        strings: [s.0, s.1, s.2, s.3, s.4, s.5, s.6],
        min_nodes: n.0,
        max_nodes: t.0,
        num_tasks: n.1,
        ntasks_per_gpu: t.1,
        sockets_per_node: n.2,
        requeue: n.3,
        open_mode_set: n.4,
        exclusive_user: n.6,
        job_id: n.5,
    })
}

fn arbitrary_job() -> impl Strategy<Value = OwnedJob> {
    let strings = proptest::array::uniform7(opt_str(".{0,24}"));
    (
        strings,
        any::<(
            Option<u32>,
            Option<u32>,
            Option<u16>,
            Option<bool>,
            bool,
            bool,
        )>(),
    )
        .prop_map(|(strings, n)| OwnedJob {
            strings,
            min_nodes: n.0,
            max_nodes: n.1,
            num_tasks: n.1,
            ntasks_per_gpu: n.2,
            sockets_per_node: n.2,
            requeue: n.3,
            open_mode_set: n.4,
            exclusive_user: n.5,
            job_id: None,
        })
}

fn configs() -> impl Strategy<Value = GpuQosConfig> {
    prop::sample::select(vec![
        cfg(),
        GpuQosConfig::default(),
        cfg_from("QOS=qos_lafferty GPUTypes=a40 GPULimit=1\nRequireGPUType=all"),
    ])
}

proptest! {
    #[test]
    fn judging_never_panics(cfg in configs(), owned in any_job()) {
        let job = owned.view();
        for verdict in [judge_submit(&cfg, &job), judge_modify(&cfg, &job)] {
            if let Verdict::Reject(r) = verdict {
                prop_assert!(!r.message.is_empty());
            }
        }
    }

    #[test]
    fn judging_arbitrary_text_never_panics(cfg in configs(), owned in arbitrary_job()) {
        let job = owned.view();
        let _ = judge_submit(&cfg, &job);
        let _ = judge_modify(&cfg, &job);
    }

    #[test]
    fn accepted_gpu_qos_jobs_only_hold_permitted_typed_gpus(owned in any_job()) {
        let cfg = cfg();
        let job = owned.view();
        if let Verdict::Accept(_) = judge_submit(&cfg, &job) {
            for qos in job.qos_names() {
                let Some(rule) = cfg.rule_for(qos) else { continue };
                // What slurmctld holds, told apart from the plugin's reading:
                // --ntasks-per-gpu beside no GPU field makes untyped GPUs.
                let typed_fields = TresField::ALL.iter().filter_map(|f| job.tres(*f));
                let field_asks_gpu = typed_fields
                    .flat_map(crate::qos::gres::tres_entries)
                    .any(|e| e.is_ok_and(|r| r.is_gpu()));
                let slurm_adds = job.ntasks_per_gpu.is_some_and(|n| n > 0 && n != u16::MAX);
                prop_assert!(field_asks_gpu || !slurm_adds, "untyped GPUs Slurm adds accepted");
                let requests = collect_requests(&cfg, &job, Syntax::Sbatch).unwrap();
                prop_assert!(requests.iter().any(|r| r.request.is_gpu()));
                for r in requests.iter().filter(|r| r.request.is_gpu()) {
                    let ty = r.request.gres_type;
                    prop_assert!(ty.is_some_and(|t| rule.permits(t)), "{:?}", r);
                }
            }
        }
    }

    #[test]
    fn following_the_untyped_advice_is_accepted(
        field in prop::sample::select(TresField::ALL.to_vec()),
        count in 1u64..=4,
        slash in any::<bool>(),
    ) {
        let cfg = cfg();
        let sep = if slash { '/' } else { ':' };
        let asked = format!("gres{sep}gpu:{count}");
        let mut job = JobDescription {
            qos: Some("qos_lafferty"),
            per_node_spelling: crate::qos::gres::PerNodeSpelling::Gres,
            ..JobDescription::default()
        };
        set_field(&mut job, field, &asked);
        let r = rejection(judge_submit(&cfg, &job));
        let advice = r.message.split("Submit with ").nth(1).unwrap();
        let option = advice.strip_suffix(" instead.").unwrap();
        let tail = option.strip_prefix(field.gpu_option_prefix()).unwrap();
        let fixed = format!("gres{sep}gpu:{tail}");
        set_field(&mut job, field, &fixed);
        prop_assert!(changes(judge_submit(&cfg, &job)).is_empty());
    }
}

fn set_field<'a>(job: &mut JobDescription<'a>, field: TresField, value: &'a str) {
    match field {
        TresField::PerNode => job.tres_per_node = Some(value),
        TresField::PerJob => job.tres_per_job = Some(value),
        TresField::PerSocket => job.tres_per_socket = Some(value),
        TresField::PerTask => job.tres_per_task = Some(value),
    }
}

/// GPU text inside another TRES entry (`cpu=gres:gpu:2`), which slurmctld
/// reads as untyped GPUs (`gres:` on 22.05 and 23.02, `gres` from 23.11),
/// is refused at submission and in every update, with what Slurm would
/// hold and the entry to write; so is a share hidden from the
/// shared-GPU reservation rule.
#[test]
fn gpu_text_inside_another_tres_entry_is_refused_at_submit_and_update() {
    use super::update::judge_modify;
    use super::verdict::RejectionKind;
    let per_job = |qos, text| JobDescription {
        tres_per_job: Some(text),
        ..job(qos, None)
    };
    let r = rejection(submit(&per_job(Some("qos_lafferty"), "cpu=gres:gpu:2")));
    assert_eq!(r.kind, RejectionKind::BadRequest);
    assert_eq!(
        r.message,
        "Slurm reads the entry \"cpu=gres:gpu:2\" (from --gpus) as a request for 2 GPUs \
         without a type, hidden inside another entry, which GPU limits and rules would not \
         see; GPU requests must be entries of their own. Submit with --gpus=a40:2 instead."
    );
    // Under no rule at all, and in a job's own QOS: an update.
    for (qos, field, text) in [
        (None, TresField::PerJob, "cpu=gres/gpu:2"),
        (None, TresField::PerJob, "license/gres:gpu:2"),
        (Some("normal"), TresField::PerNode, "cpu=gres:gpu:2"),
        (None, TresField::PerTask, "cpu=gres/gpu:1"),
        (None, TresField::PerSocket, "mem=gres:mps:50"),
    ] {
        let mut update = JobDescription {
            job_id_for_messages: Some(77),
            ..job(qos, None)
        };
        match field {
            TresField::PerJob => update.tres_per_job = Some(text),
            TresField::PerNode => update.tres_per_node = Some(text),
            TresField::PerTask => update.tres_per_task = Some(text),
            TresField::PerSocket => update.tres_per_socket = Some(text),
        }
        let r = rejection(judge_modify(&cfg(), &update));
        assert_eq!(r.kind, RejectionKind::BadRequest, "{text}");
        assert!(
            r.message.contains(&format!(
                "the entry \"{text}\" (from {}=)",
                field.scontrol_key()
            )) && r.message.contains("Use: scontrol update job=77 "),
            "{}",
            r.message
        );
        let r = rejection(submit(&JobDescription { qos, ..update }));
        assert_eq!(r.kind, RejectionKind::BadRequest, "{text}");
    }
    // The same GPUs as entries of their own are judged as ever.
    let typed = per_job(Some("qos_lafferty"), "cpu=2,gres/gpu:a40:2");
    assert!(matches!(submit(&typed), Verdict::Accept(_)));
}
