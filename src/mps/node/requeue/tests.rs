//! The requeue's decisions, on records as Slurm prints them.

use super::*;

/// One record of `scontrol -o show job` as 22.05 to 26.05 print it
/// (`slurm_sprint_job_info`), cut to the fields around the ones read.
fn shown_as(head: &str, name: &str, state: &str, restarts: u32, exc: &str, nodes: &str) -> String {
    format!(
        "{head} JobName={name} UserId=ben(1001) GroupId=ben(1001) MCS_label=N/A \
         Priority=1 Nice=0 Account=ben QOS=normal JobState={state} Reason=None \
         Dependency=(null) Requeue=1 Restarts={restarts} BatchFlag=1 Reboot=0 ExitCode=0:0 \
         Partition=mps AllocNode:Sid=login:1 ReqNodeList=(null) ExcNodeList={exc} \
         NodeList={nodes} BatchHost=gpu01 NumNodes=1 Command=(null) WorkDir=/home/ben"
    )
}

fn record(head: &str, name: &str, exc: &str) -> String {
    shown_as(head, name, "RUNNING", 0, exc, "gpu01")
}

fn job(state: &str, restarts: u32, exc: &str, nodes: &str) -> ShownJob {
    shown_job(7, &shown_as("JobId=7", "x", state, restarts, exc, nodes))
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_node_joins_the_jobs_own_exclusions() {
    let shown = shown_job(7, &record("JobId=7", "x", "(null)"));
    assert_eq!(shown.map(|s| s.excluded), Ok(None));
    assert_eq!(with_node(None, "gpu01"), ("gpu01".to_owned(), true));
    let own = shown_job(7, &record("JobId=7", "x", "gpu03,gpu[05-06]"));
    assert_eq!(
        own.map(|s| s.excluded),
        Ok(Some("gpu03,gpu[05-06]".to_owned()))
    );
    assert_eq!(
        with_node(Some("gpu03,gpu[05-06]"), "gpu01"),
        ("gpu03,gpu[05-06],gpu01".to_owned(), true)
    );
    // Excluded by the user already: nothing of gpushare's to take back.
    assert_eq!(
        with_node(Some("gpu01,gpu03"), "gpu01"),
        ("gpu01,gpu03".to_owned(), false)
    );
    assert_eq!(
        with_node(Some("gpu[00-02]"), "gpu01"),
        ("gpu[00-02]".to_owned(), false)
    );
}

#[test]
fn the_state_node_and_restarts_are_slurms_fields() {
    let shown = job("COMPLETING", 2, "gpu03", "gpu01");
    assert_eq!(shown.state, "COMPLETING");
    assert_eq!(shown.restarts, 2);
    assert_eq!(shown.nodes.as_deref(), Some("gpu01"));
    // A job name that forges the state run: which is Slurm's cannot be told.
    let forged = shown_as(
        "JobId=7",
        "x JobState=PENDING Reason=None",
        "COMPLETING",
        0,
        "(null)",
        "gpu01",
    );
    assert!(shown_job(7, &forged).is_err());
    let forged = shown_as(
        "JobId=7",
        "x Requeue=1 Restarts=0 BatchFlag=1 Reboot=0",
        "RUNNING",
        5,
        "(null)",
        "gpu01",
    );
    assert!(shown_job(7, &forged).is_err());
}

#[test]
fn the_last_task_of_an_array_is_named_as_its_task_not_the_array() {
    // Asked by the array's id (the last-started task keeps it), scontrol
    // lists every task; job 40 is task 2, the others are 41 and 42.
    let answer = [
        record("JobId=41 ArrayJobId=40 ArrayTaskId=0", "a", "gpu01"),
        record("JobId=42 ArrayJobId=40 ArrayTaskId=1", "a", "gpu01"),
        record(
            "JobId=40 ArrayJobId=40 ArrayTaskId=2 ArrayTaskThrottle=2",
            "a",
            "gpu02",
        ),
    ]
    .join("\n");
    let shown = shown_job(40, &answer).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        shown.name,
        JobName {
            job: 40,
            array: Some((40, 2))
        }
    );
    assert_eq!(shown.name.to_string(), "40_2");
    assert_eq!(shown.excluded.as_deref(), Some("gpu02"));
    let task = shown_job(42, &answer).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(task.name.to_string(), "40_1");
    // A plain job and a heterogeneous job's component keep their id.
    let het = record("JobId=9 HetJobId=8 HetJobOffset=1", "h", "(null)");
    assert_eq!(
        shown_job(9, &het).map(|s| s.name.to_string()),
        Ok("9".to_owned())
    );
    // The record of the pending tasks is no started task.
    let pending = record("JobId=50 ArrayJobId=50 ArrayTaskId=3-9%2", "a", "(null)");
    assert!(shown_job(50, &pending).is_err());
    assert!(shown_job(43, &answer).is_err());
}

