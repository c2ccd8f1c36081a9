//! The benchmarks' memory: what `make bench` measured last, kept in
//! `tests/bench/figures.txt`, each new run compared with it, and
//! docs/performance.md's table made from it.
//!
//! A benchmark prints one summary line a row:
//! `ROW|what|figure|command|name=VALUE UNIT lower; name=VALUE UNIT higher`.
//! The figure is the row's text for people; the keys after it are the
//! numbers the comparison reads, each with the direction that is better.
//! The file keeps the rows of each benchmark with the day and machine it
//! ran on. A run replaces the rows of the benchmarks it ran and keeps
//! the others; a row it no longer prints goes.
//!
//! A change of more than [`WORSE_MARK`] for the worse is marked. The
//! machines benchmarks run on are noisy: the mark asks for a look, and
//! nothing fails on it.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// How much worse a figure may be before its row is marked (20 %).
pub const WORSE_MARK: f64 = 0.20;

/// Where docs/performance.md's generated part starts and ends.
pub const DOC_BEGIN: &str =
    "<!-- bench figures: made by `make bench` from tests/bench/figures.txt; edit neither by hand -->";
pub const DOC_END: &str = "<!-- end of bench figures -->";

/// Which way a figure is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    Lower,
    Higher,
}

/// One number of a row the comparison reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    pub name: String,
    pub value: f64,
    pub unit: String,
    pub better: Better,
}

impl Key {
    pub fn lower(name: &str, value: f64, unit: &str) -> Key {
        Key {
            name: name.to_owned(),
            value,
            unit: unit.to_owned(),
            better: Better::Lower,
        }
    }

    pub fn higher(name: &str, value: f64, unit: &str) -> Key {
        Key {
            better: Better::Higher,
            ..Key::lower(name, value, unit)
        }
    }

    fn text(&self) -> String {
        let better = match self.better {
            Better::Lower => "lower",
            Better::Higher => "higher",
        };
        format!(
            "{}={} {} {better}",
            self.name,
            significant(self.value),
            self.unit
        )
    }

    fn parse(text: &str) -> Result<Key, String> {
        let bad = || format!("\"{text}\" is not name=VALUE UNIT lower|higher");
        let (name, rest) = text.trim().split_once('=').ok_or_else(bad)?;
        let words: Vec<&str> = rest.split_whitespace().collect();
        let [value, unit, better] = words[..] else {
            return Err(bad());
        };
        let value: f64 = value.parse().map_err(|_| bad())?;
        if !value.is_finite() || name.trim().is_empty() {
            return Err(bad());
        }
        let better = match better {
            "lower" => Better::Lower,
            "higher" => Better::Higher,
            _ => return Err(bad()),
        };
        Ok(Key {
            name: name.trim().to_owned(),
            value,
            unit: unit.to_owned(),
            better,
        })
    }
}

/// `value` with four significant digits at most, as the file keeps it.
fn significant(value: f64) -> String {
    if value == 0.0 || !value.is_finite() {
        return format!("{value}");
    }
    let digits = 3 - value.abs().log10().floor() as i32;
    let text = format!("{:.*}", digits.max(0) as usize, value);
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// One row of a benchmark's summary.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub what: String,
    pub figure: String,
    pub command: String,
    pub keys: Vec<Key>,
}

impl Row {
    /// The `ROW|...` line a benchmark prints.
    pub fn line(&self) -> String {
        let keys: Vec<String> = self.keys.iter().map(Key::text).collect();
        format!(
            "ROW|{}|{}|{}|{}",
            self.what,
            self.figure,
            self.command,
            keys.join("; ")
        )
    }

    /// A `ROW|...` line read back; `None` for any other line.
    pub fn parse_line(line: &str) -> Option<Result<Row, String>> {
        let rest = line.strip_prefix("ROW|")?;
        Some(Row::parse_fields(rest))
    }

