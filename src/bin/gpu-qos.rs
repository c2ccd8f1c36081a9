//! `gpu-qos`: the sysadmin's command for keeping `gpu_qos.conf` (the policy
//! of the `job_submit/gpu_qos` plugin) in step with the QOS in Slurm's
//! accounting database.
//!
//! Run by hand on a host with `sacctmgr` after `sacctmgr modify qos` or an
//! edit of the file, or from cron/monitoring (`check --json`). It only reads
//! arguments, the file and `sacctmgr`'s output, and prints; what it checks
//! and generates lives in `gpushare::qos_check`, where it is tested.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use gpushare::qos_check::{self, QosRecord, Tally, SACCTMGR_ARGS};
use gpushare::qos_conf;
use gpushare::reload::beside_slurm_conf;

const USAGE: &str = "\
gpu-qos: compare gpushare's gpu_qos.conf with Slurm's accounting database

Usage:
  gpu-qos check [--conf PATH] [--json]
  gpu-qos generate
  gpu-qos --help | --version

Commands:
  check      Validate gpu_qos.conf and compare its rules with the QOS that
             `sacctmgr show qos` lists: one line per finding (error, warning or
             note, then the QOS), then a summary.
  generate   Print a complete gpu_qos.conf derived from the QOS's typed GPU
             limits (GrpTRES gres/gpu:TYPE=N) and Preempt lists.

Options:
  --conf PATH  The file to check (default: gpu_qos.conf in the directory of
               $SLURM_CONF, or /etc/slurm/gpu_qos.conf)
  --json       Print check's result as one JSON object on stdout
  -h, --help   Print this help
  --version    Print the version

sacctmgr is run from PATH with the environment as it is (SLURM_CONF included).

Exit status:
  0  check: consistent (warnings and notes allowed); generate: printed
  1  check: discrepancies (at least one error)
  2  could not check: bad arguments, an invalid or unreadable gpu_qos.conf,
     or sacctmgr missing or failing
";

/// What the command line asked for.
#[derive(Debug, PartialEq, Eq)]
enum Invocation {
    Check { conf: Option<PathBuf>, json: bool },
    Generate,
    Help,
    Version,
}

/// Why the arguments cannot be acted on; printed before the usage.
#[derive(Debug, PartialEq, Eq)]
struct ArgError(String);

