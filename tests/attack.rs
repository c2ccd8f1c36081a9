//! Attacks on the node's share books, made as non-root users with what a
//! user has: their own copy of slurm.conf loading their own client SPANK
//! plugin (`tests/attack/forge_spank.c`), a program calling libslurm
//! directly (`tests/attack/raw_submit.c`), files they can create. Each test
//! asserts what the job could open (ENXIO: its own GPU, the cgroup allows
//! it; EPERM: denied) and what it was told.
//!
//! On the cluster of `ClusterSpec::mps_node()`: 4 fake a40, Slurm 22.05's
//! Count=1600, job_submit/gpu_qos, gpushare's prolog, epilog and SPANK
//! plugin, PrologFlags=Alloc,DeferBatch.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use gpushare::mps::ledger::LedgerState;
use testcluster::cluster::{wait_for, NODE};
use testcluster::time::{Timeout, JOB_END, JOB_LONG, JOB_START, SHORT};
use testcluster::users::TestUser;
use testcluster::{ensure, Cluster, ClusterSpec, Suite, TestResult};

/// A share whose control program hangs (`sleep 1000`) is refused, or run
/// without MPS, within this: the node program's own deadline ended the
/// wait, not the hung program.
const REFUSED_WITHIN: Timeout = Timeout::secs(60);

fn main() -> ExitCode {
    Suite::new(ClusterSpec::mps_node())
        .test(
            "cpu_only_jobs_forging_units_get_no_gpu",
            cpu_jobs_get_nothing,
        )
        .smoke()
        .test(
            "a_flood_of_forged_cpu_jobs_does_not_lock_out_an_honest_share",
            flood,
        )
        .test("forged_sizes_on_share_jobs_get_slurms_size", share_sizes)
        .test(
            "a_whole_gpu_job_forging_a_share_stays_whole",
            whole_stays_whole,
        )
        .test("symlinked_state_files_are_never_followed", symlinks)
        .smoke()
        .test(
            "a_corrupted_ledger_with_running_shares_fails_safe",
            corrupted_ledger,
        )
        .test(
            "a_hung_mps_control_program_refuses_the_share_without_hanging_it",
            hung_control,
        )
        .test(
            "a_users_fake_mps_daemons_are_never_trusted_nor_killed",
            fake_daemons,
        )
        .test(
            "private_data_keeps_who_runs_what_from_other_users",
            private_data,
        )
        .test("a_users_crash_naming_an_xid_sets_no_gpu_aside", forged_xid)
        .test_on(
            "a_users_own_updates_never_land_a_job_untyped_under_a_typed_level",
            ClusterSpec::example_site(),
            own_updates,
        )
        .test_on(
            "private_data_users_keeps_other_users_names_out_of_job_output",
            private_users_spec(),
            banner_names_nobody,
        )
        .run()
}

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/attack");

/// What a job prints: its GPU, percentage and units, then the probe's
/// `dev<i>=<error>` words.
fn report_script(c: &Cluster) -> Result<String, String> {
    let probe = c.write_device_probe()?;
    Ok(format!(
        "echo GPU=$GPUSHARE_GPU PCT=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE UNITS=$GPUSHARE_MPS_UNITS $(sh {})",
        probe.display()
    ))
}

