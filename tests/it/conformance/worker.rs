//! Issue 24, "implemented but untested": the worker's `after_run` failure is ignored (the run's
//! outcome stays what the turns made it), and a prompt that fails to render at run time fails the
//! run with `template_render_error` after stopping the session and running `after_run`. A child
//! module of `orchestrator_worker`, so it shares that module's stand-ins.

use std::fs;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use crossbeam_channel::unbounded;

use baton::agent::CancelToken;
use baton::model::Issue;
use baton::orchestrator::{Policy, WorkerOutcome};
use baton::runtime::worker::{run_attempt, WorkerContext};
use baton::tracker::{TrackerError, TrackerErrorKind};
use baton::workflow::config::HooksConfig;
use baton::workflow::template::{PromptTemplate, MAX_RENDER_BYTES};
use baton::workspace::workspace_path;

use super::{issue, Log, R, T};
use crate::support::tempdir::TempDir;

/// One run of `issue` in `dir` with `hooks`, `template` and `tracker`; the agent log and outcome.
fn run(
    dir: &Path,
    issue: Issue,
    hooks: HooksConfig,
    template: &str,
    tracker: T,
) -> (WorkerOutcome, Arc<Mutex<Log>>) {
    let log = Arc::new(Mutex::new(Log::default()));
    let (tx, _events) = unbounded();
    let ctx = WorkerContext {
        run_id: 1,
        workspace_path: workspace_path(&dir.join("ws"), &issue.identifier),
        issue,
        attempt: None,
        hooks,
        max_turns: 3,
        template: PromptTemplate::compile(template, 5).expect("compiles"),
        policy: Policy {
            required_labels: vec!["baton".into()],
            ..Policy::default()
        },
        runner: Arc::new(R {
            log: log.clone(),
            fail_start: false,
            cancel_in_turn: false,
        }),
        tracker: Arc::new(tracker),
        cancel: CancelToken::new(),
        events: tx,
        host: baton::host::LocalHost::shared(),
        tracker_held: Arc::new(AtomicBool::new(false)),
    };
    (run_attempt(&ctx), log)
}

/// An `after_run` that records each run in `<dir>/after_run` and then fails.
fn failing_after_run(dir: &Path) -> HooksConfig {
    HooksConfig {
        after_run: Some(format!(
            "echo ran >> '{}'; exit 9",
            dir.join("after_run").display()
        )),
        timeout_ms: 5_000,
        ..HooksConfig::default()
    }
}

fn after_runs(dir: &Path) -> usize {
    fs::read_to_string(dir.join("after_run")).map_or(0, |s| s.lines().count())
}

#[test]
fn a_failing_after_run_keeps_the_runs_outcome() {
    // A run that ends normally stays normal (its continuation is a 1 s retry, not a backoff).
    let dir = TempDir::new("w-afterrun-ok");
    let (out, log) = run(
        &dir,
        issue(),
        failing_after_run(&dir),
        "Do it.",
        T(Ok(vec![issue()])),
    );
    assert_eq!(out, WorkerOutcome::Normal);
    assert_eq!(log.lock().unwrap().turns, 3, "up to max_turns");
    assert_eq!(after_runs(&dir), 1, "after_run ran (and failed) once");

    // A failed run keeps its own error, not the hook's.
    let dir = TempDir::new("w-afterrun-fail");
    let err = TrackerError::new(TrackerErrorKind::Status, "HTTP 502");
    let (out, _) = run(
        &dir,
        issue(),
        failing_after_run(&dir),
        "Do it.",
        T(Err(err)),
    );
    assert!(
        matches!(&out, WorkerOutcome::Failed(m) if m.contains("issue state refresh error") && !m.contains("after_run")),
        "{out:?}"
    );
    assert_eq!(after_runs(&dir), 1);
}

#[test]
fn a_prompt_that_fails_to_render_at_run_time_fails_the_run_after_stopping_and_after_run() {
    // The template passes the load-time dry render (a small sample issue) but this issue's text
    // makes the output exceed the render bound.
    let template = "{% for l in issue.labels %}{{ issue.description }}{% endfor %}";
    PromptTemplate::compile(template, 5)
        .unwrap()
        .validate()
        .expect("valid at load");
    let mut big = issue();
    big.labels = (0..64).map(|n| format!("l{n}")).collect();
    big.labels[0] = "baton".into();
    big.description = Some("x".repeat(MAX_RENDER_BYTES / 32));
    let dir = TempDir::new("w-render");
    let (out, log) = run(
        &dir,
        big.clone(),
        failing_after_run(&dir),
        template,
        T(Ok(vec![big])),
    );
    assert!(
        matches!(&out, WorkerOutcome::Failed(m) if m.starts_with("prompt error: template_render_error")),
        "{out:?}"
    );
    let log = log.lock().unwrap();
    assert_eq!(log.turns, 0, "no prompt reached the agent");
    assert_eq!(
        (log.started, log.stopped),
        (1, 1),
        "the session was stopped"
    );
    assert_eq!(after_runs(&dir), 1, "after_run ran");
}
