//! The Claude adapter against a fake `claude` (tests/it/support/fake_claude.py): replays captured
//! transcripts, floods, hangs, garbage and huge lines, ignored SIGTERM, a grandchild holding stdout,
//! and a prompt full of shell metacharacters. Every turn ends within its deadline and leaves no
//! process behind.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use baton::agent::claude::ClaudeRunner;
use baton::agent::{
    AgentError, AgentErrorKind, AgentEvent, AgentEventKind, AgentRunner, AgentSession, CancelToken,
    SessionContext,
};
use baton::workflow::config::ClaudeCodeConfig;

static COUNTER: AtomicU32 = AtomicU32::new(0);

struct Env {
    root: PathBuf,
    ws: PathBuf,
}

impl Env {
    fn new(tag: &str) -> Env {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let root = std::env::temp_dir().join(format!(
            "baton-claude-proc-{}-{tag}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        let ws = root.join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        Env {
            root: root.canonicalize().unwrap(),
            ws: ws.canonicalize().unwrap(),
        }
    }
    fn file(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }
    fn ctx(&self) -> SessionContext {
        SessionContext {
            issue_identifier: "acme/repo#7".into(),
            workspace: self.ws.clone(),
            workspace_root: self.root.clone(),
            resume_session_id: None,
            host: baton::host::LocalHost::shared(),
        }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn fake_command() -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/support/fake_claude.py");
    format!("python3 '{}'", script.display())
}

fn cfg(turn_timeout_ms: u64) -> ClaudeCodeConfig {
    ClaudeCodeConfig {
        command: fake_command(),
        model: Some("claude-sonnet-4-5".into()),
        permission_mode: "acceptEdits".into(),
        allowed_tools: vec!["Bash(git status:*)".into(), "Edit".into()],
        disallowed_tools: vec!["WebFetch".into()],
        append_system_prompt: Some("be brief".into()),
        extra_args: vec!["--max-turns".into(), "30".into()],
        turn_timeout_ms,
        stall_timeout_ms: 300_000,
    }
}

fn runner(turn_timeout_ms: u64, env: Vec<(&str, String)>) -> ClaudeRunner {
    // `bash -lc` must not read the real HOME's profile (a shell killed mid-profile, e.g. during a
    // pyenv rehash, leaves state behind that stalls every later login shell).
    let home = (
        "HOME".to_string(),
        std::env::temp_dir().display().to_string(),
    );
    ClaudeRunner::new(cfg(turn_timeout_ms))
        .with_envs(
            std::iter::once(home)
                .chain(env.into_iter().map(|(k, v)| (k.to_string(), v)))
                .collect(),
        )
        .with_kill_grace(Duration::from_millis(300))
}

fn fixture(name: &str) -> String {
    format!(
        "{}/fixtures/claude/{name}.jsonl",
        env!("CARGO_MANIFEST_DIR")
    )
}

struct Turn {
    result: Result<(), AgentError>,
    events: Vec<AgentEvent>,
    elapsed: Duration,
}

fn run(session: &mut dyn AgentSession, prompt: &str, cancel: &CancelToken) -> Turn {
    let mut events = Vec::new();
    let start = Instant::now();
    let result = session.run_turn(prompt, cancel, &mut |e| events.push(e));
    Turn {
        result,
        events,
        elapsed: start.elapsed(),
    }
}

/// The final assistant text of a successful turn, as its `turn_completed` summary ends with it
/// (`turn N completed in M ms: <text>`).
fn result_text(t: &Turn) -> Option<&str> {
    assert!(t.result.is_ok(), "{:?}", t.result);
    let last = t.events.last().expect("a terminal event");
    assert_eq!(last.kind, AgentEventKind::TurnCompleted, "{:?}", kinds(t));
    last.summary.split_once(" ms: ").map(|(_, text)| text)
}

fn kinds(t: &Turn) -> Vec<AgentEventKind> {
    t.events.iter().map(|e| e.kind).collect()
}

fn read_args(env: &Env) -> serde_json::Value {
    let s = std::fs::read_to_string(env.file("args.json")).expect("fake recorded its args");
    serde_json::from_str(&s).unwrap()
}

/// True when `pid` is gone or a zombie of someone else (i.e. not running any more).
fn is_dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .map(|rest| rest.trim_start().starts_with('Z') || rest.trim_start().starts_with('X'))
            .unwrap_or(false),
    }
}

/// Our own child `pid` has been reaped (waitpid says it is not our child any more).
fn reaped(pid: u32) -> bool {
    let r = unsafe { libc::waitpid(pid as i32, std::ptr::null_mut(), libc::WNOHANG) };
    r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD)
}

