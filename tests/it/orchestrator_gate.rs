//! The request gate in the pure core (issue 12, failures 4 and 5), on a virtual clock: refreshes
//! coalesce into the next allowed poll, a rate limit from any operation pauses every tracker
//! request, a success never ends that pause, and rejected credentials back off.

use crate::support::issues;
use issues::issue;

use std::path::PathBuf;

use baton::orchestrator::engine::{handle, next_deadline, Action, Event, PollSkip};
use baton::orchestrator::gate::{AUTH_BACKOFF_BASE_MS, MAX_PAUSE_MS, REFRESH_MIN_SPACING_MS};
use baton::orchestrator::state::{Millis, OrchestratorState, Policy};
use baton::orchestrator::{CallOutcome, WorkerOutcome};

const T0: Millis = 1_700_000_000_000;

struct H {
    s: OrchestratorState,
    now: Millis,
    polls: usize,
    retry_fetches: Vec<(String, u64)>,
}

impl H {
    fn new() -> Self {
        let p = Policy {
            poll_interval_ms: 60_000,
            max_concurrent_agents: 10,
            workspace_root: PathBuf::from("/ws"),
            ..Policy::default()
        };
        H {
            s: OrchestratorState::new(p, T0),
            now: T0,
            polls: 0,
            retry_fetches: Vec::new(),
        }
    }
    /// Apply `e`; a started poll is answered at once with `answer` (a poll's tracker calls come
    /// as `TrackerCalls` first, like the runtime sends them).
    fn ev_with(&mut self, e: Event, answer: &dyn Fn() -> (Vec<CallOutcome>, Event)) -> Vec<Action> {
        let out = handle(&mut self.s, e, self.now);
        for a in &out {
            match a {
                Action::StartPoll { .. } => {
                    self.polls += 1;
                    let (calls, result) = answer();
                    handle(&mut self.s, Event::TrackerCalls(calls), self.now);
                    self.ev_with(result, answer);
                }
                Action::FetchIssues { retries, .. } => {
                    self.retry_fetches.extend(retries.iter().cloned());
                    let (op, points) = (baton::orchestrator::TrackerOp::Fetch, 1);
                    handle(&mut self.s, Event::TrackerSpent { op, points }, self.now);
                }
                _ => {}
            }
        }
        out
    }
    fn ev(&mut self, e: Event) -> Vec<Action> {
        self.ev_with(e, &ok_poll)
    }
    /// Move the clock to `t`, waking at every deadline on the way.
    fn run_until(&mut self, t: Millis) {
        while let Some(d) = next_deadline(&self.s).filter(|d| *d <= t) {
            self.now = self.now.max(d);
            self.ev(Event::Wake);
        }
        self.now = t;
    }
}

fn ok_poll() -> (Vec<CallOutcome>, Event) {
    (
        vec![CallOutcome::Ok],
        Event::PollResult {
            running_ids: vec![],
            refreshed: None,
            candidates: Ok(vec![]),
            rate_limit: None,
        },
    )
}

fn refresh_acks(out: &[Action]) -> Vec<(bool, Option<Millis>)> {
    out.iter()
        .filter_map(|a| match a {
            Action::RefreshAck {
                coalesced,
                deferred_until,
            } => Some((*coalesced, *deferred_until)),
            _ => None,
        })
        .collect()
}

#[test]
fn four_hundred_refreshes_in_twenty_seconds_make_at_most_twenty_polls() {
    let mut h = H::new();
    h.run_until(T0); // the first poll
    let start = h.polls;
    for k in 0..400 {
        h.run_until(T0 + 1 + k * 50);
        let acks = refresh_acks(&h.ev(Event::RefreshRequested));
        assert_eq!(acks.len(), 1);
    }
    h.run_until(T0 + 20_000);
    let polls = h.polls - start;
    assert!(polls <= 20, "{polls} polls for 400 refreshes in 20 s");
    assert!(polls >= 19, "refreshes are still served: {polls}");
}

#[test]
fn a_refresh_inside_a_pause_starts_nothing_and_reports_the_pause_end() {
    let mut h = H::new();
    h.run_until(T0);
    h.ev(Event::TrackerCalls(vec![CallOutcome::RateLimited {
        retry_at: Some(T0 + 90_000),
    }]));
    let before = h.polls;
    for k in 1..=100 {
        h.run_until(T0 + k * 100);
        let out = h.ev(Event::RefreshRequested);
        assert!(!out.iter().any(|a| matches!(a, Action::StartPoll { .. })));
        assert_eq!(refresh_acks(&out)[0].1, Some(T0 + 90_000));
    }
    assert_eq!(h.polls, before, "no poll inside the pause");
    assert_eq!(next_deadline(&h.s), Some(T0 + 90_000));
    h.run_until(T0 + 90_000);
    assert_eq!(
        h.polls,
        before + 1,
        "the coalesced refresh polls once the pause is over"
    );
}

