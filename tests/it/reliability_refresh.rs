//! Issue 12, "a malformed refresh reply is read as gone", through the real daemon: while a
//! healthy agent runs, polls whose board read fails (so every running issue is refreshed) get
//! refresh replies that cannot be read. The worker keeps running (no `reason=missing`, same
//! agent process); a well-formed NOT_FOUND then stops it as missing.

use crate::support;
use crate::support::tempdir::TempDir;

use crate::support::daemon_proc;

use std::path::{Path, PathBuf};
use std::time::Duration;

use daemon_proc::DaemonProc;
use serde_json::{json, Value};
use support::fake_github::{
    issue_node_id, BoardFixture, FakeGithub, Fault, IssueFixture, FAKE_TOKEN,
};

const LIMIT: Duration = Duration::from_secs(60);

/// Prints its pid and hangs (a healthy, long turn).
const AGENT: &str = r#"#!/usr/bin/env bash
echo "pid=$$" >> "$REFRESH_DIR/agent.log"
echo '{"type":"system","subtype":"init","session_id":"refresh-1","model":"fake","tools":[]}'
sleep 300 &
wait
"#;

fn setup() -> (TempDir, FakeGithub, PathBuf) {
    let dir = TempDir::new("refresh");
    std::fs::create_dir_all(dir.join("home")).unwrap();
    let mut board = BoardFixture::empty("acme", 7);
    board.push_issue(
        IssueFixture::new("acme/app", 1, "healthy"),
        Some("In Progress"),
    );
    let github = FakeGithub::start(board);
    let agent = dir.join("agent");
    std::fs::write(&agent, AGENT).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let wf = dir.join("WORKFLOW.md");
    std::fs::write(
        &wf,
        format!(
            "---\ntracker:\n  kind: github_projects\n  endpoint: {}\n  token: $REFRESH_TOKEN\n  \
             owner: acme\n  project_number: 7\n  timeout_ms: 5000\npolling:\n  interval_ms: 300\n\
             workspace:\n  root: {}\nagent:\n  kind: claude_code\n  max_turns: 1\n\
             claude_code:\n  command: \"'{}'\"\n  stall_timeout_ms: 0\n---\nWork.\n",
            github.endpoint(),
            dir.join("ws").display(),
            agent.display()
        ),
    )
    .unwrap();
    (dir, github, wf)
}

fn pids(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("agent.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The refresh node of the running issue, as GitHub would send it.
fn node(github: &FakeGithub) -> Value {
    json!({"__typename":"Issue","id":issue_node_id("acme/app#1"),"number":1,"title":"healthy","body":"",
        "state":"OPEN","url":"https://github.com/acme/app/issues/1","createdAt":"2024-01-01T00:00:00Z",
        "updatedAt":"2024-01-01T00:00:00Z","labels":{"nodes":[]},"repository":{"nameWithOwner":"acme/app"},
        "projectItems":{"pageInfo":{"hasNextPage":false,"endCursor":"c1"},"nodes":[
            {"id":"PVTI_1","isArchived":false,"project":{"id":github.project_id()},
             "status":{"name":"In Progress","optionId":"47fc9ee4"}}]}})
}

/// The next poll: its board read fails, then its refresh gets `body`.
fn poll_with_refresh_reply(github: &FakeGithub, body: Value) {
    github.push_fault(Fault::BadGateway);
    github.push_fault(Fault::Raw {
        status: 200,
        headers: vec![],
        body: body.to_string(),
    });
}

#[test]
fn malformed_refresh_replies_keep_the_worker_and_not_found_stops_it() {
    let (dir, github, wf) = setup();
    let mut d = DaemonProc::start(
        &wf,
        &dir.join("home"),
        &[
            ("REFRESH_TOKEN", FAKE_TOKEN.to_string()),
            ("REFRESH_DIR", dir.display().to_string()),
        ],
    );
    d.wait("the agent to start", LIMIT, || {
        (!pids(&dir).is_empty()).then_some(())
    });
    let mut shapes: Vec<(&str, Value)> = Vec::new();
    let mut n = node(&github);
    n["projectItems"] = Value::Null;
    shapes.push(("null projectItems", n));
    let mut n = node(&github);
    n.as_object_mut().unwrap().remove("__typename");
    shapes.push(("no __typename", n));
    let mut n = node(&github);
    n["projectItems"]["nodes"][0]["project"] = json!({});
    shapes.push(("no project.id", n));
    shapes.push(("null node without NOT_FOUND", Value::Null));
    for (what, bad) in shapes {
        let before = github.operations().len();
        poll_with_refresh_reply(&github, json!({"data":{"nodes":[bad]}}));
        d.wait(what, LIMIT, || {
            let ops = github.operations();
            let tail = &ops[before.min(ops.len())..];
            // Served: the failed board read, the refresh, and the next poll's read after them.
            let refresh = tail.iter().position(|o| o == "RefreshRunning")?;
            tail[refresh + 1..]
                .iter()
                .any(|o| o.starts_with("ProjectItems"))
                .then_some(())
        });
        assert!(
            !d.log().contains("reason=missing"),
            "{what}: a reply that cannot be read stopped the worker; log:\n{}",
            d.log()
        );
    }
    assert_eq!(pids(&dir).len(), 1, "the same agent ran throughout");
    assert!(d.log().contains("github_unknown_payload"), "{}", d.log());

    // A well-formed proof: NOT_FOUND with a null node.
    poll_with_refresh_reply(
        &github,
        json!({"data":{"nodes":[null]},"errors":[{"type":"NOT_FOUND","path":["nodes",0],
            "message":"Could not resolve to a node"}]}),
    );
    d.wait_log("reason=missing", LIMIT);
    let status = d.stop_with(libc::SIGTERM, LIMIT);
    assert!(status.success(), "{status:?}");
}
