//! The Copilot session logic (launch flags, session ids, resume fallback, usage deltas, timeouts)
//! against `tests/it/support/fake-copilot.sh`, which replays the captured real transcripts. Runs
//! everywhere (needs only bash); the real CLI is covered by `tests/it/copilot_real_cli.rs`.
//!
//! A test binary of its own (not in `tests/it/`) because it sets a process environment variable (COPILOT_ALLOW_ALL).

#[path = "it/support/agent.rs"]
mod agent;
#[path = "it/support/procs.rs"]
mod procs;
#[path = "it/support/tempdir.rs"]
mod tempdir;

use std::path::{Path, PathBuf};
use std::time::Duration;

use baton::agent::copilot::CopilotRunner;
use baton::agent::{AgentErrorKind, AgentEventKind, AgentRunner, AgentSession, CancelToken};
use baton::workflow::config::{CliSection, CopilotConfig};

use agent::{run, run_with, Knobs, Sandbox, Turn};

fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The file receiving each invocation's arguments (see [`invocations`]).
fn log(sb: &Sandbox) -> PathBuf {
    sb.file("invocations.log")
}

/// Each invocation's argument list.
fn invocations(sb: &Sandbox) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(log(sb)).unwrap_or_default();
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

/// The fake's config: model, allow/deny lists and an extra flag set, 20 s turn, 10 s stall.
fn config() -> CopilotConfig {
    let script = manifest().join("tests/it/support/fake-copilot.sh");
    CopilotConfig {
        cli: CliSection {
            command: format!("'{}'", script.display()),
            model: Some("gpt-4.1".into()),
            extra_args: vec!["--no-ask-user".into()],
            turn_timeout_ms: 20_000,
            stall_timeout_ms: 10_000,
        },
        allow_all_tools: false,
        allow_tools: vec!["shell(gh:*)".into(), "write".into()],
        deny_tools: vec!["shell(rm)".into()],
    }
}

/// `cfg` replaying `scenario` (`FAKE_COPILOT_SCENARIO`), logging to the sandbox.
fn runner_with(sb: &Sandbox, scenario: &str, cfg: CopilotConfig) -> CopilotRunner {
    CopilotRunner::new(cfg)
        .with_env("HOME", &sb.home)
        .with_env("FAKE_COPILOT_FIXTURES", manifest().join("fixtures/copilot"))
        .with_env("FAKE_COPILOT_LOG", log(sb))
        .with_env("FAKE_COPILOT_SCENARIO", scenario)
        .with_kill_grace(Duration::from_millis(500))
}

/// A session of the fake replaying `scenario` (resuming `resume` if given).
fn session(sb: &Sandbox, scenario: &str, resume: Option<&str>) -> Box<dyn AgentSession> {
    runner_with(sb, scenario, config())
        .start_session(&sb.ctx(resume))
        .unwrap()
}

/// One turn (prompt `go`) in a new session of `cfg` replaying `scenario`.
fn turn_with(sb: &Sandbox, scenario: &str, cfg: CopilotConfig) -> Turn {
    let mut s = runner_with(sb, scenario, cfg)
        .start_session(&sb.ctx(None))
        .unwrap();
    run(s.as_mut(), "go")
}

/// True once no process is left in group `pgid` (bounded wait: killed members may linger as
/// zombies for a moment).
fn group_is_gone(pgid: u32) -> bool {
    procs::wait_group_gone(pgid as i32, Duration::from_secs(10))
}

#[test]
fn two_turns_use_session_id_then_resume_and_report_usage_deltas() {
    let sb = Sandbox::new("replay");
    let mut s = session(&sb, "replay", None);
    let prompt = "Fix issue #7: it's \"broken\" $(rm -rf ~) `id`";
    let t1 = run(s.as_mut(), prompt);
    t1.ok();
    let sid = s.agent_session_id().unwrap();
    let t2 = run(s.as_mut(), "Continue.");
    t2.ok();

    let inv = invocations(&sb);
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
    assert_eq!(
        t1.only(AgentEventKind::SessionStarted)
            .session_id
            .as_deref(),
        Some(format!("{sid}-1").as_str())
    );
    for (t, turn) in [(&t1, 1), (&t2, 2)] {
        let id = format!("{sid}-{turn}");
        assert!(
            t.events
                .iter()
                .all(|e| e.session_id.as_deref() == Some(&id)),
            "turn {turn}"
        );
    }
    assert_eq!(t1.last_kind(), Some(AgentEventKind::TurnCompleted));

    // The usage file is cumulative (1234, then 2468): each turn reports its own 1234.
    for t in [&t1, &t2] {
        let u = t.completed().usage_delta.unwrap();
        assert_eq!((u.input_tokens, u.output_tokens), (1234, 56));
    }
    assert!(t2.assistant_text().contains("seen 2 user message(s)"));

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
    let mut s = session(&sb, "unknown_resume", Some(stale));
    let t = run(s.as_mut(), "go");
    t.ok();
    let new_id = s.agent_session_id().unwrap();
    assert_ne!(new_id, stale);
    let inv = invocations(&sb);
    assert_eq!(inv.len(), 2);
    assert!(inv[0].contains(&format!("--resume={stale}")));
    assert!(inv[1].contains(&format!("--session-id={new_id}")));
    assert!(t
        .events
        .iter()
        .any(|e| e.summary.contains("unknown session")));
    // The new session's usage is counted from zero again.
    assert_eq!(t.completed().usage_delta.unwrap().input_tokens, 1234);
    // Next turn resumes the new session.
    let _ = run(s.as_mut(), "again");
    assert!(invocations(&sb)[2].contains(&format!("--resume={new_id}")));
}

