//! `agent.kind` and the agent sections `claude_code.*` (spec §5.3.6), `copilot.*` (§5.3.7),
//! `codex.*` (Symphony §5.3.6) and `gemini.*`: their typed configs, key lists and parsers, read
//! through the shared `Section` reader so every error names the key and value.

use serde_yaml::Value as YamlValue;

use crate::host::sandbox::CliHome;
use crate::workflow::config::section::Section;
use crate::workflow::config::{ConfigEnv, ConfigError};

const DEFAULT_TURN_TIMEOUT_MS: u64 = 3_600_000;
const DEFAULT_STALL_TIMEOUT_MS: i64 = 300_000;

/// `agent.kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentKind {
    ClaudeCode,
    Copilot,
    /// OpenAI Codex over JSON-RPC (`codex app-server`).
    Codex,
    Gemini,
}

impl AgentKind {
    /// What `agent.kind` accepts, for error messages.
    pub(crate) const EXPECTED: &'static str = "claude_code, copilot, codex or gemini";

    /// The agent registry: the kind for a config spelling, `None` when unknown.
    pub(crate) fn from_config(s: &str) -> Option<Self> {
        [Self::ClaudeCode, Self::Copilot, Self::Codex, Self::Gemini]
            .into_iter()
            .find(|k| k.as_str() == s)
    }

    /// Where the CLI keeps its state, so the sandbox can keep it per issue, and the credential
    /// files it reads there.
    pub fn cli_home(self) -> CliHome {
        let (env, name, credentials): (_, _, &'static [(&str, &str)]) = match self {
            AgentKind::ClaudeCode => (
                "CLAUDE_CONFIG_DIR",
                "claude",
                &[(".claude/.credentials.json", ".credentials.json")],
            ),
            AgentKind::Copilot => ("COPILOT_HOME", "copilot", &[]),
            AgentKind::Codex => (
                "CODEX_HOME",
                "codex",
                &[
                    (".codex/auth.json", "auth.json"),
                    (".codex/config.toml", "config.toml"),
                ],
            ),
            AgentKind::Gemini => (
                "GEMINI_CLI_HOME",
                "gemini",
                &[
                    (".gemini/settings.json", ".gemini/settings.json"),
                    (".gemini/oauth_creds.json", ".gemini/oauth_creds.json"),
                ],
            ),
        };
        CliHome {
            env,
            name,
            credentials,
        }
    }

    /// The config spelling, which is also the name of the agent's section.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentKind::ClaudeCode => "claude_code",
            AgentKind::Copilot => "copilot",
            AgentKind::Codex => "codex",
            AgentKind::Gemini => "gemini",
        }
    }

    /// Whether the agent reports a cost (only Claude Code does), so a cost budget can apply.
    pub fn reports_cost(self) -> bool {
        self == AgentKind::ClaudeCode
    }
}

/// The agent sections and their keys, for unknown-key hints.
pub(crate) const KNOWN_SECTIONS: &[(&str, &[&str])] = &[
    (ClaudeCodeConfig::SECTION, ClaudeCodeConfig::KEYS),
    (CopilotConfig::SECTION, CopilotConfig::KEYS),
    (CodexConfig::SECTION, CodexConfig::KEYS),
    (GeminiConfig::SECTION, GeminiConfig::KEYS),
];

/// `claude_code.*` (spec §5.3.6).
#[derive(Debug, Clone, PartialEq)]
pub struct ClaudeCodeConfig {
    pub cli: CliSection,
    /// `--permission-mode` (default `acceptEdits`), passed through.
    pub permission_mode: String,
    pub allowed_tools: Vec<String>,
    pub disallowed_tools: Vec<String>,
    pub append_system_prompt: Option<String>,
}

