use super::*;

fn share(units: u32, memory_mib: Option<u64>) -> ShareRecord {
    ShareRecord {
        job: 1,
        uid: 1000,
        user: "a".into(),
        gpu: 0,
        units,
        since: 0,
        placed_by_slurm: false,
        memory_mib,
        clients: None,
        sluid: None,
    }
}

#[test]
fn a_server_gets_its_largest_shares_limits() {
    let cfg = GpuMpsConfig::default();
    let shares = [share(25, Some(1000)), share(50, Some(2000))];
    assert_eq!(
        server_limits(&cfg, None, shares.iter()),
        Some(Limits {
            thread_percentage: 50,
            memory_mib: Some(2000)
        })
    );
    let mixed = [share(25, Some(1000)), share(10, None)];
    assert_eq!(
        server_limits(&cfg, None, mixed.iter()).and_then(|l| l.memory_mib),
        None
    );
    assert_eq!(server_limits(&cfg, None, [].iter()), None);
    // A share placed by another prolog that has not recorded its limit
    // yet counts with the limit it is about to get, not as unlimited.
    let proportional = GpuMpsConfig {
        memory_limit: crate::mps::config::MemoryLimit::Proportional,
        ..GpuMpsConfig::default()
    };
    let pending = [share(25, Some(12288)), share(50, None)];
    assert_eq!(
        server_limits(&proportional, Some(48 * 1024), pending.iter()),
        Some(Limits {
            thread_percentage: 50,
            memory_mib: Some(24576)
        })
    );
}

#[test]
fn a_limits_record_reads_back_and_nothing_else_does() {
    for memory_mib in [Some(12288), None] {
        let r = LimitsRecord {
            daemon: (77, 1_700_000_000, 123_456_789),
            limits: Limits {
                thread_percentage: 25,
                memory_mib,
            },
        };
        assert_eq!(LimitsRecord::parse(&r.to_string()), Some(r));
    }
    for bad in [
        "",
        "77 1 2 25",
        "77 1 2 25 12M",
        "77 1 2 x -",
        "77 1 2 25 - extra",
    ] {
        assert_eq!(LimitsRecord::parse(bad), None, "{bad:?}");
    }
}

#[test]
fn an_alive_record_reads_back_and_nothing_else_does() {
    let r = AliveRecord {
        pid: 4242,
        start: 987_654,
        pipe: (77, 1_700_000_000, 123_456_789),
        multi_user: true,
    };
    assert_eq!(AliveRecord::parse(&r.to_string()), Some(r));
    let single = AliveRecord {
        multi_user: false,
        ..r
    };
    assert_eq!(AliveRecord::parse(&single.to_string()), Some(single));
    for bad in [
        "",
        "4242 987654 77 1",
        // An older build's record, without the mode: probed anew.
        "4242 987654 77 1 2",
        "4242 987654 77 1 2 3",
        "4242 987654 77 1 2 multi x",
        "-1 9 77 1 2 single",
        "x 9 77 1 2 single",
    ] {
        assert_eq!(AliveRecord::parse(bad), None, "{bad:?}");
    }
}

#[test]
fn a_process_start_time_tells_a_live_process_from_a_gone_one() {
    let me = std::process::id();
    let start = process_start(me);
    assert!(start.is_some_and(|s| s > 0), "{start:?}");
    assert_eq!(process_start(me), start, "the same process, the same time");
    let mut child = Command::new("true")
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let pid = child.id();
    let _ = child.wait();
    assert_eq!(
        process_start(pid),
        None,
        "a reaped process has no start time"
    );
}

#[test]
fn the_multi_user_flag_is_the_one_the_help_names() {
    let v3 = "Usage: nvidia-cuda-mps-control [-d | -f] [-m|--multiuser] [-v]\n";
    assert_eq!(multi_user_flag(v3), Some("--multiuser"));
    let guide = "  -d  daemon\n  -multiuser-server  one server for all users\n";
    assert_eq!(multi_user_flag(guide), Some("-multiuser-server"));
    let dra = "-d, -f, -M: start the daemon in multi-user mode";
    assert_eq!(multi_user_flag(dra), Some("-M"));
    // Only whole words: a longer option is not the flag.
    assert_eq!(multi_user_flag("-Mx --multiuser-ish -d"), None);
    assert_eq!(
        multi_user_flag("usage: nvidia-cuda-mps-control [-d | -f]"),
        None
    );
    // Several named: the preferred spelling.
    assert_eq!(multi_user_flag("-multiuser-server or -M"), Some("-M"));
}

#[test]
fn pids_of_an_answer() {
    assert_eq!(pids("123\n456\n"), vec![123, 456]);
    assert_eq!(pids("Server 1 not found\n"), vec![1]);
    assert_eq!(pids(""), Vec::<u32>::new());
}

