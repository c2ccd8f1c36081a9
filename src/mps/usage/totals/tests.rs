use super::*;
use crate::mps::ledger::{ShareRecord, WholeRecord};

fn state() -> LedgerState {
    let mut state = LedgerState::new();
    state.insert_share(ShareRecord {
        job: 7,
        uid: 1000,
        user: "alice".into(),
        gpu: 1,
        units: 25,
        since: 0,
        placed_by_slurm: false,
        memory_mib: Some(20_000),
        clients: None,
        sluid: None,
    });
    state.insert_whole(WholeRecord {
        job: 9,
        gpus: vec![0, 2],
        since: 0,
    });
    state
}

fn used(job: u32, gpu: u32, mib: Option<u64>, sm: Option<f64>, whole: bool) -> ShareUse {
    ShareUse {
        job,
        gpu,
        memory_bytes: mib.map(|m| m * MIB),
        sm_utilization: sm,
        whole,
    }
}

/// Three runs of the timer: the peak is the largest memory one run saw,
/// the SM mean is over the runs that sampled SMs, the limit is the
/// share's (or the GPU's memory for a job holding it whole); a job whose
/// GPU the ledger no longer shows is taken out, the others stay.
#[test]
fn runs_add_up_to_a_peak_and_a_mean_until_the_job_leaves_its_gpu() {
    let state = state();
    let gpu_memory = BTreeMap::from([(0, 80_000 * MIB)]);
    let mut totals = Vec::new();
    for (mem, sm) in [
        (Some(1000), Some(0.5)),
        (Some(3000), None),
        (None, Some(1.5)),
    ] {
        let run = [
            used(7, 1, mem, sm, false),
            used(9, 0, Some(40_000), Some(0.2), true),
        ];
        fold(&mut totals, &run, &state, 100, &gpu_memory);
    }
    let share = &totals[0];
    assert_eq!(
        (
            share.units,
            share.limit_mib,
            share.peak_bytes,
            share.samples
        ),
        (Some(25), Some(20_000), Some(3000 * MIB), 3)
    );
    assert_eq!(share.sm_mean(), Some(1.0));
    assert_eq!(share.memory_peak_ratio(), Some(0.15));
    let whole = &totals[1];
    assert_eq!((whole.units, whole.limit_mib), (None, Some(80_000)));
    assert_eq!(whole.size_label(), "whole");
    assert_eq!(
        words("gpu01", share),
        "gpushare-usage: node=gpu01 gpu=1 units=25/100 mem_peak_mib=3000 mem_limit_mib=20000 \
         sm_mean=1.000 samples=3"
    );
    assert_eq!(
        words("gpu01", &used_only()),
        "gpushare-usage: node=gpu01 gpu=3 units=whole mem_peak_mib=- mem_limit_mib=- sm_mean=- \
         samples=1"
    );
    assert!(take_ended(&mut totals, &state).is_empty());
    let mut later = state.clone();
    later.remove_job(7);
    let ended = take_ended(&mut totals, &later);
    assert_eq!(ended.len(), 1);
    assert_eq!(ended[0].job, 7);
    assert_eq!(totals.len(), 1);
}

fn used_only() -> Totals {
    let mut totals = Vec::new();
    fold(
        &mut totals,
        &[used(9, 3, None, None, true)],
        &LedgerState::new(),
        100,
        &BTreeMap::new(),
    );
    totals.remove(0)
}

/// The site's words and other nodes' figures stay as they were; this
/// node's earlier figures are replaced; what 22.05's sacctmgr would
/// lower-case or any quote is never written.
#[test]
fn the_comment_keeps_every_word_but_this_nodes_old_figures() {
    let figures = vec!["gpushare-usage: node=n1 gpu=0 units=whole mem_peak_mib=1 \
                        mem_limit_mib=2 sm_mean=0.10 samples=2"
        .to_owned()];
    let before = "Site note; gpushare-usage: node=n1 gpu=0 units=whole mem_peak_mib=9 \
                  mem_limit_mib=2 sm_mean=0.90 samples=1; gpushare-usage: node=n2 gpu=1 \
                  units=whole mem_peak_mib=3 mem_limit_mib=2 sm_mean=0.30 samples=4; \
                  gpushare: requeued from n1";
    let after = comment_with(before, "n1", &figures);
    assert_eq!(
        after,
        "Site note; gpushare-usage: node=n2 gpu=1 units=whole mem_peak_mib=3 mem_limit_mib=2 \
         sm_mean=0.30 samples=4; gpushare: requeued from n1; gpushare-usage: node=n1 gpu=0 \
         units=whole mem_peak_mib=1 mem_limit_mib=2 sm_mean=0.10 samples=2"
    );
    assert!(comment_has(&after, &figures));
    assert!(comment_has(&after.to_lowercase(), &figures));
    assert!(!comment_has(before, &figures));
    assert_eq!(comment_with("", "n1", &figures), figures[0]);
    assert!(sacctmgr_keeps(&after, false));
    assert!(!sacctmgr_keeps(&after, true));
    assert!(sacctmgr_keeps(&after.to_lowercase(), true));
    assert!(!sacctmgr_keeps("it's", false));
}