#[test]
fn text_the_user_chose_never_passes_for_slurms_fields() {
    // A job name that holds ExcNodeList= comes before Slurm's field.
    let named = record("JobId=7", "ExcNodeList=foo", "(null)");
    assert_eq!(shown_job(7, &named).map(|s| s.excluded), Ok(None));
    let named = record("JobId=7", "x ExcNodeList=foo", "gpu03");
    assert_eq!(
        shown_job(7, &named).map(|s| s.excluded),
        Ok(Some("gpu03".to_owned()))
    );
    // The whole run of fields forged in the name: which is Slurm's
    // cannot be told, so nothing is acted on.
    let forged = record(
        "JobId=7",
        "x ReqNodeList=(null) ExcNodeList=foo NodeList=gpu01",
        "gpu03",
    );
    assert!(shown_job(7, &forged).is_err());
    // A name with a line break that starts a record of its own.
    let split = record("JobId=7", &record("x\nJobId=7", "y", "foo"), "gpu03");
    assert!(shown_job(7, &split).is_err());
    // A line break alone leaves the record's head without its fields.
    let broken = record("JobId=7", "x\ny", "gpu03");
    assert!(shown_job(7, &broken).is_err());
    // Another job's name cannot claim this job's id either.
    let other = record("JobId=8", "JobId=7", "foo");
    assert!(shown_job(7, &other).is_err());
    assert!(shown_job(7, "JobId=7x JobName=a").is_err());
}

#[test]
fn only_the_refused_run_still_on_this_node_is_requeued() {
    for state in ["RUNNING", "COMPLETING"] {
        assert_eq!(
            decide_requeue(
                &job(state, 0, "gpu03", "gpu01"),
                "gpu01",
                Some("FAILED"),
                Requeued::InComment(0),
                Elsewhere::MpsDaemon
            ),
            Requeue::Send {
                list: "gpu03,gpu01".to_owned(),
                added: true
            }
        );
    }
    // Cancelled and done, ended, or pending again (requeued by someone
    // else): left alone.
    for state in ["CANCELLED", "COMPLETED", "FAILED", "PENDING"] {
        let d = decide_requeue(
            &job(state, 0, "(null)", "gpu01"),
            "gpu01",
            None,
            Requeued::InComment(0),
            Elsewhere::Busy,
        );
        assert!(
            matches!(d, Requeue::LeaveAlone(ref w) if w.contains(state)),
            "{d:?}"
        );
    }
    // Cancelled by its user before its epilog: Slurm shows COMPLETING,
    // accounting tells.
    let d = decide_requeue(
        &job("COMPLETING", 0, "(null)", "gpu01"),
        "gpu01",
        Some("CANCELLED by 1007\n"),
        Requeued::InComment(0),
        Elsewhere::OtherUsers,
    );
    assert_eq!(
        d,
        Requeue::LeaveAlone(
            "job 7 was cancelled (accounting: CANCELLED by 1007): left alone".to_owned()
        )
    );
    // Started again elsewhere meanwhile.
    let d = decide_requeue(
        &job("RUNNING", 1, "(null)", "gpu02"),
        "gpu01",
        None,
        Requeued::InComment(0),
        Elsewhere::OtherUsers,
    );
    assert!(matches!(d, Requeue::LeaveAlone(_)), "{d:?}");
    // A two-node share that holds this node.
    assert!(matches!(
        decide_requeue(
            &job("COMPLETING", 0, "(null)", "gpu[01-02]"),
            "gpu02",
            None,
            Requeued::InComment(0),
            Elsewhere::Disabled
        ),
        Requeue::Send { added: true, .. }
    ));
}

#[test]
fn past_the_cap_the_share_fails_with_its_reason() {
    let completing = |restarts| job("COMPLETING", restarts, "(null)", "gpu01");
    let decide = |restarts, requeued| {
        decide_requeue(
            &completing(restarts),
            "gpu01",
            None,
            requeued,
            Elsewhere::MpsDaemon,
        )
    };
    assert!(matches!(
        decide(0, Requeued::InComment(MAX_REQUEUES - 1)),
        Requeue::Send { .. }
    ));
    let d = decide(MAX_REQUEUES, Requeued::InComment(MAX_REQUEUES));
    assert!(
        matches!(d, Requeue::Capped(ref w) if w.contains("requeued 3 times already, by gpushare")),
        "{d:?}"
    );
    // Requeued by preemption, a node's failure or its user: only
    // gpushare's own requeues count.
    assert!(matches!(
        decide(7, Requeued::InComment(1)),
        Requeue::Send { .. }
    ));
    // Its AdminComment a site tool's (or unread): this node's own count,
    // never Slurm's restarts, which preemptions make too.
    assert!(matches!(
        decide(7, Requeued::OnThisNode(0)),
        Requeue::Send { .. }
    ));
    let d = decide(0, Requeued::OnThisNode(MAX_REQUEUES));
    assert!(
        matches!(d, Requeue::Capped(ref w) if w.contains("requeued 3 times already, by gpushare from this node")),
        "{d:?}"
    );
    // The node's own state refused it (another user's server, a GPU set
    // aside, sharing disabled): never capped, however often.
    for why in [
        Elsewhere::OtherUsers,
        Elsewhere::GpuFailed,
        Elsewhere::Disabled,
    ] {
        let d = decide_requeue(&completing(9), "gpu01", None, Requeued::InComment(9), why);
        assert!(matches!(d, Requeue::Send { .. }), "{why:?}: {d:?}");
    }
}

