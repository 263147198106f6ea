//! Daemon-level tests: the real main loop, worker threads, workspaces and hooks, with an in-process
//! fake tracker (a mutable board) and a scriptable fake agent runner, on a virtual clock. Waits are
//! bounded and driven by observable state: a failed check waits for the loop's next turn (a
//! worker or tracker report) and, when the loop stays idle, advances virtual time to its next
//! deadline. Nothing sleeps for a deadline.

use crate::support::issues;
use crate::support::stand_ins::TestEnv;
use crate::support::stand_ins::{daemon_options_with, spawn_daemon};
use crate::support::tempdir::TempDir;
use baton::runtime::daemon::{RunnerFactory, TrackerFactory};
use issues::issue;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::support::clock::ManualClock;
use crate::support::stand_ins::run_with;
use baton::agent::{
    AgentError, AgentErrorKind, AgentEvent, AgentEventKind, AgentRunner, AgentSession, CancelToken,
    Emit, SessionContext, TokenUsage, TurnResult,
};
use baton::model::Issue;
use baton::ops::shared::{NotReady, OpsShared};
use baton::orchestrator::rules::RELOAD_DEBOUNCE_MS;
use baton::runtime::clock::Clock;
use baton::runtime::daemon::DaemonOps;
use baton::status::{ControlRequest, IssueDetail, StateSnapshot};
use baton::timefmt::parse_rfc3339;
use baton::tracker::{Tracker, TrackerBudget, TrackerError, TrackerErrorKind};
use baton::workflow::config::{ConfigEnv, ServiceConfig};

// ------------------------------------------------------------------ fakes

#[derive(Default)]
struct Board {
    issues: BTreeMap<String, Issue>,
    /// While set, a board read answers with GitHub's rate limit (retry after this time).
    rate_limited_until: Option<SystemTime>,
    /// By-id refreshes answered so far (the worker's between-turn check and reconciliation).
    refreshes: usize,
}

#[derive(Clone, Default)]
struct FakeTracker {
    board: Arc<Mutex<Board>>,
    active: Vec<String>,
}

impl FakeTracker {
    fn set_state(&self, id: &str, state: &str) {
        if let Some(i) = self.board.lock().unwrap().issues.get_mut(id) {
            i.state = state.into();
        }
    }
    fn add(&self, i: Issue) {
        self.board.lock().unwrap().issues.insert(i.id.clone(), i);
    }
}

impl Tracker for FakeTracker {
    fn fetch_candidate_issues(&self) -> Result<Vec<Issue>, TrackerError> {
        let b = self.board.lock().unwrap();
        if let Some(until) = b.rate_limited_until {
            let mut e = TrackerError::new(TrackerErrorKind::RateLimited, "secondary rate limit");
            e.retry_at = Some(until);
            return Err(e);
        }
        Ok(b.issues
            .values()
            .filter(|i| self.active.iter().any(|a| a.eq_ignore_ascii_case(&i.state)))
            .cloned()
            .collect())
    }
    fn fetch_issues_by_states(&self, states: &[String]) -> Result<Vec<Issue>, TrackerError> {
        let b = self.board.lock().unwrap();
        Ok(b.issues
            .values()
            .filter(|i| states.iter().any(|s| s.eq_ignore_ascii_case(&i.state)))
            .cloned()
            .collect())
    }
    fn fetch_issue_states_by_ids(&self, ids: &[String]) -> Result<Vec<Issue>, TrackerError> {
        let mut b = self.board.lock().unwrap();
        b.refreshes += 1;
        Ok(ids
            .iter()
            .filter_map(|id| b.issues.get(id).cloned())
            .collect())
    }
    fn validate(&self) -> Result<(), TrackerError> {
        Ok(())
    }
    fn reset_cache(&self) {}
    fn rate_limit(&self) -> Option<TrackerBudget> {
        None
    }
}

