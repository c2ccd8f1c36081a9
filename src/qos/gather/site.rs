//! What `gpu-qos audit`, `check`, `generate` and `metrics` read of the
//! site: Slurm's answers (through a [`SlurmRead`]) and the files beside
//! slurm.conf.

use std::path::{Path, PathBuf};

use crate::qos::audit::{GpuQosConf, Site};
use crate::qos::check::{self, AssocRecord, Finding, QosRecord};
use crate::qos::config::{self, GpuQosConfig};
use crate::qos::metrics;
use crate::qos::site::{self as site_text, SlurmSettings, Unread};
use crate::qos::slurm::{
    assoc_mgr, config as show_config, jobs, nodes, partitions, qos, qos_lists,
};
use crate::qos::slurm::{ReadError, SlurmRead};
use crate::shared::locations::{beside_slurm_conf, DEFAULT_SLURM_CONF, GPU_MPS_CONF};

/// The accounting database's QOS (`sacctmgr show qos`), read.
pub fn database(read: &dyn SlurmRead) -> Result<Vec<QosRecord>, ReadError> {
    let text = read.read(&qos::limits())?;
    check::parse_sacctmgr(&text).map_err(|e| ReadError::new(e.to_string()))
}

/// Every association with a GPU entry in its `GrpTRES` (`sacctmgr show
/// assoc`): the account and user levels of the typed limits.
pub fn associations(read: &dyn SlurmRead) -> Result<Vec<AssocRecord>, ReadError> {
    let text = read.read(&qos::associations())?;
    check::parse_sacctmgr_assoc(&text).map_err(|e| ReadError::new(e.to_string()))
}

/// What `gpu-qos check` compares.
#[derive(Debug, Clone)]
pub struct CheckInputs {
    /// gpu_qos.conf.
    pub cfg: GpuQosConfig,
    /// The QOS of the accounting database.
    pub qos: Vec<QosRecord>,
    /// Its associations with a GPU entry in their `GrpTRES`.
    pub associations: Vec<AssocRecord>,
    /// The users of all its associations.
    pub users: Vec<String>,
}

impl CheckInputs {
    /// Every finding of `gpu-qos check`, the file named `file`.
    pub fn findings(&self, file: &str) -> Vec<Finding> {
        let mut findings = check::check(&self.cfg, file, &self.qos);
        findings.extend(check::check_associations(
            &self.cfg,
            file,
            &self.associations,
        ));
        findings.extend(check::check_exempt_users(&self.cfg, file, &self.users));
        findings
    }
}

/// What `gpu-qos check` compares: gpu_qos.conf at `path`, the QOS, the
/// associations and their users.
pub fn check_inputs(read: &dyn SlurmRead, path: &Path) -> Result<CheckInputs, ReadError> {
    let file = path.to_string_lossy();
    // What slurmctld's plugin does meanwhile: the admin reads it here.
    let plugin = |e: String| {
        ReadError::new(format!(
            "{e}\njob_submit/gpu_qos keeps the last valid version it read; if slurmctld \
             started with the file so, it runs on the last good copy it kept \
             (<StateSaveLocation>/{}), or where none was ever kept, it is running without \
             its file: {}",
            config::last_good::COPY_NAME,
            config::WITHOUT_FILE
        ))
    };
    let cfg = crate::shared::syntax::load(path, config::parse)
        .map_err(|e| plugin(e.to_string()))?
        .ok_or_else(|| plugin(format!("{file}: no such file")))?;
    let assoc_text = read.read(&qos::associations())?;
    let parsed = |e: check::SacctmgrParseError| ReadError::new(e.to_string());
    Ok(CheckInputs {
        cfg,
        qos: database(read)?,
        associations: check::parse_sacctmgr_assoc(&assoc_text).map_err(parsed)?,
        users: check::parse_assoc_users(&assoc_text).map_err(parsed)?,
    })
}

