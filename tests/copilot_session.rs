//! The Copilot session logic (launch flags, session ids, resume fallback, usage deltas, timeouts)
//! against `tests/it/support/fake-copilot.sh`, which replays the captured real transcripts. Runs
//! everywhere (needs only bash); the real CLI is covered by `tests/copilot_real_cli.rs`.
//!
//! A test binary of its own (not in `tests/it/`) because it sets a process environment variable (COPILOT_ALLOW_ALL).

#[path = "it/support/procs.rs"]
mod procs;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use baton::agent::copilot::CopilotRunner;
use baton::agent::{
    AgentError, AgentErrorKind, AgentEvent, AgentEventKind, AgentRunner, AgentSession, CancelToken,
    SessionContext,
};
use baton::workflow::config::CopilotConfig;

struct Sandbox {
    dir: PathBuf,
    root: PathBuf,
    workspace: PathBuf,
    log: PathBuf,
}

impl Sandbox {
    fn new(tag: &str) -> Sandbox {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "baton-copilot-st-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let root = dir.join("root");
        let workspace = root.join("GH-7");
        std::fs::create_dir_all(&workspace).unwrap();
        Sandbox {
            log: dir.join("invocations.log"),
            dir,
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

    /// Each invocation's argument list.
    fn invocations(&self) -> Vec<Vec<String>> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut out = vec![Vec::new()];
        for line in text.lines() {
            if line == "---" {
                out.push(Vec::new());
            } else {
                out.last_mut().unwrap().push(line.to_string());
            }
        }
        out.pop();
        out
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn config(command: String) -> CopilotConfig {
    CopilotConfig {
        command,
        model: Some("gpt-4.1".into()),
        allow_all_tools: false,
        allow_tools: vec!["shell(gh:*)".into(), "write".into()],
        deny_tools: vec!["shell(rm)".into()],
        extra_args: vec!["--no-ask-user".into()],
        turn_timeout_ms: 20_000,
        stall_timeout_ms: 10_000,
    }
}

fn runner(sb: &Sandbox, scenario: &str, cfg: Option<CopilotConfig>) -> CopilotRunner {
    let script = manifest().join("tests/it/support/fake-copilot.sh");
    let cfg = cfg.unwrap_or_else(|| config(format!("'{}'", script.display())));
    // A temporary HOME: `bash -lc` must not read the real HOME's profile.
    CopilotRunner::new(cfg)
        .with_env("HOME", &sb.dir)
        .with_env("FAKE_COPILOT_FIXTURES", manifest().join("fixtures/copilot"))
        .with_env("FAKE_COPILOT_LOG", &sb.log)
        .with_env("FAKE_COPILOT_SCENARIO", scenario)
        .with_kill_grace(Duration::from_millis(500))
}

fn run(s: &mut dyn AgentSession, prompt: &str) -> (Result<(), AgentError>, Vec<AgentEvent>) {
    let mut events = Vec::new();
    let r = s.run_turn(prompt, &CancelToken::new(), &mut |e| events.push(e));
    (r, events)
}

/// The `turn_completed` event that ended a successful turn (it carries the turn's usage delta).
fn completed(events: &[AgentEvent]) -> &AgentEvent {
    let last = events.last().expect("a terminal event");
    assert_eq!(last.kind, AgentEventKind::TurnCompleted, "{events:#?}");
    last
}

/// The last assistant message of a turn, from its `assistant: …` notification.
fn last_assistant_text(events: &[AgentEvent]) -> Option<&str> {
    events
        .iter()
        .rev()
        .filter(|e| e.kind == AgentEventKind::Notification)
        .find_map(|e| e.summary.strip_prefix("assistant: "))
}

#[test]
fn two_turns_use_session_id_then_resume_and_report_usage_deltas() {
    let sb = Sandbox::new("replay");
    let mut s = runner(&sb, "replay", None)
        .start_session(&sb.ctx(None))
        .unwrap();
    let prompt = "Fix issue #7: it's \"broken\" $(rm -rf ~) `id`";
    let (r1, ev1) = run(s.as_mut(), prompt);
    r1.unwrap();
    let sid = s.agent_session_id().unwrap();
    let (r2, ev2) = run(s.as_mut(), "Continue.");
    r2.unwrap();

    let inv = sb.invocations();
    assert_eq!(inv.len(), 2);
    let usage_file = &inv[0][7];
    assert_eq!(
        inv[0],
        [
            format!("--prompt={prompt}"),
            "--output-format".into(),
            "json".into(),
            "--no-auto-update".into(),
            "--no-color".into(),
            format!("--session-id={sid}"),
            "--usage-output-file".into(),
            usage_file.clone(),
            "--allow-tool=shell(gh:*)".into(),
            "--allow-tool=write".into(),
            "--deny-tool=shell(rm)".into(),
            "--model=gpt-4.1".into(),
            "--no-ask-user".into(),
        ]
    );
    assert!(usage_file.contains("baton-copilot-"), "{usage_file}");
    assert!(inv[1].contains(&format!("--resume={sid}")));
    assert!(!inv[1].iter().any(|a| a.starts_with("--session-id")));

    // session_started per process with <uuid>-<turn>; the pid is on every event of the turn.
    let st1: Vec<_> = ev1
        .iter()
        .filter(|e| e.kind == AgentEventKind::SessionStarted)
        .collect();
    assert_eq!(st1.len(), 1);
    assert_eq!(
        st1[0].session_id.as_deref(),
        Some(format!("{sid}-1").as_str())
    );
    assert!(ev1
        .iter()
        .all(|e| e.session_id.as_deref() == Some(&format!("{sid}-1"))));
    assert!(ev2
        .iter()
        .all(|e| e.session_id.as_deref() == Some(&format!("{sid}-2"))));
    assert_eq!(ev1.last().unwrap().kind, AgentEventKind::TurnCompleted);

    // The usage file is cumulative (1234, then 2468): each turn reports its own 1234.
    let u1 = completed(&ev1).usage_delta.unwrap();
    let u2 = completed(&ev2).usage_delta.unwrap();
    assert_eq!((u1.input_tokens, u1.output_tokens), (1234, 56));
    assert_eq!((u2.input_tokens, u2.output_tokens), (1234, 56));
    assert!(last_assistant_text(&ev2)
        .unwrap()
        .contains("seen 2 user message(s)"));

    // The Baton-owned temp dir goes away with the session.
    let tmp = Path::new(usage_file).parent().unwrap().to_path_buf();
    assert!(tmp.exists());
    s.stop();
    assert!(!tmp.exists());
}

#[test]
fn unknown_resume_falls_back_once_and_logs_it() {
    let sb = Sandbox::new("unknown");
    let stale = "0b470000-0000-4000-8000-0000000000ff";
    let mut s = runner(&sb, "unknown_resume", None)
        .start_session(&sb.ctx(Some(stale)))
        .unwrap();
    let (r, ev) = run(s.as_mut(), "go");
    r.unwrap();
    let new_id = s.agent_session_id().unwrap();
    assert_ne!(new_id, stale);
    let inv = sb.invocations();
    assert_eq!(inv.len(), 2);
    assert!(inv[0].contains(&format!("--resume={stale}")));
    assert!(inv[1].contains(&format!("--session-id={new_id}")));
    assert!(ev.iter().any(|e| e.summary.contains("unknown session")));
    // The new session's usage is counted from zero again.
    assert_eq!(completed(&ev).usage_delta.unwrap().input_tokens, 1234);
    // Next turn resumes the new session.
    let _ = run(s.as_mut(), "again");
    assert!(sb.invocations()[2].contains(&format!("--resume={new_id}")));
}

#[test]
fn missing_usage_file_is_zero_and_flagged_unavailable() {
    let sb = Sandbox::new("nousage");
    let mut s = runner(&sb, "no_usage", None)
        .start_session(&sb.ctx(None))
        .unwrap();
    let (r, ev) = run(s.as_mut(), "go");
    r.unwrap();
    let last = completed(&ev);
    assert_eq!(last.usage_delta, Some(Default::default()));
    assert!(
        last.summary.contains("tokens unavailable"),
        "{}",
        last.summary
    );
}

#[test]
fn not_a_uuid_persisted_id_starts_a_new_session() {
    let sb = Sandbox::new("baduuid");
    let mut s = runner(&sb, "replay", None)
        .start_session(&sb.ctx(Some("--allow-all-tools")))
        .unwrap();
    let (r, _) = run(s.as_mut(), "go");
    r.unwrap();
    let inv = sb.invocations();
    assert!(inv[0].iter().any(|a| a.starts_with("--session-id=")));
    assert!(!inv[0].iter().any(|a| a == "--allow-all-tools"));
}

#[test]
fn turn_timeout_kills_the_group_and_fails() {
    let sb = Sandbox::new("hang");
    let mut cfg = config(format!(
        "'{}'",
        manifest()
            .join("tests/it/support/fake-copilot.sh")
            .display()
    ));
    cfg.turn_timeout_ms = 700;
    let mut s = runner(&sb, "hang", Some(cfg))
        .start_session(&sb.ctx(None))
        .unwrap();
    let started = Instant::now();
    let (r, ev) = run(s.as_mut(), "go");
    let err = r.unwrap_err();
    assert_eq!(err.kind, AgentErrorKind::TurnTimeout, "{err}");
    // Bounded: far below the fake's 60 s sleep (not a timing figure, a hang detector).
    assert!(started.elapsed() < Duration::from_secs(15));
    let pid = ev[0].agent_pid.unwrap();
    assert!(group_is_gone(pid));
    assert_eq!(ev.last().unwrap().kind, AgentEventKind::TurnFailed);
}

#[test]
fn cancel_before_output_stops_promptly() {
    let sb = Sandbox::new("cancel");
    let mut s = runner(&sb, "hang", None)
        .start_session(&sb.ctx(None))
        .unwrap();
    let cancel = CancelToken::new();
    let c = cancel.clone();
    let mut pid = None;
    let r = s.run_turn("go", &cancel, &mut |e| {
        if e.kind == AgentEventKind::SessionStarted {
            pid = e.agent_pid;
        }
        if e.kind == AgentEventKind::OtherMessage {
            c.cancel();
        }
    });
    assert_eq!(r.unwrap_err().kind, AgentErrorKind::TurnCancelled);
    assert!(group_is_gone(pid.unwrap()));
}

#[test]
fn missing_result_line_is_a_failure_even_with_exit_0() {
    let sb = Sandbox::new("noresult");
    let mut s = runner(&sb, "no_result", None)
        .start_session(&sb.ctx(None))
        .unwrap();
    let (r, _) = run(s.as_mut(), "go");
    assert_eq!(r.unwrap_err().kind, AgentErrorKind::ParseError);
}

#[test]
fn missing_command_is_agent_not_found() {
    let sb = Sandbox::new("notfound");
    let cfg = config("/nonexistent/baton-test/copilot".into());
    let mut s = runner(&sb, "replay", Some(cfg))
        .start_session(&sb.ctx(None))
        .unwrap();
    let (r, _) = run(s.as_mut(), "go");
    assert_eq!(r.unwrap_err().kind, AgentErrorKind::AgentNotFound);
}

#[test]
fn workspace_outside_root_is_rejected_before_launch() {
    let sb = Sandbox::new("outside");
    let mut ctx = sb.ctx(None);
    ctx.workspace = sb.dir.clone();
    let err = runner(&sb, "replay", None)
        .start_session(&ctx)
        .err()
        .unwrap();
    assert_eq!(err.kind, AgentErrorKind::InvalidWorkspaceCwd);
    assert!(sb.invocations().is_empty());
}

#[test]
fn allow_all_env_is_removed_unless_configured() {
    let sb = Sandbox::new("env");
    // An inherited COPILOT_ALLOW_ALL would silently approve every tool; only the explicit config
    // choice may do that.
    let mut s = runner(&sb, "env", None)
        .with_env("COPILOT_ALLOW_ALL_PROBE", "x")
        .start_session(&sb.ctx(None))
        .unwrap();
    std::env::set_var("COPILOT_ALLOW_ALL", "true");
    let (r, _) = run(s.as_mut(), "go");
    std::env::remove_var("COPILOT_ALLOW_ALL");
    r.unwrap();
    let log = std::fs::read_to_string(&sb.log).unwrap();
    assert!(log.contains("COPILOT_ALLOW_ALL=unset"), "{log}");
}

fn group_is_gone(pgid: u32) -> bool {
    procs::wait_group_gone(pgid as i32, std::time::Duration::from_secs(10))
}
