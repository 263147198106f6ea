//! Per-issue budgets: an issue's lifetime [`IssueSpend`] against the policy's [`Budget`], checked
//! after every turn, before every dispatch and, for parked issues, on every reload. A limit is
//! *reached* when the spend is at or over it: no turn starts after the one that reaches it.

use super::state::IssueSpend;

/// Per-issue lifetime spend limits (`agent.max_*_per_issue`; `None`: unlimited): an issue over
/// one is parked. The API shows it as is (`budget` in `/api/v1/state`).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Budget {
    /// Agent-reported US dollars (Claude's `total_cost_usd`; Copilot reports none).
    pub max_cost_usd_per_issue: Option<f64>,
    /// Tokens of every kind: input, output, cache reads and cache writes.
    pub max_tokens_per_issue: Option<u64>,
    /// Agent turns (completed or failed), across runs.
    pub max_turns_per_issue: Option<u32>,
}

/// Spend and totals stop growing here (USD): finite, so never `+Inf` in the API, a metric or
/// `state.json`, and a restart reads back what was written.
pub const MAX_COST_USD: f64 = 1e12;

/// `total + delta` (both finite and non-negative), clamped to [`MAX_COST_USD`]: a cost never
/// decreases and never overflows.
pub fn add_cost(total: f64, delta: f64) -> f64 {
    (total + delta).min(MAX_COST_USD)
}

/// The first limit `spend` has reached, as the park reason (`budget exceeded: cost $0.31 >
/// $0.25`, `… tokens 120000 > 100000`, `… turns 5 >= 5`); `None` while every limit has room.
pub fn violation(budget: &Budget, spend: &IssueSpend) -> Option<String> {
    let cmp = |over: bool| if over { ">" } else { ">=" };
    let (cost, tokens, turns) = (spend.cost_usd, spend.tokens.total_tokens, spend.turns);
    let over_cost = budget.max_cost_usd_per_issue.filter(|&max| cost >= max);
    let over_tokens = budget.max_tokens_per_issue.filter(|&max| tokens >= max);
    let over_turns = budget.max_turns_per_issue.filter(|&max| turns >= max);
    let what = over_cost
        .map(|max| format!("cost ${} {} ${}", usd(cost), cmp(cost > max), usd(max)))
        .or_else(|| over_tokens.map(|max| format!("tokens {tokens} {} {max}", cmp(tokens > max))))
        .or_else(|| over_turns.map(|max| format!("turns {turns} {} {max}", cmp(turns > max))))?;
    Some(format!("budget exceeded: {what}"))
}

/// Dollars with at least two and at most four decimals (`0.31`, `0.3125`, `12.00`).
pub fn usd(v: f64) -> String {
    let four = format!("{v:.4}");
    let trimmed = four.trim_end_matches('0');
    let decimals = trimmed.split_once('.').map_or(0, |(_, d)| d.len());
    if decimals < 2 {
        format!("{v:.2}")
    } else {
        trimmed.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_keep_two_to_four_decimals() {
        let cases = [
            (0.31, "0.31"),
            (0.25, "0.25"),
            (0.3125, "0.3125"),
            (0.123456, "0.1235"),
            (12.0, "12.00"),
            (0.5, "0.50"),
        ];
        for (dollars, text) in cases {
            assert_eq!(usd(dollars), text, "{dollars}");
        }
    }

    #[test]
    fn the_first_reached_limit_is_named() {
        let mut spend = IssueSpend {
            cost_usd: 0.31,
            turns: 3,
            ..IssueSpend::default()
        };
        spend.tokens.total_tokens = 500;
        let (cost, tokens, turns) = (Some(0.25), Some(500), Some(3));
        let cases = [
            (Budget::default(), None),
            (
                Budget {
                    max_cost_usd_per_issue: cost,
                    max_tokens_per_issue: tokens,
                    max_turns_per_issue: turns,
                },
                Some("budget exceeded: cost $0.31 > $0.25"),
            ),
            (
                Budget {
                    max_tokens_per_issue: tokens,
                    ..Budget::default()
                },
                Some("budget exceeded: tokens 500 >= 500"),
            ),
            (
                Budget {
                    max_turns_per_issue: turns,
                    ..Budget::default()
                },
                Some("budget exceeded: turns 3 >= 3"),
            ),
            (
                Budget {
                    max_cost_usd_per_issue: Some(1.0),
                    max_tokens_per_issue: Some(501),
                    max_turns_per_issue: Some(4),
                },
                None,
            ),
        ];
        for (budget, want) in cases {
            assert_eq!(violation(&budget, &spend).as_deref(), want, "{budget:?}");
        }
    }
}
