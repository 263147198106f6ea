//! The decision core: `handle(state, event, now) -> Vec<Action>`. Every scheduling decision of
//! spec §7, §8 and §16 happens here, as a pure function of the state, one event and the current
//! time. The runtime executes the returned actions and feeds their results back as events; timers
//! (poll tick, retries, stall checks, the reload debounce, the shutdown grace period) are not
//! threads but [`next_deadline`], the earliest moment `Event::Wake` has work to do.

use std::path::{Path, PathBuf};

use log::{debug, error, info, warn};

use crate::agent::{AgentEvent, AgentEventKind};
use crate::model::Issue;
use crate::tracker::TrackerBudget;
use crate::workspace::workspace_path;

use super::budget;
use super::gate::{CallOutcome, TrackerOp};
use super::hosts::{self, Placement};
use super::rules::{self, Ineligible, CONTINUATION_DELAY_MS, NO_SLOTS_ERROR, RELOAD_DEBOUNCE_MS};
use super::state::{
    BlockedEntry, EventRecord, Millis, OrchestratorState, ParkKind, Policy, Resume, RetryEntry,
    RetryKind, RunningEntry, StopReason, TokenCounts, WorkerPhase, EVENT_SUMMARY_CHARS,
    RECENT_EVENTS_CAP,
};

/// Why a poll produced no candidates: the dispatch preflight failed (config or
/// `tracker.validate()`: skip dispatch, keep reconciling), or the candidate fetch failed (a
/// secret-free message; for rate limits, no poll before `retry_at`).
#[derive(Debug, Clone, PartialEq)]
pub enum PollSkip {
    Preflight(String),
    Tracker {
        message: String,
        retry_at: Option<Millis>,
    },
}

/// How a worker thread ended.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkerOutcome {
    /// The turn loop finished (issue left active, max_turns reached, …): continuation retry.
    Normal,
    /// The attempt failed with a reason: backoff retry.
    Failed(String),
    /// The worker honoured a cancellation.
    Cancelled,
    /// The run's SSH host failed (connection or startup: the `host_unavailable` class). Before
    /// the agent started (`started: false`) the run is re-dispatched to another host with no
    /// attempt counted; after, it is a normal failed attempt. Either way the host is marked down.
    HostFailed { started: bool, error: String },
    /// A spawn ran out of file descriptors or processes (or the descriptor reserve was reached)
    /// before the agent started: retried soon, with no attempt counted.
    ResourceExhausted(String),
}

/// Progress reports from a worker: a phase entered, turn `n` (1-based) starting, the issue
/// refreshed between turns.
// Short-lived messages; boxing the issue would only add noise.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum WorkerProgress {
    Phase(WorkerPhase),
    TurnStarted(u32),
    IssueRefreshed(Issue),
}

/// Inputs to the core. Events about a run name its issue id and the `run_id` of its
/// `Action::Dispatch`; events of another run are ignored.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A timer moment: start whatever is due (poll tick, retry refreshes, stall kills).
    Wake,
    /// Result of an `Action::StartPoll`: the running issues' refresh (`None` when none was
    /// needed; `Err` keeps workers running), then the candidates or why there are none.
    PollResult {
        running_ids: Vec<String>,
        refreshed: Option<Result<Vec<Issue>, String>>,
        candidates: Result<Vec<Issue>, PollSkip>,
        rate_limit: Option<TrackerBudget>,
    },
    /// One retry's answer from an `Action::FetchIssues`, for retry generation `seq`; `Ok(None)`
    /// when the issue is gone.
    RetryRefreshed {
        issue_id: String,
        seq: u64,
        result: Result<Option<Issue>, String>,
    },
    WorkerProgress {
        issue_id: String,
        run_id: u64,
        progress: WorkerProgress,
    },
    /// Consecutive agent events of one run, oldest first (the runtime merges bursts into one).
    AgentUpdates {
        issue_id: String,
        run_id: u64,
        events: Vec<AgentEvent>,
    },
    /// The worker thread ended (after `after_run`).
    WorkerExited {
        issue_id: String,
        run_id: u64,
        outcome: WorkerOutcome,
    },
    /// WORKFLOW.md may have changed: re-read it once the pings have been quiet for
    /// [`RELOAD_DEBOUNCE_MS`] (`Action::ReloadWorkflow`).
    ReloadRequested,
    /// A valid WORKFLOW.md reload.
    ConfigReloaded(Policy),
    /// Operator asked for an immediate poll + reconcile.
    RefreshRequested,
    /// How the tracker calls of one operation ended (sent before that operation's result), for
    /// the request gate.
    TrackerCalls(Vec<CallOutcome>),
    /// Points one tracker operation cost (0 for a tracker without a budget), sent after its
    /// `TrackerCalls` and before its result; a `Fetch` report frees the fetch batch slot.
    TrackerSpent { op: TrackerOp, points: u64 },
    /// A worker waits for its between-turn refresh: the next fetch batch refreshes the issues
    /// workers wait for (the runtime keeps their ids and hands them the answers).
    TurnRefreshWanted,
    /// SIGINT/SIGTERM.
    Shutdown,
    /// Issues found in terminal states at startup: remove their workspaces (spec §8.6).
    TerminalAtStartup(Vec<Issue>),
    /// A `CleanWorkspace` finished (removed, nothing to remove, or failed): the issue may be
    /// dispatched again.
    WorkspaceRemoved { issue_id: String },
    /// Result of an `Action::ProbeHost`: `Err` with the reason while it is still unreachable.
    HostProbed {
        host: String,
        result: Result<(), String>,
    },
    /// Result of an `Action::StopOrphan`: `Ok(stopped)` once the group is known to be gone (or
    /// not ours; `true` when this check stopped it), `Err` when its host did not answer.
    OrphanChecked {
        issue_id: String,
        result: Result<bool, String>,
    },
}

