//! An association's fair share (`sshare`), filtered by slurmctld.

use serde::{Deserialize, Serialize};

use super::jobs::given;
use super::Query;

/// One association and its account.
pub fn of(account: &str, user: &str) -> Query {
    Query::new(
        "sshare",
        &[
            "-h",
            "-P",
            "-A",
            account,
            "-u",
            user,
            "-o",
            "Account,User,RawShares,NormShares,RawUsage,EffectvUsage,FairShare,GrpTRESRaw",
        ],
        &format!("sshare-{account}-{user}"),
    )
}

/// One row of `sshare` run with [`of`]: the account's (no user)
/// or the user's association.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShareRow {
    pub account: String,
    pub user: Option<String>,
    pub raw_shares: String,
    pub norm_shares: f64,
    /// Decayed usage, in billed CPU-seconds.
    pub raw_usage: f64,
    pub effective_usage: f64,
    pub fairshare: Option<f64>,
    /// Decayed usage per TRES, in TRES-minutes (`sshare` divides Slurm's
    /// seconds by 60).
    pub tres_minutes: Vec<(String, f64)>,
}

/// Reads `sshare` run with [`of`].
pub fn parse_shares(text: &str) -> Vec<ShareRow> {
    let num = |s: &str| s.trim().parse::<f64>().ok();
    text.lines()
        .filter_map(|raw| {
            let f: Vec<&str> = raw.split('|').collect();
            let [account, user, raw_shares, norm, usage, eff, fs, tres] = f[..] else {
                return None;
            };
            Some(ShareRow {
                account: account.trim().to_owned(),
                user: given(user.trim()),
                raw_shares: raw_shares.trim().to_owned(),
                norm_shares: num(norm).unwrap_or(0.0),
                raw_usage: num(usage).unwrap_or(0.0),
                effective_usage: num(eff).unwrap_or(0.0),
                fairshare: num(fs),
                tres_minutes: tres
                    .split(',')
                    .filter_map(|e| {
                        let (k, v) = e.split_once('=')?;
                        Some((k.trim().to_owned(), v.trim().parse().ok()?))
                    })
                    .collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_and_user_rows_with_usage_per_tres() {
        let rows = parse_shares(
            "research||1|0.500000|6|0.000000||cpu=0,gres/gpu=0,gres/gpu:a40=0\n \
             research|root|1|1.000000|6|0.000000|0.250000|cpu=60,gres/gpu=1200,gres/gpu:a40=1200\n",
        );
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].user.as_deref(), rows[0].fairshare), (None, None));
        assert_eq!(rows[1].user.as_deref(), Some("root"));
        assert_eq!(rows[1].fairshare, Some(0.25));
        assert!(rows[1]
            .tres_minutes
            .contains(&("gres/gpu:a40".to_owned(), 1200.0)));
    }
}
