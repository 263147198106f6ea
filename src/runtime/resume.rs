//! The first turn of a run that resumes an interrupted agent session after a restart: it sends
//! an interruption notice instead of the task, and when the CLI cannot resume (the session is
//! unknown to it) falls back once to a fresh session with the full prompt.

use log::warn;

use crate::agent::{
    AgentEvent, AgentEventKind, AgentRunner, AgentSession, CancelToken, Emit, SessionContext,
    TurnResult,
};

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
        let notice = format!(
            "Your previous run on GitHub issue {} was interrupted: the Baton service restarted \
             while you were working, and this is the same conversation resumed. Commands that \
             were running were stopped. {}",
            ctx.issue_identifier,
            super::worker::CARRY_ON
        );
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::AgentError;
    use crate::agent::AgentErrorKind;
    use crate::host::LocalHost;
    use std::sync::{Arc, Mutex};

    /// What the fake runner saw: (resume id at start, prompts of each turn).
    type Calls = Arc<Mutex<Vec<(Option<String>, Vec<String>)>>>;

    /// A runner whose sessions know only `known` (a resume of anything else fails without
    /// output, like `claude --resume <unknown>`), or with `replace` act like Copilot's adapter:
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
        fn run_turn(&mut self, prompt: &str, _: &CancelToken, emit: &mut Emit) -> TurnResult {
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
        let runner = FakeRunner {
            known,
            replace,
            calls: Arc::clone(&calls),
        };
        let ctx = SessionContext {
            issue_identifier: "acme__app-1".into(),
            workspace: "/ws/acme__app-1".into(),
            workspace_root: "/ws".into(),
            resume_session_id: Some("sess-1".into()),
            resume_usage: Default::default(),
            host: LocalHost::shared(),
        };
        let mut s = runner.start_session(&ctx).unwrap();
        let cancel = CancelToken::new();
        first_turn(&runner, &ctx, &mut s, "FULL PROMPT", &cancel, &mut |_| {}).unwrap();
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
