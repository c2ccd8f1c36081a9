//! Exemptions: a refusal of an exempt requester is an acceptance that
//! still carries the refusal; nobody else's is.

use super::*;
use crate::qos::policy::fixtures::*;
use crate::qos::policy::submit::judge_submit;
use crate::qos::policy::update::judge_modify;
use crate::qos::policy::verdict::{ExemptReason, RejectionKind};

const EXEMPT: &str = "\
QOS=qos_lafferty GPUTypes=a40 GPULimit=4
ExemptUsers=alice,1234
ExemptAdmins=yes
";

fn requester(uid: u32, name: Option<&str>, operator: bool) -> Requester<'_> {
    Requester {
        uid,
        name,
        operator,
        coordinator: false,
    }
}

/// The untyped submission every rule of [`EXEMPT`] refuses.
fn refused_submission(cfg: &GpuQosConfig, who: &Requester<'_>) -> Verdict {
    let untyped = job(Some("qos_lafferty"), Some("gres:gpu:2"));
    let verdict = judge_submit(cfg, &untyped);
    assert!(matches!(verdict, Verdict::Reject(_)), "{verdict:?}");
    apply_exemptions(cfg, &untyped, Action::Submit, who, verdict)
}

#[test]
fn an_exempt_user_by_name_is_accepted_and_the_refusal_still_reported() {
    let cfg = cfg_from(EXEMPT);
    let c = changes(refused_submission(
        &cfg,
        &requester(5000, Some("alice"), false),
    ));
    let e = c.exemption.expect("the refusal is carried");
    assert_eq!(e.reason, ExemptReason::User);
    assert_eq!(e.kind, RejectionKind::UntypedGpu);
    assert_eq!(e.qos, "qos_lafferty");
    assert!(e.message.contains("--gres=gpu:a40:2"), "{}", e.message);
    // Accepted as sent: nothing else changes, nothing told as a warning.
    assert!(c.warnings.is_empty() && c.spank_env.is_empty() && !c.set_requeue);
    // Names compare without case, as User= rules do.
    let c = changes(refused_submission(
        &cfg,
        &requester(5000, Some("ALICE"), false),
    ));
    assert!(c.exemption.is_some());
}

#[test]
fn an_exempt_user_by_uid_is_accepted_whatever_their_name() {
    let cfg = cfg_from(EXEMPT);
    let c = changes(refused_submission(&cfg, &requester(1234, None, false)));
    assert_eq!(c.exemption.map(|e| e.reason), Some(ExemptReason::User));
    let c = changes(refused_submission(
        &cfg,
        &requester(1234, Some("zed"), false),
    ));
    assert_eq!(c.exemption.map(|e| e.reason), Some(ExemptReason::User));
}

#[test]
fn anyone_else_is_refused_as_before() {
    let cfg = cfg_from(EXEMPT);
    for who in [
        requester(5001, Some("bob"), false),
        requester(5001, None, false),
        // An operator's own submission: ExemptAdmins is for updates.
        requester(5002, Some("oper"), true),
        // A uid that is a name's digits is not that name.
        requester(1235, Some("1234x"), false),
    ] {
        let r = rejection(refused_submission(&cfg, &who));
        assert_eq!(r.kind, RejectionKind::UntypedGpu, "{who:?}");
    }
    // Without the keys nobody is exempt.
    let plain = cfg_from("QOS=qos_lafferty GPUTypes=a40\n");
    rejection(refused_submission(
        &plain,
        &requester(1234, Some("alice"), true),
    ));
}

#[test]
fn an_operator_is_exempt_only_updating_another_users_job() {
    let cfg = cfg_from(EXEMPT);
    let untyped = JobDescription {
        job_id_for_messages: Some(42),
        ..job(Some("qos_lafferty"), Some("gres:gpu:2"))
    };
    let oper = requester(5002, Some("oper"), true);
    let judged = |cfg: &GpuQosConfig, who: &Requester<'_>, owner: Option<u32>| {
        let verdict = judge_modify(cfg, &untyped);
        assert!(matches!(verdict, Verdict::Reject(_)), "{verdict:?}");
        apply_exemptions(cfg, &untyped, Action::Update { owner }, who, verdict)
    };
    // Another user's job: accepted, the refusal carried.
    let e = changes(judged(&cfg, &oper, Some(5001))).exemption.unwrap();
    assert_eq!(e.reason, ExemptReason::Admin);
    assert!(e.message.contains("scontrol update"), "{}", e.message);
    // The operator's own job: refused as anyone's.
    rejection(judged(&cfg, &oper, Some(5002)));
    // The owner unknown: refused.
    rejection(judged(&cfg, &oper, None));
    // Not an operator: refused, whoever owns the job.
    rejection(judged(
        &cfg,
        &requester(5001, Some("bob"), false),
        Some(5003),
    ));
    // ExemptAdmins=no (the default): an operator is refused.
    let no = cfg_from("QOS=qos_lafferty GPUTypes=a40\nExemptAdmins=no\n");
    rejection(judged(&no, &oper, Some(5001)));
    // An exempt user's update of their own job: accepted.
    let alice = requester(5000, Some("alice"), false);
    let e = changes(judged(&cfg, &alice, Some(5000))).exemption.unwrap();
    assert_eq!(e.reason, ExemptReason::User);
}

