//! Deterministic tests of the pure scheduling core (spec §17.4 and Baton regressions), driven by a
//! virtual clock: no threads, no sleeps.

use crate::support::engine_sim::{poll_started, EngineSim};
use crate::support::issues;
use issues::issue;

use std::collections::BTreeSet;
use std::path::PathBuf;

use baton::agent::{AgentEvent, AgentEventKind, TokenUsage};
use baton::model::{BlockerRef, Issue};
use baton::orchestrator::engine::{handle, next_deadline, Action, Event, PollSkip};
use baton::orchestrator::rules::RELOAD_DEBOUNCE_MS;
use baton::orchestrator::state::{Millis, OrchestratorState, Policy, RetryKind};
use baton::orchestrator::{Budget, StopReason, WorkerOutcome, WorkerPhase, WorkerProgress};
#[cfg(feature = "http")] // the status surface's rows
use baton::status::snapshot::{issue_detail, state_snapshot};

const T0: Millis = 1_700_000_000_000;

#[path = "conformance/core.rs"]
mod conformance;

fn policy() -> Policy {
    Policy {
        poll_interval_ms: 30_000,
        max_concurrent_agents: 10,
        stall_timeout_ms: 300_000,
        workspace_root: PathBuf::from("/ws"),
        ..Policy::default()
    }
}

struct H {
    s: OrchestratorState,
    now: Millis,
}

impl H {
    fn new(p: Policy) -> Self {
        H {
            s: OrchestratorState::new(p, T0),
            now: T0,
        }
    }
    fn advance(&mut self, ms: u64) {
        self.now += ms;
    }
    /// Advance to the next deadline and wake.
    fn wake_at_deadline(&mut self) -> Vec<Action> {
        let d = next_deadline(&self.s).expect("a deadline");
        assert!(d >= self.now, "deadline in the past");
        self.now = d;
        self.ev(Event::Wake)
    }
    /// Claims never leak: claimed == running ∪ retrying, and blocked issues are unclaimed.
    fn check_invariants(&self) {
        let expect: BTreeSet<String> = self
            .s
            .running
            .keys()
            .chain(self.s.retry_attempts.keys())
            .cloned()
            .collect();
        assert_eq!(
            self.s.claimed, expect,
            "claimed must equal running ∪ retrying"
        );
        for id in self.s.blocked.keys() {
            assert!(
                !self.s.claimed.contains(id),
                "blocked {id} must not be claimed"
            );
        }
    }
    /// A whole poll tick: wake (must start a poll), then feed results.
    fn tick(
        &mut self,
        refreshed: Option<Result<Vec<Issue>, String>>,
        candidates: Result<Vec<Issue>, PollSkip>,
    ) -> Vec<Action> {
        let a = self.ev(Event::Wake);
        let running_ids = poll_started(&a).expect("wake must start a poll");
        let refreshed = if running_ids.is_empty() {
            None
        } else {
            refreshed
        };
        let mut out: Vec<Action> = a
            .into_iter()
            .filter(|x| !matches!(x, Action::StartPoll { .. }))
            .collect();
        out.extend(self.ev(Event::PollResult {
            running_ids,
            refreshed,
            candidates,
            rate_limit: None,
        }));
        out
    }
    fn poll_due(&mut self) {
        self.now = self.now.max(self.s.poll.next_poll_at);
    }
    fn run_id(&self, n: u64) -> u64 {
        self.s.running[&format!("I_{n}")].run_id
    }
    fn exit(&mut self, n: u64, outcome: WorkerOutcome) -> Vec<Action> {
        let run_id = self.run_id(n);
        self.ev(Event::WorkerExited {
            issue_id: format!("I_{n}"),
            run_id,
            outcome,
        })
    }
    fn agent_phase(&mut self, n: u64) {
        let run_id = self.run_id(n);
        self.ev(Event::WorkerProgress {
            issue_id: format!("I_{n}"),
            run_id,
            progress: WorkerProgress::Phase(WorkerPhase::Agent),
        });
    }
    fn agent_event(&mut self, n: u64, ev: AgentEvent) {
        let run_id = self.run_id(n);
        self.ev(Event::AgentUpdates {
            issue_id: format!("I_{n}"),
            run_id,
            events: vec![ev],
        });
    }
}

impl EngineSim for H {
    fn parts(&mut self) -> (&mut OrchestratorState, &mut Millis) {
        (&mut self.s, &mut self.now)
    }

    fn ev(&mut self, e: Event) -> Vec<Action> {
        let out = handle(&mut self.s, e, self.now);
        self.check_invariants();
        out
    }
}

fn dispatched(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Dispatch { issue, .. } => Some(issue.id.clone()),
            _ => None,
        })
        .collect()
}

fn stops(actions: &[Action]) -> Vec<(String, StopReason)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::StopWorker {
                issue_id, reason, ..
            } => Some((issue_id.clone(), *reason)),
            _ => None,
        })
        .collect()
}

fn cleans(actions: &[Action]) -> Vec<PathBuf> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::CleanWorkspace { workspace_path, .. } => Some(workspace_path.clone()),
            _ => None,
        })
        .collect()
}

fn ev(kind: AgentEventKind) -> AgentEvent {
    AgentEvent::new(kind, "something happened")
}

// ---------------------------------------------------------------- dispatch

#[test]
fn first_tick_is_immediate_and_dispatches_in_priority_then_age_order() {
    let mut h = H::new(Policy {
        max_concurrent_agents: 2,
        ..policy()
    });
    assert_eq!(next_deadline(&h.s), Some(T0), "immediate first tick");
    let mut a = issue(1, "Todo");
    a.priority = Some(3);
    let mut b = issue(2, "Todo");
    b.priority = None;
    let mut c = issue(3, "Todo");
    c.priority = Some(1);
    c.created_at = Some("2024-02-01T00:00:00Z".into());
    let mut d = issue(4, "Todo");
    d.priority = Some(1);
    d.created_at = Some("2024-01-01T00:00:00Z".into());
    let out = h.tick(None, Ok(vec![a, b, c, d]));
    assert_eq!(dispatched(&out), ["I_4", "I_3"]);
    assert_eq!(
        next_deadline(&h.s),
        Some(T0 + 30_000),
        "next tick one interval later"
    );
}