fn ended(since: u64, failing_since: Option<u64>) -> Ended {
    let mut e = ended_jobs(vec![used_only()], since).remove(0);
    e.failing_since = failing_since;
    e
}

/// sacct's line of job 9 with these comments.
fn line(state: &str, admin: &str, system: &str) -> String {
    ["9", "9", state, "normal", admin, system].join(SACCT_DELIMITER) + "\n"
}

fn shown(state: &str, comment: &str) -> Result<Option<Accounted>, Unanswered> {
    Ok(accounted(&line(state, comment, ""), 9))
}

fn down() -> Result<Option<Accounted>, Unanswered> {
    Err(Unanswered::Failed("slurmdbd is down".into()))
}

/// An ended job's figures are written once its record in the accounting
/// is complete, counted once they are seen there; a job still running
/// (requeued) or not recorded waits an hour; an accounting that fails
/// every call for an hour is given up, a call not made never.
#[test]
fn figures_are_written_when_the_record_is_complete_and_then_counted() {
    let figure = words("n1", &used_only());
    let admin = |comment: String| Next::Write {
        name: "9".into(),
        field: Field::AdminComment,
        comment,
    };
    assert_eq!(
        next(&ended(0, None), shown("COMPLETED", ""), "n1", false, 10),
        admin(figure.clone())
    );
    // Another node's figures before: gpushare's comment, added to.
    let other = words("n2", &used_only());
    assert_eq!(
        next(&ended(0, None), shown("COMPLETED", &other), "n1", false, 10),
        admin(format!("{other}; {figure}"))
    );
    // Words gpushare did not write: left whole, SystemComment used.
    assert_eq!(
        next(&ended(0, None), shown("COMPLETED", "x"), "n1", false, 10),
        Next::Write {
            name: "9".into(),
            field: Field::SystemComment,
            comment: figure.clone(),
        }
    );
    assert_eq!(
        next(
            &ended(0, None),
            shown("CANCELLED by 1000", &figure),
            "n1",
            false,
            70
        ),
        Next::Done {
            qos: "normal".into()
        }
    );
    assert_eq!(
        next(&ended(0, None), shown("RUNNING", ""), "n1", false, 60),
        Next::Wait
    );
    assert_eq!(next(&ended(0, None), Ok(None), "n1", false, 60), Next::Wait);
    assert!(matches!(
        next(
            &ended(0, None),
            shown("PENDING", ""),
            "n1",
            false,
            RECORD_FOR_SECS + 1
        ),
        Next::GiveUp(_)
    ));
    assert_eq!(next(&ended(0, None), down(), "n1", false, 60), Next::Wait);
    let none = Err(Unanswered::Failed(
        "sacct -X: Slurm accounting storage is disabled".to_owned(),
    ));
    assert!(matches!(
        next(&ended(0, None), none, "n1", false, 60),
        Next::GiveUp(w) if w.contains("UsageRecord=none")
    ));
    // Failing for less than the span: still waits; past it: given up.
    let hour = FAILING_FOR_SECS;
    assert_eq!(
        next(&ended(0, Some(100)), down(), "n1", false, 100 + hour - 1),
        Next::Wait
    );
    assert!(matches!(
        next(&ended(0, Some(100)), down(), "n1", false, 100 + hour),
        Next::GiveUp(_)
    ));
    // A call not made is no try, however long.
    let spent = Err(Unanswered::NotAsked("not run".into()));
    assert_eq!(
        next(&ended(0, Some(0)), spent, "n1", false, 10 * hour),
        Next::Wait
    );
    assert_eq!(accounted("", 9), None);
    // An array's tasks, listed by the array's id: the task whose raw id
    // is the job's, named as sacctmgr selects it alone; a `|` is text.
    let d = SACCT_DELIMITER;
    let array = format!(
        "7{d}9_1{d}COMPLETED{d}normal{d}{d}\n8{d}9_2{d}COMPLETED{d}long{d}a|b{d}s\n\
         9{d}9_3{d}FAILED{d}normal{d}x{d}\n"
    );
    assert_eq!(
        accounted(&array, 8),
        Some(Accounted {
            name: "9_2".into(),
            state: "COMPLETED".into(),
            qos: "long".into(),
            admin_comment: "a|b".into(),
            system_comment: "s".into(),
        })
    );
    // A line break in a comment continues the record.
    let with_break = format!("8{d}8{d}COMPLETED{d}normal{d}first\nsecond{d}\n");
    assert_eq!(
        accounted(&with_break, 8).map(|a| a.admin_comment),
        Some("first\nsecond".to_owned())
    );
    // A comment holding the delimiter: no record read.
    assert_eq!(
        accounted(&format!("8{d}8{d}COMPLETED{d}normal{d}a{d}b{d}c\n"), 8),
        None
    );
    let het = Ok(accounted(
        &format!("9{d}5+1{d}COMPLETED{d}normal{d}{d}\n"),
        9,
    ));
    assert!(matches!(
        next(&ended(0, None), het, "n1", false, 60),
        Next::GiveUp(_)
    ));
}

