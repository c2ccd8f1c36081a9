//! What gpushare's commands ask of slurmctld on a large site, beside the
//! plain Slurm command a user or admin would type instead.
//!
//! `cargo bench -p gpushare-tests --bench user_commands [-- PENDING RUNNING QOS]`
//! (defaults 20000 2000 200; `make bench` runs it).
//!
//! The multi-node harness's site (`ClusterSpec::example_site_nodes`: three
//! nodes, each a host of its own) with QOS more group QOS (`qos_bNNN`, 4
//! a40 each, all in `gpu_qos.conf`), held among 20 users, each in QOS / 20
//! of them; PENDING held GPU jobs and RUNNING one-CPU sleeping jobs spread
//! over the users and their QOS. Then each command runs 5 times: the
//! median wall time, and what slurmctld answered for it (sdiag's RPC
//! counts and slurmctld's own time per message type, before and after;
//! background RPCs of the idle cluster show as what they are).
//!
//! - `gpu-qos usage` and `why` (a held job) as a user, with slurmdbd's
//!   answers kept from the run before (as a user typing them again within
//!   a minute has them) and with nothing kept, beside `squeue --me` and
//!   `squeue` (every job, which is what `gpu-qos usage` read before);
//! - `gpu-qos why` for a wait on free GPUs (every a40 held by root's
//!   jobs), which reads the running jobs on the nodes with squeue (every
//!   job of the cluster);
//! - `gpu-qos metrics` and `gpu-qos audit` as root, beside `squeue` and
//!   `sacctmgr show qos`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use testcluster::bench_figures::{print_row, Key};
use testcluster::cluster::wait_for;
use testcluster::users::TestUser;
use testcluster::{Cluster, ClusterSpec};

const USERS: usize = 20;
const RUNS: usize = 5;

/// slurmctld's RPC statistics by message type: (count, total µs).
fn sdiag(c: &Cluster) -> Result<BTreeMap<String, (u64, u64)>, String> {
    let text = c.run_ok("sdiag", &[])?;
    let mut out = BTreeMap::new();
    let mut in_types = false;
    for line in text.lines() {
        if line.starts_with("Remote Procedure Call statistics by message type") {
            in_types = true;
            continue;
        }
        if line.starts_with("Remote Procedure Call statistics by user") {
            break;
        }
        if !in_types {
            continue;
        }
        let mut words = line.split_whitespace();
        let Some(name) = words.next() else { continue };
        let field = |key: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .and_then(|v| v.parse::<u64>().ok())
        };
        if let (Some(count), Some(total)) = (field("count:"), field("total_time:")) {
            out.insert(name.to_owned(), (count, total));
        }
    }
    Ok(out)
}

/// What slurmctld answered between two sdiag readings, per run of a
/// command: `REQUEST_JOB_USER_INFO×1 (0.8 ms)`, sdiag's own left out.
fn rpcs_between(
    before: &BTreeMap<String, (u64, u64)>,
    after: &BTreeMap<String, (u64, u64)>,
    runs: u64,
) -> (String, f64) {
    let mut parts = Vec::new();
    let mut total_us = 0;
    for (name, (count, time)) in after {
        if name == "REQUEST_STATS_INFO" {
            continue;
        }
        let (c0, t0) = before.get(name).copied().unwrap_or_default();
        let n = count.saturating_sub(c0);
        if n == 0 {
            continue;
        }
        let us = time.saturating_sub(t0);
        total_us += us;
        let per_run = n as f64 / runs as f64;
        parts.push(format!("{name}×{per_run:.1}"));
    }
    let ms = total_us as f64 / 1000.0 / runs as f64;
    (parts.join(" "), ms)
}

struct Row {
    what: String,
    command: String,
    wall_ms: f64,
    rpcs: String,
    ctld_ms: f64,
}

fn measure(
    c: &Cluster,
    what: &str,
    shown: &str,
    mut run: impl FnMut() -> Result<String, String>,
) -> Result<Row, String> {
    // One untimed run: caches warm, as in a watch loop.
    run()?;
    let before = sdiag(c)?;
    let mut walls = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        run()?;
        walls.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let after = sdiag(c)?;
    walls.sort_by(f64::total_cmp);
    let (rpcs, ctld_ms) = rpcs_between(&before, &after, RUNS as u64);
    Ok(Row {
        what: what.to_owned(),
        command: shown.to_owned(),
        wall_ms: walls[walls.len() / 2],
        rpcs,
        ctld_ms,
    })
}

