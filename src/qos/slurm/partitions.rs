//! The partitions, their QOS and billing weights (`scontrol show partition
//! -o`), read by [`crate::qos::site::parse_partitions`].

use super::Query;

/// Every partition.
pub fn all() -> Query {
    Query::new(
        "scontrol",
        &["show", "partition", "-o"],
        "scontrol-show-partition",
    )
}

/// One partition.
pub fn one(name: &str) -> Query {
    Query::new(
        "scontrol",
        &["show", "partition", name, "-o"],
        &format!("scontrol-show-partition-{name}"),
    )
}
