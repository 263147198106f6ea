//! The runtime side of the host pool: one shared [`Host`] object per SSH destination (so their
//! multiplexing masters are reused), looked up by the host id the engine chose for a run.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::ssh::SshSettings;
use super::{Host, LocalHost, SshHost};
use crate::host::config::WorkerConfig;

/// SSH hosts by destination, created on first use and kept across reloads.
#[derive(Debug)]
pub struct HostPool {
    control_dir: Option<PathBuf>,
    hosts: Mutex<BTreeMap<String, Arc<SshHost>>>,
    /// Shared by every host: [`HostPool::configure`] reaches the existing ones too.
    settings: Arc<SshSettings>,
}

impl HostPool {
    /// A pool whose multiplexing sockets live in [`super::ssh::control_dir`] (without one when
    /// that directory cannot be made private: every `ssh` then does its own handshake).
    pub fn new() -> Self {
        let control_dir = match super::ssh::control_dir() {
            Ok(d) => Some(d),
            Err(e) => {
                log::warn!("ssh multiplexing disabled: {e}");
                None
            }
        };
        HostPool {
            control_dir,
            hosts: Mutex::new(BTreeMap::new()),
            settings: Arc::default(),
        }
    }

    /// Apply `worker.ssh_command_timeout_ms` and `worker.ssh_sessions_per_connection` (at
    /// startup and on every reload).
    pub fn configure(&self, worker: &WorkerConfig) {
        self.settings.set(worker);
    }

    /// The host for a run: this machine for `None`, else the SSH host `destination`.
    pub fn get(&self, destination: Option<&str>) -> Arc<dyn Host> {
        match destination {
            None => LocalHost::shared(),
            Some(d) => self.ssh(d),
        }
    }

    pub fn ssh(&self, destination: &str) -> Arc<SshHost> {
        let mut hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        let dir = self.control_dir.clone().unwrap_or_default();
        Arc::clone(hosts.entry(destination.to_string()).or_insert_with(|| {
            let h = SshHost::new(destination, &dir);
            Arc::new(h.with_settings(Arc::clone(&self.settings)))
        }))
    }

    /// Stop every multiplexing master (shutdown).
    pub fn close_all(&self) {
        let hosts = self.hosts.lock().unwrap_or_else(|p| p.into_inner());
        for h in hosts.values() {
            h.close();
        }
    }
}

impl Default for HostPool {
    fn default() -> Self {
        HostPool::new()
    }
}
