//! The host pool of a Baton built without the `ssh` feature: every run is local. Startup and
//! reload refuse `worker.ssh_hosts` (`crate::features`), so the engine places no run elsewhere;
//! an SSH host named only by a restored state file (a workspace copy left by a build with `ssh`)
//! gets a host whose every operation fails, so nothing meant for it happens on this machine.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::config::WorkerConfig;
use super::{BeforeRemove, Host, LocalHost, Process, ProcessSpec, Removal, Workspace};
use super::{WorkspaceError, HOST_UNAVAILABLE};

/// This machine only.
#[derive(Debug, Default)]
pub struct HostPool;

impl HostPool {
    pub fn new() -> Self {
        HostPool
    }

    /// Nothing to apply: the `worker.ssh_*` settings have no host to reach.
    pub fn configure(&self, _worker: &WorkerConfig) {}

    /// This machine for `None`; a host that refuses everything for an SSH destination.
    pub fn get(&self, destination: Option<&str>) -> Arc<dyn Host> {
        match destination {
            None => LocalHost::shared(),
            Some(d) => Arc::new(NotBuilt(d.to_string())),
        }
    }

    pub fn close_all(&self) {}
}

/// An SSH destination this build cannot reach.
#[derive(Debug)]
struct NotBuilt(String);

impl NotBuilt {
    fn error(&self) -> String {
        let d = &self.0;
        format!("{HOST_UNAVAILABLE}: ssh {d}: SSH hosts need a Baton built with --features ssh")
    }
}

impl Host for NotBuilt {
    fn create_workspace(&self, _: &Path, _: &Path) -> Result<Workspace, WorkspaceError> {
        Err(WorkspaceError(self.error()))
    }

    fn check_workspace(&self, _: &Path, _: &Path) -> Result<PathBuf, WorkspaceError> {
        Err(WorkspaceError(self.error()))
    }

    fn remove_workspace(&self, _: &Path, _: &Path, _: &mut BeforeRemove) -> Removal {
        Err(WorkspaceError(self.error()))
    }

    fn spawn(&self, _: &ProcessSpec) -> io::Result<Box<dyn Process>> {
        Err(io::Error::other(self.error()))
    }

    fn name(&self) -> Option<&str> {
        Some(&self.0)
    }

    fn probe(&self) -> Result<(), String> {
        Err(self.error())
    }
}
