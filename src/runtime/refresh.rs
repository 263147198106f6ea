//! Between-turn refreshes, coalesced (issue 25; ARCHITECTURE.md, "The core", `gate`): a worker
//! whose turn ended leaves its issue id here and waits; the first waiter of a batch sends
//! `Event::TurnRefreshWanted`, and the tracker thread running the next fetch batch
//! (`Action::FetchIssues`) sends one `refresh_running(ids)` for all waiters and hands each its
//! issue ([`Refresher::serve`]); the main loop neither waits nor sees the issues. A worker waits
//! until its answer, its cancel, the gate holding requests ([`Refresher::set_held`]) or
//! [`MAX_WAIT`]. The answers are paced, in join order [`PACE_GAP`] apart within [`PACE_SPREAD`]:
//! a batch answers about 74 workers at 1,000 agents, whose next processes would otherwise start at
//! once (a `bash` start on 2 cores takes tens of ms; docs/performance.md, "Scale").

use std::collections::HashMap;
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

/// The spacing of the answers of one batch (see the module docs).
pub const PACE_GAP: Duration = Duration::from_millis(40);
/// The longest one batch's answers are spread over.
pub const PACE_SPREAD: Duration = Duration::from_secs(2);

/// How often a waiting worker re-checks whether the gate holds requests: [`Refresher::set_held`]
/// releases the workers still waiting, not those whose batch is already in flight.
const HELD_CHECK: Duration = Duration::from_secs(1);

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

/// An answer, and how long after the batch its worker waits before returning it.
type Answer = (Refreshed, Duration);

/// The waiting workers of the next batch in the order they joined (one per issue: an issue runs
/// once at a time), and whether the gate holds requests.
#[derive(Default)]
struct Batch {
    waiting: Vec<(String, Sender<Answer>)>,
    held: bool,
}

/// Where workers wait for their between-turn refresh (see the module docs).
pub struct Refresher {
    batch: Mutex<Batch>,
    events: Sender<Event>,
    /// [`PACE_GAP`] and [`PACE_SPREAD`] (tests set their own).
    pace: (Duration, Duration),
}

