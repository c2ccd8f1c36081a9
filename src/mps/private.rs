//! `--gpu-mps=private`: MPS among the ranks of a job that holds its GPUs
//! whole, through an MPS control daemon of the job's own, run as the job's
//! user.
//!
//! The user asks with the SPANK option (`sbatch --gpu-mps=private`,
//! optionally `--gpu-mps-threads=PCT` for each rank's share of the SMs);
//! the site allows it with `PrivateMPS=allow` in gpu_mps.conf. Slurm hands
//! the option to the Prolog as `SPANK__SLURM_SPANK_OPTION_gpu_mps_gpu_mps`
//! (spank.c `_opt_env_name`: the plugin's name and the option's, each
//! character that is not alphanumeric made `_`).
//!
//! The prolog decides: a job that holds no GPU here, holds a share, or
//! holds a GPU a share is recorded on, or a node that does not allow it,
//! is refused with the reason (the refusal note every step fails with);
//! otherwise it writes the job's record here ([`PrivateRecord`], beside
//! the ledger), which the SPANK plugin reads for each step. The epilog
//! removes it with what the daemon left.

use std::fmt;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::config::GpuMpsConfig;
use super::daemon::{self, public_dir, CONTROL_TIMEOUT};
use crate::shared::bounded;

/// The plugin's name and its options, as Slurm names them in the job's
/// SPANK environment.
pub const PLUGIN: &str = "gpu_mps";
/// `--gpu-mps=private`.
pub const OPTION_MODE: &str = "gpu-mps";
/// `--gpu-mps-threads=PCT`.
pub const OPTION_THREADS: &str = "gpu-mps-threads";
/// The only value `--gpu-mps` takes.
pub const PRIVATE: &str = "private";

/// The variable Slurm keeps option `option` of this plugin in: what
/// `spank_option_getopt` reads (`_SLURM_SPANK_OPTION_<plugin>_<option>`,
/// each character that is not alphanumeric made `_`). slurmd shows it to
/// the Prolog and Epilog with `SPANK_` before it.
pub fn option_variable(option: &str) -> String {
    let canon = |s: &str| -> String {
        s.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect()
    };
    format!("_SLURM_SPANK_OPTION_{}_{}", canon(PLUGIN), canon(option))
}

/// What a job asked for with the options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrivateRequest {
    /// `--gpu-mps-threads`: each client's share of its GPU's SMs, in
    /// percent (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` in each task).
    pub threads: Option<u32>,
}

/// Checks `--gpu-mps`'s value (`mode`) and `--gpu-mps-threads`'s
/// (`threads`): `Ok(None)` where neither was given.
pub fn parse_request(
    mode: Option<&str>,
    threads: Option<&str>,
) -> Result<Option<PrivateRequest>, String> {
    let threads = threads
        .map(|t| {
            t.trim()
                .parse::<u32>()
                .ok()
                .filter(|p| (1..=100).contains(p))
                .ok_or_else(|| {
                    format!(
                        "--{OPTION_THREADS} takes a percentage of the GPU's SMs from 1 to 100, \
                         got \"{t}\""
                    )
                })
        })
        .transpose()?;
    match mode.map(str::trim) {
        Some(PRIVATE) => Ok(Some(PrivateRequest { threads })),
        Some(other) => Err(format!(
            "--{OPTION_MODE} takes one value, {PRIVATE} (an MPS daemon of the job's own on the \
             GPUs it holds whole), got \"{other}\""
        )),
        None if threads.is_some() => Err(format!(
            "--{OPTION_THREADS} applies to --{OPTION_MODE}={PRIVATE} only: add that option, or \
             drop --{OPTION_THREADS}"
        )),
        None => Ok(None),
    }
}

/// The job's request as slurmd shows it to the Prolog and Epilog
/// (`get`: the environment).
pub fn request_in_prolog(
    get: impl Fn(&str) -> Option<String>,
) -> Result<Option<PrivateRequest>, String> {
    let mode = get(&format!("SPANK_{}", option_variable(OPTION_MODE)));
    let threads = get(&format!("SPANK_{}", option_variable(OPTION_THREADS)));
    parse_request(mode.as_deref(), threads.as_deref())
}

