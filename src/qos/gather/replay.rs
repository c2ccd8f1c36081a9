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
    let (text, with_line) = match read.read(&query(true)) {
        Ok(text) => (text, true),
        Err(first) => match read.read(&query(false)) {
            Ok(text) => {
                notes.push(format!(
                    "sacct could not list SubmitLine ({first}): every request is read from \
                     ReqTRES"
                ));
                (text, false)
            }
            Err(_) => return Err(first),
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
