//! GitHub Copilot CLI (spec §10.2), built against `@github/copilot@1.0.102`: each turn is one
//! `copilot --prompt=<prompt> --output-format json …` process; every stdout line (JSONL) becomes
//! exactly one event, so every line counts as activity for the stall timer.
//!
//! * Sessions: the stream announces none, so Baton picks the UUID (`--session-id`, then
//!   `--resume`) and emits `session_started` when each process starts. A resume the CLI does not
//!   know exits 1 with nothing on stdout and "No session … matched" on stderr.
//! * Usage: the stream has no token counts; `--usage-output-file` in a Baton-owned temp dir is
//!   read after exit. Its totals are cumulative per session, so a turn reports the difference;
//!   without a file the turn reports zero, flagged unavailable, never invented.

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::config::{AgentKind, CliSection, CopilotConfig};
use super::driver::{ProcessEnd, TurnParser};
use super::loose::{str_at, tool_input_detail, Loose, Num};
use super::runner::{new_uuid_v4, Cli, CliRunner, Invocation, Parsed};
use super::{AgentError, AgentErrorKind, AgentEvent, AgentEventKind as E, TokenUsage, TurnResult};
use crate::text::{single_line, truncate_chars};

/// Makes the CLI approve every tool; removed from the child's environment unless
/// `copilot.allow_all_tools` is true, so the posture stays explicit.
const ALLOW_ALL_ENV: &str = "COPILOT_ALLOW_ALL";
/// Longest event summary (characters).
pub const SUMMARY_MAX_CHARS: usize = 240;
/// Tool calls remembered between `tool.execution_start` and `tool.execution_complete`.
const MAX_TRACKED_TOOL_CALLS: usize = 256;
/// The usage file is a few KB; anything larger is refused.
const MAX_USAGE_FILE_BYTES: u64 = 1024 * 1024;

/// Builds Copilot sessions from `copilot.*`.
pub type CopilotRunner = CliRunner<CopilotConfig>;

impl Cli for CopilotConfig {
    type Parser = StreamParser;
    type State = UsageFiles;
    const KIND: AgentKind = AgentKind::Copilot;
    const NAMES_SESSION: bool = true;

    fn cli(&self) -> &CliSection {
        &self.cli
    }

    /// Values are attached with `=`, so an issue text starting with `--` cannot become CLI flags
    /// (`--prompt=<p>` means `-p <p>`; the CLI rejects `-p --x`).
    fn invocation(r: &CopilotRunner, i: &mut Invocation<UsageFiles>) -> Parsed<Self> {
        let (cfg, session) = (&r.cfg, i.session.unwrap_or_default());
        let file = i.state.file(i.resume)?;
        i.writable = i.state.dir.clone();
        let flag = if i.resume { "--resume" } else { "--session-id" };
        let a = &mut i.spec.args;
        a.push(format!("--prompt={}", i.prompt).into());
        a.extend(["--output-format", "json", "--no-auto-update", "--no-color"].map(Into::into));
        a.push(format!("{flag}={session}").into());
        a.extend(["--usage-output-file".into(), file.into()]);
        if cfg.allow_all_tools {
            a.push("--allow-all-tools".into());
        }
        for (flag, tools) in [("allow", &cfg.allow_tools), ("deny", &cfg.deny_tools)] {
            a.extend(tools.iter().map(|t| format!("--{flag}-tool={t}").into()));
        }
        if let Some(m) = cfg.cli.model.as_deref().filter(|m| !m.trim().is_empty()) {
            a.push(format!("--model={m}").into());
        }
        a.extend(cfg.cli.extra_args.iter().map(Into::into));
        if !cfg.allow_all_tools {
            i.spec.env_remove.push(ALLOW_ALL_ENV.into());
        }
        Ok(StreamParser::new(session.into(), i.turn))
    }

    fn resumed(st: &mut UsageFiles, usage: TokenUsage) {
        st.totals = Some(usage);
    }

    fn ended(st: &mut UsageFiles, p: &mut StreamParser) {
        let Some(file) = st.dir.as_ref().map(|d| d.join("usage.json")) else {
            return;
        };
        let reading = read_usage_file(&file);
        let _ = fs::remove_file(&file);
        match reading {
            Ok(now) => {
                let last = st.totals.replace(now).unwrap_or_default();
                // A figure lower than before is a counter reset (the new value is the delta).
                p.usage = Some(now.zip(&last, |n, old| if n >= old { n - old } else { n }));
            }
            Err(why) => log::info!(
                "copilot token usage unavailable for this turn; reporting zero session_id={}-{} reason={}",
                p.session,
                p.turn,
                bound(&why)
            ),
        }
    }
}

