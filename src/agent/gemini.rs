//! Google Gemini CLI in headless mode, built against `@google/gemini-cli@0.61.0`: each turn is
//! one `gemini --prompt=<prompt> --output-format stream-json --skip-trust …` process.
//!
//! * Sessions: Baton picks the UUID (`--session-id`, then `--resume`); a resume the CLI does not
//!   know exits 42 with nothing on stdout.
//! * Outcome: success only on a `result` line with `status: "success"` and exit 0: SIGTERM ends
//!   the CLI with exit 0 and no result, and API errors exit with the HTTP status cut to 8 bits.
//! * Usage: `result.stats` is per invocation; `cached` is a subset of `input_tokens`, and
//!   `total_tokens` also counts thoughts, which are billed as output.
//! * With `gemini.auth_type` set, the CLI runs with a Baton-owned home ([`cli_home`]); the
//!   service user's own `~/.gemini` is never written.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;

use serde_json::Value;

use super::config::{AgentKind, CliSection, GeminiConfig};
use super::driver::{ProcessEnd, TurnParser};
use super::loose::{count, one_line, str_at, tool_input_detail, SUMMARY_MAX};
use super::runner::{Cli, CliRunner, Invocation, Parsed};
use super::{
    AgentError, AgentErrorKind as K, AgentEvent, AgentEventKind as E, TokenUsage, TurnResult,
};
use crate::text::truncate_chars;

/// Builds Gemini sessions from `gemini.*`.
pub type GeminiRunner = CliRunner<GeminiConfig>;

impl Cli for GeminiConfig {
    type Parser = StreamParser;
    type State = ();
    const KIND: AgentKind = AgentKind::Gemini;
    const NAMES_SESSION: bool = true;

    fn cli(&self) -> &CliSection {
        &self.cli
    }

    /// Values are attached with `=`, so a prompt starting with `-` is never read as a flag.
    fn invocation(r: &GeminiRunner, i: &mut Invocation<()>) -> Parsed<Self> {
        let (cfg, session) = (&r.cfg, i.session.unwrap_or_default());
        let flag = if i.resume { "--resume" } else { "--session-id" };
        let a = &mut i.spec.args;
        a.push(format!("--prompt={}", i.prompt).into());
        a.extend(["--output-format", "stream-json", "--skip-trust"].map(Into::into));
        a.push(format!("--approval-mode={}", cfg.approval_mode).into());
        a.push(format!("{flag}={session}").into());
        if let Some(m) = cfg.cli.model.as_deref().filter(|m| !m.is_empty()) {
            a.push(format!("--model={m}").into());
        }
        a.extend(cfg.cli.extra_args.iter().map(Into::into));
        if !cfg.auth_type.is_empty() {
            let home = cli_home(&cfg.auth_type, session)
                .map_err(|e| AgentError::new(K::StartupFailed, format!("gemini home: {e}")))?;
            i.spec.env("GEMINI_CLI_HOME", home);
        }
        Ok(StreamParser::new(session.into(), i.turn))
    }
}

/// The Gemini home Baton owns for `session`: `$XDG_STATE_HOME` (or `~/.local/state`)
/// `/baton/gemini/<session>`, mode 0700, with `.gemini/settings.json` (0600) selecting the auth
/// type, no update checks and no usage statistics, rewritten before every run. The session's
/// history stays there for a restart. (Gemini reads system settings only when root owns them and
/// their directories, which a service user cannot arrange.)
fn cli_home(auth_type: &str, session: &str) -> std::io::Result<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .ok_or_else(|| std::io::Error::other("neither XDG_STATE_HOME nor HOME is set"))?;
    let home = base.join("baton/gemini").join(session);
    let mut dirs = fs::DirBuilder::new();
    dirs.recursive(true)
        .mode(0o700)
        .create(home.join(".gemini"))?;
    let settings = serde_json::json!({
        "security": {"auth": {"selectedType": auth_type}},
        "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
        "privacy": {"usageStatisticsEnabled": false},
    });
    let mut file = fs::OpenOptions::new();
    file.write(true).create(true).truncate(true).mode(0o600);
    serde_json::to_writer(file.open(home.join(".gemini/settings.json"))?, &settings)?;
    Ok(home)
}

/// The parser of one invocation's stream-json stdout (pure).
#[derive(Debug, Clone, Default)]
pub struct StreamParser {
    session: String,
    turn: u32,
    saw_init: bool,
    text: String,
    /// The `result` line's status and error text.
    result: Option<(String, String)>,
    usage: TokenUsage,
}

impl StreamParser {
    pub fn new(session: String, turn: u32) -> StreamParser {
        StreamParser {
            session,
            turn,
            ..Self::default()
        }
    }

    /// The assistant text gathered so far, as one `assistant: …` event.
    fn flush_text(&mut self) -> Vec<AgentEvent> {
        if self.text.is_empty() {
            return Vec::new();
        }
        let text = std::mem::take(&mut self.text);
        vec![self.event(E::Notification, &format!("assistant: {text}"))]
    }

