//! Issue 24, "implemented but untested", at the daemon level (the real main loop on a virtual
//! clock): the startup terminal sweep end to end (Symphony §8.6, §16.1), and the reload safety
//! net (Symphony §6.2: a WORKFLOW.md change the watcher missed is re-read before a later
//! dispatch). A child module of `orchestrator_daemon`, so it shares that module's fakes.

use std::fs;
use std::sync::Arc;

use crate::support::clock::ManualClock;

use super::{
    issue, start, two_todo_issues_with_hanging_agents, workflow_text, FakeRunner, FakeTracker,
    TurnScript, T0,
};
use crate::support::tempdir::TempDir;

#[test]
fn the_startup_sweep_removes_terminal_workspaces_and_keeps_the_others() {
    let dir = TempDir::new("sweep");
    let tracker = FakeTracker {
        active: vec!["Todo".into()],
        ..FakeTracker::default()
    };
    tracker.add(issue(1, "Todo"));
    tracker.add(issue(5, "Done"));
    tracker.add(issue(6, "In Review"));
    let ws = dir.join("ws");
    for n in [5, 6] {
        fs::create_dir_all(ws.join(format!("acme__repo-{n}"))).unwrap();
        fs::write(ws.join(format!("acme__repo-{n}/work.txt")), "old run").unwrap();
    }
    let runner = FakeRunner {
        clock: Arc::new(ManualClock::new(T0)),
        log: Arc::default(),
        script: Arc::new(|_, _| TurnScript::Hang),
        tracker: tracker.clone(),
        release: Arc::default(),
    };
    let log = runner.log.clone();
    let d = start(&dir, tracker, runner, "");
    // Removal renames the directory to a `.trash-` tombstone first, then deletes that.
    d.wait_until(
        "the Done issue's workspace and its tombstone removed",
        || {
            let trash = fs::read_dir(&ws).into_iter().flatten().flatten();
            let mut names = trash.map(|e| e.file_name().to_string_lossy().into_owned());
            !ws.join("acme__repo-5").exists() && !names.any(|n| n.starts_with(".trash-"))
        },
    );
    d.wait_for("the Todo issue running", |s| s.counts.running == 1);
    // "Running" shows before the worker has made the workspace: wait for its agent's turn there.
    d.wait_until("the Todo issue's agent started in its workspace", || {
        !log.lock().unwrap().cwd.is_empty()
    });
    let mut left: Vec<String> = fs::read_dir(&ws)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".baton") // the state directory
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["acme__repo-1", "acme__repo-6"],
        "the dispatched issue's and the non-terminal one's; no tombstone left"
    );
    assert!(ws.join("acme__repo-6/work.txt").exists());
    let cwds = log.lock().unwrap().cwd.clone();
    assert!(cwds.iter().all(|c| c.ends_with("acme__repo-1")), "{cwds:?}");
    d.stop();
}

#[test]
fn a_workflow_edit_the_watcher_missed_is_picked_up_before_a_later_dispatch() {
    let dir = TempDir::new("safety-net");
    let (tracker, _log, runner) = two_todo_issues_with_hanging_agents();
    let d = start(&dir, tracker, runner, "  max_concurrent_agents: 1\n");
    d.wait_for("one running", |s| s.counts.running == 1);
    // The edit raises the cap; no watcher ping is sent (the test drives the reload input).
    fs::write(
        dir.join("WORKFLOW.md"),
        workflow_text(&dir, "  max_concurrent_agents: 10\n"),
    )
    .unwrap();
    d.wait_for("the second issue dispatched under the new cap", |s| {
        s.counts.running == 2
    });
    d.stop();
}