/// What the fake agent does in one turn.
#[derive(Clone, Copy, PartialEq, Debug)]
enum TurnScript {
    /// Emit a few events and complete.
    Complete,
    /// Complete, after moving the issue to `Done` on the board (like an agent's `gh` call).
    CompleteAndFinish,
    /// Block until cancelled.
    Hang,
    /// Block until the test sets the runner's `release` flag, then complete.
    UntilReleased,
}

#[derive(Default)]
struct AgentLog {
    prompts: Vec<(String, u32, String)>, // (identifier, turn, prompt)
    sessions_started: usize,
    sessions_stopped: usize,
    cancelled_turns: usize,
    cwd: Vec<PathBuf>,
}

#[derive(Clone)]
struct FakeRunner {
    /// The daemon's virtual clock: a completed turn takes one virtual second.
    clock: Arc<ManualClock>,
    log: Arc<Mutex<AgentLog>>,
    /// Script by (run number of this issue, turn) -> action; default Complete.
    script: Arc<dyn Fn(usize, u32) -> TurnScript + Send + Sync>,
    tracker: FakeTracker,
    /// Ends an [`TurnScript::UntilReleased`] turn.
    release: Arc<AtomicBool>,
}

struct FakeSession {
    runner: FakeRunner,
    identifier: String,
    issue_id: String,
    run_no: usize,
    turn: u32,
}

impl AgentRunner for FakeRunner {
    fn start_session(&self, ctx: &SessionContext) -> Result<Box<dyn AgentSession>, AgentError> {
        crate::support::stand_ins::validate_workspace_cwd(&ctx.workspace, &ctx.workspace_root)?;
        let mut log = self.log.lock().unwrap();
        log.sessions_started += 1;
        log.cwd.push(ctx.workspace.clone());
        let issue_id = self
            .tracker
            .board
            .lock()
            .unwrap()
            .issues
            .values()
            .find(|i| i.identifier == ctx.issue_identifier)
            .map(|i| i.id.clone())
            .unwrap_or_default();
        Ok(Box::new(FakeSession {
            runner: self.clone(),
            identifier: ctx.issue_identifier.clone(),
            issue_id,
            run_no: log.sessions_started,
            turn: 0,
        }))
    }
}

