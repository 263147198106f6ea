//! Issue 24, item 3: a worker that does not stop within the shutdown grace makes the shutdown a
//! forced one: an error of class `forced_shutdown` (`baton` exits 3), after every process group
//! the abandoned worker owns was killed. Nothing is left running.
//!
//! A test binary of its own (not in `tests/it/`) because a forced shutdown kills every process
//! group supervised in the process, which would kill the agents of other tests.

#[path = "it/support/clock.rs"]
mod clock;
#[path = "it/support/stand_ins.rs"]
mod stand_ins;
#[path = "it/support/tempdir.rs"]
mod tempdir;

use std::fs;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};

use baton::agent::{
    AgentError, AgentEvent, AgentEventKind, AgentRunner, AgentSession, CancelToken, Emit,
    SessionContext, TurnResult,
};
use baton::host::{Host, Process, ProcessSpec};
use baton::model::Issue;
use baton::runtime::clock::Clock;
use baton::runtime::daemon::{RunError, RunnerFactory, TrackerFactory};
use baton::tracker::{Tracker, TrackerBudget, TrackerError};
use baton::workflow::config::ServiceConfig;
use clock::ManualClock;

use stand_ins::{daemon_options_with, run, spawn_daemon, TestEnv};
use tempdir::TempDir;

fn the_issue() -> Issue {
    Issue {
        id: "I_1".into(),
        identifier: "acme__repo-1".into(),
        number: 1,
        repository: "acme/repo".into(),
        title: "stuck".into(),
        state: "Todo".into(),
        ..Issue::default()
    }
}

struct Board;

impl Tracker for Board {
    fn fetch_candidate_issues(&self) -> Result<Vec<Issue>, TrackerError> {
        Ok(vec![the_issue()])
    }
    fn fetch_issues_by_states(&self, _: &[String]) -> Result<Vec<Issue>, TrackerError> {
        Ok(Vec::new())
    }
    fn fetch_issue_states_by_ids(&self, _: &[String]) -> Result<Vec<Issue>, TrackerError> {
        Ok(vec![the_issue()])
    }
    fn validate(&self) -> Result<(), TrackerError> {
        Ok(())
    }
    fn reset_cache(&self) {}
    fn rate_limit(&self) -> Option<TrackerBudget> {
        None
    }
}

/// An agent whose turn starts a process group and then ignores the cancel until released.
#[derive(Clone)]
struct Stuck {
    /// The group's pid, once started.
    started: Sender<u32>,
    release: Receiver<()>,
}

struct Session {
    agent: Stuck,
    host: Arc<dyn Host>,
    workspace: std::path::PathBuf,
    process: Option<Box<dyn Process>>,
}

impl AgentRunner for Stuck {
    fn start_session(&self, ctx: &SessionContext) -> Result<Box<dyn AgentSession>, AgentError> {
        Ok(Box::new(Session {
            agent: self.clone(),
            host: Arc::clone(&ctx.host),
            workspace: ctx.workspace.clone(),
            process: None,
        }))
    }
}

impl AgentSession for Session {
    fn run_turn(&mut self, _: &str, _: &CancelToken, emit: &mut Emit) -> TurnResult {
        let p = self
            .host
            .spawn(&ProcessSpec::command("sleep 300", &self.workspace))
            .expect("spawn");
        emit(AgentEvent::new(AgentEventKind::Notification, "started"));
        let _ = self.agent.started.send(p.pid());
        self.process = Some(p);
        let _ = self.agent.release.recv_timeout(Duration::from_secs(60));
        Ok(())
    }
    fn agent_session_id(&self) -> Option<String> {
        None
    }
    fn stop(&mut self) {}
}

fn alive(pid: u32) -> bool {
    // A zombie is not running: only its /proc entry is left until the reaper runs.
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

#[test]
fn a_worker_that_outlives_the_grace_is_a_forced_shutdown_that_leaves_nothing_running() {
    let dir = TempDir::new("forced");
    let home = TempDir::new("forced-home");
    let wf = dir.join("WORKFLOW.md");
    fs::write(
        &wf,
        format!(
            "---\ntracker:\n  kind: github_projects\n  token: t\n  owner: acme\n  project_number: 1\n\
             workspace:\n  root: {}\nhooks:\n  timeout_ms: 1000\nagent:\n  kind: claude_code\n---\nWork.\n",
            dir.join("ws").display()
        ),
    )
    .unwrap();
    // Child processes get a throwaway HOME (their login shells read its profile).
    std::env::set_var("HOME", &*home);
    let (started_tx, started) = bounded(1);
    let (release_tx, release) = bounded::<()>(1);
    let agent = Stuck {
        started: started_tx,
        release,
    };
    let factories: (TrackerFactory, RunnerFactory) = (
        Box::new(|_: &ServiceConfig| Ok(Arc::new(Board) as Arc<dyn Tracker>)),
        Box::new(move |_: &ServiceConfig| Arc::new(agent.clone()) as Arc<dyn AgentRunner>),
    );
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let (opts, inputs) =
        daemon_options_with(&wf, Arc::new(TestEnv::none()), factories, clock.clone());
    let exited = spawn_daemon(move || run(opts));
    let pid = started
        .recv_timeout(Duration::from_secs(20))
        .expect("the agent's process started");
    assert!(alive(pid));
    inputs.shutdown.send(()).unwrap();
    // The grace is `hooks.timeout_ms` + 30 s of (virtual) time.
    let limit = Instant::now() + Duration::from_secs(30);
    let result = loop {
        assert!(Instant::now() < limit, "no forced shutdown");
        if let Ok(r) = exited.recv_timeout(Duration::from_millis(20)) {
            break r;
        }
        clock.advance(1_000);
    };
    assert_eq!(result, Err(RunError::ForcedShutdown { workers: 1 }));
    assert!(
        !alive(pid),
        "the abandoned worker's process group was killed"
    );
    assert!(
        clock.now() >= 1_700_000_000_000 + 31_000,
        "not before the grace"
    );
    let _ = release_tx.send(());
}
