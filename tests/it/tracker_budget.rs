//! The GitHub request budget at daemon level (issue 12, failures 1–5): the real main loop and the
//! real GitHub tracker against the fake GitHub, on a virtual clock. Requests are counted at the
//! fake. Hostile rate-limit headers must not kill the tracker threads (a later request happens),
//! a refresh storm coalesces to at most one poll per second, nothing is sent inside a rate-limit
//! pause, rejected credentials back off, and `baton` / `baton check` never exit 101.

use crate::support;
use crate::support::stand_ins::{daemon_options_with, spawn_daemon};
use crate::support::tempdir::TempDir;
use baton::runtime::daemon::{RunnerFactory, TrackerFactory};

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender};

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::clock::ManualClock;
use crate::support::stand_ins::run;
use baton::agent::{
    AgentError, AgentErrorKind, AgentRunner, AgentSession, CancelToken, Emit, SessionContext,
    TurnResult,
};
use baton::runtime::clock::Clock;
#[cfg(feature = "http")] // observed through control requests
use baton::status::{ControlRequest, RefreshAck};
use baton::tracker::Tracker;
use baton::workflow::config::{ConfigEnv, ServiceConfig};
use support::daemon_proc::{capture_stderr, wait_until};
use support::fake_github::{BoardFixture, FakeGithub, Fault, IssueFixture, FAKE_TOKEN};
use support::stand_ins::TestEnv;

/// Headers a hostile or broken server could send (issue 12, failures 1–3).
#[cfg(feature = "http")]
const HOSTILE: [&str; 6] = [
    "300000000000",
    "18446744073709551616",
    "9223372036854775807",
    "-1",
    "garbage",
    "",
];

const HOUR_MS: u64 = 3_600_000;

/// An agent that never starts: every dispatch fails, so failure retries are queued.
struct FailingRunner;

impl AgentRunner for FailingRunner {
    fn start_session(&self, _: &SessionContext) -> Result<Box<dyn AgentSession>, AgentError> {
        Err(AgentError::new(
            AgentErrorKind::StartupFailed,
            "no agent in this test",
        ))
    }
}

fn workflow(dir: &Path, endpoint: &str) -> PathBuf {
    workflow_with(dir, endpoint, 60_000, "")
}

/// The test workflow polling every `interval_ms`, with `agent` keys added (two-space indented).
fn workflow_with(dir: &Path, endpoint: &str, interval_ms: u64, agent: &str) -> PathBuf {
    let p = dir.join("WORKFLOW.md");
    fs::write(
        &p,
        format!(
            "---\ntracker:\n  kind: github_projects\n  endpoint: {endpoint}\n  token: $BATON_BUDGET_TOKEN\n  \
             owner: acme\n  project_number: 7\n  active_states: [Todo]\n  terminal_states: [Done]\n  timeout_ms: 5000\n  \
             page_size: 100\npolling:\n  interval_ms: {interval_ms}\nworkspace:\n  root: {}\nagent:\n  kind: claude_code\n{agent}\
             ---\nDo it.\n",
            dir.join("ws").display()
        ),
    )
    .unwrap();
    p
}

/// The `baton` binary with `args` for `workflow`: the token in `$BATON_BUDGET_TOKEN`, `HOME`
/// in `dir`, no `GITHUB_TOKEN`.
fn baton(args: &[&str], workflow: &Path, dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_baton"));
    cmd.args(args)
        .arg(workflow)
        .env("BATON_BUDGET_TOKEN", FAKE_TOKEN)
        .env("HOME", dir)
        .env_remove("GITHUB_TOKEN");
    cmd
}

fn wall_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

struct Running {
    clock: Arc<ManualClock>,
    #[cfg(feature = "http")]
    control: Sender<ControlRequest>,
    shutdown: Sender<()>,
    exited: Receiver<Result<(), baton::runtime::daemon::RunError>>,
    _reload: Sender<()>,
    /// Where the workflow and workspaces live (removed after the daemon).
    _dir: TempDir,
}

fn start(dir: TempDir, github: &FakeGithub) -> Running {
    let wf_path = workflow(&dir, &github.endpoint());
    start_with(dir, &wf_path, Arc::new(FailingRunner))
}

