//! The `--usage-output-file` JSON the Copilot CLI writes at exit, and per-turn deltas.
//!
//! The file's token figures are cumulative for the whole session (restored on `--resume`), so a
//! [`UsageTracker`] keeps the last totals per session and reports the difference. A missing or
//! unreadable file is reported as zero usage *flagged unavailable*, never guessed.

use std::io::Read;
use std::path::Path;

use std::collections::HashMap;

use serde::Deserialize;

use crate::agent::loose::{Loose, Num};
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

/// Parse the usage file's JSON text. Figures are read leniently ([`Num`]: floats and numeric
/// strings count, anything else is 0, huge values are clamped), so one odd figure never makes the
/// whole file unavailable.
pub fn parse_usage(text: &str) -> Result<UsageTotals, String> {
    let file: Loose<UsageFile> =
        serde_json::from_str(text).map_err(|e| format!("usage file is not JSON: {e}"))?;
    let no_metrics = || "usage file has no modelMetrics object".to_string();
    let file = file.as_obj().ok_or_else(no_metrics)?;
    let metrics = file.model_metrics.as_obj().ok_or_else(no_metrics)?;
    let mut tokens = TokenUsage::default();
    for u in metrics.values().filter_map(|m| m.as_obj()?.usage.as_obj()) {
        tokens.add(&TokenUsage {
            input_tokens: u.input_tokens.count(),
            output_tokens: u.output_tokens.count(),
            cache_read_input_tokens: u.cache_read_tokens.count(),
            cache_creation_input_tokens: u.cache_write_tokens.count(),
        });
    }
    Ok(UsageTotals {
        tokens,
        premium_request_cost: file.total_premium_request_cost.cost().unwrap_or(0.0),
        user_requests: file.total_user_requests.count(),
    })
}

/// The parts of the usage file Baton reads.
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase", bound(deserialize = "'de: 'a"))]
struct UsageFile<'a> {
    model_metrics: Loose<'a, HashMap<String, Loose<'a, ModelMetrics<'a>>>>,
    total_premium_request_cost: Num<'a>,
    total_user_requests: Num<'a>,
}

/// `modelMetrics.<model>`.
#[derive(Default, Deserialize)]
#[serde(default, bound(deserialize = "'de: 'a"))]
struct ModelMetrics<'a> {
    usage: Loose<'a, ModelUsage<'a>>,
}

/// `modelMetrics.<model>.usage`: session-cumulative token counts.
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase", bound(deserialize = "'de: 'a"))]
struct ModelUsage<'a> {
    input_tokens: Num<'a>,
    output_tokens: Num<'a>,
    cache_read_tokens: Num<'a>,
    cache_write_tokens: Num<'a>,
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
    fn hostile_usage_figures_are_read_leniently_and_clamped() {
        // Floats and numeric strings count; a number too big for a float does not make the file
        // unreadable; huge figures are clamped; negative, NaN and non-numbers are 0.
        let t = parse_usage(
            r#"{"modelMetrics":{"a":{"usage":{"inputTokens":12.9,"outputTokens":"34","cacheReadTokens":1e400,"cacheWriteTokens":"NaN"}},
                "b":{"usage":{"inputTokens":"-3","outputTokens":[1]}},"c":{"usage":5},"d":7},
                "totalPremiumRequestCost":"1e400","totalUserRequests":"2"}"#,
        )
        .unwrap();
        assert_eq!(
            t.tokens,
            TokenUsage {
                input_tokens: 12,
                output_tokens: 34,
                cache_read_input_tokens: crate::agent::loose::MAX_COUNT,
                cache_creation_input_tokens: 0,
            }
        );
        assert_eq!(t.premium_request_cost, crate::agent::loose::MAX_COST_USD);
        assert_eq!(t.user_requests, 2);
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
