//! Process-level end-to-end tests: the built `baton` binary against the fake GitHub (tests/it/support),
//! with (1) a scripted fake agent CLI, (2) the real Claude Code CLI against a fake Messages API, and
//! (3) the real Copilot CLI against a fake Chat Completions API. The daemon's own HTTP API
//! (`--port 0`) is how the tests observe it. Waits are bounded polls, never fixed sleeps.

// The real Codex and Gemini runs need those features; their helpers are unused without them.
#![cfg_attr(
    not(all(feature = "codex", feature = "gemini")),
    allow(unused_imports, dead_code)
)]

use crate::support;
use crate::support::tempdir::TempDir;

use crate::support::daemon_proc::{logged_runs, wait_until, DaemonProc};
use crate::support::procs;
use crate::support::real_cli::{
    self, agent_yaml, agent_yaml_args, assert_claude_two_turns, claude_env, claude_two_turns,
    copilot_env, slow_poll, CLAUDE_KEYS,
};
use crate::support::tool;

use crate::support::fake_anthropic;
use crate::support::fake_gemini::FakeGemini;
use crate::support::fake_openai;
use crate::support::fake_responses::FakeResponses;
use crate::support::prom;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::fake_github::{BoardFixture, FakeGithub, IssueFixture, FAKE_TOKEN};

const ISSUE: &str = "acme/api#1";
const IDENT: &str = "acme__api-1";

fn board() -> BoardFixture {
    let mut b = BoardFixture::empty("acme", 7);
    let mut issue = IssueFixture::new("acme/api", 1, "Add a <b>greeting</b> file");
    issue.body = "Create hello.txt. $(touch /tmp/never) `id`".into();
    b.push_issue(issue, Some("Todo"));
    b
}

/// Poll `f` until it returns `Some`, or panic after `limit` with `what`.
fn wait_for<T>(what: &str, limit: Duration, f: impl FnMut() -> Option<T>) -> T {
    wait_until(what, limit, String::new, f)
}

/// Start `baton` with the fake GitHub's token in `BATON_E2E_TOKEN`.
fn start_daemon(workflow: &Path, home: &Path, envs: &[(&str, String)]) -> DaemonProc {
    let mut all = vec![("BATON_E2E_TOKEN", FAKE_TOKEN.to_string())];
    all.extend(envs.iter().cloned());
    DaemonProc::start(workflow, home, &all)
}

fn write_workflow(dir: &Path, github: &FakeGithub, agent_yaml: &str, body: &str) -> PathBuf {
    let p = dir.join("WORKFLOW.md");
    let text = format!(
        "---\ntracker:\n  kind: github_projects\n  endpoint: {}\n  token: $BATON_E2E_TOKEN\n  owner: acme\n  project_number: 7\n  active_states: [Todo, In Progress]\n  terminal_states: [Done]\n  timeout_ms: 5000\npolling:\n  interval_ms: 300\nworkspace:\n  root: {}\nhooks:\n  timeout_ms: 10000\n  after_create: |\n    echo created > .baton-created\n{agent_yaml}---\n{body}\n",
        github.endpoint(),
        dir.join("ws").display(),
    );
    std::fs::write(&p, text).unwrap();
    p
}

/// A fake Claude-compatible agent: prints stream-json for one successful turn, or hangs with a
/// background grandchild. Every invocation is appended to `$E2E_LOG`.
const FAKE_AGENT: &str = r#"#!/usr/bin/env bash
echo "run pid=$$ pgid=$(ps -o pgid= $$ | tr -d ' ') cwd=$PWD resume=$(printf '%s ' "$@" | grep -o -- '--resume [^ ]*' | cut -d' ' -f2)" >> "$E2E_LOG"
echo "env notify=${NOTIFY_SOCKET:-unset} watchdog=${WATCHDOG_USEC:-unset} wpid=${WATCHDOG_PID:-unset} tunables=${GLIBC_TUNABLES:-unset}" >> "$E2E_LOG"
echo '{"type":"system","subtype":"init","session_id":"e2e-session-1","model":"fake","tools":[]}'
if [ "${E2E_MODE:-ok}" = fail ]; then
  exit 3
fi
if [ "${E2E_MODE:-ok}" = hang ]; then
  sleep 300 &
  echo "grandchild $!" >> "$E2E_LOG"
  wait
  exit 0
fi
echo '{"type":"assistant","message":{"id":"m1","role":"assistant","content":[{"type":"text","text":"working on it"}],"usage":{"input_tokens":999,"output_tokens":999}},"session_id":"e2e-session-1"}'
echo "touched" >> agent-was-here.txt
echo '{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"e2e-session-1","total_cost_usd":0.25,"num_turns":1,"usage":{"input_tokens":100,"output_tokens":10}}'
"#;

