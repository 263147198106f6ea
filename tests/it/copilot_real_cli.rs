//! The Copilot adapter against the real `@github/copilot@1.0.102` CLI, fully offline: BYOK mode
//! (`COPILOT_OFFLINE=true`) pointed at the scripted fake Chat Completions server in
//! `tests/it/support/fake_openai.rs`, with a temp `HOME`.
//!
//! Needs `BATON_COPILOT_BIN` (set by `.ci/setup-copilot.sh`); the tests are ignored unless run
//! with `--include-ignored`, where a missing CLI fails them.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use baton::agent::copilot::CopilotRunner;
use baton::agent::{AgentErrorKind, AgentEventKind, AgentRunner, AgentSession, CancelToken};
use baton::workflow::config::{CliSection, CopilotConfig};

use crate::support::agent::{run, run_with, summaries, Knobs, Sandbox};
use crate::support::fake_openai::{FakeOpenAi, COMPLETION_TOKENS, PROMPT_TOKENS};
use crate::support::procs;

/// The CLI is heavy (a 145 MB native runtime); run one at a time to keep the shared CI box sane.
static SERIAL: Mutex<()> = Mutex::new(());

/// One test's world: the CLI, the fake model and a sandbox, holding [`SERIAL`].
struct Lab {
    sb: Sandbox,
    fake: FakeOpenAi,
    bin: PathBuf,
    _serial: MutexGuard<'static, ()>,
}

impl Lab {
    fn new(tag: &str) -> Lab {
        let bin = crate::support::tool::required("BATON_COPILOT_BIN", ".ci/setup-copilot.sh");
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let fake = FakeOpenAi::start();
        Lab {
            sb: Sandbox::new(tag),
            fake,
            bin,
            _serial: serial,
        }
    }

    /// The config the tests start from: only `shell(echo)` allowed, 90 s turn, 60 s stall.
    fn config(&self) -> CopilotConfig {
        CopilotConfig {
            cli: CliSection {
                turn_timeout_ms: 90_000,
                stall_timeout_ms: 60_000,
                ..CliSection::new(format!("'{}'", self.bin.display()))
            },
            allow_all_tools: false,
            allow_tools: vec!["shell(echo)".into()],
            deny_tools: vec![],
        }
    }

    /// A session of `cfg` with the offline BYOK environment (resuming `resume` if given); the
    /// package cache is shared (not in the temp HOME) so the 235 MB bundle is extracted once, not
    /// per test.
    fn start(&self, cfg: CopilotConfig, resume: Option<&str>) -> Box<dyn AgentSession> {
        let cache = std::env::var_os("BATON_COPILOT_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/copilot")))
            .unwrap_or_else(|| self.sb.file("cache"));
        let mut r = CopilotRunner::new(cfg)
            .with_env("COPILOT_OFFLINE", "true")
            .with_env("COPILOT_PROVIDER_BASE_URL", &self.fake.base_url)
            .with_env("COPILOT_PROVIDER_API_KEY", "dummy")
            .with_env("COPILOT_MODEL", "gpt-4.1")
            .with_env("HOME", &self.sb.home)
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
        r.start_session(&self.sb.ctx(resume)).unwrap()
    }

    /// A new session of the default config.
    fn session(&self) -> Box<dyn AgentSession> {
        self.start(self.config(), None)
    }
}

#[test]
#[ignore = "needs the real copilot CLI (BATON_COPILOT_BIN, .ci/setup-copilot.sh)"]
fn allowed_shell_tool_writes_a_file() {
    let lab = Lab::new("write");
    let mut cfg = lab.config();
    cfg.allow_tools = vec!["shell(echo)".into(), "write".into()];
    let mut session = lab.start(cfg, None);
    let t = run(
        session.as_mut(),
        "SCENARIO:write put a file in the workspace",
    );
    t.ok();

    let written = std::fs::read_to_string(lab.sb.ws.join("copilot-wrote.txt")).unwrap();
    assert_eq!(written.trim(), "baton-was-here");

    let sid = session.agent_session_id().unwrap();
    let started = t.only(AgentEventKind::SessionStarted);
    assert_eq!(
        started.session_id.as_deref(),
        Some(format!("{sid}-1").as_str())
    );
    assert!(started.agent_pid.is_some());
    assert_eq!(
        summaries(&t.events, AgentEventKind::ToolUse),
        [
            "tool bash started: echo baton-was-here > copilot-wrote.txt",
            "tool bash completed"
        ]
    );
    assert!(t.of_kind(AgentEventKind::PermissionDenied).is_empty());
    let done = t.completed();
    // Two model calls (tool call, then the answer): usage from the usage file.
    let usage = done.usage_delta.unwrap();
    assert_eq!(usage.input_tokens, 2 * PROMPT_TOKENS);
    assert_eq!(usage.output_tokens, 2 * COMPLETION_TOKENS);
    assert_eq!(
        done.session_id.as_deref(),
        Some(format!("{sid}-1").as_str())
    );
    assert!(t.assistant_text().starts_with("Tool result was: "));
    let reqs = lab.fake.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs.iter().all(|r| r.has_bearer && r.model == "gpt-4.1"));
    session.stop();
}

#[test]
#[ignore = "needs the real copilot CLI (BATON_COPILOT_BIN, .ci/setup-copilot.sh)"]
fn denied_tool_is_reported_and_not_run() {
    let lab = Lab::new("deny");
    std::fs::write(lab.sb.ws.join("baton-deny-probe.txt"), "keep me").unwrap();
    let mut cfg = lab.config();
    cfg.deny_tools = vec!["shell(rm)".into()];
    let t = run(
        lab.start(cfg, None).as_mut(),
        "SCENARIO:deny delete the probe",
    );
    t.ok();
    let denied = t.only(AgentEventKind::PermissionDenied);
    assert!(denied.summary.contains("shell(rm)"), "{}", denied.summary);
    assert!(lab.sb.ws.join("baton-deny-probe.txt").exists());
    assert!(t.assistant_text().contains("denied"));
}

