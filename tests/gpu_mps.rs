//! MPS shares on every GPU of a node, on a real cluster with 4 fake a40s:
//! placement by gpushare's prolog, confinement and environment by the
//! `gpu_mps` SPANK plugin (cgroup v1 devices), release by the epilog.
//!
//! Confinement is checked the way a job sees it: opening its own GPU's
//! device file fails with ENXIO (the cgroup allows it; the fake device has
//! no driver), any other GPU's with EPERM (the cgroup denies it).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::ExitCode;

use gpushare::mps::ledger::{LedgerState, ShareRecord};
use gpushare::mps::status::NodeStatus;
use std::thread::sleep;
use std::time::Duration;

use testcluster::cluster::{slurm_places_shares, wait_for, GpuSpec};
use testcluster::time::{Timeout, JOB_END, JOB_LONG, JOB_START, SHORT};
use testcluster::{ensure, Cluster, ClusterSpec, Suite, TestResult};

#[path = "gpu_mps/autodetect.rs"]
mod autodetect;
#[path = "gpu_mps/cpu_node.rs"]
mod cpu_node;
#[path = "gpu_mps/kept_facts.rs"]
mod kept_facts;
#[path = "gpu_mps/lock_wait.rs"]
mod lock_wait;
#[path = "gpu_mps/login_host.rs"]
mod login_host;
#[path = "gpu_mps/prolog_d.rs"]
mod prolog_d;
#[path = "gpu_mps/upgrade.rs"]
mod upgrade;
use cpu_node::{cpu_jobs, cpu_node};
use login_host::login_host_jobs;
use prolog_d::{beside_site_scripts, prolog_d_node};

/// Sixteen shares and eight CPU jobs, submitted at once, all ended.
const EVERY_JOB_ENDED: Timeout = Timeout::secs(180);

fn main() -> ExitCode {
    if testcluster::cluster::cgroup_v2() && !testcluster::cluster::slurm_places_shares() {
        // gpushare cannot move a share to its GPU under cgroup v2 (Slurm's
        // device filter is the last word there): every share is refused.
        return Suite::new(ClusterSpec::mps_node())
            .test(
                "on_cgroup_v2_shares_gpushare_would_place_are_refused_clearly",
                refused_on_cgroup_v2,
            )
            .smoke()
            .run();
    }
    let suite = Suite::new(ClusterSpec::mps_node())
        // Each test starts with no job left by the one before, its
        // epilog run.
        .reset(|c| c.cancel_all());
    // Nodes whose GPUs are not all shared, where Slurm places shares.
    let suite = if testcluster::cluster::slurm_places_shares() {
        suite
            .test_on(
                "gpus_held_whole_without_mps_lines_make_slurm_stack_shares",
                mixed_node(false),
                stacked_without_zero_lines,
            )
            .test_on(
                "gpus_held_whole_with_zero_mps_lines_let_slurm_spread_shares",
                mixed_node(true),
                spread_with_zero_lines,
            )
    } else {
        suite
    };
    // gres.conf's Flags=env_uuid is Slurm 26.05's; gpushare places shares
    // only where it can confine them (cgroup v1).
    let env_uuid = testcluster::cluster::slurm_release() >= (26, 5);
    let suite = if env_uuid {
        suite.test_on(
            "autodetected_gpus_under_env_uuid_whole_jobs_see_uuids_shares_device_0_slurm_places",
            autodetect::env_uuid_node(true),
            autodetect::env_uuid,
        )
    } else {
        suite
    };
    let suite = if env_uuid && !testcluster::cluster::cgroup_v2() {
        suite.test_on(
            "autodetected_gpus_under_env_uuid_whole_jobs_see_uuids_shares_device_0_gpushare_places",
            autodetect::env_uuid_node(false),
            autodetect::env_uuid,
        )
    } else {
        suite
    };
    suite
        .test("four_shares_land_on_four_gpus_then_two_per_gpu", spread)
        .smoke()
        .test_on(
            "autodetected_gpus_take_shares_placed_confined_and_audited",
            autodetect::detected_node(),
            autodetect::detected_shares,
        )
        .test_on(
            "gpushares_prolog_and_epilog_run_in_prolog_d_beside_the_sites",
            prolog_d_node(),
            beside_site_scripts,
        )
        .test_on(
            "a_cpu_node_runs_its_jobs_with_gpushares_node_half_configured",
            cpu_node(),
            cpu_jobs,
        )
        .test("gpu_mps_status_shows_placements_to_root_and_users", status)
        .test(
            "tasks_see_only_their_gpu_in_batch_and_srun_steps",
            confinement,
        )
        .smoke()
        .test("shares_avoid_a_gpu_held_whole", whole_gpu_avoided)
        .smoke()
        .test(
            "thirty_two_concurrent_shares_never_overfill_and_balance",
            many_at_once,
        )
        .test("share_that_fits_no_gpu_fails_the_job_not_the_node", refused)
        .test(
            "a_prolog_with_fresh_kept_nvml_facts_starts_no_nvml_child",
            kept_facts::no_nvml_child_where_kept_facts_are_fresh,
        )
        .test(
            "a_ledger_locked_past_the_prologs_wait_refuses_and_requeues_the_share",
            lock_wait::ledger_locked,
        )
        .test("slurmd_killed_mid_job_then_epilog_releases", slurmd_crash)
        .test("records_of_vanished_jobs_are_reconciled", reconcile)
        .test(
            "interactive_srun_shares_put_every_task_on_one_gpu",
            interactive_srun,
        )
        .test("salloc_then_srun_steps_share_one_gpu", salloc_steps)
        .test("srun_pty_share_gets_its_gpu", srun_pty)
        // tests/package_test.sh only: a newer build of the packages there.
        .test_on_request(
            "packages_upgraded_under_running_shares_lose_nothing",
            upgrade::upgraded_under_running_shares,
        )
        // tests/package_test.sh and tests/rpm_test.sh only: Slurm's next
        // micro release and gpushare's packages for it, in one transaction.
        .test_on_request(
            "slurm_and_gpushare_upgraded_in_one_transaction_run_shares",
            upgrade::slurm_upgraded_with_gpushare,
        )
        // tests/package_test.sh and tests/rpm_test.sh only: a login host's
        // root with gpushare's tools package alone.
        .test_on_request(
            "a_login_host_with_only_the_tools_package_runs_jobs_on_the_cluster",
            login_host_jobs,
        )
        // Last: on the code before its fix, it drains the node.
        .test(
            "a_conf_rewritten_in_place_while_jobs_start_is_never_half_read",
            conf_rewritten_in_place,
        )
        // So do these.
        .test(
            "a_conf_rewritten_in_place_at_a_nodes_first_use_refuses_shares_and_drains_nothing",
            conf_rewritten_in_place_at_first_use,
        )
        .test(
            "a_share_refused_for_a_cut_conf_is_told_why_and_never_drains_the_node",
            cut_conf_refusal,
        )
        .run()
}

