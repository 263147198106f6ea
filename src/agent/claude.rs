//! Claude Code CLI adapter (spec §10.1, CLI subprocess mode), built against the real
//! `@anthropic-ai/claude-code@2.1.332` stream-json protocol.
//!
//! Every turn is one `claude -p … --output-format stream-json --verbose` invocation run by the
//! turn driver (`agent::driver`) on the runner's host; continuation turns add
//! `--resume=<agent_session_id>` (only a [`super::valid_session_id`]), so the CLI's session (and
//! its id) stays the same across turns. The pure [`StreamParser`] turns stdout lines into
//! normalized [`AgentEvent`]s in one typed pass; the pure [`turn_outcome`] decides the turn result
//! from the `result` line and how the process ended.
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
use serde_json::value::RawValue;

use super::config::AgentKind;
use super::driver::{run_invocation, terminal_event_kind, Limits, TurnParser};
use super::json::{first_detail, one_line};
use super::loose::{List, Loose, Num};
use super::runner::CliRunner;
use super::{
    check_cwd_on, usable_session_id, AgentError, AgentErrorKind, AgentEvent, AgentEventKind,
    AgentRunner, AgentSession, CancelToken, Emit, SessionContext, TokenUsage, TurnResult,
};
use crate::host::{Host, ProcessSpec};
use crate::text::truncate_chars;
use crate::workflow::config::ClaudeCodeConfig;

pub use super::driver::ProcessEnd;