/// Outputs of the core, executed by the runtime. A `host` of `None` is this machine.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Refresh `running_ids` (may be empty) by id, run preflight, fetch candidates; answer with
    /// `PollResult`.
    StartPoll { running_ids: Vec<String> },
    /// One by-id fetch batch (one per slot of the request gate): the due retries' issues
    /// (`(issue id, generation)`), answered with a `RetryRefreshed` each, and, when
    /// `refresh_workers`, the issues workers wait for between turns (answered to them by the
    /// runtime); its `TrackerSpent` frees the slot.
    FetchIssues {
        retries: Vec<(String, u64)>,
        refresh_workers: bool,
    },
    /// Start a worker thread: `run_id` is echoed in its events, `attempt` is `None` for a first
    /// run (the template's `attempt`), `workspace_path` is recorded now. `stale_workspace`: the
    /// host holds an older copy of the workspace (the issue ran on another host since), removed
    /// (with `before_remove`) before a fresh one is created.
    Dispatch {
        run_id: u64,
        issue: Issue,
        attempt: Option<u32>,
        workspace_path: PathBuf,
        host: Option<String>,
        resume: Option<Resume>,
        stale_workspace: bool,
    },
    /// Cancel a running worker (its agent process group is killed, `after_run` runs).
    StopWorker {
        issue_id: String,
        run_id: u64,
        reason: StopReason,
    },
    /// Remove a workspace (after its worker has exited), running `before_remove` with the last
    /// known issue; answer with `WorkspaceRemoved` (the issue is not dispatched before that).
    CleanWorkspace {
        issue: Issue,
        workspace_path: PathBuf,
        host: Option<String>,
    },
    /// Re-read WORKFLOW.md (the debounce elapsed); a valid change comes back as
    /// `Event::ConfigReloaded`.
    ReloadWorkflow,
    /// Reply to a refresh request: whether it joined a pending or running poll, and when the
    /// poll that serves it starts when that is later (spacing or a tracker pause).
    RefreshAck {
        coalesced: bool,
        deferred_until: Option<Millis>,
    },
    /// Shutdown requested and no worker is left (or the grace period is over).
    ShutdownComplete,
    /// Check whether a down SSH host answers again; answer with `Event::HostProbed`.
    ProbeHost { host: String },
    /// Stop an agent group a previous Baton left behind, through the host that owns it, only if
    /// its leader still has the recorded start time; answer with `Event::OrphanChecked`.
    StopOrphan {
        issue_id: String,
        host: Option<String>,
        pgid: u32,
        leader_start: u64,
    },
}

/// Apply one event at time `now`; return what the runtime must do.
pub fn handle(state: &mut OrchestratorState, event: Event, now: Millis) -> Vec<Action> {
    let mut out = Vec::new();
    match event {
        Event::Wake => on_wake(state, now, &mut out),
        Event::PollResult {
            running_ids,
            refreshed,
            candidates,
            rate_limit,
        } => on_poll_result(
            state,
            running_ids,
            refreshed,
            candidates,
            rate_limit,
            now,
            &mut out,
        ),
        Event::RetryRefreshed {
            issue_id,
            seq,
            result,
        } => on_retry_refreshed(state, &issue_id, seq, result, now, &mut out),
        Event::WorkerProgress {
            issue_id,
            run_id,
            progress,
        } => on_progress(state, &issue_id, run_id, progress, now),
        Event::AgentUpdates {
            issue_id,
            run_id,
            events,
        } => on_agent_updates(state, &issue_id, run_id, events, now, &mut out),
        Event::WorkerExited {
            issue_id,
            run_id,
            outcome,
        } => on_worker_exit(state, &issue_id, run_id, outcome, now, &mut out),
        Event::ReloadRequested => {
            // Trailing debounce: every ping pushes the re-read back.
            state.reload_due = Some(now.saturating_add(RELOAD_DEBOUNCE_MS));
        }
        Event::ConfigReloaded(policy) => on_reload(state, policy, now),
        Event::RefreshRequested => on_refresh(state, now, &mut out),
        Event::TrackerCalls(outcomes) => state.poll.gate.note_all(&outcomes, now),
        Event::TrackerSpent { op, points } => {
            state.poll.gate.pace.note_spent(op, points, now);
            replan(state, now);
        }
        Event::TurnRefreshWanted => state.poll.gate.pace.want_refresh(now),
        Event::Shutdown => on_shutdown(state, now, &mut out),
        Event::TerminalAtStartup(issues) => clean_terminal_at_startup(state, issues, &mut out),
        Event::WorkspaceRemoved { issue_id } => {
            if let Some(left) = state.cleaning.get_mut(&issue_id) {
                *left = left.saturating_sub(1);
                if *left == 0 {
                    state.cleaning.remove(&issue_id);
                }
            }
        }
        Event::HostProbed { host, result } => recheck_orphans(state, &host, result, now, &mut out),
        Event::OrphanChecked { issue_id, result } => orphan_checked(state, &issue_id, result, now),
    }
    out
}

/// The startup cleanup of issues already terminal. No record says which host holds an old
/// workspace: it is cleaned wherever it may be.
fn clean_terminal_at_startup(
    state: &mut OrchestratorState,
    issues: Vec<Issue>,
    out: &mut Vec<Action>,
) {
    let hosts: Vec<Option<String>> = if state.policy.ssh_hosts.is_empty() {
        vec![None]
    } else {
        state.policy.ssh_hosts.iter().cloned().map(Some).collect()
    };
    for issue in issues {
        if state.running.contains_key(&issue.id) || state.claimed.contains(&issue.id) {
            continue;
        }
        let path = workspace_path(&state.policy.workspace_root, &issue.identifier);
        hosts::take_workspace_hosts(state, &issue.id); // every host is cleaned below
        for host in &hosts {
            clean_workspace(state, issue.clone(), path.clone(), host.clone(), out);
        }
    }
}

/// Ask for the removal of `issue`'s workspace on `host` and on every other host holding a copy;
/// the issue is held (not dispatched) until the `Event::WorkspaceRemoved` of every removal asked
/// for.
fn clean_workspace(
    state: &mut OrchestratorState,
    issue: Issue,
    path: PathBuf,
    host: Option<String>,
    out: &mut Vec<Action>,
) {
    let mut holders = vec![host];
    for h in hosts::take_workspace_hosts(state, &issue.id) {
        if !holders.contains(&Some(h.clone())) {
            holders.push(Some(h));
        }
    }
    let pending = state.cleaning.entry(issue.id.clone()).or_default();
    *pending = pending.saturating_add(holders.len() as u32);
    for host in holders {
        out.push(Action::CleanWorkspace {
            issue: issue.clone(),
            workspace_path: path.clone(),
            host,
        });
    }
}

/// The earliest time at which `Event::Wake` would do something (`None`: nothing scheduled):
/// the debounced reload, and either the shutdown grace end or the poll, retry and stall timers.
pub fn next_deadline(state: &OrchestratorState) -> Option<Millis> {
    let mut best: Option<Millis> = None;
    let mut consider = |t: Millis| best = Some(best.map_or(t, |b| b.min(t)));
    state.reload_due.into_iter().for_each(&mut consider);
    if state.shutting_down {
        state.shutdown_deadline.into_iter().for_each(&mut consider);
        return best;
    }
    let allowed = state.poll.gate.allowed_at();
    if !state.poll.in_flight {
        consider(state.poll.next_poll_at.max(allowed));
    }
    if let Some(slot) = state.poll.gate.pace.fetch_due(allowed) {
        if let Some(at) = state.poll.gate.pace.refresh_wanted_at {
            consider(slot.max(at));
        }
        for r in state.retry_attempts.values().filter(|r| !held(state, r)) {
            consider(r.due_at.max(slot));
        }
    }
    state.orphans.values().for_each(|o| consider(o.give_up_at));
    hosts::next_probe(state).into_iter().for_each(&mut consider);
    if state.policy.stall_timeout_ms > 0 {
        let stall = state.policy.stall_timeout_ms as u64;
        for e in state.running.values() {
            if e.stop.is_none() && e.phase == WorkerPhase::Agent {
                consider(activity_at(e).saturating_add(stall).saturating_add(1));
            }
        }
    }
    best
}

