//! The accounting as the node timer reaches it to record each ended
//! job's GPU figures ([`gpushare::mps::node::record_ended`]): `sacct` to
//! read a job's record, `sacctmgr` to write its `AdminComment` (or its
//! `SystemComment`), each run bounded, all of them within one budget per
//! run of the timer; a call the budget leaves no time for is not made,
//! and says so ([`Unanswered::NotAsked`]), which is no failed try.

use std::process::Command;
use std::time::{Duration, Instant};

use gpushare::mps::node::Accounting;
use gpushare::mps::usage::totals::{self, Field, Unanswered};
use gpushare::shared::bounded;
use gpushare::shared::locations::slurm_command;

/// All of one run's `sacct` and `sacctmgr` calls: the timer runs each
/// minute, and a slurmdbd that does not answer costs it no more.
const BUDGET: Duration = Duration::from_secs(20);
/// One call.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Slurm's accounting commands on this node.
#[derive(Debug)]
pub struct SlurmAccounting {
    until: Instant,
    lowers: bool,
}

impl SlurmAccounting {
    /// Starts the budget, and asks `sacctmgr --version` whether it writes
    /// an `AdminComment` in lower case (Slurm before 23.02; taken so
    /// where the version cannot be read, which only makes the node
    /// write less).
    pub fn start() -> Self {
        let mut this = Self {
            until: Instant::now() + BUDGET,
            lowers: true,
        };
        if let Ok(version) = this.run("sacctmgr", &["--version"]) {
            this.lowers = lowers_admin_comment(&version).unwrap_or(true);
        }
        this
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<String, Unanswered> {
        let shown = format!(
            "{program} {}",
            args.join(" ").replace(totals::SACCT_DELIMITER, "^_")
        );
        let left = self.until.saturating_duration_since(Instant::now());
        if left < Duration::from_millis(200) {
            return Err(Unanswered::NotAsked(format!(
                "{shown}: not run, the {} s for the accounting are spent",
                BUDGET.as_secs()
            )));
        }
        let mut cmd = Command::new(slurm_command(program));
        cmd.args(args);
        let ran = bounded::run(cmd, None, left.min(CALL_TIMEOUT))
            .map_err(|e| Unanswered::Failed(format!("{shown}: {e}")))?;
        if ran.status.success() {
            Ok(ran.stdout)
        } else {
            Err(Unanswered::Failed(format!(
                "{shown}: {}",
                ran.stderr.trim()
            )))
        }
    }
}

/// Whether the `sacctmgr` that printed `version` (`slurm 22.05.8`) writes
/// an `AdminComment` in lower case: before 23.02 it does.
fn lowers_admin_comment(version: &str) -> Option<bool> {
    let number = version.split_whitespace().nth(1)?;
    let mut parts = number.split('.');
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next()?.parse().ok()?;
    Some((major, minor) < (23, 2))
}

impl Accounting for SlurmAccounting {
    fn shown(&mut self, job: u32) -> Result<String, Unanswered> {
        let job = job.to_string();
        let delimiter = format!("--delimiter={}", totals::SACCT_DELIMITER);
        let fields = totals::SACCT_FIELDS;
        let args = ["-X", "-n", "-P", &delimiter, "-o", fields, "-j", &job];
        self.run("sacct", &args)
    }

    fn write(&mut self, name: &str, field: Field, text: &str) -> Result<(), Unanswered> {
        let (job, set) = (format!("jobid={name}"), format!("{}={text}", field.name()));
        let args = ["-i", "modify", "job", "where", &job, "set", &set];
        self.run("sacctmgr", &args).map(drop)
    }

    fn lowers(&self) -> bool {
        self.lowers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sacctmgr_before_23_02_lowers_the_comment() {
        assert_eq!(lowers_admin_comment("slurm 22.05.8\n"), Some(true));
        assert_eq!(lowers_admin_comment("slurm 23.02.0"), Some(false));
        assert_eq!(lowers_admin_comment("slurm-wlm 26.05.3"), Some(false));
        assert_eq!(lowers_admin_comment("slurm"), None);
    }
}
