//! The Claude adapter against a fake `claude` (tests/it/support/fake_claude.py): replays captured
//! transcripts, floods, hangs, garbage and huge lines, ignored SIGTERM, a grandchild holding stdout,
//! and a prompt full of shell metacharacters. Every turn ends within its deadline and leaves no
//! process behind.

use std::time::Duration;

use baton::agent::claude::ClaudeRunner;
use baton::agent::{AgentErrorKind, AgentEventKind, AgentRunner, AgentSession, CancelToken};
use baton::workflow::config::ClaudeCodeConfig;

use crate::support::agent::{
    claude_config, fake_claude_command, run, run_with, Knobs, Sandbox, Turn, ISSUE,
};
use crate::support::procs;

#[path = "conformance/claude.rs"]
mod conformance;

/// The fake with every flag set (the argv test checks each one).
fn cfg(turn_timeout_ms: u64) -> ClaudeCodeConfig {
    let mut c = ClaudeCodeConfig {
        allowed_tools: vec!["Bash(git status:*)".into(), "Edit".into()],
        disallowed_tools: vec!["WebFetch".into()],
        append_system_prompt: Some("be brief".into()),
        ..claude_config(fake_claude_command(), turn_timeout_ms)
    };
    c.cli.model = Some("claude-sonnet-4-5".into());
    c.cli.extra_args = vec!["--max-turns".into(), "30".into()];
    c
}

/// The fake in `mode` (`FAKE_CLAUDE_MODE`) with the further variables `vars`, the sandbox HOME
/// and a short kill grace.
fn runner(sb: &Sandbox, turn_timeout_ms: u64, mode: &str, vars: &[(&str, String)]) -> ClaudeRunner {
    let r = ClaudeRunner::new(cfg(turn_timeout_ms))
        .with_env("HOME", &sb.home)
        .with_env("FAKE_CLAUDE_MODE", mode)
        .with_kill_grace(Duration::from_millis(300));
    vars.iter().fold(r, |r, (k, v)| r.with_env(*k, v))
}

/// The fake replaying `fixtures/claude/<name>.jsonl` and recording its invocation (see
/// [`read_args`]), with the further variables `vars`.
fn replay(sb: &Sandbox, turn_timeout_ms: u64, name: &str, vars: &[(&str, String)]) -> ClaudeRunner {
    let fixture = format!(
        "{}/fixtures/claude/{name}.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    let args = sb.file("args.json").display().to_string();
    runner(sb, turn_timeout_ms, "replay", vars)
        .with_env("FAKE_CLAUDE_FIXTURE", fixture)
        .with_env("FAKE_CLAUDE_ARGS_FILE", args)
}

/// A new session of `r` in the sandbox (resuming `resume` if given).
fn start(sb: &Sandbox, r: &ClaudeRunner, resume: Option<&str>) -> Box<dyn AgentSession> {
    r.start_session(&sb.ctx(resume)).unwrap()
}

/// One turn of `prompt` in a new session of `r`.
fn turn(sb: &Sandbox, r: &ClaudeRunner, prompt: &str) -> Turn {
    run(start(sb, r, None).as_mut(), prompt)
}

/// One turn of prompt `x` of the fake in `mode`.
fn fake_turn(sb: &Sandbox, turn_timeout_ms: u64, mode: &str, vars: &[(&str, String)]) -> Turn {
    turn(sb, &runner(sb, turn_timeout_ms, mode, vars), "x")
}

/// One turn of the fake in a grandchild `mode`, and the grandchild's pid.
fn grandchild_turn(sb: &Sandbox, turn_timeout_ms: u64, mode: &str) -> (Turn, i32) {
    let pid_file = sb.file("grandchild.pid");
    let vars = [("FAKE_CLAUDE_PID_FILE", pid_file.display().to_string())];
    let t = fake_turn(sb, turn_timeout_ms, mode, &vars);
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (t, pid)
}

/// What the fake recorded of its last invocation: `argv`, `cwd` and the relevant `env`.
fn read_args(sb: &Sandbox) -> serde_json::Value {
    let s = std::fs::read_to_string(sb.file("args.json")).expect("fake recorded its args");
    serde_json::from_str(&s).unwrap()
}

/// The arguments of the fake's last invocation.
fn argv(sb: &Sandbox) -> Vec<String> {
    serde_json::from_value(read_args(sb)["argv"].clone()).unwrap()
}

/// The value of `--resume=<id>`.
fn resumed_id(argv: &[String]) -> &str {
    argv.iter()
        .find_map(|a| a.strip_prefix("--resume="))
        .expect("--resume=<id>")
}

/// Our own child `pid` has been reaped (waitpid says it is not our child any more).
fn reaped(pid: u32) -> bool {
    let r = unsafe { libc::waitpid(pid as i32, std::ptr::null_mut(), libc::WNOHANG) };
    r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD)
}

