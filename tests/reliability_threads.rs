//! Issue 12, "no silent thread death": a panic in a long-lived thread (here the tracker poll
//! thread, injected through a tracker that panics) takes the daemon down with an error — after
//! the normal shutdown — instead of leaving a daemon that never polls again.
//!
//! A test binary of its own (not in `tests/it/`) because a supervised thread's panic is reported on a process-wide channel, which would stop other in-process daemons.

#[path = "it/support/stand_ins.rs"]
mod stand_ins;
#[path = "it/support/tempdir.rs"]
mod tempdir;

use std::fs;
use std::sync::Arc;
use std::time::Duration;

use baton::runtime::clock::SystemClock;
use baton::runtime::daemon::RunError;

use stand_ins::{daemon_options, minimal_workflow, run, spawn_daemon, StubTracker, TestEnv};
use tempdir::TempDir;

#[test]
fn a_panicking_tracker_thread_takes_the_daemon_down_with_an_error() {
    baton::logging::install_panic_hook();
    let dir = TempDir::new("rel-threads");
    let wf_path = dir.join("WORKFLOW.md");
    fs::write(&wf_path, minimal_workflow(&dir)).unwrap();
    let panicking = StubTracker {
        candidates: || panic!("injected panic in the poll thread \u{1b}[31m"),
        ..StubTracker::empty()
    };
    let clock = Arc::new(SystemClock::default());
    let (opts, _inputs) = daemon_options(&wf_path, Arc::new(TestEnv::none()), panicking, clock);
    let rx = spawn_daemon(move || run(opts));
    let result = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the daemon must exit, not keep running without its poll thread");
    let err = result.expect_err("a thread death is an error exit");
    assert!(
        matches!(&err, RunError::ThreadDied(name) if name.contains("tracker-poll")),
        "{err}"
    );
}
