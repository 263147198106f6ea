//! The SSH host pool of a Baton built without the `ssh` feature (the same functions as
//! `hosts.rs`). Startup and reload refuse `worker.ssh_hosts` (`crate::features`), so every run is
//! on this machine: no workspace copy on a host to remember, no host marked down or probed. A
//! policy that names hosts anyway (only a test builds one) places nothing, so no run meant for a
//! host starts here.

use std::collections::BTreeMap;

use crate::model::Issue;

use super::engine::Action;
use super::state::{Millis, OrchestratorState};

/// Nowhere to run when the policy names SSH hosts.
pub fn is_full(s: &OrchestratorState) -> bool {
    !s.policy.ssh_hosts.is_empty()
}

/// This machine.
pub fn assign(_: &mut OrchestratorState, _: &Issue, _: Option<&str>) -> (Option<String>, bool) {
    (None, false)
}

/// No run is on a host.
pub fn loads(_: &OrchestratorState) -> BTreeMap<String, usize> {
    BTreeMap::new()
}

/// No host is ever marked down or probed.
pub fn mark_down(_: &mut OrchestratorState, _: &str, _: &str, _: Millis) {}

/// No host is probed, so no orphan is re-checked by a probe.
pub fn probed(_: &mut OrchestratorState, _: &str, _: Result<(), String>, _: Millis) -> Vec<Action> {
    Vec::new()
}

/// No probe is ever due.
pub fn due_probes(_: &mut OrchestratorState, _: Millis) -> Vec<Action> {
    Vec::new()
}

/// No probe to wake up for.
pub fn next_probe(_: &OrchestratorState) -> Option<Millis> {
    None
}

/// No host is remembered, so none to forget on a reload.
pub fn retain_configured(_: &mut OrchestratorState) {}