/// The daemon on a virtual clock for the workflow at `wf_path`, running agents with `runner`.
fn start_with(dir: TempDir, wf_path: &Path, runner: Arc<dyn AgentRunner>) -> Running {
    let env: Arc<dyn ConfigEnv + Send + Sync> =
        Arc::new(TestEnv::none().with_var("BATON_BUDGET_TOKEN", FAKE_TOKEN));
    // Virtual time starts at wall time, so the tracker's retry times mean the same on both.
    let clock = Arc::new(ManualClock::new(wall_millis()));
    let factories: (TrackerFactory, RunnerFactory) = (
        Box::new(|cfg: &ServiceConfig| baton::tracker::open(&cfg.tracker)),
        Box::new(move |_: &ServiceConfig| Arc::clone(&runner)),
    );
    let (opts, inputs) = daemon_options_with(wf_path, env, factories, clock.clone());
    let exited = spawn_daemon(move || run(opts));
    let r = Running {
        clock,
        #[cfg(feature = "http")]
        control: inputs.control,
        shutdown: inputs.shutdown,
        exited,
        _reload: inputs.reload,
        _dir: dir,
    };
    r.settle();
    r
}

impl Running {
    /// Wait (real time, bounded) until the loop has been idle for a moment: tracker calls and
    /// worker reports in flight have been handled.
    fn settle(&self) {
        let limit = Instant::now() + Duration::from_secs(10);
        loop {
            let seen = self.clock.turns();
            if !self.clock.wait_turn_after(seen, Duration::from_millis(40)) {
                return;
            }
            assert!(Instant::now() < limit, "the loop never went idle");
        }
    }
    #[cfg(feature = "http")]
    fn refresh(&self) -> RefreshAck {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.control.send(ControlRequest::Refresh(tx)).unwrap();
        rx.recv_timeout(Duration::from_secs(10)).expect("ack")
    }
    /// Let `ms` of virtual time pass in steps of at most `step`, settling after each.
    fn run_for(&self, ms: u64, step: u64) {
        let end = self.clock.now() + ms;
        while self.clock.now() < end {
            let now = self.clock.now();
            self.clock.advance(step.min(end - now));
            self.settle();
        }
    }
    /// Run virtual time `step_ms` at a time (in steps of at most `step`) until `done`; fail with
    /// `what` when `within_ms` of virtual time pass first.
    fn run_until(
        &self,
        within_ms: u64,
        step_ms: u64,
        step: u64,
        mut done: impl FnMut() -> bool,
        what: impl Fn() -> String,
    ) {
        let limit = self.clock.now() + within_ms;
        while !done() {
            assert!(self.clock.now() < limit, "{}", what());
            self.run_for(step_ms, step);
        }
    }
    #[cfg(feature = "http")]
    fn state(&self) -> baton::status::StateSnapshot {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.control.send(ControlRequest::State(tx)).unwrap();
        rx.recv_timeout(Duration::from_secs(10)).expect("state")
    }
    fn stop(self) {
        self.shutdown.send(()).unwrap();
        self.exited
            .recv_timeout(Duration::from_secs(20))
            .expect("daemon did not shut down")
            .expect("clean shutdown");
    }
}

fn empty_board() -> FakeGithub {
    FakeGithub::start(BoardFixture::empty("acme", 7))
}

/// The daemon (in a fresh temporary directory) polling an empty board.
fn start_on_empty_board(tag: &str) -> (FakeGithub, Running) {
    let github = empty_board();
    let r = start(TempDir::new(tag), &github);
    (github, r)
}

/// 400 refresh triggers in 20 s of virtual time, then 400 more inside a rate-limit pause.
/// Returns (requests during the storm, requests during the paused storm).
#[cfg(feature = "http")]
fn storm(r: &Running, github: &FakeGithub) -> (usize, usize) {
    let base = github.request_count();
    for _ in 0..400 {
        r.refresh();
        r.clock.advance(50);
        r.settle();
    }
    let storm = github.request_count() - base;
    // The next poll gets a secondary rate limit with a huge Retry-After (clamped to 1 h).
    r.run_for(1_000, 1_000);
    github.push_fault(Fault::retry_after_raw("300000000000"));
    let ack = r.refresh();
    assert_eq!(ack.deferred_until, None, "due: starts now");
    r.settle();
    let base = github.request_count();
    let mut deferred = 0;
    for _ in 0..400 {
        let ack = r.refresh();
        deferred += usize::from(ack.deferred_until.is_some());
        r.clock.advance(50);
        r.settle();
    }
    assert_eq!(deferred, 400, "every refresh in a pause is deferred");
    (storm, github.request_count() - base)
}

