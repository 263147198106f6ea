//! The Claude adapter driving the real `@anthropic-ai/claude-code@2.1.332` CLI against the fake
//! Messages API in `tests/it/support/fake_anthropic.rs` (127.0.0.1 only).
//!
//! Needs `BATON_CLAUDE_BIN` (set by `source .ci/setup-claude.sh`). Skipped with a printed reason
//! when unset — except under `CI=true`, where a missing CLI fails the test.

use crate::support::fake_anthropic;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use baton::agent::claude::ClaudeRunner;
use baton::agent::{
    AgentError, AgentErrorKind, AgentEvent, AgentEventKind, AgentRunner, AgentSession, CancelToken,
    SessionContext,
};
use baton::workflow::config::ClaudeCodeConfig;
use fake_anthropic::{usage_of, FakeAnthropic, Step};
use serde_json::json;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// The CLI binary (the tests calling this are ignored unless run with `--include-ignored`).
fn claude_bin(_test: &str) -> Option<PathBuf> {
    Some(crate::support::tool::required(
        "BATON_CLAUDE_BIN",
        ".ci/setup-claude.sh",
    ))
}

struct Env {
    root: PathBuf,
    ws: PathBuf,
    home: PathBuf,
}

impl Env {
    fn new(tag: &str) -> Env {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let base = std::env::temp_dir().join(format!(
            "baton-claude-real-{}-{tag}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("root");
        let ws = root.join("ws");
        let home = base.join("home");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        Env {
            root: root.canonicalize().unwrap(),
            ws: ws.canonicalize().unwrap(),
            home: home.canonicalize().unwrap(),
        }
    }
    fn ctx(&self) -> SessionContext {
        SessionContext {
            issue_identifier: "acme/repo#1".into(),
            workspace: self.ws.clone(),
            workspace_root: self.root.clone(),
            resume_session_id: None,
            host: baton::host::LocalHost::shared(),
        }
    }
    fn runner(&self, bin: &Path, fake: &FakeAnthropic, cfg: ClaudeCodeConfig) -> ClaudeRunner {
        let mut cfg = cfg;
        cfg.command = format!("'{}'", bin.display());
        ClaudeRunner::new(cfg).with_envs(vec![
            ("HOME".into(), self.home.display().to_string()),
            ("ANTHROPIC_BASE_URL".into(), fake.base_url.clone()),
            ("ANTHROPIC_API_KEY".into(), "dummy".into()),
            (
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
                "1".into(),
            ),
            ("DISABLE_TELEMETRY".into(), "1".into()),
            ("DISABLE_AUTOUPDATER".into(), "1".into()),
            ("CLAUDE_CODE_MAX_RETRIES".into(), "1".into()),
        ])
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(base) = self.home.parent() {
            let _ = std::fs::remove_dir_all(base);
        }
    }
}

fn cfg(permission_mode: &str, allowed: &[&str]) -> ClaudeCodeConfig {
    ClaudeCodeConfig {
        command: String::new(),
        model: None,
        permission_mode: permission_mode.into(),
        allowed_tools: allowed.iter().map(|s| s.to_string()).collect(),
        disallowed_tools: vec![],
        append_system_prompt: None,
        extra_args: vec![],
        turn_timeout_ms: 120_000,
        stall_timeout_ms: 300_000,
    }
}

struct Turn {
    result: Result<(), AgentError>,
    events: Vec<AgentEvent>,
}

fn run(s: &mut dyn AgentSession, prompt: &str) -> Turn {
    let mut events = Vec::new();
    let result = s.run_turn(prompt, &CancelToken::new(), &mut |e| events.push(e));
    Turn { result, events }
}

/// The `turn_completed` event of a successful turn: it carries the usage delta, the session cost
/// and (after ` ms: `) the final assistant text.
fn completed(t: &Turn) -> &AgentEvent {
    if let Err(e) = &t.result {
        panic!("{e}\n{}", debug(t));
    }
    let last = t.events.last().expect("a terminal event");
    assert_eq!(last.kind, AgentEventKind::TurnCompleted, "{}", debug(t));
    last
}

fn debug(t: &Turn) -> String {
    t.events
        .iter()
        .map(|e| format!("{} {}", e.kind.as_str(), e.summary))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
#[ignore = "needs the real claude CLI (BATON_CLAUDE_BIN, .ci/setup-claude.sh)"]
fn write_tool_then_resumed_second_turn_on_the_same_session() {
    let Some(bin) = claude_bin("write_tool_then_resumed_second_turn_on_the_same_session") else {
        return;
    };
    let env = Env::new("write");
    let target = env.ws.join("hello.txt");
    let fake = FakeAnthropic::start(vec![
        Step::ToolUse {
            text: Some("I will write the file.".into()),
            name: "Write".into(),
            input: json!({"file_path": target.display().to_string(), "content": "hello from baton\n"}),
        },
        Step::Text("Wrote hello.txt.".into()),
        Step::Text("Second turn done.".into()),
    ]);
    let runner = env.runner(&bin, &fake, cfg("acceptEdits", &[]));
    let mut s = runner.start_session(&env.ctx()).unwrap();
    let prompt =
        "Write hello.txt. $(touch pwned) `touch pwned2` 'q' \"dq\" ; touch pwned3\n--resume nope";

    let t1 = run(s.as_mut(), prompt);
    let done1 = completed(&t1);
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "hello from baton\n"
    );
    for p in ["pwned", "pwned2", "pwned3"] {
        assert!(!env.ws.join(p).exists(), "{p} was created");
    }
    let id = s.agent_session_id().expect("session id");
    let started = &t1.events[0];
    assert_eq!(
        started.kind,
        AgentEventKind::SessionStarted,
        "{}",
        debug(&t1)
    );
    assert_eq!(started.session_id, Some(format!("{id}-1")));
    assert!(started.summary.contains("permission_mode=acceptEdits"));
    assert!(t1
        .events
        .iter()
        .any(|e| e.kind == AgentEventKind::ToolUse && e.summary.starts_with("Write: ")));
    // result.usage sums both API calls of the invocation.
    let (i0, o0) = usage_of(0);
    let (i1, o1) = usage_of(1);
    let usage1 = done1.usage_delta.expect("usage");
    assert_eq!(usage1.input_tokens, i0 + i1);
    assert_eq!(usage1.output_tokens, o0 + o1);
    assert_eq!(usage1.cache_read_input_tokens, 400);
    let cost1 = done1.session_cost_usd.expect("cost");
    assert!(cost1 > 0.0);
    // Only the terminal event carries usage.
    assert_eq!(
        t1.events.iter().filter(|e| e.usage_delta.is_some()).count(),
        1
    );

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert!(
        reqs[0].last_user_text.contains(prompt),
        "prompt must reach the API verbatim: {:?}",
        reqs[0].last_user_text
    );
    assert_eq!(reqs[0].session_header.as_deref(), Some(&*id));

    // Turn 2: `--resume` on the same session, continuation guidance only.
    let t2 = run(s.as_mut(), "Continue the task.");
    let done2 = completed(&t2);
    assert_eq!(s.agent_session_id().as_deref(), Some(&*id));
    assert!(t2
        .events
        .iter()
        .all(|e| e.kind != AgentEventKind::SessionStarted));
    assert!(t2
        .events
        .iter()
        .all(|e| e.session_id.as_deref() == Some(&*format!("{id}-2"))));
    let (i2, o2) = usage_of(2);
    let usage2 = done2.usage_delta.expect("usage");
    assert_eq!(usage2.input_tokens, i2, "per invocation, not cumulative");
    assert_eq!(usage2.output_tokens, o2);
    let cost2 = done2.session_cost_usd.expect("cost");
    assert!(cost2 > cost1, "total_cost_usd is session-cumulative");
    assert_eq!(
        done2.summary.split_once(" ms: ").map(|(_, text)| text),
        Some("Second turn done.")
    );
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(
        reqs[2].n_assistant, 2,
        "the resumed request carries the history"
    );
    assert!(reqs[2].last_user_text.contains("Continue the task."));
    assert_eq!(reqs[2].session_header.as_deref(), Some(&*id));
}

#[test]
#[ignore = "needs the real claude CLI (BATON_CLAUDE_BIN, .ci/setup-claude.sh)"]
fn permission_denial_is_reported_and_the_turn_completes() {
    let Some(bin) = claude_bin("permission_denial_is_reported_and_the_turn_completes") else {
        return;
    };
    let env = Env::new("deny");
    let fake = FakeAnthropic::start(vec![
        Step::ToolUse {
            text: None,
            name: "Bash".into(),
            input: json!({"command": "python3 -c 'open(\"denied.txt\",\"w\")'", "description": "try"}),
        },
        Step::Text("That was denied.".into()),
    ]);
    let runner = env.runner(&bin, &fake, cfg("acceptEdits", &["Bash(echo:*)"]));
    let mut s = runner.start_session(&env.ctx()).unwrap();
    let t = run(s.as_mut(), "Run python.");
    assert!(t.result.is_ok(), "{:?}\n{}", t.result, debug(&t));
    let denials: Vec<_> = t
        .events
        .iter()
        .filter(|e| e.kind == AgentEventKind::PermissionDenied)
        .collect();
    assert_eq!(denials.len(), 1, "{}", debug(&t));
    assert!(denials[0].summary.starts_with("Bash: "));
    assert!(!env.ws.join("denied.txt").exists());
}

#[test]
#[ignore = "needs the real claude CLI (BATON_CLAUDE_BIN, .ci/setup-claude.sh)"]
fn api_500_fails_the_turn() {
    let Some(bin) = claude_bin("api_500_fails_the_turn") else {
        return;
    };
    let env = Env::new("api500");
    let fake = FakeAnthropic::start(vec![Step::Error(500)]);
    let runner = env.runner(&bin, &fake, cfg("acceptEdits", &[]));
    let mut s = runner.start_session(&env.ctx()).unwrap();
    let t = run(s.as_mut(), "Say hi.");
    let e = t.result.as_ref().unwrap_err();
    assert_eq!(e.kind, AgentErrorKind::TurnFailed, "{e}\n{}", debug(&t));
    assert!(e.message.contains("api_error_status=500"), "{e}");
    assert!(t
        .events
        .iter()
        .any(|e| e.kind == AgentEventKind::Notification && e.summary.starts_with("api retry")));
    assert_eq!(t.events.last().unwrap().kind, AgentEventKind::TurnFailed);
    assert_eq!(
        fake.requests().len(),
        2,
        "CLAUDE_CODE_MAX_RETRIES=1 ⇒ 2 requests"
    );
}

#[test]
#[ignore = "needs the real claude CLI (BATON_CLAUDE_BIN, .ci/setup-claude.sh)"]
fn unknown_resume_id_fails_the_turn() {
    let Some(bin) = claude_bin("unknown_resume_id_fails_the_turn") else {
        return;
    };
    let env = Env::new("resume404");
    let fake = FakeAnthropic::start(vec![]);
    let runner = env.runner(&bin, &fake, cfg("acceptEdits", &[]));
    let mut ctx = env.ctx();
    ctx.resume_session_id = Some("11111111-2222-3333-4444-555555555555".into());
    let mut s = runner.start_session(&ctx).unwrap();
    let t = run(s.as_mut(), "Continue.");
    let e = t.result.as_ref().unwrap_err();
    assert_eq!(e.kind, AgentErrorKind::TurnFailed, "{e}");
    assert!(e.message.contains("No conversation found"), "{e}");
    assert!(fake.requests().is_empty());
}
