//! The daemon's injected time source. The main loop reads `now()` for every engine call and arms
//! `timer(next_deadline)` before its one `select!`; nothing else in the loop measures time.
//! [`SystemClock`] is wall time advanced monotonically; [`ManualClock`] is virtual time that tests
//! advance explicitly, so daemon-level tests never sleep for a deadline.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{after, bounded, never, Receiver, Sender};

use crate::orchestrator::Millis;
use crate::timefmt::unix_millis;

/// How long the loop waits when nothing is scheduled (a harmless periodic wake).
const IDLE_WAIT: Duration = Duration::from_secs(60);

/// A time source for the main loop.
pub trait Clock: Send + Sync {
    /// The current time on the orchestrator clock.
    fn now(&self) -> Millis;
    /// A channel that receives once `deadline` has come (at once when it already has); `None`
    /// means nothing is scheduled. Called once per loop turn, right before the `select!`.
    fn timer(&self, deadline: Option<Millis>) -> Receiver<Instant>;
}

/// Real time: Unix-epoch milliseconds at start, advanced by a monotonic `Instant`.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    base: Millis,
    start: Instant,
}

impl SystemClock {
    /// A clock starting at the current wall time.
    pub fn new() -> Self {
        SystemClock {
            base: unix_millis(SystemTime::now()),
            start: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Millis {
        let elapsed = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.base.saturating_add(elapsed)
    }
    fn timer(&self, deadline: Option<Millis>) -> Receiver<Instant> {
        match deadline {
            Some(d) => after(Duration::from_millis(d.saturating_sub(self.now()))),
            None => after(IDLE_WAIT),
        }
    }
}

/// Virtual time for tests: it moves only when told to. It also counts the loop's turns (each
/// `timer` call is one: the loop handled an event and is about to wait again), so a test can
/// wait for "the daemon reacted" instead of sleeping.
#[derive(Debug)]
pub struct ManualClock {
    inner: Mutex<Manual>,
    turned: Condvar,
}

#[derive(Debug)]
struct Manual {
    now: Millis,
    /// The loop's armed timer: its deadline and the sender that fires it.
    armed: Option<(Millis, Sender<Instant>)>,
    turns: u64,
}

impl ManualClock {
    /// A virtual clock standing at `start`.
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

    /// The loop's armed deadline, if any.
    pub fn deadline(&self) -> Option<Millis> {
        self.lock().armed.as_ref().map(|(d, _)| *d)
    }

    /// Loop turns so far.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_timer_fires_when_time_reaches_the_deadline() {
        let c = ManualClock::new(1_000);
        let rx = c.timer(Some(1_500));
        assert!(rx.try_recv().is_err());
        c.advance(499);
        assert!(rx.try_recv().is_err());
        c.advance(1);
        assert!(rx.try_recv().is_ok());
        assert_eq!(c.now(), 1_500);
        assert!(
            c.timer(Some(1_000)).try_recv().is_ok(),
            "past deadlines fire at once"
        );
        assert_eq!(c.turns(), 2);
        assert!(c.wait_turn_after(1, Duration::ZERO));
        assert!(!c.wait_turn_after(2, Duration::from_millis(1)));
    }

    #[test]
    fn advance_to_deadline_is_bounded() {
        let c = ManualClock::new(0);
        assert_eq!(c.advance_to_deadline(100), 0, "nothing armed");
        let rx = c.timer(Some(1_000));
        assert_eq!(c.advance_to_deadline(200), 200);
        assert!(rx.try_recv().is_err());
        assert_eq!(c.advance_to_deadline(5_000), 1_000);
        assert!(rx.try_recv().is_ok());
        assert_eq!(c.deadline(), None);
    }

    #[test]
    fn system_clock_is_monotonic_wall_time() {
        let c = SystemClock::new();
        let a = c.now();
        assert!(a > 1_600_000_000_000);
        assert!(c.now() >= a);
    }
}
