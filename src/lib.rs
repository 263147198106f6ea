//! Baton: a small, auditable daemon that turns a GitHub Projects (v2) board into finished work.
//!
//! See `ARCHITECTURE.md` for how the modules fit together.

#[cfg(not(target_os = "linux"))]
compile_error!(
    "Baton runs on Linux only (process groups, pidfd, cgroup v2); see docs/operations.md#platform"
);

pub mod agent;
pub mod app;
pub mod check;
pub mod cli;
pub mod config;
#[cfg(all(feature = "backlog", feature = "http"))]
pub mod demo;
pub mod durable;
pub mod features;
pub mod front_matter;
pub mod host;
#[cfg(feature = "http")]
pub mod http;
pub mod logging;
pub mod model;
pub mod ops;
pub mod orchestrator;
pub mod runlog;
pub mod runtime;
pub mod signals;
#[cfg(feature = "http")]
pub mod status;
pub mod text;
pub mod timefmt;
pub mod tracker;
pub mod workflow;
pub mod workspace;