const SCRIPT: &str = "--wrap=echo GPU=$GPUSHARE_GPU CVD=$CUDA_VISIBLE_DEVICES PCT=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE UNITS=$GPUSHARE_MPS_UNITS PIPE=$CUDA_MPS_PIPE_DIRECTORY; sleep 120";

fn state_text(c: &Cluster) -> String {
    fs::read_to_string(c.dir.join("run/gpu-mps/state")).unwrap_or_default()
}

/// The node's ledger as the prolog wrote it (empty if unreadable).
fn ledger(c: &Cluster) -> LedgerState {
    LedgerState::parse(&state_text(c), Path::new("state")).unwrap_or_default()
}

/// The node is not drained (a refusal fails the job, never the node).
fn not_drained(c: &Cluster) -> TestResult {
    let node = c.run_ok("sinfo", &["-h", "-N", "-o", "%T"])?;
    ensure(
        !node.contains("drain"),
        format!("the node was drained: {node}"),
    )
}

fn no_share_left(c: &Cluster) -> Option<()> {
    (ledger(c).shares().count() == 0).then_some(())
}

/// The `KEY=value` words a job printed.
fn printed(c: &Cluster, id: u32) -> BTreeMap<String, String> {
    c.job_output(id)
        .split_whitespace()
        .filter_map(|w| w.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect()
}

fn start_shares(c: &Cluster, n: usize, units: u32) -> Result<Vec<u32>, String> {
    start_shares_running(c, n, units, SCRIPT)
}

fn start_shares_running(
    c: &Cluster,
    n: usize,
    units: u32,
    script: &str,
) -> Result<Vec<u32>, String> {
    let gres = format!("--gres=mps:{units}");
    let ids: Vec<u32> = (0..n)
        .map(|_| c.sbatch_ok(&[&gres, script]))
        .collect::<Result<_, _>>()?;
    for &id in &ids {
        c.wait_job_state(id, &["RUNNING"], JOB_START)?;
    }
    wait_for("the jobs' output", SHORT, || {
        ids.iter()
            .all(|&id| printed(c, id).contains_key("GPU"))
            .then_some(())
    })?;
    Ok(ids)
}

fn gpus_of(c: &Cluster, ids: &[u32]) -> Result<Vec<u32>, String> {
    ids.iter()
        .map(|&id| {
            printed(c, id)
                .get("GPU")
                .and_then(|g| g.parse().ok())
                .ok_or_else(|| format!("job {id} printed no GPU: {:?}", c.job_output(id)))
        })
        .collect()
}

fn per_gpu_count(gpus: &[u32]) -> [usize; 4] {
    let mut n = [0; 4];
    for &g in gpus {
        if let Some(slot) = n.get_mut(g as usize) {
            *slot += 1;
        }
    }
    n
}

/// What the device probe prints for GPU `i` of a job confined to `gpu`:
/// ENXIO where the cgroup allows (the fake device has no driver), EPERM
/// where it denies.
fn probe_result(i: u32, gpu: u32) -> &'static str {
    if i == gpu {
        "No_such_device_or_address"
    } else {
        "Operation_not_permitted"
    }
}

/// Each job's probe line says it can open its own GPU (ENXIO: allowed, no
/// driver) and no other (EPERM).
fn each_confined_to_its_gpu(c: &Cluster, ids: &[u32]) -> TestResult {
    for (&id, gpu) in ids.iter().zip(gpus_of(c, ids)?) {
        let p = printed(c, id);
        for i in 0..4u32 {
            let want = probe_result(i, gpu);
            ensure(
                p.get(&format!("dev{i}")).map(String::as_str) == Some(want),
                format!(
                    "job {id} on GPU {gpu}: dev{i} {:?}, expected {want}",
                    p.get(&format!("dev{i}"))
                ),
            )?;
        }
    }
    Ok(())
}