#[test]
fn a_rate_limited_refresh_pauses_the_board_read_and_a_success_does_not_clear_it() {
    let mut h = H::new();
    h.run_until(T0);
    // Another operation (a retry fetch) hits the limit; then a poll result arrives that
    // succeeded (it was already in flight).
    h.ev(Event::TrackerCalls(vec![CallOutcome::RateLimited {
        retry_at: Some(T0 + 300_000),
    }]));
    h.ev(Event::TrackerCalls(vec![CallOutcome::Ok]));
    h.ev(Event::PollResult {
        running_ids: vec![],
        refreshed: None,
        candidates: Ok(vec![]),
        rate_limit: None,
    });
    assert_eq!(h.s.poll.gate.allowed_at(), T0 + 300_000);
    let before = h.polls;
    h.run_until(T0 + 299_999);
    assert_eq!(h.polls, before, "regular ticks wait too");
    h.run_until(T0 + 300_000);
    assert_eq!(h.polls, before + 1);
}

#[test]
fn retry_fetches_wait_out_a_pause() {
    let mut h = H::new();
    // Dispatch I_1, let it fail: a retry is due 10 s later.
    h.ev_with(Event::Wake, &|| {
        (
            vec![CallOutcome::Ok],
            Event::PollResult {
                running_ids: vec![],
                refreshed: None,
                candidates: Ok(vec![issue(1, "Todo")]),
                rate_limit: None,
            },
        )
    });
    let run_id = h.s.running["I_1"].run_id;
    h.ev(Event::WorkerExited {
        issue_id: "I_1".into(),
        run_id,
        outcome: WorkerOutcome::Failed("boom".into()),
    });
    let due = h.s.retry_attempts["I_1"].due_at;
    h.ev(Event::TrackerCalls(vec![CallOutcome::RateLimited {
        retry_at: Some(due + 50_000),
    }]));
    h.run_until(due + 49_999);
    assert!(
        h.retry_fetches.is_empty(),
        "no retry fetch inside the pause"
    );
    h.run_until(due + 50_000);
    assert_eq!(h.retry_fetches.len(), 1);
}

#[test]
fn hostile_retry_times_are_clamped_to_an_hour() {
    let mut h = H::new();
    h.run_until(T0);
    h.ev_with(Event::Wake, &ok_poll);
    let out = handle(
        &mut h.s,
        Event::PollResult {
            running_ids: vec![],
            refreshed: None,
            candidates: Err(PollSkip::Tracker {
                message: "github_rate_limited".into(),
                retry_at: Some(u64::MAX),
            }),
            rate_limit: None,
        },
        h.now,
    );
    assert!(out.is_empty());
    assert_eq!(h.s.poll.gate.allowed_at(), h.now + MAX_PAUSE_MS);
}

#[test]
fn rejected_credentials_back_off_instead_of_polling_every_interval() {
    let mut h = H::new();
    let auth_failure = || {
        (
            vec![CallOutcome::AuthRejected],
            Event::PollResult {
                running_ids: vec![],
                refreshed: None,
                candidates: Err(PollSkip::Tracker {
                    message: "github_auth: bad credentials".into(),
                    retry_at: None,
                }),
                rate_limit: None,
            },
        )
    };
    let mut starts = Vec::new();
    let end = T0 + 30 * 60_000;
    while let Some(d) = next_deadline(&h.s).filter(|d| *d <= end) {
        h.now = d;
        let before = h.polls;
        h.ev_with(Event::Wake, &auth_failure);
        if h.polls > before {
            starts.push((h.now - T0) / 60_000);
        }
    }
    // 1, 2, 4, 8 minutes, then every 10: 0, 1, 3, 7, 15, 25.
    assert_eq!(starts, [0, 1, 3, 7, 15, 25], "poll minutes");
    assert_eq!(AUTH_BACKOFF_BASE_MS, 60_000);
    // A success ends the back-off.
    h.ev(Event::TrackerCalls(vec![CallOutcome::Ok]));
    assert_eq!(h.s.poll.gate.auth_until, None);
}

#[test]
fn refresh_acks_say_coalesced_and_deferred() {
    let mut h = H::new();
    h.run_until(T0);
    h.run_until(T0 + 200);
    let a = refresh_acks(&h.ev(Event::RefreshRequested));
    assert_eq!(a, [(false, Some(T0 + REFRESH_MIN_SPACING_MS))]);
    let b = refresh_acks(&h.ev(Event::RefreshRequested));
    assert_eq!(b, [(true, Some(T0 + REFRESH_MIN_SPACING_MS))]);
    h.run_until(T0 + REFRESH_MIN_SPACING_MS);
    h.run_until(T0 + 5_000);
    let c = refresh_acks(&h.ev(Event::RefreshRequested));
    assert_eq!(c, [(false, None)], "spacing passed: polls at once");
}
