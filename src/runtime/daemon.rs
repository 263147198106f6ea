//! The daemon main loop, shaped like rust-analyzer's (ARCHITECTURE.md, "The main loop"): one
//! `select!` in `next_event`, the pure engine in `handle_event`, actions executed here, tracker
//! calls on two tracker threads so that a slow tracker never blocks the loop.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{after, bounded, never, select, unbounded, Receiver, Sender};
use log::{debug, error, info, warn};

use crate::agent::{AgentRunner, CancelToken};
use crate::host::{sweep_tombstones, HostPool};
use crate::model::Issue;
use crate::orchestrator::{
    handle, next_deadline, Action, CallOutcome, Event, OrchestratorState, Policy, PollSkip,
    TrackerOp, WorkerOutcome,
};
use crate::timefmt::unix_millis;
use crate::tracker::{take_points, Tracker, TrackerError, WatchGuard};
use crate::workflow::config::{ConfigEnv, ServiceConfig};
use crate::workflow::loader::{
    fnv1a64, parse_workflow_bytes, read_workflow_bytes, Workflow, WorkflowError,
};
use crate::workflow::watch::stat_fingerprint;
use crate::workspace::hooks::HookEnv;
use crate::workspace::reaper::Reaper;
use crate::workspace::remove_workspace_on;

use super::clock::Clock;
use super::mailbox::Mailbox;
use super::persist::{Persist, StateHandle};
use super::refresh::Refresher;
use super::threads::{fatal_events, spawn_supervised};
use super::worker::{spawn_worker, WorkerContext};

#[cfg(not(feature = "http"))]
mod no_http;
mod ops;
#[cfg(feature = "http")]
mod surface;
#[cfg(not(feature = "http"))]
use self::no_http as surface;
use self::ops::LoopOps;
use self::surface::Surface;
pub use self::surface::{ControlRequest, ExitWhen};
pub use crate::ops::DaemonOps;

/// Most worker reports drained into one burst before other inputs get a turn.
const BURST: usize = 256;

/// Why a daemon run did not end cleanly; `baton` turns it into its exit code (docs/operations.md)
/// and prints it after the WORKFLOW.md path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    /// Nothing was dispatched (the state lock, preflight, the tracker). Exit 1.
    Startup(String),
    /// Workers still ran when the shutdown grace ended; every process group they owned was
    /// killed. Exit 3 (`forced_shutdown`).
    ForcedShutdown { workers: usize },
    /// A supervised thread (named) panicked; the daemon shut down gracefully. Exit 1.
    ThreadDied(String),
    /// Another process took the state directory's lock. Exit 1.
    LockLost(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Startup(e) | RunError::LockLost(e) => f.write_str(e),
            RunError::ForcedShutdown { workers } => write!(
                f,
                "forced_shutdown: {workers} worker(s) did not stop within the shutdown grace; \
                 their process groups were killed"
            ),
            RunError::ThreadDied(name) => write!(f, "thread {name} panicked; restart Baton"),
        }
    }
}

/// Capacity of the background events channel and of the mailbox wake-up channel.
const CHANNEL_CAPACITY: usize = 1024;

/// Builds a tracker for a config (again when `tracker.*` changes on reload).
pub type TrackerFactory =
    Box<dyn Fn(&ServiceConfig) -> Result<Arc<dyn Tracker>, TrackerError> + Send>;
/// Builds an agent runner for a config (again on every valid reload, for future dispatches).
pub type RunnerFactory = Box<dyn Fn(&ServiceConfig) -> Arc<dyn AgentRunner> + Send>;

/// Everything the daemon needs from `main` (CLI, watcher, signals and HTTP live there).
pub struct DaemonOptions {
    /// Already loaded and validated; reloads re-read its `path`.
    pub initial: Workflow,
    pub tracker_factory: TrackerFactory,
    pub runner_factory: RunnerFactory,
    /// "WORKFLOW.md may have changed" pings (undebounced).
    pub reload_rx: Receiver<()>,
    /// SIGINT/SIGTERM.
    pub shutdown_rx: Receiver<()>,
    /// Snapshot/refresh requests from the HTTP thread.
    pub control_rx: Receiver<ControlRequest>,
    pub config_env: Arc<dyn ConfigEnv + Send + Sync>,
    /// `SystemClock` in production, `ManualClock` in tests.
    pub clock: Arc<dyn Clock>,
}

/// What a reload thread reports: a changed, valid workflow, `None` when unchanged, or the error.
type ReloadResult = Result<Option<Workflow>, WorkflowError>;

/// Everything the main loop reacts to: the armed engine deadline (`Tick`), an input's message,
/// an engine event to apply as is (`Queued`: an action's, handled before any new input), or a
/// real-time systemd duty (`OpsDue`: a watchdog ping or a deferred status).
enum LoopEvent {
    Tick,
    /// From a background thread: a tracker thread, a worker's refresh, a removal or a probe.
    Background(Event),
    /// A run's mailbox has news.
    News(Arc<Mailbox>),
    ReloadPing,
    Signal,
    Control(ControlRequest),
    /// The tracker's watch saw its source change (debounced).
    TrackerChanged,
    Queued(Event),
    OpsDue,
    Saved(crate::durable::SaveReport),
    /// A supervised thread panicked: shut down and exit non-zero.
    Fatal(String),
    Reloaded(Box<ReloadResult>),
}

