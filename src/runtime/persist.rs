//! The daemon's side of durable state (issue 11): take the instance lock and load `state.json`
//! before anything else runs ([`acquire`]), recover at startup (stop orphaned agent groups,
//! restore retries, parked issues and counts, plan session resumes: `Persist::start` and
//! `Persist::apply`), write a projection of the scheduler state after each loop step on a
//! background thread (`Persist::after_step`), flush on shutdown (`Persist::shutdown`), and
//! resume an interrupted agent session on the next dispatch of its issue (`ResumingRunner`).
//!
//! Shutdown freezes the projection: the runs that shutdown stops stay recorded as running with
//! their session ids, so the next start resumes them.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crossbeam_channel::{unbounded, Receiver};
use log::{error, info, warn};

use crate::agent::{
    AgentError, AgentEvent, AgentEventKind, AgentRunner, AgentSession, CancelToken, Emit,
    SessionContext, TurnResult,
};
use crate::durable::{
    lock_holder, recover, stop_orphan_group, BackgroundSaver, ResumeInfo, SaveReport, StateDir,
    StateLock, StateWriter, StoreError, StoredState, WriteOutcome, SCHEMA_VERSION,
};
use crate::model::Issue;
use crate::orchestrator::recovery::{apply_plan, project, Ledger};
use crate::orchestrator::{Event, Millis, OrchestratorState};
use crate::timefmt::unix_millis;
use crate::workflow::config::ServiceConfig;

/// Grace between SIGTERM and SIGKILL when an orphaned agent group is stopped at startup.
const ORPHAN_GRACE: Duration = Duration::from_secs(3);
/// At most one projection of the scheduler state per this many ms (about 0.5 ms for 1,000 known
/// issues in a release build; the loop steps far more often during agent output bursts).
const PROJECT_EVERY_MS: Millis = 100;

fn wall_now() -> u64 {
    unix_millis(SystemTime::now())
}

/// The locked state directory and what it held at startup.
#[derive(Debug)]
pub struct StateHandle {
    dir: StateDir,
    lock: StateLock,
    loaded: StoredState,
}

/// Open `state.dir` (mode 0700), take the instance lock and load `state.json`. Run before
/// anything else at startup. A corrupt file is moved aside (one error names it) and the state
/// starts empty; another holder is [`StoreError::Locked`]; a newer schema version is
/// [`StoreError::VersionUnsupported`] (the file stays as it is).
pub fn acquire(cfg: &ServiceConfig) -> Result<StateHandle, StoreError> {
    let dir = StateDir::open(&cfg.state_dir)?;
    let lock = dir.lock()?;
    if let Some(mode) = dir.loose_permissions() {
        warn!(
            "event=state_dir_permissions state_dir={} mode={mode:o}; it holds session ids and workspace paths, consider chmod 700",
            dir.path().display()
        );
    }
    let loaded = dir.load(wall_now())?;
    if let Some(moved) = &loaded.moved_aside {
        error!(
            "event=state_corrupt file={} moved_to={} error={:?}; starting with an empty state",
            dir.state_file().display(),
            moved.display(),
            loaded.problem.as_deref().unwrap_or("")
        );
    }
    Ok(StateHandle {
        dir,
        lock,
        loaded: loaded.state,
    })
}

/// Durable state of the running daemon.
pub(crate) struct Persist {
    dir: StateDir,
    _lock: StateLock,
    writer: StateWriter,
    saver: Option<BackgroundSaver>,
    /// Finished background writes (the main loop selects on it).
    pub(crate) reports: Receiver<SaveReport>,
    ledger: Ledger,
    /// Sessions to resume on the next dispatch of the issue.
    resumes: BTreeMap<String, ResumeInfo>,
    plan: crate::durable::RecoveryPlan,
    /// When the state was last projected.
    projected_at: Option<Millis>,
    /// The state may have changed since the last projection.
    stale: bool,
}

