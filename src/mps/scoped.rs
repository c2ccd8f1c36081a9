//! `gpu_mps.conf`'s lines by the nodes they are for: one file for every
//! node of a shared `/etc/slurm` (NFS, configless sites' own copy).
//!
//! As in Slurm's own `gres.conf` ("the first parameter on the line should
//! be NodeName", gres.conf(5); `_parse_gres_config_node` in
//! `src/interfaces/gres.c`), a line whose first word is `NodeName=<host
//! list>` is for the nodes that list names, and only that line: there are
//! no blocks. A line without it is for every node. So
//!
//! ```text
//! UnitsPerGPU=100
//! NodeName=gpu[01-04] GPUDevices=/dev/nvidia[0-3]
//! NodeName=gpu05      GPUDevices=/dev/nvidia[0-1] UnitsPerGPU=50
//! ```
//!
//! gives gpu01 to gpu04 four GPUs of 100 units and gpu05 two of 50. What
//! the values mean, and which one a node takes, is `config`'s; this room
//! reads the lines, the host lists (bounded: [`hostlist::MAX_NAMES`] a
//! list, [`MAX_NAMES_IN_FILE`] in all) and what can be wrong with where
//! `NodeName=` stands.

use crate::shared::hostlist;
use crate::shared::syntax::{self as kv, MissingEquals};

/// The most node names all `NodeName=` lines of one file may hold
/// together: a few lines per node of the largest cluster Slurm runs.
pub const MAX_NAMES_IN_FILE: usize = 4 * hostlist::MAX_NAMES;

/// A `NodeName=` line: its number, its list as written, the names it holds
/// (sorted, each once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    pub line: usize,
    pub list: String,
    names: Vec<String>,
}

impl Scope {
    /// Whether this line is for `node`.
    pub fn names(&self, node: &str) -> bool {
        self.names
            .binary_search_by(|n| n.as_str().cmp(node))
            .is_ok()
    }

    /// Every node this line is for.
    pub fn nodes(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }
}

/// One `Key=Value` of the file, with its line and the `NodeName=` line it
/// sits on (an index into [`Lines::scopes`]; `None`: for every node).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Word<'a> {
    pub key: &'a str,
    pub value: &'a str,
    pub line: usize,
    pub scope: Option<usize>,
}

/// The file's words and its `NodeName=` lines.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Lines<'a> {
    pub words: Vec<Word<'a>>,
    pub scopes: Vec<Scope>,
}

impl Lines<'_> {
    /// The `NodeName=` lines for `node`.
    pub fn scopes_of<'s>(&'s self, node: &'s str) -> impl Iterator<Item = &'s Scope> + 's {
        self.scopes.iter().filter(move |s| s.names(node))
    }

    /// Whether `word` is for `node`: on a line without `NodeName=`, or on
    /// one that names it.
    pub fn is_for(&self, word: &Word<'_>, node: &str) -> bool {
        word.scope
            .is_none_or(|s| self.scopes.get(s).is_some_and(|s| s.names(node)))
    }
}

/// The words of `text`, each with the nodes it is for; `Err`: the line and
/// what is wrong there.
pub fn read(text: &str) -> Result<Lines<'_>, (usize, String)> {
    let mut lines = Lines::default();
    let mut names_in_file = 0usize;
    for (line, pairs) in kv::lines(text) {
        let pairs =
            pairs.map_err(|MissingEquals(w)| (line, format!("expected Key=Value, got \"{w}\"")))?;
        let (scope, rest) = match pairs.split_first() {
            Some((first, rest)) if is_node_name(first.key) => {
                let scope = scope_of(line, first.value, rest.is_empty())?;
                names_in_file += scope.names.len();
                if names_in_file > MAX_NAMES_IN_FILE {
                    return Err((
                        line,
                        format!(
                            "the NodeName= lines name more than {MAX_NAMES_IN_FILE} nodes in all"
                        ),
                    ));
                }
                lines.scopes.push(scope);
                (Some(lines.scopes.len() - 1), rest)
            }
            _ => (None, &pairs[..]),
        };
        for p in rest {
            if is_node_name(p.key) {
                return Err((
                    line,
                    format!(
                        "{}={} must be the first word of its line: it names the nodes the \
                         settings after it on that line are for",
                        p.key, p.value
                    ),
                ));
            }
            lines.words.push(Word {
                key: p.key,
                value: p.value,
                line,
                scope,
            });
        }
    }
    Ok(lines)
}

fn is_node_name(key: &str) -> bool {
    key.eq_ignore_ascii_case("NodeName")
}