#[test]
fn a_rewritten_comment_never_starts_the_count_again() {
    let ours = requeue_words("gpu01", Some(2), Elsewhere::MpsDaemon);
    assert_eq!(counted_requeues(Some(&ours)), Some(2));
    assert_eq!(counted_requeues(Some(&format!("site; {ours}"))), Some(2));
    // Never requeued, gpushare's words gone (a site tool replaced the
    // comment), or a site tool's comment (gpushare writes no words
    // there): none in the comment; the node's own count stands.
    assert_eq!(counted_requeues(None), None);
    assert_eq!(counted_requeues(Some("")), None);
    assert_eq!(counted_requeues(Some("site")), None);
    assert_eq!(counted_requeues(Some("JS1:H4sIAAAA")), None);
    assert_eq!(
        counted_requeues(Some("0f8fad5b-d9cb-469f-a165-70867728950e")),
        None
    );
    // gpushare's own words never make a comment a site tool's.
    for why in Elsewhere::ALL {
        for n in [None, Some(1)] {
            let words = requeue_words("gpu01", n, why);
            assert_eq!(
                crate::shared::admin_comment::site_tools(&words),
                None,
                "{words}"
            );
        }
    }
    // Uncounted words count nothing, counted ones their number.
    let free = requeue_words("gpu01", None, Elsewhere::OtherUsers);
    assert_eq!(counted_requeues(Some(&free)), Some(0));
    assert_eq!(counted_requeues(Some(&format!("{free}; {ours}"))), Some(2));
}

#[test]
fn gpushares_requeues_are_counted_in_the_admin_comment_across_lifts() {
    let why = Elsewhere::MpsDaemon;
    let first = requeue_words("gpu01", Some(1), why);
    assert_eq!(requeues_in(""), 0);
    assert_eq!(requeues_in("site: project 9"), 0);
    assert_eq!(requeues_in(&comment_with(Some("site"), &first)), 1);
    // The lift gives the site's words back and leaves the count.
    let entry = Exclusion::new(true, 5, Some(first.clone()), why);
    let pending = job("PENDING", 1, "gpu01", "(null)");
    let lifted = decide_lift(&pending, "gpu01", &entry, Some(&format!("site; {first}")));
    let Lift::Update {
        comment: Some(after),
        ..
    } = lifted
    else {
        panic!("{lifted:?}")
    };
    assert_eq!(after, "site; gpushare: requeues so far: 1");
    assert_eq!(requeues_in(&after), 1);
    // The next requeue's words carry the count on, in place of the tally.
    let second = requeue_words("gpu02", Some(2), why);
    let both = comment_with(Some(&after), &second);
    assert_eq!(both, format!("site; {second}"));
    assert_eq!(requeues_in(&both), 2);
    // Words on two nodes at once: the highest count; an older gpushare's
    // unnumbered words count one each.
    let third = requeue_words("gpu03", Some(3), why);
    assert_eq!(requeues_in(&format!("{second}; {third}")), 3);
    let old = "gpushare: requeued from gpu01, x; kept off gpu01 until a share ends there";
    assert_eq!(requeues_in(&format!("{old}; {old}")), 2);
    // A site's text that only looks like a tally is no count.
    assert_eq!(requeues_in("gpushare: requeues so far: 2x"), 0);
}

/// A job sent off twice for another user's server (counted nothing),
/// given back, then started without its Prolog: its count is still 0,
/// not its 2 restarts. A lift that left no words of gpushare's made the
/// next epilog take `Restarts=` for the count (`requeue 3 of 3` at the
/// first counted requeue; the next one failed the job).
#[test]
fn a_lift_after_uncounted_requeues_leaves_a_count_of_none() {
    let free = requeue_words("gpu01", None, Elsewhere::OtherUsers);
    let entry = Exclusion::new(true, 5, Some(free.clone()), Elsewhere::OtherUsers);
    let pending = job("PENDING", 2, "gpu01", "(null)");
    for (now, site) in [
        (free.clone(), None),
        (format!("site; {free}"), Some("site")),
    ] {
        let lifted = decide_lift(&pending, "gpu01", &entry, Some(&now));
        let Lift::Update {
            comment: Some(after),
            ..
        } = &lifted
        else {
            panic!("{lifted:?}")
        };
        let tally = "gpushare: requeues so far: 0";
        let want = site.map_or_else(|| tally.to_owned(), |s| format!("{s}; {tally}"));
        assert_eq!(after, &want);
        assert_eq!(counted_requeues(Some(after)), Some(0), "{after}");
        let shown = job("COMPLETING", 2, "gpu02", "gpu02");
        let d = decide_requeue(
            &shown,
            "gpu02",
            None,
            Requeued::InComment(0),
            Cause::PrologMissed,
        );
        assert_eq!(d, Requeue::Again);
    }
}

