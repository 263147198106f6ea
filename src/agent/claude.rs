//! Claude Code (spec §10.1, CLI subprocess mode), built against `@anthropic-ai/claude-code@2.1.332`:
//! each turn is one `claude -p … --output-format stream-json --verbose` process; later turns add
//! `--resume=<agent_session_id>`, so the CLI's session (and its id) stays the same.
//!
//! Usage (§13.5): `result.usage` is per invocation and goes on the terminal event;
//! `total_cost_usd` is session-cumulative (recorded, never added). Assistant-line usage is the
//! `message_start` placeholder and is ignored.

use std::collections::HashSet;
use std::ffi::OsString;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::config::{AgentKind, ClaudeCodeConfig, CliSection};
use super::driver::{ProcessEnd, TurnParser};
pub use super::loose::SUMMARY_MAX as SUMMARY_MAX_CHARS;
use super::loose::{one_line, Input, List, Loose, Num};
use super::runner::{Cli, CliRunner, Invocation, Parsed};
use super::{
    AgentError, AgentErrorKind, AgentEvent, AgentEventKind as E, AgentRateLimits, TokenUsage,
    TurnResult,
};
use crate::text::truncate_chars;

/// Longest result text kept (characters); it ends the `turn_completed` summary.
const MAX_RESULT_TEXT: usize = 2000;
/// Denials a turn remembers (a hostile stream must not grow the set without end).
const MAX_TRACKED_DENIALS: usize = 1024;
/// The CLI clamps `CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS` to at least this.
const CLI_MIN_TIMEOUT_MS: i64 = 10_000;

/// Builds Claude Code sessions from `claude_code.*`.
pub type ClaudeRunner = CliRunner<ClaudeCodeConfig>;

impl Cli for ClaudeCodeConfig {
    type Parser = StreamParser;
    type State = ();
    const KIND: AgentKind = AgentKind::ClaudeCode;

    fn cli(&self) -> &CliSection {
        &self.cli
    }

    /// The prompt comes last, after `--`, so neither a shell nor the CLI's option parser can read
    /// it as anything but the prompt; the resumed id is attached (`--resume=<uuid>`).
    fn invocation(r: &ClaudeRunner, i: &mut Invocation<()>) -> Parsed<Self> {
        let cfg = &r.cfg;
        let mut a: Vec<&str> = vec!["-p", "--output-format", "stream-json", "--verbose"];
        a.extend(["--permission-mode", &cfg.permission_mode]);
        if let Some(m) = cfg.cli.model.as_deref().filter(|m| !m.is_empty()) {
            a.extend(["--model", m]);
        }
        for (flag, tools) in [
            ("--allowedTools", &cfg.allowed_tools),
            ("--disallowedTools", &cfg.disallowed_tools),
        ] {
            if !tools.is_empty() {
                a.push(flag);
                a.extend(tools.iter().map(String::as_str));
            }
        }
        for p in cfg.append_system_prompt.iter().filter(|p| !p.is_empty()) {
            a.extend(["--append-system-prompt", p]);
        }
        let resume = i.session.map(|id| format!("--resume={id}"));
        a.extend(resume.as_deref());
        a.extend(cfg.cli.extra_args.iter().map(String::as_str));
        a.extend(["--", i.prompt]);
        i.spec.args.extend(a.into_iter().map(OsString::from));
        // The CLI fails by itself before Baton's stall timer: both bounds at max(10 s, 2/5 ×
        // stall_timeout_ms), as the byte-idle watchdog retries once silently; the operator's own
        // values win; none without stall detection.
        let stall = cfg.cli.stall_timeout_ms;
        let bound = (stall.saturating_mul(2) / 5)
            .max(CLI_MIN_TIMEOUT_MS)
            .to_string();
        for k in ["API_TIMEOUT_MS", "CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS"] {
            if stall > 0 && !r.sets_env(k) {
                i.spec.env(k, &bound);
            }
        }
        Ok(StreamParser::new(i.turn, i.session.map(String::from)))
    }
}

/// The `result` line of one invocation, reduced to what Baton uses.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResultInfo {
    /// `success`, `error_max_turns`, `error_during_execution`, …
    pub subtype: String,
    /// True also for API failures reported as `subtype: "success"`.
    pub is_error: bool,
    pub terminal_reason: Option<String>,
    pub api_error_status: Option<i64>,
    /// Truncated; absent on error subtypes.
    pub result_text: Option<String>,
    pub errors: Vec<String>,
    /// This invocation's usage.
    pub usage: TokenUsage,
    /// Cumulative over the whole session.
    pub total_cost_usd: Option<f64>,
}

