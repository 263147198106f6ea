//! What the main loop and the tracker thread publish for the HTTP thread: the live
//! [`MetricsSnapshot`] and the facts `/readyz` decides from ([`readyz`], a pure function over
//! them and an explicit `now`). Shared state, not a control request: `/metrics` and `/readyz`
//! must answer even when the main loop is wedged, and a scrape must never queue behind a burst
//! of agent events. Each side holds a lock only to copy a few fields. `/livez` asks the loop
//! itself, within [`LIVEZ_DEADLINE`].

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use super::metrics::MetricsSnapshot;

/// Metrics and health facts shared between the main loop, the tracker thread and HTTP
/// (`Default`: zero counters, not ready: `starting`).
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

    pub fn readyz(&self, now: Instant) -> Result<(), NotReady> {
        readyz(&self.health(), now)
    }
}

/// How long the main loop has to answer a liveness request.
pub const LIVEZ_DEADLINE: Duration = Duration::from_secs(2);

/// The shortest staleness window of `/readyz`.
pub const READY_MIN_WINDOW: Duration = Duration::from_secs(60);

/// Poll error classes that will not heal by retrying: a rejected or missing token, a missing
/// project, an unsupported tracker, an invalid workflow or config. Other classes (5xx, network,
/// rate limits, odd payloads, and unknown classes) are transient.
pub const NON_TRANSIENT_CLASSES: &[&str] = &[
    "github_auth",
    "missing_tracker_token",
    "missing_tracker_project",
    "unsupported_tracker_kind",
    "invalid_config",
    "missing_workflow_file",
    "workflow_parse_error",
    "workflow_front_matter_not_a_map",
    "workflow_too_large",
    "template_parse_error",
];

/// Whether a poll error class may heal by itself (see [`NON_TRANSIENT_CLASSES`]).
pub fn is_transient_class(class: &str) -> bool {
    !NON_TRANSIENT_CLASSES.contains(&class)
}

/// Why the main loop is not live: no answer within the deadline, or it is gone (channel closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotLive {
    Timeout,
    Gone,
}

/// The facts `/readyz` decides from, published by the main loop and the tracker thread.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthFacts {
    /// Startup recovery (durable state, orphan cleanup) has finished.
    pub recovery_done: bool,
    pub shutting_down: bool,
    /// `polling.interval_ms`.
    pub polling_interval: Duration,
    pub last_success: Option<Instant>,
    /// The error class of the last poll if it failed; `None` if it succeeded or none ran.
    pub last_failure_class: Option<&'static str>,
    /// Why the last WORKFLOW.md reload was rejected (the previous config is in force).
    pub reload_error: Option<String>,
    /// A tracker thread that has not finished its job within the liveness bound (`/livez` 503).
    pub stuck_thread: Option<&'static str>,
}

/// Why the daemon is not ready (`/readyz` answers 503 with [`NotReady::to_json`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReady {
    Starting,
    /// No poll has finished yet (before the first success, a failed poll reports
    /// [`NotReady::TrackerFailing`] instead).
    NeverPolled,
    /// Polls fail with this class (non-transient, or for longer than the staleness window).
    TrackerFailing {
        class: String,
    },
    /// No poll succeeded within the window, and the last poll did not fail (polls stopped).
    Stale {
        seconds: u64,
    },
    ShuttingDown,
    /// The last WORKFLOW.md edit was rejected: the previous config is in force.
    ReloadFailed {
        message: String,
    },
}

impl NotReady {
    /// The 503 body: `{"ready":false,"reason":…,"message":…}` (`reason` is the stable
    /// machine-readable code) plus `"class"` when failing.
    pub fn to_json(&self) -> String {
        let (reason, message) = match self {
            NotReady::Starting => ("starting", "startup recovery is not done".into()),
            NotReady::NeverPolled => ("never_polled", "never polled".into()),
            NotReady::TrackerFailing { class } => (
                "tracker_failing",
                format!("tracker failing with class {class}"),
            ),
            NotReady::Stale { seconds } => {
                ("poll_stale", format!("no successful poll for {seconds} s"))
            }
            NotReady::ShuttingDown => ("shutting_down", "shutting down".into()),
            NotReady::ReloadFailed { message } => (
                "reload_failed",
                format!("WORKFLOW.md reload rejected; the previous config is in force: {message}"),
            ),
        };
        let mut body = serde_json::json!({ "ready": false, "reason": reason, "message": message });
        if let NotReady::TrackerFailing { class } = self {
            body["class"] = serde_json::Value::from(class.as_str());
        }
        body.to_string()
    }
}

pub const READY_JSON: &str = r#"{"ready":true}"#;

/// The staleness window: `max(3 × polling interval, 60 s)`, saturating.
pub fn ready_window(polling_interval: Duration) -> Duration {
    polling_interval.saturating_mul(3).max(READY_MIN_WINDOW)
}

/// The readyz decision at `now`: startup recovery is done and a poll has succeeded; 503 when the
/// *last* poll failed with a non-transient class, or when no poll succeeded within
/// [`ready_window`] whatever the class.
pub fn readyz(inputs: &HealthFacts, now: Instant) -> Result<(), NotReady> {
    if inputs.shutting_down {
        return Err(NotReady::ShuttingDown);
    }
    if !inputs.recovery_done {
        return Err(NotReady::Starting);
    }
    if let Some(message) = &inputs.reload_error {
        return Err(NotReady::ReloadFailed {
            message: message.clone(),
        });
    }
    let failing = |class: &str| NotReady::TrackerFailing {
        class: class.to_string(),
    };
    if let Some(class) = inputs.last_failure_class {
        if !is_transient_class(class) {
            return Err(failing(class));
        }
    }
    let Some(last_success) = inputs.last_success else {
        return Err(inputs
            .last_failure_class
            .map_or(NotReady::NeverPolled, failing));
    };
    let age = now.saturating_duration_since(last_success);
    if age > ready_window(inputs.polling_interval) {
        return Err(match inputs.last_failure_class {
            Some(class) => failing(class),
            None => NotReady::Stale {
                seconds: age.as_secs(),
            },
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_follows_recorded_polls() {
        let ops = OpsShared::default();
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
