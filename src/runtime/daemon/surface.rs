//! The main loop's side of the HTTP surface (feature `http`): it answers the HTTP thread's
//! [`ControlRequest`]s, publishes the metrics and readiness facts `/metrics` and `/readyz` read
//! ([`OpsShared`]) after every event and every tracker job, and checks a
//! [`run_with_state`](super::run_with_state) exit condition, which reads a status snapshot.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::Sender;
use log::info;

use super::{Daemon, TrackerJob};
use crate::durable::SaveReport;
use crate::ops::metrics::bump;
use crate::ops::shared::OpsShared;
use crate::ops::DaemonOps;
use crate::orchestrator::{Event, ParkKind, TrackerOp, WorkerOutcome};
use crate::status::snapshot::{fmt_millis, issue_detail, state_snapshot};
pub use crate::status::ControlRequest;
use crate::status::{RefreshAck, StateSnapshot};

/// Says, after each loop event, whether the daemon should shut down by itself (`baton demo`
/// stops when its board is done); given the current snapshot.
pub type ExitWhen = Box<dyn FnMut(&StateSnapshot) -> bool>;

/// How often an exit condition is re-checked when no event comes (ms).
const EXIT_RECHECK_MS: u64 = 250;

pub(super) struct Surface {
    shared: Arc<OpsShared>,
    pending_acks: Vec<Sender<RefreshAck>>,
    /// `None` once it fired.
    exit_when: Option<ExitWhen>,
}

impl Surface {
    pub(super) fn new(ops: &DaemonOps, exit_when: Option<ExitWhen>) -> Self {
        Surface {
            shared: Arc::clone(&ops.shared),
            pending_acks: Vec::new(),
            exit_when,
        }
    }

    /// When to re-check the exit condition: some of what it looks at (e.g. a removed workspace)
    /// sends no event.
    pub(super) fn recheck(&self, now: u64) -> Option<u64> {
        (self.exit_when.as_ref()).map(|_| now.saturating_add(EXIT_RECHECK_MS))
    }

    /// `job`, recording on its thread how it went: a poll's duration, error class and points
    /// (known only there), a fetch batch's points.
    pub(super) fn observed(&self, job: TrackerJob) -> TrackerJob {
        let shared = Arc::clone(&self.shared);
        Box::new(move || {
            let started = Instant::now();
            let (events, class) = job();
            let (mut spent, mut known) = (None, false);
            for e in &events {
                match e {
                    Event::TrackerSpent { op, points } => spent = Some((*op, *points)),
                    Event::PollResult { rate_limit, .. } => known = rate_limit.is_some(),
                    _ => {}
                }
            }
            match spent {
                Some((TrackerOp::Poll, points)) => {
                    let (took, at, now) = (started.elapsed(), SystemTime::now(), Instant::now());
                    shared.record_poll(took, class, known.then_some(points), at, now);
                }
                Some((TrackerOp::Fetch, p)) => {
                    shared.update_metrics(|m| m.points_total = m.points_total.saturating_add(p));
                }
                None => {}
            }
            (events, class)
        })
    }

    pub(super) fn saved(&self, r: &SaveReport) {
        (self.shared).update_metrics(|m| m.state_write_duration.observe_duration(r.elapsed));
    }
}

impl Daemon {
    pub(super) fn control(&mut self, req: ControlRequest) {
        let now = self.clock.now();
        match req {
            ControlRequest::State(reply) => {
                let _ = reply.send(state_snapshot(&self.state, now));
            }
            ControlRequest::Issue(identifier, reply) => {
                let _ = reply.send(issue_detail(&self.state, &identifier, now));
            }
            ControlRequest::Refresh(reply) => {
                self.surface.pending_acks.push(reply);
                self.engine(Event::RefreshRequested);
            }
            ControlRequest::Ping(reply) => {
                let _ = reply.send(());
            }
        }
    }

    /// Count a worker's exit by outcome (while its run is still the issue's running one).
    pub(super) fn count_exit(&self, issue_id: &str, run_id: u64, outcome: &WorkerOutcome) {
        if self.state.running.get(issue_id).map(|e| e.run_id) != Some(run_id) {
            return;
        }
        let label = match outcome {
            WorkerOutcome::Normal => "normal",
            WorkerOutcome::Failed(_) => "failed",
            WorkerOutcome::Cancelled => "cancelled",
            WorkerOutcome::HostFailed { .. } => "host_failed",
            WorkerOutcome::ResourceExhausted(_) => "resource_exhausted",
        };
        (self.surface.shared).update_metrics(|m| m.record_worker_exit(label));
    }

    /// Answer the refresh requests waiting for the engine's acknowledgement.
    pub(super) fn ack(&mut self, coalesced: bool, deferred_until: Option<u64>) {
        let ack = RefreshAck {
            queued: true,
            coalesced,
            requested_at: fmt_millis(self.clock.now()),
            operations: vec!["poll".into(), "reconcile".into()],
            deferred_until: deferred_until.map(fmt_millis),
        };
        for tx in self.surface.pending_acks.drain(..) {
            let _ = tx.send(ack.clone());
        }
    }

    /// Copy the gauges, engine counters and readiness facts (startup is done once the loop
    /// publishes) into the shared state (cheap: a few fields and one pass over parked).
    pub(super) fn publish(&self) {
        let s = &self.state;
        let interval = s.poll.gate.poll_interval(s.policy.poll_interval_ms);
        self.surface.shared.update_metrics(|m| {
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
                bump(&mut m.parked, b.kind.as_str());
            }
            (m.dispatches, m.retries_scheduled) =
                (s.counters.dispatches, s.counters.retries_scheduled);
            let t = &s.agent_totals;
            (m.tokens, m.cost_usd, m.agent_turns) = (t.tokens, t.cost_usd, t.turns);
            m.poll_interval_seconds = interval as f64 / 1000.0;
            m.points_projected_per_hour = s.poll.gate.pace.plan.projected_per_hour;
            if let Some(rl) = &s.poll.rate_limit {
                let known = |v: Option<i64>| v.and_then(|n| n.try_into().ok());
                m.rate_limit_remaining = known(rl.remaining);
                m.rate_limit_limit = known(rl.limit);
            }
        });
        self.surface.shared.update_health(|h| {
            h.recovery_done = true;
            h.polling_interval = Duration::from_millis(interval);
            h.shutting_down |= self.ops.stopping || s.shutting_down;
            h.stuck_thread = self.ops.stuck;
            h.reload_error.clone_from(&self.last_reload_error);
        });
    }

    /// After each loop step: start the graceful shutdown the first time the exit condition
    /// holds, then publish.
    pub(super) fn after_step(&mut self, now: u64) {
        let exit_when = self.surface.exit_when.as_mut();
        if exit_when.is_some_and(|f| f(&state_snapshot(&self.state, now))) {
            self.surface.exit_when = None;
            info!("event=exit_condition_met; shutting down");
            self.shut_down(None);
        }
        self.publish();
    }
}