/// The loop's input channels; a disconnected one is replaced by `never()`.
struct Inbox {
    background: Receiver<Event>,
    news: Receiver<Arc<Mailbox>>,
    reload: Receiver<()>,
    signals: Receiver<()>,
    control: Receiver<ControlRequest>,
    tracker_changed: Receiver<()>,
    fatal: Receiver<String>,
    reloaded: Receiver<Box<ReloadResult>>,
}

/// A job for a tracker thread: its events (for the loop, in order) and a failed poll's error class.
type TrackerJob = Box<dyn FnOnce() -> (Vec<Event>, Option<&'static str>) + Send>;

/// A tracker job (one poll: its pages, each under the request timeout) running longer than this
/// means its thread is stuck (a FIFO read, a connection that never answers): `/livez` answers
/// 503 and the watchdog pings stop, so that systemd restarts Baton.
pub const TRACKER_JOB_BOUND_MS: u64 = 10 * 60 * 1000;

/// The tracker threads: polls, and fetch batches (retries and between-turn refreshes). The engine
/// gives each at most one job at a time.
const TRACKER_THREADS: [&str; 2] = ["tracker-poll", "tracker-retry"];

/// Record how a tracker call ended and pass its result on.
fn observe<T>(calls: &mut Vec<CallOutcome>, r: Result<T, TrackerError>) -> Result<T, TrackerError> {
    calls.push(CallOutcome::of(&r));
    r
}

/// One poll: validate the tracker, then read the board. After `TrackerCalls` and `TrackerSpent` (see [`Daemon::send_tracker_job`]) come,
/// with `cleanup` (the terminal states, on the first tick), `TerminalAtStartup` (so the engine
/// holds those issues for cleanup before it sees the candidates), then the result.
///
/// Running issues the board read contains need no second request; only the missing ones are
/// refreshed (shallow). Without a read (validation failed, read failed) every running issue is
/// refreshed, except after a rate limit or rejected credentials: then nothing more is sent (the
/// tracker just refused the budget; issue 12, failure 5).
fn poll_job(
    tracker: &dyn Tracker,
    running_ids: Vec<String>,
    cleanup: Option<Vec<String>>,
    calls: &mut Vec<CallOutcome>,
) -> (Vec<Event>, Option<&'static str>) {
    let also_states = cleanup.as_deref().unwrap_or_default();
    // The config passed the dispatch preflight at startup and at every applied reload, and a
    // cached validation sends nothing: only its failure counts.
    let read = match tracker.validate() {
        Err(e) => {
            calls.push(CallOutcome::of_error(&e));
            Err((PollSkip::Preflight(e.to_string()), e.class))
        }
        Ok(()) => observe(calls, tracker.read_board(&running_ids, also_states)).map_err(|e| {
            let message = e.to_string();
            let retry_at = e.retry_at.map(unix_millis);
            (PollSkip::Tracker { message, retry_at }, e.class)
        }),
    };
    let class = read.as_ref().err().map(|e| e.1);
    let read = read.map_err(|e| e.0);
    let stopped = calls.last().is_some_and(|o| o.stops_operation());
    let terminal = cleanup.and_then(|states| match &read {
        Ok(r) => Some(
            (r.others.iter())
                .filter(|i| i.closed || crate::model::contains_name(&states, &i.state))
                .cloned()
                .collect(),
        ),
        Err(PollSkip::Tracker { message, .. } | PollSkip::Preflight(message)) => {
            warn!("startup terminal cleanup skipped; fetch failed error={message}");
            None
        }
    });
    let mut refresh = |ids: &[String]| {
        (!ids.is_empty() && !stopped)
            .then(|| observe(calls, tracker.refresh_running(ids)).map_err(|e| e.to_string()))
    };
    let (candidates, refreshed) = match read {
        Err(skip) => (Err(skip), refresh(&running_ids)),
        Ok(r) => {
            let (mut present, missing) = crate::orchestrator::rules::running_from_read(
                &running_ids,
                &r.candidates,
                &r.others,
            );
            let refreshed = match refresh(&missing) {
                None if running_ids.is_empty() => None,
                more => Some(more.unwrap_or(Ok(Vec::new())).map(|more| {
                    present.extend(more);
                    present
                })),
            };
            (Ok(r.candidates), refreshed)
        }
    };
    let rate_limit = tracker.rate_limit();
    let mut out = Vec::from_iter(terminal.map(Event::TerminalAtStartup));
    out.push(Event::PollResult {
        running_ids,
        refreshed,
        candidates,
        rate_limit,
    });
    (out, class)
}

/// One fetch batch: the between-turn refreshes (answered to the workers), then one fetch of
/// every due retry's issue (none after a rate limit or rejected credentials: the gate will
/// hold). Events: a `RetryRefreshed` per retry; no error class.
fn fetch_batch(
    tracker: &dyn Tracker,
    retries: Vec<(String, u64)>,
    refresher: Option<&Refresher>,
    calls: &mut Vec<CallOutcome>,
) -> (Vec<Event>, Option<&'static str>) {
    calls.extend(refresher.and_then(|r| r.serve(tracker)));
    let ids: Vec<String> = retries.iter().map(|(id, _)| id.clone()).collect();
    let fetched = match calls.first() {
        _ if ids.is_empty() => Ok(Vec::new()),
        Some(o) if o.stops_operation() => {
            Err("not sent: the tracker refused the batch's refresh".into())
        }
        _ => observe(calls, tracker.fetch_issue_states_by_ids(&ids)).map_err(|e| e.to_string()),
    };
    let retry = |(issue_id, seq): (String, u64)| {
        let result = match &fetched {
            Ok(v) => Ok(v.iter().find(|i| i.id == issue_id).cloned()),
            Err(e) => Err(e.clone()),
        };
        Event::RetryRefreshed {
            issue_id,
            seq,
            result,
        }
    };
    (retries.into_iter().map(retry).collect(), None)
}

struct WorkerHandle {
    run_id: u64,
    cancel: CancelToken,
    mailbox: Arc<Mailbox>,
}

struct Daemon {
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
    /// Events of background threads (bounded: producers wait, the loop never sends).
    events_tx: Sender<Event>,
    /// Wake-ups of run mailboxes (bounded; at most one pending per run).
    news_tx: Sender<Arc<Mailbox>>,
    /// The tracker threads' job queues: polls, fetch batches.
    tracker_jobs: [Sender<TrackerJob>; 2],
    workers: HashMap<String, WorkerHandle>,
    stamp: Option<(SystemTime, u64)>,
    last_reload_error: Option<String>,
    done: bool,
    ops: LoopOps,
    surface: Surface,
    /// A board read succeeded and its terminal issues went to the startup cleanup; until then
    /// every poll job carries the cleanup.
    swept: bool,
    /// Where the tracker's watch pings (kept for the tracker a reload builds).
    changed_tx: Sender<()>,
    watch: Option<WatchGuard>,
    persist: Persist,
    /// Workspace-removal threads, joined (bounded) at shutdown.
    removals: Reaper,
    /// Why the run must end with an error.
    fatal: Option<RunError>,
    reload_tx: Sender<Box<ReloadResult>>,
    reload_in_flight: bool,
    /// Another reload was requested meanwhile: start it when the running one is done.
    reload_again: bool,
    hosts: Arc<HostPool>,
    /// When each tracker thread's job was sent; its `TrackerSpent` event ends it.
    tracker_busy: [Option<u64>; 2],
    /// The agents the file-descriptor limit allows (`runtime::fds`), measured at startup.
    fd_cap: Option<u64>,
    /// The workers waiting for their between-turn refresh (served by fetch batches).
    refresher: Arc<Refresher>,
}

/// The scheduling policy of `cfg`, `agent.max_concurrent_agents` capped at `fd_cap` (at least 1).
fn policy_for(cfg: &ServiceConfig, fd_cap: Option<u64>) -> Policy {
    let mut policy = cfg.policy();
    if let Some(cap) = fd_cap {
        let cap = u32::try_from(cap).unwrap_or(u32::MAX).max(1);
        policy.max_concurrent_agents = policy.max_concurrent_agents.min(cap);
    }
    policy
}

/// Run the daemon until a clean shutdown (all agents stopped, `after_run` done), with the state
/// directory already locked and loaded (`persist::acquire`, which the binary calls first),
/// publishing to `ops` (`READY=1` once startup is done), and shutting down gracefully the first
/// time `exit_when` holds after a loop event (`baton demo`). Startup: dispatch preflight (the
/// config and the tracker's validation; failure is an `Err`), recovery, then an immediate first
/// tick whose board read also drives the terminal workspace cleanup, before anything dispatches.
pub fn run_with_state(
    opts: DaemonOptions,
    ops: DaemonOps,
    state: StateHandle,
    exit_when: Option<ExitWhen>,
) -> Result<(), RunError> {
    limit_malloc_arenas();
    let cfg = opts.initial.config.config.clone();
    crate::host::set_env_policy(cfg.env_policy());
    let tracker = startup_tracker(&cfg, &opts.tracker_factory, &opts.shutdown_rx);
    let Some(tracker) = tracker.map_err(RunError::Startup)? else {
        return Ok(()); // SIGINT/SIGTERM during startup
    };
    let fd_cap = descriptor_cap(&cfg);
    let policy = policy_for(&cfg, fd_cap);
    let clock = opts.clock;
    let (persist, restored, startup) = Persist::start(state, policy, clock.now());
    let hosts = Arc::new(HostPool::new());
    hosts.configure(&cfg.worker);
    let runner = (opts.runner_factory)(&cfg);
    let (events_tx, events_rx) = bounded(CHANNEL_CAPACITY);
    let (news_tx, news_rx) = bounded(CHANNEL_CAPACITY);
    let (reload_tx, reloaded_rx) = unbounded();
    let tracker_jobs = start_tracker_threads(&events_tx);
    let (changed_tx, changed_rx) = bounded(1);
    let inbox = Inbox {
        background: events_rx,
        news: news_rx,
        reload: opts.reload_rx,
        signals: opts.shutdown_rx,
        control: opts.control_rx,
        tracker_changed: changed_rx,
        fatal: fatal_events(),
        reloaded: reloaded_rx,
    };
    let refresher = Refresher::new(events_tx.clone());
    let d = Daemon {
        stamp: stat_fingerprint(&opts.initial.path),
        env: opts.config_env,
        tracker_factory: opts.tracker_factory,
        runner_factory: opts.runner_factory,
        state: restored,
        workflow: opts.initial,
        tracker,
        runner,
        clock,
        queue: VecDeque::new(),
        events_tx,
        news_tx,
        tracker_jobs,
        workers: HashMap::new(),
        last_reload_error: None,
        done: false,
        surface: Surface::new(&ops, exit_when),
        ops: LoopOps::new(ops.notifier),
        swept: false,
        changed_tx,
        watch: None,
        persist,
        removals: Reaper::default(),
        fatal: None,
        reload_tx,
        reload_in_flight: false,
        reload_again: false,
        hosts,
        tracker_busy: [None; 2],
        fd_cap,
        refresher,
    };
    d.run(startup, inbox)
}

/// The agents the descriptor limit allows (`runtime::fds`), warning when it caps the config.
fn descriptor_cap(cfg: &ServiceConfig) -> Option<u64> {
    let cap = super::fds::agents_allowed_now();
    if let Some(cap) = cap.filter(|&c| c < u64::from(cfg.agent.max_concurrent_agents)) {
        warn!(
            "event=agents_capped_by_nofile max_concurrent_agents={} allowed={cap}; raise LimitNOFILE to run more",
            cfg.agent.max_concurrent_agents
        );
    }
    cap
}

/// Start the tracker threads, which send their jobs' events on `out`: their job senders.
fn start_tracker_threads(out: &Sender<Event>) -> [Sender<TrackerJob>; 2] {
    TRACKER_THREADS.map(|name| {
        let (jobs, rx) = unbounded::<TrackerJob>();
        let out = out.clone();
        let spawned = spawn_supervised(name, move || {
            for job in rx {
                if job().0.into_iter().any(|ev| out.send(ev).is_err()) {
                    return;
                }
            }
        });
        if let Err(e) = spawned {
            error!("cannot start tracker thread error={e}");
        }
        jobs
    })
}

/// The dispatch preflight, then build the tracker and validate it (on a helper thread, so SIGTERM
/// interrupts a hung tracker at once); `None` when SIGINT/SIGTERM came first (or the helper could
/// not report).
fn startup_tracker(
    cfg: &ServiceConfig,
    tracker_factory: &TrackerFactory,
    shutdown: &Receiver<()>,
) -> Result<Option<Arc<dyn Tracker>>, String> {
    let failed = |e: String| format!("startup validation failed: {e}");
    let errs = cfg.preflight_errors().into_iter().map(|e| e.to_string());
    let errs = errs.collect::<Vec<_>>().join("; ");
    if !errs.is_empty() {
        return Err(failed(errs));
    }
    let tracker = tracker_factory(cfg).map_err(|e| failed(e.to_string()))?;
    let (tx, rx) = bounded(1);
    let t = tracker.clone();
    let validate = move || tx.send(t.validate().map_err(|e| e.to_string()));
    if let Err(e) = spawn("startup", validate) {
        error!("cannot start the startup thread error={e}");
        return Ok(None);
    }
    select! {
        recv(rx) -> r => r.ok().map(|r| r.map(|()| tracker).map_err(failed)).transpose(),
        recv(shutdown) -> _ => {
            info!("shutdown requested during startup; exiting");
            Ok(None)
        }
    }
}

/// Start a named thread that is not supervised (a panic only ends it).
fn spawn<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<()> {
    thread::Builder::new().name(name.into()).spawn(f).map(drop)
}

/// Cap glibc's malloc arenas at 2 before the tracker and agent threads start: glibc gives busy
/// threads their own arenas and keeps freed memory in each, so with one reader thread per agent
/// memory freed after a burst stays resident (RSS after 10 agents printed two 9.4 MB lines: 294
/// → 159 MiB, same throughput; docs/performance.md). And a fixed mmap threshold: blocks of 1 MiB
/// and more (a huge agent line) are unmapped when freed, while glibc's default threshold grows to
/// the largest block freed (up to 32 MiB). The environment's settings win.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    for (var, param, value) in [
        ("MALLOC_ARENA_MAX", libc::M_ARENA_MAX, 2),
        ("MALLOC_MMAP_THRESHOLD_", libc::M_MMAP_THRESHOLD, 1 << 20),
    ] {
        if std::env::var_os(var).is_none() {
            // SAFETY: mallopt only sets an allocator tunable; no memory is touched.
            unsafe {
                libc::mallopt(param, value);
            }
        }
    }
}

