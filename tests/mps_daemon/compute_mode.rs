//! The compute mode gpushare gives a shared GPU (`ComputeMode=`), through
//! the stand-in `nvidia-smi`, which keeps each GPU's mode in
//! `mps-bin/compute-mode-<what -i named>`: EXCLUSIVE_PROCESS while shares
//! run, the earlier mode while a job Slurm gave the GPU whole runs beside
//! them, the earlier mode after the last share, an admin's mode kept, a
//! failed change retried by the node timer.

use std::fs;

use testcluster::cluster::wait_for;
use testcluster::time::{JOB_END, JOB_START, SHORT};
use testcluster::{ensure, Cluster, TestResult};

use super::{
    bin_dir, calls, cancel_and_wait_stopped, daemons, gpu_mps, sent_elsewhere, shares, standin,
    used_gpus, with_line, SCRIPT,
};

/// GPU `gpu`'s compute mode as the stand-in `nvidia-smi` keeps it, where
/// `-i` named it by its index.
fn compute_mode(c: &Cluster, gpu: u32) -> String {
    mode_of(c, &gpu.to_string())
}

/// By default (`ComputeMode=exclusive`) each shared GPU is put in
/// EXCLUSIVE_PROCESS mode before its daemon starts and gets back the mode
/// it had (GPU 1 was PROHIBITED) once its last share ends; where
/// `nvidia-smi` fails, the share is refused. `ComputeMode=leave` never
/// asks `nvidia-smi` to change a mode.
pub fn exclusive_while_shared(c: &mut Cluster) -> TestResult {
    standin(c)?;
    fs::write(bin_dir(c).join("compute-mode-1"), "Prohibited\n").map_err(|e| e.to_string())?;
    let before: Vec<String> = (0..4).map(|g| compute_mode(c, g)).collect();
    with_line(c, "ComputeMode=leave", |c| {
        shares(c, 4, 25)?;
        let sets: Vec<String> = calls(c)
            .into_iter()
            .filter(|l| l.starts_with("smi ") && l.contains(" -c "))
            .collect();
        let during: Vec<String> = (0..4).map(|g| compute_mode(c, g)).collect();
        ensure(
            sets.is_empty() && during == before,
            format!("ComputeMode=leave set modes {sets:?}: {during:?}, before: {before:?}"),
        )
    })?;
    fs::write(bin_dir(c).join("standin.log"), "").map_err(|e| e.to_string())?;
    // The default: gpu_mps.conf has no ComputeMode line.
    with_line(c, "", |c| {
        shares(c, 4, 25)?;
        let gpus = used_gpus(c);
        let log = calls(c);
        for &gpu in &gpus {
            let at = |want: &str| log.iter().position(|l| l == want);
            let exclusive = at(&format!("smi args=-i {gpu} -c EXCLUSIVE_PROCESS"));
            let started = at(&format!("gpu={gpu} args=-d"));
            ensure(
                compute_mode(c, gpu) == "Exclusive_Process"
                    && exclusive.is_some()
                    && exclusive < started,
                format!(
                    "GPU {gpu} in mode {} before its daemon: {log:?}",
                    compute_mode(c, gpu)
                ),
            )?;
        }
        cancel_and_wait_stopped(c)?;
        let after: Vec<String> = (0..4).map(|g| compute_mode(c, g)).collect();
        ensure(
            after == before,
            format!("modes after the last shares: {after:?}, before: {before:?}"),
        )?;
        fs::write(bin_dir(c).join("smi-fail"), "").map_err(|e| e.to_string())?;
        let id = c.sbatch_ok(&["--gres=mps:25", SCRIPT])?;
        let refused = sent_elsewhere(c, id, "compute mode");
        let _ = fs::remove_file(bin_dir(c).join("smi-fail"));
        refused
    })
}

/// The mode the stand-in keeps for the GPU `-i` named `target`.
fn mode_of(c: &Cluster, target: &str) -> String {
    fs::read_to_string(bin_dir(c).join(format!("compute-mode-{target}")))
        .unwrap_or_else(|_| "Default".into())
        .trim()
        .to_owned()
}

/// The PCI bus id the NVML figures [`with_bus_ids`] keeps give GPU `gpu`
/// (`/dev/nvidia<gpu>`): bus 0x1N, never the index alone.
fn bus_of(gpu: u32) -> String {
    format!("00000000:1{gpu}:00.0")
}

/// Runs `f` with NVML's figures kept in the state directory as the
/// prolog keeps them (no NVML here), each GPU with a PCI bus id; removed
/// after.
fn with_bus_ids(c: &mut Cluster, f: impl FnOnce(&mut Cluster) -> TestResult) -> TestResult {
    let facts_path = c.dir.join("run/gpu-mps/nvml-facts");
    let facts: String = (0..4u32)
        .map(|g| format!("{g} {g} 49152 0 0 {}\n", bus_of(g)))
        .collect();
    fs::write(&facts_path, facts).map_err(|e| e.to_string())?;
    let result = f(c);
    let stopped = cancel_and_wait_stopped(c);
    let _ = fs::remove_file(&facts_path);
    result.and(stopped)
}

