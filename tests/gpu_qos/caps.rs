//! The per-type caps (`MaxGPUsPerJob=`, `MaxCPUsPerGPU=`,
//! `MaxTasksPerGPU=`, `MaxMemPerGPU=`) at submission and after updates,
//! judged by what slurmctld holds. A module of `gpu_qos.rs` (its
//! helpers), in a file of its own.

use super::*;

/// The caps of this file's test.
const CAPS: &str = "MaxGPUsPerJob=a40:2\nMaxCPUsPerGPU=a40:8\nMaxTasksPerGPU=a40:4\n\
                    MaxMemPerGPU=a40:2G\n";

/// Per-type caps: each accepted job's record, as slurmctld holds it,
/// within the caps (its a40s, its CPUs and, where it asked for memory,
/// its memory per a40); each refused one told `[GQ111]` and why; the
/// line a spread refusal gives is accepted as it says.
pub(super) fn type_caps(c: &mut Cluster) -> TestResult {
    install_and_wait(c, &format!("{EXAMPLE_GPU_QOS_CONF}{CAPS}"))?;
    let result = judge_type_caps(c);
    install_conf(c, EXAMPLE_GPU_QOS_CONF)?;
    result
}

/// A number of a TRES list's `key=` (`mem=2G` in MB).
fn tres_figure(tres: &str, key: &str) -> Option<u64> {
    let value = tres
        .split(',')
        .find_map(|e| e.strip_prefix(key)?.strip_prefix('='))?;
    gpushare::qos::config::megabytes(value).or_else(|| value.parse().ok())
}

fn judge_type_caps(c: &Cluster) -> TestResult {
    // (arguments, whether they ask for memory)
    let within: &[(&[&str], bool)] = &[
        (&["--gres=gpu:a40:2", "-c", "16"], false),
        (
            &["--gpus=a40:1", "--cpus-per-gpu=8", "--mem-per-gpu=2G"],
            true,
        ),
        (&["-N", "1", "-n", "4", "--gres=gpu:a40:1"], false),
        (&["-N", "1", "-n", "2", "--gres=gpu:a40:2"], false),
        (&["--gres=gpu:a40:2", "--mem=4G"], true),
        (&["--gres=gpu:a40:1", "--mem-per-cpu=512M", "-c", "4"], true),
        // Untyped GPUs have no type to cap.
        (&["--gres=gpu:3"], false),
    ];
    for (args, asks_mem) in within {
        let id = accepted(c, args)?;
        let job = c.job(id)?;
        let tres = job.tres().to_owned();
        let a40 = tres_figure(&tres, "gres/gpu:a40");
        let cpus = tres_figure(&tres, "cpu");
        let mem = tres_figure(&tres, "mem");
        let fits = match (a40, cpus) {
            (Some(g), Some(cpu)) => {
                g <= 2 && cpu <= 8 * g && (!asks_mem || mem.is_some_and(|m| m <= 2048 * g))
            }
            // The untyped case: no a40 held.
            (None, Some(_)) => args.iter().all(|a| !a.contains("a40")),
            _ => false,
        };
        ensure(
            fits,
            format!(
                "`sbatch {}` is held as {tres}: over the caps",
                args.join(" ")
            ),
        )?;
        c.run_ok("scancel", &[&id.to_string()])?;
    }
    let over: &[(&[&str], &[&str])] = &[
        (
            &["--gres=gpu:a40:3"],
            &["MaxGPUsPerJob=a40:2", "--gpus=a40:2"],
        ),
        (
            &["-n", "2", "--gres=gpu:a40:2"],
            &["up to 2 nodes", "--nodes=1"],
        ),
        (&["-N", "2", "--gres=gpu:a40:2"], &["can hold 4 a40"]),
        (
            &["--gres=gpu:a40:1", "-c", "9"],
            &["9 CPUs", "MaxCPUsPerGPU=a40:8"],
        ),
        (
            &["--gres=gpu:a40:1", "--cpus-per-gpu=9"],
            &["--cpus-per-gpu=8"],
        ),
        (&["--gres=gpu:a40:1", "--mincpus=9"], &["MaxCPUsPerGPU"]),
        (&["-N", "1", "-n", "5", "--gres=gpu:a40:1"], &["5 tasks"]),
        (
            &["--gres=gpu:a40:1", "--mem=3G"],
            &["3G of memory", "--mem-per-gpu=2G"],
        ),
        (
            &["--gres=gpu:a40:1", "--mem-per-cpu=1G", "-c", "3"],
            &["MaxMemPerGPU"],
        ),
        (
            &["--gres=gpu:a40:1", "--mem=0"],
            &["--mem=0 holds all the memory"],
        ),
        (
            &["--gres=gpu:a40:1", "--exclusive"],
            &["--exclusive holds every CPU"],
        ),
    ];
    for (args, words) in over {
        let err = rejected(c, args)?;
        contains_all(&err, &["[GQ111]"])?;
        contains_all(&err, words)?;
    }
    caps_after_updates(c)
}

