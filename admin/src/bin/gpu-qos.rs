//! `gpu-qos`: the sysadmin's command for keeping `gpu_qos.conf` (the policy
//! of the `job_submit/gpu_qos` plugin) in step with the QOS in Slurm's
//! accounting database.
//!
//! Run by hand on a host with `sacctmgr` after `sacctmgr modify qos` or an
//! edit of the file, or from cron/monitoring (`check --json`). It only reads
//! arguments, the file and `sacctmgr`'s output, and prints; what it checks
//! and generates lives in `gpushare::qos::check`, where it is tested.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use gpushare::qos::check::{self, CheckJson, QosRecord, Tally, SACCTMGR_ARGS};
use gpushare::qos::config;
use gpushare::shared::locations::beside_slurm_conf;

/// Compare gpushare's gpu_qos.conf with Slurm's accounting database.
///
/// sacctmgr is run from PATH with the environment as it is (SLURM_CONF
/// included). Exit status: 0 consistent (warnings and notes allowed) or
/// printed; 1 check found discrepancies (at least one error); 2 could not
/// check (bad arguments, an invalid or unreadable gpu_qos.conf, sacctmgr
/// missing or failing).
#[derive(Debug, Parser)]
#[command(name = "gpu-qos", version = env!("CARGO_PKG_VERSION"))]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Validate gpu_qos.conf and compare its rules with the QOS that
    /// `sacctmgr show qos` lists: one line per finding (error, warning or
    /// note, then the QOS), then a summary.
    Check {
        /// The file to check (default: gpu_qos.conf next to $SLURM_CONF, or
        /// /etc/slurm/gpu_qos.conf)
        #[arg(long, value_name = "PATH")]
        conf: Option<PathBuf>,
        /// Print the result as one JSON object on stdout
        #[arg(long)]
        json: bool,
    },
    /// Print a complete gpu_qos.conf derived from the QOS's typed GPU limits
    /// (GrpTRES gres/gpu:TYPE=N) and Preempt lists.
    Generate,
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Cmd::Check { conf, json } => run_check(conf, json),
        Cmd::Generate => match read_database() {
            Ok(db) => {
                print!("{}", check::generate(&db));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("gpu-qos: {e:#}");
                ExitCode::from(2)
            }
        },
    }
}

/// Runs `sacctmgr` and reads its QOS list.
fn read_database() -> Result<Vec<QosRecord>> {
    let output = Command::new("sacctmgr")
        .args(SACCTMGR_ARGS)
        .output()
        .context("cannot run sacctmgr (is Slurm's bin directory on PATH?)")?;
    if !output.status.success() {
        bail!(
            "`sacctmgr {}` failed ({}): {}",
            SACCTMGR_ARGS.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    // QOS names and TRES are ASCII; anything else is not output we know.
    let stdout =
        String::from_utf8(output.stdout).context("sacctmgr printed text that is not UTF-8")?;
    Ok(check::parse_sacctmgr(&stdout)?)
}

fn run_check(conf: Option<PathBuf>, json: bool) -> ExitCode {
    let path = conf.unwrap_or_else(|| beside_slurm_conf(None, "gpu_qos.conf"));
    let file = path.to_string_lossy().into_owned();
    let checked = || -> Result<_> {
        let cfg = gpushare::shared::syntax::load(&path, config::parse)?
            .with_context(|| format!("{file}: no such file"))?;
        let db = read_database()?;
        Ok((cfg, db))
    };
    let (cfg, db) = match checked() {
        Ok(found) => found,
        Err(e) => {
            let reason = format!("{e:#}");
            eprintln!("gpu-qos: {reason}");
            if json {
                println!("{}", CheckJson::unchecked(&reason).to_json());
            }
            return ExitCode::from(2);
        }
    };
    let findings = check::check(&cfg, &file, &db);
    let tally = Tally::of(&findings);
    if json {
        println!("{}", CheckJson::report(&file, &findings).to_json());
    } else {
        for f in &findings {
            println!("{}: {f}", f.severity());
        }
        println!("{}", check::summary_line(&file, &cfg, &db, tally));
    }
    ExitCode::from(tally.exit_code())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use std::path::Path;

    fn parse(args: &[&str]) -> Result<Cmd, clap::Error> {
        Cli::try_parse_from(std::iter::once("gpu-qos").chain(args.iter().copied()))
            .map(|c| c.command)
    }

    #[test]
    fn commands_options_and_misuse() {
        Cli::command().debug_assert();
        assert!(matches!(
            parse(&["check"]),
            Ok(Cmd::Check {
                conf: None,
                json: false
            })
        ));
        assert!(matches!(
            parse(&["check", "--json", "--conf", "/x/gpu_qos.conf"]),
            Ok(Cmd::Check { conf: Some(p), json: true }) if p == Path::new("/x/gpu_qos.conf")
        ));
        assert!(matches!(
            parse(&["check", "--conf=/y"]),
            Ok(Cmd::Check { conf: Some(_), .. })
        ));
        assert!(matches!(parse(&["generate"]), Ok(Cmd::Generate)));
        for bad in [
            &[][..],
            &["chek"],
            &["check", "--conf"],
            &["check", "extra"],
            &["generate", "--json"],
        ] {
            let e = parse(bad).err().map(|e| e.exit_code());
            assert_eq!(e, Some(2), "{bad:?}");
        }
        assert_eq!(parse(&["--version"]).err().map(|e| e.exit_code()), Some(0));
        assert_eq!(
            parse(&["check", "--help"]).err().map(|e| e.exit_code()),
            Some(0)
        );
    }
}
