//! Shared helpers of the agent adapter tests: a sandbox (workspace root, workspace, HOME), one
//! turn's result and events, the Claude config with Baton's defaults, and the server plumbing of the
//! fake model APIs. Needs only `tempdir` from `support`: test binaries outside `tests/it/` include
//! both with `#[path = "it/support/tempdir.rs"] mod tempdir;` and
//! `#[path = "it/support/agent.rs"] mod agent;`.
#![allow(dead_code)]

use super::tempdir::TempDir;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use baton::agent::runner::CliRunner;
use baton::agent::{
    AgentError, AgentEvent, AgentEventKind, AgentSession, CancelToken, SessionContext,
};
use baton::workflow::config::{ClaudeCodeConfig, CliSection};
use serde_json::Value;

/// The runner's test knobs as builder calls.
pub trait Knobs: Sized {
    /// An extra environment variable for every CLI process (it wins over Baton's own).
    fn with_env(self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self;
    /// Remove an inherited environment variable from every CLI process (e.g. `GH_TOKEN`).
    fn without_env(self, key: impl Into<OsString>) -> Self;
    /// Grace between SIGTERM and SIGKILL when a turn is stopped (default 3 s).
    fn with_kill_grace(self, grace: Duration) -> Self;
    /// Bound of one stdout line (default 10 MB).
    fn with_max_line_bytes(self, n: usize) -> Self;
}

impl<C> Knobs for CliRunner<C> {
    fn with_env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }
    fn without_env(mut self, key: impl Into<OsString>) -> Self {
        self.env_remove.push(key.into());
        self
    }
    fn with_kill_grace(mut self, grace: Duration) -> Self {
        self.kill_grace = grace;
        self
    }
    fn with_max_line_bytes(mut self, n: usize) -> Self {
        self.max_line_bytes = n;
        self
    }
}

/// The issue every sandbox session works on (the agent sees it as `BATON_ISSUE_IDENTIFIER`).
pub const ISSUE: &str = "acme/repo#7";

/// A temp tree, removed on drop: `<dir>/root` (the workspace root), `<dir>/root/ws` (the
/// workspace) and `<dir>/home` (the agent's HOME, so `bash -lc` never reads the real profile).
/// All paths are canonical.
pub struct Sandbox {
    _tmp: TempDir,
    pub dir: PathBuf,
    pub root: PathBuf,
    pub ws: PathBuf,
    pub home: PathBuf,
}

impl Sandbox {
    /// A fresh tree named after the test's `tag`.
    pub fn new(tag: &str) -> Sandbox {
        let tmp = TempDir::new(tag);
        for sub in ["root/ws", "home"] {
            std::fs::create_dir_all(tmp.join(sub)).unwrap();
        }
        let dir = tmp.canonicalize().unwrap();
        Sandbox {
            _tmp: tmp,
            root: dir.join("root"),
            ws: dir.join("root/ws"),
            home: dir.join("home"),
            dir,
        }
    }

    /// Put `bin` on the login shell's `PATH` as `name`, the way an npm prefix in the HOME does:
    /// `~/.local/bin/<name>` a link to it, added to `PATH` by `~/.profile`.
    pub fn put_on_path(&self, name: &str, bin: &Path) {
        let dir = self.home.join(".local/bin");
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(bin, dir.join(name)).unwrap();
        let profile = format!("PATH={}:$PATH\n", dir.display());
        std::fs::write(self.home.join(".profile"), profile).unwrap();
    }

    /// A scratch path next to the workspace root (outside it).
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The session context for [`ISSUE`] in this workspace, resuming `resume` if given.
    pub fn ctx(&self, resume: Option<&str>) -> SessionContext {
        SessionContext {
            issue_identifier: ISSUE.into(),
            workspace: self.ws.clone(),
            workspace_root: self.root.clone(),
            resume_session_id: resume.map(str::to_owned),
            resume_usage: Default::default(),
            host: baton::host::LocalHost::shared(),
        }
    }
}

/// One finished turn: its result, every event it emitted, and how long it took.
pub struct Turn {
    pub result: Result<(), AgentError>,
    pub events: Vec<AgentEvent>,
    pub elapsed: Duration,
}

