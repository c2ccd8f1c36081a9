//! A node whose GPUs Slurm detects (`AutoDetect=nvml`): slurmd's GPU
//! plugin finds four "NVIDIA A40" in a `fake_gpus.conf` beside slurm.conf
//! (each typed as `gpu_nvml.c` names it, `nvidia_a40`, with a UUID), and
//! gres.conf holds the lines `gpu-mps config --autodetect` prints for the
//! release, installed as printed (their `/dev/nvidia<N>` moved to the
//! cluster's device directory, where the fake GPUs are). Shares are placed
//! and confined there as on a node whose gres.conf lists its GPUs, and
//! `gpu-qos audit` reads the node's `Gres=` as Slurm reports it.
//!
//! On Slurm 26.05 and later, `Flags=env_uuid` on the node's gpu lines puts
//! GPU UUIDs in `CUDA_VISIBLE_DEVICES`: a whole-GPU job gets its GPU's UUID,
//! a share (gres/mps, which Slurm sets by index whatever the flag) gets
//! `0`, the one device the MPS server of its GPU shows its clients; the
//! server is started for the GPU by its index.

use std::process::Command;

use gpushare::shared::autodetect::gpu_type;
use testcluster::cluster::{fake_gpu_uuid, slurm_release, NODE};

use super::*;

/// NVML's name of the node's GPUs.
const NVML_NAME: &str = "NVIDIA A40";

/// The lines `gpu-mps config --autodetect` prints for the suites' MPS node
/// ([`ClusterSpec::mps_node`]'s gpu_mps.conf, its 4 GPUs typed as Slurm
/// detects them) on this release: gres.conf's lines, and the `Gres=` of
/// slurm.conf's `NodeName=` line.
fn printed_lines(spec: &ClusterSpec, by_slurm: bool) -> Result<(Vec<String>, String), String> {
    let conf_text = spec
        .extra_conf_files
        .iter()
        .find(|(name, _)| name == "gpu_mps.conf")
        .map(|(_, text)| text.clone())
        .ok_or("the MPS node has no gpu_mps.conf")?;
    let dir = std::env::temp_dir().join(format!("gpushare-autodetect-{}", std::process::id()));
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let conf = dir.join("gpu_mps.conf");
    // Its paths as they would be in a cluster in `dir`.
    let conf_text = conf_text.replace("{cluster}", &dir.to_string_lossy());
    fs::write(&conf, conf_text).map_err(|e| format!("{}: {e}", conf.display()))?;
    // The release whose setup the node has: where gpushare places, 22.05's.
    let release = if by_slurm {
        let (major, minor) = slurm_release();
        format!("{major}.{minor:02}")
    } else {
        "22.05".to_owned()
    };
    let gpu_mps = testcluster::cluster::build_dir()?.join("gpu-mps");
    let out = Command::new(&gpu_mps)
        .args(["--conf", &conf.to_string_lossy(), "config", "--autodetect"])
        .args(["--gpus", "4", "--type", &gpu_type(NVML_NAME)])
        .args(["--release", &release, "--node", NODE])
        // Nothing of this machine's own Slurm: only the printed lines count.
        .env("SLURM_CONF", dir.join("slurm.conf"))
        .output()
        .map_err(|e| format!("{}: {e}", gpu_mps.display()))?;
    let _ = fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "gpu-mps config --autodetect failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // A section's title may say more after the file's name (with --node,
    // gres.conf's says that each line names the node).
    let section = |title: &str| -> Vec<String> {
        text.lines()
            .skip_while(|l| *l != title && !l.starts_with(&format!("{title} (")))
            .skip(1)
            .take_while(|l| !l.is_empty())
            .filter(|l| !l.starts_with('#'))
            .map(str::to_owned)
            .collect()
    };
    // Named with --node, the gres.conf lines are scoped to it: the
    // cluster's own gres.conf takes them unscoped, as a node's own file.
    let scope = format!("NodeName={NODE} ");
    let gres: Vec<String> = section("# gres.conf")
        .iter()
        .map(|l| l.strip_prefix(&scope).unwrap_or(l).to_owned())
        .collect();
    let node_gres = section("# slurm.conf")
        .iter()
        .filter(|l| l.starts_with("NodeName="))
        .flat_map(|l| l.split_whitespace())
        .find_map(|w| w.strip_prefix("Gres="))
        .map(str::to_owned)
        .ok_or_else(|| format!("no NodeName= line with Gres= in:\n{text}"))?;
    ensure(
        gres.first().map(String::as_str) == Some("AutoDetect=nvml")
            && !gres.iter().any(|l| l.starts_with("Name=gpu")),
        format!("not AutoDetect's lines:\n{text}"),
    )?;
    Ok((gres, node_gres))
}

