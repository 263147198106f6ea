//! When `state.json` is written, and by whom. [`StateWriter`] decides when: only when the
//! projected bytes changed, at most one write per `min_interval_ms`, a forced final write on
//! shutdown, and after a failure no new attempt before `retry_after_ms` (a full disk is not
//! hammered, the log not flooded); it is pure (every method takes the caller's clock, orchestrator
//! milliseconds), so tests drive it with a virtual clock. [`BackgroundSaver`] writes on its own
//! thread, so the main loop pays for the projection and the hand-off, not for the two fsyncs
//! (milliseconds to tens of milliseconds on real disks).

use std::io;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Sender};

use super::store::{StateDir, StoreError};

/// What [`StateWriter::finish`] or [`StateWriter::flush`] did: nothing (`Clean`: no change since
/// the last write), a write (`recovered`: it ended a streak of failures), or a failed write
/// (`first` of a streak; the in-memory state is kept and retried later).
#[derive(Debug)]
pub enum WriteOutcome {
    Clean,
    Written { recovered: bool },
    Failed { error: StoreError, first: bool },
}

/// Holds the latest projection (the `state.json` bytes) until it is written:
/// [`StateWriter::take_due`] hands out the bytes to write, [`StateWriter::finish`] takes the
/// result back; one write is in flight at a time.
#[derive(Debug)]
pub struct StateWriter {
    min_interval_ms: u64,
    retry_after_ms: u64,
    /// When the first change since the last write was offered.
    dirty_since: Option<u64>,
    last_write_at: Option<u64>,
    /// Set while the latest write failed and no write has succeeded since.
    last_failure_at: Option<u64>,
    written: Option<Vec<u8>>,
    pending: Option<Vec<u8>>,
    in_flight: bool,
}

impl Default for StateWriter {
    /// The daemon's: at most one write per 100 ms, and 5 s after a failed write.
    fn default() -> Self {
        StateWriter::new(100, 5_000)
    }
}

impl StateWriter {
    /// A writer writing at most once per `min_interval_ms`, retrying `retry_after_ms` after a
    /// failure; nothing is known to be on disk yet.
    pub fn new(min_interval_ms: u64, retry_after_ms: u64) -> Self {
        StateWriter {
            min_interval_ms,
            retry_after_ms,
            dirty_since: None,
            last_write_at: None,
            last_failure_at: None,
            written: None,
            pending: None,
            in_flight: false,
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
            self.dirty_since = None;
            return false;
        }
        self.pending = Some(bytes);
        self.dirty_since.get_or_insert(now);
        true
    }

    /// When the pending write is due (a deadline for the main loop): the change time, but no
    /// sooner than `min_interval_ms` after the last write nor `retry_after_ms` after the last
    /// failure; `None` when clean or while a write is in flight (its completion wakes the loop).
    pub fn next_due(&self) -> Option<u64> {
        if self.in_flight || self.pending.is_none() {
            return None;
        }
        let spaced = |t: Option<u64>, by: u64| t.map_or(0, |t| t.saturating_add(by));
        let due = self.dirty_since?;
        Some(
            due.max(spaced(self.last_write_at, self.min_interval_ms))
                .max(spaced(self.last_failure_at, self.retry_after_ms)),
        )
    }

    /// The bytes to write now, if a write is due at `now` and none is in flight. Pass them back
    /// with the result to [`StateWriter::finish`].
    pub fn take_due(&mut self, now: u64) -> Option<Vec<u8>> {
        if self.next_due().is_none_or(|d| now < d) {
            return None;
        }
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
                self.last_write_at = Some(now);
                if self.pending == self.written {
                    self.pending = None;
                }
                // A change made while the write was in flight is due one interval later.
                self.dirty_since = self.pending.is_some().then_some(now);
                WriteOutcome::Written {
                    recovered: self.last_failure_at.take().is_some(),
                }
            }
            Err(error) => {
                self.pending.get_or_insert(bytes);
                self.dirty_since.get_or_insert(now);
                WriteOutcome::Failed {
                    error,
                    first: self.last_failure_at.replace(now).is_none(),
                }
            }
        }
    }

    /// Write the pending projection now on this thread, whatever the timer says (shutdown's final
    /// write). With a [`BackgroundSaver`], stop it and [`StateWriter::finish`] its
    /// last report first: two writers must never run at once.
    pub fn flush(&mut self, dir: &StateDir, now: u64) -> WriteOutcome {
        match self.pending.take() {
            Some(bytes) => {
                let result = dir.save(&bytes);
                self.finish(bytes, result, now)
            }
            None => WriteOutcome::Clean,
        }
    }
}

