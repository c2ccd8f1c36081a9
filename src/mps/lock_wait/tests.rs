//! The bounded wait: a lock held past the bound is a [`Busy`] that names
//! it, one released in time is taken, and a waiter given up on never keeps
//! the lock from the next.

use super::*;

/// The lock file of a test, and another open file description of it that
/// holds it exclusive, as another process would.
fn held_elsewhere() -> (tempfile::TempDir, PathBuf, File) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("lock");
    let other = open_lock(&path).unwrap_or_else(|e| panic!("{e}"));
    other.lock().unwrap_or_else(|e| panic!("{e}"));
    (dir, path, other)
}

fn taken(result: Result<Held, LockError>) -> Held {
    result.unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_lock_held_past_the_bound_is_busy_and_named() {
    let (_dir, path, _other) = held_elsewhere();
    let limit = Duration::from_millis(200);
    let what = "the test's lock";
    match lock(&path, what, Mode::Exclusive, LockWait::each(limit)) {
        Err(LockError::Busy(busy)) => {
            assert_eq!(
                (busy.what.as_str(), busy.path.as_path()),
                (what, path.as_path())
            );
            assert!(busy.waited >= limit, "{busy:?}");
            let text = busy.to_string();
            assert!(
                text.starts_with(&format!("{what} ({}) stayed held", path.display()))
                    && text.contains(" s this program waited for it"),
                "{text}"
            );
        }
        other => panic!("not busy: {other:?}"),
    }
    // Shared waits for an exclusive holder as well.
    let shared = lock(&path, what, Mode::Shared, LockWait::each(limit));
    assert!(matches!(shared, Err(LockError::Busy(_))), "{shared:?}");
}

#[test]
fn a_lock_released_within_the_bound_is_taken() {
    let (_dir, path, other) = held_elsewhere();
    let (told, heard) = mpsc::channel();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            // Released once the waiter waits (its first try failed).
            let _ = heard.recv();
            std::thread::sleep(Duration::from_millis(50));
            drop(other);
        });
        let _ = told.send(());
        let held = taken(lock(
            &path,
            "the test's lock",
            Mode::Exclusive,
            LockWait::default(),
        ));
        // Held now: another description cannot have it.
        let probe = open_lock(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(probe.try_lock(), Err(TryLockError::WouldBlock)));
        drop(held);
        assert!(probe.try_lock().is_ok(), "released when dropped");
    });
}

#[test]
fn a_spent_budget_gives_up_at_once_and_a_free_lock_is_still_taken() {
    let (_dir, path, other) = held_elsewhere();
    let budget = LockWait::budget(Duration::from_millis(1));
    std::thread::sleep(Duration::from_millis(5));
    let busy = lock(&path, "the test's lock", Mode::Exclusive, budget);
    assert!(matches!(busy, Err(LockError::Busy(_))), "{busy:?}");
    drop(other);
    taken(lock(&path, "the test's lock", Mode::Exclusive, budget))
        .release()
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_waiter_given_up_on_never_keeps_the_lock() {
    let (_dir, path, other) = held_elsewhere();
    let gave_up = lock(
        &path,
        "the test's lock",
        Mode::Exclusive,
        LockWait::each(Duration::from_millis(50)),
    );
    assert!(matches!(gave_up, Err(LockError::Busy(_))), "{gave_up:?}");
    drop(other);
    // Its thread may take the lock once free, and lets it go at once: each
    // waiter after it gets it.
    for _ in 0..3 {
        drop(taken(lock(
            &path,
            "the test's lock",
            Mode::Exclusive,
            LockWait::default(),
        )));
    }
}

#[test]
fn shared_holders_share_and_relock_converts() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("lock");
    let short = LockWait::each(Duration::from_millis(50));
    let a = taken(lock(&path, "config", Mode::Shared, short));
    let b = taken(lock(&path, "config", Mode::Shared, short));
    let exclusive = lock(&path, "config", Mode::Exclusive, short);
    assert!(
        matches!(exclusive, Err(LockError::Busy(_))),
        "{exclusive:?}"
    );
    drop(b);
    let file = a.file();
    assert!(relock(file, Mode::Exclusive, short).unwrap_or_else(|e| panic!("{e}")));
    assert!(relock(file, Mode::Shared, short).unwrap_or_else(|e| panic!("{e}")));
    // Shared again: another shared holder comes in.
    drop(taken(lock(&path, "config", Mode::Shared, short)));
}

#[test]
fn the_summary_tells_each_lock_taken_and_given_up() {
    let (_dir, path, other) = held_elsewhere();
    let what = "the summary test's lock";
    let short = LockWait::each(Duration::from_millis(20));
    assert!(lock(&path, what, Mode::Exclusive, short).is_err());
    drop(other);
    drop(taken(lock(
        &path,
        what,
        Mode::Exclusive,
        LockWait::default(),
    )));
    let line = summary().unwrap_or_default();
    let clause = line
        .split("; ")
        .find(|c| c.contains(what))
        .unwrap_or_else(|| panic!("{line}"));
    assert!(
        clause.contains(&format!("{what} taken 1 time, waited "))
            && clause.contains(" ms (at most ")
            && clause.contains("), held ")
            && clause.ends_with(", given up 1 time"),
        "{clause}"
    );
}
