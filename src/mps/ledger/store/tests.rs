//! The store's tests, and the temporary ledgers the ledger's tests (and
//! other rooms') are run on.

use super::*;
use crate::mps::state_dir::DirError;
use std::os::unix::fs::MetadataExt;
use std::time::{SystemTime, UNIX_EPOCH};

/// A directory of its own per test, removed even when the test fails.
pub(crate) struct TempDir(tempfile::TempDir);

impl TempDir {
    pub(crate) fn new() -> Self {
        Self(tempfile::tempdir().unwrap_or_else(|e| panic!("{e}")))
    }

    pub(crate) fn path(&self) -> &Path {
        self.0.path()
    }

    pub(crate) fn owner(&self) -> u32 {
        fs::metadata(self.path())
            .map(|m| m.uid())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A ledger in `<temp>/gpu-mps`, created by `open` as on a fresh boot.
    pub(crate) fn ledger(&self) -> Ledger {
        ok(Ledger::open(&self.path().join("gpu-mps"), self.owner()))
    }
}

pub(crate) fn ok<T>(result: Result<T, LedgerError>) -> T {
    result.unwrap_or_else(|e| panic!("{e}"))
}

pub(crate) fn place(ledger: &Ledger, job: u32, units: u32) -> u32 {
    ok(ledger.place(job, 1000 + job, &format!("user{job}"), units, 4, 100))
        .value
        .share
        .gpu
}

pub(crate) fn used_per_gpu(ledger: &Ledger) -> Vec<u32> {
    ok(ledger.snapshot())
        .gpus(4, 100)
        .iter()
        .map(|gpu| gpu.used_units)
        .collect()
}

pub(crate) fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub(crate) fn write(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

pub(crate) fn mode_of(path: &Path) -> u32 {
    fs::symlink_metadata(path)
        .map(|m| m.mode() & 0o7777)
        .unwrap_or_else(|e| panic!("{e}"))
}

pub(crate) fn jobs(state: &LedgerState) -> Vec<u32> {
    state.shares().map(|s| s.job).collect()
}

#[test]
fn open_creates_a_missing_directory_private_with_an_empty_state() {
    let temp = TempDir::new();
    // After a reboot /run is empty: neither level exists.
    let dir = temp.path().join("run").join("gpu-mps");
    let ledger = ok(Ledger::open(&dir, temp.owner()));
    assert!(ledger.created());
    assert_eq!(mode_of(&dir), 0o700);
    assert_eq!(mode_of(&ledger.state_path()), 0o600);
    assert_eq!(ledger.dir(), dir.as_path());
    let again = ok(Ledger::open(&dir, temp.owner()));
    assert!(!again.created());
    let snapshot = ok(again.snapshot());
    assert!(snapshot.state.is_empty() && snapshot.set_aside_files.is_empty());
    // Nothing but the directory itself is left beside it.
    let names: Vec<String> = fs::read_dir(temp.path().join("run"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(names, vec!["gpu-mps".to_string()]);
}

#[test]
fn open_refuses_a_symlink_even_to_a_good_directory() {
    let temp = TempDir::new();
    let real = temp.path().join("real");
    ok(Ledger::open(&real, temp.owner()));
    let link = temp.path().join("gpu-mps");
    std::os::unix::fs::symlink(&real, &link).unwrap_or_else(|e| panic!("{e}"));
    let error = Ledger::open(&link, temp.owner()).err();
    assert!(
        matches!(&error, Some(LedgerError::Dir(DirError::IsSymlink(dir))) if *dir == link),
        "{error:?}"
    );
    let text = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(text.contains("is a symbolic link"), "{text}");
    // A dangling link is refused too, not followed to create a directory.
    let dangling = temp.path().join("dangling");
    std::os::unix::fs::symlink(temp.path().join("nowhere"), &dangling)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(
        Ledger::open(&dangling, temp.owner()),
        Err(LedgerError::Dir(DirError::IsSymlink(_)))
    ));
    assert!(!temp.path().join("nowhere").exists());
}

#[test]
fn open_refuses_a_file_in_place_of_the_directory() {
    let temp = TempDir::new();
    let path = temp.path().join("gpu-mps");
    write(&path, "");
    let error = Ledger::open(&path, temp.owner()).err();
    assert!(
        matches!(error, Some(LedgerError::Dir(DirError::NotADirectory(_)))),
        "{error:?}"
    );
}

#[test]
fn open_refuses_a_foreign_owner() {
    let temp = TempDir::new();
    let dir = temp.path().join("gpu-mps");
    ok(Ledger::open(&dir, temp.owner()));
    let stranger = temp.owner().wrapping_add(1);
    let error = Ledger::open(&dir, stranger).err();
    let text = error.as_ref().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        matches!(error, Some(LedgerError::Dir(DirError::WrongOwner { owner, expected, .. }))
            if owner == temp.owner() && expected == stranger),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "owned by uid {}, not uid {stranger}",
            temp.owner()
        )),
        "{text}"
    );
}

