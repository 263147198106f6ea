//! `agent.kind` and the per-agent sections `claude_code.*` (spec §5.3.6), `copilot.*` (§5.3.7),
//! `codex.*` (Symphony §5.3.6) and `gemini.*`: their typed configs, key lists and parsers.
//!
//! The agent module owns its configuration: `workflow::config` only calls the parsers here
//! (through the shared `Section` reader, so every error names the key and value). Adding an
//! agent: a config struct with a `parse`, a [`KNOWN_SECTIONS`] entry, an [`AgentKind`] variant,
//! and one arm in [`AgentKind::from_config`] and in
//! [`crate::workflow::config::ServiceConfig::agent_settings`].

use serde_yaml::Value as YamlValue;

use crate::host::sandbox::CliHome;
use crate::workflow::config::section::Section;
use crate::workflow::config::{ConfigEnv, ConfigError};

/// Default bound of one turn (both agents), in ms.
const DEFAULT_TURN_TIMEOUT_MS: u64 = 3_600_000;
/// Default inactivity bound (both agents), in ms.
const DEFAULT_STALL_TIMEOUT_MS: i64 = 300_000;

/// `agent.kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentKind {
    /// Claude Code CLI (`claude -p --output-format stream-json`).
    ClaudeCode,
    /// GitHub Copilot CLI (`copilot -p --output-format json`).
    Copilot,
    /// OpenAI Codex over JSON-RPC (`codex app-server`).
    Codex,
    /// Google Gemini CLI (`gemini -p --output-format stream-json`).
    Gemini,
}

impl AgentKind {
    /// What `agent.kind` accepts, for error messages.
    pub(crate) const EXPECTED: &'static str = "claude_code, copilot, codex or gemini";

    /// The agent registry: the kind for a config spelling, `None` when unknown.
    pub(crate) fn from_config(s: &str) -> Option<Self> {
        match s {
            "claude_code" => Some(AgentKind::ClaudeCode),
            "copilot" => Some(AgentKind::Copilot),
            "codex" => Some(AgentKind::Codex),
            "gemini" => Some(AgentKind::Gemini),
            _ => None,
        }
    }

    /// Where the CLI keeps its state, so the sandbox can keep it per issue (Claude Code honours
    /// `CLAUDE_CONFIG_DIR`, Copilot `COPILOT_HOME`, Codex `CODEX_HOME`, Gemini `GEMINI_CLI_HOME`), and the credential files it reads there.
    pub fn cli_home(self) -> CliHome {
        match self {
            AgentKind::ClaudeCode => CliHome {
                env: "CLAUDE_CONFIG_DIR",
                name: "claude",
                credentials: &[(".claude/.credentials.json", ".credentials.json")],
            },
            AgentKind::Copilot => CliHome {
                env: "COPILOT_HOME",
                name: "copilot",
                credentials: &[],
            },
            AgentKind::Codex => CliHome {
                env: "CODEX_HOME",
                name: "codex",
                credentials: &[
                    (".codex/auth.json", "auth.json"),
                    (".codex/config.toml", "config.toml"),
                ],
            },
            AgentKind::Gemini => CliHome {
                env: "GEMINI_CLI_HOME",
                name: "gemini",
                credentials: &[
                    (".gemini/settings.json", ".gemini/settings.json"),
                    (".gemini/oauth_creds.json", ".gemini/oauth_creds.json"),
                ],
            },
        }
    }

    /// The config spelling (`claude_code`, `copilot`, `codex`, `gemini`).
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
    /// The keys every CLI agent has (`command` defaults to `claude`).
    pub cli: CliSection,
    /// `--permission-mode` (default `acceptEdits`), passed through.
    pub permission_mode: String,
    /// `--allowedTools` entries.
    pub allowed_tools: Vec<String>,
    /// `--disallowedTools` entries.
    pub disallowed_tools: Vec<String>,
    /// `--append-system-prompt`.
    pub append_system_prompt: Option<String>,
}

impl ClaudeCodeConfig {
    /// The section name.
    pub(crate) const SECTION: &'static str = "claude_code";
    /// Every key of the section.
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

