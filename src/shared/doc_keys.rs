//! What the docs say of a configuration file's keys, read back for the
//! tests that hold them to the parser (tests only): the keys and defaults
//! of a manual page's KEYS section and of a docs table, the setting lines
//! of an example file, and the check that a doc and the code's own table
//! of keys and defaults agree.

/// One key as a doc names it, with the default it states (`None`: states
/// none), in the file's words (`auto`, `100`, `/run/gpu-mps`, `unset`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocKey {
    pub key: String,
    pub default: Option<String>,
}

/// The words a doc uses for a key that has no value by default.
const UNSET_WORDS: [&str; 5] = ["unset", "none", "nobody", "every", "no default"];

/// One troff line as the reader sees it: the font macros' words (joined
/// as they join: `.BR a b` is `ab`, `.B a b` is `a b`), escapes resolved,
/// every other request dropped.
pub fn troff_plain(line: &str) -> String {
    let text = match line.strip_prefix('.') {
        None => line.to_owned(),
        Some(request) => {
            let (name, args) = request.split_once(' ').unwrap_or((request, ""));
            let words = troff_args(args);
            match name {
                "B" | "I" => words.join(" "),
                "BI" | "BR" | "IB" | "IR" | "RB" | "RI" => words.concat(),
                _ => String::new(),
            }
        }
    };
    [
        ("\\-", "-"),
        ("\\fB", ""),
        ("\\fI", ""),
        ("\\fR", ""),
        ("\\fP", ""),
        ("\\(mu", "×"),
        ("\\(dq", "\""),
        ("\\(lq", "\""),
        ("\\(rq", "\""),
        ("\\(bu", ""),
        ("\\&", ""),
        ("\\e", "\\"),
    ]
    .iter()
    .fold(text, |t, (from, to)| t.replace(from, to))
}

/// A request's arguments: blank-separated, `"..."` holding blanks.
fn troff_args(args: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = args.trim_start();
    while !rest.is_empty() {
        let (word, after) = match rest.strip_prefix('"') {
            Some(quoted) => quoted.split_once('"').unwrap_or((quoted, "")),
            None => rest.split_once(' ').unwrap_or((rest, "")),
        };
        out.push(word.to_owned());
        rest = after.trim_start();
    }
    out
}

/// A manual page as its reader reads it, one line after another.
pub fn man_text(page: &str) -> String {
    page.lines().map(|l| troff_plain(l) + " ").collect()
}

/// The `.EX` blocks of a manual page's EXAMPLES section, as text.
pub fn man_examples(page: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut block: Option<String> = None;
    let section = page
        .lines()
        .skip_while(|l| *l != ".SH EXAMPLES")
        .skip(1)
        .take_while(|l| !l.starts_with(".SH "));
    for l in section {
        match (l, block.as_mut()) {
            (".EX", _) => block = Some(String::new()),
            (".EE", Some(_)) => blocks.extend(block.take()),
            (_, Some(b)) => b.push_str(&(troff_plain(l) + "\n")),
            _ => {}
        }
    }
    blocks
}

/// The default a key's text states: `Default: X`, `X (the default)`,
/// `X (default)`, `(default X`, `No default`.
fn stated_default(text: &str) -> Option<String> {
    let word = |s: &str| {
        s.trim_matches(|c: char| ",.;:()`".contains(c))
            .trim_end_matches('.')
            .to_owned()
    };
    if let Some((_, after)) = text.split_once("Default:") {
        return after.split_whitespace().next().map(word);
    }
    if text.contains("No default") {
        return Some("no default".to_owned());
    }
    for mark in ["(the default)", "(default)"] {
        if let Some((before, _)) = text.split_once(mark) {
            return before.split_whitespace().last().map(word);
        }
    }
    let (_, after) = text.split_once("(default ")?;
    after.split_whitespace().next().map(word)
}

/// The keys of a manual page's `.SH KEYS` section: each `.TP` (and `.TQ`)
/// tag's `Key=`, with the default its paragraph states.
pub fn man_keys(page: &str) -> Vec<DocKey> {
    let lines: Vec<&str> = page
        .lines()
        .skip_while(|l| *l != ".SH KEYS")
        .skip(1)
        .take_while(|l| !l.starts_with(".SH "))
        .collect();
    let mut keys: Vec<DocKey> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let tag = matches!(lines.get(i), Some(&".TP") | Some(&".TQ"));
        let Some(next) = lines.get(i + 1).filter(|_| tag) else {
            i += 1;
            continue;
        };
        let tag = troff_plain(next);
        let key = tag.split('=').next().unwrap_or("").trim().to_owned();
        let body: Vec<String> = lines
            .iter()
            .skip(i + 2)
            .take_while(|l| !matches!(**l, ".TP" | ".TQ") && !l.starts_with(".SS"))
            .map(|l| troff_plain(l))
            .collect();
        if !keys.iter().any(|k| k.key == key) {
            keys.push(DocKey {
                key,
                default: stated_default(&body.join(" ")),
            });
        }
        i += 2;
    }
    keys
}

