//! Process startup for systemd: read `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` once,
//! then remove them from Baton's own environment so no child (agent, hook, `gh`) ever inherits
//! them and talks to systemd in Baton's name.

use std::sync::Arc;

use super::sdnotify::{Notifier, CHILD_ENV_REMOVE};
use super::shared::OpsShared;
use crate::runtime::daemon::DaemonOps;

/// Build the [`DaemonOps`] of a `baton` run (a notifier from the environment, fresh shared
/// metrics) and scrub the systemd variables from the process environment.
///
/// Call it first thing in the daemon, **before any thread is spawned**: `std::env::remove_var`
/// is only sound while no other thread may read or write the environment concurrently (libc's
/// `getenv`/`setenv` are not synchronized; Rust 2024 marks `remove_var` `unsafe` for this
/// reason). At that point `main` has parsed arguments and set up logging, neither of which
/// starts a thread; signal handlers, the watcher, HTTP, tracker and worker threads all come
/// later. Every child process is spawned later too, so none can inherit the variables.
pub fn take_systemd_env() -> DaemonOps {
    let notifier = Notifier::from_env();
    for name in CHILD_ENV_REMOVE {
        std::env::remove_var(name);
    }
    DaemonOps {
        shared: Arc::new(OpsShared::new()),
        notifier: Arc::new(notifier),
    }
}