/// The turn failed with `kind`, a message containing `says`, and a `last` event.
fn assert_failed(t: &Turn, kind: AgentErrorKind, says: &str, last: AgentEventKind) {
    let e = t.err();
    assert_eq!(e.kind, kind);
    assert!(e.message.contains(says), "{}", e.message);
    assert_eq!(t.last_kind(), Some(last));
}

/// The turn failed with `kind`, ended with a `last` event, within 10 s, and its agent is reaped.
fn assert_stopped(t: &Turn, kind: AgentErrorKind, last: AgentEventKind) {
    assert_eq!(t.err().kind, kind);
    assert_eq!(t.last_kind(), Some(last));
    assert!(t.elapsed < Duration::from_secs(10), "{:?}", t.elapsed);
    assert!(reaped(t.pid()));
}

#[test]
fn replays_a_resume_pair_with_delays() {
    let sb = Sandbox::new("resume");
    let delay = [("FAKE_CLAUDE_DELAY_MS", "20".to_string())];
    let mut s = start(&sb, &replay(&sb, 20_000, "d_resume.first", &delay), None);
    let t1 = run(s.as_mut(), "first prompt");
    t1.result.as_ref().expect("turn 1 ok");
    let id = s.agent_session_id().expect("session id from init");
    assert_eq!(t1.events[0].kind, AgentEventKind::SessionStarted);
    assert_eq!(t1.events[0].session_id, Some(format!("{id}-1")));
    let last = t1.events.last().unwrap();
    assert_eq!(last.kind, AgentEventKind::TurnCompleted);
    assert_eq!(last.session_id, Some(format!("{id}-1")));
    assert_eq!(last.usage_delta.unwrap().input_tokens, 2100);
    assert_eq!(last.session_cost_usd, Some(0.0094));
    // Only the terminal event carries usage.
    assert_eq!(
        t1.events.iter().filter(|e| e.usage_delta.is_some()).count(),
        1
    );
    assert!(reaped(t1.pid()));

    // Turn 1: full flag set, no --resume, prompt after `--`.
    let a = read_args(&sb);
    let argv1: Vec<String> = serde_json::from_value(a["argv"].clone()).unwrap();
    let expected: Vec<&str> = vec![
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--permission-mode",
        "acceptEdits",
        "--model",
        "claude-sonnet-4-5",
        "--allowedTools",
        "Bash(git status:*)",
        "Edit",
        "--disallowedTools",
        "WebFetch",
        "--append-system-prompt",
        "be brief",
        "--max-turns",
        "30",
        "--",
        "first prompt",
    ];
    assert_eq!(argv1, expected);
    assert_eq!(a["cwd"], sb.ws.display().to_string());
    assert_eq!(a["env"]["API_TIMEOUT_MS"], "120000");
    assert_eq!(a["env"]["CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS"], "120000");
    assert_eq!(a["env"]["BATON_ISSUE_IDENTIFIER"], ISSUE);

    // Turn 2 resumes the same session (the fake replays the captured resume run).
    drop(s);
    let mut s = start(&sb, &replay(&sb, 20_000, "d_resume", &[]), Some(&id));
    let t2 = run(s.as_mut(), "continue");
    assert!(t2.result.is_ok(), "{:?}", t2.result);
    let argv2 = argv(&sb);
    assert_eq!(resumed_id(&argv2), id);
    assert_eq!(argv2.last().unwrap(), "continue");
    assert_eq!(s.agent_session_id(), Some(id));
}

