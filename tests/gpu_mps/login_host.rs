//! A login host as the install page gives it: a root of its own with
//! Slurm's client commands and gpushare's tools package alone, no Slurm
//! daemon, and the site's `plugstack.conf` loading gpushare's SPANK plugin
//! as `required` (`tests/package_test.sh` and `tests/rpm_test.sh` make it
//! and name it in `GPUSHARE_LOGIN_ROOT`; `tests/release_suite.sh` mounts it
//! at that path in the cluster's root). From there a user submits a share
//! and an srun step that run on the cluster's node and asks `gpu-qos why`
//! and `usage`; with the plugin's file gone the `required` line stops the
//! client commands there, and as `optional` they run again.

use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::process::{Command, Output};

use gpushare::qos::usage::UsageReport;
use gpushare::qos::why::WhyReport;
use testcluster::cluster::slurm_plugin_dir;
use testcluster::process::MARKER;
use testcluster::users::TestUser;

/// The SPANK plugin's file name, as a plugstack line names it (bare, or
/// at the end of a path).
const PLUGIN: &str = "spank_gpu_mps.so";

use super::*;

/// The share the login host submits: its GPU, units and thread
/// percentage as the job sees them.
const SHARE: &str =
    "--wrap=echo GPU=$GPUSHARE_GPU UNITS=$GPUSHARE_MPS_UNITS PCT=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";

/// The login host's root, with the cluster's directory mounted in it at
/// its own path (the site's shared file system: the users' homes, the
/// jobs' output, the munge socket its client commands reach); unmounted
/// when dropped.
struct LoginHost {
    root: PathBuf,
    mounted: Option<PathBuf>,
}

impl Drop for LoginHost {
    fn drop(&mut self) {
        if let Some(m) = self.mounted.take() {
            let _ = Command::new("timeout")
                .args(["30", "umount", "-l"])
                .arg(&m)
                .output();
        }
    }
}

/// Runs a command and fails unless it exits 0.
fn run_quietly(cmd: &mut Command, what: &str) -> TestResult {
    let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
    ensure(
        out.status.success(),
        format!("{what}: {}", String::from_utf8_lossy(&out.stderr)),
    )
}

