//! The checks of `make hw-check` on GPU 0, in the order they run
//! ([`run_checks`]); each pushes its lines to the report.

use super::*;

/// The GPU, driver and CUDA for the report's heading; GPU 0 set to
/// `DEFAULT` compute mode; the pipe directory where no daemon runs.
pub fn gpu_facts(s: &mut Setup, report: &mut Report) -> Result<(), String> {
    let info = s.smi(&[
        "-i",
        "0",
        "--query-gpu=name,driver_version,memory.total,compute_mode",
        "--format=csv,noheader",
    ]);
    let mut fields = info.trim().split(',').map(str::trim);
    report.gpu = fields.next().unwrap_or_default().to_owned();
    report.driver = fields.next().unwrap_or_default().to_owned();
    report.host = gpushare::shared::locations::short_hostname().unwrap_or_default();
    report.date = run_ok(Path::new("date"), &["-u", "+%Y-%m-%d %H:%M UTC"])
        .map(|d| d.trim().to_owned())
        .unwrap_or_default();
    report.cuda = find_program("nvcc")
        .or_else(|| Some(PathBuf::from("/usr/local/cuda/bin/nvcc")))
        .and_then(|nvcc| run_ok(&nvcc, &["--version"]).ok())
        .and_then(|v| v.lines().find(|l| l.contains("release")).map(str::to_owned))
        .map(|l| one_line(&l))
        .unwrap_or_default();
    let to_default = s.smi(&["-i", "0", "-c", "DEFAULT"]);
    report.push(Check::new(
        "GPU 0",
        Verdict::Seen,
        one_line(&info),
        format!(
            "nvidia-smi -c DEFAULT: {}\n{}\nclient: {}",
            to_default.trim(),
            s.smi(&[]),
            s.compiled
        ),
    ));
    fs::create_dir_all(s.nomps_pipe()).map_err(|e| e.to_string())?;
    fs::set_permissions(s.nomps_pipe(), fs::Permissions::from_mode(0o755))
        .and_then(|()| fs::set_permissions(s.dir.join("nomps"), fs::Permissions::from_mode(0o755)))
        .map_err(|e| e.to_string())
}

pub fn run_checks(s: &mut Setup, report: &mut Report) -> Result<(), String> {
    gpu_facts(s, report)?;
    if s.usage_only {
        usage::share_usage(&usage::Rig::Gpu(s), report);
        return Ok(());
    }
    // First, while GPU 0 is idle: the driver-API client (it needs no
    // nvcc), and the nvcc client's SMs against it.
    selftest::driver_api(s, report);
    // The control program's own help: which multi-user option it takes.
    let mut help = Command::new(&s.control);
    help.arg("-h")
        .env_clear()
        .env("CUDA_MPS_PIPE_DIRECTORY", s.nomps_pipe())
        .env("CUDA_MPS_LOG_DIRECTORY", s.nomps_pipe());
    let help_text = match bounded::run(help, None, daemon::PROBE_TIMEOUT) {
        Ok(r) => format!("{}\n{}{}", r.status, r.stdout, r.stderr),
        Err(e) => e.to_string(),
    };
    let flag = daemon::multi_user_flag(&help_text);
    report.push(Check::new(
        "control program's help (multi-user option)",
        Verdict::Seen,
        match flag {
            Some(f) => format!("`{CONTROL_PROGRAM} -h` documents `{f}`; gpushare starts MultiUser=yes daemons with it"),
            None => format!("`{CONTROL_PROGRAM} -h` names none of -M, --multiuser, -multiuser-server; gpushare falls back to -M"),
        },
        format!("$ {} -h\n{help_text}", s.control.display()),
    ));

    if s.client.is_none() {
        selftest::not_run(report, &selftest::NVCC_CHECKS[..8]);
        // Its clients are the driver API's: no nvcc needed.
        usage::share_usage(&usage::Rig::Gpu(s), report);
        client_cannot_control(s, report)?;
        return last_checks(s, report);
    }

    // Baseline: the same kernel without MPS (no daemon at the pipe directory).
    let base_env = vec![
        ("CUDA_VISIBLE_DEVICES".to_owned(), "0".to_owned()),
        (
            "CUDA_MPS_PIPE_DIRECTORY".to_owned(),
            s.nomps_pipe().to_string_lossy().into_owned(),
        ),
        (
            "CUDA_MPS_LOG_DIRECTORY".to_owned(),
            s.nomps_pipe().to_string_lossy().into_owned(),
        ),
    ];
    let mut base = s.client(0, &base_env, 0, 0)?;
    let base_result = base.wait_event("result", Duration::from_secs(120));
    base.finish(PROGRAM_TIMEOUT);
    let base_ms = base_result
        .as_ref()
        .and_then(|r| r.kernel_ms)
        .filter(|&t| t > 0.0);
    report.push(Check::new(
        "client without MPS (no daemon at its pipe directory)",
        verdict(base_ms.is_some()),
        match &base_result {
            Some(r) => format!(
                "CUDA's MPS attribute {}; kernel {:.1} ms at 100 % of {} SMs",
                shown(r.mps_enabled),
                r.kernel_ms.unwrap_or(-1.0),
                r.sms.unwrap_or(0)
            ),
            None => "no result".into(),
        },
        base.detail(),
    ));

    one_user_per_server(s, report, base_ms)?;
    uuid_client(s, report)?;
    without_mps_beside(s, report, "DEFAULT")?;
    without_mps_beside(s, report, "EXCLUSIVE_PROCESS")?;
    let _ = s.smi(&["-i", "0", "-c", "DEFAULT"]);
    multi_user(s, report, false)?;
    multi_user(s, report, true)?;
    usage::share_usage(&usage::Rig::Gpu(s), report);
    killed_daemon(s, report)?;
    client_cannot_control(s, report)?;
    raised_limits(s, report)?;
    exclusive_and_clients(s, report)?;
    last_checks(s, report)
}

