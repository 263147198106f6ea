//! Issue 12, "SIGTERM during startup": a hung tracker during startup validation no longer holds
//! the shutdown; the daemon returns at once.

use crate::support::tempdir::TempDir;
use std::fs;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::support::stand_ins::run;
use baton::runtime::clock::SystemClock;

use crate::support::stand_ins::{
    daemon_options, minimal_workflow, spawn_daemon, StubTracker, TestEnv,
};

#[test]
fn sigterm_during_a_hung_startup_validation_returns_at_once() {
    let dir = TempDir::new("rel-startup");
    let wf_path = dir.join("WORKFLOW.md");
    fs::write(&wf_path, minimal_workflow(&dir)).unwrap();
    let hung = StubTracker {
        validate: || {
            thread::sleep(Duration::from_secs(600)); // a hung GitHub
            Ok(())
        },
        ..StubTracker::empty()
    };
    let clock = Arc::new(SystemClock::default());
    let (opts, inputs) = daemon_options(&wf_path, Arc::new(TestEnv::none()), hung, clock);
    let rx = spawn_daemon(move || run(opts));
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "still validating"
    );
    inputs.shutdown.send(()).unwrap();
    let result = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("SIGTERM must interrupt the startup");
    assert_eq!(result, Ok(()));
}