impl Refresher {
    /// An empty refresher whose first waiter of each batch sends `TurnRefreshWanted` on `events`.
    pub fn new(events: Sender<Event>) -> Arc<Self> {
        Arc::new(Refresher {
            batch: Mutex::default(),
            events,
            pace: (PACE_GAP, PACE_SPREAD),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Batch> {
        self.batch.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait for issue `id` from the next fetch batch (see the module docs).
    pub fn refresh(&self, id: &str, cancel: &CancelToken) -> Refreshed {
        let (answer, pace) = self.answer(id, cancel);
        if !pace.is_zero() {
            let _ = cancel.receiver().recv_timeout(pace);
        }
        answer
    }

    /// [`Refresher::refresh`] without the pacing wait: the answer and its delay.
    fn answer(&self, id: &str, cancel: &CancelToken) -> Answer {
        let not_paced = |r| (r, Duration::ZERO);
        let (tx, rx) = bounded(1);
        let first = {
            let mut batch = self.lock();
            if batch.held {
                return not_paced(Refreshed::Held);
            }
            batch.waiting.retain(|(w, _)| w != id);
            batch.waiting.push((id.to_string(), tx));
            batch.waiting.len() == 1
        };
        if first {
            let _ = self.events.send(Event::TurnRefreshWanted);
        }
        let deadline = Instant::now() + MAX_WAIT;
        let ended = loop {
            if cancel.is_cancelled() {
                break Refreshed::Cancelled;
            }
            if self.lock().held {
                break Refreshed::Held;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break Refreshed::Held;
            }
            select! {
                recv(rx) -> answer => return answer.unwrap_or(not_paced(Refreshed::Held)),
                recv(cancel.receiver()) -> _ => {}
                default(left.min(HELD_CHECK)) => {}
            }
        };
        self.lock().waiting.retain(|(w, _)| w != id);
        // An answer may have arrived meanwhile; it wins (its request was already sent).
        rx.try_recv().unwrap_or(not_paced(ended))
    }

    /// Whether the main loop's request gate holds tracker requests (a rate-limit pause or the
    /// credential back-off). While it does, no refresh is asked for and every waiting worker is
    /// released: its run ends normally, and its continuation retry waits for the gate like every
    /// other request.
    pub fn set_held(&self, held: bool) {
        let mut batch = self.lock();
        batch.held = held;
        if held {
            for (_, tx) in batch.waiting.drain(..) {
                let _ = tx.try_send((Refreshed::Held, Duration::ZERO));
            }
        }
    }

    /// Run one batch: take every waiting id, send one `refresh_running` for them all, and answer
    /// each worker, paced (see the module docs). Returns how the call ended (`None`: nobody
    /// waited, nothing was sent).
    pub fn serve(&self, tracker: &dyn Tracker) -> Option<CallOutcome> {
        let waiting = std::mem::take(&mut self.lock().waiting);
        if waiting.is_empty() {
            return None;
        }
        let ids: Vec<String> = waiting.iter().map(|(id, _)| id.clone()).collect();
        let result = tracker.refresh_running(&ids);
        let outcome = CallOutcome::of(&result);
        let mut issues: HashMap<String, Issue> = match &result {
            Ok(v) => v.iter().map(|i| (i.id.clone(), i.clone())).collect(),
            Err(_) => HashMap::new(),
        };
        let (gap, spread) = self.pace;
        let n = u32::try_from(waiting.len()).unwrap_or(u32::MAX);
        let gap = gap.min(spread / n);
        for (i, (id, tx)) in (0..).zip(waiting) {
            let answer = match &result {
                Ok(_) => Refreshed::Done(Ok(issues.remove(&id).into_iter().collect())),
                Err(_) if outcome.stops_operation() => Refreshed::Held,
                Err(e) => Refreshed::Done(Err(e.clone())),
            };
            let _ = tx.try_send((answer, gap * i));
        }
        Some(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::{TrackerBudget, TrackerErrorKind};
    use crossbeam_channel::unbounded;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::thread;

    /// A tracker whose `refresh_running` answers `answer` (issues for the ids it knows) and
    /// counts its calls and ids; with `slow`, it first says it started, then blocks until the
    /// second channel closes.
    struct T {
        answer: Result<(), TrackerError>,
        calls: AtomicUsize,
        ids: Mutex<Vec<String>>,
        slow: Option<(Sender<()>, crossbeam_channel::Receiver<()>)>,
    }

    impl T {
        fn new(answer: Result<(), TrackerError>) -> Self {
            T {
                answer,
                calls: AtomicUsize::new(0),
                ids: Mutex::new(Vec::new()),
                slow: None,
            }
        }
    }

    impl Tracker for T {
        fn fetch_candidate_issues(&self) -> Result<Vec<Issue>, TrackerError> {
            Ok(vec![])
        }
        fn fetch_issues_by_states(&self, _: &[String]) -> Result<Vec<Issue>, TrackerError> {
            Ok(vec![])
        }
        fn fetch_issue_states_by_ids(&self, ids: &[String]) -> Result<Vec<Issue>, TrackerError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.ids.lock().unwrap().extend(ids.iter().cloned());
            if let Some((started, release)) = &self.slow {
                let _ = started.send(());
                let _ = release.recv();
            }
            self.answer.clone()?;
            // "I_gone" is no longer on the project.
            let known = ids.iter().filter(|id| *id != "I_gone");
            Ok(known
                .map(|id| Issue {
                    id: id.clone(),
                    state: format!("state of {id}"),
                    ..Issue::default()
                })
                .collect())
        }
        fn validate(&self) -> Result<(), TrackerError> {
            Ok(())
        }
        fn reset_cache(&self) {}
        fn rate_limit(&self) -> Option<TrackerBudget> {
            None
        }
    }

    /// A worker whose batch is already in flight is released too once the gate holds requests
    /// (at its next `HELD_CHECK`), not kept waiting on the slow request for up to `MAX_WAIT`.
    #[test]
    fn a_worker_whose_batch_is_in_flight_is_released_when_the_gate_holds() {
        let r = Refresher::new(unbounded().0);
        let (done_tx, done) = bounded(1);
        let worker = Arc::clone(&r);
        thread::spawn(move || done_tx.send(worker.refresh("I_1", &CancelToken::new())));
        wait_for_waiters(&r, 1);
        let (started_tx, started) = bounded(1);
        let (release_tx, release) = bounded::<()>(0);
        let server = Arc::clone(&r);
        let slow = T {
            slow: Some((started_tx, release)),
            ..T::new(Ok(()))
        };
        let served = thread::spawn(move || server.serve(&slow));
        started.recv().unwrap();
        r.set_held(true);
        let answer = done.recv_timeout(Duration::from_secs(30));
        drop(release_tx);
        assert_eq!(answer, Ok(Refreshed::Held));
        assert_eq!(served.join().unwrap(), Some(CallOutcome::Ok));
    }

    /// `n` workers waiting for ids `I_0..`, each on its own thread.
    fn waiters(r: &Arc<Refresher>, ids: &[&str]) -> Vec<thread::JoinHandle<Refreshed>> {
        ids.iter()
            .map(|id| {
                let (r, id) = (Arc::clone(r), id.to_string());
                thread::spawn(move || r.refresh(&id, &CancelToken::new()))
            })
            .collect()
    }

    fn wait_for_waiters(r: &Refresher, n: usize) {
        let t0 = Instant::now();
        while r.lock().waiting.len() < n {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "waiters never joined"
            );
            thread::yield_now();
        }
    }

    #[test]
    fn one_request_answers_every_waiting_worker_and_the_loop_hears_once() {
        let (tx, rx) = unbounded();
        let r = Refresher::new(tx);
        let ids = ["I_1", "I_2", "I_3", "I_gone"];
        let workers = waiters(&r, &ids);
        wait_for_waiters(&r, ids.len());
        let t = T::new(Ok(()));
        assert_eq!(r.serve(&t), Some(CallOutcome::Ok));
        let answers: Vec<Refreshed> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        for (id, answer) in ids.iter().zip(&answers) {
            let Refreshed::Done(Ok(issues)) = answer else {
                panic!("{id}: {answer:?}");
            };
            let got: Vec<&str> = issues.iter().map(|i| i.id.as_str()).collect();
            let want: &[&str] = if *id == "I_gone" { &[] } else { &[*id] };
            assert_eq!(got, want);
        }
        assert_eq!(t.calls.load(Ordering::SeqCst), 1);
        let mut sent = t.ids.lock().unwrap().clone();
        sent.sort();
        assert_eq!(sent, ["I_1", "I_2", "I_3", "I_gone"]);
        let wanted = rx.try_iter().filter(|e| *e == Event::TurnRefreshWanted);
        assert_eq!(
            wanted.count(),
            1,
            "only the first waiter of a batch tells the loop"
        );
        assert_eq!(r.serve(&t), None, "nobody waits: nothing is sent");
        assert_eq!(t.calls.load(Ordering::SeqCst), 1);
    }

    /// The answers of one batch come `gap` apart in the order the workers joined, and a big
    /// batch shrinks the gap to stay within `spread` (the delays, not waited for here).
    #[test]
    fn a_batch_answers_its_workers_paced_in_the_order_they_joined() {
        let (tx, _rx) = unbounded();
        let ms = Duration::from_millis;
        for (n, gap, spread, want) in [(4, ms(10), ms(1000), ms(10)), (5, ms(10), ms(20), ms(4))] {
            let mut r = Refresher::new(tx.clone());
            Arc::get_mut(&mut r).unwrap().pace = (gap, spread);
            let workers: Vec<_> = (0..n)
                .map(|k| {
                    let r2 = Arc::clone(&r);
                    let w =
                        thread::spawn(move || r2.answer(&format!("I_{k}"), &CancelToken::new()));
                    wait_for_waiters(&r, k + 1);
                    w
                })
                .collect();
            assert_eq!(r.serve(&T::new(Ok(()))), Some(CallOutcome::Ok));
            for (k, w) in (0..).zip(workers) {
                let (answer, delay) = w.join().unwrap();
                assert!(matches!(answer, Refreshed::Done(Ok(_))), "{answer:?}");
                assert_eq!(delay, want * k, "worker {k} of {n}");
            }
        }
    }

    #[test]
    fn a_refused_batch_releases_its_workers_and_other_errors_reach_them() {
        let (tx, _rx) = unbounded();
        for (kind, held_answer) in [
            (TrackerErrorKind::RateLimited, true),
            (TrackerErrorKind::Auth, true),
            (TrackerErrorKind::Status, false),
        ] {
            let r = Refresher::new(tx.clone());
            let workers = waiters(&r, &["I_1", "I_2"]);
            wait_for_waiters(&r, 2);
            let t = T::new(Err(TrackerError::new(kind, "no")));
            r.serve(&t);
            for w in workers {
                let answer = w.join().unwrap();
                match answer {
                    Refreshed::Held => assert!(held_answer, "{kind:?}"),
                    Refreshed::Done(Err(e)) => assert!(!held_answer && e.kind == kind),
                    other => panic!("{kind:?}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn a_held_gate_or_a_cancel_ends_the_wait() {
        let (tx, _rx) = unbounded();
        let r = Refresher::new(tx);
        r.set_held(true);
        let cancel = CancelToken::new();
        assert_eq!(r.refresh("I_1", &cancel), Refreshed::Held);
        assert!(r.lock().waiting.is_empty(), "a held gate is not joined");
        r.set_held(false);
        let workers = waiters(&r, &["I_1", "I_2"]);
        wait_for_waiters(&r, 2);
        r.set_held(true);
        for w in workers {
            assert_eq!(w.join().unwrap(), Refreshed::Held);
        }
        r.set_held(false);
        let (r2, c2) = (Arc::clone(&r), cancel.clone());
        let worker = thread::spawn(move || r2.refresh("I_3", &c2));
        wait_for_waiters(&r, 1);
        cancel.cancel();
        assert_eq!(worker.join().unwrap(), Refreshed::Cancelled);
        assert!(
            r.lock().waiting.is_empty(),
            "a cancelled worker leaves the batch"
        );
    }
}
