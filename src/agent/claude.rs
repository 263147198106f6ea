//! Claude Code CLI adapter (spec §10.1, CLI subprocess mode), built against the real
//! `@anthropic-ai/claude-code@2.1.332` stream-json protocol.
//!
//! Every turn is one `claude -p … --output-format stream-json --verbose` invocation run by the turn
//! driver (`agent::driver`) on the runner's host; continuation turns add `--resume <agent_session_id>`, so the CLI's session
//! (and its id) stays the same across turns. The pure [`StreamParser`] turns stdout lines into
//! normalized [`AgentEvent`]s; the pure [`turn_outcome`] decides the turn result from the `result`
//! line and how the process ended.
//!
//! Usage (§13.5): `result.usage` is per invocation and is reported **once per turn**, as the
//! `usage_delta` of the terminal event (`turn_completed` / `turn_failed` / …). `total_cost_usd` is session-cumulative and is
//! reported as `session_cost_usd` (record the latest value, never add). Assistant-line usage is the
//! `message_start` placeholder and is ignored.

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::Value;

use super::driver::{run_invocation, terminal_event_kind, Limits, TurnParser};
use super::json::{first_detail, int_text, num_at, one_line, str_at, tool_input_detail};
use super::loose::{Loose, Object};
use super::runner::CliRunner;
use super::{
    check_cwd_on, AgentError, AgentErrorKind, AgentEvent, AgentEventKind, AgentRunner,
    AgentSession, CancelToken, Emit, SessionContext, TokenUsage, TurnResult,
};
use crate::host::{Host, ProcessSpec};
use crate::text::truncate_chars;
use crate::workflow::config::ClaudeCodeConfig;

pub use super::driver::ProcessEnd;

/// Longest event summary (characters).
pub const SUMMARY_MAX_CHARS: usize = 200;
/// Longest `ResultInfo::result_text` kept (characters); it ends the `turn_completed` summary.
pub(crate) const RESULT_TEXT_MAX_CHARS: usize = 2000;
/// The CLI clamps `CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS` to at least this.
const CLI_MIN_TIMEOUT_MS: i64 = 10_000;

/// The `result` line of one invocation, reduced to what Baton uses.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResultInfo {
    /// `subtype` (`success`, `error_max_turns`, `error_during_execution`, …).
    pub subtype: String,
    /// `is_error` (true also for API failures reported as `subtype: "success"`).
    pub is_error: bool,
    /// `terminal_reason` when present (`completed`, `api_error`, `max_turns`, …).
    pub terminal_reason: Option<String>,
    /// `api_error_status` when present.
    pub api_error_status: Option<i64>,
    /// `result` text (absent on error subtypes), truncated.
    pub result_text: Option<String>,
    /// `errors[]` (error subtypes), each truncated.
    pub errors: Vec<String>,
    /// `usage` of this invocation.
    pub usage: TokenUsage,
    /// `total_cost_usd`: cumulative over the whole session.
    pub total_cost_usd: Option<f64>,
    /// Tool names of `permission_denials[]`.
    pub permission_denials: Vec<String>,
    /// `num_turns` (model calls in this invocation).
    pub num_turns: Option<u64>,
}

/// Pure line-by-line parser of one invocation's stdout.
#[derive(Debug, Clone)]
pub struct StreamParser {
    turn_number: u32,
    emit_session_started: bool,
    agent_session_id: Option<String>,
    result: Option<ResultInfo>,
    reported_denials: HashSet<String>,
    asked_for_input: bool,
    saw_init: bool,
}

impl StreamParser {
    /// A parser for turn `turn_number` (1-based). `session_started` is emitted on the init line of
    /// turn 1 only; later turns only carry the incremented `session_id`.
    pub fn new(turn_number: u32, known_session_id: Option<String>) -> Self {
        StreamParser {
            turn_number,
            emit_session_started: turn_number <= 1,
            agent_session_id: known_session_id,
            result: None,
            reported_denials: HashSet::new(),
            asked_for_input: false,
            saw_init: false,
        }
    }

    /// The agent's session id once seen (or the one passed in).
    pub fn agent_session_id(&self) -> Option<&str> {
        self.agent_session_id.as_deref()
    }

    /// `<agent_session_id>-<turn_number>` once the agent session id is known.
    pub fn session_id(&self) -> Option<String> {
        self.agent_session_id
            .as_ref()
            .map(|id| format!("{id}-{}", self.turn_number))
    }

    /// The result line, once seen.
    pub fn result(&self) -> Option<&ResultInfo> {
        self.result.as_ref()
    }

