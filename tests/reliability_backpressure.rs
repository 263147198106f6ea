//! Issue 21, item 1: an agent that prints activity as fast as it can while the main loop is busy
//! costs Baton a bounded amount of memory, and every turn's usage and count still arrive exactly.
//!
//! A test binary of its own (not in `tests/it/`) because it installs a global allocator: it counts
//! the bytes each thread allocated and did not free itself. An event queued for the main loop is
//! allocated on the worker thread and freed on the loop thread, so while the loop is held the
//! worker thread's count is what its run has queued.
// The loop is held through an exit condition and observed through control requests (HTTP surface).
#![cfg(feature = "http")]

#[path = "it/support/stand_ins.rs"]
mod stand_ins;
#[path = "it/support/tempdir.rs"]
mod tempdir;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::fs;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};

use baton::agent::{
    AgentEvent, AgentEventKind, AgentRunner, AgentSession, CancelToken, Emit, SessionContext,
    TokenUsage, TurnResult,
};
use baton::model::Issue;
use baton::runtime::clock::SystemClock;
use baton::runtime::daemon::{DaemonOps, ExitWhen, RunnerFactory, TrackerFactory};
use baton::status::ControlRequest;
use baton::tracker::{Tracker, TrackerBudget, TrackerError};
use baton::workflow::config::ServiceConfig;

use stand_ins::{daemon_options_with, run_with, spawn_daemon, TestEnv};
use tempdir::TempDir;

struct Counting;

thread_local! {
    static HELD: Cell<i64> = const { Cell::new(0) };
}

fn count(delta: i64) {
    let _ = HELD.try_with(|h| h.set(h.get() + delta));
}

/// Bytes this thread allocated and has not freed itself.
fn held() -> i64 {
    HELD.with(Cell::get)
}

// SAFETY: every call is forwarded to the system allocator unchanged; only a counter is kept.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count(l.size() as i64);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        count(-(l.size() as i64));
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        count(new as i64 - l.size() as i64);
        System.realloc(p, l, new)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Activity events the agent prints in its first turn while the loop is held.
const FLOOD: usize = 200_000;
/// Output tokens of every turn.
const TOKENS: u64 = 7;

fn the_issue() -> Issue {
    Issue {
        id: "I_1".into(),
        identifier: "acme__repo-1".into(),
        number: 1,
        repository: "acme/repo".into(),
        title: "flood".into(),
        state: "Todo".into(),
        ..Issue::default()
    }
}

/// One Todo issue that stays Todo.
struct Board;

impl Tracker for Board {
    fn fetch_candidate_issues(&self) -> Result<Vec<Issue>, TrackerError> {
        Ok(vec![the_issue()])
    }
    fn fetch_issues_by_states(&self, _: &[String]) -> Result<Vec<Issue>, TrackerError> {
        Ok(Vec::new())
    }
    fn fetch_issue_states_by_ids(&self, _: &[String]) -> Result<Vec<Issue>, TrackerError> {
        Ok(vec![the_issue()])
    }
    fn validate(&self) -> Result<(), TrackerError> {
        Ok(())
    }
    fn reset_cache(&self) {}
    fn rate_limit(&self) -> Option<TrackerBudget> {
        None
    }
}

/// How the agent holds the main loop: the loop's next `exit_when` call takes the pair, says so
/// on the first sender and blocks until the second channel closes.
type Hold = Arc<Mutex<Option<(Sender<()>, Receiver<()>)>>>;

#[derive(Clone)]
struct Flooder {
    hold: Hold,
    /// Bytes the worker thread kept across the flood (set once).
    kept: Arc<Mutex<Option<i64>>>,
}

struct Session(Flooder);

impl AgentRunner for Flooder {
    fn start_session(
        &self,
        _: &SessionContext,
    ) -> Result<Box<dyn AgentSession>, baton::agent::AgentError> {
        Ok(Box::new(Session(self.clone())))
    }
}

