//! Typed configuration from the WORKFLOW.md front matter (spec §5.3, §6): the service config and
//! the sections no other module owns (ARCHITECTURE.md says who reads which).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_yaml::{Mapping, Value};

use crate::config::{describe, env_reference, normalize_lexically, FrontMatter, Section};
use crate::host::sandbox::Sandbox;
use crate::orchestrator::rules::SHUTDOWN_GRACE_EXTRA_MS;
use crate::orchestrator::{Budget, Policy};

pub use crate::agent::config::{
    AgentKind, ClaudeCodeConfig, CliSection, CodexConfig, CopilotConfig, GeminiConfig,
};
pub use crate::config::{ConfigEnv, ConfigError, Secret};
pub use crate::host::config::WorkerConfig;
pub use crate::host::sandbox::SandboxConfig;
pub use crate::tracker::config::{OwnerType, TrackerConfig, DEFAULT_ENDPOINT};
pub use crate::workspace::hooks::HooksConfig;

/// `agent.*` (spec §5.3.5).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct AgentConfig {
    /// `None` when absent (a preflight error).
    pub kind: Option<AgentKind>,
    pub max_concurrent_agents: u32,
    /// Turns per worker run.
    pub max_turns: u32,
    pub max_retry_backoff_ms: u64,
    /// Per-state caps, keys normalized (trim + lowercase).
    #[serde(skip)]
    pub max_concurrent_agents_by_state: BTreeMap<String, u32>,
    /// Failure retries stop after this attempt number (default unlimited).
    pub max_attempts: Option<u32>,
    /// Worker runs since the issue last entered an active state before it is parked.
    pub max_runs_per_issue: u32,
    /// `agent.max_*_per_issue`: lifetime spend limits per issue (default unlimited).
    #[serde(skip)]
    pub budget: Budget,
    /// `agent.env_remove`: inherited variables agents and hooks do not get (and the one
    /// `server.webhook_secret: $VAR` names, whatever the lists say).
    pub env_remove: Vec<String>,
    /// `agent.env_keep_only`: when set, the only inherited variables agents and hooks get.
    pub env_keep_only: Option<Vec<String>>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            kind: None,
            max_concurrent_agents: 10,
            max_turns: 20,
            max_retry_backoff_ms: 300_000,
            max_concurrent_agents_by_state: BTreeMap::new(),
            max_attempts: None,
            max_runs_per_issue: 10,
            budget: Budget::default(),
            env_remove: Vec::new(),
            env_keep_only: None,
        }
    }
}

/// `server.*` (spec §13.7, extension).
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default)]
pub struct ServerConfig {
    /// Port for the dashboard/API; `None` = disabled; `0` = ephemeral. `--port` wins.
    pub port: Option<u16>,
    /// Bind address (default `127.0.0.1`). `--bind` wins.
    pub host: Option<String>,
    /// Secret for `X-Hub-Signature-256` on the webhook route; `None` disables the route.
    pub webhook_secret: Option<Secret>,
}

/// The whole typed configuration (spec §4.1.3).
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceConfig {
    pub tracker: TrackerConfig,
    /// `polling.interval_ms`.
    pub poll_interval_ms: u64,
    /// `workspace.root`, absolute.
    pub workspace_root: PathBuf,
    pub hooks: HooksConfig,
    pub agent: AgentConfig,
    pub claude_code: ClaudeCodeConfig,
    pub copilot: CopilotConfig,
    pub codex: CodexConfig,
    pub gemini: GeminiConfig,
    pub server: ServerConfig,
    /// `state.dir`, absolute: Baton's own directory for `state.json` (default: `parse_state_dir`).
    pub state_dir: PathBuf,
    /// `state.dir` was not set (a state file at the old default `<workspace.root>/.baton` is
    /// then moved over once).
    pub state_dir_is_default: bool,
    /// `worker.*` (SSH worker hosts).
    pub worker: WorkerConfig,
    /// `sandbox.*` (agents confined with bubblewrap).
    pub sandbox: SandboxConfig,
}

impl Default for ServiceConfig {
    /// The config of a WORKFLOW.md that sets nothing, except `state_dir` (empty here: its default
    /// depends on the environment and the WORKFLOW.md path).
    fn default() -> Self {
        ServiceConfig {
            tracker: TrackerConfig::default(),
            poll_interval_ms: 30_000,
            workspace_root: std::env::temp_dir().join("baton_workspaces"),
            hooks: HooksConfig::default(),
            agent: AgentConfig::default(),
            claude_code: ClaudeCodeConfig::default(),
            copilot: CopilotConfig::default(),
            codex: CodexConfig::default(),
            gemini: GeminiConfig::default(),
            server: ServerConfig::default(),
            state_dir: PathBuf::new(),
            state_dir_is_default: true,
            worker: WorkerConfig::default(),
            sandbox: SandboxConfig::default(),
        }
    }
}

