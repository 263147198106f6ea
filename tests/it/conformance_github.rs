//! Issue 24, "implemented but untested": Baton §1, §10.4 and §11.5, the orchestrator is a tracker
//! reader. A full run of the built `baton` against the fake GitHub (startup sweep, dispatch, a
//! between-turn refresh, a continuation, reconciliation of a terminal move with cleanup, the
//! refresh endpoint, shutdown); then every request it sent is checked: a GraphQL query, never a
//! mutation or subscription.

use std::path::Path;
use std::time::Duration;

use crate::support::daemon_proc::{logged_runs, DaemonProc};
use crate::support::fake_github::{BoardFixture, FakeGithub, IssueFixture, FAKE_TOKEN};
use crate::support::real_cli::agent_yaml;
use crate::support::tempdir::TempDir;

/// A Claude-compatible stand-in: one successful stream-json turn, logged to `$AGENT_LOG`.
const AGENT: &str = r#"#!/usr/bin/env bash
echo "run cwd=$PWD" >> "$AGENT_LOG"
echo '{"type":"system","subtype":"init","session_id":"3f1c2a9e-2b7d-4c43-9a55-0d6f1e7b8a21","model":"fake","tools":[]}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"3f1c2a9e-2b7d-4c43-9a55-0d6f1e7b8a21","num_turns":1,"usage":{"input_tokens":10,"output_tokens":1}}'
"#;

/// The GraphQL operation types a document defines (`query` for the shorthand `{ … }`).
fn operation_types(document: &str) -> Vec<String> {
    let mut types = Vec::new();
    let (mut depth, mut word, mut in_string, mut in_comment) =
        (0usize, String::new(), false, false);
    let mut words_at_top: Vec<String> = Vec::new();
    for c in document.chars() {
        if in_comment {
            in_comment = c != '\n';
            continue;
        }
        if in_string {
            in_string = c != '"';
            continue;
        }
        match c {
            '#' => in_comment = true,
            '"' => in_string = true,
            '{' => {
                if depth == 0 {
                    let first = words_at_top.first().cloned();
                    if first.as_deref() != Some("fragment") {
                        types.push(first.unwrap_or_else(|| "query".into()));
                    }
                    words_at_top.clear();
                }
                depth += 1;
            }
            '}' => depth = depth.saturating_sub(1),
            c if depth == 0 && (c.is_alphanumeric() || c == '_') => word.push(c),
            _ => {}
        }
        if depth == 0 && !(c.is_alphanumeric() || c == '_') && !word.is_empty() {
            words_at_top.push(std::mem::take(&mut word));
        }
    }
    types
}

#[test]
fn operation_types_reads_every_definition() {
    let doc = "# a mutation in a comment\nquery A($x: ID!) { a(s: \"mutation {\") { b } }\n\
               fragment F on Issue { id }\nmutation M { c }\n{ d }";
    assert_eq!(operation_types(doc), ["query", "mutation", "query"]);
}

fn write_workflow(dir: &Path, github: &FakeGithub, agent: &Path) -> std::path::PathBuf {
    let wf = dir.join("WORKFLOW.md");
    let agent = agent_yaml("claude_code", agent, "  max_turns: 2\n", "");
    let text = format!(
        "---\ntracker:\n  kind: github_projects\n  endpoint: {}\n  token: $CONF_TOKEN\n  owner: acme\n  \
         project_number: 7\n  timeout_ms: 5000\npolling:\n  interval_ms: 300\nworkspace:\n  root: {}\n\
         hooks:\n  timeout_ms: 10000\n{agent}---\nWork on {{{{ issue.identifier }}}}.\n",
        github.endpoint(),
        dir.join("ws").display(),
    );
    std::fs::write(&wf, text).unwrap();
    wf
}

#[test]
fn a_full_run_sends_only_graphql_queries() {
    let dir = TempDir::new("reader");
    let mut board = BoardFixture::empty("acme", 7);
    board.push_issue(
        IssueFixture::new("acme/api", 1, "Do the work"),
        Some("Todo"),
    );
    board.push_issue(IssueFixture::new("acme/api", 2, "Finished"), Some("Done"));
    let github = FakeGithub::start(board);
    let agent = dir.join("fake-claude");
    std::fs::write(&agent, AGENT).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (done_ws, ws) = (dir.join("ws/acme__api-2"), dir.join("ws/acme__api-1"));
    std::fs::create_dir_all(&done_ws).unwrap();
    let agent_log = dir.join("agent.log");
    let wf = write_workflow(&dir, &github, &agent);
    let envs = [
        ("CONF_TOKEN", FAKE_TOKEN.to_string()),
        ("AGENT_LOG", agent_log.display().to_string()),
    ];
    let daemon = DaemonProc::start(&wf, &dir, &envs);
    let limit = Duration::from_secs(30);
    daemon.wait("the startup sweep", limit, || {
        (!done_ws.exists()).then_some(())
    });
    // Two turns (one between-turn refresh), then a continuation run.
    daemon.wait("a continuation run", limit, || {
        (logged_runs(&agent_log).len() >= 3).then_some(())
    });
    assert_eq!(daemon.post("/api/v1/refresh").0, 202);
    github.set_status(&"acme/api#1".to_string(), Some("Done"));
    daemon.wait("terminal cleanup", limit, || (!ws.exists()).then_some(()));
    let status = daemon.terminate(limit);
    assert!(status.success(), "{status:?}");

    let requests = github.requests();
    let mut operations: Vec<String> = requests.iter().map(|r| r.operation.clone()).collect();
    operations.sort();
    operations.dedup();
    for r in &requests {
        assert_eq!(r.method, "POST", "{}", r.operation);
        let types = operation_types(&r.query);
        assert!(
            !types.is_empty() && types.iter().all(|t| t == "query"),
            "{} sent {types:?}:\n{}",
            r.operation,
            r.query
        );
    }
    // The run covered project resolution, board reads and the by-id refreshes.
    for op in ["ResolveOrgProject", "RefreshIssues"] {
        assert!(operations.iter().any(|o| o == op), "{op}: {operations:?}");
    }
    assert!(
        operations.iter().any(|o| o.starts_with("ProjectItems")),
        "{operations:?}"
    );
}