/// Why the prolog refuses a private daemon, or `None` where it may run:
/// `share` (the job holds an MPS share here), `gpus` (the GPUs Slurm gave
/// it whole here), `allowed` (`PrivateMPS=allow`), `shared_gpus` (those
/// of its GPUs a share is recorded on).
pub fn refusal(
    allowed: bool,
    share: bool,
    gpus: &[u32],
    shared_gpus: &[u32],
    node: &str,
) -> Option<String> {
    if share {
        return Some(format!(
            "--{OPTION_MODE}={PRIVATE} is for a job that holds GPUs whole, and this job holds an \
             MPS share: a share's clients already run under its GPU's MPS daemon. Drop \
             --{OPTION_MODE}={PRIVATE}, or ask for whole GPUs (--gres=gpu:N)"
        ));
    }
    if gpus.is_empty() {
        return Some(format!(
            "--{OPTION_MODE}={PRIVATE} gives the job's own MPS daemon to the GPUs it holds \
             whole, and this job holds no GPU on node {node}: ask for GPUs (--gres=gpu:N or \
             --gpus-per-node=N), or drop --{OPTION_MODE}={PRIVATE}"
        ));
    }
    if !allowed {
        return Some(format!(
            "node {node} does not allow --{OPTION_MODE}={PRIVATE} (gpu_mps.conf has no \
             PrivateMPS=allow): drop the option, or ask the site's admins to allow it"
        ));
    }
    if !shared_gpus.is_empty() {
        let listed: Vec<String> = shared_gpus.iter().map(u32::to_string).collect();
        return Some(format!(
            "GPU {} of this job on node {node} also carries an MPS share of another job, so \
             no daemon of the job's own can run there (Slurm gave a GPU whole that a share \
             holds, which Slurm 22.05 does where it books every share on GPU 0): a batch job \
             is requeued, kept off the node until that GPU carries no share",
            listed.join(", ")
        ));
    }
    None
}

/// What the prolog records for a job it lets run a daemon of its own:
/// its user and GPUs here, and each rank's thread percentage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrivateRecord {
    pub uid: u32,
    pub gpus: Vec<u32>,
    pub threads: Option<u32>,
}

impl fmt::Display for PrivateRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gpus: Vec<String> = self.gpus.iter().map(u32::to_string).collect();
        let threads = self
            .threads
            .map_or_else(|| "-".to_owned(), |t| t.to_string());
        writeln!(
            f,
            "uid={} gpus={} threads={threads}",
            self.uid,
            gpus.join(",")
        )
    }
}

impl PrivateRecord {
    /// Reads a record as [`fmt::Display`] writes it; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let mut uid = None;
        let mut gpus = None;
        let mut threads = None;
        for word in text.split_whitespace() {
            let (key, value) = word.split_once('=')?;
            match key {
                "uid" => uid = Some(value.parse().ok()?),
                "gpus" => {
                    gpus = Some(
                        value
                            .split(',')
                            .map(|g| g.parse().ok())
                            .collect::<Option<Vec<u32>>>()?,
                    )
                }
                "threads" => {
                    threads = Some(match value {
                        "-" => None,
                        t => Some(t.parse().ok().filter(|p| (1..=100).contains(p))?),
                    })
                }
                _ => return None,
            }
        }
        Some(Self {
            uid: uid?,
            gpus: gpus?,
            threads: threads?,
        })
    }
}

/// The record's name beside the ledger (root only).
pub fn record_name(job: u32) -> String {
    format!("private.{job}")
}

/// The job's record, where the prolog wrote one (`ledger_dir`: the
/// ledger's directory, `StateDir`).
pub fn read_record(ledger_dir: &Path, job: u32) -> Option<PrivateRecord> {
    let text = std::fs::read_to_string(ledger_dir.join(record_name(job))).ok()?;
    PrivateRecord::parse(&text)
}

/// The directory of a job's own daemons on this node:
/// `<StateDir>-mps/job<N>`, the user's alone (0700); each step's daemon
/// has its pipe and log directories in it ([`step_dir`]).
pub fn job_dir(cfg: &GpuMpsConfig, job: u32) -> PathBuf {
    public_dir(cfg).join(format!("job{job}"))
}

/// A step's name in paths: `batch`, `interactive`, or its number.
pub fn step_name(step: u32) -> String {
    match step {
        // SLURM_BATCH_SCRIPT and SLURM_INTERACTIVE_STEP (slurm.h).
        0xffff_fffb => "batch".to_owned(),
        0xffff_fffa => "interactive".to_owned(),
        n => format!("step{n}"),
    }
}

