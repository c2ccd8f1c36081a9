//! The oracle of the per-type caps (`MaxGPUsPerJob=`, `MaxCPUsPerGPU=`,
//! `MaxTasksPerGPU=`, `MaxMemPerGPU=`): every typed GPU request beside
//! every option that changes what goes with a GPU, submitted by a user
//! the caps hold and by one `ExemptUsers=` lets through, then judged by
//! slurmctld's record of each, in this file's own reading of it:
//!
//! - no accepted job holds more than a cap, at any node count Slurm may
//!   give it (its `NumNodes=` range; without `--nodes`, up to one node
//!   per task, as Slurm may spread tasks);
//! - no form the exempt user's record shows within every cap is refused
//!   by gpu_qos;
//! - each update of a pending job that takes it over a cap gets it held,
//!   and none that leaves it within does.
//!
//! Before any verdict counts, the reading must flag the exempt user's job
//! known to be over a cap: a reading gone blind fails the run.

use super::*;

use testcluster::ensure;

/// The caps under test, and the user they never hold.
pub const CAPS: &str = "MaxGPUsPerJob=a40:4\nMaxCPUsPerGPU=a40:4\nMaxTasksPerGPU=a40:2\n\
                        MaxMemPerGPU=a40:2G\nExemptUsers=orcapx\n";
const MOST_GPUS: u64 = 4;
const CPUS_PER_GPU: u64 = 4;
const TASKS_PER_GPU: u64 = 2;
const MB_PER_GPU: u64 = 2048;

/// Typed GPU requests (the a40 of the site).
const GPUS: &[&[&str]] = &[
    &["--gres=gpu:a40:1"],
    &["--gres=gpu:a40:2"],
    &["--gres=gpu:a40"],
    &["--gpus=a40:2"],
    &["--gpus-per-node=a40:2"],
    &["-n", "2", "--gpus-per-task=a40:1"],
];

/// What goes beside them.
const BESIDE: &[&[&str]] = &[
    &[],
    &["-c", "4"],
    &["-c", "9"],
    &["--cpus-per-gpu=4"],
    &["--cpus-per-gpu=5"],
    &["--mincpus=9"],
    &["-n", "2"],
    &["-n", "4"],
    &["-N", "1", "-n", "4"],
    &["-N", "1", "-n", "5"],
    &["--ntasks-per-node=2"],
    &["--ntasks-per-gpu=2"],
    &["--ntasks-per-gpu=3"],
    &["--mem=2G"],
    &["--mem=5G"],
    &["--mem-per-cpu=1G", "-c", "2"],
    &["--mem-per-cpu=1G", "-c", "3"],
    &["--mem-per-gpu=2G"],
    &["--mem-per-gpu=3G"],
    &["-N", "2"],
    &["-N", "1-2"],
    &["--exclusive"],
    &["--mem=0"],
];

/// What a job's record holds, as this file reads it.
#[derive(Debug)]
struct Holds {
    /// a40 at the most nodes Slurm may give it.
    a40_most: u64,
    /// GPUs in all, at the fewest nodes.
    gpus: u64,
    cpus: u64,
    tasks: u64,
    /// Memory it asked for, in MB (`None`: Slurm's default).
    mem: Option<u64>,
    whole_node: bool,
}

fn figure(text: &str) -> Option<u64> {
    let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
    let n: u64 = digits.parse().ok()?;
    Some(match text[digits.len()..].chars().next() {
        Some('G') => n * 1024,
        Some('T') => n * 1024 * 1024,
        _ => n,
    })
}

fn tres_value(tres: &str, key: &str) -> Option<u64> {
    tres.split(',')
        .find_map(|e| e.strip_prefix(key)?.strip_prefix('='))
        .and_then(figure)
}

/// The GPU entry's figure of a `CpusPerTres=`/`MemPerTres=` value
/// (`gres:gpu:5`, `gres/gpu:3072`).
fn per_gpu(value: Option<&str>) -> Option<u64> {
    value?
        .split(',')
        .filter(|e| e.contains("gpu"))
        .filter_map(|e| e.rsplit([':', '=']).next().and_then(figure))
        .max()
}