#[test]
fn dispatch_records_workspace_path_and_null_attempt() {
    let mut h = H::new(policy());
    let out = h.tick(None, Ok(vec![issue(7, "In Progress")]));
    match &out[..] {
        [Action::Dispatch {
            attempt,
            workspace_path,
            ..
        }] => {
            assert_eq!(*attempt, None);
            assert_eq!(workspace_path, &PathBuf::from("/ws/acme__repo-7"));
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        h.s.running["I_7"].workspace_path,
        PathBuf::from("/ws/acme__repo-7")
    );
}

#[test]
fn ineligible_candidates_are_skipped() {
    let mut h = H::new(Policy {
        required_labels: vec!["Baton".into()],
        excluded_labels: vec!["on-hold".into()],
        repos: vec!["acme/repo".into()],
        ..policy()
    });
    let mut ok = issue(1, "Todo");
    ok.labels = vec!["BATON ".into()]; // case/whitespace-insensitive
    let unlabeled = issue(2, "Todo");
    let mut held = issue(3, "Todo");
    held.labels = vec!["baton".into(), "on-hold".into()];
    let mut other_repo = issue(4, "Todo");
    other_repo.labels = vec!["baton".into()];
    other_repo.repository = "acme/other".into();
    let mut terminal = issue(5, "Done");
    terminal.labels = vec!["baton".into()];
    let mut closed = issue(6, "Todo");
    closed.labels = vec!["baton".into()];
    closed.closed = true;
    let mut backlog = issue(7, "Backlog");
    backlog.labels = vec!["baton".into()];
    let mut untitled = issue(8, "Todo");
    untitled.labels = vec!["baton".into()];
    untitled.title = String::new();
    let out = h.tick(
        None,
        Ok(vec![
            ok, unlabeled, held, other_repo, terminal, closed, backlog, untitled,
        ]),
    );
    assert_eq!(dispatched(&out), ["I_1"]);
}

#[test]
fn todo_issue_with_open_blocker_waits_but_in_progress_does_not() {
    let mut h = H::new(policy());
    let blocker = BlockerRef {
        id: "I_99".into(),
        identifier: "acme__repo-99".into(),
        state: "In Progress".into(),
        terminal: false,
    };
    let mut todo = issue(1, "Todo");
    todo.blocked_by = vec![blocker.clone()];
    let mut wip = issue(2, "In Progress");
    wip.blocked_by = vec![blocker.clone()];
    let out = h.tick(None, Ok(vec![todo.clone(), wip]));
    assert_eq!(dispatched(&out), ["I_2"]);
    h.poll_due();
    todo.blocked_by[0].state = "Done".into();
    let out = h.tick(Some(Ok(vec![issue(2, "In Progress")])), Ok(vec![todo]));
    assert_eq!(dispatched(&out), ["I_1"]);
}

#[test]
fn running_or_claimed_issues_are_not_dispatched_twice() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.poll_due();
    let out = h.tick(Some(Ok(vec![issue(1, "Todo")])), Ok(vec![issue(1, "Todo")]));
    assert!(dispatched(&out).is_empty());
    // Retry-queued (claimed) issues are not dispatched by the poll either.
    h.exit(1, WorkerOutcome::Failed("boom".into()));
    h.poll_due();
    let out = h.tick(None, Ok(vec![issue(1, "Todo")]));
    assert!(dispatched(&out).is_empty());
    assert!(h.s.retry_attempts.contains_key("I_1"));
}

#[test]
fn global_and_per_state_slots_limit_dispatch() {
    let mut by_state = std::collections::BTreeMap::new();
    by_state.insert("todo".to_string(), 1);
    let mut h = H::new(Policy {
        max_concurrent_agents: 3,
        max_concurrent_agents_by_state: by_state,
        ..policy()
    });
    let out = h.tick(
        None,
        Ok(vec![
            issue(1, "Todo"),
            issue(2, "Todo"),
            issue(3, "In Progress"),
            issue(4, "In Progress"),
            issue(5, "In Progress"),
        ]),
    );
    assert_eq!(dispatched(&out), ["I_1", "I_3", "I_4"]);
}

#[test]
fn per_state_limits_apply_after_reload() {
    let mut h = H::new(policy());
    let out = h.tick(None, Ok(vec![issue(1, "Todo")]));
    assert_eq!(dispatched(&out).len(), 1);
    let mut by_state = std::collections::BTreeMap::new();
    by_state.insert("todo".to_string(), 1);
    h.ev(Event::ConfigReloaded(Policy {
        max_concurrent_agents_by_state: by_state,
        ..policy()
    }));
    h.poll_due();
    let out = h.tick(
        Some(Ok(vec![issue(1, "Todo")])),
        Ok(vec![
            issue(1, "Todo"),
            issue(2, "Todo"),
            issue(3, "In Progress"),
        ]),
    );
    assert_eq!(dispatched(&out), ["I_3"], "todo is full after the reload");
}

#[test]
fn reload_reapplies_poll_interval() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![]));
    assert_eq!(next_deadline(&h.s), Some(T0 + 30_000));
    h.ev(Event::ConfigReloaded(Policy {
        poll_interval_ms: 5_000,
        ..policy()
    }));
    assert_eq!(next_deadline(&h.s), Some(T0 + 5_000));
}

#[test]
#[cfg(feature = "http")]
fn preflight_failure_skips_dispatch_but_reconciles() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.poll_due();
    let out = h.tick(
        Some(Ok(vec![issue(1, "Done")])),
        Err(PollSkip::Preflight("missing_tracker_token: ...".into())),
    );
    assert_eq!(stops(&out), [("I_1".to_string(), StopReason::Terminal)]);
    assert!(dispatched(&out).is_empty());
    assert_eq!(
        state_snapshot(&h.s, h.now).tracker.last_error.as_deref(),
        Some("missing_tracker_token: ...")
    );
}

#[test]
fn candidate_fetch_failure_skips_the_tick_and_honours_rate_limit_retry_at() {
    let mut h = H::new(policy());
    let out = h.tick(
        None,
        Err(PollSkip::Tracker {
            message: "github_rate_limited".into(),
            retry_at: Some(T0 + 90_000),
        }),
    );
    assert!(out.is_empty());
    assert_eq!(next_deadline(&h.s), Some(T0 + 90_000));
}

// ---------------------------------------------------------------- reconciliation

#[test]
fn reconciliation_with_no_running_issues_requests_no_refresh() {
    let mut h = H::new(policy());
    let a = h.ev(Event::Wake);
    assert_eq!(
        a,
        vec![Action::StartPoll {
            running_ids: vec![]
        }]
    );
}

#[test]
#[cfg(feature = "http")]
fn active_refresh_updates_the_running_snapshot() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.poll_due();
    let mut updated = issue(1, "In Progress");
    updated.title = "Renamed".into();
    let out = h.tick(Some(Ok(vec![updated])), Ok(vec![]));
    assert!(stops(&out).is_empty());
    assert_eq!(h.s.running["I_1"].issue.state, "In Progress");
    assert_eq!(state_snapshot(&h.s, h.now).running[0].title, "Renamed");
}

#[test]
fn non_active_state_stops_without_cleanup() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.poll_due();
    let out = h.tick(Some(Ok(vec![issue(1, "Backlog")])), Ok(vec![]));
    assert_eq!(stops(&out), [("I_1".to_string(), StopReason::Inactive)]);
    let out = h.exit(1, WorkerOutcome::Cancelled);
    assert!(cleans(&out).is_empty());
    assert!(h.s.claimed.is_empty() && h.s.retry_attempts.is_empty());
}

#[test]
fn missing_issue_stops_without_cleanup() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.poll_due();
    let out = h.tick(Some(Ok(vec![])), Ok(vec![]));
    assert_eq!(stops(&out), [("I_1".to_string(), StopReason::Missing)]);
    let out = h.exit(1, WorkerOutcome::Cancelled);
    assert!(cleans(&out).is_empty());
    assert!(h.s.claimed.is_empty());
}