    /// Parse `claude_code.*` with its defaults.
    pub(crate) fn parse(s: &Section<'_>, env: &dyn ConfigEnv) -> Result<Self, ConfigError> {
        Ok(ClaudeCodeConfig {
            cli: CliSection::parse(s, env, "claude")?,
            permission_mode: s
                .string("permission_mode", env)?
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
    /// The keys every CLI agent has (`command` defaults to `copilot`).
    pub cli: CliSection,
    /// `--allow-all-tools` (default false; an explicit operator choice).
    pub allow_all_tools: bool,
    /// Repeated `--allow-tool`.
    pub allow_tools: Vec<String>,
    /// Repeated `--deny-tool`.
    pub deny_tools: Vec<String>,
}

impl CopilotConfig {
    /// The section name.
    pub(crate) const SECTION: &'static str = "copilot";
    /// Every key of the section.
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

    /// Parse `copilot.*` with its defaults.
    pub(crate) fn parse(s: &Section<'_>, env: &dyn ConfigEnv) -> Result<Self, ConfigError> {
        Ok(CopilotConfig {
            cli: CliSection::parse(s, env, "copilot")?,
            allow_all_tools: s.boolean("allow_all_tools")?.unwrap_or(false),
            allow_tools: s.string_list("allow_tools")?.unwrap_or_default(),
            deny_tools: s.string_list("deny_tools")?.unwrap_or_default(),
        })
    }
}

/// `codex.*` (Symphony §5.3.6): the app-server client. Codex-owned values (`approval_policy`,
/// `thread_sandbox`, `turn_sandbox_policy`) pass through unchecked beyond their JSON shape, so a
/// newer Codex needs no Baton change.
#[derive(Debug, Clone, PartialEq)]
pub struct CodexConfig {
    /// The keys every CLI agent has (`command` defaults to `codex app-server`; `turn_timeout_ms`
    /// is the silence bound of a turn stream, as in Symphony §10.6).
    pub cli: CliSection,
    /// `approvalPolicy` of `thread/start` / `thread/resume` (default `never`): a string or a
    /// `granular` map. Approval requests the policy still lets through are declined.
    pub approval_policy: serde_json::Value,
    /// `sandbox` of `thread/start` / `thread/resume` (default `workspace-write`).
    pub thread_sandbox: String,
    /// `sandboxPolicy` of `turn/start` (a map with `type`); unset: the thread's sandbox applies.
    pub turn_sandbox_policy: Option<serde_json::Value>,
    /// How long a request (`initialize`, `thread/*`, `turn/start`) may wait for its reply, in ms
    /// (default 5000).
    pub read_timeout_ms: u64,
}

impl CodexConfig {
    /// The section name.
    pub(crate) const SECTION: &'static str = "codex";
    /// Every key of the section.
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

    /// Parse `codex.*` with its defaults.
    pub(crate) fn parse(s: &Section<'_>, env: &dyn ConfigEnv) -> Result<Self, ConfigError> {
        let json = |key: &str, want_map: bool| -> Result<Option<serde_json::Value>, ConfigError> {
            let expected = if want_map {
                "a map with a type"
            } else {
                "a non-empty string or a map"
            };
            let ok = match s.raw(key) {
                None | Some(YamlValue::Null) => return Ok(None),
                Some(YamlValue::String(t)) => !want_map && !t.trim().is_empty(),
                Some(YamlValue::Mapping(m)) => {
                    !want_map || m.get("type").is_some_and(|t| t.is_string())
                }
                Some(_) => false,
            };
            let value = s.raw(key).and_then(|v| serde_json::to_value(v).ok());
            match value {
                Some(v) if ok => Ok(Some(v)),
                _ => Err(s.invalid(key, expected, &s.got(key))),
            }
        };
        let thread_sandbox = s
            .string("thread_sandbox", env)?
            .unwrap_or_else(|| "workspace-write".into());
        Ok(CodexConfig {
            cli: CliSection::parse(s, env, "codex app-server")?,
            approval_policy: json("approval_policy", false)?
                .unwrap_or_else(|| serde_json::Value::from("never")),
            thread_sandbox,
            turn_sandbox_policy: json("turn_sandbox_policy", true)?,
            read_timeout_ms: s.positive("read_timeout_ms")?.unwrap_or(5000),
        })
    }
}

/// `gemini.*`: the Gemini CLI in headless `stream-json` mode.
#[derive(Debug, Clone, PartialEq)]
pub struct GeminiConfig {
    /// The keys every CLI agent has (`command` defaults to `gemini`).
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
    /// The section name.
    pub(crate) const SECTION: &'static str = "gemini";
    /// Every key of the section.
    pub(crate) const KEYS: &'static [&'static str] = &[
        "command",
        "model",
        "approval_mode",
        "auth_type",
        "extra_args",
        "turn_timeout_ms",
        "stall_timeout_ms",
    ];
    /// The accepted `approval_mode` values.
    const APPROVAL_MODES: [&'static str; 3] = ["auto_edit", "yolo", "default"];

    /// Parse `gemini.*` with its defaults.
    pub(crate) fn parse(s: &Section<'_>, env: &dyn ConfigEnv) -> Result<Self, ConfigError> {
        let approval_mode = s
            .string("approval_mode", env)?
            .unwrap_or_else(|| "auto_edit".into());
        if !Self::APPROVAL_MODES.contains(&approval_mode.as_str()) {
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

/// The keys every CLI agent section has (`command`, `model`, `extra_args`, `turn_timeout_ms`,
/// `stall_timeout_ms`).
#[derive(Debug, Clone, PartialEq)]
pub struct CliSection {
    /// Shell command launching the CLI; never rewritten.
    pub command: String,
    /// `--model`.
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

    fn parse(
        s: &Section<'_>,
        env: &dyn ConfigEnv,
        default_command: &str,
    ) -> Result<Self, ConfigError> {
        Ok(CliSection {
            command: s
                .command("command")?
                .unwrap_or_else(|| default_command.into()),
            model: s.string("model", env)?,
            extra_args: s.string_list("extra_args")?.unwrap_or_default(),
            turn_timeout_ms: s
                .positive("turn_timeout_ms")?
                .unwrap_or(DEFAULT_TURN_TIMEOUT_MS),
            stall_timeout_ms: s
                .int("stall_timeout_ms")?
                .unwrap_or(DEFAULT_STALL_TIMEOUT_MS),
        })
    }
}

/// What the core needs from the selected agent's section (see
/// [`crate::workflow::config::ServiceConfig::agent_settings`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct AgentSettings<'a> {
    /// The section name, for messages.
    pub section: &'static str,
    /// The section's CLI keys.
    pub cli: &'a CliSection,
}

impl<'a> AgentSettings<'a> {
    /// The settings of Claude Code's section.
    pub(crate) fn claude_code(c: &'a ClaudeCodeConfig) -> Self {
        AgentSettings {
            section: ClaudeCodeConfig::SECTION,
            cli: &c.cli,
        }
    }

    /// The settings of Copilot's section.
    pub(crate) fn copilot(c: &'a CopilotConfig) -> Self {
        AgentSettings {
            section: CopilotConfig::SECTION,
            cli: &c.cli,
        }
    }

    /// The settings of Codex's section.
    pub(crate) fn codex(c: &'a CodexConfig) -> Self {
        AgentSettings {
            section: CodexConfig::SECTION,
            cli: &c.cli,
        }
    }

    /// The settings of Gemini's section.
    pub(crate) fn gemini(c: &'a GeminiConfig) -> Self {
        AgentSettings {
            section: GeminiConfig::SECTION,
            cli: &c.cli,
        }
    }

    /// Preflight of the section: a blank command cannot start the agent.
    pub(crate) fn preflight_error(&self) -> Option<ConfigError> {
        self.cli.command.trim().is_empty().then(|| {
            ConfigError::new(
                "invalid_config",
                format!("{}.command must be a non-empty shell command", self.section),
            )
        })
    }
}
