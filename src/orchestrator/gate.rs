//! The tracker request gate, the one place that decides when the next tracker request may go out:
//! every tracker operation reports how its calls ended ([`CallOutcome`]); the gate keeps the latest
//! rate-limit pause from any of them, the back-off after rejected credentials and the spacing of
//! operator-triggered polls. [`Pace`] keeps the budget: what polls and fetch batches cost, and the
//! [`Plan`] that keeps the projected points per hour within `tracker.budget_share` of the
//! tracker's hourly limit.

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
/// Shortest spacing between the starts of two by-id fetch batches (between-turn refreshes and
/// retry fetches share one batch per slot).
pub const FETCH_MIN_SPACING_MS: Millis = 1_000;
/// Non-poll spend is measured over a sliding window of this length.
pub const SPEND_WINDOW_MS: Millis = 600_000;
const HOUR_MS: u64 = 3_600_000;
/// The plan aims this much below the target, so that what the measurement lags behind (the
/// polls before the first cost is known, a sliding window catching up) stays within it.
const HEADROOM_PERCENT: u64 = 5;
/// The shortest time the first window's spend is extrapolated from (a burst at startup is not
/// an hourly rate).
const MIN_EXTRAPOLATION_MS: Millis = 60_000;

/// The operations whose point cost the tracker threads report (`Event::TrackerSpent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrackerOp {
    /// A poll (board read plus the running-issue refresh).
    Poll,
    /// A by-id fetch batch (between-turn refreshes and due retries); its report frees the slot.
    Fetch,
}

/// The budget plan in force: how often Baton polls and fetches, and what that projects to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Effective poll interval: `polling.interval_ms`, stretched to fit the budget.
    pub poll_interval_ms: Millis,
    /// Points per hour fetch batches may use (`None`: no budget).
    pub fetch_per_hour: Option<u64>,
    /// Points per hour Baton aims to stay within (`None`: the tracker reports no budget).
    pub target_per_hour: Option<u64>,
    /// Points per hour this plan projects (`None`: no budget, or nothing measured yet).
    pub projected_per_hour: Option<u64>,
}

/// What polls and fetch batches cost, and the fetch batch slot. Measured, not stored: a restart
/// measures again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pace {
    /// Points the last poll cost (`None` before one reported any).
    pub poll_points: Option<u64>,
    /// Non-poll points spent in the window before the current one and in the current one.
    spent: [u64; 2],
    /// The first window's start and the current window's index (`None`: nothing spent yet).
    window: Option<(Millis, u64)>,
    /// A fetch batch is out at a tracker thread.
    pub fetch_in_flight: bool,
    /// When the last fetch batch started.
    pub fetch_started_at: Option<Millis>,
    /// How long the last fetch batch took (widens the spacing for a slow tracker).
    pub last_fetch_ms: Millis,
    /// The fetch batches' token bucket: milli-points it held after the last batch, and from when
    /// it refills (`None`: full; later than the batch while a debt is paid). It refills at
    /// `Plan::fetch_per_hour` up to a minute's worth, so a burst of turn ends is served a second
    /// apart while the long-run rate stays within the budget.
    bucket: (u64, Option<Millis>),
    /// Since when workers wait for their between-turn refresh (the runtime keeps their ids).
    pub refresh_wanted_at: Option<Millis>,
    /// The plan in force.
    pub plan: Plan,
    /// The poll interval last logged (`event=poll_interval_stretched`).
    pub logged_interval_ms: Millis,
}

impl Pace {
    /// Record the points one operation cost at `now`; a fetch report also frees the slot.
    pub fn note_spent(&mut self, op: TrackerOp, points: u64, now: Millis) {
        match op {
            // A poll that sent nothing (a preflight failure) says nothing about its cost.
            TrackerOp::Poll if points > 0 => self.poll_points = Some(points),
            TrackerOp::Poll => {}
            TrackerOp::Fetch => {
                self.fetch_in_flight = false;
                if let Some(started) = self.fetch_started_at {
                    self.last_fetch_ms = now.saturating_sub(started);
                }
                self.draw(points, now);
                let (origin, _) = *self.window.get_or_insert((now, 0));
                let (spent, idx) = self.windows(now);
                self.spent = [spent[0], spent[1].saturating_add(points)];
                self.window = Some((origin, idx));
            }
        }
    }