/// A step's own MPS daemon: its directory (`pipe` and `log` in it) and
/// the user it runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepDaemon {
    pub dir: PathBuf,
    pub uid: u32,
    pub gid: u32,
}

impl StepDaemon {
    /// Step `step`'s daemon of `job` (`uid`, `gid`: the job's user).
    pub fn of(cfg: &GpuMpsConfig, job: u32, step: u32, uid: u32, gid: u32) -> Self {
        Self {
            dir: job_dir(cfg, job).join(step_name(step)),
            uid,
            gid,
        }
    }

    /// Makes the job's directory ([`job_dir`], this daemon's parent) for
    /// its user, or checks the one there: a file system of its own
    /// ([`JOB_FS_OPTIONS`]) mounted on a directory of root's, mode 0700
    /// and the user's at its top, so that nothing the job writes there
    /// lands on the ledger's file system (`/run`) or outlives the
    /// epilog's unmount. Only root can make one in `<StateDir>-mps`. Run
    /// as root.
    pub fn ensure_job_dir(&self) -> Result<(), String> {
        let dir = self.dir.parent().unwrap_or(&self.dir);
        ensure_job_fs(dir, self.uid, self.gid)
    }

    pub fn pipe(&self) -> PathBuf {
        self.dir.join("pipe")
    }

    pub fn log(&self) -> PathBuf {
        self.dir.join("log")
    }

    /// The control program with the daemon's environment and nothing
    /// else: its pipe and log directories. No `CUDA_VISIBLE_DEVICES`: the
    /// daemon runs in the cgroups of the step's first task, so it sees
    /// the GPUs the step's tasks see, numbered as Slurm numbered them for
    /// the tasks.
    pub fn command(&self, program: &Path) -> Command {
        daemon::control_command(program, &self.dir)
    }

    /// What each task of the step gets: the daemon's pipe and log
    /// directories, and its thread percentage where the job asked.
    pub fn task_env(&self, threads: Option<u32>) -> Vec<(String, String)> {
        let mut env = vec![
            (
                "CUDA_MPS_PIPE_DIRECTORY".to_owned(),
                self.pipe().display().to_string(),
            ),
            (
                "CUDA_MPS_LOG_DIRECTORY".to_owned(),
                self.log().display().to_string(),
            ),
        ];
        if let Some(pct) = threads {
            env.push((
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_owned(),
                pct.to_string(),
            ));
        }
        env
    }

    /// Waits, bounded, for a daemon just started to open its control pipe.
    pub fn wait_for_start(&self) -> Result<(), String> {
        daemon::wait_for_pipe(&self.pipe())
    }

    /// Whether the daemon's control pipe is there, as this process sees
    /// the file system (a task: in the job's namespace).
    pub fn reachable(&self) -> bool {
        self.pipe().join("control").exists()
    }

    /// Stops the daemon: `quit`, sent as its user (bounded) with `program`
    /// (`None`: no `quit`), then what is left of its processes after
    /// [`daemon::QUIT_WAIT`] is killed; its directory is removed. Returns what
    /// went wrong, for the log.
    pub fn stop(&self, program: Option<&Path>) -> Vec<String> {
        let mut problems = Vec::new();
        if let (Some(program), true) = (program, self.reachable()) {
            let mut cmd = self.command(program);
            std::os::unix::process::CommandExt::uid(&mut cmd, self.uid);
            std::os::unix::process::CommandExt::gid(&mut cmd, self.gid);
            match bounded::run(cmd, Some(b"quit\n"), CONTROL_TIMEOUT) {
                Ok(r) if r.status.success() => {}
                Ok(r) => problems.push(format!(
                    "`quit` exited with {} {}",
                    r.status,
                    r.stderr.trim()
                )),
                Err(e) => problems.push(format!("`quit`: {e}")),
            }
        }
        let left = daemon::left_after_quit(|| daemon::processes_of_under(self.uid, &self.dir));
        let killed = daemon::kill_all_of(self.uid, &left);
        if !killed.is_empty() {
            problems.push(format!("killed what was left of it: pids {killed:?}"));
        }
        if let Err(e) = remove_tree(&self.dir) {
            problems.push(format!("{}: {e}", self.dir.display()));
        }
        problems
    }
}