#[test]
fn continuation_turns_resume_and_increment_turn_number() {
    let sb = Sandbox::new("cont");
    let mut s = start(&sb, &replay(&sb, 20_000, "a_text", &[]), None);
    let t1 = run(s.as_mut(), "p1");
    assert!(t1.result.is_ok());
    assert!(!argv(&sb).iter().any(|a| a.starts_with("--resume")));
    let t2 = run(s.as_mut(), "p2");
    assert!(t2.result.is_ok());
    let sid = "9b329807-06e5-4f01-8184-11d256192ad9";
    assert!(t2.of_kind(AgentEventKind::SessionStarted).is_empty());
    assert!(t2
        .events
        .iter()
        .all(|e| e.session_id.as_deref() == Some(&*format!("{sid}-2"))));
    assert_eq!(resumed_id(&argv(&sb)), sid);
}

#[test]
fn a_session_id_that_is_not_a_uuid_never_reaches_the_command_line() {
    let sb = Sandbox::new("badsid");
    let flag = "--dangerously-skip-permissions";
    let clean = |argv: &[String]| {
        assert!(
            !argv.iter().any(|a| a.starts_with("--resume") || a == flag),
            "{argv:?}"
        );
    };
    // A stored id shaped like a flag: the run starts a fresh session instead.
    let mut s = start(&sb, &replay(&sb, 20_000, "a_text", &[]), Some(flag));
    assert!(run(s.as_mut(), "p1").result.is_ok());
    clean(&argv(&sb));
    // An agent reporting such an id as its session: the next turn is not resumed with it.
    let fixture = sb.file("hostile.jsonl");
    let lines = [
        format!(r#"{{"type":"system","subtype":"init","session_id":"{flag}","model":"m"}}"#),
        r#"{"type":"result","subtype":"success","is_error":false,"result":"ok","usage":{}}"#.into(),
    ];
    std::fs::write(&fixture, lines.join("\n") + "\n").unwrap();
    let r = runner(&sb, 20_000, "replay", &[])
        .with_env("FAKE_CLAUDE_FIXTURE", &fixture)
        .with_env("FAKE_CLAUDE_ARGS_FILE", sb.file("args.json"));
    let mut s = start(&sb, &r, None);
    let t1 = run(s.as_mut(), "p1");
    assert!(t1.result.is_ok(), "{:?}", t1.result);
    assert_eq!(
        t1.events[0].session_id.as_deref(),
        Some(&*format!("{flag}-1"))
    );
    assert_eq!(s.agent_session_id(), None);
    assert!(run(s.as_mut(), "p2").result.is_ok());
    clean(&argv(&sb));
}

#[test]
fn api_error_transcript_with_exit_1_is_turn_failed() {
    let sb = Sandbox::new("apierr");
    let exit_1 = [("FAKE_CLAUDE_EXIT", "1".to_string())];
    let t = turn(&sb, &replay(&sb, 20_000, "e_api_error_529", &exit_1), "x");
    let (kind, last) = (AgentErrorKind::TurnFailed, AgentEventKind::TurnFailed);
    assert_failed(&t, kind, "api_error_status=529", last);
}

#[test]
fn prompt_with_shell_metacharacters_runs_nothing() {
    let sb = Sandbox::new("inject");
    let prompt = "Fix $(touch pwned1) and `touch pwned2` ; touch pwned3 && touch pwned4\n\
                  'single' \"double\" $HOME ${PATH} \\ | > pwned5 < /dev/null &\n--help -p --resume x";
    let t = turn(&sb, &replay(&sb, 20_000, "a_text", &[]), prompt);
    assert!(t.result.is_ok(), "{:?}", t.result);
    let argv = argv(&sb);
    assert_eq!(argv.last().unwrap(), prompt, "prompt arrives verbatim");
    assert_eq!(argv[argv.len() - 2], "--");
    for dir in [&sb.ws, &sb.root] {
        for n in 1..=5 {
            assert!(!dir.join(format!("pwned{n}")).exists(), "pwned{n} created");
        }
    }
}

#[test]
fn stdin_is_dev_null() {
    let sb = Sandbox::new("stdin");
    let t = fake_turn(&sb, 10_000, "stdin", &[]);
    assert_eq!(t.result_text(), Some("stdin-eof"));
}

#[test]
fn flood_of_output_is_consumed() {
    let sb = Sandbox::new("flood");
    let lines = [("FAKE_CLAUDE_LINES", "50000".to_string())];
    let mut s = start(&sb, &runner(&sb, 60_000, "flood", &lines), None);
    let mut n = 0usize;
    let res = s.run_turn("x", &CancelToken::new(), &mut |e| {
        if e.kind == AgentEventKind::Notification {
            n += 1;
        }
    });
    assert!(res.is_ok(), "{res:?}");
    assert_eq!(n, 50_000);
}

#[test]
fn garbage_lines_are_malformed_and_the_turn_still_completes() {
    let sb = Sandbox::new("garbage");
    let t = fake_turn(&sb, 10_000, "garbage", &[]);
    assert_eq!(t.result_text(), Some("survived garbage"));
    let malformed = t.of_kind(AgentEventKind::Malformed).len();
    assert_eq!(malformed, 4, "{:?}", t.kinds());
}

#[test]
fn huge_line_is_skipped_with_a_malformed_event() {
    let sb = Sandbox::new("huge");
    let bytes = [("FAKE_CLAUDE_HUGE_BYTES", (3 * 1024 * 1024).to_string())];
    let r = runner(&sb, 30_000, "huge", &bytes).with_max_line_bytes(1024 * 1024);
    let t = turn(&sb, &r, "x");
    assert_eq!(t.result_text(), Some("survived huge line"));
    let m = t.of_kind(AgentEventKind::Malformed);
    assert_eq!(m.len(), 1);
    assert!(m[0].summary.contains("3145728 bytes"), "{}", m[0].summary);
}

#[test]
fn default_line_bound_is_10mb() {
    let sb = Sandbox::new("huge10");
    let t = fake_turn(&sb, 60_000, "huge", &[]);
    assert!(t.result.is_ok());
    assert!(t
        .events
        .iter()
        .any(|e| e.kind == AgentEventKind::Malformed && e.summary.contains("12582912 bytes")));
}

#[test]
fn hang_hits_the_turn_timeout_and_the_group_is_killed() {
    let sb = Sandbox::new("hang");
    let t = fake_turn(&sb, 800, "hang", &[]);
    assert_eq!(t.kinds().first(), Some(&AgentEventKind::SessionStarted));
    assert_stopped(&t, AgentErrorKind::TurnTimeout, AgentEventKind::TurnFailed);
}

#[test]
fn closed_stdout_but_running_process_still_hits_the_deadline() {
    let sb = Sandbox::new("closeout");
    let t = fake_turn(&sb, 800, "close_stdout_hang", &[]);
    assert_stopped(&t, AgentErrorKind::TurnTimeout, AgentEventKind::TurnFailed);

    // The same, stopped by a cancel instead of the deadline.
    let mut s = start(&sb, &runner(&sb, 60_000, "close_stdout_hang", &[]), None);
    let cancel = CancelToken::new();
    let c = cancel.clone();
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        c.cancel();
    });
    let t = run_with(s.as_mut(), "x", &cancel, |_| {});
    canceller.join().unwrap();
    assert_stopped(
        &t,
        AgentErrorKind::TurnCancelled,
        AgentEventKind::TurnCancelled,
    );
}

