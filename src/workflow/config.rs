//! Typed configuration from the WORKFLOW.md front matter (spec §5.3, §6): defaults, `$VAR`
//! indirection, `~` expansion for `workspace.root`, coercion and validation with messages that
//! name the key and the bad value (never a secret).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_yaml::{Mapping, Value};

/// Default GitHub GraphQL endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://api.github.com/graphql";

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

/// Where the tracker token came from (for operator messages; never the value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenSource {
    /// A literal in WORKFLOW.md.
    Literal,
    /// `$NAME` in WORKFLOW.md.
    EnvReference,
    /// The `GITHUB_TOKEN` environment variable (key omitted).
    GithubTokenEnv,
    /// `gh auth token`.
    GhCli,
}

/// `tracker.owner_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerType {
    /// `organization` (default): resolved with `organization(login:)`.
    Organization,
    /// `user`: resolved with `user(login:)`.
    User,
}

/// `agent.kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentKind {
    /// Claude Code CLI (`claude -p --output-format stream-json`).
    ClaudeCode,
    /// GitHub Copilot CLI (`copilot -p --output-format json`).
    Copilot,
}

impl AgentKind {
    /// The config spelling (`claude_code` / `copilot`).
    pub fn as_str(self) -> &'static str {
        match self {
            AgentKind::ClaudeCode => "claude_code",
            AgentKind::Copilot => "copilot",
        }
    }
}

/// `tracker.*` (spec §5.3.1).
#[derive(Debug, Clone, PartialEq)]
pub struct TrackerConfig {
    /// `tracker.kind`; only `github_projects` is supported. `None` when absent.
    pub kind: Option<String>,
    /// GraphQL endpoint URL (never rewritten).
    pub endpoint: String,
    /// Resolved token (`$VAR`, `GITHUB_TOKEN`, then `gh auth token`); `None` when missing.
    pub token: Option<Secret>,
    /// Where the token came from.
    pub token_source: Option<TokenSource>,
    /// Organization or user login owning the project.
    pub owner: Option<String>,
    /// How to resolve `owner`.
    pub owner_type: OwnerType,
    /// The project's number.
    pub project_number: Option<u64>,
    /// Name of the single-select Status field (default `Status`).
    pub status_field: String,
    /// Optional single-select field whose option position is the priority.
    pub priority_field: Option<String>,
    /// `owner/name` repositories allowed (empty = all).
    pub repos: Vec<String>,
    /// Labels an issue must carry to dispatch/continue.
    pub required_labels: Vec<String>,
    /// Labels that prevent dispatch/continuation.
    pub excluded_labels: Vec<String>,
    /// Active Status names (default `Todo`, `In Progress`).
    pub active_states: Vec<String>,
    /// Terminal Status names (default `Done`).
    pub terminal_states: Vec<String>,
    /// Items per page (default 50, max 100).
    pub page_size: u32,
    /// Use `items(query:)` to filter by status server-side (default off).
    pub server_side_filter: bool,
    /// Network timeout per request in ms (default 30000).
    pub timeout_ms: u64,
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
}

/// `claude_code.*` (spec §5.3.6).
#[derive(Debug, Clone, PartialEq)]
pub struct ClaudeCodeConfig {
    /// Shell command launching the CLI (default `claude`); never rewritten.
    pub command: String,
    /// `--model`.
    pub model: Option<String>,
    /// `--permission-mode` (default `acceptEdits`), passed through.
    pub permission_mode: String,
    /// `--allowedTools` entries.
    pub allowed_tools: Vec<String>,
    /// `--disallowedTools` entries.
    pub disallowed_tools: Vec<String>,
    /// `--append-system-prompt`.
    pub append_system_prompt: Option<String>,
    /// Extra CLI arguments, appended verbatim.
    pub extra_args: Vec<String>,
    /// Bound of one turn in ms (default 3600000).
    pub turn_timeout_ms: u64,
    /// Inactivity bound in ms (default 300000); `<= 0` disables stall detection.
    pub stall_timeout_ms: i64,
}

