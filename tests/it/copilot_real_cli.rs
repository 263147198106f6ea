//! The Copilot adapter against the real `@github/copilot@1.0.102` CLI, fully offline: BYOK mode
//! (`COPILOT_OFFLINE=true`) pointed at the scripted fake Chat Completions server in
//! `tests/it/support/fake_openai.rs`, with a temp `HOME`.
//!
//! Needs `BATON_COPILOT_BIN` (set by `.ci/setup-copilot.sh`). Without it each test prints why it
//! skipped — except under `CI=true`, where a missing CLI is a failure.

use crate::support::fake_openai;

use crate::support::procs;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use baton::agent::copilot::CopilotRunner;
use baton::agent::{
    AgentErrorKind, AgentEvent, AgentEventKind, AgentRunner, AgentSession, CancelToken,
    SessionContext,
};
use baton::workflow::config::CopilotConfig;
use fake_openai::{FakeOpenAi, COMPLETION_TOKENS, PROMPT_TOKENS};

/// The CLI is heavy (a 145 MB native runtime); run one at a time to keep the shared CI box sane.
static SERIAL: Mutex<()> = Mutex::new(());

/// The CLI binary (the tests calling this are ignored unless run with `--include-ignored`).
fn copilot_bin(_test: &str) -> Option<PathBuf> {
    Some(crate::support::tool::required(
        "BATON_COPILOT_BIN",
        ".ci/setup-copilot.sh",
    ))
}

/// A temp tree: `<dir>/home`, `<dir>/root/<issue>` (the workspace). Removed on drop.
struct Sandbox {
    dir: PathBuf,
    home: PathBuf,
    root: PathBuf,
    workspace: PathBuf,
}

