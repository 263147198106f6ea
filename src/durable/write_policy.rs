//! When to write `state.json`: only when the projected bytes changed, at most one write per
//! `min_interval_ms`, a forced final write on shutdown, and after a failure no new attempt before
//! `retry_after_ms` (a full disk is not hammered, the log not flooded). Pure: every method takes
//! the caller's clock (orchestrator milliseconds), so tests drive it with a virtual clock.

use super::store::{StateDir, StoreError};

/// Default minimum spacing of writes.
pub const MIN_INTERVAL_MS: u64 = 100;
/// Default wait after a failed write before the next attempt.
pub const RETRY_AFTER_FAILURE_MS: u64 = 5_000;

/// The coalescing timer (no knowledge of the content).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WritePolicy {
    min_interval_ms: u64,
    retry_after_ms: u64,
    dirty_since: Option<u64>,
    last_write_at: Option<u64>,
    last_failure_at: Option<u64>,
}

impl Default for WritePolicy {
    fn default() -> Self {
        WritePolicy::new(MIN_INTERVAL_MS, RETRY_AFTER_FAILURE_MS)
    }
}

impl WritePolicy {
    /// A policy writing at most once per `min_interval_ms`, retrying `retry_after_ms` after a
    /// failure.
    pub fn new(min_interval_ms: u64, retry_after_ms: u64) -> Self {
        WritePolicy {
            min_interval_ms,
            retry_after_ms,
            dirty_since: None,
            last_write_at: None,
            last_failure_at: None,
        }
    }

    /// The state changed at `now` (the first change since the last write starts the clock).
    pub fn mark_changed(&mut self, now: u64) {
        self.dirty_since.get_or_insert(now);
    }

    /// The content went back to what is on disk: nothing to write.
    pub fn mark_clean(&mut self) {
        self.dirty_since = None;
    }

    /// True while a change is not yet written.
    pub fn is_dirty(&self) -> bool {
        self.dirty_since.is_some()
    }

    /// True while the latest write failed and no write has succeeded since.
    pub fn is_failing(&self) -> bool {
        self.last_failure_at.is_some()
    }

    /// When the next write is due (`None` when clean): the change time, but no sooner than
    /// `min_interval_ms` after the last write nor `retry_after_ms` after the last failure.
    pub fn due_at(&self) -> Option<u64> {
        let mut due = self.dirty_since?;
        if let Some(w) = self.last_write_at {
            due = due.max(w.saturating_add(self.min_interval_ms));
        }
        if let Some(f) = self.last_failure_at {
            due = due.max(f.saturating_add(self.retry_after_ms));
        }
        Some(due)
    }

    /// True if a write should happen at `now`.
    pub fn should_write(&self, now: u64) -> bool {
        self.due_at().is_some_and(|d| now >= d)
    }

    /// A write succeeded at `now`. Returns true if it ends a streak of failures.
    pub fn wrote(&mut self, now: u64) -> bool {
        self.last_write_at = Some(now);
        self.dirty_since = None;
        self.last_failure_at.take().is_some()
    }

    /// A write failed at `now` (the state stays dirty). Returns true for the first failure of
    /// a streak (log it as an error; later ones may be quieter).
    pub fn failed(&mut self, now: u64) -> bool {
        self.last_failure_at.replace(now).is_none()
    }
}

/// What [`StateWriter::write_if_due`] or [`StateWriter::flush`] did.
#[derive(Debug)]
pub enum WriteOutcome {
    /// Nothing changed since the last write.
    Clean,
    /// A change is pending but not due yet (see [`StateWriter::next_due`]).
    NotDue,
    /// Written.
    Written {
        /// The write ended a streak of failures (log the recovery).
        recovered: bool,
    },
    /// The write failed; the in-memory state is kept and retried later.
    Failed {
        /// Why.
        error: StoreError,
        /// First failure of a streak.
        first: bool,
    },
}

/// Change detection plus [`WritePolicy`]: holds the latest projection (the `state.json` bytes)
/// until it is written. Synchronous use: [`StateWriter::write_if_due`] and
/// [`StateWriter::flush`]. Off the main thread (see [`super::saver::BackgroundSaver`]):
/// [`StateWriter::take_due`] hands out the bytes to write, [`StateWriter::finish`] takes the
/// result back; one write is in flight at a time.
#[derive(Debug, Default)]
pub struct StateWriter {
    policy: WritePolicy,
    written: Option<Vec<u8>>,
    pending: Option<Vec<u8>>,
    in_flight: bool,
}

impl StateWriter {
    /// A writer with `policy`; nothing is known to be on disk yet.
    pub fn new(policy: WritePolicy) -> Self {
        StateWriter {
            policy,
            ..StateWriter::default()
        }
    }