/// A fresh directory with the fake GitHub, the fake agent script, and a workflow running it with
/// `agent_keys`: `(dir, github, agent_log, workflow)`; the agent logs its runs to `agent_log`.
fn fake_agent_run(
    tag: &str,
    agent_keys: &str,
    body: &str,
) -> (TempDir, FakeGithub, PathBuf, PathBuf) {
    let dir = TempDir::new(tag);
    let github = FakeGithub::start(board());
    let agent = fake_agent(&dir);
    let wf = write_workflow(
        &dir,
        &github,
        &agent_yaml("claude_code", &agent, agent_keys, ""),
        body,
    );
    let agent_log = dir.join("agent.log");
    (dir, github, agent_log, wf)
}

fn fake_agent(dir: &Path) -> PathBuf {
    let p = dir.join("fake-claude");
    std::fs::write(&p, FAKE_AGENT).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// Baton runs with glibc's per-thread malloc caches off (it restarts itself once with
/// `GLIBC_TUNABLES`: same pid), its agents do not inherit the variable, and an operator's own
/// `GLIBC_TUNABLES` is left alone.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn malloc_thread_caches_are_off_and_agents_do_not_inherit_the_tunable() {
    for (operator, daemon_env, agent_env) in [
        (
            None,
            "GLIBC_TUNABLES=glibc.malloc.tcache_count=0",
            "tunables=unset",
        ),
        (
            Some("glibc.malloc.perturb=0"),
            "GLIBC_TUNABLES=glibc.malloc.perturb=0",
            "tunables=glibc.malloc.perturb=0",
        ),
    ] {
        let (dir, _github, agent_log, wf) = fake_agent_run(
            "tunables",
            "  max_turns: 1\n",
            "Work on {{ issue.identifier }}",
        );
        let envs = [
            ("BATON_E2E_TOKEN", FAKE_TOKEN.to_string()),
            ("E2E_LOG", agent_log.display().to_string()),
        ];
        let mut cmd = support::daemon_proc::baton_command(&wf, &dir, &envs);
        match operator {
            Some(v) => cmd.env("GLIBC_TUNABLES", v),
            None => cmd.env_remove("GLIBC_TUNABLES"),
        };
        let daemon = DaemonProc::spawn(cmd);
        let env_line = wait_for("the agent's environment", Duration::from_secs(30), || {
            let log = std::fs::read_to_string(&agent_log).unwrap_or_default();
            log.lines()
                .find(|l| l.starts_with("env "))
                .map(str::to_string)
        });
        assert!(env_line.ends_with(agent_env), "{operator:?}: {env_line}");
        let environ = std::fs::read(format!("/proc/{}/environ", daemon.pid())).unwrap();
        let daemon_vars: Vec<_> = environ
            .split(|b| *b == 0)
            .filter(|v| v.starts_with(b"GLIBC_TUNABLES="))
            .collect();
        assert_eq!(daemon_vars, [daemon_env.as_bytes()], "{operator:?}");
        // The restart keeps the process name (not `exe`, as `/proc/self/exe` would give).
        let comm = std::fs::read_to_string(format!("/proc/{}/comm", daemon.pid())).unwrap();
        assert_eq!(comm.trim(), "baton", "{operator:?}");
        assert_eq!(daemon.terminate(Duration::from_secs(30)).code(), Some(0));
    }
}

