//! `gpu-mps disable` and `enable`: the node taken off sharing, leaving
//! nothing of gpushare behind once its last share ends, and given back.

use std::fs;

use testcluster::cluster::{wait_for, NODE};
use testcluster::time::{JOB_END, JOB_LONG, SHORT};
use testcluster::{ensure, Cluster, TestResult};

use super::{bin_dir, cancel_and_wait_stopped, daemons, gpu_mps, ledger, shares, standin, SCRIPT};

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

/// Two shares run (their GPUs exclusive, their daemons up) when the admin
/// disables the node: it says shares still run (exit 1), a new share is
/// refused with the reason and sent elsewhere, `status` says DISABLED.
/// Their epilogs stop the daemons but, the node disabled, lift no
/// exclusion (no share fits here). `disable` again: exit 0, every GPU in
/// its earlier mode, no daemon, no share in the ledger, the refused job's
/// exclusion taken back. `enable`: shares run again.
pub fn leaves_nothing_behind(c: &mut Cluster) -> TestResult {
    standin(c)?;
    fs::write(bin_dir(c).join("compute-mode-1"), "Prohibited\n").map_err(|e| e.to_string())?;
    let before: Vec<String> = (0..4).map(|g| mode(c, g)).collect();
    let result = (|| {
        let running = shares(c, 2, 25)?;
        let first = gpu_mps(c, &["disable", "--node", NODE, "--reason", "backing out"])?;
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
        let status = gpu_mps(c, &["status"])?;
        ensure(
            String::from_utf8_lossy(&status.stdout)
                .contains("DISABLED: new shares are refused: backing out"),
            format!("status on a disabled node: {}", said(&status)),
        )?;
        for id in &running {
            c.run_ok("scancel", &[&id.to_string()])?;
        }
        for &id in &running {
            c.wait_job_done(id, JOB_END)?;
        }
        wait_for("the last share's epilog", SHORT, || {
            (ledger(c).shares().next().is_none() && (0..4).all(|g| daemons(c, g).is_empty()))
                .then_some(())
        })?;
        ensure(
            c.sent_off(refused, NODE),
            format!(
                "an epilog on the disabled node took back job {refused}'s exclusion: {:?}",
                c.job(refused)
            ),
        )?;
        let last = gpu_mps(c, &["disable", "--node", NODE])?;
        let after: Vec<String> = (0..4).map(|g| mode(c, g)).collect();
        let info = c.job(refused)?;
        ensure(
            last.status.code() == Some(0)
                && after == before
                && !info.get("ExcNodeList").is_some_and(|l| l.contains(NODE))
                && (0..4).all(|g| daemons(c, g).is_empty())
                && ledger(c).shares().next().is_none(),
            format!(
                "disable once no share runs: {}; modes {after:?} (before {before:?}); job \
                 {refused}'s ExcNodeList {:?}",
                said(&last),
                info.get("ExcNodeList")
            ),
        )?;
        c.run_ok("scancel", &[&refused.to_string()])?;
        let enabled = gpu_mps(c, &["enable"])?;
        ensure(
            enabled.status.success(),
            format!("enable: {}", said(&enabled)),
        )?;
        shares(c, 1, 25).map(|_| ())
    })();
    // Never leave the node disabled for the tests after this one.
    let _ = gpu_mps(c, &["enable"]);
    result.and(cancel_and_wait_stopped(c))
}
