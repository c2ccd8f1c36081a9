//! slurmctld's configuration as it runs (`scontrol show config`), read by
//! [`crate::qos::site::SlurmSettings::from_show_config`].

use super::Query;

pub fn show() -> Query {
    Query::new("scontrol", &["show", "config"], "scontrol-show-config")
}
