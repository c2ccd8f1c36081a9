//! Which job a process runs in, from its `/proc/PID/cgroup` text alone,
//! anchored where Slurm makes job cgroups.
//!
//! A `job_<id>` component found anywhere in a path proves nothing: under
//! systemd a user has a delegated subtree
//! (`/user.slice/user-U.slice/user@U.service/...`) in which they may make
//! `system.slice/slurmstepd.scope/job_42/step_0` and move their own
//! processes there; inside a job, a user-owned step directory (cgroup v1)
//! lets them make `job_42` below their own job's. So a path counts only
//! from where Slurm itself puts job cgroups:
//!
//! - cgroup v1 (every release; `xcgroup_create_hierarchy`,
//!   `src/plugins/cgroup/v1/xcgroup.c`):
//!   `<CgroupPrepend>/uid_<U>/job_<J>/step_<S>/...` in the hierarchies of
//!   the controllers Slurm attaches (freezer, devices, memory, cpuset,
//!   cpu, cpuacct), never a named one such as `name=systemd`.
//!   `CgroupPrepend` defaults to `/slurm`, or `/slurm_<node>` where Slurm
//!   was built for several slurmd per host (Debian's packages are), and
//!   cgroup.conf may set it: it is read, as the v2 scope is, from the
//!   cgroups of root-owned `slurmstepd` processes ([`stepd_anchors`]),
//!   which Slurm puts in their job's cgroups.
//! - cgroup v2 (`src/plugins/cgroup/v2/cgroup_v2.c`):
//!   `<scope>/<JOBDIR>/step_<S>/...`, where `<scope>` is Slurm's
//!   `slurmstepd.scope` (`<node>_slurmstepd.scope` with MULTIPLE_SLURMD)
//!   under `system.slice` (22.05), under `CgroupSlice` and below
//!   slurmd's own cgroup root in a container (later releases). The scope
//!   is never built from a pattern: it is read from the cgroups of
//!   root-owned `slurmstepd` processes ([`stepd_anchors`]), which no user
//!   can create or move. `JOBDIR` is `job_<J>` up to 25.11 and with
//!   26.05.2's `CgroupJobIdPaths=yes`; otherwise in 26.05 the job's SLUID
//!   (`print_sluid`), which the ledger's record of a share (the prolog's
//!   `SLURM_JOB_SLUID`) ties to its job, and the title of the root-owned
//!   `slurmstepd` in that directory ties to any job ([`stepd_job_dirs`]).
//!
//! Lines that disagree (v1 and v2, or two v1 controllers naming other
//! jobs) name no job: a user may move their own process between the
//! steps of their own jobs under v1, never into another user's.

/// The controllers Slurm's cgroup/v1 plugin attaches job cgroups in.
use std::collections::BTreeMap;

const SLURM_V1_CONTROLLERS: [&str; 6] =
    ["freezer", "devices", "memory", "cpuset", "cpu", "cpuacct"];

/// Where Slurm makes job cgroups on this node ([`stepd_anchors`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Anchors {
    /// cgroup v1: the paths above `uid_<U>/job_<J>` (`CgroupPrepend`).
    pub v1_prepends: Vec<String>,
    /// cgroup v2: the paths of Slurm's `slurmstepd.scope`.
    pub v2_scopes: Vec<String>,
    /// cgroup v2 job directories named otherwise than `job_<id>` (26.05's
    /// SLUID) with the job a root-owned `slurmstepd` in them serves
    /// ([`stepd_job_dirs`]).
    pub named_jobs: BTreeMap<String, u32>,
}

/// How Slurm names a job's cgroup directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobDir {
    /// `job_<id>`.
    Id(u32),
    /// Any other name: 26.05's SLUID, matched against the share's record.
    Named(String),
}

/// Where a process is, as its cgroup text tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InCgroup {
    /// In no job cgroup Slurm made.
    Outside,
    /// In one job's cgroup; `uid`: the `uid_<U>` level above it (v1).
    Job { uid: Option<u32>, dir: JobDir },
    /// Lines that name different jobs.
    Conflicting,
}

/// The cgroup v2 path of a `/proc/PID/cgroup` text (its `0::` line).
pub fn v2_path(cgroup: &str) -> Option<&str> {
    cgroup.lines().find_map(|l| l.strip_prefix("0::"))
}

/// The paths of a `/proc/PID/cgroup` text in the hierarchies of the
/// controllers Slurm's cgroup/v1 plugin uses.
fn v1_paths(cgroup: &str) -> impl Iterator<Item = &str> {
    cgroup.lines().filter_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        controllers
            .split(',')
            .any(|c| SLURM_V1_CONTROLLERS.contains(&c))
            .then_some(path)
    })
}

