//! Google Gemini CLI adapter, built against `@google/gemini-cli@0.61.0` in headless mode.
//!
//! Every turn is one `gemini --prompt=<prompt> --output-format stream-json --skip-trust …`
//! process run by the turn driver (`bash -lc '<gemini.command> "$@"'`, the prompt a positional
//! argument no shell parses, cwd = workspace, stdin `/dev/null`).
//!
//! * **Sessions**: Baton picks a UUIDv4 and passes `--session-id=<uuid>` on the first turn and
//!   `--resume=<uuid>` later (and after a restart); a resume the CLI does not know (exit 42,
//!   nothing on stdout) falls back once per turn to a new session in the same workspace.
//! * **Outcome**: success only on a `result` line with `status: "success"` and exit 0: SIGTERM
//!   ends the CLI with exit 0 and no result, and API errors exit with the HTTP status truncated
//!   to 8 bits (429 → 173).
//! * **Usage**: `result.stats` is per invocation; `cached` is a subset of `input_tokens`, and
//!   `total_tokens` also counts thoughts, which are billed as output.
//! * **Settings**: `--skip-trust` trusts the workspace for the run only. With `gemini.auth_type`
//!   set, the CLI runs with a Baton-owned home (`GEMINI_CLI_HOME`, see [`cli_home`]) whose
//!   settings select that auth type; the service user's own `~/.gemini` is never written.

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::copilot::new_uuid_v4;
use super::driver::{run_invocation, terminal_event_kind, Limits, ProcessEnd, TurnParser};
use super::json::{one_line, str_at, tool_input_detail};
use super::runner::CliRunner;
use super::{
    check_cwd_on, usable_session_id, AgentError, AgentErrorKind as K, AgentEvent,
    AgentEventKind as E, AgentRunner, AgentSession, CancelToken, Emit, SessionContext, TokenUsage,
    TurnResult,
};
use crate::host::{Host, ProcessSpec};
use crate::text::truncate_chars;
use crate::workflow::config::{AgentKind, GeminiConfig};

/// Longest event summary (characters).
const SUMMARY_MAX: usize = 200;
/// The CLI's exit code for a `--resume` of an unknown session.
const EXIT_UNKNOWN_SESSION: i32 = 42;

/// Builds Gemini sessions from `gemini.*`.
pub type GeminiRunner = CliRunner<GeminiConfig>;

impl AgentRunner for GeminiRunner {
    fn start_session(&self, ctx: &SessionContext) -> Result<Box<dyn AgentSession>, AgentError> {
        let cwd = check_cwd_on(ctx.host.as_ref(), &ctx.workspace, &ctx.workspace_root)?;
        let startup = |m: String| AgentError::new(K::StartupFailed, m);
        let resume = ctx.resume_session_id.as_deref();
        let resume = usable_session_id(AgentKind::Gemini, resume, &ctx.issue_identifier);
        let session_id = match &resume {
            Some(id) => id.to_ascii_lowercase(),
            None => new_uuid_v4().map_err(|e| startup(format!("no randomness: {e}")))?,
        };
        Ok(Box::new(GeminiSession {
            runner: self.clone(),
            host: Arc::clone(&ctx.host),
            cwd,
            workspace_root: ctx.workspace_root.clone(),
            issue_identifier: ctx.issue_identifier.clone(),
            session_id,
            session_exists: resume.is_some(),
            turn: 0,
        }))
    }
}

/// The Gemini home Baton owns for `session` when `gemini.auth_type` is set:
/// `$XDG_STATE_HOME` (or `~/.local/state`) `/baton/gemini/<session>`, mode 0700, with
/// `.gemini/settings.json` (0600) selecting the auth type, no update checks and no usage
/// statistics, rewritten before every run. The CLI keeps that session's history there, so a
/// restart finds it again. (Gemini reads system settings files only when root owns them and
/// their directories, which a service user cannot arrange.)
fn cli_home(auth_type: &str, session: &str) -> std::io::Result<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .ok_or_else(|| std::io::Error::other("neither XDG_STATE_HOME nor HOME is set"))?;
    let home = base.join("baton/gemini").join(session);
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(home.join(".gemini"))?;
    let settings = serde_json::json!({
        "security": {"auth": {"selectedType": auth_type}},
        "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
        "privacy": {"usageStatisticsEnabled": false},
    });
    let file = home.join(".gemini/settings.json");
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(file)?;
    std::io::Write::write_all(&mut f, settings.to_string().as_bytes())?;
    Ok(home)
}

