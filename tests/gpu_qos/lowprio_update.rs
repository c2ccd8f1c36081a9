//! What `LowPriorityQOS=` forces on a job, kept through its owner's
//! updates that name no QOS.

use super::*;

/// `ArrayTaskThrottle=0` on a low-priority array: slurmctld applies it
/// before job_submit is asked, so gpu_qos reads the array back and sets
/// its cap again; another QOS's array keeps the throttle its user gave.
pub(super) fn lowprio_array_throttle_is_set_back(c: &mut Cluster) -> TestResult {
    let user = TestUser::create(c, "gpushare_lpu")?;
    user.allow_qos_by_default(c, &["normal", "lowprio"], "normal")?;
    let array = |qos: &str| -> Result<u32, String> {
        user.sbatch(
            c,
            &[
                "-H",
                "-o",
                "/dev/null",
                &format!("--qos={qos}"),
                "--array=0-19",
                "--gres=gpu:a40:1",
                "--wrap=true",
            ],
        )
    };
    let throttle = |id: u32| -> Result<String, String> {
        Ok(c.job(id)?
            .get("ArrayTaskThrottle")
            .unwrap_or_default()
            .to_owned())
    };
    let low = array("lowprio")?;
    let normal = array("normal")?;
    ensure(
        throttle(low)? == "8",
        format!("lowprio array throttle at submission: {}", throttle(low)?),
    )?;
    let update = |id: u32, value: &str| -> Result<String, String> {
        user.run_ok(
            c,
            None,
            "scontrol",
            &[
                "update",
                &format!("JobId={id}"),
                &format!("ArrayTaskThrottle={value}"),
            ],
        )
    };
    // The other array first: its read-back is done before the lowprio
    // one's, which the wait below sees.
    update(normal, "30")?;
    update(low, "0")?;
    wait_for(
        "the lowprio array's throttle to be set back to 8",
        SHORT,
        || {
            (throttle(low).ok()? == "8"
                && c.log("slurmctld").contains(&format!(
                "array {low} runs under a low-priority QOS: an update lifted its throttle, set \
                 back to 8"
            )))
            .then_some(())
        },
    )?;
    ensure(
        throttle(normal)? == "30",
        format!(
            "a normal array's own throttle was changed: {}",
            throttle(normal)?
        ),
    )?;
    // Within the cap, the user's own tighter throttle stays.
    update(low, "3")?;
    ensure(
        throttle(low)? == "3",
        format!("a tighter throttle was not kept: {}", throttle(low)?),
    )?;
    c.run_ok("scancel", &[&low.to_string(), &normal.to_string()])
        .map(drop)
}
