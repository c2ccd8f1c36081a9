//! The commands' exit statuses held to their one table
//! (`gpushare::shared::exit_status`): each command's help (and so its man
//! page) says its table's sentence; the programs return no number of
//! their own; every exit status the docs and the conf(5) pages name for a
//! command is one of that command's, and an `Exit status:` list there says
//! what the table says.

use std::path::{Path, PathBuf};

use clap::{Command, CommandFactory};
use gpushare::shared::exit_status;

use crate::{mps_cli, qos_cli};
use gpushare_node::node_program;

/// The repository's root (this crate is `admin/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Each command and subcommand as typed (`gpu-mps disable`), with the
/// text its `--help` and man page describe it with, and its options'.
fn helps() -> Vec<(String, String, Vec<String>)> {
    let mut out = Vec::new();
    for mut cmd in [
        qos_cli::Cli::command(),
        mps_cli::Cli::command(),
        node_program::PrologCli::command(),
        node_program::EpilogCli::command(),
    ] {
        cmd.build();
        let about = |c: &Command| {
            c.get_long_about()
                .or_else(|| c.get_about())
                .map(ToString::to_string)
                .unwrap_or_default()
        };
        let options = |c: &Command| -> Vec<String> {
            c.get_arguments()
                .filter_map(|a| a.get_long_help().or_else(|| a.get_help()))
                .map(ToString::to_string)
                .collect()
        };
        out.push((cmd.get_name().to_owned(), about(&cmd), options(&cmd)));
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            let name = format!("{} {}", cmd.get_name(), sub.get_name());
            out.push((name, about(sub), options(sub)));
        }
    }
    out
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn each_help_says_its_commands_exit_statuses_as_the_table_does() {
    let helps = helps();
    let mut wrong = Vec::new();
    for (command, about, options) in &helps {
        // Each status its text or an option's names is the command's own.
        for text in std::iter::once(about).chain(options) {
            for (_, code, meaning) in claims_in(&one_line(text)) {
                let claim = Claim {
                    command: Some(command.clone()),
                    code,
                    meaning,
                    at: format!("{command}'s help"),
                };
                wrong.extend(judged(&claim));
            }
        }
        match exit_status::table(command) {
            Some(table) if one_line(about).contains(&table.sentence()) => {}
            Some(table) => wrong.push(format!(
                "{command}: its help should say `{}`",
                table.sentence()
            )),
            None => wrong.push(format!("{command}: no table in exit_status.rs")),
        }
    }
    // And no table for a command that is gone (gpushare-man has no help).
    for t in exit_status::TABLES {
        if t.command != "gpushare-man" && !helps.iter().any(|(c, ..)| c == t.command) {
            wrong.push(format!("{}: a table and no such command", t.command));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The Rust files of the programs whose statuses the tables hold.
fn program_sources() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("node/src/node_program.rs")];
    for dir in ["admin/src", "admin/src/bin", "prolog/src", "epilog/src"] {
        let entries = std::fs::read_dir(root.join(dir)).unwrap_or_else(|e| panic!("{dir}: {e}"));
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
}

/// A status written as a number (or std's SUCCESS/FAILURE) instead of
/// the table's: where `text` has one, its line.
fn bare_statuses(text: &str) -> Vec<String> {
    let calls = ["ExitCode::from(", "process::exit("];
    let named = ["ExitCode::SUCCESS", "ExitCode::FAILURE"];
    text.lines()
        .filter(|line| {
            let code = line.split("//").next().unwrap_or_default();
            named.iter().any(|n| code.contains(n))
                || calls.iter().any(|call| {
                    code.match_indices(call).any(|(at, _)| {
                        code[at + call.len()..]
                            .trim_start()
                            .starts_with(|c: char| c.is_ascii_digit() || c == '-')
                    })
                })
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn no_program_exits_with_a_number_of_its_own() {
    let own = Path::new(file!()).file_name();
    let mut found = Vec::new();
    for path in program_sources() {
        if path.file_name() == own {
            continue;
        }
        for line in bare_statuses(&read(&path)) {
            found.push(format!("{}: {}", path.display(), line.trim()));
        }
    }
    assert!(
        found.is_empty(),
        "exit statuses not from gpushare::shared::exit_status:\n{}",
        found.join("\n")
    );
    // The check finds what it looks for.
    let bare = "    return ExitCode::from(2);\n    ExitCode::SUCCESS\n    std::process::exit( 1)\n";
    assert_eq!(bare_statuses(bare).len(), 3);
    assert!(
        bare_statuses("    ExitCode::from(exit::UNREAD.code) // ExitCode::from(2)\n").is_empty()
    );
}

/// One exit status a document names: for which command, where, and, in
/// an `Exit status:` list, what it says it means.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Claim {
    command: Option<String>,
    code: u8,
    meaning: Option<String>,
    at: String,
}

/// A command named at a byte of a text.
type Mention = (usize, String);

/// gpushare's commands as a text names them, by their position: explicit
/// names (`gpu-qos check`, `gpu-mps-epilog`, a backticked subcommand only
/// one command has) apart from words (`prolog`, `epilog`, the two timers
/// and their units).
fn mentions(text: &str) -> (Vec<Mention>, Vec<Mention>) {
    let lower = text.to_lowercase();
    let mut explicit = Vec::new();
    let mut words = Vec::new();
    let subcommand = |tool: &str, rest: &str| -> Option<String> {
        let word: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '-')
            .collect();
        let cmd = format!("{tool} {word}");
        exit_status::table(&cmd).map(|_| cmd)
    };
    for tool in ["gpu-qos", "gpu-mps"] {
        for (at, _) in lower.match_indices(tool) {
            let rest = &lower[at + tool.len()..];
            let name = if let Some(program) =
                ["-prolog", "-epilog"].iter().find(|p| rest.starts_with(*p))
            {
                format!("{tool}{program}")
            } else if rest.starts_with(['-', '_']) {
                continue;
            } else {
                let rest = rest.trim_start_matches(['`', ' ']);
                subcommand(tool, rest).unwrap_or_else(|| tool.to_owned())
            };
            explicit.push((at, name));
        }
    }
    // A subcommand in backticks that only one tool has: `disable`.
    for (at, _) in lower.match_indices('`') {
        let rest = &lower[at + 1..];
        let Some(end) = rest.find('`') else { continue };
        let word = &rest[..end];
        let tools: Vec<String> = ["gpu-qos", "gpu-mps"]
            .iter()
            .filter_map(|t| subcommand(t, word).filter(|c| c.len() == t.len() + 1 + word.len()))
            .collect();
        if let [only] = tools.as_slice() {
            explicit.push((at, only.clone()));
        }
    }
    for (word, command) in [
        ("hw-check", NOT_COMMANDS[0]),
        ("gpushare-hw-check", NOT_COMMANDS[0]),
        ("prolog", "gpu-mps-prolog"),
        ("epilog", "gpu-mps-epilog"),
        ("node timer", "gpu-mps metrics"),
        ("qos timer", "gpu-qos metrics"),
        ("gpushare-node-metrics", "gpu-mps metrics"),
        ("gpushare-qos-metrics", "gpu-qos metrics"),
    ] {
        for (at, _) in lower.match_indices(word) {
            let before = lower[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '-') {
                continue;
            }
            words.push((at, command.to_owned()));
        }
    }
    explicit.sort();
    words.sort();
    (explicit, words)
}

/// Whether a mention at `p` sits in parentheses closed before `at`: an
/// aside, not what the claim at `at` is about.
fn aside(block: &str, p: usize, at: usize) -> bool {
    let mut depth = 0i32;
    for c in block[p..at].chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
        if depth < 0 {
            return true;
        }
    }
    false
}

/// The commands a claim at `at` in `block` is about: the nearest name
/// before it, asides only where the block names none otherwise (`prolog
/// and epilog`: both).
fn attributed(block: &str, at: usize) -> Vec<String> {
    let (explicit, words) = mentions(block);
    let mut before: Vec<&Mention> = explicit
        .iter()
        .chain(&words)
        .filter(|(p, _)| *p < at)
        .collect();
    before.sort();
    if before.iter().any(|(p, _)| !aside(block, *p, at)) {
        before.retain(|(p, _)| !aside(block, *p, at));
    }
    match before.as_slice() {
        [.., (p1, a), (p2, b)]
            if a != b
                && matches!(
                    block[*p1..*p2].to_lowercase().as_str(),
                    "prolog and " | "prologs and "
                ) =>
        {
            vec![a.clone(), b.clone()]
        }
        [.., (_, last)] => vec![last.clone()],
        [] => Vec::new(),
    }
}

/// The text of a list's item: its words, lower case, without markup.
fn words_of(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric() && c != '-')
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// The statuses a block names: after `exit`, `exits`, `exit status:` or
/// `exit code`, a number, then `, N ...` items; each item's text kept
/// where the list is an `Exit status:` one.
fn claims_in(block: &str) -> Vec<(usize, u8, Option<String>)> {
    let lower = block.to_lowercase();
    let mut out = Vec::new();
    for (at, _) in lower.match_indices("exit") {
        if at > 0 && lower[..at].ends_with(|c: char| c.is_alphanumeric()) {
            continue;
        }
        let mut rest = &lower[at + 4..];
        rest = rest.strip_prefix('s').unwrap_or(rest);
        let listed = rest.trim_start().starts_with("status");
        for word in ["status", "code", ":"] {
            rest = rest.trim_start().strip_prefix(word).unwrap_or(rest);
        }
        let rest = rest.trim_start();
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        // Not 0:0 (Slurm's ExitCode=) nor 1.5.
        let mut after = rest[digits.len()..].chars();
        let (next, then) = (after.next(), after.next());
        let decimal = next == Some('.') && then.is_some_and(|c| c.is_ascii_digit());
        if digits.is_empty() || decimal || next.is_some_and(|c| c.is_alphanumeric() || c == ':') {
            continue;
        }
        let start = block.len() - rest.len();
        // The list: to the sentence's end (a period at depth 0), items
        // apart by `,` or `;` at depth 0 that start with a number.
        let mut depth = 0i32;
        let mut items: Vec<(u8, String)> = Vec::new();
        let mut piece = String::new();
        let mut chars = block[start..].chars().peekable();
        let push = |piece: &str, items: &mut Vec<(u8, String)>| {
            let piece = piece.trim();
            // `0, or 2`: a status too.
            let piece = ["or ", "and "]
                .iter()
                .find_map(|w| piece.strip_prefix(w))
                .filter(|p| p.starts_with(|c: char| c.is_ascii_digit()))
                .unwrap_or(piece);
            let num: String = piece.chars().take_while(char::is_ascii_digit).collect();
            let tail = &piece[num.len()..];
            match num.parse::<u8>() {
                Ok(n) if num.len() == 1 && (tail.is_empty() || tail.starts_with(' ')) => {
                    items.push((n, tail.trim().to_owned()))
                }
                _ => {
                    if let Some(last) = items.last_mut() {
                        last.1.push_str(", ");
                        last.1.push_str(piece);
                    }
                }
            }
        };
        while let Some(c) = chars.next() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => break,
                ')' => depth -= 1,
                '.' if depth == 0 && chars.peek().is_none_or(|n| n.is_whitespace()) => break,
                ',' | ';' if depth == 0 => {
                    push(&piece, &mut items);
                    piece.clear();
                    continue;
                }
                _ => {}
            }
            piece.push(c);
        }
        push(&piece, &mut items);
        for (code, meaning) in items {
            out.push((at, code, listed.then_some(meaning)));
        }
    }
    out
}

