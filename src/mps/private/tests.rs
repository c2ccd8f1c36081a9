use super::*;
use std::path::PathBuf;

#[test]
fn the_option_variables_are_named_as_spank_names_them() {
    assert_eq!(
        option_variable(OPTION_MODE),
        "_SLURM_SPANK_OPTION_gpu_mps_gpu_mps"
    );
    assert_eq!(
        option_variable(OPTION_THREADS),
        "_SLURM_SPANK_OPTION_gpu_mps_gpu_mps_threads"
    );
}

#[test]
fn a_request_is_private_with_or_without_threads() {
    assert_eq!(parse_request(None, None), Ok(None));
    assert_eq!(
        parse_request(Some("private"), None),
        Ok(Some(PrivateRequest { threads: None }))
    );
    assert_eq!(
        parse_request(Some("private"), Some("25")),
        Ok(Some(PrivateRequest { threads: Some(25) }))
    );
}

#[test]
fn a_bad_request_is_told_what_to_type() {
    for (mode, threads, said) in [
        (Some("shared"), None, "takes one value, private"),
        (Some(""), None, "takes one value, private"),
        (Some("private"), Some("0"), "from 1 to 100"),
        (Some("private"), Some("101"), "from 1 to 100"),
        (Some("private"), Some("half"), "from 1 to 100"),
        (None, Some("50"), "applies to --gpu-mps=private only"),
    ] {
        let err = parse_request(mode, threads);
        assert!(err.as_ref().is_err_and(|e| e.contains(said)), "{err:?}");
    }
}

#[test]
fn the_prolog_reads_the_request_slurmd_shows_it() {
    let env = |name: &str| match name {
        "SPANK__SLURM_SPANK_OPTION_gpu_mps_gpu_mps" => Some("private".to_owned()),
        "SPANK__SLURM_SPANK_OPTION_gpu_mps_gpu_mps_threads" => Some("40".to_owned()),
        _ => None,
    };
    assert_eq!(
        request_in_prolog(env),
        Ok(Some(PrivateRequest { threads: Some(40) }))
    );
    assert_eq!(request_in_prolog(|_| None), Ok(None));
}

#[test]
fn each_refusal_names_its_cause_and_what_to_do() {
    assert_eq!(refusal(true, false, &[0, 1], &[], "gpu01"), None);
    let cases = [
        (
            refusal(true, true, &[0], &[], "gpu01"),
            "holds an MPS share",
        ),
        (
            refusal(true, false, &[], &[], "gpu01"),
            "holds no GPU on node gpu01",
        ),
        (
            refusal(false, false, &[0], &[], "gpu01"),
            "PrivateMPS=allow",
        ),
        (
            refusal(true, false, &[0, 1], &[1], "gpu01"),
            "GPU 1 of this job",
        ),
    ];
    for (said, cause) in cases {
        assert!(said.as_ref().is_some_and(|s| s.contains(cause)), "{said:?}");
    }
    // A share is refused for being one before anything else is looked at.
    let share = refusal(false, true, &[], &[0], "n");
    assert!(
        share.as_ref().is_some_and(|s| s.contains("MPS share")),
        "{share:?}"
    );
}

#[test]
fn a_record_reads_back_as_written_and_nothing_else_reads() {
    for record in [
        PrivateRecord {
            uid: 1001,
            gpus: vec![0, 3],
            threads: Some(25),
        },
        PrivateRecord {
            uid: 0,
            gpus: vec![7],
            threads: None,
        },
    ] {
        assert_eq!(PrivateRecord::parse(&record.to_string()), Some(record));
    }
    for bad in [
        "",
        "uid=1 gpus=0",
        "uid=x gpus=0 threads=-",
        "uid=1 gpus=0,a threads=-",
        "uid=1 gpus=0 threads=0",
        "uid=1 gpus=0 threads=- extra=1",
        "uid=1 gpus=0 threads",
    ] {
        assert_eq!(PrivateRecord::parse(bad), None, "{bad}");
    }
}

const MOUNTINFO_V1: &str = "\
25 30 0:23 / /sys rw,nosuid shared:7 - sysfs sysfs rw
31 25 0:26 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755
32 31 0:27 / /sys/fs/cgroup/systemd rw shared:10 - cgroup cgroup rw,xattr,name=systemd
35 31 0:30 / /sys/fs/cgroup/devices rw shared:13 - cgroup cgroup rw,devices
36 31 0:31 / /sys/fs/cgroup/cpu,cpuacct rw shared:14 - cgroup cgroup rw,cpu,cpuacct
37 31 0:32 / /sys/fs/cgroup/freezer rw shared:15 - cgroup cgroup rw,freezer
";

#[test]
fn a_v1_task_s_cgroups_are_joined_in_every_hierarchy_mounted() {
    let task = "\
5:freezer:/slurm/uid_1000/job_7/step_0
4:cpu,cpuacct:/slurm/uid_1000/job_7/step_0/task_0
3:devices:/slurm/uid_1000/job_7/step_0
2:rdma:/
1:name=systemd:/system.slice/slurmd.service
";
    assert_eq!(
        cgroup_procs(task, MOUNTINFO_V1, |_| true),
        Ok(vec![
            PathBuf::from("/sys/fs/cgroup/freezer/slurm/uid_1000/job_7/step_0/cgroup.procs"),
            PathBuf::from(
                "/sys/fs/cgroup/cpu,cpuacct/slurm/uid_1000/job_7/step_0/task_0/cgroup.procs"
            ),
            PathBuf::from("/sys/fs/cgroup/devices/slurm/uid_1000/job_7/step_0/cgroup.procs"),
            PathBuf::from("/sys/fs/cgroup/systemd/system.slice/slurmd.service/cgroup.procs"),
        ])
    );
    // No devices hierarchy reachable: the daemon would see every GPU.
    let unmounted = "3:devices:/slurm/job_7\n";
    let without = MOUNTINFO_V1.replace("cgroup cgroup rw,devices", "cgroup cgroup rw,pids");
    assert!(cgroup_procs(unmounted, &without, |_| true).is_err());
    assert!(cgroup_procs("5:freezer:/slurm/job_7\n", MOUNTINFO_V1, |_| true).is_err());
}

