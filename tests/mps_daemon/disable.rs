//! `gpu-mps disable` and `enable`: the node taken off sharing, leaving
//! nothing of gpushare behind once its last share ends, and given back;
//! the node half turned off as docs/turning-off.md says.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use testcluster::cluster::{slurm_release, wait_for, NODE};
use testcluster::time::{DAEMON_START, JOB_END, JOB_LONG, NODE_STATE, SHORT};
use testcluster::{ensure, Cluster, Suite, TestResult};

use super::{bin_dir, cancel_and_wait_stopped, daemons, gpu_mps, ledger, shares, standin, SCRIPT};

/// This file's tests, in order, after the suite's others.
pub fn tests(suite: Suite) -> Suite {
    suite
        .test(
            "a_disabled_node_refuses_shares_then_leaves_nothing_of_gpushare_behind",
            leaves_nothing_behind,
        )
        .test(
            "a_node_turned_off_as_the_book_says_runs_many_processes_on_each_whole_gpu",
            turned_off,
        )
}

/// GPU `gpu`'s compute mode as the stand-in `nvidia-smi` keeps it.
fn mode(c: &Cluster, gpu: u32) -> String {
    fs::read_to_string(bin_dir(c).join(format!("compute-mode-{gpu}")))
        .unwrap_or_else(|_| "Default".into())
        .trim()
        .to_owned()
}