/// A document's blocks, as claims are attributed within them: its
/// paragraphs, list items and table rows, each code line; with the last
/// command a section named before, for a block that names none.
fn claims_of(text: &str, file: &str) -> Vec<Claim> {
    let mut blocks: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut fenced = false;
    let mut headings = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let fence = trimmed.starts_with("```");
        let starts = fence
            || fenced
            || trimmed.is_empty()
            || trimmed.starts_with('|')
            || trimmed.starts_with('#')
            || trimmed.starts_with("- ")
            || trimmed.starts_with(".SH")
            || trimmed.starts_with(".TP")
            || trimmed.starts_with(".PP")
            || trimmed
                .split_once(". ")
                .is_some_and(|(n, _)| n.parse::<u32>().is_ok());
        if starts && !current.trim().is_empty() {
            blocks.push(std::mem::take(&mut current));
        }
        if fence {
            fenced = !fenced;
            continue;
        }
        if trimmed.starts_with('#') || trimmed.starts_with(".SH") {
            headings.push(blocks.len());
        }
        // roff's escapes: `\-` is a dash, `\fB` a font.
        let line = line
            .replace("\\-", "-")
            .replace("\\fB", "")
            .replace("\\fI", "")
            .replace("\\fR", "")
            .replace("\\fP", "");
        current.push_str(&line);
        current.push('\n');
    }
    blocks.push(current);
    let mut claims = Vec::new();
    let mut section_last: Option<String> = None;
    for (i, block) in blocks.iter().enumerate() {
        if headings.contains(&i) {
            section_last = None;
        }
        let block = one_line(block);
        for (at, code, meaning) in claims_in(&block) {
            let mut commands = attributed(&block, at);
            if commands.is_empty() {
                commands.extend(section_last.clone());
            }
            let at_text = format!("{file}: ...{}...", &block[at..(at + 60).min(block.len())]);
            if commands.is_empty() {
                claims.push(Claim {
                    command: None,
                    code,
                    meaning: meaning.clone(),
                    at: at_text.clone(),
                });
            }
            for command in commands {
                claims.push(Claim {
                    command: Some(command),
                    code,
                    meaning: meaning.clone(),
                    at: at_text.clone(),
                });
            }
        }
        let (explicit, words) = mentions(&block);
        let last = explicit.into_iter().chain(words).max_by_key(|(p, _)| *p);
        if let Some((_, name)) = last {
            section_last = Some(name);
        }
    }
    claims
}

