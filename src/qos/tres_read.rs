//! The GRES requests slurmctld itself finds in a job's `tres_per_job`,
//! `tres_per_node`, `tres_per_socket` and `tres_per_task` strings, read
//! the way each release's `_get_next_gres` reads them: not entry by entry,
//! but by searching the rest of the string for the GRES marker, wherever
//! it stands. So `cpu=gres:gpu:2` is a request for 2 GPUs on 22.05 and
//! 23.02 (the marker `gres:` inside another entry), and `cpu=gres/gpu:2` on
//! 23.11 and later (the marker `gres`, anywhere). A policy that reads the
//! same strings entry by entry and skips what does not start with `gres`
//! lets such GPUs through; this is the reading to hold a request to.
//!
//! Pure: no Slurm, no I/O. The two readings, from Slurm's source
//! (`src/common/gres.c` in 22.05, `slurm_get_next_tres` in
//! `src/common/slurm_protocol_defs.c` from 23.02, `src/interfaces/gres.c`):
//!
//! - [`Reading::Colon`] (22.05, 23.02): the next `gres:` anywhere in the
//!   rest (case-sensitive); none: the rest is ignored. The entry runs to
//!   the next comma: `name[:a[:b]]`; with `b`, `a` is the type and `b` the
//!   count (both non-empty, the count a number, else an error); with `a`
//!   alone, a number is the count, anything else the type (count 1).
//! - [`Reading::Word`] (23.11 on): the next `gres` anywhere (no separator:
//!   `progress` holds one), one `/` after it skipped. The count is after
//!   the last `=`, else after the last `:` (not a number there: the type,
//!   count 1; after `=`: an error); the type after a `:` left in the name.
//!   A count that is not a number ends the reading where the name is one;
//!   an entry with no name left ends it silently (every later entry is
//!   then ignored). Before it parses, slurmctld's unpacking (23.11 on)
//!   turns `gres:` into `gres/` in each comma-separated token that starts
//!   with it, only there ([`rewrite_on_unpack`]).
//!
//! Names are not checked here: slurmctld refuses a job whose request names
//! a GRES no node is configured with, and the caller knows the names.
//!
//! Counts (both): `strtoull` in base 10 (on 23.11 on, the first character
//! must be a digit), then a unit: none, `k`/`kib` 1024, `kb` 1000, and so
//! on for `m`, `g`, `t`, `p`, any case; anything else after the digits is
//! not a count. A count of 0 drops the entry.

use std::fmt;

/// How a release's slurmctld looks for GRES in a request string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// 22.05 and 23.02: the marker `gres:`.
    Colon,
    /// 23.11 and later: the marker `gres`, after `gres:` tokens were made
    /// `gres/` on unpacking.
    Word,
}

impl Reading {
    /// The reading of Slurm `major.minor` (22.05 → `Colon`).
    pub fn of_release(major: u32, minor: u32) -> Self {
        if (major, minor) >= (23, 11) {
            Reading::Word
        } else {
            Reading::Colon
        }
    }
}

/// One GRES request slurmctld builds from a string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The name as slurmctld compares it with the configured GRES.
    pub name: String,
    pub gres_type: Option<String>,
    /// Never 0 (such entries are dropped).
    pub count: u64,
}

/// A string slurmctld refuses to read (the job is refused with
/// `ESLURM_INVALID_GRES`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// The entry it stopped at.
    pub entry: String,
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "slurmctld cannot read the GRES request \"{}\"",
            self.entry
        )
    }
}

