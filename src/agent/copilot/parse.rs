//! Pure parser of the Copilot CLI `--output-format json` stream (JSONL, CLI 1.0.102): every stdout
//! line becomes exactly one normalized [`AgentEvent`] (so every line counts as activity for the
//! stall timer), and [`StreamParser::finish`] decides the turn outcome from what was seen plus how
//! the process ended. No I/O here; the session feeds lines in and reads the verdict out.

use crate::text::{single_line, truncate_chars};
use std::collections::HashMap;

use serde_json::Value;

use crate::agent::config::AgentKind;
use crate::agent::json::{int_text, str_at, tool_input_detail};
use crate::agent::{valid_session_id, AgentError, AgentErrorKind, AgentEvent, AgentEventKind};

pub use crate::agent::driver::ProcessEnd;

/// Longest summary kept on an event (characters); longer text is cut with `…`.
pub const SUMMARY_MAX_CHARS: usize = 240;
/// Tool calls remembered between `tool.execution_start` and `tool.execution_complete`.
const MAX_TRACKED_TOOL_CALLS: usize = 256;

/// Incremental state over one turn's stdout lines.
#[derive(Debug, Default)]
pub struct StreamParser {
    lines: u64,
    /// `toolCallId` → tool name, to name the tool in `execution_complete` summaries.
    tool_names: HashMap<String, String>,
    result_seen: bool,
    result_exit_code: Option<i64>,
    result_session_id: Option<String>,
    result_outcome: Option<String>,
    aborted: Option<String>,
    session_error: Option<String>,
    input_required: Option<String>,
    premium_requests: Option<f64>,
    permission_denials: u32,
}

