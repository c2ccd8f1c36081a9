//! The node's refusals as the users' guide and the users' page tell them
//! (`shared::node_refusals`): each thing the table quotes is in the text
//! the node writes for it, each refusal a user can meet has its row, and
//! the guide holds the table as it is made; the guide's words on a job
//! requeued off a node are gpushare's `AdminComment` words.

use super::prolog::prolog;
use super::prolog::tests::{no_squeue, outcome};
use super::report::{busy_refusal, PrologOutcome};
use super::requeue::{requeue_words, Elsewhere, COMMENT_MARK, MAX_REQUEUES};
use super::serve::unserved_refusal;
use super::setup::tests::temp_node;
use super::task::tests::{alice_and_bob_on_gpu_0, banner_of};
use super::trust::tests::share_env;
use crate::mps::config::missing_conf_refusal;
use crate::mps::disabled::Disabled;
use crate::mps::placement::PlacementError;
use crate::shared::booking::MpsBooking;
use crate::shared::node_refusals::{markdown_table, NODE_REFUSALS};

const GUIDE: &str = include_str!("../../../docs/users-guide.md");

/// Each text a user can meet, by what it is.
fn texts() -> Vec<(&'static str, String)> {
    let refused = |o: PrologOutcome| match o {
        PrologOutcome::Refused { text, .. } => text,
        other => panic!("not refused: {other:?}"),
    };
    let booking = MpsBooking {
        gpu_types: vec!["a40".into()],
        ..MpsBooking::default()
    };
    let run = |node: &super::Node, env, booking: &MpsBooking| {
        refused(
            prolog(node, &env, booking, no_squeue)
                .unwrap_or_else(|e| panic!("{e}"))
                .outcome,
        )
    };
    let mut out = Vec::new();

    let (mut node, _dir) = temp_node(Some(1600));
    node.disabled = Some(Disabled {
        since: 1,
        reason: "maintenance".into(),
    });
    out.push(("disabled", refused(outcome(&node, &share_env(1, 50)))));
    node.disabled = None;
    node.set_mig_minors(&[]);
    node.cfg.gpu_devices = Some(
        (0..4)
            .map(|i| std::path::PathBuf::from(format!("/dev/nvidia{i}")))
            .collect(),
    );
    node.set_mig_minors(&[2]);
    out.push(("mig", run(&node, share_env(2, 50), &booking)));
    node.set_mig_minors(&[]);
    let (node, _dir2) = temp_node(None);
    let v2 = MpsBooking {
        cgroup_v2: true,
        ..booking.clone()
    };
    out.push(("cgroup_v2", run(&node, share_env(3, 50), &v2)));
    let (node, _dir3) = temp_node(Some(1600));
    out.push(("size", run(&node, share_env(4, 500), &booking)));

    for error in [
        PlacementError::OnlyBesideOtherUsers { units: 50 },
        PlacementError::GpuFailed {
            gpus: vec![1],
            reasons: "XID 79".into(),
        },
        PlacementError::NoGpuHasRoom {
            units: 60,
            units_per_gpu: 100,
            most_free_on_one_gpu: 50,
            free_in_total: 150,
            shareable_gpus: 3,
            whole_gpus: 1,
        },
    ] {
        out.push((error.reason(), error.to_string()));
    }
    out.push((
        "mps_daemon",
        unserved_refusal("GPU 1's MPS daemon could not be started: it exited at once"),
    ));
    let busy = crate::mps::lock_wait::Busy {
        what: crate::mps::ledger::LOCK_WHAT.to_owned(),
        path: "/run/gpu-mps/lock".into(),
        waited: crate::mps::lock_wait::LOCK_WAIT,
    };
    out.push(("busy", busy_refusal(&busy)));
    out.push((
        "no_config",
        missing_conf_refusal(5, &["/etc/slurm/gpu_mps.conf".into()]),
    ));
    // OtherUsers=queue: bob's share beside alice's, as his banner says.
    let (node, _dir4) = alice_and_bob_on_gpu_0();
    let banner = banner_of(&node, 2);
    out.push(("queue", banner));
    out
}

/// Whether `text` holds each of `says`, in order.
fn says_all(text: &str, says: &[&str]) -> bool {
    let mut rest = text;
    says.iter().all(|s| match rest.find(s) {
        Some(at) => {
            rest = &rest[at + s.len()..];
            true
        }
        None => false,
    })
}

#[test]
fn each_row_of_the_users_table_is_what_the_node_says() {
    let texts = texts();
    for row in NODE_REFUSALS {
        assert!(
            texts.iter().any(|(_, t)| says_all(t, row.says)),
            "no node text says {:?}:\n{texts:#?}",
            row.says
        );
    }
    for (what, text) in &texts {
        assert!(
            NODE_REFUSALS.iter().any(|r| says_all(text, r.says)),
            "the users' table has no row for {what}: {text}"
        );
    }
    // Where the node knows its type, the whole GPUs it suggests are typed.
    for (what, text) in &texts {
        assert!(
            !text.contains("--gres=gpu:1") && !text.contains("--gres=gpu:N"),
            "{what}: an untyped request suggested: {text}"
        );
    }
    let size = texts.iter().find(|(w, _)| *w == "size").map(|(_, t)| t);
    assert!(
        size.is_some_and(|t| t.ends_with("of this node's type instead: --gres=gpu:a40:5")),
        "{size:?}"
    );
}

#[test]
fn the_guide_holds_the_table_and_gpushares_requeue_words() {
    let table = markdown_table();
    assert!(
        GUIDE.contains(&table),
        "docs/users-guide.md's node table differs; it is:\n{table}"
    );
    let words = requeue_words("gpu01", Some(1), Elsewhere::OtherUsers);
    assert!(words.starts_with(COMMENT_MARK));
    let guide = GUIDE
        .replace('`', "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for said in [
        format!("AdminComment, gpushare: requeued from NODE (requeue 1 of {MAX_REQUEUES}), ..."),
        format!("(or (not counted toward the {MAX_REQUEUES}))"),
        "kept off NODE until ...".to_owned(),
        "ExcNodeList=NODE".to_owned(),
        format!("at most {MAX_REQUEUES} times"),
    ] {
        assert!(guide.contains(&said), "the users' guide lacks: {said}");
    }
    let free = requeue_words("gpu01", None, Elsewhere::Disabled);
    for (w, count) in [
        (&words, "(requeue 1 of 3), "),
        (&free, "(not counted toward the 3), "),
    ] {
        let w = w.replace("gpu01", "NODE");
        assert!(
            w.starts_with(&format!("gpushare: requeued from NODE {count}"))
                && w.contains("; kept off NODE until "),
            "{w}"
        );
    }
    // Each cause says what must change, in the guide's words.
    for why in Elsewhere::ALL {
        let until = why.until();
        assert!(
            !until.is_empty() && !until.contains(['\t', '\n']),
            "{until}"
        );
    }
}
