//! `ManualClock`: virtual time for daemon tests. It moves only when told to, and it counts the
//! loop's turns (each `timer` call is one: the loop handled an event and is about to wait again),
//! so a test can wait for "the daemon reacted" instead of sleeping. Include with
//! `#[path = "it/support/clock.rs"] mod clock;` outside `tests/it`.
#![allow(dead_code)]

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, never, Receiver, Sender};

use baton::orchestrator::Millis;
use baton::runtime::clock::Clock;

/// Virtual time; see the module docs.
#[derive(Debug)]
pub struct ManualClock {
    inner: Mutex<Manual>,
    turned: Condvar,
}

#[derive(Debug)]
struct Manual {
    now: Millis,
    /// The loop's armed timer and the sender that fires it.
    armed: Option<(Millis, Sender<Instant>)>,
    turns: u64,
}

impl ManualClock {
    pub fn new(start: Millis) -> Self {
        ManualClock {
            inner: Mutex::new(Manual {
                now: start,
                armed: None,
                turns: 0,
            }),
            turned: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Manual> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Move time forward by `ms`, firing the loop's timer when its deadline is reached.
    pub fn advance(&self, ms: u64) {
        let mut m = self.lock();
        m.now = m.now.saturating_add(ms);
        fire_if_due(&mut m);
    }

    /// Move time to the loop's armed deadline, but not past `limit`; returns the new time.
    /// Nothing moves when no deadline is armed.
    pub fn advance_to_deadline(&self, limit: Millis) -> Millis {
        let mut m = self.lock();
        if let Some(d) = m.armed.as_ref().map(|(d, _)| *d) {
            m.now = m.now.max(d.min(limit));
            fire_if_due(&mut m);
        }
        m.now
    }

    pub fn deadline(&self) -> Option<Millis> {
        self.lock().armed.as_ref().map(|(d, _)| *d)
    }

    pub fn turns(&self) -> u64 {
        self.lock().turns
    }

    /// Block until more than `seen` turns happened or `timeout` (real time) passed; true when
    /// the loop turned.
    pub fn wait_turn_after(&self, seen: u64, timeout: Duration) -> bool {
        let m = self.lock();
        let (m, _) = self
            .turned
            .wait_timeout_while(m, timeout, |m| m.turns <= seen)
            .unwrap_or_else(|e| e.into_inner());
        m.turns > seen
    }
}

fn fire_if_due(m: &mut Manual) {
    if m.armed.as_ref().is_some_and(|(d, _)| *d <= m.now) {
        if let Some((_, tx)) = m.armed.take() {
            let _ = tx.try_send(Instant::now());
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Millis {
        self.lock().now
    }
    fn timer(&self, deadline: Option<Millis>) -> Receiver<Instant> {
        let mut m = self.lock();
        m.turns += 1;
        self.turned.notify_all();
        let Some(d) = deadline else {
            m.armed = None;
            return never();
        };
        let (tx, rx) = bounded(1);
        m.armed = Some((d, tx));
        fire_if_due(&mut m);
        rx
    }
}
