//! The Codex adapter against the real `@openai/codex@0.169.0` app-server, fully offline: a
//! private `CODEX_HOME` whose `config.toml` points a custom provider at the scripted fake
//! Responses API in `tests/it/support/fake_responses.rs`, with a temp `HOME`.
//!
//! Needs `BATON_CODEX_BIN` (set by `.ci/setup-codex.sh`); the tests are ignored unless run with
//! `--include-ignored`, where a missing CLI fails them.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use baton::agent::codex::CodexRunner;
use baton::agent::{
    AgentErrorKind, AgentEventKind, AgentRunner, AgentSession, CancelToken, SessionContext,
};
use baton::workflow::config::{CliSection, CodexConfig};

use crate::support::agent::{run, run_with, summaries, Knobs, Sandbox, Turn};
use crate::support::fake_responses::{usage_for, FakeResponses};
use crate::support::procs;
#[cfg(feature = "ssh")]
use crate::support::sshd;
use crate::support::tempdir::TempDir;

/// One CLI at a time: the shared CI box has two cores.
static SERIAL: Mutex<()> = Mutex::new(());

/// One test's world: the CLI, the fake model, a sandbox with `CODEX_HOME`, holding [`SERIAL`].
struct Lab {
    sb: Sandbox,
    /// `CODEX_HOME`, outside `/tmp`: Codex refuses to create its sandbox helper under `/tmp`.
    home: TempDir,
    fake: FakeResponses,
    bin: PathBuf,
    _serial: MutexGuard<'static, ()>,
}

impl Lab {
    fn new(tag: &str, retries: bool) -> Lab {
        let bin = crate::support::tool::required("BATON_CODEX_BIN", ".ci/setup-codex.sh");
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let fake = FakeResponses::start();
        let sb = Sandbox::new(tag);
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("codex-{}-{tag}", std::process::id()));
        let home = TempDir(dir);
        std::fs::create_dir_all(&home.0).unwrap();
        std::fs::write(home.join("config.toml"), fake.codex_config(retries)).unwrap();
        Lab {
            sb,
            home,
            fake,
            bin,
            _serial: serial,
        }
    }

    /// Baton's defaults (`never`, `workspace-write`) with a 60 s silence bound.
    fn config(&self) -> CodexConfig {
        CodexConfig {
            cli: CliSection {
                turn_timeout_ms: 60_000,
                stall_timeout_ms: 60_000,
                ..CliSection::new(format!("'{}' app-server", self.bin.display()))
            },
            approval_policy: "never".into(),
            thread_sandbox: "workspace-write".into(),
            turn_sandbox_policy: None,
            read_timeout_ms: 20_000,
        }
    }

    /// A session of `cfg` (resuming `thread` if given) in the offline environment.
    fn start(&self, cfg: CodexConfig, thread: Option<&str>) -> Box<dyn AgentSession> {
        self.start_in(cfg, &self.sb.ctx(thread))
    }

    /// A session of `cfg` for `ctx` (e.g. on another host) in the offline environment.
    fn start_in(&self, cfg: CodexConfig, ctx: &SessionContext) -> Box<dyn AgentSession> {
        CodexRunner::new(cfg)
            .with_env("HOME", &self.sb.home)
            .with_env("CODEX_HOME", &self.home.0)
            .with_env("FAKE_OPENAI_API_KEY", "dummy")
            .without_env("OPENAI_API_KEY")
            .start_session(ctx)
            .unwrap()
    }

    fn session(&self) -> Box<dyn AgentSession> {
        self.start(self.config(), None)
    }
}

/// The usage delta of a completed turn.
fn usage(t: &Turn) -> baton::agent::TokenUsage {
    t.completed()
        .usage_delta
        .expect("the terminal event carries usage")
}

/// The fake's usage for one call, as Baton normalizes it (cached input apart).
fn call_usage(p: u64, tools: u64) -> (u64, u64, u64) {
    let (input, cached, output) = usage_for(p, tools);
    (input - cached, cached, output)
}