impl Sandbox {
    fn new(tag: &str) -> Sandbox {
        static N: AtomicU32 = AtomicU32::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let dir = std::env::temp_dir().join(format!(
            "baton-copilot-it-{tag}-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let home = dir.join("home");
        let root = dir.join("root");
        let workspace = root.join("GH-7");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&workspace).unwrap();
        Sandbox {
            dir,
            home,
            root,
            workspace,
        }
    }

    fn ctx(&self, resume: Option<&str>) -> SessionContext {
        SessionContext {
            issue_identifier: "acme/widgets#7".into(),
            workspace: self.workspace.clone(),
            workspace_root: self.root.clone(),
            resume_session_id: resume.map(str::to_owned),
            host: baton::host::LocalHost::shared(),
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn config(bin: &Path) -> CopilotConfig {
    CopilotConfig {
        command: format!("'{}'", bin.display()),
        model: None,
        allow_all_tools: false,
        allow_tools: vec!["shell(echo)".into()],
        deny_tools: vec![],
        extra_args: vec![],
        turn_timeout_ms: 90_000,
        stall_timeout_ms: 60_000,
    }
}

/// The runner with the offline BYOK environment; the package cache is shared (not in the temp
/// HOME) so the 235 MB bundle is extracted once, not per test.
fn runner(cfg: CopilotConfig, fake: &FakeOpenAi, sb: &Sandbox) -> CopilotRunner {
    let cache = std::env::var_os("BATON_COPILOT_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/copilot")))
        .unwrap_or_else(|| sb.dir.join("cache"));
    let mut r = CopilotRunner::new(cfg)
        .with_env("COPILOT_OFFLINE", "true")
        .with_env("COPILOT_PROVIDER_BASE_URL", &fake.base_url)
        .with_env("COPILOT_PROVIDER_API_KEY", "dummy")
        .with_env("COPILOT_MODEL", "gpt-4.1")
        .with_env("HOME", &sb.home)
        .with_env("COPILOT_CACHE_HOME", cache)
        .with_env("NO_COLOR", "1");
    for k in [
        "COPILOT_GITHUB_TOKEN",
        "GH_TOKEN",
        "GITHUB_TOKEN",
        "COPILOT_HOME",
    ] {
        r = r.without_env(k);
    }
    r
}

fn run(
    session: &mut dyn AgentSession,
    prompt: &str,
) -> (Result<(), baton::agent::AgentError>, Vec<AgentEvent>) {
    let mut events = Vec::new();
    let cancel = CancelToken::new();
    let r = session.run_turn(prompt, &cancel, &mut |e| events.push(e));
    (r, events)
}

/// The `turn_completed` event that ended a successful turn (it carries the turn's usage delta).
fn completed(events: &[AgentEvent]) -> &AgentEvent {
    let last = events.last().expect("a terminal event");
    assert_eq!(last.kind, AgentEventKind::TurnCompleted, "{events:#?}");
    last
}

/// The last assistant message of a turn, from its `assistant: …` notification.
fn last_assistant_text(events: &[AgentEvent]) -> &str {
    events
        .iter()
        .rev()
        .filter(|e| e.kind == AgentEventKind::Notification)
        .find_map(|e| e.summary.strip_prefix("assistant: "))
        .unwrap_or_else(|| panic!("no assistant message: {events:#?}"))
}

fn of_kind(events: &[AgentEvent], k: AgentEventKind) -> Vec<&AgentEvent> {
    events.iter().filter(|e| e.kind == k).collect()
}

/// True once no process is left in group `pgid`. Members killed by the reaper may linger for a
/// moment as zombies until their new parent reaps them, so this waits (bounded) for that.
fn group_is_gone(pgid: u32) -> bool {
    procs::wait_group_gone(pgid as i32, std::time::Duration::from_secs(10))
}

#[test]
#[ignore = "needs the real copilot CLI (BATON_COPILOT_BIN, .ci/setup-copilot.sh)"]
fn allowed_shell_tool_writes_a_file() {
    let Some(bin) = copilot_bin("allowed_shell_tool_writes_a_file") else {
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let fake = FakeOpenAi::start();
    let sb = Sandbox::new("write");
    let mut cfg = config(&bin);
    cfg.allow_tools = vec!["shell(echo)".into(), "write".into()];
    let mut session = runner(cfg, &fake, &sb)
        .start_session(&sb.ctx(None))
        .unwrap();
    let (res, events) = run(
        session.as_mut(),
        "SCENARIO:write put a file in the workspace",
    );
    res.unwrap_or_else(|e| panic!("turn failed: {e}; events: {events:#?}"));

    let written = std::fs::read_to_string(sb.workspace.join("copilot-wrote.txt")).unwrap();
    assert_eq!(written.trim(), "baton-was-here");

    let sid = session.agent_session_id().unwrap();
    let started = of_kind(&events, AgentEventKind::SessionStarted);
    assert_eq!(started.len(), 1);
    assert_eq!(
        started[0].session_id.as_deref(),
        Some(format!("{sid}-1").as_str())
    );
    assert!(started[0].agent_pid.is_some());
    let tools: Vec<&str> = of_kind(&events, AgentEventKind::ToolUse)
        .iter()
        .map(|e| e.summary.as_str())
        .collect();
    assert_eq!(
        tools,
        [
            "tool bash started: echo baton-was-here > copilot-wrote.txt",
            "tool bash completed"
        ]
    );
    assert!(of_kind(&events, AgentEventKind::PermissionDenied).is_empty());
    let done = completed(&events);
    // Two model calls (tool call, then the answer): usage from the usage file.
    let usage = done.usage_delta.unwrap();
    assert_eq!(usage.input_tokens, 2 * PROMPT_TOKENS);
    assert_eq!(usage.output_tokens, 2 * COMPLETION_TOKENS);
    assert_eq!(
        done.session_id.as_deref(),
        Some(format!("{sid}-1").as_str())
    );
    assert!(last_assistant_text(&events).starts_with("Tool result was: "));
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs.iter().all(|r| r.has_bearer && r.model == "gpt-4.1"));
    session.stop();
}

#[test]
#[ignore = "needs the real copilot CLI (BATON_COPILOT_BIN, .ci/setup-copilot.sh)"]
fn denied_tool_is_reported_and_not_run() {
    let Some(bin) = copilot_bin("denied_tool_is_reported_and_not_run") else {
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let fake = FakeOpenAi::start();
    let sb = Sandbox::new("deny");
    std::fs::write(sb.workspace.join("baton-deny-probe.txt"), "keep me").unwrap();
    let mut cfg = config(&bin);
    cfg.deny_tools = vec!["shell(rm)".into()];
    let mut session = runner(cfg, &fake, &sb)
        .start_session(&sb.ctx(None))
        .unwrap();
    let (res, events) = run(session.as_mut(), "SCENARIO:deny delete the probe");
    res.unwrap_or_else(|e| panic!("turn failed: {e}; events: {events:#?}"));
    let denied = of_kind(&events, AgentEventKind::PermissionDenied);
    assert_eq!(denied.len(), 1, "{events:#?}");
    assert!(
        denied[0].summary.contains("shell(rm)"),
        "{}",
        denied[0].summary
    );
    assert!(sb.workspace.join("baton-deny-probe.txt").exists());
    assert!(last_assistant_text(&events).contains("denied"));
}

#[test]
#[ignore = "needs the real copilot CLI (BATON_COPILOT_BIN, .ci/setup-copilot.sh)"]
fn second_turn_resumes_the_session_with_its_context() {
    let Some(bin) = copilot_bin("second_turn_resumes_the_session_with_its_context") else {
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let fake = FakeOpenAi::start();
    let sb = Sandbox::new("resume");
    let mut session = runner(config(&bin), &fake, &sb)
        .start_session(&sb.ctx(None))
        .unwrap();
    let (r1, ev1) = run(session.as_mut(), "REMEMBER:pineapple hello");
    r1.unwrap_or_else(|e| panic!("turn 1 failed: {e}; {ev1:#?}"));
    let sid = session.agent_session_id().unwrap();
    let (r2, ev2) = run(session.as_mut(), "what did I ask you to remember?");
    r2.unwrap_or_else(|e| panic!("turn 2 failed: {e}; {ev2:#?}"));

    assert_eq!(session.agent_session_id().as_deref(), Some(sid.as_str()));
    let started2 = of_kind(&ev2, AgentEventKind::SessionStarted);
    assert_eq!(
        started2[0].session_id.as_deref(),
        Some(format!("{sid}-2").as_str())
    );
    let text2 = last_assistant_text(&ev2);
    assert!(text2.contains("seen 2 user message(s)"), "{text2}");
    assert!(text2.contains("I remember pineapple."), "{text2}");
    // The usage file is cumulative across the resume; each turn reports only its own call.
    let (u1, u2) = (
        completed(&ev1).usage_delta.unwrap(),
        completed(&ev2).usage_delta.unwrap(),
    );
    assert_eq!(u1.input_tokens, PROMPT_TOKENS);
    assert_eq!(u2.input_tokens, PROMPT_TOKENS);
    assert_eq!(u2.output_tokens, COMPLETION_TOKENS);
    assert_eq!(fake.requests()[1].user_messages, 2);
}

#[test]
#[ignore = "needs the real copilot CLI (BATON_COPILOT_BIN, .ci/setup-copilot.sh)"]
fn unknown_resume_falls_back_once_to_a_new_session() {
    let Some(bin) = copilot_bin("unknown_resume_falls_back_once_to_a_new_session") else {
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let fake = FakeOpenAi::start();
    let sb = Sandbox::new("fallback");
    let stale = "0b470000-0000-4000-8000-0000000000ff";
    let mut session = runner(config(&bin), &fake, &sb)
        .start_session(&sb.ctx(Some(stale)))
        .unwrap();
    let (r, ev) = run(session.as_mut(), "hello again");
    r.unwrap_or_else(|e| panic!("turn failed: {e}; {ev:#?}"));
    let new_id = session.agent_session_id().unwrap();
    assert_ne!(new_id, stale);
    assert!(ev.iter().any(|e| e.kind == AgentEventKind::Notification
        && e.summary.contains("unknown session")
        && e.summary.contains(&new_id)));
    let started = of_kind(&ev, AgentEventKind::SessionStarted);
    assert_eq!(started.len(), 2);
    assert_eq!(
        started[1].session_id.as_deref(),
        Some(format!("{new_id}-1").as_str())
    );
    assert!(last_assistant_text(&ev).contains("seen 1 user message(s)"));
    assert_eq!(
        completed(&ev).usage_delta.unwrap().input_tokens,
        PROMPT_TOKENS
    );
}

#[test]
#[ignore = "needs the real copilot CLI (BATON_COPILOT_BIN, .ci/setup-copilot.sh)"]
fn model_error_fails_the_turn() {
    let Some(bin) = copilot_bin("model_error_fails_the_turn") else {
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let fake = FakeOpenAi::start();
    let sb = Sandbox::new("error");
    let mut session = runner(config(&bin), &fake, &sb)
        .start_session(&sb.ctx(None))
        .unwrap();
    let (r, ev) = run(session.as_mut(), "SCENARIO:badrequest");
    let err = r.expect_err("a 400 from the model must fail the turn");
    assert_eq!(err.kind, AgentErrorKind::TurnFailed, "{err}");
    assert!(err.message.contains("400"), "{err}");
    assert!(!of_kind(&ev, AgentEventKind::TurnFailed).is_empty());
    assert_eq!(ev.last().map(|e| e.kind), Some(AgentEventKind::TurnFailed));
}

#[test]
#[ignore = "needs the real copilot CLI (BATON_COPILOT_BIN, .ci/setup-copilot.sh)"]
fn stop_mid_turn_leaves_no_process() {
    let Some(bin) = copilot_bin("stop_mid_turn_leaves_no_process") else {
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let fake = FakeOpenAi::start();
    let sb = Sandbox::new("stop");
    let mut session = runner(config(&bin), &fake, &sb)
        .start_session(&sb.ctx(None))
        .unwrap();
    let cancel = CancelToken::new();
    let mut events: Vec<AgentEvent> = Vec::new();
    let mut pid = None;
    let c = cancel.clone();
    let r = session.run_turn("SCENARIO:slow", &cancel, &mut |e| {
        if e.kind == AgentEventKind::SessionStarted {
            pid = e.agent_pid;
        }
        // Stop once the model is visibly streaming.
        if e.summary.starts_with("assistant.message_delta: tick") {
            c.cancel();
        }
        events.push(e);
    });
    let err = r.expect_err("a stopped turn must not succeed");
    assert_eq!(err.kind, AgentErrorKind::TurnCancelled, "{err}");
    assert!(events
        .iter()
        .any(|e| e.summary.starts_with("assistant.message_delta: tick")));
    assert_eq!(
        events.last().map(|e| e.kind),
        Some(AgentEventKind::TurnCancelled)
    );
    let pid = pid.expect("session_started carries the pid");
    assert!(group_is_gone(pid), "process group {pid} still has members");
    session.stop();
}

#[test]
#[ignore = "needs the real copilot CLI (BATON_COPILOT_BIN, .ci/setup-copilot.sh)"]
fn hostile_prompt_reaches_the_model_verbatim() {
    let Some(bin) = copilot_bin("hostile_prompt_reaches_the_model_verbatim") else {
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let fake = FakeOpenAi::start();
    let sb = Sandbox::new("hostile");
    let mut session = runner(config(&bin), &fake, &sb)
        .start_session(&sb.ctx(None))
        .unwrap();
    // Issue text is untrusted: shell syntax must never be parsed, and a leading dash must not
    // turn the prompt into a CLI flag.
    let prompt =
        "--allow-all-tools $(touch pwned1) `touch pwned2`; touch pwned3 \"' \\ \n second line";
    let (r, ev) = run(session.as_mut(), prompt);
    r.unwrap_or_else(|e| panic!("turn failed: {e}; {ev:#?}"));
    for f in ["pwned1", "pwned2", "pwned3"] {
        assert!(!sb.workspace.join(f).exists(), "{f} was created");
    }
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1);
    assert!(
        reqs[0].last_user.contains(prompt),
        "{:?}",
        reqs[0].last_user
    );
}
