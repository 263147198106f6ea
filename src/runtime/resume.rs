//! The first turn of a run that resumes an interrupted agent session after a restart: it sends
//! [`interrupted_prompt`] instead of the task, and when the CLI cannot resume (the session is
//! unknown to it) falls back once to a fresh session with the full prompt.

use log::warn;

use crate::agent::{
    AgentEvent, AgentEventKind, AgentRunner, AgentSession, CancelToken, Emit, SessionContext,
    TurnResult,
};

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

/// Run the first turn of `session`, started with `ctx.resume_session_id`: the interruption
/// notice first; the full `prompt` in the same session when the adapter replaced the session
/// itself, or in a fresh session (started with `runner`) when the resume failed before the agent
/// produced anything.
pub(crate) fn first_turn(
    runner: &dyn AgentRunner,
    ctx: &SessionContext,
    session: &mut Box<dyn AgentSession>,
    prompt: &str,
    cancel: &CancelToken,
    emit: &mut Emit,
) -> TurnResult {
    let resumed = ctx.resume_session_id.clone().unwrap_or_default();
    let mut output = false;
    let first = {
        let mut watch = |ev: AgentEvent| {
            output |= !matches!(
                ev.kind,
                AgentEventKind::SessionStarted
                    | AgentEventKind::StartupFailed
                    | AgentEventKind::TurnFailed
                    | AgentEventKind::TurnCancelled
                    | AgentEventKind::Malformed
            );
            emit(ev);
        };
        let notice = interrupted_prompt(&ctx.issue_identifier);
        session.run_turn(&notice, cancel, &mut watch)
    };
    if cancel.is_cancelled() {
        return first;
    }
    let fallback = |how: &str, why: &str| {
        warn!(
            "event=session_resume_failed issue_identifier={} session_id={resumed} fallback={how} error={why:?}; sending the full prompt",
            ctx.issue_identifier
        );
    };
    match first {
        // The adapter replaced the session (Copilot's own fallback): give it the full task.
        _ if session.agent_session_id().as_deref() != Some(resumed.as_str()) => {
            fallback("adapter_new_session", "session unknown to the CLI");
            session.run_turn(prompt, cancel, emit)
        }
        Err(e) if !output => {
            fallback("new_session", &e.to_string());
            session.stop();
            let fresh = SessionContext {
                resume_session_id: None,
                resume_usage: Default::default(),
                ..ctx.clone()
            };
            *session = runner.start_session(&fresh)?;
            session.run_turn(prompt, cancel, emit)
        }
        other => other,
    }
}
