//! Every captured real-CLI transcript (`fixtures/claude/*.jsonl`) through the stream-json parser
//! and the outcome rules: normalized events, session id, usage, cost, outcome.

use baton::agent::claude::{ResultInfo, StreamParser, SUMMARY_MAX_CHARS};
use baton::agent::{
    AgentError, AgentErrorKind, AgentEvent, AgentEventKind, ProcessEnd, TokenUsage, TurnParser,
};
use AgentEventKind::*;

use crate::support::agent::only;

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/fixtures/claude/{name}.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

struct Parsed {
    parser: StreamParser,
    events: Vec<AgentEvent>,
}

impl Parsed {
    fn kinds(&self) -> Vec<AgentEventKind> {
        self.events.iter().map(|e| e.kind).collect()
    }
    fn count(&self, k: AgentEventKind) -> usize {
        self.events.iter().filter(|e| e.kind == k).count()
    }
    /// The first event of kind `k`.
    fn first(&self, k: AgentEventKind) -> &AgentEvent {
        self.events.iter().find(|e| e.kind == k).expect("an event")
    }
    fn result(&self) -> &ResultInfo {
        self.parser.result().expect("result line")
    }
    /// The turn's outcome for a process that ended as `end` (no input was asked for).
    fn outcome(&self, end: &ProcessEnd) -> Result<(), AgentError> {
        self.parser.outcome(end)
    }
}

fn parse_with(name: &str, turn: u32, known: Option<&str>) -> Parsed {
    let mut parser = StreamParser::new(turn, known.map(str::to_string));
    let mut events = Vec::new();
    for line in fixture(name).lines() {
        events.extend(parser.parse_line(line));
    }
    for e in &events {
        assert!(
            e.summary.chars().count() <= SUMMARY_MAX_CHARS + 1,
            "summary too long"
        );
        assert!(!e.summary.contains('\n'), "summary must be one line");
        assert!(
            e.usage_delta.is_none(),
            "only the terminal event carries usage"
        );
    }
    Parsed { parser, events }
}

fn parse(name: &str) -> Parsed {
    parse_with(name, 1, None)
}

/// [`parse`], checking that the turn succeeds when the process exits 0.
fn parse_ok(name: &str) -> Parsed {
    let p = parse(name);
    assert!(p.outcome(&exited(0)).is_ok(), "{name}");
    p
}

fn exited(code: i32) -> ProcessEnd {
    ProcessEnd {
        exit_code: Some(code),
        ..Default::default()
    }
}

fn exited_with(code: i32, stderr: &str) -> ProcessEnd {
    ProcessEnd {
        stderr_tail: stderr.into(),
        ..exited(code)
    }
}

fn usage(i: u64, o: u64, cr: u64, cc: u64) -> TokenUsage {
    TokenUsage {
        input_tokens: i,
        output_tokens: o,
        cache_read_input_tokens: cr,
        cache_creation_input_tokens: cc,
    }
}

#[test]
fn a_text_session_started_text_and_success() {
    let p = parse("a_text");
    assert_eq!(p.kinds(), vec![SessionStarted, Notification]);
    let sid = "9b329807-06e5-4f01-8184-11d256192ad9";
    assert_eq!(p.parser.session(), Some(sid));
    assert_eq!(
        p.events[0].session_id.as_deref(),
        Some(&*format!("{sid}-1"))
    );
    assert!(p.events[0].summary.contains("model=claude-sonnet-4-5"));
    assert!(p.events[0].summary.contains("permission_mode=default"));
    let r = p.result();
    assert_eq!(r.usage, usage(1000, 10, 200, 50));
    assert!((r.total_cost_usd.unwrap() - 0.0033975).abs() < 1e-9);
    p.outcome(&exited(0)).expect("success");
    assert!(r.result_text.is_some());
}

