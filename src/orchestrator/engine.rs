//! The decision core: every scheduling decision of spec §7, §8 and §16 as a pure function of the
//! state, one event and the time ([`handle`]). The runtime executes the returned actions and feeds
//! their results back as events; timers are not threads but [`next_deadline`].

use std::collections::BTreeMap;
use std::path::PathBuf;

use log::{debug, error, info, warn};

use crate::agent::AgentEvent;
use crate::agent::AgentEventKind::{TurnCompleted, TurnFailed};
use crate::model::Issue;
use crate::tracker::TrackerBudget;
use crate::workspace::workspace_path;

use super::budget;
use super::gate::{CallOutcome, TrackerOp};
use super::hosts;
use super::rules::{self, CONTINUATION_DELAY_MS, NO_SLOTS_ERROR, RELOAD_DEBOUNCE_MS};
use super::state::{
    BlockedEntry, EventRecord, Millis, OrchestratorState, Orphan, ParkKind, Policy, Resume,
    RetryEntry, RetryKind, RunningEntry, StopReason, TokenCounts, WorkerPhase, EVENT_SUMMARY_CHARS,
    RECENT_EVENTS_CAP,
};

/// Why a poll produced no candidates: the dispatch preflight failed (skip dispatch, keep
/// reconciling), or the candidate fetch failed (for rate limits, no poll before `retry_at`).
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
    /// The run's SSH host failed (`host_unavailable`): it is marked down; before the agent
    /// started, the run is re-dispatched with no attempt counted, after, it is a failed attempt.
    HostFailed { started: bool, error: String },
    /// A spawn ran out of descriptors or processes before the agent started: retried soon, with
    /// no attempt counted.
    ResourceExhausted(String),
}

/// Progress reports from a worker: a phase entered, turn `n` (1-based) starting, the issue
/// refreshed between turns (short-lived: boxing the issue would only add noise).
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
    /// A timer moment: start whatever is due.
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
    /// How the tracker calls of one operation ended (before its result), for the request gate.
    TrackerCalls(Vec<CallOutcome>),
    /// Points one tracker operation cost (0 for a tracker without a budget), sent after its
    /// `TrackerCalls` and before its result; a `Fetch` report frees the fetch batch slot.
    TrackerSpent { op: TrackerOp, points: u64 },
    /// A worker waits for its between-turn refresh, which the next fetch batch brings (the runtime
    /// keeps the workers' ids and hands them the answers).
    TurnRefreshWanted,
    /// SIGINT/SIGTERM.
    Shutdown,
    /// Issues found in terminal states at startup: remove their workspaces (spec §8.6).
    TerminalAtStartup(Vec<Issue>),
    /// A `CleanWorkspace` finished (whatever its result): the issue may be dispatched again.
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
    /// Refresh `running_ids` by id, run preflight, fetch candidates; answer with `PollResult`.
    StartPoll { running_ids: Vec<String> },
    /// One by-id fetch batch: the due retries' issues (`(issue id, generation)`, answered with a
    /// `RetryRefreshed` each) and, when `refresh_workers`, the issues workers wait for between
    /// turns; its `TrackerSpent` frees the gate's slot.
    FetchIssues {
        retries: Vec<(String, u64)>,
        refresh_workers: bool,
    },
    /// Start a worker thread (`run_id` is echoed in its events; `attempt` is `None` for a first
    /// run). `stale_workspace`: the host holds an older copy of the workspace (the issue ran on
    /// another host since), removed before a fresh one is created.
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
    /// Re-read WORKFLOW.md; a valid change comes back as `Event::ConfigReloaded`.
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
    let mut c = Core {
        s: state,
        now,
        out: Vec::new(),
    };
    match event {
        Event::Wake => c.wake(),
        Event::PollResult {
            running_ids,
            refreshed,
            candidates,
            rate_limit,
        } => c.poll_result(&running_ids, refreshed, candidates, rate_limit),
        Event::RetryRefreshed {
            issue_id,
            seq,
            result,
        } => c.retry_refreshed(&issue_id, seq, result),
        Event::WorkerProgress {
            issue_id,
            run_id,
            progress,
        } => c.progress(&issue_id, run_id, progress),
        Event::AgentUpdates {
            issue_id,
            run_id,
            events,
        } => c.agent_updates(&issue_id, run_id, events),
        Event::WorkerExited {
            issue_id,
            run_id,
            outcome,
        } => c.worker_exit(&issue_id, run_id, outcome),
        // Trailing debounce: every ping pushes the re-read back.
        Event::ReloadRequested => c.s.reload_due = Some(now.saturating_add(RELOAD_DEBOUNCE_MS)),
        Event::ConfigReloaded(policy) => c.reload(policy),
        Event::RefreshRequested => c.refresh(),
        Event::TrackerCalls(outcomes) => outcomes
            .into_iter()
            .for_each(|o| c.s.poll.gate.note(o, now)),
        Event::TrackerSpent { op, points } => {
            c.s.poll.gate.pace.note_spent(op, points, now);
            c.replan();
        }
        // The first waiting worker of a batch sets the time.
        Event::TurnRefreshWanted => c.s.poll.gate.pace.want_refresh(now),
        Event::Shutdown => c.shutdown(),
        Event::TerminalAtStartup(issues) => c.clean_terminal_at_startup(issues),
        Event::WorkspaceRemoved { issue_id } => {
            let left = c.s.cleaning.remove(&issue_id).unwrap_or(0);
            if left > 1 {
                c.s.cleaning.insert(issue_id, left - 1);
            }
        }
        Event::HostProbed { host, result } => c.out.extend(hosts::probed(c.s, &host, result, now)),
        Event::OrphanChecked { issue_id, result } => c.orphan_checked(&issue_id, result),
    }
    c.out
}