/// One Gemini session in one workspace: turns run as successive CLI processes on one session id.
#[derive(Debug)]
struct GeminiSession {
    runner: GeminiRunner,
    host: Arc<dyn Host>,
    cwd: PathBuf,
    workspace_root: PathBuf,
    issue_identifier: String,
    session_id: String,
    /// True once the CLI has (probably) stored the session, so the next turn resumes it.
    session_exists: bool,
    turn: u32,
}

/// The CLI arguments of one turn (everything after `<gemini.command>`). Values are attached with
/// `=` so a prompt or id starting with `-` is never read as a flag.
pub(crate) fn gemini_args(
    cfg: &GeminiConfig,
    prompt: &str,
    session: &str,
    resume: bool,
) -> Vec<OsString> {
    let mut p = OsString::from("--prompt=");
    p.push(prompt);
    let flag = if resume { "--resume" } else { "--session-id" };
    let mut a: Vec<OsString> = vec![
        p,
        "--output-format".into(),
        "stream-json".into(),
        "--skip-trust".into(),
        format!("--approval-mode={}", cfg.approval_mode).into(),
        format!("{flag}={session}").into(),
    ];
    if let Some(m) = cfg.cli.model.as_deref().filter(|m| !m.is_empty()) {
        a.push(format!("--model={m}").into());
    }
    a.extend(cfg.cli.extra_args.iter().map(OsString::from));
    a
}

impl GeminiSession {
    fn invoke(
        &mut self,
        prompt: &str,
        cancel: &CancelToken,
        emit: &mut Emit,
        limits: Limits,
    ) -> Result<(StreamParser, ProcessEnd, u32), AgentError> {
        let cfg = &self.runner.cfg;
        let mut spec = ProcessSpec::command(&cfg.cli.command, self.cwd.clone());
        let resume = self.session_exists;
        spec.args
            .extend(gemini_args(cfg, prompt, &self.session_id, resume));
        if !cfg.auth_type.is_empty() {
            let home = cli_home(&cfg.auth_type, &self.session_id)
                .map_err(|e| AgentError::new(K::StartupFailed, format!("gemini home: {e}")))?;
            spec.env("GEMINI_CLI_HOME", home);
        }
        spec.env("BATON_ISSUE_IDENTIFIER", self.issue_identifier.clone());
        self.runner.apply(&mut spec);
        log::info!(
            "gemini turn starting issue_identifier={} session_id={}-{} mode={}",
            self.issue_identifier,
            self.session_id,
            self.turn,
            if resume { "resume" } else { "new" }
        );
        let mut parser = StreamParser::new(format!("{}-{}", self.session_id, self.turn));
        let host = self.host.as_ref();
        let raw = self.session_id.clone();
        let mut stamp = |mut ev: AgentEvent| {
            ev.agent_session_id.get_or_insert_with(|| raw.clone());
            emit(ev)
        };
        let (end, pid) = run_invocation(host, &spec, &mut parser, limits, cancel, &mut stamp)?;
        Ok((parser, end, pid))
    }
}

