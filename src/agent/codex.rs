//! OpenAI Codex over `codex app-server` (Symphony §10), built against `@openai/codex@0.169.0`:
//! JSON-RPC 2.0, one app-server process per turn (the exchange: ARCHITECTURE.md). An unknown
//! thread falls back once to `thread/start` in the same process; a restart takes the path of a
//! continuation turn, the history being in Codex's store. Approvals are declined (the sandbox is
//! the boundary). Usage sums this turn's `tokenUsage.last`, so the replay `thread/resume` sends is
//! never counted again; Codex reports no cost. Timeouts (Symphony §10.6): `read_timeout_ms` per
//! request, `turn_timeout_ms` as the silence bound of the stream; both stop the group.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Sender};
use serde_json::{json, Value};

use super::config::{AgentKind, CliSection, CodexConfig};
use super::driver::{ProcessEnd, TurnParser};
use super::loose::{count, first_detail, one_line, str_at, SUMMARY_MAX};
use super::runner::{Cli, CliRunner, Invocation, Parsed};
use super::{
    AgentError, AgentErrorKind as K, AgentEvent, AgentEventKind as E, AgentRateLimits, TokenUsage,
    TurnResult,
};

/// Longest JSON-RPC reply or server request accepted (Symphony §10.1: control payloads ≤ 4 MiB;
/// notifications may use the whole line bound).
pub const MAX_CONTROL_BYTES: usize = 4 * 1024 * 1024;
/// The request whose error falls back to `thread/start`.
const RESUME: &str = "thread/resume";
/// After `turn/completed` (or a fatal error) Baton closes stdin; the server gets this long to exit.
const EXIT_GRACE: Duration = Duration::from_secs(5);

/// Builds Codex sessions from `codex.*`.
pub type CodexRunner = CliRunner<CodexConfig>;

impl Cli for CodexConfig {
    type Parser = Client;
    type State = ();
    const KIND: AgentKind = AgentKind::Codex;

    fn cli(&self) -> &CliSection {
        &self.cli
    }

    fn invocation(r: &CodexRunner, i: &mut Invocation<()>) -> Parsed<Self> {
        let args = r.cfg.cli.extra_args.iter().map(Into::into);
        i.spec.args.extend(args);
        i.spec.stdin_pipe = true;
        let thread = i.session.map(String::from);
        Ok(Client::new(&r.cfg, &i.spec.cwd, thread, i.prompt, i.turn))
    }
}

/// The JSON-RPC client of one app-server process (the driver's [`TurnParser`]).
#[derive(Default)]
pub struct Client {
    thread_params: Value,
    turn_params: Value,
    read_timeout: Duration,
    silence: Duration,
    turn: u32,
    tx: Option<Sender<Vec<u8>>>,
    next_id: i64,
    /// The one outstanding request: id, method, when it was sent.
    pending: Option<(i64, &'static str, Instant)>,
    /// Set when the process started, then at every line.
    last_output: Option<Instant>,
    thread_id: Option<String>,
    turn_id: Option<String>,
    /// The result `turn/completed` reported.
    completed: Option<TurnResult>,
    failure: Option<AgentError>,
    done_at: Option<Instant>,
    last_error: Option<String>,
    usage: TokenUsage,
}

impl Client {
    /// A client for turn `turn` of `thread` (`None`: start a thread) running `prompt` in `cwd`.
    pub fn new(
        cfg: &CodexConfig,
        cwd: &Path,
        thread: Option<String>,
        prompt: &str,
        turn: u32,
    ) -> Client {
        let cwd = cwd.to_string_lossy();
        let mut thread_params = json!({"cwd": cwd, "approvalPolicy": cfg.approval_policy,
            "sandbox": cfg.thread_sandbox});
        if let Some(m) = cfg.cli.model.as_deref().filter(|m| !m.is_empty()) {
            thread_params["model"] = m.into();
        }
        let mut turn_params = json!({"cwd": cwd, "input": [{"type": "text", "text": prompt}]});
        if let Some(p) = &cfg.turn_sandbox_policy {
            turn_params["sandboxPolicy"] = p.clone();
        }
        Client {
            thread_params,
            turn_params,
            read_timeout: Duration::from_millis(cfg.read_timeout_ms.max(1)),
            silence: Duration::from_millis(cfg.cli.turn_timeout_ms.max(1)),
            turn,
            thread_id: thread,
            ..Client::default()
        }
    }