fn main() -> Result<(), String> {
    let nums: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let pending = nums.first().copied().unwrap_or(20_000);
    let running = nums.get(1).copied().unwrap_or(2_000);
    let qos_count = nums.get(2).copied().unwrap_or(200).max(USERS);
    let qos: Vec<String> = (0..qos_count).map(|k| format!("qos_b{k:03}")).collect();
    let mut spec = ClusterSpec::example_site_nodes();
    for (name, text) in &mut spec.extra_conf_files {
        if name == "gpu_qos.conf" {
            for q in &qos {
                text.push_str(&format!("QOS={q} GPUTypes=a40 GPULimit=4\n"));
            }
        }
    }
    // Room for every job, on nodes that claim CPUs enough to run them.
    spec.conf_overrides.push((
        "MaxJobCount".into(),
        format!("{}", 2 * (pending + running) + 1000),
    ));
    spec.cpus = u32::try_from(running / 3 + 64).unwrap_or(u32::MAX);
    // Submissions are not what is measured here.
    spec.job_submit_plugins.clear();
    eprintln!("starting the site: 3 nodes of {} CPUs", spec.cpus);
    let c = spec.start()?;
    c.run_ok(
        "sacctmgr",
        &["-i", "add", "qos", &qos.join(","), "GrpTRES=gres/gpu:a40=4"],
    )?;
    let mut users = Vec::new();
    for u in 0..USERS {
        let user = TestUser::create(&c, &format!("gpushare_b{u:02}"))?;
        let mine: Vec<&str> = qos
            .iter()
            .skip(u)
            .step_by(USERS)
            .map(String::as_str)
            .collect();
        let mut allowed = vec!["normal"];
        allowed.extend(&mine);
        user.allow_qos(&c, &allowed)?;
        users.push((
            user,
            mine.iter().map(|q| (*q).to_owned()).collect::<Vec<_>>(),
        ));
    }
    // slurmctld learns the associations from slurmdbd on its own time.
    let (last, last_qos) = &users[USERS - 1];
    wait_for(
        "slurmctld to know the users' QOS",
        Duration::from_secs(60),
        || {
            last.run_ok(
                &c,
                None,
                "sbatch",
                &[
                    "-H",
                    "--parsable",
                    &format!("--qos={}", last_qos[0]),
                    "--output=/dev/null",
                    "--wrap=true",
                ],
            )
            .ok()
        },
    )?;
    let started = Instant::now();
    submit(&c, &users, pending, &["-H", "--gres=gpu:a40:1"])?;
    eprintln!(
        "{pending} pending jobs in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    // A wait on free GPUs: root's jobs hold every a40 (started before the
    // running jobs, which fill the first nodes' CPUs), the user's job
    // asks for all four of one node.
    for node in ["gpu01", "gpu02"] {
        let id = c
            .sbatch_ok(&["-w", node, "--gres=gpu:a40:4", "--wrap=sleep 3600"])?
            .to_string();
        wait_for(
            &format!("root's job on {node}'s a40s to run"),
            Duration::from_secs(120),
            || {
                let s = c.run_ok("squeue", &["-h", "-j", &id, "-o", "%T"]).ok()?;
                (s.trim() == "RUNNING").then_some(())
            },
        )?;
    }
    let started = Instant::now();
    submit(&c, &users, running, &["-c1"])?;
    let goal = running;
    wait_for(
        &format!("{running} jobs to run"),
        Duration::from_secs(600),
        || {
            let n = c
                .run_ok("squeue", &["-h", "-t", "R", "-o", "%i"])
                .ok()?
                .lines()
                .count();
            // A job or two may end early (a node's hiccup): 99 % will do.
            (n * 100 >= goal * 99).then_some(())
        },
    )?;
    eprintln!(
        "{running} running jobs in {:.0} s",
        started.elapsed().as_secs_f64()
    );

    let gpu_qos = testcluster::cluster::build_dir()?.join("gpu-qos");
    let gpu_qos = gpu_qos.to_string_lossy();
    let user = &users[0].0;
    let as_user = |program: &str, args: &[&str]| user.run_ok(&c, None, program, args);
    // One of the user's own held jobs.
    let held = as_user("squeue", &["--me", "-h", "-t", "PD", "-o", "%i"])?
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned();
    // The same commands with nothing kept of slurmdbd's answers: each run
    // asks sacctmgr (no cache directory can be made under /proc).
    let uncached = |args: &[&str]| -> Result<String, String> {
        let out = user
            .command(&c, None, &gpu_qos)
            .env("XDG_CACHE_HOME", "/proc/gpushare-no-cache")
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("gpu-qos {args:?}: {out:?}"));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let waiting = user
        .run_ok(
            &c,
            None,
            "sbatch",
            &[
                "--parsable",
                &format!("--qos={}", users[0].1[0]),
                "--gres=gpu:a40:4",
                "--output=/dev/null",
                "--wrap=sleep 60",
            ],
        )?
        .trim()
        .to_owned();
    let mut reason = String::new();
    let _ = wait_for(
        "the user's GPU job to wait for Resources",
        Duration::from_secs(120),
        || {
            reason = c
                .run_ok("squeue", &["-h", "-j", &waiting, "-o", "%T %r"])
                .ok()?
                .trim()
                .to_owned();
            (reason == "PENDING Resources").then_some(())
        },
    );
    // Measured whatever Slurm says, and named so.
    let resources_row = format!("gpu-qos why ({reason})");
    let rows = vec![
        measure(&c, "a user's group usage", "gpu-qos usage", || {
            as_user(&gpu_qos, &["usage"])
        })?,
        measure(&c, "", "gpu-qos usage, nothing kept", || {
            uncached(&["usage"])
        })?,
        measure(&c, "", "squeue --me", || as_user("squeue", &["--me"]))?,
        measure(&c, "one held job explained", "gpu-qos why", || {
            as_user(&gpu_qos, &["why", &held])
        })?,
        measure(&c, "", "gpu-qos why, nothing kept", || {
            uncached(&["why", &held])
        })?,
        measure(&c, "a wait on free GPUs", &resources_row, || {
            as_user(&gpu_qos, &["why", &waiting])
        })?,
        measure(&c, "", "sprio -p (why, Priority)", || {
            as_user("sprio", &["-h", "-p", testcluster::cluster::PARTITION])
        })?,
        measure(&c, "", "squeue (every job)", || as_user("squeue", &[]))?,
        measure(&c, "the controller's metrics", "gpu-qos metrics", || {
            c.run_ok(&gpu_qos, &["metrics"])
        })?,
        // Its exit status says what it found (none of this site's findings
        // matter here), not whether it ran.
        measure(&c, "the site audit", "gpu-qos audit", || {
            c.run(&gpu_qos, &["audit"])
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        })?,
        measure(&c, "", "sacctmgr show qos", || {
            c.run_ok("sacctmgr", &["show", "qos"])
        })?,
    ];
    println!(
        "\nuser and admin commands on {pending} pending + {running} running jobs, {} QOS, {USERS} users, 3 nodes; median of {RUNS} runs",
        qos_count + 8
    );
    println!(
        "{:<26} {:<22} {:>9} {:>12}  RPCs to slurmctld per run",
        "for", "command", "wall ms", "slurmctld ms"
    );
    for r in &rows {
        println!(
            "{:<26} {:<22} {:>9.0} {:>12.1}  {}",
            r.what, r.command, r.wall_ms, r.ctld_ms, r.rpcs
        );
    }
    // Every job ends before the cluster goes: 2,000 running steps take
    // slurmd a while to kill.
    for (u, _) in &users {
        let _ = c.run("scancel", &["--full", "-u", &u.name]);
    }
    let _ = wait_for("every job to end", Duration::from_secs(300), || {
        let left = c.run_ok("squeue", &["-h", "-t", "R,CG", "-o", "%i"]).ok()?;
        left.trim().is_empty().then_some(())
    });
    // make bench's summary lines.
    let cmd = format!(
        "cargo bench -p gpushare-tests --bench user_commands -- {pending} {running} {qos_count}"
    );
    for r in &rows {
        print_row(
            &format!(
                "{} on {pending}+{running} jobs, {} QOS",
                r.command,
                qos_count + 8
            ),
            &format!(
                "{:.0} ms wall, slurmctld {:.1} ms: {}",
                r.wall_ms, r.ctld_ms, r.rpcs
            ),
            &cmd,
            &[
                Key::lower("wall", r.wall_ms, "ms"),
                Key::lower("slurmctld", r.ctld_ms, "ms"),
            ],
        );
    }
    Ok(())
}

/// Submits `n` jobs with `extra` options, spread over the users and each
/// user's QOS, from 4 concurrent clients.
fn submit(
    c: &Cluster,
    users: &[(TestUser, Vec<String>)],
    n: usize,
    extra: &[&str],
) -> Result<(), String> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|k| {
                s.spawn(move || -> Result<(), String> {
                    for i in (k..n).step_by(4) {
                        let (user, qos) = &users[i % users.len()];
                        let q = format!("--qos={}", qos[(i / users.len()) % qos.len()]);
                        let mut args = vec!["--parsable", &q, "--output=/dev/null"];
                        args.extend_from_slice(extra);
                        args.push("--wrap=sleep 3600");
                        user.run_ok(c, None, "sbatch", &args)?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().map_err(|_| "client panicked".to_string())?)
    })
}