impl ClaudeCodeConfig {
    pub(crate) const SECTION: &'static str = "claude_code";
    pub(crate) const KEYS: &'static [&'static str] = &[
        "command",
        "model",
        "permission_mode",
        "allowed_tools",
        "disallowed_tools",
        "append_system_prompt",
        "extra_args",
        "turn_timeout_ms",
        "stall_timeout_ms",
    ];

    pub(crate) fn parse(s: &Section<'_>, env: &dyn ConfigEnv) -> Result<Self, ConfigError> {
        Ok(ClaudeCodeConfig {
            cli: CliSection::parse(s, env, "claude")?,
            permission_mode: (s.string("permission_mode", env)?)
                .unwrap_or_else(|| "acceptEdits".into()),
            allowed_tools: s.string_list("allowed_tools")?.unwrap_or_default(),
            disallowed_tools: s.string_list("disallowed_tools")?.unwrap_or_default(),
            append_system_prompt: s.plain_string("append_system_prompt")?,
        })
    }
}

/// `copilot.*` (spec §5.3.7).
#[derive(Debug, Clone, PartialEq)]
pub struct CopilotConfig {
    pub cli: CliSection,
    /// `--allow-all-tools` (default false; an explicit operator choice).
    pub allow_all_tools: bool,
    pub allow_tools: Vec<String>,
    pub deny_tools: Vec<String>,
}

impl CopilotConfig {
    pub(crate) const SECTION: &'static str = "copilot";
    pub(crate) const KEYS: &'static [&'static str] = &[
        "command",
        "model",
        "allow_all_tools",
        "allow_tools",
        "deny_tools",
        "extra_args",
        "turn_timeout_ms",
        "stall_timeout_ms",
    ];

    pub(crate) fn parse(s: &Section<'_>, env: &dyn ConfigEnv) -> Result<Self, ConfigError> {
        Ok(CopilotConfig {
            cli: CliSection::parse(s, env, "copilot")?,
            allow_all_tools: s.boolean("allow_all_tools")?.unwrap_or(false),
            allow_tools: s.string_list("allow_tools")?.unwrap_or_default(),
            deny_tools: s.string_list("deny_tools")?.unwrap_or_default(),
        })
    }
}

/// `codex.*` (Symphony §5.3.6). Codex-owned values pass through unchecked beyond their JSON
/// shape, so a newer Codex needs no Baton change.
#[derive(Debug, Clone, PartialEq)]
pub struct CodexConfig {
    /// `turn_timeout_ms` is the silence bound of a turn stream here (Symphony §10.6).
    pub cli: CliSection,
    /// `approvalPolicy` of `thread/start` / `thread/resume` (default `never`): a string or a
    /// `granular` map. Approval requests the policy still lets through are declined.
    pub approval_policy: serde_json::Value,
    /// `sandbox` of `thread/start` / `thread/resume` (default `workspace-write`).
    pub thread_sandbox: String,
    /// `sandboxPolicy` of `turn/start` (a map with `type`); unset: the thread's sandbox applies.
    pub turn_sandbox_policy: Option<serde_json::Value>,
    /// How long a request may wait for its reply (default 5000 ms).
    pub read_timeout_ms: u64,
}

impl CodexConfig {
    pub(crate) const SECTION: &'static str = "codex";
    pub(crate) const KEYS: &'static [&'static str] = &[
        "command",
        "model",
        "approval_policy",
        "thread_sandbox",
        "turn_sandbox_policy",
        "extra_args",
        "read_timeout_ms",
        "turn_timeout_ms",
        "stall_timeout_ms",
    ];

    pub(crate) fn parse(s: &Section<'_>, env: &dyn ConfigEnv) -> Result<Self, ConfigError> {
        let json = |key: &str, want_map: bool| -> Result<Option<serde_json::Value>, ConfigError> {
            let ok = match s.raw(key) {
                None | Some(YamlValue::Null) => return Ok(None),
                Some(YamlValue::String(t)) => !want_map && !t.trim().is_empty(),
                Some(YamlValue::Mapping(m)) => {
                    !want_map || m.get("type").is_some_and(|t| t.is_string())
                }
                Some(_) => false,
            };
            match s.raw(key).and_then(|v| serde_json::to_value(v).ok()) {
                Some(v) if ok => Ok(Some(v)),
                _ if want_map => Err(s.invalid(key, "a map with a type", &s.got(key))),
                _ => Err(s.invalid(key, "a non-empty string or a map", &s.got(key))),
            }
        };
        let thread_sandbox = s.string("thread_sandbox", env)?;
        Ok(CodexConfig {
            cli: CliSection::parse(s, env, "codex app-server")?,
            approval_policy: json("approval_policy", false)?.unwrap_or_else(|| "never".into()),
            thread_sandbox: thread_sandbox.unwrap_or_else(|| "workspace-write".into()),
            turn_sandbox_policy: json("turn_sandbox_policy", true)?,
            read_timeout_ms: s.positive("read_timeout_ms")?.unwrap_or(5000),
        })
    }
}

