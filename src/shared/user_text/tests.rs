//! Shown text holds no control character and reads back to the text;
//! quoted words read back, through a POSIX shell's word splitting, to
//! the words and nothing else.

use proptest::prelude::*;

use super::*;

/// The text [`shown`] stands for.
fn unshown(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            '\\' => out.push('\\'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'x' => {
                let hex: String = chars.by_ref().take(2).collect();
                out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
            }
            'u' => {
                let hex: String = chars.by_ref().skip(1).take_while(|&c| c != '}').collect();
                out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
            }
            _ => return None,
        }
    }
    Some(out)
}

/// What a user may put in a SubmitLine to fool whoever reads or pastes it.
const HOSTILE: [&str; 16] = [
    "cd /scratch && ./run",
    "$(touch /tmp/owned)",
    "`id`",
    "a;b",
    "it's",
    "\"q\" 'q'",
    "~root",
    "*",
    "=ls",
    "#c",
    "é ü",
    "",
    "!!",
    "{a,b}",
    "back\\slash",
    "x|y>z<w(v)",
];

#[test]
fn controls_are_written_out() {
    assert_eq!(
        shown("sbatch\x1b[2J\x1b]52;c;cm0gLXJm\x07 --wrap=a\nb\r\tc\x7f\\n"),
        "sbatch\\x1b[2J\\x1b]52;c;cm0gLXJm\\x07 --wrap=a\\nb\\r\\tc\\x7f\\\\n"
    );
    assert_eq!(
        shown("\u{9b}31m \u{202e}txt.sh\u{2066}\u{2069}\u{200f}\u{2028}"),
        "\\u{9b}31m \\u{202e}txt.sh\\u{2066}\\u{2069}\\u{200f}\\u{2028}"
    );
    assert_eq!(
        shown("sbatch --gres=gpu:2 é.sh"),
        "sbatch --gres=gpu:2 é.sh"
    );
}

#[test]
fn words_are_quoted_only_where_a_shell_would_read_them() {
    let quoted: Vec<String> = HOSTILE.iter().filter_map(|w| shell_word(w)).collect();
    assert_eq!(
        quoted,
        [
            "'cd /scratch && ./run'",
            "'$(touch /tmp/owned)'",
            "'`id`'",
            "'a;b'",
            r"'it'\''s'",
            r#"'"q" '\''q'\'''"#,
            "'~root'",
            "'*'",
            "'=ls'",
            "'#c'",
            "'é ü'",
            "''",
            "'!!'",
            "'{a,b}'",
            r"'back\slash'",
            "'x|y>z<w(v)'",
        ]
    );
    assert_eq!(
        shell_word("--gres=gpu:a40:1").as_deref(),
        Some("--gres=gpu:a40:1")
    );
    for control in ["a\nb", "\x1b[A", "\u{9b}", "\u{202e}", "\x7f", "\t"] {
        assert_eq!(shell_word(control), None, "{control:?}");
    }
    assert_eq!(shell_line(&["sbatch", "a\nb"]), None);
    let line = shell_line(&HOSTILE).unwrap();
    assert_eq!(shell_split(&line).unwrap(), HOSTILE);
}

/// The quoted words through the system's own shell, where it has one.
#[test]
fn a_real_shell_reads_the_words_back() {
    let line = shell_line(&HOSTILE).unwrap();
    let Ok(out) = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("printf '%s\\n' {line}"))
        .current_dir(std::env::temp_dir())
        .output()
    else {
        return;
    };
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8(out.stdout).unwrap();
    let words: Vec<&str> = printed.split_terminator('\n').collect();
    assert_eq!(words, HOSTILE);
}

proptest! {
    #[test]
    fn shown_text_has_no_control_and_reads_back(text in any::<String>()) {
        let s = shown(&text);
        prop_assert!(!s.chars().any(is_control), "{s:?}");
        prop_assert!(!s.bytes().any(|b| b < 0x20 || b == 0x7f));
        prop_assert_eq!(unshown(&s), Some(text));
    }

    #[test]
    fn quoted_words_split_back_to_the_words(words in prop::collection::vec(any::<String>(), 0..6)) {
        let line = shell_line(&words);
        let has_control = words.iter().any(|w| w.chars().any(is_control));
        prop_assert_eq!(line.is_none(), has_control);
        if let Some(line) = line {
            prop_assert!(!line.chars().any(is_control), "{line:?}");
            prop_assert_eq!(shell_split(&line), Some(words));
        }
    }

    #[test]
    fn printable_words_split_back(words in prop::collection::vec("[ -~é\u{202f}]{0,12}", 1..6)) {
        let line = shell_line(&words);
        prop_assert!(line.is_some());
        prop_assert_eq!(line.as_deref().and_then(shell_split), Some(words));
    }
}