impl StreamParser {
    /// A parser for a new turn.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parse one stdout line into one normalized event (never panics; bad input ⇒ `malformed`).
    pub fn parse_line(&mut self, line: &str) -> AgentEvent {
        self.lines += 1;
        let line = line.trim_end_matches(['\r', '\n']);
        let value: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => return self.malformed(format!("not JSON ({e}): {}", excerpt(line))),
        };
        let Some(obj) = value.as_object() else {
            return self.malformed(format!("not a JSON object: {}", excerpt(line)));
        };
        let Some(kind) = obj.get("type").and_then(Value::as_str) else {
            return self.malformed(format!("no \"type\" field: {}", excerpt(line)));
        };
        let null = Value::Null;
        let data = obj.get("data").unwrap_or(&null);
        self.map_event(kind, data, &value)
    }

    fn malformed(&self, summary: String) -> AgentEvent {
        AgentEvent::new(AgentEventKind::Malformed, bound(&summary))
    }

    // Long on purpose: one match arm per protocol event type is the mapping table; splitting it
    // would scatter that table over many functions.
    fn map_event(&mut self, kind: &str, data: &Value, whole: &Value) -> AgentEvent {
        use AgentEventKind as K;
        let ev = |k: AgentEventKind, s: String| AgentEvent::new(k, bound(&s));
        match kind {
            "tool.execution_start" => {
                let id = str_field(data, "toolCallId").unwrap_or_default();
                let name = str_field(data, "toolName").unwrap_or_else(|| "tool".into());
                if !id.is_empty() && self.tool_names.len() < MAX_TRACKED_TOOL_CALLS {
                    self.tool_names.insert(id, name.clone());
                }
                let detail = data
                    .get("arguments")
                    .map(tool_arguments_summary)
                    .unwrap_or_default();
                ev(K::ToolUse, format!("tool {name} started{detail}"))
            }
            "tool.execution_complete" => {
                let id = str_field(data, "toolCallId").unwrap_or_default();
                let name = self
                    .tool_names
                    .remove(&id)
                    .or_else(|| str_field(data, "toolName"))
                    .unwrap_or_else(|| "tool".into());
                let success = data.get("success").and_then(Value::as_bool);
                let err = data.get("error");
                let code = err.and_then(|e| str_field(e, "code"));
                let msg = err
                    .and_then(|e| str_field(e, "message"))
                    .unwrap_or_default();
                if code.as_deref() == Some("denied") {
                    self.permission_denials += 1;
                    ev(K::PermissionDenied, format!("tool {name} denied: {msg}"))
                } else if success == Some(true) {
                    ev(K::ToolUse, format!("tool {name} completed"))
                } else {
                    let code = code.map(|c| format!(" ({c})")).unwrap_or_default();
                    ev(K::ToolUse, format!("tool {name} failed{code}: {msg}"))
                }
            }
            "assistant.message" => {
                let content = str_field(data, "content").unwrap_or_default();
                if !content.trim().is_empty() {
                    ev(K::Notification, format!("assistant: {content}"))
                } else {
                    let tools: Vec<String> = data
                        .get("toolRequests")
                        .and_then(Value::as_array)
                        .map(|reqs| {
                            reqs.iter()
                                .take(8)
                                .filter_map(|r| str_field(r, "name"))
                                .collect()
                        })
                        .unwrap_or_default();
                    if tools.is_empty() {
                        ev(K::Notification, "assistant: (empty message)".into())
                    } else {
                        ev(
                            K::Notification,
                            format!("assistant requests tools: {}", tools.join(", ")),
                        )
                    }
                }
            }
            "assistant.message_delta" | "assistant.reasoning_delta" => {
                let text = str_field(data, "deltaContent").unwrap_or_default();
                ev(K::Notification, format!("{kind}: {text}"))
            }
            "tool.shell_output" | "tool.execution_partial_result" | "tool.execution_progress" => {
                ev(K::Notification, kind.to_string())
            }
            "session.info" | "session.warning" => {
                let t = str_field(data, "infoType")
                    .or_else(|| str_field(data, "warningType"))
                    .unwrap_or_default();
                let msg = str_field(data, "message").unwrap_or_default();
                ev(K::Notification, format!("{kind} {t}: {msg}"))
            }
            "assistant.turn_retry" => ev(K::Notification, "model call retried".into()),
            "model.call_failure" => {
                let status = int_text(data, "statusCode", "?");
                ev(
                    K::Notification,
                    format!("model call failed: status {status}"),
                )
            }
            "session.error" => {
                let t = str_field(data, "errorType").unwrap_or_else(|| "error".into());
                let msg = str_field(data, "message").unwrap_or_default();
                let summary = bound(&format!("{t}: {msg}"));
                self.session_error.get_or_insert(summary.clone());
                ev(K::TurnFailed, format!("session error {summary}"))
            }
            "abort" => {
                let reason = str_field(data, "reason").unwrap_or_else(|| "unknown".into());
                self.aborted.get_or_insert(reason.clone());
                ev(K::Notification, format!("agent aborted: {reason}"))
            }
            "assistant.idle" => {
                if data.get("aborted").and_then(Value::as_bool) == Some(true) {
                    self.aborted.get_or_insert_with(|| "aborted".into());
                    ev(K::Notification, "agent idle (aborted)".into())
                } else {
                    ev(K::OtherMessage, "agent idle".into())
                }
            }
            "result" => {
                self.result_seen = true;
                self.result_exit_code = whole.get("exitCode").and_then(Value::as_i64);
                self.result_session_id = str_field(whole, "sessionId")
                    .filter(|s| valid_session_id(AgentKind::Copilot, s));
                self.result_outcome = str_field(whole, "outcome");
                self.premium_requests = whole
                    .get("usage")
                    .and_then(|u| u.get("premiumRequests"))
                    .and_then(Value::as_f64);
                let code = self
                    .result_exit_code
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "missing".into());
                let outcome = self
                    .result_outcome
                    .as_deref()
                    .map(|o| format!(" outcome={o}"))
                    .unwrap_or_default();
                ev(K::OtherMessage, format!("result exitCode={code}{outcome}"))
            }
            k if k.starts_with("user_input.requested")
                || k.starts_with("elicitation.requested") =>
            {
                self.input_required.get_or_insert_with(|| k.to_string());
                ev(
                    K::TurnInputRequired,
                    format!("agent requested user input ({k})"),
                )
            }
            other => ev(K::OtherMessage, other.to_string()),
        }
    }

    /// The session id the CLI reported in its `result` line (a UUID), if any.
    pub fn result_session_id(&self) -> Option<&str> {
        self.result_session_id.as_deref()
    }

    /// `result.usage.premiumRequests` when reported (0 in BYOK mode).
    pub fn premium_requests(&self) -> Option<f64> {
        self.premium_requests
    }

    /// Lines parsed so far.
    pub(crate) fn line_count(&self) -> u64 {
        self.lines
    }

    /// Tool calls denied by the permission rules.
    pub fn permission_denials(&self) -> u32 {
        self.permission_denials
    }

    /// True when the run looks like `--resume=<id>` naming an unknown session: exit 1, nothing on
    /// stdout, and the CLI's "No session … matched" text on stderr.
    pub fn is_unknown_resume(&self, end: &ProcessEnd) -> bool {
        self.lines == 0
            && end.exit_code == Some(1)
            && !end.cancelled
            && !end.timed_out
            && end.stderr_tail.contains("No session")
            && end.stderr_tail.contains("matched")
    }

    /// True once the `result` line was seen.
    pub(crate) fn result_seen(&self) -> bool {
        self.result_seen
    }

    /// Decide the turn outcome. Precedence: Baton's own cancel/timeout, agent abort, user input
    /// required, `session.error`, missing `result`, `result` failure, non-zero exit; only a clean
    /// `result{exitCode:0}` with exit 0 is success.
    pub fn finish(&self, end: &ProcessEnd) -> Result<(), AgentError> {
        use AgentErrorKind as E;
        let fail = |k: AgentErrorKind, m: String| Err(AgentError::new(k, m));
        let how = format!("process {}", end.describe());
        let stderr = if end.stderr_tail.trim().is_empty() {
            String::new()
        } else {
            format!("; stderr: {}", bound(end.stderr_tail.trim()))
        };
        if end.cancelled {
            return fail(E::TurnCancelled, "turn cancelled by Baton".into());
        }
        if end.timed_out {
            return fail(
                E::TurnTimeout,
                "turn exceeded copilot.turn_timeout_ms".into(),
            );
        }
        if let Some(reason) = &self.aborted {
            return fail(
                E::TurnCancelled,
                format!("agent aborted the turn ({reason}); {how}"),
            );
        }
        if let Some(what) = &self.input_required {
            return fail(
                E::TurnInputRequired,
                format!("agent requested user input ({what})"),
            );
        }
        if let Some(msg) = &self.session_error {
            return fail(E::TurnFailed, format!("agent reported {msg}; {how}"));
        }
        if !self.result_seen {
            if self.lines == 0 && end.exit_code == Some(127) {
                return fail(
                    E::AgentNotFound,
                    format!("copilot command not found (exit 127){stderr}"),
                );
            }
            if end.exit_code == Some(0) {
                return fail(
                    E::ParseError,
                    format!("stream ended without a result line; {how}{stderr}"),
                );
            }
            return fail(
                E::ProcessExit,
                format!("{how} without a result line{stderr}"),
            );
        }
        if self.result_outcome.as_deref() == Some("blocked") {
            return fail(E::TurnFailed, "agent reported outcome=blocked".into());
        }
        match self.result_exit_code {
            Some(0) => {}
            Some(c) => {
                return fail(
                    E::TurnFailed,
                    format!("result reported exitCode={c}; {how}{stderr}"),
                )
            }
            None => return fail(E::ParseError, "result line without exitCode".into()),
        }
        if end.exit_code != Some(0) {
            return fail(E::ProcessExit, format!("{how} after a result line{stderr}"));
        }
        Ok(())
    }
}

