//! The low-priority QOS's array cap (`LowPriorityMaxArrayTasks=8` in the
//! example file) as Slurm holds it. Each accepted array under `lowprio`
//! must run at most 8 tasks at once: at once after a submission, within
//! seconds after any update (gpushare reads the array back once the
//! update is done). What is tried:
//!
//! - specs Slurm reads after their first `%` (`0-19%100%5` runs 100);
//! - the owner's updates of `ArrayTaskThrottle`, each on an array of its
//!   own: values slurmctld reads with `strtoll` (`0x`, `+0`, `100abc`),
//!   the array's tasks as the id, a name holding ` QOS=normal`;
//! - an array whose answer to `scontrol show job` is over 1 MiB, its
//!   pending tasks' record (the one with the throttle) anywhere in it;
//! - the read-back's first `scontrol` left unanswered (slurmctld too busy
//!   for that one call);
//! - throttles that must stand: the owner's own lower one on an array
//!   with tasks split off (which carry no throttle of their own), and an
//!   operator's higher one;
//! - another user's throttle on the array: Slurm refuses it from 23.02;
//!   22.05 applies it before it checks who asks, and gpu_qos must refuse
//!   it and say so in slurmctld's log.

use std::time::Duration;

use super::*;

/// `LowPriorityMaxArrayTasks=` of the example file.
const CAP: u64 = 8;

/// What the low-priority arrays came to.
pub struct Arrays {
    pub summary: String,
    pub over_the_cap: Vec<String>,
}

/// `ArrayTaskThrottle` of array `id` as Slurm holds it; 0 where it has
/// none.
fn throttle_of(c: &Cluster, id: u32) -> u64 {
    c.array_throttle(id)
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(0)
}

fn capped(t: u64) -> bool {
    (1..=CAP).contains(&t)
}

/// A path of `len` bytes under `/tmp`, in components of 200.
fn long_path(len: usize) -> String {
    let mut path = String::from("/tmp");
    while path.len() + 201 <= len {
        path.push('/');
        path.push_str(&"p".repeat(200));
    }
    path
}

