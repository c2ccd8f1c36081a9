//! slurmctld's association manager (`scontrol -o show assoc_mgr`): each
//! QOS's typed GPU limits with their usage, who has jobs in a QOS, and
//! the associations of accounts and users. One call answered from
//! slurmctld's association cache (no job lock), whose size does not grow
//! with the site's jobs. The parsers of its answer are
//! [`crate::qos::metrics::parse_assoc_mgr_qos`],
//! [`crate::qos::metrics::parse_assoc_lines`] and
//! [`crate::qos::usage::parse_qos_users`].

use super::Query;

/// Every QOS, one line each.
pub fn all_qos() -> Query {
    Query::new(
        "scontrol",
        &["-o", "show", "assoc_mgr", "flags=qos"],
        "assoc-mgr-qos",
    )
}

/// The QOS named, one line each.
pub fn qos(names: &[String]) -> Query {
    let list = names.join(",");
    Query::new(
        "scontrol",
        &[
            "-o",
            "show",
            "assoc_mgr",
            "flags=qos",
            &format!("qos={list}"),
        ],
        &format!("assoc-mgr-qos-{list}"),
    )
}

/// The associations of `accounts`, one line each.
pub fn accounts(accounts: &[String]) -> Query {
    let list = accounts.join(",");
    assoc(&format!("accounts={list}"), &format!("accounts-{list}"))
}

/// The associations of one user.
pub fn user(user: &str) -> Query {
    assoc(&format!("users={user}"), &format!("user-{user}"))
}

fn assoc(filter: &str, key: &str) -> Query {
    Query::new(
        "scontrol",
        &["-o", "show", "assoc_mgr", "flags=assoc", filter],
        &format!("assoc-mgr-assoc-{key}"),
    )
}

/// What [`crate::qos::usage`] notes when an association read fails.
pub const ASSOC_SOURCE: &str = "scontrol show assoc_mgr flags=assoc";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_slurmctlds_own() {
        let q = qos(&["qos_a".to_owned(), "qos_b".to_owned()]);
        assert_eq!(
            q.shown(),
            "scontrol -o show assoc_mgr flags=qos qos=qos_a,qos_b"
        );
        assert_eq!(q.key, "assoc-mgr-qos-qos_a_qos_b");
        assert_eq!(
            accounts(&["lafferty".to_owned()]).shown(),
            "scontrol -o show assoc_mgr flags=assoc accounts=lafferty"
        );
        assert_eq!(user("alice").key, "assoc-mgr-assoc-user-alice");
    }
}
