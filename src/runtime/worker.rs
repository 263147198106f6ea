//! One worker thread per running issue: the §16 attempt algorithm (workspace, `before_run`, agent
//! session, turn loop with an issue refresh between turns, `after_run`) against the
//! `AgentRunner` trait. Progress and agent events go to its run's `Mailbox` (coalesced; see
//! `runtime::mailbox`), and so does its last report, always its exit (even after a panic); the
//! between-turn refresh waits for a fetch batch (`runtime::refresh`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use log::{info, warn};

use crate::agent::{
    argv_safe_prompt, AgentErrorKind, AgentRunner, AgentSession, CancelToken, SessionContext,
};
use crate::host::is_host_unavailable;
use crate::host::Host;
use crate::model::Issue;
use crate::orchestrator::rules;
use crate::orchestrator::{Policy, Resume, WorkerOutcome, WorkerPhase, WorkerProgress};
use crate::workflow::config::HooksConfig;
use crate::workflow::template::PromptTemplate;
use crate::workspace::hooks::{run_configured_hook, HookEnv};
use crate::workspace::{ensure_workspace, remove_workspace_on};

use super::fds;
use super::mailbox::{Mailbox, News};
use super::refresh::{Refreshed, Refresher};

/// Everything one worker run needs; built by the main loop from the config current at dispatch
/// (the fields of `Action::Dispatch`, the config's hooks, turns, template and policy).
pub struct WorkerContext {
    pub run_id: u64,
    pub issue: Issue,
    pub attempt: Option<u32>,
    pub workspace_path: PathBuf,
    pub hooks: HooksConfig,
    pub max_turns: u32,
    pub template: PromptTemplate,
    /// States/labels for the between-turns active check.
    pub policy: Policy,
    pub runner: Arc<dyn AgentRunner>,
    /// Where the between-turn refresh waits for its batch (or is not asked for while the request
    /// gate holds requests).
    pub refresher: Arc<Refresher>,
    pub cancel: CancelToken,
    /// Progress, agent events and the exit, coalesced for the main loop.
    pub mailbox: Arc<Mailbox>,
    /// Where the workspace, the hooks and the agent run.
    pub host: Arc<dyn Host>,
    /// Remove the host's older copy of the workspace first.
    pub stale_workspace: bool,
    /// The agent session of an interrupted run (after a restart).
    pub resume: Option<Resume>,
}

/// What a continued or resumed turn asks first (the task is already in the session's history).
pub(crate) const CARRY_ON: &str = "Re-check the current state first (workspace contents, git \
    status, open pull requests and the issue's project Status), then continue from where you left \
    off: do not start over and do not repeat work that is already done. If the task is complete, \
    make sure the work is delivered (committed, pushed, and the issue moved to its handoff Status \
    as the task instructions say), then stop.";

/// The prompt of turns after the first.
pub fn continuation_prompt(issue: &Issue, turn: u32, max_turns: u32) -> String {
    format!(
        "Continuation turn {turn} of at most {max_turns} for GitHub issue {}. The issue is still \
         in an active state and the original task is above in this conversation. {CARRY_ON}",
        issue.identifier,
    )
}

/// Start the worker thread. On spawn failure the caller reports the exit itself.
pub(crate) fn spawn_worker(ctx: WorkerContext) -> std::io::Result<JoinHandle<()>> {
    let name = format!("worker-{}", ctx.issue.identifier);
    thread::Builder::new().name(name).spawn(move || {
        let (id, ident) = (&ctx.issue.id, &ctx.issue.identifier);
        let _log = crate::runlog::RunLog::new(id, ident).enter();
        let outcome = catch_unwind(AssertUnwindSafe(|| run_attempt(&ctx))).unwrap_or_else(|_| {
            warn!("worker panicked issue_id={id} issue_identifier={ident}");
            WorkerOutcome::Failed("worker panicked".into())
        });
        ctx.mailbox.post(News::Exited(outcome));
    })
}

/// A spawn ran out of descriptors or processes: a WARN, and a retry that is not a failed attempt.
fn resource_exhausted(msg: String) -> WorkerOutcome {
    warn!("event=spawn_resource_exhausted error={msg:?}; retrying without counting an attempt");
    WorkerOutcome::ResourceExhausted(msg)
}

