//! Spec §17.7: the built binary's CLI surface — exit codes and one-line error messages.

use crate::support;
use crate::support::tempdir::TempDir;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::daemon_proc::bare_baton as baton;

#[test]
fn help_documents_usage_and_exit_codes() {
    let out = baton().arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let s = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "--port",
        "--bind",
        "--log-level",
        "PATH-TO-WORKFLOW.md",
        "baton check",
        "EXIT CODES",
        "JOURNAL_STREAM",
    ] {
        assert!(s.contains(needle), "help lacks {needle}");
    }
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["--bogus"][..],
        &["--port", "x"],
        &["a.md", "b.md"],
        &["--log-level", "loud"],
    ] {
        let out = baton().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.starts_with("baton: usage error:"), "{err}");
    }
}

#[test]
fn missing_default_workflow_is_one_line_exit_1() {
    let d = TempDir::new("missing");
    let out = baton().current_dir(&d).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("missing_workflow_file"), "{err}");
    assert!(err.contains("WORKFLOW.md"), "{err}");
    assert!(!err.contains("panicked"));
}

#[test]
fn positional_path_wins_over_cwd_default() {
    let d = TempDir::new("positional");
    // A valid-looking ./WORKFLOW.md in cwd must not be used when a path is given.
    std::fs::write(d.join("WORKFLOW.md"), "---\n- not a map\n---\n").unwrap();
    let other = d.join("other.md");
    std::fs::write(&other, "---\ntracker: [x]\n---\n").unwrap();
    let out = baton().current_dir(&d).arg(&other).output().unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.contains("other.md") && err.contains("tracker must be a map"),
        "{err}"
    );
    // Without the positional path the cwd file is used.
    let out = baton().current_dir(&d).output().unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("workflow_front_matter_not_a_map"), "{err}");
}

/// A `W.md` (in the returned directory) whose tracker section has kind/owner/number and then
/// `rest` (more tracker keys first).
fn workflow_file(tag: &str, rest: &str) -> (TempDir, PathBuf) {
    let dir = TempDir::new(tag);
    let p = dir.join("W.md");
    let text = format!("---\ntracker:\n  kind: github_projects\n  owner: acme\n  project_number: 1\n  {rest}\n---\nx\n");
    std::fs::write(&p, text).unwrap();
    (dir, p)
}

#[test]
fn bad_workflow_gives_one_actionable_line() {
    let (_dir, p) = workflow_file(
        "bad",
        "token: t\nagent:\n  kind: claude_code\n  max_turns: 0",
    );
    let out = baton().arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("agent.max_turns must be a positive integer, got 0"),
        "{err}"
    );
    assert!(err.contains("W.md"), "{err}");
}

#[test]
fn missing_token_fails_startup_without_leaking_anything() {
    let (_dir, p) = workflow_file(
        "notoken",
        "token: $BATON_TEST_UNSET_TOKEN\nagent:\n  kind: claude_code",
    );
    let out = baton()
        .arg(&p)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("missing_tracker_token"), "{err}");
}

/// Wait for the child with a bounded deadline; kill it if it overruns.
fn wait_bounded(
    child: &mut std::process::Child,
    limit: Duration,
) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn workflow_for(dir: &Path, endpoint: &str) -> PathBuf {
    let p = dir.join("WORKFLOW.md");
    std::fs::write(
        &p,
        format!(
            "---\ntracker:\n  kind: github_projects\n  endpoint: {endpoint}\n  owner: acme\n  project_number: 7\n  token: $BATON_CLI_TOKEN\n  timeout_ms: 2000\n  active_states: [Nothing]\nworkspace:\n  root: {}\nagent:\n  kind: claude_code\npolling:\n  interval_ms: 60000\n---\nDo {{{{ issue.title }}}}\n",
            dir.join("ws").display()
        ),
    )
    .unwrap();
    p
}

#[test]
fn unreachable_tracker_fails_startup_with_one_line() {
    let d = TempDir::new("unreachable");
    // A closed local port: project resolution fails at startup.
    let p = workflow_for(&d, "http://127.0.0.1:9/graphql");
    let out = baton()
        .arg(&p)
        .env("BATON_CLI_TOKEN", "tok-secret-123")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("baton: ") && last.contains("github_api_request"),
        "{err}"
    );
    assert!(
        !err.contains("tok-secret-123"),
        "the token never appears: {err}"
    );
}

#[test]
fn sigterm_and_sigint_exit_cleanly_with_code_0() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let d = TempDir::new(&format!("sig{sig}"));
        let github = support::fake_github::FakeGithub::start(
            support::fake_github::BoardFixture::empty("acme", 7),
        );
        let p = workflow_for(&d, &github.endpoint());
        let mut child = baton()
            .arg(&p)
            .env("BATON_CLI_TOKEN", support::fake_github::FAKE_TOKEN)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = child.stderr.take().unwrap();
        // Wait until the daemon logged its startup line, so the handlers are installed.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let mut sent = false;
            while let Ok(n) = stderr.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                if !sent && String::from_utf8_lossy(&buf).contains("event=startup") {
                    sent = true;
                    let _ = tx.send(());
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(20))
            .expect("daemon logged startup");
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(child.id() as i32, sig) };
        let st = wait_bounded(&mut child, Duration::from_secs(20))
            .expect("daemon exits after the signal");
        assert_eq!(st.code(), Some(0), "signal {sig}");
    }
}

fn check_workflow(dir: &Path, endpoint: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/workflows/check-acme.md");
    let text = std::fs::read_to_string(src)
        .unwrap()
        .replace("http://127.0.0.1:9/graphql", endpoint);
    let p = dir.join("WORKFLOW.md");
    std::fs::write(&p, edit(text)).unwrap();
    p
}

/// `baton check <p>` against the fake GitHub: (exit code, stdout).
fn check(p: &Path) -> (Option<i32>, String) {
    let out = baton()
        .arg("check")
        .arg(p)
        .env("BATON_FAKE_GITHUB_TOKEN", support::fake_github::FAKE_TOKEN)
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8(out.stdout).unwrap())
}

#[test]
fn check_subcommand_prints_the_plan_and_flags_misspelled_states() {
    let github = support::fake_github::FakeGithub::from_fixture("fixtures/boards/acme.json");
    let d = TempDir::new("check");
    let p = check_workflow(&d, &github.endpoint(), |t| t);
    let (code, text) = check(&p);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("dispatch order (4 of 9 active issues):"),
        "{text}"
    );
    assert!(text.contains("1. acme__app-2"), "{text}");
    assert!(!text.contains(support::fake_github::FAKE_TOKEN));

    let p = check_workflow(&d, &github.endpoint(), |t| {
        t.replace("[Todo, In Progress]", "[Todo, In Progres]")
    });
    let (code, text) = check(&p);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("In Progres"), "{text}");
    assert!(text.contains("did you mean"), "{text}");
}
