//! Whose a job's `AdminComment` is: text gpushare may add its words to,
//! or a site tool's that it must leave as it is.
//!
//! Other tools keep their own data there. Princeton's jobstats stores its
//! summary as `JS1:<base64 of gzipped JSON>` from its slurmctld epilog,
//! and its readers decode everything after `JS1:`: one word appended and
//! the blob no longer decodes. A comment that gpushare's write would
//! alter is not gpushare's to touch either: slurmdbd pastes the value
//! into its SQL unescaped, so MySQL rewrites backslashes (`C:\temp`
//! comes back with a tab) and a comment that ends in `\` makes the
//! statement fail; `sacctmgr` writes quotes as backquotes on every
//! release (its `strip_quotes`).
//!
//! Before Slurm 23.02 `sacctmgr` writes every comment in lower case, so
//! jobstats' own write leaves `js1:` there: still its summary, and no
//! more gpushare's to append to.
//!
//! [`site_tools`] tells such a comment (and why); gpushare then keeps its
//! words out of it.

/// Why `comment` is a site tool's (left whole by gpushare), or `None`
/// where gpushare may append its words to it (the comment kept before
/// them).
pub fn site_tools(comment: &str) -> Option<&'static str> {
    let start = comment.trim_start();
    if start
        .get(..4)
        .is_some_and(|s| s.eq_ignore_ascii_case("JS1:"))
    {
        return Some("it holds Princeton jobstats' summary (JS1:), which its readers decode whole");
    }
    if comment.contains('\\') {
        return Some(
            "it holds backslashes, which slurmdbd's SQL would rewrite at gpushare's write",
        );
    }
    if comment.contains(['"', '\'']) {
        return Some("it holds quotes, which sacctmgr would write as backquotes");
    }
    if comment.chars().any(char::is_control) {
        return Some("it holds control characters, which gpushare's write would not keep");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobstats_and_text_a_write_would_alter_are_left_whole() {
        assert!(site_tools("JS1:H4sIAAAAAAAAA6tWKkktLlGyUlAqS8wpTgUA").is_some());
        // As 22.05's sacctmgr writes it: lowered.
        assert!(site_tools("js1:h4siaaaaaaaaa6twkkktllgyuluaqs8wptgua").is_some());
        assert!(site_tools(r"C:\temp").is_some());
        assert!(site_tools("ends in \\").is_some());
        assert!(site_tools("two\nlines").is_some());
        assert!(site_tools("said \"no\"").is_some());
        assert!(site_tools("it's").is_some());
        assert_eq!(site_tools("site: project 42"), None);
        assert_eq!(site_tools(""), None);
        assert_eq!(
            site_tools("gpushare-usage: node=gpu01 gpu=0 units=25/100"),
            None
        );
    }
}
