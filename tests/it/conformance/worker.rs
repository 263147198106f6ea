//! Issue 24, "implemented but untested", in the worker (Baton §16): the `after_run` failure is
//! ignored (the run's outcome stays what the turns made it); a prompt that fails to render at run
//! time fails the run with `template_render_error` after stopping the session and running
//! `after_run`; a failed turn and a workspace error end the run the way the algorithm says; a
//! failed `before_run` leaves a reused workspace as it was (Symphony §9.3). A child module of
//! `orchestrator_worker`, so it shares that module's stand-ins.

use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crossbeam_channel::unbounded;

use baton::agent::{
    AgentError, AgentErrorKind, AgentRunner, AgentSession, CancelToken, Emit, SessionContext,
    TurnResult,
};
use baton::model::Issue;
use baton::orchestrator::{Policy, WorkerOutcome};
use baton::runtime::mailbox::Mailbox;
use baton::runtime::worker::{run_attempt, WorkerContext};
use baton::tracker::{TrackerError, TrackerErrorKind};
use baton::workflow::config::HooksConfig;
use baton::workflow::template::{PromptTemplate, MAX_RENDER_BYTES};
use baton::workspace::workspace_path;

use super::{issue, Log, R, T};
use crate::support::stand_ins::serving_refresher;
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
    let runner = Arc::new(R {
        log: log.clone(),
        fail_start: false,
        cancel_in_turn: false,
    });
    (run_with(dir, issue, hooks, template, tracker, runner), log)
}

/// Like [`run`], with `runner` as the agent.
fn run_with(
    dir: &Path,
    issue: Issue,
    hooks: HooksConfig,
    template: &str,
    tracker: T,
    runner: Arc<dyn AgentRunner>,
) -> WorkerOutcome {
    let (refresher, _events) = serving_refresher(Arc::new(tracker));
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
        runner,
        refresher,
        cancel: CancelToken::new(),
        mailbox: Mailbox::new("I_1", 1, unbounded().0),
        host: baton::host::LocalHost::shared(),
        stale_workspace: false,
        resume: None,
    };
    run_attempt(&ctx)
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

/// An agent whose every turn fails; counts (turns, stops).
#[derive(Clone, Default)]
struct Failing(Arc<Mutex<(usize, usize)>>);

impl AgentRunner for Failing {
    fn start_session(&self, _: &SessionContext) -> Result<Box<dyn AgentSession>, AgentError> {
        Ok(Box::new(self.clone()))
    }
}

impl AgentSession for Failing {
    fn run_turn(&mut self, _: &str, _: &CancelToken, _: &mut Emit) -> TurnResult {
        self.0.lock().unwrap().0 += 1;
        Err(AgentError::new(
            AgentErrorKind::TurnFailed,
            "api_error_status=529",
        ))
    }
    fn agent_session_id(&self) -> Option<String> {
        None
    }
    fn stop(&mut self) {
        self.0.lock().unwrap().1 += 1;
    }
}

#[test]
fn a_failed_turn_stops_the_session_runs_after_run_and_fails_without_a_refresh() {
    let dir = TempDir::new("w-turnfail");
    let agent = Failing::default();
    let tracker = T(Err(TrackerError::new(
        TrackerErrorKind::Status,
        "never asked",
    )));
    let out = run_with(
        &dir,
        issue(),
        failing_after_run(&dir),
        "Do it.",
        tracker,
        Arc::new(agent.clone()),
    );
    assert!(
        matches!(&out, WorkerOutcome::Failed(m) if m.starts_with("agent turn error: ") && m.contains("api_error_status=529")),
        "{out:?}"
    );
    assert_eq!(*agent.0.lock().unwrap(), (1, 1), "one turn, then stopped");
    assert_eq!(after_runs(&dir), 1);
}

#[test]
fn a_workspace_error_fails_the_run_before_any_hook_or_agent() {
    let dir = TempDir::new("w-wserr");
    let ws = workspace_path(&dir.join("ws"), "acme__repo-1");
    fs::create_dir_all(ws.parent().unwrap()).unwrap();
    fs::write(&ws, "a file where the workspace should be").unwrap();
    let (out, log) = run(
        &dir,
        issue(),
        failing_after_run(&dir),
        "Do it.",
        T(Ok(vec![issue()])),
    );
    assert!(
        matches!(&out, WorkerOutcome::Failed(m) if m.starts_with("workspace error")),
        "{out:?}"
    );
    assert_eq!(log.lock().unwrap().started, 0);
    assert_eq!(after_runs(&dir), 0, "no workspace, no after_run");
    assert!(ws.is_file(), "the file is left alone");
}

#[test]
fn a_failed_before_run_leaves_a_reused_workspace_as_it_was() {
    let dir = TempDir::new("w-reuse");
    let ws = workspace_path(&dir.join("ws"), "acme__repo-1");
    fs::create_dir_all(&ws).unwrap();
    fs::write(ws.join("work.txt"), "yesterday's work").unwrap();
    let hooks = HooksConfig {
        before_run: Some("git pull --ff-only 2>/dev/null; exit 4".into()),
        ..failing_after_run(&dir)
    };
    let (out, log) = run(&dir, issue(), hooks, "Do it.", T(Ok(vec![issue()])));
    assert!(
        matches!(&out, WorkerOutcome::Failed(m) if m.contains("before_run")),
        "{out:?}"
    );
    assert_eq!(log.lock().unwrap().started, 0);
    assert_eq!(
        fs::read_to_string(ws.join("work.txt")).unwrap(),
        "yesterday's work"
    );
}
