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

/// Bound of the per-issue ring of recent agent events. The rings are the largest per-issue state
/// at scale: 1,000 issues × 200 summaries of up to 500 characters could hold 100 MB, 50 hold a
/// quarter of that (docs/performance.md, "Scale").
pub const RECENT_EVENTS_CAP: usize = 50;
/// Characters kept of one event summary.
pub(crate) const EVENT_SUMMARY_CHARS: usize = 500;

/// The scheduling-relevant slice of the config, re-applied on every valid reload; fields are named
/// after their config keys. Built by `ServiceConfig::policy`; its `Default` is the policy of a
/// WORKFLOW.md that sets nothing (both in `workflow::config`, where the defaults are).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Policy {
    pub poll_interval_ms: u64,
    pub max_concurrent_agents: u32,
    /// Normalized keys.
    pub max_concurrent_agents_by_state: BTreeMap<String, u32>,
    pub max_retry_backoff_ms: u64,
    pub max_attempts: Option<u32>,
    pub max_runs_per_issue: u32,
    /// The selected runner's `stall_timeout_ms` (`<= 0` disables stall detection).
    pub stall_timeout_ms: i64,
    pub active_states: Vec<String>,
    pub terminal_states: Vec<String>,
    pub required_labels: Vec<String>,
    pub excluded_labels: Vec<String>,
    /// Empty: all repositories.
    pub repos: Vec<String>,
    /// Used for new dispatches.
    pub workspace_root: PathBuf,
    /// `hooks.timeout_ms` + 30 s: `after_run` must fit in the shutdown grace.
    pub shutdown_grace_ms: u64,
    /// `agent.max_*_per_issue`.
    pub budget: Budget,
    /// Empty: run locally.
    pub ssh_hosts: Vec<String>,
    pub max_concurrent_agents_per_host: Option<u32>,
    /// How long an issue whose old agent could not be checked (its host did not answer) waits
    /// before it may run elsewhere.
    pub orphan_grace_ms: u64,
    /// `agent.kind` of new runs: recorded on each run, so a restart resumes a session only with
    /// the same CLI.
    pub agent: String,
    /// `tracker.budget_share`: the share of the tracker's hourly limit polls and fetches may use.
    pub budget_share: f64,
}

/// What one issue has spent since it last entered an active state, across runs and restarts;
/// `turns` counts turns that ended (`turn_completed` or `turn_failed`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct IssueSpend {
    pub tokens: TokenCounts,
    #[serde(deserialize_with = "stored_cost")]
    pub cost_usd: f64,
    pub turns: u32,
}

/// A cost read from `state.json`: clamped to `0..=MAX_COST_USD`; `null` (an infinite cost an
/// older Baton wrote) reads as the maximum, so a budget never resets by a restart.
pub(super) fn stored_cost<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let max = super::budget::MAX_COST_USD;
    let v: Option<f64> = Option::deserialize(d)?;
    Ok(v.map_or(max, |c| c.clamp(0.0, max)))
}

/// Where a worker is in its attempt (spec §7.2, coarse): `Preparing` (workspace and
/// `before_run`: hook deadlines apply, no stall detection), `Agent` (session and turns: stall
/// detection applies), `Finishing` (`after_run`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerPhase {
    #[default]
    Preparing,
    Agent,
    Finishing,
}

/// Why the orchestrator asked a worker to stop; decides what happens when it has exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// Terminal state or closed: clean the workspace, release.
    Terminal,
    /// Left the active states: release, keep the workspace.
    Inactive,
    /// Still active but no longer routable (labels/repo): release, keep the workspace.
    Unroutable,
    /// No longer visible on the project: release, keep the workspace.
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

/// Token counters; `input_tokens` excludes cache reads and writes, `total_tokens` includes them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCounts {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_input_tokens: u64,
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    pub total_tokens: u64,
}

impl TokenCounts {
    /// Add a usage delta (saturating: the numbers come from the agent).
    pub fn add(&mut self, d: &crate::agent::TokenUsage) {
        let (i, o) = (d.input_tokens, d.output_tokens);
        let (r, c) = (d.cache_read_input_tokens, d.cache_creation_input_tokens);
        self.input_tokens = self.input_tokens.saturating_add(i);
        self.output_tokens = self.output_tokens.saturating_add(o);
        self.cache_read_input_tokens = self.cache_read_input_tokens.saturating_add(r);
        self.cache_creation_input_tokens = self.cache_creation_input_tokens.saturating_add(c);
        let all = i.saturating_add(o).saturating_add(r).saturating_add(c);
        self.total_tokens = self.total_tokens.saturating_add(all);
    }
}

