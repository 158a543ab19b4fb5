//! `Retry-After` (RFC 9110 §10.2.3) on a provider's 429: how long the provider asked us
//! to wait, as delta-seconds or as an HTTP-date (IMF-fixdate), bounded so that neither
//! a missing header nor an absurd one stalls or floods anything.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The wait when a 429 names none (or one that cannot be read).
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);
/// The shortest wait honoured: a provider that says "0" is not called in a tight loop.
pub const MIN_RETRY_AFTER: Duration = Duration::from_millis(100);
/// The longest wait honoured: an operation is not parked for hours on one header; if
/// the provider is still throttling then, it says so again.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// The wait a `Retry-After` value asks for, measured from `now`, within
/// [`MIN_RETRY_AFTER`, `MAX_RETRY_AFTER`]; [`DEFAULT_RETRY_AFTER`] when absent or unreadable.
pub fn retry_after(value: Option<&str>, now: SystemTime) -> Duration {
    let asked = value.and_then(|value| {
        let value = value.trim();
        delta_seconds(value).or_else(|| {
            let at = http_date(value)?;
            Some(at.duration_since(now).unwrap_or(Duration::ZERO))
        })
    });
    asked
        .unwrap_or(DEFAULT_RETRY_AFTER)
        .clamp(MIN_RETRY_AFTER, MAX_RETRY_AFTER)
}

/// `1*DIGIT`; a number too large for a `u64` is as good as "very long".
fn delta_seconds(value: &str) -> Option<Duration> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)))
}

/// IMF-fixdate, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`, the one form senders must use.
fn http_date(value: &str) -> Option<SystemTime> {
    let (_weekday, rest) = value.split_once(", ")?;
    let mut parts = rest.split(' ');
    let day: u32 = number(parts.next()?, 2)?;
    let month_name = parts.next()?;
    let month = MONTHS.iter().position(|m| *m == month_name)? as u32 + 1;
    let year: i64 = number(parts.next()?, 4)?;
    let mut clock = parts.next()?.split(':');
    let hour: u64 = number(clock.next()?, 2)?;
    let minute: u64 = number(clock.next()?, 2)?;
    let second: u64 = number(clock.next()?, 2)?;
    if parts.next()? != "GMT"
        || parts.next().is_some()
        || clock.next().is_some()
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let days = u64::try_from(days_from_civil(year, month, day)).ok()?;
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second;
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Exactly `digits` ASCII digits.
fn number<T: std::str::FromStr>(text: &str, digits: usize) -> Option<T> {
    (text.len() == digits && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse().ok())
        .flatten()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let month = i64::from(month);
    let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn delta_seconds_are_honoured_within_the_bounds() {
        let now = at(0);
        assert_eq!(retry_after(Some("2"), now), Duration::from_secs(2));
        assert_eq!(retry_after(Some(" 17 "), now), Duration::from_secs(17));
        assert_eq!(retry_after(Some("0"), now), MIN_RETRY_AFTER);
        assert_eq!(retry_after(Some("86400"), now), MAX_RETRY_AFTER);
        assert_eq!(
            retry_after(Some("99999999999999999999999"), now),
            MAX_RETRY_AFTER
        );
    }

    #[test]
    fn an_http_date_is_a_wait_until_then() {
        // 1994-11-06T08:49:37Z is 784111777 s after the epoch.
        let date = "Sun, 06 Nov 1994 08:49:37 GMT";
        assert_eq!(http_date(date), Some(at(784_111_777)));
        assert_eq!(
            retry_after(Some(date), at(784_111_777 - 30)),
            Duration::from_secs(30)
        );
        // A date already past: as soon as allowed.
        assert_eq!(
            retry_after(Some(date), at(784_111_777 + 5)),
            MIN_RETRY_AFTER
        );
        assert_eq!(http_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(at(0)));
        assert_eq!(
            http_date("Tue, 29 Feb 2028 23:59:59 GMT"),
            Some(at(1_835_481_599))
        );
    }

    #[test]
    fn absent_or_unreadable_values_get_the_default() {
        let now = at(1_000);
        for value in [
            None,
            Some(""),
            Some("-1"),
            Some("1.5"),
            Some("soon"),
            Some("Sun, 06 Nov 1994 08:49:37 UTC"),
            Some("Sun, 6 Nov 1994 08:49:37 GMT"),
            Some("Sun, 06 Foo 1994 08:49:37 GMT"),
            Some("Sun, 06 Nov 1994 24:00:00 GMT"),
            Some("Sun, 06 Nov 1994 08:49:37 GMT extra"),
            // The obsolete asctime form: senders must use IMF-fixdate.
            Some("Sun Nov  6 08:49:37 1994"),
        ] {
            assert_eq!(retry_after(value, now), DEFAULT_RETRY_AFTER, "{value:?}");
        }
    }
}
