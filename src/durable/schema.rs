//! The `state.json` document. Versioned; unknown fields are ignored (a newer Baton may add fields
//! without bumping the version as long as older ones can still read the file); every field but
//! the issue identity has a default so a partly written entry still loads.

use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize};

/// The schema version this build writes and the newest it reads.
pub const SCHEMA_VERSION: u32 = 1;

/// Host name recorded for runs on this machine.
pub const LOCAL_HOST: &str = "local";

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredState {
    /// Schema version ([`SCHEMA_VERSION`] when written by this build).
    pub schema_version: u32,
    /// When the file was written (Unix ms, wall clock).
    #[serde(default)]
    pub written_at: u64,
    /// One entry per known issue.
    #[serde(default)]
    pub issues: Vec<StoredIssue>,
}

impl Default for StoredState {
    fn default() -> Self {
        StoredState {
            schema_version: SCHEMA_VERSION,
            written_at: 0,
            issues: Vec::new(),
        }
    }
}

impl StoredState {
    /// A state of this schema version holding `issues`.
    pub fn new(issues: Vec<StoredIssue>, written_at: u64) -> Self {
        StoredState {
            schema_version: SCHEMA_VERSION,
            written_at,
            issues,
        }
    }
}

/// Counts of a stored state, for `baton check` (`issues=N retries=N parked=N running=N
/// sessions=N`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateSummary {
    /// Known issues.
    pub issues: usize,
    /// Queued retries.
    pub retries: usize,
    /// Parked issues.
    pub parked: usize,
    /// Runs that were in progress when the file was written.
    pub running: usize,
    /// Issues with a recorded agent session id.
    pub sessions: usize,
}

impl std::fmt::Display for StateSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "issues={} retries={} parked={} running={} sessions={}",
            self.issues, self.retries, self.parked, self.running, self.sessions
        )
    }
}

impl StoredState {
    /// Counts for `baton check`.
    pub fn summary(&self) -> StateSummary {
        let count = |f: fn(&StoredIssue) -> bool| self.issues.iter().filter(|i| f(i)).count();
        StateSummary {
            issues: self.issues.len(),
            retries: count(|i| i.retry.is_some()),
            parked: count(|i| i.parked.is_some()),
            running: count(|i| i.running.is_some()),
            sessions: count(|i| {
                i.session_id.is_some() || i.running.as_ref().is_some_and(|r| r.session_id.is_some())
            }),
        }
    }
}

/// Everything kept about one issue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredIssue {
    /// Tracker node id (the core's issue id).
    pub id: String,
    /// Human identifier, e.g. `owner/repo#12`.
    pub identifier: String,
    /// Attempt number of the latest run or queued retry (1-based); 0 = first run, no retry yet.
    #[serde(default)]
    pub attempt: u32,
    /// Worker runs since the issue last entered an active state (`max_runs_per_issue`).
    #[serde(default)]
    pub runs: u32,
    /// The queued retry, if any.
    #[serde(default)]
    pub retry: Option<StoredRetry>,
    /// Set while the issue is parked.
    #[serde(default)]
    pub parked: Option<StoredParked>,
    /// Token and cost totals of all runs of this issue.
    #[serde(default)]
    pub totals: StoredTotals,
    /// Agent kind of the latest run (`claude`, `copilot`).
    #[serde(default)]
    pub agent: Option<String>,
    /// The agent's own session id (the raw CLI id, not the `<id>-<turn>` display string).
    #[serde(default)]
    pub session_id: Option<String>,
    /// Workspace path of the latest run.
    #[serde(default)]
    pub workspace: Option<PathBuf>,
    /// Host of the latest run ([`LOCAL_HOST`] for this machine).
    #[serde(default = "local_host")]
    pub host: String,
    /// Set while an agent runs for the issue.
    #[serde(default)]
    pub running: Option<StoredRun>,
}

fn local_host() -> String {
    LOCAL_HOST.to_string()
}

impl StoredIssue {
    /// An entry with only the identity set.
    pub fn new(id: impl Into<String>, identifier: impl Into<String>) -> Self {
        StoredIssue {
            id: id.into(),
            identifier: identifier.into(),
            attempt: 0,
            runs: 0,
            retry: None,
            parked: None,
            totals: StoredTotals::default(),
            agent: None,
            session_id: None,
            workspace: None,
            host: local_host(),
            running: None,
        }
    }
}

/// Kind of a queued retry (mirrors the core's `RetryKind`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoredRetryKind {
    /// Short re-check after a normal exit.
    Continuation,
    /// Backoff after a failure (also the default for entries that do not say).
    #[default]
    Failure,
}

/// A queued retry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredRetry {
    /// Due time, wall clock (Unix ms).
    pub due_at: u64,
    /// Attempt number the retry runs as (1-based).
    pub attempt: u32,
    /// Why it was scheduled.
    #[serde(default)]
    pub error: Option<String>,
    /// Continuation or failure.
    #[serde(default)]
    pub kind: StoredRetryKind,
}

/// A parked issue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredParked {
    /// Why, e.g. `max_runs_per_issue reached`.
    pub reason: String,
    /// Board status when parked.
    #[serde(default)]
    pub state: String,
    /// Normalized state + labels at parking time; a different value releases the block.
    #[serde(default)]
    pub fingerprint: String,
    /// When parked (Unix ms).
    #[serde(default)]
    pub since: u64,
    /// The reason's class (`max_attempts`, `max_runs`, `budget_exceeded`), when known.
    #[serde(default)]
    pub kind: Option<String>,
}

/// Token and cost totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StoredTotals {
    /// Input tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Prompt-cache read tokens.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Prompt-cache creation tokens.
    #[serde(default)]
    pub cache_creation_tokens: u64,
    /// Cost in USD. JSON has no NaN/infinity (serde_json writes `null`), so `null` reads as 0.
    #[serde(default, deserialize_with = "finite_or_zero")]
    pub cost_usd: f64,
    /// Agent turns that ended (`turn_completed` or `turn_failed`).
    #[serde(default)]
    pub turns: u32,
}

fn finite_or_zero<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v: Option<f64> = Option::deserialize(d)?;
    Ok(v.filter(|x| x.is_finite()).unwrap_or(0.0))
}

/// The agent process of a running entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredRun {
    /// Process-group id (= the group leader's pid).
    pub pgid: u32,
    /// The leader's start time: `/proc/<pid>/stat` field 22, clock ticks since boot.
    pub leader_start_time: u64,
    /// When the run was dispatched (Unix ms).
    #[serde(default)]
    pub started_at: u64,
    /// Agent kind (`claude`, `copilot`).
    #[serde(default)]
    pub agent: String,
    /// The agent's own session id, once known.
    #[serde(default)]
    pub session_id: Option<String>,
}
