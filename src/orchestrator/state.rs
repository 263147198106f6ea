//! The single authoritative scheduler state (spec §4.1.8), plain and serializable. Times are
//! milliseconds on the orchestrator clock ([`Millis`]): Unix-epoch based so they render as RFC 3339,
//! but advanced monotonically by the runtime (and freely by tests).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use super::budget::Budget;
use crate::model::Issue;
use crate::tracker::TrackerBudget;

/// Milliseconds since the Unix epoch on the orchestrator clock.
pub type Millis = u64;

/// Bound of the per-issue ring of recent agent events.
pub const RECENT_EVENTS_CAP: usize = 200;
/// Characters kept of one event summary.
pub(crate) const EVENT_SUMMARY_CHARS: usize = 500;

/// The scheduling-relevant slice of the config, re-applied on every valid reload. Built by
/// `ServiceConfig::policy`; its `Default` is the policy of a WORKFLOW.md that sets nothing (both
/// in `workflow::config`, where the defaults are).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    /// `polling.interval_ms`.
    pub poll_interval_ms: u64,
    /// `agent.max_concurrent_agents`.
    pub max_concurrent_agents: u32,
    /// `agent.max_concurrent_agents_by_state` (normalized keys).
    pub max_concurrent_agents_by_state: BTreeMap<String, u32>,
    /// `agent.max_retry_backoff_ms`.
    pub max_retry_backoff_ms: u64,
    /// `agent.max_attempts`.
    pub max_attempts: Option<u32>,
    /// `agent.max_runs_per_issue`.
    pub max_runs_per_issue: u32,
    /// The selected runner's `stall_timeout_ms` (`<= 0` disables stall detection).
    pub stall_timeout_ms: i64,
    /// `tracker.active_states`.
    pub active_states: Vec<String>,
    /// `tracker.terminal_states`.
    pub terminal_states: Vec<String>,
    /// `tracker.required_labels`.
    pub required_labels: Vec<String>,
    /// `tracker.excluded_labels`.
    pub excluded_labels: Vec<String>,
    /// `tracker.repos` (empty = all).
    pub repos: Vec<String>,
    /// `workspace.root` (absolute) used for new dispatches.
    pub workspace_root: PathBuf,
    /// How long shutdown waits for workers: `hooks.timeout_ms` + 30 s (`after_run` must fit).
    pub shutdown_grace_ms: u64,
    /// `agent.max_*_per_issue`: lifetime spend limits per issue.
    #[serde(default)]
    pub budget: Budget,
    /// `worker.ssh_hosts` (empty: run locally).
    #[serde(default)]
    pub ssh_hosts: Vec<String>,
    /// `worker.max_concurrent_agents_per_host`.
    #[serde(default)]
    pub max_concurrent_agents_per_host: Option<u32>,
    /// `worker.orphan_grace_ms`: how long an issue whose old agent could not be checked (its host
    /// did not answer) waits before it may run elsewhere.
    #[serde(default)]
    pub orphan_grace_ms: u64,
    /// `agent.kind` of new runs (`claude_code`, `copilot`): recorded on each run, so a restart
    /// resumes a session only with the same CLI.
    #[serde(default)]
    pub agent: String,
    /// `tracker.budget_share`: the share of the tracker's hourly limit polls and fetches may use.
    #[serde(default = "default_budget_share")]
    pub budget_share: f64,
}

fn default_budget_share() -> f64 {
    super::gate::DEFAULT_BUDGET_SHARE
}

/// What one issue has spent since it last entered an active state (across runs; durable state
/// will keep it across restarts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct IssueSpend {
    /// Tokens of all its runs.
    #[serde(default)]
    pub tokens: TokenCounts,
    /// Agent-reported cost in US dollars.
    #[serde(default, deserialize_with = "stored_cost")]
    pub cost_usd: f64,
    /// Turns that ended (`turn_completed` or `turn_failed`).
    #[serde(default)]
    pub turns: u32,
}