#[test]
fn only_the_node_gpushare_added_is_taken_back() {
    let ours = &requeue_words("gpu01", Some(1), Elsewhere::Busy);
    let entry = Exclusion::new(true, 5, Some(ours.to_owned()), Elsewhere::Busy);
    // The user added gpu03 meanwhile: it stays.
    let pending = job("PENDING", 1, "gpu01,gpu03", "(null)");
    let site = format!("site: project 9; {ours}");
    assert_eq!(
        decide_lift(&pending, "gpu01", &entry, Some(&site)),
        Lift::Update {
            list: Some("gpu03".to_owned()),
            comment: Some("site: project 9; gpushare: requeues so far: 1".to_owned())
        }
    );
    // gpushare's alone: both emptied.
    let alone = job("PENDING", 1, "gpu01", "(null)");
    assert_eq!(
        decide_lift(&alone, "gpu01", &entry, Some(ours)),
        Lift::Update {
            list: Some(String::new()),
            comment: Some("gpushare: requeues so far: 1".to_owned())
        }
    );
    // Rewritten as a range by the user: only gpu01 leaves it.
    let ranged = job("PENDING", 1, "gpu[00-02]", "(null)");
    assert_eq!(
        decide_lift(&ranged, "gpu01", &entry, None),
        Lift::Update {
            list: Some("gpu00,gpu02".to_owned()),
            comment: None
        }
    );
    // Already removed by the user or an admin, the comment rewritten:
    // nothing is written.
    let removed = job("PENDING", 1, "gpu03", "(null)");
    assert!(matches!(
        decide_lift(&removed, "gpu01", &entry, Some("site's own")),
        Lift::Nothing(_)
    ));
    // The user had excluded the node: never taken out.
    let theirs = Exclusion {
        added: false,
        ..entry.clone()
    };
    assert_eq!(
        decide_lift(&pending, "gpu01", &theirs, None),
        Lift::Nothing(
            "job 7: gpu01 no longer in its ExcNodeList (gpu01,gpu03) nor gpushare's words in \
             its AdminComment: nothing to give back"
                .to_owned()
        )
    );
    // Ended for good: nothing to give back, the record goes.
    for state in ["COMPLETED", "CANCELLED", "FAILED", "TIMEOUT"] {
        let d = decide_lift(&job(state, 1, "gpu01", "gpu02"), "gpu01", &entry, None);
        assert!(matches!(d, Lift::Nothing(_)), "{d:?}");
    }
    // Running elsewhere (Slurm keeps its ExcNodeList as it is while it
    // runs): the record stays, so that after a later requeue (a
    // preemption) the job may come back here.
    for state in ["RUNNING", "COMPLETING", "SUSPENDED"] {
        let d = decide_lift(&job(state, 1, "gpu01", "gpu02"), "gpu01", &entry, None);
        assert!(matches!(d, Lift::Later(_)), "{state}: {d:?}");
    }
}

/// A node whose ledger answers `fits`, in boot `b1` with setup `s1`, a
/// share on GPU 0.
fn node_now<'a>(fits: &'a dyn Fn(Option<u32>, u32) -> bool, disabled: bool) -> NodeNow<'a> {
    NodeNow {
        boot: "b1",
        setup: "s1",
        disabled,
        mps_unbooked: false,
        fits,
        failed: &[],
        shared: &[0],
    }
}

fn kept_for(cause: Elsewhere) -> Exclusion {
    Exclusion {
        uid: Some(1001),
        units: 30,
        boot: "b1".into(),
        setup: "s1".into(),
        ..Exclusion::new(true, 5, None, cause)
    }
}

