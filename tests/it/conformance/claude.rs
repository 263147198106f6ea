//! Issue 24, "implemented but untested": Baton §10.1 / §17.5, "permission flags from config are
//! passed on every turn"; §5.3.6, pass-through values are not an enum Baton maintains. A child
//! module of `claude_process`, so it shares its fake CLI set-up (every flag configured).

use std::time::Duration;

use baton::agent::claude::ClaudeRunner;
use baton::workflow::loader::load_workflow;

use super::{argv, cfg, replay, start};
use crate::support::agent::{run, Knobs, Sandbox};
use crate::support::stand_ins::TestEnv;

/// The flags every turn carries (the config of `claude_process::cfg`), in order.
const POSTURE: [&str; 13] = [
    "-p",
    "--output-format",
    "stream-json",
    "--verbose",
    "--permission-mode",
    "acceptEdits",
    "--model",
    "claude-sonnet-4-5",
    "--allowedTools",
    "Bash(git status:*)",
    "Edit",
    "--disallowedTools",
    "WebFetch",
];

#[test]
fn permission_flags_are_passed_on_every_turn_including_continuations() {
    let sb = Sandbox::new("perm-cont");
    let mut s = start(&sb, &replay(&sb, 20_000, "a_text", &[]), None);
    for (turn, prompt) in [(1, "first"), (2, "second"), (3, "third")] {
        assert!(run(s.as_mut(), prompt).result.is_ok(), "turn {turn}");
        let a = argv(&sb);
        assert_eq!(a[..POSTURE.len()], POSTURE, "turn {turn}: {a:?}");
        let rest: Vec<&str> = a[POSTURE.len()..].iter().map(String::as_str).collect();
        let resume = format!("--resume={}", s.agent_session_id().unwrap());
        let mut expected = vec!["--append-system-prompt", "be brief"];
        if turn > 1 {
            expected.push(&resume);
        }
        expected.extend(["--max-turns", "30", "--", prompt]);
        assert_eq!(rest, expected, "turn {turn}");
    }
}

#[test]
fn a_permission_mode_baton_does_not_know_is_passed_through_verbatim() {
    let sb = Sandbox::new("perm-mode");
    let wf = sb.file("WORKFLOW.md");
    std::fs::write(
        &wf,
        "---\nclaude_code:\n  permission_mode: someFutureMode\n---\nWork.\n",
    )
    .unwrap();
    let loaded = load_workflow(&wf, &TestEnv::none()).expect("no enum to reject it");
    let mode = loaded.config.config.claude_code.permission_mode.clone();
    assert_eq!(mode, "someFutureMode");
    let fixture = format!(
        "{}/fixtures/claude/a_text.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    let r = ClaudeRunner::new(baton::workflow::config::ClaudeCodeConfig {
        permission_mode: mode,
        ..cfg(20_000)
    })
    .with_env("HOME", &sb.home)
    .with_env("FAKE_CLAUDE_MODE", "replay")
    .with_env("FAKE_CLAUDE_FIXTURE", fixture)
    .with_env("FAKE_CLAUDE_ARGS_FILE", sb.file("args.json"))
    .with_kill_grace(Duration::from_millis(300));
    assert!(run(start(&sb, &r, None).as_mut(), "x").result.is_ok());
    let a = argv(&sb);
    let i = a.iter().position(|x| x == "--permission-mode").unwrap();
    assert_eq!(a[i + 1], "someFutureMode");
}
