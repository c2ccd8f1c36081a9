//! The oracle: every GPU request form Slurm accepts, under every scope
//! whose GPU limit is typed and under one whose is not, submitted as
//! users, then judged by what slurmctld keeps (`scontrol show job`), never
//! by what gpu_qos answered. One invariant:
//!
//! - no accepted job holds a GPU count without a type under a scope whose
//!   limit is typed (Slurm counts a typed limit only against GPUs that
//!   name the type: `gres/gpu=2` without `gres/gpu:a40=2` escapes it);
//! - no request Slurm holds typed, with a permitted type within the
//!   limit, is refused by gpu_qos (its refusal line in slurmctld's log).
//!
//! The forms are generated (`gpu_oracle/forms.rs`), the scopes are those
//! Slurm applies a limit at: a QOS the job names, the user's default QOS,
//! a partition's QOS, the account (the user's default), the user's own
//! association; then the pending-job updates that change a job's scope
//! or its GPUs. The same suite with Slurm alone (no gpu_qos, on request)
//! finds the holes. The per-type caps have an oracle of their own
//! (`gpu_oracle/caps.rs`), on the same site with caps set.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::process::ExitCode;
use std::time::Instant;

use testcluster::cluster::wait_for;
use testcluster::time::SHORT;
use testcluster::users::TestUser;
use testcluster::{Cluster, ClusterSpec, JobInfo, NodeSpec, Suite, TestResult};

#[path = "gpu_oracle/forms.rs"]
mod forms;

#[path = "gpu_oracle/caps.rs"]
mod caps;

#[path = "gpu_oracle/arrays.rs"]
mod arrays;

use forms::{Command, Form};

fn main() -> ExitCode {
    let mut spec = ClusterSpec::example_site();
    for (name, text) in &mut spec.extra_conf_files {
        if name == "gpu_qos.conf" {
            text.push_str(PAIR_RULE);
            text.push_str(DEFAULT_RULE);
        }
    }
    let mut alone = spec.clone();
    alone.job_submit_plugins.clear();
    // The same site on two nodes, each a host of its own with the one
    // node's GPUs: where `-N 2` forms are held, not refused for want of
    // a second node.
    let node = |name: &str| NodeSpec {
        gpus: spec.gpus.clone(),
        mps_count: spec.mps_count,
        ..NodeSpec::new(name, "a40", 0)
    };
    let two_nodes = ClusterSpec {
        gpus: Vec::new(),
        mps_count: None,
        nodes: vec![node("gpu01"), node("gpu02")],
        ..spec.clone()
    };
    let mut two_alone = two_nodes.clone();
    two_alone.job_submit_plugins.clear();
    // The one-node site with the per-type caps.
    let mut capped = spec.clone();
    for (name, text) in &mut capped.extra_conf_files {
        if name == "gpu_qos.conf" {
            text.push_str(caps::CAPS);
        }
    }
    let mut capped_alone = capped.clone();
    capped_alone.job_submit_plugins.clear();
    Suite::new(spec)
        .test(
            "no_accepted_job_holds_untyped_gpus_under_a_typed_limit",
            |c| oracle(c, true, Plan::One),
        )
        .smoke()
        .test_on(
            "across_two_nodes_no_job_holds_untyped_gpus_under_a_typed_limit",
            two_nodes,
            |c| oracle(c, true, Plan::TwoNodes),
        )
        .test_on(
            "no_accepted_job_holds_more_than_its_type_caps",
            capped,
            |c| caps::caps_oracle(c, true),
        )
        .test_on_on_request(
            "with_slurm_alone_jobs_hold_more_than_the_type_caps",
            capped_alone,
            |c| caps::caps_oracle(c, false),
        )
        .test_on_on_request(
            "with_slurm_alone_untyped_gpus_escape_every_typed_scope",
            alone,
            |c| oracle(c, false, Plan::One),
        )
        .test_on_on_request(
            "with_slurm_alone_untyped_gpus_escape_across_two_nodes",
            two_alone,
            |c| oracle(c, false, Plan::TwoNodes),
        )
        .run()
}

/// What a run of the oracle tries.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// Every form on one node, the updates, the low-priority arrays.
    One,
    /// The forms that span two nodes and the updates (among them
    /// `NumNodes=2`), on a cluster of two.
    TwoNodes,
}

