//! NVML's facts kept in the state directory with what makes them stale
//! (`mps::node::facts_keys`): a share's prolog whose node's keys read as
//! kept takes the kept facts and starts no NVML child; one whose keys
//! changed (here: the driver's version kept) asks NVML again, and says
//! why in the syslog. The lab has no NVML: the kept facts' memory, which
//! sets the share's memory limit, is what the job sees either way (an
//! asked NVML that fails falls back to them, saying so).

use gpushare::mps::node::facts_keys::{keys_text, FactsKeys, KEPT_KEYS, NONE};

use super::*;

/// Four GPUs of 20000 MiB, minors 0 to 3, no MIG, none lost.
const FACTS: &str = "0 0 20000 0 0 -\n1 1 20000 0 0 -\n2 2 20000 0 0 -\n3 3 20000 0 0 -\n";

const MEM_SCRIPT: &str = "--wrap=echo GPU=$GPUSHARE_GPU MEM=$GPUSHARE_MEMORY_MIB; sleep 120";

/// The prolog's syslog lines of job `id`, once its placement is logged
/// (every line about NVML comes before it).
fn prolog_lines(c: &Cluster, id: u32) -> Result<Vec<String>, String> {
    let tag = format!("job {id}: ");
    let lines = || -> Vec<String> {
        c.syslog()
            .lines()
            .filter(|l| l.contains("gpu-mps-prolog") && l.contains(&tag))
            .map(str::to_owned)
            .collect()
    };
    wait_for("the prolog's placement line", SHORT, || {
        lines()
            .iter()
            .any(|l| l.contains("units on GPU"))
            .then_some(())
    })?;
    Ok(lines())
}

/// The job's memory limit (MiB), as its environment shows it.
fn memory_seen(c: &Cluster, id: u32) -> Option<String> {
    printed(c, id).get("MEM").cloned()
}

pub(super) fn no_nvml_child_where_kept_facts_are_fresh(c: &mut Cluster) -> TestResult {
    let state = c.dir.join("run/gpu-mps");
    for name in [KEPT_KEYS, "nvml-facts"] {
        let _ = fs::remove_file(state.join(name));
    }
    // This machine has no NVIDIA driver: its keys read `none`.
    let driverless = ["/proc/driver/nvidia", "/sys/module/nvidia"]
        .iter()
        .all(|p| !Path::new(p).exists());
    ensure(
        driverless,
        "this test needs a machine without the NVIDIA driver",
    )?;
    // Nothing kept: the prolog asks NVML, saying why.
    let first = start_shares_running(c, 1, 50, MEM_SCRIPT)?[0];
    let lines = prolog_lines(c, first)?;
    ensure(
        lines
            .iter()
            .any(|l| l.contains("asking NVML for the GPUs' facts: no facts kept")),
        format!("job {first}'s prolog did not say why it asked NVML:\n{lines:#?}"),
    )?;
    // Facts kept with the node's keys as they read now.
    let boot = fs::read_to_string("/proc/sys/kernel/random/boot_id").map_err(|e| e.to_string())?;
    let now = FactsKeys {
        boot: Some(boot.trim().to_owned()),
        driver: Some(NONE.into()),
        gpus: Some(NONE.into()),
        mig: Some(NONE.into()),
    };
    fs::write(state.join("nvml-facts"), FACTS).map_err(|e| e.to_string())?;
    fs::write(state.join(KEPT_KEYS), keys_text(&now)).map_err(|e| e.to_string())?;
    let fresh = start_shares_running(c, 1, 50, MEM_SCRIPT)?[0];
    let lines = prolog_lines(c, fresh)?;
    // No NVML child: nothing asked, nothing fallen back on.
    ensure(
        !lines.iter().any(|l| l.contains("NVML")),
        format!("job {fresh}'s prolog asked NVML with its facts fresh:\n{lines:#?}"),
    )?;
    // The kept memory made its limit: 50 units of 100 of 20000 MiB.
    ensure(
        memory_seen(c, fresh).as_deref() == Some("10000"),
        format!("job {fresh}: {:?}", c.job_output(fresh)),
    )?;
    // The driver's version kept is not the node's: asked again.
    let reloaded = FactsKeys {
        driver: Some("999.1".into()),
        ..now
    };
    fs::write(state.join(KEPT_KEYS), keys_text(&reloaded)).map_err(|e| e.to_string())?;
    let stale = start_shares_running(c, 1, 50, MEM_SCRIPT)?[0];
    let lines = prolog_lines(c, stale)?;
    let why = "asking NVML for the GPUs' facts: the NVIDIA driver's version changed (kept 999.1, now none)";
    ensure(
        lines.iter().any(|l| l.contains(why)),
        format!("job {stale}'s prolog did not ask NVML for a changed driver:\n{lines:#?}"),
    )?;
    // NVML failed (no driver here): the kept facts still serve.
    ensure(
        lines
            .iter()
            .any(|l| l.contains("using the figures it gave last"))
            && memory_seen(c, stale).as_deref() == Some("10000"),
        format!("job {stale}: {lines:#?}\n{:?}", c.job_output(stale)),
    )?;
    for name in [KEPT_KEYS, "nvml-facts"] {
        let _ = fs::remove_file(state.join(name));
    }
    c.cancel_all()
}