#[test]
fn open_refuses_group_or_other_permissions() {
    let temp = TempDir::new();
    let dir = temp.path().join("gpu-mps");
    ok(Ledger::open(&dir, temp.owner()));
    for mode in [0o750, 0o701, 0o755, 0o1777] {
        fs::set_permissions(&dir, fs::Permissions::from_mode(mode))
            .unwrap_or_else(|e| panic!("{e}"));
        let error = Ledger::open(&dir, temp.owner()).err();
        let text = error.as_ref().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            matches!(error, Some(LedgerError::Dir(DirError::TooOpen { mode: m, .. })) if m == mode),
            "{mode:o}: {text}"
        );
        assert!(
            text.contains(&format!("mode {mode:04o}")) && text.contains("chmod 0700"),
            "{text}"
        );
    }
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap_or_else(|e| panic!("{e}"));
    ok(Ledger::open(&dir, temp.owner()));
}

#[test]
fn an_unreadable_state_without_a_copy_is_set_aside_and_the_node_stops_placing() {
    let temp = TempDir::new();
    let ledger = temp.ledger();
    place(&ledger, 1, 100);
    let garbage = "{\"format\":\"gpushare-mps-ledger\",\"version\":2,\"shares\":[{\"job\":1}";
    write(&ledger.state_path(), garbage);
    // Readers report it and leave it where it is.
    let error = ledger.snapshot().err();
    let text = error.as_ref().map(|e| e.to_string()).unwrap_or_default();
    assert!(matches!(&error, Some(LedgerError::Corrupt(_))), "{text}");
    assert!(
        text.contains(&ledger.state_path().display().to_string()),
        "{text}"
    );
    assert_eq!(read(&ledger.state_path()), garbage);

    // GPU 0 may be full: placing anywhere would be a guess.
    let refused = ledger.place(2, 1000, "bob", 30, 4, 100);
    let Err(LedgerError::Placement {
        error: PlacementError::LoadsUnknown { reason },
        repair: Some(repair),
    }) = refused
    else {
        panic!("expected a refusal with a repair, got {refused:?}");
    };
    assert!(reason.contains("unreadable"), "{reason}");
    let moved_to = repair.moved_to.clone().unwrap_or_default();
    assert_eq!(
        read(&moved_to),
        garbage,
        "the bad file is kept for the admin"
    );
    assert!(repair.rebuilt_from.is_none());
    assert!(repair.to_string().contains("gpu-mps gc"), "{repair}");
    let snapshot = ok(ledger.snapshot());
    assert!(snapshot.state.lost_reason().is_some());
    assert_eq!(snapshot.set_aside_files, vec![moved_to]);
    // Whole-GPU holders are still recorded, releases still work.
    ok(ledger.record_whole(5, &[1]));
    assert_eq!(ok(ledger.release(5)).value.len(), 1);
    // Until an admin's rebuild finds every running share accounted for.
    let still = ok(ledger.rebuild(|_| vec![1])).value;
    assert_eq!(still, Err(vec![1]));
    assert!(ledger.place(2, 1000, "bob", 30, 4, 100).is_err());
    assert_eq!(ok(ledger.rebuild(|_| Vec::new())).value, Ok(true));
    assert_eq!(place(&ledger, 2, 30), 0);
    assert_eq!(ok(ledger.rebuild(|_| Vec::new())).value, Ok(false));
}