#[test]
#[cfg(feature = "http")]
fn refresh_storm_is_coalesced_and_silent_during_a_pause() {
    let (github, r) = start_on_empty_board("storm");
    let (during_storm, during_pause) = storm(&r, &github);
    println!("refresh storm: 400 triggers in 20 s -> {during_storm} GitHub requests; 400 triggers in a pause -> {during_pause}");
    assert!(
        (10..=21).contains(&during_storm),
        "400 triggers in 20 s made {during_storm} requests"
    );
    assert_eq!(during_pause, 0, "no request inside a rate-limit pause");
    // Polling continues once the (clamped) pause is over.
    let base = github.request_count();
    r.run_for(HOUR_MS + 61_000, 60_000);
    assert!(
        github.request_count() > base,
        "polling resumed after the pause"
    );
    r.stop();
}

/// Failures 1 and 4/5: every hostile header on a poll's reply; the poll thread survives and
/// polls again after at most the clamped hour, and never inside the pause.
#[test]
#[cfg(feature = "http")]
fn hostile_rate_limit_headers_never_stop_polling() {
    let (github, r) = start_on_empty_board("poll");
    for value in HOSTILE {
        for fault in [Fault::retry_after_raw(value), Fault::reset_raw(value)] {
            r.run_for(1_000, 1_000);
            github.push_fault(fault.clone());
            r.refresh();
            r.settle();
            let hit = github.request_count();
            // A later poll happens: within the regular interval when the header was unusable,
            // within the clamped hour otherwise.
            r.run_until(
                HOUR_MS + 120_000,
                60_000,
                60_000,
                || github.request_count() != hit,
                || format!("no poll after {fault:?} within the clamped hour"),
            );
        }
    }
    r.stop();
}

/// Failure 2: a hostile header on a retry's fetch; the retry thread survives and fetches again.
#[test]
fn hostile_headers_on_a_retry_fetch_never_stop_retries() {
    let mut board = BoardFixture::empty("acme", 7);
    board.push_issue(IssueFixture::new("acme/api", 1, "Do a thing"), Some("Todo"));
    let github = FakeGithub::start(board);
    let r = start(TempDir::new("retry"), &github);
    let is_refresh = |op: &String| op.starts_with("RefreshIssues");
    for value in ["300000000000", "18446744073709551616", "-1"] {
        // The dispatch failed at once, so a failure retry is queued; its fetch gets the fault.
        github.push_fault(Fault::retry_after_raw(value));
        let before = github.operations().iter().filter(|o| is_refresh(o)).count();
        r.run_until(
            2 * HOUR_MS,
            60_000,
            10_000,
            || github.operations().iter().filter(|o| is_refresh(o)).count() >= before + 2,
            || format!("retry fetches stopped after {value:?}"),
        );
    }
    r.stop();
}

/// A rejected token (401) backs off 1, 2, 4, 8 … minutes instead of re-polling every interval.
#[test]
fn rejected_token_backs_off() {
    let (github, r) = start_on_empty_board("auth");
    github.set_sticky_fault(Some(Fault::Unauthorized));
    let base = github.request_count();
    r.run_for(30 * 60_000, 30_000);
    let n = github.request_count() - base;
    println!("401 for 30 min at a 60 s poll interval -> {n} requests");
    // Full rate would be 30 polls; back-off 1+2+4+8+10+10 min gives about 6.
    assert!((3..=8).contains(&n), "{n} requests in 30 minutes");
    github.set_sticky_fault(None);
    r.run_for(11 * 60_000, 30_000);
    assert!(github.request_count() - base > n, "polling resumes");
    r.stop();
}

/// Failure 3: hostile headers on the very first request: `baton check` and `baton` exit with an
/// error, never with a panic (101).
#[test]
fn startup_with_hostile_headers_exits_cleanly() {
    for (i, fault) in [
        Fault::retry_after_raw("300000000000"),
        Fault::reset_raw("300000000000"),
        Fault::reset_raw("18446744073709551616"),
    ]
    .into_iter()
    .enumerate()
    {
        let dir = TempDir::new(&format!("startup{i}"));
        let github = empty_board();
        github.set_sticky_fault(Some(fault));
        let wf = workflow(&dir, &github.endpoint());
        for args in [vec!["check"], vec![]] {
            let out = baton(&args, &wf, &dir).output().expect("run baton");
            let code = out.status.code();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_ne!(code, Some(101), "baton {args:?} panicked: {stderr}");
            assert_ne!(code, Some(0), "baton {args:?} should fail: {stderr}");
            assert!(!stderr.contains("panicked"), "{stderr}");
        }
    }
}

/// An agent whose turns end at once (the issue stays active), counting them.
struct InstantRunner(Arc<AtomicUsize>);

struct InstantSession(Arc<AtomicUsize>);