/// Where a limit is typed, as the suite sets it up.
const GROUP_QOS: &str = "qos_lafferty";
const PART_QOS: &str = "oracle_part_a40";
const PARTITION: &str = "oracle_a40";
const ACCOUNT: &str = "oracle_lab";
/// A QOS limiting two types, each by its own figure, and its rule.
const PAIR_QOS: &str = "oracle_pair";
const PAIR_RULE: &str = "QOS=oracle_pair GPUTypes=a40,h100 GPULimit=a40:4,h100:2\n";
/// A QOS whose rule gives untyped requests a type, and its rule.
const DEFAULT_QOS: &str = "oracle_default";
const DEFAULT_RULE: &str = "QOS=oracle_default GPUTypes=a40 GPULimit=4 DefaultGPUType=a40\n";

/// A request through libslurm's update call (`gpu_oracle/raw_update.c`)
/// rather than scontrol: its fields as given, several in one request.
const RAW: &str = "libslurm:";

/// A user and the options that put their jobs under one scope.
struct Scope {
    name: &'static str,
    user: TestUser,
    args: Vec<&'static str>,
    typed: bool,
    /// The GPU types its rule permits (`None`: no rule says).
    permits: Option<&'static [&'static str]>,
    /// Its rule gives untyped requests a type (`DefaultGPUType=`).
    default_type: bool,
}

impl Scope {
    fn permits_all(&self, types: &[&str]) -> bool {
        self.permits
            .is_none_or(|p| types.iter().all(|t| p.contains(t)))
    }
}

fn sacctmgr(c: &Cluster, args: &[&str]) -> TestResult {
    c.run_ok("sacctmgr", &[&["-i"], args].concat()).map(drop)
}

/// The scopes: each typed level, and one with no typed limit; and a job
/// planted with untyped GPUs under a typed scope (its partition given
/// its typed QOS after the job was accepted), which the oracle must see.
fn scopes(c: &Cluster) -> Result<(Vec<Scope>, u32), String> {
    let cluster = format!("cluster={}", testcluster::cluster::CLUSTER_NAME);
    sacctmgr(c, &["add", "qos", PART_QOS, "GrpTRES=gres/gpu:a40=8"])?;
    c.run_ok(
        "scontrol",
        &[
            "create",
            &format!("PartitionName={PARTITION}"),
            "Nodes=ALL",
            "State=UP",
        ],
    )?;
    let free = TestUser::create(c, "orfr")?;
    free.allow_qos(c, &["normal", GROUP_QOS])?;
    let planted = free.sbatch(
        c,
        &[
            "-H",
            "-o",
            "/dev/null",
            "-p",
            PARTITION,
            "--gres=gpu:1",
            "--wrap=true",
        ],
    )?;
    c.run_ok(
        "scontrol",
        &[
            "update",
            &format!("PartitionName={PARTITION}"),
            &format!("QOS={PART_QOS}"),
        ],
    )?;
    sacctmgr(c, &["add", "account", ACCOUNT, &cluster])?;
    sacctmgr(
        c,
        &[
            "modify",
            "account",
            "where",
            &format!("name={ACCOUNT}"),
            "set",
            "GrpTRES=gres/gpu:a40=4",
        ],
    )?;
    let named = TestUser::create(c, "orqn")?;
    named.allow_qos(c, &["normal", GROUP_QOS])?;
    let default = TestUser::create(c, "orqd")?;
    default.allow_qos_by_default(c, &["normal", GROUP_QOS], GROUP_QOS)?;
    let part = TestUser::create(c, "orpa")?;
    let acct = TestUser::create(c, "orac")?;
    sacctmgr(
        c,
        &[
            "add",
            "user",
            "orac",
            &format!("account={ACCOUNT}"),
            &cluster,
        ],
    )?;
    sacctmgr(
        c,
        &[
            "modify",
            "user",
            "where",
            "name=orac",
            "set",
            &format!("DefaultAccount={ACCOUNT}"),
        ],
    )?;
    sacctmgr(
        c,
        &[
            "add",
            "qos",
            PAIR_QOS,
            "GrpTRES=gres/gpu:a40=4,gres/gpu:h100=2",
        ],
    )?;
    let pair = TestUser::create(c, "orpr")?;
    pair.allow_qos(c, &["normal", PAIR_QOS])?;
    sacctmgr(c, &["add", "qos", DEFAULT_QOS, "GrpTRES=gres/gpu:a40=4"])?;
    let given = TestUser::create(c, "ordf")?;
    given.allow_qos(c, &["normal", DEFAULT_QOS])?;
    let user = TestUser::create(c, "orus")?;
    sacctmgr(
        c,
        &[
            "modify",
            "user",
            "where",
            "name=orus",
            "set",
            "GrpTRES=gres/gpu:a40=4",
        ],
    )?;
    let qos_arg: &'static str = "--qos=qos_lafferty";
    let part_arg: &'static str = "--partition=oracle_a40";
    let pair_arg: &'static str = "--qos=oracle_pair";
    let default_arg: &'static str = "--qos=oracle_default";
    const A40: &[&str] = &["a40"];
    let scopes = vec![
        Scope {
            name: "named QOS",
            user: named,
            args: vec![qos_arg],
            typed: true,
            permits: Some(A40),
            default_type: false,
        },
        Scope {
            name: "default QOS",
            user: default,
            args: Vec::new(),
            typed: true,
            permits: Some(A40),
            default_type: false,
        },
        Scope {
            name: "two-type QOS",
            user: pair,
            args: vec![pair_arg],
            typed: true,
            permits: Some(&["a40", "h100"]),
            default_type: false,
        },
        Scope {
            name: "default-type QOS",
            user: given,
            args: vec![default_arg],
            typed: true,
            permits: Some(A40),
            default_type: true,
        },
        Scope {
            name: "partition QOS",
            user: part,
            args: vec![part_arg],
            typed: true,
            permits: None,
            default_type: false,
        },
        Scope {
            name: "account",
            user: acct,
            args: Vec::new(),
            typed: true,
            permits: None,
            default_type: false,
        },
        Scope {
            name: "user association",
            user,
            args: Vec::new(),
            typed: true,
            permits: None,
            default_type: false,
        },
        Scope {
            name: "no typed limit",
            user: free,
            args: Vec::new(),
            typed: false,
            permits: None,
            default_type: false,
        },
    ];
    Ok((scopes, planted))
}

