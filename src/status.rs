//! What the status surface sees: plain, serializable snapshots of orchestrator state (spec §13.3,
//! §13.7) and the request type the HTTP thread sends to the main loop. The HTTP thread never touches
//! orchestrator state; it asks over a channel and renders what comes back. Times are RFC 3339 UTC
//! strings.

pub mod snapshot;

use crossbeam_channel::Sender;
use serde::Serialize;

pub use crate::orchestrator::state::{IssueSpend, TokenCounts};
pub use crate::orchestrator::Budget;
use crate::tracker::TrackerBudget;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Counts {
    pub running: usize,
    pub retrying: usize,
    pub blocked: usize,
}

/// One running worker (spec §13.3).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunningRow {
    pub issue_id: String,
    pub issue_identifier: String,
    pub title: String,
    pub url: Option<String>,
    pub state: String,
    /// `<agent_session_id>-<turn>`.
    pub session_id: Option<String>,
    pub turn_count: u32,
    pub last_event: Option<String>,
    pub last_message: Option<String>,
    pub started_at: String,
    pub last_event_at: Option<String>,
    pub tokens: TokenCounts,
    pub spend: IssueSpend,
    /// Latest session-cumulative cost in USD.
    pub cost_usd: Option<f64>,
    /// Retry attempt number of this run (null on a first run).
    pub attempt: Option<u32>,
    /// The run resumed the agent session of a run interrupted by a restart.
    pub resumed: bool,
    /// The SSH host running it (absent when it runs locally).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetryRow {
    pub issue_id: String,
    pub issue_identifier: String,
    pub url: Option<String>,
    pub attempt: u32,
    pub due_at: String,
    /// Milliseconds until due (0 when overdue).
    pub due_in_ms: u64,
    pub error: Option<String>,
}

/// An issue Baton will not dispatch until something changes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockedRow {
    pub issue_id: String,
    pub issue_identifier: String,
    pub url: Option<String>,
    /// Status when it was parked.
    pub state: String,
    /// Why (e.g. `max_attempts reached`, `max_runs_per_issue reached`).
    pub reason: String,
    pub since: String,
}

/// Aggregate agent totals (spec §13.5).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AgentTotals {
    /// Token totals of all runs (flat in the JSON: `input_tokens`, `output_tokens`, …).
    #[serde(flatten)]
    pub tokens: TokenCounts,
    pub turns: u64,
    /// Ended sessions' runtime plus live elapsed time of running ones.
    pub seconds_running: f64,
    /// Sum of the latest session-cumulative costs.
    pub cost_usd: f64,
}

/// Tracker health for operators.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TrackerHealth {
    pub last_successful_poll_at: Option<String>,
    /// Set while the most recent poll failed.
    pub last_error: Option<String>,
    /// The tracker's request budget (GitHub: GraphQL points); null when it reports none.
    pub rate_limit: Option<TrackerBudget>,
    /// The poll interval in force: `polling.interval_ms`, stretched to the budget.
    pub poll_interval_ms: u64,
    /// Points per hour Baton aims to stay within (`tracker.budget_share` of the hourly limit);
    /// null when the tracker reports no budget.
    pub points_target_per_hour: Option<u64>,
    /// Points per hour the polls and fetch batches are projected to cost; null until measured.
    pub points_projected_per_hour: Option<u64>,
}

/// `GET /api/v1/state`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StateSnapshot {
    pub generated_at: String,
    pub counts: Counts,
    pub running: Vec<RunningRow>,
    pub retrying: Vec<RetryRow>,
    pub blocked: Vec<BlockedRow>,
    pub agent_totals: AgentTotals,
    pub budget: Budget,
    /// Agent-reported rate limits: `OrchestratorState::agent_rate_limits`, null until an agent
    /// adapter reports them.
    pub rate_limits: Option<serde_json::Value>,
    pub tracker: TrackerHealth,
    /// SSH worker hosts with their load, cap and health (absent without `worker.ssh_hosts`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostRow>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostRow {
    pub host: String,
    pub running: usize,
    /// `worker.max_concurrent_agents_per_host` (null: no per-host cap).
    pub cap: Option<u32>,
    /// False while marked down after a connection failure.
    pub up: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the next probe runs while down.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_probe_at: Option<String>,
}

/// A recent normalized agent event for the per-issue view.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecentEvent {
    pub at: String,
    pub event: String,
    pub message: String,
}

/// `GET /api/v1/<issue_identifier>`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IssueDetail {
    pub issue_identifier: String,
    pub issue_id: String,
    /// `running`, `retrying` or `blocked`.
    pub status: String,
    pub workspace: Option<String>,
    pub attempts: u32,
    pub running: Option<RunningRow>,
    pub retry: Option<RetryRow>,
    pub blocked: Option<BlockedRow>,
    pub last_error: Option<String>,
    pub spend: IssueSpend,
    pub budget: Budget,
    /// The most recent events, oldest first (bounded ring).
    pub recent_events: Vec<RecentEvent>,
}

/// `POST /api/v1/refresh` acknowledgement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RefreshAck {
    pub queued: bool,
    /// True when it joined an already pending refresh.
    pub coalesced: bool,
    pub requested_at: String,
    /// `["poll", "reconcile"]`.
    pub operations: Vec<String>,
    /// The poll serving this refresh starts no earlier than this (refresh spacing or a
    /// tracker rate-limit pause); `null` when it starts now or right after the running poll.
    pub deferred_until: Option<String>,
}

/// A request from the HTTP thread to the main loop; the loop answers on the sender it carries.
#[derive(Debug)]
pub enum ControlRequest {
    State(Sender<StateSnapshot>),
    /// One issue by identifier; `None` when unknown.
    Issue(String, Sender<Option<IssueDetail>>),
    /// Queue an immediate poll + reconcile (coalesced).
    Refresh(Sender<RefreshAck>),
    /// A sign of life for `GET /livez`: the loop answers `()` at once.
    Ping(Sender<()>),
}
