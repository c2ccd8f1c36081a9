//! `make demo`: gpushare end to end on a throwaway cluster, narrated.
//!
//! `gpushare-demo --root DESTDIR [--keep]` runs against what
//! `make install DESTDIR=... PREFIX=/usr PLUGINDIR=/usr/lib/gpushare` put
//! under DESTDIR (the same install step a sysadmin uses): the example site's
//! group QOS with typed GrpTRES, a free preemptible `lowprio`, a node with 4
//! a40 and 2 h100 (fake devices) whose a40s also form an MPS pool. Every
//! expected outcome is checked; the first one that fails stops the demo with
//! a non-zero exit status. Daemon logs stay in the directory it names.

use gpushare::mps::ledger::LedgerState;
use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use testcluster::cluster::wait_for;
use testcluster::{Cluster, ClusterSpec};

type Step = Result<(), String>;

struct Demo {
    root: PathBuf,
    started: Instant,
    checks: usize,
}

impl Demo {
    fn step(&self, n: u32, title: &str) {
        println!(
            "\n\x1b[1m[{:>5.1}s] {n}. {title}\x1b[0m",
            self.started.elapsed().as_secs_f64()
        );
    }

    fn say(&self, text: &str) {
        println!("   {text}");
    }

    fn shell(&self, line: &str, output: &str) {
        println!("   \x1b[2m$ {line}\x1b[0m");
        for l in output.trim_end().lines() {
            println!("     {l}");
        }
    }

    fn check(&mut self, ok: bool, what: &str) -> Step {
        self.checks += 1;
        if ok {
            println!("   \x1b[32m✔\x1b[0m {what}");
            Ok(())
        } else {
            println!("   \x1b[31m✘ {what}\x1b[0m");
            Err(format!("expectation failed: {what}"))
        }
    }

    fn sbin(&self, name: &str) -> PathBuf {
        self.root.join("usr/sbin").join(name)
    }
}

