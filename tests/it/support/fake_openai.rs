//! A scripted fake of the OpenAI Chat Completions API (SSE streaming), bound to 127.0.0.1, for
//! running the real Copilot CLI offline in BYOK mode (`COPILOT_PROVIDER_BASE_URL=<base_url>`).
//!
//! What the fake model does is decided by the latest user message (and the last message's role):
//!
//! | condition | reply |
//! | --- | --- |
//! | last message is a `tool` result | text `Tool result was: <result>` |
//! | user message contains `SCENARIO:write` | `bash` tool call `echo baton-was-here > copilot-wrote.txt` |
//! | `SCENARIO:sleep` | `bash` tool call `sleep 30` (an agent blocked inside a tool call) |
//! | `SCENARIO:deny` | `bash` tool call `rm -f baton-deny-probe.txt` |
//! | `SCENARIO:badrequest` | HTTP 400 (not retried by the CLI) |
//! | `SCENARIO:slow` | one word every 250 ms for a minute (stops when the client goes away) |
//! | anything else | `Hi! I am the fake backend. I have seen N user message(s) in this conversation.` plus `I remember <w>.` for every earlier `REMEMBER:<w>` |
//!
//! Every completion reports `usage = {prompt_tokens: 1234, completion_tokens: 56}`.

#![allow(dead_code)]

use std::io::{Cursor, Read};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::{json, Value};

use super::agent::{header, message_text, FakeApi, Log};

/// Prompt tokens every fake completion reports.
pub const PROMPT_TOKENS: u64 = 1234;
/// Completion tokens every fake completion reports.
pub const COMPLETION_TOKENS: u64 = 56;
const MAX_BODY_BYTES: u64 = 16 * 1024 * 1024;

/// One request the fake received (summary only).
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// Request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// `model` from the body.
    pub model: String,
    /// Roles of `messages`, in order.
    pub roles: Vec<String>,
    /// Number of `user` messages.
    pub user_messages: usize,
    /// Whether an `Authorization: Bearer …` header was sent.
    pub has_bearer: bool,
    /// What the fake decided to do.
    pub reply: String,
    /// Text of the latest user message (as the CLI sent it, with its added context).
    pub last_user: String,
}

/// The running fake (`base_url` is `http://127.0.0.1:<port>/v1`); stops (and unblocks its
/// accept loop) on drop.
pub type FakeOpenAi = FakeApi<RecordedRequest>;

impl FakeOpenAi {
    /// Start on an ephemeral port on 127.0.0.1.
    pub fn start() -> FakeOpenAi {
        Self::start_with_hook(|_| {})
    }

    /// Like [`FakeOpenAi::start`], but calls `hook(user_message_count)` for every chat completion
    /// request before replying (end-to-end tests change the board at a precise turn with it).
    pub fn start_with_hook(hook: impl Fn(usize) + Send + Sync + 'static) -> FakeOpenAi {
        let hook: Arc<dyn Fn(usize) + Send + Sync> = Arc::new(hook);
        FakeApi::serve("/v1", move |req, log: &Log<RecordedRequest>| {
            let log = Arc::clone(log);
            let hook = Arc::clone(&hook);
            thread::spawn(move || handle(req, &log, &*hook));
        })
    }
}

enum Plan {
    Text(String),
    ToolCall {
        command: String,
        description: String,
    },
    BadRequest,
    Slow,
}