#[test]
fn cancel_stops_a_process_that_ignores_sigterm() {
    let sb = Sandbox::new("ignterm");
    let mut s = start(&sb, &runner(&sb, 60_000, "ignore_term", &[]), None);
    let cancel = CancelToken::new();
    let c = cancel.clone();
    let t = run_with(s.as_mut(), "x", &cancel, |e| {
        if e.kind == AgentEventKind::SessionStarted {
            // Cancel from another thread, as the orchestrator would.
            let c = c.clone();
            std::thread::spawn(move || c.cancel());
        }
    });
    assert_stopped(
        &t,
        AgentErrorKind::TurnCancelled,
        AgentEventKind::TurnCancelled,
    );
    assert!(!procs::pid_alive(t.pid() as i32));
}

#[test]
fn grandchild_holding_stdout_is_killed_and_nothing_lingers() {
    let sb = Sandbox::new("grandchild");
    let (t, gc) = grandchild_turn(&sb, 20_000, "grandchild");
    assert!(t.result.is_ok(), "{:?}", t.result);
    assert!(t.elapsed < Duration::from_secs(10), "{:?}", t.elapsed);
    // Killed with the group; it may linger briefly as an unreaped zombie of init.
    assert!(
        procs::wait_pid_gone(gc, Duration::from_secs(5)),
        "grandchild {gc} still running"
    );
    assert!(reaped(t.pid()));
}