#[test]
#[ignore = "needs the real codex CLI (BATON_CODEX_BIN, .ci/setup-codex.sh)"]
fn codex_real_cli_turn_runs_a_command() {
    let lab = Lab::new("codex-cmd", true);
    let mut session = lab.session();
    let t = run(
        session.as_mut(),
        "SCENARIO:shell put a file in the workspace",
    );
    t.ok();
    let written = std::fs::read_to_string(lab.sb.ws.join("codex-wrote.txt")).unwrap();
    assert_eq!(written.trim(), "baton-was-here");
    let thread = session.agent_session_id().expect("the thread id");
    let started = t.only(AgentEventKind::SessionStarted);
    assert_eq!(
        started.session_id.as_deref(),
        Some(format!("{thread}-1").as_str())
    );
    assert!(started.summary.contains("started"), "{}", started.summary);
    let tools = summaries(&t.events, AgentEventKind::ToolUse);
    assert!(
        tools
            .iter()
            .any(|s| s.starts_with("commandExecution: ") && s.contains("codex-wrote.txt")),
        "{tools:?}"
    );
    assert!(t
        .assistant_text()
        .starts_with("Done. The command output was:"));
    // Two model calls (the command, then the answer), each counted once.
    let (a, b) = (call_usage(1, 0), call_usage(1, 1));
    let u = usage(&t);
    assert_eq!(
        (u.input_tokens, u.cache_read_input_tokens, u.output_tokens),
        (a.0 + b.0, a.1 + b.1, a.2 + b.2)
    );
    // The rate-limit headers reach agent_rate_limits.
    let rl = t
        .events
        .iter()
        .find_map(|e| e.rate_limits.clone())
        .expect("a rate-limit event");
    assert_eq!(rl.rate_limit_type.as_deref(), Some("primary"));
    assert!(
        rl.utilization.is_some_and(|u| (0.4..0.45).contains(&u)),
        "{rl:?}"
    );
    let reqs = lab.fake.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs
        .iter()
        .all(|r| r.has_bearer && r.thread.as_deref() == Some(thread.as_str())));
}

#[test]
#[ignore = "needs the real codex CLI (BATON_CODEX_BIN, .ci/setup-codex.sh)"]
fn codex_real_cli_continuation_resumes_thread() {
    let lab = Lab::new("codex-cont", true);
    let mut session = lab.session();
    let t1 = run(session.as_mut(), "first turn: remember BANANA");
    t1.ok();
    let thread = session.agent_session_id().unwrap();
    let t2 = run(session.as_mut(), "second turn");
    t2.ok();
    assert_eq!(session.agent_session_id().as_deref(), Some(thread.as_str()));
    let started = t2.only(AgentEventKind::SessionStarted);
    assert_eq!(
        started.session_id.as_deref(),
        Some(format!("{thread}-2").as_str())
    );
    assert!(started.summary.contains("resumed"), "{}", started.summary);
    assert!(
        t2.assistant_text().contains("seen 2 user prompt(s)"),
        "{}",
        t2.debug()
    );
    // The resume replays the thread's earlier usage; only turn 2's own call is counted.
    let (u1, u2) = (usage(&t1), usage(&t2));
    assert_eq!(
        u1.input_tokens + u1.cache_read_input_tokens,
        usage_for(1, 0).0
    );
    let (input, cached, output) = usage_for(2, 0);
    assert_eq!(
        (
            u2.input_tokens + u2.cache_read_input_tokens,
            u2.output_tokens
        ),
        (input, output)
    );
    assert_eq!(u2.cache_read_input_tokens, cached);
    let reqs = lab.fake.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs
        .iter()
        .all(|r| r.thread.as_deref() == Some(thread.as_str())));
}