/// The `KEY=value` words of a text.
fn words(text: &str) -> BTreeMap<String, String> {
    text.split_whitespace()
        .filter_map(|w| w.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect()
}

/// The device each of the 4 GPUs gave the job: `Some(gpu)` when exactly
/// that one was allowed, `None` when all were denied; an error otherwise.
fn opened(report: &BTreeMap<String, String>, what: &str) -> Result<Option<u32>, String> {
    let mut allowed = Vec::new();
    for i in 0..4u32 {
        match report.get(&format!("dev{i}")).map(String::as_str) {
            Some("Operation_not_permitted") => {}
            Some("No_such_device_or_address") => allowed.push(i),
            other => return Err(format!("{what}: dev{i}={other:?} in {report:?}")),
        }
    }
    match allowed.as_slice() {
        [] => Ok(None),
        [gpu] => Ok(Some(*gpu)),
        more => Err(format!("{what}: could open GPUs {more:?}: {report:?}")),
    }
}

fn ledger(c: &Cluster) -> LedgerState {
    let path = c.dir.join("run/gpu-mps/state");
    LedgerState::parse(&fs::read_to_string(&path).unwrap_or_default(), &path).unwrap_or_default()
}

/// A user with their forging plugin loaded through their own slurm.conf.
struct Forger {
    user: TestUser,
    plugin: PathBuf,
}

impl Forger {
    fn new(c: &Cluster, name: &str) -> Result<Self, String> {
        let user = TestUser::create(c, name)?;
        let plugin = user.compile(
            c,
            &Path::new(FIXTURES).join("forge_spank.c"),
            "forge.so",
            true,
        )?;
        Ok(Self { user, plugin })
    }

    /// The user's slurm.conf whose plugstack sets `entries` (`NAME=VALUE`).
    fn conf(&self, c: &Cluster, tag: &str, entries: &[&str]) -> Result<PathBuf, String> {
        self.user.own_slurm_conf(c, tag, &self.plugin, entries)
    }

    fn sbatch(&self, c: &Cluster, conf: &Path, args: &[&str]) -> Result<u32, String> {
        let out_arg = format!("--output={}/%j.out", c.jobs_dir.display());
        let mut full = vec!["--parsable", out_arg.as_str()];
        full.extend_from_slice(args);
        let out = self.user.run_ok(c, Some(conf), "sbatch", &full)?;
        out.trim()
            .split(';')
            .next()
            .and_then(|id| id.parse().ok())
            .ok_or_else(|| format!("sbatch printed {out:?}"))
    }
}

fn finished_report(c: &Cluster, id: u32) -> Result<BTreeMap<String, String>, String> {
    let info = c.wait_job_done(id, JOB_LONG)?;
    let out = c.job_output(id);
    ensure(
        info.state() == "COMPLETED",
        format!("job {id} ended {}:\n{out}", info.state()),
    )?;
    Ok(words(&out))
}

fn cpu_jobs_get_nothing(c: &mut Cluster) -> TestResult {
    let mallory = Forger::new(c, "gpushare-mallory")?;
    let script = report_script(c)?;
    let mut jobs: Vec<(String, u32)> = Vec::new();
    for (tag, entries) in [
        ("one", &["GPUSHARE_MPS_UNITS=7"][..]),
        ("case", &["gpushare_mps_units=100", "GPUSHARE_GPU=0"][..]),
    ] {
        let conf = mallory.conf(c, tag, entries)?;
        let id = mallory.sbatch(c, &conf, &[&format!("--wrap={script}")])?;
        jobs.push((format!("sbatch with {entries:?}"), id));
        // srun and salloc+srun: interactive jobs through the same plugin.
        for (how, cmd) in [
            ("srun", vec!["srun", "sh", "-c", script.as_str()]),
            (
                "salloc",
                vec!["salloc", "srun", "sh", "-c", script.as_str()],
            ),
        ] {
            let out = mallory.user.run_ok(c, Some(&conf), cmd[0], &cmd[1..])?;
            let report = words(&out);
            let what = format!("{how} with {entries:?}");
            ensure(
                opened(&report, &what)?.is_none() && report.get("GPU").is_none_or(String::is_empty),
                format!("{what} got a GPU: {out}"),
            )?;
        }
    }
    // libslurm called directly: no, one and two forged entries.
    let raw = mallory.user.compile(
        c,
        &Path::new(FIXTURES).join("raw_submit.c"),
        "raw_submit",
        false,
    )?;
    let output = format!("{}/%j.out", c.jobs_dir.display());
    let batch = format!("#!/bin/sh\n{script}\n");
    for entries in [
        &[][..],
        &["GPUSHARE_MPS_UNITS=7"][..],
        &["GPUSHARE_MPS_UNITS=100", "GPUSHARE_MPS_UNITS=100"][..],
    ] {
        let mut args = vec![output.as_str(), batch.as_str(), "-"];
        args.extend_from_slice(entries);
        let out = mallory
            .user
            .run_ok(c, None, &raw.to_string_lossy(), &args)?;
        let id = out
            .trim()
            .parse()
            .map_err(|_| format!("raw_submit printed {out:?}"))?;
        jobs.push((format!("libslurm with {entries:?}"), id));
    }
    for (what, id) in &jobs {
        let report = finished_report(c, *id)?;
        ensure(
            opened(&report, what)?.is_none(),
            format!("{what}: job {id} could open a GPU: {report:?}"),
        )?;
        ensure(
            report.get("GPU").is_none_or(String::is_empty),
            format!("{what}: job {id} was told a GPU: {report:?}"),
        )?;
        ensure(
            ledger(c).share(*id).is_none() && ledger(c).whole_holder(*id).is_none(),
            format!("{what}: job {id} is in the ledger"),
        )?;
    }
    Ok(())
}

fn flood(c: &mut Cluster) -> TestResult {
    let mallory = Forger::new(c, "gpushare-mallory")?;
    let alice = TestUser::create(c, "gpushare-alice")?;
    let conf = mallory.conf(c, "flood", &["GPUSHARE_MPS_UNITS=100"])?;
    let mut flood = Vec::new();
    for _ in 0..6 {
        flood.push(mallory.sbatch(c, &conf, &["--wrap=sleep 300"])?);
    }
    for &id in &flood {
        c.wait_job_state(id, &["RUNNING"], JOB_START)?;
    }
    let script = report_script(c)?;
    let out = alice.run_ok(c, None, "srun", &["--gres=mps:50", "sh", "-c", &script])?;
    let report = words(&out);
    ensure(
        opened(&report, "alice's share")?.is_some()
            && report.get("PCT").map(String::as_str) == Some("50"),
        format!(
            "alice's honest share beside {} forged jobs: {out}",
            flood.len()
        ),
    )?;
    ensure(
        flood.iter().all(|id| ledger(c).share(*id).is_none()),
        "a forged job holds a share in the ledger",
    )?;
    c.cancel_all()
}

fn share_sizes(c: &mut Cluster) -> TestResult {
    let mallory = Forger::new(c, "gpushare-mallory")?;
    let script = report_script(c)?;
    let wrap = format!("--wrap={script}");
    let small = mallory.conf(c, "small", &["GPUSHARE_MPS_UNITS=1"])?;
    let big = mallory.conf(c, "big", &["GPUSHARE_MPS_UNITS=100"])?;
    let cases: [(&Path, &str, &str, &str); 2] = [
        (&small, "--gres=mps:100", "100", "100"),
        (&big, "--gres=mps:1", "1", "1"),
    ];
    for (conf, gres, pct, units) in cases {
        let id = mallory.sbatch(c, conf, &[gres, &wrap])?;
        let report = finished_report(c, id)?;
        ensure(
            report.get("PCT").map(String::as_str) == Some(pct)
                && report.get("UNITS").map(String::as_str) == Some(units)
                && opened(&report, gres)?.is_some(),
            format!("{gres} with a forged size: {report:?}"),
        )?;
    }
    // srun through the plugin: the size Slurm allocated.
    let out = mallory.user.run_ok(
        c,
        Some(&big),
        "srun",
        &["--gres=mps:25", "sh", "-c", &script],
    )?;
    let report = words(&out);
    ensure(
        report.get("PCT").map(String::as_str) == Some("25"),
        format!("srun --gres=mps:25 forging 100: {out}"),
    )?;
    // libslurm with two forged entries around a real mps:50 request.
    let raw = mallory.user.compile(
        c,
        &Path::new(FIXTURES).join("raw_submit.c"),
        "raw_submit",
        false,
    )?;
    let output = format!("{}/%j.out", c.jobs_dir.display());
    let batch = format!("#!/bin/sh\n{script}\n");
    let out = mallory.user.run_ok(
        c,
        None,
        &raw.to_string_lossy(),
        &[
            &output,
            &batch,
            "gres:mps:50",
            "GPUSHARE_MPS_UNITS=1",
            "GPUSHARE_MPS_UNITS=100",
        ],
    )?;
    let id: u32 = out
        .trim()
        .parse()
        .map_err(|_| format!("raw_submit printed {out:?}"))?;
    let report = finished_report(c, id)?;
    ensure(
        report.get("UNITS").map(String::as_str) == Some("50")
            && report.get("PCT").map(String::as_str) == Some("50"),
        format!("libslurm mps:50 with two forged entries: {report:?}"),
    )
}

fn whole_stays_whole(c: &mut Cluster) -> TestResult {
    let mallory = Forger::new(c, "gpushare-mallory")?;
    let conf = mallory.conf(c, "whole", &["GPUSHARE_MPS_UNITS=1"])?;
    let whole = mallory.sbatch(
        c,
        &conf,
        &[
            "--gres=gpu:a40:1",
            "--wrap=echo HELD=$SLURM_JOB_GPUS; sleep 300",
        ],
    )?;
    c.wait_job_state(whole, &["RUNNING"], JOB_START)?;
    let held: u32 = wait_for("the whole-GPU job's output", SHORT, || {
        words(&c.job_output(whole))
            .get("HELD")
            .and_then(|g| g.parse().ok())
    })?;
    let state = ledger(c);
    ensure(
        state.share(whole).is_none()
            && state.whole_holder(whole).map(|w| w.gpus.clone()) == Some(vec![held]),
        format!(
            "job {whole} holding GPU {held} whole is booked as: {:?}",
            (state.share(whole), state.whole_holder(whole))
        ),
    )?;
    // Three full shares go to the three other GPUs.
    let script = report_script(c)?;
    let mut gpus = Vec::new();
    for _ in 0..3 {
        let id = c.sbatch_ok(&["--gres=mps:100", &format!("--wrap={script}; sleep 300")])?;
        c.wait_job_state(id, &["RUNNING"], JOB_START)?;
        let report = wait_for("the share's report", SHORT, || {
            let w = words(&c.job_output(id));
            w.contains_key("dev3").then_some(w)
        })?;
        gpus.push(opened(&report, "share")?.ok_or("a share got no GPU")?);
    }
    ensure(
        !gpus.contains(&held),
        format!("a share was put on GPU {held}, held whole by job {whole}: {gpus:?}"),
    )?;
    c.cancel_all()
}

fn gpu_mps_conf(c: &Cluster) -> PathBuf {
    c.slurm_conf().with_file_name("gpu_mps.conf")
}

/// Runs `f` with gpu_mps.conf's `key` line replaced by `line` (added if it
/// has none), restoring it (and
/// resuming the node if the test drained it) whatever happens.
fn with_conf(
    c: &mut Cluster,
    key: &str,
    line: &str,
    f: impl FnOnce(&mut Cluster) -> TestResult,
) -> TestResult {
    let path = gpu_mps_conf(c);
    let original = fs::read_to_string(&path).map_err(|e| e.to_string())?;
    let mut edited: String = original
        .lines()
        .map(|l| {
            if l.starts_with(&format!("{key}=")) {
                line
            } else {
                l
            }
        })
        .map(|l| format!("{l}\n"))
        .collect();
    if !original.lines().any(|l| l.starts_with(&format!("{key}="))) {
        edited.push_str(&format!("{line}\n"));
    }
    testcluster::replace_conf(&path, &edited)?;
    let result = f(c);
    // The last job's epilog reads the edited file: every job ends first.
    let _ = c.cancel_all();
    testcluster::replace_conf(&path, &original)?;
    let _ = c.run(
        "scontrol",
        &["update", &format!("nodename={NODE}"), "state=resume"],
    );
    result
}

fn symlinks(c: &mut Cluster) -> TestResult {
    let mallory = TestUser::create(c, "gpushare-mallory")?;
    let victim = c.dir.join("victim");
    fs::write(&victim, "root's own data\n").map_err(|e| e.to_string())?;
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).map_err(|e| e.to_string())?;
    let before = fs::metadata(&victim).map_err(|e| e.to_string())?;
    // A StateDir where users can write (here the 0777 job output directory).
    let state_dir = c.jobs_dir.join("attack-state");
    let public = c.jobs_dir.join("attack-state-mps");
    let plant = format!(
        "mkdir -p {p}/gpu0 && ln -s {v} {p}/state.new && ln -s {v} {p}/state && mkfifo {p}/gpu1 && ln -s {v} {p}/gpu0/pipe",
        p = public.display(),
        v = victim.display()
    );
    mallory.run_ok(c, None, "sh", &["-c", &plant])?;
    let conf_line = format!("StateDir={}", state_dir.display());
    with_conf(c, "StateDir", &conf_line, |c| {
        let ran = c.jobs_dir.join("attack-state-ran");
        let id = c.sbatch_ok(&["--gres=mps:25", &format!("--wrap=touch {}", ran.display())])?;
        // The prolog refuses the node: the job does not run there. The
        // directory above the state directories is the first thing it
        // refuses: anyone may write there.
        let parent = format!(
            "lies under {} (owner uid 0, mode 0777)",
            c.jobs_dir.display()
        );
        wait_for("the prolog's refusal", JOB_START, || {
            c.syslog()
                .lines()
                .any(|l| {
                    l.contains("gpu-mps-prolog")
                        && l.contains("attack-state")
                        && l.contains(&parent)
                        && l.contains("which a user other than root could change")
                })
                .then_some(())
        })?;
        let after = fs::metadata(&victim).map_err(|e| e.to_string())?;
        ensure(
            fs::read_to_string(&victim).unwrap_or_default() == "root's own data\n"
                && after.mode() == before.mode()
                && after.uid() == before.uid()
                && after.mtime() == before.mtime(),
            format!("the victim file changed: mode {:o}", after.mode()),
        )?;
        ensure(
            fs::symlink_metadata(public.join("state.new"))
                .is_ok_and(|m| m.file_type().is_symlink()),
            "the planted link was replaced (so something wrote there)",
        )?;
        // Slurm shows the job RUNNING while its prolog runs; what matters is
        // that the prolog's failure keeps the job's program from running.
        let state = wait_for("the job to leave the node", JOB_END, || {
            let state = c.job(id).ok()?.state().to_string();
            (!matches!(state.as_str(), "RUNNING" | "CONFIGURING")).then_some(state)
        })?;
        ensure(
            state != "COMPLETED" && !ran.exists(),
            format!("the share ran on a node whose state directory a user owns: {state}"),
        )
    })
}

