//! The daemon main loop, shaped like rust-analyzer's: [`LoopEvent`] is everything the loop waits
//! for, `next_event` holds the only `select!`, and `handle_event` feeds the event (a drained burst,
//! for worker reports) to the pure engine, `orchestrator::handle`, and executes the returned
//! actions. An action whose result is another engine event (a reloaded config, a failed spawn)
//! queues it; the engine is never re-entered from inside action execution. Every timer (poll,
//! retries, stalls, the reload debounce, the shutdown grace) is an engine deadline, and time comes
//! from the injected [`Clock`]. Tracker calls run on two tracker threads (polls, retry refreshes),
//! so a slow GitHub never blocks the loop or a snapshot reply.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;
use std::time::SystemTime;

use crossbeam_channel::{never, select, unbounded, Receiver, Sender};
use log::{debug, error, info, warn};

use crate::agent::{AgentRunner, CancelToken};
use crate::host::{Host, HostPool, LocalHost};
use crate::model::Issue;
use crate::orchestrator::snapshot::{fmt_millis, issue_detail, state_snapshot};
use crate::orchestrator::{
    handle, next_deadline, Action, Event, OrchestratorState, Policy, PollSkip, WorkerOutcome,
};
use crate::status::{ControlRequest, RefreshAck};
use crate::timefmt::unix_millis;
use crate::tracker::{Tracker, TrackerError};
use crate::workflow::config::{ConfigEnv, HooksConfig, ServiceConfig};
use crate::workflow::loader::{fnv1a64, parse_workflow_bytes, read_workflow_bytes, Workflow};
use crate::workflow::watch::stat_fingerprint;
use crate::workspace::hooks::HookEnv;
use crate::workspace::{remove_workspace_on, workspace_path};

use super::clock::Clock;
use super::worker::{spawn_worker, WorkerContext};

/// Debounce of "WORKFLOW.md may have changed" pings (an engine deadline).
pub use crate::orchestrator::rules::RELOAD_DEBOUNCE_MS;

/// Most worker reports drained into one burst before other inputs get a turn.
const BURST: usize = 256;

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
    /// Time source ([`SystemClock`] in production, [`ManualClock`] in tests).
    pub clock: Arc<dyn Clock>,
}

/// Everything the main loop reacts to.
enum LoopEvent {
    /// The armed engine deadline came (or the idle wait ended).
    Tick,
    /// A report from a worker thread (the rest of its burst is drained by `handle_event`).
    Worker(Event),
    /// A tracker thread's result.
    Tracker(Event),
    /// WORKFLOW.md may have changed.
    ReloadPing,
    /// SIGINT/SIGTERM.
    Signal,
    /// A request from the HTTP thread.
    Control(ControlRequest),
    /// An engine event produced by executing an action, handled before any new input.
    Queued(Event),
}

/// The loop's input channels; a disconnected one is replaced by `never()`.
struct Inbox {
    workers: Receiver<Event>,
    tracker: Receiver<Event>,
    reload: Receiver<()>,
    signals: Receiver<()>,
    control: Receiver<ControlRequest>,
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
    clock: Arc<dyn Clock>,
    /// Engine events produced by actions, handled before any new input.
    queue: VecDeque<Event>,
    events_tx: Sender<Event>,
    poll_jobs: Sender<TrackerJob>,
    retry_jobs: Sender<TrackerJob>,
    workers: HashMap<String, WorkerHandle>,
    stamp: Option<(SystemTime, u64)>,
    last_reload_error: Option<String>,
    last_preflight: Option<String>,
    pending_acks: Vec<Sender<RefreshAck>>,
    done: bool,
    /// SSH hosts by destination (shared multiplexing masters).
    hosts: Arc<HostPool>,
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
        clock,
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
    let hosts = Arc::new(HostPool::new());
    startup_terminal_cleanup(&*tracker, &cfg, &hosts);
    let runner = runner_factory(&cfg);
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
        queue: VecDeque::new(),
        events_tx,
        poll_jobs,
        retry_jobs,
        workers: HashMap::new(),
        last_reload_error: None,
        last_preflight: None,
        pending_acks: Vec::new(),
        done: false,
        hosts,
    };
    info!(
        "event=startup workflow={} poll_interval_ms={} max_concurrent_agents={} workspace_root={}",
        d.opts_path.display(),
        cfg.poll_interval_ms,
        cfg.agent.max_concurrent_agents,
        cfg.workspace_root.display()
    );
    let mut inbox = Inbox {
        workers: events_rx,
        tracker: tracker_rx,
        reload: reload_rx,
        signals: shutdown_rx,
        control: control_rx,
    };
    while !d.done {
        let ev = d.next_event(&mut inbox);
        d.handle_event(ev, &inbox);
    }
    d.hosts.close_all();
    info!("event=shutdown_complete");
    Ok(())
}