/// What slurmctld's unpacking of a job request makes of a `tres_per_*`
/// string (23.11 on): each comma-separated token that starts with `gres:`
/// starts with `gres/` instead; empty tokens are dropped (its `strtok_r`).
/// Where no `gres:` occurs, the string is left as it was.
pub fn rewrite_on_unpack(s: &str) -> String {
    if !s.contains("gres:") {
        return s.to_owned();
    }
    s.split(',')
        .filter(|t| !t.is_empty())
        .map(|t| match t.strip_prefix("gres:") {
            Some(rest) => format!("gres/{rest}"),
            None => t.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Every GRES request slurmctld of `reading` builds from `s`, as the
/// job's record will hold it (23.11 on: after [`rewrite_on_unpack`]).
pub fn read(reading: Reading, s: &str) -> Result<Vec<Found>, Unreadable> {
    match reading {
        Reading::Colon => read_colon(s),
        Reading::Word => read_word(&rewrite_on_unpack(s)),
    }
}

/// The next entry after `marker` in `rest`, and what follows it.
fn next_entry<'a>(rest: &'a str, marker: &str) -> Option<(&'a str, &'a str)> {
    let at = rest.find(marker)?;
    let after = &rest[at + marker.len()..];
    Some(match after.split_once(',') {
        Some((entry, more)) => (entry, more),
        None => (after, ""),
    })
}

fn read_colon(s: &str) -> Result<Vec<Found>, Unreadable> {
    let mut found = Vec::new();
    let mut rest = s;
    while let Some((entry, more)) = next_entry(rest, "gres:") {
        rest = more;
        if entry.is_empty() {
            continue;
        }
        let bad = || Unreadable {
            entry: entry.to_owned(),
        };
        let (name, a) = match entry.split_once(':') {
            Some((name, a)) => (name, Some(a)),
            None => (entry, None),
        };
        let (a, b) = match a.map(|a| a.split_once(':')) {
            Some(Some((a, b))) => (Some(a), Some(b)),
            Some(None) => (a, None),
            None => (None, None),
        };
        let (gres_type, count) = match (a, b) {
            (Some(a), Some(b)) => {
                if a.is_empty() || b.is_empty() {
                    return Err(bad());
                }
                (Some(a), count(b, false).ok_or_else(bad)?)
            }
            (Some(a), None) => {
                if a.is_empty() {
                    return Err(bad());
                }
                match count(a, false) {
                    Some(n) => (None, n),
                    None => (Some(a), 1),
                }
            }
            _ => (None, 1),
        };
        if count == 0 {
            continue;
        }
        found.push(Found {
            name: name.to_owned(),
            gres_type: gres_type.map(str::to_owned),
            count,
        });
    }
    Ok(found)
}

fn read_word(s: &str) -> Result<Vec<Found>, Unreadable> {
    let mut found = Vec::new();
    let mut rest = s;
    while let Some(at) = rest.find("gres") {
        let mut after = &rest[at + 4..];
        if let Some(skipped) = after.strip_prefix('/') {
            after = skipped;
        }
        let (entry, more) = match after.split_once(',') {
            Some((entry, more)) => (entry, more),
            None => (after, ""),
        };
        rest = more;
        if entry.is_empty() {
            continue;
        }
        let bad = || Unreadable {
            entry: entry.to_owned(),
        };
        let cut = entry.rfind('=').or_else(|| entry.rfind(':'));
        let (mut name, mut gres_type, count) = match cut {
            Some(at) => {
                let (name, tail) = (&entry[..at], &entry[at + 1..]);
                if tail.is_empty() {
                    return Err(bad());
                }
                match count(tail, true) {
                    Some(n) => (name, None, n),
                    None if entry.as_bytes()[at] == b'=' => return Err(bad()),
                    None => (name, Some(tail), 1),
                }
            }
            None if count(entry, true).is_some() => break,
            None => (entry, None, 1),
        };
        if let Some((head, t)) = name.split_once(':') {
            if gres_type.is_some() {
                return Err(bad());
            }
            name = head;
            gres_type = Some(t);
        }
        if count == 0 {
            continue;
        }
        if name.is_empty() {
            break;
        }
        found.push(Found {
            name: name.to_owned(),
            gres_type: gres_type.map(str::to_owned),
            count,
        });
    }
    Ok(found)
}

/// A count as slurmctld reads it: `strtoull` in base 10 (leading white
/// space and a sign taken; `digit_first`: the text must start with a
/// digit), a value of `ULLONG_MAX` refused, then the unit of what follows
/// the digits (refused unless it is a unit), the product wrapping as C's
/// does. `None`: not a count.
fn count(text: &str, digit_first: bool) -> Option<u64> {
    if digit_first && !text.as_bytes().first().is_some_and(u8::is_ascii_digit) {
        return None;
    }
    let (value, end) = strtoull(text);
    if value == u64::MAX {
        return None;
    }
    Some(value.wrapping_mul(unit(end)?))
}

/// C's `strtoull(text, &end, 10)`: the value (`u64::MAX` on overflow) and
/// the text after the digits (all of it where there are none).
fn strtoull(text: &str) -> (u64, &str) {
    let trimmed = text.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (negative, unsigned) = match trimmed.as_bytes().first() {
        Some(b'-') => (true, &trimmed[1..]),
        Some(b'+') => (false, &trimmed[1..]),
        _ => (false, trimmed),
    };
    let digits = unsigned.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return (0, text);
    }
    let value = unsigned[..digits]
        .bytes()
        .try_fold(0u64, |v, d| {
            v.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })
        .unwrap_or(u64::MAX);
    let value = if negative && value != u64::MAX {
        value.wrapping_neg()
    } else {
        value
    };
    (value, &unsigned[digits..])
}

/// The multiplier of a unit slurmctld takes after a count (`suffix_mult`).
fn unit(text: &str) -> Option<u64> {
    let text = text.to_ascii_lowercase();
    let (power, decimal) = match text.as_str() {
        "" => return Some(1),
        "k" | "kib" => (1, false),
        "kb" => (1, true),
        "m" | "mib" => (2, false),
        "mb" => (2, true),
        "g" | "gib" => (3, false),
        "gb" => (3, true),
        "t" | "tib" => (4, false),
        "tb" => (4, true),
        "p" | "pib" => (5, false),
        "pb" => (5, true),
        _ => return None,
    };
    let base: u64 = if decimal { 1000 } else { 1024 };
    Some(base.pow(power))
}

/// Whether a GRES name is one that puts a job on a GPU (`gpu`, or a share
/// of one: `mps`, `shard`), as slurmctld compares names: in any case.
pub fn names_a_gpu(name: &str) -> bool {
    ["gpu", "mps", "shard"]
        .iter()
        .any(|g| name.eq_ignore_ascii_case(g))
}

/// GPU text slurmctld reads in an entry of a TRES string that the entry
/// itself does not say at its head (`cpu=gres:gpu:2`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hidden<'a> {
    /// The comma-separated entry it is in.
    pub entry: &'a str,
    /// What slurmctld makes of it.
    pub found: Found,
}