/// Least time shutdown waits for running workspace removals.
const REMOVAL_JOIN_MIN_MS: u64 = 1_000;

impl Daemon {
    /// Startup once wired (the tombstone sweep, the watch, the restore's orphan stops, readiness),
    /// the loop, then the rest of the shutdown: removals, the final state write, SSH masters.
    fn run(mut self, startup: Vec<Action>, mut inbox: Inbox) -> Result<(), RunError> {
        // Sweep workspace tombstones a crash left behind, on the removal pool (the first tick's
        // board read then hands the issues already terminal to the engine: `TerminalAtStartup`).
        let root = self.workflow.config.config.workspace_root.clone();
        let sweep = Box::new(move || {
            let n = sweep_tombstones(&root);
            if n > 0 {
                info!(
                    "removed {n} leftover workspace tombstone(s) root={}",
                    root.display()
                );
            }
        });
        if let Err(e) = self.removals.submit(sweep) {
            warn!("cannot start the tombstone sweep error={e}");
        }
        self.start_watch();
        for action in startup {
            self.execute(action);
        }
        let cfg = &self.workflow.config.config;
        info!(
            "event=startup workflow={} poll_interval_ms={} max_concurrent_agents={} workspace_root={}",
            self.workflow.path.display(),
            cfg.poll_interval_ms,
            cfg.agent.max_concurrent_agents,
            cfg.workspace_root.display()
        );
        info!("process containment {}", crate::host::containment());
        self.publish();
        self.ops.ready(&self.state);
        while !self.done {
            let ev = self.next_event(&mut inbox);
            self.handle_event(ev, &inbox);
            let now = self.clock.now();
            self.persist.after_step(&self.state, now);
            self.after_step(now);
        }
        // Producers blocked on a full channel or mailbox get an error instead of waiting.
        drop(inbox);
        let abandoned = self.workers.len();
        for w in self.workers.values() {
            w.mailbox.close();
        }
        if abandoned > 0 {
            let groups = crate::host::kill_live_groups(Duration::from_secs(2));
            error!("event=forced_shutdown workers={abandoned} process_groups_killed={groups}");
        }
        // Removals get what is left of the shutdown grace period (at least a moment).
        let now = self.clock.now();
        let left = (self.state.shutdown_deadline).map_or(0, |t| t.saturating_sub(now));
        self.removals
            .join_all(Duration::from_millis(left.max(REMOVAL_JOIN_MIN_MS)));
        self.persist.shutdown(self.clock.now());
        self.hosts.close_all();
        info!("event=shutdown_complete");
        if abandoned > 0 {
            return Err(RunError::ForcedShutdown { workers: abandoned });
        }
        self.fatal.map_or(Ok(()), Err)
    }

