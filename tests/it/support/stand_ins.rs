//! Stand-ins for a daemon's collaborators in tests that drive `runtime::daemon::run_with_state` directly: a
//! config environment with only the variables a test gives it, a tracker with an empty board, an
//! agent runner that is never meant to be asked. Depends on `baton` only, so the test binaries
//! that need a process of their own include it with `#[path = "it/support/stand_ins.rs"]`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};

use baton::agent::{AgentError, AgentErrorKind, AgentRunner, AgentSession, SessionContext};
use baton::model::Issue;
use baton::runtime::clock::Clock;
use baton::runtime::daemon::ControlRequest;
use baton::runtime::daemon::{
    DaemonOps, DaemonOptions, ExitWhen, RunError, RunnerFactory, TrackerFactory,
};
use baton::tracker::{Tracker, TrackerBudget, TrackerError};
use baton::workflow::config::{ConfigEnv, ServiceConfig};
use baton::workflow::loader::load_workflow;

/// A `ConfigEnv` with only the variables and home a test sets; `gh auth token` never answers.
#[derive(Debug, Default)]
pub struct TestEnv {
    vars: Vec<(String, String)>,
    home: Option<PathBuf>,
}

impl TestEnv {
    /// No variables, no home.
    pub fn none() -> Self {
        TestEnv::default()
    }

    /// With the variable `name` set to `value`.
    pub fn with_var(mut self, name: &str, value: &str) -> Self {
        self.vars.push((name.to_string(), value.to_string()));
        self
    }

    /// With `home` as the home directory (`~` in `workspace.root`).
    pub fn with_home(mut self, home: impl Into<PathBuf>) -> Self {
        self.home = Some(home.into());
        self
    }
}

impl ConfigEnv for TestEnv {
    fn var(&self, name: &str) -> Option<String> {
        let found = self.vars.iter().find(|(k, _)| k == name);
        found.map(|(_, v)| v.clone())
    }
    fn home(&self) -> Option<PathBuf> {
        self.home.clone()
    }
    fn gh_auth_token(&self) -> Option<String> {
        None
    }
}

/// A tracker whose board is empty and whose validation passes, unless a test replaces one of the
/// two calls (e.g. a validation that hangs, a poll that panics).
#[derive(Clone, Copy)]
pub struct StubTracker {
    /// `fetch_candidate_issues`.
    pub candidates: fn() -> Result<Vec<Issue>, TrackerError>,
    /// `validate`.
    pub validate: fn() -> Result<(), TrackerError>,
}

impl StubTracker {
    /// An empty, valid board.
    pub fn empty() -> Self {
        StubTracker {
            candidates: || Ok(Vec::new()),
            validate: || Ok(()),
        }
    }
}

impl Tracker for StubTracker {
    fn fetch_candidate_issues(&self) -> Result<Vec<Issue>, TrackerError> {
        (self.candidates)()
    }
    fn fetch_issues_by_states(&self, _: &[String]) -> Result<Vec<Issue>, TrackerError> {
        Ok(Vec::new())
    }
    fn fetch_issue_states_by_ids(&self, _: &[String]) -> Result<Vec<Issue>, TrackerError> {
        Ok(Vec::new())
    }
    fn validate(&self) -> Result<(), TrackerError> {
        (self.validate)()
    }
    fn reset_cache(&self) {}
    fn rate_limit(&self) -> Option<TrackerBudget> {
        None
    }
}

/// An agent runner for daemons that must never start an agent (their board is empty).
pub struct NoRunner;

impl AgentRunner for NoRunner {
    fn start_session(&self, _: &SessionContext) -> Result<Box<dyn AgentSession>, AgentError> {
        Err(AgentError::new(
            AgentErrorKind::AgentNotFound,
            "no agent in this test",
        ))
    }
}

/// Check that `workspace` is an existing directory strictly inside `root` (both resolved) on this
/// machine, as every adapter does before launching (spec §9.5): for stand-in runners.
pub fn validate_workspace_cwd(workspace: &Path, root: &Path) -> Result<PathBuf, AgentError> {
    use baton::host::Host;
    let checked = baton::host::LocalHost.check_workspace(root, workspace);
    checked.map_err(|e| AgentError::new(AgentErrorKind::InvalidWorkspaceCwd, e.0))
}

/// A minimal WORKFLOW.md: a GitHub tracker with a literal token, the Claude agent, and the
/// workspace root `<dir>/ws`.
pub fn minimal_workflow(dir: &Path) -> String {
    format!(
        "---\ntracker:\n  kind: github_projects\n  token: t\n  owner: acme\n  project_number: 1\n\
         workspace:\n  root: {}\nagent:\n  kind: claude_code\n---\nWork.\n",
        dir.join("ws").display()
    )
}

