//! The last good `gpu_qos.conf`, kept by slurmctld: what the plugin puts
//! in force when the file is missing or invalid as it starts.
//!
//! Each version of the file the plugin loads is copied, when its bytes
//! differ from the copy's, to [`COPY_NAME`] in slurmctld's
//! `StateSaveLocation` (replaced whole, `shared::durable`: a backup
//! controller sharing the directory reads the same copy, never half of
//! one). A start (or `scontrol reconfigure`) that finds the file missing
//! or invalid loads that copy: the rules of the last version slurmctld
//! loaded, not a weaker policy; said at error level naming the bad
//! `file:line` and the copy. Only where no copy can serve (none was ever
//! made, or it cannot be read or parsed) does the policy without the
//! file ([`GpuQosConfig::without_file`]) stand in.
//!
//! This module is the pure part: which source to use, the copy's name,
//! the words of the log. The plugin reads and writes the files.

use std::fmt;
use std::path::{Path, PathBuf};

use super::rules::{GpuQosConfig, WITHOUT_FILE};
use super::{metrics_file_in, parse};

/// The copy's name in `StateSaveLocation`.
pub const COPY_NAME: &str = "gpu_qos.conf.last-good";

/// The copy's mode: slurmctld's own state, as the directory is.
pub const COPY_MODE: u32 = 0o600;

/// Where the copy lives: `COPY_NAME` in `StateSaveLocation`; none where
/// slurmctld has none, or a relative one (nothing to anchor it to).
pub fn copy_path(state_save_location: Option<&Path>) -> Option<PathBuf> {
    state_save_location
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(COPY_NAME))
}

/// What reading the copy gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyRead {
    /// No copy: slurmctld has no `StateSaveLocation`, or no good version
    /// was ever loaded.
    Absent,
    /// The copy's text, read whole.
    Text(String),
    /// It exists but could not be read whole; why.
    Unreadable(String),
}

/// Which policy is in force, and from where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The file as it is.
    File,
    /// The last good copy at this path: the file was bad at start.
    Copy(PathBuf),
    /// The policy without the file: no copy could serve (why, if one
    /// exists or should have).
    WithoutFile(Option<String>),
}

/// The policy put in force in place of a file that is bad at start,
/// and its source.
#[derive(Debug)]
pub struct Fallback {
    pub policy: GpuQosConfig,
    pub source: Source,
}

/// In place of a file missing or invalid at start: the copy at
/// `copy` (its path and what reading it gave) if it parses, else the
/// policy without the file, its metrics where `bad_text` (what was read
/// of the bad file, empty where nothing was) says.
pub fn in_place_of_bad_file(bad_text: &str, copy: Option<(&Path, CopyRead)>) -> Fallback {
    let without = |why: Option<String>| Fallback {
        policy: GpuQosConfig::without_file(metrics_file_in(bad_text)),
        source: Source::WithoutFile(why),
    };
    let Some((path, read)) = copy else {
        return without(None);
    };
    match read {
        CopyRead::Absent => without(None),
        CopyRead::Unreadable(why) => without(Some(format!(
            "the last good copy {} cannot be read: {why}",
            path.display()
        ))),
        CopyRead::Text(text) => match parse(&text, &path.to_string_lossy()) {
            Ok(policy) => Fallback {
                policy,
                source: Source::Copy(path.to_path_buf()),
            },
            // Written by another gpushare whose file this one refuses.
            Err(e) => without(Some(format!("the last good copy is not valid here: {e}"))),
        },
    }
}

/// Whether to write `in_force` (the text of the version of the file in
/// force; none while the copy or no file stands in) to the copy, which
/// holds `on_disk` as far as is known: only when its bytes changed.
pub fn needs_copy(in_force: Option<&str>, on_disk: Option<&str>) -> bool {
    in_force.is_some_and(|text| Some(text) != on_disk)
}

/// The words said at error level while a source other than the file is
/// in force, after the file's own error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InForce<'a>(pub &'a Source);

impl fmt::Display for InForce<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const CHECK: &str = "`gpu-qos check` says what is wrong with the file";
        match self.0 {
            Source::File => f.write_str("the policy of the file is in force"),
            Source::Copy(path) => write!(
                f,
                "RUNNING ON THE LAST GOOD COPY {}: the rules of the last gpu_qos.conf \
                 slurmctld loaded are in force until a valid gpu_qos.conf is in place; {CHECK}",
                path.display()
            ),
            Source::WithoutFile(why) => {
                write!(
                    f,
                    "RUNNING WITHOUT ITS POLICY FILE: {WITHOUT_FILE}; {CHECK}"
                )?;
                match why {
                    Some(why) => write!(f, " ({why})"),
                    None => f.write_str(" (no last good copy: none was ever made)"),
                }
            }
        }
    }
}