    /// True once a `system/init` line was seen.
    pub fn saw_init(&self) -> bool {
        self.saw_init
    }

    /// True when the agent tried to ask the user something (`AskUserQuestion`) this turn.
    pub fn asked_for_input(&self) -> bool {
        self.asked_for_input
    }

    /// Parse one stdout line into zero or more events (never panics; bad lines ⇒ `malformed`).
    pub fn parse_line(&mut self, line: &str) -> Vec<AgentEvent> {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            return Vec::new();
        }
        match self.parse_fast(trimmed) {
            Some(events) => events,
            None => self.parse_value(trimmed),
        }
    }

    /// The general path: any line through a `serde_json::Value` tree.
    fn parse_value(&mut self, trimmed: &str) -> Vec<AgentEvent> {
        let value: Value = match serde_json::from_str(trimmed) {
            Ok(v) => v,
            Err(e) => {
                return vec![self.event(
                    AgentEventKind::Malformed,
                    format!("non-JSON line ({e}): {}", truncate_chars(trimmed, 80)),
                )]
            }
        };
        let Some(obj) = value.as_object() else {
            return vec![self.event(
                AgentEventKind::Malformed,
                format!("non-object JSON line: {}", truncate_chars(trimmed, 80)),
            )];
        };
        if self.agent_session_id.is_none() {
            if let Some(id) = obj.get("session_id").and_then(Value::as_str) {
                if !id.is_empty() {
                    self.agent_session_id = Some(truncate_chars(id, 128));
                }
            }
        }
        let ty = obj.get("type").and_then(Value::as_str).unwrap_or("");
        match ty {
            "system" => self.parse_system(&value),
            "assistant" => self.parse_assistant(&value),
            "user" => vec![self.event(AgentEventKind::OtherMessage, summarize_user(&value))],
            "result" => self.parse_result(&value),
            "rate_limit_event" => vec![self.parse_rate_limit(&value)],
            "" => vec![self.event(AgentEventKind::Malformed, "JSON line without a type")],
            other => vec![self.event(
                AgentEventKind::OtherMessage,
                format!("unhandled message type {}", truncate_chars(other, 40)),
            )],
        }
    }

    /// `{"type":"rate_limit_event","rate_limit_info":{"status",…}}` (see the protocol notes:
    /// emitted for subscription logins, not with an API key). Unknown shapes are `malformed`.
    fn parse_rate_limit(&self, v: &Value) -> AgentEvent {
        let Some(info) = v.get("rate_limit_info").filter(|i| i.is_object()) else {
            return self.event(
                AgentEventKind::Malformed,
                "rate_limit_event without rate_limit_info",
            );
        };
        let text = |k: &str| {
            info.get(k)
                .and_then(Value::as_str)
                .map(|s| crate::text::single_line(s, 40))
        };
        let Some(status) = text("status") else {
            // Tolerated like other partial lines of a known type; nothing to record.
            return self.event(
                AgentEventKind::OtherMessage,
                "rate_limit_event without a status",
            );
        };
        let resets_at = info
            .get("resetsAt")
            .and_then(Value::as_u64)
            // Capped at year 9999: a hostile number must not overflow the time arithmetic.
            .map(|s| {
                crate::timefmt::rfc3339(UNIX_EPOCH + Duration::from_secs(s.min(253_402_300_799)))
            });
        let limits = crate::agent::AgentRateLimits {
            rate_limit_type: text("rateLimitType"),
            utilization: info
                .get("utilization")
                .and_then(Value::as_f64)
                .filter(|u| u.is_finite())
                .map(|u| u.clamp(0.0, 1.0)),
            resets_at,
            overage_status: text("overageStatus"),
            is_using_overage: info.get("isUsingOverage").and_then(Value::as_bool),
            status,
        };
        let mut ev = self.event(
            AgentEventKind::Notification,
            format!(
                "rate limit {} ({})",
                limits.status,
                limits.rate_limit_type.as_deref().unwrap_or("?")
            ),
        );
        ev.rate_limits = Some(limits);
        ev
    }

    /// An event stamped with this turn's session id.
    pub fn event(&self, kind: AgentEventKind, summary: impl Into<String>) -> AgentEvent {
        self.event_text(kind, &summary.into())
    }

    /// [`Self::event`] from borrowed text (only the bounded summary is copied).
    fn event_text(&self, kind: AgentEventKind, text: &str) -> AgentEvent {
        let mut ev = AgentEvent::new(kind, one_line(text, SUMMARY_MAX_CHARS));
        ev.session_id = self.session_id();
        ev.agent_session_id.clone_from(&self.agent_session_id);
        ev
    }

    /// The typed fast path for `assistant` and `user` lines, the bulk of a stream: no
    /// `serde_json::Value` tree, text borrowed from the line, tool results skipped unread.
    /// `None` for any other line, or one of an unexpected shape: the `Value` path handles it
    /// (and its exact messages).
    fn parse_fast(&mut self, line: &str) -> Option<Vec<AgentEvent>> {
        let Object(view): Object<FastLine> = serde_json::from_str(line).ok()?;
        let ty = view.ty.as_str()?;
        if ty != "assistant" && ty != "user" {
            return None;
        }
        if self.agent_session_id.is_none() {
            if let Some(id) = view.session_id.as_str().filter(|id| !id.is_empty()) {
                self.agent_session_id = Some(truncate_chars(id, 128));
            }
        }
        let blocks = view.message.and_then(|m| m.0.content);
        if ty == "user" {
            let blocks = blocks.as_deref().unwrap_or(&[]);
            let results = blocks
                .iter()
                .filter(|b| b.0.ty.as_str() == Some("tool_result"))
                .count();
            let errors = blocks
                .iter()
                .filter(|b| b.0.is_error.as_bool() == Some(true))
                .count();
            return Some(vec![
                self.event(AgentEventKind::OtherMessage, user_summary(results, errors))
            ]);
        }
        let Some(blocks) = blocks else {
            return Some(vec![
                self.event(AgentEventKind::OtherMessage, "assistant message")
            ]);
        };
        let api_error = view.is_api_error_message.as_bool() == Some(true);
        let out = blocks
            .iter()
            .map(|Object(b)| {
                let detail = b.input.as_ref().map(|i| i.0.detail()).unwrap_or_default();
                let block = BlockView {
                    ty: b.ty.as_str().unwrap_or(""),
                    text: b.text.as_str(),
                    name: b.name.as_str(),
                    detail,
                };
                self.assistant_block(block, api_error)
            })
            .collect();
        Some(out)
    }

    /// The event of one assistant content block (both parse paths).
    fn assistant_block(&mut self, b: BlockView<'_>, api_error: bool) -> AgentEvent {
        match b.ty {
            "text" => {
                let text = b.text.unwrap_or("");
                if api_error {
                    self.event(AgentEventKind::Notification, format!("api error: {text}"))
                } else {
                    self.event_text(AgentEventKind::Notification, text)
                }
            }
            "tool_use" => {
                let name = b.name.unwrap_or("?");
                if name == "AskUserQuestion" {
                    self.asked_for_input = true;
                }
                let summary = if b.detail.is_empty() {
                    truncate_chars(name, 60)
                } else {
                    format!("{}: {}", truncate_chars(name, 60), b.detail)
                };
                self.event(AgentEventKind::ToolUse, summary)
            }
            "thinking" | "redacted_thinking" => {
                self.event(AgentEventKind::OtherMessage, "thinking")
            }
            other => self.event(
                AgentEventKind::OtherMessage,
                format!("assistant {} block", truncate_chars(other, 40)),
            ),
        }
    }

    fn parse_system(&mut self, v: &Value) -> Vec<AgentEvent> {
        let subtype = str_at(v, "subtype").unwrap_or("");
        match subtype {
            "init" => {
                self.saw_init = true;
                if let Some(id) = str_at(v, "session_id") {
                    if !id.is_empty() {
                        self.agent_session_id = Some(truncate_chars(id, 128));
                    }
                }
                let summary = format!(
                    "session {} model={} permission_mode={} version={}",
                    if self.emit_session_started {
                        "started"
                    } else {
                        "resumed"
                    },
                    str_at(v, "model").unwrap_or("?"),
                    str_at(v, "permissionMode").unwrap_or("?"),
                    str_at(v, "claude_code_version").unwrap_or("?"),
                );
                let kind = if self.emit_session_started {
                    self.emit_session_started = false;
                    AgentEventKind::SessionStarted
                } else {
                    AgentEventKind::OtherMessage
                };
                vec![self.event(kind, summary)]
            }
            "permission_denied" => {
                let tool = str_at(v, "tool_name").unwrap_or("?");
                if let Some(id) = str_at(v, "tool_use_id") {
                    self.reported_denials.insert(id.to_string());
                }
                let msg = str_at(v, "message")
                    .or_else(|| str_at(v, "decision_reason"))
                    .unwrap_or("");
                vec![self.event(
                    AgentEventKind::PermissionDenied,
                    format!("{}: {msg}", truncate_chars(tool, 60)),
                )]
            }
            "api_retry" => {
                let status = int_text(v, "error_status", "none");
                vec![self.event(
                    AgentEventKind::Notification,
                    format!(
                        "api retry attempt={}/{} error={} status={status} delay_ms={}",
                        num_at(v, "attempt"),
                        num_at(v, "max_retries"),
                        str_at(v, "error").unwrap_or("?"),
                        num_at(v, "retry_delay_ms"),
                    ),
                )]
            }
            other => vec![self.event(
                AgentEventKind::OtherMessage,
                format!("system/{}", truncate_chars(other, 40)),
            )],
        }
    }

    fn parse_assistant(&mut self, v: &Value) -> Vec<AgentEvent> {
        let Some(content) = v.pointer("/message/content").and_then(Value::as_array) else {
            return vec![self.event(AgentEventKind::OtherMessage, "assistant message")];
        };
        let api_error = v.get("is_api_error_message").and_then(Value::as_bool) == Some(true);
        content
            .iter()
            .map(|block| {
                let view = BlockView {
                    ty: str_at(block, "type").unwrap_or(""),
                    text: str_at(block, "text"),
                    name: str_at(block, "name"),
                    detail: block
                        .get("input")
                        .map(tool_input_detail)
                        .unwrap_or_default(),
                };
                self.assistant_block(view, api_error)
            })
            .collect()
    }

    fn parse_result(&mut self, v: &Value) -> Vec<AgentEvent> {
        let usage = v.get("usage").map(parse_usage).unwrap_or_default();
        let mut denials = Vec::new();
        let mut out = Vec::new();
        if let Some(list) = v.get("permission_denials").and_then(Value::as_array) {
            for d in list {
                let tool = str_at(d, "tool_name").unwrap_or("?");
                denials.push(truncate_chars(tool, 60));
                let id = str_at(d, "tool_use_id").unwrap_or("");
                if id.is_empty() || !self.reported_denials.contains(id) {
                    if !id.is_empty() {
                        self.reported_denials.insert(id.to_string());
                    }
                    out.push(self.event(
                        AgentEventKind::PermissionDenied,
                        format!("{}: denied (reported in result)", truncate_chars(tool, 60)),
                    ));
                }
            }
        }
        let info = ResultInfo {
            subtype: str_at(v, "subtype").unwrap_or("").to_string(),
            is_error: v.get("is_error").and_then(Value::as_bool).unwrap_or(true),
            terminal_reason: str_at(v, "terminal_reason").map(|s| truncate_chars(s, 60)),
            api_error_status: v.get("api_error_status").and_then(Value::as_i64),
            result_text: str_at(v, "result").map(|s| truncate_chars(s, RESULT_TEXT_MAX_CHARS)),
            errors: v
                .get("errors")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .take(10)
                        .map(|e| match e.as_str() {
                            Some(s) => truncate_chars(s, 300),
                            None => truncate_chars(&e.to_string(), 300),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            usage,
            total_cost_usd: v
                .get("total_cost_usd")
                .and_then(Value::as_f64)
                .filter(|c| c.is_finite() && *c >= 0.0),
            permission_denials: denials,
            num_turns: v.get("num_turns").and_then(Value::as_u64),
        };
        // Only the first result line of an invocation counts (a `-p` run has exactly one).
        if self.result.is_none() {
            self.result = Some(info);
        } else {
            out.push(self.event(AgentEventKind::Malformed, "second result line ignored"));
        }
        out
    }
}

/// The turn result for `result` + `end` (pure; spec §10.0/§10.3); it picks the terminal event kind.
///
/// Success only when the result has `is_error: false` *and* the process exited 0.
pub fn turn_outcome(
    result: Option<&ResultInfo>,
    end: &ProcessEnd,
    asked_for_input: bool,
) -> Result<(), AgentError> {
    let with_stderr = |m: String| {
        if end.stderr_tail.is_empty() {
            m
        } else {
            format!("{m}; stderr: {}", one_line(&end.stderr_tail, 500))
        }
    };
    if end.cancelled {
        return Err(AgentError::new(
            AgentErrorKind::TurnCancelled,
            "turn cancelled",
        ));
    }
    if end.timed_out {
        return Err(AgentError::new(
            AgentErrorKind::TurnTimeout,
            "turn_timeout_ms exceeded; process group killed",
        ));
    }
    let code = end.exit_code;
    let exit_desc = end.describe();
    let Some(r) = result else {
        if code == Some(127) {
            return Err(AgentError::new(
                AgentErrorKind::AgentNotFound,
                with_stderr("agent command not found (exit code 127)".into()),
            ));
        }
        if code == Some(0) {
            return Err(AgentError::new(
                AgentErrorKind::ParseError,
                with_stderr("process exited 0 without a result line".into()),
            ));
        }
        return Err(AgentError::new(
            AgentErrorKind::ProcessExit,
            with_stderr(format!("process ended without a result line ({exit_desc})")),
        ));
    };
    let requires_input = asked_for_input
        || r.permission_denials.iter().any(|t| t == "AskUserQuestion")
        || r.terminal_reason
            .as_deref()
            .is_some_and(|t| t.starts_with("tool_deferred"));
    if requires_input {
        return Err(AgentError::new(
            AgentErrorKind::TurnInputRequired,
            "the agent asked for user input; headless turns never wait",
        ));
    }
    if !r.is_error && code == Some(0) {
        return Ok(());
    }
    if !r.is_error {
        return Err(AgentError::new(
            AgentErrorKind::ProcessExit,
            with_stderr(format!(
                "result was a success but the process ended with {exit_desc}"
            )),
        ));
    }
    Err(AgentError::new(
        AgentErrorKind::TurnFailed,
        failure_detail(r, &exit_desc),
    ))
}

/// `subtype=… terminal_reason=… api_error_status=…: <text> (<exit>)` for a failed result.
fn failure_detail(r: &ResultInfo, exit_desc: &str) -> String {
    let mut detail = format!("subtype={}", r.subtype);
    if let Some(t) = &r.terminal_reason {
        detail.push_str(&format!(" terminal_reason={t}"));
    }
    if let Some(s) = r.api_error_status {
        detail.push_str(&format!(" api_error_status={s}"));
    }
    if let Some(t) = &r.result_text {
        detail.push_str(&format!(": {}", one_line(t, 300)));
    }
    if !r.errors.is_empty() {
        detail.push_str(&format!(": {}", one_line(&r.errors.join("; "), 300)));
    }
    detail.push_str(&format!(" ({exit_desc})"));
    detail
}

/// The CLI arguments of one turn (everything after `<command>`). The prompt comes last, after
/// `--`, so neither a shell nor the CLI's option parser can read it as anything but the prompt.
pub(crate) fn claude_args(
    cfg: &ClaudeCodeConfig,
    resume: Option<&str>,
    prompt: &str,
) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |s: &str| a.push(OsString::from(s));
    push("-p");
    push("--output-format");
    push("stream-json");
    push("--verbose");
    push("--permission-mode");
    push(&cfg.permission_mode);
    if let Some(m) = cfg.cli.model.as_deref().filter(|m| !m.is_empty()) {
        push("--model");
        push(m);
    }
    if !cfg.allowed_tools.is_empty() {
        push("--allowedTools");
        for t in &cfg.allowed_tools {
            push(t);
        }
    }
    if !cfg.disallowed_tools.is_empty() {
        push("--disallowedTools");
        for t in &cfg.disallowed_tools {
            push(t);
        }
    }
    if let Some(p) = cfg
        .append_system_prompt
        .as_deref()
        .filter(|p| !p.is_empty())
    {
        push("--append-system-prompt");
        push(p);
    }
    if let Some(id) = resume {
        push("--resume");
        push(id);
    }
    for e in &cfg.cli.extra_args {
        push(e);
    }
    push("--");
    push(prompt);
    a
}

