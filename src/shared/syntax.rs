//! The `Key=Value` line syntax of Slurm's own config files, shared by
//! `gpu_qos.conf` and `gpu_mps.conf`: `#` starts a comment anywhere on a
//! line, blank lines are ignored, several whitespace-separated `Key=Value`
//! words may share a line. Keys are matched case-insensitively by callers.
//!
//! [`ConfigError`] is the one error both files report: `file:line: reason`.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// A problem in a configuration file, shown as `file:line: reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    /// 1-based; 0 when the file as a whole is the problem (unreadable).
    pub line: usize,
    pub reason: String,
}

impl ConfigError {
    pub fn new(file: &str, line: usize, reason: impl fmt::Display) -> Self {
        Self {
            file: file.to_owned(),
            line,
            reason: reason.to_string(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.reason)
        } else {
            write!(f, "{}:{}: {}", self.file, self.line, self.reason)
        }
    }
}

impl std::error::Error for ConfigError {}

/// Reads and parses the configuration file at `path`. `Ok(None)`: there is
/// none (what that means is the caller's to decide).
pub fn load<T>(
    path: &Path,
    parse: impl FnOnce(&str, &str) -> Result<T, ConfigError>,
) -> Result<Option<T>, ConfigError> {
    let name = path.to_string_lossy();
    match std::fs::read_to_string(path) {
        Ok(text) => parse(&text, &name).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ConfigError::new(&name, 0, e)),
    }
}

/// One `Key=Value` word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pair<'a> {
    pub key: &'a str,
    pub value: &'a str,
}

/// The value of the first pair of a line named `key`, without case.
pub fn value_of<'a>(pairs: &[Pair<'a>], key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|p| p.key.eq_ignore_ascii_case(key))
        .map(|p| p.value)
}

/// A word without `=`. (`Key=` with an empty value is a [`Pair`]: callers
/// report it after recognising the key, so the message can name it.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingEquals(pub String);

/// The key of `keys` whose canonical spelling (`name_of`) is `name`, up to
/// ASCII case, as Slurm matches its own keys.
pub fn key_named<K: Copy>(keys: &[K], name_of: fn(K) -> &'static str, name: &str) -> Option<K> {
    keys.iter()
        .copied()
        .find(|k| name_of(*k).eq_ignore_ascii_case(name))
}

/// The words of each non-empty line, with 1-based line numbers.
pub fn lines(text: &str) -> impl Iterator<Item = (usize, Result<Vec<Pair<'_>>, MissingEquals>)> {
    text.lines().enumerate().filter_map(|(i, raw)| {
        let content = raw.split('#').next().unwrap_or("");
        let words: Vec<&str> = content.split_whitespace().collect();
        if words.is_empty() {
            return None;
        }
        let pairs = words
            .into_iter()
            .map(|w| match w.split_once('=') {
                None => Err(MissingEquals(w.to_owned())),
                Some((key, value)) => Ok(Pair { key, value }),
            })
            .collect();
        Some((i + 1, pairs))
    })
}

/// The values of every `key=value` line of slurm.conf's text
/// (`slurm_conf`) whose key is `key` (case-blind, as Slurm reads keys),
/// comments cut, in file order.
pub fn slurm_conf_values<'a>(
    slurm_conf: &'a str,
    key: &'a str,
) -> impl DoubleEndedIterator<Item = &'a str> {
    slurm_conf
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter_map(|l| l.split_once('='))
        .filter(move |(k, _)| k.trim().eq_ignore_ascii_case(key))
        .map(|(_, v)| v.trim())
}

/// Splits `text` at the commas outside `open`…`close` brackets, dropping
/// empty items: Slurm host lists (`a[1-2,5],b`) and node `Gres=` values
/// (`gpu:a40:2(S:0,1),mps:100`) nest commas that way.
pub fn split_top_level(text: &str, open: char, close: char) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        if c == open {
            depth += 1;
        } else if c == close {
            depth = depth.saturating_sub(1);
        } else if c == ',' && depth == 0 {
            items.push(&text[start..i]);
            start = i + 1;
        }
    }
    items.push(&text[start..]);
    items.into_iter().filter(|s| !s.is_empty()).collect()
}

/// Splits a Slurm host list at its top-level commas
/// (`a[1-2,5],b` → `a[1-2,5]`, `b`).
fn top_level_items(list: &str) -> Vec<&str> {
    split_top_level(list, '[', ']')
}