    /// The (previous, current) window counts and the current window's index at `now`.
    fn windows(&self, now: Millis) -> ([u64; 2], u64) {
        let Some((origin, idx)) = self.window else {
            return ([0, 0], 0);
        };
        let at = now.saturating_sub(origin) / SPEND_WINDOW_MS;
        let spent = match at.saturating_sub(idx) {
            0 => self.spent,
            1 => [self.spent[1], 0],
            _ => [0, 0],
        };
        (spent, at.max(idx))
    }

    /// Non-poll points per hour, measured: a sliding-window counter (the previous window weighted
    /// by how much of it the sliding window still covers), the first window extrapolated.
    pub fn other_per_hour(&self, now: Millis) -> u64 {
        let Some((origin, _)) = self.window else {
            return 0;
        };
        let ([prev, cur], idx) = self.windows(now);
        let window_start = origin.saturating_add(idx.saturating_mul(SPEND_WINDOW_MS));
        let into = now.saturating_sub(window_start);
        if idx == 0 {
            return cur.saturating_mul(HOUR_MS) / into.max(MIN_EXTRAPOLATION_MS);
        }
        let prev_part = prev.saturating_mul(SPEND_WINDOW_MS.saturating_sub(into)) / SPEND_WINDOW_MS;
        prev_part.saturating_add(cur).saturating_mul(HOUR_MS) / SPEND_WINDOW_MS
    }

    /// The plan for `polling.interval_ms` = `base_ms`, `tracker.budget_share` = `share` and the
    /// tracker's hourly `limit`. The plan aims [`HEADROOM_PERCENT`] below the target. Fetch
    /// batches may use half of that (their bucket's rate, see [`Pace::fetch_due`]); polls get what the measured non-poll spend leaves of the aim (at
    /// least a quarter of it), and their interval stretches until one poll's measured cost fits
    /// (never below `base_ms`).
    pub fn plan(&self, base_ms: Millis, share: f64, limit: Option<i64>, now: Millis) -> Plan {
        let target = limit
            .filter(|l| *l > 0)
            .map(|l| (l as f64 * share.clamp(0.0, 1.0)) as u64)
            .filter(|t| *t > 0);
        let Some(target) = target else {
            let poll_interval_ms = base_ms;
            return Plan {
                poll_interval_ms,
                ..Plan::default()
            };
        };
        let aim = target.saturating_mul(100 - HEADROOM_PERCENT) / 100;
        let half = (aim / 2).max(1);
        let other = self.other_per_hour(now);
        let poll_budget = aim.saturating_sub(other.min(aim / 4 * 3)).max(1);
        let per_poll = self.poll_points.unwrap_or(0);
        let interval = base_ms
            .max(per_poll.saturating_mul(HOUR_MS).div_ceil(poll_budget))
            .max(1);
        let measured = self.poll_points.is_some() || self.window.is_some();
        Plan {
            poll_interval_ms: interval,
            fetch_per_hour: Some(half),
            target_per_hour: Some(target),
            projected_per_hour: measured
                .then(|| (per_poll.saturating_mul(HOUR_MS) / interval).saturating_add(other)),
        }
    }

    /// A worker waits for its between-turn refresh (the first of a batch tells the loop).
    pub fn want_refresh(&mut self, now: Millis) {
        self.refresh_wanted_at.get_or_insert(now);
    }

    /// Take a batch's `points` from the bucket at `now`. A batch that cost more than the bucket
    /// held leaves a debt: the bucket stays empty until the refill has paid it.
    fn draw(&mut self, points: u64, now: Millis) {
        let (level, cost) = (self.bucket_level(now), points.saturating_mul(1_000));
        let debt_ms = match self.plan.fetch_per_hour {
            Some(rate) if rate > 0 => cost.saturating_sub(level).saturating_mul(3_600) / rate,
            _ => 0,
        };
        let refills_from = now.saturating_add(debt_ms);
        self.bucket = (level.saturating_sub(cost), Some(refills_from));
    }