#[test]
fn fake_agent_dispatch_continuation_terminal_cleanup_and_sigterm() {
    let (dir, github, agent_log, wf) = fake_agent_run(
        "fake",
        "  max_turns: 1\n  max_runs_per_issue: 50\n",
        "Work on {{ issue.identifier }}: {{ issue.title }}",
    );
    let daemon = start_daemon(&wf, &dir, &[("E2E_LOG", agent_log.display().to_string())]);
    let ws = dir.join("ws").join(IDENT);

    // Dispatch: workspace created (after_create ran there) and the agent ran in it.
    wait_for("first agent run", Duration::from_secs(30), || {
        (!logged_runs(&agent_log).is_empty()).then_some(())
    });
    assert!(
        ws.join(".baton-created").exists(),
        "after_create ran in the workspace"
    );
    assert!(
        logged_runs(&agent_log)[0].contains(&format!("cwd={}", ws.display())),
        "{:?}",
        logged_runs(&agent_log)
    );

    // Continuation: after a normal exit the issue is still active, so it runs again (~1 s later).
    wait_for("a continuation run", Duration::from_secs(30), || {
        (logged_runs(&agent_log).len() >= 2).then_some(())
    });
    let state = daemon.state();
    let totals = &state["agent_totals"];
    assert!(totals["input_tokens"].as_u64().unwrap() >= 100, "{state}");
    assert_eq!(
        totals["input_tokens"].as_u64().unwrap() % 100,
        0,
        "only result usage is counted: {state}"
    );

    // The issue detail route knows it, with recent events.
    let (code, body) = daemon.get(&format!("/api/v1/{IDENT}"));
    assert_eq!(code, 200, "{body}");
    let detail: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(detail["issue_identifier"], IDENT);
    assert!(
        detail["recent_events"]
            .as_array()
            .is_some_and(|e| !e.is_empty()),
        "{detail}"
    );
    let (code, html) = daemon.get("/");
    assert_eq!(code, 200);
    assert!(html.contains(IDENT), "dashboard lists the issue");
    assert!(!html.contains("<b>greeting</b>"), "title escaped");
    let (code, html) = daemon.get(&format!("/issues/{IDENT}"));
    assert_eq!(code, 200);
    assert!(html.contains(IDENT));
    let (code, body) = daemon.get("/api/v1/acme__nope-9");
    assert_eq!(code, 404);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["error"]["code"],
        "issue_not_found"
    );
    let (code, body) = daemon.post("/api/v1/refresh");
    assert_eq!(code, 202, "{body}");
    let ack: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ack["queued"], true);
    assert_eq!(ack["operations"], serde_json::json!(["poll", "reconcile"]));
    let (code, _) = daemon.get("/api/v1/refresh");
    assert_eq!(code, 405);

    // Terminal: moving the item to Done stops the worker and removes its workspace.
    github.set_status(ISSUE, Some("Done"));
    wait_for(
        "terminal cleanup of the workspace",
        Duration::from_secs(30),
        || (!ws.exists()).then_some(()),
    );
    let state = daemon.state();
    assert_eq!(state["counts"]["running"], 0, "{state}");
    assert_eq!(state["counts"]["retrying"], 0, "{state}");
    let st = daemon.terminate(Duration::from_secs(30));
    assert_eq!(st.code(), Some(0));
    assert!(
        !Path::new("/tmp/never").exists(),
        "issue text never reached a shell"
    );
}

#[test]
fn sigterm_stops_hung_agents_and_their_children() {
    let (dir, _github, agent_log, wf) =
        fake_agent_run("hang", "", "Work on {{ issue.identifier }}");
    let daemon = start_daemon(
        &wf,
        &dir,
        &[
            ("E2E_LOG", agent_log.display().to_string()),
            ("E2E_MODE", "hang".into()),
        ],
    );
    let (agent_pid, grandchild) = wait_for(
        "the hung agent and its grandchild",
        Duration::from_secs(30),
        || {
            let text = std::fs::read_to_string(&agent_log).ok()?;
            let pid: i32 = text
                .lines()
                .find(|l| l.starts_with("run "))?
                .split("pid=")
                .nth(1)?
                .split(' ')
                .next()?
                .parse()
                .ok()?;
            let gc: i32 = text
                .lines()
                .find(|l| l.starts_with("grandchild "))?
                .split(' ')
                .nth(1)?
                .parse()
                .ok()?;
            Some((pid, gc))
        },
    );
    assert!(procs::pid_alive(agent_pid) && procs::pid_alive(grandchild));
    let st = daemon.terminate(Duration::from_secs(40));
    assert_eq!(st.code(), Some(0), "clean shutdown");
    wait_for(
        "agent processes to be gone",
        Duration::from_secs(10),
        || (!procs::pid_alive(agent_pid) && !procs::pid_alive(grandchild)).then_some(()),
    );
}

#[test]
fn reload_applies_valid_edits_and_keeps_the_last_good_config() {
    let (dir, github, agent_log, wf) = fake_agent_run(
        "reload",
        "  max_turns: 1\n",
        "Work on {{ issue.identifier }}",
    );
    // Start with no matching active state: nothing is dispatched.
    let original = std::fs::read_to_string(&wf).unwrap();
    let idle = original.replace(
        "active_states: [Todo, In Progress]",
        "active_states: [Someday]",
    );
    std::fs::write(&wf, &idle).unwrap();
    let mut daemon = start_daemon(&wf, &dir, &[("E2E_LOG", agent_log.display().to_string())]);
    let polls = |g: &FakeGithub| {
        g.operations()
            .iter()
            .filter(|o| o.contains("ProjectItems"))
            .count()
    };
    daemon.wait("a few idle polls", Duration::from_secs(30), || {
        (polls(&github) >= 3).then_some(())
    });
    assert!(
        logged_runs(&agent_log).is_empty(),
        "nothing dispatched while no state is active"
    );

    // An invalid edit (editor-style: write a temp file, rename over) is reported and ignored.
    let tmp = dir.join(".WORKFLOW.md.tmp");
    std::fs::write(
        &tmp,
        idle.replace(
            "polling:\n  interval_ms: 300",
            "polling:\n  interval_ms: [oops",
        ),
    )
    .unwrap();
    std::fs::rename(&tmp, &wf).unwrap();
    daemon.wait("the reload error", Duration::from_secs(30), || {
        daemon
            .log()
            .contains("workflow reload failed")
            .then_some(())
    });
    let log = daemon.log();
    let line = log
        .lines()
        .find(|l| l.contains("workflow reload failed"))
        .unwrap();
    assert!(
        line.contains("WORKFLOW.md") && line.contains("line "),
        "names file and line: {line}"
    );
    assert!(daemon.alive(), "an invalid edit never stops the daemon");
    let before = polls(&github);
    daemon.wait(
        "polling to continue on the last good config",
        Duration::from_secs(30),
        || (polls(&github) >= before + 2).then_some(()),
    );
    assert!(logged_runs(&agent_log).is_empty());

    // A valid edit re-applies the states: the Todo issue is dispatched.
    std::fs::write(&tmp, &original).unwrap();
    std::fs::rename(&tmp, &wf).unwrap();
    daemon.wait(
        "dispatch after the valid reload",
        Duration::from_secs(30),
        || (!logged_runs(&agent_log).is_empty()).then_some(()),
    );
    assert!(daemon.log().contains("workflow reloaded"));
    assert_eq!(daemon.terminate(Duration::from_secs(30)).code(), Some(0));
}