/// What is wrong with a claim against the tables, if anything.
fn judged(claim: &Claim) -> Option<String> {
    let Some(command) = &claim.command else {
        return Some(format!(
            "{}: an exit status of no command named before it",
            claim.at
        ));
    };
    let Some(table) = exit_status::table(command) else {
        return Some(format!("{}: {command} has no table", claim.at));
    };
    let Some(exit) = table.get(claim.code) else {
        return Some(format!(
            "{}: {command} has no exit status {}: {}",
            claim.at,
            claim.code,
            table.sentence()
        ));
    };
    let said = words_of(claim.meaning.as_deref()?);
    let meant = words_of(exit.meaning);
    let n = said.len().min(meant.len());
    (said.is_empty() || said[..n] != meant[..n]).then(|| {
        format!(
            "{}: {command}'s {} means `{}`, not `{}`",
            claim.at,
            claim.code,
            exit.meaning,
            claim.meaning.as_deref().unwrap_or_default()
        )
    })
}

/// Every Markdown page of the book, the README and the conf(5) pages.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md")];
    for dir in ["docs", "docs/man"] {
        let entries = std::fs::read_dir(root.join(dir)).unwrap_or_else(|e| panic!("{dir}: {e}"));
        let mut found: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "md" || e == "5"))
            .collect();
        found.sort();
        files.extend(found);
    }
    files
}

