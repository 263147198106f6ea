//! The token never appears in any log line, error or debug output of the tracker.
//!
//! A test binary of its own (not in `tests/it/`) because it installs a process-wide log capture.

#[path = "it/support/mod.rs"]
mod support;

use baton::tracker::github::GithubTracker;
use baton::tracker::Tracker;
use baton::workflow::config::TrackerConfig;
use support::fake_github::{issue_node_id, FakeGithub, Fault, FAKE_TOKEN};
use support::log_capture;

#[test]
fn token_never_in_logs_or_errors() {
    log_capture::install(log::LevelFilter::Trace);

    let fake = FakeGithub::from_fixture("fixtures/boards/acme.json");
    fake.set_supports_dependencies(false); // exercise the warn path too
    let cfg = TrackerConfig {
        priority_field: Some("Nope".into()),
        active_states: vec!["Todo".into()],
        page_size: 2,
        timeout_ms: 2000,
        ..fake.tracker_config()
    };
    let t = GithubTracker::new(&cfg).unwrap();
    let mut texts = vec![format!("{t:?}"), format!("{cfg:?}")];
    t.fetch_candidate_issues().unwrap();
    t.fetch_issue_states_by_ids(&[issue_node_id("acme/app#1"), "I_gone".into()])
        .unwrap();
    let echo = format!(r#"{{"message":"Bad credentials for Bearer {FAKE_TOKEN}"}}"#);
    for f in [
        Fault::Unauthorized,
        Fault::SecondaryRateLimit {
            status: 403,
            retry_after: None,
        },
        Fault::PrimaryRateLimit {
            spelling: "RATE_LIMITED",
            remaining: 0,
        },
        Fault::BadGateway,
        Fault::Garbage,
        Fault::InsufficientScopes,
        Fault::raw(401, echo.clone()),
        Fault::raw(500, echo.clone()),
        Fault::raw(
            200,
            format!(r#"{{"errors":[{{"message":"token {FAKE_TOKEN}"}}]}}"#),
        ),
    ] {
        fake.push_fault(f);
        let e = t.fetch_candidate_issues().unwrap_err();
        texts.push(format!("{e} {e:?}"));
    }
    let lines = log_capture::lines();
    assert!(
        lines.iter().any(|l| l.contains("tracker_requests")),
        "debug request accounting is logged"
    );
    assert!(lines
        .iter()
        .any(|l| l.contains("tracker_dependencies_unavailable")));
    // The filter is needed: the wire TRACE dump really carries the token (split across rows).
    let wire = log_capture::wire_trace();
    assert!(
        wire.iter().any(|l| l.contains("fakeTOKEN")),
        "wire_log_allowed guards a real leak"
    );
    for l in lines.iter().chain(texts.iter()) {
        assert!(!l.contains(FAKE_TOKEN), "token leaked: {l}");
        assert!(!l.contains("fakeTOKEN"), "token fragment leaked: {l}");
    }
}
