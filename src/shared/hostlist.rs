//! Slurm host lists (`gpu[01-04,10],login1`) expanded into node names, as
//! Slurm's `hostlist_create` reads them (`src/common/hostlist.c`), within
//! a bound: pure, and never more work than [`MAX_NAMES`] names.
//!
//! - Names are separated by commas outside brackets.
//! - A bracket holds comma-separated numbers and ranges (`lo-hi`); a
//!   number is written as wide as the range's first number (Slurm's
//!   `range->width = strlen(lo)`): `gpu[01-10]` names `gpu01` to `gpu10`,
//!   `gpu[1-10]` names `gpu1` to `gpu10`, and neither names the other's.
//! - Text may follow a bracket, and a name may hold several brackets
//!   (`r[1-2]n[1-4]`: every combination, as Slurm expands a prefix with
//!   brackets).
//!
//! Anything else is refused with the reason, never guessed at: a typo in
//! a file that decides which node takes which settings must not make a
//! node take another's.
//!
//! The bounds are checked on the text, before any name is made: a range's
//! size in overflow-checked arithmetic (`n[0-18446744073709551615]` holds
//! 2^64 numbers, one more than a `u64` counts), and a name made from a
//! range at most [`MAX_NAME_BYTES`] long (so a zero-padded number
//! 100,000 digits wide never makes 65,536 names of 100 kB each).

/// The most names one host list may expand to: Slurm's `MAX_SLURM_NODES`
/// (64 K), the most a cluster holds (`gpu[1-99999999]` is refused, never
/// expanded).
pub const MAX_NAMES: usize = 65_536;

/// The longest name a range may make: Slurm's own host list iterator
/// writes a name from a range into `char buf[HOST_NAME_MAX + 16]`
/// (`hostlist_next_dims`, `src/common/hostlist.c`, 22.05 to 26.05;
/// `HOST_NAME_MAX` is 64) and gives up on one that does not fit.
pub const MAX_NAME_BYTES: usize = 64 + 16 - 1;

/// At most this much of a refused text is quoted back: the reason must
/// stay one readable log line, whatever was written.
const QUOTED_BYTES: usize = 64;

/// `text` quoted for an error, cut at [`QUOTED_BYTES`] with its length
/// said.
pub fn quoted(text: &str) -> String {
    if text.len() <= QUOTED_BYTES {
        return format!("\"{text}\"");
    }
    let mut cut = QUOTED_BYTES;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("\"{}...\" ({} characters)", &text[..cut], text.len())
}

/// One range inside brackets: its numbers and how wide each is written.
#[derive(Debug, Clone, Copy)]
struct Range {
    lo: u64,
    hi: u64,
    width: usize,
}

impl Range {
    /// How many numbers it holds: `u64::MAX` stands for "more than a
    /// `u64` counts" (`0-18446744073709551615`), never a wrapped 0.
    fn count(self) -> u64 {
        (self.hi - self.lo).saturating_add(1)
    }

    /// How wide its widest number is written.
    fn widest(self) -> usize {
        self.width
            .max(self.hi.checked_ilog10().map_or(1, |d| d as usize + 1))
    }
}

/// A name as written: literal text and bracket groups, in order.
#[derive(Debug)]
enum Part<'a> {
    Text(&'a str),
    Numbers(Vec<Range>),
}