#[test]
fn terminal_state_stops_then_cleans_the_recorded_path_after_exit() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    // A reload moves the workspace root; cleanup must still use the path recorded at dispatch.
    h.ev(Event::ConfigReloaded(Policy {
        workspace_root: PathBuf::from("/elsewhere"),
        ..policy()
    }));
    h.poll_due();
    let out = h.tick(Some(Ok(vec![issue(1, "Done")])), Ok(vec![]));
    assert_eq!(stops(&out), [("I_1".to_string(), StopReason::Terminal)]);
    assert!(
        cleans(&out).is_empty(),
        "no cleanup while the worker still runs"
    );
    assert!(
        h.s.claimed.contains("I_1"),
        "claim held until the worker exits"
    );
    let out = h.exit(1, WorkerOutcome::Cancelled);
    assert_eq!(cleans(&out), [PathBuf::from("/ws/acme__repo-1")]);
    assert!(h.s.claimed.is_empty() && h.s.retry_attempts.is_empty());
}

#[test]
fn closed_issue_counts_as_terminal() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![issue(1, "In Progress")]));
    h.poll_due();
    let mut closed = issue(1, "In Progress");
    closed.closed = true;
    let out = h.tick(Some(Ok(vec![closed])), Ok(vec![]));
    assert_eq!(stops(&out), [("I_1".to_string(), StopReason::Terminal)]);
}

#[test]
fn label_removal_mid_run_stops_the_worker_and_keeps_the_workspace() {
    let mut h = H::new(Policy {
        required_labels: vec!["baton".into()],
        ..policy()
    });
    let mut i = issue(1, "In Progress");
    i.labels = vec!["baton".into()];
    h.tick(None, Ok(vec![i]));
    h.poll_due();
    let out = h.tick(Some(Ok(vec![issue(1, "In Progress")])), Ok(vec![]));
    assert_eq!(stops(&out), [("I_1".to_string(), StopReason::Unroutable)]);
    let out = h.exit(1, WorkerOutcome::Cancelled);
    assert!(cleans(&out).is_empty());
    assert!(h.s.claimed.is_empty() && h.s.retry_attempts.is_empty());
}

#[test]
fn refresh_failure_during_reconciliation_never_stops_or_releases_workers() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.poll_due();
    let out = h.tick(Some(Err("github_api_status: HTTP 502".into())), Ok(vec![]));
    assert!(stops(&out).is_empty());
    assert!(h.s.running.contains_key("I_1") && h.s.claimed.contains("I_1"));
    assert!(h.s.running["I_1"].stop.is_none());
}

#[test]
fn reconcile_ignores_a_run_that_exited_while_the_poll_was_in_flight() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.poll_due();
    let a = h.ev(Event::Wake);
    assert!(matches!(&a[..], [Action::StartPoll { running_ids }] if running_ids == &["I_1"]));
    h.exit(1, WorkerOutcome::Normal);
    let out = h.ev(Event::PollResult {
        running_ids: vec!["I_1".into()],
        refreshed: Some(Ok(vec![])),
        candidates: Ok(vec![]),
        rate_limit: None,
    });
    assert!(stops(&out).is_empty());
    assert!(h.s.retry_attempts.contains_key("I_1"), "continuation kept");
}

// ---------------------------------------------------------------- stall detection

#[test]
fn stall_detection_kills_a_silent_agent_and_schedules_a_retry() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.advance(5_000); // workspace preparation time is not counted
    h.agent_phase(1);
    let entered = h.now;
    // Ticks inside the window do nothing.
    h.now = entered + 300_000;
    assert!(stops(&h.ev(Event::Wake)).is_empty());
    // The deadline is exactly one past the timeout.
    let out = h.wake_at_deadline();
    assert_eq!(h.now, entered + 300_001);
    assert_eq!(stops(&out), [("I_1".to_string(), StopReason::Stalled)]);
    h.advance(100);
    h.exit(1, WorkerOutcome::Cancelled);
    let r = &h.s.retry_attempts["I_1"];
    assert_eq!(r.attempt, 1);
    assert_eq!(r.due_at, h.now + 10_000);
    assert!(r.error.as_deref().unwrap().contains("stalled"));
}

#[test]
fn a_chatty_long_running_agent_is_never_stalled() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.agent_phase(1);
    // Two hours of activity, one event every 4 minutes (< 5 min stall timeout).
    for _ in 0..30 {
        h.advance(240_000);
        h.agent_event(1, ev(AgentEventKind::Notification));
        let out = h.ev(Event::Wake);
        assert!(stops(&out).is_empty(), "stall measured from the last event");
        // Keep the tick machinery happy.
        if let Some(Action::StartPoll { running_ids }) = out.first().cloned() {
            h.ev(Event::PollResult {
                running_ids,
                refreshed: Some(Ok(vec![issue(1, "Todo")])),
                candidates: Ok(vec![]),
                rate_limit: None,
            });
        }
    }
    assert!(h.s.running["I_1"].stop.is_none());
}

#[test]
fn no_stall_detection_during_workspace_preparation_or_when_disabled() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.advance(3_600_000); // a very slow before_run hook
    assert!(stops(&h.ev(Event::Wake)).is_empty());

    let mut h = H::new(Policy {
        stall_timeout_ms: 0,
        ..policy()
    });
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.agent_phase(1);
    h.advance(86_400_000);
    assert!(stops(&h.ev(Event::Wake)).is_empty());
}

// ---------------------------------------------------------------- retries

#[test]
fn normal_exit_schedules_a_one_second_continuation_with_attempt_1() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.advance(60_000);
    h.exit(1, WorkerOutcome::Normal);
    let r = &h.s.retry_attempts["I_1"];
    assert_eq!(
        (r.attempt, r.due_at, r.error.clone()),
        (1, h.now + 1000, None)
    );
    assert_eq!(r.identifier, "acme__repo-1");
    assert!(h.s.completed.contains("I_1"));
    assert!(next_deadline(&h.s) <= Some(h.now + 1000));
    let out = h.fire_retry(1, Ok(Some(issue(1, "In Progress"))));
    match &out[..] {
        [Action::Dispatch { attempt, .. }] => assert_eq!(*attempt, Some(1)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn abnormal_exits_back_off_exponentially_up_to_the_cap() {
    let mut h = H::new(Policy {
        max_retry_backoff_ms: 35_000,
        ..policy()
    });
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    let mut delays = vec![];
    for _ in 0..4 {
        h.exit(1, WorkerOutcome::Failed("agent turn error".into()));
        let r = h.s.retry_attempts["I_1"].clone();
        delays.push((r.attempt, r.due_at - h.now));
        assert_eq!(r.error.as_deref(), Some("worker exited: agent turn error"));
        let out = h.fire_retry(1, Ok(Some(issue(1, "Todo"))));
        assert_eq!(dispatched(&out), ["I_1"]);
    }
    assert_eq!(delays, [(1, 10_000), (2, 20_000), (3, 35_000), (4, 35_000)]);
}

#[test]
#[cfg(feature = "http")]
fn retry_entries_show_in_the_snapshot() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.exit(1, WorkerOutcome::Failed("x".into()));
    h.advance(4_000);
    let snap = state_snapshot(&h.s, h.now);
    assert_eq!(snap.counts.retrying, 1);
    let row = &snap.retrying[0];
    assert_eq!(row.attempt, 1);
    assert_eq!(row.due_in_ms, 6_000);
    assert_eq!(row.issue_identifier, "acme__repo-1");
    assert_eq!(row.error.as_deref(), Some("worker exited: x"));
    assert!(row.url.is_some());
}

#[test]
fn retry_whose_refresh_fails_is_rescheduled_not_dropped() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.exit(1, WorkerOutcome::Normal);
    h.fire_retry(1, Err("github_api_request: timeout".into()));
    let r = &h.s.retry_attempts["I_1"];
    assert_eq!(r.attempt, 1, "waiting is not an attempt");
    assert_eq!(r.due_at, h.now + 10_000);
    assert!(r
        .error
        .as_deref()
        .unwrap()
        .starts_with("retry refresh failed"));
    assert!(h.s.claimed.contains("I_1"));
}

