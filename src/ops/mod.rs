//! Operations: systemd notify and watchdog, Prometheus metrics, health decisions.
//!
//! Every piece here is standalone: nothing in this module reads the orchestrator's state or
//! touches the main loop. The daemon copies its counters into a [`metrics::MetricsSnapshot`],
//! feeds a [`health::ReadyInputs`] to [`health::readyz`], and calls the [`sdnotify::Notifier`]
//! from the main loop (so a wedged loop stops the watchdog pings). [`shared::OpsShared`] is the
//! hand-over point: the loop and the tracker thread write it, the HTTP thread reads it.

pub mod exposition;
pub mod health;
pub mod metrics;
pub mod sdnotify;
pub mod shared;
pub mod startup;