/// Whether the Slurm host list `list` (`gpu[01-04],login`) names `host`.
pub fn hostlist_contains(list: &str, host: &str) -> bool {
    top_level_items(list).into_iter().any(|item| {
        let Some((prefix, rest)) = item.split_once('[') else {
            return item == host || item.eq_ignore_ascii_case("ALL");
        };
        let Some((body, suffix)) = rest.split_once(']') else {
            return false;
        };
        let Some(number) = host
            .strip_prefix(prefix)
            .and_then(|h| h.strip_suffix(suffix))
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        else {
            return false;
        };
        let Ok(n) = number.parse::<u64>() else {
            return false;
        };
        body.split(',').any(|range| {
            let (first, last) = range.split_once('-').unwrap_or((range, range));
            let (Ok(a), Ok(b)) = (first.parse::<u64>(), last.parse::<u64>()) else {
                return false;
            };
            // gpu[01-04] names gpu01, not gpu1; gpu[1-4] names gpu1, not gpu01.
            let width = (first.len() > 1 && first.starts_with('0')).then_some(first.len());
            let written = match width {
                Some(w) => number.len() == w,
                None => number == n.to_string(),
            };
            (a..=b).contains(&n) && written
        })
    })
}

/// A GPU type a job can actually ask for (and gres.conf can name): a word
/// the GRES parser would read as a type, not as a count (so `1080` is
/// refused: `gpu:1080` means 1080 GPUs).
pub fn is_gpu_type(t: &str) -> bool {
    let word = !t.is_empty()
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    let count_shaped = {
        let digits = t.trim_end_matches(['k', 'K', 'm', 'M', 'g', 'G']);
        t.len() - digits.len() <= 1
            && !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
    };
    word && !count_shaped
}

/// Expands `/dev/nvidia[0-3]`, `/dev/nvidia[0,2,4-5]` and comma lists of
/// such into paths, in order.
pub fn expand_devices(spec: &str) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    let mut rest = spec;
    while !rest.is_empty() {
        // A comma inside brackets belongs to the range list.
        let mut depth = 0;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '[' => depth += 1,
                    ']' => depth -= 1,
                    _ => {}
                }
                c == ',' && depth == 0
            })
            .map_or(rest.len(), |(i, _)| i);
        let item = &rest[..end];
        rest = rest.get(end + 1..).unwrap_or("");
        if item.is_empty() {
            return Err(format!("empty entry in GPUDevices \"{spec}\""));
        }
        match (item.find('['), item.find(']')) {
            (None, None) => out.push(PathBuf::from(item)),
            (Some(open), Some(close)) if open < close && close == item.len() - 1 => {
                let prefix = &item[..open];
                for part in item[open + 1..close].split(',') {
                    let (a, b) = part.split_once('-').unwrap_or((part, part));
                    let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) else {
                        return Err(format!("bad range \"{part}\" in GPUDevices \"{spec}\""));
                    };
                    if a > b || b - a > 1024 {
                        return Err(format!("bad range \"{part}\" in GPUDevices \"{spec}\""));
                    }
                    out.extend((a..=b).map(|n| PathBuf::from(format!("{prefix}{n}"))));
                }
            }
            _ => return Err(format!("bad brackets in GPUDevices entry \"{item}\"")),
        }
    }
    if let Some(p) = out.iter().find(|p| !p.is_absolute()) {
        return Err(format!(
            "GPUDevices must be absolute paths, got \"{}\"",
            p.display()
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commas_inside_brackets_do_not_split() {
        assert_eq!(
            split_top_level("a[1-2,5],b,,c", '[', ']'),
            ["a[1-2,5]", "b", "c"]
        );
        assert_eq!(
            split_top_level("gpu:a40:2(S:0,1),mps:100", '(', ')'),
            ["gpu:a40:2(S:0,1)", "mps:100"]
        );
        assert_eq!(split_top_level("x]],y", '[', ']'), ["x]]", "y"]);
    }

    #[test]
    fn comments_blank_lines_and_several_pairs_per_line() {
        let text = "# header\n\nA=1 B=two # tail\n  C=x=y\n";
        let got: Vec<_> = lines(text).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, 3);
        assert_eq!(
            got[0].1,
            Ok(vec![
                Pair {
                    key: "A",
                    value: "1"
                },
                Pair {
                    key: "B",
                    value: "two"
                }
            ])
        );
        assert_eq!(
            got[1],
            (
                4,
                Ok(vec![Pair {
                    key: "C",
                    value: "x=y"
                }])
            )
        );
    }

    #[test]
    fn bad_words_are_reported_with_their_line() {
        let got: Vec<_> = lines("A=1\nlonely\nB=\n").collect();
        assert_eq!(got[1], (2, Err(MissingEquals("lonely".into()))));
        assert_eq!(
            got[2],
            (
                3,
                Ok(vec![Pair {
                    key: "B",
                    value: ""
                }])
            )
        );
    }
}