fn spread(c: &mut Cluster) -> TestResult {
    // slurmd loaded the SPANK plugin and says which gpushare it is.
    let loaded = format!(
        "gpu_mps: loaded (gpushare {}, built for Slurm ",
        env!("CARGO_PKG_VERSION")
    );
    ensure(
        c.log("slurmd").contains(&loaded),
        format!("slurmd.log lacks {loaded:?}"),
    )?;
    let probe = c.write_device_probe()?;
    let script = format!(
        "--wrap=echo GPU=$GPUSHARE_GPU CVD=$CUDA_VISIBLE_DEVICES PCT=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE UNITS=$GPUSHARE_MPS_UNITS PIPE=$CUDA_MPS_PIPE_DIRECTORY $(sh {}); sleep 120",
        probe.display()
    );
    let first = start_shares_running(c, 4, 50, &script)?;
    let mut gpus = gpus_of(c, &first)?;
    gpus.sort();
    ensure(
        gpus == vec![0, 1, 2, 3],
        format!("4 shares of 50 landed on {gpus:?}"),
    )?;
    let p = printed(c, first[0]);
    ensure(
        p.get("CVD").map(String::as_str) == Some("0"),
        format!("CUDA_VISIBLE_DEVICES {:?}", p.get("CVD")),
    )?;
    ensure(
        p.get("PCT").map(String::as_str) == Some("50"),
        format!("thread percentage {:?} (Slurm alone says 12)", p.get("PCT")),
    )?;
    ensure(
        p.get("UNITS").map(String::as_str) == Some("50"),
        format!("units {:?}", p.get("UNITS")),
    )?;
    ensure(
        p.get("PIPE").is_some_and(|d| {
            d.ends_with(&format!(
                "gpu-mps-mps/gpu{}/pipe",
                gpus_of(c, &first[..1]).unwrap_or_default()[0]
            ))
        }),
        format!("pipe dir {:?}", p.get("PIPE")),
    )?;
    // Who chose: Slurm on releases that spread shares (gpushare must then
    // record Slurm's GPU: the confinement test shows Slurm's device rules
    // allow exactly that one), gpushare on the others.
    let by_slurm = testcluster::cluster::slurm_places_shares();
    let state = ledger(c);
    ensure(
        first.iter().all(|&id| {
            state
                .share(id)
                .is_some_and(|s| s.placed_by_slurm == by_slurm)
        }),
        format!("expected placed_by_slurm={by_slurm}:\n{}", state_text(c)),
    )?;
    let second = start_shares_running(c, 4, 50, &script)?;
    let all = [gpus_of(c, &first)?, gpus_of(c, &second)?].concat();
    ensure(
        per_gpu_count(&all) == [2, 2, 2, 2],
        format!("8 shares of 50 per GPU: {:?}", per_gpu_count(&all)),
    )?;
    // All eight run at once, each confined to its own GPU.
    let both = [first.as_slice(), second.as_slice()].concat();
    for &id in &both {
        let state = c.job(id)?.state().to_owned();
        ensure(state == "RUNNING", format!("job {id} is {state}"))?;
    }
    each_confined_to_its_gpu(c, &both)?;
    c.cancel_all()?;
    wait_for("the epilogs to empty the ledger", SHORT, || {
        no_share_left(c)
    })?;
    Ok(())
}

fn confinement(c: &mut Cluster) -> TestResult {
    // One line per step and task: dev<i>=<the error opening /dev/nvidia<i>>.
    let probe = c.write_device_probe()?;
    let script = format!(
        "--wrap=echo GPU=$GPUSHARE_GPU; sh {p}; srun -n2 sh {p}",
        p = probe.display()
    );
    let id = c.sbatch_ok(&["--gres=mps:50", "-n2", &script])?;
    let info = c.wait_job_done(id, JOB_END)?;
    let out = c.job_output(id);
    ensure(
        info.state() == "COMPLETED",
        format!("job {id} ended {}:\n{out}", info.state()),
    )?;
    let gpu: u32 = printed(c, id)
        .get("GPU")
        .and_then(|g| g.parse().ok())
        .ok_or(format!("no GPU in:\n{out}"))?;
    // Three lines of probes: the batch step and two srun tasks.
    let probes: Vec<&str> = out.lines().filter(|l| l.contains("dev0=")).collect();
    ensure(probes.len() == 3, format!("expected 3 probe lines:\n{out}"))?;
    for line in probes {
        for i in 0..4u32 {
            let want = probe_result(i, gpu);
            ensure(
                line.contains(&format!("dev{i}={want}")),
                format!("GPU {gpu}: expected dev{i}={want} in {line:?}\n{out}"),
            )?;
        }
    }
    Ok(())
}

fn whole_gpu_avoided(c: &mut Cluster) -> TestResult {
    let first = start_shares(c, 1, 50)?;
    let whole = c.sbatch_ok(&[
        "--gres=gpu:a40:1",
        "--wrap=echo HELD=$SLURM_JOB_GPUS; sleep 120",
    ])?;
    c.wait_job_state(whole, &["RUNNING"], JOB_START)?;
    let held: u32 = wait_for("the whole-GPU job's output", SHORT, || {
        printed(c, whole).get("HELD").and_then(|g| g.parse().ok())
    })?;
    let more = start_shares(c, 5, 50)?;
    let gpus = gpus_of(c, &[first, more].concat())?;
    ensure(
        !gpus.contains(&held),
        format!("a share was put on GPU {held}, held whole by job {whole}: {gpus:?}"),
    )?;
    ensure(
        ledger(c).whole_holder(whole).map(|w| w.gpus.clone()) == Some(vec![held]),
        format!("ledger lacks the whole holder:\n{}", state_text(c)),
    )?;
    c.cancel_all()
}

