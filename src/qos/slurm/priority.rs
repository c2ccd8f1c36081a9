//! Priority factors and the site's weights (`sprio`).
//!
//! `sprio` is one `REQUEST_PRIORITY_FACTORS` whatever it is asked, but
//! only 22.05 sends the job, partition and user filters to slurmctld; from
//! 23.02 on the request carries none, slurmctld answers with every pending
//! job the caller may see and `sprio` filters them itself. So on 24.11 and
//! 26.05 each `sprio` answer grows with the site's pending queue (held
//! jobs, priority 0, are never in it).

use serde::{Deserialize, Serialize};

use super::jobs::given;
use super::Query;

/// The `sprio -o` format [`parse_factors`] reads: job, partition, user,
/// priority, then each weighted factor.
pub const SPRIO_FORMAT: &str = "%i|%r|%u|%Y|%S|%A|%B|%F|%J|%P|%Q|%N|%T|";

fn sprio(filter: &[&str], key: &str) -> Query {
    let mut args = vec!["-h"];
    args.extend_from_slice(filter);
    args.extend_from_slice(&["-o", SPRIO_FORMAT]);
    Query::new("sprio", &args, key)
}

/// One job's factors.
pub fn of_job(job: &str) -> Query {
    sprio(&["-j", job], &format!("sprio-job-{job}"))
}

/// The pending jobs of one partition: the jobs a pending job may be behind
/// (slurmctld filters by partition on 22.05 only; later releases answer
/// every pending job and `sprio` filters).
pub fn of_partition(partition: &str) -> Query {
    sprio(&["-p", partition], &format!("sprio-partition-{partition}"))
}

/// The site's weights (one row, `Weights` in the job column).
pub fn weights() -> Query {
    sprio(&["-w"], "sprio-weights")
}

/// A pending job's row of [`SPRIO_FORMAT`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ranked {
    pub job: String,
    pub partition: String,
    pub user: String,
    pub factors: Factors,
}

/// Reads `sprio` run with [`of_partition`].
pub fn parse_ranked(text: &str) -> Vec<Ranked> {
    text.lines()
        .filter_map(|raw| {
            let f: Vec<&str> = raw.split('|').map(str::trim).collect();
            let (job, part, user) = (f.first()?, f.get(1)?, f.get(2)?);
            let (_, factors) = parse_factors(raw).into_iter().next()?;
            Some(Ranked {
                job: (*job).to_owned(),
                partition: (*part).to_owned(),
                user: (*user).to_owned(),
                factors,
            })
        })
        .collect()
}

/// One row of [`SPRIO_FORMAT`]: the weighted factors (or, in the
/// `Weights` row, the weights).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Factors {
    pub priority: f64,
    pub site: f64,
    pub age: f64,
    pub assoc: f64,
    pub fairshare: f64,
    pub jobsize: f64,
    pub partition: f64,
    pub qos: f64,
    pub nice: f64,
    /// `cpu=..,gres/gpu=..` as sprio prints it (empty: no TRES weights).
    pub tres: String,
}

/// Reads `sprio` run with [`SPRIO_FORMAT`]: `(job or "Weights", factors)`.
pub fn parse_factors(text: &str) -> Vec<(String, Factors)> {
    let num = |s: &str| s.trim().parse::<f64>().unwrap_or(0.0);
    text.lines()
        .filter_map(|raw| {
            let f: Vec<&str> = raw.split('|').collect();
            match f[..] {
                [job, _part, _user, prio, site, age, assoc, fs, js, part, qos, nice, tres, ""] => {
                    Some((
                        job.trim().to_owned(),
                        Factors {
                            priority: num(prio),
                            site: num(site),
                            age: num(age),
                            assoc: num(assoc),
                            fairshare: num(fs),
                            jobsize: num(js),
                            partition: num(part),
                            qos: num(qos),
                            nice: num(nice),
                            tres: given(tres.trim()).unwrap_or_default(),
                        },
                    ))
                }
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_and_weights_read_by_row() {
        let f = parse_factors("4|gpu|root|10000|0|0|0|0|0|0|10000|0||\n");
        assert_eq!(f[0].0, "4");
        assert_eq!((f[0].1.priority, f[0].1.qos), (10000.0, 10000.0));
        let w = parse_factors("Weights||||1|100|0|1000|0|0|10000||(null)|\n");
        assert_eq!((w[0].0.as_str(), w[0].1.fairshare), ("Weights", 1000.0));
        assert_eq!(w[0].1.tres, "");
        let r = parse_ranked("7|gpu|bob|500|0|0|0|500|0|0|0|0||\nnot a row\n");
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].job.as_str(), r[0].user.as_str()), ("7", "bob"));
        assert_eq!(weights().shown(), format!("sprio -h -w -o {SPRIO_FORMAT}"));
    }
}