#[test]
fn b_bash_allowed_tool_use_and_summed_result_usage() {
    let p = parse_ok("b_bash_allowed");
    assert_eq!(
        p.kinds(),
        vec![
            SessionStarted,
            Notification,
            ToolUse,
            OtherMessage,
            Notification
        ]
    );
    assert_eq!(p.events[2].summary, "Bash: echo hi > out.txt");
    assert_eq!(p.events[1].summary, "I will create the file.");
    // Assistant lines carry 1000/1 each; the result's per-invocation sum is what counts.
    assert_eq!(p.result().usage, usage(2100, 21, 400, 100));
    assert_eq!(p.result().total_cost_usd, Some(0.0094));
}

#[test]
fn c_bash_denied_reports_one_permission_denied_and_succeeds() {
    let p = parse_ok("c_bash_denied");
    // system/permission_denied and result.permission_denials name the same tool_use_id: one event.
    let d = only(&p.events, PermissionDenied);
    assert_eq!(d.summary, "Bash: This command requires approval");
}

#[test]
fn c2_write_denied_in_default_mode() {
    let p = parse_ok("c2_write_denied_default_mode");
    let d = only(&p.events, PermissionDenied);
    assert!(d
        .summary
        .starts_with("Write: Claude requested permissions to write"));
}

#[test]
fn c3_disallowed_tool_is_no_permission_denial() {
    let p = parse_ok("c3_disallowed_tool");
    assert_eq!(p.count(PermissionDenied), 0);
    assert_eq!(p.count(ToolUse), 1);
}

#[test]
fn result_only_denials_are_reported() {
    let mut p = StreamParser::new(1, None);
    let ev = p.parse_line(
        r#"{"type":"result","subtype":"success","is_error":false,"session_id":"s","usage":{},"permission_denials":[{"tool_name":"Bash","tool_use_id":"t1"},{"tool_name":"Write"}]}"#,
    );
    assert_eq!(
        ev.iter().filter(|e| e.kind == PermissionDenied).count(),
        2,
        "{ev:?}"
    );
}

#[test]
fn d_resume_keeps_session_adds_usage_and_reports_latest_cost() {
    let first = parse("d_resume.first");
    let id = first.parser.session().unwrap().to_string();
    assert_eq!(first.count(SessionStarted), 1);
    let second = parse_with("d_resume", 2, Some(&id));
    assert_eq!(second.parser.session(), Some(&*id));
    // session_started is not repeated on continuation turns; the id increments instead.
    assert_eq!(second.count(SessionStarted), 0);
    assert_eq!(second.events[0].kind, OtherMessage);
    assert!(second.events[0].summary.starts_with("session resumed"));
    assert!(second
        .events
        .iter()
        .all(|e| e.session_id.as_deref() == Some(&*format!("{id}-2"))));

    let t1 = first.result();
    let t2 = second.result();
    first.outcome(&exited(0)).unwrap();
    second.outcome(&exited(0)).unwrap();
    assert_eq!(t2.usage, usage(1200, 12, 200, 50), "per invocation");
    let mut total = TokenUsage::default();
    total.add(&t1.usage);
    total.add(&t2.usage);
    assert_eq!(total, usage(3300, 33, 600, 150));
    // total_cost_usd is cumulative: the latest value is the session cost, never the sum.
    assert_eq!(t1.total_cost_usd, Some(0.0094));
    assert_eq!(t2.total_cost_usd, Some(0.01473));
}

#[test]
fn d2_unknown_resume_id_fails_the_turn() {
    let p = parse("d2_resume_unknown_session");
    assert!(p.events.is_empty(), "only a result line: {:?}", p.kinds());
    assert_eq!(
        p.parser.session(),
        Some("11111111-2222-3333-4444-555555555555")
    );
    let stderr = "No conversation found with session ID: 11111111-2222-3333-4444-555555555555";
    let e = p.outcome(&exited_with(1, stderr)).unwrap_err();
    assert_eq!(e.kind, AgentErrorKind::TurnFailed);
    assert!(e.message.contains("error_during_execution"));
    assert!(e.message.contains("No conversation found"));
}

