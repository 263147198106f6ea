//! The daemon main loop: one `select!` over worker events, tracker results, HTTP control requests,
//! reload pings and shutdown; every event goes through `orchestrator::handle`, and the returned
//! actions are executed here. Tracker calls run on two tracker threads (polls, retry refreshes)
//! so a slow GitHub never blocks the loop or a snapshot reply. Timers are `next_deadline()`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{never, select, unbounded, Receiver, Sender};
use log::{debug, error, info, warn};

use crate::agent::{AgentRunner, CancelToken};
use crate::model::Issue;
use crate::orchestrator::snapshot::{fmt_millis, issue_detail, state_snapshot};
use crate::orchestrator::{
    handle, next_deadline, Action, Event, Millis, OrchestratorState, Policy, PollSkip,
    WorkerOutcome,
};
use crate::status::{ControlRequest, RefreshAck};
use crate::timefmt::unix_millis;
use crate::tracker::{Tracker, TrackerError};
use crate::workflow::config::{ConfigEnv, ServiceConfig};
use crate::workflow::loader::{fnv1a64, parse_workflow_bytes, read_workflow_bytes, Workflow};
use crate::workflow::watch::stat_fingerprint;
use crate::workspace::hooks::HookEnv;
use crate::workspace::{remove_workspace, workspace_path};

use super::worker::{spawn_worker, WorkerContext};

/// Debounce of "WORKFLOW.md may have changed" pings.
pub const RELOAD_DEBOUNCE_MS: u64 = 200;
/// Most events of one burst handled before timers are checked again.
const BURST: usize = 256;
/// Wait used when nothing is scheduled.
const IDLE_WAIT: Duration = Duration::from_secs(60);

/// Builds a tracker for a config.
pub type TrackerFactory =
    Box<dyn Fn(&ServiceConfig) -> Result<Arc<dyn Tracker>, TrackerError> + Send>;
/// Builds an agent runner for a config.
pub type RunnerFactory = Box<dyn Fn(&ServiceConfig) -> Arc<dyn AgentRunner> + Send>;

/// Everything the daemon needs from `main` (CLI, watcher, signals and HTTP live there).
pub struct DaemonOptions {
    /// The WORKFLOW.md path (re-read on reload).
    pub workflow_path: PathBuf,
    /// Already loaded and validated workflow.
    pub initial: Workflow,
    /// Builds the tracker (again when tracker config changes on reload).
    pub tracker_factory: TrackerFactory,
    /// Builds the agent runner (again on every valid reload, for future dispatches).
    pub runner_factory: RunnerFactory,
    /// "WORKFLOW.md may have changed" pings (undebounced).
    pub reload_rx: Receiver<()>,
    /// SIGINT/SIGTERM.
    pub shutdown_rx: Receiver<()>,
    /// Snapshot/refresh requests from the HTTP thread.
    pub control_rx: Receiver<ControlRequest>,
    /// Environment for reloading the config.
    pub config_env: Arc<dyn ConfigEnv + Send + Sync>,
}

/// Orchestrator clock: Unix-epoch milliseconds at start, advanced by a monotonic `Instant`.
#[derive(Debug, Clone, Copy)]
struct Clock {
    base: Millis,
    start: Instant,
}

impl Clock {
    fn new() -> Self {
        Clock {
            base: unix_millis(SystemTime::now()),
            start: Instant::now(),
        }
    }
    fn now(&self) -> Millis {
        self.base + self.start.elapsed().as_millis() as Millis
    }
}

enum TrackerJob {
    Poll {
        tracker: Arc<dyn Tracker>,
        running_ids: Vec<String>,
        preflight: Option<String>,
    },
    Retry {
        tracker: Arc<dyn Tracker>,
        issue_id: String,
        seq: u64,
    },
}

fn tracker_thread(name: &str, jobs: Receiver<TrackerJob>, out: Sender<Event>) {
    let spawned = thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            for job in jobs {
                let ev = run_tracker_job(job);
                if out.send(ev).is_err() {
                    break;
                }
            }
        });
    if let Err(e) = spawned {
        error!("cannot start tracker thread error={e}");
    }
}

