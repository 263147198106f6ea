//! The issue tracker boundary (spec §11): the `Tracker` trait, the tracker-neutral error classes
//! (spec §11.4) and request budget, and the registry of tracker kinds (`config`). The kinds:
//! GitHub Projects v2 (`tracker::github`) and Backlog.md boards (`tracker::backlog`).

use std::fmt;
use std::time::SystemTime;

use crossbeam_channel::Sender;

use crate::model::Issue;

/// Error class of a tracker failure (spec §11.4), in tracker-neutral terms. The stable string
/// that logs, `baton check` and the API show is [`TrackerError::class`]: each tracker kind names
/// its own classes (the GitHub tracker keeps `github_api_request`, `github_auth`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrackerErrorKind {
    UnsupportedTrackerKind,
    MissingTrackerToken,
    /// The board/project is not configured, or does not resolve.
    MissingTrackerProject,
    /// DNS, connect, TLS, timeout, body too large, I/O.
    Transport,
    /// An unexpected response status (other than rate limits and auth).
    Status,
    Auth,
    /// The request budget is exhausted; `retry_at` says when to try again.
    RateLimited,
    /// The tracker rejected the query itself (e.g. GraphQL `errors`).
    Query,
    /// An answer that is not the expected shape.
    Payload,
    /// Paging that cannot continue (e.g. `hasNextPage` without a cursor).
    Pagination,
}

impl TrackerErrorKind {
    /// The default class name, for trackers that name no class of their own.
    pub fn as_str(self) -> &'static str {
        match self {
            TrackerErrorKind::UnsupportedTrackerKind => "unsupported_tracker_kind",
            TrackerErrorKind::MissingTrackerToken => "missing_tracker_token",
            TrackerErrorKind::MissingTrackerProject => "missing_tracker_project",
            TrackerErrorKind::Transport => "tracker_request",
            TrackerErrorKind::Status => "tracker_status",
            TrackerErrorKind::Auth => "tracker_auth",
            TrackerErrorKind::RateLimited => "tracker_rate_limited",
            TrackerErrorKind::Query => "tracker_query_errors",
            TrackerErrorKind::Payload => "tracker_unknown_payload",
            TrackerErrorKind::Pagination => "tracker_pagination",
        }
    }
}

/// A tracker failure. Never carries a credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackerError {
    pub kind: TrackerErrorKind,
    /// The stable name logs, `baton check` and the API show (tracker-specific: `github_auth`).
    pub class: &'static str,
    pub message: String,
    /// For rate limits: when a retry may succeed.
    pub retry_at: Option<SystemTime>,
}

impl TrackerError {
    /// An error named by the kind's default class.
    pub fn new(kind: TrackerErrorKind, message: impl Into<String>) -> Self {
        Self::with_class(kind, kind.as_str(), message)
    }

    /// An error with a tracker-specific class name.
    pub(crate) fn with_class(
        kind: TrackerErrorKind,
        class: &'static str,
        message: impl Into<String>,
    ) -> Self {
        TrackerError {
            kind,
            class,
            message: message.into(),
            retry_at: None,
        }
    }
}

impl fmt::Display for TrackerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.class, self.message)
    }
}

impl std::error::Error for TrackerError {}

/// The request budget a tracker last reported (GitHub: GraphQL rate-limit points, decoded
/// straight from a reply's `rateLimit`). Trackers without a budget report none. Serialized as
/// the API's `tracker.rate_limit` object.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TrackerBudget {
    pub remaining: Option<i64>,
    pub limit: Option<i64>,
    /// RFC 3339.
    #[serde(rename(deserialize = "resetAt"))]
    pub reset_at: Option<String>,
    #[serde(rename(deserialize = "cost"))]
    pub last_cost: Option<i64>,
}

