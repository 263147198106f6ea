//! Backpressure from the main loop to a run (ARCHITECTURE.md, "The main loop"): the loop needs the
//! latest state of a run, not every line an agent prints, so an activity event replaces the one
//! the loop has not taken yet; everything that counts (budgets depend on it) is kept in order.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crossbeam_channel::Sender;

use crate::agent::{AgentEvent, AgentEventKind};
use crate::orchestrator::{Event, WorkerOutcome, WorkerProgress};

/// Most items a mailbox holds before its worker waits for the loop.
pub const CAPACITY: usize = 64;

/// One report of a run, in the order the worker made it; `Exited` is its last.
#[derive(Debug, Clone, PartialEq)]
pub enum News {
    Progress(WorkerProgress),
    Agent(AgentEvent),
    Exited(WorkerOutcome),
}

#[derive(Default)]
struct Slot {
    items: Vec<News>,
    /// Sent on the wake-up channel and not taken since.
    signalled: bool,
    /// Nobody takes items any more: posts are dropped, no worker waits.
    closed: bool,
}

/// The mailbox of one run (see the module docs).
pub struct Mailbox {
    issue_id: String,
    run_id: u64,
    slot: Mutex<Slot>,
    room: Condvar,
    wake: Sender<Arc<Mailbox>>,
}

/// An activity event the next one may replace: no usage, no cost, not a session start or a
/// turn's end.
fn replaceable(ev: &AgentEvent) -> bool {
    use AgentEventKind::*;
    let counts = matches!(
        ev.kind,
        SessionStarted
            | StartupFailed
            | TurnCompleted
            | TurnFailed
            | TurnCancelled
            | TurnInputRequired
    );
    !counts && ev.usage_delta.is_none() && ev.session_cost_usd.is_none()
}