/// `copilot.*` (spec §5.3.7).
#[derive(Debug, Clone, PartialEq)]
pub struct CopilotConfig {
    /// Shell command launching the CLI (default `copilot`); never rewritten.
    pub command: String,
    /// `--model`.
    pub model: Option<String>,
    /// `--allow-all-tools` (default false; an explicit operator choice).
    pub allow_all_tools: bool,
    /// Repeated `--allow-tool`.
    pub allow_tools: Vec<String>,
    /// Repeated `--deny-tool`.
    pub deny_tools: Vec<String>,
    /// Extra CLI arguments, appended verbatim.
    pub extra_args: Vec<String>,
    /// Bound of one turn in ms (default 3600000).
    pub turn_timeout_ms: u64,
    /// Inactivity bound in ms (default 300000); `<= 0` disables stall detection.
    pub stall_timeout_ms: i64,
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
    /// `server.*`.
    pub server: ServerConfig,
}

/// Turn and stall timeouts of the selected runner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunnerTimeouts {
    /// Bound of one turn in ms.
    pub turn_timeout_ms: u64,
    /// Inactivity bound in ms; `<= 0` disables stall detection.
    pub stall_timeout_ms: i64,
}

impl ServiceConfig {
    /// The timeouts of the runner selected by `agent.kind` (Claude's when unset).
    pub fn runner_timeouts(&self) -> RunnerTimeouts {
        match self.agent.kind {
            Some(AgentKind::Copilot) => RunnerTimeouts {
                turn_timeout_ms: self.copilot.turn_timeout_ms,
                stall_timeout_ms: self.copilot.stall_timeout_ms,
            },
            _ => RunnerTimeouts {
                turn_timeout_ms: self.claude_code.turn_timeout_ms,
                stall_timeout_ms: self.claude_code.stall_timeout_ms,
            },
        }
    }