#[test]
fn result_and_exit_complete_the_turn_even_if_a_setsid_descendant_holds_stdout() {
    let sb = Sandbox::new("setsid");
    let (t, gc) = grandchild_turn(&sb, 60_000, "setsid_grandchild");
    // The escaped process is out of any group Baton may signal; the test cleans it up itself.
    unsafe { libc::kill(gc, libc::SIGKILL) };
    assert!(t.result.is_ok(), "{:?}", t.result);
    assert_eq!(t.last_kind(), Some(AgentEventKind::TurnCompleted));
    // Not held until the turn timeout (60 s) by the open pipe.
    assert!(t.elapsed < Duration::from_secs(10), "{:?}", t.elapsed);
    assert!(reaped(t.pid()));
}

#[test]
fn missing_result_line_with_exit_0_is_a_parse_error() {
    let sb = Sandbox::new("noresult");
    let t = fake_turn(&sb, 10_000, "noresult", &[]);
    assert_eq!(t.err().kind, AgentErrorKind::ParseError);
}

#[test]
fn missing_command_is_agent_not_found() {
    let sb = Sandbox::new("missing");
    let mut c = cfg(10_000);
    c.cli.command = "baton-no-such-claude-binary".into();
    let t = turn(&sb, &ClaudeRunner::new(c).with_env("HOME", &sb.home), "x");
    let (kind, last) = (AgentErrorKind::AgentNotFound, AgentEventKind::StartupFailed);
    assert_failed(&t, kind, "not found", last);
}

#[test]
fn workspace_outside_root_is_rejected_before_launch() {
    let sb = Sandbox::new("outside");
    let other = Sandbox::new("other");
    let r = runner(&sb, 1000, "replay", &[]);
    for workspace in [&other.ws, &sb.root] {
        let mut ctx = sb.ctx(None);
        ctx.workspace = workspace.clone();
        let e = r.start_session(&ctx).err().unwrap();
        assert_eq!(e.kind, AgentErrorKind::InvalidWorkspaceCwd, "{workspace:?}");
    }
}

#[test]
fn operator_set_timeouts_are_not_overridden() {
    let sb = Sandbox::new("optimeout");
    let timeout = [("API_TIMEOUT_MS", "4242".to_string())];
    let t = turn(&sb, &replay(&sb, 10_000, "a_text", &timeout), "x");
    assert!(t.result.is_ok());
    let a = read_args(&sb);
    assert_eq!(a["env"]["API_TIMEOUT_MS"], "4242");
    assert_eq!(a["env"]["CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS"], "120000");
}