#[test]
fn an_accepted_job_is_left_as_it_is() {
    let cfg = cfg_from(EXEMPT);
    let typed = job(Some("qos_lafferty"), Some("gres:gpu:a40:2"));
    let verdict = judge_submit(&cfg, &typed);
    let before = verdict.clone();
    let after = apply_exemptions(
        &cfg,
        &typed,
        Action::Submit,
        &requester(5000, Some("alice"), true),
        verdict,
    );
    assert_eq!(after, before);
    assert!(changes(after).exemption.is_none());
}

#[test]
fn exempt_users_and_admins_are_parsed_and_checked_with_file_and_line() {
    use crate::qos::config::{parse, ExemptUser};
    let cfg = cfg_from(EXEMPT);
    assert_eq!(
        cfg.exempt_users(),
        &[ExemptUser::Name("alice".into()), ExemptUser::Uid(1234)]
    );
    assert!(cfg.exempt_admins() && cfg.has_exemptions());
    assert!(!cfg_from("").has_exemptions());
    for (text, says) in [
        (
            "ExemptUsers=alice,,bob\n",
            "gpu_qos.conf:1: ExemptUsers has an empty item",
        ),
        (
            "\nExemptUsers=al ice\n",
            "gpu_qos.conf:2: expected Key=Value",
        ),
        (
            "ExemptUsers=a/b\n",
            "gpu_qos.conf:1: ExemptUsers takes user names or numeric uids",
        ),
        (
            "ExemptUsers=-x\n",
            "gpu_qos.conf:1: ExemptUsers takes user names",
        ),
        (
            "ExemptUsers=99999999999\n",
            "gpu_qos.conf:1: ExemptUsers takes user names",
        ),
        (
            "ExemptUsers=7,007\n",
            "gpu_qos.conf:1: ExemptUsers lists 007 twice",
        ),
        (
            "ExemptAdmins=maybe\n",
            "gpu_qos.conf:1: ExemptAdmins must be one of yes, no",
        ),
        (
            "QOS=q GPUTypes=a40 ExemptUsers=alice\n",
            "gpu_qos.conf:1: ExemptUsers is a global setting",
        ),
        (
            "ExemptUsers=a\nExemptUsers=b\n",
            "gpu_qos.conf:2: ExemptUsers already set on line 1",
        ),
    ] {
        let e = parse(text, "gpu_qos.conf").err().map(|e| e.to_string());
        assert!(
            e.as_deref().is_some_and(|e| e.starts_with(says)),
            "{text:?}: {e:?}"
        );
    }
}

#[test]
fn without_its_file_the_policy_refuses_only_untyped_requests_under_typed_limits() {
    use crate::qos::policy::job::{LimitLevel, Resolved, TypedLimit};
    let cfg = GpuQosConfig::without_file(None);
    // Nothing the database limits by type: everything accepted.
    for j in [
        job(Some("qos_lafferty"), Some("gres:gpu:2")),
        job(None, Some("gres:gpu:2")),
        job(Some("qos_lafferty"), Some("gres:gpu:a40:2")),
    ] {
        changes(judge_submit(&cfg, &j));
    }
    // A typed limit of the database: the untyped request refused with
    // the types to name, a typed one accepted.
    let limits = [TypedLimit {
        level: LimitLevel::Qos("qos_lafferty".into()),
        types: vec!["a40".into()],
    }];
    let under = |per_node| JobDescription {
        resolved: Resolved {
            typed_limits: &limits,
            ..Resolved::default()
        },
        ..job(Some("qos_lafferty"), Some(per_node))
    };
    let r = rejection(judge_submit(&cfg, &under("gres:gpu:2")));
    assert_eq!(r.kind, RejectionKind::UnlistedTypedLimit);
    assert!(r.message.contains("a40"), "{}", r.message);
    changes(judge_submit(&cfg, &under("gres:gpu:a40:2")));
}

