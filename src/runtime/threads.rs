//! No silent thread death (ARCHITECTURE.md, "Thread policy"): a panic in a long-lived thread is
//! logged and reported on the process-wide fatal channel; the daemon then shuts down gracefully
//! and exits non-zero. No thread is restarted in place: a clean restart is the only state known
//! to be consistent.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::LazyLock;
use std::thread::{self, JoinHandle};

use crossbeam_channel::{unbounded, Receiver, Sender};

static FATAL: LazyLock<(Sender<String>, Receiver<String>)> = LazyLock::new(unbounded);

/// Names of supervised threads that panicked; the daemon loop listens on this.
pub fn fatal_events() -> Receiver<String> {
    FATAL.1.clone()
}

/// Start a long-lived thread named `name` under the policy above: when `f` panics the panic is
/// logged and `name` is sent on [`fatal_events`].
pub fn spawn_supervised<F>(name: &str, f: F) -> std::io::Result<JoinHandle<()>>
where
    F: FnOnce() + Send + 'static,
{
    let name = name.to_string();
    thread::Builder::new().name(name.clone()).spawn(move || {
        if catch_unwind(AssertUnwindSafe(f)).is_err() {
            log::error!("thread panicked; the daemon shuts down thread={name}");
            let _ = FATAL.0.send(name);
        }
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Wait until a thread named `name` is reported on [`fatal_events`]. Reports
    /// for other names are kept for their own waiters (tests run in parallel on one channel).
    pub(crate) fn wait_fatal(name: &str, timeout: std::time::Duration) -> bool {
        static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
        let deadline = std::time::Instant::now() + timeout;
        let fatal = fatal_events();
        loop {
            {
                let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(i) = seen.iter().position(|n| n == name) {
                    seen.remove(i);
                    return true;
                }
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            if let Ok(n) = fatal.recv_timeout(std::time::Duration::from_millis(20)) {
                SEEN.lock().unwrap_or_else(|e| e.into_inner()).push(n);
            }
        }
    }

    #[test]
    fn a_panicking_supervised_thread_is_reported() {
        let h = spawn_supervised("test-panicker", || panic!("injected")).unwrap();
        h.join().unwrap();
        assert!(wait_fatal(
            "test-panicker",
            std::time::Duration::from_secs(5)
        ));
    }
}