impl LoginHost {
    /// The root `GPUSHARE_LOGIN_ROOT` names, holding no Slurm daemon, with
    /// the cluster's directory mounted and `/etc/slurm/slurm.conf` the
    /// cluster's as a login host has it: Slurm's own `PluginDir`, and
    /// Slurm's default `PlugStackConfig` (the site's file there).
    fn attach(c: &Cluster) -> Result<Self, String> {
        let root = std::env::var("GPUSHARE_LOGIN_ROOT")
            .map(PathBuf::from)
            .map_err(|_| {
                "GPUSHARE_LOGIN_ROOT is not set: tests/package_test.sh and tests/rpm_test.sh run this test"
            })?;
        for daemon in ["slurmctld", "slurmd", "slurmdbd"] {
            let path = root.join("usr/sbin").join(daemon);
            ensure(
                !path.exists(),
                format!("the login host has {}", path.display()),
            )?;
        }
        let mut host = Self {
            root,
            mounted: None,
        };
        let at = host.path(&c.dir);
        fs::create_dir_all(&at).map_err(|e| format!("{}: {e}", at.display()))?;
        run_quietly(
            Command::new("timeout")
                .args(["30", "mount", "--bind"])
                .arg(&c.dir)
                .arg(&at),
            "mount --bind the cluster's directory into the login host",
        )?;
        host.mounted = Some(at);
        let text = fs::read_to_string(c.slurm_conf()).map_err(|e| e.to_string())?;
        let conf: String = text
            .lines()
            .filter(|l| !l.starts_with("PlugStackConfig="))
            .map(|l| {
                if l.starts_with("PluginDir=") {
                    format!("PluginDir={}\n", slurm_plugin_dir())
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        let etc = host.path(Path::new("/etc/slurm"));
        fs::create_dir_all(&etc).map_err(|e| format!("{}: {e}", etc.display()))?;
        let conf_path = etc.join("slurm.conf");
        fs::write(&conf_path, conf).map_err(|e| format!("{}: {e}", conf_path.display()))?;
        Ok(host)
    }

    /// Where `path` of the login host is, seen from here.
    fn path(&self, path: &Path) -> PathBuf {
        self.root.join(path.strip_prefix("/").unwrap_or(path))
    }

    /// A test user of the cluster, known to the login host too (its
    /// passwd and group lines, as a site's directory service gives them:
    /// one name and one id on every host). A line of the login host's that
    /// gives the user's id to another name goes: the login host is an
    /// overlay of a release root other runs add their own users to, each
    /// from its own view of the ids (seen: `gpu-qos usage` there naming
    /// another run's user of the same uid).
    fn user(&self, c: &Cluster, name: &str) -> Result<TestUser, String> {
        let user = TestUser::create(c, name)?;
        for (file, id) in [("/etc/passwd", user.uid), ("/etc/group", user.gid)] {
            let theirs_path = self.path(Path::new(file));
            let theirs = fs::read_to_string(&theirs_path).unwrap_or_default();
            let other = |l: &&str| {
                let fields: Vec<&str> = l.split(':').collect();
                fields.get(2) == Some(&id.to_string().as_str()) && fields.first() != Some(&name)
            };
            if theirs.lines().any(|l| other(&l)) {
                let kept: String = theirs
                    .lines()
                    .filter(|l| !other(l))
                    .map(|l| format!("{l}\n"))
                    .collect();
                fs::write(&theirs_path, kept)
                    .map_err(|e| format!("{}: {e}", theirs_path.display()))?;
            }
        }
        for (file, key, field) in [
            ("/etc/passwd", name.to_owned(), 0),
            ("/etc/group", user.gid.to_string(), 2),
        ] {
            let ours = fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
            let line = ours
                .lines()
                .find(|l| l.split(':').nth(field) == Some(key.as_str()))
                .ok_or_else(|| format!("{file} has no line for {key}"))?;
            let theirs_path = self.path(Path::new(file));
            let mut theirs = fs::read_to_string(&theirs_path).unwrap_or_default();
            if !theirs.lines().any(|l| l == line) {
                if !theirs.is_empty() && !theirs.ends_with('\n') {
                    theirs.push('\n');
                }
                theirs.push_str(line);
                theirs.push('\n');
                fs::write(&theirs_path, theirs)
                    .map_err(|e| format!("{}: {e}", theirs_path.display()))?;
            }
        }
        Ok(user)
    }

    /// `program ARGS` run as `user` on the login host: in its root, in the
    /// user's home, with nothing of this process's environment but the
    /// harness's marker (so that the cluster reaps what it leaves).
    fn run(
        &self,
        c: &Cluster,
        user: &TestUser,
        program: &str,
        args: &[&str],
    ) -> Result<Output, String> {
        Command::new("chroot")
            .arg(&self.root)
            .args(["/usr/bin/env", "-i"])
            .arg(format!("--chdir={}", user.home.display()))
            .args([
                "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                "LANG=C.UTF-8",
                &format!("HOME={}", user.home.display()),
                &format!("USER={}", user.name),
                &format!("LOGNAME={}", user.name),
                &format!("{MARKER}={}", c.dir.display()),
                "setpriv",
                &format!("--reuid={}", user.uid),
                &format!("--regid={}", user.gid),
                "--init-groups",
                "--",
                "timeout",
                &JOB_LONG.scaled_secs().to_string(),
                program,
            ])
            .args(args)
            .output()
            .map_err(|e| format!("{program} on the login host: {e}"))
    }

    /// [`Self::run`] that must exit 0: its stdout.
    fn run_ok(
        &self,
        c: &Cluster,
        user: &TestUser,
        program: &str,
        args: &[&str],
    ) -> Result<String, String> {
        let out = self.run(c, user, program, args)?;
        ensure(
            out.status.success(),
            format!(
                "`{program} {}` on the login host failed ({}): {}{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `sbatch --parsable` there, its output in the cluster's jobs
    /// directory: the job id. Retried for a while as [`TestUser::sbatch`]
    /// is: slurmctld learns a new user's association from slurmdbd on its
    /// own time.
    fn sbatch(&self, c: &Cluster, user: &TestUser, args: &[&str]) -> Result<u32, String> {
        let output = format!("--output={}/%j.out", c.jobs_dir.display());
        let mut all = vec!["--parsable", output.as_str()];
        all.extend_from_slice(args);
        let mut last = String::new();
        wait_for(
            "sbatch on the login host to be accepted",
            SHORT,
            || match self.run_ok(c, user, "sbatch", &all) {
                Ok(out) => out.trim().split(';').next()?.parse().ok(),
                Err(e) => {
                    last = e;
                    None
                }
            },
        )
        .map_err(|e| format!("{e}: {last}"))
    }

    /// The site's plugstack line that loads gpushare's plugin, following
    /// `include` lines as Slurm does (Debian's file includes
    /// `plugstack.conf.d/*.conf`): the file holding it (as the login host
    /// names it) and the words of the line.
    fn gpushare_line(&self) -> Result<(PathBuf, Vec<String>), String> {
        let mut files = vec![PathBuf::from("/etc/slurm/plugstack.conf")];
        let mut i = 0;
        while let Some(file) = files.get(i).cloned() {
            i += 1;
            let text = fs::read_to_string(self.path(&file)).unwrap_or_default();
            for line in text.lines() {
                let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
                match words.as_slice() {
                    [kw, pattern, ..] if kw == "include" => files.extend(self.glob(pattern)),
                    [_, so, ..] if so == PLUGIN || so.ends_with(&format!("/{PLUGIN}")) => {
                        return Ok((file, words))
                    }
                    _ => {}
                }
            }
        }
        Err(format!(
            "no plugstack line of the login host loads spank_gpu_mps.so (read {files:?})"
        ))
    }

    /// The plugin file a plugstack line names (`so`): its path, or a bare
    /// name in Slurm's `PluginDir`, as the login host's client commands
    /// look it up.
    fn plugin_file(&self, so: &str) -> PathBuf {
        let named = Path::new(so);
        self.path(&if named.is_absolute() {
            named.to_path_buf()
        } else {
            Path::new(&slurm_plugin_dir()).join(named)
        })
    }

    /// The files an `include` pattern names: a path, or `DIR/*.conf`.
    fn glob(&self, pattern: &str) -> Vec<PathBuf> {
        let Some(dir) = pattern.strip_suffix("/*.conf") else {
            return vec![PathBuf::from(pattern)];
        };
        let mut found: Vec<PathBuf> = fs::read_dir(self.path(Path::new(dir)))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| Path::new(dir).join(e.file_name()))
                    .filter(|p| p.extension().is_some_and(|x| x == "conf"))
                    .collect()
            })
            .unwrap_or_default();
        found.sort();
        found
    }
}

/// A file of the login host put back as it was when dropped, after a
/// test step moved it away or replaced it.
enum PutBack {
    /// Renamed to `to`.
    Moved { path: PathBuf, to: PathBuf },
    /// Replaced: it was this link, or a file of this text.
    Replaced {
        path: PathBuf,
        link: Option<PathBuf>,
        text: Option<Vec<u8>>,
    },
}

impl PutBack {
    /// `path` renamed beside itself.
    fn move_away(path: PathBuf) -> Result<Self, String> {
        let to = path.with_extension("so.moved");
        fs::rename(&path, &to).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Self::Moved { path, to })
    }

    /// `path` (a link, or a file) replaced by a file of `text`.
    fn replace(path: PathBuf, text: &str) -> Result<Self, String> {
        let kept = Self::Replaced {
            link: fs::read_link(&path).ok(),
            text: fs::read(&path).ok(),
            path: path.clone(),
        };
        fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(kept)
    }
}

impl Drop for PutBack {
    fn drop(&mut self) {
        match self {
            Self::Moved { path, to } => {
                let _ = fs::rename(to, path);
            }
            Self::Replaced { path, link, text } => {
                let _ = fs::remove_file(&*path);
                if let Some(link) = link {
                    let _ = symlink(link, &*path);
                } else if let Some(text) = text {
                    let _ = fs::write(&*path, text);
                }
            }
        }
    }
}

/// A batch share and an srun step submitted from the login host run on the
/// node, their output as a job there gives it; `gpu-qos why` and `usage`
/// answer the user there from the cluster's Slurm; the plugin's file gone,
/// the site's `required` line stops sbatch and srun there, and the same
/// line as `optional` lets a job run.
pub(super) fn login_host_jobs(c: &mut Cluster) -> TestResult {
    let login = LoginHost::attach(c)?;
    let (file, line) = login.gpushare_line()?;
    ensure(
        line.first().map(String::as_str) == Some("required"),
        format!(
            "the login host's plugstack line in {}: {line:?}",
            file.display()
        ),
    )?;
    let user = login.user(c, "gpushare-login")?;

    // A share, held: gpu-qos explains it there.
    let id = login.sbatch(c, &user, &["-H", "--gres=mps:25", SHARE])?;
    let ids = id.to_string();
    let why = login.run_ok(c, &user, "gpu-qos", &["why", &ids, "--json"])?;
    let report: WhyReport =
        serde_json::from_str(&why).map_err(|e| format!("gpu-qos why --json: {e}: {why}"))?;
    ensure(
        report.job.reason == "JobHeldUser"
            && report.see.contains(&format!("scontrol release {id}"))
            && report.unread.is_empty(),
        format!("gpu-qos why {id} on the login host: {why}"),
    )?;
    let usage = login.run_ok(c, &user, "gpu-qos", &["usage", "--explain", "--json"])?;
    let report: UsageReport =
        serde_json::from_str(&usage).map_err(|e| format!("gpu-qos usage --json: {e}: {usage}"))?;
    ensure(
        report.user == user.name
            && report.explained.iter().any(|r| r.job.id == ids)
            && report.unread.is_empty(),
        format!("gpu-qos usage --explain on the login host: {usage}"),
    )?;
    login.run_ok(c, &user, "scontrol", &["release", &ids])?;
    let info = c.wait_job_done(id, JOB_LONG)?;
    let p = printed(c, id);
    ensure(
        info.state() == "COMPLETED"
            && p.get("UNITS").map(String::as_str) == Some("25")
            && p.get("PCT").map(String::as_str) == Some("25")
            && p.get("GPU")
                .and_then(|g| g.parse::<u32>().ok())
                .is_some_and(|g| g < 4),
        format!(
            "the share from the login host ended {}: {:?}",
            info.state(),
            c.job_output(id)
        ),
    )?;

    // A CPU step, srun's output back on the login host.
    let step = login.run(c, &user, "srun", &["printenv", "SLURMD_NODENAME"])?;
    ensure(
        step.status.success()
            && step.stdout == format!("{}\n", testcluster::cluster::NODE).as_bytes()
            && step.stderr.is_empty(),
        format!(
            "srun on the login host: {:?} {:?} {}",
            step.status.code(),
            String::from_utf8_lossy(&step.stdout),
            String::from_utf8_lossy(&step.stderr)
        ),
    )?;

    // The plugin's file gone: the required line stops the client commands.
    let _moved = PutBack::move_away(login.plugin_file(&line[1]))?;
    for (program, args) in [("sbatch", &["--wrap=true"][..]), ("srun", &["true"][..])] {
        let out = login.run(c, &user, program, args)?;
        let said = String::from_utf8_lossy(&out.stderr);
        ensure(
            !out.status.success() && said.contains(PLUGIN),
            format!(
                "{program} on the login host, the required plugin gone: {} {said}",
                out.status
            ),
        )?;
    }
    // As optional, the same line lets them run.
    let site_file = login.path(&file);
    let text =
        fs::read_to_string(&site_file).map_err(|e| format!("{}: {e}", site_file.display()))?;
    let relaxed: String = text
        .lines()
        .map(|l| {
            if l.split_whitespace().eq(line.iter().map(String::as_str)) {
                format!("optional {}\n", line[1..].join(" "))
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let _optional = PutBack::replace(site_file, &relaxed)?;
    let id = login.sbatch(c, &user, &["--wrap=echo batch ran"])?;
    let info = c.wait_job_done(id, JOB_END)?;
    ensure(
        info.state() == "COMPLETED" && c.job_output(id) == "batch ran\n",
        format!(
            "with the plugin optional and gone, a batch job from the login host ended {}: {:?}",
            info.state(),
            c.job_output(id)
        ),
    )?;
    login.run_ok(c, &user, "srun", &["true"])?;
    eprintln!(
        "    from the login host: share {ids} ran on GPU {}, srun on {}; {} gone: sbatch and srun stop, optional: job {id} ran",
        p.get("GPU").map(String::as_str).unwrap_or("?"),
        testcluster::cluster::NODE,
        line[1],
    );
    Ok(())
}