/// The inputs a test drives a daemon with (dropping one disconnects that input).
pub struct Inputs {
    /// Snapshot and refresh requests (what the HTTP thread sends).
    pub control: Sender<ControlRequest>,
    /// "WORKFLOW.md may have changed" pings.
    pub reload: Sender<()>,
    /// SIGINT/SIGTERM.
    pub shutdown: Sender<()>,
}

/// Options for [`run`] reading `workflow` (which must be valid) with `env`, with
/// `tracker` and [`NoRunner`], and the inputs that drive it.
pub fn daemon_options(
    workflow: &Path,
    env: Arc<dyn ConfigEnv + Send + Sync>,
    tracker: StubTracker,
    clock: Arc<dyn Clock>,
) -> (DaemonOptions, Inputs) {
    let tracker: TrackerFactory =
        Box::new(move |_: &ServiceConfig| Ok(Arc::new(tracker) as Arc<dyn Tracker>));
    let runner: RunnerFactory =
        Box::new(|_: &ServiceConfig| Arc::new(NoRunner) as Arc<dyn AgentRunner>);
    daemon_options_with(workflow, env, (tracker, runner), clock)
}

/// Like [`daemon_options`], with the given tracker and runner factories.
pub fn daemon_options_with(
    workflow: &Path,
    env: Arc<dyn ConfigEnv + Send + Sync>,
    (tracker_factory, runner_factory): (TrackerFactory, RunnerFactory),
    clock: Arc<dyn Clock>,
) -> (DaemonOptions, Inputs) {
    let (control, control_rx) = unbounded();
    let (reload, reload_rx) = unbounded();
    let (shutdown, shutdown_rx) = bounded(1);
    let opts = DaemonOptions {
        initial: load_workflow(workflow, &*env).expect("valid workflow"),
        tracker_factory,
        runner_factory,
        reload_rx,
        shutdown_rx,
        control_rx,
        config_env: env,
        clock,
    };
    let inputs = Inputs {
        control,
        reload,
        shutdown,
    };
    (opts, inputs)
}

/// `runtime::daemon::run_with_state` after taking the state directory's lock, as the binary does.
pub fn run_with(
    opts: DaemonOptions,
    ops: DaemonOps,
    exit_when: Option<ExitWhen>,
) -> Result<(), RunError> {
    let state = baton::runtime::persist::acquire(&opts.initial.config.config)
        .map_err(|e| RunError::Startup(e.to_string()))?;
    baton::runtime::daemon::run_with_state(opts, ops, state, exit_when)
}

/// [`run_with`] without systemd or an exit condition.
pub fn run(opts: DaemonOptions) -> Result<(), RunError> {
    run_with(opts, DaemonOps::default(), None)
}

/// Run `run` on its own thread; the receiver gets its result once it returns.
pub fn spawn_daemon(
    run: impl FnOnce() -> Result<(), RunError> + Send + 'static,
) -> Receiver<Result<(), RunError>> {
    let (tx, exited) = bounded(1);
    std::thread::spawn(move || {
        let _ = tx.send(run());
    });
    exited
}

/// The main loop's part in a worker's between-turn refresh, for tests that run a worker without
/// a daemon: a refresher whose batches `tracker` serves at once, each batch's call outcome
/// reported as `Event::TrackerCalls`. Returns the refresher and the receiver of everything it
/// sent (it ends once the refresher is dropped).
pub fn serving_refresher(
    tracker: Arc<dyn Tracker>,
) -> (
    Arc<baton::runtime::refresh::Refresher>,
    Receiver<baton::orchestrator::Event>,
) {
    use baton::orchestrator::Event;
    let (tx, inner) = unbounded::<Event>();
    let (out_tx, out) = unbounded::<Event>();
    let refresher = baton::runtime::refresh::Refresher::new(tx);
    let weak = Arc::downgrade(&refresher);
    std::thread::spawn(move || {
        for ev in inner {
            let ev = match ev {
                Event::TurnRefreshWanted => {
                    let served = weak.upgrade().and_then(|r| r.serve(&*tracker));
                    match served {
                        Some(outcome) => Event::TrackerCalls(vec![outcome]),
                        None => continue,
                    }
                }
                other => other,
            };
            let _ = out_tx.send(ev);
        }
    });
    (refresher, out)
}