/// The keys of the first table after the line `heading` of a Markdown
/// doc: every `` `Key=` `` or `` `Key` `` of its first column, with the
/// default of its `default` column, else the one its text states.
pub fn md_table_keys(doc: &str, heading: &str) -> Vec<DocKey> {
    let rows: Vec<Vec<String>> = doc
        .lines()
        .skip_while(|l| *l != heading)
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let l = l.replace("\\|", "\u{1}");
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().replace('\u{1}', "|"))
                .collect()
        })
        .collect();
    let Some(header) = rows.first() else {
        return Vec::new();
    };
    let default_column = header.iter().position(|c| c == "default");
    let mut keys: Vec<DocKey> = Vec::new();
    for row in rows.iter().skip(2) {
        let first = row.first().map(String::as_str).unwrap_or("");
        let default = match default_column {
            Some(c) => row.get(c).map(|d| d.trim_matches('`').to_owned()),
            None => row.get(1).and_then(|text| stated_default(text)),
        };
        for (i, span) in first.split('`').enumerate() {
            let key = span.split('=').next().unwrap_or("");
            let is_key = i % 2 == 1 && key.chars().all(|c| c.is_ascii_alphanumeric());
            if is_key && !key.is_empty() && !keys.iter().any(|k| k.key == key) {
                keys.push(DocKey {
                    key: key.to_owned(),
                    default: default.clone(),
                });
            }
        }
    }
    keys
}

/// The setting lines of an example file, commented out or not: each line
/// whose words (before any `#` comment after them) are all `Key=Value`,
/// with the line's number and whether it is commented out (`#Key=v`,
/// `# Key=v`). Prose that names a key (`# e.g. GPULimit=4`) is no setting.
pub fn setting_lines(text: &str) -> Vec<(usize, bool, String)> {
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let commented = line.starts_with('#');
            let body = line.trim_start_matches('#');
            let body = body.strip_prefix(' ').unwrap_or(body);
            let words: Vec<&str> = body.split('#').next()?.split_whitespace().collect();
            let setting = !words.is_empty()
                && words.iter().all(|w| {
                    w.split_once('=').is_some_and(|(k, v)| {
                        !v.is_empty()
                            && k.starts_with(|c: char| c.is_ascii_alphabetic())
                            && k.chars().all(|c| c.is_ascii_alphanumeric())
                    })
                });
            setting.then(|| (i + 1, commented, words.join(" ")))
        })
        .collect()
}

/// The setting lines of `text`, commented out or not, as a file.
pub fn settings_text(text: &str) -> String {
    setting_lines(text)
        .iter()
        .map(|(_, _, l)| format!("{l}\n"))
        .collect()
}

/// An example's active lines as a file, and its commented-out lines of
/// one key that has a default in `code` (line, `Key=value`): each of these
/// must show that default, so that adding it to the file changes nothing.
pub fn default_lines(text: &str, code: &[(&str, Option<&str>)]) -> (String, Vec<(usize, String)>) {
    let settings = setting_lines(text);
    let active = settings
        .iter()
        .filter(|(_, commented, _)| !commented)
        .map(|(_, _, l)| format!("{l}\n"))
        .collect();
    let defaults = settings
        .into_iter()
        .filter(|(_, commented, l)| *commented && !l.contains(' '))
        .filter(|(_, _, l)| {
            let key = l.split('=').next().unwrap_or("");
            code.iter()
                .any(|(k, d)| k.eq_ignore_ascii_case(key) && d.is_some())
        })
        .map(|(line, _, l)| (line, l))
        .collect();
    (active, defaults)
}

/// Checks that the example `text` shows every key of `code`, set or
/// commented out, so that it is the list of them.
pub fn assert_shows_every_key(name: &str, text: &str, code: &[(&str, Option<&str>)]) {
    let settings = setting_lines(text);
    for (key, _) in code {
        let shown = settings.iter().any(|(_, _, l)| {
            l.split_whitespace()
                .any(|w| w.starts_with(&format!("{key}=")))
        });
        assert!(shown, "{name} does not show {key}");
    }
}

/// Checks a configuration file's manual page (`man`, its KEYS section)
/// and its table in docs/configuration.md (the first after `heading`)
/// against the parser's keys and defaults ([`assert_keys_agree`]).
pub fn assert_docs_agree(file: &str, man: &str, heading: &str, code: &[(&str, Option<&str>)]) {
    let page = format!("docs/man/{file}.5 (KEYS)");
    assert_keys_agree(&page, &man_keys(man), code);
    let configuration = include_str!("../../docs/configuration.md");
    let table = format!("docs/configuration.md ({file})");
    assert_keys_agree(&table, &md_table_keys(configuration, heading), code);
}