/// Environment timeouts set for the child so the CLI fails by itself before Baton's stall timer:
/// `API_TIMEOUT_MS` and `CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS` = max(10000, 2/5 × stall_timeout_ms)
/// (the byte-idle watchdog retries once silently, so twice the value must stay below the stall
/// timeout). Variables already present in `operator_env` are left alone; nothing when stall
/// detection is disabled (`stall_timeout_ms <= 0`).
pub(crate) fn child_timeout_env(
    stall_timeout_ms: i64,
    operator_env: impl Fn(&str) -> bool,
) -> Vec<(String, String)> {
    if stall_timeout_ms <= 0 {
        return Vec::new();
    }
    let v = (stall_timeout_ms.saturating_mul(2) / 5).max(CLI_MIN_TIMEOUT_MS);
    ["API_TIMEOUT_MS", "CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS"]
        .into_iter()
        .filter(|k| !operator_env(k))
        .map(|k| (k.to_string(), v.to_string()))
        .collect()
}

/// Builds Claude sessions from `claude_code.*`.
pub type ClaudeRunner = CliRunner<ClaudeCodeConfig>;

impl AgentRunner for ClaudeRunner {
    fn start_session(&self, ctx: &SessionContext) -> Result<Box<dyn AgentSession>, AgentError> {
        let cwd = check_cwd_on(ctx.host.as_ref(), &ctx.workspace, &ctx.workspace_root)?;
        Ok(Box::new(ClaudeSession {
            runner: self.clone(),
            host: Arc::clone(&ctx.host),
            cwd,
            workspace_root: ctx.workspace_root.clone(),
            issue_identifier: ctx.issue_identifier.clone(),
            agent_session_id: ctx.resume_session_id.clone(),
            turn_number: 0,
        }))
    }
}

