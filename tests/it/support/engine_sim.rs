//! Driving the pure engine (`orchestrator::engine::handle`) on a virtual clock: what the core
//! tests' harnesses share.

use baton::model::Issue;
use baton::orchestrator::engine::{Action, Event, PollSkip};
use baton::orchestrator::state::{Millis, OrchestratorState};

/// The running ids of the poll `actions` start, if they start one.
pub fn poll_started(actions: &[Action]) -> Option<Vec<String>> {
    actions.iter().find_map(|x| match x {
        Action::StartPoll { running_ids } => Some(running_ids.clone()),
        _ => None,
    })
}

/// A harness holding the engine state and the virtual time.
pub trait EngineSim {
    /// The engine state and the current virtual time.
    fn parts(&mut self) -> (&mut OrchestratorState, &mut Millis);

    /// Hand one event to the engine at the current time.
    fn ev(&mut self, e: Event) -> Vec<Action>;

    /// Fire the retry of issue `n` (id `I_<n>`): move the clock to its due time and wake; a poll
    /// tick due at the same moment is answered as skipped; the retry's refresh gets `result`.
    fn fire_retry(&mut self, n: u64, result: Result<Option<Issue>, String>) -> Vec<Action> {
        let id = format!("I_{n}");
        let (s, now) = self.parts();
        *now = (*now).max(s.retry_attempts[&id].due_at);
        let a = self.ev(Event::Wake);
        if let Some(running_ids) = poll_started(&a) {
            self.ev(Event::PollResult {
                running_ids,
                refreshed: None,
                candidates: Err(PollSkip::Tracker {
                    message: "test: skipped".into(),
                    retry_at: None,
                }),
                rate_limit: None,
            });
        }
        let seq = a.iter().find_map(|x| match x {
            Action::FetchIssues { retries, .. } => {
                retries.iter().find(|(i, _)| *i == id).map(|(_, seq)| *seq)
            }
            _ => None,
        });
        let op = baton::orchestrator::TrackerOp::Fetch;
        self.ev(Event::TrackerSpent { op, points: 1 });
        self.ev(Event::RetryRefreshed {
            issue_id: id,
            seq: seq.expect("retry fetch"),
            result,
        })
    }
}