#[test]
fn an_exclusion_lifts_when_its_cause_is_gone_never_before() {
    let no_room = |_: Option<u32>, _: u32| false;
    let room = |uid: Option<u32>, units: u32| uid == Some(1001) && units == 30;
    // The node's state unchanged: every cause stays, whatever the time.
    for cause in Elsewhere::ALL {
        assert_eq!(
            cause_gone(&kept_for(cause), &node_now(&no_room, false)),
            None
        );
    }
    // Room for this user's share: what the node's state refused is gone.
    for cause in [
        Elsewhere::OtherUsers,
        Elsewhere::GpuFailed,
        Elsewhere::Disabled,
        Elsewhere::Busy,
    ] {
        assert!(cause_gone(&kept_for(cause), &node_now(&room, false)).is_some());
        // Still disabled: nothing comes back.
        assert_eq!(cause_gone(&kept_for(cause), &node_now(&room, true)), None);
    }
    // A failed daemon: room alone mends nothing; a new boot or a changed
    // setup may have.
    let daemon = kept_for(Elsewhere::MpsDaemon);
    assert_eq!(cause_gone(&daemon, &node_now(&room, false)), None);
    let rebooted = NodeNow {
        boot: "b2",
        ..node_now(&room, false)
    };
    assert!(cause_gone(&daemon, &rebooted).is_some());
    let mended = NodeNow {
        setup: "s2",
        ..node_now(&room, false)
    };
    assert!(cause_gone(&daemon, &mended).is_some());
    // Slurm books no mps here any more: every exclusion goes.
    let unbooked = NodeNow {
        mps_unbooked: true,
        ..node_now(&no_room, true)
    };
    for cause in Elsewhere::ALL {
        assert!(cause_gone(&kept_for(cause), &unbooked).is_some());
    }
    // Where Slurm chose a GPU set aside, it chooses it again while it is:
    // room elsewhere on the node brings nothing back; that GPU does.
    let slurms = Exclusion {
        gpu: Some(2),
        ..kept_for(Elsewhere::GpuFailed)
    };
    let still_aside = NodeNow {
        failed: &[2],
        ..node_now(&room, false)
    };
    assert_eq!(cause_gone(&slurms, &still_aside), None);
    let other_aside = NodeNow {
        failed: &[1],
        ..node_now(&no_room, false)
    };
    assert!(cause_gone(&slurms, &other_aside).is_some_and(|w| w.contains("GPU 2")));
    // A private job given a GPU a share held: back when that GPU carries
    // none, whatever room or switch the node has; recorded without its
    // GPU, when no GPU carries one.
    let private = Exclusion {
        gpu: Some(1),
        ..kept_for(Elsewhere::SharedGpu)
    };
    for disabled in [false, true] {
        let still_shared = NodeNow {
            shared: &[1, 2],
            ..node_now(&room, disabled)
        };
        assert_eq!(cause_gone(&private, &still_shared), None);
        let freed = NodeNow {
            shared: &[0, 2],
            ..node_now(&no_room, disabled)
        };
        assert!(cause_gone(&private, &freed).is_some_and(|w| w.contains("GPU 1")));
    }
    let unnamed = kept_for(Elsewhere::SharedGpu);
    assert_eq!(cause_gone(&unnamed, &node_now(&room, false)), None);
    let none_shared = NodeNow {
        shared: &[],
        ..node_now(&no_room, false)
    };
    assert!(cause_gone(&unnamed, &none_shared).is_some());
    // An older gpushare's record, without its cause: lifted at once.
    let old = Exclusion {
        cause: None,
        ..kept_for(Elsewhere::OtherUsers)
    };
    assert!(cause_gone(&old, &node_now(&no_room, false)).is_some());
}

#[test]
fn room_is_the_prologs_own_choice() {
    use crate::mps::ledger::{LedgerState, ShareRecord};
    use crate::mps::placement::ServerRule;
    let mut state = LedgerState::new();
    // ann (1000) holds 10 units on each of two GPUs.
    for (job, gpu) in [(1, 0), (2, 1)] {
        state.insert_share(ShareRecord {
            job,
            uid: 1000,
            user: "ann".into(),
            gpu,
            units: 10,
            since: 0,
            placed_by_slurm: false,
            memory_mib: None,
            clients: None,
            sluid: None,
        });
    }
    let refuse = ServerRule {
        multi_user: false,
        refuse_other_users: true,
        max_clients: 48,
    };
    let fits = |state: &LedgerState, failed: &[u32], uid, units| {
        fits_now(state, failed, (2, 100), refuse, (uid, units))
    };
    // ben's 30 units: only beside ann's servers.
    assert!(!fits(&state, &[], Some(1001), 30));
    // ann's own: beside her own server.
    assert!(fits(&state, &[], Some(1000), 30));
    assert!(!fits(&state, &[0, 1], Some(1000), 30));
    // Once ann's share on GPU 1 ends, ben fits there.
    state.remove_job(2);
    assert!(fits(&state, &[], Some(1001), 30));
    assert!(!fits(&state, &[1], Some(1001), 30));
    // Loads unknown: nothing fits.
    assert!(!fits_now(
        &LedgerState::lost("x".into()),
        &[],
        (2, 100),
        refuse,
        (Some(1001), 1)
    ));
}