/// The MPS node of the suites with its GPUs detected by Slurm, set up for
/// Slurm to place shares (`by_slurm`) or gpushare: gres.conf as `gpu-mps
/// config` prints it, plus `extra` after the `AutoDetect=` line; `Err`
/// where the printed `Gres=` is not the one the harness writes into
/// slurm.conf for these GPUs.
fn detected_spec(extra: &[String], by_slurm: bool) -> Result<ClusterSpec, String> {
    let mut spec = ClusterSpec::mps_node_placed_by_slurm(by_slurm);
    let t = gpu_type(NVML_NAME);
    spec.gpus = vec![GpuSpec {
        gpu_type: t.clone(),
        count: 4,
    }];
    let (gres, node_gres) = printed_lines(&spec, by_slurm)?;
    let written = format!(
        "gpu:{t}:4,mps:{}",
        spec.mps_count.ok_or("the MPS node has no mps count")?
    );
    ensure(
        node_gres == written,
        format!("gpu-mps config prints Gres={node_gres}, the cluster is set up with {written}"),
    )?;
    let mut text = String::new();
    for (i, line) in gres.iter().enumerate() {
        text.push_str(&line.replace("/dev/nvidia", "{cluster}/dev/nvidia"));
        text.push('\n');
        if i == 0 {
            for l in extra {
                text.push_str(l);
                text.push('\n');
            }
        }
    }
    spec.detected_gres_conf = Some(text);
    Ok(spec)
}

/// The node of [`detected_spec`] as gpu-mps config prints it.
pub(super) fn detected_node() -> ClusterSpec {
    or_failing(detected_spec(&[], slurm_places_shares()))
}

/// A suite's spec cannot fail: a cluster that cannot be set up so fails
/// its test at once, with the reason in its gres.conf.
fn or_failing(spec: Result<ClusterSpec, String>) -> ClusterSpec {
    spec.unwrap_or_else(|e| ClusterSpec {
        detected_gres_conf: Some(format!("# {e}\nAutoDetect=bad\n")),
        ..ClusterSpec::mps_node()
    })
}

/// The same node with `Flags=env_uuid` on gpu lines naming its detected
/// GPUs (the flag needs a line to sit on: gres.conf(5)), and the stand-in
/// MPS control program, whose log says with which `CUDA_VISIBLE_DEVICES`
/// each daemon was started; shares placed by Slurm (`by_slurm`) or
/// gpushare.
pub(super) fn env_uuid_node(by_slurm: bool) -> ClusterSpec {
    let line = format!(
        "Name=gpu Type={} File={{cluster}}/dev/nvidia[0-3] Flags=env_uuid",
        gpu_type(NVML_NAME)
    );
    let mut spec = or_failing(detected_spec(&[line], by_slurm));
    for (name, text) in &mut spec.extra_conf_files {
        if name == "gpu_mps.conf" {
            *text = text.replace(
                "MPSControl=none",
                "MPSControl={cluster}/mps-bin/nvidia-cuda-mps-control",
            );
        }
    }
    spec
}

/// slurmd took the node's GPUs from fake_gpus.conf under AutoDetect, and
/// Slurm's record of the node has them with the detected type.
fn gpus_detected(c: &Cluster) -> TestResult {
    let gres = fs::read_to_string(c.dir.join("etc/gres.conf")).map_err(|e| e.to_string())?;
    ensure(
        gres.starts_with("AutoDetect=nvml\n") && gres.contains("Name=mps"),
        format!("gres.conf is not AutoDetect's:\n{gres}"),
    )?;
    let log = c.log("slurmd");
    ensure(
        log.contains("fake_gpus.conf"),
        "slurmd.log does not say it read fake_gpus.conf",
    )?;
    let node = c.run_ok("scontrol", &["show", "node", NODE])?;
    let want = format!("gpu:{}:4", gpu_type(NVML_NAME));
    ensure(
        node.split_whitespace()
            .any(|w| w.starts_with("Gres=") && w.contains(&want)),
        format!("scontrol show node lacks {want}:\n{node}"),
    )
}