#[test]
fn the_text_format_of_gpushare_0_1_is_named_and_set_aside() {
    let temp = TempDir::new();
    let ledger = temp.ledger();
    let old = "gpushare-mps-ledger version=1\nshare job=1 uid=5 user=a gpu=0 units=10 since=1\n";
    write(&ledger.state_path(), old);
    let text = ledger
        .snapshot()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(text.contains("text format of gpushare 0.1"), "{text}");
    let repair = ok(ledger.release(1))
        .repair
        .unwrap_or_else(|| panic!("no repair"));
    assert_eq!(read(&repair.moved_to.unwrap_or_default()), old);
}

#[test]
fn non_utf8_state_names_the_line() {
    let temp = TempDir::new();
    let ledger = temp.ledger();
    fs::write(ledger.state_path(), b"{\n\"format\": \"\xff\"}").unwrap_or_else(|e| panic!("{e}"));
    let error = ledger.snapshot().err();
    assert!(
        matches!(&error, Some(LedgerError::Corrupt(ParseError { line: 2, problem, .. })) if problem == "not UTF-8 text"),
        "{error:?}"
    );
}

#[test]
fn a_leftover_temp_file_is_ignored_and_replaced() {
    let temp = TempDir::new();
    let ledger = temp.ledger();
    place(&ledger, 1, 50);
    let good = read(&ledger.state_path());
    // A crash between creating the temp file and the rename.
    let leftover = ledger.dir().join("state.new");
    write(&leftover, "{\"format\":\"gpushare-mps-ledger\",\"vers");
    assert_eq!(read(&ledger.state_path()), good);
    assert_eq!(jobs(&ok(ledger.snapshot()).state), vec![1]);
    // A no-op leaves it (it is harmless); the next write replaces it.
    ok(ledger.release(42));
    assert_eq!(place(&ledger, 2, 50), 1);
    assert!(!leftover.exists());
    assert_eq!(jobs(&ok(ledger.snapshot()).state), vec![1, 2]);
    assert!(ok(ledger.snapshot()).set_aside_files.is_empty());
}

#[test]
fn the_state_survives_the_directory_being_wiped_as_by_a_reboot() {
    let temp = TempDir::new();
    let ledger = temp.ledger();
    place(&ledger, 1, 50);
    fs::remove_dir_all(ledger.dir()).unwrap_or_else(|e| panic!("{e}"));
    let fresh = temp.ledger();
    assert!(fresh.created());
    assert!(ok(fresh.snapshot()).state.is_empty());
    assert_eq!(place(&fresh, 2, 50), 0);
}

/// Places `jobs` on 4 GPUs of 100, each job opening the ledger itself
/// as separate prologs would, and checks after every placement that no
/// GPU is over 100 in what a lock-free reader sees.
fn place_concurrently(dir: &Path, owner: u32, jobs: impl Iterator<Item = u32>) {
    for job in jobs {
        let ledger = ok(Ledger::open(dir, owner));
        let placed = ok(ledger.place(job, 1000, "load", 10, 4, 100));
        assert!(placed.value.share.gpu < 4);
        let gpus = ok(ledger.snapshot()).gpus(4, 100);
        assert!(gpus.iter().all(|g| g.used_units <= 100), "{gpus:?}");
    }
}

fn assert_balanced_full_house(ledger: &Ledger, jobs: usize) {
    let state = ok(ledger.snapshot()).state;
    assert_eq!(state.shares().count(), jobs);
    assert_eq!(used_per_gpu(ledger), vec![80, 80, 80, 80]);
}

#[test]
fn concurrent_threads_never_over_fill_and_stay_balanced() {
    let temp = TempDir::new();
    let dir = Arc::new(temp.path().join("gpu-mps"));
    let owner = temp.owner();
    let threads: Vec<_> = (0..8u32)
        .map(|thread| {
            let dir = Arc::clone(&dir);
            std::thread::spawn(move || {
                place_concurrently(&dir, owner, (0..4).map(|i| 100 + thread * 4 + i));
            })
        })
        .collect();
    for thread in threads {
        if let Err(panic) = thread.join() {
            std::panic::resume_unwind(panic);
        }
    }
    assert_balanced_full_house(&temp.ledger(), 32);
}

