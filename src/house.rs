//! The house rules of the core, checked on its own source: no two files
//! import each other (nor any longer circle of imports), the two halves
//! import only the shared room, no file grows past [`MAX_LINES`] (nor any
//! `.rs` file of the workspace: every crate, the suites under `tests/`),
//! and the policy room inside slurmctld runs no command.
//!
//! Each `.rs` file under `src/` is read as text: comments, strings and
//! character literals are blanked, then every `use` tree and every inline
//! `crate::`/`super::`/`self::` path is resolved to the file that holds the
//! module it names.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The longest a source file may be.
const MAX_LINES: usize = 1200;

/// Files that were already longer than [`MAX_LINES`] when the limit came:
/// each is to be split by room; until then its length today is its
/// ceiling, so it can only shrink.
const TOO_LONG_TODAY: [(&str, usize); 0] = [];

/// The rooms job_submit/gpu_qos runs inside slurmctld: a command run there
/// would stall every submission. A name ending in `/` is a folder: every
/// file under it.
const POLICY_ROOM: [&str; 3] = ["qos/policy/", "qos/config/", "qos/gres.rs"];

/// Every `.rs` file under `root`, by its path relative to `root`; build
/// output (`target/`), hidden folders and links left out.
fn rs_files(root: &Path) -> BTreeMap<String, String> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
        let mut entries: Vec<PathBuf> = fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let skipped = name
                .as_deref()
                .is_some_and(|n| n == "target" || n.starts_with('.'));
            if skipped || path.is_symlink() {
                continue;
            }
            if path.is_dir() {
                walk(&path, root, out);
            } else if path.extension().is_some_and(|x| x == "rs") {
                let text =
                    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                let name = path
                    .strip_prefix(root)
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_else(|e| panic!("{e}"));
                out.insert(name, text);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// Every `.rs` file under `src/`, by its path relative to `src/`.
fn sources() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let out = rs_files(&root);
    assert!(out.contains_key("lib.rs"), "no src/lib.rs under {root:?}");
    out
}

/// Every `.rs` file of the workspace (every crate, the suites and their
/// harness under `tests/`), by its path relative to the workspace's root.
fn workspace_sources() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = rs_files(root);
    for file in ["src/lib.rs", "tests/src/lib.rs"] {
        assert!(out.contains_key(file), "no {file} under {root:?}");
    }
    out
}