    fn send(&mut self, msg: Value) {
        let bytes = format!("{msg}\n").into_bytes();
        // A full queue means the server stopped reading: end the turn rather than block.
        if matches!(&self.tx, Some(tx) if tx.try_send(bytes).is_err()) {
            self.fail(K::ProcessExit, "app-server stopped reading its stdin");
        }
    }

    fn request(&mut self, method: &'static str, params: Value) {
        self.next_id += 1;
        self.pending = Some((self.next_id, method, Instant::now()));
        self.send(json!({"id": self.next_id, "method": method, "params": params}));
    }

    /// End the exchange: close stdin so the server exits.
    fn finish(&mut self) {
        self.tx = None;
        self.pending = None;
        self.done_at.get_or_insert_with(Instant::now);
    }

    fn fail(&mut self, kind: K, message: impl Into<String>) {
        self.failure.get_or_insert(AgentError::new(kind, message));
        self.finish();
    }

    fn thread_request(&mut self) {
        let mut params = self.thread_params.clone();
        let Some(id) = self.thread_id.clone() else {
            return self.request("thread/start", params);
        };
        params["threadId"] = id.into();
        params["excludeTurns"] = true.into();
        self.request(RESUME, params);
    }

    /// A reply to one of Baton's requests.
    fn on_reply(&mut self, id: Option<i64>, v: &Value) -> AgentEvent {
        let Some((_, method, _)) = self.pending.filter(|p| Some(p.0) == id) else {
            return self.event(E::Malformed, "reply to no pending request");
        };
        self.pending = None;
        if let Some(err) = v.get("error") {
            let msg = str_at(err, "message").unwrap_or("?");
            if method == RESUME {
                // An unknown or unreadable thread: start a new one once, in this process.
                let old = self.thread_id.take().unwrap_or_default();
                self.thread_request();
                let text = format!("resume of thread {old} failed ({msg}); starting a new thread");
                log::warn!("codex {text}");
                return self.event(E::Notification, &text);
            }
            let text = format!("response_error: {method} failed: {msg}");
            self.fail(K::StartupFailed, text.clone());
            return self.event(E::Notification, &text);
        }
        match method {
            "initialize" => {
                self.send(json!({"method": "initialized"}));
                self.thread_request();
                self.event(E::OtherMessage, "initialized")
            }
            "thread/start" | RESUME => {
                let Some(id) = v.pointer("/result/thread/id").and_then(Value::as_str) else {
                    let text = format!("{method} reply without a thread id");
                    self.fail(K::StartupFailed, text);
                    return self.event(E::Malformed, "thread reply without thread.id");
                };
                self.thread_id = Some(crate::text::truncate_chars(id, 128));
                let mut params = self.turn_params.clone();
                params["threadId"] = id.into();
                self.request("turn/start", params);
                let how = match method {
                    RESUME => "resumed",
                    _ => "started",
                };
                let text = format!("thread {how} (turn {})", self.turn);
                self.event(E::SessionStarted, &text)
            }
            _ => {
                let id = v.pointer("/result/turn/id").and_then(Value::as_str);
                self.turn_id = id.map(String::from);
                self.event(E::OtherMessage, "turn started")
            }
        }
    }