#[test]
fn retry_releases_when_gone_inactive_or_unroutable_and_cleans_when_terminal() {
    for (result, expect_clean) in [
        (Ok(None), false),
        (Ok(Some(issue(1, "Backlog"))), false),
        (Ok(Some(issue(1, "Done"))), true),
    ] {
        let mut h = H::new(policy());
        h.tick(None, Ok(vec![issue(1, "Todo")]));
        h.exit(1, WorkerOutcome::Normal);
        let out = h.fire_retry(1, result);
        assert!(dispatched(&out).is_empty());
        assert_eq!(!cleans(&out).is_empty(), expect_clean);
        assert!(h.s.claimed.is_empty() && h.s.retry_attempts.is_empty());
    }
    let mut h = H::new(Policy {
        excluded_labels: vec!["hold".into()],
        ..policy()
    });
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.exit(1, WorkerOutcome::Normal);
    let mut held = issue(1, "Todo");
    held.labels = vec!["hold".into()];
    let out = h.fire_retry(1, Ok(Some(held)));
    assert!(dispatched(&out).is_empty() && h.s.claimed.is_empty());
}

#[test]
fn slot_exhaustion_requeues_with_an_explicit_error() {
    let mut h = H::new(Policy {
        max_concurrent_agents: 1,
        ..policy()
    });
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.exit(1, WorkerOutcome::Normal);
    // Another issue takes the only slot before the continuation fires (operator refresh, one
    // refresh spacing after the last poll).
    h.advance(1_000);
    let a = h.ev(Event::RefreshRequested);
    assert!(matches!(&a[0], Action::StartPoll { running_ids } if running_ids.is_empty()));
    let out = h.ev(Event::PollResult {
        running_ids: vec![],
        refreshed: None,
        candidates: Ok(vec![issue(1, "Todo"), issue(2, "Todo")]),
        rate_limit: None,
    });
    assert_eq!(dispatched(&out), ["I_2"], "retry-queued I_1 stays claimed");
    let out = h.fire_retry(1, Ok(Some(issue(1, "Todo"))));
    assert!(dispatched(&out).is_empty());
    let r = &h.s.retry_attempts["I_1"];
    assert_eq!(r.error.as_deref(), Some("no available orchestrator slots"));
    assert_eq!(r.attempt, 1, "waiting is not an attempt");
}