/// The record of job `id`, read as a cap would judge it; `spread`: the
/// job gave no `--nodes`, so Slurm may use one node per task. A pending
/// job's `TRES` leaves out what Slurm adds at allocation (`CpusPerTres`,
/// `MemPerTres`, `MinCPUsNode` per node), so those count too; `--mem=0`
/// (`all_memory`) holds all of the node's memory, which the record shows
/// as no memory asked.
fn holds(c: &Cluster, id: u32, spread: bool, all_memory: bool) -> Result<Holds, String> {
    let job = c.job(id)?;
    let tres = job.tres().to_owned();
    let range = job.get("NumNodes").unwrap_or("1");
    let least = figure(range).unwrap_or(1).max(1);
    let tasks = job.get("NumTasks").and_then(figure).unwrap_or(1).max(1);
    let mut most = range.rsplit('-').next().and_then(figure).unwrap_or(least);
    if spread {
        most = most.max(tasks);
    }
    let a40_now = tres_value(&tres, "gres/gpu:a40").unwrap_or(0);
    // A per-node request holds as many again on each further node.
    let per_node = job
        .tres_request("TresPerNode")
        .and_then(|t| t.split("gpu:a40:").nth(1).and_then(figure))
        .unwrap_or(0);
    let per_task = job
        .tres_request("TresPerTask")
        .and_then(|t| t.split("gpu:a40:").nth(1).and_then(figure))
        .unwrap_or(0);
    let a40_most = a40_now.max(per_node * most).max(per_task * tasks);
    let asked = ["MinMemoryNode", "MinMemoryCPU"]
        .iter()
        .any(|k| job.get(k).and_then(figure).is_some_and(|mb| mb > 0));
    let whole_node = match job.get("Exclusive") {
        Some(e) => e == "NODE",
        None => job.get("OverSubscribe") == Some("NO"),
    };
    let gpus = tres_value(&tres, "gres/gpu").unwrap_or(0);
    let cpus = [
        tres_value(&tres, "cpu"),
        job.get("MinCPUsNode").and_then(figure).map(|n| n * least),
        per_gpu(job.get("CpusPerTres")).map(|n| n * gpus),
    ]
    .into_iter()
    .flatten()
    .max()
    .unwrap_or(0);
    let mem = [
        tres_value(&tres, "mem").filter(|_| asked),
        per_gpu(job.get("MemPerTres")).map(|n| n * gpus),
        all_memory.then_some(u64::MAX),
    ]
    .into_iter()
    .flatten()
    .max();
    Ok(Holds {
        a40_most,
        gpus,
        cpus,
        tasks,
        mem,
        whole_node,
    })
}

impl Holds {
    /// The caps it is over, in words (empty: within every one).
    fn over(&self) -> Vec<String> {
        let gpus = self.gpus.max(1);
        let mut over = Vec::new();
        if self.a40_most > MOST_GPUS {
            over.push(format!("{} a40", self.a40_most));
        }
        if self.whole_node {
            over.push("a whole node".into());
        }
        if self.cpus > CPUS_PER_GPU * gpus {
            over.push(format!("{} CPUs on {gpus} GPU(s)", self.cpus));
        }
        if self.tasks > TASKS_PER_GPU * gpus {
            over.push(format!("{} tasks on {gpus} GPU(s)", self.tasks));
        }
        if let Some(mem) = self.mem.filter(|m| *m > MB_PER_GPU * gpus) {
            over.push(format!("{mem} MB on {gpus} GPU(s)"));
        }
        over
    }
}

/// One submission's answer.
enum Answer {
    Job(u32),
    Refused(String),
}

fn submit(c: &Cluster, user: &TestUser, args: &[&str]) -> Result<Answer, String> {
    let mut full = vec!["--parsable", "-H", "-o", "/dev/null"];
    full.extend_from_slice(args);
    full.push("--wrap=true");
    let out = user.run(c, None, "sbatch", &full)?;
    if !out.status.success() {
        return Ok(Answer::Refused(
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        ));
    }
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .split(';')
        .next()
        .and_then(|n| n.parse().ok())
        .map(Answer::Job)
        .ok_or_else(|| format!("sbatch {args:?}: no job id"))
}

#[derive(Default)]
struct CapTally {
    forms: usize,
    accepted: usize,
    refused: usize,
    slurm_refused: usize,
    over_by_exempt: usize,
    updates: usize,
    held: usize,
    escapes: Vec<String>,
    wrongly_refused: Vec<String>,
}

