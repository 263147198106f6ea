//! Health decisions for `GET /livez` (the main loop answered within [`LIVEZ_DEADLINE`]) and
//! `GET /readyz` ([`readyz`]), as pure functions over plain facts and an explicit `now`.

use std::time::{Duration, Instant};

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