/// Run one turn of `prompt` (never cancelled), collecting its events.
pub fn run(session: &mut dyn AgentSession, prompt: &str) -> Turn {
    run_with(session, prompt, &CancelToken::new(), |_| {})
}

/// Run one turn of `prompt` under `cancel`; `on_event` sees each event before it is collected.
pub fn run_with(
    session: &mut dyn AgentSession,
    prompt: &str,
    cancel: &CancelToken,
    mut on_event: impl FnMut(&AgentEvent),
) -> Turn {
    let mut events = Vec::new();
    let start = Instant::now();
    let result = session.run_turn(prompt, cancel, &mut |e| {
        on_event(&e);
        events.push(e);
    });
    Turn {
        result,
        events,
        elapsed: start.elapsed(),
    }
}

impl Turn {
    /// The event kinds, in order.
    pub fn kinds(&self) -> Vec<AgentEventKind> {
        self.events.iter().map(|e| e.kind).collect()
    }

    /// The events of kind `k`, in order.
    pub fn of_kind(&self, k: AgentEventKind) -> Vec<&AgentEvent> {
        of_kind(&self.events, k)
    }

    /// The one event of kind `k` (panics unless there is exactly one).
    pub fn only(&self, k: AgentEventKind) -> &AgentEvent {
        only(&self.events, k)
    }

    /// The kind of the last (terminal) event.
    pub fn last_kind(&self) -> Option<AgentEventKind> {
        self.events.last().map(|e| e.kind)
    }

    /// The agent's pid, from the first event that carries one.
    pub fn pid(&self) -> u32 {
        self.events
            .iter()
            .find_map(|e| e.agent_pid)
            .expect("events carry agent_pid")
    }

    /// The error of a failed turn (panics, with the events, when it succeeded).
    pub fn err(&self) -> &AgentError {
        match &self.result {
            Err(e) => e,
            Ok(()) => panic!("the turn succeeded:\n{}", self.debug()),
        }
    }

    /// Panics, with the error and the events, unless the turn succeeded.
    pub fn ok(&self) -> &Turn {
        if let Err(e) = &self.result {
            panic!("turn failed: {e}\n{}", self.debug());
        }
        self
    }

    /// The `turn_completed` event of a successful turn: it carries the usage delta, the session
    /// cost and (after ` ms: `) the final assistant text.
    pub fn completed(&self) -> &AgentEvent {
        let last = self.ok().events.last().expect("a terminal event");
        assert_eq!(last.kind, AgentEventKind::TurnCompleted, "{}", self.debug());
        last
    }

    /// The final assistant text of a successful turn, as its `turn_completed` summary ends with
    /// it (`turn N completed in M ms: <text>`).
    pub fn result_text(&self) -> Option<&str> {
        self.completed()
            .summary
            .split_once(" ms: ")
            .map(|(_, text)| text)
    }

    /// The last assistant message, from its `assistant: …` notification (panics without one).
    pub fn assistant_text(&self) -> &str {
        assistant_text(&self.events)
            .unwrap_or_else(|| panic!("no assistant message:\n{}", self.debug()))
    }