#[test]
fn api_errors_are_failed_turns_despite_subtype_success() {
    for (case, status, retries) in [
        ("e_api_error_529", Some(529), 2),
        ("e2_api_error_500_default_retries", Some(500), 10),
        ("e4_rate_limit_429", Some(429), 1),
        ("e5_connection_refused", None, 1),
        ("f2_hang_api_timeout", None, 1),
    ] {
        let p = parse(case);
        let retry_events: Vec<_> = p
            .events
            .iter()
            .filter(|e| e.kind == Notification && e.summary.starts_with("api retry"))
            .collect();
        assert_eq!(retry_events.len(), retries, "{case}");
        // The synthetic assistant line is surfaced as a notification.
        assert!(
            p.events
                .iter()
                .any(|e| e.kind == Notification && e.summary.starts_with("api error: ")),
            "{case}"
        );
        let r = p.result();
        assert_eq!(r.subtype, "success");
        assert!(r.is_error);
        assert_eq!(r.api_error_status, status, "{case}");
        let e = p.outcome(&exited(1)).unwrap_err();
        assert_eq!(e.kind, AgentErrorKind::TurnFailed, "{case}");
        assert!(e.message.contains("terminal_reason=api_error"), "{case}");
        // Even an exit code of 0 would not make an is_error result a success.
        assert!(p.outcome(&exited(0)).is_err());
    }
}

#[test]
fn api_retry_summary_names_error_and_status() {
    let p = parse("e_api_error_529");
    let first = p.first(Notification);
    assert_eq!(
        first.summary,
        "api retry attempt=1/2 error=overloaded status=529 delay_ms=613"
    );
}

#[test]
fn e3_error_then_recover_succeeds() {
    let p = parse_ok("e3_error_then_recover");
    assert_eq!(
        p.events
            .iter()
            .filter(|e| e.summary.starts_with("api retry"))
            .count(),
        2
    );
}

#[test]
fn f5_stream_idle_failure_still_reports_usage() {
    let p = parse("f5_stall_byte_idle_timeout");
    let r = p.result();
    assert_eq!(r.usage.input_tokens, 1000);
    let e = p.outcome(&exited(1)).unwrap_err();
    assert!(e.message.contains("stream idle"), "{}", e.message);
}

#[test]
fn hangs_without_result_line_are_process_exits() {
    for case in [
        "f_hang",
        "f3_stall_midstream",
        "f4_stall_api_timeout",
        "f6_hang_byte_idle_timeout",
        "f7_stall_default_watchdog",
    ] {
        let p = parse(case);
        assert!(p.parser.result().is_none(), "{case}");
        assert_eq!(p.count(SessionStarted), 1, "{case}");
        let killed = ProcessEnd {
            signal: Some(15),
            ..Default::default()
        };
        let e = p.outcome(&killed).unwrap_err();
        assert_eq!(e.kind, AgentErrorKind::ProcessExit, "{case}");
        assert!(e.message.contains("without a result line"));
        let timed_out = ProcessEnd {
            timed_out: true,
            ..Default::default()
        };
        let cancelled = ProcessEnd {
            cancelled: true,
            ..Default::default()
        };
        for (end, kind) in [
            (exited(143), AgentErrorKind::ProcessExit),
            (timed_out, AgentErrorKind::TurnTimeout),
            (cancelled, AgentErrorKind::TurnCancelled),
        ] {
            assert_eq!(p.outcome(&end).unwrap_err().kind, kind, "{case}: {end:?}");
        }
    }
}

#[test]
fn g_max_turns_fails_with_the_cli_error() {
    let p = parse("g_max_turns");
    let r = p.result();
    assert_eq!(r.subtype, "error_max_turns");
    assert_eq!(r.result_text, None);
    let e = p.outcome(&exited(1)).unwrap_err();
    assert_eq!(e.kind, AgentErrorKind::TurnFailed);
    assert!(e.message.contains("Reached maximum number of turns (1)"));
    assert_eq!(r.usage.input_tokens, 1000);
}