#[test]
fn a_broken_stderr_never_stops_the_daemon() {
    let dir = TempDir::new("stderr");
    let github = FakeGithub::start(board());
    let wf = write_workflow(
        &dir,
        &github,
        "agent:\n  kind: claude_code\nclaude_code:\n  command: /nonexistent/agent\n",
        "x",
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("--log-level")
        .arg("debug")
        .arg(&wf)
        .env("BATON_E2E_TOKEN", FAKE_TOKEN)
        .env_remove("JOURNAL_STREAM")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Close the read end: every log write now fails with EPIPE.
    drop(child.stderr.take());
    // It keeps polling (and failing agent launches, which log a lot) with nowhere to log.
    wait_for(
        "several polls with a broken stderr",
        Duration::from_secs(30),
        || (github.operations().len() >= 6).then_some(()),
    );
    assert!(child.try_wait().unwrap().is_none(), "still running");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let st = wait_for("exit after SIGTERM", Duration::from_secs(30), || {
        child.try_wait().unwrap()
    });
    assert_eq!(st.code(), Some(0));
}

/// A temp dir with a private `HOME` for the CLI, and the fake board shared with the fake model
/// API's hook (which moves the issue at a precise turn).
fn real_cli_sandbox(tag: &str) -> (TempDir, PathBuf, Arc<FakeGithub>) {
    let dir = TempDir::new(tag);
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    (dir, home, Arc::new(FakeGithub::start(board())))
}

#[test]
#[ignore = "needs the real claude CLI (BATON_CLAUDE_BIN, .ci/setup-claude.sh)"]
fn real_claude_two_turns_on_one_session_with_token_totals() {
    let claude = tool::required("BATON_CLAUDE_BIN", ".ci/setup-claude.sh");
    let (dir, home, github) = real_cli_sandbox("claude");
    let api = claude_two_turns(&github, ISSUE, "hello from claude\n");
    let wf = write_workflow(
        &dir,
        &github,
        &agent_yaml("claude_code", &claude, "  max_turns: 5\n", CLAUDE_KEYS),
        "Create hello.txt for {{ issue.identifier }}.",
    );
    slow_poll(&wf);
    let daemon = start_daemon(&wf, &home, &claude_env(&api.base_url));
    let ws = dir.join("ws").join(IDENT);
    assert_claude_two_turns(&daemon, &api, &ws, "hello from claude\n");
    let s = daemon.state();
    // result.usage per invocation: turn 1 = 1000+1100 in / 10+11 out; turn 2 = 1200 / 12.
    assert_eq!(s["agent_totals"]["input_tokens"], 3300, "{s}");
    assert_eq!(s["agent_totals"]["output_tokens"], 33, "{s}");
    assert!(
        ws.exists(),
        "In Review is not terminal: the workspace stays"
    );
    let st = daemon.terminate(Duration::from_secs(30));
    assert_eq!(st.code(), Some(0));
}

#[test]
#[ignore = "needs the real copilot CLI (BATON_COPILOT_BIN, .ci/setup-copilot.sh)"]
fn real_copilot_two_turns_on_one_session() {
    let copilot = tool::required("BATON_COPILOT_BIN", ".ci/setup-copilot.sh");
    let (dir, home, github) = real_cli_sandbox("copilot");
    let g = Arc::clone(&github);
    // The second chat request of the session carries two user messages (context kept by --resume):
    // move the issue out of the active states then, so the worker stops after turn 2.
    let api = fake_openai::FakeOpenAi::start_with_hook(move |users| {
        if users >= 2 {
            g.set_status(ISSUE, Some("In Review"));
        }
    });
    let wf = write_workflow(
        &dir,
        &github,
        &agent_yaml(
            "copilot",
            &copilot,
            "  max_turns: 5\n",
            "  stall_timeout_ms: 60000\n  turn_timeout_ms: 120000\n",
        ),
        "REMEMBER:pineapple Work on {{ issue.identifier }}.",
    );
    slow_poll(&wf);
    let daemon = start_daemon(&wf, &home, &copilot_env(&api.base_url));
    daemon.wait(
        "the issue to be released after two turns",
        Duration::from_secs(150),
        || {
            let s = daemon.state();
            (api.requests().len() >= 2
                && s["counts"]["running"] == 0
                && s["counts"]["retrying"] == 0)
                .then_some(())
        },
    );
    let log = daemon.log();
    let runs: Vec<&str> = log.lines().filter(|l| l.contains("session_id=")).collect();
    assert!(!runs.is_empty(), "{log}");
    let reqs = api.requests();
    assert_eq!(reqs.len(), 2, "one completion per turn: {reqs:?}");
    let s = daemon.state();
    let input = s["agent_totals"]["input_tokens"].as_u64().unwrap();
    // Usage comes from the CLI's usage file (cumulative per session, recorded as deltas):
    // exactly two completions' worth, or zero when the CLI reported none — never double-counted.
    assert!(input == 0 || input == 2 * fake_openai::PROMPT_TOKENS, "{s}");
    let st = daemon.terminate(Duration::from_secs(30));
    assert_eq!(st.code(), Some(0));
}

/// A real agent CLI for two turns on one session: the fake model's hook moves the issue to In
/// Review when a request carries two prompts, so the worker stops after turn 2. Returns the
/// daemon's final state.
fn real_two_turns(
    kind: &str,
    tag: &str,
    cli: &Path,
    args: &str,
    keys: &str,
    api: TwoTurnApi,
) -> Value {
    let (dir, home, github) = real_cli_sandbox(tag);
    let g = Arc::clone(&github);
    let moved = move |prompts: usize| {
        if prompts >= 2 {
            g.set_status(ISSUE, Some("In Review"));
        }
    };
    let (env, requests): (_, Box<dyn Fn() -> usize>) = match api {
        TwoTurnApi::Codex => {
            let api = FakeResponses::start_with_hook(move |r| moved(r.prompts));
            let codex_home = Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("e2e-{tag}-{}", std::process::id()));
            let env = real_cli::codex_env(&api, &codex_home);
            (env, Box::new(move || api.requests().len()))
        }
        TwoTurnApi::Gemini => {
            let api = FakeGemini::start_with_hook(move |r| moved(r.prompts));
            let env = real_cli::gemini_env(&api.base_url);
            (env, Box::new(move || api.requests().len()))
        }
    };
    let keys = format!("  stall_timeout_ms: 60000\n  turn_timeout_ms: 120000\n{keys}");
    let agent = agent_yaml_args(kind, cli, args, "  max_turns: 5\n", &keys);
    let wf = write_workflow(&dir, &github, &agent, "Work on {{ issue.identifier }}.");
    slow_poll(&wf);
    let daemon = start_daemon(&wf, &home, &env);
    daemon.wait("release after two turns", Duration::from_secs(150), || {
        let s = daemon.state();
        (requests() >= 2 && s["counts"]["running"] == 0 && s["counts"]["retrying"] == 0)
            .then_some(())
    });
    assert_eq!(requests(), 2, "one model call per turn");
    assert!(daemon.log().contains("releasing claim"), "{}", daemon.log());
    assert!(
        dir.join("ws").join(IDENT).join(".baton-created").exists(),
        "hooks ran"
    );
    let s = daemon.state();
    let st = daemon.terminate(Duration::from_secs(30));
    assert_eq!(st.code(), Some(0));
    s
}

