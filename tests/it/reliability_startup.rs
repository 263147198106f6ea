//! Issue 12, "SIGTERM during startup": a hung tracker during startup validation no longer holds
//! the shutdown; the daemon returns at once.

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crossbeam_channel::{bounded, unbounded};

use baton::agent::{AgentError, AgentErrorKind, AgentRunner, AgentSession, SessionContext};
use baton::model::Issue;
use baton::runtime::clock::SystemClock;
use baton::runtime::daemon::{run, DaemonOptions};
use baton::tracker::{Tracker, TrackerBudget, TrackerError};
use baton::workflow::config::{ConfigEnv, ServiceConfig};
use baton::workflow::loader::load_workflow;

struct Hung;

impl Tracker for Hung {
    fn fetch_candidate_issues(&self) -> Result<Vec<Issue>, TrackerError> {
        Ok(vec![])
    }
    fn fetch_issues_by_states(&self, _: &[String]) -> Result<Vec<Issue>, TrackerError> {
        Ok(vec![])
    }
    fn fetch_issue_states_by_ids(&self, _: &[String]) -> Result<Vec<Issue>, TrackerError> {
        Ok(vec![])
    }
    fn validate(&self) -> Result<(), TrackerError> {
        thread::sleep(Duration::from_secs(600)); // a hung GitHub
        Ok(())
    }
    fn reset_cache(&self) {}
    fn rate_limit(&self) -> Option<TrackerBudget> {
        None
    }
}

struct NoRunner;

impl AgentRunner for NoRunner {
    fn start_session(&self, _: &SessionContext) -> Result<Box<dyn AgentSession>, AgentError> {
        Err(AgentError::new(AgentErrorKind::AgentNotFound, "unused"))
    }
}

struct NoEnv;

impl ConfigEnv for NoEnv {
    fn var(&self, _: &str) -> Option<String> {
        None
    }
    fn home(&self) -> Option<PathBuf> {
        None
    }
    fn gh_auth_token(&self) -> Option<String> {
        None
    }
}

#[test]
fn sigterm_during_a_hung_startup_validation_returns_at_once() {
    let dir = std::env::temp_dir().join(format!("baton-rel-startup-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let wf_path = dir.join("WORKFLOW.md");
    fs::write(
        &wf_path,
        format!(
            "---\ntracker:\n  kind: github_projects\n  token: t\n  owner: acme\n  project_number: 1\n\
             workspace:\n  root: {}\nagent:\n  kind: claude_code\n---\nWork.\n",
            dir.join("ws").display()
        ),
    )
    .unwrap();
    let env: Arc<dyn ConfigEnv + Send + Sync> = Arc::new(NoEnv);
    let initial = load_workflow(&wf_path, &*env).expect("valid workflow");
    let (_control, control_rx) = unbounded();
    let (_reload, reload_rx) = unbounded();
    let (shutdown, shutdown_rx) = bounded(1);
    let opts = DaemonOptions {
        workflow_path: wf_path,
        initial,
        tracker_factory: Box::new(|_: &ServiceConfig| Ok(Arc::new(Hung) as Arc<dyn Tracker>)),
        runner_factory: Box::new(|_: &ServiceConfig| Arc::new(NoRunner) as Arc<dyn AgentRunner>),
        reload_rx,
        shutdown_rx,
        control_rx,
        config_env: env,
        clock: Arc::new(SystemClock::new()),
    };
    let (tx, rx) = bounded(1);
    thread::spawn(move || {
        let _ = tx.send(run(opts));
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "still validating"
    );
    shutdown.send(()).unwrap();
    let result = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("SIGTERM must interrupt the startup");
    assert_eq!(result, Ok(()));
    let _ = fs::remove_dir_all(&dir);
}
