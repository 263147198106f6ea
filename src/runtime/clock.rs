//! The daemon's injected time source: [`SystemClock`] in the binary, the tests' virtual
//! `ManualClock` (`tests/it/support/clock.rs`); nothing else in the loop measures time.

use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{after, Receiver};

use crate::orchestrator::Millis;
use crate::timefmt::unix_millis;

/// How long the loop waits when nothing is scheduled (a harmless periodic wake).
const IDLE_WAIT: Duration = Duration::from_secs(60);

/// A time source for the main loop.
pub trait Clock: Send + Sync {
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

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock {
            base: unix_millis(SystemTime::now()),
            start: Instant::now(),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_is_monotonic_wall_time() {
        let c = SystemClock::default();
        let a = c.now();
        assert!(a > 1_600_000_000_000);
        assert!(c.now() >= a);
    }
}