    /// The next thing to react to: a queued engine event first, else whatever input arrives
    /// first, or the tick of the earliest engine deadline. The loop's only `select!`.
    fn next_event(&mut self, inbox: &mut Inbox) -> LoopEvent {
        if let Some(ev) = self.queue.pop_front() {
            return LoopEvent::Queued(ev);
        }
        let now = self.clock.now();
        let due = [
            next_deadline(&self.state),
            self.persist.next_due(),
            self.stuck_tracker(now).1,
            self.surface.recheck(now),
        ];
        let mut timer = self.clock.timer(due.into_iter().flatten().min());
        let saves = self.persist.reports.clone();
        // Real time, not the injected clock: systemd's watchdog counts wall time.
        let mut ops_timer = match self.ops.deadline() {
            Some(at) => after(at.saturating_duration_since(Instant::now())),
            None => never(),
        };
        // An input's message becomes a loop event; a disconnected input is parked on `never()`
        // so the `select!` stops waking for it.
        macro_rules! input {
            ($m:expr, $rx:expr, $event:expr) => {
                match $m {
                    Ok(v) => return ($event)(v),
                    Err(_) => $rx = never(),
                }
            };
        }
        loop {
            select! {
                recv(ops_timer) -> m => input!(m, ops_timer, |_| LoopEvent::OpsDue),
                recv(inbox.background) -> m => input!(m, inbox.background, LoopEvent::Background),
                recv(inbox.news) -> m => input!(m, inbox.news, LoopEvent::News),
                recv(inbox.control) -> m => input!(m, inbox.control, LoopEvent::Control),
                recv(inbox.reload) -> m => input!(m, inbox.reload, |()| LoopEvent::ReloadPing),
                recv(inbox.tracker_changed) -> m => {
                    input!(m, inbox.tracker_changed, |()| LoopEvent::TrackerChanged)
                }
                recv(inbox.reloaded) -> m => input!(m, inbox.reloaded, LoopEvent::Reloaded),
                recv(inbox.fatal) -> m => input!(m, inbox.fatal, LoopEvent::Fatal),
                recv(inbox.signals) -> m => input!(m, inbox.signals, |()| LoopEvent::Signal),
                recv(saves) -> m => if let Ok(r) = m {
                    return LoopEvent::Saved(r);
                },
                recv(timer) -> m => input!(m, timer, |_| LoopEvent::Tick),
            }
        }
    }

