//! `agent.kind` and the agent sections `claude_code.*` (spec §5.3.6), `copilot.*` (§5.3.7),
//! `codex.*` (Symphony §5.3.6) and `gemini.*`: their typed configs (each field a key, its
//! `Default` the key's default) and what their types cannot check.

use serde::Deserialize;
use serde_yaml::Value as YamlValue;

use crate::config::{ConfigError, Section};
use crate::host::sandbox::CliHome;

/// `agent.kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
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

/// `claude_code.*` (spec §5.3.6).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct ClaudeCodeConfig {
    #[serde(skip)]
    pub cli: CliSection,
    /// `--permission-mode`, passed through.
    pub permission_mode: String,
    pub allowed_tools: Vec<String>,
    pub disallowed_tools: Vec<String>,
    pub append_system_prompt: Option<String>,
}

impl Default for ClaudeCodeConfig {
    fn default() -> Self {
        ClaudeCodeConfig {
            cli: CliSection::new("claude"),
            permission_mode: "acceptEdits".into(),
            allowed_tools: Vec::new(),
            disallowed_tools: Vec::new(),
            append_system_prompt: None,
        }
    }
}

impl ClaudeCodeConfig {
    pub(crate) fn parse(s: &Section<'_>) -> Result<Self, ConfigError> {
        let mut c: Self = s.read()?;
        c.cli.read(s)?;
        Ok(c)
    }
}

/// `copilot.*` (spec §5.3.7).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct CopilotConfig {
    #[serde(skip)]
    pub cli: CliSection,
    /// `--allow-all-tools` (an explicit operator choice).
    pub allow_all_tools: bool,
    pub allow_tools: Vec<String>,
    pub deny_tools: Vec<String>,
}

impl Default for CopilotConfig {
    fn default() -> Self {
        CopilotConfig {
            cli: CliSection::new("copilot"),
            allow_all_tools: false,
            allow_tools: Vec::new(),
            deny_tools: Vec::new(),
        }
    }
}

impl CopilotConfig {
    pub(crate) fn parse(s: &Section<'_>) -> Result<Self, ConfigError> {
        let mut c: Self = s.read()?;
        c.cli.read(s)?;
        Ok(c)
    }
}

/// `codex.*` (Symphony §5.3.6). Codex-owned values pass through unchecked beyond their JSON
/// shape, so a newer Codex needs no Baton change.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct CodexConfig {
    /// `turn_timeout_ms` is the silence bound of a turn stream here (Symphony §10.6).
    #[serde(skip)]
    pub cli: CliSection,
    /// `approvalPolicy` of `thread/start` / `thread/resume`: a string or a `granular` map.
    /// Approval requests the policy still lets through are declined.
    #[serde(skip)]
    pub approval_policy: serde_json::Value,
    /// `sandbox` of `thread/start` / `thread/resume`.
    pub thread_sandbox: String,
    /// `sandboxPolicy` of `turn/start` (a map with `type`); unset: the thread's sandbox applies.
    #[serde(skip)]
    pub turn_sandbox_policy: Option<serde_json::Value>,
    /// How long a request may wait for its reply.
    pub read_timeout_ms: u64,
}

impl Default for CodexConfig {
    fn default() -> Self {
        CodexConfig {
            cli: CliSection::new("codex app-server"),
            approval_policy: "never".into(),
            thread_sandbox: "workspace-write".into(),
            turn_sandbox_policy: None,
            read_timeout_ms: 5000,
        }
    }
}

impl CodexConfig {
    pub(crate) fn parse(s: &Section<'_>) -> Result<Self, ConfigError> {
        let json = |key, want_map: bool| -> Result<Option<serde_json::Value>, ConfigError> {
            let Some(raw) = s.raw(key) else {
                return Ok(None);
            };
            let ok = match raw {
                YamlValue::String(t) => !want_map && !t.trim().is_empty(),
                YamlValue::Mapping(m) => !want_map || m.get("type").is_some_and(|t| t.is_string()),
                _ => false,
            };
            let want = match want_map {
                true => "a map with a type",
                false => "a non-empty string or a map",
            };
            match serde_json::to_value(raw) {
                Ok(v) if ok => Ok(Some(v)),
                _ => Err(s.invalid(key, want, &crate::config::describe(raw))),
            }
        };
        let mut c: Self = s.read()?;
        c.cli.read(s)?;
        if let Some(policy) = json("approval_policy", false)? {
            c.approval_policy = policy;
        }
        c.turn_sandbox_policy = json("turn_sandbox_policy", true)?;
        Ok(c)
    }
}

/// `gemini.*`: the Gemini CLI in headless `stream-json` mode.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct GeminiConfig {
    #[serde(skip)]
    pub cli: CliSection,
    /// `--approval-mode`: `auto_edit` (file edits, no shell), `yolo` (every tool) or `default`
    /// (the CLI then offers the model no tool that needs approval).
    pub approval_mode: String,
    /// When set (e.g. `gemini-api-key`, needed with `GOOGLE_GEMINI_BASE_URL`), the CLI runs with
    /// a Baton-owned home whose settings select this auth type; empty leaves auth to the
    /// environment and the service user's own settings.
    pub auth_type: String,
}

impl Default for GeminiConfig {
    fn default() -> Self {
        GeminiConfig {
            cli: CliSection::new("gemini"),
            approval_mode: "auto_edit".into(),
            auth_type: String::new(),
        }
    }
}

impl GeminiConfig {
    pub(crate) fn parse(s: &Section<'_>) -> Result<Self, ConfigError> {
        let mut c: Self = s.read()?;
        if !["auto_edit", "yolo", "default"].contains(&c.approval_mode.as_str()) {
            let got = format!("{:?}", c.approval_mode);
            return Err(s.invalid("approval_mode", "auto_edit, yolo or default", &got));
        }
        c.cli.read(s)?;
        Ok(c)
    }
}

/// The keys every CLI agent section has.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct CliSection {
    /// Shell command launching the CLI; never rewritten.
    pub command: String,
    pub model: Option<String>,
    /// Further CLI arguments, appended verbatim.
    pub extra_args: Vec<String>,
    /// Bound of one turn in ms.
    pub turn_timeout_ms: u64,
    /// Inactivity bound in ms; `<= 0` disables stall detection.
    pub stall_timeout_ms: i64,
}

impl Default for CliSection {
    fn default() -> Self {
        CliSection::new("")
    }
}

impl CliSection {
    /// `command` with every other key at its default.
    pub fn new(command: impl Into<String>) -> Self {
        CliSection {
            command: command.into(),
            model: None,
            extra_args: Vec::new(),
            turn_timeout_ms: 3_600_000,
            stall_timeout_ms: 300_000,
        }
    }

    /// The CLI keys of section `s`; `command` keeps the kind's default unless set, and must not
    /// be blank.
    fn read(&mut self, s: &Section<'_>) -> Result<(), ConfigError> {
        let command = std::mem::take(&mut self.command);
        *self = s.read()?;
        if s.raw("command").is_none() {
            self.command = command;
        } else if self.command.trim().is_empty() {
            return Err(s.invalid("command", "a non-empty shell command", "\"\""));
        }
        Ok(())
    }
}
