//! Operations: systemd notify and watchdog, Prometheus metrics, health decisions.
//!
//! Nothing in this module reads the orchestrator's state or touches the main loop. The daemon
//! (`runtime::daemon::ops`) copies its counters into a [`metrics::MetricsSnapshot`] and its
//! readiness facts into [`shared::OpsShared`] (the hand-over point: the loop and the tracker
//! thread write it, the HTTP thread reads it and decides with [`health::readyz`]), and calls the
//! [`sdnotify::Notifier`] from the main loop (so a wedged loop stops the watchdog pings).
//! [`sdnotify::take_systemd_env`] reads and scrubs systemd's variables before any thread starts.

pub mod exposition;
pub mod health;
pub mod metrics;
pub mod sdnotify;
pub mod shared;

use std::sync::Arc;

/// What the daemon shares with the HTTP thread and systemd. `Default`: fresh shared state and
/// no systemd.
#[derive(Debug, Clone, Default)]
pub struct DaemonOps {
    /// Metrics and readiness facts (also given to the HTTP server).
    pub shared: Arc<shared::OpsShared>,
    /// The systemd notifier ([`sdnotify::Notifier::from_env`] in production).
    pub notifier: Arc<sdnotify::Notifier>,
}