/// When stall measurement starts: last agent event, or phase/turn entry when later or none.
fn activity_at(e: &RunningEntry) -> Millis {
    e.last_event_at.unwrap_or(0).max(e.phase_entered_at)
}

fn on_wake(state: &mut OrchestratorState, now: Millis, out: &mut Vec<Action>) {
    if state.reload_due.is_some_and(|t| t <= now) {
        // Reload first and alone: the new config is applied before anything else due now runs
        // (the runtime wakes again at once, the other deadlines having passed).
        state.reload_due = None;
        out.push(Action::ReloadWorkflow);
        return;
    }
    if state.shutting_down {
        shutdown_grace_check(state, now, out);
        return;
    }
    detect_stalls(state, now, out);
    give_up_orphans(state, now);
    for host in hosts::due_probes(state, now) {
        out.push(Action::ProbeHost { host });
    }
    start_fetch_if_due(state, now, out);
    start_poll_if_due(state, now, out);
}

/// Start a fetch batch when its slot has come and something waits for it: every due retry and,
/// when workers asked, their between-turn refreshes. Like polls, it waits out a pause.
fn start_fetch_if_due(state: &mut OrchestratorState, now: Millis, out: &mut Vec<Action>) {
    let gate = &mut state.poll.gate;
    if gate
        .pace
        .fetch_due(gate.allowed_at())
        .is_none_or(|due| now < due)
    {
        return;
    }
    let mut retries = Vec::new();
    let orphans = &state.orphans;
    for r in state.retry_attempts.values_mut() {
        // Like `held`: an issue whose old agent may still run waits.
        if !r.in_flight && !orphans.contains_key(&r.issue_id) && r.due_at <= now {
            r.in_flight = true;
            debug!(
                "retry due issue_id={} issue_identifier={} attempt={}",
                r.issue_id, r.identifier, r.attempt
            );
            retries.push((r.issue_id.clone(), r.seq));
        }
    }
    let refresh_workers = gate.pace.refresh_wanted_at.take().is_some();
    if retries.is_empty() && !refresh_workers {
        return;
    }
    gate.pace.fetch_in_flight = true;
    gate.pace.fetch_started_at = Some(now);
    out.push(Action::FetchIssues {
        retries,
        refresh_workers,
    });
}

/// Recompute the budget plan from the policy and the tracker's last reported limit.
fn replan(state: &mut OrchestratorState, now: Millis) {
    let limit = state.poll.rate_limit.as_ref().and_then(|r| r.limit);
    let p = &state.policy;
    state
        .poll
        .gate
        .replan(p.poll_interval_ms, p.budget_share, limit, now);
}

/// Part A of reconciliation (spec §8.5): stop agents silent for longer than `stall_timeout_ms`.
fn detect_stalls(state: &mut OrchestratorState, now: Millis, out: &mut Vec<Action>) {
    if state.policy.stall_timeout_ms <= 0 {
        return;
    }
    let stall = state.policy.stall_timeout_ms as u64;
    for e in state.running.values_mut() {
        if e.stop.is_some() || e.phase != WorkerPhase::Agent {
            continue;
        }
        let idle = now.saturating_sub(activity_at(e));
        if idle > stall {
            warn!(
                "agent stalled, stopping worker issue_id={} issue_identifier={} session_id={} idle_ms={} stall_timeout_ms={}",
                e.issue.id,
                e.issue.identifier,
                e.session_id.as_deref().unwrap_or("-"),
                idle,
                stall
            );
            e.stop = Some(StopReason::Stalled);
            out.push(Action::StopWorker {
                issue_id: e.issue.id.clone(),
                run_id: e.run_id,
                reason: StopReason::Stalled,
            });
        }
    }
}

fn start_poll_if_due(state: &mut OrchestratorState, now: Millis, out: &mut Vec<Action>) {
    if state.shutting_down || state.poll.in_flight {
        return;
    }
    let due = state.poll.next_poll_at.max(state.poll.gate.allowed_at());
    if now < due {
        return;
    }
    state.poll.in_flight = true;
    state.poll.refresh_pending = false;
    state.poll.last_started_at = Some(now);
    let interval = state.poll.gate.poll_interval(state.policy.poll_interval_ms);
    state.poll.next_poll_at = now.saturating_add(interval);
    let running_ids: Vec<String> = state.running.keys().cloned().collect();
    out.push(Action::StartPoll { running_ids });
}

/// An operator refresh (API or webhook): coalesce into the next allowed poll, at most one per
/// the gate's spacing, and never start a request inside a pause.
fn on_refresh(state: &mut OrchestratorState, now: Millis, out: &mut Vec<Action>) {
    let coalesced = state.poll.in_flight || state.poll.refresh_pending;
    let mut deferred_until = None;
    if !state.shutting_down {
        state.poll.refresh_pending = true;
        let due = state.poll.gate.refresh_due(state.poll.last_started_at, now);
        if !state.poll.in_flight {
            state.poll.next_poll_at = state.poll.next_poll_at.min(due);
            start_poll_if_due(state, now, out);
        }
        if state.poll.refresh_pending && due > now {
            deferred_until = Some(due);
        }
    }
    out.push(Action::RefreshAck {
        coalesced,
        deferred_until,
    });
}