/// The parser of one invocation's stdout (pure).
#[derive(Debug, Clone, Default)]
pub struct StreamParser {
    turn: u32,
    emit_session_started: bool,
    session: Option<String>,
    result: Option<ResultInfo>,
    reported_denials: HashSet<String>,
    asked_for_input: bool,
}

impl StreamParser {
    /// A parser for turn `turn` (1-based) of session `known` (`None`: read from the stream).
    /// Only turn 1 emits `session_started` (spec §10.1); later turns carry `<id>-<turn>`.
    pub fn new(turn: u32, known: Option<String>) -> Self {
        StreamParser {
            turn,
            emit_session_started: turn <= 1,
            session: known,
            ..Self::default()
        }
    }

    pub fn result(&self) -> Option<&ResultInfo> {
        self.result.as_ref()
    }

    fn adopt_session_id(&mut self, line: &Line) {
        if let Some(id) = line.session_id.as_str().filter(|id| !id.is_empty()) {
            self.session = Some(truncate_chars(id, 128));
        }
    }

    /// `rate_limit_info` (sent for subscription logins, not with an API key); bounded.
    fn parse_rate_limit(&self, line: &Line) -> AgentEvent {
        let Some(info) = line.rate_limit_info.as_obj() else {
            return self.event(E::Malformed, "rate_limit_event without rate_limit_info");
        };
        let text = |v: &Loose| v.as_str().map(|s| crate::text::single_line(s, 40));
        let Some(status) = text(&info.status) else {
            return self.event(E::OtherMessage, "rate_limit_event without a status");
        };
        let resets_at = info.resets_at.value().filter(|s| *s >= 0.0);
        let limits = AgentRateLimits {
            rate_limit_type: text(&info.rate_limit_type),
            utilization: info.utilization.value().map(|u| u.clamp(0.0, 1.0)),
            resets_at: resets_at.map(|s| AgentRateLimits::reset_time(s as u64)),
            overage_status: text(&info.overage_status),
            is_using_overage: info.is_using_overage.as_bool(),
            status,
        };
        limits.event(|kind, text| self.event(kind, text))
    }

    /// One event per content block of an `assistant` line.
    fn parse_assistant(&mut self, line: &Line) -> Vec<AgentEvent> {
        let Some(blocks) = line.content() else {
            return vec![self.event(E::OtherMessage, "assistant message")];
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
            "text" if api_error => {
                let text = b.text.as_str().unwrap_or("");
                self.event(E::Notification, &format!("api error: {text}"))
            }
            "text" => self.event(E::Notification, b.text.as_str().unwrap_or("")),
            "tool_use" => {
                let name = b.name.as_str().unwrap_or("?");
                self.asked_for_input |= name == "AskUserQuestion";
                let name = truncate_chars(name, 60);
                match b.input.as_obj().map(Input::detail).unwrap_or_default() {
                    d if d.is_empty() => self.event(E::ToolUse, &name),
                    d => self.event(E::ToolUse, &format!("{name}: {d}")),
                }
            }
            "thinking" | "redacted_thinking" => self.event(E::OtherMessage, "thinking"),
            other => {
                let text = format!("assistant {} block", truncate_chars(other, 40));
                self.event(E::OtherMessage, &text)
            }
        }
    }

    fn parse_system(&mut self, l: &Line) -> AgentEvent {
        match l.subtype.as_str().unwrap_or("") {
            "init" => {
                self.adopt_session_id(l);
                let (kind, how) = match std::mem::take(&mut self.emit_session_started) {
                    true => (E::SessionStarted, "started"),
                    false => (E::OtherMessage, "resumed"),
                };
                let text = format!(
                    "session {how} model={} permission_mode={} version={}",
                    l.model.as_str().unwrap_or("?"),
                    l.permission_mode.as_str().unwrap_or("?"),
                    l.claude_code_version.as_str().unwrap_or("?"),
                );
                self.event(kind, &text)
            }
            "permission_denied" => {
                let tool = truncate_chars(l.tool_name.as_str().unwrap_or("?"), 60);
                if let Some(id) = l.tool_use_id.as_str() {
                    self.note_denial(id);
                }
                let msg = l.message.as_str().or(l.decision_reason.as_str());
                let text = format!("{tool}: {}", msg.unwrap_or(""));
                self.event(E::PermissionDenied, &text)
            }
            "api_retry" => {
                let num = |n: &Num| n.text().unwrap_or("?").to_string();
                let status = l.error_status.int().map(|s| s.to_string());
                let status = status.as_deref().unwrap_or("none");
                let text = format!(
                    "api retry attempt={}/{} error={} status={status} delay_ms={}",
                    num(&l.attempt),
                    num(&l.max_retries),
                    l.error.as_str().unwrap_or("?"),
                    num(&l.retry_delay_ms),
                );
                self.event(E::Notification, &text)
            }
            other => self.event(
                E::OtherMessage,
                &format!("system/{}", truncate_chars(other, 40)),
            ),
        }
    }