/// One component of a job as slurmctld keeps it.
#[derive(Debug)]
struct Held(JobInfo);

impl Held {
    fn get(&self, key: &str) -> &str {
        self.0.get(key).unwrap_or_default()
    }

    /// The job's TRES as [`JobInfo::tres`] reads it.
    fn tres(&self) -> &str {
        self.0.tres()
    }

    /// GPUs held without a type beyond those held with one: what a typed
    /// limit does not count.
    fn untyped_gpus(&self) -> u64 {
        let (mut all, mut typed) = (0u64, 0u64);
        for item in self.tres().split(',') {
            let Some((key, value)) = item.split_once('=') else {
                continue;
            };
            let n: u64 = value.parse().unwrap_or(0);
            if key == "gres/gpu" {
                all = n;
            } else if key.starts_with("gres/gpu:") {
                typed += n;
            }
        }
        all.saturating_sub(typed)
    }

    /// Whether this component runs under a typed limit, by what Slurm
    /// recorded for it (its QOS, partition, account, user).
    fn typed_scope(&self) -> Option<String> {
        let qos = self.get("QOS");
        let part = self.get("Partition");
        let account = self.get("Account");
        let user = self.get("UserId");
        if qos == GROUP_QOS || qos == PAIR_QOS || qos == DEFAULT_QOS {
            Some(format!("QOS {qos}"))
        } else if part.split(',').any(|p| p == PARTITION) {
            Some(format!("partition {part}"))
        } else if account == ACCOUNT {
            Some(format!("account {account}"))
        } else if user.starts_with("orus(") {
            Some("user orus's association".to_owned())
        } else {
            None
        }
    }
}

/// Every component of job `id` as `scontrol -o show job` has it.
fn held(c: &Cluster, id: u32) -> Result<Vec<Held>, String> {
    Ok(c.job_records(id)?.into_iter().map(Held).collect())
}

/// What a submission came to.
enum Outcome {
    Accepted(u32),
    /// Refused: by gpu_qos (its line in slurmctld's log) or by Slurm.
    Refused {
        by_plugin: bool,
        said: String,
    },
}

/// slurmctld's log from byte `from` on (only those bytes read), and
/// where it ends.
fn log_since(c: &Cluster, from: u64) -> (String, u64) {
    let mut new = Vec::new();
    let read = fs::File::open(c.log_path("slurmctld")).and_then(|mut f| {
        f.seek(SeekFrom::Start(from))?;
        f.read_to_end(&mut new)
    });
    let end = from + read.map_or(0, |n| n as u64);
    (String::from_utf8_lossy(&new).into_owned(), end)
}

