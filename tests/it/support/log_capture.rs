//! A process-wide capture of every log record, split by the GitHub tracker's wire-log filter
//! (`wire_log_allowed`), for the tests that look for a leaked token. Only test binaries of their
//! own may install it (it is the process's logger).

use std::sync::{Mutex, Once};

/// Records `wire_log_allowed` lets through.
static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// TRACE records from the HTTP stack that `wire_log_allowed` rejects (they may hold the token).
static WIRE_TRACE: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, r: &log::Record) {
        let line = format!("{} {} {}", r.level(), r.target(), r.args());
        if baton::tracker::github::wire_log_allowed(r.target(), r.level()) {
            LINES.lock().unwrap().push(line);
        } else {
            WIRE_TRACE.lock().unwrap().push(line);
        }
    }
    fn flush(&self) {}
}

/// Capture every log record up to `level` from now on (installed once per process).
pub fn install(level: log::LevelFilter) {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        log::set_logger(&Capture).unwrap();
        log::set_max_level(level);
    });
}

/// The lines `wire_log_allowed` let through so far (`<level> <target> <message>`).
pub fn lines() -> Vec<String> {
    LINES.lock().unwrap().clone()
}

/// The lines `wire_log_allowed` kept out so far.
pub fn wire_trace() -> Vec<String> {
    WIRE_TRACE.lock().unwrap().clone()
}
