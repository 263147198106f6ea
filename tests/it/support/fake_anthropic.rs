//! A scripted fake Anthropic Messages API for the real-CLI tests (127.0.0.1, ephemeral port).
//!
//! `POST /v1/messages` answers with a streaming SSE reply shaped like the real API (message_start,
//! content_block_start/delta/stop, message_delta, message_stop). The reply is chosen by how many
//! assistant messages the request carries, so a resumed session (whose request holds the whole
//! history) continues the script deterministically. Every request is recorded.

#![allow(dead_code)]

use serde_json::{json, Value};
use tiny_http::Response;

use super::agent::{header, message_text, FakeApi};

/// One scripted model reply.
#[derive(Debug, Clone)]
pub enum Step {
    /// A text-only reply (`stop_reason: end_turn`).
    Text(String),
    /// Optional text, then one tool call (`stop_reason: tool_use`).
    ToolUse {
        /// Text block before the call.
        text: Option<String>,
        /// Tool name (`Write`, `Bash`, …).
        name: String,
        /// Tool input.
        input: Value,
    },
    /// An HTTP error with an Anthropic-style error body.
    Error(u16),
}

/// What the fake saw in one request.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Request path with query.
    pub url: String,
    /// `x-claude-code-session-id` header.
    pub session_header: Option<String>,
    /// Assistant messages in the request (selects the step).
    pub n_assistant: usize,
    /// All text of the last user message.
    pub last_user_text: String,
    /// `model` of the request.
    pub model: String,
    /// The `tool_result` contents of the last user message (what the tools printed).
    pub tool_results: Vec<String>,
}

/// The running fake (`base_url` is `http://127.0.0.1:<port>`); stops on drop.
pub type FakeAnthropic = FakeApi<Recorded>;

impl FakeAnthropic {
    /// Start serving `steps` (step `i` answers a request that carries `i` assistant messages; past
    /// the end, a plain "done" text).
    pub fn start(steps: Vec<Step>) -> FakeAnthropic {
        Self::start_with_hook(steps, |_| {})
    }

    /// Like [`FakeAnthropic::start`], but calls `hook` with each recorded request before replying
    /// (end-to-end tests use it to change the board at a precise point of the conversation).
    pub fn start_with_hook(
        steps: Vec<Step>,
        hook: impl Fn(&Recorded) + Send + 'static,
    ) -> FakeAnthropic {
        FakeApi::serve("", move |mut req, log| {
            let mut body = String::new();
            let _ = req.as_reader().read_to_string(&mut body);
            let url = req.url().to_string();
            if !url.starts_with("/v1/messages") || url.starts_with("/v1/messages/") {
                let _ = req.respond(Response::from_string("not found").with_status_code(404));
                return;
            }
            let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            let messages = v["messages"].as_array().cloned().unwrap_or_default();
            let n_assistant = messages.iter().filter(|m| m["role"] == "assistant").count();
            let last_user = messages.iter().rev().find(|m| m["role"] == "user");
            let last_user_text = last_user.map(message_text).unwrap_or_default();
            let tool_results = last_user
                .and_then(|m| m["content"].as_array())
                .into_iter()
                .flatten()
                .filter(|b| b["type"] == "tool_result")
                .map(|b| match &b["content"] {
                    Value::String(s) => s.clone(),
                    c => message_text(&json!({ "content": c })),
                })
                .collect();
            let session_header = req
                .headers()
                .iter()
                .find(|h| h.field.equiv("x-claude-code-session-id"))
                .map(|h| h.value.to_string());
            let model = v["model"].as_str().unwrap_or("").to_string();
            let rec = Recorded {
                url,
                session_header,
                n_assistant,
                last_user_text,
                model: model.clone(),
                tool_results,
            };
            hook(&rec);
            log.lock().unwrap().push(rec);
            let step = steps
                .get(n_assistant)
                .cloned()
                .unwrap_or_else(|| Step::Text("done".into()));
            let _ = match step {
                Step::Error(status) => req.respond(
                    Response::from_string(
                        json!({"type":"error","error":{"type":"api_error","message":"fake internal error"}})
                            .to_string(),
                    )
                    .with_status_code(status)
                    .with_header(header("content-type", "application/json")),
                ),
                step => req.respond(
                    Response::from_string(sse(&step, n_assistant, &model))
                        .with_header(header("content-type", "text/event-stream"))
                        .with_header(header("cache-control", "no-cache")),
                ),
            };
        })
    }
}

/// Usage of reply `i`: input 1000 + 100·i, output 10 + i, cache 50 written / 200 read.
pub fn usage_of(i: usize) -> (u64, u64) {
    (1000 + 100 * i as u64, 10 + i as u64)
}

fn sse(step: &Step, i: usize, model: &str) -> String {
    let (input, output) = usage_of(i);
    let mut events: Vec<Value> = vec![json!({
        "type": "message_start",
        "message": {"id": format!("msg_fake_{i:04}"), "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input, "output_tokens": 1,
                      "cache_creation_input_tokens": 50, "cache_read_input_tokens": 200}}
    })];
    let mut index = 0;
    let text_block = |events: &mut Vec<Value>, text: &str, index: &mut usize| {
        events.push(json!({"type":"content_block_start","index":*index,"content_block":{"type":"text","text":""}}));
        events.push(json!({"type":"content_block_delta","index":*index,"delta":{"type":"text_delta","text":text}}));
        events.push(json!({"type":"content_block_stop","index":*index}));
        *index += 1;
    };
    let stop_reason = match step {
        Step::Text(t) => {
            text_block(&mut events, t, &mut index);
            "end_turn"
        }
        Step::ToolUse { text, name, input } => {
            if let Some(t) = text {
                text_block(&mut events, t, &mut index);
            }
            events.push(json!({"type":"content_block_start","index":index,
                "content_block":{"type":"tool_use","id":format!("toolu_fake_{i:04}"),"name":name,"input":{}}}));
            events.push(json!({"type":"content_block_delta","index":index,
                "delta":{"type":"input_json_delta","partial_json":input.to_string()}}));
            events.push(json!({"type":"content_block_stop","index":index}));
            "tool_use"
        }
        Step::Error(_) => unreachable!("errors are not streamed"),
    };
    events.push(
        json!({"type":"message_delta","delta":{"stop_reason":stop_reason,"stop_sequence":null},
        "usage":{"output_tokens":output,"input_tokens":input,
                 "cache_creation_input_tokens":50,"cache_read_input_tokens":200}}),
    );
    events.push(json!({"type":"message_stop"}));
    let mut out = String::new();
    for e in events {
        out.push_str(&format!(
            "event: {}\ndata: {}\n\n",
            e["type"].as_str().unwrap(),
            e
        ));
    }
    out
}