    /// A request from the server: answered at once, never left waiting.
    fn on_server_request(&mut self, id: &Value, method: &str, params: &Value) -> AgentEvent {
        let detail = first_detail(["command", "reason", "tool"].map(|k| str_at(params, k)));
        let (result, event) = match method {
            "item/commandExecution/requestApproval" | "item/fileChange/requestApproval" => (
                json!({"decision": "decline"}),
                self.event(E::PermissionDenied, &format!("{method} declined: {detail}")),
            ),
            "execCommandApproval" | "applyPatchApproval" => (
                json!({"decision": "denied"}),
                self.event(E::PermissionDenied, &format!("{method} denied: {detail}")),
            ),
            "item/permissions/requestApproval" => (
                json!({"permissions": {}}),
                self.event(E::PermissionDenied, "extra permissions declined"),
            ),
            "item/tool/call" => (
                json!({"success": false, "contentItems": [{"type": "inputText",
                    "text": "Baton offers no client-side tools"}]}),
                self.event(E::Notification, &format!("unsupported tool call {detail}")),
            ),
            "item/tool/requestUserInput" | "mcpServer/elicitation/request" => {
                self.send(json!({"id": id, "error": {"code": -32000,
                    "message": "headless: no user input"}}));
                self.fail(
                    K::TurnInputRequired,
                    format!("the agent asked for user input ({method}); headless turns never wait"),
                );
                return self.event(E::TurnInputRequired, &format!("{method}: {detail}"));
            }
            other => {
                self.send(json!({"id": id, "error": {"code": -32601,
                    "message": "method not supported by this client"}}));
                let m = one_line(other, 60);
                return self.event(E::Malformed, &format!("unexpected server request {m}"));
            }
        };
        self.send(json!({"id": id, "result": result}));
        event
    }

    /// `item/started` / `item/completed`: tool use, the assistant's messages, command results.
    fn on_item(&self, started: bool, item: &Value) -> AgentEvent {
        let item_type = str_at(item, "type").unwrap_or("?");
        match (started, item_type) {
            (true, "userMessage" | "agentMessage" | "reasoning") => {
                self.event(E::OtherMessage, &format!("{item_type} started"))
            }
            (true, _) => {
                let d = first_detail(["command", "tool", "query"].map(|k| str_at(item, k)));
                self.event(E::ToolUse, &format!("{item_type}: {d}"))
            }
            (false, "agentMessage") => {
                let text = str_at(item, "text").unwrap_or("");
                self.event(E::Notification, &format!("assistant: {text}"))
            }
            (false, "commandExecution") => {
                let status = str_at(item, "status").unwrap_or("?");
                let exit = item.get("exitCode").map_or("?".into(), Value::to_string);
                let command = str_at(item, "command").unwrap_or("");
                let text = format!("command {status} exit={exit}: {command}");
                self.event(E::Notification, &text)
            }
            (false, other) => self.event(E::OtherMessage, &format!("{other} completed")),
        }
    }