    /// One line per event (`kind summary`), for assertion messages.
    pub fn debug(&self) -> String {
        self.events
            .iter()
            .map(|e| format!("{} {}", e.kind.as_str(), e.summary))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The events of kind `k`, in order.
pub fn of_kind(events: &[AgentEvent], k: AgentEventKind) -> Vec<&AgentEvent> {
    events.iter().filter(|e| e.kind == k).collect()
}

/// The one event of kind `k` (panics, listing the events, unless there is exactly one).
pub fn only(events: &[AgentEvent], k: AgentEventKind) -> &AgentEvent {
    let found = of_kind(events, k);
    assert_eq!(
        found.len(),
        1,
        "one {} event expected: {events:#?}",
        k.as_str()
    );
    found[0]
}

/// The summaries of the events of kind `k`, in order.
pub fn summaries(events: &[AgentEvent], k: AgentEventKind) -> Vec<&str> {
    of_kind(events, k)
        .into_iter()
        .map(|e| e.summary.as_str())
        .collect()
}

/// The last assistant message, from its `assistant: …` notification.
pub fn assistant_text(events: &[AgentEvent]) -> Option<&str> {
    of_kind(events, AgentEventKind::Notification)
        .into_iter()
        .rev()
        .find_map(|e| e.summary.strip_prefix("assistant: "))
}

/// A Claude config running `command` with Baton's defaults: `acceptEdits`, no model, no tool
/// lists, no system prompt, no extra arguments, a 300 s stall bound.
pub fn claude_config(command: String, turn_timeout_ms: u64) -> ClaudeCodeConfig {
    ClaudeCodeConfig {
        cli: CliSection {
            turn_timeout_ms,
            stall_timeout_ms: 300_000,
            ..CliSection::new(command)
        },
        permission_mode: "acceptEdits".into(),
        allowed_tools: vec![],
        disallowed_tools: vec![],
        append_system_prompt: None,
    }
}

/// The command running the fake `claude` (`tests/it/support/fake_claude.py`).
pub fn fake_claude_command() -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/support/fake_claude.py");
    format!("python3 '{}'", script.display())
}

/// The requests a fake API recorded, shared with its handler.
pub type Log<R> = Arc<Mutex<Vec<R>>>;

/// A fake HTTP API on 127.0.0.1 (ephemeral port) that records what it is asked (as `R`); it stops
/// (unblocks and joins its accept thread) on drop.
pub struct FakeApi<R> {
    /// `http://127.0.0.1:<port>` and the API's base path.
    pub base_url: String,
    requests: Log<R>,
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
}

impl<R: Clone + Send + 'static> FakeApi<R> {
    /// Bind and start accepting: `handle` gets every request, with the log, on the accept thread.
    pub fn serve(
        base_path: &str,
        mut handle: impl FnMut(tiny_http::Request, &Log<R>) + Send + 'static,
    ) -> FakeApi<R> {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind 127.0.0.1"));
        let port = server.server_addr().to_ip().expect("ip listener").port();
        let requests: Log<R> = Arc::default();
        let thread = {
            let server = Arc::clone(&server);
            let log = Arc::clone(&requests);
            std::thread::spawn(move || {
                for req in server.incoming_requests() {
                    handle(req, &log);
                }
            })
        };
        FakeApi {
            base_url: format!("http://127.0.0.1:{port}{base_path}"),
            requests,
            server,
            thread: Some(thread),
        }
    }

    /// The requests seen so far.
    pub fn requests(&self) -> Vec<R> {
        self.requests.lock().unwrap().clone()
    }
}

impl<R> Drop for FakeApi<R> {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A response header.
pub fn header(k: &str, v: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()).unwrap()
}

/// All text of a chat message: its `content` string, or the `text` of its content blocks joined
/// by newlines.
pub fn message_text(m: &Value) -> String {
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Medians over `n` first turns of fresh sessions from `start` (benchmarks, printed, never
/// asserted): milliseconds from `run_turn` (just before the spawn) to the first event, to
/// `session_started`, and to the end of the turn.
pub fn turn_start_latency(n: usize, mut start: impl FnMut() -> Box<dyn AgentSession>) -> [f64; 3] {
    let mut samples: [Vec<f64>; 3] = Default::default();
    for _ in 0..n {
        let mut session = start();
        let t0 = Instant::now();
        let (mut first, mut started) = (None, None);
        let t = run_with(session.as_mut(), "say hi", &CancelToken::new(), |e| {
            first.get_or_insert_with(|| t0.elapsed());
            if e.kind == AgentEventKind::SessionStarted {
                started.get_or_insert_with(|| t0.elapsed());
            }
        });
        t.ok();
        let ms = |d: Option<Duration>| d.unwrap_or_default().as_secs_f64() * 1000.0;
        for (i, v) in [ms(first), ms(started), ms(Some(t.elapsed))]
            .into_iter()
            .enumerate()
        {
            samples[i].push(v);
        }
        session.stop();
    }
    samples.map(|mut s| {
        s.sort_by(f64::total_cmp);
        s[s.len() / 2]
    })
}
