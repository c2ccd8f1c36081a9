//! `make demo`: gpushare end to end on a throwaway cluster of three nodes,
//! narrated.
//!
//! `gpushare-demo --root DESTDIR [--keep]` runs against what
//! `make install DESTDIR=... PREFIX=/usr PLUGINDIR=/usr/lib/gpushare` put
//! under DESTDIR (the same install step a sysadmin uses): the example site's
//! group QOS with typed GrpTRES and a free preemptible `lowprio`, on three
//! nodes, each a host of its own (`ClusterSpec::example_site_nodes`): `gpu01`
//! (configless) and `gpu02` with 4 a40 each, also an MPS pool, and `gpu03`
//! with 2 h100 (fake devices). Every expected outcome is checked; the first
//! one that fails stops the demo with a non-zero exit status. Daemon logs
//! stay in the directory it names.

use gpushare::mps::ledger::LedgerState;
use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use testcluster::cluster::{wait_for, EXAMPLE_GPU_QOS_CONF};
use testcluster::time::{Timeout, JOB_END, JOB_LONG, JOB_START, SHORT};
use testcluster::users::TestUser;
use testcluster::{Cluster, ClusterSpec};

/// slurmctld learns a user's new default QOS from slurmdbd on its own time.
const DEFAULT_QOS_KNOWN: Timeout = Timeout::secs(60);

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

    /// An installed command: gpu-qos in usr/bin (every user's), the
    /// others in usr/sbin.
    fn installed(&self, name: &str) -> PathBuf {
        let dir = if name == "gpu-qos" {
            "usr/bin"
        } else {
            "usr/sbin"
        };
        self.root.join(dir).join(name)
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
    if !examples.join("gpu_qos.conf.example").is_file() {
        return Err(format!(
            "{}: no gpu_qos.conf.example (run `make demo`, which installs first)",
            examples.display()
        ));
    }
    let mut spec = ClusterSpec::example_site_nodes();
    spec.installed_plugin_dir = Some(plugins.clone());
    spec.prolog = Some(libexec.join("gpu-mps-prolog"));
    spec.epilog = Some(libexec.join("gpu-mps-epilog"));
    // Each node's gpu_mps.conf is in its own /etc/slurm (gpu01 is
    // configless): the SPANK line names none.
    spec.plugstack = vec![format!("required {}/spank_gpu_mps.so", plugins.display())];
    // The example site's policy (installed commented out, as an example
    // of the keys): shares only in the course reservations.
    spec.extra_conf_files = vec![("gpu_qos.conf".into(), EXAMPLE_GPU_QOS_CONF.into())];
    spec.extra_slurm_conf.extend([
        "PriorityWeightTRES=GRES/gpu=2000".into(),
        "PriorityDecayHalfLife=7-0".into(),
    ]);
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
        "Starting a throwaway cluster: munged, MariaDB, slurmdbd, slurmctld, and a slurmd on each of three nodes",
    );
    let mut cluster = match spec.start() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("the cluster did not start:\n{e}");
            return ExitCode::FAILURE;
        }
    };
    demo.say(&format!(
        "cluster directory: {} (configs in etc/, daemon logs in log/, each node's own files in nodes/<name>/)",
        cluster.dir.display()
    ));
    demo.say("gpu01 (4 a40, MPS pool, configless), gpu02 (4 a40, MPS pool), gpu03 (2 h100): each its own host, with its own address, /run, /etc/slurm and GPUs");
    let outcome = scenario(&mut demo, &mut cluster);
    let logs = cluster.dir.join("log");
    match &outcome {
        Ok(()) => {
            println!(
                "\n\x1b[1mSummary\x1b[0m: {} checks passed in {:.0}s on three nodes. Untyped GPU requests under a group QOS, named or fallen back to, are refused with the fix; \
                 lowprio is preempted and requeued on the node where the group's GPUs are, without losing its output; MPS shares spread over \
                 every GPU of two nodes, each confined to its own.",
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
        // Each node's own logs (slurmd, syslog) in a folder of its name.
        for node in cluster.node_names() {
            let dir = cluster.node_dir(&node).join("log");
            let into = kept.join(&node);
            if fs::create_dir_all(&into).is_ok() {
                for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
                    if entry.path().extension().is_none_or(|e| e != "sock") {
                        let _ = fs::copy(entry.path(), into.join(entry.file_name()));
                    }
                }
            }
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
    let check = c.run(&d.installed("gpu-qos").to_string_lossy(), &["check"])?;
    d.shell("gpu-qos check", &String::from_utf8_lossy(&check.stdout));
    d.check(
        check.status.success(),
        "gpu_qos.conf agrees with the accounting database",
    )?;
    let audit = c.run(&d.installed("gpu-qos").to_string_lossy(), &["audit"])?;
    d.shell("gpu-qos audit", &String::from_utf8_lossy(&audit.stdout));
    d.check(
        audit.status.code() == Some(0),
        "the audit finds no broken link in the site's QOS design",
    )?;
    let table = c.run(
        &d.installed("gpu-qos").to_string_lossy(),
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
    // The same hole where the group's QOS is the user's default.
    let dora = TestUser::create(c, "dora")?;
    dora.allow_qos_by_default(c, &["normal", "qos_lafferty"], "qos_lafferty")?;
    // slurmctld learns dora's default from slurmdbd on its own time.
    let mut answer = String::new();
    let refused = wait_for("dora's default QOS to be judged", DEFAULT_QOS_KNOWN, || {
        let out = dora
            .run(
                c,
                None,
                "sbatch",
                &["-H", "--gres=gpu:2", "--wrap=nvidia-smi"],
            )
            .ok()?;
        answer = String::from_utf8_lossy(if out.status.success() {
            &out.stdout
        } else {
            &out.stderr
        })
        .into_owned();
        if out.status.success() {
            let _ = c.run("scancel", &["-u", "dora"]);
        }
        answer
            .contains("Your default QOS qos_lafferty")
            .then_some(())
    });
    d.shell(
        "sbatch --gres=gpu:2 --wrap=nvidia-smi    # as dora, whose DefaultQOS is qos_lafferty",
        &answer,
    );
    d.check(
        refused.is_ok() && answer.contains("--gres=gpu:a40:2"),
        "a job naming no QOS is judged by the group QOS it falls back to",
    )?;

    d.step(
        2,
        "lowprio (free, preemptible) fills every GPU of the three nodes; a group job takes one back",
    );
    let run = "--wrap=echo run ${SLURM_RESTART_COUNT:-0} on $(hostname) at $(date +%T); sleep 600";
    let mut low = Vec::new();
    for (node, gres, n) in [
        ("gpu01", "a40", 4),
        ("gpu02", "a40", 4),
        ("gpu03", "h100", 2),
    ] {
        for _ in 0..n {
            low.push(c.sbatch_ok(&[
                "--qos=lowprio",
                "-w",
                node,
                &format!("--gres=gpu:{gres}:1"),
                run,
            ])?);
        }
    }
    for &id in &low {
        c.wait_job_state(id, &["RUNNING"], JOB_START)?;
    }
    d.shell(
        "squeue",
        &c.run_ok("squeue", &["-o", "%.5i %.9q %.14b %.8T %N"])?,
    );
    let requeueable = low.iter().all(|&id| {
        c.job(id)
            .is_ok_and(|j| j.state() == "RUNNING" && j.get("Requeue") == Some("1"))
    });
    d.check(
        requeueable,
        "10 lowprio jobs run on the 8 a40 of gpu01 and gpu02 and the 2 h100 of gpu03, made requeueable by the plugin",
    )?;
    // Submitted from a shell on gpu03, as from any node of the cluster.
    let high = c
        .run_on(
            "gpu03",
            "sbatch",
            &[
                "--parsable",
                "--qos=qos_lafferty",
                "--gres=gpu:a40:1",
                &format!("--output={}/%j.out", c.jobs_dir.display()),
                "--wrap=sleep 600",
            ],
        )
        .map_err(|e| e.to_string())
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse::<u32>()
                .map_err(|_| format!("sbatch on gpu03: {}", String::from_utf8_lossy(&o.stderr)))
        })?;
    d.shell(
        "gpu03$ sbatch --qos=qos_lafferty --gres=gpu:a40:1 --wrap='sleep 600'",
        &format!("Submitted batch job {high}"),
    );
    let high_node = c
        .wait_job_state(high, &["RUNNING"], JOB_START)?
        .get("NodeList")
        .unwrap_or_default()
        .to_owned();
    let victim = wait_for("a requeued lowprio job", SHORT, || {
        low.iter()
            .copied()
            .find(|&id| c.job(id).is_ok_and(|j| j.restarts() >= 1))
    })?;
    d.shell(
        "squeue",
        &c.run_ok("squeue", &["-o", "%.5i %.9q %.14b %.8T %.10r %N"])?,
    );
    let victim_out = c.job_output(victim);
    let victim_node = victim_out
        .split_whitespace()
        .skip_while(|w| *w != "on")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    let preempted = c.job(high)?.state() == "RUNNING"
        && c.job(victim)?.state() != "RUNNING"
        && victim_node == high_node;
    d.check(
        preempted,
        &format!(
            "qos_lafferty job {high}, submitted on gpu03, runs on {high_node}, where lowprio job {victim} (on {victim_node}) was preempted and requeued"
        ),
    )?;
    d.say("when the group job ends, the requeued job runs again (after Slurm's requeue delay)...");
    c.run_ok("scancel", &[&high.to_string()])?;
    wait_for("the second run", JOB_LONG, || {
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
        "MPS shares on every a40 of gpu01 and gpu02, inside the course reservation",
    );
    c.run_ok(
        "scontrol",
        &[
            "create",
            "reservation",
            "ReservationName=jhl_homework_gpu1",
            "Users=root",
            "Nodes=gpu01,gpu02",
            "StartTime=now",
            "Duration=120",
            "Flags=ignore_jobs",
        ],
    )?;
    d.shell(
        "scontrol create reservation ReservationName=jhl_homework_gpu1 Nodes=gpu01,gpu02 ...",
        "",
    );
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
    for node in ["gpu01", "gpu02"] {
        for _ in 0..8 {
            shares.push((
                node,
                c.sbatch_ok(&[
                    "--reservation=jhl_homework_gpu1",
                    "-w",
                    node,
                    "--gres=mps:25",
                    &probe_arg,
                ])?,
            ));
        }
    }
    d.shell(
        "for n in gpu01 gpu02; do for i in $(seq 8); do sbatch --reservation=jhl_homework_gpu1 -w $n --gres=mps:25 probe.sh; done; done",
        &format!(
            "Submitted batch jobs {:?}",
            shares.iter().map(|s| s.1).collect::<Vec<_>>()
        ),
    );
    for &(_, id) in &shares {
        c.wait_job_state(id, &["RUNNING"], JOB_START)?;
    }
    wait_for("the probes", SHORT, || {
        shares
            .iter()
            .all(|&(_, id)| printed(c, id).contains_key("dev3"))
            .then_some(())
    })?;
    for node in ["gpu01", "gpu02"] {
        let status = c.run_on(node, &d.installed("gpu-mps").to_string_lossy(), &["status"])?;
        d.shell(
            &format!("{node}$ gpu-mps status"),
            &String::from_utf8_lossy(&status.stdout),
        );
    }
    // An interactive share beside the batch ones: two tasks of one srun.
    let step = c.srun(&[
        "--reservation=jhl_homework_gpu1",
        "-w",
        "gpu01",
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
        "srun --reservation=jhl_homework_gpu1 -w gpu01 --gres=mps:25 -n2 sh -c 'echo GPU=$GPUSHARE_GPU ...; sh probe.sh'",
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
    let mut per_gpu: BTreeMap<&str, [u32; 4]> = BTreeMap::new();
    let mut confined = true;
    for &(node, id) in &shares {
        let p = printed(c, id);
        let gpu: u32 = p
            .get("GPU")
            .and_then(|g| g.parse().ok())
            .ok_or(format!("job {id} printed no GPU"))?;
        if let Some(n) = per_gpu.entry(node).or_default().get_mut(gpu as usize) {
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
    let first = printed(c, shares[0].1);
    d.shell(
        &format!("head -2 slurm-{}.out", shares[0].1),
        &c.job_output(shares[0].1),
    );
    d.check(
        per_gpu.values().all(|n| *n == [2, 2, 2, 2]) && per_gpu.len() == 2,
        &format!("8 shares of 25 units on each of gpu01 and gpu02, 2 per GPU: {per_gpu:?}"),
    )?;
    d.check(
        first.get("PCT").map(String::as_str) == Some("25"),
        "each job is told 25 % of its GPU's SMs (Slurm alone says 6 %)",
    )?;
    d.check(confined, "each job opens its own GPU (ENXIO: no driver behind the fake device) and gets EPERM on the others")?;
    c.cancel_all()?;
    let shares_left = || {
        c.node_names()
            .iter()
            .map(|n| {
                let state = c.node_dir(n).join("run/gpu-mps/state");
                let text = fs::read_to_string(&state).unwrap_or_default();
                LedgerState::parse(&text, &state).map_or(usize::MAX, |s| s.shares().count())
            })
            .sum::<usize>()
    };
    wait_for("the epilogs to release every share", JOB_END, || {
        (shares_left() == 0).then_some(())
    })?;
    let empty = shares_left() == 0;
    d.check(
        empty,
        "after the jobs end every node's ledger holds no share",
    )?;
    Ok(())
}
