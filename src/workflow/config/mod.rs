//! Typed configuration from the WORKFLOW.md front matter (spec §5.3, §6): defaults, `$VAR`
//! indirection, `~` expansion for `workspace.root`, coercion and validation with messages that
//! name the key and the bad value (never a secret).
//!
//! The sections are parsed by their owners through the shared typed reader [`section`]:
//! `tracker.*` by the tracker kind's module (registry in `crate::tracker::config`), the agent
//! sections by [`agents`], the core sections here.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_yaml::{Mapping, Value};

pub(crate) mod keys;
mod sandbox;
pub(crate) mod section;
pub mod worker;

pub(crate) use self::keys::edit_distance;
use self::section::{describe, env_reference, Section};
pub use self::worker::WorkerConfig;
pub use crate::agent::config::{
    AgentKind, ClaudeCodeConfig, CliSection, CodexConfig, CopilotConfig, GeminiConfig,
};
pub use crate::host::sandbox::SandboxConfig;
pub use crate::tracker::config::{OwnerType, TrackerConfig, DEFAULT_ENDPOINT};

/// A secret string (token, webhook secret). Its `Debug`/`Display` never print the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }
    /// The secret value; only for putting it on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// `hooks.*` (spec §5.3.4).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HooksConfig {
    /// Runs once when a workspace directory is created; failure is fatal to the creation.
    pub after_create: Option<String>,
    /// Runs before each attempt; failure is fatal to the attempt.
    pub before_run: Option<String>,
    /// Runs after each attempt; failure is logged and ignored.
    pub after_run: Option<String>,
    /// Runs before a workspace is removed; failure is logged and ignored.
    pub before_remove: Option<String>,
    /// Timeout for every hook in ms (default 60000).
    pub timeout_ms: u64,
}

/// Per-issue lifetime spend limits (`agent.max_cost_usd_per_issue`, `agent.max_tokens_per_issue`,
/// `agent.max_turns_per_issue`): an issue over one is parked. `None` means unlimited. The API
/// shows it as is (`budget` in `/api/v1/state`).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Budget {
    /// Agent-reported US dollars (Claude's `total_cost_usd`; Copilot reports none).
    pub max_cost_usd_per_issue: Option<f64>,
    /// Tokens of every kind: input, output, cache reads and cache writes.
    pub max_tokens_per_issue: Option<u64>,
    /// Agent turns (completed or failed), across runs.
    pub max_turns_per_issue: Option<u32>,
}

/// `agent.*` (spec §5.3.5).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    /// Which adapter runs the agent. `None` when absent (a preflight error).
    pub kind: Option<AgentKind>,
    /// Global concurrency cap (default 10).
    pub max_concurrent_agents: u32,
    /// Turns per worker run (default 20).
    pub max_turns: u32,
    /// Cap of the failure backoff in ms (default 300000).
    pub max_retry_backoff_ms: u64,
    /// Per-state caps, keys normalized (trim + lowercase).
    pub max_concurrent_agents_by_state: BTreeMap<String, u32>,
    /// Failure retries stop after this attempt number (default unlimited).
    pub max_attempts: Option<u32>,
    /// Worker runs since the issue last entered an active state before it is parked (default 10).
    pub max_runs_per_issue: u32,
    /// `agent.max_*_per_issue`: lifetime spend limits per issue (default unlimited).
    pub budget: Budget,
    /// `agent.env_remove`: inherited variables agents and hooks do not get.
    pub env_remove: Vec<String>,
    /// `agent.env_keep_only`: when set, the only inherited variables agents and hooks get.
    pub env_keep_only: Option<Vec<String>>,
    /// Variables never passed on whatever the lists say: the one `server.webhook_secret: $VAR`
    /// names.
    pub env_never: Vec<String>,
}

