//! The Claude adapter driving the real `@anthropic-ai/claude-code@2.1.332` CLI against the fake
//! Messages API in `tests/it/support/fake_anthropic.rs` (127.0.0.1 only).
//!
//! Needs `BATON_CLAUDE_BIN` (set by `source .ci/setup-claude.sh`); the tests are ignored unless
//! run with `--include-ignored`, where a missing CLI fails them.

use crate::support::agent::{claude_config, run, Knobs, Sandbox};
use crate::support::fake_anthropic::{usage_of, FakeAnthropic, Step};

use baton::agent::claude::ClaudeRunner;
use baton::agent::{AgentErrorKind, AgentEventKind, AgentRunner, AgentSession};
use baton::workflow::config::ClaudeCodeConfig;
use serde_json::json;

/// The real CLI with `permission_mode` and `allowed` tools, a 120 s turn bound, in a sandbox
/// HOME, talking to `fake` with telemetry and updates off and one API retry.
fn runner(
    sb: &Sandbox,
    fake: &FakeAnthropic,
    permission_mode: &str,
    allowed: &[&str],
) -> ClaudeRunner {
    let bin = crate::support::tool::required("BATON_CLAUDE_BIN", ".ci/setup-claude.sh");
    let cfg = ClaudeCodeConfig {
        permission_mode: permission_mode.into(),
        allowed_tools: allowed.iter().map(|s| s.to_string()).collect(),
        ..claude_config(format!("'{}'", bin.display()), 120_000)
    };
    ClaudeRunner::new(cfg)
        .with_env("HOME", &sb.home)
        .with_env("ANTHROPIC_BASE_URL", &fake.base_url)
        .with_env("ANTHROPIC_API_KEY", "dummy")
        .with_env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .with_env("DISABLE_TELEMETRY", "1")
        .with_env("DISABLE_AUTOUPDATER", "1")
        .with_env("CLAUDE_CODE_MAX_RETRIES", "1")
}

/// A session of the real CLI (in `acceptEdits` mode, no allowed tools) against `fake`.
fn session(sb: &Sandbox, fake: &FakeAnthropic, resume: Option<&str>) -> Box<dyn AgentSession> {
    runner(sb, fake, "acceptEdits", &[])
        .start_session(&sb.ctx(resume))
        .unwrap()
}

#[test]
#[ignore = "needs the real claude CLI (BATON_CLAUDE_BIN, .ci/setup-claude.sh)"]
fn write_tool_then_resumed_second_turn_on_the_same_session() {
    let sb = Sandbox::new("write");
    let target = sb.ws.join("hello.txt");
    let fake = FakeAnthropic::start(vec![
        Step::ToolUse {
            text: Some("I will write the file.".into()),
            name: "Write".into(),
            input: json!({"file_path": target.display().to_string(), "content": "hello from baton\n"}),
        },
        Step::Text("Wrote hello.txt.".into()),
        Step::Text("Second turn done.".into()),
    ]);
    let mut s = session(&sb, &fake, None);
    let prompt =
        "Write hello.txt. $(touch pwned) `touch pwned2` 'q' \"dq\" ; touch pwned3\n--resume nope";

    let t1 = run(s.as_mut(), prompt);
    let done1 = t1.completed();
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "hello from baton\n"
    );
    for p in ["pwned", "pwned2", "pwned3"] {
        assert!(!sb.ws.join(p).exists(), "{p} was created");
    }
    let id = s.agent_session_id().expect("session id");
    let started = &t1.events[0];
    assert_eq!(
        started.kind,
        AgentEventKind::SessionStarted,
        "{}",
        t1.debug()
    );
    assert_eq!(started.session_id, Some(format!("{id}-1")));
    assert!(started.summary.contains("permission_mode=acceptEdits"));
    assert!(t1
        .of_kind(AgentEventKind::ToolUse)
        .iter()
        .any(|e| e.summary.starts_with("Write: ")));
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
    let done2 = t2.completed();
    assert_eq!(s.agent_session_id().as_deref(), Some(&*id));
    assert!(t2.of_kind(AgentEventKind::SessionStarted).is_empty());
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
    assert_eq!(t2.result_text(), Some("Second turn done."));
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
    let sb = Sandbox::new("deny");
    let fake = FakeAnthropic::start(vec![
        Step::ToolUse {
            text: None,
            name: "Bash".into(),
            input: json!({"command": "python3 -c 'open(\"denied.txt\",\"w\")'", "description": "try"}),
        },
        Step::Text("That was denied.".into()),
    ]);
    let mut s = runner(&sb, &fake, "acceptEdits", &["Bash(echo:*)"])
        .start_session(&sb.ctx(None))
        .unwrap();
    let t = run(s.as_mut(), "Run python.");
    t.ok();
    let denial = t.only(AgentEventKind::PermissionDenied);
    assert!(denial.summary.starts_with("Bash: "));
    assert!(!sb.ws.join("denied.txt").exists());
}

#[test]
#[ignore = "needs the real claude CLI (BATON_CLAUDE_BIN, .ci/setup-claude.sh)"]
fn api_500_fails_the_turn() {
    let sb = Sandbox::new("api500");
    let fake = FakeAnthropic::start(vec![Step::Error(500)]);
    let t = run(session(&sb, &fake, None).as_mut(), "Say hi.");
    let e = t.err();
    assert_eq!(e.kind, AgentErrorKind::TurnFailed, "{e}\n{}", t.debug());
    assert!(e.message.contains("api_error_status=500"), "{e}");
    assert!(t
        .of_kind(AgentEventKind::Notification)
        .iter()
        .any(|e| e.summary.starts_with("api retry")));
    assert_eq!(t.last_kind(), Some(AgentEventKind::TurnFailed));
    assert_eq!(
        fake.requests().len(),
        2,
        "CLAUDE_CODE_MAX_RETRIES=1 ⇒ 2 requests"
    );
}

#[test]
#[ignore = "needs the real claude CLI (BATON_CLAUDE_BIN, .ci/setup-claude.sh)"]
fn unknown_resume_id_fails_the_turn() {
    let sb = Sandbox::new("resume404");
    let fake = FakeAnthropic::start(vec![]);
    let stale = "11111111-2222-3333-4444-555555555555";
    let t = run(session(&sb, &fake, Some(stale)).as_mut(), "Continue.");
    let e = t.err();
    assert_eq!(e.kind, AgentErrorKind::TurnFailed, "{e}");
    assert!(e.message.contains("No conversation found"), "{e}");
    assert!(fake.requests().is_empty());
}