/// One running worker (spec §16.4 running entry). Its durable facts (what a restart needs: the
/// agent kind, the agent's own session id, host, workspace, process group and leader start time,
/// the session's last reported usage) are serialized into `state.json`; the rest is skipped.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunningEntry {
    /// Events of other runs are ignored.
    pub run_id: u64,
    /// Latest known snapshot (stored: id, identifier and URL only).
    #[serde(serialize_with = "issue_ref", deserialize_with = "issue_from_ref")]
    pub issue: Issue,
    /// Recorded at dispatch: cleanup uses it, whatever the config says later.
    pub workspace_path: PathBuf,
    /// `None` for a first run.
    pub attempt: Option<u32>,
    pub started_at: Millis,
    #[serde(skip)]
    pub phase: WorkerPhase,
    /// When the current phase (or turn) began.
    #[serde(skip)]
    pub phase_entered_at: Millis,
    /// `<agent_session_id>-<turn>` (display).
    #[serde(skip)]
    pub session_id: Option<String>,
    /// `agent.kind` of the run.
    pub agent: String,
    /// The agent CLI's own session id (what `--resume` takes).
    pub agent_session: Option<String>,
    /// Also its process-group id (on the run's host).
    pub agent_pid: Option<u32>,
    /// `/proc/<pid>/stat` field 22, so a reused pid is never mistaken for the agent.
    pub leader_start: Option<u64>,
    #[serde(skip)]
    pub last_event: Option<String>,
    #[serde(skip)]
    pub last_event_at: Option<Millis>,
    /// Bounded, untrusted.
    #[serde(skip)]
    pub last_message: Option<String>,
    #[serde(skip)]
    pub turn_count: u32,
    /// Of the agent session (a resumed session starts from what it had reported).
    pub tokens: TokenCounts,
    /// Latest session-cumulative cost.
    pub cost_usd: Option<f64>,
    #[serde(skip)]
    pub stop: Option<StopReason>,
    /// The run resumed the agent session of a run interrupted by a restart.
    #[serde(skip)]
    pub resumed: bool,
    /// `None`: this machine.
    pub host: Option<String>,
}

/// The agent session an interrupted run resumes, and what it had reported so far (the new run
/// counts only what comes on top).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Resume {
    pub agent: String,
    pub session: String,
    pub tokens: TokenCounts,
    pub cost_usd: Option<f64>,
}

/// An agent process group a previous Baton left running: the issue waits until it is known to be
/// stopped (or `give_up_at`, `worker.orphan_grace_ms` after the restart), so two agents never
/// work on one issue.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Orphan {
    pub identifier: String,
    /// `None`: this machine.
    pub host: Option<String>,
    pub pgid: u32,
    /// 0: unknown, never signalled.
    pub leader_start: u64,
    pub give_up_at: Millis,
    /// A stop is in flight.
    #[serde(skip)]
    pub checking: bool,
}

/// `RunningEntry::issue` in `state.json`: only what a restart needs (the rest is refreshed).
#[derive(Serialize, Deserialize)]
struct IssueRef {
    id: String,
    identifier: String,
    url: Option<String>,
}

fn issue_ref<S: serde::Serializer>(i: &Issue, s: S) -> Result<S::Ok, S::Error> {
    let (id, identifier, url) = (i.id.clone(), i.identifier.clone(), i.url.clone());
    IssueRef {
        id,
        identifier,
        url,
    }
    .serialize(s)
}

fn issue_from_ref<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Issue, D::Error> {
    let (r, mut i) = (IssueRef::deserialize(d)?, Issue::default());
    (i.id, i.identifier, i.url) = (r.id, r.identifier, r.url);
    Ok(i)
}

/// Kind of a queued retry: a 1 s re-check after a normal exit, or exponential backoff after a
/// failure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryKind {
    Continuation,
    #[default]
    Failure,
}

/// A queued retry (spec §4.1.7); the timer is `due_at` itself (see `engine::next_deadline`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RetryEntry {
    pub issue_id: String,
    pub identifier: String,
    pub url: Option<String>,
    /// 1-based.
    pub attempt: u32,
    pub due_at: Millis,
    pub error: Option<String>,
    pub kind: RetryKind,
    /// Generation; results for another generation are stale and ignored.
    #[serde(skip)]
    pub seq: u64,
    /// Its issue refresh is in flight.
    #[serde(skip)]
    pub in_flight: bool,
    /// Of the previous run (for terminal cleanup).
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
    pub issue_id: String,
    pub identifier: String,
    pub url: Option<String>,
    /// Status when parked.
    pub state: String,
    /// `max_attempts reached`, `max_runs_per_issue reached`, `budget exceeded: …`.
    pub reason: String,
    pub kind: ParkKind,
    pub since: Millis,
    /// Normalized state + labels at parking time; a different value releases the block.
    pub fingerprint: String,
    /// Of the last run.
    pub workspace_path: PathBuf,
}

