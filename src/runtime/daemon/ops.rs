//! The main loop's operations duties: state copied into the shared metrics and health facts after
//! every event, and systemd's messages, sent from the loop (its `select!` waits for
//! [`LoopOps::deadline`]) so that a wedged loop stops the watchdog pings.

use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use crate::ops::metrics::MetricsSnapshot;
use crate::ops::sdnotify::{summary, Notifier, WatchdogPacer};
use crate::ops::shared::OpsShared;
use crate::ops::DaemonOps;
use crate::orchestrator::{OrchestratorState, ParkKind, WorkerOutcome};

/// Shortest time between two `STATUS=` messages.
pub(crate) const STATUS_MIN_INTERVAL: Duration = Duration::from_secs(1);

/// The loop-side state of [`DaemonOps`].
pub(crate) struct LoopOps {
    pub(crate) shared: Arc<OpsShared>,
    notifier: Arc<Notifier>,
    pacer: Option<WatchdogPacer>,
    /// The last `STATUS=` text sent, and when.
    last_status: Option<(String, Instant)>,
    /// A changed status waiting for the rate limit.
    pending_status: Option<String>,
    /// A tracker thread stuck on one job.
    stuck: Option<&'static str>,
}

impl LoopOps {
    pub(crate) fn new(ops: DaemonOps) -> Self {
        let pacer = ops
            .notifier
            .watchdog_interval()
            .map(|every| WatchdogPacer::new(every, Instant::now()));
        LoopOps {
            shared: ops.shared,
            notifier: ops.notifier,
            pacer,
            last_status: None,
            pending_status: None,
            stuck: None,
        }
    }

    /// Startup is done: readiness may turn green, systemd gets `READY=1` and a first status.
    pub(crate) fn ready(&mut self, state: &OrchestratorState) {
        self.shared.update_health(|h| h.recovery_done = true);
        self.after_event(state);
        self.notifier.ready();
        self.on_due(Instant::now());
    }

    /// Shutdown has started: `STOPPING=1` (once) and readiness turns 503.
    pub(crate) fn stopping(&mut self) {
        let mut first = false;
        self.shared.update_health(|h| {
            first = !h.shutting_down;
            h.shutting_down = true;
        });
        if first {
            self.notifier.stopping();
        }
    }

    /// Whether a tracker thread is stuck on one job (see `TRACKER_JOB_BOUND_MS`): while one is,
    /// liveness fails (`/livez` 503, no `WATCHDOG=1`) so that systemd restarts Baton.
    pub(crate) fn tracker_stuck(&mut self, thread: Option<&'static str>) {
        if thread == self.stuck {
            return;
        }
        match thread {
            Some(t) => log::error!(
                "event=tracker_thread_stuck thread={t}; liveness fails (/livez 503, no watchdog pings) until it finishes its job"
            ),
            None => log::info!("event=tracker_thread_recovered"),
        }
        self.stuck = thread;
        self.shared.update_health(|h| h.stuck_thread = thread);
    }

    pub(crate) fn worker_exit(&self, outcome: &WorkerOutcome) {
        let label = match outcome {
            WorkerOutcome::Normal => "normal",
            WorkerOutcome::Failed(_) => "failed",
            WorkerOutcome::Cancelled => "cancelled",
            WorkerOutcome::HostFailed { .. } => "host_failed",
            WorkerOutcome::ResourceExhausted(_) => "resource_exhausted",
        };
        self.shared.update_metrics(|m| m.record_worker_exit(label));
    }

    /// Copy the gauges and engine counters after an event, and queue a `STATUS=` when the
    /// summary changed.
    pub(crate) fn after_event(&mut self, state: &OrchestratorState) {
        self.shared.update_metrics(|m| copy_state(m, state));
        let interval =
            Duration::from_millis(state.poll.gate.poll_interval(state.policy.poll_interval_ms));
        let shutting_down = state.shutting_down;
        self.shared.update_health(|h| {
            h.polling_interval = interval;
            h.shutting_down |= shutting_down;
        });
        if !self.notifier.is_enabled() {
            return;
        }
        let last_poll = state
            .poll
            .last_success_at
            .map(|ms| UNIX_EPOCH + Duration::from_millis(ms));
        let line = summary(
            state.running.len() as u64,
            state.retry_attempts.len() as u64,
            state.blocked.len() as u64,
            last_poll,
        );
        let unchanged = self.last_status.as_ref().is_some_and(|(s, _)| *s == line);
        self.pending_status = (!unchanged).then_some(line);
    }

    /// The next real-time moment [`LoopOps::on_due`] has work: a watchdog ping or a deferred
    /// status.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        let status =
            (self.pending_status.as_ref()).map(|_| self.status_at().unwrap_or_else(Instant::now));
        self.pacer
            .map(|p| p.deadline())
            .into_iter()
            .chain(status)
            .min()
    }

    /// Send what is due at `now`: the watchdog ping and a rate-limited status.
    pub(crate) fn on_due(&mut self, now: Instant) {
        if let Some(p) = self.pacer.as_mut() {
            if p.due(now) && self.stuck.is_none() {
                self.notifier.watchdog();
            }
        }
        if self.status_at().is_none_or(|at| now >= at) {
            if let Some(line) = self.pending_status.take() {
                self.notifier.status(&line);
                self.last_status = Some((line, now));
            }
        }
    }

    /// When the rate limit lets the next `STATUS=` go (`None`: at once).
    fn status_at(&self) -> Option<Instant> {
        self.last_status
            .as_ref()
            .map(|(_, at)| *at + STATUS_MIN_INTERVAL)
    }
}

/// Copy the state-derived gauges and counters (cheap: a few fields and one pass over parked).
fn copy_state(m: &mut MetricsSnapshot, s: &OrchestratorState) {
    m.running = s.running.len() as u64;
    m.retrying = s.retry_attempts.len() as u64;
    // Every class is always shown (0 when none), so a series never vanishes.
    let kinds = [
        ParkKind::MaxAttempts,
        ParkKind::MaxRuns,
        ParkKind::BudgetExceeded,
    ];
    m.parked = kinds.map(|k| (k.as_str(), 0)).into();
    for b in s.blocked.values() {
        let n = m.parked.entry(b.kind.as_str()).or_insert(0);
        *n = n.saturating_add(1);
    }
    m.dispatches = s.counters.dispatches;
    m.retries_scheduled = s.counters.retries_scheduled;
    let t = &s.agent_totals;
    m.tokens = t.tokens;
    m.cost_usd = t.cost_usd;
    m.agent_turns = t.turns;
    let plan = &s.poll.gate.pace.plan;
    m.poll_interval_seconds = s.poll.gate.poll_interval(s.policy.poll_interval_ms) as f64 / 1000.0;
    m.points_projected_per_hour = plan.projected_per_hour;
    if let Some(rl) = &s.poll.rate_limit {
        let known = |v: Option<i64>| v.and_then(|n| n.try_into().ok());
        m.rate_limit_remaining = known(rl.remaining);
        m.rate_limit_limit = known(rl.limit);
    }
}