pub fn lowprio_arrays(c: &Cluster, scopes: &[Scope]) -> Result<Arrays, String> {
    let user = &scopes.last().ok_or("no scopes")?.user;
    let other = &scopes.first().ok_or("no scopes")?.user;
    user.allow_qos(c, &["normal", GROUP_QOS, "lowprio"])?;
    let mut over = Vec::new();
    let (mut submitted, mut updates) = (0, 0);
    let submit_with = |spec: &str, extra: &[&str]| -> Result<Option<u32>, String> {
        let spec = format!("--array={spec}");
        let mut args = vec!["--parsable", "-H", "-q", "lowprio"];
        if !extra.contains(&"-o") {
            args.extend(["-o", "/dev/null"]);
        }
        args.extend_from_slice(extra);
        args.extend([spec.as_str(), "--wrap=true"]);
        let out = user.run(c, None, "sbatch", &args)?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().parse().ok())
    };
    let submit = |spec: &str| -> Result<u32, String> {
        submit_with(spec, &[])?.ok_or_else(|| format!("a lowprio array --array={spec} was refused"))
    };
    let update = |who: &TestUser, target: &str, value: &str| {
        who.run(
            c,
            None,
            "scontrol",
            &[
                "update",
                &format!("JobId={target}"),
                &format!("ArrayTaskThrottle={value}"),
            ],
        )
    };
    let mut arrays = Vec::new();

    // Specs, at submission.
    for spec in [
        "0-19",
        "0-19%100",
        "0-19%100%5",
        "0-19%0%5",
        "1,2%50,7",
        "0-19%8",
    ] {
        submitted += 1;
        if let Some(id) = submit_with(spec, &[])? {
            let t = throttle_of(c, id);
            if !capped(t) {
                over.push(format!(
                    "--array={spec} under lowprio: job {id} runs {t} at once (0: no cap)"
                ));
            }
            arrays.push(id);
        }
    }

    // The owner's updates, each on an array of its own; then one wait for
    // all of them to be set back.
    let named = "x QOS=normal ArrayTaskThrottle=8";
    let mut lifted = Vec::new();
    for (name, by_tasks, value) in [
        ("wrap", false, "0"),
        ("wrap", false, "0x"),
        ("wrap", false, "+0"),
        ("wrap", false, ""),
        ("wrap", false, "100abc"),
        ("wrap", false, "4294967296"),
        ("wrap", true, "0"),
        (named, false, "0"),
    ] {
        let id = submit_with("0-19", &["-J", name])?.ok_or("a lowprio array was refused")?;
        arrays.push(id);
        let target = if by_tasks {
            format!("{id}_[0-19]")
        } else {
            id.to_string()
        };
        updates += 1;
        if update(user, &target, value)?.status.success() {
            lifted.push((
                id,
                format!("job={target} ArrayTaskThrottle={value:?} (name {name:?})"),
            ));
        }
    }

    // An answer over 1 MiB: 99 tasks split off by an update of their own,
    // each record with the longest words Slurm takes.
    let path = long_path(3900);
    let big_name = "n".repeat(1000);
    let big = submit_with(
        "0-99",
        &["-J", &big_name, "-o", &path, "-e", &path, "-i", &path],
    )?
    .ok_or("the lowprio array with long words was refused")?;
    arrays.push(big);
    user.run_ok(
        c,
        None,
        "scontrol",
        &[
            "update",
            &format!("JobId={big}_[0-98]"),
            &format!("Comment={}", "c".repeat(1000)),
        ],
    )?;
    let answer = c
        .run_ok("scontrol", &["-o", "show", "job", &big.to_string()])?
        .len();
    if answer <= 1 << 20 {
        over.push(format!(
            "the oracle's long array {big} answers scontrol show job in {answer} bytes, not over \
             1 MiB: it proves nothing"
        ));
    }
    updates += 1;
    if update(user, &big.to_string(), "0")?.status.success() {
        lifted.push((
            big,
            format!("ArrayTaskThrottle=0 on an array whose record is {answer} bytes"),
        ));
    }

    // The read-back's first scontrol left unanswered.
    let stalled = submit("0-19")?;
    arrays.push(stalled);
    let id = stalled.to_string();
    let (out, frozen) =
        c.freeze_slurmctld_child_during(&["show", "job", &id], Duration::from_secs(5), || {
            update(user, &id, "0")
        })?;
    updates += 1;
    let out = out?;
    match frozen {
        None => over.push(format!(
            "no scontrol of slurmctld's read array {stalled} back after ArrayTaskThrottle=0 \
             ({out:?}): nothing set its throttle back"
        )),
        Some(_) if out.status.success() => lifted.push((
            stalled,
            "ArrayTaskThrottle=0, the read-back's first scontrol unanswered".to_owned(),
        )),
        Some(_) => {}
    }

    // Each lifted throttle set back, the last within a retry's time.
    let back = wait_for(
        "the lifted throttles set back",
        Duration::from_secs(40),
        || {
            lifted
                .iter()
                .all(|(id, _)| capped(throttle_of(c, *id)))
                .then_some(())
        },
    );
    if back.is_err() {
        for (id, what) in &lifted {
            let t = throttle_of(c, *id);
            if !capped(t) {
                over.push(format!("{what} under lowprio: job {id} runs {t} at once"));
            }
        }
    }
    drop(frozen);

    // Throttles that must stand, read once a later lifted one is set back
    // (the reading thread takes them in order).
    let lowered = submit("0-19%4")?;
    let raised = submit("0-19")?;
    let later = submit("0-19")?;
    arrays.extend([lowered, raised, later]);
    user.run_ok(
        c,
        None,
        "scontrol",
        &["update", &format!("JobId={lowered}_[0-1]"), "Comment=split"],
    )?;
    updates += 3;
    update(user, &lowered.to_string(), "2")?;
    c.run_ok(
        "scontrol",
        &["update", &format!("JobId={raised}"), "ArrayTaskThrottle=30"],
    )?;
    update(user, &later.to_string(), "0")?;
    wait_for("the last lifted throttle set back", SHORT, || {
        capped(throttle_of(c, later)).then_some(())
    })
    .map_err(|e| format!("{e}: job {later} runs {}", throttle_of(c, later)))?;
    for (id, want, what) in [
        (
            lowered,
            2,
            "its owner's ArrayTaskThrottle=2, two tasks split off",
        ),
        (raised, 30, "an operator's ArrayTaskThrottle=30"),
    ] {
        let t = throttle_of(c, id);
        if t != want {
            over.push(format!(
                "{what} on lowprio array {id} did not stand: it runs {t} at once"
            ));
        }
    }

    // Another user's throttle.
    let owned = submit("0-19%4")?;
    arrays.push(owned);
    updates += 1;
    let out = update(other, &owned.to_string(), "1")?;
    let logged = format!(
        "uid {} ({}) set ArrayTaskThrottle=1 on job {owned} of another user",
        other.uid, other.name
    );
    let now = throttle_of(c, owned);
    if out.status.success() {
        over.push(format!(
            "{}'s ArrayTaskThrottle=1 on {owned} was accepted",
            other.name
        ));
    } else if now != 4 && !c.log("slurmctld").contains(&logged) {
        over.push(format!(
            "{}'s ArrayTaskThrottle=1 changed array {owned} of {} to {now}, and gpu_qos did \
             not refuse it in slurmctld's log",
            other.name, user.name
        ));
    }

    for id in &arrays {
        let _ = c.run("scancel", &[&id.to_string()]);
    }
    Ok(Arrays {
        summary: format!(
            "lowprio arrays: {submitted} specs submitted, {updates} throttle updates (one answer \
             of {answer} bytes), {} over the cap of {CAP} or not standing",
            over.len()
        ),
        over_the_cap: over,
    })
}
