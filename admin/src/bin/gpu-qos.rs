//! `gpu-qos`: the sysadmin's command for keeping `gpu_qos.conf` (the policy
//! of the `job_submit/gpu_qos` plugin) in step with the QOS in Slurm's
//! accounting database, and the users' view of their group QOS and their
//! pending jobs.
//!
//! Run by hand on a host with `sacctmgr` after `sacctmgr modify qos` or an
//! edit of the file, or from cron/monitoring (`check --json`). It parses
//! its arguments (`gpushare_admin::qos_cli`), asks the core for a report
//! and prints it: what each command reads of Slurm lives in
//! `gpushare::qos::gather` (each read a query of `gpushare::qos::slurm`),
//! what it checks and decides in `gpushare::qos`, where they are tested.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use gpushare::qos::audit::{self, AuditReport, FailOn};
use gpushare::qos::check::{self, CheckJson, Tally};
use gpushare::qos::explain;
use gpushare::qos::gather::{self, site};
use gpushare::qos::metrics::{self, NoQosFile};
use gpushare::qos::slurm::cache::Cache;
use gpushare::qos::slurm::{Live, ReadError};
use gpushare::shared::exit_status::gpu_qos as exit;
use gpushare::shared::locations::beside_slurm_conf;
use gpushare::shared::prom;
use gpushare_admin::qos_cli::{AuditView, Cli, Cmd};

fn main() -> ExitCode {
    let command = Cli::parse().command;
    // Admins' commands read afresh and say so when run by a user; the
    // users' commands reuse slurmdbd's slow-changing answers a while.
    let admins = match &command {
        Cmd::Check { .. } => Some("check"),
        Cmd::Generate => Some("generate"),
        Cmd::Audit { .. } => Some("audit"),
        Cmd::Metrics { .. } => Some("metrics"),
        Cmd::Replay { .. } => Some("replay"),
        Cmd::Usage { .. } | Cmd::Why { .. } | Cmd::Advise { .. } => None,
    };
    let read = match admins {
        Some(name) => {
            let read = Live::new();
            if let Some(note) = site::admin_note(&read, name) {
                eprintln!("gpu-qos: {note}");
            }
            read
        }
        None => Live::new().with_cache(Cache::from_env()),
    };
    match command {
        Cmd::Check { conf, json } => run_check(&read, conf, json),
        Cmd::Audit {
            conf,
            json,
            fail_on,
            explain,
            markdown,
        } => run_audit(
            &read,
            conf,
            AuditView::of(json, explain, markdown),
            fail_on.into(),
        ),
        Cmd::Usage { qos, json, explain } => {
            match gather::usage::report(&read, qos.as_deref(), explain).map(|mut r| {
                r.unread.extend(read.notes());
                r
            }) {
                Ok(report) if json => println!("{}", report.to_json()),
                Ok(report) => print!("{}", report.to_text()),
                Err(e) => return failed("gpu-qos usage", &e),
            }
            exit::TOLD.into()
        }
        Cmd::Why { job, json } => run_why(&read, &job, json),
        Cmd::Replay {
            since,
            until,
            conf,
            json,
        } => {
            let path = conf.unwrap_or_else(|| beside_slurm_conf(None, "gpu_qos.conf"));
            match gather::replay::report(&read, &path, &since, until.as_deref()) {
                Ok(report) if json => println!("{}", report.to_json()),
                Ok(report) => print!("{}", report.to_text()),
                Err(e) => return failed("gpu-qos replay", &e),
            }
            exit::REPLAYED.into()
        }
        Cmd::Advise {
            since,
            until,
            user,
            json,
        } => {
            match gather::advise::report_for_caller(&read, user.as_deref(), &since, &until) {
                Ok(report) if json => println!("{}", report.to_json()),
                Ok(report) => print!("{}", report.to_text()),
                Err(e) => return failed("gpu-qos advise", &e),
            }
            exit::TOLD.into()
        }
        Cmd::Metrics { write } => {
            let policy = beside_slurm_conf(None, "gpu_qos.conf");
            // Where to write, before slurmctld is asked anything.
            let write = match write.map(|file| metrics_file(file, &policy)).transpose() {
                Ok(write) => write,
                Err(code) => return code,
            };
            match site::metrics_text(&read, &policy) {
                Ok((text, warning)) => {
                    if let Some(w) = warning {
                        eprintln!("gpu-qos: {w}");
                    }
                    write_metrics(write.as_deref(), &text)
                }
                Err(e) => {
                    eprintln!("gpu-qos: {e}");
                    exit::METRICS_UNWRITTEN.into()
                }
            }
        }
        Cmd::Generate => match site::generated(&read) {
            Ok((text, warning)) => {
                if let Some(w) = warning {
                    eprintln!("gpu-qos: {w}");
                }
                print!("{text}");
                exit::GENERATE_PRINTED.into()
            }
            Err(e) => failed("gpu-qos", &e),
        },
    }
}

