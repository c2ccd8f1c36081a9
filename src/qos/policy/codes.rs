//! Stable codes of the policy's refusals and warnings, as users quote
//! them in tickets (`[GQ101]` at the end of what they read): one per kind
//! of refusal ([`RejectionKind`]) and per change of the low-priority QOS
//! ([`LowPriorityChange`]), never reused, listed with the cause and the
//! fix on the page `docs/codes.md` (a unit test keeps the two in step).
//! A warning of `Enforce=warn` carries the code of the refusal it stands
//! for.

pub use super::verdict::coded;
use super::verdict::{LowPriorityChange, RejectionKind, WarningReason};

/// Every code, with the kind's name in the metrics' `rule`/`reason`
/// label, replay's JSON and slurmctld's log.
pub const CODES: [(&str, &str); 13] = [
    ("GQ101", "untyped_gpu"),
    ("GQ102", "type_not_permitted"),
    ("GQ103", "over_limit"),
    ("GQ104", "no_gpu_request"),
    ("GQ105", "shared_outside_reservation"),
    ("GQ106", "share_too_large"),
    ("GQ107", "update_needs_typed_gpu"),
    ("GQ108", "bad_request"),
    ("GQ109", "unlisted_typed_limit"),
    ("GQ110", "foreign_array_throttle"),
    ("GQ201", "low_priority_requeue"),
    ("GQ202", "low_priority_exclusive_user"),
    ("GQ203", "low_priority_array_throttle"),
];

impl RejectionKind {
    /// This refusal's code.
    pub fn code(self) -> &'static str {
        match self {
            RejectionKind::UntypedGpu => "GQ101",
            RejectionKind::TypeNotPermitted => "GQ102",
            RejectionKind::OverLimit => "GQ103",
            RejectionKind::NoGpuRequest => "GQ104",
            RejectionKind::SharedOutsideReservation => "GQ105",
            RejectionKind::ShareTooLarge => "GQ106",
            RejectionKind::UpdateNeedsTypedGpu => "GQ107",
            RejectionKind::BadRequest => "GQ108",
            RejectionKind::UnlistedTypedLimit => "GQ109",
            RejectionKind::ForeignArrayThrottle => "GQ110",
        }
    }
}

impl LowPriorityChange {
    /// This change's code.
    pub fn code(self) -> &'static str {
        match self {
            LowPriorityChange::Requeue => "GQ201",
            LowPriorityChange::ExclusiveUser => "GQ202",
            LowPriorityChange::ArrayThrottle => "GQ203",
        }
    }
}

impl WarningReason {
    /// The code of the refusal or change the warning stands for.
    pub fn code(self) -> &'static str {
        match self {
            WarningReason::Refusal(kind) => kind.code(),
            WarningReason::LowPriority(change) => change.code(),
        }
    }
}

/// The code of a name of [`CODES`] (a metrics label, replay's `reason`).
pub fn code_of(name: &str) -> Option<&'static str> {
    CODES.iter().find(|(_, n)| *n == name).map(|(c, _)| *c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_code_and_name() {
        let mut codes: Vec<&str> = RejectionKind::ALL.iter().map(|k| k.code()).collect();
        codes.extend(LowPriorityChange::ALL.iter().map(|c| c.code()));
        let listed: Vec<&str> = CODES.iter().map(|(c, _)| *c).collect();
        assert_eq!(codes, listed);
        for c in LowPriorityChange::ALL {
            assert_eq!(code_of(c.label()), Some(c.code()));
        }
        let mut unique = listed.clone();
        unique.dedup();
        assert_eq!(unique.len(), CODES.len());
    }

    /// docs/codes.md lists each code once, with its name, and no other.
    #[test]
    fn the_codes_page_lists_every_code_and_no_other() {
        let page = include_str!("../../../docs/codes.md");
        let rows: Vec<(&str, &str)> = page
            .lines()
            .filter_map(|l| {
                let mut cells = l.strip_prefix("| GQ")?.split(" | ");
                let code = cells.next()?;
                let name = cells.next()?.trim_matches('`');
                Some((code, name))
            })
            .collect();
        let listed: Vec<(String, &str)> =
            rows.iter().map(|(c, n)| (format!("GQ{c}"), *n)).collect();
        let codes: Vec<(String, &str)> = CODES.iter().map(|(c, n)| ((*c).to_owned(), *n)).collect();
        assert_eq!(listed, codes, "docs/codes.md's table is not CODES");
    }

    #[test]
    fn the_code_ends_the_first_line() {
        assert_eq!(coded("no type.", "GQ101"), "no type. [GQ101]");
        assert_eq!(
            coded("no type.\nSubmit with X.", "GQ101"),
            "no type. [GQ101]\nSubmit with X."
        );
    }
}
