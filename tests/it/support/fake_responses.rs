//! A scripted fake of the OpenAI Responses API (`POST /v1/responses`, SSE) for the real Codex CLI,
//! written from the captured wire format in `../shared/agent-transcripts/codex/` (the request
//! logs show what Codex sends back: the fake's output items, echoed in `input`).
//!
//! What the fake model does depends on the conversation (`input`):
//!
//! | condition | reply |
//! | --- | --- |
//! | the last item is a `function_call_output` | text `Done. The command output was: <output>` |
//! | latest user prompt contains `SCENARIO:shell` | `exec_command` call writing `codex-wrote.txt` |
//! | `SCENARIO:sleep` | `exec_command` call `sleep 30` (an agent blocked in a tool call) |
//! | `SCENARIO:err401` | HTTP 401 with an OpenAI error body |
//! | `SCENARIO:slow` | one text delta every 250 ms for a minute |
//! | anything else | `Hello from the fake Responses API. I have seen N user prompt(s) in this conversation.` |
//!
//! Usage per call, as the capture's fake: input = 1000·P + 100·T, cached = input − 400,
//! output = 20 + T, reasoning 5 (P = user prompts, T = tool outputs after the latest prompt).
//! Every reply carries `x-codex-primary-*` / `x-codex-secondary-*` rate-limit headers.

#![allow(dead_code)]

use std::io::{Cursor, Read};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use serde_json::{json, Value};

use super::agent::{header, FakeApi, Log};

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The `thread-id` header (Codex's thread id).
    pub thread: Option<String>,
    /// User prompts in `input` (environment context excluded).
    pub prompts: usize,
    /// Text of the latest user prompt.
    pub last_user: String,
    /// What the fake answered (`text`, `tool_call`, `error`, `slow`).
    pub reply: &'static str,
    /// `Authorization: Bearer …` was sent.
    pub has_bearer: bool,
}

/// The running fake (`base_url` is `http://127.0.0.1:<port>/v1`); stops on drop.
pub type FakeResponses = FakeApi<Recorded>;

/// Usage the fake reports for a call with `p` prompts and `t` tool outputs:
/// (input, cached, output).
pub fn usage_for(p: u64, t: u64) -> (u64, u64, u64) {
    let input = 1000 * p + 100 * t;
    (input, input.saturating_sub(400), 20 + t)
}

impl FakeResponses {
    /// Start on an ephemeral port on 127.0.0.1.
    pub fn start() -> FakeResponses {
        Self::start_with_hook(|_| {})
    }

    /// Like [`FakeResponses::start`], calling `hook` with each recorded request first.
    pub fn start_with_hook(hook: impl Fn(&Recorded) + Send + Sync + 'static) -> FakeResponses {
        let hook: Arc<dyn Fn(&Recorded) + Send + Sync> = Arc::new(hook);
        FakeApi::serve("/v1", move |req, log: &Log<Recorded>| {
            let (log, hook) = (Arc::clone(log), Arc::clone(&hook));
            thread::spawn(move || handle(req, &log, &*hook));
        })
    }

    /// The `config.toml` pointing Codex at this fake (`retries: false` fails API errors at once).
    pub fn codex_config(&self, retries: bool) -> String {
        let no_retries = if retries {
            ""
        } else {
            "request_max_retries = 0\nstream_max_retries = 0\n"
        };
        format!(
            "model = \"gpt-5.5\"\nmodel_provider = \"fake\"\n\n[model_providers.fake]\nname = \"fake\"\n\
             base_url = \"{}\"\nenv_key = \"FAKE_OPENAI_API_KEY\"\nwire_api = \"responses\"\n{no_retries}",
            self.base_url
        )
    }
}

fn text_of(item: &Value) -> String {
    item["content"]
        .as_array()
        .map(|c| c.iter().filter_map(|b| b["text"].as_str()).collect())
        .unwrap_or_default()
}

