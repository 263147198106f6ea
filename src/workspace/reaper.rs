//! The workspace-removal pool: removals (with their `before_remove` hooks) run off the main loop
//! on at most [`MAX_REMOVERS`] threads, started on demand and kept until shutdown, when removals
//! not yet started are dropped (the next startup redoes them) and running ones joined, bounded.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};

pub(crate) const MAX_REMOVERS: usize = 4;

type Job = Box<dyn FnOnce() + Send>;

pub(crate) struct Reaper {
    handles: Vec<JoinHandle<()>>,
    jobs: Option<Sender<Job>>,
    queue: Receiver<Job>,
    stopping: Arc<AtomicBool>,
}

impl Default for Reaper {
    fn default() -> Self {
        let (tx, rx) = unbounded();
        Reaper {
            handles: Vec::new(),
            jobs: Some(tx),
            queue: rx,
            stopping: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl Reaper {
    /// Queue `job`; a thread is started when fewer than [`MAX_REMOVERS`] run. Err when no
    /// thread could be started (the job is dropped).
    pub(crate) fn submit(&mut self, job: Job) -> std::io::Result<()> {
        // A thread that panicked is gone (jobs catch their own panics; this is a safety net).
        self.handles.retain(|h| !h.is_finished());
        if let Some(tx) = &self.jobs {
            let _ = tx.send(job);
        }
        if self.handles.len() < MAX_REMOVERS && !self.queue.is_empty() {
            let (queue, stopping) = (self.queue.clone(), Arc::clone(&self.stopping));
            let h = std::thread::Builder::new()
                .name("workspace-clean".into())
                .spawn(move || {
                    // Lives until `join_all` closes the queue.
                    for job in queue.iter() {
                        if stopping.load(Ordering::Relaxed) {
                            return;
                        }
                        job();
                    }
                });
            match h {
                Ok(h) => self.handles.push(h),
                Err(e) if self.handles.is_empty() => {
                    let _ = self.queue.try_recv(); // nobody would run it
                    return Err(e);
                }
                Err(_) => {} // a running thread picks it up
            }
        }
        Ok(())
    }

    /// Drop the removals not yet started and join the running ones, waiting at most `timeout`;
    /// true when all finished.
    pub(crate) fn join_all(&mut self, timeout: Duration) -> bool {
        self.stopping.store(true, Ordering::Relaxed);
        self.jobs = None;
        let dropped = self.queue.try_iter().count();
        if dropped > 0 {
            log::info!("shutdown: {dropped} queued workspace removal(s) left for the next startup");
        }
        let deadline = Instant::now() + timeout;
        loop {
            let (done, live): (Vec<_>, Vec<_>) =
                self.handles.drain(..).partition(JoinHandle::is_finished);
            self.handles = live;
            for h in done {
                let _ = h.join();
            }
            if self.handles.is_empty() {
                return true;
            }
            if Instant::now() >= deadline {
                let n = self.handles.len();
                log::warn!("shutdown: {n} workspace removal(s) still running; exiting anyway");
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Threads still tracked.
    fn threads(r: &Reaper) -> usize {
        r.handles.iter().filter(|h| !h.is_finished()).count()
    }

    #[test]
    fn at_most_max_removers_run_and_join_all_waits() {
        let mut r = Reaper::default();
        let (tx, rx) = crossbeam_channel::bounded::<()>(0);
        let (started_tx, started) = crossbeam_channel::unbounded::<()>();
        for _ in 0..10 {
            let rx = rx.clone();
            let started_tx = started_tx.clone();
            r.submit(Box::new(move || {
                let _ = started_tx.send(());
                let _ = rx.recv();
            }))
            .unwrap();
        }
        assert_eq!(threads(&r), MAX_REMOVERS);
        // Every remover is inside a job (under load a thread may not have taken one yet).
        for _ in 0..MAX_REMOVERS {
            started.recv_timeout(Duration::from_secs(10)).unwrap();
        }
        assert!(!r.join_all(Duration::from_millis(50)), "still blocked");
        drop(tx);
        assert!(r.join_all(Duration::from_secs(5)));
        assert_eq!(threads(&r), 0);
    }

    #[test]
    fn every_job_runs_when_threads_are_idle() {
        let mut r = Reaper::default();
        let (tx, rx) = crossbeam_channel::unbounded();
        for i in 0..50 {
            let tx = tx.clone();
            r.submit(Box::new(move || {
                let _ = tx.send(i);
            }))
            .unwrap();
            if i % 7 == 0 {
                // Let the pool go idle between bursts.
                assert!(rx.recv_timeout(Duration::from_secs(5)).is_ok());
            }
        }
        drop(tx);
        let mut got = 0;
        while rx.recv_timeout(Duration::from_secs(5)).is_ok() {
            got += 1;
        }
        assert_eq!(got + 8, 50, "every job ran");
        assert!(r.join_all(Duration::from_secs(5)));
    }
}
