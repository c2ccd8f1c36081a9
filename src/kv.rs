//! The `Key=Value` line syntax of Slurm's own config files, shared by
//! `gpu_qos.conf` and `gpu_mps.conf`: `#` starts a comment anywhere on a
//! line, blank lines are ignored, several whitespace-separated `Key=Value`
//! words may share a line. Keys are matched case-insensitively by callers.

/// One `Key=Value` word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pair<'a> {
    pub key: &'a str,
    pub value: &'a str,
}

/// A word that is not `Key=Value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WordError {
    /// No `=` in the word.
    MissingEquals(String),
    /// `Key=` with nothing after it.
    EmptyValue(String),
}

/// The words of each non-empty line, with 1-based line numbers.
pub fn lines(text: &str) -> impl Iterator<Item = (usize, Result<Vec<Pair<'_>>, WordError>)> {
    text.lines().enumerate().filter_map(|(i, raw)| {
        let content = raw.split('#').next().unwrap_or("");
        let words: Vec<&str> = content.split_whitespace().collect();
        if words.is_empty() {
            return None;
        }
        let pairs = words
            .into_iter()
            .map(|w| match w.split_once('=') {
                None => Err(WordError::MissingEquals(w.to_owned())),
                Some((k, "")) => Err(WordError::EmptyValue(k.to_owned())),
                Some((key, value)) => Ok(Pair { key, value }),
            })
            .collect();
        Some((i + 1, pairs))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_blank_lines_and_several_pairs_per_line() {
        let text = "# header\n\nA=1 B=two # tail\n  C=x=y\n";
        let got: Vec<_> = lines(text).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, 3);
        assert_eq!(
            got[0].1,
            Ok(vec![
                Pair {
                    key: "A",
                    value: "1"
                },
                Pair {
                    key: "B",
                    value: "two"
                }
            ])
        );
        assert_eq!(
            got[1],
            (
                4,
                Ok(vec![Pair {
                    key: "C",
                    value: "x=y"
                }])
            )
        );
    }

    #[test]
    fn bad_words_are_reported_with_their_line() {
        let got: Vec<_> = lines("A=1\nlonely\nB=\n").collect();
        assert_eq!(got[1], (2, Err(WordError::MissingEquals("lonely".into()))));
        assert_eq!(got[2], (3, Err(WordError::EmptyValue("B".into()))));
    }
}