#[test]
#[ignore = "needs the real codex CLI (BATON_CODEX_BIN, .ci/setup-codex.sh)"]
fn codex_restart_resumes_thread() {
    let lab = Lab::new("codex-restart", true);
    let thread = {
        let mut before = lab.session();
        run(before.as_mut(), "before the restart").ok();
        before.agent_session_id().unwrap()
    };
    // A restarted Baton starts a new session with the recorded thread id (the worker passes it as
    // `resume_session_id`).
    let mut after = lab.start(lab.config(), Some(&thread));
    let t = run(after.as_mut(), "after the restart");
    t.ok();
    assert_eq!(after.agent_session_id().as_deref(), Some(thread.as_str()));
    assert!(t.assistant_text().contains("seen 2 user prompt(s)"));
    assert_eq!(
        usage(&t).input_tokens + usage(&t).cache_read_input_tokens,
        usage_for(2, 0).0,
        "counted once"
    );
    // A thread Codex does not know falls back once to a new thread, in the same process.
    let stale = "01a231d6-0000-7000-8000-0000000000ff";
    let mut unknown = lab.start(lab.config(), Some(stale));
    let t = run(unknown.as_mut(), "hello again");
    t.ok();
    let fresh = unknown.agent_session_id().unwrap();
    assert_ne!(fresh, stale);
    assert!(t
        .of_kind(AgentEventKind::Notification)
        .iter()
        .any(|e| e.summary.contains("resume of thread") && e.summary.contains(stale)));
    assert!(t.assistant_text().contains("seen 1 user prompt(s)"));
}

#[test]
#[ignore = "needs the real codex CLI (BATON_CODEX_BIN, .ci/setup-codex.sh)"]
fn codex_api_error_fails_the_turn() {
    let lab = Lab::new("codex-err", false);
    let mut session = lab.session();
    let t = run(session.as_mut(), "SCENARIO:err401");
    let err = t.err();
    assert_eq!(err.kind, AgentErrorKind::TurnFailed, "{err}");
    assert!(err.message.contains("401"), "{err}");
    assert_eq!(t.last_kind(), Some(AgentEventKind::TurnFailed));
    // The retry (the next turn on the same thread) works.
    let retry = run(session.as_mut(), "try again");
    retry.ok();
    assert!(retry.assistant_text().contains("seen 2 user prompt(s)"));
}

#[test]
#[ignore = "needs the real codex CLI (BATON_CODEX_BIN, .ci/setup-codex.sh)"]
fn codex_stall_leaves_no_process() {
    let lab = Lab::new("codex-stall", true);
    let mut session = lab.session();
    let cancel = CancelToken::new();
    let c = cancel.clone();
    // The engine's stall timer cancels through the token; cancel once the model streams.
    let t = run_with(session.as_mut(), "SCENARIO:slow", &cancel, |e| {
        if e.summary == "assistant delta" {
            c.cancel();
        }
    });
    assert_eq!(t.err().kind, AgentErrorKind::TurnCancelled);
    assert!(
        procs::wait_group_gone(t.pid() as i32, Duration::from_secs(10)),
        "the app-server's group is gone"
    );
    // The silence bound (codex.turn_timeout_ms) stops a server that goes quiet.
    let mut cfg = lab.config();
    cfg.cli.turn_timeout_ms = 1500;
    let t = run(lab.start(cfg, None).as_mut(), "SCENARIO:sleep");
    assert_eq!(t.err().kind, AgentErrorKind::TurnTimeout, "{}", t.debug());
    assert!(procs::wait_group_gone(
        t.pid() as i32,
        Duration::from_secs(10)
    ));
}

/// Turn start latency of the codex adapter: median of 20 first turns, from `run_turn` to the
/// first event, to `session_started` and to the turn's end. Run with
/// `scripts/bench/agent_latency.sh`; the figures are printed, never asserted.
#[test]
#[ignore = "benchmark: run scripts/bench/agent_latency.sh"]
fn bench_codex_turn_start_latency() {
    let lab = Lab::new("codex-bench", true);
    let [first, started, turn] = crate::support::agent::turn_start_latency(20, || lab.session());
    println!("codex: median of 20 turns: first event {first:.0} ms, session_started {started:.0} ms, turn {turn:.0} ms");
}

