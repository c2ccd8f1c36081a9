//! Prometheus's text exposition format, as gpushare writes it: HELP and
//! TYPE once per metric, before all of its samples; label values escaped
//! (`\\`, `"`, newlines); a newline at the end.

use std::fmt::Write as _;
use std::path::Path;

use super::durable;

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