/// A session's usage files: a private temp dir (removed with the session) and the session
/// totals read last.
#[derive(Debug, Default)]
pub struct UsageFiles {
    dir: Option<PathBuf>,
    totals: Option<TokenUsage>,
}

impl UsageFiles {
    /// The usage file of the next invocation, removed beforehand; a new session counts from 0.
    fn file(&mut self, resume: bool) -> Result<PathBuf, AgentError> {
        if self.dir.is_none() {
            // `$TMPDIR/baton-copilot-<uuid>`, mode 0700; created only if new (no symlink games).
            let dir = std::env::temp_dir().join(format!("baton-copilot-{}", new_uuid_v4()?));
            let made = fs::DirBuilder::new().mode(0o700).create(&dir);
            made.map_err(|e| {
                let text = format!("could not create a temp dir for usage files: {e}");
                AgentError::new(AgentErrorKind::StartupFailed, text)
            })?;
            self.dir = Some(dir);
        }
        if !resume {
            self.totals = None;
        }
        let file = self.dir.clone().unwrap_or_default().join("usage.json");
        let _ = fs::remove_file(&file);
        Ok(file)
    }
}

impl Drop for UsageFiles {
    fn drop(&mut self) {
        if let Some(d) = &self.dir {
            let _ = fs::remove_dir_all(d);
        }
    }
}

/// A usage file's session totals, summed over `modelMetrics.*.usage`. Figures are read leniently
/// ([`Num`]), so one odd figure never makes the whole file unavailable.
pub fn read_usage_file(path: &Path) -> Result<TokenUsage, String> {
    let unreadable = |e: std::io::Error| format!("usage file {} unreadable: {e}", path.display());
    let mut text = String::new();
    fs::File::open(path)
        .map_err(unreadable)?
        .take(MAX_USAGE_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(unreadable)?;
    if text.len() as u64 > MAX_USAGE_FILE_BYTES {
        return Err(format!("usage file {} is too large", path.display()));
    }
    let file: Loose<UsageFile> =
        serde_json::from_str(&text).map_err(|e| format!("usage file is not JSON: {e}"))?;
    let metrics = file.as_obj().and_then(|f| f.model_metrics.as_obj());
    let metrics = metrics.ok_or("usage file has no modelMetrics object")?;
    let mut tokens = TokenUsage::default();
    for u in metrics.values().filter_map(|m| m.as_obj()?.usage.as_obj()) {
        tokens.add(&TokenUsage {
            input_tokens: u.input_tokens.count(),
            output_tokens: u.output_tokens.count(),
            cache_read_input_tokens: u.cache_read_tokens.count(),
            cache_creation_input_tokens: u.cache_write_tokens.count(),
        });
    }
    Ok(tokens)
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase", bound(deserialize = "'de: 'a"))]
struct UsageFile<'a> {
    model_metrics: Loose<'a, HashMap<String, Loose<'a, ModelMetrics<'a>>>>,
}

#[derive(Default, Deserialize)]
#[serde(default, bound(deserialize = "'de: 'a"))]
struct ModelMetrics<'a> {
    usage: Loose<'a, ModelUsage<'a>>,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase", bound(deserialize = "'de: 'a"))]
struct ModelUsage<'a> {
    input_tokens: Num<'a>,
    output_tokens: Num<'a>,
    cache_read_tokens: Num<'a>,
    cache_write_tokens: Num<'a>,
}

/// The parser of one invocation's JSONL stdout (pure).
#[derive(Debug, Default)]
pub struct StreamParser {
    session: String,
    turn: u32,
    lines: u64,
    /// `toolCallId` → tool name, to name the tool when it completes.
    tool_names: HashMap<String, String>,
    /// The `result` line's `exitCode` and `outcome`.
    result: Option<(Option<i64>, Option<String>)>,
    aborted: Option<String>,
    session_error: Option<String>,
    input_required: Option<String>,
    /// Set after the process ended, from the usage file.
    usage: Option<TokenUsage>,
}