/// The module path of a file: `qos/why.rs` is `[qos, why]`, `qos/mod.rs`
/// is `[qos]`, `lib.rs` is `[]`.
fn module_of(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The file that holds the module `path` names, or the nearest module
/// above it that has one (`[shared, ConfigError]` is `shared/mod.rs`).
fn file_of(path: &[String], files: &BTreeSet<String>) -> Option<String> {
    (0..=path.len()).rev().find_map(|n| {
        let stem = path[..n].join("/");
        let candidates = if n == 0 {
            vec!["lib.rs".to_owned()]
        } else {
            vec![format!("{stem}.rs"), format!("{stem}/mod.rs")]
        };
        candidates.into_iter().find(|c| files.contains(c))
    })
}

/// `text` with comments, string and character literals blanked (line
/// breaks kept), so that only code is left to read.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && matches!(next, Some('"' | '#'))
            && !chars[..i]
                .last()
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // A raw string: r"..." or r#"..."#.
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let body_start = i + 2 + hashes;
            let rest: String = chars[body_start..].iter().collect();
            let body_len = rest
                .find(&close)
                .map_or(rest.chars().count(), |b| rest[..b].chars().count());
            let end = (body_start + body_len + close.len()).min(chars.len());
            out.extend(chars[i..end].iter().map(|&c| blank(c)));
            i = end;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                let step = if chars[i] == '\\' { 2 } else { 1 };
                for k in 0..step {
                    if let Some(&ch) = chars.get(i + k) {
                        out.push(blank(ch));
                    }
                }
                i += step;
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{1F}'), else a lifetime.
            let len = if next == Some('\\') {
                chars
                    .get(i + 3..)
                    .and_then(|rest| rest.iter().position(|&ch| ch == '\''))
                    .map(|p| p + 4)
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(3)
            } else {
                None
            };
            match len {
                Some(n) => {
                    out.extend(std::iter::repeat_n(' ', n));
                    i += n;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The words and punctuation of code.
fn tokens(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push("::".to_owned());
            i += 2;
        } else {
            if !c.is_whitespace() {
                out.push(c.to_string());
            }
            i += 1;
        }
    }
    out
}

/// The paths of one `use` tree starting at `toks[*at]`, each with the
/// prefix before it; `*at` ends past the tree.
fn use_tree(toks: &[String], at: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut path = prefix.to_vec();
    while let Some(tok) = toks.get(*at) {
        match tok.as_str() {
            "::" => *at += 1,
            "{" => {
                *at += 1;
                while let Some(t) = toks.get(*at) {
                    match t.as_str() {
                        "}" => {
                            *at += 1;
                            break;
                        }
                        "," => *at += 1,
                        _ => use_tree(toks, at, &path, out),
                    }
                }
                return;
            }
            "*" => {
                *at += 1;
                out.push(path);
                return;
            }
            "as" => {
                *at += 2;
                out.push(path);
                return;
            }
            "," | "}" | ";" => {
                out.push(path);
                return;
            }
            "self" if !path.is_empty() => {
                // `use a::{self, b}`: `a` itself.
                *at += 1;
            }
            word => {
                path.push(word.to_owned());
                *at += 1;
            }
        }
    }
    out.push(path);
}

/// The files `file` imports (itself left out).
fn imports_of(file: &str, text: &str, files: &BTreeSet<String>) -> BTreeSet<String> {
    let here = module_of(file);
    let toks = tokens(&code_only(text));
    let mut found: Vec<Vec<String>> = Vec::new();
    // Inline modules (`mod tests { ... }`) open at a brace depth.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        let module: Vec<String> = here
            .iter()
            .cloned()
            .chain(inline.iter().map(|(m, _)| m.clone()))
            .collect();
        let mut relative: Vec<Vec<String>> = Vec::new();
        match toks[i].as_str() {
            "{" => {
                depth += 1;
                i += 1;
            }
            "}" => {
                if inline.last().is_some_and(|&(_, d)| d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            "mod" if toks.get(i + 2).is_some_and(|t| t == "{") => {
                inline.push((toks[i + 1].clone(), depth + 1));
                i += 2;
            }
            "use" => {
                i += 1;
                use_tree(&toks, &mut i, &[], &mut relative);
                while toks.get(i).is_some_and(|t| t != ";") {
                    i += 1;
                }
            }
            "crate" | "super" | "self" if toks.get(i + 1).is_some_and(|t| t == "::") => {
                let mut path = Vec::new();
                while let Some(word) = toks.get(i) {
                    path.push(word.clone());
                    i += 1;
                    if toks.get(i).is_some_and(|t| t == "::")
                        && toks
                            .get(i + 1)
                            .is_some_and(|t| t.chars().all(|c| c.is_alphanumeric() || c == '_'))
                    {
                        i += 1;
                    } else {
                        break;
                    }
                }
                relative.push(path);
            }
            _ => i += 1,
        }
        for path in relative {
            if let Some(absolute) = resolve(&module, &path, files) {
                found.push(absolute);
            }
        }
    }
    found
        .iter()
        .filter_map(|p| file_of(p, files))
        .filter(|f| f != file)
        .collect()
}

/// `path` as seen from `module`, from the crate's root; `None` for a path
/// outside the crate (`std::`, another crate).
fn resolve(module: &[String], path: &[String], files: &BTreeSet<String>) -> Option<Vec<String>> {
    let first = path.first()?;
    if !matches!(first.as_str(), "crate" | "self" | "super") {
        // A child module named without `self::` (`pub use syntax::X`).
        let child: Vec<String> = module.iter().chain(path).cloned().collect();
        let holder = file_of(&child[..=module.len()], files)?;
        return (module_of(&holder).len() == module.len() + 1).then_some(child);
    }
    let mut base = module.to_vec();
    let mut rest = path;
    while let Some((word, tail)) = rest.split_first() {
        match word.as_str() {
            "crate" => base.clear(),
            "self" => {}
            "super" => {
                base.pop()?;
            }
            _ => break,
        }
        rest = tail;
    }
    Some(base.into_iter().chain(rest.iter().cloned()).collect())
}

/// Every import circle among the files: the strongly connected parts of
/// the import graph with more than one file, each as its files and one
/// circle through them.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<(Vec<String>, Vec<String>)> {
    // Tarjan's algorithm; the graph is small, recursion is fine.
    struct Walk<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        parts: Vec<Vec<&'g str>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low[v];
                    self.low.insert(v, lv.min(lw));
                } else if self.stack.contains(&w) {
                    let iw = self.index[w];
                    let lv = self.low[v];
                    self.low.insert(v, lv.min(iw));
                }
            }
            if self.low[v] == self.index[v] {
                let mut part = Vec::new();
                while let Some(w) = self.stack.pop() {
                    part.push(w);
                    if w == v {
                        break;
                    }
                }
                if part.len() > 1 {
                    self.parts.push(part);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        parts: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.parts
        .into_iter()
        .map(|mut part| {
            part.sort();
            let circle = circle_in(graph, &part);
            (part.into_iter().map(str::to_owned).collect(), circle)
        })
        .collect()
}

/// One circle through the files of a strongly connected part: the
/// shortest way back from its first file to itself.
fn circle_in(graph: &BTreeMap<String, BTreeSet<String>>, part: &[&str]) -> Vec<String> {
    let start = part.iter().min().copied().unwrap_or_default();
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for w in graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if w == start {
                let mut circle = vec![v.to_owned()];
                let mut at = v;
                while let Some(&before) = came_from.get(at) {
                    circle.push(before.to_owned());
                    at = before;
                }
                circle.reverse();
                circle.push(start.to_owned());
                return circle;
            }
            if part.contains(&w) && !came_from.contains_key(w) {
                came_from.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    part.iter().map(|&p| p.to_owned()).collect()
}

fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    let sources = sources();
    let files: BTreeSet<String> = sources.keys().cloned().collect();
    sources
        .iter()
        .map(|(file, text)| (file.clone(), imports_of(file, text, &files)))
        .collect()
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let graph = import_graph();
    let pairs: Vec<String> = graph
        .iter()
        .flat_map(|(a, to)| to.iter().map(move |b| (a, b)))
        .filter(|(a, b)| a < b && graph.get(*b).is_some_and(|back| back.contains(*a)))
        .map(|(a, b)| format!("{a} <-> {b}"))
        .collect();
    let circles: Vec<String> = circles(&graph)
        .iter()
        .map(|(files, circle)| format!("{} ({})", circle.join(" -> "), files.join(", ")))
        .collect();
    assert!(
        pairs.is_empty() && circles.is_empty(),
        "files import each other: {pairs:?}; import circles: {circles:?}"
    );
}

#[test]
fn the_halves_import_only_the_shared_room() {
    let room = |file: &str| file.split('/').next().unwrap_or_default().to_owned();
    let crossing: Vec<String> = import_graph()
        .iter()
        .flat_map(|(a, to)| to.iter().map(move |b| (a, b)))
        .filter(|(a, b)| {
            let (from, to) = (room(a), room(b));
            match from.as_str() {
                "qos" => to == "mps",
                "mps" => to == "qos",
                "shared" => to == "qos" || to == "mps",
                _ => false,
            }
        })
        .map(|(a, b)| format!("{a} -> {b}"))
        .collect();
    assert!(crossing.is_empty(), "imports across rooms: {crossing:?}");
}

#[test]
fn the_import_reader_sees_every_kind_of_path() {
    let files: BTreeSet<String> = [
        "lib.rs",
        "qos/mod.rs",
        "qos/why.rs",
        "qos/usage.rs",
        "qos/gres.rs",
        "shared/mod.rs",
        "shared/syntax.rs",
        "shared/calendar.rs",
        "mps/mod.rs",
        "mps/node.rs",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    let text = "//! Not an import: [`super::node`], crate::mps::node.\n\
                use std::fmt;\n\
                use super::gres::{self, GresRequest};\n\
                use crate::shared::{calendar::stamp_seconds, ConfigError};\n\
                fn f() { let _ = \"crate::mps::node\"; let _ = '{'; crate::mps::node::run(); }\n\
                #[cfg(test)]\n\
                mod tests {\n\
                \x20   use super::*;\n\
                \x20   use super::super::usage::TypeUse;\n\
                }\n";
    let got = imports_of("qos/why.rs", text, &files);
    let want: BTreeSet<String> = [
        "qos/gres.rs",
        "shared/calendar.rs",
        "shared/mod.rs",
        "mps/node.rs",
        "qos/usage.rs",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(got, want);
    assert_eq!(
        imports_of(
            "shared/mod.rs",
            "pub mod syntax;\npub use syntax::ConfigError;\n",
            &files
        ),
        BTreeSet::from(["shared/syntax.rs".to_owned()])
    );
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a.rs", vec!["b.rs"]),
        ("b.rs", vec!["c.rs"]),
        ("c.rs", vec!["a.rs"]),
        ("d.rs", vec!["a.rs"]),
    ]
    .into_iter()
    .map(|(f, to)| (f.to_owned(), to.into_iter().map(str::to_owned).collect()))
    .collect();
    let [(files, circle)] = &circles(&graph)[..] else {
        panic!("{:?}", circles(&graph));
    };
    assert_eq!(files, &["a.rs", "b.rs", "c.rs"]);
    assert_eq!(circle, &["a.rs", "b.rs", "c.rs", "a.rs"]);
}

#[test]
fn no_file_is_longer_than_the_house_allows() {
    let sources = workspace_sources();
    let mut over = Vec::new();
    for (file, text) in &sources {
        let lines = text.lines().count();
        let ceiling = TOO_LONG_TODAY
            .iter()
            .find(|(f, _)| f == file)
            .map_or(MAX_LINES, |&(_, n)| n);
        if lines > ceiling {
            over.push(format!("{file}: {lines} lines, at most {ceiling}"));
        }
    }
    assert!(over.is_empty(), "too long (split by room): {over:?}");
    for (file, _) in TOO_LONG_TODAY {
        assert!(
            sources.contains_key(file),
            "{file} is gone: take it off TOO_LONG_TODAY"
        );
    }
}

#[test]
fn the_policy_room_runs_no_command() {
    let sources = sources();
    for room in POLICY_ROOM {
        let files: Vec<(&String, &String)> = sources
            .iter()
            .filter(|(file, _)| *file == room || (room.ends_with('/') && file.starts_with(room)))
            .collect();
        assert!(!files.is_empty(), "src/{room} is missing");
        for (file, text) in files {
            for word in ["std::process", "bounded"] {
                assert!(
                    !text.contains(word),
                    "src/{file} mentions {word}: job_submit/gpu_qos runs inside slurmctld, \
                     where a command would stall every submission"
                );
            }
        }
    }
}

/// The crates that run on a node or inside a Slurm daemon: none may link
/// the admin commands' crate (`gpushare-admin`, `admin/`), directly or
/// through another crate of the workspace. What the prolog and epilog
/// share with `gpu-mps` lives in `gpushare-node` (`node/`); so no module
/// of `admin/src` is one the prolog or epilog run.
const NEVER_LINK_ADMIN: [&str; 4] = ["plugins/", "prolog", "epilog", "node"];

/// The admin commands' crate.
const ADMIN_CRATE: &str = "gpushare-admin";

/// A workspace crate as its `Cargo.toml` says: its name and the names of
/// the crates it depends on (every `[*dependencies]` table, a renamed
/// dependency by its `package =`).
fn manifest(text: &str) -> (String, BTreeSet<String>) {
    let mut name = String::new();
    let mut deps = BTreeSet::new();
    let mut table = String::new();
    for line in text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
    {
        if let Some(header) = line.strip_prefix('[') {
            table = header.trim_end_matches(']').trim().to_owned();
            // `[dependencies.gpushare-admin]`, `[target.'cfg(..)'.dependencies.x]`
            if let Some((_, dep)) = table.split_once("dependencies.") {
                deps.insert(dep.trim_matches('"').to_owned());
            }
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let (key, value) = (key.trim().trim_matches('"'), value.trim());
        if table == "package" && key == "name" {
            name = value.trim_matches('"').to_owned();
        } else if table.ends_with("dependencies") {
            let renamed = value
                .split_once("package")
                .and_then(|(_, rest)| rest.split('"').nth(1));
            deps.insert(renamed.unwrap_or(key).to_owned());
        } else if table.contains("dependencies.") && key == "package" {
            deps.insert(value.trim_matches('"').to_owned());
        }
    }
    (name, deps)
}

/// The workspace's member folders, as the root `Cargo.toml` lists them.
fn members(root_manifest: &str) -> Vec<String> {
    let Some((_, rest)) = root_manifest.split_once("members = [") else {
        return Vec::new();
    };
    let list = rest.split(']').next().unwrap_or_default();
    list.lines()
        .flat_map(|l| l.split('#').next().unwrap_or("").split(','))
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The members of `NEVER_LINK_ADMIN` that reach `ADMIN_CRATE` through
/// the workspace's crates, each with the path it takes.
fn admin_linked(crates: &BTreeMap<String, (String, BTreeSet<String>)>) -> Vec<String> {
    let by_name: BTreeMap<&str, &BTreeSet<String>> =
        crates.values().map(|(n, d)| (n.as_str(), d)).collect();
    let mut found = Vec::new();
    for (folder, (name, _)) in crates {
        let guarded = NEVER_LINK_ADMIN
            .iter()
            .any(|g| folder == g || (g.ends_with('/') && folder.starts_with(g)));
        if !guarded {
            continue;
        }
        // Breadth first, each crate seen once, with the path that led to it.
        let mut paths = vec![vec![name.clone()]];
        let mut seen = BTreeSet::from([name.clone()]);
        while let Some(path) = paths.pop() {
            let last = path.last().map(String::as_str).unwrap_or_default();
            for dep in by_name.get(last).into_iter().flat_map(|d| d.iter()) {
                let mut longer = path.clone();
                longer.push(dep.clone());
                if dep == ADMIN_CRATE {
                    found.push(format!("{folder}: {}", longer.join(" -> ")));
                } else if seen.insert(dep.clone()) {
                    paths.push(longer);
                }
            }
        }
    }
    found
}

#[test]
fn no_node_program_or_plugin_links_the_admin_commands() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &Path| fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let folders = members(&read(&root.join("Cargo.toml")));
    let crates: BTreeMap<String, (String, BTreeSet<String>)> = folders
        .iter()
        .map(|f| (f.clone(), manifest(&read(&root.join(f).join("Cargo.toml")))))
        .collect();
    // The rule is about these crates: each must be there to be checked.
    let names: BTreeSet<&str> = crates.values().map(|(n, _)| n.as_str()).collect();
    for crate_name in [
        ADMIN_CRATE,
        "gpushare-node",
        "gpu-mps-prolog",
        "gpu-mps-epilog",
    ] {
        assert!(
            names.contains(crate_name),
            "{crate_name} is not a member: {folders:?}"
        );
    }
    let plugins = folders.iter().filter(|f| f.starts_with("plugins/")).count();
    assert!(
        plugins >= 3,
        "only {plugins} plugin crates among {folders:?}"
    );
    let linked = admin_linked(&crates);
    assert!(
        linked.is_empty(),
        "{linked:?}: the node programs and plugins never link {ADMIN_CRATE} \
         (what they share with gpu-mps belongs in gpushare-node, node/)"
    );
}

#[test]
fn the_manifest_reader_sees_every_spelling_of_a_dependency() {
    let text = "[package]\nname = \"x\" # the crate\n\n\
                [dependencies]\ngpushare = { path = \"..\" }\n\
                admin = { package = \"gpushare-admin\", path = \"../admin\" }\n\
                [target.'cfg(unix)'.dev-dependencies]\nlibc = \"0.2\"\n\
                [build-dependencies.bindgen]\nversion = \"0.70\"\n\
                [dependencies.renamed]\npackage = \"clap\"\n";
    let (name, deps) = manifest(text);
    assert_eq!(name, "x");
    let deps: Vec<&str> = deps.iter().map(String::as_str).collect();
    assert_eq!(
        deps,
        [
            "bindgen",
            "clap",
            "gpushare",
            "gpushare-admin",
            "libc",
            "renamed"
        ]
    );
    assert_eq!(
        members("[workspace]\nmembers = [\n  \"a\", # x\n  \"plugins/b\",\n]\n"),
        ["a", "plugins/b"]
    );
}

#[test]
fn a_crate_that_links_the_admin_commands_through_another_is_found() {
    let krate = |name: &str, deps: &[&str]| {
        let deps = deps.iter().map(|d| (*d).to_owned()).collect();
        (name.to_owned(), deps)
    };
    let crates = BTreeMap::from([
        ("admin".to_owned(), krate(ADMIN_CRATE, &["gpushare-node"])),
        ("node".to_owned(), krate("gpushare-node", &["gpushare"])),
        ("helper".to_owned(), krate("helper", &[ADMIN_CRATE])),
        ("plugins/x".to_owned(), krate("x", &["gpushare", "helper"])),
        (
            "prolog".to_owned(),
            krate("gpu-mps-prolog", &["gpushare-node"]),
        ),
    ]);
    assert_eq!(
        admin_linked(&crates),
        ["plugins/x: x -> helper -> gpushare-admin"]
    );
}
