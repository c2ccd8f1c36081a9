use crate::qos::policy::fixtures::*;
use crate::qos::policy::job::JobDescription;
use crate::qos::policy::submit::judge_submit;
use crate::qos::policy::verdict::RejectionKind;
use crate::shared::spank_env::MPS_UNITS as MPS_UNITS_ENV;

// Rule 10
#[test]
fn shares_outside_the_shared_reservations_are_rejected() {
    let r = rejection(submit(&job(None, Some("gres:mps:50"))));
    assert_eq!(r.kind, RejectionKind::SharedOutsideReservation);
    assert_eq!(
        r.message,
        "GPU shares (mps:50) are only available inside the shared-GPU reservations \
         matching jhl_homework_gpu*, jupyterhub_course_*: add --reservation=<name> with \
         the name of one of them (scontrol show reservation lists them)."
    );
    let elsewhere = JobDescription {
        reservation: Some("maint"),
        ..job(None, Some("gres/shard:2"))
    };
    let r = rejection(submit(&elsewhere));
    assert_eq!(
        r.message,
        "Reservation maint is not a shared-GPU reservation, and GPU shares (shard:2) are \
         only available inside reservations matching jhl_homework_gpu*, \
         jupyterhub_course_*: use --reservation=<name> with the name of one of those."
    );
    let one_bad_of_two = JobDescription {
        reservation: Some("jupyterhub_course_a,maint"),
        ..job(None, Some("gres:mps:50"))
    };
    assert_eq!(
        rejection(submit(&one_bad_of_two)).kind,
        RejectionKind::SharedOutsideReservation
    );
}

#[test]
fn shares_inside_a_matching_reservation_or_without_restriction_pass() {
    let inside = JobDescription {
        reservation: Some("jupyterhub_course_ml"),
        ..job(None, Some("gres:shard:1"))
    };
    assert!(changes(submit(&inside)).is_empty());
    let unrestricted = cfg_from("");
    assert!(changes(judge_submit(
        &unrestricted,
        &job(None, Some("gres/shard:1"))
    ))
    .is_empty());
}

// Rule 11
#[test]
fn mps_units_reach_the_spank_environment() {
    let j = JobDescription {
        reservation: Some("jhl_homework_gpu3"),
        ..job(None, Some("gres:mps:50"))
    };
    let c = changes(submit(&j));
    assert_eq!(c.spank_env.len(), 1);
    assert_eq!(c.spank_env[0].to_string(), "GPUSHARE_MPS_UNITS=50");
    assert_eq!(c.spank_env[0].name, MPS_UNITS_ENV);
}

#[test]
fn mps_share_larger_than_the_maximum_is_rejected() {
    let j = JobDescription {
        reservation: Some("jhl_homework_gpu3"),
        ..job(None, Some("gres:mps:150"))
    };
    let r = rejection(submit(&j));
    assert_eq!(r.kind, RejectionKind::ShareTooLarge);
    assert_eq!(
        r.message,
        "This job asks for 150 mps units on one node, more than the largest GPU share \
         allowed: at most 100 mps units per job. Ask for --gres=mps:100 or less, or for \
         whole GPUs with --gres=gpu:<type>:<count>."
    );
    let per_task = JobDescription {
        reservation: Some("jhl_homework_gpu3"),
        tres_per_task: Some("gres/mps=200"),
        ..JobDescription::default()
    };
    assert_eq!(
        rejection(submit(&per_task)).kind,
        RejectionKind::ShareTooLarge
    );
    let per_task_ok = JobDescription {
        tres_per_task: Some("gres/mps=20"),
        ..per_task
    };
    assert!(changes(submit(&per_task_ok)).spank_env.is_empty());
    let exactly = JobDescription {
        reservation: Some("jhl_homework_gpu3"),
        ..job(None, Some("gres:mps:100"))
    };
    assert_eq!(changes(submit(&exactly)).spank_env[0].value, "100");
}