impl Mailbox {
    /// The mailbox of run `run_id` of `issue_id`; its first news sends it on `wake`.
    pub fn new(issue_id: &str, run_id: u64, wake: Sender<Arc<Mailbox>>) -> Arc<Mailbox> {
        Arc::new(Mailbox {
            issue_id: issue_id.to_string(),
            run_id,
            slot: Mutex::new(Slot::default()),
            room: Condvar::new(),
            wake,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Post one report: replace the pending activity event or append, waiting while the mailbox
    /// is full (see the module docs).
    pub fn post(self: &Arc<Self>, news: News) {
        let mut slot = self.lock();
        let news = match news {
            News::Agent(mut ev) if replaceable(&ev) => match slot.items.last_mut() {
                Some(News::Agent(last)) if replaceable(last) => {
                    ev.session_id = ev.session_id.or(last.session_id.take());
                    ev.agent_session_id = ev.agent_session_id.or(last.agent_session_id.take());
                    ev.agent_pid = ev.agent_pid.or(last.agent_pid);
                    ev.agent_start_time = ev.agent_start_time.or(last.agent_start_time);
                    ev.rate_limits = ev.rate_limits.or(last.rate_limits.take());
                    *last = ev;
                    return;
                }
                _ => News::Agent(ev),
            },
            other => other,
        };
        while slot.items.len() >= CAPACITY && !slot.closed {
            slot = self.room.wait(slot).unwrap_or_else(|e| e.into_inner());
        }
        if slot.closed {
            return;
        }
        slot.items.push(news);
        let wake = !std::mem::replace(&mut slot.signalled, true);
        drop(slot);
        if wake && self.wake.send(Arc::clone(self)).is_err() {
            self.close();
        }
    }

    /// Take everything posted so far, as engine events in order (consecutive agent events of the
    /// run merged into one `AgentUpdates`); a waiting worker continues.
    pub fn take(&self) -> Vec<Event> {
        let items = {
            let mut slot = self.lock();
            slot.signalled = false;
            std::mem::take(&mut slot.items)
        };
        self.room.notify_all();
        let mut out: Vec<Event> = Vec::new();
        for news in items {
            match news {
                News::Progress(progress) => out.push(Event::WorkerProgress {
                    issue_id: self.issue_id.clone(),
                    run_id: self.run_id,
                    progress,
                }),
                News::Exited(outcome) => out.push(Event::WorkerExited {
                    issue_id: self.issue_id.clone(),
                    run_id: self.run_id,
                    outcome,
                }),
                News::Agent(ev) => match out.last_mut() {
                    Some(Event::AgentUpdates { events, .. }) => events.push(ev),
                    _ => out.push(Event::AgentUpdates {
                        issue_id: self.issue_id.clone(),
                        run_id: self.run_id,
                        events: vec![ev],
                    }),
                },
            }
        }
        out
    }

    /// Nobody will take items any more (the loop ended): drop them and release a waiting worker.
    pub fn close(&self) {
        let mut slot = self.lock();
        slot.closed = true;
        slot.items.clear();
        drop(slot);
        self.room.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::TokenUsage;
    use crossbeam_channel::unbounded;

    fn len(m: &Mailbox) -> usize {
        m.lock().items.len()
    }

    fn activity(i: usize) -> News {
        let mut ev = AgentEvent::new(AgentEventKind::Notification, format!("line {i}"));
        if i == 0 {
            ev.session_id = Some("s-1".into());
            ev.agent_pid = Some(42);
        }
        News::Agent(ev)
    }

    fn turn_end(tokens: u64) -> News {
        let mut ev = AgentEvent::new(AgentEventKind::TurnCompleted, "done");
        ev.usage_delta = Some(TokenUsage {
            output_tokens: tokens,
            ..TokenUsage::default()
        });
        News::Agent(ev)
    }

    fn usage(events: &[Event]) -> (u64, usize) {
        let mut tokens = 0;
        let mut ends = 0;
        for e in events {
            if let Event::AgentUpdates { events, .. } = e {
                for ev in events {
                    tokens += ev.usage_delta.as_ref().map_or(0, |u| u.output_tokens);
                    ends += usize::from(ev.kind == AgentEventKind::TurnCompleted);
                }
            }
        }
        (tokens, ends)
    }

    #[test]
    fn a_flood_of_activity_keeps_one_pending_event_and_every_turn_end() {
        let (tx, rx) = unbounded();
        let m = Mailbox::new("I_1", 7, tx);
        m.post(News::Progress(WorkerProgress::TurnStarted(1)));
        for i in 0..100_000 {
            m.post(activity(i));
        }
        m.post(turn_end(5));
        for i in 0..100_000 {
            m.post(activity(i));
        }
        m.post(turn_end(6));
        assert_eq!(len(&m), 5, "progress, activity, end, activity, end");
        assert_eq!(rx.len(), 1, "one wake-up for the whole burst");
        let events = m.take();
        assert_eq!(usage(&events), (11, 2), "usage and turn ends are exact");
        let Event::AgentUpdates { events: evs, .. } = &events[1] else {
            panic!("{events:?}")
        };
        assert_eq!(evs[0].summary, "line 99999", "the latest activity wins");
        assert_eq!(
            evs[0].session_id.as_deref(),
            Some("s-1"),
            "sticky facts kept"
        );
        assert_eq!(evs[0].agent_pid, Some(42));
        assert_eq!(len(&m), 0);
        m.post(activity(1));
        assert_eq!(rx.len(), 2, "news after a take wakes the loop again");
    }

    #[test]
    fn a_worker_waits_while_its_mailbox_is_full_and_nothing_is_lost() {
        let (tx, rx) = unbounded();
        let m = Mailbox::new("I_1", 1, tx);
        let producer = {
            let m = Arc::clone(&m);
            std::thread::spawn(move || {
                for _ in 0..1_000 {
                    m.post(turn_end(1));
                }
            })
        };
        let mut total = (0, 0);
        while total.1 < 1_000 {
            let _ = rx.recv_timeout(std::time::Duration::from_secs(10));
            assert!(len(&m) <= CAPACITY);
            let (t, n) = usage(&m.take());
            total = (total.0 + t, total.1 + n);
        }
        producer.join().unwrap();
        assert_eq!(total, (1_000, 1_000));
    }

    #[test]
    fn a_closed_mailbox_releases_its_worker() {
        let (tx, rx) = unbounded();
        let m = Mailbox::new("I_1", 1, tx);
        drop(rx);
        for _ in 0..(CAPACITY * 2) {
            m.post(turn_end(1)); // the loop is gone: never waits
        }
        assert_eq!(len(&m), 0);
    }
}
