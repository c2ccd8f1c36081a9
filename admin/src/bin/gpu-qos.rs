//! `gpu-qos`: the sysadmin's command for keeping `gpu_qos.conf` (the policy
//! of the `job_submit/gpu_qos` plugin) in step with the QOS in Slurm's
//! accounting database.
//!
//! Run by hand on a host with `sacctmgr` after `sacctmgr modify qos` or an
//! edit of the file, or from cron/monitoring (`check --json`). It only reads
//! arguments, the file and `sacctmgr`'s output, and prints; what it checks
//! and generates lives in `gpushare::qos::check`, where it is tested.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use gpushare::qos::audit::{self, AuditReport, FailOn, GpuQosConf, Site};
use gpushare::qos::check::{self, CheckJson, QosRecord, Tally, SACCTMGR_ARGS};
use gpushare::qos::gres::AccountUse;
use gpushare::qos::site::{self as site_text, SlurmSettings, Unread, AUDIT_SACCTMGR_ARGS};
use gpushare::qos::{config, explain, metrics, usage, why};
use gpushare::shared::bounded;
use gpushare::shared::locations::{beside_slurm_conf, DEFAULT_SLURM_CONF};
use gpushare::shared::prom;

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
    /// Audit the site's whole typed-GPU QOS design: accounting enforcement
    /// and tracked TRES, gpu_qos.conf against the QOS, preemption and
    /// requeue, priority weights, GPU billing, DenyOnLimit, and the node
    /// half on MPS nodes. Reads `scontrol show config` (slurm.conf when
    /// slurmctld does not answer), `scontrol show node/partition`,
    /// `sacctmgr show qos`, plugstack.conf and cgroup.conf. Exit status:
    /// 0 clean, 1 findings at or above --fail-on, 2 could not read.
    Audit {
        /// gpu_qos.conf (default: next to slurm.conf)
        #[arg(long, value_name = "PATH")]
        conf: Option<PathBuf>,
        /// Print the report as one JSON object on stdout
        #[arg(long)]
        json: bool,
        /// The lowest severity that makes the audit fail (exit 1)
        #[arg(long, value_enum, default_value_t = FailOnArg::Error)]
        fail_on: FailOnArg,
        /// First tell the site's design in plain words: which QOS may use
        /// which GPU types up to how many, whom each may preempt and with
        /// what grace time, priority weights, fair-share cost per GPU type
        #[arg(long, conflicts_with = "json")]
        explain: bool,
        /// Print only the users' QOS table, in Markdown (exit 0, or 2);
        /// with --explain, the page a site links its users to: their QOS,
        /// why jobs wait, this site's priority weights, fair-share decay
        /// and cost per GPU type, preemption, the commands to use
        #[arg(long, conflicts_with = "json")]
        markdown: bool,
    },
    /// For you (any user): each group QOS you may use, the GPUs the group
    /// holds by type against its limit, its running and pending jobs, and
    /// why each pending job waits, in words.
    Usage {
        /// Only this QOS (group QOS or not)
        #[arg(long, value_name = "QOS")]
        qos: Option<String>,
        /// Print the report as one JSON object on stdout
        #[arg(long)]
        json: bool,
        /// Also explain each of your pending jobs, as `gpu-qos why` does
        /// (at most 20; their shared reads are made once)
        #[arg(long)]
        explain: bool,
    },
    /// Why a pending job waits (any user, for the jobs they may see): its
    /// reason in words, its priority factors against the site's weights and
    /// the one that holds it back, its fair share and GPU-hours, the jobs
    /// being preempted for it and when their grace time ends, the command
    /// that shows more. Exit status: 0 told, 2 could not read the job.
    Why {
        /// The job id
        job: String,
        /// Print the report as one JSON object on stdout
        #[arg(long)]
        json: bool,
    },
    /// Metrics of the group QOS for Prometheus (the controller's
    /// node_exporter textfile collector): GPUs in use by type against
    /// each GrpTRES limit, pending jobs by reason. Two calls to slurmctld:
    /// `scontrol show assoc_mgr flags=qos` and `squeue -t PENDING`. Exit
    /// status: 0 written, 2 could not read or write.
    Metrics {
        /// Write FILE atomically (a `*.prom` file) instead of printing
        #[arg(long, value_name = "FILE")]
        write: Option<PathBuf>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum FailOnArg {
    Error,
    Warning,
    Note,
}

impl From<FailOnArg> for FailOn {
    fn from(a: FailOnArg) -> Self {
        match a {
            FailOnArg::Error => FailOn::Error,
            FailOnArg::Warning => FailOn::Warning,
            FailOnArg::Note => FailOn::Note,
        }
    }
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Cmd::Check { conf, json } => run_check(conf, json),
        Cmd::Audit {
            conf,
            json,
            fail_on,
            explain,
            markdown,
        } => {
            let view = if json {
                AuditView::Json
            } else if markdown && explain {
                AuditView::UserPage
            } else if markdown {
                AuditView::Markdown
            } else if explain {
                AuditView::Explain
            } else {
                AuditView::Table
            };
            run_audit(conf, view, fail_on.into())
        }
        Cmd::Usage { qos, json, explain } => run_usage(qos.as_deref(), json, explain),
        Cmd::Why { job, json } => run_why(&job, json),
        Cmd::Metrics { write } => match run_metrics(write.as_deref()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("gpu-qos: {e:#}");
                ExitCode::from(2)
            }
        },
        Cmd::Generate => match read_database() {
            Ok(db) => {
                // Partitions whose QOS carries typed limits get rules too;
                // without slurmctld to answer, the QOS rules still stand.
                let partition_qos: Vec<(String, String)> =
                    slurm_output("scontrol", &["show", "partition", "-o"])
                        .map(|t| site_text::parse_partitions(&t).0)
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(|p| Some((p.name, p.qos?)))
                        .collect();
                let assocs = read_associations().unwrap_or_else(|e| {
                    eprintln!("gpu-qos: {e:#}; no Account= rules written");
                    Vec::new()
                });
                print!("{}", check::generate_for_site(&db, &partition_qos, &assocs));
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
    let text = slurm_output("sacctmgr", &SACCTMGR_ARGS)?;
    Ok(check::parse_sacctmgr(&text)?)
}

/// Every association with a GPU entry in its `GrpTRES` (`sacctmgr show
/// assoc`): the account and user levels of the typed limits.
fn read_associations() -> Result<Vec<check::AssocRecord>> {
    let text = slurm_output("sacctmgr", &check::SACCTMGR_ASSOC_ARGS)?;
    Ok(check::parse_sacctmgr_assoc(&text)?)
}

fn run_check(conf: Option<PathBuf>, json: bool) -> ExitCode {
    let path = conf.unwrap_or_else(|| beside_slurm_conf(None, "gpu_qos.conf"));
    let file = path.to_string_lossy().into_owned();
    let checked = || -> Result<_> {
        let cfg = gpushare::shared::syntax::load(&path, config::parse)?
            .with_context(|| format!("{file}: no such file"))?;
        let db = read_database()?;
        let assocs = read_associations()?;
        Ok((cfg, db, assocs))
    };
    let (cfg, db, assocs) = match checked() {
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
    let mut findings = check::check(&cfg, &file, &db);
    findings.extend(check::check_associations(&cfg, &file, &assocs));
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

/// How long one Slurm command of the audit may take; slurmctld or slurmdbd
/// not answering must end the audit, not hang a cron job.
const AUDIT_TIMEOUT: Duration = Duration::from_secs(30);
/// The most gpu-qos reads of one answer of Slurm's: about 4 million
/// squeue lines. A larger answer is an error, never read in part (a cut
/// list would give figures that are low without a word).
const ANSWER_LIMIT: u64 = 1 << 30;

/// Each command's answer once per run: `usage --explain` explains several
/// jobs whose reads overlap (the QOS list, the weights, a partition's
/// pending jobs, an association's fair share), and a one-shot command has
/// no reason to ask slurmctld the same thing twice.
static READ: std::sync::Mutex<Vec<(String, std::result::Result<String, String>)>> =
    std::sync::Mutex::new(Vec::new());

/// Runs a Slurm command for the audit: its stdout, or why there is none.
fn slurm_output(program: &str, args: &[impl AsRef<str>]) -> Result<String> {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let shown = format!("{program} {}", args.join(" "));
    let mut read = READ
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, answer)) = read.iter().find(|(k, _)| *k == shown) {
        return answer.clone().map_err(anyhow::Error::msg);
    }
    let answer = run_slurm(program, &args, &shown).map_err(|e| format!("{e:#}"));
    read.push((shown, answer.clone()));
    answer.map_err(anyhow::Error::msg)
}

fn run_slurm(program: &str, args: &[&str], shown: &str) -> Result<String> {
    let mut cmd = Command::new(program);
    cmd.args(args);
    let ran = bounded::run_limited(cmd, None, AUDIT_TIMEOUT, ANSWER_LIMIT)
        .with_context(|| format!("`{shown}`"))?;
    if !ran.status.success() {
        bail!("`{shown}` failed ({}): {}", ran.status, ran.stderr.trim());
    }
    Ok(ran.stdout)
}

fn run_metrics(write: Option<&Path>) -> Result<()> {
    let assoc = slurm_output("scontrol", &metrics::ASSOC_MGR_ARGS)?;
    let pending = slurm_output("squeue", &metrics::PENDING_SQUEUE_ARGS)?;
    // Which QOS are low priority (for the alert on group jobs waiting
    // while they hold the group's GPUs): gpu_qos.conf, where it reads.
    let policy = beside_slurm_conf(None, "gpu_qos.conf");
    let cfg = match gpushare::shared::syntax::load(&policy, config::parse) {
        Ok(cfg) => cfg.unwrap_or_default(),
        Err(e) => {
            eprintln!("gpu-qos: {e}; no QOS marked low priority, no account limits");
            config::GpuQosConfig::default()
        }
    };
    let mut text = metrics::render_qos(
        &metrics::parse_assoc_mgr_qos(&assoc),
        &metrics::parse_pending(&pending),
        cfg.low_priority_qos(),
    );
    // The accounts whose typed limits the plugin enforces (Account= rules).
    let accounts: Vec<String> = cfg
        .association_rules()
        .filter_map(|r| match r.scope() {
            config::RuleScope::Association { accounts, .. } => Some(accounts.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    if !accounts.is_empty() {
        let mut args: Vec<String> = metrics::ASSOC_MGR_ACCOUNT_ARGS
            .iter()
            .map(|a| (*a).to_owned())
            .collect();
        args.push(metrics::accounts_filter(&accounts));
        let assoc = slurm_output("scontrol", &args)?;
        text.push_str(&metrics::render_accounts(
            &metrics::parse_assoc_mgr_accounts(&assoc),
        ));
    }
    match write {
        Some(path) => prom::write_file(path, &text).map_err(anyhow::Error::msg),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

fn read_optional(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// Gathers what the audit reads; an error means the site could not be read
/// at all (exit 2).
fn gather(conf: Option<PathBuf>) -> Result<(Site, Vec<String>)> {
    let mut sources = Vec::new();
    let mut unread: Vec<Unread> = Vec::new();
    let (settings, nodes, partitions, slurm_conf, slurm_conf_text) =
        match slurm_output("scontrol", &["show", "config"]) {
            Ok(text) => {
                let settings = SlurmSettings::from_show_config(&text);
                if settings.is_empty() {
                    bail!("`scontrol show config` printed no setting");
                }
                sources.push("scontrol show config".to_owned());
                let slurm_conf = settings.get("SLURM_CONF").map(PathBuf::from);
                let (nodes, u) = match slurm_output("scontrol", &["show", "node", "-o"]) {
                    Ok(t) => site_text::parse_nodes(&t),
                    Err(e) => (Vec::new(), vec![unread_from("scontrol show node", &e)]),
                };
                unread.extend(u);
                let (partitions, u) = match slurm_output("scontrol", &["show", "partition", "-o"]) {
                    Ok(t) => site_text::parse_partitions(&t),
                    Err(e) => (Vec::new(), vec![unread_from("scontrol show partition", &e)]),
                };
                unread.extend(u);
                let text = slurm_conf.as_deref().and_then(read_with_includes);
                (settings, nodes, partitions, slurm_conf, text)
            }
            Err(e) => {
                let path = std::env::var_os("SLURM_CONF")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| PathBuf::from(DEFAULT_SLURM_CONF));
                let file = path.to_string_lossy().into_owned();
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("{e:#}; and {file} cannot be read either"))?;
                sources.push(format!("{file} (scontrol show config: {e:#})"));
                let parsed = site_text::parse_slurm_conf(&text, &file);
                unread.extend(parsed.unread);
                let text = read_with_includes(&path);
                (
                    parsed.settings,
                    parsed.nodes,
                    parsed.partitions,
                    Some(path),
                    text,
                )
            }
        };
    let beside = |name: &str| beside_slurm_conf(slurm_conf.as_deref(), name);
    let accounting = settings
        .get("AccountingStorageType")
        .is_some_and(|t| t.eq_ignore_ascii_case("accounting_storage/slurmdbd"));
    let qos = if accounting {
        let text = slurm_output("sacctmgr", &AUDIT_SACCTMGR_ARGS)?;
        let (qos, u) = site_text::parse_qos(&text);
        unread.extend(u);
        sources.push(format!("sacctmgr show qos ({} QOS)", qos.len()));
        qos
    } else {
        Vec::new()
    };
    sources.push(format!(
        "{} node{}, {} partition{}",
        nodes.len(),
        if nodes.len() == 1 { "" } else { "s" },
        partitions.len(),
        if partitions.len() == 1 { "" } else { "s" }
    ));
    // The account and user levels of typed limits; what cannot be read is
    // a note, as for every other source of the audit.
    let associations = if accounting {
        match read_associations() {
            Ok(a) => {
                sources.push(format!("sacctmgr show assoc ({} with GPU limits)", a.len()));
                a
            }
            Err(e) => {
                unread.push(unread_from("sacctmgr show assoc", &e));
                Vec::new()
            }
        }
    } else {
        Vec::new()
    };
    let plugstack_path = settings
        .get("PlugStackConfig")
        .map(PathBuf::from)
        .unwrap_or_else(|| beside("plugstack.conf"));
    let gpu_qos_path = conf.unwrap_or_else(|| beside("gpu_qos.conf"));
    let gpu_qos_conf_path = gpu_qos_path.to_string_lossy().into_owned();
    let gpu_qos_conf = match gpushare::shared::syntax::load(&gpu_qos_path, config::parse) {
        Ok(None) => GpuQosConf::Missing,
        Ok(Some(cfg)) => {
            sources.push(gpu_qos_conf_path.clone());
            GpuQosConf::Read(Box::new(cfg))
        }
        Err(e) => GpuQosConf::Invalid(e.to_string()),
    };
    let site = Site {
        settings,
        qos,
        associations,
        nodes,
        partitions,
        plugstack: read_optional(&plugstack_path),
        cgroup_conf: read_optional(&beside("cgroup.conf")),
        slurm_conf: slurm_conf_text,
        gpu_qos_conf_path,
        gpu_qos_conf,
        unread,
    };
    Ok((site, sources))
}

/// slurm.conf's text followed by that of each file it includes (one
/// level, as sites use `Include`; a relative path is beside slurm.conf);
/// `None` when any of it cannot be read, so that nothing is taken as unset
/// that may be set in a file not read.
fn read_with_includes(path: &Path) -> Option<String> {
    let mut text = std::fs::read_to_string(path).ok()?;
    let included: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| {
            let l = l.split('#').next().unwrap_or("").trim();
            let (word, rest) = l.split_once(char::is_whitespace)?;
            word.eq_ignore_ascii_case("include")
                .then(|| path.with_file_name("").join(rest.trim()))
        })
        .collect();
    for file in included {
        text.push('\n');
        text.push_str(&std::fs::read_to_string(file).ok()?);
    }
    Some(text)
}

fn unread_from(source: &str, e: &anyhow::Error) -> Unread {
    Unread {
        source: source.to_owned(),
        reason: format!("{e:#}"),
    }
}

/// What `audit` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AuditView {
    Table,
    Json,
    Explain,
    Markdown,
    UserPage,
}

fn run_audit(conf: Option<PathBuf>, view: AuditView, fail_on: FailOn) -> ExitCode {
    let (site, sources) = match gather(conf) {
        Ok(found) => found,
        Err(e) => {
            let reason = format!("{e:#}");
            eprintln!("gpu-qos audit: {reason}");
            if view == AuditView::Json {
                println!("{}", AuditReport::unread(&reason, fail_on).to_json());
            }
            return ExitCode::from(2);
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
        return ExitCode::SUCCESS;
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

/// The jobs of the users who have jobs in `qos` (and of `user`), asked
/// of slurmctld so that neither the number of calls nor their answers grow
/// with the site's jobs: one `scontrol show assoc_mgr` for the QOS names
/// who has jobs there, then one `squeue -u` per such user (slurmctld
/// packs only that user's jobs). Where Slurm keeps no per-user counts for
/// a QOS (`AccountingStorageEnforce` without `limits`), every job is read
/// as before.
fn group_jobs(user: &str, qos: &[String]) -> Result<(Vec<usage::JobRow>, Vec<Unread>)> {
    qos_jobs(
        user,
        qos,
        &usage::SQUEUE_ARGS,
        usage::user_squeue_args,
        usage::parse_squeue,
        |j| &j.id,
    )
}

/// The jobs of `user` and of every user with jobs in `qos`, one `squeue`
/// (`of_user`) per user, each job once; every job (`every`) where Slurm
/// keeps no per-user counts for a QOS.
fn qos_jobs<T>(
    user: &str,
    qos: &[String],
    every: &[&str],
    of_user: impl Fn(&str) -> Vec<String>,
    parse: impl Fn(&str) -> (Vec<T>, Vec<Unread>),
    id: impl Fn(&T) -> &String,
) -> Result<(Vec<T>, Vec<Unread>)> {
    if qos.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let users = match qos_users(user, qos)? {
        Ok(users) => users,
        Err(name) => {
            let (jobs, mut unread) = parse(&slurm_output("squeue", every)?);
            unread.push(every_job_read(&name));
            return Ok((jobs, unread));
        }
    };
    let mut jobs: Vec<T> = Vec::new();
    let mut unread = Vec::new();
    for u in &users {
        let (rows, bad) = parse(&slurm_output("squeue", &of_user(u))?);
        unread.extend(bad);
        for row in rows {
            if !jobs.iter().any(|j| id(j) == id(&row)) {
                jobs.push(row);
            }
        }
    }
    Ok((jobs, unread))
}

/// `user` and every user with jobs in `qos`, from one `scontrol show
/// assoc_mgr`; `Err(qos name)` where Slurm keeps no per-user counts for a
/// QOS (`AccountingStorageEnforce` without `limits`).
fn qos_users(user: &str, qos: &[String]) -> Result<std::result::Result<Vec<String>, String>> {
    let by_qos = usage::parse_qos_users(&slurm_output("scontrol", &usage::assoc_mgr_args(qos))?);
    // Slurm 22.05 names users by uid there: the caller's own uid is the
    // caller, asked for once.
    let my_uid = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self").map_or_else(|_| String::new(), |m| m.uid().to_string())
    };
    let mut users = vec![user.to_owned()];
    for (name, listed) in &by_qos {
        let Some(listed) = listed else {
            return Ok(Err(name.clone()));
        };
        for u in listed {
            if *u != my_uid && !users.contains(u) {
                users.push(u.clone());
            }
        }
    }
    Ok(Ok(users))
}

fn every_job_read(qos: &str) -> Unread {
    Unread {
        source: format!("scontrol show assoc_mgr flags=qos qos={qos}"),
        reason: "Slurm keeps no per-user job counts for this QOS (AccountingStorageEnforce \
                 without limits): every job of the cluster was read instead"
            .to_owned(),
    }
}

/// The running jobs of `qos` (read as [`group_jobs`] reads a group).
fn running_in(user: &str, qos: &[String]) -> Result<(Vec<why::Job>, Vec<Unread>)> {
    let every = ["-h", "-t", "RUNNING", "-O", why::JOB_FIELDS];
    let (mut jobs, unread) =
        qos_jobs(user, qos, &every, why::running_args, why::parse_jobs, |j| {
            &j.id
        })?;
    jobs.retain(|j| qos.iter().any(|q| q.eq_ignore_ascii_case(&j.qos)));
    Ok((jobs, unread))
}

/// The output of a read `why` can do without: `None`, and the reason
/// noted in the report.
fn soft(unread: &mut Vec<Unread>, source: &str, r: Result<String>) -> Option<String> {
    match r {
        Ok(text) => Some(text),
        Err(e) => {
            unread.push(unread_from(source, &e));
            None
        }
    }
}

/// `gpu-qos why JOB`: what Slurm says of the job, then only what explains
/// its reason; a part that cannot be read is named in the report.
fn run_why(job: &str, json: bool) -> ExitCode {
    match why_report(job) {
        Ok(report) => {
            if json {
                match serde_json::to_string_pretty(&report) {
                    Ok(text) => println!("{text}"),
                    Err(e) => {
                        eprintln!("gpu-qos why: {e}");
                        return ExitCode::from(2);
                    }
                }
            } else {
                print!("{}", why::render(&report));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpu-qos why: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// The nodes and the job's partition, for a wait where nodes or billing
/// matter (two calls that grow with the nodes, not the jobs).
fn node_facts(partition: &str, unread: &mut Vec<Unread>, facts: &mut why::Facts) {
    if let Some(t) = soft(
        unread,
        "scontrol show node",
        slurm_output("scontrol", &["show", "node", "-o"]),
    ) {
        let (nodes, bad) = site_text::parse_nodes(&t);
        facts.nodes = nodes;
        unread.extend(bad);
    }
    if let Some(t) = soft(
        unread,
        "scontrol show partition",
        slurm_output("scontrol", &["show", "partition", partition, "-o"]),
    ) {
        facts.partition = site_text::parse_partitions(&t).0.into_iter().next();
    }
}

/// One job's explanation (see [`run_why`]).
fn why_report(job: &str) -> Result<why::WhyReport> {
    if job.is_empty() || !job.bytes().all(|b| b.is_ascii_digit() || b == b'_') {
        bail!("`{job}` is not a job id (a number, or ARRAYID_TASK)");
    }
    let (jobs, mut unread) = why::parse_jobs(&slurm_output("squeue", &why::job_args(job))?);
    let Some(found) = jobs.into_iter().next() else {
        bail!("no job {job} pending or running (squeue -j {job} lists none)");
    };
    let (all_qos, u) = site_text::parse_qos(&slurm_output("sacctmgr", &AUDIT_SACCTMGR_ARGS)?);
    let mut facts = why::Facts {
        qos: all_qos,
        ..why::Facts::default()
    };
    let pending = found.state == "PD";
    if pending {
        if let Some(t) = soft(
            &mut unread,
            "sprio -j",
            slurm_output("sprio", &why::sprio_job_args(job)),
        ) {
            facts.factors = why::parse_factors(&t).into_iter().next().map(|(_, f)| f);
        }
        // The jobs it may be behind: only where priority decides (the
        // answer is the partition's pending jobs).
        let ranked = matches!(found.reason.as_str(), "Priority" | "Resources");
        if let Some(t) = ranked
            .then(|| {
                soft(
                    &mut unread,
                    "sprio -p",
                    slurm_output("sprio", &why::sprio_partition_args(&found.partition)),
                )
            })
            .flatten()
        {
            facts.ranked = why::parse_ranked(&t);
        }
        // The QOS and GPUs of the jobs ahead of it, where there are any.
        if !why::jobs_ahead(&facts, &found).is_empty() {
            if let Some(t) = soft(
                &mut unread,
                "squeue -t PENDING",
                slurm_output("squeue", &why::pending_args(&found.partition)),
            ) {
                let (jobs, bad) = why::parse_jobs(&t);
                facts.pending = jobs;
                unread.extend(bad);
            }
        }
        if let Some(t) = soft(
            &mut unread,
            "sprio -w",
            slurm_output("sprio", &why::sprio_weight_args()),
        ) {
            facts.weights = why::parse_factors(&t).into_iter().next().map(|(_, f)| f);
        }
        if let Some(t) = soft(
            &mut unread,
            "sshare",
            slurm_output("sshare", &why::sshare_args(&found.account, &found.user)),
        ) {
            facts.shares = why::parse_shares(&t);
        }
        let victims = why::preempt_list(&facts.qos, &found.qos);
        // Its own group's running jobs too, where its QOS is a group's:
        // they hold the GPUs it waits for.
        let group = facts
            .qos
            .iter()
            .find(|q| q.name().eq_ignore_ascii_case(&found.qos))
            .filter(|q| q.record.expected_gpu_limit().is_some())
            .map(|q| q.name().to_owned());
        let read: Vec<String> = victims.iter().cloned().chain(group.clone()).collect();
        match running_in(&found.user, &read) {
            Ok((jobs, bad)) => {
                let (own, others): (Vec<_>, Vec<_>) = jobs
                    .into_iter()
                    .partition(|j| group.as_deref() == Some(j.qos.as_str()));
                facts.preemptable = others;
                facts.group_running = own;
                unread.extend(bad);
            }
            Err(e) => unread.push(unread_from("running jobs of the QOS it may preempt", &e)),
        }
        if ranked {
            node_facts(&found.partition, &mut unread, &mut facts);
        }
        if found.reason.starts_with("AssocGrp") {
            facts.account_limits = account_chain_uses(vec![found.account.clone()], &mut unread);
        }
        if found.reason.starts_with("QOSGrp") {
            let me = slurm_output("id", &["-un"])?.trim().to_owned();
            let report = group_jobs(&me, std::slice::from_ref(&found.qos))
                .map(|(jobs, _)| usage::usage(&me, &[], &facts.qos, &jobs, Some(&found.qos)));
            facts.group_words = report.ok().and_then(|r| {
                r.qos
                    .iter()
                    .flat_map(|q| q.pending.iter())
                    .find(|p| p.job.id == found.id)
                    .map(|p| p.why.clone())
            });
        }
    }
    if pending || found.restarts > 0 {
        if let Some(t) = soft(
            &mut unread,
            "scontrol show config",
            slurm_output("scontrol", &["show", "config"]),
        ) {
            let conf = SlurmSettings::from_show_config(&t);
            facts.max_age = conf.get("PriorityMaxAge").map(str::to_owned);
            facts.half_life = conf.get("PriorityDecayHalfLife").map(str::to_owned);
            facts.file_append = conf.get("JobFileAppend").map(|v| v.trim() == "1");
        }
    }
    if found.restarts > 0 {
        if let Some(t) = soft(
            &mut unread,
            "sacct -D",
            slurm_output("sacct", &why::sacct_runs_args(job)),
        ) {
            facts.runs = why::parse_runs(&t);
        }
    }
    unread.extend(u);
    let mut report = why::explain(found, facts);
    report.unread = unread;
    Ok(report)
}

/// The typed GPU limits of the user's own associations, and of the user's
/// accounts and their parents, from
/// slurmctld's association manager: the user's associations, then each
/// level of parents in one call. What cannot be read becomes a note.
fn account_uses(user: &str, unread: &mut Vec<Unread>) -> (Vec<AccountUse>, Vec<AccountUse>) {
    match ask_assoc_mgr(format!("users={user}")) {
        Ok(lines) => (
            usage::own_limits(&lines, user),
            account_chain_uses(usage::user_accounts(&lines, user), unread),
        ),
        Err(e) => {
            unread.push(unread_from(ASSOC_MGR_SOURCE, &e));
            (Vec::new(), Vec::new())
        }
    }
}

const ASSOC_MGR_SOURCE: &str = "scontrol show assoc_mgr flags=assoc";

/// The partitions whose QOS carries typed GPU limits, with what every job
/// in each holds (their QOS's usage in slurmctld's association manager).
fn partition_uses(
    all_qos: &[site_text::AuditQos],
    unread: &mut Vec<Unread>,
) -> Vec<usage::PartitionUse> {
    let Some(text) = soft(
        unread,
        "scontrol show partition",
        slurm_output("scontrol", &["show", "partition", "-o"]),
    ) else {
        return Vec::new();
    };
    let typed = |q: &str| {
        all_qos
            .iter()
            .any(|a| a.name().eq_ignore_ascii_case(q) && a.record.expected_gpu_limit().is_some())
    };
    let partitions: Vec<(String, String)> = site_text::parse_partitions(&text)
        .0
        .into_iter()
        .filter_map(|p| Some((p.name, p.qos.filter(|q| typed(q))?)))
        .collect();
    if partitions.is_empty() {
        return Vec::new();
    }
    let qos: Vec<String> = partitions.iter().map(|(_, q)| q.clone()).collect();
    let Some(text) = soft(
        unread,
        "scontrol show assoc_mgr flags=qos",
        slurm_output("scontrol", &usage::assoc_mgr_args(&qos)),
    ) else {
        return Vec::new();
    };
    usage::partition_uses(&partitions, &metrics::parse_assoc_mgr_qos(&text))
}

/// `scontrol -o show assoc_mgr flags=assoc FILTER`, read.
fn ask_assoc_mgr(filter: String) -> Result<Vec<metrics::AssocLine>> {
    let mut args: Vec<String> = metrics::ASSOC_MGR_ACCOUNT_ARGS
        .iter()
        .map(|a| (*a).to_owned())
        .collect();
    args.push(filter);
    slurm_output("scontrol", &args).map(|t| metrics::parse_assoc_lines(&t))
}

/// The typed GPU limits of `accounts` and every parent above them.
fn account_chain_uses(mut ask: Vec<String>, unread: &mut Vec<Unread>) -> Vec<AccountUse> {
    let source = ASSOC_MGR_SOURCE;
    let (mut seen, mut uses) = (Vec::new(), Vec::new());
    for _ in 0..usage::MAX_ACCOUNT_DEPTH {
        if ask.is_empty() {
            break;
        }
        seen.extend(ask.iter().cloned());
        match ask_assoc_mgr(metrics::accounts_filter(&ask)) {
            Ok(lines) => {
                let (found, next) = usage::account_limits(&lines, &seen);
                uses.extend(found);
                ask = next;
            }
            Err(e) => {
                unread.push(unread_from(source, &e));
                break;
            }
        }
    }
    uses
}

/// At most this many pending jobs are explained by `usage --explain`.
const EXPLAINED_JOBS: usize = 20;

fn run_usage(only: Option<&str>, json: bool, explain: bool) -> ExitCode {
    let gathered = || -> Result<usage::UsageReport> {
        // The name of the uid that runs this, not $USER, which anyone sets.
        let user = slurm_output("id", &["-un"])?.trim().to_owned();
        let assoc = slurm_output(
            "sacctmgr",
            &[
                "-nP",
                "show",
                "assoc",
                &format!("user={user}"),
                usage::ASSOC_FORMAT,
            ],
        )?;
        let (all_qos, mut unread) =
            site_text::parse_qos(&slurm_output("sacctmgr", &AUDIT_SACCTMGR_ARGS)?);
        let user_qos = usage::parse_assoc_qos(&assoc);
        let (jobs, u) = group_jobs(&user, &usage::covered_qos(&all_qos, &user_qos, only))?;
        unread.extend(u);
        let mut report = usage::usage(&user, &user_qos, &all_qos, &jobs, only);
        if only.is_none() {
            (report.own, report.accounts) = account_uses(&user, &mut unread);
            report.partitions = partition_uses(&all_qos, &mut unread);
        }
        if explain {
            // The caller's own pending jobs, whatever their QOS (slurmctld
            // packs only this user's).
            let ids = slurm_output("squeue", &["-h", "-u", &user, "-t", "PENDING", "-o", "%i"])?;
            let ids: Vec<&str> = ids.split_whitespace().collect();
            for id in ids.iter().take(EXPLAINED_JOBS) {
                match why_report(id) {
                    Ok(r) => report.explained.push(r),
                    // Gone between the two reads: nothing to explain.
                    Err(e) => unread.push(unread_from(&format!("gpu-qos why {id}"), &e)),
                }
            }
            if ids.len() > EXPLAINED_JOBS {
                unread.push(Unread {
                    source: "gpu-qos usage --explain".to_owned(),
                    reason: format!(
                        "{} more pending jobs not explained: gpu-qos why JOBID",
                        ids.len() - EXPLAINED_JOBS
                    ),
                });
            }
        }
        report.unread = unread;
        Ok(report)
    };
    match gathered() {
        Ok(report) => {
            if json {
                println!("{}", report.to_json());
            } else {
                print!("{}", report.to_text());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpu-qos usage: {e:#}");
            ExitCode::from(2)
        }
    }
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
        assert!(matches!(
            parse(&["usage", "--qos", "qos_lafferty", "--json"]),
            Ok(Cmd::Usage { qos: Some(q), json: true, explain: false }) if q == "qos_lafferty"
        ));
        assert!(matches!(
            parse(&["usage", "--explain"]),
            Ok(Cmd::Usage {
                qos: None,
                json: false,
                explain: true
            })
        ));
        assert!(matches!(
            parse(&["audit", "--explain", "--markdown"]),
            Ok(Cmd::Audit {
                explain: true,
                markdown: true,
                ..
            })
        ));
        assert!(matches!(
            parse(&["why", "4242_3", "--json"]),
            Ok(Cmd::Why { job, json: true }) if job == "4242_3"
        ));
        assert!(parse(&["why"]).is_err(), "why needs a job id");
        assert!(matches!(
            parse(&["audit"]),
            Ok(Cmd::Audit {
                conf: None,
                json: false,
                fail_on: FailOnArg::Error,
                explain: false,
                markdown: false,
            })
        ));
        assert!(matches!(
            parse(&["audit", "--json", "--fail-on", "note"]),
            Ok(Cmd::Audit {
                json: true,
                fail_on: FailOnArg::Note,
                ..
            })
        ));
        for bad in [
            &[][..],
            &["chek"],
            &["check", "--conf"],
            &["check", "extra"],
            &["generate", "--json"],
            &["audit", "--fail-on", "never"],
            &["audit", "--json", "--markdown"],
            &["audit", "--explain", "--json"],
            &["usage", "--qos"],
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