/// Longest event summary (characters).
pub const SUMMARY_MAX_CHARS: usize = 200;
/// Longest `ResultInfo::result_text` kept (characters); it ends the `turn_completed` summary.
pub(crate) const RESULT_TEXT_MAX_CHARS: usize = 2000;
/// Tool calls whose denial a turn remembers (a hostile stream must not grow the set without end).
const MAX_TRACKED_DENIALS: usize = 1024;
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
    /// One typed pass: the line's fields are read into [`Line`], text borrowed from the line and
    /// everything Baton does not read (tool results, thinking text) skipped unread.
    pub fn parse_line(&mut self, line: &str) -> Vec<AgentEvent> {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            return Vec::new();
        }
        let line = match serde_json::from_str::<Loose<Line>>(trimmed) {
            Ok(Loose::Obj(line)) => line,
            Ok(_) => {
                return vec![self.event(
                    AgentEventKind::Malformed,
                    format!("non-object JSON line: {}", truncate_chars(trimmed, 80)),
                )]
            }
            Err(e) => {
                return vec![self.event(
                    AgentEventKind::Malformed,
                    format!("non-JSON line ({e}): {}", truncate_chars(trimmed, 80)),
                )]
            }
        };
        if self.agent_session_id.is_none() {
            self.adopt_session_id(&line);
        }
        match line.ty.as_str().unwrap_or("") {
            "system" => vec![self.parse_system(&line)],
            "assistant" => self.parse_assistant(&line),
            "user" => vec![self.event(AgentEventKind::OtherMessage, summarize_user(&line))],
            "result" => self.parse_result(&line),
            "rate_limit_event" => vec![self.parse_rate_limit(&line)],
            "" => vec![self.event(AgentEventKind::Malformed, "JSON line without a type")],
            other => vec![self.event(
                AgentEventKind::OtherMessage,
                format!("unhandled message type {}", truncate_chars(other, 40)),
            )],
        }
    }

    fn adopt_session_id(&mut self, line: &Line) {
        if let Some(id) = line.session_id.as_str().filter(|id| !id.is_empty()) {
            self.agent_session_id = Some(truncate_chars(id, 128));
        }
    }

    /// `{"type":"rate_limit_event","rate_limit_info":{"status",…}}` (see the protocol notes:
    /// emitted for subscription logins, not with an API key). Unknown shapes are `malformed`.
    fn parse_rate_limit(&self, line: &Line) -> AgentEvent {
        let Some(info) = line.rate_limit_info.as_obj() else {
            return self.event(
                AgentEventKind::Malformed,
                "rate_limit_event without rate_limit_info",
            );
        };
        let text = |v: &Loose| v.as_str().map(|s| crate::text::single_line(s, 40));
        let Some(status) = text(&info.status) else {
            // Tolerated like other partial lines of a known type; nothing to record.
            return self.event(
                AgentEventKind::OtherMessage,
                "rate_limit_event without a status",
            );
        };
        let resets_at = info.resets_at.value().filter(|s| *s >= 0.0).map(|s| {
            // Capped at year 9999: a hostile number must not overflow the time arithmetic.
            let secs = s.min(253_402_300_799.0) as u64;
            crate::timefmt::rfc3339(UNIX_EPOCH + Duration::from_secs(secs))
        });
        let limits = crate::agent::AgentRateLimits {
            rate_limit_type: text(&info.rate_limit_type),
            utilization: info.utilization.value().map(|u| u.clamp(0.0, 1.0)),
            resets_at,
            overage_status: text(&info.overage_status),
            is_using_overage: info.is_using_overage.as_bool(),
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

    /// One event per content block of an `assistant` line.
    fn parse_assistant(&mut self, line: &Line) -> Vec<AgentEvent> {
        let Some(blocks) = line.content() else {
            return vec![self.event(AgentEventKind::OtherMessage, "assistant message")];
        };
        let api_error = line.is_api_error_message.as_bool() == Some(true);
        let empty = Block::default();
        blocks
            .iter()
            .map(|b| self.assistant_block(b.as_obj().unwrap_or(&empty), api_error))
            .collect()
    }

    fn assistant_block(&mut self, b: &Block, api_error: bool) -> AgentEvent {
        match b.ty.as_str().unwrap_or("") {
            "text" => {
                let text = b.text.as_str().unwrap_or("");
                if api_error {
                    self.event(AgentEventKind::Notification, format!("api error: {text}"))
                } else {
                    self.event_text(AgentEventKind::Notification, text)
                }
            }
            "tool_use" => {
                let name = b.name.as_str().unwrap_or("?");
                if name == "AskUserQuestion" {
                    self.asked_for_input = true;
                }
                let detail = b.input.as_obj().map(Input::detail).unwrap_or_default();
                let summary = if detail.is_empty() {
                    truncate_chars(name, 60)
                } else {
                    format!("{}: {detail}", truncate_chars(name, 60))
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

    fn parse_system(&mut self, l: &Line) -> AgentEvent {
        match l.subtype.as_str().unwrap_or("") {
            "init" => {
                self.saw_init = true;
                self.adopt_session_id(l);
                let summary = format!(
                    "session {} model={} permission_mode={} version={}",
                    if self.emit_session_started {
                        "started"
                    } else {
                        "resumed"
                    },
                    l.model.as_str().unwrap_or("?"),
                    l.permission_mode.as_str().unwrap_or("?"),
                    l.claude_code_version.as_str().unwrap_or("?"),
                );
                let kind = if self.emit_session_started {
                    self.emit_session_started = false;
                    AgentEventKind::SessionStarted
                } else {
                    AgentEventKind::OtherMessage
                };
                self.event(kind, summary)
            }
            "permission_denied" => {
                let tool = l.tool_name.as_str().unwrap_or("?");
                if let Some(id) = l.tool_use_id.as_str() {
                    self.note_denial(id);
                }
                let msg = l.message.as_str().or(l.decision_reason.as_str());
                self.event(
                    AgentEventKind::PermissionDenied,
                    format!("{}: {}", truncate_chars(tool, 60), msg.unwrap_or("")),
                )
            }
            "api_retry" => {
                let num = |n: &Num| n.text().unwrap_or("?").to_string();
                let status = l
                    .error_status
                    .int()
                    .map_or("none".into(), |s| s.to_string());
                self.event(
                    AgentEventKind::Notification,
                    format!(
                        "api retry attempt={}/{} error={} status={status} delay_ms={}",
                        num(&l.attempt),
                        num(&l.max_retries),
                        l.error.as_str().unwrap_or("?"),
                        num(&l.retry_delay_ms),
                    ),
                )
            }
            other => self.event(
                AgentEventKind::OtherMessage,
                format!("system/{}", truncate_chars(other, 40)),
            ),
        }
    }

    /// Remember a denial reported on its own line (bounded), so the result line's copy of it is
    /// not reported twice.
    fn note_denial(&mut self, tool_use_id: &str) {
        if self.reported_denials.len() < MAX_TRACKED_DENIALS {
            self.reported_denials
                .insert(truncate_chars(tool_use_id, 128));
        }
    }

    fn parse_result(&mut self, l: &Line) -> Vec<AgentEvent> {
        let mut denials = Vec::new();
        let mut out = Vec::new();
        let empty = Denial::default();
        for d in l.permission_denials.as_arr().unwrap_or_default() {
            let d = d.as_obj().unwrap_or(&empty);
            let tool = d.tool_name.as_str().unwrap_or("?");
            denials.push(truncate_chars(tool, 60));
            let id = d.tool_use_id.as_str().unwrap_or("");
            if id.is_empty() || !self.reported_denials.contains(&truncate_chars(id, 128)) {
                if !id.is_empty() {
                    self.note_denial(id);
                }
                out.push(self.event(
                    AgentEventKind::PermissionDenied,
                    format!("{}: denied (reported in result)", truncate_chars(tool, 60)),
                ));
            }
        }
        let info = ResultInfo {
            subtype: l.subtype.as_str().unwrap_or("").to_string(),
            is_error: l.is_error.as_bool().unwrap_or(true),
            terminal_reason: l.terminal_reason.as_str().map(|s| truncate_chars(s, 60)),
            api_error_status: l.api_error_status.int(),
            result_text: l
                .result
                .as_str()
                .map(|s| truncate_chars(s, RESULT_TEXT_MAX_CHARS)),
            errors: l
                .errors
                .as_arr()
                .unwrap_or_default()
                .iter()
                .take(10)
                .map(error_text)
                .collect(),
            usage: l.usage.as_obj().map(Usage::tokens).unwrap_or_default(),
            total_cost_usd: l.total_cost_usd.cost(),
            permission_denials: denials,
            num_turns: l.num_turns.value().map(|_| l.num_turns.count()),
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
        // Attached, so no value can be read as a flag (the id is a checked UUID as well).
        push(&format!("--resume={id}"));
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
            agent_session_id: usable_session_id(
                AgentKind::ClaudeCode,
                ctx.resume_session_id.as_deref(),
                &ctx.issue_identifier,
            ),
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
            "claude turn started issue_identifier={} session_id={} turn={} agent_pid={pid} resume={}",
            self.issue_identifier,
            self.parser.session_id().as_deref().unwrap_or("-"),
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
            self.agent_session_id =
                usable_session_id(AgentKind::ClaudeCode, Some(id), &self.issue_identifier);
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

/// One entry of `result.errors`: its text, or its JSON when it is not a string; bounded.
fn error_text(e: &&RawValue) -> String {
    match serde_json::from_str::<String>(e.get()) {
        Ok(s) => truncate_chars(&s, 300),
        Err(_) => truncate_chars(e.get(), 300),
    }
}

fn summarize_user(line: &Line) -> String {
    let blocks = line.content().unwrap_or(&[]);
    let blocks = blocks.iter().filter_map(Loose::as_obj);
    let (mut results, mut errors) = (0, 0);
    for b in blocks {
        results += usize::from(b.ty.as_str() == Some("tool_result"));
        errors += usize::from(b.is_error.as_bool() == Some(true));
    }
    if results > 0 {
        format!("tool results={results} errors={errors}")
    } else {
        "user message".into()
    }
}

/// Every field Baton reads of any stream-json line, by line type (one struct, so a line is
/// parsed once and then read by its `type`). Fields of an unexpected type read as absent.
#[derive(Default, Deserialize)]
#[serde(default, bound(deserialize = "'de: 'a"))]
struct Line<'a> {
    #[serde(rename = "type")]
    ty: Loose<'a>,
    subtype: Loose<'a>,
    session_id: Loose<'a>,
    // system/init
    model: Loose<'a>,
    #[serde(rename = "permissionMode")]
    permission_mode: Loose<'a>,
    claude_code_version: Loose<'a>,
    // system/permission_denied; `message` is a string there and an object on assistant/user lines
    tool_name: Loose<'a>,
    tool_use_id: Loose<'a>,
    message: Loose<'a, Message<'a>>,
    decision_reason: Loose<'a>,
    // system/api_retry
    attempt: Num<'a>,
    max_retries: Num<'a>,
    retry_delay_ms: Num<'a>,
    error_status: Num<'a>,
    error: Loose<'a>,
    // assistant
    is_api_error_message: Loose<'a>,
    // result
    is_error: Loose<'a>,
    terminal_reason: Loose<'a>,
    api_error_status: Num<'a>,
    result: Loose<'a>,
    errors: List<'a, &'a RawValue>,
    usage: Loose<'a, Usage<'a>>,
    total_cost_usd: Num<'a>,
    permission_denials: List<'a, Loose<'a, Denial<'a>>>,
    num_turns: Num<'a>,
    // rate_limit_event
    rate_limit_info: Loose<'a, RateLimitInfo<'a>>,
}

impl Line<'_> {
    /// `message.content` when it is an array.
    fn content(&self) -> Option<&[Loose<'_, Block<'_>>]> {
        self.message.as_obj()?.content.as_arr()
    }
}

/// `message` of an assistant or user line.
#[derive(Default, Deserialize)]
#[serde(default, bound(deserialize = "'de: 'a"))]
struct Message<'a> {
    content: List<'a, Loose<'a, Block<'a>>>,
}

/// One block of `message.content` (text, tool call, tool result, thinking…).
#[derive(Default, Deserialize)]
#[serde(default, bound(deserialize = "'de: 'a"))]
struct Block<'a> {
    #[serde(rename = "type")]
    ty: Loose<'a>,
    text: Loose<'a>,
    name: Loose<'a>,
    input: Loose<'a, Input<'a>>,
    is_error: Loose<'a>,
}

/// The tool-call arguments a summary names, in the order it prefers them.
#[derive(Default, Deserialize)]
#[serde(default, bound(deserialize = "'de: 'a"))]
struct Input<'a> {
    command: Loose<'a>,
    file_path: Loose<'a>,
    path: Loose<'a>,
    pattern: Loose<'a>,
    url: Loose<'a>,
    description: Loose<'a>,
    prompt: Loose<'a>,
}

impl Input<'_> {
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

/// `result.usage` (per invocation).
#[derive(Default, Deserialize)]
#[serde(default, bound(deserialize = "'de: 'a"))]
struct Usage<'a> {
    input_tokens: Num<'a>,
    output_tokens: Num<'a>,
    cache_read_input_tokens: Num<'a>,
    cache_creation_input_tokens: Num<'a>,
}

impl Usage<'_> {
    fn tokens(&self) -> TokenUsage {
        TokenUsage {
            input_tokens: self.input_tokens.count(),
            output_tokens: self.output_tokens.count(),
            cache_read_input_tokens: self.cache_read_input_tokens.count(),
            cache_creation_input_tokens: self.cache_creation_input_tokens.count(),
        }
    }
}

/// One entry of `result.permission_denials`.
#[derive(Default, Deserialize)]
#[serde(default, bound(deserialize = "'de: 'a"))]
struct Denial<'a> {
    tool_name: Loose<'a>,
    tool_use_id: Loose<'a>,
}

