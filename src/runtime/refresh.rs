//! Between-turn refreshes, coalesced (issue 25): a worker whose turn ended sends no request of
//! its own. It leaves its issue id here and waits; the first waiter of a batch tells the main loop
//! (`Event::TurnRefreshWanted`), the engine starts a fetch batch when the request gate's slot
//! comes (`Action::FetchIssues`), and the tracker thread running that batch takes every waiting
//! id, sends one `refresh_running(ids)` and hands each worker its issue ([`Refresher::serve`]).
//! The main loop neither waits nor sees the issues. A worker waits until its answer, its cancel,
//! the gate holding requests ([`Refresher::release_held`]) or [`MAX_WAIT`], whichever is first.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, Sender};

use crate::agent::CancelToken;
use crate::model::Issue;
use crate::orchestrator::{CallOutcome, Event};
use crate::tracker::{Tracker, TrackerError};

/// The longest a worker waits for its refresh; then its run ends normally, as when the gate
/// holds requests (its continuation retry asks again).
pub const MAX_WAIT: Duration = Duration::from_secs(120);

/// How often a waiting worker re-checks its cancel flag (a cancel's wake-up may have been taken
/// by the turn that ended).
const CANCEL_CHECK: Duration = Duration::from_secs(1);

/// How a worker's between-turn refresh ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Refreshed {
    /// The batch's answer: the worker's issue (empty when the tracker no longer has it on the
    /// project), or the batch's error.
    Done(Result<Vec<Issue>, TrackerError>),
    /// No answer: the gate holds requests, the batch was rate-limited or refused, or
    /// [`MAX_WAIT`] passed. The run ends normally; its continuation waits for the gate.
    Held,
    /// The run was cancelled while waiting.
    Cancelled,
}

/// The waiting workers of the next batch (one per issue: an issue runs once at a time).
pub struct Refresher {
    waiting: Mutex<HashMap<String, Sender<Refreshed>>>,
    events: Sender<Event>,
}

impl Refresher {
    /// An empty refresher whose first waiter of each batch sends `TurnRefreshWanted` on `events`.
    pub fn new(events: Sender<Event>) -> Arc<Self> {
        Arc::new(Refresher {
            waiting: Mutex::new(HashMap::new()),
            events,
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Sender<Refreshed>>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait for issue `id` from the next fetch batch (see the module docs). `held` is the main
    /// loop's "the gate holds requests" flag: it is read before and after joining, so a worker
    /// either sees it or is released by [`Refresher::release_held`].
    pub fn refresh(&self, id: &str, cancel: &CancelToken, held: &AtomicBool) -> Refreshed {
        if held.load(Ordering::SeqCst) {
            return Refreshed::Held;
        }
        let (tx, rx) = bounded(1);
        let first = {
            let mut waiting = self.lock();
            let first = waiting.is_empty();
            waiting.insert(id.to_string(), tx);
            first
        };
        if first {
            let _ = self.events.send(Event::TurnRefreshWanted);
        }
        let deadline = Instant::now() + MAX_WAIT;
        let ended = loop {
            if held.load(Ordering::SeqCst) {
                break Refreshed::Held;
            }
            if cancel.is_cancelled() {
                break Refreshed::Cancelled;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break Refreshed::Held;
            }
            select! {
                recv(rx) -> answer => return answer.unwrap_or(Refreshed::Held),
                recv(cancel.receiver()) -> _ => {}
                default(left.min(CANCEL_CHECK)) => {}
            }
        };
        self.lock().remove(id);
        // An answer may have arrived meanwhile; it wins (its request was already sent).
        rx.try_recv().unwrap_or(ended)
    }

    /// The gate holds requests: release every waiting worker (their runs end normally).
    pub fn release_held(&self) {
        let waiting = std::mem::take(&mut *self.lock());
        for tx in waiting.into_values() {
            let _ = tx.try_send(Refreshed::Held);
        }
    }

    /// Run one batch: take every waiting id, send one `refresh_running` for them all, and answer
    /// each worker. Returns how the call ended (`None`: nobody waited, nothing was sent).
    pub fn serve(&self, tracker: &dyn Tracker) -> Option<CallOutcome> {
        let waiting = std::mem::take(&mut *self.lock());
        if waiting.is_empty() {
            return None;
        }
        let ids: Vec<String> = waiting.keys().cloned().collect();
        let result = tracker.refresh_running(&ids);
        let outcome = CallOutcome::of(&result);
        let mut issues: HashMap<String, Issue> = match &result {
            Ok(v) => v.iter().map(|i| (i.id.clone(), i.clone())).collect(),
            Err(_) => HashMap::new(),
        };
        for (id, tx) in waiting {
            let answer = match &result {
                Ok(_) => Refreshed::Done(Ok(issues.remove(&id).into_iter().collect())),
                Err(_) if outcome.stops_operation() => Refreshed::Held,
                Err(e) => Refreshed::Done(Err(e.clone())),
            };
            let _ = tx.try_send(answer);
        }
        Some(outcome)
    }
}
