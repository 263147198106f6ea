//! The runtime around the pure core: the daemon main loop (`daemon`), its injected time source
//! (`clock`), worker threads running the attempt algorithm (`worker`, with the first turn of a
//! resumed session in `resume`), each reporting through its run's `mailbox`, durable state
//! (`persist`) and the tracker threads that keep GitHub calls off the loop.

pub mod clock;
pub mod daemon;
pub mod fds;
pub mod mailbox;
pub mod persist;
pub mod resume;
pub mod threads;
pub mod worker;

use std::sync::Arc;

use crate::host::sandbox::Sandbox;
use crate::workflow::config::ServiceConfig;

/// The sandbox the agents of `cfg` run in; `None` with `sandbox.kind: none`.
pub fn sandbox_for(cfg: &ServiceConfig) -> Option<Arc<Sandbox>> {
    let home = cfg.agent.kind?.cli_home();
    let command = &cfg.agent_cli().command;
    (cfg.sandbox.bubblewrap).then(|| Arc::new(Sandbox::new(cfg.sandbox.clone(), home, command)))
}