#[test]
fn node_lists_are_read_as_slurm_writes_them() {
    assert_eq!(items("gpu[01,03],gpu05"), vec!["gpu[01,03]", "gpu05"]);
    assert_eq!(names_node("gpu[01,03],gpu05", "gpu03"), Some(true));
    assert_eq!(names_node("gpu[01,03],gpu05", "gpu02"), Some(false));
    assert_eq!(names_node("gpu[01-03]", "gpu2"), Some(false));
    assert_eq!(names_node("rack[1-2]-gpu[1-2]", "rack1-gpu1"), Some(true));
    // Past any cluster's size, or a number wider than a name: not read
    // (nothing is expanded).
    assert_eq!(names_node("n[0-18446744073709551615]", "n1"), None);
    let wide = format!("n[{}-{}]", "0".repeat(100_000), "9".repeat(100_000));
    assert_eq!(names_node(&wide, "n1"), None);
    assert_eq!(without_node("gpu01", "gpu01"), Some(String::new()));
    assert_eq!(
        without_node("gpu03,gpu01", "gpu01"),
        Some("gpu03".to_owned())
    );
    assert_eq!(without_node("gpu03", "gpu01"), None);
    assert_eq!(
        without_node("a[1-3],gpu05", "a2"),
        Some("a1,a3,gpu05".to_owned())
    );
}

#[test]
fn the_sites_admin_comment_is_kept() {
    let ours = "gpushare: requeued from gpu01, x";
    assert_eq!(comment_with(None, ours), ours);
    assert_eq!(comment_with(Some(""), ours), ours);
    let both = comment_with(Some("site: keep"), ours);
    assert_eq!(both, format!("site: keep; {ours}"));
    assert_eq!(comment_without(&both, ours), Some("site: keep".to_owned()));
    assert_eq!(comment_without(ours, ours), Some(String::new()));
    // The admin wrote after gpushare's words: theirs stays.
    assert_eq!(
        comment_without(&format!("{ours}; admin: later"), ours),
        Some("admin: later".to_owned())
    );
    assert_eq!(comment_without("site: rewritten", ours), None);
}

#[test]
fn the_record_reads_back_with_its_causes() {
    let records = Exclusions(
        [
            (
                7,
                Exclusion {
                    uid: Some(1001),
                    units: 30,
                    boot: "b1".into(),
                    setup: "/usr/bin/nvidia-cuda-mps-control 10 20; none; no driver".into(),
                    ..Exclusion::new(
                        true,
                        100,
                        Some("gpushare: requeued from gpu01, x; y".to_owned()),
                        Elsewhere::MpsDaemon,
                    )
                },
            ),
            (9, Exclusion::new(false, 700, None, Elsewhere::Disabled)),
            (
                11,
                Exclusion {
                    gpu: Some(3),
                    ..Exclusion::new(true, 800, None, Elsewhere::GpuFailed)
                },
            ),
        ]
        .into_iter()
        .collect(),
    );
    let text = records.to_text();
    assert_eq!(
        text,
        "7\t1\t100\tgpushare: requeued from gpu01, x; y\tmps_daemon\t1001\t30\tb1\t\
         /usr/bin/nvidia-cuda-mps-control 10 20; none; no driver\t-\n\
         9\t0\t700\t\tdisabled\t-\t0\t\t\t-\n\
         11\t1\t800\t\tgpu_failed\t-\t0\t\t\t3\n"
    );
    assert_eq!(Exclusions::parse(&text), records);
    // gpushare 0.3's lines end with the setup: no GPU of Slurm's.
    let old = Exclusions::parse("11\t1\t800\t\tgpu_failed\t-\t0\tb1\ts1\n");
    assert_eq!(old.0.get(&11).map(|e| e.gpu), Some(None));
    // gpushare 0.2's lines: no cause (lifted at the next look).
    let older = Exclusions::parse("7\t1\t100\tgpushare: requeued from gpu01, x\n");
    assert_eq!(
        older.0.get(&7).map(|e| (e.added, e.cause)),
        Some((true, None))
    );
    // gpushare 0.1's lines: added by gpushare, of unknown age and cause.
    let old = Exclusions::parse("7 -\n9 gpu[03-04]\nx y\n7\n");
    assert_eq!(old.0.keys().copied().collect::<Vec<_>>(), vec![7, 9]);
    assert!(old
        .0
        .values()
        .all(|e| e.added && e.since == 0 && e.cause.is_none()));
}

