//! The tracker request gate: the one place that decides when the next tracker request may go
//! out. Every tracker operation (the board read, the running-issue refresh, a retry's fetch)
//! reports how its calls ended ([`CallOutcome`]); the gate keeps the latest rate-limit pause from
//! any of them, an exponential back-off after rejected credentials, and the spacing of
//! operator-triggered polls (refresh API, webhooks). The engine asks [`RequestGate::allowed_at`]
//! before it starts a poll or a retry fetch. Pure: times are orchestrator-clock milliseconds
//! passed in by the caller.

use serde::{Deserialize, Serialize};

use crate::timefmt::unix_millis;
use crate::tracker::{TrackerError, TrackerErrorKind};

use super::state::Millis;

/// Shortest spacing between the starts of two refresh-triggered polls.
pub const REFRESH_MIN_SPACING_MS: Millis = 1_000;

/// The longest rate-limit pause the gate honours (the tracker clamps its headers the same way).
pub const MAX_PAUSE_MS: Millis = 3_600_000;

/// Pause after a rate limit that named no retry time (GitHub: "at least one minute").
pub const DEFAULT_PAUSE_MS: Millis = 60_000;

/// First back-off after rejected credentials; doubles per consecutive rejection …
pub const AUTH_BACKOFF_BASE_MS: Millis = 60_000;

/// … up to this.
pub const AUTH_BACKOFF_MAX_MS: Millis = 600_000;

/// How one tracker call ended, as far as the request budget is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// The call succeeded (credentials work).
    Ok,
    /// The tracker said to slow down; `retry_at` is when it may succeed (`None`: unknown).
    RateLimited {
        /// Orchestrator-clock time named by the tracker.
        retry_at: Option<Millis>,
    },
    /// The credentials were rejected (`github_auth`).
    AuthRejected,
    /// Any other failure (transport, status, payload): no effect on the budget.
    Failed,
}

impl CallOutcome {
    /// The outcome of a tracker call's result.
    pub fn of<T>(result: &Result<T, TrackerError>) -> Self {
        match result {
            Ok(_) => CallOutcome::Ok,
            Err(e) => Self::of_error(e),
        }
    }

    /// The outcome of a failed tracker call.
    pub fn of_error(e: &TrackerError) -> Self {
        match e.kind {
            TrackerErrorKind::RateLimited => CallOutcome::RateLimited {
                retry_at: e.retry_at.map(unix_millis),
            },
            TrackerErrorKind::Auth => CallOutcome::AuthRejected,
            _ => CallOutcome::Failed,
        }
    }

    /// True when the rest of an operation should not send another request.
    pub fn stops_operation(self) -> bool {
        matches!(
            self,
            CallOutcome::RateLimited { .. } | CallOutcome::AuthRejected
        )
    }
}

/// The gate's state (part of the poll bookkeeping).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestGate {
    /// Rate-limit pause: no tracker request before this. Only a later pause moves it; a
    /// successful call never clears it (another operation may have hit the limit).
    pub paused_until: Option<Millis>,
    /// Consecutive calls that ended with rejected credentials.
    pub auth_failures: u32,
    /// Credential back-off: no tracker request before this.
    pub auth_until: Option<Millis>,
    /// How long the last poll took (widens the refresh spacing for a slow tracker).
    pub last_poll_ms: Millis,
}

impl RequestGate {
    /// The earliest time any tracker request may start (0: no restriction).
    pub fn allowed_at(&self) -> Millis {
        self.paused_until
            .unwrap_or(0)
            .max(self.auth_until.unwrap_or(0))
    }

    /// True while requests must wait.
    pub fn blocks(&self, now: Millis) -> bool {
        now < self.allowed_at()
    }

    /// When a refresh-triggered poll may start: at most one per `max(1 s, last poll duration)`
    /// after the previous start, and never inside a pause.
    pub fn refresh_due(&self, last_started_at: Option<Millis>, now: Millis) -> Millis {
        let spacing = REFRESH_MIN_SPACING_MS.max(self.last_poll_ms);
        let spaced = last_started_at.map_or(0, |t| t.saturating_add(spacing));
        now.max(spaced).max(self.allowed_at())
    }