#[test]
fn waiting_for_a_slot_or_a_refresh_keeps_the_attempt_and_its_backoff() {
    let mut h = H::new(Policy {
        max_concurrent_agents: 1,
        max_attempts: Some(3),
        ..policy()
    });
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.exit(1, WorkerOutcome::Failed("boom".into()));
    assert_eq!(
        dispatched(&h.fire_retry(1, Ok(Some(issue(1, "Todo"))))),
        ["I_1"]
    );
    h.exit(1, WorkerOutcome::Failed("boom".into()));
    assert_eq!(h.s.retry_attempts["I_1"].attempt, 2, "two real failures");
    // I_2 holds the only slot; I_1's retry finds no slot (or no answer) again and again.
    h.ev(Event::PollResult {
        running_ids: vec![],
        refreshed: None,
        candidates: Ok(vec![issue(1, "Todo"), issue(2, "Todo")]),
        rate_limit: None,
    });
    assert!(h.s.running.contains_key("I_2"));
    for k in 0..6 {
        let result = if k % 2 == 0 {
            Ok(Some(issue(1, "Todo")))
        } else {
            Err("github_api_request: timeout".into())
        };
        h.fire_retry(1, result);
        let r = &h.s.retry_attempts["I_1"];
        assert_eq!((r.attempt, r.kind), (2, RetryKind::Failure));
        assert_eq!(r.due_at, h.now + 20_000, "attempt 2's backoff, not more");
    }
    assert!(h.s.blocked.is_empty(), "waiting never parks an issue");
    h.exit(2, WorkerOutcome::Normal);
    let out = h.fire_retry(1, Ok(Some(issue(1, "Todo"))));
    match &out[..] {
        [Action::Dispatch { attempt, .. }] => assert_eq!(*attempt, Some(2)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_stale_retry_result_after_redispatch_is_ignored() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.exit(1, WorkerOutcome::Normal);
    // Retry fires; its refresh goes out (seq A) ...
    h.now = h.s.retry_attempts["I_1"].due_at;
    let a = h.ev(Event::Wake);
    let seq_a = match &a[..] {
        [Action::FetchIssues { retries, .. }, ..] => retries[0].1,
        other => panic!("{other:?}"),
    };
    // ... nothing else is due while it is in flight (no busy loop on the same retry).
    assert_ne!(next_deadline(&h.s), Some(h.now));
    let out = h.ev(Event::RetryRefreshed {
        issue_id: "I_1".into(),
        seq: seq_a,
        result: Ok(Some(issue(1, "Todo"))),
    });
    assert_eq!(dispatched(&out), ["I_1"]);
    // A duplicate/late answer for the same generation must not dispatch a second worker.
    let out = h.ev(Event::RetryRefreshed {
        issue_id: "I_1".into(),
        seq: seq_a,
        result: Ok(Some(issue(1, "Todo"))),
    });
    assert!(out.is_empty());
    // Nor may a wake at the old due time.
    assert!(dispatched(&h.ev(Event::Wake)).is_empty());
    assert_eq!(h.s.running.len(), 1);
    // A newer retry replaces an older one: the old generation's result is ignored.
    h.exit(1, WorkerOutcome::Failed("x".into()));
    let old_seq = h.s.retry_attempts["I_1"].seq;
    h.exit_with_new_retry_check(old_seq);
}

impl H {
    fn exit_with_new_retry_check(&mut self, old_seq: u64) {
        let out = self.ev(Event::RetryRefreshed {
            issue_id: "I_1".into(),
            seq: old_seq + 1000,
            result: Ok(Some(issue(1, "Todo"))),
        });
        assert!(out.is_empty(), "unknown generation ignored");
        assert!(self.s.retry_attempts.contains_key("I_1"));
    }
}

#[test]
fn events_from_an_old_run_are_ignored() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    let old = h.run_id(1);
    h.exit(1, WorkerOutcome::Normal);
    h.fire_retry(1, Ok(Some(issue(1, "Todo"))));
    let out = h.ev(Event::WorkerExited {
        issue_id: "I_1".into(),
        run_id: old,
        outcome: WorkerOutcome::Failed("late".into()),
    });
    assert!(out.is_empty());
    assert!(h.s.running.contains_key("I_1"));
}

// ---------------------------------------------------------------- parking

#[test]
#[cfg(feature = "http")]
fn max_attempts_parks_the_issue_until_its_state_or_labels_change() {
    let mut h = H::new(Policy {
        max_attempts: Some(2),
        ..policy()
    });
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.exit(1, WorkerOutcome::Failed("a".into())); // -> attempt 1
    h.fire_retry(1, Ok(Some(issue(1, "Todo"))));
    h.exit(1, WorkerOutcome::Failed("b".into())); // -> attempt 2
    h.fire_retry(1, Ok(Some(issue(1, "Todo"))));
    h.exit(1, WorkerOutcome::Failed("c".into())); // attempt 3 > 2 -> parked
    assert!(h.s.retry_attempts.is_empty());
    let snap = state_snapshot(&h.s, h.now);
    assert_eq!(snap.counts.blocked, 1);
    assert_eq!(snap.blocked[0].reason, "max_attempts reached");
    let d = issue_detail(&h.s, "acme__repo-1", h.now).unwrap();
    assert_eq!(d.status, "blocked");
    assert_eq!(d.last_error.as_deref(), Some("worker exited: c"));
    // Unchanged: still parked.
    h.poll_due();
    assert!(dispatched(&h.tick(None, Ok(vec![issue(1, "Todo")]))).is_empty());
    // Moved to another active state: released and dispatched again.
    h.poll_due();
    let out = h.tick(None, Ok(vec![issue(1, "In Progress")]));
    assert_eq!(dispatched(&out), ["I_1"]);
    assert!(h.s.blocked.is_empty());
}

#[test]
fn a_spawn_out_of_descriptors_is_retried_without_counting_an_attempt() {
    // Issue 25, item 3: EMFILE/EAGAIN at spawn, or the descriptor reserve reached.
    let mut h = H::new(Policy {
        max_attempts: Some(1),
        ..policy()
    });
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    for _ in 0..5 {
        h.exit(
            1,
            WorkerOutcome::ResourceExhausted(
                "could not start: Too many open files (os error 24)".into(),
            ),
        );
        let r = &h.s.retry_attempts["I_1"];
        assert_eq!(r.attempt, 0, "no attempt counted");
        assert!(r.error.as_deref().unwrap().contains("os error 24"));
        let out = h.fire_retry(1, Ok(Some(issue(1, "Todo"))));
        assert_eq!(dispatched(&out), ["I_1"], "never parked");
        assert_eq!(h.s.running["I_1"].attempt, None, "still a first run");
    }
    assert!(h.s.blocked.is_empty());
}

#[test]
fn an_issue_that_stays_active_after_n_normal_exits_is_parked() {
    let mut h = H::new(Policy {
        max_runs_per_issue: 3,
        ..policy()
    });
    h.tick(None, Ok(vec![issue(1, "In Progress")]));
    for _ in 0..2 {
        h.exit(1, WorkerOutcome::Normal);
        let out = h.fire_retry(1, Ok(Some(issue(1, "In Progress"))));
        assert_eq!(dispatched(&out), ["I_1"]);
    }
    h.exit(1, WorkerOutcome::Normal);
    let out = h.fire_retry(1, Ok(Some(issue(1, "In Progress"))));
    assert!(dispatched(&out).is_empty(), "third run was the last");
    assert_eq!(h.s.blocked["I_1"].reason, "max_runs_per_issue reached");
    // Polls do not dispatch it again while it sits unchanged in an active state.
    h.poll_due();
    assert!(dispatched(&h.tick(None, Ok(vec![issue(1, "In Progress")]))).is_empty());
    // Once it leaves the active states and comes back, it has a fresh budget.
    h.poll_due();
    h.tick(None, Ok(vec![]));
    h.poll_due();
    let out = h.tick(None, Ok(vec![issue(1, "In Progress")]));
    assert_eq!(dispatched(&out), ["I_1"]);
    assert_eq!(h.s.runs_since_active["I_1"], 1);
}

#[test]
fn leaving_the_active_states_resets_the_run_budget() {
    let mut h = H::new(Policy {
        max_runs_per_issue: 2,
        ..policy()
    });
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.exit(1, WorkerOutcome::Normal);
    h.fire_retry(1, Ok(Some(issue(1, "Backlog")))); // released, budget reset
    h.poll_due();
    assert_eq!(
        dispatched(&h.tick(None, Ok(vec![issue(1, "Todo")]))),
        ["I_1"]
    );
    h.exit(1, WorkerOutcome::Normal);
    assert_eq!(
        dispatched(&h.fire_retry(1, Ok(Some(issue(1, "Todo"))))),
        ["I_1"]
    );
}

// ---------------------------------------------------------------- accounting & snapshots

#[test]
#[cfg(feature = "http")]
fn tokens_cost_and_runtime_are_accounted_per_13_5() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.agent_phase(1);
    let mut e = ev(AgentEventKind::SessionStarted);
    e.session_id = Some("sess-1".into());
    e.agent_pid = Some(4242);
    h.agent_event(1, e);
    for (i, o, cost) in [(100, 10, 0.5), (50, 5, 0.75)] {
        let mut e = ev(AgentEventKind::TurnCompleted);
        e.usage_delta = Some(TokenUsage {
            input_tokens: i,
            output_tokens: o,
            ..TokenUsage::default()
        });
        e.session_cost_usd = Some(cost);
        h.agent_event(1, e);
    }
    h.advance(10_000);
    let snap = state_snapshot(&h.s, h.now);
    assert_eq!(snap.agent_totals.tokens.input_tokens, 150);
    assert_eq!(snap.agent_totals.tokens.output_tokens, 15);
    assert_eq!(snap.agent_totals.tokens.total_tokens, 165);
    assert!(
        (snap.agent_totals.cost_usd - 0.75).abs() < 1e-9,
        "cumulative cost not double-counted"
    );
    assert!(
        (snap.agent_totals.seconds_running - 10.0).abs() < 1e-9,
        "live elapsed included"
    );
    let row = &snap.running[0];
    assert_eq!(row.session_id.as_deref(), Some("sess-1"));
    assert_eq!(row.tokens.total_tokens, 165);
    assert_eq!(row.cost_usd, Some(0.75));
    assert_eq!(row.last_event.as_deref(), Some("turn_completed"));
    assert!(row.url.is_some());
    assert!(snap.rate_limits.is_none());
    // Runtime moves into the ended total at exit; nothing double-counted afterwards.
    h.exit(1, WorkerOutcome::Normal);
    h.advance(5_000);
    let snap = state_snapshot(&h.s, h.now);
    assert!((snap.agent_totals.seconds_running - 10.0).abs() < 1e-9);
    assert_eq!(snap.agent_totals.tokens.total_tokens, 165);
}

