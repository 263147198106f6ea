//! Operations: systemd notify and watchdog, and (with the HTTP surface) Prometheus metrics and
//! health decisions (ARCHITECTURE.md, "Operations"). Nothing here reads the orchestrator's state:
//! `runtime::daemon` copies it in.

#[cfg(feature = "http")]
pub mod metrics;
pub mod sdnotify;
#[cfg(feature = "http")]
pub mod shared;

use std::sync::Arc;

/// What the daemon shares with the HTTP thread and systemd. `Default`: fresh shared state and
/// no systemd.
#[derive(Debug, Clone, Default)]
pub struct DaemonOps {
    /// Metrics and readiness facts (also given to the HTTP server).
    #[cfg(feature = "http")]
    pub shared: Arc<shared::OpsShared>,
    /// The systemd notifier (from the environment in production: [`sdnotify::take_systemd_env`]).
    pub notifier: Arc<sdnotify::Notifier>,
}