/// Four shares of 50 land on the four detected GPUs, each confined to its
/// own, with the MPS environment, placed by whom the release has place
/// them; `gpu-qos audit` reads the node's `Gres=` (its 4 GPUs give the
/// prolog's worst case, 190 s) and finds nothing wrong with its mps setup.
pub(super) fn detected_shares(c: &mut Cluster) -> TestResult {
    gpus_detected(c)?;
    let probe = c.write_device_probe()?;
    let script = format!(
        "--wrap=echo GPU=$GPUSHARE_GPU CVD=$CUDA_VISIBLE_DEVICES PCT=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE $(sh {}); sleep 120",
        probe.display()
    );
    let ids = start_shares_running(c, 4, 50, &script)?;
    let mut gpus = gpus_of(c, &ids)?;
    gpus.sort();
    ensure(
        gpus == vec![0, 1, 2, 3],
        format!("4 shares of 50 landed on {gpus:?}"),
    )?;
    for (&id, gpu) in ids.iter().zip(gpus_of(c, &ids)?) {
        let p = printed(c, id);
        ensure(
            p.get("CVD").is_some_and(|v| names_its_gpu(v, gpu))
                && p.get("PCT").map(String::as_str) == Some("50"),
            format!("job {id} on GPU {gpu}: {p:?}"),
        )?;
    }
    each_confined_to_its_gpu(c, &ids)?;
    let by_slurm = slurm_places_shares();
    placed_by(c, &ids, by_slurm)?;
    // Where Slurm places, its record of each job books the share on the
    // GPU it runs on: `GRES=mps:50(0/100,50/100,0/100,0/100)`, one entry a
    // GPU.
    for (&id, gpu) in ids.iter().zip(gpus_of(c, &ids)?) {
        let job = c.run_ok("scontrol", &["show", "job", "-d", &id.to_string()])?;
        let booked = job
            .split("GRES=mps:50(")
            .nth(1)
            .and_then(|r| r.split(')').next())
            .and_then(|list| list.split(',').position(|e| e.starts_with("50/")));
        ensure(
            job.contains("mps:50") && (!by_slurm || booked == Some(gpu as usize)),
            format!("job {id} on GPU {gpu}: Slurm's record says\n{job}"),
        )?;
    }
    c.cancel_all()?;
    wait_for("the epilogs to empty the ledger", SHORT, || {
        no_share_left(c)
    })?;
    audit_reads_detected_node(c)
}

fn audit_reads_detected_node(c: &Cluster) -> TestResult {
    let bin = testcluster::cluster::build_dir()?.join("gpu-qos");
    let out = c
        .command(&bin.to_string_lossy())
        .args(["audit", "--json", "--fail-on", "note"])
        .output()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    let report: gpushare::qos::audit::AuditReport =
        serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "not an audit report ({e}): {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    let listing: String = report
        .findings
        .iter()
        .map(|f| format!("\n  {} {}: {}", f.severity, f.kind, f.what))
        .collect();
    let node_kinds = [
        "mps_prolog_missing",
        "mps_epilog_missing",
        "spank_gpu_mps_missing",
        "devices_unconstrained",
        "mps_shares_stack",
    ];
    ensure(
        !report
            .findings
            .iter()
            .any(|f| node_kinds.contains(&f.kind.as_str())),
        format!("the audit finds the detected node's mps setup wrong:{listing}"),
    )?;
    // Slurm's default BatchStartTimeout (the suites set none) against the
    // prolog's worst case on the node's GPUs, counted from its Gres=.
    ensure(
        report
            .findings
            .iter()
            .any(|f| f.kind == "batch_start_timeout_short" && f.what.contains("below the 190 s")),
        format!("the audit did not count the node's 4 detected GPUs:{listing}"),
    )
}