const WORKER_DIR: &str = "GPUSHARE_LEDGER_TEST_WORKER_DIR";
const WORKER_ID: &str = "GPUSHARE_LEDGER_TEST_WORKER_ID";
const WORKER_GATE: &str = "GPUSHARE_LEDGER_TEST_WORKER_GATE";

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Does nothing in a normal run; the multi-process test re-runs this
/// binary with only this test selected and the variables set. It waits
/// at the gate so all workers start placing together, and prints when
/// it started and ended placing.
#[test]
fn process_worker() {
    let (Some(dir), Some(id), Some(gate)) = (
        std::env::var_os(WORKER_DIR),
        std::env::var_os(WORKER_ID),
        std::env::var_os(WORKER_GATE),
    ) else {
        return;
    };
    let id: u32 = id
        .to_string_lossy()
        .parse()
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = PathBuf::from(dir);
    let owner = fs::metadata(dir.parent().unwrap_or(Path::new("/")))
        .map(|m| m.uid())
        .unwrap_or_else(|e| panic!("{e}"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !Path::new(&gate).exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the gate never opened"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let start = now_ns();
    let threads: Vec<_> = (0..2u32)
        .map(|thread| {
            let dir = dir.clone();
            std::thread::spawn(move || {
                place_concurrently(&dir, owner, (0..4).map(|i| 1000 + id * 8 + thread * 4 + i));
            })
        })
        .collect();
    for thread in threads {
        if let Err(panic) = thread.join() {
            std::panic::resume_unwind(panic);
        }
    }
    println!("worker-interval {start} {}", now_ns());
}

#[test]
fn concurrent_processes_never_over_fill_and_stay_balanced() {
    let temp = TempDir::new();
    let dir = temp.path().join("gpu-mps");
    // Created once up front, as the first prolog after a boot would.
    ok(Ledger::open(&dir, temp.owner()));
    let gate = temp.path().join("gate");
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
    let test_name = format!(
        "{}::process_worker",
        module_path!().split_once("::").map_or("", |(_, rest)| rest)
    );
    // All spawned before any is waited for: they run at the same time.
    let workers: Vec<_> = (0..4u32)
        .map(|id| {
            std::process::Command::new(&exe)
                .args([
                    test_name.as_str(),
                    "--exact",
                    "--test-threads=1",
                    "--nocapture",
                ])
                .env(WORKER_DIR, &dir)
                .env(WORKER_ID, id.to_string())
                .env(WORKER_GATE, &gate)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("{e}"))
        })
        .collect();
    write(&gate, "");
    let mut intervals = Vec::new();
    for worker in workers {
        let output = worker.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "worker failed: {}\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let interval = stdout
            .lines()
            .find_map(|l| l.split("worker-interval ").nth(1))
            .and_then(|l| l.split_once(' '))
            .and_then(|(a, b)| Some((a.parse::<u128>().ok()?, b.parse::<u128>().ok()?)))
            .unwrap_or_else(|| panic!("the worker test did not run: {stdout}"));
        intervals.push(interval);
    }
    // The property under test needs the workers to overlap in time.
    let latest_start = intervals.iter().map(|i| i.0).max().unwrap_or(0);
    let earliest_end = intervals.iter().map(|i| i.1).min().unwrap_or(0);
    assert!(
        latest_start < earliest_end,
        "the workers ran one after another, not at once: {intervals:?}"
    );
    assert_balanced_full_house(&temp.ledger(), 32);
}

#[test]
fn a_ledger_under_a_directory_others_can_change_is_never_opened() {
    let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let me = fs::metadata(temp.path()).map(|m| m.uid()).unwrap_or(0);
    let run = temp.path().join("run");
    let dir = run.join("gpu-mps");
    assert!(Ledger::open(&dir, me).is_ok());
    fs::set_permissions(&run, fs::Permissions::from_mode(0o777)).unwrap_or_else(|e| panic!("{e}"));
    let err = Ledger::open(&dir, me).err().map(|e| e.to_string());
    assert!(
        err.as_deref()
            .is_some_and(|e| e.contains("writable by group or others")),
        "{err:?}"
    );
    let fresh = Ledger::open(&run.join("other"), me).err();
    assert!(fresh.is_some() && !run.join("other").exists());
}