fn pid_of(t: &Turn) -> u32 {
    t.events
        .iter()
        .find_map(|e| e.agent_pid)
        .expect("events carry agent_pid")
}

#[test]
fn replays_a_resume_pair_with_delays() {
    let env = Env::new("resume");
    let r = runner(
        20_000,
        vec![
            ("FAKE_CLAUDE_MODE", "replay".into()),
            ("FAKE_CLAUDE_FIXTURE", fixture("d_resume.first")),
            ("FAKE_CLAUDE_DELAY_MS", "20".into()),
            (
                "FAKE_CLAUDE_ARGS_FILE",
                env.file("args.json").display().to_string(),
            ),
        ],
    );
    let mut s = r.start_session(&env.ctx()).unwrap();
    let cancel = CancelToken::new();
    let t1 = run(s.as_mut(), "first prompt", &cancel);
    t1.result.as_ref().expect("turn 1 ok");
    let id = s.agent_session_id().expect("session id from init");
    assert_eq!(t1.events[0].kind, AgentEventKind::SessionStarted);
    assert_eq!(t1.events[0].session_id, Some(format!("{id}-1")));
    let last = t1.events.last().unwrap();
    assert_eq!(last.kind, AgentEventKind::TurnCompleted);
    assert_eq!(last.session_id, Some(format!("{id}-1")));
    assert_eq!(last.usage_delta.unwrap().input_tokens, 2100);
    assert_eq!(last.session_cost_usd, Some(0.0094));
    // Only the terminal event carries usage.
    assert_eq!(
        t1.events.iter().filter(|e| e.usage_delta.is_some()).count(),
        1
    );
    assert!(reaped(pid_of(&t1)));

    // Turn 1: full flag set, no --resume, prompt after `--`.
    let a = read_args(&env);
    let argv: Vec<String> = serde_json::from_value(a["argv"].clone()).unwrap();
    let expected: Vec<&str> = vec![
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
        "--append-system-prompt",
        "be brief",
        "--max-turns",
        "30",
        "--",
        "first prompt",
    ];
    assert_eq!(argv, expected);
    assert_eq!(a["cwd"], env.ws.display().to_string());
    assert_eq!(a["env"]["API_TIMEOUT_MS"], "120000");
    assert_eq!(a["env"]["CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS"], "120000");
    assert_eq!(a["env"]["BATON_ISSUE_IDENTIFIER"], "acme/repo#7");

    // Turn 2 resumes the same session (the fake replays the captured resume run).
    drop(s);
    let r = runner(
        20_000,
        vec![
            ("FAKE_CLAUDE_MODE", "replay".into()),
            ("FAKE_CLAUDE_FIXTURE", fixture("d_resume")),
            (
                "FAKE_CLAUDE_ARGS_FILE",
                env.file("args.json").display().to_string(),
            ),
        ],
    );
    let mut ctx = env.ctx();
    ctx.resume_session_id = Some(id.clone());
    let mut s = r.start_session(&ctx).unwrap();
    let t2 = run(s.as_mut(), "continue", &cancel);
    assert!(t2.result.is_ok(), "{:?}", t2.result);
    let argv: Vec<String> = serde_json::from_value(read_args(&env)["argv"].clone()).unwrap();
    let i = argv.iter().position(|a| a == "--resume").expect("--resume");
    assert_eq!(argv[i + 1], id);
    assert_eq!(argv.last().unwrap(), "continue");
    assert_eq!(s.agent_session_id(), Some(id));
}

#[test]
fn continuation_turns_resume_and_increment_turn_number() {
    let env = Env::new("cont");
    let r = runner(
        20_000,
        vec![
            ("FAKE_CLAUDE_MODE", "replay".into()),
            ("FAKE_CLAUDE_FIXTURE", fixture("a_text")),
            (
                "FAKE_CLAUDE_ARGS_FILE",
                env.file("args.json").display().to_string(),
            ),
        ],
    );
    let mut s = r.start_session(&env.ctx()).unwrap();
    let cancel = CancelToken::new();
    let t1 = run(s.as_mut(), "p1", &cancel);
    assert!(t1.result.is_ok());
    assert!(!read_args(&env)["argv"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a == "--resume"));
    let t2 = run(s.as_mut(), "p2", &cancel);
    assert!(t2.result.is_ok());
    let sid = "9b329807-06e5-4f01-8184-11d256192ad9";
    assert!(kinds(&t2)
        .iter()
        .all(|k| *k != AgentEventKind::SessionStarted));
    assert!(t2
        .events
        .iter()
        .all(|e| e.session_id.as_deref() == Some(&*format!("{sid}-2"))));
    let argv: Vec<String> = serde_json::from_value(read_args(&env)["argv"].clone()).unwrap();
    let i = argv.iter().position(|a| a == "--resume").expect("--resume");
    assert_eq!(argv[i + 1], sid);
}