fn run_tracker_job(job: TrackerJob) -> Event {
    match job {
        TrackerJob::Poll {
            tracker,
            running_ids,
            preflight,
        } => {
            let refreshed = (!running_ids.is_empty()).then(|| {
                tracker
                    .fetch_issue_states_by_ids(&running_ids)
                    .map_err(|e| e.to_string())
            });
            let candidates = match preflight {
                Some(p) => Err(PollSkip::Preflight(p)),
                None => match tracker.validate() {
                    Err(e) => Err(PollSkip::Preflight(e.to_string())),
                    Ok(()) => tracker
                        .fetch_candidate_issues()
                        .map_err(|e| PollSkip::Tracker {
                            message: e.to_string(),
                            retry_at: e.retry_at.map(unix_millis),
                        }),
                },
            };
            Event::PollResult {
                running_ids,
                refreshed,
                candidates,
                rate_limit: tracker.rate_limit(),
            }
        }
        TrackerJob::Retry {
            tracker,
            issue_id,
            seq,
        } => {
            let result = tracker
                .fetch_issue_states_by_ids(std::slice::from_ref(&issue_id))
                .map(|v| v.into_iter().find(|i| i.id == issue_id))
                .map_err(|e| e.to_string());
            Event::RetryRefreshed {
                issue_id,
                seq,
                result,
            }
        }
    }
}

struct WorkerHandle {
    run_id: u64,
    cancel: CancelToken,
}

struct Daemon {
    opts_path: PathBuf,
    env: Arc<dyn ConfigEnv + Send + Sync>,
    tracker_factory: TrackerFactory,
    runner_factory: RunnerFactory,
    workflow: Workflow,
    tracker: Arc<dyn Tracker>,
    runner: Arc<dyn AgentRunner>,
    state: OrchestratorState,
    clock: Clock,
    events_tx: Sender<Event>,
    poll_jobs: Sender<TrackerJob>,
    retry_jobs: Sender<TrackerJob>,
    workers: HashMap<String, WorkerHandle>,
    reload_due: Option<Millis>,
    stamp: Option<(SystemTime, u64)>,
    last_reload_error: Option<String>,
    last_preflight: Option<String>,
    pending_acks: Vec<Sender<RefreshAck>>,
    shutdown_started: Option<Instant>,
    done: bool,
}

fn config(w: &Workflow) -> &ServiceConfig {
    &w.config.config
}

/// Run the daemon until a clean shutdown (all agents stopped, `after_run` done).
///
/// Startup: dispatch preflight (config + tracker validation; failure is an `Err`), terminal
/// workspace cleanup (fetch failure is a warning), then an immediate first tick.
pub fn run(opts: DaemonOptions) -> Result<(), String> {
    let DaemonOptions {
        workflow_path,
        initial,
        tracker_factory,
        runner_factory,
        reload_rx,
        shutdown_rx,
        control_rx,
        config_env,
    } = opts;
    let cfg = config(&initial).clone();
    let errs = cfg.preflight_errors();
    if !errs.is_empty() {
        let msg: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        return Err(format!("startup validation failed: {}", msg.join("; ")));
    }
    let tracker = tracker_factory(&cfg).map_err(|e| format!("startup validation failed: {e}"))?;
    tracker
        .validate()
        .map_err(|e| format!("startup validation failed: {e}"))?;
    startup_terminal_cleanup(&*tracker, &cfg);
    let runner = runner_factory(&cfg);
    let clock = Clock::new();
    let (events_tx, events_rx) = unbounded();
    let (tracker_tx, tracker_rx) = unbounded();
    let (poll_jobs, poll_jobs_rx) = unbounded();
    let (retry_jobs, retry_jobs_rx) = unbounded();
    tracker_thread("tracker-poll", poll_jobs_rx, tracker_tx.clone());
    tracker_thread("tracker-retry", retry_jobs_rx, tracker_tx);
    let mut d = Daemon {
        stamp: stat_fingerprint(&workflow_path),
        opts_path: workflow_path,
        env: config_env,
        tracker_factory,
        runner_factory,
        state: OrchestratorState::new(Policy::from_config(&cfg), clock.now()),
        workflow: initial,
        tracker,
        runner,
        clock,
        events_tx,
        poll_jobs,
        retry_jobs,
        workers: HashMap::new(),
        reload_due: None,
        last_reload_error: None,
        last_preflight: None,
        pending_acks: Vec::new(),
        shutdown_started: None,
        done: false,
    };
    info!(
        "event=startup workflow={} poll_interval_ms={} max_concurrent_agents={} workspace_root={}",
        d.opts_path.display(),
        cfg.poll_interval_ms,
        cfg.agent.max_concurrent_agents,
        cfg.workspace_root.display()
    );
    d.main_loop(events_rx, tracker_rx, reload_rx, shutdown_rx, control_rx);
    info!("event=shutdown_complete");
    Ok(())
}