impl Persist {
    /// Plan recovery from the loaded state, stop the orphaned agent groups, log the startup
    /// summary and start the writer thread. Blocks up to the orphan grace per live orphan.
    pub(crate) fn start(h: StateHandle) -> Persist {
        let plan = recover(&h.loaded, wall_now());
        let mut stopped = 0usize;
        for o in &plan.orphans_to_stop {
            let outcome = stop_orphan_group(o.pgid, o.leader_start_time, ORPHAN_GRACE);
            if outcome.stopped() {
                stopped += 1;
                info!(
                    "event=orphan_stopped issue_id={} issue_identifier={} pgid={} outcome={}",
                    o.issue_id,
                    o.identifier,
                    o.pgid,
                    outcome.as_str()
                );
            } else {
                info!(
                    "event=orphan_check issue_id={} issue_identifier={} pgid={} outcome={}",
                    o.issue_id,
                    o.identifier,
                    o.pgid,
                    outcome.as_str()
                );
            }
        }
        info!(
            "event=state_recovered state_dir={} {}",
            h.dir.path().display(),
            plan.summary_fields(stopped)
        );
        let (tx, reports) = unbounded();
        let saver = match BackgroundSaver::spawn(h.dir.clone(), tx) {
            Ok(s) => Some(s),
            Err(e) => {
                warn!("cannot start the state writer thread; writing on the main loop error={e}");
                None
            }
        };
        let mut writer = StateWriter::default();
        writer.assume_written(h.loaded.issues.clone());
        Persist {
            ledger: Ledger::from_stored(&h.loaded),
            dir: h.dir,
            _lock: h.lock,
            writer,
            saver,
            reports,
            resumes: BTreeMap::new(),
            plan,
            projected_at: None,
            stale: false,
        }
    }

    /// Put the recovered retries, parked issues and counts into the fresh engine state.
    pub(crate) fn apply(&mut self, state: &mut OrchestratorState, now: Millis) {
        self.resumes = apply_plan(state, &self.plan, now, wall_now());
    }

    /// Called with each event before the engine applies it to `state`: fold agent events
    /// (session ids, process groups, usage) into the ledger, and take the last projection before
    /// shutdown changes the state (it stays frozen from then on).
    pub(crate) fn observe(&mut self, ev: &Event, state: &OrchestratorState, now: Millis) {
        let start_time = |pid: u32| crate::durable::leader_start_time(pid);
        match ev {
            Event::Shutdown if !state.shutting_down => self.project_now(state, now),
            Event::AgentUpdate {
                issue_id,
                run_id,
                event,
            } => self.ledger.observe(issue_id, *run_id, event, &start_time),
            Event::AgentUpdates {
                issue_id,
                run_id,
                events,
            } => {
                for e in events {
                    self.ledger.observe(issue_id, *run_id, e, &start_time);
                }
            }
            _ => {}
        }
    }

    /// A run is being dispatched with `runner` for agent `agent`: record it and, when the issue
    /// has an interrupted session of the same agent kind, return a runner that resumes it (and
    /// true).
    pub(crate) fn dispatched(
        &mut self,
        issue: &Issue,
        run_id: u64,
        workspace: &Path,
        host: Option<&str>,
        agent: &str,
        runner: Arc<dyn AgentRunner>,
    ) -> (Arc<dyn AgentRunner>, bool) {
        let resume = self
            .resumes
            .remove(&issue.id)
            .filter(|r| r.agent == agent && r.workspace.as_deref().is_none_or(|w| w == workspace));
        self.ledger.dispatched(
            &issue.id,
            &issue.identifier,
            run_id,
            (agent, host),
            workspace,
            resume.is_some(),
        );
        match resume {
            Some(r) => {
                info!(
                    "event=session_resume issue_id={} issue_identifier={} agent={agent} session_id={}",
                    issue.id, issue.identifier, r.session_id
                );
                let wrapped = ResumingRunner {
                    inner: runner,
                    session_id: r.session_id,
                };
                (Arc::new(wrapped), true)
            }
            None => (runner, false),
        }
    }

    /// After a loop step: project the state (at most every [`PROJECT_EVERY_MS`]; frozen once
    /// shutdown began), offer it, and hand a due write to the writer thread.
    pub(crate) fn after_step(&mut self, state: &OrchestratorState, now: Millis) {
        if !state.shutting_down {
            self.stale = true;
            if self.projection_due().is_none_or(|t| t <= now) {
                self.project_now(state, now);
            }
        }
        self.write_due(now);
    }