impl StreamParser {
    pub fn new(session: String, turn: u32) -> Self {
        StreamParser {
            session,
            turn,
            ..Self::default()
        }
    }

    fn map_event(&mut self, kind: &str, v: &Value) -> (E, String) {
        let data = v.get("data").unwrap_or(&Value::Null);
        let s = |k: &str| str_at(data, k);
        match kind {
            "tool.execution_start" | "tool.execution_complete" => {
                self.tool_event(kind == "tool.execution_start", data)
            }
            "assistant.message" => (E::Notification, assistant_message(data)),
            "assistant.message_delta" | "assistant.reasoning_delta" => {
                let text = s("deltaContent").unwrap_or_default();
                (E::Notification, format!("{kind}: {text}"))
            }
            "tool.shell_output" | "tool.execution_partial_result" | "tool.execution_progress" => {
                (E::Notification, kind.to_string())
            }
            "session.info" | "session.warning" => {
                let t = s("infoType").or(s("warningType")).unwrap_or_default();
                let text = format!("{kind} {t}: {}", s("message").unwrap_or_default());
                (E::Notification, text)
            }
            "assistant.turn_retry" => (E::Notification, "model call retried".into()),
            "model.call_failure" => {
                let code = data.get("statusCode").and_then(Value::as_i64);
                let code = code.map_or("?".into(), |c| c.to_string());
                (E::Notification, format!("model call failed: status {code}"))
            }
            "session.error" => {
                let t = s("errorType").unwrap_or("error");
                let summary = bound(&format!("{t}: {}", s("message").unwrap_or_default()));
                let text = format!("session error {summary}");
                self.session_error.get_or_insert(summary);
                (E::TurnFailed, text)
            }
            "abort" => {
                let reason = s("reason").unwrap_or("unknown");
                self.aborted.get_or_insert_with(|| reason.to_string());
                (E::Notification, format!("agent aborted: {reason}"))
            }
            "assistant.idle" if data.get("aborted").and_then(Value::as_bool) == Some(true) => {
                self.aborted.get_or_insert_with(|| "aborted".into());
                (E::Notification, "agent idle (aborted)".into())
            }
            "assistant.idle" => (E::OtherMessage, "agent idle".into()),
            "result" => {
                let code = v.get("exitCode").and_then(Value::as_i64);
                let outcome = str_at(v, "outcome").map(String::from);
                let c = code.map_or("missing".into(), |c| c.to_string());
                let o = outcome.as_ref().map(|o| format!(" outcome={o}"));
                let text = format!("result exitCode={c}{}", o.unwrap_or_default());
                self.result = Some((code, outcome));
                (E::OtherMessage, text)
            }
            k if k.starts_with("user_input.requested")
                || k.starts_with("elicitation.requested") =>
            {
                self.input_required.get_or_insert_with(|| k.to_string());
                let text = format!("agent requested user input ({k})");
                (E::TurnInputRequired, text)
            }
            other => (E::OtherMessage, other.to_string()),
        }
    }

    /// `tool.execution_start` / `tool.execution_complete` (a denial is `permission_denied`).
    fn tool_event(&mut self, start: bool, data: &Value) -> (E, String) {
        let s = |k: &str| str_at(data, k);
        let id = s("toolCallId").unwrap_or_default();
        if start {
            let name = s("toolName").unwrap_or("tool");
            if !id.is_empty() && self.tool_names.len() < MAX_TRACKED_TOOL_CALLS {
                self.tool_names.insert(id.to_string(), name.to_string());
            }
            let detail = data.get("arguments").map(tool_input_detail);
            let detail = detail.filter(|d| !d.is_empty()).map(|d| format!(": {d}"));
            return (
                E::ToolUse,
                format!("tool {name} started{}", detail.unwrap_or_default()),
            );
        }
        let name = (self.tool_names.remove(id))
            .unwrap_or_else(|| s("toolName").unwrap_or("tool").to_string());
        let err = data.get("error");
        let code = err.and_then(|e| str_at(e, "code"));
        let msg = err.and_then(|e| str_at(e, "message")).unwrap_or_default();
        if code == Some("denied") {
            (E::PermissionDenied, format!("tool {name} denied: {msg}"))
        } else if data.get("success").and_then(Value::as_bool) == Some(true) {
            (E::ToolUse, format!("tool {name} completed"))
        } else {
            let code = code.map(|c| format!(" ({c})")).unwrap_or_default();
            (E::ToolUse, format!("tool {name} failed{code}: {msg}"))
        }
    }
}