fn corrupted_ledger(c: &mut Cluster) -> TestResult {
    let script = report_script(c)?;
    // Where gpushare places: 4 shares of 90, so Slurm 22.05 still admits 40
    // more units on the node, but no GPU has room for 30. Where Slurm
    // places: 4 shares of 60, so Slurm starts a share of 30, and the
    // node's damaged state must neither stop it nor lose it.
    let by_slurm = testcluster::cluster::slurm_places_shares();
    let size = if by_slurm {
        "--gres=mps:60"
    } else {
        "--gres=mps:90"
    };
    let mut full = Vec::new();
    for _ in 0..4 {
        let id = c.sbatch_ok(&[size, &format!("--wrap={script}; sleep 300")])?;
        full.push(id);
    }
    for &id in &full {
        c.wait_job_state(id, &["RUNNING"], JOB_START)?;
    }
    // Their steps have started (the damage below is for later jobs).
    wait_for("the shares' reports", SHORT, || {
        full.iter()
            .all(|&id| words(&c.job_output(id)).contains_key("dev3"))
            .then_some(())
    })?;
    let state = c.dir.join("run/gpu-mps/state");
    let copy = c.dir.join("run/gpu-mps-mps/state");
    let refused = |c: &Cluster, want: &str| -> TestResult {
        let id = c.sbatch_ok(&["--gres=mps:30", &format!("--wrap={script}")])?;
        if by_slurm {
            let report = finished_report(c, id)?;
            return ensure(
                opened(&report, "Slurm's share on a damaged node")?.is_some(),
                format!("job {id} could open no GPU: {report:?}"),
            );
        }
        let info = c.wait_job_done(id, JOB_END)?;
        let out = c.job_output(id);
        ensure(
            info.state() == "FAILED" && out.contains(want),
            format!(
                "job {id} ended {} with {out:?}, wanted a refusal saying {want:?}",
                info.state()
            ),
        )
    };
    // 1. The ledger is garbage: rebuilt from the published copy, so the
    //    four nearly full GPUs stay nearly full.
    fs::write(&state, "garbage").map_err(|e| e.to_string())?;
    refused(c, "no single GPU")?;
    ensure(
        full.iter().all(|id| ledger(c).share(*id).is_some()),
        "the rebuilt ledger lost a running share",
    )?;
    // 2. Both gone: nothing is placed until an admin runs gc.
    fs::write(&state, "garbage").map_err(|e| e.to_string())?;
    fs::remove_file(&copy).map_err(|e| e.to_string())?;
    refused(c, "gpu-mps gc")?;
    let bin = testcluster::cluster::build_dir()?.join("gpu-mps");
    let bin = bin.to_string_lossy();
    let conf = gpu_mps_conf(c);
    let conf = conf.to_string_lossy();
    let status = c.run(&bin, &["status", "--conf", &conf])?;
    let table = String::from_utf8_lossy(&status.stdout).into_owned();
    ensure(
        status.status.code() == Some(1) && table.contains("LOST"),
        format!("gpu-mps status while lost ({}):\n{table}", status.status),
    )?;
    let gc = c.run(&bin, &["gc", "--conf", &conf, "--node", NODE])?;
    ensure(
        gc.status.code() == Some(1),
        format!(
            "gc with four unaccounted shares: {} {}",
            gc.status,
            String::from_utf8_lossy(&gc.stdout)
        ),
    )?;
    c.cancel_all()?;
    let gc = c.run(&bin, &["gc", "--conf", &conf, "--node", NODE])?;
    ensure(
        gc.status.success(),
        format!(
            "gc once the shares ended: {} {}",
            gc.status,
            String::from_utf8_lossy(&gc.stdout)
        ),
    )?;
    let table = c.run(&bin, &["status", "--conf", &conf])?;
    ensure(
        !String::from_utf8_lossy(&table.stdout).contains("LOST"),
        "still lost after gc",
    )?;
    let id = c.sbatch_ok(&["--gres=mps:50", &format!("--wrap={script}")])?;
    let report = finished_report(c, id)?;
    ensure(
        opened(&report, "share after gc")?.is_some(),
        format!("no share after gc: {report:?}"),
    )
}

