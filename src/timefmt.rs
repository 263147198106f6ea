//! Timestamp helpers: RFC 3339 UTC formatting and parsing (humantime), never panicking.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The last second RFC 3339 can show (9999-12-31T23:59:59Z); humantime's `Display` fails past
/// it, and `to_string` turns that failure into a panic.
const LAST_SHOWABLE_SECS: u64 = 253_402_300_799;

/// `t` clamped into the range humantime formats without failing: the epoch to year 9999.
/// Times can come from server data (rate-limit headers), so formatting must never panic.
fn showable(t: SystemTime) -> SystemTime {
    let last = UNIX_EPOCH + Duration::from_secs(LAST_SHOWABLE_SECS);
    t.clamp(UNIX_EPOCH, last)
}

/// Format a time as RFC 3339 UTC with second precision, e.g. `2026-11-29T19:17:17Z`
/// (clamped to the epoch … 9999-12-31T23:59:59Z; never panics).
pub(crate) fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(showable(t)).to_string()
}

/// Format a time as RFC 3339 UTC with millisecond precision (clamped like [`rfc3339`]).
pub(crate) fn rfc3339_millis(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(showable(t)).to_string()
}

/// Parse an RFC 3339 timestamp (as GitHub sends, e.g. `2024-01-02T03:04:05Z`).
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(s.trim()).ok()
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_rfc3339() {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(rfc3339(t), "2023-11-14T22:13:20Z");
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20Z"), Some(t));
        assert_eq!(parse_rfc3339("not a time"), None);
    }

    #[test]
    fn far_future_and_pre_epoch_times_format_without_panic() {
        let far = UNIX_EPOCH + Duration::from_secs(300_000_000_000);
        assert_eq!(rfc3339(far), "9999-12-31T23:59:59Z");
        assert_eq!(rfc3339_millis(far), "9999-12-31T23:59:59.000Z");
        let before = UNIX_EPOCH - Duration::from_secs(5);
        assert_eq!(rfc3339(before), "1970-01-01T00:00:00Z");
    }
}