/// What a reload of a good file adds to its log line when it ends the
/// time of another source (nothing after the file itself).
pub fn no_longer(source: &Source) -> String {
    match source {
        Source::File => String::new(),
        Source::Copy(path) => format!(
            "; the policy of the file is in force, no longer the last good copy {}",
            path.display()
        ),
        Source::WithoutFile(_) => {
            "; the policy of the file is in force, no longer the policy without it".to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "QOS=qos_lafferty GPUTypes=a40 GPULimit=4\nMetricsFile=/m/good.prom\n";
    const BAD: &str = "QOS=qos_lafferty GPUTypes=a40\nBogus=1\nMetricsFile=/m/bad.prom\n";

    fn copy() -> PathBuf {
        PathBuf::from("/var/spool/slurmctld").join(COPY_NAME)
    }

    #[test]
    fn the_copy_lives_in_state_save_location_if_it_is_absolute() {
        assert_eq!(
            copy_path(Some(Path::new("/var/spool/slurmctld"))),
            Some(copy())
        );
        assert_eq!(copy_path(Some(Path::new("spool"))), None);
        assert_eq!(copy_path(None), None);
    }

    #[test]
    fn a_bad_file_at_start_loads_a_valid_copy() {
        let path = copy();
        let got = in_place_of_bad_file(BAD, Some((&path, CopyRead::Text(GOOD.into()))));
        assert_eq!(got.source, Source::Copy(path));
        // The copy's rules, the copy's metrics file: the last good policy.
        assert_eq!(got.policy.rules().len(), 1);
        assert_eq!(got.policy.metrics_file(), Some(Path::new("/m/good.prom")),);
    }

    #[test]
    fn without_a_copy_that_serves_the_policy_without_the_file_stands_in() {
        let path = copy();
        // Never made (or no StateSaveLocation): the policy without the
        // file, its metrics where the bad file's valid line says.
        for copy in [None, Some((path.as_path(), CopyRead::Absent))] {
            let got = in_place_of_bad_file(BAD, copy);
            assert_eq!(got.source, Source::WithoutFile(None));
            assert!(got.policy.rules().is_empty());
            assert_eq!(got.policy.metrics_file(), Some(Path::new("/m/bad.prom")));
        }
        // Unreadable, or refused by this gpushare: said why.
        let unreadable = CopyRead::Unreadable("Permission denied".into());
        let got = in_place_of_bad_file("", Some((&path, unreadable)));
        assert!(
            matches!(&got.source, Source::WithoutFile(Some(w))
                if w.contains("Permission denied") && w.contains(COPY_NAME)),
            "{:?}",
            got.source
        );
        assert_eq!(got.policy.metrics_file(), None);
        let got = in_place_of_bad_file(BAD, Some((&path, CopyRead::Text(BAD.into()))));
        assert!(
            matches!(&got.source, Source::WithoutFile(Some(w))
                if w.contains(&format!("{}:2:", path.display()))),
            "{:?}",
            got.source
        );
    }

    #[test]
    fn the_copy_is_written_only_when_the_good_version_changed() {
        assert!(needs_copy(Some(GOOD), None));
        assert!(needs_copy(Some(GOOD), Some(BAD)));
        assert!(!needs_copy(Some(GOOD), Some(GOOD)));
        // The copy or no file in force: nothing to copy.
        assert!(!needs_copy(None, Some(GOOD)));
        assert!(!needs_copy(None, None));
    }

    #[test]
    fn the_log_names_the_copy_or_says_why_none_serves() {
        let path = copy();
        let said = InForce(&Source::Copy(path.clone())).to_string();
        assert!(
            said.starts_with("RUNNING ON THE LAST GOOD COPY /var/spool/slurmctld/")
                && said.contains(COPY_NAME)
                && said.contains("gpu-qos check"),
            "{said}"
        );
        let said = InForce(&Source::WithoutFile(None)).to_string();
        assert!(
            said.starts_with("RUNNING WITHOUT ITS POLICY FILE: ")
                && said.contains(WITHOUT_FILE)
                && said.ends_with("(no last good copy: none was ever made)"),
            "{said}"
        );
        let said = InForce(&Source::WithoutFile(Some("why".into()))).to_string();
        assert!(said.ends_with(" (why)"), "{said}");
        assert!(no_longer(&Source::Copy(path)).contains(COPY_NAME));
        assert!(no_longer(&Source::WithoutFile(None)).contains("without it"));
        assert_eq!(no_longer(&Source::File), "");
    }
}