/// Remove workspaces of issues already in terminal states (spec §8.6); warn and continue on error.
pub fn startup_terminal_cleanup(tracker: &dyn Tracker, cfg: &ServiceConfig) {
    let issues = match tracker.fetch_issues_by_states(&cfg.tracker.terminal_states) {
        Ok(v) => v,
        Err(e) => {
            warn!("startup terminal cleanup skipped; fetch failed error={e}");
            return;
        }
    };
    for issue in issues {
        let path = workspace_path(&cfg.workspace_root, &issue.identifier);
        clean_workspace(&cfg.hooks, &issue, &path);
    }
}

fn clean_workspace(hooks: &crate::workflow::config::HooksConfig, issue: &Issue, path: &Path) {
    let root = path.parent().unwrap_or(Path::new("/"));
    let env = HookEnv::for_issue(issue, path);
    match remove_workspace(root, path, hooks, &env) {
        Ok(true) => info!(
            "workspace removed issue_id={} issue_identifier={} workspace={}",
            issue.id,
            issue.identifier,
            path.display()
        ),
        Ok(false) => {}
        Err(e) => warn!(
            "workspace removal failed issue_id={} issue_identifier={} error={e}",
            issue.id, issue.identifier
        ),
    }
}

impl Daemon {
    fn main_loop(
        &mut self,
        events_rx: Receiver<Event>,
        tracker_rx: Receiver<Event>,
        mut reload_rx: Receiver<()>,
        mut shutdown_rx: Receiver<()>,
        mut control_rx: Receiver<ControlRequest>,
    ) {
        while !self.done {
            let timeout = self.timeout();
            select! {
                recv(events_rx) -> m => {
                    if let Ok(ev) = m {
                        self.core(ev);
                        for ev in events_rx.try_iter().take(BURST) {
                            self.core(ev);
                        }
                    }
                }
                recv(tracker_rx) -> m => {
                    if let Ok(ev) = m {
                        self.core(ev);
                    }
                }
                recv(control_rx) -> m => match m {
                    Ok(req) => self.control(req),
                    Err(_) => control_rx = never(),
                },
                recv(reload_rx) -> m => match m {
                    Ok(()) => {
                        for _ in reload_rx.try_iter() {}
                        self.reload_due = Some(self.clock.now() + RELOAD_DEBOUNCE_MS);
                    }
                    Err(_) => reload_rx = never(),
                },
                recv(shutdown_rx) -> m => {
                    if m.is_err() {
                        shutdown_rx = never();
                    } else if self.shutdown_started.is_none() {
                        self.shutdown_started = Some(Instant::now());
                        self.core(Event::Shutdown);
                    }
                },
                default(timeout) => {}
            }
            self.timers();
        }
    }