/// `gemini.*`: the Gemini CLI in headless `stream-json` mode.
#[derive(Debug, Clone, PartialEq)]
pub struct GeminiConfig {
    pub cli: CliSection,
    /// `--approval-mode`: `auto_edit` (default: file edits, no shell), `yolo` (every tool) or
    /// `default` (the CLI then offers the model no tool that needs approval).
    pub approval_mode: String,
    /// When set (e.g. `gemini-api-key`, needed with `GOOGLE_GEMINI_BASE_URL`), the CLI runs with
    /// a Baton-owned home whose settings select this auth type; empty (the default) leaves auth
    /// to the environment and the service user's own settings.
    pub auth_type: String,
}

impl GeminiConfig {
    pub(crate) const SECTION: &'static str = "gemini";
    pub(crate) const KEYS: &'static [&'static str] = &[
        "command",
        "model",
        "approval_mode",
        "auth_type",
        "extra_args",
        "turn_timeout_ms",
        "stall_timeout_ms",
    ];

    pub(crate) fn parse(s: &Section<'_>, env: &dyn ConfigEnv) -> Result<Self, ConfigError> {
        let mode = s.string("approval_mode", env)?;
        let approval_mode = mode.unwrap_or_else(|| "auto_edit".into());
        if !["auto_edit", "yolo", "default"].contains(&approval_mode.as_str()) {
            let got = format!("{approval_mode:?}");
            return Err(s.invalid("approval_mode", "auto_edit, yolo or default", &got));
        }
        Ok(GeminiConfig {
            cli: CliSection::parse(s, env, "gemini")?,
            approval_mode,
            auth_type: s.string("auth_type", env)?.unwrap_or_default(),
        })
    }
}

/// The keys every CLI agent section has.
#[derive(Debug, Clone, PartialEq)]
pub struct CliSection {
    /// Shell command launching the CLI; never rewritten.
    pub command: String,
    pub model: Option<String>,
    /// Further CLI arguments, appended verbatim.
    pub extra_args: Vec<String>,
    /// Bound of one turn in ms (default 3600000).
    pub turn_timeout_ms: u64,
    /// Inactivity bound in ms (default 300000); `<= 0` disables stall detection.
    pub stall_timeout_ms: i64,
}

impl CliSection {
    /// `command` with every other key at its default.
    pub fn new(command: impl Into<String>) -> Self {
        CliSection {
            command: command.into(),
            model: None,
            extra_args: Vec::new(),
            turn_timeout_ms: DEFAULT_TURN_TIMEOUT_MS,
            stall_timeout_ms: DEFAULT_STALL_TIMEOUT_MS,
        }
    }

    fn parse(s: &Section<'_>, env: &dyn ConfigEnv, command: &str) -> Result<Self, ConfigError> {
        let turn_timeout_ms = s.positive("turn_timeout_ms")?;
        Ok(CliSection {
            command: s.command("command")?.unwrap_or_else(|| command.into()),
            model: s.string("model", env)?,
            extra_args: s.string_list("extra_args")?.unwrap_or_default(),
            turn_timeout_ms: turn_timeout_ms.unwrap_or(DEFAULT_TURN_TIMEOUT_MS),
            stall_timeout_ms: s
                .int("stall_timeout_ms")?
                .unwrap_or(DEFAULT_STALL_TIMEOUT_MS),
        })
    }
}
