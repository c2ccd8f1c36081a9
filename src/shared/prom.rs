//! Prometheus's text exposition format, as gpushare writes it: HELP and
//! TYPE once per metric, before all of its samples; label values escaped
//! (`\\`, `"`, newlines); a newline at the end.

use std::fmt::Write as _;
use std::path::Path;

use super::durable;

/// Where node_exporter's textfile collector usually reads (its
/// `--collector.textfile.directory`), for the messages that ask for it.
pub const TEXTFILE_DIRS: &str = "/var/lib/prometheus/node-exporter on Debian and Ubuntu, \
     /var/lib/node_exporter/textfile_collector in node_exporter's own systemd example, as on RHEL";

/// A text exposition, built family by family.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    /// Starts metric `name` of `kind` (`gauge`, `counter`); its samples follow.
    pub fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    /// One sample of the metric last started.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        self.sample_text(name, labels, &value.to_string());
    }

    /// One sample of a fraction (a ratio, a share of a GPU), rounded to
    /// 4 decimals and written without trailing zeros (`0.35`, `1`).
    pub fn sample_f64(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        let text = format!("{value:.4}");
        let text = text.trim_end_matches('0').trim_end_matches('.');
        let text = if matches!(text, "" | "-" | "-0") {
            "0"
        } else {
            text
        };
        self.sample_text(name, labels, text);
    }

    fn sample_text(&mut self, name: &str, labels: &[(&str, &str)], value: &str) {
        self.text.push_str(name);
        if !labels.is_empty() {
            let inner: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
                .collect();
            let _ = write!(self.text, "{{{}}}", inner.join(","));
        }
        let _ = writeln!(self.text, " {value}");
    }

    pub fn into_text(self) -> String {
        self.text
    }
}

/// Replaces the file at `path` with `text` atomically and durably, mode
/// 0644 ([`durable::replace`]): written to a temporary file of this
/// writer's own beside it, `<name>.<pid>.<n>.<random>.new`
/// (node_exporter's textfile collector reads only `*.prom`, so never a
/// half-written file), then renamed over it. Writers at once each write
/// their own; no link is followed. The mode is set on the open file: the
/// writer's umask (slurmctld's, a timer's) must not keep node_exporter
/// from reading it.
pub fn write_file(path: &Path, text: &str) -> Result<(), String> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("{}: not a file path", path.display()))?;
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    durable::replace(dir, name, text.as_bytes(), 0o644).map_err(|e| e.to_string())
}

/// A label value as the text format needs it.
pub fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

/// The Markdown table of the metric families in `text` (an exposition
/// gpushare writes), as docs/monitoring.md shows them: one row per family
/// in the order written, with its type, its labels and its HELP. Where
/// `values` holds `(family, label, values)`, the row lists those values:
/// the code's own list (each value a sample of `text` shows must be in it).
#[cfg(test)]
pub fn markdown_table(text: &str, values: &[(&str, &str, Vec<&str>)]) -> String {
    // (name, type, help, label names in order of first appearance)
    let mut families: Vec<(String, String, String, Vec<String>)> = Vec::new();
    let mut help = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (_, h) = rest.split_once(' ').unwrap_or((rest, ""));
            help = h.replace("\\n", " ").replace("\\\\", "\\");
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            families.push((
                name.into(),
                kind.into(),
                std::mem::take(&mut help),
                Vec::new(),
            ));
        } else if let Some((name, labels)) = sample_labels(line) {
            // A histogram's samples are its `_bucket`, `_sum` and `_count`.
            let of = |f: &(String, String, String, Vec<String>)| {
                f.0 == name
                    || (f.1 == "histogram"
                        && ["_bucket", "_sum", "_count"]
                            .iter()
                            .any(|s| name.strip_suffix(s) == Some(f.0.as_str())))
            };
            let Some(family) = families.last_mut().filter(|f| of(f)) else {
                panic!("{line}: a sample outside its family");
            };
            for (label, value) in labels {
                if let Some((_, _, listed)) =
                    values.iter().find(|(f, l, _)| *f == name && *l == label)
                {
                    assert!(
                        listed.contains(&value.as_str()),
                        "{name}{{{label}=\"{value}\"}} is written but not in the list given"
                    );
                }
                if !family.3.contains(&label) {
                    family.3.push(label);
                }
            }
        }
    }
    let mut out = String::from("| metric | type | labels | meaning |\n|---|---|---|---|\n");
    for (name, kind, help, labels) in families {
        let labels: Vec<String> = labels
            .iter()
            .map(
                |label| match values.iter().find(|(f, l, _)| *f == name && l == label) {
                    Some((_, _, listed)) => {
                        let listed: Vec<String> = listed.iter().map(|v| format!("`{v}`")).collect();
                        format!("`{label}`: {}", listed.join(", "))
                    }
                    None => format!("`{label}`"),
                },
            )
            .collect();
        let _ = writeln!(
            out,
            "| `{name}` | {kind} | {} | {} |",
            labels.join("; "),
            help.replace('|', "\\|")
        );
    }
    out
}