/// An operator's `ArrayTaskThrottle=` stands, whatever `ExemptAdmins=`
/// says (the cap is not set back over a change made on purpose); so does
/// an exempt user's. Anyone else's is read back and capped again.
#[test]
fn an_operators_array_throttle_is_not_set_back() {
    let cfg = cfg();
    let update = JobDescription {
        array_inx: Some("0"),
        job_id_for_messages: Some(77),
        ..JobDescription::default()
    };
    let action = Action::Update { owner: Some(1001) };
    let decided = |who: &Requester<'_>| {
        let verdict = judge_modify(&cfg, &update);
        changes(apply_exemptions(&cfg, &update, action, who, verdict))
    };
    for operator in [
        requester(0, Some("root"), true),
        requester(1001, Some("ann"), true),
    ] {
        let c = decided(&operator);
        assert_eq!(c.recheck_array_throttle, None);
        assert_eq!(c.user_warning, None);
    }
    let user = decided(&requester(1001, Some("ann"), false));
    assert!(user.recheck_array_throttle.is_some());
    assert!(user.user_warning.is_some());
    let listed = cfg_from(&format!("{CONF}ExemptUsers=ann\n"));
    let verdict = judge_modify(&listed, &update);
    let c = changes(apply_exemptions(
        &listed,
        &update,
        action,
        &requester(1001, Some("ann"), false),
        verdict,
    ));
    assert_eq!(c.recheck_array_throttle, None);
}

/// An update of `ArrayTaskThrottle=` to `value` on job 77, owned by uid 500.
fn throttle_update(value: &str) -> JobDescription<'_> {
    JobDescription {
        array_inx: Some(value),
        job_id_for_messages: Some(77),
        ..job(None, None)
    }
}

#[test]
fn another_users_throttle_is_refused_saying_slurm_22_05_already_set_it() {
    let update = throttle_update("0x");
    let owner = Action::Update { owner: Some(500) };
    assert!(may_be_foreign_throttle(&update, owner, 600));
    let r = foreign_throttle(&update, owner, &requester(600, Some("mallory"), false))
        .expect("another user's throttle is refused");
    assert_eq!(r.kind, RejectionKind::ForeignArrayThrottle);
    assert!(
        r.message
            .contains("job 77 belongs to another user (uid 500)"),
        "{}",
        r.message
    );
    // The value as slurmctld read it (strtoll), not the text.
    assert!(r.message.contains("set it to 0 before"), "{}", r.message);
    // A hostile value reaches the words only as the number slurmctld read.
    let hostile = throttle_update("7\njob_submit/gpu_qos: forged line");
    let r = foreign_throttle(&hostile, owner, &requester(600, None, false)).expect("refused");
    assert!(r.message.contains("set it to 7 before") && !r.message.contains("forged"));
    // Even an empty value is a throttle slurmctld applies (0).
    assert!(foreign_throttle(&throttle_update(""), owner, &requester(600, None, false)).is_some());
}

#[test]
fn the_owner_an_operator_or_a_coordinator_may_change_a_throttle() {
    let update = throttle_update("4");
    let owner = Action::Update { owner: Some(500) };
    assert!(!may_be_foreign_throttle(&update, owner, 500));
    assert!(foreign_throttle(&update, owner, &requester(500, None, false)).is_none());
    assert!(foreign_throttle(&update, owner, &requester(0, Some("root"), true)).is_none());
    let coordinator = Requester {
        coordinator: true,
        ..requester(600, Some("pi"), false)
    };
    assert!(foreign_throttle(&update, owner, &coordinator).is_none());
    // No throttle in the update, or the owner unknown: nothing to refuse.
    let plain = JobDescription {
        job_id_for_messages: Some(77),
        ..job(None, Some("gres:gpu:a40:1"))
    };
    assert!(!may_be_foreign_throttle(&plain, owner, 600));
    assert!(foreign_throttle(&plain, owner, &requester(600, None, false)).is_none());
    let unknown = Action::Update { owner: None };
    assert!(foreign_throttle(&update, unknown, &requester(600, None, false)).is_none());
    assert!(foreign_throttle(&update, Action::Submit, &requester(600, None, false)).is_none());
}
