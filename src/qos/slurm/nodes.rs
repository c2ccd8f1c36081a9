//! The nodes and their GRES (`scontrol show node -o`), read by
//! [`crate::qos::site::parse_nodes`].

use super::Query;

pub fn all() -> Query {
    Query::new("scontrol", &["show", "node", "-o"], "scontrol-show-node")
}
