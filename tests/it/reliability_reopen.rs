//! Issue 12, failures 8 and 9 through the real daemon: an issue moved Done → Todo while its
//! `before_remove` hook runs is not re-dispatched into the directory being deleted. It waits until
//! the removal has finished, then gets a fresh workspace (`after_create` runs again), and
//! `before_remove` saw the full `BATON_ISSUE_*` set.

use crate::support::issues;
use crate::support::stand_ins::TestEnv;
use crate::support::stand_ins::{daemon_options_with, spawn_daemon};
use crate::support::tempdir::TempDir;
use baton::runtime::daemon::{RunnerFactory, TrackerFactory};

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::stand_ins::run;
use baton::agent::{
    AgentError, AgentErrorKind, AgentRunner, AgentSession, CancelToken, Emit, SessionContext,
    TurnResult,
};
use baton::model::Issue;
use baton::runtime::clock::SystemClock;
use baton::tracker::{Tracker, TrackerBudget, TrackerError};
use baton::workflow::config::{ConfigEnv, ServiceConfig};

#[derive(Clone, Default)]
struct Board {
    issues: Arc<Mutex<BTreeMap<String, Issue>>>,
    polls: Arc<AtomicUsize>,
}

impl Board {
    fn set_state(&self, id: &str, state: &str) {
        if let Some(i) = self.issues.lock().unwrap().get_mut(id) {
            i.state = state.into();
        }
    }
    fn in_states(&self, states: &[&str]) -> Vec<Issue> {
        let b = self.issues.lock().unwrap();
        b.values()
            .filter(|i| states.iter().any(|s| s.eq_ignore_ascii_case(&i.state)))
            .cloned()
            .collect()
    }
}

impl Tracker for Board {
    fn fetch_candidate_issues(&self) -> Result<Vec<Issue>, TrackerError> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        Ok(self.in_states(&["Todo", "In Progress"]))
    }
    fn fetch_issues_by_states(&self, states: &[String]) -> Result<Vec<Issue>, TrackerError> {
        let s: Vec<&str> = states.iter().map(String::as_str).collect();
        Ok(self.in_states(&s))
    }
    fn fetch_issue_states_by_ids(&self, ids: &[String]) -> Result<Vec<Issue>, TrackerError> {
        let b = self.issues.lock().unwrap();
        Ok(ids.iter().filter_map(|id| b.get(id).cloned()).collect())
    }
    fn validate(&self) -> Result<(), TrackerError> {
        Ok(())
    }
    fn reset_cache(&self) {}
    fn rate_limit(&self) -> Option<TrackerBudget> {
        None
    }
}

/// Every turn writes `work-<n>.txt` into its workspace, then waits until cancelled.
#[derive(Clone, Default)]
struct Runner {
    sessions: Arc<AtomicUsize>,
}

struct Session {
    n: usize,
    cwd: PathBuf,
}

impl AgentRunner for Runner {
    fn start_session(&self, ctx: &SessionContext) -> Result<Box<dyn AgentSession>, AgentError> {
        let cwd =
            crate::support::stand_ins::validate_workspace_cwd(&ctx.workspace, &ctx.workspace_root)?;
        let n = self.sessions.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(Box::new(Session { n, cwd }))
    }
}

impl AgentSession for Session {
    fn run_turn(&mut self, _: &str, cancel: &CancelToken, _: &mut Emit) -> TurnResult {
        fs::write(self.cwd.join(format!("work-{}.txt", self.n)), "work").unwrap();
        let _ = cancel.receiver().recv_timeout(Duration::from_secs(60));
        Err(AgentError::new(AgentErrorKind::TurnCancelled, "cancelled"))
    }
    fn agent_session_id(&self) -> Option<String> {
        None
    }
    fn stop(&mut self) {}
}

fn wait_until(what: &str, f: impl Fn() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

fn workflow(dir: &Path) -> String {
    let release = dir.join("release");
    format!(
        "---\ntracker:\n  kind: github_projects\n  token: t\n  owner: acme\n  project_number: 1\n\
         polling:\n  interval_ms: 100\nworkspace:\n  root: {root}\nhooks:\n  \
         after_create: \"echo x >> {creates}\"\n  \
         before_remove: |\n    echo \"$BATON_ISSUE_NUMBER $BATON_ISSUE_REPO $BATON_ISSUE_STATUS $BATON_ISSUE_URL\" > {env}\n    \
         touch {entered}\n    while [ ! -f {release} ]; do sleep 0.02; done\n  timeout_ms: 20000\n\
         agent:\n  kind: claude_code\n  max_turns: 1\n---\nWork.\n",
        root = dir.join("ws").display(),
        creates = dir.join("creates.log").display(),
        env = dir.join("before_remove.env").display(),
        entered = dir.join("entered").display(),
        release = release.display(),
    )
}

#[test]
fn reopened_during_before_remove_waits_and_gets_a_fresh_workspace() {
    let dir = TempDir::new("rel-reopen");
    let wf_path = dir.join("WORKFLOW.md");
    fs::write(&wf_path, workflow(&dir)).unwrap();
    let board = Board::default();
    board
        .issues
        .lock()
        .unwrap()
        .insert("I_1".into(), issues::issue(1, "Todo"));
    let runner = Runner::default();
    let env: Arc<dyn ConfigEnv + Send + Sync> = Arc::new(TestEnv::none());
    let (b, r) = (board.clone(), runner.clone());
    let factories: (TrackerFactory, RunnerFactory) = (
        Box::new(move |_: &ServiceConfig| Ok(Arc::new(b.clone()) as Arc<dyn Tracker>)),
        Box::new(move |_: &ServiceConfig| Arc::new(r.clone()) as Arc<dyn AgentRunner>),
    );
    let clock = Arc::new(SystemClock::default());
    let (opts, inputs) = daemon_options_with(&wf_path, env, factories, clock);
    let exited = spawn_daemon(move || run(opts));
    let ws = dir.join("ws").join("acme__repo-1");
    wait_until("the first run's work", || ws.join("work-1.txt").exists());

    board.set_state("I_1", "Done");
    wait_until("before_remove to start", || dir.join("entered").exists());
    board.set_state("I_1", "Todo");
    let polls = board.polls.load(Ordering::SeqCst);
    wait_until("three more polls", || {
        board.polls.load(Ordering::SeqCst) >= polls + 3
    });
    assert_eq!(
        runner.sessions.load(Ordering::SeqCst),
        1,
        "not re-dispatched while its workspace is being removed"
    );
    fs::write(dir.join("release"), "").unwrap();

    wait_until("the second run's work", || ws.join("work-2.txt").exists());
    assert!(!ws.join("work-1.txt").exists(), "a fresh directory");
    let creates = fs::read_to_string(dir.join("creates.log")).unwrap();
    assert_eq!(creates.lines().count(), 2, "after_create ran again");
    let seen = fs::read_to_string(dir.join("before_remove.env")).unwrap();
    assert_eq!(
        seen.trim(),
        "1 acme/repo Done https://github.com/acme/repo/issues/1",
        "before_remove got the full issue variables"
    );
    let leftovers: Vec<_> = fs::read_dir(dir.join("ws"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != ".baton") // the default state directory lives under the root
        .collect();
    assert_eq!(leftovers.len(), 1, "no tombstone left: {leftovers:?}");

    inputs.shutdown.send(()).unwrap();
    assert_eq!(
        exited.recv_timeout(Duration::from_secs(20)).unwrap(),
        Ok(())
    );
}