/// One Claude session: a sequence of `-p` invocations sharing the CLI's session via `--resume`.
/// No process outlives `run_turn`.
#[derive(Debug)]
pub(crate) struct ClaudeSession {
    runner: ClaudeRunner,
    host: Arc<dyn Host>,
    cwd: PathBuf,
    workspace_root: PathBuf,
    issue_identifier: String,
    agent_session_id: Option<String>,
    turn_number: u32,
}

impl ClaudeSession {
    fn spec(&self, prompt: &str) -> ProcessSpec {
        let cfg = &self.runner.cfg;
        let mut spec = ProcessSpec::command(&cfg.cli.command, self.cwd.clone());
        spec.args
            .extend(claude_args(cfg, self.agent_session_id.as_deref(), prompt));
        for (k, v) in child_timeout_env(cfg.cli.stall_timeout_ms, |k| self.runner.sets_env(k)) {
            spec.env(k, v);
        }
        spec.env("BATON_ISSUE_IDENTIFIER", self.issue_identifier.clone());
        self.runner.apply(&mut spec);
        spec
    }
}

/// The driver's view of one Claude invocation.
struct Invocation<'a> {
    parser: StreamParser,
    issue_identifier: &'a str,
    resume: bool,
}

impl TurnParser for Invocation<'_> {
    fn started(&mut self, pid: u32) -> Vec<AgentEvent> {
        log::info!(
            "claude turn started issue_identifier={} turn={} agent_pid={pid} resume={}",
            self.issue_identifier,
            self.parser.turn_number,
            self.resume
        );
        Vec::new()
    }

    fn parse_line(&mut self, line: &str) -> Vec<AgentEvent> {
        self.parser.parse_line(line)
    }

    fn event(&self, kind: AgentEventKind, summary: String) -> AgentEvent {
        self.parser.event(kind, summary)
    }

    fn result_seen(&self) -> bool {
        self.parser.result.is_some()
    }
}

