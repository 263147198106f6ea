//! Tracking of workspace-removal threads: they are joined (bounded) at shutdown, so a removal
//! (and its `before_remove` hook) is never cut off by the process exit without a log line.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often `join_all` looks at unfinished threads.
const POLL: Duration = Duration::from_millis(20);

/// The removal threads started and not yet joined.
#[derive(Debug, Default)]
pub(crate) struct Reaper {
    handles: Vec<JoinHandle<()>>,
}

impl Reaper {
    /// Track `h`; threads that already finished are joined now.
    pub(crate) fn track(&mut self, h: JoinHandle<()>) {
        self.reap_finished();
        self.handles.push(h);
    }

    /// Number of removal threads still tracked.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.handles.len()
    }

    fn reap_finished(&mut self) {
        let (done, live): (Vec<_>, Vec<_>) =
            self.handles.drain(..).partition(JoinHandle::is_finished);
        self.handles = live;
        for h in done {
            let _ = h.join();
        }
    }

    /// Join every tracked thread, waiting at most `timeout` in total; true when all finished.
    pub(crate) fn join_all(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            self.reap_finished();
            if self.handles.is_empty() {
                return true;
            }
            if Instant::now() >= deadline {
                log::warn!(
                    "shutdown: {} workspace removal(s) still running; exiting anyway",
                    self.handles.len()
                );
                return false;
            }
            std::thread::sleep(POLL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_all_waits_for_tracked_threads() {
        let mut r = Reaper::default();
        let (tx, rx) = crossbeam_channel::bounded::<()>(0);
        r.track(std::thread::spawn(move || {
            let _ = rx.recv();
        }));
        assert_eq!(r.pending(), 1);
        assert!(!r.join_all(Duration::from_millis(50)), "still blocked");
        drop(tx);
        assert!(r.join_all(Duration::from_secs(5)));
        assert_eq!(r.pending(), 0);
    }
}