#[test]
fn missing_usage_file_is_zero_and_flagged_unavailable() {
    let sb = Sandbox::new("nousage");
    let t = turn_with(&sb, "no_usage", config());
    let last = t.completed();
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
    run(
        session(&sb, "replay", Some("--allow-all-tools")).as_mut(),
        "go",
    )
    .ok();
    let inv = invocations(&sb);
    assert!(inv[0].iter().any(|a| a.starts_with("--session-id=")));
    assert!(!inv[0].iter().any(|a| a == "--allow-all-tools"));
}

#[test]
fn turn_timeout_kills_the_group_and_fails() {
    let sb = Sandbox::new("hang");
    let mut cfg = config();
    cfg.cli.turn_timeout_ms = 700;
    let t = turn_with(&sb, "hang", cfg);
    let err = t.err();
    assert_eq!(err.kind, AgentErrorKind::TurnTimeout, "{err}");
    // Bounded: far below the fake's 60 s sleep (not a timing figure, a hang detector).
    assert!(t.elapsed < Duration::from_secs(15));
    let pid = t.events[0].agent_pid.unwrap();
    assert!(group_is_gone(pid));
    assert_eq!(t.last_kind(), Some(AgentEventKind::TurnFailed));
}

#[test]
fn cancel_before_output_stops_promptly() {
    let sb = Sandbox::new("cancel");
    let mut s = session(&sb, "hang", None);
    let cancel = CancelToken::new();
    let c = cancel.clone();
    let t = run_with(s.as_mut(), "go", &cancel, |e| {
        if e.kind == AgentEventKind::OtherMessage {
            c.cancel();
        }
    });
    assert_eq!(t.err().kind, AgentErrorKind::TurnCancelled);
    let pid = t.of_kind(AgentEventKind::SessionStarted)[0].agent_pid;
    assert!(group_is_gone(pid.unwrap()));
}

#[test]
fn missing_result_line_is_a_failure_even_with_exit_0() {
    let sb = Sandbox::new("noresult");
    let t = turn_with(&sb, "no_result", config());
    assert_eq!(t.err().kind, AgentErrorKind::ParseError);
}

#[test]
fn missing_command_is_agent_not_found() {
    let sb = Sandbox::new("notfound");
    let mut cfg = config();
    cfg.cli.command = "/nonexistent/baton-test/copilot".into();
    assert_eq!(
        turn_with(&sb, "replay", cfg).err().kind,
        AgentErrorKind::AgentNotFound
    );
}

#[test]
fn workspace_outside_root_is_rejected_before_launch() {
    let sb = Sandbox::new("outside");
    let mut ctx = sb.ctx(None);
    ctx.workspace = sb.dir.clone();
    let err = runner_with(&sb, "replay", config())
        .start_session(&ctx)
        .err()
        .unwrap();
    assert_eq!(err.kind, AgentErrorKind::InvalidWorkspaceCwd);
    assert!(invocations(&sb).is_empty());
}

#[test]
fn allow_all_env_is_removed_unless_configured() {
    let sb = Sandbox::new("env");
    // An inherited COPILOT_ALLOW_ALL would silently approve every tool; only the explicit config
    // choice may do that.
    let mut s = runner_with(&sb, "env", config())
        .with_env("COPILOT_ALLOW_ALL_PROBE", "x")
        .start_session(&sb.ctx(None))
        .unwrap();
    std::env::set_var("COPILOT_ALLOW_ALL", "true");
    let t = run(s.as_mut(), "go");
    std::env::remove_var("COPILOT_ALLOW_ALL");
    t.ok();
    let logged = std::fs::read_to_string(log(&sb)).unwrap();
    assert!(logged.contains("COPILOT_ALLOW_ALL=unset"), "{logged}");
}