impl AgentRunner for InstantRunner {
    fn start_session(&self, _: &SessionContext) -> Result<Box<dyn AgentSession>, AgentError> {
        Ok(Box::new(InstantSession(Arc::clone(&self.0))))
    }
}

impl AgentSession for InstantSession {
    fn run_turn(&mut self, _: &str, _: &CancelToken, _: &mut Emit) -> TurnResult {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn agent_session_id(&self) -> Option<String> {
        None
    }
    fn stop(&mut self) {}
}

fn count_ops(github: &FakeGithub, prefix: &str) -> usize {
    github
        .operations()
        .iter()
        .filter(|o| o.starts_with(prefix))
        .count()
}

/// Issue 25 item 2: the between-turn refreshes of 40 workers whose turns end at once are
/// coalesced: one `RefreshRunning` request per slot of the request gate serves many of them,
/// never more than one a second, and every turn still gets its refresh.
#[test]
fn between_turn_refreshes_of_many_workers_share_one_request_per_slot() {
    let mut board = BoardFixture::empty("acme", 7);
    for n in 1..=40 {
        board.push_issue(IssueFixture::new("acme/api", n, "Do a thing"), Some("Todo"));
    }
    let github = FakeGithub::start(board);
    let dir = TempDir::new("coalesce");
    let agent = "  max_concurrent_agents: 40\n  max_turns: 3\n";
    let wf = workflow_with(&dir, &github.endpoint(), 60_000, agent);
    let turns = Arc::new(AtomicUsize::new(0));
    let r = start_with(dir, &wf, Arc::new(InstantRunner(Arc::clone(&turns))));
    r.run_for(30_000, 500);
    let turns = turns.load(Ordering::SeqCst);
    let refreshes = count_ops(&github, "RefreshRunning");
    let retry_fetches = count_ops(&github, "RefreshIssues");
    println!("40 workers: {turns} turns, {refreshes} between-turn refresh requests, {retry_fetches} retry fetches in 30 s");
    assert!(turns >= 120, "every worker ran its turns: {turns}");
    assert!(
        refreshes <= 31,
        "at most one refresh request a second: {refreshes}"
    );
    assert!(
        turns >= 4 * refreshes,
        "{turns} turns for {refreshes} refresh requests"
    );
    assert!(
        retry_fetches <= 31,
        "at most one retry fetch a second: {retry_fetches}"
    );
    r.stop();
}

/// Issue 25 item 2: a 1,000-item board costs 20 points a poll; at 5 s polling that is 14,400
/// points an hour, so the daemon stretches polling to 30.3 s (2,375 of the 2,500 points, half
/// of GitHub's 5,000) and says so in the state snapshot.
#[test]
#[cfg(feature = "http")]
fn a_costly_board_stretches_the_poll_interval_and_the_state_shows_it() {
    let github = FakeGithub::start(BoardFixture::generated(1_000, "In Review"));
    let dir = TempDir::new("stretch");
    let wf = workflow_with(&dir, &github.endpoint(), 5_000, "");
    let r = start_with(dir, &wf, Arc::new(FailingRunner));
    let polled = || r.state().tracker.last_successful_poll_at.is_some();
    wait_until(
        "the first poll",
        Duration::from_secs(30),
        String::new,
        || polled().then_some(()),
    );
    let tracker = r.state().tracker;
    assert_eq!(tracker.poll_interval_ms, 30_316);
    assert_eq!(tracker.points_target_per_hour, Some(2_500));
    assert_eq!(tracker.points_projected_per_hour, Some(2_374));
    let pages = count_ops(&github, "ProjectItems");
    let mut at = Vec::new();
    for second in 1..=120 {
        r.run_for(1_000, 1_000);
        // A poll reads its 10 pages in real time: let it finish before time moves on.
        let done = || (count_ops(&github, "ProjectItems") % 10 == 0).then_some(());
        wait_until("a whole poll", Duration::from_secs(30), String::new, done);
        r.settle();
        let polls = (count_ops(&github, "ProjectItems") - pages) / 10;
        if polls > at.len() {
            at.push(second);
        }
    }
    // Polls start at 31, 62 and 93 s (30.3 s apart, not every 5 s); one may still be reading
    // its pages when the next second begins.
    assert_eq!(at.len(), 3, "{at:?}");
    for (got, start) in at.iter().zip([31, 62, 93]) {
        assert!((start..=start + 1).contains(got), "{at:?}");
    }
    r.stop();
}

/// The binary logs `event=poll_interval_stretched` and shows the interval in force and the
/// projected spend in `/api/v1/state` and `/metrics`.
#[test]
#[cfg(feature = "http")] // the real binary's HTTP API
fn the_stretched_interval_is_logged_and_shown_in_the_api_and_metrics() {
    let github = FakeGithub::start(BoardFixture::generated(1_000, "In Review"));
    let dir = TempDir::new("stretch-bin");
    let wf = workflow_with(&dir, &github.endpoint(), 5_000, "");
    let token = ("BATON_BUDGET_TOKEN", FAKE_TOKEN.to_string());
    let d = support::daemon_proc::DaemonProc::start(&wf, &dir, &[token]);
    d.wait_log(
        "event=poll_interval_stretched poll_interval_ms=30316 configured_interval_ms=5000 projected_points_per_hour=2374 target_points_per_hour=2500 poll_points=20",
        Duration::from_secs(60),
    );
    let tracker = &d.state()["tracker"];
    assert_eq!(tracker["poll_interval_ms"], 30_316);
    assert_eq!(tracker["points_target_per_hour"], 2_500);
    assert_eq!(tracker["points_projected_per_hour"], 2_374);
    let (status, metrics) = d.get("/metrics");
    assert_eq!(status, 200);
    for line in [
        "baton_tracker_poll_interval_seconds 30.316",
        "baton_tracker_points_projected_per_hour 2374",
        "baton_tracker_poll_points 20",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line}:\n{metrics}");
    }
    assert_eq!(d.log().matches("event=poll_interval_stretched").count(), 1);
    d.terminate(Duration::from_secs(20));
}