impl AgentSession for GeminiSession {
    fn run_turn(&mut self, prompt: &str, cancel: &CancelToken, emit: &mut Emit) -> TurnResult {
        self.turn += 1;
        let limits = Limits {
            deadline: Instant::now()
                + Duration::from_millis(self.runner.cfg.cli.turn_timeout_ms.max(1)),
            kill_grace: self.runner.kill_grace,
        };
        let ran = check_cwd_on(self.host.as_ref(), &self.cwd, &self.workspace_root)
            .and_then(|_| self.invoke(prompt, cancel, emit, limits));
        let ran = match ran {
            Ok((p, end, _)) if self.session_exists && p.unknown_resume(&end) => {
                let fresh = new_uuid_v4().map_err(|e| {
                    AgentError::new(K::StartupFailed, format!("no randomness: {e}"))
                })?;
                let text = format!(
                    "resume of session {} failed (unknown session); continuing in new session {fresh}",
                    self.session_id
                );
                log::warn!("gemini {text} issue_identifier={}", self.issue_identifier);
                emit(p.event(E::Notification, text));
                self.session_id = fresh;
                self.session_exists = false;
                self.invoke(prompt, cancel, emit, limits)
            }
            other => other,
        };
        let (parser, end, pid) = match ran {
            Ok(r) => r,
            Err(e) => {
                emit(
                    StreamParser::new(format!("{}-{}", self.session_id, self.turn))
                        .event(E::StartupFailed, e.to_string()),
                );
                return Err(e);
            }
        };
        // A process that printed its init line has stored the session.
        self.session_exists |= parser.saw_init;
        let outcome = parser.outcome(&end);
        let mut ev = parser.event(
            terminal_event_kind(&outcome),
            match &outcome {
                Ok(()) => format!("turn {} completed", self.turn),
                Err(e) => e.to_string(),
            },
        );
        ev.agent_pid = Some(pid);
        ev.agent_session_id = Some(self.session_id.clone());
        ev.usage_delta = Some(parser.usage);
        emit(ev);
        log::info!(
            "gemini turn ended issue_identifier={} session_id={} agent_pid={pid} outcome={} input_tokens={} output_tokens={}",
            self.issue_identifier,
            parser.session,
            terminal_event_kind(&outcome).as_str(),
            parser.usage.input_tokens,
            parser.usage.output_tokens
        );
        outcome
    }

    fn agent_session_id(&self) -> Option<String> {
        Some(self.session_id.clone())
    }

    fn stop(&mut self) {
        // Every invocation is stopped and reaped before `run_turn` returns; the session's
        // history stays for a resume, like the other CLIs' session stores.
    }
}

/// Pure parser of one invocation's stream-json stdout.
#[derive(Debug, Clone)]
pub struct StreamParser {
    session: String,
    saw_init: bool,
    text: String,
    /// The `result` line: its status and error text.
    result: Option<(String, String)>,
    usage: TokenUsage,
}

impl StreamParser {
    /// A parser whose events carry `session` (`<session id>-<turn>`).
    pub fn new(session: String) -> StreamParser {
        StreamParser {
            session,
            saw_init: false,
            text: String::new(),
            result: None,
            usage: TokenUsage::default(),
        }
    }

    /// The invocation's usage (zero until the `result` line).
    pub fn usage(&self) -> TokenUsage {
        self.usage
    }

    /// Exit 42 with nothing on stdout: `--resume` of a session the CLI does not have.
    fn unknown_resume(&self, end: &ProcessEnd) -> bool {
        !self.saw_init && end.exit_code == Some(EXIT_UNKNOWN_SESSION)
    }

    /// The assistant text gathered so far, as one `assistant: …` event.
    fn flush_text(&mut self) -> Option<AgentEvent> {
        if self.text.is_empty() {
            return None;
        }
        let text = std::mem::take(&mut self.text);
        Some(self.event(E::Notification, format!("assistant: {text}")))
    }

    /// The turn's result (pure): success only on `result.status == "success"` and exit 0.
    pub fn outcome(&self, end: &ProcessEnd) -> TurnResult {
        let err = |k, m: String| Err(AgentError::new(k, m));
        let stderr = if end.stderr_tail.is_empty() {
            String::new()
        } else {
            format!("; stderr: {}", one_line(&end.stderr_tail, 500))
        };
        if end.cancelled {
            return err(K::TurnCancelled, "turn cancelled".into());
        }
        if end.timed_out {
            return err(
                K::TurnTimeout,
                "turn_timeout_ms exceeded; process group killed".into(),
            );
        }
        let exit = end.describe();
        match (&self.result, end.exit_code) {
            (Some((s, _)), Some(0)) if s == "success" => Ok(()),
            (Some((s, _)), _) if s == "success" => err(
                K::ProcessExit,
                format!("result was a success but the process ended with {exit}"),
            ),
            (Some((s, e)), _) => err(K::TurnFailed, format!("status={s}: {e} ({exit})")),
            (None, Some(127)) => err(
                K::AgentNotFound,
                format!("agent command not found (exit code 127){stderr}"),
            ),
            (None, Some(0)) => err(
                K::ParseError,
                format!("process exited 0 without a result line{stderr}"),
            ),
            (None, _) if !self.saw_init => err(
                K::StartupFailed,
                format!("gemini did not start ({exit}){stderr}"),
            ),
            (None, _) => err(
                K::ProcessExit,
                format!("process ended without a result line ({exit}){stderr}"),
            ),
        }
    }

