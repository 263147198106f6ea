//! The Copilot JSONL parser over every captured real transcript of `@github/copilot@1.0.102`
//! (`fixtures/copilot/`, copied from the shared transcript set): event mapping, turn outcome,
//! session id, and usage-file deltas.

use std::fs;
use std::path::{Path, PathBuf};

use baton::agent::copilot::{read_usage_file, StreamParser};
use baton::agent::{AgentErrorKind, AgentEvent, AgentEventKind, ProcessEnd, TurnParser};

use crate::support::agent::{assistant_text, of_kind, only, summaries};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/copilot")
        .join(name)
}

struct Run {
    parser: StreamParser,
    events: Vec<AgentEvent>,
    end: ProcessEnd,
    lines: usize,
}

fn run(name: &str) -> Run {
    let dir = fixture(name);
    let stdout = fs::read_to_string(dir.join("stdout.txt")).unwrap();
    let stderr = fs::read_to_string(dir.join("stderr.txt")).unwrap_or_default();
    let code: i32 = fs::read_to_string(dir.join("exit_code.txt"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut parser = StreamParser::new(SESSION.into(), 1);
    let events: Vec<AgentEvent> = stdout.lines().flat_map(|l| parser.parse_line(l)).collect();
    let end = ProcessEnd {
        stderr_tail: stderr,
        ..exited(code)
    };
    Run {
        lines: stdout.lines().count(),
        parser,
        events,
        end,
    }
}

fn kinds(r: &Run, k: AgentEventKind) -> Vec<&AgentEvent> {
    of_kind(&r.events, k)
}

/// The last non-empty assistant message, from its `assistant: …` notification.
fn last_assistant_text(r: &Run) -> Option<&str> {
    assistant_text(&r.events)
}

/// A process that exited with `code`.
fn exited(code: i32) -> ProcessEnd {
    ProcessEnd {
        exit_code: Some(code),
        ..Default::default()
    }
}

/// The error kind `p` reports for a process that ended as `end` (`None`: the turn completed).
fn outcome(p: &StreamParser, end: &ProcessEnd) -> Option<AgentErrorKind> {
    p.outcome(end).err().map(|e| e.kind)
}

fn failure_kind(r: &Run) -> Option<AgentErrorKind> {
    outcome(&r.parser, &r.end)
}

/// The session id the runs below are parsed under (turn 1).
const SESSION: &str = "0b470000-0000-4000-8000-0000000000a1";

const ALL: &[&str] = &[
    "01-simple-text",
    "02-simple-json",
    "03-shell-allowed-text",
    "04-shell-allowed-json",
    "05-shell-denied-rule-text",
    "06-shell-denied-rule-json",
    "07-shell-no-approval-json",
    "08-resume-turn1-json",
    "09-resume-turn2-json",
    "10-resume-turn3-text",
    "11-model-400-json",
    "12-model-400-text",
    "13-resume-unknown",
    "14-silent-shell",
    "15-acp-allow",
    "16-acp-reject",
    "17-otel-file-exporter",
    "18-sigterm-json",
];

const JSON_RUNS: &[&str] = &[
    "02-simple-json",
    "04-shell-allowed-json",
    "06-shell-denied-rule-json",
    "07-shell-no-approval-json",
    "08-resume-turn1-json",
    "09-resume-turn2-json",
    "11-model-400-json",
    "17-otel-file-exporter",
    "18-sigterm-json",
];

#[test]
fn every_line_of_every_transcript_gives_exactly_one_bounded_event() {
    for name in ALL {
        let r = run(name);
        assert_eq!(r.events.len(), r.lines, "{name}");
        for e in &r.events {
            assert!(!e.summary.contains('\n'), "{name}: {:?}", e.summary);
            assert!(e.summary.chars().count() <= 241, "{name}");
        }
    }
}

#[test]
fn json_transcripts_have_no_malformed_lines_and_a_uuid_session() {
    for name in JSON_RUNS {
        let r = run(name);
        assert!(kinds(&r, AgentEventKind::Malformed).is_empty(), "{name}");
        assert!(r.parser.result_seen(), "{name}");
        let mut p = StreamParser::new(SESSION.into(), 1);
        let started = p.started(None);
        assert_eq!(started[0].kind, AgentEventKind::SessionStarted);
        assert!(started
            .iter()
            .chain(&r.events)
            .all(|e| e.session_id == Some(format!("{SESSION}-1"))
                && e.agent_session_id.as_deref() == Some(SESSION)));
    }
}

#[test]
fn non_json_output_is_malformed_and_never_success() {
    // Text mode, --silent, and ACP probe logs are not the JSONL protocol: every line is malformed
    // and, without a result line, the turn fails even with exit code 0.
    for name in [
        "01-simple-text",
        "03-shell-allowed-text",
        "05-shell-denied-rule-text",
        "10-resume-turn3-text",
        "14-silent-shell",
        "15-acp-allow",
        "16-acp-reject",
    ] {
        let r = run(name);
        assert!(r.lines > 0, "{name}");
        assert_eq!(
            kinds(&r, AgentEventKind::Malformed).len(),
            r.lines,
            "{name}"
        );
        assert_eq!(failure_kind(&r), Some(AgentErrorKind::ParseError), "{name}");
    }
}

#[test]
fn simple_json_completes_with_final_text() {
    let r = run("02-simple-json");
    assert_eq!(failure_kind(&r), None);
    assert!(last_assistant_text(&r)
        .unwrap()
        .starts_with("Hi! I am the fake backend. I have seen 1 user message"));
    assert!(kinds(&r, AgentEventKind::ToolUse).is_empty());
    assert!(!kinds(&r, AgentEventKind::Notification).is_empty());
}

#[test]
fn allowed_shell_tool_is_tool_use_start_and_completion() {
    for name in ["04-shell-allowed-json", "17-otel-file-exporter"] {
        let r = run(name);
        assert_eq!(failure_kind(&r), None, "{name}");
        assert_eq!(
            summaries(&r.events, AgentEventKind::ToolUse),
            [
                "tool bash started: echo hello-from-tool",
                "tool bash completed"
            ],
            "{name}"
        );
        assert!(kinds(&r, AgentEventKind::PermissionDenied).is_empty());
        assert!(last_assistant_text(&r).unwrap().contains("hello-from-tool"));
    }
}

#[test]
fn denied_tools_are_permission_denied_and_the_turn_still_completes() {
    let r = run("06-shell-denied-rule-json");
    let denied = only(&r.events, AgentEventKind::PermissionDenied);
    assert!(denied.summary.starts_with("tool bash denied: "));
    assert!(denied.summary.contains("`shell(rm)`"));
    assert_eq!(failure_kind(&r), None);

    let r = run("07-shell-no-approval-json");
    let denied = only(&r.events, AgentEventKind::PermissionDenied);
    assert!(denied
        .summary
        .contains("no interactive user response was available"));
    assert_eq!(failure_kind(&r), None);
}

#[test]
fn resumed_turns_echo_the_baton_chosen_session_id() {
    for name in ["08-resume-turn1-json", "09-resume-turn2-json"] {
        let r = run(name);
        // The CLI's result line names the session Baton chose.
        let stdout = fs::read_to_string(fixture(name).join("stdout.txt")).unwrap();
        let result: serde_json::Value =
            serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
        assert_eq!(result["sessionId"], "0b470000-0000-4000-8000-0000000000a1");
        assert_eq!(failure_kind(&r), None);
    }
    assert!(last_assistant_text(&run("09-resume-turn2-json"))
        .unwrap()
        .contains("seen 2 user message(s)"));
}

#[test]
fn model_error_is_turn_failed() {
    let r = run("11-model-400-json");
    let failed = only(&r.events, AgentEventKind::TurnFailed);
    assert!(failed
        .summary
        .contains("400 fake backend scripted bad request"));
    let e = r
        .parser
        .outcome(&r.end)
        .expect_err("a model error must not complete");
    assert_eq!(e.kind, AgentErrorKind::TurnFailed);
    assert!(e.message.contains("400"), "{}", e.message);
}

#[test]
fn text_mode_model_error_without_output_is_process_exit() {
    let r = run("12-model-400-text");
    assert_eq!(r.lines, 0);
    let e = r.parser.outcome(&r.end).unwrap_err();
    assert_eq!(e.kind, AgentErrorKind::ProcessExit);
    assert!(e.message.contains("400 fake backend scripted bad request"));
    assert!(!r.parser.unknown_resume(&r.end));
}

#[test]
fn unknown_resume_is_detected_for_the_fallback() {
    let r = run("13-resume-unknown");
    assert_eq!(r.lines, 0);
    assert!(r.parser.unknown_resume(&r.end));
    assert_eq!(failure_kind(&r), Some(AgentErrorKind::ProcessExit));
    // The same stderr with a cancel, or with stdout lines, is not an unknown resume.
    let mut end = r.end.clone();
    end.cancelled = true;
    assert!(!r.parser.unknown_resume(&end));
    assert!(!run("02-simple-json").parser.unknown_resume(&r.end));
}

#[test]
fn sigterm_abort_is_cancelled_even_though_result_says_exit_0() {
    let r = run("18-sigterm-json");
    assert!(r
        .events
        .iter()
        .any(|e| e.summary == "agent aborted: user_initiated"));
    assert_eq!(
        failure_kind(&r),
        Some(AgentErrorKind::TurnCancelled),
        "an aborted turn must not complete"
    );
    // With the result line but exit code 143 and no abort (hypothetically) it is still a failure.
    let mut p = StreamParser::new(SESSION.into(), 1);
    p.parse_line(
        r#"{"type":"result","sessionId":"0b470000-0000-4000-8000-0000000000a1","exitCode":0}"#,
    );
    assert_eq!(outcome(&p, &exited(143)), Some(AgentErrorKind::ProcessExit));
}

#[test]
fn truncated_stream_without_result_is_never_success() {
    let stdout = fs::read_to_string(fixture("02-simple-json/stdout.txt")).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    let mut p = StreamParser::new(SESSION.into(), 1);
    for l in &lines[..lines.len() - 1] {
        p.parse_line(l);
    }
    assert_eq!(outcome(&p, &exited(0)), Some(AgentErrorKind::ParseError));
    let killed = ProcessEnd {
        signal: Some(9),
        ..Default::default()
    };
    assert_eq!(outcome(&p, &killed), Some(AgentErrorKind::ProcessExit));
    // The full stream completes.
    p.parse_line(lines[lines.len() - 1]);
    assert_eq!(p.outcome(&exited(0)), Ok(()));
    // ...but not if Baton cancelled or timed out meanwhile.
    let cancelled = ProcessEnd {
        cancelled: true,
        ..exited(0)
    };
    assert_eq!(outcome(&p, &cancelled), Some(AgentErrorKind::TurnCancelled));
}

#[test]
fn blocked_result_fails() {
    let mut p = StreamParser::new(SESSION.into(), 1);
    p.parse_line(r#"{"type":"result","exitCode":1,"outcome":"blocked","blocker":{}}"#);
    assert_eq!(outcome(&p, &exited(1)), Some(AgentErrorKind::TurnFailed));
}

#[test]
fn command_not_found_is_agent_not_found() {
    let p = StreamParser::new(SESSION.into(), 1);
    let end = ProcessEnd {
        stderr_tail: "bash: line 1: copilot: command not found".into(),
        ..exited(127)
    };
    assert_eq!(outcome(&p, &end), Some(AgentErrorKind::AgentNotFound));
}

#[test]
fn usage_files_are_cumulative_and_become_deltas() {
    let usage = |case: &str| read_usage_file(&fixture(case).join("usage.json"));
    let io = |case: &str| usage(case).map(|t| (t.input_tokens, t.output_tokens));
    // The file of a resumed session counts every turn so far (the session reports the difference).
    assert_eq!(io("08-resume-turn1-json"), Ok((1234, 56)));
    assert_eq!(io("09-resume-turn2-json"), Ok((2468, 112)));
    // A turn without a usage file has no figures (zero and flagged, not invented).
    assert!(usage("13-resume-unknown").is_err());
    // The tool run (two model calls) reports both calls.
    assert_eq!(io("04-shell-allowed-json"), Ok((2468, 112)));
}
