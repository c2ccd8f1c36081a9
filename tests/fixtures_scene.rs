//! The recorded answers of Slurm that gpu-qos's unit tests read
//! (`tests/fixtures/slurm/RELEASE`, see its README), recorded from a real
//! cluster of the release under test.
//!
//! The cluster holds the scene those tests want: QOS qos_lafferty
//! (GrpTRES gres/gpu:a40=4, may preempt lowprio), a member of account
//! lafferty (GrpTRES gres/gpu:a40=8) running a job on 4 a40 under it,
//! another user's lowprio job on the node's other 4 a40, a third user's
//! job pending for Resources and the member's second job pending for
//! QOSGrpGRES. No cgroup and no MPS: nothing here needs them.
//!
//! The real `gpu-qos` runs each view with `GPUSHARE_RECORD_SLURM` naming
//! a fresh directory; each view gathered again in this process from that
//! directory alone (`Recorded`) must print what the live command printed,
//! and the calls of the unit tests must find every answer they ask for.
//! With `GPUSHARE_WRITE_FIXTURES=1` the recording replaces the
//! release's fixtures, with a `scene.json` naming the jobs and users.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;

use gpushare::qos::audit::{self, AuditReport, FailOn};
use gpushare::qos::gather::{self, site};
use gpushare::qos::slurm::{Query, ReadError, Recorded, SlurmRead, RECORD_ENV};
use gpushare::shared::locations::beside_slurm_conf;
use testcluster::cluster::{build_dir, slurm_release, wait_for, GpuSpec, Qos, CLUSTER_NAME};
use testcluster::time::{Timeout, JOB_START, SHORT};
use testcluster::users::TestUser;
use testcluster::{ensure, Cluster, ClusterSpec, Suite, TestResult};

/// The account of the group's member, with a typed limit of its own.
const ACCOUNT: &str = "lafferty";
/// The member of qos_lafferty `gpu-qos why` and `usage` run as.
const MEMBER: &str = "gpushare_alice";
/// The user of the running lowprio job.
const LOWPRIO_USER: &str = "gpushare_bob";
/// The user of the job pending for Resources.
const RESOURCES_USER: &str = "gpushare_carol";

/// Where the unit tests find no gpu_qos.conf: what is read of Slurm only.
const NO_POLICY: &str = "/nonexistent/gpushare/gpu_qos.conf";

/// Until a recording round finds the pending jobs with the reasons the
/// scene wants, in every answer: Slurm clears a pending job's reason
/// while its scheduler looks at it, and a round read in
/// such a moment is read again.
const STEADY_ROUND: Timeout = Timeout::secs(120);

fn scene_site() -> ClusterSpec {
    ClusterSpec {
        gpus: vec![GpuSpec {
            gpu_type: "a40".into(),
            count: 8,
        }],
        mps_count: None,
        // Other clusters on this machine may use cgroups: this one uses
        // none (proctrack/linuxproc, task/none).
        cgroup_devices: false,
        qos: vec![
            Qos {
                preempt_mode: Some("requeue".into()),
                grace_time: Some(120),
                usage_factor: Some(0.0),
                priority: Some(0),
                ..Qos::new("lowprio")
            },
            Qos {
                grp_tres: Some("gres/gpu:a40=4".into()),
                preempt: vec!["lowprio".into()],
                priority: Some(100),
                flags: Some("DenyOnLimit".into()),
                ..Qos::new("qos_lafferty")
            },
        ],
        partition_options: vec!["TRESBillingWeights=CPU=1.0,GRES/gpu:a40=4.0".into()],
        ..ClusterSpec::default()
    }
}

fn main() -> ExitCode {
    Suite::new(scene_site())
        .test(
            "recorded_answers_replay_as_the_live_commands_printed",
            record,
        )
        .smoke()
        .run()
}

/// The scene's jobs and the member.
struct Scene {
    member: TestUser,
    running: u32,
    lowprio: u32,
    resources: u32,
    group_wait: u32,
}

