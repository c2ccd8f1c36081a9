use crate::qos::policy::fixtures::*;
use crate::qos::policy::job::JobDescription;
use crate::qos::policy::submit::judge_submit;
use crate::qos::policy::throttle_to_restore;
use crate::qos::policy::update::judge_modify;
use crate::qos::policy::verdict::{JobChanges, RejectionKind, ThrottleRecheck};

// Rule 9
#[test]
fn low_priority_jobs_become_requeueable_with_appended_output() {
    let c = changes(submit(&job(Some("lowprio"), None)));
    assert_eq!(
        c,
        JobChanges {
            set_requeue: true,
            set_open_mode_append: true,
            ..JobChanges::default()
        }
    );
    let explicit = JobDescription {
        requeue: Some(true),
        open_mode_set: true,
        ..job(Some("LOWPRIO"), None)
    };
    assert!(changes(submit(&explicit)).is_empty());
    let in_list = job(Some("normal,lowprio"), None);
    assert!(changes(submit(&in_list)).set_requeue);
}

#[test]
fn exclusive_user_under_low_priority_is_cleared_with_a_warning() {
    let j = JobDescription {
        exclusive_user: true,
        requeue: Some(false),
        ..job(Some("lowprio"), None)
    };
    let c = changes(submit(&j));
    assert!(c.clear_exclusive_user);
    let warning = c.user_warning.unwrap_or_default();
    assert!(
        warning.starts_with("Jobs under QOS lowprio can be preempted;"),
        "{warning}"
    );
    assert!(warning.ends_with(
        "\nJobs under QOS lowprio may not use --exclusive=user: it would keep other users \
         off the node's idle GPUs. The job was accepted without it. [GQ202]"
    ));
    // Other QOS keep it; so does a site that says keep.
    let group = JobDescription {
        exclusive_user: true,
        ..job(Some("qos_lafferty"), Some("gres:gpu:a40:1"))
    };
    assert!(!changes(submit(&group)).clear_exclusive_user);
    let keep = cfg_from("LowPriorityQOS=lowprio\nLowPriorityExclusiveUser=keep");
    assert!(!changes(judge_submit(&keep, &j)).clear_exclusive_user);
    // An update to the low-priority QOS loses it too.
    let update = JobDescription {
        exclusive_user: true,
        ..job(Some("lowprio"), None)
    };
    assert!(changes(judge_modify(&cfg(), &update)).clear_exclusive_user);
}

#[test]
fn no_requeue_under_low_priority_is_accepted_with_a_warning() {
    let j = JobDescription {
        requeue: Some(false),
        ..job(Some("lowprio"), None)
    };
    let c = changes(submit(&j));
    assert!(!c.set_requeue);
    assert_eq!(
        c.user_warning.as_deref(),
        Some(
            "Jobs under QOS lowprio can be preempted; because of --no-requeue this job \
             will be cancelled instead of requeued when that happens. Submit without \
             --no-requeue to have it requeued. [GQ201]"
        )
    );
}

#[test]
fn low_priority_arrays_are_throttled() {
    let array = |inx| {
        changes(submit(&JobDescription {
            array_inx: Some(inx),
            ..job(Some("lowprio"), None)
        }))
        .array_inx
    };
    assert_eq!(array("0-99").as_deref(), Some("0-99%8"));
    assert_eq!(array("0-99%20").as_deref(), Some("0-99%8"));
    assert_eq!(array("1,3,5-9:2%0").as_deref(), Some("1,3,5-9:2%8"));
    assert_eq!(
        array("0-9%99999999999999999999999").as_deref(),
        Some("0-9%8")
    );
    assert_eq!(array("0-99%4"), None);
    assert_eq!(array("0-99%8"), None);
    assert_eq!(array("  "), None);

    let r = rejection(submit(&JobDescription {
        array_inx: Some("0-9%x"),
        ..job(Some("lowprio"), None)
    }));
    assert_eq!(r.kind, RejectionKind::BadRequest);
    assert_eq!(
        r.message,
        "Invalid --array=0-9%x: Slurm reads the number of tasks to run at once after the \
         first % and nothing after it, so only that number may follow it, e.g. \
         --array=0-9%8."
    );
    // slurmctld reads the throttle after the first `%` (`atoi`): 100 for
    // `0-99%100%5`, 5 for `1,2%5,7`. Never read after the last one.
    for odd in ["0-99%100%5", "0-99%0%5", "1,2%5,7", "0-9%+5", "0-9% 5"] {
        let r = rejection(submit(&JobDescription {
            array_inx: Some(odd),
            ..job(Some("lowprio"), None)
        }));
        assert_eq!(r.kind, RejectionKind::BadRequest, "{odd}");
    }

    let normal = JobDescription {
        array_inx: Some("0-99"),
        ..job(Some("normal"), None)
    };
    assert!(changes(submit(&normal)).is_empty());
    let uncapped = cfg_from("LowPriorityQOS=lowprio");
    let j = JobDescription {
        array_inx: Some("0-99"),
        ..job(Some("lowprio"), None)
    };
    assert_eq!(changes(judge_submit(&uncapped, &j)).array_inx, None);
}

#[test]
fn update_to_low_priority_makes_the_job_requeueable() {
    let c = changes(judge_modify(&cfg(), &job(Some("lowprio"), None)));
    assert_eq!(
        c,
        JobChanges {
            set_requeue: true,
            ..JobChanges::default()
        }
    );
}