/// The gpu_qos.conf `gpu-qos generate` prints, and a warning where the
/// associations could not be read (no `Account=` rules then).
pub fn generated(read: &dyn SlurmRead) -> Result<(String, Option<String>), ReadError> {
    let db = database(read)?;
    // Partitions whose QOS carries typed limits get rules too; without
    // slurmctld to answer, the QOS rules still stand.
    let partition_qos: Vec<(String, String)> = read
        .read(&partitions::all())
        .map(|t| site_text::parse_partitions(&t).0)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| Some((p.name, p.qos?)))
        .collect();
    let (assocs, warning) = match associations(read) {
        Ok(a) => (a, None),
        Err(e) => (Vec::new(), Some(format!("{e}; no Account= rules written"))),
    };
    let text = check::generate_for_site(&db, &partition_qos, &assocs);
    Ok((text, warning))
}

/// The Prometheus text of `gpu-qos metrics`, and a warning where
/// gpu_qos.conf at `policy` (which QOS are low priority, the `Account=`
/// rules) could not be read.
pub fn metrics_text(
    read: &dyn SlurmRead,
    policy: &Path,
) -> Result<(String, Option<String>), ReadError> {
    let assoc = read.read(&assoc_mgr::all_qos())?;
    let (pending, _) = jobs::read(read, &jobs::pending())?;
    // Which QOS are low priority (for the alert on group jobs waiting
    // while they hold the group's GPUs): gpu_qos.conf, where it reads.
    let (cfg, warning) = match crate::shared::syntax::load(policy, config::parse) {
        Ok(cfg) => (cfg.unwrap_or_default(), None),
        Err(e) => (
            GpuQosConfig::default(),
            Some(format!(
                "{e}; no QOS marked low priority, no account limits"
            )),
        ),
    };
    let gpus = assoc_mgr::parse_assoc_mgr_qos(&assoc);
    let mut text = metrics::render_qos(
        &gpus,
        &metrics::pending_by_reason(&pending, &gpus),
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
        let assoc = read.read(&assoc_mgr::accounts(&accounts))?;
        text.push_str(&metrics::render_accounts(
            &assoc_mgr::parse_assoc_mgr_accounts(&assoc),
        ));
    }
    Ok((text, warning))
}

fn read_optional(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The text of `path`, `None` where there is no such file; a file there
/// that cannot be read is also noted in `unread`, so that the audit says
/// what it left out rather than take the file's settings for Slurm's
/// defaults in silence.
fn read_beside(path: &Path, unread: &mut Vec<Unread>) -> Option<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            unread.push(Unread {
                source: path.to_string_lossy().into_owned(),
                reason: e.to_string(),
            });
            None
        }
    }
}