/// Checks that the keys `doc` names are the parser's (`code`: each key
/// with the value it takes where unset, `None`: no value), every one of
/// them, and that each default the doc states is the code's; otherwise
/// fails naming `doc_name` and every difference.
pub fn assert_keys_agree(doc_name: &str, doc: &[DocKey], code: &[(&str, Option<&str>)]) {
    let mut wrong: Vec<String> = Vec::new();
    for d in doc {
        let Some((_, default)) = code.iter().find(|(k, _)| *k == d.key) else {
            wrong.push(format!("names {}, a key the parser does not know", d.key));
            continue;
        };
        let unset = |s: &str| UNSET_WORDS.iter().any(|w| s.to_lowercase().starts_with(w));
        match (default, d.default.as_deref()) {
            (Some(code), Some(doc)) if !doc.eq_ignore_ascii_case(code) => wrong.push(format!(
                "says {}'s default is \"{doc}\"; the parser's is \"{code}\"",
                d.key
            )),
            (Some(code), None) => wrong.push(format!(
                "states no default for {}; the parser's is \"{code}\"",
                d.key
            )),
            (None, Some(doc)) if !unset(doc) => wrong.push(format!(
                "says {}'s default is \"{doc}\"; the parser leaves it unset",
                d.key
            )),
            _ => {}
        }
    }
    for (key, _) in code {
        if !doc.iter().any(|d| d.key == *key) {
            wrong.push(format!("does not document {key}, a key the parser takes"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{doc_name} and the parser disagree:\n  {}",
        wrong.join("\n  ")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn troff_reads_as_its_reader_does() {
        assert_eq!(troff_plain(".BI UnitsPerGPU= N"), "UnitsPerGPU=N");
        assert_eq!(
            troff_plain(".BR MPSControl= { auto | none | \\fIpath\\fP }"),
            "MPSControl={auto|none|path}"
        );
        assert_eq!(troff_plain(".IR /run/gpu\\-mps ."), "/run/gpu-mps.");
        assert_eq!(troff_plain(".RB ( \"a b\" ),"), "(a b),");
    }

    #[test]
    fn a_default_is_read_in_each_way_the_pages_state_it() {
        let page = ".SH KEYS\n.TP\n.BI A= N\nText.\nDefault:\n.BR 100 .\n.TP\n\
                    .BR B= { x | y }\n.B y\n(the default): text.\n.TP\n.BI C= name\n\
                    the name (default\n.BR libcuda.so.1 ,\nlooked up)\n.TP\n.BI D= x\n\
                    Default: unset, nothing.\n.TP\n.BI E= x\nNothing said.\n.SH FILES\n";
        let keys: Vec<(String, Option<String>)> = man_keys(page)
            .into_iter()
            .map(|k| (k.key, k.default))
            .collect();
        let want = [
            ("A", Some("100")),
            ("B", Some("y")),
            ("C", Some("libcuda.so.1")),
            ("D", Some("unset")),
            ("E", None),
        ];
        let want: Vec<(String, Option<String>)> = want
            .iter()
            .map(|(k, d)| (k.to_string(), d.map(str::to_owned)))
            .collect();
        assert_eq!(keys, want);
    }

    #[test]
    fn setting_lines_are_told_from_prose() {
        let text = "# prose with Key=v in it\n#A=1\n# B=2 C=3\nD=4 # note\n# E=<x y>\n";
        let got: Vec<(usize, bool, String)> = setting_lines(text);
        assert_eq!(
            got,
            vec![
                (2, true, "A=1".to_owned()),
                (3, true, "B=2 C=3".to_owned()),
                (4, false, "D=4".to_owned()),
            ]
        );
    }

    #[test]
    #[should_panic(expected = "says A's default is \"2\"")]
    fn a_wrong_default_fails() {
        let doc = [DocKey {
            key: "A".into(),
            default: Some("2".into()),
        }];
        assert_keys_agree("doc", &doc, &[("A", Some("1"))]);
    }

    #[test]
    #[should_panic(expected = "names Bogus, a key the parser does not know")]
    fn an_unknown_key_fails() {
        let doc = [DocKey {
            key: "Bogus".into(),
            default: None,
        }];
        assert_keys_agree("doc", &doc, &[]);
    }

    #[test]
    #[should_panic(expected = "does not document B")]
    fn an_undocumented_key_fails() {
        assert_keys_agree("doc", &[], &[("B", None)]);
    }
}
