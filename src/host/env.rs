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

/// The current policy: inherit everything until one was set.
static POLICY: RwLock<EnvPolicy> = RwLock::new(EnvPolicy {
    remove: Vec::new(),
    keep_only: None,
});

/// Replace the process-wide policy (the daemon does this on startup and reload).
pub fn set_env_policy(policy: EnvPolicy) {
    *POLICY.write().unwrap_or_else(|p| p.into_inner()) = policy;
}

/// Apply the current policy to `cmd` (before the child's own variables are set).
pub(crate) fn apply(cmd: &mut Command) {
    let policy = POLICY.read().unwrap_or_else(|p| p.into_inner());
    if let Some(keep) = &policy.keep_only {
        cmd.env_clear();
        cmd.envs(keep.iter().filter_map(|k| Some((k, std::env::var_os(k)?))));
    }
    for k in &policy.remove {
        cmd.env_remove(k);
    }
}