/// One tick's steps in spec order: the budget gate, reconcile, candidates, dispatch.
fn on_poll_result(
    state: &mut OrchestratorState,
    running_ids: Vec<String>,
    refreshed: Option<Result<Vec<Issue>, String>>,
    candidates: Result<Vec<Issue>, PollSkip>,
    rate_limit: Option<TrackerBudget>,
    now: Millis,
    out: &mut Vec<Action>,
) {
    state.poll.in_flight = false;
    if rate_limit.is_some() {
        state.poll.rate_limit = rate_limit;
    }
    replan(state, now);
    if let Some(started) = state.poll.last_started_at {
        state.poll.gate.last_poll_ms = now.saturating_sub(started);
        let interval = state.poll.gate.poll_interval(state.policy.poll_interval_ms);
        state.poll.next_poll_at = started.saturating_add(interval);
    }
    if let Err(PollSkip::Tracker {
        retry_at: Some(at), ..
    }) = &candidates
    {
        let retry_at = Some(*at);
        state
            .poll
            .gate
            .note(CallOutcome::RateLimited { retry_at }, now);
    }
    if state.poll.refresh_pending {
        // A refresh that arrived meanwhile: the next allowed poll serves it.
        let due = state.poll.gate.refresh_due(state.poll.last_started_at, now);
        state.poll.next_poll_at = state.poll.next_poll_at.min(due);
    }
    // 1. Reconcile (Part B) before anything is dispatched.
    match refreshed {
        Some(Ok(issues)) => reconcile(state, &running_ids, issues, out),
        Some(Err(e)) => warn!(
            "running issue refresh failed; keeping workers error={:?} running={}",
            e,
            running_ids.len()
        ),
        None => {}
    }
    if state.shutting_down {
        return;
    }
    // 2./3. Preflight and candidates.
    let issues = match candidates {
        Ok(v) => {
            // A success does not end a pause another operation's rate limit set.
            state.poll.last_success_at = Some(now);
            state.poll.last_error = None;
            v
        }
        Err(PollSkip::Preflight(msg)) => {
            error!("dispatch preflight failed; skipping dispatch this tick error={msg:?}");
            state.poll.last_error = Some(msg);
            return;
        }
        Err(PollSkip::Tracker { message, .. }) => {
            // Its `retry_at` was noted in the gate above.
            warn!("candidate fetch failed; skipping this tick error={message:?}");
            state.poll.last_error = Some(message);
            return;
        }
    };
    release_changed_blocks(state, &issues);
    forget_gone(state, &issues);
    dispatch_candidates(state, issues, now, out);
}

/// Steps 4./5.: sort the candidates and dispatch while slots remain; an issue out of runs or
/// over its budget is parked instead.
fn dispatch_candidates(
    state: &mut OrchestratorState,
    mut issues: Vec<Issue>,
    now: Millis,
    out: &mut Vec<Action>,
) {
    rules::sort_for_dispatch(&mut issues);
    for issue in issues {
        if rules::global_slots(state) == 0 {
            break;
        }
        if !should_dispatch(state, &issue) {
            continue;
        }
        let park_as = if runs_exhausted(state, &issue.id) {
            Some((ParkKind::MaxRuns, "max_runs_per_issue reached".to_string()))
        } else {
            over_budget(state, &issue.id).map(|reason| (ParkKind::BudgetExceeded, reason))
        };
        match park_as {
            Some((kind, reason)) => {
                let path = workspace_path(&state.policy.workspace_root, &issue.identifier);
                park(state, &issue, kind, &reason, path, now);
            }
            None => dispatch(state, issue, None, None, None, now, out),
        }
    }
}

/// Part B of reconciliation (spec §8.5, §16.3).
fn reconcile(
    state: &mut OrchestratorState,
    requested: &[String],
    issues: Vec<Issue>,
    out: &mut Vec<Action>,
) {
    let policy = &state.policy;
    for id in requested {
        let Some(entry) = state.running.get_mut(id) else {
            continue; // exited meanwhile
        };
        if entry.stop.is_some() {
            continue;
        }
        let found = issues.iter().find(|i| &i.id == id);
        if let Some(i) = found {
            entry.issue = i.clone();
        }
        let reason = match found {
            None => Some(StopReason::Missing),
            Some(i) => rules::stop_reason(policy, i),
        };
        if let Some(reason) = reason {
            info!(
                "stopping worker issue_id={} issue_identifier={} reason={} state={:?}",
                entry.issue.id,
                entry.issue.identifier,
                reason.as_str(),
                entry.issue.state
            );
            entry.stop = Some(reason);
            out.push(Action::StopWorker {
                issue_id: id.clone(),
                run_id: entry.run_id,
                reason,
            });
        }
    }
}

/// Un-park blocked issues whose state or labels changed, or that left the active candidates.
fn release_changed_blocks(state: &mut OrchestratorState, candidates: &[Issue]) {
    let ids: Vec<String> = state.blocked.keys().cloned().collect();
    for id in ids {
        let changed = match candidates.iter().find(|i| i.id == id) {
            None => {
                // Left the active candidates: its budget starts over when it comes back.
                state.spend.remove(&id);
                true
            }
            Some(i) => state.blocked[&id].fingerprint != rules::block_fingerprint(i),
        };
        if changed {
            if let Some(b) = state.blocked.remove(&id) {
                info!(
                    "issue unblocked issue_id={} issue_identifier={} reason=\"state or labels changed\"",
                    b.issue_id, b.identifier
                );
            }
            state.runs_since_active.remove(&id);
            state.recent_events.remove(&id);
            state.last_errors.remove(&id);
        }
    }
}

/// Forget what is kept about issues that have nothing worth keeping any more: not running,
/// waiting, parked, being cleaned or checked, and not among the active candidates (they left the
/// active states or the board; their counts start over if they come back). Keeps the state, and
/// so `state.json`, as small as the work in hand.
fn forget_gone(state: &mut OrchestratorState, candidates: &[Issue]) {
    let ids: std::collections::BTreeSet<&str> = candidates.iter().map(|i| i.id.as_str()).collect();
    let s = &mut *state;
    let keep = |id: &String| {
        ids.contains(id.as_str())
            || s.claimed.contains(id)
            || s.blocked.contains_key(id)
            || s.cleaning.contains_key(id)
            || s.orphans.contains_key(id)
    };
    let gone: Vec<String> = (s.runs_since_active.keys().chain(s.spend.keys()))
        .chain(s.last_errors.keys().chain(s.recent_events.keys()))
        .chain(s.completed.iter())
        .filter(|id| !keep(id))
        .cloned()
        .collect();
    for id in gone {
        s.runs_since_active.remove(&id);
        s.spend.remove(&id);
        s.last_errors.remove(&id);
        s.recent_events.remove(&id);
        s.completed.remove(&id);
    }
}

fn should_dispatch(state: &OrchestratorState, issue: &Issue) -> bool {
    rules::is_eligible(&state.policy, issue)
        && !state.running.contains_key(&issue.id)
        && !state.claimed.contains(&issue.id)
        && !state.cleaning.contains_key(&issue.id)
        && !state.blocked.contains_key(&issue.id)
        && rules::state_slot_free(state, &issue.state)
        && hosts::place(state, None) != Placement::Full
}

/// The park reason when the issue's lifetime spend has reached a budget limit.
fn over_budget(state: &OrchestratorState, id: &str) -> Option<String> {
    let spend = state.spend.get(id)?;
    budget::violation(&state.policy.budget, spend)
}