thread_local! {
    static POINTS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The budget points the calling thread's tracker requests cost since its last call: a tracker
/// adds each request's cost ([`spend_points`]) on the thread that sent it (calls are blocking),
/// so concurrent calls of other threads never need attributing.
pub fn take_points() -> u64 {
    POINTS.with(|p| p.replace(0))
}

/// Add one request's reported cost to the calling thread's count (negative costs count 0).
pub(crate) fn spend_points(cost: i64) {
    let cost = u64::try_from(cost).unwrap_or(0);
    POINTS.with(|p| p.set(p.get().saturating_add(cost)));
}

/// What one poll's board read returned (see [`Tracker::read_board`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BoardRead {
    /// Dispatch candidates: exactly what [`Tracker::fetch_candidate_issues`] returns.
    pub candidates: Vec<Issue>,
    /// The other issues the read saw that the caller asked to keep (running ids, the extra
    /// states), whatever their state. An issue in neither list was not in the read.
    pub others: Vec<Issue>,
}

/// The tracker operations Baton needs (spec §11.1). Implementations are shared between the main
/// loop's tracker thread and worker threads, so they take `&self` and synchronize internally.
pub trait Tracker: Send + Sync {
    /// Issues on the project whose Status is an active state (normalized; list reads skip
    /// malformed records).
    fn fetch_candidate_issues(&self) -> Result<Vec<Issue>, TrackerError>;
    /// Issues whose Status is one of `states` (startup terminal cleanup). Empty input makes no request.
    fn fetch_issues_by_states(&self, states: &[String]) -> Result<Vec<Issue>, TrackerError>;
    /// Current state of the given issue ids. Ids that no longer resolve, or whose issue is no longer
    /// on the project, are omitted. Empty input makes no request.
    fn fetch_issue_states_by_ids(&self, ids: &[String]) -> Result<Vec<Issue>, TrackerError>;
    /// One poll's board read: the candidates, plus every other issue the read saw whose id is in
    /// `keep_ids` or whose state is in `also` (closed issues count as terminal, so they come
    /// with terminal `also` states). A running issue found in either list needs no second
    /// request; the first tick passes the terminal states for the startup cleanup. The default
    /// reads the candidates and, when `also` is not empty, `fetch_issues_by_states`.
    fn read_board(&self, _keep_ids: &[String], also: &[String]) -> Result<BoardRead, TrackerError> {
        let candidates = self.fetch_candidate_issues()?;
        let mut others = Vec::new();
        if !also.is_empty() {
            others = self.fetch_issues_by_states(also)?;
        }
        Ok(BoardRead { candidates, others })
    }
    /// Current state of running issues a board read did not contain, for reconciliation only:
    /// like [`Tracker::fetch_issue_states_by_ids`] but trackers may leave `blocked_by` empty
    /// (a running issue is never stopped for its blockers). Empty input makes no request.
    fn refresh_running(&self, ids: &[String]) -> Result<Vec<Issue>, TrackerError> {
        self.fetch_issue_states_by_ids(ids)
    }
    /// Resolve (and cache) the project and its fields; a validation failure clears the cache.
    fn validate(&self) -> Result<(), TrackerError>;
    /// Drop cached project/field ids (called on WORKFLOW reload).
    fn reset_cache(&self);
    /// The last request budget seen, if any (`None` for trackers without one).
    fn rate_limit(&self) -> Option<TrackerBudget>;
    /// Start watching the tracker's source for changes, sending `()` on `changed` (without
    /// blocking) after each debounced burst; the watch lasts as long as the returned guard.
    /// `Ok(None)` for trackers that cannot be watched (polling only; the default).
    fn watch(&self, _changed: Sender<()>) -> Result<Option<WatchGuard>, TrackerError> {
        Ok(None)
    }
}

/// Keeps a [`Tracker::watch`] alive; dropping it stops the watch.
pub type WatchGuard = Box<dyn Send>;

#[cfg(feature = "backlog")]
pub mod backlog;
pub mod config;
pub mod github;

pub use config::{open, TrackerConfig};
pub use github::wire_log_allowed;