/// A cost read from `state.json`: clamped to `0..=MAX_COST_USD`; `null` (an infinite cost an
/// older Baton wrote) reads as the maximum, so a budget never resets by a restart.
fn stored_cost<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let max = super::budget::MAX_COST_USD;
    let v: Option<f64> = Option::deserialize(d)?;
    Ok(v.map_or(max, |c| c.clamp(0.0, max)))
}

/// Where a worker is in its attempt (spec §7.2, coarse).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerPhase {
    /// Workspace preparation and `before_run` (hook deadlines apply, no stall detection).
    #[default]
    Preparing,
    /// Agent session startup and turns (stall detection applies).
    Agent,
    /// Session stopped, `after_run` running.
    Finishing,
}

/// Why the orchestrator asked a worker to stop; decides what happens when it has exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// Issue reached a terminal state or was closed: clean the workspace, release.
    Terminal,
    /// Issue left the active states: release, keep the workspace.
    Inactive,
    /// Issue is still active but no longer routable (labels/repo): release, keep the workspace.
    Unroutable,
    /// Issue no longer visible on the project: release, keep the workspace.
    Missing,
    /// No agent activity for `stall_timeout_ms`: failure retry.
    Stalled,
    /// Service shutdown: release.
    Shutdown,
    /// A per-issue budget was reached after a turn: park the issue.
    BudgetExceeded,
}

impl StopReason {
    /// snake_case name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Terminal => "terminal",
            StopReason::Inactive => "inactive",
            StopReason::Unroutable => "unroutable",
            StopReason::Missing => "missing",
            StopReason::Stalled => "stalled",
            StopReason::Shutdown => "shutdown",
            StopReason::BudgetExceeded => "budget_exceeded",
        }
    }
}

/// Token counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCounts {
    /// Input tokens (not counting cache reads or writes).
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens read from the prompt cache.
    #[serde(default)]
    pub cache_read_input_tokens: u64,
    /// Input tokens written to the prompt cache.
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    /// input + output + cache reads + cache writes.
    pub total_tokens: u64,
}

impl TokenCounts {
    /// Add a usage delta (saturating: the numbers come from the agent).
    pub fn add(&mut self, d: &crate::agent::TokenUsage) {
        self.input_tokens = self.input_tokens.saturating_add(d.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(d.output_tokens);
        self.cache_read_input_tokens = self
            .cache_read_input_tokens
            .saturating_add(d.cache_read_input_tokens);
        self.cache_creation_input_tokens = self
            .cache_creation_input_tokens
            .saturating_add(d.cache_creation_input_tokens);
        let all = d
            .input_tokens
            .saturating_add(d.output_tokens)
            .saturating_add(d.cache_read_input_tokens)
            .saturating_add(d.cache_creation_input_tokens);
        self.total_tokens = self.total_tokens.saturating_add(all);
    }
}

/// One running worker (spec §16.4 running entry). Its durable facts (what a restart needs: the
/// agent kind, the agent's own session id, host, workspace, process group and leader start time,
/// the session's last reported usage) are serialized into `state.json`; the rest is skipped.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunningEntry {
    /// Unique id of this worker run; events of other runs are ignored.
    pub run_id: u64,
    /// Latest known issue snapshot (stored: id, identifier and URL only).
    #[serde(with = "issue_ref")]
    pub issue: Issue,
    /// Workspace path recorded at dispatch (used for cleanup, whatever the config says later).
    pub workspace_path: PathBuf,
    /// Retry attempt this run is (`None` for a first run).
    pub attempt: Option<u32>,
    /// When the worker was dispatched.
    pub started_at: Millis,
    /// Current phase.
    #[serde(skip)]
    pub phase: WorkerPhase,
    /// When the current phase (or turn) began.
    #[serde(skip)]
    pub phase_entered_at: Millis,
    /// `<agent_session_id>-<turn>` (display).
    #[serde(skip)]
    pub session_id: Option<String>,
    /// `agent.kind` of the run (`claude_code`, `copilot`).
    pub agent: String,
    /// The agent CLI's own session id (what `--resume` takes).
    pub agent_session: Option<String>,
    /// Agent process id, which is also its process-group id (on the run's host).
    pub agent_pid: Option<u32>,
    /// The group leader's start time (`/proc/<pid>/stat` field 22), so a reused pid is never
    /// mistaken for the agent.
    pub leader_start: Option<u64>,
    /// Last event kind.
    #[serde(skip)]
    pub last_event: Option<String>,
    /// When the last agent event arrived.
    #[serde(skip)]
    pub last_event_at: Option<Millis>,
    /// Last event summary (bounded, untrusted).
    #[serde(skip)]
    pub last_message: Option<String>,
    /// Turns started by this worker.
    #[serde(skip)]
    pub turn_count: u32,
    /// Tokens of the agent session (a resumed session starts from what it had reported).
    pub tokens: TokenCounts,
    /// Latest session-cumulative cost.
    pub cost_usd: Option<f64>,
    /// Set once the orchestrator asked the worker to stop.
    #[serde(skip)]
    pub stop: Option<StopReason>,
    /// The run resumed the agent session of a run interrupted by a restart.
    #[serde(skip)]
    pub resumed: bool,
    /// The SSH host running it (`None`: this machine).
    pub host: Option<String>,
}