#[test]
fn i_write_and_edit_tool_uses() {
    let p = parse_ok("i_write_edit_accept_edits");
    let tools: Vec<_> = p
        .events
        .iter()
        .filter(|e| e.kind == ToolUse)
        .map(|e| e.summary.split(':').next().unwrap().to_string())
        .collect();
    assert_eq!(tools, vec!["Write", "Edit"]);
    assert_eq!(p.result().usage, usage(3300, 33, 600, 150));
}

#[test]
fn stream_json_input_cases_are_tolerated() {
    // Not the launch mode Baton uses, but the lines must parse: one session_started, the first
    // result counts, a second result is flagged.
    let h = parse("h_stream_json_input");
    assert_eq!(h.count(SessionStarted), 1);
    assert_eq!(h.count(Malformed), 1);
    assert_eq!(h.result().usage.input_tokens, 2100);
    let j = parse("j_interrupt_stream_json");
    let e = j.outcome(&exited(1)).unwrap_err();
    assert!(e.message.contains("aborted_streaming"));
    let a2 = parse("a2_partial_messages");
    assert_eq!(a2.count(Malformed), 0);
    assert!(a2.outcome(&exited(0)).is_ok());
}

#[test]
fn success_result_with_nonzero_exit_is_process_exit() {
    let p = parse("a_text");
    let e = p.outcome(&exited_with(2, "boom")).unwrap_err();
    assert_eq!(e.kind, AgentErrorKind::ProcessExit);
    assert!(e.message.contains("stderr: boom"));
}

#[test]
fn no_result_exit_0_is_parse_error_and_127_is_not_found() {
    let none = StreamParser::new(1, None);
    let e = none.outcome(&exited(0)).unwrap_err();
    assert_eq!(e.kind, AgentErrorKind::ParseError);
    let e = none
        .outcome(&exited_with(127, "bash: claude: command not found"))
        .unwrap_err();
    assert_eq!(e.kind, AgentErrorKind::AgentNotFound);
    assert!(e.message.contains("command not found"));
}