/// A site tool's AdminComment (jobstats' `JS1:` blob, backslashes,
/// quotes, line breaks, capitals 22.05's sacctmgr would lower) is never
/// written: the figures go to SystemComment, whose words are kept; read
/// back in either comment; given up where both are a tool's.
#[test]
fn a_site_tools_admin_comment_is_left_whole_and_system_comment_used() {
    let figure = words("n1", &used_only());
    let system = |comment: String| Next::Write {
        name: "9".into(),
        field: Field::SystemComment,
        comment,
    };
    let js1 = "JS1:H4sIAAAAAAAAA6tWKkktLlGyUlAqS8wpTgUA+/Wu5BIAAAA=";
    for admin in [js1, r"C:\temp", r"ends in \", "said \"no\"", "two\nlines"] {
        let a = accounted(&line("COMPLETED", admin, ""), 9);
        assert_eq!(
            next(&ended(0, None), Ok(a), "n1", false, 60),
            system(figure.clone()),
            "{admin:?}"
        );
    }
    // SystemComment's own words kept before the figures.
    let a = accounted(&line("COMPLETED", js1, "bb: setup ok"), 9);
    assert_eq!(
        next(&ended(0, None), Ok(a), "n1", false, 60),
        system(format!("bb: setup ok; {figure}"))
    );
    // 22.05's sacctmgr lowers every comment: capitals go elsewhere.
    let a = accounted(&line("COMPLETED", "Project X", ""), 9);
    assert_eq!(
        next(&ended(0, None), Ok(a), "n1", true, 60),
        system(figure.clone())
    );
    // jobstats' own write through 22.05's sacctmgr, lowered: still its.
    let lowered = accounted(&line("COMPLETED", &js1.to_lowercase(), ""), 9);
    assert_eq!(
        next(&ended(0, None), Ok(lowered), "n1", true, 60),
        system(figure.clone())
    );
    // Read back in SystemComment (or lowered): done.
    let a = accounted(&line("COMPLETED", js1, &figure.to_lowercase()), 9);
    assert!(matches!(
        next(&ended(0, None), Ok(a), "n1", true, 60),
        Next::Done { .. }
    ));
    // Both comments a tool's: given up, both named, neither written.
    let a = accounted(&line("COMPLETED", js1, r"a\b"), 9);
    assert!(matches!(
        next(&ended(0, None), Ok(a), "n1", false, 60),
        Next::GiveUp(w) if w.contains("AdminComment") && w.contains("SystemComment")
    ));
    // Written MAX_WRITES times and never kept: given up.
    let mut e = ended(0, None);
    e.writes = MAX_WRITES;
    assert!(matches!(
        next(&e, shown("COMPLETED", ""), "n1", false, 60),
        Next::GiveUp(_)
    ));
}

/// Each ended GPU counts once under its QOS and size; buckets are
/// cumulative as Prometheus reads them; past the cap, new QOS count as
/// `other`.
#[test]
fn fit_counts_by_qos_and_size() {
    let mut fit = Fit::default();
    let mut t = used_only();
    t.limit_mib = Some(1000);
    t.peak_bytes = Some(300 * MIB);
    t.sm_sum = 0.6;
    t.sm_samples = 1;
    fit.observe(&t, "normal");
    t.peak_bytes = Some(1000 * MIB);
    fit.observe(&t, "normal");
    fit.observe(&t, "");
    let row = &fit.rows[0];
    assert_eq!((row.qos.as_str(), row.size.as_str()), ("normal", "whole"));
    assert_eq!(
        row.memory.cumulative(&MEMORY_BOUNDS),
        vec![0, 0, 1, 1, 1, 2, 2]
    );
    assert_eq!(row.sm.count, 2);
    assert_eq!(fit.rows[1].qos, "unknown");
    for i in 0..MAX_QOS_LABELS {
        fit.observe(&t, &format!("q{i}"));
    }
    assert!(fit.rows.iter().any(|r| r.qos == "other"));
    assert!(fit
        .rows
        .iter()
        .all(|r| r.qos != format!("q{}", MAX_QOS_LABELS - 1)));
}