/// `server.*` (spec §13.7, extension).
#[derive(Debug, Clone, PartialEq, Default)]
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
    /// `tracker.*`.
    pub tracker: TrackerConfig,
    /// `polling.interval_ms` (default 30000).
    pub poll_interval_ms: u64,
    /// `workspace.root`, absolute.
    pub workspace_root: PathBuf,
    /// `hooks.*`.
    pub hooks: HooksConfig,
    /// `agent.*`.
    pub agent: AgentConfig,
    /// `claude_code.*`.
    pub claude_code: ClaudeCodeConfig,
    /// `copilot.*`.
    pub copilot: CopilotConfig,
    /// `codex.*`.
    pub codex: CodexConfig,
    /// `gemini.*`.
    pub gemini: GeminiConfig,
    /// `server.*`.
    pub server: ServerConfig,
    /// `state.dir`, absolute: Baton's own directory for `state.json` (default
    /// `$STATE_DIRECTORY`, else `$XDG_STATE_HOME/baton/<hash>` or `~/.local/state/baton/<hash>`,
    /// `<hash>` naming the WORKFLOW.md path).
    pub state_dir: PathBuf,
    /// `state.dir` was not set (a state file at the old default `<workspace.root>/.baton` is
    /// then moved over once).
    pub state_dir_is_default: bool,
    /// `worker.*` (SSH worker hosts).
    pub worker: WorkerConfig,
    /// `sandbox.*` (agents confined with bubblewrap).
    pub sandbox: SandboxConfig,
}

impl ServiceConfig {
    /// The environment policy for agents and hooks (see `host::EnvPolicy`).
    pub fn env_policy(&self) -> crate::host::EnvPolicy {
        let mut remove = self.agent.env_remove.clone();
        remove.extend(self.agent.env_never.iter().cloned());
        let keep_only = self.agent.env_keep_only.as_ref().map(|keep| {
            keep.iter()
                .filter(|k| !self.agent.env_never.contains(k))
                .cloned()
                .collect()
        });
        crate::host::EnvPolicy { remove, keep_only }
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
        match self.agent.kind {
            None => errs.push(ConfigError::new(
                "missing_agent_kind",
                format!("agent.kind is required; set it to {}", AgentKind::EXPECTED),
            )),
            // The agent's section is named like its kind.
            Some(kind) if self.agent_cli().command.trim().is_empty() => {
                let text = format!(
                    "{}.command must be a non-empty shell command",
                    kind.as_str()
                );
                errs.push(ConfigError::new("invalid_config", text));
            }
            Some(_) => {}
        }
        if self.agent.kind == Some(AgentKind::Codex) && !self.worker.ssh_hosts.is_empty() {
            errs.push(ConfigError::new(
                "invalid_config",
                "agent.kind codex talks JSON-RPC over the agent's stdin, which worker.ssh_hosts do not forward; run codex without SSH hosts",
            ));
        }
        errs
    }
}

/// A configuration problem: a class (e.g. `invalid_config`) and a message naming key and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Stable error class, e.g. `invalid_config`, `unsupported_tracker_kind`.
    pub class: &'static str,
    /// Human message naming the key and the bad value (never a secret).
    pub message: String,
}

impl ConfigError {
    /// Build an error.
    pub fn new(class: &'static str, message: impl Into<String>) -> Self {
        ConfigError {
            class,
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.class, self.message)
    }
}

impl std::error::Error for ConfigError {}

/// The environment the config resolves against; injectable for tests.
pub trait ConfigEnv {
    /// An environment variable, `None` when unset.
    fn var(&self, name: &str) -> Option<String>;
    /// The user's home directory for `~`.
    fn home(&self) -> Option<PathBuf>;
    /// The output of `gh auth token` when `gh` is installed and logged in.
    fn gh_auth_token(&self) -> Option<String>;
}

/// An empty environment: no variables, no home, no `gh` (defaults and tests).
pub(crate) struct EmptyEnv;

impl ConfigEnv for EmptyEnv {
    fn var(&self, _: &str) -> Option<String> {
        None
    }
    fn home(&self) -> Option<PathBuf> {
        None
    }
    fn gh_auth_token(&self) -> Option<String> {
        None
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
        // Only when `gh` is on PATH; never through a shell; stdin closed so it cannot prompt.
        let out = crate::host::command_output("gh", &["auth", "token"], GH_AUTH_TOKEN_TIMEOUT)?;
        let tok = String::from_utf8(out).ok()?.trim().to_string();
        (!tok.is_empty()).then_some(tok)
    }
}