    fn on_notification(&mut self, method: &str, p: &Value) -> AgentEvent {
        match method {
            "item/started" | "item/completed" => self.on_item(method == "item/started", &p["item"]),
            "thread/tokenUsage/updated" => {
                // The replay after `thread/resume` carries an earlier turn's id: never counted.
                let Some(last) = p.pointer("/tokenUsage/last").map(usage_of) else {
                    return self.event(E::Malformed, "token usage without last");
                };
                if self.turn_id.is_some() && str_at(p, "turnId") == self.turn_id.as_deref() {
                    self.usage.add(&last);
                }
                let total = count(p.pointer("/tokenUsage/total/totalTokens"));
                self.event(E::OtherMessage, &format!("thread tokens total={total}"))
            }
            "account/rateLimits/updated" => match p.get("rateLimits").and_then(rate_limits) {
                Some(rl) => rl.event(|kind, text| self.event(kind, text)),
                None => self.event(E::Malformed, "rate limits without a window"),
            },
            "error" => {
                let err = &p["error"];
                let info = err.get("codexErrorInfo").and_then(Value::as_object);
                let http = info.and_then(|o| o.values().find_map(|v| v["httpStatusCode"].as_u64()));
                let http = http.map(|s| format!(" (http {s})")).unwrap_or_default();
                let text = one_line(str_at(err, "message").unwrap_or("?"), 160) + &http;
                let retry = p.get("willRetry").and_then(Value::as_bool) == Some(true);
                if !retry {
                    self.last_error = Some(text.clone());
                }
                let how = if retry { "retrying" } else { "final" };
                self.event(E::Notification, &format!("api error ({how}): {text}"))
            }
            "turn/completed" => {
                let turn = &p["turn"];
                let ours = match &self.turn_id {
                    Some(o) => str_at(turn, "id") == Some(o),
                    None => self.thread_id.is_some(),
                };
                if !ours {
                    return self.event(E::OtherMessage, "another turn completed");
                }
                let status = str_at(turn, "status").unwrap_or("?").to_string();
                let error = turn.pointer("/error/message").and_then(Value::as_str);
                let error = error.map(|e| one_line(e, 300)).filter(|e| !e.is_empty());
                let error = error.or(self.last_error.clone()).unwrap_or_default();
                let err = |k, m: String| Err(AgentError::new(k, m));
                self.completed = Some(match status.as_str() {
                    "completed" => Ok(()),
                    "interrupted" => err(K::TurnCancelled, "turn interrupted".into()),
                    _ => err(K::TurnFailed, format!("turn {status}: {error}")),
                });
                self.finish();
                self.event(E::OtherMessage, &format!("turn/completed status={status}"))
            }
            "item/agentMessage/delta" => self.event(E::OtherMessage, "assistant delta"),
            other => self.event(E::OtherMessage, &one_line(other, 60)),
        }
    }
}

impl TurnParser for Client {
    fn started(&mut self, stdin: Option<Box<dyn Write + Send>>) -> Vec<AgentEvent> {
        self.last_output = Some(Instant::now());
        if let Some(mut stdin) = stdin {
            let (tx, rx) = bounded::<Vec<u8>>(64);
            let spawned = std::thread::Builder::new()
                .name("codex-stdin".into())
                .spawn(move || {
                    rx.iter()
                        .try_for_each(|m| stdin.write_all(&m).and_then(|_| stdin.flush()))
                });
            self.tx = spawned.ok().map(|_| tx);
        }
        if self.tx.is_none() {
            let text = "the host gave codex app-server no stdin pipe (needed for JSON-RPC)";
            self.fail(K::StartupFailed, text);
            return Vec::new();
        }
        let info = json!({"clientInfo": {"name": "baton", "title": "Baton",
            "version": env!("CARGO_PKG_VERSION")}});
        self.request("initialize", info);
        Vec::new()
    }

    fn parse_line(&mut self, line: &str) -> Vec<AgentEvent> {
        self.last_output = Some(Instant::now());
        let line = line.trim();
        if line.is_empty() {
            return Vec::new();
        }
        let v: Value = match serde_json::from_str(line) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => return vec![self.event(E::Malformed, "non-object JSON line")],
            Err(e) => return vec![self.event(E::Malformed, &format!("non-JSON line ({e})"))],
        };
        let method = str_at(&v, "method");
        let params = &v["params"];
        let ev = match (v.get("id"), method) {
            (Some(_), _) if line.len() > MAX_CONTROL_BYTES => {
                if self.pending.is_some() {
                    self.fail(K::StartupFailed, "response_error: reply over 4 MiB");
                }
                let text = format!("control frame over 4 MiB ({} bytes)", line.len());
                self.event(E::Malformed, &text)
            }
            (Some(id), Some(m)) => self.on_server_request(id, m, params),
            (Some(id), None) => self.on_reply(id.as_i64(), &v),
            (None, Some(m)) => self.on_notification(m, params),
            (None, None) => self.event(E::Malformed, "JSON-RPC message without id or method"),
        };
        vec![ev]
    }