enum TwoTurnApi {
    Codex,
    Gemini,
}

#[cfg(feature = "codex")]
#[test]
#[ignore = "needs the real codex CLI (BATON_CODEX_BIN, .ci/setup-codex.sh)"]
fn real_codex_two_turns_on_one_thread() {
    let codex = tool::required("BATON_CODEX_BIN", ".ci/setup-codex.sh");
    let s = real_two_turns(
        "codex",
        "codex",
        &codex,
        " app-server",
        "",
        TwoTurnApi::Codex,
    );
    // Turn 1: 1000 input (600 cached); turn 2 (resumed thread): 2000 (1600 cached); 20 out each.
    let t = &s["agent_totals"];
    assert_eq!(
        (
            t["input_tokens"].as_u64(),
            t["cache_read_input_tokens"].as_u64()
        ),
        (Some(800), Some(2200)),
        "{s}"
    );
    assert_eq!(t["output_tokens"], 40, "{s}");
}

#[cfg(feature = "gemini")]
#[test]
#[ignore = "needs the real gemini CLI (BATON_GEMINI_BIN, .ci/setup-gemini.sh)"]
fn real_gemini_two_turns_on_one_session() {
    let gemini = tool::required("BATON_GEMINI_BIN", ".ci/setup-gemini.sh");
    let keys = "  model: gemini-2.5-flash\n  auth_type: gemini-api-key\n";
    let s = real_two_turns("gemini", "gemini", &gemini, "", keys, TwoTurnApi::Gemini);
    // Per invocation: 1000 (600 cached) then 2000 (1600 cached); output 20 + 5 thoughts each.
    let t = &s["agent_totals"];
    assert_eq!(
        (
            t["input_tokens"].as_u64(),
            t["cache_read_input_tokens"].as_u64()
        ),
        (Some(800), Some(2200)),
        "{s}"
    );
    assert_eq!(t["output_tokens"], 50, "{s}");
}

