//! Health decisions for `GET /livez` and `GET /readyz`, as pure functions over plain inputs and an
//! explicit `now` (tests use a virtual clock), plus the one blocking liveness probe.
//!
//! - **livez**: the main loop answered a control request within [`LIVEZ_DEADLINE`].
//! - **readyz**: startup recovery is done and a poll has succeeded; it turns 503 when the *last*
//!   poll failed with a non-transient class, or when no poll succeeded within
//!   `max(3 × polling interval, 60 s)` whatever the class.

use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Sender};

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

/// Why the main loop is not live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotLive {
    /// No answer within the deadline.
    Timeout,
    /// The main loop is gone (its channel is closed).
    Gone,
}

/// Ask the main loop for a sign of life and wait up to `deadline` for the answer.
///
/// `ask` delivers the reply sender to the main loop (e.g. as a control event); it returns
/// `false` when the loop's channel is closed. The main loop answers by sending `()`.
pub fn probe_livez(
    ask: impl FnOnce(Sender<()>) -> bool,
    deadline: Duration,
) -> Result<(), NotLive> {
    let (reply, answer) = bounded(1);
    if !ask(reply) {
        return Err(NotLive::Gone);
    }
    answer.recv_timeout(deadline).map_err(|e| {
        if e.is_timeout() {
            NotLive::Timeout
        } else {
            NotLive::Gone
        }
    })
}

/// The livez decision from when a request was asked and when (if ever) it was answered.
pub fn livez(asked: Instant, answered: Option<Instant>) -> Result<(), NotLive> {
    match answered {
        Some(at) if at.saturating_duration_since(asked) <= LIVEZ_DEADLINE => Ok(()),
        _ => Err(NotLive::Timeout),
    }
}

/// What `/readyz` decides from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadyInputs<'a> {
    /// Startup recovery (durable state, orphan cleanup) has finished.
    pub recovery_done: bool,
    /// Shutdown has started.
    pub shutting_down: bool,
    /// `polling.interval_ms`.
    pub polling_interval: Duration,
    /// When a poll last succeeded.
    pub last_success: Option<Instant>,
    /// The error class of the last poll if it failed; `None` if it succeeded or none ran.
    pub last_failure_class: Option<&'a str>,
    /// Why the last WORKFLOW.md reload was rejected, if it was.
    pub reload_error: Option<&'a str>,
}

/// Why the daemon is not ready (`/readyz` answers 503 with [`NotReady::to_json`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReady {
    /// Startup recovery is still running.
    Starting,
    /// No poll has finished yet (before the first success, a failed poll reports
    /// [`NotReady::TrackerFailing`] instead).
    NeverPolled,
    /// Polls fail with this class (non-transient, or for longer than the staleness window).
    TrackerFailing {
        /// The error class, e.g. `github_auth`.
        class: String,
    },
    /// No poll succeeded within the window, and the last poll did not fail (polls stopped).
    Stale {
        /// Time since the last success (or since start), whole seconds.
        seconds: u64,
    },
    /// Shutdown has started.
    ShuttingDown,
    /// The last WORKFLOW.md edit was rejected: the previous config is in force.
    ReloadFailed {
        /// The error: file, key and problem.
        message: String,
    },
}

impl NotReady {
    /// The stable machine-readable reason.
    pub fn code(&self) -> &'static str {
        match self {
            NotReady::Starting => "starting",
            NotReady::NeverPolled => "never_polled",
            NotReady::TrackerFailing { .. } => "tracker_failing",
            NotReady::Stale { .. } => "poll_stale",
            NotReady::ShuttingDown => "shutting_down",
            NotReady::ReloadFailed { .. } => "reload_failed",
        }
    }

    /// A human-readable sentence.
    pub fn message(&self) -> String {
        match self {
            NotReady::Starting => "startup recovery is not done".into(),
            NotReady::NeverPolled => "never polled".into(),
            NotReady::TrackerFailing { class } => format!("tracker failing with class {class}"),
            NotReady::Stale { seconds } => format!("no successful poll for {seconds} s"),
            NotReady::ShuttingDown => "shutting down".into(),
            NotReady::ReloadFailed { message } => {
                format!("WORKFLOW.md reload rejected; the previous config is in force: {message}")
            }
        }
    }

    /// The 503 body: `{"ready":false,"reason":…,"message":…}` plus `"class"` when failing.
    pub fn to_json(&self) -> String {
        let mut body = serde_json::json!({
            "ready": false,
            "reason": self.code(),
            "message": self.message(),
        });
        if let NotReady::TrackerFailing { class } = self {
            body["class"] = serde_json::Value::from(class.as_str());
        }
        body.to_string()
    }
}

/// The 200 body of `/readyz`.
pub const READY_JSON: &str = r#"{"ready":true}"#;

/// The staleness window: `max(3 × polling interval, 60 s)`, saturating.
pub fn ready_window(polling_interval: Duration) -> Duration {
    polling_interval.saturating_mul(3).max(READY_MIN_WINDOW)
}

/// The readyz decision at `now`.
pub fn readyz(inputs: &ReadyInputs<'_>, now: Instant) -> Result<(), NotReady> {
    if inputs.shutting_down {
        return Err(NotReady::ShuttingDown);
    }
    if !inputs.recovery_done {
        return Err(NotReady::Starting);
    }
    if let Some(message) = inputs.reload_error {
        return Err(NotReady::ReloadFailed {
            message: message.to_string(),
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
