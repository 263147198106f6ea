//! The core's side of durable state (issue 11), pure: the [`Ledger`] of per-issue facts the
//! scheduler state does not keep (agent kind, the agent's own session id, workspace, host,
//! lifetime token/cost totals, the running agent's process group), the projection of
//! [`OrchestratorState`] + ledger into `state.json` entries ([`project`]), and the applying of a
//! startup [`RecoveryPlan`] to a fresh state ([`apply_plan`]).
//!
//! Times: the engine runs on the orchestrator clock ([`Millis`]); the file holds wall-clock Unix
//! ms. Both conversions take the pair `(now, wall_now)` read at the same moment.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::agent::{AgentEvent, AgentEventKind};
use crate::durable::recover::add_totals;
use crate::durable::{
    RecoveryPlan, ResumeInfo, StoredIssue, StoredParked, StoredRetry, StoredRetryKind, StoredRun,
    StoredState, StoredTotals,
};
use crate::workspace::workspace_path;

use super::state::{
    BlockedEntry, IssueSpend, Millis, OrchestratorState, ParkKind, RetryKind, TokenCounts,
};

/// Host name of runs on this machine.
pub const LOCAL_HOST: &str = "local";

/// The agent's own session id from the `<agent_session_id>-<turn>` display string the adapters
/// put in events (`None` when the string has no `-<turn>` suffix).
pub fn raw_session_id(display: &str) -> Option<&str> {
    let (id, turn) = display.rsplit_once('-')?;
    (!id.is_empty() && !turn.is_empty() && turn.bytes().all(|b| b.is_ascii_digit())).then_some(id)
}

/// The agent process of the current run of an issue.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunRecord {
    /// Worker run id (events of other runs are ignored).
    pub run_id: u64,
    /// Process-group id of the agent (its pid: the agent is its group leader); 0 = not started.
    pub pgid: u32,
    /// The leader's start time (`/proc/<pid>/stat` field 22).
    pub leader_start_time: u64,
    /// Session-cumulative cost last reported by this run's session.
    pub last_cost: f64,
    /// The run resumed a recorded session after a restart.
    pub resumed: bool,
}

/// What the ledger keeps about one issue.
#[derive(Debug, Clone, PartialEq)]
pub struct IssueRecord {
    /// Human identifier.
    pub identifier: String,
    /// Agent kind of the latest run.
    pub agent: Option<String>,
    /// The agent's own session id (raw CLI id) of the latest run.
    pub session_id: Option<String>,
    /// Workspace of the latest run.
    pub workspace: Option<PathBuf>,
    /// Host of the latest run.
    pub host: String,
    /// Lifetime totals (tokens incl. cache, cost).
    pub totals: StoredTotals,
    /// The current run, while one runs.
    pub run: Option<RunRecord>,
}

impl IssueRecord {
    fn new(identifier: &str) -> Self {
        IssueRecord {
            identifier: identifier.to_string(),
            agent: None,
            session_id: None,
            workspace: None,
            host: LOCAL_HOST.to_string(),
            totals: StoredTotals::default(),
            run: None,
        }
    }
}

/// Per-issue facts the scheduler state does not carry, fed from dispatches and agent events.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ledger {
    issues: BTreeMap<String, IssueRecord>,
}

impl Ledger {
    /// The ledger as stored (running entries are over: their process is gone or stopped).
    pub fn from_stored(stored: &StoredState) -> Self {
        let mut l = Ledger::default();
        for i in &stored.issues {
            let mut r = IssueRecord::new(&i.identifier);
            r.agent = i
                .running
                .as_ref()
                .map(|run| run.agent.clone())
                .filter(|a| !a.is_empty())
                .or_else(|| i.agent.clone());
            r.session_id = i
                .running
                .as_ref()
                .and_then(|run| run.session_id.clone())
                .or_else(|| i.session_id.clone());
            r.workspace = i.workspace.clone();
            r.host = i.host.clone();
            r.totals = i.totals;
            l.issues.insert(i.id.clone(), r);
        }
        l
    }

    /// The record of `issue_id`, if any.
    pub fn get(&self, issue_id: &str) -> Option<&IssueRecord> {
        self.issues.get(issue_id)
    }

