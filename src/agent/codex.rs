//! OpenAI Codex adapter over `codex app-server` (Symphony §10), built against
//! `@openai/codex@0.169.0`: JSON-RPC 2.0, one JSON object per line on stdin/stdout.
//!
//! Every turn is one app-server process run by the turn driver (`bash -lc '<codex.command> "$@"'`
//! in the workspace, stdin a pipe): `initialize`, `initialized`, then `thread/start` (the first
//! turn) or `thread/resume` with the thread id (later turns, and the first turn after a restart;
//! an unknown thread falls back once to `thread/start` in the same process), then `turn/start`
//! with the prompt as JSON text (never through a shell). Notifications become events until
//! `turn/completed`; Baton then closes stdin and the server exits. One process per turn keeps
//! the driver's one loop (spawn → lines → exit) and makes a Baton restart the same path as a
//! continuation turn; the thread history lives in Codex's own store.
//!
//! * Approval requests are declined (the sandbox is the boundary; `codex.approval_policy` decides
//!   which requests come at all), user-input requests fail the turn (`turn_input_required`),
//!   dynamic tool calls get a failure result, other server requests a JSON-RPC error: never a
//!   hang.
//! * Usage: `thread/tokenUsage/updated` carries the thread's `total` and the call's `last`; the
//!   turn's delta is the sum of `last` over this turn's updates, so the replay a `thread/resume`
//!   sends (the previous turn's figures) is never counted again. Codex reports no cost.
//! * Timeouts (Symphony §10.6): `read_timeout_ms` per request, `turn_timeout_ms` as the silence
//!   bound of the stream; both stop the group.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use crossbeam_channel::{bounded, Sender};
use serde_json::{json, Value};

use super::driver::{run_invocation, terminal_event_kind, Limits, ProcessEnd, TurnParser};
use super::json::{one_line, str_at};
use super::runner::CliRunner;
use super::{
    check_cwd_on, usable_session_id, AgentError, AgentErrorKind as K, AgentEvent,
    AgentEventKind as E, AgentRateLimits, AgentRunner, AgentSession, CancelToken, Emit,
    SessionContext, TokenUsage, TurnResult,
};
use crate::host::{Host, ProcessSpec};
use crate::workflow::config::{AgentKind, CodexConfig};

/// Longest JSON-RPC reply or server request accepted (Symphony §10.1: control payloads ≤ 4 MiB;
/// notifications may use the whole line bound).
pub const MAX_CONTROL_BYTES: usize = 4 * 1024 * 1024;
/// The request whose error falls back to `thread/start`.
const RESUME: &str = "thread/resume";
/// After `turn/completed` (or a fatal error) Baton closes stdin; the server gets this long to exit.
const EXIT_GRACE: Duration = Duration::from_secs(5);
/// Longest event summary (characters).
const SUMMARY_MAX: usize = 200;

/// Builds Codex sessions from `codex.*`.
pub type CodexRunner = CliRunner<CodexConfig>;

impl AgentRunner for CodexRunner {
    fn start_session(&self, ctx: &SessionContext) -> Result<Box<dyn AgentSession>, AgentError> {
        let cwd = check_cwd_on(ctx.host.as_ref(), &ctx.workspace, &ctx.workspace_root)?;
        Ok(Box::new(CodexSession {
            runner: self.clone(),
            host: Arc::clone(&ctx.host),
            cwd,
            workspace_root: ctx.workspace_root.clone(),
            issue_identifier: ctx.issue_identifier.clone(),
            thread_id: usable_session_id(
                AgentKind::Codex,
                ctx.resume_session_id.as_deref(),
                &ctx.issue_identifier,
            ),
            turn: 0,
        }))
    }
}

/// One Codex thread in one workspace: each turn is one app-server process on that thread.
#[derive(Debug)]
struct CodexSession {
    runner: CodexRunner,
    host: Arc<dyn Host>,
    cwd: PathBuf,
    workspace_root: PathBuf,
    issue_identifier: String,
    thread_id: Option<String>,
    turn: u32,
}