#[test]
#[cfg(feature = "http")]
fn turn_count_and_recent_events_ring_is_bounded() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    let run = h.run_id(1);
    h.ev(Event::WorkerProgress {
        issue_id: "I_1".into(),
        run_id: run,
        progress: WorkerProgress::TurnStarted(3),
    });
    for i in 0..(baton::orchestrator::state::RECENT_EVENTS_CAP + 50) {
        let mut e = ev(AgentEventKind::ToolUse);
        e.summary = format!("event {i}\n{}", "x".repeat(10_000));
        h.agent_event(1, e);
    }
    let d = issue_detail(&h.s, "acme__repo-1", h.now).unwrap();
    assert_eq!(d.status, "running");
    assert_eq!(d.running.as_ref().unwrap().turn_count, 3);
    assert_eq!(
        d.recent_events.len(),
        baton::orchestrator::state::RECENT_EVENTS_CAP
    );
    assert!(d.recent_events[0].message.starts_with("event 50 "));
    assert!(d
        .recent_events
        .iter()
        .all(|e| e.message.chars().count() <= 500));
    assert!(d.recent_events.iter().all(|e| !e.message.contains('\n')));
    assert_eq!(d.workspace.as_deref(), Some("/ws/acme__repo-1"));
    assert!(issue_detail(&h.s, "acme__repo-404", h.now).is_none());
}

// ---------------------------------------------------------------- refresh & shutdown

#[test]
fn refresh_requests_start_a_poll_now_and_coalesce() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![]));
    h.advance(1_000);
    let out = h.ev(Event::RefreshRequested);
    assert!(matches!(out[0], Action::StartPoll { .. }));
    assert_eq!(
        out[1],
        Action::RefreshAck {
            coalesced: false,
            deferred_until: None
        }
    );
    let out = h.ev(Event::RefreshRequested);
    assert_eq!(
        out,
        vec![Action::RefreshAck {
            coalesced: true,
            deferred_until: Some(h.now + 1_000)
        }]
    );
    // When the in-flight poll returns, the pending refresh polls again once the one-second
    // refresh spacing (counted from the last start) has passed.
    h.ev(Event::PollResult {
        running_ids: vec![],
        refreshed: None,
        candidates: Ok(vec![]),
        rate_limit: None,
    });
    assert_eq!(next_deadline(&h.s), Some(h.now + 1_000));
}

#[test]
fn shutdown_stops_every_worker_releases_retries_and_completes_after_exits() {
    let mut h = H::new(policy());
    h.tick(
        None,
        Ok(vec![issue(1, "Todo"), issue(2, "Todo"), issue(3, "Todo")]),
    );
    h.exit(3, WorkerOutcome::Failed("x".into()));
    let out = h.ev(Event::Shutdown);
    let mut s = stops(&out);
    s.sort();
    assert_eq!(
        s,
        [
            ("I_1".to_string(), StopReason::Shutdown),
            ("I_2".to_string(), StopReason::Shutdown)
        ]
    );
    assert!(h.s.retry_attempts.is_empty());
    let grace = h.s.policy.shutdown_grace_ms;
    assert_eq!(
        next_deadline(&h.s),
        Some(h.now + grace),
        "no more ticks but the grace deadline"
    );
    assert!(h.ev(Event::Wake).is_empty());
    assert!(h.exit(1, WorkerOutcome::Cancelled).is_empty());
    assert_eq!(
        h.exit(2, WorkerOutcome::Cancelled),
        vec![Action::ShutdownComplete]
    );
    assert!(h.s.claimed.is_empty());
}

#[test]
fn shutdown_with_nothing_running_completes_at_once() {
    let mut h = H::new(policy());
    assert_eq!(h.ev(Event::Shutdown), vec![Action::ShutdownComplete]);
}

#[test]
fn state_is_serializable() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.exit(1, WorkerOutcome::Normal);
    let json = serde_json::to_string(&h.s).unwrap();
    let mut back: OrchestratorState = serde_json::from_str(&json).unwrap();
    // A retry's generation belongs to this process (a restore gives it a new one), and so do
    // the tracker budget's measurements (a restart measures again).
    for r in back.retry_attempts.values_mut() {
        r.seq = h.s.retry_attempts[&r.issue_id].seq;
    }
    back.poll.gate.pace = h.s.poll.gate.pace.clone();
    assert_eq!(back, h.s);
}

#[test]
fn shutdown_gives_up_waiting_after_the_grace_period() {
    let mut h = H::new(Policy {
        shutdown_grace_ms: 35_000,
        ..policy()
    });
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.ev(Event::Shutdown);
    h.advance(10_000);
    assert!(
        h.ev(Event::Shutdown).is_empty(),
        "a second signal changes nothing"
    );
    assert_eq!(next_deadline(&h.s), Some(T0 + 35_000));
    h.advance(24_999);
    assert!(h.ev(Event::Wake).is_empty());
    assert_eq!(h.wake_at_deadline(), vec![Action::ShutdownComplete]);
    assert_eq!(h.now, T0 + 35_000);
}

#[test]
fn reload_pings_are_debounced_into_one_reload() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![]));
    h.ev(Event::ReloadRequested);
    h.advance(150);
    h.ev(Event::ReloadRequested);
    assert_eq!(next_deadline(&h.s), Some(h.now + RELOAD_DEBOUNCE_MS));
    h.advance(150);
    assert!(
        h.ev(Event::Wake).is_empty(),
        "the second ping restarted the wait"
    );
    assert_eq!(h.wake_at_deadline(), vec![Action::ReloadWorkflow]);
    assert_eq!(h.s.reload_due, None);
    // A due reload runs alone, before a poll due at the same moment.
    h.ev(Event::ReloadRequested);
    h.now = h.s.poll.next_poll_at.max(h.now + RELOAD_DEBOUNCE_MS);
    assert_eq!(h.ev(Event::Wake), vec![Action::ReloadWorkflow]);
    assert!(matches!(h.ev(Event::Wake)[..], [Action::StartPoll { .. }]));
    // Reloads still happen during shutdown.
    h.ev(Event::Shutdown);
    h.ev(Event::ReloadRequested);
    assert_eq!(h.wake_at_deadline(), vec![Action::ReloadWorkflow]);
}

#[test]
fn a_batch_of_agent_updates_equals_the_single_updates() {
    let events = [
        ev(AgentEventKind::SessionStarted),
        ev(AgentEventKind::ToolUse),
        ev(AgentEventKind::TurnCompleted),
    ];
    let mut one = H::new(policy());
    one.tick(None, Ok(vec![issue(1, "Todo")]));
    let mut batch = H::new(policy());
    batch.tick(None, Ok(vec![issue(1, "Todo")]));
    let run_id = one.run_id(1);
    for e in events.clone() {
        one.agent_event(1, e);
    }
    batch.ev(Event::AgentUpdates {
        issue_id: "I_1".into(),
        run_id,
        events: events.to_vec(),
    });
    assert_eq!(one.s, batch.s);
    assert_eq!(one.s.recent_events["I_1"].len(), 3);
}