#[test]
#[ignore = "needs the real copilot CLI (BATON_COPILOT_BIN, .ci/setup-copilot.sh)"]
fn second_turn_resumes_the_session_with_its_context() {
    let lab = Lab::new("resume");
    let mut session = lab.session();
    let t1 = run(session.as_mut(), "REMEMBER:pineapple hello");
    t1.ok();
    let sid = session.agent_session_id().unwrap();
    let t2 = run(session.as_mut(), "what did I ask you to remember?");
    t2.ok();

    assert_eq!(session.agent_session_id().as_deref(), Some(sid.as_str()));
    let started2 = t2.of_kind(AgentEventKind::SessionStarted);
    assert_eq!(
        started2[0].session_id.as_deref(),
        Some(format!("{sid}-2").as_str())
    );
    let text2 = t2.assistant_text();
    assert!(text2.contains("seen 2 user message(s)"), "{text2}");
    assert!(text2.contains("I remember pineapple."), "{text2}");
    // The usage file is cumulative across the resume; each turn reports only its own call.
    let (u1, u2) = (
        t1.completed().usage_delta.unwrap(),
        t2.completed().usage_delta.unwrap(),
    );
    assert_eq!(u1.input_tokens, PROMPT_TOKENS);
    assert_eq!(u2.input_tokens, PROMPT_TOKENS);
    assert_eq!(u2.output_tokens, COMPLETION_TOKENS);
    assert_eq!(lab.fake.requests()[1].user_messages, 2);
}

#[test]
#[ignore = "needs the real copilot CLI (BATON_COPILOT_BIN, .ci/setup-copilot.sh)"]
fn unknown_resume_falls_back_once_to_a_new_session() {
    let lab = Lab::new("fallback");
    let stale = "0b470000-0000-4000-8000-0000000000ff";
    let mut session = lab.start(lab.config(), Some(stale));
    let t = run(session.as_mut(), "hello again");
    t.ok();
    let new_id = session.agent_session_id().unwrap();
    assert_ne!(new_id, stale);
    assert!(t
        .of_kind(AgentEventKind::Notification)
        .iter()
        .any(|e| e.summary.contains("unknown session") && e.summary.contains(&new_id)));
    let started = t.of_kind(AgentEventKind::SessionStarted);
    assert_eq!(started.len(), 2);
    assert_eq!(
        started[1].session_id.as_deref(),
        Some(format!("{new_id}-1").as_str())
    );
    assert!(t.assistant_text().contains("seen 1 user message(s)"));
    assert_eq!(
        t.completed().usage_delta.unwrap().input_tokens,
        PROMPT_TOKENS
    );
}

#[test]
#[ignore = "needs the real copilot CLI (BATON_COPILOT_BIN, .ci/setup-copilot.sh)"]
fn model_error_fails_the_turn() {
    let lab = Lab::new("error");
    let t = run(lab.session().as_mut(), "SCENARIO:badrequest");
    let err = t.err();
    assert_eq!(err.kind, AgentErrorKind::TurnFailed, "{err}");
    assert!(err.message.contains("400"), "{err}");
    assert!(!t.of_kind(AgentEventKind::TurnFailed).is_empty());
    assert_eq!(t.last_kind(), Some(AgentEventKind::TurnFailed));
}

#[test]
#[ignore = "needs the real copilot CLI (BATON_COPILOT_BIN, .ci/setup-copilot.sh)"]
fn stop_mid_turn_leaves_no_process() {
    let lab = Lab::new("stop");
    let mut session = lab.session();
    let cancel = CancelToken::new();
    let c = cancel.clone();
    let tick =
        |e: &baton::agent::AgentEvent| e.summary.starts_with("assistant.message_delta: tick");
    let t = run_with(session.as_mut(), "SCENARIO:slow", &cancel, |e| {
        // Stop once the model is visibly streaming.
        if tick(e) {
            c.cancel();
        }
    });
    let err = t.err();
    assert_eq!(err.kind, AgentErrorKind::TurnCancelled, "{err}");
    assert!(t.events.iter().any(tick));
    assert_eq!(t.last_kind(), Some(AgentEventKind::TurnCancelled));
    let pid = t.of_kind(AgentEventKind::SessionStarted)[0]
        .agent_pid
        .expect("session_started carries the pid");
    // Members killed by the reaper may linger for a moment as zombies until their new parent
    // reaps them, so this waits (bounded) for that.
    assert!(
        procs::wait_group_gone(pid as i32, Duration::from_secs(10)),
        "process group {pid} still has members"
    );
    session.stop();
}

#[test]
#[ignore = "needs the real copilot CLI (BATON_COPILOT_BIN, .ci/setup-copilot.sh)"]
fn hostile_prompt_reaches_the_model_verbatim() {
    let lab = Lab::new("hostile");
    // Issue text is untrusted: shell syntax must never be parsed, and a leading dash must not
    // turn the prompt into a CLI flag.
    let prompt =
        "--allow-all-tools $(touch pwned1) `touch pwned2`; touch pwned3 \"' \\ \n second line";
    run(lab.session().as_mut(), prompt).ok();
    for f in ["pwned1", "pwned2", "pwned3"] {
        assert!(!lab.sb.ws.join(f).exists(), "{f} was created");
    }
    let reqs = lab.fake.requests();
    assert_eq!(reqs.len(), 1);
    assert!(
        reqs[0].last_user.contains(prompt),
        "{:?}",
        reqs[0].last_user
    );
}