/// The member in account lafferty alone (its only association), may use
/// the group QOS.
fn member(c: &Cluster) -> Result<TestUser, String> {
    let cluster = format!("cluster={CLUSTER_NAME}");
    c.run_ok(
        "sacctmgr",
        &[
            "-i",
            "add",
            "account",
            ACCOUNT,
            &cluster,
            "GrpTRES=gres/gpu:a40=8",
        ],
    )?;
    let user = TestUser::create(c, MEMBER)?;
    let name = format!("name={MEMBER}");
    c.run_ok(
        "sacctmgr",
        &[
            "-i",
            "add",
            "user",
            MEMBER,
            &format!("account={ACCOUNT}"),
            &cluster,
        ],
    )?;
    c.run_ok(
        "sacctmgr",
        &[
            "-i",
            "modify",
            "user",
            "where",
            &name,
            "set",
            &format!("defaultaccount={ACCOUNT}"),
        ],
    )?;
    c.run_ok(
        "sacctmgr",
        &["-i", "delete", "user", "where", &name, "account=research"],
    )?;
    user.allow_qos(c, &["normal", "lowprio", "qos_lafferty"])?;
    // slurmctld learns association changes from slurmdbd on its own time.
    let filter = format!("users={MEMBER}");
    let mut last = String::new();
    wait_for(
        "slurmctld to see the member in lafferty alone",
        SHORT,
        || {
            last = c
                .run_ok("scontrol", &["show", "assoc_mgr", &filter, "flags=assoc"])
                .ok()?;
            let of =
                |account: &str| last.contains(&format!("Account={account} UserName={MEMBER}("));
            (of(ACCOUNT) && !of("research")).then_some(())
        },
    )
    .map_err(|e| format!("{e}:\n{last}"))?;
    Ok(user)
}

fn set_up(c: &Cluster) -> Result<Scene, String> {
    let member = member(c)?;
    let bob = TestUser::create(c, LOWPRIO_USER)?;
    bob.allow_qos(c, &["normal", "lowprio"])?;
    let carol = TestUser::create(c, RESOURCES_USER)?;
    // Jobs with a time limit, so that the backfill scheduler plans the
    // pending ones.
    let job = |user: &TestUser, qos: &str, gpus: u32| {
        user.sbatch(
            c,
            &[
                &format!("--qos={qos}"),
                &format!("--gres=gpu:a40:{gpus}"),
                "--time=30",
                "--output=/dev/null",
                "--wrap=sleep 1800",
            ],
        )
    };
    let running = job(&member, "qos_lafferty", 4)?;
    c.wait_job_state(running, &["RUNNING"], JOB_START)?;
    let lowprio = job(&bob, "lowprio", 4)?;
    c.wait_job_state(lowprio, &["RUNNING"], JOB_START)?;
    let group_wait = job(&member, "qos_lafferty", 2)?;
    c.wait_job_reason(group_wait, "QOSGrpGRES", SHORT)?;
    let resources = job(&carol, "normal", 2)?;
    c.wait_job_reason(resources, "Resources", SHORT)?;
    Ok(Scene {
        member,
        running,
        lowprio,
        resources,
        group_wait,
    })
}

/// Who runs a view.
#[derive(Clone, Copy)]
enum As {
    Member,
    Root,
}

/// A view gathered in this process from recorded answers, as the command
/// prints it.
type Replay = Box<dyn Fn(&dyn SlurmRead) -> Result<String, String>>;

/// One view of gpu-qos: its arguments, who runs it, and the same view
/// gathered in this process from recorded answers, as the command prints
/// it.
struct View {
    args: Vec<String>,
    who: As,
    replay: Replay,
}

fn json_line(r: Result<String, ReadError>) -> Result<String, String> {
    r.map(|j| format!("{j}\n")).map_err(|e| e.to_string())
}

fn views(c: &Cluster, s: &Scene) -> Vec<View> {
    let why = |id: u32| View {
        args: vec!["why".into(), id.to_string(), "--json".into()],
        who: As::Member,
        replay: Box::new(move |read| {
            let report = gather::why::report(read, &id.to_string()).map_err(|e| e.to_string())?;
            json_line(
                serde_json::to_string_pretty(&report).map_err(|e| ReadError::new(e.to_string())),
            )
        }),
    };
    let usage = |explain: bool| View {
        args: if explain {
            vec!["usage".into(), "--explain".into(), "--json".into()]
        } else {
            vec!["usage".into(), "--json".into()]
        },
        who: As::Member,
        replay: Box::new(move |read| {
            json_line(gather::usage::report(read, None, explain).map(|r| r.to_json()))
        }),
    };
    let policy = beside_slurm_conf(Some(&c.slurm_conf()), "gpu_qos.conf");
    let slurm_conf = c.slurm_conf();
    vec![
        why(s.resources),
        why(s.group_wait),
        usage(false),
        usage(true),
        View {
            args: vec!["metrics".into()],
            who: As::Root,
            replay: Box::new(move |read| {
                site::metrics_text(read, &policy)
                    .map(|(text, _)| text)
                    .map_err(|e| e.to_string())
            }),
        },
        View {
            args: vec!["audit".into(), "--json".into()],
            who: As::Root,
            replay: Box::new(move |read| {
                let (site, sources) =
                    site::site(read, None, Some(slurm_conf.clone())).map_err(|e| e.to_string())?;
                let report = AuditReport::new(audit::audit(&site), FailOn::Error, sources);
                Ok(format!("{}\n", report.to_json()))
            }),
        },
        View {
            args: vec!["generate".into()],
            who: As::Root,
            replay: Box::new(|read| {
                site::generated(read)
                    .map(|(text, _)| text)
                    .map_err(|e| e.to_string())
            }),
        },
    ]
}