    /// Milli-points the fetch bucket holds at `now` (full without a budget or a batch yet).
    fn bucket_level(&self, now: Millis) -> u64 {
        let Some(rate) = self.plan.fetch_per_hour else {
            return 0;
        };
        let cap = rate.saturating_mul(1_000) / 60;
        let (level, Some(at)) = self.bucket else {
            return cap;
        };
        let refill = now.saturating_sub(at).saturating_mul(rate) / 3_600;
        level.saturating_add(refill).min(cap)
    }

    /// When the next fetch batch may start: one at a time, at least [`FETCH_MIN_SPACING_MS`] and
    /// the last batch's duration apart, when the bucket holds a point, and never inside a pause
    /// (`allowed_at`); `None` while one is out.
    pub fn fetch_due(&self, allowed_at: Millis) -> Option<Millis> {
        if self.fetch_in_flight {
            return None;
        }
        let floor = FETCH_MIN_SPACING_MS.max(self.last_fetch_ms);
        let spaced = self.fetch_started_at.map_or(0, |t| t.saturating_add(floor));
        // A batch costs at least a point; one that costs more leaves a debt (`draw`).
        let refilled = match (self.plan.fetch_per_hour, self.bucket) {
            (Some(rate), (level, Some(at))) if rate > 0 => {
                let missing = 1_000u64.saturating_sub(level);
                at.saturating_add(missing.saturating_mul(3_600).div_ceil(rate))
            }
            _ => 0,
        };
        Some(spaced.max(refilled).max(allowed_at))
    }

    /// True when `plan` changes the poll interval enough to log (10 %, or to or from `base_ms`).
    pub fn interval_changed(&self, plan: &Plan, base_ms: Millis) -> bool {
        let (old, new) = (self.logged_interval_ms.max(base_ms), plan.poll_interval_ms);
        old != new && (old == base_ms || new == base_ms || old.abs_diff(new) >= old / 10)
    }
}

/// How one tracker call ended, as far as the request budget is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// The call succeeded (credentials work).
    Ok,
    /// The tracker said to slow down; `retry_at` is when it may succeed (`None`: unknown).
    RateLimited { retry_at: Option<Millis> },
    /// The credentials were rejected (`github_auth`).
    AuthRejected,
    /// Any other failure (transport, status, payload): no effect on the budget.
    Failed,
}