fn runs_exhausted(state: &OrchestratorState, id: &str) -> bool {
    state.runs_since_active.get(id).copied().unwrap_or(0) >= state.policy.max_runs_per_issue
}

/// Dispatch bookkeeping (spec §16.4), on the host [`hosts::place`] picks (`preferred` first);
/// a resumed session starts from the usage it had reported.
fn dispatch(
    state: &mut OrchestratorState,
    issue: Issue,
    attempt: Option<u32>,
    preferred: Option<&str>,
    resume: Option<Resume>,
    now: Millis,
    out: &mut Vec<Action>,
) {
    let recorded = hosts::workspace_host(state, &issue.id).map(str::to_string);
    let host = hosts::place(state, preferred.or(recorded.as_deref())).host();
    let stale_workspace = hosts::record_workspace(state, &issue.id, host.as_deref());
    let run_id = state.next_run_id;
    state.next_run_id += 1;
    state.counters.dispatches = state.counters.dispatches.saturating_add(1);
    let path = workspace_path(&state.policy.workspace_root, &issue.identifier);
    let runs = state.runs_since_active.entry(issue.id.clone()).or_insert(0);
    *runs += 1;
    info!(
        "dispatching issue_id={} issue_identifier={} attempt={} run={} workspace={}",
        issue.id,
        issue.identifier,
        attempt.map_or("null".to_string(), |a| a.to_string()),
        runs,
        path.display()
    );
    state.claimed.insert(issue.id.clone());
    state.retry_attempts.remove(&issue.id);
    state.blocked.remove(&issue.id);
    if let Some(h) = &host {
        info!(
            "dispatching on host issue_id={} issue_identifier={} host={h}",
            issue.id, issue.identifier
        );
    }
    if let Some(r) = &resume {
        info!(
            "event=session_resume issue_id={} issue_identifier={} agent={} session_id={}",
            issue.id, issue.identifier, r.agent, r.session
        );
    }
    state.running.insert(
        issue.id.clone(),
        RunningEntry {
            run_id,
            issue: issue.clone(),
            workspace_path: path.clone(),
            attempt,
            started_at: now,
            phase_entered_at: now,
            agent: state.policy.agent.clone(),
            agent_session: resume.as_ref().map(|r| r.session.clone()),
            tokens: resume.as_ref().map(|r| r.tokens).unwrap_or_default(),
            cost_usd: resume.as_ref().and_then(|r| r.cost_usd),
            resumed: resume.is_some(),
            host: host.clone(),
            ..RunningEntry::default()
        },
    );
    out.push(Action::Dispatch {
        run_id,
        issue,
        attempt,
        workspace_path: path,
        host,
        resume,
        stale_workspace,
    });
}

/// Release the claim and forget per-issue bookkeeping; `left_active` also resets the run count.
fn release(state: &mut OrchestratorState, id: &str, left_active: bool) {
    state.claimed.remove(id);
    state.retry_attempts.remove(id);
    if left_active {
        state.runs_since_active.remove(id);
        state.last_errors.remove(id);
        state.spend.remove(id);
    }
    if !state.blocked.contains_key(id) {
        state.recent_events.remove(id);
    }
}

fn park(
    state: &mut OrchestratorState,
    issue: &Issue,
    kind: ParkKind,
    reason: &str,
    workspace_path: PathBuf,
    now: Millis,
) {
    warn!(
        "issue parked as blocked issue_id={} issue_identifier={} reason={:?} state={:?} runs={} max_runs_per_issue={} max_attempts={}; move it out of its active state or change its labels to release it",
        issue.id,
        issue.identifier,
        reason,
        issue.state,
        state.runs_since_active.get(&issue.id).copied().unwrap_or(0),
        state.policy.max_runs_per_issue,
        state.policy.max_attempts.map_or("unlimited".into(), |a| a.to_string())
    );
    state.claimed.remove(&issue.id);
    state.retry_attempts.remove(&issue.id);
    state.blocked.insert(
        issue.id.clone(),
        BlockedEntry {
            issue_id: issue.id.clone(),
            identifier: issue.identifier.clone(),
            url: issue.url.clone(),
            state: issue.state.clone(),
            reason: reason.to_string(),
            kind,
            since: now,
            fingerprint: rules::block_fingerprint(issue),
            workspace_path,
        },
    );
}

fn schedule_retry(
    state: &mut OrchestratorState,
    issue: &Issue,
    attempt: u32,
    kind: RetryKind,
    error: Option<String>,
    workspace_path: PathBuf,
    now: Millis,
) {
    let delay = match kind {
        RetryKind::Continuation => CONTINUATION_DELAY_MS,
        RetryKind::Failure => rules::failure_backoff_ms(attempt, state.policy.max_retry_backoff_ms),
    };
    state.counters.retries_scheduled = state.counters.retries_scheduled.saturating_add(1);
    info!(
        "retry scheduled issue_id={} issue_identifier={} attempt={} delay_ms={} error={:?}",
        issue.id,
        issue.identifier,
        attempt,
        delay,
        error.as_deref().unwrap_or("")
    );
    if let Some(e) = &error {
        state.last_errors.insert(issue.id.clone(), e.clone());
    }
    let due_at = now.saturating_add(delay);
    let entry = state.queue_retry(
        &issue.id,
        &issue.identifier,
        kind,
        attempt,
        due_at,
        workspace_path,
    );
    entry.url = issue.url.clone();
    entry.error = error;
}

/// Failure retry, or park when it would exceed `agent.max_attempts`.
fn failure_retry(
    state: &mut OrchestratorState,
    issue: &Issue,
    attempt: u32,
    error: String,
    workspace_path: PathBuf,
    now: Millis,
) {
    if let Some(max) = state.policy.max_attempts {
        if attempt > max {
            state.last_errors.insert(issue.id.clone(), error);
            park(
                state,
                issue,
                ParkKind::MaxAttempts,
                "max_attempts reached",
                workspace_path,
                now,
            );
            return;
        }
    }
    schedule_retry(
        state,
        issue,
        attempt,
        RetryKind::Failure,
        Some(error),
        workspace_path,
        now,
    );
}

fn on_progress(
    state: &mut OrchestratorState,
    id: &str,
    run_id: u64,
    progress: WorkerProgress,
    now: Millis,
) {
    let Some(e) = state.running.get_mut(id).filter(|e| e.run_id == run_id) else {
        return;
    };
    match progress {
        WorkerProgress::Phase(p) => {
            e.phase = p;
            e.phase_entered_at = now;
        }
        WorkerProgress::TurnStarted(n) => {
            e.turn_count = n;
            e.phase_entered_at = now;
        }
        WorkerProgress::IssueRefreshed(i) => {
            if i.id == e.issue.id {
                e.issue = i;
            }
        }
    }
}