impl AgentSession for FakeSession {
    fn run_turn(&mut self, prompt: &str, cancel: &CancelToken, emit: &mut Emit) -> TurnResult {
        self.turn += 1;
        self.runner.log.lock().unwrap().prompts.push((
            self.identifier.clone(),
            self.turn,
            prompt.to_string(),
        ));
        let mut e = AgentEvent::new(AgentEventKind::SessionStarted, "session started");
        e.session_id = Some(format!("sess{}-{}", self.run_no, self.turn));
        emit(e);
        match (self.runner.script)(self.run_no, self.turn) {
            TurnScript::Hang => {
                emit(AgentEvent::new(
                    AgentEventKind::Notification,
                    "thinking hard",
                ));
                let _ = cancel.receiver().recv_timeout(Duration::from_secs(30));
                self.runner.log.lock().unwrap().cancelled_turns += 1;
                emit(AgentEvent::new(AgentEventKind::TurnCancelled, "cancelled"));
                return Err(AgentError::new(AgentErrorKind::TurnCancelled, "cancelled"));
            }
            TurnScript::CompleteAndFinish => {
                self.runner.tracker.set_state(&self.issue_id, "Done");
            }
            TurnScript::UntilReleased => {
                let limit = Instant::now() + WAIT_LIMIT;
                while !self.runner.release.load(Ordering::SeqCst) && Instant::now() < limit {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            TurnScript::Complete => {}
        }
        self.runner.clock.advance(1_000);
        emit(AgentEvent::new(
            AgentEventKind::ToolUse,
            "Bash(gh issue view)",
        ));
        let mut done = AgentEvent::new(AgentEventKind::TurnCompleted, "done");
        let usage = TokenUsage {
            input_tokens: 100,
            output_tokens: 10,
            ..TokenUsage::default()
        };
        done.usage_delta = Some(usage);
        done.session_cost_usd = Some(0.01 * self.turn as f64);
        emit(done);
        Ok(())
    }
    fn agent_session_id(&self) -> Option<String> {
        Some(format!("sess{}", self.run_no))
    }
    fn stop(&mut self) {
        self.runner.log.lock().unwrap().sessions_stopped += 1;
    }
}

// ------------------------------------------------------------------ harness

fn workflow_text(dir: &Path, extra_agent: &str) -> String {
    format!(
        "---\ntracker:\n  kind: github_projects\n  token: test-token\n  owner: acme\n  project_number: 1\n\
         polling:\n  interval_ms: 200\nworkspace:\n  root: {root}\nhooks:\n  after_create: \"echo created > .created\"\n  \
         after_run: \"echo \\\"$BATON_ISSUE_IDENTIFIER\\\" >> {log}\"\n  timeout_ms: 5000\n\
         agent:\n  kind: claude_code\n  max_turns: 2\n{extra_agent}---\nWork on the issue.\n",
        root = dir.join("ws").display(),
        log = dir.join("after_run.log").display(),
    )
}

/// Start of virtual time (any Unix-epoch millisecond value).
const T0: u64 = 1_700_000_000_000;
/// Real-time bound of every wait.
const WAIT_LIMIT: Duration = Duration::from_secs(20);
/// How long the loop must stay idle before virtual time moves.
const IDLE: Duration = Duration::from_millis(20);
/// Most virtual time one idle step moves (one poll interval of the test workflow): a test never
/// jumps straight to a far deadline such as the stall timeout.
const MAX_STEP_MS: u64 = 200;

struct Running {
    clock: Arc<ManualClock>,
    /// What `/readyz` and `/metrics` read.
    ops: Arc<OpsShared>,
    control: Sender<ControlRequest>,
    reload: Sender<()>,
    shutdown: Sender<()>,
    exited: Receiver<Result<(), baton::runtime::daemon::RunError>>,
    /// Control requests sent so far; each costs the loop one turn.
    requests: Cell<u64>,
}

fn start(dir: &Path, tracker: FakeTracker, runner: FakeRunner, extra_agent: &str) -> Running {
    let wf_path = dir.join("WORKFLOW.md");
    fs::write(&wf_path, workflow_text(dir, extra_agent)).unwrap();
    let env: Arc<dyn ConfigEnv + Send + Sync> = Arc::new(TestEnv::none());
    let clock = runner.clock.clone();
    let t = tracker.clone();
    let factories: (TrackerFactory, RunnerFactory) = (
        Box::new(move |_: &ServiceConfig| Ok(Arc::new(t.clone()) as Arc<dyn Tracker>)),
        Box::new(move |_: &ServiceConfig| Arc::new(runner.clone()) as Arc<dyn AgentRunner>),
    );
    let (opts, inputs) = daemon_options_with(&wf_path, env, factories, clock.clone());
    let daemon_ops = DaemonOps::default();
    let ops = Arc::clone(&daemon_ops.shared);
    let exited = spawn_daemon(move || run_with(opts, daemon_ops, None));
    Running {
        clock,
        ops,
        control: inputs.control,
        reload: inputs.reload,
        shutdown: inputs.shutdown,
        exited,
        requests: Cell::new(0),
    }
}

impl Running {
    /// Wait until `/readyz` shows a rejected reload; its message.
    fn rejected_reload(&self) -> String {
        self.wait_until("/readyz to show the rejected reload", || {
            matches!(
                self.ops.readyz(Instant::now()),
                Err(NotReady::ReloadFailed { .. })
            )
        });
        let Err(NotReady::ReloadFailed { message }) = self.ops.readyz(Instant::now()) else {
            unreachable!()
        };
        message
    }

    fn request<T>(&self, make: impl FnOnce(Sender<T>) -> ControlRequest) -> T {
        let (tx, rx) = bounded(1);
        self.requests.set(self.requests.get() + 1);
        self.control.send(make(tx)).unwrap();
        rx.recv_timeout(WAIT_LIMIT).expect("control reply")
    }
    fn snapshot(&self) -> StateSnapshot {
        self.request(ControlRequest::State)
    }
    fn detail(&self, identifier: &str) -> Option<IssueDetail> {
        self.request(|reply| ControlRequest::Issue(identifier.into(), reply))
    }
    /// Let the daemon progress once: wait for a loop turn beyond `seen` (a report arrived and
    /// was handled); when none comes within [`IDLE`], advance virtual time toward the loop's
    /// next deadline.
    fn step(&self, seen: u64) {
        if !self.clock.wait_turn_after(seen, IDLE) {
            let now = self.clock.now();
            self.clock.advance_to_deadline(now + MAX_STEP_MS);
        }
    }
    /// Wait (bounded) until `pred` holds, stepping the daemon between checks.
    fn wait_until(&self, what: &str, mut pred: impl FnMut() -> bool) {
        let limit = Instant::now() + WAIT_LIMIT;
        loop {
            let turns = self.clock.turns();
            let asked = self.requests.get();
            if pred() {
                return;
            }
            assert!(Instant::now() < limit, "timed out waiting for {what}");
            // The check's own control requests each cost one turn; they are not progress.
            self.step(turns + (self.requests.get() - asked));
        }
    }
    /// Wait (bounded) until `pred` holds for a snapshot.
    fn wait_for(&self, what: &str, pred: impl Fn(&StateSnapshot) -> bool) -> StateSnapshot {
        let mut last = None;
        self.wait_until(what, || {
            let s = self.snapshot();
            let ok = pred(&s);
            last = Some(s);
            ok
        });
        last.expect("a snapshot")
    }
    /// Let `ms` of virtual time pass, the loop handling whatever comes meanwhile.
    fn run_for(&self, ms: u64) {
        let end = self.clock.now() + ms;
        let limit = Instant::now() + WAIT_LIMIT;
        while self.clock.now() < end {
            assert!(Instant::now() < limit, "virtual time did not reach {end}");
            let seen = self.clock.turns();
            if !self.clock.wait_turn_after(seen, IDLE) {
                let now = self.clock.now();
                let target = end.min(now + MAX_STEP_MS);
                if self.clock.deadline().is_some() {
                    self.clock.advance_to_deadline(target);
                } else {
                    self.clock.advance(target - now);
                }
            }
        }
    }
    fn stop(self) {
        self.shutdown.send(()).unwrap();
        self.exited
            .recv_timeout(WAIT_LIMIT)
            .expect("daemon did not shut down")
            .expect("clean shutdown");
    }
}

/// A board with two Todo issues and an agent whose turns hang until cancelled.
fn two_todo_issues_with_hanging_agents() -> (FakeTracker, Arc<Mutex<AgentLog>>, FakeRunner) {
    let tracker = FakeTracker {
        active: vec!["Todo".into(), "In Progress".into()],
        ..FakeTracker::default()
    };
    tracker.add(issue(1, "Todo"));
    tracker.add(issue(2, "Todo"));
    let log = Arc::new(Mutex::new(AgentLog::default()));
    let runner = FakeRunner {
        clock: Arc::new(ManualClock::new(T0)),
        log: log.clone(),
        script: Arc::new(|_, _| TurnScript::Hang),
        tracker: tracker.clone(),
        release: Arc::default(),
    };
    (tracker, log, runner)
}

// ------------------------------------------------------------------ tests

#[path = "conformance/daemon.rs"]
mod conformance;

#[test]
fn dispatch_continuation_and_terminal_cleanup() {
    let dir = TempDir::new("lifecycle");
    let tracker = FakeTracker {
        active: vec!["Todo".into(), "In Progress".into()],
        ..FakeTracker::default()
    };
    tracker.add(issue(1, "In Progress"));
    let log = Arc::new(Mutex::new(AgentLog::default()));
    // Run 1: two turns (max_turns) and a normal exit; run 2 (continuation): the agent moves the
    // issue to Done during its first turn.
    let runner = FakeRunner {
        clock: Arc::new(ManualClock::new(T0)),
        log: log.clone(),
        script: Arc::new(|run, _turn| {
            if run >= 2 {
                TurnScript::CompleteAndFinish
            } else {
                TurnScript::Complete
            }
        }),
        tracker: tracker.clone(),
        release: Arc::default(),
    };
    let ws = dir.join("ws").join("acme__repo-1");
    let d = start(&dir, tracker.clone(), runner, "");
    d.wait_until("the workspace to be created", || {
        ws.join(".created").exists()
    });
    d.wait_until("two sessions", || log.lock().unwrap().sessions_started >= 2);
    d.wait_until("terminal cleanup", || !ws.exists());
    let snap = d.wait_for("idle", |s| s.counts.running == 0 && s.counts.retrying == 0);
    {
        let log = log.lock().unwrap();
        let turns: Vec<u32> = log.prompts.iter().map(|p| p.1).collect();
        assert_eq!(
            turns,
            [1, 2, 1],
            "max_turns=2 bounds run 1; run 2 ends when Done"
        );
        assert_eq!(log.prompts[0].2, "Work on the issue.");
        assert!(log.prompts[1].2.contains("for GitHub issue acme__repo-1"));
        assert!(log.prompts[1].2.contains("turn 2 of at most 2"));
        assert_eq!(log.sessions_stopped, 2, "every session stopped");
        assert!(log.cwd.iter().all(|c| c.ends_with("acme__repo-1")));
    }
    assert_eq!(snap.agent_totals.tokens.input_tokens, 300);
    assert_eq!(snap.agent_totals.tokens.total_tokens, 330);
    assert!(snap.agent_totals.seconds_running > 0.0);
    let after_run = fs::read_to_string(dir.join("after_run.log")).unwrap();
    assert_eq!(after_run.lines().count(), 2, "after_run after each attempt");
    assert!(d.detail("acme__repo-1").is_none(), "released");
    d.stop();
}

#[test]
fn shutdown_cancels_running_agents_runs_after_run_and_returns() {
    let dir = TempDir::new("shutdown");
    let (tracker, log, runner) = two_todo_issues_with_hanging_agents();
    let d = start(&dir, tracker, runner, "");
    // Each hanging turn emits `session_started`, then `notification` (possibly in a later batch).
    let snap = d.wait_for("two running agents in their turns", |s| {
        let in_turn =
            |r: &baton::status::RunningRow| r.last_event.as_deref() == Some("notification");
        s.counts.running == 2 && s.running.iter().all(in_turn)
    });
    assert_eq!(snap.running[0].issue_identifier, "acme__repo-1");
    assert_eq!(snap.running[0].turn_count, 1);
    let detail = d.detail("acme__repo-2").expect("running issue detail");
    assert_eq!(detail.status, "running");
    assert!(detail
        .recent_events
        .iter()
        .any(|e| e.event == "notification"));
    // A refresh request is acknowledged without waiting for GitHub.
    let (tx, rx) = bounded(1);
    d.control.send(ControlRequest::Refresh(tx)).unwrap();
    let ack = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(ack.queued);
    d.stop();
    let log = log.lock().unwrap();
    assert_eq!(log.cancelled_turns, 2);
    assert_eq!(log.sessions_stopped, 2);
    let after_run = fs::read_to_string(dir.join("after_run.log")).unwrap();
    assert_eq!(after_run.lines().count(), 2, "after_run ran for both");
}

#[test]
fn workflow_reload_applies_valid_edits_and_keeps_the_last_good_config() {
    let dir = TempDir::new("reload");
    let (tracker, _log, runner) = two_todo_issues_with_hanging_agents();
    let d = start(&dir, tracker, runner, "  max_concurrent_agents: 1\n");
    d.wait_for("one running", |s| s.counts.running == 1);
    // An invalid edit: the daemon keeps running with the old config.
    fs::write(dir.join("WORKFLOW.md"), "---\ntracker: [unclosed\n---\n").unwrap();
    d.reload.send(()).unwrap();
    // Past the debounce (virtual time); nothing to observe but liveness.
    d.run_for(2 * RELOAD_DEBOUNCE_MS);
    assert_eq!(d.snapshot().counts.running, 1);
    // A valid edit raising the cap dispatches the second issue.
    fs::write(
        dir.join("WORKFLOW.md"),
        workflow_text(&dir, "  max_concurrent_agents: 2\n"),
    )
    .unwrap();
    d.reload.send(()).unwrap();
    d.wait_for("two running after reload", |s| s.counts.running == 2);
    d.stop();
}

#[test]
fn a_reload_that_cannot_build_its_tracker_keeps_the_previous_config_entirely() {
    // Issue 24, item 2: an edit raising the cap that also makes the tracker unbuildable.
    let dir = TempDir::new("reload-all");
    let (tracker, _log, runner) = two_todo_issues_with_hanging_agents();
    let d = start(
        &dir,
        tracker.clone(),
        runner,
        "  max_concurrent_agents: 1\n",
    );
    let first = d.wait_for("one running", |s| s.counts.running == 1);
    let first = first.running[0].issue_id.clone();
    let bad = workflow_text(&dir, "  max_concurrent_agents: 2\n")
        .replace("token: test-token", "token: $BATON_TEST_UNSET_TOKEN");
    fs::write(dir.join("WORKFLOW.md"), bad).unwrap();
    d.reload.send(()).unwrap();
    let message = d.rejected_reload();
    assert!(
        message.contains("WORKFLOW.md") && message.contains("tracker.token"),
        "names the file and the key: {message}"
    );
    d.run_for(1_000);
    assert_eq!(
        d.snapshot().counts.running,
        1,
        "the previous cap is in force"
    );
    // Dispatch goes on under the previous config: the first issue is done, the second starts.
    tracker.set_state(&first, "Done");
    d.wait_for("the second issue dispatched", |s| {
        s.counts.running == 1 && s.running[0].issue_id != first
    });
    // A valid edit applies and clears the error.
    fs::write(
        dir.join("WORKFLOW.md"),
        workflow_text(&dir, "  max_concurrent_agents: 2\n"),
    )
    .unwrap();
    d.reload.send(()).unwrap();
    d.wait_until("/readyz without the reload error", || {
        !matches!(
            d.ops.readyz(Instant::now()),
            Err(NotReady::ReloadFailed { .. })
        )
    });
    d.stop();
}

/// Issue 22: in a Baton built without `ssh`, a reload that adds `worker.ssh_hosts` is refused
/// like any invalid edit (never applied with the hosts ignored): the previous config stays.
#[test]
#[cfg(not(feature = "ssh"))]
fn a_reload_that_needs_a_feature_not_built_keeps_the_previous_config() {
    let dir = TempDir::new("reload-feature");
    let (tracker, _log, runner) = two_todo_issues_with_hanging_agents();
    let d = start(&dir, tracker, runner, "  max_concurrent_agents: 1\n");
    d.wait_for("one running", |s| s.counts.running == 1);
    let with_hosts = "  max_concurrent_agents: 2\nworker:\n  ssh_hosts: [build-1]\n";
    fs::write(dir.join("WORKFLOW.md"), workflow_text(&dir, with_hosts)).unwrap();
    d.reload.send(()).unwrap();
    let message = d.rejected_reload();
    assert!(
        message.contains(
            "feature_not_built: worker.ssh_hosts needs a Baton built with --features ssh"
        ),
        "{message}"
    );
    d.run_for(1_000);
    assert_eq!(
        d.snapshot().counts.running,
        1,
        "the previous cap is in force"
    );
    d.stop();
}

#[test]
fn a_rate_limit_holds_the_between_turn_refresh_and_ends_the_run_for_a_later_continuation() {
    let dir = TempDir::new("held");
    let tracker = FakeTracker {
        active: vec!["Todo".into()],
        ..FakeTracker::default()
    };
    tracker.add(issue(1, "Todo"));
    let runner = FakeRunner {
        clock: Arc::new(ManualClock::new(T0)),
        log: Arc::default(),
        script: Arc::new(|_, _| TurnScript::UntilReleased),
        tracker: tracker.clone(),
        release: Arc::default(),
    };
    let (log, release) = (runner.log.clone(), runner.release.clone());
    let d = start(&dir, tracker.clone(), runner, "");
    d.wait_for("the agent running", |s| s.counts.running == 1);
    // GitHub rate-limits the next board read for an hour; the gate learns it from the poll.
    let until = UNIX_EPOCH + Duration::from_millis(d.clock.now() + 3_600_000);
    tracker.board.lock().unwrap().rate_limited_until = Some(until);
    let refreshes = tracker.board.lock().unwrap().refreshes;
    d.wait_until("the request gate to hold requests", || {
        let (tx, rx) = bounded(1);
        d.control.send(ControlRequest::Refresh(tx)).unwrap();
        d.requests.set(d.requests.get() + 1);
        // Deferred to the pause's end once the gate holds requests (before that, at most by
        // the one-second refresh spacing).
        let ack = rx.recv_timeout(WAIT_LIMIT).unwrap();
        let deferred = ack.deferred_until.as_deref().and_then(parse_rfc3339);
        deferred.is_some_and(|t| t >= until)
    });
    release.store(true, Ordering::SeqCst);
    let s = d.wait_for("the run to end", |s| s.counts.running == 0);
    assert_eq!(
        s.counts.retrying, 1,
        "a continuation retry waits for the gate"
    );
    let turns: Vec<u32> = log.lock().unwrap().prompts.iter().map(|p| p.1).collect();
    assert_eq!(turns, [1], "no second turn without a refresh");
    let sent = tracker.board.lock().unwrap().refreshes - refreshes;
    assert_eq!(sent, 0, "no tracker request while the gate holds them");
    d.stop();
}

#[test]
fn the_startup_sweep_waits_for_the_first_successful_board_read() {
    let dir = TempDir::new("late-sweep");
    let tracker = FakeTracker {
        active: vec!["Todo".into()],
        ..FakeTracker::default()
    };
    tracker.add(issue(5, "Done"));
    let ws = dir.join("ws").join("acme__repo-5");
    fs::create_dir_all(&ws).unwrap();
    // The first board read fails: a rate limit that lifts one (virtual) second later.
    let until = UNIX_EPOCH + Duration::from_millis(T0 + 1_000);
    tracker.board.lock().unwrap().rate_limited_until = Some(until);
    let runner = FakeRunner {
        clock: Arc::new(ManualClock::new(T0)),
        log: Arc::default(),
        script: Arc::new(|_, _| TurnScript::Hang),
        tracker: tracker.clone(),
        release: Arc::default(),
    };
    let d = start(&dir, tracker.clone(), runner, "");
    d.wait_for("the failed first read", |s| s.tracker.last_error.is_some());
    assert!(ws.exists(), "nothing known to be terminal yet");
    tracker.board.lock().unwrap().rate_limited_until = None;
    d.wait_until("the startup sweep after the first good read", || {
        !ws.exists()
    });
}

#[test]
fn manual_timer_fires_when_time_reaches_the_deadline() {
    let c = ManualClock::new(1_000);
    let rx = c.timer(Some(1_500));
    assert!(rx.try_recv().is_err());
    c.advance(499);
    assert!(rx.try_recv().is_err());
    c.advance(1);
    assert!(rx.try_recv().is_ok());
    assert_eq!(c.now(), 1_500);
    assert!(
        c.timer(Some(1_000)).try_recv().is_ok(),
        "past deadlines fire at once"
    );
    assert_eq!(c.turns(), 2);
    assert!(c.wait_turn_after(1, Duration::ZERO));
    assert!(!c.wait_turn_after(2, Duration::from_millis(1)));
}

#[test]
fn advance_to_deadline_is_bounded() {
    let c = ManualClock::new(0);
    assert_eq!(c.advance_to_deadline(100), 0, "nothing armed");
    let rx = c.timer(Some(1_000));
    assert_eq!(c.advance_to_deadline(200), 200);
    assert!(rx.try_recv().is_err());
    assert_eq!(c.advance_to_deadline(5_000), 1_000);
    assert!(rx.try_recv().is_ok());
    assert_eq!(c.deadline(), None);
}