    /// React to one loop event, coalescing bursts: background events and run mailboxes are
    /// drained (bounded), reload pings into one.
    fn handle_event(&mut self, ev: LoopEvent, inbox: &Inbox) {
        match ev {
            LoopEvent::Tick => self.engine(Event::Wake),
            // A burst stops where an action queued an event: that goes before any more input.
            LoopEvent::Background(first) => {
                let mut rest = inbox.background.try_iter().take(BURST);
                let mut next = Some(first);
                while let Some(ev) = next {
                    self.engine(ev);
                    next = if self.queue.is_empty() {
                        rest.next()
                    } else {
                        None
                    };
                }
            }
            LoopEvent::News(first) => {
                let mut rest = inbox.news.try_iter().take(BURST);
                let mut next = Some(first);
                while let Some(mailbox) = next {
                    for ev in mailbox.take() {
                        self.engine(ev);
                    }
                    next = if self.queue.is_empty() {
                        rest.next()
                    } else {
                        None
                    };
                }
            }
            LoopEvent::Queued(ev) => self.engine(ev),
            LoopEvent::ReloadPing => {
                for _ in inbox.reload.try_iter() {}
                self.engine(Event::ReloadRequested);
            }
            LoopEvent::Reloaded(r) => {
                self.reload_in_flight = false;
                self.apply_reload(*r);
                if std::mem::take(&mut self.reload_again) {
                    self.reload();
                }
            }
            LoopEvent::Fatal(name) => {
                error!("a supervised thread died; shutting down thread={name}");
                self.shut_down(Some(RunError::ThreadDied(name)));
            }
            LoopEvent::Signal => self.shut_down(None),
            LoopEvent::Control(req) => self.control(req),
            LoopEvent::OpsDue => {}
            LoopEvent::Saved(r) => {
                self.surface.saved(&r);
                if let Some(e) = self.persist.finished(r, self.clock.now()) {
                    self.shut_down(Some(RunError::LockLost(e)));
                }
            }
            // The same coalesced poll + reconcile as `POST /api/v1/refresh`.
            LoopEvent::TrackerChanged => {
                debug!("event=tracker_changed; refreshing");
                self.engine(Event::RefreshRequested);
            }
        }
        let stuck = self.stuck_tracker(self.clock.now()).0;
        self.ops.tracker_stuck(stuck);
        self.ops.after_event(&self.state);
        self.ops.on_due(Instant::now());
    }