    fn projection_due(&self) -> Option<Millis> {
        self.projected_at
            .map(|t| t.saturating_add(PROJECT_EVERY_MS))
    }

    fn project_now(&mut self, state: &OrchestratorState, now: Millis) {
        self.resumes
            .retain(|id, _| state.retry_attempts.contains_key(id));
        let issues = project(state, &mut self.ledger, now, wall_now());
        self.writer.offer(issues, now);
        self.projected_at = Some(now);
        self.stale = false;
    }

    fn write_due(&mut self, now: Millis) {
        let Some(snapshot) = self.writer.take_due(now) else {
            return;
        };
        let snapshot = match &self.saver {
            Some(s) => match s.submit(snapshot) {
                Ok(()) => return,
                Err(back) => back,
            },
            None => snapshot,
        };
        let started = std::time::Instant::now();
        let result = self.dir.save(&snapshot);
        let report = SaveReport {
            state: snapshot,
            result,
            elapsed: started.elapsed(),
        };
        self.finished(report, now);
    }

    /// A background write finished.
    pub(crate) fn finished(&mut self, report: SaveReport, now: Millis) {
        let outcome = self.writer.finish(report.state, report.result, now);
        self.log_outcome(outcome);
    }

    fn log_outcome(&self, outcome: WriteOutcome) {
        match outcome {
            WriteOutcome::Written { recovered: true } => info!(
                "event=state_write_recovered file={}",
                self.dir.state_file().display()
            ),
            WriteOutcome::Failed { error, first } => {
                let msg = format!(
                    "event=state_write_failed file={} error={error}; keeping the in-memory state, retrying later",
                    self.dir.state_file().display()
                );
                if first {
                    error!("{msg}");
                } else {
                    warn!("{msg}");
                }
            }
            _ => {}
        }
    }

    /// When the next projection or coalesced write is due (a main-loop deadline).
    pub(crate) fn next_due(&self) -> Option<Millis> {
        let project = self.projection_due().filter(|_| self.stale);
        match (project, self.writer.next_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Final write before shutdown completes: stop the writer thread, settle its last report,
    /// write what is pending on this thread.
    pub(crate) fn shutdown(&mut self, now: Millis) {
        if let Some(s) = self.saver.take() {
            s.stop();
        }
        while let Ok(r) = self.reports.try_recv() {
            self.finished(r, now);
        }
        let outcome = self.writer.flush(&self.dir, now);
        self.log_outcome(outcome);
    }
}

/// The agent kind as recorded in `state.json` (`claude`, `copilot`, `codex`, `gemini`).
pub(crate) fn agent_name(kind: Option<crate::workflow::config::AgentKind>) -> &'static str {
    match kind {
        Some(crate::workflow::config::AgentKind::ClaudeCode) | None => "claude",
        Some(k) => k.as_str(),
    }
}

/// The prompt of the first turn of a resumed session.
pub fn interrupted_prompt(identifier: &str) -> String {
    format!(
        "Your previous run on GitHub issue {identifier} was interrupted: the Baton service \
         restarted while you were working, and this is the same conversation resumed. Commands \
         that were running were stopped. Re-check the current state first (workspace contents, \
         git status, open pull requests and the issue's project Status), then continue from \
         where you left off: do not start over and do not repeat work that is already done. If \
         the task is complete, make sure the work is delivered (committed, pushed, and the issue \
         moved to its handoff Status as the task instructions say), then stop."
    )
}

/// A runner whose sessions resume the agent session `session_id`: the first turn sends
/// [`interrupted_prompt`] instead of the full prompt. When the CLI cannot resume (unknown
/// session), it falls back once to a fresh session with the full prompt, and logs it.
pub(crate) struct ResumingRunner {
    inner: Arc<dyn AgentRunner>,
    session_id: String,
}

impl AgentRunner for ResumingRunner {
    fn start_session(&self, ctx: &SessionContext) -> Result<Box<dyn AgentSession>, AgentError> {
        let mut resumed = ctx.clone();
        resumed.resume_session_id = Some(self.session_id.clone());
        let session = self.inner.start_session(&resumed)?;
        Ok(Box::new(ResumingSession {
            inner: session,
            runner: Arc::clone(&self.inner),
            ctx: ctx.clone(),
            session_id: self.session_id.clone(),
            first: true,
        }))
    }
}

struct ResumingSession {
    inner: Box<dyn AgentSession>,
    runner: Arc<dyn AgentRunner>,
    ctx: SessionContext,
    session_id: String,
    first: bool,
}

/// Events that show the agent CLI actually ran the resumed conversation.
fn is_agent_output(k: AgentEventKind) -> bool {
    !matches!(
        k,
        AgentEventKind::SessionStarted
            | AgentEventKind::StartupFailed
            | AgentEventKind::TurnFailed
            | AgentEventKind::TurnCancelled
            | AgentEventKind::Malformed
    )
}

impl ResumingSession {
    fn fallback_log(&self, how: &str, why: &str) {
        warn!(
            "event=session_resume_failed issue_identifier={} session_id={} fallback={how} error={why:?}; sending the full prompt",
            self.ctx.issue_identifier, self.session_id
        );
    }
}

impl AgentSession for ResumingSession {
    fn run_turn(&mut self, prompt: &str, cancel: &CancelToken, emit: &mut Emit) -> TurnResult {
        if !std::mem::take(&mut self.first) {
            return self.inner.run_turn(prompt, cancel, emit);
        }
        let mut output = false;
        let first = {
            let mut watch = |ev: AgentEvent| {
                output |= is_agent_output(ev.kind);
                emit(ev);
            };
            self.inner.run_turn(
                &interrupted_prompt(&self.ctx.issue_identifier),
                cancel,
                &mut watch,
            )
        };
        if cancel.is_cancelled() {
            return first;
        }
        let same = self.inner.agent_session_id().as_deref() == Some(self.session_id.as_str());
        match first {
            // The adapter replaced the session (copilot's own fallback): give it the full task.
            _ if !same => {
                self.fallback_log("adapter_new_session", "session unknown to the CLI");
                self.inner.run_turn(prompt, cancel, emit)
            }
            Err(e) if !output => {
                self.fallback_log("new_session", &e.to_string());
                self.inner.stop();
                let mut fresh = self.ctx.clone();
                fresh.resume_session_id = None;
                self.inner = self.runner.start_session(&fresh)?;
                self.inner.run_turn(prompt, cancel, emit)
            }
            other => other,
        }
    }