fn printed(c: &Cluster, id: u32) -> BTreeMap<String, String> {
    c.job_output(id)
        .split_whitespace()
        .filter_map(|w| w.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect()
}

fn spec(root: &Path) -> Result<ClusterSpec, String> {
    let plugins = root.join("usr/lib/gpushare");
    let libexec = root.join("usr/libexec/gpushare");
    let examples = root.join("usr/share/doc/gpushare/examples");
    let qos_conf = fs::read_to_string(examples.join("gpu_qos.conf.example")).map_err(|e| {
        format!(
            "{}: {e} (run `make demo`, which installs first)",
            examples.display()
        )
    })?;
    let mut spec = ClusterSpec::example_site();
    spec.installed_plugin_dir = Some(plugins.clone());
    // Slurm 22.05 spreads Count over all 6 GPUs and books every share on
    // GPU 0: 400 units at once (4 a40 × 100) need Count = 6 × 400. The demo
    // keeps this setup (gpushare places) on every release: with per-GPU
    // mps lines on the a40s only and LL_SHARED_GRES, Slurm 24.11 started 4
    // of the 8 shares and left the rest pending (Resources) while each a40
    // had 75 units free (the node showed `mps:h100:0`); see the README.
    spec.mps_count = Some(2400);
    spec.cgroup_devices = true;
    spec.prolog = Some(libexec.join("gpu-mps-prolog"));
    spec.epilog = Some(libexec.join("gpu-mps-epilog"));
    spec.plugstack = vec![format!(
        "required {}/spank_gpu_mps.so conf={{cluster}}/etc/gpu_mps.conf",
        plugins.display()
    )];
    spec.extra_conf_files = vec![
        ("gpu_qos.conf".into(), qos_conf),
        (
            "gpu_mps.conf".into(),
            "UnitsPerGPU=100\nGPUDevices={cluster}/dev/nvidia[0-3]\nStateDir={cluster}/run/gpu-mps\nMPSControl=none\nSyslogSocket={cluster}/log/syslog.sock\n".into(),
        ),
    ];
    spec.extra_slurm_conf = vec![
        "PrologFlags=Alloc".into(),
        "PriorityWeightTRES=GRES/gpu=2000".into(),
        "PriorityDecayHalfLife=7-0".into(),
    ];
    Ok(spec)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let keep = args.iter().any(|a| a == "--keep");
    let Some(root) = args
        .iter()
        .position(|a| a == "--root")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from)
    else {
        eprintln!("usage: gpushare-demo --root DESTDIR [--keep]   (run through `make demo`)");
        return ExitCode::from(2);
    };
    let mut demo = Demo {
        root: root.clone(),
        started: Instant::now(),
        checks: 0,
    };
    let spec = match spec(&root) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    demo.step(
        0,
        "Starting a throwaway cluster: munged, MariaDB, slurmdbd, slurmctld, slurmd",
    );
    let mut cluster = match spec.start() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("the cluster did not start:\n{e}");
            return ExitCode::FAILURE;
        }
    };
    demo.say(&format!(
        "cluster directory: {} (configs in etc/, daemon logs in log/)",
        cluster.dir.display()
    ));
    let outcome = scenario(&mut demo, &mut cluster);
    let logs = cluster.dir.join("log");
    match &outcome {
        Ok(()) => {
            println!(
                "\n\x1b[1mSummary\x1b[0m: {} checks passed in {:.0}s. Untyped GPU requests under a group QOS are refused with the fix; \
                 lowprio is preempted and requeued without losing its output; MPS shares spread over every GPU, each confined to its own.",
                demo.checks,
                demo.started.elapsed().as_secs_f64()
            );
        }
        Err(e) => println!(
            "\n\x1b[31mThe demo stopped: {e}\x1b[0m\nDaemon logs: {}",
            logs.display()
        ),
    }
    if keep && outcome.is_ok() {
        println!(
            "\nThe cluster keeps running, in a network namespace of its own. In another shell, as root:\n   {}",
            cluster.enter_hint().replace('\n', "\n   ")
        );
        println!("Press Enter (or Ctrl-D) here to stop it.");
        let _ = std::io::stdout().flush();
        let _ = std::io::stdin().lock().lines().next();
    }
    // Keep the logs where the demo said they are.
    let kept = root.with_file_name("demo-logs");
    let _ = fs::remove_dir_all(&kept);
    if fs::create_dir_all(&kept).is_ok() {
        for entry in fs::read_dir(&logs).into_iter().flatten().flatten() {
            let _ = fs::copy(entry.path(), kept.join(entry.file_name()));
        }
        println!("Logs kept in {}", kept.display());
    }
    drop(cluster);
    if outcome.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn scenario(d: &mut Demo, c: &mut Cluster) -> Step {
    d.step(
        1,
        "The typed-limit hole: qos_lafferty may hold 4 a40 (GrpTRES=gres/gpu:a40=4)",
    );
    let check = c.run(&d.sbin("gpu-qos").to_string_lossy(), &["check"])?;
    d.shell("gpu-qos check", &String::from_utf8_lossy(&check.stdout));
    d.check(
        check.status.success(),
        "gpu_qos.conf agrees with the accounting database",
    )?;
    let audit = c.run(&d.sbin("gpu-qos").to_string_lossy(), &["audit"])?;
    d.shell("gpu-qos audit", &String::from_utf8_lossy(&audit.stdout));
    d.check(
        audit.status.code() == Some(0),
        "the audit finds no broken link in the site's QOS design",
    )?;
    let table = c.run(
        &d.sbin("gpu-qos").to_string_lossy(),
        &["audit", "--explain", "--markdown"],
    )?;
    let table_text = String::from_utf8_lossy(&table.stdout);
    d.shell("gpu-qos audit --explain --markdown", &table_text);
    d.check(
        table_text
            .lines()
            .any(|l| l.starts_with("| qos_lafferty |") && l.contains("4 a40")),
        "the users' QOS table says qos_lafferty may hold 4 a40",
    )?;
    let err = c
        .sbatch(&["--qos=qos_lafferty", "--gres=gpu:2", "--wrap=nvidia-smi"])
        .err()
        .unwrap_or_default();
    d.shell(
        "sbatch --qos=qos_lafferty --gres=gpu:2 --wrap=nvidia-smi",
        &err,
    );
    d.check(
        err.contains("--gres=gpu:a40:2"),
        "the untyped request is refused, and the user is told what to type",
    )?;
    let id = c.sbatch_ok(&[
        "--qos=qos_lafferty",
        "--gres=gpu:a40:2",
        "-H",
        "--wrap=nvidia-smi",
    ])?;
    d.shell(
        "sbatch --qos=qos_lafferty --gres=gpu:a40:2 --wrap=nvidia-smi",
        &format!("Submitted batch job {id}"),
    );
    d.check(
        c.job(id)?.tres_request("TresPerNode").as_deref() == Some("gres:gpu:a40:2"),
        "the typed request is accepted unchanged",
    )?;
    c.run_ok("scancel", &[&id.to_string()])?;

    d.step(
        2,
        "lowprio (free, preemptible) fills every GPU; a group job takes one back",
    );
    let run = "--wrap=echo run ${SLURM_RESTART_COUNT:-0} on $(date +%T); sleep 600";
    let mut low = Vec::new();
    for gres in ["a40", "a40", "a40", "a40", "h100", "h100"] {
        low.push(c.sbatch_ok(&["--qos=lowprio", &format!("--gres=gpu:{gres}:1"), run])?);
    }
    for &id in &low {
        c.wait_job_state(id, &["RUNNING"], Duration::from_secs(60))?;
    }
    d.shell(
        "squeue",
        &c.run_ok("squeue", &["-o", "%.5i %.9q %.14b %.8T"])?,
    );
    let requeueable = low.iter().all(|&id| {
        c.job(id)
            .is_ok_and(|j| j.state() == "RUNNING" && j.get("Requeue") == Some("1"))
    });
    d.check(
        requeueable,
        "6 lowprio jobs run on the 4 a40 and 2 h100, made requeueable by the plugin",
    )?;
    let high = c.sbatch_ok(&["--qos=qos_lafferty", "--gres=gpu:a40:1", "--wrap=sleep 600"])?;
    c.wait_job_state(high, &["RUNNING"], Duration::from_secs(60))?;
    let victim = wait_for("a requeued lowprio job", Duration::from_secs(30), || {
        low.iter()
            .copied()
            .find(|&id| c.job(id).is_ok_and(|j| j.restarts() >= 1))
    })?;
    d.shell(
        "squeue",
        &c.run_ok("squeue", &["-o", "%.5i %.9q %.14b %.8T %.10r"])?,
    );
    let preempted = c.job(high)?.state() == "RUNNING" && c.job(victim)?.state() != "RUNNING";
    d.check(
        preempted,
        &format!("qos_lafferty job {high} runs; lowprio job {victim} was preempted and requeued"),
    )?;
    d.say("when the group job ends, the requeued job runs again (after Slurm's requeue delay)...");
    c.run_ok("scancel", &[&high.to_string()])?;
    wait_for("the second run", Duration::from_secs(120), || {
        c.job_output(victim).contains("run 1").then_some(())
    })?;
    let out = c.job_output(victim);
    d.shell(&format!("cat slurm-{victim}.out"), &out);
    d.check(
        out.contains("run 0") && out.contains("run 1"),
        "its output of the first run is kept (append mode set by the plugin)",
    )?;
    c.cancel_all()?;

    d.step(
        3,
        "MPS shares on every a40 of the pool, inside the course reservation",
    );
    // A GPU held whole is never shared (Slurm's books on 23.11+, gpushare's
    // ledger on 22.05): the course gets the a40s back from lowprio first.
    c.run_ok("scancel", &["--qos=lowprio"])?;
    d.shell("scancel --qos=lowprio", "");
    c.create_reservation("jhl_homework_gpu1", 120)?;
    let err = c
        .sbatch(&["--gres=mps:25", "--wrap=true"])
        .err()
        .unwrap_or_default();
    d.shell("sbatch --gres=mps:25 --wrap=true", &err);
    d.check(
        err.contains("--reservation="),
        "a share outside the shared-GPU reservations is refused",
    )?;
    let probe = c.write_device_probe()?;
    let probe_arg = format!(
        "--wrap=echo GPU=$GPUSHARE_GPU PCT=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE CVD=$CUDA_VISIBLE_DEVICES; sh {}; sleep 600",
        probe.display()
    );
    let mut shares = Vec::new();
    for _ in 0..8 {
        shares.push(c.sbatch_ok(&[
            "--reservation=jhl_homework_gpu1",
            "--gres=mps:25",
            &probe_arg,
        ])?);
    }
    d.shell(
        "for i in $(seq 8); do sbatch --reservation=jhl_homework_gpu1 --gres=mps:25 probe.sh; done",
        &format!("Submitted batch jobs {shares:?}"),
    );
    for &id in &shares {
        c.wait_job_state(id, &["RUNNING"], Duration::from_secs(60))?;
    }
    wait_for("the probes", Duration::from_secs(20), || {
        shares
            .iter()
            .all(|&id| printed(c, id).contains_key("dev3"))
            .then_some(())
    })?;
    let status = c.run(
        &d.sbin("gpu-mps").to_string_lossy(),
        &[
            "status",
            "--conf",
            &c.slurm_conf()
                .with_file_name("gpu_mps.conf")
                .to_string_lossy(),
        ],
    )?;
    d.shell("gpu-mps status", &String::from_utf8_lossy(&status.stdout));
    // An interactive share beside the batch ones: two tasks of one srun.
    let step = c.srun(&[
        "--reservation=jhl_homework_gpu1",
        "--gres=mps:25",
        "-n2",
        "sh",
        "-c",
        &format!(
            "echo task $SLURM_PROCID: GPU=$GPUSHARE_GPU PCT=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE $(sh {} | tr '\\n' ' ')",
            probe.display()
        ),
    ])?;
    let step_out = String::from_utf8_lossy(&step.stdout).into_owned();
    d.shell(
        "srun --reservation=jhl_homework_gpu1 --gres=mps:25 -n2 sh -c 'echo GPU=$GPUSHARE_GPU ...; sh probe.sh'",
        &format!("{step_out}{}", String::from_utf8_lossy(&step.stderr)),
    );
    let tasks: Vec<BTreeMap<String, String>> = step_out
        .lines()
        .map(|l| {
            l.split_whitespace()
                .filter_map(|w| w.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
                .collect()
        })
        .collect();
    let step_gpu = tasks
        .first()
        .and_then(|t| t.get("GPU"))
        .cloned()
        .unwrap_or_default();
    let step_ok = tasks.len() == 2
        && tasks.iter().all(|t| {
            let gpu: u32 = t
                .get("GPU")
                .and_then(|g| g.parse().ok())
                .unwrap_or(u32::MAX);
            t.get("GPU") == Some(&step_gpu)
                && t.get("PCT").map(String::as_str) == Some("25")
                && (0..4u32).all(|i| {
                    let want = if i == gpu {
                        "No_such_device_or_address"
                    } else {
                        "Operation_not_permitted"
                    };
                    t.get(&format!("dev{i}")).map(String::as_str) == Some(want)
                })
        });
    d.check(
        step_ok,
        "an interactive srun share: both tasks on one GPU, told 25 %, confined to it",
    )?;
    let mut per_gpu = [0u32; 4];
    let mut confined = true;
    for &id in &shares {
        let p = printed(c, id);
        let gpu: u32 = p
            .get("GPU")
            .and_then(|g| g.parse().ok())
            .ok_or(format!("job {id} printed no GPU"))?;
        if let Some(n) = per_gpu.get_mut(gpu as usize) {
            *n += 1;
        }
        for i in 0..4u32 {
            let want = if i == gpu {
                "No_such_device_or_address"
            } else {
                "Operation_not_permitted"
            };
            confined &= p.get(&format!("dev{i}")).map(String::as_str) == Some(want);
        }
    }
    let first = printed(c, shares[0]);
    d.shell(
        &format!("head -2 slurm-{}.out", shares[0]),
        &c.job_output(shares[0]),
    );
    d.check(
        per_gpu == [2, 2, 2, 2],
        &format!("8 shares of 25 units spread 2 per GPU: {per_gpu:?} (Slurm alone puts all on one GPU with this setup)"),
    )?;
    d.check(
        first.get("PCT").map(String::as_str) == Some("25"),
        "each job is told 25 % of its GPU's SMs (Slurm alone says 6 %)",
    )?;
    d.check(confined, "each job opens its own GPU (ENXIO: no driver behind the fake device) and gets EPERM on the others")?;
    c.cancel_all()?;
    let state = c.dir.join("run/gpu-mps/state");
    let shares_left = || {
        let text = fs::read_to_string(&state).unwrap_or_default();
        LedgerState::parse(&text, &state).map_or(usize::MAX, |s| s.shares().count())
    };
    wait_for(
        "the epilogs to release every share",
        Duration::from_secs(30),
        || (shares_left() == 0).then_some(()),
    )?;
    let empty = shares_left() == 0;
    d.check(empty, "after the jobs end the node's ledger holds no share")?;
    Ok(())
}
