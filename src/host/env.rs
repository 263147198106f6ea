//! The environment agents and hooks inherit from Baton (`agent.env_remove`, `agent.env_keep_only`,
//! never the `server.webhook_secret` variable): one process-wide policy, set at startup and on
//! every valid reload, applied by the local supervisor before a process's own `BATON_*` variables.

use std::process::Command;
use std::sync::RwLock;

/// Which inherited variables a child keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvPolicy {
    pub remove: Vec<String>,
    /// When set, only these inherited variables are passed (then `remove` applies).
    pub keep_only: Option<Vec<String>>,
}

static POLICY: RwLock<Option<EnvPolicy>> = RwLock::new(None);

/// Replace the process-wide policy (the daemon does this on startup and reload).
pub fn set_env_policy(policy: EnvPolicy) {
    let mut g = POLICY.write().unwrap_or_else(|p| p.into_inner());
    *g = Some(policy);
}

/// The current policy (the default — inherit everything — until one was set).
pub fn env_policy() -> EnvPolicy {
    let policy = POLICY.read().unwrap_or_else(|p| p.into_inner());
    policy.clone().unwrap_or_default()
}

/// Apply the current policy to `cmd` (before the child's own variables are set).
pub(crate) fn apply(cmd: &mut Command) {
    let policy = env_policy();
    if let Some(keep) = &policy.keep_only {
        cmd.env_clear();
        for k in keep {
            if let Some(v) = std::env::var_os(k) {
                cmd.env(k, v);
            }
        }
    }
    for k in &policy.remove {
        cmd.env_remove(k);
    }
}
