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

/// The most names one host list may expand to: Slurm's `MAX_SLURM_NODES`
/// (64 K), the most a cluster holds (`gpu[1-99999999]` is refused, never
/// expanded).
pub const MAX_NAMES: usize = 65_536;

/// One range inside brackets: its numbers and how wide each is written.
#[derive(Debug, Clone, Copy)]
struct Range {
    lo: u64,
    hi: u64,
    width: usize,
}

impl Range {
    fn count(self) -> u64 {
        self.hi - self.lo + 1
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
        return Err(format!("\"{list}\": an empty name"));
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
            return Err(format!(
                "\"{list}\" names more than {MAX_NAMES} nodes (Slurm's most): a typo in a range?"
            ));
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
                    .ok_or_else(|| format!("\"{item}\": a '[' without its ']'"))?;
                parts.push(Part::Numbers(ranges_of(item, &inner[..close])?));
                rest = &inner[close + 1..];
            }
            Some(_) => return Err(format!("\"{item}\": a ']' without its '['")),
        }
    }
    for part in &parts {
        if let Part::Text(t) = part {
            if let Some(c) = t
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
            {
                return Err(format!(
                    "\"{item}\": '{c}' is not in a node name (letters, digits, '-', '_', '.')"
                ));
            }
        }
    }
    Ok(parts)
}

/// The ranges of one bracket's text (`01-04,10`).
fn ranges_of(item: &str, body: &str) -> Result<Vec<Range>, String> {
    if body.is_empty() {
        return Err(format!("\"{item}\": empty brackets"));
    }
    body.split(',')
        .map(|range| {
            let bad = || {
                format!(
                    "\"{item}\": \"{range}\" is not a number or a range of numbers (lo-hi, lo <= hi)"
                )
            };
            let (lo_text, hi_text) = range.split_once('-').unwrap_or((range, range));
            let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
            if !digits(lo_text) || !digits(hi_text) {
                return Err(bad());
            }
            let (Ok(lo), Ok(hi)) = (lo_text.parse::<u64>(), hi_text.parse::<u64>()) else {
                return Err(format!(
                    "\"{item}\": \"{range}\" names more than {MAX_NAMES} nodes (Slurm's most): a typo in a range?"
                ));
            };
            if lo > hi {
                return Err(bad());
            }
            Ok(Range {
                lo,
                hi,
                width: lo_text.len(),
            })
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
}