    fn on_result(&mut self, v: &Value) -> Vec<AgentEvent> {
        let mut out: Vec<AgentEvent> = self.flush_text().into_iter().collect();
        if self.result.is_some() {
            out.push(self.event(E::Malformed, "second result line ignored".into()));
            return out;
        }
        let status = str_at(v, "status").unwrap_or("?");
        let error = v.get("error").map(|e| {
            let t = str_at(e, "type").unwrap_or("?");
            format!("{t}: {}", one_line(str_at(e, "message").unwrap_or(""), 300))
        });
        let stats = v.get("stats").unwrap_or(&Value::Null);
        let n = |k: &str| stats.get(k).and_then(Value::as_u64).unwrap_or(0);
        let (input, cached, total) = (n("input_tokens"), n("cached"), n("total_tokens"));
        self.usage = TokenUsage {
            input_tokens: input.saturating_sub(cached),
            output_tokens: total
                .checked_sub(input)
                .filter(|o| *o > 0)
                .unwrap_or(n("output_tokens")),
            cache_read_input_tokens: cached,
            cache_creation_input_tokens: 0,
        };
        self.result = Some((truncate_chars(status, 40), error.unwrap_or_default()));
        out.push(self.event(E::OtherMessage, format!("result status={status}")));
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
            Ok(_) => return vec![self.event(E::Malformed, "non-object JSON line".into())],
            Err(e) => return vec![self.event(E::Malformed, format!("non-JSON line ({e})"))],
        };
        let ev = match str_at(&v, "type").unwrap_or("") {
            "init" => {
                self.saw_init = true;
                let model = str_at(&v, "model").unwrap_or("?");
                self.event(E::SessionStarted, format!("session started model={model}"))
            }
            "message" if str_at(&v, "role") == Some("assistant") => {
                let chunk = str_at(&v, "content").unwrap_or("");
                if self.text.chars().count() < SUMMARY_MAX {
                    self.text.push_str(&truncate_chars(chunk, SUMMARY_MAX));
                }
                self.event(E::OtherMessage, "assistant delta".into())
            }
            "message" => self.event(E::OtherMessage, "user message".into()),
            "tool_use" => {
                let mut out: Vec<AgentEvent> = self.flush_text().into_iter().collect();
                let name = one_line(str_at(&v, "tool_name").unwrap_or("?"), 60);
                let detail = v
                    .get("parameters")
                    .map(tool_input_detail)
                    .unwrap_or_default();
                out.push(self.event(E::ToolUse, format!("{name}: {detail}")));
                return out;
            }
            "tool_result" if str_at(&v, "status") == Some("success") => {
                self.event(E::OtherMessage, "tool result success".into())
            }
            "tool_result" => {
                let e = v.get("error").unwrap_or(&Value::Null);
                let kind = str_at(e, "type").unwrap_or("?");
                let text = format!("tool error {kind}: {}", str_at(e, "message").unwrap_or(""));
                // Default approval mode does not offer write tools: a call to one is a denial.
                let k = if kind == "tool_not_registered" {
                    E::PermissionDenied
                } else {
                    E::Notification
                };
                self.event(k, text)
            }
            "result" => return self.on_result(&v),
            "" => self.event(E::Malformed, "JSON line without a type".into()),
            other => self.event(
                E::OtherMessage,
                format!("unhandled type {}", one_line(other, 40)),
            ),
        };
        vec![ev]
    }

    fn event(&self, kind: E, summary: String) -> AgentEvent {
        let mut ev = AgentEvent::new(kind, one_line(&summary, SUMMARY_MAX));
        ev.session_id = Some(self.session.clone());
        ev
    }

    fn result_seen(&self) -> bool {
        self.result.is_some()
    }
}