/// Programs that are not gpushare's commands, whose statuses the docs
/// may name: the hardware check run from the source tree (`make
/// hw-check`).
const NOT_COMMANDS: [&str; 1] = ["gpushare-hw-check"];

#[test]
fn every_exit_status_the_docs_name_is_the_commands_own() {
    let mut wrong = Vec::new();
    let mut seen = 0;
    let show = std::env::var_os("GPUSHARE_SHOW_EXIT_CLAIMS").is_some();
    for path in documents() {
        let file = path
            .strip_prefix(root())
            .unwrap_or(&path)
            .display()
            .to_string();
        for claim in claims_of(&read(&path), &file) {
            if NOT_COMMANDS.contains(&claim.command.as_deref().unwrap_or_default()) {
                continue;
            }
            seen += 1;
            if show {
                println!("{claim:?}");
            }
            wrong.extend(judged(&claim));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The docs name statuses of many commands: a reader that finds none
    // checks nothing.
    assert!(seen >= 20, "only {seen} exit statuses found in the docs");
}

#[test]
fn a_wrong_number_or_meaning_in_a_doc_fails() {
    let claims = |text: &str| claims_of(text, "doc.md");
    let bad = |text: &str| claims(text).iter().filter_map(judged).collect::<Vec<_>>();
    assert!(bad("`gpu-qos check` exits 2 with the file's error.").is_empty());
    assert_eq!(
        bad("`gpu-qos check` exits 3 with the file's error.").len(),
        1
    );
    // The nearest command named before the status is the one.
    assert!(bad("`gpu-mps gc` (the prolog does so too) exits 1 while some are not.").is_empty());
    assert_eq!(bad("`gpu-mps enable` then exits 1.").len(), 1);
    // `0, or 2`: both statuses.
    assert_eq!(bad("`gpu-qos audit --markdown` (exit 0, or 3)").len(), 1);
    // Both of `prolog and epilog`.
    let both = claims("its prolog and epilog exit 0 at once");
    assert_eq!(both.len(), 2, "{both:?}");
    assert_eq!(bad("its prolog and epilog exit 3 at once").len(), 2);
    // A list says what the table says.
    let audit = "`gpu-qos audit`: Exit status: 0 clean, 1 findings at or above \
                 `--fail-on error|warning|note` (default `error`), 2 could not read.";
    assert!(bad(audit).is_empty(), "{:?}", bad(audit));
    let swapped = "`gpu-qos audit`: Exit status: 0 clean, 1 could not read, 2 findings.";
    assert_eq!(bad(swapped).len(), 2);
    // A section's command serves a block that names none.
    let section = "## gpu-mps selftest\n\nIt tests.\n\nExit status: 0 every GPU tested \
                   passed, 1 a GPU failed, 2 the test could not run, 3 none failed.\n";
    assert!(bad(section).is_empty(), "{:?}", bad(section));
    assert_eq!(bad(&section.replace("3 none", "4 none")).len(), 1);
    // Slurm's ExitCode=0:0 is no claim; a status of no command is one.
    assert!(claims("sacct says ExitCode=0:0").is_empty());
    assert_eq!(bad("It exits 1.").len(), 1);
    assert!(words_of("`--fail-on`, (default)") == ["--fail-on", "default"]);
}
