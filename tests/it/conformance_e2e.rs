//! Spec statements checked on the built `baton` against the fake GitHub.
//!
//! - Issue 24, "implemented but untested": Baton §1, §10.4 and §11.5, the orchestrator is a
//!   tracker reader. A full run (startup sweep, dispatch, a between-turn refresh, a continuation,
//!   reconciliation of a terminal move with cleanup, the refresh endpoint, shutdown); then every
//!   request it sent is checked: a GraphQL query, never a mutation or subscription.
//! - Symphony §6.2: a reload re-applies the prompt, the hooks and the agent settings to the next
//!   dispatch.
//! - Symphony §17.7: an explicit workflow path that does not exist is a clean startup failure.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::daemon_proc::{logged_runs, DaemonProc};
use crate::support::fake_github::{BoardFixture, FakeGithub, IssueFixture, FAKE_TOKEN};
use crate::support::real_cli::agent_yaml;
use crate::support::tempdir::TempDir;

/// A Claude-compatible stand-in: one successful stream-json turn, logged to `$AGENT_LOG` with its
/// name and its prompt (the last argument).
const AGENT: &str = r#"#!/usr/bin/env bash
echo "run agent=$(basename "$0") prompt=${@: -1}" >> "$AGENT_LOG"
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

/// `WORKFLOW.md` in `dir` for the fake GitHub, running `agent` with `active` states, `after_create`
/// and the prompt `body`.
fn write_workflow(
    dir: &Path,
    github: &FakeGithub,
    agent: &Path,
    rest: (&str, &str, &str),
) -> PathBuf {
    let (active, after_create, body) = rest;
    let wf = dir.join("WORKFLOW.md");
    let agent = agent_yaml("claude_code", agent, "  max_turns: 2\n", "");
    let text = format!(
        "---\ntracker:\n  kind: github_projects\n  endpoint: {}\n  token: $CONF_TOKEN\n  owner: acme\n  \
         project_number: 7\n  timeout_ms: 5000\n  active_states: [{active}]\npolling:\n  interval_ms: 300\n\
         workspace:\n  root: {}\nhooks:\n  timeout_ms: 10000\n  after_create: \"{after_create}\"\n{agent}---\n{body}\n",
        github.endpoint(),
        dir.join("ws").display(),
    );
    // Editor-style: write a temporary file, rename it over.
    let tmp = dir.join(".WORKFLOW.md.tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, &wf).unwrap();
    wf
}

/// An executable agent stand-in named `name` in `dir`.
fn agent(dir: &Path, name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, AGENT).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
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
    let agent = agent(&dir, "fake-claude");
    let (done_ws, ws) = (dir.join("ws/acme__api-2"), dir.join("ws/acme__api-1"));
    std::fs::create_dir_all(&done_ws).unwrap();
    let agent_log = dir.join("agent.log");
    let rest = (
        "Todo, In Progress",
        "true",
        "Work on {{ issue.identifier }}.",
    );
    let wf = write_workflow(&dir, &github, &agent, rest);
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
    github.set_status("acme/api#1", Some("Done"));
    daemon.wait("terminal cleanup", limit, || (!ws.exists()).then_some(()));
    // Symphony §13.1: session lifecycle lines carry the session id once it is known.
    let log = daemon.log();
    let session = "3f1c2a9e-2b7d-4c43-9a55-0d6f1e7b8a21";
    for needle in [
        format!("claude turn completed issue_identifier=acme__api-1 session_id={session}-1 "),
        format!("claude turn started issue_identifier=acme__api-1 session_id={session}-2 "),
        format!("claude turn completed issue_identifier=acme__api-1 session_id={session}-2 "),
    ] {
        assert!(log.contains(&needle), "no `{needle}` in:\n{log}");
    }
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

#[test]
fn a_reload_reapplies_the_prompt_the_hooks_and_the_agent_to_the_next_dispatch() {
    let dir = TempDir::new("reapply");
    let mut board = BoardFixture::empty("acme", 7);
    board.push_issue(
        IssueFixture::new("acme/api", 1, "Do the work"),
        Some("Todo"),
    );
    let github = FakeGithub::start(board);
    let (one, two) = (agent(&dir, "agent-one"), agent(&dir, "agent-two"));
    let v1 = (
        "Someday",
        "echo v1 > .created",
        "Version one for {{ issue.identifier }}",
    );
    let wf = write_workflow(&dir, &github, &one, v1);
    let agent_log = dir.join("agent.log");
    let envs = [
        ("CONF_TOKEN", FAKE_TOKEN.to_string()),
        ("AGENT_LOG", agent_log.display().to_string()),
    ];
    let daemon = DaemonProc::start(&wf, &dir, &envs);
    let limit = Duration::from_secs(30);
    let board_reads = || {
        let ops = github.operations();
        ops.iter().filter(|o| o.starts_with("ProjectItems")).count()
    };
    daemon.wait("two idle polls", limit, || {
        (board_reads() >= 2).then_some(())
    });
    assert!(logged_runs(&agent_log).is_empty(), "no active state yet");
    let v2 = (
        "Todo",
        "echo v2 > .created",
        "Version two for {{ issue.identifier }}",
    );
    write_workflow(&dir, &github, &two, v2);
    let run = daemon.wait("a run after the reload", limit, || {
        logged_runs(&agent_log).into_iter().next()
    });
    assert_eq!(
        run, "run agent=agent-two prompt=Version two for acme__api-1",
        "the new command and prompt"
    );
    let created = std::fs::read_to_string(dir.join("ws/acme__api-1/.created")).unwrap();
    assert_eq!(created.trim(), "v2", "the new after_create hook");
    assert!(daemon.terminate(limit).success());
}

#[test]
fn an_explicit_workflow_path_that_does_not_exist_fails_startup_in_one_line() {
    let dir = TempDir::new("nowf");
    // A valid-looking ./WORKFLOW.md must not be used instead.
    std::fs::write(dir.join("WORKFLOW.md"), "---\ntracker: {}\n---\n").unwrap();
    let missing = dir.join("elsewhere/WORKFLOW.md");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg(&missing)
        .current_dir(&dir)
        .env("HOME", &*dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("baton: missing_workflow_file: ") && err.contains("elsewhere/WORKFLOW.md"),
        "{err}"
    );
}