    /// The tracker thread on one job for [`TRACKER_JOB_BOUND_MS`] or longer, and when the next
    /// busy thread would pass the bound.
    fn stuck_tracker(&self, now: u64) -> (Option<&'static str>, Option<u64>) {
        let due = |i: usize| self.tracker_busy[i].map(|t| t.saturating_add(TRACKER_JOB_BOUND_MS));
        let stuck = (0..2).find(|&i| due(i).is_some_and(|d| d <= now));
        let next = (0..2).filter_map(due).filter(|&d| d > now).min();
        (stuck.map(|i| TRACKER_THREADS[i]), next)
    }

    /// (Re)start the current tracker's watch; a failure only costs the instant reaction.
    fn start_watch(&mut self) {
        self.watch = None;
        match self.tracker.watch(self.changed_tx.clone()) {
            Ok(w) => self.watch = w,
            Err(e) => warn!("tracker watch unavailable; polling only error={e}"),
        }
    }

    /// Begin the graceful shutdown; `fatal` (the first one kept) makes the run end with an error.
    fn shut_down(&mut self, fatal: Option<RunError>) {
        if let Some(f) = fatal {
            self.fatal.get_or_insert(f);
        }
        self.ops.stopping();
        self.engine(Event::Shutdown);
    }

    /// One engine step: apply `ev` at the current time and execute the resulting actions.
    fn engine(&mut self, ev: Event) {
        let now = self.clock.now();
        match &ev {
            Event::WorkerExited {
                issue_id,
                run_id,
                outcome,
            } => {
                self.count_exit(issue_id, *run_id, outcome);
                if self.workers.get(issue_id).map(|w| w.run_id) == Some(*run_id) {
                    self.workers.remove(issue_id);
                }
            }
            Event::Shutdown => self.persist.freeze(&self.state, now),
            Event::TerminalAtStartup(_) => self.swept = true,
            Event::TrackerSpent { op, .. } => {
                self.tracker_busy[usize::from(*op == TrackerOp::Fetch)] = None;
            }
            _ => {}
        }
        let actions = handle(&mut self.state, ev, now);
        self.refresher.set_held(self.state.poll.gate.blocks(now));
        for action in actions {
            self.execute(action);
        }
    }

