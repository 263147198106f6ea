//! A scripted fake of the Gemini API (`POST /v1beta/models/<m>:streamGenerateContent?alt=sse`) for
//! the real Gemini CLI (`GOOGLE_GEMINI_BASE_URL=<base_url>`), written from the captured wire
//! format in `../shared/agent-transcripts/gemini/`. Tests pass a model (`gemini.model`), so the
//! CLI makes no router call.
//!
//! | condition | reply |
//! | --- | --- |
//! | the last content is a `functionResponse` | text `Done. The tool said: <response>` |
//! | latest user prompt contains `SCENARIO:shell` | `run_shell_command` call writing `gemini-wrote.txt` |
//! | `SCENARIO:err400` | HTTP 400 `API_KEY_INVALID` (the CLI does not retry it) |
//! | `SCENARIO:slow` | one text chunk every 250 ms for a minute |
//! | anything else | `Hello from the fake Gemini API. I have seen N user prompt(s) in this conversation.` |
//!
//! Usage per call, as the capture's fake: prompt = 1000·P + 100·T, cached = prompt − 400,
//! candidates = 20 + T, thoughts = 5 (P = user prompts, T = function responses after the latest
//! prompt).

#![allow(dead_code)]

use std::io::{Cursor, Read};
use std::sync::Arc;
use std::thread;

use serde_json::{json, Value};

use super::agent::{header, FakeApi, Log};
use super::fake_responses::Ticks;

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The model in the path.
    pub model: String,
    /// User prompts in `contents` (session context excluded).
    pub prompts: usize,
    /// Text of the latest user prompt.
    pub last_user: String,
    /// The `x-goog-api-key` header was sent.
    pub has_key: bool,
}

/// The running fake (`base_url` is `http://127.0.0.1:<port>`); stops on drop.
pub type FakeGemini = FakeApi<Recorded>;

/// Usage the fake reports for a call with `p` prompts and `t` function responses:
/// (prompt, cached, candidates, thoughts).
pub fn usage_for(p: u64, t: u64) -> (u64, u64, u64, u64) {
    let prompt = 1000 * p + 100 * t;
    (prompt, prompt.saturating_sub(400), 20 + t, 5)
}

impl FakeGemini {
    /// Start on an ephemeral port on 127.0.0.1.
    pub fn start() -> FakeGemini {
        Self::start_with_hook(|_| {})
    }

    /// Like [`FakeGemini::start`], calling `hook` with each recorded request first.
    pub fn start_with_hook(hook: impl Fn(&Recorded) + Send + Sync + 'static) -> FakeGemini {
        let hook: Arc<dyn Fn(&Recorded) + Send + Sync> = Arc::new(hook);
        FakeApi::serve("", move |req, log: &Log<Recorded>| {
            let (log, hook) = (Arc::clone(log), Arc::clone(&hook));
            thread::spawn(move || handle(req, &log, &*hook));
        })
    }
}

/// One SSE chunk with `parts`; the last one carries `finishReason` and the usage.
fn chunk(parts: Value, usage: Option<&Value>) -> String {
    let mut cand = json!({"content": {"parts": parts, "role": "model"}, "index": 0});
    let mut v = json!({"candidates": [], "modelVersion": "gemini-2.5-flash"});
    if let Some(u) = usage {
        cand["finishReason"] = "STOP".into();
        v["usageMetadata"] = u.clone();
    }
    v["candidates"] = json!([cand]);
    format!("data: {v}\r\n\r\n")
}