/// The names `list` holds, in order, each once; `Err`: why it is not a
/// host list Slurm would read, or names more than [`MAX_NAMES`].
pub fn expand(list: &str) -> Result<Vec<String>, String> {
    // An empty name between commas (a bracket's empty number is its own
    // error below).
    if list.is_empty() || list.starts_with(',') || list.ends_with(',') || list.contains(",,") {
        return Err(format!("{}: an empty name", quoted(list)));
    }
    let items = super::syntax::split_top_level(list, '[', ']');
    let mut parsed = Vec::with_capacity(items.len());
    let mut total: u64 = 0;
    for item in items {
        let parts = parts_of(item)?;
        let count = parts.iter().fold(1u64, |n, p| match p {
            Part::Text(_) => n,
            Part::Numbers(ranges) => n.saturating_mul(
                ranges
                    .iter()
                    .map(|r| r.count())
                    .fold(0, u64::saturating_add),
            ),
        });
        total = total.saturating_add(count);
        if total > MAX_NAMES as u64 {
            return Err(too_many(list));
        }
        parsed.push(parts);
    }
    let mut names = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for parts in &parsed {
        let mut expanded = vec![String::new()];
        for part in parts {
            expanded = match part {
                Part::Text(t) => expanded.into_iter().map(|e| e + t).collect(),
                Part::Numbers(ranges) => expanded
                    .iter()
                    .flat_map(|e| {
                        ranges.iter().flat_map(move |r| {
                            (r.lo..=r.hi).map(move |n| format!("{e}{n:0w$}", w = r.width))
                        })
                    })
                    .collect(),
            };
        }
        names.extend(expanded.into_iter().filter(|n| seen.insert(n.clone())));
    }
    Ok(names)
}

fn too_many(text: &str) -> String {
    format!(
        "{} names more than {MAX_NAMES} nodes (Slurm's most): a typo in a range?",
        quoted(text)
    )
}

/// The literal text and bracket groups of one name.
fn parts_of(item: &str) -> Result<Vec<Part<'_>>, String> {
    let mut parts = Vec::new();
    let mut rest = item;
    while !rest.is_empty() {
        match rest.find(['[', ']']) {
            None => {
                parts.push(Part::Text(rest));
                rest = "";
            }
            Some(open) if rest[open..].starts_with('[') => {
                if open > 0 {
                    parts.push(Part::Text(&rest[..open]));
                }
                let inner = &rest[open + 1..];
                let close = inner
                    .find(['[', ']'])
                    .filter(|&c| inner[c..].starts_with(']'))
                    .ok_or_else(|| format!("{}: a '[' without its ']'", quoted(item)))?;
                parts.push(Part::Numbers(ranges_of(item, &inner[..close])?));
                rest = &inner[close + 1..];
            }
            Some(_) => return Err(format!("{}: a ']' without its '['", quoted(item))),
        }
    }
    for part in &parts {
        if let Part::Text(t) = part {
            if let Some(c) = t
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
            {
                return Err(format!(
                    "{}: '{c}' is not in a node name (letters, digits, '-', '_', '.')",
                    quoted(item)
                ));
            }
        }
    }
    // The longest name it makes, from the text alone (a name without a
    // range is as long as written: it makes nothing longer).
    let longest = parts.iter().try_fold(0usize, |n, p| match p {
        Part::Text(t) => n.checked_add(t.len()),
        Part::Numbers(ranges) => n.checked_add(ranges.iter().map(|r| r.widest()).max()?),
    });
    if parts.iter().any(|p| matches!(p, Part::Numbers(_)))
        && longest.is_none_or(|n| n > MAX_NAME_BYTES)
    {
        return Err(format!(
            "{}: makes names longer than {MAX_NAME_BYTES} characters (Slurm's most for a \
             name from a range): a typo in a number's width?",
            quoted(item)
        ));
    }
    Ok(parts)
}