/// Datagrams received on a notify socket, with their arrival times.
type Datagrams = Arc<Mutex<Vec<(Instant, String)>>>;

/// Bind `path` and collect every datagram on a background thread (until the test ends).
fn notify_listener(path: &Path) -> Datagrams {
    let sock = UnixDatagram::bind(path).expect("bind notify socket");
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let got: Datagrams = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&got);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        // Ends when the test process exits; a read timeout just loops.
        loop {
            if let Ok(n) = sock.recv(&mut buf) {
                let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
                sink.lock().unwrap().push((Instant::now(), msg));
            }
        }
    });
    got
}

fn messages(got: &Datagrams, prefix: &str) -> Vec<(Instant, String)> {
    got.lock()
        .unwrap()
        .iter()
        .filter(|(_, m)| m.starts_with(prefix))
        .cloned()
        .collect()
}

/// `GET /metrics`, strictly parsed.
fn metrics(d: &DaemonProc) -> Vec<prom::Family> {
    let (code, body) = d.get("/metrics");
    assert_eq!(code, 200, "{body}");
    prom::parse(&body).unwrap_or_else(|e| panic!("{e}\n{body}"))
}

/// A sample's value, 0 when the series is absent.
fn metric(fams: &[prom::Family], name: &str, labels: &[(&str, &str)]) -> f64 {
    prom::sample(fams, name, labels).unwrap_or(0.0)
}