/// No MPS process left after the last epilog; `gpu-mps config`.
fn last_checks(s: &mut Setup, report: &mut Report) -> Result<(), String> {
    let left = daemon::processes_under(&s.dir);
    report.push(Check::new(
        "the last epilog leaves no MPS process",
        verdict(left.is_empty()),
        if left.is_empty() {
            "no nvidia-cuda-mps-control/-server of the check's pipe directories left".into()
        } else {
            format!("left: {left:?}")
        },
        left.iter()
            .map(|&p| format!("{p} {}", cmdline(p)))
            .collect::<Vec<_>>()
            .join("\n"),
    ));
    // Without a Slurm that answers `scontrol --version`, `gpu-mps config`
    // needs a release to write the Slurm lines for; the MPS v3 readiness it
    // reports does not depend on it.
    let conf_arg = s.conf.to_string_lossy().into_owned();
    let gpu_mps = s.bin.join("gpu-mps");
    let config = run_ok(&gpu_mps, &["--conf", &conf_arg, "config"]).or_else(|e| {
        run_ok(
            &gpu_mps,
            &["--conf", &conf_arg, "config", "--release", "24.11"],
        )
        .map(|out| format!("({e}; asked again with --release 24.11)\n{out}"))
    });
    report.push(Check::new(
        "gpu-mps config (MPS v3 readiness)",
        Verdict::Seen,
        config
            .as_ref()
            .map(|c| {
                c.lines()
                    .filter(|l| l.contains("v3") || l.contains("dmem") || l.contains("driver"))
                    .map(one_line)
                    .collect::<Vec<_>>()
                    .join("; ")
            })
            .unwrap_or_else(|e| e.clone()),
        config.unwrap_or_else(|e| e),
    ));
    Ok(())
}

