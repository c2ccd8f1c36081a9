//! Which QOS each partition carries (`PartitionName=... QOS=`), for the
//! typed limits of partition QOS that `gpu_qos.conf` has no rule for.
//!
//! slurmctld's partition records are private to it (their layout changes
//! with every release), so the plugin does not read them in process.
//! Instead a thread of its own asks `scontrol -a -o show partition` (the
//! `scontrol` beside this slurmctld, bounded in time) every
//! [`REFRESH_TICKS`] polls, which also sees partitions made or changed
//! with `scontrol create`/`update partition`; until its first answer the
//! `PartitionName=` lines of slurm.conf stand in. The submit path only
//! clones an `Arc`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use gpushare::qos::site::{parse_partitions, parse_slurm_conf};
use gpushare::shared::bounded;
use gpushare::shared::locations::slurm_command_in;

/// Partition name → its QOS.
pub type PartitionQos = HashMap<String, String>;

static MAP: RwLock<Option<Arc<PartitionQos>>> = RwLock::new(None);

/// How many reload polls pass between two reads of the partitions.
pub const REFRESH_TICKS: u32 = 5;

/// The longest an `scontrol` call may take: slurmctld answers its own
/// `scontrol` from another thread; a busy one must not hold the plugin's
/// threads for long.
const SCONTROL_TIMEOUT: Duration = Duration::from_secs(10);

/// The partitions' QOS as last read (empty before any read).
pub fn current() -> Arc<PartitionQos> {
    MAP.read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .unwrap_or_default()
}

fn publish(map: PartitionQos) {
    *MAP.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(map));
}

/// The `PartitionName=` lines of slurm.conf (its `Include`d files are
/// not followed: the first `scontrol` answer replaces this).
pub fn seed_from_slurm_conf(slurm_conf: Option<&Path>) {
    let Some(path) = slurm_conf else {
        return;
    };
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    let conf = parse_slurm_conf(&text, &path.display().to_string());
    publish(
        conf.partitions
            .into_iter()
            .filter(|p| !p.name.eq_ignore_ascii_case("DEFAULT"))
            .filter_map(|p| Some((p.name, p.qos?)))
            .collect(),
    );
}

/// The `scontrol` of this slurmctld: beside it (`PREFIX/sbin/slurmctld`
/// → `PREFIX/bin/scontrol`), else on PATH.
fn scontrol() -> PathBuf {
    let me = std::fs::read_link("/proc/self/exe").ok();
    slurm_command_in(
        "scontrol",
        me.as_deref(),
        std::env::var_os("PATH").as_deref(),
        |p| p.is_file(),
    )
}

/// What the `scontrol` of this slurmctld prints for `args` (its
/// `slurm.conf`, bounded in time); an error says why in one line.
pub(crate) fn scontrol_output(args: &[&str], slurm_conf: Option<&Path>) -> Result<String, String> {
    scontrol_answer(args, slurm_conf, None)
}

/// [`scontrol_output`] of the whole first lines within `limit` bytes, for
/// an answer of one record a line that may be long (an array's tasks).
pub(crate) fn scontrol_head(
    args: &[&str],
    slurm_conf: Option<&Path>,
    limit: u64,
) -> Result<String, String> {
    scontrol_answer(args, slurm_conf, Some(limit))
}

fn scontrol_answer(
    args: &[&str],
    slurm_conf: Option<&Path>,
    head: Option<u64>,
) -> Result<String, String> {
    let mut cmd = Command::new(scontrol());
    cmd.args(args);
    if let Some(conf) = slurm_conf {
        cmd.env("SLURM_CONF", conf);
    }
    let ran = match head {
        Some(limit) => bounded::run_first_lines(cmd, SCONTROL_TIMEOUT, limit),
        None => bounded::run(cmd, None, SCONTROL_TIMEOUT),
    }
    .map_err(|e| e.to_string())?;
    if ran.status.success() {
        Ok(ran.stdout)
    } else {
        Err(ran.stderr.lines().next().unwrap_or("failed").to_owned())
    }
}

/// Reads the partitions from slurmctld; an error says why in one line.
pub fn refresh(slurm_conf: Option<&Path>) -> Result<usize, String> {
    let shown = scontrol_output(&["-a", "-o", "show", "partition"], slurm_conf)
        .map_err(|e| format!("scontrol show partition: {e}"))?;
    let map = from_show(&shown);
    let n = map.len();
    publish(map);
    Ok(n)
}

/// `scontrol -o show partition`'s answer as partition → QOS.
pub fn from_show(text: &str) -> PartitionQos {
    parse_partitions(text)
        .0
        .into_iter()
        .filter_map(|p| Some((p.name, p.qos?)))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn partitions_without_a_qos_are_left_out() {
        let map = from_show(
            "PartitionName=gpu AllowGroups=ALL QOS=part_a40 Nodes=node[1-2]\n\
             PartitionName=cpu AllowGroups=ALL QOS=N/A Nodes=node3\n",
        );
        assert_eq!(map.len(), 1);
        assert_eq!(map.get("gpu").map(String::as_str), Some("part_a40"));
    }

    #[test]
    fn slurm_conf_seeds_the_map_until_slurmctld_answers() {
        let dir = std::env::temp_dir().join(format!("gpu_qos-parts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("slurm.conf");
        std::fs::write(
            &conf,
            "PartitionName=DEFAULT QOS=nothing\nPartitionName=grp_a40 Nodes=ALL QOS=part_a40\n",
        )
        .unwrap();
        seed_from_slurm_conf(Some(&conf));
        assert_eq!(
            current().get("grp_a40").map(String::as_str),
            Some("part_a40")
        );
        assert!(!current().contains_key("DEFAULT"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