#[test]
fn only_named_processes_with_the_pipe_are_found() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let pipe = dir.path().join("pipe");
    let spawn = |argv0: &str, pipe: &Path| {
        Command::new("bash")
            .args(["-c", &format!("exec -a {argv0} sleep 30")])
            .env("CUDA_MPS_PIPE_DIRECTORY", pipe)
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let mut daemon = spawn(CONTROL_PROGRAM, &pipe);
    let mut client = spawn("python3", &pipe);
    let mut elsewhere = spawn(CONTROL_PROGRAM, &dir.path().join("other"));
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut found = processes(&pipe);
    while found.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        found = processes(&pipe);
    }
    // Every daemon under the directory, and none of a sibling whose
    // name merely starts the same.
    let mut under = processes_under(dir.path());
    while under.len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        under = processes_under(dir.path());
    }
    let mut sibling = dir.path().as_os_str().to_owned();
    sibling.push("x");
    let beside = processes_under(Path::new(&sibling));
    for c in [&mut daemon, &mut client, &mut elsewhere] {
        let _ = c.kill();
        let _ = c.wait();
    }
    assert_eq!(found, vec![daemon.id()]);
    let mut both = vec![daemon.id(), elsewhere.id()];
    both.sort_unstable();
    assert_eq!(under, both);
    assert_eq!(beside, Vec::<u32>::new());
}

#[test]
fn another_users_process_never_passes_for_a_daemon_nor_is_killed() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let pipe = dir.path().join("pipe");
    let spawn = |uid: Option<u32>| {
        let mut cmd = Command::new("bash");
        cmd.args(["-c", &format!("exec -a {CONTROL_PROGRAM} sleep 30")])
            .env("CUDA_MPS_PIPE_DIRECTORY", &pipe);
        if let Some(uid) = uid {
            cmd.uid(uid).gid(uid);
        }
        cmd.spawn().unwrap_or_else(|e| panic!("{e}"))
    };
    // The user: another uid where this runs as root (as on a node);
    // elsewhere the test's own uid is the user and no daemon is ours.
    let root = daemon_uid() == 0;
    let mut users = spawn(root.then_some(65534));
    let mut ours = root.then(|| spawn(None));
    let deadline = Instant::now() + Duration::from_secs(5);
    let want: Vec<u32> = ours.iter().map(|c| c.id()).collect();
    let mut found = processes(&pipe);
    while found != want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        found = processes(&pipe);
    }
    let killed = kill_all(&[users.id()]);
    std::thread::sleep(Duration::from_millis(100));
    let survived = users.try_wait().ok().flatten().is_none();
    let mut ours_killed = None;
    if let Some(c) = ours.as_mut() {
        ours_killed = Some(kill_all(&[c.id()]));
        let _ = c.wait();
    }
    let _ = users.kill();
    let _ = users.wait();
    assert_eq!(found, want, "only the daemon's uid counts");
    assert!(killed.is_empty() && survived, "a user's process was killed");
    if let Some(k) = ours_killed {
        assert_eq!(k.len(), 1, "the daemon's own process is killed");
    }
}

#[test]
fn a_jobs_cgroup_is_found_on_v1_and_v2() {
    let v1 =
        "12:devices:/slurm/uid_1000/job_42/step_0/task_0\n3:cpu:/slurm/uid_1000/job_42/step_0\n";
    let v2 = "0::/system.slice/slurmstepd.scope/job_42/step_batch/user/task_0\n";
    assert!(cgroup_is_jobs(v1, 42, None) && cgroup_is_jobs(v2, 42, None));
    assert!(!cgroup_is_jobs(v1, 4, None) && !cgroup_is_jobs(v2, 420, None));
    assert!(!cgroup_is_jobs("0::/user.slice/job_42.scope\n", 42, None));
    // Slurm 26.05, cgroup v2, by default: the job's cgroup is its SLUID.
    let by_sluid = "0::/system.slice/slurmstepd.scope/s0AB12CD34EF56/step_0/user/task_0\n";
    assert!(cgroup_is_jobs(by_sluid, 42, Some("s0AB12CD34EF56")));
    assert!(!cgroup_is_jobs(by_sluid, 42, None));
    assert!(!cgroup_is_jobs(by_sluid, 42, Some("s0AB12CD34EF57")));
}

#[test]
fn a_daemon_is_idle_only_where_the_ledger_holds_no_share_and_is_not_lost() {
    let mut state = LedgerState::new();
    state.insert_share(share(25, None));
    state.insert_whole(crate::mps::ledger::WholeRecord {
        job: 2,
        gpus: vec![1],
        since: 0,
    });
    // GPU 0 serves a share; GPU 1, held whole, and GPU 2 serve none.
    assert!(!idle(&state, 0));
    assert!(idle(&state, 1) && idle(&state, 2));
    // A lost state may miss shares that run: no daemon is idle by it.
    let lost = LedgerState::lost("the state file is unreadable".into());
    assert!(!idle(&lost, 0) && !idle(&lost, 2));
}

/// A daemon of gpushare's on GPU `gpu` as a node left it: its control
/// pipe there, its GPU made exclusive (the earlier mode recorded).
pub(crate) fn daemon_left(cfg: &GpuMpsConfig, gpu: u32) {
    let pipe = pipe_dir(cfg, gpu);
    fs::create_dir_all(&pipe).unwrap_or_else(|e| panic!("{e}"));
    fs::write(pipe.join("control"), "").unwrap_or_else(|e| panic!("{e}"));
    crate::mps::compute_mode::make_exclusive(cfg, gpu).unwrap_or_else(|e| panic!("{e}"));
}