/// How long `gh auth token` may take before the fallback gives up.
pub(crate) const GH_AUTH_TOKEN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The result of parsing: the config plus warnings to log once (unknown keys, ignored entries).
#[derive(Debug, Clone)]
pub struct ParsedConfig {
    /// The typed config.
    pub config: ServiceConfig,
    /// Operator-facing warnings (unknown keys with hints, ignored per-state entries).
    pub warnings: Vec<String>,
}

/// Parse the front matter map into a typed config.
///
/// `workflow` is the WORKFLOW.md path (its directory resolves a relative `workspace.root`; the
/// default `state.dir` is named after it).
/// `tracker.*` is parsed by the tracker kind's module, the agent sections by [`agents`].
pub(crate) fn parse_config(
    front_matter: &Mapping,
    workflow: &Path,
    env: &dyn ConfigEnv,
) -> Result<ParsedConfig, ConfigError> {
    let workflow_dir = workflow.parent().unwrap_or(Path::new("/"));
    let section = |name| Section::new(front_matter, name);
    let (tracker, polling, workspace) = (
        section("tracker")?,
        section("polling")?,
        section("workspace")?,
    );
    let (hooks, agent, server) = (section("hooks")?, section("agent")?, section("server")?);
    let state = section("state")?;
    let worker = section("worker")?;
    let sandbox = section(sandbox::SECTION)?;
    let claude_code = section(ClaudeCodeConfig::SECTION)?;
    let copilot = section(CopilotConfig::SECTION)?;
    let (codex, gemini) = (
        section(CodexConfig::SECTION)?,
        section(GeminiConfig::SECTION)?,
    );

    let kind = tracker.string("kind", env).ok().flatten();
    let mut warnings = Vec::new();
    keys::check_unknown_keys(
        front_matter,
        &keys::known_keys(kind.as_deref()),
        &mut warnings,
    );
    let ctx = crate::tracker::config::ParseContext { env, workflow_dir };
    let tracker = crate::tracker::config::parse(&tracker, &ctx)?;
    let poll_interval_ms = polling.positive("interval_ms")?.unwrap_or(30_000);
    let workspace_root = parse_workspace_root(&workspace, workflow_dir, env)?;
    let hooks = parse_hooks(&hooks)?;
    let mut agent = parse_agent(&agent, env, &mut warnings)?;
    if let Some(name) = server
        .raw("webhook_secret")
        .and_then(Value::as_str)
        .and_then(|s| env_reference(s.trim()))
    {
        agent.env_never.push(name.to_string());
    }
    if let Some(keep) = &agent.env_keep_only {
        for must in ["PATH", "HOME"] {
            if !keep.iter().any(|k| k == must) {
                warnings.push(format!(
                    "agent.env_keep_only does not list {must}; agents and hooks start without it"
                ));
            }
        }
    }
    let claude_code = ClaudeCodeConfig::parse(&claude_code, env)?;
    let copilot = CopilotConfig::parse(&copilot, env)?;
    let codex = CodexConfig::parse(&codex, env)?;
    let gemini = GeminiConfig::parse(&gemini, env)?;
    let server = parse_server(&server, env)?;
    let (state_dir, state_dir_is_default) = parse_state_dir(&state, workflow, env)?;
    let worker = WorkerConfig::parse(&worker)?;
    let mut sandbox = sandbox::parse(&sandbox, workflow_dir, env)?;
    sandbox.hidden = vec![workflow_dir.to_path_buf(), state_dir.clone()];
    Ok(ParsedConfig {
        config: ServiceConfig {
            tracker,
            poll_interval_ms,
            workspace_root,
            hooks,
            agent,
            claude_code,
            copilot,
            codex,
            gemini,
            server,
            state_dir,
            state_dir_is_default,
            worker,
            sandbox,
        },
        warnings,
    })
}