/// A directory every user may write their answers into.
fn open_dir() -> Result<tempfile::TempDir, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777))
        .map_err(|e| format!("chmod {}: {e}", dir.path().display()))?;
    Ok(dir)
}

/// The answers in `dir`, by key.
fn answers(dir: &Path) -> Result<BTreeMap<String, String>, String> {
    let mut found = BTreeMap::new();
    for entry in fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let Some(key) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".txt"))
        else {
            continue;
        };
        let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        found.insert(key.to_owned(), text);
    }
    Ok(found)
}

/// What one round of the views recorded, merged (a later view's answer
/// to the same query replaces an earlier one's); `Ok(None)` where a view
/// gathered from the merged answers no longer prints what it printed (an
/// answer that changed between views) or a pending job was read without
/// the reason the scene gives it: read again. `last` says why.
fn round(
    c: &Cluster,
    s: &Scene,
    bin: &str,
    last: &mut String,
) -> Result<Option<BTreeMap<String, String>>, String> {
    let mut merged: BTreeMap<String, String> = BTreeMap::new();
    let views = views(c, s);
    let mut printed_by_view = Vec::new();
    for view in &views {
        let dir = open_dir()?;
        let mut cmd = match view.who {
            As::Member => s.member.command(c, None, bin),
            As::Root => c.command(bin),
        };
        let out = cmd
            .args(&view.args)
            .env(RECORD_ENV, dir.path())
            .output()
            .map_err(|e| format!("{bin}: {e}"))?;
        let shown = format!("gpu-qos {}", view.args.join(" "));
        let printed = String::from_utf8_lossy(&out.stdout).into_owned();
        // The audit exits 1 on findings (no gpu_qos.conf is one).
        let ok = out.status.success() || (view.args[0] == "audit" && out.status.code() == Some(1));
        ensure(
            ok,
            format!(
                "{shown} failed ({}):\n{printed}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ),
        )?;
        // Its own recording alone gives what it printed.
        let replayed = (view.replay)(&Recorded::new(dir.path()))
            .map_err(|e| format!("{shown} replayed: {e}"))?;
        ensure(
            replayed == printed,
            format!("{shown} printed:\n{printed}\nreplayed from its recording:\n{replayed}"),
        )?;
        merged.extend(answers(dir.path())?);
        printed_by_view.push((shown, printed));
    }
    let dir = open_dir()?;
    write_answers(dir.path(), &merged)?;
    for (view, (shown, printed)) in views.iter().zip(&printed_by_view) {
        let replayed = (view.replay)(&Recorded::new(dir.path()))
            .map_err(|e| format!("{shown} replayed: {e}"))?;
        if replayed != *printed {
            *last = format!(
                "{shown} printed:\n{printed}\nreplayed from the round's recording:\n{replayed}"
            );
            eprintln!("fixtures_scene: {shown} differs over the round's answers; again");
            return Ok(None);
        }
    }
    Ok(steady(s, &merged, last).then_some(merged))
}

/// Writes each answer as `dir/KEY.txt`.
fn write_answers(dir: &Path, answers: &BTreeMap<String, String>) -> TestResult {
    for (key, text) in answers {
        let path = dir.join(format!("{key}.txt"));
        fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// Whether every recorded answer about the pending jobs gives the
/// scene's reasons (as the unit tests read them back).
fn steady(s: &Scene, answers: &BTreeMap<String, String>, last: &mut String) -> bool {
    let reason_of = |text: &str, id: u32| -> Option<String> {
        text.lines()
            .map(|l| l.split('|').collect::<Vec<_>>())
            .find(|f| f.first().map(|i| i.trim()) == Some(&*id.to_string()))
            .and_then(|f| f.get(8).map(|r| r.trim().to_owned()))
    };
    answers
        .iter()
        .filter(|(k, _)| k.starts_with("squeue-"))
        .all(|(key, text)| {
            [(s.resources, "Resources"), (s.group_wait, "QOSGrpGRES")]
                .iter()
                .all(|(id, want)| {
                    let got = reason_of(text, *id);
                    let fine = got.is_none() || got.as_deref() == Some(*want);
                    if !fine {
                        *last = format!("{key}: job {id} waits for {got:?}, not {want}");
                        eprintln!("fixtures_scene: {last}; again");
                    }
                    fine
                })
        })
}

/// A [`SlurmRead`] over recorded answers that notes every key it lacked.
struct Noting {
    recorded: Recorded,
    missing: Mutex<Vec<String>>,
}

impl SlurmRead for Noting {
    fn read(&self, query: &Query) -> Result<String, ReadError> {
        let answer = self.recorded.read(query);
        if answer.is_err() {
            self.missing
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(query.key.clone());
        }
        answer
    }
}

/// The calls of `src/qos/gather/scenes.rs`, over `dir`: the keys they
/// asked for and found no answer to.
fn unit_test_misses(dir: &Path, s: &Scene) -> Result<Vec<String>, String> {
    let read = Noting {
        recorded: Recorded::new(dir),
        missing: Mutex::new(Vec::new()),
    };
    let no_policy = PathBuf::from(NO_POLICY);
    for id in [s.resources, s.group_wait] {
        let _ = gather::why::report(&read, &id.to_string());
    }
    for explain in [false, true] {
        let _ = gather::usage::report(&read, None, explain);
    }
    let _ = site::metrics_text(&read, &no_policy);
    let _ = site::site(&read, Some(no_policy), None);
    if let Ok((text, _)) = site::generated(&read) {
        let conf = open_dir()?;
        let path = conf.path().join("gpu_qos.conf");
        fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        let _ = site::check_inputs(&read, &path);
    }
    let mut missing = read
        .missing
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    missing.sort();
    missing.dedup();
    Ok(missing)
}

/// The checkout's fixtures of the release in use: `tests/fixtures/slurm/X.Y`.
fn fixture_dir() -> PathBuf {
    let (major, minor) = slurm_release();
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/slurm")
        .join(format!("{major}.{minor:02}"))
}

/// Replaces the release's fixtures with `answers` and the scene's manifest.
fn write_fixtures(answers: &BTreeMap<String, String>, s: &Scene, c: &Cluster) -> TestResult {
    let dir = fixture_dir();
    // Its files give way; other suites' folders in it (advise/) stay.
    if dir.exists() {
        for entry in fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
            let path = entry.map_err(|e| e.to_string())?.path();
            if path.is_file() {
                fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
    }
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    write_answers(&dir, answers)?;
    let (major, minor) = slurm_release();
    let a40: u32 = c.spec.gpus.iter().map(|g| g.count).sum();
    let nodes: Vec<serde_json::Value> = c
        .node_names()
        .iter()
        .map(|n| serde_json::json!({ "name": n, "a40": a40 }))
        .collect();
    let manifest = serde_json::json!({
        "release": format!("{major}.{minor:02}"),
        "recorded": true,
        "member": { "name": s.member.name, "uid": s.member.uid },
        "account": ACCOUNT,
        "jobs": {
            "running": s.running.to_string(),
            "lowprio": s.lowprio.to_string(),
            "resources": s.resources.to_string(),
            "qos_grp_gres": s.group_wait.to_string(),
        },
        "users": { "lowprio": LOWPRIO_USER, "resources": RESOURCES_USER },
        "nodes": nodes,
    });
    let text = serde_json::to_string_pretty(&manifest).map_err(|e| e.to_string())?;
    let path = dir.join("scene.json");
    fs::write(&path, format!("{text}\n")).map_err(|e| format!("{}: {e}", path.display()))?;
    println!(
        "fixtures_scene: wrote {} answers and scene.json to {}",
        answers.len(),
        dir.display()
    );
    Ok(())
}

fn record(c: &mut Cluster) -> TestResult {
    let scene = set_up(c)?;
    let bin = build_dir()?.join("gpu-qos");
    let bin = bin.to_string_lossy().into_owned();
    let (mut failed, mut last) = (None, String::new());
    let answers = wait_for(
        "a round of the views with the scene's reasons in every answer",
        STEADY_ROUND,
        || match round(c, &scene, &bin, &mut last) {
            Ok(found) => found,
            Err(e) => {
                failed = Some(e);
                Some(BTreeMap::new())
            }
        },
    )
    .map_err(|e| format!("{e}; last: {last}"))?;
    if let Some(e) = failed {
        return Err(e);
    }
    let dir = open_dir()?;
    write_answers(dir.path(), &answers)?;
    let missing = unit_test_misses(dir.path(), &scene)?;
    ensure(
        missing.is_empty(),
        format!("the unit tests' calls find no answer for {missing:?}"),
    )?;
    if std::env::var("GPUSHARE_WRITE_FIXTURES").as_deref() == Ok("1") {
        write_fixtures(&answers, &scene, c)?;
    }
    Ok(())
}