/// The agent session an interrupted run resumes, and what it had reported so far (the new run
/// counts only what comes on top).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Resume {
    /// `agent.kind` of the session.
    pub agent: String,
    /// The agent CLI's own session id.
    pub session: String,
    /// Tokens the session had reported.
    pub tokens: TokenCounts,
    /// The session's last cumulative cost.
    pub cost_usd: Option<f64>,
}

/// An agent process group a previous Baton left running: the issue waits until it is known to be
/// stopped (or `give_up_at`), so two agents never work on one issue.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Orphan {
    /// Issue identifier (logs).
    pub identifier: String,
    /// The host that owns the group (`None`: this machine).
    pub host: Option<String>,
    /// Process-group id on that host.
    pub pgid: u32,
    /// Recorded leader start time (0: unknown, never signalled).
    pub leader_start: u64,
    /// When the issue stops waiting for an answer (`worker.orphan_grace_ms` after the restart).
    pub give_up_at: Millis,
    /// A stop is in flight.
    #[serde(skip)]
    pub checking: bool,
}

/// `RunningEntry::issue` in `state.json`: only what a restart needs (the rest is refreshed).
mod issue_ref {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::model::Issue;

    #[derive(Serialize, Deserialize)]
    struct IssueRef {
        id: String,
        identifier: String,
        url: Option<String>,
    }

    pub(super) fn serialize<S: Serializer>(i: &Issue, s: S) -> Result<S::Ok, S::Error> {
        IssueRef {
            id: i.id.clone(),
            identifier: i.identifier.clone(),
            url: i.url.clone(),
        }
        .serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Issue, D::Error> {
        let r = IssueRef::deserialize(d)?;
        Ok(Issue {
            id: r.id,
            identifier: r.identifier,
            url: r.url,
            ..Issue::default()
        })
    }
}

/// Kind of a queued retry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryKind {
    /// 1 s re-check after a normal exit.
    Continuation,
    /// Exponential backoff after a failure.
    #[default]
    Failure,
}

/// A queued retry (spec §4.1.7); the timer is `due_at` itself (see `engine::next_deadline`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RetryEntry {
    /// Issue node id.
    pub issue_id: String,
    /// Identifier for logs/status.
    pub identifier: String,
    /// Issue URL, when known.
    pub url: Option<String>,
    /// Attempt number the retry runs as (1-based).
    pub attempt: u32,
    /// Due time.
    pub due_at: Millis,
    /// Why.
    pub error: Option<String>,
    /// Continuation or failure.
    pub kind: RetryKind,
    /// Generation; results for another generation are stale and ignored.
    #[serde(skip)]
    pub seq: u64,
    /// True while its issue refresh is in flight.
    #[serde(skip)]
    pub in_flight: bool,
    /// Workspace of the previous run (for terminal cleanup).
    pub workspace_path: PathBuf,
    /// The SSH host of the previous run (has the workspace; preferred for the retry).
    pub host: Option<String>,
    /// The session an interrupted run resumes (set by restore).
    pub resume: Option<Resume>,
}