fn str_field(v: &Value, key: &str) -> Option<String> {
    str_at(v, key).map(str::to_owned)
}

/// A short ` : <command>` / ` : <path>` detail for a tool's arguments.
fn tool_arguments_summary(args: &Value) -> String {
    match tool_input_detail(args) {
        d if d.is_empty() => d,
        d => format!(": {d}"),
    }
}

/// One line, control characters replaced, at most [`SUMMARY_MAX_CHARS`] characters.
pub(crate) fn bound(s: &str) -> String {
    single_line(s, SUMMARY_MAX_CHARS)
}

fn excerpt(line: &str) -> String {
    truncate_chars(line, 80)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_lines_are_malformed_not_panics() {
        let mut p = StreamParser::new();
        for line in [
            "",
            "{",
            "[]",
            "42",
            "\"x\"",
            "{\"data\":{}}",
            "{\"type\":7}",
            "\u{0}",
        ] {
            assert_eq!(
                p.parse_line(line).kind,
                AgentEventKind::Malformed,
                "{line:?}"
            );
        }
    }

    #[test]
    fn wrong_field_types_do_not_panic() {
        let mut p = StreamParser::new();
        let lines = [
            r#"{"type":"tool.execution_start","data":5}"#,
            r#"{"type":"tool.execution_complete","data":{"error":"x","success":"yes"}}"#,
            r#"{"type":"assistant.message","data":{"content":[1],"toolRequests":{"a":1}}}"#,
            r#"{"type":"result","exitCode":"0","sessionId":12}"#,
            r#"{"type":"session.error","data":null}"#,
        ];
        for l in lines {
            let _ = p.parse_line(l);
        }
        assert!(p
            .finish(&ProcessEnd {
                exit_code: Some(0),
                ..Default::default()
            })
            .is_err());
    }

    #[test]
    fn summaries_are_bounded_single_lines() {
        let mut p = StreamParser::new();
        let long = "é\n".repeat(10_000);
        let line = serde_json::json!({"type":"assistant.message","data":{"content": long}});
        let ev = p.parse_line(&line.to_string());
        assert!(ev.summary.chars().count() <= SUMMARY_MAX_CHARS + 1);
        assert!(!ev.summary.contains('\n'));
    }
}