impl Default for Policy {
    /// The policy of a WORKFLOW.md that sets nothing.
    fn default() -> Self {
        ServiceConfig::default().policy()
    }
}

impl ServiceConfig {
    /// The scheduling slice of the config.
    pub fn policy(&self) -> Policy {
        Policy {
            poll_interval_ms: self.poll_interval_ms,
            max_concurrent_agents: self.agent.max_concurrent_agents,
            max_concurrent_agents_by_state: self.agent.max_concurrent_agents_by_state.clone(),
            max_retry_backoff_ms: self.agent.max_retry_backoff_ms,
            max_attempts: self.agent.max_attempts,
            max_runs_per_issue: self.agent.max_runs_per_issue,
            stall_timeout_ms: self.agent_cli().stall_timeout_ms,
            active_states: self.tracker.active_states.clone(),
            terminal_states: self.tracker.terminal_states.clone(),
            required_labels: self.tracker.required_labels.clone(),
            excluded_labels: self.tracker.excluded_labels.clone(),
            repos: self.tracker.repos.clone(),
            workspace_root: self.workspace_root.clone(),
            shutdown_grace_ms: (self.hooks.timeout_ms).saturating_add(SHUTDOWN_GRACE_EXTRA_MS),
            budget: self.agent.budget,
            ssh_hosts: self.worker.ssh_hosts.clone(),
            max_concurrent_agents_per_host: self.worker.max_concurrent_agents_per_host,
            orphan_grace_ms: self.worker.orphan_grace_ms,
            agent: self.agent.kind.map_or("", |k| k.as_str()).to_string(),
            budget_share: self.tracker.budget_share,
        }
    }

    /// The sandbox the agents run in; `None` with `sandbox.kind: none`.
    pub fn agent_sandbox(&self) -> Option<Arc<Sandbox>> {
        let home = self.agent.kind?.cli_home();
        let command = &self.agent_cli().command;
        let cfg = &self.sandbox;
        (cfg.bubblewrap).then(|| Arc::new(Sandbox::new(cfg.clone(), home, command)))
    }

    /// The environment policy for agents and hooks (see `host::EnvPolicy`).
    pub fn env_policy(&self) -> crate::host::EnvPolicy {
        crate::host::EnvPolicy {
            remove: self.agent.env_remove.clone(),
            keep_only: self.agent.env_keep_only.clone(),
        }
    }

    /// The CLI keys (command, timeouts) of the section `agent.kind` selects (Claude's when unset;
    /// preflight rejects that).
    pub fn agent_cli(&self) -> &CliSection {
        match self.agent.kind {
            Some(AgentKind::Copilot) => &self.copilot.cli,
            Some(AgentKind::Codex) => &self.codex.cli,
            Some(AgentKind::Gemini) => &self.gemini.cli,
            Some(AgentKind::ClaudeCode) | None => &self.claude_code.cli,
        }
    }

    /// Dispatch preflight validation (spec §6.3) of the parts that need no network.
    /// Returns every problem, each naming the key.
    pub fn preflight_errors(&self) -> Vec<ConfigError> {
        let mut errs = crate::tracker::config::preflight(&self.tracker);
        // A blank agent command never parses; the kind must be chosen.
        if self.agent.kind.is_none() {
            let text = format!("agent.kind is required; set it to {}", AgentKind::EXPECTED);
            errs.push(ConfigError::new("missing_agent_kind", text));
        }
        errs
    }
}

/// The real process environment.
pub(crate) struct ProcessEnv;

impl ConfigEnv for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
    fn home(&self) -> Option<PathBuf> {
        std::env::var_os("HOME").map(PathBuf::from)
    }
    fn gh_auth_token(&self) -> Option<String> {
        // Only when `gh` is on PATH; never through a shell; stdin closed so it cannot prompt;
        // given up after 5 s.
        let timeout = std::time::Duration::from_secs(5);
        let out = crate::host::command_output("gh", &["auth", "token"], timeout)?;
        let tok = String::from_utf8(out).ok()?.trim().to_string();
        (!tok.is_empty()).then_some(tok)
    }
}

/// The result of parsing: the config plus warnings to log once (unknown keys, ignored entries).
#[derive(Debug, Clone)]
pub struct ParsedConfig {
    pub config: ServiceConfig,
    /// Operator-facing warnings (unknown keys with hints, ignored per-state entries).
    pub warnings: Vec<String>,
}