    fn execute(&mut self, action: Action) {
        match action {
            Action::StartPoll { running_ids } => self.start_poll(running_ids),
            Action::FetchIssues {
                retries,
                refresh_workers,
            } => {
                let tracker = self.tracker.clone();
                let refresher = refresh_workers.then(|| Arc::clone(&self.refresher));
                self.send_tracker_job(TrackerOp::Fetch, move |calls| {
                    fetch_batch(&*tracker, retries, refresher.as_deref(), calls)
                });
            }
            dispatch @ Action::Dispatch { .. } => self.dispatch(dispatch),
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
                issue,
                workspace_path,
                host,
            } => self.clean_in_background(issue, workspace_path, host.as_deref()),
            // Reachable, and its sandbox starts when agents run confined.
            Action::ProbeHost { host } => {
                let (h, events) = (self.hosts.get(Some(&host)), self.events_tx.clone());
                let sandbox = self.workflow.config.config.agent_sandbox();
                let probe = move || {
                    let confined = |()| sandbox.map_or(Ok(()), |sb| sb.check(h.as_ref()));
                    let result = h.probe().and_then(confined);
                    let _ = events.send(Event::HostProbed { host, result });
                };
                if let Err(e) = spawn("host-probe", probe) {
                    warn!("cannot start a host probe error={e}");
                }
            }
            Action::StopOrphan {
                issue_id,
                host,
                pgid,
                leader_start,
            } => self.stop_orphan(issue_id, host, pgid, leader_start),
            Action::ReloadWorkflow => self.reload(),
            Action::RefreshAck {
                coalesced,
                deferred_until,
            } => self.ack(coalesced, deferred_until),
            Action::ShutdownComplete => self.done = true,
        }
    }

    /// Remove a workspace on `host`, on the removal pool; `WorkspaceRemoved` releases the issue
    /// afterwards (at once when a local workspace does not exist).
    fn clean_in_background(&mut self, issue: Issue, path: PathBuf, host: Option<&str>) {
        let (host, issue_id) = (self.hosts.get(host), issue.id.clone());
        if host.name().is_none() && std::fs::symlink_metadata(&path).is_err() {
            return self.queue.push_back(Event::WorkspaceRemoved { issue_id });
        }
        let hooks = self.workflow.config.config.hooks.clone();
        let events = self.events_tx.clone();
        let job = Box::new(move || {
            let _log = crate::runlog::RunLog::new(&issue.id, &issue.identifier).enter();
            // Whatever happens in the removal, the issue must be released afterwards.
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let root = path.parent().unwrap_or(Path::new("/"));
                let env = HookEnv::for_issue(&issue);
                match remove_workspace_on(host.as_ref(), root, &path, &hooks, &env) {
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
            }));
            if r.is_err() {
                error!("workspace removal panicked issue_id={}", issue.id);
            }
            let _ = events.send(Event::WorkspaceRemoved { issue_id: issue.id });
        });
        if let Err(e) = self.removals.submit(job) {
            warn!("cannot start workspace cleanup error={e}");
            self.queue.push_back(Event::WorkspaceRemoved { issue_id });
        }
    }

    /// Stop an orphaned agent group through the host that owns it; the answer is
    /// `Event::OrphanChecked`. A remote check runs on the background pool. A local one only
    /// comes from the restore at startup and runs here, before the loop and the first spawn (at
    /// most the orphan grace plus 2 s each), so nothing else touches the group first; its answer
    /// is queued (sent, a state file's thousands of orphans would fill the loop's own bounded
    /// channel before the loop reads it, and block startup for ever).
    fn stop_orphan(&mut self, issue_id: String, host: Option<String>, pgid: u32, start: u64) {
        let h = self.hosts.get(host.as_deref());
        let ident = self
            .state
            .orphans
            .get(&issue_id)
            .map(|o| o.identifier.clone());
        let check = move || {
            let on = h.name().unwrap_or("local").to_string();
            let result = h.stop_orphan(pgid, start).map(|outcome| {
                let event = if outcome.stopped() { "orphan_stopped" } else { "orphan_check" };
                info!(
                    "event={event} issue_id={issue_id} issue_identifier={} host={on} pgid={pgid} outcome={}",
                    ident.as_deref().unwrap_or("-"),
                    outcome.as_str()
                );
                outcome.stopped()
            });
            Event::OrphanChecked { issue_id, result }
        };
        let events = self.events_tx.clone();
        if host.is_none() {
            self.queue.push_back(check());
        } else if let Err(e) = self.removals.submit(Box::new(move || {
            let _ = events.send(check());
        })) {
            warn!("cannot start an orphan check error={e}");
        }
    }

    fn start_poll(&mut self, running_ids: Vec<String>) {
        // Safety net for missed watch events: re-read the file when its stamp changed.
        let stamp = stat_fingerprint(&self.workflow.path);
        if stamp != self.stamp {
            self.reload();
        }
        let tracker = self.tracker.clone();
        let cleanup =
            (!self.swept).then(|| self.workflow.config.config.tracker.terminal_states.clone());
        self.send_tracker_job(TrackerOp::Poll, move |calls| {
            poll_job(&*tracker, running_ids, cleanup, calls)
        });
    }

    /// Hand `job` to the tracker thread of `op` and note when (see [`TRACKER_JOB_BOUND_MS`]).
    /// Its events go out after `TrackerCalls` (the request gate learns how its calls ended
    /// before the engine sees a result) and `TrackerSpent` (its points; frees the slot).
    fn send_tracker_job(
        &mut self,
        op: TrackerOp,
        job: impl FnOnce(&mut Vec<CallOutcome>) -> (Vec<Event>, Option<&'static str>) + Send + 'static,
    ) {
        let slot = usize::from(op == TrackerOp::Fetch);
        let job: TrackerJob = Box::new(move || {
            let _ = take_points();
            let mut calls = Vec::new();
            let (events, class) = job(&mut calls);
            let points = take_points();
            let head = [
                Event::TrackerCalls(calls),
                Event::TrackerSpent { op, points },
            ];
            (head.into_iter().chain(events).collect(), class)
        });
        let _ = self.tracker_jobs[slot].send(self.surface.observed(job));
        self.tracker_busy[slot] = Some(self.clock.now());
    }

    fn dispatch(&mut self, action: Action) {
        let Action::Dispatch {
            run_id,
            issue,
            attempt,
            workspace_path,
            host,
            resume,
            stale_workspace,
        } = action
        else {
            return;
        };
        let cfg = &self.workflow.config.config;
        let cancel = CancelToken::new();
        let mailbox = Mailbox::new(&issue.id, run_id, self.news_tx.clone());
        let ctx = WorkerContext {
            run_id,
            issue: issue.clone(),
            attempt,
            workspace_path,
            hooks: cfg.hooks.clone(),
            max_turns: cfg.agent.max_turns,
            template: self.workflow.template.clone(),
            policy: self.state.policy.clone(),
            runner: self.runner.clone(),
            refresher: Arc::clone(&self.refresher),
            cancel: cancel.clone(),
            mailbox: Arc::clone(&mailbox),
            host: self.hosts.get(host.as_deref()),
            stale_workspace,
            resume,
        };
        match spawn_worker(ctx) {
            Ok(_handle) => {
                let handle = WorkerHandle {
                    run_id,
                    cancel,
                    mailbox,
                };
                self.workers.insert(issue.id.clone(), handle);
            }
            Err(e) => {
                // Only a lack of threads or memory stops a thread from starting.
                warn!(
                    "event=spawn_resource_exhausted issue_id={} issue_identifier={} what=worker_thread error={e}",
                    issue.id, issue.identifier
                );
                let why = format!("cannot start the worker thread: {e}");
                self.queue.push_back(Event::WorkerExited {
                    issue_id: issue.id,
                    run_id,
                    outcome: WorkerOutcome::ResourceExhausted(why),
                });
            }
        }
    }

    /// Re-read WORKFLOW.md on a thread (its result comes back as `LoopEvent::Reloaded`); while
    /// one runs, a new request is remembered and run afterwards.
    fn reload(&mut self) {
        if self.reload_in_flight {
            self.reload_again = true;
            return;
        }
        self.stamp = stat_fingerprint(&self.workflow.path);
        // Off the loop: the parse may run `gh auth token` and the template dry-renders.
        let (path, env) = (self.workflow.path.clone(), self.env.clone());
        let (hash, tx) = (self.workflow.content_hash, self.reload_tx.clone());
        let reread = move || {
            // Compare the raw bytes first: touches, watcher noise and saves without changes cost
            // one read and a hash, not a YAML parse, token lookup and dry-renders.
            let run = || -> ReloadResult {
                let bytes = read_workflow_bytes(&path)?;
                if fnv1a64(&bytes) == hash {
                    return Ok(None);
                }
                parse_workflow_bytes(&path, bytes, &*env).map(Some)
            };
            let loaded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run));
            let _ = tx.send(Box::new(loaded.unwrap_or_else(|_| {
                Err(WorkflowError {
                    class: "workflow_parse_error",
                    path: path.clone(),
                    message: "internal error: the reload panicked".into(),
                })
            })));
        };
        match spawn("workflow-reload", reread) {
            Ok(_) => self.reload_in_flight = true,
            Err(e) => error!("cannot start the workflow reload error={e}"),
        }
    }

    /// Apply a finished reload, all or nothing: a valid change swaps in the new workflow, tracker
    /// and runner and queues `ConfigReloaded`; one that fails to parse, fails the dispatch
    /// preflight or names a tracker that cannot be built keeps everything in force.
    fn apply_reload(&mut self, loaded: ReloadResult) {
        let wf = match loaded {
            Ok(Some(wf)) => wf,
            Ok(None) => {
                debug!("workflow unchanged; reload skipped");
                return self.reload_failed(None);
            }
            Err(e) => return self.reload_failed(Some(e.to_string())),
        };
        let new_cfg = &wf.config.config;
        let mut problems = crate::features::not_built(Some(new_cfg), None);
        problems.extend(new_cfg.preflight_errors().iter().map(|e| e.to_string()));
        let tracker_changed = new_cfg.tracker != self.workflow.config.config.tracker;
        let mut tracker = None;
        if problems.is_empty() && tracker_changed {
            match (self.tracker_factory)(new_cfg) {
                Ok(t) => tracker = Some(t),
                Err(e) => problems.push(e.to_string()),
            }
        }
        if !problems.is_empty() {
            let file = self.workflow.path.display();
            return self.reload_failed(Some(format!("{file}: {}", problems.join("; "))));
        }
        self.reload_failed(None);
        for w in &wf.config.warnings {
            warn!("workflow config warning: {w}");
        }
        match tracker {
            Some(t) => {
                self.tracker = t;
                self.start_watch();
            }
            None => self.tracker.reset_cache(),
        }
        self.runner = (self.runner_factory)(new_cfg);
        crate::host::set_env_policy(new_cfg.env_policy());
        self.hosts.configure(&new_cfg.worker);
        let policy = policy_for(new_cfg, self.fd_cap);
        self.workflow = wf;
        info!("workflow reloaded file={}", self.workflow.path.display());
        self.queue.push_back(Event::ConfigReloaded(policy));
    }

    /// Record how the last reload ended (`None`: applied or unchanged); a new error is logged
    /// once and shown by `/readyz` until a reload succeeds.
    fn reload_failed(&mut self, error: Option<String>) {
        if let Some(msg) = error.as_ref().filter(|_| error != self.last_reload_error) {
            error!(
                "workflow reload failed; keeping the previous config entirely event=workflow_reload_failed error={msg:?}"
            );
        }
        self.last_reload_error = error;
    }
}