impl TurnParser for StreamParser {
    fn started(&mut self, _stdin: Option<Box<dyn std::io::Write + Send>>) -> Vec<AgentEvent> {
        let text = format!("copilot process started (turn {})", self.turn);
        vec![self.event(E::SessionStarted, &text)]
    }

    /// Exactly one event per line, `malformed` for anything but a JSON object with a `type`.
    fn parse_line(&mut self, line: &str) -> Vec<AgentEvent> {
        self.lines += 1;
        let line = line.trim_end_matches(['\r', '\n']);
        let excerpt = || truncate_chars(line, 80);
        let (kind, text) = match serde_json::from_str::<Value>(line) {
            Err(e) => (E::Malformed, format!("not JSON ({e}): {}", excerpt())),
            Ok(v) if !v.is_object() => (E::Malformed, format!("not a JSON object: {}", excerpt())),
            Ok(v) => match str_at(&v, "type") {
                Some(t) => self.map_event(t, &v),
                None => (E::Malformed, format!("no \"type\" field: {}", excerpt())),
            },
        };
        vec![self.event(kind, &text)]
    }

    fn event(&self, kind: E, summary: &str) -> AgentEvent {
        AgentEvent::of(kind, bound(summary), Some(&self.session), self.turn)
    }

    fn result_seen(&self) -> bool {
        self.result.is_some()
    }

    /// Precedence: Baton's own cancel/timeout, agent abort, user input required,
    /// `session.error`, missing `result`, `result` failure, non-zero exit; only a clean
    /// `result{exitCode:0}` with exit 0 is success.
    fn outcome(&self, end: &ProcessEnd) -> TurnResult {
        use AgentErrorKind as K;
        let how = format!("process {}", end.describe());
        let stderr = match end.stderr_tail.trim() {
            "" => String::new(),
            t => format!("; stderr: {}", bound(t)),
        };
        let (kind, text) = if end.cancelled {
            (K::TurnCancelled, "turn cancelled by Baton".into())
        } else if end.timed_out {
            (
                K::TurnTimeout,
                "turn exceeded copilot.turn_timeout_ms".into(),
            )
        } else if let Some(reason) = &self.aborted {
            let text = format!("agent aborted the turn ({reason}); {how}");
            (K::TurnCancelled, text)
        } else if let Some(what) = &self.input_required {
            let text = format!("agent requested user input ({what})");
            (K::TurnInputRequired, text)
        } else if let Some(msg) = &self.session_error {
            (K::TurnFailed, format!("agent reported {msg}; {how}"))
        } else {
            match (&self.result, end.exit_code) {
                (None, Some(127)) if self.lines == 0 => {
                    let text = format!("copilot command not found (exit 127){stderr}");
                    (K::AgentNotFound, text)
                }
                (None, Some(0)) => {
                    let text = format!("stream ended without a result line; {how}{stderr}");
                    (K::ParseError, text)
                }
                (None, _) => (
                    K::ProcessExit,
                    format!("{how} without a result line{stderr}"),
                ),
                (Some((_, Some(o))), _) if o == "blocked" => {
                    (K::TurnFailed, "agent reported outcome=blocked".into())
                }
                (Some((None, _)), _) => (K::ParseError, "result line without exitCode".into()),
                (Some((Some(c), _)), _) if *c != 0 => {
                    let text = format!("result reported exitCode={c}; {how}{stderr}");
                    (K::TurnFailed, text)
                }
                (_, Some(0)) => return Ok(()),
                _ => (K::ProcessExit, format!("{how} after a result line{stderr}")),
            }
        };
        Err(AgentError::new(kind, text))
    }

    fn usage(&self) -> Option<TokenUsage> {
        Some(self.usage.unwrap_or_default())
    }

    /// Any process that printed a line has created (or resumed) the session.
    fn stored(&self) -> bool {
        self.lines > 0
    }

    /// Exit 1, nothing on stdout, and the CLI's "No session … matched" on stderr.
    fn unknown_resume(&self, end: &ProcessEnd) -> bool {
        self.lines == 0
            && end.exit_code == Some(1)
            && !end.cancelled
            && !end.timed_out
            && end.stderr_tail.contains("No session")
            && end.stderr_tail.contains("matched")
    }