/// The ranges of one bracket's text (`01-04,10`).
fn ranges_of(item: &str, body: &str) -> Result<Vec<Range>, String> {
    if body.is_empty() {
        return Err(format!("{}: empty brackets", quoted(item)));
    }
    body.split(',')
        .map(|range| {
            let bad = || {
                format!(
                    "{}: {} is not a number or a range of numbers (lo-hi, lo <= hi)",
                    quoted(item),
                    quoted(range)
                )
            };
            let (lo_text, hi_text) = range.split_once('-').unwrap_or((range, range));
            let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
            if !digits(lo_text) || !digits(hi_text) {
                return Err(bad());
            }
            // Wider than a name may be: refused before it is read as a
            // number (the whole name's length is checked by the caller).
            if lo_text.len().max(hi_text.len()) > MAX_NAME_BYTES {
                return Err(format!(
                    "{}: {} is written wider than {MAX_NAME_BYTES} digits (Slurm's longest \
                     name from a range): a typo in a number's width?",
                    quoted(item),
                    quoted(range)
                ));
            }
            let (Ok(lo), Ok(hi)) = (lo_text.parse::<u64>(), hi_text.parse::<u64>()) else {
                return Err(too_many(item));
            };
            if lo > hi {
                return Err(bad());
            }
            let range = Range {
                lo,
                hi,
                width: lo_text.len(),
            };
            // One range past the bound is refused as Slurm's
            // `_parse_single_range` refuses it, whatever follows.
            if range.count() > MAX_NAMES as u64 {
                return Err(too_many(item));
            }
            Ok(range)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &str) -> Vec<String> {
        expand(list).unwrap_or_else(|e| panic!("{list}: {e}"))
    }

    #[test]
    fn lists_expand_as_slurm_writes_them() {
        assert_eq!(names("gpu01"), ["gpu01"]);
        assert_eq!(
            names("gpu[01-03,10],login"),
            ["gpu01", "gpu02", "gpu03", "gpu10", "login"]
        );
        // As wide as the range's first number.
        assert_eq!(names("n[8-10]"), ["n8", "n9", "n10"]);
        assert_eq!(names("n[08-10]"), ["n08", "n09", "n10"]);
        assert_eq!(names("n[098-100]"), ["n098", "n099", "n100"]);
        // Text after a bracket, and several brackets: every combination.
        assert_eq!(names("gpu[1-2]-ib"), ["gpu1-ib", "gpu2-ib"]);
        assert_eq!(names("r[1-2]n[1-2]"), ["r1n1", "r1n2", "r2n1", "r2n2"]);
        // Each name once, in the order written.
        assert_eq!(names("b,a[1-2],a1,b"), ["b", "a1", "a2"]);
        assert_eq!(names("node-1.cluster_x"), ["node-1.cluster_x"]);
    }

    #[test]
    fn what_slurm_would_not_read_is_refused_with_the_reason() {
        for (list, want) in [
            ("", "an empty name"),
            ("a,,b", "an empty name"),
            ("gpu[01-04", "without its ']'"),
            ("gpu01-04]", "without its '['"),
            ("gpu[[1-2]]", "without its ']'"),
            ("gpu[]", "empty brackets"),
            ("gpu[4-1]", "\"4-1\" is not a number or a range"),
            ("gpu[a-b]", "\"a-b\" is not a number"),
            ("gpu[1-]", "\"1-\" is not a number"),
            ("gpu[-1]", "\"-1\" is not a number"),
            ("gpu[1--2]", "is not a number"),
            ("gpu{01-04}", "'{' is not in a node name"),
            ("gpu*", "'*' is not in a node name"),
        ] {
            let got = expand(list).err().unwrap_or_default();
            assert!(got.contains(want), "{list:?}: {got}");
        }
    }

    #[test]
    fn a_typo_in_a_range_is_refused_at_once_never_expanded() {
        let start = std::time::Instant::now();
        for list in [
            "gpu[1-99999999]",
            "gpu[1-18446744073709551615]",
            "gpu[1-99999999999999999999999]",
            "a[1-1000]b[1-1000]",
            "a[0-999999999].b[0-9]",
            "a[1-40000],b[1-40000]",
        ] {
            let got = expand(list).err().unwrap_or_default();
            assert!(got.contains("more than 65536 nodes"), "{list:?}: {got}");
        }
        // Bounded work: no expansion happened (a hang would show here).
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
        // The most Slurm takes still expands.
        assert_eq!(expand("n[1-65536]").map(|n| n.len()), Ok(MAX_NAMES));
    }

    #[test]
    fn a_range_past_what_a_u64_counts_is_refused_not_wrapped() {
        // hi - lo + 1 is 2^64: it wrapped to 0 names counted, then the
        // expansion ran without end (a panic where overflow is checked).
        for list in [
            "n[0-18446744073709551615]",
            "n[00-18446744073709551615]",
            "n[1-2,0-18446744073709551615]",
            "a[1-2]b[0-18446744073709551615]",
        ] {
            let got = expand(list).err().unwrap_or_default();
            assert!(got.contains("more than 65536 nodes"), "{list:?}: {got}");
        }
        // The last numbers a u64 holds are still numbers.
        assert_eq!(
            names("n[18446744073709551614-18446744073709551615]"),
            ["n18446744073709551614", "n18446744073709551615"]
        );
    }

    #[test]
    fn a_name_longer_than_slurm_makes_from_a_range_is_refused_unmade() {
        let zeros = "0".repeat(99_999);
        let start = std::time::Instant::now();
        for list in [
            // 100,000 digits wide: 65,536 names of 100 kB each.
            format!("n[{zeros}1-{zeros}2]"),
            format!("n[1-2,{zeros}1]"),
            format!("n[{}1-2]", "0".repeat(MAX_NAME_BYTES)),
            // The width of the name, not only of the number.
            format!("{}[1-2]", "a".repeat(MAX_NAME_BYTES)),
            format!("a[1-2]{}", "b".repeat(MAX_NAME_BYTES)),
            format!("{}[01-02]", "a".repeat(MAX_NAME_BYTES - 1)),
        ] {
            let got = expand(&list).err().unwrap_or_default();
            assert!(
                got.contains(&format!("{MAX_NAME_BYTES}")) && got.contains("width"),
                "{}: {got}",
                quoted(&list)
            );
            // The reason is one line to read, not the text written back.
            assert!(got.len() < 400, "{} characters", got.len());
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
        // As long as Slurm writes them: still names.
        let widest = format!("{}[1-2]", "a".repeat(MAX_NAME_BYTES - 1));
        assert_eq!(expand(&widest).map(|n| n.len()), Ok(2));
        // A name without a range makes nothing longer than it is written.
        let plain = "a".repeat(200);
        assert_eq!(names(&plain), [plain.as_str()]);
    }

    #[test]
    fn a_long_text_is_quoted_cut() {
        assert_eq!(quoted("gpu[01]"), "\"gpu[01]\"");
        let long = "é".repeat(100);
        let got = quoted(&long);
        assert!(got.ends_with("...\" (200 characters)"), "{got}");
        assert!(got.len() < 100, "{got}");
    }

    proptest::proptest! {
        /// Whatever the numbers and their width: an answer at once, never
        /// more than the bounds, and the count a range holds.
        #[test]
        fn any_range_is_bounded_before_it_is_made(
            lo in proptest::prelude::any::<u64>(),
            span in proptest::prop_oneof![
                0u64..70_000,
                proptest::prelude::any::<u64>(),
            ],
            pad in 0usize..100,
            prefix in "[a-z]{1,90}",
        ) {
            let hi = lo.saturating_add(span);
            let list = format!("{prefix}[{}{lo}-{hi}]", "0".repeat(pad));
            match expand(&list) {
                Ok(names) => {
                    proptest::prop_assert_eq!(names.len() as u64, hi - lo + 1);
                    proptest::prop_assert!(names.len() <= MAX_NAMES);
                    proptest::prop_assert!(names.iter().all(|n| n.len() <= MAX_NAME_BYTES));
                }
                Err(why) => {
                    let fits = prefix.len() + (pad + lo.to_string().len()).max(hi.to_string().len())
                        <= MAX_NAME_BYTES;
                    proptest::prop_assert!(
                        hi - lo >= MAX_NAMES as u64 || !fits,
                        "{}: {why}",
                        quoted(&list)
                    );
                }
            }
        }
    }
}