fn hung_control(c: &mut Cluster) -> TestResult {
    let program = c.dir.join("hung-mps-control");
    fs::write(&program, "#!/bin/sh\nexec sleep 1000\n").map_err(|e| e.to_string())?;
    fs::set_permissions(&program, fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
    // The driver's nvidia-smi beside it: shared GPUs are made exclusive.
    testcluster::standin::install_smi(&c.dir)?;
    let line = format!("MPSControl={}", program.display());
    with_conf(c, "MPSControl", &line, |c| {
        // No share runs without its daemon: refused within the control
        // program's deadline and sent elsewhere, its script never run.
        let started = Instant::now();
        let id = c.sbatch_ok(&["--gres=mps:25", "--wrap=echo GPU=$GPUSHARE_GPU"])?;
        c.wait_sent_off(id, NODE, JOB_LONG)?;
        let out = c.job_output(id);
        ensure(
            out.contains("could not be started") && !words(&out).contains_key("GPU"),
            format!("job {id}: {out}"),
        )?;
        ensure(
            started.elapsed() < REFUSED_WITHIN.scaled(),
            format!("the refusal took {:?}", started.elapsed()),
        )?;
        let log = c.syslog();
        ensure(
            log.lines()
                .any(|l| l.contains("gpu-mps-prolog") && l.contains("did not finish within")),
            format!("syslog lacks the killed control program:\n{log}"),
        )?;
        c.cancel_all()?;
        // A site that chose so runs it without MPS, after the same deadline.
        with_conf(c, "MPSFailure", "MPSFailure=run", |c| {
            let started = Instant::now();
            let id = c.sbatch_ok(&["--gres=mps:25", "--wrap=echo GPU=$GPUSHARE_GPU"])?;
            let info = c.wait_job_done(id, JOB_LONG)?;
            let out = c.job_output(id);
            ensure(
                info.state() == "COMPLETED"
                    && words(&out).contains_key("GPU")
                    && out.contains("WITHOUT MPS"),
                format!("job {id} ended {}: {out}", info.state()),
            )?;
            ensure(
                started.elapsed() < REFUSED_WITHIN.scaled(),
                format!("the job took {:?}", started.elapsed()),
            )
        })
    })
}

/// The pipe directory of GPU `gpu`'s MPS daemon.
fn pipe(c: &Cluster, gpu: u32) -> PathBuf {
    c.dir.join(format!("run/gpu-mps-mps/gpu{gpu}/pipe"))
}

/// `gpu=N args=-d...` lines of the stand-in's log: daemons started.
fn daemon_starts(bin: &Path) -> usize {
    fs::read_to_string(bin.join("standin.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" args=-d"))
        .count()
}

/// mallory runs a job that starts, on every GPU, a process named as
/// NVIDIA's control daemon with that GPU's pipe variable, and more of
/// them in a loop. Root's daemons (the stand-in) start for four shares;
/// each is then killed, and the next share finds its GPU's daemon dead
/// and starts one (had a fake been taken for the daemon, it would not).
/// The epilogs stop root's daemons and leave mallory's processes alive.
fn fake_daemons(c: &mut Cluster) -> TestResult {
    let bin = c.dir.join("mps-bin-attack");
    let program = testcluster::standin::install(&bin)?;
    // The driver's nvidia-smi beside it: shared GPUs are made exclusive.
    testcluster::standin::install_smi(&bin)?;
    fs::write(bin.join("standin.log"), "").map_err(|e| e.to_string())?;
    let mallory = TestUser::create(c, "gpushare-mallory")?;
    let stop = mallory.home.join("stop");
    let _ = fs::remove_file(&stop);
    let pipes: Vec<String> = (0..4).map(|g| pipe(c, g).display().to_string()).collect();
    let fake = "bash -c 'exec -a nvidia-cuda-mps-control sleep 1000' >/dev/null 2>&1";
    let script = format!(
        "#!/bin/bash\n\
         pids=\n\
         for p in {pipes}; do CUDA_MPS_PIPE_DIRECTORY=$p {fake} & pids=\"$pids $!\"; done\n\
         echo STARTED\n\
         until [ -e {stop} ]; do\n\
           for p in {pipes}; do (CUDA_MPS_PIPE_DIRECTORY=$p timeout 2 bash -c 'exec -a nvidia-cuda-mps-control sleep 5' >/dev/null 2>&1 &); done\n\
           sleep 0.5\n\
         done\n\
         alive=0; for pid in $pids; do kill -0 $pid 2>/dev/null && alive=$((alive+1)); done\n\
         echo ALIVE=$alive\n\
         kill $pids\n",
        pipes = pipes.join(" "),
        stop = stop.display(),
    );
    let script_path = mallory.home.join("fakes.sh");
    fs::write(&script_path, script).map_err(|e| e.to_string())?;
    let line = format!("MPSControl={}", program.display());
    with_conf(c, "MPSControl", &line, |c| {
        let out = mallory.home.join("fakes.out");
        let job = mallory.sbatch(
            c,
            &[
                &format!("--output={}", out.display()),
                "--time=10",
                &script_path.to_string_lossy(),
            ],
        )?;
        let output = || fs::read_to_string(&out).unwrap_or_default();
        wait_for("mallory's fakes", JOB_START, || {
            output().contains("STARTED").then_some(())
        })?;
        let share =
            |c: &Cluster| c.sbatch_ok(&["--gres=mps:25", "--wrap=echo SCRIPT-UP; sleep 300"]);
        let ids: Vec<u32> = (0..4).map(|_| share(c)).collect::<Result<_, _>>()?;
        // A job reads RUNNING while its prolog still starts its GPU's
        // daemon; its script runs only once the prolog is done. Killing
        // before then would kill a control program mid-start (`-d` still
        // running), which the prolog rightly reports as a failed start.
        for &id in &ids {
            wait_for("the share's script", JOB_START, || {
                c.job_output(id).contains("SCRIPT-UP").then_some(())
            })?;
        }
        ensure(
            daemon_starts(&bin) == 4,
            format!("{} daemon starts for four shares", daemon_starts(&bin)),
        )?;
        // Root kills every daemon of root's.
        let daemons: Vec<u32> = (0..4)
            .flat_map(|g| gpushare::mps::daemon::processes(&pipe(c, g)))
            .collect();
        ensure(!daemons.is_empty(), "no daemon of root's found")?;
        for pid in &daemons {
            let _ = c.run("kill", &["-KILL", &pid.to_string()]);
        }
        let fifth = share(c)?;
        c.wait_job_state(fifth, &["RUNNING"], JOB_START)?;
        // The prolog records the share, then sees to its GPU's daemon.
        wait_for("a daemon start for the fifth share", SHORT, || {
            (ledger(c).share(fifth).is_some() && daemon_starts(&bin) == 5).then_some(())
        })
        .map_err(|e| {
            format!(
                "{e}: {} daemon starts: the fifth share's GPU had a dead daemon, taken for alive",
                daemon_starts(&bin)
            )
        })?;
        c.run_ok("scancel", &["--user=root"])?;
        for id in ids.iter().chain([&fifth]) {
            c.wait_job_done(*id, JOB_END)?;
        }
        // The epilogs have stopped root's daemons: none of root's is left.
        wait_for("root's daemons to stop", SHORT, || {
            (0..4)
                .all(|g| gpushare::mps::daemon::processes(&pipe(c, g)).is_empty())
                .then_some(())
        })?;
        fs::write(&stop, "").map_err(|e| e.to_string())?;
        c.wait_job_done(job, JOB_END)?;
        ensure(
            output().contains("ALIVE=4"),
            format!("root killed mallory's processes: {}", output()),
        )
    })
}

/// `PrivateData=yes` in gpu_mps.conf: a user reading the node's status
/// is told it is private, the status copy and DCGM files are root's, and
/// the metrics name no user; with `no`, a user sees root's share.
fn private_data(c: &mut Cluster) -> TestResult {
    let eve = TestUser::create(c, "gpushare-eve")?;
    let bin = testcluster::cluster::build_dir()?.join("gpu-mps");
    let conf = gpu_mps_conf(c);
    let status_as_eve = |c: &Cluster| {
        eve.run(
            c,
            None,
            &bin.to_string_lossy(),
            &["status", "--conf", &conf.to_string_lossy()],
        )
    };
    let copy = c.dir.join("run/gpu-mps-mps/state");
    let metrics = |c: &Cluster| {
        c.run_ok(
            &bin.to_string_lossy(),
            &["metrics", "--conf", &conf.to_string_lossy()],
        )
    };
    with_conf(c, "PrivateData", "PrivateData=no", |c| {
        let id = c.sbatch_ok(&["--gres=mps:25", "--wrap=sleep 300"])?;
        c.wait_job_state(id, &["RUNNING"], JOB_START)?;
        wait_for("the share", SHORT, || ledger(c).share(id).map(drop))?;
        let shown = status_as_eve(c)?;
        ensure(
            shown.status.success()
                && String::from_utf8_lossy(&shown.stdout).contains(&format!("{id}(root:25)")),
            format!("PrivateData=no: eve sees {shown:?}"),
        )?;
        ensure(
            metrics(c)?.contains("user=\"root\""),
            "PrivateData=no: no user label",
        )
    })?;
    with_conf(c, "PrivateData", "PrivateData=yes", |c| {
        let id = c.sbatch_ok(&["--gres=mps:25", "--wrap=sleep 300"])?;
        c.wait_job_state(id, &["RUNNING"], JOB_START)?;
        wait_for("the share", SHORT, || ledger(c).share(id).map(drop))?;
        let hidden = status_as_eve(c)?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&hidden.stdout),
            String::from_utf8_lossy(&hidden.stderr)
        );
        ensure(
            !hidden.status.success()
                && text.contains("PrivateData")
                && !text.contains(&id.to_string()),
            format!("PrivateData=yes: eve sees {text}"),
        )?;
        let mode = fs::metadata(&copy)
            .map(|m| m.mode() & 0o777)
            .map_err(|e| e.to_string())?;
        ensure(mode == 0o600, format!("the status copy has mode {mode:o}"))?;
        let text = metrics(c)?;
        ensure(
            text.contains(&format!("job=\"{id}\"")) && !text.contains("user="),
            format!("PrivateData=yes: metrics name a user:\n{text}"),
        )
    })
}

/// A user whose default QOS is the group QOS (typed GrpTRES), with what a
/// user has: `scontrol update` of their own pending job. Whatever they
/// combine (a blank `QOS=` that Slurm resolves to the default, an untyped
/// `Gres=`/`TresPer*=`, a QOS named beside them), the job never lands
/// untyped under a typed level.
fn own_updates(c: &mut Cluster) -> TestResult {
    let mal = TestUser::create(c, "gpushare-mal")?;
    mal.allow_qos_by_default(c, &["normal", "qos_lafferty"], "qos_lafferty")?;
    let id = mal.sbatch(
        c,
        &["-H", "--qos=normal", "--gres=gpu:a40:1", "--wrap=true"],
    )?;
    let job = format!("job={id}");
    let tries: [&[&str]; 7] = [
        &["QOS="],
        &["QOS=", "Gres=gpu:2"],
        &["Gres=gpu:2"],
        &["TresPerNode=gres/gpu:2"],
        &["TresPerJob=gres/gpu:2", "QOS=qos_lafferty"],
        &["QOS=,", "Gres=gpu:a40:1"],
        &["QOS=qos_lafferty"],
    ];
    let mut accepted = Vec::new();
    for args in tries {
        let mut all = vec!["update", job.as_str()];
        all.extend_from_slice(args);
        let out = mal.run(c, None, "scontrol", &all)?;
        if out.status.success() {
            accepted.push(args.join(" "));
        }
    }
    let after = c.job(id)?;
    c.run_ok("scancel", &[&id.to_string()])?;
    let tres = after.get("TresPerNode").unwrap_or_default().to_owned();
    ensure(
        accepted.is_empty() && after.get("QOS") == Some("normal") && tres.contains("a40"),
        format!(
            "as the job's user, accepted: {accepted:?}; the job now QOS={:?} TresPerNode={tres}",
            after.get("QOS")
        ),
    )
}

/// The driver's words a user can get into the kernel log.
const FORGED_NAME: &str = "NVRM: Xid (PCI:0000:3b:00): 79";

/// Runs the node timer (`gpu-mps metrics --write --kernel-log LOG`) as
/// root: what it said on stderr.
fn node_timer(c: &Cluster, log: &Path) -> Result<String, String> {
    c.node_timer(None, &gpu_mps_conf(c), log)
}

/// The records of `/dev/kmsg` whose text starts with `start`, where root
/// can read it (`None` where it cannot).
fn kmsg_records(start: &str) -> Option<Vec<String>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut kmsg = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .ok()?;
    let mut found = Vec::new();
    let mut buf = vec![0u8; 8192];
    loop {
        match kmsg.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let record = String::from_utf8_lossy(&buf[..n]);
                let first = record.lines().next().unwrap_or_default();
                if first
                    .split_once(';')
                    .is_some_and(|(_, t)| t.starts_with(start))
                {
                    found.push(first.to_owned());
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(_) => return None,
        }
    }
    Some(found)
}

