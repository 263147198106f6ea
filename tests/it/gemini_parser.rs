//! The Gemini stream-json parser over every captured transcript of `@google/gemini-cli@0.61.0`
//! (`fixtures/gemini/`): events, the turn outcome (success only on a `success` result and exit
//! 0), usage from `result.stats`; and hostile lines → `malformed`, never a panic.

use std::fs;
use std::path::Path;

use baton::agent::gemini::StreamParser;
use baton::agent::{AgentErrorKind, AgentEvent, AgentEventKind, ProcessEnd, TurnParser};

use crate::support::agent::{assistant_text, of_kind, only, summaries};

/// One captured case: the parser after its stdout, the events, how the process ended.
fn run(case: &str) -> (StreamParser, Vec<AgentEvent>, ProcessEnd) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/gemini")
        .join(case);
    let read = |f: &str| fs::read_to_string(dir.join(f)).unwrap();
    let mut p = StreamParser::new("s".into(), 1);
    let events = read("stdout.jsonl")
        .lines()
        .flat_map(|l| p.parse_line(l))
        .collect();
    let end = ProcessEnd {
        exit_code: Some(read("exit_code.txt").trim().parse().unwrap()),
        stderr_tail: read("stderr.txt"),
        ..ProcessEnd::default()
    };
    (p, events, end)
}

fn usage(p: &StreamParser) -> (u64, u64, u64) {
    let u = p.usage().unwrap();
    (u.input_tokens, u.cache_read_input_tokens, u.output_tokens)
}

#[test]
fn a_text_turn_succeeds_with_its_usage() {
    let (p, events, end) = run("01-text-stream-json");
    assert_eq!(p.outcome(&end), Ok(()));
    assert_eq!(
        only(&events, AgentEventKind::SessionStarted)
            .session_id
            .as_deref(),
        Some("s-1")
    );
    assert_eq!(
        assistant_text(&events),
        Some("Hello from the fake Gemini API. I have seen 1 user prompt(s) in this conversation.")
    );
    // input 1010 of which 600 cached; total 1040 counts thoughts as output (25 + 5).
    assert_eq!(usage(&p), (410, 600, 30));
    assert!(of_kind(&events, AgentEventKind::Malformed).is_empty());
}

#[test]
fn tools_and_denials_are_reported() {
    let (p, events, end) = run("06-shell-yolo");
    assert_eq!(p.outcome(&end), Ok(()));
    assert_eq!(
        summaries(&events, AgentEventKind::ToolUse),
        ["run_shell_command: echo hi > f.txt && cat f.txt"]
    );
    assert_eq!(usage(&p), (810, 1300, 56));
    // Default approval mode: the shell is not offered, the call is refused, the turn succeeds.
    let (p, events, end) = run("07-shell-default-approval");
    assert_eq!(p.outcome(&end), Ok(()));
    let denied = only(&events, AgentEventKind::PermissionDenied);
    assert!(denied.summary.starts_with("tool error tool_not_registered"));
}

#[test]
fn resumed_turns_report_only_their_own_usage() {
    let (p, _, end) = run("10-resume-by-id-turn2");
    assert_eq!(p.outcome(&end), Ok(()));
    assert_eq!(usage(&p), (410, 1600, 30));
    let (p, _, end) = run("11-resume-latest-turn3");
    assert_eq!(p.outcome(&end), Ok(()));
    assert_eq!(usage(&p).0 + usage(&p).1, 6110);
}

#[test]
fn errors_and_exit_codes_map_to_outcomes() {
    for (case, kind, text) in [
        (
            "13-api-429-max-attempts-3",
            AgentErrorKind::TurnFailed,
            "exit code 173",
        ),
        (
            "14-api-500-max-attempts-3",
            AgentErrorKind::TurnFailed,
            "exit code 244",
        ),
        (
            "15-api-400-bad-key",
            AgentErrorKind::TurnFailed,
            "API_KEY_INVALID",
        ),
        (
            "19-sigterm-mid-stream",
            AgentErrorKind::ParseError,
            "without a result line",
        ),
        (
            "12-resume-unknown-id",
            AgentErrorKind::StartupFailed,
            "Invalid session identifier",
        ),
        (
            "04-untrusted-folder",
            AgentErrorKind::StartupFailed,
            "exit code 55",
        ),
        (
            "16-api-500-json",
            AgentErrorKind::StartupFailed,
            "exit code 244",
        ),
        (
            "02-text-json",
            AgentErrorKind::ParseError,
            "without a result line",
        ),
    ] {
        let (p, _, end) = run(case);
        let err = p.outcome(&end).unwrap_err();
        assert_eq!(err.kind, kind, "{case}: {err}");
        assert!(err.message.contains(text), "{case}: {err}");
    }
    // A failed call counts only what was spent (the router's 10 + 5 here).
    let (p, _, _) = run("13-api-429-max-attempts-3");
    assert_eq!(usage(&p), (10, 0, 5));
}

#[test]
fn every_case_is_survived() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gemini");
    let mut n = 0;
    for dir in fs::read_dir(root)
        .unwrap()
        .flatten()
        .filter(|d| d.path().is_dir())
    {
        let (p, events, end) = run(&dir.file_name().to_string_lossy());
        let _ = p.outcome(&end);
        assert!(events.iter().all(|e| e.summary.chars().count() <= 201));
        n += 1;
    }
    assert_eq!(n, 19);
}

#[test]
fn hostile_lines_are_malformed() {
    let mut p = StreamParser::new("s".into(), 1);
    for bad in ["nope", "[]", "\"x\"", "{}", r#"{"type":7}"#] {
        assert_eq!(
            p.parse_line(bad)[0].kind,
            AgentEventKind::Malformed,
            "{bad}"
        );
    }
    let huge = r#"{"type":"result","status":"success","stats":{"input_tokens":18446744073709551615,"cached":5,"total_tokens":1,"output_tokens":-3}}"#;
    p.parse_line(huge);
    let u = p.usage().unwrap();
    assert_eq!(u.input_tokens, (1 << 53) - 5);
    assert_eq!(u.output_tokens, 0);
    let again = p.parse_line(r#"{"type":"result","status":"error"}"#);
    assert_eq!(again.last().unwrap().kind, AgentEventKind::Malformed);
    assert_eq!(
        p.outcome(&ProcessEnd {
            exit_code: Some(0),
            ..ProcessEnd::default()
        }),
        Ok(())
    );
    // A long assistant stream stays bounded.
    let mut p = StreamParser::new("s".into(), 1);
    for _ in 0..10_000 {
        p.parse_line(&format!(
            r#"{{"type":"message","role":"assistant","content":"{}","delta":true}}"#,
            "y".repeat(100)
        ));
    }
    let ev = p.parse_line(r#"{"type":"result","status":"success","stats":{}}"#);
    assert!(ev[0].summary.chars().count() <= 201);
}
