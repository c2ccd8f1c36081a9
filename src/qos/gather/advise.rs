//! What `gpu-qos advise` reads: whose jobs (the caller's own; every
//! user's for root and `SlurmUser`, as the admins' commands decide it,
//! [`super::site::sees_the_whole_site`]), what they used (`sacct`, one
//! call), gpu_qos.conf beside slurm.conf (`MaxMPSPerJob`, the shared-GPU
//! reservations), then only for the jobs advised their command lines
//! and, for a whole GPU advised, the types of their nodes' GPUs.
//!
//! Slurm decides what the caller sees: with `PrivateData=jobs` a user's
//! sacct lists only their own jobs (and those of accounts they
//! coordinate), whatever `--user` names.

use std::collections::BTreeMap;

use super::site::sees_the_whole_site;
use super::{jobs_private, policy_in_force};
use crate::qos::advise::{self, AdviseReport, Kind, Site};
use crate::qos::site::{parse_nodes, SlurmSettings};
use crate::qos::slurm::used::{self, Whose};
use crate::qos::slurm::{config, nodes, soft, Query, ReadError, SlurmRead};
use crate::shared::{hostlist, usage_words};

/// Whose jobs to read: `user` where named; else every user's for one
/// who sees the whole site (`uid` 0 or `SlurmUser`), the caller's own
/// for anyone else.
pub fn whose(read: &dyn SlurmRead, user: Option<&str>, uid: u32) -> Result<Whose, ReadError> {
    if let Some(u) = user {
        return Ok(Whose::User(u.to_owned()));
    }
    if sees_the_whole_site(read, uid) {
        return Ok(Whose::Everyone);
    }
    // The name of the uid that runs this, not $USER, which anyone sets.
    Ok(Whose::User(
        read.read(&Query::user_name())?.trim().to_owned(),
    ))
}

/// The advice for whoever runs this (its effective uid, never a read of
/// Slurm's): on `user`'s jobs where named, else as [`whose`] decides.
pub fn report_for_caller(
    read: &dyn SlurmRead,
    user: Option<&str>,
    since: &str,
    until: &str,
) -> Result<AdviseReport, ReadError> {
    let uid = rustix::process::geteuid().as_raw();
    let whose = whose(read, user, uid)?;
    report(read, &whose, since, until, sees_the_whole_site(read, uid))
}