/// A sample line's metric name and its labels (name, unescaped value).
#[cfg(test)]
fn sample_labels(line: &str) -> Option<(&str, Vec<(String, String)>)> {
    if line.starts_with('#') || line.is_empty() {
        return None;
    }
    let end = line.find(['{', ' '])?;
    let name = &line[..end];
    let mut labels = Vec::new();
    if line[end..].starts_with('{') {
        let mut chars = line[end + 1..].chars();
        loop {
            let label: String = chars.by_ref().take_while(|&c| c != '=').collect();
            if label.is_empty() {
                break;
            }
            chars.next(); // the opening quote
            let mut value = String::new();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => match chars.next() {
                        Some('n') => value.push('\n'),
                        Some(other) => value.push(other),
                        None => {}
                    },
                    '"' => break,
                    c => value.push(c),
                }
            }
            labels.push((label.trim_start_matches(',').to_owned(), value));
            if chars.clone().next() == Some('}') {
                break;
            }
        }
    }
    Some((name, labels))
}

/// Checks that `doc` shows `table` right under its marker line
/// `<!-- table: NAME ... -->`, and otherwise fails with the table to paste.
#[cfg(test)]
pub fn assert_doc_table(doc: &str, doc_path: &str, name: &str, table: &str) {
    let marker = format!("<!-- table: {name} ");
    let mut lines = doc.lines().skip_while(|l| !l.starts_with(&marker));
    assert!(
        lines.next().is_some(),
        "{doc_path}: no line starts with `{marker}`: put one above the table"
    );
    let shown: Vec<&str> = lines.take_while(|l| l.starts_with('|')).collect();
    let shown = shown.join("\n") + "\n";
    assert!(
        shown == table,
        "{doc_path}: the table under `{marker}...` is not what the code writes; replace it \
         with these lines:\n\n{table}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn files_are_written_whole_and_readable_by_node_exporter() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("m.prom");
        fs::write(dir.path().join("m.prom.new"), "leftover").unwrap_or_else(|e| panic!("{e}"));
        write_file(&path, "a 1\n").unwrap_or_else(|e| panic!("{e}"));
        write_file(&path, "a 2\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(fs::read_to_string(&path).unwrap_or_default(), "a 2\n");
        let mode = fs::metadata(&path)
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777)
            .unwrap_or(0);
        assert_eq!(mode, 0o644);
        assert!(!dir.path().join("m.prom.new").exists());
        let err = write_file(Path::new("/"), "a 1\n").err();
        assert_eq!(err.as_deref(), Some("/: not a file path"));
    }

    #[test]
    fn fractions_are_written_short() {
        let mut e = Exposition::default();
        for v in [0.8, 1.0, 0.0, -0.0, 10.0, 1.0 / 3.0, -0.00001, 100.5] {
            e.sample_f64("r", &[("gpu", "0")], v);
        }
        let values: Vec<String> = e
            .into_text()
            .lines()
            .map(|l| l.rsplit(' ').next().unwrap_or("").to_owned())
            .collect();
        assert_eq!(values, ["0.8", "1", "0", "0", "10", "0.3333", "0", "100.5"]);
    }

    #[test]
    fn the_docs_table_lists_families_labels_and_the_values_given() {
        let mut e = Exposition::default();
        e.family("a_total", "counter", "Things | stuff,\nby reason.");
        e.sample("a_total", &[("reason", "x"), ("gpu", "0")], 1);
        e.sample("a_total", &[("reason", "y\"q,}"), ("gpu", "1")], 1);
        e.family("b", "gauge", "A gauge.");
        e.sample("b", &[], 1);
        let text = e.into_text();
        let table = markdown_table(&text, &[("a_total", "reason", vec!["x", "y\"q,}", "z"])]);
        assert_eq!(
            table,
            "| metric | type | labels | meaning |\n|---|---|---|---|\n\
             | `a_total` | counter | `reason`: `x`, `y\"q,}`, `z`; `gpu` | Things \\| stuff, by reason. |\n\
             | `b` | gauge |  | A gauge. |\n"
        );
        let doc = format!("intro\n<!-- table: t (generated) -->\n{table}\nafter\n");
        assert_doc_table(&doc, "doc.md", "t", &table);
        let stale = std::panic::catch_unwind(|| {
            assert_doc_table(&doc.replace("`z`", ""), "doc.md", "t", &table)
        });
        assert!(stale.is_err());
        // A value the code writes but the list misses.
        let missed =
            std::panic::catch_unwind(|| markdown_table(&text, &[("a_total", "reason", vec!["x"])]));
        assert!(missed.is_err());
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        let mut e = Exposition::default();
        e.family("x_total", "counter", "Help with \\ and\nnewline.");
        e.sample("x_total", &[("user", "o\"k")], 3);
        assert_eq!(
            e.into_text(),
            "# HELP x_total Help with \\\\ and\\nnewline.\n# TYPE x_total counter\nx_total{user=\"o\\\"k\"} 3\n"
        );
    }
}