    fn event(&self, kind: E, summary: &str) -> AgentEvent {
        let text = one_line(summary, SUMMARY_MAX);
        AgentEvent::of(kind, text, self.thread_id.as_deref(), self.turn)
    }

    fn result_seen(&self) -> bool {
        self.done_at.is_some()
    }

    /// Symphony §10.6 categories mapped onto Baton's. A failure Baton saw ends the turn, unless
    /// the server completed it first (user input fails it either way).
    fn outcome(&self, end: &ProcessEnd) -> TurnResult {
        let err = |k, m: String| Err(AgentError::new(k, m));
        if end.cancelled {
            return err(K::TurnCancelled, "turn cancelled".into());
        }
        match (&self.failure, &self.completed) {
            (Some(e), None) => return Err(e.clone()),
            (Some(e), _) if e.kind == K::TurnInputRequired => return Err(e.clone()),
            (_, Some(result)) => return result.clone(),
            (None, None) => {}
        }
        let stderr = end.stderr_note();
        match (end.timed_out, self.pending, end.exit_code) {
            (true, Some((_, method, _)), _) => err(
                K::StartupFailed,
                format!("response_timeout: no reply to {method} within codex.read_timeout_ms"),
            ),
            (true, None, _) => err(
                K::TurnTimeout,
                "turn_timeout: no output for codex.turn_timeout_ms; process group stopped".into(),
            ),
            (_, _, Some(127)) => err(
                K::AgentNotFound,
                format!("codex command not found (exit code 127){stderr}"),
            ),
            _ => err(
                K::ProcessExit,
                format!(
                    "app-server ended before the turn completed ({}){stderr}",
                    end.describe()
                ),
            ),
        }
    }

    fn usage(&self) -> Option<TokenUsage> {
        Some(self.usage)
    }

    fn session(&self) -> Option<&str> {
        self.thread_id.as_deref()
    }

    /// `turn_timeout_ms` bounds silence here, not the turn: a turn has no total cap.
    fn deadline(&self) -> Option<Instant> {
        let silence = self.last_output.unwrap_or_else(Instant::now) + self.silence;
        let reply = self.pending.map(|(.., sent)| sent + self.read_timeout);
        let bound = reply.map_or(silence, |r| r.min(silence));
        Some(self.done_at.map_or(bound, |t| t + EXIT_GRACE))
    }
}

/// A `tokenUsage.last` (or `total`) breakdown; cached input is a subset of input.
fn usage_of(u: &Value) -> TokenUsage {
    let n = |k: &str| count(u.get(k));
    let cached = n("cachedInputTokens");
    TokenUsage {
        input_tokens: n("inputTokens").saturating_sub(cached),
        output_tokens: n("outputTokens"),
        cache_read_input_tokens: cached,
        cache_creation_input_tokens: n("cacheWriteInputTokens"),
    }
}

/// `account/rateLimits/updated.rateLimits`: the fuller of the primary and secondary windows.
fn rate_limits(rl: &Value) -> Option<AgentRateLimits> {
    let window = |k: &'static str| {
        let w = rl.get(k)?;
        let used = w.get("usedPercent")?.as_f64().filter(|u| u.is_finite())?;
        Some((k, used, w))
    };
    let (name, used, w) = [window("primary"), window("secondary")]
        .into_iter()
        .flatten()
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    let reached = rl.get("rateLimitReachedType").is_some_and(|t| !t.is_null());
    Some(AgentRateLimits {
        status: if reached { "rejected" } else { "allowed" }.into(),
        rate_limit_type: Some(name.into()),
        utilization: Some((used / 100.0).clamp(0.0, 1.0)),
        resets_at: w["resetsAt"].as_u64().map(AgentRateLimits::reset_time),
        ..AgentRateLimits::default()
    })
}