struct Run<'c> {
    c: &'c Cluster,
    log_at: u64,
    script: String,
}

impl Run<'_> {
    fn submit(&mut self, scope: &Scope, form: &Form) -> Result<Outcome, String> {
        // Only what this submission makes slurmctld log is read after it.
        self.log_at = fs::metadata(self.c.log_path("slurmctld")).map_or(0, |m| m.len());
        let mut args: Vec<&str> = Vec::new();
        let program = match form.command {
            Command::Salloc => {
                args.extend(["--no-shell", "-t", "1"]);
                "salloc"
            }
            _ => {
                args.extend(["--parsable", "-H", "-o", "/dev/null"]);
                "sbatch"
            }
        };
        if form.command == Command::Het {
            args.extend_from_slice(&scope.args);
            args.extend(["--gres=gpu:a40:1", ":"]);
        }
        if form.command == Command::Array {
            args.push("--array=0-1");
        }
        args.extend_from_slice(&scope.args);
        args.extend(form.args.iter().map(String::as_str));
        if form.command == Command::HetFirst {
            args.push(":");
            args.extend_from_slice(&scope.args);
            args.push("--gres=gpu:a40:1");
        }
        if form.command != Command::Salloc {
            args.push(&self.script);
        }
        let out = scope.user.run(self.c, None, program, &args)?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let (log, at) = log_since(self.c, self.log_at);
        self.log_at = at;
        let by_plugin = log
            .lines()
            .any(|l| l.contains("job_submit/gpu_qos: job from uid") && l.contains("rejected"));
        if !out.status.success() {
            return Ok(Outcome::Refused {
                by_plugin,
                said: stderr.trim().to_owned(),
            });
        }
        // sbatch --parsable prints the id; salloc says "Granted job
        // allocation N" on stderr.
        let id = match form.command {
            Command::Salloc => stderr
                .lines()
                .find_map(|l| l.split("job allocation ").nth(1))
                .and_then(|n| n.trim().parse().ok()),
            _ => stdout.trim().split(';').next().and_then(|n| n.parse().ok()),
        };
        id.map(Outcome::Accepted)
            .ok_or_else(|| format!("{program} {args:?}: no job id in {stdout:?} {stderr:?}"))
    }
}

/// The line a refusal offers instead (`Submit with X instead.`), typed
/// as the user would, in the same scope: Slurm must accept it and hold
/// its GPUs typed.
fn follow_advice(
    run: &mut Run<'_>,
    scope: &Scope,
    form: &Form,
    what: &str,
    said: &str,
    tally: &mut Tally,
) -> TestResult {
    let Some(advice) = said
        .split("Submit with ")
        .nth(1)
        .and_then(|rest| rest.split(" instead").next())
    else {
        return Ok(());
    };
    // "--gres=gpu:a40:2 (or --gpus-per-node=a40:2)": either works.
    let advice = advice.split(" (or ").next().unwrap_or(advice);
    let advice = advice.strip_prefix("e.g. ").unwrap_or(advice);
    // In place of the form's GPU request; its other options kept.
    const GPU_OPTIONS: [&str; 7] = [
        "--gres=",
        "--gpus=",
        "--gpus-per-node=",
        "--gpus-per-task=",
        "--gpus-per-socket=",
        "--tres-per-task=",
        "--ntasks-per-gpu=",
    ];
    let words: Vec<String> = form
        .args
        .iter()
        .filter(|a| !GPU_OPTIONS.iter().any(|o| a.starts_with(o)))
        .cloned()
        .chain(advice.split_whitespace().map(str::to_owned))
        .collect();
    let followed = Form {
        command: form.command,
        args: words,
        typed: true,
        gpus: true,
        types: &[],
        plain: false,
        label: format!("{} -> advice {advice}", form.label),
    };
    tally.advice_followed += 1;
    match run.submit(scope, &followed)? {
        Outcome::Accepted(id) => {
            judge(run.c, id, &format!("{what}, advice {advice}"), tally)?;
            let _ = run.c.run("scancel", &[&id.to_string()]);
        }
        Outcome::Refused { said, .. } => tally
            .wrongly_refused
            .push(format!("{what}: the advice `{advice}` was refused: {said}")),
    }
    Ok(())
}

