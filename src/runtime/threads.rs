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

/// Route panic messages through the logger (one escaped line with the thread name, location and
/// message) instead of raw stderr. Installed once by the binary.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let thread = thread::current();
        let location = info.location().map_or_else(
            || "unknown".to_string(),
            |l| format!("{}:{}", l.file(), l.line()),
        );
        let name = thread.name().unwrap_or("unnamed");
        log::error!("{}", panic_line(name, &location, info.payload()));
    }));
}

/// The logged text of a panic: thread, location and the message (quoted, escaped).
fn panic_line(thread: &str, location: &str, payload: &(dyn std::any::Any + Send)) -> String {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into());
    format!("panic thread={thread} location={location} message={message:?}")
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
    fn panic_lines_name_the_thread_and_escape_the_message() {
        let p: Box<dyn std::any::Any + Send> = Box::new(String::from("boom\n\u{1b}[31m"));
        assert_eq!(
            panic_line("tracker-poll", "src/x.rs:1", p.as_ref()),
            "panic thread=tracker-poll location=src/x.rs:1 message=\"boom\\n\\u{1b}[31m\""
        );
        let p: Box<dyn std::any::Any + Send> = Box::new(7u8);
        assert!(panic_line("t", "l", p.as_ref()).ends_with("\"non-string panic payload\""));
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