    /// Offer the current projection at `now`; returns true if a write is now pending for it.
    /// While a write is in flight every new projection is kept (what reaches the disk is not
    /// known yet).
    pub fn offer(&mut self, bytes: Vec<u8>, now: u64) -> bool {
        if self.pending.as_ref() == Some(&bytes) {
            return false;
        }
        if !self.in_flight && self.written.as_ref() == Some(&bytes) {
            self.pending = None;
            self.policy.mark_clean();
            return false;
        }
        self.pending = Some(bytes);
        self.policy.mark_changed(now);
        true
    }

    /// When the pending write is due (a deadline for the main loop); `None` when clean or while
    /// a write is in flight (its completion wakes the loop).
    pub fn next_due(&self) -> Option<u64> {
        if self.in_flight {
            return None;
        }
        self.pending.as_ref().and(self.policy.due_at())
    }

    /// The timer state (for status and tests).
    pub fn policy(&self) -> &WritePolicy {
        &self.policy
    }

    /// True while a write handed out by [`StateWriter::take_due`] has not been finished.
    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// The bytes to write now, if a write is due at `now` and none is in flight. Pass them back
    /// with the result to [`StateWriter::finish`].
    pub fn take_due(&mut self, now: u64) -> Option<Vec<u8>> {
        if self.in_flight || !self.policy.should_write(now) {
            return None;
        }
        self.take()
    }

    fn take(&mut self) -> Option<Vec<u8>> {
        let bytes = self.pending.take()?;
        self.in_flight = true;
        Some(bytes)
    }

    /// Record the result of writing `bytes` (from [`StateWriter::take_due`]) at `now`. On
    /// failure they are kept (unless a newer projection is pending) and retried later.
    pub fn finish(
        &mut self,
        bytes: Vec<u8>,
        result: Result<(), StoreError>,
        now: u64,
    ) -> WriteOutcome {
        self.in_flight = false;
        match result {
            Ok(()) => {
                self.written = Some(bytes);
                let recovered = self.policy.wrote(now);
                if self.pending.is_some() {
                    if self.pending == self.written {
                        self.pending = None;
                    } else {
                        self.policy.mark_changed(now);
                    }
                }
                WriteOutcome::Written { recovered }
            }
            Err(error) => {
                self.pending.get_or_insert(bytes);
                WriteOutcome::Failed {
                    error,
                    first: self.policy.failed(now),
                }
            }
        }
    }

    /// Write the pending projection if it is due at `now`, on this thread.
    pub fn write_if_due(&mut self, dir: &StateDir, now: u64) -> WriteOutcome {
        match self.take_due(now) {
            Some(bytes) => self.save(dir, bytes, now),
            None if self.pending.is_none() => WriteOutcome::Clean,
            None => WriteOutcome::NotDue,
        }
    }

    /// Write the pending projection now, whatever the timer says (shutdown's final write). With
    /// a [`super::saver::BackgroundSaver`], stop it and [`StateWriter::finish`] its last report
    /// first: two writers must never run at once.
    pub fn flush(&mut self, dir: &StateDir, now: u64) -> WriteOutcome {
        match self.take() {
            Some(bytes) => self.save(dir, bytes, now),
            None => WriteOutcome::Clean,
        }
    }

    fn save(&mut self, dir: &StateDir, bytes: Vec<u8>, now: u64) -> WriteOutcome {
        let result = dir.save(&bytes);
        self.finish(bytes, result, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesces_to_one_write_per_interval() {
        let mut p = WritePolicy::new(100, 5_000);
        assert_eq!(p.due_at(), None);
        p.mark_changed(1_000);
        assert!(
            p.should_write(1_000),
            "first change after a quiet period: at once"
        );
        p.wrote(1_000);
        p.mark_changed(1_010);
        p.mark_changed(1_050);
        assert_eq!(p.due_at(), Some(1_100));
        assert!(!p.should_write(1_099));
        assert!(p.should_write(1_100));
        p.wrote(1_100);
        assert_eq!(p.due_at(), None);
        p.mark_changed(5_000);
        assert_eq!(
            p.due_at(),
            Some(5_000),
            "long after the last write: at once"
        );
    }

    #[test]
    fn failure_backs_off_and_reports_streaks() {
        let mut p = WritePolicy::new(100, 5_000);
        p.mark_changed(0);
        assert!(p.failed(0));
        assert!(!p.failed(0), "second failure of the streak");
        assert!(p.is_dirty() && p.is_failing());
        assert_eq!(p.due_at(), Some(5_000));
        assert!(p.wrote(5_000), "a success ends the streak");
        assert!(!p.is_failing());
        p.mark_changed(5_001);
        assert!(!p.wrote(5_200));
    }

    #[test]
    fn clean_again_means_nothing_due() {
        let mut p = WritePolicy::default();
        p.mark_changed(7);
        p.mark_clean();
        assert_eq!(p.due_at(), None);
        assert!(!p.should_write(u64::MAX));
    }
}