fn many_at_once(c: &mut Cluster) -> TestResult {
    let ids: Vec<u32> = (0..32)
        .map(|_| c.sbatch_ok(&["--gres=mps:10", SCRIPT]))
        .collect::<Result<_, _>>()?;
    for &id in &ids {
        c.wait_job_state(id, &["RUNNING"], JOB_LONG)?;
    }
    wait_for("the jobs' output", SHORT, || {
        ids.iter()
            .all(|&id| printed(c, id).contains_key("GPU"))
            .then_some(())
    })?;
    let counts = per_gpu_count(&gpus_of(c, &ids)?);
    let (lo, hi) = (
        counts.iter().min().copied().unwrap_or(0),
        counts.iter().max().copied().unwrap_or(0),
    );
    ensure(
        hi * 10 <= 100,
        format!("a GPU got more than 100 units: {counts:?}"),
    )?;
    ensure(
        hi - lo <= 1,
        format!("units not balanced to within one job: {counts:?}"),
    )?;
    c.cancel_all()
}

fn refused(c: &mut Cluster) -> TestResult {
    start_shares(c, 4, 60)?;
    if testcluster::cluster::slurm_places_shares() {
        // Slurm books mps per GPU here: it starts no share that fits no
        // GPU, and nothing reaches the node: still pending once a
        // scheduling pass after its submission has looked at it.
        let id = c.sbatch_ok(&["--gres=mps:60", SCRIPT])?;
        let info = c.wait_considered(id, JOB_START)?;
        ensure(
            info.state() == "PENDING" && info.get("Reason") == Some("Resources"),
            format!("job {id} is {} ({:?})", info.state(), info.get("Reason")),
        )?;
        return c.cancel_all();
    }
    // Slurm admits it (300 of the node's 400 units are in use), but every
    // GPU has only 40 units free.
    let id = c.sbatch_ok(&["--gres=mps:60", SCRIPT])?;
    let info = c.wait_job_done(id, JOB_END)?;
    ensure(
        info.state() == "FAILED",
        format!("job {id} ended {}", info.state()),
    )?;
    let out = c.job_output(id);
    ensure(
        out.contains(&format!("job {id}")) && out.contains("no single GPU"),
        format!("the job's output lacks the reason:\n{out}"),
    )?;
    ensure(
        c.log("slurmd").contains("no single GPU"),
        "slurmd.log lacks the refusal",
    )?;
    not_drained(c)?;
    c.cancel_all()
}

fn refused_on_cgroup_v2(c: &mut Cluster) -> TestResult {
    let probe = c.write_device_probe()?;
    let id = c.sbatch_ok(&["--gres=mps:50", SCRIPT])?;
    let info = c.wait_job_done(id, JOB_END)?;
    let out = c.job_output(id);
    ensure(
        info.state() == "FAILED"
            && out.contains(&format!("job {id}"))
            && out.contains("cgroup v2")
            && out.contains("Flags=all_sharing")
            // What the user can do, typed with the node's own GPU type.
            && out.contains("as a whole GPU instead (--gres=gpu:a40:1)")
            && out.contains("--exclude="),
        format!("job {id} ended {} with:\n{out}", info.state()),
    )?;
    let srun = c.srun(&["--gres=mps:50", "sh", "-c", "echo ran"])?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&srun.stdout),
        String::from_utf8_lossy(&srun.stderr)
    );
    ensure(
        !srun.status.success() && text.contains("cgroup v2") && !text.contains("ran"),
        format!("srun share on cgroup v2: {}\n{text}", srun.status),
    )?;
    ensure(
        ledger(c).shares().next().is_none(),
        format!("a refused share was recorded:\n{}", state_text(c)),
    )?;
    // Whole GPUs are Slurm's business alone and still work, confined by
    // Slurm's device filter.
    let whole = c.sbatch_ok(&[
        "--gres=gpu:a40:1",
        &format!("--wrap=echo HELD=$SLURM_JOB_GPUS; sh {}", probe.display()),
    ])?;
    let info = c.wait_job_done(whole, JOB_END)?;
    let out = c.job_output(whole);
    let held = printed(c, whole).get("HELD").cloned().unwrap_or_default();
    ensure(
        info.state() == "COMPLETED"
            && out.contains(&format!("dev{held}=No_such_device_or_address"))
            && out.matches("Operation_not_permitted").count() == 3,
        format!("whole-GPU job {whole} ended {}:\n{out}", info.state()),
    )?;
    not_drained(c)
}

fn slurmd_crash(c: &mut Cluster) -> TestResult {
    let ids = start_shares(c, 2, 50)?;
    c.kill9_slurmd();
    c.restart_slurmd()?;
    for &id in &ids {
        ensure(
            c.job(id)?.state() == "RUNNING",
            format!("job {id} did not survive slurmd's restart"),
        )?;
        ensure(
            ledger(c).share(id).is_some(),
            format!("ledger lost job {id}:\n{}", state_text(c)),
        )?;
    }
    c.cancel_all()?;
    wait_for("the epilogs to release both jobs", SHORT, || {
        no_share_left(c)
    })
}

