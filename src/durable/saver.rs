//! Writes `state.json` on its own thread, so the main loop pays for the projection and the
//! hand-off, not for the two fsyncs (milliseconds to tens of milliseconds on real disks).
//!
//! Use with [`StateWriter`]: hand [`StateWriter::take_due`]'s state to
//! [`BackgroundSaver::submit`]; each finished write comes back as a [`SaveReport`] on the
//! channel given to [`BackgroundSaver::spawn`] (select on it in the main loop) and goes to
//! [`StateWriter::finish`]. On shutdown: [`BackgroundSaver::stop`], finish the reports still in
//! the channel, then [`StateWriter::flush`] on the main thread.
//!
//! [`StateWriter`]: crate::durable::StateWriter
//! [`StateWriter::take_due`]: crate::durable::StateWriter::take_due
//! [`StateWriter::finish`]: crate::durable::StateWriter::finish
//! [`StateWriter::flush`]: crate::durable::StateWriter::flush

use std::io;
use std::thread::{self, JoinHandle};

use crossbeam_channel::{unbounded, Sender};

use super::store::{StateDir, StoreError};

/// One finished write.
#[derive(Debug)]
pub struct SaveReport {
    /// What was written (hand back to [`crate::durable::StateWriter::finish`]).
    pub bytes: Vec<u8>,
    /// The result.
    pub result: Result<(), StoreError>,
    /// How long the write took (for `baton_state_write_duration_seconds`).
    pub elapsed: std::time::Duration,
}

/// The writer thread.
#[derive(Debug)]
pub struct BackgroundSaver {
    jobs: Option<Sender<Vec<u8>>>,
    thread: Option<JoinHandle<()>>,
}

impl BackgroundSaver {
    /// Start the thread writing into `dir`; reports go to `done`.
    pub fn spawn(dir: StateDir, done: Sender<SaveReport>) -> io::Result<BackgroundSaver> {
        let (jobs, rx) = unbounded::<Vec<u8>>();
        let thread = thread::Builder::new()
            .name("baton-state".into())
            .spawn(move || {
                for bytes in rx {
                    let started = std::time::Instant::now();
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
            })?;
        Ok(BackgroundSaver {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }

    /// Queue a write. Returns the bytes back if the thread is gone (write them synchronously).
    pub fn submit(&self, bytes: Vec<u8>) -> Result<(), Vec<u8>> {
        match &self.jobs {
            Some(tx) => tx.send(bytes).map_err(|e| e.into_inner()),
            None => Err(bytes),
        }
    }

    /// Let the queued writes finish and join the thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for BackgroundSaver {
    fn drop(&mut self) {
        self.shutdown();
    }
}