/// One finished write; `elapsed` feeds `baton_state_write_duration_seconds`.
#[derive(Debug)]
pub struct SaveReport {
    pub bytes: Vec<u8>,
    pub result: Result<(), StoreError>,
    pub elapsed: Duration,
}

/// The writer thread.
#[derive(Debug)]
pub struct BackgroundSaver {
    jobs: Sender<Vec<u8>>,
    thread: JoinHandle<()>,
}

impl BackgroundSaver {
    /// Start the thread writing into `dir`; reports go to `done`.
    pub fn spawn(dir: StateDir, done: Sender<SaveReport>) -> io::Result<BackgroundSaver> {
        let (jobs, rx) = unbounded::<Vec<u8>>();
        let write = move || {
            for bytes in rx {
                let started = Instant::now();
                let result = dir.save(&bytes);
                let elapsed = started.elapsed();
                let report = SaveReport {
                    bytes,
                    result,
                    elapsed,
                };
                if done.send(report).is_err() {
                    break;
                }
            }
        };
        let thread = thread::Builder::new()
            .name("baton-state".into())
            .spawn(write)?;
        Ok(BackgroundSaver { jobs, thread })
    }

    /// Queue a write. Returns the bytes back if the thread is gone (write them synchronously).
    pub fn submit(&self, bytes: Vec<u8>) -> Result<(), Vec<u8>> {
        self.jobs.send(bytes).map_err(|e| e.into_inner())
    }

    /// Let the queued writes finish and join the thread.
    pub fn stop(self) {
        drop(self.jobs);
        let _ = self.thread.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(w: &mut StateWriter, now: u64) -> bool {
        let b = w.take_due(now);
        let ok = b.is_some();
        if let Some(b) = b {
            w.finish(b, Ok(()), now);
        }
        ok
    }

    #[test]
    fn coalesces_to_one_write_per_interval() {
        let mut w = StateWriter::new(100, 5_000);
        assert_eq!(w.next_due(), None);
        w.offer(b"1".to_vec(), 1_000);
        assert!(
            written(&mut w, 1_000),
            "first change after a quiet period: at once"
        );
        w.offer(b"2".to_vec(), 1_010);
        w.offer(b"3".to_vec(), 1_050);
        assert_eq!(w.next_due(), Some(1_100));
        assert!(!written(&mut w, 1_099));
        assert!(written(&mut w, 1_100));
        assert_eq!(w.next_due(), None);
        w.offer(b"4".to_vec(), 5_000);
        assert_eq!(
            w.next_due(),
            Some(5_000),
            "long after the last write: at once"
        );
    }

    #[test]
    fn failure_backs_off_and_reports_streaks() {
        let mut w = StateWriter::new(100, 5_000);
        w.offer(b"1".to_vec(), 0);
        let err = || {
            StoreError::io(
                "write",
                std::path::Path::new("/x"),
                std::io::Error::other("full"),
            )
        };
        let b = w.take_due(0).unwrap();
        assert!(matches!(
            w.finish(b, Err(err()), 0),
            WriteOutcome::Failed { first: true, .. }
        ));
        let b = w.take_due(5_000).unwrap();
        assert!(matches!(
            w.finish(b, Err(err()), 5_000),
            WriteOutcome::Failed { first: false, .. }
        ));
        assert_eq!(w.next_due(), Some(10_000));
        let b = w.take_due(10_000).unwrap();
        assert!(matches!(
            w.finish(b, Ok(()), 10_000),
            WriteOutcome::Written { recovered: true }
        ));
    }
}
