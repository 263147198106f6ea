//! The Codex app-server client over every captured transcript of `@openai/codex@0.169.0`
//! (`fixtures/codex/`): what Baton sends, the events, the turn outcome and usage; and hostile
//! input (bad frames, oversized frames, unexpected requests) → `malformed`, never a panic or hang.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use baton::agent::codex::{Client, MAX_CONTROL_BYTES};
use baton::agent::{AgentErrorKind, AgentEvent, AgentEventKind, ProcessEnd, TurnParser};
use baton::workflow::config::{CliSection, CodexConfig};
use crossbeam_channel::{unbounded, Receiver, Sender};
use serde_json::{json, Value};

use crate::support::agent::{assistant_text, of_kind, only};

/// Baton's defaults, a 5 s reply bound.
fn config() -> CodexConfig {
    CodexConfig {
        cli: CliSection::new("codex app-server"),
        approval_policy: "never".into(),
        thread_sandbox: "workspace-write".into(),
        turn_sandbox_policy: None,
        read_timeout_ms: 5000,
    }
}

/// A stdin that hands every message Baton writes to the test.
struct Stdin(Sender<Vec<u8>>);

impl Write for Stdin {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = self.0.send(buf.to_vec());
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A started client (turn 1, resuming `thread` if given) and what it writes to stdin.
fn client(thread: Option<&str>) -> (Client, Receiver<Vec<u8>>) {
    let mut c = Client::new(
        &config(),
        Path::new("/ws"),
        thread.map(String::from),
        "do it",
        1,
    );
    let (tx, rx) = unbounded();
    assert!(c.started(Some(Box::new(Stdin(tx)))).is_empty());
    (c, rx)
}

/// The next `n` messages Baton sent.
fn sent(rx: &Receiver<Vec<u8>>, n: usize) -> Vec<Value> {
    (0..n)
        .map(|_| {
            let b = rx.recv_timeout(Duration::from_secs(5)).expect("a message");
            assert_eq!(b.last(), Some(&b'\n'), "one message per line");
            serde_json::from_slice(&b).unwrap()
        })
        .collect()
}

fn no_more(rx: &Receiver<Vec<u8>>) {
    assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
}

/// The server's messages of a captured app-server case, in order.
fn received(case: &str) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/codex")
        .join(case);
    let text = fs::read_to_string(dir.join("rpc-transcript.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["dir"] == "recv")
        .map(|v| v["msg"].to_string())
        .collect()
}

/// Feed `case`'s server messages until the client's turn is over.
fn replay(c: &mut Client, case: &str) -> Vec<AgentEvent> {
    let mut events = Vec::new();
    for line in received(case) {
        events.extend(c.parse_line(&line));
        if c.result_seen() {
            break;
        }
    }
    events
}

fn exited(code: i32) -> ProcessEnd {
    ProcessEnd {
        exit_code: Some(code),
        ..ProcessEnd::default()
    }
}

#[test]
fn a_first_turn_starts_a_thread_and_streams_to_completion() {
    let (mut c, rx) = client(None);
    let init = sent(&rx, 1);
    assert_eq!(init[0]["method"], "initialize");
    assert_eq!(init[0]["params"]["clientInfo"]["name"], "baton");
    let events = replay(&mut c, "20-app-server-text-then-shell");
    let msgs = sent(&rx, 3);
    assert_eq!(msgs[0], json!({"method": "initialized"}));
    assert_eq!(msgs[1]["method"], "thread/start");
    assert_eq!(
        msgs[1]["params"],
        json!({"cwd": "/ws", "approvalPolicy": "never", "sandbox": "workspace-write"})
    );
    assert_eq!(msgs[2]["method"], "turn/start");
    let thread = "01a231d6-7f2a-7480-aa0a-3d7836d7034e";
    assert_eq!(
        msgs[2]["params"],
        json!({"threadId": thread, "cwd": "/ws", "input": [{"type": "text", "text": "do it"}]})
    );
    no_more(&rx);
    assert_eq!(c.session(), Some(thread));
    let started = only(&events, AgentEventKind::SessionStarted);
    assert_eq!(started.session_id.as_deref(), Some(&*format!("{thread}-1")));
    assert_eq!(
        assistant_text(&events),
        Some(
            "Hello from the fake Responses API. I have seen 1 user prompt(s) in this conversation."
        )
    );
    assert!(of_kind(&events, AgentEventKind::Malformed).is_empty());
    // Turn 1's one call: 1000 input (600 cached), 20 output.
    let u = c.usage().unwrap();
    assert_eq!(
        (u.input_tokens, u.cache_read_input_tokens, u.output_tokens),
        (400, 600, 20)
    );
    let rl = events.iter().find_map(|e| e.rate_limits.clone()).unwrap();
    assert_eq!(
        (rl.status.as_str(), rl.utilization),
        ("allowed", Some(0.43))
    );
    assert_eq!(rl.resets_at.as_deref(), Some("2026-12-01T14:41:10Z"));
    assert_eq!(c.outcome(&exited(0)), Ok(()));
}

#[test]
fn a_resumed_thread_counts_only_its_own_calls() {
    let thread = "01a231d6-7f2a-7480-aa0a-3d7836d7034e";
    let (mut c, rx) = client(Some(thread));
    let events = replay(&mut c, "23-app-server-thread-resume");
    let msgs = sent(&rx, 4);
    assert_eq!(msgs[2]["method"], "thread/resume");
    assert_eq!(msgs[2]["params"]["threadId"], thread);
    assert_eq!(msgs[2]["params"]["excludeTurns"], true);
    assert_eq!(msgs[3]["method"], "turn/start");
    assert!(only(&events, AgentEventKind::SessionStarted)
        .summary
        .contains("resumed"));
    // The resume replays the thread's usage (total 5100, an earlier turn's `last`); the turn's
    // own call is 3000 input (2600 cached), 20 output.
    let u = c.usage().unwrap();
    assert_eq!(
        (u.input_tokens, u.cache_read_input_tokens, u.output_tokens),
        (400, 2600, 20)
    );
    assert_eq!(c.outcome(&exited(0)), Ok(()));
}

#[test]
fn an_api_error_fails_the_turn_with_its_status() {
    let (mut c, _rx) = client(None);
    let events = replay(&mut c, "24-app-server-api-error");
    let retries = of_kind(&events, AgentEventKind::Notification)
        .into_iter()
        .filter(|e| e.summary.starts_with("api error (retrying)"))
        .count();
    assert_eq!(retries, 5);
    let err = c.outcome(&exited(0)).unwrap_err();
    assert_eq!(err.kind, AgentErrorKind::TurnFailed);
    assert!(
        err.message
            .starts_with("turn failed: unexpected status 401"),
        "{err}"
    );
    assert_eq!(c.usage().unwrap().input_tokens, 0);
}

#[test]
fn approval_requests_are_declined_and_reported() {
    for case in [
        "21-app-server-approval-accept",
        "22-app-server-approval-decline",
    ] {
        let (mut c, rx) = client(None);
        let events = replay(&mut c, case);
        let msgs = sent(&rx, 5);
        assert_eq!(
            msgs[4],
            json!({"id": 0, "result": {"decision": "decline"}}),
            "{case}"
        );
        let denied = only(&events, AgentEventKind::PermissionDenied);
        assert!(
            denied.summary.contains("echo hi > f.txt"),
            "{}",
            denied.summary
        );
        assert_eq!(c.outcome(&exited(0)), Ok(()), "{case}");
    }
}

#[test]
fn every_captured_line_is_survived() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/codex");
    let mut cases = 0;
    for dir in fs::read_dir(&root)
        .unwrap()
        .flatten()
        .filter(|d| d.path().is_dir())
    {
        let (mut c, _rx) = client(None);
        let p = dir.path();
        let lines: Vec<String> = if p.join("rpc-transcript.jsonl").exists() {
            received(&dir.file_name().to_string_lossy())
        } else {
            let text = fs::read_to_string(p.join("stdout.jsonl")).unwrap();
            text.lines().map(String::from).collect()
        };
        for line in &lines {
            for ev in c.parse_line(line) {
                assert!(ev.summary.chars().count() <= 201, "{}", ev.summary);
            }
        }
        let code: i32 = fs::read_to_string(p.join("exit_code.txt"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // `codex exec` speaks another protocol: its lines are not JSON-RPC, and no turn completes.
        if !p.join("rpc-transcript.jsonl").exists() && !lines.is_empty() {
            let ev = c.parse_line(&lines[0]);
            assert_eq!(ev[0].kind, AgentEventKind::Malformed);
            assert!(c.outcome(&exited(code)).is_err());
        }
        cases += 1;
    }
    assert_eq!(cases, 23);
}

#[test]
fn hostile_frames_are_malformed_and_never_stall_the_turn() {
    let (mut c, rx) = client(None);
    sent(&rx, 1);
    for bad in ["not json", "[1,2]", "42", "{}", r#"{"id":99,"result":{}}"#] {
        let ev = c.parse_line(bad);
        assert_eq!(ev[0].kind, AgentEventKind::Malformed, "{bad}");
    }
    // An unexpected server request gets a JSON-RPC error at once (the server never waits).
    let ev = c.parse_line(r#"{"id":"x1","method":"attestation/generate","params":{}}"#);
    assert_eq!(ev[0].kind, AgentEventKind::Malformed);
    let reply = &sent(&rx, 1)[0];
    assert_eq!(
        (&reply["id"], &reply["error"]["code"]),
        (&json!("x1"), &json!(-32601))
    );
    // A dynamic tool call gets a failure result and the session goes on.
    c.parse_line(r#"{"id":7,"method":"item/tool/call","params":{"tool":"lookup"}}"#);
    assert_eq!(sent(&rx, 1)[0]["result"]["success"], false);
    // Hostile numbers and shapes in notifications.
    let weird = [
        r#"{"method":"thread/tokenUsage/updated","params":{"tokenUsage":{"last":{"inputTokens":-5,"cachedInputTokens":18446744073709551615}}}}"#,
        r#"{"method":"thread/tokenUsage/updated","params":{"tokenUsage":7}}"#,
        r#"{"method":"account/rateLimits/updated","params":{"rateLimits":{"primary":{"usedPercent":1e308,"resetsAt":18446744073709551615}}}}"#,
        r#"{"method":"account/rateLimits/updated","params":{}}"#,
        r#"{"method":"item/completed","params":{"item":{"type":"agentMessage","text":7}}}"#,
        r#"{"method":"error","params":{"error":{"codexErrorInfo":[1]}}}"#,
        r#"{"method":"turn/completed","params":{"turn":{"id":"someone-else"}}}"#,
    ];
    for line in weird {
        c.parse_line(line);
    }
    assert_eq!(
        c.usage().unwrap().input_tokens,
        0,
        "nothing of another turn counted"
    );
    assert!(!c.result_seen());
    // An oversized reply to the pending request fails it; the client closes stdin.
    let big = format!(
        r#"{{"id":1,"result":{{"pad":"{}"}}}}"#,
        "x".repeat(MAX_CONTROL_BYTES)
    );
    assert_eq!(c.parse_line(&big)[0].kind, AgentEventKind::Malformed);
    assert!(c.result_seen(), "the exchange is over");
    let err = c.outcome(&exited(0)).unwrap_err();
    assert_eq!(err.kind, AgentErrorKind::StartupFailed);
    assert!(err.message.contains("4 MiB"), "{err}");
}

#[test]
fn user_input_requests_fail_the_turn() {
    for method in [
        "item/tool/requestUserInput",
        "mcpServer/elicitation/request",
    ] {
        let (mut c, rx) = client(None);
        sent(&rx, 1);
        let line = json!({"id": 3, "method": method, "params": {"questions": []}}).to_string();
        let ev = c.parse_line(&line);
        assert_eq!(ev[0].kind, AgentEventKind::TurnInputRequired);
        assert!(
            sent(&rx, 1)[0]["error"].is_object(),
            "answered, not left waiting"
        );
        assert!(c.result_seen());
        let err = c.outcome(&exited(0)).unwrap_err();
        assert_eq!(err.kind, AgentErrorKind::TurnInputRequired, "{method}");
    }
}

#[test]
fn an_unknown_thread_falls_back_once_to_a_new_one() {
    let (mut c, rx) = client(Some("gone"));
    sent(&rx, 1);
    c.parse_line(r#"{"id":1,"result":{}}"#);
    let resume = sent(&rx, 2);
    assert_eq!(resume[1]["method"], "thread/resume");
    let ev = c.parse_line(r#"{"id":2,"error":{"code":-32600,"message":"no rollout found"}}"#);
    assert!(
        ev[0].summary.contains("resume of thread gone failed"),
        "{}",
        ev[0].summary
    );
    let start = sent(&rx, 1);
    assert_eq!(start[0]["method"], "thread/start");
    assert_eq!(c.session(), None);
    c.parse_line(r#"{"id":3,"result":{"thread":{"id":"t-new"}}}"#);
    assert_eq!(c.session(), Some("t-new"));
    // An error reply to anything else ends the turn (response_error).
    let (mut c, rx) = client(None);
    sent(&rx, 1);
    c.parse_line(r#"{"id":1,"error":{"code":-1,"message":"nope"}}"#);
    let err = c.outcome(&exited(0)).unwrap_err();
    assert_eq!(err.kind, AgentErrorKind::StartupFailed);
    assert_eq!(err.message, "response_error: initialize failed: nope");
}

#[test]
fn timeouts_and_exits_map_to_baton_categories() {
    let (c, _rx) = client(None);
    // A pending request bounds the wait by read_timeout_ms.
    let d = c.deadline().unwrap();
    assert!(
        d <= Instant::now() + Duration::from_secs(5),
        "read timeout applies"
    );
    let timed_out = ProcessEnd {
        timed_out: true,
        ..ProcessEnd::default()
    };
    let err = c.outcome(&timed_out).unwrap_err();
    assert_eq!(err.kind, AgentErrorKind::StartupFailed);
    assert!(err
        .message
        .starts_with("response_timeout: no reply to initialize"));
    let cancelled = ProcessEnd {
        cancelled: true,
        ..ProcessEnd::default()
    };
    assert_eq!(
        c.outcome(&cancelled).unwrap_err().kind,
        AgentErrorKind::TurnCancelled
    );
    assert_eq!(
        c.outcome(&exited(127)).unwrap_err().kind,
        AgentErrorKind::AgentNotFound
    );
    assert_eq!(
        c.outcome(&exited(1)).unwrap_err().kind,
        AgentErrorKind::ProcessExit
    );
    // Without a stdin pipe (a host that cannot forward one) the turn cannot start.
    let mut bare = Client::new(&config(), Path::new("/ws"), None, "p", 1);
    bare.started(None);
    let err = bare.outcome(&exited(0)).unwrap_err();
    assert_eq!(err.kind, AgentErrorKind::StartupFailed);
    assert!(err.message.contains("no stdin pipe"));
}
