//! Text a user wrote, shown to someone else (root reading `gpu-qos
//! advise` or `replay`): as text, never as bytes a terminal acts on
//! ([`shown`]); and the words offered to paste into a shell, quoted so
//! that the shell reads each back as one word and runs nothing else
//! ([`shell_word`]).
//!
//! A user's arguments may hold escape sequences (cursor moves that paint
//! over earlier lines, OSC 52 clipboard writes), newlines that add lines
//! to a report, and bidirectional overrides that show text in another
//! order than a shell reads it. Slurm records a `SubmitLine` as argv
//! joined by spaces, unquoted, so it is never a command to paste either:
//! `sbatch --wrap='cd /scratch && ./run'` is recorded as
//! `sbatch --wrap=cd /scratch && ./run`.

use std::fmt::Write as _;

/// Whether a terminal acts on `c`, or shows the text around it out of
/// order: the C0 controls (newline and tab included), DEL, the C1
/// controls (U+0080–U+009F), the bidirectional marks, embeddings,
/// overrides and isolates, and the line and paragraph separators.
pub fn is_control(c: char) -> bool {
    matches!(
        c,
        '\0'..='\x1f'
            | '\x7f'
            | '\u{80}'..='\u{9f}'
            | '\u{61c}'
            | '\u{200e}'
            | '\u{200f}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}'
    )
}

/// `text` with every [`is_control`] character written out: `\n`, `\r`,
/// `\t`, `\x1b` (other C0 controls and DEL), `\u{9b}` (the others); a
/// backslash doubled, so that the text shown reads back to one text only.
pub fn shown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0'..='\x1f' | '\x7f' => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if is_control(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// Characters no POSIX shell (nor bash or zsh) gives a meaning to inside
/// a word.
fn plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_-./:,+@%=".contains(c)
}

/// `word` as one word of a POSIX shell: as it is where every character
/// is [`plain`] (and it starts with no `=`, which zsh expands), else in
/// single quotes, each `'` written `'\''`. `None` where it holds an
/// [`is_control`] character: such a word is never offered to paste.
pub fn shell_word(word: &str) -> Option<String> {
    if word.chars().any(is_control) {
        return None;
    }
    if !word.is_empty() && word.chars().all(plain) && !word.starts_with('=') {
        return Some(word.to_owned());
    }
    Some(format!("'{}'", word.replace('\'', r"'\''")))
}

/// `words` as one command line, each a [`shell_word`]; `None` where one
/// cannot be: what the tests prove of quoted lines.
#[cfg(test)]
pub(crate) fn shell_line<S: AsRef<str>>(words: &[S]) -> Option<String> {
    let quoted: Option<Vec<String>> = words.iter().map(|w| shell_word(w.as_ref())).collect();
    quoted.map(|q| q.join(" "))
}

/// How a POSIX shell splits `line` into words (XCU 2.2, 2.3, 2.6.7),
/// for the tests of those who offer lines to paste; `None` where it would do anything else with it: expand a parameter,
/// a command or a pattern, a `~` or zsh's `=`, or read an operator
/// (`;`, `&`, `|`, `<`, `>`, `(`, `)`), a comment or an unclosed quote.
#[cfg(test)]
pub(crate) fn shell_split(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => loop {
                in_word = true;
                match chars.next()? {
                    '\'' => break,
                    x => word.push(x),
                }
            },
            '"' => loop {
                in_word = true;
                match chars.next()? {
                    '"' => break,
                    '$' | '`' => return None,
                    '\\' => {
                        let next = chars.next()?;
                        if !"$`\"\\\n".contains(next) {
                            word.push('\\');
                        }
                        word.push(next);
                    }
                    x => word.push(x),
                }
            },
            '\\' => {
                in_word = true;
                word.push(chars.next()?);
            }
            '=' if !in_word => return None,
            c if plain(c) => {
                in_word = true;
                word.push(c);
            }
            _ => return None,
        }
    }
    if in_word {
        words.push(word);
    }
    Some(words)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