fn said(out: &std::process::Output) -> String {
    format!(
        "exit {:?}: {}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `gpu-mps` given another spelling of the node's `gpu_mps.conf` than
/// slurmd's: through a link to its directory (a site's symlinked
/// `/etc/slurm`).
/// Waits until the node's `gpu_mps.conf` has been still for
/// `IN_PLACE_QUIET`: a spelling of its path no node program used before
/// has no configuration recorded, so one changed just now (the test
/// before put it back) is refused as being written (`gpu-mps` exit 2).
fn conf_still(c: &Cluster) -> TestResult {
    let conf = c.slurm_conf().with_file_name("gpu_mps.conf");
    let quiet = gpushare::mps::in_force::IN_PLACE_QUIET + std::time::Duration::from_millis(200);
    wait_for("gpu_mps.conf to be still", SHORT, || {
        let changed = fs::metadata(&conf).and_then(|m| m.modified()).ok()?;
        (changed.elapsed().ok()? >= quiet).then_some(())
    })
}

fn gpu_mps_linked(c: &Cluster, args: &[&str]) -> Result<std::process::Output, String> {
    conf_still(c)?;
    let dir = c.slurm_conf().with_file_name("");
    let link = c.dir.join("linked-etc-slurm");
    if fs::read_link(&link).ok().as_deref() != Some(dir.as_path()) {
        let _ = fs::remove_file(&link);
        std::os::unix::fs::symlink(&dir, &link).map_err(|e| format!("{}: {e}", link.display()))?;
    }
    let conf = link.join("gpu_mps.conf");
    let bin = testcluster::cluster::build_dir()?.join("gpu-mps");
    c.run(
        &bin.to_string_lossy(),
        &[args, &["--conf", &conf.to_string_lossy()]].concat(),
    )
}

/// `gpu-mps` given the node's `gpu_mps.conf` with `..` in its path.
fn gpu_mps_dotted(c: &Cluster, args: &[&str]) -> Result<std::process::Output, String> {
    conf_still(c)?;
    let conf = c.slurm_conf().with_file_name("gpu_mps.conf");
    let (Some(dir), Some(name)) = (conf.parent(), conf.parent().and_then(|p| p.file_name())) else {
        return Err(format!("{}: no directory", conf.display()));
    };
    let dotted = dir.join("..").join(name).join("gpu_mps.conf");
    let bin = testcluster::cluster::build_dir()?.join("gpu-mps");
    c.run(
        &bin.to_string_lossy(),
        &[args, &["--conf", &dotted.to_string_lossy()]].concat(),
    )
}

/// Two shares run (their GPUs exclusive, their daemons up) when the admin
/// disables the node, naming `gpu_mps.conf` through a link to its
/// directory: it says shares still run (exit 1), a new share is refused
/// with the reason (the prolog, with slurmd's spelling, read the mark)
/// and sent elsewhere, `status` says DISABLED with each spelling.
/// Their epilogs stop the daemons but, the node disabled, lift no
/// exclusion (no share fits here). `disable` again: every GPU in its
/// earlier mode, no daemon, no share in the ledger, the refused job still
/// kept off (Slurm books mps here: exit 1). `enable`: the job's exclusion
/// taken back, shares run again.
pub fn leaves_nothing_behind(c: &mut Cluster) -> TestResult {
    standin(c)?;
    fs::write(bin_dir(c).join("compute-mode-1"), "Prohibited\n").map_err(|e| e.to_string())?;
    let before: Vec<String> = (0..4).map(|g| mode(c, g)).collect();
    let result = (|| {
        let running = shares(c, 2, 25)?;
        let first = gpu_mps_linked(c, &["disable", "--node", NODE, "--reason", "backing out"])?;
        ensure(
            first.status.code() == Some(1)
                && String::from_utf8_lossy(&first.stdout).contains("shares still run here"),
            format!("disable with shares running: {}", said(&first)),
        )?;
        let refused = c.sbatch_ok(&["--gres=mps:25", SCRIPT])?;
        c.wait_sent_off(refused, NODE, JOB_LONG)?;
        let out = c.job_output(refused);
        let shown = c.run_ok("scontrol", &["show", "job", &refused.to_string()])?;
        ensure(
            out.contains(
                "GPU sharing is disabled on this node by its admin (gpu-mps disable: backing out)",
            ) && shown.contains("where its admin disabled GPU sharing"),
            format!("the share refused on a disabled node: {out}\n{shown}"),
        )?;
        c.run_ok("scontrol", &["hold", &refused.to_string()])?;
        for status in [
            gpu_mps(c, &["status"])?,
            gpu_mps_linked(c, &["status"])?,
            gpu_mps_dotted(c, &["status"])?,
        ] {
            ensure(
                String::from_utf8_lossy(&status.stdout)
                    .contains("DISABLED: new shares are refused: backing out"),
                format!("status on a disabled node: {}", said(&status)),
            )?;
        }
        end_shares(c, &running)?;
        ensure(
            c.sent_off(refused, NODE),
            format!(
                "an epilog on the disabled node took back job {refused}'s exclusion: {:?}",
                c.job(refused)
            ),
        )?;
        // Slurm still books the node's mps: the refused job stays kept
        // off it (sent back, it would only be refused again), and disable
        // says so (exit 1).
        let last = gpu_mps_dotted(c, &["disable", "--node", NODE])?;
        let after: Vec<String> = (0..4).map(|g| mode(c, g)).collect();
        ensure(
            last.status.code() == Some(1)
                && String::from_utf8_lossy(&last.stdout)
                    .contains("1 job(s) gpushare sent elsewhere stay kept off this node")
                && after == before
                && c.sent_off(refused, NODE)
                && (0..4).all(|g| daemons(c, g).is_empty())
                && ledger(c).shares().next().is_none(),
            format!(
                "disable once no share runs: {}; modes {after:?} (before {before:?}); job \
                 {refused}: {:?}",
                said(&last),
                c.job(refused)
            ),
        )?;
        // Enabled with the link's spelling: the mark slurmd's reads is
        // gone, and the job kept off comes back.
        let enabled = gpu_mps_linked(c, &["enable"])?;
        let info = c.job(refused)?;
        ensure(
            String::from_utf8_lossy(&enabled.stdout).contains("enabled on this node again")
                && !info.get("ExcNodeList").is_some_and(|l| l.contains(NODE)),
            format!(
                "enable through the link: {}; job {refused}'s ExcNodeList {:?}",
                said(&enabled),
                info.get("ExcNodeList")
            ),
        )?;
        c.run_ok("scancel", &[&refused.to_string()])?;
        shares(c, 1, 25).map(|_| ())
    })();
    // Never leave the node disabled for the tests after this one.
    let _ = gpu_mps(c, &["enable"]);
    result.and(cancel_and_wait_stopped(c))
}

/// Cancels the shares `running` and waits for the last one's epilog: no
/// share in the ledger, no daemon.
fn end_shares(c: &Cluster, running: &[u32]) -> TestResult {
    for id in running {
        c.run_ok("scancel", &[&id.to_string()])?;
    }
    for &id in running {
        c.wait_job_done(id, JOB_END)?;
    }
    wait_for("the last share's epilog", SHORT, || {
        (ledger(c).shares().next().is_none() && (0..4).all(|g| daemons(c, g).is_empty()))
            .then_some(())
    })
}

/// `gpu-mps enable`: it succeeds and a share runs again.
fn enable_again(c: &Cluster) -> TestResult {
    let enabled = gpu_mps(c, &["enable"])?;
    ensure(
        enabled.status.success(),
        format!("enable: {}", said(&enabled)),
    )?;
    shares(c, 1, 25).map(|_| ())
}

/// Processes each whole-GPU job starts on its GPU at once.
const PROCESSES: usize = 3;

/// The node half turned off as docs/turning-off.md says, on a node whose
/// four shares left every GPU EXCLUSIVE_PROCESS: `disable`, a share
/// refused and held, the shares ended, `disable` again (exit 1: every
/// mode back, the held job still kept off while Slurm books mps here);
/// then every line of gpushare's out of Slurm's configuration (the
/// prolog and epilog, the SPANK line, mps in gres.conf, `Gres=` and
/// `GresTypes=`, `LL_SHARED_GRES`, `PrologFlags=Alloc,DeferBatch`) and
/// Slurm made to read it (`scontrol reconfigure`; before
/// 23.11 slurmctld and slurmd restarted), `disable` once more (exit 0: no
/// live job kept off the node, the held one included), `gpu_mps.conf`
/// removed. A whole-GPU job on each GPU at
/// once, each starting [`PROCESSES`] stand-in CUDA clients together,
/// succeeds: a GPU left exclusive would fail all but one. Afterwards the
/// configuration is put back and the node enabled for the tests after.
pub fn turned_off(c: &mut Cluster) -> TestResult {
    standin(c)?;
    let client = testcluster::standin::install_client(&bin_dir(c))?;
    let conf = c.slurm_conf();
    let saved: Vec<(PathBuf, String)> = CONFIG_FILES
        .iter()
        .map(|name| {
            let path = conf.with_file_name(name);
            fs::read_to_string(&path)
                .map(|text| (path.clone(), text))
                .map_err(|e| format!("{}: {e}", path.display()))
        })
        .collect::<Result<_, _>>()?;
    let result = (|| {
        let running = shares(c, 4, 25)?;
        let during: Vec<String> = (0..4).map(|g| mode(c, g)).collect();
        ensure(
            during.iter().all(|m| m == "Exclusive_Process"),
            format!("a share on each GPU: modes {during:?}"),
        )?;
        gpu_mps(c, &["disable", "--node", NODE, "--reason", "turning off"])?;
        let refused = c.sbatch_ok(&["--gres=mps:25", SCRIPT])?;
        c.wait_sent_off(refused, NODE, JOB_LONG)?;
        c.run_ok("scontrol", &["hold", &refused.to_string()])?;
        end_shares(c, &running)?;
        let last = gpu_mps(c, &["disable", "--node", NODE])?;
        let after: Vec<String> = (0..4).map(|g| mode(c, g)).collect();
        ensure(
            last.status.code() == Some(1)
                && String::from_utf8_lossy(&last.stdout).contains("stay kept off this node")
                && after.iter().all(|m| m == "Default")
                && c.sent_off(refused, NODE),
            format!(
                "disable once no share runs, Slurm still booking mps here: {}; modes {after:?}",
                said(&last)
            ),
        )?;
        // Step 3: Slurm no longer books mps here. disable again: every
        // exclusion given back, exit 0. Then step 4: gpu_mps.conf goes.
        for (path, text) in &saved {
            if let Some(text) = without_gpushare(path, text) {
                fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
        reread(c, "gpu")?;
        let gone = gpu_mps(c, &["disable", "--node", NODE])?;
        ensure(
            gone.status.code() == Some(0),
            format!("disable once Slurm books no mps here: {}", said(&gone)),
        )?;
        let live = c.run_ok("squeue", &["-h", "-o", "%i"])?;
        let live: Vec<u32> = live
            .split_whitespace()
            .filter_map(|i| i.parse().ok())
            .collect();
        ensure(
            live.contains(&refused),
            format!("the held share {refused} among the live jobs {live:?}"),
        )?;
        for id in live {
            let info = c.job(id)?;
            ensure(
                !info.get("ExcNodeList").is_some_and(|l| l.contains(NODE)),
                format!("job {id} still kept off {NODE} after disable: {info:?}"),
            )?;
        }
        c.run_ok("scancel", &[&refused.to_string()])?;
        c.wait_job_done(refused, JOB_END)?;
        for (path, text) in &saved {
            if without_gpushare(path, text).is_none() {
                fs::remove_file(path).map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
        let config = c.run_ok("scontrol", &["show", "config"])?;
        ensure(
            !config.contains("gpu-mps-") && !config.contains("LL_SHARED_GRES"),
            format!("Slurm's configuration with gpushare's lines removed: {config}"),
        )?;
        // The clients started and waited for by the stand-in itself: a
        // shell's `wait` can hang where slurmstepd starts the job's shell
        // with SIGCHLD blocked (seen with SchedMD's 25.05 RPMs and dash).
        let wrap = format!("--wrap={} 3 {PROCESSES}", client.display());
        let whole: Vec<u32> = (0..4)
            .map(|_| c.sbatch_ok(&["--gres=gpu:a40:1", &wrap]))
            .collect::<Result<_, _>>()?;
        let mut gpus = BTreeSet::new();
        for &id in &whole {
            let info = c
                .wait_job_done(id, JOB_LONG)
                .map_err(|e| format!("{e}; its output so far: {:?}", c.job_output(id)))?;
            let out = c.job_output(id);
            let used: BTreeSet<&str> = out
                .lines()
                .filter(|l| l.contains("context of pid"))
                .filter_map(|l| l.split_whitespace().nth(1))
                .collect();
            ensure(
                info.state() == "COMPLETED"
                    && out.contains("clients failed: 0")
                    && out.matches("context of pid").count() == PROCESSES
                    && used.len() == 1,
                format!("whole-GPU job {id} ({}): {out}", info.state()),
            )?;
            gpus.extend(used.into_iter().map(str::to_owned));
        }
        ensure(
            gpus.len() == 4,
            format!("the whole-GPU jobs ran on GPUs {gpus:?}, not on each of the 4"),
        )
    })();
    // The configuration and the node back as they were, for the tests after.
    let restored = put_back(c, &saved);
    result.and(restored).and(cancel_and_wait_stopped(c))
}

/// The files of Slurm's configuration gpushare's lines are in.
const CONFIG_FILES: [&str; 4] = ["slurm.conf", "gres.conf", "plugstack.conf", "gpu_mps.conf"];

/// `text` of the file at `path` with gpushare's lines taken out as
/// docs/turning-off.md says; `None`: the file goes (`gpu_mps.conf`).
fn without_gpushare(path: &std::path::Path, text: &str) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let kept = text.lines().filter_map(|line| match name {
        "gres.conf" => (!line.contains("Name=mps")).then(|| line.to_owned()),
        "plugstack.conf" => (!line.contains("spank_gpu_mps")).then(|| line.to_owned()),
        "slurm.conf" => slurm_conf_line(line),
        _ => Some(line.to_owned()),
    });
    (name != "gpu_mps.conf").then(|| kept.map(|l| l + "\n").collect())
}

/// A line of slurm.conf without gpushare: the prolog, epilog and
/// `PrologFlags=Alloc,DeferBatch` gone, mps out of `GresTypes=` and the node's
/// `Gres=`, `LL_SHARED_GRES` out of `SelectTypeParameters=`.
fn slurm_conf_line(line: &str) -> Option<String> {
    let key = line.split_once('=').map_or("", |(k, _)| k);
    match key {
        "Prolog" | "Epilog" if line.contains("gpu-mps-") => None,
        "PrologFlags" if line == "PrologFlags=Alloc,DeferBatch" => None,
        "GresTypes" => Some(line.replace(",mps", "")),
        "SelectTypeParameters" => Some(line.replace(",LL_SHARED_GRES", "")),
        "NodeName" => Some(
            line.split(' ')
                .map(|word| match word.strip_prefix("Gres=") {
                    Some(gres) => {
                        let kept: Vec<&str> =
                            gres.split(',').filter(|g| !g.starts_with("mps:")).collect();
                        format!("Gres={}", kept.join(","))
                    }
                    None => word.to_owned(),
                })
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => Some(line.to_owned()),
    }
}

/// Slurm reads its changed configuration as docs/turning-off.md says:
/// `scontrol reconfigure` from 23.11 on (it starts every daemon afresh);
/// before, slurmctld and then slurmd restarted (they read `GresTypes=`
/// only at their start). Waits until slurmctld has `GresTypes=gres_types`
/// and the node is up.
fn reread(c: &mut Cluster, gres_types: &str) -> TestResult {
    if slurm_release() >= (23, 11) {
        c.run_ok("scontrol", &["reconfigure"])?;
    } else {
        c.restart_slurmctld()?;
        c.restart_slurmd_cleanly(NODE)?;
    }
    wait_for("slurmctld on its new configuration", DAEMON_START, || {
        let config = c.run_ok("scontrol", &["show", "config"]).ok()?;
        config
            .lines()
            .any(|l| {
                l.split_once('=')
                    .is_some_and(|(k, v)| k.trim() == "GresTypes" && v.trim() == gres_types)
            })
            .then_some(())
    })?;
    c.wait_node_idle(NODE_STATE)
}

/// gpushare's configuration back as `saved` holds it, Slurm made to read
/// it, the node enabled: a share runs again.
fn put_back(c: &mut Cluster, saved: &[(PathBuf, String)]) -> TestResult {
    for (path, text) in saved {
        fs::write(path, text)
            .and_then(|()| fs::set_permissions(path, fs::Permissions::from_mode(0o644)))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    reread(c, "gpu,mps")?;
    enable_again(c)
}