fn reconcile(c: &mut Cluster) -> TestResult {
    wait_for("the epilogs", SHORT, || no_share_left(c))?;
    // Records left by jobs that vanished without an epilog (e.g. a node
    // crash) fill every GPU, written the way the ledger writes records
    // (into its directory as it makes it, where no share ran before).
    let dir = c.dir.join("run/gpu-mps");
    gpushare::mps::ledger::Ledger::open(&dir, 0).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut state = ledger(c);
    for gpu in 0..4 {
        state.insert_share(ShareRecord {
            job: 999_990 + gpu,
            uid: 0,
            user: "root".into(),
            gpu,
            units: 90,
            since: 1,
            placed_by_slurm: false,
            memory_mib: None,
            clients: None,
            sluid: None,
        });
    }
    fs::write(dir.join("state"), state.to_json()).map_err(|e| e.to_string())?;
    // No GPU has room for 50 in the ledger: the prolog asks slurmctld and
    // drops what lies on the share's GPU (gpushare places it on GPU 0, the
    // first of the GPUs freed; Slurm, knowing nothing of these records, on
    // whichever it picks, and the prolog then finds that GPU overfull).
    let ids = start_shares(c, 1, 50)?;
    let gpu = gpus_of(c, &ids)?[0];
    ensure(
        testcluster::cluster::slurm_places_shares() || gpu == 0,
        format!("the vanished jobs' units still blocked GPU 0 (share on {gpu})"),
    )?;
    let log = c.syslog();
    ensure(
        log.contains("gpu-mps-prolog[")
            && log.contains(&format!(
                "job {}: dropped the record of a job no longer running: share job={}",
                ids[0],
                999_990 + gpu
            )),
        format!("syslog:\n{log}"),
    )?;
    ensure(
        !c.dir.join("run/gpu-mps/log").exists(),
        "the prolog wrote a log file into its state directory",
    )?;
    c.cancel_all()
}

/// `gpu-mps status` while 4 shares of 25 run: root reads the ledger, any
/// other user the world-readable copy the prolog publishes.
fn status(c: &mut Cluster) -> TestResult {
    let ids = start_shares(c, 4, 25)?;
    let gpus = gpus_of(c, &ids)?;
    let bin = testcluster::cluster::build_dir()?.join("gpu-mps");
    let conf = c.slurm_conf().with_file_name("gpu_mps.conf");
    let conf = conf.to_string_lossy();
    let table = c.run_ok(&bin.to_string_lossy(), &["status", "--conf", &conf])?;
    for (id, gpu) in ids.iter().zip(&gpus) {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("{gpu} ")))
            .unwrap_or_default();
        ensure(
            row.contains(&format!("{id}(root:25)")) && row.contains("25/100"),
            format!("GPU {gpu} row lacks job {id}:\n{table}"),
        )?;
    }
    let json = c.run_ok(
        &bin.to_string_lossy(),
        &["status", "--conf", &conf, "--json"],
    )?;
    let tool = c.run(
        "sh",
        &[
            "-c",
            &format!(
                "{} status --conf {conf} --json | python3 -m json.tool",
                bin.display()
            ),
        ],
    )?;
    ensure(
        tool.status.success(),
        format!(
            "python3 -m json.tool refused gpu-mps status --json: {json}\n{}",
            String::from_utf8_lossy(&tool.stderr)
        ),
    )?;
    let status: NodeStatus = serde_json::from_str(&json).map_err(|e| format!("{e}: {json}"))?;
    for (id, gpu) in ids.iter().zip(&gpus) {
        let share = status
            .gpus
            .iter()
            .find(|g| g.index == *gpu)
            .and_then(|g| g.shares.iter().find(|s| s.job == *id));
        ensure(
            share.is_some_and(|s| s.user == "root" && s.units == 25),
            format!("JSON lacks job {id} on GPU {gpu}: {json}"),
        )?;
    }
    let as_user = c.run_ok(
        "setpriv",
        &[
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            &bin.to_string_lossy(),
            "status",
            "--conf",
            &conf,
        ],
    )?;
    ensure(
        as_user == table,
        format!("a user sees another table:\n{as_user}\nroot sees:\n{table}"),
    )?;
    c.cancel_all()
}

/// The lines a step's tasks print: `GPU=`, `PCT=` and the probe's words,
/// one line per task; checks they agree on one GPU, 25 %, confined to it.
fn one_gpu_per_step(out: &str, tasks: usize) -> TestResult {
    let lines: Vec<BTreeMap<String, String>> = out
        .lines()
        .filter(|l| l.contains("dev0="))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|w| w.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
                .collect()
        })
        .collect();
    ensure(
        lines.len() == tasks,
        format!("expected {tasks} task lines:\n{out}"),
    )?;
    let gpu = lines[0].get("GPU").cloned().unwrap_or_default();
    let index: u32 = gpu.parse().map_err(|_| format!("no GPU told:\n{out}"))?;
    for l in &lines {
        ensure(
            l.get("GPU") == Some(&gpu) && l.get("PCT").map(String::as_str) == Some("25"),
            format!("tasks disagree or are told another share:\n{out}"),
        )?;
        for i in 0..4u32 {
            let want = if i == index {
                "No_such_device_or_address"
            } else {
                "Operation_not_permitted"
            };
            ensure(
                l.get(&format!("dev{i}")).map(String::as_str) == Some(want),
                format!("GPU {index}: expected dev{i}={want}:\n{out}"),
            )?;
        }
    }
    Ok(())
}

fn task_script(c: &Cluster) -> Result<String, String> {
    let probe = c.write_device_probe()?;
    Ok(format!(
        "echo GPU=$GPUSHARE_GPU PCT=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE $(sh {})",
        probe.display()
    ))
}

