//! The `--usage-output-file` JSON the Copilot CLI writes at exit, and per-turn deltas.
//!
//! The file's token figures are cumulative for the whole session (restored on `--resume`), so a
//! [`UsageTracker`] keeps the last totals per session and reports the difference. A missing or
//! unreadable file is reported as zero usage *flagged unavailable*, never guessed.

use std::io::Read;
use std::path::Path;

use serde_json::Value;

use crate::agent::TokenUsage;

/// The usage file is small (a few KB); anything above this is refused as unreasonable.
pub const MAX_USAGE_FILE_BYTES: u64 = 1024 * 1024;

/// Session-cumulative totals read from one usage file.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct UsageTotals {
    /// Summed over `modelMetrics.*.usage`: input, output, cache read, cache write tokens.
    pub tokens: TokenUsage,
    /// `totalPremiumRequestCost` (0 in BYOK mode; not USD).
    pub premium_request_cost: f64,
    /// `totalUserRequests`.
    pub user_requests: u64,
}

/// One turn's usage as Baton reports it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TurnUsage {
    /// Tokens used by this turn (delta; zero when unavailable).
    pub delta: TokenUsage,
    /// False when the CLI gave no usable figures for this turn (then `delta` is all zero).
    pub available: bool,
    /// Session-cumulative totals after this turn, when available.
    pub totals: Option<UsageTotals>,
}

/// Parse the usage file's JSON text.
pub fn parse_usage(text: &str) -> Result<UsageTotals, String> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| format!("usage file is not JSON: {e}"))?;
    let metrics = v
        .get("modelMetrics")
        .and_then(Value::as_object)
        .ok_or_else(|| "usage file has no modelMetrics object".to_string())?;
    let mut tokens = TokenUsage::default();
    for (_model, m) in metrics {
        let Some(u) = m.get("usage") else { continue };
        let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
        tokens.input_tokens = tokens.input_tokens.saturating_add(n("inputTokens"));
        tokens.output_tokens = tokens.output_tokens.saturating_add(n("outputTokens"));
        tokens.cache_read_input_tokens = tokens
            .cache_read_input_tokens
            .saturating_add(n("cacheReadTokens"));
        tokens.cache_creation_input_tokens = tokens
            .cache_creation_input_tokens
            .saturating_add(n("cacheWriteTokens"));
    }
    Ok(UsageTotals {
        tokens,
        premium_request_cost: v
            .get("totalPremiumRequestCost")
            .and_then(Value::as_f64)
            .unwrap_or(0.0),
        user_requests: v
            .get("totalUserRequests")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    })
}

/// Read and parse a usage file (bounded size).
pub fn read_usage_file(path: &Path) -> Result<UsageTotals, String> {
    let f = std::fs::File::open(path)
        .map_err(|e| format!("usage file {} unreadable: {e}", path.display()))?;
    let mut text = String::new();
    f.take(MAX_USAGE_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("usage file {} unreadable: {e}", path.display()))?;
    if text.len() as u64 > MAX_USAGE_FILE_BYTES {
        return Err(format!("usage file {} is too large", path.display()));
    }
    parse_usage(&text)
}

/// Turns cumulative session totals into per-turn deltas.
#[derive(Debug, Clone, Default)]
pub struct UsageTracker {
    last: Option<UsageTotals>,
}

impl UsageTracker {
    /// A tracker for a new session (nothing reported yet).
    pub fn new() -> Self {
        Self::default()
    }

    /// A tracker for a session that had already reported `tokens` (a resumed one), or a new one.
    pub fn starting_at(tokens: Option<TokenUsage>) -> Self {
        UsageTracker {
            last: tokens.map(|tokens| UsageTotals {
                tokens,
                ..UsageTotals::default()
            }),
        }
    }

    /// Forget the totals (the session was replaced by a new one).
    pub fn reset(&mut self) {
        self.last = None;
    }

    /// Record this turn's reading. `Err` (no file, bad JSON) ⇒ zero delta flagged unavailable and
    /// the previous totals are kept. A figure lower than before is taken as a counter reset (the
    /// new value is the delta), never as a negative.
    pub fn record(&mut self, reading: Result<UsageTotals, String>) -> TurnUsage {
        let Ok(now) = reading else {
            return TurnUsage::default();
        };
        let prev = self.last.map(|t| t.tokens).unwrap_or_default();
        let d = |cur: u64, old: u64| if cur >= old { cur - old } else { cur };
        let delta = TokenUsage {
            input_tokens: d(now.tokens.input_tokens, prev.input_tokens),
            output_tokens: d(now.tokens.output_tokens, prev.output_tokens),
            cache_read_input_tokens: d(
                now.tokens.cache_read_input_tokens,
                prev.cache_read_input_tokens,
            ),
            cache_creation_input_tokens: d(
                now.tokens.cache_creation_input_tokens,
                prev.cache_creation_input_tokens,
            ),
        };
        self.last = Some(now);
        TurnUsage {
            delta,
            available: true,
            totals: Some(now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(i: u64, o: u64) -> UsageTotals {
        UsageTotals {
            tokens: TokenUsage {
                input_tokens: i,
                output_tokens: o,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn cumulative_totals_become_deltas() {
        let mut t = UsageTracker::new();
        let a = t.record(Ok(totals(1234, 56)));
        assert!(a.available);
        assert_eq!((a.delta.input_tokens, a.delta.output_tokens), (1234, 56));
        let b = t.record(Ok(totals(2468, 112)));
        assert_eq!((b.delta.input_tokens, b.delta.output_tokens), (1234, 56));
    }

    #[test]
    fn missing_reading_is_zero_and_flagged_and_keeps_baseline() {
        let mut t = UsageTracker::new();
        t.record(Ok(totals(1000, 10)));
        let miss = t.record(Err("no file".into()));
        assert!(!miss.available);
        assert_eq!(miss.delta, TokenUsage::default());
        let next = t.record(Ok(totals(3000, 30)));
        assert_eq!(
            (next.delta.input_tokens, next.delta.output_tokens),
            (2000, 20)
        );
    }

    #[test]
    fn decrease_is_a_reset_not_negative() {
        let mut t = UsageTracker::new();
        t.record(Ok(totals(5000, 50)));
        let r = t.record(Ok(totals(100, 1)));
        assert_eq!((r.delta.input_tokens, r.delta.output_tokens), (100, 1));
    }

    #[test]
    fn bad_usage_json_is_an_error() {
        assert!(parse_usage("").is_err());
        assert!(parse_usage("[]").is_err());
        assert!(parse_usage("{\"modelMetrics\":5}").is_err());
        // Wrong-typed figures count as zero rather than failing the turn.
        let t = parse_usage(
            r#"{"modelMetrics":{"m":{"usage":{"inputTokens":"x","outputTokens":-1}}}}"#,
        )
        .unwrap();
        assert_eq!(t.tokens, TokenUsage::default());
    }

    #[test]
    fn sums_over_models() {
        let t = parse_usage(
            r#"{"modelMetrics":{"a":{"usage":{"inputTokens":1,"outputTokens":2,"cacheReadTokens":3,"cacheWriteTokens":4}},
                "b":{"usage":{"inputTokens":10,"outputTokens":20}}},"totalUserRequests":2}"#,
        )
        .unwrap();
        assert_eq!(t.tokens.input_tokens, 11);
        assert_eq!(t.tokens.output_tokens, 22);
        assert_eq!(t.tokens.cache_read_input_tokens, 3);
        assert_eq!(t.tokens.cache_creation_input_tokens, 4);
        assert_eq!(t.user_requests, 2);
    }
}