/// One user's share: daemon flags, MPS client, memory limit, thread
/// percentage, set/get on the live server, then a second user's share
/// beside it and `gpu-mps status`.
fn one_user_per_server(
    s: &mut Setup,
    report: &mut Report,
    base_ms: Option<f64>,
) -> Result<(), String> {
    let conf = s.conf.clone();
    let p = s.prolog(&conf, 101, 0, 25);
    let daemon = control_daemon(&conf);
    report.push(Check::new(
        "daemon started by the first share's prolog",
        verdict(p.ok && daemon.is_some()),
        match &daemon {
            Some((pid, cmd)) => format!("pid {pid}: `{cmd}`"),
            None => "no control daemon running".into(),
        },
        p.detail(),
    ));
    let plan = s.plan(&conf, 101)?;
    let limit = plan
        .env
        .iter()
        .find(|(k, _)| k == "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
        .and_then(|(_, v)| v.strip_prefix("0=")?.strip_suffix('M')?.parse::<u64>().ok());
    let mut a1 = s.client(0, &plan.env, limit.map_or(256, |m| m / 2), 25_000)?;
    let ready = a1.wait_event("ready", Duration::from_secs(60));
    let servers = s.control(&conf, &["get_server_list"]).unwrap_or_default();
    let server = daemon::pids(&servers).first().copied();
    let clients = server
        .map(|pid| s.control(&conf, &[&format!("get_client_list {pid}")]))
        .transpose()
        .unwrap_or_else(Some);
    let smi = s.smi(&[]);
    let result = a1.wait_event("result", Duration::from_secs(120));
    let pid = ready.as_ref().map(|r| r.pid);
    let listed = pid.is_some_and(|pid| {
        clients
            .as_deref()
            .is_some_and(|c| daemon::pids(c).contains(&pid))
    });
    let smi_line = pid
        .and_then(|pid| {
            smi.lines()
                .find(|l| l.split_whitespace().any(|w| w == pid.to_string()))
        })
        .map(one_line);
    report.push(Check::new(
        "the job's client is an MPS client",
        verdict(listed || result.as_ref().and_then(|r| r.mps_enabled) == Some(1)),
        format!(
            "client pid {}: in get_client_list of server {}: {listed}; CUDA's MPS attribute: {}; nvidia-smi: {}",
            shown(pid),
            shown(server),
            shown(result.as_ref().and_then(|r| r.mps_enabled)),
            smi_line.as_deref().unwrap_or("(not listed)")
        ),
        format!(
            "first output line: {}\nenvironment: {:?}\nget_server_list: {servers}\nget_client_list: {clients:?}\n{smi}",
            plan.banner, plan.env
        ),
    ));
    let alloc_ok = result.as_ref().and_then(|r| r.alloc.clone());
    report.push(Check::new(
        "an allocation below the memory limit succeeds",
        verdict(alloc_ok.as_deref() == Some("ok")),
        format!(
            "limit {} MiB (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT), cudaMalloc+memset of {} MiB: {}",
            shown(limit),
            shown(limit.map(|m| m / 2)),
            alloc_ok.as_deref().unwrap_or("no result")
        ),
        a1.seen.join("\n"),
    ));
    // Past the limit: the same job's second task.
    let mut above = s.client(0, &plan.env, limit.map_or(1 << 20, |m| m * 3 / 2), 0)?;
    let above_result = above.wait_event("result", Duration::from_secs(60));
    above.finish(PROGRAM_TIMEOUT);
    let above_alloc = above_result.as_ref().and_then(|r| r.alloc.clone());
    report.push(Check::new(
        "an allocation above the memory limit fails",
        verdict(limit.is_some() && above_alloc.as_deref().is_some_and(|a| a != "ok")),
        format!(
            "cudaMalloc of {} MiB: {}",
            shown(limit.map(|m| m * 3 / 2)),
            match limit {
                Some(_) => above_alloc.as_deref().unwrap_or("no result"),
                None => "the job's environment has no memory limit (GPUMemory= unset and NVML not loaded by the prolog?)",
            }
        ),
        above.detail(),
    ));
    let share_ms = result
        .as_ref()
        .and_then(|r| r.kernel_ms)
        .filter(|&t| t > 0.0);
    let ratio = share_ms.zip(base_ms).map(|(a, b)| a / b);
    report.push(Check::new(
        "thread percentage: kernel time at 25 % against 100 %",
        verdict(ratio.is_some_and(|r| r > 1.8)),
        match ratio {
            Some(r) => format!(
                "{:.1} ms against {:.1} ms without MPS: {r:.2}x (4x would be exact); \
                 CUDA reports {} SMs to the share",
                share_ms.unwrap_or(0.0),
                base_ms.unwrap_or(0.0),
                shown(result.as_ref().and_then(|r| r.sms))
            ),
            None => format!(
                "no timing: kernel {}",
                result
                    .as_ref()
                    .and_then(|r| r.kernel.as_deref())
                    .unwrap_or("did not report")
            ),
        },
        String::new(),
    ));

    // A larger share of the same user: the prolog sets the new limits on
    // the running server, in one call; read them back, several in one call.
    let p2 = s.prolog(&conf, 102, 0, 50);
    let asked = server.map(|pid| {
        let lines = [
            "get_default_active_thread_percentage".to_owned(),
            format!("get_active_thread_percentage {pid}"),
            "get_default_device_pinned_mem_limit 0".to_owned(),
            format!("get_device_pinned_mem_limit {pid} 0"),
        ];
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        (lines.join("; "), s.control(&conf, &refs))
    });
    let answers = asked
        .as_ref()
        .and_then(|(_, a)| a.as_ref().ok())
        .cloned()
        .unwrap_or_default();
    let answered = answers.lines().filter(|l| !l.trim().is_empty()).count();
    report.push(Check::new(
        "set_* on the live server, read back with get_* (four commands in one call)",
        verdict(p2.ok && answered >= 4 && answers.lines().take(2).all(|l| l.contains("50"))),
        format!("{answered} answer lines: {}", one_line(&answers)),
        format!(
            "{}\n$ {}\n{:?}",
            p2.detail(),
            asked
                .as_ref()
                .map(|(l, _)| l.as_str())
                .unwrap_or("(no server)"),
            asked.as_ref().map(|(_, a)| a)
        ),
    ));

    // A second user's share on the same GPU (OtherUsers=queue here).
    let p3 = s.prolog(&conf, 201, 1, 20);
    let status = run_ok(
        &s.bin.join("gpu-mps"),
        &["--conf", &conf.to_string_lossy(), "status"],
    );
    report.push(Check::new(
        "gpu-mps status with two users' shares on GPU 0",
        Verdict::Seen,
        status
            .as_ref()
            .map(|t| {
                t.lines()
                    .find(|l| l.contains("USERS-WAIT") || l.contains("MULTI-USER"))
                    .map(one_line)
                    .unwrap_or_else(|| "no GPU marked".into())
            })
            .unwrap_or_else(|e| e.clone()),
        status.unwrap_or_else(|e| e),
    ));
    let plan_b = s.plan(&conf, 201)?;
    let mut b = s.client(1, &plan_b.env, 64, 0)?;
    let b_ready = b.wait_event("ready", s.wait);
    let b_ready_at = b.started.elapsed().as_secs_f64();
    let b_result = b_ready
        .as_ref()
        .and_then(|_| b.wait_event("result", Duration::from_secs(60)));
    a1.finish(Duration::from_secs(60));
    b.finish(PROGRAM_TIMEOUT);
    let a_end = a1
        .done_after_start_of(&b)
        .map_or_else(|| "(unknown)".to_owned(), |t| format!("{t:.1} s"));
    let failed_init = b
        .seen
        .iter()
        .find(|l| l.contains("\"init\":\"cuda") || l.contains("\"init\":\"CUDA"))
        .cloned();
    report.push(Check::new(
        "a second user's client while the first user's server runs",
        Verdict::Seen,
        match (&b_ready, &failed_init) {
            (Some(r), _) => format!(
                "CUDA init took {:.1} s (ready {b_ready_at:.1} s after start); the first user's last client ended {a_end} after it started; then {}",
                r.init_ms / 1000.0,
                b_result.as_ref().map(|r| format!("alloc {}, kernel {} ms", r.alloc.as_deref().unwrap_or("?"), shown(r.kernel_ms))).unwrap_or_else(|| "no result".into())
            ),
            (None, Some(line)) => format!("failed: {line}"),
            (None, None) => format!("still waiting after {} s: killed (the first user's client ended {a_end} after it started)", s.wait.as_secs()),
        },
        format!("first output line: {}\n{}\n{}\n{}", plan_b.banner, p3.detail(), b.detail(), a1.detail()),
    ));
    let mut ends = Vec::new();
    for (job, user) in [(201, 1), (102, 0), (101, 0)] {
        ends.push(s.epilog(&conf, job, user).detail());
    }
    let left = control_daemon(&conf);
    report.push(Check::new(
        "the epilog of the GPU's last share stops its daemon",
        verdict(left.is_none() && daemon::processes_under(&s.dir).is_empty()),
        match left {
            Some((pid, _)) => format!("control daemon {pid} still runs"),
            None => "no MPS process left".into(),
        },
        ends.join("\n"),
    ));
    Ok(())
}

/// A client of the second user that finds no daemon (a pipe directory
/// without one) while the first user's MPS server works, in `mode`.
fn without_mps_beside(s: &mut Setup, report: &mut Report, mode: &str) -> Result<(), String> {
    let conf = s.conf.clone();
    let set = s.smi(&["-i", "0", "-c", mode]);
    let job = if mode == "DEFAULT" { 103 } else { 104 };
    let p = s.prolog(&conf, job, 0, 25);
    let plan = s.plan(&conf, job)?;
    let mut a = s.client(0, &plan.env, 0, 20_000)?;
    let a_result = a.wait_event("result", Duration::from_secs(120));
    let env_b = s.without_mps(&plan.env);
    let mut b = s.client(1, &env_b, 64, 0)?;
    let b_result = b.wait_event("result", Duration::from_secs(60));
    b.finish(PROGRAM_TIMEOUT);
    let b_done = b.done_at.map_or(-1.0, |t| {
        t.saturating_duration_since(b.started).as_secs_f64()
    });
    let a_alive = matches!(a.child.try_wait(), Ok(None));
    a.finish(Duration::from_secs(60));
    let e = s.epilog(&conf, job, 0);
    report.push(Check::new(
        &format!("a second user's client without MPS beside the first user's server, {mode} mode"),
        Verdict::Seen,
        match &b_result {
            Some(r) if r.init.as_deref() == Some("ok") => format!(
                "runs (CUDA's MPS attribute {}), kernel {} ms, done {b_done:.1} s after its start while the first user's client {} (its kernel {} ms alone)",
                shown(r.mps_enabled),
                shown(r.kernel_ms),
                if a_alive { "still ran" } else { "had ended" },
                shown(a_result.as_ref().and_then(|r| r.kernel_ms))
            ),
            Some(r) => format!("fails: {}", r.init.as_deref().unwrap_or("?")),
            None => "no result within 60 s".into(),
        },
        format!("nvidia-smi -c {mode}: {}\n{}\n{}\n{}\n{}", set.trim(), p.detail(), a.detail(), b.detail(), e.detail()),
    ));
    Ok(())
}

/// `MultiUser=yes` (with `ComputeMode=exclusive` where `exclusive`): both
/// users' clients at once on one server.
fn multi_user(s: &mut Setup, report: &mut Report, exclusive: bool) -> Result<(), String> {
    let (conf, name, job) = if exclusive {
        (
            s.conf_multi_exclusive.clone(),
            "MultiUser=yes, ComputeMode=exclusive: two users' clients at once",
            311,
        )
    } else {
        (
            s.conf_multi.clone(),
            "MultiUser=yes: two users' clients at once",
            301,
        )
    };
    let pa = s.prolog(&conf, job, 0, 30);
    let pb = s.prolog(&conf, job + 1, 1, 30);
    let daemon = control_daemon(&conf);
    let mode = s.compute_mode();
    let plan_a = s.plan(&conf, job)?;
    let plan_b = s.plan(&conf, job + 1)?;
    let mut a = s.client(0, &plan_a.env, 64, 10_000)?;
    let mut b = s.client(1, &plan_b.env, 64, 10_000)?;
    let ra = a.wait_event("result", Duration::from_secs(60));
    let rb = b.wait_event("result", Duration::from_secs(60));
    let both_alive =
        matches!(a.child.try_wait(), Ok(None)) && matches!(b.child.try_wait(), Ok(None));
    a.finish(Duration::from_secs(60));
    b.finish(Duration::from_secs(60));
    let ea = s.epilog(&conf, job, 0);
    let eb = s.epilog(&conf, job + 1, 1);
    report.push(Check::new(
        name,
        verdict(ra.is_some() && rb.is_some() && both_alive),
        format!(
            "daemon `{}`, GPU in mode {mode}; first user's kernel {} ms, second user's {} ms, both running together: {both_alive}",
            daemon.map(|(_, c)| c).unwrap_or_else(|| "not running".into()),
            shown(ra.as_ref().and_then(|r| r.kernel_ms)),
            shown(rb.as_ref().and_then(|r| r.kernel_ms))
        ),
        format!("{}\n{}\n{}\n{}\n{}\n{}", pa.detail(), pb.detail(), a.detail(), b.detail(), ea.detail(), eb.detail()),
    ));
    Ok(())
}

/// A job's user, with the pipe directory its tasks are given, sends the
/// daemon control commands (a lower default thread percentage, `quit`):
/// the daemon must refuse both and keep running with its limits.
/// The device a share's client names under its GPU's MPS server, which
/// the prolog starts with the GPU's index: besides `0` (what gpushare and
/// Slurm set), the GPU's UUID, which Slurm 26.05's `Flags=env_uuid` gives
/// jobs, reaches it too (docs/mps.md, "The device a share's tasks name").
fn uuid_client(s: &mut Setup, report: &mut Report) -> Result<(), String> {
    let conf = s.conf.clone();
    let p = s.prolog(&conf, 451, 0, 25);
    let plan = s.plan(&conf, 451)?;
    let gpu = plan.gpu.to_string();
    let uuid = s
        .smi(&["-i", &gpu, "--query-gpu=uuid", "--format=csv,noheader"])
        .trim()
        .to_owned();
    let env: Vec<(String, String)> = plan
        .env
        .iter()
        .map(|(k, v)| {
            let v = if k == "CUDA_VISIBLE_DEVICES" {
                &uuid
            } else {
                v
            };
            (k.clone(), v.clone())
        })
        .collect();
    let mut client = s.client(0, &env, 0, 0)?;
    let result = client.wait_event("result", Duration::from_secs(120));
    client.finish(PROGRAM_TIMEOUT);
    let e = s.epilog(&conf, 451, 0);
    let mps = result.as_ref().and_then(|r| r.mps_enabled);
    report.push(Check::new(
        "a client given its GPU's UUID reaches the MPS server started with the GPU's index",
        verdict(uuid.starts_with("GPU-") && mps == Some(1)),
        format!(
            "CUDA_VISIBLE_DEVICES={uuid}: CUDA's MPS attribute {}; kernel {} ms",
            shown(mps),
            shown(result.as_ref().and_then(|r| r.kernel_ms))
        ),
        format!("{}\n{}\n{}", p.detail(), client.detail(), e.detail()),
    ));
    Ok(())
}

fn client_cannot_control(s: &mut Setup, report: &mut Report) -> Result<(), String> {
    let conf = s.conf.clone();
    let p = s.prolog(&conf, 401, 0, 20);
    let plan = s.plan(&conf, 401)?;
    let before = s.control(&conf, &["get_default_active_thread_percentage"]);
    let user = s.user(0).clone();
    let mut cmd = Command::new(&s.control);
    cmd.env_clear()
        .envs(client_env(&user, &plan.env))
        .current_dir("/")
        .uid(user.uid)
        .gid(user.gid);
    let sent = bounded::run(
        cmd,
        Some(b"set_default_active_thread_percentage 7\nquit\n"),
        PROGRAM_TIMEOUT,
    );
    std::thread::sleep(Duration::from_millis(500));
    let alive = control_daemon(&conf);
    let after = s.control(&conf, &["get_default_active_thread_percentage"]);
    let e = s.epilog(&conf, 401, 0);
    let unchanged = before.is_ok() && before.as_ref().ok() == after.as_ref().ok();
    report.push(Check::new(
        "a job's user cannot send the MPS daemon control commands",
        verdict(alive.is_some() && unchanged),
        format!(
            "as {}: daemon still running: {}; default thread percentage before {}, after {}",
            user.name,
            alive.is_some(),
            before.as_deref().map(str::trim).unwrap_or("?"),
            after.as_deref().map(str::trim).unwrap_or("?")
        ),
        format!(
            "{}\nthe user's control call: {}\n{}",
            p.detail(),
            match &sent {
                Ok(r) => format!("{} {}{}", r.status, r.stdout, r.stderr),
                Err(e) => e.to_string(),
            },
            e.detail()
        ),
    ));
    Ok(())
}

/// `ComputeMode=exclusive`, a share of two tasks, and the epilog's
/// `terminate_client`: the prolog puts GPU 0 in EXCLUSIVE_PROCESS before
/// starting its daemon; each of the two tasks gets half the share's
/// memory (both allocate 80 % of their half at once; a third client asks
/// for 120 % of a half, which its limit refuses); a second user's client
/// without MPS tries the GPU meanwhile; the epilog, while both tasks still
/// run, terminates them (they name the job in `SLURM_JOB_ID`) and gives
/// the GPU back the mode it had.
fn exclusive_and_clients(s: &mut Setup, report: &mut Report) -> Result<(), String> {
    let conf = s.conf_exclusive.clone();
    let job = 501;
    let before = s.compute_mode();
    let p = s.prolog(&conf, job, 0, 50);
    let during = s.compute_mode();
    let cfg = load(&conf)?;
    let ledger = Ledger::open(&cfg.state_dir, 0).map_err(|e| e.to_string())?;
    let plan = task_plan(&cfg, &ledger, job, true, 2)?
        .ok_or_else(|| format!("job {job} holds no share"))?;
    let task_mib = memory_mib(&plan.env);
    let mut env = plan.env.clone();
    env.push(("SLURM_JOB_ID".to_owned(), job.to_string()));
    let mut tasks = [
        s.client(0, &env, task_mib * 8 / 10, 60_000)?,
        s.client(0, &env, task_mib * 8 / 10, 60_000)?,
    ];
    let results: Vec<Option<ClientLine>> = tasks
        .iter_mut()
        .map(|t| t.wait_event("result", Duration::from_secs(120)))
        .collect();
    let mut over = s.client(0, &env, task_mib * 12 / 10, 0)?;
    let over_result = over.wait_event("result", Duration::from_secs(60));
    over.finish(PROGRAM_TIMEOUT);
    let mut outside = s.client(1, &s.without_mps(&plan.env), 64, 0)?;
    let outside_result = outside.wait_event("result", Duration::from_secs(60));
    outside.finish(PROGRAM_TIMEOUT);
    let clients = s.control(&conf, &["get_server_list"]);
    let epilog_at = Instant::now();
    let e = s.epilog(&conf, job, 0);
    for t in &mut tasks {
        t.finish(Duration::from_secs(30));
    }
    let ended: Vec<String> = tasks
        .iter()
        .map(|t| match t.done_at {
            Some(at) => format!(
                "ended {:.1} s after the epilog started",
                at.saturating_duration_since(epilog_at).as_secs_f64()
            ),
            None => "still ran 30 s after the epilog (killed)".to_owned(),
        })
        .collect();
    let after = s.compute_mode();
    let alloc = |r: &Option<ClientLine>| {
        r.as_ref()
            .and_then(|r| r.alloc.clone())
            .unwrap_or_else(|| "no result".into())
    };
    let halves_ok = results.iter().all(|r| alloc(r) == "ok");
    let over_refused = alloc(&over_result) != "ok";
    report.push(Check::new(
        "ComputeMode=exclusive, a two-task share, clients ended by the epilog",
        verdict(
            during.eq_ignore_ascii_case("Exclusive_Process")
                && halves_ok
                && over_refused
                && after.eq_ignore_ascii_case(&before),
        ),
        format!(
            "mode {before} -> {during} while shared -> {after}; each task's limit {task_mib} MiB:              80 % in both tasks at once {}, 120 % {}; a second user's client without MPS: {};              the two tasks {}",
            if halves_ok { "allocated" } else { "FAILED" },
            if over_refused { "refused" } else { "ALLOWED" },
            match &outside_result {
                Some(r) if r.init.as_deref() == Some("ok") => "ran".to_owned(),
                Some(r) => format!("failed: {}", r.init.as_deref().unwrap_or("?")),
                None => "no result".to_owned(),
            },
            ended.join(", ")
        ),
        format!(
            "{}
servers: {}
{}
{}
{}
{}
{}
{}",
            p.detail(),
            clients.unwrap_or_else(|e| e),
            tasks[0].detail(),
            tasks[1].detail(),
            over.detail(),
            outside.detail(),
            e.detail(),
            plan.banner
        ),
    ));
    Ok(())
}

/// A job's task that edits its environment: its thread percentage and
/// memory limit raised past its share's, then both unset. The server's
/// limits (the largest share's on the GPU) must hold: CUDA reports no more
/// SMs than to the share's own task, and an allocation past the share's
/// memory fails.
fn raised_limits(s: &mut Setup, report: &mut Report) -> Result<(), String> {
    let conf = s.conf.clone();
    let job = 601;
    let p = s.prolog(&conf, job, 0, 25);
    let plan = s.plan(&conf, job)?;
    let limit = memory_mib(&plan.env);
    const THREADS: &str = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";
    const MEMORY: &str = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";
    let raised: Vec<(String, String)> = plan
        .env
        .iter()
        .map(|(k, v)| match k.as_str() {
            THREADS => (k.clone(), "100".to_owned()),
            MEMORY => (k.clone(), format!("0={}M", limit * 4)),
            _ => (k.clone(), v.clone()),
        })
        .collect();
    let unset: Vec<(String, String)> = plan
        .env
        .iter()
        .filter(|(k, _)| k != THREADS && k != MEMORY)
        .cloned()
        .collect();
    let mut seen = vec![p.detail()];
    let mut run = |env: &[(String, String)]| -> Result<Option<ClientLine>, String> {
        let mut c = s.client(0, env, limit * 3 / 2, 0)?;
        let r = c.wait_event("result", Duration::from_secs(60));
        c.finish(PROGRAM_TIMEOUT);
        seen.push(c.detail());
        Ok(r)
    };
    let own = run(&plan.env)?;
    let up = run(&raised)?;
    let none = run(&unset)?;
    seen.push(s.epilog(&conf, job, 0).detail());
    let sms = |r: &Option<ClientLine>| r.as_ref().and_then(|r| r.sms);
    let alloc = |r: &Option<ClientLine>| {
        r.as_ref()
            .and_then(|r| r.alloc.clone())
            .unwrap_or_else(|| "no result".into())
    };
    let held = |r: &Option<ClientLine>| {
        sms(r).is_some() && sms(r) <= sms(&own) && alloc(r) != "ok" && alloc(r) != "no result"
    };
    report.push(Check::new(
        "a task that raises or unsets its limits in its environment",
        verdict(limit > 0 && held(&up) && held(&none)),
        format!(
            "share of 25 units, {limit} MiB: its own environment {} SMs; raised to 100 % and \
             {} MiB: {} SMs, cudaMalloc of {} MiB: {}; both unset: {} SMs, {}",
            shown(sms(&own)),
            limit * 4,
            shown(sms(&up)),
            limit * 3 / 2,
            alloc(&up),
            shown(sms(&none)),
            alloc(&none)
        ),
        seen.join("\n"),
    ));
    Ok(())
}

/// `kill -9` of the daemon: the next share's prolog finds it dead and
/// starts a new one, which serves the job.
fn killed_daemon(s: &mut Setup, report: &mut Report) -> Result<(), String> {
    let conf = s.conf.clone();
    let p1 = s.prolog(&conf, 105, 0, 20);
    let first = control_daemon(&conf);
    if let Some((pid, _)) = &first {
        daemon::kill_all(&[*pid]);
        std::thread::sleep(Duration::from_millis(500));
    }
    let p2 = s.prolog(&conf, 106, 0, 20);
    let second = control_daemon(&conf);
    let plan = s.plan(&conf, 106)?;
    let mut c = s.client(0, &plan.env, 64, 0)?;
    let r = c.wait_event("result", Duration::from_secs(60));
    c.finish(PROGRAM_TIMEOUT);
    let e1 = s.epilog(&conf, 105, 0);
    let e2 = s.epilog(&conf, 106, 0);
    let restarted = p2.text.contains("restarted");
    report.push(Check::new(
        "a daemon killed with kill -9 is restarted by the next prolog",
        verdict(
            first.is_some()
                && second.as_ref().map(|d| d.0) != first.as_ref().map(|d| d.0)
                && second.is_some()
                && restarted
                && r.as_ref().and_then(|r| r.init.as_deref()) == Some("ok"),
        ),
        format!(
            "killed {}; next prolog: {}; new daemon {}; the job's client {}",
            shown(first.as_ref().map(|d| d.0)),
            if restarted {
                "says restarted"
            } else {
                "says nothing of a restart"
            },
            shown(second.as_ref().map(|d| d.0)),
            if r.is_some() { "ran" } else { "did not run" }
        ),
        format!(
            "{}\n{}\n{}\n{}\n{}",
            p1.detail(),
            p2.detail(),
            c.detail(),
            e1.detail(),
            e2.detail()
        ),
    ));
    Ok(())
}