impl AgentSession for ClaudeSession {
    fn run_turn(&mut self, prompt: &str, cancel: &CancelToken, emit: &mut Emit) -> TurnResult {
        self.turn_number += 1;
        let turn = self.turn_number;
        let started = Instant::now();
        let limits = Limits {
            deadline: started + Duration::from_millis(self.runner.cfg.cli.turn_timeout_ms.max(1)),
            kill_grace: self.runner.kill_grace,
        };
        let mut inv = Invocation {
            parser: StreamParser::new(turn, self.agent_session_id.clone()),
            issue_identifier: &self.issue_identifier,
            resume: self.agent_session_id.is_some(),
        };
        // Re-check containment right before every launch (the workspace may have changed), then run.
        let host = self.host.as_ref();
        let ran = check_cwd_on(host, &self.cwd, &self.workspace_root)
            .and_then(|_| run_invocation(host, &self.spec(prompt), &mut inv, limits, cancel, emit));
        let parser = inv.parser;
        let (end, pid) = match ran {
            Ok(r) => r,
            Err(e) => {
                emit(parser.event(AgentEventKind::StartupFailed, e.to_string()));
                return Err(e);
            }
        };
        log::debug!(
            "claude process ended issue_identifier={} agent_pid={pid} {}",
            self.issue_identifier,
            end.describe()
        );
        if end.exit_code == Some(127) && parser.result().is_none() {
            log::warn!(
                "claude command not found issue_identifier={} command={:?}",
                self.issue_identifier,
                self.runner.cfg.cli.command
            );
        }
        if let Some(id) = parser.agent_session_id() {
            self.agent_session_id = Some(id.to_string());
        }
        let outcome = turn_outcome(parser.result(), &end, parser.asked_for_input());
        let summary_text = match &outcome {
            Ok(()) => format!(
                "turn {turn} completed in {} ms{}",
                started.elapsed().as_millis(),
                parser
                    .result()
                    .and_then(|r| r.result_text.as_deref())
                    .map(|t| format!(": {t}"))
                    .unwrap_or_default()
            ),
            Err(e) => e.to_string(),
        };
        let mut ev = parser.event(terminal_event_kind(&outcome), summary_text);
        ev.agent_pid = Some(pid);
        ev.usage_delta = parser.result().map(|r| r.usage);
        ev.session_cost_usd = parser.result().and_then(|r| r.total_cost_usd);
        emit(ev);
        let session_id = parser.session_id().unwrap_or_default();
        match &outcome {
            Ok(_) => log::info!(
                "claude turn completed issue_identifier={} session_id={session_id} turn={turn}",
                self.issue_identifier,
            ),
            Err(e) => log::warn!(
                "claude turn failed issue_identifier={} session_id={session_id} turn={turn} error={e}",
                self.issue_identifier,
            ),
        }
        outcome
    }