/// Remove workspaces of issues already in terminal states (spec §8.6); warn and continue on error.
fn startup_terminal_cleanup(tracker: &dyn Tracker, cfg: &ServiceConfig, hosts: &HostPool) {
    let issues = match tracker.fetch_issues_by_states(&cfg.tracker.terminal_states) {
        Ok(v) => v,
        Err(e) => {
            warn!("startup terminal cleanup skipped; fetch failed error={e}");
            return;
        }
    };
    // Without a record of which host owns a workspace, every configured host is cleaned.
    let owners: Vec<Arc<dyn Host>> = if cfg.worker.ssh_hosts.is_empty() {
        vec![LocalHost::shared()]
    } else {
        cfg.worker
            .ssh_hosts
            .iter()
            .map(|h| hosts.get(Some(h)))
            .collect()
    };
    for issue in issues {
        let path = workspace_path(&cfg.workspace_root, &issue.identifier);
        for host in &owners {
            clean_workspace(host.as_ref(), &cfg.hooks, &issue, &path);
        }
    }
}

/// Probe an SSH host in the background; the answer comes back as `Event::HostProbed`.
fn probe_host(hosts: &HostPool, host: String, events: Sender<Event>) {
    let h = hosts.ssh(&host);
    let spawned = thread::Builder::new()
        .name("host-probe".into())
        .spawn(move || {
            let result = h.check_reachable();
            let _ = events.send(Event::HostProbed { host, result });
        });
    if let Err(e) = spawned {
        warn!("cannot start a host probe error={e}");
    }
}

fn clean_workspace(host: &dyn Host, hooks: &HooksConfig, issue: &Issue, path: &Path) {
    let root = path.parent().unwrap_or(Path::new("/"));
    let env = HookEnv::for_issue(issue, path);
    match remove_workspace_on(host, root, path, hooks, &env) {
        Ok(true) => info!(
            "workspace removed issue_id={} issue_identifier={} workspace={} host={}",
            issue.id,
            issue.identifier,
            path.display(),
            host.name().unwrap_or("local")
        ),
        Ok(false) => {}
        Err(e) => warn!(
            "workspace removal failed issue_id={} issue_identifier={} error={e}",
            issue.id, issue.identifier
        ),
    }
}

/// Merge consecutive `AgentUpdate`s of the same run into one `AgentUpdates`; every other event
/// keeps its place. Lossless: the engine applies a batch exactly like its events in order.
fn coalesce(events: impl IntoIterator<Item = Event>) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    for ev in events {
        let Event::AgentUpdate {
            issue_id,
            run_id,
            event,
        } = ev
        else {
            out.push(ev);
            continue;
        };
        match out.last_mut() {
            Some(Event::AgentUpdates {
                issue_id: i,
                run_id: r,
                events,
            }) if *i == issue_id && *r == run_id => events.push(event),
            _ => out.push(Event::AgentUpdates {
                issue_id,
                run_id,
                events: vec![event],
            }),
        }
    }
    out
}

impl Daemon {
    /// The next thing to react to: a queued engine event first, else whatever input arrives
    /// first, or the tick of the earliest engine deadline. The loop's only `select!`.
    fn next_event(&mut self, inbox: &mut Inbox) -> LoopEvent {
        if let Some(ev) = self.queue.pop_front() {
            return LoopEvent::Queued(ev);
        }
        let mut timer = self.clock.timer(next_deadline(&self.state));
        loop {
            select! {
                recv(inbox.workers) -> m => match m {
                    Ok(ev) => return LoopEvent::Worker(ev),
                    Err(_) => inbox.workers = never(),
                },
                recv(inbox.tracker) -> m => match m {
                    Ok(ev) => return LoopEvent::Tracker(ev),
                    Err(_) => inbox.tracker = never(),
                },
                recv(inbox.control) -> m => match m {
                    Ok(req) => return LoopEvent::Control(req),
                    Err(_) => inbox.control = never(),
                },
                recv(inbox.reload) -> m => match m {
                    Ok(()) => return LoopEvent::ReloadPing,
                    Err(_) => inbox.reload = never(),
                },
                recv(inbox.signals) -> m => match m {
                    Ok(()) => return LoopEvent::Signal,
                    Err(_) => inbox.signals = never(),
                },
                recv(timer) -> m => match m {
                    Ok(_) => return LoopEvent::Tick,
                    Err(_) => timer = never(),
                },
            }
        }
    }