/// Tallies of one run.
#[derive(Default)]
struct Tally {
    submitted: usize,
    accepted: usize,
    refused_by_plugin: usize,
    refused_by_slurm: usize,
    escapes: Vec<String>,
    wrongly_refused: Vec<String>,
    accepted_by: BTreeMap<&'static str, usize>,
    /// Refusals whose offered line was typed as told.
    advice_followed: usize,
    /// Slurm's own refusals, by what the client printed last.
    slurm_says: BTreeMap<String, usize>,
    /// Updates with GPU text hidden in another TRES entry, by outcome.
    hidden: BTreeMap<String, usize>,
    /// Jobs given a type their QOS's rule does not permit, checked held.
    types_held_checked: usize,
}

fn judge(c: &Cluster, id: u32, what: &str, tally: &mut Tally) -> TestResult {
    for component in held(c, id)? {
        let untyped = component.untyped_gpus();
        if let (Some(scope), true) = (component.typed_scope(), untyped > 0) {
            tally.escapes.push(format!(
                "{what}: job {id} holds {untyped} GPU(s) without a type under {scope} \
                 (TRES {})",
                component.tres()
            ));
        }
    }
    Ok(())
}

/// A job under `qos_lafferty` (GPUTypes=a40) that an update gave h100
/// without naming the QOS: within seconds it must be held as an
/// administrator holds it (gpushare reads it back once the update is
/// done); one that is not is an escape of the rule's types.
fn held_to_its_rule(c: &Cluster, id: u32, what: &str, tally: &mut Tally) {
    let shown = || {
        c.run_ok("scontrol", &["-o", "show", "job", &id.to_string()])
            .unwrap_or_default()
    };
    let under_rule = shown()
        .split_whitespace()
        .any(|w| w == format!("QOS={GROUP_QOS}"));
    let asks_h100 = shown()
        .split_whitespace()
        .any(|w| w.starts_with("TresPer") && w.contains("gpu:h100"));
    if !(under_rule && asks_h100) {
        return;
    }
    tally.types_held_checked += 1;
    // Once one was not held, the others are looked at once, not waited
    // for: a plugin that holds nothing fails the run in seconds.
    let wait: std::time::Duration = if tally.escapes.iter().any(|e| e.contains("is not held")) {
        std::time::Duration::ZERO
    } else {
        SHORT.into()
    };
    let held = wait_for("the job given h100 to be held", wait, || {
        shown().contains(" Reason=JobHeldAdmin ").then_some(())
    });
    if held.is_err() {
        tally.escapes.push(format!(
            "{what}: job {id} asks for h100 under QOS {GROUP_QOS} (a40 only) and is not held"
        ));
    }
}