#[test]
fn a_v2_task_s_cgroup_is_found_under_the_mount_s_root() {
    let mountinfo = "\
28 23 0:25 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate
";
    let task = "0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n";
    assert_eq!(
        cgroup_procs(task, mountinfo, |_| true),
        Ok(vec![PathBuf::from(
            "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/step_0/user/task_0/cgroup.procs"
        )])
    );
    // A node in a cgroup namespace of its own mounts a cgroup below the
    // real root; a path with a space is escaped in mountinfo.
    let nested = "28 23 0:25 /nodes/n\\0401 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
    assert_eq!(
        cgroup_procs("0::/nodes/n 1/job_7/step_0/user/task_0\n", nested, |_| true),
        Ok(vec![PathBuf::from(
            "/sys/fs/cgroup/job_7/step_0/user/task_0/cgroup.procs"
        )])
    );
    for outside in ["0::/nodes/n 2/job_7\n", "0::/nodes/n 1/../n 2/job_7\n"] {
        assert!(
            cgroup_procs(outside, nested, |_| true).is_err(),
            "{outside}"
        );
    }
}

#[test]
fn steps_are_named_as_squeue_names_them() {
    assert_eq!(step_name(0xffff_fffb), "batch");
    assert_eq!(step_name(0xffff_fffa), "interactive");
    assert_eq!(step_name(3), "step3");
}

#[test]
fn each_task_gets_the_daemon_s_directories_and_its_threads() {
    let daemon = StepDaemon {
        dir: PathBuf::from("/run/gpushare-mps/job7/batch"),
        uid: 1000,
        gid: 1000,
    };
    let env = daemon.task_env(Some(25));
    assert_eq!(
        env,
        vec![
            (
                "CUDA_MPS_PIPE_DIRECTORY".to_owned(),
                "/run/gpushare-mps/job7/batch/pipe".to_owned()
            ),
            (
                "CUDA_MPS_LOG_DIRECTORY".to_owned(),
                "/run/gpushare-mps/job7/batch/log".to_owned()
            ),
            (
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_owned(),
                "25".to_owned()
            ),
        ]
    );
    assert_eq!(daemon.task_env(None).len(), 2);
}

#[test]
fn of_two_mounts_of_one_hierarchy_the_later_one_that_shows_the_cgroup_wins() {
    // A hybrid host's cgroup2 at /sys/fs/cgroup/unified, then a cgroup2
    // mounted over /sys/fs/cgroup itself (which hides the first).
    let mountinfo = "\
31 25 0:26 / /sys/fs/cgroup ro shared:9 - tmpfs tmpfs ro
33 31 0:28 / /sys/fs/cgroup/unified rw shared:11 - cgroup2 cgroup2 rw
90 25 0:28 / /sys/fs/cgroup rw - cgroup2 none rw
";
    let task = "0::/job_7/step_0/user/task_0\n";
    let later = PathBuf::from("/sys/fs/cgroup/job_7/step_0/user/task_0/cgroup.procs");
    let earlier = PathBuf::from("/sys/fs/cgroup/unified/job_7/step_0/user/task_0/cgroup.procs");
    let shown = |d: &Path| d.starts_with("/sys/fs/cgroup/job_7");
    assert_eq!(
        cgroup_procs(task, mountinfo, shown),
        Ok(vec![later.clone()])
    );
    let hidden = |d: &Path| d.starts_with("/sys/fs/cgroup/unified");
    assert_eq!(cgroup_procs(task, mountinfo, hidden), Ok(vec![earlier]));
    // Neither shows it: the last mount's, whose missing file is then named.
    assert_eq!(cgroup_procs(task, mountinfo, |_| false), Ok(vec![later]));
}

#[test]
fn the_last_mount_on_a_directory_is_its_file_system() {
    let info = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
90 22 0:50 / /run rw,nosuid shared:5 - tmpfs tmpfs rw,size=100m
91 90 0:51 / /run/gpu-mps-mps/job7 rw,nosuid,nodev,noexec - tmpfs gpushare-job rw,size=32768k
92 22 0:52 / /srv/my\\040state/job8 rw - tmpfs gpushare-job rw
93 22 0:53 / /srv/job9 rw - tmpfs gpushare-job rw
94 22 8:1 /x /srv/job9 rw - ext4 /dev/sda1 rw
";
    let kind = |p: &str| mounted_kind(info, Path::new(p));
    assert_eq!(kind("/run/gpu-mps-mps/job7").as_deref(), Some("tmpfs"));
    assert_eq!(kind("/srv/my state/job8").as_deref(), Some("tmpfs"));
    // Something mounted over it later hides it.
    assert_eq!(kind("/srv/job9").as_deref(), Some("ext4"));
    assert_eq!(kind("/run/gpu-mps-mps/job70"), None);
    assert_eq!(kind("/run/gpu-mps-mps"), None);
}