/// The oracle of the caps; `with_plugin` false: Slurm alone, which must
/// let jobs over the caps through (the control).
pub fn caps_oracle(c: &mut Cluster, with_plugin: bool) -> TestResult {
    let started = Instant::now();
    let user = TestUser::create(c, "orcap")?;
    let exempt = TestUser::create(c, "orcapx")?;
    let mut t = CapTally::default();
    // The reading must see a job known to be over a cap: the exempt
    // user's one a40 with 9 CPUs.
    let planted = match submit(c, &exempt, &["--gres=gpu:a40:1", "-c", "9"])? {
        Answer::Job(id) => id,
        Answer::Refused(said) => return Err(format!("the exempt user was refused: {said}")),
    };
    let seen = holds(c, planted, false, false)?;
    ensure(
        !seen.over().is_empty(),
        format!("the reading of the record missed job {planted}'s 9 CPUs on one a40: {seen:?}"),
    )?;
    let _ = c.run("scancel", &[&planted.to_string()]);
    for gpus in GPUS {
        for beside in BESIDE {
            let args: Vec<&str> = gpus.iter().chain(beside.iter()).copied().collect();
            let spread = !args.iter().any(|a| *a == "-N" || a.starts_with("--nodes"));
            let all_memory = args.contains(&"--mem=0");
            let what = args.join(" ");
            t.forms += 1;
            let truth = match submit(c, &exempt, &args)? {
                Answer::Job(id) => {
                    let h = holds(c, id, spread, all_memory)?;
                    let _ = c.run("scancel", &[&id.to_string()]);
                    Some(h)
                }
                Answer::Refused(_) => None,
            };
            match submit(c, &user, &args)? {
                Answer::Job(id) => {
                    t.accepted += 1;
                    let h = holds(c, id, spread, all_memory)?;
                    let over = h.over();
                    if !over.is_empty() {
                        t.escapes.push(format!(
                            "`{what}`: job {id} accepted over the caps ({}): {h:?}",
                            over.join(", ")
                        ));
                    }
                    let _ = c.run("scancel", &[&id.to_string()]);
                }
                Answer::Refused(said) => match &truth {
                    None => t.slurm_refused += 1,
                    Some(h) if h.over().is_empty() && with_plugin => t.wrongly_refused.push(
                        format!("`{what}` within every cap ({h:?}) was refused: {said}"),
                    ),
                    Some(_) if !said.contains("[GQ111]") => t
                        .wrongly_refused
                        .push(format!("`{what}` refused without GQ111: {said}")),
                    Some(_) => t.refused += 1,
                },
            }
            if truth.as_ref().is_some_and(|h| !h.over().is_empty()) {
                t.over_by_exempt += 1;
            }
        }
    }
    if with_plugin {
        updates(c, &user, &mut t)?;
    }
    eprintln!(
        "caps oracle: {} forms, {} accepted, {} refused by gpu_qos, {} refused by Slurm, {} \
         over a cap as the exempt user's record shows; {} updates, {} held; {} escapes, {} \
         wrongly refused; {:.0?}",
        t.forms,
        t.accepted,
        t.refused,
        t.slurm_refused,
        t.over_by_exempt,
        t.updates,
        t.held,
        t.escapes.len(),
        t.wrongly_refused.len(),
        started.elapsed()
    );
    for e in t.escapes.iter().chain(&t.wrongly_refused).take(40) {
        eprintln!("  {e}");
    }
    if !with_plugin {
        return ensure(
            !t.escapes.is_empty(),
            "with Slurm alone no job was accepted over a cap: the oracle sees nothing",
        );
    }
    ensure(
        t.escapes.is_empty() && t.wrongly_refused.is_empty() && t.refused > 0 && t.accepted > 0,
        format!(
            "{} escapes, {} wrongly refused ({} accepted, {} refused)",
            t.escapes.len(),
            t.wrongly_refused.len(),
            t.accepted,
            t.refused
        ),
    )
}

/// Updates of a pending job within every cap (`-c 2`, one a40): each must
/// leave it held exactly when the record it leaves is over a cap.
fn updates(c: &Cluster, user: &TestUser, t: &mut CapTally) -> TestResult {
    const UPDATES: &[&[&str]] = &[
        &["NumCPUs=4"],
        &["NumCPUs=9"],
        &["NumTasks=2"],
        &["NumTasks=3"],
        &["MinMemoryNode=2000"],
        &["MinMemoryNode=3000"],
        &["MinMemoryCPU=1500"],
        &["NumNodes=1-5"],
        &["Gres=gpu:a40:5"],
        &["Gres=gpu:a40:2", "NumCPUs=8"],
        &["TresPerNode=gres:gpu:a40:4"],
        &["MinCPUsNode=9"],
        &["CpusPerTres=gres:gpu:9"],
        &["MemPerTres=gres:gpu:3072"],
    ];
    for words in UPDATES {
        let id = match submit(
            c,
            user,
            &["--begin=now+3600", "--gres=gpu:a40:1", "-c", "2"],
        )? {
            Answer::Job(id) => id,
            Answer::Refused(said) => return Err(format!("the job to update was refused: {said}")),
        };
        // A user's hold would hide gpushare's: release the user's own.
        let _ = user.run(c, None, "scontrol", &["release", &id.to_string()]);
        let mut args = vec!["update".to_owned(), format!("JobId={id}")];
        args.extend(words.iter().map(|w| (*w).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = user.run(c, None, "scontrol", &args)?;
        t.updates += 1;
        if !out.status.success() {
            let _ = c.run("scancel", &[&id.to_string()]);
            continue;
        }
        let over = holds(c, id, false, false)?.over();
        let shown = || {
            c.run_ok("scontrol", &["-o", "show", "job", &id.to_string()])
                .unwrap_or_default()
        };
        let held = |text: &str| text.contains(" Reason=JobHeldAdmin ");
        if over.is_empty() {
            // Given the time a hold takes elsewhere, then looked at.
            std::thread::sleep(std::time::Duration::from_secs(1));
            if held(&shown()) {
                t.wrongly_refused.push(format!(
                    "update {words:?} of job {id} within the caps: held"
                ));
            }
        } else {
            match wait_for("the job over a cap to be held", SHORT, || {
                held(&shown()).then_some(())
            }) {
                Ok(()) => t.held += 1,
                Err(_) => t.escapes.push(format!(
                    "update {words:?} took job {id} over the caps ({}) and it is not held",
                    over.join(", ")
                )),
            }
        }
        let _ = c.run("scancel", &[&id.to_string()]);
    }
    Ok(())
}