/// Parse the front matter map into a typed config.
///
/// `workflow` is the WORKFLOW.md path (its directory resolves relative paths; the default
/// `state.dir` is named after it).
pub(crate) fn parse_config(
    front_matter: &Mapping,
    workflow: &Path,
    env: &dyn ConfigEnv,
) -> Result<ParsedConfig, ConfigError> {
    let workflow_dir = workflow.parent().unwrap_or(Path::new("/"));
    let fm = FrontMatter::new(front_matter, env, workflow_dir);
    let d = ServiceConfig::default();
    let mut warnings = Vec::new();
    let tracker = crate::tracker::config::parse(&fm.section("tracker")?)?;
    let poll: Option<u64> = fm.section("polling")?.get("interval_ms")?;
    let workspace = fm.section("workspace")?;
    let workspace_root = workspace.path("root")?.unwrap_or(d.workspace_root);
    if workspace_root.to_str().is_none() {
        // Workspace paths are recorded in state.json (JSON strings).
        let got = format!("{workspace_root:?}");
        return Err(workspace.invalid("root", "a UTF-8 path", &got));
    }
    let mut hooks: HooksConfig = fm.section("hooks")?.read()?;
    for script in [
        &mut hooks.after_create,
        &mut hooks.before_run,
        &mut hooks.after_run,
        &mut hooks.before_remove,
    ] {
        script.take_if(|s| s.trim().is_empty());
    }
    let mut agent = parse_agent(&fm.section("agent")?, &mut warnings)?;
    let server = fm.section("server")?;
    let secret = server.raw("webhook_secret").and_then(Value::as_str);
    if let Some(never) = secret.and_then(|s| env_reference(s.trim())) {
        agent.env_remove.push(never.into());
        if let Some(keep) = &mut agent.env_keep_only {
            keep.retain(|k| k != never);
        }
    }
    let (state_dir, state_dir_is_default) = parse_state_dir(&fm.section("state")?, workflow, env)?;
    let hidden = vec![workflow_dir.to_path_buf(), state_dir.clone()];
    let config = ServiceConfig {
        tracker,
        poll_interval_ms: poll.unwrap_or(d.poll_interval_ms),
        workspace_root,
        hooks,
        agent,
        claude_code: ClaudeCodeConfig::parse(&fm.section("claude_code")?)?,
        copilot: CopilotConfig::parse(&fm.section("copilot")?)?,
        codex: CodexConfig::parse(&fm.section("codex")?)?,
        gemini: GeminiConfig::parse(&fm.section("gemini")?)?,
        server: server.read()?,
        state_dir,
        state_dir_is_default,
        worker: WorkerConfig::parse(&fm.section("worker")?)?,
        sandbox: crate::host::config::sandbox(&fm.section("sandbox")?, hidden)?,
    };
    warnings.splice(0..0, fm.unknown_keys());
    Ok(ParsedConfig { config, warnings })
}

/// `state.dir`, expanded like `workspace.root`, and whether it is the default: `$STATE_DIRECTORY`
/// (systemd), else `<base>/<hash of the WORKFLOW.md path>` with base `$XDG_STATE_HOME/baton`,
/// `~/.local/state/baton`, or (neither known) `.baton-state` next to WORKFLOW.md.
fn parse_state_dir(
    state: &Section<'_>,
    workflow: &Path,
    env: &dyn ConfigEnv,
) -> Result<(PathBuf, bool), ConfigError> {
    if let Some(s) = state
        .raw("dir")
        .and_then(Value::as_str)
        .filter(|s| s.trim().is_empty())
    {
        return Err(state.invalid("dir", "a non-empty path", &format!("{s:?}")));
    }
    if let Some(dir) = state.path("dir")? {
        return Ok((dir, false));
    }
    let set = |k| env.var(k).filter(|v| v.starts_with('/'));
    if let Some(d) = set("STATE_DIRECTORY") {
        let first = d.split(':').next().unwrap_or_default();
        return Ok((normalize_lexically(Path::new(first)), true));
    }
    let base = match (set("XDG_STATE_HOME"), env.home()) {
        (Some(x), _) => PathBuf::from(x).join("baton"),
        (None, Some(h)) => h.join(".local/state/baton"),
        (None, None) => workflow
            .parent()
            .unwrap_or(Path::new("/"))
            .join(".baton-state"),
    };
    let hash = crate::workflow::loader::fnv1a64(workflow.as_os_str().as_encoded_bytes());
    Ok((
        normalize_lexically(&base.join(format!("{hash:016x}"))),
        true,
    ))
}