/// Under `Flags=env_uuid` (26.05): a whole-GPU job sees its GPU's UUID and
/// only its GPU; a share sees `0`, which its GPU's MPS server (started
/// with that GPU's index) shows its clients, and only its GPU, whoever
/// placed it (Slurm: its own value; gpushare: the SPANK plugin's).
pub(super) fn env_uuid(c: &mut Cluster) -> TestResult {
    gpus_detected(c)?;
    let bin = c.dir.join("mps-bin");
    testcluster::standin::install(&bin)?;
    testcluster::standin::install_smi(&bin)?;
    fs::write(bin.join("standin.log"), "").map_err(|e| e.to_string())?;
    let probe = c.write_device_probe()?;
    let script = format!(
        "--wrap=echo GPU=$GPUSHARE_GPU JOBGPUS=$SLURM_JOB_GPUS CVD=$CUDA_VISIBLE_DEVICES $(sh {}); sleep 120",
        probe.display()
    );
    // A whole GPU: Slurm's UUID, the GPU Slurm's record names.
    let whole = c.sbatch_ok(&["--gres=gpu:1", &script])?;
    c.wait_job_state(whole, &["RUNNING"], JOB_START)?;
    wait_for("the whole-GPU job's output", SHORT, || {
        printed(c, whole).contains_key("CVD").then_some(())
    })?;
    let p = printed(c, whole);
    let gpu: u32 = p
        .get("JOBGPUS")
        .and_then(|g| g.parse().ok())
        .ok_or_else(|| format!("whole-GPU job {whole}: {p:?}"))?;
    ensure(
        p.get("CVD") == Some(&fake_gpu_uuid(gpu)),
        format!(
            "whole-GPU job {whole} on GPU {gpu}: CUDA_VISIBLE_DEVICES {:?}, expected {}",
            p.get("CVD"),
            fake_gpu_uuid(gpu)
        ),
    )?;
    for i in 0..4u32 {
        let want = probe_result(i, gpu);
        ensure(
            p.get(&format!("dev{i}")).map(String::as_str) == Some(want),
            format!("whole-GPU job {whole} on GPU {gpu}: {p:?}"),
        )?;
    }
    let job = c.run_ok("scontrol", &["show", "job", "-d", &whole.to_string()])?;
    ensure(
        job.contains(&format!("IDX:{gpu}")),
        format!("Slurm's record of job {whole} does not name GPU {gpu}:\n{job}"),
    )?;
    c.cancel_all()?;
    // Three shares, one on each GPU the whole job left free.
    let ids = start_shares_running(c, 3, 50, &script)?;
    for (&id, gpu) in ids.iter().zip(gpus_of(c, &ids)?) {
        let p = printed(c, id);
        ensure(
            p.get("CVD").map(String::as_str) == Some("0"),
            format!(
                "share {id} on GPU {gpu}: CUDA_VISIBLE_DEVICES {:?}, expected 0 (26.05's \
                 gres/mps names a share's device by index whatever env_uuid says)",
                p.get("CVD"),
            ),
        )?;
    }
    each_confined_to_its_gpu(c, &ids)?;
    // The spec's per-GPU mps lines: Slurm places.
    let by_slurm = c.spec.mps_per_gpu;
    placed_by(c, &ids, by_slurm)?;
    // Each share's GPU got its daemon, started with the GPU's index.
    let log = fs::read_to_string(bin.join("standin.log")).unwrap_or_default();
    for gpu in gpus_of(c, &ids)? {
        ensure(
            log.lines().any(|l| l == format!("gpu={gpu} args=-d")),
            format!("no daemon started for GPU {gpu} by index:\n{log}"),
        )?;
    }
    c.cancel_all()?;
    wait_for("the epilogs to empty the ledger", SHORT, || {
        no_share_left(c)
    })
}

/// Whether a share's `CUDA_VISIBLE_DEVICES` names the one device of its
/// GPU's MPS server: `0` (gpushare's SPANK plugin; Slurm's index within
/// the job), or the GPU's own UUID, which Slurm 23.11 to 25.05 put there
/// wherever slurmd knows one (`gres_common.c`: any `unique_id`; from 25.11
/// only for MIG or, 26.05, `env_uuid` on whole GPUs). A node index or
/// another GPU's UUID names nothing there.
fn names_its_gpu(value: &str, gpu: u32) -> bool {
    value == "0" || value == fake_gpu_uuid(gpu)
}

/// The ledger records every one of `ids` as placed by Slurm where
/// `by_slurm`, else by gpushare.
fn placed_by(c: &Cluster, ids: &[u32], by_slurm: bool) -> TestResult {
    let state = ledger(c);
    ensure(
        ids.iter().all(|&id| {
            state
                .share(id)
                .is_some_and(|s| s.placed_by_slurm == by_slurm)
        }),
        format!("expected placed_by_slurm={by_slurm}:\n{}", state_text(c)),
    )
}