/// Why an issue is parked, as a bounded class (the `reason` label of `baton_parked_issues`): a
/// limit of `agent.max_attempts`, `agent.max_runs_per_issue` or a per-issue budget (a reload
/// that raises the budget releases it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParkKind {
    MaxAttempts,
    #[default]
    MaxRuns,
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

/// A recorded agent event for the per-issue view; `message` is a bounded, untrusted summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    pub at: Millis,
    /// snake_case kind.
    pub event: String,
    pub message: String,
}

/// Aggregate agent totals (spec §13.5): `ended_seconds` is the runtime of ended runs, `cost_usd`
/// the sum of each session's latest cumulative cost, `turns` the turns that ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Totals {
    pub tokens: TokenCounts,
    pub ended_seconds: f64,
    #[serde(deserialize_with = "stored_cost")]
    pub cost_usd: f64,
    pub turns: u64,
}

/// Event counters of the engine (for `GET /metrics`); `orphans_stopped` counts since startup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    pub retries_scheduled: u64,
    pub dispatches: u64,
    pub orphans_stopped: u64,
}

/// A host marked down: since when, its consecutive failures (connections and probes), the next
/// probe and whether it is in flight, and the last error (bounded).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostDown {
    pub since: Millis,
    pub failures: u32,
    pub probe_at: Millis,
    pub probing: bool,
    pub error: String,
}

/// The poll cycle bookkeeping.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PollState {
    pub next_poll_at: Millis,
    pub last_started_at: Option<Millis>,
    /// A poll is out at the tracker thread.
    pub in_flight: bool,
    /// A refresh (API or webhook) waits for its poll: in flight, or deferred by the gate.
    pub refresh_pending: bool,
    pub last_success_at: Option<Millis>,
    /// Last poll/preflight error (cleared by success).
    pub last_error: Option<String>,
    /// Rate-limit pauses from any operation, credential back-off, refresh spacing.
    pub gate: super::gate::RequestGate,
    #[serde(skip)]
    pub rate_limit: Option<TrackerBudget>,
}

/// Orchestrator runtime state (spec §4.1.8) plus Baton's parking and observability bookkeeping.
/// Maps are keyed by issue id.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OrchestratorState {
    pub policy: Policy,
    pub running: BTreeMap<String, RunningEntry>,
    /// Reserved: running or retry-queued.
    pub claimed: BTreeSet<String>,
    pub retry_attempts: BTreeMap<String, RetryEntry>,
    /// Exited normally at least once (bookkeeping only).
    pub completed: BTreeSet<String>,
    pub blocked: BTreeMap<String, BlockedEntry>,
    /// Worker runs since the issue last entered an active state.
    pub runs_since_active: BTreeMap<String, u32>,
    pub last_errors: BTreeMap<String, String>,
    pub agent_totals: Totals,
    pub poll: PollState,
    /// Bounded rings.
    pub recent_events: BTreeMap<String, VecDeque<EventRecord>>,
    pub next_run_id: u64,
    pub next_retry_seq: u64,
    /// No dispatch, no retries.
    pub shutting_down: bool,
    /// When shutdown stops waiting for workers (set by the first shutdown request).
    pub shutdown_deadline: Option<Millis>,
    /// When WORKFLOW.md is re-read (debounced reload pings).
    pub reload_due: Option<Millis>,
    /// Lifetime spend since the issue last entered an active state (budgets).
    pub spend: BTreeMap<String, IssueSpend>,
    pub counters: Counters,
    /// The snapshot's `rate_limits`: `None` until an agent adapter reports them (Claude's
    /// `rate_limit_event`).
    pub agent_rate_limits: Option<serde_json::Value>,
    /// Workspace removals (with `before_remove`) still running per issue (the startup cleanup
    /// with SSH hosts removes on every host): not dispatched until the last
    /// `Event::WorkspaceRemoved`, so a re-dispatch never shares a directory.
    pub cleaning: BTreeMap<String, u32>,
    /// SSH hosts marked down (connection failures), with their probe schedule.
    pub hosts_down: BTreeMap<String, HostDown>,
    /// Agent groups a previous Baton left behind, not yet known to be stopped.
    pub orphans: BTreeMap<String, Orphan>,
    /// The SSH hosts that may hold a copy of the issue's workspace, the latest first (at most
    /// one entry per host; kept until the workspace is removed everywhere).
    pub workspace_hosts: BTreeMap<String, Vec<String>>,
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

    /// Claim the issue and queue `r` with a fresh generation (replacing an entry cancels its
    /// timer: the old generation no longer matches).
    pub fn queue_retry(&mut self, mut r: RetryEntry) {
        (r.seq, r.in_flight) = (self.next_retry_seq, false);
        self.next_retry_seq = r.seq.saturating_add(1);
        self.claimed.insert(r.issue_id.clone());
        self.retry_attempts.insert(r.issue_id.clone(), r);
    }
}
