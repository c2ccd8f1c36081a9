//! `gpu-qos advise` on the cluster's real accounting: whole-GPU and share
//! jobs of two users run and end, then root writes gpushare's words into
//! their `AdminComment` as the node does (`sacctmgr modify job`), one
//! among the site's own text, one from too few samples, and one job
//! carries the words only in its comment and command line, where a user
//! put them. The list each caller gets is checked exactly: which jobs,
//! which advice, which size, which command line.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use gpushare::qos::gather;
use gpushare::qos::slurm::used::Whose;
use gpushare::qos::slurm::{Recorded, RECORD_ENV};
use testcluster::cluster::{build_dir, slurm_release, wait_for};
use testcluster::time::{JOB_LONG, SHORT};
use testcluster::users::TestUser;
use testcluster::{ensure, Cluster, TestResult};

/// gpushare's words for one GPU, as the node writes them.
fn words(units: &str, peak: u64, limit: u64, sm: &str, samples: u64) -> String {
    format!(
        "gpushare-usage: node=node1 gpu=0 units={units} mem_peak_mib={peak} mem_limit_mib={limit} \
         sm_mean={sm} samples={samples}"
    )
}

/// (job, kind, units, command) of one advice.
type Advised = (String, String, Option<u64>, String);

/// (job, kind, units) of each job a report advises, by job id.
fn advised(json: &str) -> Result<Vec<Advised>, String> {
    let r: serde_json::Value = serde_json::from_str(json).map_err(|e| format!("{e}: {json}"))?;
    let mut out: Vec<Advised> = r["advice"]
        .as_array()
        .ok_or_else(|| format!("no advice list: {json}"))?
        .iter()
        .map(|a| {
            (
                a["job"].as_str().unwrap_or_default().to_owned(),
                a["kind"].as_str().unwrap_or_default().to_owned(),
                a["units"].as_u64(),
                a["command"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    out.sort_by_key(|a| a.0.parse::<u64>().unwrap_or(u64::MAX));
    Ok(out)
}

/// The report's jobs not advised are `few` from too few samples and
/// `none` without figures, and no others.
fn not_advised_are(json: &str, few: u64, none: u64, whose: &str) -> TestResult {
    let r: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    let counts: Vec<(String, u64)> = r["not_advised"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    (
                        c["reason"].as_str().unwrap_or_default().to_owned(),
                        c["jobs"].as_u64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let want = vec![
        ("too_few_samples".to_owned(), few),
        ("no_figures".to_owned(), none),
    ];
    ensure(
        counts == want,
        format!("{whose} jobs not advised: {counts:?}"),
    )
}

pub fn advise_lists_each_job_with_its_size_and_line(c: &mut Cluster) -> TestResult {
    // Jobs that ended before this test are left out: its window starts
    // after the clock has passed them.
    let since = c
        .run_ok("date", &["-d", "+1 second", "+%Y-%m-%dT%H:%M:%S"])?
        .trim()
        .to_owned();
    wait_for("the clock to pass the window's start", SHORT, || {
        let now = c.run_ok("date", &["+%Y-%m-%dT%H:%M:%S"]).ok()?;
        (now.trim() >= since.as_str()).then_some(())
    })?;
    let ann = TestUser::create(c, "ann")?;
    let ben = TestUser::create(c, "ben")?;
    let o = ["-o", "/dev/null", "--wrap=true"];
    let submit = |user: &TestUser, args: &[&str]| -> Result<u32, String> {
        let all: Vec<&str> = args.iter().chain(o.iter()).copied().collect();
        user.sbatch(c, &all)
    };
    let forged = words("50/100", 1, 23_034, "0.010", 30);
    let light = submit(&ann, &["--gres=gpu:a40:1"])?;
    let small = submit(&ann, &["--gres=mps:50"])?;
    let full = submit(&ann, &["--gres", "mps:25", "-t", "5"])?;
    let few = submit(&ann, &["--gres=gpu:a40:1"])?;
    let forger = submit(
        &ann,
        &[
            "--gres=mps:50",
            &format!("--comment={forged}"),
            "-J",
            &forged,
        ],
    )?;
    let bens = submit(&ben, &["-q", "normal", "--gres=gpu:a40:1"])?;
    let bare = submit(&ben, &["--gres=gpu:a40:1"])?;
    let ids = [light, small, full, few, forger, bens, bare];
    // Ended, and in accounting as sacct's window reads it: slurmdbd
    // writes a job's eligible time and SubmitLine a moment after its
    // first record (until then `-S` does not list the job).
    wait_for("every job to end and reach accounting", JOB_LONG, || {
        let out = c
            .run_ok(
                "sacct",
                &[
                    "-a",
                    "-X",
                    "-n",
                    "-P",
                    "-S",
                    &since,
                    "-o",
                    "JobID,State,SubmitLine",
                ],
            )
            .ok()?;
        let done = out
            .lines()
            .filter(|l| l.contains("|COMPLETED|") && !l.ends_with("|COMPLETED|"))
            .count();
        (done == ids.len()).then_some(())
    })?;
    // gpushare's words, as root writes them (the site's text around one).
    let comments = [
        (
            light,
            format!(
                "site: project 7; {}; checked",
                words("whole", 4096, 46_068, "0.100", 30)
            ),
        ),
        (small, words("50/100", 1024, 23_034, "0.100", 30)),
        (full, words("25/100", 11_517, 11_517, "0.500", 30)),
        (few, words("whole", 1024, 46_068, "0.050", 1)),
        (bens, words("whole", 4096, 46_068, "0.100", 30)),
    ];
    for (job, text) in &comments {
        c.run_ok(
            "sacctmgr",
            &[
                "-i",
                "modify",
                "job",
                "where",
                &format!("jobid={job}"),
                "set",
                &format!("AdminComment={text}"),
            ],
        )?;
    }
    let line_of = |job: u32| -> Result<String, String> {
        Ok(c.run_ok(
            "sacct",
            &["-X", "-n", "-P", "-j", &job.to_string(), "-o", "SubmitLine"],
        )?
        .trim()
        .to_owned())
    };
    // The line to type is rebuilt from what Slurm parsed (the advised
    // option, the record's partition, a QOS the line named), each word
    // quoted where a shell would read it: never the user's own text.
    let instead = |job: u32, from: &str, to: &str| -> Result<String, String> {
        let line = line_of(job)?;
        ensure(line.contains(from), format!("job {job}'s line: {line:?}"))?;
        let qos = if line.contains("-q normal") {
            " --qos=normal"
        } else {
            ""
        };
        Ok(format!("sbatch {to} --partition=gpu{qos}"))
    };
    let ann_advice = vec![
        (
            light.to_string(),
            "share_instead".to_owned(),
            Some(13),
            instead(light, "--gres=gpu:a40:1", "--gres=mps:13")?,
        ),
        (
            small.to_string(),
            "smaller".to_owned(),
            Some(7),
            instead(small, "--gres=mps:50", "--gres=mps:7")?,
        ),
        (
            full.to_string(),
            "larger".to_owned(),
            Some(32),
            instead(full, "--gres mps:25", "--gres=mps:32")?,
        ),
    ];
    let bens_advice = (
        bens.to_string(),
        "share_instead".to_owned(),
        Some(13),
        instead(bens, "--gres=gpu:a40:1", "--gres=mps:13")?,
    );

    let bin = build_dir()?.join("gpu-qos");
    let bin = bin.to_string_lossy().into_owned();
    let args = ["advise", "--since", &since, "--json"];
    // A user: their own jobs.
    let json = ann.run_ok(c, None, &bin, &args)?;
    ensure(
        advised(&json)? == ann_advice,
        format!("ann's advice {:?}, not {ann_advice:?}", advised(&json)?),
    )?;
    not_advised_are(&json, 1, 1, "ann's")?;
    // The example gpu_qos.conf allows shares only in its reservations.
    ensure(
        json.matches("jhl_homework_gpu*").count() == 3,
        format!("each share advised names the shared reservations: {json}"),
    )?;
    println!(
        "{}",
        ann.run_ok(c, None, &bin, &["advise", "--since", &since])?
    );
    // A user naming another: what Slurm shows them (no PrivateData here).
    let json = ann.run_ok(
        c,
        None,
        &bin,
        &["advise", "--since", &since, "--user", "ben", "--json"],
    )?;
    ensure(
        advised(&json)? == vec![bens_advice.clone()],
        format!("ben's advice as ann sees it: {:?}", advised(&json)?),
    )?;
    // Root: every user's, its answers recorded.
    let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
    let out = c
        .command(&bin)
        .args(args)
        .env(RECORD_ENV, dir.path())
        .output()
        .map_err(|e| format!("{bin}: {e}"))?;
    let json = String::from_utf8_lossy(&out.stdout).into_owned();
    ensure(
        out.status.success(),
        format!(
            "gpu-qos advise as root: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    )?;
    let mut every = ann_advice.clone();
    every.push(bens_advice);
    ensure(
        advised(&json)? == every,
        format!("root's advice {:?}, not {every:?}", advised(&json)?),
    )?;
    not_advised_are(&json, 1, 2, "every user's")?;
    // The same answers, read back in this process, give the same report.
    let again = gather::advise::report(
        &Recorded::new(dir.path()),
        &Whose::Everyone,
        &since,
        "now",
        true,
    )
    .map_err(|e| e.to_string())?;
    ensure(
        format!("{}\n", again.to_json()) == json,
        format!(
            "the recording read back gives\n{}\nnot\n{json}",
            again.to_json()
        ),
    )?;
    if std::env::var("GPUSHARE_WRITE_FIXTURES").as_deref() == Ok("1") {
        write_fixtures(dir.path(), &since, &json)?;
    }
    Ok(())
}

/// The recording and the report it gave, as the unit tests read them:
/// `tests/fixtures/slurm/X.Y/advise/`.
fn write_fixtures(recorded: &Path, since: &str, json: &str) -> TestResult {
    let (major, minor) = slurm_release();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/slurm")
        .join(format!("{major}.{minor:02}"))
        .join("advise");
    if dir.exists() {
        fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    for entry in fs::read_dir(recorded).map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        files.insert(
            name,
            fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?,
        );
    }
    files.insert(
        "scene.json".into(),
        format!(
            "{}\n",
            serde_json::json!({ "since": since, "until": "now" })
        ),
    );
    files.insert("expected.json".into(), json.to_owned());
    for (name, text) in &files {
        let path = dir.join(name);
        fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    println!("advise: wrote {} files to {}", files.len(), dir.display());
    Ok(())
}