/// The earliest time at which `Event::Wake` would do something (`None`: nothing scheduled):
/// the debounced reload, and either the shutdown grace end or the poll, retry and stall timers.
pub fn next_deadline(s: &OrchestratorState) -> Option<Millis> {
    if s.shutting_down {
        return s.reload_due.into_iter().chain(s.shutdown_deadline).min();
    }
    let (allowed, pace) = (s.poll.gate.allowed_at(), &s.poll.gate.pace);
    let poll = (!s.poll.in_flight).then(|| s.poll.next_poll_at.max(allowed));
    let fetch = pace.fetch_due(allowed).into_iter().flat_map(|slot| {
        let retries = s.retry_attempts.values().filter(|r| !held(&s.orphans, r));
        let wanted = pace.refresh_wanted_at.into_iter();
        let due = wanted.chain(retries.map(|r| r.due_at));
        due.map(move |t| t.max(slot))
    });
    let orphans = s.orphans.values().map(|o| o.give_up_at);
    let stall = s.policy.stall_timeout_ms;
    let stalls = s.running.values().filter_map(|e| stalls_at(stall, e));
    let early = s.reload_due.into_iter().chain(poll);
    let timers = early.chain(fetch).chain(orphans);
    timers.chain(hosts::next_probe(s)).chain(stalls).min()
}

/// When stall measurement starts: last agent event, or phase/turn entry when later or none.
fn activity_at(e: &RunningEntry) -> Millis {
    e.last_event_at.unwrap_or(0).max(e.phase_entered_at)
}

/// When a worker that stays silent counts as stalled (spec §8.5 Part A): only in the agent phase,
/// not once stopping, and never with `stall_timeout_ms <= 0`.
fn stalls_at(stall_ms: i64, e: &RunningEntry) -> Option<Millis> {
    let watched = stall_ms > 0 && e.stop.is_none() && e.phase == WorkerPhase::Agent;
    watched.then(|| activity_at(e).saturating_add(stall_ms as u64 + 1))
}

/// A retry that must not start now: its refresh is out, or its issue's previous agent may still
/// run (an orphan not yet known to be stopped).
fn held(orphans: &BTreeMap<String, Orphan>, r: &RetryEntry) -> bool {
    r.in_flight || orphans.contains_key(&r.issue_id)
}

/// Remove `map[id]` when `current` says it is the one an event names (an older one's events are
/// stale).
fn take_if<T>(map: &mut BTreeMap<String, T>, id: &str, current: impl Fn(&T) -> bool) -> Option<T> {
    map.get(id).is_some_and(current).then(|| map.remove(id))?
}

/// Ask `e`'s worker to stop; what follows is decided by `reason` when it has exited.
fn stop(e: &mut RunningEntry, reason: StopReason, out: &mut Vec<Action>) {
    e.stop = Some(reason);
    out.push(Action::StopWorker {
        issue_id: e.issue.id.clone(),
        run_id: e.run_id,
        reason,
    });
}

/// Untrusted text (agent output, tracker errors) as one bounded line.
fn bounded_summary(s: &str) -> String {
    let one_line = s.chars().map(|c| if c.is_control() { ' ' } else { c });
    one_line.take(EVENT_SUMMARY_CHARS).collect()
}

fn should_dispatch(state: &OrchestratorState, issue: &Issue) -> bool {
    rules::is_eligible(&state.policy, issue)
        && !state.claimed.contains(&issue.id) // running or waiting
        && !state.cleaning.contains_key(&issue.id)
        && !state.blocked.contains_key(&issue.id)
        && rules::state_slot_free(state, &issue.state)
        && !hosts::is_full(state)
}

/// The park reason when the issue's lifetime spend has reached a budget limit.
fn over_budget(state: &OrchestratorState, id: &str) -> Option<String> {
    let spend = state.spend.get(id)?;
    budget::violation(&state.policy.budget, spend)
}

/// Why an issue parks instead of running: out of runs, or over a budget.
fn park_reason(state: &OrchestratorState, id: &str) -> Option<(ParkKind, String)> {
    let runs = state.runs_since_active.get(id).copied().unwrap_or(0);
    if runs >= state.policy.max_runs_per_issue {
        return Some((ParkKind::MaxRuns, "max_runs_per_issue reached".to_string()));
    }
    over_budget(state, id).map(|reason| (ParkKind::BudgetExceeded, reason))
}

/// Forget what is kept about issues that have nothing worth keeping any more: not running,
/// waiting, parked, being cleaned or checked, and not among the active candidates (they left the
/// active states or the board; their counts start over if they come back). Keeps the state, and
/// so `state.json`, as small as the work in hand.
fn forget_gone(s: &mut OrchestratorState, candidates: &[Issue]) {
    let ids: std::collections::BTreeSet<&str> = candidates.iter().map(|i| i.id.as_str()).collect();
    let keep = |id: &String| {
        ids.contains(id.as_str())
            || s.claimed.contains(id)
            || s.blocked.contains_key(id)
            || s.cleaning.contains_key(id)
            || s.orphans.contains_key(id)
    };
    s.runs_since_active.retain(|id, _| keep(id));
    s.spend.retain(|id, _| keep(id));
    s.last_errors.retain(|id, _| keep(id));
    s.recent_events.retain(|id, _| keep(id));
    s.completed.retain(keep);
}