/// `agent.*` with its spend limits; the agent sections themselves are `crate::agent::config`'s.
fn parse_agent(s: &Section<'_>, warnings: &mut Vec<String>) -> Result<AgentConfig, ConfigError> {
    let mut agent: AgentConfig = s.read()?;
    agent.budget = s.read()?;
    agent.max_concurrent_agents_by_state = parse_by_state(s, warnings)?;
    let keep_only = agent.env_keep_only.as_deref().unwrap_or_default();
    for (key, names) in [
        ("env_remove", &agent.env_remove[..]),
        ("env_keep_only", keep_only),
    ] {
        if let Some(bad) = names
            .iter()
            .find(|n| n.is_empty() || n.contains(['=', '\0']))
        {
            let want = "a list of environment variable names (non-empty, without `=`)";
            return Err(s.invalid(key, want, &format!("{bad:?}")));
        }
    }
    for must in ["PATH", "HOME"] {
        if agent.env_keep_only.is_some() && !keep_only.iter().any(|k| k == must) {
            warnings.push(format!(
                "agent.env_keep_only does not list {must}; agents and hooks start without it"
            ));
        }
    }
    Ok(agent)
}

/// `agent.max_concurrent_agents_by_state`: keys normalized; bad entries are warned about and
/// ignored.
fn parse_by_state(
    agent: &Section<'_>,
    warnings: &mut Vec<String>,
) -> Result<BTreeMap<String, u32>, ConfigError> {
    const KEY: &str = "max_concurrent_agents_by_state";
    let m = match agent.raw(KEY) {
        None => return Ok(BTreeMap::new()),
        Some(Value::Mapping(m)) => m,
        Some(other) => {
            let expected = "a map of state name to positive integer";
            return Err(agent.invalid(KEY, expected, &describe(other)));
        }
    };
    let mut by_state = BTreeMap::new();
    for (k, v) in m {
        // Not `as_str`: it strips a tag, and a tagged key (`!x Todo`) is no state name.
        let key = match k {
            Value::String(s) if !s.trim().is_empty() => crate::model::normalize_name(s),
            other => {
                let k = describe(other);
                warnings.push(format!(
                    "agent.{KEY}: ignoring entry with key {k}: keys must be state names"
                ));
                continue;
            }
        };
        match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(n) if n >= 1 => {
                by_state.insert(key, n);
            }
            _ => warnings.push(format!(
                "agent.{KEY}.{key}: ignoring {}: must be a positive integer",
                describe(v)
            )),
        }
    }
    Ok(by_state)
}

#[cfg(test)]
mod budget_tests {
    use super::*;
    use crate::config::test_env::EmptyEnv;

    fn agent(yaml: &str) -> Result<AgentConfig, ConfigError> {
        let m: Mapping = serde_yaml::from_str(&format!("agent:\n{yaml}")).unwrap();
        parse_config(&m, Path::new("/"), &EmptyEnv).map(|p| p.config.agent)
    }

    #[test]
    fn budget_keys_are_optional_and_typed() {
        let a = agent("  kind: claude_code\n").unwrap();
        assert_eq!(
            (
                a.budget.max_cost_usd_per_issue,
                a.budget.max_tokens_per_issue,
                a.budget.max_turns_per_issue
            ),
            (None, None, None)
        );
        let a = agent(
            "  max_cost_usd_per_issue: 0.25\n  max_tokens_per_issue: 2000000\n  max_turns_per_issue: 40\n",
        )
        .unwrap();
        assert_eq!(a.budget.max_cost_usd_per_issue, Some(0.25));
        assert_eq!(a.budget.max_tokens_per_issue, Some(2_000_000));
        assert_eq!(a.budget.max_turns_per_issue, Some(40));
        assert_eq!(
            agent("  max_cost_usd_per_issue: 3\n")
                .unwrap()
                .budget
                .max_cost_usd_per_issue,
            Some(3.0)
        );
    }

    #[test]
    fn bad_budget_values_name_the_key_and_the_value() {
        for (yaml, message) in [
            (
                "  max_cost_usd_per_issue: 0\n",
                "agent.max_cost_usd_per_issue must be a positive number, got 0",
            ),
            (
                "  max_cost_usd_per_issue: -1.5\n",
                "agent.max_cost_usd_per_issue must be a positive number, got -1.5",
            ),
            (
                "  max_cost_usd_per_issue: lots\n",
                "agent.max_cost_usd_per_issue must be a positive number, got \"lots\"",
            ),
            (
                "  max_cost_usd_per_issue: .nan\n",
                "agent.max_cost_usd_per_issue must be a positive number, got .nan",
            ),
            (
                "  max_tokens_per_issue: 1.5\n",
                "agent.max_tokens_per_issue must be a positive integer, got 1.5",
            ),
            (
                "  max_turns_per_issue: 0\n",
                "agent.max_turns_per_issue must be a positive integer, got 0",
            ),
            (
                "  max_turns_per_issue: 99999999999\n",
                "agent.max_turns_per_issue must be a positive integer, got 99999999999",
            ),
        ] {
            let e = agent(yaml).unwrap_err();
            assert_eq!(e.class, "invalid_config", "{yaml}");
            assert_eq!(e.message, message, "{yaml}");
        }
    }
}
