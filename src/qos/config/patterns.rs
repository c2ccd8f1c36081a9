//! Type entries and reservation names as globs: `a100_*` covers every
//! MIG slice type of an A100.

/// Whether a type entry of a rule (`a40`, or a pattern such as `a100_*`
/// for MIG slice types) covers `gpu_type`.
pub fn type_matches(entry: &str, gpu_type: &str) -> bool {
    if is_pattern(entry) {
        glob_matches(entry, gpu_type)
    } else {
        entry == gpu_type
    }
}

/// A type entry with `*` or `?` in it: a family of types (MIG slices).
pub fn is_pattern(entry: &str) -> bool {
    entry.contains(['*', '?'])
}

/// Whether `text` matches `pattern`, where `*` is any run of characters and
/// `?` exactly one. Iterative with one backtrack point, so a hostile pattern
/// costs O(len × len) at worst and never recurses.
pub fn glob_matches(pattern: &str, text: &str) -> bool {
    let pattern: &[u8] = pattern.as_bytes();
    let text: &[u8] = text.as_bytes();
    let (mut p, mut t) = (0usize, 0usize);
    let mut backtrack: Option<(usize, usize)> = None;
    loop {
        match pattern.get(p) {
            Some(b'*') => {
                backtrack = Some((p, t));
                p += 1;
                continue;
            }
            Some(&pc) => {
                if let Some(&tc) = text.get(t) {
                    if pc == b'?' {
                        p += 1;
                        t = next_char_start(text, t);
                        continue;
                    }
                    if pc == tc {
                        p += 1;
                        t += 1;
                        continue;
                    }
                }
            }
            None if t >= text.len() => return true,
            None => {}
        }
        // Mismatch: let the last `*` swallow one more character, if any.
        match backtrack {
            Some((star, from)) if from < text.len() => {
                let from = next_char_start(text, from);
                backtrack = Some((star, from));
                p = star + 1;
                t = from;
            }
            _ => return false,
        }
    }
}

/// `?` and `*` step over whole UTF-8 characters, never into the middle of one.
fn next_char_start(text: &[u8], at: usize) -> usize {
    let mut next = at + 1;
    while text.get(next).is_some_and(|b| b & 0xC0 == 0x80) {
        next += 1;
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn globs() {
        assert!(glob_matches("*", ""));
        assert!(glob_matches("a*", "a"));
        assert!(glob_matches("a*c", "abbbc"));
        assert!(!glob_matches("a*c", "abbbd"));
        assert!(glob_matches("a?c", "abc"));
        assert!(!glob_matches("a?c", "ac"));
        assert!(glob_matches("*x*y", "axbxcy"));
        assert!(glob_matches("?", "é"));
        assert!(!glob_matches("??", "é"));
        assert!(glob_matches("course_*_gpu", "course_ml_gpu"));
        assert!(!glob_matches("course", "Course"));
        assert!(!glob_matches("", "x"));
    }

    fn naive_glob(p: &[char], t: &[char]) -> bool {
        match p.split_first() {
            None => t.is_empty(),
            Some(('*', rest)) => (0..=t.len()).any(|i| naive_glob(rest, &t[i..])),
            Some(('?', rest)) => !t.is_empty() && naive_glob(rest, &t[1..]),
            Some((c, rest)) => t.first() == Some(c) && naive_glob(rest, &t[1..]),
        }
    }

    proptest! {
        #[test]
        fn glob_agrees_with_the_obvious_recursive_definition(
            p in "[ab?*é]{0,6}", t in "[abé]{0,8}"
        ) {
            let pc: Vec<char> = p.chars().collect();
            let tc: Vec<char> = t.chars().collect();
            prop_assert_eq!(glob_matches(&p, &t), naive_glob(&pc, &tc));
        }
    }
}