fn handle(mut req: tiny_http::Request, log: &Log<Recorded>, hook: &dyn Fn(&Recorded)) {
    let mut body = String::new();
    let _ = req.as_reader().take(64 << 20).read_to_string(&mut body);
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    if !req.url().ends_with("/responses") {
        let _ = req.respond(tiny_http::Response::from_string("not found").with_status_code(404));
        return;
    }
    let head = |k: &'static str| {
        req.headers()
            .iter()
            .find(|h| h.field.equiv(k))
            .map(|h| h.value.as_str().to_string())
    };
    let input = v["input"].as_array().cloned().unwrap_or_default();
    let is_prompt = |i: &Value| {
        i["type"] == "message" && i["role"] == "user" && !text_of(i).trim_start().starts_with('<')
    };
    let prompts = input.iter().filter(|i| is_prompt(i)).count() as u64;
    let last_at = input.iter().rposition(is_prompt).unwrap_or(0);
    let last_user = input.get(last_at).map(text_of).unwrap_or_default();
    let outputs: Vec<&Value> = input[last_at..]
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .collect();
    let call = |cmd: &str| json!({"cmd": cmd, "yield_time_ms": 10000}).to_string();
    let (reply, plan): (&'static str, Option<Value>) = if input
        .last()
        .is_some_and(|i| i["type"] == "function_call_output")
    {
        let out = outputs
            .last()
            .and_then(|o| o["output"].as_str())
            .unwrap_or("");
        (
            "text",
            Some(format!("Done. The command output was: {out}").into()),
        )
    } else if last_user.contains("SCENARIO:shell") {
        let args = call("echo baton-was-here > codex-wrote.txt && cat codex-wrote.txt");
        ("tool_call", Some(json!({"call": args})))
    } else if last_user.contains("SCENARIO:sleep") {
        ("tool_call", Some(json!({"call": call("sleep 30")})))
    } else if last_user.contains("SCENARIO:err401") {
        ("error", None)
    } else if last_user.contains("SCENARIO:slow") {
        ("slow", None)
    } else {
        let text = format!(
            "Hello from the fake Responses API. I have seen {prompts} user prompt(s) in this conversation."
        );
        ("text", Some(text.into()))
    };
    let rec = Recorded {
        thread: head("thread-id"),
        prompts: prompts as usize,
        last_user,
        reply,
        has_bearer: head("Authorization").is_some_and(|a| a.starts_with("Bearer ")),
    };
    hook(&rec);
    log.lock().unwrap().push(rec);
    let n = log.lock().unwrap().len();
    let (input_t, cached, output) = usage_for(prompts, outputs.len() as u64);
    let usage = json!({"input_tokens": input_t, "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 5},
        "total_tokens": input_t + output});
    let mut headers = vec![header("Content-Type", "text/event-stream")];
    for (w, used, mins) in [("primary", "42.5", "300"), ("secondary", "7", "10080")] {
        headers.push(header(&format!("x-codex-{w}-used-percent"), used));
        headers.push(header(&format!("x-codex-{w}-window-minutes"), mins));
        headers.push(header(&format!("x-codex-{w}-reset-at"), "1796136070"));
    }
    let body: Box<dyn Read + Send> = match (reply, plan) {
        ("error", _) => {
            let body = json!({"error": {"message": "Incorrect API key provided: fake-***. (fake)",
                "type": "invalid_request_error", "code": "invalid_api_key"}});
            let _ = req.respond(
                tiny_http::Response::from_string(body.to_string())
                    .with_status_code(401)
                    .with_header(header("Content-Type", "application/json")),
            );
            return;
        }
        ("slow", _) => Box::new(Ticks::new(move |i| {
            let id = format!("msg_fake_{n}");
            let delta = event(&json!({"type": "response.output_text.delta", "item_id": id,
                "output_index": 0, "content_index": 0, "delta": format!("tick{i} ")}));
            let item = json!({"type": "message", "id": id, "role": "assistant",
                "status": "in_progress", "content": []});
            let head = event(&json!({"type": "response.created", "response": {"id": "resp_slow"}}))
                + &event(
                    &json!({"type": "response.output_item.added", "output_index": 0,
                    "item": item}),
                );
            match i {
                0 => Some(head + &delta),
                1..240 => Some(delta),
                _ => None,
            }
        })),
        (_, Some(Value::Object(o))) if o.contains_key("call") => {
            let item = json!({"type": "function_call", "id": format!("fc_fake_{n}"),
                "call_id": format!("call_fake_{n}"), "name": "exec_command",
                "arguments": o["call"], "status": "completed"});
            Box::new(Cursor::new(stream(n, item, &[], &usage)))
        }
        (_, text) => {
            let text = text
                .and_then(|t| t.as_str().map(String::from))
                .unwrap_or_default();
            let item = json!({"type": "message", "id": format!("msg_fake_{n}"), "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]});
            let words: Vec<&str> = text.split_inclusive(' ').collect();
            Box::new(Cursor::new(stream(n, item, &words, &usage)))
        }
    };
    let _ = req.respond(tiny_http::Response::new(
        tiny_http::StatusCode(200),
        headers,
        body,
        None,
        None,
    ));
}

/// One SSE event.
fn event(data: &Value) -> String {
    format!(
        "event: {}\ndata: {data}\n\n",
        data["type"].as_str().unwrap_or("")
    )
}

/// A whole response: created, the item (with text deltas), done, completed with usage.
fn stream(n: usize, item: Value, deltas: &[&str], usage: &Value) -> Vec<u8> {
    let id = format!("resp_fake_{n}");
    let mut added = item.clone();
    added["status"] = "in_progress".into();
    let mut out = event(&json!({"type": "response.created", "response": {"id": id}}));
    out.push_str(&event(
        &json!({"type": "response.output_item.added", "output_index": 0, "item": added}),
    ));
    for d in deltas {
        out.push_str(&event(&json!({"type": "response.output_text.delta",
            "item_id": item["id"], "output_index": 0, "content_index": 0, "delta": d})));
    }
    out.push_str(&event(
        &json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
    ));
    out.push_str(&event(
        &json!({"type": "response.completed", "response": {"id": id, "usage": usage}}),
    ));
    out.into_bytes()
}

/// A body that yields `next(i)` every 250 ms until it returns `None`; each piece is followed by
/// an SSE comment padding line so tiny_http's chunk buffer flushes it at once. Ends early when
/// the client is gone (the write fails).
pub struct Ticks<F> {
    next: F,
    sent: usize,
    buf: Vec<u8>,
    pos: usize,
}

impl<F: FnMut(usize) -> Option<String>> Ticks<F> {
    /// A body producing `next(0)`, `next(1)`, …
    pub fn new(next: F) -> Self {
        Ticks {
            next,
            sent: 0,
            buf: Vec::new(),
            pos: 0,
        }
    }
}

impl<F: FnMut(usize) -> Option<String>> Read for Ticks<F> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos >= self.buf.len() {
            if self.sent > 0 {
                thread::sleep(Duration::from_millis(250));
            }
            let Some(mut s) = (self.next)(self.sent) else {
                return Ok(0);
            };
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