fn handle(mut req: tiny_http::Request, log: &Log<Recorded>, hook: &dyn Fn(&Recorded)) {
    let mut body = String::new();
    let _ = req.as_reader().take(64 << 20).read_to_string(&mut body);
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let url = req.url().to_string();
    let Some(model) = url
        .strip_prefix("/v1beta/models/")
        .and_then(|m| m.split_once(":streamGenerateContent"))
        .map(|(m, _)| m.to_string())
    else {
        let _ = req.respond(tiny_http::Response::from_string("not found").with_status_code(404));
        return;
    };
    // Every part with its role: the CLI sends its session context and the prompt as two parts
    // of one user content.
    let parts: Vec<(Value, Value)> = v["contents"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| {
            let role = c["role"].clone();
            let ps = c["parts"].as_array().cloned().unwrap_or_default();
            ps.into_iter().map(move |p| (role.clone(), p))
        })
        .collect();
    let is_prompt = |(role, p): &(Value, Value)| {
        role == "user"
            && p["text"]
                .as_str()
                .is_some_and(|t| !t.trim_start().starts_with('<'))
    };
    let prompts = parts.iter().filter(|p| is_prompt(p)).count() as u64;
    let last_at = parts.iter().rposition(is_prompt).unwrap_or(0);
    let last_user = parts
        .get(last_at)
        .and_then(|(_, p)| p["text"].as_str())
        .unwrap_or_default()
        .to_string();
    let responses: Vec<Value> = parts[last_at.min(parts.len())..]
        .iter()
        .filter_map(|(_, p)| p.get("functionResponse").cloned())
        .collect();
    let rec = Recorded {
        model,
        prompts: prompts as usize,
        last_user: last_user.clone(),
        has_key: req
            .headers()
            .iter()
            .any(|h| h.field.equiv("x-goog-api-key")),
    };
    hook(&rec);
    log.lock().unwrap().push(rec);
    let (p, c, out, thoughts) = usage_for(prompts, responses.len() as u64);
    let usage = json!({"promptTokenCount": p, "cachedContentTokenCount": c,
        "candidatesTokenCount": out, "thoughtsTokenCount": thoughts,
        "totalTokenCount": p + out + thoughts});
    let last_is_response = parts
        .last()
        .is_some_and(|(_, p)| p.get("functionResponse").is_some());
    let text = if last_is_response {
        let r = responses.last().map(|r| r["response"].to_string());
        format!("Done. The tool said: {}", r.unwrap_or_default())
    } else if last_user.contains("SCENARIO:shell") {
        let call = json!([{"functionCall": {"name": "run_shell_command", "args": {
            "command": "echo baton-was-here > gemini-wrote.txt && cat gemini-wrote.txt",
            "description": "Write a probe file"}}}]);
        return respond(req, Box::new(Cursor::new(chunk(call, Some(&usage)))));
    } else if last_user.contains("SCENARIO:err400") {
        let body = json!({"error": {"code": 400,
            "message": "API key not valid. Please pass a valid API key. (fake)",
            "status": "INVALID_ARGUMENT", "details": [{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID", "domain": "googleapis.com"}]}});
        let _ = req.respond(
            tiny_http::Response::from_string(body.to_string())
                .with_status_code(400)
                .with_header(header("Content-Type", "application/json")),
        );
        return;
    } else if last_user.contains("SCENARIO:slow") {
        let ticks =
            Ticks::new(|i| (i < 240).then(|| chunk(json!([{"text": format!("tick{i} ")}]), None)));
        return respond(req, Box::new(ticks));
    } else {
        format!("Hello from the fake Gemini API. I have seen {prompts} user prompt(s) in this conversation.")
    };
    let words: Vec<&str> = text.split_inclusive(' ').collect();
    let mut out = String::new();
    for (i, w) in words.iter().enumerate() {
        let last = i + 1 == words.len();
        out.push_str(&chunk(json!([{"text": w}]), last.then_some(&usage)));
    }
    respond(req, Box::new(Cursor::new(out)));
}

fn respond(req: tiny_http::Request, body: Box<dyn Read + Send>) {
    let _ = req.respond(tiny_http::Response::new(
        tiny_http::StatusCode(200),
        vec![header("Content-Type", "text/event-stream")],
        body,
        None,
        None,
    ));
}
