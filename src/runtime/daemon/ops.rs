//! The main loop's systemd duties: `READY=1`, `STOPPING=1`, a rate-limited `STATUS=` summary and
//! the watchdog pings, sent from the loop (its `select!` waits for [`LoopOps::deadline`]) so that
//! a wedged loop stops the pings.

use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use crate::ops::sdnotify::{summary, Notifier, WatchdogPacer};
use crate::orchestrator::OrchestratorState;

/// Shortest time between two `STATUS=` messages.
pub(crate) const STATUS_MIN_INTERVAL: Duration = Duration::from_secs(1);

/// The loop-side state of the systemd notifier.
#[derive(Default)]
pub(crate) struct LoopOps {
    notifier: Arc<Notifier>,
    pacer: Option<WatchdogPacer>,
    /// The last `STATUS=` text sent, and when.
    last_status: Option<(String, Instant)>,
    /// A changed status waiting for the rate limit.
    pending_status: Option<String>,
    /// A tracker thread stuck on one job.
    pub(super) stuck: Option<&'static str>,
    /// Shutdown has started (`STOPPING=1` was sent).
    pub(super) stopping: bool,
}

impl LoopOps {
    pub(crate) fn new(notifier: Arc<Notifier>) -> Self {
        let pacer =
            (notifier.watchdog_interval()).map(|every| WatchdogPacer::new(every, Instant::now()));
        LoopOps {
            notifier,
            pacer,
            ..Default::default()
        }
    }

    /// Startup is done: systemd gets `READY=1` and a first status.
    pub(crate) fn ready(&mut self, state: &OrchestratorState) {
        self.after_event(state);
        self.notifier.ready();
        self.on_due(Instant::now());
    }

    /// Shutdown has started: `STOPPING=1` (once).
    pub(crate) fn stopping(&mut self) {
        if !std::mem::replace(&mut self.stopping, true) {
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
    }

    /// Queue a `STATUS=` when the summary changed after an event.
    pub(crate) fn after_event(&mut self, state: &OrchestratorState) {
        if !self.notifier.is_enabled() {
            return;
        }
        let last_poll =
            (state.poll.last_success_at).map(|ms| UNIX_EPOCH + Duration::from_millis(ms));
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
        let watchdog = self.pacer.map(|p| p.deadline());
        [watchdog, status].into_iter().flatten().min()
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