#[test]
fn api_error_transcript_with_exit_1_is_turn_failed() {
    let env = Env::new("apierr");
    let r = runner(
        20_000,
        vec![
            ("FAKE_CLAUDE_MODE", "replay".into()),
            ("FAKE_CLAUDE_FIXTURE", fixture("e_api_error_529")),
            ("FAKE_CLAUDE_EXIT", "1".into()),
        ],
    );
    let mut s = r.start_session(&env.ctx()).unwrap();
    let t = run(s.as_mut(), "x", &CancelToken::new());
    let e = t.result.unwrap_err();
    assert_eq!(e.kind, AgentErrorKind::TurnFailed);
    assert!(e.message.contains("api_error_status=529"), "{}", e.message);
    assert_eq!(t.events.last().unwrap().kind, AgentEventKind::TurnFailed);
}

#[test]
fn prompt_with_shell_metacharacters_runs_nothing() {
    let env = Env::new("inject");
    let prompt = "Fix $(touch pwned1) and `touch pwned2` ; touch pwned3 && touch pwned4\n\
                  'single' \"double\" $HOME ${PATH} \\ | > pwned5 < /dev/null &\n--help -p --resume x";
    let r = runner(
        20_000,
        vec![
            ("FAKE_CLAUDE_MODE", "replay".into()),
            ("FAKE_CLAUDE_FIXTURE", fixture("a_text")),
            (
                "FAKE_CLAUDE_ARGS_FILE",
                env.file("args.json").display().to_string(),
            ),
        ],
    );
    let mut s = r.start_session(&env.ctx()).unwrap();
    let t = run(s.as_mut(), prompt, &CancelToken::new());
    assert!(t.result.is_ok(), "{:?}", t.result);
    let argv: Vec<String> = serde_json::from_value(read_args(&env)["argv"].clone()).unwrap();
    assert_eq!(argv.last().unwrap(), prompt, "prompt arrives verbatim");
    assert_eq!(argv[argv.len() - 2], "--");
    for dir in [&env.ws, &env.root] {
        for n in 1..=5 {
            assert!(!dir.join(format!("pwned{n}")).exists(), "pwned{n} created");
        }
    }
}

#[test]
fn stdin_is_dev_null() {
    let env = Env::new("stdin");
    let r = runner(10_000, vec![("FAKE_CLAUDE_MODE", "stdin".into())]);
    let mut s = r.start_session(&env.ctx()).unwrap();
    let t = run(s.as_mut(), "x", &CancelToken::new());
    assert_eq!(result_text(&t), Some("stdin-eof"));
}

#[test]
fn flood_of_output_is_consumed() {
    let env = Env::new("flood");
    let r = runner(
        60_000,
        vec![
            ("FAKE_CLAUDE_MODE", "flood".into()),
            ("FAKE_CLAUDE_LINES", "50000".into()),
        ],
    );
    let mut s = r.start_session(&env.ctx()).unwrap();
    let mut n = 0usize;
    let res = s.run_turn("x", &CancelToken::new(), &mut |e| {
        if e.kind == AgentEventKind::Notification {
            n += 1;
        }
    });
    assert!(res.is_ok(), "{res:?}");
    assert_eq!(n, 50_000);
}

#[test]
fn garbage_lines_are_malformed_and_the_turn_still_completes() {
    let env = Env::new("garbage");
    let r = runner(10_000, vec![("FAKE_CLAUDE_MODE", "garbage".into())]);
    let mut s = r.start_session(&env.ctx()).unwrap();
    let t = run(s.as_mut(), "x", &CancelToken::new());
    assert_eq!(result_text(&t), Some("survived garbage"));
    let malformed = t
        .events
        .iter()
        .filter(|e| e.kind == AgentEventKind::Malformed)
        .count();
    assert_eq!(malformed, 4, "{:?}", kinds(&t));
}