/// The attempt algorithm (baton §16). Returns how the run ended.
pub fn run_attempt(ctx: &WorkerContext) -> WorkerOutcome {
    if let Err(msg) = fds::check_reserve() {
        return resource_exhausted(msg);
    }
    let mut run = Run {
        ctx,
        issue: ctx.issue.clone(),
        workspace: None,
    };
    let root = PathBuf::from(ctx.workspace_path.parent().unwrap_or(Path::new("")));
    let workspace = match run.prepare(&root) {
        Ok(path) => path,
        Err(outcome) => return outcome,
    };
    run.progress(WorkerProgress::Phase(WorkerPhase::Agent));
    let resume = ctx.resume.as_ref();
    let t = resume.map(|r| r.tokens).unwrap_or_default();
    let sctx = SessionContext {
        issue_identifier: ctx.issue.identifier.clone(),
        workspace,
        workspace_root: root, // adapters canonicalize it when they validate the cwd
        resume_session_id: resume.map(|r| r.session.clone()),
        resume_usage: crate::agent::TokenUsage {
            input_tokens: t.input_tokens,
            output_tokens: t.output_tokens,
            cache_read_input_tokens: t.cache_read_input_tokens,
            cache_creation_input_tokens: t.cache_creation_input_tokens,
        },
        host: Arc::clone(&ctx.host),
    };
    let mut session = match ctx.runner.start_session(&sctx) {
        Ok(s) => s,
        Err(e) => {
            run.finish(None);
            return run.classify(format!("agent session startup error: {e}"), false);
        }
    };
    let outcome = run.turns(&mut session, &sctx);
    run.finish(Some(&mut session));
    outcome
}

struct Run<'a> {
    ctx: &'a WorkerContext,
    issue: Issue,
    workspace: Option<PathBuf>,
}