/// Removes `dir` and what is in it, following no symbolic link (a
/// user's directory, removed as root); one already gone is no error.
fn remove_tree(dir: &Path) -> std::io::Result<()> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// The file system of a job's own directory: a tmpfs of at most 32 MiB
/// and 4,096 files (the daemons' pipes and logs need a few KiB), no
/// devices, no set-uid, nothing executed from it.
pub const JOB_FS_OPTIONS: &str = "size=32m,nr_inodes=4096";

/// Makes `dir` (root's, 0700) and mounts the job's file system on it for
/// user `uid` (group `gid`), or checks the one there: a tmpfs mounted on
/// `dir` whose top is that user's and nobody else's (see
/// [`StepDaemon::ensure_job_dir`]).
fn ensure_job_fs(dir: &Path, uid: u32, gid: u32) -> Result<(), String> {
    let said = |e: std::io::Error| format!("{}: {e}", dir.display());
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(said(e)),
        _ => {}
    }
    if !is_mount_point(dir).map_err(said)? {
        let meta = fs::symlink_metadata(dir).map_err(said)?;
        if !meta.is_dir() || meta.uid() != 0 {
            return Err(format!("{} is not a directory of root's", dir.display()));
        }
        mount_job_fs(dir, uid, gid).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let meta = fs::symlink_metadata(dir).map_err(said)?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 || !is_tmpfs(dir) {
        return Err(format!(
            "{} is not a file system of its own whose top only uid {uid} may enter",
            dir.display()
        ));
    }
    Ok(())
}

/// Whether `dir` is where a file system is mounted: it lies on another
/// device than its parent (a user cannot mount, so only gpushare's own).
fn is_mount_point(dir: &Path) -> std::io::Result<bool> {
    let parent = dir.parent().unwrap_or(dir);
    Ok(fs::symlink_metadata(dir)?.dev() != fs::metadata(parent)?.dev())
}

/// Whether a tmpfs is mounted on `dir` in this process's mount namespace,
/// the last mount there as `/proc/self/mountinfo` lists it.
fn is_tmpfs(dir: &Path) -> bool {
    let (Ok(info), Ok(dir)) = (
        fs::read_to_string("/proc/self/mountinfo"),
        fs::canonicalize(dir),
    ) else {
        return false;
    };
    mounted_kind(&info, &dir).as_deref() == Some("tmpfs")
}

/// The file system type of the last mount on `dir` in `mountinfo`'s text
/// (mount points with `\040`-style escapes decoded).
pub fn mounted_kind(mountinfo: &str, dir: &Path) -> Option<String> {
    let want = dir.to_str()?;
    mountinfo.lines().rev().find_map(|line| {
        let (mount, rest) = line.split_once(" - ")?;
        let point = mount.split(' ').nth(4)?;
        (unescape(point) == want).then(|| rest.split(' ').next().map(str::to_owned))?
    })
}

/// Where the system's `program` is (util-linux's `mount`, `umount`), not
/// trusting `PATH`.
fn system_program(program: &str) -> PathBuf {
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        .iter()
        .map(|dir| Path::new(dir).join(program))
        .find(|p| p.exists())
        .unwrap_or_else(|| Path::new("/usr/bin").join(program))
}

/// Runs `mount`/`umount` with `args`, bounded.
fn mount_program(program: &str, args: &[&str]) -> Result<(), String> {
    bounded::program_at(&system_program(program), args, CONTROL_TIMEOUT).map(drop)
}

/// Mounts the job's tmpfs ([`JOB_FS_OPTIONS`]) on `dir`, its top the
/// user's, mode 0700.
fn mount_job_fs(dir: &Path, uid: u32, gid: u32) -> Result<(), String> {
    let options = format!("nosuid,nodev,noexec,{JOB_FS_OPTIONS},mode=0700,uid={uid},gid={gid}");
    let target = dir.to_str().ok_or("a path that is not UTF-8")?;
    mount_program(
        "mount",
        &["-t", "tmpfs", "-o", &options, "gpushare-job", target],
    )
}

/// Detaches the job's file system from `dir` where one is mounted there
/// (in this process's mount namespace): its files go with it, however
/// deep.
fn unmount_job_fs(dir: &Path) -> Result<(), String> {
    if !is_mount_point(dir).unwrap_or(false) {
        return Ok(());
    }
    let target = dir.to_str().ok_or("a path that is not UTF-8")?;
    mount_program("umount", &["--lazy", target])
}