    fn agent_session_id(&self) -> Option<String> {
        self.agent_session_id.clone()
    }

    fn stop(&mut self) {
        // Every invocation is terminated and reaped before `run_turn` returns: nothing to stop.
    }
}

fn parse_usage(u: &Value) -> TokenUsage {
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    TokenUsage {
        input_tokens: n("input_tokens"),
        output_tokens: n("output_tokens"),
        cache_read_input_tokens: n("cache_read_input_tokens"),
        cache_creation_input_tokens: n("cache_creation_input_tokens"),
    }
}

fn summarize_user(v: &Value) -> String {
    let blocks = v
        .pointer("/message/content")
        .and_then(Value::as_array)
        .map(|a| a.as_slice())
        .unwrap_or(&[]);
    let results = blocks
        .iter()
        .filter(|b| str_at(b, "type") == Some("tool_result"))
        .count();
    let errors = blocks
        .iter()
        .filter(|b| b.get("is_error").and_then(Value::as_bool) == Some(true))
        .count();
    user_summary(results, errors)
}

/// The summary of a `user` line with `results` tool results, `errors` of them failed.
fn user_summary(results: usize, errors: usize) -> String {
    if results > 0 {
        format!("tool results={results} errors={errors}")
    } else {
        "user message".into()
    }
}