fn parse_args(args: &[String]) -> Result<Invocation, ArgError> {
    // Help wins wherever it appears, so `gpu-qos check --bogus -h` helps.
    if args.iter().any(|a| a == "-h" || a == "--help") {
        return Ok(Invocation::Help);
    }
    let Some((command, rest)) = args.split_first() else {
        return Err(ArgError("no command given".to_owned()));
    };
    match command.as_str() {
        "--version" if rest.is_empty() => Ok(Invocation::Version),
        "check" => {
            let mut conf: Option<PathBuf> = None;
            let mut json = false;
            let mut words = rest.iter();
            while let Some(word) = words.next() {
                let value = if word == "--conf" {
                    Some(
                        words
                            .next()
                            .ok_or_else(|| ArgError("--conf needs a path".to_owned()))?
                            .as_str(),
                    )
                } else {
                    word.strip_prefix("--conf=")
                };
                match value {
                    Some("") => return Err(ArgError("--conf needs a path".to_owned())),
                    Some(_) if conf.is_some() => {
                        return Err(ArgError("--conf given twice".to_owned()))
                    }
                    Some(path) => conf = Some(PathBuf::from(path)),
                    None if word == "--json" => json = true,
                    None => return Err(ArgError(format!("check: unexpected argument \"{word}\""))),
                }
            }
            Ok(Invocation::Check { conf, json })
        }
        "generate" => match rest.first() {
            None => Ok(Invocation::Generate),
            Some(word) => Err(ArgError(format!(
                "generate: unexpected argument \"{word}\""
            ))),
        },
        other => Err(ArgError(format!("unknown command \"{other}\""))),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse_args(&args) {
        Ok(Invocation::Help) => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        Ok(Invocation::Version) => {
            println!(
                "gpu-qos {} (gpushare, built for Slurm {})",
                env!("CARGO_PKG_VERSION"),
                gpushare::SLURM_VERSION
            );
            ExitCode::SUCCESS
        }
        Ok(Invocation::Check { conf, json }) => run_check(conf, json),
        Ok(Invocation::Generate) => run_generate(),
        Err(ArgError(message)) => {
            eprintln!("gpu-qos: {message}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// Runs `sacctmgr` and reads its QOS list; the error is the text to print.
fn read_database() -> Result<Vec<QosRecord>, String> {
    let output = Command::new("sacctmgr")
        .args(SACCTMGR_ARGS)
        .output()
        .map_err(|e| format!("cannot run sacctmgr: {e} (is Slurm's bin directory on PATH?)"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!(
            "`sacctmgr {}` failed ({}): {}",
            SACCTMGR_ARGS.join(" "),
            output.status,
            stderr.trim()
        ));
    }
    // QOS names and TRES are ASCII; anything else is not output we know.
    let stdout = String::from_utf8(output.stdout)
        .map_err(|_| "sacctmgr printed text that is not UTF-8".to_owned())?;
    qos_check::parse_sacctmgr(&stdout).map_err(|e| e.to_string())
}

fn run_check(conf: Option<PathBuf>, json: bool) -> ExitCode {
    let path = conf.unwrap_or_else(|| beside_slurm_conf(None, "gpu_qos.conf"));
    let file = path.to_string_lossy().into_owned();
    let unchecked = |reason: String| {
        eprintln!("gpu-qos: {reason}");
        if json {
            println!("{}", qos_check::unchecked_json(&reason));
        }
        ExitCode::from(2)
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) => return unchecked(format!("{file}: {e}")),
    };
    let cfg = match qos_conf::parse(&text, &file) {
        Ok(cfg) => cfg,
        Err(e) => return unchecked(e.to_string()),
    };
    let db = match read_database() {
        Ok(db) => db,
        Err(reason) => return unchecked(reason),
    };
    let findings = qos_check::check(&cfg, &file, &db);
    let tally = Tally::of(&findings);
    if json {
        println!("{}", qos_check::report_json(&file, &findings));
    } else {
        for f in &findings {
            println!("{}: {f}", f.severity());
        }
        println!("{}", qos_check::summary_line(&file, &cfg, &db, tally));
    }
    ExitCode::from(tally.exit_code())
}

fn run_generate() -> ExitCode {
    match read_database() {
        Ok(db) => {
            print!("{}", qos_check::generate(&db));
            ExitCode::SUCCESS
        }
        Err(reason) => {
            eprintln!("gpu-qos: {reason}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Invocation, ArgError> {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        parse_args(&args)
    }

    fn arg_error(args: &[&str]) -> String {
        match parse(args) {
            Err(ArgError(m)) => m,
            Ok(i) => panic!("{args:?} parsed as {i:?}"),
        }
    }

    #[test]
    fn commands_and_options() {
        assert_eq!(
            parse(&["check"]),
            Ok(Invocation::Check {
                conf: None,
                json: false
            })
        );
        assert_eq!(
            parse(&["check", "--json", "--conf", "/x/gpu_qos.conf"]),
            Ok(Invocation::Check {
                conf: Some(PathBuf::from("/x/gpu_qos.conf")),
                json: true
            })
        );
        assert_eq!(
            parse(&["check", "--conf=/y"]),
            Ok(Invocation::Check {
                conf: Some(PathBuf::from("/y")),
                json: false
            })
        );
        assert_eq!(parse(&["generate"]), Ok(Invocation::Generate));
        assert_eq!(parse(&["--version"]), Ok(Invocation::Version));
        assert_eq!(parse(&["-h"]), Ok(Invocation::Help));
        assert_eq!(parse(&["check", "--nope", "--help"]), Ok(Invocation::Help));
    }

    #[test]
    fn argument_errors() {
        assert_eq!(arg_error(&[]), "no command given");
        assert_eq!(arg_error(&["chek"]), "unknown command \"chek\"");
        assert_eq!(arg_error(&["check", "--conf"]), "--conf needs a path");
        assert_eq!(arg_error(&["check", "--conf="]), "--conf needs a path");
        assert_eq!(
            arg_error(&["check", "--conf", "a", "--conf=b"]),
            "--conf given twice"
        );
        assert_eq!(
            arg_error(&["check", "extra"]),
            "check: unexpected argument \"extra\""
        );
        assert_eq!(
            arg_error(&["generate", "--json"]),
            "generate: unexpected argument \"--json\""
        );
        assert_eq!(
            arg_error(&["--version", "x"]),
            "unknown command \"--version\""
        );
    }
}