/// A user's updates of a pending job (`NumCPUs=`, `NumNodes=`,
/// `MinMemoryNode=`, `Gres=`), which carry only what they change: each
/// that takes the job over a cap gets it held as an administrator holds it
/// (its user cannot release it), told why in its `AdminComment`; the
/// update back within the cap releases it. A job without a typed GPU is
/// never held. Each job's name repeats Slurm's words to look smaller.
fn caps_after_updates(c: &Cluster) -> TestResult {
    let user = TestUser::create(c, "gpushare_capu")?;
    user.allow_qos_by_default(c, &["normal"], "normal")?;
    let submit = |gres: &str| {
        user.sbatch(
            c,
            &[
                "--begin=now+3600",
                "-o",
                "/dev/null",
                // Slurm's words in the user's own: fewer CPUs, more GPUs,
                // no memory. They must hide nothing.
                "--job-name=x TRES=cpu=1,gres/gpu=9 NumCPUs=1 NumTasks=1 MinMemoryNode=0",
                "-c",
                "2",
                &format!("--gres={gres}"),
                "--wrap=true",
            ],
        )
    };
    let shown = |id: u32| -> String {
        c.run_ok("scontrol", &["-o", "show", "job", &id.to_string()])
            .unwrap_or_default()
    };
    let held = |text: &str| text.contains(" Reason=JobHeldAdmin ");
    let update = |id: u32, words: &[&str]| -> TestResult {
        let mut args = vec!["update".to_owned(), format!("JobId={id}")];
        args.extend(words.iter().map(|w| (*w).to_owned()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = user.run(c, None, "scontrol", &args)?;
        ensure(
            out.status.success(),
            format!("`scontrol {}` was refused: {out:?}", args.join(" ")),
        )
    };
    let untyped = submit("gpu:1")?;
    update(untyped, &["NumCPUs=16"])?;
    // (the update over a cap, the words of the hold, the update back)
    let cases: &[(&[&str], &str, &[&str])] = &[
        (
            &["NumCPUs=16"],
            "it holds 16 CPUs with 1 GPU(s)",
            &["NumCPUs=8"],
        ),
        (&["NumNodes=3"], "it can hold 3 a40", &["NumNodes=1"]),
        (
            &["MinMemoryNode=3000"],
            "it holds 3000M of memory with 1 GPU(s), more than MaxMemPerGPU=a40:2G",
            &["MinMemoryNode=2000"],
        ),
        (
            &["Gres=gpu:a40:3"],
            "it can hold 3 a40",
            &["Gres=gpu:a40:1"],
        ),
    ];
    for (over, words, back) in cases {
        let id = submit("gpu:a40:1")?;
        update(id, over)?;
        wait_for(
            &format!("job {id} updated with {over:?} to be held"),
            SHORT,
            || {
                let text = shown(id);
                (held(&text) && text.contains(&format!(" AdminComment=gpushare: held: {words}")))
                    .then_some(())
            },
        )
        .map_err(|e| format!("{e}: {}", shown(id)))?;
        let release = user.run(c, None, "scontrol", &["release", &id.to_string()])?;
        ensure(
            !release.status.success() && held(&shown(id)),
            format!("its user released gpushare's hold: {release:?}"),
        )?;
        // Its user asks why it waits: gpu-qos points at the hold's words.
        let why = user.why_now(c, id)?;
        ensure(
            why.summary.contains("by gpushare after an update")
                && why
                    .see
                    .iter()
                    .any(|s| s == &format!("scontrol show job {id}")),
            format!("gpu-qos why {id} on gpushare's hold: {why:#?}"),
        )?;
        update(id, back)?;
        wait_for(
            &format!("job {id} updated back with {back:?} to be released"),
            SHORT,
            || {
                let text = shown(id);
                (!held(&text) && !text.contains("gpushare: held")).then_some(())
            },
        )
        .map_err(|e| format!("{e}: {}", shown(id)))?;
        c.run_ok("scancel", &[&id.to_string()])?;
    }
    let text = shown(untyped);
    ensure(
        !held(&text),
        format!("a job without a typed GPU was held: {text}"),
    )?;
    c.run_ok("scancel", &[&untyped.to_string()]).map(drop)
}