impl CallOutcome {
    /// The outcome of a tracker call's result.
    pub fn of<T>(result: &Result<T, TrackerError>) -> Self {
        result
            .as_ref()
            .err()
            .map_or(CallOutcome::Ok, Self::of_error)
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
        matches!(self, Self::RateLimited { .. } | Self::AuthRejected)
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
    /// The budget: measured costs, the plan, the fetch batch slot.
    #[serde(skip)]
    pub pace: Pace,
}

impl RequestGate {
    /// The earliest time any tracker request may start (0: no restriction).
    pub fn allowed_at(&self) -> Millis {
        self.paused_until.max(self.auth_until).unwrap_or(0)
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
            // Working credentials end the back-off; a rate-limit pause stays.
            CallOutcome::Ok => self.end_auth_backoff(),
            CallOutcome::RateLimited { retry_at } => {
                let latest = now.saturating_add(MAX_PAUSE_MS);
                let until = retry_at
                    .unwrap_or(now.saturating_add(DEFAULT_PAUSE_MS))
                    .clamp(now, latest);
                self.paused_until = Some(self.paused_until.map_or(until, |p| p.max(until)));
            }
            CallOutcome::AuthRejected => {
                self.auth_failures = self.auth_failures.saturating_add(1);
                let (base, max) = (AUTH_BACKOFF_BASE_MS, AUTH_BACKOFF_MAX_MS);
                let wait = super::rules::backoff_ms(base, self.auth_failures, max);
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

    /// Recompute the budget plan for `polling.interval_ms` = `base_ms`, `tracker.budget_share` =
    /// `share` and the tracker's hourly `limit`; log `event=poll_interval_stretched` when the
    /// poll interval moves.
    pub fn replan(&mut self, base_ms: Millis, share: f64, limit: Option<i64>, now: Millis) {
        let pace = &mut self.pace;
        let plan = pace.plan(base_ms, share, limit, now);
        if pace.interval_changed(&plan, base_ms) {
            let shown = |v: Option<u64>| v.map_or("unknown".to_string(), |n| n.to_string());
            let (projected, target) = (shown(plan.projected_per_hour), shown(plan.target_per_hour));
            let (points, other) = (shown(pace.poll_points), pace.other_per_hour(now));
            log::info!(
                "event=poll_interval_stretched poll_interval_ms={} configured_interval_ms={base_ms} projected_points_per_hour={projected} target_points_per_hour={target} poll_points={points} other_points_per_hour={other}",
                plan.poll_interval_ms
            );
            pace.logged_interval_ms = plan.poll_interval_ms;
        }
        pace.plan = plan;
    }

    /// The poll interval in force: the plan's, never below `polling.interval_ms` = `base_ms`.
    pub fn poll_interval(&self, base_ms: Millis) -> Millis {
        self.pace.plan.poll_interval_ms.max(base_ms)
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

    /// A pace that measured `poll` points per poll.
    fn measured(poll: Option<u64>) -> Pace {
        Pace {
            poll_points: poll,
            ..Pace::default()
        }
    }

    #[test]
    fn the_poll_interval_stretches_until_one_polls_cost_fits_the_share() {
        // A 1,000-item board: 20 points a poll; 5,000 an hour at 0.5 is 2,500 points, aimed at
        // 2,375 (5 % headroom).
        let plan = measured(Some(20)).plan(5_000, 0.5, Some(5_000), 0);
        assert_eq!(plan.poll_interval_ms, 30_316);
        assert_eq!(
            (plan.target_per_hour, plan.projected_per_hour),
            (Some(2_500), Some(2_374))
        );
        // A cheap board is polled at the configured interval, never faster.
        let plan = measured(Some(1)).plan(5_000, 0.5, Some(5_000), 0);
        assert_eq!(plan.poll_interval_ms, 5_000);
        assert_eq!(plan.projected_per_hour, Some(720));
        // A larger share stretches less.
        let plan = measured(Some(20)).plan(5_000, 1.0, Some(5_000), 0);
        assert_eq!(plan.poll_interval_ms, 15_158);
    }

    #[test]
    fn without_a_budget_or_a_measurement_nothing_stretches() {
        for (pace, limit) in [
            (measured(Some(20)), None),
            (measured(Some(20)), Some(0)),
            (measured(Some(20)), Some(-5)),
            (measured(None), Some(5_000)),
        ] {
            let plan = pace.plan(5_000, 0.5, limit, 0);
            assert_eq!(plan.poll_interval_ms, 5_000, "{pace:?} {limit:?}");
            assert_eq!(plan.projected_per_hour, None);
        }
        let plan = measured(Some(20)).plan(5_000, 0.5, None, 0);
        assert_eq!(plan.fetch_per_hour, None, "batches a second apart");
    }

    #[test]
    fn fetch_batches_draw_half_the_aim_from_a_bucket() {
        let mut pace = measured(Some(1));
        pace.plan = pace.plan(5_000, 0.5, Some(5_000), 0);
        assert_eq!(pace.plan.fetch_per_hour, Some(1_187));
        // A full bucket: batches a second apart, or as far apart as the last one took.
        pace.fetch_started_at = Some(0);
        pace.note_spent(TrackerOp::Fetch, 3, 500);
        assert_eq!(pace.fetch_due(0), Some(1_000));
        pace.fetch_started_at = Some(1_000);
        pace.note_spent(TrackerOp::Fetch, 3, 5_000);
        assert_eq!(pace.fetch_due(0), Some(1_000 + 4_000));
        // 20 points from the 15.3 left: a debt of 4.7 (14.4 s at 1,187 an hour), then a point
        // (3 s) before the next batch.
        pace.note_spent(TrackerOp::Fetch, 20, 5_000);
        let due = pace.fetch_due(0).unwrap();
        assert!((22_000..22_800).contains(&due), "{due}");
        // Never inside a pause.
        assert_eq!(pace.fetch_due(60_000), Some(60_000));
    }

    #[test]
    fn measured_fetch_spend_leaves_the_rest_to_polls() {
        let mut pace = measured(Some(20));
        // 600 points of batches in the first 10 minutes: 3,600 an hour, more than the aim.
        for k in 0..600 {
            pace.fetch_started_at = Some(k * 1_000);
            pace.note_spent(TrackerOp::Fetch, 1, k * 1_000);
        }
        assert_eq!(pace.other_per_hour(599_000), 3_606);
        let plan = pace.plan(5_000, 0.5, Some(5_000), 599_000);
        // Polls keep a quarter of the aim: 2,375 - 1,779 = 596 points, 29.8 polls of 20.
        assert_eq!(plan.poll_interval_ms, 120_806);
        assert_eq!(plan.projected_per_hour, Some(595 + 3_606));
        // Batches within their half leave the rest to polls.
        let mut pace = measured(Some(20));
        for k in 0..200 {
            pace.note_spent(TrackerOp::Fetch, 1, k * 3_000);
        }
        let plan = pace.plan(5_000, 0.5, Some(5_000), 599_000);
        assert_eq!(pace.other_per_hour(599_000), 1_202);
        assert_eq!(plan.projected_per_hour, Some(2_374));
    }

    #[test]
    fn fetch_spend_is_a_sliding_window_and_a_startup_burst_is_no_hourly_rate() {
        let mut pace = Pace::default();
        assert_eq!(pace.other_per_hour(0), 0);
        pace.note_spent(TrackerOp::Fetch, 10, 1_000);
        // 10 points 2 s after the first: extrapolated from a minute, not from 2 s.
        assert_eq!(pace.other_per_hour(3_000), 600);
        assert_eq!(pace.other_per_hour(300_000), 120);
        // Half-way into the next window, half of the previous one still counts.
        assert_eq!(pace.other_per_hour(1_000 + SPEND_WINDOW_MS * 3 / 2), 30);
        pace.note_spent(TrackerOp::Fetch, 6, 1_000 + SPEND_WINDOW_MS * 3 / 2);
        assert_eq!(pace.other_per_hour(1_000 + SPEND_WINDOW_MS * 3 / 2), 66);
        // Two windows later nothing is left.
        assert_eq!(pace.other_per_hour(1_000 + SPEND_WINDOW_MS * 3), 0);
        // Hostile sizes saturate.
        pace.note_spent(TrackerOp::Fetch, u64::MAX, u64::MAX - 1);
        let _ = pace.plan(u64::MAX, 1.0, Some(i64::MAX), u64::MAX);
    }

    #[test]
    fn a_poll_that_sent_nothing_keeps_the_last_measurement() {
        let mut pace = Pace::default();
        pace.note_spent(TrackerOp::Poll, 20, 0);
        pace.note_spent(TrackerOp::Poll, 0, 1);
        assert_eq!(pace.poll_points, Some(20));
        assert_eq!(pace.other_per_hour(1), 0, "polls are not other spend");
    }

    #[test]
    fn interval_changes_are_logged_at_ten_percent_and_to_or_from_the_base() {
        let pace = Pace::default();
        let at = |ms| Plan {
            poll_interval_ms: ms,
            ..Plan::default()
        };
        assert!(!pace.interval_changed(&at(5_000), 5_000));
        assert!(pace.interval_changed(&at(5_200), 5_000));
        let pace = Pace {
            logged_interval_ms: 30_000,
            ..Pace::default()
        };
        assert!(!pace.interval_changed(&at(32_000), 5_000));
        assert!(pace.interval_changed(&at(33_000), 5_000));
        assert!(pace.interval_changed(&at(5_000), 5_000));
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