#[test]
fn huge_line_is_skipped_with_a_malformed_event() {
    let env = Env::new("huge");
    let r = runner(
        30_000,
        vec![
            ("FAKE_CLAUDE_MODE", "huge".into()),
            ("FAKE_CLAUDE_HUGE_BYTES", (3 * 1024 * 1024).to_string()),
        ],
    )
    .with_max_line_bytes(1024 * 1024);
    let mut s = r.start_session(&env.ctx()).unwrap();
    let t = run(s.as_mut(), "x", &CancelToken::new());
    assert_eq!(result_text(&t), Some("survived huge line"));
    let m: Vec<_> = t
        .events
        .iter()
        .filter(|e| e.kind == AgentEventKind::Malformed)
        .collect();
    assert_eq!(m.len(), 1);
    assert!(m[0].summary.contains("3145728 bytes"), "{}", m[0].summary);
}

#[test]
fn default_line_bound_is_10mb() {
    let env = Env::new("huge10");
    let r = runner(60_000, vec![("FAKE_CLAUDE_MODE", "huge".into())]);
    let mut s = r.start_session(&env.ctx()).unwrap();
    let t = run(s.as_mut(), "x", &CancelToken::new());
    assert!(t.result.is_ok());
    assert!(t
        .events
        .iter()
        .any(|e| e.kind == AgentEventKind::Malformed && e.summary.contains("12582912 bytes")));
}

#[test]
fn hang_hits_the_turn_timeout_and_the_group_is_killed() {
    let env = Env::new("hang");
    let r = runner(800, vec![("FAKE_CLAUDE_MODE", "hang".into())]);
    let mut s = r.start_session(&env.ctx()).unwrap();
    let t = run(s.as_mut(), "x", &CancelToken::new());
    let e = t.result.as_ref().unwrap_err();
    assert_eq!(e.kind, AgentErrorKind::TurnTimeout);
    assert_eq!(kinds(&t).first(), Some(&AgentEventKind::SessionStarted));
    assert_eq!(t.events.last().unwrap().kind, AgentEventKind::TurnFailed);
    assert!(t.elapsed < Duration::from_secs(10), "{:?}", t.elapsed);
    assert!(reaped(pid_of(&t)));
}

#[test]
fn closed_stdout_but_running_process_still_hits_the_deadline() {
    let env = Env::new("closeout");
    let r = runner(800, vec![("FAKE_CLAUDE_MODE", "close_stdout_hang".into())]);
    let mut s = r.start_session(&env.ctx()).unwrap();
    let t = run(s.as_mut(), "x", &CancelToken::new());
    assert_eq!(
        t.result.as_ref().unwrap_err().kind,
        AgentErrorKind::TurnTimeout
    );
    assert!(t.elapsed < Duration::from_secs(10), "{:?}", t.elapsed);
    assert!(reaped(pid_of(&t)));

    // The same, stopped by a cancel instead of the deadline.
    let r = runner(
        60_000,
        vec![("FAKE_CLAUDE_MODE", "close_stdout_hang".into())],
    );
    let mut s = r.start_session(&env.ctx()).unwrap();
    let cancel = CancelToken::new();
    let c = cancel.clone();
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        c.cancel();
    });
    let t = run(s.as_mut(), "x", &cancel);
    canceller.join().unwrap();
    assert_eq!(
        t.result.as_ref().unwrap_err().kind,
        AgentErrorKind::TurnCancelled
    );
    assert_eq!(t.events.last().unwrap().kind, AgentEventKind::TurnCancelled);
    assert!(t.elapsed < Duration::from_secs(10), "{:?}", t.elapsed);
    assert!(reaped(pid_of(&t)));
}

#[test]
fn cancel_stops_a_process_that_ignores_sigterm() {
    let env = Env::new("ignterm");
    let r = runner(60_000, vec![("FAKE_CLAUDE_MODE", "ignore_term".into())]);
    let mut s = r.start_session(&env.ctx()).unwrap();
    let cancel = CancelToken::new();
    let c2 = cancel.clone();
    let mut pid = None;
    let start = Instant::now();
    let res = s.run_turn("x", &cancel, &mut |e| {
        pid = pid.or(e.agent_pid);
        if e.kind == AgentEventKind::SessionStarted {
            // Cancel from another thread, as the orchestrator would.
            let c = c2.clone();
            std::thread::spawn(move || c.cancel());
        }
    });
    let elapsed = start.elapsed();
    let e = res.unwrap_err();
    assert_eq!(e.kind, AgentErrorKind::TurnCancelled);
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    let pid = pid.unwrap();
    assert!(reaped(pid));
    assert!(is_dead(pid as i32));
}

