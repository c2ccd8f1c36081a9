//! Each share's use of its GPU in the node's metrics: the node timer's
//! NVML query replaced by the stand-in (`ShareUsage=`), which prints
//! recorded figures for the pids of real Slurm jobs; the mapping of each
//! pid to its job goes through the kernel's own cgroup of the process.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use gpushare::mps::daemon::cgroup_is_jobs;
use gpushare::mps::usage::{
    gpu_block, GpuAnswer, GpuSample, ProcessList, ProcessSample, UtilSample,
};
use testcluster::cluster::cgroup_v2;
use testcluster::standin::{install_nvml_usage, NVML_USAGE};
use testcluster::time::Timeout;
use testcluster::users::TestUser;
use testcluster::{ensure, Cluster, ClusterSpec, Suite, TestResult};

use super::{
    bin_dir, calls, cancel_and_wait_stopped, daemons, gpu_mps, ledger, pipe, standin, user_output,
    user_share,
};
use testcluster::cluster::wait_for;
use testcluster::process::sleep_of_job;
use testcluster::time::{JOB_LONG, JOB_START, SHORT};

/// The node timer's run while NVML hangs on one GPU: its 5 s deadline and
/// the process starts around it, never the stand-in's sleep (1000 s).
const TIMER_WITH_A_HUNG_GPU: Timeout = Timeout::secs(30);

/// This file's tests: on a cluster of their own, whose gpu_mps.conf
/// writes metrics and names the stand-in NVML query.
pub fn tests(suite: Suite) -> Suite {
    let mut spec: ClusterSpec = super::spec();
    for (name, text) in &mut spec.extra_conf_files {
        if name == "gpu_mps.conf" {
            text.push_str(&format!(
                "MetricsFile={{cluster}}/run/gpushare.prom\n\
                 ShareUsage={{cluster}}/mps-bin/{NVML_USAGE}\n"
            ));
        }
    }
    suite
        .test_on(
            "each_shares_gpu_memory_and_sm_use_is_its_own_processes_and_a_hung_gpu_is_skipped",
            spec.clone(),
            shares_use,
        )
        .test_on(
            "an_ended_jobs_peak_and_mean_use_go_to_its_admin_comment_and_the_histograms",
            spec.clone(),
            ended_use,
        )
        .test_on(
            "jobstats_admin_comment_stays_whole_in_either_order_and_advise_finds_the_figures",
            spec,
            jobstats_comment,
        )
}

const MIB: u64 = 1 << 20;

/// Job `job`'s `sleep`: its script prints its line, then starts it, so the
/// line is seen before the process runs.
fn wait_sleep(job: u32) -> Result<u32, String> {
    wait_for(&format!("job {job}'s sleep process"), SHORT, || {
        sleep_of_job(job)
    })
}

fn uid_of(pid: u32) -> Option<u32> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A cgroup made by the test that mimics Slurm's layout where Slurm does
/// not put jobs (as a user could in a subtree systemd delegates to them),
/// holding `pid`, in the hierarchy Slurm uses here; removed on drop.
struct Forged {
    top: PathBuf,
    leaf: PathBuf,
}

impl Forged {
    fn new(pid: u32, uid: u32, job_dir: &str) -> Result<Self, String> {
        let name = format!("gpushare-forged-{}", std::process::id());
        let (top, below) = if cgroup_v2() {
            (
                PathBuf::from("/sys/fs/cgroup").join(name),
                format!("system.slice/slurmstepd.scope/{job_dir}/step_0/user/task_0"),
            )
        } else {
            (
                PathBuf::from("/sys/fs/cgroup/freezer").join(name),
                format!("slurm/uid_{uid}/{job_dir}/step_0/task_0"),
            )
        };
        let leaf = top.join(below);
        fs::create_dir_all(&leaf).map_err(|e| format!("{}: {e}", leaf.display()))?;
        let forged = Self { top, leaf };
        fs::write(forged.leaf.join("cgroup.procs"), pid.to_string())
            .map_err(|e| format!("moving {pid} into {}: {e}", forged.leaf.display()))?;
        Ok(forged)
    }
}

