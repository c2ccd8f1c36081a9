//! Stable codes of the policy's refusals and warnings, as users quote
//! them in tickets (`[GQ101]` at the end of what they read): one per kind
//! of refusal ([`RejectionKind`]) and per change of the low-priority QOS
//! ([`LowPriorityChange`]), never reused, listed with the cause and the
//! fix on the page `docs/codes.md` (a unit test keeps the two in step).
//! A warning of `Enforce=warn` carries the code of the refusal it stands
//! for.

pub use super::verdict::coded;
pub use super::verdict::DEFAULT_GPU_TYPE;
use super::verdict::{LowPriorityChange, RejectionKind, WarningReason};

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
            RejectionKind::OverTypeCap => "GQ111",
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
            WarningReason::TypeGiven => DEFAULT_GPU_TYPE.0,
        }
    }
}

/// Every code with its kind's name (`label`): the refusals', then the
/// changes'.
pub fn all() -> impl Iterator<Item = (&'static str, &'static str)> {
    let refusals = RejectionKind::ALL
        .into_iter()
        .map(|k| (k.code(), k.label()));
    let changes = LowPriorityChange::ALL
        .into_iter()
        .map(|c| (c.code(), c.label()));
    refusals
        .chain(changes)
        .chain(std::iter::once(DEFAULT_GPU_TYPE))
}

/// The code of a kind's name (a metrics label, replay's `reason`).
pub fn code_of(name: &str) -> Option<&'static str> {
    all().find(|(_, n)| *n == name).map(|(c, _)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_code_and_name() {
        let listed: Vec<(&str, &str)> = all().collect();
        assert_eq!(listed.len(), 15);
        for (code, name) in &listed {
            assert_eq!(code_of(name), Some(*code));
        }
        for c in LowPriorityChange::ALL {
            assert_eq!(code_of(c.label()), Some(c.code()));
        }
        let mut unique: Vec<&str> = listed.iter().map(|(c, _)| *c).collect();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), listed.len());
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
        let codes: Vec<(String, &str)> = all().map(|(c, n)| (c.to_owned(), n)).collect();
        assert_eq!(listed, codes, "docs/codes.md's table is not the codes");
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