    /// A run was dispatched: remember its agent kind, workspace and host (`None`: this machine).
    pub fn dispatched(
        &mut self,
        issue_id: &str,
        identifier: &str,
        run_id: u64,
        (agent, host): (&str, Option<&str>),
        workspace: &Path,
        resumed: bool,
    ) {
        let r = self
            .issues
            .entry(issue_id.to_string())
            .or_insert_with(|| IssueRecord::new(identifier));
        r.identifier = identifier.to_string();
        r.agent = Some(agent.to_string());
        r.workspace = Some(workspace.to_path_buf());
        r.host = host.unwrap_or(LOCAL_HOST).to_string();
        r.run = Some(RunRecord {
            run_id,
            resumed,
            ..RunRecord::default()
        });
    }

    /// Fold one agent event of run `run_id` in: raw session id, agent process group (its leader's
    /// start time read with `start_time` when the pid changes), usage incl. cache, cost.
    pub fn observe(
        &mut self,
        issue_id: &str,
        run_id: u64,
        ev: &AgentEvent,
        start_time: &dyn Fn(u32) -> Option<u64>,
    ) {
        let Some(r) = self.issues.get_mut(issue_id) else {
            return;
        };
        let Some(run) = r.run.as_mut().filter(|x| x.run_id == run_id) else {
            return;
        };
        if let Some(id) = ev.session_id.as_deref().and_then(raw_session_id) {
            if r.session_id.as_deref() != Some(id) {
                r.session_id = Some(id.chars().take(128).collect());
            }
        }
        if matches!(
            ev.kind,
            AgentEventKind::TurnCompleted | AgentEventKind::TurnFailed
        ) {
            r.totals.turns = r.totals.turns.saturating_add(1);
        }
        if let Some(pid) = ev.agent_pid.filter(|&p| p > 1 && p != run.pgid) {
            run.pgid = pid;
            run.leader_start_time = start_time(pid).unwrap_or(0);
        }
        if let Some(d) = &ev.usage_delta {
            let delta = StoredTotals {
                input_tokens: d.input_tokens,
                output_tokens: d.output_tokens,
                cache_read_tokens: d.cache_read_input_tokens,
                cache_creation_tokens: d.cache_creation_input_tokens,
                cost_usd: 0.0,
                turns: 0,
            };
            add_totals(&mut r.totals, &delta);
        }
        if let Some(c) = ev.session_cost_usd.filter(|c| c.is_finite() && *c >= 0.0) {
            // Session-cumulative, like the engine's totals: a drop means a new session started
            // from zero.
            let already_counted = if c >= run.last_cost {
                run.last_cost
            } else {
                0.0
            };
            r.totals.cost_usd += c - already_counted;
            run.last_cost = c;
        }
    }

    /// True if the current run of `issue_id` resumed a session after a restart.
    pub fn resumed(&self, issue_id: &str) -> bool {
        self.issues
            .get(issue_id)
            .and_then(|r| r.run.as_ref())
            .is_some_and(|r| r.resumed)
    }
}

/// Ids of the issues the scheduler knows: running, retry-queued, parked or with a run count.
fn known_ids(state: &OrchestratorState) -> BTreeSet<&str> {
    let mut ids: BTreeSet<&str> = BTreeSet::new();
    ids.extend(state.running.keys().map(String::as_str));
    ids.extend(state.retry_attempts.keys().map(String::as_str));
    ids.extend(state.blocked.keys().map(String::as_str));
    ids.extend(state.runs_since_active.keys().map(String::as_str));
    ids
}

/// Engine time → wall-clock Unix ms.
fn to_wall(t: Millis, now: Millis, wall_now: u64) -> u64 {
    let w = i128::from(t) - i128::from(now) + i128::from(wall_now);
    u64::try_from(w.max(0)).unwrap_or(u64::MAX)
}

/// Wall-clock Unix ms → engine time.
fn from_wall(w: u64, now: Millis, wall_now: u64) -> Millis {
    let t = i128::from(w) - i128::from(wall_now) + i128::from(now);
    u64::try_from(t.max(0)).unwrap_or(u64::MAX)
}