/// What the audit reads, and the list of its sources; an error means the
/// site could not be read at all. `slurm_conf_env` is `$SLURM_CONF`, read
/// when slurmctld does not answer.
pub fn site(
    read: &dyn SlurmRead,
    conf: Option<PathBuf>,
    slurm_conf_env: Option<PathBuf>,
) -> Result<(Site, Vec<String>), ReadError> {
    let mut sources = Vec::new();
    let mut unread: Vec<Unread> = Vec::new();
    let (settings, nodes, partitions, slurm_conf, slurm_conf_text) =
        match read.read(&show_config::show()) {
            Ok(text) => {
                let settings = SlurmSettings::from_show_config(&text);
                if settings.is_empty() {
                    return Err(ReadError::new("`scontrol show config` printed no setting"));
                }
                sources.push("scontrol show config".to_owned());
                let slurm_conf = settings.get("SLURM_CONF").map(PathBuf::from);
                let (nodes, u) = match read.read(&nodes::all()) {
                    Ok(t) => site_text::parse_nodes(&t),
                    Err(e) => (Vec::new(), vec![e.unread("scontrol show node")]),
                };
                unread.extend(u);
                let (partitions, u) = match read.read(&partitions::all()) {
                    Ok(t) => site_text::parse_partitions(&t),
                    Err(e) => (Vec::new(), vec![e.unread("scontrol show partition")]),
                };
                unread.extend(u);
                let text = slurm_conf.as_deref().and_then(read_with_includes);
                (settings, nodes, partitions, slurm_conf, text)
            }
            Err(e) => {
                let path = slurm_conf_env.unwrap_or_else(|| PathBuf::from(DEFAULT_SLURM_CONF));
                let file = path.to_string_lossy().into_owned();
                let text = std::fs::read_to_string(&path).map_err(|io| {
                    ReadError::new(format!("{e}; and {file} cannot be read either: {io}"))
                })?;
                sources.push(format!("{file} (scontrol show config: {e})"));
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
        let text = read.read(&qos::audit())?;
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
        match associations(read) {
            Ok(a) => {
                sources.push(format!("sacctmgr show assoc ({} with GPU limits)", a.len()));
                a
            }
            Err(e) => {
                unread.push(e.unread("sacctmgr show assoc"));
                Vec::new()
            }
        }
    } else {
        Vec::new()
    };
    // Running jobs with a QOS list, on the releases that move them to
    // another QOS at a restart.
    let moves = settings.release().is_some_and(qos_lists::moves_listed_jobs);
    let qos_lists = if accounting && moves {
        match read.read(&qos_lists::running()) {
            Ok(text) => {
                let jobs = qos_lists::parse(&text);
                sources.push(format!(
                    "sacct (running jobs, {} with a QOS list)",
                    jobs.len()
                ));
                Some(jobs)
            }
            Err(e) => {
                unread.push(e.unread("sacct (running jobs' QOS lists)"));
                None
            }
        }
    } else {
        None
    };
    let plugstack_path = settings
        .get("PlugStackConfig")
        .map(PathBuf::from)
        .unwrap_or_else(|| beside("plugstack.conf"));
    let gpu_qos_path = conf.unwrap_or_else(|| beside("gpu_qos.conf"));
    let gpu_qos_conf_path = gpu_qos_path.to_string_lossy().into_owned();
    let gpu_qos_conf = match crate::shared::syntax::load(&gpu_qos_path, config::parse) {
        Ok(None) => GpuQosConf::Missing,
        Ok(Some(cfg)) => {
            sources.push(gpu_qos_conf_path.clone());
            GpuQosConf::Read(Box::new(cfg))
        }
        Err(e) => GpuQosConf::Invalid(e.to_string()),
    };
    // The job namespaces' directories and the nodes' StateDir, where the
    // controller has them (a shared /etc/slurm; configless nodes get
    // job_container.conf and namespace.yaml from it).
    let job_container_conf = read_beside(&beside("job_container.conf"), &mut unread);
    let namespace_yaml = read_beside(&beside("namespace.yaml"), &mut unread);
    let gpu_mps_conf = read_beside(&beside(GPU_MPS_CONF), &mut unread);
    let site = Site {
        settings,
        qos,
        associations,
        nodes,
        partitions,
        plugstack: read_optional(&plugstack_path),
        cgroup_conf: read_optional(&beside("cgroup.conf")),
        gres_conf: read_optional(&beside("gres.conf")),
        job_container_conf,
        namespace_yaml,
        gpu_mps_conf,
        slurm_conf: slurm_conf_text,
        qos_lists,
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

/// Whether `uid` sees the whole site: root, or Slurm's own user
/// (`SlurmUser`, as `scontrol show config` names it).
pub fn sees_the_whole_site(read: &dyn SlurmRead, uid: u32) -> bool {
    if uid == 0 {
        return true;
    }
    // `SlurmUser = slurm(64030)`
    let slurm_uid = read
        .read(&show_config::show())
        .ok()
        .map(|t| SlurmSettings::from_show_config(&t))
        .and_then(|s| {
            let v = s.get("SlurmUser")?;
            v.split_once('(')?
                .1
                .trim_end_matches(')')
                .parse::<u32>()
                .ok()
        });
    slurm_uid == Some(uid)
}

/// Who may see the whole site: root and Slurm's own user (`SlurmUser`).
/// `None` for them; for anyone else, what an admin command run by them
/// must say first: Slurm shows them only what `PrivateData` lets every
/// user see, and some reads are refused. Operators and administrators
/// named in `sacctmgr` (AdminLevel) are not told apart here: for them the
/// note is a reminder. Who runs it is this process's effective uid, never
/// a read of Slurm's (recorded answers are the site's, not the caller's).
pub fn admin_note(read: &dyn SlurmRead, command: &str) -> Option<String> {
    admin_note_for(read, command, rustix::process::geteuid().as_raw())
}

fn admin_note_for(read: &dyn SlurmRead, command: &str, uid: u32) -> Option<String> {
    if sees_the_whole_site(read, uid) {
        return None;
    }
    Some(format!(
        "gpu-qos {command} is an admins' command, run here by uid {uid}, neither root nor \
         SlurmUser: Slurm shows this user only what PrivateData lets every user see and may \
         refuse some reads, so what it reports can be incomplete; run it as root"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qos::slurm::{Query, ReadError};

    struct Config(&'static str);

    impl SlurmRead for Config {
        fn read(&self, query: &Query) -> Result<String, ReadError> {
            match query.program {
                "scontrol" => Ok(self.0.to_owned()),
                _ => Err(ReadError::new("not asked")),
            }
        }
    }

    #[test]
    fn root_and_slurm_user_run_admin_commands_without_a_note() {
        let conf = Config("SlurmUser               = slurm(64030)\nSlurmdUser = root(0)\n");
        assert_eq!(admin_note_for(&conf, "audit", 0), None);
        assert_eq!(admin_note_for(&conf, "audit", 64030), None);
        let note = admin_note_for(&conf, "metrics", 1001).unwrap_or_default();
        assert!(
            note.starts_with("gpu-qos metrics is an admins' command, run here by uid 1001,"),
            "{note}"
        );
        // slurmctld not answering: only root is known for sure.
        assert!(admin_note_for(&Config(""), "audit", 64030).is_some());
    }

    /// slurmctld answering `scontrol show config` alone.
    struct ShowConfig(String);

    impl SlurmRead for ShowConfig {
        fn read(&self, query: &Query) -> Result<String, ReadError> {
            if query.key == "scontrol-show-config" {
                Ok(self.0.clone())
            } else {
                Err(ReadError::new("not asked"))
            }
        }
    }

    #[test]
    fn the_job_namespaces_files_and_gpu_mps_conf_are_read_beside_slurm_conf() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let conf = dir.path().join("slurm.conf");
        let write = |name: &str, text: &str| {
            std::fs::write(dir.path().join(name), text).unwrap_or_else(|e| panic!("{e}"))
        };
        write("slurm.conf", "JobContainerType=job_container/tmpfs\n");
        let read = ShowConfig(format!(
            "SLURM_CONF              = {}\nJobContainerType        = job_container/tmpfs\n",
            conf.display()
        ));
        let (site, _) = super::site(&read, None, None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (
                &site.job_container_conf,
                &site.namespace_yaml,
                &site.gpu_mps_conf
            ),
            (&None, &None, &None)
        );
        let unread =
            |site: &Site| -> Vec<String> { site.unread.iter().map(|u| u.source.clone()).collect() };
        // Absent files are Slurm's and gpushare's defaults, not unread.
        assert!(
            !unread(&site)
                .iter()
                .any(|s| s.ends_with(".conf") || s.ends_with(".yaml")),
            "{:?}",
            site.unread
        );
        write("job_container.conf", "Dirs=/tmp,/run\n");
        write("gpu_mps.conf", "StateDir=/tmp/x\n");
        // A directory where namespace.yaml should be: there, but unreadable.
        std::fs::create_dir(dir.path().join("namespace.yaml")).unwrap_or_else(|e| panic!("{e}"));
        let (site, _) = super::site(&read, None, None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(site.job_container_conf.as_deref(), Some("Dirs=/tmp,/run\n"));
        assert_eq!(site.gpu_mps_conf.as_deref(), Some("StateDir=/tmp/x\n"));
        assert_eq!(site.namespace_yaml, None);
        let yaml = dir.path().join("namespace.yaml").display().to_string();
        assert!(unread(&site).contains(&yaml), "{:?}", site.unread);
    }
}