    fn parse_fields(text: &str) -> Result<Row, String> {
        let fields: Vec<&str> = text.split('|').collect();
        let [what, figure, command, keys] = fields[..] else {
            return Err(format!(
                "\"{text}\" has not the four fields what|figure|command|keys"
            ));
        };
        let keys = keys
            .split(';')
            .filter(|k| !k.trim().is_empty())
            .map(Key::parse)
            .collect::<Result<Vec<_>, _>>()?;
        if keys.is_empty() {
            return Err(format!("the row \"{what}\" names no figure to compare"));
        }
        Ok(Row {
            what: what.to_owned(),
            figure: figure.to_owned(),
            command: command.to_owned(),
            keys,
        })
    }
}

/// Prints a benchmark's summary row for `make bench`.
pub fn print_row(what: &str, figure: &str, command: &str, keys: &[Key]) {
    let row = Row {
        what: what.to_owned(),
        figure: figure.to_owned(),
        command: command.to_owned(),
        keys: keys.to_vec(),
    };
    println!("{}", row.line());
}

/// One benchmark's run: when, where, and its rows in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub day: String,
    pub machine: String,
    pub rows: Vec<Row>,
}

/// What the file keeps: every benchmark's last run, in `make bench`'s order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Figures {
    pub runs: Vec<(String, Run)>,
}

const FILE_HEAD: &str = "\
# The benchmarks' last figures: written by `make bench`, which compares each
# run with them and makes docs/performance.md's table from them. A line
# `@bench|day|machine` starts a benchmark's rows, one `what|figure|command|keys`
# a line (keys: name=VALUE UNIT lower|higher, the numbers compared).
";

impl Figures {
    pub fn parse(text: &str) -> Result<Figures, String> {
        let mut figures = Figures::default();
        for (n, line) in text.lines().enumerate() {
            let at = |e: String| format!("tests/bench/figures.txt:{}: {e}", n + 1);
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(head) = line.strip_prefix('@') {
                let fields: Vec<&str> = head.split('|').collect();
                let [bench, day, machine] = fields[..] else {
                    return Err(at(format!("\"{line}\" is not @bench|day|machine")));
                };
                figures.runs.push((
                    bench.to_owned(),
                    Run {
                        day: day.to_owned(),
                        machine: machine.to_owned(),
                        rows: Vec::new(),
                    },
                ));
                continue;
            }
            let row = Row::parse_fields(line).map_err(at)?;
            match figures.runs.last_mut() {
                Some((_, run)) => run.rows.push(row),
                None => return Err(at("a row before any @bench line".to_owned())),
            }
        }
        Ok(figures)
    }

    pub fn text(&self) -> String {
        let mut out = FILE_HEAD.to_owned();
        for (bench, run) in &self.runs {
            let _ = writeln!(out, "@{bench}|{}|{}", run.day, run.machine);
            for row in &run.rows {
                let line = row.line();
                let _ = writeln!(out, "{}", line.strip_prefix("ROW|").unwrap_or(&line));
            }
        }
        out
    }

    fn run(&self, bench: &str) -> Option<&Run> {
        self.runs.iter().find(|(b, _)| b == bench).map(|(_, r)| r)
    }

    /// These figures with the benchmarks of `new` replaced in their
    /// place; a benchmark not kept before comes last.
    pub fn updated(&self, new: &[(String, Run)]) -> Figures {
        let mut runs: Vec<(String, Run)> = self
            .runs
            .iter()
            .map(|(b, kept)| {
                let run = new.iter().find(|(n, _)| n == b).map_or(kept, |(_, r)| r);
                (b.clone(), run.clone())
            })
            .collect();
        for (b, r) in new {
            if !runs.iter().any(|(kept, _)| kept == b) {
                runs.push((b.clone(), r.clone()));
            }
        }
        Figures { runs }
    }
}

/// How much worse one key got, as a fraction (0.25: 25 % worse):
/// more time, or fewer of a rate; `None` where the kept value is no
/// base for a fraction.
fn worse_by(old: &Key, new: &Key) -> Option<f64> {
    if old.value <= 0.0 || new.value < 0.0 {
        return None;
    }
    Some(match new.better {
        Better::Lower => new.value / old.value - 1.0,
        Better::Higher => 1.0 - new.value / old.value,
    })
}

