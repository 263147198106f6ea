//! What the main loop and the tracker thread publish for the HTTP thread: the live
//! [`MetricsSnapshot`] and the facts `/readyz` decides from. Shared state, not a control request:
//! `/metrics` and `/readyz` must answer even when the main loop is wedged, and a scrape must never
//! queue behind a burst of agent events. Each side holds a lock only to copy a few fields.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use super::health::{readyz, HealthFacts, NotReady};
use super::metrics::{render, MetricsSnapshot};

/// Metrics and health facts shared between the main loop, the tracker thread and HTTP.
#[derive(Debug, Default)]
pub struct OpsShared {
    metrics: Mutex<MetricsSnapshot>,
    health: Mutex<HealthFacts>,
}

/// Lock, recovering from a poisoned mutex (the data is plain counters).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl OpsShared {
    /// Zero counters, not ready (`starting`).
    pub fn new() -> Self {
        Self::default()
    }

    pub fn metrics(&self) -> MetricsSnapshot {
        lock(&self.metrics).clone()
    }

    /// Change the metrics in place (keep `f` short: the other side waits for the lock).
    pub fn update_metrics(&self, f: impl FnOnce(&mut MetricsSnapshot)) {
        f(&mut lock(&self.metrics));
    }

    pub fn health(&self) -> HealthFacts {
        lock(&self.health).clone()
    }

    /// Change the health facts in place (keep `f` short, as for the metrics).
    pub fn update_health(&self, f: impl FnOnce(&mut HealthFacts)) {
        f(&mut lock(&self.health));
    }

    /// Record one finished poll: counters, duration, points, and the readiness facts.
    /// `error_class` is `None` for a success.
    pub fn record_poll(
        &self,
        took: Duration,
        error_class: Option<&'static str>,
        points: Option<u64>,
        at: SystemTime,
        now: Instant,
    ) {
        self.update_metrics(|m| {
            m.record_poll(took, error_class, at);
            if let Some(p) = points {
                m.last_poll_points = Some(p);
                m.points_total = m.points_total.saturating_add(p);
            }
        });
        self.update_health(|h| {
            h.last_failure_class = error_class;
            if error_class.is_none() {
                h.last_success = Some(now);
            }
        });
    }

    pub fn render_metrics(&self) -> String {
        render(&self.metrics())
    }

    pub fn readyz(&self, now: Instant) -> Result<(), NotReady> {
        readyz(&self.health(), now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_follows_recorded_polls() {
        let ops = OpsShared::new();
        let t0 = Instant::now();
        assert_eq!(ops.readyz(t0), Err(NotReady::Starting));
        ops.update_health(|h| {
            h.recovery_done = true;
            h.polling_interval = Duration::from_secs(30);
        });
        assert_eq!(ops.readyz(t0), Err(NotReady::NeverPolled));
        ops.record_poll(
            Duration::from_millis(5),
            None,
            Some(3),
            SystemTime::now(),
            t0,
        );
        assert_eq!(ops.readyz(t0), Ok(()));
        ops.record_poll(
            Duration::from_millis(5),
            Some("github_auth"),
            None,
            SystemTime::now(),
            t0,
        );
        assert!(matches!(
            ops.readyz(t0),
            Err(NotReady::TrackerFailing { .. })
        ));
        let m = ops.metrics();
        assert_eq!(m.polls, 2);
        assert_eq!(m.points_total, 3);
        assert_eq!(m.poll_errors.get("github_auth"), Some(&1));
    }
}