#[test]
fn a_mark_names_its_boot_and_run_only() {
    let marked = Marked {
        why: Cause::Refused(Elsewhere::Disabled),
        uid: 1001,
        units: 30,
        boot: "b1".into(),
        run: Some(2),
        gpu: Some(3),
    };
    assert_eq!(Marked::parse(&marked.text()), Some(marked.clone()));
    assert!(marked.names_run("b1", 2));
    // The node crashed (another boot), or the job came back for
    // another run without this mark's epilog: not this run's.
    assert!(!marked.names_run("b2", 2));
    assert!(!marked.names_run("b1", 3));
    let unknown_run = Marked {
        run: None,
        gpu: None,
        ..marked
    };
    assert_eq!(
        Marked::parse(&unknown_run.text()),
        Some(unknown_run.clone())
    );
    assert!(unknown_run.names_run("b1", 7));
    // gpushare 0.3's marks end with the run: no GPU of Slurm's.
    let old = Marked::parse("disabled 1001 30 b1 2");
    assert_eq!(old.map(|m| (m.run, m.gpu)), Some((Some(2), None)));
    // gpushare 0.2's marks (the word alone) name no run.
    assert_eq!(Marked::parse("other_users"), None);
    assert_eq!(Marked::parse(""), None);
}

#[test]
fn a_stale_mark_is_cleared_and_a_fresh_one_taken_once() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    mark(dir.path(), 7, Elsewhere::Busy, (1001, 5), (Some(0), None))
        .unwrap_or_else(|e| panic!("{e}"));
    clear_mark(dir.path(), 7);
    assert!(take_mark(dir.path(), 7).is_none());
    mark(dir.path(), 7, Elsewhere::Busy, (1001, 5), (Some(1), None))
        .unwrap_or_else(|e| panic!("{e}"));
    let taken = take_mark(dir.path(), 7).map(|m| m.map(|m| (m.why, m.run)));
    assert_eq!(taken, Some(Ok((Cause::Refused(Elsewhere::Busy), Some(1)))));
    assert!(take_mark(dir.path(), 7).is_none());
}

/// A share placed on a temporary node's ledger, another refused there
/// (the prolog's note), and a third with neither: Slurm gave the node its
/// share without running the Prolog.
#[test]
fn only_a_share_with_no_placement_nor_refusal_missed_its_prolog() {
    let dir = crate::mps::ledger::tests::TempDir::new();
    let ledger = dir.ledger();
    crate::mps::ledger::tests::place(&ledger, 1, 30);
    let note = ledger.dir().join(crate::mps::node::notes::refusal_name(2));
    std::fs::write(&note, "refused").unwrap_or_else(|e| panic!("{e}"));
    assert!(!prolog_missed(&ledger, 1, true));
    assert!(!prolog_missed(&ledger, 2, true));
    assert!(prolog_missed(&ledger, 3, true));
    // Slurm gave it no share: nothing was to be placed.
    assert!(!prolog_missed(&ledger, 3, false));
    for job in [1, 2] {
        assert_eq!(mark_prolog_missed(&ledger, job, 1001, true), None);
        assert!(take_mark(ledger.dir(), job).is_none());
    }
    let said = mark_prolog_missed(&ledger, 3, 1001, true).unwrap_or_default();
    assert!(said.contains("its epilog requeues it"), "{said}");
    let taken = take_mark(ledger.dir(), 3).map(|m| m.map(|m| (m.why, m.uid, m.run)));
    assert_eq!(taken, Some(Ok((Cause::PrologMissed, 1001, None))));
    // Its run is not named: any run of this boot is its epilog's.
    let marked = Marked {
        why: Cause::PrologMissed,
        uid: 1001,
        units: 0,
        boot: "b1".into(),
        run: None,
        gpu: None,
    };
    assert_eq!(Marked::parse(&marked.text()), Some(marked.clone()));
    assert!(marked.names_run("b1", 4) && !marked.names_run("b2", 4));
}

/// A job that asked for its own MPS daemon: missed its Prolog only where
/// the ledger holds neither that daemon's record nor a refusal of it.
#[test]
fn only_a_private_job_with_no_record_nor_refusal_missed_its_prolog() {
    let dir = crate::mps::ledger::tests::TempDir::new();
    let ledger = dir.ledger();
    let record = crate::mps::private::PrivateRecord {
        uid: 1001,
        gpus: vec![1],
        threads: None,
    };
    crate::mps::node::notes::write_record(&ledger, 1, &record).unwrap_or_else(|e| panic!("{e}"));
    let note = ledger.dir().join(crate::mps::node::notes::refusal_name(2));
    std::fs::write(&note, "refused").unwrap_or_else(|e| panic!("{e}"));
    for job in [1, 2] {
        assert_eq!(mark_private_prolog_missed(&ledger, job, 1001), None);
        assert!(take_mark(ledger.dir(), job).is_none());
    }
    let said = mark_private_prolog_missed(&ledger, 3, 1001).unwrap_or_default();
    assert!(said.contains("its epilog requeues it"), "{said}");
    let taken = take_mark(ledger.dir(), 3).map(|m| m.map(|m| (m.why, m.uid)));
    assert_eq!(taken, Some(Ok((Cause::PrologMissed, 1001))));
}