    /// Dispatch preflight validation (spec §6.3) of the parts that need no network.
    /// Returns every problem, each naming the key.
    pub fn preflight_errors(&self) -> Vec<ConfigError> {
        let mut errs = Vec::new();
        match self.tracker.kind.as_deref() {
            None => errs.push(ConfigError::new(
                "missing_tracker_kind",
                "tracker.kind is required; set it to github_projects",
            )),
            Some("github_projects") => {}
            Some(other) => errs.push(ConfigError::new(
                "unsupported_tracker_kind",
                format!("tracker.kind must be github_projects, got {other:?}"),
            )),
        }
        if self.tracker.token.is_none() {
            errs.push(ConfigError::new(
                "missing_tracker_token",
                "tracker.token is missing: set tracker.token (literal or $VAR), export GITHUB_TOKEN, or run `gh auth login`",
            ));
        }
        if self.tracker.owner.is_none() {
            errs.push(ConfigError::new(
                "missing_tracker_project",
                "tracker.owner is required (organization or user login owning the project)",
            ));
        }
        if self.tracker.project_number.is_none() {
            errs.push(ConfigError::new(
                "missing_tracker_project",
                "tracker.project_number is required (the number in the project's URL)",
            ));
        }
        match self.agent.kind {
            None => errs.push(ConfigError::new(
                "missing_agent_kind",
                "agent.kind is required; set it to claude_code or copilot",
            )),
            Some(AgentKind::ClaudeCode) if self.claude_code.command.trim().is_empty() => {
                errs.push(ConfigError::new(
                    "invalid_config",
                    "claude_code.command must be a non-empty shell command",
                ))
            }
            Some(AgentKind::Copilot) if self.copilot.command.trim().is_empty() => {
                errs.push(ConfigError::new(
                    "invalid_config",
                    "copilot.command must be a non-empty shell command",
                ))
            }
            _ => {}
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

/// The real process environment.
pub struct ProcessEnv;

impl ConfigEnv for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
    fn home(&self) -> Option<PathBuf> {
        std::env::var_os("HOME").map(PathBuf::from)
    }
    fn gh_auth_token(&self) -> Option<String> {
        // Only when `gh` is on PATH; never through a shell; stdin closed so it cannot prompt.
        let out = std::process::Command::new("gh")
            .args(["auth", "token"])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        let tok = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (!tok.is_empty()).then_some(tok)
    }
}

/// Every key Baton understands, per section, for "did you mean" hints.
pub const KNOWN_KEYS: &[(&str, &[&str])] = &[
    (
        "tracker",
        &[
            "kind",
            "endpoint",
            "token",
            "owner",
            "owner_type",
            "project_number",
            "status_field",
            "priority_field",
            "repos",
            "required_labels",
            "excluded_labels",
            "active_states",
            "terminal_states",
            "page_size",
            "server_side_filter",
            "timeout_ms",
        ],
    ),
    ("polling", &["interval_ms"]),
    ("workspace", &["root"]),
    (
        "hooks",
        &[
            "after_create",
            "before_run",
            "after_run",
            "before_remove",
            "timeout_ms",
        ],
    ),
    (
        "agent",
        &[
            "kind",
            "max_concurrent_agents",
            "max_turns",
            "max_retry_backoff_ms",
            "max_concurrent_agents_by_state",
            "max_attempts",
            "max_runs_per_issue",
        ],
    ),
    (
        "claude_code",
        &[
            "command",
            "model",
            "permission_mode",
            "allowed_tools",
            "disallowed_tools",
            "append_system_prompt",
            "extra_args",
            "turn_timeout_ms",
            "stall_timeout_ms",
        ],
    ),
    (
        "copilot",
        &[
            "command",
            "model",
            "allow_all_tools",
            "allow_tools",
            "deny_tools",
            "extra_args",
            "turn_timeout_ms",
            "stall_timeout_ms",
        ],
    ),
    ("server", &["port", "host", "webhook_secret"]),
];

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
/// `workflow_dir` is the directory holding WORKFLOW.md (for a relative `workspace.root`).
pub fn parse_config(
    front_matter: &Mapping,
    workflow_dir: &Path,
    env: &dyn ConfigEnv,
) -> Result<ParsedConfig, ConfigError> {
    let mut warnings = Vec::new();
    check_unknown_keys(front_matter, &mut warnings);

    let tracker = Section::new(front_matter, "tracker")?;
    let polling = Section::new(front_matter, "polling")?;
    let workspace = Section::new(front_matter, "workspace")?;
    let hooks = Section::new(front_matter, "hooks")?;
    let agent = Section::new(front_matter, "agent")?;
    let claude = Section::new(front_matter, "claude_code")?;
    let copilot = Section::new(front_matter, "copilot")?;
    let server = Section::new(front_matter, "server")?;

    // tracker
    let (token, token_source) = match tracker.secret("token", env)? {
        Some((tok, src)) => (Some(tok), Some(src)),
        None if tracker.is_set("token") => (None, None),
        None => match env.var("GITHUB_TOKEN").filter(|v| !v.is_empty()) {
            Some(v) => (Some(Secret::new(v)), Some(TokenSource::GithubTokenEnv)),
            None => match env.gh_auth_token() {
                Some(v) => (Some(Secret::new(v)), Some(TokenSource::GhCli)),
                None => (None, None),
            },
        },
    };
    let owner_type = match tracker.string("owner_type", env)?.as_deref() {
        None | Some("organization") | Some("org") => OwnerType::Organization,
        Some("user") => OwnerType::User,
        Some(other) => {
            return Err(tracker.invalid(
                "owner_type",
                "organization or user",
                &format!("{other:?}"),
            ))
        }
    };
    let page_size = tracker.uint("page_size")?.unwrap_or(50);
    if !(1..=100).contains(&page_size) {
        return Err(tracker.invalid(
            "page_size",
            "an integer from 1 to 100",
            &page_size.to_string(),
        ));
    }
    let tracker_cfg = TrackerConfig {
        kind: tracker.string("kind", env)?,
        endpoint: tracker
            .plain_string("endpoint")?
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string()),
        token,
        token_source,
        owner: tracker.string("owner", env)?,
        owner_type,
        project_number: match tracker.uint("project_number")? {
            Some(0) => return Err(tracker.invalid("project_number", "a positive integer", "0")),
            other => other,
        },
        status_field: tracker
            .string("status_field", env)?
            .unwrap_or_else(|| "Status".into()),
        priority_field: tracker.string("priority_field", env)?,
        repos: tracker.string_list("repos")?.unwrap_or_default(),
        required_labels: tracker.string_list("required_labels")?.unwrap_or_default(),
        excluded_labels: tracker.string_list("excluded_labels")?.unwrap_or_default(),
        active_states: tracker
            .string_list("active_states")?
            .unwrap_or_else(|| vec!["Todo".into(), "In Progress".into()]),
        terminal_states: tracker
            .string_list("terminal_states")?
            .unwrap_or_else(|| vec!["Done".into()]),
        page_size: page_size as u32,
        server_side_filter: tracker.boolean("server_side_filter")?.unwrap_or(false),
        timeout_ms: tracker.positive("timeout_ms")?.unwrap_or(30_000),
    };
    for repo in &tracker_cfg.repos {
        let parts: Vec<&str> = repo.split('/').collect();
        if parts.len() != 2 || parts.iter().any(|p| p.trim().is_empty()) {
            return Err(tracker.invalid(
                "repos",
                "a list of owner/name strings",
                &format!("{repo:?}"),
            ));
        }
    }

    // polling
    let poll_interval_ms = polling.positive("interval_ms")?.unwrap_or(30_000);

    // workspace
    let workspace_root = match workspace.raw("root") {
        None | Some(Value::Null) => std::env::temp_dir().join("baton_workspaces"),
        Some(Value::String(s)) => resolve_path(s, workflow_dir, env).ok_or_else(|| {
            workspace.invalid(
                "root",
                "a path (or $VAR naming a set variable)",
                &format!("{s:?}"),
            )
        })?,
        Some(other) => return Err(workspace.invalid("root", "a path string", &describe(other))),
    };

    // hooks
    let hooks_cfg = HooksConfig {
        after_create: hooks.script("after_create")?,
        before_run: hooks.script("before_run")?,
        after_run: hooks.script("after_run")?,
        before_remove: hooks.script("before_remove")?,
        timeout_ms: hooks.positive("timeout_ms")?.unwrap_or(60_000),
    };

    // agent
    let kind = match agent.string("kind", env)?.as_deref() {
        None => None,
        Some("claude_code") => Some(AgentKind::ClaudeCode),
        Some("copilot") => Some(AgentKind::Copilot),
        Some(other) => {
            return Err(agent.invalid("kind", "claude_code or copilot", &format!("{other:?}")))
        }
    };
    let mut by_state = BTreeMap::new();
    match agent.raw("max_concurrent_agents_by_state") {
        None | Some(Value::Null) => {}
        Some(Value::Mapping(m)) => {
            for (k, v) in m {
                let key = match k {
                    Value::String(s) if !s.trim().is_empty() => crate::model::normalize_name(s),
                    other => {
                        warnings.push(format!(
                            "agent.max_concurrent_agents_by_state: ignoring entry with key {}: keys must be state names",
                            describe(other)
                        ));
                        continue;
                    }
                };
                match v.as_u64() {
                    Some(n) if n >= 1 && n <= u32::MAX as u64 => {
                        by_state.insert(key, n as u32);
                    }
                    _ => warnings.push(format!(
                        "agent.max_concurrent_agents_by_state.{key}: ignoring {}: must be a positive integer",
                        describe(v)
                    )),
                }
            }
        }
        Some(other) => {
            return Err(agent.invalid(
                "max_concurrent_agents_by_state",
                "a map of state name to positive integer",
                &describe(other),
            ))
        }
    }
    let agent_cfg = AgentConfig {
        kind,
        max_concurrent_agents: agent.positive_u32("max_concurrent_agents")?.unwrap_or(10),
        max_turns: agent.positive_u32("max_turns")?.unwrap_or(20),
        max_retry_backoff_ms: agent.positive("max_retry_backoff_ms")?.unwrap_or(300_000),
        max_concurrent_agents_by_state: by_state,
        max_attempts: agent.positive_u32("max_attempts")?,
        max_runs_per_issue: agent.positive_u32("max_runs_per_issue")?.unwrap_or(10),
    };

    let claude_cfg = ClaudeCodeConfig {
        command: claude
            .command("command")?
            .unwrap_or_else(|| "claude".into()),
        model: claude.string("model", env)?,
        permission_mode: claude
            .string("permission_mode", env)?
            .unwrap_or_else(|| "acceptEdits".into()),
        allowed_tools: claude.string_list("allowed_tools")?.unwrap_or_default(),
        disallowed_tools: claude.string_list("disallowed_tools")?.unwrap_or_default(),
        append_system_prompt: claude.plain_string("append_system_prompt")?,
        extra_args: claude.string_list("extra_args")?.unwrap_or_default(),
        turn_timeout_ms: claude.positive("turn_timeout_ms")?.unwrap_or(3_600_000),
        stall_timeout_ms: claude.int("stall_timeout_ms")?.unwrap_or(300_000),
    };
    let copilot_cfg = CopilotConfig {
        command: copilot
            .command("command")?
            .unwrap_or_else(|| "copilot".into()),
        model: copilot.string("model", env)?,
        allow_all_tools: copilot.boolean("allow_all_tools")?.unwrap_or(false),
        allow_tools: copilot.string_list("allow_tools")?.unwrap_or_default(),
        deny_tools: copilot.string_list("deny_tools")?.unwrap_or_default(),
        extra_args: copilot.string_list("extra_args")?.unwrap_or_default(),
        turn_timeout_ms: copilot.positive("turn_timeout_ms")?.unwrap_or(3_600_000),
        stall_timeout_ms: copilot.int("stall_timeout_ms")?.unwrap_or(300_000),
    };

    let port = match server.uint("port")? {
        None => None,
        Some(p) if p <= u16::MAX as u64 => Some(p as u16),
        Some(p) => {
            return Err(server.invalid("port", "an integer from 0 to 65535", &p.to_string()))
        }
    };
    let server_cfg = ServerConfig {
        port,
        host: server.plain_string("host")?,
        webhook_secret: server.secret("webhook_secret", env)?.map(|(s, _)| s),
    };

    Ok(ParsedConfig {
        config: ServiceConfig {
            tracker: tracker_cfg,
            poll_interval_ms,
            workspace_root,
            hooks: hooks_cfg,
            agent: agent_cfg,
            claude_code: claude_cfg,
            copilot: copilot_cfg,
            server: server_cfg,
        },
        warnings,
    })
}

/// Resolve `workspace.root`: `$VAR` (whole value), `~`/`~/…`, then relative to the workflow dir.
/// Returns `None` when a referenced variable is unset or empty.
fn resolve_path(raw: &str, workflow_dir: &Path, env: &dyn ConfigEnv) -> Option<PathBuf> {
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
pub fn normalize_lexically(p: &Path) -> PathBuf {
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

/// `Some(NAME)` when `s` is exactly `$NAME`.
fn env_reference(s: &str) -> Option<&str> {
    let name = s.strip_prefix('$')?;
    let ok = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    ok.then_some(name)
}

fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a map".into(),
        Value::Tagged(_) => "a tagged value".into(),
    }
}

/// One top-level section of the front matter, with typed getters that name `section.key` in errors.
struct Section<'a> {
    name: &'static str,
    map: Option<&'a Mapping>,
}