/// The advice on the jobs of `whose` that ran between `since` and
/// `until`; `caller_sees_all`: whether the caller sees the whole site
/// (a note says what PrivateData hides from anyone else).
pub fn report(
    read: &dyn SlurmRead,
    whose: &Whose,
    since: &str,
    until: &str,
    caller_sees_all: bool,
) -> Result<AdviseReport, ReadError> {
    let text = read.read(&used::between(whose, since, until))?;
    let (mut jobs, bad) = used::parse(&text);
    let mut notes: Vec<String> = bad
        .iter()
        .map(|b| format!("sacct's line {} left out: {}", b.line, b.reason))
        .collect();
    let mut unread = Vec::new();
    let settings = soft(
        &mut unread,
        "scontrol show config",
        read.read(&config::show()),
    )
    .map(|t| SlurmSettings::from_show_config(&t));
    let cfg = match settings.as_ref().map(policy_in_force) {
        Some(Ok(cfg)) => cfg,
        Some(Err(e)) => {
            notes.push(format!(
                "gpu_qos.conf not read ({e}): sizes are not capped by MaxMPSPerJob"
            ));
            None
        }
        None => None,
    };
    if let (Some(s), Whose::User(u)) = (&settings, whose) {
        if jobs_private(s) && !caller_sees_all {
            notes.push(format!(
                "PrivateData=jobs: Slurm lists only the jobs you may see of {u}'s"
            ));
        }
    }
    // gpushare's words of a job whose AdminComment a site tool holds
    // (jobstats' blob) are in its SystemComment.
    let elsewhere: Vec<String> = jobs
        .iter()
        .filter(|j| !j.admin_comment.trim().is_empty())
        .filter(|j| usage_words::parse(&j.admin_comment).is_empty())
        .map(|j| j.id.clone())
        .collect();
    let mut system: BTreeMap<String, String> = BTreeMap::new();
    for chunk in elsewhere.chunks(used::LINES_PER_QUERY) {
        if let Some(t) = soft(
            &mut unread,
            "sacct SystemComment (gpushare's figures beside a site tool's AdminComment)",
            read.read(&used::system_comments(chunk)),
        ) {
            system.extend(used::parse_submit_lines(&t, chunk));
        }
    }
    for job in &mut jobs {
        if let Some(comment) = system.remove(&job.id) {
            job.system_comment = comment;
        }
    }
    let site = Site::of(&jobs, cfg.as_ref());
    let (advised, mut report) = advise::decisions(&jobs, &site);

    // The command lines of the jobs advised, a bounded number at a time.
    let ids: Vec<String> = advised.iter().map(|(j, _)| j.id.clone()).collect();
    let mut lines: BTreeMap<String, String> = BTreeMap::new();
    for chunk in ids.chunks(used::LINES_PER_QUERY) {
        if let Some(t) = soft(
            &mut unread,
            "sacct SubmitLine (the command lines advised)",
            read.read(&used::submit_lines(chunk)),
        ) {
            lines.extend(used::parse_submit_lines(&t, chunk));
        }
    }
    // The GPU types of the nodes of those told to ask for a whole GPU.
    let node_types: Vec<(String, Vec<String>)> =
        if advised.iter().any(|(_, d)| d.kind == Kind::WholeInstead) {
            soft(&mut unread, "scontrol show node", read.read(&nodes::all()))
                .map(|t| {
                    parse_nodes(&t)
                        .0
                        .into_iter()
                        .map(|n| {
                            let types = n.gpu_types().map(str::to_owned).collect();
                            (n.name, types)
                        })
                        .collect()
                })
                .unwrap_or_default()
        } else {
            Vec::new()
        };
    for (job, d) in advised {
        let gpu_type = (d.kind == Kind::WholeInstead)
            .then(|| type_of_nodes(job.nodes.as_deref(), &node_types))
            .flatten();
        report.advice.push(advise::entry(
            job,
            d,
            lines.get(&job.id).map(String::as_str),
            gpu_type.as_deref(),
            cfg.as_ref(),
        ));
    }
    report.whose = match whose {
        Whose::User(u) => u.clone(),
        Whose::Everyone => "every user".to_owned(),
    };
    report.since = since.to_owned();
    report.until = until.to_owned();
    notes.extend(
        unread
            .into_iter()
            .map(|u| format!("{}: {}", u.source, u.reason)),
    );
    report.notes = notes;
    Ok(report)
}