/// The `state.json` entries for `state` at engine time `now` / wall time `wall_now`, one per
/// known issue, in issue-id order. Also forgets ledger records of issues no longer known.
pub fn project(
    state: &OrchestratorState,
    ledger: &mut Ledger,
    now: Millis,
    wall_now: u64,
) -> Vec<StoredIssue> {
    let ids = known_ids(state);
    ledger.issues.retain(|id, _| ids.contains(id.as_str()));
    for (id, r) in ledger.issues.iter_mut() {
        let current = state.running.get(id).map(|e| e.run_id);
        r.run = r.run.take().filter(|run| Some(run.run_id) == current);
    }
    ids.into_iter()
        .map(|id| project_one(state, ledger.issues.get(id), id, now, wall_now))
        .collect()
}

fn project_one(
    state: &OrchestratorState,
    rec: Option<&IssueRecord>,
    id: &str,
    now: Millis,
    wall_now: u64,
) -> StoredIssue {
    let running = state.running.get(id);
    let retry = state.retry_attempts.get(id);
    let blocked = state.blocked.get(id);
    let identifier = running
        .map(|e| e.issue.identifier.as_str())
        .or(retry.map(|r| r.identifier.as_str()))
        .or(blocked.map(|b| b.identifier.as_str()))
        .or(rec.map(|r| r.identifier.as_str()))
        .unwrap_or(id);
    let mut s = StoredIssue::new(id, identifier);
    s.runs = state.runs_since_active.get(id).copied().unwrap_or(0);
    s.attempt = match (running, retry) {
        (Some(e), _) => e.attempt.unwrap_or(0),
        (None, Some(r)) => r.attempt,
        _ => 0,
    };
    s.retry = retry.map(|r| StoredRetry {
        due_at: to_wall(r.due_at, now, wall_now),
        attempt: r.attempt,
        error: r.error.clone(),
        kind: match r.kind {
            RetryKind::Continuation => StoredRetryKind::Continuation,
            RetryKind::Failure => StoredRetryKind::Failure,
        },
    });
    s.parked = blocked.map(|b| StoredParked {
        reason: b.reason.clone(),
        state: b.state.clone(),
        fingerprint: b.fingerprint.clone(),
        since: to_wall(b.since, now, wall_now),
        kind: Some(b.kind.as_str().to_string()),
    });
    s.workspace = running
        .map(|e| e.workspace_path.clone())
        .or(retry.map(|r| r.workspace_path.clone()))
        .or(blocked.map(|b| b.workspace_path.clone()))
        .or(rec.and_then(|r| r.workspace.clone()));
    if let Some(r) = rec {
        s.agent = r.agent.clone();
        s.session_id = r.session_id.clone();
        s.host = r.host.clone();
        s.totals = r.totals;
    }
    // The engine's per-issue spend (what the budgets count) is authoritative when present.
    if let Some(sp) = state.spend.get(id) {
        s.totals = StoredTotals {
            input_tokens: sp.tokens.input_tokens,
            output_tokens: sp.tokens.output_tokens,
            cache_read_tokens: sp.tokens.cache_read_input_tokens,
            cache_creation_tokens: sp.tokens.cache_creation_input_tokens,
            cost_usd: sp.cost_usd,
            turns: sp.turns,
        };
    }
    s.running = running.map(|e| {
        let run = rec.and_then(|r| r.run.as_ref());
        StoredRun {
            pgid: run.map_or(0, |r| r.pgid),
            leader_start_time: run.map_or(0, |r| r.leader_start_time),
            started_at: to_wall(e.started_at, now, wall_now),
            agent: s.agent.clone().unwrap_or_default(),
            session_id: s.session_id.clone(),
        }
    });
    s
}

/// The class of a parking reason (`max_attempts`, `max_runs`, `budget_exceeded`).
pub fn park_kind(reason: &str) -> Option<&'static str> {
    if reason.starts_with("max_attempts") {
        Some("max_attempts")
    } else if reason.starts_with("max_runs") {
        Some("max_runs")
    } else if reason.starts_with("budget") {
        Some("budget_exceeded")
    } else {
        None
    }
}