    /// React to one loop event, coalescing bursts: worker reports are drained (bounded) and
    /// their agent updates merged, reload pings are drained into one.
    fn handle_event(&mut self, ev: LoopEvent, inbox: &Inbox) {
        match ev {
            LoopEvent::Tick => self.engine(Event::Wake),
            LoopEvent::Worker(first) => {
                let burst = std::iter::once(first).chain(inbox.workers.try_iter().take(BURST));
                for ev in coalesce(burst) {
                    self.engine(ev);
                }
            }
            LoopEvent::Tracker(ev) | LoopEvent::Queued(ev) => self.engine(ev),
            LoopEvent::ReloadPing => {
                for _ in inbox.reload.try_iter() {}
                self.engine(Event::ReloadRequested);
            }
            LoopEvent::Signal => self.engine(Event::Shutdown),
            LoopEvent::Control(req) => self.control(req),
        }
    }

    /// One engine step: apply `ev` at the current time and execute the resulting actions.
    fn engine(&mut self, ev: Event) {
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
        for action in handle(&mut self.state, ev, now) {
            self.execute(action);
        }
    }

    fn execute(&mut self, action: Action) {
        match action {
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
                host,
            } => {
                let host = self.hosts.get(host.as_deref());
                self.dispatch(run_id, issue, attempt, workspace_path, host)
            }
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
                host,
            } => {
                let host = self.hosts.get(host.as_deref());
                self.clean_in_background(issue_id, identifier, workspace_path, host)
            }
            Action::ProbeHost { host } => probe_host(&self.hosts, host, self.events_tx.clone()),
            Action::ReloadWorkflow => self.reload(),
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

    fn clean_in_background(
        &self,
        issue_id: String,
        identifier: String,
        path: PathBuf,
        host: Arc<dyn Host>,
    ) {
        let hooks = config(&self.workflow).hooks.clone();
        let issue = Issue {
            id: issue_id,
            identifier,
            ..Issue::default()
        };
        let spawned = thread::Builder::new()
            .name("workspace-clean".into())
            .spawn(move || clean_workspace(host.as_ref(), &hooks, &issue, &path));
        if let Err(e) = spawned {
            warn!("cannot start workspace cleanup error={e}");
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

    fn dispatch(
        &mut self,
        run_id: u64,
        issue: Issue,
        attempt: Option<u32>,
        path: PathBuf,
        host: Arc<dyn Host>,
    ) {
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
            host,
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
                self.queue.push_back(Event::WorkerExited {
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
                self.engine(Event::RefreshRequested);
            }
        }
    }

    /// Re-read WORKFLOW.md; when valid and changed, swap in the new workflow, tracker and runner
    /// and queue `ConfigReloaded`, else keep the last good config and log the problem once.
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
        self.queue.push_back(Event::ConfigReloaded(policy));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{AgentEvent, AgentEventKind};

    fn update(issue: &str, run_id: u64, text: &str) -> Event {
        Event::AgentUpdate {
            issue_id: issue.into(),
            run_id,
            event: AgentEvent::new(AgentEventKind::Notification, text),
        }
    }

    #[test]
    fn coalesce_merges_only_consecutive_updates_of_one_run() {
        let out = coalesce([
            update("I_1", 1, "a"),
            update("I_1", 1, "b"),
            update("I_1", 2, "c"),
            Event::Wake,
            update("I_1", 2, "d"),
        ]);
        let shape: Vec<(String, usize)> = out
            .iter()
            .map(|e| match e {
                Event::AgentUpdates {
                    issue_id, events, ..
                } => (issue_id.clone(), events.len()),
                other => (format!("{other:?}"), 0),
            })
            .collect();
        assert_eq!(
            shape,
            [
                ("I_1".to_string(), 2),
                ("I_1".to_string(), 1),
                ("Wake".to_string(), 0),
                ("I_1".to_string(), 1)
            ]
        );
        let Event::AgentUpdates { events, .. } = &out[0] else {
            unreachable!()
        };
        assert_eq!(events[1].summary, "b", "order kept");
    }
}