/// The check of an orphan (on its own host): stop it if it still runs.
pub(super) fn check_orphan(issue_id: &str, o: &mut Orphan) -> Action {
    o.checking = true;
    Action::StopOrphan {
        issue_id: issue_id.to_string(),
        host: o.host.clone(),
        pgid: o.pgid,
        leader_start: o.leader_start,
    }
}

/// Once no orphan is left to check, log how many were stopped.
fn orphans_done(state: &OrchestratorState) {
    let stopped = state.counters.orphans_stopped;
    if state.orphans.is_empty() {
        info!("event=orphans_checked orphans_stopped={stopped}");
    }
}

/// Characters kept of an agent's own session id.
const SESSION_ID_CHARS: usize = 128;

/// Record what an event says about the run's agent: its own session id (another session, e.g. a
/// fallback to a fresh one, reports its usage from zero) and its process group with the leader's
/// start time.
fn note_process(e: &mut RunningEntry, ev: &AgentEvent) {
    let session = ev.agent_session_id.as_deref();
    if let Some(raw) = session.filter(|s| e.agent_session.as_deref() != Some(*s)) {
        if e.agent_session.is_some() {
            e.tokens = TokenCounts::default();
            e.cost_usd = None;
        }
        e.agent_session = Some(raw.chars().take(SESSION_ID_CHARS).collect());
    }
    if let Some(pid) = ev.agent_pid {
        // Another process: its start time is not the old one's.
        let same = e.agent_pid.replace(pid) == Some(pid);
        e.leader_start = ev.agent_start_time.or(e.leader_start.filter(|_| same));
    }
}

/// One event being applied: the state, the event's time and the actions decided so far.
struct Core<'a> {
    s: &'a mut OrchestratorState,
    now: Millis,
    out: Vec<Action>,
}