// ---------------------------------------------------------------- per-issue budgets

fn budget_policy(budget: Budget) -> Policy {
    Policy { budget, ..policy() }
}

/// A turn's terminal event carrying a usage delta and the session-cumulative cost.
fn turn_end(
    kind: AgentEventKind,
    usage: Option<TokenUsage>,
    session_cost_usd: Option<f64>,
) -> AgentEvent {
    let mut e = ev(kind);
    e.usage_delta = usage;
    e.session_cost_usd = session_cost_usd;
    e
}

fn usage(input: u64, output: u64, cache_read: u64, cache_creation: u64) -> TokenUsage {
    TokenUsage {
        input_tokens: input,
        output_tokens: output,
        cache_read_input_tokens: cache_read,
        cache_creation_input_tokens: cache_creation,
    }
}

impl H {
    /// Feed an agent event to issue n's run; return the actions.
    fn agent(&mut self, n: u64, e: AgentEvent) -> Vec<Action> {
        let run_id = self.run_id(n);
        self.ev(Event::AgentUpdates {
            issue_id: format!("I_{n}"),
            run_id,
            events: vec![e],
        })
    }
    /// Continue issue n after a normal exit: fire its continuation retry, expect a dispatch.
    fn continue_run(&mut self, n: u64) {
        let a = self.fire_retry(n, Ok(Some(issue(n, "Todo"))));
        assert_eq!(
            dispatched(&a),
            vec![format!("I_{n}")],
            "continuation dispatch"
        );
    }
}

#[test]
#[cfg(feature = "http")]
fn cost_budget_stops_after_the_crossing_turn_and_parks() {
    let mut h = H::new(budget_policy(Budget {
        max_cost_usd_per_issue: Some(0.25),
        ..Budget::default()
    }));
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.agent_phase(1);
    // Mid-turn cost reports never stop the worker: only a turn's end does.
    let mut mid = ev(AgentEventKind::Notification);
    mid.session_cost_usd = Some(0.20);
    assert!(stops(&h.agent(1, mid)).is_empty(), "no stop mid-turn");
    let a = h.agent(1, turn_end(AgentEventKind::TurnCompleted, None, Some(0.31)));
    assert_eq!(stops(&a), vec![("I_1".into(), StopReason::BudgetExceeded)]);
    // A second terminal event does not stop twice.
    let a = h.agent(1, turn_end(AgentEventKind::TurnFailed, None, Some(0.31)));
    assert!(stops(&a).is_empty());
    let a = h.exit(1, WorkerOutcome::Cancelled);
    assert!(dispatched(&a).is_empty());
    let b = &h.s.blocked["I_1"];
    assert_eq!(b.reason, "budget exceeded: cost $0.31 > $0.25");
    assert_eq!(b.kind, baton::orchestrator::ParkKind::BudgetExceeded);
    assert!(
        h.s.retry_attempts.is_empty(),
        "no retry after a budget stop"
    );
    // Still active and unchanged: stays parked.
    h.poll_due();
    let a = h.tick(None, Ok(vec![issue(1, "Todo")]));
    assert!(dispatched(&a).is_empty());
    assert!(h.s.blocked.contains_key("I_1"));
    let snap = state_snapshot(&h.s, h.now);
    assert_eq!(snap.budget.max_cost_usd_per_issue, Some(0.25));
    let d = issue_detail(&h.s, "acme__repo-1", h.now).unwrap();
    assert!((d.spend.cost_usd - 0.31).abs() < 1e-9);
    assert_eq!(d.spend.turns, 2);
}

#[test]
#[cfg(feature = "http")]
fn token_budget_counts_cache_tokens_across_runs() {
    let mut h = H::new(budget_policy(Budget {
        max_tokens_per_issue: Some(1_000),
        ..Budget::default()
    }));
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.agent_phase(1);
    let a = h.agent(
        1,
        turn_end(
            AgentEventKind::TurnCompleted,
            Some(usage(100, 100, 250, 50)),
            None,
        ),
    );
    assert!(stops(&a).is_empty(), "500 of 1000 tokens");
    h.exit(1, WorkerOutcome::Normal);
    h.continue_run(1);
    h.agent_phase(1);
    let d = issue_detail(&h.s, "acme__repo-1", h.now).unwrap();
    assert_eq!(d.spend.tokens.total_tokens, 500, "lifetime, across runs");
    assert_eq!(d.spend.tokens.cache_read_input_tokens, 250);
    assert_eq!(d.spend.tokens.cache_creation_input_tokens, 50);
    let running = d.running.unwrap();
    assert_eq!(
        running.tokens.total_tokens, 0,
        "the new run has spent nothing"
    );
    let a = h.agent(
        1,
        turn_end(
            AgentEventKind::TurnCompleted,
            Some(usage(0, 100, 400, 0)),
            None,
        ),
    );
    assert_eq!(stops(&a), vec![("I_1".into(), StopReason::BudgetExceeded)]);
    h.exit(1, WorkerOutcome::Normal);
    assert_eq!(
        h.s.blocked["I_1"].reason,
        "budget exceeded: tokens 1000 >= 1000"
    );
    let totals = state_snapshot(&h.s, h.now).agent_totals;
    let t = totals.tokens;
    assert_eq!(
        (
            t.input_tokens,
            t.output_tokens,
            t.cache_read_input_tokens,
            t.cache_creation_input_tokens,
            t.total_tokens,
            totals.turns
        ),
        (100, 200, 650, 50, 1_000, 2),
        "totals include cache tokens, shown separately"
    );
}

#[test]
fn turn_budget_is_a_lifetime_count_of_ended_turns() {
    let mut h = H::new(budget_policy(Budget {
        max_turns_per_issue: Some(2),
        ..Budget::default()
    }));
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.agent_phase(1);
    assert!(stops(&h.agent(1, turn_end(AgentEventKind::TurnCompleted, None, None))).is_empty());
    h.exit(1, WorkerOutcome::Normal);
    h.continue_run(1);
    h.agent_phase(1);
    let a = h.agent(1, turn_end(AgentEventKind::TurnFailed, None, None));
    assert_eq!(stops(&a), vec![("I_1".into(), StopReason::BudgetExceeded)]);
    h.exit(1, WorkerOutcome::Failed("turn failed".into()));
    assert_eq!(h.s.blocked["I_1"].reason, "budget exceeded: turns 2 >= 2");
}