impl Drop for Forged {
    fn drop(&mut self) {
        // Empty by now (its process killed and reaped): leaf first.
        let mut dir: &Path = &self.leaf;
        while dir.starts_with(&self.top) {
            if let Err(e) = fs::remove_dir(dir) {
                eprintln!("{}: not removed: {e}", dir.display());
            }
            match dir.parent() {
                Some(parent) => dir = parent,
                None => break,
            }
        }
    }
}

/// A process of the stand-in's figures: its memory and SM samples.
struct Figures {
    pid: u32,
    mib: u64,
    sm: Vec<u32>,
}

/// The pid NVML charges GPU `gpu`'s MPS work to: its server's (the
/// daemon's, where no server runs).
fn server_pid(c: &Cluster, gpu: u32) -> Result<u32, String> {
    let daemons = daemons(c, gpu);
    gpushare::mps::daemon::servers_of(&pipe(c, gpu), &daemons)
        .first()
        .or(daemons.first())
        .copied()
        .ok_or_else(|| format!("GPU {gpu} runs no MPS daemon"))
}

/// The stand-in's text: a block per GPU of `figures` (by gpushare's GPU,
/// which is the device minor here), samples stamped from `stamp`.
fn blocks(figures: &BTreeMap<u32, Vec<Figures>>, stamp: u64) -> BTreeMap<u32, String> {
    figures
        .iter()
        .map(|(&gpu, procs)| {
            let mut ts = stamp;
            let sample = GpuSample {
                index: gpu,
                minor: Some(gpu),
                used_bytes: Some(procs.iter().map(|p| p.mib * MIB).sum()),
                total_bytes: Some(48 << 30),
                processes: procs
                    .iter()
                    .map(|p| ProcessSample {
                        pid: p.pid,
                        memory_bytes: Some(p.mib * MIB),
                        list: ProcessList::Compute,
                    })
                    .collect(),
                utilization: Some(
                    procs
                        .iter()
                        .flat_map(|p| p.sm.iter().map(move |&sm| (p.pid, sm)))
                        .map(|(pid, sm_percent)| {
                            ts += 1;
                            UtilSample {
                                pid,
                                sm_percent,
                                timestamp_us: ts,
                            }
                        })
                        .collect(),
                ),
            };
            (gpu, gpu_block(&GpuAnswer::Answered(sample)))
        })
        .collect()
}

/// One sample line of the metrics file, if written.
fn series<'a>(text: &'a str, name: &str, job: u32, gpu: u32) -> Option<&'a str> {
    let head = format!("{name}{{job=\"{job}\",gpu=\"{gpu}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(head.as_str()))
}