#[test]
fn a_run_without_its_prolog_is_requeued_as_it_is_and_counted() {
    let completing = |restarts| job("COMPLETING", restarts, "gpu03", "gpu01");
    let decide =
        |requeued| decide_requeue(&completing(1), "gpu01", None, requeued, Cause::PrologMissed);
    // Kept off no node: its ExcNodeList stays as the user made it.
    assert_eq!(decide(Requeued::InComment(0)), Requeue::Again);
    assert_eq!(
        decide(Requeued::InComment(MAX_REQUEUES - 1)),
        Requeue::Again
    );
    // Where no Prolog runs at all, the cap fails it, naming the Prolog.
    let d = decide(Requeued::InComment(MAX_REQUEUES));
    assert!(
        matches!(d, Requeue::Capped(ref w) if w.contains("without the Prolog of the node")
            && w.contains("Prolog=gpu-mps-prolog")),
        "{d:?}"
    );
    // Cancelled by its user, or started elsewhere meanwhile: left alone.
    let d = decide_requeue(
        &completing(1),
        "gpu01",
        Some("CANCELLED by 1001"),
        Requeued::InComment(0),
        Cause::PrologMissed,
    );
    assert!(matches!(d, Requeue::LeaveAlone(_)), "{d:?}");
    let d = decide_requeue(
        &completing(1),
        "gpu02",
        None,
        Requeued::InComment(0),
        Cause::PrologMissed,
    );
    assert!(matches!(d, Requeue::LeaveAlone(_)), "{d:?}");
    // Its words count as gpushare's other requeues do, toward one cap.
    let first = requeue_words("gpu01", Some(1), Elsewhere::MpsDaemon);
    let second = prolog_missed_words("gpu01", 2);
    assert!(second.starts_with(&format!(
        "{COMMENT_MARK}gpu01 (requeue 2 of {MAX_REQUEUES}), "
    )));
    assert!(!second.contains(['"', '\'', '\t', '\n']), "{second}");
    let comment = comment_with(Some(&comment_with(None, &first)), &second);
    assert_eq!(requeues_in(&comment), 2);
    assert_eq!(counted_requeues(Some(&comment)), Some(2));
    // A lock held past the wait is never held against the job.
    assert!(!Elsewhere::Busy.counts());
    assert!(matches!(
        decide_requeue(
            &completing(2),
            "gpu01",
            None,
            Requeued::InComment(3),
            Elsewhere::Busy
        ),
        Requeue::Send { .. }
    ));
    assert_eq!(
        decide_requeue(
            &completing(2),
            "gpu01",
            None,
            Requeued::InComment(3),
            Elsewhere::MpsDaemon
        ),
        Requeue::Capped(
            "job 7 was requeued 3 times already, by gpushare (gpushare requeues a job at most 3 \
             times): not requeued again, it fails with its refusal"
                .to_owned()
        )
    );
    for cause in [Cause::PrologMissed, Cause::Refused(Elsewhere::Disabled)] {
        assert_eq!(Cause::from_word(cause.word()), Some(cause));
    }
    assert!(Cause::PrologMissed.counts() && !Cause::Refused(Elsewhere::OtherUsers).counts());
}

#[test]
fn the_nodes_own_count_stands_where_the_comment_cannot_hold_it() {
    // Where gpushare may write the comment, its count there, or this
    // node's where higher (a tool erased gpushare's words).
    assert_eq!(Requeued::of(Some(2), true, 1), Requeued::InComment(2));
    assert_eq!(Requeued::of(None, true, 2), Requeued::InComment(2));
    // A site tool's comment: this node's count alone.
    assert_eq!(Requeued::of(None, false, 1), Requeued::OnThisNode(1));
    let mut counts = RequeueCounts::default();
    assert_eq!(counts.of(7), 0);
    counts.bump(7, 1, 1_000);
    counts.bump(7, 1, 1_001);
    assert_eq!(counts.of(7), 2);
    // Made under a higher count (the comment's), it carries that on.
    counts.bump(8, 3, 1_002);
    assert_eq!(counts.of(8), 3);
    let text = counts.to_text();
    assert_eq!(text, "7\t2\t1001\n8\t3\t1002\n");
    assert_eq!(RequeueCounts::parse(&text), counts);
    assert_eq!(
        RequeueCounts::parse("7\t2\nx\t1\t1\n9\t1\t5\textra\n"),
        RequeueCounts::default()
    );
    // Old lines go; past the most, the oldest first.
    counts.bump(9, 1, 1_002 + counts::KEPT_FOR + 10);
    assert_eq!(counts.0.keys().copied().collect::<Vec<_>>(), vec![9]);
    let mut many = RequeueCounts::default();
    for job in 0..=u32::try_from(counts::MOST_JOBS).unwrap_or(u32::MAX) {
        many.bump(job, 1, u64::from(job) + 1);
    }
    assert_eq!(many.0.len(), counts::MOST_JOBS);
    assert_eq!(many.of(0), 0);
}