impl<'a> Section<'a> {
    fn new(root: &'a Mapping, name: &'static str) -> Result<Self, ConfigError> {
        match root.get(name) {
            None | Some(Value::Null) => Ok(Section { name, map: None }),
            Some(Value::Mapping(m)) => Ok(Section { name, map: Some(m) }),
            Some(other) => Err(ConfigError::new(
                "invalid_config",
                format!("{name} must be a map of settings, got {}", describe(other)),
            )),
        }
    }

    fn raw(&self, key: &str) -> Option<&'a Value> {
        self.map.and_then(|m| m.get(key))
    }

    fn is_set(&self, key: &str) -> bool {
        !matches!(self.raw(key), None | Some(Value::Null))
    }

    fn invalid(&self, key: &str, expected: &str, got: &str) -> ConfigError {
        ConfigError::new(
            "invalid_config",
            format!("{}.{key} must be {expected}, got {got}", self.name),
        )
    }

    /// A string; `$NAME` resolves from the environment (empty/unset ⇒ `None`).
    fn string(&self, key: &str, env: &dyn ConfigEnv) -> Result<Option<String>, ConfigError> {
        Ok(match self.plain_string(key)? {
            None => None,
            Some(s) => match env_reference(s.trim()) {
                Some(name) => env
                    .var(name)
                    .filter(|v| !v.trim().is_empty())
                    .map(|v| v.trim().to_string()),
                None => Some(s.trim().to_string()).filter(|s| !s.is_empty()),
            },
        })
    }

    /// A secret string, with the same `$NAME` rule; reports where it came from.
    fn secret(
        &self,
        key: &str,
        env: &dyn ConfigEnv,
    ) -> Result<Option<(Secret, TokenSource)>, ConfigError> {
        match self.raw(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(match env_reference(s.trim()) {
                Some(name) => env
                    .var(name)
                    .filter(|v| !v.trim().is_empty())
                    .map(|v| (Secret::new(v.trim()), TokenSource::EnvReference)),
                None => Some(s.trim())
                    .filter(|s| !s.is_empty())
                    .map(|s| (Secret::new(s), TokenSource::Literal)),
            }),
            // Never echo the value: it may be a secret.
            Some(_) => Err(ConfigError::new(
                "invalid_config",
                format!(
                    "{}.{key} must be a string (a literal or $VAR_NAME)",
                    self.name
                ),
            )),
        }
    }

    /// A string taken verbatim (URLs, prompts): no `$VAR` or `~` rewriting.
    fn plain_string(&self, key: &str) -> Result<Option<String>, ConfigError> {
        match self.raw(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.invalid(key, "a string", &describe(other))),
        }
    }

    /// A shell command: verbatim, but it must not be blank when set.
    fn command(&self, key: &str) -> Result<Option<String>, ConfigError> {
        match self.plain_string(key)? {
            Some(s) if s.trim().is_empty() => {
                Err(self.invalid(key, "a non-empty shell command", "\"\""))
            }
            other => Ok(other),
        }
    }

    /// A hook script: verbatim; a blank script counts as absent.
    fn script(&self, key: &str) -> Result<Option<String>, ConfigError> {
        Ok(self.plain_string(key)?.filter(|s| !s.trim().is_empty()))
    }

    fn string_list(&self, key: &str) -> Result<Option<Vec<String>>, ConfigError> {
        match self.raw(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Sequence(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.trim().to_string()),
                    Value::Number(n) => Ok(n.to_string()),
                    other => Err(self.invalid(
                        key,
                        "a list of strings",
                        &format!("an entry {}", describe(other)),
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(other) => Err(self.invalid(key, "a list of strings", &describe(other))),
        }
    }

    fn boolean(&self, key: &str) -> Result<Option<bool>, ConfigError> {
        match self.raw(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.invalid(key, "true or false", &describe(other))),
        }
    }

    /// A signed integer (numbers or numeric strings).
    fn int(&self, key: &str) -> Result<Option<i64>, ConfigError> {
        match self.raw(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n
                .as_i64()
                .map(Some)
                .ok_or_else(|| self.invalid(key, "an integer", &n.to_string())),
            Some(Value::String(s)) => s
                .trim()
                .parse::<i64>()
                .map(Some)
                .map_err(|_| self.invalid(key, "an integer", &format!("{s:?}"))),
            Some(other) => Err(self.invalid(key, "an integer", &describe(other))),
        }
    }

    /// A non-negative integer.
    fn uint(&self, key: &str) -> Result<Option<u64>, ConfigError> {
        match self.int(key) {
            Ok(Some(n)) if n < 0 => {
                Err(self.invalid(key, "a non-negative integer", &n.to_string()))
            }
            Ok(v) => Ok(v.map(|n| n as u64)),
            Err(_) => Err(self.invalid(key, "a non-negative integer", &self.got(key))),
        }
    }

    /// A positive integer.
    fn positive(&self, key: &str) -> Result<Option<u64>, ConfigError> {
        match self.int(key) {
            Ok(Some(n)) if n <= 0 => Err(self.invalid(key, "a positive integer", &n.to_string())),
            Ok(v) => Ok(v.map(|n| n as u64)),
            Err(_) => Err(self.invalid(key, "a positive integer", &self.got(key))),
        }
    }

    fn positive_u32(&self, key: &str) -> Result<Option<u32>, ConfigError> {
        match self.positive(key)? {
            Some(n) if n > u32::MAX as u64 => {
                Err(self.invalid(key, "a positive integer", &n.to_string()))
            }
            other => Ok(other.map(|n| n as u32)),
        }
    }

    fn got(&self, key: &str) -> String {
        self.raw(key)
            .map(describe)
            .unwrap_or_else(|| "nothing".into())
    }
}