fn oracle(c: &mut Cluster, with_plugin: bool, plan: Plan) -> TestResult {
    let started = Instant::now();
    let (scopes, planted) = scopes(c)?;
    let script_dir = c.dir.join("oracle");
    fs::create_dir_all(&script_dir).map_err(|e| e.to_string())?;
    let script = script_dir.join("job.sh");
    fs::write(&script, "#!/bin/sh\ntrue\n").map_err(|e| e.to_string())?;
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&script_dir, fs::Permissions::from_mode(0o755))
        .and_then(|()| fs::set_permissions(&script, fs::Permissions::from_mode(0o755)))
        .map_err(|e| e.to_string())?;
    ready(c, &scopes, with_plugin)?;
    let mut run = Run {
        c,
        log_at: 0,
        script: script.to_string_lossy().into_owned(),
    };
    let forms = match plan {
        Plan::One => forms::all(),
        Plan::TwoNodes => forms::across_nodes(),
    };
    let mut tally = Tally::default();
    // Before any verdict counts, the oracle's reading of Slurm's record
    // must see the planted job's untyped GPUs under its partition's
    // typed QOS: blind eyes (a field renamed, a reading broken) would
    // pass every run.
    judge(c, planted, "planted", &mut tally)?;
    let _ = c.run("scancel", &[&planted.to_string()]);
    let seen = tally.escapes.drain(..).collect::<Vec<_>>();
    testcluster::ensure(
        seen.len() == 1,
        format!(
            "the oracle does not see job {planted}, held with untyped GPUs in partition \
             {PARTITION} under {PART_QOS} (GrpTRES=gres/gpu:a40=8): its reading of Slurm's \
             record is blind ({seen:?}; the job: {:?})",
            held(c, planted).map(|h| h.iter().map(|c| c.tres().to_owned()).collect::<Vec<_>>())
        ),
    )?;
    // Held GPU jobs kept for the updates below: (scope, job, what, the
    // form's options).
    let mut pending: Vec<(usize, u32, String, &[String])> = Vec::new();
    for (index, scope) in scopes.iter().enumerate() {
        for form in &forms {
            let what = format!("{} [{}] {}", scope.name, scope.user.name, form.label);
            tally.submitted += 1;
            match run.submit(scope, form)? {
                Outcome::Accepted(id) => {
                    tally.accepted += 1;
                    *tally.accepted_by.entry(form.command.name()).or_default() += 1;
                    judge(c, id, &what, &mut tally)?;
                    if form.command == Command::Salloc {
                        let _ = c.run("scancel", &[&id.to_string()]);
                    } else if (form.command == Command::Sbatch
                        && (form.gpus || (scope.typed && form.plain)))
                        || (form.command == Command::Array && form.gpus)
                    {
                        // GPU jobs and arrays, and each typed scope's job
                        // without GPUs (GPU text hidden in an update is
                        // what gives it some).
                        pending.push((index, id, what, &form.args));
                    } else {
                        let _ = c.run("scancel", &[&id.to_string()]);
                    }
                }
                Outcome::Refused { by_plugin, said } => {
                    if by_plugin {
                        tally.refused_by_plugin += 1;
                    } else {
                        tally.refused_by_slurm += 1;
                        let first_line = said.lines().last().unwrap_or_default();
                        *tally.slurm_says.entry(first_line.to_owned()).or_default() += 1;
                    }
                    if by_plugin && form.typed && scope.permits_all(form.types) {
                        tally.wrongly_refused.push(format!("{what}: {said}"));
                    }
                    if by_plugin {
                        follow_advice(&mut run, scope, form, &what, &said, &mut tally)?;
                    }
                }
            }
        }
    }
    // Pending GPU jobs updated by their owner: those of the untyped scope
    // moved into a typed one or grown; those of typed scopes grown, or
    // their GPU request taken away (Slurm may then add its own, untyped,
    // for --ntasks-per-gpu). What Slurm then holds is judged again.
    let mut moves: Vec<&[&str]> = vec![
        &["QOS=qos_lafferty"],
        &["Partition=oracle_a40"],
        &["NumTasks=4"],
        &["NumNodes=1"],
    ];
    let mut regrown: Vec<&[&str]> = vec![
        &["NumTasks=4"],
        &["NumNodes=1"],
        &["TresPerJob=gres/gpu:0"],
        &["TresPerTask=gres/gpu:0"],
        &["Gres=gpu:0"],
        &["TresPerJob=gres/gpu:a40:0"],
        // Another type, the QOS not named: under qos_lafferty (a40 only)
        // the job must be held within seconds (read back after the update).
        &["Gres=gpu:h100:1"],
    ];
    // GPU text inside another entry of a TRES field: slurmctld finds
    // `gres:` anywhere in the rest of the string (22.05, 23.02), `gres`
    // anywhere from 23.11 (`_get_next_gres`), so each release reads one
    // of each pair as untyped GPUs. Tried on the job without GPUs and the
    // first GPU job of each typed scope (beside a GPU request of the
    // job's own, Slurm refuses a second one without a type).
    let hidden: &[&[&str]] = &[
        &["TresPerJob=cpu=gres:gpu:2"],
        &["TresPerJob=cpu=gres/gpu:2"],
        &["TresPerJob=license/gres:gpu:2"],
        &["TresPerNode=cpu=gres:gpu:2"],
        &["TresPerNode=cpu=gres/gpu:2"],
        &["TresPerTask=cpu=gres:gpu:1"],
        &["TresPerTask=cpu=gres/gpu:1"],
    ];
    // The same through libslurm's update call, as a user's own program
    // sends it: each field exactly as written (no `gres:` prepended,
    // nothing joined to what the job had), several fields in one request.
    let raw: &[&[&str]] = &[
        &[RAW, "tres_per_node=gres:gpu:2"],
        &[RAW, "tres_per_node=gres/gpu:2"],
        &[RAW, "tres_per_node=gres:gpu:a40:1,gres:gpu:1"],
        &[RAW, "tres_per_socket=gres:gpu:1"],
        &[
            RAW,
            "tres_per_job=gres:gpu:a40:1",
            "tres_per_node=cpu=gres:gpu:2",
        ],
        &[
            RAW,
            "tres_per_job=gres/gpu:a40:1",
            "tres_per_task=cpu=gres/gpu:1",
        ],
        // Typed, alone: gpu_qos must take it.
        &[RAW, "tres_per_node=gres:gpu:a40:1"],
    ];
    let raw_typed: &[&str] = &[RAW, "tres_per_node=gres:gpu:a40:1"];
    let raw_update = scopes.first().ok_or("no scope")?.user.compile(
        c,
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("gpu_oracle/raw_update.c"),
        "raw_update",
        false,
    )?;
    let raw_update = raw_update.to_string_lossy().into_owned();
    let mut hidden_tried = std::collections::BTreeSet::new();
    let mut cpu_jobs: Vec<u32> = Vec::new();
    let mut updated = 0usize;
    if plan == Plan::TwoNodes {
        moves.push(&["NumNodes=2"]);
        regrown.push(&["NumNodes=2"]);
    }
    for (index, id, what, form_args) in &pending {
        let scope = scopes.get(*index).ok_or("no such scope")?;
        let mut updates: Vec<&[&str]> = if scope.typed { &regrown } else { &moves }.clone();
        let cpu_only = what.ends_with("no GPU option");
        if cpu_only {
            updates = [hidden, raw].concat();
        } else if scope.typed && hidden_tried.insert(*index) {
            updates.extend_from_slice(hidden);
            updates.extend_from_slice(raw);
        }
        for (n, update) in updates.into_iter().enumerate() {
            // Each GPU text hidden in a job without GPUs, in a job of its
            // own: what one update made is not judged again under the next.
            let id = if cpu_only && n > 0 {
                let mut args = vec!["-H", "-o", "/dev/null"];
                args.extend_from_slice(&scope.args);
                args.extend(form_args.iter().map(String::as_str));
                args.push("--wrap=true");
                let fresh = scope.user.sbatch(c, &args)?;
                cpu_jobs.push(fresh);
                fresh
            } else {
                *id
            };
            let through_libslurm = update.first() == Some(&RAW);
            let (program, mut args) = if through_libslurm {
                (raw_update.as_str(), vec![id.to_string()])
            } else {
                ("scontrol", vec!["update".to_owned(), format!("job={id}")])
            };
            args.extend(
                update
                    .iter()
                    .filter(|s| **s != RAW)
                    .map(|s| (*s).to_owned()),
            );
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            tally.submitted += 1;
            let log_at = fs::metadata(c.log_path("slurmctld")).map_or(0, |m| m.len());
            let out = scope.user.run(c, None, program, &args)?;
            if hidden.contains(&update) || through_libslurm {
                let (log, _) = log_since(c, log_at);
                // Slurm's words without the job's id, so that like counts with like.
                let stderr = String::from_utf8_lossy(&out.stderr);
                let said = stderr.trim().split(" for job ").next().unwrap_or_default();
                let by_plugin = log.lines().any(|l| l.contains("job_submit/gpu_qos"));
                let how = if through_libslurm { "libslurm, " } else { "" };
                let outcome = match (out.status.success(), by_plugin) {
                    (true, _) => format!("{how}taken"),
                    (false, true) => format!("{how}refused by gpu_qos"),
                    (false, false) => format!("{how}refused by Slurm ({said})"),
                };
                *tally.hidden.entry(outcome).or_default() += 1;
                if update == raw_typed && by_plugin && !out.status.success() {
                    tally
                        .wrongly_refused
                        .push(format!("{what}, then {}: {said}", update.join(" ")));
                }
            }
            if out.status.success() {
                updated += 1;
                let what = format!("{what}, then {}", update.join(" "));
                judge(c, id, &what, &mut tally)?;
                if with_plugin && update.iter().any(|u| u.contains("h100")) {
                    held_to_its_rule(c, id, &what, &mut tally);
                }
            }
        }
        let _ = c.run("scancel", &[&id.to_string()]);
    }
    let summary = format!(
        "{} submissions and updates ({} forms x {} scopes, {} updates made, {} offered lines \
         typed): {} accepted, {} refused by gpu_qos, {} by Slurm; {} escapes, {} typed \
         requests refused; {:.0} s",
        tally.submitted + tally.advice_followed,
        forms.len(),
        scopes.len(),
        updated,
        tally.advice_followed,
        tally.accepted,
        tally.refused_by_plugin,
        tally.refused_by_slurm,
        tally.escapes.len(),
        tally.wrongly_refused.len(),
        started.elapsed().as_secs_f64()
    );
    eprintln!(
        "oracle: {summary}; accepted by command: {:?}",
        tally.accepted_by
    );
    for (said, n) in &tally.slurm_says {
        eprintln!("  refused by Slurm {n}x: {said}");
    }
    for (outcome, n) in &tally.hidden {
        eprintln!(
            "  GPU text hidden in another TRES entry (or sent through libslurm), {n}x: {outcome}"
        );
    }
    eprintln!(
        "  jobs given h100 under {GROUP_QOS} by an update, checked held: {}",
        tally.types_held_checked
    );
    // Untyped requests under oracle_default given its type (slurmctld's
    // log): each was judged above by what Slurm holds.
    let given = c.log("slurmctld").matches("accepted with GPU type").count();
    eprintln!(
        "  untyped requests given type a40 under {DEFAULT_QOS} (DefaultGPUType=a40): {given}"
    );
    for id in &cpu_jobs {
        let _ = c.run("scancel", &[&id.to_string()]);
    }
    let _ = c.run(
        "scontrol",
        &["delete", &format!("PartitionName={PARTITION}")],
    );
    if !with_plugin {
        // Slurm alone: the holes the plugin closes must be there.
        for e in tally.escapes.iter().take(12) {
            eprintln!("  escape: {e}");
        }
        return testcluster::ensure(
            !tally.escapes.is_empty(),
            format!("Slurm alone let no untyped GPU under a typed limit: {summary}"),
        );
    }
    // The arrays' cap is the one-node run's: the nodes change nothing there.
    let arrays = match plan {
        Plan::One => arrays::lowprio_arrays(c, &scopes)?,
        Plan::TwoNodes => arrays::Arrays {
            summary: "low-priority arrays: tried on one node".to_owned(),
            over_the_cap: Vec::new(),
        },
    };
    eprintln!("  {}", arrays.summary);
    let mut problems: Vec<String> = tally.escapes.clone();
    problems.extend(arrays.over_the_cap);
    if given == 0 {
        problems.push(format!(
            "no untyped request under {DEFAULT_QOS} was given its rule's DefaultGPUType=a40"
        ));
    }
    problems.extend(
        tally
            .wrongly_refused
            .iter()
            .map(|r| format!("typed request refused by gpu_qos: {r}")),
    );
    testcluster::ensure(
        problems.is_empty() && tally.accepted > 0 && tally.refused_by_plugin > 0,
        format!("{summary}\n{}", problems.join("\n")),
    )
}