fn handle(mut req: tiny_http::Request, log: &Mutex<Vec<RecordedRequest>>, hook: &dyn Fn(usize)) {
    let path = req.url().to_string();
    let has_bearer = req
        .headers()
        .iter()
        .any(|h| h.field.equiv("Authorization") && h.value.as_str().starts_with("Bearer "));
    let mut body = String::new();
    let read_ok = req
        .as_reader()
        .take(MAX_BODY_BYTES)
        .read_to_string(&mut body)
        .is_ok();
    let parsed: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    if !read_ok || req.method() != &tiny_http::Method::Post || !path.ends_with("/chat/completions")
    {
        let _ = req.respond(tiny_http::Response::from_string("not found").with_status_code(404));
        return;
    }
    let messages: Vec<Value> = parsed
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let roles: Vec<String> = messages
        .iter()
        .map(|m| {
            m.get("role")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        })
        .collect();
    let users: Vec<String> = messages
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .map(message_text)
        .collect();
    let last_user = users.last().cloned().unwrap_or_default();
    hook(users.len());
    let plan = if roles.last().map(String::as_str) == Some("tool") {
        let result = messages.last().map(message_text).unwrap_or_default();
        Plan::Text(format!("Tool result was: {result}"))
    } else if last_user.contains("SCENARIO:write") {
        Plan::ToolCall {
            command: "echo baton-was-here > copilot-wrote.txt".into(),
            description: "Write a probe file".into(),
        }
    } else if last_user.contains("SCENARIO:sleep") {
        Plan::ToolCall {
            command: "sleep 30".into(),
            description: "Wait for the build".into(),
        }
    } else if last_user.contains("SCENARIO:deny") {
        Plan::ToolCall {
            command: "rm -f baton-deny-probe.txt".into(),
            description: "Delete a probe file".into(),
        }
    } else if last_user.contains("SCENARIO:badrequest") {
        Plan::BadRequest
    } else if last_user.contains("SCENARIO:slow") {
        Plan::Slow
    } else {
        let mut text = format!(
            "Hi! I am the fake backend. I have seen {} user message(s) in this conversation.",
            users.len()
        );
        for u in &users[..users.len().saturating_sub(1)] {
            for word in u.split_whitespace() {
                if let Some(w) = word.strip_prefix("REMEMBER:") {
                    text.push_str(&format!(" I remember {w}."));
                }
            }
        }
        Plan::Text(text)
    };
    let reply = match &plan {
        Plan::Text(_) => "text",
        Plan::ToolCall { .. } => "tool_call",
        Plan::BadRequest => "bad_request",
        Plan::Slow => "slow",
    };
    log.lock().unwrap().push(RecordedRequest {
        path,
        model: parsed
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        roles,
        user_messages: users.len(),
        has_bearer,
        reply: reply.into(),
        last_user: last_user.clone(),
    });
    let model = parsed
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("gpt-4.1")
        .to_string();
    let streaming = parsed.get("stream").and_then(Value::as_bool) == Some(true);
    match plan {
        Plan::BadRequest => {
            let body = json!({"error": {"message": "fake backend scripted bad request",
                "type": "invalid_request_error", "code": null}})
            .to_string();
            let _ = req.respond(
                tiny_http::Response::from_string(body)
                    .with_status_code(400)
                    .with_header(header("Content-Type", "application/json")),
            );
        }
        Plan::Text(text) if !streaming => {
            let body = json!({"id": "chatcmpl-fake", "object": "chat.completion", "created": 0,
                "model": model, "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": text}}], "usage": usage()})
            .to_string();
            let _ = req.respond(tiny_http::Response::from_string(body));
        }
        Plan::Text(text) => {
            let mut deltas = vec![json!({"role": "assistant", "content": ""})];
            deltas.extend(
                text.split_inclusive(' ')
                    .map(|piece| json!({"content": piece})),
            );
            respond_stream(req, &model, deltas, "stop");
        }
        Plan::ToolCall {
            command,
            description,
        } => {
            let args = json!({"command": command, "description": description,
                "mode": "sync", "initial_wait": 10})
            .to_string();
            let call = json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0,
                "id": "call_fake1", "type": "function",
                "function": {"name": "bash", "arguments": args}}]});
            respond_stream(req, &model, vec![call], "tool_calls");
        }
        Plan::Slow => {
            let _ = req.respond(tiny_http::Response::new(
                tiny_http::StatusCode(200),
                sse_headers(),
                SlowStream::new(model),
                None,
                None,
            ));
        }
    }
}

fn sse_headers() -> Vec<tiny_http::Header> {
    vec![header("Content-Type", "text/event-stream")]
}

/// Stream one chunk per delta, the finishing chunk, the usage chunk and `[DONE]`.
fn respond_stream(req: tiny_http::Request, model: &str, deltas: Vec<Value>, finish: &str) {
    let mut out = String::new();
    for delta in deltas {
        out.push_str(&chunk(model, delta, None));
    }
    out.push_str(&chunk(model, json!({}), Some(finish)));
    out.push_str(&usage_chunk(model));
    out.push_str("data: [DONE]\n\n");
    let _ = req.respond(tiny_http::Response::new(
        tiny_http::StatusCode(200),
        sse_headers(),
        Cursor::new(out.into_bytes()),
        None,
        None,
    ));
}

fn usage() -> Value {
    json!({"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
        "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS})
}

fn chunk(model: &str, delta: Value, finish: Option<&str>) -> String {
    let v = json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
        "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {v}\n\n")
}

fn usage_chunk(model: &str) -> String {
    let v = json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
        "model": model, "choices": [], "usage": usage()});
    format!("data: {v}\n\n")
}

/// A body that yields one word every 250 ms for a minute; each word is followed by an SSE comment
/// padding line so tiny_http's chunk buffer flushes it at once.
struct SlowStream {
    model: String,
    sent: u32,
    buf: Vec<u8>,
    pos: usize,
}

impl SlowStream {
    fn new(model: String) -> Self {
        SlowStream {
            model,
            sent: 0,
            buf: Vec::new(),
            pos: 0,
        }
    }
}

impl Read for SlowStream {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos >= self.buf.len() {
            if self.sent >= 240 {
                return Ok(0);
            }
            if self.sent > 0 {
                thread::sleep(Duration::from_millis(250));
            }
            let mut s = chunk(
                &self.model,
                json!({"content": format!("tick{} ", self.sent)}),
                None,
            );
            s.push_str(&format!(": {}\n\n", "p".repeat(16 * 1024)));
            self.sent += 1;
            self.buf = s.into_bytes();
            self.pos = 0;
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}