fn bounded_summary(s: &str) -> String {
    let one_line: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(EVENT_SUMMARY_CHARS)
        .collect();
    one_line
}

/// Apply agent events to the run, the totals and the issue's lifetime spend; after a turn's
/// terminal event, stop the worker (between turns) when a budget limit is reached.
fn on_agent_updates(
    state: &mut OrchestratorState,
    id: &str,
    run_id: u64,
    events: Vec<AgentEvent>,
    now: Millis,
    out: &mut Vec<Action>,
) {
    let Some(e) = state.running.get_mut(id).filter(|e| e.run_id == run_id) else {
        return;
    };
    let ring = state.recent_events.entry(id.to_string()).or_default();
    let spend = state.spend.entry(id.to_string()).or_default();
    for ev in events {
        let turn_ended = matches!(
            ev.kind,
            AgentEventKind::TurnCompleted | AgentEventKind::TurnFailed
        );
        let kind = ev.kind.as_str().to_string();
        let message = bounded_summary(&ev.summary);
        e.last_event = Some(kind.clone());
        e.last_event_at = Some(now);
        e.last_message = Some(message.clone());
        if let Some(sid) = ev.session_id {
            e.session_id = Some(bounded_summary(&sid));
        }
        note_process(e, ev.agent_session_id, ev.agent_pid, ev.agent_start_time);
        if let Some(rl) = &ev.rate_limits {
            state.agent_rate_limits = serde_json::to_value(rl).ok();
        }
        if let Some(d) = ev.usage_delta {
            e.tokens.add(&d);
            state.agent_totals.tokens.add(&d);
            spend.tokens.add(&d);
        }
        if let Some(c) = ev.session_cost_usd.filter(|c| c.is_finite() && *c >= 0.0) {
            let c = c.min(budget::MAX_COST_USD);
            let prev = e.cost_usd.unwrap_or(0.0);
            // Session-cumulative: add the difference; a drop means a new session started over.
            let delta = if c >= prev { c - prev } else { c };
            state.agent_totals.cost_usd = budget::add_cost(state.agent_totals.cost_usd, delta);
            spend.cost_usd = budget::add_cost(spend.cost_usd, delta);
            e.cost_usd = Some(c);
        }
        if turn_ended {
            spend.turns = spend.turns.saturating_add(1);
            state.agent_totals.turns = state.agent_totals.turns.saturating_add(1);
            if e.stop.is_none() {
                if let Some(reason) = budget::violation(&state.policy.budget, spend) {
                    warn!(
                        "budget reached; stopping worker after this turn issue_id={} issue_identifier={} reason={reason:?}",
                        e.issue.id, e.issue.identifier
                    );
                    e.stop = Some(StopReason::BudgetExceeded);
                    out.push(Action::StopWorker {
                        issue_id: e.issue.id.clone(),
                        run_id: e.run_id,
                        reason: StopReason::BudgetExceeded,
                    });
                }
            }
        }
        if ring.len() >= RECENT_EVENTS_CAP {
            ring.pop_front();
        }
        ring.push_back(EventRecord {
            at: now,
            event: kind,
            message,
        });
    }
}

/// Worker exit (spec §16.6), honouring a stop the orchestrator requested.
// Over 80 lines on purpose: one match over every stop reason and outcome, each with its decision and log line.
fn on_worker_exit(
    state: &mut OrchestratorState,
    id: &str,
    run_id: u64,
    outcome: WorkerOutcome,
    now: Millis,
    out: &mut Vec<Action>,
) {
    if state.running.get(id).map(|e| e.run_id) != Some(run_id) {
        debug!("ignoring exit of an unknown worker issue_id={id} run_id={run_id}");
        return;
    }
    let Some(entry) = state.running.remove(id) else {
        return;
    };
    let secs = now.saturating_sub(entry.started_at) as f64 / 1000.0;
    state.agent_totals.ended_seconds += secs;
    let issue = entry.issue.clone();
    let path = entry.workspace_path.clone();
    info!(
        "worker exited issue_id={} issue_identifier={} session_id={} outcome={:?} stop={} runtime_s={:.1}",
        issue.id,
        issue.identifier,
        entry.session_id.as_deref().unwrap_or("-"),
        outcome,
        entry.stop.map_or("none", |s| s.as_str()),
        secs
    );
    if state.shutting_down {
        release(state, id, false);
        if state.running.is_empty() {
            out.push(Action::ShutdownComplete);
        }
        return;
    }
    let next_attempt = entry.attempt.unwrap_or(0).saturating_add(1);
    match entry.stop {
        Some(StopReason::Terminal) => {
            release(state, id, true);
            state.completed.insert(id.to_string());
            clean_workspace(state, issue, path, entry.host.clone(), out);
        }
        Some(StopReason::Inactive) | Some(StopReason::Missing) => release(state, id, true),
        Some(StopReason::Unroutable) | Some(StopReason::Shutdown) => release(state, id, false),
        Some(StopReason::BudgetExceeded) => match over_budget(state, id) {
            Some(reason) => park(state, &issue, ParkKind::BudgetExceeded, &reason, path, now),
            // A reload raised the limit while the worker was stopping: carry on.
            None => schedule_retry(state, &issue, 1, RetryKind::Continuation, None, path, now),
        },
        Some(StopReason::Stalled) => {
            let msg = format!(
                "stalled: no agent activity for more than {} ms",
                state.policy.stall_timeout_ms
            );
            failure_retry(state, &issue, next_attempt, msg, path, now);
        }
        None => match outcome {
            WorkerOutcome::Normal => {
                state.completed.insert(id.to_string());
                schedule_retry(state, &issue, 1, RetryKind::Continuation, None, path, now);
            }
            WorkerOutcome::Failed(reason) => {
                let msg = format!("worker exited: {}", bounded_summary(&reason));
                failure_retry(state, &issue, next_attempt, msg, path, now);
            }
            WorkerOutcome::Cancelled => {
                failure_retry(
                    state,
                    &issue,
                    next_attempt,
                    "worker exited: cancelled".into(),
                    path,
                    now,
                );
            }
            WorkerOutcome::HostFailed { started, error } => {
                on_host_failure(state, &entry, started, &error, now);
            }
            WorkerOutcome::ResourceExhausted(error) => retry_uncounted(state, &entry, &error, now),
        },
    }
    // A retry prefers the host that has the workspace.
    if let Some(r) = state.retry_attempts.get_mut(id) {
        r.host = entry.host.clone();
    }
}

