//! The Gemini adapter against the real `@google/gemini-cli@0.61.0`, fully offline: API-key auth
//! pointed at the scripted fake Gemini API in `tests/it/support/fake_gemini.rs`
//! (`GOOGLE_GEMINI_BASE_URL`), with a temp `HOME`.
//!
//! Needs `BATON_GEMINI_BIN` (set by `.ci/setup-gemini.sh`); the tests are ignored unless run with
//! `--include-ignored`, where a missing CLI fails them.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use baton::agent::gemini::GeminiRunner;
use baton::agent::{
    AgentErrorKind, AgentEventKind, AgentRunner, AgentSession, CancelToken, TokenUsage,
};
use baton::workflow::config::{CliSection, GeminiConfig};

use crate::support::agent::{run, run_with, summaries, Knobs, Sandbox, Turn};
use crate::support::fake_gemini::{usage_for, FakeGemini};
use crate::support::procs;

/// One CLI at a time: the shared CI box has two cores.
static SERIAL: Mutex<()> = Mutex::new(());

/// One test's world: the CLI, the fake model and a sandbox, holding [`SERIAL`].
struct Lab {
    sb: Sandbox,
    fake: FakeGemini,
    bin: PathBuf,
    _serial: MutexGuard<'static, ()>,
}

impl Lab {
    fn new(tag: &str) -> Lab {
        let bin = crate::support::tool::required("BATON_GEMINI_BIN", ".ci/setup-gemini.sh");
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        Lab {
            sb: Sandbox::new(tag),
            fake: FakeGemini::start(),
            bin,
            _serial: serial,
        }
    }

    /// Baton's defaults (`auto_edit`, `gemini-api-key`) with a fixed model (no router call).
    fn config(&self) -> GeminiConfig {
        GeminiConfig {
            cli: CliSection {
                model: Some("gemini-2.5-flash".into()),
                turn_timeout_ms: 90_000,
                stall_timeout_ms: 60_000,
                ..CliSection::new(format!("'{}'", self.bin.display()))
            },
            approval_mode: "auto_edit".into(),
            auth_type: "gemini-api-key".into(),
        }
    }

    /// A session of `cfg` (resuming `session` if given) in the offline environment.
    fn start(&self, cfg: GeminiConfig, session: Option<&str>) -> Box<dyn AgentSession> {
        let mut r = GeminiRunner::new(cfg)
            .with_env("HOME", &self.sb.home)
            .with_env("GEMINI_API_KEY", "dummy")
            .with_env("GOOGLE_GEMINI_BASE_URL", &self.fake.base_url)
            .with_env("TERM", "dumb");
        for k in [
            "GOOGLE_API_KEY",
            "GOOGLE_GENAI_USE_VERTEXAI",
            "GOOGLE_GENAI_USE_GCA",
        ] {
            r = r.without_env(k);
        }
        r.start_session(&self.sb.ctx(session)).unwrap()
    }

    fn session(&self) -> Box<dyn AgentSession> {
        self.start(self.config(), None)
    }
}

/// The usage delta of a completed turn.
fn usage(t: &Turn) -> TokenUsage {
    t.completed()
        .usage_delta
        .expect("the terminal event carries usage")
}

/// The fake's usage of one call as Baton normalizes it: (uncached input, cached, output with
/// thoughts).
fn call_usage(p: u64, t: u64) -> (u64, u64, u64) {
    let (prompt, cached, out, thoughts) = usage_for(p, t);
    (prompt - cached, cached, out + thoughts)
}

fn triple(u: TokenUsage) -> (u64, u64, u64) {
    (u.input_tokens, u.cache_read_input_tokens, u.output_tokens)
}

