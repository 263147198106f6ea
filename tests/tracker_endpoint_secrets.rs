//! Credentials never leave the GitHub client (issue 12): a `user:TOKEN@` userinfo in
//! `tracker.endpoint` is absent from transport errors and the tracker's `Debug`, and a token the
//! server echoes back inside data fields (a title, an item id, an error) is scrubbed before
//! anything sees it: issues, errors and warning log lines.
//!
//! A test binary of its own (not in `tests/it/`) because it installs a process-wide log capture.

#[path = "it/support/mod.rs"]
mod support;

use std::path::Path;
use support::tempdir::TempDir;

use baton::tracker::Tracker;
use baton::workflow::loader::load_workflow;
use support::fake_github::{BoardFixture, FakeGithub, Fault, IssueFixture, FAKE_TOKEN};
use support::log_capture;
use support::stand_ins::TestEnv;

/// Capture every log line of this test binary (installed once).
fn capture_logs() {
    log_capture::install(log::LevelFilter::Debug);
}

/// The captured log lines the wire-log filter let through.
fn logged() -> String {
    log_capture::lines().join("\n")
}

/// The environment of the workflows: `$BATON_SECRETS_TOKEN` is the fake's token.
fn env() -> TestEnv {
    TestEnv::none().with_var("BATON_SECRETS_TOKEN", FAKE_TOKEN)
}

fn tracker(dir: &Path, endpoint: &str) -> std::sync::Arc<dyn Tracker> {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join("WORKFLOW.md");
    std::fs::write(
        &p,
        format!(
            "---\ntracker:\n  kind: github_projects\n  endpoint: {endpoint}\n  token: $BATON_SECRETS_TOKEN\n  \
             owner: acme\n  project_number: 7\n  active_states: [Todo]\n  timeout_ms: 3000\n---\nx\n"
        ),
    )
    .unwrap();
    let wf = load_workflow(&p, &env()).expect("workflow");
    baton::tracker::open(&wf.config.config.tracker).expect("tracker")
}

#[test]
fn endpoint_userinfo_never_reaches_errors_or_debug() {
    // Port 1 on loopback refuses the connection at once.
    capture_logs();
    let t = tracker(
        &TempDir::new("userinfo"),
        "http://operator:hunter2ENDPOINTSECRET@127.0.0.1:1/graphql",
    );
    let e = t.fetch_candidate_issues().unwrap_err();
    let shown = format!("{e} {e:?}");
    assert!(!shown.contains("hunter2ENDPOINTSECRET"), "{shown}");
    assert!(!shown.contains("operator:"), "{shown}");
    assert!(
        shown.contains("127.0.0.1:1"),
        "the endpoint is still named: {shown}"
    );
    let e = t.validate().unwrap_err();
    assert!(!e.to_string().contains("hunter2ENDPOINTSECRET"), "{e}");
    // The tracker's Debug names the endpoint without its credentials.
    let dir = TempDir::new("debug");
    let p = dir.join("WORKFLOW.md");
    std::fs::write(&p, "---\ntracker:\n  kind: github_projects\n  endpoint: https://operator:hunter2ENDPOINTSECRET@ghe.example/api/graphql\n  token: $BATON_SECRETS_TOKEN\n  owner: acme\n  project_number: 7\n---\nx\n").unwrap();
    let wf = load_workflow(&p, &env()).unwrap();
    let g = baton::tracker::github::GithubTracker::new(&wf.config.config.tracker).unwrap();
    let debug = format!("{g:?}");
    assert!(!debug.contains("hunter2ENDPOINTSECRET"), "{debug}");
    assert!(debug.contains("***@ghe.example"), "{debug}");
    assert!(!logged().contains("hunter2ENDPOINTSECRET"));
}

#[test]
fn a_token_echoed_in_data_fields_is_scrubbed() {
    capture_logs();
    let mut board = BoardFixture::empty("acme", 7);
    let mut issue = IssueFixture::new("acme/api", 1, &format!("leak {FAKE_TOKEN} here"));
    issue.body = format!("body with {FAKE_TOKEN}");
    board.push_issue(issue, Some("Todo"));
    let github = FakeGithub::start(board);
    let dir = TempDir::new("echo");
    let t = tracker(&dir, &github.endpoint());
    let issues = t.fetch_candidate_issues().expect("candidates");
    assert_eq!(issues.len(), 1);
    let shown = format!("{:?}", issues[0]);
    assert!(!shown.contains(FAKE_TOKEN), "{shown}");
    assert!(issues[0].title.contains("***"), "{}", issues[0].title);
    // An error whose `type` and message echo the token.
    github.push_fault(Fault::raw(
        200,
        format!(r#"{{"errors":[{{"type":"X{FAKE_TOKEN}","message":"token {FAKE_TOKEN}"}}]}}"#),
    ));
    let e = t.fetch_candidate_issues().unwrap_err();
    assert!(!format!("{e} {e:?}").contains(FAKE_TOKEN), "{e}");
    // A page whose item id and content type echo the token: the skipped-item warning names
    // them scrubbed.
    let page = format!(
        r#"{{"data":{{"node":{{"__typename":"ProjectV2","items":{{"pageInfo":{{"hasNextPage":false,"endCursor":null}},"nodes":[{{"id":"PVTI_{FAKE_TOKEN}","type":"ISSUE","isArchived":false,"content":{{"__typename":"Weird{FAKE_TOKEN}"}}}}]}}}}}}}}"#
    );
    github.push_fault(Fault::raw(200, page));
    let _ = t.fetch_candidate_issues();
    let log = logged();
    assert!(log.contains("tracker_item_skipped"), "{log}");
    assert!(!log.contains(FAKE_TOKEN), "{log}");
}