#[test]
#[ignore = "needs bwrap and the real codex CLI (BATON_BWRAP, BATON_CODEX_BIN)"]
fn codex_real_cli_runs_in_the_sandbox() {
    crate::support::tool::required("BATON_BWRAP", ".ci/setup-sandbox.sh");
    let lab = Lab::new("codex-sb", true);
    // Under the sandbox the CLI's home is per issue; its config comes from ~/.codex. Codex's own
    // sandbox needs user namespaces, which Baton's sandbox withholds: Baton's is the boundary.
    std::fs::create_dir_all(lab.sb.home.join(".codex")).unwrap();
    std::fs::copy(
        lab.home.join("config.toml"),
        lab.sb.home.join(".codex/config.toml"),
    )
    .unwrap();
    let mut cfg = lab.config();
    cfg.thread_sandbox = "danger-full-access".into();
    // The default command, with `codex` on PATH as a link in the (hidden) HOME.
    lab.sb.put_on_path("codex", &lab.bin);
    cfg.cli.command = "codex app-server".into();
    let sandbox = baton::host::sandbox::Sandbox::new(
        baton::host::sandbox::SandboxConfig {
            bubblewrap: true,
            ..Default::default()
        },
        baton::workflow::config::AgentKind::Codex.cli_home(),
        &cfg.cli.command,
    );
    let mut session = CodexRunner::new(cfg)
        .with_sandbox(Some(std::sync::Arc::new(sandbox)))
        .with_env("HOME", &lab.sb.home)
        .with_env("FAKE_OPENAI_API_KEY", "dummy")
        .start_session(&lab.sb.ctx(None))
        .unwrap();
    let t = run(
        session.as_mut(),
        "SCENARIO:shell put a file in the workspace",
    );
    t.ok();
    let written = std::fs::read_to_string(lab.sb.ws.join("codex-wrote.txt")).unwrap();
    assert_eq!(written.trim(), "baton-was-here");
    // The thread lives in the issue's own CLI home.
    assert!(lab.sb.root.join(".agent-ws/codex/sessions").is_dir());
}

/// Codex on an SSH worker host (a loopback `sshd`): the app-server's JSON-RPC travels over the
/// connection's stdin, and a turn runs a command in the workspace. When the connection drops in
/// the middle of a turn (sshd killed while the command runs), the turn ends at once and nothing
/// of it is left on the host: the server saw EOF, exited, and the wrapper ended its group.
#[test]
#[cfg(feature = "ssh")]
#[ignore = "needs the real codex CLI and OpenSSH's sshd (BATON_CODEX_BIN, BATON_SSHD)"]
fn codex_real_cli_runs_on_an_ssh_host() {
    crate::support::tool::required("BATON_SSHD", ".ci/setup-ssh.sh");
    let lab = Lab::new("codex-ssh", true);
    let mut ssh = sshd::Lab::start("codex-ssh", 1, &[]);
    let mut ctx = lab.sb.ctx(None);
    ctx.host = std::sync::Arc::new(ssh.host("h1"));
    let mut session = lab.start_in(lab.config(), &ctx);
    let t = run(
        session.as_mut(),
        "SCENARIO:shell put a file in the workspace",
    );
    t.ok();
    let written = std::fs::read_to_string(lab.sb.ws.join("codex-wrote.txt")).unwrap();
    assert_eq!(written.trim(), "baton-was-here");
    assert!(procs::wait_group_gone(
        t.pid() as i32,
        Duration::from_secs(10)
    ));

    // The next turn resumes the thread; sshd dies while its command (`sleep 30`) runs.
    let server = ssh.servers[0].pid().unwrap();
    let mut sleeps = vec![];
    let t = run_with(
        session.as_mut(),
        "SCENARIO:sleep",
        &CancelToken::new(),
        |e| {
            if e.kind != AgentEventKind::ToolUse || !sleeps.is_empty() {
                return;
            }
            let start = std::time::Instant::now();
            while sleeps.is_empty() && start.elapsed() < Duration::from_secs(10) {
                sleeps = sshd::descendants(server)
                    .into_iter()
                    .filter(|p| {
                        let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
                        cmd == b"sleep\x0030\x00"
                    })
                    .collect();
                std::thread::sleep(Duration::from_millis(50));
            }
            ssh.servers[0].kill_hard();
        },
    );
    assert!(
        !sleeps.is_empty(),
        "the command ran on the host: {}",
        t.debug()
    );
    let err = t.err();
    assert_eq!(
        err.kind,
        AgentErrorKind::ProcessExit,
        "{err}\n{}",
        t.debug()
    );
    assert!(t.elapsed < Duration::from_secs(30), "{:?}", t.elapsed);
    assert!(
        procs::wait_group_gone(t.pid() as i32, Duration::from_secs(10)),
        "the app-server's group is gone"
    );
    for p in sleeps {
        assert!(
            procs::wait_pid_gone(p, Duration::from_secs(10)),
            "sleep {p}"
        );
    }
}