/// An issue parked until its state or labels change.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BlockedEntry {
    /// Issue node id.
    pub issue_id: String,
    /// Identifier.
    pub identifier: String,
    /// URL.
    pub url: Option<String>,
    /// Status when parked.
    pub state: String,
    /// `max_attempts reached`, `max_runs_per_issue reached`, `budget exceeded: …`.
    pub reason: String,
    /// The reason's class (a bounded metrics label).
    pub kind: ParkKind,
    /// When parked.
    pub since: Millis,
    /// Normalized state + labels at parking time; a different value releases the block.
    pub fingerprint: String,
    /// Workspace of the last run.
    pub workspace_path: PathBuf,
}

/// Why an issue is parked, as a bounded class (the `reason` label of `baton_parked_issues`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParkKind {
    /// `agent.max_attempts` reached.
    MaxAttempts,
    /// `agent.max_runs_per_issue` reached.
    #[default]
    MaxRuns,
    /// A per-issue budget reached; a reload that raises the limit releases it.
    BudgetExceeded,
}

impl ParkKind {
    /// snake_case name (metrics label value).
    pub fn as_str(self) -> &'static str {
        match self {
            ParkKind::MaxAttempts => "max_attempts",
            ParkKind::MaxRuns => "max_runs",
            ParkKind::BudgetExceeded => "budget_exceeded",
        }
    }
}

/// A recorded agent event for the per-issue view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// When it arrived.
    pub at: Millis,
    /// Kind (snake_case).
    pub event: String,
    /// Bounded summary (untrusted).
    pub message: String,
}

/// Aggregate agent totals (spec §13.5).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Totals {
    /// Tokens of all runs.
    pub tokens: TokenCounts,
    /// Runtime of ended runs in seconds.
    pub ended_seconds: f64,
    /// Sum of session costs (latest cumulative per session).
    #[serde(deserialize_with = "stored_cost")]
    pub cost_usd: f64,
    /// Turns that ended (`turn_completed` or `turn_failed`).
    #[serde(default)]
    pub turns: u64,
}

/// Event counters of the engine (for `GET /metrics`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Retries scheduled (continuation and failure).
    pub retries_scheduled: u64,
    /// Workers dispatched.
    pub dispatches: u64,
    /// Orphaned agent groups stopped since startup.
    pub orphans_stopped: u64,
}

/// The poll cycle bookkeeping.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PollState {
    /// When the next poll tick is due.
    pub next_poll_at: Millis,
    /// When the last poll started.
    pub last_started_at: Option<Millis>,
    /// A poll is out at the tracker thread.
    pub in_flight: bool,
    /// A refresh (API or webhook) waits for its poll: in flight, or deferred by the gate.
    pub refresh_pending: bool,
    /// Last successful candidate fetch.
    pub last_success_at: Option<Millis>,
    /// Last poll/preflight error (cleared by success).
    pub last_error: Option<String>,
    /// The tracker request gate: rate-limit pauses from any operation, credential back-off,
    /// refresh spacing.
    #[serde(default)]
    pub gate: super::gate::RequestGate,
    /// Latest GraphQL budget.
    #[serde(skip)]
    pub rate_limit: Option<TrackerBudget>,
}

