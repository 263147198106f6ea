//! Timestamp helpers: RFC 3339 UTC formatting/parsing (humantime) and serde adapters.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Format a time as RFC 3339 UTC with second precision, e.g. `2026-11-29T19:17:17Z`.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Format a time as RFC 3339 UTC with millisecond precision.
pub(crate) fn rfc3339_millis(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// Parse an RFC 3339 timestamp (as GitHub sends, e.g. `2024-01-02T03:04:05Z`).
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(s.trim()).ok()
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis() as u64
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
}