impl AgentSession for Session {
    fn run_turn(&mut self, _: &str, _: &CancelToken, emit: &mut Emit) -> TurnResult {
        if self.0.kept.lock().unwrap().is_none() {
            let (held_tx, held_rx) = bounded(1);
            let (release_tx, release_rx) = bounded::<()>(0);
            *self.0.hold.lock().unwrap() = Some((held_tx, release_rx));
            emit(AgentEvent::new(AgentEventKind::Notification, "hold on"));
            held_rx
                .recv_timeout(Duration::from_secs(20))
                .expect("the loop holds");
            let before = held();
            for i in 0..FLOOD {
                let text = format!("{i:>8} activity line of a fast agent {}", "x".repeat(200));
                emit(AgentEvent::new(AgentEventKind::Notification, text));
            }
            *self.0.kept.lock().unwrap() = Some(held() - before);
            drop(release_tx);
        }
        let mut done = AgentEvent::new(AgentEventKind::TurnCompleted, "done");
        done.usage_delta = Some(TokenUsage {
            output_tokens: TOKENS,
            ..TokenUsage::default()
        });
        emit(done);
        Ok(())
    }
    fn agent_session_id(&self) -> Option<String> {
        None
    }
    fn stop(&mut self) {}
}

#[test]
fn a_flooding_agent_queues_bounded_memory_and_exact_totals() {
    let dir = TempDir::new("backpressure");
    let wf = dir.join("WORKFLOW.md");
    fs::write(
        &wf,
        format!(
            "---\ntracker:\n  kind: github_projects\n  token: t\n  owner: acme\n  project_number: 1\n\
             workspace:\n  root: {}\nagent:\n  kind: claude_code\n  max_turns: 3\n---\nWork.\n",
            dir.join("ws").display()
        ),
    )
    .unwrap();
    let agent = Flooder {
        hold: Arc::default(),
        kept: Arc::default(),
    };
    let (hold, kept) = (agent.hold.clone(), agent.kept.clone());
    let factories: (TrackerFactory, RunnerFactory) = (
        Box::new(|_: &ServiceConfig| Ok(Arc::new(Board) as Arc<dyn Tracker>)),
        Box::new(move |_: &ServiceConfig| Arc::new(agent.clone()) as Arc<dyn AgentRunner>),
    );
    let clock = Arc::new(SystemClock::default());
    let (opts, inputs) = daemon_options_with(&wf, Arc::new(TestEnv::none()), factories, clock);
    let exited = spawn_daemon(move || {
        // The loop calls this after every event: it holds the loop while the agent floods.
        let exit_when: ExitWhen = Box::new(move |_| {
            let pair = hold.lock().unwrap().take();
            if let Some((held, release)) = pair {
                let _ = held.send(());
                let _ = release.recv();
            }
            false
        });
        run_with(opts, DaemonOps::default(), Some(exit_when))
    });

    let limit = Instant::now() + Duration::from_secs(60);
    let totals = loop {
        assert!(
            Instant::now() < limit,
            "no flood and three turns within 60 s"
        );
        let (tx, rx) = bounded(1);
        inputs.control.send(ControlRequest::State(tx)).unwrap();
        let snap = rx.recv_timeout(Duration::from_secs(20)).unwrap();
        if kept.lock().unwrap().is_some() && snap.agent_totals.turns >= 3 {
            break snap.agent_totals;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let kept = kept.lock().unwrap().unwrap();
    assert!(
        kept < 1 << 20,
        "{FLOOD} activity events while the loop was held left {kept} bytes queued"
    );
    assert_eq!(
        totals.tokens.output_tokens,
        totals.turns * TOKENS,
        "every turn's usage counted once"
    );
    inputs.shutdown.send(()).unwrap();
    let stopped = exited.recv_timeout(Duration::from_secs(20)).unwrap();
    assert!(stopped.is_ok(), "{stopped:?}");
}
