//! The accounting database's QOS and associations (`sacctmgr`): read by
//! [`crate::qos::site::parse_qos`] (the audit's fields),
//! [`crate::qos::check::parse_sacctmgr`] and
//! [`crate::qos::check::parse_sacctmgr_assoc`] (check and generate), and
//! [`crate::qos::usage::parse_assoc_qos`] (a user's QOS).

use super::Query;

/// Every QOS with the fields the audit, `why` and `usage` read.
pub fn audit() -> Query {
    Query::new(
        "sacctmgr",
        &crate::qos::site::AUDIT_SACCTMGR_ARGS,
        "sacctmgr-show-qos",
    )
}

/// Every QOS with the fields `check` and `generate` read.
pub fn limits() -> Query {
    Query::new(
        "sacctmgr",
        &crate::qos::check::SACCTMGR_ARGS,
        "sacctmgr-show-qos-limits",
    )
}

/// Every association with its `GrpTRES`.
pub fn associations() -> Query {
    Query::new(
        "sacctmgr",
        &crate::qos::check::SACCTMGR_ASSOC_ARGS,
        "sacctmgr-show-assoc",
    )
}

/// The QOS of one user's associations.
pub fn of_user(user: &str) -> Query {
    Query::new(
        "sacctmgr",
        &[
            "-nP",
            "show",
            "assoc",
            &format!("user={user}"),
            "format=QOS",
        ],
        &format!("sacctmgr-show-assoc-user-{user}"),
    )
}