/// The first entry of `s` where either release's reading ([`Reading`])
/// finds a GPU request (`gpu`, `mps`, `shard`: [`names_a_gpu`]) other than
/// the one `at_head` reads there, entry by entry (`None`: no GRES at its
/// head). Both readings are tried, whichever release runs: a string one
/// release reads as a GPU and another ignores is refused alike, so that
/// no GPU slurmctld holds goes unjudged. Each entry is read alone, which
/// finds at least all slurmctld finds in the whole string (its readings
/// run from a marker to the next comma; where one stops early, it
/// ignores later entries that this still reads).
pub fn hidden_gpu<'a>(s: &'a str, at_head: impl Fn(&str) -> Option<Found>) -> Option<Hidden<'a>> {
    s.split(',').find_map(|entry| {
        // Both markers hold `gres`: an entry without it (`cpu=2`) holds
        // nothing either reading finds, and costs no reading.
        if !entry.contains("gres") {
            return None;
        }
        let mut gpus = [Reading::Colon, Reading::Word]
            .into_iter()
            .filter_map(|reading| read(reading, entry).ok())
            .flatten()
            .filter(|found| names_a_gpu(&found.name))
            .peekable();
        gpus.peek()?;
        let head = at_head(entry);
        gpus.find(|found| {
            head.as_ref().is_none_or(|h| {
                !h.name.eq_ignore_ascii_case(&found.name)
                    || h.gres_type != found.gres_type
                    || h.count != found.count
            })
        })
        .map(|found| Hidden { entry, found })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(reading: Reading, s: &str) -> Result<Vec<(String, Option<String>, u64)>, Unreadable> {
        read(reading, s).map(|found| {
            found
                .into_iter()
                .map(|f| (f.name, f.gres_type, f.count))
                .collect()
        })
    }

    fn one(name: &str, gres_type: Option<&str>, count: u64) -> Vec<(String, Option<String>, u64)> {
        vec![(name.to_owned(), gres_type.map(str::to_owned), count)]
    }

    #[test]
    fn twenty_two_and_twenty_three_oh_two_find_gres_colon_anywhere() {
        let c = Reading::Colon;
        assert_eq!(gpus(c, "gres:gpu:2"), Ok(one("gpu", None, 2)));
        assert_eq!(gpus(c, "gres:gpu:a40:2"), Ok(one("gpu", Some("a40"), 2)));
        assert_eq!(gpus(c, "gres:gpu"), Ok(one("gpu", None, 1)));
        assert_eq!(gpus(c, "gres:gpu:a40"), Ok(one("gpu", Some("a40"), 1)));
        // Inside other entries: what the plugin's entry-by-entry reading missed.
        assert_eq!(gpus(c, "cpu=gres:gpu:2"), Ok(one("gpu", None, 2)));
        assert_eq!(gpus(c, "license/gres:gpu:2"), Ok(one("gpu", None, 2)));
        assert_eq!(
            gpus(c, "cpu=4,xgres:mps:25,gres:gpu:1"),
            Ok(vec![
                ("mps".to_owned(), None, 25),
                ("gpu".to_owned(), None, 1)
            ])
        );
        // Not a marker on these releases.
        assert_eq!(gpus(c, "gres/gpu:2"), Ok(vec![]));
        assert_eq!(gpus(c, "GRES:gpu:2"), Ok(vec![]));
        // Zero counts are dropped; signs and units as strtoull and suffix_mult read them.
        assert_eq!(gpus(c, "gres:gpu:a40:0,gres:gpu:0"), Ok(vec![]));
        assert_eq!(gpus(c, "gres:gpu:+2"), Ok(one("gpu", None, 2)));
        assert_eq!(gpus(c, "gres:gpu:-1"), Ok(one("gpu", Some("-1"), 1)));
        assert_eq!(
            gpus(c, "gres:gpu:a40:1k"),
            Ok(one("gpu", Some("a40"), 1024))
        );
        assert_eq!(gpus(c, "gres:gpu:2kb"), Ok(one("gpu", None, 2000)));
        assert_eq!(gpus(c, "gres:gpu:k"), Ok(vec![]), "no digits, a unit: 0");
        // Errors refuse the job.
        assert!(gpus(c, "gres:gpu:2(S:0-1)").is_err());
        assert!(gpus(c, "gres:gpu::2").is_err());
        assert!(gpus(c, "gres:gpu:a40:x").is_err());
        assert!(gpus(c, "gres:gpu:").is_err());
    }

    #[test]
    fn twenty_three_eleven_on_find_the_word_gres_anywhere() {
        let w = Reading::Word;
        assert_eq!(gpus(w, "gres/gpu:a40=2"), Ok(one("gpu", Some("a40"), 2)));
        assert_eq!(gpus(w, "gres/gpu:a40:2"), Ok(one("gpu", Some("a40"), 2)));
        assert_eq!(gpus(w, "gres/gpu=2"), Ok(one("gpu", None, 2)));
        assert_eq!(gpus(w, "gres/gpu"), Ok(one("gpu", None, 1)));
        assert_eq!(gpus(w, "gres/gpu:a40"), Ok(one("gpu", Some("a40"), 1)));
        // A token that starts with gres: is made gres/ on unpacking.
        assert_eq!(gpus(w, "gres:gpu:2"), Ok(one("gpu", None, 2)));
        // Inside other entries.
        assert_eq!(gpus(w, "cpu=gres/gpu:2"), Ok(one("gpu", None, 2)));
        assert_eq!(gpus(w, "cpu=4,license/gres/gpu=3"), Ok(one("gpu", None, 3)));
        // cpu=gres:gpu:2 is not rewritten: its name comes out empty, and the
        // reading stops there (a later entry is never read).
        assert_eq!(gpus(w, "cpu=gres:gpu:2,gres/gpu:5"), Ok(vec![]));
        assert_eq!(gpus(w, "gres/gpu:a40:0,gres/gpu:0"), Ok(vec![]));
        assert_eq!(gpus(w, "gres/gpu:0x10"), Ok(one("gpu", Some("0x10"), 1)));
        assert_eq!(gpus(w, "gres/gpu:+2"), Ok(one("gpu", Some("+2"), 1)));
        assert_eq!(gpus(w, "cpu=2,gres/mps=25"), Ok(one("mps", None, 25)));
        assert!(gpus(w, "gres/gpu:2(S:0-1)").is_err());
        assert!(gpus(w, "gres/gpu=x").is_err());
        assert_eq!(
            gpus(w, "gres/gpu:a40:b40:2"),
            Ok(one("gpu", Some("a40:b40"), 2))
        );
        assert!(gpus(w, "gres/gpu:a40:b40").is_err(), "a type twice");
        // `progress` holds the word: a GRES named `s`, which no node has
        // (slurmctld then refuses the job).
        assert_eq!(gpus(w, "license/progress=1"), Ok(one("s", None, 1)));
    }

    #[test]
    fn the_unpacking_rewrites_tokens_that_start_with_gres_colon_only() {
        assert_eq!(
            rewrite_on_unpack("gres:gpu:2,,cpu=gres:gpu:1"),
            "gres/gpu:2,cpu=gres:gpu:1"
        );
        assert_eq!(rewrite_on_unpack("cpu=2,,x"), "cpu=2,,x");
        assert_eq!(Reading::of_release(22, 5), Reading::Colon);
        assert_eq!(Reading::of_release(23, 2), Reading::Colon);
        assert_eq!(Reading::of_release(23, 11), Reading::Word);
        assert_eq!(Reading::of_release(26, 11), Reading::Word);
    }

    proptest::proptest! {
        #[test]
        fn reading_never_panics_and_never_keeps_a_zero(
            s in "((x|cpu=|license/)?(gres[:/]|pro)?[a-z0-9.:=_+ kKmMgGbB/-]{0,12},?){0,4}"
        ) {
            for reading in [Reading::Colon, Reading::Word] {
                if let Ok(found) = read(reading, &s) {
                    proptest::prop_assert!(found.iter().all(|f| f.count > 0));
                }
            }
        }

        #[test]
        fn reading_any_text_never_panics(s in ".*") {
            let _ = read(Reading::Colon, &s);
            let _ = read(Reading::Word, &s);
        }
    }

    #[test]
    fn counts_are_read_as_strtoull_and_suffix_mult_read_them() {
        assert_eq!(count("2", false), Some(2));
        assert_eq!(count(" 2", false), Some(2));
        assert_eq!(count(" 2", true), None);
        assert_eq!(count("2G", false), Some(2 << 30));
        assert_eq!(count("2gb", false), Some(2_000_000_000));
        assert_eq!(count("18446744073709551615", false), None);
        assert_eq!(count("99999999999999999999", false), None);
        assert_eq!(count("-1", false), None);
        assert_eq!(count("-2", false), Some(u64::MAX - 1));
        assert_eq!(count("2x", false), None);
        assert_eq!(count("x", false), None);
        assert_eq!(count("", false), Some(0));
    }

    /// The entry-by-entry reading the policy judges (`qos::gres`).
    fn head(entry: &str) -> Option<Found> {
        let r = crate::qos::gres::tres_entries(entry).next()?.ok()?;
        Some(Found {
            name: r.name.to_owned(),
            gres_type: r.gres_type.map(str::to_owned),
            count: r.count,
        })
    }

    #[test]
    fn gpu_text_inside_another_entry_is_found_whatever_the_release() {
        for clean in [
            "gres:gpu:a40:2",
            "gres/gpu:a40:2",
            "gres/gpu:a40=2",
            "gres/gpu=2",
            "gres:gpu:2",
            "gres:GPU:2",
            "GRES:gpu:2",
            "cpu=4,gres/gpu:a40:1",
            "gres:mps:50",
            "gres/shard:3",
            "cpu=2",
            "license/foo=1",
            "gres:gpu:a40:0",
        ] {
            assert_eq!(hidden_gpu(clean, head), None, "{clean}");
        }
        for (text, entry, name, ty, count) in [
            ("cpu=gres:gpu:2", "cpu=gres:gpu:2", "gpu", None, 2),
            ("cpu=gres/gpu:2", "cpu=gres/gpu:2", "gpu", None, 2),
            ("license/gres:gpu:2", "license/gres:gpu:2", "gpu", None, 2),
            (
                "gres/gpu:a40:1,cpu=gres/gpu:1",
                "cpu=gres/gpu:1",
                "gpu",
                None,
                1,
            ),
            ("cpu=4,xgres:mps:25", "xgres:mps:25", "mps", None, 25),
            ("gresgpu:2", "gresgpu:2", "gpu", None, 2),
            (
                "mem=gres/shard:a40:4",
                "mem=gres/shard:a40:4",
                "shard",
                Some("a40"),
                4,
            ),
        ] {
            let found = Found {
                name: name.to_owned(),
                gres_type: ty.map(str::to_owned),
                count,
            };
            assert_eq!(
                hidden_gpu(text, head),
                Some(Hidden { entry, found }),
                "{text}"
            );
        }
    }

    proptest::proptest! {
        /// Whatever stands before it in an entry, GPU text with either
        /// release's marker is found; GPU requests of their own never are.
        #[test]
        fn hidden_gpu_text_is_always_found(
            before in "[a-z=/:0-9]{1,8}",
            marker in proptest::sample::select(vec!["gres:", "gres/"]),
            name in proptest::sample::select(vec!["gpu", "mps", "shard", "GPU"]),
            count in 1u64..1000,
        ) {
            let text = format!("cpu=1,{before}{marker}{name}:{count}");
            let hidden = hidden_gpu(&text, head);
            proptest::prop_assert!(hidden.is_some(), "{text}");
        }

        #[test]
        fn requests_of_their_own_are_never_hidden(
            ty in proptest::option::of("[a-z][a-z0-9]{0,5}"),
            count in 1u64..1000,
            slash in proptest::bool::ANY,
        ) {
            let ty = ty.map(|t| format!("{t}:")).unwrap_or_default();
            let marker = if slash { "gres/" } else { "gres:" };
            let text = format!("cpu=2,{marker}gpu:{ty}{count},{marker}mps:{count}");
            proptest::prop_assert_eq!(hidden_gpu(&text, head), None, "{}", text);
        }
    }
}
