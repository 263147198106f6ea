//! The main loop's HTTP side in a Baton built without `http` (the stand-in for `surface.rs`):
//! nothing sends the loop a request, reads its metrics or sets an exit condition (it reads a
//! status snapshot), so the request and exit types have no values and every hook does nothing.

use super::{Daemon, TrackerJob};
use crate::durable::SaveReport;
use crate::ops::DaemonOps;
use crate::orchestrator::WorkerOutcome;

/// Has no value: nothing sends the loop a request.
pub type ControlRequest = std::convert::Infallible;
/// Has no value: no exit condition is set.
pub type ExitWhen = std::convert::Infallible;

pub(super) struct Surface;

impl Surface {
    pub(super) fn new(_: &DaemonOps, _: Option<ExitWhen>) -> Self {
        Surface
    }

    pub(super) fn recheck(&self, _: u64) -> Option<u64> {
        None
    }

    pub(super) fn observed(&self, job: TrackerJob) -> TrackerJob {
        job
    }

    pub(super) fn saved(&self, _: &SaveReport) {}
}

impl Daemon {
    pub(super) fn control(&mut self, request: ControlRequest) {
        match request {}
    }

    pub(super) fn count_exit(&self, _: &str, _: u64, _: &WorkerOutcome) {}
    pub(super) fn ack(&mut self, _: bool, _: Option<u64>) {}
    pub(super) fn publish(&self) {}
    pub(super) fn after_step(&mut self, _: u64) {}
}