    /// Time until the earliest deadline (core, reload debounce, shutdown grace).
    fn timeout(&self) -> Duration {
        let now = self.clock.now();
        let mut t = next_deadline(&self.state);
        if let Some(r) = self.reload_due {
            t = Some(t.map_or(r, |x| x.min(r)));
        }
        let mut wait = t.map_or(IDLE_WAIT, |d| Duration::from_millis(d.saturating_sub(now)));
        if self.shutdown_started.is_some() {
            wait = wait.min(Duration::from_millis(500));
        }
        wait
    }

    /// Run whatever is due: the debounced reload, then the core's timers; bound shutdown.
    fn timers(&mut self) {
        let now = self.clock.now();
        if self.reload_due.is_some_and(|r| r <= now) {
            self.reload_due = None;
            self.reload();
        }
        if next_deadline(&self.state).is_some_and(|d| d <= self.clock.now()) {
            self.core(Event::Wake);
        }
        if let Some(started) = self.shutdown_started {
            let grace = Duration::from_millis(config(&self.workflow).hooks.timeout_ms)
                + Duration::from_secs(30);
            if !self.done && started.elapsed() > grace {
                error!(
                    "shutdown: {} worker(s) did not stop within {} s; exiting anyway",
                    self.workers.len(),
                    grace.as_secs()
                );
                self.done = true;
            }
        }
    }

    fn core(&mut self, ev: Event) {
        if let Event::WorkerExited {
            issue_id, run_id, ..
        } = &ev
        {
            if self
                .workers
                .get(issue_id)
                .is_some_and(|w| w.run_id == *run_id)
            {
                self.workers.remove(issue_id);
            }
        }
        let now = self.clock.now();
        let actions = handle(&mut self.state, ev, now);
        self.execute(actions);
    }

    fn execute(&mut self, actions: Vec<Action>) {
        for a in actions {
            match a {
                Action::StartPoll { running_ids } => self.start_poll(running_ids),
                Action::FetchRetryIssue { issue_id, seq } => {
                    let _ = self.retry_jobs.send(TrackerJob::Retry {
                        tracker: self.tracker.clone(),
                        issue_id,
                        seq,
                    });
                }
                Action::Dispatch {
                    run_id,
                    issue,
                    attempt,
                    workspace_path,
                } => self.dispatch(run_id, issue, attempt, workspace_path),
                Action::StopWorker {
                    issue_id,
                    run_id,
                    reason,
                } => {
                    if let Some(w) = self.workers.get(&issue_id).filter(|w| w.run_id == run_id) {
                        info!(
                            "cancelling worker issue_id={issue_id} run_id={run_id} reason={}",
                            reason.as_str()
                        );
                        w.cancel.cancel();
                    }
                }
                Action::CleanWorkspace {
                    issue_id,
                    identifier,
                    workspace_path,
                } => {
                    let hooks = config(&self.workflow).hooks.clone();
                    let issue = Issue {
                        id: issue_id,
                        identifier,
                        ..Issue::default()
                    };
                    let spawned = thread::Builder::new()
                        .name("workspace-clean".into())
                        .spawn(move || clean_workspace(&hooks, &issue, &workspace_path));
                    if let Err(e) = spawned {
                        warn!("cannot start workspace cleanup error={e}");
                    }
                }
                Action::RefreshAck { coalesced } => {
                    let ack = RefreshAck {
                        queued: true,
                        coalesced,
                        requested_at: fmt_millis(self.clock.now()),
                        operations: vec!["poll".into(), "reconcile".into()],
                    };
                    for tx in self.pending_acks.drain(..) {
                        let _ = tx.send(ack.clone());
                    }
                }
                Action::ShutdownComplete => self.done = true,
            }
        }
    }