/// One assistant content block, from either parse path.
struct BlockView<'b> {
    ty: &'b str,
    text: Option<&'b str>,
    name: Option<&'b str>,
    /// The tool call's most telling argument (see `tool_input_detail`).
    detail: String,
}

/// The fast path's view of an `assistant` / `user` line (see [`StreamParser::parse_fast`]).
#[derive(Deserialize)]
struct FastLine<'a> {
    #[serde(rename = "type", borrow, default)]
    ty: Loose<'a>,
    #[serde(borrow, default)]
    session_id: Loose<'a>,
    #[serde(borrow, default)]
    message: Option<Object<FastMessage<'a>>>,
    #[serde(borrow, default)]
    is_api_error_message: Loose<'a>,
}

/// `message` of a [`FastLine`].
#[derive(Deserialize)]
struct FastMessage<'a> {
    #[serde(borrow, default)]
    content: Option<Vec<Object<FastBlock<'a>>>>,
}

/// One block of `message.content`; everything else in it (tool results…) is skipped unread.
#[derive(Deserialize)]
struct FastBlock<'a> {
    #[serde(rename = "type", borrow, default)]
    ty: Loose<'a>,
    #[serde(borrow, default)]
    text: Loose<'a>,
    #[serde(borrow, default)]
    name: Loose<'a>,
    #[serde(borrow, default)]
    input: Option<Object<FastInput<'a>>>,
    #[serde(borrow, default)]
    is_error: Loose<'a>,
}

/// The tool-call arguments `tool_input_detail` looks at, in its order.
#[derive(Deserialize)]
struct FastInput<'a> {
    #[serde(borrow, default)]
    command: Loose<'a>,
    #[serde(borrow, default)]
    file_path: Loose<'a>,
    #[serde(borrow, default)]
    path: Loose<'a>,
    #[serde(borrow, default)]
    pattern: Loose<'a>,
    #[serde(borrow, default)]
    url: Loose<'a>,
    #[serde(borrow, default)]
    description: Loose<'a>,
    #[serde(borrow, default)]
    prompt: Loose<'a>,
}

