//! Running jobs that asked for a list of QOS (`--qos=a,b`, Slurm 24.11
//! on), as accounting keeps them. slurmctld prints only the QOS a running
//! job runs under (`scontrol`, `squeue`); the list the user asked for is
//! accounting's `QOSREQ` (`sacct`, 24.11 on).
//!
//! Why they matter: from 24.11.0 to every 26.05 release, slurmctld
//! reloading its jobs (a restart, or `scontrol reconfigure`, which since
//! 24.05 starts slurmctld again) moves a running job with a QOS list to
//! the list's highest-priority QOS (`_get_qos_info` ignores the QOS the
//! job started under; SchedMD ticket 23033, fixed after 26.05), and
//! charges that QOS's `GrpTRES` usage with it instead of the one it runs
//! under.

use super::Query;

/// The running and suspended jobs of every user, each its id, the QOS it
/// runs under and the QOS it asked for.
pub fn running() -> Query {
    Query::new(
        "sacct",
        &[
            "-X",
            "-n",
            "-P",
            "-a",
            "-s",
            "R,S",
            "-o",
            "JobIDRaw,QOS,QOSREQ",
        ],
        "sacct-running-qos-lists",
    )
}

/// A running job that asked for more than one QOS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedJob {
    pub job: String,
    /// The QOS accounting says it started under.
    pub qos: String,
    /// The QOS it asked for, in the user's order.
    pub requested: Vec<String>,
}

/// The jobs of [`running`]'s answer that asked for a list; lines that do
/// not read as three fields are left out.
pub fn parse(text: &str) -> Vec<ListedJob> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split('|');
            let (job, qos, requested) = (fields.next()?, fields.next()?, fields.next()?);
            let requested: Vec<String> = requested
                .split(',')
                .map(str::trim)
                .filter(|q| !q.is_empty())
                .map(str::to_owned)
                .collect();
            (requested.len() > 1 && !job.trim().is_empty()).then(|| ListedJob {
                job: job.trim().to_owned(),
                qos: qos.trim().to_owned(),
                requested,
            })
        })
        .collect()
}

/// Whether slurmctld of `release` moves a running job with a QOS list to
/// the list's first QOS when it reloads its jobs: 24.11.0 to every 26.05
/// release.
pub fn moves_listed_jobs(release: (u32, u32)) -> bool {
    ((24, 11)..=(26, 5)).contains(&release)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_jobs_that_asked_for_a_list_are_kept() {
        let text = "101|normal|normal\n102|qos_b|qos_a,qos_b\n103|lowprio|\nodd line\n\
                    104|qos_a|qos_a, qos_c\n";
        let jobs = parse(text);
        assert_eq!(
            jobs,
            vec![
                ListedJob {
                    job: "102".into(),
                    qos: "qos_b".into(),
                    requested: vec!["qos_a".into(), "qos_b".into()],
                },
                ListedJob {
                    job: "104".into(),
                    qos: "qos_a".into(),
                    requested: vec!["qos_a".into(), "qos_c".into()],
                },
            ]
        );
        assert!(parse("").is_empty());
    }

    /// As slurmctld's `SLURM_VERSION` is read: one that does not read is
    /// taken as a release that does not move them.
    fn moves(version: &str) -> bool {
        crate::shared::slurm_release::parse(version).is_ok_and(moves_listed_jobs)
    }

    #[test]
    fn the_releases_with_ticket_23033() {
        for v in [
            "24.11.0", "24.11.7", "25.05.8", "25.11.7", "26.05.3", "26.05.9",
        ] {
            assert!(moves(v), "{v}");
        }
        for v in [
            "22.05.8",
            "23.02.8",
            "24.05.8",
            "26.11.0-pre",
            "26.11.0",
            "27.05.1",
            "",
            "x",
        ] {
            assert!(!moves(v), "{v}");
        }
    }
}
