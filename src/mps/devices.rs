//! Confining a task to one GPU through the cgroup v1 devices controller.
//!
//! Used by the SPANK plugin in `task_post_fork`, after Slurm's task/cgroup
//! wrote its own rules (on 22.05 it allows GPU 0 for every mps job and
//! denies the rest). In cgroup v1 a child cannot allow what its parent
//! denies, and a deny written to a parent propagates to its children: so
//! the chosen GPU is allowed at every level from the job down to the task,
//! and every other GPU is denied at the job level, which covers all of the
//! job's steps and tasks at once.
//!
//! A node whose tasks are not in a v1 devices cgroup (cgroup v2, or
//! `ConstrainDevices=no`) cannot be confined this way; [`task_devices_dir`]
//! says so and the plugin fails the job rather than pretend.

use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Where the v1 devices hierarchy is mounted.
pub const DEVICES_ROOT: &str = "/sys/fs/cgroup/devices";

/// A character device's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CharDevice {
    pub major: u32,
    pub minor: u32,
}

impl CharDevice {
    /// The numbers of the character device at `path`.
    pub fn of(path: &Path) -> io::Result<Self> {
        let m = fs::metadata(path)?;
        if !m.file_type().is_char_device() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a character device", path.display()),
            ));
        }
        let dev = m.rdev();
        // glibc's gnu_dev_major/minor encoding.
        let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
        let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
        Ok(Self {
            major: major as u32,
            minor: minor as u32,
        })
    }

    /// The rule text the devices controller takes.
    pub fn rule(self) -> String {
        format!("c {}:{} rwm", self.major, self.minor)
    }
}

/// Why a task cannot be confined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unconfinable {
    /// The task is in no v1 devices cgroup: cgroup v2 or no device constraint.
    NoDevicesCgroup(String),
    /// The cgroup path has no `job_<id>` level.
    NotAJobCgroup(PathBuf),
}

impl std::fmt::Display for Unconfinable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unconfinable::NoDevicesCgroup(why) => write!(
                f,
                "the task is in no cgroup v1 devices cgroup ({why}); gpushare confines GPU shares through cgroup v1 \
                 (TaskPlugin=task/cgroup, ConstrainDevices=yes, CgroupPlugin=cgroup/v1); cgroup v2 confinement is not supported yet"
            ),
            Unconfinable::NotAJobCgroup(p) => write!(f, "devices cgroup {} has no job_<id> level", p.display()),
        }
    }
}

/// The task's devices cgroup directory, from `/proc/<pid>/cgroup` text.
pub fn task_devices_dir(proc_cgroup: &str, root: &Path) -> Result<PathBuf, Unconfinable> {
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (
            parts.next(),
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
        );
        if controllers.split(',').any(|c| c == "devices") {
            if path == "/" || path.is_empty() {
                return Err(Unconfinable::NoDevicesCgroup(
                    "its devices cgroup is the root: ConstrainDevices=yes is needed".into(),
                ));
            }
            return Ok(root.join(path.trim_start_matches('/')));
        }
    }
    Err(Unconfinable::NoDevicesCgroup(
        "no devices controller in /proc/<pid>/cgroup".into(),
    ))
}

/// The levels from the job's cgroup down to `task_dir`, top first.
pub fn job_levels(task_dir: &Path) -> Result<Vec<PathBuf>, Unconfinable> {
    let mut levels: Vec<PathBuf> = task_dir.ancestors().map(Path::to_path_buf).collect();
    let job = levels
        .iter()
        .position(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("job_"))
        })
        .ok_or_else(|| Unconfinable::NotAJobCgroup(task_dir.to_path_buf()))?;
    levels.truncate(job + 1);
    levels.reverse();
    Ok(levels)
}

/// Allows `allow` at every level from the job to the task, then denies each
/// of `deny` at the job level.
pub fn confine(levels: &[PathBuf], allow: CharDevice, deny: &[CharDevice]) -> io::Result<()> {
    for dir in levels {
        write_rule(&dir.join("devices.allow"), &allow.rule())?;
    }
    if let Some(job) = levels.first() {
        for d in deny.iter().filter(|d| **d != allow) {
            write_rule(&job.join("devices.deny"), &d.rule())?;
        }
    }
    Ok(())
}

fn write_rule(file: &Path, rule: &str) -> io::Result<()> {
    fs::write(file, rule).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("writing \"{rule}\" to {}: {e}", file.display()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_devices_path_is_found_and_v2_is_refused() {
        let v1 = "12:pids:/slurm/uid_0/job_5/step_0\n4:devices:/slurm/uid_0/job_5/step_0/task_1\n0::/user.slice\n";
        let dir = task_devices_dir(v1, Path::new(DEVICES_ROOT)).unwrap_or_default();
        assert_eq!(
            dir,
            PathBuf::from("/sys/fs/cgroup/devices/slurm/uid_0/job_5/step_0/task_1")
        );
        let levels = job_levels(&dir).unwrap_or_default();
        assert_eq!(
            levels,
            vec![
                PathBuf::from("/sys/fs/cgroup/devices/slurm/uid_0/job_5"),
                PathBuf::from("/sys/fs/cgroup/devices/slurm/uid_0/job_5/step_0"),
                PathBuf::from("/sys/fs/cgroup/devices/slurm/uid_0/job_5/step_0/task_1"),
            ]
        );
        assert!(matches!(
            task_devices_dir(
                "0::/system.slice/slurmstepd.scope/job_5\n",
                Path::new(DEVICES_ROOT)
            ),
            Err(Unconfinable::NoDevicesCgroup(_))
        ));
        assert!(matches!(
            task_devices_dir("4:devices:/\n", Path::new(DEVICES_ROOT)),
            Err(Unconfinable::NoDevicesCgroup(_))
        ));
        assert!(job_levels(Path::new("/sys/fs/cgroup/devices/user.slice")).is_err());
    }

    #[test]
    fn rules_go_top_down_and_denies_to_the_job_level() {
        let temp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = temp.path();
        let task = root.join("slurm/uid_0/job_9/step_batch/task_0");
        fs::create_dir_all(&task).unwrap_or_else(|e| panic!("{e}"));
        let levels = job_levels(&task).unwrap_or_default();
        let gpu = |minor| CharDevice { major: 195, minor };
        confine(&levels, gpu(2), &[gpu(0), gpu(1), gpu(2), gpu(3)])
            .unwrap_or_else(|e| panic!("{e}"));
        for l in &levels {
            assert_eq!(
                fs::read_to_string(l.join("devices.allow")).unwrap_or_default(),
                "c 195:2 rwm"
            );
        }
        // A plain file keeps only the last write; the kernel applies each.
        assert_eq!(
            fs::read_to_string(levels[0].join("devices.deny")).unwrap_or_default(),
            "c 195:3 rwm"
        );
        assert!(!levels[1].join("devices.deny").exists());
    }

    #[test]
    fn char_device_numbers() {
        assert_eq!(
            CharDevice::of(Path::new("/dev/null")).ok(),
            Some(CharDevice { major: 1, minor: 3 })
        );
        assert!(CharDevice::of(Path::new("/etc/hostname")).is_err());
    }
}