    fn agent_session_id(&self) -> Option<String> {
        self.inner.agent_session_id()
    }

    fn stop(&mut self) {
        self.inner.stop();
    }
}

/// `baton check`'s state lines, `(tag, text)` with tag `ok`/`warn`/`fail`: where the state
/// directory is, whether a daemon holds its lock, and a summary of `state.json`. Reads only: no
/// lock is taken and nothing is created or moved.
pub fn check_lines(cfg: &ServiceConfig) -> Vec<(&'static str, String)> {
    let dir = &cfg.state_dir;
    if !dir.is_dir() {
        return vec![(
            "ok",
            format!(
                "state dir {} does not exist yet (created at the first start)",
                dir.display()
            ),
        )];
    }
    let mut out = Vec::new();
    out.push(match lock_holder(dir) {
        Some(h) => (
            "ok",
            format!(
                "state dir {}: a daemon holds the lock (pid {})",
                dir.display(),
                h.pid.map_or_else(|| "unknown".into(), |p| p.to_string())
            ),
        ),
        None => (
            "ok",
            format!("state dir {}: no daemon holds the lock", dir.display()),
        ),
    });
    let file = dir.join(crate::durable::store::STATE_FILE);
    match fs::read(&file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            out.push(("ok", "stored state: none yet".to_string()))
        }
        Err(e) => out.push(("warn", format!("stored state {}: {e}", file.display()))),
        Ok(bytes) => out.push(match serde_json::from_slice::<StoredState>(&bytes) {
            Ok(s) if s.schema_version > SCHEMA_VERSION => (
                "fail",
                format!(
                    "state_version_unsupported: {} has schema version {}; this Baton reads up to {SCHEMA_VERSION}",
                    file.display(),
                    s.schema_version
                ),
            ),
            Ok(s) => ("ok", format!("stored state: {}", s.summary())),
            Err(e) => (
                "warn",
                format!(
                    "stored state {} is unreadable ({e}); the daemon will move it aside and start fresh",
                    file.display()
                ),
            ),
        }),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::AgentErrorKind;
    use crate::host::LocalHost;
    use std::sync::Mutex;

    /// What the fake runner saw: (resume id at start, prompts of each turn).
    type Calls = Arc<Mutex<Vec<(Option<String>, Vec<String>)>>>;

    /// A runner whose sessions know only `known` (a resume of anything else fails without
    /// output, like `claude --resume <unknown>`), or with `replace` act like copilot's adapter:
    /// an unknown resume silently continues in a new session id.
    struct FakeRunner {
        known: &'static str,
        replace: bool,
        calls: Calls,
    }

    struct FakeSession {
        id: Option<String>,
        ok: bool,
        calls: Calls,
        idx: usize,
    }

    impl AgentRunner for FakeRunner {
        fn start_session(&self, ctx: &SessionContext) -> Result<Box<dyn AgentSession>, AgentError> {
            let mut calls = self.calls.lock().unwrap();
            calls.push((ctx.resume_session_id.clone(), Vec::new()));
            let known = ctx.resume_session_id.as_deref() == Some(self.known);
            let id = match (&ctx.resume_session_id, known, self.replace) {
                (Some(_), false, true) | (None, _, _) => Some("new-session".to_string()),
                (r, _, _) => r.clone(),
            };
            Ok(Box::new(FakeSession {
                id,
                ok: known || self.replace || ctx.resume_session_id.is_none(),
                calls: Arc::clone(&self.calls),
                idx: calls.len() - 1,
            }))
        }
    }

    impl AgentSession for FakeSession {
        fn run_turn(&mut self, prompt: &str, _cancel: &CancelToken, emit: &mut Emit) -> TurnResult {
            self.calls.lock().unwrap()[self.idx]
                .1
                .push(prompt.to_string());
            if !self.ok {
                emit(AgentEvent::new(
                    AgentEventKind::TurnFailed,
                    "no conversation",
                ));
                return Err(AgentError::new(AgentErrorKind::ProcessExit, "exit 1"));
            }
            emit(AgentEvent::new(AgentEventKind::OtherMessage, "working"));
            Ok(())
        }
        fn agent_session_id(&self) -> Option<String> {
            self.id.clone()
        }
        fn stop(&mut self) {}
    }

    fn run_two_turns(known: &'static str, replace: bool) -> Vec<(Option<String>, Vec<String>)> {
        let calls: Calls = Arc::default();
        let inner = Arc::new(FakeRunner {
            known,
            replace,
            calls: Arc::clone(&calls),
        });
        let runner = ResumingRunner {
            inner,
            session_id: "sess-1".into(),
        };
        let ctx = SessionContext {
            issue_identifier: "acme__app-1".into(),
            workspace: "/ws/acme__app-1".into(),
            workspace_root: "/ws".into(),
            resume_session_id: None,
            host: LocalHost::shared(),
        };
        let mut s = runner.start_session(&ctx).unwrap();
        let cancel = CancelToken::new();
        s.run_turn("FULL PROMPT", &cancel, &mut |_| {}).unwrap();
        s.run_turn("continue", &cancel, &mut |_| {}).unwrap();
        let out = calls.lock().unwrap().clone();
        out
    }

    #[test]
    fn a_known_session_is_resumed_with_the_interruption_prompt() {
        let calls = run_two_turns("sess-1", false);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].0.as_deref(), Some("sess-1"));
        assert!(calls[0].1[0].contains("was interrupted"), "{calls:?}");
        assert_eq!(calls[0].1[1], "continue");
    }

    #[test]
    fn an_unknown_session_falls_back_once_to_a_fresh_one_with_the_full_prompt() {
        let calls = run_two_turns("other", false);
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert_eq!(calls[1].0, None, "fresh session");
        assert_eq!(calls[1].1, ["FULL PROMPT", "continue"]);
    }

    #[test]
    fn an_adapter_that_replaced_the_session_gets_the_full_prompt() {
        let calls = run_two_turns("other", true);
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert!(calls[0].1[0].contains("was interrupted"));
        assert_eq!(calls[0].1[1..], ["FULL PROMPT", "continue"]);
    }
}