    /// Remember a denial (bounded), so that the result line's copy of one reported on its own
    /// line is not reported twice; false when it was reported before.
    fn note_denial(&mut self, tool_use_id: &str) -> bool {
        let id = truncate_chars(tool_use_id, 128);
        match self.reported_denials.len() < MAX_TRACKED_DENIALS {
            true => self.reported_denials.insert(id),
            false => !self.reported_denials.contains(&id),
        }
    }

    fn parse_result(&mut self, l: &Line) -> Vec<AgentEvent> {
        let mut out = Vec::new();
        let first = self.result.is_none();
        let empty = Denial::default();
        for d in l.permission_denials.as_arr().unwrap_or_default() {
            let d = d.as_obj().unwrap_or(&empty);
            let tool = truncate_chars(d.tool_name.as_str().unwrap_or("?"), 60);
            self.asked_for_input |= first && tool == "AskUserQuestion";
            let id = d.tool_use_id.as_str().unwrap_or("");
            if id.is_empty() || self.note_denial(id) {
                let text = format!("{tool}: denied (reported in result)");
                out.push(self.event(E::PermissionDenied, &text));
            }
        }
        // Only the first result line of an invocation counts (a `-p` run has exactly one).
        if !first {
            out.push(self.event(E::Malformed, "second result line ignored"));
            return out;
        }
        let errors = l.errors.as_arr().unwrap_or_default();
        self.result = Some(ResultInfo {
            subtype: l.subtype.as_str().unwrap_or("").to_string(),
            is_error: l.is_error.as_bool().unwrap_or(true),
            terminal_reason: l.terminal_reason.as_str().map(|s| truncate_chars(s, 60)),
            api_error_status: l.api_error_status.int(),
            result_text: l
                .result
                .as_str()
                .map(|s| truncate_chars(s, MAX_RESULT_TEXT)),
            errors: errors.iter().take(10).map(error_text).collect(),
            usage: l.usage.as_obj().map(Usage::tokens).unwrap_or_default(),
            total_cost_usd: l.total_cost_usd.cost(),
        });
        out
    }
}

impl TurnParser for StreamParser {
    /// One typed pass: the line is read into [`Line`], text borrowed from it and everything
    /// Baton does not read (tool results, thinking text) skipped unread.
    fn parse_line(&mut self, line: &str) -> Vec<AgentEvent> {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            return Vec::new();
        }
        let line = match serde_json::from_str::<Loose<Line>>(trimmed) {
            Ok(Loose::Obj(line)) => line,
            bad => {
                let why = bad.map_or_else(
                    |e| format!("non-JSON line ({e})"),
                    |_| "non-object JSON line".into(),
                );
                let text = format!("{why}: {}", truncate_chars(trimmed, 80));
                return vec![self.event(E::Malformed, &text)];
            }
        };
        if self.session.is_none() {
            self.adopt_session_id(&line);
        }
        match line.ty.as_str().unwrap_or("") {
            "system" => vec![self.parse_system(&line)],
            "assistant" => self.parse_assistant(&line),
            "user" => vec![self.event(E::OtherMessage, &summarize_user(&line))],
            "result" => self.parse_result(&line),
            "rate_limit_event" => vec![self.parse_rate_limit(&line)],
            "" => vec![self.event(E::Malformed, "JSON line without a type")],
            other => {
                let text = format!("unhandled message type {}", truncate_chars(other, 40));
                vec![self.event(E::OtherMessage, &text)]
            }
        }
    }

    fn event(&self, kind: E, text: &str) -> AgentEvent {
        let text = one_line(text, SUMMARY_MAX_CHARS);
        AgentEvent::of(kind, text, self.session.as_deref(), self.turn)
    }

    fn result_seen(&self) -> bool {
        self.result.is_some()
    }

    /// Success only when the result has `is_error: false` *and* the process exited 0.
    fn outcome(&self, end: &ProcessEnd) -> TurnResult {
        use AgentErrorKind as K;
        let err = |k, m: String| Err(AgentError::new(k, m));
        if let Some(e) = end.stopped() {
            return Err(e);
        }
        let Some(r) = &self.result else {
            return Err(end.without_result());
        };
        let deferred =
            (r.terminal_reason.as_deref()).is_some_and(|t| t.starts_with("tool_deferred"));
        if self.asked_for_input || deferred {
            let text = "the agent asked for user input; headless turns never wait";
            return err(K::TurnInputRequired, text.into());
        }
        let exit = end.describe();
        match (r.is_error, end.exit_code) {
            (false, Some(0)) => Ok(()),
            (false, _) => err(
                K::ProcessExit,
                format!(
                    "result was a success but the process ended with {exit}{}",
                    end.stderr_note()
                ),
            ),
            (true, _) => err(K::TurnFailed, failure_detail(r, &exit)),
        }
    }

    fn usage(&self) -> Option<TokenUsage> {
        self.result.as_ref().map(|r| r.usage)
    }

    fn cost(&self) -> Option<f64> {
        self.result.as_ref().and_then(|r| r.total_cost_usd)
    }

    fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    fn result_text(&self) -> Option<String> {
        self.result.as_ref()?.result_text.clone()
    }
}