/// `workspace.root` (default `<tmp>/baton_workspaces`).
fn parse_workspace_root(
    workspace: &Section<'_>,
    workflow_dir: &Path,
    env: &dyn ConfigEnv,
) -> Result<PathBuf, ConfigError> {
    let root = match workspace.raw("root") {
        None | Some(Value::Null) => std::env::temp_dir().join("baton_workspaces"),
        Some(Value::String(s)) => resolve_path(s, workflow_dir, env).ok_or_else(|| {
            let got = format!("{s:?}");
            workspace.invalid("root", "a path (or $VAR naming a set variable)", &got)
        })?,
        Some(other) => return Err(workspace.invalid("root", "a path string", &describe(other))),
    };
    // Workspace paths are recorded in state.json (JSON strings).
    match root.to_str() {
        Some(_) => Ok(root),
        None => Err(workspace.invalid("root", "a UTF-8 path", &format!("{root:?}"))),
    }
}

/// `state.dir`, expanded like `workspace.root`, and whether it is the default: `$STATE_DIRECTORY`
/// (systemd), else `<base>/<hash of the WORKFLOW.md path>` with base `$XDG_STATE_HOME/baton`,
/// `~/.local/state/baton`, or (neither known) `.baton-state` next to WORKFLOW.md.
fn parse_state_dir(
    state: &Section<'_>,
    workflow: &Path,
    env: &dyn ConfigEnv,
) -> Result<(PathBuf, bool), ConfigError> {
    let workflow_dir = workflow.parent().unwrap_or(Path::new("/"));
    let invalid = |what, got: &str| state.invalid("dir", what, &format!("{got:?}"));
    match state.raw("dir") {
        None | Some(Value::Null) => {
            let set = |k| env.var(k).filter(|v| v.starts_with('/'));
            if let Some(d) = set("STATE_DIRECTORY") {
                let first = d.split(':').next().unwrap_or_default();
                return Ok((normalize_lexically(Path::new(first)), true));
            }
            let base = match (set("XDG_STATE_HOME"), env.home()) {
                (Some(x), _) => PathBuf::from(x).join("baton"),
                (None, Some(h)) => h.join(".local/state/baton"),
                (None, None) => workflow_dir.join(".baton-state"),
            };
            let hash = crate::workflow::loader::fnv1a64(workflow.as_os_str().as_encoded_bytes());
            Ok((
                normalize_lexically(&base.join(format!("{hash:016x}"))),
                true,
            ))
        }
        Some(Value::String(s)) if !s.trim().is_empty() => resolve_path(s, workflow_dir, env)
            .map(|p| (p, false))
            .ok_or_else(|| invalid("a path (or $VAR naming a set variable)", s)),
        Some(Value::String(s)) => Err(invalid("a non-empty path", s)),
        Some(other) => Err(state.invalid("dir", "a path string", &describe(other))),
    }
}

/// `hooks.*`.
fn parse_hooks(hooks: &Section<'_>) -> Result<HooksConfig, ConfigError> {
    Ok(HooksConfig {
        after_create: hooks.script("after_create")?,
        before_run: hooks.script("before_run")?,
        after_run: hooks.script("after_run")?,
        before_remove: hooks.script("before_remove")?,
        timeout_ms: hooks.positive("timeout_ms")?.unwrap_or(60_000),
    })
}

/// `agent.*` (the agent sections themselves are parsed by [`agents`]).
fn parse_agent(
    agent: &Section<'_>,
    env: &dyn ConfigEnv,
    warnings: &mut Vec<String>,
) -> Result<AgentConfig, ConfigError> {
    let kind = match agent.string("kind", env)?.as_deref() {
        None => None,
        Some(k) => Some(
            AgentKind::from_config(k)
                .ok_or_else(|| agent.invalid("kind", AgentKind::EXPECTED, &format!("{k:?}")))?,
        ),
    };
    Ok(AgentConfig {
        kind,
        max_concurrent_agents: agent.positive_u32("max_concurrent_agents")?.unwrap_or(10),
        max_turns: agent.positive_u32("max_turns")?.unwrap_or(20),
        max_retry_backoff_ms: agent.positive("max_retry_backoff_ms")?.unwrap_or(300_000),
        max_concurrent_agents_by_state: parse_by_state(agent, warnings)?,
        max_attempts: agent.positive_u32("max_attempts")?,
        max_runs_per_issue: agent.positive_u32("max_runs_per_issue")?.unwrap_or(10),
        budget: Budget {
            max_cost_usd_per_issue: agent.positive_number("max_cost_usd_per_issue")?,
            max_tokens_per_issue: agent.positive("max_tokens_per_issue")?,
            max_turns_per_issue: agent.positive_u32("max_turns_per_issue")?,
        },
        env_remove: env_names(agent, "env_remove")?.unwrap_or_default(),
        env_keep_only: env_names(agent, "env_keep_only")?,
        env_never: Vec::new(),
    })
}