/// Could not read: the reason on stderr.
fn failed(who: &str, e: &ReadError) -> ExitCode {
    eprintln!("{who}: {e}");
    exit::UNREAD.into()
}

/// The file `metrics --write [FILE]` writes: FILE, else the one beside
/// `MetricsFile=` of gpu_qos.conf at `policy`; where there is none, the
/// line saying why is printed and the exit status returned (nowhere to
/// write yet; could not write: the plugin's file has this one's name).
fn metrics_file(file: Option<PathBuf>, policy: &Path) -> Result<PathBuf, ExitCode> {
    if let Some(file) = file {
        return Ok(file);
    }
    let text = std::fs::read_to_string(policy).map_err(|e| e.to_string());
    let text = text.as_deref().map_err(String::as_str);
    metrics::qos_file_beside(policy, text, Path::is_dir).map_err(|no| {
        let (why, code) = match no {
            NoQosFile::NotSetUp(why) => (why, exit::METRICS_NOWHERE),
            NoQosFile::Clash(why) => (why, exit::METRICS_UNWRITTEN),
        };
        eprintln!("gpu-qos: {why}");
        code.into()
    })
}

fn write_metrics(write: Option<&Path>, text: &str) -> ExitCode {
    match write {
        Some(path) => match prom::write_file(path, text) {
            Ok(()) => exit::METRICS_WRITTEN.into(),
            Err(e) => {
                eprintln!("gpu-qos: {e}");
                exit::METRICS_UNWRITTEN.into()
            }
        },
        None => {
            print!("{text}");
            exit::METRICS_WRITTEN.into()
        }
    }
}

fn run_check(read: &Live, conf: Option<PathBuf>, json: bool) -> ExitCode {
    let path = conf.unwrap_or_else(|| beside_slurm_conf(None, "gpu_qos.conf"));
    let file = path.to_string_lossy().into_owned();
    let inputs = match site::check_inputs(read, &path) {
        Ok(found) => found,
        Err(e) => {
            let reason = e.to_string();
            eprintln!("gpu-qos: {reason}");
            if json {
                println!("{}", CheckJson::unchecked(&reason).to_json());
            }
            return exit::CHECK_UNCHECKED.into();
        }
    };
    let findings = inputs.findings(&file);
    let tally = Tally::of(&findings);
    if json {
        println!("{}", CheckJson::report(&file, &findings).to_json());
    } else {
        for f in &findings {
            println!("{}: {f}", f.severity());
        }
        println!(
            "{}",
            check::summary_line(&file, &inputs.cfg, &inputs.qos, tally)
        );
    }
    ExitCode::from(tally.exit_code())
}

fn run_audit(read: &Live, conf: Option<PathBuf>, view: AuditView, fail_on: FailOn) -> ExitCode {
    let slurm_conf = std::env::var_os("SLURM_CONF").map(PathBuf::from);
    let (site, sources) = match site::site(read, conf, slurm_conf) {
        Ok(found) => found,
        Err(e) => {
            let reason = e.to_string();
            eprintln!("gpu-qos audit: {reason}");
            if view == AuditView::Json {
                println!("{}", AuditReport::unread(&reason, fail_on).to_json());
            }
            return exit::UNREAD.into();
        }
    };
    // The pages for users: the site as configured, whatever the findings.
    let page = match view {
        AuditView::Markdown => Some(explain::markdown(&site)),
        AuditView::UserPage => Some(explain::user_page(&site)),
        _ => None,
    };
    if let Some(page) = page {
        print!("{page}");
        return exit::AUDIT_CLEAN.into();
    }
    let report = AuditReport::new(audit::audit(&site), fail_on, sources);
    match view {
        AuditView::Json => println!("{}", report.to_json()),
        AuditView::Explain => print!("{}\n{}", explain::explain(&site), report.to_table()),
        AuditView::Table | AuditView::Markdown | AuditView::UserPage => {
            print!("{}", report.to_table())
        }
    }
    ExitCode::from(report.exit)
}

/// `gpu-qos why JOB`: what Slurm says of the job, then only what explains
/// its reason; a part that cannot be read is named in the report.
fn run_why(read: &Live, job: &str, json: bool) -> ExitCode {
    match gather::why::report(read, job) {
        Ok(mut report) => {
            report.unread.extend(read.notes());
            if json {
                match serde_json::to_string_pretty(&report) {
                    Ok(text) => println!("{text}"),
                    Err(e) => {
                        eprintln!("gpu-qos why: {e}");
                        return exit::WHY_UNREAD.into();
                    }
                }
            } else {
                print!("{}", gpushare::qos::why::render(&report));
            }
            exit::TOLD.into()
        }
        Err(e) => {
            eprintln!("gpu-qos why: {e}");
            exit::WHY_UNREAD.into()
        }
    }
}
