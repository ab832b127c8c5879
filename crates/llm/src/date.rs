//! Calendar dates without a time-zone database: the chat templates and the system
//! prompt print today's date, run folders are named by it.

/// The UTC calendar date `(year, month, day)` of a Unix time, by Howard Hinnant's
/// civil-from-days algorithm (no time-zone database needed for UTC).
pub fn civil_date(unix_secs: u64) -> (i64, i64, i64) {
    let days = (unix_secs / 86_400) as i64;
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