/// mallory builds a program named `NVRM: Xid (PCI:0000:3b:00): 79` and a
/// library named `NVRM: Xid (PCI:0000:3b:00): 79, x.so`, and runs the
/// program, which crashes in the library: the kernel's segfault line, at
/// the kernel's facility, then starts with the driver's words (the
/// program's name, cut to 15 characters) and holds a whole XID line (the
/// library's name). NVML's figures put GPU 0 at PCI 0000:3b:00. Where
/// root can read `/dev/kmsg`, the node timer reads the real kernel log
/// from its end before the crash; then, in every case, a file of records
/// as the kernel wrote them (her real line where it was read, else the
/// one recorded in the fixtures) with a user-facility copy of the
/// driver's line: no GPU is set aside. The driver's own line, put there
/// too, sets GPU 1 aside: the timer does read the file.
fn forged_xid(c: &mut Cluster) -> TestResult {
    let state = c.dir.join("run/gpu-mps");
    // The timer keeps its cursor (and NVML's figures) over reboots there.
    let kept = gpushare::mps::kept::kept_dir(Path::new(gpushare::mps::kept::KEPT_ROOT), &state);
    let id = c.sbatch_ok(&["--gres=mps:25", "--wrap=true"])?;
    c.wait_job_done(id, JOB_END)?;
    let facts: String = (0..4u32)
        .map(|g| format!("{g} {g} 49152 0 0 00000000:{:02X}:00.0\n", 0x3b + g))
        .collect();
    fs::write(state.join("nvml-facts"), facts).map_err(|e| e.to_string())?;
    let mallory = TestUser::create(c, "gpushare-mallory")?;
    let fixtures = Path::new(FIXTURES);
    let library = mallory.compile(
        c,
        &fixtures.join("crash_lib.c"),
        &format!("{FORGED_NAME}, x.so"),
        true,
    )?;
    let program = mallory.compile(c, &fixtures.join("crash_in.c"), FORGED_NAME, false)?;
    let failed = |c: &Cluster| {
        let bin = testcluster::cluster::build_dir()?.join("gpu-mps");
        let conf = gpu_mps_conf(c);
        let out = c.run(
            &bin.to_string_lossy(),
            &["status", "--json", "--conf", &conf.to_string_lossy()],
        )?;
        let view: gpushare::mps::status::NodeStatus =
            serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())?;
        Ok::<Vec<u32>, String>(
            view.mps
                .iter()
                .filter(|m| m.failed.is_some())
                .map(|m| m.gpu)
                .collect(),
        )
    };
    let result = (|| -> TestResult {
        let before = kmsg_records("NVRM: Xid (PCI:[");
        let kmsg = Path::new("/dev/kmsg");
        if before.is_some() {
            let _ = fs::remove_file(kept.join("xid-cursor"));
            node_timer(c, kmsg)?;
        }
        let crashed = mallory.run(
            c,
            None,
            &program.to_string_lossy(),
            &[&library.to_string_lossy()],
        )?;
        ensure(
            !crashed.status.success() && crashed.stderr.is_empty(),
            format!("mallory's program did not crash: {crashed:?}"),
        )?;
        // Her line as the kernel wrote it, where it can be read.
        let hers = match (before, kmsg_records("NVRM: Xid (PCI:[")) {
            (Some(before), Some(after)) => after.into_iter().find(|r| !before.contains(r)),
            _ => None,
        };
        if let Some(line) = &hers {
            let said = node_timer(c, kmsg)?;
            ensure(
                failed(c)?.is_empty() && !said.contains("set aside from sharing"),
                format!("the real kernel log with her line {line}: {said}"),
            )?;
        }
        let recorded = fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/kernel-log/segfault-forged-xid.kmsg"
        ))
        .map_err(|e| e.to_string())?;
        let segfault = match &hers {
            Some(line) => line
                .split_once(';')
                .map(|(_, t)| t.to_owned())
                .unwrap_or_default(),
            None => recorded
                .lines()
                .find_map(|l| l.strip_prefix("6,346,646965325,-;"))
                .map(str::to_owned)
                .ok_or("no record 346 in the fixture")?,
        };
        let _ = fs::remove_file(kept.join("xid-cursor"));
        let log = c.dir.join("kmsg-attack");
        fs::write(&log, "5,0,0,-;Linux version\n").map_err(|e| e.to_string())?;
        let first = node_timer(c, &log)?;
        ensure(
            first.contains("first look"),
            format!("the first look: {first}"),
        )?;
        let mut file = fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .map_err(|e| e.to_string())?;
        let records = format!(
            "6,1,100,-;{segfault}\n\
             12,2,101,-;{FORGED_NAME}, pid=1, GPU has fallen off the bus.\n"
        );
        std::io::Write::write_all(&mut file, records.as_bytes()).map_err(|e| e.to_string())?;
        let said = node_timer(c, &log)?;
        ensure(
            failed(c)?.is_empty()
                && said.contains("2 record(s) name an XID but are not the driver's"),
            format!("after her records: {said}"),
        )?;
        let driver =
            "4,3,102,-;NVRM: Xid (PCI:0000:3c:00): 79, pid=1, GPU has fallen off the bus.\n";
        std::io::Write::write_all(&mut file, driver.as_bytes()).map_err(|e| e.to_string())?;
        let said = node_timer(c, &log)?;
        ensure(
            failed(c)? == vec![1] && said.contains("GPU 1 set aside from sharing: XID 79"),
            format!("after the driver's line: {said}"),
        )
    })();
    let bin = testcluster::cluster::build_dir()?.join("gpu-mps");
    let conf = gpu_mps_conf(c);
    for gpu in ["0", "1"] {
        let _ = c.run(
            &bin.to_string_lossy(),
            &["resume-gpu", gpu, "--conf", &conf.to_string_lossy()],
        );
    }
    for name in ["nvml-facts", "xid-cursor"] {
        let _ = fs::remove_file(state.join(name));
        let _ = fs::remove_file(kept.join(name));
    }
    result
}