impl FastInput<'_> {
    fn detail(&self) -> String {
        first_detail([
            self.command.as_str(),
            self.file_path.as_str(),
            self.path.as_str(),
            self.pattern.as_str(),
            self.url.as_str(),
            self.description.as_str(),
            self.prompt.as_str(),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limit_events_become_bounded_rate_limit_state() {
        let mut p = StreamParser::new(1, None);
        let ev = p.parse_line(
            r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning","resetsAt":1764000000,"rateLimitType":"five_hour","utilization":0.91,"overageStatus":"allowed","isUsingOverage":false},"session_id":"s"}"#,
        );
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].kind, AgentEventKind::Notification);
        let rl = ev[0].rate_limits.clone().unwrap();
        assert_eq!(rl.status, "allowed_warning");
        assert_eq!(rl.rate_limit_type.as_deref(), Some("five_hour"));
        assert_eq!(rl.utilization, Some(0.91));
        assert_eq!(rl.resets_at.as_deref(), Some("2025-11-24T16:00:00Z"));
        assert_eq!(rl.is_using_overage, Some(false));
        // Hostile values: a huge reset time, an out-of-range utilization, a long multi-line status.
        let ev = p.parse_line(&format!(
            r#"{{"type":"rate_limit_event","rate_limit_info":{{"status":"{}\nx","resetsAt":18446744073709551615,"utilization":7}}}}"#,
            "r".repeat(500)
        ));
        let rl = ev[0].rate_limits.clone().unwrap();
        assert!(rl.status.chars().count() <= 41 && !rl.status.contains('\n'));
        assert_eq!(rl.resets_at.as_deref(), Some("9999-12-31T23:59:59Z"));
        assert_eq!(rl.utilization, Some(1.0));
        for (bad, kind) in [
            (r#"{"type":"rate_limit_event"}"#, AgentEventKind::Malformed),
            (
                r#"{"type":"rate_limit_event","rate_limit_info":[1]}"#,
                AgentEventKind::Malformed,
            ),
            (
                r#"{"type":"rate_limit_event","rate_limit_info":{"utilization":0.5}}"#,
                AgentEventKind::OtherMessage,
            ),
        ] {
            let ev = p.parse_line(bad);
            assert_eq!(ev[0].kind, kind, "{bad}");
            assert!(ev[0].rate_limits.is_none());
        }
    }

    #[test]
    fn fast_path_matches_the_value_path() {
        let lines = [
            r#"{"type":"assistant","session_id":"s1","message":{"content":[{"type":"text","text":"hi\n\tthere \u00e9"},{"type":"tool_use","name":"Bash","input":{"description":"d","command":"ls\n-l"}},{"type":"tool_use","name":"AskUserQuestion","input":null},{"type":"thinking","thinking":"x"},{"type":"image"}]}}"#,
            r#"{"type":"assistant","is_api_error_message":true,"message":{"content":[{"type":"text","text":"overloaded"}]}}"#,
            r#"{"type":"assistant","message":{"content":null}}"#,
            r#"{"type":"assistant"}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":5}]}}"#,
            r#"{"type":"user","message":{"content":[{"type":"tool_result","content":[{"type":"text","text":"big"}],"is_error":true},{"type":"tool_result","content":"ok"}]}}"#,
            r#"{"type":"user","message":{"content":"plain prompt"}}"#,
            r#"{"type":"assistant","message":[[{"type":"text","text":"by position"}]]}"#,
            r#"{"type":"assistant","message":{"content":[["text","by position"]]}}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"tool_use","name":"X","input":["ls"]}]}}"#,
            r#"["assistant","s",{"content":[]}]"#,
        ];
        for line in lines {
            let mut fast = StreamParser::new(1, None);
            let mut slow = StreamParser::new(1, None);
            let got = fast.parse_line(line);
            assert_eq!(got, slow.parse_value(line), "{line}");
            assert_eq!(fast.asked_for_input(), slow.asked_for_input(), "{line}");
            assert_eq!(fast.session_id(), slow.session_id(), "{line}");
        }
        // A line of an unexpected shape falls back to the Value path.
        let mut p = StreamParser::new(1, None);
        assert!(p
            .parse_fast(r#"{"type":"user","message":{"content":"plain"}}"#)
            .is_none());
        assert!(p.parse_fast(r#"{"type":"result"}"#).is_none());
    }

    #[test]
    fn timeout_env_respects_operator_and_clamp() {
        let env = child_timeout_env(300_000, |_| false);
        assert_eq!(
            env,
            vec![
                ("API_TIMEOUT_MS".into(), "120000".into()),
                ("CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS".into(), "120000".into())
            ]
        );
        let env = child_timeout_env(1000, |k| k == "API_TIMEOUT_MS");
        assert_eq!(
            env,
            vec![("CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS".into(), "10000".into())]
        );
        assert!(child_timeout_env(0, |_| false).is_empty());
    }
}