    /// Record how a call ended at `now`.
    pub fn note(&mut self, outcome: CallOutcome, now: Millis) {
        match outcome {
            CallOutcome::Ok => {
                // Working credentials end the back-off; a rate-limit pause stays.
                self.auth_failures = 0;
                self.auth_until = None;
            }
            CallOutcome::RateLimited { retry_at } => {
                let latest = now.saturating_add(MAX_PAUSE_MS);
                let until = retry_at
                    .unwrap_or(now.saturating_add(DEFAULT_PAUSE_MS))
                    .clamp(now, latest);
                self.paused_until = Some(self.paused_until.map_or(until, |p| p.max(until)));
            }
            CallOutcome::AuthRejected => {
                self.auth_failures = self.auth_failures.saturating_add(1);
                let shift = self.auth_failures.saturating_sub(1).min(16);
                let wait = AUTH_BACKOFF_BASE_MS
                    .saturating_mul(1u64 << shift)
                    .min(AUTH_BACKOFF_MAX_MS);
                self.auth_until = Some(now.saturating_add(wait));
            }
            CallOutcome::Failed => {}
        }
    }

    /// Forget the credential back-off (a reload may have fixed the token).
    pub fn end_auth_backoff(&mut self) {
        self.auth_failures = 0;
        self.auth_until = None;
    }

    /// Record every outcome of one operation.
    pub fn note_all(&mut self, outcomes: &[CallOutcome], now: Millis) {
        for o in outcomes {
            self.note(*o, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_does_not_clear_a_pause_and_pauses_only_grow() {
        let mut g = RequestGate::default();
        g.note(
            CallOutcome::RateLimited {
                retry_at: Some(90_000),
            },
            1_000,
        );
        g.note(CallOutcome::Ok, 1_010);
        assert_eq!(g.allowed_at(), 90_000);
        g.note(
            CallOutcome::RateLimited {
                retry_at: Some(5_000),
            },
            1_020,
        );
        assert_eq!(g.allowed_at(), 90_000, "an earlier retry_at never shortens");
        assert!(g.blocks(89_999) && !g.blocks(90_000));
    }

    #[test]
    fn pauses_are_clamped_to_an_hour_and_never_in_the_past() {
        let mut g = RequestGate::default();
        g.note(
            CallOutcome::RateLimited {
                retry_at: Some(u64::MAX),
            },
            u64::MAX - 5,
        );
        assert_eq!(g.allowed_at(), u64::MAX);
        let mut g = RequestGate::default();
        g.note(
            CallOutcome::RateLimited {
                retry_at: Some(300_000_000_000_000),
            },
            1_000,
        );
        assert_eq!(g.allowed_at(), 1_000 + MAX_PAUSE_MS);
        let mut g = RequestGate::default();
        g.note(CallOutcome::RateLimited { retry_at: Some(3) }, 1_000);
        assert_eq!(g.allowed_at(), 1_000);
        g.note(CallOutcome::RateLimited { retry_at: None }, 1_000);
        assert_eq!(g.allowed_at(), 1_000 + DEFAULT_PAUSE_MS);
    }

    #[test]
    fn rejected_credentials_back_off_exponentially_up_to_ten_minutes() {
        let mut g = RequestGate::default();
        let mut waits = Vec::new();
        for _ in 0..6 {
            g.note(CallOutcome::AuthRejected, 0);
            waits.push(g.allowed_at());
        }
        assert_eq!(waits, [60_000, 120_000, 240_000, 480_000, 600_000, 600_000]);
        g.note(CallOutcome::Ok, 10);
        assert_eq!(g.allowed_at(), 0);
        for _ in 0..100 {
            g.note(CallOutcome::AuthRejected, 0);
        }
        assert_eq!(g.allowed_at(), AUTH_BACKOFF_MAX_MS);
    }

    #[test]
    fn refresh_spacing_is_one_second_or_the_last_poll_duration() {
        let mut g = RequestGate::default();
        assert_eq!(g.refresh_due(None, 5), 5);
        assert_eq!(g.refresh_due(Some(1_000), 1_200), 2_000);
        assert_eq!(g.refresh_due(Some(1_000), 3_000), 3_000);
        g.last_poll_ms = 4_000;
        assert_eq!(g.refresh_due(Some(1_000), 1_200), 5_000);
        g.note(
            CallOutcome::RateLimited {
                retry_at: Some(9_000),
            },
            1_200,
        );
        assert_eq!(g.refresh_due(Some(1_000), 1_200), 9_000);
    }
}