/// Warn once about unknown keys (top-level and inside known sections), with a hint when a known
/// key is one edit away.
fn check_unknown_keys(root: &Mapping, warnings: &mut Vec<String>) {
    let top: Vec<&str> = KNOWN_KEYS.iter().map(|(s, _)| *s).collect();
    for (k, v) in root {
        let Some(k) = k.as_str() else {
            warnings.push(format!("ignoring non-string top-level key {}", describe(k)));
            continue;
        };
        match KNOWN_KEYS.iter().find(|(s, _)| *s == k) {
            None => warnings.push(unknown_key_message(k, &top)),
            Some((section, keys)) => {
                if let Value::Mapping(m) = v {
                    for sub in m.keys().filter_map(Value::as_str) {
                        if !keys.contains(&sub) {
                            let full = format!("{section}.{sub}");
                            let known: Vec<String> =
                                keys.iter().map(|k| format!("{section}.{k}")).collect();
                            let known: Vec<&str> = known.iter().map(String::as_str).collect();
                            warnings.push(unknown_key_message(&full, &known));
                        }
                    }
                }
            }
        }
    }
}

fn unknown_key_message(key: &str, known: &[&str]) -> String {
    match known.iter().find(|k| edit_distance(key, k) == 1) {
        Some(hint) => format!("unknown config key `{key}` is ignored; did you mean `{hint}`?"),
        None => format!("unknown config key `{key}` is ignored"),
    }
}

/// Levenshtein distance (small strings only); used for "did you mean" hints.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}