#[test]
fn metrics_health_and_systemd_notify_from_the_real_binary() {
    let (dir, github, agent_log, wf) =
        fake_agent_run("ops", "  max_turns: 1\n", "Work on {{ issue.identifier }}");
    let sock = dir.join("notify.sock");
    let got = notify_listener(&sock);
    let daemon = start_daemon(
        &wf,
        &dir,
        &[
            ("E2E_LOG", agent_log.display().to_string()),
            ("E2E_MODE", "fail".into()),
            ("NOTIFY_SOCKET", sock.display().to_string()),
            ("WATCHDOG_USEC", "300000".into()),
        ],
    );

    // A poll, a dispatch and a failed run move their counters.
    let fams = daemon.wait("a failed run in /metrics", Duration::from_secs(30), || {
        let f = metrics(&daemon);
        (metric(&f, "baton_worker_exits_total", &[("outcome", "failed")]) >= 1.0).then_some(f)
    });
    assert!(metric(&fams, "baton_polls_total", &[]) >= 1.0);
    assert!(metric(&fams, "baton_dispatches_total", &[]) >= 1.0);
    assert!(metric(&fams, "baton_retries_scheduled_total", &[]) >= 1.0);
    assert_eq!(metric(&fams, "baton_retrying_issues", &[]), 1.0);
    assert!(metric(&fams, "baton_tracker_rate_limit_remaining", &[]) > 0.0);
    assert!(metric(&fams, "baton_poll_duration_seconds_count", &[]) >= 1.0);
    assert_eq!(
        metric(
            &fams,
            "baton_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    // Children never see systemd's variables.
    let log = std::fs::read_to_string(&agent_log).unwrap();
    assert!(
        log.contains("env notify=unset watchdog=unset wpid=unset"),
        "{log}"
    );

    // Health: live and ready; a rejected token flips readiness, a good one restores it.
    assert_eq!(daemon.get("/livez").0, 200);
    daemon.wait("ready", Duration::from_secs(10), || {
        (daemon.get("/readyz").0 == 200).then_some(())
    });
    github.set_reject_auth(true);
    let body = daemon.wait("not ready on 401", Duration::from_secs(10), || {
        let (code, body) = daemon.get("/readyz");
        (code == 503).then_some(body)
    });
    let why: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(why["reason"], "tracker_failing", "{why}");
    assert_eq!(why["class"], "github_auth", "{why}");
    assert!(
        metric(
            &metrics(&daemon),
            "baton_poll_errors_total",
            &[("class", "github_auth")]
        ) >= 1.0
    );
    github.set_reject_auth(false);
    // The operator fixes the token: the reload ends the credential back-off at once.
    let mut text = std::fs::read_to_string(&wf).unwrap();
    text.push_str("\n<!-- token fixed -->\n");
    std::fs::write(&wf, text).unwrap();
    daemon.wait("ready again", Duration::from_secs(10), || {
        (daemon.get("/readyz").0 == 200).then_some(())
    });

    // systemd: READY=1, a STATUS= summary, WATCHDOG=1 every ~150 ms, STOPPING=1 at SIGTERM.
    assert_eq!(messages(&got, "READY=1").len(), 1);
    daemon.wait("a STATUS= with the retry", Duration::from_secs(10), || {
        let status = messages(&got, "STATUS=");
        status
            .iter()
            .any(|(_, m)| m.contains("retrying 1") && !m.contains("last poll never"))
            .then_some(())
    });
    for w in messages(&got, "STATUS=").windows(2) {
        let gap = w[1].0 - w[0].0;
        assert!(
            gap >= Duration::from_millis(900),
            "STATUS= rate limit: {gap:?}"
        );
    }
    let pings = daemon.wait("watchdog pings", Duration::from_secs(10), || {
        let p = messages(&got, "WATCHDOG=1");
        (p.len() >= 5).then_some(p)
    });
    for w in pings.windows(2) {
        let gap = w[1].0 - w[0].0;
        assert!(gap < Duration::from_millis(1000), "watchdog gap {gap:?}");
    }
    let st = daemon.terminate(Duration::from_secs(30));
    assert_eq!(st.code(), Some(0));
    let stopping = wait_for("STOPPING=1", Duration::from_secs(5), || {
        let s = messages(&got, "STOPPING=1");
        (!s.is_empty()).then_some(s)
    });
    assert_eq!(stopping.len(), 1);
    assert!(stopping[0].0 > messages(&got, "READY=1")[0].0);
}

#[test]
#[ignore = "needs the real claude CLI (BATON_CLAUDE_BIN, .ci/setup-claude.sh)"]
fn real_claude_cost_budget_parks_after_the_crossing_turn() {
    let claude = tool::required("BATON_CLAUDE_BIN", ".ci/setup-claude.sh");
    let (dir, home, github) = real_cli_sandbox("claude-budget");
    use fake_anthropic::Step;
    // Every reply reports 1000+ input, 50 cache-write and 200 cache-read tokens: at the CLI's own
    // prices turn 1 alone costs more than the $0.0001 limit, so no turn 2 may start.
    let api = fake_anthropic::FakeAnthropic::start(vec![
        Step::Text("Turn one is done.".into()),
        Step::Text("Turn two must never run.".into()),
    ]);
    let wf = write_workflow(
        &dir,
        &github,
        &agent_yaml(
            "claude_code",
            &claude,
            "  max_turns: 5\n  max_cost_usd_per_issue: 0.0001\n",
            CLAUDE_KEYS,
        ),
        "Work on {{ issue.identifier }}.",
    );
    let daemon = start_daemon(&wf, &home, &claude_env(&api.base_url));
    let s = daemon.wait(
        "the issue to be parked for its budget",
        Duration::from_secs(120),
        || {
            let s = daemon.state();
            (s["counts"]["blocked"] == 1 && s["counts"]["running"] == 0).then_some(s)
        },
    );
    let reason = s["blocked"][0]["reason"].as_str().unwrap().to_string();
    assert!(
        reason.starts_with("budget exceeded: cost $") && reason.ends_with(" > $0.0001"),
        "{reason}"
    );
    assert_eq!(
        api.requests().len(),
        1,
        "no second turn: {:?}",
        api.requests()
    );
    assert_eq!(s["budget"]["max_cost_usd_per_issue"], 0.0001, "{s}");
    let (code, body) = daemon.get(&format!("/api/v1/{IDENT}"));
    assert_eq!(code, 200, "{body}");
    let detail: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(detail["status"], "blocked", "{detail}");
    assert_eq!(detail["spend"]["turns"], 1, "{detail}");
    assert!(
        detail["spend"]["cost_usd"].as_f64().unwrap() > 0.0001,
        "{detail}"
    );
    let tokens = &detail["spend"]["tokens"];
    assert!(
        tokens["cache_read_input_tokens"].as_u64().unwrap() > 0,
        "{detail}"
    );
    assert_eq!(
        tokens["total_tokens"].as_u64().unwrap(),
        [
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens"
        ]
        .iter()
        .map(|k| tokens[*k].as_u64().unwrap())
        .sum::<u64>(),
        "totals include cache tokens: {detail}"
    );
    let fams = metrics(&daemon);
    assert_eq!(
        metric(
            &fams,
            "baton_parked_issues",
            &[("reason", "budget_exceeded")]
        ),
        1.0
    );
    assert!(metric(&fams, "baton_agent_cost_usd_total", &[]) > 0.0001);
    assert!(metric(&fams, "baton_agent_tokens_total", &[("kind", "cache_read")]) > 0.0);
    assert_eq!(metric(&fams, "baton_agent_turns_total", &[]), 1.0);
    // Still parked on later polls: no new dispatch.
    let polls = metric(&fams, "baton_polls_total", &[]);
    daemon.wait("two more polls", Duration::from_secs(10), || {
        (metric(&metrics(&daemon), "baton_polls_total", &[]) >= polls + 2.0).then_some(())
    });
    assert_eq!(api.requests().len(), 1);
    assert_eq!(daemon.state()["counts"]["blocked"], 1);
    let st = daemon.terminate(Duration::from_secs(30));
    assert_eq!(st.code(), Some(0));
}

#[test]
fn every_line_of_a_run_names_the_issue_id_and_identifier() {
    // Issue 24, item 4 (spec §13.1): a run with two turns and a failing hook.
    let (dir, _github, agent_log, wf) = fake_agent_run(
        "log-ctx",
        "  max_turns: 2\n",
        "Work on {{ issue.identifier }}",
    );
    let text = std::fs::read_to_string(&wf).unwrap();
    std::fs::write(
        &wf,
        text.replace("hooks:\n", "hooks:\n  after_run: exit 7\n"),
    )
    .unwrap();
    let daemon = start_daemon(&wf, &dir, &[("E2E_LOG", agent_log.display().to_string())]);
    wait_for(
        "two turns and the failed after_run hook",
        Duration::from_secs(30),
        || {
            daemon
                .log()
                .contains("hook failed hook=after_run")
                .then_some(())
        },
    );
    let log = daemon.log();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(IDENT)).collect();
    for needle in [
        "claude turn started",
        "claude turn completed",
        "turn=2",
        "hook failed",
    ] {
        assert!(
            lines.iter().any(|l| l.contains(needle)),
            "no `{needle}` line:\n{log}"
        );
    }
    for l in &lines {
        assert!(
            l.contains(" issue_id=") && l.contains(" issue_identifier="),
            "an issue line without both fields: {l}"
        );
    }
    assert_eq!(daemon.terminate(Duration::from_secs(30)).code(), Some(0));
}

#[test]
fn a_low_descriptor_limit_caps_the_agents_and_keeps_the_api_and_state_working() {
    // Issue 25, item 3: soft = hard = 180 descriptors and 60 issues that want agents.
    use std::os::unix::process::CommandExt;
    let dir = TempDir::new("nofile");
    let mut b = BoardFixture::empty("acme", 7);
    for n in 1..=60 {
        b.push_issue(IssueFixture::new("acme/api", n, "task"), Some("Todo"));
    }
    let github = FakeGithub::start(b);
    let agent = fake_agent(&dir);
    let agent_keys = agent_yaml("claude_code", &agent, "  max_concurrent_agents: 60\n", "");
    let wf = write_workflow(&dir, &github, &agent_keys, "Work on {{ issue.identifier }}");
    let agent_log = dir.join("agent.log");
    let envs = [
        ("BATON_E2E_TOKEN", FAKE_TOKEN.to_string()),
        ("E2E_LOG", agent_log.display().to_string()),
        ("E2E_MODE", "hang".into()),
    ];
    let mut cmd = support::daemon_proc::baton_command(&wf, &dir, &envs);
    // SAFETY: only setrlimit(2), async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let l = libc::rlimit {
                rlim_cur: 180,
                rlim_max: 180,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &l) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let daemon = DaemonProc::spawn(cmd);
    let allowed: u64 = wait_for("the agent cap", Duration::from_secs(30), || {
        let log = daemon.log();
        let line = log
            .lines()
            .find(|l| l.contains("event=agents_capped_by_nofile"))?;
        line.split("allowed=")
            .nth(1)?
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    });
    assert!((1..60).contains(&allowed), "{allowed}");
    wait_for("the capped agents running", Duration::from_secs(30), || {
        (logged_runs(&agent_log).len() as u64 >= allowed).then_some(())
    });
    let state = daemon.state();
    assert_eq!(
        state["counts"]["running"].as_u64(),
        Some(allowed),
        "{state}"
    );
    assert_eq!(daemon.get("/livez").0, 200);
    let log = daemon.log();
    assert!(!log.contains("Too many open files"), "{log}");
    assert!(!log.contains("attempt=1"), "no failed attempt:\n{log}");
    wait_for("state.json written", Duration::from_secs(10), || {
        // The default state.dir: under the daemon's HOME, one directory per WORKFLOW.md.
        let base = dir.join(".local/state/baton");
        let state_dir = std::fs::read_dir(base).ok()?.next()?.ok()?.path();
        let text = std::fs::read_to_string(state_dir.join("state.json")).ok()?;
        text.contains("acme__api-").then_some(())
    });
    assert_eq!(daemon.terminate(Duration::from_secs(40)).code(), Some(0));
}