impl AgentSession for CodexSession {
    fn run_turn(&mut self, prompt: &str, cancel: &CancelToken, emit: &mut Emit) -> TurnResult {
        self.turn += 1;
        let cfg = &self.runner.cfg;
        let mut spec = ProcessSpec::command(&cfg.cli.command, self.cwd.clone());
        spec.args.extend(cfg.cli.extra_args.iter().map(Into::into));
        spec.stdin_pipe = true;
        spec.env("BATON_ISSUE_IDENTIFIER", self.issue_identifier.clone());
        self.runner.apply(&mut spec);
        let mut client = Client::new(cfg, &self.cwd, self.thread_id.clone(), prompt, self.turn);
        let limits = Limits {
            // turn_timeout_ms is a silence bound here (`Client::deadline`); no total cap.
            deadline: Instant::now() + Duration::from_secs(30 * 24 * 3600),
            kill_grace: self.runner.kill_grace,
        };
        let host = self.host.as_ref();
        let ran = check_cwd_on(host, &self.cwd, &self.workspace_root)
            .and_then(|_| run_invocation(host, &spec, &mut client, limits, cancel, emit));
        let (end, pid) = match ran {
            Ok(r) => r,
            Err(e) => {
                emit(client.event(E::StartupFailed, e.to_string()));
                return Err(e);
            }
        };
        if client.thread_id.is_some() {
            self.thread_id = client.thread_id.clone();
        }
        let outcome = client.outcome(&end);
        let usage = client.usage;
        let summary = match &outcome {
            Ok(()) => format!("turn {} completed", self.turn),
            Err(e) => e.to_string(),
        };
        let mut ev = client.event(terminal_event_kind(&outcome), summary);
        ev.agent_pid = Some(pid);
        ev.usage_delta = Some(usage);
        emit(ev);
        log::info!(
            "codex turn ended issue_identifier={} session_id={} agent_pid={pid} outcome={} input_tokens={} output_tokens={}",
            self.issue_identifier,
            client.session_id().unwrap_or_default(),
            terminal_event_kind(&outcome).as_str(),
            usage.input_tokens,
            usage.output_tokens
        );
        outcome
    }

    fn agent_session_id(&self) -> Option<String> {
        self.thread_id.clone()
    }

    fn stop(&mut self) {
        // Every app-server process is stopped and reaped before `run_turn` returns.
    }
}

/// The JSON-RPC client of one app-server process (the driver's [`TurnParser`]).
pub struct Client {
    thread_params: Value,
    turn_params: Value,
    read_timeout: Duration,
    silence: Duration,
    turn: u32,
    tx: Option<Sender<Vec<u8>>>,
    has_stdin: bool,
    next_id: i64,
    /// The one outstanding request: id, method, when it was sent.
    pending: Option<(i64, &'static str, Instant)>,
    last_output: Instant,
    thread_id: Option<String>,
    turn_id: Option<String>,
    /// `turn/completed`: its status and error text.
    completed: Option<(String, String)>,
    failure: Option<AgentError>,
    done_at: Option<Instant>,
    last_error: Option<String>,
    usage: TokenUsage,
}

impl Client {
    /// A client for turn `turn` of `thread` (`None`: start a thread) running `prompt` in `cwd`.
    pub fn new(
        cfg: &CodexConfig,
        cwd: &std::path::Path,
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
            tx: None,
            has_stdin: false,
            next_id: 0,
            pending: None,
            last_output: Instant::now(),
            thread_id: thread,
            turn_id: None,
            completed: None,
            failure: None,
            done_at: None,
            last_error: None,
            usage: TokenUsage::default(),
        }
    }

    /// The agent's thread id, once known (or the one resumed).
    pub fn thread_id(&self) -> Option<&str> {
        self.thread_id.as_deref()
    }

    /// This turn's token usage so far.
    pub fn usage(&self) -> TokenUsage {
        self.usage
    }

    /// `<thread_id>-<turn>` once the thread is known (Baton's recovery reads the id back from it).
    fn session_id(&self) -> Option<String> {
        self.thread_id
            .as_ref()
            .map(|t| format!("{t}-{}", self.turn))
    }