impl Core<'_> {
    fn wake(&mut self) {
        let now = self.now;
        if self.s.reload_due.take_if(|t| *t <= now).is_some() {
            // Reload first and alone: the new config is applied before anything else due now runs
            // (the runtime wakes again at once, the other deadlines having passed).
            self.out.push(Action::ReloadWorkflow);
            return;
        }
        if self.s.shutting_down {
            // Bound the shutdown: once the grace period is over, exit with workers still running.
            if self.s.shutdown_deadline.take_if(|t| *t <= now).is_some() {
                let (n, grace_s) = (self.s.running.len(), self.s.policy.shutdown_grace_ms / 1000);
                error!("shutdown: {n} worker(s) did not stop within {grace_s} s; exiting anyway");
                self.out.push(Action::ShutdownComplete);
            }
            return;
        }
        self.detect_stalls();
        self.give_up_orphans();
        self.out.extend(hosts::due_probes(self.s, now));
        self.start_fetch_if_due();
        self.start_poll_if_due();
    }

    /// Part A of reconciliation (spec §8.5): stop agents silent for longer than `stall_timeout_ms`.
    fn detect_stalls(&mut self) {
        let stall = self.s.policy.stall_timeout_ms;
        for e in self.s.running.values_mut() {
            if stalls_at(stall, e).is_some_and(|at| at <= self.now) {
                let session = e.session_id.as_deref().unwrap_or("-");
                let idle_ms = self.now.saturating_sub(activity_at(e));
                warn!(
                    "agent stalled, stopping worker issue_id={} issue_identifier={} session_id={session} idle_ms={idle_ms} stall_timeout_ms={stall}",
                    e.issue.id, e.issue.identifier
                );
                stop(e, StopReason::Stalled, &mut self.out);
            }
        }
    }

    /// Start a fetch batch when its slot has come and something waits for it: every due retry
    /// and, when workers asked, their between-turn refreshes. Like polls, it waits out a pause.
    fn start_fetch_if_due(&mut self) {
        let (now, gate) = (self.now, &mut self.s.poll.gate);
        let due = gate.pace.fetch_due(gate.allowed_at());
        if due.is_none_or(|due| now < due) {
            return;
        }
        let mut retries = Vec::new();
        let orphans = &self.s.orphans;
        for r in self.s.retry_attempts.values_mut() {
            if !held(orphans, r) && r.due_at <= now {
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
        self.out.push(Action::FetchIssues {
            retries,
            refresh_workers,
        });
    }

    /// Recompute the budget plan from the policy and the tracker's last reported limit.
    fn replan(&mut self) {
        let limit = self.s.poll.rate_limit.as_ref().and_then(|r| r.limit);
        let p = &self.s.policy;
        let (base, share) = (p.poll_interval_ms, p.budget_share);
        self.s.poll.gate.replan(base, share, limit, self.now);
    }

    fn start_poll_if_due(&mut self) {
        let poll = &mut self.s.poll;
        if self.s.shutting_down
            || poll.in_flight
            || self.now < poll.next_poll_at.max(poll.gate.allowed_at())
        {
            return;
        }
        poll.in_flight = true;
        poll.refresh_pending = false;
        poll.last_started_at = Some(self.now);
        let interval = poll.gate.poll_interval(self.s.policy.poll_interval_ms);
        poll.next_poll_at = self.now.saturating_add(interval);
        let running_ids: Vec<String> = self.s.running.keys().cloned().collect();
        self.out.push(Action::StartPoll { running_ids });
    }

    /// An operator refresh (API or webhook): coalesce into the next allowed poll, at most one per
    /// the gate's spacing, and never start a request inside a pause.
    fn refresh(&mut self) {
        let coalesced = self.s.poll.in_flight || self.s.poll.refresh_pending;
        let mut deferred_until = None;
        if !self.s.shutting_down {
            let poll = &mut self.s.poll;
            poll.refresh_pending = true;
            let due = poll.gate.refresh_due(poll.last_started_at, self.now);
            if !poll.in_flight {
                poll.next_poll_at = poll.next_poll_at.min(due);
                self.start_poll_if_due();
            }
            deferred_until = (self.s.poll.refresh_pending && due > self.now).then_some(due);
        }
        self.out.push(Action::RefreshAck {
            coalesced,
            deferred_until,
        });
    }

    /// One tick's steps in spec order: the budget gate, reconcile, candidates, dispatch.
    fn poll_result(
        &mut self,
        running_ids: &[String],
        refreshed: Option<Result<Vec<Issue>, String>>,
        candidates: Result<Vec<Issue>, PollSkip>,
        rate_limit: Option<TrackerBudget>,
    ) {
        self.s.poll.in_flight = false;
        self.s.poll.rate_limit = rate_limit.or(self.s.poll.rate_limit.take());
        self.replan();
        let (now, poll) = (self.now, &mut self.s.poll);
        if let Some(started) = poll.last_started_at {
            poll.gate.last_poll_ms = now.saturating_sub(started);
            let interval = poll.gate.poll_interval(self.s.policy.poll_interval_ms);
            poll.next_poll_at = started.saturating_add(interval);
        }
        if let Err(PollSkip::Tracker {
            retry_at: Some(at), ..
        }) = candidates
        {
            poll.gate
                .note(CallOutcome::RateLimited { retry_at: Some(at) }, now);
        }
        if poll.refresh_pending {
            // A refresh that arrived meanwhile: the next allowed poll serves it.
            let due = poll.gate.refresh_due(poll.last_started_at, now);
            poll.next_poll_at = poll.next_poll_at.min(due);
        }
        // 1. Reconcile (Part B) before anything is dispatched.
        match refreshed {
            Some(Ok(issues)) => self.reconcile(running_ids, issues),
            Some(Err(e)) => warn!(
                "running issue refresh failed; keeping workers error={e:?} running={}",
                running_ids.len()
            ),
            None => {}
        }
        if self.s.shutting_down {
            return;
        }
        // 2./3. Preflight and candidates.
        let issues = match candidates {
            Ok(v) => {
                // A success does not end a pause another operation's rate limit set.
                self.s.poll.last_success_at = Some(now);
                self.s.poll.last_error = None;
                v
            }
            Err(PollSkip::Preflight(msg)) => {
                error!("dispatch preflight failed; skipping dispatch this tick error={msg:?}");
                self.s.poll.last_error = Some(msg);
                return;
            }
            Err(PollSkip::Tracker { message, .. }) => {
                // Its `retry_at` was noted in the gate above.
                warn!("candidate fetch failed; skipping this tick error={message:?}");
                self.s.poll.last_error = Some(message);
                return;
            }
        };
        self.release_changed_blocks(&issues);
        forget_gone(self.s, &issues);
        self.dispatch_candidates(issues);
    }

    /// Steps 4./5.: sort the candidates and dispatch while slots remain; an issue out of runs or
    /// over its budget is parked instead.
    fn dispatch_candidates(&mut self, mut issues: Vec<Issue>) {
        issues.sort_by(rules::dispatch_order);
        for issue in issues {
            if rules::global_slots(self.s) == 0 {
                break;
            }
            if !should_dispatch(self.s, &issue) {
                continue;
            }
            match park_reason(self.s, &issue.id) {
                Some((kind, reason)) => {
                    let path = workspace_path(&self.s.policy.workspace_root, &issue.identifier);
                    self.park(&issue, kind, &reason, path);
                }
                None => self.dispatch(issue, None, None, None),
            }
        }
    }

    /// Part B of reconciliation (spec §8.5, §16.3).
    fn reconcile(&mut self, requested: &[String], issues: Vec<Issue>) {
        for id in requested {
            // Gone: exited meanwhile; stopping: already decided.
            let Some(e) = self.s.running.get_mut(id).filter(|e| e.stop.is_none()) else {
                continue;
            };
            let reason = match issues.iter().find(|i| &i.id == id) {
                None => Some(StopReason::Missing),
                Some(i) => {
                    e.issue = i.clone();
                    rules::stop_reason(&self.s.policy, i)
                }
            };
            if let Some(reason) = reason {
                let (i, why) = (&e.issue, reason.as_str());
                info!(
                    "stopping worker issue_id={} issue_identifier={} reason={why} state={:?}",
                    i.id, i.identifier, i.state
                );
                stop(e, reason, &mut self.out);
            }
        }
    }

    /// Un-park blocked issues whose state or labels changed, or that left the active candidates.
    fn release_changed_blocks(&mut self, candidates: &[Issue]) {
        let s = &mut *self.s;
        s.blocked.retain(|id, b| {
            let changed = match candidates.iter().find(|i| &i.id == id) {
                None => {
                    // Left the active candidates: its budget starts over when it comes back.
                    s.spend.remove(id);
                    true
                }
                Some(i) => b.fingerprint != rules::block_fingerprint(i),
            };
            if changed {
                info!(
                    "issue unblocked issue_id={} issue_identifier={} reason=\"state or labels changed\"",
                    b.issue_id, b.identifier
                );
                s.runs_since_active.remove(id);
                s.recent_events.remove(id);
                s.last_errors.remove(id);
            }
            !changed
        });
    }

    /// Dispatch bookkeeping (spec §16.4), on the host [`hosts::assign`] picks (`preferred` first);
    /// a resumed session starts from the usage it had reported.
    fn dispatch(
        &mut self,
        issue: Issue,
        attempt: Option<u32>,
        preferred: Option<&str>,
        resume: Option<Resume>,
    ) {
        let s = &mut *self.s;
        let run_id = s.next_run_id;
        s.next_run_id += 1;
        s.counters.dispatches = s.counters.dispatches.saturating_add(1);
        let path = workspace_path(&s.policy.workspace_root, &issue.identifier);
        let runs = s.runs_since_active.entry(issue.id.clone()).or_insert(0);
        *runs += 1;
        let shown = attempt.map_or("null".into(), |a| a.to_string());
        let ws = path.display();
        info!(
            "dispatching issue_id={} issue_identifier={} attempt={shown} run={runs} workspace={ws}",
            issue.id, issue.identifier
        );
        s.claimed.insert(issue.id.clone());
        s.retry_attempts.remove(&issue.id);
        s.blocked.remove(&issue.id);
        let (host, stale_workspace) = hosts::assign(s, &issue, preferred);
        if let Some(h) = &host {
            let (id, ident) = (&issue.id, &issue.identifier);
            info!("dispatching on host issue_id={id} issue_identifier={ident} host={h}");
        }
        if let Some(r) = &resume {
            info!(
                "event=session_resume issue_id={} issue_identifier={} agent={} session_id={}",
                issue.id, issue.identifier, r.agent, r.session
            );
        }
        let entry = RunningEntry {
            run_id,
            issue: issue.clone(),
            workspace_path: path.clone(),
            attempt,
            started_at: self.now,
            phase_entered_at: self.now,
            agent: s.policy.agent.clone(),
            agent_session: resume.as_ref().map(|r| r.session.clone()),
            tokens: resume.as_ref().map(|r| r.tokens).unwrap_or_default(),
            cost_usd: resume.as_ref().and_then(|r| r.cost_usd),
            resumed: resume.is_some(),
            host: host.clone(),
            ..RunningEntry::default()
        };
        s.running.insert(issue.id.clone(), entry);
        self.out.push(Action::Dispatch {
            run_id,
            issue,
            attempt,
            workspace_path: path,
            host,
            resume,
            stale_workspace,
        });
    }

    /// Release the claim and forget per-issue bookkeeping; `left_active` also resets the run
    /// count.
    fn release(&mut self, id: &str, left_active: bool) {
        let s = &mut *self.s;
        s.claimed.remove(id);
        s.retry_attempts.remove(id);
        if left_active {
            s.runs_since_active.remove(id);
            s.last_errors.remove(id);
            s.spend.remove(id);
        }
        if !s.blocked.contains_key(id) {
            s.recent_events.remove(id);
        }
    }

    fn park(&mut self, issue: &Issue, kind: ParkKind, reason: &str, workspace_path: PathBuf) {
        let s = &mut *self.s;
        let runs = s.runs_since_active.get(&issue.id).copied().unwrap_or(0);
        let (p, max_runs) = (&s.policy, s.policy.max_runs_per_issue);
        let max_attempts = p.max_attempts.map_or("unlimited".into(), |a| a.to_string());
        warn!(
            "issue parked as blocked issue_id={} issue_identifier={} reason={reason:?} state={:?} runs={runs} max_runs_per_issue={max_runs} max_attempts={max_attempts}; move it out of its active state or change its labels to release it",
            issue.id, issue.identifier, issue.state
        );
        let entry = BlockedEntry {
            issue_id: issue.id.clone(),
            identifier: issue.identifier.clone(),
            url: issue.url.clone(),
            state: issue.state.clone(),
            reason: reason.to_string(),
            kind,
            since: self.now,
            fingerprint: rules::block_fingerprint(issue),
            workspace_path,
        };
        s.blocked.insert(issue.id.clone(), entry);
        self.release(&issue.id, false); // parked: its events stay
    }

    /// Queue a retry of an exited run, on the host that has its workspace.
    fn schedule_retry(
        &mut self,
        e: &RunningEntry,
        attempt: u32,
        kind: RetryKind,
        error: Option<String>,
    ) {
        let r = RetryEntry {
            issue_id: e.issue.id.clone(),
            identifier: e.issue.identifier.clone(),
            url: e.issue.url.clone(),
            attempt,
            error,
            kind,
            workspace_path: e.workspace_path.clone(),
            host: e.host.clone(),
            ..RetryEntry::default()
        };
        self.queue(r, false);
    }

    /// Queue `r` after its delay (a continuation's, or its attempt's backoff) and remember its
    /// error; `waits`: a due retry that could not run yet keeps its attempt's backoff.
    fn queue(&mut self, mut r: RetryEntry, waits: bool) {
        let s = &mut *self.s;
        let cap = s.policy.max_retry_backoff_ms;
        let backoff = rules::backoff_ms(rules::FAILURE_BASE_MS, r.attempt.max(1), cap);
        let (id, ident, attempt) = (&r.issue_id, &r.identifier, r.attempt);
        let text = r.error.as_deref().unwrap_or("");
        let delay = match (waits, r.kind) {
            (false, RetryKind::Continuation) => CONTINUATION_DELAY_MS,
            _ => backoff,
        };
        if waits {
            info!("retry waits issue_id={id} issue_identifier={ident} attempt={attempt} delay_ms={delay} reason={text:?}");
        } else {
            info!("retry scheduled issue_id={id} issue_identifier={ident} attempt={attempt} delay_ms={delay} error={text:?}");
        }
        s.counters.retries_scheduled = s.counters.retries_scheduled.saturating_add(1);
        if let Some(e) = &r.error {
            s.last_errors.insert(r.issue_id.clone(), e.clone());
        }
        r.due_at = self.now.saturating_add(delay);
        s.queue_retry(r);
    }

    fn progress(&mut self, id: &str, run_id: u64, progress: WorkerProgress) {
        let Some(e) = self.s.running.get_mut(id).filter(|e| e.run_id == run_id) else {
            return;
        };
        match progress {
            WorkerProgress::Phase(p) => e.phase = p,
            WorkerProgress::TurnStarted(n) => e.turn_count = n,
            WorkerProgress::IssueRefreshed(i) => {
                if i.id == e.issue.id {
                    e.issue = i;
                }
                return;
            }
        }
        e.phase_entered_at = self.now;
    }

    /// Apply agent events to the run, the totals and the issue's lifetime spend; after a turn's
    /// terminal event, stop the worker (between turns) when a budget limit is reached.
    fn agent_updates(&mut self, id: &str, run_id: u64, events: Vec<AgentEvent>) {
        let s = &mut *self.s;
        let Some(e) = s.running.get_mut(id).filter(|e| e.run_id == run_id) else {
            return;
        };
        let ring = s.recent_events.entry(id.to_string()).or_default();
        let spend = s.spend.entry(id.to_string()).or_default();
        for ev in events {
            let kind = ev.kind.as_str().to_string();
            let message = bounded_summary(&ev.summary);
            e.last_event = Some(kind.clone());
            e.last_event_at = Some(self.now);
            e.last_message = Some(message.clone());
            if let Some(sid) = &ev.session_id {
                e.session_id = Some(bounded_summary(sid));
            }
            note_process(e, &ev);
            if let Some(rl) = &ev.rate_limits {
                s.agent_rate_limits = serde_json::to_value(rl).ok();
            }
            if let Some(d) = ev.usage_delta {
                e.tokens.add(&d);
                s.agent_totals.tokens.add(&d);
                spend.tokens.add(&d);
            }
            if let Some(c) = ev.session_cost_usd.filter(|c| c.is_finite() && *c >= 0.0) {
                let c = c.min(budget::MAX_COST_USD);
                let prev = e.cost_usd.unwrap_or(0.0);
                // Session-cumulative: add the difference; a drop means a new session started over.
                let delta = if c >= prev { c - prev } else { c };
                s.agent_totals.cost_usd = budget::add_cost(s.agent_totals.cost_usd, delta);
                spend.cost_usd = budget::add_cost(spend.cost_usd, delta);
                e.cost_usd = Some(c);
            }
            if matches!(ev.kind, TurnCompleted | TurnFailed) {
                spend.turns = spend.turns.saturating_add(1);
                s.agent_totals.turns = s.agent_totals.turns.saturating_add(1);
                let over = budget::violation(&s.policy.budget, spend);
                if let Some(reason) = over.filter(|_| e.stop.is_none()) {
                    warn!(
                        "budget reached; stopping worker after this turn issue_id={} issue_identifier={} reason={reason:?}",
                        e.issue.id, e.issue.identifier
                    );
                    stop(e, StopReason::BudgetExceeded, &mut self.out);
                }
            }
            if ring.len() >= RECENT_EVENTS_CAP {
                ring.pop_front();
            }
            let (at, event) = (self.now, kind);
            ring.push_back(EventRecord { at, event, message });
        }
    }

    /// Worker exit (spec §16.6), honouring a stop the orchestrator requested.
    fn worker_exit(&mut self, id: &str, run_id: u64, outcome: WorkerOutcome) {
        let Some(e) = take_if(&mut self.s.running, id, |e| e.run_id == run_id) else {
            debug!("ignoring exit of an unknown worker issue_id={id} run_id={run_id}");
            return;
        };
        let now = self.now;
        let secs = now.saturating_sub(e.started_at) as f64 / 1000.0;
        self.s.agent_totals.ended_seconds += secs;
        let session = e.session_id.as_deref().unwrap_or("-");
        let stopped = e.stop.map_or("none", |s| s.as_str());
        info!(
            "worker exited issue_id={} issue_identifier={} session_id={session} outcome={outcome:?} stop={stopped} runtime_s={secs:.1}",
            e.issue.id, e.issue.identifier
        );
        if self.s.shutting_down {
            self.release(id, false);
            if self.s.running.is_empty() {
                self.out.push(Action::ShutdownComplete);
            }
            return;
        }
        self.after_exit(id, &e, outcome);
    }

    /// What follows a worker's exit: release, clean, park, or a continuation or failure retry.
    fn after_exit(&mut self, id: &str, e: &RunningEntry, outcome: WorkerOutcome) {
        use StopReason::*;
        use WorkerOutcome::*;
        let (issue, path) = (&e.issue, || e.workspace_path.clone());
        if let (None, HostFailed { error, .. }, Some(h)) = (e.stop, &outcome, &e.host) {
            hosts::mark_down(self.s, h, error, self.now);
        }
        let exited = |why: &str| format!("worker exited: {}", bounded_summary(why));
        let failure = match (e.stop, outcome) {
            (Some(r @ (Terminal | Inactive | Missing | Unroutable | Shutdown)), _) => {
                self.release(id, matches!(r, Terminal | Inactive | Missing));
                if r == Terminal {
                    self.s.completed.insert(id.to_string());
                    self.clean_workspace(issue.clone(), path(), e.host.clone());
                }
                None
            }
            (Some(BudgetExceeded), _) => {
                match over_budget(self.s, id) {
                    Some(reason) => self.park(issue, ParkKind::BudgetExceeded, &reason, path()),
                    // A reload raised the limit while the worker was stopping: carry on.
                    None => self.schedule_retry(e, 1, RetryKind::Continuation, None),
                }
                None
            }
            (Some(Stalled), _) => Some(format!(
                "stalled: no agent activity for more than {} ms",
                self.s.policy.stall_timeout_ms
            )),
            (None, Normal) => {
                self.s.completed.insert(id.to_string());
                self.schedule_retry(e, 1, RetryKind::Continuation, None);
                None
            }
            (None, Cancelled) => Some(exited("cancelled")),
            (
                None,
                Failed(why)
                | HostFailed {
                    started: true,
                    error: why,
                },
            ) => Some(exited(&why)),
            // Ended before the agent started, not the run's fault (a host down, no descriptors):
            // re-dispatch soon with the same attempt (0 re-dispatches as a first run); the run
            // does not count either.
            (None, HostFailed { error: why, .. } | ResourceExhausted(why)) => {
                if let Some(runs) = self.s.runs_since_active.get_mut(id) {
                    *runs = runs.saturating_sub(1);
                }
                let (attempt, error) = (e.attempt.unwrap_or(0), Some(exited(&why)));
                self.schedule_retry(e, attempt, RetryKind::Continuation, error);
                None
            }
        };
        if let Some(error) = failure {
            // A failure retry, or a park once it would exceed `agent.max_attempts`.
            let attempt = e.attempt.unwrap_or(0).saturating_add(1);
            if self.s.policy.max_attempts.is_some_and(|max| attempt > max) {
                self.s.last_errors.insert(id.to_string(), error);
                self.park(issue, ParkKind::MaxAttempts, "max_attempts reached", path());
            } else {
                self.schedule_retry(e, attempt, RetryKind::Failure, Some(error));
            }
        }
    }

    /// Retry timer handling (spec §8.4, §16.6) once the issue was refreshed by id.
    fn retry_refreshed(&mut self, id: &str, seq: u64, result: Result<Option<Issue>, String>) {
        let Some(entry) = take_if(&mut self.s.retry_attempts, id, |r| r.seq == seq) else {
            debug!("ignoring stale retry result issue_id={id} seq={seq}");
            return;
        };
        if self.s.shutting_down {
            return self.release(id, false);
        }
        let issue = match result {
            Err(e) => {
                let msg = format!("retry refresh failed: {}", bounded_summary(&e));
                return self.wait(entry, &Issue::default(), msg);
            }
            Ok(i) => i,
        };
        let Some(issue) = self.eligible(&entry, issue) else {
            return;
        };
        if let Some((kind, reason)) = park_reason(self.s, id) {
            return self.park(&issue, kind, &reason, entry.workspace_path);
        }
        if rules::global_slots(self.s) == 0
            || !rules::state_slot_free(self.s, &issue.state)
            || hosts::is_full(self.s)
        {
            return self.wait(entry, &issue, NO_SLOTS_ERROR.to_string());
        }
        let attempt = (entry.attempt > 0).then_some(entry.attempt);
        let agent = &self.s.policy.agent;
        let resume = entry.resume.filter(|r| {
            if r.agent != *agent {
                info!(
                    "not resuming the interrupted session: agent.kind changed issue_id={id} recorded={} now={agent}",
                    r.agent
                );
            }
            r.agent == *agent
        });
        self.dispatch(issue, attempt, entry.host.as_deref(), resume);
    }

    /// Queue a due retry again that could not run yet (no slot or host, a failed refresh). Waiting
    /// is not an attempt: it keeps its attempt, kind, host and session, and waits its attempt's
    /// backoff.
    fn wait(&mut self, mut entry: RetryEntry, issue: &Issue, error: String) {
        entry.url = issue.url.clone().or(entry.url);
        entry.error = Some(error);
        self.queue(entry, true);
    }

    /// The eligibility half of a due retry (spec §16.6): the refreshed issue when it may run again
    /// now; else the claim is released (forgetting the issue's counts when it left the board or
    /// the active states) and, when terminal, the workspace cleaned.
    fn eligible(&mut self, entry: &RetryEntry, issue: Option<Issue>) -> Option<Issue> {
        use StopReason::*;
        let p = &self.s.policy;
        let stop = issue
            .as_ref()
            .map_or(Some(Missing), |i| rules::stop_reason(p, i));
        let state = issue.as_ref().map_or("", |i| i.state.as_str());
        let blocked = |i: &Issue| !rules::is_eligible(p, i) || self.s.running.contains_key(&i.id);
        let why = match stop {
            Some(Missing) => "\"issue no longer on the project\"".to_string(),
            Some(Terminal) => format!("terminal state={state:?}"),
            Some(Inactive) => format!("inactive state={state:?}"),
            _ if issue.as_ref().is_some_and(blocked) => "\"not routable or blocked\"".to_string(),
            _ => return issue,
        };
        let ident = issue.as_ref().map_or(&entry.identifier, |i| &i.identifier);
        let id = &entry.issue_id;
        info!("releasing claim issue_id={id} issue_identifier={ident} reason={why}");
        self.release(id, matches!(stop, Some(Terminal | Inactive | Missing)));
        if let Some(i) = issue.filter(|_| stop == Some(Terminal)) {
            self.clean_workspace(i, entry.workspace_path.clone(), entry.host.clone());
        }
        None
    }

    fn reload(&mut self, policy: Policy) {
        let repace = policy.poll_interval_ms != self.s.policy.poll_interval_ms
            || policy.budget_share != self.s.policy.budget_share;
        info!(
            "workflow config applied poll_interval_ms={} max_concurrent_agents={} stall_timeout_ms={}",
            policy.poll_interval_ms, policy.max_concurrent_agents, policy.stall_timeout_ms
        );
        self.s.policy = policy;
        self.replan();
        let poll = &mut self.s.poll;
        if let Some(last) = poll.last_started_at.filter(|_| repace && !poll.in_flight) {
            let interval = poll.gate.poll_interval(self.s.policy.poll_interval_ms);
            poll.next_poll_at = last.saturating_add(interval);
        }
        // A reload may carry a fixed token: try it at once (a rate-limit pause stays).
        poll.gate.end_auth_backoff();
        hosts::retain_configured(self.s);
        // Un-park issues parked for a budget the new limits no longer exceed (they are dispatched
        // again by the next poll).
        let s = &mut *self.s;
        let (spend, limits) = (&s.spend, &s.policy.budget);
        s.blocked.retain(|id, b| {
            let over = spend.get(id).and_then(|sp| budget::violation(limits, sp));
            let raised = b.kind == ParkKind::BudgetExceeded && over.is_none();
            if raised {
                info!(
                    "issue unblocked issue_id={} issue_identifier={} reason=\"budget raised\"",
                    b.issue_id, b.identifier
                );
            }
            !raised
        });
    }

    fn shutdown(&mut self) {
        if !self.s.shutting_down {
            let n = self.s.running.len();
            info!("shutdown: stopping dispatch and {n} worker(s)");
            let grace = self.s.policy.shutdown_grace_ms;
            self.s.shutdown_deadline = Some(self.now.saturating_add(grace));
        }
        self.s.shutting_down = true;
        for id in std::mem::take(&mut self.s.retry_attempts).into_keys() {
            self.release(&id, false);
        }
        for e in self.s.running.values_mut() {
            // Even workers already stopping get the shutdown cancel again (idempotent).
            if e.stop != Some(StopReason::Shutdown) {
                stop(e, StopReason::Shutdown, &mut self.out);
            }
        }
        if self.s.running.is_empty() {
            self.out.push(Action::ShutdownComplete);
        }
    }

    /// The startup cleanup of issues already terminal. No record says which host holds an old
    /// workspace: it is cleaned wherever it may be.
    fn clean_terminal_at_startup(&mut self, issues: Vec<Issue>) {
        let mut hosts: Vec<Option<String>> =
            self.s.policy.ssh_hosts.iter().cloned().map(Some).collect();
        if hosts.is_empty() {
            hosts.push(None); // no SSH hosts: this machine
        }
        for issue in issues {
            if self.s.running.contains_key(&issue.id) || self.s.claimed.contains(&issue.id) {
                continue;
            }
            let path = workspace_path(&self.s.policy.workspace_root, &issue.identifier);
            self.s.workspace_hosts.remove(&issue.id); // every host is cleaned below
            for host in &hosts {
                self.clean_workspace(issue.clone(), path.clone(), host.clone());
            }
        }
    }

    /// Ask for the removal of `issue`'s workspace on `host` and on every other host holding a
    /// copy; the issue is held (not dispatched) until the `Event::WorkspaceRemoved` of every
    /// removal asked for.
    fn clean_workspace(&mut self, issue: Issue, path: PathBuf, host: Option<String>) {
        let mut holders = vec![host];
        for h in self.s.workspace_hosts.remove(&issue.id).unwrap_or_default() {
            if !holders.contains(&Some(h.clone())) {
                holders.push(Some(h));
            }
        }
        let pending = self.s.cleaning.entry(issue.id.clone()).or_default();
        *pending = pending.saturating_add(holders.len() as u32);
        for host in holders {
            self.out.push(Action::CleanWorkspace {
                issue: issue.clone(),
                workspace_path: path.clone(),
                host,
            });
        }
    }

    /// An orphan check came back: a stopped (or gone, or not ours) group releases the issue; an
    /// unreachable host keeps it waiting (`orphan unknown`) and is marked down, so the next good
    /// probe checks again.
    fn orphan_checked(&mut self, id: &str, result: Result<bool, String>) {
        let Some(o) = self.s.orphans.get_mut(id) else {
            return;
        };
        match result {
            Ok(stopped) => {
                self.s.orphans.remove(id);
                let n = &mut self.s.counters.orphans_stopped;
                *n = n.saturating_add(u64::from(stopped));
                orphans_done(self.s);
            }
            Err(e) => {
                o.checking = false;
                let host = o.host.as_deref().unwrap_or("local");
                warn!(
                    "event=orphan_unknown issue_id={id} issue_identifier={} host={host} pgid={} error={e:?}; the issue waits until the host answers (at most worker.orphan_grace_ms)",
                    o.identifier, o.pgid
                );
                if let Some(h) = o.host.clone() {
                    hosts::mark_down(self.s, &h, &e, self.now);
                }
            }
        }
    }

    /// Stop waiting for orphans whose host has not answered within `worker.orphan_grace_ms`.
    fn give_up_orphans(&mut self) {
        let (before, now) = (self.s.orphans.len(), self.now);
        self.s.orphans.retain(|id, o| {
            let keep = o.give_up_at > now;
            if !keep {
                let host = o.host.as_deref().unwrap_or("local");
                warn!(
                    "event=orphan_unknown issue_id={id} issue_identifier={} host={host} pgid={}; no answer within worker.orphan_grace_ms, the issue may run again",
                    o.identifier, o.pgid
                );
            }
            keep
        });
        if self.s.orphans.len() < before {
            orphans_done(self.s);
        }
    }
}
