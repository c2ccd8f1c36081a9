//! A GPU whose MPS daemon just failed to start, remembered for a while.
//!
//! Starting a sick GPU's daemon costs its deadlines (the control program's
//! start, its pipe, a probe: tens of seconds), under the GPU's lock. Where
//! slurmd starts many shares at once, each prolog queued on that lock
//! would wait them out again, only to be refused for the same reason. The
//! failure is kept in the state directory (`mps-sick-<gpu>`: when, with
//! which control program, and why) for [`REMEMBERED_FOR`]: a prolog
//! within that time, with the same `MPSControl=`, refuses at once with
//! the remembered reason; the first one after it (or after `MPSControl=`
//! changed) tries again, and a daemon that runs clears the record.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::mps::state_dir;

/// How long a daemon's failure stands for the prologs after it.
pub const REMEMBERED_FOR: Duration = Duration::from_secs(60);

fn name(gpu: u32) -> String {
    format!("mps-sick-{gpu}")
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The record's text: `<unix seconds>\t<control program>\t<reason>`.
fn record(at: u64, control: &str, why: &str) -> String {
    let one_line = |t: &str| t.replace(['\n', '\t'], " ");
    format!("{at}\t{}\t{}\n", one_line(control), one_line(why))
}

/// The reason and age of a record made at or before `now` with
/// `control`, if it is younger than [`REMEMBERED_FOR`] (a record from the
/// future, a clock set back, is not believed).
fn fresh(text: &str, control: &str, now: u64) -> Option<(String, u64)> {
    let mut fields = text.trim_end_matches('\n').splitn(3, '\t');
    let at: u64 = fields.next()?.parse().ok()?;
    let recorded = fields.next()?;
    let why = fields.next()?;
    let age = now.checked_sub(at)?;
    (recorded == control.replace(['\n', '\t'], " ") && age < REMEMBERED_FOR.as_secs())
        .then(|| (why.to_owned(), age))
}

/// The failure remembered for `gpu` under `control` (`MPSControl=` as the
/// node reads it), said as the refusal's reason.
pub fn remembered(dir: &Path, gpu: u32, control: &str) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(name(gpu))).ok()?;
    let (why, age) = fresh(&text, control, now())?;
    Some(format!(
        "{why} (a failure {age} s ago, not tried again for {} s)",
        REMEMBERED_FOR.as_secs()
    ))
}

/// Remembers `why` for `gpu`; a record that cannot be written only costs
/// the next prolog the wait.
pub fn remember(dir: &Path, gpu: u32, control: &str, why: &str) -> Result<(), String> {
    let text = record(now(), control, why);
    state_dir::replace_file(dir, &name(gpu), text.as_bytes(), 0o600).map_err(|e| e.to_string())
}

/// Forgets `gpu`'s failure: its daemon runs.
pub fn forget(dir: &Path, gpu: u32) {
    let _ = std::fs::remove_file(dir.join(name(gpu)));
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_stands_for_a_while_then_is_tried_again() {
        let ctl = "FromPath";
        let text = record(1000, ctl, "no control pipe\nappeared");
        assert_eq!(
            fresh(&text, ctl, 1000),
            Some(("no control pipe appeared".into(), 0))
        );
        assert_eq!(fresh(&text, ctl, 1059).map(|f| f.1), Some(59));
        assert_eq!(fresh(&text, ctl, 1060), None);
        // Another control program is tried at once.
        assert_eq!(fresh(&text, "Path(\"/opt/x\")", 1000), None);
        // A clock set back: the record is not believed.
        assert_eq!(fresh(&text, ctl, 999), None);
        assert_eq!(fresh("garbage", ctl, 1000), None);
        assert_eq!(fresh("", ctl, 1000), None);
    }

    #[test]
    fn remembered_forgotten_in_the_state_directory() {
        let dir = tempfile::tempdir().unwrap();
        let ctl = "FromPath";
        assert_eq!(remembered(dir.path(), 2, ctl), None);
        remember(dir.path(), 2, ctl, "cannot start").unwrap();
        let said = remembered(dir.path(), 2, ctl).unwrap();
        assert!(
            said.starts_with("cannot start (a failure 0 s ago"),
            "{said}"
        );
        assert_eq!(remembered(dir.path(), 1, ctl), None);
        forget(dir.path(), 2);
        assert_eq!(remembered(dir.path(), 2, ctl), None);
    }
}