/// What the epilog does for a job that had daemons of its own: kills
/// whatever of them is left (processes of `uid` whose pipe directory lies
/// in the job's directory) and removes the directory. Returns what it
/// did or could not do, for the log.
pub fn clean_up(cfg: &GpuMpsConfig, job: u32, uid: u32) -> Vec<String> {
    let dir = job_dir(cfg, job);
    let mut notes = Vec::new();
    let left = daemon::processes_of_under(uid, &dir);
    let killed = daemon::kill_all_of(uid, &left);
    if !killed.is_empty() {
        notes.push(format!(
            "job {job}'s own MPS daemon outlived its steps: killed pids {killed:?}"
        ));
    }
    if let Err(e) = unmount_job_fs(&dir) {
        notes.push(format!("{}: unmount: {e}", dir.display()));
    }
    if let Err(e) = remove_tree(&dir) {
        notes.push(format!("{}: {e}", dir.display()));
    }
    notes
}

/// The `cgroup.procs` files of the cgroups a process is in, from its
/// `/proc/<pid>/cgroup` text and this process's `/proc/self/mountinfo`:
/// writing `0` into each moves the writer into the same cgroups. The
/// devices hierarchy (cgroup v1) or the unified one (v2) must be found:
/// the daemon must be confined to the GPUs the task is. Where a hierarchy
/// is mounted more than once, the last mount whose directory for the
/// cgroup exists (`exists`) is taken: a later mount over an earlier one's
/// place hides it.
pub fn cgroup_procs(
    proc_cgroup: &str,
    mountinfo: &str,
    exists: impl Fn(&Path) -> bool,
) -> Result<Vec<PathBuf>, String> {
    let mounts: Vec<CgroupMount> = mountinfo.lines().filter_map(CgroupMount::parse).collect();
    let mut files = Vec::new();
    let mut confined = false;
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let wanted: Vec<&str> = controllers.split(',').filter(|c| !c.is_empty()).collect();
        let v2 = wanted.is_empty();
        let dirs: Vec<PathBuf> = mounts
            .iter()
            .rev()
            .filter(|m| {
                if v2 {
                    m.v2
                } else {
                    !m.v2 && wanted.iter().all(|c| m.options.iter().any(|o| o == c))
                }
            })
            .filter_map(|m| m.dir_of(path))
            .collect();
        let found = dirs.iter().find(|d| exists(d)).or(dirs.first()).cloned();
        let Some(dir) = found else {
            if v2 || wanted.contains(&"devices") {
                return Err(format!(
                    "the cgroup {line:?} is not reachable through any mount of this process"
                ));
            }
            continue;
        };
        confined |= v2 || wanted.contains(&"devices");
        files.push(dir.join("cgroup.procs"));
    }
    if !confined {
        return Err("the task is in no devices cgroup (cgroup v1) nor a unified one (v2)".into());
    }
    Ok(files)
}

/// A cgroup file system as `/proc/self/mountinfo` shows it.
struct CgroupMount {
    /// The cgroup its root is (field 4).
    root: String,
    point: PathBuf,
    v2: bool,
    /// Its super options: the controllers of a v1 hierarchy.
    options: Vec<String>,
}

impl CgroupMount {
    fn parse(line: &str) -> Option<Self> {
        let fields: Vec<&str> = line.split(' ').collect();
        let dash = fields.iter().position(|f| *f == "-")?;
        let fstype = *fields.get(dash + 1)?;
        let v2 = match fstype {
            "cgroup2" => true,
            "cgroup" => false,
            _ => return None,
        };
        Some(Self {
            root: unescape(fields.get(3)?),
            point: PathBuf::from(unescape(fields.get(4)?)),
            v2,
            options: fields
                .get(dash + 3)?
                .split(',')
                .map(str::to_owned)
                .collect(),
        })
    }

    /// The directory of cgroup `path` (as `/proc/<pid>/cgroup` names it)
    /// under this mount, where the mount shows it.
    fn dir_of(&self, path: &str) -> Option<PathBuf> {
        let rest = if self.root == "/" {
            path
        } else {
            let rest = path.strip_prefix(self.root.as_str())?;
            if !(rest.is_empty() || rest.starts_with('/')) {
                return None;
            }
            rest
        };
        let rest = rest.trim_start_matches('/');
        if rest.split('/').any(|part| part == "..") {
            return None;
        }
        Some(if rest.is_empty() {
            self.point.clone()
        } else {
            self.point.join(rest)
        })
    }
}

/// mountinfo's octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            let text = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(text, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests;