/// Waits until slurmctld and the plugin know every scope: a typed
/// request accepted in each (the user's associations known), and with
/// the plugin an untyped one refused in each typed scope (its partition
/// map and the association manager's limits read).
fn ready(c: &Cluster, scopes: &[Scope], with_plugin: bool) -> TestResult {
    for scope in scopes {
        let mut typed: Vec<&str> = vec!["-H", "-o", "/dev/null", "--gres=gpu:a40:1"];
        typed.extend_from_slice(&scope.args);
        typed.push("--wrap=true");
        let id = scope.user.sbatch(c, &typed)?;
        let _ = c.run("scancel", &[&id.to_string()]);
        if !(with_plugin && scope.typed) {
            continue;
        }
        if scope.default_type {
            // Its untyped request is given the type, not refused.
            let mut untyped: Vec<&str> = vec!["-H", "-o", "/dev/null", "--gres=gpu:1"];
            untyped.extend_from_slice(&scope.args);
            untyped.push("--wrap=true");
            wait_for(
                &format!("gpu_qos to give the type under the {}", scope.name),
                SHORT,
                || {
                    let id = scope.user.sbatch(c, &untyped).ok()?;
                    let typed = c
                        .job(id)
                        .ok()?
                        .tres_request("TresPerNode")
                        .is_some_and(|t| t.contains("a40"));
                    let _ = c.run("scancel", &[&id.to_string()]);
                    typed.then_some(())
                },
            )?;
            continue;
        }
        let mut untyped: Vec<&str> = vec!["--parsable", "-H", "-o", "/dev/null", "--gres=gpu:1"];
        untyped.extend_from_slice(&scope.args);
        untyped.push("--wrap=true");
        wait_for(
            &format!("gpu_qos to refuse untyped GPUs under the {}", scope.name),
            SHORT,
            || {
                let out = scope.user.run(c, None, "sbatch", &untyped).ok()?;
                if out.status.success() {
                    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                    let _ = c.run("scancel", &[&id]);
                    return None;
                }
                Some(())
            },
        )?;
    }
    Ok(())
}
