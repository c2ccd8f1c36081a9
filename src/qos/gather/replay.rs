//! What `gpu-qos replay` reads: gpu_qos.conf, the jobs accounting
//! recorded (`sacct`), and what the plugin would have read from
//! slurmctld, here from the database (`sacctmgr`: typed limits, account
//! parents) and `scontrol show partition` (each partition's QOS).

use std::path::Path;

use crate::qos::config;
use crate::qos::replay::{self, Database, ReplayReport};
use crate::qos::site::parse_partitions;
use crate::qos::slurm::{accounted, partitions, soft, ReadError, SlurmRead};

use super::site::{associations, database};

/// Replays the jobs submitted between `since` and `until` under the
/// gpu_qos.conf at `conf`.
pub fn report(
    read: &dyn SlurmRead,
    conf: &Path,
    since: &str,
    until: Option<&str>,
) -> Result<ReplayReport, ReadError> {
    let file = conf.to_string_lossy();
    let cfg = crate::shared::syntax::load(conf, config::parse)
        .map_err(|e| ReadError::new(e.to_string()))?
        .ok_or_else(|| ReadError::new(format!("{file}: no such file")))?;
    let mut notes = Vec::new();
    // SubmitLine is in sacct from 21.08 (src/sacct/sacct.c); an older
    // sacct refuses the field: ReqTRES then stands for every request.
    let delimiter = accounted::delimiter();
    let query = |with_line| accounted::between(since, until, with_line, &delimiter);
    // A window too wide for slurmdbd (MaxQueryTimeRange), for the time
    // or the answer allowed: the admin is told how to narrow it.
    let narrow = |e: ReadError| {
        ReadError::new(format!(
            "{e}; replay a shorter window (--since DATE --until DATE), one after another"
        ))
    };
    let (text, with_line) = match read.read(&query(true)) {
        Ok(text) => (text, true),
        Err(first) if !accounted::refused_a_field(&first.to_string()) => return Err(narrow(first)),
        Err(first) => match read.read(&query(false)) {
            Ok(text) => {
                notes.push(format!(
                    "sacct could not list SubmitLine ({first}): every request is read from \
                     ReqTRES"
                ));
                (text, false)
            }
            Err(_) => return Err(narrow(first)),
        },
    };
    let (subs, skipped) = replay::parse_sacct(&text, with_line, &delimiter);
    let mut unread = Vec::new();
    let db = Database {
        qos: database(read)?,
        associations: associations(read).unwrap_or_else(|e| {
            unread.push(e.unread("sacctmgr show assoc (accounts' typed limits)"));
            Vec::new()
        }),
        partition_qos: soft(
            &mut unread,
            "scontrol show partition (partitions' QOS)",
            read.read(&partitions::all()),
        )
        .map(|t| {
            parse_partitions(&t)
                .0
                .into_iter()
                .filter_map(|p| Some((p.name, p.qos?)))
                .collect()
        })
        .unwrap_or_default(),
        parents: soft(
            &mut unread,
            "sacctmgr show assoc (account parents)",
            read.read(&accounted::account_parents()),
        )
        .map(|t| accounted::parse_account_parents(&t))
        .unwrap_or_default(),
    };
    let mut report = replay::replay(&cfg, &db, &subs);
    report.sort();
    report.skipped = skipped;
    notes.extend(
        unread
            .into_iter()
            .map(|u| format!("{}: {}", u.source, u.reason)),
    );
    notes.push(
        "the database's limits and the partitions' QOS are today's, not those of each job's \
         day; a request or --qos given only in the script's #SBATCH lines is not in \
         SubmitLine (ReqTRES stands in for the request, the QOS counts as the default)"
            .to_owned(),
    );
    report.notes = notes;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::qos::slurm::Query;

    /// sacct failing with `error` when asked for SubmitLine, answering one
    /// job without it; every other read answers nothing.
    struct Sacct {
        error: &'static str,
        asked: RefCell<Vec<Vec<String>>>,
    }

    impl SlurmRead for Sacct {
        fn read(&self, query: &Query) -> Result<String, ReadError> {
            if query.program != "sacct" {
                return Ok(String::new());
            }
            self.asked.borrow_mut().push(query.args.clone());
            let d = query
                .args
                .iter()
                .find_map(|a| a.strip_prefix("--delimiter="))
                .unwrap_or("|");
            if query.args.iter().any(|a| a.ends_with(",SubmitLine")) {
                Err(ReadError::new(self.error))
            } else {
                Ok(["7", "alice", "phys", "gpu", "normal", "1", "", "gres/gpu=1"].join(d) + "\n")
            }
        }
    }

    fn replayed(error: &'static str) -> (Result<ReplayReport, ReadError>, usize) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let conf = dir.path().join("gpu_qos.conf");
        std::fs::write(&conf, "").unwrap_or_else(|e| panic!("{e}"));
        let sacct = Sacct {
            error,
            asked: RefCell::new(Vec::new()),
        };
        let r = report(&sacct, &conf, "2026-01-01", None);
        let asked = sacct.asked.borrow().len();
        (r, asked)
    }

    #[test]
    fn sacct_without_the_field_is_asked_again_without_it() {
        let (r, asked) = replayed("sacct: error: Invalid field requested: \"SubmitLine\"");
        let r = r.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((asked, r.jobs), (2, 1));
        assert!(
            r.notes[0].starts_with("sacct could not list SubmitLine"),
            "{:?}",
            r.notes
        );
    }

    #[test]
    fn a_window_sacct_cannot_answer_is_not_asked_twice_and_the_admin_is_told_to_narrow_it() {
        for error in [
            "`sacct ...`: sacct timed out after 300 s",
            "`sacct ...` failed (exit status: 1): sacct: error: Time range too large (MaxQueryTimeRange)",
        ] {
            let (r, asked) = replayed(error);
            let e = r.err().map(|e| e.to_string()).unwrap_or_default();
            assert_eq!(asked, 1, "{error}");
            assert!(e.starts_with(error) && e.contains("--since DATE --until DATE"), "{e}");
        }
    }

    #[test]
    fn replays_read_sacct_with_a_longer_time_than_other_reads() {
        let q = accounted::between("2026-01-01", None, true, "<d>");
        assert_eq!(q.timeout, accounted::REPLAY_TIMEOUT);
        assert!(q.timeout > crate::qos::slurm::TIMEOUT);
        assert_eq!(
            crate::qos::slurm::jobs::pending().timeout,
            crate::qos::slurm::TIMEOUT
        );
    }
}