/// Where gpushare places shares, Slurm may give a GPU holding them whole:
/// that job's prolog gives the GPU its earlier mode (DEFAULT), so the job
/// runs beside the shares instead of failing at CUDA start, their daemon
/// untouched; its epilog makes the GPU exclusive again while the share
/// still runs. `nvidia-smi -i` names each GPU by the PCI bus id NVML's
/// kept figures give it.
pub fn whole_job_beside_shares(c: &mut Cluster) -> TestResult {
    standin(c)?;
    with_bus_ids(c, |c| {
        // One share per GPU: whichever GPU Slurm gives whole holds one.
        shares(c, 4, 25)?;
        let exclusive: Vec<String> = (0..4).map(|g| mode_of(c, &bus_of(g))).collect();
        ensure(
            exclusive.iter().all(|m| m == "Exclusive_Process"),
            format!(
                "modes by bus id with a share on each GPU: {exclusive:?}: {:?}",
                calls(c)
            ),
        )?;
        let seen = bin_dir(c).join("compute-mode-00000000:1");
        let whole = c.sbatch_ok(&[
            "--gres=gpu:a40:1",
            &format!(
                "--wrap=echo HELD=$SLURM_JOB_GPUS MODE=$(cat {}$SLURM_JOB_GPUS:00.0); sleep 300",
                seen.display()
            ),
        ])?;
        let (held, printed) = wait_for("the whole-GPU job's output", JOB_START, || {
            let out = c.job_output(whole);
            let held: u32 = out
                .split("HELD=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some((held, out))
        })?;
        let others: Vec<String> = (0..4)
            .filter(|&g| g != held)
            .map(|g| mode_of(c, &bus_of(g)))
            .collect();
        ensure(
            printed.contains("MODE=Default")
                && mode_of(c, &bus_of(held)) == "Default"
                && others.iter().all(|m| m == "Exclusive_Process")
                && !daemons(c, held).is_empty(),
            format!(
                "whole job {whole} on GPU {held} printed {printed:?}; modes of the others \
                 {others:?}; daemons there {:?}",
                daemons(c, held)
            ),
        )?;
        let log = c.syslog();
        ensure(
            log.contains(&format!("GPU {held}: compute mode set to DEFAULT")),
            format!("syslog: {log}"),
        )?;
        c.run_ok("scancel", &[&whole.to_string()])?;
        c.wait_job_done(whole, JOB_END)?;
        wait_for("the GPU exclusive again after the whole job", SHORT, || {
            (mode_of(c, &bus_of(held)) == "Exclusive_Process").then_some(())
        })
        .map_err(|e| format!("{e}: {}", mode_of(c, &bus_of(held))))?;
        ensure(
            !daemons(c, held).is_empty(),
            format!("GPU {held}'s share lost its daemon"),
        )?;
        cancel_and_wait_stopped(c)?;
        let after: Vec<String> = (0..4).map(|g| mode_of(c, &bus_of(g))).collect();
        ensure(
            after.iter().all(|m| m == "Default"),
            format!("modes after the last shares: {after:?}"),
        )
    })
}

/// `nvidia-smi` fails as the last share ends: the GPU stays exclusive,
/// marked, and the node timer (`gpu-mps metrics --write`) gives it back its
/// mode once `nvidia-smi` works again.
pub fn failed_restore_retried(c: &mut Cluster) -> TestResult {
    standin(c)?;
    let ids = shares(c, 1, 25)?;
    let gpu = used_gpus(c).into_iter().next().unwrap_or_default();
    fs::write(bin_dir(c).join("smi-fail"), "").map_err(|e| e.to_string())?;
    let stopped = cancel_and_wait_stopped(c);
    let _ = fs::remove_file(bin_dir(c).join("smi-fail"));
    stopped?;
    ensure(
        compute_mode(c, gpu) == "Exclusive_Process",
        format!(
            "GPU {gpu} after a failed restore of share {ids:?}: {}",
            compute_mode(c, gpu)
        ),
    )?;
    let kmsg = c.dir.join("kmsg-none");
    fs::write(&kmsg, "").map_err(|e| e.to_string())?;
    let timer = gpu_mps(
        c,
        &[
            "metrics",
            "--write",
            "--kernel-log",
            &kmsg.to_string_lossy(),
        ],
    )?;
    let said = String::from_utf8_lossy(&timer.stderr);
    ensure(
        timer.status.success()
            && compute_mode(c, gpu) == "Default"
            && said.contains(&format!("GPU {gpu}: compute mode set to DEFAULT")),
        format!(
            "the timer ({}) left GPU {gpu} {}: {said}",
            timer.status,
            compute_mode(c, gpu)
        ),
    )?;
    let again = gpu_mps(
        c,
        &[
            "metrics",
            "--write",
            "--kernel-log",
            &kmsg.to_string_lossy(),
        ],
    )?;
    let said = String::from_utf8_lossy(&again.stderr);
    ensure(
        !said.contains("compute mode"),
        format!("a second tick tried again: {said}"),
    )
}

/// An admin takes a shared GPU out of service (`nvidia-smi -c
/// PROHIBITED`) while its share runs: the share's end leaves PROHIBITED,
/// drops gpushare's record and says so in syslog.
pub fn admins_mode_kept(c: &mut Cluster) -> TestResult {
    standin(c)?;
    shares(c, 1, 25)?;
    let gpu = used_gpus(c).into_iter().next().unwrap_or_default();
    let smi = bin_dir(c).join("nvidia-smi");
    c.run_ok(
        &smi.to_string_lossy(),
        &["-i", &gpu.to_string(), "-c", "PROHIBITED"],
    )?;
    cancel_and_wait_stopped(c)?;
    let record = c.dir.join(format!("run/gpu-mps/compute-mode-gpu{gpu}"));
    let log = c.syslog();
    ensure(
        compute_mode(c, gpu) == "Prohibited"
            && !record.exists()
            && log.contains("compute mode PROHIBITED was set while gpushare managed it"),
        format!(
            "GPU {gpu} {} after its share, record kept: {}; syslog: {log}",
            compute_mode(c, gpu),
            record.exists()
        ),
    )
}