#[test]
fn an_update_lifting_an_arrays_throttle_is_read_back_and_capped_again() {
    let update = |inx: &'static str| JobDescription {
        array_inx: Some(inx),
        job_id_for_messages: Some(77),
        ..JobDescription::default()
    };
    let c = changes(judge_modify(&cfg(), &update("0")));
    assert_eq!(
        c.recheck_array_throttle,
        Some(ThrottleRecheck { job_id: 77, max: 8 })
    );
    assert!(c
        .user_message()
        .unwrap()
        .contains("its ArrayTaskThrottle is set back to 8 within seconds"));
    assert!(changes(judge_modify(&cfg(), &update("9")))
        .recheck_array_throttle
        .is_some());
    // As slurmctld reads the value (strtoll into an int): 0 for `0x`,
    // `+0`, nothing; 100 for `100abc`; 2^32 is 0. A value it reads below
    // 0 (`-1`, one past 64 bits: -1) it refuses itself.
    for lifted in ["0x", "+0", "", " 0", "100abc", "4294967296", "4294967305"] {
        assert!(
            changes(judge_modify(&cfg(), &update(lifted)))
                .recheck_array_throttle
                .is_some(),
            "{lifted:?}"
        );
    }
    for kept in ["8", "+8", "8x", "-1", "99999999999999999999", "4294967304"] {
        assert!(
            changes(judge_modify(&cfg(), &update(kept)))
                .recheck_array_throttle
                .is_none(),
            "{kept:?}"
        );
    }
    // An array named by a task or a range of tasks: the array's job id.
    for named in ["123_4", "123_[0-9]", "123"] {
        let c = changes(judge_modify(
            &cfg(),
            &JobDescription {
                array_inx: Some("0"),
                job_id_str: Some(named),
                ..JobDescription::default()
            },
        ));
        assert_eq!(
            c.recheck_array_throttle,
            Some(ThrottleRecheck {
                job_id: 123,
                max: 8
            }),
            "{named}"
        );
    }
    // Within the cap, or no cap, or the low-priority QOS only warns: nothing.
    assert!(changes(judge_modify(&cfg(), &update("8"))).is_empty());
    let no_cap = cfg_from("LowPriorityQOS=lowprio\n");
    assert!(changes(judge_modify(&no_cap, &update("0"))).is_empty());
    let warns = cfg_from("LowPriorityQOS=lowprio\nLowPriorityMaxArrayTasks=8\nEnforce=warn\n");
    assert!(changes(judge_modify(&warns, &update("0")))
        .recheck_array_throttle
        .is_none());

    // The array read back: capped again only under a low-priority QOS.
    let low = vec!["lowprio".to_owned()];
    let show = |qos: &str, throttle: &str| {
        format!("JobId=77 ArrayJobId=77 ArrayTaskId=0-19 ArrayTaskThrottle={throttle} QOS={qos} JobState=PENDING\n")
    };
    assert_eq!(throttle_to_restore(&show("lowprio", "0"), &low, 8), Some(8));
    assert_eq!(
        throttle_to_restore(&show("LOWPRIO", "12"), &low, 8),
        Some(8)
    );
    assert_eq!(throttle_to_restore(&show("lowprio", "8"), &low, 8), None);
    assert_eq!(throttle_to_restore(&show("normal", "0"), &low, 8), None);
    assert_eq!(throttle_to_restore("", &low, 8), None);
    // No throttle: scontrol prints no ArrayTaskThrottle= at all.
    let unthrottled = "JobId=77 ArrayJobId=77 ArrayTaskId=0-19 QOS=lowprio JobState=PENDING\n";
    assert_eq!(throttle_to_restore(unthrottled, &low, 8), Some(8));
    let not_an_array = "JobId=78 QOS=lowprio JobState=PENDING\n";
    assert_eq!(throttle_to_restore(not_an_array, &low, 8), None);
    // Tasks split off carry no throttle: the pending tasks' record,
    // wherever it comes, says what the array's is.
    let split = "JobId=77 ArrayJobId=77 ArrayTaskId=0 JobName=wrap QOS=lowprio JobState=PENDING\n\
                 JobId=80 ArrayJobId=77 ArrayTaskId=1 JobName=wrap QOS=lowprio JobState=RUNNING\n";
    let pending = |t: &str| {
        format!("{split}JobId=81 ArrayJobId=77 ArrayTaskId=2-19 ArrayTaskThrottle={t} JobName=wrap QOS=lowprio JobState=PENDING\n")
    };
    assert_eq!(throttle_to_restore(&pending("2"), &low, 8), None);
    assert_eq!(throttle_to_restore(&pending("30"), &low, 8), Some(8));
    // Only split tasks read (the pending ones' record beyond what was
    // read, or none left): capped.
    assert_eq!(throttle_to_restore(split, &low, 8), Some(8));
    // A user's words never hide the record's own fields: a name holding
    // ` QOS=normal` (before Slurm's QOS=) or a throttle, a working
    // directory holding one (after it).
    let named = |name: &str, tail: &str| {
        format!(
            "JobId=77 ArrayJobId=77 ArrayTaskId=0-19 JobName={name} UserId=ann(1001) \
             GroupId=ann(1001) MCS_label=N/A Priority=1 Nice=0 Account=ann QOS=lowprio \
             JobState=PENDING{tail}\n"
        )
    };
    for (name, tail) in [
        ("x QOS=normal", ""),
        ("x ArrayTaskThrottle=8 QOS=normal", ""),
        ("x UserId=ann(1001) GroupId=ann(1001) MCS_label=N/A Priority=1 Nice=0 Account=ann QOS=normal JobState=PENDING", ""),
        ("x", " WorkDir=/home/ann/ QOS=normal ArrayTaskThrottle=8"),
    ] {
        assert_eq!(
            throttle_to_restore(&named(name, tail), &low, 8),
            Some(8),
            "{name}{tail}"
        );
    }
}