    fn send(&mut self, msg: Value) {
        let mut bytes = msg.to_string().into_bytes();
        bytes.push(b'\n');
        // A full queue means the server stopped reading: end the turn rather than block.
        if self
            .tx
            .as_ref()
            .is_some_and(|tx| tx.try_send(bytes).is_err())
        {
            self.fail(
                K::ProcessExit,
                "app-server stopped reading its stdin".into(),
            );
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

    fn fail(&mut self, kind: K, message: String) {
        self.failure.get_or_insert(AgentError::new(kind, message));
        self.finish();
    }

    fn thread_request(&mut self) {
        let mut params = self.thread_params.clone();
        match self.thread_id.clone() {
            Some(id) => {
                params["threadId"] = id.into();
                params["excludeTurns"] = true.into();
                self.request(RESUME, params);
            }
            None => self.request("thread/start", params),
        }
    }

    /// A reply to one of Baton's requests.
    fn on_reply(&mut self, id: Option<i64>, v: &Value) -> AgentEvent {
        let Some((_, method, _)) = self.pending.filter(|p| Some(p.0) == id) else {
            return self.event(E::Malformed, "reply to no pending request".into());
        };
        self.pending = None;
        if let Some(err) = v.get("error") {
            let msg = str_at(err, "message").unwrap_or("?").to_string();
            if method == RESUME {
                // An unknown or unreadable thread: start a new one once, in this process.
                let old = self.thread_id.take().unwrap_or_default();
                self.thread_request();
                let text = format!("resume of thread {old} failed ({msg}); starting a new thread");
                log::warn!("codex {text}");
                return self.event(E::Notification, text);
            }
            let text = format!("response_error: {method} failed: {msg}");
            self.fail(K::StartupFailed, text.clone());
            return self.event(E::Notification, text);
        }
        let result = v.get("result").unwrap_or(&Value::Null);
        match method {
            "initialize" => {
                self.send(json!({"method": "initialized"}));
                self.thread_request();
                self.event(E::OtherMessage, "initialized".into())
            }
            "thread/start" | RESUME => {
                let Some(id) = result.pointer("/thread/id").and_then(Value::as_str) else {
                    self.fail(
                        K::StartupFailed,
                        format!("{method} reply without a thread id"),
                    );
                    return self.event(E::Malformed, "thread reply without thread.id".into());
                };
                self.thread_id = Some(crate::text::truncate_chars(id, 128));
                let mut params = self.turn_params.clone();
                params["threadId"] = id.into();
                self.request("turn/start", params);
                let how = if method == "thread/start" {
                    "started"
                } else {
                    "resumed"
                };
                self.event(
                    E::SessionStarted,
                    format!("thread {how} (turn {})", self.turn),
                )
            }
            _ => {
                self.turn_id = result
                    .pointer("/turn/id")
                    .and_then(Value::as_str)
                    .map(String::from);
                self.event(E::OtherMessage, "turn started".into())
            }
        }
    }

    /// A request from the server: answered at once, never left waiting.
    fn on_server_request(&mut self, id: &Value, method: &str, params: &Value) -> AgentEvent {
        let detail = ["command", "reason", "tool"]
            .iter()
            .find_map(|k| str_at(params, k))
            .map(|d| one_line(d, 120))
            .unwrap_or_default();
        let (result, event) = match method {
            "item/commandExecution/requestApproval" | "item/fileChange/requestApproval" => (
                json!({"decision": "decline"}),
                self.event(E::PermissionDenied, format!("{method} declined: {detail}")),
            ),
            "execCommandApproval" | "applyPatchApproval" => (
                json!({"decision": "denied"}),
                self.event(E::PermissionDenied, format!("{method} denied: {detail}")),
            ),
            "item/permissions/requestApproval" => (
                json!({"permissions": {}}),
                self.event(E::PermissionDenied, "extra permissions declined".into()),
            ),
            "item/tool/call" => (
                json!({"success": false, "contentItems": [{"type": "inputText",
                    "text": "Baton offers no client-side tools"}]}),
                self.event(E::Notification, format!("unsupported tool call {detail}")),
            ),
            "item/tool/requestUserInput" | "mcpServer/elicitation/request" => {
                self.send(json!({"id": id, "error": {"code": -32000,
                    "message": "headless: no user input"}}));
                self.fail(
                    K::TurnInputRequired,
                    format!("the agent asked for user input ({method}); headless turns never wait"),
                );
                return self.event(E::TurnInputRequired, format!("{method}: {detail}"));
            }
            other => {
                self.send(json!({"id": id, "error": {"code": -32601,
                    "message": "method not supported by this client"}}));
                let m = one_line(other, 60);
                return self.event(E::Malformed, format!("unexpected server request {m}"));
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
                self.event(E::OtherMessage, format!("{item_type} started"))
            }
            (true, _) => {
                let d = ["command", "tool", "query"]
                    .iter()
                    .find_map(|k| str_at(item, k));
                let text = format!("{item_type}: {}", one_line(d.unwrap_or(""), 120));
                self.event(E::ToolUse, text)
            }
            (false, "agentMessage") => {
                let text = str_at(item, "text").unwrap_or("");
                self.event(E::Notification, format!("assistant: {text}"))
            }
            (false, "commandExecution") => self.event(
                E::Notification,
                format!(
                    "command {} exit={}: {}",
                    str_at(item, "status").unwrap_or("?"),
                    item.get("exitCode").map_or("?".into(), Value::to_string),
                    str_at(item, "command").unwrap_or("")
                ),
            ),
            (false, other) => self.event(E::OtherMessage, format!("{other} completed")),
        }
    }

    fn on_notification(&mut self, method: &str, p: &Value) -> AgentEvent {
        match method {
            "item/started" | "item/completed" => {
                let item = p.get("item").unwrap_or(&Value::Null);
                self.on_item(method == "item/started", item)
            }
            "thread/tokenUsage/updated" => {
                // The replay after `thread/resume` carries an earlier turn's id: never counted.
                let same_turn =
                    self.turn_id.is_some() && str_at(p, "turnId") == self.turn_id.as_deref();
                let last = p.pointer("/tokenUsage/last").map(usage_of);
                match last {
                    Some(u) if same_turn => self.usage.add(&u),
                    Some(_) => {}
                    None => return self.event(E::Malformed, "token usage without last".into()),
                }
                let total = p
                    .pointer("/tokenUsage/total/totalTokens")
                    .and_then(Value::as_u64);
                let text = format!("thread tokens total={}", total.unwrap_or(0));
                self.event(E::OtherMessage, text)
            }
            "account/rateLimits/updated" => match p.get("rateLimits").and_then(rate_limits) {
                Some(rl) => {
                    let text = format!(
                        "rate limit {} ({})",
                        rl.status,
                        rl.rate_limit_type.as_deref().unwrap_or("?")
                    );
                    let mut ev = self.event(E::Notification, text);
                    ev.rate_limits = Some(rl);
                    ev
                }
                None => self.event(E::Malformed, "rate limits without a window".into()),
            },
            "error" => {
                let err = p.get("error").unwrap_or(&Value::Null);
                let status = err
                    .get("codexErrorInfo")
                    .and_then(Value::as_object)
                    .and_then(|o| {
                        o.values()
                            .find_map(|v| v.get("httpStatusCode").and_then(Value::as_u64))
                    });
                let mut text = one_line(str_at(err, "message").unwrap_or("?"), 160);
                if let Some(s) = status {
                    text.push_str(&format!(" (http {s})"));
                }
                let retry = p.get("willRetry").and_then(Value::as_bool) == Some(true);
                if !retry {
                    self.last_error = Some(text.clone());
                }
                let how = if retry { "retrying" } else { "final" };
                self.event(E::Notification, format!("api error ({how}): {text}"))
            }
            "turn/completed" => {
                let turn = p.get("turn").unwrap_or(&Value::Null);
                let ours = match &self.turn_id {
                    Some(o) => str_at(turn, "id") == Some(o),
                    None => self.thread_id.is_some(),
                };
                if !ours {
                    return self.event(E::OtherMessage, "another turn completed".into());
                }
                let status = str_at(turn, "status").unwrap_or("?").to_string();
                let error = turn.pointer("/error/message").and_then(Value::as_str);
                let error = error.map(|e| one_line(e, 300)).unwrap_or_default();
                self.completed = Some((status.clone(), error));
                self.finish();
                self.event(E::OtherMessage, format!("turn/completed status={status}"))
            }
            "item/agentMessage/delta" => self.event(E::OtherMessage, "assistant delta".into()),
            other => self.event(E::OtherMessage, one_line(other, 60)),
        }
    }

    /// The turn's result from what the server said and how the process ended (Symphony §10.6
    /// categories mapped onto Baton's).
    pub fn outcome(&self, end: &ProcessEnd) -> TurnResult {
        let err = |k, m: String| Err(AgentError::new(k, m));
        if end.cancelled {
            return err(K::TurnCancelled, "turn cancelled".into());
        }
        if !self.has_stdin {
            return err(
                K::StartupFailed,
                "the host gave codex app-server no stdin pipe (needed for JSON-RPC)".into(),
            );
        }
        // A failure Baton saw ends the turn, unless the server completed it first (user input
        // fails it either way).
        let input = |e: &AgentError| e.kind == K::TurnInputRequired;
        if let Some(e) = self
            .failure
            .as_ref()
            .filter(|e| input(e) || self.completed.is_none())
        {
            return Err(e.clone());
        }
        match self.completed.as_ref().map(|(s, e)| (s.as_str(), e)) {
            Some(("completed", _)) => return Ok(()),
            Some(("interrupted", _)) => return err(K::TurnCancelled, "turn interrupted".into()),
            Some((status, e)) => {
                let e = if e.is_empty() {
                    self.last_error.clone().unwrap_or_default()
                } else {
                    e.clone()
                };
                return err(K::TurnFailed, format!("turn {status}: {e}"));
            }
            None => {}
        }
        let stderr = if end.stderr_tail.is_empty() {
            String::new()
        } else {
            format!("; stderr: {}", one_line(&end.stderr_tail, 500))
        };
        if end.timed_out {
            return match self.pending {
                Some((_, method, _)) => err(
                    K::StartupFailed,
                    format!("response_timeout: no reply to {method} within codex.read_timeout_ms"),
                ),
                None => err(
                    K::TurnTimeout,
                    "turn_timeout: no output for codex.turn_timeout_ms; process group stopped"
                        .into(),
                ),
            };
        }
        if end.exit_code == Some(127) {
            return err(
                K::AgentNotFound,
                format!("codex command not found (exit code 127){stderr}"),
            );
        }
        err(
            K::ProcessExit,
            format!(
                "app-server ended before the turn completed ({}){stderr}",
                end.describe()
            ),
        )
    }
}

impl TurnParser for Client {
    fn attach_stdin(&mut self, mut stdin: Box<dyn Write + Send>) {
        let (tx, rx) = bounded::<Vec<u8>>(64);
        let spawned = std::thread::Builder::new()
            .name("codex-stdin".into())
            .spawn(move || {
                for msg in rx {
                    if stdin.write_all(&msg).and_then(|_| stdin.flush()).is_err() {
                        break;
                    }
                }
            });
        self.tx = spawned.ok().map(|_| tx);
        self.has_stdin = self.tx.is_some();
    }

    fn started(&mut self, pid: u32) -> Vec<AgentEvent> {
        log::info!(
            "codex app-server started turn={} agent_pid={pid} resume={}",
            self.turn,
            self.thread_id.is_some()
        );
        let info = json!({"clientInfo": {"name": "baton", "title": "Baton",
            "version": env!("CARGO_PKG_VERSION")}});
        self.request("initialize", info);
        Vec::new()
    }

    fn parse_line(&mut self, line: &str) -> Vec<AgentEvent> {
        self.last_output = Instant::now();
        let line = line.trim();
        if line.is_empty() {
            return Vec::new();
        }
        let v: Value = match serde_json::from_str(line) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => return vec![self.event(E::Malformed, "non-object JSON line".into())],
            Err(e) => return vec![self.event(E::Malformed, format!("non-JSON line ({e})"))],
        };
        let method = str_at(&v, "method");
        match (v.get("id"), method) {
            (Some(_), _) if line.len() > MAX_CONTROL_BYTES => {
                if self.pending.is_some() {
                    self.fail(K::StartupFailed, "response_error: reply over 4 MiB".into());
                }
                vec![self.event(
                    E::Malformed,
                    format!("control frame over 4 MiB ({} bytes)", line.len()),
                )]
            }
            (Some(id), Some(m)) => {
                let params = v.get("params").unwrap_or(&Value::Null);
                vec![self.on_server_request(id, m, params)]
            }
            (Some(id), None) => vec![self.on_reply(id.as_i64(), &v)],
            (None, Some(m)) => {
                let params = v.get("params").unwrap_or(&Value::Null);
                vec![self.on_notification(m, params)]
            }
            (None, None) => {
                vec![self.event(E::Malformed, "JSON-RPC message without id or method".into())]
            }
        }
    }

    fn event(&self, kind: E, summary: String) -> AgentEvent {
        let mut ev = AgentEvent::new(kind, one_line(&summary, SUMMARY_MAX));
        ev.session_id = self.session_id();
        ev.agent_session_id.clone_from(&self.thread_id);
        ev
    }

    fn result_seen(&self) -> bool {
        self.done_at.is_some()
    }

    fn deadline(&self) -> Option<Instant> {
        if let Some(t) = self.done_at {
            return Some(t + EXIT_GRACE);
        }
        let silence = self.last_output + self.silence;
        Some(match self.pending {
            Some((_, _, sent)) => silence.min(sent + self.read_timeout),
            None => silence,
        })
    }
}

/// A `tokenUsage.last` (or `total`) breakdown; cached input is a subset of input.
fn usage_of(u: &Value) -> TokenUsage {
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
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
    let resets_at = w
        .get("resetsAt")
        .and_then(Value::as_u64)
        .map(|s| crate::timefmt::rfc3339(UNIX_EPOCH + Duration::from_secs(s.min(253_402_300_799))));
    Some(AgentRateLimits {
        status: if reached { "rejected" } else { "allowed" }.into(),
        rate_limit_type: Some(name.into()),
        utilization: Some((used / 100.0).clamp(0.0, 1.0)),
        resets_at,
        overage_status: None,
        is_using_overage: None,
    })
}