impl Run<'_> {
    fn progress(&self, p: WorkerProgress) {
        self.ctx.mailbox.post(News::Progress(p));
    }

    /// Stop the session, enter Finishing, run `after_run` best-effort.
    fn finish(&self, session: Option<&mut Box<dyn AgentSession>>) {
        if let Some(s) = session {
            s.stop();
        }
        self.progress(WorkerProgress::Phase(WorkerPhase::Finishing));
        if let Some(path) = &self.workspace {
            let after_run = self.ctx.hooks.after_run.as_deref();
            let _ = self.hook("after_run", after_run, path);
        }
    }

    fn hook(&self, kind: &str, script: Option<&str>, path: &Path) -> Result<(), String> {
        let env = HookEnv::for_issue(&self.issue);
        let (host, timeout) = (self.ctx.host.as_ref(), self.ctx.hooks.timeout_ms);
        run_configured_hook(host, kind, script, path, &env, timeout)
    }

    fn failed_or_cancelled(&self, msg: String) -> WorkerOutcome {
        if self.ctx.cancel.is_cancelled() {
            WorkerOutcome::Cancelled
        } else {
            WorkerOutcome::Failed(msg)
        }
    }

    /// A failure on a remote host is a host failure when it is a connection/startup error
    /// (`host_unavailable`), or when the host no longer answers (a dropped connection mid-turn).
    /// `started`: whether the agent process had started.
    fn classify(&self, msg: String, started: bool) -> WorkerOutcome {
        if !started && !self.ctx.cancel.is_cancelled() && fds::is_resource_exhausted(&msg) {
            return resource_exhausted(msg);
        }
        if self.ctx.cancel.is_cancelled() || self.ctx.host.name().is_none() {
            return self.failed_or_cancelled(msg);
        }
        let error = if is_host_unavailable(&msg) {
            msg
        } else {
            match self.ctx.host.probe() {
                Err(e) if started => format!("{msg}; {e}"),
                _ => return WorkerOutcome::Failed(msg),
            }
        };
        WorkerOutcome::HostFailed { started, error }
    }

    /// Ensure the workspace and run `before_run`: its path, or the outcome when the run ends here.
    fn prepare(&mut self, root: &Path) -> Result<PathBuf, WorkerOutcome> {
        let ctx = self.ctx;
        let (host, path, hooks) = (ctx.host.as_ref(), &ctx.workspace_path, &ctx.hooks);
        let (id, ident) = (&ctx.issue.id, &ctx.issue.identifier);
        let env = HookEnv::for_issue(&ctx.issue);
        if ctx.stale_workspace {
            info!(
                "removing a stale workspace issue_id={id} issue_identifier={ident} workspace={} host={}",
                path.display(),
                host.name().unwrap_or("local")
            );
            remove_workspace_on(host, root, path, hooks, &env)
                .map_err(|e| self.classify(format!("workspace error: {e}"), false))?;
        }
        let ws = ensure_workspace(host, root, path, hooks, &env).map_err(|e| {
            log::error!(
                "workspace preparation failed issue_id={id} issue_identifier={ident} workspace={} error={e}",
                path.display()
            );
            self.classify(format!("workspace error: {e}"), false)
        })?;
        if ctx.cancel.is_cancelled() {
            return Err(WorkerOutcome::Cancelled);
        }
        self.hook("before_run", hooks.before_run.as_deref(), &ws.path)
            .map_err(|e| self.classify(format!("before_run hook error: {e}"), false))?;
        self.workspace = Some(ws.path.clone());
        if ctx.cancel.is_cancelled() {
            self.finish(None);
            return Err(WorkerOutcome::Cancelled);
        }
        Ok(ws.path)
    }

    /// The turn loop with the issue refresh between turns; the caller finishes the run.
    fn turns(
        &mut self,
        session: &mut Box<dyn AgentSession>,
        sctx: &SessionContext,
    ) -> WorkerOutcome {
        let ctx = self.ctx;
        let (id, ident) = (&ctx.issue.id, &ctx.issue.identifier);
        let max_turns = ctx.max_turns.max(1);
        for turn in 1..=max_turns {
            self.progress(WorkerProgress::TurnStarted(turn));
            let prompt = match turn {
                1 => match ctx.template.render(&self.issue, ctx.attempt) {
                    Ok(p) => p,
                    Err(e) => return WorkerOutcome::Failed(format!("prompt error: {e}")),
                },
                _ => continuation_prompt(&self.issue, turn, max_turns),
            };
            info!(
                "turn starting issue_id={id} issue_identifier={ident} turn={turn} max_turns={max_turns} session_id={}",
                session.agent_session_id().as_deref().unwrap_or("-")
            );
            let mut on_event = |ev| ctx.mailbox.post(News::Agent(ev));
            let prompt = argv_safe_prompt(&prompt, ident);
            let result = if turn == 1 && sctx.resume_session_id.is_some() {
                let (runner, cancel) = (ctx.runner.as_ref(), &ctx.cancel);
                super::resume::first_turn(runner, sctx, session, &prompt, cancel, &mut on_event)
            } else {
                session.run_turn(&prompt, &ctx.cancel, &mut on_event)
            };
            if let Err(e) = result {
                // A first turn that could not reach the host never started the agent; neither
                // did one whose process could not be spawned.
                let msg = format!("agent turn error: {e}");
                let spawn_failed = e.kind == AgentErrorKind::StartupFailed;
                let started = (turn > 1 || !is_host_unavailable(&msg))
                    && !(spawn_failed && fds::is_resource_exhausted(&msg));
                return self.classify(msg, started);
            }
            if ctx.cancel.is_cancelled() {
                return WorkerOutcome::Cancelled;
            }
            match self.refresh(turn) {
                Err(e) => return self.failed_or_cancelled(e),
                Ok(false) => return WorkerOutcome::Normal,
                Ok(true) => {}
            }
        }
        info!(
            "max_turns reached; ending run issue_id={id} issue_identifier={ident} turns={max_turns}"
        );
        WorkerOutcome::Normal
    }

    /// Re-read the issue after `turn`, from the next fetch batch (see `runtime::refresh`: a
    /// cancel ends the wait at once); `Ok(false)` when the run should end normally. An issue
    /// missing from the answer keeps its previous snapshot (baton §16: `issue = refreshed[0] or
    /// issue`); the next poll's reconciliation stops a run whose issue left the project.
    fn refresh(&mut self, turn: u32) -> Result<bool, String> {
        let ctx = self.ctx;
        let id = &ctx.issue.id;
        let result = match ctx.refresher.refresh(id, &ctx.cancel) {
            Refreshed::Done(result) => result,
            Refreshed::Cancelled => return Err("cancelled during the issue state refresh".into()),
            Refreshed::Held => {
                info!(
                    "event=between_turn_refresh_deferred turn={turn}; tracker requests are held (rate limit or credential back-off) or the refresh did not come: ending the run, its continuation waits for the tracker"
                );
                return Ok(false);
            }
        };
        let refreshed = result.map_err(|e| format!("issue state refresh error: {e}"))?;
        match refreshed.into_iter().find(|i| &i.id == id) {
            Some(fresh) => {
                self.issue = fresh.clone();
                self.progress(WorkerProgress::IssueRefreshed(fresh));
            }
            None => {
                info!("issue missing from the between-turn refresh; keeping its previous snapshot")
            }
        }
        let (policy, issue) = (&ctx.policy, &self.issue);
        if !rules::is_active(policy, issue) || !rules::is_routable(policy, issue) {
            let state = &issue.state;
            info!("issue no longer active/routable; ending run state={state:?}");
            return Ok(false);
        }
        Ok(true)
    }
}