/// The `NodeName=` of `line` (`alone`: nothing follows it there).
fn scope_of(line: usize, list: &str, alone: bool) -> Result<Scope, (usize, String)> {
    let err = |why: String| Err((line, why));
    if list.is_empty() {
        return err("NodeName has an empty value".to_owned());
    }
    if alone {
        return err(format!(
            "NodeName={list} sets nothing: a NodeName= line is for the settings on that same \
             line (as in gres.conf), so write them after it there"
        ));
    }
    if ["DEFAULT", "ALL"]
        .iter()
        .any(|w| list.eq_ignore_ascii_case(w))
    {
        return err(format!(
            "NodeName={list}: a line without NodeName= is for every node; write the settings \
             there"
        ));
    }
    // A long list is quoted cut: the reason quotes what is wrong in it.
    let shown = if list.len() > hostlist::MAX_NAME_BYTES {
        hostlist::quoted(list)
    } else {
        list.to_owned()
    };
    let mut names = hostlist::expand(list).map_err(|e| (line, format!("NodeName={shown}: {e}")))?;
    names.sort_unstable();
    Ok(Scope {
        line,
        list: list.to_owned(),
        names,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_name_line_is_for_its_nodes_and_only_that_line() {
        let text = "UnitsPerGPU=100\n\
                    NodeName=gpu[01-02] GPUDevices=/dev/nvidia[0-3] # four\n\
                    \n\
                    MetricsFile=/x\n\
                    nodename=gpu02 UnitsPerGPU=50 Banner=log\n";
        let lines = read(text).unwrap_or_else(|e| panic!("{e:?}"));
        let keys_for = |node: &str| -> Vec<(usize, &str)> {
            lines
                .words
                .iter()
                .filter(|w| lines.is_for(w, node))
                .map(|w| (w.line, w.key))
                .collect()
        };
        assert_eq!(
            keys_for("gpu01"),
            [(1, "UnitsPerGPU"), (2, "GPUDevices"), (4, "MetricsFile")]
        );
        assert_eq!(
            keys_for("gpu02"),
            [
                (1, "UnitsPerGPU"),
                (2, "GPUDevices"),
                (4, "MetricsFile"),
                (5, "UnitsPerGPU"),
                (5, "Banner")
            ]
        );
        assert_eq!(keys_for("gpu03"), [(1, "UnitsPerGPU"), (4, "MetricsFile")]);
        let lists: Vec<(usize, &str)> = lines
            .scopes_of("gpu02")
            .map(|s| (s.line, s.list.as_str()))
            .collect();
        assert_eq!(lists, [(2, "gpu[01-02]"), (5, "gpu02")]);
        assert_eq!(lines.scopes_of("gpu1").count(), 0);
    }

    #[test]
    fn node_name_out_of_place_is_refused_with_its_line() {
        for (text, line, want) in [
            (
                "UnitsPerGPU=1 NodeName=gpu01\n",
                1,
                "must be the first word",
            ),
            (
                "\nNodeName=a NodeName=b UnitsPerGPU=1\n",
                2,
                "NodeName=b must be the first word",
            ),
            ("NodeName=gpu01\nUnitsPerGPU=1\n", 1, "sets nothing"),
            ("NodeName=gpu01 # a block?\n", 1, "sets nothing"),
            (
                "NodeName= UnitsPerGPU=1\n",
                1,
                "NodeName has an empty value",
            ),
            (
                "NodeName=DEFAULT UnitsPerGPU=1\n",
                1,
                "a line without NodeName=",
            ),
            (
                "NodeName=all UnitsPerGPU=1\n",
                1,
                "a line without NodeName=",
            ),
            (
                "NodeName=gpu[01-04 UnitsPerGPU=1\n",
                1,
                "NodeName=gpu[01-04: \"gpu[01-04\": a '[' without its ']'",
            ),
            (
                "NodeName=gpu[1-99999999] UnitsPerGPU=1\n",
                1,
                "more than 65536 nodes",
            ),
            (
                "NodeName=gpu01 lonely\n",
                1,
                "expected Key=Value, got \"lonely\"",
            ),
        ] {
            let got = read(text).err();
            assert!(
                got.as_ref()
                    .is_some_and(|(l, why)| *l == line && why.contains(want)),
                "{text:?}: {got:?}"
            );
        }
    }

    #[test]
    fn a_range_past_the_bounds_is_a_line_of_the_file_refused_at_once() {
        // Another node's line: the file is refused as a whole, at its line,
        // before any name is made.
        let zeros = "0".repeat(99_999);
        let start = std::time::Instant::now();
        for (bad, want) in [
            (
                "n[0-18446744073709551615]".to_owned(),
                "more than 65536 nodes",
            ),
            (
                format!("n[{zeros}1-{zeros}65536]"),
                "a typo in a number's width",
            ),
        ] {
            let text = format!(
                "UnitsPerGPU=100\nNodeName=gpu01 UnitsPerGPU=50\nNodeName={bad} UnitsPerGPU=1\n"
            );
            let got = read(&text).err();
            assert!(
                got.as_ref()
                    .is_some_and(|(l, why)| *l == 3 && why.contains(want) && why.len() < 600),
                "{:?}",
                got.map(|(l, why)| (l, why.chars().take(300).collect::<String>()))
            );
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn the_names_of_a_whole_file_are_bounded() {
        let line = "NodeName=n[1-65536] UnitsPerGPU=1\n";
        assert!(read(&line.repeat(4)).is_ok());
        let got = read(&line.repeat(5)).err();
        assert!(
            got.as_ref()
                .is_some_and(|(l, why)| *l == 5 && why.contains("in all")),
            "{got:?}"
        );
    }
}
