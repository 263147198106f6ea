//! Writes `state.json` on its own thread, so the main loop pays for the projection and the
//! hand-off, not for the two fsyncs (milliseconds to tens of milliseconds on real disks). Each
//! finished write comes back as a [`SaveReport`] for `StateWriter::finish`.

use std::io;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Sender};

use super::store::{StateDir, StoreError};

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