/// Orchestrator runtime state (spec §4.1.8) plus Baton's parking and observability bookkeeping.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OrchestratorState {
    /// Effective scheduling policy.
    pub policy: Policy,
    /// issue id → running worker.
    pub running: BTreeMap<String, RunningEntry>,
    /// Issue ids reserved: running or retry-queued.
    pub claimed: BTreeSet<String>,
    /// issue id → queued retry.
    pub retry_attempts: BTreeMap<String, RetryEntry>,
    /// Issue ids that exited normally at least once (bookkeeping only).
    pub completed: BTreeSet<String>,
    /// issue id → parked entry.
    pub blocked: BTreeMap<String, BlockedEntry>,
    /// Worker runs since the issue last entered an active state.
    pub runs_since_active: BTreeMap<String, u32>,
    /// Last error per issue (for the issue view).
    pub last_errors: BTreeMap<String, String>,
    /// Aggregates.
    pub agent_totals: Totals,
    /// Poll cycle.
    pub poll: PollState,
    /// issue id → last events (bounded ring).
    pub recent_events: BTreeMap<String, VecDeque<EventRecord>>,
    /// Next worker run id.
    pub next_run_id: u64,
    /// Next retry generation.
    pub next_retry_seq: u64,
    /// Set by shutdown: no dispatch, no retries.
    pub shutting_down: bool,
    /// When shutdown stops waiting for workers (set by the first shutdown request).
    pub shutdown_deadline: Option<Millis>,
    /// When WORKFLOW.md is re-read (debounced reload pings).
    pub reload_due: Option<Millis>,
    /// issue id → lifetime spend since it last entered an active state (budgets).
    pub spend: BTreeMap<String, IssueSpend>,
    /// Event counters for metrics.
    pub counters: Counters,
    /// The latest agent-reported rate limits (the snapshot's `rate_limits`); `None` until an
    /// agent adapter reports them (Claude's `rate_limit_event`).
    pub agent_rate_limits: Option<serde_json::Value>,
    /// Issue ids whose workspace removals (with `before_remove`) are still running, with how
    /// many are (the startup cleanup with SSH hosts removes on every host): not dispatched until
    /// the last `Event::WorkspaceRemoved`, so a re-dispatch never shares a directory.
    pub cleaning: BTreeMap<String, u32>,
    /// SSH hosts marked down (connection failures), with their probe schedule.
    pub hosts_down: super::hosts::HostsDown,
    /// issue id → an agent group a previous Baton left behind, not yet known to be stopped.
    pub orphans: BTreeMap<String, Orphan>,
    /// issue id → the SSH hosts that may hold a copy of its workspace, the latest first.
    pub workspace_hosts: super::hosts::WorkspaceHosts,
}

impl OrchestratorState {
    /// Fresh state with `policy`; the first poll is due at `now`.
    pub fn new(policy: Policy, now: Millis) -> Self {
        OrchestratorState {
            policy,
            poll: PollState {
                next_poll_at: now,
                ..PollState::default()
            },
            next_run_id: 1,
            next_retry_seq: 1,
            ..OrchestratorState::default()
        }
    }

    /// Claim `issue_id` and queue a retry for it with a fresh generation (replacing an entry
    /// cancels its timer: the old generation no longer matches). Returns the entry so the caller
    /// can fill in what it knows (`url`, `error`, `host`).
    pub fn queue_retry(
        &mut self,
        issue_id: &str,
        identifier: &str,
        kind: RetryKind,
        attempt: u32,
        due_at: Millis,
        workspace_path: PathBuf,
    ) -> &mut RetryEntry {
        let seq = self.next_retry_seq;
        self.next_retry_seq = seq.saturating_add(1);
        self.claimed.insert(issue_id.to_string());
        let entry = RetryEntry {
            issue_id: issue_id.to_string(),
            identifier: identifier.to_string(),
            url: None,
            attempt,
            due_at,
            error: None,
            kind,
            seq,
            in_flight: false,
            workspace_path,
            host: None,
            resume: None,
        };
        self.retry_attempts.insert(issue_id.to_string(), entry);
        self.retry_attempts
            .get_mut(issue_id)
            .expect("the entry was just inserted")
    }
}