/// A run's SSH host failed: mark it down; before the agent started, re-dispatch soon with no
/// attempt counted (the run does not count either); after, a normal failed attempt.
fn on_host_failure(
    state: &mut OrchestratorState,
    entry: &RunningEntry,
    started: bool,
    error: &str,
    now: Millis,
) {
    if let Some(h) = &entry.host {
        hosts::mark_down(state, h, error, now);
    }
    if started {
        let msg = format!("worker exited: {}", bounded_summary(error));
        let next = entry.attempt.unwrap_or(0).saturating_add(1);
        failure_retry(
            state,
            &entry.issue,
            next,
            msg,
            entry.workspace_path.clone(),
            now,
        );
        return;
    }
    retry_uncounted(state, entry, error, now);
}

/// A run that ended before its agent started for a reason that is not the run's fault (a host
/// down, no descriptors): re-dispatch soon with the same attempt; the run does not count either.
fn retry_uncounted(state: &mut OrchestratorState, entry: &RunningEntry, error: &str, now: Millis) {
    let issue = &entry.issue;
    let path = entry.workspace_path.clone();
    let msg = format!("worker exited: {}", bounded_summary(error));
    if let Some(runs) = state.runs_since_active.get_mut(&issue.id) {
        *runs = runs.saturating_sub(1);
    }
    // Attempt 0 re-dispatches as a first run (see `on_retry_refreshed`).
    let attempt = entry.attempt.unwrap_or(0);
    schedule_retry(
        state,
        issue,
        attempt,
        RetryKind::Continuation,
        Some(msg),
        path,
        now,
    );
}

/// Retry timer handling (spec §8.4, §16.6) once the issue was refreshed by id.
// Over 80 lines on purpose: the spec §16.6 steps of a due retry, in order, with each outcome's log line next to its decision.
fn on_retry_refreshed(
    state: &mut OrchestratorState,
    id: &str,
    seq: u64,
    result: Result<Option<Issue>, String>,
    now: Millis,
    out: &mut Vec<Action>,
) {
    let Some(entry) = state
        .retry_attempts
        .get(id)
        .filter(|r| r.seq == seq)
        .cloned()
    else {
        debug!("ignoring stale retry result issue_id={id} seq={seq}");
        return;
    };
    state.retry_attempts.remove(id);
    if state.shutting_down {
        release(state, id, false);
        return;
    }
    let issue = match result {
        Err(e) => {
            let msg = format!("retry refresh failed: {}", bounded_summary(&e));
            wait(state, entry, &Issue::default(), msg, now);
            return;
        }
        Ok(None) => {
            info!(
                "releasing claim issue_id={} issue_identifier={} reason=\"issue no longer on the project\"",
                entry.issue_id, entry.identifier
            );
            release(state, id, true);
            return;
        }
        Ok(Some(i)) => i,
    };
    if release_if_ineligible(state, &issue, &entry.workspace_path, &entry.host, out) {
        return;
    }
    if runs_exhausted(state, id) {
        park(
            state,
            &issue,
            ParkKind::MaxRuns,
            "max_runs_per_issue reached",
            entry.workspace_path,
            now,
        );
        return;
    }
    if let Some(reason) = over_budget(state, id) {
        park(
            state,
            &issue,
            ParkKind::BudgetExceeded,
            &reason,
            entry.workspace_path,
            now,
        );
        return;
    }
    if rules::global_slots(state) == 0
        || !rules::state_slot_free(state, &issue.state)
        || hosts::place(state, entry.host.as_deref()) == Placement::Full
    {
        wait(state, entry, &issue, NO_SLOTS_ERROR.to_string(), now);
        return;
    }
    let attempt = (entry.attempt > 0).then_some(entry.attempt);
    let resume = entry.resume.filter(|r| {
        let same = r.agent == state.policy.agent;
        if !same {
            info!(
                "not resuming the interrupted session: agent.kind changed issue_id={id} recorded={} now={}",
                r.agent, state.policy.agent
            );
        }
        same
    });
    dispatch(
        state,
        issue,
        attempt,
        entry.host.as_deref(),
        resume,
        now,
        out,
    );
}

/// Queue a due retry again that could not run yet (no slot or host, a failed refresh). Waiting is
/// not an attempt: it keeps its attempt, kind, host and session, and waits its attempt's backoff.
fn wait(
    state: &mut OrchestratorState,
    entry: RetryEntry,
    issue: &Issue,
    error: String,
    now: Millis,
) {
    let delay = rules::failure_backoff_ms(entry.attempt.max(1), state.policy.max_retry_backoff_ms);
    info!(
        "retry waits issue_id={} issue_identifier={} attempt={} delay_ms={delay} reason={error:?}",
        entry.issue_id, entry.identifier, entry.attempt
    );
    state.counters.retries_scheduled = state.counters.retries_scheduled.saturating_add(1);
    state
        .last_errors
        .insert(entry.issue_id.clone(), error.clone());
    let r = state.queue_retry(
        &entry.issue_id,
        &entry.identifier,
        entry.kind,
        entry.attempt,
        now.saturating_add(delay),
        entry.workspace_path,
    );
    r.url = issue.url.clone().or(entry.url);
    r.error = Some(error);
    r.host = entry.host;
    r.resume = entry.resume;
}

/// The eligibility half of a due retry (spec §16.6): release the claim (and clean the workspace
/// when terminal) unless the refreshed issue may run again now. True when released.
fn release_if_ineligible(
    state: &mut OrchestratorState,
    issue: &Issue,
    workspace_path: &Path,
    host: &Option<String>,
    out: &mut Vec<Action>,
) -> bool {
    let reasons = rules::ineligibility(&state.policy, issue);
    match reasons.iter().filter_map(Ineligible::stop_reason).min() {
        Some(StopReason::Terminal) => {
            info!(
                "releasing claim issue_id={} issue_identifier={} reason=terminal state={:?}",
                issue.id, issue.identifier, issue.state
            );
            release(state, &issue.id, true);
            clean_workspace(
                state,
                issue.clone(),
                workspace_path.to_path_buf(),
                host.clone(),
                out,
            );
            true
        }
        Some(StopReason::Inactive) => {
            info!(
                "releasing claim issue_id={} issue_identifier={} reason=inactive state={:?}",
                issue.id, issue.identifier, issue.state
            );
            release(state, &issue.id, true);
            true
        }
        _ if !reasons.is_empty() || state.running.contains_key(&issue.id) => {
            info!(
                "releasing claim issue_id={} issue_identifier={} reason=\"not routable or blocked\"",
                issue.id, issue.identifier
            );
            release(state, &issue.id, false);
            true
        }
        _ => false,
    }
}