#[test]
fn grandchild_holding_stdout_is_killed_and_nothing_lingers() {
    let env = Env::new("grandchild");
    let pid_file = env.file("grandchild.pid");
    let r = runner(
        20_000,
        vec![
            ("FAKE_CLAUDE_MODE", "grandchild".into()),
            ("FAKE_CLAUDE_PID_FILE", pid_file.display().to_string()),
        ],
    );
    let mut s = r.start_session(&env.ctx()).unwrap();
    let t = run(s.as_mut(), "x", &CancelToken::new());
    assert!(t.result.is_ok(), "{:?}", t.result);
    assert!(t.elapsed < Duration::from_secs(10), "{:?}", t.elapsed);
    let gc: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Killed with the group; it may linger briefly as an unreaped zombie of init.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !is_dead(gc) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(is_dead(gc), "grandchild {gc} still running");
    assert!(reaped(pid_of(&t)));
}

#[test]
fn result_and_exit_complete_the_turn_even_if_a_setsid_descendant_holds_stdout() {
    let env = Env::new("setsid");
    let pid_file = env.file("grandchild.pid");
    let r = runner(
        60_000,
        vec![
            ("FAKE_CLAUDE_MODE", "setsid_grandchild".into()),
            ("FAKE_CLAUDE_PID_FILE", pid_file.display().to_string()),
        ],
    );
    let mut s = r.start_session(&env.ctx()).unwrap();
    let t = run(s.as_mut(), "x", &CancelToken::new());
    let gc: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The escaped process is out of any group Baton may signal; the test cleans it up itself.
    unsafe { libc::kill(gc, libc::SIGKILL) };
    assert!(t.result.is_ok(), "{:?}", t.result);
    assert_eq!(t.events.last().unwrap().kind, AgentEventKind::TurnCompleted);
    // Not held until the turn timeout (60 s) by the open pipe.
    assert!(t.elapsed < Duration::from_secs(10), "{:?}", t.elapsed);
    assert!(reaped(pid_of(&t)));
}

#[test]
fn missing_result_line_with_exit_0_is_a_parse_error() {
    let env = Env::new("noresult");
    let r = runner(10_000, vec![("FAKE_CLAUDE_MODE", "noresult".into())]);
    let mut s = r.start_session(&env.ctx()).unwrap();
    let t = run(s.as_mut(), "x", &CancelToken::new());
    assert_eq!(t.result.unwrap_err().kind, AgentErrorKind::ParseError);
}

#[test]
fn missing_command_is_agent_not_found() {
    let env = Env::new("missing");
    let mut c = cfg(10_000);
    c.command = "baton-no-such-claude-binary".into();
    let r = ClaudeRunner::new(c).with_envs(vec![(
        "HOME".into(),
        std::env::temp_dir().display().to_string(),
    )]);
    let mut s = r.start_session(&env.ctx()).unwrap();
    let t = run(s.as_mut(), "x", &CancelToken::new());
    let e = t.result.unwrap_err();
    assert_eq!(e.kind, AgentErrorKind::AgentNotFound);
    assert!(e.message.contains("not found"), "{}", e.message);
    assert_eq!(t.events.last().unwrap().kind, AgentEventKind::StartupFailed);
}

#[test]
fn workspace_outside_root_is_rejected_before_launch() {
    let env = Env::new("outside");
    let other = Env::new("other");
    let mut ctx = env.ctx();
    ctx.workspace = other.ws.clone();
    let e = runner(1000, vec![]).start_session(&ctx).err().unwrap();
    assert_eq!(e.kind, AgentErrorKind::InvalidWorkspaceCwd);
    ctx.workspace = env.root.clone();
    let e = runner(1000, vec![]).start_session(&ctx).err().unwrap();
    assert_eq!(e.kind, AgentErrorKind::InvalidWorkspaceCwd);
}

#[test]
fn operator_set_timeouts_are_not_overridden() {
    let env = Env::new("optimeout");
    let r = runner(
        10_000,
        vec![
            ("FAKE_CLAUDE_MODE", "replay".into()),
            ("FAKE_CLAUDE_FIXTURE", fixture("a_text")),
            (
                "FAKE_CLAUDE_ARGS_FILE",
                env.file("args.json").display().to_string(),
            ),
            ("API_TIMEOUT_MS", "4242".into()),
        ],
    );
    let mut s = r.start_session(&env.ctx()).unwrap();
    assert!(run(s.as_mut(), "x", &CancelToken::new()).result.is_ok());
    let a = read_args(&env);
    assert_eq!(a["env"]["API_TIMEOUT_MS"], "4242");
    assert_eq!(a["env"]["CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS"], "120000");
}