/// `subtype=… terminal_reason=… api_error_status=…: <text> (<exit>)` for a failed result.
fn failure_detail(r: &ResultInfo, exit: &str) -> String {
    let reason = (r.terminal_reason.as_ref()).map(|t| format!(" terminal_reason={t}"));
    let status = r.api_error_status.map(|s| format!(" api_error_status={s}"));
    let errors = (!r.errors.is_empty()).then(|| r.errors.join("; "));
    let texts = r.result_text.iter().chain(&errors);
    let texts = texts.map(|t| format!(": {}", one_line(t, 300)));
    let parts: String = reason.into_iter().chain(status).chain(texts).collect();
    format!("subtype={}{parts} ({exit})", r.subtype)
}

/// One entry of `result.errors`: its text, or its JSON when it is not a string; bounded.
fn error_text(e: &&RawValue) -> String {
    let text = serde_json::from_str::<String>(e.get());
    truncate_chars(text.as_deref().unwrap_or(e.get()), 300)
}

fn summarize_user(line: &Line) -> String {
    let blocks = line.content().unwrap_or(&[]);
    let (mut results, mut errors) = (0, 0);
    for b in blocks.iter().filter_map(Loose::as_obj) {
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
    // rate_limit_event
    rate_limit_info: Loose<'a, RateLimitInfo<'a>>,
}

impl Line<'_> {
    fn content(&self) -> Option<&[Loose<'_, Block<'_>>]> {
        self.message.as_obj()?.content.as_arr()
    }
}

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

#[derive(Default, Deserialize)]
#[serde(default, bound(deserialize = "'de: 'a"))]
struct Denial<'a> {
    tool_name: Loose<'a>,
    tool_use_id: Loose<'a>,
}

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
        assert_eq!(ev[0].kind, E::Notification);
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
            (r#"{"type":"rate_limit_event"}"#, E::Malformed),
            (
                r#"{"type":"rate_limit_event","rate_limit_info":[1]}"#,
                E::Malformed,
            ),
            (
                r#"{"type":"rate_limit_event","rate_limit_info":{"utilization":0.5}}"#,
                E::OtherMessage,
            ),
        ] {
            let ev = p.parse_line(bad);
            assert_eq!(ev[0].kind, kind, "{bad}");
            assert!(ev[0].rate_limits.is_none());
        }
    }

    #[test]
    fn one_typed_pass_reads_every_shape() {
        use E::*;
        // The events of the former `serde_json::Value` path for the same lines, except that
        // numeric strings now count (`"503"`, `"3"`).
        let cases: &[(&str, &[(E, &str)])] = &[
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
        assert!(p.asked_for_input);
        let ev = p.event(OtherMessage, "x");
        assert_eq!(ev.session_id.as_deref(), Some("s1-1"));
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
        assert_eq!(r.usage, TokenUsage::default());
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
        let env = |stall: i64, operator: Option<&str>| {
            let mut r = ClaudeRunner::new(ClaudeCodeConfig {
                cli: CliSection {
                    stall_timeout_ms: stall,
                    ..CliSection::new("claude")
                },
                permission_mode: "acceptEdits".into(),
                allowed_tools: vec![],
                disallowed_tools: vec![],
                append_system_prompt: None,
            });
            if let Some(k) = operator {
                r.env.push((k.into(), "1".into()));
            }
            let mut i = Invocation {
                spec: crate::host::ProcessSpec::command("claude", "/"),
                prompt: "p",
                turn: 1,
                session: None,
                resume: false,
                state: &mut (),
                writable: None,
            };
            ClaudeCodeConfig::invocation(&r, &mut i).unwrap();
            let env = i
                .spec
                .env
                .iter()
                .filter(|(k, _)| k.to_str().unwrap().contains("TIMEOUT"));
            let pairs =
                env.map(|(k, v)| format!("{}={}", k.to_str().unwrap(), v.to_str().unwrap()));
            pairs.collect::<Vec<_>>()
        };
        assert_eq!(
            env(300_000, None),
            [
                "API_TIMEOUT_MS=120000",
                "CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS=120000"
            ]
        );
        assert_eq!(
            env(1000, Some("API_TIMEOUT_MS")),
            ["CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS=10000"]
        );
        assert!(env(0, None).is_empty());
    }
}