/// Alice runs two shares (A and B), bob one (C), 50 units each. The
/// stand-in reports each job's `sleep` with its figures, and one more
/// process of alice's outside Slurm, in a cgroup named like B's under a
/// tree of its own, with 4 GiB and 90 % on B's GPU; the utilisation
/// samples of the shares' work come under each GPU's MPS server, as NVML
/// gives them on a real GPU. The metrics file shows each share's memory,
/// by job and GPU and never with a user label, and no SM use for any
/// share (none is measured, none reads 0); the forged process counts for no
/// one (the rule that finds `job_<id>` anywhere in the path takes it).
/// The next run gets each GPU's samples from where the last ended. With
/// NVML hung on C's GPU, the timer ends within its deadline, names that
/// GPU, and keeps A's and B's figures only.
fn shares_use(c: &mut Cluster) -> TestResult {
    standin(c)?;
    install_nvml_usage(&bin_dir(c))?;
    let text_file = bin_dir(c).join("nvml-usage");
    let metrics = c.dir.join("run/gpushare.prom");
    let alice = TestUser::create(c, "gpushare-alice")?;
    let bob = TestUser::create(c, "gpushare-bob")?;
    let a = user_share(c, &alice, 50)?;
    let b = user_share(c, &alice, 50)?;
    let cj = user_share(c, &bob, 50)?;
    let shares = ledger(c);
    let gpu = |job: u32| {
        shares
            .share(job)
            .map(|s| s.gpu)
            .ok_or_else(|| format!("job {job} has no share"))
    };
    let (gpu_a, gpu_b, gpu_c) = (gpu(a)?, gpu(b)?, gpu(cj)?);
    ensure(
        gpu_c != gpu_a && gpu_c != gpu_b,
        format!("bob's share beside alice's: GPUs {gpu_a} {gpu_b} {gpu_c}"),
    )?;
    // slurmstepd is not slurmd's child: each job's `sleep`, found by the
    // job id (this cluster's own, see FirstJobId) in its environment.
    let pid_of = wait_sleep;
    let (pa, pb, pc) = (pid_of(a)?, pid_of(b)?, pid_of(cj)?);
    let alice_uid = uid_of(pa).ok_or("alice's uid")?;
    // Alice's process outside Slurm, in a cgroup named like B's: one
    // process (setpriv execs sleep), so that killing it empties the cgroup.
    let mut stray = c
        .command("setpriv")
        .args([
            &format!("--reuid={}", alice.uid),
            &format!("--regid={}", alice.gid),
            "--init-groups",
            "--",
            "sleep",
            "300",
        ])
        .spawn()
        .map_err(|e| format!("alice's sleep: {e}"))?;
    let mut forged = None;
    let result = (|| {
        let b_dir = shares
            .share(b)
            .and_then(|s| s.sluid.clone())
            .unwrap_or_else(|| format!("job_{b}"));
        forged = Some(Forged::new(stray.id(), alice_uid, &b_dir)?);
        let stray_cgroup = fs::read_to_string(format!("/proc/{}/cgroup", stray.id()))
            .map_err(|e| e.to_string())?;
        let sluid = shares.share(b).and_then(|s| s.sluid.clone());
        ensure(
            cgroup_is_jobs(&stray_cgroup, b, sluid.as_deref()),
            format!("the forged cgroup does not look like job {b}'s: {stray_cgroup}"),
        )?;
        let mut figures: BTreeMap<u32, Vec<Figures>> = BTreeMap::new();
        let mut add = |gpu, pid, mib, sm: &[u32]| {
            figures.entry(gpu).or_default().push(Figures {
                pid,
                mib,
                sm: sm.to_vec(),
            })
        };
        // As NVML answers under MPS (an H200, driver 580): each client
        // with its memory and no utilisation sample; the samples, all of
        // the GPU's shares' work together, under the server's pid.
        let server = |g: u32| server_pid(c, g);
        add(gpu_a, pa, 1000, &[]);
        add(gpu_b, pb, 500, &[]);
        add(gpu_c, pc, 2048, &[]);
        add(gpu_b, stray.id(), 4096, &[90]);
        add(gpu_a, server(gpu_a)?, 66, &[20, 30]);
        if gpu_b != gpu_a {
            add(gpu_b, server(gpu_b)?, 66, &[10]);
        }
        add(gpu_c, server(gpu_c)?, 66, &[40]);
        let text: String = blocks(&figures, 1_000).into_values().collect();
        fs::write(&text_file, &text).map_err(|e| e.to_string())?;
        let timer = gpu_mps(c, &["metrics", "--write"])?;
        let said = String::from_utf8_lossy(&timer.stderr).into_owned();
        let written = fs::read_to_string(&metrics).unwrap_or_default();
        let mem = |job, gpu| series(&written, "gpushare_share_memory_used_bytes", job, gpu);
        let sm = |job, gpu| series(&written, "gpushare_share_sm_utilization", job, gpu);
        let share_a = (1000 * MIB).to_string();
        ensure(
            timer.status.success()
                && mem(a, gpu_a) == Some(share_a.as_str())
                && mem(b, gpu_b) == Some((500 * MIB).to_string().as_str())
                && mem(cj, gpu_c) == Some((2048 * MIB).to_string().as_str())
                // No client has a sample: no share's SM use is known, and
                // none reads 0.
                && [(a, gpu_a), (b, gpu_b), (cj, gpu_c)]
                    .iter()
                    .all(|&(job, gpu)| sm(job, gpu).is_none())
                && !written.lines().any(|l| {
                    (l.starts_with("gpushare_share_memory") || l.starts_with("gpushare_share_sm"))
                        && l.contains("user=")
                })
                && written.contains("user=\"gpushare-alice\""),
            format!(
                "metrics after the timer ({}): {said}\n{written}\nthe stand-in printed:\n{text}\n\
                 cgroups: A {} C {} stray {stray_cgroup}",
                timer.status,
                fs::read_to_string(format!("/proc/{pa}/cgroup")).unwrap_or_default(),
                fs::read_to_string(format!("/proc/{pc}/cgroup")).unwrap_or_default(),
            ),
        )?;
        // NVML hangs on C's GPU: the others' blocks come first.
        let mut hung = blocks(&figures, 2_000);
        let last = hung.remove(&gpu_c).unwrap_or_default();
        let cut = last.lines().next().unwrap_or_default();
        let text = format!("{}{cut}\nhang\n", hung.into_values().collect::<String>());
        fs::write(&text_file, &text).map_err(|e| e.to_string())?;
        let started = Instant::now();
        let timer = gpu_mps(c, &["metrics", "--write"])?;
        let took = started.elapsed();
        let said = String::from_utf8_lossy(&timer.stderr).into_owned();
        let written = fs::read_to_string(&metrics).unwrap_or_default();
        let mem = |job, gpu| series(&written, "gpushare_share_memory_used_bytes", job, gpu);
        let since = calls(c)
            .into_iter()
            .filter(|l| l.starts_with("usage args="))
            .collect::<Vec<_>>();
        ensure(
            timer.status.success()
                && took < TIMER_WITH_A_HUNG_GPU.scaled()
                && said.contains(&format!("GPU {gpu_c}: no answer from NVML"))
                && said.contains("did not finish within 5 s")
                && mem(a, gpu_a) == Some(share_a.as_str())
                && mem(cj, gpu_c).is_none()
                && since.len() == 2
                && since[1].contains("--since")
                && since[1].contains(&format!("{gpu_a}=10")),
            format!(
                "the timer with NVML hung on GPU {gpu_c} ({}, {took:?}): {said}\n{written}\n\
                 the stand-in's calls: {since:?}",
                timer.status
            ),
        )
    })();
    let _ = stray.kill();
    let _ = stray.wait();
    drop(forged);
    let _ = fs::remove_file(&text_file);
    result.and(cancel_and_wait_stopped(c))
}