#[test]
fn copilot_reports_no_dollars_so_only_token_and_turn_limits_apply() {
    let mut h = H::new(budget_policy(Budget {
        max_cost_usd_per_issue: Some(0.01),
        max_turns_per_issue: Some(3),
        ..Budget::default()
    }));
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.agent_phase(1);
    for _ in 0..2 {
        let a = h.agent(
            1,
            turn_end(
                AgentEventKind::TurnCompleted,
                Some(usage(10_000, 10_000, 0, 0)),
                None,
            ),
        );
        assert!(stops(&a).is_empty(), "no cost reported, no cost stop");
    }
    let a = h.agent(1, turn_end(AgentEventKind::TurnCompleted, None, None));
    assert_eq!(stops(&a), vec![("I_1".into(), StopReason::BudgetExceeded)]);
}

#[test]
fn a_reload_raising_the_limit_releases_a_budget_park_and_lowering_parks_before_dispatch() {
    let tight = Budget {
        max_cost_usd_per_issue: Some(0.25),
        ..Budget::default()
    };
    let mut h = H::new(budget_policy(tight));
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.agent_phase(1);
    h.agent(1, turn_end(AgentEventKind::TurnCompleted, None, Some(0.30)));
    h.exit(1, WorkerOutcome::Cancelled);
    assert!(h.s.blocked.contains_key("I_1"));
    // A reload that keeps the limit keeps the park.
    h.ev(Event::ConfigReloaded(budget_policy(tight)));
    assert!(h.s.blocked.contains_key("I_1"));
    // Raising it releases the park; the next poll dispatches again, spend kept.
    h.ev(Event::ConfigReloaded(budget_policy(Budget {
        max_cost_usd_per_issue: Some(1.0),
        ..Budget::default()
    })));
    assert!(!h.s.blocked.contains_key("I_1"));
    h.poll_due();
    let a = h.tick(None, Ok(vec![issue(1, "Todo")]));
    assert_eq!(dispatched(&a), vec!["I_1".to_string()]);
    assert!((h.s.spend["I_1"].cost_usd - 0.30).abs() < 1e-9);
    h.agent_phase(1);
    h.agent(1, turn_end(AgentEventKind::TurnCompleted, None, Some(0.10)));
    h.exit(1, WorkerOutcome::Normal);
    assert!(h.s.retry_attempts.contains_key("I_1"), "continuation");
    // Lowering it while a retry is queued parks the issue instead of dispatching it.
    h.ev(Event::ConfigReloaded(budget_policy(tight)));
    let a = h.fire_retry(1, Ok(Some(issue(1, "Todo"))));
    assert!(dispatched(&a).is_empty());
    assert_eq!(
        h.s.blocked["I_1"].reason,
        "budget exceeded: cost $0.40 > $0.25"
    );
}

#[test]
fn leaving_the_active_states_resets_the_spend_and_releases_the_park() {
    let mut h = H::new(budget_policy(Budget {
        max_turns_per_issue: Some(1),
        ..Budget::default()
    }));
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.agent_phase(1);
    h.agent(1, turn_end(AgentEventKind::TurnCompleted, None, None));
    h.exit(1, WorkerOutcome::Cancelled);
    assert!(h.s.blocked.contains_key("I_1"));
    h.poll_due();
    h.tick(None, Ok(vec![]));
    assert!(!h.s.blocked.contains_key("I_1"));
    assert!(!h.s.spend.contains_key("I_1"), "spend starts over");
    h.poll_due();
    let a = h.tick(None, Ok(vec![issue(1, "Todo")]));
    assert_eq!(dispatched(&a), vec!["I_1".to_string()]);
}

#[test]
fn a_budget_stop_raised_meanwhile_continues_instead_of_parking() {
    let mut h = H::new(budget_policy(Budget {
        max_turns_per_issue: Some(1),
        ..Budget::default()
    }));
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.agent_phase(1);
    let a = h.agent(1, turn_end(AgentEventKind::TurnCompleted, None, None));
    assert_eq!(stops(&a).len(), 1);
    h.ev(Event::ConfigReloaded(policy()));
    h.exit(1, WorkerOutcome::Cancelled);
    assert!(h.s.blocked.is_empty());
    assert!(h.s.retry_attempts.contains_key("I_1"));
}

#[test]
fn engine_counters_count_dispatches_and_retries() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![issue(1, "Todo"), issue(2, "Todo")]));
    h.exit(1, WorkerOutcome::Normal);
    h.exit(2, WorkerOutcome::Failed("boom".into()));
    assert_eq!(h.s.counters.dispatches, 2);
    assert_eq!(h.s.counters.retries_scheduled, 2);
}

#[test]
fn running_issues_in_the_board_read_need_no_refresh_and_the_rest_are_named() {
    use baton::orchestrator::rules::running_from_read;
    let candidates = vec![issue(1, "Todo"), issue(2, "In Progress")];
    let others = vec![issue(3, "In Review")];
    let running: Vec<String> = ["I_3", "I_1", "I_9"].map(String::from).to_vec();
    let (present, missing) = running_from_read(&running, &candidates, &others);
    let got: Vec<(&str, &str)> = present
        .iter()
        .map(|i| (i.id.as_str(), i.state.as_str()))
        .collect();
    assert_eq!(got, vec![("I_3", "In Review"), ("I_1", "Todo")]);
    assert_eq!(missing, vec!["I_9".to_string()]);
}

#[test]
fn a_tick_reconciled_from_the_board_read_stops_moved_and_missing_issues() {
    use baton::orchestrator::rules::running_from_read;
    let mut h = H::new(policy());
    let a = h.tick(
        None,
        Ok(vec![issue(1, "Todo"), issue(2, "Todo"), issue(3, "Todo")]),
    );
    assert_eq!(dispatched(&a).len(), 3);
    h.poll_due();
    // Next read: #1 still a candidate, #2 moved to review (in `others`), #3 absent and the
    // refresh of the missing ids omits it (removed from the board).
    let candidates = vec![issue(1, "Todo")];
    let others = vec![issue(2, "In Review")];
    let running: Vec<String> = h.s.running.keys().cloned().collect();
    let (present, missing) = running_from_read(&running, &candidates, &others);
    assert_eq!(missing, vec!["I_3".to_string()]);
    let a = h.tick(Some(Ok(present)), Ok(candidates));
    let mut got = stops(&a);
    got.sort();
    assert_eq!(
        got,
        vec![
            ("I_2".to_string(), StopReason::Inactive),
            ("I_3".to_string(), StopReason::Missing)
        ]
    );
}

#[test]
#[cfg(feature = "http")]
fn the_latest_agent_rate_limits_reach_the_snapshot() {
    let mut h = H::new(policy());
    h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.agent_phase(1);
    assert!(state_snapshot(&h.s, h.now).rate_limits.is_none());
    let mut e = ev(AgentEventKind::Notification);
    e.rate_limits = Some(baton::agent::AgentRateLimits {
        status: "allowed_warning".into(),
        rate_limit_type: Some("five_hour".into()),
        utilization: Some(0.9),
        resets_at: Some("2026-12-01T00:00:00Z".into()),
        overage_status: None,
        is_using_overage: None,
    });
    h.agent(1, e);
    let snap = state_snapshot(&h.s, h.now);
    let rl = snap.rate_limits.expect("reported");
    assert_eq!(rl["status"], "allowed_warning");
    assert_eq!(rl["rate_limit_type"], "five_hour");
}
