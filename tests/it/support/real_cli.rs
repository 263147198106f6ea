//! What the daemon-level tests with the real `claude` and `copilot` CLIs share: the environment
//! that points each CLI at its offline fake model API, the `agent:` section running a CLI, the
//! slow-poll rewrite, and the scripted two-turn Claude conversation.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::daemon_proc::DaemonProc;
use super::fake_anthropic::{FakeAnthropic, Step};
use super::fake_github::FakeGithub;
use super::fake_responses::FakeResponses;

/// `claude_code:` keys of the real-CLI runs: edits allowed, generous timeouts.
pub const CLAUDE_KEYS: &str =
    "  permission_mode: acceptEdits\n  stall_timeout_ms: 60000\n  turn_timeout_ms: 120000\n";

/// `agent:` plus the CLI's own section (named like `kind`) running `command` (with `args`
/// after it), with extra keys for each section (key lines indented by two spaces).
pub fn agent_yaml(kind: &str, command: &Path, agent_keys: &str, cli_keys: &str) -> String {
    agent_yaml_args(kind, command, "", agent_keys, cli_keys)
}

/// [`agent_yaml`] with shell words after the command (e.g. `app-server`).
pub fn agent_yaml_args(
    kind: &str,
    command: &Path,
    args: &str,
    agent_keys: &str,
    cli_keys: &str,
) -> String {
    format!(
        "agent:\n  kind: {kind}\n{agent_keys}{kind}:\n  command: \"'{}'{args}\"\n{cli_keys}",
        command.display()
    )
}

/// The environment that runs the real `claude` offline against the fake Messages API at `base_url`.
pub fn claude_env(base_url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("ANTHROPIC_BASE_URL", base_url.to_string()),
        ("ANTHROPIC_API_KEY", "dummy".into()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
        ("DISABLE_TELEMETRY", "1".into()),
        ("DISABLE_AUTOUPDATER", "1".into()),
    ]
}

/// The environment that runs the real `copilot` offline (BYOK) against the fake Chat Completions
/// API at `base_url`, with the package cache `.ci/setup-copilot.sh` filled.
pub fn copilot_env(base_url: &str) -> Vec<(&'static str, String)> {
    let cache = std::env::var("BATON_COPILOT_CACHE_HOME").unwrap_or_else(|_| {
        format!(
            "{}/.cache/copilot",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    vec![
        ("COPILOT_OFFLINE", "true".into()),
        ("COPILOT_PROVIDER_BASE_URL", base_url.to_string()),
        ("COPILOT_PROVIDER_API_KEY", "dummy".into()),
        ("COPILOT_MODEL", "gpt-4.1".into()),
        ("COPILOT_CACHE_HOME", cache),
        ("NO_COLOR", "1".into()),
    ]
}

/// The environment that runs the real `codex` offline against the fake Responses API: a
/// `CODEX_HOME` at `home` (outside `/tmp`, where Codex refuses its sandbox helper) whose
/// `config.toml` points a custom provider at `api`.
pub fn codex_env(api: &FakeResponses, home: &Path) -> Vec<(&'static str, String)> {
    std::fs::create_dir_all(home).unwrap();
    std::fs::write(home.join("config.toml"), api.codex_config(true)).unwrap();
    vec![
        ("CODEX_HOME", home.display().to_string()),
        ("FAKE_OPENAI_API_KEY", "dummy".into()),
    ]
}

/// The environment that runs the real `gemini` offline against the fake Gemini API at
/// `base_url` (`gemini.auth_type: gemini-api-key` selects the key over the base URL's default).
pub fn gemini_env(base_url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("GOOGLE_GEMINI_BASE_URL", base_url.to_string()),
        ("GEMINI_API_KEY", "dummy".into()),
        ("TERM", "dumb".into()),
    ]
}

/// Rewrite the workflow's 300 ms poll interval to 10 minutes. The real-CLI runs move the issue
/// out of its active states while the last turn is in flight; a reconciliation poll in that
/// window would (correctly) cancel the turn, so only the worker's between-turn check may see it.
pub fn slow_poll(wf: &Path) {
    let text = std::fs::read_to_string(wf).unwrap();
    let slow = text.replace("interval_ms: 300\n", "interval_ms: 600000\n");
    assert_ne!(text, slow, "the workflow polls every 300 ms");
    std::fs::write(wf, slow).unwrap();
}

/// The fake Messages API for a two-turn Claude run on one session: turn 1 writes `hello.txt`
/// with `content` (a Write tool call, then text), turn 2 (resumed) answers with text; while
/// turn 2's request is in flight `issue` moves to In Review, so the worker stops after turn 2.
pub fn claude_two_turns(github: &Arc<FakeGithub>, issue: &str, content: &str) -> FakeAnthropic {
    let g = Arc::clone(github);
    let issue = issue.to_string();
    FakeAnthropic::start_with_hook(
        vec![
            Step::ToolUse {
                text: Some("Writing the file.".into()),
                name: "Write".into(),
                input: serde_json::json!({"file_path": "hello.txt", "content": content}),
            },
            Step::Text("Turn one is done.".into()),
            Step::Text("Turn two is done.".into()),
        ],
        move |rec| {
            if rec.n_assistant == 2 {
                g.set_status(&issue, Some("In Review"));
            }
        },
    )
}

/// Wait (up to 2 minutes) until the run of [`claude_two_turns`] is over — three model requests,
/// nothing running or retrying, the claim released — then check that both turns ran on one CLI
/// session and that turn 1 wrote `hello.txt` with `content` into `ws`.
pub fn assert_claude_two_turns(d: &DaemonProc, api: &FakeAnthropic, ws: &Path, content: &str) {
    d.wait("release after two turns", Duration::from_secs(120), || {
        let s = d.state();
        let done = api.requests().len() >= 3
            && s["counts"]["running"] == 0
            && s["counts"]["retrying"] == 0
            && d.log().contains("releasing claim");
        done.then_some(())
    });
    let reqs = api.requests();
    assert_eq!(reqs.len(), 3, "two turns: 2 API calls then 1: {reqs:?}");
    let sessions: Vec<_> = reqs.iter().map(|r| r.session_header.clone()).collect();
    assert!(
        sessions[0].is_some() && sessions.iter().all(|s| s == &sessions[0]),
        "one session: {sessions:?}"
    );
    let written = std::fs::read_to_string(ws.join("hello.txt")).unwrap();
    assert_eq!(written, content);
}