/// Put a startup [`RecoveryPlan`] into a fresh `state` at engine time `now` / wall time
/// `wall_now`: queued retries (original due times; interrupted runs due at once), parked issues,
/// run counts (an interrupted run is not counted twice: its resumption counts it again) and the
/// totals. Returns the sessions to resume, by issue id.
pub fn apply_plan(
    state: &mut OrchestratorState,
    plan: &RecoveryPlan,
    now: Millis,
    wall_now: u64,
) -> BTreeMap<String, ResumeInfo> {
    let mut resumes = BTreeMap::new();
    for (id, c) in &plan.counts {
        if c.runs > 0 {
            state.runs_since_active.insert(id.clone(), c.runs);
        }
        if c.totals != StoredTotals::default() {
            state.spend.insert(id.clone(), spend_of(&c.totals));
        }
    }
    for r in &plan.retries {
        if r.is_interrupted_run() {
            if let Some(n) = state.runs_since_active.get_mut(&r.issue_id) {
                *n = n.saturating_sub(1);
            }
        }
        if let Some(info) = &r.resume {
            resumes.insert(r.issue_id.clone(), info.clone());
        }
        let workspace = r
            .workspace
            .clone()
            .unwrap_or_else(|| workspace_path(&state.policy.workspace_root, &r.identifier));
        let kind = match r.kind {
            StoredRetryKind::Continuation => RetryKind::Continuation,
            StoredRetryKind::Failure => RetryKind::Failure,
        };
        let attempt = r.attempt.unwrap_or(1).max(1);
        let due_at = now.saturating_add(r.due_in_ms);
        let entry = state.queue_retry(&r.issue_id, &r.identifier, kind, attempt, due_at, workspace);
        entry.error = r.error.clone();
        // The interrupted run's host has its workspace and session.
        entry.host = r
            .resume
            .as_ref()
            .map(|i| i.host.clone())
            .filter(|h| h != LOCAL_HOST);
    }
    restore_parked(state, plan, now, wall_now);
    restore_totals(state, &plan.totals);
    resumes
}

/// The engine's per-issue spend from stored totals (the budgets keep counting after a restart).
fn spend_of(t: &StoredTotals) -> IssueSpend {
    let total = t
        .input_tokens
        .saturating_add(t.output_tokens)
        .saturating_add(t.cache_read_tokens)
        .saturating_add(t.cache_creation_tokens);
    IssueSpend {
        tokens: TokenCounts {
            input_tokens: t.input_tokens,
            output_tokens: t.output_tokens,
            cache_read_input_tokens: t.cache_read_tokens,
            cache_creation_input_tokens: t.cache_creation_tokens,
            total_tokens: total,
        },
        cost_usd: t.cost_usd,
        turns: t.turns,
    }
}

fn restore_parked(state: &mut OrchestratorState, plan: &RecoveryPlan, now: Millis, wall_now: u64) {
    for p in &plan.parked {
        state.blocked.insert(
            p.issue_id.clone(),
            BlockedEntry {
                issue_id: p.issue_id.clone(),
                identifier: p.identifier.clone(),
                url: None,
                state: p.state.clone(),
                reason: p.reason.clone(),
                since: from_wall(p.since, now, wall_now),
                fingerprint: p.fingerprint.clone(),
                kind: match p.kind.as_deref().or(park_kind(&p.reason)) {
                    Some("max_attempts") => ParkKind::MaxAttempts,
                    Some("budget_exceeded") => ParkKind::BudgetExceeded,
                    _ => ParkKind::MaxRuns,
                },
                workspace_path: p
                    .workspace
                    .clone()
                    .unwrap_or_else(|| workspace_path(&state.policy.workspace_root, &p.identifier)),
            },
        );
    }
}

fn restore_totals(state: &mut OrchestratorState, totals: &StoredTotals) {
    let t = &mut state.agent_totals;
    t.tokens.input_tokens = t.tokens.input_tokens.saturating_add(totals.input_tokens);
    t.tokens.output_tokens = t.tokens.output_tokens.saturating_add(totals.output_tokens);
    t.tokens.cache_read_input_tokens = t
        .tokens
        .cache_read_input_tokens
        .saturating_add(totals.cache_read_tokens);
    t.tokens.cache_creation_input_tokens = t
        .tokens
        .cache_creation_input_tokens
        .saturating_add(totals.cache_creation_tokens);
    t.tokens.total_tokens = t
        .tokens
        .input_tokens
        .saturating_add(t.tokens.output_tokens)
        .saturating_add(t.tokens.cache_read_input_tokens)
        .saturating_add(t.tokens.cache_creation_input_tokens);
    t.turns = t.turns.saturating_add(u64::from(totals.turns));
    if totals.cost_usd.is_finite() {
        t.cost_usd += totals.cost_usd;
    }
}
