//! What every CLI agent runner holds: its config section plus the process knobs that tests and
//! embedders set (extra or removed environment, the SIGTERM→SIGKILL grace, the stdout line
//! bound). One generic type, so an adapter only adds its [`AgentRunner`](super::AgentRunner) impl
//! (`ClaudeRunner = CliRunner<ClaudeCodeConfig>`, `CopilotRunner = CliRunner<CopilotConfig>`).

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::host::sandbox::Sandbox;
use crate::host::{ProcessSpec, StdoutMode, DEFAULT_KILL_GRACE, DEFAULT_MAX_LINE_BYTES};
use crate::workflow::config::ServiceConfig;

/// The sandbox the agents of `cfg` run in; `None` with `sandbox.kind: none`.
pub fn sandbox_for(cfg: &ServiceConfig) -> Option<Arc<Sandbox>> {
    let home = cfg.agent.kind?.cli_home();
    let command = &cfg.agent_cli().command;
    (cfg.sandbox.bubblewrap).then(|| Arc::new(Sandbox::new(cfg.sandbox.clone(), home, command)))
}

/// A CLI agent's config plus its process knobs; builds sessions through its `AgentRunner` impl.
#[derive(Debug, Clone)]
pub struct CliRunner<C> {
    pub(crate) cfg: C,
    env: Vec<(OsString, OsString)>,
    env_remove: Vec<OsString>,
    pub(crate) kill_grace: Duration,
    max_line_bytes: usize,
    sandbox: Option<Arc<Sandbox>>,
}

impl<C> CliRunner<C> {
    /// A runner for `cfg` with the default knobs.
    pub fn new(cfg: C) -> Self {
        CliRunner {
            cfg,
            env: Vec::new(),
            env_remove: Vec::new(),
            kill_grace: DEFAULT_KILL_GRACE,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            sandbox: None,
        }
    }

    /// An extra environment variable for every CLI process (it wins over Baton's own).
    pub fn with_env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Several extra environment variables at once (see [`CliRunner::with_env`]).
    pub fn with_envs(mut self, vars: Vec<(String, String)>) -> Self {
        self.env
            .extend(vars.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Remove an inherited environment variable from every CLI process (e.g. `GH_TOKEN` in tests).
    pub fn without_env(mut self, key: impl Into<OsString>) -> Self {
        self.env_remove.push(key.into());
        self
    }

    /// Grace between SIGTERM and SIGKILL when a turn is stopped (default 3 s).
    pub fn with_kill_grace(mut self, grace: Duration) -> Self {
        self.kill_grace = grace;
        self
    }

    /// Bound of one stdout line (default 10 MB).
    pub fn with_max_line_bytes(mut self, n: usize) -> Self {
        self.max_line_bytes = n;
        self
    }

    /// Run every CLI process confined (`sandbox.kind: bubblewrap`; `None`: unconfined).
    pub fn with_sandbox(mut self, sandbox: Option<Arc<Sandbox>>) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// Whether the operator or the runner sets `key` for the child (then Baton leaves it alone).
    pub(crate) fn sets_env(&self, key: &str) -> bool {
        std::env::var_os(key).is_some() || self.env.iter().any(|(k, _)| k == key)
    }

    /// Apply the knobs to a spec: line-bounded stdout, removed variables, then the extra ones
    /// (pushed last, so they win); last, the sandbox. The one place agent specs are finished.
    pub(crate) fn apply(&self, spec: &mut ProcessSpec) {
        self.apply_with(spec, None);
    }

    /// [`CliRunner::apply`] for a CLI that also writes `writable` (outside its workspace).
    pub(crate) fn apply_with(&self, spec: &mut ProcessSpec, writable: Option<&Path>) {
        spec.stdout = StdoutMode::Lines {
            max_line_bytes: self.max_line_bytes,
        };
        spec.env_remove.extend(self.env_remove.iter().cloned());
        spec.env.extend(self.env.iter().cloned());
        if let Some(sb) = &self.sandbox {
            sb.wrap(spec, writable);
        }
    }
}