/// A list of environment variable names: non-empty, without `=` or NUL.
fn env_names(agent: &Section<'_>, key: &str) -> Result<Option<Vec<String>>, ConfigError> {
    let Some(names) = agent.string_list(key)? else {
        return Ok(None);
    };
    if let Some(bad) = names
        .iter()
        .find(|n| n.is_empty() || n.contains(['=', '\0']))
    {
        return Err(agent.invalid(
            key,
            "a list of environment variable names (non-empty, without `=`)",
            &format!("{bad:?}"),
        ));
    }
    Ok(Some(names))
}

/// `agent.max_concurrent_agents_by_state`: keys normalized; bad entries are warned about and
/// ignored.
fn parse_by_state(
    agent: &Section<'_>,
    warnings: &mut Vec<String>,
) -> Result<BTreeMap<String, u32>, ConfigError> {
    const KEY: &str = "max_concurrent_agents_by_state";
    let mut by_state = BTreeMap::new();
    let m = match agent.raw(KEY) {
        None | Some(Value::Null) => return Ok(by_state),
        Some(Value::Mapping(m)) => m,
        Some(other) => {
            let expected = "a map of state name to positive integer";
            return Err(agent.invalid(KEY, expected, &describe(other)));
        }
    };
    for (k, v) in m {
        let key = match k {
            Value::String(s) if !s.trim().is_empty() => crate::model::normalize_name(s),
            other => {
                warnings.push(format!(
                    "agent.{KEY}: ignoring entry with key {}: keys must be state names",
                    describe(other)
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

/// `server.*`.
fn parse_server(server: &Section<'_>, env: &dyn ConfigEnv) -> Result<ServerConfig, ConfigError> {
    let port =
        match server.uint("port")? {
            None => None,
            Some(p) => Some(u16::try_from(p).map_err(|_| {
                server.invalid("port", "an integer from 0 to 65535", &p.to_string())
            })?),
        };
    Ok(ServerConfig {
        port,
        host: server.plain_string("host")?,
        webhook_secret: server.secret("webhook_secret", env)?.map(|(s, _)| s),
    })
}

/// Resolve a path setting (`workspace.root`; also for a tracker kind's path, e.g. a board
/// directory): `$VAR` (whole value) or a leading `$VAR/…`, `~`/`~/…`, then relative to the
/// workflow dir. Returns `None` when a referenced variable is unset or empty.
pub(crate) fn resolve_path(raw: &str, workflow_dir: &Path, env: &dyn ConfigEnv) -> Option<PathBuf> {
    let raw = raw.trim();
    let expanded: String = if let Some(name) = env_reference(raw) {
        env.var(name).filter(|v| !v.is_empty())?
    } else if let Some(rest) = raw.strip_prefix('$') {
        // `$VAR/sub/dir`: expand the leading variable only.
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let (name, tail) = rest.split_at(end);
        let val = env.var(name).filter(|v| !v.is_empty())?;
        format!("{val}{tail}")
    } else {
        raw.to_string()
    };
    let path = if expanded == "~" {
        env.home()?
    } else if let Some(rest) = expanded.strip_prefix("~/") {
        env.home()?.join(rest)
    } else {
        PathBuf::from(&expanded)
    };
    let abs = if path.is_absolute() {
        path
    } else {
        workflow_dir.join(path)
    };
    Some(normalize_lexically(&abs))
}

/// Remove `.` and `..` components without touching the filesystem.
pub(crate) fn normalize_lexically(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod budget_tests {
    use super::*;

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
