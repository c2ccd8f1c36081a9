//! Slurm's timestamps (`YYYY-MM-DDTHH:MM:SS`, as `scontrol`, `squeue` and
//! `sacct` print them) as seconds and back, written once.
//!
//! Slurm prints the controller's local time without a zone: a stamp is
//! read as if it were UTC, which is right for what gpushare does with them
//! (differences, sums, comparisons between stamps of one cluster).

/// Days since 1970-01-01 of the civil date `y-m-d` (proleptic Gregorian;
/// Howard Hinnant's algorithm). `m` is 1 to 12.
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date `(y, m, d)` of a day number (the same algorithm,
/// inverted).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Seconds since 1970 of Slurm's `YYYY-MM-DDTHH:MM:SS` (read as UTC:
/// only differences and sums matter, in the controller's own zone);
/// `None` for `Unknown`, `None` or anything else.
pub fn stamp_seconds(s: &str) -> Option<i64> {
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    if s.len() != 19 {
        return None;
    }
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    let days = days_from_civil(y, m, d);
    Some(((days * 24 + hh) * 60 + mm) * 60 + ss)
}

/// The stamp `secs` seconds after `stamp`, in the same form.
pub fn add_seconds(stamp: &str, secs: u64) -> Option<String> {
    let t = stamp_seconds(stamp)?.checked_add(i64::try_from(secs).ok()?)?;
    let (days, rest) = (t.div_euclid(86_400), t.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    Some(format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_add_across_days_months_and_leap_years() {
        assert_eq!(
            add_seconds("2026-11-23T23:07:24", 120).as_deref(),
            Some("2026-11-23T23:09:24")
        );
        assert_eq!(
            add_seconds("2026-12-31T23:59:30", 3600).as_deref(),
            Some("2027-01-01T00:59:30")
        );
        assert_eq!(
            add_seconds("2028-02-28T12:00:00", 86_400).as_deref(),
            Some("2028-02-29T12:00:00")
        );
        assert_eq!(add_seconds("Unknown", 1), None);
        assert_eq!(add_seconds("2026-13-01T00:00:00", 1), None);
    }

    #[test]
    fn scontrol_times_become_seconds() {
        assert_eq!(stamp_seconds("1970-01-01T00:00:00"), Some(0));
        assert_eq!(stamp_seconds("2000-03-01T00:00:01"), Some(951_868_801));
        assert_eq!(
            stamp_seconds("2025-01-01T00:00:00").zip(stamp_seconds("2024-12-31T23:59:58")),
            Some((1_735_689_600, 1_735_689_598))
        );
    }

    #[test]
    fn what_is_not_a_time_is_none() {
        for text in ["Unknown", "None", "", "2025-13-01T00:00:00", "2025-01-01"] {
            assert_eq!(stamp_seconds(text), None, "{text}");
        }
    }

    #[test]
    fn day_numbers_go_both_ways() {
        for days in [-719_468, -1, 0, 11_016, 19_358, 20_513, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(days_from_civil(2000, 2, 29), 11_016);
    }
}