#[test]
#[ignore = "needs the real gemini CLI (BATON_GEMINI_BIN, .ci/setup-gemini.sh)"]
fn gemini_real_cli_turn_runs_a_command() {
    let lab = Lab::new("gemini-cmd");
    let mut cfg = lab.config();
    cfg.approval_mode = "yolo".into();
    let mut session = lab.start(cfg, None);
    let t = run(
        session.as_mut(),
        "SCENARIO:shell put a file in the workspace",
    );
    t.ok();
    let written = std::fs::read_to_string(lab.sb.ws.join("gemini-wrote.txt")).unwrap();
    assert_eq!(written.trim(), "baton-was-here");
    let sid = session.agent_session_id().unwrap();
    let started = t.only(AgentEventKind::SessionStarted);
    assert_eq!(
        started.session_id.as_deref(),
        Some(format!("{sid}-1").as_str())
    );
    assert_eq!(
        summaries(&t.events, AgentEventKind::ToolUse),
        ["run_shell_command: echo baton-was-here > gemini-wrote.txt && cat gemini-wrote.txt"]
    );
    assert!(t.assistant_text().starts_with("Done. The tool said:"));
    let (a, b) = (call_usage(1, 0), call_usage(1, 1));
    assert_eq!(triple(usage(&t)), (a.0 + b.0, a.1 + b.1, a.2 + b.2));
    let reqs = lab.fake.requests();
    assert_eq!(reqs.len(), 2, "no router call with a fixed model");
    assert!(reqs
        .iter()
        .all(|r| r.has_key && r.model == "gemini-2.5-flash"));

    // The default `auto_edit` does not offer the shell: the call is a denial, nothing runs.
    std::fs::remove_file(lab.sb.ws.join("gemini-wrote.txt")).unwrap();
    let t = run(lab.session().as_mut(), "SCENARIO:shell again");
    t.ok();
    let denied = t.only(AgentEventKind::PermissionDenied);
    assert!(
        denied.summary.contains("tool_not_registered"),
        "{}",
        denied.summary
    );
    assert!(!lab.sb.ws.join("gemini-wrote.txt").exists());
}

#[test]
#[ignore = "needs the real gemini CLI (BATON_GEMINI_BIN, .ci/setup-gemini.sh)"]
fn gemini_real_cli_continuation_resumes_session() {
    let lab = Lab::new("gemini-cont");
    let mut session = lab.session();
    let t1 = run(session.as_mut(), "first turn: remember BANANA");
    t1.ok();
    let sid = session.agent_session_id().unwrap();
    let t2 = run(session.as_mut(), "second turn");
    t2.ok();
    assert_eq!(session.agent_session_id().as_deref(), Some(sid.as_str()));
    let started = t2.only(AgentEventKind::SessionStarted);
    assert_eq!(
        started.session_id.as_deref(),
        Some(format!("{sid}-2").as_str())
    );
    assert!(t2.assistant_text().contains("seen 2 user prompt(s)"));
    // Usage is per invocation: turn 2 reports only its own call.
    assert_eq!(triple(usage(&t1)), call_usage(1, 0));
    assert_eq!(triple(usage(&t2)), call_usage(2, 0));
}

#[test]
#[ignore = "needs the real gemini CLI (BATON_GEMINI_BIN, .ci/setup-gemini.sh)"]
fn gemini_restart_resumes_session() {
    let lab = Lab::new("gemini-restart");
    let sid = {
        let mut before = lab.session();
        run(before.as_mut(), "before the restart").ok();
        before.agent_session_id().unwrap()
    };
    // A restarted Baton starts a new session with the recorded id (`resume_session_id`).
    let mut after = lab.start(lab.config(), Some(&sid));
    let t = run(after.as_mut(), "after the restart");
    t.ok();
    assert_eq!(after.agent_session_id().as_deref(), Some(sid.as_str()));
    assert!(t.assistant_text().contains("seen 2 user prompt(s)"));
    assert_eq!(triple(usage(&t)), call_usage(2, 0), "counted once");
    // A session the CLI does not know falls back once to a new one.
    let stale = "0b470000-0000-4000-8000-0000000000ff";
    let mut unknown = lab.start(lab.config(), Some(stale));
    let t = run(unknown.as_mut(), "hello again");
    t.ok();
    let fresh = unknown.agent_session_id().unwrap();
    assert_ne!(fresh, stale);
    assert!(t
        .of_kind(AgentEventKind::Notification)
        .iter()
        .any(|e| e.summary.contains("unknown session") && e.summary.contains(&fresh)));
    assert!(t.assistant_text().contains("seen 1 user prompt(s)"));
}