fn interactive_srun(c: &mut Cluster) -> TestResult {
    let script = task_script(c)?;
    let out = c.srun(&["-n3", "--gres=mps:25", "sh", "-c", &script])?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    ensure(
        out.status.success(),
        format!(
            "srun failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        ),
    )?;
    one_gpu_per_step(&text, 3)
}

fn salloc_steps(c: &mut Cluster) -> TestResult {
    let script = task_script(c)?;
    // Two steps in one allocation: the second finds the first's GPU.
    // Between them, the status copy users read as it stands.
    let copy = c.dir.join("run/gpu-mps-mps/state");
    let seen = c.dir.join("status-between-steps.json");
    let steps = format!(
        "srun -n2 sh -c '{script}' && cat {} > {} && srun -n1 sh -c '{script}'",
        copy.display(),
        seen.display()
    );
    let limit = JOB_LONG.scaled_secs().to_string();
    let out = c.run(
        "timeout",
        &[&limit, "salloc", "-n2", "--gres=mps:25", "sh", "-c", &steps],
    )?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    ensure(
        out.status.success(),
        format!(
            "salloc failed ({}): {text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    )?;
    one_gpu_per_step(&text, 3)?;
    // The first step's two MPS clients are counted in the ledger by the
    // SPANK plugin, and users see them in the copy as soon as they count.
    let json = fs::read_to_string(&seen).map_err(|e| format!("{}: {e}", seen.display()))?;
    let status: NodeStatus = serde_json::from_str(&json).map_err(|e| format!("{e}: {json}"))?;
    let clients: Vec<Option<u32>> = status
        .gpus
        .iter()
        .flat_map(|g| g.shares.iter().map(|s| s.clients))
        .collect();
    ensure(
        clients == [Some(2)],
        format!("the status copy lags the ledger: clients {clients:?} in {json}"),
    )
}

fn srun_pty(c: &mut Cluster) -> TestResult {
    let script = task_script(c)?;
    // A terminal for srun --pty, as a user's shell would give it.
    let cmd = format!("srun --pty --gres=mps:25 sh -c '{script}'");
    let limit = JOB_LONG.scaled_secs().to_string();
    let out = c.run("timeout", &[&limit, "script", "-qec", &cmd, "/dev/null"])?;
    // The terminal adds carriage returns, and a NUL that script(1) echoes as `^@`.
    let text: String = String::from_utf8_lossy(&out.stdout)
        .replace("^@", "")
        .chars()
        .filter(|ch| *ch == '\n' || !ch.is_control())
        .collect();
    ensure(
        out.status.success(),
        format!(
            "srun --pty failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        ),
    )?;
    one_gpu_per_step(&text, 1)
}

/// How long every other round of [`rewrite_in_place`] leaves the file empty.
const LEFT_EMPTY_FOR: Duration = Duration::from_millis(40);
/// The pause between [`rewrite_in_place`]'s 3-byte writes.
const BETWEEN_CHUNKS: Duration = Duration::from_millis(1);

/// Rewrites `path` in place with `text` until `stop`, as `cat >` or a
/// config tool that truncates first would, slowly: a few bytes at a time,
/// and every other round left empty for a while. Returns the rounds.
///
/// The pauses pace the writer so that readers meet the file empty and
/// half-written; they are not timeouts and do not scale.
fn rewrite_in_place(
    path: &Path,
    text: &str,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<u32, String> {
    use std::io::Write;
    use std::sync::atomic::Ordering;
    let mut rounds = 0;
    while !stop.load(Ordering::Relaxed) {
        let mut file = fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if rounds % 2 == 1 {
            sleep(LEFT_EMPTY_FOR);
        }
        for chunk in text.as_bytes().chunks(3) {
            file.write_all(chunk)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            sleep(BETWEEN_CHUNKS);
        }
        rounds += 1;
    }
    Ok(rounds)
}

/// The directories and files a node program could have made for a second
/// ledger: the cluster's run/ and top directory, and the default StateDir.
fn state_places(c: &Cluster) -> Vec<String> {
    let mut out = Vec::new();
    for dir in [c.dir.clone(), c.dir.join("run")] {
        if let Ok(entries) = fs::read_dir(&dir) {
            out.extend(
                entries
                    .filter_map(|e| e.ok())
                    .map(|e| e.path().display().to_string()),
            );
        }
    }
    out.sort();
    out
}

fn conf_rewritten_in_place(c: &mut Cluster) -> TestResult {
    rewritten_in_place(c, false)
}

/// The same on a node that has recorded no configuration yet (its ledger
/// pointer and StateDir's record gone, as at its first use): the first
/// prologs meet the half-written file with nothing to fall back on and
/// refuse their shares, each with the reason in its output; their
/// epilogs have nothing to release and never drain the node.
fn conf_rewritten_in_place_at_first_use(c: &mut Cluster) -> TestResult {
    rewritten_in_place(c, true)
}

fn rewritten_in_place(c: &mut Cluster, first_use: bool) -> TestResult {
    let conf = c.slurm_conf().with_file_name("gpu_mps.conf");
    let text = fs::read_to_string(&conf).map_err(|e| format!("{}: {e}", conf.display()))?;
    let first = if first_use {
        c.cancel_all()?;
        wait_for("the epilogs", SHORT, || no_share_left(c))?;
        let records = Path::new(gpushare::mps::in_force::NODE_RECORDS_DIR);
        for file in gpushare::mps::in_force::pointer_files(records, &conf) {
            let _ = fs::remove_file(file);
        }
        let record = c
            .dir
            .join("run/gpu-mps")
            .join(gpushare::mps::in_force::RECORD_FILE);
        match fs::remove_file(&record) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(format!("{}: {e}", record.display()))
            }
            _ => {}
        }
        None
    } else {
        // One share placed before the edits: the node knows its configuration.
        let ids = start_shares_running(c, 1, 10, "--wrap=echo GPU=$GPUSHARE_GPU; sleep 300")?;
        ids.first().copied()
    };
    let places_before = state_places(c);
    let default_ledger = Path::new("/run/gpu-mps/state");
    let default_before = fs::metadata(default_ledger).and_then(|m| m.modified()).ok();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut max_used = 0;
    let (shares, cpu_jobs, rounds) = std::thread::scope(|scope| {
        let writer = scope.spawn(|| rewrite_in_place(&conf, &text, &stop));
        let submitted = (|| -> Result<(Vec<u32>, Vec<u32>), String> {
            let mut shares = Vec::new();
            let mut cpu_jobs = Vec::new();
            // 25 units: 15 fit beside the first share's 10, and Slurm
            // admits no more, so none is refused for want of room.
            for _ in 0..8 {
                for script in ["sleep 2", "true"] {
                    let wrap = format!("--wrap=echo GPU=$GPUSHARE_GPU; {script}");
                    shares.push(c.sbatch_ok(&["--gres=mps:25", &wrap])?);
                }
                cpu_jobs.push(c.sbatch_ok(&["--wrap=echo cpu"])?);
            }
            let all: Vec<u32> = shares.iter().chain(&cpu_jobs).copied().collect();
            wait_for("every job to end", EVERY_JOB_ENDED, || {
                // Meanwhile: no GPU of the node's ledger over-filled.
                let used = ledger(c).per_gpu(4, 100).iter().map(|g| g.used_units).max();
                max_used = max_used.max(used.unwrap_or(0));
                all.iter()
                    .all(|&id| c.job(id).is_ok_and(|j| j.is_done()))
                    .then_some(())
            })?;
            Ok((shares, cpu_jobs))
        })();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let rounds = writer
            .join()
            .map_err(|_| "the writer panicked".to_owned())?;
        let (shares, cpu_jobs) = submitted?;
        Ok::<_, String>((shares, cpu_jobs, rounds?))
    })?;
    // The file is whole again, as it was.
    testcluster::replace_conf(&conf, &text)?;
    not_drained(c)?;
    for &id in &cpu_jobs {
        let state = c.job(id)?.state().to_owned();
        ensure(state == "COMPLETED", format!("CPU job {id} ended {state}"))?;
    }
    let mut refused = 0;
    for &id in &shares {
        let state = c.job(id)?.state().to_owned();
        let out = c.job_output(id);
        // At first use a share whose prolog met the file half-written is
        // refused with the reason (nothing recorded to fall back on).
        let told = state == "FAILED"
            && out.contains(&format!("gpu_mps: job {id} on node"))
            && out.contains("no earlier configuration is recorded on this node");
        refused += usize::from(told);
        ensure(
            (state == "COMPLETED" && printed(c, id).contains_key("GPU")) || (first_use && told),
            format!("share {id} ended {state}: {out:?}"),
        )?;
    }
    ensure(max_used <= 100, format!("a GPU held {max_used} units"))?;
    let places_after = state_places(c);
    let mut places_before = places_before;
    if first_use {
        // The configured StateDir (and its MPS directories) may be made now.
        for made in ["run/gpu-mps", "run/gpu-mps-mps"] {
            let made = c.dir.join(made).display().to_string();
            if places_after.contains(&made) && !places_before.contains(&made) {
                places_before.push(made);
            }
        }
        places_before.sort();
    }
    ensure(
        places_after == places_before,
        format!("a second state directory: {places_before:?} became {places_after:?}"),
    )?;
    // Nothing written in the default StateDir meanwhile (where a file cut
    // before its StateDir line sends a node program).
    let default_after = fs::metadata(default_ledger).and_then(|m| m.modified()).ok();
    ensure(
        default_after == default_before,
        format!("{} was written during the test", default_ledger.display()),
    )?;
    // The overlap this test relies on: node programs read the file while it
    // was being written, and said so.
    // (Or, at first use, a share refused for it.)
    let syslog = c.syslog();
    ensure(
        syslog.contains("last good configuration") || refused > 0,
        format!("no node program read the file mid-write in {rounds} rewrites; syslog:\n{syslog}"),
    )?;
    let still = ledger(c);
    ensure(
        first.is_none_or(|id| still.share(id).is_some())
            && still.shares().count() == usize::from(first.is_some()),
        format!("the ledger lost track: {}", state_text(c)),
    )?;
    c.cancel_all()
}

/// A share on a node whose gpu_mps.conf is cut off mid-line: it fails
/// with the refusal's reason in its output, its epilog exits 0 (it holds
/// nothing), the node is not drained and a CPU job runs. First at the
/// node's first use (no configuration recorded: its pointer gone, as after
/// a reboot), then beside the last good copy the node recorded.
fn cut_conf_refusal(c: &mut Cluster) -> TestResult {
    use gpushare::mps::in_force::{pointer_files, NODE_RECORDS_DIR};
    c.cancel_all()?;
    wait_for("the epilogs", SHORT, || no_share_left(c))?;
    let conf = c.slurm_conf().with_file_name("gpu_mps.conf");
    let text = fs::read_to_string(&conf).map_err(|e| format!("{}: {e}", conf.display()))?;
    let cut_at = text.find("StateDir=").map_or(text.len() / 2, |i| i + 12);
    let cut = text[..cut_at].trim_end_matches('\n').to_owned();
    let refused_share = |c: &Cluster, want: &str| -> Result<u32, String> {
        let id = c.sbatch_ok(&["--gres=mps:25", "--wrap=echo GPU=$GPUSHARE_GPU"])?;
        let info = c.wait_job_done(id, JOB_END)?;
        // Where there is no configuration there is no SyslogSocket: the
        // node programs log to the machine's syslog, not the cluster's.
        // slurmd says whether the share's epilog failed.
        let slurmd = c.log("slurmd");
        let node = c.run_ok("sinfo", &["-h", "-N", "-o", "%T"])?;
        ensure(
            !slurmd.contains(&format!("[job {id}] epilog failed")) && !node.contains("drain"),
            format!("share {id}'s epilog failed, the node is {node}:\n{slurmd}"),
        )?;
        let out = c.job_output(id);
        ensure(
            info.state() == "FAILED"
                && out.contains(&format!("gpu_mps: job {id} on node"))
                && out.contains(want)
                && !out.contains("GPU=")
                && !out.contains("Prolog did not run"),
            format!("share {id} ended {} with:\n{out}", info.state()),
        )?;
        let cpu = c.sbatch_ok(&["--wrap=echo cpu"])?;
        let info = c.wait_job_done(cpu, JOB_END)?;
        ensure(
            info.state() == "COMPLETED",
            format!("CPU job {cpu} ended {}", info.state()),
        )?;
        Ok(id)
    };
    let result = (|| {
        for file in pointer_files(Path::new(NODE_RECORDS_DIR), &conf) {
            let _ = fs::remove_file(file);
        }
        testcluster::replace_conf(&conf, &cut)?;
        refused_share(c, "no earlier configuration is recorded on this node")?;
        // Whole again: a share runs and the node records the file.
        testcluster::replace_conf(&conf, &text)?;
        start_shares_running(c, 1, 10, "--wrap=echo GPU=$GPUSHARE_GPU; sleep 300")?;
        c.cancel_all()?;
        wait_for("the epilogs", SHORT, || no_share_left(c))?;
        // Cut again, by a rename (not being written): the last good copy
        // serves, and new shares are refused with the file's fault.
        testcluster::replace_conf(&conf, &cut)?;
        refused_share(c, "new shares are refused on this node until it is fixed").map(|_| ())
    })();
    testcluster::replace_conf(&conf, &text)?;
    result
}

/// A node of 4 a40 shared in MPS slices and 2 h100 held whole, set up as
/// for [`ClusterSpec::mps_node`] where Slurm places shares; with
/// `zero_lines`, the h100s' `Count=0` mps lines that `gpu-mps config
/// --whole h100:2` prints.
fn mixed_node(zero_lines: bool) -> ClusterSpec {
    let mut spec = ClusterSpec::mps_node();
    spec.gpus.push(GpuSpec {
        gpu_type: "h100".into(),
        count: 2,
    });
    spec.unshared_mps_lines = zero_lines;
    spec
}

/// The text the prolog logs for a node whose GPUs held whole have no mps
/// line ([`gpushare::shared::booking::MpsBooking::stacking_warning`]).
const NO_ZERO_LINES: &str = "an mps line for each GPU not shared";

/// Slurm's own limitation (23.11 to 26.05): a GPU without an mps line gets
/// an mps record that shares one GPU at a time (Slurm's default for mps),
/// and the whole node follows it: shares stack on the GPU already shared
/// until it is full and the rest wait, although three a40 are free. The
/// prolog's log says what to add.
fn stacked_without_zero_lines(c: &mut Cluster) -> TestResult {
    let ids: Vec<u32> = (0..8)
        .map(|_| c.sbatch_ok(&["--gres=mps:25", SCRIPT]))
        .collect::<Result<_, _>>()?;
    for &id in &ids {
        c.wait_considered(id, JOB_START)?;
    }
    let mut running = Vec::new();
    let mut waiting = Vec::new();
    for &id in &ids {
        let info = c.job(id)?;
        match info.state() {
            "RUNNING" => running.push(id),
            "PENDING" => {
                // For Resources, or behind one that waits for them
                // (Priority), once a pass has given a reason (24.05 shows
                // None until backfill looks).
                let mut last = String::new();
                let reason = wait_for(&format!("job {id} to be given a reason"), SHORT, || {
                    last = c.job(id).ok()?.get("Reason").unwrap_or_default().to_owned();
                    (last == "Resources" || last == "Priority").then(|| last.clone())
                })
                .map_err(|e| format!("{e} (last {last:?})"))?;
                waiting.push((id, reason));
            }
            other => return Err(format!("job {id} is {other}")),
        }
    }
    wait_for("the running jobs' output", SHORT, || {
        running
            .iter()
            .all(|&id| printed(c, id).contains_key("GPU"))
            .then_some(())
    })?;
    let gpus = gpus_of(c, &running)?;
    ensure(
        running.len() == 4 && gpus.iter().all(|&g| Some(&g) == gpus.first()),
        format!(
            "{} of 8 shares of 25 running, on GPUs {gpus:?}; waiting: {waiting:?}\n{}",
            running.len(),
            c.run_ok("scontrol", &["show", "node", "-d"])
                .unwrap_or_default()
        ),
    )?;
    let log = c.syslog();
    ensure(
        log.contains(NO_ZERO_LINES)
            && log.contains("Name=mps Count=0 File=")
            && log.contains("/nvidia4 Flags=all_sharing"),
        format!("the prolog did not say what to add; syslog:\n{log}"),
    )?;
    c.cancel_all()
}

/// The same node with a `Count=0 ... Flags=all_sharing` mps line for each
/// h100, before the a40s' lines: Slurm spreads the eight shares, two per
/// a40, and the prolog has nothing to say about it.
fn spread_with_zero_lines(c: &mut Cluster) -> TestResult {
    let ids = start_shares(c, 8, 25)?;
    let gpus = gpus_of(c, &ids)?;
    ensure(
        per_gpu_count(&gpus) == [2, 2, 2, 2],
        format!("8 shares of 25 per GPU: {:?}", per_gpu_count(&gpus)),
    )?;
    let log = c.syslog();
    ensure(
        !log.contains(NO_ZERO_LINES) && !log.contains("will stack them"),
        format!("syslog:\n{log}"),
    )?;
    c.cancel_all()
}
