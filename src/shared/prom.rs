//! Prometheus's text exposition format, as gpushare writes it: HELP and
//! TYPE once per metric, before all of its samples; label values escaped
//! (`\\`, `"`, newlines); a newline at the end.

use std::fmt::Write as _;
use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

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

/// Replaces the file at `path` with `text` atomically, mode 0644: written
/// to `<name>.new` beside it (node_exporter's textfile collector reads only
/// `*.prom`, so never a half-written file), then renamed over it. A
/// leftover temporary file is replaced; no link is followed.
pub fn write_file(path: &Path, text: &str) -> Result<(), String> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("{}: not a file path", path.display()))?;
    let temp = path.with_file_name(format!("{name}.new"));
    let fail = |what: &str, p: &Path, e: io::Error| format!("{what} {}: {e}", p.display());
    match fs::remove_file(&temp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail("remove leftover", &temp, e)),
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&temp)
        .map_err(|e| fail("create", &temp, e))?;
    // Set on the open file: the writer's umask (slurmctld's, a timer's)
    // must not keep node_exporter from reading it.
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .map_err(|e| fail("set the mode of", &temp, e))?;
    file.write_all(text.as_bytes())
        .map_err(|e| fail("write", &temp, e))?;
    drop(file);
    fs::rename(&temp, path).map_err(|e| fail("rename into place", path, e))
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

    #[test]
    fn files_are_replaced_whole_and_no_temporary_is_left() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("m.prom");
        fs::write(dir.path().join("m.prom.new"), "leftover").unwrap_or_else(|e| panic!("{e}"));
        write_file(&path, "a 1\n").unwrap_or_else(|e| panic!("{e}"));
        write_file(&path, "a 2\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(fs::read_to_string(&path).unwrap_or_default(), "a 2\n");
        let names: Vec<_> = fs::read_dir(dir.path())
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert_eq!(names, vec![std::ffi::OsString::from("m.prom")]);
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
