//! Optional status surface (spec §13.7): dashboard, JSON API, refresh, signed GitHub webhook,
//! `/metrics`, `/livez`, `/readyz`. The HTTP threads never touch orchestrator state: they ask the
//! main loop ([`crate::status::ControlRequest`], with a timeout) or read [`OpsShared`].

pub(crate) mod html;
pub mod routes;
mod server;
pub mod webhook;

use std::sync::Arc;
use std::time::Duration;

pub use server::{spawn, HttpHandle};

use crate::ops::shared::OpsShared;
use crate::ops::DaemonOps;
use crate::status::ControlRequest;
use crate::workflow::config::{Secret, ServerConfig};

/// Default bind host: loopback only.
pub(crate) const DEFAULT_BIND: &str = "127.0.0.1";

/// How to run the HTTP server.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub bind: String,
    /// `0` picks an ephemeral one (see [`HttpHandle::local_addr`]).
    pub port: u16,
    /// `server.webhook_secret`; `None` disables `POST /api/v1/webhooks/github` (404).
    pub webhook_secret: Option<Secret>,
    /// How long a request waits for the main loop before answering 503 `snapshot_timeout`.
    pub snapshot_timeout: Duration,
    /// Largest accepted request body; larger ones get 413.
    pub max_body_bytes: usize,
    /// What `/metrics` and `/readyz` read (the daemon's [`OpsShared`]); a fresh one by default.
    pub ops: Arc<OpsShared>,
}

impl HttpOptions {
    /// Options with defaults for everything but the address.
    pub fn new(bind: impl Into<String>, port: u16) -> Self {
        HttpOptions {
            bind: bind.into(),
            port,
            webhook_secret: None,
            snapshot_timeout: Duration::from_secs(2),
            // GitHub `projects_v2_item` deliveries are a few KiB.
            max_body_bytes: 256 * 1024,
            ops: Arc::new(OpsShared::default()),
        }
    }

    /// Apply precedence: `--port` over `server.port`, `--bind` over `server.host` over
    /// `127.0.0.1`. `None` when neither port is given (server disabled).
    fn from_config(
        cli_port: Option<u16>,
        cli_bind: Option<&str>,
        server: &ServerConfig,
        ops: &Arc<OpsShared>,
    ) -> Option<HttpOptions> {
        let port = cli_port.or(server.port)?;
        let bind = (cli_bind.map(str::to_string))
            .or_else(|| server.host.clone())
            .filter(|h| !h.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_BIND.to_string());
        Some(HttpOptions {
            webhook_secret: server.webhook_secret.clone(),
            ops: Arc::clone(ops),
            ..HttpOptions::new(bind, port)
        })
    }
}

/// Start the server when `--port` or `server.port` asks for one (`Ok(None)`: no server), with
/// `/metrics` and `/readyz` reading the daemon's `ops`.
pub(crate) fn start(
    cli_port: Option<u16>,
    cli_bind: Option<&str>,
    server: &ServerConfig,
    ops: &DaemonOps,
    control: crossbeam_channel::Sender<ControlRequest>,
) -> Result<Option<HttpHandle>, String> {
    let opts = HttpOptions::from_config(cli_port, cli_bind, server, &ops.shared);
    let started = opts.map(|opts| spawn(opts, control)).transpose();
    started.map_err(|e| format!("startup_failed: dashboard/API server: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_wins_over_config_and_loopback_is_default() {
        let cfg = ServerConfig {
            port: Some(8080),
            host: Some("0.0.0.0".into()),
            webhook_secret: Some(Secret::new("s")),
        };
        let ops = Arc::new(OpsShared::default());
        let o = HttpOptions::from_config(Some(9000), Some("::1"), &cfg, &ops).unwrap();
        assert_eq!((o.bind.as_str(), o.port), ("::1", 9000));
        assert!(o.webhook_secret.is_some());
        let o = HttpOptions::from_config(None, None, &cfg, &ops).unwrap();
        assert_eq!((o.bind.as_str(), o.port), ("0.0.0.0", 8080));
        let empty = ServerConfig::default();
        assert!(HttpOptions::from_config(None, Some("0.0.0.0"), &empty, &ops).is_none());
        let o = HttpOptions::from_config(Some(0), None, &empty, &ops).unwrap();
        assert_eq!((o.bind.as_str(), o.port), (DEFAULT_BIND, 0));
    }
}
