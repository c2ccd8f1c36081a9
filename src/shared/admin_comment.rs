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
//! rackslab's slurm-quota keeps a bare UUID there and reads the whole
//! field back as its key. Any other comment gpushare did not write (an
//! administrator's note, a tool not named here) is left whole too:
//! gpushare writes only into an empty comment or one that starts with its
//! own words.
//!
//! [`site_tools`] tells such a comment (and why); gpushare then keeps its
//! words out of it.

/// Why `comment` is a site tool's (left whole by gpushare), or `None`
/// where gpushare may append its words to it (the comment kept before
/// them).
pub fn site_tools(comment: &str) -> Option<&'static str> {
    if let Some(why) = kept_whole(comment) {
        return Some(why);
    }
    // gpushare writes only into an empty comment or its own, so every
    // comment it wrote starts with its words.
    let start = comment.trim_start();
    if !start.is_empty() && !start.starts_with(OWN_WORDS) {
        return Some("another tool or an administrator wrote it, and gpushare leaves it as it is");
    }
    None
}

/// Why `comment` must stay as it is in any field (a tool's data, or text
/// gpushare's write would alter), or `None`: the test for a job's
/// `SystemComment`, where slurmctld's own words stand first and
/// gpushare's may follow them.
pub fn kept_whole(comment: &str) -> Option<&'static str> {
    let start = comment.trim_start();
    if start
        .get(..4)
        .is_some_and(|s| s.eq_ignore_ascii_case("JS1:"))
    {
        return Some("it holds Princeton jobstats' summary (JS1:), which its readers decode whole");
    }
    if is_uuid(comment.trim()) {
        return Some(
            "it holds a bare UUID (rackslab's slurm-quota keeps its key so and reads the whole \
             field back)",
        );
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

/// How every comment gpushare writes starts (`gpushare: ...`,
/// `gpushare-usage: ...`).
pub const OWN_WORDS: &str = "gpushare";

/// A UUID as text, `8-4-4-4-12` hexadecimal digits (any case).
fn is_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_quotas_key_and_any_other_words_are_left_whole() {
        // rackslab's slurm-quota: its key, the whole field.
        assert!(site_tools("0f8fad5b-d9cb-469f-a165-70867728950e")
            .is_some_and(|why| why.contains("slurm-quota")));
        assert!(site_tools("0F8FAD5B-D9CB-469F-A165-70867728950E").is_some());
        // Anything else gpushare did not write.
        assert!(site_tools("site: project 42").is_some());
        assert!(site_tools("0f8fad5b-d9cb-469f-a165").is_some());
        // gpushare's own words, wherever a tool appended after them.
        assert_eq!(site_tools("gpushare: requeues so far: 1; site: x"), None);
        assert_eq!(site_tools("gpushare: held: GPU type h100 ..."), None);
    }

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
        assert_eq!(site_tools(""), None);
        assert_eq!(site_tools("  "), None);
        assert_eq!(
            site_tools("gpushare-usage: node=gpu01 gpu=0 units=25/100"),
            None
        );
    }
}