    fn result_text(&self) -> Option<String> {
        self.usage
            .is_none()
            .then(|| "tokens unavailable (reported as 0)".into())
    }
}

fn assistant_message(data: &Value) -> String {
    let content = str_at(data, "content").unwrap_or_default();
    if !content.trim().is_empty() {
        return format!("assistant: {content}");
    }
    let requests = data.get("toolRequests").and_then(Value::as_array);
    let tools: Vec<&str> = requests
        .map(|r| r.iter().take(8).filter_map(|r| str_at(r, "name")).collect())
        .unwrap_or_default();
    if tools.is_empty() {
        "assistant: (empty message)".into()
    } else {
        format!("assistant requests tools: {}", tools.join(", "))
    }
}

/// One line, control characters replaced, at most [`SUMMARY_MAX_CHARS`] characters.
fn bound(s: &str) -> String {
    single_line(s, SUMMARY_MAX_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> CopilotConfig {
        CopilotConfig {
            cli: CliSection {
                turn_timeout_ms: 1000,
                stall_timeout_ms: 1000,
                ..CliSection::new("copilot")
            },
            allow_all_tools: false,
            allow_tools: vec![],
            deny_tools: vec![],
        }
    }

    /// The arguments of one invocation (after `$0`).
    fn args(c: CopilotConfig, prompt: &str, session: &str, resume: bool) -> Vec<String> {
        let mut state = UsageFiles::default();
        let mut i = Invocation {
            spec: crate::host::ProcessSpec::command("copilot", "/"),
            prompt,
            turn: 1,
            session: Some(session),
            resume,
            state: &mut state,
            writable: None,
        };
        CopilotConfig::invocation(&CopilotRunner::new(c), &mut i).unwrap();
        let strs = i.spec.args[1..]
            .iter()
            .map(|s| s.to_str().unwrap().to_string());
        strs.collect()
    }

    #[test]
    fn first_turn_args() {
        let a = args(cfg(), "do it; rm -rf / $(x) `y`", "u1", false);
        assert_eq!(
            a[..7],
            [
                "--prompt=do it; rm -rf / $(x) `y`",
                "--output-format",
                "json",
                "--no-auto-update",
                "--no-color",
                "--session-id=u1",
                "--usage-output-file",
            ]
        );
        assert!(a[7].contains("baton-copilot-") && a[7].ends_with("/usage.json"));
        assert_eq!(a.len(), 8);
    }

    #[test]
    fn permissions_model_and_extra_args() {
        let mut c = cfg();
        c.allow_tools = vec!["shell(gh:*)".into(), "write".into()];
        c.deny_tools = vec!["shell(rm)".into()];
        c.cli.model = Some("gpt-4.1".into());
        c.cli.extra_args = vec!["--add-dir".into(), "/x".into()];
        let a = args(c.clone(), "p", "u2", true);
        assert_eq!(a[5], "--resume=u2");
        assert_eq!(
            &a[8..],
            [
                "--allow-tool=shell(gh:*)",
                "--allow-tool=write",
                "--deny-tool=shell(rm)",
                "--model=gpt-4.1",
                "--add-dir",
                "/x"
            ]
        );
        assert!(!a.contains(&"--allow-all-tools".to_string()));
        c.allow_all_tools = true;
        assert!(args(c, "p", "u2", true).contains(&"--allow-all-tools".to_string()));
    }

    #[test]
    fn bad_lines_are_malformed_not_panics() {
        let mut p = StreamParser::default();
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
            assert_eq!(p.parse_line(line)[0].kind, E::Malformed, "{line:?}");
        }
    }

    #[test]
    fn wrong_field_types_do_not_panic() {
        let mut p = StreamParser::default();
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
        let end = ProcessEnd {
            exit_code: Some(0),
            ..Default::default()
        };
        assert!(p.outcome(&end).is_err());
    }

    #[test]
    fn summaries_are_bounded_single_lines() {
        let mut p = StreamParser::default();
        let long = "é\n".repeat(10_000);
        let line = serde_json::json!({"type":"assistant.message","data":{"content": long}});
        let ev = &p.parse_line(&line.to_string())[0];
        assert!(ev.summary.chars().count() <= SUMMARY_MAX_CHARS + 1);
        assert!(!ev.summary.contains('\n'));
    }

    fn usage_of(json: &str) -> Result<TokenUsage, String> {
        let mut st = UsageFiles::default();
        let f = st.file(false).unwrap();
        fs::write(&f, json).unwrap();
        read_usage_file(&f)
    }

    #[test]
    fn bad_usage_json_is_an_error() {
        assert!(usage_of("").is_err());
        assert!(usage_of("[]").is_err());
        assert!(usage_of("{\"modelMetrics\":5}").is_err());
        // Wrong-typed figures count as zero rather than failing the turn.
        let t =
            usage_of(r#"{"modelMetrics":{"m":{"usage":{"inputTokens":"x","outputTokens":-1}}}}"#);
        assert_eq!(t, Ok(TokenUsage::default()));
    }

    #[test]
    fn hostile_usage_figures_are_read_leniently_and_clamped() {
        // Floats and numeric strings count; a number too big for a float does not make the file
        // unreadable; huge figures are clamped; negative, NaN and non-numbers are 0.
        let t = usage_of(
            r#"{"modelMetrics":{"a":{"usage":{"inputTokens":12.9,"outputTokens":"34","cacheReadTokens":1e400,"cacheWriteTokens":"NaN"}},
                "b":{"usage":{"inputTokens":"-3","outputTokens":[1]}},"c":{"usage":5},"d":7},
                "totalPremiumRequestCost":"1e400","totalUserRequests":"2"}"#,
        );
        let want = TokenUsage {
            input_tokens: 12,
            output_tokens: 34,
            cache_read_input_tokens: crate::agent::loose::MAX_COUNT,
            cache_creation_input_tokens: 0,
        };
        assert_eq!(t, Ok(want));
    }

    #[test]
    fn sums_over_models() {
        let t = usage_of(
            r#"{"modelMetrics":{"a":{"usage":{"inputTokens":1,"outputTokens":2,"cacheReadTokens":3,"cacheWriteTokens":4}},
                "b":{"usage":{"inputTokens":10,"outputTokens":20}}},"totalUserRequests":2}"#,
        );
        let want = TokenUsage {
            input_tokens: 11,
            output_tokens: 22,
            cache_read_input_tokens: 3,
            cache_creation_input_tokens: 4,
        };
        assert_eq!(t, Ok(want));
    }

    /// Turns of one session reading `files` (`None`: no file) after each; `resume` from turn 2.
    type Reading = (Option<(u64, u64)>, Option<String>);

    fn turns(files: &[Option<(u64, u64)>]) -> Vec<Reading> {
        let mut st = UsageFiles::default();
        let out = (files.iter().enumerate())
            .map(|(i, usage)| {
                let f = st.file(i > 0).unwrap();
                if let Some((i, o)) = usage {
                    let json = format!(
                        r#"{{"modelMetrics":{{"m":{{"usage":{{"inputTokens":{i},"outputTokens":{o}}}}}}}}}"#
                    );
                    fs::write(&f, json).unwrap();
                }
                let mut p = StreamParser::default();
                CopilotConfig::ended(&mut st, &mut p);
                (p.usage.map(|u| (u.input_tokens, u.output_tokens)), p.result_text())
            })
            .collect();
        let dir = st.dir.clone().unwrap();
        drop(st);
        assert!(!dir.exists(), "the temp dir goes with the session");
        out
    }

    #[test]
    fn cumulative_totals_become_deltas() {
        let got = turns(&[Some((1234, 56)), Some((2468, 112))]);
        assert_eq!(got, [(Some((1234, 56)), None), (Some((1234, 56)), None)]);
    }

    #[test]
    fn missing_reading_is_zero_and_flagged_and_keeps_baseline() {
        let got = turns(&[Some((1000, 10)), None, Some((3000, 30))]);
        let flagged = Some("tokens unavailable (reported as 0)".to_string());
        assert_eq!(got[1], (None, flagged));
        assert_eq!(got[2].0, Some((2000, 20)));
    }

    #[test]
    fn decrease_is_a_reset_not_negative() {
        assert_eq!(
            turns(&[Some((5000, 50)), Some((100, 1))])[1].0,
            Some((100, 1))
        );
    }

    #[test]
    fn a_new_session_counts_from_zero() {
        let mut st = UsageFiles::default();
        st.totals = Some(TokenUsage {
            input_tokens: 99,
            ..Default::default()
        });
        st.file(false).unwrap();
        assert_eq!(st.totals, None);
    }
}