fn on_reload(state: &mut OrchestratorState, policy: Policy, now: Millis) {
    let pacing_changed = policy.poll_interval_ms != state.policy.poll_interval_ms
        || policy.budget_share != state.policy.budget_share;
    info!(
        "workflow config applied poll_interval_ms={} max_concurrent_agents={} stall_timeout_ms={}",
        policy.poll_interval_ms, policy.max_concurrent_agents, policy.stall_timeout_ms
    );
    state.policy = policy;
    replan(state, now);
    if pacing_changed && !state.poll.in_flight {
        if let Some(last) = state.poll.last_started_at {
            let interval = state.poll.gate.poll_interval(state.policy.poll_interval_ms);
            state.poll.next_poll_at = last.saturating_add(interval);
        }
    }
    // A reload may carry a fixed token: try it at once (a rate-limit pause stays).
    state.poll.gate.end_auth_backoff();
    hosts::retain_configured(state);
    release_budget_parks(state);
}

/// After a reload: un-park issues parked for a budget the new limits no longer exceed (they
/// are dispatched again by the next poll).
fn release_budget_parks(state: &mut OrchestratorState) {
    let ids: Vec<String> = state
        .blocked
        .values()
        .filter(|b| b.kind == ParkKind::BudgetExceeded)
        .map(|b| b.issue_id.clone())
        .collect();
    for id in ids {
        if over_budget(state, &id).is_none() {
            if let Some(b) = state.blocked.remove(&id) {
                info!(
                    "issue unblocked issue_id={} issue_identifier={} reason=\"budget raised\"",
                    b.issue_id, b.identifier
                );
            }
        }
    }
}

fn on_shutdown(state: &mut OrchestratorState, now: Millis, out: &mut Vec<Action>) {
    if !state.shutting_down {
        info!(
            "shutdown: stopping dispatch and {} worker(s)",
            state.running.len()
        );
        state.shutdown_deadline = Some(now.saturating_add(state.policy.shutdown_grace_ms));
    }
    state.shutting_down = true;
    let queued: Vec<String> = state.retry_attempts.keys().cloned().collect();
    for id in queued {
        release(state, &id, false);
    }
    for e in state.running.values_mut() {
        if e.stop != Some(StopReason::Shutdown) {
            // Even workers already stopping get the shutdown cancel again (idempotent).
            e.stop = Some(StopReason::Shutdown);
            out.push(Action::StopWorker {
                issue_id: e.issue.id.clone(),
                run_id: e.run_id,
                reason: StopReason::Shutdown,
            });
        }
    }
    if state.running.is_empty() {
        out.push(Action::ShutdownComplete);
    }
}

/// Bound the shutdown: once the grace period is over, exit with workers still running.
fn shutdown_grace_check(state: &mut OrchestratorState, now: Millis, out: &mut Vec<Action>) {
    if state.shutdown_deadline.is_some_and(|t| t <= now) {
        state.shutdown_deadline = None;
        error!(
            "shutdown: {} worker(s) did not stop within {} s; exiting anyway",
            state.running.len(),
            state.policy.shutdown_grace_ms / 1000
        );
        out.push(Action::ShutdownComplete);
    }
}

/// Characters kept of an agent's own session id.
const SESSION_ID_CHARS: usize = 128;

/// Record what an event says about the run's agent: its own session id (another session, e.g. a
/// fallback to a fresh one, reports its usage from zero) and its process group with the leader's
/// start time.
fn note_process(
    e: &mut RunningEntry,
    session: Option<String>,
    pid: Option<u32>,
    start: Option<u64>,
) {
    if let Some(raw) = session.filter(|s| e.agent_session.as_ref() != Some(s)) {
        if e.agent_session.is_some() {
            e.tokens = TokenCounts::default();
            e.cost_usd = None;
        }
        e.agent_session = Some(raw.chars().take(SESSION_ID_CHARS).collect());
    }
    if let Some(pid) = pid {
        if e.agent_pid != Some(pid) {
            e.agent_pid = Some(pid);
            e.leader_start = None;
        }
        e.leader_start = start.or(e.leader_start);
    }
}

/// A retry that must not start now: its refresh is out, or its issue's previous agent may still
/// run (an orphan not yet known to be stopped).
fn held(state: &OrchestratorState, r: &RetryEntry) -> bool {
    r.in_flight || state.orphans.contains_key(&r.issue_id)
}

/// An orphan check came back: a stopped (or gone, or not ours) group releases the issue; an
/// unreachable host keeps it waiting (`orphan unknown`) and is marked down, so the next good
/// probe checks again.
fn orphan_checked(
    state: &mut OrchestratorState,
    id: &str,
    result: Result<bool, String>,
    now: Millis,
) {
    let Some(o) = state.orphans.get_mut(id) else {
        return;
    };
    match result {
        Ok(stopped) => {
            state.orphans.remove(id);
            if stopped {
                state.counters.orphans_stopped = state.counters.orphans_stopped.saturating_add(1);
            }
            orphans_done(state);
        }
        Err(e) => {
            o.checking = false;
            warn!(
                "event=orphan_unknown issue_id={id} issue_identifier={} host={} pgid={} error={e:?}; the issue waits until the host answers (at most worker.orphan_grace_ms)",
                o.identifier,
                o.host.as_deref().unwrap_or("local"),
                o.pgid
            );
            if let Some(h) = o.host.clone() {
                hosts::mark_down(state, &h, &e, now);
            }
        }
    }
}

/// A probe of `host` came back; when it answers again, check its orphans that are not being
/// checked.
fn recheck_orphans(
    state: &mut OrchestratorState,
    host: &str,
    result: Result<(), String>,
    now: Millis,
    out: &mut Vec<Action>,
) {
    let up = result.is_ok();
    hosts::probed(state, host, result, now);
    for (id, o) in state.orphans.iter_mut().filter(|_| up) {
        if !o.checking && o.host.as_deref() == Some(host) {
            o.checking = true;
            out.push(Action::StopOrphan {
                issue_id: id.clone(),
                host: o.host.clone(),
                pgid: o.pgid,
                leader_start: o.leader_start,
            });
        }
    }
}

/// Stop waiting for orphans whose host has not answered within `worker.orphan_grace_ms`.
fn give_up_orphans(state: &mut OrchestratorState, now: Millis) {
    let before = state.orphans.len();
    state.orphans.retain(|id, o| {
        let keep = o.give_up_at > now;
        if !keep {
            warn!(
                "event=orphan_unknown issue_id={id} issue_identifier={} host={} pgid={}; no answer within worker.orphan_grace_ms, the issue may run again",
                o.identifier,
                o.host.as_deref().unwrap_or("local"),
                o.pgid
            );
        }
        keep
    });
    if state.orphans.len() < before {
        orphans_done(state);
    }
}

/// Once no orphan is left to check, log how many were stopped.
fn orphans_done(state: &OrchestratorState) {
    if state.orphans.is_empty() {
        info!(
            "event=orphans_checked orphans_stopped={}",
            state.counters.orphans_stopped
        );
    }
}
