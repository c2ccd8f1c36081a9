//! Running the self-test's two clients on one GPU: each a process of its
//! own (a program of gpushare's with [`PROBE_OPTION`]), started as an
//! unprivileged user with a share's environment or none of MPS, bounded
//! in time, its one JSON line read back.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::judge::{allocations, judge, Expected, Seen, Verdict};
use crate::mps::config::GpuMpsConfig;
use crate::mps::daemon;
use crate::shared::bounded;

/// The option that makes gpushare's programs the CUDA client
/// (`node/src/cuda_probe.rs`).
pub const PROBE_OPTION: &str = "--cuda-probe";

/// How long one client may take: a CUDA context on a GPU without
/// persistence mode costs seconds, a hung driver call forever.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

/// The user the clients run as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// `name`'s uid and gid, as the node's name service has them (`getent`:
/// local files, LDAP or SSSD alike); never root.
pub fn user(name: &str) -> Result<ProbeUser, String> {
    let mut cmd = Command::new("getent");
    cmd.args(["passwd", "--", name]);
    let ran = bounded::run(cmd, None, Duration::from_secs(10)).map_err(|e| e.to_string())?;
    let line = ran.stdout.lines().next().unwrap_or_default().to_owned();
    let fields: Vec<&str> = line.split(':').collect();
    let id = |i: usize| fields.get(i).and_then(|f| f.parse::<u32>().ok());
    match (id(2), id(3)) {
        (Some(0), _) | (_, Some(0)) => Err(format!(
            "the self-test's user {name} is root or in root's group: it must be an \
             unprivileged user (SelfTestUser=)"
        )),
        (Some(uid), Some(gid)) => Ok(ProbeUser {
            name: name.to_owned(),
            uid,
            gid,
        }),
        _ => Err(format!(
            "no user {name} on this node (getent passwd); set SelfTestUser= to an \
             unprivileged user"
        )),
    }
}

/// What a share's task gets on GPU `gpu`, with the share's limits.
pub fn share_env(cfg: &GpuMpsConfig, gpu: u32, expected: &Expected) -> Vec<(String, String)> {
    let dir = daemon::gpu_dir(cfg, gpu);
    let mut env = vec![
        ("CUDA_VISIBLE_DEVICES".to_owned(), "0".to_owned()),
        (
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_owned(),
            expected.thread_percentage.to_string(),
        ),
        (
            "CUDA_MPS_PIPE_DIRECTORY".to_owned(),
            dir.join("pipe").to_string_lossy().into_owned(),
        ),
        (
            "CUDA_MPS_LOG_DIRECTORY".to_owned(),
            dir.join("log").to_string_lossy().into_owned(),
        ),
    ];
    if let Some(mib) = expected.memory_mib {
        env.push((
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_owned(),
            format!("0={mib}M"),
        ));
    }
    env.extend(common_env(gpu));
    env
}

/// A process that bypasses MPS: no `CUDA_MPS_*`, GPU `gpu` by its index.
pub fn bypass_env(gpu: u32) -> Vec<(String, String)> {
    let mut env = vec![("CUDA_VISIBLE_DEVICES".to_owned(), gpu.to_string())];
    env.extend(common_env(gpu));
    env
}

fn common_env(gpu: u32) -> Vec<(String, String)> {
    vec![
        ("CUDA_DEVICE_ORDER".to_owned(), "PCI_BUS_ID".to_owned()),
        ("GPUSHARE_GPU".to_owned(), gpu.to_string()),
        ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
    ]
}

/// Runs one client: `exe PROBE_OPTION LIBRARY MODE SIZES...` as `user`
/// with exactly `env`, within `timeout`. Whatever keeps it from answering
/// is its `init_error`.
pub fn run_client(
    exe: &Path,
    library: &Path,
    mode: &str,
    sizes: &[u64],
    env: &[(String, String)],
    user: &ProbeUser,
    timeout: Duration,
) -> Seen {
    let mut cmd = Command::new(exe);
    cmd.arg(PROBE_OPTION)
        .arg(library)
        .arg(mode)
        .args(sizes.iter().map(u64::to_string))
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir("/");
    std::os::unix::process::CommandExt::uid(&mut cmd, user.uid);
    std::os::unix::process::CommandExt::gid(&mut cmd, user.gid);
    let failed = |why: String| Seen {
        init_error: Some(why),
        ..Seen::default()
    };
    match bounded::run(cmd, None, timeout) {
        Ok(ran) => {
            let line = ran.stdout.lines().last().unwrap_or_default().to_owned();
            serde_json::from_str::<Seen>(&line).unwrap_or_else(|_| {
                failed(format!(
                    "the CUDA client ({mode}) ended with {} and no answer: {}",
                    ran.status,
                    ran.stderr.trim()
                ))
            })
        }
        Err(e) => Seen {
            timed_out: matches!(e, bounded::RunError::TimedOut { .. }),
            ..failed(format!("the CUDA client ({mode}): {e}"))
        },
    }
}

/// One GPU's self-test: what was expected, what each client saw, the
/// verdict and what it cost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuCheck {
    pub gpu: u32,
    pub expected: Expected,
    pub bypass: Seen,
    pub share: Seen,
    pub verdict: Verdict,
    /// Milliseconds both clients took.
    pub ms: u64,
}

/// Runs both clients on GPU `gpu`, whose MPS daemon runs with `expected`
/// as its servers' limits; `exe` is the program that answers
/// [`PROBE_OPTION`].
pub fn check_gpu(
    cfg: &GpuMpsConfig,
    gpu: u32,
    exe: &Path,
    user: &ProbeUser,
    expected: Expected,
    timeout: Duration,
) -> GpuCheck {
    let started = Instant::now();
    let library = cfg.cuda_library.as_path();
    let mode = if expected.exclusive {
        "bypass"
    } else {
        "totals"
    };
    let bypass = run_client(exe, library, mode, &[], &bypass_env(gpu), user, timeout);
    // The GPU's own size decides which allocation can tell (judge does the same).
    let gpu_mib = bypass.memory_mib;
    let sizes: Vec<u64> = match expected.memory_mib {
        Some(limit) => {
            let (under, over) = allocations(limit, gpu_mib);
            std::iter::once(under).chain(over).collect()
        }
        None => Vec::new(),
    };
    let env = share_env(cfg, gpu, &expected);
    // A driver that hung once hangs again: one deadline is enough.
    let share = if bypass.timed_out {
        Seen {
            init_error: bypass.init_error.clone(),
            timed_out: true,
            ..Seen::default()
        }
    } else {
        run_client(exe, library, "share", &sizes, &env, user, timeout)
    };
    let verdict = judge(&expected, &bypass, &share);
    GpuCheck {
        gpu,
        expected,
        bypass,
        share,
        verdict,
        ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    }
}