/// The change column of one row against the kept one.
pub fn change(old: Option<&Row>, new: &Row) -> String {
    let Some(old) = old else {
        return "new".to_owned();
    };
    let mut parts = Vec::new();
    let mut marked = false;
    for key in &new.keys {
        let Some(before) = old.keys.iter().find(|k| k.name == key.name) else {
            parts.push(format!("{} new", key.name));
            continue;
        };
        let Some(worse) = worse_by(before, key) else {
            parts.push(format!("{} {} → {}", key.name, before.value, key.value));
            continue;
        };
        let moved = (key.value / before.value - 1.0) * 100.0;
        parts.push(format!("{} {moved:+.0} %", key.name));
        marked |= worse > WORSE_MARK;
    }
    let text = parts.join(", ");
    if marked {
        format!("**{text}: over 20 % worse, look**")
    } else {
        text
    }
}

/// The table `make bench` prints: each row's figure and its change
/// against the kept figures, then the rows kept that the run no longer gave.
pub fn comparison(kept: &Figures, new: &[(String, Run)]) -> String {
    let mut out = String::from("| what | figure | change | reproduce |\n|---|---|---|---|\n");
    for (bench, run) in new {
        let old = kept.run(bench);
        for row in &run.rows {
            let before = old.and_then(|o| o.rows.iter().find(|r| r.what == row.what));
            let _ = writeln!(
                out,
                "| {} | {} | {} | `{}` |",
                row.what,
                row.figure,
                change(before, row),
                row.command
            );
        }
        for gone in old
            .map(|o| o.rows.as_slice())
            .unwrap_or_default()
            .iter()
            .filter(|o| !run.rows.iter().any(|r| r.what == o.what))
        {
            let _ = writeln!(
                out,
                "| {} | (no longer measured; was {}) | gone | `{}` |",
                gone.what, gone.figure, gone.command
            );
        }
    }
    out
}

/// docs/performance.md's generated part: the table of every kept row and
/// when and where each benchmark ran.
pub fn doc_table(figures: &Figures) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{DOC_BEGIN}");
    let _ = writeln!(out, "| what | figure | reproduce |\n|---|---|---|");
    let mut last_command = "";
    for (_, run) in &figures.runs {
        for row in &run.rows {
            let reproduce = if row.command == last_command {
                "same".to_owned()
            } else {
                format!("`{}`", row.command)
            };
            last_command = &row.command;
            let _ = writeln!(out, "| {} | {} | {reproduce} |", row.what, row.figure);
        }
    }
    let _ = writeln!(out);
    let mut when: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
    for (bench, run) in &figures.runs {
        when.entry((run.day.as_str(), run.machine.as_str()))
            .or_default()
            .push(bench);
    }
    let list: Vec<String> = when
        .iter()
        .map(|((day, machine), benches)| format!("{} on {day}, {machine}", benches.join(", ")))
        .collect();
    let _ = writeln!(out, "Measured: {}.", list.join("; "));
    let _ = write!(out, "{DOC_END}");
    out
}

/// `doc` with its generated part replaced by `table`.
pub fn with_doc_table(doc: &str, table: &str) -> Result<String, String> {
    let start = doc
        .find(DOC_BEGIN)
        .ok_or("docs/performance.md has no line where the bench figures start")?;
    let end = doc[start..]
        .find(DOC_END)
        .map(|e| start + e + DOC_END.len())
        .ok_or("docs/performance.md has no line where the bench figures end")?;
    Ok(format!("{}{table}{}", &doc[..start], &doc[end..]))
}

/// The rows of one benchmark's output (its `ROW|` lines).
pub fn rows_of_output(text: &str) -> Result<Vec<Row>, String> {
    text.lines().filter_map(Row::parse_line).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