/// `baton check` shows what one board read costs and the interval the daemon will start from.
#[test]
fn check_shows_the_poll_interval_the_budget_allows() {
    let github = FakeGithub::start(BoardFixture::generated(1_000, "In Review"));
    let dir = TempDir::new("check-budget");
    let wf = workflow_with(&dir, &github.endpoint(), 5_000, "");
    let out = baton(&["check"], &wf, &dir)
        .output()
        .expect("run baton check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("ok    tracker budget: a board read costs 20 points; polling every 30316 ms (polling.interval_ms 5000), projected 2374 of 2500 points per hour (tracker.budget_share 0.5 of 5000)"),
        "{stdout}"
    );
}

#[allow(dead_code)]
fn _tracker_is_object_safe(_: &dyn Tracker) {}

/// Issue 12's figure, in real time against the release-shaped binary: 400 `POST
/// /api/v1/refresh` in 20 s, then 400 more while GitHub answers with a secondary rate limit.
/// Prints `refresh_storm: …`; run by scripts/bench/refresh_storm.sh.
#[test]
#[ignore = "real-time benchmark (about 45 s); scripts/bench/refresh_storm.sh"]
fn bench_refresh_storm_real_time() {
    use std::io::{Read as _, Write as _};
    use std::net::TcpStream;
    use std::process::Stdio;

    let dir = TempDir::new("bench");
    let github = empty_board();
    let wf = workflow(&dir, &github.endpoint());
    let mut child = baton(&["--port", "0", "--log-level", "info"], &wf, &dir)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn baton");
    let log = capture_stderr(&mut child);
    let text = || log.lock().unwrap().clone();
    let addr = wait_until("the listening line", Duration::from_secs(30), text, || {
        let text = text();
        let i = text.find("http server listening addr=")?;
        let rest = &text[i + "http server listening addr=".len()..];
        Some(rest.split_whitespace().next()?.to_string())
    });
    thread::sleep(Duration::from_millis(500));
    let post = |addr: &str| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"POST /api/v1/refresh HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 202"), "{out}");
    };
    let storm = |label: &str| -> usize {
        let base = github.request_count();
        let t0 = Instant::now();
        for k in 0..400u32 {
            post(&addr);
            let next = Duration::from_millis(50) * (k + 1);
            if let Some(wait) = next.checked_sub(t0.elapsed()) {
                thread::sleep(wait);
            }
        }
        let n = github.request_count() - base;
        println!(
            "refresh_storm: {label}: 400 triggers in {:.1} s -> {n} GitHub requests",
            t0.elapsed().as_secs_f64()
        );
        n
    };
    let normal = storm("normal");
    // GitHub starts answering with a secondary rate limit (Retry-After: 120 s).
    github.set_sticky_fault(Some(Fault::retry_after_raw("120")));
    thread::sleep(Duration::from_millis(1_200));
    post(&addr);
    thread::sleep(Duration::from_millis(500));
    let paused = storm("rate-limit pause");
    let _ = child.kill();
    let _ = child.wait();
    assert!(normal <= 21, "{normal}");
    assert_eq!(paused, 0);
}