/// Two runs of the node timer with the stand-in giving `figures`
/// (samples stamped 1000 and 2000), then NVML answering for no GPU, so
/// that each job's figures stay those of the two runs.
fn sampled_twice(
    c: &Cluster,
    text_file: &Path,
    figures: &BTreeMap<u32, Vec<Figures>>,
) -> TestResult {
    for stamp in [1_000, 2_000] {
        let text: String = blocks(figures, stamp).into_values().collect();
        fs::write(text_file, &text).map_err(|e| e.to_string())?;
        let timer = gpu_mps(c, &["metrics", "--write"])?;
        ensure(
            timer.status.success(),
            format!("the timer: {}", String::from_utf8_lossy(&timer.stderr)),
        )?;
    }
    let silent: String = (0..4)
        .map(|g| format!("gpu {g} {g} err quiet\nend {g}\n"))
        .collect();
    fs::write(text_file, silent).map_err(|e| e.to_string())
}

/// `gpu-qos advise --json` over the last hour as `user`: its report read
/// and as printed.
fn advised_to(c: &Cluster, user: &TestUser) -> Result<(serde_json::Value, String), String> {
    let bin = testcluster::cluster::build_dir()?.join("gpu-qos");
    let args = ["advise", "--json", "--since", "now-1hours"];
    let out = user.run(c, None, &bin.to_string_lossy(), &args)?;
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let json = serde_json::from_str(&report).map_err(|e| {
        format!(
            "gpu-qos advise: {e}: {report}{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    Ok((json, report))
}

/// The accounting's record of job `job` (`123`, or `120_1` for an
/// array's task): `sacct -X -n -P -o FIELDS`.
/// Both comments of a job, as `accounted` reads them.
const COMMENTS: &str = "AdminComment,SystemComment";

fn accounted(c: &Cluster, job: &str, fields: &str) -> String {
    c.run("sacct", &["-X", "-n", "-P", "-o", fields, "-j", job])
        .map(|o| String::from_utf8_lossy(&o.stdout).trim_end().to_owned())
        .unwrap_or_default()
}

/// Alice's share (25 units, 12 GiB) and her job holding a GPU whole run
/// through two runs of the node timer, the stand-in giving each job's
/// `sleep` its figures; the share's `AdminComment` holds the site's words.
/// Once both are cancelled, the timer's next runs write each job's peak
/// memory, its limit, its mean SM use and the number of samples in its
/// `AdminComment` (the share's in its `SystemComment`: the site's words
/// are left whole), as `gpu-qos advise` reads them, and the metrics file
/// counts them by QOS and size.
fn ended_use(c: &mut Cluster) -> TestResult {
    standin(c)?;
    install_nvml_usage(&bin_dir(c))?;
    let text_file = bin_dir(c).join("nvml-usage");
    let metrics = c.dir.join("run/gpushare.prom");
    let alice = TestUser::create(c, "gpushare-alice")?;
    let share = user_share(c, &alice, 25)?;
    let whole = alice.sbatch(
        c,
        &[
            &format!("--output={}/%j.out", alice.home.display()),
            "--gres=gpu:1",
            super::SCRIPT,
        ],
    )?;
    c.wait_job_state(whole, &["RUNNING"], JOB_LONG)?;
    wait_for("the whole-GPU job's output", JOB_START, || {
        user_output(&alice, whole).contains("GPU=").then_some(())
    })?;
    // An array of two shares: one task's raw id is the array's, by which
    // sacct and sacctmgr name every task of it.
    let array = alice.sbatch(
        c,
        &[
            &format!("--output={}/%A_%a.out", alice.home.display()),
            "--array=0-1",
            "--gres=mps:25",
            super::SCRIPT,
        ],
    )?;
    let tasks: Vec<(u32, u32)> = wait_for("the array's two tasks running", JOB_LONG, || {
        let out = c
            .run(
                "squeue",
                &["-h", "-r", "-j", &array.to_string(), "-o", "%A %K %T"],
            )
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut tasks: Vec<(u32, u32)> = text
            .lines()
            .filter(|l| l.ends_with(" RUNNING"))
            .filter_map(|l| {
                let mut w = l.split(' ');
                Some((w.next()?.parse().ok()?, w.next()?.parse().ok()?))
            })
            .filter(|&(raw, _)| sleep_of_job(raw).is_some())
            .collect();
        tasks.sort_by_key(|t| t.1);
        (tasks.len() == 2).then_some(tasks)
    })?;
    let held = ledger(c);
    let gpu_s = held.share(share).map(|s| s.gpu).ok_or("no share")?;
    let gpu_w = held
        .whole_holder(whole)
        .and_then(|w| w.gpus.first().copied())
        .ok_or_else(|| format!("job {whole} holds no GPU whole in the ledger"))?;
    let pid_of = wait_sleep;
    let (ps, pw) = (pid_of(share)?, pid_of(whole)?);
    c.run(
        "scontrol",
        &[
            "update",
            &format!("jobid={share}"),
            "AdminComment=site words",
        ],
    )?;
    let result = (|| {
        let mut figures: BTreeMap<u32, Vec<Figures>> = BTreeMap::new();
        // The whole-GPU job uses a tenth of its GPU: it is told a share
        // would do. The shares' work is sampled under their GPUs' MPS
        // servers, as NVML gives it on a real GPU: no share's SM use is
        // known, so none is told a smaller share.
        let mut each = vec![(gpu_s, ps, 1000, vec![]), (gpu_w, pw, 6000, vec![10])];
        let mut task_gpus = Vec::new();
        for (&(raw, _), mib) in tasks.iter().zip([2000, 3000]) {
            let gpu = held.share(raw).map(|s| s.gpu).ok_or("no share of a task")?;
            let pid = sleep_of_job(raw).ok_or("no sleep of a task")?;
            each.push((gpu, pid, mib, vec![]));
            task_gpus.push(gpu);
        }
        let mut share_gpus: Vec<u32> = task_gpus.iter().copied().chain([gpu_s]).collect();
        share_gpus.sort_unstable();
        share_gpus.dedup();
        for gpu in share_gpus {
            each.push((gpu, server_pid(c, gpu)?, 66, vec![4, 6]));
        }
        for (gpu, pid, mib, sm) in each {
            figures
                .entry(gpu)
                .or_default()
                .push(Figures { pid, mib, sm });
        }
        // From now on NVML answers for no GPU: the running task's figures
        // stay those of the two runs.
        sampled_twice(c, &text_file, &figures)?;
        // Every job but the task whose raw id is the array's ends first,
        // and its figures are recorded and the node done with them; only
        // then does that task end, whose record must not reach them.
        let lead = tasks.iter().position(|t| t.0 == array).unwrap_or(1);
        let (lead_raw, lead_task) = tasks[lead];
        let first: Vec<String> = tasks
            .iter()
            .filter(|t| t.0 != lead_raw)
            .map(|t| format!("{array}_{}", t.1))
            .chain([share.to_string(), whole.to_string()])
            .collect();
        for job in &first {
            c.run("scancel", &[job])?;
        }
        for job in [share, whole].into_iter().chain(tasks.iter().map(|t| t.0)) {
            if job != lead_raw {
                c.wait_job_done(job, JOB_LONG)?;
            }
        }
        // `AdminComment|SystemComment`, as sacct prints them.
        let task_words = |i: usize, mib: u32| {
            format!(
                "gpushare-usage: node=NODE gpu={} units=25/100 mem_peak_mib={mib} \
                 mem_limit_mib=12288 sm_mean=- samples=2|",
                task_gpus[i]
            )
        };
        let want = [
            (format!("{array}_0"), task_words(0, 2000)),
            (format!("{array}_1"), task_words(1, 3000)),
            (
                share.to_string(),
                format!(
                    "site words|gpushare-usage: node=NODE gpu={gpu_s} units=25/100 \
                     mem_peak_mib=1000 mem_limit_mib=12288 sm_mean=- samples=2"
                ),
            ),
            (
                whole.to_string(),
                format!(
                    "gpushare-usage: node=NODE gpu={gpu_w} units=whole mem_peak_mib=6000 \
                     mem_limit_mib=49152 sm_mean=0.100 samples=2|"
                ),
            ),
        ];
        // The node's name in the words is the node's; the rest exact.
        let anonymous = |comment: &str| {
            comment
                .split(' ')
                .map(|w| {
                    if w.starts_with("node=") {
                        "node=NODE"
                    } else {
                        w
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        let mut said = String::new();
        let recorded = |said: &mut String, jobs: &[&String]| {
            let timer = gpu_mps(c, &["metrics", "--write"]).ok()?;
            said.push_str(&String::from_utf8_lossy(&timer.stderr));
            let kept = fs::read_to_string(c.dir.join("run/gpu-mps/share-usage")).ok()?;
            (want
                .iter()
                .filter(|(job, _)| jobs.contains(&job))
                .all(|(job, w)| anonymous(&accounted(c, job, COMMENTS)) == *w)
                && !kept.contains("\"ended\":[{"))
            .then_some(())
        };
        let early: Vec<&String> = first.iter().collect();
        wait_for("the first jobs' figures recorded", JOB_LONG, || {
            recorded(&mut said, &early)
        })
        .map_err(|e| {
            // What the oracle held at the end, beside what the timer said.
            let got: Vec<String> = early
                .iter()
                .map(|job| format!("{job}: {}", accounted(c, job, "State,AdminComment")))
                .collect();
            let kept =
                fs::read_to_string(c.dir.join("run/gpu-mps/share-usage")).unwrap_or_default();
            format!("{e}\nwant {want:?}\ngot {got:?}\nkept: {kept}\nthe timer said: {said}")
        })?;
        c.run("scancel", &[&format!("{array}_{lead_task}")])?;
        c.wait_job_done(lead_raw, JOB_LONG)?;
        let done = wait_for(
            "the ended jobs' figures in the accounting",
            JOB_LONG,
            || {
                let timer = gpu_mps(c, &["metrics", "--write"]).ok()?;
                said.push_str(&String::from_utf8_lossy(&timer.stderr));
                want.iter()
                    .all(|(job, w)| anonymous(&accounted(c, job, COMMENTS)) == *w)
                    .then_some(())
            },
        );
        let got: Vec<String> = want
            .iter()
            .map(|(job, _)| accounted(c, job, "State,QOS,AdminComment"))
            .collect();
        ensure(
            done.is_ok(),
            format!("want {want:?}\ngot {got:?}\nthe timer said: {said}"),
        )?;
        // Counted once the accounting shows them, under the job's QOS.
        let qos = accounted(c, &share.to_string(), "QOS");
        let _ = gpu_mps(c, &["metrics", "--write"])?;
        let written = fs::read_to_string(&metrics).unwrap_or_default();
        let line = |name: &str, size: &str, le: &str| {
            format!("{name}_bucket{{qos=\"{qos}\",units=\"{size}\",le=\"{le}\"}} 1")
        };
        let peak = "gpushare_share_memory_peak_ratio";
        let sm = "gpushare_share_sm_mean_ratio";
        ensure(
            !qos.is_empty()
                && written.lines().any(|l| l == line(peak, "25", "0.1"))
                && written.lines().any(|l| l == line(peak, "whole", "0.25"))
                && written.lines().any(|l| l == line(sm, "whole", "0.1"))
                && !written
                    .lines()
                    .any(|l| l.starts_with(&format!("{sm}_bucket{{qos=\"{qos}\",units=\"25\""))),
            format!("the histograms (QOS {qos}):\n{written}"),
        )?;
        // What the node wrote is what gpu-qos advise reads: alice is told
        // a share for the whole GPU, and never a smaller one for the
        // share whose SM use is not known.
        let (json, report) = advised_to(c, &alice)?;
        let kind = |job: u32| {
            json["advice"]
                .as_array()
                .into_iter()
                .flatten()
                .find_map(|a| {
                    (a["job"].as_str() == Some(job.to_string().as_str()))
                        .then(|| a["kind"].as_str().unwrap_or_default().to_owned())
                })
        };
        ensure(
            kind(share).as_deref() != Some("smaller")
                && kind(whole).as_deref() == Some("share_instead"),
            format!("gpu-qos advise as alice: {report}"),
        )
    })();
    let _ = fs::remove_file(&text_file);
    result.and(cancel_and_wait_stopped(c))
}

/// jobstats' summary as its slurmctld epilog stores it: `JS1:` and the
/// base64 of gzipped JSON (python3's gzip and base64, as jobstats'), with
/// the JSON it holds.
fn jobstats_blob(job: u32) -> Result<(String, String), String> {
    let json = format!("{{\"gpus\": 1, \"job\": {job}, \"nodes\": {{\"n1\": {{\"cpus\": 1}}}}}}");
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import base64,gzip,sys; print(base64.b64encode(gzip.compress(sys.argv[1].encode())).decode())",
            &json,
        ])
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    let b64 = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    ensure(
        out.status.success() && b64.starts_with("H4s"),
        format!("python3: {b64}"),
    )?;
    Ok((format!("JS1:{b64}"), json))
}

/// What jobstats' readers do with the comment: the text after `JS1:`,
/// base64-decoded and gunzipped (`None` where it does not decode).
fn jobstats_reads(comment: &str) -> Option<String> {
    let b64 = comment.strip_prefix("JS1:")?;
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import base64,gzip,sys; print(gzip.decompress(base64.b64decode(sys.argv[1], validate=True)).decode())",
            b64,
        ])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim_end().to_owned())
}

/// A stand-in for jobstats' slurmctld epilog: its own write.
fn jobstats_epilog(c: &Cluster, job: u32, blob: &str) -> TestResult {
    c.run(
        "sacctmgr",
        &[
            "-i",
            "modify",
            "job",
            "where",
            &format!("jobid={job}"),
            "set",
            &format!("AdminComment={blob}"),
        ],
    )
    .map(drop)
}

/// Four of alice's shares sampled twice by the node timer, then ended:
/// jobstats' epilog writes job A's AdminComment before the timer records
/// it, and job B's after (its words already there); job C's AdminComment
/// holds a backslash; job E's is slurm-quota's key, a bare UUID, which
/// slurm-quota reads back whole. Every AdminComment stays byte for byte
/// what its writer left (jobstats' blob still decodes where sacctmgr keeps case,
/// 23.02 on), the figures land in SystemComment, and `gpu-qos advise`
/// finds them.
fn jobstats_comment(c: &mut Cluster) -> TestResult {
    standin(c)?;
    install_nvml_usage(&bin_dir(c))?;
    let text_file = bin_dir(c).join("nvml-usage");
    let alice = TestUser::create(c, "gpushare-alice")?;
    let jobs = [
        user_share(c, &alice, 25)?,
        user_share(c, &alice, 25)?,
        user_share(c, &alice, 25)?,
        user_share(c, &alice, 25)?,
    ];
    let [a, b, d, e] = jobs;
    let backslash = r"site C:\temp\x";
    let uuid = "0f8fad5b-d9cb-469f-a165-70867728950e";
    for (job, comment) in [(d, backslash), (e, uuid)] {
        c.run(
            "scontrol",
            &[
                "update",
                &format!("jobid={job}"),
                &format!("AdminComment={comment}"),
            ],
        )?;
    }
    let result = (|| {
        let held = ledger(c);
        let mut figures: BTreeMap<u32, Vec<Figures>> = BTreeMap::new();
        // Each share near its memory limit (so advise finds it needs a
        // larger one); its work sampled under its GPU's MPS server.
        for job in jobs {
            let gpu = held.share(job).map(|s| s.gpu).ok_or("no share")?;
            let pid = wait_sleep(job)?;
            figures.entry(gpu).or_default().push(Figures {
                pid,
                mib: 12_000,
                sm: Vec::new(),
            });
        }
        for (&gpu, procs) in &mut figures {
            procs.push(Figures {
                pid: server_pid(c, gpu)?,
                mib: 66,
                sm: vec![4, 6],
            });
        }
        sampled_twice(c, &text_file, &figures)?;
        let mut said = String::new();
        let timer = |said: &mut String| {
            if let Ok(t) = gpu_mps(c, &["metrics", "--write"]) {
                said.push_str(&String::from_utf8_lossy(&t.stderr));
            }
        };
        let words = |job: u32, field: &str| {
            accounted(c, &job.to_string(), field).contains("gpushare-usage: ")
        };
        // Job A: jobstats first.
        let (blob_a, json_a) = jobstats_blob(a)?;
        c.run("scancel", &[&a.to_string()])?;
        c.wait_job_done(a, JOB_LONG)?;
        wait_for("job A's end in the accounting", JOB_LONG, || {
            let s = accounted(c, &a.to_string(), "State");
            (!s.is_empty() && !s.starts_with("RUNNING") && !s.starts_with("PENDING")).then_some(())
        })?;
        jobstats_epilog(c, a, &blob_a)?;
        let left_a = accounted(c, &a.to_string(), "AdminComment");
        // Job B: gpushare first, jobstats after.
        c.run("scancel", &[&b.to_string()])?;
        c.wait_job_done(b, JOB_LONG)?;
        wait_for("job B's words in its AdminComment", JOB_LONG, || {
            timer(&mut said);
            words(b, "AdminComment").then_some(())
        })
        .map_err(|e| format!("{e}: {said}"))?;
        let (blob_b, json_b) = jobstats_blob(b)?;
        jobstats_epilog(c, b, &blob_b)?;
        let left_b = accounted(c, &b.to_string(), "AdminComment");
        for job in [d, e] {
            c.run("scancel", &[&job.to_string()])?;
            c.wait_job_done(job, JOB_LONG)?;
        }
        let done = wait_for("every job's words in its SystemComment", JOB_LONG, || {
            timer(&mut said);
            jobs.iter()
                .all(|&j| words(j, "SystemComment"))
                .then_some(())
        });
        let shown: Vec<String> = jobs
            .iter()
            .map(|j| accounted(c, &j.to_string(), "AdminComment,SystemComment"))
            .collect();
        ensure(done.is_ok(), format!("{shown:?}\nthe timer said: {said}"))?;
        let version = c
            .run("sacctmgr", &["--version"])
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())?;
        let keeps_case = !version.contains(" 22.");
        ensure(
            accounted(c, &a.to_string(), "AdminComment") == left_a
                && accounted(c, &b.to_string(), "AdminComment") == left_b
                && accounted(c, &d.to_string(), "AdminComment") == backslash
                && accounted(c, &e.to_string(), "AdminComment") == uuid
                && (!keeps_case
                    || (jobstats_reads(&left_a).as_deref() == Some(json_a.as_str())
                        && jobstats_reads(&left_b).as_deref() == Some(json_b.as_str()))),
            format!("{shown:?} (jobstats left {left_a:?} and {left_b:?})\n{said}"),
        )?;
        let (json, report) = advised_to(c, &alice)?;
        let advised = |job: u32| {
            json["advice"].as_array().into_iter().flatten().any(|x| {
                x["job"].as_str() == Some(job.to_string().as_str())
                    && x["kind"].as_str() == Some("larger")
            })
        };
        ensure(
            jobs.iter().all(|&j| advised(j)),
            format!("gpu-qos advise as alice: {report}"),
        )
    })();
    let _ = fs::remove_file(&text_file);
    result.and(cancel_and_wait_stopped(c))
}