    fn start_poll(&mut self, running_ids: Vec<String>) {
        // Safety net for missed watch events: re-read the file when its stamp changed.
        let stamp = stat_fingerprint(&self.opts_path);
        if stamp != self.stamp {
            self.reload();
        }
        let errs = config(&self.workflow).preflight_errors();
        let preflight = (!errs.is_empty()).then(|| {
            errs.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        });
        if preflight != self.last_preflight {
            if let Some(p) = &preflight {
                error!("dispatch preflight failed; dispatch is skipped until fixed error={p:?}");
            }
            self.last_preflight = preflight.clone();
        }
        let _ = self.poll_jobs.send(TrackerJob::Poll {
            tracker: self.tracker.clone(),
            running_ids,
            preflight,
        });
    }

    fn dispatch(&mut self, run_id: u64, issue: Issue, attempt: Option<u32>, path: PathBuf) {
        let cfg = config(&self.workflow);
        let cancel = CancelToken::new();
        let ctx = WorkerContext {
            run_id,
            issue: issue.clone(),
            attempt,
            workspace_path: path,
            hooks: cfg.hooks.clone(),
            max_turns: cfg.agent.max_turns,
            template: self.workflow.template.clone(),
            policy: self.state.policy.clone(),
            runner: self.runner.clone(),
            tracker: self.tracker.clone(),
            cancel: cancel.clone(),
            events: self.events_tx.clone(),
        };
        match spawn_worker(ctx) {
            Ok(_handle) => {
                self.workers
                    .insert(issue.id.clone(), WorkerHandle { run_id, cancel });
            }
            Err(e) => {
                error!(
                    "failed to spawn agent worker issue_id={} issue_identifier={} error={e}",
                    issue.id, issue.identifier
                );
                self.core(Event::WorkerExited {
                    issue_id: issue.id,
                    run_id,
                    outcome: WorkerOutcome::Failed("failed to spawn agent".into()),
                });
            }
        }
    }

    fn control(&mut self, req: ControlRequest) {
        let now = self.clock.now();
        match req {
            ControlRequest::State { reply } => {
                let _ = reply.send(state_snapshot(&self.state, now));
            }
            ControlRequest::Issue { identifier, reply } => {
                let _ = reply.send(issue_detail(&self.state, &identifier, now));
            }
            ControlRequest::Refresh { reply } => {
                self.pending_acks.push(reply);
                self.core(Event::RefreshRequested);
            }
        }
    }

    /// Re-read WORKFLOW.md; apply it when valid and changed, else keep the last good config and
    /// log the problem once.
    fn reload(&mut self) {
        self.stamp = stat_fingerprint(&self.opts_path);
        // Compare the raw bytes first: touches, watcher noise and saves without changes cost one
        // read and a hash, not a YAML parse, token lookup and template dry-renders.
        let loaded = read_workflow_bytes(&self.opts_path).and_then(|bytes| {
            if fnv1a64(&bytes) == self.workflow.content_hash {
                Ok(None)
            } else {
                parse_workflow_bytes(&self.opts_path, bytes, &*self.env).map(Some)
            }
        });
        let wf = match loaded {
            Ok(Some(wf)) => wf,
            Ok(None) => {
                self.last_reload_error = None;
                debug!("workflow unchanged; reload skipped");
                return;
            }
            Err(e) => {
                let msg = e.to_string();
                if self.last_reload_error.as_deref() != Some(msg.as_str()) {
                    error!("workflow reload failed; keeping the last good config error={msg}");
                    self.last_reload_error = Some(msg);
                }
                return;
            }
        };
        self.last_reload_error = None;
        for w in &wf.config.warnings {
            warn!("workflow config warning: {w}");
        }
        let new_cfg = config(&wf);
        if new_cfg.tracker != config(&self.workflow).tracker {
            match (self.tracker_factory)(new_cfg) {
                Ok(t) => self.tracker = t,
                Err(e) => {
                    error!("new tracker config rejected; keeping the previous tracker error={e}")
                }
            }
        } else {
            self.tracker.reset_cache();
        }
        self.runner = (self.runner_factory)(new_cfg);
        let policy = Policy::from_config(new_cfg);
        self.workflow = wf;
        info!("workflow reloaded file={}", self.opts_path.display());
        self.core(Event::ConfigReloaded(policy));
    }
}
