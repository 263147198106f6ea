//! Operations: systemd notify and watchdog, Prometheus metrics, health decisions (ARCHITECTURE.md,
//! "Operations"). Nothing here reads the orchestrator's state: `runtime::daemon::ops` copies it in.

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