/// The one GPU type of the nodes `list` names (`None`: unknown, or
/// several).
fn type_of_nodes(list: Option<&str>, node_types: &[(String, Vec<String>)]) -> Option<String> {
    let names = hostlist::expand(list?).ok()?;
    let mut found: Option<&str> = None;
    for name in &names {
        let (_, types) = node_types.iter().find(|(n, _)| n == name)?;
        for t in types {
            match found {
                Some(f) if f != t => return None,
                _ => found = Some(t),
            }
        }
    }
    found.map(str::to_owned)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::qos::advise::{LineFrom, NotAdvised};

    /// Answers by query key.
    struct Answers(Vec<(String, String)>);

    impl SlurmRead for Answers {
        fn read(&self, query: &Query) -> Result<String, ReadError> {
            self.0
                .iter()
                .find(|(k, _)| *k == query.key)
                .map(|(_, t)| t.clone())
                .ok_or_else(|| ReadError::new(format!("no answer to {}", query.key)))
        }
    }

    const CONFIG: &str = "PrivateData             = jobs,usage\n\
                          SlurmUser               = slurm(64030)\n\
                          SLURM_CONF              = /nonexistent/gpushare/slurm.conf\n";

    fn words(units: &str, peak: u64, limit: u64, sm: &str, samples: u64) -> String {
        format!(
            "gpushare-usage: gpu=0 units={units} mem_peak_mib={peak} mem_limit_mib={limit} \
             sm_mean={sm} samples={samples}"
        )
    }

    fn site_answers(submit_lines: &str) -> Answers {
        let light = words("whole", 4096, 46_068, "0.1", 30);
        let small = words("50/100", 1024, 23_034, "0.1", 30);
        let full = words("100/100", 46_068, 46_068, "0.5", 30);
        let few = words("50/100", 1024, 23_034, "0.1", 1);
        let jobs = format!(
            "101|alice|normal|gpu||node1|cpu=1,gres/gpu:a40=1,gres/gpu=1|COMPLETED|600|||site; {light}\n\
             101.batch||||||||600|||\n\
             102|alice|normal|gpu||node1|cpu=1,gres/mps=50|COMPLETED|600|||{small}\n\
             103|alice|normal|gpu||node1|cpu=1,gres/mps=100|FAILED|600|||{full}\n\
             104|alice|normal|gpu||node1|cpu=1,gres/mps=50|COMPLETED|600|||\n\
             105|alice|normal|gpu||node1|cpu=1,gres/mps=50|COMPLETED|600|||{few}\n\
             106|alice|normal|gpu||node1|cpu=1,gres/mps=50|RUNNING|60|||\n"
        );
        Answers(vec![
            ("sacct-advise-user-alice-now-7days-now".into(), jobs),
            ("scontrol-show-config".into(), CONFIG.into()),
            ("id-un".into(), "alice\n".into()),
            (
                "scontrol-show-node".into(),
                "NodeName=node1 Arch=x86_64 Gres=gpu:a40:4,mps:400 State=IDLE Partitions=gpu\n"
                    .into(),
            ),
            ("sacct-submit-lines-101-103-3".into(), submit_lines.into()),
        ])
    }

    /// Alice's report, as she sees it.
    fn alices(read: &Answers) -> AdviseReport {
        report(
            read,
            &Whose::User("alice".into()),
            "now-7days",
            "now",
            false,
        )
        .unwrap()
    }

    #[test]
    fn the_callers_jobs_advised_with_their_own_lines() {
        // Job 104's line holds gpushare's words: a user's text, never read
        // as figures (and not even asked for: it has none).
        let lines = "101|sbatch -q normal --gres=gpu:a40:1 train.sh\n\
                     102|srun --gres=mps:50 --comment=gpushare-usage: python a.py\n\
                     103|srun --gres=mps:100 python x.py\n";
        let read = site_answers(lines);
        let mine = whose(&read, None, 1000).unwrap();
        assert_eq!(mine, Whose::User("alice".into()));
        let r = report(&read, &mine, "now-7days", "now", false).unwrap();
        let got: Vec<(&str, &str, LineFrom)> = r
            .advice
            .iter()
            .map(|a| (a.job.as_str(), a.command.as_str(), a.command_from))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "101",
                    "sbatch --gres=mps:13 --partition=gpu --qos=normal",
                    LineFrom::SubmitLine
                ),
                (
                    "102",
                    "srun --gres=mps:7 --partition=gpu",
                    LineFrom::SubmitLine
                ),
                (
                    "103",
                    "srun --gres=gpu:a40:1 --partition=gpu",
                    LineFrom::SubmitLine
                ),
            ]
        );
        assert_eq!((r.jobs, r.gpu_jobs, r.not_ended), (6, 5, 1));
        let not: Vec<(NotAdvised, usize)> =
            r.not_advised.iter().map(|c| (c.reason, c.jobs)).collect();
        assert_eq!(
            not,
            vec![(NotAdvised::TooFewSamples, 1), (NotAdvised::NoFigures, 1)]
        );
        assert!(
            r.notes.iter().any(|n| n.starts_with("PrivateData=jobs")),
            "{:?}",
            r.notes
        );
        let text = r.to_text();
        assert!(text.starts_with("Jobs of alice that ran between now-7days and now"));
        // Root sees every user's jobs, and no PrivateData note.
        assert_eq!(whose(&read, None, 0).unwrap(), Whose::Everyone);
        assert_eq!(whose(&read, None, 64030).unwrap(), Whose::Everyone);
        assert_eq!(
            whose(&read, Some("bob"), 0).unwrap(),
            Whose::User("bob".into())
        );
        let r = report(
            &read,
            &Whose::User("alice".into()),
            "now-7days",
            "now",
            true,
        )
        .unwrap();
        assert!(!r.notes.iter().any(|n| n.starts_with("PrivateData")));
    }

    #[test]
    fn a_line_that_starts_twice_is_nobodys() {
        // Job 102's user put a newline and a record of job 103's shape in
        // their command line: 103 gets no line of theirs.
        let lines = "101|sbatch --gres=gpu:a40:1 train.sh\n\
                     102|sbatch --wrap=\"x\n\
                     103|sbatch --gres=gpu:h100:8 --qos=theirs evil.sh\"\n\
                     103|srun --gres=mps:100 python x.py\n";
        let read = site_answers(lines);
        let r = alices(&read);
        let third = r.advice.iter().find(|a| a.job == "103").unwrap();
        assert_eq!(third.command, "sbatch --gres=gpu:a40:1 --partition=gpu");
        assert_eq!(third.command_from, LineFrom::Minimal);
        let second = r.advice.iter().find(|a| a.job == "102").unwrap();
        assert_eq!(second.command_from, LineFrom::SubmitLineAdded);
        // Without the lines and the nodes: the minimal line, untyped.
        let mut read = site_answers("");
        read.0
            .retain(|(k, _)| k.starts_with("sacct-advise") || k == "id-un");
        let r = alices(&read);
        let cmds: Vec<&str> = r.advice.iter().map(|a| a.command.as_str()).collect();
        assert_eq!(
            cmds,
            [
                "sbatch --gres=mps:13 --partition=gpu",
                "sbatch --gres=mps:7 --partition=gpu",
                "sbatch --gres=gpu:1 --partition=gpu"
            ]
        );
        assert!(r.notes.len() >= 3, "{:?}", r.notes);
    }

    /// What a report says of each job, notes aside (they name the
    /// recording cluster's files, which are gone), and its command
    /// (recorded when advise offered the job's own SubmitLine: checked
    /// apart).
    fn advice_of(report: &serde_json::Value) -> Vec<serde_json::Value> {
        let keep = ["job", "user", "kind", "held", "used", "units", "option"];
        report["advice"]
            .as_array()
            .map(|list| {
                list.iter()
                    .map(|a| keep.iter().map(|k| (*k, a[*k].clone())).collect())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `tests/fixtures/slurm/X.Y/advise`: what `gpu-qos advise` read on
    /// each release's test cluster (tests/replay/advise.rs) and printed.
    #[test]
    fn each_releases_recorded_accounting_gives_the_advice_recorded() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/slurm");
        let mut read = 0;
        for release in std::fs::read_dir(&root).unwrap() {
            let dir = release.unwrap().path().join("advise");
            if !dir.is_dir() {
                continue;
            }
            let file = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
            let scene: serde_json::Value = serde_json::from_str(&file("scene.json")).unwrap();
            let expected: serde_json::Value = serde_json::from_str(&file("expected.json")).unwrap();
            let since = scene["since"].as_str().unwrap();
            let r = report(
                &crate::qos::slurm::Recorded::new(&dir),
                &Whose::Everyone,
                since,
                "now",
                true,
            )
            .unwrap();
            let got: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
            assert_eq!(advice_of(&got), advice_of(&expected), "{}", dir.display());
            // Each line offered: the advised option and the job's record,
            // rebuilt, never the recorded line's words.
            for a in got["advice"].as_array().unwrap() {
                let command = a["command"].as_str().unwrap();
                let option = a["option"].as_str().unwrap();
                assert!(
                    command.starts_with(&format!("sbatch {option} --partition=")),
                    "{command}"
                );
                assert!(!command.contains("--wrap"), "{command}");
                assert!(a["submitted"].as_str().unwrap().contains("--wrap=true"));
            }
            assert_eq!(advice_of(&got).len(), 4, "{}", dir.display());
            assert_eq!(got["not_advised"], expected["not_advised"]);
            read += 1;
        }
        assert!(read >= 2, "{read} releases recorded in {}", root.display());
    }

    #[test]
    fn one_type_of_the_nodes_or_none() {
        let nodes = vec![
            ("gpu01".to_owned(), vec!["a40".to_owned()]),
            ("gpu02".to_owned(), vec!["a40".to_owned()]),
            (
                "gpu03".to_owned(),
                vec!["h100".to_owned(), "a40".to_owned()],
            ),
        ];
        assert_eq!(
            type_of_nodes(Some("gpu[01-02]"), &nodes).as_deref(),
            Some("a40")
        );
        assert_eq!(type_of_nodes(Some("gpu03"), &nodes), None);
        assert_eq!(type_of_nodes(Some("gpu09"), &nodes), None);
        assert_eq!(type_of_nodes(None, &nodes), None);
    }
}