    fn on_result(&mut self, v: &Value) -> Vec<AgentEvent> {
        let mut out = self.flush_text();
        if self.result.is_some() {
            out.push(self.event(E::Malformed, "second result line ignored"));
            return out;
        }
        let status = str_at(v, "status").unwrap_or("?");
        let error = v.get("error").map(|e| {
            let t = str_at(e, "type").unwrap_or("?");
            format!("{t}: {}", one_line(str_at(e, "message").unwrap_or(""), 300))
        });
        let n = |k: &str| count(v["stats"].get(k));
        let (input, cached, total) = (n("input_tokens"), n("cached"), n("total_tokens"));
        self.usage = TokenUsage {
            input_tokens: input.saturating_sub(cached),
            output_tokens: (total.checked_sub(input).filter(|o| *o > 0))
                .unwrap_or(n("output_tokens")),
            cache_read_input_tokens: cached,
            cache_creation_input_tokens: 0,
        };
        self.result = Some((truncate_chars(status, 40), error.unwrap_or_default()));
        out.push(self.event(E::OtherMessage, &format!("result status={status}")));
        out
    }
}

impl TurnParser for StreamParser {
    fn parse_line(&mut self, line: &str) -> Vec<AgentEvent> {
        let line = line.trim();
        if line.is_empty() {
            return Vec::new();
        }
        let v: Value = match serde_json::from_str(line) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => return vec![self.event(E::Malformed, "non-object JSON line")],
            Err(e) => return vec![self.event(E::Malformed, &format!("non-JSON line ({e})"))],
        };
        let (kind, text) = match str_at(&v, "type").unwrap_or("") {
            "init" => {
                self.saw_init = true;
                let model = str_at(&v, "model").unwrap_or("?");
                (E::SessionStarted, format!("session started model={model}"))
            }
            "message" if str_at(&v, "role") == Some("assistant") => {
                let chunk = str_at(&v, "content").unwrap_or("");
                if self.text.chars().count() < SUMMARY_MAX {
                    self.text.push_str(&truncate_chars(chunk, SUMMARY_MAX));
                }
                (E::OtherMessage, "assistant delta".into())
            }
            "message" => (E::OtherMessage, "user message".into()),
            "tool_use" => {
                let mut out = self.flush_text();
                let name = one_line(str_at(&v, "tool_name").unwrap_or("?"), 60);
                let text = format!("{name}: {}", tool_input_detail(&v["parameters"]));
                out.push(self.event(E::ToolUse, &text));
                return out;
            }
            "tool_result" if str_at(&v, "status") == Some("success") => {
                (E::OtherMessage, "tool result success".into())
            }
            "tool_result" => {
                let e = &v["error"];
                let kind = str_at(e, "type").unwrap_or("?");
                let text = format!("tool error {kind}: {}", str_at(e, "message").unwrap_or(""));
                // Default approval mode does not offer write tools: a call to one is a denial.
                match kind {
                    "tool_not_registered" => (E::PermissionDenied, text),
                    _ => (E::Notification, text),
                }
            }
            "result" => return self.on_result(&v),
            "" => (E::Malformed, "JSON line without a type".into()),
            other => (
                E::OtherMessage,
                format!("unhandled type {}", one_line(other, 40)),
            ),
        };
        vec![self.event(kind, &text)]
    }

    fn event(&self, kind: E, summary: &str) -> AgentEvent {
        let text = one_line(summary, SUMMARY_MAX);
        AgentEvent::of(kind, text, Some(&self.session), self.turn)
    }

    fn result_seen(&self) -> bool {
        self.result.is_some()
    }

    fn outcome(&self, end: &ProcessEnd) -> TurnResult {
        let err = |k, m: String| Err(AgentError::new(k, m));
        if let Some(e) = end.stopped() {
            return Err(e);
        }
        let exit = end.describe();
        match (&self.result, end.exit_code) {
            (Some((s, _)), Some(0)) if s == "success" => Ok(()),
            (Some((s, _)), _) if s == "success" => err(
                K::ProcessExit,
                format!("result was a success but the process ended with {exit}"),
            ),
            (Some((s, e)), _) => err(K::TurnFailed, format!("status={s}: {e} ({exit})")),
            (None, Some(0 | 127)) => Err(end.without_result()),
            (None, _) if !self.saw_init => err(
                K::StartupFailed,
                format!("gemini did not start ({exit}){}", end.stderr_note()),
            ),
            (None, _) => Err(end.without_result()),
        }
    }

    fn usage(&self) -> Option<TokenUsage> {
        Some(self.usage)
    }

    /// A process that printed its init line has stored the session.
    fn stored(&self) -> bool {
        self.saw_init
    }

    /// Exit 42 with nothing on stdout: `--resume` of a session the CLI does not have.
    fn unknown_resume(&self, end: &ProcessEnd) -> bool {
        !self.saw_init && end.exit_code == Some(42)
    }
}