/// Where Slurm makes job cgroups, from the cgroup texts of root-owned
/// `slurmstepd` processes, which Slurm puts in their job's cgroups: under
/// cgroup v1 the path above their `uid_<U>/job_<J>`; under cgroup v2
/// their path up to and including its `slurmstepd.scope` component (they
/// are in `<scope>/<JOBDIR>/step_<S>/slurm`, or `<scope>/system` while
/// they start).
pub fn stepd_anchors<'a>(stepd_cgroups: impl IntoIterator<Item = &'a str>) -> Anchors {
    fn add(list: &mut Vec<String>, path: String) {
        if !list.contains(&path) {
            list.push(path);
        }
    }
    let mut anchors = Anchors::default();
    for text in stepd_cgroups {
        for path in v1_paths(text) {
            let parts: Vec<&str> = path.split('/').collect();
            let at = parts.windows(2).position(|w| {
                w[0].strip_prefix("uid_").and_then(digits).is_some() && job_id(w[1]).is_some()
            });
            if let Some(i) = at {
                add(&mut anchors.v1_prepends, parts[..i].join("/"));
            }
        }
        if let Some(path) = v2_path(text) {
            let mut prefix = String::new();
            for part in path.split('/').filter(|p| !p.is_empty()) {
                prefix.push('/');
                prefix.push_str(part);
                if part == "slurmstepd.scope" || part.ends_with("_slurmstepd.scope") {
                    add(&mut anchors.v2_scopes, prefix);
                    break;
                }
            }
        }
    }
    anchors
}

/// The job of a `slurmstepd`'s title (`/proc/PID/cmdline`, which it sets:
/// `slurmstepd: [123.batch]`, `[123.0 stepmgr]`).
fn title_job(title: &str) -> Option<u32> {
    let (_, after) = title.split_once('[')?;
    let end = after
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(after.len());
    digits(&after[..end])
}

/// Each cgroup v2 job directory not named `job_<id>` (26.05's SLUID) in
/// which a root-owned `slurmstepd` runs, with the job its title names:
/// `stepds` gives each one's cgroup text and title. Both are root's (the
/// directory made by Slurm, the title set by slurmstepd), so a user can
/// name neither; a directory two titles disagree on maps to no job.
pub fn stepd_job_dirs<'a>(
    stepds: impl IntoIterator<Item = (&'a str, &'a str)>,
    anchors: &Anchors,
) -> BTreeMap<String, u32> {
    let mut out: BTreeMap<String, Option<u32>> = BTreeMap::new();
    for (cgroup, title) in stepds {
        let Some(path) = v2_path(cgroup) else {
            continue;
        };
        for scope in &anchors.v2_scopes {
            if let Some(JobDir::Named(dir)) = v2_job(path, scope) {
                let job = title_job(title);
                let entry = out.entry(dir).or_insert(job);
                if *entry != job {
                    *entry = None;
                }
            }
        }
    }
    out.into_iter()
        .filter_map(|(dir, job)| Some((dir, job?)))
        .collect()
}

/// `job_<J>` → J.
fn job_id(part: &str) -> Option<u32> {
    digits(part.strip_prefix("job_")?)
}

fn digits(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// `<rest>` of `<prefix>/<rest>`, on a component boundary (an empty
/// `prefix`: the hierarchy's root).
fn below<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    path.strip_prefix(prefix)?.strip_prefix('/')
}

/// A step level (`step_0`, `step_batch`, `step_extern`, `step_1+0`).
fn is_step(part: Option<&str>) -> bool {
    part.and_then(|p| p.strip_prefix("step_"))
        .is_some_and(|s| !s.is_empty())
}

/// The job a cgroup v1 path puts a process in: `<prepend>/uid_U/job_J/step_S...`.
fn v1_job(path: &str, prepend: &str) -> Option<(u32, u32)> {
    let mut parts = below(path, prepend)?.split('/');
    let uid = digits(parts.next()?.strip_prefix("uid_")?)?;
    let job = job_id(parts.next()?)?;
    is_step(parts.next()).then_some((uid, job))
}

/// The job directory a cgroup v2 path puts a process in: `<scope>/JOBDIR/step_S...`.
fn v2_job(path: &str, scope: &str) -> Option<JobDir> {
    let mut parts = below(path, scope)?.split('/');
    let dir = parts.next().filter(|d| !d.is_empty())?;
    if !is_step(parts.next()) {
        return None;
    }
    Some(match job_id(dir) {
        Some(id) => JobDir::Id(id),
        None => JobDir::Named(dir.to_owned()),
    })
}

/// Where `cgroup` (a `/proc/PID/cgroup` text) puts its process.
pub fn placement(cgroup: &str, anchors: &Anchors) -> InCgroup {
    let mut found: Vec<(Option<u32>, JobDir)> = Vec::new();
    if let Some(path) = v2_path(cgroup) {
        for scope in &anchors.v2_scopes {
            found.extend(v2_job(path, scope).map(|dir| (None, dir)));
        }
    }
    for path in v1_paths(cgroup) {
        for prepend in &anchors.v1_prepends {
            if let Some((uid, job)) = v1_job(path, prepend) {
                found.push((Some(uid), JobDir::Id(job)));
            }
        }
    }
    let Some((_, dir)) = found.first() else {
        return InCgroup::Outside;
    };
    if found.iter().any(|(_, d)| d != dir) {
        return InCgroup::Conflicting;
    }
    let uids: Vec<u32> = found.iter().filter_map(|(u, _)| *u).collect();
    match uids.first() {
        Some(u) if uids.iter().any(|x| x != u) => InCgroup::Conflicting,
        uid => InCgroup::Job {
            uid: uid.copied(),
            dir: dir.clone(),
        },
    }
}