/// `rate_limit_info` of a `rate_limit_event` line.
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase", bound(deserialize = "'de: 'a"))]
struct RateLimitInfo<'a> {
    status: Loose<'a>,
    resets_at: Num<'a>,
    rate_limit_type: Loose<'a>,
    utilization: Num<'a>,
    overage_status: Loose<'a>,
    is_using_overage: Loose<'a>,
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
    fn one_typed_pass_reads_every_shape() {
        use AgentEventKind::*;
        // The events of the former `serde_json::Value` path for the same lines, except that
        // numeric strings now count (`"503"`, `"3"`).
        let cases: &[(&str, &[(AgentEventKind, &str)])] = &[
            (
                r#"{"type":"assistant","session_id":"s1","message":{"content":[{"type":"text","text":"hi\n\tthere \u00e9"},{"type":"tool_use","name":"Bash","input":{"description":"d","command":"ls\n-l"}},{"type":"tool_use","name":"AskUserQuestion","input":null},{"type":"thinking","thinking":"x"},{"type":"image"}]}}"#,
                &[
                    (Notification, "hi there é"),
                    (ToolUse, "Bash: ls -l"),
                    (ToolUse, "AskUserQuestion"),
                    (OtherMessage, "thinking"),
                    (OtherMessage, "assistant image block"),
                ],
            ),
            (
                r#"{"type":"assistant","is_api_error_message":true,"message":{"content":[{"type":"text","text":"overloaded"}]}}"#,
                &[(Notification, "api error: overloaded")],
            ),
            (
                r#"{"type":"assistant","message":{"content":null}}"#,
                &[(OtherMessage, "assistant message")],
            ),
            (
                r#"{"type":"assistant"}"#,
                &[(OtherMessage, "assistant message")],
            ),
            (
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":5}]}}"#,
                &[(Notification, "")],
            ),
            (
                r#"{"type":"user","message":{"content":[{"type":"tool_result","content":[{"type":"text","text":"big"}],"is_error":true},{"type":"tool_result","content":"ok"}]}}"#,
                &[(OtherMessage, "tool results=2 errors=1")],
            ),
            (
                r#"{"type":"user","message":{"content":"plain prompt"}}"#,
                &[(OtherMessage, "user message")],
            ),
            (
                r#"{"type":"assistant","message":[[{"type":"text","text":"by position"}]]}"#,
                &[(OtherMessage, "assistant message")],
            ),
            (
                r#"{"type":"assistant","message":{"content":[["text","by position"]]}}"#,
                &[(OtherMessage, "assistant block")],
            ),
            (
                r#"{"type":"assistant","message":{"content":[{"type":"tool_use","name":"X","input":["ls"]}]}}"#,
                &[(ToolUse, "X")],
            ),
            (
                r#"["assistant","s",{"content":[]}]"#,
                &[(
                    Malformed,
                    r#"non-object JSON line: ["assistant","s",{"content":[]}]"#,
                )],
            ),
            (
                r#"{"type":"system","subtype":"permission_denied","tool_name":"Write","tool_use_id":"t1","message":{"x":1},"decision_reason":"rule"}"#,
                &[(PermissionDenied, "Write: rule")],
            ),
            (
                r#"{"type":"system","subtype":"api_retry","attempt":"2","max_retries":10.0,"error_status":"503","error":7}"#,
                &[(
                    Notification,
                    "api retry attempt=?/10.0 error=? status=503 delay_ms=?",
                )],
            ),
            (r#"{"type":5}"#, &[(Malformed, "JSON line without a type")]),
            (
                r#""just a string""#,
                &[(Malformed, r#"non-object JSON line: "just a string""#)],
            ),
            (r#"{"type":"system"}"#, &[(OtherMessage, "system/")]),
            // What no field reads never fails the line (the Value path rejected both).
            (
                r#"{"type":"system","subtype":"init","x":1e400,"tools":["\ud800"],"model":"m"}"#,
                &[(
                    SessionStarted,
                    "session started model=m permission_mode=? version=?",
                )],
            ),
        ];
        for (line, want) in cases {
            let mut p = StreamParser::new(1, None);
            let got: Vec<_> = p
                .parse_line(line)
                .into_iter()
                .map(|e| (e.kind, e.summary))
                .collect();
            let want: Vec<_> = want.iter().map(|(k, s)| (*k, s.to_string())).collect();
            assert_eq!(got, want, "{line}");
        }
        let mut p = StreamParser::new(1, None);
        p.parse_line(cases[0].0);
        assert!(p.asked_for_input());
        assert_eq!(p.session_id().as_deref(), Some("s1-1"));
        // A result of odd shapes: denials without ids or objects, errors that are not strings.
        let ev = p.parse_line(
            r#"{"type":"result","subtype":"error_during_execution","is_error":"yes","errors":["a\nb",{"code":1},7],"usage":[1],"permission_denials":[{"tool_name":"Bash","tool_use_id":"t1"},"x"],"num_turns":"3"}"#,
        );
        let kinds: Vec<_> = ev.iter().map(|e| (e.kind, e.summary.as_str())).collect();
        assert_eq!(
            kinds,
            [
                (PermissionDenied, "Bash: denied (reported in result)"),
                (PermissionDenied, "?: denied (reported in result)")
            ]
        );
        let r = p.result().expect("a result");
        assert_eq!(r.errors, ["a\nb", r#"{"code":1}"#, "7"]);
        assert!(r.is_error);
        assert_eq!((r.num_turns, r.usage), (Some(3), TokenUsage::default()));
        // A duplicate key is ambiguous (which value did the agent mean?): the line is malformed.
        let ev = StreamParser::new(1, None).parse_line(r#"{"type":"user","type":"result"}"#);
        assert_eq!(ev[0].kind, Malformed);
        assert!(
            ev[0].summary.contains("duplicate field `type`"),
            "{}",
            ev[0].summary
        );
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