#[test]
fn asking_for_user_input_fails_the_turn() {
    let mut p = StreamParser::new(1, None);
    p.parse_line(r#"{"type":"assistant","session_id":"s","message":{"content":[{"type":"tool_use","name":"AskUserQuestion","input":{}}]}}"#);
    p.parse_line(r#"{"type":"result","subtype":"success","is_error":false,"usage":{}}"#);
    let e = p.outcome(&exited(0)).unwrap_err();
    assert_eq!(e.kind, AgentErrorKind::TurnInputRequired);
}

#[test]
fn bad_lines_are_malformed_never_panics() {
    let mut p = StreamParser::new(1, None);
    let deep = "[".repeat(10_000);
    let cases = [
        "garbage",
        "[1,2,3]",
        "\"just a string\"",
        "42",
        "{}",
        "{\"type\":",
        deep.as_str(),
        "\u{0}\u{1}\u{7f}",
    ];
    for line in cases {
        let ev = p.parse_line(line);
        assert_eq!(ev.len(), 1, "{line:?}");
        assert_eq!(ev[0].kind, Malformed, "{line:?}");
        assert!(ev[0].summary.chars().count() <= SUMMARY_MAX_CHARS + 1);
    }
    // Blank lines are ignored; unknown types and subtypes are tolerated.
    assert!(p.parse_line("   ").is_empty());
    let ev = p.parse_line(r#"{"type":"rate_limit_event","rate_limit_info":{}}"#);
    assert_eq!(ev[0].kind, OtherMessage);
    let ev = p.parse_line(r#"{"type":"system","subtype":"compact_boundary"}"#);
    assert_eq!(ev[0].kind, OtherMessage);
    // Wrong field types do not panic either.
    let ev = p.parse_line(
        r#"{"type":"result","is_error":"no","usage":[1],"total_cost_usd":"x","errors":{"a":1},"permission_denials":7}"#,
    );
    assert!(ev.is_empty());
    assert!(
        p.result().unwrap().is_error,
        "unparseable is_error counts as an error"
    );
    let ev = p.parse_line(r#"{"type":"assistant","message":{"content":[{"type":"tool_use","name":5,"input":"x"},7]}}"#);
    assert_eq!(ev.len(), 2);
}

#[test]
fn every_fixture_parses_without_malformed_lines() {
    let dir = format!("{}/fixtures/claude", env!("CARGO_MANIFEST_DIR"));
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let Some(case) = name.strip_suffix(".jsonl") else {
            continue;
        };
        n += 1;
        let p = parse(case);
        let expected = usize::from(case == "h_stream_json_input"); // its second result line
        assert_eq!(p.count(Malformed), expected, "{case}");
        assert!(p.parser.session().is_some(), "{case}");
        assert!(
            p.events.iter().all(|e| e.session_id.is_some()),
            "{case}: every event carries <agent_session_id>-<turn>"
        );
    }
    assert_eq!(n, 25);
}

#[test]
fn hostile_result_numbers_are_read_leniently_and_bounded() {
    let result = |usage: &str, cost: &str| {
        let mut p = StreamParser::new(1, None);
        let line = format!(
            r#"{{"type":"result","subtype":"success","is_error":false,"usage":{usage},"total_cost_usd":{cost}}}"#
        );
        assert!(p.parse_line(&line).is_empty(), "{line}");
        let r = p.result().expect("the result line counts").clone();
        (r.usage, r.total_cost_usd)
    };
    // Floats and numeric strings count (they used to count as 0); fractions are cut.
    let (u, c) = result(
        r#"{"input_tokens":1200.0,"output_tokens":"34","cache_read_input_tokens":" 5.9 ","cache_creation_input_tokens":1e2}"#,
        r#""0.25""#,
    );
    assert_eq!(u, usage(1200, 34, 5, 100));
    assert_eq!(c, Some(0.25));
    // A number too big for a float no longer makes the line a parse error; it is clamped, like
    // any huge figure, so adding two never overflows to infinity.
    let max_count = 1u64 << 53;
    let (u, c) = result(
        r#"{"input_tokens":1e400,"output_tokens":18446744073709551616,"cache_read_input_tokens":"inf"}"#,
        "1e400",
    );
    assert_eq!(u, usage(max_count, max_count, max_count, 0));
    assert_eq!(c, Some(1e9));
    assert_eq!(result("{}", "1.7e308").1, Some(1e9));
    assert!((result("{}", "1.7e308").1.unwrap() * 2.0).is_finite());
    // Negative, NaN and non-numbers: no tokens, no cost reported (spend never goes down).
    for cost in ["-3", r#""NaN""#, r#""x""#, "null", "[1]", "true", "-1e400"] {
        let (u, c) = result(
            &format!(r#"{{"input_tokens":{cost},"output_tokens":{cost}}}"#),
            cost,
        );
        assert_eq!((u, c), (TokenUsage::default(), None), "{cost}");
    }
}

/// A failed result's `errors` go into the failure text even when each entry is empty (the text
/// then shows an empty `: ` part), so the message never hides that Claude sent errors.
#[test]
fn a_failed_result_with_empty_errors_keeps_its_errors_part() {
    let mut parser = StreamParser::new(1, None);
    let line = r#"{"type":"result","subtype":"error_during_execution","is_error":true,"errors":[""],"session_id":"s1"}"#;
    parser.parse_line(line);
    let e = parser.outcome(&exited(1)).unwrap_err();
    assert_eq!(e.kind, AgentErrorKind::TurnFailed);
    assert!(
        e.message.starts_with("subtype=error_during_execution:  ("),
        "{}",
        e.message
    );
}
