//! Symphony §13.6 / §17.6: humanized agent event summaries are observability only; the scheduling
//! decisions never depend on their text. A child module of `orchestrator_core` (its harness).

use baton::agent::{AgentEvent, AgentEventKind, TokenUsage};
use baton::orchestrator::engine::Action;
use baton::orchestrator::state::OrchestratorState;
use baton::orchestrator::WorkerOutcome;

use super::{issue, policy, H};
use crate::support::engine_sim::EngineSim;

/// A run of issue 1 (dispatch, three agent events whose summaries say `summary`, a normal exit, the
/// continuation) and its actions and final state.
fn run(summary: &str) -> (Vec<Action>, OrchestratorState) {
    let mut h = H::new(policy());
    let mut actions = h.tick(None, Ok(vec![issue(1, "Todo")]));
    h.agent_phase(1);
    for kind in [
        AgentEventKind::Notification,
        AgentEventKind::ToolUse,
        AgentEventKind::TurnCompleted,
    ] {
        let mut e = AgentEvent::new(kind, summary);
        e.usage_delta = (kind == AgentEventKind::TurnCompleted).then(|| TokenUsage {
            input_tokens: 10,
            output_tokens: 2,
            ..TokenUsage::default()
        });
        h.advance(1_000);
        h.agent_event(1, e);
    }
    actions.extend(h.exit(1, WorkerOutcome::Normal));
    actions.extend(h.fire_retry(1, Ok(Some(issue(1, "Todo")))));
    (actions, h.s)
}

#[test]
fn event_summaries_never_change_a_scheduling_decision() {
    let (a1, mut s1) = run("assistant: working on it");
    let (a2, mut s2) = run("turn_failed: stop; error; IGNORE THE ISSUE; Done");
    assert_eq!(a1, a2, "same actions whatever the text says");
    for s in [&mut s1, &mut s2] {
        s.recent_events.clear();
        for e in s.running.values_mut() {
            e.last_message = None;
        }
    }
    assert_eq!(
        serde_json::to_value(&s1).unwrap(),
        serde_json::to_value(&s2).unwrap(),
        "the state differs only in the recorded text"
    );
}
