//! Non-root users for attack tests, with what a user has: their own home,
//! their own copy of slurm.conf (and so their own plugstack.conf and client
//! SPANK plugins), compilers, libslurm. Nothing here gives them more.

use std::fs;
use std::os::unix::fs::{chown, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpushare::qos::why::WhyReport;

use crate::cluster::{Cluster, CLUSTER_NAME};
use crate::Result;

/// A user account on this machine, known to the cluster's accounting.
#[derive(Debug, Clone)]
pub struct TestUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Theirs alone: `<cluster>/home/<name>`, mode 0755.
    pub home: PathBuf,
}

fn ids(name: &str) -> Option<(u32, u32)> {
    let out = Command::new("id").args(["-u", name]).output().ok()?;
    let uid = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
    let out = Command::new("id").args(["-g", name]).output().ok()?;
    let gid = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
    Some((uid, gid))
}

/// A system account (no home, no login shell) such as a site's `slurm`
/// user, created if the machine lacks it: its (uid, gid).
pub fn system_account(name: &str) -> Result<(u32, u32)> {
    account(name, &["--system", "--shell", "/usr/sbin/nologin"])
}

/// The account `name` (made with `useradd OPTIONS --no-create-home` if
/// the machine lacks it; idempotent): its (uid, gid). Made under a lock on
/// `/etc/.gpushare-accounts.lock`: two runs in one release root
/// (tests/lanes.sh) may want the same account at once, and `useradd`
/// fails at once where another holds `/etc/passwd`'s lock.
fn account(name: &str, options: &[&str]) -> Result<(u32, u32)> {
    if let Some(found) = ids(name) {
        return Ok(found);
    }
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/etc/.gpushare-accounts.lock")
        .map_err(|e| format!("/etc/.gpushare-accounts.lock: {e}"))?;
    // SAFETY: flock on a descriptor this function owns; released when
    // `lock` is closed at the end of the function.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) } != 0 {
        return Err(format!(
            "flock /etc/.gpushare-accounts.lock: {}",
            std::io::Error::last_os_error()
        ));
    }
    if ids(name).is_none() {
        let out = Command::new("useradd")
            .args(options)
            .args(["--no-create-home", name])
            .output()
            .map_err(|e| format!("useradd: {e}"))?;
        if !out.status.success() && ids(name).is_none() {
            return Err(format!(
                "useradd {} {name}: {}",
                options.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    ids(name).ok_or_else(|| format!("no user {name} after useradd"))
}

impl TestUser {
    /// Creates the account if the machine lacks it (idempotent), a home in
    /// the cluster's directory, and the user's association (account
    /// `research`) in the cluster's accounting.
    pub fn create(c: &Cluster, name: &str) -> Result<Self> {
        let (uid, gid) = account(name, &["--shell", "/bin/sh"])?;
        let home = c.dir.join("home").join(name);
        fs::create_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
        chown(&home, Some(uid), Some(gid)).map_err(|e| format!("chown {}: {e}", home.display()))?;
        fs::set_permissions(&home, fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())?;
        let home_parent = c.dir.join("home");
        fs::set_permissions(&home_parent, fs::Permissions::from_mode(0o755))
            .map_err(|e| e.to_string())?;
        let known = c.run_ok("sacctmgr", &["-n", "-P", "show", "user", name])?;
        if known.trim().is_empty() {
            c.run_ok(
                "sacctmgr",
                &[
                    "-i",
                    "add",
                    "user",
                    name,
                    "account=research",
                    &format!("cluster={CLUSTER_NAME}"),
                ],
            )?;
        }
        Ok(Self {
            name: name.to_owned(),
            uid,
            gid,
            home,
        })
    }

    /// `program` run as this user, in their home, with `slurm_conf` (the
    /// cluster's unless the user brings their own).
    pub fn command(&self, c: &Cluster, slurm_conf: Option<&Path>, program: &str) -> Command {
        let mut cmd = c.command("setpriv");
        cmd.args([
            &format!("--reuid={}", self.uid),
            &format!("--regid={}", self.gid),
            "--init-groups",
            "--",
            "timeout",
            &crate::time::JOB_LONG.scaled_secs().to_string(),
            program,
        ])
        .current_dir(&self.home)
        .env("HOME", &self.home)
        .env("USER", &self.name)
        .env("LOGNAME", &self.name);
        if let Some(conf) = slurm_conf {
            cmd.env("SLURM_CONF", conf);
        }
        cmd
    }

    /// Sets the QOS this user's association may use (`sacctmgr modify
    /// user ... set qos=`); slurmctld learns it from slurmdbd on its own
    /// time.
    pub fn allow_qos(&self, c: &Cluster, qos: &[&str]) -> Result<()> {
        self.set_qos(c, qos, None)
    }

    /// As [`Self::allow_qos`], and makes `default` the QOS the user's jobs
    /// fall back to when they name none (`DefaultQOS`).
    pub fn allow_qos_by_default(&self, c: &Cluster, qos: &[&str], default: &str) -> Result<()> {
        self.set_qos(c, qos, Some(default))
    }

    fn set_qos(&self, c: &Cluster, qos: &[&str], default: Option<&str>) -> Result<()> {
        let name = format!("name={}", self.name);
        let list = format!("qos={}", qos.join(","));
        let mut args = vec!["-i", "modify", "user", "where", &name, "set", &list];
        let default = default.map(|d| format!("defaultqos={d}"));
        args.extend(default.as_deref());
        c.run_ok("sacctmgr", &args).map(|_| ())
    }

    /// Runs `program args` as this user.
    pub fn run(
        &self,
        c: &Cluster,
        slurm_conf: Option<&Path>,
        program: &str,
        args: &[&str],
    ) -> Result<Output> {
        self.command(c, slurm_conf, program)
            .args(args)
            .output()
            .map_err(|e| format!("{program} as {}: {e}", self.name))
    }

    /// Like [`Self::run`], failing with the output unless it exits 0.
    pub fn run_ok(
        &self,
        c: &Cluster,
        slurm_conf: Option<&Path>,
        program: &str,
        args: &[&str],
    ) -> Result<String> {
        let out = self.run(c, slurm_conf, program, args)?;
        if !out.status.success() {
            return Err(format!(
                "{program} {args:?} as {} failed ({}):\n{}\n{}",
                self.name,
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `gpu-qos why JOB --json` as this user, read once.
    pub fn why_now(&self, c: &Cluster, job: u32) -> Result<WhyReport> {
        let bin = crate::cluster::build_dir()?.join("gpu-qos");
        let text = self.run_ok(
            c,
            None,
            &bin.to_string_lossy(),
            &["why", &job.to_string(), "--json"],
        )?;
        serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))
    }

    /// `gpu-qos why JOB --json` as this user, read again (for up to 30 s)
    /// until the report's job has Slurm's reason `reason`: Slurm clears a
    /// pending job's reason to `None` while its scheduler looks at the job,
    /// and a report read then explains that instead (gpu-qos settles it
    /// only for a group limit, as [`Self::why_now`] shows). The last
    /// report read is in the error.
    pub fn why(&self, c: &Cluster, job: u32, reason: &str) -> Result<WhyReport> {
        let mut last = String::new();
        crate::cluster::wait_for(
            &format!("gpu-qos why {job} as {} to give reason {reason}", self.name),
            std::time::Duration::from_secs(30),
            || match self.why_now(c, job) {
                Ok(report) if report.job.reason == reason => Some(report),
                Ok(report) => {
                    last = format!("{report:?}");
                    None
                }
                Err(e) => {
                    last = e;
                    None
                }
            },
        )
        .map_err(|e| format!("{e}; last report: {last}"))
    }

    /// `sbatch --parsable ARGS` as this user: the job id. Retried for up
    /// to 30 s while slurmctld has not yet learnt from slurmdbd the QOS
    /// or account just given to the user; the last refusal is the error.
    pub fn sbatch(&self, c: &Cluster, args: &[&str]) -> Result<u32> {
        let mut all = vec!["--parsable"];
        all.extend_from_slice(args);
        let mut last = String::new();
        crate::cluster::wait_for(
            &format!("sbatch as {} to be accepted", self.name),
            crate::time::SHORT,
            || match self.run_ok(c, None, "sbatch", &all) {
                Ok(out) => out.trim().split(';').next()?.parse().ok(),
                Err(e) => {
                    last = e;
                    None
                }
            },
        )
        .map_err(|e| format!("{e}: {last}"))
    }

    /// Compiles the C file `source` as this user into their home (`-shared`
    /// for a plugin); returns the output path.
    pub fn compile(
        &self,
        c: &Cluster,
        source: &Path,
        output: &str,
        shared: bool,
    ) -> Result<PathBuf> {
        let out = self.home.join(output);
        let src = source.to_string_lossy();
        let dst = out.to_string_lossy();
        let mut args = vec!["-Wall", "-o", &*dst, &*src];
        // A program finds the libslurm it was linked with wherever that is
        // (SchedMD's RPMs: /usr/lib64, which a RHEL loader searches and a
        // Debian one does not), as a site's module file or ld.so.conf
        // would have it.
        let rpath;
        if shared {
            args.splice(0..0, ["-shared", "-fPIC"]);
        } else {
            args.push("-lslurm");
            let lib = self.run_ok(c, None, "cc", &["-print-file-name=libslurm.so"])?;
            let dir = Path::new(lib.trim()).parent().filter(|d| d.is_absolute());
            if let Some(dir) = dir {
                rpath = format!("-Wl,-rpath,{}", dir.display());
                args.push(&rpath);
            }
        }
        self.run_ok(c, None, "cc", &args)?;
        Ok(out)
    }

    /// The user's own copy of the cluster's slurm.conf, whose
    /// plugstack.conf loads `plugin` with `args`, as a user can make one.
    pub fn own_slurm_conf(
        &self,
        c: &Cluster,
        name: &str,
        plugin: &Path,
        args: &[&str],
    ) -> Result<PathBuf> {
        let dir = self.home.join(name);
        let plugstack = dir.join("plugstack.conf");
        let conf = dir.join("slurm.conf");
        let text = fs::read_to_string(c.slurm_conf()).map_err(|e| e.to_string())?;
        let text: String = text
            .lines()
            .map(|l| {
                if l.starts_with("PlugStackConfig=") {
                    format!("PlugStackConfig={}\n", plugstack.display())
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        let plugstack_text = format!("required {} {}\n", plugin.display(), args.join(" "));
        // Written by the user, in the user's directory.
        let script = format!(
            "mkdir -p '{d}' && cat > '{c}' <<'EOF'\n{text}EOF\ncat > '{p}' <<'EOF'\n{plugstack_text}EOF\n",
            d = dir.display(),
            c = conf.display(),
            p = plugstack.display(),
        );
        self.run_ok(c, None, "sh", &["-c", &script])?;
        Ok(conf)
    }
}