/// The suite's node with Slurm's `PrivateData=users` in slurm.conf
/// (gpu_mps.conf's `PrivateData` left at `auto`, which follows it) and
/// `OtherUsers=queue`, so that a share may be placed beside another
/// user's where gpushare places.
fn private_users_spec() -> ClusterSpec {
    let mut spec = ClusterSpec::mps_node();
    spec.conf_overrides
        .push(("PrivateData".into(), "users".into()));
    for (name, text) in &mut spec.extra_conf_files {
        if name == "gpu_mps.conf" {
            text.push_str("OtherUsers=queue\n");
        }
    }
    spec
}

/// Where Slurm's `PrivateData` hides users, bob's share beside alice's is
/// told that another user's MPS server runs on its GPU, never whose: his
/// job's output, which is his to read, names no other user, nor does the
/// node's status he can ask for.
fn banner_names_nobody(c: &mut Cluster) -> TestResult {
    let alice = TestUser::create(c, "gpushare-alice")?;
    let bob = TestUser::create(c, "gpushare-bob")?;
    let script = "--wrap=echo GPU=$GPUSHARE_GPU; sleep 300";
    let share = |user: &TestUser, units: u32| -> Result<u32, String> {
        let id = user.sbatch(
            c,
            &[
                &format!("--output={}/%j.out", user.home.display()),
                &format!("--gres=mps:{units}"),
                script,
            ],
        )?;
        c.wait_job_state(id, &["RUNNING"], JOB_LONG)?;
        let out = user.home.join(format!("{id}.out"));
        wait_for("the job's output", JOB_START, || {
            let text = fs::read_to_string(&out).unwrap_or_default();
            text.contains("GPU=").then_some(text)
        })
        .map(|_| id)
    };
    // Every GPU holds 60 of alice's units: bob's 30 go beside hers.
    for _ in 0..4 {
        share(&alice, 60)?;
    }
    let id = share(&bob, 30)?;
    let gpu = ledger(c).share(id).map(|s| s.gpu);
    let out = fs::read_to_string(bob.home.join(format!("{id}.out"))).unwrap_or_default();
    ensure(
        out.contains("another user's MPS server runs on this GPU") && !out.contains(&alice.name),
        format!("bob's job {id} on GPU {gpu:?} under PrivateData=users: {out}"),
    )?;
    let bin = testcluster::cluster::build_dir()?.join("gpu-mps");
    let status = bob.run(
        c,
        None,
        &bin.to_string_lossy(),
        &["status", "--conf", &gpu_mps_conf(c).to_string_lossy()],
    )?;
    let shown = format!(
        "{}{}",
        String::from_utf8_lossy(&status.stdout),
        String::from_utf8_lossy(&status.stderr)
    );
    ensure(
        !shown.contains(&alice.name) && shown.contains("PrivateData"),
        format!("bob's gpu-mps status under PrivateData=users: {shown}"),
    )?;
    c.cancel_all()
}
