//! The issue tracker boundary (spec §11): the `Tracker` trait the orchestrator and workers call,
//! and the typed error classes (spec §11.4). The GitHub Projects v2 implementation lives in
//! `tracker::github`.

use std::fmt;
use std::time::SystemTime;

use crate::model::Issue;

/// Error class of a tracker failure (spec §11.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrackerErrorKind {
    /// `tracker.kind` is not `github_projects`.
    UnsupportedTrackerKind,
    /// No token after `$VAR`/`GITHUB_TOKEN`/`gh auth token` resolution.
    MissingTrackerToken,
    /// Owner/number missing, or the project (or its status field) does not resolve.
    MissingTrackerProject,
    /// Transport failure (DNS, connect, TLS, timeout, body too large).
    GithubApiRequest,
    /// Non-200 HTTP status (other than rate limits and auth).
    GithubApiStatus,
    /// 401 Bad credentials / 403 without a rate-limit marker.
    GithubAuth,
    /// Primary or secondary rate limit; `retry_at` says when to try again.
    GithubRateLimited,
    /// GraphQL `errors` in an otherwise readable response.
    GithubGraphqlErrors,
    /// A body that is not the expected JSON shape.
    GithubUnknownPayload,
    /// `hasNextPage: true` without an `endCursor`.
    GithubMissingEndCursor,
}

impl TrackerErrorKind {
    /// The stable snake_case class name used in logs and `baton check`.
    pub fn as_str(self) -> &'static str {
        match self {
            TrackerErrorKind::UnsupportedTrackerKind => "unsupported_tracker_kind",
            TrackerErrorKind::MissingTrackerToken => "missing_tracker_token",
            TrackerErrorKind::MissingTrackerProject => "missing_tracker_project",
            TrackerErrorKind::GithubApiRequest => "github_api_request",
            TrackerErrorKind::GithubApiStatus => "github_api_status",
            TrackerErrorKind::GithubAuth => "github_auth",
            TrackerErrorKind::GithubRateLimited => "github_rate_limited",
            TrackerErrorKind::GithubGraphqlErrors => "github_graphql_errors",
            TrackerErrorKind::GithubUnknownPayload => "github_unknown_payload",
            TrackerErrorKind::GithubMissingEndCursor => "github_missing_end_cursor",
        }
    }
}

/// A tracker failure. Never carries the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackerError {
    /// The error class.
    pub kind: TrackerErrorKind,
    /// Human-readable detail (no secrets).
    pub message: String,
    /// For rate limits: when a retry may succeed.
    pub retry_at: Option<SystemTime>,
}

impl TrackerError {
    /// Build an error without a retry time.
    pub fn new(kind: TrackerErrorKind, message: impl Into<String>) -> Self {
        TrackerError {
            kind,
            message: message.into(),
            retry_at: None,
        }
    }
}

impl fmt::Display for TrackerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.message)
    }
}

impl std::error::Error for TrackerError {}

/// The GraphQL rate-limit budget last reported by GitHub.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RateLimitInfo {
    /// Points left in the window.
    pub remaining: Option<i64>,
    /// Window size in points.
    pub limit: Option<i64>,
    /// RFC 3339 reset time.
    pub reset_at: Option<String>,
    /// Points the last request cost.
    pub last_cost: Option<i64>,
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
    /// Resolve (and cache) the project and its fields; a validation failure clears the cache.
    fn validate(&self) -> Result<(), TrackerError>;
    /// Drop cached project/field ids (called on WORKFLOW reload).
    fn reset_cache(&self);
    /// The last rate-limit budget seen, if any.
    fn rate_limit(&self) -> Option<RateLimitInfo>;
}

pub mod backlog;
pub mod github;
