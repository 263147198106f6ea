//! Issue 24, "implemented but untested": Baton §10.1 / §17.5, "permission flags from config are
//! passed on every turn". A child module of `claude_process`, so it shares its fake CLI set-up
//! (every flag configured).

use super::{argv, replay, start};
use crate::support::agent::{run, Sandbox};

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