#[test]
#[ignore = "needs the real gemini CLI (BATON_GEMINI_BIN, .ci/setup-gemini.sh)"]
fn gemini_api_error_fails_the_turn() {
    let lab = Lab::new("gemini-err");
    let mut session = lab.session();
    let t = run(session.as_mut(), "SCENARIO:err400");
    let err = t.err();
    assert_eq!(err.kind, AgentErrorKind::TurnFailed, "{err}");
    assert!(err.message.contains("API_KEY_INVALID"), "{err}");
    // 400 truncated to 8 bits.
    assert!(err.message.contains("exit code 144"), "{err}");
    assert_eq!(t.last_kind(), Some(AgentEventKind::TurnFailed));
    // The retry works: the CLI stored no session for a first turn that failed, so the resume
    // falls back once to a new session.
    let retry = run(session.as_mut(), "try again");
    retry.ok();
    assert!(retry.assistant_text().contains("seen 1 user prompt(s)"));
    assert!(retry
        .of_kind(AgentEventKind::Notification)
        .iter()
        .any(|e| e.summary.contains("unknown session")));
}

#[test]
#[ignore = "needs the real gemini CLI (BATON_GEMINI_BIN, .ci/setup-gemini.sh)"]
fn gemini_stall_leaves_no_process() {
    let lab = Lab::new("gemini-stall");
    let mut session = lab.session();
    let cancel = CancelToken::new();
    let c = cancel.clone();
    // The engine's stall timer cancels through the token; cancel once the model streams.
    let t = run_with(session.as_mut(), "SCENARIO:slow", &cancel, |e| {
        if e.summary == "assistant delta" {
            c.cancel();
        }
    });
    assert_eq!(t.err().kind, AgentErrorKind::TurnCancelled, "{}", t.debug());
    assert!(
        procs::wait_group_gone(t.pid() as i32, Duration::from_secs(10)),
        "the CLI's group is gone"
    );
}

/// Turn start latency of the gemini adapter: median of 20 first turns, from `run_turn` to the
/// first event, to `session_started` and to the turn's end. Run with
/// `scripts/bench/agent_latency.sh`; the figures are printed, never asserted.
#[test]
#[ignore = "benchmark: run scripts/bench/agent_latency.sh"]
fn bench_gemini_turn_start_latency() {
    let lab = Lab::new("gemini-bench");
    let [first, started, turn] = crate::support::agent::turn_start_latency(20, || lab.session());
    println!("gemini: median of 20 turns: first event {first:.0} ms, session_started {started:.0} ms, turn {turn:.0} ms");
}

#[test]
#[ignore = "needs bwrap and the real gemini CLI (BATON_BWRAP, BATON_GEMINI_BIN)"]
fn gemini_real_cli_runs_in_the_sandbox() {
    crate::support::tool::required("BATON_BWRAP", ".ci/setup-sandbox.sh");
    let lab = Lab::new("gemini-sb");
    // Under the sandbox the CLI's home is per issue; the service user's settings are read there.
    let settings = r#"{"security":{"auth":{"selectedType":"gemini-api-key"}}}"#;
    std::fs::create_dir_all(lab.sb.home.join(".gemini")).unwrap();
    std::fs::write(lab.sb.home.join(".gemini/settings.json"), settings).unwrap();
    let mut cfg = lab.config();
    cfg.approval_mode = "yolo".into();
    cfg.auth_type = String::new();
    // The default command, with `gemini` on PATH as a link in the (hidden) HOME.
    lab.sb.put_on_path("gemini", &lab.bin);
    cfg.cli.command = "gemini".into();
    let sandbox = baton::host::sandbox::Sandbox::new(
        baton::host::sandbox::SandboxConfig {
            bubblewrap: true,
            ..Default::default()
        },
        baton::workflow::config::AgentKind::Gemini.cli_home(),
        &cfg.cli.command,
    );
    let mut session = GeminiRunner::new(cfg)
        .with_sandbox(Some(std::sync::Arc::new(sandbox)))
        .with_env("HOME", &lab.sb.home)
        .with_env("GEMINI_API_KEY", "dummy")
        .with_env("GOOGLE_GEMINI_BASE_URL", &lab.fake.base_url)
        .with_env("TERM", "dumb")
        .start_session(&lab.sb.ctx(None))
        .unwrap();
    let t = run(
        session.as_mut(),
        "SCENARIO:shell put a file in the workspace",
    );
    t.ok();
    let written = std::fs::read_to_string(lab.sb.ws.join("gemini-wrote.txt")).unwrap();
    assert_eq!(written.trim(), "baton-was-here");
    assert!(lab.sb.root.join(".agent-ws/gemini/.gemini").is_dir());
}
